"""``jax_mscclpp.rewrite``: run an existing function on our collectives without editing it.

``rewrite(fun)`` is a function transformation, like ``jax.jit`` or ``jax.grad``: the function it returns traces
``fun`` to a jaxpr and evaluates that jaxpr again, equation by equation, binding every equation as it was except
the lax collectives, which become the public jax_mscclpp collectives:

    psum (psum_invariant under check_vma, psum_p without)  -> jax_mscclpp.psum
    pmax, pmin                                             -> jax_mscclpp.pmax, jax_mscclpp.pmin
    all_gather                                             -> jax_mscclpp.all_gather
    reduce_scatter (lax.psum_scatter)                      -> jax_mscclpp.psum_scatter
    all_to_all                                             -> jax_mscclpp.all_to_all
    all_gather_invariant (lax.all_gather(..., to=...))     -> jax_mscclpp.all_gather(..., to="invarying")
    ppermute (lax.ppermute, lax.pshuffle)                  -> jax_mscclpp.ppermute
    pbroadcast                                             -> jax_mscclpp.pbroadcast
    ragged_all_to_all                                      -> jax_mscclpp.ragged_all_to_all

It goes into the jaxprs of jit, shard_map, scan, while, cond, remat and closed_call, and into custom_jvp /
custom_vjp functions: their primal jaxpr now, and their JVP, forward and backward rules when JAX calls them, so
``jax.grad`` of a rewritten function runs a custom backward rule on our collectives too.

Psums that JAX inserts itself are replaced as well. Under ``check_vma`` (shard_map's default), JAX casts a value
that is invariant over a mesh axis to varying (``pvary``) wherever it meets a varying one, and the transpose of
that cast is a psum: ``jax.grad`` of a model whose replicated input or parameter feeds a sharded computation sums
its gradient with it. When ``rewrite`` encloses the ``jax.grad`` those psums are in the traced jaxpr; when
``jax.grad`` encloses ``rewrite``, the casts are rebound as ``mscclpp_pvary``, a cast typed and lowered exactly
like pvary whose transpose is ``jax_mscclpp.psum``.

The reductions of a jaxpr are bound together, as ``jax_mscclpp.psum`` binds a pytree (``_HeldReductions``):
``lax.psum`` of a pytree, or the gradient psums of a training step, make one call per dtype and size class
(``collectives.bucketed``), as many as ``jax_mscclpp.psum`` of the same pytree makes, not one per leaf.

A collective stays lax, with a debug message on the ``jax_mscclpp.rewrite`` logger saying why, when our backend
cannot run it (``routing.lax_reason``) or was not asked to: ``axis_index_groups``, no axes, positional (integer)
axes, axes that are not manual shard_map axes (vmap or pmap axis names), an operand typed unreduced, an axis size
of 1, a dtype ours cannot run (``carriers.py``), fewer than ``min_bytes`` bytes per rank, a collective not in
``collectives``, or a result that our collective would type as varying over more axes than lax does. Every
replacement types its result exactly as the lax collective did (shape, dtype, weak type and the axes it varies
over), so the equations after it, and the loop carries and ``out_specs`` around it, type-check unchanged.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import jax
import numpy as np
from jax import lax
from jax.extend.core import Literal, Primitive
from jax.interpreters import ad, batching, mlir

from . import _compat, collectives, permute, plans, public_calls, ragged, routing, selection
from ._types import ALGORITHMS_OF, Collective
from .collective_specs import REDUCTION_OF, REWRITABLE, SPECS

logger = logging.getLogger("jax_mscclpp.rewrite")
# The debug messages of one trace of a rewritten function, counted: logged when the trace ends, once each.
_log_state = threading.local()


def _log(message: str, *args) -> None:
    """A debug message; while a rewritten function is traced, counted and left for the end of the trace."""
    if not logger.isEnabledFor(logging.DEBUG):
        return
    counts = getattr(_log_state, "counts", None)
    if counts is None:
        logger.debug(message, *args)
    else:
        counts[message % args] += 1


def _logged_once(fn: Callable, name: str) -> Callable:
    """``fn`` whose outermost call logs the debug messages of its trace at its end, each distinct one once, with
    how many times it came and prefixed with ``name``."""

    @functools.wraps(fn)
    def logged(*args, **kwargs):
        if getattr(_log_state, "counts", None) is not None or not logger.isEnabledFor(logging.DEBUG):
            return fn(*args, **kwargs)
        _log_state.counts = collections.Counter()
        try:
            return fn(*args, **kwargs)
        finally:
            counts, _log_state.counts = _log_state.counts, None
            for message, count in counts.items():
                logger.debug("%s: %s%s", name, message, f" ({count} times)" if count > 1 else "")

    return logged


# The collectives ``rewrite`` can replace (the names ``collectives=`` and ``algorithm=`` take), with the Collective
# whose algorithm names each one knows (collective_specs.py).
COLLECTIVES = REWRITABLE


@dataclass(frozen=True)
class _Config:
    """What one ``rewrite`` replaces; hashable, as it keys the cache of rewritten jaxprs."""

    collectives: frozenset
    algorithm: str | tuple | None  # one name for every collective that knows it, or ((collective, name), ...)
    min_bytes: int

    @staticmethod
    def make(collectives_: Iterable[str] | None, algorithm, min_bytes: int) -> _Config:
        if collectives_ is None:
            chosen = frozenset(COLLECTIVES)
        else:
            if isinstance(collectives_, str):
                collectives_ = (collectives_,)
            chosen = frozenset(collectives_)
            unknown = sorted(chosen - set(COLLECTIVES))
            if unknown:
                raise ValueError(f"jax_mscclpp.rewrite: unknown collective(s) {', '.join(map(repr, unknown))}; "
                                 f"known: {', '.join(COLLECTIVES)}")
        if isinstance(algorithm, Mapping):
            unknown = sorted(set(algorithm) - set(COLLECTIVES))
            if unknown:
                raise ValueError(f"jax_mscclpp.rewrite: algorithm= names unknown collective(s) "
                                 f"{', '.join(map(repr, unknown))}; known: {', '.join(COLLECTIVES)}")
            algorithm = tuple(sorted(algorithm.items()))
        elif algorithm is not None and not isinstance(algorithm, str):
            raise TypeError("jax_mscclpp.rewrite: algorithm must be None, an algorithm name, or a mapping from "
                            f"collective name to algorithm name; got {type(algorithm).__name__}")
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, (int, np.integer)) or min_bytes < 0:
            raise ValueError(f"jax_mscclpp.rewrite: min_bytes must be a non-negative integer, got {min_bytes!r}")
        return _Config(chosen, algorithm, int(min_bytes))

    def algorithm_for(self, name: str) -> str | None:
        """The algorithm the collective ``name`` is asked to run (None: our selection table)."""
        if isinstance(self.algorithm, tuple):
            return dict(self.algorithm).get(name)
        if self.algorithm is None:
            return None
        collective = COLLECTIVES[name]
        entry = plans.registered(self.algorithm)
        knows = self.algorithm in ALGORITHMS_OF[collective] or (entry is not None and entry.collective == collective)
        knows = knows or (name == "ragged_all_to_all" and self.algorithm == ragged.P2P)  # its own one launch
        return self.algorithm if knows else None

    def check_algorithms(self) -> None:
        """Raises ValueError for an algorithm no collective it is given to knows (checked when tracing, so plans
        registered after ``rewrite`` count)."""
        if isinstance(self.algorithm, tuple):
            for name, algorithm in self.algorithm:
                if name == "ragged_all_to_all":
                    ragged.check_algorithm(algorithm, f"jax_mscclpp.rewrite ({name})")
                else:
                    selection.check_algorithm(COLLECTIVES[name], algorithm, f"jax_mscclpp.rewrite ({name})")
        elif self.algorithm is not None and not any(self.algorithm_for(name) for name in COLLECTIVES):
            known = sorted({a for c in set(COLLECTIVES.values()) for a in ALGORITHMS_OF[c]})
            raise ValueError(f"jax_mscclpp.rewrite: unknown algorithm {self.algorithm!r}; known: {', '.join(known)} "
                             "and the registered plans")


def rewrite(fun: Callable | None = None, *, collectives: Iterable[str] | None = None,
            algorithm: str | Mapping[str, str] | None = None, min_bytes: int = 0) -> Callable:
    """Returns a function that behaves like ``fun`` with its lax collectives replaced by jax_mscclpp's.

    ``fun`` may be a ``shard_map`` body (``jax.shard_map(rewrite(body), ...)``) or any function that contains
    ``jit``s and ``shard_map``s (``rewrite(jax.jit(step))``, ``jax.jit(rewrite(jax.grad(loss)))``); it must be
    traceable as for ``jax.jit``. Array arguments (and tracers) are traced; every other argument is passed to
    ``fun`` as it is.

    Args:
      collectives: the collectives to replace, among "psum", "pmax", "pmin", "all_gather", "psum_scatter",
        "all_to_all", "ppermute", "pbroadcast", "ragged_all_to_all" (default: all). The others stay lax.
      algorithm: an algorithm name given to every collective that knows it (e.g. "2pa_ll" reaches psum, pmax
        and pmin; "allpairs" the others; "p2p" ppermute and ragged_all_to_all), or a mapping from collective name
        to algorithm name. Default: our selection table.
      min_bytes: collectives whose per-rank operand is smaller stay lax.

    Also usable as a decorator factory: ``@rewrite(collectives=("psum",))``.
    """
    config = _Config.make(collectives, algorithm, min_bytes)
    if fun is None:
        return functools.partial(rewrite, collectives=collectives, algorithm=algorithm, min_bytes=min_bytes)
    if not callable(fun):
        raise TypeError(f"jax_mscclpp.rewrite: expected a function, got {type(fun).__name__}")
    return _rewritten(fun, config)


def _is_traced_argument(leaf) -> bool:
    """Arrays (and tracers) are traced; every other leaf is passed to the function as it is."""
    if isinstance(leaf, (jax.Array, jax.core.Tracer)):
        return True
    return isinstance(leaf, (np.ndarray, np.generic)) and leaf.dtype.kind in "biufc"


# Lax collectives met by _replace_collective on this thread (replaced or kept): a rewritten function whose trace
# meets none is told where its collectives are (_warn_no_collective), once per function.
_collectives_seen = threading.local()
_warned_no_collective: set = set()


def _warn_no_collective(fun: Callable) -> None:
    name = getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))
    if name in _warned_no_collective:
        return
    _warned_no_collective.add(name)
    import warnings

    warnings.warn(
        f"jax_mscclpp.rewrite({name}): the function holds no lax collective, so nothing was replaced. If it is "
        "sharded with jit and shardings (no shard_map), its collectives are inserted by XLA's partitioner and run "
        "through NCCL: jax_mscclpp.enable_nccl_backend() (or JAX_MSCCLPP_NCCL=1) runs them on jax_mscclpp's "
        "kernels (README, \"Every XLA collective, no code change\")", UserWarning, stacklevel=4)


def _rewritten(fun: Callable, config: _Config) -> Callable:
    """``fun`` traced at its array arguments and evaluated with the collectives replaced."""

    @functools.wraps(fun)
    def rewritten(*args, **kwargs):
        config.check_algorithms()
        leaves, in_tree = jax.tree_util.tree_flatten((args, kwargs))
        traced = [_is_traced_argument(leaf) for leaf in leaves]
        outputs = {}

        def flat_fun(*values):
            values = iter(values)
            full = [next(values) if t else leaf for leaf, t in zip(leaves, traced)]
            call_args, call_kwargs = jax.tree_util.tree_unflatten(in_tree, full)
            out_leaves, out_tree = jax.tree_util.tree_flatten(fun(*call_args, **call_kwargs))
            out_traced = [isinstance(leaf, (jax.Array, jax.core.Tracer)) for leaf in out_leaves]
            outputs.update(tree=out_tree, leaves=out_leaves, traced=out_traced)
            return [leaf for leaf, t in zip(out_leaves, out_traced) if t]

        in_values = [leaf for leaf, t in zip(leaves, traced) if t]
        seen_before = getattr(_collectives_seen, "count", 0)
        closed = _compat.trace_to_closed_jaxpr(flat_fun, [_compat.typeof(v) for v in in_values],
                                               _compat.function_debug_info(fun, args, kwargs))
        jaxpr, consts = _compat.jaxpr_and_consts(closed)
        results = iter(_evaluate(jaxpr, consts, in_values, config))
        if getattr(_collectives_seen, "count", 0) == seen_before:
            _warn_no_collective(fun)
        out = [next(results) if t else leaf for leaf, t in zip(outputs["leaves"], outputs["traced"])]
        return jax.tree_util.tree_unflatten(outputs["tree"], out)

    return _logged_once(rewritten, f"rewrite({getattr(fun, '__name__', 'function')})")


# ---- the interpreter ----------------------------------------------------------------------------------------

def _evaluate(jaxpr, consts, args, config: _Config) -> list:
    """Evaluates ``jaxpr`` on ``args`` in the current trace, as ``core.eval_jaxpr`` does, rewriting each equation.
    The reductions it replaces are held and bound together (``_HeldReductions``)."""
    env = {}
    held = _HeldReductions(config, env)

    def read(atom):
        return atom.val if isinstance(atom, Literal) else env[atom]

    for var, value in zip(jaxpr.constvars, consts):
        env[var] = value
    for var, value in zip(jaxpr.invars, args):
        env[var] = value
    for eqn in jaxpr.eqns:
        if held.defers(eqn):
            continue
        invals = [read(v) for v in eqn.invars]
        with _compat.equation_context(eqn):
            if held.hold(eqn, invals):
                continue
            outs = _rewrite_equation(eqn, invals, config)
        for var, value in zip(eqn.outvars, outs):
            env[var] = value
    held.release()
    return [read(v) for v in jaxpr.outvars]


class _HeldReductions:
    """The reductions of one jaxpr that ours replaces, held and bound together as ``jax_mscclpp.psum`` binds a
    pytree: each group of held reductions (same op, axes and algorithm) is one ``jax_mscclpp.all_reduce`` of its
    operands, bucketed by ``collectives.bucketed`` (one call per dtype and size class). ``lax.psum`` of a pytree
    binds one equation per leaf, and ``jax.grad`` one psum per replicated parameter among the backward pass's
    other equations: held, they make as many calls as ``jax_mscclpp.psum`` of the same pytree.

    The first-order equations without effects that read a held result (an optimizer's update, the reduce_sum of
    a bias's gradient) are deferred with it. Everything is released (bound, then the deferred equations
    evaluated in their order) when an equation that cannot be deferred (a collective, a primitive with inner
    jaxprs, one with effects) reads a held or deferred result, and when the jaxpr ends."""

    def __init__(self, config: _Config, env: dict):
        self.config, self.env = config, env
        self.groups: dict = {}  # (op, axes, algorithm) -> (the first equation, [(outvar, operand, out_aval)])
        self.deferred: list = []  # equations that read held results, in the jaxpr's order
        self.pending: set = set()  # the variables of held results and of deferred equations' results

    def defers(self, eqn) -> bool:
        """Whether ``eqn`` is deferred; an equation that reads a pending variable and cannot be deferred releases
        everything first (and is then evaluated: False)."""
        if not any(not isinstance(v, Literal) and v in self.pending for v in eqn.invars):
            return False
        if eqn.effects or _jaxpr_params(eqn.params) or eqn.primitive in _compat.LAX_COLLECTIVES:
            self.release()
            return False
        self.deferred.append(eqn)
        self.pending.update(eqn.outvars)
        return True

    def hold(self, eqn, invals: list) -> bool:
        """Holds ``eqn`` (under its equation context) if it is a reduction ours replaces; False otherwise."""
        name = _compat.LAX_COLLECTIVES.get(eqn.primitive)
        if name not in REDUCTION_OF:
            return False
        axes = _compat.collective_axes(eqn.params)
        if any(_replacement_reason(name, eqn, invar.aval, outvar.aval, axes, self.config) is not None
               for invar, outvar in zip(eqn.invars, eqn.outvars)):
            return False
        algorithm = self.config.algorithm_for(name)
        _, members = self.groups.setdefault((REDUCTION_OF[name], axes, algorithm), (eqn, []))
        for x, invar, outvar in zip(invals, eqn.invars, eqn.outvars):
            members.append((outvar, _vary(x, axes, self.config), outvar.aval))  # as lax does, through the cast
            self.pending.add(outvar)                                            # whose transpose is ours
            _log("replaced lax %s over %s on %s (%d bytes per rank) with jax_mscclpp.%s%s", name, axes,
                 invar.aval.str_short(), _nbytes(invar.aval), name, f" (algorithm {algorithm})" if algorithm else "")
        return True

    def release(self) -> None:
        """Binds every held group, in the order they were opened, then evaluates the deferred equations."""
        for (op, axes, algorithm), (first, members) in self.groups.items():
            with _compat.equation_context(first):
                reduction = public_calls.ours_collective(Collective.ALL_REDUCE, axes, op=op, algorithm=algorithm)
                outs = reduction([x for _, x, _ in members])
                for (outvar, _, out_aval), out in zip(members, outs):
                    self.env[outvar] = _typed_as(out, out_aval, self.config)
        deferred = self.deferred
        self.groups, self.deferred, self.pending = {}, [], set()
        for eqn in deferred:
            invals = [v.val if isinstance(v, Literal) else self.env[v] for v in eqn.invars]
            with _compat.equation_context(eqn):
                outs = _rewrite_equation(eqn, invals, self.config)
            for var, value in zip(eqn.outvars, outs):
                self.env[var] = value


def _rewrite_equation(eqn, invals: list, config: _Config) -> list:
    prim = eqn.primitive
    name = _compat.LAX_COLLECTIVES.get(prim)
    if name == "ragged_all_to_all":
        out = _replace_ragged(eqn, invals, config)
        if out is not None:
            return [out]
    elif name is not None and name not in REDUCTION_OF:  # a reduction ours replaces is held (_HeldReductions)
        out = _replace_collective(name, eqn, invals[0], config)
        if out is not None:
            return [out]
    elif prim is _compat.pvary_p:
        out = _replace_pvary(eqn, invals[0], config)
        if out is not None:
            return [out]
    else:
        handler = _HIGHER_ORDER.get(prim.name)
        if handler is not None:
            return handler(eqn, invals, config)
        if any(_contains_collective(j) for j in _jaxpr_params(eqn.params)):
            _log("kept the lax collectives inside %s: rewrite does not enter this primitive", prim.name)
    return _compat.bind_equation(eqn, invals, eqn.params)


# ---- collectives ---------------------------------------------------------------------------------------------

def _why_not(name: str, aval, axes: tuple, config: _Config, axis_index_groups=None) -> str | None:
    """Why the collective ``name`` over ``axes`` on ``aval`` must stay lax, or None when ours can run it: not asked
    for, lax's by ``routing.lax_reason``, or below ``min_bytes``."""
    if name not in config.collectives:
        return "not among the collectives asked for"
    reason = routing.lax_reason(name, axes, stage=routing.REWRITE, axis_index_groups=axis_index_groups, aval=aval,
                                collective=COLLECTIVES[name], op=REDUCTION_OF.get(name, "sum"))
    if reason is not None:
        return reason
    nbytes = _nbytes(aval)
    if nbytes < config.min_bytes:
        return f"{nbytes} bytes per rank is below min_bytes={config.min_bytes}"
    return None


