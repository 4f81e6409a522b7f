"""An expert-parallel transformer MoE block on ``jm.moe.dispatch`` and ``jm.moe.combine``.

Tokens are split over the mesh axis "ep" and so are the experts (``--experts-per-device`` each). The block is
``x + combine(experts(dispatch(rmsnorm(x))))``: a router (a linear layer, softmax, top-k, the k weights
renormalized to sum to 1 for k > 1) picks each token's experts, ``dispatch`` sends each token to its experts'
devices (the counts by one all_gather, the rows by one ragged_all_to_all), every device runs its experts' MLPs
(two matmuls and a GeLU: ``lax.ragged_dot`` over the groups, or one einsum over the ``[experts, capacity]`` slots
with ``--capacity-factor``), and ``combine`` sends the outputs back (the reverse ragged_all_to_all) and sums each
token's k of them with its router weights.

    python examples/moe_layer.py                              # CPU devices, or every GPU
    python examples/moe_layer.py --capacity-factor 1.25 --top-k 2 --out moe.json
    python examples/moe_layer.py --processes 2 --out moe.json   # two processes sharing the GPU(s)

``--collectives lax`` runs the same code with lax's ragged_all_to_all and all_gather (``algorithm="lax"``),
``mscclpp`` with ours, ``both`` (the default) both, checking that they give the same outputs and gradients. XLA:CPU
has no ragged-all-to-all, so on CPU devices lax's variant cannot run: the script says so and runs ours alone. Every
variant that runs is checked against a dense reference in plain jnp (every token through each of its experts on one
device, in float32; with capacity, the same rows dropped: first choices first, then token order), with the routing
the sharded run chose, in the forward pass and in the gradients of a loss in every parameter. It prints the median
step times (forward, and forward plus gradients) and the bytes each collective moved per device, computed from the
sizes the routing sent: what a ragged exchange moves (the rows sent to other devices) and what ours, a composition
of all_to_all on CPU devices, moves (a block of every row per device). Exit status 0 when every check passes.

With ``--processes N`` each process drives one device under ``jax.distributed``, builds the same global tokens and
parameters from ``--seed`` and checks the whole outputs and gradients (gathered over the processes with
``jm.all_gather``) against the dense reference. Where processes share a GPU, NVIDIA's NCCL refuses to run, so lax's
variant runs through our NCCL library (``jax_mscclpp.enable_nccl_backend``; ours runs our ragged kernel there by
default, ``--algorithm lax`` asks for lax's), and the kernels of processes sharing a GPU take turns on it: their step
times measure that, not the link. On CPU devices processes fall back to lax's
collectives (the host backend runs within one process).
"""

from __future__ import annotations

import argparse
import math
import sys

from _devices import add_common_arguments, configure_cpu_devices  # examples/_devices.py
from _processes import (add_process_arguments, combined_report, end_process, one_process,  # examples/_processes.py
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

VARIANTS = ("mscclpp", "lax")
# Error budget against the dense float32 reference, relative to its largest magnitude (as tensor_parallel_mlp.py):
# float32 differs by summation order (TF32 products on GPUs), bfloat16 rounds every product to 8 bits.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
GPU_TOLERANCE = {"float32": 4e-3, "bfloat16": 5e-2}
PARAM_SPECS = {"scale": P(), "router": P(), "w1": P("ep"), "w2": P("ep")}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=None, help="tokens per device (default: 64 on CPU, 2048 on GPU)")
    parser.add_argument("--d-model", type=int, default=None, help="default: 64 on CPU, 1024 on GPU")
    parser.add_argument("--d-ff", type=int, default=None, help="each expert's hidden width (default: 2 x d-model)")
    parser.add_argument("--experts-per-device", type=int, default=2)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--capacity-factor", type=float, default=None,
                        help="each expert takes at most ceil(factor x tokens x k / experts) rows of the whole axis, "
                        "the rest dropped (default: dropless)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant (default 10)")
    parser.add_argument("--collectives", choices=("both", *VARIANTS), default="both")
    parser.add_argument("--algorithm", default=None,
                        help="the mscclpp variant's ragged_all_to_all algorithm (an all_to_all algorithm forces ours; "
                        "default: the package's choice, lax's on GPUs, ours on CPU devices)")
    parser.add_argument("--ep", type=int, default=None, help="devices on the 'ep' axis (default: all)")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
    add_common_arguments(parser, tp=False)
    add_process_arguments(parser)
    args = parser.parse_args(argv)
    if args.top_k < 1 or args.experts_per_device < 1 or args.steps < 1 or args.processes < 1:
        parser.error("--top-k, --experts-per-device, --steps and --processes must be positive")
    if args.processes > 1 and args.ep not in (None, args.processes):
        parser.error(f"--ep {args.ep}: with --processes {args.processes} the 'ep' axis is every process's device")
    if args.capacity_factor is not None and args.capacity_factor <= 0:
        parser.error("--capacity-factor must be positive")
    return args


