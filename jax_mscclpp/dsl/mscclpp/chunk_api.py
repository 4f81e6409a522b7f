"""The chunk API of MSCCL++'s DSL: ``chunk(rank, Buffer.x, index, size)`` refers to chunks, which are put,
signalled, waited for, copied and reduced; ``rank(r).barrier``; ``Json()`` and ``Check()``.

Channels are implicit here: MSCCL++ tells them apart by sender, receiver, type and thread block, a signal on
``sendtb=t`` being received by the wait on ``recvtb=t``. A call names its thread block explicitly (MSCCL++'s
automatic assignment, ``-1``, has no counterpart), and names the destination's buffer and index (``-1`` alone,
the source's own place, is accepted for the buffer and index both left out).
"""

from __future__ import annotations

from . import context
from .errors import UnsupportedConstruct, mistake, require
from .trace import BARRIER, COPY, FLUSH, PUT, REDUCE, SIGNAL, SWITCH_BROADCAST, SWITCH_REDUCE, UNPACK, WAIT, Link, Step
from .types import BufferType, ChannelType, DataFormat

__all__ = ["Check", "Json", "chunk", "rank"]


def chunk(rank: int, buffer: BufferType, index: int, size: int = 1) -> Ref:
    """``size`` chunks from ``index`` of ``buffer`` of ``rank``."""
    context.current().span(rank, buffer, index, size)
    return Ref(rank, buffer, index, size)


def rank(rank: int) -> RankRef:
    return RankRef(rank)


def Json() -> None:  # noqa: N802 (MSCCL++'s name)
    """Print the current program's plan in MSCCL++'s executor JSON format."""
    print(context.current().to_json())


def Check() -> bool:  # noqa: N802 (MSCCL++'s name)
    """True when the current program's plan verifies (it proves the collective's result); VerificationError
    otherwise."""
    context.current().plan()
    return True


def _thread_block(call: str, tb: int) -> int:
    require(tb != -1, call, "automatic thread block assignment (-1) has no counterpart: name the thread block")
    return tb


def _channel(call: str, chan_type: ChannelType) -> str:
    require(chan_type in (ChannelType.memory, ChannelType.port), call,
            f"chan_type={chan_type}: puts, signals and waits travel on memory or port channels")
    return chan_type.value


class RankRef:
    def __init__(self, rank: int):
        self.rank = rank

    def barrier(self, tb_list: list[int]):
        """Every thread block of ``tb_list`` reaches this point before any goes on."""
        if not tb_list:
            raise mistake("barrier requires at least one thread block")
        if len(tb_list) > 1:
            context.current().record(Step(BARRIER, self.rank, tb_list[0], "barrier", group=tuple(tb_list)))


