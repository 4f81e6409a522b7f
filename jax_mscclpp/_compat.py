"""The few JAX internals this package relies on, in one place.

JAX's typing of values inside ``shard_map`` (which mesh axes a value varies over, "vma") and the lowering
context's view of the mesh are internal APIs that move between JAX releases. Everything that touches them goes
through this module, which CI tests on the oldest and the newest supported jax (0.10.2 and 0.12.0.1; the range:
``_jax_versions.py``), and the GPU machines on 0.11.2.
"""

from __future__ import annotations

import contextlib
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


def unreduced_axes(aval: Any) -> frozenset:
    """The mesh axes over which an abstract value holds partial sums still to be reduced (typed ``unreduced``)."""
    mat = getattr(aval, "mat", None)
    found = set(getattr(mat, "unreduced", ()) or ())
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    found.update(getattr(spec, "unreduced", ()) or ())
    return frozenset(found)


def is_tracer(x: Any) -> bool:
    """Whether ``x`` is a traced value (not a Python scalar, numpy value or concrete array)."""
    return isinstance(x, _core.Tracer)


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


def lowering_manual_axes(ctx: Any) -> frozenset:
    """The mesh axes the code being lowered is manual over (all of them inside a shard_map over every axis; some
    of them in a partially manual program: shard_map's ``axis_names=``, or a vmap of a shard_map)."""
    axis_context = ctx.module_context.axis_context
    return frozenset(getattr(axis_context, "manual_axes", ()) or ())


def mesh_devices(mesh: Any):
    """The devices of ``mesh`` in row-major order, or None for an abstract mesh (one without devices)."""
    if isinstance(mesh, _mesh.AbstractMesh):
        return None
    devices = getattr(mesh, "devices", None)
    return None if devices is None else tuple(devices.flat)


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


def barrier(name: str, timeout_s: float) -> None:
    """Waits until every process of a multi-process run reached ``barrier(name)``: JAX's coordination service, not
    a collective (which processes sharing a GPU could not run through NVIDIA's NCCL)."""
    coordination_client().wait_at_barrier(name, int(timeout_s * 1000))


def kv_get_bytes(key: str, timeout_s: float) -> bytes:
    return coordination_client().blocking_key_value_get_bytes(key, int(timeout_s * 1000))


# ---- jaxpr interpretation, for ``rewrite.py`` ------------------------------------------------------------------
#
# ``jax_mscclpp.rewrite`` traces a function to a jaxpr and evaluates it again, equation by equation, replacing the
# lax collectives. That needs JAX's tracing entry point, its collective primitives and the way a jaxpr carries its
# constants, all internal. The parts that differ between releases:
#   - jax 0.10 has two classes, ``Jaxpr`` (open) and ``ClosedJaxpr`` (a Jaxpr and its constants); jax 0.11 merged
#     them into one ``Jaxpr`` with attached constants (``ClosedJaxpr`` is an alias, ``.jaxpr`` returns itself).
#     ``ClosedJaxpr(jaxpr, consts)``, ``.jaxpr``, ``.consts``, ``.constvars``, ``.invars`` mean the same in both.
#   - primitive names and parameters of the collectives and of the higher-order primitives are the same in both.

from jax._src import api_util as _api_util
from jax._src import linear_util as _lu
from jax._src import mesh as _mesh
from jax._src import source_info_util as _source_info_util
from jax._src.interpreters import partial_eval as _pe
from jax._src.lax import lax as _lax_internal
from jax._src.lax import parallel as _parallel

from .collective_specs import LAX_PRIMITIVE_NAMES

# The lax collectives rewrite.py replaces, by primitive, with the public jax_mscclpp function each one maps to
# (collective_specs.py); each looked up by name, as a release may lack some (all_gather_invariant, pbroadcast).
LAX_COLLECTIVES = {getattr(_parallel, prim): name for prim, name in LAX_PRIMITIVE_NAMES.items()
                   if getattr(_parallel, prim, None) is not None}
# The lax collectives among those whose result is invariant over their axes besides the reductions.
INVARIANT_RESULT = frozenset(p for p in (getattr(_parallel, "all_gather_invariant_p", None),) if p is not None)

# pvary: the invariant -> varying cast that check_vma inserts; its transpose is a psum (psum_invariant).
pvary_p = _core.pvary_p


