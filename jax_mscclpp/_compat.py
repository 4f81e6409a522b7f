"""The few JAX internals this package relies on, in one place.

JAX's typing of values inside ``shard_map`` (which mesh axes a value varies over, "vma") and the lowering
context's view of the mesh are internal APIs that move between JAX releases. Everything that touches them goes
through this module, which is tested on the CI's JAX (0.10) and the GPU machine's (0.11).
"""

from __future__ import annotations

from typing import Any

import jax
from jax import lax
from jax._src import config as _config
from jax._src import core as _core
from jax._src import sharding_impls as _sharding_impls


def check_vma_enabled() -> bool:
    """Whether the enclosing ``shard_map`` tracks varying axes (its ``check_vma=True``, the default)."""
    return bool(_config._check_vma.value)


def varying_axes(aval: Any) -> frozenset:
    """The mesh axes an abstract value varies over."""
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", frozenset()))


def with_varying_axes(aval: Any, axes: frozenset) -> Any:
    """``aval`` retyped to vary over exactly ``axes``."""
    if not check_vma_enabled():
        return aval
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return aval.update(manual_axis_type=mat.update(varying=frozenset(axes)))
    return aval.update(vma=frozenset(axes))


def make_varying(x: Any, axes: tuple) -> Any:
    """``x`` cast to vary over ``axes`` (a no-op for the axes it already varies over), as lax collectives do."""
    if not check_vma_enabled():
        return x
    missing = tuple(a for a in axes if a not in varying_axes(_core.typeof(x)))
    if not missing:
        return x
    return lax.pcast(x, missing, to="varying")


def bound_axis_sizes() -> dict:
    """Names and sizes of the mesh/map axes bound where the caller is being traced (empty outside shard_map)."""
    env = _core.get_axis_env()
    return {name: env.axis_size(name) for name in env.axis_names()}


def lowering_mesh(ctx: Any):
    """The mesh a collective is being lowered for, or None outside an SPMD (shard_map/jit) context.

    The mesh is concrete when the program was built with one (it carries devices), abstract otherwise.
    """
    axis_context = ctx.module_context.axis_context
    if isinstance(axis_context, _sharding_impls.SPMDAxisContext):
        return axis_context.mesh
    return None


def module_state(ctx: Any, key: str) -> dict:
    """A dict that lives as long as the MLIR module being lowered (for state shared by the lowering rules of one
    module), kept in the module context's cache of primitive lowerings under a key no primitive uses."""
    cache = ctx.module_context.cached_primitive_lowerings
    return cache.setdefault(("jax_mscclpp", key), {})


def current_block() -> Any:
    """The MLIR block the lowering is inserting into now (hashable; equal for the same block)."""
    from jax._src.lib.mlir import ir

    return ir.InsertionPoint.current.block


def typeof(x: Any) -> Any:
    return _core.typeof(x)


def coordination_client():
    """JAX's coordination-service client of a multi-process run (``jax.distributed.initialize``), or None."""
    from jax._src import distributed

    return distributed.global_state.client


def kv_set_bytes(key: str, value: bytes, replace: bool = False) -> None:
    """Publishes ``value`` under ``key``; ``replace`` overwrites what an earlier, failed attempt left there."""
    client = coordination_client()
    if replace:
        client.key_value_delete(key)
    client.key_value_set_bytes(key, value)


def kv_get_bytes(key: str, timeout_s: float) -> bytes:
    return coordination_client().blocking_key_value_get_bytes(key, int(timeout_s * 1000))


__all__ = [
    "bound_axis_sizes",
    "coordination_client",
    "kv_get_bytes",
    "kv_set_bytes",
    "check_vma_enabled",
    "current_block",
    "module_state",
    "lowering_mesh",
    "make_varying",
    "typeof",
    "varying_axes",
    "with_varying_axes",
]
