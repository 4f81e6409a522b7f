"""Buffer geometry: how each collective cuts a rank's input, output and scratch into blocks and chunks.

Contract with the executors (PLAN.md, "Buffer geometry"): every buffer is ``blocks x chunks_per_block``
chunks, indexed block-major. The executor learns the element count ``count`` of the input buffer at run time;
a block holds ``block_count = count / input blocks`` elements and every chunk of input and output covers
``ce = ceil(block_count / chunks_per_block)`` elements of its block, the tail chunks possibly short or empty.
Scratch chunks always hold ``ce`` elements.
"""

from __future__ import annotations

from .. import layout
from .._codes import Collective

BUFFERS = ("input", "output", "scratch")

# The collectives a plan may implement; a plan of the permutation carries its pairs (PLAN.md, "permutation").
COLLECTIVES = tuple(c.name.lower() for c in Collective)


def buffer_blocks(collective: str, world_size: int) -> tuple[int, int]:
    """(input blocks, output blocks) of a collective over ``world_size`` ranks (the block layout, ``layout.py``)."""
    return layout.blocks(collective, world_size)


def buffer_layout(collective: str, world_size: int, chunks_per_block: int, scratch_chunks: int) -> dict:
    """The plan's ``buffers`` entry (``packets`` of scratch is decided later, by lowering)."""
    input_blocks, output_blocks = buffer_blocks(collective, world_size)
    return {
        "input": {"blocks": input_blocks, "chunks_per_block": chunks_per_block},
        "output": {"blocks": output_blocks, "chunks_per_block": chunks_per_block},
        "scratch": {"blocks": 1, "chunks_per_block": scratch_chunks, "packets": False},
    }


def chunk_total(buffers: dict, buffer: str) -> int:
    """Number of chunks of one buffer of one rank."""
    layout = buffers[buffer]
    return layout["blocks"] * layout["chunks_per_block"]


class ElementGeometry:
    """Element ranges of chunks once the input element count is known."""

    def __init__(self, buffers: dict, count: int):
        input_blocks = buffers["input"]["blocks"]
        if count % input_blocks:
            raise ValueError(f"input count {count} is not a multiple of its {input_blocks} blocks")
        self.chunks_per_block = buffers["input"]["chunks_per_block"]
        self.block_count = count // input_blocks
        self.chunk_elems = -(-self.block_count // self.chunks_per_block) if self.chunks_per_block else 0
        self.sizes = {
            "input": count,
            "output": buffers["output"]["blocks"] * self.block_count,
            "scratch": chunk_total(buffers, "scratch") * self.chunk_elems,
        }

    def span(self, buffer: str, index: int) -> tuple[int, int]:
        """[start, stop) of chunk ``index`` of ``buffer``, in elements."""
        if buffer == "scratch":
            start = index * self.chunk_elems
            return start, start + self.chunk_elems
        block, within = divmod(index, self.chunks_per_block)
        block_end = (block + 1) * self.block_count
        start = min(block * self.block_count + within * self.chunk_elems, block_end)
        return start, min(start + self.chunk_elems, block_end)
