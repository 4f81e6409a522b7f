"""``mscclpp.language.general``: ``JSON()``, the program being written in MSCCL++'s executor format."""

from __future__ import annotations

from . import context

__all__ = ["JSON"]


def JSON() -> str:  # noqa: N802 (MSCCL++'s name)
    """The current program's plan in MSCCL++'s executor JSON format (``to_json``)."""
    return context.current().to_json()
