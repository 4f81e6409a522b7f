"""NCCL's real clients through jax_mscclpp's libnccl.so.2 on one GPU: NVIDIA's nccl-tests (under MPI), PyTorch's
torch.distributed and JAX's own multi-process tests, each in 2, 3, 4 processes sharing GPU 0, where NVIDIA's NCCL
refuses to run (so every call must run on ours, or is one ours hands on and fails without a real communicator).

    python3 bench/device/nccl_clients.py [--clients nccl_tests,torch,jax] [--processes 2,3,4] --out DIR
                                         [--budget SECONDS] [--full-at 2] [--dry-run]

Run from the repository root after the build (bench/device/recipes.sh build). Needs the carried sources and wheels:
.devcache/nccl-tests (NVIDIA/nccl-tests), .devcache/jax-multiprocess (jax-ml/jax's tests/multiprocess), and
.whl/mpich-*.whl (MPI for nccl-tests: several ranks on one GPU need it), .whl/portpicker-*.whl (JAX's launcher picks
free ports with it, else fixed ones).

Writes DIR/nccl-clients-CLIENT.json, a list of records, one per process count:
    {machine, gpus, date, commit, client, processes, cases: [{name, status, passed, failed, forwarded, timed_out,
     seconds, detail, ...}], passed, failed, forwarded, timed_out, skipped, not_run, seconds}
and DIR/nccl-clients-log.txt (the output's tail of every case that did not pass). A case's passed / failed count its
checks (nccl-tests: result cells, out-of-place and in-place per row, with 0 / some "#wrong"; torch: one per size and
rank; jax: tests of the file, the worst process); its status is timed_out, failed, passed, skipped or not_run; a
record's passed / failed / timed_out / skipped / not_run count its cases by status. "forwarded" is the calls our
library handed to NVIDIA's NCCL (jax_mscclpp_nccl_call_counts(), algorithm "nccl"), summed over the case's
processes; null where no process reported counts (our library not loaded, or every process killed). Counts come,
for nccl-tests, from a helper preloaded into each rank that writes them at exit (our library has no exit hook of its
own); for JAX, from a sitecustomize on the processes' PYTHONPATH that writes them at interpreter exit; the torch
worker reads them itself per case.

Every process runs under a timeout (its whole process session is killed), so a hang is a recorded "timed out".
--budget bounds the whole run: the stages (client x process count) get shares of it, a case does not start after
its stage's share is spent (recorded as not_run), and no process outlives the budget. Every environment built here
keeps NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, JAX_MSCCLPP_NVLS unset).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ("nccl_tests", "torch", "jax")
# Order of the stages within one process count: the nccl-tests build (started first, in the background) has the
# other clients' time to finish.
STAGE_ORDER = ("torch", "jax", "nccl_tests")
# Relative share of the budget of one stage of each client; a stage that runs everything (--full-at) weighs twice.
STAGE_WEIGHT = {"torch": 0.8, "jax": 1.4, "nccl_tests": 1.0}

# --- nccl-tests
NCCL_TESTS_BINARIES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "alltoallv", "broadcast", "reduce",
                       "gather", "scatter", "sendrecv", "hypercube")
SWEEP = ("-b", "8", "-e", "8M", "-f", "4")
SHORT_SWEEP = ("-b", "8", "-e", "64K", "-f", "32")  # 8 B, 256 B, 8 KiB: for the runs over every dtype and op
CHECKED = ("-c", "1", "-n", "3", "-w", "1")
NCCL_TESTS_TIMEOUT_S = 60
# nccl-tests' own limit on a collective (its -T): below the process timeout, so that it reports the stuck call.
NCCL_TESTS_OWN_TIMEOUT_S = "50"
# A result row: size, count, type, reduction (blank for tests without one: hypercube), root, then the cells.
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(?:([A-Za-z_]\S*)\s+)?(-?\d+)\s+(\S.*)$")
FAILURE_MARKS = ("Test NCCL failure", "Test CUDA failure", "Test failure", "invalid type ", "invalid op ",
                 "invalid option", "BAD TERMINATION", "Invalid number of GPUs", "Aborted", "Segmentation fault")

# --- JAX's multi-process tests: the files that run on GPUs (not TPU-only, not colocated Python), core ones first;
# the process counts that do not run everything take the first JAX_CORE_SHORT of them.
JAX_CORE_FILES = ("all_reduce_test.py", "all_to_all_test.py", "all_gather_test.py", "pmap_test.py",
                  "axis_index_test.py")
JAX_CORE_SHORT = 3
JAX_MORE_FILES = ("device_id_test.py", "pjit_test.py", "multihost_utils_test.py", "array_test.py",
                  "host_callback_test.py", "socket_transfer_test.py", "thread_guard_test.py", "pgle_test.py",
                  "key_value_store_test.py", "wait_barrier_test.py")
JAX_MODES = ("preload", "switch")  # LD_PRELOAD of ours; JAX_MSCCLPP_NCCL=1 alone
JAX_FILE_TIMEOUT_S = 120
PROCESS_SUMMARY = re.compile(r"^Process (\d+), ret: (-?\d+), len\(stdout\): \d+, len\(stderr\): \d+; (.*)$")
RAN = re.compile(r"Ran (\d+) tests? in [\d.]+s; (OK|FAILED)(?: \((.*)\))?")

TORCH_CASE_TIMEOUT_S = 40
TORCH_LAUNCHES = 4  # a launch ends at a hung or fatal case; the cases after it run in the next launch
WORKER = Path(__file__).with_name("_torch_nccl_worker.py")


def installed_library() -> Path:
    """Our libnccl.so.2 as the installed package finds it (an editable install keeps it in site-packages, not in the
    source tree): jax_mscclpp.nccl_backend.library_path(), asked in a child so that this process imports no JAX."""
    code = "from jax_mscclpp import nccl_backend; print(nccl_backend.library_path())"
    try:
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        return Path(found.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, IndexError):
        return ROOT / "jax_mscclpp" / "lib" / "libnccl.so.2"

# Writes our library's call counts at exit, preloaded into each rank of a program that is not Python. Linked
# against libnccl.so.2 (ours first on the loader's path; --no-as-needed keeps the dependency although the reference
# is weak), so this destructor runs before that library's own; the counts are read on a thread of its own because
# the exiting thread's thread_local result buffer (jax_mscclpp_nccl_call_counts) is already destroyed then. Writes
# nothing where the libnccl.so.2 loaded is not ours (the weak reference stays null) or the program ends without
# exit() (_exit, a signal).
COUNTS_AT_EXIT_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
extern const char* jax_mscclpp_nccl_call_counts(void) __attribute__((weak));
static void* write_counts(void* unused) {
  (void)unused;
  const char* dir = getenv("NCCL_CLIENTS_COUNTS_DIR");
  if (dir == NULL || jax_mscclpp_nccl_call_counts == NULL) return NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/%d.counts", dir, (int)getpid());
  FILE* file = fopen(path, "w");
  if (file == NULL) return NULL;
  const char* counts = jax_mscclpp_nccl_call_counts();
  fprintf(file, "pid %d\n%s", (int)getpid(), counts != NULL ? counts : "");
  fclose(file);
  return NULL;
}
__attribute__((destructor)) static void counts_at_exit(void) {
  pthread_t thread;
  if (pthread_create(&thread, NULL, write_counts, NULL) == 0) pthread_join(thread, NULL);
}
"""

