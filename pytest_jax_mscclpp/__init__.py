"""pytest plugin of jax_mscclpp (entry point ``pytest11`` named ``jax_mscclpp``: loaded in every pytest session once
the package is installed; ``-p pytest_jax_mscclpp`` loads it by hand, ``-p no:jax_mscclpp`` turns it off).

A module of its own beside the package, so that loading it imports nothing of jax_mscclpp (nor JAX): a session that
uses none of its fixtures, markers or options pays nothing for it, and a ``JAX_MSCCLPP_*`` value the package
would refuse fails only the tests that use it. Everything below imports jax_mscclpp where it is used.

Fixtures:

- ``jm_mesh`` (session): a 1-D mesh named "x" over every device of JAX's default backend: the GPUs when JAX sees
  any, else the CPU devices;
- ``jm_comm`` (session): ``jax_mscclpp.Communicator(jm_mesh, "x")`` (skips where our collectives cannot run);
- ``collective_benchmark``: ``collective_benchmark(op, nbytes, dtype=..., algorithm=...)`` times ours and the lax
  collective (``block_until_ready`` on every call), checks that they agree, and returns a record with
  ``ours_us``, ``lax_us`` and ``speedup``; with pytest-benchmark installed it also feeds the ``benchmark``
  fixture (ours, one call per dispatch) and puts the figures in its ``extra_info``.

Markers: ``@pytest.mark.gpu`` skips unless jax_mscclpp was built with CUDA and a CUDA device is visible (to JAX;
or, when the session keeps JAX on the CPU with ``JAX_PLATFORMS=cpu``, to jax_mscclpp's CUDA runtime);
``@pytest.mark.multigpu(n)`` needs n of them.

CPU devices: JAX fixes the number of CPU devices when it starts, from
``XLA_FLAGS=--xla_force_host_platform_device_count=N``. The plugin leaves ``XLA_FLAGS`` alone in a session that
uses neither its fixtures nor its markers and asks for no devices. Asked (``--jm-cpu-devices N``, or the ini
option ``jm_cpu_devices``), it adds the flag with N when the session starts; otherwise the first test that uses
``jm_mesh`` (or a fixture built on it) or a ``gpu`` / ``multigpu`` marker (whose check starts JAX) adds it with 8.
Either way only when ``XLA_FLAGS`` sets no count and JAX has not started yet: set it yourself when something
starts JAX earlier.
"""

from __future__ import annotations

import pytest

_MARKERS = (
    "gpu: needs at least one CUDA GPU and the CUDA build",
    "multigpu(n): needs at least n CUDA GPUs",
)


def pytest_addoption(parser):
    group = parser.getgroup("jax_mscclpp")
    group.addoption("--jm-cpu-devices", type=int, default=None, dest="jm_cpu_devices",
                    help="CPU devices to create when the session starts, if XLA_FLAGS sets no count (default: ini "
                         "jm_cpu_devices; unset, the first use of jm_mesh creates 8)")
    group.addoption("--jm-bench-iters", type=int, default=None, dest="jm_bench_iters",
                    help="timed iterations of collective_benchmark (default: 20 on GPU, 3 on CPU)")
    parser.addini("jm_cpu_devices", "CPU devices to create when the session starts, if XLA_FLAGS sets no count",
                  default="")


def pytest_configure(config):
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    count = config.getoption("jm_cpu_devices", default=None) or config.getini("jm_cpu_devices")
    if count:
        _ensure_host_devices(int(count))


def _ensure_host_devices(count: int) -> None:
    from jax_mscclpp.tools.bench import machine

    machine.ensure_host_devices(count)


_skip_cache: dict = {}


def _gpu_skip_reason(count: int) -> str | None:
    if count not in _skip_cache:
        from jax_mscclpp.testing import fixtures

        _skip_cache[count] = fixtures.gpu_skip_reason(count)
    return _skip_cache[count]


def pytest_runtest_setup(item):
    needed = 0
    if item.get_closest_marker("gpu") is not None:
        needed = 1
    marker = item.get_closest_marker("multigpu")
    if marker is not None:
        n = marker.args[0] if marker.args else marker.kwargs.get("n", 2)
        needed = max(needed, int(n))
    if needed:
        from jax_mscclpp.tools.bench import machine

        _ensure_host_devices(machine.DEFAULT_HOST_DEVICES)  # before the check starts JAX
        reason = _gpu_skip_reason(needed)
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def jm_mesh():
    """A 1-D mesh named "x" over every device of JAX's default backend (8 CPU devices unless XLA_FLAGS or the
    ``jm_cpu_devices`` option set a count, when JAX has not started before)."""
    from jax_mscclpp.tools.bench import machine
    from jax_mscclpp.testing import fixtures

    _ensure_host_devices(machine.DEFAULT_HOST_DEVICES)
    return fixtures.default_mesh()


@pytest.fixture(scope="session")
def jm_comm(jm_mesh):
    """The Communicator of ``jm_mesh`` over "x"."""
    import jax_mscclpp as jm

    try:
        return jm.Communicator(jm_mesh, "x")
    except NotImplementedError as e:
        pytest.skip(str(e))


@pytest.fixture
def collective_benchmark(jm_mesh, request):
    """``collective_benchmark(op, nbytes, dtype="float32", algorithm=None, **options)`` -> record with
    ``ours_us``, ``lax_us``, ``speedup`` (see ``jax_mscclpp.testing.fixtures.CollectiveBenchmark``)."""
    from jax_mscclpp.testing import fixtures

    benchmark = None
    if request.config.pluginmanager.hasplugin("benchmark"):
        try:
            benchmark = request.getfixturevalue("benchmark")
        except pytest.FixtureLookupError:
            benchmark = None
    bench = fixtures.CollectiveBenchmark(jm_mesh, iters=request.config.getoption("jm_bench_iters", default=None),
                                         benchmark=benchmark)

    def run(op, nbytes, dtype="float32", algorithm=None, **options):
        try:
            return bench(op, nbytes, dtype=dtype, algorithm=algorithm, **options)
        except fixtures.Unavailable as e:
            pytest.skip(f"jax_mscclpp collectives cannot run here: {e}")

    run.records = bench.records
    return run


__all__ = ["collective_benchmark", "jm_comm", "jm_mesh", "pytest_addoption", "pytest_configure",
           "pytest_runtest_setup"]
