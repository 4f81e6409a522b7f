"""Setup for the GPU tests: the virtual-ranks harness on one GPU (tests/harness), processes sharing it, and the JAX
path end to end.

Environment, before CUDA starts in this process or any child:
- every virtual rank's stream gets its own hardware queue (CUDA_DEVICE_MAX_CONNECTIONS), so ranks that wait
  for each other run concurrently;
- NVLink multicast stays off (NCCL_NVLS_ENABLE=0, JAX_MSCCLPP_NVLS unset): only the emulated SwitchChannel runs.
Native modules are imported inside fixtures, so collection works without a build.
"""

import os
import zlib

os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"  # override: a queue shared by two ranks can deadlock
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)

import numpy as np
import pytest


@pytest.fixture(scope="session")
def gpus() -> int:
    """CUDA GPUs this process sees through jax_mscclpp's CUDA build (skips without the build or a GPU)."""
    from jax_mscclpp import _native

    if not _native.CUDA_BUILT:
        pytest.skip("jax_mscclpp was built without CUDA")
    count = int(_native.native.cuda.device_count())
    if count < 1:
        pytest.skip("no CUDA GPU")
    return count


@pytest.fixture(scope="session")
def cuda_build():
    """The harness's native module, tests/harness/_jax_mscclpp_testing (needs the CUDA build, not a GPU). Missing
    where a GPU is visible, it is an error: the GPU tests must not pass by skipping."""
    from ..harness import MISSING, native_module

    module = native_module()
    if module is not None:
        return module
    from jax_mscclpp import _native

    if _native.CUDA_BUILT and _native.native.cuda.device_count() > 0:
        pytest.fail(MISSING, pytrace=False)
    pytest.skip(MISSING)


@pytest.fixture(scope="session")
def cuda(cuda_build, gpus):
    """The harness's native module on a machine with a GPU."""
    return cuda_build


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
