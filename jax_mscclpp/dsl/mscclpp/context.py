"""The program being written (MSCCL++'s DSL is used inside ``with <program>:``) and the program line that makes
each call."""

from __future__ import annotations

import inspect
import os

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_DSL_DIR = os.path.dirname(_PACKAGE_DIR)
_current = None


def user_line() -> str | None:
    """``file:line`` of the innermost frame outside the DSL (this package and ``jax_mscclpp/dsl``): the line of
    the MSCCL++ program that made the call."""
    frame = inspect.currentframe()
    try:
        while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) in (
                _PACKAGE_DIR, _DSL_DIR):
            frame = frame.f_back
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame else None
    finally:
        del frame


def enter(program) -> None:
    global _current
    if _current is not None:
        raise RuntimeError(f"program {_current.name!r} is still being written: one program at a time")
    _current = program


def leave(program) -> None:
    global _current
    if _current is program:
        _current = None


def current():
    """The program of the enclosing ``with`` block; RuntimeError outside one (as in MSCCL++)."""
    if _current is None:
        raise RuntimeError("no MSCCL++ program in context: write the program inside `with CollectiveProgram(...)` "
                           "or `with MSCCLPPProgram(...)`")
    return _current
