"""``ragged_all_to_all``: ``lax.ragged_all_to_all``'s drop-in (mixture-of-experts dispatch and combine).

Rank i sends ``operand[input_offsets[j] : input_offsets[j] + send_sizes[j]]`` to every rank j, which writes those
rows into its ``output`` from row ``output_offsets[j]`` (the sender gives where its rows land in the receiver's
output, as in lax); ``recv_sizes[j]`` is how many rows rank i receives from rank j; rows nothing is written to keep
``output``'s values.

Ours runs two ways:

- ``"p2p"``: one GPU launch over the point-to-point engine (``ragged_p``; kernels/collectives/collective.h,
  ``launch_ragged_all_to_all``), which moves the rows sent and reads every size and offset on the device. The host
  backend has no such kernel: on CPU devices ``"p2p"`` runs the composition below (``explain`` says so), and so it
  does wherever the lowering cannot use ours (a partially manual program, an abstract mesh, a communicator that
  falls back, a dtype of fewer bits than a byte);
- the composition of our all_to_all: each rank packs, for every peer, a block of ``operand.shape[0]`` rows (its
  chunk, then zeros), the blocks and the output offsets cross in two all_to_alls, and each rank writes the rows it
  receives into ``output``. It moves ``world x operand rows`` per rank.

By default:

- CPU devices: the composition (XLA:CPU has no ragged-all-to-all);
- GPUs that processes share: ``"p2p"`` (NVIDIA's NCCL refuses to run there, so lax's runs only through our NCCL
  library, as XLA's send/receive fallback: the sizes copied to the host and waited for, then two groups a call on
  our point-to-point engine, and not at all under XLA's command buffers with collectives);
- other GPUs: lax's, which moves only the rows sent. How ``"p2p"`` compares with it in speed on distinct GPUs is
  not measured, so the default stays lax's there.

``algorithm="lax"`` forces lax's, ``"p2p"`` the one launch, an all_to_all algorithm's name the composition with that
all_to_all. Calls ours cannot run (``routing``: vmap axes, partially manual shard_maps, ``axis_index_groups``) are
lax's, logged. It differentiates in ``operand`` and ``output`` (offsets and sizes are integers), as lax's does:
``"p2p"`` is linear in both, its transpose the reverse exchange (the offsets crossed by our all_to_all) and the
cotangent of the output rows written over zeroed, as lax's transpose; under ``vmap`` (over an axis that is not one
of the collective's) the composition runs. Every path, lax's included, types the result as varying over the axes
(lax types its own result as ``output``, whose gradients then sum over the devices where ``output`` is unvarying:
``_varying_for_lax``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import _compat, _native, carriers, collectives, explain, primitives, routing
from ._types import Collective
from .communicator import Communicator

_API = "ragged_all_to_all"
# ragged_all_to_all's own algorithm: one launch over the point-to-point engine (GPUs).
P2P = "p2p"
# The GPU FFI target of ``ragged_p`` (ffi/call_decoding.h, kRaggedAllToAllTarget).
TARGET = "jax_mscclpp_ragged_all_to_all"

# Why ``"p2p"`` runs (``explain``), and why it runs the composition where it does.
P2P_ASKED = "algorithm='p2p' asked for"
P2P_WHERE_PROCESSES_SHARE = ("processes share a GPU: lax's cannot run there without our NCCL library and with it runs "
                             "as XLA's two point-to-point groups a call after copying the sizes to the host; ours is "
                             "one launch over the point-to-point engine, the sizes read on the device")
HOST_COMPOSES = ("the host backend (CPU devices) has no ragged-all-to-all kernel: 'p2p' runs ours composed of "
                 "all_to_all")


def check_algorithm(algorithm, api_name: str = _API) -> None:
    """Raises unless ``algorithm`` is None, ``"p2p"`` (this API's own) or a name all_to_all knows (``"lax"``, its
    algorithms, a plan registered for it)."""
    if isinstance(algorithm, str) and algorithm == P2P:
        return
    try:
        collectives._check_algorithm(Collective.ALL_TO_ALL, algorithm, api_name)
    except ValueError as error:
        raise ValueError(f"{error}; {_API} also knows {P2P}") from None


def _check(operand, output, offsets, world: int) -> None:
    """A clear error at trace time for operands lax would refuse or misread."""
    if operand.ndim < 1 or output.ndim < 1:
        raise ValueError(f"{_API}: operand and output must have a leading (row) axis; got shapes "
                         f"{operand.shape} and {output.shape}")
    if operand.shape[1:] != output.shape[1:] or operand.dtype != output.dtype:
        raise ValueError(f"{_API}: operand and output must agree in dtype and in every axis but the first; got "
                         f"{operand.dtype}{list(operand.shape)} and {output.dtype}{list(output.shape)}")
    names = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    for name, value in zip(names, offsets):
        if not jnp.issubdtype(value.dtype, jnp.integer):
            raise TypeError(f"{_API}: {name} must be integers; got {value.dtype}")
        if value.shape != (world,):
            raise ValueError(f"{_API}: {name} must have one entry per rank of the axis, shape ({world},); got "
                             f"{value.shape}")


def _composed(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axes, world,
              algorithm):
    """Ours: a padded block per peer through our all_to_all, then the received rows written into ``output``."""
    rows, out_rows = operand.shape[0], output.shape[0]
    within = jnp.arange(rows, dtype=jnp.int32)
    trailing = (1,) * (operand.ndim - 1)
    source = input_offsets.astype(jnp.int32)[:, None] + within[None, :]  # [world, rows]
    sent = within[None, :] < send_sizes.astype(jnp.int32)[:, None]
    packed = jnp.take(operand, jnp.clip(source, 0, rows - 1), axis=0)  # [world, rows, ...]
    packed = jnp.where(sent.reshape(sent.shape + trailing), packed, jnp.zeros((), operand.dtype))
    received = collectives.all_to_all(packed, axes, 0, 0, tiled=True, algorithm=algorithm)
    starts = collectives.all_to_all(output_offsets.astype(jnp.int32)[:, None], axes, 0, 0, tiled=True)
    kept = within[None, :] < recv_sizes.astype(jnp.int32)[:, None]
    target = jnp.where(kept, starts + within[None, :], out_rows)  # out of range: dropped
    return output.at[target.reshape(-1)].set(received.reshape((world * rows,) + operand.shape[1:]), mode="drop")


def _processes_share_gpus() -> bool:
    """Whether processes share a GPU here: there NVIDIA's NCCL refuses to run, so lax's ragged all-to-all runs only
    through our NCCL library, as XLA's send/receive fallback (every size copied to the host and waited for, then two
    groups of sends and receives on our point-to-point engine); and under XLA's command buffers with collectives
    not at all (its one-shot kernel needs every rank in one process)."""
    from .communicator import processes_share_gpus

    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        return False
    return processes_share_gpus(devices)


def _one_width(tables) -> tuple:
    """The four tables as integers of one width, as the kernel reads them: int64 if any is 64 bits wide, else
    int32."""
    width = jnp.int64 if any(np.dtype(t.dtype).itemsize == 8 for t in tables) else jnp.int32
    return tuple(t.astype(width) for t in tables)


# ---- the one-launch primitive ---------------------------------------------------------------------------------

ragged_p = Primitive("mscclpp_ragged_all_to_all")


def _impl(*args, **params):
    raise RuntimeError(f"{ragged_p.name} runs only inside jax.shard_map under jax.jit")


def _abstract_eval(operand, output, *tables, axes, world, why):
    """``output``'s type (not weak), varying over the axes and every axis an operand or table varies over."""
    del world, why
    varying = frozenset(axes).union(*(_compat.varying_axes(a) for a in (operand, output, *tables)))
    return _compat.with_varying_axes(output.update(weak_type=False), varying)


