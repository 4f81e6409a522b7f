"""``explain(fn, *args)``: every collective of a program and what runs it, with the reason, without running it.

``explain`` traces ``fn`` at ``args`` and lowers it, as ``jax.jit(fn).lower(*args)`` does, after
``jax.clear_caches()``, so that no trace or lowering cached by an earlier call hides a call: JAX compiles the
program again on its next call. It returns one ``ExplainedCall`` per collective of the program, in this order:

1. the calls of the package's collectives decided at trace time (``routing.py``): those handed to lax's collective
   (vmap axes, a shard_map manual over some mesh axes only, constants, ...), those over axes whose sizes multiply
   to one, which exchange nothing (``NO_EXCHANGE``), and those ours composes of its collectives (``COMPOSED``:
   ``axis_index_groups``, ``groups.py``);
2. the lax collectives of the program that are not the package's calls (``lax.psum`` in ``fn``, the psums JAX
   inserts under ``jax.grad``, what ``rewrite`` kept), named ``lax.<name>``. The lax collectives the package binds
   at trace time are bound under the name scope ``LAX_SCOPE``+name (``routing.lax_scope``), which tells them
   apart; JAX's transposes of those are listed here too;
3. every call of the package's primitives as lowered (``selection.decide``, or lax's collective where the
   lowering context needs it: ``routing.lax_reason``).

Every call has its reason. Programs and communicators are not changed, except that communicators the lowering
needs are made.
"""

from __future__ import annotations

import contextlib
import threading
from typing import NamedTuple

# The algorithm of a call that exchanges nothing (axes whose sizes multiply to one, or no axes).
NO_EXCHANGE = "none"
# The algorithm of a call that ours runs as a composition of its collectives and local steps, noted at trace time
# (``axis_index_groups``: ``groups.py``); its collectives are listed as lowered.
COMPOSED = "composed"
# The name scope of the lax collectives the package binds at trace time: this, then the public function's name.
LAX_SCOPE = "jax_mscclpp."
# The reasons of the lax collectives of a program that are not the package's calls.
PROGRAM_LAX = "lax's collective in the program, not a jax_mscclpp call (jax_mscclpp.rewrite replaces it)"
TRANSPOSED_LAX = "JAX's transpose of a jax_mscclpp call handed to lax's collective"


class ExplainedCall(NamedTuple):
    """One collective call of a traced program."""

    collective: str        # "all_reduce(sum)", "all_gather", ..., the public name of a call decided at trace
                           # time, or "lax.<name>" for a lax collective of the program
    axes: tuple            # the axes it runs over
    bytes: int | None      # its operand's bytes per rank (None for a call decided at trace time)
    dtype: str | None
    algorithm: str         # our algorithm's name, a registered plan's name, "2ph", "fused" (a fused epilogue's
                           # kernel), "lax", COMPOSED, or NO_EXCHANGE
    reason: str | None     # why it runs what it runs (the package always gives one)
    protocol: str | None = None  # what an algorithm chosen by size runs as (GPUs: "allpairs" -> "allpairs_ll")

    def __str__(self) -> str:
        size = "" if self.bytes is None else f" {self.bytes} B"
        dtype = "" if self.dtype is None else f" {self.dtype}"
        why = "" if self.reason is None or self.algorithm not in ("lax", NO_EXCHANGE, COMPOSED) else f" ({self.reason})"
        runs_as = "" if self.protocol is None else f" as {self.protocol}"
        return f"{self.collective} over {self.axes}{size}{dtype}: {self.algorithm}{runs_as}{why}"


_recording = threading.local()


def record(collective: str, axes: tuple, nbytes: int | None, dtype, algorithm: str, reason: str,
           protocol: str | None = None):
    """Notes one decided call, if an ``explain`` is recording in this thread (a no-op otherwise)."""
    calls = getattr(_recording, "calls", None)
    if calls is not None:
        calls.append(ExplainedCall(collective, tuple(axes), nbytes, None if dtype is None else str(dtype),
                                   algorithm, reason, protocol))


@contextlib.contextmanager
def _recorded():
    previous = getattr(_recording, "calls", None)
    _recording.calls = calls = []
    try:
        yield calls
    finally:
        _recording.calls = previous


def _program_lax_calls(jaxpr, transposed: bool = False, ours: bool = False) -> list[ExplainedCall]:
    """The lax collectives of ``jaxpr`` and of the jaxprs inside it that are not the package's calls (see the
    module docstring); ``transposed``/``ours``: whether the equation holding ``jaxpr`` is a transpose / under the
    package's scope."""
    from . import _compat, carriers

    inner, _ = _compat.jaxpr_and_consts(jaxpr)
    found = []
    for eqn in inner.eqns:
        stack = str(eqn.source_info.name_stack)
        eqn_transposed = transposed or "transpose(" in stack
        eqn_ours = ours or LAX_SCOPE in stack
        name = _compat.LAX_COLLECTIVES.get(eqn.primitive)
        if name is not None and (not eqn_ours or eqn_transposed):
            axes = _compat.collective_axes(eqn.params)
            for var in eqn.invars:
                aval = var.aval
                nbytes = int(aval.size) * aval.dtype.itemsize
                found.append(ExplainedCall(f"lax.{name}", axes, nbytes, carriers.dtype_name(aval.dtype), "lax",
                                           TRANSPOSED_LAX if eqn_ours else PROGRAM_LAX))
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                if _compat.is_jaxpr(item):
                    found += _program_lax_calls(item, eqn_transposed, eqn_ours)
    return found


def explain(fn, *args, **kwargs) -> list[ExplainedCall]:
    """The collectives of ``fn(*args, **kwargs)``'s program with what runs each one and why: a list of
    ``ExplainedCall`` (collective, axes, bytes per rank, dtype, algorithm, reason), printable one per line.
    ``fn`` is traced and lowered, not run; ``args`` may be arrays or ``jax.ShapeDtypeStruct``. JAX's in-memory
    caches are cleared first (``jax.clear_caches``): the next call of a jitted function compiles again."""
    import jax

    def fresh(*a, **k):  # a function of its own, so that no lowering cached for ``fn`` is reused
        return fn(*a, **k)

    jax.clear_caches()
    with _recorded() as calls:
        traced = jax.jit(fresh).trace(*args, **kwargs)
        calls += _program_lax_calls(traced.jaxpr)
        traced.lower()
    return list(calls)


__all__ = ["ExplainedCall", "explain"]
