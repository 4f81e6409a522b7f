"""``python -m jax_mscclpp.tools.bench.model``: collectives where models use them, ours and lax in one run.

Each program is ``--layers`` tensor-parallel MLP blocks in one jit (``shard_map`` over all devices on axis "tp"):
``h = rms_norm(x); x = x + psum(gelu(h @ w_in) @ w_out)``, with ``w_in`` column-parallel and ``w_out``
row-parallel, so every block ends in one all-reduce of ``rows x d_model`` between two matmuls, followed by the
residual add and the next RMSNorm, as in a transformer. Variants: the lax composition; the same with ``jm.psum``;
and ``jm.fused.all_reduce_residual_rmsnorm`` (all-reduce, residual add and norm in one kernel). Reported per block:
wall time of the program (median over ``--iters``), and with ``--profile DIR`` the device time of the kernels that
are not matrix products (the collective and its epilogue) from a profiler trace.

    python -m jax_mscclpp.tools.bench.model --rows 8 --d-model 4096 --d-ff 8192 --layers 64 --out bench/results
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time

VARIANTS = ("lax", "mscclpp", "mscclpp_fused")
_MATMUL = re.compile(r"gemm|cutlass|cublas|nvjet|xmma|sm90_|wgmma|matmul|dot", re.IGNORECASE)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m jax_mscclpp.tools.bench.model", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="8", help="comma list of rows (tokens) per block, e.g. 1,8,64 (default 8)")
    p.add_argument("--d-model", type=int, default=4096)
    p.add_argument("--d-ff", type=int, default=8192, help="MLP width over all devices")
    p.add_argument("--layers", type=int, default=64)
    p.add_argument("--dtype", default=None, help="default: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--profile", default=None, metavar="DIR", help="also profile each variant into DIR")
    p.add_argument("--out", default=None, metavar="DIR", help="write model-<date>.json into DIR")
    return p.parse_args(argv)


def build(variant: str, mesh, layers: int, eps: float = 1e-5):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    import jax_mscclpp as jm

    def norm(x, w):
        x32 = x.astype(jnp.float32)
        x32 = x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
        return (x32 * w.astype(jnp.float32)).astype(x.dtype)

    def body(x, w_in, w_out, g):
        h = norm(x, g)
        for _ in range(layers):
            partial = jax.nn.gelu(h @ w_in) @ w_out
            if variant == "mscclpp_fused":
                h, x = jm.fused.all_reduce_residual_rmsnorm(partial, x, g, "tp", eps=eps)
            else:
                x = x + (lax.psum(partial, "tp") if variant == "lax" else jm.psum(partial, "tp"))
                h = norm(x, g)
        return h

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(None, "tp"), P("tp", None), P()),
                                 out_specs=P()))


def main(argv=None) -> int:
    args = parse_args(argv)
    from . import machine, report

    machine.ensure_host_devices(machine.DEFAULT_HOST_DEVICES)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    platform = devices[0].platform
    mesh = Mesh(np.array(devices), ("tp",))
    dtype = jnp.dtype(args.dtype or ("float32" if platform == "cpu" else "bfloat16"))
    variants = [v for v in args.variants.split(",") if v]
    rng = np.random.default_rng(0)
    results = []
    print(f"# model-shaped bench: {len(devices)} x {devices[0].device_kind}, {args.layers} blocks of "
          f"[rows x {args.d_model}] @ [{args.d_model} x {args.d_ff}] @ [{args.d_ff} x {args.d_model}] -> all-reduce")
    caveat = report.caveat({"platform": platform})
    if caveat:
        print(f"# caveat: {caveat}")
    print(f"{'rows':>5} {'msg KiB':>8} {'variant':<14} {'us/block':>9} {'speedup (lax/ours)':>18} {'coll+epi us':>12}")
    for rows in [int(r) for r in args.rows.split(",")]:
        x = jnp.asarray(rng.standard_normal((rows, args.d_model)), dtype)
        w_in = jax.device_put(jnp.asarray(rng.standard_normal((args.d_model, args.d_ff)) / np.sqrt(args.d_model),
                                          dtype), NamedSharding(mesh, P(None, "tp")))
        w_out = jax.device_put(jnp.asarray(rng.standard_normal((args.d_ff, args.d_model)) / np.sqrt(args.d_ff),
                                           dtype), NamedSharding(mesh, P("tp", None)))
        g = jnp.ones((args.d_model,), dtype)
        per_block, outs = {}, {}
        for variant in variants:
            fn = build(variant, mesh, args.layers)
            for _ in range(args.warmup):
                jax.block_until_ready(fn(x, w_in, w_out, g))
            times = []
            for _ in range(args.iters):
                start = time.perf_counter()
                outs[variant] = jax.block_until_ready(fn(x, w_in, w_out, g))
                times.append(time.perf_counter() - start)
            per_block[variant] = 1e6 * statistics.median(times) / args.layers
            row = {"rows": rows, "message_bytes": rows * args.d_model * dtype.itemsize, "variant": variant,
                   "us_per_block": per_block[variant]}
            if "lax" in per_block and variant != "lax":
                row["speedup"] = per_block["lax"] / per_block[variant]
            if args.profile:
                from . import profile

                path = profile.capture(lambda: fn(x, w_in, w_out, g), 3,
                                       os.path.join(args.profile, f"model-{variant}-r{rows}"))
                summary = profile.summarize(path, 3 * args.layers, top=20)
                other = sum(k["total_us_per_step"] for k in summary["kernels"] if not _MATMUL.search(k["name"]))
                row.update(non_matmul_us_per_block=other, profile=summary)
            results.append(row)
            speed = f"{row['speedup']:7.2f}x" if "speedup" in row else ""
            other = f"{row['non_matmul_us_per_block']:12.2f}" if "non_matmul_us_per_block" in row else ""
            print(f"{rows:>5} {row['message_bytes'] / 1024:>8.0f} {variant:<14} {per_block[variant]:>9.2f} "
                  f"{speed:>18} {other}")
        ref = np.asarray(outs[variants[0]], np.float64)
        for variant in variants[1:]:
            diff = float(np.max(np.abs(np.asarray(outs[variant], np.float64) - ref))) / max(float(np.max(np.abs(ref))), 1)
            if diff > (1e-3 if dtype == jnp.float32 else 1e-1):
                print(f"FAIL: {variant} differs from {variants[0]} by {diff:.3g} (relative)")
                return 1
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stamp = datetime.datetime.now(datetime.timezone.utc)
        path = os.path.join(args.out, f"model-{platform}-{len(devices)}dev-{stamp:%Y%m%d-%H%M%S}.json")
        with open(path, "w") as f:
            json.dump({"bench": "model", "date": stamp.isoformat(timespec="seconds"), "caveat": caveat,
                       "devices": {"platform": platform, "kind": devices[0].device_kind, "count": len(devices)},
                       "config": {**vars(args)}, "results": results}, f, indent=2)
        print(f"# wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
