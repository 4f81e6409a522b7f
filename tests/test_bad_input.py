"""Bad input, held against lax: every argument of every public function with wrong types, shapes, axes, dtypes,
out-of-range dimensions, empty arrays, NaN and Inf, sizes past the scratch. Each ends in a clear error (at trace
time) or in lax's result; never a crash or a wrong answer. docs/bad_input.md tabulates these cases by their ids
(``test_every_case_is_documented`` keeps the two in step)."""

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AbstractMesh, Mesh

import jax_mscclpp as jm
from jax_mscclpp import _native
from jax_mscclpp.dsl import library
from tests.helpers import P, assert_same, random_array, sharded

DOC = Path(__file__).resolve().parents[1] / "docs" / "bad_input.md"
# The ids of the cases tested one by one below (the tables carry their own).
OTHER_CASES = [
    "placement/outside_shard_map", "placement/eager_shard_map", "placement/pmap", "placement/vmap_axis",
    "Communicator/abstract_mesh", "x/inf",
    "x/nan_sum", "x/nan_payload", "x/nan_max_min", "x/past_scratch", "algorithm/plan_past_scratch", "x/grad_pmax",
    "Communicator/scratch_change", "Communicator/port_channels_cpu", "environment/JAX_MSCCLPP_SCRATCH_BYTES",
    "environment/JAX_MSCCLPP_TIMEOUT_S", "environment/JAX_MSCCLPP_ALGORITHM", "environment/other_values",
    "Communicator/destroyed_under_a_compiled_program",
    "unregister_algorithm/unknown",
    # tests/test_operands_and_meshes.py
    "x/psum_of_one_is_static", "x/unreduced", "axis_name/empty_in_transpose", "axis_index_groups/shard_map",
    "axis_index_groups/pmap", "placement/vmap_axis_in_shard_map", "placement/vmap_axis_in_shard_map_vma",
    "mesh/nested_shard_map", "mesh/partial_manual", "mesh/vmap_of_shard_map",
    # tests/test_ragged.py
    "ragged_all_to_all/float_sizes", "ragged_all_to_all/sizes_per_rank", "ragged_all_to_all/dtype_mismatch",
    "ragged_all_to_all/algorithm", "ragged_all_to_all/axis_index_groups", "ragged_all_to_all/cpu",
]


def run(fn, mesh, x, out_specs=P("x"), in_specs=P("x")):
    return jax.block_until_ready(sharded(fn, mesh, in_specs, out_specs)(x))


X8 = np.arange(8 * 4, dtype=np.float32) - 7.5  # 4 floats per rank of an 8-device mesh
X64 = np.arange(8 * 8, dtype=np.float32) - 30.5  # 8 floats per rank: one per rank for the scatters

