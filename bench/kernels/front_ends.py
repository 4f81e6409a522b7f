"""One algorithm through every front end, on the same virtual ranks of one GPU: the two-phase all-pairs all-reduce
written in our DSL, in MSCCLang (chunk routing), in MSCCL++'s chunk API, loaded back from the MSCCL-IR and the
MSCCL++ JSON those write, and the hand-written kernel.

    python bench/kernels/front_ends.py [--nranks 2,4,8] [--protocols LL,HB] [--sizes 1M] [--front-ends msccl]
                                       [--out FILE] [--quick]

Per protocol (LL packets, HB puts and signals), world size N and message size (bytes per rank, float32 sum
all-reduce), each plan runs on the GPU executor (tests/harness/plan_ranks.py) with 1, 4 and 16 instances (HB also 64,
the streaming kernel's grid on 2 ranks), the fastest kept, and the hand-written kernel (``2pa_ll`` / ``2pa_hb``,
launch_collective) on the same ranks, the streaming kernels on the grid production gives N ranks sharing the GPU
(``production_stream_blocks``). Plans:

- ``dsl``: ``jax_mscclpp.dsl.library``'s ``allreduce_2pa_ll`` / ``allreduce_2pa_hb``;
- ``msccl``: tests/dsl/msccl_programs.py's ``allreduce_allpairs`` (protocol LL / Simple), lowered by
  ``jax_mscclpp.dsl.msccl`` (each rank's thread blocks merged, ``thread_block_merge``); ``msccl_ir``: its
  ``generate_xml()`` through ``load_plan``; ``msccl_per_peer``: the program's plan before the merge, a thread
  block per peer and one that reduces, as MSCCL-IR schedules it;
- ``mscclpp``: tests/dsl/mscclpp_chunk_programs.py's ``allreduce_allpairs_ll`` / ``allreduce_two_phase`` (one thread
  block a rank, as written), lowered by ``jax_mscclpp.dsl.mscclpp``; ``mscclpp_json``: its ``to_json()`` through
  ``load_plan``.

``--protocols``, ``--sizes`` (bytes per rank, K/M suffixes, among each protocol's) and ``--front-ends`` (beside ``dsl``,
always run: the reference) run a slice of the table. A run stopped by SIGTERM (``timeout``) still writes the rows
of the world sizes it finished, marked ``partial``.

Every plan and the kernel are checked once against numpy before they are timed. Virtual ranks share one GPU, so
a plan runs only where every rank's blocks are resident at once (PlanRanks.check_resident); one that does not fit
is listed under ``not_resident``, not run, and its front end's row is its other instance count's. Timing as
bench/kernels/executor.py: ``repeats`` back-to-back calls on every rank released together from launch gates, events
around them, the median over ``samples`` batches, microseconds per call. ``vs_dsl`` and ``vs_kernel``: a plan's time
over the DSL plan's and the kernel's.
"""

from __future__ import annotations

import argparse
import signal
import sys

import _run  # noqa: E402  (bench/kernels/_run.py: the environment, the results folder)

import numpy as np  # noqa: E402

from jax_mscclpp.dsl import library, load_plan  # noqa: E402
from tests.dsl import msccl_programs, mscclpp_chunk_programs  # noqa: E402
from executor import add_timing_arguments, check_once, us_per_call  # noqa: E402  (bench/kernels/executor.py: one all-reduce against numpy)
from tests.harness.plan_ranks import NotResidentError, PlanRanks  # noqa: E402
from tests.harness.virtual_ranks import ALGORITHM_CODES, device_run_header, native_cuda  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SCRATCH = 64 * MiB
# protocol -> instance counts tried: the hand-written LL kernel runs up to 16 blocks a rank (kLLMaxBlocks); the
# streaming kernel production's grid, 64 blocks a rank on 2 ranks (production_stream_blocks)
INSTANCES = {"LL": (1, 4, 16), "HB": (1, 4, 16, 64)}


def plan_makers(dsl_program: str, msccl_protocol: str, chunk_program) -> dict:
    """name -> (n, instances) -> plan: one all-pairs all-reduce written in each front-end (the DSL library's
    ``dsl_program``, MSCCLang's all-pairs program over ``msccl_protocol``, MSCCL++'s ``chunk_program``), each
    front-end's program lowered directly and, for MSCCLang and MSCCL++, also through its plan file."""
    return {
        "dsl": lambda n, k: library.PROGRAMS[dsl_program](n).lower(instances=k),
        "msccl": lambda n, k: msccl_programs.allreduce_allpairs(n, msccl_protocol, k).lower(),
        "msccl_ir": lambda n, k: load_plan(msccl_programs.allreduce_allpairs(n, msccl_protocol, k).generate_xml()),
        "msccl_per_peer": lambda n, k: msccl_programs.allreduce_allpairs(n, msccl_protocol, k).to_program().lower(
            instances=k),
        "mscclpp": lambda n, k: chunk_program(n, k).plan(),
        "mscclpp_json": lambda n, k: load_plan(chunk_program(n, k).to_json()),
    }


