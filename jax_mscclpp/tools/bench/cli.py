"""``python -m jax_mscclpp.tools.bench``: the command line."""

from __future__ import annotations

import argparse
import sys

from . import launcher, machine
from .modes import MODES
from .programs import OP_NAMES, OPS, REDOPS, resolve_ops
from .units import parse_sizes

USAGE = (
    "python -m jax_mscclpp.tools.bench [--ops all_reduce,all_gather,reduce_scatter,all_to_all] "
    "[--sizes 1K,64K,1M | 1K:1G] [--dtype bfloat16,float32] [--algorithm all|auto|NAME,...] [--mode plain,cmdbuf] "
    "[--iters N] [--warmup N] [--chain K] [--devices N] [--launch N] [--out DIR]"
)


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_mscclpp.tools.bench",
        usage=USAGE,
        description="Times jax_mscclpp's collectives beside the lax collectives (nccl-tests conventions): device "
        "time per collective from K calls chained in one program minus a trivial program, the dispatch-level time "
        "of one blocking call, algbw and busbw, and the speedup over lax. Every configuration is checked against "
        "lax on random data before it is timed.",
    )
    p.add_argument("--ops", type=_list, default=list(OPS),
                   help=f"comma list of {', '.join(OPS)} (default: all), or the drop-ins' names: "
                   f"{', '.join(n for n in OP_NAMES if n not in OPS)} (psum, pmax, pmin also set --redop)")
    p.add_argument("--sizes", default=None,
                   help="comma list of sizes and LO:HI[:FACTOR] ranges, binary suffixes: 1K,64K,1M or 1K:1G "
                   "(default: 1K:1G on GPU, 1K:1M on CPU). Size is nccl-tests': the larger per-rank buffer")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", type=_list, default=["bfloat16"],
                   help="comma list of dtypes (default: bfloat16)")
    p.add_argument("--algorithm", "--algorithms", dest="algorithms", type=_list, default=["all"],
                   help="comma list of algorithm names, 'auto' (the runtime's choice) or 'all' (each algorithm "
                   "this platform runs, and auto; the default). lax is always timed beside them")
    p.add_argument("--redop", choices=REDOPS, default=None,
                   help="all_reduce reduction (default: the one a name in --ops says, else sum)")
    p.add_argument("--mode", "--modes", dest="modes", type=_list, default=list(MODES),
                   help="comma list of plain (no command buffers) and cmdbuf (XLA command buffers; GPU only) "
                   "(default: both)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations (default: 20 on GPU, 3 on CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default: 5 on GPU, 1 on CPU)")
    p.add_argument("--chain", type=int, default=None,
                   help="K collectives chained per program (default: 64 on GPU, 4 on CPU; shrinks for sizes "
                   "past 4 GiB per chain, never below 2)")
    p.add_argument("--devices", type=int, default=None,
                   help="use the first N devices (default: all; on CPU, 8 virtual devices unless XLA_FLAGS sets "
                   "a count)")
    p.add_argument("--launch", type=int, default=None, metavar="N",
                   help="run as N processes under jax.distributed on this host (one device each)")
    p.add_argument("--out", default=None, metavar="DIR", help="write JSON, CSV and a PNG plot into DIR")
    p.add_argument("--name", default=None, help="file name stem in --out (default: bench_<platform>_<kind>_<n>dev_<date>)")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the check against lax")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--quiet", action="store_true", help="no table on the terminal (files only)")
    p.add_argument("--seed", type=int, default=0, help="random data seed (default: 0)")
    return p


def _check_names(parser: argparse.ArgumentParser, args) -> None:
    """Rejects unknown ops, modes, algorithms and dtypes before JAX starts."""
    import jax.numpy as jnp

    from jax_mscclpp._types import ALGORITHMS_OF, SUPPORTED_DTYPES

    try:
        args.ops, args.redop = resolve_ops(args.ops, args.redop)
    except ValueError as e:
        parser.error(str(e))
    for mode in args.modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    known = {"all", "auto"} | {a for names in ALGORITHMS_OF.values() for a in names}
    for name in args.algorithms:
        if name not in known:
            parser.error(f"unknown algorithm {name!r}; known: {', '.join(sorted(known))}")
    for name in args.dtypes:
        try:
            dtype = jnp.dtype(name)
        except TypeError:
            parser.error(f"unknown dtype {name!r}")
        if dtype not in SUPPORTED_DTYPES:
            parser.error(f"dtype {name!r} is not one the collectives run on")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.sizes is not None:
        try:
            parse_sizes(args.sizes)
        except ValueError as e:
            parser.error(str(e))
    for name in ("iters", "chain", "devices", "launch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup is not None and args.warmup < 0:
        parser.error("--warmup must be at least 0")
    _check_names(parser, args)

    if args.launch is not None:
        if launcher.is_child():
            parser.error("--launch inside a launched process")
        return launcher.launch(args.launch, "jax_mscclpp.tools.bench", argv)

    if not launcher.is_child():
        machine.ensure_host_devices(args.devices or machine.DEFAULT_HOST_DEVICES)
    else:
        launcher.initialize_child()

    from .driver import run_and_report

    try:
        return run_and_report(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
