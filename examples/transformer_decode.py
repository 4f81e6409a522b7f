"""Greedy decoding with a tensor-parallel Llama-style decoder, jax_mscclpp's collectives beside lax's.

The model is plain JAX with random weights: RMSNorm, rotary attention with grouped-query heads and a KV cache,
a SwiGLU MLP, widths from a tiny toy to Llama-3-8B/70B-like layers (few of them). Tensor parallelism over the mesh
axis "tp" follows Megatron: query/key/value heads and the MLP's gate/up columns are split over the devices, the
attention output and MLP down projections are row-parallel and end in one psum each. The embedding is split over
the vocabulary (one psum) and so is the LM head; the greedy argmax over the vocabulary shards takes a pmax and a
pmin. The whole decode step is one jitted ``shard_map`` and the KV cache is a donated argument.

    python examples/transformer_decode.py --preset tiny --steps 4
    python examples/transformer_decode.py --preset 8b --layers 2 --batch 1,8,64 --out decode.json
    python examples/transformer_decode.py --preset 8b --layers 4 --batch 8 --profile /tmp/decode-profile

With ``--collectives both`` (the default) each batch size runs with jax_mscclpp's collectives and with lax's,
and the run fails (exit status 1) unless both produce close logits, and the same tokens unless fused. The
jax_mscclpp variant ends each row-parallel projection with ``jm.fused.all_reduce_residual_rmsnorm`` (the
all-reduce, the residual add and the next RMSNorm in one kernel on GPUs) unless ``--no-fused``; its RMSNorm sums a
row in another order than XLA's, so a greedy pick between two nearly equal logits can differ after some steps,
and with ``--fused`` the logits are compared up to the first step whose tokens differ. ``--profile DIR`` profiles decode steps of each
variant and prints, per step, GPU busy and idle time and the collective kernels' time.

With ``--processes N`` each process drives one device under ``jax.distributed`` ('tp' spans the processes), builds
the same weights and prompts from ``--seed``, and compares the logits shards it holds; the generated tokens, which
every process holds whole, must be equal in every process. Each process prints a digest of its tokens and logits
shards per variant: two runs that differ only in how our calls between the processes travel
(``JAX_MSCCLPP_MAP_CUMEM=0``: through scratch) print the same digests. Where processes share a GPU, lax's variant
runs through our NCCL library (NVIDIA's refuses a shared GPU) and their kernels take turns on the GPU: their step
times measure that, not a link.

    python examples/transformer_decode.py --processes 2 --preset tiny --batch 1,8 --out decode.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _devices import (add_common_arguments, configure_cpu_devices, placed,  # examples/_devices.py
                      tensor_parallel_devices)
from _processes import (add_process_arguments, end_process, one_process, reports_of,  # examples/_processes.py
                        start_process)

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

PRESETS = {
    "tiny": dict(d_model=256, n_heads=16, n_kv_heads=8, head_dim=16, d_ff=512, vocab=1024, layers=2,
                 rope_theta=10_000.0),
    "small": dict(d_model=1024, n_heads=16, n_kv_heads=8, head_dim=64, d_ff=2816, vocab=32_000, layers=4,
                  rope_theta=10_000.0),
    "8b": dict(d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128, d_ff=14_336, vocab=128_256, layers=2,
               rope_theta=500_000.0),
    "70b": dict(d_model=8192, n_heads=64, n_kv_heads=8, head_dim=128, d_ff=28_672, vocab=128_256, layers=1,
                rope_theta=500_000.0),
}

# The collectives each variant uses: (psum, pmax, pmin).
COLLECTIVES = {
    "mscclpp": (jm.psum, jm.pmax, jm.pmin),
    "lax": (lax.psum, lax.pmax, lax.pmin),
}

# Largest |logits(mscclpp) - logits(lax)| allowed, relative to the largest |logit|: the two differ only in the
# order partial sums are added.
LOGIT_TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=tuple(PRESETS), default="tiny")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the preset's)")
    parser.add_argument("--batch", default="1,8,64", help="comma-separated batch sizes (default 1,8,64)")
    parser.add_argument("--steps", type=int, default=16, help="tokens generated per sequence (default 16)")
    parser.add_argument("--prompt-len", type=int, default=4, help="random prompt tokens per sequence (default 4)")
    parser.add_argument("--collectives", choices=("both", "mscclpp", "lax"), default="both")
    add_common_arguments(parser)
    parser.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True,
                        help="jax_mscclpp variant: fused all-reduce + residual + RMSNorm (default: on)")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="profile --profile-steps decode steps per variant into DIR and print per-step figures")
    parser.add_argument("--profile-steps", type=int, default=12)
    parser.add_argument("--profile-batches", default=None,
                        help="comma-separated batch sizes to profile (default: every --batch)")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
    add_process_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.batch = [int(b) for b in args.batch.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batch takes comma-separated integers, not {args.batch!r}")
    if not args.batch or min(args.batch) < 1 or args.steps < 1 or args.prompt_len < 1:
        parser.error("--batch sizes, --steps and --prompt-len must be positive")
    if args.processes < 1:
        parser.error("--processes must be positive")
    if args.processes > 1 and args.tp not in (None, args.processes):
        parser.error(f"--tp {args.tp}: with --processes {args.processes} the 'tp' axis is every process's device")
    if args.processes > 1 and args.profile:
        parser.error("--profile profiles one process: leave out --processes")
    return args


# ---- the model ---------------------------------------------------------------------------------------------

def param_specs(cfg: dict) -> dict:
    """How each weight is laid out over "tp" (global shape, partition spec)."""
    d, h, kv, dh, f, v = (cfg[k] for k in ("d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab"))
    layer = {
        "attn_norm": ((d,), P()),
        "wq": ((d, h * dh), P(None, "tp")),  # columns are head-major: splitting them splits the heads
        "wk": ((d, kv * dh), P(None, "tp")),
        "wv": ((d, kv * dh), P(None, "tp")),
        "wo": ((h * dh, d), P("tp", None)),  # row-parallel: ends in a psum
        "mlp_norm": ((d,), P()),
        "w_gate": ((d, f), P(None, "tp")),
        "w_up": ((d, f), P(None, "tp")),
        "w_down": ((f, d), P("tp", None)),  # row-parallel: ends in a psum
    }
    return {
        "embed": ((v, d), P("tp", None)),  # vocabulary-parallel
        "layers": [dict(layer) for _ in range(cfg["layers"])],
        "final_norm": ((d,), P()),
        "lm_head": ((d, v), P(None, "tp")),
    }


def _is_leaf(x):
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], P)


def init_params(key, cfg: dict, dtype, mesh) -> dict:
    """Random weights, each created directly in its shards."""
    specs = param_specs(cfg)
    leaves, treedef = jax.tree_util.tree_flatten(specs, is_leaf=_is_leaf)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(specs, is_leaf=_is_leaf)[0]]

    def build(key):
        keys = jax.random.split(key, len(leaves))
        out = []
        for k, path, (shape, _) in zip(keys, paths, leaves):
            if "norm" in path:
                out.append(jnp.ones(shape, dtype))
            elif "embed" in path:
                out.append(jax.random.normal(k, shape, dtype))
            else:  # fan-in scaling keeps activations O(1) through the layers
                out.append((jax.random.normal(k, shape, jnp.float32) / np.sqrt(shape[0])).astype(dtype))
        return jax.tree_util.tree_unflatten(treedef, out)

    shardings = jax.tree_util.tree_unflatten(treedef, [NamedSharding(mesh, s) for _, s in leaves])
    return jax.jit(build, out_shardings=shardings)(key)


CACHE_SPEC = P(None, None, None, None, "tp", None)  # [layer, k|v, batch, position, kv head, head dim]


def new_cache(cfg: dict, batch: int, max_len: int, dtype, mesh):
    shape = (cfg["layers"], 2, batch, max_len, cfg["n_kv_heads"], cfg["head_dim"])
    return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=NamedSharding(mesh, CACHE_SPEC))()


RMS_EPS = 1e-5


def rms_norm(x, weight, eps=RMS_EPS):
    x32 = x.astype(jnp.float32)
    x32 = x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * weight.astype(jnp.float32)).astype(x.dtype)


def rotary(x, pos, theta):
    """Rotary position embedding (rotate-half form) of x [..., head_dim] at position ``pos``."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = pos.astype(jnp.float32) * inv_freq
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def make_decode_step(cfg: dict, mesh, collectives: str, fused: bool = False):
    """One jitted decode step: (params, cache, tokens [B], pos) -> (next tokens [B], logits [B, V], cache).

    Every sequence is at position ``pos``; the cache (donated) gets this position's keys and values. With
    ``fused``, each row-parallel projection's psum, the residual add and the next RMSNorm are one call.
    """
    psum, pmax, pmin = COLLECTIVES[collectives]

    def boundary(partial, x, norm_weight):
        """(normed, new residual) after a row-parallel projection: psum, residual add, the next RMSNorm."""
        if fused:
            return jm.fused.all_reduce_residual_rmsnorm(partial, x, norm_weight, "tp", eps=RMS_EPS)
        x = x + psum(partial, "tp")
        return rms_norm(x, norm_weight), x

    tp = mesh.shape["tp"]
    heads, kv_heads, dh = cfg["n_heads"] // tp, cfg["n_kv_heads"] // tp, cfg["head_dim"]
    group = heads // kv_heads
    theta = cfg["rope_theta"]

    def local_step(params, cache, tokens, pos):
        shard = lax.axis_index("tp")
        batch, max_len = tokens.shape[0], cache.shape[3]

        # Vocabulary-parallel embedding: each device looks up the ids it holds, zeros elsewhere, one psum.
        vocab_local = params["embed"].shape[0]
        ids = tokens - shard * vocab_local
        mine = (ids >= 0) & (ids < vocab_local)
        x = jnp.where(mine[:, None], params["embed"][jnp.clip(ids, 0, vocab_local - 1)], 0)
        x = psum(x, "tp")  # [B, d_model]

        visible = (jnp.arange(max_len) <= pos)[None, None, None, :]
        layers = params["layers"]
        h = rms_norm(x, layers[0]["attn_norm"])
        for i, layer in enumerate(layers):
            q = rotary((h @ layer["wq"]).reshape(batch, heads, dh), pos, theta)
            k = rotary((h @ layer["wk"]).reshape(batch, kv_heads, dh), pos, theta)
            v = (h @ layer["wv"]).reshape(batch, kv_heads, dh)
            kv = jnp.stack([k, v])[None, :, :, None].astype(cache.dtype)  # [1, 2, B, 1, kv_heads, dh]
            cache = lax.dynamic_update_slice(cache, kv, (i, 0, 0, pos, 0, 0))
            keys, values = cache[i, 0], cache[i, 1]  # [B, max_len, kv_heads, dh]
            qg = q.reshape(batch, kv_heads, group, dh)
            scores = jnp.einsum("bkgd,bskd->bkgs", qg, keys, preferred_element_type=jnp.float32)
            scores = jnp.where(visible, scores / np.sqrt(dh), -jnp.inf)
            probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
            attn = jnp.einsum("bkgs,bskd->bkgd", probs, values).reshape(batch, heads * dh)
            h, x = boundary(attn @ layer["wo"], x, layer["mlp_norm"])  # row-parallel output projection

            hidden = jax.nn.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])  # [B, d_ff/tp]
            next_norm = layers[i + 1]["attn_norm"] if i + 1 < len(layers) else params["final_norm"]
            h, x = boundary(hidden @ layer["w_down"], x, next_norm)  # row-parallel down projection

        logits = (h @ params["lm_head"]).astype(jnp.float32)  # [B, vocab/tp]
        # Greedy argmax over the vocabulary shards; ties go to the lowest id, as jnp.argmax.
        best = jnp.max(logits, axis=-1)
        best_id = jnp.argmax(logits, axis=-1).astype(jnp.int32) + shard * logits.shape[-1]
        top = pmax(best, "tp")
        next_tokens = pmin(jnp.where(best == top, best_id, jnp.int32(cfg["vocab"])), "tp")
        return next_tokens, logits, cache

    specs = jax.tree_util.tree_map(lambda leaf: leaf[1], param_specs(cfg), is_leaf=_is_leaf)
    step = jax.shard_map(local_step, mesh=mesh, in_specs=(specs, CACHE_SPEC, P(), P()),
                         out_specs=(P(), P(None, "tp"), CACHE_SPEC))
    return jax.jit(step, donate_argnums=(1,))


