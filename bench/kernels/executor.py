"""The plan executor against the hand-written collective kernels, on the same virtual ranks of one GPU.

    python bench/kernels/executor.py [--out bench/results/executor-<date>.json] [--nranks 8] [--quick]

For each message size (bytes per rank, f32 sum all_reduce), one set of N virtual ranks runs
  - the executor interpreting a DSL plan (jax_mscclpp.dsl.library), lowered with as many instances (thread blocks)
    as the hand-written kernel launches blocks for that size, with the same threads per block;
  - the hand-written kernel of the same algorithm through launch_collective (kernels/collectives).
Both use the same contexts, channels and scratch layout, so the difference is the interpretation: the program
image copied into shared memory, the per-step dispatch and chunk arithmetic, and the operation boundaries.

Timing: `repeats` back-to-back calls on every rank are queued behind launch gates and released together (no
host gaps between launches); events on rank 0's stream, joined by every other rank's, time them. Each entry is
the median over `samples` such batches, in microseconds per call. overhead_pct = executor / hand-written - 1.
Before timing, one call of each is checked against numpy.
"""

from __future__ import annotations

import argparse
import json
import sys

import _run  # noqa: E402  (bench/kernels/_run.py: the environment, the results folder)

import numpy as np  # noqa: E402

from jax_mscclpp.dsl import library  # noqa: E402
from tests.harness.plan_ranks import INPUT, OUTPUT, PlanRanks  # noqa: E402
from tests.harness.virtual_ranks import (  # noqa: E402
    ALGORITHM_CODES,
    COLLECTIVE_CODES,
    device_run_header,
    native_cuda,
)

KiB, MiB = 1 << 10, 1 << 20
ALL_REDUCE = COLLECTIVE_CODES["all_reduce"]
# The hand-written algorithm of each library program compared.
ALGORITHMS = {f"allreduce_{name}": ALGORITHM_CODES[name] for name in ("1pa_ll", "2pa_ll", "2pa_hb")}
THREADS = 256  # the hand-written LL kernels' block size


