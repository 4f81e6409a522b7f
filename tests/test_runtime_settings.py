"""The timeout every wait is bounded by: one process-wide setting that the host backend reads at every call and
the GPU ranks copy (runtime/common/runtime_settings.h), starting from JAX_MSCCLPP_TIMEOUT_S."""

import os
import subprocess
import sys

import pytest

import jax_mscclpp as jm
from jax_mscclpp._native import native
from jax_mscclpp.testing import faults


def start_with(value):
    env = {k: v for k, v in os.environ.items() if k != "JAX_MSCCLPP_TIMEOUT_S"}
    if value is not None:
        env["JAX_MSCCLPP_TIMEOUT_S"] = value
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run([sys.executable, "-c", "import jax_mscclpp as jm; print('timeout', jm.info()['timeout_s'])"],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value,expected", [(None, 300.0), ("2.5", 2.5), ("0.25", 0.25)])
def test_starts_from_the_environment(value, expected):
    out = start_with(value)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"timeout {expected}" in out.stdout
    assert "ignoring" not in out.stderr


@pytest.mark.parametrize("value", ["abc", "-1", "0", "5s", "inf"])
def test_a_bad_value_is_an_error_at_import(value):
    out = start_with(value)
    assert out.returncode != 0
    assert f"ValueError: jax_mscclpp: JAX_MSCCLPP_TIMEOUT_S={value!r} is not understood; accepted: a positive number" in out.stderr, out.stderr[-3000:]


def test_set_at_run_time_and_restored():
    before = jm.info()["timeout_s"]
    with faults.timeout(7.0):
        assert jm.info()["timeout_s"] == 7.0 == native.timeout_seconds()
    assert jm.info()["timeout_s"] == before


@pytest.mark.parametrize("seconds", [0.0, -3.0, float("inf"), float("nan")])
def test_set_refuses_what_is_not_a_positive_number(seconds):
    before = native.timeout_seconds()
    with pytest.raises(ValueError, match="positive number of seconds"):
        native.set_timeout_seconds(seconds)
    assert native.timeout_seconds() == before
