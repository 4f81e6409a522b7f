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

That translation is correct by construction, but the copy is one more pass over the input and every thread block
waits for it. Once the plan is lowered, ``without_prologues`` takes them out where it can: a read that sees the
prologue's write (the verifier's symbolic run says which, ``verify.writers_of_reads``) reads the same chunk of the
input instead, and the prologue keeps only the copies of output chunks that nothing else writes, with nothing
waiting for them. The result is verified again; a plan where that does not hold keeps its prologues.
"""

from __future__ import annotations

import copy

from ..access import op_accesses, placed_refs, with_ref
from ..errors import VerificationError
from ..ops import WAIT, spec_of
from ..plan_format import drop_channels
from ..program import Chunk
from ..verify import verify_plan, writers_of_reads
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
        self.prologues: dict[int, int] = {}  # rank -> its prologue thread block (add_prologue)

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
        self.prologues[rank] = prologue
        program.rank(rank).copy(dst, src, tb=prologue)
        for tb in range(thread_blocks):
            order.signal(rank, prologue, tb)
            order.wait(rank, prologue, tb)
        for operation in program.operations[first:]:
            operation.src_line = label

    def without_prologues(self, plan: dict) -> dict:
        """``plan`` (lowered from a program whose prologues ``add_prologue`` recorded) with its reads of the moved
        input served from the input itself and its prologues cut to the copies still needed (module docstring);
        ``plan`` itself where any read sees the prologue's copy for some chunks of a reference and not others,
        or where the result does not verify."""
        if not self.prologues:
            return plan
        moved_to = {}  # (rank, buffer, index) where an input chunk moved -> its input index
        for rank in self.prologues:
            place = self.chunk(rank, "input", 0, self.input_chunks)
            for index in range(self.input_chunks):
                moved_to[rank, place.buffer, place.index + index] = index
        lowered = copy.deepcopy(plan)
        for (rank, tb, index, path), writers in writers_of_reads(plan).items():
            from_prologue = [writer is not None and writer.rank == rank and writer.threadblock == self.prologues.get(
                rank) for writer in writers]
            if not any(from_prologue):
                continue
            if not all(from_prologue):
                return plan
            ops = lowered["ranks"][rank]["threadblocks"][tb]["ops"]
            ref = next(place.ref for place in placed_refs(ops[index], rank, lowered["ranks"][rank]["channels"])
                       if place.path == path)
            first = moved_to[rank, ref["buffer"], ref["index"]]
            ops[index] = with_ref(ops[index], path, {"buffer": "input", "index": first, "count": ref["count"]})
        for rank, prologue in self.prologues.items():
            drop_channels(lowered, rank, self._cut_prologue(lowered["ranks"][rank], rank, prologue))
        try:
            return verify_plan(lowered)
        except VerificationError:
            return plan

    def _cut_prologue(self, rank_plan: dict, rank: int, prologue: int) -> None:
        """Drop the prologue's signals and the waits for them; keep its copies of output chunks that no other
        operation writes (out of place the moved input is scratch, which no result needs). Returns the channels
        (of this rank, both ends) that nothing uses any more."""
        channels, blocks = rank_plan["channels"], rank_plan["threadblocks"]
        signalled = {op["channel"] for op in blocks[prologue]["ops"] if "channel" in op}
        released = {channels[channel]["peer_channel"] for channel in signalled}
        written = set()
        for tb, block in enumerate(blocks):
            if tb != prologue:
                block["ops"] = [op for op in block["ops"]
                                if not (spec_of(op["op"]).sync == WAIT and op["channel"] in released)]
                for op in block["ops"]:
                    written.update(op_accesses(op, rank, channels)[1])
        copies = []
        if self.in_place:
            place = self.chunk(rank, "input", 0, self.input_chunks)
            for index in range(self.input_chunks):
                key = (rank, place.buffer, place.index + index)
                if key in written:
                    continue
                if copies and copies[-1]["src"]["index"] + copies[-1]["src"]["count"] == index:
                    copies[-1]["src"]["count"] += 1
                    copies[-1]["dst"]["count"] += 1
                else:
                    copies.append({"op": "copy", "dst": {"buffer": place.buffer, "index": key[2], "count": 1},
                                   "src": {"buffer": "input", "index": index, "count": 1},
                                   "src_line": blocks[prologue]["ops"][0].get("src_line")})
        blocks[prologue]["ops"] = copies
        if not copies and prologue == len(blocks) - 1:
            blocks.pop()
        return signalled | released
