"""Our libnccl.so.2 with our runtime on, without a GPU and without a real NCCL: where the CUDA parts are built, ids
are ours (the bootstrap root's address, never the real library's), a communicator's setup fails with an error
naming the call and the CUDA failure, and groups need no real library; where they are not built, the runtime is
off and ids come from the real library. The runtime's collectives are tested on GPUs
(tests/gpu/test_nccl_library.py)."""

import pytest

from tests.nccl.conftest import run_worker

NCCL_SUCCESS, NCCL_SYSTEM_ERROR = 0, 2


def cuda_built() -> bool:
    from jax_mscclpp import info

    return bool(info()["cuda_built"])


def gpu_visible() -> bool:
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*"))


@pytest.fixture(scope="module")
def runtime_on(our_library):
    return run_worker("our_runtime", None, extra_env={"OUR_NCCL": our_library, "JAX_MSCCLPP_NCCL_RUNTIME": "1"})


def test_runtime_is_on_exactly_where_built(runtime_on, our_library):
    assert runtime_on["runtime_enabled"] == int(cuda_built())
    off = run_worker("our_runtime", None, extra_env={"OUR_NCCL": our_library, "JAX_MSCCLPP_NCCL_RUNTIME": "0"})
    assert off["runtime_enabled"] == 0
    assert off["get_unique_id"] == [NCCL_SYSTEM_ERROR] * 2, "without a real NCCL and our runtime off, no id"


def test_ids_are_ours_without_a_real_library(runtime_on):
    if not cuda_built():
        pytest.skip("the CUDA parts are not built: ids come from the real library")
    assert runtime_on["get_unique_id"] == [NCCL_SUCCESS, NCCL_SUCCESS]
    assert runtime_on["ids"] == ["JMSCUQID", "JMSCUQID"]
    assert runtime_on["ids_differ"]
    assert runtime_on["real_library"] == "", "making our ids must not open the real library"


def test_setup_without_a_gpu_names_the_call_and_the_cuda_failure(runtime_on):
    if not cuda_built() or gpu_visible():
        pytest.skip("needs the CUDA parts built and no GPU")
    assert runtime_on["init_rank"] == NCCL_SYSTEM_ERROR
    assert "ncclCommInitRank" in runtime_on["init_error"] and "cuda" in runtime_on["init_error"].lower()
    assert runtime_on["calls"] == ""


def test_groups_need_no_real_library(runtime_on):
    if not cuda_built():
        pytest.skip("the CUDA parts are not built: groups go to the real library")
    assert runtime_on["group"] == [NCCL_SUCCESS, 1, NCCL_SUCCESS, 0]