# ---- generation and timing ---------------------------------------------------------------------------------

def generate(step, params, cfg, prompt, steps: int, dtype, mesh) -> dict:
    """Feeds the prompt, then generates ``steps`` tokens greedily, timing each generating step."""
    batch, prompt_len = prompt.shape
    max_len = prompt_len + steps
    replicated = NamedSharding(mesh, P())
    positions = [placed(np.asarray(t, np.int32), replicated) for t in range(max_len)]
    prompt_cols = [placed(np.ascontiguousarray(prompt[:, t]), replicated) for t in range(prompt_len)]
    cache = new_cache(cfg, batch, max_len, dtype, mesh)

    start = time.perf_counter()
    compiled = step.lower(params, cache, prompt_cols[0], positions[0]).compile()
    compile_s = time.perf_counter() - start

    # Warm-up: position 0 is written here and again, identically, by the first prompt step.
    _, _, cache = compiled(params, cache, prompt_cols[0], positions[0])
    for t in range(prompt_len - 1):  # prompt positions whose output is not used
        _, _, cache = compiled(params, cache, prompt_cols[t], positions[t])
    jax.block_until_ready(cache)  # so the first timed step waits for nothing queued before it
    tokens, logits, times = [], [], []
    current = prompt_cols[-1]
    for t in range(prompt_len - 1, max_len - 1):
        start = time.perf_counter()
        current, step_logits, cache = compiled(params, cache, current, positions[t])
        current.block_until_ready()
        times.append(time.perf_counter() - start)
        tokens.append(current)
        logits.append(step_logits)
    jax.block_until_ready(cache)
    del cache
    return {
        "compile_s": compile_s,
        "step_s": times,
        "tokens": np.stack([np.asarray(t) for t in tokens], axis=1),  # [B, steps]: every process holds them whole
        "logits": [local_shards(a) for a in logits],  # per step, this process's [B, vocab / tp] shards, in order
    }