# protocol -> (hand-written algorithm, sizes, plan makers)
PROTOCOLS = {
    "LL": ("2pa_ll", [4 * KiB, 64 * KiB, 1 * MiB],
           plan_makers("allreduce_2pa_ll", "LL", mscclpp_chunk_programs.allreduce_allpairs_ll)),
    "HB": ("2pa_hb", [64 * KiB, 1 * MiB, 16 * MiB],
           plan_makers("allreduce_2pa_hb", "Simple", mscclpp_chunk_programs.allreduce_two_phase)),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--nranks", default="2,4,8")
    add_timing_arguments(ap)
    ap.add_argument("--quick", action="store_true", help="4 ranks, the LL protocol, one size")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--sizes", default=None, help="bytes per rank to run, e.g. 4K,1M (default: each protocol's)")
    ap.add_argument("--front-ends", default=None, help="front ends beside dsl (default: all)")
    args = ap.parse_args()
    cuda = native_cuda()
    if cuda is None or cuda.device_count() < 1:
        sys.exit("needs the CUDA build and a GPU")
    rows, not_resident = [], []  # not_resident: plans whose blocks on every rank do not fit the GPU at once
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    try:
        run_table(args, cuda, rows, not_resident)
    finally:
        result = {
            **device_run_header("front_ends", cuda),
            "conventions": "all_reduce f32 sum, bytes per rank, virtual ranks of one GPU; us per call = median over "
                           "samples of (events around `repeats` back-to-back calls on every rank released together) "
                           "/ repeats; a plan's best of 1, 4 and 16 instances (HB: and 64); vs_dsl, vs_kernel: its "
                           "time over theirs",
            "rows": rows,
            "not_resident": not_resident,
        }
        if sys.exc_info()[0] is not None:
            result["partial"] = True
        _run.write_result(result, "front-ends", args.out)


def parse_bytes(text: str) -> int:
    """4096, 4K, 1M -> bytes."""
    scale = {"K": KiB, "M": MiB}.get(text[-1:].upper(), 1)
    return int(text[:-1] if scale != 1 else text) * scale


def run_table(args, cuda, rows: list, not_resident: list) -> None:
    """The table's rows (the slice the arguments ask for), appended to ``rows`` one world size at a time."""
    rng = np.random.default_rng(0)
    worlds = [4] if args.quick else [int(n) for n in args.nranks.split(",")]
    wanted_sizes = None if args.sizes is None else {parse_bytes(x) for x in args.sizes.split(",")}
    wanted_front_ends = None if args.front_ends is None else {"dsl", *args.front_ends.split(",")}
    for protocol, (kernel, sizes, makers) in PROTOCOLS.items():
        if protocol not in args.protocols.split(",") or (args.quick and protocol != "LL"):
            continue
        sizes = sizes[:1] if args.quick else [b for b in sizes if wanted_sizes is None or b in wanted_sizes]
        if not sizes:
            continue
        for n in worlds:
            # name -> size -> (best us, instances, error); the kernel's on the DSL plan's ranks
            best: dict[str, dict[int, tuple]] = {}
            for name, make in makers.items():
                if wanted_front_ends is not None and name not in wanted_front_ends:
                    continue
                for k in INSTANCES[protocol]:
                    plan = make(n, k)
                    try:
                        ranks = PlanRanks(plan, max_block_count=max(sizes) // 4, itemsize=4, scratch_bytes=SCRATCH,
                                          timeout_s=30, stream_blocks=cuda.production_stream_blocks(n))
                    except ValueError as why:  # set_plan refuses a rank whose own blocks exceed the GPU's
                        not_resident.append({"protocol": protocol, "nranks": n, "front_end": name,
                                             "instances": k, "why": str(why)})
                        print(f"{protocol} n={n} {name} k={k}: not run ({why})", flush=True)
                        continue
                    with ranks as pr:
                        if name == "dsl" and k == INSTANCES[protocol][0]:  # the kernel, on the same ranks
                            algorithm = ALGORITHM_CODES[kernel]
                            for nbytes in sizes:
                                error = check_once(pr, nbytes // 4, rng, algorithm)
                                best.setdefault("kernel", {})[nbytes] = (us_per_call(pr, nbytes, args, algorithm), None, error)
                        try:
                            pr.check_resident("float32")
                        except NotResidentError as why:
                            not_resident.append({"protocol": protocol, "nranks": n, "front_end": name,
                                                 "instances": k, "why": str(why)})
                            print(f"{protocol} n={n} {name} k={k}: not run ({why})", flush=True)
                            continue
                        for nbytes in sizes:
                            error = check_once(pr, nbytes // 4, rng, None)
                            t = us_per_call(pr, nbytes, args)
                            if nbytes not in best.setdefault(name, {}) or t < best[name][nbytes][0]:
                                best[name][nbytes] = (t, k, error)
            for nbytes in sizes:
                dsl_us, kernel_us = best.get("dsl", {}).get(nbytes, (None,))[0], best["kernel"][nbytes][0]
                for name, by_size in best.items():
                    t, k, error = by_size[nbytes]
                    row = {"protocol": protocol, "nranks": n, "bytes": nbytes, "front_end": name, "us": round(t, 2),
                           "instances": k, "max_rel_error": error,
                           "vs_dsl": round(t / dsl_us, 3) if dsl_us else None, "vs_kernel": round(t / kernel_us, 3)}
                    rows.append(row)
                    versus = f"x{row['vs_dsl']:.2f} of dsl" if dsl_us else "no dsl time"
                    print(f"{protocol} n={n} {nbytes:>9d} B  {name:13s} {t:9.2f} us  k={k}  {versus}  "
                          f"x{row['vs_kernel']:.2f} of kernel", flush=True)


if __name__ == "__main__":
    main()
