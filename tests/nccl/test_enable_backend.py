"""enable_nccl_backend(): loads our libnccl.so.2 before JAX's backends start, so that dlopen("libnccl.so.2") finds
it; refuses, with a clear error, after them or beside another NCCL; JAX_MSCCLPP_NCCL=1 does it at interpreter
start. Each case runs in its own process."""

import pytest

from tests.nccl.conftest import run_worker


def test_enable_after_devices_raises(stand_in):
    r = run_worker("enable_after_devices", stand_in)
    assert r["raised"] is not None
    assert "before JAX starts its backends" in r["raised"] and "JAX_MSCCLPP_NCCL=1" in r["raised"]
    assert r["active"] is False


def test_enable_beside_another_nccl_raises(stand_in):
    r = run_worker("enable_beside_other_nccl", stand_in)
    assert r["raised"] is not None
    assert "another NCCL is already loaded" in r["raised"] and stand_in in r["raised"]


def test_enable_before_devices(stand_in, our_library):
    r = run_worker("enable_before_devices", stand_in)
    assert r["before"] is False
    assert r["devices"] >= 1
    assert r["soname_is_ours"], "dlopen('libnccl.so.2') did not answer with our library"
    assert r["version"] == 22809
    assert r["real_opened_before_devices"] == stand_in
    assert r["version_reached_the_loaded_stand_in"]
    status = r["status"]
    assert status["active"] is True and status["library"] == our_library
    assert status["real_nccl"] == stand_in and status["real_nccl_opened"] == stand_in


def test_enable_without_a_real_nccl_raises():
    r = run_worker("enable_without_real_nccl", "/nonexistent/libnccl.so.2")
    assert r["raised"] is not None
    assert "no real NCCL to forward to" in r["raised"]
    assert "cannot open the real NCCL named by JAX_MSCCLPP_REAL_NCCL: /nonexistent/libnccl.so.2" in r["raised"]


def test_environment_variable_enables_at_interpreter_start(stand_in, our_library):
    r = run_worker("startup_variable", stand_in, extra_env={"JAX_MSCCLPP_NCCL": "1"})
    if our_library not in r["mapped"]:
        pytest.fail(f"JAX_MSCCLPP_NCCL=1 did not load our library at start (mapped: {r['mapped']}); is "
                    "jax_mscclpp_nccl.pth installed in site-packages?")
    assert r["status"]["active"] is True


def test_without_the_variable_nothing_is_loaded_or_imported(stand_in):
    r = run_worker("startup_without_variable", stand_in)
    assert r["jax_imported_at_start"] is False
    assert r["mapped"] == []