# The same for Python processes, as a sitecustomize on their PYTHONPATH; it then runs the one it shadows.
COUNTS_SITECUSTOMIZE = '''"""Writes jax_mscclpp's call counts of this process at interpreter exit
(bench/device/nccl_clients.py)."""
import atexit
import os


def _write_counts():
    import ctypes
    path, directory = os.environ.get("NCCL_CLIENTS_LIBRARY"), os.environ.get("NCCL_CLIENTS_COUNTS_DIR")
    if not path or not directory:
        return
    try:
        function = ctypes.CDLL(path, mode=os.RTLD_NOLOAD).jax_mscclpp_nccl_call_counts
    except (OSError, AttributeError):  # not loaded, or not ours
        return
    function.restype = ctypes.c_char_p
    with open(os.path.join(directory, f"{os.getpid()}.counts"), "w") as out:
        out.write(f"pid {os.getpid()}\\n" + (function() or b"").decode())


atexit.register(_write_counts)


def _run_shadowed():
    import importlib.util
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_run_shadowed()
'''


# ----------------------------------------------------------------------------------------------------- records
def make_case(name: str, *, passed: int = 0, failed: int = 0, forwarded: int | None = None, timed_out: bool = False,
              seconds: float = 0.0, detail: str = "", skipped: bool = False, not_run: bool = False, **extra) -> dict:
    """One case of a record; its status follows from the counts: timed_out, failed, passed, skipped or not_run."""
    if timed_out:
        status = "timed_out"
    elif failed:
        status = "failed"
    elif passed:
        status = "passed"
    elif not_run:
        status = "not_run"
    else:
        status = "skipped"
    return {"name": name, "status": status, "passed": int(passed), "failed": int(failed), "forwarded": forwarded,
            "timed_out": bool(timed_out), "seconds": round(float(seconds), 2), "detail": detail, **extra}


def not_run_case(name: str, why: str) -> dict:
    return make_case(name, not_run=True, detail=f"not run: {why}")


def make_record(client: str, processes: int, cases: list[dict], meta: dict, seconds: float = 0.0,
                **extra) -> dict:
    statuses = [c["status"] for c in cases]
    forwarded = [c["forwarded"] for c in cases if c["forwarded"] is not None]
    return {**meta, "client": client, "processes": processes, "cases": cases,
            "passed": statuses.count("passed"), "failed": statuses.count("failed"),
            "forwarded": sum(forwarded) if forwarded else None, "timed_out": statuses.count("timed_out"),
            "skipped": statuses.count("skipped"), "not_run": statuses.count("not_run"),
            "seconds": round(seconds, 1), **extra}


def merge_counts(parts) -> dict[str, dict[str, int]]:
    merged: dict[str, dict[str, int]] = {}
    for part in parts:
        for function, per in (part or {}).items():
            for algorithm, count in per.items():
                merged.setdefault(function, {})[algorithm] = merged.get(function, {}).get(algorithm, 0) + count
    return merged


def forwarded_of(counts: dict[str, dict[str, int]]) -> int:
    return sum(per.get("nccl", 0) for per in counts.values())


def read_counts_dir(directory: str) -> tuple[int | None, dict, int]:
    """(forwarded, calls, processes that reported) from the *.counts files the exit hooks wrote."""
    files = sorted(glob.glob(os.path.join(directory, "*.counts")))
    parse_counts = load_worker().parse_counts  # the worker reads the same lines from our library in its process
    parts = []
    for path in files:
        try:
            parts.append(parse_counts(Path(path).read_text()))
        except OSError:
            pass
    if not parts:
        return None, {}, 0
    calls = merge_counts(parts)
    return forwarded_of(calls), calls, len(parts)


