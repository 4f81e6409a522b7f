"""Host time of one call, entry to launch, on ranks of one process sharing GPU 0, through both frontends; one JSON
per run.

    python3 bench/kernels/host_time.py [--ranks 1,2,4] [--jax-ranks 2,4,8] [--sizes 1K,1M] [--calls 64]
                                       [--rounds 50] [--commit SHA] [--out DIR]

Paths (a cell's ``path``):

- ``jax``: the JAX path's call entry, GpuRank::run as XLA's handlers call it on XLA's buffers (the handler's own work
  before it is decoding XLA's arguments and one lookup of the rank), on N virtual ranks of tests/harness with the
  grid production gives N ranks sharing a GPU (HarnessRank.time_call_entry), for the algorithm that runs where
  lax cannot (``algorithm``: what the call entry ran, ``in_place`` between ranks of one process). That algorithm is
  the selection's for ranks sharing a GPU with lax ruled out (``jax_plan``: the tuning file's first rule of ours,
  else selection.def's shared-GPU rows), the one our runtime runs when it must run the call itself; a call the
  selection still leaves to lax (no algorithm of ours for it on GPUs) is a cell with ``skipped`` (why) and no time;
- ``nccl``: an NCCL operation call in jax_mscclpp's libnccl.so.2 (``library`` jax_mscclpp) and in NVIDIA's
  (``library`` nvidia), entry point to launch.
- ``floor``: the least a call can take, what the others are read against (tests/harness launch_floor.h): an empty
  kernel launched on a stream (``what`` launch), and the same followed by the two CUDA calls the call entry's issue
  order makes after every call, a capture query and an event record (``what`` launch+issue_order).

A round issues ``calls`` operations of every rank back to back (on the NCCL paths a group of the N ranks' calls
each; one rank calls without a group) and is timed on the host without synchronizing; the streams are synchronized
between rounds, so the launch queue never fills and the round's time is the host's work. Per cell:
``host_us_per_rank_call`` (median over rounds of a round's host time over calls x N; ``_min`` the least), what a
client's thread spends in one rank's call. The NCCL cells run nccl_host_time.c (compiled here with the system C
compiler against the CUDA runtime beside the nvcc on PATH), one process per cell, and add ``us_per_operation``
(median of a round's time to the streams' end over calls), which the GPU bounds where its kernels are slower than
the host. NVIDIA's NCCL refuses ranks sharing a GPU, so it is measured with one rank only, the same call on the
same buffers (a single rank copies, in either library): the comparison of the two libraries' host paths.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)
if REPO not in sys.path:
    sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from _traffic import parse_size, write_record  # noqa: E402

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
SCRATCH = 64 << 20


def build(directory: str) -> str:
    """nccl_host_time.c compiled against the CUDA runtime beside the nvcc on PATH."""
    nvcc = shutil.which("nvcc")
    cuda = os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else "/usr/local/cuda"
    binary = os.path.join(directory, "nccl_host_time")
    subprocess.run(["cc", "-O2", "-I", os.path.join(cuda, "include"), os.path.join(HERE, "nccl_host_time.c"), "-o",
                    binary, "-L", os.path.join(cuda, "lib64"), "-Wl,-rpath," + os.path.join(cuda, "lib64"),
                    "-lcudart", "-ldl", "-lpthread"], check=True)
    return binary


def libraries() -> dict[str, str]:
    """Library label -> path: ours, and NVIDIA's where the nvidia-nccl wheel is installed."""
    from jax_mscclpp import nccl_backend

    found = {"jax_mscclpp": nccl_backend.library_path()}
    real = nccl_backend.real_nccl_path()
    if real:
        found["nvidia"] = real
    return found


