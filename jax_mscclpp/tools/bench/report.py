"""Results out: a table on the terminal, JSON and CSV files (with the machine header), and a PNG plot.

The plot needs matplotlib (``pip install jax-mscclpp[bench]``); without it the PNG is skipped with a notice.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
from typing import Sequence

from .metrics import below_noise
from .units import format_size
from .json_safe import json_safe

SCHEMA = "jax_mscclpp.bench/1"
# Machine columns repeated on every CSV row, so a row stands alone.
CSV_META = ("date", "hostname", "platform", "device_kind", "device_count", "process_count", "jax", "jaxlib",
            "jax_mscclpp")
# What a CPU run's figures are (docs/benchmarking.md, "What the CPU numbers mean"): printed above its table and
# kept as the JSON's "caveat".
CPU_CAVEAT = ("CPU devices: these timings measure jax_mscclpp's host reference backend against XLA:CPU's "
              "collectives; they are not a GPU speed claim")
LATENCY_MAX_SIZE = 1 << 20  # the plot's latency panel: sizes up to this
BANDWIDTH_MIN_SIZE = 64 << 10  # the plot's bandwidth panel: sizes from this

_COLUMNS = (
    # header, width, render(record)
    ("op", 14, lambda r: r["op"]),
    ("size", 6, lambda r: format_size(r["size"])),
    ("dtype", 8, lambda r: r["dtype"]),
    ("algorithm", 16, lambda r: r["algorithm"] if r["algorithm"] == r["chosen"] else f"{r['algorithm']}>{r['chosen']}"),
    ("mode", 6, lambda r: r["mode"]),
    ("check", 5, lambda r: r["check"]),
    ("ours_us", 11, lambda r: _time(r, "ours")),
    ("lax_us", 11, lambda r: _time(r, "lax")),
    ("speedup", 7, lambda r: "-" if _noisy(r, "ours") or _noisy(r, "lax") else _ratio(r["speedup"])),
    ("busbw", 7, lambda r: "-" if _noisy(r, "ours") else _num(r["ours_busbw"], 3)),
    ("lax_bw", 7, lambda r: "-" if _noisy(r, "lax") else _num(r["lax_busbw"], 3)),
    ("disp_us", 9, lambda r: _num(r["ours_dispatch_us"])),
    ("lax_disp", 9, lambda r: _num(r["lax_dispatch_us"])),
)


def _num(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _noisy(r: dict, who: str) -> bool:
    return below_noise(r[f"{who}_us"], r[f"{who}_min_us"])


def _time(r: dict, who: str) -> str:
    return "below noise" if _noisy(r, who) else _num(r[f"{who}_us"])


def _with_noise_flags(r: dict) -> dict:
    """The record with ``ours_below_noise`` / ``lax_below_noise`` (metrics.below_noise) beside its raw times."""
    return {**r, "ours_below_noise": _noisy(r, "ours"), "lax_below_noise": _noisy(r, "lax")}


def _as_dict(record) -> dict:
    return record if isinstance(record, dict) else dataclasses.asdict(record)


def table_header() -> str:
    cells = [h.ljust(w) if i < 6 else h.rjust(w) for i, (h, w, _) in enumerate(_COLUMNS)]
    return "  ".join(cells).rstrip()


def table_row(record) -> str:
    r = _as_dict(record)
    cells = [str(f(r)).ljust(w) if i < 6 else str(f(r)).rjust(w) for i, (_, w, f) in enumerate(_COLUMNS)]
    line = "  ".join(cells)
    if r["status"] != "ok":
        line += f"  [{r['status']}]"
    return line.rstrip()


def caveat(meta: dict) -> str | None:
    """What the figures of a run on ``meta``'s platform are not (None where they are what they say)."""
    return CPU_CAVEAT if meta.get("platform") == "cpu" else None


def preamble(meta: dict) -> list[str]:
    v = meta.get("versions", {})
    warning = caveat(meta)
    return [
        f"# jax_mscclpp bench: {meta.get('device_count')} x {meta.get('device_kind')} ({meta.get('platform')}), "
        f"{meta.get('process_count')} process(es), jax {v.get('jax')}, jax_mscclpp {v.get('jax_mscclpp')}, "
        f"{meta.get('date')}",
        "# ours_us/lax_us: device time of one collective (K chained in one program, minus the same program with a "
        "trivial op, / K): median",
        "# busbw/lax_bw: bus bandwidth GB/s (nccl-tests); disp_us/lax_disp: one blocking call per dispatch, as a "
        "user's step sees it; speedup = lax/ours",
        "# below noise: some chained run took no longer than the trivial program, so the time (and its speedup and "
        "busbw) cannot be told from zero",
    ] + ([f"# caveat: {warning}"] if warning else [])


def write_json(path: str, meta: dict, settings: dict, records: Sequence, notes: Sequence[str] = ()) -> str:
    doc = {
        "schema": SCHEMA,
        "caveat": caveat(meta),
        "meta": meta,
        "settings": settings,
        "notes": list(notes),
        "records": [_with_noise_flags(_as_dict(r)) for r in records],
    }
    with open(path, "w") as f:
        json.dump(json_safe(doc), f, indent=1, allow_nan=False)
        f.write("\n")
    return path


