"""``mscclpp.language.rank`` of the channel API: a rank's buffers and local operations, scratch buffers and
semaphores."""

from __future__ import annotations

import dataclasses
import itertools

from . import context
from .errors import UnsupportedConstruct, mistake, require
from .thread_block_group import ThreadBlockGroup, shares
from .trace import BARRIER, COPY, REDUCE, SIGNAL, UNPACK, WAIT, Link, Step
from .types import BufferType, ReduceOperationType, SyncType

__all__ = ["BaseBuffer", "Buffer", "Chunk", "Rank", "Semaphore"]


@dataclasses.dataclass(frozen=True)
class Chunk:
    """``size`` chunks from ``index`` of one buffer of one rank (MSCCL++'s ``Chunk``)."""

    rank: int
    buffer: BufferType
    index: int
    size: int


def span_of(chunk: Chunk):
    """The checked trace span of a chunk of the current program."""
    if not isinstance(chunk, Chunk):
        raise mistake(f"expected a chunk (buffer[start:stop]), got {chunk!r}")
    return context.current().span(chunk.rank, chunk.buffer, chunk.index, chunk.size)


def reduction_is_sum(call: str, reduce_op) -> None:
    require(reduce_op == ReduceOperationType.sum, call, f"reduce_op={reduce_op}: a plan names no reduction, each "
            "call brings its own (jax_mscclpp.all_reduce(op=...)); write the program with the default sum")


class BaseBuffer:
    """A rank's input, output or scratch chunks; a slice (``buffer[start:stop]``) is a Chunk."""

    def __init__(self, rank: int, buffer_type: BufferType, offset: int, size: int):
        self.rank = rank
        self.buffer_type = buffer_type
        self.offset = offset
        self.size = offset + size

    def __getitem__(self, key) -> Chunk:
        if not isinstance(key, slice):
            raise TypeError(f"Buffer indices must be slices, not {type(key).__name__}")
        if key.step not in (None, 1):
            raise ValueError(f"Buffer slicing does not support step != 1 (got step={key.step})")
        start = 0 if key.start is None else key.start
        stop = self.size - self.offset if key.stop is None else key.stop
        if start < 0 or stop <= start or self.offset + stop > self.size:
            raise ValueError(f"chunk slice {start}:{stop} is empty or outside this {self.buffer_type.name} buffer "
                             f"of {self.size - self.offset} chunks")
        return Chunk(self.rank, self.buffer_type, self.offset + start, stop - start)


class Buffer(BaseBuffer):
    """``size`` chunks of ``rank``'s scratch, after the scratch buffers made before on that rank."""

    def __init__(self, rank: int, size: int):
        program = context.current()
        if not 0 <= rank < program.num_ranks:
            raise mistake(f"Buffer: rank {rank} is out of bounds. Number of ranks: {program.num_ranks}")
        offset = program.scratch_allocated[rank]
        program.scratch_allocated[rank] += size
        super().__init__(rank, BufferType.scratch, offset, size)


