"""One benchmark run: devices and defaults resolved, the sweep, the terminal table and the files."""

from __future__ import annotations

import dataclasses
import sys
from typing import Sequence

import jax

from . import machine, programs, report, sweep
from .progress import Progress
from .units import parse_sizes


def select_devices(count: int | None = None) -> list:
    """The first ``count`` devices of the default backend (all of them when None)."""
    devices = jax.devices()
    if count is not None:
        if count > len(devices):
            raise ValueError(
                f"--devices {count}: only {len(devices)} {devices[0].platform} device(s) here"
                + (" (on CPU set XLA_FLAGS=--xla_force_host_platform_device_count before JAX starts)"
                   if devices[0].platform == "cpu" else "")
            )
        devices = devices[:count]
    return devices


def resolve_settings(platform: str, *, ops: Sequence[str] | None = None, sizes=None, dtypes=None,
                     algorithms=None, modes=None, iters=None, warmup=None, chain=None, redop=None, check=True,
                     seed=0) -> sweep.Settings:
    """Settings with this platform's defaults for whatever is None. ``sizes`` is a list of bytes or a spec;
    ``ops`` may name the drop-ins (psum, psum_scatter, ...: ``programs.resolve_ops``)."""
    defaults = sweep.DEFAULTS[sweep.platform_kind(platform)]
    ops, redop = programs.resolve_ops(ops or programs.OPS, redop)
    if sizes is None:
        sizes = defaults["sizes"]
    if isinstance(sizes, str):
        sizes = parse_sizes(sizes)
    return sweep.Settings(
        ops=ops,
        sizes=tuple(int(s) for s in sizes),
        dtypes=tuple(dtypes or ("bfloat16",)),
        algorithms=tuple(algorithms or ("all",)),
        modes=tuple(modes or ("plain", "cmdbuf")),
        iters=defaults["iters"] if iters is None else iters,
        warmup=defaults["warmup"] if warmup is None else warmup,
        chain=defaults["chain"] if chain is None else chain,
        redop=redop,
        check=check,
        seed=seed,
    )


def run(devices: int | Sequence | None = None, notices: list[str] | None = None, **settings) -> list[sweep.Record]:
    """Runs a sweep in this process and returns its records (no printing). ``devices`` is a count or a list of
    devices; the other keywords are those of :func:`resolve_settings`."""
    devs = select_devices(devices) if devices is None or isinstance(devices, int) else list(devices)
    resolved = resolve_settings(devs[0].platform, **settings)
    return sweep.Runner(programs.make_mesh(devs), resolved, notices).run()


def run_and_report(args) -> int:
    """The command line's run: table (and progress) on the terminal, files with ``--out``. Exit status 1 when a
    configuration failed its check or errored."""
    devices = select_devices(args.devices)
    settings = resolve_settings(
        devices[0].platform, ops=args.ops, sizes=args.sizes, dtypes=args.dtypes, algorithms=args.algorithms,
        modes=args.modes, iters=args.iters, warmup=args.warmup, chain=args.chain, redop=args.redop,
        check=args.check, seed=args.seed,
    )
    main_process = jax.process_index() == 0
    notices: list[str] = []
    runner = sweep.Runner(programs.make_mesh(devices), settings, notices)
    meta = machine.describe(devices)
    groups = runner.groups()
    show = main_process and not args.quiet
    if show:
        print("\n".join(report.preamble(meta)))
        print(f"# chain K={settings.chain}, iters={settings.iters}, warmup={settings.warmup}")
        for notice in notices:
            print(f"# note: {notice}")
        print(report.table_header(), flush=True)
    progress = Progress(len(groups), enabled=None if (main_process and args.progress) else False)

    def on_group(i, total, group):
        progress.update(i, group.label if group else "")

    def on_record(record):
        if show:
            progress.write(report.table_row(record))

    records = []
    try:
        for i, group in enumerate(groups):
            on_group(i, len(groups), group)
            for record in runner.run_group(group):
                records.append(record)
                on_record(record)
        on_group(len(groups), len(groups), None)
    finally:
        progress.close()

    notices = list(dict.fromkeys(notices))
    if args.out and main_process:
        written, more = report.write_all(args.out, meta, _settings_dict(settings), records, notices, args.name)
        for notice in more:
            print(f"# note: {notice}", file=sys.stderr)
        if not args.quiet:
            for path in written:
                print(f"# wrote {path}")
    bad = [r for r in records if r.status == "check failed" or r.status.startswith("error")]
    if bad and main_process:
        print(f"# {len(bad)} configuration(s) failed: see the status column", file=sys.stderr)
    return 1 if bad else 0


def _settings_dict(settings: sweep.Settings) -> dict:
    d = dataclasses.asdict(settings)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
