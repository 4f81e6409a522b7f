"""jax.grad and vmap through our collectives match lax."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import P, assert_same, random_array, sharded


def grads(fn, mesh, x, w, check_vma=True):
    loss = sharded(fn, mesh, (P("x"), P()), P(), check_vma=check_vma)
    return jax.grad(lambda x, w: loss(x, w).sum(), argnums=(0, 1))(x, w)


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_psum(mesh8, rng, check_vma):
    x, w = random_array(rng, (8 * 4, 3), "float32"), random_array(rng, (3, 5), "float32")

    def model(psum):
        return lambda x, w: psum(jnp.tanh(x @ w), "x") ** 2

    assert_same(grads(model(jm.psum), mesh8, x, w, check_vma), grads(model(lax.psum), mesh8, x, w, check_vma))


def test_grad_gather_scatter_all_to_all(mesh8, rng):
    x, w = random_array(rng, (8 * 8, 3), "float32"), random_array(rng, (3, 3), "float32")

    def model(gather, scatter, a2a, psum):
        def f(x, w):
            h = jnp.sin(x @ w)
            g = gather(h, "x", axis=1, tiled=True)
            s = scatter(g * g, "x", scatter_dimension=0, tiled=True)
            t = a2a(s, "x", 1, 0, tiled=True)
            return psum(t.sum(keepdims=True), "x")
        return f

    ours = grads(model(jm.all_gather, jm.psum_scatter, jm.all_to_all, jm.psum), mesh8, x, w)
    ref = grads(model(lax.all_gather, lax.psum_scatter, lax.all_to_all, lax.psum), mesh8, x, w)
    assert_same(ours, ref)


def test_pmax_is_not_differentiable(mesh8, rng):
    x, w = random_array(rng, (8, 3), "float32"), random_array(rng, (3, 1), "float32")
    with pytest.raises(NotImplementedError, match="pmax"):
        grads(lambda x, w: jm.pmax(x @ w, "x"), mesh8, x, w)


def test_vmap_inside_shard_map(mesh8, rng):
    x = random_array(rng, (8 * 2, 6, 5), "float32")
    specs = P("x")

    def run(psum, gather, scatter, a2a):
        def f(v):
            a = jax.vmap(lambda r: psum(r, "x"))(v)
            b = jax.vmap(lambda r: gather(r, "x", tiled=True), in_axes=1, out_axes=1)(v)
            c = jax.vmap(lambda r: scatter(r, "x", scatter_dimension=1, tiled=True), in_axes=2)(jnp.tile(v, (1, 8, 1)))
            d = jax.vmap(lambda r: a2a(r, "x", 1, 0, tiled=True), in_axes=2)(jnp.tile(v, (1, 8, 1)))
            return a, b, c, d
        return sharded(f, mesh8, specs, (P(), specs, specs, specs))(x)

    assert_same(run(jm.psum, jm.all_gather, jm.psum_scatter, jm.all_to_all),
                run(lax.psum, lax.all_gather, lax.psum_scatter, lax.all_to_all))
