"""The kernel record's JAX settings (``kernel_record``): ``devices:N`` (one process, N devices) and ``processes:P``
(P processes under ``jax.distributed``, launched by ``launcher``; this module's ``child_main`` is each child).

Per cell, one jitted program chains K forced-algorithm calls (``programs.compile_chain``: ``x = post(barrier(
collective(x)), s)``), compiled with XLA command buffers off so that every kernel is its own launch. On GPUs the
program runs ``steps`` times under the JAX profiler, each run inside its own ``jax.profiler.TraceAnnotation``; a
run's time is the union of the intervals of the jax_mscclpp kernels (``profile.classify``) that start on GPU 0
within its annotation, over K (``window_busy``). On CPU there is no device timeline: a run's time is its host wall
time minus the median of the same chain with a trivial op, over K (``timing``'s estimate). The memcpy reference is
a chain of K elementwise passes (``x * s``, reading and writing the bytes once, as a copy does) over the same bytes
on the first device of process 0, timed the same way while no other program runs.

In a multi-process setting every process compiles and runs the same programs in the same order; process 0 decides
(how many cells of a chunk fit before the deadline) and the others follow (``launcher.gather_from_processes``);
only process 0 profiles and writes rows.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Callable, Sequence

import numpy as np

from . import kernel_record_base as kr
from . import launcher, modes, profile, programs, timing
from .units import format_size

# Profiled runs, warm-up runs and chain lengths: K x size at most chain_bytes, K in [2, chain].
@dataclasses.dataclass(frozen=True)
class Options:
    steps: int
    warmup: int
    chain: int
    chain_bytes: int

    def chain_for(self, size: int) -> int:
        return max(2, min(self.chain, self.chain_bytes // max(1, size)))


OPTIONS = {
    ("devices", "cpu"): Options(steps=3, warmup=1, chain=4, chain_bytes=16 << 20),
    ("devices", "gpu"): Options(steps=5, warmup=2, chain=16, chain_bytes=1 << 30),
    # Processes sharing one GPU time-slice: every call waits for the others' slices, so few calls per run.
    ("processes", "gpu"): Options(steps=3, warmup=1, chain=8, chain_bytes=64 << 20),
}
TRACE_OVERHEAD_S = 3.0  # starting, stopping and reading one profile (GPU): one per chunk of about 8-10 cells
ANNOTATION = "jax_mscclpp.kernel_record/{}"
_GPU0 = re.compile(r"/device:GPU:0\b|GPU:0\b")


def ring_shift(world: int) -> list[tuple[int, int]]:
    """The permutation every rank sends its block to the next rank by (every rank sends and receives)."""
    return [(i, (i + 1) % world) for i in range(world)]


def layout(op: str, size: int, world: int, dtype) -> programs.Layout:
    """``programs.layout``, and for the permutation one block of ``size`` bytes per rank in and out."""
    if op != "permute":
        return programs.layout(op, size, world, dtype)
    import jax.numpy as jnp

    itemsize = np.dtype(jnp.dtype(dtype)).itemsize
    size = max(itemsize, size // itemsize * itemsize)
    return programs.Layout(op, world, itemsize, size, size // itemsize, size // itemsize)


def collective_fn(op: str, algorithm: str, world: int) -> Callable:
    """Our ``op`` with ``algorithm`` forced, on a rank's 1-D operand (sums; the permutation a ring shift)."""
    from jax_mscclpp import public_calls
    from jax_mscclpp.collective_specs import spec_named

    collective = spec_named(op).collective
    return public_calls.ours_collective(collective, programs.AXIS, algorithm=algorithm,
                                        perm=ring_shift(world) if op == "permute" else None)


def jax_algorithms(op: str, platform: str) -> list[str]:
    """The algorithms the JAX path runs for ``op`` on ``platform`` (a JAX device platform) over one mesh axis:
    codes.def's table for that platform, less the algorithms over several axes."""
    from jax_mscclpp._types import COMPOSED_ALGORITHMS, PLATFORM_ALGORITHMS
    from jax_mscclpp.collective_specs import spec_named

    table = PLATFORM_ALGORITHMS.get("gpu" if platform in ("gpu", "cuda", "rocm") else platform, {})
    return [a for a in table.get(spec_named(op).collective, ()) if a not in COMPOSED_ALGORITHMS]


