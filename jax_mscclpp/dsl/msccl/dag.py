"""The chunk DAG: every copy and reduce of a program, the versions of the buffer slots they read and write, and
the staleness rule.

A slot is ``(rank, buffer, index)`` after the collective's aliases (``Collective.get_buffer_index``). Each write
makes a new version of a slot; version 0 is what the collective put there. A chunk reference remembers the
versions of its slots when it was made, and may be used only while they are still the latest: a reference to a
slot that was written since is stale, and using it is an error naming both lines. So every read names the version
it reads, a program cannot race by construction, and the operations with their read and written versions form a
DAG whose edges are read-after-write, write-after-read and write-after-write on a slot.

The DAG also keeps the symbolic contents of every slot (``buffers``, as ``Collective.check`` reads them).
"""

from __future__ import annotations

import dataclasses

from .buffers import Buffer, ScratchBuffer, buffer_label, is_scratch
from .errors import program_error

COPY, REDUCE = "copy", "reduce"


@dataclasses.dataclass(eq=False)
class Version:
    """One value of a slot: the operation that wrote it (None: the collective's initial contents) and the
    operations that read it."""

    writer: Operation | None
    readers: list = dataclasses.field(default_factory=list)

    @property
    def src_line(self) -> str | None:
        return self.writer.src_line if self.writer else None


@dataclasses.dataclass(frozen=True)
class SlotRange:
    """``size`` consecutive slots of one buffer of one rank, at the given versions."""

    rank: int
    buffer: object
    index: int
    versions: tuple

    @property
    def size(self) -> int:
        return len(self.versions)

    def slots(self) -> list[tuple]:
        return [(self.rank, self.buffer, self.index + i) for i in range(self.size)]

    def describe(self) -> str:
        span = f"{self.index}" if self.size == 1 else f"{self.index}:{self.index + self.size}"
        return f"rank {self.rank} {buffer_label(self.buffer)}[{span}]"


@dataclasses.dataclass(eq=False)
class Operation:
    """One MSCCLang call: ``dst <- src`` (copy) or ``dst <- dst (+) src`` (reduce). ``old`` is the destination
    before (a reduce reads it), ``dst`` after. ``sendtb``, ``recvtb`` and ``ch`` are as the program gave them
    (-1: unspecified)."""

    seq: int
    kind: str
    src: SlotRange
    old: SlotRange
    dst: SlotRange
    sendtb: int
    recvtb: int
    ch: int
    src_line: str | None

    @property
    def remote(self) -> bool:
        return self.src.rank != self.dst.rank

    def __repr__(self) -> str:
        return f"{self.kind} {self.src.describe()} -> {self.dst.describe()} at {self.src_line}"


