"""Dtypes beyond the kernels' own, against lax: every dtype of whole bytes (bool, complex, the fp8 variants) through
the data movement bit for bit, complex sums and bool sums, max and min, jax.grad through moved complex values;
16-bit float sums on CPU devices, which accumulate in f32 as the GPU kernels do; the sub-byte dtypes (int4, uint4,
int2, uint2, float4_e2m1fn) and PRNG keys through the data movement, ours; and every reduction no kernel runs (the
fp8 and sub-byte sums, maxima and minima), lax's collective with the reason in ``explain`` and the log."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import (BYTE_DTYPES, FP8_DTYPES, SUB_BYTE_DTYPES, P, any_array, assert_same,
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


# XLA's CPU collectives fail on 2-bit operands (all-reduce: UNIMPLEMENTED; all-gather and all-to-all corrupt the
# heap), so ours is held against lax's collective on the same values as int8 for those.
LAX_FAILS_ON_CPU = {"int2", "uint2"}
SHIFT = [(i, (i + 3) % 8) for i in range(8)]
PARTIAL = [(0, 1), (2, 5), (7, 0)]  # the other ranks receive zeros


def _lax_on(dtype, fn):
    """``fn`` (a lax collective of one rank's operand) as lax runs it on ``dtype`` on CPU devices."""
    if dtype in LAX_FAILS_ON_CPU:
        return lambda v: fn(v.astype(jnp.int8)).astype(v.dtype)
    return fn


def _no_kernel(dtype, op):
    return f"dtype {dtype} is not supported for op {op!r}: no kernel of ours reduces it"


@pytest.mark.parametrize("dtype", FP8_DTYPES + [d for d in SUB_BYTE_DTYPES if d not in LAX_FAILS_ON_CPU])
def test_reductions_no_kernel_runs_are_lax_with_the_reason(mesh8, rng, dtype):
    """Sums, maxima and minima of the fp8 and sub-byte dtypes run lax's collective (bit for bit lax's result),
    and explain says why."""
    x = any_array(rng, (8 * 16, 3), dtype)
    for ours, ref, op in [(jm.psum, lax.psum, "sum"), (jm.pmax, lax.pmax, "max"), (jm.pmin, lax.pmin, "min")]:
        program = sharded(lambda v: ours(v, "x"), mesh8, P("x"), P())
        assert_same_bits(program(x), sharded(lambda v: ref(v, "x"), mesh8, P("x"), P())(x))
        (call,) = jm.explain(program, x)
        assert (call.collective, call.dtype, call.algorithm, call.reason) == (
            f"all_reduce({op})", dtype, "lax", _no_kernel(dtype, op))
    program = sharded(lambda v: jm.psum_scatter(v, "x", tiled=True), mesh8, P("x"), P("x"))
    assert_same_bits(program(x), sharded(lambda v: lax.psum_scatter(v, "x", tiled=True), mesh8, P("x"), P("x"))(x))
    (call,) = jm.explain(program, x)
    assert (call.collective, call.algorithm, call.reason) == ("reduce_scatter", "lax", _no_kernel(dtype, "sum"))


def test_fp8_sum_beside_float32_leaves_and_its_log(mesh8, rng, caplog):
    """In a pytree, the float32 leaves are summed by ours and the fp8 bucket by lax's collective, logged."""
    tree = {"w": random_array(rng, (8 * 4, 3), "float32"), "q": any_array(rng, (8 * 4, 3), "float8_e5m2")}
    program = sharded(lambda t: jm.psum(t, "x"), mesh8, P("x"), P())
    with caplog.at_level(logging.INFO, logger="jax_mscclpp.collectives"):
        calls = {call.dtype: call for call in jm.explain(program, tree)}
    assert calls["float32"].algorithm != "lax" and calls["float32"].reason.startswith("the selection table")
    assert calls["float8_e5m2"].algorithm == "lax" and calls["float8_e5m2"].reason == _no_kernel("float8_e5m2", "sum")
    assert f"lowers to lax's collective: {_no_kernel('float8_e5m2', 'sum')}" in caplog.text
    ours, ref = program(tree), sharded(lambda t: lax.psum(t, "x"), mesh8, P("x"), P())(tree)
    assert_same(ours["w"], ref["w"])
    assert_same_bits(ours["q"], ref["q"])


# (ours, lax's, what the primitive moves of one rank's [8, c] operand: "all" of it in one block, all of it in
# "blocks" of c (one per rank), or "row" 0 in one block).
MOVES = [
    (lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x"), "all"),
    (lambda v: jm.all_gather(v, "x", axis=1, tiled=True), lambda v: lax.all_gather(v, "x", axis=1, tiled=True), "all"),
    (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True), lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True),
     "blocks"),
    (lambda v: jm.all_to_all(v, "x", 0, 1), lambda v: lax.all_to_all(v, "x", 0, 1), "blocks"),
    (lambda v: jm.ppermute(v, "x", SHIFT), lambda v: lax.ppermute(v, "x", SHIFT), "all"),
    (lambda v: jm.ppermute(v[0], "x", PARTIAL), lambda v: lax.ppermute(v[0], "x", PARTIAL), "row"),
    (lambda v: jm.pbroadcast(v, "x", 6), lambda v: lax.all_gather(v, "x")[6], "all"),  # lax's has no CPU lowering
]