# (id, per-device function, operand, exception, message pattern): an error at trace time.
ERRORS = [
    ("x/string", lambda v: jm.psum("a", "x"), X8, TypeError, "not a valid JAX array type"),
    ("x/bool_psum_scatter", lambda v: jm.psum_scatter(v > 0, "x", tiled=True), X64, TypeError,
     "unsupported dtype bool for op 'sum'"),
    ("x/key_psum", lambda v: jm.psum(jax.random.key(0), "x"), X8, TypeError,
     r"unsupported dtype key<fry> for op 'sum'"),
    ("all_gather/to_reduced", lambda v: jm.all_gather(v, "x", to="reduced"), X8, ValueError,
     "unsupported to='reduced'; supported: 'varying', 'invarying'"),
    ("all_gather/to_None", lambda v: jm.all_gather(v, "x", to=None), X8, ValueError, "unsupported to=None"),
    ("ppermute/duplicate_source", lambda v: jm.ppermute(v, "x", [(0, 1), (0, 2)]), X8, ValueError,
     "ppermute sources and destinations must be unique"),
    ("ppermute/duplicate_destination", lambda v: jm.ppermute(v, "x", [(0, 1), (2, 1)]), X8, ValueError,
     "ppermute sources and destinations must be unique"),
    ("ppermute/out_of_range", lambda v: jm.ppermute(v, "x", [(0, 8)]), X8, ValueError,
     "perm index 8 is out of range for axis size 8"),
    ("ppermute/negative", lambda v: jm.ppermute(v, "x", [(-1, 0)]), X8, ValueError,
     "perm index -1 is out of range for axis size 8"),
    ("ppermute/not_pairs", lambda v: jm.ppermute(v, "x", [(0, 1, 2)]), X8, ValueError,
     r"perm must be a sequence of \(source, destination\) pairs"),
    ("ppermute/not_a_sequence", lambda v: jm.ppermute(v, "x", 3), X8, TypeError,
     r"perm must be a sequence of \(source, destination\) pairs"),
    ("ppermute/float_index", lambda v: jm.ppermute(v, "x", [(0.0, 1)]), X8, TypeError,
     r"perm holds axis indices \(integers\)"),
    ("ppermute/algorithm", lambda v: jm.ppermute(v, "x", [(0, 1)], algorithm="allpairs"), X8, ValueError,
     "unknown algorithm 'allpairs'; permute knows p2p"),
    ("pshuffle/not_a_permutation", lambda v: jm.pshuffle(v, "x", [0, 0, 1, 2, 3, 4, 5, 6]), X8, ValueError,
     "does not represent a permutation"),
    ("pshuffle/wrong_size", lambda v: jm.pshuffle(v, "x", [1, 0]), X8, ValueError,
     "perm has 2 entries but the axis size is 8"),
    ("pbroadcast/out_of_range", lambda v: jm.pbroadcast(v, "x", 8), X8, ValueError,
     "source 8 is out of range for axis size 8"),
    ("pbroadcast/source_float", lambda v: jm.pbroadcast(v, "x", 1.0), X8, TypeError,
     "source must be an axis index"),
    ("axis_name/unknown",
     lambda v: jm.psum(v, "y"), X8, NameError, r"unknown axis name 'y'; axes bound here: \('x',\)"),
    ("axis_name/None", lambda v: jm.pmax(v, None), X8, NameError, "unknown axis name None"),
    ("axis_name/int", lambda v: jm.all_gather(v, 0), X8, NameError, "unknown axis name 0"),
    ("axis_name/repeated", lambda v: jm.psum_scatter(v, ("x", "x")), X64, ValueError, "repeated axis name"),
    ("axis_name/nested", lambda v: jm.psum(v, [["x"]]), X8, TypeError, "axis_name must be an axis name or a tuple"),
    ("op/None", lambda v: jm.all_reduce(v, "x", op=None), X8, ValueError, "unsupported op None; supported: sum"),
    ("op/uppercase", lambda v: jm.all_reduce(v, "x", op="SUM"), X8, ValueError, "unsupported op 'SUM'"),
    ("op/prod", lambda v: jm.all_reduce(v, "x", op="prod"), X8, ValueError, "unsupported op 'prod'"),
    ("op/list", lambda v: jm.all_reduce(v, "x", op=["sum"]), X8, ValueError, r"unsupported op \['sum'\]"),
    ("algorithm/empty",
     lambda v: jm.psum(v, "x", algorithm=""), X8, ValueError, "unknown algorithm ''; all_reduce knows"),
    ("algorithm/int", lambda v: jm.psum(v, "x", algorithm=1), X8, TypeError, "algorithm must be an algorithm's name"),
    ("algorithm/list", lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True, algorithm=["allpairs"]), X64, TypeError,
     "algorithm must be an algorithm's name"),
    ("algorithm/other_collective", lambda v: jm.all_gather(v, "x", algorithm="1pa_ll"), X8, ValueError,
     "unknown algorithm '1pa_ll'; all_gather knows allpairs"),
    ("algorithm/other_platform", lambda v: jm.psum(v, "x", algorithm="2pa_nvls"), X8, ValueError,
     "'2pa_nvls' does not run on platform 'cpu'"),
    ("algorithm/2ph_one_axis", lambda v: jm.psum(v, "x", algorithm="2ph"), X8, ValueError, "reduces over two axes"),
    ("all_gather/axis_float",
     lambda v: jm.all_gather(v, "x", axis=1.0), X8, TypeError, "axis must be an integer, got 1.0"),
    ("all_gather/axis_str", lambda v: jm.all_gather(v, "x", axis="0"), X8, TypeError, "axis must be an integer"),
    ("all_gather/axis_None", lambda v: jm.all_gather(v, "x", axis=None), X8, TypeError, "axis must be an integer"),
    ("all_gather/axis_too_big",
     lambda v: jm.all_gather(v, "x", axis=2), X8, ValueError, "axis=2 is out of range for rank 2"),
    ("all_gather/axis_too_small", lambda v: jm.all_gather(v, "x", axis=-3), X8, ValueError, "axis=-3 is out of range"),
    ("all_gather/tiled_axis_too_big", lambda v: jm.all_gather(v, "x", axis=1, tiled=True), X8, ValueError,
     "axis=1 is out of range for rank 1"),
    ("all_gather/tiled_scalar", lambda v: jm.all_gather(v[0], "x", tiled=True), X8, ValueError,
     "axis=0 is out of range for rank 0"),
    ("psum_scatter/dim_too_big", lambda v: jm.psum_scatter(v, "x", scatter_dimension=1), X64, ValueError,
     "scatter_dimension=1 is out of range for rank 1"),
    ("psum_scatter/dim_float", lambda v: jm.psum_scatter(v, "x", scatter_dimension=0.0), X64, TypeError,
     "scatter_dimension must be an integer"),
    ("psum_scatter/scalar", lambda v: jm.psum_scatter(v[0], "x"), X64, ValueError, "out of range for rank 0"),
    ("psum_scatter/untiled_size", lambda v: jm.psum_scatter(v[:3], "x"), X64, ValueError,
     "has size 3 but must equal the axis size 8"),
    ("psum_scatter/tiled_not_divisible", lambda v: jm.reduce_scatter(v[:7], "x", tiled=True), X64, ValueError,
     "size 7 does not divide by the axis size 8"),
    ("all_to_all/split_too_big",
     lambda v: jm.all_to_all(v, "x", 2, 0), X64, ValueError, "split_axis=2 is out of range"),
    ("all_to_all/concat_too_big",
     lambda v: jm.all_to_all(v, "x", 0, 5), X64, ValueError, "concat_axis=5 is out of range"),
    ("all_to_all/split_None",
     lambda v: jm.all_to_all(v, "x", None, 0), X64, TypeError, "split_axis must be an integer"),
    ("all_to_all/untiled_size", lambda v: jm.all_to_all(v[:5], "x", 0, 0), X64, ValueError,
     "has size 5 but must equal the axis size 8"),
    ("all_to_all/tiled_not_divisible", lambda v: jm.all_to_all(v[:7], "x", 0, 0, tiled=True), X64, ValueError,
     "size 7 does not divide by 8"),
    ("all_to_all/scalar", lambda v: jm.all_to_all(v[0], "x", 0, 0), X64, ValueError, "out of range for rank 0"),
]