# --------------------------------------------------------------------------------------------- the profile
def window_busy(path: str, labels: Sequence[str]) -> dict:
    """For each label of a ``TraceAnnotation`` in the profile at ``path``: the kernels on GPU 0's streams that
    start within that annotation's interval, as ``{"ours_us", "all_us", "ours_kernels", "kernels", "names"}``
    (``*_us``: the length of the union of their intervals; ours: jax_mscclpp's kernels; names: up to four
    distinct kernel names, ours first). A label absent from the profile maps to None."""
    events, pnames, tnames = profile._events(path)
    gpu_pids = {p for p, n in pnames.items() if _GPU0.search(n)}
    if not gpu_pids:
        gpu_pids = set(sorted(p for p, n in pnames.items() if "GPU" in n)[:1])
    on_gpu = [e for e in events if e["pid"] in gpu_pids]
    # Kernels and copies are on the "Stream #..." lines; "XLA Ops" / "XLA Modules" lines repeat them per HLO op.
    streams = [e for e in on_gpu if tnames.get((e["pid"], e.get("tid")), "").startswith("Stream")] or on_gpu
    kernels = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]) for e in streams)
    starts = [k[0] for k in kernels]
    wanted = set(labels)
    windows = {}
    for e in events:
        if e["name"] in wanted and e["pid"] not in gpu_pids:
            windows[e["name"]] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
    out = {}
    for label in labels:
        window = windows.get(label)
        if window is None:
            out[label] = None
            continue
        inside = kernels[bisect.bisect_left(starts, window[0]):bisect.bisect_right(starts, window[1])]
        ours = [k for k in inside if profile.classify(k[2]) == "ours"]
        names = list(dict.fromkeys([k[2][:100] for k in ours] + [k[2][:100] for k in inside]))[:4]
        out[label] = {"ours_us": profile._length(profile._union([k[:2] for k in ours])),
                      "all_us": profile._length(profile._union([k[:2] for k in inside])),
                      "ours_kernels": len(ours), "kernels": len(inside), "names": names}
    return out


def _trace_file(folder: str) -> str:
    found = sorted(glob.glob(os.path.join(folder, "**", "*.trace.json.gz"), recursive=True), key=os.path.getmtime)
    if not found:
        raise RuntimeError(f"the profiler wrote no *.trace.json.gz under {folder}")
    return found[-1]


def _annotated_runs(runs: Sequence[tuple[str, Callable, tuple]], steps: int, profiled: bool) -> dict:
    """Runs every (name, fn, args) ``steps`` times, each run blocking inside its annotation ``name/step``, under
    the profiler when ``profiled``; returns ``window_busy`` of every label (empty when not profiled)."""
    import jax

    labels = []

    def run_all():
        for name, fn, args in runs:
            for step in range(steps):
                label = ANNOTATION.format(f"{name}/{step}")
                labels.append(label)
                with jax.profiler.TraceAnnotation(label):
                    timing.run_blocking(fn, args)

    if not profiled:
        run_all()
        return {}
    folder = tempfile.mkdtemp(prefix="kernel_record_trace_")
    try:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            run_all()
        return window_busy(_trace_file(folder), labels)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -------------------------------------------------------------------------------------------------- inputs
def random_block(n: int, dtype, seed: int, rank: int) -> np.ndarray:
    """n random elements (a random tile of at most 1 Mi elements repeated: cheap at any size, never zeros)."""
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype)
    rng = np.random.default_rng([seed, rank])
    m = min(n, 1 << 20)
    if jnp.issubdtype(dtype, jnp.floating):
        tile = rng.standard_normal(m).astype(np.float32).astype(dtype)
    else:
        tile = rng.integers(1, 8, size=m).astype(dtype)
    return np.resize(tile, n)


