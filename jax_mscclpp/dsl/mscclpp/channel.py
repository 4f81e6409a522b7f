"""``mscclpp.language.channel`` of the channel API: memory, port and switch channels.

An MSCCL++ channel ``XChannel(dst_rank, src_rank)`` is an endpoint owned by ``src_rank``: through it that rank
puts into ``dst_rank``'s memory, signals it, and waits for its signals, which ``dst_rank`` sends through its own
endpoint toward ``src_rank``; the k-th endpoint one rank makes toward another pairs with the k-th the other
makes back. The calls record trace steps on the channel's two directions (trace.Link); translate.py turns them
into pipes of ours. Peers write only scratch here: XLA owns input and output.
"""

from __future__ import annotations

from . import context
from .errors import UnsupportedConstruct, mistake, require
from .rank import Chunk, reduction_is_sum, span_of
from .thread_block_group import ThreadBlockGroup, shares
from .trace import FLUSH, PUT, SIGNAL, SWITCH_BROADCAST, SWITCH_REDUCE, WAIT, Link, Span, Step
from .types import BufferType, ChannelType, ReduceOperationType, SyncType

__all__ = ["BufferType", "ChannelType", "MemoryChannel", "PortChannel", "ReduceOperationType", "SwitchChannel",
           "SyncType", "ThreadBlockGroup"]


class _Endpoint:
    channel_type: ChannelType

    def __init__(self, dst_rank: int, src_rank: int):
        program = context.current()
        for what, rank in (("Source", src_rank), ("Destination", dst_rank)):
            if not isinstance(rank, int) or not 0 <= rank < program.num_ranks:
                raise mistake(f"{what} rank {rank} is out of bounds. Number of ranks: {program.num_ranks}")
        made = getattr(program, "endpoints_made", None)
        if made is None:
            raise mistake(f"{type(self).__name__} belongs to the channel API: write the program inside "
                          "`with CollectiveProgram(...)`")
        self.channel_id = sum(n for (kind, src, _), n in made.items() if kind == self.channel_type and src == src_rank)
        pair_index = made[self.channel_type, src_rank, dst_rank]
        made[self.channel_type, src_rank, dst_rank] += 1
        self.dst_rank = dst_rank
        self.src_rank = src_rank
        self.outbound = Link(self.channel_type.value, src_rank, dst_rank, pair_index)
        self.inbound = Link(self.channel_type.value, dst_rank, src_rank, pair_index)

    @property
    def _name(self) -> str:
        return type(self).__name__

    def signal(self, tb: int, data_sync: SyncType = SyncType.both, relaxed: bool = False):
        """Release this thread block's writes to ``dst_rank`` and increment its semaphore."""
        context.current().record(Step(SIGNAL, self.src_rank, tb, f"{self._name}.signal", link=self.outbound))

    def wait(self, tb: int, data_sync: SyncType = SyncType.both, relaxed: bool = False):
        """Wait for ``dst_rank``'s next signal toward this rank."""
        context.current().record(Step(WAIT, self.src_rank, tb, f"{self._name}.wait", link=self.inbound))

    def _put(self, call: str, dst_chunk: Chunk, src_chunk: Chunk, tb, tb_group, packets: bool) -> None:
        if not isinstance(src_chunk, Chunk) or src_chunk.rank != self.src_rank:
            raise mistake(f"{call}: the source must be a chunk of rank {self.src_rank}, got {src_chunk!r}")
        if not isinstance(dst_chunk, Chunk) or dst_chunk.rank != self.dst_rank:
            raise mistake(f"{call}: the destination must be a chunk of rank {self.dst_rank}, got {dst_chunk!r}")
        if dst_chunk.size != src_chunk.size:
            raise mistake(f"{call}: destination size {dst_chunk.size} differs from source size {src_chunk.size}")
        require(dst_chunk.buffer == BufferType.scratch, call, f"puts into rank {self.dst_rank}'s "
                f"{dst_chunk.buffer.name}: peers write only scratch here (XLA owns input and output); put into a "
                "scratch Buffer and copy it on the receiver after its wait")
        dst, src = span_of(dst_chunk), span_of(src_chunk)
        for member, start, stop in shares(call, tb, tb_group, dst.size):
            context.current().record(Step(PUT, self.src_rank, member, call, dst=dst.part(start, stop),
                                          srcs=(src.part(start, stop),), link=self.outbound, packets=packets))

    def get(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None, tb_group: ThreadBlockGroup = None):
        raise UnsupportedConstruct(f"{self._name}.get", "our channels have no get (a read of a peer's memory): "
                                   "have the peer put the chunk into this rank's scratch and signal")

    def read_put_packets(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None,
                         tb_group: ThreadBlockGroup = None):
        raise UnsupportedConstruct(f"{self._name}.read_put_packets", "packets are not forwarded as packets here: "
                                   "unpack them (Rank.unpack_packets), then put_packets the data")


