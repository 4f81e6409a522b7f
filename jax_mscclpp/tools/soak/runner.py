"""The soak loop: random calls of a pool of compiled configs, each on fresh data, checked against lax.

``programs`` configs are drawn up front (``configs.Drawer``); every call picks one of them at random, draws its
data (``data.make_input``) and runs ours and lax, so compile time grows with the pool, not with the calls. A
config is compiled on its first call. A mismatch records the config and the data's ``(seed, call)``, which is
all it takes to run that call again (``reproduce_command``). An error (a failed call, not a wrong answer)
breaks the communicators it ran on: they are destroyed, the compiled programs dropped, and the soak goes on
(single process) or stops (several processes, which must stay in step).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import Callable

import jax
import numpy as np

import jax_mscclpp as jm

from ..._types import SUPPORTED_DTYPES
from ..bench import launcher
from ..bench.units import parse_size
from ...communicator import Communicator
from ...dsl import library
from . import data, programs
from .configs import Config, Drawer

# Library programs registered for the soak, by collective: the first of each is also chosen by "auto" for per-rank
# sizes in AUTO_BAND; the others only run when forced by name (their size range starts past any message).
LIBRARY_PLANS = {
    "all_reduce": ("allreduce_2pa_hb", "allreduce_1pa_ll", "allreduce_2pa_ll", "allreduce_2pr", "allreduce_2pa_nvls"),
    "all_gather": ("allgather_allpairs",),
    "reduce_scatter": ("reducescatter_allpairs",),
    "all_to_all": ("alltoall_allpairs",),
}
# Library programs not registered, by platform: the SwitchChannel plan needs NVLink multicast on GPUs (off).
NOT_REGISTERED = {"gpu": ("allreduce_2pa_nvls",)}
AUTO_BAND = (2 << 10, 8 << 10)
FORCED_ONLY = 1 << 62
PLAN_PREFIX = "soak_"
MAX_RECORDED = 50  # mismatches and errors kept in full


@dataclasses.dataclass
class Settings:
    calls: int = 1000
    seed: int = 0
    max_bytes: int = 64 << 20
    programs: int = 200  # configs in the pool, each compiled once
    duration_s: float | None = None  # stop after this long, whatever the number of calls
    dtypes: tuple = ()  # default: every supported dtype (the 64-bit ones with jax_enable_x64)
    config: Config | None = None  # run only this config (a reproduction)
    data: tuple | None = None  # (seed, call) of the data of a reproduction
    max_errors: int = 10
    launch: int | None = None  # the process count of a --launch run (for the reproduction command)
    reference: str = "lax"  # "lax": lax on the same devices; "cpu": lax on this process's CPU devices
    algorithms: tuple = ()  # the algorithms drawn (default: "auto", every built-in one and the registered plans)

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["config"] = self.config.to_json() if self.config else None
        return out


def default_dtypes() -> tuple:
    """Every dtype the collectives run on here (the 64-bit ones only with jax_enable_x64)."""
    return tuple(str(d) for d in SUPPORTED_DTYPES if jax.config.jax_enable_x64 or d.itemsize < 8)


def register_plans(platform: str) -> dict[str, list[str]]:
    """Registers the library programs of LIBRARY_PLANS; returns the registered names by op."""
    names: dict[str, list[str]] = {}
    for op, functions in LIBRARY_PLANS.items():
        functions = [f for f in functions if f not in NOT_REGISTERED.get(platform, ())]
        for i, function in enumerate(functions):
            name = PLAN_PREFIX + function
            low, high = AUTO_BAND if i == 0 else (FORCED_ONLY, None)
            jm.register_algorithm(getattr(library, function), name=name, min_bytes=low, max_bytes=high,
                                  platforms=(platform,))
            names.setdefault(op, []).append(name)
    return names


def unregister_plans(names: dict[str, list[str]]) -> None:
    for group in names.values():
        for name in group:
            jm.unregister_algorithm(name)


def reproduce_command(config: Config, seed: int, call: int, launch: int | None, reference: str = "lax") -> str:
    where = f"--launch {launch}" if launch else f"--devices {config.num_devices}"
    also = " --reference cpu" if reference == "cpu" else ""
    return f"python -m jax_mscclpp.tools.soak {where}{also} --config '{config.to_json()}' --data {seed}:{call}"


@dataclasses.dataclass
class Tally:
    calls: int = 0
    mismatches: int = 0
    errors: int = 0

    def add(self, outcome: str) -> None:
        self.calls += 1
        if outcome == "mismatch":
            self.mismatches += 1
        elif outcome == "error":
            self.errors += 1


def _size_class(nbytes: int) -> str:
    """Per-rank bytes as a power-of-4 bucket label: "<=1K", "<=4K", ..."""
    if nbytes <= 1:
        return "<=1B"
    exponent = math.ceil(math.log(nbytes, 4))
    bound = 4 ** exponent
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if bound >= unit:
            return f"<={bound // unit}{suffix}"
    return f"<={bound}B"


class Soak:
    def __init__(self, devices: list, settings: Settings, log: Callable[[str], None] = print):
        self.devices = list(devices)
        self.settings = settings
        self.log = log
        self.platform = self.devices[0].platform
        self.processes = jax.process_count()
        self.meshes: dict = {}
        self.reference_meshes: dict = {}
        # --reference cpu: the whole mesh again on this process's CPU devices (each process rebuilds every rank's
        # data, seeded by mesh position), so that the lax reference needs no collective across processes or GPUs.
        self.reference_devices = None
        if settings.reference == "cpu":
            cpus = jax.local_devices(backend="cpu")
            if len(cpus) < len(self.devices):
                raise ValueError(f"--reference cpu needs {len(self.devices)} CPU devices in every process, found "
                                 f"{len(cpus)} (XLA_FLAGS=--xla_force_host_platform_device_count=N)")
            self.reference_devices = cpus[: len(self.devices)]
        self.compiled: dict[Config, programs.Compiled] = {}
        self.tallies: dict[str, dict[str, Tally]] = collections.defaultdict(lambda: collections.defaultdict(Tally))
        self.mismatches: list[dict] = []
        self.errors: list[dict] = []
        self.compile_s = 0.0
        self.compiles = 0
        self.bytes_run = [math.inf, 0]
        self.configs: list[Config] = []

    def mesh(self, config: Config):
        key = (config.mesh_shape, config.mesh_axes, config.mesh_seed)
        if key not in self.meshes:
            self.meshes[key] = programs.make_mesh(self.devices, config)
        return self.meshes[key]

    def reference_mesh(self, config: Config):
        """The mesh the reference runs on: the config's mesh, or its twin of CPU devices (--reference cpu)."""
        if self.reference_devices is None:
            return self.mesh(config)
        key = (config.mesh_shape, config.mesh_axes, config.mesh_seed)
        if key not in self.reference_meshes:
            self.reference_meshes[key] = programs.make_mesh(self.reference_devices, config)
        return self.reference_meshes[key]

    def communicator(self, config: Config) -> Communicator:
        """The config's communicator; on GPUs made with port channels, so that every algorithm (2PR and plans with
        port channels included) can run on it."""
        return Communicator(self.mesh(config), config.axes, port_channels=self.platform == "gpu")

    def scratch_bytes(self, config: Config) -> int:
        return self.communicator(config).scratch_bytes

    def pool(self, plan_names: dict) -> list[Config]:
        s = self.settings
        if s.config is not None:
            if s.config.num_devices != len(self.devices):
                raise ValueError(f"the config is for {s.config.num_devices} devices; this run has {len(self.devices)}")
            if s.config.world > 1:
                self.communicator(s.config)
            return [s.config]
        drawer = Drawer(len(self.devices), self.platform, list(s.dtypes or default_dtypes()), s.max_bytes, plan_names,
                        s.algorithms)
        rng = np.random.default_rng([s.seed, 0])
        pool = [drawer.draw(rng, self.scratch_bytes) for _ in range(s.programs)]
        for config in pool:
            if config.world > 1:
                self.communicator(config)  # before any program lowers one without port channels
        return pool

    def run(self) -> dict:
        s = self.settings
        plan_names = register_plans(self.platform)
        started = time.monotonic()
        calls = 0
        try:
            pool = self.configs = self.pool(plan_names)
            rng = np.random.default_rng([s.seed, 1])
            for call in range(s.calls):
                if s.duration_s is not None and time.monotonic() - started > s.duration_s:
                    break
                config = pool[int(rng.integers(len(pool)))]
                data_seed, data_call = (s.seed, call) if s.data is None else (s.data[0], s.data[1] + call)
                outcome = self.one_call(config, data_seed, data_call)
                calls += 1
                if outcome == "error" and (self.processes > 1 or len(self.errors) >= s.max_errors):
                    self.log(f"stopping after {len(self.errors)} error(s)")
                    break
        finally:
            unregister_plans(plan_names)
        return self.summary(calls, time.monotonic() - started)

    def one_call(self, config: Config, seed: int, call: int) -> str:
        try:
            compiled = self.compiled.get(config)
            if compiled is None:
                compiled = programs.compile_config(config, self.mesh(config), self.reference_mesh(config))
                self.compiled[config] = compiled
                self.compile_s += compiled.compile_s
                self.compiles += 1
            x = data.make_input(config, self.mesh(config), seed, call)
            # Ours completes before the reference is dispatched: the reference's first run loads its module, and
            # a module load waits for the device to go idle while a port-channel kernel waits on the host proxy,
            # which the load blocks (docs/architecture.md, "Port channels and the driver").
            ours = jax.block_until_ready(compiled.ours(x))
            if self.reference_devices is not None:
                x = data.make_input(config, self.reference_mesh(config), seed, call)
            ref = compiled.lax(x)
            check = data.compare(config, ours, ref)
        except Exception as error:  # noqa: BLE001 - every failure is counted and reported
            self._record(config, "error", compiled.ran if config in self.compiled else "?")
            self._error(config, seed, call, error)
            return "error"
        outcome = "ok" if check.ok else "mismatch"
        self._record(config, outcome, compiled.ran)
        if not check.ok:
            self._mismatch(config, seed, call, check)
        return outcome

    def _record(self, config: Config, outcome: str, ran: str) -> None:
        for table, key in (("op/algorithm", f"{config.op}/{config.algorithm}"), ("op/ran", f"{config.op}/{ran}"),
                           ("dtype", config.dtype), ("form", config.form), ("world", str(config.world)),
                           ("bytes", _size_class(config.nbytes)), ("op", config.op)):
            self.tallies[table][key].add(outcome)
        self.bytes_run = [min(self.bytes_run[0], config.nbytes), max(self.bytes_run[1], config.nbytes)]

    def _mismatch(self, config: Config, seed: int, call: int, check: data.Comparison) -> None:
        command = reproduce_command(config, seed, call, self.settings.launch, self.settings.reference)
        self.log(f"MISMATCH {config.op} {config.algorithm} {config.dtype} {config.local_shape} over {config.axes} "
                 f"({config.form}): max error {check.max_error:g} > {check.tolerance:g} {check.detail}\n"
                 f"  reproduce: {command}")
        if len(self.mismatches) < MAX_RECORDED:
            self.mismatches.append({"config": dataclasses.asdict(config), "data": [seed, call],
                                    "max_error": check.max_error, "tolerance": check.tolerance,
                                    "detail": check.detail, "reproduce": command})

    def _error(self, config: Config, seed: int, call: int, error: BaseException) -> None:
        command = reproduce_command(config, seed, call, self.settings.launch, self.settings.reference)
        text = f"{type(error).__name__}: {error}".strip()
        self.log(f"ERROR {config.op} {config.algorithm} {config.dtype} {config.local_shape}: {text[:500]}\n"
                 f"  reproduce: {command}")
        if len(self.errors) < MAX_RECORDED:
            self.errors.append({"config": dataclasses.asdict(config), "data": [seed, call], "error": text[:2000],
                                "reproduce": command})
        # The communicators this call ran on may be out of step: start afresh.
        for comm in Communicator.live():
            comm.destroy()
        self.compiled.clear()
        jax.clear_caches()
        for other in self.configs:
            if other.world > 1:
                self.communicator(other)

    def summary(self, calls: int, elapsed_s: float) -> dict:
        mismatches = sum(t.mismatches for t in self.tallies["op"].values())
        errors = sum(t.errors for t in self.tallies["op"].values())
        if self.processes > 1:
            every = launcher.gather_from_processes([mismatches, errors])
            mismatches, errors = sum(m for m, _ in every), sum(e for _, e in every)
        return {
            "calls": calls,
            "mismatches": mismatches,
            "errors": errors,
            "programs_compiled": self.compiles,
            "compile_s": round(self.compile_s, 2),
            "elapsed_s": round(elapsed_s, 2),
            "bytes_per_rank": {"min": self.bytes_run[0] if calls else None, "max": self.bytes_run[1]},
            "processes": self.processes,
            "devices": len(self.devices),
            "tallies": {table: {k: dataclasses.asdict(v) for k, v in sorted(rows.items())}
                        for table, rows in self.tallies.items()},
            "mismatch_records": self.mismatches,
            "error_records": self.errors,
        }


def format_summary(summary: dict) -> str:
    """The terminal summary: totals, then calls / mismatches / errors per op and algorithm and per what ran."""
    lines = [f"soak: {summary['calls']} calls on {summary['devices']} device(s) in {summary['processes']} "
             f"process(es), {summary['programs_compiled']} programs compiled ({summary['compile_s']:.1f} s), "
             f"{summary['elapsed_s']:.1f} s in all: {summary['mismatches']} mismatch(es), "
             f"{summary['errors']} error(s)"]
    for table in ("op/algorithm", "op/ran", "dtype", "form", "bytes"):
        rows = summary["tallies"].get(table, {})
        if not rows:
            continue
        lines.append(f"  by {table}:")
        width = max(len(k) for k in rows)
        order = sorted(rows, key=lambda k: parse_size(k[2:])) if table == "bytes" else sorted(rows)
        for key, t in ((k, rows[k]) for k in order):
            failed = t["mismatches"] or t["errors"]
            flag = f"  mismatches {t['mismatches']} errors {t['errors']}" if failed else ""
            lines.append(f"    {key:<{width}}  {t['calls']:>6} calls{flag}")
    return "\n".join(lines)
