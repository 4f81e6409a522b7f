"""pmean and all_gather(..., to="invarying") against lax: forward, jax.grad, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import P, any_array, assert_same, compare_with_lax, random_array, sharded

@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8", "bool"])
def test_pmean_matches_lax(mesh8, rng, dtype):
    x = any_array(rng, (8 * 5, 2), dtype)
    ours = sharded(lambda v: jm.pmean(v, "x"), mesh8, P("x"), P())(x)
    ref = sharded(lambda v: lax.pmean(v, "x"), mesh8, P("x"), P())(x)
    assert ours.dtype == ref.dtype
    np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(ref, np.float64), rtol=2e-2, atol=1e-5)


def test_all_gather_to_invarying(mesh8, rng):
    x = random_array(rng, (8 * 3, 2), "float32")
    w = random_array(rng, (8 * 3, 2), "float32")
    compare_with_lax(lambda v: jm.all_gather(v, "x", axis=1, tiled=True, to="invarying"),
                     lambda v: lax.all_gather(v, "x", axis=1, tiled=True, to="invarying"), mesh8, (x,), P("x"), P())

    def loss(gather):
        f = sharded(lambda v, u: (gather(jnp.sin(v), "x", to="invarying") ** 2).sum(keepdims=True) * u.sum(),
                    mesh8, (P("x"), P("x")), P("x"))
        return lambda v, u: f(v, u).sum()

    assert_same(jax.grad(loss(jm.all_gather), argnums=(0, 1))(x, w),
                jax.grad(loss(lax.all_gather), argnums=(0, 1))(x, w))
    batched = lambda gather: lambda v: jax.vmap(lambda r: gather(r, "x", to="invarying"), in_axes=1)(v)
    compare_with_lax(batched(jm.all_gather), batched(lax.all_gather), mesh8, (x,), P("x"), P())
