"""The collectives foreign plans name, and how their chunk counts map onto our buffer geometry.

MSCCL-IR (``coll``) and MSCCL++ (``collective``) spell the collectives alike. Both cut every buffer into
chunks of one size; ours cut each block into ``chunks_per_block`` chunks (``geometry.py``), so a foreign
buffer of ``k`` chunks is ours when it holds ``blocks * chunks_per_block`` of them, chunk ``i`` ours ``i``.
"""

from __future__ import annotations

from .. import geometry
from .errors import PlanImportError

# Foreign collective name -> ours.
COLLECTIVE_NAMES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",  # MSCCLang's name in the MSCCL-IR it writes
    "alltoall": "all_to_all",
}


def our_collective(name, element: str, attribute: str) -> str:
    """Our name of the foreign collective ``name``; refused when we have no such collective."""
    if name not in COLLECTIVE_NAMES:
        raise PlanImportError(element, attribute, f"collective {name!r} is not one we run; "
                                                  f"we run {', '.join(COLLECTIVE_NAMES)}")
    return COLLECTIVE_NAMES[name]


def chunks_per_block(collective: str, world_size: int, chunks: int, per_rank_buffer: str, element: str,
                     attribute: str) -> int:
    """Chunks per block when the input (``per_rank_buffer="input"``) or the output holds ``chunks`` chunks,
    or when the larger of the two does (``"larger"``)."""
    input_blocks, output_blocks = geometry.buffer_blocks(collective, world_size)
    blocks = {"input": input_blocks, "output": output_blocks, "larger": max(input_blocks, output_blocks)}
    blocks = blocks[per_rank_buffer]
    if chunks < 1 or chunks % blocks:
        raise PlanImportError(element, attribute, f"{chunks} chunks do not cut the {collective} buffers of "
                                                  f"{world_size} ranks into {blocks} equal blocks")
    return chunks // blocks