# ------------------------------------------------------------------------------------------------- nccl-tests
def nccl_tests_variants(processes: int, full: bool) -> list[tuple[str, str, list[str], dict]]:
    """(case name, binary, arguments after the sweep, extra environment) of one process count: every binary's
    checked sweep, then the variants (all of them where `full`, else a few)."""
    variants = [(binary, binary, [*SWEEP, *CHECKED], {}) for binary in NCCL_TESTS_BINARIES]

    def add(binary, flags, env=None, sweep=SWEEP):
        label = " ".join(flags) if flags else ""
        if env:
            label = " ".join([label, *(f"{k}={v}" for k, v in env.items())]).strip()
        variants.append((f"{binary} {label}", binary, [*sweep, *CHECKED, *flags], dict(env or {})))

    if full:
        for binary in ("all_reduce", "reduce_scatter", "reduce"):
            add(binary, ["-d", "all", "-o", "all"], sweep=SHORT_SWEEP)
        for binary in ("all_gather", "alltoall", "broadcast", "sendrecv"):
            add(binary, ["-d", "all"], sweep=SHORT_SWEEP)
        for binary in ("all_reduce", "all_gather", "sendrecv"):
            add(binary, ["-R", "1"])
        for binary in ("all_reduce", "all_gather", "reduce_scatter", "alltoall"):
            add(binary, ["-R", "2"])
        for binary in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"):
            add(binary, ["-G", "1"])
        for binary in ("all_reduce", "all_gather", "sendrecv"):
            add(binary, ["-m", "4"])
        add("all_reduce", ["-a", "3"])
        for binary in ("all_reduce", "sendrecv"):
            add(binary, ["-z", "1"])
        for binary in ("all_reduce", "all_gather"):
            add(binary, ["-u", "1"])
        add("all_reduce", ["-y", "1"])
        for binary in ("broadcast", "reduce"):
            add(binary, ["-r", "1"])
    else:
        add("all_reduce", ["-d", "all", "-o", "all"], sweep=SHORT_SWEEP)
        add("all_reduce", ["-G", "1"])
        add("all_reduce", ["-R", "2"])
        add("all_gather", ["-G", "1"])
        add("sendrecv", ["-m", "4"])
    if processes >= 3:  # two communicators at once (MPI_Comm_split by rank % 2)
        add("all_reduce", [], env={"NCCL_TESTS_SPLIT": "%2"})
    return variants


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def parse_nccl_tests_output(text: str) -> dict:
    """nccl-tests' report (src/util.cu's format): the result rows, the out-of-bounds count, the average bus
    bandwidth, and the lines that say a call or a rank failed."""
    rows, failures, wrong_ranks, errors = [], [], [], []
    out_of_bounds = out_of_bounds_ok = average_busbw = None
    concluded = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# Out of bounds values"):
            match = re.search(r":\s*(\d+)\s*(OK|FAILED)?", stripped)
            if match:
                out_of_bounds, out_of_bounds_ok = int(match.group(1)), match.group(2) != "FAILED"
        elif stripped.startswith("# Avg bus bandwidth"):
            match = re.search(r":\s*([-+\d.eE]+|nan|inf)", stripped)
            average_busbw = _number(match.group(1)) if match else None
        elif stripped.startswith("# Collective test concluded"):
            concluded = True
        elif stripped.startswith("# error:"):
            errors.append(stripped[len("# error:"):].strip())
        elif stripped.startswith("#"):
            continue
        elif re.match(r"^rank=\d+ #wrong=\d+", stripped):
            wrong_ranks.append(stripped)
        elif any(mark in line for mark in FAILURE_MARKS):
            failures.append(stripped)
        else:
            match = ROW.match(line)
            if not match:
                continue
            tokens = match.group(6).split()
            cells = []
            for i in range(0, len(tokens) - 3, 4):
                time_us, algbw, busbw, wrong = tokens[i:i + 4]
                if _number(time_us) is None:
                    break
                cells.append({"time_us": _number(time_us), "algbw": _number(algbw), "busbw": _number(busbw),
                              "wrong": None if wrong == "N/A" else _number(wrong)})
            if not cells:
                continue
            rows.append({"bytes": int(match.group(1)), "count": int(match.group(2)), "type": match.group(3),
                         "redop": match.group(4) or "", "root": int(match.group(5)),
                         "out_of_place": cells[0] if len(cells) == 2 else None, "in_place": cells[-1]})
    return {"rows": rows, "out_of_bounds": out_of_bounds, "out_of_bounds_ok": out_of_bounds_ok,
            "average_busbw": average_busbw, "concluded": concluded, "failures": failures,
            "wrong_ranks": wrong_ranks, "errors": errors}


def nccl_tests_case(name: str, output: str, returncode: int | None, timed_out: bool, seconds: float,
                    forwarded: int | None = None, calls: dict | None = None, command: str = "") -> dict:
    """One nccl-tests run as a case: a check per result cell ("#wrong" 0 passes), and one more failure where the
    run did not end well (exit status, no summary, out-of-bounds values without a wrong cell)."""
    report = parse_nccl_tests_output(output)
    passed = failed = 0
    wrong_rows = []
    for row in report["rows"]:
        for place in ("out_of_place", "in_place"):
            cell = row[place]
            if cell is None or cell["wrong"] is None:
                continue
            if cell["wrong"] == 0:
                passed += 1
            else:
                failed += 1
                wrong_rows.append(f"{row['type']}/{row['redop']} {row['bytes']} B {place}: {cell['wrong']:g} wrong")
    problems = []
    if timed_out:
        problems.append(f"timed out after {seconds:.0f} s")
    elif returncode:
        problems.append(f"exit status {returncode}")
    if not timed_out and report["out_of_bounds"] is None:
        problems.append("no summary (the run did not conclude)")
    elif report["out_of_bounds"] and not wrong_rows:
        problems.append(f"{report['out_of_bounds']} out-of-bounds values")
    if (problems and not timed_out) or report["failures"]:
        failed += 1
    parts = [f"{len(report['rows'])} rows"]
    if report["average_busbw"] is not None:
        parts.append(f"avg busbw {report['average_busbw']:g} GB/s")
    if report["out_of_bounds"] is not None:
        parts.append(f"out of bounds {report['out_of_bounds']}")
    parts += problems
    parts += wrong_rows[:10]
    if len(wrong_rows) > 10:
        parts.append(f"... {len(wrong_rows) - 10} more wrong cells")
    parts += report["failures"][:4] + report["wrong_ranks"][:4]
    parts += [f"last error: {e}" for e in report["errors"][:2]]
    ours = [line.strip() for line in output.splitlines() if "jax_mscclpp" in line][:3]
    parts += ours
    return make_case(name, passed=passed, failed=failed, forwarded=forwarded, timed_out=timed_out, seconds=seconds,
                     detail="; ".join(parts)[:3000], calls=calls or {}, command=command,
                     average_busbw=report["average_busbw"])


# --------------------------------------------------------------------------------------------------- jax files
def parse_jax_launcher_output(text: str) -> list[dict]:
    """The per-process lines of jax._src.test_multiprocess's " Summary " block: exit status, tests run, and the
    unittest verdict (failures, errors, skipped), or crashed when a process printed no "Ran N tests"."""
    processes = []
    for line in text.splitlines():
        match = PROCESS_SUMMARY.match(line.strip())
        if not match:
            continue
        entry = {"process": int(match.group(1)), "returncode": int(match.group(2)), "ran": 0, "failures": 0,
                 "errors": 0, "skipped": 0, "crashed": True, "verdict": match.group(3)}
        ran = RAN.search(match.group(3))
        if ran:
            entry["ran"], entry["crashed"] = int(ran.group(1)), False
            for part in (ran.group(3) or "").split(","):
                key, _, value = part.strip().partition("=")
                if key in ("failures", "errors", "skipped") and value.strip().isdigit():
                    entry[key] = int(value)
            if ran.group(2) == "FAILED" and not (entry["failures"] or entry["errors"]):
                entry["failures"] = 1
        processes.append(entry)
    return processes


def failing_tests(text: str) -> list[str]:
    """The "FAIL: name (...)" / "ERROR: name (...)" headers of unittest's report, in order, once each."""
    names = []
    for match in re.finditer(r"^(FAIL|ERROR): (\S+)", text, re.MULTILINE):
        entry = f"{match.group(1)} {match.group(2)}"
        if entry not in names:
            names.append(entry)
    return names


