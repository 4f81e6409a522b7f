"""reduce.cuh: N-input element-wise reduce for every dtype and op, against numpy."""

import numpy as np
import pytest


from .gpu_helpers import DTYPES, INPUT, OUTPUT, VirtualRanks, is_float, numpy_dtype, round_up
from .test_memory_channel import random_array, reference_reduce

pytestmark = pytest.mark.gpu

COUNT = 4099  # not a multiple of any vector width


@pytest.fixture(scope="module")
def vr1(cuda):
    with VirtualRanks(1, buffer_bytes=16 * round_up(COUNT * 8 + 64, 256), channels_per_peer=1) as vr:
        yield vr


def check(vr, rng, dtype, op, nsrc, stride_pad=0):
    dt = numpy_dtype(dtype)
    stride = round_up(COUNT * dt.itemsize, 256) + stride_pad
    srcs = [random_array(rng, dtype, COUNT) for _ in range(nsrc)]
    for k, s in enumerate(srcs):
        vr.upload(0, INPUT, s, offset=k * stride)
    vr.fill(0, OUTPUT, 0xCD)  # poison: every element must be written
    vr.run("reduce_local", dtype=dtype, reduce_op=op, nsrc=nsrc, count=COUNT, slot_stride=stride, blocks=8, threads=256)
    got = vr.download(0, OUTPUT, COUNT * dt.itemsize, dtype=dt)
    want = reference_reduce(srcs, dtype, op)
    if is_float(dt):
        if op == "sum" and dt.itemsize <= 2 and nsrc > 8:
            tol = 2e-2  # more than 8 sources: rounded to the 16-bit type between passes
        else:
            tol = {2: 1e-2, 4: 1e-6, 8: 1e-12}[dt.itemsize]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    else:
        assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {COUNT} differ"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("nsrc", [1, 2, 3, 8, 11])
def test_reduce_all_dtypes(vr1, rng, dtype, op, nsrc):
    check(vr1, rng, dtype, op, nsrc)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint64"])
def test_reduce_unaligned_sources_take_the_scalar_path(vr1, rng, dtype):
    check(vr1, rng, dtype, "sum", 3, stride_pad=numpy_dtype(dtype).itemsize)


def test_integer_sums_wrap(vr1):
    a = np.full(COUNT, 127, dtype=np.int8)
    b = np.full(COUNT, 3, dtype=np.int8)
    stride = round_up(COUNT, 256)
    vr1.upload(0, INPUT, a, offset=0)
    vr1.upload(0, INPUT, b, offset=stride)
    vr1.run("reduce_local", dtype="int8", reduce_op="sum", nsrc=2, count=COUNT, slot_stride=stride, blocks=2)
    assert np.all(vr1.download(0, OUTPUT, COUNT, dtype=np.int8) == np.int8(-126))


@pytest.mark.parametrize("op", ["max", "min"])
def test_float_max_min_propagate_nan(vr1, rng, op):
    stride = round_up(COUNT * 4, 256)
    a = rng.standard_normal(COUNT).astype(np.float32)
    b = rng.standard_normal(COUNT).astype(np.float32)
    a[10] = np.nan
    b[20] = np.nan
    vr1.upload(0, INPUT, a, offset=0)
    vr1.upload(0, INPUT, b, offset=stride)
    vr1.run("reduce_local", dtype="float32", reduce_op=op, nsrc=2, count=COUNT, slot_stride=stride, blocks=2)
    got = vr1.download(0, OUTPUT, COUNT * 4, dtype=np.float32)
    assert np.isnan(got[10]) and np.isnan(got[20])
    mask = np.ones(COUNT, bool)
    mask[[10, 20]] = False
    fn = np.maximum if op == "max" else np.minimum
    assert np.array_equal(got[mask], fn(a, b)[mask])
