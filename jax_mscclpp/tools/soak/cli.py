"""``python -m jax_mscclpp.tools.soak``: the command line of the soak (``runner.py``)."""

from __future__ import annotations

import argparse
import os
import sys

from ..bench import launcher, machine
from ..bench.units import parse_size

USAGE = ("python -m jax_mscclpp.tools.soak [--calls N] [--seed S] [--max-bytes 64M] [--programs K] [--devices N] "
         "[--launch N] [--duration SECONDS] [--dtypes float32,int8,...] [--out FILE] "
         "[--reference lax|cpu] [--algorithms auto,lax,...] [--config JSON --data SEED:CALL]")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_mscclpp.tools.soak", usage=USAGE,
        description="Runs random jax_mscclpp collectives (op, size from 1 byte to --max-bytes per rank, dtype, "
        "algorithm: auto, every built-in one and registered DSL plans; one call or a chain in a fori_loop; 1-D "
        "and 2-D meshes in random device orders) under jit + shard_map, and compares each with the lax "
        "collective on fresh random data: exactly for integers, data movement, max and min; within rounding "
        "for float sums. Prints counts per op and algorithm and every mismatch with the command that "
        "reproduces it. Exit status 1 when something mismatched or failed.")
    p.add_argument("--calls", type=int, default=None,
                   help="collective calls to run (default: 1000; with --config, 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the configs and the data (default: 0)")
    p.add_argument("--max-bytes", default="64M", help="largest operand per rank (default: 64M)")
    p.add_argument("--programs", type=int, default=200,
                   help="distinct configs, each compiled once and reused with fresh data (default: 200)")
    p.add_argument("--devices", type=int, default=None,
                   help="use the first N devices (default: all; on CPU, 8 virtual devices unless XLA_FLAGS sets a "
                   "count)")
    p.add_argument("--launch", type=int, default=None, metavar="N",
                   help="run as N processes under jax.distributed on this host, one device each (GPUs: the host "
                   "backend of CPU devices runs within one process, so there ours falls back to lax)")
    p.add_argument("--reference", choices=("lax", "cpu"), default="lax",
                   help="what ours is compared with: the lax collective on the same devices (default), or the lax "
                   "collective on this process's CPU devices over every rank's data, rebuilt here (for processes "
                   "that share a GPU, where XLA's NCCL collectives cannot run)")
    p.add_argument("--algorithms", default=None,
                   help="comma list of the algorithms drawn (default: auto, every built-in one and the registered "
                   "plans); 'lax' soaks lax's own collectives, which with JAX_MSCCLPP_NCCL=1 run through our "
                   "libnccl.so.2")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this long even if fewer than --calls calls ran")
    p.add_argument("--dtypes", default=None, help="comma list of dtypes (default: every supported one)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the results as JSON to FILE")
    p.add_argument("--config", default=None, metavar="JSON", help="run only this config (from a mismatch report)")
    p.add_argument("--data", default=None, metavar="SEED:CALL", help="with --config: the data of that call")
    p.add_argument("--max-errors", type=int, default=10, help="stop after this many failed calls (default: 10)")
    p.add_argument("--quiet", action="store_true", help="print only mismatches, errors and the totals")
    return p


def _settings(parser: argparse.ArgumentParser, args):
    from .configs import Config
    from .runner import Settings

    try:
        max_bytes = parse_size(args.max_bytes)
    except ValueError as e:
        parser.error(str(e))
    config = data = None
    if args.config is not None:
        try:
            config = Config.from_json(args.config)
        except (ValueError, TypeError, KeyError) as e:
            parser.error(f"--config: not a soak config: {e}")
    if args.data is not None:
        if config is None:
            parser.error("--data goes with --config")
        try:
            seed, call = (int(v) for v in args.data.split(":"))
        except ValueError:
            parser.error("--data takes SEED:CALL, e.g. 0:1234")
        data = (seed, call)
    dtypes = tuple(t.strip() for t in args.dtypes.split(",") if t.strip()) if args.dtypes else ()
    algorithms = tuple(a.strip() for a in args.algorithms.split(",") if a.strip()) if args.algorithms else ()
    calls = args.calls if args.calls is not None else (1 if config is not None else 1000)
    launched = int(os.environ.get(launcher.ENV_NUM_PROCESSES, 0)) or None  # inside a --launch run
    return Settings(calls=calls, seed=args.seed, max_bytes=max_bytes, programs=args.programs,
                    duration_s=args.duration, dtypes=dtypes, config=config, data=data, max_errors=args.max_errors,
                    launch=args.launch or launched, reference=args.reference, algorithms=algorithms)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("calls", "programs", "devices", "launch", "max_errors"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.launch is not None:
        if launcher.is_child():
            parser.error("--launch inside a launched process")
        if args.reference == "cpu":  # every process rebuilds the whole mesh on its CPU devices
            machine.ensure_host_devices(args.launch)
        return launcher.launch(args.launch, "jax_mscclpp.tools.soak", argv)
    if launcher.is_child():
        launcher.initialize_child()
    else:
        machine.ensure_host_devices(args.devices or machine.DEFAULT_HOST_DEVICES)
    settings = _settings(parser, args)

    import jax

    from . import record, runner

    devices = jax.devices()
    if args.devices is not None:
        if args.devices > len(devices):
            parser.error(f"--devices {args.devices}: only {len(devices)} {devices[0].platform} device(s) here")
        devices = devices[: args.devices]
    lead = jax.process_index() == 0
    log = print if lead or not args.quiet else (lambda line: print(line, file=sys.stderr))
    soak = runner.Soak(devices, settings, log=log)
    summary = soak.run()
    if lead:
        print(runner.format_summary(summary) if not args.quiet else
              runner.format_summary(summary).splitlines()[0])
        if args.out:
            record.write_json(args.out, "calls", devices, settings.as_dict(), summary)
            print(f"wrote {args.out}")
    return 1 if summary["mismatches"] or summary["errors"] else 0