def pvary_abstract_eval(aval: Any, axes: tuple) -> Any:
    """The type of ``pvary(x, axes)``: lax's own rule, so a replacement types exactly as pvary."""
    out = _core.pvary_p.abstract_eval(aval, axes=axes)
    return out[0] if isinstance(out, tuple) else out


def collective_axes(params: dict) -> tuple:
    """The axis names of a lax collective equation (``axes`` for the reductions, ``axis_name`` for the others)."""
    axes = params["axes"] if "axes" in params else params["axis_name"]
    return tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)


# ---- lax.ppermute's arguments ------------------------------------------------------------------------------
#
# jax 0.10's lax.ppermute takes any iterable of pairs as ``perm`` and numbers the ranks of a tuple of axes row-major
# in the mesh's order, whatever order the tuple names them in. jax 0.11 and 0.12 take a list or tuple only
# (TypeError otherwise), and refuse a tuple of axes named in another order than the mesh's (RuntimeError at
# lowering), unless ``jax_raise_on_ppermute_sort_diff`` is off: then they number the ranks in the order the tuple
# names them, as lax.axis_index and all_gather do.

_PPERMUTE_SORT_DIFF = getattr(_config, "raise_on_ppermute_sort_diff", None)  # absent in jax 0.10


def check_ppermute_perm(perm: Any) -> None:
    """Raises the TypeError lax.ppermute raises where the installed lax refuses ``perm``'s type: lax's own
    argument check, run on an empty pytree, which binds nothing and needs no bound axis."""
    lax.ppermute((), (), perm)


def in_mesh_order(axes: tuple) -> tuple:
    """``axes`` in the order of the mesh where the caller is being traced."""
    order = {name: i for i, name in enumerate(_mesh.get_abstract_mesh().axis_names)}
    return tuple(sorted(axes, key=lambda a: order.get(a, len(order))))


def ppermute_rank_axes(axes: tuple) -> tuple:
    """The axes of a ppermute over ``axes`` in the order whose row-major ranks the installed lax.ppermute numbers
    its pairs by; RuntimeError where lax.ppermute refuses the order the tuple names them in (only axes of more
    than one rank count: the others change no rank's number)."""
    mesh_order = in_mesh_order(axes)
    if _PPERMUTE_SORT_DIFF is None:
        return mesh_order
    if not _PPERMUTE_SORT_DIFF.value:
        return tuple(axes)
    sizes = bound_axis_sizes()
    if [a for a in axes if sizes.get(a, 1) > 1] != [a for a in mesh_order if sizes.get(a, 1) > 1]:
        raise RuntimeError(
            f"jax_mscclpp.ppermute: the axes {tuple(axes)} are not in the mesh's order {mesh_order}, which "
            "lax.ppermute refuses in this jax: make sure that the axis_name passed is in the same order as the "
            "axis_names declared on the mesh, or, to number the ranks in the order named, turn the check off with "
            "jax.config.update('jax_raise_on_ppermute_sort_diff', False)")
    return mesh_order


def traced_platform() -> str | None:
    """The platform of the mesh where the caller is being traced ("cpu", "gpu", ...), or None where the mesh says
    none (outside shard_map and jit with a mesh)."""
    device = getattr(_mesh.get_abstract_mesh(), "abstract_device", None)
    platform = getattr(device, "platform", None)
    return {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)


def mesh_axes() -> tuple[frozenset, frozenset]:
    """(all axes, manual axes) of the mesh where the caller is being traced; manual axes are those an enclosing
    shard_map maps over (empty outside shard_map)."""
    mesh = _mesh.get_abstract_mesh()
    return frozenset(mesh.axis_names), frozenset(mesh.manual_axes)


# jax 0.10: ClosedJaxpr wraps an open Jaxpr; 0.11: an alias of Jaxpr, which carries its consts; 0.12: Jaxpr only
# (Jaxpr(jaxpr, consts) closes it, as ClosedJaxpr(jaxpr, consts) did).
_ClosedJaxpr = getattr(_core, "ClosedJaxpr", _core.Jaxpr)


def is_jaxpr(value: Any) -> bool:
    return isinstance(value, (_core.Jaxpr, _ClosedJaxpr))


def jaxpr_and_consts(jaxpr: Any) -> tuple:
    """(jaxpr, consts) of a closed or open jaxpr; evaluate with ``constvars <- consts, invars <- args``."""
    if isinstance(jaxpr, _ClosedJaxpr):
        return jaxpr.jaxpr, list(jaxpr.consts)
    return jaxpr, list(getattr(jaxpr, "consts", ()))


