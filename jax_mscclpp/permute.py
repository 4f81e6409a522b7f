"""The permutation collectives: ``ppermute``, ``pshuffle`` and ``pbroadcast``, drop-ins for lax's.

``ppermute`` is one primitive (``permute_p``) over a block of the caller's shape: rank ``src`` of each pair
``(src, dst)`` sends its block to rank ``dst``; a rank that no pair sends to receives zeros, as in lax. Ranks are
row-major over a tuple of axes as the installed lax.ppermute numbers them: in the mesh's order (jax 0.10; newer
releases refuse another order unless ``jax_raise_on_ppermute_sort_diff`` is off, and then take the order named,
as lax.axis_index and all_gather do: ``_compat.ppermute_rank_axes``). The result is typed as lax's (varying over
the axes and every axis the operand varies over); its transpose is the permutation with every pair reversed, as lax's; under
``vmap`` (over an axis that is not one of the collective's) it permutes every element of the batch alike.

The custom call carries the permutation as ``destinations`` (int32[world], -1 where a rank sends nothing), the one
table every rank reads its peers from (ffi/handlers_cpu.cc; the GPU kernel: kernels/collectives/permute.cu).

``pbroadcast`` (every rank gets the block of rank ``source``) is our all_gather of the block and the source's
slice of it: exact bytes for every dtype, differentiable through all_gather's transpose, which gives the source
the sum of every rank's cotangent and the others zeros, as lax's transpose does.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from . import _compat, carriers, collectives, primitives, routing
from ._types import Collective


def _normalized_perm(perm, world: int, api_name: str) -> tuple[tuple[int, int], ...]:
    """``perm`` as a tuple of (source, destination) pairs of ranks in [0, world); ValueError or TypeError with
    what is wrong otherwise (as lax: no two pairs share a source or a destination)."""
    try:
        pairs = [tuple(pair) for pair in perm]
    except TypeError:
        raise TypeError(f"{api_name}: perm must be a sequence of (source, destination) pairs; got {perm!r}") from None
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"{api_name}: perm must be a sequence of (source, destination) pairs; got {pair!r}")
        try:
            src, dst = operator.index(pair[0]), operator.index(pair[1])
        except TypeError:
            raise TypeError(f"{api_name}: perm holds axis indices (integers); got {pair!r}") from None
        for index in (src, dst):
            if not 0 <= index < world:
                raise ValueError(f"{api_name}: perm index {index} is out of range for axis size {world}")
        out.append((src, dst))
    sources, destinations = [s for s, _ in out], [d for _, d in out]
    if len(set(sources)) != len(sources) or len(set(destinations)) != len(destinations):
        raise ValueError(f"{api_name} sources and destinations must be unique, got {perm!r}")
    return tuple(out)


def destinations(perm, world: int) -> np.ndarray:
    """The destination of every rank under ``perm`` (-1: sends nothing), as the custom call carries it."""
    table = np.full(world, -1, np.int32)
    for src, dst in perm:
        table[src] = dst
    return table


def _inverse(perm) -> tuple:
    return tuple((dst, src) for src, dst in perm)


# ---- the primitive --------------------------------------------------------------------------------------------

permute_p = Primitive("mscclpp_permute")


def _impl(*args, **params):
    raise RuntimeError("mscclpp_permute runs only inside jax.shard_map under jax.jit")


permute_p.def_impl(_impl)
permute_p.def_abstract_eval(lambda x, **params: x)  # typed as lax.ppermute: the operand's type


def _lower(platform, ctx, x, *, axes, world, perm, algorithm):
    return primitives._lower(
        platform, ctx, x, collective=Collective.PERMUTE, axes=axes, world=world, op="sum", algorithm=algorithm,
        extra_attrs={"destinations": destinations(perm, world)},
        lax_equivalent=lambda v: lax.ppermute(v, axes, perm), permutation=perm)


primitives.register_lowerings(permute_p, Collective.PERMUTE, _lower)
ad.deflinear2(permute_p, lambda ct, x, *, perm, **params: [permute_p.bind(ct, perm=_inverse(perm), **params)])
batching.primitive_batchers[permute_p] = lambda args, dims, **params: (permute_p.bind(args[0], **params), dims[0])


# ---- the public functions -------------------------------------------------------------------------------------

def ppermute(x, axis_name, perm, *, algorithm: str | None = None):
    """Sends, for every pair ``(source, destination)`` of ``perm``, the block of rank ``source`` to rank
    ``destination``; ranks that receive nothing get zeros: ``lax.ppermute``'s drop-in. ``x`` is a pytree."""
    collectives._check_algorithm(Collective.PERMUTE, algorithm, "ppermute")
    axes, world = collectives._axes_and_world(axis_name, "ppermute")
    pairs = _normalized_perm(perm, world, "ppermute")
    _compat.check_ppermute_perm(perm)
    axes = _compat.ppermute_rank_axes(axes)  # as lax.ppermute numbers the ranks of a tuple of axes
    if world == 1:
        routing.one_rank("ppermute", axes)

    def one(leaf):
        leaf = jnp.asarray(leaf)
        carriers.check(leaf.dtype, "ppermute", Collective.PERMUTE)
        leaf = _compat.make_varying(leaf, axes)
        if world == 1:  # one rank: it keeps its block or, sending nowhere, gets zeros
            return leaf if pairs else jnp.zeros_like(leaf)
        return permute_p.bind(leaf, axes=axes, world=world, perm=pairs, algorithm=algorithm)

    return jax.tree_util.tree_map(one, x)


def pshuffle(x, axis_name, perm, *, algorithm: str | None = None):
    """Rank i receives the block of rank ``perm[i]``; ``perm`` is a permutation of every rank:
    ``lax.pshuffle``'s drop-in."""
    try:
        sources = [operator.index(p) for p in perm]
    except TypeError:
        raise TypeError(f"pshuffle: perm must be a sequence of axis indices (integers); got {perm!r}") from None
    if set(sources) != set(range(len(sources))):
        raise ValueError(f"`perm` does not represent a permutation: {perm}")
    _, world = collectives._axes_and_world(axis_name, "pshuffle")
    if len(sources) != world:
        raise ValueError(f"pshuffle: perm has {len(sources)} entries but the axis size is {world}")
    return ppermute(x, axis_name, list(zip(sources, range(world))), algorithm=algorithm)


def pbroadcast(x, axis_name, source, *, algorithm: str | None = None):
    """Every rank gets the block of rank ``source``: ``lax.pbroadcast``'s drop-in (the result varies over the
    axes, as lax types it). Runs as our all_gather (``algorithm`` is all_gather's)."""
    _, world = collectives._axes_and_world(axis_name, "pbroadcast")
    try:
        source = operator.index(source)
    except TypeError:
        raise TypeError(f"pbroadcast: source must be an axis index (an integer); got {source!r}") from None
    if not 0 <= source < world:
        raise ValueError(f"pbroadcast: source {source} is out of range for axis size {world}")
    gathered = collectives.all_gather(x, axis_name, algorithm=algorithm)
    return jax.tree_util.tree_map(lambda blocks: blocks[source], gathered)