# ---- the model ---------------------------------------------------------------------------------------------

def init_params(key, d_model: int, d_ff: int, experts: int, dtype) -> dict:
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "scale": jnp.ones((d_model,), dtype),
        "router": (jax.random.normal(k1, (d_model, experts)) / np.sqrt(d_model)).astype(dtype),
        "w1": (jax.random.normal(k2, (experts, d_model, d_ff)) / np.sqrt(d_model)).astype(dtype),
        "w2": (jax.random.normal(k3, (experts, d_ff, d_model)) / np.sqrt(d_ff)).astype(dtype),
    }


def rmsnorm(x, scale):
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6) * scale.astype(jnp.float32)).astype(x.dtype)


def router_probs(params, h):
    return jax.nn.softmax(h.astype(jnp.float32) @ params["router"].astype(jnp.float32), axis=-1)


def renormalized(weights):
    """Top-k weights scaled to sum to 1 for k > 1 (as Mixtral's); top-1 keeps its probability (as Switch's)."""
    return weights / weights.sum(-1, keepdims=True) if weights.shape[-1] > 1 else weights


def moe_block(params, x, *, top_k: int, num_experts: int, capacity, algorithm):
    """The block on one device's tokens ``x [T, d]``, inside shard_map over "ep" (``params``' experts: this device's).
    Returns ``(y, expert_ids, dropped, sizes)``."""
    h = rmsnorm(x, params["scale"])
    weights, ids = lax.top_k(router_probs(params, h), top_k)
    weights = renormalized(weights)
    rows, routing = jm.moe.dispatch(h, ids, num_experts=num_experts, axis_name="ep", capacity=capacity,
                                    algorithm=algorithm)
    if capacity is None:  # the groups packed from row 0: one ragged matmul per layer
        hidden = jax.nn.gelu(lax.ragged_dot(rows, params["w1"], routing.group_sizes))
        out = lax.ragged_dot(hidden, params["w2"], routing.group_sizes)
    else:  # [local experts, capacity, d]
        hidden = jax.nn.gelu(jnp.einsum("lcd,ldf->lcf", rows, params["w1"]))
        out = jnp.einsum("lcf,lfd->lcd", hidden, params["w2"])
    y = x + jm.moe.combine(out, routing, weights)
    return y, ids, routing.dropped[None], routing.sizes[None]


def sharded_block(mesh, **kwargs):
    def local(params, x):
        return moe_block(params, x, **kwargs)

    return jax.shard_map(local, mesh=mesh, in_specs=(PARAM_SPECS, P("ep")),
                         out_specs=(P("ep"), P("ep"), P("ep"), P("ep")))


def kept_mask(ids, num_experts: int, capacity):
    """[N, k]: which (token, slot) rows an expert of ``capacity`` rows takes: first choices first, then in token
    order (the global order of the tokens split over "ep"); every row without capacity."""
    if capacity is None:
        return jnp.ones(ids.shape, bool)
    slot_major = ids.T.reshape(-1)
    onehot = jax.nn.one_hot(slot_major, num_experts, dtype=jnp.int32)
    rank = jnp.take_along_axis(jnp.cumsum(onehot, 0) - onehot, slot_major[:, None], 1)[:, 0]
    return (rank < capacity).reshape(ids.shape[::-1]).T


def dense_block(params, x, ids, *, num_experts: int, capacity):
    """The reference: the same block on every token on one device, in plain jnp, with the routing ``ids`` given (the
    weights recomputed from them): each expert in turn over every token, weighted where it was chosen and kept."""
    h = rmsnorm(x, params["scale"])
    probs = router_probs(params, h)
    weights = jnp.take_along_axis(probs, ids, 1)
    weights = jnp.where(kept_mask(ids, num_experts, capacity), renormalized(weights), 0)

    def one_expert(y, expert):
        w1, w2, e = expert
        coefficient = jnp.sum(jnp.where(ids == e, weights, 0), -1, keepdims=True)
        return y + coefficient * (jax.nn.gelu(h @ w1) @ w2).astype(jnp.float32), None

    y, _ = lax.scan(one_expert, jnp.zeros(x.shape, jnp.float32),
                    (params["w1"], params["w2"], jnp.arange(num_experts)))
    return x + y.astype(x.dtype)


