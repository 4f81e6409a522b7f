"""``python -m jax_mscclpp.tools.tune``: measure every algorithm this platform runs over a size range on this
machine and write the selection file the runtime reads (``tuning_file.py``), with the margin by which each choice
won.

For each collective and size it times every algorithm (and the lax collective, unless ``--no-lax``) with the
benchmark's machinery (checked against lax first), picks the fastest, and merges runs of sizes with one winner
into a rule. The margin of a choice is how much slower the runner-up was: 0.25 = the winner was 25% faster.

By default the file goes to this topology's default path (``tuning_file.default_path``), which every later process
on this machine reads; ``--output FILE`` writes elsewhere (point ``JAX_MSCCLPP_TUNING_FILE`` at it).
"""

from __future__ import annotations

import argparse
import sys

from .bench.cli import _list
from .bench.programs import OPS

USAGE = (
    "python -m jax_mscclpp.tools.tune [--ops all_reduce,...] [--sizes 1K:1G] [--dtype bfloat16] [--iters N] "
    "[--warmup N] [--chain K] [--devices N] [--mode plain|cmdbuf] [--metric device|dispatch] [--no-lax] "
    "[--output FILE] [--dry-run]"
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
    out: dict = {}
    for (op, nbytes), times in sorted(by_key.items()):
        if not times:
            continue
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        best, best_us = ranked[0]
        runner_up, margin = (ranked[1][0], ranked[1][1] / best_us - 1.0) if len(ranked) > 1 else (None, None)
        out.setdefault(op, []).append((nbytes, best, margin, runner_up, dict(times)))
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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

    won = winners(records, metric, args.lax)
    rules, measurements = [], []
    for op in settings.ops:
        per_size = won.get(op, [])
        rules.extend(tuning_file.rules_from_winners(op, sel_platform, [w[:4] for w in per_size]))
        measurements.extend(
            {"collective": op, "bytes": b, "winner": w, "margin": m, "runner_up": ru, "times_us": t}
            for b, w, m, ru, t in per_size
        )

    print(f"# {metric} time, {mode} mode, {len(devices)} x {devices[0].device_kind}, {args.dtype}")
    print(f"{'collective':16}{'bytes/rank':>12}{'':4}{'algorithm':10}{'margin':>8}  runner-up")
    for rule in rules:
        span = f"{format_size(rule['min_bytes'])}-{format_size(rule['max_bytes'])}"
        margin = "-" if rule["margin"] is None else f"{100 * rule['margin']:.0f}%"
        print(f"{rule['collective']:16}{span:>12}{'':4}{rule['algorithm']:10}{margin:>8}  {rule['runner_up'] or '-'}")
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
