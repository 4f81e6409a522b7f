"""``python -m jax_mscclpp.tools.bench.kernel_record``: the kernel speed record, a guard against kernels getting slower.

One run measures the device time per call of every algorithm of every collective (codes.def's collectives, the
permutation included) at every size, in each *setting* asked for, beside a device-to-device copy of the same bytes
timed in the same run; writes one JSON record (machine, GPU count, date, commit); and prints the change against a
previous record (``--previous PATH``, or the newest record of the same ``--name`` and machine under
``bench/results/``) and against the best time any record of the same machine in ``--best DIR`` (default
``bench/results/``; the previous record counted too) holds for each cell, flagging every kernel more than
``--threshold`` (10 %) slower than either. The collectives bench's virtual-rank records
(``kernel_record_base.COLLECTIVES_BENCH_PATTERN``) count among the records the best is taken from, as cells of
the virtual:N setting. docs/benchmarking.md, "The kernel record", says how to read it.

Settings (where the ranks run), each ``kind:N``:

- ``virtual:N``: N virtual ranks in one process on one GPU (the harness of tests/harness, which the package never
  imports): measured by ``bench/kernels/kernel_record.py``, which passes this module its source (``main(argv,
  sources=...)``); times from CUDA events around replays of a CUDA graph of calls;
- ``devices:N``: one process, the first N JAX devices (GPUs; on CPU the host devices, where the collectives run on
  the host reference backend and times are host timings);
- ``processes:P``: P processes under ``jax.distributed`` on this host (``launcher``), one device each (on a machine
  of one GPU they share it, and their contexts time-slice). GPUs only.

The JAX settings time K calls chained in one jitted program (``programs.compile_chain``) from the JAX profiler's
kernel events (``kernel_record_jax``); on CPU, where there is no device timeline, from host timing of the chain
minus the same chain with a trivial op. Every row names its ``time_source`` (``TIME_SOURCES``).

**The budget.** ``--budget S`` bounds the whole run. Before anything runs, the cells (setting x op x algorithm x
size) are planned (``kernel_record_base.plan``): in order of size priority (smallest and largest size first, then
the middles: ``size_priority``), every cell whose estimated cost still fits is kept, so a short budget thins the
sizes of every kernel rather than dropping kernels. Estimates are the previous record's measured ``cost_s`` per
cell and ``setup_s`` per setting where it has them, else each source's model. Every setting runs in its planned
share of the time left, and a cell that would pass the deadline is skipped. Skipped cells stay in the record
(``status`` "skipped: budget" / "skipped: deadline"), with a note.

**The record** (``kernel_record_base``: ``SCHEMA``; ``validate`` checks one): ``schema``, ``name``, ``date``
(UTC), ``commit`` (and ``commit_dirty``), ``machine`` (platform, device_kind, gpu_model, gpu_count, host,
versions, environment, command), ``settings`` (what was asked), ``budget`` (seconds, estimated, elapsed),
``setups`` (per setting: its setup seconds, status, notes), ``time_sources``, ``memcpy_sources``, ``notes``,
``rows`` (one per cell: ``ROW_FIELDS``), ``comparison`` (against the previous record, or null) and
``comparison_best`` (against the best of the records, ``kernel_record_base.compare_best``, or null).

**Auto.** In each virtual-rank cell the time of the algorithm ``auto`` runs there (``kernel_record_auto``) is
compared with the fastest algorithm the record timed for it; every cell more than ``--threshold`` over it is
printed as ``AUTO SLOWER``.

Exit status: 0; 1 when a kernel is flagged slower (than the previous record or the best), ``auto`` is flagged slower
than a cell's fastest algorithm, or a cell failed; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from typing import Callable, Iterable, Mapping, Sequence

from .kernel_record_base import (DEFAULT_DTYPE, DEFAULT_NAME, DEFAULT_RESULTS, DEFAULT_SIZES, DEFAULT_THRESHOLD,
                                 MEMCPY_SOURCES, OPS, RESERVE_S, SCHEMA, TIME_SOURCES, Estimates, Setting, Source,
                                 cells_of, commit_of, compare, compare_best, find_previous, find_records, first_line,
                                 format_comparison, load_record, machine_info, machine_key, new_row, plan,
                                 record_path, row_key, summary_table, write_record)
from .kernel_record_auto import compare_auto, format_auto
from .units import format_size, parse_sizes


# ---------------------------------------------------------------------------------------------------- the run
def run_record(*, settings: Sequence[Setting], sources: Mapping[str, Source], ops: Sequence[str],
               sizes: Sequence[int], dtype: str, budget_s: float, algorithms: Sequence[str] = ("all",),
               previous: Mapping | None = None, name: str = DEFAULT_NAME, commit: str | None = None,
               log: Callable[[str], None] = print, started: float | None = None) -> dict:
    """Plans and measures every setting and returns the record (without its comparison)."""
    started_wall = time.time() if started is None else started
    deadline = started_wall + max(0.0, budget_s - RESERVE_S)
    notes: list[str] = []
    runnable, setups = [], {}
    for setting in settings:
        reason = sources[setting.kind].unavailable(setting) if setting.kind in sources else (
            f"no source for {setting.kind!r} settings in this tool (virtual ranks: bench/kernels/kernel_record.py)")
        if reason:
            notes.append(f"{setting.label}: not run: {reason}")
            setups[setting.label] = {"status": f"unavailable: {reason}", "setup_s": None, "elapsed_s": 0.0,
                                     "notes": []}
        else:
            runnable.append(setting)
    cells = cells_of(runnable, sources, ops, sizes, dtype, algorithms, notes)
    estimates = Estimates(sources, previous)
    remaining = max(0.0, deadline - time.time())
    the_plan = plan(cells, remaining, estimates.cell, estimates.setup)
    if the_plan.skipped:
        notes.append(f"{len(the_plan.skipped)} of {len(cells)} cells left out by the plan: their estimates did not fit "
                     f"the budget of {budget_s:.0f} s (status 'skipped: budget')")
    log(f"# kernel record: {len(the_plan.kept)} of {len(cells)} cells planned, about {the_plan.estimated_s:.0f} s of "
        f"{remaining:.0f} s left in the budget")
    rows: list[dict] = [new_row(c, "skipped: budget", estimate_s=the_plan.estimates[c.key]) for c in the_plan.skipped]
    facts = [sources[k].describe() for k in dict.fromkeys(s.kind for s in runnable)]
    planned = {s: [c for c in the_plan.kept if c.setting == s] for s in runnable}
    cost = {s: sum(the_plan.estimates[c.key] for c in planned[s]) + (estimates.setup(s) if planned[s] else 0.0)
            for s in runnable}
    for i, setting in enumerate(runnable):
        mine = planned[setting]
        if not mine:
            setups[setting.label] = {"status": "skipped: budget", "setup_s": None, "elapsed_s": 0.0, "notes": []}
            continue
        t0 = time.time()
        # Its share of the time left, as planned: a setting that runs over its estimates leaves the later ones
        # theirs, and time a setting leaves unused goes to the later ones.
        later = sum(cost[s] for s in runnable[i:])
        mine_deadline = min(deadline, t0 + max(0.0, deadline - t0) * (cost[setting] / later if later else 1.0))
        log(f"# {setting.label}: {len(mine)} cells, about {cost[setting]:.0f} s planned, "
            f"{mine_deadline - t0:.0f} s given")
        try:
            got, info = sources[setting.kind].measure(setting, mine, mine_deadline, the_plan.estimates)
            status = info.get("status", "ok")
        except Exception as e:  # noqa: BLE001 - the setting failed; the record keeps going
            got, info, status = [], {"notes": []}, f"error: {first_line(e)}"
        elapsed = time.time() - t0
        by_key = {row_key(r): r for r in got}
        for cell in mine:
            row = by_key.get(cell.key)
            if row is None:
                row = new_row(cell, status if status.startswith("error") else "skipped: deadline")
            if row.get("estimate_s") is None:
                row["estimate_s"] = the_plan.estimates[cell.key]
            rows.append(row)
        cell_costs = sum(r["cost_s"] or 0.0 for r in got)
        setups[setting.label] = {"status": status, "setup_s": max(0.0, elapsed - cell_costs),
                                 "elapsed_s": elapsed, "notes": list(info.get("notes", ()))}
        notes.extend(f"{setting.label}: {n}" for n in info.get("notes", ()))
        if info.get("machine"):
            facts.append(info["machine"])
        done = sum(1 for c in mine if by_key.get(c.key, {}).get("status") == "ok")
        log(f"# {setting.label}: {done} of {len(mine)} cells measured in {elapsed:.0f} s ({status})")
    skipped_late = sum(1 for r in rows if r["status"] == "skipped: deadline")
    if skipped_late:
        notes.append(f"{skipped_late} planned cells skipped at the deadline (status 'skipped: deadline')")
    order = {c.key: i for i, c in enumerate(cells)}
    rows.sort(key=lambda r: order.get(row_key(r), len(order)))
    commit_id, dirty = commit_of(commit)
    used_sources = sorted({r["time_source"] for r in rows if r["time_source"]})
    return {
        "schema": SCHEMA,
        "name": name,
        "date": datetime.datetime.fromtimestamp(started_wall, datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit_id,
        "commit_dirty": dirty,
        "machine": machine_info(facts),
        "settings": {"settings": [s.label for s in settings], "ops": list(ops), "algorithms": list(algorithms),
                     "sizes": [int(s) for s in sizes], "dtype": dtype, "reduce_op": "sum"},
        "budget": {"budget_s": float(budget_s), "estimated_s": the_plan.estimated_s,
                   "elapsed_s": time.time() - started_wall, "planned": len(the_plan.kept), "cells": len(cells)},
        "setups": setups,
        "time_sources": {k: TIME_SOURCES[k] for k in used_sources},
        "memcpy_sources": {k: MEMCPY_SOURCES[k] for k in used_sources},
        "notes": list(dict.fromkeys(notes)),
        "rows": rows,
        "comparison": None,
        "comparison_best": None,
    }


# ------------------------------------------------------------------------------------------------------- CLI
def build_parser(prog: str = "python -m jax_mscclpp.tools.bench.kernel_record") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0] + " See the module docstring "
                                "and docs/benchmarking.md, 'The kernel record'.")
    p.add_argument("--virtual-ranks", type=_counts, default=None, metavar="N,...",
                   help="virtual:N settings (N ranks in one process on one GPU; bench/kernels/kernel_record.py only)")
    p.add_argument("--devices", type=_counts, default=None, metavar="N,...",
                   help="devices:N settings: one process, N JAX devices (default on CPU: 2,4,8 host devices; on "
                   "GPUs: all of them when there are two or more)")
    p.add_argument("--processes", type=_counts, default=None, metavar="P,...",
                   help="processes:P settings: P processes under jax.distributed, one device each (GPUs only; "
                   "default on GPUs: 2,4)")
    p.add_argument("--ops", type=_names, default=list(OPS), help=f"comma list of {', '.join(OPS)} (default: all)")
    p.add_argument("--algorithms", type=_names, default=["all"],
                   help="comma list of algorithm names, or all (default): every algorithm each setting runs")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"sizes, e.g. 1K,64K or 1K:256M:4 (default {DEFAULT_SIZES})")
    p.add_argument("--dtype", default=DEFAULT_DTYPE, help=f"element type (default {DEFAULT_DTYPE}); sums")
    p.add_argument("--budget", type=float, default=420.0, metavar="S",
                   help="seconds for the whole run; what does not fit is skipped and noted (default 420)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help=f"where the record goes (default {DEFAULT_RESULTS} when it exists here, else .)")
    p.add_argument("--file", default=None, metavar="PATH", help="the record's path (default: DIR/NAME-KIND-DATE.json)")
    p.add_argument("--name", default=DEFAULT_NAME, help=f"the record's name (default {DEFAULT_NAME})")
    p.add_argument("--previous", default=None, metavar="PATH|DIR|none",
                   help=f"the record to compare with, or a folder to take the newest of NAME for this machine from "
                   f"(default {DEFAULT_RESULTS}); none: no comparison with a previous record")
    p.add_argument("--best", default=None, metavar="DIR|none",
                   help=f"the folder whose records of this machine (NAME*.json, and the collectives bench's "
                   f"collectives-N-virtual-ranks-COMMIT-DATE.json) give each cell's best time, the previous record "
                   f"counted too (default {DEFAULT_RESULTS}); none: no comparison with the best")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="flag kernels slower than this fraction (default 0.10)")
    p.add_argument("--commit", default=None, help="the commit to record (default: git rev-parse HEAD here)")
    p.add_argument("--compare", default=None, metavar="RECORD",
                   help="measure nothing: compare RECORD with --previous and --best and print the change")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--child-plan", default=None, help=argparse.SUPPRESS)  # a processes:P child (kernel_record_jax)
    return p


def _counts(text: str) -> list[int]:
    values = [int(t) for t in text.split(",") if t.strip()]
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"counts must be positive: {text!r}")
    return values


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def default_settings(args, sources: Mapping[str, Source], gpu_count: int) -> list[Setting]:
    """The settings asked for; where none is given: on GPUs virtual:2,4,8 (when a virtual source is given),
    processes:2,4 and devices:N for N GPUs (when N >= 2); on CPU devices:2,4,8."""
    given = [(k, getattr(args, a)) for k, a in (("virtual", "virtual_ranks"), ("devices", "devices"),
                                                ("processes", "processes"))]
    if any(v is not None for _, v in given):
        return [Setting(k, n) for k, v in given for n in (v or ())]
    if gpu_count:
        out = [Setting("virtual", n) for n in (2, 4, 8)] if "virtual" in sources else []
        out += [Setting("devices", gpu_count)] if gpu_count >= 2 else []
        return out + [Setting("processes", p) for p in (2, 4)]
    return [Setting("devices", n) for n in (2, 4, 8)]


def _previous_doc(where: str | None, name: str, machine: tuple | None, exclude: Iterable[str] = ()) -> dict | None:
    if where is not None and where.lower() == "none":
        return None
    where = where or DEFAULT_RESULTS
    path = find_previous(where, name, machine, exclude)
    if path is None:
        return None
    try:
        doc = load_record(path)
    except (OSError, ValueError) as e:
        print(f"# note: the previous record is not used: {e}")
        return None
    doc["path"] = path
    return doc


def _best_docs(where: str | None, name: str, machine: tuple, exclude: Iterable[str],
               previous: Mapping | None) -> list[dict] | None:
    """The records the best times are taken from: ``find_records`` of ``where`` (default ``DEFAULT_RESULTS``) and
    ``previous`` where it is of ``machine`` and not among them; None for ``where`` none."""
    if where is not None and where.lower() == "none":
        return None
    notes: list[str] = []
    records = find_records(where or DEFAULT_RESULTS, name, machine, exclude, notes)
    for note in notes:
        print(f"# note: {note}")
    paths = {os.path.abspath(r["path"]) for r in records}
    if (previous is not None and machine_key(previous) == tuple(machine)
            and os.path.abspath(previous["path"]) not in paths):
        records.append(previous)
    return records


def _comparisons(new: Mapping, previous: Mapping | None, best: Sequence[Mapping] | None,
                 threshold: float) -> tuple[dict | None, dict | None]:
    """(against the previous record, against the best of ``best``): each None where there is nothing to compare
    with."""
    return (compare(new, previous, threshold) if previous is not None else None,
            compare_best(new, best, threshold) if best else None)


def _print_comparisons(name: str, against_previous: Mapping | None, against_best: Mapping | None) -> None:
    if against_previous is not None:
        print("\n".join(format_comparison(against_previous)))
    else:
        print(f"# no previous record of {name!r} for this machine to compare with")
    if against_best is not None:
        print("\n".join(format_comparison(against_best)))
    else:
        print(f"# no best times of {name!r} for this machine to compare with")


def _auto_flagged(against_auto: Mapping | None) -> bool:
    """Whether ``auto`` runs a slower algorithm than the fastest in some virtual-rank cell."""
    return against_auto is not None and bool(against_auto["slower"])


def _flagged(*comparisons: Mapping | None) -> bool:
    """Whether any of ``comparisons`` flags a kernel slower."""
    return any(c is not None and c["slower"] for c in comparisons)


def main(argv: Sequence[str] | None = None, sources: Mapping[str, Source] | None = None,
         prog: str | None = None) -> int:
    """The command line; ``sources`` adds or replaces setting kinds' sources (bench/kernels/kernel_record.py
    passes the virtual ranks')."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog or "python -m jax_mscclpp.tools.bench.kernel_record")
    args = parser.parse_args(argv)
    if args.child_plan:
        from . import kernel_record_jax

        return kernel_record_jax.child_main(args.child_plan)
    if args.compare:
        new = load_record(args.compare)
        old = _previous_doc(args.previous, new["name"], machine_key(new), exclude=[args.compare])
        best = _best_docs(args.best, new["name"], machine_key(new), [args.compare], old)
        against_previous, against_best = _comparisons(new, old, best, args.threshold)
        _print_comparisons(new["name"], against_previous, against_best)
        against_auto = compare_auto(new, args.threshold)
        print("\n".join(format_auto(against_auto)))
        print("\n".join(summary_table(new, against_previous)))
        return 1 if _flagged(against_previous, against_best) or _auto_flagged(against_auto) else 0
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as e:
        parser.error(str(e))
    for op in args.ops:
        if op not in OPS:
            parser.error(f"unknown op {op!r}; known: {', '.join(OPS)}")
    if not (args.budget > 0 and args.threshold > 0):
        parser.error("--budget and --threshold must be positive")
    import jax.numpy as jnp

    from jax_mscclpp._types import SUPPORTED_DTYPES

    try:
        if jnp.dtype(args.dtype) not in SUPPORTED_DTYPES:
            parser.error(f"dtype {args.dtype!r} is not one the collectives run on")
    except TypeError:
        parser.error(f"unknown dtype {args.dtype!r}")
    started = time.time()

    from . import kernel_record_jax, launcher, machine

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    all_sources: dict = {"devices": kernel_record_jax.DevicesSource(), "processes": kernel_record_jax.ProcessesSource()}
    all_sources.update(sources or {})
    gpu_count = launcher._cuda_device_count() or 0
    try:
        settings = default_settings(args, all_sources, gpu_count)
    except ValueError as e:
        parser.error(str(e))
    if any(s.kind == "devices" for s in settings):
        machine.ensure_host_devices(max([s.ranks for s in settings if s.kind == "devices"] + [8]))
    available = [s for s in settings if s.kind in all_sources and not all_sources[s.kind].unavailable(s)]
    facts = [all_sources[k].describe() for k in dict.fromkeys(s.kind for s in available)]
    previous = _previous_doc(args.previous, args.name, machine_key({"machine": machine_info(facts)}))
    if args.dry_run:
        notes: list[str] = []
        cells = cells_of(available, all_sources, args.ops, sizes, args.dtype, args.algorithms, notes)
        estimates = Estimates(all_sources, previous)
        the_plan = plan(cells, max(0.0, args.budget - RESERVE_S), estimates.cell, estimates.setup)
        for s in settings:
            if s not in available:
                reason = all_sources[s.kind].unavailable(s) if s.kind in all_sources else "no source"
                print(f"# {s.label}: not run here: {reason}")
        for cell in the_plan.kept:
            print(f"{cell.label:60s} {the_plan.estimates[cell.key]:7.2f} s")
        for cell in the_plan.skipped:
            print(f"{cell.label:60s} skipped: budget")
        print(f"# {len(the_plan.kept)} of {len(cells)} cells planned, about {the_plan.estimated_s:.0f} s of "
              f"{args.budget:.0f} s" + (f"; estimates from {previous['path']}" if previous else "")
              + "".join(f"\n# note: {n}" for n in notes))
        return 0

    doc = run_record(settings=settings, sources=all_sources, ops=args.ops, sizes=sizes, dtype=args.dtype,
                     budget_s=args.budget, algorithms=args.algorithms, previous=previous, name=args.name,
                     commit=args.commit, started=started)
    out_dir = args.out or (DEFAULT_RESULTS if os.path.isdir(DEFAULT_RESULTS) else ".")
    path = args.file or record_path(out_dir, args.name, doc)
    if previous is None or machine_key(previous) != machine_key(doc):
        previous = _previous_doc(args.previous, args.name, machine_key(doc), exclude=[path])
    best = _best_docs(args.best, args.name, machine_key(doc), [path], previous)
    doc["comparison"], doc["comparison_best"] = _comparisons(doc, previous, best, args.threshold)
    write_record(doc, path)

    bad = [r for r in doc["rows"] if r["status"].startswith("error")]
    counts = {}
    for r in doc["rows"]:
        counts[r["status"].split(":")[0]] = counts.get(r["status"].split(":")[0], 0) + 1
    print(f"# wrote {path}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) +
          f" in {doc['budget']['elapsed_s']:.0f} s of {args.budget:.0f}")
    for note in doc["notes"]:
        print(f"# note: {note}")
    for r in bad[:10]:
        print(f"ERROR {r['setting']} {r['op']}/{r['algorithm']} {format_size(r['size'])}: {r['status']}")
    _print_comparisons(args.name, doc["comparison"], doc["comparison_best"])
    against_auto = compare_auto(doc, args.threshold)
    print("\n".join(format_auto(against_auto)))
    print("\n".join(summary_table(doc, doc["comparison"])))
    return 1 if bad or _flagged(doc["comparison"], doc["comparison_best"]) or _auto_flagged(against_auto) else 0


if __name__ == "__main__":
    sys.exit(main())
