"""The numpy semantics the NCCL-API GPU test compares with (tests/gpu/_nccl_api_worker.py, reduce_reference and
tolerance), checked on the CPU: NCCL's reductions as our fold computes them (kernels/collectives/fold.h): a left
fold in rank order, accumulated in float for the 16- and 8-bit floats with one rounding at the end, integers
wrapping, avg pre-multiplied for floats and truncating for integers, premulsum in the element type; and the
worker's comparison, poison and data."""

import ml_dtypes
import numpy as np
import pytest

from tests.gpu import _nccl_api_worker as ref

E4M3, E5M2, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16


def blocks_of(values, dtype):
    """One single-element block per rank."""
    return [np.array([v], dtype) for v in values]


def test_integer_avg_truncates_towards_zero():
    got = ref.reduce_reference(blocks_of([-7, 2], np.int32), "int32", "avg")
    assert got.tolist() == [-2]  # -5 / 2 in C; numpy's floor division would give -3
    assert ref.reduce_reference(blocks_of([7, 2, 1], np.int64), "int64", "avg").tolist() == [3]
    assert ref.reduce_reference(blocks_of([255, 255], np.uint8), "uint8", "avg").tolist() == [127]  # (510 mod 256) / 2


def test_integer_sums_and_products_wrap_in_the_element_type():
    assert ref.reduce_reference(blocks_of([100, 100], np.int8), "int8", "sum").tolist() == [-56]
    assert ref.reduce_reference(blocks_of([-100, -100, -100], np.int8), "int8", "avg").tolist() == [-14]  # -300 -> -44
    assert ref.reduce_reference(blocks_of([99, 99], np.int8), "int8", "prod").tolist() == [73]  # 9801 mod 256
    big = np.iinfo(np.uint64).max
    assert ref.reduce_reference(blocks_of([big, 2], np.uint64), "uint64", "sum").tolist() == [1]
    # premulsum: x * scalar and the sum, both wrapping in int32
    assert ref.reduce_reference(blocks_of([2 ** 30, 2 ** 30], np.int32), "int32", "premulsum", 3).tolist() == \
        [-(2 ** 31)]


def test_fp8_avg_rounds_once_from_float():
    # 1.625 * float32(1/3) = 0.5416667 three times: summed in float (1.6250001) and rounded once, 1.625; rounding
    # each pre-multiplied term to e4m3 (0.5625) and the sum (1.6875, a tie) would give 1.75.
    got = ref.reduce_reference(blocks_of([1.625] * 3, E4M3), "float8_e4m3", "avg")
    assert float(got[0]) == 1.625
    assert got.dtype == np.dtype(E4M3)
    # e5m2: the float sum 1 + 0.125 + 0.125 = 1.25 is exact; element-wise, 1 + 0.125 ties back to 1.0 twice
    assert float(ref.reduce_reference(blocks_of([1.0, 0.125, 0.125], E5M2), "float8_e5m2", "sum")[0]) == 1.25


def test_bf16_sum_rounds_once_but_its_tolerance_admits_element_type_adds():
    blocks = blocks_of([1.0, 2.0 ** -8, 2.0 ** -8], BF16)
    want = ref.reduce_reference(blocks, "bfloat16", "sum")
    assert float(want[0]) == 1.0 + 2.0 ** -7  # float accumulation; bf16 step by step would stay at 1.0
    tol = ref.tolerance(blocks, "bfloat16", "sum")
    assert ref.compare(np.array([1.0], BF16), want, tol) is None  # a collective kernel adding in bf16
    # avg runs composed (float accumulation): about one bf16 ulp of the result (0.336: 2^-9), no more
    avg_tol = ref.tolerance(blocks, "bfloat16", "avg")
    assert 2.0 ** -9 <= avg_tol[0] < 2.0 ** -8


def test_exact_where_nccl_is_exact():
    for name in ("int8", "uint64", "int32"):
        assert ref.tolerance(blocks_of([1, 2], ref.NUMPY_DTYPES[name]), name, "sum") is None
    for op in ("max", "min"):
        assert ref.tolerance(blocks_of([1.5, -2.0], E4M3), "float8_e4m3", op) is None
    assert ref.reduce_reference(blocks_of([1.5, -2.0, 3.0], np.float16), "float16", "max").tolist() == [3.0]


def test_float_avg_premultiplies():
    blocks = [np.array([1.0, 3.0], np.float32), np.array([2.0, 5.0], np.float32), np.array([4.0, 7.0], np.float32)]
    want = ref.reduce_reference(blocks, "float32", "avg")
    third = np.float32(1.0 / 3)
    expected = (blocks[0] * third + blocks[1] * third) + blocks[2] * third
    assert want.tobytes() == expected.tobytes()


@pytest.mark.parametrize("name", ref.ALL_DTYPES)
def test_compare_reports_the_first_difference_and_poison_never_passes(name):
    dtype = ref.NUMPY_DTYPES[name]
    want = ref.rank_data(5, 0, 33, name)
    poison = ref.poison_for(want).view(dtype)
    tol = ref.tolerance([want, want], name, "sum") if ref.is_float(name) else None
    assert ref.compare(want.copy(), want, tol) is None
    text = ref.compare(poison, want, tol)
    assert text is not None and text.startswith("33 of 33 elements differ; first at [0]")
    got = want.copy()
    got[17] = want[3] if want[3] != want[17] else want[4]
    text = ref.compare(got, want)
    assert text is not None and text.startswith("1 of 33 elements differ; first at [17]"), text


@pytest.mark.parametrize("name", ref.ALL_DTYPES)
def test_rank_data_is_seeded_per_rank_and_never_zero(name):
    a, b = ref.rank_data(11, 0, 4096, name), ref.rank_data(11, 1, 4096, name)
    assert a.dtype == np.dtype(ref.NUMPY_DTYPES[name]) and a.size == 4096
    assert not np.any(a.astype(np.float64) == 0) and not np.any(b.astype(np.float64) == 0)
    assert a.tobytes() != b.tobytes()
    assert ref.rank_data(11, 0, 4096, name).tobytes() == a.tobytes()
    if ref.is_float(name):  # products of 4 ranks' data stay finite in every float type
        assert np.all(np.abs(a.astype(np.float64)) < 4.01)


def test_alltoallv_counts_are_unequal_with_zeros():
    for n in (2, 3, 4):
        counts = ref.alltoallv_counts(9, n)
        assert counts.shape == (n, n) and (counts == 0).any() and len(set(counts.ravel().tolist())) > 1
        assert counts[0, n - 1] == 0 and counts[1, 1] == 0
        assert (ref.alltoallv_counts(9, n) == counts).all()


def test_every_case_name_is_unique_and_the_simulation_is_last():
    for n in (2, 3, 4):
        names = [name for batch in ref.batches(n) for name, _ in batch]
        assert len(names) == len(set(names)), [x for x in names if names.count(x) > 1]
        assert names[-1] == ref.SIMULATE_CASE
        assert len(names) > 500