# (id, ours, lax, operand, out_specs): ours runs and equals lax.
LIKE_LAX = [
    ("x/python_float", lambda v: jm.psum(1.5, "x"), lambda v: lax.psum(1.5, "x"), X8, P()),
    ("x/python_int", lambda v: jm.pmin(-3, "x"), lambda v: lax.pmin(-3, "x"), X8, P()),
    ("x/numpy",
     lambda v: jm.psum(np.arange(3, dtype=np.int16), "x"), lambda v: lax.psum(np.arange(3, dtype=np.int16), "x"),
     X8, P()),
    ("x/pytree", lambda v: jm.psum({"a": v, "b": (v.astype(jnp.int8), 2.0)}, "x"),
     lambda v: lax.psum({"a": v, "b": (v.astype(jnp.int8), 2.0)}, "x"), X8, P()),
    ("x/None", lambda v: (jm.psum(None, "x"), v)[1], lambda v: (lax.psum(None, "x"), v)[1], X8, P("x")),
    ("x/float64_without_x64", lambda v: jm.psum(np.ones(3), "x"), lambda v: lax.psum(np.ones(3), "x"), X8, P()),
    ("x/scalar", lambda v: jm.psum(v[0], "x"), lambda v: lax.psum(v[0], "x"), X8, P()),
    ("x/scalar_all_gather", lambda v: jm.all_gather(v[1], "x"), lambda v: lax.all_gather(v[1], "x"), X8, P("x")),
    ("x/empty", lambda v: jm.pmax(v[:0], "x"), lambda v: lax.pmax(v[:0], "x"), X8, P()),
    ("x/empty_all_gather", lambda v: jm.all_gather(v[:0], "x", axis=1), lambda v: lax.all_gather(v[:0], "x", axis=1),
     X8, P("x")),
    ("x/zero_size_axis",
     lambda v: jm.psum(jnp.zeros((0, 3)) + v[0], "x"), lambda v: lax.psum(jnp.zeros((0, 3)) + v[0], "x"),
     X8, P()),
    ("x/zero_size_axis_scatter", lambda v: jm.psum_scatter(jnp.zeros((8, 0)) + v[0], "x"),
     lambda v: lax.psum_scatter(jnp.zeros((8, 0)) + v[0], "x"), X64, P("x")),
    ("x/zero_size_axis_all_to_all", lambda v: jm.all_to_all(jnp.zeros((8, 0)) + v[0], "x", 0, 1, tiled=True),
     lambda v: lax.all_to_all(jnp.zeros((8, 0)) + v[0], "x", 0, 1, tiled=True), X64, P("x")),
    ("x/int_overflow",
     lambda v: jm.psum(jnp.full(3, 127, jnp.int8), "x"), lambda v: lax.psum(jnp.full(3, 127, jnp.int8), "x"),
     X8, P()),
    ("axis_name/list", lambda v: jm.psum(v, ["x"]), lambda v: lax.psum(v, ["x"]), X8, P()),
    ("axis_name/empty", lambda v: jm.psum(v, ()), lambda v: lax.psum(v, ()), X8, P("x")),
    ("axis_name/empty_all_gather", lambda v: jm.all_gather(v, (), axis=0), lambda v: lax.all_gather(v, (), axis=0),
     X8, P("x")),
    ("x/bool", lambda v: jm.psum(v > 0, "x"), lambda v: lax.psum(v > 0, "x"), X8, P()),
    ("x/complex", lambda v: jm.all_gather(v.astype(jnp.complex64), "x"),
     lambda v: lax.all_gather(v.astype(jnp.complex64), "x"), X8, P("x")),
    ("x/float8_sum", lambda v: jm.psum(v.astype(jnp.float8_e5m2), "x"),
     lambda v: lax.psum(v.astype(jnp.float8_e5m2), "x"), X8, P()),
    ("x/complex_max", lambda v: jm.pmax(v.astype(jnp.complex64), "x"), lambda v: lax.pmax(v.astype(jnp.complex64), "x"),
     X8, P()),
    ("x/int4_all_gather", lambda v: jm.all_gather(v.astype(jnp.int4), "x"),
     lambda v: lax.all_gather(v.astype(jnp.int4), "x"), X8, P("x")),
    ("ppermute/empty", lambda v: jm.ppermute(v, "x", []), lambda v: lax.ppermute(v, "x", []), X8, P("x")),
    ("ppermute/identity", lambda v: jm.ppermute(v, "x", [(i, i) for i in range(8)]),
     lambda v: lax.ppermute(v, "x", [(i, i) for i in range(8)]), X8, P("x")),
    ("ppermute/numpy_perm", lambda v: jm.ppermute(v, "x", np.array([[0, 3], [3, 0]])),
     lambda v: lax.ppermute(v, "x", np.array([[0, 3], [3, 0]])), X8, P("x")),
    ("pmean/int", lambda v: jm.pmean(v.astype(jnp.int32), "x"), lambda v: lax.pmean(v.astype(jnp.int32), "x"),
     X8, P()),
    ("algorithm/lax", lambda v: jm.pmax(v, "x", algorithm="lax"), lambda v: lax.pmax(v, "x"), X8, P()),
    ("all_gather/axis_bool", lambda v: jm.all_gather(v, "x", axis=True), lambda v: lax.all_gather(v, "x", axis=True),
     X8, P("x")),
    ("all_gather/axis_numpy_int", lambda v: jm.all_gather(v, "x", axis=np.int64(-1)),
     lambda v: lax.all_gather(v, "x", axis=np.int64(-1)), X8, P("x")),
    ("all_gather/tiled_truthy",
     lambda v: jm.all_gather(v, "x", tiled="yes"), lambda v: lax.all_gather(v, "x", tiled="yes"),
     X8, P("x")),
    ("psum_scatter/dim_negative", lambda v: jm.psum_scatter(v.reshape(1, 8), "x", scatter_dimension=-1),
     lambda v: lax.psum_scatter(v.reshape(1, 8), "x", scatter_dimension=1), X64, P("x")),
    ("all_to_all/negative", lambda v: jm.all_to_all(v.reshape(1, 8), "x", -1, -2, tiled=True),
     lambda v: lax.all_to_all(v.reshape(1, 8), "x", 1, 0, tiled=True), X64, P("x")),
]


