"""The common JAX setup: one process, several GPUs (peer access). Every collective and algorithm against lax on
random data, odd sizes, dtypes, repeated calls, command buffers on and off. Needs two GPUs or more."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu(2)]

SCRIPT = textwrap.dedent(r"""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P
    import jax_mscclpp as jm
    from tests.helpers import assert_same, random_array, sharded

    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("x",))
    n = len(devices)
    rng = np.random.default_rng(0)
    checks = 0
    reducers = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}
    quick = sys.argv[1] == "quick"
    sizes = [3, 40000] if quick else [1, 3, 1023, 8 * 4096 + 5, 1 << 20]
    for algorithm in ["1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "2pa_nvls", None]:
        for dtype, op in [("float32", "sum"), ("bfloat16", "sum"), ("float16", "max"), ("int32", "sum"),
                          ("uint8", "min")][: 2 if quick else None]:
            for count in sizes:
                x = random_array(rng, (n * count,), dtype)
                ours = sharded(lambda v: jm.all_reduce(v, "x", op=op, algorithm=algorithm), mesh, P("x"), P())(x)
                ref = sharded(lambda v: reducers[op](v, "x"), mesh, P("x"), P())(x)
                assert_same(ours, ref)
                checks += 1
    for count in [1, 7, 4099, 1 << 18]:
        x = random_array(rng, (n * n * count,), "bfloat16")
        for ours_fn, ref_fn in [
            (lambda v: jm.all_gather(v, "x", tiled=True), lambda v: lax.all_gather(v, "x", tiled=True)),
            (lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True)),
            (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True), lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True)),
        ]:
            assert_same(sharded(ours_fn, mesh, P("x"), P("x"))(x), sharded(ref_fn, mesh, P("x"), P("x"))(x))
            checks += 1
    # The permutation (LL and streaming HB by size; auto is lax above 16 KiB), full and partial; a dtype moved as
    # bytes.
    for algorithm in ["p2p", None]:
        for perm in [[(i, (i + 1) % n) for i in range(n)], [(0, n - 1)], []]:
            for count, dtype in [(1, "float32"), (4099, "bfloat16"), (1 << 18, "int8")]:
                x = random_array(rng, (n * count,), dtype)
                ours = sharded(lambda v: jm.ppermute(v, "x", perm, algorithm=algorithm), mesh, P("x"), P("x"))(x)
                assert_same(ours, sharded(lambda v: lax.ppermute(v, "x", perm), mesh, P("x"), P("x"))(x))
                checks += 1
    z = (random_array(rng, (n * 1000,), "float32") * (1 + 2j)).astype(jnp.complex64)
    shift = [(i, (i + 1) % n) for i in range(n)]
    assert_same(sharded(lambda v: jm.ppermute(v, "x", shift), mesh, P("x"), P("x"))(z),
                sharded(lambda v: lax.ppermute(v, "x", shift), mesh, P("x"), P("x"))(z))
    checks += 1
    # Fused layer boundary against the lax composition: the fused kernel runs (its target is in the program).
    def boundary_lax(a, r, w):
        s = r + lax.psum(a, "x")
        s32 = s.astype(jnp.float32)
        s32 = s32 * lax.rsqrt(jnp.mean(s32 * s32, axis=-1, keepdims=True) + 1e-5)
        return (s32 * w.astype(jnp.float32)).astype(a.dtype), s
    for dtype in ["bfloat16", "float32"]:
        for rows, row in [(1, 4096), (8, 4096), (64, 4096), (3, 40)]:
            a = random_array(rng, (n * rows, row), dtype)
            r = random_array(rng, (rows, row), dtype)
            w = random_array(rng, (row,), dtype)
            fused = sharded(lambda a, r, w: jm.fused.all_reduce_residual_rmsnorm(a, r, w, "x", eps=1e-5), mesh,
                            (P("x"), P(), P()), (P(), P()))
            assert "jax_mscclpp_all_reduce_rmsnorm" in fused.lower(a, r, w).as_text()
            assert_same(fused(a, r, w), sharded(boundary_lax, mesh, (P("x"), P(), P()), (P(), P()))(a, r, w))
            plain = sharded(lambda a, r: jm.fused.all_reduce_residual(a, r, "x"), mesh, (P("x"), P()), P())
            assert_same(plain(a, r), sharded(lambda a, r: r + lax.psum(a, "x"), mesh, (P("x"), P()), P())(a, r))
            checks += 2
    # Started on the side stream and joined (our kernel at every size: auto would pick lax for some), with
    # independent work between; and bucketed pytree sums.
    for count in [5, 1 << 16, 3 << 20, 9 << 20]:
        for algorithm in ["1pa_ll", "1pa_hb", "2pa_hb"]:
            x = random_array(rng, (n * count,), "bfloat16")

            def started(v, algorithm=algorithm):
                pending = jm.psum_start(v, "x", algorithm=algorithm)
                pending, other = lax.optimization_barrier((pending, jnp.cos(v) * 3))
                return jm.psum_done(pending), other

            lowered = sharded(started, mesh, P("x"), (P(), P("x"))).lower(x).as_text()
            assert "jax_mscclpp_all_reduce_start" in lowered and "jax_mscclpp_done" in lowered
            ours, other = sharded(started, mesh, P("x"), (P(), P("x")))(x)
            assert_same(ours, sharded(lambda v: lax.psum(v, "x"), mesh, P("x"), P())(x))
            assert_same(other, jnp.cos(x) * 3)
            checks += 1
    # Gradients summed during the backward pass, against jax.grad then lax.psum: 4 MiB weights (own calls, where
    # auto would pick lax), so that the last two layers' sums are started on our kernel and joined by one done.
    layers = [lambda p, h: jnp.tanh(h @ p)] * 3
    params = [random_array(rng, (1024, 1024), "float32") / 32 for _ in range(3)]
    xs = random_array(rng, (n * 64, 1024), "float32")
    varying = lambda p: [lax.pcast(w, "x", to="varying") for w in p]
    def grads_ours(p, a):
        return jm.value_and_psum_grad(layers, lambda h: jnp.mean(h * h), "x", algorithm="2pa_hb")(varying(p), a)[1]
    def grads_lax(p, a):
        def loss(q):
            h = a
            for f, w in zip(layers, q):
                h = f(w, h)
            return jnp.mean(h * h)
        return lax.psum(jax.grad(loss)(varying(p)), "x")
    specs, outs = ([P()] * 3, P("x")), [P()] * 3
    lowered = sharded(grads_ours, mesh, specs, outs).lower(params, xs).as_text()
    assert lowered.count("@jax_mscclpp_all_reduce_start") == 2 and lowered.count("@jax_mscclpp_done") == 1, lowered
    assert_same(sharded(grads_ours, mesh, specs, outs)(params, xs), sharded(grads_lax, mesh, specs, outs)(params, xs))
    checks += 1
    tree = [random_array(rng, (n * c,), d) for c, d in [(3, "float32"), (999, "float32"), (17, "bfloat16"),
                                                        (1 << 19, "float32")]]
    specs, outs = [P("x")] * len(tree), [P()] * len(tree)
    assert_same(sharded(lambda t: jm.psum(t, "x"), mesh, (specs,), outs)(tree),
                sharded(lambda t: lax.psum(t, "x"), mesh, (specs,), outs)(tree))
    x = random_array(rng, (n * 4096,), "float32")
    loop = lambda psum: (lambda v: lax.fori_loop(0, 1000, lambda i, a: lax.pcast(psum(a, "x"), "x", to="varying") / n, v))
    assert_same(sharded(loop(jm.psum), mesh, P("x"), P("x"))(x), sharded(loop(lax.psum), mesh, P("x"), P("x"))(x))
    # Which target small and large calls lower to (selection.in_command_buffers): 20 B and 16 MiB per rank.
    import os, re
    def target_of(count):
        v = random_array(rng, (n * count,), "float32")
        text = sharded(lambda a: jm.psum(a, "x"), mesh, P("x"), P()).lower(v).as_text()
        found = re.findall(r"jax_mscclpp_all_reduce(_outside_graphs)?\b", text)
        assert len(set(found)) == 1, found
        return "outside" if found[0] else "inside"
    forced = os.environ.get("JAX_MSCCLPP_COMMAND_BUFFERS")
    assert target_of(5) == ("inside" if forced == "1" else "outside")
    assert target_of(1 << 22) == ("outside" if forced == "0" else "inside")
    print(f"{checks + 1} checks passed on {n} GPUs")
""")


@pytest.mark.parametrize("command_buffers,scope", [("default", "full"), ("off", "quick"), ("ours in graphs", "quick"),
                                                    ("ours outside graphs", "quick")])
def test_single_process_matches_lax(gpus, command_buffers, scope):
    if gpus < 2:
        pytest.skip("needs two GPUs")
    env = dict(os.environ, JAX_PLATFORMS="cuda", NCCL_NVLS_ENABLE="0")
    env.pop("JAX_MSCCLPP_NVLS", None)
    env.pop("XLA_FLAGS", None)
    env.pop("JAX_MSCCLPP_COMMAND_BUFFERS", None)
    if command_buffers == "ours in graphs":
        env["JAX_MSCCLPP_COMMAND_BUFFERS"] = "1"
    if command_buffers == "ours outside graphs":
        env["JAX_MSCCLPP_COMMAND_BUFFERS"] = "0"
    if command_buffers == "off":
        env["XLA_FLAGS"] = "--xla_gpu_enable_command_buffer="
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", SCRIPT, scope], env=env, cwd=root, capture_output=True, text=True,
                         timeout=500)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    assert "checks passed" in out.stdout