class ChunkDAG:
    """The operations of one program, in program order, with the version history of every slot."""

    def __init__(self, collective, num_ranks: int):
        self.collective = collective
        buffers = collective.init_buffers()
        if not isinstance(buffers, list) or len(buffers) != num_ranks:
            raise program_error(f"{type(collective).__name__}.init_buffers must return one dict of buffers per "
                                f"rank ({num_ranks}), got {type(buffers).__name__}")
        for rank_buffers in buffers:
            rank_buffers.setdefault(Buffer.output, [])
        self.buffers = buffers
        # (rank, buffer, index) -> the chunk the collective put there: what version 0 of the slot holds.
        self.initial = {(rank, buffer, index): value for rank, rank_buffers in enumerate(buffers)
                        for buffer, slots in rank_buffers.items() for index, value in enumerate(slots)
                        if value is not None}
        self.operations: list[Operation] = []
        self.history: dict[tuple, list[Version]] = {}

    # Slots and versions ---------------------------------------------------------------------------------

    def resolve(self, rank: int, buffer, index: int) -> tuple:
        """(buffer, index) that ``buffer[index]`` of ``rank`` is, after the collective's aliases."""
        return self.collective.get_buffer_index(rank, buffer, index)

    def slot_list(self, rank: int, buffer, create: bool = False) -> list:
        if not 0 <= rank < len(self.buffers):
            raise program_error(f"rank {rank} is outside a program of {len(self.buffers)} ranks")
        rank_buffers = self.buffers[rank]
        if buffer not in rank_buffers:
            if not (create and is_scratch(buffer)):
                raise program_error(f"rank {rank} has no buffer {buffer_label(buffer)!r}")
            rank_buffers[buffer] = ScratchBuffer(str(buffer))
        return rank_buffers[buffer]

    def versions_of(self, slot: tuple) -> list[Version]:
        return self.history.setdefault(slot, [Version(None)])

    def current(self, rank: int, buffer, index: int, size: int) -> SlotRange:
        """The latest versions of ``size`` slots from ``buffer[index]``, which must exist and hold chunks."""
        slots = self.slot_list(rank, buffer)
        if index < 0 or size < 1 or index + size > len(slots):
            raise program_error(f"rank {rank} {buffer_label(buffer)}[{index}:{index + size}] is outside the "
                                f"buffer's {len(slots)} chunks")
        return SlotRange(rank, buffer, index,
                         tuple(len(self.versions_of((rank, buffer, index + i))) - 1 for i in range(size)))

    def require_fresh(self, ref: SlotRange, taken_at: str | None, role: str) -> None:
        """Raise unless every slot of ``ref`` is still at the version the reference was taken at."""
        for slot, version in zip(ref.slots(), ref.versions):
            history = self.versions_of(slot)
            if len(history) - 1 != version:
                rank, buffer, index = slot
                raise program_error(
                    f"stale chunk reference as {role}: rank {rank} {buffer_label(buffer)}[{index}] was overwritten "
                    f"at {history[version + 1].src_line} after this reference was taken at {taken_at}; use the "
                    "reference the overwriting operation returned, or take a new one with chunk()")

    def require_contents(self, ref: SlotRange, role: str) -> None:
        slots = self.slot_list(ref.rank, ref.buffer)
        for i in range(ref.size):
            if slots[ref.index + i] is None:
                raise program_error(f"{role} rank {ref.rank} {buffer_label(ref.buffer)}[{ref.index + i}] holds no "
                                    "chunk: nothing was written there")

    # Operations ------------------------------------------------------------------------------------------

    def record(self, kind: str, src: SlotRange, dst_rank: int, dst_buffer, dst_index: int, sendtb: int, recvtb: int,
               ch: int, src_line: str | None) -> SlotRange:
        """Append one operation reading ``src`` and writing ``src.size`` slots at ``dst_buffer[dst_index]`` of
        ``dst_rank``; update the slots' contents and versions; return the destination at its new versions."""
        self.require_contents(src, "the source")
        slots = self.slot_list(dst_rank, dst_buffer, create=True)
        if isinstance(slots, ScratchBuffer):
            for i in range(src.size):
                if dst_index + i >= len(slots):
                    slots[dst_index + i] = None
        old = self.current(dst_rank, dst_buffer, dst_index, src.size)
        if kind == REDUCE:
            self.require_contents(old, "the reduce destination")
        new = SlotRange(dst_rank, dst_buffer, dst_index, tuple(v + 1 for v in old.versions))
        operation = Operation(len(self.operations), kind, src, old, new, sendtb, recvtb, ch, src_line)
        sources = self.slot_list(src.rank, src.buffer)
        values = [sources[src.index + i] for i in range(src.size)]  # read before writing: src may overlap dst
        for i, value in enumerate(values):
            if kind == REDUCE:
                value = slots[dst_index + i].reduce(dst_rank, value)
            slots[dst_index + i] = value
        for slot, version in zip(src.slots(), src.versions):
            self.versions_of(slot)[version].readers.append(operation)
        if kind == REDUCE:
            for slot, version in zip(old.slots(), old.versions):
                self.versions_of(slot)[version].readers.append(operation)
        for slot in new.slots():
            self.versions_of(slot).append(Version(operation))
        self.operations.append(operation)
        return new

    def version(self, slot: tuple, version: int) -> Version:
        return self.versions_of(slot)[version]

    def final_version(self, slot: tuple) -> int:
        return len(self.versions_of(slot)) - 1
