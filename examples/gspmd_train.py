"""Training a model sharded the GSPMD way (``jax.jit`` with shardings, no ``shard_map``, no jax_mscclpp call in the
model), its collectives inserted by XLA's partitioner and run by the NCCL library that XLA loads: ours
(``jax_mscclpp.enable_nccl_backend()``) or NVIDIA's.

A two-layer MLP per block, ``--layers`` blocks, weights sharded over the mesh axis "tp" (the first layer by
columns, the second by rows: XLA inserts an all-reduce per block forward and backward) and the batch over "dp"
(XLA all-reduces the gradients); SGD. Each run starts from the same weights and data, so the runs' final weights
must agree (up to the order partial sums are added).

    python examples/gspmd_train.py                       # CPU devices, or every GPU: ours and NVIDIA's NCCL
    python examples/gspmd_train.py --processes 2         # two processes sharing the GPU(s): ours alone
    python examples/gspmd_train.py --nccl ours --steps 20 --out gspmd.json

``--nccl both`` (the default) runs the training with ours and with NVIDIA's NCCL, each in its own processes (a
process keeps the NCCL it loaded first), and prints their median step times and the speedup (NVIDIA's time over
ours). Processes that share a GPU cannot run NVIDIA's NCCL ("Duplicate GPU detected"): there the run with ours is
checked against the same training on this machine's CPU. On CPU devices XLA runs its own CPU collectives, no NCCL:
the example then trains once and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from _devices import DEFAULT_CPU_DEVICES, add_common_arguments, gpu_expected, placed  # examples/_devices.py
from _processes import initialize, launch, local_gpus  # examples/_processes.py

LIBRARIES = ("ours", "real")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nccl", choices=("ours", "real", "both"), default="both",
                   help="which NCCL library runs XLA's collectives (default: both, compared)")
    p.add_argument("--processes", type=int, default=1,
                   help="processes under jax.distributed, one device each (default 1: one process, every device)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=10)
    add_common_arguments(p, dtype="float32")
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "ours" | "real" | "cpu": one training run
    p.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--devices", type=int, default=None, help=argparse.SUPPRESS)  # CPU devices of a "cpu" run
    return p.parse_args(argv)


def train(args) -> None:
    """One training run (``--worker``), in this process: writes the final weights and step times to --result."""
    if args.worker == "ours":
        import jax_mscclpp

        jax_mscclpp.enable_nccl_backend()  # before JAX starts its backends
    elif args.worker == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.devices}").strip()
    import statistics
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import _report  # examples/_report.py

    if args.processes > 1 and args.worker != "cpu":
        initialize(args.port, args.processes, args.process_id)
    devices = jax.devices()
    tp = args.tp or len(devices)
    mesh = Mesh(np.array(devices).reshape(len(devices) // tp, tp), ("dp", "tp"))
    rng = np.random.default_rng(args.seed)
    dtype, width = jnp.dtype(args.dtype), args.width
    params = [{"w1": (rng.standard_normal((width, 4 * width)) / np.sqrt(width)).astype(dtype),
               "w2": (rng.standard_normal((4 * width, width)) / np.sqrt(4 * width)).astype(dtype)}
              for _ in range(args.layers)]
    x = rng.standard_normal((args.batch, args.width)).astype(jnp.dtype(args.dtype))
    y = np.roll(x, 1, axis=1)
    specs = {"w1": P(None, "tp"), "w2": P("tp", None)}

    def place(value, spec):
        return placed(value, NamedSharding(mesh, spec))

    params = [{k: place(v, specs[k]) for k, v in block.items()} for block in params]
    x, y = place(x, P("dp", None)), place(y, P("dp", None))

    def loss(params, x, y):
        h = x
        for block in params:
            h = h + jax.nn.gelu(h @ block["w1"]) @ block["w2"]
        return jnp.mean((h - y) ** 2)

    @jax.jit
    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return value, jax.tree.map(lambda p, g: p - 0.05 * g, params, grads)

    compiled = step.lower(params, x, y).compile()
    hlo = compiled.as_text()
    inserted = {op: hlo.count(f" {op}(") + hlo.count(f" {op}-start(")
                for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")}
    times, losses = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        value, params = compiled(params, x, y)
        jax.block_until_ready(params)
        times.append(time.perf_counter() - start)
        losses.append(float(np.asarray(value.addressable_data(0))))
    weights = {f"{i}.{k}": [(tuple((s.start or 0) for s in shard.index), np.asarray(shard.data, np.float32).tolist())
                            for shard in v.addressable_shards]
               for i, block in enumerate(params) for k, v in block.items()}
    # This process's shards bit for bit: equal between two runs that differ only in how the bytes travel
    # (JAX_MSCCLPP_MAP_CUMEM=0: our library's calls between the processes through scratch, else in place).
    shards = [shard.data for block in params for name in sorted(block)
              for shard in sorted(block[name].addressable_shards, key=lambda s: [i.start or 0 for i in s.index])]
    result = {"library": args.worker, "platform": devices[0].platform, "devices": len(devices),
              "processes": args.processes, "mesh": dict(mesh.shape), "collectives_inserted": inserted,
              "median_step_ms": 1e3 * statistics.median(times[1:] or times), "losses": losses, "weights": weights,
              "weights_sha256": _report.digest(shards)}
    if args.worker == "ours":
        from jax_mscclpp import nccl_backend

        result["calls"] = nccl_backend.call_counts()
    if args.processes > 1 and args.worker != "cpu":
        jax.distributed.shutdown()
    with open(args.result, "w") as f:
        json.dump(result, f)


def cpu_device_count(args) -> int:
    """--cpu-devices, else the CPU device count XLA_FLAGS asks for, else the examples' default."""
    import re

    if args.cpu_devices:
        return args.cpu_devices
    found = re.findall(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else DEFAULT_CPU_DEVICES


def run(args, worker: str, folder: str) -> list[dict]:
    """One training run as ``args.processes`` processes (one on CPU); each one's result."""
    processes = 1 if worker == "cpu" else args.processes
    paths = [os.path.join(folder, f"{worker}-{i}.json") for i in range(processes)]
    base = [sys.executable, os.path.abspath(__file__), "--worker", worker, "--processes", str(processes),
            "--layers", str(args.layers), "--width", str(args.width), "--batch",
            str(args.batch), "--steps", str(args.steps), "--seed", str(args.seed), "--dtype", args.dtype]
    if args.tp:
        base += ["--tp", str(args.tp)]
    if worker == "cpu":
        base += ["--devices", str(args.devices)]
    launch(lambda i, port: base + ["--port", str(port), "--process-id", str(i), "--result", paths[i]], processes,
           f"{worker} run")
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    return results


def weights_of(results: list[dict]) -> dict:
    """{(name, shard start): array} over every process's shards."""
    import numpy as np

    return {(name, tuple(start)): np.asarray(data) for r in results for name, shards in r["weights"].items()
            for start, data in shards}


def compare(a: list[dict], b: list[dict]) -> float:
    """The largest difference of the two runs' final weights (the same mesh, so the same shards), relative to the
    largest weight."""
    import numpy as np

    wa, wb = weights_of(a), weights_of(b)
    if set(wa) != set(wb):
        raise SystemExit("the runs' weights are sharded differently")
    scale = max(float(np.abs(v).max()) for v in wa.values())
    return max(float(np.abs(wa[k] - wb[k]).max()) for k in wa) / scale


def main(argv=None) -> int:
    args = parse(argv if argv is not None else sys.argv[1:])
    if args.worker is not None:
        train(args)
        return 0
    on_gpu = gpu_expected()
    shared_gpu = on_gpu and args.processes > local_gpus()
    wanted = list(LIBRARIES) if args.nccl == "both" else [args.nccl]
    if not on_gpu:
        wanted = ["cpu"]
        print("no GPU: XLA runs its own CPU collectives (no NCCL library is involved); training once on CPU devices")
    elif shared_gpu and "real" in wanted:
        wanted = [w for w in wanted if w != "real"] or ["ours"]
        print(f"{args.processes} processes share {local_gpus()} GPU(s): NVIDIA's NCCL refuses to run there; ours is "
              "checked against the same training on the CPU")
    # A CPU run has as many devices as the GPU runs (the same mesh, so the same shards to compare).
    args.devices = args.processes if args.processes > 1 else (None if on_gpu else cpu_device_count(args))
    with tempfile.TemporaryDirectory() as folder:
        runs = {w: run(args, w, folder) for w in wanted}
        if on_gpu and (shared_gpu or len(wanted) == 1):
            args.devices = args.devices or runs[wanted[0]][0]["devices"]
            runs["cpu"] = run(args, "cpu", folder)
    first = runs[wanted[0]][0]
    print(f"mesh {first['mesh']} on {first['devices']} {first['platform']} device(s), {args.processes} process(es); "
          f"XLA inserted {first['collectives_inserted']}")
    for name, results in runs.items():
        label = {"ours": "jax_mscclpp's NCCL library", "real": "NVIDIA's NCCL", "cpu": "CPU reference"}[name]
        first_process = results[0]
        print(f"  {label:<28} median step {first_process['median_step_ms']:9.3f} ms   "
              f"final loss {first_process['losses'][-1]:.6f}")
        if name == "ours":
            print(f"    calls on our runtime: {results[0]['calls']}")
        if len(results) > 1:
            print("    final weights sha256 by process: " + ", ".join(r["weights_sha256"][:16] for r in results))
    report = {"example": "gspmd_train", "args": {k: v for k, v in vars(args).items() if k not in
                                                 ("worker", "process_id", "port", "result")},
              "runs": {name: [{k: v for k, v in r.items() if k != "weights"} for r in results]
                       for name, results in runs.items()}}
    ok = True
    names = list(runs)
    for other in names[1:]:
        difference = compare(runs[names[0]], runs[other])
        same = difference < 2e-3
        ok &= same
        report.setdefault("same_weights", {})[f"{names[0]} vs {other}"] = {"max_relative_difference": difference,
                                                                           "same": same}
        print(f"same weights, {names[0]} vs {other}: {same} "
              f"(largest difference {difference:.2e} of the largest weight)")
    if "ours" in runs and "real" in runs:
        ratio = runs["real"][0]["median_step_ms"] / runs["ours"][0]["median_step_ms"]
        report["speedup"] = ratio
        print(f"speedup (NVIDIA's NCCL / ours): {ratio:.3f}x (above 1: ours is faster)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
