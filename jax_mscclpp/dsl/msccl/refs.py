"""Chunk references: what ``chunk()``, ``copy`` and ``reduce`` return, and what programs route.

A reference names ``size`` consecutive slots of one buffer of one rank at the versions it was taken at (dag.py,
the staleness rule). ``copy`` sends its chunks to a rank and place and returns the reference there; ``reduce``
reduces another reference's chunks into this one's, and this reference (now at the new versions) is what it
returns.
"""

from __future__ import annotations

from .buffers import buffer_label, is_scratch
from .dag import COPY, REDUCE, SlotRange
from .errors import program_error, program_line


class Ref:
    """``size`` slots from ``buffer[index]`` of ``rank`` (after the collective's aliases), at known versions."""

    def __init__(self, prog, slots: SlotRange, taken_at: str | None = None):
        self.prog = prog
        self.slots = slots
        self.taken_at = taken_at or program_line()

    rank = property(lambda self: self.slots.rank)
    buffer = property(lambda self: self.slots.buffer)
    index = property(lambda self: self.slots.index)
    size = property(lambda self: self.slots.size)

    def __repr__(self) -> str:
        return f"Ref(Buffer:{self.buffer}, Index:{self.index}, Size:{self.size}, Rank:{self.rank})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Ref) and other.slots == self.slots

    def __hash__(self) -> int:
        return hash(self.slots)

    def _fresh(self, role: str) -> None:
        self.prog.dag.require_fresh(self.slots, self.taken_at, role)

    def _check_link(self, src: int, dst: int) -> None:
        topology = self.prog.topo
        if src != dst and not topology.link(src, dst):
            raise program_error(f"no link from rank {src} to rank {dst} in topology {topology.name}")

    @staticmethod
    def _tb(value, role: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise program_error(f"{role} must be an int >= 0 (or -1: unspecified), got {value!r}")
        return value

    def copy(self, dst: int, buffer=None, index: int = -1, sendtb: int = -1, recvtb: int = -1, ch: int = -1) -> Ref:
        """Send these chunks to ``buffer[index]`` of rank ``dst`` (same buffer and index when both are left
        out; the end of a scratch buffer when only ``index`` is); return the reference there."""
        self._fresh("copy source")
        dag = self.prog.dag
        if buffer is None:
            if index != -1:
                raise program_error("copy: an index needs a buffer")
            buffer, index = self.buffer, self.index
        elif index == -1:
            if not is_scratch(buffer):
                raise program_error(f"copy into {buffer_label(buffer)}: give an index (only scratch buffers append)")
            index = len(dag.slot_list(dst, buffer, create=True))
        buffer, index = dag.resolve(dst, buffer, index)
        self._check_link(self.rank, dst)
        if (dst, buffer, index) == (self.rank, self.buffer, self.index):
            return self  # a copy onto itself does nothing
        slots = dag.record(COPY, self.slots, dst, buffer, index, self._tb(sendtb, "sendtb"),
                           self._tb(recvtb, "recvtb"), self._tb(ch, "ch"), program_line())
        return Ref(self.prog, slots)

    def reduce(self, other: Ref, sendtb: int = -1, recvtb: int = -1, ch: int = -1) -> Ref:
        """These chunks <- these (+) ``other``'s (sent from ``other``'s rank); returns this reference, which now
        names the reduced chunks (other references to these slots are stale)."""
        if not isinstance(other, Ref):
            raise program_error(f"reduce takes a chunk reference, got {other!r}")
        if other.size != self.size:
            raise program_error(f"reduce of {other.size} chunks into {self.size}: the sizes must match")
        self._fresh("reduce destination")
        other._fresh("reduce source")
        self._check_link(other.rank, self.rank)
        self.slots = self.prog.dag.record(REDUCE, other.slots, self.rank, self.buffer, self.index,
                                          self._tb(sendtb, "sendtb"), self._tb(recvtb, "recvtb"), self._tb(ch, "ch"),
                                          program_line())
        self.taken_at = program_line()
        return self

    def split(self, num: int) -> list[Ref]:
        """``num`` references of equal size covering this one."""
        if not isinstance(num, int) or num < 1 or self.size % num:
            raise program_error(f"cannot split a reference of {self.size} chunks into {num!r} parts")
        size = self.size // num
        return [Ref(self.prog, SlotRange(self.rank, self.buffer, self.index + i * size,
                                         self.slots.versions[i * size:(i + 1) * size]), self.taken_at)
                for i in range(num)]

    def group(self, other: Ref) -> Ref:
        """One reference spanning this one and ``other`` (same rank and buffer, adjacent or overlapping)."""
        if (other.rank, other.buffer) != (self.rank, self.buffer):
            raise program_error(f"cannot group {self!r} with {other!r}: they must be in one buffer of one rank")
        first, second = sorted((self, other), key=lambda ref: ref.index)
        if second.index > first.index + first.size:
            raise program_error(f"cannot group {self!r} with {other!r}: there is a gap between them")
        self._fresh("group member")
        other._fresh("group member")
        end = max(first.index + first.size, second.index + second.size)
        return Ref(self.prog, self.prog.dag.current(self.rank, self.buffer, first.index, end - first.index),
                   program_line())

    def _chunk(self, index: int):
        return self.prog.dag.slot_list(self.rank, self.buffer)[self.index + index]

    def get_origin_index(self, index: int = 0) -> int:
        return self._chunk(index).origin_index

    def get_origin_rank(self, index: int = 0) -> int:
        return self._chunk(index).origin_rank

    def get_dst_index(self, index: int = 0) -> int:
        return self._chunk(index).dst_index

    def get_dst_rank(self, index: int = 0) -> int:
        return self._chunk(index).dst_rank

    def print_chunk_info(self, index: int = 0) -> None:
        print(self._chunk(index))


# MSCCLang's name for a chunk reference.
ChunkRef = Ref