def make_operand(mesh, lay: programs.Layout, dtype, scale, seed: int = 0):
    """(operand, per-rank scale) of ``lay`` over ``mesh``: each process builds only its own ranks' blocks."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    sharding = NamedSharding(mesh, P(programs.AXIS))
    n = lay.in_elems
    x = jax.make_array_from_callback(
        (lay.world * n,), sharding, lambda index: random_block(n, dtype, seed, (index[0].start or 0) // n))
    s = jax.make_array_from_callback(
        (lay.world,), sharding, lambda index: np.full((1,), scale, dtype=jnp.dtype(dtype)))
    return x, s


def _copy_chain(chain: int):
    from jax import lax

    def body(x, s):
        for _ in range(chain):
            x = lax.optimization_barrier(x * s)
        return x

    return body


# ------------------------------------------------------------------------------------------------- measuring
def measure_copies(sizes: Sequence[int], device, dtype, opts: Options, profiled: bool) -> tuple[dict, bool]:
    """({size: memcpy_us}, whether the profile held kernels) on ``device`` alone (see the module docstring); a size
    that fails maps to None. Profiled, a profile without any GPU kernel (no CUPTI here) maps every size to None."""
    import jax
    import jax.numpy as jnp

    itemsize = np.dtype(jnp.dtype(dtype)).itemsize
    runs, chains, out = [], {}, {}
    for size in sizes:
        try:
            n = max(1, size // itemsize)
            chain = opts.chain_for(size)
            x = jax.device_put(random_block(n, dtype, 1, 0), device)
            s = jax.device_put(np.ones((), dtype=jnp.dtype(dtype)), device)
            fn = jax.jit(_copy_chain(chain)).lower(x, s).compile()
            for _ in range(max(1, opts.warmup)):
                timing.run_blocking(fn, (x, s))
            runs.append((f"copy/{size}", fn, (x, s)))
            chains[size] = chain
        except Exception:  # noqa: BLE001 - that size has no reference; its rows say so (memcpy_us None)
            out[size] = None
    if profiled:
        busy = _annotated_runs(runs, opts.steps, True)
        if runs and not any(g and g["kernels"] for g in busy.values()):
            return {size: None for size in sizes}, False
        for name, _, _ in runs:
            size = int(name.split("/")[1])
            got = [busy.get(ANNOTATION.format(f"{name}/{step}")) for step in range(opts.steps)]
            good = [g["all_us"] / chains[size] for g in got if g and g["all_us"] > 0]
            out[size] = float(np.median(good)) if good else None
    else:
        for name, fn, args in runs:
            size = int(name.split("/")[1])
            samples = timing.interleaved({"copy": (fn, args)}, opts.steps, 0)["copy"]
            out[size] = float(np.median(samples)) / chains[size]
    return out, True


def _fitting(cells: Sequence[dict], deadline: float) -> int:
    """How many of ``cells`` (in order, each with its ``estimate_s``) finish before ``deadline``."""
    t = time.time()
    for i, cell in enumerate(cells):
        t += float(cell.get("estimate_s") or 0.0)
        if t > deadline:
            return i
    return len(cells)


def measure_on_mesh(mesh, cells: Sequence[dict], opts: Options, deadline: float, dtype: str,
                    ranks_per_gpu: int | None, emit: Callable[[list], None] | None = None,
                    log: Callable[[str], None] = print, profile: bool | None = None) -> tuple[list[dict], list[str]]:
    """Rows of ``cells`` (dicts of ``Cell.as_dict`` plus ``estimate_s``; one setting, in run order) measured over
    ``mesh``. Every process of the mesh calls it alike; process 0's rows are the record's. Consecutive cells of
    one size are a chunk (one profile); ``emit(rows)`` gets the rows so far after every chunk. ``profile``: time
    from the profiler (None: on GPUs); a profile without GPU kernels turns every cell to host timing."""
    import jax

    devices = list(np.asarray(mesh.devices).flat)
    platform = devices[0].platform
    world = len(devices)
    profiled = platform == "gpu" if profile is None else bool(profile)
    main = jax.process_index() == 0
    options = modes.compiler_options("plain", platform)
    rows: list[dict] = []
    notes: list[str] = []

    def agree(value):
        return launcher.gather_from_processes(value)[0]

    def all_ok(ok: bool) -> bool:
        return all(launcher.gather_from_processes(bool(ok)))

    # The memcpy reference, on process 0's first device, while the others wait. It is also the profiler's probe:
    # where the profile holds no GPU kernels, every cell is host-timed instead.
    sizes = sorted({int(c["size"]) for c in cells})
    copies = {}
    if main:
        local = next(d for d in devices if d.process_index == jax.process_index())
        copies, timeline = measure_copies(sizes, local, dtype, opts, profiled)
        if not timeline:
            notes.append("the profiler recorded no GPU kernels here: every cell is host-timed (time_source host)")
            copies, _ = measure_copies(sizes, local, dtype, opts, False)
        profiled = profiled and timeline
    profiled = agree(profiled)
    source = "profiler" if profiled else "host"

    chunks: list[list[dict]] = []  # consecutive cells of one size: one profile each
    for cell in cells:
        if chunks and chunks[-1][0]["size"] == cell["size"]:
            chunks[-1].append(cell)
        else:
            chunks.append([cell])
    for number, chunk in enumerate(chunks):
        size = int(chunk[0]["size"])
        fit = agree(_fitting(chunk, deadline))
        for cell in chunk[fit:]:
            rows.append(kr.new_row(kr.Cell.from_dict(cell), "skipped: deadline"))
        operands: dict = {}  # per op, this size's
        t_chunk = time.time()
        prepared = []
        for cell in chunk[:fit]:
            t0 = time.time()
            c = kr.Cell.from_dict(cell)
            op, algorithm = c.op, c.algorithm
            error = None
            try:
                lay = layout(op, c.size, world, dtype)
                if op not in operands:
                    operands[op] = make_operand(mesh, lay, dtype, programs.scale_value(op, "sum", dtype, world))
                x, s = operands[op]
                chain = opts.chain_for(lay.size)
                fn = programs.compile_chain(collective_fn(op, algorithm, world), op, world, chain, mesh, x, s,
                                            options)
                trivial = None
                if not profiled:
                    trivial = programs.compile_chain(programs.trivial_collective(op, world), op, world, chain, mesh,
                                                     x, s, options)
                for _ in range(opts.warmup):
                    timing.run_blocking(fn, (x, s))
            except Exception as e:  # noqa: BLE001 - reported in the row
                error = kr.first_line(e)
            if not all_ok(error is None):
                rows.append(kr.new_row(c, f"error: {error or 'failed in another process'}", cost_s=time.time() - t0))
                continue
            prepared.append({"cell": c, "fn": fn, "trivial": trivial, "args": (x, s), "chain": chain,
                             "prep_s": time.time() - t0})
        t_timing = time.time()
        try:
            if profiled:
                busy = _annotated_runs([(f"{number}/{i}", p["fn"], p["args"]) for i, p in enumerate(prepared)],
                                       opts.steps, main)
            else:
                busy = {i: timing.interleaved({"ours": (p["fn"], p["args"]), "trivial": (p["trivial"], p["args"])},
                                              opts.steps, 1) for i, p in enumerate(prepared)}
            failure = None
        except Exception as e:  # noqa: BLE001 - the chunk's rows say so
            busy, failure = {}, kr.first_line(e)
        timing_s = (time.time() - t_timing) / max(1, len(prepared))
        for i, p in enumerate(prepared):
            c, chain = p["cell"], p["chain"]
            common = dict(time_source=source, repeats=chain, memcpy_us=copies.get(c.size),
                          ranks_per_gpu=ranks_per_gpu, cost_s=p["prep_s"] + timing_s)
            if failure:
                rows.append(kr.new_row(c, f"error: {failure}", **common))
                continue
            if not main:
                continue
            if profiled:
                got = [busy.get(ANNOTATION.format(f"{number}/{i}/{step}")) for step in range(opts.steps)]
                if any(g is None for g in got):
                    rows.append(kr.new_row(c, "error: the run's annotation is not in the profile", **common))
                    continue
                if any(g["ours_kernels"] == 0 for g in got):
                    seen = "; ".join(got[0]["names"]) or "none"
                    rows.append(kr.new_row(c, f"error: no jax_mscclpp kernel in the profile (kernels: {seen})",
                                           **common))
                    continue
                samples = [g["ours_us"] / chain for g in got]
                common["launches"] = int(round(got[0]["ours_kernels"] / chain))
            else:
                base = float(np.median(busy[i]["trivial"]))
                samples = [(t - base) / chain for t in busy[i]["ours"]]
            rows.append(kr.new_row(c, **common, **kr.samples_fields(samples)))
        if main:
            if emit is not None:
                emit(rows)
            done = 0 if failure else len(prepared)
            log(f"#   {format_size(size)}: {done} of {len(chunk)} cells in {time.time() - t_chunk:.0f} s")
    if main and any(v is None for v in copies.values()):
        notes.append("the memcpy reference failed at some sizes (memcpy_us null there)")
    return rows, notes


# --------------------------------------------------------------------------------------------------- sources
def _cell_dicts(cells: Sequence[kr.Cell], estimates) -> list[dict]:
    return [{**c.as_dict(), "estimate_s": estimates.get(c.key)} for c in cells]


class DevicesSource(kr.Source):
    """``devices:N``: the first N devices of this process's default backend."""

    kind = "devices"

    def _devices(self):
        import jax

        return jax.devices()

    def _platform(self) -> str:
        return "gpu" if self._devices()[0].platform in ("gpu", "cuda", "rocm") else "cpu"

    def unavailable(self, setting):
        devices = self._devices()
        if setting.ranks > len(devices):
            return f"{setting.ranks} devices asked for, {len(devices)} {devices[0].platform} device(s) here"
        if setting.ranks < 2:
            return "a collective of one device runs no kernel of interest"
        return None

    def algorithms(self, op, setting):
        return jax_algorithms(op, self._devices()[0].platform)

    def describe(self):
        devices = self._devices()
        gpu = self._platform() == "gpu"
        return {"platform": self._platform(), "device_kind": devices[0].device_kind,
                "gpu_model": devices[0].device_kind if gpu else None, "gpu_count": len(devices) if gpu else 0}

    def setup_estimate_s(self, setting):
        return 3.0 if self._platform() == "cpu" else 8.0

    def cell_estimate_s(self, cell):
        if self._platform() == "cpu":
            return 0.6 + 0.1 * cell.setting.ranks + cell.size * cell.setting.ranks / 2e8
        return 1.0 + cell.size * cell.setting.ranks / 2e10

    def measure(self, setting, cells, deadline, estimates):
        mesh = programs.make_mesh(self._devices()[:setting.ranks])
        opts = OPTIONS[("devices", self._platform())]
        rows, notes = measure_on_mesh(mesh, _cell_dicts(cells, estimates), opts, deadline, cells[0].dtype,
                                      1 if self._platform() == "gpu" else None)
        return rows, {"notes": notes}


def gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi (None where there is none)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return names[0] if names else None


@contextlib.contextmanager
def _environ(**changes):
    """os.environ with ``changes`` (None: removed) inside the block, as it was after."""
    def apply(values):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    saved = {k: os.environ.get(k) for k in changes}
    try:
        apply(changes)
        yield
    finally:
        apply(saved)


class ProcessesSource(kr.Source):
    """``processes:P``: P processes of this module's ``child_main`` under ``launcher.launch``."""

    kind = "processes"
    CHILD_TIMEOUT_S = "60"  # JAX_MSCCLPP_TIMEOUT_S for the children unless set: a hung kernel fails the setting

    def __init__(self):
        self._gpus = None
        self._described = None

    def gpus(self) -> int:
        if self._gpus is None:
            self._gpus = launcher._cuda_device_count() or 0
        return self._gpus

    def unavailable(self, setting):
        if not self.gpus():
            return ("needs GPUs: jax_mscclpp's host reference backend runs within one process (CPU devices: the "
                    "devices:N settings)")
        if setting.ranks < 2:
            return "a collective of one process runs no kernel of interest"
        return None

    def algorithms(self, op, setting):
        return jax_algorithms(op, "gpu")

    def describe(self):
        if self._described is None:
            self._described = {"gpu_count": self.gpus(), "gpu_model": gpu_name() if self.gpus() else None}
        return self._described

    def setup_estimate_s(self, setting):
        return 15.0 + 3.0 * setting.ranks

    def cell_estimate_s(self, cell):
        opts = OPTIONS[("processes", "gpu")]
        calls = (opts.warmup + opts.steps) * opts.chain_for(cell.size)
        per_call = 0.004 * cell.setting.ranks + cell.size * cell.setting.ranks / 5e10
        return 1.0 + calls * per_call + TRACE_OVERHEAD_S / 8

    def measure(self, setting, cells, deadline, estimates):
        left = deadline - time.time()
        if left < self.setup_estimate_s(setting):
            return [], {"status": "not started", "notes": [
                f"not started: {left:.0f} s left, less than {setting.ranks} processes take to start"]}
        folder = tempfile.mkdtemp(prefix="kernel_record_processes_")
        part = os.path.join(folder, "part.json")
        plan_path = os.path.join(folder, "plan.json")
        with open(plan_path, "w") as f:
            json.dump({"setting": setting.label, "cells": _cell_dicts(cells, estimates), "deadline": deadline,
                       "dtype": cells[0].dtype, "part": part}, f)
        platforms = os.environ.get("JAX_PLATFORMS")
        keep = platforms if platforms and platforms.strip().lower() not in ("cpu",) else None
        with _environ(JAX_PLATFORMS=keep, XLA_PYTHON_CLIENT_PREALLOCATE="false",
                      JAX_MSCCLPP_TIMEOUT_S=os.environ.get("JAX_MSCCLPP_TIMEOUT_S") or self.CHILD_TIMEOUT_S):
            status = launcher.launch(setting.ranks, "jax_mscclpp.tools.bench.kernel_record",
                                     ["--child-plan", plan_path], timeout_s=max(10.0, deadline - time.time() + 15.0))
        try:
            with open(part) as f:
                got = json.load(f)
        except (OSError, ValueError):
            got = {"rows": [], "notes": [], "machine": {}, "setup_s": None}
        shutil.rmtree(folder, ignore_errors=True)
        notes = list(got.get("notes", ()))
        info = {"notes": notes, "machine": got.get("machine") or {}, "status": "ok"}
        if status == 124:
            info["status"] = "stopped at the deadline"
            notes.append(f"the {setting.ranks} processes were stopped at the deadline")
        elif status != 0:
            info["status"] = f"error: the {setting.ranks} processes ended with exit status {status}"
            notes.append(info["status"][len("error: "):])
        return got.get("rows", []), info


