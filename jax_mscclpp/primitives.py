"""The JAX primitives behind the public collectives: typing, lowering, autodiff and batching.

Each collective is one primitive over a "block" layout that the native side reads as contiguous memory
(``ffi/collective_types.h``); the public functions in ``collectives.py`` reshape around them:

    all_reduce      x            -> x             (reduced over the axes; invariant over them under check_vma)
    all_gather      x            -> [world, *x]   (block r from rank r)
    reduce_scatter  [world, *r]  -> r             (block r, summed over ranks, lands on rank r)
    all_to_all      [world, *r]  -> [world, *r]   (out block r = rank r's block for me)

Types follow the lax collective each replaces; transposes and batching rules are those of lax, written with our
own primitives so gradients run on our collectives too.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax._src.lib.mlir.dialects import hlo

from . import _compat, _native, _ordering, plans, selection
from ._types import ALGORITHMS, ALGORITHMS_OF, REDUCE_OPS, Algorithm, Collective
from .communicator import Communicator


_LAX_REDUCE = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


def _out_aval(x, *, collective, axes, world, op, algorithm):
    del op, algorithm
    varying = _compat.varying_axes(x)
    if collective == Collective.ALL_REDUCE:
        return _compat.with_varying_axes(x, varying - frozenset(axes))
    if collective == Collective.ALL_GATHER:
        return x.update(shape=(world, *x.shape))
    if collective == Collective.REDUCE_SCATTER:
        return x.update(shape=x.shape[1:])
    return x.update(shape=x.shape)


def _lax_equivalent(collective, axes, op):
    """The lax collective computing the same block-layout result (for algorithm "lax")."""
    if collective == Collective.ALL_REDUCE:
        return lambda x: _LAX_REDUCE[op](x, axes)
    if collective == Collective.ALL_GATHER:
        return lambda x: lax.all_gather(x, axes, axis=0, tiled=False)
    if collective == Collective.REDUCE_SCATTER:
        return lambda x: lax.psum_scatter(x, axes, scatter_dimension=0, tiled=False)
    return lambda x: lax.all_to_all(x, axes, 0, 0, tiled=True)


def _hierarchical_all_reduce(mesh, axes, op):
    """2PH over (slow, fast) axes: our reduce-scatter over the fast axis, the lax collective over the slow axis on
    1/n of the data, our all-gather over the fast axis. Inter-host traffic stays on the engine XLA already runs."""
    if len(axes) != 2:
        raise ValueError(f"jax_mscclpp: algorithm '2ph' reduces over two axes (slow, fast), got {axes}")
    slow, fast = axes
    n_fast = dict(zip(mesh.axis_names, mesh.axis_sizes))[fast]
    slow_reduce = _LAX_REDUCE[op]

    def run(x):
        flat = x.reshape(-1)
        flat = jnp.pad(flat, (0, (-flat.size) % n_fast))
        params = dict(axes=(fast,), world=n_fast, op=op, algorithm=None)
        mine = reduce_scatter_p.bind(flat.reshape(n_fast, -1), **params)
        mine = slow_reduce(mine, slow)
        gathered = all_gather_p.bind(mine, **params)
        return gathered.reshape(-1)[: x.size].reshape(x.shape)

    return run


def _algorithm_from_environment(collective, platform):
    """JAX_MSCCLPP_ALGORITHM for this collective: the name if it is one of its algorithms or a plan registered for
    it on this platform, else None (the variable applies to every collective that knows the name)."""
    name = os.environ.get("JAX_MSCCLPP_ALGORITHM") or None
    if name is None or name in ALGORITHMS_OF[collective]:
        return name
    entry = plans.registered(name)
    return name if entry is not None and entry.collective == collective and platform in entry.platforms else None


def _lower(platform, ctx, x, *, collective, axes, world, op, algorithm):
    """Lowers one collective for ``platform`` ("cpu" or "gpu"): a registered plan, one of our algorithms as a
    custom call, 2PH as a composition, or the lax collective (forced, outside every rule, or when the
    communicator cannot run here)."""
    mesh = _compat.lowering_mesh(ctx)
    if mesh is None:
        raise NotImplementedError(
            f"jax_mscclpp: {collective.name.lower()} over {axes} must run inside jax.shard_map; "
            "use the jax.lax collective under pmap"
        )
    aval_in = ctx.avals_in[0]
    itemsize = np.dtype(aval_in.dtype).itemsize
    count = int(np.prod(aval_in.shape, dtype=int))
    nbytes = count * itemsize
    requested = algorithm if algorithm is not None else _algorithm_from_environment(collective, platform)
    may_use_plan = plans.registered(requested) or (requested is None and plans.registered_for(collective, platform))
    if may_use_plan:
        comm = Communicator(mesh, axes)
        if comm.fallback_reason is None:
            blocks = world if collective in (Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL) else 1
            # The host backend has every port channel; on GPUs they exist only if the communicator was made so.
            port_channels = platform == "cpu" or comm.port_channels
            picked = plans.pick(collective, platform, requested, nbytes, world, count // blocks, itemsize,
                                comm.scratch_bytes, port_channels)
            if picked is not None:
                entry, plan = picked
                comm.bind_plan(entry.id, plan, entry.name)
                return _custom_call(ctx, x, collective, comm, op, Algorithm.PLAN, entry.id, platform)
    # A requested plan gets here only when its communicator falls back to lax.
    chosen = "lax" if plans.registered(requested) else selection.choose(collective, platform, nbytes, algorithm)
    if chosen == "2ph":
        return mlir.lower_fun(_hierarchical_all_reduce(mesh, axes, op), multiple_results=False)(ctx, x)
    comm = Communicator(mesh, axes) if chosen != "lax" else None
    if comm is not None and comm.fallback_reason is not None:
        chosen = "lax"
    if chosen == "lax":
        return mlir.lower_fun(_lax_equivalent(collective, axes, op), multiple_results=False)(ctx, x)
    if chosen == "2pr" and platform == "gpu" and not comm.port_channels:
        raise ValueError("jax_mscclpp: algorithm '2pr' needs port channels: create the communicator with "
                         f"Communicator(mesh, {axes}, port_channels=True) before the first call")
    return _custom_call(ctx, x, collective, comm, op, ALGORITHMS[chosen], -1, platform)


def _custom_call(ctx, x, collective, comm, op, algorithm, plan_id, platform):
    """The custom call to our FFI target. XLA's partition id is its second operand: the CPU handler maps it to the
    device's group and rank (the GPU handler finds its rank by device ordinal instead). On CPU a third operand, the
    previous collective's result, orders the calls (``_ordering.py``)."""
    partition = hlo.partition_id()  # this device's row-major position in the mesh (tensor<ui32>)
    after, after_avals = _ordering.predecessor(ctx) if platform == "cpu" else ([], [])
    operands = ctx.replace(avals_in=[ctx.avals_in[0], jax.core.ShapedArray((), np.uint32), *after_avals])
    out = jax.ffi.ffi_lowering(collective.target, has_side_effect=True)(
        operands,
        x,
        partition,
        *after,
        comm_id=np.int64(comm.id),
        op=np.int32(REDUCE_OPS[op]),
        algorithm=np.int32(algorithm),
        plan_id=np.int64(plan_id),
    )
    if platform == "cpu":
        _ordering.record(ctx, out[0], ctx.avals_out[0])
    return out


