"""The pytest plugin leaves XLA_FLAGS alone in a session that does not use it, and sets the CPU device count when
asked or when its fixtures are used (a user's pytest session in a fresh process, the plugin loaded as the
installed entry point loads it)."""

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap

import pytest

# What pytest says in every session of an environment where jax-mscclpp is installed editable (pip install -e):
# it marks for assertion rewriting the top-level modules of each distribution with a pytest11 entry point, and
# scikit-build-core's editable finder, imported when Python starts, is one of them. A regular install has no such
# module; the plugin's code plays no part in it (it comes before any plugin loads).
EDITABLE_FINDER_WARNING = ("ignore:Module already imported so cannot be rewritten; _editable_skbc:"
                           "pytest.PytestAssertRewriteWarning")


def run_user_session(tmp_path, tests: str, *options: str, env=None):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(tests))
    env = {**{k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_MSCCLPP_TUNING_FILE")},
           **(env or {})}
    env["JAX_PLATFORMS"] = "cpu"
    # "-p no:jax_mscclpp" keeps an installed entry point from loading the plugin a second time.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:jax_mscclpp",
         "-p", "pytest_jax_mscclpp", "--rootdir", str(tmp_path), *options,
         str(tmp_path / "test_user.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_session_that_does_not_use_it_keeps_its_environment(tmp_path):
    code, out = run_user_session(tmp_path, """
        import os

        def test_xla_flags_untouched():
            assert "XLA_FLAGS" not in os.environ

        def test_jax_has_its_default_cpu_device():
            import jax
            assert len(jax.devices("cpu")) == 1
    """)
    assert code == 0, out
    assert "2 passed" in out, out


def test_asked_for_devices_it_sets_them_at_the_start(tmp_path):
    tests = """
        import os

        def test_four_cpu_devices():
            assert "--xla_force_host_platform_device_count=4" in os.environ["XLA_FLAGS"]
            import jax
            assert len(jax.devices("cpu")) == 4
    """
    code, out = run_user_session(tmp_path, tests, "--jm-cpu-devices", "4")
    assert code == 0, out
    assert "1 passed" in out, out
    (tmp_path / "pytest.ini").write_text("[pytest]\njm_cpu_devices = 4\n")
    code, out = run_user_session(tmp_path, tests)
    assert code == 0, out
    assert "1 passed" in out, out


def test_its_mesh_fixture_sets_eight_devices_when_first_used(tmp_path):
    code, out = run_user_session(tmp_path, """
        import os

        def test_before():
            assert "XLA_FLAGS" not in os.environ

        def test_mesh(jm_mesh):
            assert jm_mesh.devices.size == 8
            assert "--xla_force_host_platform_device_count=8" in os.environ["XLA_FLAGS"]
    """)
    assert code == 0, out
    assert "2 passed" in out, out


def _require_entry_point():
    if not any(ep.value == "pytest_jax_mscclpp" for ep in importlib.metadata.entry_points(group="pytest11")):
        pytest.skip("the pytest11 entry point is not installed (reinstall jax-mscclpp)")


def test_a_session_that_uses_nothing_of_it_imports_nothing_of_it(tmp_path):
    """The plugin as installed (its entry point) in a session of someone else's tests that uses none of its
    fixtures: nothing of jax_mscclpp (nor JAX) is imported, and a JAX_MSCCLPP_* value the package refuses fails
    nothing. Its options and markers are there all the same."""
    _require_entry_point()
    (tmp_path / "test_theirs.py").write_text(textwrap.dedent("""
        import sys

        def test_nothing_of_jax_mscclpp_is_imported(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("jax_mscclpp")
            assert not [m for m in sys.modules if m.startswith("jax_mscclpp") or m in ("jax", "jaxlib")]

        def test_its_option_is_there(pytestconfig):
            assert pytestconfig.getoption("jm_cpu_devices") is None
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_MSCCLPP_TUNING_FILE")}
    env["JAX_MSCCLPP_TIMEOUT_S"] = "not-a-number"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers", "-W", "error",
         "-W", EDITABLE_FINDER_WARNING, "--rootdir", str(tmp_path), str(tmp_path / "test_theirs.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "2 passed" in out, out


def test_a_refused_setting_fails_only_the_tests_that_use_it(tmp_path):
    code, out = run_user_session(tmp_path, """
        def test_unrelated():
            pass

        def test_mesh(jm_mesh):
            pass
    """, env={"JAX_MSCCLPP_TIMEOUT_S": "not-a-number"})
    assert code == 1, out
    assert re.search(r"1 passed.* 1 error", out) and "ValueError: jax_mscclpp: JAX_MSCCLPP_TIMEOUT_S" in out, out


def test_a_users_session_gets_no_warning_from_it(tmp_path):
    """The plugin as installed (its entry point) in a session of someone else's tests: every warning an error,
    unknown markers an error, and the session passes."""
    _require_entry_point()
    (tmp_path / "test_theirs.py").write_text(textwrap.dedent("""
        import pytest

        def test_arithmetic():
            assert 1 + 1 == 2

        def test_the_plugin_is_loaded_with_its_markers(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("jax_mscclpp")
            markers = pytestconfig.getini("markers")
            assert any(m.startswith("gpu:") for m in markers) and any(m.startswith("multigpu(n):") for m in markers)

        @pytest.mark.gpu
        def test_marked_for_a_gpu():
            pass
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_MSCCLPP_TUNING_FILE")}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rw", "-p", "no:cacheprovider", "--strict-markers", "-W", "error",
         "-W", EDITABLE_FINDER_WARNING, "--rootdir", str(tmp_path), str(tmp_path / "test_theirs.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "2 passed" in out and "warning" not in out.lower(), out
