"""The virtual-ranks harness of the GPU tests (tests/gpu) and the device benchmarks (bench/): N ranks on one GPU,
or one per process, running the primitive and collective kernels (``virtual_ranks``) or execution plans
(``plan_ranks``) with the host runtime and kernels of the package.

Its native module, ``_jax_mscclpp_testing`` (sources in ``native/``), is built by the CUDA build into this folder
(CMake option ``JAX_MSCCLPP_TESTING``: by default on a machine that shows an NVIDIA GPU) and never installed with
the package, which never imports it.
"""

import os


def native_module():
    """The test module, or None when it is not built here."""
    try:
        from . import _jax_mscclpp_testing
    except ImportError:
        return None
    return _jax_mscclpp_testing


MISSING = ("the GPU test harness module (tests/harness/_jax_mscclpp_testing) is not built: install with "
           "`python -m pip install -e . -C cmake.define.JAX_MSCCLPP_TESTING=ON` (the default on a machine with an "
           "NVIDIA GPU)")


def synchronize_or_exit(synchronize, error) -> None:
    """How a failure test's script waits for its ranks: ``synchronize()``; when that raises ``error`` (a rank's
    timeout or failure record), prints ``ERROR: <message>`` and leaves the process at once (``os._exit``: a peer's
    kernel may still spin, and the interpreter's teardown would wait on the device for it)."""
    try:
        synchronize()
    except error as e:
        print("ERROR:", e, flush=True)
        os._exit(0)
