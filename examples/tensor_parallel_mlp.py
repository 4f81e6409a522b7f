"""A tensor-parallel MLP whose partial sums meet in ``jax_mscclpp.psum``.

Megatron's MLP split over a 1-D mesh axis "tp": W1 is column-parallel (each device holds d_ff/tp columns, so the
GeLU needs no communication), W2 is row-parallel (each device holds the matching d_ff/tp rows and produces a
partial [batch, d_model] product), and one all-reduce sums the partials. The sharded forward pass and the
gradient of a loss through it (autodiff through ``jm.psum``) are checked against the same model run unsharded.

    python examples/tensor_parallel_mlp.py                      # 8 virtual CPU devices, or every local GPU
    python examples/tensor_parallel_mlp.py --compare            # time jax_mscclpp and lax side by side
    python examples/tensor_parallel_mlp.py --collectives lax    # the plain lax.psum baseline

Without a GPU the script asks XLA for ``--cpu-devices`` (default 8) virtual CPU devices before JAX starts; an
``xla_force_host_platform_device_count`` already in XLA_FLAGS is kept unless ``--cpu-devices`` is given, and
JAX_PLATFORMS, when set, decides the platform. Exit status: 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

from _devices import add_common_arguments, configure_cpu_devices, tensor_parallel_devices  # examples/_devices.py

configure_cpu_devices(sys.argv[1:])

import jax  # noqa: E402  (after XLA_FLAGS is set)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_mscclpp as jm  # noqa: E402
import _report  # noqa: E402  (examples/_report.py)

# Error budget of the sharded result against the unsharded one, relative to the reference's largest magnitude:
# float32 differs only by summation order; bfloat16 rounds every product and partial sum to 8 bits. On GPUs,
# XLA's default precision multiplies float32 matrices in TF32 (10-bit mantissa), while the reference multiplies
# at the highest precision.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
GPU_TOLERANCE = {"float32": 4e-3, "bfloat16": 5e-2}

PSUM = {"mscclpp": jm.psum, "lax": lax.psum}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="tokens per step (default 16)")
    parser.add_argument("--d-model", type=int, default=1024, help="model width (default 1024)")
    parser.add_argument("--d-ff", type=int, default=4096, help="hidden width, divisible by the device count")
    parser.add_argument("--steps", type=int, default=20, help="timed iterations (default 20)")
    parser.add_argument("--collectives", choices=("mscclpp", "lax"), default="mscclpp",
                        help="whose psum joins the partial sums (default mscclpp)")
    parser.add_argument("--compare", action="store_true", help="time mscclpp and lax side by side")
    add_common_arguments(parser, dtype="float32")
    return parser.parse_args(argv)


# ---- the model ---------------------------------------------------------------------------------------------

def init_params(key, d_model: int, d_ff: int, dtype) -> dict:
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return {
        "w1": (jax.random.normal(k1, (d_model, d_ff)) / np.sqrt(d_model)).astype(dtype),
        "b1": (0.1 * jax.random.normal(k2, (d_ff,))).astype(dtype),
        "w2": (jax.random.normal(k3, (d_ff, d_model)) / np.sqrt(d_ff)).astype(dtype),
        "b2": (0.1 * jax.random.normal(k4, (d_model,))).astype(dtype),
    }


# How each parameter is laid out over the "tp" axis.
PARAM_SPECS = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}


def mlp(params: dict, x):
    """The unsharded MLP (the reference)."""
    h = jax.nn.gelu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def sharded_mlp(mesh, psum):
    """The MLP under ``shard_map`` over "tp"; ``psum`` (jm.psum or lax.psum) joins the row-parallel partials."""

    def local(params, x):
        h = jax.nn.gelu(x @ params["w1"] + params["b1"])  # [batch, d_ff/tp]: column-parallel, no communication
        partial = h @ params["w2"]  # [batch, d_model]: this device's share of the row-parallel product
        return psum(partial, "tp") + params["b2"]

    return jax.shard_map(local, mesh=mesh, in_specs=(PARAM_SPECS, P()), out_specs=P())


def loss_fn(forward):
    def loss(params, x, target):
        y = forward(params, x).astype(jnp.float32)
        return jnp.mean((y - target) ** 2)

    return loss


# ---- checks and timing -------------------------------------------------------------------------------------

def relative_error(ours, ref) -> tuple[float, float]:
    """(max abs error, max abs error / max abs reference), in float64."""
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(ref, dtype=np.float64)
    err = float(np.max(np.abs(a - b)))
    return err, err / max(float(np.max(np.abs(b))), 1e-30)


def run(args) -> bool:
    devices, platform, tp = tensor_parallel_devices(args.tp)
    if args.d_ff % tp:
        sys.exit(f"--d-ff {args.d_ff} must divide by the {tp} devices on the 'tp' axis")
    mesh = jax.sharding.Mesh(np.array(devices[:tp]), ("tp",))
    dtype = jnp.dtype(args.dtype)
    print(f"{tp} {platform} devices on mesh axis 'tp'; batch {args.batch}, d_model {args.d_model}, "
          f"d_ff {args.d_ff} ({args.d_ff // tp} per device), {args.dtype}")

    kp, kx, kt = jax.random.split(jax.random.key(args.seed), 3)
    params = init_params(kp, args.d_model, args.d_ff, dtype)
    x = jax.random.normal(kx, (args.batch, args.d_model)).astype(dtype)
    target = jax.random.normal(kt, (args.batch, args.d_model), dtype=jnp.float32)

    # The reference: the unsharded model on one device, in float32 from the same (rounded) values.
    with jax.default_matmul_precision("highest"):
        params32 = jax.tree.map(lambda a: a.astype(jnp.float32), params)
        ref_y = jax.jit(mlp)(params32, x.astype(jnp.float32))
        ref_grads = jax.jit(jax.grad(loss_fn(mlp)))(params32, x.astype(jnp.float32), target)

    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    replicated = NamedSharding(mesh, P())
    xs, targets = jax.device_put(x, replicated), jax.device_put(target, replicated)

    tol = (TOLERANCE if platform == "cpu" else GPU_TOLERANCE)[args.dtype]
    ok = True
    which = ("mscclpp", "lax") if args.compare else (args.collectives,)
    timings = {}
    for name in which:
        forward = sharded_mlp(mesh, PSUM[name])
        fwd = jax.jit(forward)
        grad = jax.jit(jax.value_and_grad(loss_fn(forward)))
        try:
            y = jax.block_until_ready(fwd(placed, xs))
        except NotImplementedError:
            if name == "mscclpp" and platform != "cpu":
                print(f"note: jax_mscclpp has no {platform} backend yet; run with --collectives lax",
                      file=sys.stderr)
            raise
        abs_err, rel_err = relative_error(y, ref_y)
        passed = rel_err <= tol
        ok &= passed
        print(f"[{name}] forward: max abs error {abs_err:.3e}, max rel error {rel_err:.3e} (tolerance {tol:g}) "
              f"{'PASS' if passed else 'FAIL'}")

        _, grads = jax.block_until_ready(grad(placed, xs, targets))
        errors = {k: relative_error(grads[k], ref_grads[k]) for k in sorted(grads)}
        worst = max(errors, key=lambda k: errors[k][1])
        passed = errors[worst][1] <= tol
        ok &= passed
        print(f"[{name}] grad of loss (w1, b1, w2, b2): worst is {worst}: max abs error {errors[worst][0]:.3e}, "
              f"max rel error {errors[worst][1]:.3e} {'PASS' if passed else 'FAIL'}")

        timings[name] = (_report.median_ms(fwd, (placed, xs), args.steps),
                         _report.median_ms(grad, (placed, xs, targets), args.steps))

    for name, (fwd_ms, grad_ms) in timings.items():
        print(f"timing [{name}]: median step over {args.steps} steps: forward {fwd_ms:.3f} ms, "
              f"forward+grad {grad_ms:.3f} ms ({tp} {platform} devices)")
    if len(timings) == 2:
        (f_ours, g_ours), (f_lax, g_lax) = timings["mscclpp"], timings["lax"]
        print(f"timing {_report.SPEEDUP}: forward {_report.speedup(f_lax, f_ours):.2f}x, forward+grad "
              f"{_report.speedup(g_lax, g_ours):.2f}x (above 1: mscclpp is faster)")
    print("PASS" if ok else "FAIL")
    return ok


def main(argv=None) -> int:
    return 0 if run(parse_args(argv)) else 1


if __name__ == "__main__":
    sys.exit(main())
