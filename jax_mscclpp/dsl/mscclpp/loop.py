"""``mscclpp.language.loop``: MSCCL++'s pipelined loops, which have no counterpart (a plan has no loops)."""

from __future__ import annotations

from .errors import UnsupportedConstruct

__all__ = ["LoopIterationContext"]


class LoopIterationContext:
    def __init__(self, *args, **kwargs):
        raise UnsupportedConstruct("LoopIterationContext(...)", "a plan has no loops: our executors pipeline a "
                                   "large message through scratch themselves; write one iteration")
