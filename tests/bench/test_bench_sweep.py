"""The sweep in this process (8 virtual CPU devices): records, and the check that stops a wrong result from being
timed."""

import jax
import pytest

from jax_mscclpp.testing import fixtures
from jax_mscclpp.tools import bench
from jax_mscclpp.tools.bench import programs, sweep


@pytest.fixture(scope="module")
def mesh4():
    devices = jax.devices("cpu")
    if len(devices) < 4:
        pytest.skip("needs 4 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return programs.make_mesh(devices[:4])


def test_run_returns_records(mesh4):
    notes = []
    records = bench.run(devices=list(mesh4.devices.flat), notices=notes, ops=["all_to_all"], sizes="1K",
                        dtypes=["int32"], iters=2, warmup=0, chain=2)
    assert [(r.op, r.algorithm, r.chosen, r.mode, r.status, r.check) for r in records] == [
        ("all_to_all", "allpairs", "allpairs", "plain", "ok", "ok"),
        ("all_to_all", "auto", "allpairs", "plain", "ok", "ok"),
    ]
    assert any("cmdbuf" in n for n in notes)
    assert all(r.check_max_error == 0 for r in records)  # integers: exact


def _wrong_all_gather(monkeypatch):
    real = programs.ours_collective

    def ours(op, algorithm, redop="sum"):
        fn = real(op, algorithm, redop)
        return (lambda x: fn(x) + 1) if op == "all_gather" else fn

    monkeypatch.setattr(programs, "ours_collective", ours)


def test_a_wrong_result_is_reported_and_not_timed(mesh4, monkeypatch):
    _wrong_all_gather(monkeypatch)
    settings = sweep.Settings(ops=("all_gather",), sizes=(1024,), dtypes=("float32",), algorithms=("allpairs",),
                              iters=2, warmup=0, chain=2)
    (record,) = sweep.Runner(mesh4, settings).run()
    assert record.status == "check failed" and record.check == "FAIL"
    assert record.check_max_error == pytest.approx(1.0, rel=1e-6)
    assert record.ours_us is None and record.ours_dispatch_us is None
    assert record.lax_us is not None  # lax is still measured


def test_collective_benchmark_raises_on_a_wrong_result(mesh4, monkeypatch):
    _wrong_all_gather(monkeypatch)
    run = fixtures.CollectiveBenchmark(mesh4, iters=2, warmup=0, chain=2)
    with pytest.raises(fixtures.CheckFailed, match="differs from lax"):
        run("all_gather", 1024)
    record = run("psum_scatter", "1K", dtype="bfloat16")
    assert record.op == "reduce_scatter" and record.check == "ok" and record.world == 4


def test_auto_that_emits_lax_reports_lax_timings(mesh4, monkeypatch):
    # When the runtime's choice is the lax collective, "ours" is lax's own program: timing it again would measure
    # only noise, so lax's timings stand for both.
    monkeypatch.setenv("JAX_MSCCLPP_ALGORITHM", "lax")
    settings = sweep.Settings(ops=("all_reduce",), sizes=(4096,), dtypes=("float32",), algorithms=("auto",),
                              iters=2, warmup=0, chain=2)
    (record,) = sweep.Runner(mesh4, settings).run()
    assert record.chosen == "lax" and record.same_program_as_lax and record.check == "ok"
    assert record.ours_us == record.lax_us and record.ours_dispatch_us == record.lax_dispatch_us
    # lax's per-call estimate (chained minus trivial) can come out at or below zero on a busy CPU: no ratio then
    if record.lax_us > 0:
        assert record.speedup == pytest.approx(1.0)
    else:
        assert record.speedup is None