def jax_case(name: str, output: str, stderr_logs: list[str], returncode: int | None, timed_out: bool,
             seconds: float, forwarded: int | None, calls: dict | None, command: str, processes: int,
             loaded: int) -> dict:
    summaries = parse_jax_launcher_output(output)
    passed = failed = 0
    parts = []
    if summaries:
        verdicts = [s for s in summaries if not s["crashed"]]
        passed = min((s["ran"] - s["failures"] - s["errors"] - s["skipped"] for s in verdicts), default=0)
        failed = max(s["failures"] + s["errors"] for s in summaries)
        crashed = [s["process"] for s in summaries if s["crashed"] or (s["returncode"] and not
                                                                         (s["failures"] or s["errors"]))]
        if crashed:
            failed += 1
            parts.append(f"processes {crashed} ended without a test verdict")
        skipped = max(s["skipped"] for s in summaries)
        parts.append(f"ran {max(s['ran'] for s in summaries)}, skipped {skipped}")
        parts += [f"process {s['process']}: ret {s['returncode']}; {s['verdict']}" for s in summaries
                  if s["returncode"] or s["crashed"] or s["failures"] or s["errors"]]
        if len(summaries) != processes:
            parts.append(f"{len(summaries)} of {processes} processes reported")
    elif not timed_out:
        failed = 1
        parts.append(f"no summary from the launcher (exit status {returncode})")
    if timed_out:
        parts.insert(0, f"timed out after {seconds:.0f} s")
    names = []
    for log in stderr_logs:
        names += [n for n in failing_tests(log) if n not in names]
    parts += names[:12]
    ours = []
    for log in [output, *stderr_logs]:
        ours += [line.strip() for line in log.splitlines() if "jax_mscclpp" in line and line.strip() not in ours]
    parts += ours[:3]
    if loaded == 0:
        parts.append("our library was loaded in no process (no counts written)")
    return make_case(name, passed=max(passed, 0), failed=failed, forwarded=forwarded, timed_out=timed_out,
                     seconds=seconds, detail="; ".join(parts)[:3000], calls=calls or {}, command=command)


# ------------------------------------------------------------------------------------------------------- torch
def load_worker():
    spec = importlib.util.spec_from_file_location("_torch_nccl_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_worker_lines(text: str) -> tuple[list[dict], bool]:
    """The worker's CASE records in one rank's output, and whether it printed READY (its process group started)."""
    records, ready = [], False
    for line in text.splitlines():
        if line.startswith("READY "):
            ready = True
        elif line.startswith("CASE "):
            try:
                records.append(json.loads(line[5:]))
            except json.JSONDecodeError:
                pass
    return records, ready


def merge_rank_records(name: str, ranks: list[dict]) -> dict:
    """One torch case from every rank's record of it: checks summed, the slowest rank's time, details by rank."""
    forwarded = [r.get("forwarded") for r in ranks if r.get("forwarded") is not None]
    details = []
    for r in sorted(ranks, key=lambda r: r.get("rank", 0)):
        text = r.get("detail") or ""
        if text and not any(text == d.split(": ", 1)[-1] for d in details):
            details.append(f"rank {r.get('rank')}: {text}")
    skipped = bool(ranks) and all(r.get("skipped") for r in ranks)
    return make_case(name, passed=sum(r.get("passed", 0) for r in ranks),
                     failed=sum(r.get("failed", 0) for r in ranks),
                     forwarded=sum(forwarded) if forwarded else None,
                     timed_out=any(r.get("timed_out") for r in ranks),
                     seconds=max((r.get("seconds") or 0) for r in ranks) if ranks else 0.0,
                     detail="; ".join(details)[:3000], skipped=skipped,
                     calls=merge_counts(r.get("calls") for r in ranks))


def settle_launch(names: list[str], outputs: list[str], returncodes: list[int | None],
                  launch_timed_out: bool) -> tuple[dict[str, dict], list[str], str | None]:
    """After one launch of the ranks over `names`: the cases settled ({name: case}), the names still to run, and
    the case that ended the launch early (None when every case ran). The first case not reported by every rank is
    that one: timed out where a rank said so or the launch ran out of time, else failed with the ranks' exit
    statuses. Where the process group never started, that first case fails with why and nothing is left to run."""
    per_rank = [parse_worker_lines(text) for text in outputs]
    world = len(outputs)
    by_case: dict[str, list[dict]] = {}
    for records, _ in per_rank:
        for record in records:
            by_case.setdefault(record["case"], []).append(record)
    done: dict[str, dict] = {}
    statuses = ", ".join(f"rank {r}: {code}" for r, code in enumerate(returncodes))
    for index, name in enumerate(names):
        records = by_case.get(name, [])
        if len(records) == world and not any(r.get("timed_out") for r in records):
            done[name] = merge_rank_records(name, records)
            continue
        ready = [r for r, (_, is_ready) in enumerate(per_rank) if is_ready]
        if index == 0 and len(ready) < world:
            tails = " | ".join(tail_lines(text, 6) for text in outputs)
            done[name] = make_case(name, failed=1, timed_out="init_process_group" in by_case or launch_timed_out,
                                   detail=(f"the process group did not start (READY from ranks {ready}; exit "
                                           f"{statuses}): {tails}")[:3000])
            return done, [], name
        timed_out = launch_timed_out or any(r.get("timed_out") for r in records)
        reported = sorted(r.get("rank") for r in records if not r.get("timed_out"))
        detail = (f"ranks {reported} finished it, the launch ended here (exit {statuses})"
                  + (f"; {merge_rank_records(name, records)['detail']}" if records else "")
                  + "; " + " | ".join(tail_lines(text, 4) for text in outputs))
        done[name] = make_case(name, passed=sum(r.get("passed", 0) for r in records),
                               failed=0 if timed_out else max(1, sum(r.get("failed", 0) for r in records)),
                               timed_out=timed_out, seconds=max([r.get("seconds") or 0 for r in records] or [0]),
                               detail=detail[:3000])
        return done, names[index + 1:], name
    return done, [], None


def tail_lines(text: str, count: int) -> str:
    """The last `count` lines that are not XLA's, NCCL's or torch's logging."""
    kept = [line for line in text.splitlines() if line.strip() and not line.startswith(("E1", "W1", "I1"))
            and not line.startswith("CASE ")]
    return " / ".join(kept[-count:])


# ---------------------------------------------------------------------------------------------------- processes
def kill_session(session: int) -> None:
    """SIGKILL every process of `session` (one this tool started with start_new_session: its leader's pid)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == session:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def run_bounded(command: list[str], env: dict, timeout: float, cwd: str | Path | None = None,
                log: str | Path | None = None) -> tuple[int | None, str, bool, float]:
    """Runs `command` in a session of its own; on timeout kills the whole session. (exit status or None, output,
    timed out, seconds)."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+", errors="replace") as sink:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        timed_out = False
        try:
            returncode = process.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out, returncode = True, None
        kill_session(process.pid)  # also what the command left running
        if timed_out:
            process.wait()
        sink.seek(0)
        output = sink.read()
    if log is not None:
        Path(log).write_text(output)
    return returncode, output, timed_out, time.monotonic() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------------------------- context