@pytest.mark.parametrize("case_id,fn,x,error,pattern", ERRORS, ids=[c[0] for c in ERRORS])
def test_clear_error(mesh8, case_id, fn, x, error, pattern):
    with pytest.raises(error, match=pattern):
        run(fn, mesh8, x)


@pytest.mark.parametrize("case_id,ours,ref,x,out_specs", LIKE_LAX, ids=[c[0] for c in LIKE_LAX])
def test_like_lax(mesh8, case_id, ours, ref, x, out_specs):
    try:
        want = run(ref, mesh8, x, out_specs)
    except Exception as refused:  # noqa: BLE001 - this jax's lax refuses the call (a numpy perm from 0.11 on)
        with pytest.raises(type(refused), match=re.escape(str(refused).splitlines()[0])):
            run(ours, mesh8, x, out_specs)
        return
    assert_same(run(ours, mesh8, x, out_specs), want)


def test_outside_shard_map(rng):
    x = random_array(rng, (8,), "float32")
    with pytest.raises(NameError, match="inside jax.shard_map"):
        jax.jit(lambda v: jm.pmin(v, "x"))(x)
    with pytest.raises(NameError, match="inside jax.shard_map"):
        jm.psum_scatter(x, "x")


def test_eager_shard_map_and_pmap(mesh8, rng):
    x = random_array(rng, (8 * 3,), "int32")
    eager = jax.shard_map(lambda v: jm.psum(v, "x"), mesh=mesh8, in_specs=P("x"), out_specs=P())(x)
    assert_same(eager, run(lambda v: lax.psum(v, "x"), mesh8, x, P()))
    y = x.reshape(8, 3)
    assert_same(jax.pmap(lambda v: jm.psum(v, "i"), axis_name="i")(y),
                jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(y))


