"""Kernel time of every collective algorithm of kernels/collectives on virtual ranks (N ranks on ONE GPU), and of
ppermute's on a ring shift (with the fraction of the GPU's memcpy rate it reaches), written as JSON under
bench/results/.

    python bench/kernels/collectives.py [--nranks 8] [--out bench/results/collectives-<date>.json] [--quick]
        [--sizes B,B,...] [--algorithms A,A,...] [--stream-blocks G] [--stream-chunk B] [--stream-slots S]

The streaming kernels run on the grid production gives N ranks sharing one GPU (``production_stream_blocks``,
runtime/gpu/rank_context.h) unless --stream-blocks says otherwise; the record's setup names the grid, chunk and
slots.

(with the package installed from this checkout, e.g. `pip install -e .`, which builds the harness module on a
machine with a GPU.)

Every rank captures `repeats` calls of launch_collective into a CUDA graph on its own stream (as XLA command
buffers record a custom call); the graphs are replayed, and the time between events on rank 0's stream around
one replay of every rank's graph, divided by `repeats`, is the time per call (median of 3 replays after a
warm-up replay).

What this measures: all N ranks share one GPU's SMs, HBM and (for 2PR) one proxy thread, and "peer" traffic is
device-local memory traffic, not NVLink. So these are kernel-efficiency and latency-floor numbers (how long the
kernels take to move and reduce the bytes through the memory system with every rank resident at once), not
NVLink bandwidth or multi-GPU speed: algbw/busbw follow the nccl-tests conventions only to make sizes comparable.
"""

from __future__ import annotations

import argparse
import sys
import time

import _run  # noqa: E402  (bench/kernels/_run.py: the environment, the results folder)

import numpy as np  # noqa: E402

from jax_mscclpp.tools.bench.metrics import bus_factor  # noqa: E402

from tests.harness.virtual_ranks import (  # noqa: E402
    device_run_header,
    ALGORITHM_CODES,
    COLLECTIVE_CODES,
    DTYPE_CODES,
    INPUT,
    VirtualRanks,
    native_cuda,
)

