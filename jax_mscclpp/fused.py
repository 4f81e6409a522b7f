"""Collectives fused with the work that follows them at a transformer layer boundary.

After a row-parallel projection, a tensor-parallel layer sums partial results over the tensor axis, adds the
residual stream and normalizes for the next sublayer. XLA cannot fuse across a custom call, so these functions do
the three in one GPU kernel (kernels/collectives/epilogue.h):

    normed, new_residual = jm.fused.all_reduce_residual_rmsnorm(partial, residual, weight, "tp", eps=1e-5)
    new_residual = jm.fused.all_reduce_residual(partial, residual, "tp")

Semantics are those of the composition (``residual + psum(x)``, then RMSNorm over the last axis in float32:
``x * rsqrt(mean(x**2) + eps) * weight``, cast back), which runs instead wherever the fused kernel does not (CPU
devices, non-float dtypes, messages past one LL scratch half, ``algorithm="lax"`` or another algorithm forced).
Gradients are the composition's; under ``vmap`` the composition runs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from . import _compat, _native, explain, groups, primitives, routing, selection
from ._types import DTYPE_CODES, check_dtype
from .collectives import _axes_and_world, _lax_route, psum
from .communicator import Communicator

RESIDUAL_TARGET = "jax_mscclpp_all_reduce_residual"
RMSNORM_TARGET = "jax_mscclpp_all_reduce_rmsnorm"
_LAX_ASKED = "algorithm='lax' asked for"


def _api(norm: bool) -> str:
    return "all_reduce_residual_rmsnorm" if norm else "all_reduce_residual"


def _reference(x, residual, weight, *, axes, norm, eps, algorithm, axis_index_groups=None):
    """The composition the fused kernel computes: (normed, new_residual) or (new_residual,); with ``algorithm``
    "lax", over lax's psum (bound under ``routing.lax_scope``; its callers note it for ``explain``), else over our
    psum (with ``axis_index_groups``, its grouped sum)."""
    if algorithm == "lax":
        with routing.lax_scope(_api(norm)):
            total = lax.psum(x, axes, axis_index_groups=axis_index_groups)
    else:
        total = psum(x, axes, algorithm=algorithm, axis_index_groups=axis_index_groups)
    new_residual = residual + total
    if not norm:
        return (new_residual,)
    x32 = new_residual.astype(jnp.float32)
    x32 = x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return ((x32 * weight.astype(jnp.float32)).astype(x.dtype), new_residual)


def _composition(axes, norm, eps, algorithm):
    """_reference over the primitive's operands (x, residual[, weight])."""
    def run(x, residual, *weight):
        return _reference(x, residual, weight[0] if weight else None, axes=axes, norm=norm, eps=eps,
                          algorithm=algorithm)

    return run


all_reduce_epilogue_p = Primitive("mscclpp_all_reduce_epilogue")
all_reduce_epilogue_p.multiple_results = True


def _abstract_eval(x, residual, *weight, axes, world, norm, eps, algorithm):
    del world, eps, algorithm
    varying = (_compat.varying_axes(x) - frozenset(axes)) | _compat.varying_axes(residual)
    new_residual = _compat.with_varying_axes(residual.update(shape=x.shape, dtype=x.dtype), varying)
    if not norm:
        return (new_residual,)
    normed = _compat.with_varying_axes(new_residual, varying | _compat.varying_axes(weight[0]))
    return (normed, new_residual)


def _fuses_here(ctx, x_aval, row, axes, world, algorithm):
    """The communicator to run the fused kernel on, or None when the composition runs instead (the selection
    owner decides: ``selection.fuses``)."""
    count = int(np.prod(x_aval.shape, dtype=int))
    dtype = np.dtype(x_aval.dtype).name

    def communicator():
        mesh = _compat.lowering_mesh(ctx)
        return None if mesh is None else Communicator(mesh, axes)

    def kernel_takes(comm):
        return _native.native.cuda.epilogue_supported(world, count, row, DTYPE_CODES[dtype], comm.scratch_bytes)

    return selection.fuses(world, algorithm, dtype, communicator, kernel_takes)


