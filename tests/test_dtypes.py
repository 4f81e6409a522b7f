"""Dtypes beyond the kernels' own, against lax: every dtype of whole bytes (bool, complex, the fp8 variants) through
the data movement bit for bit, complex sums and bool sums, max and min, jax.grad through moved complex values; and
16-bit float sums on CPU devices, which accumulate in f32 as the GPU kernels do."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import (BYTE_DTYPES, P, any_array, assert_same,
                           assert_same_bits, compare_with_lax, random_array, sharded)


@pytest.mark.parametrize("dtype", BYTE_DTYPES)
def test_data_movement_of_byte_dtypes_is_lax_bit_for_bit(mesh8, rng, dtype):
    x = any_array(rng, (8 * 8, 3), dtype)
    for ours, ref in [
        (lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x")),
        (lambda v: jm.all_gather(v, "x", axis=1, tiled=True), lambda v: lax.all_gather(v, "x", axis=1, tiled=True)),
        (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True), lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True)),
        (lambda v: jm.all_to_all(v, "x", 0, 1), lambda v: lax.all_to_all(v, "x", 0, 1)),
        (lambda v: jm.pbroadcast(v, "x", 6), lambda v: lax.all_gather(v, "x")[6]),  # lax's, without a CPU lowering
    ]:
        assert_same_bits(sharded(ours, mesh8, P("x"), P("x"))(x), sharded(ref, mesh8, P("x"), P("x"))(x))


def test_complex_psum_and_bool_sums_match_lax(mesh8, rng):
    z = any_array(rng, (8 * 4, 3), "complex64")
    compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh8, (z,), P("x"), P())
    compare_with_lax(lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True),
                     mesh8, (jnp.tile(z, (8, 1)),), P("x"), P("x"))
    b = any_array(rng, (8 * 4, 3), "bool")
    for ours, ref in [(jm.psum, lax.psum), (jm.pmax, lax.pmax), (jm.pmin, lax.pmin)]:
        assert_same(sharded(lambda v: ours(v, "x"), mesh8, P("x"), P())(b),
                    sharded(lambda v: ref(v, "x"), mesh8, P("x"), P())(b))
    assert sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P())(b).dtype == jnp.int32


def test_grad_of_complex_and_gathered_values(mesh8, rng):
    x = random_array(rng, (8 * 4,), "float32")

    def loss(gather, psum):
        def f(v):
            z = v * (1 + 2j)
            g = gather(z, "x", tiled=True)
            return jnp.real(psum(g * jnp.conj(g), "x")).sum(keepdims=True)
        return sharded(f, mesh8, P("x"), P())

    ours = jax.grad(lambda v: loss(jm.all_gather, jm.psum)(v).sum())(x)
    ref = jax.grad(lambda v: loss(lax.all_gather, lax.psum)(v).sum())(x)
    assert_same(ours, ref)


def test_bf16_and_f16_sums_accumulate_in_f32(mesh8, rng):
    """The host backend folds 16-bit floats in f32 and rounds once, as the GPU kernels do: its error against the
    exact sum is about lax's (XLA's CPU all-reduce), not that of a rounding after every add."""
    for dtype in ("bfloat16", "float16"):
        x = jnp.asarray(rng.standard_normal((8 * 4096,)).astype(np.float32)).astype(dtype)
        exact = np.asarray(x, np.float64).reshape(8, -1).sum(0)
        errors = {}
        for name, algorithm in [("lax", "lax"), ("1pa_ll", "1pa_ll"), ("2pa_hb", "2pa_hb")]:
            out = sharded(lambda v: jm.psum(v, "x", algorithm=algorithm), mesh8, P("x"), P())(x)
            errors[name] = float(np.mean(np.abs(np.asarray(out, np.float64) - exact)))
        assert errors["1pa_ll"] <= 1.1 * errors["lax"] and errors["2pa_hb"] <= 1.1 * errors["lax"], (dtype, errors)


def test_started_sum_of_complex_runs_complete(mesh8, rng):
    """psum_start of a dtype moved as its parts: the call runs where it stands (complete), and the done joins it."""
    z = any_array(rng, (8 * 4, 3), "complex64")
    compare_with_lax(lambda v: jm.psum_done(jm.psum_start(v, "x")), lambda v: lax.psum(v, "x"), mesh8, (z,),
                     P("x"), P())
