"""Execution plans as algorithms: ``register_algorithm`` puts a DSL program (or its lowered plan) into the
selection table, and ``pick`` chooses the registered plan a call runs, if any.

Plans run on both platforms: on CPU devices through the host backend, on GPUs through the plan executor kernel;
the executors receive a plan in its integer encoding (``plan_encoding.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from typing import Any

from ._types import Collective

_COLLECTIVES = {c.name.lower(): c for c in Collective}
_PACKET_DATA, _PACKET_BYTES = 4, 8
# Platforms with a plan executor: the host backend ("cpu") and the GPU executor kernel ("gpu").
PLATFORMS = ("cpu", "gpu")


def scratch_bytes(plan: dict, block_count: int, itemsize: int) -> int:
    """Scratch one call of ``plan`` needs (PLAN.md: packet chunks have the LL8 stride)."""
    buffers = plan["buffers"]
    ce = math.ceil(block_count / buffers["input"]["chunks_per_block"])
    chunk = ce * itemsize
    if buffers["scratch"].get("packets", False):
        chunk = math.ceil(chunk / _PACKET_DATA) * _PACKET_BYTES
    return buffers["scratch"]["blocks"] * buffers["scratch"]["chunks_per_block"] * chunk


def fits_scratch(plan: dict, platform: str, block_count: int, itemsize: int, scratch_limit: int) -> bool:
    """Whether a call of ``block_count`` elements per block can run with ``scratch_limit`` bytes of scratch (the
    communicator's ``scratch_bytes``). The host backend runs a call in one round, so the whole call must fit; the
    GPU executor pipelines larger calls through scratch one piece per launch, so one element per chunk must fit.
    On GPUs this is necessary, not sufficient: a launch has one half of the LL or HB region of the registered
    scratch, with 16-byte aligned chunks (``kernels/executor/executor.h``), and one that cannot fit fails with an
    error naming the plan."""
    if platform == "gpu":
        block_count = min(block_count, plan["buffers"]["input"]["chunks_per_block"])
    return scratch_bytes(plan, block_count, itemsize) <= scratch_limit


def uses_port_channels(plan: dict) -> bool:
    """Whether some rank of ``plan`` has a port channel (on GPUs the communicator then needs port channels)."""
    return any(c["type"] == "port" for rank in plan["ranks"] for c in rank["channels"])


@dataclasses.dataclass
class PlanAlgorithm:
    """A registered plan: its source is one ``register_algorithm`` takes (a program, a plan dict, or a function of
    the world size returning one)."""

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


def _plan_of(source) -> dict:
    """The verified plan of a plan dict, a ``dsl.Program``, an MSCCLang ``MSCCLProgram`` or a program written in
    MSCCL++'s DSL (``MSCCLPPProgram``, ``CollectiveProgram``: its plan replicated ``instances`` times)."""
    from . import dsl
    from .dsl.msccl import MSCCLProgram
    from .dsl.mscclpp import CollectiveProgram, MSCCLPPProgram

    if isinstance(source, dict):
        return dsl.verify(source)
    if isinstance(source, (dsl.Program, MSCCLProgram)):
        return source.lower()
    if isinstance(source, (MSCCLPPProgram, CollectiveProgram)):
        return source.plan()
    raise TypeError("register_algorithm takes a dsl.Program, an MSCCLang MSCCLProgram, an MSCCL++ MSCCLPPProgram or "
                    "CollectiveProgram, a plan dict, or a function of the world size returning one of these; got "
                    f"{type(source).__name__}")


def _lower(source, world_size: int) -> dict | None:
    plan = _plan_of(source(world_size) if callable(source) else source)
    return plan if plan["world_size"] == world_size else None


_registry: dict[str, PlanAlgorithm] = {}
_lock = threading.Lock()
_ids = itertools.count(1)


def register_algorithm(program_or_plan, collective: str | None = None, *, name: str | None = None,
                       min_bytes: int = 0, max_bytes: int | None = None, platforms=PLATFORMS) -> PlanAlgorithm:
    """Adds a DSL algorithm to the selection table for per-rank message sizes in [min_bytes, max_bytes].

    ``program_or_plan`` is a ``dsl.Program``, an MSCCLang ``dsl.msccl.MSCCLProgram``, a program written in
    MSCCL++'s DSL (``dsl.mscclpp.MSCCLPPProgram`` or ``CollectiveProgram``: its ``plan()``, replicated
    ``instances`` times), a plan dict (lowered, or from ``dsl.load_plan``), or a function of the world size
    returning any of these (as the functions of ``dsl.library`` return Programs). A program or plan dict serves
    its own world size only, a function every world size it is called for. The plan is verified before it is
    used. Registered algorithms are consulted before the built-in table, and
    ``algorithm=name`` forces one. ``platforms`` says where the plan runs: "cpu" (the host backend) and "gpu" (the
    GPU executor kernel). On GPUs a plan with port channels needs a communicator made with ``port_channels=True``:
    forced without one, it is refused at trace time; by size range, it is passed over.
    """
    platforms = (platforms,) if isinstance(platforms, str) else tuple(platforms)
    unknown = [p for p in platforms if p not in PLATFORMS]
    if unknown or not platforms:
        raise ValueError(f"plans run on platforms {', '.join(map(repr, PLATFORMS))}; got {platforms!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"register_algorithm: name must be a non-empty string (or None for the program's name); "
                        f"got {name!r}")
    for what, value in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"register_algorithm: {what} must be a whole number of bytes >= 0, got {value!r}")
    if max_bytes is not None and max_bytes < min_bytes:
        raise ValueError(f"register_algorithm: max_bytes={max_bytes} is below min_bytes={min_bytes}: the plan would "
                         "never be chosen")

    plan = _plan_of(program_or_plan(2) if callable(program_or_plan) else program_or_plan)  # verifies
    known_collective, default_name = plan["collective"], plan["name"]
    collective = collective or known_collective
    if collective != known_collective:
        raise ValueError(f"the plan implements {known_collective}, not {collective}")
    name = name or default_name
    if name in ("lax",) or name in _builtin_names():
        raise ValueError(f"{name!r} is a built-in algorithm name: choose another")
    entry = PlanAlgorithm(name, _COLLECTIVES[collective], program_or_plan, int(min_bytes), max_bytes, platforms,
                          next(_ids))
    with _lock:
        _registry[name] = entry
    return entry


def unregister_algorithm(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def registered(name: str | None) -> PlanAlgorithm | None:
    return _registry.get(name) if name is not None else None


def registered_for(collective: Collective, platform: str | None) -> list[PlanAlgorithm]:
    """The plans registered for ``collective`` on ``platform`` (on any platform when None)."""
    with _lock:
        return [p for p in _registry.values()
                if p.collective == collective and (platform is None or platform in p.platforms)]


def _builtin_names() -> set:
    from ._types import ALGORITHMS_OF

    return {n for names in ALGORITHMS_OF.values() for n in names}


def scratch_per_call(platform: str, scratch_bytes: int) -> int:
    """The scratch one call of a plan may use of a communicator's ``scratch_bytes``: the host backend runs a call
    in one of its two halves; the GPU executor takes it all."""
    return scratch_bytes // 2 if platform == "cpu" else scratch_bytes


def pick(collective: Collective, platform: str, requested: str | None, nbytes: int, world_size: int,
         block_count: int, itemsize: int, scratch_bytes: int, port_channels: bool,
         permutation=None) -> tuple[PlanAlgorithm, dict] | None:
    """The registered plan to run for this call, if any: the requested one (a ValueError if it cannot run here),
    else the first registered for this collective and platform whose size range covers the call and that runs
    here (its scratch fits, ``fits_scratch``; on GPUs, port channels only when the communicator has them; for the
    permutation, ``permutation``, the call's (source, destination) pairs, are the plan's).
    ``scratch_bytes`` is the communicator's; the host backend runs a call in one of its two halves."""
    from .dsl.plan_format import permutation_of

    scratch_limit = scratch_per_call(platform, scratch_bytes)
    call_pairs = None if permutation is None else sorted(map(tuple, permutation))

    def runs_here(plan: dict) -> str | None:  # why not, or None
        plan_pairs = permutation_of(plan)
        if plan_pairs is not None and sorted(plan_pairs) != call_pairs:
            return (f"implements the permutation {sorted(plan_pairs)}, not this call's "
                    f"{call_pairs}")
        if not fits_scratch(plan, platform, block_count, itemsize, scratch_limit):
            needs = "this message" if platform == "cpu" else "one element per chunk"
            where = (f"the {scratch_limit} bytes a call may use of the communicator's {scratch_bytes}"
                     if platform == "cpu" else f"the communicator's {scratch_bytes} bytes")
            return (f"needs more scratch for {needs} than {where}; raise scratch_bytes"
                    + (" or use a smaller message" if platform == "cpu" else ""))
        if platform == "gpu" and not port_channels and uses_port_channels(plan):
            return ("uses port channels: create the communicator with Communicator(mesh, axes, "
                    "port_channels=True) before the first call")
        return None

    if requested is not None:
        entry = registered(requested)
        if entry is None:
            return None
        plan = entry.plan_for(world_size) if platform in entry.platforms else None
        if plan is None or entry.collective != collective:
            raise ValueError(f"jax_mscclpp: registered algorithm {requested!r} has no {collective.name.lower()} plan "
                             f"for {world_size} ranks on platform {platform!r}")
        reason = runs_here(plan)
        if reason is not None:
            raise ValueError(f"jax_mscclpp: algorithm {requested!r} {reason}")
        return entry, plan
    for entry in registered_for(collective, platform):
        if not entry.covers(nbytes):
            continue
        plan = entry.plan_for(world_size)
        if plan is not None and runs_here(plan) is None:
            return entry, plan
    return None