class Ref:
    """``size`` chunks from ``index`` of ``buffer`` of ``rank`` (MSCCL++'s ``Ref``)."""

    def __init__(self, rank: int, buffer: BufferType, index: int, size: int):
        self.rank = rank
        self.buffer = buffer
        self.index = index
        self.size = size

    def __repr__(self) -> str:
        return f"Ref(Buffer:{self.buffer}, Index:{self.index}, Size:{self.size}, Rank:{self.rank})"

    def _span(self):
        return context.current().span(self.rank, self.buffer, self.index, self.size)

    def _place(self, call: str, rank: int, buffer, index: int) -> Ref:
        """The chunks of ``rank`` a call names by ``buffer`` and ``index`` (both left out: this one's place)."""
        if buffer is None and index == -1:
            buffer, index = self.buffer, self.index
        require(isinstance(buffer, BufferType) and index != -1, call, "appending to a named scratch buffer "
                "(index -1) has no counterpart: give Buffer.input, Buffer.output or Buffer.scratch and an index")
        return chunk(rank, buffer, index, self.size)

    def _send(self, call: str, dst: int, buffer, index: int, sendtb: int, chan_type, packets: bool) -> Ref:
        target = self._place(call, dst, buffer, index)
        require(dst != self.rank, call, "a put goes to another rank; copy within a rank")
        require(target.buffer == BufferType.scratch, call, f"puts into rank {dst}'s {target.buffer.name}: peers "
                "write only scratch here (XLA owns input and output); put into Buffer.scratch and copy it on the "
                "receiver after its wait")
        tb = _thread_block(call, sendtb)
        link = Link(_channel(call, chan_type), self.rank, dst, tb)
        context.current().record(Step(PUT, self.rank, tb, call, dst=target._span(), srcs=(self._span(),),
                                      link=link, packets=packets))
        return target

    def put(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1, chan_type=ChannelType.memory) -> Ref:
        """Copy these chunks into rank ``dst``'s scratch; visible there after a signal/wait."""
        return self._send("put", dst, buffer, index, sendtb, chan_type, packets=False)

    def put_packet(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1, src_format=DataFormat.raw,
                   chan_type=ChannelType.memory, temp_buffer=None, temp_buffer_index: int = -1) -> Ref:
        """Write these chunks as LL packets into rank ``dst``'s scratch."""
        require(chan_type == ChannelType.memory, "put_packet", "LL packets travel on memory channels only")
        require(src_format == DataFormat.raw, "put_packet", "packets are not forwarded as packets here: "
                "copy_packet them into a plain chunk, then put_packet that")
        return self._send("put_packet", dst, buffer, index, sendtb, chan_type, packets=True)

    def get(self, src: int, buffer=None, index: int = -1, recvtb: int = -1, chan_type=ChannelType.memory):
        raise UnsupportedConstruct("get", "our channels have no get (a read of a peer's memory): have the peer put "
                                   "the chunk into this rank's scratch and signal")

    def _sync(self, kind: str, call: str, peer: int, tb: int, chan_type) -> None:
        require(peer != self.rank, call, "signals and waits go between two ranks; use rank(r).barrier within one")
        tb = _thread_block(call, tb)
        sender, receiver = (self.rank, peer) if kind != WAIT else (peer, self.rank)
        context.current().record(Step(kind, self.rank, tb, call,
                                      link=Link(_channel(call, chan_type), sender, receiver, tb)))

    def signal(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1, chan_type=ChannelType.memory):
        """Release this thread block's writes to ``dst`` (its puts included) and signal it."""
        self._sync(SIGNAL, "signal", dst, sendtb, chan_type)

    def wait(self, src: int, buffer=None, index: int = -1, recvtb: int = -1, chan_type=ChannelType.memory):
        """Wait for ``src``'s next signal on thread block ``recvtb``'s channel."""
        self._sync(WAIT, "wait", src, recvtb, chan_type)

    def flush(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1, chan_type=ChannelType.port):
        """Wait until this thread block's port puts to ``dst`` have read their sources."""
        require(chan_type == ChannelType.port, "flush", "only port channels flush")
        self._sync(FLUSH, "flush", dst, sendtb, chan_type)

    def _local(self, kind: str, call: str, dst: Ref, srcs: list, tb: int, packet_srcs=()) -> None:
        for ref in [dst, *srcs, *packet_srcs]:
            require(ref.rank == self.rank, call, f"reads or writes rank {ref.rank}'s memory from rank {self.rank}: "
                    "our channels have no remote read; have that rank put the chunk into this rank's scratch")
        context.current().record(Step(kind, self.rank, _thread_block(call, tb), call, dst=dst._span(),
                                      srcs=tuple(s._span() for s in srcs),
                                      packet_srcs=tuple(p._span() for p in packet_srcs)))

    def copy(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1) -> Ref:
        """Copy these chunks to ``buffer[index]`` of this rank."""
        require(dst == self.rank, "copy", "copies stay within a rank; put to another")
        target = self._place("copy", dst, buffer, index)
        self._local(COPY, "copy", target, [self], sendtb)
        return target

    def copy_packet(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1) -> Ref:
        """Unpack the LL packets in these scratch chunks into ``buffer[index]`` of this rank."""
        require(dst == self.rank, "copy_packet", "copies stay within a rank")
        if self.buffer != BufferType.scratch:
            raise mistake("copy_packet: packets are read from Buffer.scratch")
        target = self._place("copy_packet", dst, buffer, index)
        self._local(UNPACK, "copy_packet", target, [self], sendtb)
        return target

    def reduce(self, other_chunkref: Ref, recvtb: int = -1, channel_type=ChannelType.memory) -> Ref:
        """These chunks <- these (+) ``other_chunkref`` (of this rank)."""
        self._local(REDUCE, "reduce", self, [self, other_chunkref], recvtb)
        return self

    def reduce_packet(self, other_chunkref: Ref, recvtb: int = -1) -> Ref:
        """These chunks <- these (+) the LL packets in scratch chunks ``other_chunkref`` (of this rank)."""
        if other_chunkref.buffer != BufferType.scratch:
            raise mistake("reduce_packet: packets are read from Buffer.scratch")
        self._local(REDUCE, "reduce_packet", self, [self], recvtb, packet_srcs=[other_chunkref])
        return self

    def group_load_reduce(self, other_chunkrefs: list, recvtb: int = -1, chan_type=ChannelType.nvls) -> Ref:
        """These chunks <- their reduction with the same chunks of the other ranks, through the switch."""
        group = self._switch_group("group_load_reduce", [ref.rank for ref in other_chunkrefs], chan_type)
        span = self._span()
        context.current().record(Step(SWITCH_REDUCE, self.rank, _thread_block("group_load_reduce", recvtb),
                                      "group_load_reduce", dst=span, srcs=(span,), group=group))
        return self

    def group_store(self, dsts: list, index: int = -1, buffer=None, sendtb: int = -1, chan_type=ChannelType.nvls):
        """These chunks into the same place of every rank of ``dsts``, through the switch."""
        group = self._switch_group("group_store", list(dsts), chan_type)
        span = self._span()
        context.current().record(Step(SWITCH_BROADCAST, self.rank, _thread_block("group_store", sendtb),
                                      "group_store", dst=span, srcs=(span,), group=group))

    def _switch_group(self, call: str, others: list, chan_type) -> tuple:
        require(chan_type == ChannelType.switch, call, "multicast needs chan_type=ChannelType.nvls")
        require(self.buffer == BufferType.scratch, call, f"multicast over {self.buffer.name}: our switch channels "
                "reduce and broadcast scratch only (XLA owns input and output)")
        return tuple(sorted({self.rank, *others}))

    def split(self, num: int) -> list:
        if self.size % num:
            raise mistake(f"split: {self.size} chunks do not split into {num} parts")
        part = self.size // num
        return [Ref(self.rank, self.buffer, self.index + i * part, part) for i in range(num)]

    def group(self, other: Ref) -> Ref:
        if (other.rank, other.buffer) != (self.rank, self.buffer):
            raise mistake("group: chunks of one rank and buffer only")
        start = min(self.index, other.index)
        return Ref(self.rank, self.buffer, start, max(self.index + self.size, other.index + other.size) - start)