def test_vmap_axis_outside_shard_map(rng):
    x = random_array(rng, (8, 3), "float32")
    for ours, ref in ((jm.psum, lax.psum), (lambda v, a: jm.all_gather(v, a), lambda v, a: lax.all_gather(v, a))):
        assert_same(jax.vmap(lambda v: ours(v, "i"), axis_name="i")(x),
                    jax.vmap(lambda v: ref(v, "i"), axis_name="i")(x))
        assert_same(jax.jit(jax.vmap(lambda v: ours(v, "i"), axis_name="i"))(x),
                    jax.vmap(lambda v: ref(v, "i"), axis_name="i")(x))


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_inf_propagates_as_lax(mesh8, op, dtype):
    x = np.ones((8, 4), np.float32)
    x[3, 0], x[5, 1], x[6, 1], x[0, 2] = np.inf, np.inf, -np.inf, -np.inf
    x = jnp.asarray(x.reshape(-1), dtype)
    ours = run(lambda v: jm.all_reduce(v, "x", op=op), mesh8, x, P())
    ref = run(lambda v: {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}[op](v, "x"), mesh8, x, P())
    np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(ref, np.float32))


def test_nan_in_sums_and_data_movement_is_lax(mesh8):
    x = np.ones((8, 4), np.float32)
    x[2, 0], x[7, 3] = np.nan, np.nan
    x = jnp.asarray(x.reshape(-1))
    for ours, ref, out in [(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), P()),
                           (lambda v: jm.all_gather(v, "x", tiled=True), lambda v: lax.all_gather(v, "x", tiled=True),
                            P("x"))]:
        np.testing.assert_array_equal(np.asarray(run(ours, mesh8, x, out)), np.asarray(run(ref, mesh8, x, out)))
    y = jnp.asarray(np.where(np.arange(64) % 9 == 0, np.nan, np.arange(64.0)).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(run(lambda v: jm.all_to_all(v, "x", 0, 0), mesh8, y)),
                                  np.asarray(run(lambda v: lax.all_to_all(v, "x", 0, 0), mesh8, y)))


