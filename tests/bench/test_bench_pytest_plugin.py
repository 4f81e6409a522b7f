"""The pytest plugin as a user meets it: a test file of theirs run by pytest with the plugin loaded, in a fresh
process whose XLA_FLAGS set no device count (the plugin sets one before JAX starts). The fixtures run with
pytest-benchmark turned off; what they feed it is checked where it is installed."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

USER_TESTS = '''
import jax
import pytest


def test_mesh_over_eight_cpu_devices(jm_mesh, jm_comm):
    assert jm_mesh.axis_names == ("x",) and jm_mesh.devices.size == 8
    assert jax.devices()[0].platform == "cpu"
    assert jm_comm.world_size == 8


@pytest.mark.parametrize("op", ["psum", "all_gather", "psum_scatter", "all_to_all"])
def test_my_collective_is_not_slower_than_it_should_be(collective_benchmark, op):
    result = collective_benchmark(op, "16K", dtype="bfloat16", iters=2, warmup=0, chain=2)
    assert result.check == "ok"
    assert result.lax_us is not None and result.ours_us is not None
    assert result.speedup is None or result.speedup > 0
    print("RESULT", op, result.ours_us, result.lax_us, result.speedup)


def test_an_algorithm_that_does_not_run_here(collective_benchmark):
    with pytest.raises(ValueError, match="does not run here"):
        collective_benchmark("all_reduce", 1024, algorithm="2pr")


@pytest.mark.gpu
def test_needs_a_gpu():
    raise AssertionError("must be skipped on a CPU-only machine")


@pytest.mark.multigpu(4)
def test_needs_four_gpus():
    raise AssertionError("must be skipped on a CPU-only machine")
'''


def run_user_tests(tmp_path, *options):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    # A user's own session: not one of this suite's xdist workers (pytest-benchmark turns itself off in one).
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_MSCCLPP_TUNING_FILE") and not k.startswith("PYTEST_XDIST_")}
    env["JAX_PLATFORMS"] = "cpu"
    # "-p no:jax_mscclpp" keeps an installed entry point from loading the plugin a second time.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-s", "-p", "no:cacheprovider", "-p", "no:jax_mscclpp",
         "-p", "jax_mscclpp.testing.pytest_plugin", *options, "--rootdir", str(tmp_path),
         str(tmp_path / "test_user.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "6 passed, 2 skipped" in out, out
    assert "needs jax_mscclpp built with CUDA" in out or "CUDA GPU" in out
    assert out.count("RESULT ") == 4
    return out


def test_user_tests_run_without_pytest_benchmark(tmp_path):
    """The fixtures need no pytest-benchmark: with it turned off the same tests pass and nothing is fed to it."""
    out = run_user_tests(tmp_path, "-p", "no:benchmark")
    assert "benchmark:" not in out  # pytest-benchmark's own table


def test_user_tests_feed_pytest_benchmark(tmp_path):
    pytest.importorskip("pytest_benchmark")
    report = tmp_path / "bench.json"
    run_user_tests(tmp_path, f"--benchmark-json={report}")
    # pytest-benchmark got ours (one call per dispatch) and the figures beside it.
    benchmarks = json.loads(report.read_text())["benchmarks"]
    assert len(benchmarks) == 4
    for b in benchmarks:
        assert b["stats"]["rounds"] == 2
        assert {"ours_us", "lax_us", "speedup", "world", "chosen"} <= set(b["extra_info"])
        assert b["extra_info"]["world"] == 8