@pytest.mark.parametrize("columns", [4, 3, 1])
@pytest.mark.parametrize("dtype", SUB_BYTE_DTYPES)
def test_sub_byte_dtypes_move_ours_as_lax(mesh8, rng, dtype, columns):
    """int4, uint4, int2, uint2 and float4_e2m1fn move through ours, bit for bit lax's result: packed 8 // bits to
    a byte where every block's element count is a multiple of that, else one element to a byte."""
    x = any_array(rng, (8 * 8, columns), dtype)
    info = jnp.iinfo(dtype) if jnp.issubdtype(dtype, jnp.integer) else jnp.finfo(dtype)
    pack = 8 // info.bits
    for ours, ref, moved in MOVES:
        program = sharded(ours, mesh8, P("x"), P("x"))
        assert_same_bits(program(x), sharded(_lax_on(dtype, ref), mesh8, P("x"), P("x"))(x))
        (call,) = jm.explain(program, x)
        elements = columns if moved == "row" else 8 * columns
        block = columns if moved == "blocks" else elements
        assert call.algorithm != "lax" and call.reason.startswith("the selection table"), call
        if block % pack == 0:
            assert (call.dtype, call.bytes) == ("uint8", elements // pack), call
        else:
            assert call.dtype in ("int8", "uint8") and call.bytes == elements, call


def test_prng_keys_move_ours_as_their_key_data(mesh8):
    """A PRNG key array moves through ours as its key data and comes back as keys of the same implementation."""
    keys = jax.random.split(jax.random.key(3), 8 * 8)
    for ours, ref in [  # the moves lax's lowering takes keys through (an untiled all_gather it does not)
        (lambda v: jm.all_gather(v, "x", tiled=True), lambda v: lax.all_gather(v, "x", tiled=True)),
        (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True), lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True)),
        (lambda v: jm.ppermute(v, "x", SHIFT), lambda v: lax.ppermute(v, "x", SHIFT)),
    ]:
        program = sharded(ours, mesh8, P("x"), P("x"))
        got, want = program(keys), sharded(ref, mesh8, P("x"), P("x"))(keys)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(want))
        (call,) = jm.explain(program, keys)
        assert call.algorithm != "lax" and call.dtype == "uint32", call


def test_grad_through_a_moved_fp8_value_sums_its_cotangent_as_lax(mesh8, rng):
    """all_gather's transpose is a reduce-scatter: of an fp8 cotangent it is lax's, inside the same program."""
    x = random_array(rng, (8 * 4,), "float32")
    c = random_array(rng, (8 * 8 * 4,), "float32")

    def loss(gather):
        f = sharded(lambda v: gather(v.astype(jnp.float8_e4m3fn), "x", tiled=True), mesh8, P("x"), P("x"))
        return lambda v: (f(v).astype(jnp.float32) * c).sum()

    assert_same_bits(jax.grad(loss(jm.all_gather))(x), jax.grad(loss(lax.all_gather))(x))
    (transpose,) = [call for call in jm.explain(jax.grad(loss(jm.all_gather)), x) if call.collective != "all_gather"]
    assert (transpose.collective, transpose.dtype, transpose.algorithm, transpose.reason) == (
        "reduce_scatter", "float8_e4m3fn", "lax", _no_kernel("float8_e4m3fn", "sum"))
