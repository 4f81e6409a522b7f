"""Which calls of the public collectives run lax's own collective instead of ours, and why; decided at trace time.

Ours runs over named axes of a ``shard_map`` that is manual over every mesh axis: each rank is then one device,
found by XLA's partition id. Every other call a lax collective accepts is handed to that lax collective with the
caller's arguments, so it returns what lax returns (or fails as lax fails), and the reason is logged on the
``jax_mscclpp.collectives`` logger at info level:

- ``axis_index_groups`` given over a tuple of axes, or to a collective that does not compose groups (ours composes
  them over one axis for the collectives of ``GROUPED``: ``groups.py``);
- an axis bound by ``vmap`` (outside a shard_map, or inside one with ``check_vma=False``; inside one with
  ``check_vma=True`` lax fails unclearly, so that is a clear ``NotImplementedError`` here), or by a ``shard_map``
  that is manual over only some mesh axes (``axis_names=``);
- an operand typed unreduced over a reduced axis (explicit sharding, ``P(unreduced=...)``): lax reduces its
  partial sums;
- a psum whose leaves are all constants (Python scalars, numpy values): lax returns ``x * axis_size`` without
  a collective, so ``psum(1, axis)`` is the axis size, usable in shapes.

An empty tuple of axes (which shard_map's own transpose and pmap pass) runs lax's collective too, unlogged: it
exchanges nothing. So does a call over axes whose sizes multiply to one (``ONE_RANK``), which each public function
computes itself, typed as lax types it. ``explain`` lists every such call (``explain.NO_EXCHANGE``), and the lax
collectives the package binds at trace time are bound under its name scope (``lax_scope``), by which ``explain``
tells them from the program's own. Unknown axes stay errors (``NameError``) here, as everywhere in the package. A dtype ours has no
way for (a reduction no kernel runs) is lax's collective as well, decided where the primitive is lowered, so that
transposes and started calls take it too (``carriers.lax_reason``; logged by ``log_lax_lowering``).
"""

from __future__ import annotations

import logging

import jax

from . import _compat, explain

logger = logging.getLogger("jax_mscclpp.collectives")

# The reason of a call over no axes: lax's collective is then the identity (psum) or its world-of-one shape
# (all_gather adds no axis); nothing is exchanged, so nothing is logged.
NO_AXES = "no axes"
# The reason of a call over axes whose sizes multiply to one.
ONE_RANK = "axis size 1: nothing to exchange"


def lax_scope(api_name: str):
    """The name scope of a lax collective the package binds at trace time for ``jax_mscclpp.<api_name>``."""
    return jax.named_scope(explain.LAX_SCOPE + api_name)


def one_rank(api_name: str, axes: tuple) -> None:
    """Notes, for ``explain``, a call over axes whose sizes multiply to one (nothing is exchanged)."""
    explain.record(api_name, axes, None, None, explain.NO_EXCHANGE, ONE_RANK)


# The public functions that run ``axis_index_groups=`` over one axis themselves (``groups.py``).
GROUPED = frozenset({"psum", "pmax", "pmin", "pmean", "all_gather", "psum_scatter", "all_to_all", "psum_start",
                     "all_reduce_residual", "all_reduce_residual_rmsnorm"})


def lax_reason(api_name: str, axes: tuple, leaves=(), *, axis_index_groups=None, op: str | None = None) -> str | None:
    """Why the call ``api_name`` over ``axes`` (already checked to be bound) on ``leaves`` must run lax's
    collective, or None when ours runs it. ``op``: the reduction of a psum/pmax/pmin."""
    if axis_index_groups is not None and api_name not in GROUPED:
        return f"axis_index_groups is given (ours composes groups for {', '.join(sorted(GROUPED))} only)"
    if axis_index_groups is not None and len(axes) != 1:
        return "axis_index_groups over a tuple of axes (ours composes groups over one axis)"
    if not axes:
        return NO_AXES
    mesh_axes, manual = _compat.mesh_axes()
    outside = [a for a in axes if a not in manual]
    if outside and manual and _compat.check_vma_enabled():
        raise NotImplementedError(
            f"{api_name}: axis {outside[0]!r} is a vmap axis inside a jax.shard_map with check_vma=True, which JAX's "
            f"own collectives cannot type either (lax.{api_name} fails there with an AssertionError): pass "
            "check_vma=False to the shard_map (then lax's collective runs it), or reduce over the vmapped "
            "dimension outside the vmap")
    if outside:
        return f"axis {outside[0]!r} is a vmap axis here, not a manual shard_map axis"
    if manual != mesh_axes:
        return (f"the shard_map is manual over {sorted(manual, key=repr)} only, not every mesh axis "
                f"{sorted(mesh_axes, key=repr)}")
    for leaf in leaves:
        if not _compat.is_tracer(leaf):
            continue
        unreduced = _compat.unreduced_axes(_compat.typeof(leaf)) & frozenset(axes)
        if unreduced:
            return f"an operand is typed unreduced over {sorted(unreduced, key=repr)} (lax reduces its partial sums)"
    if op == "sum" and leaves and all(_is_number(leaf) for leaf in leaves):
        return "every operand is a constant (lax returns x * axis size without a collective)"
    return None


def _is_number(leaf) -> bool:
    """Whether ``leaf`` is a constant of a numeric type: a Python number, a numpy value or a concrete array."""
    if _compat.is_tracer(leaf) or isinstance(leaf, (str, bytes)):
        return False
    return isinstance(leaf, (int, float, complex)) or getattr(leaf, "dtype", None) is not None


def log_lax(api_name: str, axes: tuple, reason: str) -> None:
    """The log line of a call handed to lax's collective (none for a call over no axes, which exchanges
    nothing)."""
    if reason == NO_AXES:
        explain.record(api_name, axes, None, None, explain.NO_EXCHANGE, reason)
        return
    explain.record(api_name, axes, None, None, "lax", reason)
    logger.info("jax_mscclpp.%s over %s runs lax's collective: %s", api_name, axes, reason)


def log_lax_lowering(collective_name: str, axes: tuple, reason: str) -> None:
    """The log line of a call lowered to lax's collective because of where it is lowered."""
    logger.info("jax_mscclpp %s over %s lowers to lax's collective: %s", collective_name, axes, reason)
