"""The ragged all-to-all on virtual ranks of one GPU: launch_ragged_all_to_all against the all_to_all that
``jm.ragged_all_to_all``'s composition runs, in device time and in memory traffic, one JSON per run.

    python3 bench/kernels/ragged_record.py [--ranks 2,4,8] [--sizes 64K,16M,256M] [--row-bytes 4096]
                                           [--exchanges direct,ring] [--ncu] [--commit SHA] [--out DIR]

A cell is N virtual ranks (tests/harness, one process, one GPU) each sending S bytes of rows in all: rank i's
``S / row_bytes`` operand rows go to the N ranks in random contiguous runs (its own included, as a token's expert
may be local), and every rank receives what the tables say (lax's semantics; the output is checked against numpy
once). Each cell runs with each exchange of ``--exchanges`` (``exchange`` in the row): ``direct``, each sender
writing its rows straight into the receivers' outputs (ranks of one process, the default there), and ``ring``,
through the point-to-point slot rings (as between processes). Per cell:

- ``ragged_us``: device time per call of the kernel, CUDA events on rank 0's stream around graph replays of R calls
  on every rank (R fills about 10 ms);
- ``composition_us``: the same for the all_to_all the composition runs (algorithm allpairs, a block of every operand
  row for every rank: N x S bytes per rank), the part of the composition that moves data, without its gather and
  scatter; skipped where N x S exceeds ``--composition-max`` per rank, and measured with the first exchange only
  (it does not use the exchange);
- ``memcpy_us``: a device-to-device copy of S bytes on rank 0's stream;
- ``sent_bytes``: the bytes of the rows that go to other ranks, summed over ranks (what a ragged exchange must move
  between ranks), and ``local_bytes`` those each rank keeps.

With ``--ncu`` the script runs itself once more under Nsight Compute (``ncu --replay-mode range``, else
``app-range``: the kernels of communicating ranks cannot be replayed one at a time; a range is one call of the
kernel, then one of the all_to_all, on every rank, between cuProfilerStart and cuProfilerStop) and
adds ``ragged_dram_bytes`` and ``composition_dram_bytes`` (dram__bytes_read.sum + dram__bytes_write.sum over the
range) and their ratio to ``minimum_bytes``: every byte of every row read once and written once at its destination
(2 x (sent + local)), the least any exchange through memory can move. Every rank shares one GPU's memory, so the
traffic of all ranks is counted together, and rows that stay in the 60 MB L2 cache never reach DRAM (small cells
read low): the large cells are the traffic figure. These are one GPU's figures, the guard on bytes moved, not
multi-GPU speed.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _environment, _traffic (also when loaded by path)
import _environment  # noqa: E402,F401  (bench/kernels/_environment.py: CUDA's environment, tests.harness)

import numpy as np  # noqa: E402

from _traffic import (dram_bytes_per_range, parse_size, profile_ranges, profiler, record_parser,  # noqa: E402,F401
                      run_record)

SCRATCH = 64 << 20
REPLAY_MS = 10.0
REPLAYS = 5
TIMEOUT_S = 30.0


def layout(n: int, rows: int, seed: int):
    """sizes[i, j] (rows rank i sends rank j, summing to ``rows`` per sender), input offsets (contiguous runs in
    destination order) and output offsets (receiver j's rows in sender order)."""
    rng = np.random.default_rng(seed)
    sizes = np.stack([rng.multinomial(rows, np.full(n, 1.0 / n)) for _ in range(n)]).astype(np.int64)
    in_off = np.cumsum(sizes, axis=1) - sizes
    out_off = np.cumsum(sizes, axis=0) - sizes
    return sizes, in_off, out_off


class Cell:
    def __init__(self, vr, n: int, size: int, row_bytes: int, seed: int):
        self.vr, self.n, self.row_bytes = vr, n, row_bytes
        self.rows = size // row_bytes
        self.sizes, self.in_off, self.out_off = layout(n, self.rows, seed)
        self.out_rows = int(self.sizes.sum(axis=0).max())

    def call(self, r: int) -> tuple:
        s, n = self.sizes, self.n
        return (0, self.rows, 0, self.out_rows, self.row_bytes, [int(v) for v in self.in_off[r]],
                [int(v) for v in s[r]], [int(self.out_off[r, j]) for j in range(n)],
                [int(s[i, r]) for i in range(n)], 8)

    def launch(self) -> None:
        for r in range(self.n):
            self.vr.ranks[r].ragged_all_to_all(*self.call(r))

    def check(self, input_buffer: int, output_buffer: int) -> None:
        """One call on random rows against numpy (the output poisoned first; rows nobody writes keep it)."""
        vr, rb = self.vr, self.row_bytes
        rng = np.random.default_rng(1)
        operands = [rng.integers(0, 256, self.rows * rb, dtype=np.uint8) for _ in range(self.n)]
        for r in range(self.n):
            vr.upload(r, input_buffer, operands[r])
            vr.fill(r, output_buffer, 0xA5)
        self.launch()
        vr.synchronize()
        for j in range(self.n):
            got = vr.download(j, output_buffer, self.out_rows * rb).reshape(self.out_rows, rb)
            want = np.full((self.out_rows, rb), 0xA5, np.uint8)
            for i in range(self.n):
                k, a, b = self.sizes[i, j], self.in_off[i, j], self.out_off[i, j]
                want[b:b + k] = operands[i].reshape(self.rows, rb)[a:a + k]
            if not np.array_equal(got, want):
                bad = int(np.argwhere((got != want).any(axis=1))[0, 0])
                raise AssertionError(f"rank {j}: output row {bad} differs from lax's semantics")

    def sent_and_local(self) -> tuple[int, int]:
        diagonal = int(np.trace(self.sizes))
        return (int(self.sizes.sum()) - diagonal) * self.row_bytes, diagonal * self.row_bytes


def time_ragged(cell: Cell) -> float:
    """Microseconds per call: R calls captured per rank, graph replays timed on rank 0's stream."""
    vr = cell.vr

    def replay_ms(repeats: int) -> float:
        for r in range(cell.n):
            vr.ranks[r].capture_ragged_all_to_all([cell.call(r)] * repeats)
        for rk in vr.ranks:
            rk.replay(1)
        vr.synchronize()
        times = []
        for _ in range(REPLAYS):
            vr.ranks[0].record_start()
            for rk in vr.ranks:
                rk.replay(1)
            vr.ranks[0].record_stop()
            vr.synchronize()
            times.append(vr.ranks[0].elapsed_ms() / repeats)
        return float(np.median(times))

    first = replay_ms(1)
    return replay_ms(int(min(200, max(3, REPLAY_MS / max(first, 1e-3))))) * 1e3


def composition_params(cell: Cell) -> dict:
    # The composition's all_to_all: a block of every operand row for every rank (row_bytes a multiple of 4).
    return dict(collective="all_to_all", algorithm="allpairs", dtype="float32", reduce_op="sum",
                count=cell.rows * cell.row_bytes // 4)


def time_composition(cell: Cell) -> float:
    first = cell.vr.timed_graph("collective", repeats=1, replays=1, **composition_params(cell))
    repeats = int(min(200, max(3, REPLAY_MS / max(first, 1e-3))))
    return float(np.median(cell.vr.graph_replay_times("collective", repeats, REPLAYS,
                                                      **composition_params(cell)))) * 1e3


def run_cells(args, profile_only: bool) -> list[dict]:
    from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks

    rows = []
    for exchange, n in [(e, n) for e in args.exchanges for n in args.ranks]:
        largest = max(args.sizes)
        composition_bytes = min(n * largest, args.composition_max)
        buffer = max(largest, composition_bytes) + 4096
        with VirtualRanks(n, buffer_bytes=buffer, scratch_bytes=SCRATCH, channels_per_peer=8, timeout_s=TIMEOUT_S,
                          direct_exchange=exchange == "direct") as vr:
            for size in args.sizes:
                cell = Cell(vr, n, size, args.row_bytes, seed=n * 1000 + size % 997)
                with_composition = (n * cell.rows * cell.row_bytes <= args.composition_max and
                                    exchange == args.exchanges[0])
                if profile_only:  # one call of each between the profiler's start and stop: one range each
                    cell.launch()
                    vr.synchronize()
                    profiler(True)
                    cell.launch()
                    vr.synchronize()
                    profiler(False)
                    if with_composition:
                        vr.launch("collective", **composition_params(cell))
                        vr.synchronize()
                        profiler(True)
                        vr.launch("collective", **composition_params(cell))
                        vr.synchronize()
                        profiler(False)
                    continue
                t = time.time()
                cell.check(INPUT, OUTPUT)
                sent, local = cell.sent_and_local()
                row = {"exchange": exchange, "ranks": n, "size": size, "row_bytes": args.row_bytes, "rows_per_rank": cell.rows,
                       "sent_bytes": sent, "local_bytes": local, "minimum_bytes": 2 * (sent + local),
                       "checked": True, "ragged_us": round(time_ragged(cell), 2),
                       "memcpy_us": round(vr.ranks[0].time_memcpy(size, 20) * 1e3, 2)}
                row["composition_us"] = round(time_composition(cell), 2) if with_composition else None
                row["seconds"] = round(time.time() - t, 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def profile(args, rows: list[dict]) -> tuple[str | None, str | None]:
    """Runs this script's ranges under ncu (_traffic.profile_ranges) and adds the DRAM bytes to ``rows``; returns
    (the replay mode that gave them, None) or (None, what went wrong)."""
    expected = sum(2 if r["composition_us"] is not None else 1 for r in rows)
    command = [sys.executable, os.path.abspath(__file__), "--profile-only",
               "--ranks", ",".join(map(str, args.ranks)), "--sizes", ",".join(map(str, args.sizes)),
               "--row-bytes", str(args.row_bytes), "--composition-max", str(args.composition_max),
               "--exchanges", ",".join(args.exchanges)]
    mode, values, note = profile_ranges(command, expected, args.ncu_timeout)
    if mode is not None:
        at = 0
        for r in rows:
            r["ragged_dram_bytes"] = values[at]
            r["ragged_traffic_ratio"] = round(values[at] / r["minimum_bytes"], 3)
            at += 1
            if r["composition_us"] is not None:
                r["composition_dram_bytes"] = values[at]
                r["composition_traffic_ratio"] = round(values[at] / r["minimum_bytes"], 3)
                at += 1
    return mode, note


def main(argv=None) -> int:
    parser = record_parser(__doc__.split("\n\n")[0], "ragged-record", ncu_timeout=240.0)
    parser.add_argument("--row-bytes", type=int, default=4096, help="bytes of a row (4096: 2048 bfloat16)")
    parser.add_argument("--exchanges", default="direct,ring", type=lambda s: s.split(","),
                        help="direct (into the receivers' outputs) and/or ring (through the slot rings)")
    parser.add_argument("--composition-max", type=parse_size, default=parse_size("2G"),
                        help="the largest all_to_all operand per rank for the composition's figure")
    args = parser.parse_args(argv)
    if not args.exchanges or set(args.exchanges) - {"direct", "ring"}:
        parser.error("--exchanges: direct, ring or both")
    return run_record(args, run_cells, profile, "ragged-record",
                      record="ragged_all_to_all on virtual ranks",
                      row_bytes=args.row_bytes)


if __name__ == "__main__":
    sys.exit(main())