class Budget:
    """Shares of --budget per stage: stage i may start cases until its cumulative share has passed; no process
    outlives the whole budget."""

    def __init__(self, seconds: float, weights: list[float]):
        self.started = time.monotonic()
        self.seconds = seconds
        total = sum(weights) or 1.0
        self.ends, acc = [], 0.0
        for w in weights:
            acc += w
            self.ends.append(self.started + seconds * acc / total)
        self.stage = 0

    def open(self) -> bool:
        return not self.seconds or time.monotonic() < self.ends[self.stage]

    def limit(self, timeout: float) -> float:
        if not self.seconds:
            return timeout
        return max(1.0, min(timeout, self.started + self.seconds - time.monotonic()))


def machine() -> tuple[str | None, int]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None, 0
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return (names[0] if names else None), len(names)


def commit_of(given: str | None) -> str:
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def nvidia_nccl_dir() -> Path | None:
    """The nvidia-nccl wheel's nvidia/nccl folder (lib/libnccl.so.2, include/nccl.h), found without importing it."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "lib" / "libnccl.so.2").is_file():
            return Path(location)
    return None


def find_cuda(work: Path) -> tuple[Path | None, Path | None, Path | None]:
    """(CUDA_HOME, nvcc, a folder holding libcudart.so) as nccl-tests' Makefile needs them, from what nvcc itself
    says (`--dryrun`: TOP, LIBRARIES; `nvcc` on PATH may be a wrapper script). Where only a versioned libcudart.so.N
    is there, the folder is one of links made in `work`."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc")
                                    else None)
    if nvcc is None:
        return None, None, None
    try:
        said = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                              capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        said = ""
    top = re.search(r"^#\$ TOP=(.*)$", said, re.MULTILINE)
    home = Path(top.group(1).strip()).resolve() if top else Path(nvcc).resolve().parent.parent
    if (home / "bin" / "nvcc").is_file():
        nvcc = str(home / "bin" / "nvcc")
    folders = [Path(f) for f in re.findall(r'"-L([^"]+)"', said) if not f.rstrip("/").endswith("stubs")]
    folders += [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]
    for folder in folders:
        if (folder / "libcudart.so").exists():
            return home, Path(nvcc), folder.resolve()
    for folder in folders:
        versioned = sorted(glob.glob(str(folder / "libcudart.so.*")))
        if versioned:
            links = work / "cuda-lib"
            links.mkdir(parents=True, exist_ok=True)
            if not (links / "libcudart.so").exists():
                (links / "libcudart.so").symlink_to(versioned[0])
            return home, Path(nvcc), links
    return home, Path(nvcc), None


class Context:
    """Paths and the base environment of one run; `plan` collects the commands (printed by --dry-run)."""

    def __init__(self, args):
        self.args = args
        self.work = Path(args.work).resolve()
        self.ours = Path(args.library).resolve() if args.library else installed_library()
        nccl_dir = Path(args.real_nccl).resolve().parent.parent if args.real_nccl else nvidia_nccl_dir()
        self.real = Path(args.real_nccl) if args.real_nccl else (nccl_dir / "lib" / "libnccl.so.2" if nccl_dir
                                                                  else None)
        self.nccl_include = nccl_dir / "include" if nccl_dir else None  # the wheel's, beside its lib/
        self.python = sys.executable
        self.dry_run = args.dry_run
        env = dict(os.environ)
        env.pop("JAX_MSCCLPP_NVLS", None)
        env.pop("JAX_MSCCLPP_NCCL", None)
        env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                   XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1",
                   NCCL_CLIENTS_LIBRARY=str(self.ours))
        if self.real:
            env["JAX_MSCCLPP_REAL_NCCL"] = str(self.real)
        env["LD_PRELOAD"] = " ".join(p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
                                     if Path(p).name != "libnccl.so.2")
        if not env["LD_PRELOAD"]:
            env.pop("LD_PRELOAD")
        self.env = env
        self.site = self.work / "site"  # portpicker (pip --target)
        self.hooks = self.work / "hooks"  # the counting sitecustomize

    def show(self, command: list[str], env_delta: dict, cwd=None) -> None:
        line = " ".join([*(f"{k}={shlex.quote(str(v))}" for k, v in env_delta.items()), shlex.join(command)])
        print(f"  (cd {cwd} && {line})" if cwd else f"  {line}", flush=True)

    def with_env(self, delta: dict) -> dict:
        env = dict(self.env)
        for key, value in delta.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env


# ------------------------------------------------------------------------------------------------ preparation
def prepare_python_side(ctx: Context) -> str:
    """portpicker into work/site (if carried) and the counting sitecustomize into work/hooks; notes."""
    notes = []
    ctx.hooks.mkdir(parents=True, exist_ok=True)
    (ctx.hooks / "sitecustomize.py").write_text(COUNTS_SITECUSTOMIZE)
    wheels = sorted(glob.glob(str(ROOT / ".whl" / "portpicker-*.whl")))
    if wheels:
        ctx.site.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[-1]) as wheel:  # a pure-Python wheel: unpacking it is installing it
            wheel.extractall(ctx.site)
    else:
        notes.append("no portpicker wheel: JAX's launcher uses fixed ports")
    return "; ".join(notes)


def prepare_mpich(ctx: Context) -> Path:
    """The mpich wheel unpacked (pip --target drops its lib/ folder, the prefix's, beside site-packages' parent):
    the prefix holding bin/mpiexec, include/mpi.h, lib/libmpi.so."""
    wheels = sorted(glob.glob(str(ROOT / ".whl" / "mpich-*.whl")))
    if not wheels:
        raise FileNotFoundError("no .whl/mpich-*.whl (carry .whl)")
    target = ctx.work / "mpich"
    if not target.exists():
        with zipfile.ZipFile(wheels[-1]) as wheel:
            wheel.extractall(target)
    prefixes = glob.glob(str(target / "mpich-*.data" / "data"))
    if not prefixes:
        raise FileNotFoundError(f"{wheels[-1]} has no mpich-*.data/data prefix")
    prefix = Path(prefixes[0])
    for program in (prefix / "bin").iterdir():
        program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return prefix


def nccl_home(ctx: Context) -> Path:
    """include/ = the nvidia-nccl wheel's headers; lib/libnccl.so{,.2} = ours (the wheel has no libnccl.so)."""
    home = ctx.work / "nccl-home"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    include = home / "include"
    if not include.exists():
        include.symlink_to(ctx.nccl_include)
    for name in ("libnccl.so", "libnccl.so.2"):
        link = home / "lib" / name
        if not link.exists():
            link.symlink_to(ctx.ours)
    return home