def local_shards(array) -> list:
    """The shards of ``array`` this process holds, as numpy arrays, in the order of their first index (in one
    process: every shard)."""
    shards = sorted(array.addressable_shards, key=lambda s: tuple(i.start or 0 for i in s.index))
    return [np.asarray(s.data) for s in shards]


def profile_steps(step, params, cfg, prompt, steps: int, dtype, mesh, logdir: str) -> dict:
    """Per-step kernel figures of ``steps`` decode steps (jax_mscclpp.tools.bench.profile)."""
    from jax_mscclpp.tools.bench import profile

    batch = prompt.shape[0]
    max_len = steps + 2
    replicated = NamedSharding(mesh, P())
    cache = new_cache(cfg, batch, max_len, dtype, mesh)
    compiled = step.lower(params, cache, jnp.asarray(prompt[:, 0]), jnp.int32(0)).compile()
    state = {"cache": cache, "tokens": jax.device_put(jnp.asarray(prompt[:, 0]), replicated), "pos": 0}
    positions = [jax.device_put(jnp.int32(t), replicated) for t in range(max_len)]

    def one():
        tokens, _, state["cache"] = compiled(params, state["cache"], state["tokens"], positions[state["pos"]])
        state["tokens"], state["pos"] = tokens, state["pos"] + 1
        return tokens

    one()  # warm
    path = profile.capture(one, steps, logdir)
    return profile.summarize(path, steps)


