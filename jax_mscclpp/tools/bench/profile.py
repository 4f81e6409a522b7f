"""Per-kernel device time inside a program, from a JAX profiler trace (what a model's step really spends).

``capture(run, steps, logdir)`` runs ``run()`` ``steps`` times under ``jax.profiler.trace(logdir,
create_perfetto_trace=True)`` and returns the trace file; ``summarize(path, steps)`` reads its kernel events and
reports, per step and for GPU 0: GPU busy time (the union of kernel intervals over every stream), idle time, the
collective kernels' time (ours: names with ``jax_mscclpp``; lax: NCCL kernels and XLA's collective fusions such as
``psum_*``/``all-reduce``/``collective-permute``), the time collective kernels ran beside compute kernels (overlap), and the top kernels
and host events by total time, and the runtime's host events by calls per step (thunks, kernel and graph launches,
stream captures: what the host does per step).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import statistics
from typing import Callable

_OURS = re.compile(r"jax_mscclpp")
_LAX_COLLECTIVE = re.compile(r"nccl|psum|all[-_]reduce|all[-_]gather|reduce[-_]scatter|all[-_]to[-_]all|"
                             r"collective|permute", re.IGNORECASE)


def classify(name: str) -> str:
    """"ours", "lax_collective" or "compute" for a GPU kernel name."""
    if _OURS.search(name):
        return "ours"
    if _LAX_COLLECTIVE.search(name):
        return "lax_collective"
    return "compute"


def capture(run: Callable[[], object], steps: int, logdir: str) -> str:
    """Runs ``run`` (blocking on its result) ``steps`` times under the profiler; returns the trace path."""
    import jax

    os.makedirs(logdir, exist_ok=True)
    before = set(glob.glob(os.path.join(logdir, "**", "*.trace.json.gz"), recursive=True))
    with jax.profiler.trace(logdir, create_perfetto_trace=True):
        for _ in range(steps):
            jax.block_until_ready(run())
    after = set(glob.glob(os.path.join(logdir, "**", "*.trace.json.gz"), recursive=True))
    new = sorted(after - before, key=os.path.getmtime)
    if not new:
        raise RuntimeError(f"the profiler wrote no *.trace.json.gz under {logdir}")
    return new[-1]


def _events(path: str) -> tuple[list, dict, dict]:
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    pnames, tnames = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e["pid"]] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            tnames[(e["pid"], e.get("tid"))] = e.get("args", {}).get("name", "")
    return [e for e in events if e.get("ph") == "X" and "dur" in e], pnames, tnames


def _union(intervals: list) -> list:
    merged = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _length(intervals: list) -> float:
    return sum(hi - lo for lo, hi in intervals)


def _intersection(a: list, b: list) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize(path: str, steps: int, top: int = 12, top_calls: int = 30) -> dict:
    """Per-step figures (microseconds) for the first GPU of the trace; see the module docstring."""
    events, pnames, tnames = _events(path)
    gpu_pids = sorted(p for p, n in pnames.items() if re.search(r"/device:GPU:0\b|GPU:0\b|/device:GPU:0 ", n))
    if not gpu_pids:
        gpu_pids = sorted(p for p, n in pnames.items() if "GPU" in n)[:1]
    on_gpu = [e for e in events if e["pid"] in gpu_pids]
    # Kernels and copies are on the "Stream #..." lines; "XLA Ops" / "XLA Modules" lines repeat them per HLO op.
    kernels = [e for e in on_gpu if tnames.get((e["pid"], e.get("tid")), "").startswith("Stream")] or on_gpu
    by_class: dict = {"ours": [], "lax_collective": [], "compute": []}
    stats: dict = {}
    for e in kernels:
        interval = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        by_class[classify(e["name"])].append(interval)
        stats.setdefault(e["name"], []).append(float(e["dur"]))
    busy = _union([i for v in by_class.values() for i in v])
    span = (busy[-1][1] - busy[0][0]) if busy else 0.0
    collective = _union(by_class["ours"] + by_class["lax_collective"])
    compute = _union(by_class["compute"])
    host = [e for e in events if e["pid"] not in gpu_pids and "GPU" not in pnames.get(e["pid"], "")]
    host_stats: dict = {}
    for e in host:
        host_stats.setdefault(e["name"], []).append(float(e["dur"]))
    per = max(1, steps)
    return {
        "steps": steps,
        "trace": path,
        "span_us": span / per,
        "gpu_busy_us": _length(busy) / per,
        "gpu_idle_us": (span - _length(busy)) / per,
        "collective_us": _length(collective) / per,
        "ours_us": _length(_union(by_class["ours"])) / per,
        "lax_collective_us": _length(_union(by_class["lax_collective"])) / per,
        "collective_beside_compute_us": _intersection(collective, compute) / per,
        "kernels": [
            {"name": n[:160], "class": classify(n), "calls_per_step": len(d) / per, "total_us_per_step": sum(d) / per,
             "median_us": statistics.median(d)}
            for n, d in sorted(stats.items(), key=lambda kv: -sum(kv[1]))[:top]
        ],
        "kernels_per_step": len(kernels) / per,
        "host": [
            {"name": n[:160], "calls_per_step": len(d) / per, "total_us_per_step": sum(d) / per}
            for n, d in sorted(host_stats.items(), key=lambda kv: -sum(kv[1]))[:top]
        ],
        # Python frames ("$file:line name") excluded: what the runtime does, per step, most frequent first.
        "host_calls": [
            {"name": n[:160], "calls_per_step": len(d) / per, "total_us_per_step": sum(d) / per}
            for n, d in sorted(host_stats.items(), key=lambda kv: (-len(kv[1]), -sum(kv[1])))
            if not n.startswith("$")][:top_calls],
    }


def format_summary(label: str, s: dict) -> str:
    lines = [f"{label}: per step {s['span_us']:.0f} us span, {s['kernels_per_step']:.0f} kernels, GPU busy "
             f"{s['gpu_busy_us']:.0f}, idle "
             f"{s['gpu_idle_us']:.0f}, collective kernels {s['collective_us']:.1f} (ours {s['ours_us']:.1f}, lax "
             f"{s['lax_collective_us']:.1f}), collective beside compute {s['collective_beside_compute_us']:.1f}"]
    for k in s["kernels"][:6]:
        lines.append(f"    {k['total_us_per_step']:8.1f} us/step {k['calls_per_step']:5.1f} calls median "
                     f"{k['median_us']:7.2f} [{k['class']}] {k['name'][:90]}")
    return "\n".join(lines)


__all__ = ["capture", "classify", "format_summary", "summarize"]