def squared_error(y, target):
    return jnp.mean((y.astype(jnp.float32) - target) ** 2)


# ---- checks, timing, bytes ---------------------------------------------------------------------------------

def relative_error(ours, ref) -> float:
    """Max |ours - ref| over max |ref|, in float64 (the worst leaf of a pytree)."""
    worst = 0.0
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.max(np.abs(a64 - b64))) / max(float(np.max(np.abs(b64))), 1e-30))
    return worst


def bytes_moved(sizes, n: int, tokens: int, k: int, num_experts: int, d: int, itemsize: int) -> dict:
    """Per device, in the forward pass (the backward pass moves each exchange once more, the other way), from
    ``sizes[i, j]``, the rows device i sent device j."""
    rows = sizes.sum(1) - np.diag(sizes)  # rows each device sent to other devices
    row_bytes = d * itemsize
    return {
        "counts_all_gather": (n - 1) * k * num_experts * 4,  # every other device's int32 [k, experts] counts
        "dispatch_rows_sent_mean": float(rows.mean()),
        "dispatch_rows_sent_max": int(rows.max()),
        "dispatch_bytes_mean": float(rows.mean()) * row_bytes,  # what a ragged exchange moves
        "combine_bytes_mean": float((sizes.sum(0) - np.diag(sizes)).mean()) * row_bytes,
        # ours on CPU devices: a block of every row of the buffer sent, zero-padded, to every other device
        "composed_exchange_bytes": (n - 1) * tokens * k * row_bytes,
    }


def host_value(mesh, a) -> np.ndarray:
    """The whole value of ``a`` (split over "ep" on its first axis, or replicated) in this process. Where it is split
    over devices of other processes it is gathered with ``jm.all_gather``, which runs where processes share a GPU
    (XLA's all-gather would call NVIDIA's NCCL, which refuses that)."""
    if a.is_fully_addressable:
        return np.asarray(a)
    if a.sharding.is_fully_replicated:
        return np.asarray(a.addressable_data(0))
    if not (isinstance(a.sharding, NamedSharding) and tuple(a.sharding.spec)[:1] == ("ep",)
            and not any(tuple(a.sharding.spec)[1:])):
        raise ValueError(f"host_value: an array split as {a.sharding}; expected P('ep') or replicated")
    gather = jax.shard_map(lambda b: jm.all_gather(b, "ep", tiled=True, to="invarying"), mesh=mesh,
                           in_specs=P("ep"), out_specs=P())
    return np.asarray(jax.jit(gather)(a).addressable_data(0))