KiB, MiB = 1 << 10, 1 << 20
# "in_place": the kernel over the buffers the ranks post, which the call entry runs in place of the streaming ones
# between ranks of one process (virtual ranks are: collective.h, direct_algorithm).
COMBOS = [("all_reduce", a) for a in ("1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "2pr", "2pa_nvls", "in_place")] + [
    (c, a) for c in ("all_gather", "reduce_scatter", "all_to_all")
    for a in ("allpairs_ll", "allpairs_hb", "allpairs", "in_place")
]


# ppermute's algorithms, timed on a ring shift (every rank sends its block to the next: every rank sends and
# receives, as in a ring step of a collective matmul).
PERMUTE_ALGORITHMS = ("p2p_ll", "p2p_hb", "p2p")


def shift_destinations(n: int) -> tuple[int, int]:
    """The harness's destination words of the ring shift i -> i + 1 (byte r: rank r's destination)."""
    table = [(i + 1) % n for i in range(n)] + [0xFF] * (16 - n)
    return (sum(d << (8 * i) for i, d in enumerate(table[:8])), sum(d << (8 * i) for i, d in enumerate(table[8:])))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nranks", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer sizes")
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop adding sizes after this many seconds")
    ap.add_argument("--sizes", default=None, help="comma-separated byte counts, in place of the default sizes")
    ap.add_argument("--algorithms", default=None, help="comma-separated algorithms to time (default: every one)")
    ap.add_argument("--stream-blocks", type=int, default=0,
                    help="the streaming kernels' most blocks per rank (default: production's for N ranks on one GPU)")
    ap.add_argument("--stream-chunk", type=int, default=0, help="their largest chunk, bytes (default: the setting)")
    ap.add_argument("--stream-slots", type=int, default=0, help="their slots (default: the setting)")
    args = ap.parse_args()

    cuda = native_cuda()
    if cuda is None or cuda.device_count() < 1:
        sys.exit("needs the CUDA build and a GPU")
    n = args.nranks
    sizes = [KiB, 16 * KiB, 256 * KiB, 4 * MiB, 32 * MiB] if not args.quick else [KiB, 256 * KiB, 4 * MiB]
    if args.sizes:
        sizes = [int(v) for v in args.sizes.split(",")]
    wanted = set(args.algorithms.split(",")) if args.algorithms else None
    combos = [c for c in COMBOS if wanted is None or c[1] in wanted]
    permute_algorithms = [a for a in PERMUTE_ALGORITHMS if wanted is None or a in wanted]
    blocks = args.stream_blocks or cuda.production_stream_blocks(n)
    _, _, max_chunk, slots = cuda.stream_settings()
    scratch, cpp = 64 * MiB, 8
    buffer = max(sizes) + 4 * KiB
    dtype = "float32"

    result = {
        **device_run_header("collectives", cuda),
        "setup": {"nranks": n, "ranks_per_gpu": n, "scratch_bytes": scratch, "channels_per_peer": cpp,
                  "dtype": dtype, "op": "sum", "stream_blocks": blocks,
                  "stream_chunk": args.stream_chunk or max_chunk, "stream_slots": args.stream_slots or slots,
                  "timing": "CUDA graph of `repeats` calls per rank, events on rank 0, median of 3 replays"},
        "notes": "N virtual ranks on ONE GPU: every rank's kernel shares the SMs, HBM and one proxy thread; peer "
                 "traffic is local memory traffic, not NVLink. Kernel efficiency and latency floors only, not "
                 "multi-GPU bandwidth. bytes: all_reduce the vector, all_gather the output, reduce_scatter and "
                 "all_to_all the input (per rank).",
        "rows": [],
    }

    t_start = time.monotonic()
    with VirtualRanks(n, buffer_bytes=buffer, scratch_bytes=scratch, channels_per_peer=cpp, port_channels=True,
                      stream_blocks=blocks, stream_chunk=args.stream_chunk, stream_slots=args.stream_slots) as vr:
        rng = np.random.default_rng(0)
        for r in range(n):
            vr.upload(r, INPUT, rng.standard_normal(buffer // 4).astype(np.float32))
        copied = min(32 * MiB, max(sizes))  # within the buffers (--quick makes them smaller)
        memcpy_ms = vr.ranks[0].time_memcpy(copied, 20)
        result["memcpy"] = {"bytes": copied, "ms": memcpy_ms,
                            "GBps_read_plus_write": 2 * copied / (memcpy_ms * 1e-3) / 1e9}
        for nbytes in sizes:
            if time.monotonic() - t_start > args.budget_s:
                print(f"time budget spent: skipping {nbytes} B and above", flush=True)
                break
            for collective, algorithm in combos:
                per_rank = n if collective != "all_reduce" else 1
                count = max(1, nbytes // 4 // per_rank)
                launches = cuda.collective_launch_count(COLLECTIVE_CODES[collective], ALGORITHM_CODES[algorithm],
                                                        count, DTYPE_CODES[dtype], n, scratch)
                params = dict(collective=collective, algorithm=algorithm, dtype=dtype, reduce_op="sum", count=count)
                first = vr.timed("collective", repeats=1, **params)  # warm-up and a coarse time
                repeats = int(min(200, max(3, 10.0 / max(first, 1e-3))))
                ms = vr.timed_graph("collective", repeats=repeats, **params)
                moved = count * per_rank * 4
                algbw = moved / (ms * 1e-3) / 1e9
                row = {"collective": collective, "algorithm": algorithm, "bytes": moved, "count": count,
                       "launches": launches, "repeats": repeats, "time_us": ms * 1e3, "algbw_GBps": algbw,
                       "busbw_GBps": algbw * bus_factor(collective, n)}
                result["rows"].append(row)
                print(f"{collective:15s} {algorithm:12s} {moved:>10d} B  {ms * 1e3:10.2f} us  launches {launches:4d}"
                      f"  algbw {algbw:8.2f} GB/s", flush=True)
            lo, hi = shift_destinations(n)
            for algorithm in permute_algorithms:
                count = max(1, nbytes // 4)
                params = dict(algorithm=algorithm, dtype=dtype, count=count, destinations_lo=lo,
                              destinations_hi=hi)
                first = vr.timed("permute", repeats=1, **params)
                repeats = int(min(200, max(3, 10.0 / max(first, 1e-3))))
                ms = vr.timed_graph("permute", repeats=repeats, **params)
                moved = count * 4
                algbw = moved / (ms * 1e-3) / 1e9
                # Every rank's block crosses once: n blocks per call, against memcpy's read + write rate.
                row = {"collective": "permute", "algorithm": algorithm, "bytes": moved, "count": count,
                       "repeats": repeats, "time_us": ms * 1e3, "algbw_GBps": algbw, "all_ranks_GBps": n * algbw,
                       "of_memcpy": n * algbw * 2 / result["memcpy"]["GBps_read_plus_write"]}
                result["rows"].append(row)
                print(f"{'permute':15s} {algorithm:12s} {moved:>10d} B  {ms * 1e3:10.2f} us  all ranks "
                      f"{n * algbw:8.2f} GB/s ({row['of_memcpy']:.2f} of memcpy)", flush=True)
        result["proxy"] = dict(cuda.proxy_status(0))

    _run.write_result(result, "collectives", args.out)

    # Short table last: time per call (us) by size, one line per algorithm.
    print(f"\nus per call, {n} ranks on one GPU, f32 sum")
    print(f"{'':28s}" + "".join(f"{s:>11d}" for s in sizes))
    for collective, algorithm in combos + [("permute", a) for a in permute_algorithms]:
        cells = {r["bytes"]: r["time_us"] for r in result["rows"]
                 if r["collective"] == collective and r["algorithm"] == algorithm}
        line = f"{collective + '/' + algorithm:28s}"
        for s in sizes:
            hit = [v for b, v in cells.items() if abs(b - s) <= 4 * n]
            line += f"{hit[0]:11.1f}" if hit else f"{'-':>11s}"
        print(line)


if __name__ == "__main__":
    main()
