"""In-place foreign plans on our out-of-place buffers.

In place, a foreign plan's input and output are one memory: all-reduce's input is its output; all-gather's
input is block ``rank`` of its output (NCCL's convention, which MSCCL and MSCCL++ follow). Such a plan runs on
the output: its input is copied into its place in the output first, and every reference to the input names that
place (``input_places.py``). Reduce-scatter and all-to-all place their output inside, or over, the input, which
we never write: their result would stay in the copy of the input they run on, so in place they are refused.
"""

from __future__ import annotations

from ..program import Chunk

# Collectives whose input fits inside the output: collective -> output block that holds rank r's input.
_INPUT_BLOCK = {
    "all_reduce": lambda rank: 0,
    "all_gather": lambda rank: rank,
}

SUPPORTED = tuple(_INPUT_BLOCK)


def refusal(collective: str) -> str | None:
    """Why a plan of ``collective`` cannot run in place; None when it can."""
    if collective in SUPPORTED:
        return None
    return (f"in place, {collective}'s output lies within its input, which our executors never write: a plan "
            "that writes its input runs on a copy of it, and the result would stay in that copy; in place we run "
            f"{', '.join(SUPPORTED)}")


def output_place(collective: str, rank: int, chunks_per_block: int, index: int) -> int:
    """The output chunk that input chunk ``index`` of ``rank`` is, in place."""
    return _INPUT_BLOCK[collective](rank) * chunks_per_block + index


def prologue_copy(collective: str, rank: int, chunks_per_block: int) -> tuple[Chunk, Chunk]:
    """(destination, source) of the copy that puts ``rank``'s input into its place in the output."""
    start = output_place(collective, rank, chunks_per_block, 0)
    return Chunk(rank, "output", start, chunks_per_block), Chunk(rank, "input", 0, chunks_per_block)
