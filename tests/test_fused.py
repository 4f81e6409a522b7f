"""jm.fused against the lax composition it replaces (residual add and RMSNorm after the all-reduce), forward and
grad, on CPU devices (where the composition runs on our all-reduce); pytree psums summed in buckets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import P, assert_same, compare_with_lax, random_array, sharded


def lax_rmsnorm_boundary(x, residual, weight, eps):
    r = residual + lax.psum(x, "x")
    r32 = r.astype(jnp.float32)
    r32 = r32 * lax.rsqrt(jnp.mean(r32 * r32, axis=-1, keepdims=True) + eps)
    return (r32 * weight.astype(jnp.float32)).astype(x.dtype), r


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(3, 64), (1, 8), (2, 5, 24)])
def test_residual_rmsnorm_matches_lax(mesh8, rng, dtype, shape):
    x = random_array(rng, (8 * shape[0], *shape[1:]), dtype)
    residual = random_array(rng, shape, dtype)
    weight = random_array(rng, shape[-1:], dtype)
    compare_with_lax(
        lambda a, r, w: jm.fused.all_reduce_residual_rmsnorm(a, r, w, "x", eps=1e-5),
        lambda a, r, w: lax_rmsnorm_boundary(a, r, w, 1e-5),
        mesh8, (x, residual, weight), (P("x"), P(), P()), (P(), P()),
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_residual_matches_lax(mesh8, rng, dtype):
    x = random_array(rng, (8 * 4, 33), dtype)
    residual = random_array(rng, (4, 33), dtype)
    compare_with_lax(
        lambda a, r: jm.fused.all_reduce_residual(a, r, "x"),
        lambda a, r: r + lax.psum(a, "x"),
        mesh8, (x, residual), (P("x"), P()), P(),
    )


def test_grad_matches_lax(mesh8, rng):
    x = random_array(rng, (8 * 2, 16), "float32")
    residual = random_array(rng, (2, 16), "float32")
    weight = random_array(rng, (16,), "float32")

    def loss(boundary):
        def body(a, r, w):
            normed, new_r = boundary(a, r, w)
            return jnp.sum(normed * normed) + jnp.sum(jnp.sin(new_r))
        return sharded(jax.grad(lambda a, r, w: body(a, r, w), argnums=(0, 1, 2)), mesh8,
                       (P("x"), P(), P()), (P("x"), P(), P()))

    ours = loss(lambda a, r, w: jm.fused.all_reduce_residual_rmsnorm(a, r, w, "x", eps=1e-6))(x, residual, weight)
    ref = loss(lambda a, r, w: lax_rmsnorm_boundary(a, r, w, 1e-6))(x, residual, weight)
    assert_same(ours, ref)


def test_vmap_and_forced_lax(mesh8, rng):
    x = random_array(rng, (8 * 3, 2, 16), "float32")
    residual = random_array(rng, (3, 2, 16), "float32")
    weight = random_array(rng, (16,), "float32")
    fused = jax.vmap(lambda a, r: jm.fused.all_reduce_residual_rmsnorm(a, r, weight, "x", algorithm="lax"))
    ref = jax.vmap(lambda a, r: lax_rmsnorm_boundary(a, r, weight, 1e-6))
    compare_with_lax(fused, ref, mesh8, (x, residual), (P("x"), P()), (P(), P()))


def test_bad_arguments_are_named(mesh8, rng):
    x = random_array(rng, (8 * 2, 16), "float32")
    bad = [
        (lambda a: jm.fused.all_reduce_residual_rmsnorm(a, a[:, :8], jnp.ones(16), "x"), "residual"),
        (lambda a: jm.fused.all_reduce_residual_rmsnorm(a, a, jnp.ones(8), "x"), "weight"),
        (lambda a: jm.fused.all_reduce_residual(a, a, "y"), "unknown axis"),
        (lambda a: jm.fused.all_reduce_residual(a, a, "x", algorithm="nope"), "unknown algorithm"),
    ]
    for fn, words in bad:
        with pytest.raises((ValueError, NameError), match=words):
            sharded(fn, mesh8, P("x"), P())(x)


def test_pytree_psum_buckets_small_leaves(mesh8, rng):
    """Small leaves of one dtype share a call: a tree of 6 small leaves (two dtypes) and one large leaf lowers to
    three all-reduce custom calls, and every leaf matches lax."""
    tree = {
        "a": random_array(rng, (8 * 3,), "float32"), "b": random_array(rng, (8 * 5, 2), "float32"),
        "c": random_array(rng, (8,), "float32"), "d": random_array(rng, (8 * 7,), "bfloat16"),
        "e": random_array(rng, (8 * 2, 3), "bfloat16"), "f": random_array(rng, (8 * 4,), "float32"),
        "big": random_array(rng, (8 * (jm.collectives.BUCKET_LEAF_BYTES // 4 + 1),), "float32"),
    }
    specs = jax.tree_util.tree_map(lambda _: P("x"), tree)
    out_specs = jax.tree_util.tree_map(lambda _: P(), tree)
    compare_with_lax(lambda t: jm.psum(t, "x"), lambda t: lax.psum(t, "x"), mesh8, (tree,), (specs,), out_specs)
    hlo = sharded(lambda t: jm.psum(t, "x"), mesh8, (specs,), out_specs).lower(tree).as_text()
    assert hlo.count("jax_mscclpp_all_reduce") == 3, hlo.count("jax_mscclpp_all_reduce")