def build_nccl_tests(ctx: Context, budget: Budget) -> dict:
    """nccl-tests with MPI, for sm_90 only, against the wheel's nccl.h and ours; and the counting preload.
    {"bin": folder, "mpich": prefix, "cudart": folder, "counts_preload": path or None, "error": text or None}."""
    started = time.monotonic()
    result = {"bin": None, "mpich": None, "cudart": None, "counts_preload": None, "error": None, "notes": []}
    try:
        source = Path(ctx.args.nccl_tests_src).resolve()
        if not (source / "src" / "common.cu").is_file():
            raise FileNotFoundError(f"{source} holds no nccl-tests (carry .devcache)")
        if ctx.nccl_include is None or not (ctx.nccl_include / "nccl.h").is_file():
            raise FileNotFoundError("the nvidia-nccl wheel's include/nccl.h is not installed")
        if not ctx.ours.is_file():
            raise FileNotFoundError(f"{ctx.ours} is not built")
        prefix = prepare_mpich(ctx)
        result["mpich"] = str(prefix)
        home = nccl_home(ctx)
        cuda_home, nvcc, cudart = find_cuda(ctx.work)
        if nvcc is None:
            raise FileNotFoundError("no nvcc")
        result["cudart"] = str(cudart) if cudart else None
        tree = ctx.work / "nccl-tests"
        if not tree.exists():
            shutil.copytree(source, tree, symlinks=True)
        build_dir = ctx.work / "nccl-tests-build"
        make = ["make", "-j16", "MPI=1", f"MPI_HOME={prefix}", f"NCCL_HOME={home}", f"CUDA_HOME={cuda_home}",
                f"NVCC={nvcc}", "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90", f"BUILDDIR={build_dir}"]
        if cudart:
            make.append(f"CUDA_LIB={cudart}")
        code, output, timed_out, seconds = run_bounded(make, ctx.env, budget.limit(ctx.args.build_timeout),
                                                       cwd=tree, log=ctx.work / "nccl-tests-build.log")
        missing = [b for b in NCCL_TESTS_BINARIES if not (build_dir / f"{b}_perf").is_file()]
        if code != 0 or missing:
            raise RuntimeError(f"make {'timed out' if timed_out else f'exit {code}'}, missing {missing}: "
                               f"{tail_lines(output, 12)}")
        result["bin"] = str(build_dir)
        preload = ctx.work / "libnccl_clients_counts.so"
        (ctx.work / "counts_at_exit.c").write_text(COUNTS_AT_EXIT_C)
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc:
            code, output, _, _ = run_bounded([cc, "-shared", "-fPIC", "-O2", "-o", str(preload),
                                              str(ctx.work / "counts_at_exit.c"), f"-L{home / 'lib'}",
                                              "-Wl,--no-as-needed", "-l:libnccl.so.2", "-pthread"], ctx.env, 60)
            if code == 0:
                result["counts_preload"] = str(preload)
            else:
                result["notes"].append(f"the counting preload did not build: {tail_lines(output, 3)}")
        else:
            result["notes"].append("no C compiler for the counting preload: forwarded is null")
    except (OSError, RuntimeError) as error:
        result["error"] = str(error)[:3000]
    result["seconds"] = round(time.monotonic() - started, 1)
    print(f"== {time.strftime('%T')} nccl-tests build: {result['error'] or 'ok'} ({result['seconds']} s)",
          flush=True)
    return result


# ------------------------------------------------------------------------------------------------------ stages
def nccl_tests_command(ctx: Context, build: dict, processes: int, binary: str, args: list[str]) -> list[str]:
    mpiexec = os.path.join(build.get("mpich") or "MPICH_PREFIX", "bin", "mpiexec")
    command = [mpiexec, "-launcher", "fork", "-n", str(processes)]
    if build.get("counts_preload"):
        command += ["-genv", "LD_PRELOAD", build["counts_preload"]]
    command += [os.path.join(build.get("bin") or "NCCL_TESTS_BUILD", f"{binary}_perf"), *args,
                "-T", NCCL_TESTS_OWN_TIMEOUT_S]
    return command


def nccl_tests_env(ctx: Context, build: dict, extra: dict, counts_dir: str) -> dict:
    library_path = [str(ctx.ours.parent), os.path.join(build.get("mpich") or "MPICH_PREFIX", "lib")]
    if build.get("cudart"):
        library_path.append(build["cudart"])
    if ctx.env.get("LD_LIBRARY_PATH"):
        library_path.append(ctx.env["LD_LIBRARY_PATH"])
    return {"LD_LIBRARY_PATH": ":".join(library_path), "NCCL_TESTS_DEVICE": "0", "NCCL_CLIENTS_COUNTS_DIR": counts_dir,
            "JAX_MSCCLPP_TIMEOUT_S": "30", **extra}


def stage_nccl_tests(ctx: Context, processes: int, budget: Budget, build_future, log) -> list[dict]:
    full = processes in ctx.args.full_at
    variants = nccl_tests_variants(processes, full)
    if ctx.dry_run:
        build = {}
        for name, binary, args, extra in variants:
            ctx.show(nccl_tests_command(ctx, build, processes, binary, args),
                     nccl_tests_env(ctx, build, extra, "COUNTS_DIR"))
        return []
    try:
        build = build_future.result(timeout=budget.limit(ctx.args.build_timeout + 60))
    except concurrent.futures.TimeoutError:
        build = {"error": "the build did not finish within the budget"}
    if build["error"]:
        return [make_case("build", failed=1, detail=f"nccl-tests did not build: {build['error']}")] + [
            not_run_case(name, "nccl-tests did not build") for name, *_ in variants]
    def run(variant):
        name, binary, args, extra = variant
        if not budget.open():
            return not_run_case(name, "this stage's share of --budget was spent")
        counts_dir = tempfile.mkdtemp(prefix="counts-", dir=ctx.work)
        command = nccl_tests_command(ctx, build, processes, binary, args)
        code, output, timed_out, seconds = run_bounded(
            command, ctx.with_env(nccl_tests_env(ctx, build, extra, counts_dir)),
            budget.limit(ctx.args.run_timeout))
        forwarded, calls, reported = read_counts_dir(counts_dir)
        case = nccl_tests_case(name, output, code, timed_out, seconds, forwarded, calls,
                               command=" ".join([*(f"{k}={v}" for k, v in extra.items()), *command]))
        if not build["counts_preload"]:
            case["detail"] += "; forwarded unknown: " + "; ".join(build["notes"])
        elif reported < processes:
            case["detail"] += f"; counts from {reported} of {processes} ranks"
        log(f"nccl_tests {processes}proc", case, output)
        return case

    return in_order(variants, ctx.args.nccl_tests_jobs, run)