@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_in_max_min_propagates_as_maximum_does(mesh8, op):
    """A NaN on any rank makes the result NaN, as XLA's elementwise maximum / minimum (and jnp.max of the gathered
    values) say. lax.pmax / lax.pmin on CPU devices drop NaN instead (an all-NaN column even becomes -inf / inf):
    docs/bad_input.md, "NaN in pmax and pmin"."""
    x = np.ones((8, 4), np.float32)
    x[0, 0], x[7, 1] = np.nan, np.nan
    x[:, 2] = np.nan
    x = jnp.asarray(x.reshape(-1))
    ours = np.asarray(run(lambda v: jm.all_reduce(v, "x", op=op), mesh8, x, P("x")))
    reduce = jnp.max if op == "max" else jnp.min
    elementwise = np.asarray(run(lambda v: reduce(lax.all_gather(v, "x"), axis=0), mesh8, x, P("x")))
    np.testing.assert_array_equal(ours, elementwise)
    assert np.isnan(ours[:3]).all() and ours[3] == 1.0


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_sizes_past_the_scratch_are_pipelined(cpu_devices, rng, op):
    a = "small_scratch"
    mesh = Mesh(np.array(cpu_devices[:4])[[2, 0, 3, 1]], (a,))
    jm.Communicator(mesh, a, scratch_bytes=4096)  # 1 KiB slots: the operand takes hundreds of rounds
    x = random_array(rng, (4 * 4 * 50_001,), "int32")
    ours, ref = {
        "all_reduce": (lambda v: jm.psum(v, a), lambda v: lax.psum(v, a)),
        "all_gather": (lambda v: jm.all_gather(v, a, tiled=True), lambda v: lax.all_gather(v, a, tiled=True)),
        "reduce_scatter": (lambda v: jm.psum_scatter(v, a, tiled=True), lambda v: lax.psum_scatter(v, a, tiled=True)),
        "all_to_all": (lambda v: jm.all_to_all(v, a, 0, 0, tiled=True),
                       lambda v: lax.all_to_all(v, a, 0, 0, tiled=True)),
    }[op]
    out = P() if op == "all_reduce" else P(a)
    assert_same(run(ours, mesh, x, out, P(a)), run(ref, mesh, x, out, P(a)))
    jm.Communicator(mesh, a).destroy()


def test_forced_plan_past_the_scratch_is_refused(cpu_devices, rng):
    a = "plan_scratch"
    mesh = Mesh(np.array(cpu_devices[:4]), (a,))
    jm.Communicator(mesh, a, scratch_bytes=4096)
    jm.register_algorithm(library.allreduce_2pa_hb, name="bad_input_plan")
    try:
        small, large = random_array(rng, (4 * 64,), "float32"), random_array(rng, (4 * 4096,), "float32")
        assert_same(run(lambda v: jm.psum(v, a, algorithm="bad_input_plan"), mesh, small, P(), P(a)),
                    run(lambda v: lax.psum(v, a), mesh, small, P(), P(a)))
        with pytest.raises(ValueError, match="'bad_input_plan' needs more scratch for this message than the 2048 "
                                             "bytes a call may use of the communicator's 4096"):
            run(lambda v: jm.psum(v, a, algorithm="bad_input_plan"), mesh, large, P(), P(a))
        with pytest.raises(ValueError, match="unknown algorithm 'bad_input_plan'; all_gather knows"):
            run(lambda v: jm.all_gather(v, a, algorithm="bad_input_plan"), mesh, small, P(a), P(a))
    finally:
        jm.unregister_algorithm("bad_input_plan")
        jm.Communicator(mesh, a).destroy()


def test_not_differentiable_pmax(mesh8, rng):
    x = random_array(rng, (8 * 2,), "float32")
    with pytest.raises(NotImplementedError, match="pmax is not differentiable"):
        run(jax.grad(lambda v: jm.pmax(v, "x").sum()), mesh8, x)


# ---- Communicator ---------------------------------------------------------------------------------------------

def _mesh(cpu_devices, name, n=4):
    return Mesh(np.array(cpu_devices[:n]), (name,))


