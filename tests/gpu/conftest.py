"""Setup for the GPU primitive tests (virtual ranks on one GPU, and processes sharing it).

Environment, before CUDA starts in this process or any child:
- every virtual rank's stream gets its own hardware queue (CUDA_DEVICE_MAX_CONNECTIONS), so ranks that wait
  for each other run concurrently;
- NVLink multicast stays off (NCCL_NVLS_ENABLE=0, JAX_MSCCLPP_NVLS unset): only the emulated SwitchChannel runs.
The native module is imported inside fixtures, so collection works without a build.
"""

import os

os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"  # override: a queue shared by two ranks can deadlock
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)

import numpy as np
import pytest


def _cuda_module():
    try:
        from jax_mscclpp.testing.virtual_ranks import native_cuda
    except ImportError:  # the package itself needs its native module
        return None
    return native_cuda()


@pytest.fixture(scope="session")
def cuda_build():
    """The native CUDA submodule (needs the CUDA build, not a GPU)."""
    cuda = _cuda_module()
    if cuda is None:
        pytest.skip("jax_mscclpp was built without CUDA")
    return cuda


@pytest.fixture(scope="session")
def cuda(cuda_build):
    """The native CUDA submodule on a machine with a GPU."""
    if cuda_build.device_count() < 1:
        pytest.skip("no CUDA GPU")
    return cuda_build


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.nodeid)) % (2**32))

