"""DRAM bytes per call of the collectives between processes sharing GPU 0, the JAX path's and XLA's through our NCCL
library, in place and through scratch; one JSON per run.

    python3 bench/kernels/traffic_between_processes.py [--processes 2,4] [--sizes 16M,256M] [--dtypes float32,bfloat16]
        [--collectives all_reduce,all_gather,reduce_scatter] [--calls 20] [--commit SHA] [--out DIR]

Nsight Compute cannot count these: it profiles one kernel at a time, and a kernel of one process waits for its peers'
kernels in the others. Here ``dram_sampler.cc`` (built on the way with CUPTI) reads the GPU's DRAM counters with
CUPTI's PM sampling, which neither replays nor serializes kernels: every process's traffic in a window of time,
summed over the samples.

For each number of processes P, two runs of P worker processes (one device each under ``jax.distributed``, all on
GPU 0): ``JAX_MSCCLPP_MAP_CUMEM=1`` (the default: ranks map each other's cuMem allocations, so our calls between the
processes run in place on XLA's buffers) and ``=0`` (no mapping: through scratch). In each, for every cell
(collective, S bytes, dtype; S is a rank's larger buffer as in nccl_traffic_record.py) and path:

- ``jax``: ``jm.psum`` / ``jm.all_gather`` / ``jm.psum_scatter`` in ``shard_map`` over the processes' devices;
- ``xla``: ``lax.psum`` / ``lax.all_gather`` / ``lax.psum_scatter``, which XLA runs through our NCCL library, with
  XLA's user buffers (``--xla_gpu_enable_nccl_user_buffers=true``: the collectives' buffers from ncclMemAlloc and
  registered with the communicator, as NCCL's registered calls take them);

the processes meet at a barrier, process 0 starts the sampler, every process runs ``--calls`` calls, they meet again,
the GPU idles a few sample intervals and process 0 stops the sampler: ``dram_bytes`` per call is the window's bytes
over the calls, ``traffic_ratio`` its ratio to ``minimum_bytes`` (every input byte read once and every output byte
written once, over all ranks). Before the cells, a window of XLA copies of S bytes on one device checks the sampler
(``copy_ratio``: bytes over 2 S a copy) and an empty window gives the idle floor. The inputs are small integers, not
zero, whose sums are exact in bfloat16, so each cell's first result is checked exactly. ``us`` per call is the wall
time of the calls in process 0: the processes' kernels take turns on the one GPU, so it is not a link's speed. What
ran is reported per cell: our calls in place and through scratch (``jax``), our library's algorithms (``xla``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _traffic import machine, parse_size, save_record  # noqa: E402  (bench/kernels/_traffic.py)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
PATHS = ("jax", "xla")
SAMPLE_INTERVAL_NS = 100_000
IDLE_S = 0.002  # the GPU's idle time before the sampler stops: an interval cut short by the stop is not counted


def buffer_sizes(collective: str, size: int, n: int) -> tuple[int, int]:
    """(input bytes, output bytes) of one rank in a cell of S = ``size`` bytes."""
    if collective == "all_reduce":
        return size, size
    if collective == "all_gather":
        return size // n, size
    return size, size // n


def minimum_bytes(collective: str, size: int, n: int) -> int:
    """Every input byte read once, every output byte written once, over all ranks."""
    in_bytes, out_bytes = buffer_sizes(collective, size, n)
    return n * (in_bytes + out_bytes)


def build_sampler(work: str) -> str:
    """dram_sampler.cc compiled against the CUPTI of the CUDA toolkit whose nvcc is on PATH (PM sampling: 12.6 on)."""
    import shutil

    cuda = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")))
    includes = [p for p in (os.path.join(cuda, "include"), os.path.join(cuda, "extras", "CUPTI", "include"))
                if os.path.exists(os.path.join(p, "cupti_pmsampling.h"))]
    folders = ("lib64", "lib", "extras/CUPTI/lib64", "targets/x86_64-linux/lib")
    libs = [p for p in (os.path.join(cuda, d) for d in folders) if os.path.exists(os.path.join(p, "libcupti.so"))]
    if not includes or not libs:
        raise SystemExit(f"no CUPTI with PM sampling (cupti_pmsampling.h, libcupti.so) under {cuda}")
    include = includes[0]
    binary = os.path.join(work, "dram_sampler")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", include, os.path.join(HERE, "dram_sampler.cc"), "-o", binary,
                    "-L", libs[0], f"-Wl,-rpath,{libs[0]}", "-lcupti", "-l:libcuda.so.1"], check=True)
    return binary


class SamplerClient:
    """The sampler process, driven over its stdin and stdout (dram_sampler.cc's commands)."""

    def __init__(self, binary: str):
        self.proc = subprocess.Popen([binary, "0", str(SAMPLE_INTERVAL_NS)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"dram_sampler ended at '{command}' (exit status {self.proc.wait()})")
        return json.loads(line)

    def window(self, run) -> dict:
        """The DRAM bytes of a window in which ``run()`` runs (then the GPU idles IDLE_S)."""
        self.ask("start")
        run()
        time.sleep(IDLE_S)
        return self.ask("stop")

    def close(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# ---- a worker: one process of a run ------------------------------------------------------------------------------

def rank_values(rank: int, count: int, np):
    """A rank's input: small integers in [-30, 30], never all zero, different on every rank; sums of up to 8 ranks
    are exact in bfloat16."""
    i = np.arange(count, dtype=np.int64)
    return (((i * 7 + rank * 13) % 61) - 30).astype(np.float32)


def worker(args) -> None:
    import jax

    import jax_mscclpp as jm

    jm.enable_nccl_backend()  # XLA's collectives through our library (processes sharing a GPU: NVIDIA's refuses)
    jax.distributed.initialize(coordinator_address=f"localhost:{args.port}", num_processes=args.nprocs,
                               process_id=args.process_id, local_device_ids=[0])
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_mscclpp import _compat

    n, me = args.nprocs, args.process_id
    mesh = Mesh(np.array(jax.devices()), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    ops = {
        "jax": {"all_reduce": lambda v: jm.psum(v, "x"), "all_gather": lambda v: jm.all_gather(v, "x", tiled=True),
                "reduce_scatter": lambda v: jm.psum_scatter(v, "x", tiled=True)},
        "xla": {"all_reduce": lambda v: lax.psum(v, "x"), "all_gather": lambda v: lax.all_gather(v, "x", tiled=True),
                "reduce_scatter": lambda v: lax.psum_scatter(v, "x", tiled=True)},
    }
    sampler = SamplerClient(args.sampler) if me == 0 else None
    barrier_count = [0]

    def barrier():
        barrier_count[0] += 1
        _compat.barrier(f"traffic_between_processes_{barrier_count[0]}", 300)

    def window(run) -> dict | None:
        barrier()
        result = sampler.window(lambda: (barrier(), run(), barrier())) if sampler else None
        if sampler is None:
            barrier()
            run()
            barrier()
        return result

    def in_place_counts() -> dict:
        counts = [c.in_place_between_processes() for c in jm.Communicator.live() if c.platform == "gpu"]
        return {"in_place": sum(c["in_place"] for c in counts),
                "through_scratch": sum(c["through_scratch"] for c in counts)}

    def library_counts() -> dict:
        return {f"{name} {algorithm}": calls for name, algorithms in jm.nccl_backend.call_counts().items()
                for algorithm, calls in algorithms.items()}

    def difference(after: dict, before: dict) -> dict:
        return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}

    report = {"process": me, "cells": []}
    # The sampler's check: XLA copies of S bytes on this process's device alone (the others wait at the barrier).
    copy_sizes = sorted(set(args.sizes))
    for size in copy_sizes:
        x = jax.device_put(np.ones(size // 4, np.float32), jax.local_devices()[0])
        copy = jax.jit(lambda v: v + 1.0)  # one elementwise kernel: reads S, writes S
        jax.block_until_ready(copy(x))
        result = window(lambda: jax.block_until_ready([copy(x) for _ in range(args.calls)]) if me == 0 else None)
        if result is not None:
            report["cells"].append({"cell": "device_copy", "bytes": size, "calls": args.calls, **result,
                                    "copy_ratio": (result["read_bytes"] + result["write_bytes"]) / args.calls
                                    / (2 * size)})
        del x
    idle = window(lambda: time.sleep(0.05))
    if idle is not None:
        report["cells"].append({"cell": "idle", "seconds": 0.05, **idle})

    for dtype_name in args.dtypes:
        dtype = jnp.dtype(dtype_name)
        for collective in args.collectives:
            for size in args.sizes:
                in_bytes, out_bytes = buffer_sizes(collective, size, n)
                count = in_bytes // dtype.itemsize
                values = [rank_values(r, count, np) for r in range(n)]
                x = jax.make_array_from_callback((n * count,), sharding,
                                                 lambda index: values[(index[0].start or 0) // count].astype(dtype))
                total = sum(values)
                out_count = out_bytes // dtype.itemsize
                want = {"all_reduce": total, "all_gather": np.concatenate(values),
                        "reduce_scatter": total[me * out_count:(me + 1) * out_count]}[collective]
                for path in args.paths:
                    fn = jax.jit(jax.shard_map(ops[path][collective], mesh=mesh, in_specs=P("x"), out_specs=P("x")))
                    y = fn(x)
                    got = np.asarray(y.addressable_shards[0].data).astype(np.float32)
                    mismatches = int(np.count_nonzero(got != want))
                    del y
                    jax.block_until_ready(fn(x))
                    before = (in_place_counts(), library_counts())
                    timing = {}

                    def calls():
                        start = time.perf_counter()
                        jax.block_until_ready([fn(x) for _ in range(args.calls)])
                        timing["us"] = (time.perf_counter() - start) / args.calls * 1e6

                    result = window(calls)
                    cell = {"cell": "collective", "path": path, "collective": collective, "bytes": size,
                            "dtype": dtype_name, "calls": args.calls, "mismatches": mismatches,
                            "us": round(timing["us"], 1),
                            "ran_in_place": difference(in_place_counts(), before[0]),
                            "library_calls": difference(library_counts(), before[1])}
                    if result is not None:
                        moved = (result["read_bytes"] + result["write_bytes"]) / args.calls
                        cell.update(dram_bytes=moved, traffic_ratio=moved / minimum_bytes(collective, size, n),
                                    minimum_bytes=minimum_bytes(collective, size, n), window=result)
                    report["cells"].append(cell)
                    if me == 0:
                        print(json.dumps(cell), flush=True)
                del x
    if sampler:
        sampler.close()
    with open(args.result, "w") as f:
        json.dump(report, f)
    jax.distributed.shutdown()


# ---- the driver ----------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_processes(args, nprocs: int, map_cumem: str, sampler: str, work: str) -> list[dict]:
    """One run of ``nprocs`` workers; their reports."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               XLA_PYTHON_CLIENT_PREALLOCATE="false", JAX_MSCCLPP_MAP_CUMEM=map_cumem,
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_nccl_user_buffers=true").strip())
    env.pop("JAX_MSCCLPP_NVLS", None)
    port = free_port()
    paths = [os.path.join(work, f"p{nprocs}-map{map_cumem}-{i}.json") for i in range(nprocs)]
    common = ["--worker", "--port", str(port), "--nprocs", str(nprocs), "--sampler", sampler,
              "--sizes", ",".join(str(s) for s in args.sizes), "--dtypes", ",".join(args.dtypes),
              "--collectives", ",".join(args.collectives), "--paths", ",".join(args.paths),
              "--calls", str(args.calls)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *common, "--process-id", str(i),
                               "--result", paths[i]], env=env) for i in range(nprocs)]
    deadline = time.time() + args.timeout
    try:
        codes = [p.wait(timeout=max(1.0, deadline - time.time())) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise SystemExit(f"{nprocs} processes, JAX_MSCCLPP_MAP_CUMEM={map_cumem}: not done in {args.timeout:g} s")
    if any(codes):
        raise SystemExit(f"{nprocs} processes, JAX_MSCCLPP_MAP_CUMEM={map_cumem}: exit statuses {codes}")
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append(json.load(f))
    return reports


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    listed = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    parser.add_argument("--processes", default=[2, 4], type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--sizes", default=[16 << 20, 256 << 20], type=lambda s: [parse_size(v) for v in s.split(",")])
    parser.add_argument("--dtypes", default=["float32", "bfloat16"], type=listed)
    parser.add_argument("--collectives", default=list(COLLECTIVES), type=listed)
    parser.add_argument("--paths", default=list(PATHS), type=listed)
    parser.add_argument("--maps", default=["1", "0"], type=listed, help="JAX_MSCCLPP_MAP_CUMEM values to run")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=500)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--port", "--nprocs", "--process-id"):
        parser.add_argument(hidden, type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--sampler", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    for value in args.collectives:
        if value not in COLLECTIVES:
            parser.error(f"--collectives: {value} is not one of {', '.join(COLLECTIVES)}")
    for value in args.paths:
        if value not in PATHS:
            parser.error(f"--paths: {value} is not one of {', '.join(PATHS)}")
    started = time.time()
    runs = []
    with tempfile.TemporaryDirectory() as work:
        sampler = build_sampler(work)
        for nprocs in args.processes:
            for map_cumem in args.maps:
                reports = run_processes(args, nprocs, map_cumem, sampler, work)
                # Process 0's cells carry the windows; every process's mismatches and in-place counts join them.
                cells = reports[0]["cells"]
                for i, cell in enumerate(cells):
                    if cell["cell"] == "collective":
                        cell["mismatches"] = sum(r["cells"][i]["mismatches"] for r in reports)
                        cell["ran_in_place_by_process"] = [r["cells"][i]["ran_in_place"] for r in reports]
                runs.append({"processes": nprocs, "map_cumem": map_cumem, "cells": cells})
    record = {"record": "DRAM bytes per call between processes sharing GPU 0 (CUPTI PM sampling)",
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": args.commit, "machine": machine(),
              "sample_interval_ns": SAMPLE_INTERVAL_NS, "runs": runs, "seconds": round(time.time() - started, 1)}
    save_record(record, "traffic-between-processes", args.out)
    bad = [c for r in runs for c in r["cells"] if c.get("mismatches")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
