"""``ragged_all_to_all``: ``lax.ragged_all_to_all``'s drop-in (mixture-of-experts dispatch and combine).

Rank i sends ``operand[input_offsets[j] : input_offsets[j] + send_sizes[j]]`` to every rank j, which writes those
rows into its ``output`` from row ``output_offsets[j]`` (the sender gives where its rows land in the receiver's
output, as in lax); ``recv_sizes[j]`` is how many rows rank i receives from rank j; rows nothing is written to keep
``output``'s values.

Ours is a composition of our all_to_all: each rank packs, for every peer, a block of ``operand.shape[0]`` rows (its
chunk, then zeros), the blocks and the output offsets cross in two all_to_alls, and each rank writes the rows it
receives into ``output``. It moves ``world x operand rows`` per rank where lax's (NCCL's) moves the rows sent, so by
default:

- CPU devices: ours (XLA:CPU has no ragged-all-to-all);
- GPUs: lax's, except where processes share a GPU and our NCCL library is not loaded (NVIDIA's NCCL refuses to run
  there): ours.

``algorithm="lax"`` forces lax's, an all_to_all algorithm's name ours with that all_to_all. Calls ours cannot run
(``routing``: vmap axes, partially manual shard_maps, ``axis_index_groups``) are lax's, logged. It differentiates
in ``operand`` and ``output`` through the composition (offsets and sizes are integers), as lax's does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from . import _compat, collectives, explain, routing, selection
from ._types import Collective

_API = "ragged_all_to_all"


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


def _lax_cannot_run_on_gpus() -> bool:
    """Whether processes share a GPU here with NVIDIA's NCCL the one XLA would call (which refuses that)."""
    from .communicator import processes_share_gpus

    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        return False
    return processes_share_gpus(devices) and not selection.nccl_api_active()


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axis_name,
                      axis_index_groups=None, algorithm: str | None = None):
    """``lax.ragged_all_to_all``'s drop-in; see the module docstring for where ours and lax's run."""
    args = (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes)

    def lax_call(*a):
        with routing.lax_scope(_API):
            return lax.ragged_all_to_all(*a, axis_name=axis_name, axis_index_groups=axis_index_groups)

    collectives._check_algorithm(Collective.ALL_TO_ALL, algorithm, _API)
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
    if algorithm is not None or platform == "cpu" or _lax_cannot_run_on_gpus():
        return _composed(*args, axes=axes, world=world, algorithm=algorithm)
    explain.record(_API, axes, nbytes, operand.dtype.name, "lax",
                   "lax's ragged_all_to_all moves only the rows sent (ours moves world x operand rows) on GPUs")
    return lax_call(*args)


__all__ = ["ragged_all_to_all"]