def child_main(plan_path: str) -> int:
    """One process of a ``processes:P`` setting: joins the job, measures the plan's cells with the others, and
    (process 0) writes the rows so far to the plan's part file after every chunk."""
    with open(plan_path) as f:
        the_plan = json.load(f)
    launcher.initialize_child()
    import jax

    from . import machine

    cells = the_plan["cells"]
    mesh = programs.make_mesh(jax.devices())
    main = jax.process_index() == 0
    devices = list(np.asarray(mesh.devices).flat)
    facts = machine.describe(devices)
    part = {"rows": [], "notes": [],
            "machine": {"gpu_model": facts.get("gpu_model"), "device_kind": facts.get("device_kind"),
                        "platform_version": facts.get("platform_version")}}

    def emit(rows):
        part["rows"] = rows
        kr.write_record(part, the_plan["part"])

    gpus = launcher._cuda_device_count() or 1
    rows, notes = measure_on_mesh(mesh, cells, OPTIONS[("processes", "gpu")], float(the_plan["deadline"]),
                                  the_plan["dtype"], max(1, len(devices) // gpus), emit if main else None,
                                  log=lambda line: print(f"# {the_plan['setting']}{line[1:]}", flush=True))
    if main:
        part["rows"], part["notes"] = rows, notes
        kr.write_record(part, the_plan["part"])
    return 0


__all__ = ["DevicesSource", "OPTIONS", "Options", "ProcessesSource", "child_main", "collective_fn", "jax_algorithms",
           "layout", "measure_on_mesh", "ring_shift", "window_busy"]
