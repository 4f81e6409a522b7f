"""The public collectives: drop-in replacements for the lax collectives inside ``jax.shard_map``.

Each takes a pytree and an axis name or tuple of names (ranks are row-major over them, as in lax), checks its
input at trace time (unknown axis -> NameError, a dtype lax's collective refuses too -> TypeError, unsupported op
or algorithm -> ValueError), reshapes to the block layout of ``primitives.py`` and binds the primitive. Every
other dtype runs: ours, or lax's collective where ours has no way for it (``carriers.py``, decided at lowering).
"""

from __future__ import annotations

import math
import operator

import jax
import jax.numpy as jnp
from jax import lax

from . import _compat, carriers, explain, groups, routing, selection
from ._types import REDUCE_OPS, Collective
from .primitives import all_gather_invariant_p, all_gather_p, all_reduce_p, all_to_all_p, reduce_scatter_p


def _axes_and_world(axis_name, api_name: str) -> tuple[tuple, int]:
    """(axes, world size) of a call over ``axis_name`` (a name or a tuple of names); an empty tuple is a world of
    one, as in lax. Raises a clear error for names that are not bound here, repeated or not names."""
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    for axis in axes:
        try:
            hash(axis)
        except TypeError:
            raise TypeError(
                f"{api_name}: axis_name must be an axis name or a tuple of names; got {axis_name!r}") from None
    bound = _compat.bound_axis_sizes()
    for axis in axes:
        if axis not in bound:
            if not bound:
                raise NameError(
                    f"{api_name}: axis {axis!r} is not bound here; call {api_name} inside jax.shard_map "
                    "(under jax.jit) over a mesh that has this axis"
                )
            raise NameError(f"{api_name}: unknown axis name {axis!r}; axes bound here: {tuple(bound)}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"{api_name}: repeated axis name in {axes}")
    return axes, math.prod(bound[a] for a in axes)


def _lax_route(api_name: str, axis_name, leaves, axis_index_groups, op: str | None = None) -> str | None:
    """Why this call runs lax's collective (logged), or None when ours runs it (``routing.lax_reason``)."""
    axes, _ = _axes_and_world(axis_name, api_name)
    reason = routing.lax_reason(api_name, axes, leaves, axis_index_groups=axis_index_groups, op=op)
    if reason is not None:
        routing.log_lax(api_name, axes, reason)
    return reason


def _groups_of(api_name: str, axis_name, axis_index_groups, *, equal_sizes: bool) -> groups.Groups | None:
    """The checked ``axis_index_groups`` of a call over one axis that ours runs (``groups.check``; noted for
    ``explain``), or None for a plain call (no groups, or the whole axis as one group in axis order)."""
    if axis_index_groups is None:
        return None
    axes, world = _axes_and_world(axis_name, api_name)
    checked = groups.check(api_name, axis_index_groups, world, equal_sizes=equal_sizes)
    if checked is not None:
        explain.record(api_name, axes, None, None, explain.COMPOSED, groups.REASON)
    return checked


def _equal_groups_call(api_name: str, axis_name, axis_index_groups):
    """(axes, world, checked groups or None, the ranks one result spans, their name in errors) of a call that ours
    runs, ``axis_index_groups`` over one axis all of one size (``_groups_of``); a world of one is noted for
    ``explain``."""
    axes, world = _axes_and_world(axis_name, api_name)
    checked = _groups_of(api_name, axis_name, axis_index_groups, equal_sizes=True)
    span, what = (world, "axis size") if checked is None else (checked.size, "group size")
    if world == 1:
        routing.one_rank(api_name, axes)
    return axes, world, checked, span, what


def _check_algorithm(collective: Collective, algorithm, api_name: str) -> None:
    if algorithm is not None and not isinstance(algorithm, str):
        raise TypeError(f"{api_name}: algorithm must be an algorithm's name (a string) or None; got {algorithm!r}")
    selection.check_algorithm(collective, algorithm, api_name)


def _prepare(leaf, axes, api_name, collective: Collective):
    leaf = jnp.asarray(leaf)
    carriers.check(leaf.dtype, api_name, collective)
    return _compat.make_varying(leaf, axes)


# Pytree leaves up to this many bytes are summed together, concatenated into buckets of at most
# _BUCKET_BYTES per dtype (as XLA's all-reduce combiner does): many small gradients cost one launch.
BUCKET_LEAF_BYTES = 1 << 20
BUCKET_BYTES = 64 << 20


def leaf_bytes(leaf) -> int:
    """Bytes of ``leaf`` per rank."""
    return leaf.size * leaf.dtype.itemsize


def has_own_call(leaf) -> bool:
    """Whether ``psum`` gives ``leaf`` a call of its own rather than a share of a bucket."""
    return leaf_bytes(leaf) > BUCKET_LEAF_BYTES or leaf.size == 0


def _buckets(leaves) -> list[list[int]]:
    """Indices of ``leaves`` grouped into calls: small leaves of one dtype and type share a bucket, the others go
    alone. Order within a bucket follows the pytree."""
    calls, open_buckets = [], {}
    for i, leaf in enumerate(leaves):
        if has_own_call(leaf):
            calls.append([i])
            continue
        nbytes = leaf_bytes(leaf)
        key = (leaf.dtype, _compat.varying_axes(_compat.typeof(leaf)))
        bucket = open_buckets.get(key)
        if bucket is None or bucket[1] + nbytes > BUCKET_BYTES:
            bucket = open_buckets[key] = ([], 0)
            calls.append(bucket[0])
        bucket[0].append(i)
        open_buckets[key] = (bucket[0], bucket[1] + nbytes)
    return calls


def bucketed(leaves, axes) -> list[tuple[list[int], jax.Array]]:
    """The calls that reduce ``leaves`` over ``axes``: (indices of the leaves, the call's operand), the operand
    being the leaf itself or the bucket's leaves flattened and concatenated (``_buckets``)."""
    calls = []
    for call in _buckets(leaves):
        parts = [_compat.make_varying(leaves[i], axes) for i in call]
        calls.append((call, parts[0] if len(parts) == 1 else jnp.concatenate([p.reshape(-1) for p in parts])))
    return calls


def unbucketed(leaves, calls, results) -> list:
    """``leaves`` with each call's ``results`` put in place of the leaves it reduced (``bucketed``'s inverse)."""
    out = list(leaves)
    for (call, _), result in zip(calls, results):
        if len(call) == 1:
            out[call[0]] = result
            continue
        offset = 0
        for i in call:
            out[i] = result[offset:offset + leaves[i].size].reshape(leaves[i].shape)
            offset += leaves[i].size
    return out


_REDUCE_API = {"sum": "psum", "max": "pmax", "min": "pmin"}  # the public name of each op, for messages
_LAX_REDUCE = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


def reduce_over_one_rank(leaves, axes, op: str, api_name: str) -> list:
    """``leaves`` reduced over axes whose sizes multiply to one (the call ``api_name``): lax's own reduction, which
    moves no data and types its result as lax does (invariant over ``axes`` where lax makes it so, with lax's
    transpose under ``jax.grad``)."""
    routing.one_rank(api_name, axes)
    with routing.lax_scope(api_name):
        return [_LAX_REDUCE[op](leaf, axes) for leaf in leaves]


def reduction_leaves(x, op: str, api: str, axis_name, algorithm):
    """Checks a reduction's arguments: (leaves, treedef, axes, world), else a clear error at trace time."""
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise ValueError(f"all_reduce: unsupported op {op!r}; supported: {', '.join(REDUCE_OPS)}")
    _check_algorithm(Collective.ALL_REDUCE, algorithm, api)
    axes, world = _axes_and_world(axis_name, api)
    leaves, treedef = jax.tree_util.tree_flatten(x)
    # As lax.psum: booleans are summed as int32 counts.
    leaves = [_counted(jnp.asarray(leaf)) if op == "sum" else jnp.asarray(leaf) for leaf in leaves]
    for leaf in leaves:
        carriers.check(leaf.dtype, api, Collective.ALL_REDUCE, op)
    return leaves, treedef, axes, world


def _counted(leaf):
    return leaf.astype(jnp.int32) if leaf.dtype == jnp.bool_ else leaf


def all_reduce(x, axis_name, *, op: str = "sum", algorithm: str | None = None, axis_index_groups=None):
    """Reduces ``x`` (a pytree) over ``axis_name`` with ``op`` ("sum", "max" or "min"); like ``lax.psum``.

    Small leaves of a pytree are reduced together in one call per dtype (``BUCKET_LEAF_BYTES``). Under ``auto``, a
    sum of a pytree that looks like a training step's gradients runs lax's all-reduces for its large leaves, which
    XLA overlaps with the backward pass (``selection.tree_sum_algorithm``). ``axis_index_groups`` over one axis
    reduce each group (``groups.py``: our all_gather, then the group's members reduced in group order). Calls ours
    cannot run (``routing``: groups over a tuple of axes, vmap axes, constants, unreduced operands, ...) run lax's
    reduction instead."""
    return reduce_tree(x, axis_name, op, algorithm, gradient_rule=True, axis_index_groups=axis_index_groups)


def reduce_tree(x, axis_name, op: str, algorithm: str | None, *, gradient_rule: bool, axis_index_groups=None):
    """``all_reduce``; ``gradient_rule``: whether a gradient-like sum emits lax for its large leaves."""
    api = _REDUCE_API.get(op, "all_reduce") if isinstance(op, str) else "all_reduce"
    if isinstance(op, str) and op in REDUCE_OPS:
        _check_algorithm(Collective.ALL_REDUCE, algorithm, api)
        if _lax_route(api, axis_name, jax.tree_util.tree_leaves(x), axis_index_groups, op) is not None:
            with routing.lax_scope(api):
                return _LAX_REDUCE[op](x, axis_name, axis_index_groups=axis_index_groups)
        checked = _groups_of(api, axis_name, axis_index_groups, equal_sizes=False)
        if checked is not None:
            return grouped_reduce(x, axis_name, op, api, checked)
    leaves, treedef, axes, world = reduction_leaves(x, op, api, axis_name, algorithm)
    if world == 1:
        return jax.tree_util.tree_unflatten(treedef, reduce_over_one_rank(leaves, axes, op, api))
    calls = bucketed(leaves, axes)
    own = [len(call) == 1 and has_own_call(leaves[call[0]]) for call, _ in calls]
    large = algorithm
    if gradient_rule and op == "sum":
        large = selection.tree_sum_algorithm(algorithm, [leaf_bytes(leaves[c[0]]) for (c, _), o in zip(calls, own) if o])
    results = [all_reduce_p.bind(operand, axes=axes, world=world, op=op, algorithm=large if o else algorithm)
               for (_, operand), o in zip(calls, own)]
    return jax.tree_util.tree_unflatten(treedef, unbucketed(leaves, calls, results))


def grouped_reduce(x, axis_name, op: str, api: str, checked: groups.Groups):
    """``x`` (a pytree) reduced with ``op`` over each group of ``checked`` along the one axis ``axis_name``: our
    all_gather of each call's operand (small leaves bucketed, as ``all_reduce``), then ``groups.reduce``."""
    leaves, treedef, axes, _ = reduction_leaves(x, op, api, axis_name, None)
    calls = bucketed(leaves, axes)
    results = [groups.reduce(all_gather(operand, axes), checked, axes[0], op) for _, operand in calls]
    return jax.tree_util.tree_unflatten(treedef, unbucketed(leaves, calls, results))


def psum(x, axis_name, *, algorithm: str | None = None, axis_index_groups=None):
    """Sum over ``axis_name``: ``lax.psum``'s drop-in."""
    return all_reduce(x, axis_name, op="sum", algorithm=algorithm, axis_index_groups=axis_index_groups)


def pmax(x, axis_name, *, algorithm: str | None = None, axis_index_groups=None):
    """Maximum over ``axis_name``: ``lax.pmax``'s drop-in."""
    return all_reduce(x, axis_name, op="max", algorithm=algorithm, axis_index_groups=axis_index_groups)


def pmin(x, axis_name, *, algorithm: str | None = None, axis_index_groups=None):
    """Minimum over ``axis_name``: ``lax.pmin``'s drop-in."""
    return all_reduce(x, axis_name, op="min", algorithm=algorithm, axis_index_groups=axis_index_groups)


def pmean(x, axis_name, *, algorithm: str | None = None, axis_index_groups=None):
    """Mean over ``axis_name``: ``lax.pmean``'s drop-in, our ``psum`` divided by the axis size as lax divides it
    (integer and bool sums become floats, as ``x / n`` makes them). With ``axis_index_groups`` over one axis, each
    group's sum over the group size (every group the same size)."""
    if _lax_route("pmean", axis_name, jax.tree_util.tree_leaves(x), axis_index_groups, "sum") is not None:
        with routing.lax_scope("pmean"):
            return lax.pmean(x, axis_name, axis_index_groups=axis_index_groups)
    checked = _groups_of("pmean", axis_name, axis_index_groups, equal_sizes=True)
    if checked is not None:
        _check_algorithm(Collective.ALL_REDUCE, algorithm, "pmean")
        total = grouped_reduce(x, axis_name, "sum", "pmean", checked)
        return jax.tree_util.tree_map(lambda v: v / checked.size, total)
    total = psum(x, axis_name, algorithm=algorithm)
    _, world = _axes_and_world(axis_name, "pmean")
    return jax.tree_util.tree_map(lambda v: v / world, total)


def _canonical_axis(axis: int, ndim: int, api_name: str, what: str) -> int:
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{api_name}: {what} must be an integer, got {axis!r}") from None
    if not -ndim <= axis < ndim:
        raise ValueError(f"{api_name}: {what}={axis} is out of range for rank {ndim}")
    return axis % ndim


# all_gather's result types (its ``to=``, as lax's): varying over the axes, or invariant over them.
ALL_GATHER_TO = ("varying", "invarying")


def all_gather(x, axis_name, *, axis: int = 0, tiled: bool = False, to: str = "varying",
               algorithm: str | None = None, axis_index_groups=None):
    """Gathers ``x`` from every rank along ``axis`` (stacked, or concatenated when ``tiled``): ``lax.all_gather``.
    ``to="invarying"`` types the result invariant over the axes (its transpose keeps each rank's block of the
    cotangent), as lax's. With ``axis_index_groups`` over one axis, the members of the rank's group in group order
    (``groups.py``; every group the same size; ``to="varying"`` only, the groups' results differing)."""
    _check_algorithm(Collective.ALL_GATHER, algorithm, "all_gather")
    if not isinstance(to, str) or to not in ALL_GATHER_TO:
        raise ValueError(f"all_gather: unsupported to={to!r}; supported: {', '.join(map(repr, ALL_GATHER_TO))}")
    if _lax_route("all_gather", axis_name, jax.tree_util.tree_leaves(x), axis_index_groups) is not None:
        to_arg = {} if to == "varying" else {"to": to}
        with routing.lax_scope("all_gather"):
            return lax.all_gather(x, axis_name, axis=axis, tiled=tiled, axis_index_groups=axis_index_groups,
                                  **to_arg)
    axes, world, checked, size, _ = _equal_groups_call("all_gather", axis_name, axis_index_groups)
    if checked is not None and to != "varying":
        raise ValueError(f"all_gather: to={to!r} with axis_index_groups of more than one group: each group "
                         "gathers its own members, so the result varies over the axis; use to='varying'")
    prim = all_gather_p if to == "varying" else all_gather_invariant_p

    def one(leaf):
        leaf = _prepare(leaf, axes, "all_gather", Collective.ALL_GATHER)
        ndim = leaf.ndim
        where = _canonical_axis(axis, ndim if tiled else ndim + 1, "all_gather", "axis")
        if world == 1:  # one rank: nothing to exchange (no communicator, no plan needed)
            with routing.lax_scope("all_gather"):
                blocks = leaf[None] if to == "varying" else jax.lax.all_gather(leaf, axes, to=to)
        else:
            blocks = prim.bind(leaf, axes=axes, world=world, op="sum", algorithm=algorithm)
            if checked is not None:
                blocks = groups.members(blocks, checked, axes[0])
        out = jnp.moveaxis(blocks, 0, where)
        if tiled:
            shape = list(leaf.shape)
            shape[where] *= size
            out = out.reshape(shape)
        return out

    return jax.tree_util.tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, tiled: bool = False, algorithm: str | None = None,
                 axis_index_groups=None):
    """Sums over ``axis_name`` and leaves rank r block r of ``scatter_dimension``: ``lax.psum_scatter``. With
    ``axis_index_groups`` over one axis, the group's sum and the block of the rank's position in its group
    (``groups.py``; every group the same size)."""
    _check_algorithm(Collective.REDUCE_SCATTER, algorithm, "psum_scatter")
    if _lax_route("psum_scatter", axis_name, jax.tree_util.tree_leaves(x), axis_index_groups) is not None:
        with routing.lax_scope("psum_scatter"):
            return lax.psum_scatter(x, axis_name, scatter_dimension=scatter_dimension, tiled=tiled,
                                    axis_index_groups=axis_index_groups)
    axes, world, checked, n, what = _equal_groups_call("psum_scatter", axis_name, axis_index_groups)

    def one(leaf):
        leaf = _prepare(leaf, axes, "psum_scatter", Collective.REDUCE_SCATTER)
        d = _canonical_axis(scatter_dimension, leaf.ndim, "psum_scatter", "scatter_dimension")
        size = leaf.shape[d]
        if tiled:
            if size % n:
                raise ValueError(
                    f"psum_scatter: dimension {d} of size {size} does not divide by the {what} {n}"
                )
            blocks = _split_into_blocks(leaf, d, n)
        else:
            if size != n:
                raise ValueError(
                    f"psum_scatter: dimension {d} has size {size} but must equal the {what} {n} "
                    "(or pass tiled=True)"
                )
            blocks = jnp.moveaxis(leaf, d, 0)
        if world == 1:
            return blocks[0]
        if checked is not None:
            total = groups.reduce(all_gather(blocks, axes), checked, axes[0], "sum")
            return total[groups.position(checked, axes[0])]
        return reduce_scatter_p.bind(blocks, axes=axes, world=world, op="sum", algorithm=algorithm)

    return jax.tree_util.tree_map(one, x)


