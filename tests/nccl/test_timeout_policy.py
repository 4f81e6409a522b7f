"""What the library's GPU waits do past the timeout (nccl/runtime/timeout_policy.h), without a GPU: the policy its
ranks take from the environment (wait by default, as NVIDIA's NCCL waits for a late peer; fail where the user set
JAX_MSCCLPP_TIMEOUT_S, or as JAX_MSCCLPP_NCCL_ON_TIMEOUT says), the words of TimeoutPolicy that the host writes and
the kernels read (one enum in error_record.cuh; the JAX path's RankOptions keep kFail), the one warning line of a late
wait, and the package's check of the setting. What needs a GPU: tests/gpu/test_nccl_lifecycle.py
(test_a_late_peer_is_waited_for_and_reported_once)."""

import pytest

from jax_mscclpp import settings

ON_TIMEOUT, TIMEOUT = "JAX_MSCCLPP_NCCL_ON_TIMEOUT", "JAX_MSCCLPP_TIMEOUT_S"
K_PACKET_READ = 4  # WaitOp::kPacketRead (error_record.cuh)


@pytest.mark.parametrize("environment,policy", [
    ({}, "wait"),
    ({TIMEOUT: "20"}, "fail"),
    ({ON_TIMEOUT: "wait", TIMEOUT: "3"}, "wait"),
    ({ON_TIMEOUT: "fail"}, "fail"),
    ({ON_TIMEOUT: "wait"}, "wait"),
    ({ON_TIMEOUT: "", TIMEOUT: ""}, "wait"),  # empty: unset
])
def test_the_library_policy_follows_the_environment(harness, monkeypatch, environment, policy):
    for name in (ON_TIMEOUT, TIMEOUT):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    fail, wait, _ = harness.timeout_policies()
    assert harness.nccl_timeout_policy() == (policy, wait if policy == "wait" else fail)


def test_a_policy_not_understood_is_the_default_with_a_line(harness, monkeypatch, capfd):
    monkeypatch.delenv(TIMEOUT, raising=False)
    monkeypatch.setenv(ON_TIMEOUT, "soon")
    assert harness.nccl_timeout_policy()[0] == "wait"
    monkeypatch.setenv(TIMEOUT, "5")
    assert harness.nccl_timeout_policy()[0] == "fail"
    assert 'ignoring JAX_MSCCLPP_NCCL_ON_TIMEOUT="soon" (wait or fail)' in capfd.readouterr().err


def test_policy_words_and_the_jax_path_default(harness):
    """kFail is 0, so a zeroed RuntimeConfig fails on timeout; RankOptions, as the JAX path builds them, keep it."""
    fail, wait, rank_options_default = harness.timeout_policies()
    assert (fail, wait) == (0, 1)
    assert rank_options_default == fail


def test_the_late_warning_names_rank_peer_wait_and_seconds(harness):
    line = harness.late_wait_warning(rank=0, peer=1, op=K_PACKET_READ, epoch=5, observed=0, waited_s=8.25,
                                     timeout_s=3.0)
    assert "\n" not in line
    assert line.startswith("jax_mscclpp libnccl.so.2: warning: rank 0 has waited 8.250 s for peer 1 in LL packet "
                           "read, past its timeout of 3 s (JAX_MSCCLPP_TIMEOUT_S)"), line
    assert "keeps waiting, as NVIDIA's NCCL does" in line and "ncclCommAbort" in line
    assert "timed out" not in line and "failed" not in line


def test_the_package_checks_the_setting(monkeypatch):
    row = settings.SETTINGS[ON_TIMEOUT]
    assert row["kind"] == "kWaitOrFail" and row["default"].startswith("wait")
    for value in ("wait", "fail", ""):
        monkeypatch.setenv(ON_TIMEOUT, value)
        settings.check_environment()
    monkeypatch.setenv(ON_TIMEOUT, "soon")
    with pytest.raises(ValueError, match="JAX_MSCCLPP_NCCL_ON_TIMEOUT='soon' is not understood; accepted: wait or fail"):
        settings.check_environment()
