"""Data-parallel training of a deep MLP, the gradient sums done by jax_mscclpp or by lax.

Weights are replicated, the batch is split over the mesh axis "dp". Each step computes the loss and its gradients
on the local batch, sums the gradients over "dp" (``jm.psum`` of the gradient pytree, or ``lax.psum``), and takes
an SGD step with the mean gradient. Both variants start from the same weights and data, so after every run their
weights must agree (up to the order partial sums are added).

    python examples/data_parallel_train.py                          # small config, CPU devices or all GPUs
    python examples/data_parallel_train.py --config 128MiB,1GiB --out train.json
    python examples/data_parallel_train.py --config 128MiB --profile /tmp/train-profile
    python examples/data_parallel_train.py --processes 2 --config 128MiB   # two processes sharing the GPU(s)

With ``--overlap`` (the default) jax_mscclpp's variant takes its gradients with ``jm.value_and_psum_grad``: each
layer's gradient sum starts as soon as its backward step has produced it and runs on a side GPU stream beside the
backward steps of the layers before it, as XLA's own asynchronous all-reduces do; ``--no-overlap`` sums the whole
gradient pytree with ``jm.psum`` after ``jax.grad`` (where ``auto`` emits lax's all-reduces for the large leaves
of a gradient-sized tree: docs/architecture.md, "Selection"). ``--profile DIR`` prints, per step, the collective
kernels' time and how much of it ran beside compute kernels. Weights are compared relative to the largest weight
of the model: a bias gradient is a sum with much cancellation, so two programs that reduce in different orders
agree on it only to that scale.

With ``--processes N`` (GPUs) each of N processes under ``jax.distributed`` drives one device; where they share a
GPU, XLA's collectives (lax's variant, the loss's mean) run through our NCCL library (NVIDIA's refuses a shared
GPU) and our gradient sums run in place on XLA's buffers where the runtime maps the processes' allocations
(``JAX_MSCCLPP_MAP_CUMEM``, on by default).
Every process reports a digest of its final weights: the replicas must be equal bit for bit, and two runs that
differ only in how the bytes travel (in place or through scratch) print the same digest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _devices import add_common_arguments, configure_cpu_devices, placed  # examples/_devices.py
from _processes import (add_process_arguments, end_process, one_process,  # examples/_processes.py
                        print_between_processes, replicas_agree, reports_of, start_process)

if one_process(sys.argv[1:]):
    configure_cpu_devices(sys.argv[1:])

import jax  # noqa: E402  (after XLA_FLAGS is set)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_mscclpp as jm  # noqa: E402
import _report  # noqa: E402  (examples/_report.py)

# name: (layers, width, batch per device). Gradient bytes: layers * width^2 * 2 (bf16) plus the biases.
CONFIGS = {
    "tiny": dict(layers=2, width=64, batch=16),
    "128MiB": dict(layers=4, width=4096, batch=4096),
    "1GiB": dict(layers=8, width=8192, batch=2048),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None,
                        help=f"comma-separated configs of {', '.join(CONFIGS)} (default: tiny on CPU, 128MiB,1GiB "
                        "on GPUs)")
    parser.add_argument("--collectives", choices=("both", "mscclpp", "lax"), default="both")
    parser.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                        help="jax_mscclpp: each layer's gradient sum started during the backward pass, beside it "
                        "(default on)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant (default 20)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    add_common_arguments(parser, tp=False)
    parser.add_argument("--profile", default=None, metavar="DIR", help="profile steps of each variant into DIR")
    parser.add_argument("--profile-steps", type=int, default=6)
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
    add_process_arguments(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be positive and --warmup not negative")
    args.variants = ("mscclpp", "lax") if args.collectives == "both" else (args.collectives,)
    return args


def init(key, cfg, dtype):
    params = []
    for k in jax.random.split(key, cfg["layers"]):
        w = jax.random.normal(k, (cfg["width"], cfg["width"]), jnp.float32) / np.sqrt(cfg["width"])
        params.append({"w": w.astype(dtype), "b": jnp.zeros((cfg["width"],), dtype)})
    return params


def hidden_layer(layer, x):
    return jax.nn.gelu(x @ layer["w"] + layer["b"])


def output_layer(layer, x):
    return x @ layer["w"] + layer["b"]


def layers_of(params):
    return [hidden_layer] * (len(params) - 1) + [output_layer]


def squared_error(out, y):
    diff = (out - y).astype(jnp.float32)
    return jnp.mean(diff * diff)


def loss_fn(params, x, y):
    for layer, f in zip(params, layers_of(params)):
        x = f(layer, x)
    return squared_error(x, y)


def make_step(mesh, variant: str, lr: float, overlap: bool):
    """One jitted SGD step: (params, x, y) -> (params, loss). Gradients are taken with respect to a per-device
    (varying) copy of the replicated weights, so the only cross-device sum is the explicit one below."""
    n = mesh.shape["dp"]

    def local(params, x, y):
        mine = jax.tree_util.tree_map(lambda a: lax.pcast(a, "dp", to="varying"), params)
        if variant == "mscclpp" and overlap:
            loss, grads = jm.value_and_psum_grad(layers_of(mine), squared_error, "dp")(mine, x, y)
        else:
            loss, grads = jax.value_and_grad(loss_fn)(mine, x, y)
            grads = lax.psum(grads, "dp") if variant == "lax" else jm.psum(grads, "dp")
        new = jax.tree_util.tree_map(lambda p, g: (p - lr * (g / n)).astype(p.dtype), params, grads)
        return new, lax.pmean(loss, "dp")

    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=(P(), P())),
                   donate_argnums=(0,))


def run_variant(step, params0, x, y, steps: int, warmup: int):
    """(median step ms, final params, losses)."""
    params = jax.tree_util.tree_map(jnp.copy, params0)
    for _ in range(warmup):
        params, loss = step(params, x, y)
    jax.block_until_ready(params)
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        params, loss = step(params, x, y)
        jax.block_until_ready(params)
        times.append(time.perf_counter() - start)
        losses.append(float(loss.addressable_data(0)))
    return 1e3 * statistics.median(times), params, losses


def local_leaves(params) -> list:
    """This process's copy of every (replicated) weight, as numpy arrays."""
    return [np.asarray(leaf.addressable_data(0)) for leaf in jax.tree_util.tree_leaves(params)]


