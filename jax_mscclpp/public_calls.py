"""Our public function of each collective as a function of one rank's operand, given the collective's shape
parameters: the one entry through which ``rewrite`` (in place of a lax collective), the benchmark tool and the
soak call ours. It sits above ``collectives`` and ``permute``, whose public functions it calls.

The shape parameters, and their keywords in each public function, are the collective's spec's
(``collective_specs.SPECS``): those ``lax_equivalents.lax_collective`` takes, and ``to`` (all_gather's typing of its
result) and ``perm`` (the permutation's pairs), which only ``rewrite`` and the permutation use.
"""

from __future__ import annotations

from typing import Callable

from . import collectives, permute
from ._types import Collective
from .collective_specs import SPECS

# Each collective's public function, called as (x, axes, **its shape parameters' keywords, algorithm=...).
_PUBLIC_CALLS = {
    Collective.ALL_REDUCE: collectives.all_reduce,
    Collective.ALL_GATHER: collectives.all_gather,
    Collective.REDUCE_SCATTER: collectives.psum_scatter,
    Collective.ALL_TO_ALL: collectives.all_to_all,
    Collective.PERMUTE: permute.ppermute,
}


def ours_collective(collective: Collective, axes, *, op: str = "sum", dim: int = 0, concat: int = 0,
                    tiled: bool = True, to: str = "varying", perm=None, algorithm: str | None = None) -> Callable:
    """Our public function of ``collective`` over ``axes``, as a function of one rank's operand (a pytree, as the
    public functions take). ValueError for anything that is not a collective of codes.def, and for the
    permutation without ``perm``."""
    call = _PUBLIC_CALLS.get(collective) if isinstance(collective, Collective) else None
    if call is None:
        known = ", ".join(c.name.lower() for c in _PUBLIC_CALLS)
        raise ValueError(f"jax_mscclpp: {collective!r} is not a collective with a public function; known: {known}")
    if collective == Collective.PERMUTE and perm is None:
        raise ValueError("jax_mscclpp: permute needs perm, its (source, destination) pairs")
    given = dict(op=op, dim=dim, concat=concat, tiled=tiled, to=to, perm=perm)
    keywords = {p.keyword: given[p.name] for p in SPECS[collective].shape}
    return lambda x: call(x, axes, **keywords, algorithm=algorithm)


__all__ = ["ours_collective"]
