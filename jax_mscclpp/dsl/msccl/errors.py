"""Mistakes in an MSCCLang program, located at the program's own line.

They are the DSL's ``VerificationError`` of kind ``program``; ``src_line`` is the innermost frame outside this
package, which is the line of the MSCCLang program that made the call.
"""

from __future__ import annotations

import inspect
import os

from ..errors import VerificationError

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def program_line() -> str | None:
    """``file:line`` of the innermost frame outside this package."""
    frame = inspect.currentframe()
    try:
        while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
            frame = frame.f_back
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame else None
    finally:
        del frame


def program_error(detail: str, src_line: str | None = None) -> VerificationError:
    """A ``program`` VerificationError at ``src_line`` (default: the program line being run)."""
    return VerificationError("program", detail, src_line=src_line or program_line())
