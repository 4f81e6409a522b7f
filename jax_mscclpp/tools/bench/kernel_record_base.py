"""What the kernel record's tool (``kernel_record``) and its sources (``kernel_record_jax``,
bench/kernels/kernel_record.py) share: the record's schema and rows, the settings and cells, a source's interface,
the plan under a budget, finding the previous record and the records the best times are taken from (the
collectives bench's virtual-rank records among them), and the comparisons with them.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import math
import os
import re
import subprocess
from typing import Callable, Iterable, Mapping, Sequence

from ...collective_specs import SPECS
from . import metrics
from .units import format_size, parse_sizes
from .json_safe import json_safe

SCHEMA = "jax_mscclpp.kernel_record/1"
DEFAULT_NAME = "kernel-record"
DEFAULT_SIZES = "1K:256M:4"
DEFAULT_DTYPE = "bfloat16"
DEFAULT_THRESHOLD = 0.10
DEFAULT_RESULTS = os.path.join("bench", "results")
OPS = tuple(spec.name for spec in SPECS.values())  # every collective of codes.def, the permutation included
KINDS = ("virtual", "devices", "processes")
# Seconds kept back from the budget for the end of the run: the record, the comparison, the table.
RESERVE_S = 8.0

TIME_SOURCES = {
    "cuda_events": "CUDA events on rank 0's stream around a replay of a CUDA graph of R calls on every rank, / R; "
                   "one sample per replay",
    "profiler": "the JAX profiler's kernel events on GPU 0: the union of the jax_mscclpp kernels' intervals within "
                "one run of K chained calls, / K; one sample per run",
    "host": "host wall time of K chained calls minus the same program with a trivial op, / K (no device timeline: "
            "CPU devices); one sample per run",
}
MEMCPY_SOURCES = {
    "cuda_events": "cudaMemcpyAsync device to device of the same bytes on rank 0's stream, between CUDA events",
    "profiler": "the kernels of K chained elementwise passes (x * s: each reads and writes the bytes once, as a copy "
                "does) on one device, from the profiler, / K",
    "host": "host wall time of K chained elementwise passes over the same bytes on one device, / K",
}

# Every row's fields: name -> (types, what). Times in microseconds, bandwidths in GB/s (1e9 B/s).
_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
ROW_FIELDS = {
    "setting": (str, "kind:N, e.g. virtual:8"),
    "kind": (str, "virtual | devices | processes"),
    "ranks": (int, "ranks of the collective"),
    "processes": (int, "processes they run in"),
    "ranks_per_gpu": ((int, type(None)), "ranks sharing one GPU (None on CPU)"),
    "op": (str, "the collective (codes.def's name)"),
    "algorithm": (str, "the algorithm forced"),
    "size": (int, "nccl-tests' size: the larger per-rank buffer, bytes"),
    "dtype": (str, "element type"),
    "status": (str, "ok | below noise | skipped: ... | error: ... | unavailable: ..."),
    "time_source": (_OPT_STR, "a key of TIME_SOURCES"),
    "time_us": (_OPT_NUM, "device time per call: the median sample"),
    "time_min_us": (_OPT_NUM, "the smallest sample"),
    "time_max_us": (_OPT_NUM, "the largest sample"),
    "samples": ((int, type(None)), "samples the median is over"),
    "memcpy_us": (_OPT_NUM, "a device-to-device copy of the same bytes, same run (MEMCPY_SOURCES)"),
    "of_memcpy": (_OPT_NUM, "memcpy_us / time_us: the call's speed as a fraction of copying its buffer once"),
    "gpu_of_memcpy": (_OPT_NUM, "ranks_per_gpu x of_memcpy: the GPU's share, every rank on it moving its buffer"),
    "algbw_gbps": (_OPT_NUM, "size / time_us"),
    "busbw_gbps": (_OPT_NUM, "algbw x nccl-tests' bus factor"),
    "repeats": ((int, type(None)), "calls per sample (R graph calls, or K chained calls)"),
    "launches": ((int, type(None)), "kernel launches per call, where the source knows"),
    "estimate_s": (_OPT_NUM, "the plan's estimate of the cell's cost"),
    "cost_s": (_OPT_NUM, "seconds the cell took, all of it (the next plan's estimate)"),
}


# ---------------------------------------------------------------------------------------------------- settings
@dataclasses.dataclass(frozen=True)
class Setting:
    kind: str
    ranks: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown setting kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.ranks < 1:
            raise ValueError(f"a setting needs at least one rank, got {self.kind}:{self.ranks}")

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.ranks}"

    @property
    def processes(self) -> int:
        return self.ranks if self.kind == "processes" else 1

    @classmethod
    def parse(cls, text: str) -> "Setting":
        kind, sep, ranks = str(text).partition(":")
        if not sep or not ranks.strip().isdigit():
            raise ValueError(f"not a setting: {text!r} (kind:N, e.g. virtual:8, processes:2)")
        return cls(kind.strip(), int(ranks))


@dataclasses.dataclass(frozen=True)
class Cell:
    setting: Setting
    op: str
    algorithm: str
    size: int
    dtype: str

    @property
    def key(self) -> tuple:
        return (self.setting.label, self.op, self.algorithm, self.size, self.dtype)

    @property
    def label(self) -> str:
        return f"{self.setting.label} {self.op}/{self.algorithm} {format_size(self.size)} {self.dtype}"

    def as_dict(self) -> dict:
        return {"setting": self.setting.label, "op": self.op, "algorithm": self.algorithm, "size": self.size,
                "dtype": self.dtype}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Cell":
        return cls(Setting.parse(d["setting"]), d["op"], d["algorithm"], int(d["size"]), d["dtype"])


def row_key(row: Mapping) -> tuple:
    return (row["setting"], row["op"], row["algorithm"], row["size"], row["dtype"])


def new_row(cell: Cell, status: str = "ok", **fields) -> dict:
    """A row of ``cell`` with every field of ``ROW_FIELDS`` (None where not given); bandwidths and memcpy ratios
    derived from ``time_us``, ``memcpy_us`` and ``ranks_per_gpu`` where they are given and not already set."""
    unknown = set(fields) - set(ROW_FIELDS)
    if unknown:
        raise TypeError(f"unknown row fields: {sorted(unknown)}")
    row = {name: None for name in ROW_FIELDS}
    row.update(setting=cell.setting.label, kind=cell.setting.kind, ranks=cell.setting.ranks,
               processes=cell.setting.processes, op=cell.op, algorithm=cell.algorithm, size=int(cell.size),
               dtype=cell.dtype, status=status)
    row.update(fields)
    t = row["time_us"]
    if status == "ok" and (t is None or not math.isfinite(t) or t <= 0):
        row["status"] = "below noise" if t is not None else "error: no time measured"
    if row["status"] == "ok":
        if row["algbw_gbps"] is None:
            row["algbw_gbps"] = metrics.algbw_gbps(row["size"], t)
        if row["busbw_gbps"] is None and row["algbw_gbps"] is not None:
            row["busbw_gbps"] = row["algbw_gbps"] * metrics.bus_factor(cell.op, cell.setting.ranks)
        m = row["memcpy_us"]
        if row["of_memcpy"] is None and m is not None and m > 0:
            row["of_memcpy"] = m / t
        if row["gpu_of_memcpy"] is None and row["of_memcpy"] is not None and row["ranks_per_gpu"]:
            row["gpu_of_memcpy"] = row["of_memcpy"] * row["ranks_per_gpu"]
    return row


def samples_fields(samples_us: Sequence[float]) -> dict:
    """time_us (median), time_min_us, time_max_us and samples of per-call samples."""
    stats = metrics.Stats.of(list(samples_us))
    return {"time_us": stats.median, "time_min_us": stats.min, "time_max_us": stats.max, "samples": stats.count}


# ------------------------------------------------------------------------------------------------------ sources
class Source:
    """Where one kind of setting is measured. Subclasses set ``kind`` and implement what they can.

    ``measure(setting, cells, deadline, estimates)`` runs ``cells`` (all of ``setting``, planned, in run order)
    and returns ``(rows, info)``: a row per cell it ran or skipped (cells it returns no row for are recorded as
    skipped at the deadline, or with ``info["status"]`` when that is an error), and ``info`` with optional
    ``status``, ``notes`` and ``machine`` (facts for the record's machine block). The setting's ``setup_s`` is its
    time less its rows' ``cost_s``. ``deadline`` is ``time.time()`` seconds;
    ``estimates`` maps ``Cell.key`` to the plan's estimate; a cell whose estimate would pass the deadline is
    skipped ("skipped: deadline")."""

    kind = ""

    def unavailable(self, setting: Setting) -> str | None:
        """Why ``setting`` cannot run here, or None."""
        return None

    def algorithms(self, op: str, setting: Setting) -> list[str]:
        raise NotImplementedError

    def setup_estimate_s(self, setting: Setting) -> float:
        return 10.0

    def cell_estimate_s(self, cell: Cell) -> float:
        return 1.0

    def describe(self) -> dict:
        """Machine facts known before measuring (gpu_model, gpu_count, ...)."""
        return {}

    def measure(self, setting: Setting, cells: Sequence[Cell], deadline: float,
                estimates: Mapping[tuple, float]) -> tuple[list[dict], dict]:
        raise NotImplementedError


# ----------------------------------------------------------------------------------------------------- planning
def size_priority(sizes: Iterable[int]) -> list[int]:
    """The sizes, most wanted first: the smallest, the largest, then the middle of every gap, level by level (so
    any prefix spreads over the whole range)."""
    ordered = sorted(set(int(s) for s in sizes))
    if len(ordered) <= 2:
        return ordered
    out = [ordered[0], ordered[-1]]
    gaps = [(0, len(ordered) - 1)]
    while gaps:
        next_gaps = []
        for lo, hi in gaps:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            out.append(ordered[mid])
            next_gaps += [(lo, mid), (mid, hi)]
        gaps = next_gaps
    return out


@dataclasses.dataclass
class Plan:
    kept: list  # Cells to run, in run order: by size priority, ties in the given order
    skipped: list  # Cells left out
    estimated_s: float  # the kept cells' estimates and their settings' setups
    estimates: dict  # Cell.key -> estimated seconds


def plan(cells: Sequence[Cell], budget_s: float, estimate: Callable[[Cell], float],
         setup: Callable[[Setting], float]) -> Plan:
    """The cells that fit ``budget_s``: taken in order of their size's priority (``size_priority``), ties in the
    given order, each kept while the estimated total (its setting's setup counted once, with its first cell)
    stays within the budget; a cell that does not fit is left out and later, cheaper ones are still tried. The
    kept cells run in that order within each setting, so a run cut short at its deadline loses the least wanted
    sizes of every kernel."""
    rank = {size: i for i, size in enumerate(size_priority(c.size for c in cells))}
    order = sorted(range(len(cells)), key=lambda i: (rank[cells[i].size], i))
    estimates = {c.key: max(0.0, float(estimate(c))) for c in cells}
    setups = {c.setting: max(0.0, float(setup(c.setting))) for c in cells}
    total, started, kept = 0.0, set(), set()
    for i in order:
        cell = cells[i]
        cost = estimates[cell.key] + (0.0 if cell.setting in started else setups[cell.setting])
        if total + cost <= budget_s:
            total += cost
            kept.add(i)
            started.add(cell.setting)
    return Plan([cells[i] for i in order if i in kept], [c for i, c in enumerate(cells) if i not in kept], total,
                estimates)


class Estimates:
    """Cost estimates: the previous record's measured seconds where it has them (``cost_s`` of the same cell,
    ``setup_s`` of the same setting), else the source's model."""

    def __init__(self, sources: Mapping[str, Source], previous: Mapping | None = None):
        self.sources = sources
        self.costs = {}
        self.setups = {}
        if previous:
            for row in previous.get("rows", ()):
                if isinstance(row.get("cost_s"), _NUM) and row.get("status", "").split(":")[0] in ("ok", "below noise",
                                                                                                    "error"):
                    self.costs[row_key(row)] = float(row["cost_s"])
            for label, info in (previous.get("setups") or {}).items():
                if isinstance(info, Mapping) and isinstance(info.get("setup_s"), _NUM):
                    self.setups[label] = float(info["setup_s"])

    def cell(self, cell: Cell) -> float:
        if cell.key in self.costs:
            return self.costs[cell.key]
        return self.sources[cell.setting.kind].cell_estimate_s(cell)

    def setup(self, setting: Setting) -> float:
        if setting.label in self.setups:
            return self.setups[setting.label]
        return self.sources[setting.kind].setup_estimate_s(setting)


def cells_of(settings: Sequence[Setting], sources: Mapping[str, Source], ops: Sequence[str], sizes: Sequence[int],
             dtype: str, algorithms: Sequence[str] = ("all",), notes: list | None = None) -> list[Cell]:
    """Every (setting, op, algorithm, size) to measure, in run order; ``algorithms`` "all" is every algorithm the
    setting's source runs for the op, names filter them (a name no op of a setting runs is noted)."""
    out = []
    wanted = [a for a in algorithms if a != "all"]
    for setting in settings:
        source = sources[setting.kind]
        seen = set()
        for op in ops:
            names = source.algorithms(op, setting)
            seen.update(names)
            if wanted and "all" not in algorithms:
                names = [a for a in names if a in wanted]
            for algorithm in names:
                for size in sorted(set(sizes)):
                    out.append(Cell(setting, op, algorithm, int(size), dtype))
        if notes is not None:
            for name in wanted:
                if name not in seen:
                    notes.append(f"{setting.label}: no collective asked for runs algorithm {name!r} here")
    return out


# ------------------------------------------------------------------------------------------------- the record
def commit_of(given: str | None = None, cwd: str | None = None) -> tuple[str, bool | None]:
    """(commit, dirty): ``given`` when set (dirty unknown), else ``git rev-parse HEAD`` and whether tracked files
    differ from it; ("unknown", None) outside a git checkout."""
    if given:
        return given, None
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=30)
        if head.returncode != 0 or not head.stdout.strip():
            return "unknown", None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                capture_output=True, text=True, timeout=30)
        return head.stdout.strip(), (bool(status.stdout.strip()) if status.returncode == 0 else None)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", None