def _lower_gpu(ctx, x, residual, *weight, axes, world, norm, eps, algorithm):
    x_aval = ctx.avals_in[0]
    row = x_aval.shape[-1] if x_aval.shape else 1
    comm = _fuses_here(ctx, x_aval, row, axes, world, algorithm)
    if comm is None:
        return _lower_composition(ctx, x, residual, *weight, axes=axes, world=world, norm=norm, eps=eps,
                                  algorithm=algorithm)
    nbytes = int(np.prod(x_aval.shape, dtype=int)) * np.dtype(x_aval.dtype).itemsize
    explain.record(_api(norm), axes, nbytes, np.dtype(x_aval.dtype).name, "fused",
                   "one kernel sums and applies the epilogue (selection.fuses)")
    if norm:
        return jax.ffi.ffi_lowering(primitives.gpu_target(RMSNORM_TARGET, nbytes), has_side_effect=True)(
            ctx, x, residual, weight[0], comm_id=np.int64(comm.id), eps=np.float32(eps))
    return jax.ffi.ffi_lowering(primitives.gpu_target(RESIDUAL_TARGET, nbytes), has_side_effect=True)(
        ctx, x, residual, comm_id=np.int64(comm.id), row=np.int64(row))


def _lower_composition(ctx, x, residual, *weight, axes, world, norm, eps, algorithm):
    del world
    if algorithm == "lax":  # lax's psum, bound here (ours notes its own decision where it is lowered)
        aval = ctx.avals_in[0]
        explain.record(_api(norm), axes, int(np.prod(aval.shape, dtype=int)) * np.dtype(aval.dtype).itemsize,
                       np.dtype(aval.dtype).name, "lax", _LAX_ASKED)
    run = _composition(axes, norm, eps, algorithm)
    return mlir.lower_fun(run, multiple_results=True)(ctx, x, residual, *weight)


def _batch(args, dims, *, axes, world, norm, eps, algorithm):
    """Under vmap the composition runs (each mapped call its own collective)."""
    del world
    if algorithm == "lax":
        explain.record(_api(norm), axes, None, None, "lax", _LAX_ASKED)
    run = _composition(axes, norm, eps, algorithm)
    outs = jax.vmap(run, in_axes=tuple(d if isinstance(d, int) else None for d in dims))(*args)
    return list(outs), [0] * len(outs)


all_reduce_epilogue_p.def_impl(
    lambda *a, **p: (_ for _ in ()).throw(RuntimeError("the fused collectives run inside jax.shard_map")))
all_reduce_epilogue_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(all_reduce_epilogue_p, _lower_composition)
if _native.CUDA_BUILT:
    mlir.register_lowering(all_reduce_epilogue_p, _lower_gpu, platform="cuda")
batching.primitive_batchers[all_reduce_epilogue_p] = _batch


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _fused(x, residual, weight, static):
    axes, world, norm, eps, algorithm = static
    args = (x, residual, weight) if norm else (x, residual)
    return tuple(all_reduce_epilogue_p.bind(*args, axes=axes, world=world, norm=norm, eps=eps, algorithm=algorithm))


def _fused_fwd(x, residual, weight, static):
    return _fused(x, residual, weight, static), (x, residual, weight)


def _fused_bwd(static, saved, cts):
    axes, _, norm, eps, algorithm = static
    x, residual, weight = saved
    _, vjp = jax.vjp(lambda a, b, c: _reference(a, b, c, axes=axes, norm=norm, eps=eps, algorithm=algorithm),
                     x, residual, weight)
    return vjp(cts)


_fused.defvjp(_fused_fwd, _fused_bwd)


