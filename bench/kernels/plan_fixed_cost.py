"""Where a small plan call's time goes: our DSL's two-phase all-reduces against the hand-written kernels, and the
same plans cut down, on the same virtual ranks of one GPU.

    python bench/kernels/plan_fixed_cost.py [--out FILE] [--instances 1,16] [--variants full,no_operations] [--protocols LL]

For each case (LL packets: 2 ranks at 4 and 64 KiB a rank, 8 ranks at 4 and 64 KiB; puts and signals: 2 and 8
ranks at 64 KiB, 1 and 16 MiB) and instance count whose blocks fit the GPU at once (others are skipped, said on
the way), the plan runs as lowered (``full``), on 256 threads a block instead of the
executor's 512 (``threads_256``: the kernel's register budget is the same, so this isolates the block size), with
every operation removed (``no_operations``: the launch, the program image's load into shared memory, the epoch
and the call check only), and with its first operation only (``first_operation``: one transfer, nothing waited
for); the hand-written kernel (``2pa_ll`` / ``2pa_hb``) runs on the ranks of the first instance count that fits. The full
plan and the kernel are checked against numpy first. Timing as bench/kernels/executor.py: back-to-back calls on
every rank released together from launch gates, the median over samples, microseconds per call.
"""

from __future__ import annotations

import argparse
import copy
import sys

import _run  # noqa: E402  (bench/kernels/_run.py: the environment, the results folder)

import numpy as np  # noqa: E402

from jax_mscclpp.dsl import library  # noqa: E402
from executor import add_timing_arguments, check_once, us_per_call  # noqa: E402  (bench/kernels/executor.py)
from tests.harness.plan_ranks import NotResidentError, PlanRanks  # noqa: E402
from tests.harness.virtual_ranks import ALGORITHM_CODES, device_run_header, native_cuda  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
# (protocol, library program, hand-written algorithm, world size, bytes per rank)
CASES = [
    ("LL", "allreduce_2pa_ll", "2pa_ll", 2, [4 * KiB, 64 * KiB]),
    ("LL", "allreduce_2pa_ll", "2pa_ll", 8, [4 * KiB, 64 * KiB]),
    ("HB", "allreduce_2pa_hb", "2pa_hb", 2, [64 * KiB, 1 * MiB, 16 * MiB]),
    ("HB", "allreduce_2pa_hb", "2pa_hb", 8, [64 * KiB, 1 * MiB, 16 * MiB]),
]


def cut(plan: dict, keep) -> dict:
    """``plan`` with each thread block's operations replaced by ``keep(operations)``."""
    plan = copy.deepcopy(plan)
    for rank in plan["ranks"]:
        for tb in rank["threadblocks"]:
            tb["ops"] = keep(tb["ops"])
    return plan


# variant -> (plan of the lowered plan, threads a block: 0 the executor's default)
VARIANTS = {
    "full": (lambda plan: plan, 0),
    "threads_256": (lambda plan: plan, 256),
    "no_operations": (lambda plan: cut(plan, lambda ops: []), 0),
    "first_operation": (lambda plan: cut(plan, lambda ops: ops[:1]), 0),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--instances", default="1,16")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--protocols", default="LL,HB", help="the cases of these protocols only (comma-separated)")
    add_timing_arguments(ap)
    args = ap.parse_args()
    cuda = native_cuda()
    if cuda is None or cuda.device_count() < 1:
        sys.exit("needs the CUDA build and a GPU")
    rng = np.random.default_rng(0)
    instances = [int(k) for k in args.instances.split(",")]
    variants = {name: VARIANTS[name] for name in args.variants.split(",")}
    rows = []
    for protocol, program, kernel, n, sizes in CASES:
        if protocol not in args.protocols.split(","):
            continue
        kernel_timed = False
        for k in instances:
            lowered = library.PROGRAMS[program](n).lower(instances=k)
            for variant, (make, threads) in variants.items():
                with PlanRanks(make(lowered), max_block_count=max(sizes) // 4, itemsize=4, scratch_bytes=64 * MiB,
                               timeout_s=30, threads=threads, stream_blocks=cuda.production_stream_blocks(n)) as pr:
                    try:
                        pr.check_resident("float32")
                    except NotResidentError as exc:
                        print(f"skipped: {program} on {n} ranks, {k} instances, {variant}: {exc}", flush=True)
                        continue
                    for nbytes in sizes:
                        row = {"protocol": protocol, "nranks": n, "bytes": nbytes, "instances": k, "variant": variant}
                        if variant == "full":
                            row["max_rel_error"] = check_once(pr, nbytes // 4, rng, None)
                            if not kernel_timed:
                                algorithm = ALGORITHM_CODES[kernel]
                                rows.append({**row, "variant": kernel, "instances": None,
                                             "max_rel_error": check_once(pr, nbytes // 4, rng, algorithm),
                                             "us": round(us_per_call(pr, nbytes, args, algorithm), 2)})
                                print(rows[-1], flush=True)
                        rows.append({**row, "us": round(us_per_call(pr, nbytes, args), 2)})
                        print(rows[-1], flush=True)
                    kernel_timed = kernel_timed or variant == "full"
    _run.write_result({
        **device_run_header("plan_fixed_cost", cuda),
        "conventions": "all_reduce f32 sum, bytes per rank, virtual ranks of one GPU; us per call = median over "
                       "samples of (events around `repeats` back-to-back calls on every rank released together) / "
                       "repeats; variants: module docstring",
        "rows": rows,
    }, "plan-fixed-cost", args.out)


if __name__ == "__main__":
    main()
