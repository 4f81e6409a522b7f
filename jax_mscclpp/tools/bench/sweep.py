"""Sweeps: the configurations to run and, per configuration, ours beside lax into records.

A *group* is one (op, size, dtype, mode). Its programs (the lax collective chained and single, the trivial chained
program, and for every algorithm ours chained and single) are compiled, every algorithm is checked against lax on
random data, and then all of them are timed in one interleaved loop: one lax measurement per group, taken in the
same loop as every algorithm it is compared with.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

import jax
import numpy as np

from jax_mscclpp import _types, selection
from jax_mscclpp._types import ALGORITHMS_OF

from . import launcher, metrics, modes, programs, timing
from .programs import COLLECTIVE, OPS
from .units import format_size

# Per-platform defaults. GPU: chains long enough to bury JAX's ~30-60 us dispatch under K collectives. CPU: the
# run only shows that the tool works, so keep it short.
DEFAULTS = {
    "gpu": {"iters": 20, "warmup": 5, "chain": 64, "sizes": "1K:1G"},
    "cpu": {"iters": 3, "warmup": 1, "chain": 4, "sizes": "1K:1M"},
}
# Algorithms that need more than one mesh axis (the benchmark's mesh has one).
MULTI_AXIS_ALGORITHMS = tuple(getattr(_types, "COMPOSED_ALGORITHMS", ()))
# The chain shrinks for large messages (never below 2): past CHAIN_BYTES per chain, dispatch overhead is noise.
CHAIN_BYTES = 4 << 30


def platform_kind(platform: str) -> str:
    """Which defaults apply: "gpu" for the accelerator platforms, else "cpu"."""
    return "gpu" if platform in ("gpu", "cuda", "rocm") else "cpu"


def selection_platform(platform: str) -> str:
    """The platform name the selection table uses for a jax device platform ("gpu" -> "cuda", as the lowering
    platform is named, or whichever GPU spelling the table uses)."""
    if platform != "gpu":
        return platform
    return next((p for p in ("cuda", "gpu", "CUDA") if p in selection.PLATFORM_ALGORITHMS), "cuda")


def effective_chain(chain: int, size: int) -> int:
    return max(1, min(chain, max(2, CHAIN_BYTES // max(1, size))))


@dataclasses.dataclass
class Settings:
    ops: Sequence[str] = OPS
    sizes: Sequence[int] = ()
    dtypes: Sequence[str] = ("bfloat16",)
    algorithms: Sequence[str] = ("all",)
    modes: Sequence[str] = ("plain",)
    iters: int = 3
    warmup: int = 1
    chain: int = 4
    redop: str = "sum"
    check: bool = True
    seed: int = 0

    def __post_init__(self):
        for op in self.ops:
            if op not in OPS:
                raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        for mode in self.modes:
            if mode not in modes.MODES:
                raise ValueError(f"unknown mode {mode!r}; known: {', '.join(modes.MODES)}")
        if self.redop not in programs.REDOPS:
            raise ValueError(f"unknown reduction {self.redop!r}; known: {', '.join(programs.REDOPS)}")
        known = {"all", "auto"} | {a for names in ALGORITHMS_OF.values() for a in names}
        for algorithm in self.algorithms:
            if algorithm not in known:
                raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(sorted(known))}")
        if self.iters < 1 or self.warmup < 0 or self.chain < 1:
            raise ValueError("iters and chain must be at least 1, warmup at least 0")


@dataclasses.dataclass
class Record:
    """One (op, size, dtype, mode, algorithm): ours beside lax. Times in microseconds, bandwidths in GB/s."""

    op: str
    size: int
    count: int  # elements of a rank's input
    dtype: str
    algorithm: str  # as requested: a name, or "auto"
    chosen: str  # what ran ("lax" when the runtime falls back to the lax collective)
    mode: str
    world: int
    processes: int
    redop: str
    chain: int
    iters: int
    warmup: int
    status: str = "ok"  # ok | check failed | error: ... | unavailable: ...
    check: str = "skipped"  # ok | FAIL | skipped
    check_max_error: float | None = None
    ours_us: float | None = None
    ours_min_us: float | None = None
    ours_max_us: float | None = None
    ours_algbw: float | None = None
    ours_busbw: float | None = None
    lax_us: float | None = None
    lax_min_us: float | None = None
    lax_max_us: float | None = None
    lax_algbw: float | None = None
    lax_busbw: float | None = None
    speedup: float | None = None
    ours_dispatch_us: float | None = None
    ours_dispatch_min_us: float | None = None
    ours_dispatch_max_us: float | None = None
    lax_dispatch_us: float | None = None
    lax_dispatch_min_us: float | None = None
    lax_dispatch_max_us: float | None = None
    dispatch_speedup: float | None = None
    trivial_us: float | None = None  # the trivial chained program, whole
    # "auto" resolved to the lax collective: ours is lax's own program, so lax's timings are reported for both
    # (timing one program twice measures only noise) and the speedup is 1.
    same_program_as_lax: bool = False

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def ours_unavailable_reason(platform: str, process_count: int) -> str | None:
    """Why our collectives cannot run here, or None."""
    sel = selection_platform(platform)
    if sel not in selection.PLATFORM_ALGORITHMS:
        return f"no jax_mscclpp backend for platform {sel!r} in this version (lax only)"
    if sel == "cpu" and process_count > 1:
        return "the host reference backend (cpu) runs within one process (lax only)"
    return None


def expand_algorithms(requested: Iterable[str], op: str, sel_platform: str, notices: list[str] | None = None) -> list[str]:
    """The algorithm names to time for ``op``: "all" is every algorithm the platform runs on one axis plus
    "auto"; names the op does not know are dropped silently (they belong to another op), names this platform
    does not run and algorithms over several axes are dropped with a notice; "lax" is dropped (lax is always
    timed)."""
    collective = COLLECTIVE[op]
    supported = selection.PLATFORM_ALGORITHMS.get(sel_platform, {}).get(collective, ())
    out: list[str] = []
    for name in requested:
        if name == "all":
            names = [a for a in supported if a not in MULTI_AXIS_ALGORITHMS] + ["auto"]
        elif name == "auto":
            names = ["auto"]
        elif name == "lax" or name not in ALGORITHMS_OF[collective]:
            names = []
        elif name in MULTI_AXIS_ALGORITHMS:
            if notices is not None:
                notices.append(f"{op}: algorithm {name!r} reduces over two mesh axes; the benchmark mesh has one; skipped")
            names = []
        elif name not in supported:
            if notices is not None:
                notices.append(f"{op}: algorithm {name!r} does not run on {sel_platform!r}; skipped")
            names = []
        else:
            names = [name]
        out.extend(n for n in names if n not in out)
    return out


@dataclasses.dataclass(frozen=True)
class Group:
    op: str
    size: int
    dtype: str
    mode: str
    algorithms: tuple

    @property
    def label(self) -> str:
        return f"{self.op} {format_size(self.size)} {self.dtype} {self.mode}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _all_processes_agree(ok: bool) -> bool:
    return all(launcher.gather_from_processes(bool(ok)))


class Runner:
    """Runs the groups of ``settings`` over ``mesh`` (a 1-D mesh named ``programs.AXIS``)."""

    def __init__(self, mesh, settings: Settings, notices: list[str] | None = None):
        self.mesh = mesh
        self.settings = settings
        self.notices = notices if notices is not None else []
        self.platform = np.asarray(mesh.devices).flat[0].platform
        self.sel_platform = selection_platform(self.platform)
        self.world = int(np.asarray(mesh.devices).size)
        self.process_count = jax.process_count()
        self.unavailable = ours_unavailable_reason(self.platform, self.process_count)
        self.last_programs: dict = {}
        if self.unavailable:
            self.notices.append(f"ours not run: {self.unavailable}")

    def groups(self) -> list[Group]:
        s = self.settings
        out = []
        runnable_modes = []
        for mode in s.modes:
            try:
                modes.compiler_options(mode, self.platform)
                runnable_modes.append(mode)
            except modes.ModeNotApplicable as e:
                self.notices.append(str(e) + "; skipped")
        for op in s.ops:
            algorithms = ["auto"] if self.unavailable else expand_algorithms(s.algorithms, op, self.sel_platform, self.notices)
            if not algorithms:
                self.notices.append(f"{op}: none of the requested algorithms runs here; skipped")
                continue
            for dtype in s.dtypes:
                for size in s.sizes:
                    for mode in runnable_modes:
                        out.append(Group(op, int(size), dtype, mode, tuple(algorithms)))
        # Notices may repeat per op: keep the first of each.
        self.notices[:] = list(dict.fromkeys(self.notices))
        return out

    def chosen(self, op: str, algorithm: str, selection_bytes: int) -> str:
        if self.unavailable:
            return "lax"
        if algorithm != "auto":
            return algorithm
        try:
            collective = COLLECTIVE[op]
            requested = selection.requested_algorithm(collective, self.sel_platform, None)
            return selection.choose(collective, self.sel_platform, selection_bytes, requested, self.world)
        except ValueError:
            return "?"

    def run_group(self, group: Group) -> list[Record]:
        s = self.settings
        mesh, world = self.mesh, self.world
        lay = programs.layout(group.op, group.size, world, group.dtype)
        chain = effective_chain(s.chain, lay.size)
        options = modes.compiler_options(group.mode, self.platform)
        redop = s.redop if group.op == "all_reduce" else "sum"
        records = {
            a: Record(
                op=group.op, size=lay.size, count=lay.in_elems, dtype=group.dtype, algorithm=a,
                chosen=self.chosen(group.op, a, lay.selection_bytes), mode=group.mode, world=world,
                processes=self.process_count, redop=redop, chain=chain, iters=s.iters, warmup=s.warmup,
            )
            for a in group.algorithms
        }
        scale = programs.scale_value(group.op, redop, group.dtype, world)
        try:
            x, sc = programs.make_inputs(mesh, lay, group.dtype, scale, seed=s.seed)
            lax_c = programs.lax_collective(group.op, redop)
            timed = {
                "lax": (programs.compile_chain(lax_c, group.op, world, chain, mesh, x, sc, options), (x, sc)),
                "trivial": (
                    programs.compile_chain(programs.trivial_collective(group.op, world), group.op, world, chain,
                                           mesh, x, sc, options),
                    (x, sc),
                ),
                "lax_single": (programs.compile_single(lax_c, mesh, x, options), (x,)),
            }
            reference = timing.run_blocking(*timed["lax_single"]) if s.check else None
        except Exception as e:  # noqa: BLE001 - reported in the records, the sweep goes on
            for r in records.values():
                r.status = f"error: {_first_line(e)}"
            return list(records.values())

        for algorithm, record in records.items():
            if self.unavailable:
                record.status = f"unavailable: {self.unavailable}"
                continue
            try:
                ours_c = programs.ours_collective(group.op, None if algorithm == "auto" else algorithm, redop)
                single = programs.compile_single(ours_c, mesh, x, options)
                if s.check:
                    check = programs.compare(timing.run_blocking(single, (x,)), reference, group.dtype)
                    ok = _all_processes_agree(check.ok)
                    record.check = "ok" if ok else "FAIL"
                    record.check_max_error = check.max_error
                    if not ok:
                        record.status = "check failed"
                        continue
                if algorithm == "auto" and record.chosen == "lax":
                    record.same_program_as_lax = True
                    continue
                chained = programs.compile_chain(ours_c, group.op, world, chain, mesh, x, sc, options)
            except Exception as e:  # noqa: BLE001
                record.status = f"error: {_first_line(e)}"
                continue
            timed[f"ours:{algorithm}"] = (chained, (x, sc))
            timed[f"ours_single:{algorithm}"] = (single, (x,))
        del reference

        self.last_programs = timed  # the last group's programs, for callers that time more (pytest-benchmark)
        samples = timing.interleaved(timed, s.iters, s.warmup)
        lax = timing.per_collective(samples["lax"], samples["trivial"], chain)
        lax_dispatch = metrics.Stats.of(samples["lax_single"])
        trivial = metrics.Stats.of(samples["trivial"])
        for algorithm, r in records.items():
            r.lax_us, r.lax_min_us, r.lax_max_us = lax.median, lax.min, lax.max
            r.lax_algbw = metrics.algbw_gbps(r.size, lax.median)
            r.lax_busbw = metrics.busbw_gbps(r.op, world, r.size, lax.median)
            r.lax_dispatch_us = lax_dispatch.median
            r.lax_dispatch_min_us, r.lax_dispatch_max_us = lax_dispatch.min, lax_dispatch.max
            r.trivial_us = trivial.median
            key = f"ours:{algorithm}"
            if r.same_program_as_lax:
                ours, ours_dispatch = lax, lax_dispatch
            elif key in samples:
                ours = timing.per_collective(samples[key], samples["trivial"], chain)
                ours_dispatch = metrics.Stats.of(samples[f"ours_single:{algorithm}"])
            else:
                continue
            r.ours_us, r.ours_min_us, r.ours_max_us = ours.median, ours.min, ours.max
            r.ours_algbw = metrics.algbw_gbps(r.size, ours.median)
            r.ours_busbw = metrics.busbw_gbps(r.op, world, r.size, ours.median)
            r.speedup = metrics.speedup(ours.median, lax.median)
            r.ours_dispatch_us = ours_dispatch.median
            r.ours_dispatch_min_us, r.ours_dispatch_max_us = ours_dispatch.min, ours_dispatch.max
            r.dispatch_speedup = metrics.speedup(ours_dispatch.median, lax_dispatch.median)
        return list(records.values())

    def run(self, on_record: Callable[[Record], None] | None = None,
            on_group: Callable[[int, int, Group], None] | None = None) -> list[Record]:
        groups = self.groups()
        out: list[Record] = []
        for i, group in enumerate(groups):
            if on_group:
                on_group(i, len(groups), group)
            for record in self.run_group(group):
                out.append(record)
                if on_record:
                    on_record(record)
        if on_group:
            on_group(len(groups), len(groups), None)
        return out