def compare(ours: dict, ref: dict) -> dict:
    """Tokens must match; logits (the shards this process holds) are compared up to and including the first step
    whose tokens differ."""
    same = ours["tokens"] == ref["tokens"]
    mismatched_steps = np.nonzero(~same.all(axis=0))[0]
    first = int(mismatched_steps[0]) if mismatched_steps.size else None
    last = first if first is not None else len(ours["logits"]) - 1
    abs_diff, scale = 0.0, 0.0
    for step_ours, step_ref in zip(ours["logits"][: last + 1], ref["logits"][: last + 1]):
        for a, b in zip(step_ours, step_ref):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            abs_diff = max(abs_diff, float(np.max(np.abs(a - b))))
            scale = max(scale, float(np.max(np.abs(b))))
    return {
        "same_tokens": first is None,
        "first_mismatch_step": first,
        "mismatched_tokens": int((~same).sum()),
        "logits_max_abs_diff": abs_diff,
        "logits_max_abs": scale,
        "logits_max_rel_diff": abs_diff / max(scale, 1e-30),
    }


def judge(check: dict, tolerance: float, exact: bool) -> dict:
    """``check`` (compare's) passed: the same tokens where the variants add in the same order (``exact``), and the
    logits within ``tolerance`` of lax's largest."""
    check["passed"] = (check["same_tokens"] or not exact) and check["logits_max_rel_diff"] <= tolerance
    return check


