"""The host backend against lax on a quiet and on a busy CPU.

A jitted shard_map program of 30 chained collectives (psum, all_gather, psum_scatter, ppermute in turn) over 8 CPU
devices, run with jax_mscclpp's collectives and with lax's; then again while `--busy` processes (default: one per
core) spin. Prints one line per (load, implementation): the median and the quartiles of the program's wall time,
and per run the process's CPU time and context switches.

    python bench/host_backend_busy.py [--busy N] [--reps R] [--elements E] [--json PATH]
"""

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_mscclpp as jm  # noqa: E402

COLLECTIVES = 30


def program(impl, n):
    """30 chained collectives, each depending on the one before."""
    shift = [(i, (i + 1) % n) for i in range(n)]

    def body(x):
        for k in range(COLLECTIVES):
            kind = k % 4
            if kind == 0:
                x = impl.psum(x, "x") * (1.0 / n)
            elif kind == 1:
                x = impl.all_gather(x, "x", tiled=True)
            elif kind == 2:
                x = impl.psum_scatter(x, "x", tiled=True) * (1.0 / n)
            else:
                x = impl.ppermute(x, "x", shift)
        return x

    return body


def spin():
    while True:
        pass


def measure(fn, x, reps):
    jax.block_until_ready(fn(x))  # compile and warm up
    jax.block_until_ready(fn(x))
    times = []
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(x))
        times.append((time.perf_counter() - t0) * 1e3)
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    q = statistics.quantiles(times, n=4)
    return {"median_ms": statistics.median(times), "q1_ms": q[0], "q3_ms": q[2], "reps": reps,
            "cpu_ms_per_run": (c1 - c0) * 1e3 / reps,
            "context_switches_per_run": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / reps}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=os.cpu_count(), help="busy-loop processes (default: one per core)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--elements", type=int, default=1024, help="float32 elements per device")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    devices = jax.devices("cpu")[:8]
    mesh = Mesh(np.array(devices), ("x",))
    n = len(devices)
    x = jnp.arange(n * args.elements, dtype=jnp.float32)
    fns = {
        name: jax.jit(jax.shard_map(program(impl, n), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        for name, impl in (("ours", jm), ("lax", lax))
    }
    results = {"cpus": os.cpu_count(), "devices": n, "collectives": COLLECTIVES, "elements": args.elements,
               "busy_processes": args.busy, "runs": []}
    np.testing.assert_allclose(fns["ours"](x), fns["lax"](x), rtol=1e-5)
    for load in ("quiet", "busy"):
        spinners = []
        if load == "busy":
            ctx = multiprocessing.get_context("spawn")
            spinners = [ctx.Process(target=spin, daemon=True) for _ in range(args.busy)]
            for p in spinners:
                p.start()
            time.sleep(0.5)
        try:
            for name, fn in fns.items():
                r = measure(fn, x, args.reps)
                r.update(load=load, impl=name)
                results["runs"].append(r)
                print(f"{load:5s} {name:4s}  median {r['median_ms']:8.2f} ms  (quartiles {r['q1_ms']:.2f} - "
                      f"{r['q3_ms']:.2f}); per run {r['cpu_ms_per_run']:.1f} ms of CPU, "
                      f"{r['context_switches_per_run']:.0f} context switches", flush=True)
        finally:
            for p in spinners:
                p.terminate()
                p.join()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
