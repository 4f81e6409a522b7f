"""In-place foreign plans on our out-of-place buffers.

In place, a foreign plan's input and output are one memory: all-reduce's input is its output; all-gather's
input is block ``rank`` of its output (NCCL's convention, which MSCCL and MSCCL++ follow). Our executors never
write the input, so an in-place plan runs on the output: a prologue thread block copies the input into its
place in the output and signals every other thread block of the rank, which waits for it before its first
step; every reference to the input then names its place in the output. Reduce-scatter and all-to-all place
their output inside, or over, the input, which we cannot write: in place, they are refused.
"""

from __future__ import annotations

from ..program import Chunk

# Collectives whose input fits inside the output: collective -> output block that holds rank r's input.
_INPUT_BLOCK = {
    "all_reduce": lambda rank: 0,
    "all_gather": lambda rank: rank,
}

SUPPORTED = tuple(_INPUT_BLOCK)


def output_place(collective: str, rank: int, chunks_per_block: int, index: int) -> int:
    """The output chunk that input chunk ``index`` of ``rank`` is, in place."""
    return _INPUT_BLOCK[collective](rank) * chunks_per_block + index


def prologue_copy(collective: str, rank: int, chunks_per_block: int) -> tuple[Chunk, Chunk]:
    """(destination, source) of the copy that puts ``rank``'s input into its place in the output."""
    start = output_place(collective, rank, chunks_per_block, 0)
    return Chunk(rank, "output", start, chunks_per_block), Chunk(rank, "input", 0, chunks_per_block)


def add_prologue(program, order, rank: int, thread_blocks: int) -> None:
    """On a new thread block ``thread_blocks`` of ``rank``: copy the input into its place in the output, then
    release thread blocks ``0 .. thread_blocks-1``, which wait for it before anything else. Call it before
    recording the rank's steps. ``order`` is the program's ``ThreadBlockOrder``."""
    prologue, first = thread_blocks, len(program.operations)
    dst, src = prologue_copy(program.collective, rank, program.buffers["input"]["chunks_per_block"])
    program.rank(rank).copy(dst, src, tb=prologue)
    for tb in range(thread_blocks):
        order.signal(rank, prologue, tb)
        order.wait(rank, prologue, tb)
    for operation in program.operations[first:]:
        operation.src_line = f"in-place prologue of rank {rank}"