def measure(args) -> dict:
    """Every variant in this process (one of --processes N, or the only one): checks, step times, bytes."""
    shared_gpu = start_process(args)
    devices = jax.devices()
    platform = devices[0].platform
    n = args.ep or len(devices)
    if n > len(devices):
        sys.exit(f"--ep {n} needs {n} devices; {len(devices)} {platform} devices are here")
    gpu = platform != "cpu"
    tokens = args.tokens or (2048 if gpu else 64)
    d_model = args.d_model or (1024 if gpu else 64)
    d_ff = args.d_ff or 2 * d_model
    dtype_name = args.dtype or ("bfloat16" if gpu else "float32")
    dtype = jnp.dtype(dtype_name)
    k, num_experts = args.top_k, args.experts_per_device * n
    if k > num_experts:
        sys.exit(f"--top-k {k} is more than the {num_experts} experts")
    capacity = (None if args.capacity_factor is None
                else math.ceil(args.capacity_factor * n * tokens * k / num_experts))
    mesh = jax.sharding.Mesh(np.array(devices[:n]), ("ep",))

    # Every process builds the same global values from the seed.
    kp, kx, kt = jax.random.split(jax.random.key(args.seed), 3)
    params = init_params(kp, d_model, d_ff, num_experts, dtype)
    x = jax.random.normal(kx, (n * tokens, d_model)).astype(dtype)
    target = jax.random.normal(kt, (n * tokens, d_model), jnp.float32)
    placed = {name: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[name])) for name, v in params.items()}
    xs, targets = jax.device_put(x, NamedSharding(mesh, P("ep"))), jax.device_put(target, NamedSharding(mesh, P("ep")))
    # The reference runs on one device of this process, in float32 from the same (rounded) values.
    one = jax.local_devices()[0]
    params32 = jax.device_put(jax.tree.map(lambda a: a.astype(jnp.float32), params), one)
    x32, target1 = jax.device_put(x.astype(jnp.float32), one), jax.device_put(target, one)

    def dense_loss(p, x, ids):
        y = dense_block(p, x, ids, num_experts=num_experts, capacity=capacity)
        return squared_error(y, target1), y

    with jax.default_matmul_precision("highest"):
        dense = jax.jit(jax.value_and_grad(dense_loss, has_aux=True))
    tolerance = (GPU_TOLERANCE if gpu else TOLERANCE)[dtype_name]

    results, outputs, passed = [], {}, True
    for variant in args.variants:
        block = sharded_block(mesh, top_k=k, num_experts=num_experts, capacity=capacity,
                              algorithm=args.algorithm if variant == "mscclpp" else "lax")
        forward = jax.jit(block)

        def loss(p, x, target, block=block):
            y, ids, dropped, sizes = block(p, x)
            return squared_error(y, target), (y, ids, dropped, sizes)

        train = jax.jit(jax.value_and_grad(loss, has_aux=True))
        try:
            forward.lower(placed, xs).compile()
        except jax.errors.JaxRuntimeError as error:
            if "ragged-all-to-all" not in str(error):
                raise
            reason = f"{platform} has no ragged-all-to-all ({str(error).splitlines()[0]})"
            results.append({"collectives": variant, "ran": False, "reason": reason})
            continue
        (_, (y, ids, dropped, sizes)), grads = jax.block_until_ready(train(placed, xs, targets))
        y, ids, grads = host_value(mesh, y), host_value(mesh, ids), jax.tree.map(lambda g: host_value(mesh, g), grads)
        sizes = np.asarray(sizes.addressable_data(0))[0]  # the same [n, n] matrix on every device
        (_, ref_y), ref_grads = dense(params32, x32, jax.device_put(ids, one))
        agree = float(np.mean(ids == np.asarray(lax.top_k(router_probs(params32, rmsnorm(x32, params32[
            "scale"])), k)[1])))
        y_err = relative_error(y, ref_y)
        by_param = {name: relative_error(grads[name], ref_grads[name]) for name in sorted(grads)}
        grad_err = max(by_param.values())
        ok = y_err <= tolerance and grad_err <= tolerance
        passed &= ok
        outputs[variant] = (y, grads)
        forward_ms = _report.median_ms(forward, (placed, xs), args.steps)
        train_ms = _report.median_ms(train, (placed, xs, targets), args.steps)
        moved = bytes_moved(sizes, n, tokens, k, num_experts, d_model, dtype.itemsize)
        calls = [f"{c.collective} {c.algorithm}" for c in jm.explain(forward, placed, xs)]
        results.append({"collectives": variant, "ran": True, "explained": calls, "forward_ms": forward_ms,
                        "train_step_ms": train_ms,
                        "output_max_rel_error": y_err, "grad_max_rel_error": grad_err,
                        "grad_rel_error_by_param": by_param,
                        "rows_dropped": int(host_value(mesh, dropped).sum()),
                        "routing_agreement": agree, "rows_sent": sizes.tolist(), "bytes_per_device": moved,
                        "outputs_sha256": _report.digest([y] + [grads[name] for name in sorted(grads)]),
                        "passed": ok})

    report = {
        **_report.header("moe_layer", devices[:n], ep=n, processes=args.processes, shared_gpu=shared_gpu),
        "config": {"tokens_per_device": tokens, "d_model": d_model, "d_ff": d_ff, "experts": num_experts,
                   "experts_per_device": args.experts_per_device, "top_k": k, "capacity": capacity,
                   "capacity_factor": args.capacity_factor, "dtype": dtype_name, "steps": args.steps,
                   "variants": list(args.variants), "tolerance": tolerance},
        "results": results,
    }
    if len(outputs) == 2:
        (y_ours, g_ours), (y_lax, g_lax) = outputs["mscclpp"], outputs["lax"]
        diff = max(relative_error(y_ours, y_lax), relative_error(g_ours, g_lax))
        passed &= diff <= tolerance
        timed = {r["collectives"]: r for r in results}
        report["speedup"] = _report.speedup(timed["lax"]["train_step_ms"], timed["mscclpp"]["train_step_ms"])
        report["mscclpp_vs_lax_max_rel_error"] = diff
    report["passed"] = passed and bool(outputs)
    end_process(args, report)
    return report


