"""The JAX primitives behind the public collectives: typing, lowering, autodiff and batching.

Each collective is one primitive over its block layout (``layout.py``), which the native side reads as
contiguous memory; an operand or result that holds one block per rank has the block index as its leading
dimension (all_gather: ``x -> [world, *x]``), and the public functions in ``collectives.py`` reshape around them.
all_reduce's result is invariant over the reduced axes under check_vma.

Types follow the lax collective each replaces; transposes and batching rules are those of lax, written with our
own primitives so gradients run on our collectives too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax._src.lib.mlir.dialects import hlo

from . import _compat, _native, _ordering, carriers, explain, layout, routing, selection
from ._types import ALGORITHMS, REDUCE_OPS, Algorithm, Collective
from .communicator import Communicator
from .lax_equivalents import LAX_REDUCTIONS, lax_collective


def _out_aval(x, *, collective, axes, world, op, algorithm, call_id=None):
    del op, algorithm, call_id
    if collective == Collective.ALL_REDUCE:  # typed like lax.psum: invariant over the reduced axes
        return _compat.with_varying_axes(x, _compat.varying_axes(x) - frozenset(axes))
    return x.update(shape=layout.out_shape(collective, x.shape, world))


def _lax_equivalent(collective, axes, op):
    """The lax collective computing the same block-layout result (for algorithm "lax"): blocks stacked on a
    leading axis, all_to_all's split over it."""
    return lax_collective(collective, axes, op=op, tiled=collective == Collective.ALL_TO_ALL)


def _hierarchical_all_reduce(mesh, axes, op):
    """2PH over (slow, fast) axes: our reduce-scatter over the fast axis, the lax collective over the slow axis on
    1/n of the data, our all-gather over the fast axis. Inter-host traffic stays on the engine XLA already runs."""
    if len(axes) != 2:
        raise ValueError(f"jax_mscclpp: algorithm '2ph' reduces over two axes (slow, fast), got {axes}")
    slow, fast = axes
    n_fast = dict(zip(mesh.axis_names, mesh.axis_sizes))[fast]
    slow_reduce = LAX_REDUCTIONS[op]

    def run(x):
        flat = x.reshape(-1)
        flat = jnp.pad(flat, (0, (-flat.size) % n_fast))
        params = dict(axes=(fast,), world=n_fast, op=op, algorithm=None)
        mine = reduce_scatter_p.bind(flat.reshape(n_fast, -1), **params)
        mine = slow_reduce(mine, slow)
        gathered = all_gather_p.bind(mine, **params)
        return gathered.reshape(-1)[: x.size].reshape(x.shape)

    return run


# Thread blocks a started collective may take (the streaming kernels' grid), so that the compute it runs beside
# keeps most multiprocessors (docs/architecture.md, "Overlap").
OVERLAP_MAX_BLOCKS = 32


def gpu_target(name: str, nbytes: int, between_processes: bool = False) -> str:
    """The GPU FFI target to emit for target ``name`` and a call of ``nbytes`` per rank (on a communicator whose
    ranks are of several processes: ``between_processes``): ``name`` (XLA may record the call into its command
    buffers) or its twin that XLA runs as its own thunk (``selection.in_command_buffers``; ffi/call_decoding.h,
    kOutsideGraphsSuffix)."""
    recorded = selection.in_command_buffers(nbytes, between_processes)
    return name if recorded else name + _native.native.OUTSIDE_GRAPHS_SUFFIX