def measure(args) -> dict:
    """Every variant at every batch size in this process (one of --processes N, or the only one): step times, and
    each batch's comparison of the variants. Prints the step times as they come (the first process of several)."""
    shared_gpu = start_process(args)
    speaks = args.process_id == 0
    say = print if speaks else (lambda *a, **k: None)
    devices, plat, tp = tensor_parallel_devices(args.tp)
    cfg = dict(PRESETS[args.preset])
    if args.layers is not None:
        cfg["layers"] = args.layers
    for name in ("n_heads", "n_kv_heads", "d_ff", "vocab"):
        if cfg[name] % tp:
            sys.exit(f"preset {args.preset}: {name}={cfg[name]} does not divide by the {tp} devices on 'tp'")
    dtype_name = args.dtype or ("float32" if plat == "cpu" else "bfloat16")
    dtype = jnp.dtype(dtype_name)
    mesh = jax.sharding.Mesh(np.array(devices[:tp]), ("tp",))
    variants = ("mscclpp", "lax") if args.collectives == "both" else (args.collectives,)

    processes = f" ({args.processes} processes)" if args.processes > 1 else ""
    say(f"preset {args.preset}: {cfg['layers']} layers, d_model {cfg['d_model']}, {cfg['n_heads']} heads "
        f"({cfg['n_kv_heads']} kv) x {cfg['head_dim']}, d_ff {cfg['d_ff']}, vocab {cfg['vocab']}; {dtype_name}; "
        f"{tp} {plat} devices on 'tp'{processes}; prompt {args.prompt_len} + {args.steps} generated tokens")
    params = init_params(jax.random.key(args.seed), cfg, dtype, mesh)
    steps = {name: make_decode_step(cfg, mesh, name, fused=args.fused and name == "mscclpp") for name in variants}
    rng = np.random.default_rng(args.seed)
    tolerance = LOGIT_TOLERANCE[dtype_name]
    exact = not (args.fused and plat != "cpu")  # the composition on CPU gives lax's bits

    results, checks, profiles = [], [], []
    say(f"{'batch':>5}  {'collectives':<11} {'compile s':>9}  {'median ms/step':>14}  {'p90 ms':>8}  "
        f"{'tokens/s':>10}")
    for batch in args.batch:
        prompt = rng.integers(0, cfg["vocab"], size=(batch, args.prompt_len), dtype=np.int32)
        runs = {}
        for name in variants:
            try:
                runs[name] = generate(steps[name], params, cfg, prompt, args.steps, dtype, mesh)
            except NotImplementedError:
                if name == "mscclpp" and plat != "cpu":
                    print(f"note: jax_mscclpp has no {plat} backend yet; run with --collectives lax",
                          file=sys.stderr)
                raise
            times = runs[name]["step_s"]
            median = statistics.median(times)
            p90 = float(np.percentile(times, 90))
            results.append({"batch": batch, "collectives": name, "compile_s": runs[name]["compile_s"],
                            "step_ms": [1e3 * t for t in times], "median_step_ms": 1e3 * median,
                            "p90_step_ms": 1e3 * p90, "tokens_per_s": batch / median,
                            "tokens_sha256": _report.digest([runs[name]["tokens"]]),
                            "outputs_sha256": _report.digest([runs[name]["tokens"]] +
                                                             [s for step in runs[name]["logits"] for s in step])})
            say(f"{batch:>5}  {name:<11} {runs[name]['compile_s']:>9.2f}  {1e3 * median:>14.3f}  "
                f"{1e3 * p90:>8.3f}  {batch / median:>10.1f}")
        if len(runs) == 2:
            check = judge({"batch": batch, **compare(runs["mscclpp"], runs["lax"])}, tolerance, exact)
            check["speedup"] = _report.speedup(results[-1]["median_step_ms"], results[-2]["median_step_ms"])
            checks.append(check)
        del runs
        if args.profile and (args.profile_batches is None or str(batch) in args.profile_batches.split(",")):
            for name in variants:
                logdir = os.path.join(args.profile, f"{name}-b{batch}")
                summary = profile_steps(steps[name], params, cfg, prompt, args.profile_steps, dtype, mesh, logdir)
                profiles.append({"batch": batch, "collectives": name, **summary})
                from jax_mscclpp.tools.bench.profile import format_summary

                print(format_summary(f"       profile batch {batch} {name}", summary))

    report = {
        **_report.header("transformer_decode", devices, tp=tp, processes=args.processes, shared_gpu=shared_gpu),
        "config": {"preset": args.preset, **cfg, "dtype": dtype_name, "prompt_len": args.prompt_len,
                   "steps": args.steps, "batches": args.batch, "collectives": list(variants), "fused": args.fused,
                   "logits_tolerance": tolerance, "same_tokens_required": exact,
                   "xla_flags": os.environ.get("XLA_FLAGS", "")},
        "results": results,
        "checks": checks,
        "profiles": profiles,
    }
    end_process(args, report)
    return report