def _composition(axes, world):
    """``_composed`` over the primitive's operands, with the table's all_to_all."""
    def run(operand, output, *tables):
        return _composed(operand, output, *tables, axes=axes, world=world, algorithm=None)

    return run


def _explained(ctx, axes, algorithm: str, reason: str) -> None:
    aval = ctx.avals_in[0]
    explain.record(_API, axes, int(np.prod(aval.shape, dtype=int)) * np.dtype(aval.dtype).itemsize,
                   carriers.dtype_name(aval.dtype), algorithm, reason)


def _lower_composition(ctx, *args, axes, world, why, reason=HOST_COMPOSES):
    """The composition in place of the kernel (every platform but CUDA; on GPUs where ours cannot run)."""
    del why
    _explained(ctx, axes, explain.COMPOSED, reason)
    return mlir.lower_fun(_composition(axes, world), multiple_results=False)(ctx, *args)


def _composition_reason(ctx, mesh) -> str | None:
    """Why the kernel cannot run where this call is lowered (the composition runs), or None."""
    manual = _compat.lowering_manual_axes(ctx)
    if manual != frozenset(mesh.axis_names):
        return (f"the program is manual over {sorted(manual, key=repr)} only, not every mesh axis "
                f"{list(mesh.axis_names)}")
    if _compat.mesh_devices(mesh) is None:
        return "the mesh is abstract here (no devices): a GPU communicator needs the mesh's devices"
    dtype = ctx.avals_in[0].dtype
    if carriers._is_key(dtype) or (carriers._bits(dtype) or 8) < 8:
        return f"the kernel moves whole bytes, not elements of {carriers.dtype_name(dtype)}"
    return None