def machine_info(facts: Sequence[Mapping] = ()) -> dict:
    """The record's machine block: this host, the versions and the environment that shape kernels
    (``machine.host``), merged with the sources' ``facts`` (the first value given for each key wins). Starts no
    JAX backend."""
    from . import machine

    merged: dict = {}
    for f in facts:
        for k, v in f.items():
            if v is not None and merged.get(k) is None:
                merged[k] = v
    gpu_count = int(merged.get("gpu_count") or 0)
    platform = "gpu" if gpu_count else merged.get("platform", "cpu")
    here = machine.host()
    info = {
        **{k: here[k] for k in ("hostname", "os", "cpu", "cpu_count")},
        "platform": platform,
        "device_kind": merged.get("gpu_model") if gpu_count else merged.get("device_kind", "cpu"),
        "gpu_model": merged.get("gpu_model") if gpu_count else None,
        "gpu_count": gpu_count,
        **{k: here[k] for k in ("versions", "environment", "command")},
    }
    for k, v in merged.items():
        if k not in info:
            info[k] = v
    return info


def machine_key(doc: Mapping) -> tuple:
    m = doc.get("machine") or {}
    return (m.get("platform"), m.get("device_kind"), m.get("gpu_count"))


def validate(doc) -> list[str]:
    """What is wrong with ``doc`` as a record of this schema (empty when nothing is)."""
    problems = []
    if not isinstance(doc, Mapping):
        return ["a record is a JSON object"]
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    for key, kind in (("name", str), ("date", str), ("commit", str), ("machine", Mapping), ("settings", Mapping),
                      ("budget", Mapping), ("setups", Mapping), ("time_sources", Mapping), ("notes", list),
                      ("rows", list)):
        if not isinstance(doc.get(key), kind):
            problems.append(f"{key}: missing or not a {kind.__name__}")
    if problems:
        return problems
    try:
        datetime.datetime.fromisoformat(doc["date"])
    except ValueError:
        problems.append(f"date {doc['date']!r} is not ISO 8601")
    for key in ("platform", "device_kind", "gpu_count"):
        if key not in doc["machine"]:
            problems.append(f"machine.{key} missing")
    for key in ("budget_s", "estimated_s", "elapsed_s"):
        if not isinstance(doc["budget"].get(key), _NUM):
            problems.append(f"budget.{key} missing or not a number")
    seen = set()
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, Mapping):
            problems.append(f"rows[{i}] is not an object")
            continue
        for name, (types, _) in ROW_FIELDS.items():
            if name not in row:
                problems.append(f"rows[{i}].{name} missing")
            elif isinstance(row[name], bool) or not isinstance(row[name], types):
                problems.append(f"rows[{i}].{name} = {row[name]!r} is not {types}")
        if any(p.startswith(f"rows[{i}].") for p in problems):
            continue
        if row["kind"] not in KINDS or row["setting"] != f"{row['kind']}:{row['ranks']}":
            problems.append(f"rows[{i}]: setting {row['setting']!r} does not match kind {row['kind']!r} and ranks")
        if row["op"] not in OPS:
            problems.append(f"rows[{i}]: unknown op {row['op']!r}")
        if row_key(row) in seen:
            problems.append(f"rows[{i}]: a second row of {row_key(row)}")
        seen.add(row_key(row))
        if row["status"] == "ok":
            if row["time_source"] not in doc["time_sources"]:
                problems.append(f"rows[{i}]: time source {row['time_source']!r} is not described in time_sources")
            if not (isinstance(row["time_us"], _NUM) and row["time_us"] > 0):
                problems.append(f"rows[{i}]: status ok without a positive time_us")
            elif not (row["time_min_us"] <= row["time_us"] <= row["time_max_us"]):
                problems.append(f"rows[{i}]: time_us outside [time_min_us, time_max_us]")
    for key in ("comparison", "comparison_best"):
        if doc.get(key) is not None and not isinstance(doc[key], Mapping):
            problems.append(f"{key} is neither null nor an object")
    return problems


