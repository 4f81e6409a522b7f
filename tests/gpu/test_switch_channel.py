"""SwitchChannel: semantics through the emulated backend (peer pointers), and the NVLS safety policy.

The hardware (multimem) backend is compiled but never run here: it needs the JAX_MSCCLPP_NVLS opt-in, which no test gives,
and is refused whenever NCCL_NVLS_ENABLE=0, which the GPU conftest sets for this process and its children.
"""

import os

import numpy as np
import pytest


from .gpu_helpers import OUTPUT, SCRATCH, VirtualRanks, is_float, numpy_dtype, round_up
from .test_memory_channel import random_array, reference_reduce

COUNT = 4099

CASES = [(d, o) for d in ("float32", "float16", "bfloat16", "int32") for o in ("sum", "max", "min")] + [
    ("float64", "sum"),
    ("uint64", "sum"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 3, 4, 8])
@pytest.mark.parametrize("mode", [0, 1], ids=["reduce_broadcast", "reduce_then_broadcast"])
def test_emulated_all_reduce_matches_host(cuda, rng, nranks, mode):
    esize_max = 8
    region = round_up(COUNT * esize_max, 256)
    with VirtualRanks(nranks, buffer_bytes=region, scratch_bytes=2 * region, channels_per_peer=4) as vr:
        for dtype, op in CASES:
            dt = numpy_dtype(dtype)
            data = [random_array(rng, dtype, COUNT) for _ in range(nranks)]
            for r in range(nranks):
                vr.upload(r, SCRATCH, data[r])
                vr.fill(r, OUTPUT, 0xEE)
            vr.run("switch_all_reduce", dtype=dtype, reduce_op=op, count=COUNT, dst_off=region, mode=mode, blocks=4)
            want = reference_reduce(data, dtype, op)
            outs = [vr.download(r, OUTPUT, COUNT * dt.itemsize, dtype=dt) for r in range(nranks)]
            for r in range(1, nranks):
                assert outs[r].tobytes() == outs[0].tobytes(), f"{dtype} {op}: ranks disagree"
            if is_float(dt):
                tol = {2: 1e-2, 4: 1e-6, 8: 1e-12}[dt.itemsize]
                np.testing.assert_allclose(outs[0].astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
            else:
                assert np.array_equal(outs[0], want), f"{dtype} {op}"


def test_policy_is_opt_in_and_yields_to_nccl(cuda_build):
    allowed, reason = cuda_build.nvls_policy(None, None)
    assert not allowed and "JAX_MSCCLPP_NVLS" in reason  # the refusal names the opt-in
    allowed, reason = cuda_build.nvls_policy("0", None)
    assert not allowed
    allowed, reason = cuda_build.nvls_policy("1", "0")  # values only: nothing is set in the environment
    assert not allowed and "NCCL_NVLS_ENABLE=0" in reason
    allowed, reason = cuda_build.nvls_policy(None, "0")
    assert not allowed and "NCCL_NVLS_ENABLE=0" in reason


def test_environment_refuses_multicast_before_any_driver_call(cuda_build, monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.delenv("JAX_MSCCLPP_NVLS", raising=False)
    assert cuda_build.nvls_policy_from_env()[0] is False
    with pytest.raises(RuntimeError, match="refused"):
        cuda_build.create_multicast_buffer([0], 1 << 21)
    assert os.environ.get("JAX_MSCCLPP_NVLS") is None


def test_multimem_support_table(cuda_build):
    from tests.harness.virtual_ranks import DTYPE_CODES, REDUCE_CODES

    s = lambda d, o: cuda_build.multimem_supported(DTYPE_CODES[d], REDUCE_CODES[o])  # noqa: E731
    assert s("float32", "sum") and not s("float32", "max")
    assert all(s(d, o) for d in ("float16", "bfloat16", "int32", "uint32", "int64", "uint64") for o in REDUCE_CODES)
    assert not s("int8", "sum") and not s("uint8", "max") and not s("int16", "sum")
    assert s("float64", "sum") and not s("float64", "min")