class MemoryChannel(_Endpoint):
    """Thread copies over peer memory: plain puts with signal/wait, or LL packets."""

    channel_type = ChannelType.memory

    def put(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None, tb_group: ThreadBlockGroup = None):
        """Copy ``src_chunk`` into ``dst_rank``'s scratch chunk ``dst_chunk``; visible after a signal/wait."""
        self._put(f"{self._name}.put", dst_chunk, src_chunk, tb, tb_group, packets=False)

    def put_packets(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None, tb_group: ThreadBlockGroup = None):
        """Write ``src_chunk`` as LL packets into ``dst_rank``'s scratch chunk ``dst_chunk``."""
        self._put(f"{self._name}.put_packets", dst_chunk, src_chunk, tb, tb_group, packets=True)

    def reduce(self, local_src_chunk: Chunk, remote_src_chunks: list, tb: int = None,
               tb_group: ThreadBlockGroup = None, local_dst_chunk: Chunk = None,
               reduce_op: ReduceOperationType = ReduceOperationType.sum):
        raise UnsupportedConstruct("MemoryChannel.reduce", "it reads peers' memory, and our channels only write "
                                   "it: have each peer put its chunk into this rank's scratch, then Rank.reduce")


class PortChannel(_Endpoint):
    """DMA through the host proxy: an asynchronous put, signal/wait, and flush."""

    channel_type = ChannelType.port

    def put(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int):
        self._put("PortChannel.put", dst_chunk, src_chunk, tb, None, packets=False)

    def flush(self, tb: int, data_sync: SyncType = SyncType.both):
        """Wait until this thread block's puts on the channel have read their sources."""
        context.current().record(Step(FLUSH, self.src_rank, tb, "PortChannel.flush", link=self.outbound))

    def put_with_signal(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int):
        self.put(dst_chunk, src_chunk, tb)
        self.signal(tb)

    def put_with_signal_and_flush(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int):
        self.put_with_signal(dst_chunk, src_chunk, tb)
        self.flush(tb)

    def put_packets(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int):
        raise UnsupportedConstruct("PortChannel.put_packets", "LL packets travel on memory channels only")

    def read_put_packets(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int):
        raise UnsupportedConstruct("PortChannel.read_put_packets", "LL packets travel on memory channels only")


class SwitchChannel:
    """NVLS multicast over one buffer of a group of ranks: our SwitchChannel (on GPUs, emulated by the executor
    with peer copies), over scratch only."""

    def __init__(self, rank_list: list[int], buffer_type: BufferType):
        program = context.current()
        if not rank_list or not all(isinstance(r, int) and 0 <= r < program.num_ranks for r in rank_list):
            raise mistake(f"SwitchChannel: ranks {rank_list} must be ranks of the program")
        require(buffer_type == BufferType.scratch, "SwitchChannel(buffer_type=...)",
                f"multicast over {buffer_type.name}: our switch channels reduce and broadcast scratch only (XLA "
                "owns input and output); copy into a scratch Buffer first")
        self.rank_list = list(rank_list)
        self.group = tuple(sorted(set(rank_list)))
        self.buffer_type = buffer_type
        self.channel_type = ChannelType.switch

    def at_rank(self, rank: int) -> _SwitchView:
        if rank not in self.group:
            raise mistake(f"SwitchChannel: rank {rank} is not a member of {list(self.group)}")
        return _SwitchView(self, rank)

    def _scratch(self, rank: int, buffer_offset: int, size: int) -> Span:
        return context.current().span(rank, BufferType.scratch, buffer_offset, size)

    def reduce(self, rank: int, buffer_offset: int, size: int, dst_chunk: Chunk, tb: int,
               reduce_op: ReduceOperationType = ReduceOperationType.sum):
        """``dst_chunk`` (of ``rank``) <- the reduction over the members of their scratch chunks
        ``[buffer_offset, buffer_offset + size)``."""
        reduction_is_sum("SwitchChannel.reduce", reduce_op)
        self.at_rank(rank)
        context.current().record(Step(SWITCH_REDUCE, rank, tb, "SwitchChannel.reduce", dst=span_of(dst_chunk),
                                      srcs=(self._scratch(rank, buffer_offset, size),), group=self.group))

    def broadcast(self, rank: int, src_chunk: Chunk, buffer_offset: int, size: int, tb: int):
        """Scratch chunks ``[buffer_offset, buffer_offset + size)`` of every member <- ``src_chunk`` of ``rank``."""
        self.at_rank(rank)
        context.current().record(Step(SWITCH_BROADCAST, rank, tb, "SwitchChannel.broadcast",
                                      dst=self._scratch(rank, buffer_offset, size), srcs=(span_of(src_chunk),),
                                      group=self.group))

    def broadcast_packets(self, rank: int, src_chunk: Chunk, buffer_offset: int, size: int, tb: int):
        raise UnsupportedConstruct("SwitchChannel.broadcast_packets", "switch channels carry plain data only")


class _SwitchView:
    """A switch channel seen from one member rank."""

    def __init__(self, channel: SwitchChannel, rank: int):
        self.channel = channel
        self.rank = rank

    def reduce(self, buffer_offset: int, size: int, dst_chunk: Chunk, tb: int,
               reduce_op: ReduceOperationType = ReduceOperationType.sum):
        self.channel.reduce(self.rank, buffer_offset, size, dst_chunk, tb, reduce_op)

    def broadcast(self, src_chunk: Chunk, buffer_offset: int, size: int, tb: int):
        self.channel.broadcast(self.rank, src_chunk, buffer_offset, size, tb)

    def broadcast_packets(self, src_chunk: Chunk, buffer_offset: int, size: int, tb: int):
        self.channel.broadcast_packets(self.rank, src_chunk, buffer_offset, size, tb)