def torch_env(ctx: Context, processes: int, rank: int, port: int) -> dict:
    preload = " ".join([str(ctx.ours), *ctx.env.get("LD_PRELOAD", "").split()])
    return {"LD_PRELOAD": preload, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": rank,
            "WORLD_SIZE": processes, "LOCAL_RANK": rank, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "JAX_MSCCLPP_TIMEOUT_S": "30"}


def stage_torch(ctx: Context, processes: int, budget: Budget, log) -> list[dict]:
    quick = processes not in ctx.args.full_at
    names = load_worker().case_names(processes, quick)
    timeout = str(ctx.args.case_timeout)
    if ctx.dry_run:
        for rank in range(processes):
            ctx.show([ctx.python, str(WORKER), "--case-timeout", timeout, *(["--quick"] if quick else [])],
                     torch_env(ctx, processes, rank, "PORT"))
        print(f"  ({len(names)} cases: {', '.join(names[:6])}, ...)")
        return []
    results: dict[str, dict] = {}
    remaining = list(names)
    for launch in range(TORCH_LAUNCHES):
        if not remaining or not budget.open():
            break
        port = free_port()
        logs = [ctx.work / f"torch-{processes}proc-launch{launch}-rank{r}.log" for r in range(processes)]
        command = [ctx.python, str(WORKER), "--case-timeout", timeout, "--cases", ",".join(remaining)]
        limit = budget.limit(90 + 2.0 * len(remaining) + ctx.args.case_timeout)
        with concurrent.futures.ThreadPoolExecutor(processes) as pool:
            futures = [pool.submit(run_bounded, command, ctx.with_env(torch_env(ctx, processes, r, port)), limit,
                                   None, logs[r]) for r in range(processes)]
            ran = [f.result() for f in futures]
        outputs = [r[1] for r in ran]
        done, remaining, ended_by = settle_launch(remaining, outputs, [r[0] for r in ran], any(r[2] for r in ran))
        results.update(done)
        if ended_by is not None:
            log(f"torch {processes}proc launch {launch}", done[ended_by],
                "\n".join(f"--- rank {r}\n{text[-6000:]}" for r, text in enumerate(outputs)))
    why = ("this stage's share of --budget was spent" if not budget.open() else
           f"not reached: each of {TORCH_LAUNCHES} launches ended at a hung or failed case")
    cases = [results.get(name) or not_run_case(name, why) for name in names]
    for case in cases:
        if case["status"] in ("failed", "timed_out"):
            log(f"torch {processes}proc", case, "")
    return cases


def jax_plan(full: bool, files_arg: list[str] | None, modes: list[str]) -> list[tuple[str, str]]:
    """(file, mode) in the order they run: the core files in the first mode, the first core file in the other
    modes (the same library, reached another way), then, where `full`, the other files."""
    if files_arg:
        return [(f, m) for m in modes for f in files_arg]
    core = JAX_CORE_FILES if full else JAX_CORE_FILES[:JAX_CORE_SHORT]
    plan = [(f, modes[0]) for f in core] + [(JAX_CORE_FILES[0], m) for m in modes[1:]]
    if full:
        plan += [(f, modes[0]) for f in JAX_MORE_FILES]
    return plan


def jax_env(ctx: Context, mode: str, out_dir: str, counts_dir: str) -> dict:
    python_path = [str(ctx.hooks)]
    if ctx.site.exists() or ctx.dry_run:
        python_path.append(str(ctx.site))
    if ctx.env.get("PYTHONPATH"):
        python_path.append(ctx.env["PYTHONPATH"])
    env = {"CUDA_VISIBLE_DEVICES": "0", "TEST_UNDECLARED_OUTPUTS_DIR": out_dir, "NCCL_CLIENTS_COUNTS_DIR": counts_dir,
           "PYTHONPATH": ":".join(python_path), "JAX_MSCCLPP_TIMEOUT_S": "60"}
    if mode == "preload":
        env["LD_PRELOAD"] = " ".join([str(ctx.ours), *ctx.env.get("LD_PRELOAD", "").split()])
    else:
        env["JAX_MSCCLPP_NCCL"] = "1"
    return env


def in_order(items: list, jobs: int, run) -> list:
    """run(item) for every item, `jobs` at a time, results in the items' order."""
    if jobs <= 1:
        return [run(item) for item in items]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(run, items))


def stage_jax(ctx: Context, processes: int, budget: Budget, log) -> list[dict]:
    full = processes in ctx.args.full_at
    tests = Path(ctx.args.jax_tests).resolve()
    plan = jax_plan(full, ctx.args.jax_files, ctx.args.jax_modes)
    # Without portpicker the launcher takes fixed ports: then one file at a time.
    jobs = ctx.args.jax_jobs if (ctx.site / "portpicker.py").exists() else 1

    def command_of(file):
        return [ctx.python, file, f"--num_processes={processes}", "--initialization_timeout=30"]

    def name_of(file, mode):
        return f"{file} [{'LD_PRELOAD' if mode == 'preload' else 'JAX_MSCCLPP_NCCL=1'}]"

    if ctx.dry_run:
        for file, mode in plan:
            ctx.show(command_of(file), jax_env(ctx, mode, "OUT_DIR", "COUNTS_DIR"), cwd=tests)
        return []

    def run(item):
        file, mode = item
        name, command = name_of(file, mode), command_of(file)
        if not (tests / file).is_file():
            return not_run_case(name, f"{tests / file} is absent (carry .devcache)")
        if not budget.open():
            return not_run_case(name, "this stage's share of --budget was spent")
        out_dir = tempfile.mkdtemp(prefix="jax-out-", dir=ctx.work)
        counts_dir = tempfile.mkdtemp(prefix="counts-", dir=ctx.work)
        code, output, timed_out, seconds = run_bounded(command, ctx.with_env(jax_env(ctx, mode, out_dir, counts_dir)),
                                                       budget.limit(ctx.args.file_timeout), cwd=tests)
        logs = []
        for path in sorted(glob.glob(os.path.join(out_dir, "jax_*_std*.log"))):
            try:
                logs.append(Path(path).read_text(errors="replace"))
            except OSError:
                pass
        forwarded, calls, loaded = read_counts_dir(counts_dir)
        shown = {k: v for k, v in jax_env(ctx, mode, "", "").items() if k in ("LD_PRELOAD", "JAX_MSCCLPP_NCCL")}
        case = jax_case(name, output, logs, code, timed_out, seconds, forwarded, calls,
                        " ".join([*(f"{k}={v}" for k, v in shown.items()), *command]), processes, loaded)
        log(f"jax {processes}proc", case, "\n".join([output[-4000:], *(text[-4000:] for text in logs)]))
        return case

    return in_order(plan, jobs, run)


