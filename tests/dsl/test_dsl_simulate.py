"""The numpy interpreter runs every library plan to the same result as numpy: all dtypes, reductions and
element counts (1, 3, 1023, 4096: empty and short tail chunks included), replicated or not."""

import numpy as np
import pytest

from jax_mscclpp.dsl import library
from jax_mscclpp.dsl.simulate import run_plan

WORLD_SIZES = (2, 4, 8)
SIZES = (1, 3, 1023, 4096)
NUMPY_REDUCTIONS = {"sum": np.add, "max": np.maximum, "min": np.minimum}
# (dtype name, reduction) per size index: every library plan meets every dtype and reduction across sizes.
ROTATION = (("float32", "sum"), ("int32", "max"), ("bfloat16_like", "min"), ("int32", "sum"))


def random_inputs(rng, world_size, count, dtype_name):
    """Random data, never zero, with random signs."""
    shape = (world_size, count)
    sign = rng.choice([-1, 1], size=shape)
    if dtype_name == "int32":
        return list((rng.integers(1, 1000, size=shape) * sign).astype(np.int32))
    values = (rng.uniform(0.5, 4.0, size=shape) * sign).astype(np.float32)
    if dtype_name == "bfloat16_like":  # keep bfloat16's 8 mantissa bits, in float32
        values = (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return list(values)


def expected_outputs(collective, inputs, reduction, permutation=None):
    """Each rank's output (the permutation's: its (source, destination) pairs; zeros where nothing is sent)."""
    n = len(inputs)
    if collective == "permute":
        sources = {dst: src for src, dst in permutation}
        return [inputs[sources[r]] if r in sources else np.zeros_like(inputs[r]) for r in range(n)]
    reduced = reduction.reduce(np.stack(inputs), axis=0, dtype=inputs[0].dtype)
    if collective == "all_reduce":
        return [reduced] * n
    if collective == "all_gather":
        return [np.concatenate(inputs)] * n
    if collective == "reduce_scatter":
        return np.split(reduced, n)
    return [np.concatenate([np.split(x, n)[r] for x in inputs]) for r in range(n)]  # all_to_all


def check_plan(plan, rng, size, dtype_name, op):
    n = plan["world_size"]
    count = size * plan["buffers"]["input"]["blocks"]
    inputs = random_inputs(rng, n, count, dtype_name)
    outputs = run_plan(plan, inputs, op)
    expected = expected_outputs(plan["collective"], inputs, NUMPY_REDUCTIONS[op])
    for rank, (got, want) in enumerate(zip(outputs, expected)):
        assert got.dtype == want.dtype and got.shape == want.shape, f"rank {rank}"
        if dtype_name == "int32" or op != "sum":
            np.testing.assert_array_equal(got, want, err_msg=f"rank {rank}")
        else:  # sums of floats: the plan's reduction order differs from numpy's
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank}")


CASES = [(name, n) for name in library.PROGRAMS for n in WORLD_SIZES]


@pytest.mark.parametrize("name,world_size", CASES, ids=[f"{name}-n{n}" for name, n in CASES])
def test_library_plan_matches_numpy(name, world_size):
    rng = np.random.default_rng(world_size)
    plan = library.PROGRAMS[name](world_size).lower()
    for size, (dtype_name, op) in zip(SIZES, ROTATION):
        check_plan(plan, rng, size, dtype_name, op)


@pytest.mark.parametrize("name", ["allreduce_1pa_ll", "allreduce_2pa_ll", "allreduce_2pr", "allreduce_2pa_nvls"])
@pytest.mark.parametrize("dtype_name", ["float32", "int32", "bfloat16_like"])
@pytest.mark.parametrize("op", sorted(NUMPY_REDUCTIONS))
def test_all_reduce_dtype_and_reduction_matrix(name, dtype_name, op):
    rng = np.random.default_rng(7)
    plan = library.PROGRAMS[name](4).lower()
    for size in SIZES:
        check_plan(plan, rng, size, dtype_name, op)


@pytest.mark.parametrize("name", sorted(library.PROGRAMS))
def test_replicated_plan_matches_numpy(name):
    rng = np.random.default_rng(3)
    plan = library.PROGRAMS[name](4).lower(instances=2)
    for size, (dtype_name, op) in zip(SIZES, ROTATION):
        check_plan(plan, rng, size, dtype_name, op)


def test_real_bfloat16_dtype():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    plan = library.allreduce_2pa_hb(4).lower()
    inputs = [np.full(10, r + 1, dtype=ml_dtypes.bfloat16) for r in range(4)]
    for output in run_plan(plan, inputs, "sum"):
        assert output.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(output.astype(np.float32), np.full(10, 10.0, np.float32))


def test_rejects_mismatched_inputs():
    plan = library.allreduce_2pa_hb(2).lower()
    with pytest.raises(ValueError, match="one dtype and size"):
        run_plan(plan, [np.ones(4, np.float32), np.ones(5, np.float32)])
    with pytest.raises(ValueError, match="2 ranks"):
        run_plan(plan, [np.ones(4, np.float32)])
