"""Shared test setup: 8 virtual CPU devices (set before JAX starts), meshes, and the comparison helpers.

The native module is imported by the package itself, inside the fixtures' first use, so collection works
without a build.
"""

import os
import zlib

# The project's tests ask for their 8 CPU devices here, before anything starts JAX (the installed pytest plugin
# leaves XLA_FLAGS alone in a session that does not ask it to).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import numpy as np
import pytest

_MOST_WORKERS = 4  # each worker is a JAX process of 8 CPU devices: more than this gains little on any machine


def _gpu_may_be_visible() -> bool:
    """Whether this machine has an NVIDIA GPU this process may see (no CUDA call: the driver's own listing)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        return any(os.scandir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: plain pytest, without xdist, runs the suite too
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (README's test command): the tests in one process where a GPU may be visible (the GPU tests share
    it and time its kernels), else one worker per core, at most _MOST_WORKERS."""
    if _gpu_may_be_visible():
        return 0
    return max(1, min(_MOST_WORKERS, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def cpu_devices():
    import jax

    devices = jax.devices("cpu")
    if len(devices) < 8:
        pytest.skip("needs 8 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return devices


@pytest.fixture(scope="session")
def mesh8(cpu_devices):
    from jax.sharding import Mesh

    return Mesh(np.array(cpu_devices[:8]), ("x",))


@pytest.fixture
def fault_hooks():
    """jax_mscclpp.testing.faults, for a test that injects a lost peer: skips it in a build without the fault hooks
    (only the testing build, JAX_MSCCLPP_TESTING, has them)."""
    from jax_mscclpp.testing import faults

    if not faults.HOOKS_BUILT:
        pytest.skip("needs the fault hooks of the testing build (-C cmake.define.JAX_MSCCLPP_TESTING=ON)")
    return faults


@pytest.fixture(scope="module")
def harness():
    """The GPU tests' harness module (the CUDA build; no GPU needed), which binds the library's runtime parts."""
    from tests.harness import MISSING, native_module

    module = native_module()
    if module is None:
        pytest.skip(MISSING)
    return module


@pytest.fixture
def rng(request):
    # A different, reproducible stream per test (whatever PYTHONHASHSEED is): random data, never zeros.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
