"""Collective matmul over a ring: a sequence-parallel MLP whose gathers and reduce-scatters are ``ppermute`` steps
beside the matrix products, run with ``jm.ppermute`` and with ``lax.ppermute`` (XLA's collective-permute).

The activations ``x`` (``n * rows`` by ``d_model``) are split by rows over the mesh axis "sp", W1 by columns and W2
by rows. Each of ``--layers`` blocks computes ``x + gelu(all_gather(x) @ W1) @ W2`` without an all-gather or a
reduce-scatter: the gather matmul multiplies the block it holds while passing it to the next rank (n - 1 ring
steps), and the reduce-scatter matmul adds its product for the block travelling past it (n - 1 more). Each ring step
moves ``rows x d_model`` elements per rank. The result is checked against the unsharded model in float32 on the host.

    python examples/ring_matmul.py                                  # CPU devices, or every GPU
    python examples/ring_matmul.py --processes 2 --profile /tmp/p   # two processes sharing the GPU(s)

It prints the median step time of both and the speedup (lax's time / ours); ``--profile DIR`` adds, per variant,
the device time of the permutation kernels inside the step from a profiler trace. With ``--processes N`` each
process drives one device; where processes share a GPU, NVIDIA's NCCL refuses to run, so lax's collective-permute
runs through our NCCL library (``jax_mscclpp.enable_nccl_backend``), and kernels of processes sharing a GPU take
turns on it: their step times measure that, not the link.
"""

from __future__ import annotations

import argparse
import os
import sys

from _devices import add_common_arguments, configure_cpu_devices, placed  # examples/_devices.py
from _processes import (add_process_arguments, combined_report, end_process, reports_of,  # examples/_processes.py
                        start_process)

VARIANTS = ("mscclpp", "lax")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=None, help="rows of x per rank (default: 256 on GPU, 8 on CPU)")
    p.add_argument("--d-model", type=int, default=None, help="default: 2048 on GPU, 64 on CPU")
    p.add_argument("--d-ff", type=int, default=None,
                   help="MLP width over all ranks (default: 4 x d-model, a multiple of the ranks)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--collectives", choices=("both", *VARIANTS), default="both")
    p.add_argument("--profile", default=None, metavar="DIR", help="profile --profile-steps steps per variant")
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    add_common_arguments(p, tp=False)
    add_process_arguments(p)
    return p.parse_args(argv)


