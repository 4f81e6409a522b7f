"""What the traffic records of this folder share (ragged_record.py, nccl_traffic_record.py): sizes as the command
lines write them, the profiler's range markers, the DRAM bytes of each profiled range under Nsight Compute, and the
machine a record names.

A range is what runs between cuProfilerStart and cuProfilerStop: one call on every rank, so that the kernels of
communicating ranks, which cannot be replayed one at a time, replay together (``ncu --replay-mode range``, else
``app-range``). Every rank shares one GPU's memory, so the traffic of all ranks is counted together, and what stays
in the L2 cache never reaches DRAM (small calls read low)."""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime
import io
import json
import os
import subprocess
import sys
import time

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def profiler(start: bool) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    result = cuda.cuProfilerStart() if start else cuda.cuProfilerStop()
    if result != 0:
        raise RuntimeError(f"cuProfiler{'Start' if start else 'Stop'} returned {result}")


def dram_bytes_per_range(text: str) -> list[float]:
    """ncu's CSV (--csv --print-units base): the sum of METRICS per profiled range, in order."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    per_range: dict[str, float] = {}
    order: list[str] = []
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        name = rec.get("Metric Name")
        if name not in METRICS:
            continue
        key = rec.get("ID") or rec.get("Range Name") or str(len(order))
        if key not in per_range:
            per_range[key] = 0.0
            order.append(key)
        per_range[key] += float(str(rec.get("Metric Value", "0")).replace(",", ""))
    return [per_range[k] for k in order]


def profile_ranges(command: list[str], expected: int, timeout: float) -> tuple[str | None, list[float], str | None]:
    """Runs ``command`` (a process that marks ``expected`` ranges) under ncu, range replay first, then application
    range replay: (the mode that gave ``expected`` values, the DRAM bytes per range, None), or (None, [], what went
    wrong)."""
    notes = []
    for mode in ("range", "app-range"):
        ncu = ["ncu", "--replay-mode", mode, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv",
               "--print-units", "base", *command]
        try:
            done = subprocess.run(ncu, text=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            notes.append(f"{mode}: no result in {timeout} s")
            continue
        values = dram_bytes_per_range(done.stdout)
        if done.returncode != 0 or len(values) != expected:
            notes.append(f"{mode}: {len(values)} ranges for {expected} (exit {done.returncode}): "
                         f"{(done.stdout + done.stderr)[-1200:]}")
            continue
        return mode, values, None
    return None, [], " | ".join(notes)


def machine() -> dict:
    """This host's facts as every bench record gives them, and the GPUs nvidia-smi lists."""
    from jax_mscclpp.tools.bench import machine as bench_machine

    try:
        listing = subprocess.run(["nvidia-smi", "-L"], text=True, capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    names = [line.split(": ", 1)[1].split(" (UUID")[0] for line in listing.splitlines() if line.startswith("GPU ")]
    return {**bench_machine.host(), "gpus": len(names), "gpu": names[0] if names else None}


def write_record(kind: str, cells: list[dict], args, started: float, mode: str | None, note: str | None,
                 **fields) -> dict:
    """The record of a run (what it measured, date, commit, machine, ``fields``, the cells, how ncu ran), written to
    ``args.out``/<kind>-<gpu>-<date>[-<commit>].json when ``args.out`` is set; ncu's failure on stderr."""
    record = {"record": fields.pop("record"), "date": datetime.date.today().isoformat(), "commit": args.commit,
              "machine": machine(), **fields, "cells": cells,
              "ncu": ({"metrics": list(METRICS), "replay_mode": mode, "note": note} if args.ncu else None),
              "seconds": round(time.time() - started, 1)}
    save_record(record, kind, args.out)
    if note:
        print(f"ncu: {note}", file=sys.stderr)
    return record


def save_record(record: dict, kind: str, out: str | None) -> None:
    """Writes ``record`` (with its date, commit and machine) to ``out``/<kind>-<gpu>-<date>[-<commit>].json, nothing
    when ``out`` is None."""
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    gpu = (record["machine"]["gpu"] or "gpu").lower().replace("nvidia ", "").replace(" ", "-")
    name = f"{kind}-{gpu}-{record['date']}{'-' + record['commit'] if record['commit'] else ''}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {os.path.join(out, name)}")


def record_parser(description: str, kind: str, ncu_timeout: float) -> argparse.ArgumentParser:
    """The command line every traffic record takes (what run_record and write_record read): --ranks, --sizes,
    --ncu, --ncu-timeout, --commit, --out and the hidden --profile-only; a record adds its own options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--ranks", default="2,4,8", type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--sizes", default="64K,16M,256M", type=lambda s: [parse_size(v) for v in s.split(",")])
    parser.add_argument("--ncu", action="store_true", help="add the DRAM bytes of one call under Nsight Compute")
    parser.add_argument("--ncu-timeout", type=float, default=ncu_timeout)
    parser.add_argument("--profile-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--out", default=None, help=f"write {kind}-<gpu>-<date>[-<commit>].json here")
    return parser


def run_record(args, run_cells, profile, kind: str, **fields) -> int:
    """A record's main: with ``--profile-only`` (the process ncu runs) only the ranges; else the cells measured,
    their DRAM bytes added under ncu where ``--ncu`` asks (``profile(args, rows)``: (mode, note)), and the record
    written (write_record)."""
    if args.profile_only:
        run_cells(args, profile_only=True)
        return 0
    started = time.time()
    rows = run_cells(args, profile_only=False)
    mode, note = profile(args, rows) if args.ncu else (None, None)
    write_record(kind, rows, args, started, mode, note, **fields)
    return 0