# -------------------------------------------------------------------------------------------------------- main
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset of " + ",".join(CLIENTS))
    parser.add_argument("--processes", default="2,3,4", help="comma-separated process counts (default 2,3,4)")
    parser.add_argument("--out", help="folder for the records (required unless --dry-run)")
    parser.add_argument("--commit", help="the commit to record (default: git rev-parse HEAD)")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="seconds for the whole run, shared among the stages (default: unbounded)")
    parser.add_argument("--full-at", default="2",
                        help="process counts that run every variant / dtype (the others run a core subset)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "nccl-clients"),
                        help="scratch folder (builds, logs)")
    parser.add_argument("--library", help="our libnccl.so.2 (default jax_mscclpp/lib/libnccl.so.2)")
    parser.add_argument("--real-nccl", help="NVIDIA's libnccl.so.2 (default: the nvidia-nccl wheel's)")
    parser.add_argument("--nccl-tests-src", default=str(ROOT / ".devcache" / "nccl-tests"))
    parser.add_argument("--jax-tests", default=str(ROOT / ".devcache" / "jax-multiprocess"))
    parser.add_argument("--jax-files", help="comma-separated test files (default: the GPU ones, core first)")
    parser.add_argument("--jax-modes", default=",".join(JAX_MODES),
                        help="preload (LD_PRELOAD of ours), switch (JAX_MSCCLPP_NCCL=1 alone)")
    parser.add_argument("--jax-jobs", type=int, default=1, help="JAX test files run at once (needs portpicker)")
    parser.add_argument("--nccl-tests-jobs", type=int, default=1, help="nccl-tests runs at once")
    parser.add_argument("--run-timeout", type=float, default=NCCL_TESTS_TIMEOUT_S, help="per nccl-tests run")
    parser.add_argument("--case-timeout", type=float, default=TORCH_CASE_TIMEOUT_S, help="per torch case")
    parser.add_argument("--file-timeout", type=float, default=JAX_FILE_TIMEOUT_S, help="per JAX test file")
    parser.add_argument("--build-timeout", type=float, default=300.0, help="for building nccl-tests")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    args.clients = [c for c in args.clients.split(",") if c]
    unknown = [c for c in args.clients if c not in CLIENTS]
    if unknown:
        parser.error(f"unknown clients {unknown}; choose from {','.join(CLIENTS)}")
    args.processes = [int(p) for p in args.processes.split(",") if p]
    if any(p < 2 for p in args.processes):
        parser.error("--processes: at least 2 processes each")
    args.full_at = {int(p) for p in args.full_at.split(",") if p}
    args.jax_files = [f for f in (args.jax_files or "").split(",") if f] or None
    args.jax_modes = [m for m in args.jax_modes.split(",") if m]
    if any(m not in JAX_MODES for m in args.jax_modes) or not args.jax_modes:
        parser.error(f"--jax-modes: choose from {','.join(JAX_MODES)}")
    if not args.out and not args.dry_run:
        parser.error("--out is required (or --dry-run)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = Context(args)
    stages = [(client, n) for n in args.processes for client in STAGE_ORDER if client in args.clients]
    budget = Budget(args.budget, [STAGE_WEIGHT[client] * (2 if n in args.full_at else 1) for client, n in stages])
    if args.dry_run:
        print(f"our library {ctx.ours}; real NCCL {ctx.real}; work {ctx.work}")
        if "nccl_tests" in args.clients:
            print("nccl-tests build: make -j16 MPI=1 MPI_HOME=<mpich wheel prefix> NCCL_HOME=<work>/nccl-home "
                  "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 (in a copy of --nccl-tests-src)")
        for client, n in stages:
            print(f"== {client} {n} processes{' (full)' if n in args.full_at else ''}")
            {"nccl_tests": lambda: stage_nccl_tests(ctx, n, budget, None, None),
             "torch": lambda: stage_torch(ctx, n, budget, None),
             "jax": lambda: stage_jax(ctx, n, budget, None)}[client]()
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx.work.mkdir(parents=True, exist_ok=True)
    name, gpus = machine()
    meta = {"machine": name, "gpus": gpus, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "commit": commit_of(args.commit)}
    notes = prepare_python_side(ctx)
    log_path = out / "nccl-clients-log.txt"
    log_path.write_text(f"# nccl_clients {' '.join(sys.argv[1:])}\n# {json.dumps(meta)}\n")

    def log(title: str, case: dict, output: str) -> None:
        if case["status"] in ("passed", "skipped", "not_run"):
            return
        with open(log_path, "a") as f:
            f.write(f"\n===== {title}: {case['name']} [{case['status']}] {case.get('command', '')}\n"
                    f"{case['detail']}\n{output[-8000:]}\n")

    build_future = None
    pool = concurrent.futures.ThreadPoolExecutor(1)
    if "nccl_tests" in args.clients:
        build_future = pool.submit(build_nccl_tests, ctx, budget)
    records: dict[str, list[dict]] = {client: [] for client in args.clients}
    started = time.monotonic()
    for index, (client, n) in enumerate(stages):
        budget.stage = index
        stage_started = time.monotonic()
        print(f"== {time.strftime('%T')} {client} {n} processes (t={stage_started - started:.0f} s)", flush=True)
        if client == "nccl_tests":
            cases = stage_nccl_tests(ctx, n, budget, build_future, log)
        elif client == "torch":
            cases = stage_torch(ctx, n, budget, log)
        else:
            cases = stage_jax(ctx, n, budget, log)
        extra = {"notes": notes} if client == "jax" and notes else {}
        if client == "nccl_tests" and build_future is not None and build_future.done():
            build = build_future.result()
            extra = {"build_seconds": build.get("seconds"), "notes": "; ".join(build.get("notes", []))}
        record = make_record(client, n, cases, meta, time.monotonic() - stage_started, **extra)
        records[client].append(record)
        (out / f"nccl-clients-{client}.json").write_text(json.dumps(records[client], indent=1))
        print(f"   {client} {n} processes: {record['passed']} passed, {record['failed']} failed, "
              f"{record['timed_out']} timed out, {record['skipped']} skipped, {record['not_run']} not run, "
              f"forwarded {record['forwarded']} ({record['seconds']:.0f} s)", flush=True)
        for case in cases:
            if case["status"] in ("failed", "timed_out"):
                print(f"     {case['status']}: {case['name']}: {case['detail'][:200]}", flush=True)
    pool.shutdown(wait=False, cancel_futures=True)
    print(f"== {time.strftime('%T')} done in {time.monotonic() - started:.0f} s; records in {out}", flush=True)
    bad = sum(r["failed"] + r["timed_out"] for rs in records.values() for r in rs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