def _csv_meta(meta: dict) -> dict:
    versions = meta.get("versions", {})
    return {k: meta.get(k, versions.get(k)) for k in CSV_META}


def write_csv(path: str, meta: dict, records: Sequence) -> str:
    rows = [_with_noise_flags(_as_dict(r)) for r in records]
    fields = list(CSV_META) + (list(rows[0]) if rows else [])
    head = _csv_meta(meta)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({**head, **{k: ("" if v is None else v) for k, v in json_safe(row).items()}})
    return path


def plot_series(records: Sequence, metric: str, sizes: Sequence[int] | None = None) -> dict[str, dict]:
    """The plot's lines for one op's ``records``: label -> {size: (value, the point's label)}, ``metric`` "us"
    (time per collective) or "busbw", at ``sizes`` (default: every size). lax is one line; so is each algorithm
    asked for, ``auto`` included, whose points are labelled with the algorithm it chose at each size (one line
    to hold against lax, whatever it chose). A value below noise is None: no point is drawn there, and the line
    keeps its other points. Records of several modes or dtypes get a line each, the mode and dtype in its
    label."""
    rows = [_as_dict(r) for r in records]
    several_modes = len({r["mode"] for r in rows}) > 1
    several_dtypes = len({r["dtype"] for r in rows}) > 1

    def suffix(r):
        parts = ([r["mode"]] if several_modes else []) + ([r["dtype"]] if several_dtypes else [])
        return f" ({', '.join(parts)})" if parts else ""

    def value(r, who):
        return None if _noisy(r, who) else r[f"{who}_us"] if metric == "us" else r[f"{who}_busbw"]

    series: dict[str, dict] = {}
    for r in rows:
        if sizes is not None and r["size"] not in sizes:
            continue
        series.setdefault("lax" + suffix(r), {})[r["size"]] = (value(r, "lax"), None)
        if r["status"] == "ok":
            point = r["chosen"] if r["algorithm"] != r["chosen"] else None
            series.setdefault(r["algorithm"] + suffix(r), {})[r["size"]] = (value(r, "ours"), point)
    return series


def write_png(path: str, meta: dict, records: Sequence) -> str | None:
    """Latency (small sizes) and bus bandwidth (large sizes) against size, ours beside lax, one row per op
    (``plot_series``). Returns None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [_as_dict(r) for r in records]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    if not ops:
        return None

    fig, axes = plt.subplots(len(ops), 2, figsize=(12, 3.6 * len(ops)), squeeze=False)
    for row_axes, op in zip(axes, ops):
        mine = [r for r in rows if r["op"] == op]
        sizes = sorted({r["size"] for r in mine})
        small = [s for s in sizes if s <= LATENCY_MAX_SIZE] or sizes
        large = [s for s in sizes if s >= BANDWIDTH_MIN_SIZE] or sizes
        panels = ((row_axes[0], small, "us", "time per collective (us)"),
                  (row_axes[1], large, "busbw", "bus bandwidth (GB/s)"))
        for ax, keep, metric, ylabel in panels:
            for label, points in plot_series(mine, metric, keep).items():
                xs = [s for s in sorted(points) if points[s][0] is not None and points[s][0] > 0]
                if not xs:
                    continue
                style = dict(color="black", linestyle="--") if label.startswith("lax") else {}
                ys = [points[s][0] for s in xs]
                ax.plot(xs, ys, marker="o", markersize=3, label=label, **style)
                for x, y in zip(xs, ys):
                    if points[x][1] is not None:
                        ax.annotate(points[x][1], (x, y), textcoords="offset points", xytext=(0, 4), ha="center",
                                    fontsize=6)
            ax.set_xscale("log", base=2)
            if metric == "us":
                ax.set_yscale("log")
            ax.set_xticks(keep)
            ax.set_xticklabels([format_size(s) for s in keep], rotation=45, fontsize=7)
            ax.set_title(f"{op}: {'latency' if metric == 'us' else 'bus bandwidth'}")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.suptitle(
        f"jax_mscclpp vs lax: {meta.get('device_count')} x {meta.get('device_kind')}, {meta.get('date')}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def default_stem(meta: dict) -> str:
    date = re.sub(r"[^0-9T]", "", str(meta.get("date", ""))[:19])
    kind = re.sub(r"[^A-Za-z0-9]+", "-", str(meta.get("device_kind", "dev"))).strip("-").lower()
    return f"bench_{meta.get('platform')}_{kind}_{meta.get('device_count')}dev_{date}"


def write_all(out_dir: str, meta: dict, settings: dict, records: Sequence, notes: Sequence[str] = (),
              stem: str | None = None) -> tuple[list[str], list[str]]:
    """Writes ``<stem>.json``, ``.csv`` and ``.png`` into ``out_dir``; returns (paths written, notices)."""
    os.makedirs(out_dir, exist_ok=True)
    stem = stem or default_stem(meta)
    base = os.path.join(out_dir, stem)
    written = [write_json(base + ".json", meta, settings, records, notes), write_csv(base + ".csv", meta, records)]
    notices = []
    png = write_png(base + ".png", meta, records)
    if png:
        written.append(png)
    else:
        notices.append("plot skipped: matplotlib is not installed (pip install 'jax-mscclpp[bench]')")
    return written, notices
