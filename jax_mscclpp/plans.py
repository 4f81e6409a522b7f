"""Execution plans as algorithms: ``register_algorithm`` puts a DSL program (or its lowered plan) into the
selection table, and this module encodes plans for the native executors.

The JSON plan (``dsl/PLAN.md``) is the documented interchange format; the executors receive it as plain
integers, decoded and checked once when a plan is bound to a communicator (``ffi/host_plan.h``):

    geometry      [input blocks, output blocks, chunks per block, scratch chunks, scratch packets (0/1)]
    channel       [type, peer, peer_channel] (memory 0, port 1) or [2, -1, -1, member, member, ...] (switch)
    operation     [code, channel, n_srcs, n_packet_srcs, n_remotes, dst(3), src(3), srcs(3 each),
                   packet_srcs(channel + 3 each), remotes(channel + 3 each)]
    chunk         [buffer (input 0, output 1, scratch 2, none -1), index, count]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from typing import Any, Callable

from ._types import Collective

OPCODES = {
    "copy": 0, "reduce": 1, "put": 2, "put_packets": 3, "read_packets": 4, "signal": 5, "wait": 6, "flush": 7,
    "put_with_signal": 8, "reduce_put": 9, "reduce_packets": 10, "barrier": 11, "switch_reduce": 12,
    "switch_broadcast": 13,
}
_BUFFERS = {"input": 0, "output": 1, "scratch": 2}
_CHANNEL_TYPES = {"memory": 0, "port": 1, "switch": 2}
_COLLECTIVES = {c.name.lower(): c for c in Collective}
_PACKET_DATA, _PACKET_BYTES = 4, 8


def _chunk(ref: dict | None) -> list[int]:
    return [-1, 0, 0] if ref is None else [_BUFFERS[ref["buffer"]], ref["index"], ref["count"]]


def encode_op(op: dict) -> list[int]:
    srcs, packet_srcs, remotes = op.get("srcs", []), op.get("packet_srcs", []), op.get("remotes", [])
    words = [OPCODES[op["op"]], op.get("channel", -1), len(srcs), len(packet_srcs), len(remotes)]
    words += _chunk(op.get("dst")) + _chunk(op.get("src"))
    for ref in srcs:
        words += _chunk(ref)
    for item in packet_srcs:
        words += [item["channel"], *_chunk(item["src"])]
    for item in remotes:
        words += [item["channel"], *_chunk(item["dst"])]
    return words


def encode_plan(plan: dict) -> dict:
    """The integer form of a plan, as ``register_host_plan`` takes it."""
    buffers = plan["buffers"]
    geometry = [
        buffers["input"]["blocks"],
        buffers["output"]["blocks"],
        buffers["input"]["chunks_per_block"],
        buffers["scratch"]["blocks"] * buffers["scratch"]["chunks_per_block"],
        int(bool(buffers["scratch"].get("packets", False))),
    ]
    channels, threadblocks = [], []
    for rank in plan["ranks"]:
        channels.append([
            [2, -1, -1, *c["peers"]] if c["type"] == "switch"
            else [_CHANNEL_TYPES[c["type"]], c["peer"], c["peer_channel"]]
            for c in rank["channels"]
        ])
        threadblocks.append([[w for op in tb["ops"] for w in encode_op(op)] for tb in rank["threadblocks"]])
    return {
        "name": plan["name"],
        "collective": int(_COLLECTIVES[plan["collective"]]),
        "world_size": plan["world_size"],
        "geometry": geometry,
        "channels": channels,
        "threadblocks": threadblocks,
    }


def scratch_bytes(plan: dict, block_count: int, itemsize: int) -> int:
    """Scratch one call of ``plan`` needs (PLAN.md: packet chunks have the LL8 stride)."""
    buffers = plan["buffers"]
    ce = math.ceil(block_count / buffers["input"]["chunks_per_block"])
    chunk = ce * itemsize
    if buffers["scratch"].get("packets", False):
        chunk = math.ceil(chunk / _PACKET_DATA) * _PACKET_BYTES
    return buffers["scratch"]["blocks"] * buffers["scratch"]["chunks_per_block"] * chunk


@dataclasses.dataclass
class PlanAlgorithm:
    """A registered plan: a Program, a plan dict, or a function of the world size returning a Program."""

    name: str
    collective: Collective
    source: Any
    min_bytes: int
    max_bytes: int | None
    platforms: tuple
    id: int
    _lowered: dict = dataclasses.field(default_factory=dict)

    def plan_for(self, world_size: int) -> dict | None:
        """The plan for ``world_size`` ranks, or None when the source has none for it."""
        if world_size not in self._lowered:
            self._lowered[world_size] = _lower(self.source, world_size)
        return self._lowered[world_size]

    def covers(self, nbytes: int) -> bool:
        return nbytes >= self.min_bytes and (self.max_bytes is None or nbytes <= self.max_bytes)


def _lower(source, world_size: int) -> dict | None:
    from . import dsl

    if isinstance(source, dict):
        plan = dsl.verify(source)
    elif isinstance(source, dsl.Program):
        plan = source.lower()
    else:
        plan = source(world_size).lower()
    return plan if plan["world_size"] == world_size else None


_registry: dict[str, PlanAlgorithm] = {}
_lock = threading.Lock()
_ids = itertools.count(1)


def register_algorithm(program_or_plan, collective: str | None = None, *, name: str | None = None,
                       min_bytes: int = 0, max_bytes: int | None = None, platforms=("cpu",)) -> PlanAlgorithm:
    """Adds a DSL algorithm to the selection table for per-rank message sizes in [min_bytes, max_bytes].

    ``program_or_plan`` is a ``dsl.Program``, a lowered plan dict, or a function of the world size returning a
    Program (as the functions of ``dsl.library`` are). The plan is verified before it is used. Registered
    algorithms are consulted before the built-in table, and ``algorithm=name`` forces one.
    """
    from . import dsl

    if isinstance(program_or_plan, dict):
        known_collective, default_name = program_or_plan.get("collective"), program_or_plan.get("name")
        dsl.verify(program_or_plan)
    elif isinstance(program_or_plan, dsl.Program):
        known_collective, default_name = program_or_plan.collective, program_or_plan.name
        program_or_plan.lower()  # verifies
    elif callable(program_or_plan):
        probe = program_or_plan(2)
        known_collective, default_name = probe.collective, probe.name
        probe.lower()
    else:
        raise TypeError("register_algorithm takes a dsl.Program, a plan dict, or a function of the world size")
    collective = collective or known_collective
    if collective != known_collective:
        raise ValueError(f"the plan implements {known_collective}, not {collective}")
    name = name or default_name
    if name in ("lax",) or name in _builtin_names():
        raise ValueError(f"{name!r} is a built-in algorithm name: choose another")
    for platform in platforms:
        if platform != "cpu":
            raise ValueError(f"plans run on the host backend ('cpu') in this version, not {platform!r}")
    entry = PlanAlgorithm(name, _COLLECTIVES[collective], program_or_plan, int(min_bytes), max_bytes,
                          tuple(platforms), next(_ids))
    with _lock:
        _registry[name] = entry
    return entry


def unregister_algorithm(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def registered(name: str | None) -> PlanAlgorithm | None:
    return _registry.get(name) if name is not None else None


def registered_for(collective: Collective, platform: str) -> list[PlanAlgorithm]:
    with _lock:
        return [p for p in _registry.values() if p.collective == collective and platform in p.platforms]


def _builtin_names() -> set:
    from ._types import ALGORITHMS_OF

    return {n for names in ALGORITHMS_OF.values() for n in names}


def pick(collective: Collective, platform: str, requested: str | None, nbytes: int, world_size: int,
         block_count: int, itemsize: int, scratch_limit: int) -> tuple[PlanAlgorithm, dict] | None:
    """The registered plan to run for this call, if any: the requested one (an error if it cannot run here),
    else the first registered for this collective whose size range covers the call and whose scratch fits."""
    if requested is not None:
        entry = registered(requested)
        if entry is None:
            return None
        plan = entry.plan_for(world_size) if platform in entry.platforms else None
        if plan is None or entry.collective != collective:
            raise ValueError(f"jax_mscclpp: registered algorithm {requested!r} has no {collective.name.lower()} plan "
                             f"for {world_size} ranks on platform {platform!r}")
        if scratch_bytes(plan, block_count, itemsize) > scratch_limit:
            raise ValueError(f"jax_mscclpp: algorithm {requested!r} needs more scratch than the communicator's "
                             f"{scratch_limit} bytes for this message; raise scratch_bytes or use a smaller message")
        return entry, plan
    for entry in registered_for(collective, platform):
        if not entry.covers(nbytes):
            continue
        plan = entry.plan_for(world_size)
        if plan is not None and scratch_bytes(plan, block_count, itemsize) <= scratch_limit:
            return entry, plan
    return None
