"""The errors of the MSCCL++ front end, located at the line of the MSCCL++ program that made the call."""

from __future__ import annotations

from ..errors import VerificationError
from .context import user_line


class UnsupportedConstruct(NotImplementedError):
    """An MSCCL++ DSL call (``call``) that our plans cannot express, and why (``reason``).

    ``src_line`` is the program's line that made the call (by default the line running now), when known."""

    def __init__(self, call: str, reason: str, src_line: str | None = None):
        self.call = call
        self.reason = reason
        self.src_line = src_line or user_line()
        where = f" at {self.src_line}" if self.src_line else ""
        super().__init__(f"{call}{where}: {reason}")


def require(condition: bool, call: str, reason: str) -> None:
    """Raise UnsupportedConstruct(call, reason) unless ``condition``."""
    if not condition:
        raise UnsupportedConstruct(call, reason)


def mistake(detail: str) -> VerificationError:
    """A ``program`` VerificationError: the MSCCL++ program is malformed (as MSCCL++ itself would refuse it)."""
    return VerificationError("program", detail, src_line=user_line())