class Rank:
    """One rank: its buffers and the operations that touch only its own memory."""

    def __init__(self, rank: int):
        program = context.current()
        if not 0 <= rank < program.num_ranks:
            raise mistake(f"Rank {rank} is out of bounds. Number of ranks: {program.num_ranks}")
        self.rank = rank

    def get_input_buffer(self) -> BaseBuffer:
        return BaseBuffer(self.rank, BufferType.input, 0, context.current().input_chunks)

    def get_output_buffer(self) -> BaseBuffer:
        return BaseBuffer(self.rank, BufferType.output, 0, context.current().output_chunks)

    def _local(self, kind: str, call: str, dst_chunk: Chunk, src_chunks: list, tb, tb_group, packet_srcs=()):
        for chunk in [dst_chunk, *src_chunks, *packet_srcs]:
            if not isinstance(chunk, Chunk) or chunk.rank != self.rank:
                raise mistake(f"{call}: {chunk!r} is not a chunk of rank {self.rank}")
            if chunk.size != dst_chunk.size:
                raise mistake(f"{call}: chunk sizes differ ({chunk.size} and {dst_chunk.size})")
        dst = span_of(dst_chunk)
        srcs = [span_of(c) for c in src_chunks]
        packets = [span_of(c) for c in packet_srcs]
        for member, start, stop in shares(call, tb, tb_group, dst.size):
            context.current().record(Step(
                kind, self.rank, member, call, dst=dst.part(start, stop),
                srcs=tuple(s.part(start, stop) for s in srcs), packet_srcs=tuple(p.part(start, stop) for p in packets)))

    def copy(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None, tb_group: ThreadBlockGroup = None):
        self._local(COPY, "Rank.copy", dst_chunk, [src_chunk], tb, tb_group)

    def unpack_packets(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None,
                       tb_group: ThreadBlockGroup = None):
        """dst <- the LL packets in scratch ``src_chunk`` (put there by a peer's put_packets)."""
        if src_chunk.buffer != BufferType.scratch:
            raise mistake("Rank.unpack_packets: source chunk must be of type scratch")
        self._local(UNPACK, "Rank.unpack_packets", dst_chunk, [src_chunk], tb, tb_group)

    def copy_packets(self, dst_chunk: Chunk, src_chunk: Chunk, tb: int = None, tb_group: ThreadBlockGroup = None):
        raise UnsupportedConstruct("Rank.copy_packets", "packing into local scratch has no counterpart: packets are "
                                   "written by a put_packets on a memory channel, straight from the source")

    def reduce(self, src_chunk: Chunk, other_chunks: list, tb: int = None, tb_group: ThreadBlockGroup = None,
               dst_chunk: Chunk = None, reduce_op: ReduceOperationType = ReduceOperationType.sum,
               packet: bool = False):
        """dst (default ``src_chunk``) <- src (+) others; with ``packet``, the others are scratch chunks of LL
        packets."""
        reduction_is_sum("Rank.reduce", reduce_op)
        if not other_chunks:
            raise mistake("Rank.reduce: other chunks empty")
        if packet and any(c.buffer != BufferType.scratch for c in other_chunks):
            raise mistake("Rank.reduce: packet chunks must be of type scratch")
        dst_chunk = src_chunk if dst_chunk is None else dst_chunk
        plain, packets = ([src_chunk], list(other_chunks)) if packet else ([src_chunk, *other_chunks], [])
        self._local(REDUCE, "Rank.reduce", dst_chunk, plain, tb, tb_group, packets)

    def barrier(self, tb_list: list[int]):
        """Every thread block of ``tb_list`` reaches this point before any goes on (one thread block: its own
        threads, which our lowering synchronizes where needed by itself)."""
        if not tb_list:
            raise mistake("Rank.barrier requires at least one thread block")
        if len(tb_list) > 1:
            context.current().record(Step(BARRIER, self.rank, tb_list[0], "Rank.barrier", group=tuple(tb_list)))


_semaphore_ids = itertools.count()


class Semaphore:
    """A counter shared by thread blocks of one rank: ``release`` adds one, ``acquire`` waits for it. It becomes
    a channel from the rank to itself, the k-th acquire receiving the k-th release."""

    def __init__(self, rank: int, initial_value: int):
        program = context.current()
        if not 0 <= rank < program.num_ranks:
            raise mistake(f"Semaphore: rank {rank} is out of bounds. Number of ranks: {program.num_ranks}")
        require(initial_value == 0, "Semaphore(initial_value=...)", "our channel semaphores start each call "
                "balanced at zero; release it first instead of starting it higher")
        self.rank = rank
        self.initial_value = initial_value
        self.link = Link("memory", rank, rank, ("semaphore", next(_semaphore_ids)))

    def acquire(self, tb: int, data_sync: SyncType = SyncType.both):
        context.current().record(Step(WAIT, self.rank, tb, "Semaphore.acquire", link=self.link))

    def release(self, tb: int, data_sync: SyncType = SyncType.both):
        context.current().record(Step(SIGNAL, self.rank, tb, "Semaphore.release", link=self.link))