COMMUNICATOR_ERRORS = [
    ("Communicator/mesh_None",
     lambda d: jm.Communicator(None, "x"), TypeError, "mesh must be a jax.sharding.Mesh, got NoneType"),
    ("Communicator/mesh_list",
     lambda d: jm.Communicator(d, "x"), TypeError, "mesh must be a jax.sharding.Mesh, got list"),
    ("Communicator/axis_unknown",
     lambda d: jm.Communicator(_mesh(d, "c1"), "y"), NameError, "'y' is not an axis of the mesh"),
    ("Communicator/axis_empty",
     lambda d: jm.Communicator(_mesh(d, "c2"), ()), ValueError, "must name at least one axis"),
    ("Communicator/axis_repeated",
     lambda d: jm.Communicator(Mesh(np.array(d[:4]).reshape(2, 2), ("p", "q")), ("p", "p")),
     ValueError, "repeated axis"),
    ("Communicator/axis_unhashable", lambda d: jm.Communicator(_mesh(d, "c3"), [["c3"]]), TypeError,
     "axis_names must be a mesh axis name or a tuple"),
    ("Communicator/scratch_zero", lambda d: jm.Communicator(_mesh(d, "c4"), "c4", scratch_bytes=0), ValueError,
     "scratch_bytes must be between 1 and"),
    ("Communicator/scratch_negative", lambda d: jm.Communicator(_mesh(d, "c5"), "c5", scratch_bytes=-1), ValueError,
     "scratch_bytes must be between 1 and"),
    ("Communicator/scratch_float", lambda d: jm.Communicator(_mesh(d, "c6"), "c6", scratch_bytes=1.5e6), TypeError,
     "scratch_bytes must be a whole number of bytes, got 1500000.0"),
    ("Communicator/scratch_str", lambda d: jm.Communicator(_mesh(d, "c7"), "c7", scratch_bytes="1M"), ValueError,
     "scratch_bytes must be a whole number of bytes, got '1M'"),
    ("Communicator/scratch_bool", lambda d: jm.Communicator(_mesh(d, "c8"), "c8", scratch_bytes=True), TypeError,
     "whole number of bytes"),
    ("Communicator/scratch_huge", lambda d: jm.Communicator(_mesh(d, "c9"), "c9", scratch_bytes=2**64), ValueError,
     "scratch_bytes must be between 1 and"),
    ("Communicator/scratch_too_small",
     lambda d: jm.Communicator(_mesh(d, "c10", 8), "c10", scratch_bytes=100), ValueError,
     "too small for 8 ranks"),
]


@pytest.mark.parametrize("case_id,make,error,pattern", COMMUNICATOR_ERRORS, ids=[c[0] for c in COMMUNICATOR_ERRORS])
def test_communicator_errors(cpu_devices, case_id, make, error, pattern):
    live = len(_native.native.live_communicators())
    with pytest.raises(error, match=pattern):
        make(list(cpu_devices))
    assert len(_native.native.live_communicators()) == live  # nothing half-made is left behind


def test_communicator_of_an_abstract_mesh(cpu_devices):
    # Communicator/abstract_mesh: what a shard_map nested without a concrete mesh lowers with
    comm = jm.Communicator(AbstractMesh((8,), ("x",)), "x")
    try:
        assert comm.devices is None and comm.platform == "cpu" and comm.world_size == 8 and comm.alive
        with pytest.raises(ValueError, match="abstract mesh"):
            comm.rank(cpu_devices[0])
    finally:
        comm.destroy()


def test_communicator_scratch_change_and_port_channels(cpu_devices, rng):
    mesh = _mesh(cpu_devices, "c11")
    comm = jm.Communicator(mesh, "c11", scratch_bytes=8192, port_channels=True)  # the host backend has them all
    with pytest.raises(ValueError, match="already exists with scratch_bytes=8192; destroy"):
        jm.Communicator(mesh, "c11", scratch_bytes=4096)
    x = random_array(rng, (4 * 5,), "float32")
    assert_same(run(lambda v: jm.psum(v, "c11"), mesh, x, P(), P("c11")),
                run(lambda v: lax.psum(v, "c11"), mesh, x, P(), P("c11")))
    comm.destroy()


def test_scratch_from_the_environment(cpu_devices, monkeypatch):
    monkeypatch.setenv("JAX_MSCCLPP_SCRATCH_BYTES", "1M")
    with pytest.raises(ValueError, match="JAX_MSCCLPP_SCRATCH_BYTES must be a whole number of bytes, got '1M'"):
        jm.Communicator(_mesh(cpu_devices, "c12"), "c12")
    monkeypatch.setenv("JAX_MSCCLPP_SCRATCH_BYTES", " 65536 ")
    comm = jm.Communicator(_mesh(cpu_devices, "c13"), "c13")
    assert comm.scratch_bytes == 65536
    comm.destroy()
    monkeypatch.setenv("JAX_MSCCLPP_SCRATCH_BYTES", "  ")  # empty: the default, as for every setting
    comm = jm.Communicator(_mesh(cpu_devices, "c14"), "c14")
    assert comm.scratch_bytes == 8 << 20
    comm.destroy()