reduce_scatter = psum_scatter


def _split_into_blocks(leaf, axis: int, n: int):
    """``leaf`` with ``axis`` cut into ``n`` equal blocks, the blocks stacked along a new leading axis."""
    shape = list(leaf.shape)
    shape[axis : axis + 1] = [n, shape[axis] // n]
    return jnp.moveaxis(leaf.reshape(shape), axis, 0)


def _all_to_all_tiled(leaf, axes, world, split_axis, concat_axis, algorithm, checked=None):
    n = world if checked is None else checked.size  # the ranks exchanging pieces
    blocks = _split_into_blocks(leaf, split_axis, n)
    if world == 1:
        received = blocks
    elif checked is not None:  # every rank's pieces, then from each member of the group its piece for me
        rows = groups.members(all_gather(blocks, axes), checked, axes[0])
        received = jnp.take(rows, groups.position(checked, axes[0]), axis=1)
    else:
        received = all_to_all_p.bind(blocks, axes=axes, world=world, op="sum", algorithm=algorithm)
    # received[r] is the r-th sender's piece for me; pieces are concatenated along concat_axis in that order.
    out = jnp.moveaxis(received, 0, concat_axis)
    out_shape = list(received.shape[1:])
    out_shape[concat_axis] *= n
    return out.reshape(out_shape)


def all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, tiled: bool = False,
               algorithm: str | None = None, axis_index_groups=None):
    """Splits ``split_axis`` into one piece per rank, sends piece r to rank r, and joins what arrives along
    ``concat_axis`` (stacked into a new axis unless ``tiled``): ``lax.all_to_all``. With ``axis_index_groups`` over
    one axis, among the members of the rank's group in group order (``groups.py``; every group the same size)."""
    _check_algorithm(Collective.ALL_TO_ALL, algorithm, "all_to_all")
    if _lax_route("all_to_all", axis_name, jax.tree_util.tree_leaves(x), axis_index_groups) is not None:
        with routing.lax_scope("all_to_all"):
            return jax.tree_util.tree_map(
                lambda leaf: lax.all_to_all(leaf, axis_name, split_axis, concat_axis,
                                            axis_index_groups=axis_index_groups, tiled=tiled), x)
    axes, world, checked, n, what = _equal_groups_call("all_to_all", axis_name, axis_index_groups)

    def one(leaf):
        leaf = _prepare(leaf, axes, "all_to_all", Collective.ALL_TO_ALL)
        split = _canonical_axis(split_axis, leaf.ndim, "all_to_all", "split_axis")
        concat = _canonical_axis(concat_axis, leaf.ndim, "all_to_all", "concat_axis")
        size = leaf.shape[split]
        if tiled:
            if size % n:
                raise ValueError(f"all_to_all: split_axis {split} of size {size} does not divide by {n}")
            return _all_to_all_tiled(leaf, axes, world, split, concat, algorithm, checked)
        if size != n:
            raise ValueError(
                f"all_to_all: split_axis {split} has size {size} but must equal the {what} {n} "
                "(or pass tiled=True)"
            )
        # As lax: a new axis of size 1 at concat_axis receives the pieces; the split axis (now size 1) goes.
        if split < concat:
            concat += 1
            leaf = jnp.expand_dims(leaf, concat)
        elif split > concat:
            leaf = jnp.expand_dims(leaf, concat)
            split += 1
        out = _all_to_all_tiled(leaf, axes, world, split, concat, algorithm, checked)
        return jnp.squeeze(out, split) if split != concat else out

    return jax.tree_util.tree_map(one, x)

