"""``explain(fn, *args)``: which algorithm each collective call of a program gets, without running it.

``explain`` lowers ``fn`` at ``args`` (as ``jax.jit(fn).lower(*args)`` does, in a fresh trace so that no cached
lowering hides a call) and returns one ``ExplainedCall`` per call of the package's collectives in the program, in
the order they were decided: the calls handed to lax's collective at trace time (``routing.py``) and every call
lowered (``selection.decide``, or lax's collective where the lowering context needs it), with the reason when it
is lax. Programs and communicators are not changed, except that communicators the lowering needs are made.
"""

from __future__ import annotations

import contextlib
import threading
from typing import NamedTuple


class ExplainedCall(NamedTuple):
    """One collective call of a traced program."""

    collective: str        # "all_reduce(sum)", "all_gather", ... or the public name of a call handed to lax
    axes: tuple            # the axes it runs over
    bytes: int | None      # its operand's bytes per rank (None for a call handed to lax before typing)
    dtype: str | None
    algorithm: str         # our algorithm's name, a registered plan's name, "2ph", or "lax"
    reason: str | None     # why lax, where it is lax for a reason other than the selection table's rules
    protocol: str | None = None  # what an algorithm chosen by size runs as (GPUs: "allpairs" -> "allpairs_ll")

    def __str__(self) -> str:
        size = "" if self.bytes is None else f" {self.bytes} B"
        dtype = "" if self.dtype is None else f" {self.dtype}"
        why = "" if self.reason is None else f" ({self.reason})"
        runs_as = "" if self.protocol is None else f" as {self.protocol}"
        return f"{self.collective} over {self.axes}{size}{dtype}: {self.algorithm}{runs_as}{why}"


_recording = threading.local()


def record(collective: str, axes: tuple, nbytes: int | None, dtype, algorithm: str, reason: str | None = None,
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


def explain(fn, *args, **kwargs) -> list[ExplainedCall]:
    """The collective calls of ``fn(*args, **kwargs)`` with the algorithm each one gets: a list of
    ``ExplainedCall`` (collective, axes, bytes per rank, dtype, algorithm, reason), printable one per line.
    ``fn`` is lowered, not run; ``args`` may be arrays or ``jax.ShapeDtypeStruct``."""
    import jax

    def fresh(*a, **k):  # a function of its own, so that no lowering cached for ``fn`` is reused
        return fn(*a, **k)

    with _recorded() as calls:
        jax.jit(fresh).lower(*args, **kwargs)
    return list(calls)


__all__ = ["ExplainedCall", "explain"]
