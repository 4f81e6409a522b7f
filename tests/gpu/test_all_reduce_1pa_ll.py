"""kernels/collectives/all_reduce_1pa_ll.cu on virtual ranks, N = 2..8, against numpy."""

import numpy as np
import pytest


from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, is_float, numpy_dtype
from .test_memory_channel import random_array, reference_reduce

pytestmark = pytest.mark.gpu

CASES = [("float32", "sum"), ("bfloat16", "sum"), ("float16", "sum"), ("int32", "sum"), ("float32", "max"),
         ("int8", "min"), ("float64", "sum")]
COUNTS = [1, 7, 1000, 4099, 16_411]  # the largest fits one launch on 8 ranks


@pytest.mark.parametrize("nranks", [2, 3, 4, 5, 6, 7, 8])
def test_all_reduce_1pa_ll(cuda, rng, nranks):
    max_bytes = COUNTS[-1] * 8
    scratch = cuda.all_reduce_1pa_ll_scratch_bytes(max_bytes, nranks)
    with VirtualRanks(nranks, buffer_bytes=max_bytes, scratch_bytes=scratch, channels_per_peer=1) as vr:
        calls = 0
        for dtype, op in CASES:
            dt = numpy_dtype(dtype)
            for count in COUNTS:
                data = [random_array(rng, dtype, count) for _ in range(nranks)]
                for r in range(nranks):
                    vr.upload(r, INPUT, data[r])
                    vr.fill(r, OUTPUT, 0xEE)
                vr.run("all_reduce_1pa_ll", dtype=dtype, reduce_op=op, count=count, blocks=0, threads=0)
                calls += 1
                outs = [vr.download(r, OUTPUT, count * dt.itemsize, dtype=dt) for r in range(nranks)]
                for r in range(1, nranks):
                    assert outs[r].tobytes() == outs[0].tobytes(), f"{dtype} {op} {count}: ranks disagree"
                want = reference_reduce(data, dtype, op)
                if is_float(dt):
                    tol = {2: 1e-2, 4: 1e-5, 8: 1e-12}[dt.itemsize]
                    np.testing.assert_allclose(outs[0].astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
                else:
                    assert np.array_equal(outs[0], want), f"{dtype} {op} {count}"
        assert {vr.epoch(r) for r in range(nranks)} == {calls}
