"""psum_start / psum_done and value_and_psum_grad (jax_mscclpp/overlap.py) against lax on CPU devices: the same
sums, a pytree split into buckets, a world of one, the order the helper imposes on the program, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import P, assert_same, compare_with_lax, random_array, sharded


def start_then_done(tree, axis="x"):
    return jm.psum_done(jm.psum_start(tree, axis))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8"])
@pytest.mark.parametrize("count", [1, 7, 4099])
def test_start_done_matches_psum(mesh8, rng, dtype, count):
    x = random_array(rng, (8 * count,), dtype)
    compare_with_lax(start_then_done, lambda v: lax.psum(v, "x"), mesh8, (x,), P("x"), P())


def test_pytree_in_buckets(mesh8, rng):
    tree = {"a": random_array(rng, (8 * 3,), "float32"), "b": random_array(rng, (8 * 2, 5), "bfloat16"),
            "c": random_array(rng, (8 * 17,), "float32"),
            "big": random_array(rng, (8 * (jm.collectives.BUCKET_LEAF_BYTES // 4 + 1),), "float32")}
    specs = jax.tree_util.tree_map(lambda _: P("x"), tree)
    outs = jax.tree_util.tree_map(lambda _: P(), tree)
    compare_with_lax(start_then_done, lambda t: lax.psum(t, "x"), mesh8, (tree,), (specs,), outs)
    hlo = sharded(start_then_done, mesh8, (specs,), outs).lower(tree).as_text()
    assert hlo.count("jax_mscclpp_all_reduce") == 3, hlo  # float32 small, bfloat16 small, the big leaf


def test_independent_work_between_start_and_done(mesh8, rng):
    x, y = random_array(rng, (8 * 64,), "float32"), random_array(rng, (8 * 64,), "float32")

    def ours(a, b):
        started = jm.psum_start(a, "x")
        started, other = lax.optimization_barrier((started, jnp.sin(b) * 2))
        return jm.psum_done(started), other

    compare_with_lax(ours, lambda a, b: (lax.psum(a, "x"), jnp.sin(b) * 2), mesh8, (x, y), (P("x"), P("x")),
                     (P(), P("x")))


def test_world_of_one_returns_the_input(cpu_devices, rng):
    from jax.sharding import Mesh

    mesh = Mesh(np.array(cpu_devices[:8]).reshape(8, 1), ("x", "one"))
    x = random_array(rng, (8 * 5,), "float32")
    out = sharded(lambda v: start_then_done(v, "one"), mesh, P("x"), P("x"))(x)
    assert_same(out, x)


def test_bad_input_is_refused_at_trace_time(mesh8, rng):
    x = random_array(rng, (8 * 4,), "float32")
    with pytest.raises(NameError):
        sharded(lambda v: start_then_done(v, "nope"), mesh8, P("x"), P())(x)
    with pytest.raises(ValueError, match="unknown algorithm"):
        sharded(lambda v: jm.psum_done(jm.psum_start(v, "x", algorithm="nope")), mesh8, P("x"), P())(x)
    with pytest.raises(TypeError, match="psum_start returned"):
        sharded(lambda v: jm.psum_done(v), mesh8, P("x"), P())(x)


# ---- value_and_psum_grad -------------------------------------------------------------------------------------

def dense(params, h):
    return jnp.tanh(h @ params["w"] + params["b"])


def squared_error(out, target):
    return jnp.mean((out - target) ** 2)


def mlp_params(rng, widths):
    return [{"w": jnp.asarray(rng.standard_normal((a, b)) / np.sqrt(a), jnp.float32),
             "b": jnp.asarray(rng.standard_normal((b,)) * 0.1, jnp.float32)} for a, b in zip(widths, widths[1:])]


# The last: two layers whose weights have calls of their own (started), the rest bucketed into the final psum.
@pytest.mark.parametrize("widths", [(6, 5), (6, 8, 8, 3), (8, 600, 600, 600, 4)])
def test_value_and_psum_grad_matches_grad_then_psum(mesh8, rng, widths):
    params = mlp_params(rng, widths)
    x = jnp.asarray(rng.standard_normal((8 * 4, widths[0])), jnp.float32)
    t = jnp.asarray(rng.standard_normal((8 * 4, widths[-1])), jnp.float32)
    layers = [dense] * (len(widths) - 1)

    def ours(p, a, b):
        mine = jax.tree_util.tree_map(lambda v: lax.pcast(v, "x", to="varying"), p)
        loss, grads = jm.value_and_psum_grad(layers, squared_error, "x")(mine, a, b)
        return lax.pmean(loss, "x"), grads

    def reference(p, a, b):
        mine = jax.tree_util.tree_map(lambda v: lax.pcast(v, "x", to="varying"), p)

        def loss_fn(q):
            h = a
            for f, layer in zip(layers, q):
                h = f(layer, h)
            return squared_error(h, b)

        loss, grads = jax.value_and_grad(loss_fn)(mine)
        return lax.pmean(loss, "x"), lax.psum(grads, "x")

    specs = (jax.tree_util.tree_map(lambda _: P(), params), P("x"), P("x"))
    outs = (P(), jax.tree_util.tree_map(lambda _: P(), params))
    got = sharded(ours, mesh8, specs, outs)(params, x, t)
    want = sharded(reference, mesh8, specs, outs)(params, x, t)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-6)


def test_value_and_psum_grad_orders_each_start_before_the_next_backward_step(mesh8, rng, monkeypatch):
    """In the lowered program, every layer's large gradients start before the backward matmuls of the layers
    before it: starts and backward dots interleave instead of all sums coming last."""
    monkeypatch.setattr(jm.collectives, "BUCKET_LEAF_BYTES", 512)  # the 16x16 weights are large, the biases small
    widths = (16, 16, 16, 16)
    params = mlp_params(rng, widths)
    x = jnp.asarray(rng.standard_normal((8 * 4, 16)), jnp.float32)

    def ours(p, a):
        mine = jax.tree_util.tree_map(lambda v: lax.pcast(v, "x", to="varying"), p)
        return jm.value_and_psum_grad([dense] * 3, lambda h: jnp.mean(h * h), "x")(mine, a)[1]

    specs = (jax.tree_util.tree_map(lambda _: P(), params), P("x"))
    text = sharded(ours, mesh8, specs, jax.tree_util.tree_map(lambda _: P(), params)).lower(params, x).as_text()
    lines = [line for line in text.splitlines() if "optimization_barrier" in line or "jax_mscclpp_all_reduce" in line
             or "dot_general" in line]
    kinds = [("barrier" if "optimization_barrier" in line else "sum" if "jax_mscclpp" in line else "dot")
             for line in lines]
    kinds = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]  # runs of one kind as one
    # Forward dots; then per layer from the last: backward dots, its weight's start, a barrier with the cotangent;
    # the first layer's dots, one barrier before the done, one psum of its weight and every bias.
    assert kinds == ["dot", "sum", "barrier", "dot", "sum", "barrier", "dot", "barrier", "sum"], kinds


def test_value_and_psum_grad_refuses_mismatched_layers(mesh8, rng):
    params = mlp_params(rng, (4, 4, 4))
    x = jnp.asarray(rng.standard_normal((8, 4)), jnp.float32)
    specs = (jax.tree_util.tree_map(lambda _: P(), params), P("x"))
    with pytest.raises(ValueError, match="1 layers but 2"):
        sharded(lambda p, a: jm.value_and_psum_grad([dense], lambda h: jnp.sum(h), "x")(p, a)[0], mesh8, specs,
                P())(params, x)
    with pytest.raises(ValueError, match="layers is empty"):
        jm.value_and_psum_grad([], lambda h: h, "x")