def _checked(x, residual, weight, axis_name, api, algorithm):
    from ._types import Collective

    x, residual = jnp.asarray(x), jnp.asarray(residual)
    selection.check_algorithm(Collective.ALL_REDUCE, algorithm, api)
    axes, world = _axes_and_world(axis_name, api)
    check_dtype(x.dtype, api)
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(f"{api}: residual must have x's shape and dtype {x.shape} {x.dtype}, got "
                         f"{residual.shape} {residual.dtype}")
    if weight is not None:
        weight = jnp.asarray(weight)
        if x.ndim == 0 or weight.shape != x.shape[-1:] or weight.dtype != x.dtype:
            raise ValueError(f"{api}: weight must be a vector of x's last dimension and dtype "
                             f"{x.shape[-1:]} {x.dtype}, got {weight.shape} {weight.dtype}")
    return x, residual, weight, axes, world


def _grouped(axis_index_groups, world: int) -> bool:
    """Whether ``axis_index_groups`` split the axis (then our grouped psum composes the call: the fused kernel sums
    whole axes); checked as psum checks them."""
    return axis_index_groups is not None and groups.check("psum", axis_index_groups, world,
                                                          equal_sizes=False) is not None


def all_reduce_residual(x, residual, axis_name, *, algorithm: str | None = None, axis_index_groups=None):
    """``residual + psum(x, axis_name)`` in one kernel where it can (see the module docstring); a sum ours cannot
    run (``routing``: vmap axes, ...) is lax's psum and the add (logged); with ``axis_index_groups`` over one axis,
    our grouped psum and the add."""
    x, residual, _, axes, world = _checked(x, residual, None, axis_name, "all_reduce_residual", algorithm)
    if _lax_route("all_reduce_residual", axis_name, [x], axis_index_groups, "sum") is not None:
        return _reference(x, residual, None, axes=axes, norm=False, eps=0.0, algorithm="lax",
                          axis_index_groups=axis_index_groups)[0]
    if _grouped(axis_index_groups, world):
        return _reference(x, residual, None, axes=axes, norm=False, eps=0.0, algorithm=algorithm,
                          axis_index_groups=axis_index_groups)[0]
    if world == 1:
        routing.one_rank("all_reduce_residual", axes)
        return _reference(x, residual, None, axes=axes, norm=False, eps=0.0, algorithm="lax")[0]
    x = _compat.make_varying(x, axes)
    dummy = jnp.zeros((0,), x.dtype)
    return _fused(x, residual, dummy, (axes, world, False, 0.0, algorithm))[0]


def all_reduce_residual_rmsnorm(x, residual, weight, axis_name, *, eps: float = 1e-6,
                                algorithm: str | None = None, axis_index_groups=None):
    """``(rms_norm(r) * weight, r)`` with ``r = residual + psum(x, axis_name)``, the norm over the last axis in
    float32; one kernel where it can (see the module docstring); a sum ours cannot run (``routing``:
    vmap axes, ...) is lax's psum, then the add and the norm (logged); with ``axis_index_groups`` over one axis, our
    grouped psum, then the add and the norm."""
    x, residual, weight, axes, world = _checked(x, residual, weight, axis_name, "all_reduce_residual_rmsnorm",
                                                algorithm)
    if _lax_route("all_reduce_residual_rmsnorm", axis_name, [x], axis_index_groups, "sum") is not None:
        return _reference(x, residual, weight, axes=axes, norm=True, eps=float(eps), algorithm="lax",
                          axis_index_groups=axis_index_groups)
    if _grouped(axis_index_groups, world):
        return _reference(x, residual, weight, axes=axes, norm=True, eps=float(eps), algorithm=algorithm,
                          axis_index_groups=axis_index_groups)
    if world == 1:
        routing.one_rank("all_reduce_residual_rmsnorm", axes)
        return _reference(x, residual, weight, axes=axes, norm=True, eps=float(eps), algorithm="lax")
    x = _compat.make_varying(x, axes)
    normed, new_residual = _fused(x, residual, weight, (axes, world, True, float(eps), algorithm))
    return normed, new_residual


__all__ = ["all_reduce_residual", "all_reduce_residual_rmsnorm"]
