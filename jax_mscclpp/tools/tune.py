"""``python -m jax_mscclpp.tools.tune``: measure every algorithm this platform runs over a size range on this
machine and write the selection file the runtime reads (``tuning_file.py``), with the margin by which each choice
won.

For each collective and size it times every algorithm (and the lax collective, unless ``--no-lax``) with the
benchmark's machinery (checked against lax first), picks the fastest, and merges runs of sizes with one winner
into a rule. The margin of a choice is how much slower the runner-up was: 0.25 = the winner was 25% faster.

By default the file goes to this topology's default path (``tuning_file.default_path``), which every later process
on this machine reads; ``--output FILE`` writes elsewhere (point ``JAX_MSCCLPP_TUNING_FILE`` at it).

``--from-record PATH`` measures nothing: it takes the times of a kernel record (``jax_mscclpp.tools.bench.
kernel_record``) for one of its JAX settings (``--setting devices:N`` or ``processes:P``; the record's only one by
default) and writes the file of the topology that setting ran on (the record's device kind, N devices or P
processes): the fastest of the algorithms the selection can name per size (and lax, where the record timed it).
"""

from __future__ import annotations

import argparse
import os
import sys

from .bench.cli import _list
from .bench.programs import OPS

USAGE = (
    "python -m jax_mscclpp.tools.tune [--ops all_reduce,...] [--sizes 1K:1G] [--dtype bfloat16] [--iters N] "
    "[--warmup N] [--chain K] [--devices N] [--mode plain|cmdbuf] [--metric device|dispatch] [--no-lax] "
    "[--output FILE] [--dry-run]\n       python -m jax_mscclpp.tools.tune --from-record PATH [--setting devices:N|processes:P] "
    "[--ops ...] [--no-lax] [--output FILE] [--dry-run]"
)
DESCRIPTION = (
    "Measures every algorithm this platform runs (and the lax collective) over a size range on this machine and "
    "writes the selection file the runtime reads before its default table (JAX_MSCCLPP_TUNING_FILE, or this "
    "topology's default file), with the margin by which each choice won."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_mscclpp.tools.tune", usage=USAGE, description=DESCRIPTION)
    p.add_argument("--ops", type=_list, default=list(OPS), help="collectives to tune (default: all)")
    p.add_argument("--sizes", default=None, help="sizes as for the benchmark (default: 1K:1G on GPU, 1K:1M on CPU)")
    p.add_argument("--dtype", default="bfloat16", help="dtype of the measurements (default: bfloat16)")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--chain", type=int, default=None)
    p.add_argument("--devices", type=int, default=None, help="use the first N devices (default: all)")
    p.add_argument("--mode", default=None, choices=("plain", "cmdbuf"),
                   help="execution mode to tune in (default: cmdbuf on GPU, as XLA runs by default; plain on CPU)")
    p.add_argument("--metric", default=None, choices=("device", "dispatch"),
                   help="compare device time per collective (chained; default on GPU) or the time of one blocking "
                   "call (default on CPU, where the chained difference drowns in noise)")
    p.add_argument("--no-lax", dest="lax", action="store_false", help="never choose the lax collective")
    p.add_argument("--output", "-o", default=None, help="file to write (default: this topology's default path)")
    p.add_argument("--dry-run", action="store_true", help="measure and print, write nothing")
    p.add_argument("--from-record", default=None, metavar="PATH",
                   help="measure nothing: take the times of this kernel record (a JAX setting of it)")
    p.add_argument("--setting", default=None,
                   help="with --from-record: the record's setting to take, devices:N or processes:P (default: its "
                   "only JAX setting)")
    return p


def winners(records, metric: str, include_lax: bool) -> dict:
    """{op: [(selection bytes, winner, margin, runner_up)]} from benchmark records."""
    import jax.numpy as jnp

    by_key: dict = {}
    for r in records:
        if r.algorithm == "auto":
            continue
        key = (r.op, r.count * jnp.dtype(r.dtype).itemsize)
        times = by_key.setdefault(key, {})
        if r.status == "ok":
            ours = r.ours_us if metric == "device" else r.ours_dispatch_us
            if ours is not None and ours > 0:
                times[r.algorithm] = ours
        lax = r.lax_us if metric == "device" else r.lax_dispatch_us
        if include_lax and lax is not None and lax > 0:
            times["lax"] = lax
    return _ranked(by_key)


def _ranked(by_key: dict) -> dict:
    """{op: [(selection bytes, winner, margin, runner_up, times)]} from {(op, selection bytes): {algorithm: us}}."""
    out: dict = {}
    for (op, nbytes), times in sorted(by_key.items()):
        if not times:
            continue
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        best, best_us = ranked[0]
        runner_up, margin = (ranked[1][0], ranked[1][1] / best_us - 1.0) if len(ranked) > 1 else (None, None)
        out.setdefault(op, []).append((nbytes, best, margin, runner_up, dict(times)))
    return out


JAX_SETTING_KINDS = ("devices", "processes")  # a kernel record's settings that are topologies a JAX program runs on


def record_setting(record: dict, setting: str | None) -> str:
    """The setting of ``record`` to tune from: ``setting`` (which it must hold, of a JAX kind), else its only JAX
    setting. ValueError naming what the record holds otherwise."""
    held = list(dict.fromkeys(row["setting"] for row in record.get("rows", ())))
    jax_settings = [s for s in held if s.split(":")[0] in JAX_SETTING_KINDS]
    if setting is None:
        if len(jax_settings) != 1:
            raise ValueError(f"the record holds the JAX settings {jax_settings or 'none'} (of {held}): name one with "
                             "--setting")
        return jax_settings[0]
    if setting not in held:
        raise ValueError(f"the record holds no setting {setting!r}; it holds {held}")
    if setting not in jax_settings:
        raise ValueError(f"{setting!r} is not a topology a JAX program runs on (virtual ranks share one process's "
                         f"GPU); tune from one of {', '.join(JAX_SETTING_KINDS)}: {jax_settings or 'none here'}")
    return setting


def record_winners(record: dict, setting: str, platform: str, include_lax: bool, ops) -> dict:
    """{op: [(selection bytes, winner, margin, runner_up, times)]} from the rows of ``setting`` in a kernel record:
    per collective of ``ops`` and size, the times of the algorithms the selection can name on ``platform`` (and lax
    when ``include_lax``); a size's selection bytes are its per-rank input (the record's size is the larger per-rank
    buffer: all_gather's output)."""
    from .. import selection
    from .._types import Collective
    from .bench import programs

    by_key: dict = {}
    for row in record["rows"]:
        if row["setting"] != setting or row["op"] not in ops or row.get("status") != "ok":
            continue
        named = selection.PLATFORM_ALGORITHMS[platform].get(Collective[row["op"].upper()], ())
        if row["algorithm"] not in named and not (include_lax and row["algorithm"] == "lax"):
            continue
        nbytes = programs.layout(row["op"], row["size"], row["ranks"], row["dtype"]).selection_bytes
        by_key.setdefault((row["op"], nbytes), {})[row["algorithm"]] = row["time_us"]
    return _ranked(by_key)


def print_rules(rules, heading: str) -> None:
    from .bench.units import format_size

    print(heading)
    print(f"{'collective':16}{'bytes/rank':>12}{'':4}{'algorithm':10}{'margin':>8}  runner-up")
    for rule in rules:
        span = f"{format_size(rule['min_bytes'])}-{format_size(rule['max_bytes'])}"
        margin = "-" if rule["margin"] is None else f"{100 * rule['margin']:.0f}%"
        print(f"{rule['collective']:16}{span:>12}{'':4}{rule['algorithm']:10}{margin:>8}  {rule['runner_up'] or '-'}")


def rules_and_measurements(won: dict, ops, platform: str) -> tuple:
    """The tuning file's rules and measurements from per-size winners (``winners``, ``record_winners``)."""
    from .. import tuning_file

    rules, measurements = [], []
    for op in ops:
        per_size = won.get(op, [])
        rules.extend(tuning_file.rules_from_winners(op, platform, [w[:4] for w in per_size]))
        measurements.extend(
            {"collective": op, "bytes": b, "winner": w, "margin": m, "runner_up": ru, "times_us": t}
            for b, w, m, ru, t in per_size
        )
    return rules, measurements


def tune_from_record(args) -> int:
    """--from-record: the tuning file of the topology a JAX setting of a kernel record ran on."""
    import json

    from .. import tuning_file

    try:
        with open(args.from_record) as f:
            record = json.load(f)
        setting = record_setting(record, args.setting)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: --from-record {args.from_record}: {e}", file=sys.stderr)
        return 2
    rows = [row for row in record["rows"] if row["setting"] == setting]
    machine, first = record["machine"], rows[0]
    platform = machine["platform"]
    won = record_winners(record, setting, platform, args.lax, args.ops)
    rules, measurements = rules_and_measurements(won, args.ops, platform)
    name = tuning_file.topology_name(platform, machine["device_kind"], first["ranks"], first["processes"])
    print_rules(rules, f"# {setting} of {args.from_record} ({record.get('commit')}, {record.get('date')}), "
                       f"{first['dtype']}: topology {name}")
    if args.dry_run:
        return 0
    path = args.output or tuning_file.default_file_of(name)
    tuning_file.write(path, {
        "topology": name, "platform": platform, "world_size": first["ranks"], "created": tuning_file.now(),
        "metric": "device", "dtype": first["dtype"], "machine": machine,
        "source": {"record": os.path.abspath(args.from_record), "setting": setting, "commit": record.get("commit"),
                   "date": record.get("date"), "time_source": first.get("time_source")},
        "rules": rules, "measurements": measurements,
    })
    print(f"# wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.from_record is not None:
        return tune_from_record(args)
    from .bench import machine

    machine.ensure_host_devices(args.devices or machine.DEFAULT_HOST_DEVICES)

    from .. import selection, tuning_file
    from .bench import programs, sweep
    from .bench.driver import resolve_settings, select_devices
    from .bench.units import format_size

    try:
        devices = select_devices(args.devices)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    platform = devices[0].platform
    sel_platform = sweep.selection_platform(platform)
    kind = sweep.platform_kind(platform)
    import jax

    reason = sweep.ours_unavailable_reason(platform, jax.process_count())
    if reason:
        print(f"error: nothing to tune: {reason}", file=sys.stderr)
        return 2
    names = sorted({a for algos in selection.PLATFORM_ALGORITHMS[sel_platform].values() for a in algos}
                   - set(sweep.MULTI_AXIS_ALGORITHMS))
    mode = args.mode or ("cmdbuf" if kind == "gpu" else "plain")
    metric = args.metric or ("device" if kind == "gpu" else "dispatch")
    try:
        settings = resolve_settings(platform, ops=args.ops, sizes=args.sizes, dtypes=[args.dtype], algorithms=names,
                                    modes=[mode], iters=args.iters, warmup=args.warmup, chain=args.chain)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    notices: list[str] = []
    runner = sweep.Runner(programs.make_mesh(devices), settings, notices)
    groups = runner.groups()
    records = []
    for i, group in enumerate(groups):
        print(f"[{i + 1}/{len(groups)}] {group.label}", file=sys.stderr, flush=True)
        records.extend(runner.run_group(group))
    failed = [r for r in records if r.status != "ok"]
    for r in failed:
        print(f"# not a candidate: {r.op} {format_size(r.size)} {r.algorithm}: {r.status}", file=sys.stderr)

    rules, measurements = rules_and_measurements(winners(records, metric, args.lax), settings.ops, sel_platform)
    print_rules(rules, f"# {metric} time, {mode} mode, {len(devices)} x {devices[0].device_kind}, {args.dtype}")
    if args.dry_run:
        return 0
    path = args.output or tuning_file.default_path(sel_platform)
    doc = {
        "topology": tuning_file.topology(sel_platform),
        "platform": sel_platform,
        "world_size": len(devices),
        "created": tuning_file.now(),
        "metric": metric,
        "mode": mode,
        "dtype": args.dtype,
        "machine": machine.describe(devices),
        "settings": {"sizes": list(settings.sizes), "iters": settings.iters, "warmup": settings.warmup,
                     "chain": settings.chain, "lax_candidate": args.lax},
        "rules": rules,
        "measurements": measurements,
    }
    tuning_file.write(path, doc)
    print(f"# wrote {path}")
    if args.output is None and len(devices) != len(jax.devices()):
        print(f"# note: tuned on {len(devices)} of {len(jax.devices())} devices, written to the default file of "
              "all of them", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
