"""The block layout of each collective: Python's one owner, used by the primitives and the DSL.

A call moves blocks of ``n`` elements. Its input and its output each hold one block, or one block per rank
(``world`` blocks; block r is for, or from, rank r), as the collective rows of
``kernels/include/jax_mscclpp/codes.def`` say (C++ reads the same rows: ``jax_mscclpp/block_layout.h``;
tests/test_codes.py compares the two)::

    all_reduce      in[n]         -> out[n]
    all_gather      in[n]         -> out[world][n]   (block r from rank r)
    reduce_scatter  in[world][n]  -> out[n]          (block r, reduced over ranks, lands on rank r)
    all_to_all      in[world][n]  -> out[world][n]   (out block r = rank r's in block for me)

``collective`` may be a ``Collective`` or its name (``"all_gather"``).
"""

from __future__ import annotations

from ._codes import CODE_TABLES, Collective

# Collective -> (input holds one block per rank, output holds one block per rank).
_PER_RANK = {Collective(row["code"]): (row["input_per_rank"], row["output_per_rank"])
             for row in CODE_TABLES["collective"]}


def _collective(collective) -> Collective:
    return Collective[collective.upper()] if isinstance(collective, str) else Collective(collective)


def per_rank(collective) -> tuple[bool, bool]:
    """Whether the input, and whether the output, hold one block per rank."""
    return _PER_RANK[_collective(collective)]


def blocks(collective, world: int) -> tuple[int, int]:
    """(input blocks, output blocks) over ``world`` ranks."""
    per_rank_in, per_rank_out = per_rank(collective)
    return (world if per_rank_in else 1), (world if per_rank_out else 1)


def block_count_of(collective, in_elems: int, out_elems: int, world: int) -> int | None:
    """The block's element count from the input and output element counts; None when they do not fit."""
    if world < 1:
        return None
    in_blocks, out_blocks = blocks(collective, world)
    if in_elems % in_blocks:
        return None
    block = in_elems // in_blocks
    return block if out_elems == block * out_blocks else None


def out_shape(collective, in_shape: tuple, world: int) -> tuple:
    """The output shape of the primitive (whose input's leading dimension is the block index when it holds one
    block per rank) for an input of ``in_shape``."""
    per_rank_in, per_rank_out = per_rank(collective)
    block_shape = tuple(in_shape[1:]) if per_rank_in else tuple(in_shape)
    return ((world,) if per_rank_out else ()) + block_shape