def _nbytes(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * aval.dtype.itemsize


def _replacement_reason(name: str, eqn, aval, out_aval, axes: tuple, config: _Config) -> str | None:
    """Why the lax collective ``eqn`` (operand ``aval``, result ``out_aval``) stays lax (logged), or None when ours
    replaces it."""
    _collectives_seen.count = getattr(_collectives_seen, "count", 0) + 1
    reason = _why_not(name, aval, axes, config, eqn.params.get("axis_index_groups"))
    if reason is None and _compat.check_vma_enabled():
        # Ours: a reduction leaves the operand's varying axes minus the reduced ones, the others add them.
        varying = _compat.varying_axes(aval) | frozenset(axes)
        invariant = name in REDUCTION_OF or eqn.primitive in _compat.INVARIANT_RESULT
        ours = varying - frozenset(axes) if invariant else varying
        extra = ours - _compat.varying_axes(out_aval)
        if extra:
            reason = f"ours would vary over {sorted(extra)} where lax's result does not"
    if reason is not None:
        _log("kept lax %s over %s on %s: %s", name, axes, aval.str_short(), reason)
    return reason


def _shape_of(name: str, eqn) -> dict:
    """The shape parameters of ours for the lax collective ``eqn`` (public name ``name``), from the lax primitive's
    (``collective_specs.SPECS``)."""
    collective = COLLECTIVES[name]
    shape = {p.name: eqn.params[p.lax_param] for p in SPECS[collective].shape if p.lax_param is not None}
    if collective == Collective.ALL_GATHER:
        shape["to"] = "invarying" if eqn.primitive in _compat.INVARIANT_RESULT else "varying"
    elif collective == Collective.ALL_TO_ALL:
        # lax.all_to_all inserts the size-1 concat axis before binding, so the primitive always splits one axis into
        # world pieces and concatenates along another: our tiled all_to_all.
        shape["tiled"] = True
    return shape


def _replace_collective(name: str, eqn, x, config: _Config):
    """Our collective in place of ``eqn`` (a lax collective other than a reduction: ``_HeldReductions`` replaces
    those), typed as its result; None when it must stay lax."""
    aval, out_aval = eqn.invars[0].aval, eqn.outvars[0].aval
    axes = _compat.collective_axes(eqn.params)
    if _replacement_reason(name, eqn, aval, out_aval, axes, config) is not None:
        return None
    what = f"lax {name} over {axes} on {aval.str_short()}"
    algorithm = config.algorithm_for(name)
    x = _vary(x, axes, config)  # as lax does, through the cast whose transpose is ours
    if name == "pbroadcast":  # not a collective of its own: our all_gather and a slice of it
        out = permute.pbroadcast(x, axes, eqn.params["source"], algorithm=algorithm)
    else:
        out = public_calls.ours_collective(COLLECTIVES[name], axes, **_shape_of(name, eqn), algorithm=algorithm)(x)
    _log("replaced %s (%d bytes per rank) with jax_mscclpp.%s%s", what, _nbytes(aval), name,
         f" (algorithm {algorithm})" if algorithm else "")
    return _typed_as(out, out_aval, config)


def _replace_ragged(eqn, invals: list, config: _Config):
    """``jax_mscclpp.ragged_all_to_all`` in place of lax's (six operands; ragged.py says where each runs)."""
    _collectives_seen.count = getattr(_collectives_seen, "count", 0) + 1
    aval, out_aval = eqn.invars[0].aval, eqn.outvars[0].aval
    axes = _compat.collective_axes(eqn.params)
    reason = _why_not("ragged_all_to_all", aval, axes, config, eqn.params.get("axis_index_groups"))
    what = f"lax ragged_all_to_all over {axes} on {aval.str_short()}"
    if reason is not None:
        _log("kept %s: %s", what, reason)
        return None
    algorithm = config.algorithm_for("ragged_all_to_all")
    operand, output, *offsets = invals
    out = ragged.ragged_all_to_all(_vary(operand, axes, config), _vary(output, axes, config), *offsets,
                                   axis_name=axes, algorithm=algorithm)
    _log("replaced %s (%d bytes per rank) with jax_mscclpp.ragged_all_to_all%s", what, _nbytes(aval),
         f" (algorithm {algorithm})" if algorithm else "")
    return _typed_as(out, out_aval, config)


def _vary(x, axes: tuple, config: _Config):
    """``x`` cast to vary over ``axes`` (under check_vma): through ``mscclpp_pvary`` when psums are replaced."""
    if not _compat.check_vma_enabled():
        return x
    missing = tuple(a for a in axes if a not in _compat.varying_axes(_compat.typeof(x)))
    if not missing:
        return x
    if _why_not("psum", _compat.typeof(x), missing, config) is None:
        return pvary_p.bind(x, axes=missing, algorithm=config.algorithm_for("psum"))
    return lax.pcast(x, missing, to="varying")


def _typed_as(out, aval, config: _Config):
    """``out`` retyped as ``aval``: the same shape and dtype, cast to vary over the axes ``aval`` varies over,
    weakly typed as ``aval`` is. Anything else is a defect of the replacement, reported as such."""
    have = _compat.typeof(out)
    if have.shape != aval.shape or have.dtype != aval.dtype:
        raise AssertionError(f"jax_mscclpp.rewrite: replacement typed {have.str_short()} where lax gave "
                             f"{aval.str_short()}")
    if _compat.check_vma_enabled():
        missing = _compat.varying_axes(aval) - _compat.varying_axes(have)
        if missing:
            out = _vary(out, tuple(sorted(missing, key=repr)), config)
    if have.weak_type != aval.weak_type:
        out = _compat.with_weak_type(out, aval.weak_type)
    return out


# ---- pvary: the cast whose transpose is a psum ---------------------------------------------------------------

pvary_p = Primitive("mscclpp_pvary")
pvary_p.def_impl(lambda x, **params: x)
pvary_p.def_abstract_eval(lambda x, *, axes, algorithm: _compat.pvary_abstract_eval(x, axes))
mlir.register_lowering(pvary_p, lambda ctx, x, *, axes, algorithm: [x])
ad.deflinear2(pvary_p, lambda ct, x, *, axes, algorithm: [collectives.psum(ct, axes, algorithm=algorithm)])
batching.primitive_batchers[pvary_p] = lambda args, dims, **params: (pvary_p.bind(args[0], **params), dims[0])


def _replace_pvary(eqn, x, config: _Config):
    """``mscclpp_pvary`` in place of lax's pvary when its transpose, a psum over the same axes and operand size,
    is one we replace; None otherwise."""
    axes = _compat.collective_axes(eqn.params)
    aval = eqn.invars[0].aval
    if _why_not("psum", aval, axes, config) is not None:
        return None
    _log("replaced lax pvary over %s with mscclpp_pvary, whose transpose, a psum, is jax_mscclpp.psum", axes)
    return pvary_p.bind(x, axes=axes, algorithm=config.algorithm_for("psum"))


# ---- higher-order primitives ---------------------------------------------------------------------------------

# Rewritten jaxprs (and shard_map functions), per original jaxpr, per (config, trace context, ...): a jaxpr is
# rewritten once and the same object comes back each time, so JAX's compilation caches keep hitting when
# ``rewrite(jax.jit(step))`` is called again outside any trace.
_rewritten_jaxprs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_contains: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _jaxpr_params(params: dict) -> list:
    found = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if _compat.is_jaxpr(item):
                found.append(item)
    return found


def _contains_collective(jaxpr) -> bool:
    """Whether ``jaxpr`` or a jaxpr inside it has a lax collective, a pvary, or a custom_jvp/custom_vjp function
    (whose rules, traced only when JAX calls them, may have collectives): whether rewriting can change it."""
    try:
        return _contains[jaxpr]
    except KeyError:
        pass
    inner, _ = _compat.jaxpr_and_consts(jaxpr)
    found = any(
        eqn.primitive in _compat.LAX_COLLECTIVES
        or eqn.primitive is _compat.pvary_p
        or eqn.primitive.name in ("custom_jvp_call", "custom_vjp_call")
        or any(_contains_collective(j) for j in _jaxpr_params(eqn.params))
        for eqn in inner.eqns
    )
    _contains[jaxpr] = found
    return found


def _rewrite_jaxpr(jaxpr, config: _Config):
    """``jaxpr`` (closed or open) retraced in the current context with the collectives replaced, as a closed jaxpr
    with the same inputs and output types; ``jaxpr`` itself when there is nothing to replace."""
    if not _contains_collective(jaxpr):
        return jaxpr
    key = (config, _compat.retrace_context_key())
    per_jaxpr = _rewritten_jaxprs.setdefault(jaxpr, {})
    if key not in per_jaxpr:
        inner, consts = _compat.jaxpr_and_consts(jaxpr)
        per_jaxpr[key] = _compat.trace_to_closed_jaxpr(
            lambda *args: _evaluate(inner, consts, args, config), [v.aval for v in inner.invars],
            inner.debug_info)
    return per_jaxpr[key]


def _with_rewritten(*names: str):
    """A handler for primitives whose parameters ``names`` are closed jaxprs (or tuples of them) evaluated in the
    caller's context: they are rewritten and the primitive is bound again with them."""

    def handler(eqn, invals, config):
        params = dict(eqn.params)
        for name in names:
            value = params[name]
            if isinstance(value, tuple):
                params[name] = tuple(_rewrite_jaxpr(j, config) for j in value)
            else:
                params[name] = _rewrite_jaxpr(value, config)
        return _compat.bind_equation(eqn, invals, params)

    return handler


def _remat(eqn, invals, config):
    """remat's jaxpr parameter is open: a rewritten jaxpr's constants become leading arguments."""
    closed = _rewrite_jaxpr(eqn.params["jaxpr"], config)
    if closed is eqn.params["jaxpr"]:
        return _compat.bind_equation(eqn, invals, eqn.params)
    jaxpr, consts = _compat.consts_as_arguments(closed)
    prevent_cse = eqn.params["prevent_cse"]
    if isinstance(prevent_cse, tuple):
        prevent_cse = (True,) * len(consts) + prevent_cse
    params = dict(eqn.params, jaxpr=jaxpr, prevent_cse=prevent_cse)
    return _compat.bind_equation(eqn, [*consts, *invals], params)


def _shard_map(eqn, invals, config):
    """shard_map's body is traced in its own context (manual axes, check_vma): bound again through the public
    ``jax.shard_map`` with the same mesh, specs and axes, around the rewritten body. The mapped function is made
    once per body, so JAX's caches keep hitting when it runs outside any trace."""
    params = eqn.params
    body = params["jaxpr"]
    if not _contains_collective(body):
        return _compat.bind_equation(eqn, invals, params)
    settings = dict(mesh=params["mesh"], in_specs=tuple(params["in_specs"]), out_specs=tuple(params["out_specs"]),
                    axis_names=frozenset(params["newly_manual_axes"]), check_vma=params["check_vma"])
    key = ("shard_map", config, _compat.retrace_context_key(), *settings.values())
    per_jaxpr = _rewritten_jaxprs.setdefault(body, {})
    if key not in per_jaxpr:
        inner, consts = _compat.jaxpr_and_consts(body)

        def rewritten_body(*args):
            return tuple(_evaluate(inner, consts, args, config))

        per_jaxpr[key] = jax.shard_map(rewritten_body, **settings)
    return list(per_jaxpr[key](*invals))


def _retraced_rule(rule, config: _Config, result_jaxpr_index: int = 0):
    """``rule`` (a custom_jvp ``jvp_jaxpr_fun`` or custom_vjp ``fwd_jaxpr_thunk``: it returns a jaxpr, its
    constants, ...) with the jaxpr it returns rewritten. JAX calls it in the context the rule runs in."""

    def wrapped(*args):
        result = list(rule.call_wrapped(*args))
        jaxpr, consts = result[result_jaxpr_index], result[result_jaxpr_index + 1]
        closed = _rewrite_jaxpr(_compat.closed_jaxpr(jaxpr, consts), config)
        result[result_jaxpr_index], result[result_jaxpr_index + 1] = _compat.jaxpr_and_consts(closed)
        return tuple(result)

    return _compat.wrap_like(_logged_once(wrapped, "rewrite (a custom_jvp / custom_vjp rule)"), rule)


def _custom_jvp(eqn, invals, config):
    params = dict(eqn.params)
    params["call_jaxpr"] = _rewrite_jaxpr(params["call_jaxpr"], config)
    params["jvp_jaxpr_fun"] = _retraced_rule(params["jvp_jaxpr_fun"], config)
    return _compat.bind_equation(eqn, invals, params)


def _custom_vjp(eqn, invals, config):
    params = dict(eqn.params)
    params["call_jaxpr"] = _rewrite_jaxpr(params["call_jaxpr"], config)
    params["fwd_jaxpr_thunk"] = _retraced_rule(params["fwd_jaxpr_thunk"], config)
    bwd = params["bwd"]
    params["bwd"] = _compat.wrap_like(_rewritten(bwd.call_wrapped, config), bwd)
    return _compat.bind_equation(eqn, invals, params)


# Higher-order primitives, by name (the names are the same in jax 0.10 and 0.11).
_HIGHER_ORDER = {
    "jit": _with_rewritten("jaxpr"),
    "closed_call": _with_rewritten("call_jaxpr"),
    "scan": _with_rewritten("jaxpr"),
    "while": _with_rewritten("cond_jaxpr", "body_jaxpr"),
    "cond": _with_rewritten("branches"),
    "remat2": _remat,
    "shard_map": _shard_map,
    "custom_jvp_call": _custom_jvp,
    "custom_vjp_call": _custom_vjp,
}


__all__ = ["COLLECTIVES", "pvary_p", "rewrite"]