def sequence_parallel_mlp(n: int, layers: int, permute):
    """The per-rank body: ``x`` [rows, d], ``w1`` [layers, d, f/n], ``w2`` [layers, f/n, d]; ``permute`` is
    ``lax.ppermute`` or ``jm.ppermute``. Rank i starts with its own block; after s ring steps to the right it
    holds block (i - s) mod n."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    right = [(j, (j + 1) % n) for j in range(n)]

    def gather_matmul(x, w, i):
        out = jnp.zeros((n, x.shape[0], w.shape[1]), x.dtype)
        block = x
        for s in range(n):
            out = lax.dynamic_update_index_in_dim(out, block @ w, (i - s) % n, 0)
            if s < n - 1:
                block = permute(block, "sp", right)
        return out.reshape(n * x.shape[0], w.shape[1])

    def matmul_scatter(h, w, i):
        # The sum travelling to rank i passes every rank once; at ring step s this rank adds its product for the
        # block (i - s - 1) mod n, which reaches its owner after the last step.
        blocks = h.reshape(n, h.shape[0] // n, h.shape[1])
        acc = lax.dynamic_index_in_dim(blocks, (i - 1) % n, 0, keepdims=False) @ w
        for s in range(1, n):
            acc = permute(acc, "sp", right) + lax.dynamic_index_in_dim(blocks, (i - s - 1) % n, 0,
                                                                       keepdims=False) @ w
        return acc

    def body(x, w1, w2):
        i = lax.axis_index("sp")
        for layer in range(layers):
            x = x + matmul_scatter(jax.nn.gelu(gather_matmul(x, w1[layer], i)), w2[layer], i)
        return x

    return body


def reference(x, w1, w2):
    """The unsharded model in float32 (tanh GeLU, as jax.nn.gelu)."""
    import numpy as np

    x = x.astype(np.float32)
    for layer in range(w1.shape[0]):
        h = x @ w1[layer].astype(np.float32)
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ w2[layer].astype(np.float32)
    return x


def measure(args) -> dict:
    """Both variants in this process (one of --processes N, or the only one): errors, step times, profiles."""
    shared_gpu = start_process(args)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jax_mscclpp as jm
    from _report import header, median_ms  # examples/_report.py

    devices = jax.devices()
    n = len(devices)
    on_gpu = devices[0].platform == "gpu"
    rows = args.rows or (256 if on_gpu else 8)
    d = args.d_model or (2048 if on_gpu else 64)
    f = args.d_ff or -(-4 * d // n) * n  # default: 4 x d_model, rounded up to split over the ranks
    if f % n:
        raise SystemExit(f"--d-ff {f} does not split over {n} ranks")
    dtype = jnp.dtype(args.dtype or ("bfloat16" if on_gpu else "float32"))
    mesh = Mesh(np.array(devices), ("sp",))
    rng = np.random.default_rng(args.seed)
    host = {"x": rng.standard_normal((n * rows, d)).astype(dtype),
            "w1": (rng.standard_normal((args.layers, d, f)) / np.sqrt(d)).astype(dtype),
            "w2": (rng.standard_normal((args.layers, f, d)) / np.sqrt(4 * f)).astype(dtype)}
    specs = {"x": P("sp", None), "w1": P(None, None, "sp"), "w2": P(None, "sp", None)}
    arrays = {k: placed(v, NamedSharding(mesh, specs[k])) for k, v in host.items()}
    operands = (arrays["x"], arrays["w1"], arrays["w2"])
    expected = reference(host["x"], host["w1"], host["w2"])
    scale = float(np.abs(expected).max())
    tolerance = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    permutes = {"mscclpp": jm.ppermute, "lax": lax.ppermute}
    report = header("ring_matmul", devices, processes=args.processes, shared_gpu=shared_gpu)
    report.update(rows_per_rank=rows, d_model=d, d_ff=f, layers=args.layers, dtype=dtype.name,
                  bytes_per_ring_step=rows * d * dtype.itemsize, ring_steps=2 * (n - 1) * args.layers,
                  results=[])
    for name in args.variants:
        step = jax.jit(jax.shard_map(sequence_parallel_mlp(n, args.layers, permutes[name]), mesh=mesh,
                                     in_specs=(specs["x"], specs["w1"], specs["w2"]), out_specs=specs["x"]))
        out = step(*operands)
        worst = max(float(np.abs(np.asarray(shard.data, np.float32) - expected[shard.index]).max())
                    for shard in out.addressable_shards) / scale
        row = {"collectives": name, "max_relative_error": worst, "pass": worst < tolerance,
               "median_step_ms": median_ms(step, operands, args.steps)}
        if args.profile:
            from jax_mscclpp.tools.bench import profile

            logdir = os.path.join(args.profile, f"{name}-process{args.process_id}")
            row["profile"] = profile.summarize(profile.capture(lambda: step(*operands), args.profile_steps, logdir),
                                               args.profile_steps)
        report["results"].append(row)
    end_process(args, report)
    return report


def print_report(report: dict, processes: int) -> bool:
    from _report import SPEEDUP

    dev = report["devices"]
    print(f"{dev['count']} {dev['platform']} devices on 'sp' ({processes} process(es)); {report['layers']} layers, "
          f"{report['rows_per_rank']} rows per rank, d_model {report['d_model']}, d_ff {report['d_ff']}, "
          f"{report['dtype']}: {report['ring_steps']} ring steps of {report['bytes_per_ring_step']} bytes per rank")
    ok = True
    for row in report["results"]:
        ok &= row["pass"]
        print(f"[{row['collectives']}] median step {row['median_step_ms']:9.3f} ms; largest error "
              f"{row['max_relative_error']:.2e} of the largest output {'PASS' if row['pass'] else 'FAIL'}")
        if "profile" in row:
            from jax_mscclpp.tools.bench.profile import format_summary

            print(format_summary(f"    profile [{row['collectives']}]", row["profile"]))
    times = {row["collectives"]: row["median_step_ms"] for row in report["results"]}
    if set(VARIANTS) <= set(times):
        report["speedup"] = times["lax"] / times["mscclpp"]
        print(f"{SPEEDUP}: {report['speedup']:.3f}x (above 1: mscclpp is faster)")
    if report.get("shared_gpu"):
        print("processes share a GPU: their kernels take turns on it, so these step times measure that, not a link")
    return ok


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse(argv)
    args.variants = list(VARIANTS) if args.collectives == "both" else [args.collectives]
    if args.processes == 1 and not args.worker:
        configure_cpu_devices(argv)
    reports = reports_of(__file__, argv, args, measure, "ring_matmul run")
    if not reports:
        return 0
    # Every process checked its own rows: the run passes where every one of them did.
    report = combined_report(reports, "pass", ("max_relative_error",))
    ok = print_report(report, args.processes)
    if args.out:
        from _report import write

        write(report, args.out)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