def closed_jaxpr(jaxpr: Any, consts: list) -> Any:
    """The closed jaxpr of ``jaxpr`` (open in jax 0.10) with ``consts`` for its constvars."""
    return _ClosedJaxpr(jaxpr, consts)


def trace_to_closed_jaxpr(flat_fun, in_avals: list, debug_info: Any) -> Any:
    """Traces ``flat_fun`` (flat arrays in, flat list of arrays out) at ``in_avals`` in the current context (axis
    env, mesh, check_vma) into a closed jaxpr."""
    wrapped = _lu.wrap_init(flat_fun, debug_info=debug_info)
    jaxpr, _, consts = _pe.trace_to_jaxpr_dynamic(wrapped, in_avals)
    return _ClosedJaxpr(jaxpr, consts)


def consts_as_arguments(closed: Any) -> tuple:
    """(open jaxpr taking the constants as leading arguments, the constants), for primitives whose jaxpr parameter
    must be open (remat)."""
    return _pe.convert_constvars_jaxpr(closed.jaxpr), list(closed.consts)


def function_debug_info(fun, args: tuple, kwargs: dict) -> Any:
    """Debug info naming ``fun`` for a trace whose arguments are not ``fun``'s own (rewrite traces array leaves)."""
    info = _api_util.debug_info("jax_mscclpp.rewrite", fun, args, kwargs)
    return info._replace(arg_names=None)


def wrap_like(fn, wrapped_fun: Any) -> Any:
    """``fn`` as a ``linear_util.WrappedFun`` carrying ``wrapped_fun``'s debug info (the custom_jvp/vjp parameters
    ``jvp_jaxpr_fun``, ``fwd_jaxpr_thunk`` and ``bwd`` are WrappedFuns)."""
    return _lu.wrap_init(fn, debug_info=wrapped_fun.debug_info)


def equation_context(eqn: Any):
    """The context ``core.eval_jaxpr`` evaluates ``eqn`` under: its source location and name stack, and its
    equation context (compute type, mesh, ...)."""
    stack = contextlib.ExitStack()
    name_stack = _source_info_util.current_name_stack() + eqn.source_info.name_stack
    stack.enter_context(_source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack))
    stack.enter_context(eqn.ctx.manager)
    return stack


def bind_equation(eqn: Any, args: list, params: dict) -> list:
    """Binds ``eqn``'s primitive to ``args`` with ``params`` (``eqn.params``, possibly with rewritten jaxprs) as
    ``core.eval_jaxpr`` does; returns the list of results."""
    prim = eqn.primitive
    out = prim.bind(*args, **prim.get_bind_params(params))
    return list(out) if prim.multiple_results else [out]


def retrace_context_key() -> tuple:
    """What a retraced jaxpr depends on besides the jaxpr itself: JAX's trace context and the bound axes."""
    return (_config.trace_context(), tuple(sorted(bound_axis_sizes().items(), key=repr)))


def with_weak_type(x: Any, weak_type: bool) -> Any:
    """``x`` with the same dtype, weakly or strongly typed (lax.all_to_all's result is strongly typed)."""
    return _lax_internal._convert_element_type(x, _core.typeof(x).dtype, weak_type=weak_type)


__all__ = [
    "LAX_COLLECTIVES",
    "bind_equation",
    "bound_axis_sizes",
    "closed_jaxpr",
    "collective_axes",
    "consts_as_arguments",
    "equation_context",
    "function_debug_info",
    "is_jaxpr",
    "jaxpr_and_consts",
    "check_ppermute_perm",
    "in_mesh_order",
    "ppermute_rank_axes",
    "mesh_axes",
    "pvary_abstract_eval",
    "pvary_p",
    "retrace_context_key",
    "trace_to_closed_jaxpr",
    "with_weak_type",
    "wrap_like",
    "coordination_client",
    "kv_get_bytes",
    "kv_set_bytes",
    "check_vma_enabled",
    "current_block",
    "module_state",
    "lowering_mesh",
    "is_tracer",
    "lowering_manual_axes",
    "make_varying",
    "mesh_devices",
    "unreduced_axes",
    "typeof",
    "varying_axes",
    "with_varying_axes",
]