def _lower_gpu(ctx, operand, output, *tables, axes, world, why):
    mesh = _compat.lowering_mesh(ctx)
    if mesh is None:
        raise NotImplementedError(f"jax_mscclpp: {_API} over {axes} must run inside jax.shard_map; use "
                                  "lax.ragged_all_to_all under pmap")
    reason = _composition_reason(ctx, mesh)
    comm = None
    if reason is None:
        if Communicator.drop_unusable(mesh, axes):
            routing.logger.info("a failed call left the communicator over %s unusable: this program gets a fresh "
                                "one", axes)
        comm = Communicator(mesh, axes)
        reason = comm.fallback_reason
    if reason is not None:
        routing.logger.info("jax_mscclpp %s over %s lowers to ours composed of all_to_all: %s", _API, axes, reason)
        return _lower_composition(ctx, operand, output, *tables, axes=axes, world=world, why=why, reason=reason)
    _explained(ctx, axes, P2P, why)
    aval = ctx.avals_in[0]
    nbytes = int(np.prod(aval.shape, dtype=int)) * np.dtype(aval.dtype).itemsize
    target = jax.ffi.ffi_lowering(primitives.gpu_target(TARGET, nbytes), operand_output_aliases={1: 0},
                                  has_side_effect=True)
    return target(ctx, operand, output, *tables, comm_id=np.int64(comm.id))


def _jvp(primals, tangents, **params):
    """Linear in ``operand`` and ``output``: the tangents take the same exchange."""
    operand, output, *tables = primals
    d_operand, d_output, *_ = tangents
    result = ragged_p.bind(operand, output, *tables, **params)
    if type(d_operand) is ad.Zero and type(d_output) is ad.Zero:
        return result, ad.Zero.from_primal_value(result)
    return result, ragged_p.bind(ad.instantiate_zeros(d_operand), ad.instantiate_zeros(d_output), *tables, **params)


def _transpose(ct, operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axes, world, why):
    """As lax's: the operand's cotangent is the reverse exchange of ``ct`` (from where each peer's rows landed here,
    back to where they came from: the offsets crossed by our all_to_all), the output's is ``ct`` with the rows the
    exchange wrote over zeroed."""
    if type(ct) is ad.Zero:
        return [ad.Zero(operand.aval) if ad.is_undefined_primal(operand) else None,
                ad.Zero(output.aval) if ad.is_undefined_primal(output) else None, None, None, None, None]
    landed = collectives.all_to_all(output_offsets, axes, 0, 0, tiled=True)  # where peer j's rows are in ct
    came_from = collectives.all_to_all(input_offsets, axes, 0, 0, tiled=True)  # where they are in j's operand
    operand_t = output_t = None
    if ad.is_undefined_primal(operand):
        aval = operand.aval
        zeros = _compat.make_varying(jnp.zeros(aval.shape, aval.dtype), tuple(_compat.varying_axes(aval)))
        operand_t = ragged_p.bind(ct, zeros, landed, recv_sizes, came_from, send_sizes, axes=axes, world=world,
                                  why=why)
    if ad.is_undefined_primal(output):
        rows = jnp.arange(ct.shape[0], dtype=landed.dtype)[None, :]
        written = ((rows >= landed[:, None]) & (rows < landed[:, None] + recv_sizes[:, None])).any(axis=0)
        output_t = jnp.where(written.reshape(written.shape + (1,) * (ct.ndim - 1)), jnp.zeros((), ct.dtype), ct)
    return [operand_t, output_t, None, None, None, None]