def test_stale_program_after_destroy(cpu_devices, rng):
    mesh = Mesh(np.array(cpu_devices[:8])[::-1], ("x",))
    f = sharded(lambda v: jm.psum(v, "x"), mesh, P("x"), P())
    x = random_array(rng, (8 * 3,), "int32")
    expected = np.asarray(f(x))
    jm.Communicator(mesh, "x").destroy()
    with pytest.raises(Exception, match=r"FAILED_PRECONDITION: .*was destroyed \(Communicator.destroy\(\), or replaced "
                                        r"after a failed call\) after this program was compiled; "
                                        r"jax_mscclpp.reset\(\) or jax.clear_caches\(\)"):
        jax.block_until_ready(f(x))
    jax.clear_caches()
    np.testing.assert_array_equal(np.asarray(f(x)), expected)
    jm.Communicator(mesh, "x").destroy()


# ---- register_algorithm / unregister_algorithm / info ---------------------------------------------------------

REGISTER_ERRORS = [
    ("register_algorithm/None", lambda: jm.register_algorithm(None, name="r"), TypeError, "takes a dsl.Program"),
    ("register_algorithm/str",
     lambda: jm.register_algorithm("allreduce_1pa_ll", name="r"), TypeError, "takes a dsl.Program"),
    ("register_algorithm/wrong_collective",
     lambda: jm.register_algorithm(library.allreduce_1pa_ll, "all_gather", name="r"),
     ValueError, "implements all_reduce, not all_gather"),
    ("register_algorithm/name_builtin",
     lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="1pa_ll"), ValueError,
     "built-in algorithm name"),
    ("register_algorithm/name_lax", lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="lax"), ValueError,
     "built-in algorithm name"),
    ("register_algorithm/name_empty", lambda: jm.register_algorithm(library.allreduce_1pa_ll, name=""), TypeError,
     "name must be a non-empty string"),
    ("register_algorithm/name_int", lambda: jm.register_algorithm(library.allreduce_1pa_ll, name=5), TypeError,
     "name must be a non-empty string"),
    ("register_algorithm/min_above_max",
     lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="r", min_bytes=10, max_bytes=5), ValueError,
     "would never be chosen"),
    ("register_algorithm/min_negative", lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="r", min_bytes=-1),
     ValueError, "min_bytes must be a whole number of bytes >= 0"),
    ("register_algorithm/max_float", lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="r", max_bytes=1e6),
     ValueError, "max_bytes must be a whole number"),
    ("register_algorithm/platform_unknown",
     lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="r", platforms="tpu"), ValueError,
     "plans run on platforms"),
    ("register_algorithm/platforms_empty",
     lambda: jm.register_algorithm(library.allreduce_1pa_ll, name="r", platforms=()),
     ValueError, "plans run on platforms"),
    ("register_algorithm/plan_malformed",
     lambda: jm.register_algorithm({"collective": "all_reduce"}, name="r"), Exception,
     r"\[schema\] plan version"),
    ("register_algorithm/factory_raises", lambda: jm.register_algorithm(lambda n: 1 / 0, name="r"), ZeroDivisionError,
     "division by zero"),
    ("info/argument", lambda: jm.info(1), TypeError, "positional argument"),
]


@pytest.mark.parametrize("case_id,call,error,pattern", REGISTER_ERRORS, ids=[c[0] for c in REGISTER_ERRORS])
def test_register_errors(case_id, call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
    assert jm.plans.registered("r") is None  # nothing registered on the way


def test_unregister_unknown_is_a_no_op():
    jm.unregister_algorithm("never_registered")
    jm.unregister_algorithm(None)


def test_every_case_is_documented():
    text = DOC.read_text()
    ids = [c[0] for table in (ERRORS, LIKE_LAX, COMMUNICATOR_ERRORS, REGISTER_ERRORS) for c in table] + OTHER_CASES
    missing = [i for i in ids if f"`{i}`" not in text]
    assert not missing, f"docs/bad_input.md lacks rows for {missing}"
    rows = set(re.findall(r"^\| `([^`]+)`", text, flags=re.M))
    assert not rows - set(ids), f"docs/bad_input.md has rows no test covers: {sorted(rows - set(ids))}"
