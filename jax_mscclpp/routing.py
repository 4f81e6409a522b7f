"""Which calls of the collectives run lax's own collective instead of ours, and why: one set of rules
(``lax_reason``), applied where a public function is traced, where ``rewrite`` meets a lax collective, and where a
primitive of ours is lowered, each with the facts known there.

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
transposes and started calls take it too (``carriers.lax_reason``; logged by ``log_lax_lowering``); so is a program
manual over some mesh axes only as lowered (a vmap of a shard_map over a mesh axis), and, on GPUs, a mesh without
devices (a shard_map nested without a concrete mesh), which a communicator needs.
"""

from __future__ import annotations

import logging
import math

import jax

from . import _compat, carriers, explain

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


# Where ``lax_reason`` decides a call: a public function being traced, ``rewrite`` meeting a lax collective in a
# jaxpr, a primitive of ours being lowered.
TRACE, REWRITE, LOWERING = "trace", "rewrite", "lowering"


def lax_reason(api_name: str, axes: tuple, leaves=(), *, axis_index_groups=None, op: str | None = None,
               stage: str = TRACE, aval=None, dtype=None, collective=None, mesh_axes: tuple | None = None,
               manual: frozenset | None = None, has_devices: bool | None = None) -> str | None:
    """Why the call ``api_name`` over ``axes`` must run lax's collective, or None when ours runs it, decided at
    ``stage`` from the facts known there; each stage words its reasons as its log and ``explain`` give them.

    - ``TRACE``: a public function over ``axes`` (already checked to be bound) on ``leaves``; ``op``: the reduction
      of a psum/pmax/pmin. A call over axes whose sizes multiply to one is each public function's (``one_rank``).
    - ``REWRITE``: a lax collective on one operand typed ``aval``, which ours would run as ``collective`` with
      ``op``. rewrite binds ours without ``axis_index_groups``, and keeps lax's over axes of size 1.
    - ``LOWERING``: a primitive of ours, ``collective`` with ``op`` on ``dtype``, in a program over a mesh of
      ``mesh_axes`` (in mesh order) that is ``manual`` over some of them; ``has_devices``: on GPUs, whether the mesh
      has its devices (None: not asked).

    ``mesh_axes`` and ``manual`` default to those of the mesh where the caller is being traced."""
    tracing = stage == TRACE
    if axis_index_groups is not None:
        if stage == REWRITE:
            return "axis_index_groups"
        if api_name not in GROUPED:
            return f"axis_index_groups is given (ours composes groups for {', '.join(sorted(GROUPED))} only)"
        if len(axes) != 1:
            return "axis_index_groups over a tuple of axes (ours composes groups over one axis)"
    if not axes:
        return NO_AXES if tracing else "no axes (the collective is the identity)"
    if any(isinstance(a, int) for a in axes):
        return "positional (integer) axes"
    if mesh_axes is None:
        mesh_axes, manual = _compat.mesh_axes()
    # Only a traced call can be over a vmap axis; a lowered primitive's axes are those it was bound over.
    outside = [] if stage == LOWERING else [a for a in axes if a not in manual]
    if outside and tracing and manual and _compat.check_vma_enabled():
        raise NotImplementedError(
            f"{api_name}: axis {outside[0]!r} is a vmap axis inside a jax.shard_map with check_vma=True, which JAX's "
            f"own collectives cannot type either (lax.{api_name} fails there with an AssertionError): pass "
            "check_vma=False to the shard_map (then lax's collective runs it), or reduce over the vmapped "
            "dimension outside the vmap")
    if outside:
        if tracing:
            return f"axis {outside[0]!r} is a vmap axis here, not a manual shard_map axis"
        return f"axis {outside[0]!r} is not a manual shard_map axis here"
    if frozenset(manual) != frozenset(mesh_axes):
        # Ours locates a device by XLA's partition id, which a partially manual program does not have.
        if stage == LOWERING:
            return (f"the program is manual over {sorted(manual, key=repr)} only, not every mesh axis "
                    f"{list(mesh_axes)}")
        if stage == REWRITE:
            return f"the shard_map is manual over {sorted(manual)} only, not every mesh axis"
        return (f"the shard_map is manual over {sorted(manual, key=repr)} only, not every mesh axis "
                f"{sorted(mesh_axes, key=repr)}")
    if has_devices is False:
        return "the mesh is abstract here (no devices): a GPU communicator needs the mesh's devices"
    types = [aval] if aval is not None else [_compat.typeof(leaf) for leaf in leaves if _compat.is_tracer(leaf)]
    for typed in types:
        unreduced = _compat.unreduced_axes(typed) & frozenset(axes)
        if unreduced:
            if tracing:
                return (f"an operand is typed unreduced over {sorted(unreduced, key=repr)} (lax reduces its partial "
                        "sums)")
            return f"the operand is typed unreduced over {sorted(unreduced, key=repr)}"
    if op == "sum" and leaves and all(_is_number(leaf) for leaf in leaves):
        return "every operand is a constant (lax returns x * axis size without a collective)"
    dtype = aval.dtype if aval is not None else dtype
    if dtype is not None:
        dtype_reason = carriers.lax_reason(dtype, collective, op)
        if dtype_reason is not None:
            return dtype_reason
    if stage == REWRITE:
        sizes = _compat.bound_axis_sizes()
        if math.prod(sizes[a] for a in axes) == 1:
            return "axis size 1"
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