def print_report(report: dict) -> None:
    config, devices = report["config"], report["devices"]
    n, k, capacity, tolerance = devices["ep"], config["top_k"], config["capacity"], config["tolerance"]
    processes = f" ({devices['processes']} processes)" if devices["processes"] > 1 else ""
    print(f"{n} {devices['platform']} devices on 'ep'{processes}; {config['tokens_per_device']} tokens per device, "
          f"d_model {config['d_model']}, d_ff {config['d_ff']}, {config['experts']} experts "
          f"({config['experts_per_device']} per device), top-{k}, "
          f"{'dropless' if capacity is None else f'capacity {capacity} rows per expert'}, {config['dtype']}")
    for row in report["results"]:
        variant = row["collectives"]
        if not row["ran"]:
            print(f"[{variant}] cannot run here: {row['reason']}; the dense jnp reference checks the other variant "
                  "instead")
            continue
        moved = row["bytes_per_device"]
        by_param = row["grad_rel_error_by_param"]
        worst = max(by_param, key=by_param.get)
        print(f"[{variant}] vs the dense reference: output max rel error {row['output_max_rel_error']:.2e}, gradients "
              f"{row['grad_max_rel_error']:.2e} (worst: {worst}; tolerance {tolerance:g}); {row['rows_dropped']} of "
              f"{n * config['tokens_per_device'] * k} rows dropped; routing as the reference's top-{k}: "
              f"{row['routing_agreement']:.1%} {'PASS' if row['passed'] else 'FAIL'}")
        print(f"[{variant}] median step over {config['steps']} steps: forward {row['forward_ms']:.3f} ms, forward+grad "
              f"{row['train_step_ms']:.3f} ms")
        print(f"[{variant}] per device, forward: counts all_gather {moved['counts_all_gather']} B; dispatch "
              f"{moved['dispatch_rows_sent_mean']:.1f} rows ({moved['dispatch_bytes_mean'] / 1024:.1f} KiB, at most "
              f"{moved['dispatch_rows_sent_max']} rows) to other devices, combine "
              f"{moved['combine_bytes_mean'] / 1024:.1f} KiB back; a ragged_all_to_all composed of all_to_all "
              f"(ours on CPU devices) moves "
              f"{moved['composed_exchange_bytes'] / 1024:.1f} KiB each way")
        calls = row["explained"]
        print(f"[{variant}] its collectives (jm.explain): "
              + ", ".join(f"{call} x{calls.count(call)}" for call in dict.fromkeys(calls)))
    if "mscclpp_vs_lax_max_rel_error" in report:
        diff = report["mscclpp_vs_lax_max_rel_error"]
        print(f"mscclpp vs lax: outputs and gradients max rel difference {diff:.2e} "
              f"{'PASS' if diff <= tolerance else 'FAIL'}; training step {_report.SPEEDUP} {report['speedup']:.2f}x")
    if not any(row["ran"] for row in report["results"]):
        print("FAIL: no variant could run here")
    if devices.get("shared_gpu"):
        print("processes share a GPU: their kernels take turns on it, so these step times measure that, not a link")


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    args.variants = list(VARIANTS) if args.collectives == "both" else [args.collectives]
    reports = reports_of(__file__, argv, args, measure, "moe_layer run")
    if not reports:
        return 0
    # Every process checked the whole (gathered) values: the run passes where every one of them did.
    report = combined_report(reports, "passed",
                             ("output_max_rel_error", "grad_max_rel_error", "grad_rel_error_by_param"))
    if "mscclpp_vs_lax_max_rel_error" in report:
        report["mscclpp_vs_lax_max_rel_error"] = max(r["mscclpp_vs_lax_max_rel_error"] for r in reports)
    report["passed"] = all(r["passed"] for r in reports)
    print_report(report)
    if args.processes > 1:
        # Every process gathered the whole outputs and gradients: equal bit for bit, and equal to another run's
        # where only how the bytes travel differs (JAX_MSCCLPP_MAP_CUMEM=0: through scratch).
        report["replicas_equal"] = replicas_agree(reports, "outputs_sha256")
        report["passed"] &= report["replicas_equal"]
        print_between_processes(report, "outputs_sha256", "outputs and gradients")
        print(f"the {args.processes} processes' outputs {'equal' if report['replicas_equal'] else 'DIFFER'}")
    _report.write(report, args.out)
    print("PASS" if report["passed"] else "FAIL")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