def run_cell(binary: str, library: str, collective: str, n: int, size: int, calls: int, rounds: int,
             env: dict) -> dict:
    out = subprocess.run([binary, library, collective, str(n), str(size), str(calls), str(rounds)], text=True,
                         capture_output=True, timeout=300, env=env)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip()[-400:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def buffer_count(collective: str, size: int, n: int) -> int:
    """Elements of a block (float32) of a cell: all-reduce's whole buffer, the others' block per rank."""
    return size // 4 if collective == "all_reduce" else size // 4 // n


PLATFORM = "gpu"  # the selection's platform of a CUDA device (the JAX path's, the rules' and selection.def's)
JAX_NOTE = ("jax cells time the algorithm the selection gives ranks sharing a GPU where lax cannot run (the tuning "
            "file's first rule of ours, else selection.def's shared-GPU rows): what our call entry runs when it must "
            "run the call itself; a call the selection still leaves to lax is a cell with skipped and no time")


def jax_plan(ranks: list[int], sizes: list[int], collectives: list[str]) -> list[dict]:
    """The JAX path's cells to time, without a GPU: per world, collective and size the algorithm the call entry is
    asked for (module docstring), or ``skipped`` (why) where the selection names no kernel algorithm of ours."""
    from jax_mscclpp import selection
    from jax_mscclpp._codes import Collective
    from tests.harness.virtual_ranks import ALGORITHM_CODES

    plan = []
    for n in ranks:
        for collective in collectives:
            for size in sizes:
                cell = {"path": "jax", "collective": collective, "ranks": n, "bytes": size}
                asked = selection._ours_where_lax_cannot_run(Collective[collective.upper()], PLATFORM, size, n)
                if asked == "lax":
                    cell["skipped"] = "the selection leaves this call to lax even where lax cannot run"
                elif asked not in ALGORITHM_CODES:
                    cell["skipped"] = f"the selection runs it as {asked!r}, not one kernel algorithm of the call entry"
                else:
                    cell["algorithm"] = asked
                plan.append(cell)
    return plan


def jax_cells(ranks: list[int], sizes: list[int], collectives: list[str], calls: int, rounds: int) -> list[dict]:
    """The JAX path's call entry on virtual ranks, the cells of ``jax_plan`` (module docstring)."""
    import numpy as np

    from tests.harness import native_module
    from tests.harness.virtual_ranks import VirtualRanks, make_params

    plan = jax_plan(ranks, sizes, collectives)
    cells = []
    for n in ranks:
        with VirtualRanks(n, buffer_bytes=max(sizes) + 4096, scratch_bytes=SCRATCH, channels_per_peer=8,
                          timeout_s=30.0, stream_blocks=native_module().production_stream_blocks(n)) as vr:
            for cell in (c for c in plan if c["ranks"] == n):
                if "skipped" not in cell:
                    params = dict(collective=cell["collective"], algorithm=cell["algorithm"], dtype="float32",
                                  reduce_op="sum", count=buffer_count(cell["collective"], cell["bytes"], n))
                    cell["algorithm"] = vr.call_algorithm(**params)
                    rounds_us = vr.cuda.HarnessRank.time_call_entry(vr.ranks, make_params(vr.cuda, "collective",
                                                                                          **params), calls, rounds)
                    cell["host_us_per_rank_call"] = round(float(np.median(rounds_us)), 3)
                    cell["host_us_per_rank_call_min"] = round(float(min(rounds_us)), 3)
                cells.append(cell)
                print(json.dumps(cell), flush=True)
    return cells


def floor_cells(calls: int, rounds: int) -> list[dict]:
    """The launch floor's cells (module docstring)."""
    import numpy as np

    from tests.harness import native_module

    cells = []
    for what, issue_order_calls in (("launch", False), ("launch+issue_order", True)):
        rounds_us = native_module().time_launch_floor(0, calls, rounds, issue_order_calls)
        cell = {"path": "floor", "what": what, "host_us_per_call": round(float(np.median(rounds_us)), 3),
                "host_us_per_call_min": round(float(min(rounds_us)), 3)}
        cells.append(cell)
        print(json.dumps(cell), flush=True)
    return cells


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="1,2,4", help="ranks of the NCCL cells (ours; NVIDIA's: 1)")
    parser.add_argument("--jax-ranks", default="2,4,8", help="virtual ranks of the JAX cells")
    parser.add_argument("--sizes", default="1K,1M")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--calls", type=int, default=64, help="operations per round (calls x ranks < 1024)")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--commit")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    args.ncu = False
    started = time.time()
    ranks = [int(r) for r in args.ranks.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    env.pop("JAX_MSCCLPP_NVLS", None)
    cells = []
    with tempfile.TemporaryDirectory() as directory:
        binary = build(directory)
        for label, path in libraries().items():
            for collective in args.collectives.split(","):
                for n in ranks if label == "jax_mscclpp" else [1]:
                    for size in sizes:
                        measured = run_cell(binary, path, collective, n, size, args.calls, args.rounds, env)
                        cell = {"path": "nccl", "library": label, **measured}
                        cell.setdefault("collective", collective)
                        cell.setdefault("ranks", n)
                        cell.setdefault("bytes", size)
                        cells.append(cell)
                        shown = {k: v for k, v in cell.items() if k not in ("calls", "rounds")}
                        print(json.dumps(shown), flush=True)
    cells += floor_cells(args.calls, args.rounds)
    cells += jax_cells([int(r) for r in args.jax_ranks.split(",")], sizes, args.collectives.split(","), args.calls,
                       args.rounds)
    write_record("host-time", cells, args, started, None, None, record="jax_mscclpp.host_time/1", calls=args.calls,
                 rounds=args.rounds, notes=[JAX_NOTE])
    return 1 if any("error" in c for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