def weights_digest(params) -> str:
    """SHA-256 of this process's copy of the weights, bit for bit."""
    return _report.digest(local_leaves(params))


def max_rel_diff(a, b) -> float:
    """Largest |a - b| over every weight, relative to the largest |b| of the model."""
    worst, scale = 0.0, 1e-30
    for u, v in zip(local_leaves(a), local_leaves(b)):
        u64, v64 = np.asarray(u, np.float64), np.asarray(v, np.float64)
        worst = max(worst, float(np.max(np.abs(u64 - v64))))
        scale = max(scale, float(np.max(np.abs(v64))))
    return worst / scale


def measure(args) -> dict:
    """Every config and variant in this process (one of --processes N, or the only one); prints from the first."""
    shared_gpu = start_process(args)
    say = print if args.process_id == 0 else (lambda *a, **k: None)
    devices = jax.devices()
    plat = devices[0].platform
    names = (args.config or ("tiny" if plat == "cpu" else "128MiB,1GiB")).split(",")
    for name in names:
        if name not in CONFIGS:
            sys.exit(f"unknown config {name!r}; known: {', '.join(CONFIGS)}")
    dtype_name = args.dtype or ("float32" if plat == "cpu" else "bfloat16")
    dtype = jnp.dtype(dtype_name)
    mesh = jax.sharding.Mesh(np.array(devices), ("dp",))
    n = len(devices)
    variants = args.variants
    tolerance = 1e-4 if dtype_name == "float32" else 3e-2
    say(f"{n} {plat} devices on 'dp' ({args.processes} process(es)); {dtype_name}; variants {', '.join(variants)}"
        f"{' (overlap)' if args.overlap and 'mscclpp' in variants else ''}")
    say(f"{'config':<8} {'grad MiB':>9} {'variant':<8} {'median ms':>10}  {_report.SPEEDUP}")
    results, profiles, passed = [], [], True
    for name in names:
        cfg = CONFIGS[name]
        grad_mib = cfg["layers"] * (cfg["width"] ** 2 + cfg["width"]) * dtype.itemsize / 2**20
        replicated, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("dp"))
        params0 = jax.tree_util.tree_map(lambda a: placed(np.asarray(a), replicated),
                                         init(jax.random.key(args.seed), cfg, dtype))
        rng = np.random.default_rng(args.seed)
        x = placed(np.asarray(rng.standard_normal((n * cfg["batch"], cfg["width"])), dtype), shard)
        y = placed(np.asarray(rng.standard_normal((n * cfg["batch"], cfg["width"])), dtype), shard)
        timed, finals, digests = {}, {}, {}
        for variant in variants:
            step = make_step(mesh, variant, args.lr, args.overlap)
            timed[variant], finals[variant], losses = run_variant(step, params0, x, y, args.steps, args.warmup)
            digests[variant] = weights_digest(finals[variant])
            ratio = ("" if variant == "mscclpp" or "mscclpp" not in timed
                     else f"{_report.speedup(timed[variant], timed['mscclpp']):7.2f}x")
            say(f"{name:<8} {grad_mib:>9.1f} {variant:<8} {timed[variant]:>10.3f}  {ratio}")
            if args.profile:
                from jax_mscclpp.tools.bench import profile

                state = {"p": jax.tree_util.tree_map(jnp.copy, params0)}

                def one():
                    state["p"], loss = step(state["p"], x, y)
                    return loss

                one()
                logdir = os.path.join(args.profile, f"{variant}-{name}" + (f"-process{args.process_id}"
                                                                            if args.processes > 1 else ""))
                path = profile.capture(one, args.profile_steps, logdir)
                summary = profile.summarize(path, args.profile_steps)
                profiles.append({"config": name, "variant": variant, **summary})
                say(profile.format_summary(f"    profile {name} {variant}", summary))
        row = {"config": name, **cfg, "grad_mib": grad_mib, "weights_sha256": digests}
        if len(variants) == 2:
            diff = max_rel_diff(finals["mscclpp"], finals["lax"])
            same = diff <= tolerance
            passed &= same
            row.update(ours_ms=timed["mscclpp"], lax_ms=timed["lax"],
                       speedup=_report.speedup(timed["lax"], timed["mscclpp"]),
                       weights_max_rel_diff=diff, same_weights=same)
            say(f"         {name}: {_report.SPEEDUP} {row['speedup']:.3f}x; weights max rel diff {diff:.2e} "
                f"(tolerance {tolerance:g}) {'PASS' if same else 'FAIL'}")
        else:
            row.update({f"{variants[0] if variants[0] == 'lax' else 'ours'}_ms": timed[variants[0]]})
        results.append(row)
    report = {
        **_report.header("data_parallel_train", devices[:n], processes=args.processes, shared_gpu=shared_gpu),
        "config": {"configs": names, "dtype": dtype_name, "steps": args.steps, "warmup": args.warmup,
                   "overlap": args.overlap, "variants": list(variants)},
        "results": results,
        "profiles": profiles,
        "passed": passed,
    }
    end_process(args, report)
    return report


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    reports = reports_of(__file__, argv, args, measure, "data_parallel_train run")
    if not reports:
        return 0
    # Each process checked its own replica; the replicas of every variant must also be equal bit for bit.
    report = reports[0]
    replicas_equal = replicas_agree(reports, "weights_sha256")
    report["passed"] = all(r["passed"] for r in reports) and replicas_equal
    if args.processes > 1:
        report["replicas_equal"] = replicas_equal
        print_between_processes(report, "weights_sha256", "final weights")
        print(f"the {args.processes} replicas {'equal' if replicas_equal else 'DIFFER'}")
    _report.write(report, args.out)
    print("PASS: same weights" if report["passed"] else
          "FAIL: the weights differ (between the variants or the replicas)")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
