"""A flax (nnx) tensor-parallel transformer, moved onto jax_mscclpp's collectives by ``jm.rewrite``.

The model is ordinary flax code written for lax: pre-norm transformer blocks split Megatron-style over the mesh
axis "tp" (the fused QKV and MLP up projections column-parallel, the attention output and MLP down projections
row-parallel, each ending in ``lax.psum``), parameters annotated with ``nnx.with_partitioning``, run under
``jax.shard_map``. Nothing in it names jax_mscclpp. One line moves a training step onto our collectives:

    train_step = jax.jit(jm.rewrite(train_step))

That replaces the model's psums and also the psums JAX inserts into the backward pass (the gradient of each
layer-norm output, which every rank's column-parallel layer reads, is summed over "tp"). The script runs the
forward pass and the training step both ways, checks ours against lax (forward output, loss and every gradient),
checks that the compiled program holds our custom calls and no lax collective, and times both.

    python examples/flax_tensor_parallel.py                          # 8 virtual CPU devices, or every local GPU
    python examples/flax_tensor_parallel.py --d-model 2048 --heads 16 --d-ff 8192 --seq 512 --out flax.json
    python examples/flax_tensor_parallel.py --log                    # show what rewrite replaced

Needs flax (``pip install -e ".[examples]"``). Without a GPU the script asks XLA for ``--cpu-devices`` (default 8)
virtual CPU devices before JAX starts. Exit status: 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

from _devices import add_common_arguments, configure_cpu_devices, tensor_parallel_devices  # examples/_devices.py

configure_cpu_devices(sys.argv[1:])

import jax  # noqa: E402  (after XLA_FLAGS is set)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

try:
    from flax import nnx  # noqa: E402
except ImportError:
    sys.exit("this example needs flax: pip install flax (or pip install -e '.[examples]')")

import jax_mscclpp as jm  # noqa: E402
import _report  # noqa: E402  (examples/_report.py)

# Ours against lax, relative to the largest magnitude of lax's value: the two differ only in the order of the
# cross-device sums (float32), or also in where bfloat16 rounds them.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}

LAX_COLLECTIVE_OPS = re.compile(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(-start)?\(")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4, help="sequences per step (default 4)")
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    parser.add_argument("--d-model", type=int, default=512, help="model width (default 512)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads, divisible by tp (default 8)")
    parser.add_argument("--d-ff", type=int, default=2048, help="MLP width, divisible by tp (default 2048)")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--steps", type=int, default=20, help="timed iterations (default 20)")
    add_common_arguments(parser, dtype_help="parameter and activation dtype (default: float32 on CPU, bfloat16 on GPU)")
    parser.add_argument("--log", action="store_true", help="print what jm.rewrite replaced or kept")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
    return parser.parse_args(argv)


# ---- the model: flax code written for lax, unaware of jax_mscclpp --------------------------------------------

class ParallelBlock(nnx.Module):
    """A pre-norm transformer block for use inside ``shard_map`` over "tp": attention heads and MLP columns are
    split over the devices; the layer norms and the row-parallel biases are replicated."""

    def __init__(self, d_model: int, heads: int, d_ff: int, mesh, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        column = nnx.with_partitioning(init, (None, "tp"), mesh=mesh)
        row = nnx.with_partitioning(init, ("tp", None), mesh=mesh)
        self.head_dim = d_model // heads
        self.norm1 = nnx.LayerNorm(d_model, rngs=rngs)
        # Head-major columns (head, q|k|v, head_dim): each device's contiguous share holds whole heads.
        self.qkv = nnx.Linear(d_model, 3 * d_model, use_bias=False, kernel_init=column, rngs=rngs)
        self.attn_out = nnx.Linear(d_model, d_model, use_bias=False, kernel_init=row, rngs=rngs)
        self.attn_bias = nnx.Param(0.1 * jax.random.normal(rngs.params(), (d_model,)))
        self.norm2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.up = nnx.Linear(d_model, d_ff, kernel_init=column, rngs=rngs,
                             bias_init=nnx.with_partitioning(nnx.initializers.normal(0.1), ("tp",), mesh=mesh))
        self.down = nnx.Linear(d_ff, d_model, use_bias=False, kernel_init=row, rngs=rngs)
        self.down_bias = nnx.Param(0.1 * jax.random.normal(rngs.params(), (d_model,)))

    def __call__(self, x):
        batch, seq, _ = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(batch, seq, -1, 3, self.head_dim)  # this device's heads
        attn = nnx.dot_product_attention(qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :], is_causal=True)
        x = x + lax.psum(self.attn_out(attn.reshape(batch, seq, -1)), "tp") + self.attn_bias
        hidden = nnx.gelu(self.up(self.norm2(x)))
        return x + lax.psum(self.down(hidden), "tp") + self.down_bias


class ParallelTransformer(nnx.Module):
    def __init__(self, layers: int, d_model: int, heads: int, d_ff: int, mesh, *, rngs: nnx.Rngs):
        self.blocks = nnx.List([ParallelBlock(d_model, heads, d_ff, mesh, rngs=rngs) for _ in range(layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def make_steps(graphdef, specs, mesh, learning_rate: float = 1e-2):
    """The forward pass and an SGD training step over the model's parameter state, as a user writes them."""

    def forward(state, x):
        def body(state, x):
            return nnx.merge(graphdef, state)(x)

        return jax.shard_map(body, mesh=mesh, in_specs=(specs, P()), out_specs=P())(state, x)

    def loss_fn(state, x, target):
        return jnp.mean((forward(state, x).astype(jnp.float32) - target) ** 2)

    def train_step(state, x, target):
        loss, grads = jax.value_and_grad(loss_fn)(state, x, target)
        new_state = jax.tree.map(lambda p, g: (p - learning_rate * g).astype(p.dtype), state, grads)
        return loss, grads, new_state

    return forward, train_step


