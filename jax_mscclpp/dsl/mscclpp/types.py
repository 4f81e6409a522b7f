"""The enumerations of MSCCL++'s DSL (``mscclpp.language.types``, ``mscclpp.language.internal.types``), one
definition for both of its APIs."""

from __future__ import annotations

from enum import Enum


class _Named(Enum):
    """An enumeration whose members print as their values, as MSCCL++'s do."""

    def __str__(self):
        return self.value


class ReplicationPolicy(_Named):
    """How ``instances`` copies of a program share the buffers. Every policy lowers to our replication
    (PLAN.md, "How lowering builds a plan": instance i takes its own chunks of every block, thread blocks and
    channels), which computes the same collective; the chunk order inside a block may differ from MSCCL++'s."""

    duplicated = "duplicated"
    interleaved = "interleaved"
    packed = "packed"
    none = "none"


class BufferType(_Named):
    """A rank's buffers. The chunk API calls this ``Buffer`` (``buffer.py``)."""

    input = "i"
    output = "o"
    scratch = "s"


# Our plan's name of each buffer.
PLAN_BUFFER = {BufferType.input: "input", BufferType.output: "output", BufferType.scratch: "scratch"}


class ChannelType(_Named):
    """Channel kinds. ``nvls`` (the chunk API's name) is ``switch``; ``proxy`` and ``sm`` are the old names of
    ``port`` and ``memory``."""

    port = "port"
    memory = "memory"
    switch = "switch"
    none = "none"
    nvls = "switch"
    proxy = "port"
    sm = "memory"


class DataFormat(_Named):
    raw = "raw"
    packet = "packet"


class SyncType(_Named):
    """Where the thread block synchronizes around a signal or wait. Our lowering places thread block barriers
    itself (PLAN.md, "Barriers"), so the value is accepted and has no effect."""

    none = "none"
    before = "before"
    after = "after"
    both = "both"


class ReduceOperationType(_Named):
    """The reduction of a reduce call. A plan names no reduction (each call brings its own), so only ``sum``, the
    default, is accepted: the call's ``op`` decides."""

    sum = "sum"
    min = "min"
    max = "max"


__all__ = ["BufferType", "ChannelType", "DataFormat", "ReduceOperationType", "ReplicationPolicy", "SyncType"]
