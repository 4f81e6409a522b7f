"""Where a foreign plan's input lives in our buffers, and the prologue that puts it there.

Our executors never write the input buffer (XLA owns it); foreign plans may. A rank's input stays where it is
unless the plan writes it:

* in place, the input and the output are one memory: the input lives in its place in the output
  (``in_place.py``);
* out of place, a rank some step of which writes the rank's input runs on a private copy: a region of the rank's
  scratch, as many chunks as the input, that nothing else uses. Chunk ``i`` of the copy is input chunk ``i``.

Where a rank's input moves, a prologue thread block of the rank copies the input there and signals every other
thread block of the rank, which waits for it before its first step; every reference to the rank's input then
names the copy. Scratch chunks are never shorter than input chunks, so the copy holds all of every chunk.
"""

from __future__ import annotations

from ..program import Chunk
from . import in_place


class InputPlaces:
    """Where each rank's input lives (module docstring).

    ``input_chunks`` is the number of chunks of a rank's input; ``copies`` maps each rank that runs on a private
    copy to the first scratch chunk of the copy (ignored in place).
    """

    def __init__(self, collective: str, chunks_per_block: int, input_chunks: int, in_place_plan: bool,
                 copies: dict[int, int]):
        self.collective = collective
        self.chunks_per_block = chunks_per_block
        self.input_chunks = input_chunks
        self.in_place = in_place_plan
        self.copies = {} if in_place_plan else dict(copies)

    def chunk(self, rank: int, buffer: str, index: int, count: int) -> Chunk:
        """The chunks that a foreign reference to ``count`` chunks of ``rank``'s ``buffer`` from ``index`` names."""
        if buffer == "input" and self.in_place:
            buffer, index = "output", in_place.output_place(self.collective, rank, self.chunks_per_block, index)
        elif buffer == "input" and rank in self.copies:
            buffer, index = "scratch", self.copies[rank] + index
        return Chunk(rank, buffer, index, count)

    def _prologue_copy(self, rank: int) -> tuple[Chunk, Chunk, str] | None:
        """(destination, source, label) of the copy that moves ``rank``'s input; None when it stays."""
        if self.in_place:
            dst, src = in_place.prologue_copy(self.collective, rank, self.chunks_per_block)
            return dst, src, f"in-place prologue of rank {rank}"
        if rank in self.copies:
            whole = self.chunk(rank, "input", 0, self.input_chunks)
            return whole, Chunk(rank, "input", 0, self.input_chunks), f"input-copy prologue of rank {rank}"
        return None

    def add_prologue(self, program, order, rank: int, thread_blocks: int) -> None:
        """Where ``rank``'s input moves: on a new thread block ``thread_blocks`` of the rank, copy the input to
        its place, then release thread blocks ``0 .. thread_blocks-1``, which wait for it before anything else.
        Call it before recording the rank's steps. ``order`` is the program's ``ThreadBlockOrder``."""
        copy = self._prologue_copy(rank)
        if copy is None:
            return
        dst, src, label = copy
        prologue, first = thread_blocks, len(program.operations)
        program.rank(rank).copy(dst, src, tb=prologue)
        for tb in range(thread_blocks):
            order.signal(rank, prologue, tb)
            order.wait(rank, prologue, tb)
        for operation in program.operations[first:]:
            operation.src_line = label
