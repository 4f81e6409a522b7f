"""The virtual-ranks harness of the GPU tests (tests/gpu) and the device benchmarks (bench/): N ranks on one GPU,
or one per process, running the primitive and collective kernels (``virtual_ranks``) or execution plans
(``plan_ranks``) with the host runtime and kernels of the package.

Its native module, ``_jax_mscclpp_testing`` (sources in ``native/``), is built by the CUDA build into this folder
(CMake option ``JAX_MSCCLPP_TESTING``: by default on a machine that shows an NVIDIA GPU) and never installed with
the package, which never imports it.
"""


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