# ---- checks and timing -------------------------------------------------------------------------------------

def relative_error(ours, ref) -> float:
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-30)


def compile_and_inspect(fn, args) -> tuple:
    """(compiled fn, our custom calls in it, lax collective ops left in it)."""
    compiled = fn.lower(*args).compile()
    text = compiled.as_text()
    return (compiled, len(re.findall(r'custom_call_target="jax_mscclpp_\w+"', text)),
            sorted({m[0] for m in LAX_COLLECTIVE_OPS.findall(text)}))


def run(args) -> dict:
    devices, plat, tp = tensor_parallel_devices(args.tp)
    for name, value in (("--heads", args.heads), ("--d-ff", args.d_ff)):
        if value % tp:
            sys.exit(f"{name} {value} must divide by the {tp} devices on 'tp'")
    if args.d_model % args.heads:
        sys.exit(f"--d-model {args.d_model} must divide by --heads {args.heads}")
    dtype_name = args.dtype or ("float32" if plat == "cpu" else "bfloat16")
    dtype = jnp.dtype(dtype_name)
    mesh = jax.sharding.Mesh(np.array(devices[:tp]), ("tp",))
    print(f"flax nnx transformer: {args.layers} blocks, d_model {args.d_model}, {args.heads} heads, "
          f"d_ff {args.d_ff}; batch {args.batch} x seq {args.seq}; {dtype_name}; {tp} {plat} devices on 'tp'")

    model = ParallelTransformer(args.layers, args.d_model, args.heads, args.d_ff, mesh,
                                rngs=nnx.Rngs(args.seed))
    graphdef, state = nnx.split(model)
    specs = nnx.get_partition_spec(state)
    state = jax.device_put(jax.tree.map(lambda a: a.astype(dtype), state),
                           jax.tree.map(lambda s: NamedSharding(mesh, s), specs))
    kx, kt = jax.random.split(jax.random.key(args.seed + 1))
    replicated = NamedSharding(mesh, P())
    x = jax.device_put(jax.random.normal(kx, (args.batch, args.seq, args.d_model)).astype(dtype), replicated)
    target = jax.device_put(jax.random.normal(kt, (args.batch, args.seq, args.d_model), jnp.float32), replicated)

    forward, train_step = make_steps(graphdef, specs, mesh)
    programs = {  # (name, which collectives) -> jitted function
        ("forward", "lax"): jax.jit(forward),
        ("forward", "mscclpp"): jax.jit(jm.rewrite(forward)),
        ("train step", "lax"): jax.jit(train_step),
        ("train step", "mscclpp"): jax.jit(jm.rewrite(train_step)),  # the one-line adoption
    }
    inputs = {"forward": (state, x), "train step": (state, x, target)}
    compiled, outputs, census = {}, {}, {}
    for (what, name), fn in programs.items():
        compiled[what, name], ours_calls, lax_ops = compile_and_inspect(fn, inputs[what])
        outputs[what, name] = jax.block_until_ready(compiled[what, name](*inputs[what]))
        census[what, name] = {"jax_mscclpp_custom_calls": ours_calls, "lax_collectives": lax_ops}

    tol = TOLERANCE[dtype_name]
    checks = []

    def check(label: str, passed: bool, detail: str) -> None:
        checks.append({"check": label, "passed": bool(passed), "detail": detail})
        print(f"{label}: {detail} {'PASS' if passed else 'FAIL'}")

    err = relative_error(outputs["forward", "mscclpp"], outputs["forward", "lax"])
    check("forward output", err <= tol, f"max rel error {err:.2e} (tolerance {tol:g})")
    (loss_ours, grads_ours, _), (loss_lax, grads_lax, _) = outputs["train step", "mscclpp"], outputs["train step", "lax"]
    err = relative_error(loss_ours, loss_lax)
    check("loss", err <= tol, f"{float(loss_ours):.6f} vs lax {float(loss_lax):.6f}, rel error {err:.2e}")
    leaves_ours, leaves_lax = jax.tree.leaves(grads_ours), jax.tree.leaves(grads_lax)
    worst = max(relative_error(a, b) for a, b in zip(leaves_ours, leaves_lax))
    check("gradients", worst <= tol, f"{len(leaves_lax)} parameters, worst max rel error {worst:.2e}")
    for what in ("forward", "train step"):
        ours, theirs = census[what, "mscclpp"], census[what, "lax"]
        detail = (f"{ours['jax_mscclpp_custom_calls']} jax_mscclpp custom calls, lax collectives left: "
                  f"{', '.join(ours['lax_collectives']) or 'none'} (lax's program: "
                  f"{', '.join(theirs['lax_collectives'])})")
        if tp == 1:  # nothing to exchange: jax_mscclpp emits lax's own reductions, which move no data
            passed = not ours["jax_mscclpp_custom_calls"] and ours["lax_collectives"] == theirs["lax_collectives"]
            detail += "; one device on 'tp': lax's own reductions, as in lax's program"
        else:
            passed = ours["jax_mscclpp_custom_calls"] > 0 and not ours["lax_collectives"]
        check(f"{what} program", passed, detail)

    timings = {}
    print(f"\n{'step':<12} {'lax ms':>10} {'mscclpp ms':>11} {_report.SPEEDUP:>19}")
    for what in ("forward", "train step"):
        t = {name: _report.median_ms(compiled[what, name], inputs[what], args.steps) for name in ("lax", "mscclpp")}
        timings[what] = {"lax_median_ms": t["lax"], "mscclpp_median_ms": t["mscclpp"],
                         "speedup": _report.speedup(t["lax"], t["mscclpp"])}
        print(f"{what:<12} {t['lax']:>10.3f} {t['mscclpp']:>11.3f} {timings[what]['speedup']:>18.2f}x")
    print(f"(median of {args.steps} steps, each blocking; {tp} {plat} devices; speedup above 1: mscclpp is faster)")

    passed = all(c["passed"] for c in checks)
    print("PASS" if passed else "FAIL")
    return {
        **_report.header("flax_tensor_parallel", devices, tp=tp),
        "config": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads, "d_ff": args.d_ff,
                   "batch": args.batch, "seq": args.seq, "dtype": dtype_name, "steps": args.steps,
                   "xla_flags": os.environ.get("XLA_FLAGS", "")},
        "programs": {f"{what}/{name}": c for (what, name), c in census.items()},
        "checks": checks,
        "timings": timings,
        "passed": passed,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.log:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("jax_mscclpp.rewrite").setLevel(logging.DEBUG)
    report = run(args)
    _report.write(report, args.out)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
