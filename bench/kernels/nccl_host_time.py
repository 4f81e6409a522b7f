"""Host time of one NCCL operation call, entry point to launch, in jax_mscclpp's libnccl.so.2 and in NVIDIA's, on
ranks of one process sharing GPU 0; one JSON per run.

    python3 bench/kernels/nccl_host_time.py [--ranks 1,2,4] [--sizes 1K,1M] [--calls 64] [--rounds 50]
                                            [--commit SHA] [--out DIR]

Compiles nccl_host_time.c (the system C compiler against the CUDA runtime of the nvcc on PATH) and runs it per cell
(library, collective, N ranks, S bytes). A round issues ``calls`` operations of every rank back to back (a group of
the N ranks' calls each; one rank calls without a group) and is timed on the host without synchronizing; the
streams are synchronized between rounds, so the launch queue never fills and the round's time is the host's work.
Per cell: ``host_us_per_rank_call`` (median over rounds of a round's host time over calls x N; ``_min`` the
least), what a client's thread spends in one rank's call, and ``us_per_operation`` (median of a round's time to
the streams' end over calls), which the GPU bounds where its kernels are slower than the host. NVIDIA's NCCL
refuses ranks sharing a GPU, so it is measured with one rank only, the same call on the same buffers (its single
rank copies, ours too): the comparison of the two libraries' host paths.
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="1,2,4")
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
                        cell = {"library": label, **run_cell(binary, path, collective, n, size, args.calls,
                                                             args.rounds, env)}
                        cell.setdefault("collective", collective)
                        cell.setdefault("ranks", n)
                        cell.setdefault("bytes", size)
                        cells.append(cell)
                        shown = {k: v for k, v in cell.items() if k not in ("calls", "rounds")}
                        print(json.dumps(shown), flush=True)
    write_record("nccl-host-time", cells, args, started, None, None, record="jax_mscclpp.nccl_host_time/1",
                 calls=args.calls, rounds=args.rounds)
    return 1 if any("error" in c for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
