"""Our public function of each collective as a function of one rank's operand, given the collective's shape
parameters: the one entry through which ``rewrite`` (in place of a lax collective), the benchmark tool and the
soak call ours. It sits above ``collectives`` and ``permute``, whose public functions it calls.

The shape parameters are those ``lax_equivalents.lax_collective`` takes (``dim``: all_gather's axis, psum_scatter's
scatter dimension or all_to_all's split axis; ``concat``: all_to_all's concat axis), and ``to`` (all_gather's
typing of its result) and ``perm`` (the permutation's pairs), which only ``rewrite`` and the permutation use.
"""

from __future__ import annotations

from typing import Callable

from . import collectives, permute
from ._types import Collective

# Each collective's public function, called as (x, axes, shape): shape holds ours_collective's keywords.
_PUBLIC_CALLS = {
    Collective.ALL_REDUCE: lambda x, axes, s: collectives.all_reduce(
        x, axes, op=s["op"], algorithm=s["algorithm"]),
    Collective.ALL_GATHER: lambda x, axes, s: collectives.all_gather(
        x, axes, axis=s["dim"], tiled=s["tiled"], to=s["to"], algorithm=s["algorithm"]),
    Collective.REDUCE_SCATTER: lambda x, axes, s: collectives.psum_scatter(
        x, axes, scatter_dimension=s["dim"], tiled=s["tiled"], algorithm=s["algorithm"]),
    Collective.ALL_TO_ALL: lambda x, axes, s: collectives.all_to_all(
        x, axes, s["dim"], s["concat"], tiled=s["tiled"], algorithm=s["algorithm"]),
    Collective.PERMUTE: lambda x, axes, s: permute.ppermute(x, axes, s["perm"], algorithm=s["algorithm"]),
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
    shape = dict(op=op, dim=dim, concat=concat, tiled=tiled, to=to, perm=perm, algorithm=algorithm)
    return lambda x: call(x, axes, shape)


__all__ = ["ours_collective"]
