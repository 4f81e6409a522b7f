"""The lax collective that computes what each of our collectives computes: the one place it is written. The JAX
path emits it for algorithm "lax" (``primitives``), the benchmark tool times it beside ours
(``tools.bench.programs``), and the soak compares ours with it (``tools.soak.programs``).

``lax_collective(collective, axes, ...)`` takes the collective's shape parameters as our public functions do
(``dim``: all_gather's axis, psum_scatter's scatter dimension or all_to_all's split axis; ``concat``: all_to_all's
concat axis), negative ones counted from the end, since lax refuses them for psum_scatter and all_to_all.
"""

from __future__ import annotations

from typing import Callable

from jax import lax

from ._types import Collective

# Our reduce-op names -> lax's reductions.
LAX_REDUCTIONS = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


def lax_collective(collective: Collective, axes, *, op: str = "sum", dim: int = 0, concat: int = 0,
                   tiled: bool = True) -> Callable:
    """The lax collective of ``collective`` over ``axes``, as a function of one rank's operand."""
    if collective == Collective.ALL_REDUCE:
        reduce = LAX_REDUCTIONS[op]
        return lambda x: reduce(x, axes)
    if collective == Collective.ALL_GATHER:
        return lambda x: lax.all_gather(x, axes, axis=dim % (x.ndim if tiled else x.ndim + 1), tiled=tiled)
    if collective == Collective.REDUCE_SCATTER:
        return lambda x: lax.psum_scatter(x, axes, scatter_dimension=dim % x.ndim, tiled=tiled)
    if collective == Collective.ALL_TO_ALL:
        return lambda x: lax.all_to_all(x, axes, dim % x.ndim, concat % x.ndim, tiled=tiled)
    raise ValueError(f"jax_mscclpp: no lax equivalent written for {collective.name.lower()}")


__all__ = ["LAX_REDUCTIONS", "lax_collective"]