def _lower_unsupported(ctx, x, *, collective, axes, world, op, algorithm):
    platforms = ", ".join(ctx.module_context.platforms)
    raise NotImplementedError(
        f"jax_mscclpp: {collective.name.lower()} has no backend for platform {platforms} in this build "
        f"(CUDA built: {_native.CUDA_BUILT}): use the jax.lax collective there"
    )


def _make_primitive(collective: Collective) -> Primitive:
    prim = Primitive("mscclpp_" + collective.name.lower())

    def impl(*args, **params):
        raise RuntimeError(f"{prim.name} runs only inside jax.shard_map under jax.jit")

    prim.def_impl(impl)
    prim.def_abstract_eval(lambda x, **params: _out_aval(x, collective=collective, **params))
    mlir.register_lowering(prim, lambda ctx, x, **p: _lower_unsupported(ctx, x, collective=collective, **p))
    # Not cacheable: each call is lowered where it stands, so that it can be ordered after the previous one
    # (_ordering.py); a cached lowering is emitted once and replayed, blind to its neighbours.
    mlir.register_lowering(prim, lambda ctx, x, **p: _lower("cpu", ctx, x, collective=collective, **p),
                           platform="cpu", cacheable=False)
    if _native.CUDA_BUILT:
        mlir.register_lowering(prim, lambda ctx, x, **p: _lower("gpu", ctx, x, collective=collective, **p),
                               platform="cuda")
    return prim


all_reduce_p = _make_primitive(Collective.ALL_REDUCE)
all_gather_p = _make_primitive(Collective.ALL_GATHER)
reduce_scatter_p = _make_primitive(Collective.REDUCE_SCATTER)
all_to_all_p = _make_primitive(Collective.ALL_TO_ALL)


# ---- autodiff -------------------------------------------------------------------------------------------------

def _all_reduce_jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    if params["op"] != "sum":
        raise NotImplementedError(
            f"jax_mscclpp: p{params['op']} is not differentiable (as lax.p{params['op']}); use psum"
        )
    y = all_reduce_p.bind(x, **params)
    if type(t) is ad.Zero:
        return y, ad.Zero.from_primal_value(y)
    return y, all_reduce_p.bind(t, **params)


def _all_reduce_transpose(ct, x, **params):
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    if _compat.check_vma_enabled():
        # psum takes varying to invariant values: its transpose casts the invariant cotangent back to varying.
        return [lax.pcast(ct, params["axes"], to="varying")]
    return [all_reduce_p.bind(ct, **params)]


ad.primitive_jvps[all_reduce_p] = _all_reduce_jvp
ad.primitive_transposes[all_reduce_p] = _all_reduce_transpose
ad.deflinear2(all_gather_p, lambda ct, x, **p: [reduce_scatter_p.bind(ct, **p)])
ad.deflinear2(reduce_scatter_p, lambda ct, x, **p: [all_gather_p.bind(ct, **p)])
ad.deflinear2(all_to_all_p, lambda ct, x, **p: [all_to_all_p.bind(ct, **p)])


# ---- batching (vmap inside shard_map, over an axis that is not one of the collective's) ----------------------

def _batch_all_reduce(args, dims, **params):
    return all_reduce_p.bind(args[0], **params), dims[0]


def _batch_all_gather(args, dims, **params):
    return all_gather_p.bind(args[0], **params), dims[0] + 1


def _blocks_first(prim, out_shift):
    """Batching for primitives whose operand's leading dimension is the block index."""

    def rule(args, dims, **params):
        x, d = args[0], dims[0]
        if d == 0:
            x, d = jnp.moveaxis(x, 0, 1), 1
        return prim.bind(x, **params), d + out_shift

    return rule


batching.primitive_batchers[all_reduce_p] = _batch_all_reduce
batching.primitive_batchers[all_gather_p] = _batch_all_gather
batching.primitive_batchers[reduce_scatter_p] = _blocks_first(reduce_scatter_p, -1)
batching.primitive_batchers[all_to_all_p] = _blocks_first(all_to_all_p, 0)
