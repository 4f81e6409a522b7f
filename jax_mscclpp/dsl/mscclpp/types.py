"""The enumerations of MSCCL++'s DSL (``mscclpp.language.types``, ``mscclpp.language.internal.types``), one
definition for both of its APIs."""

from __future__ import annotations

from enum import Enum

from .utils import ReplicationPolicy


class BufferType(Enum):
    """A rank's buffers. The chunk API calls this ``Buffer`` (``buffer.py``)."""

    input = "i"
    output = "o"
    scratch = "s"

    def __str__(self):
        return self.value


# Our plan's name of each buffer.
PLAN_BUFFER = {BufferType.input: "input", BufferType.output: "output", BufferType.scratch: "scratch"}


class ChannelType(Enum):
    """Channel kinds. ``nvls`` (the chunk API's name) is ``switch``; ``proxy`` and ``sm`` are the old names of
    ``port`` and ``memory``."""

    port = "port"
    memory = "memory"
    switch = "switch"
    none = "none"
    nvls = "switch"
    proxy = "port"
    sm = "memory"

    def __str__(self):
        return self.value


class DataFormat(Enum):
    raw = "raw"
    packet = "packet"

    def __str__(self):
        return self.value


class SyncType(Enum):
    """Where the thread block synchronizes around a signal or wait. Our lowering places thread block barriers
    itself (PLAN.md, "Barriers"), so the value is accepted and has no effect."""

    none = "none"
    before = "before"
    after = "after"
    both = "both"

    def __str__(self):
        return self.value


class ReduceOperationType(Enum):
    """The reduction of a reduce call. A plan names no reduction (each call brings its own), so only ``sum``, the
    default, is accepted: the call's ``op`` decides."""

    sum = "sum"
    min = "min"
    max = "max"

    def __str__(self):
        return self.value


__all__ = ["BufferType", "ChannelType", "DataFormat", "ReduceOperationType", "ReplicationPolicy", "SyncType"]