def _lower(platform, ctx, x, *, collective, axes, world, op, algorithm, call_id=None, extra_attrs=None,
           lax_equivalent=None, permutation=None):
    """Lowers one collective for ``platform`` ("cpu" or "gpu") as ``selection.decide`` says: a registered plan or
    one of our algorithms as a custom call, 2PH as a composition, or the lax collective. ``call_id`` (an int) makes
    it a started call (overlap.py): on GPUs our kernel runs on the side stream, over the axes' side-stream
    communicator, until the done of the same id; whatever else it lowers to is complete when it returns.
    ``extra_attrs``: attributes of the custom call beyond the common ones (the permutation's destinations);
    ``lax_equivalent``: the function computing the same result with lax (default ``_lax_equivalent``);
    ``permutation``: the permutation's pairs, for its registered plans (``selection.decide``)."""
    mesh = _compat.lowering_mesh(ctx)
    if mesh is None:
        raise NotImplementedError(
            f"jax_mscclpp: {collective.name.lower()} over {axes} must run inside jax.shard_map; "
            "use the jax.lax collective under pmap"
        )
    lax_reason = routing.lax_reason(
        collective.name.lower(), axes, stage=routing.LOWERING, collective=collective, op=op,
        dtype=ctx.avals_in[0].dtype, mesh_axes=tuple(mesh.axis_names), manual=_compat.lowering_manual_axes(ctx),
        has_devices=_compat.mesh_devices(mesh) is not None if platform == "gpu" else None)
    if lax_reason is not None:
        routing.log_lax_lowering(collective.name.lower(), axes, lax_reason)
        _explained(collective, op, axes, ctx.avals_in[0], "lax", lax_reason)
        fallback = lax_equivalent or _lax_equivalent(collective, axes, op)
        return mlir.lower_fun(fallback, multiple_results=False)(ctx, x)
    started = call_id is not None and platform == "gpu"
    if Communicator.drop_unusable(mesh, axes, side_stream=started):
        routing.logger.info("a failed call left the communicator over %s unusable: this program gets a fresh one", axes)
    aval_in = ctx.avals_in[0]
    itemsize = np.dtype(aval_in.dtype).itemsize
    count = int(np.prod(aval_in.shape, dtype=int))
    blocks, _ = layout.blocks(collective, world)
    decision = selection.decide(collective, platform, nbytes=count * itemsize, world=world,
                                block_count=count // blocks, itemsize=itemsize, algorithm=algorithm,
                                communicator=lambda: Communicator(mesh, axes, side_stream=started),
                                permutation=permutation)
    if decision.kind == "composed":
        _explained(collective, op, axes, aval_in, decision.algorithm, decision.reason)
        return mlir.lower_fun(_hierarchical_all_reduce(mesh, axes, op), multiple_results=False)(ctx, x)
    if decision.kind == "lax":
        _explained(collective, op, axes, aval_in, decision.algorithm, decision.reason)
        fallback = lax_equivalent or _lax_equivalent(collective, axes, op)
        return mlir.lower_fun(fallback, multiple_results=False)(ctx, x)
    comm = Communicator(mesh, axes, side_stream=started)
    protocol = None
    if decision.kind == "native":
        protocol = selection.protocol_of(decision.algorithm, platform, (count // blocks) * itemsize,
                                         collective=collective, world=world, shares_gpu=comm.shares_gpus)
    _explained(collective, op, axes, aval_in, decision.algorithm, decision.reason, protocol)
    if decision.kind == "plan":
        comm.bind_plan(decision.plan.id, decision.plan_dict, decision.plan.name)
        code, plan_id = Algorithm.PLAN, decision.plan.id
    else:
        code, plan_id = ALGORITHMS[decision.algorithm], -1
    attrs = dict(comm_id=np.int64(comm.id), op=np.int32(REDUCE_OPS[op]), algorithm=np.int32(code),
                 plan_id=np.int64(plan_id), **(extra_attrs or {}))
    if platform == "cpu":
        # XLA's partition id is the CPU handler's second operand: it maps it to the device's group and rank. A
        # third, the previous collective's result, orders the calls on every device (_ordering.py).
        after, after_avals = _ordering.predecessor(ctx)
        operands = ctx.replace(avals_in=[aval_in, jax.core.ShapedArray((), np.uint32), *after_avals])
        target = jax.ffi.ffi_lowering(collective.target, has_side_effect=True)
        out = target(operands, x, hlo.partition_id(), *after, **attrs)
        _ordering.record(ctx, out[0], ctx.avals_out[0])
        return out
    # GPU: the handler finds its rank by device ordinal.
    if started:
        _started_on_side_stream(ctx).add(call_id)
        target = jax.ffi.ffi_lowering(collective.target + _native.native.START_SUFFIX, has_side_effect=True)
        return target(ctx, x, **attrs, max_blocks=np.int32(OVERLAP_MAX_BLOCKS), call_id=np.int64(call_id))
    target = jax.ffi.ffi_lowering(gpu_target(collective.target, count * itemsize, comm.spans_processes),
                                  has_side_effect=True)
    return target(ctx, x, **attrs, max_blocks=np.int32(0))


def _explained(collective, op, axes, aval, algorithm: str, reason: str, protocol: str | None = None) -> None:
    """Notes the decision for ``explain`` (explain.py)."""
    name = collective.name.lower() + (f"({op})" if collective == Collective.ALL_REDUCE else "")
    nbytes = int(np.prod(aval.shape, dtype=int)) * aval.dtype.itemsize
    explain.record(name, axes, nbytes, carriers.dtype_name(aval.dtype), algorithm, reason, protocol)


def _block_elements(collective, world: int, aval) -> int:
    """The elements of one block of a call of ``collective`` on ``aval`` (the primitive's operand)."""
    return int(np.prod(aval.shape, dtype=int)) // layout.blocks(collective, world)[0]


def _started_on_side_stream(ctx) -> set:
    """Call ids of this module whose start was lowered to a kernel on the side stream (their done joins it)."""
    return _compat.module_state(ctx, "started").setdefault("ids", set())


def _lower_unsupported(ctx, x, *, collective, **params):
    platforms = ", ".join(ctx.module_context.platforms)
    raise NotImplementedError(
        f"jax_mscclpp: {collective.name.lower()} has no backend for platform {platforms} in this build "
        f"(CUDA built: {_native.CUDA_BUILT}): use the jax.lax collective there"
    )


def lowering(prim: Primitive, collective: Collective, platform: str, lower):
    """The lowering rule of ``prim`` (a primitive of ``collective``) on ``platform``: ``lower(platform, ctx, x,
    **params)``, or, for a dtype the kernels do not have, ``prim`` bound again on the values that carry it
    (``carriers.py``; a dtype that cannot travel through ours reaches ``lower``, which emits lax's collective). A
    started call (``call_id``) of such a dtype runs complete where it stands: its result is converted right after
    the call, which a kernel still running on the side stream would race."""

    def rule(ctx, x, **params):
        aval = ctx.avals_in[0]
        carried = carriers.carrier(aval.dtype, collective, params.get("op", "sum"),
                                   _block_elements(collective, params["world"], aval))
        if carried is not None:
            complete = {k: v for k, v in params.items() if k != "call_id"}
            return carriers.lowered_through(ctx, x, carried, lambda v: prim.bind(v, **complete),
                                            leading=int(layout.per_rank(collective)[0]))
        return lower(platform, ctx, x, **params)

    return rule


def register_lowerings(prim: Primitive, collective: Collective, lower) -> None:
    """Registers ``prim``'s lowerings: ``lower`` on CPU and (CUDA builds) GPUs, an error elsewhere."""
    mlir.register_lowering(prim, lambda ctx, x, **p: _lower_unsupported(ctx, x, collective=collective, **p))
    # Not cacheable: each call is lowered where it stands, so that it can be ordered after the previous one
    # (_ordering.py); a cached lowering is emitted once and replayed, blind to its neighbours.
    mlir.register_lowering(prim, lowering(prim, collective, "cpu", lower), platform="cpu", cacheable=False)
    if _native.CUDA_BUILT:
        mlir.register_lowering(prim, lowering(prim, collective, "gpu", lower), platform="cuda")


def _make_primitive(collective: Collective, name: str | None = None) -> Primitive:
    """The primitive of ``collective`` (named ``name``, default mscclpp_<collective>): typing and lowerings."""
    prim = Primitive(name or "mscclpp_" + collective.name.lower())

    def impl(*args, **params):
        raise RuntimeError(f"{prim.name} runs only inside jax.shard_map under jax.jit")

    prim.def_impl(impl)
    prim.def_abstract_eval(lambda x, **params: _out_aval(x, collective=collective, **params))
    register_lowerings(prim, collective,
                       lambda platform, ctx, x, **p: _lower(platform, ctx, x, collective=collective, **p))
    return prim


all_reduce_p = _make_primitive(Collective.ALL_REDUCE)
all_gather_p = _make_primitive(Collective.ALL_GATHER)
reduce_scatter_p = _make_primitive(Collective.REDUCE_SCATTER)
all_to_all_p = _make_primitive(Collective.ALL_TO_ALL)
# all_gather whose result is invariant over the gathered axes (lax.all_gather(..., to="invarying")): the same call.
all_gather_invariant_p = _make_primitive(Collective.ALL_GATHER, "mscclpp_all_gather_invariant")
all_gather_invariant_p.def_abstract_eval(
    lambda x, *, axes, world, **params: _compat.with_varying_axes(
        x.update(shape=layout.out_shape(Collective.ALL_GATHER, x.shape, world)),
        _compat.varying_axes(x) - frozenset(axes)))


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


def _all_gather_invariant_transpose(ct, x, *, axes, **params):
    """As lax's: every rank holds the whole (invariant) cotangent and keeps its own block of it."""
    return [lax.dynamic_index_in_dim(ct, lax.axis_index(axes), axis=0, keepdims=False)]


ad.deflinear2(all_gather_invariant_p, _all_gather_invariant_transpose)


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
batching.primitive_batchers[all_gather_invariant_p] = lambda args, dims, **params: (
    all_gather_invariant_p.bind(args[0], **params), dims[0] + 1)
batching.primitive_batchers[reduce_scatter_p] = _blocks_first(reduce_scatter_p, -1)
batching.primitive_batchers[all_to_all_p] = _blocks_first(all_to_all_p, 0)