def hand_written_blocks(nbytes: int) -> int:
    """The grid the 1PA-LL launcher picks (about 8 KiB per block, 1..16 blocks) for one piece."""
    piece = min(nbytes, 256 * KiB)
    return max(1, min(16, (piece + 8191) // 8192))


def add_timing_arguments(ap: argparse.ArgumentParser, samples: int = 7) -> None:
    """--repeats (back-to-back calls a sample) and --samples (batches; the median is kept)."""
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--samples", type=int, default=samples)


def us_per_call(pr: PlanRanks, nbytes: int, args, algorithm: int | None = None) -> float:
    """Microseconds per call of the bound plan (or with ``algorithm`` the hand-written kernel) on ``nbytes`` of
    float32 a rank: the median over ``args.samples`` batches of up to ``args.repeats`` back-to-back calls."""
    count = nbytes // 4
    launches = pr.launch_count(count, "float32")
    repeats = max(4, min(args.repeats, 64 // max(1, launches)))  # a full launch queue would block the gates
    extra = {} if algorithm is None else {"collective": ALL_REDUCE, "algorithm": algorithm}
    return 1e3 * float(np.median(pr.time(count, "float32", "sum", repeats=repeats, samples=args.samples, **extra)))


def check_once(pr: PlanRanks, count: int, rng, collective_algorithm: int | None) -> float:
    """One call (plan, or the hand-written kernel) against numpy; returns the max relative error."""
    data = [rng.standard_normal(count).astype(np.float32) for _ in range(pr.nranks)]
    for r in range(pr.nranks):
        pr.upload(r, INPUT, data[r])
        pr.fill(r, OUTPUT, 0xEE)
    if collective_algorithm is None:
        pr.launch(count, "float32", "sum")
    else:
        pr.launch_collective(ALL_REDUCE, collective_algorithm, count, "float32", "sum")
    pr.synchronize()
    want = np.sum(np.stack([d.astype(np.float64) for d in data]), axis=0)
    worst = 0.0
    for r in range(pr.nranks):
        got = pr.download(r, OUTPUT, count * 4, dtype=np.float32).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--nranks", type=int, default=8)
    add_timing_arguments(ap, samples=9)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    cuda = native_cuda()
    if cuda is None or cuda.device_count() < 1:
        sys.exit("needs the CUDA build and a GPU")
    n = args.nranks
    sizes = [1 * KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB]
    programs = ["allreduce_1pa_ll"] if args.quick else list(ALGORITHMS)
    rng = np.random.default_rng(0)
    scratch = 64 * MiB  # LL halves of 4 MiB (the collectives' cap), HB halves of 28 MiB
    rows = []

    def make_ranks(name: str, instances: int) -> PlanRanks:
        plan = library.PROGRAMS[name](n).lower(instances=instances)
        return PlanRanks(plan, max_block_count=max(sizes) // 4, itemsize=4, scratch_bytes=scratch, threads=THREADS,
                         timeout_s=30)

    for name in programs:
        algorithm = ALGORITHMS[name]
        # 1PA-LL: the plan gets as many thread blocks as the hand-written kernel launches blocks. The 2PA kernels
        # split their chunks over blocks their own way: the plan runs with 1, 2, 4 and 8 instances and the
        # fastest counts. One set of ranks lives at a time (each rank's stream keeps its own hardware queue).
        choices = {b: ([hand_written_blocks(b)] if name == "allreduce_1pa_ll" else [1, 2, 4, 8]) for b in sizes}
        plan_runs = {b: [] for b in sizes}
        hand = {}
        for instances in sorted({k for ks in choices.values() for k in ks}):
            pr = make_ranks(name, instances)
            try:
                for nbytes in sizes:
                    if instances not in choices[nbytes]:
                        continue
                    count = nbytes // 4
                    err = check_once(pr, count, rng, None)
                    # At most ~64 launches queued per stream behind a gate (a full launch queue would block the
                    # host before it opens the gates).
                    repeats = max(4, min(args.repeats, 64 // max(1, pr.launch_count(count, "float32"))))
                    # The hand-written kernel runs on the ranks with the most channels per peer (HB kernels run a
                    # block per channel index).
                    with_hand = instances == max(choices[nbytes])
                    if with_hand:
                        hand[nbytes] = ([], check_once(pr, count, rng, algorithm))
                    t_plan = []
                    for _ in range(2):  # interleaved rounds: drift shows as spread, not as overhead
                        t_plan += pr.time(count, "float32", "sum", repeats=repeats, samples=args.samples)
                        if with_hand:
                            hand[nbytes][0].extend(pr.time(count, "float32", "sum", repeats=repeats,
                                                           samples=args.samples, collective=ALL_REDUCE,
                                                           algorithm=algorithm))
                    plan_runs[nbytes].append({"instances": instances, "times": t_plan, "error": err, "repeats": repeats,
                                              "launches": pr.launch_count(count, "float32"),
                                              "plan": pr.ranks[0].plan_info()})
            finally:
                pr.close()
        for nbytes in sizes:
            best = min(plan_runs[nbytes], key=lambda x: float(np.median(x["times"])))
            t_plan, (t_hand, err_hand) = best["times"], hand[nbytes]
            us_plan, us_hand = 1e3 * float(np.median(t_plan)), 1e3 * float(np.median(t_hand))
            row = {
                "program": name,
                "hand_written_algorithm": algorithm,
                "bytes": nbytes,
                "instances": best["instances"],
                "instances_tried_us": {str(x["instances"]): 1e3 * float(np.median(x["times"])) for x in plan_runs[nbytes]},
                "threads": THREADS,
                "launches_per_call": best["launches"],
                "repeats": best["repeats"],
                "executor_us": us_plan,
                "hand_written_us": us_hand,
                "overhead_pct": 100.0 * (us_plan / us_hand - 1.0),
                "executor_us_p10_p90": [1e3 * float(np.percentile(t_plan, q)) for q in (10, 90)],
                "hand_written_us_p10_p90": [1e3 * float(np.percentile(t_hand, q)) for q in (10, 90)],
                "max_rel_error": {"executor": best["error"], "hand_written": err_hand},
                "plan": best["plan"],
            }
            rows.append(row)
            print(f"{name:18s} {nbytes:>8d} B  k={best['instances']:2d}  executor {us_plan:8.2f} us  "
                  f"hand-written {us_hand:8.2f} us  overhead {row['overhead_pct']:+6.1f} %", flush=True)

    summary = {}
    for name in programs:
        pct = [r["overhead_pct"] for r in rows if r["program"] == name]
        summary[name] = {"median_overhead_pct": float(np.median(pct)), "max_overhead_pct": float(np.max(pct))}
    result = {
        **device_run_header("executor", cuda),
        "conventions": "all_reduce f32 sum, bytes per rank; us per call = median over samples of (events around "
                       "`repeats` back-to-back calls on every rank released together from launch gates) / repeats; "
                       "overhead_pct = executor_us / hand_written_us - 1",
        "nranks": n,
        "virtual_ranks_on_one_gpu": True,
        "repeats": args.repeats,
        "samples": 2 * args.samples,
        "note": "1PA-LL: plan instances = the hand-written kernel's block count (matched grids). 2PA-LL/HB: the "
                "hand-written kernels split chunks over blocks their own way; the plan's best of 1/2/4/8 instances "
                "is reported, so those rows compare two implementations, not only the interpretation cost.",
        "rows": rows,
        "summary": summary,
    }
    print(json.dumps(summary, indent=1))
    _run.write_result(result, "executor", args.out)


if __name__ == "__main__":
    main()
