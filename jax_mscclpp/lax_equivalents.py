"""The lax collective that computes what each of our collectives computes: the one place it is written. The JAX
path emits it for algorithm "lax" (``primitives``), the benchmark tool times it beside ours
(``tools.bench.programs``), and the soak compares ours with it (``tools.soak.programs``).

``lax_collective(collective, axes, ...)`` takes the collective's shape parameters as ``public_calls.ours_collective``
does (``collective_specs.SPECS``: their keywords in lax's function), negative dimensions counted from the end, since
lax refuses them for psum_scatter and all_to_all.
"""

from __future__ import annotations

from typing import Callable

from jax import lax

from ._types import Collective
from .collective_specs import SPECS

# Our reduce-op names -> lax's reductions.
LAX_REDUCTIONS = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


# The lax function of each collective but the reductions (``LAX_REDUCTIONS``).
_LAX_FUNCTIONS = {Collective.ALL_GATHER: lax.all_gather, Collective.REDUCE_SCATTER: lax.psum_scatter,
                  Collective.ALL_TO_ALL: lax.all_to_all}


def lax_collective(collective: Collective, axes, *, op: str = "sum", dim: int = 0, concat: int = 0,
                   tiled: bool = True) -> Callable:
    """The lax collective of ``collective`` over ``axes``, as a function of one rank's operand."""
    if collective == Collective.ALL_REDUCE:
        reduce = LAX_REDUCTIONS[op]
        return lambda x: reduce(x, axes)
    function = _LAX_FUNCTIONS.get(collective)
    if function is None:
        raise ValueError(f"jax_mscclpp: no lax equivalent written for {collective.name.lower()}")

    def call(x):
        ndim = x.ndim + 1 if collective == Collective.ALL_GATHER and not tiled else x.ndim  # untiled: a new axis
        given = dict(dim=dim % ndim, concat=concat % ndim, tiled=tiled)
        return function(x, axes, **{p.keyword: given[p.name] for p in SPECS[collective].shape if p.name in given})

    return call


__all__ = ["LAX_REDUCTIONS", "lax_collective"]