def write_record(doc: Mapping, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(json_safe(doc), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
    return path


def load_record(path: str) -> dict:
    with open(path) as f:
        doc = json.load(f)
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path} is not a kernel record: " + "; ".join(problems[:5]))
    return doc


def record_path(out_dir: str, name: str, doc: Mapping) -> str:
    """``out_dir/<name>-<device kind>-<YYYY-MM-DD>.json``, with the time added when that file exists."""
    kind = re.sub(r"[^A-Za-z0-9]+", "-", str(doc["machine"].get("device_kind") or "cpu")).strip("-").lower()
    date = str(doc["date"])[:10]
    path = os.path.join(out_dir, f"{name}-{kind}-{date}.json")
    if os.path.exists(path):
        path = os.path.join(out_dir, f"{name}-{kind}-{date}-{re.sub(r'[^0-9]', '', str(doc['date'])[11:19])}.json")
    return path


def _candidate_paths(where: str, patterns: Sequence[str], exclude: Iterable[str]) -> list[str]:
    """``where`` itself when it is a file, else the files of the folder ``where`` matching any of ``patterns``,
    less ``exclude``."""
    if os.path.isfile(where):
        return [where]
    if not os.path.isdir(where):
        return []
    excluded = {os.path.abspath(p) for p in exclude}
    found = dict.fromkeys(path for pattern in patterns for path in sorted(glob.glob(os.path.join(where, pattern))))
    return [path for path in found if os.path.abspath(path) not in excluded]


def _json_object(path: str) -> dict | None:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _records_of(where: str, name: str, machine: tuple | None, exclude: Iterable[str]) -> list[tuple[str, dict]]:
    """(path, record) of every file ``name*.json`` in the folder ``where`` that is a record of this schema, of the
    same machine (``machine_key``) when ``machine`` is given."""
    out = []
    for path in _candidate_paths(where, [f"{name}*.json"], exclude):
        doc = _json_object(path)
        if doc is None or doc.get("schema") != SCHEMA:
            continue
        if machine is not None and machine_key(doc) != tuple(machine):
            continue
        out.append((path, doc))
    return out


def find_previous(where: str, name: str, machine: tuple | None = None, exclude: Iterable[str] = ()) -> str | None:
    """The newest record (by its ``date``) named ``name*.json`` in the folder ``where`` (or ``where`` itself when it
    is a file), of the same machine (``machine_key``) when ``machine`` is given; files that are not records of
    this schema are passed over."""
    if os.path.isfile(where):
        return where
    found = _records_of(where, name, machine, exclude)
    return max(found, key=lambda path_doc: str(path_doc[1].get("date", "")))[0] if found else None


def find_records(where: str, name: str, machine: tuple, exclude: Iterable[str] = (),
                 notes: list | None = None) -> list[dict]:
    """Every record of ``machine`` in the folder ``where`` (or the file ``where``), each with its ``path``: the
    valid records of this schema named ``name*.json`` and the collectives bench's virtual-rank records
    (``COLLECTIVES_BENCH_PATTERN``, read by ``collectives_bench_record``). A record of this schema that does not
    validate is passed over, and noted in ``notes``."""
    out = []
    for path, doc in _records_of(where, name, machine, exclude):
        problems = validate(doc)
        if problems:
            if notes is not None:
                notes.append(f"{path} is not used: " + "; ".join(problems[:3]))
            continue
        out.append({**doc, "path": path})
    for path in _candidate_paths(where, [COLLECTIVES_BENCH_PATTERN], exclude):
        doc = _json_object(path)
        bench_record = collectives_bench_record(doc, path) if doc is not None else None
        if bench_record is not None and machine_key(bench_record) == tuple(machine):
            out.append(bench_record)
    return out


# --------------------------------------------------------------------------------- the collectives bench's records
# bench/kernels/collectives.py times the kernels of N virtual ranks on one GPU as the kernel record's virtual:N
# setting does (a CUDA graph of R calls per rank, replayed between CUDA events on rank 0's stream): its records named
# collectives-N-virtual-ranks-COMMIT-DATE.json are read as cells of that setting.
COLLECTIVES_BENCH_PATTERN = "collectives-*-virtual-ranks-*.json"
_COLLECTIVES_BENCH_NAME = re.compile(r"^collectives-\d+-virtual-ranks-([0-9a-f]{7,40})-")
_COLLECTIVES_BENCH_TIMING = ("CUDA graph", "events on rank 0")
RECORD_SIZES = frozenset(parse_sizes(DEFAULT_SIZES))


def collectives_bench_record(doc: Mapping, path: str) -> dict | None:
    """A record of the collectives bench (``"benchmark": "collectives"``; ``setup``: nranks, ranks_per_gpu, dtype,
    timing; ``machine``: gpu, gpu_count; ``rows`` of collective, algorithm, bytes, count, time_us, repeats,
    launches) as a record of this schema's shape: name "collectives", its date, the commit its file name carries,
    its machine, and a row of the virtual:N setting (N = nranks) for every row of a size of ``DEFAULT_SIZES``
    (others, e.g. 32 MiB, are left out), with time source cuda_events and no samples' spread. None when ``doc``
    is not such a record, or was timed another way.

    Its ``bytes`` is the kernel record's ``size`` for every collective: the larger per-rank buffer (all_reduce the
    vector, all_gather the output, reduce_scatter and all_to_all the input, the permutation the block), that is
    count x itemsize x blocks per rank (n; 1 for all_reduce and the permutation), where count is
    launch_collective's elements per block, the one bench/kernels/kernel_record.py's ``block_count`` gives for that
    size."""
    setup, machine = doc.get("setup"), doc.get("machine")
    named = _COLLECTIVES_BENCH_NAME.match(os.path.basename(path))
    if (doc.get("benchmark") != "collectives" or named is None or not isinstance(setup, Mapping)
            or not isinstance(machine, Mapping) or not isinstance(doc.get("rows"), list)
            or not all(part in str(setup.get("timing", "")) for part in _COLLECTIVES_BENCH_TIMING)):
        return None
    setting = Setting("virtual", int(setup["nranks"]))
    rows = []
    for row in doc["rows"]:
        if row.get("collective") not in OPS or int(row.get("bytes", 0)) not in RECORD_SIZES:
            continue
        cell = Cell(setting, row["collective"], row["algorithm"], int(row["bytes"]), str(setup["dtype"]))
        rows.append(new_row(cell, time_source="cuda_events", time_us=row.get("time_us"), repeats=row.get("repeats"),
                            launches=row.get("launches"), ranks_per_gpu=setup.get("ranks_per_gpu")))
    return {
        "name": "collectives",
        "date": doc.get("date"),
        "commit": named.group(1),
        # The file names the GPU model and count, not the platform nor the device kind that machine_key also
        # holds: the collectives bench runs on a GPU only, and a GPU record's device_kind is its model
        # (machine_info), so its key matches a kernel record's on the GPU model and count alone.
        "machine": {"platform": "gpu", "device_kind": machine.get("gpu"), "gpu_model": machine.get("gpu"),
                    "gpu_count": machine.get("gpu_count")},
        "rows": rows,
        "path": path,
    }


# -------------------------------------------------------------------------------------------------- comparison
def fastest_rows(records: Sequence[Mapping]) -> dict:
    """(row_key, time_source) -> (row, record): per cell and time source, the ok row of ``records`` with the
    smallest ``time_us`` (the earlier record's on a tie)."""
    out: dict = {}
    for doc in records:
        for row in doc.get("rows", ()):
            if row.get("status") != "ok":
                continue
            ref = (row_key(row), row.get("time_source"))
            if ref not in out or row["time_us"] < out[ref][0]["time_us"]:
                out[ref] = (row, doc)
    return out


def _beyond_spread(new: Mapping, old: Mapping, slower: bool) -> bool | None:
    """Whether the new samples all lie past the old ones (slower: new smallest above old largest; faster: new
    largest below old smallest); None where either row has no spread."""
    if slower:
        a, b = new.get("time_min_us"), old.get("time_max_us")
        return None if a is None or b is None else a > b
    a, b = new.get("time_max_us"), old.get("time_min_us")
    return None if a is None or b is None else a < b


def _compare_with(new: Mapping, reference: Mapping, threshold: float, name_sources: bool) -> dict:
    """The comparison of ``new``'s ok cells with ``reference`` (``fastest_rows``): per cell the reference row of the
    same time source; with ``name_sources``, every entry names the record its reference row is from
    (``best_path``, ``best_commit``, ``best_date``). See ``compare``."""
    referenced = {key for key, _ in reference}
    new_rows = {row_key(r): r for r in new.get("rows", ())}
    compared, slower, faster, changed_source, added = [], [], [], [], []
    memcpy: dict = {}
    for key, r in new_rows.items():
        if r.get("status") != "ok":
            continue
        found = reference.get((key, r.get("time_source")))
        if found is None:
            if key in referenced:
                old_sources = sorted(str(source) for k, source in reference if k == key)
                changed_source.append({"key": list(key), "old": ", ".join(old_sources), "new": r.get("time_source")})
            else:
                added.append(list(key))
            continue
        o, doc = found
        ratio = r["time_us"] / o["time_us"]
        entry = {"key": list(key), "old_us": o["time_us"], "new_us": r["time_us"], "ratio": ratio}
        if name_sources:
            entry.update(best_path=doc.get("path"), best_commit=doc.get("commit"), best_date=doc.get("date"))
        if ratio > 1 + threshold:
            entry["beyond_spread"] = _beyond_spread(r, o, slower=True)
            slower.append(entry)
        elif ratio < 1 - threshold:
            entry["beyond_spread"] = _beyond_spread(r, o, slower=False)
            faster.append(entry)
        compared.append(entry)
        if r.get("memcpy_us") and o.get("memcpy_us"):
            memcpy.setdefault(key[0], {})[key[3]] = r["memcpy_us"] / o["memcpy_us"]
    missing = [{"key": list(k), "status": new_rows[k]["status"] if k in new_rows else "not asked for"}
               for k in dict.fromkeys(key for key, _ in reference)
               if k not in new_rows or new_rows[k].get("status") != "ok"]
    by_kernel: dict = {}
    for entry in compared:
        setting, op, algorithm = entry["key"][:3]
        by_kernel.setdefault(f"{setting} {op}/{algorithm}", []).append(entry["ratio"])
    return {
        "threshold": threshold,
        "compared": len(compared),
        "slower": sorted(slower, key=lambda e: -e["ratio"]),
        "faster": sorted(faster, key=lambda e: e["ratio"]),
        "missing": missing,
        "new": added,
        "time_source_changed": changed_source,
        "geomean_ratio": {k: _geomean(v) for k, v in by_kernel.items()},
        "memcpy_ratio": {s: _geomean(list(v.values())) for s, v in memcpy.items()},
    }


def compare(new: Mapping, old: Mapping, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """Every cell measured (status ok) in both records with the same time source: new time / old time. A kernel
    is *slower* when the ratio exceeds 1 + threshold, *faster* below 1 - threshold; ``beyond_spread`` says whether
    the new smallest sample is above the old largest (slower) or the new largest below the old smallest (faster),
    null where a row has no samples' spread. Also: cells measured before and not now (``missing``, with today's
    status), cells new to this record, cells whose time source changed, and per setting the change of the memcpy
    reference (the machine's own drift)."""
    return {"previous": old.get("path"), "previous_date": old.get("date"), "previous_commit": old.get("commit"),
            **_compare_with(new, fastest_rows([old]), threshold, name_sources=False)}


def compare_best(new: Mapping, records: Sequence[Mapping], threshold: float = DEFAULT_THRESHOLD) -> dict:
    """``compare`` against the best of ``records``: for every cell, the fastest ok row of the same time source any
    of them holds (``fastest_rows``; ``old_us`` is its time), every entry naming the record it is from
    (``best_path``, ``best_commit``, ``best_date``); ``best_of`` lists the records (path, date, commit)."""
    return {"best_of": [{"path": doc.get("path"), "date": doc.get("date"), "commit": doc.get("commit")}
                        for doc in records],
            **_compare_with(new, fastest_rows(records), threshold, name_sources=True)}


def _geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.0f} %"


def _against(cmp: Mapping) -> str:
    """What a comparison is against: the previous record, or (``compare_best``) the best of its records."""
    if "best_of" in cmp:
        return f"the best of {len(cmp['best_of'])} records of this machine"
    return f"{cmp.get('previous')} ({cmp.get('previous_date')}, commit {str(cmp.get('previous_commit'))[:12]})"


def format_comparison(cmp: Mapping, limit: int = 40) -> list[str]:
    """The comparison as lines: a summary (against the best, then the records the best is taken from), then every
    slower kernel (most first, up to ``limit``; against the best, each with the commit and date of the record its
    best is from)."""
    beyond = sum(1 for e in cmp["slower"] if e.get("beyond_spread"))
    lines = [f"# against {_against(cmp)}: {cmp['compared']} cells compared, {len(cmp['slower'])} more than "
             f"{cmp['threshold'] * 100:.0f} % slower ({beyond} beyond the samples' spread), {len(cmp['faster'])} "
             f"faster, {len(cmp['missing'])} measured before but not now, {len(cmp['new'])} new"]
    lines += [f"#   {r['path']} ({r['date']}, commit {str(r['commit'])[:12]})" for r in cmp.get("best_of", ())]
    for setting, ratio in sorted(cmp.get("memcpy_ratio", {}).items()):
        if ratio is not None and abs(ratio - 1) > cmp["threshold"]:
            lines.append(f"# note: {setting}: the memcpy reference itself changed by {_pct(ratio)}: the machine "
                         "differs from the reference run's, read the kernels' changes against that")
    for entry in cmp["slower"][:limit]:
        setting, op, algorithm, size, dtype = entry["key"]
        spread = " (within the samples' spread)" if entry.get("beyond_spread") is False else ""
        best = (f" against the best, commit {str(entry['best_commit'])[:12]} of {str(entry['best_date'])[:10]}"
                if "best_path" in entry else "")
        lines.append(f"SLOWER {setting} {op}/{algorithm} {format_size(size)} {dtype}: {entry['old_us']:.1f} -> "
                     f"{entry['new_us']:.1f} us ({_pct(entry['ratio'])}){best}{spread}")
    if len(cmp["slower"]) > limit:
        lines.append(f"SLOWER ... and {len(cmp['slower']) - limit} more (the record's comparison lists them all)")
    if cmp["time_source_changed"]:
        lines.append(f"# note: {len(cmp['time_source_changed'])} cells changed time source: not compared")
    return lines


def summary_table(doc: Mapping, cmp: Mapping | None) -> list[str]:
    """One line per op/algorithm, one column per setting: the geometric mean change over sizes against the
    previous record, or without one the times at the smallest and largest size measured (us)."""
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    settings = list(dict.fromkeys(r["setting"] for r in doc["rows"]))
    kernels = list(dict.fromkeys(f"{r['op']}/{r['algorithm']}" for r in doc["rows"]))
    width = max([12] + [len(s) + 2 for s in settings])
    if cmp is not None:
        head = "# change against the previous record, geometric mean over sizes"
    else:
        head = "# device time per call (us) at the smallest / largest size measured"
    lines = [head, f"{'op/algorithm':26s}" + "".join(f"{s:>{width}s}" for s in settings)]
    for kernel in kernels:
        cells = []
        for setting in settings:
            if cmp is not None:
                cells.append(_pct(cmp["geomean_ratio"].get(f"{setting} {kernel}")))
                continue
            mine = sorted((r for r in rows if r["setting"] == setting and f"{r['op']}/{r['algorithm']}" == kernel),
                          key=lambda r: r["size"])
            cells.append(f"{_short(mine[0]['time_us'])}/{_short(mine[-1]['time_us'])}" if mine else "-")
        lines.append(f"{kernel:26s}" + "".join(f"{c:>{width}s}" for c in cells))
    return lines


def _short(us: float) -> str:
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def first_line(error: BaseException) -> str:
    """An error as a row's status carries it: its type and first line, at most 300 characters."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