def combine(reports: list) -> dict:
    """The processes' reports as one: the first's step times; each batch's check over every process's logits shards
    (the largest difference against the largest logit); the tokens, which every process holds whole, equal in every
    process (``replicas_equal``); each process's digests (``outputs_sha256_by_process``)."""
    report = reports[0]
    config = report["config"]
    for i, check in enumerate(report["checks"]):
        mine = [r["checks"][i] for r in reports]
        check["logits_max_abs_diff"] = max(c["logits_max_abs_diff"] for c in mine)
        check["logits_max_abs"] = max(c["logits_max_abs"] for c in mine)
        check["logits_max_rel_diff"] = check["logits_max_abs_diff"] / max(check["logits_max_abs"], 1e-30)
        judge(check, config["logits_tolerance"], config["same_tokens_required"])
    if len(reports) > 1:
        report["replicas_equal"] = all(r["results"][i]["tokens_sha256"] == row["tokens_sha256"]
                                       for r in reports for i, row in enumerate(report["results"]))
        for i, row in enumerate(report["results"]):
            row["outputs_sha256_by_process"] = [r["results"][i]["outputs_sha256"] for r in reports]
    report["passed"] = all(c["passed"] for c in report["checks"]) and report.get("replicas_equal", True)
    return report


def print_checks(report: dict) -> None:
    """Each batch's comparison of the variants, then the verdict."""
    steps = report["config"]["steps"]
    for check in report["checks"]:
        batch = check["batch"]
        tokens = f"same tokens ({batch} x {steps})" if check["same_tokens"] else (
            f"DIFFERENT tokens ({check['mismatched_tokens']} of {batch} x {steps} differ, first at "
            f"step {check['first_mismatch_step']})")
        print(f"       batch {batch}: step time {_report.SPEEDUP} {check['speedup']:.2f}x; {tokens}; "
              f"logits max abs diff {check['logits_max_abs_diff']:.2e} "
              f"(rel {check['logits_max_rel_diff']:.2e}, tolerance {report['config']['logits_tolerance']:g}) "
              f"{'PASS' if check['passed'] else 'FAIL'}")
    if report["devices"]["shared_gpu"]:
        print("processes share a GPU: their kernels take turns on it, so these step times measure that, not a link")
    if "replicas_equal" in report:
        for row in report["results"]:
            by_process = ", ".join(d[:16] for d in row["outputs_sha256_by_process"])
            print(f"batch {row['batch']} {row['collectives']}: tokens and logits shards sha256 by process: "
                  f"{by_process}")
        if "in_place_between_processes" in report:
            print(f"our calls between processes: {report['in_place_between_processes']}")
        print(f"the {report['devices']['processes']} processes' tokens "
              f"{'equal' if report['replicas_equal'] else 'DIFFER'}")
    if report["checks"]:
        same = all(c["same_tokens"] for c in report["checks"])
        print(("PASS: mscclpp and lax produced the same tokens" if same else
               "PASS: mscclpp and lax agree (close logits; fused norms' rounding changed some greedy picks)")
              if report["passed"] else "FAIL: mscclpp and lax disagree (see above)")


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    reports = reports_of(__file__, argv, args, measure, "transformer_decode run")
    if not reports:
        return 0
    report = combine(reports)
    print_checks(report)
    _report.write(report, args.out)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