def _batch(args, dims, *, axes, world, why):
    """Under vmap the composition runs (each mapped call its own exchange)."""
    del why
    in_axes = tuple(d if isinstance(d, int) else None for d in dims)
    return jax.vmap(_composition(axes, world), in_axes=in_axes)(*args), 0


ragged_p.def_impl(_impl)
ragged_p.def_abstract_eval(_abstract_eval)
# Not cacheable: each call is lowered where it stands (its collectives ordered after the previous one on CPU
# devices, _ordering.py; its decision noted for explain).
mlir.register_lowering(ragged_p, _lower_composition, cacheable=False)
if _native.CUDA_BUILT:
    mlir.register_lowering(ragged_p, _lower_gpu, platform="cuda", cacheable=False)
ad.primitive_jvps[ragged_p] = _jvp
ad.primitive_transposes[ragged_p] = _transpose
batching.primitive_batchers[ragged_p] = _batch


# ---- the public function --------------------------------------------------------------------------------------

def _varying(operand, output, tables, axes):
    """``operand`` and ``output`` cast to vary over the axes and every axis an argument varies over: the type of the
    result, which varies over the axes whatever ``output`` does."""
    varying = frozenset(axes).union(*(_compat.varying_axes(_compat.typeof(v)) for v in (operand, output, *tables)))
    varying = tuple(axes) + tuple(sorted(varying - frozenset(axes), key=repr))
    return _compat.make_varying(operand, varying), _compat.make_varying(output, varying)


def _one_launch(operand, output, offsets, *, axes, world, why):
    """``ragged_p`` bound on the checked operands, typed as the result (``_varying``), the tables to one width."""
    operand, output = _varying(operand, output, offsets, axes)
    return ragged_p.bind(operand, output, *_one_width(offsets), axes=axes, world=world, why=why)


def _varying_for_lax(args, axis_name):
    """``lax.ragged_all_to_all``'s arguments with ``operand`` and ``output`` cast to vary over the axes and every axis
    an argument varies over. lax types its result as its ``output`` operand (jax 0.10 to 0.12), though the result
    varies over the axes whatever ``output`` does: a result typed unvarying (``output`` made by ``jnp.zeros`` inside
    ``shard_map``) is cast back to varying where it meets varying values, and that cast's transpose, a psum, then
    sums every device's cotangent into each one's gradient. Typed as ours is, the gradients are right."""
    operand, output, *tables = args
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    return (*_varying(operand, output, tables, axes), *tables)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axis_name,
                      axis_index_groups=None, algorithm: str | None = None):
    """``lax.ragged_all_to_all``'s drop-in; see the module docstring for where ours and lax's run."""
    args = (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes)

    def lax_call(*a):
        with routing.lax_scope(_API):
            return lax.ragged_all_to_all(*_varying_for_lax(a, axis_name), axis_name=axis_name,
                                         axis_index_groups=axis_index_groups)

    check_algorithm(algorithm)
    if collectives._lax_route(_API, axis_name, [operand, output], axis_index_groups) is not None:
        return lax_call(*args)
    axes, world = collectives._axes_and_world(axis_name, _API)
    operand, output = jnp.asarray(operand), jnp.asarray(output)
    offsets = tuple(jnp.asarray(v) for v in args[2:])
    _check(operand, output, offsets, world)
    args = (operand, output, *offsets)
    nbytes = operand.size * operand.dtype.itemsize
    if algorithm == "lax":
        explain.record(_API, axes, nbytes, operand.dtype.name, "lax", "algorithm='lax' asked for")
        return lax_call(*args)
    platform = _compat.traced_platform() or jax.default_backend()
    if algorithm is None and platform == "gpu" and _processes_share_gpus():
        algorithm, why = P2P, P2P_WHERE_PROCESSES_SHARE
    else:
        why = P2P_ASKED
    if algorithm == P2P:
        if world == 1:  # nothing to exchange: no communicator
            routing.one_rank(_API, axes)
            return _composed(*args, axes=axes, world=world, algorithm=None)
        return _one_launch(operand, output, offsets, axes=axes, world=world, why=why)
    if algorithm is not None or platform == "cpu":
        return _composed(*args, axes=axes, world=world, algorithm=algorithm)
    explain.record(_API, axes, nbytes, operand.dtype.name, "lax",
                   "lax's ragged_all_to_all on distinct GPUs (it moves only the rows sent; 'p2p' against it there "
                   "is not measured)")
    return lax_call(*args)


__all__ = ["ragged_all_to_all"]
