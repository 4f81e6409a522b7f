"""Our collectives beside lax through the plugin's fixtures: small sizes, a few iterations (fast on CPU).

On GPUs the same tests time real kernels; ``pytest tests/bench/test_benchmark_fixtures.py --benchmark-only``
prints pytest-benchmark's table.
"""

import pytest

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _sane(record):
    assert record.status == "ok" and record.check == "ok"
    for field in ("ours_us", "lax_us", "ours_dispatch_us", "lax_dispatch_us"):
        value = getattr(record, field)
        assert value is not None and value == value  # measured, not NaN
    assert record.ours_dispatch_us > 0 and record.lax_dispatch_us > 0
    assert record.speedup is None or record.speedup > 0


@pytest.mark.parametrize("op", OPS)
def test_ours_beside_lax(collective_benchmark, op):
    record = collective_benchmark(op, "4K", dtype="float32", iters=2, warmup=1, chain=2)
    _sane(record)
    assert record.op == op and record.world >= 1 and record.size == 4096


@pytest.mark.parametrize("algorithm", ["1pa_ll", "2pa_ll", "2pa_hb"])
def test_all_reduce_algorithms(collective_benchmark, algorithm):
    record = collective_benchmark("psum", 8192, dtype="bfloat16", algorithm=algorithm, iters=2, warmup=0, chain=2)
    _sane(record)
    assert record.chosen == algorithm


def test_fixtures_agree(jm_mesh, jm_comm):
    assert jm_mesh.axis_names == ("x",)
    assert jm_comm.world_size == jm_mesh.devices.size


@pytest.mark.gpu
def test_gpu_marker_runs_only_with_a_gpu():
    from jax_mscclpp.testing import fixtures

    assert fixtures.cuda_built() and fixtures.cuda_device_count() >= 1


@pytest.mark.multigpu(8)
def test_multigpu_marker_runs_only_with_eight():
    from jax_mscclpp.testing import fixtures

    assert fixtures.cuda_device_count() >= 8
