"""The lifecycle of jax_mscclpp's libnccl.so.2 communicators on one GPU, in processes sharing GPU 0 (our runtime's
alone): ncclCommAbort of a communicator whose kernel waits for a rank that never comes returns within a second, the
kernel gives up (no trap: the abort is made visible to the device from the host) and a new communicator then works;
ncclCommDestroy with a peer gone returns within seconds; ncclCommDestroy right after launching all-reduces on two
streams that a peer joins seconds later (longer than the destroy's barrier waits) completes them first (both
streams done when it returns): every output is right and both contexts go on; a non-blocking init reports
ncclInProgress, then success; an init that fails on one rank (out of GPU memory) fails every rank's at once,
naming that rank; a killed rank is shrunk away by the survivors alone (NCCL_SHRINK_ABORT ending an all-reduce it
never joined); one thread inits two ranks inside a group, and splits and shrinks three inside groups; under the
library's default policy (JAX_MSCCLPP_NCCL_ON_TIMEOUT=wait, nccl/runtime/timeout_policy.h) an abort ends a stuck
kernel alike, and a peer late by more than the timeout is waited for: the all-reduce completes right, one warning
names the late wait, ncclCommGetAsyncError stays ncclSuccess. The worker: tests/gpu/_nccl_lifecycle_worker.py
(ctypes and cupy).

Kernels trap on failure here (the default): an abort that let a wait time out would kill the process's context.
"""

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from tests.gpu.processes import launch_processes

WORKER = Path(__file__).with_name("_nccl_lifecycle_worker.py")

pytestmark = pytest.mark.gpu

if importlib.util.find_spec("cupy") is None:
    pytest.skip("the lifecycle worker needs cupy for device buffers and streams", allow_module_level=True)


def run(scenario: str, nproc: int, tmp_path, timeout_s: str = "60", on_timeout: str | None = None,
        with_outputs: bool = False, allow_killed: int | None = None):
    """Every process's report, in rank order (and their outputs, stdout and stderr merged, with `with_outputs`).
    JAX_MSCCLPP_TIMEOUT_S is `timeout_s`, which alone makes the library's waits fail past it; `on_timeout` sets
    JAX_MSCCLPP_NCCL_ON_TIMEOUT. Process `allow_killed` may end killed by SIGKILL (its last report, if any, kept)."""
    from jax_mscclpp import nccl_backend

    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", JAX_MSCCLPP_TIMEOUT_S=timeout_s)
    for name in ("JAX_MSCCLPP_NVLS", "JAX_MSCCLPP_NCCL", "JAX_MSCCLPP_NCCL_RUNTIME", "JAX_MSCCLPP_TRAP_ON_FAILURE",
                 "JAX_MSCCLPP_NCCL_ON_TIMEOUT"):
        env.pop(name, None)
    if on_timeout is not None:
        env["JAX_MSCCLPP_NCCL_ON_TIMEOUT"] = on_timeout
    outputs = launch_processes(WORKER, nproc, [nccl_backend.library_path(), str(tmp_path), scenario], env, 240,
                               f"the lifecycle scenario {scenario}")
    reports = []
    for index, (code, out) in enumerate(outputs):
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        killed = index == allow_killed and code == -9
        assert (code == 0 or killed) and lines, f"exit status {code}, output:\n{out[-6000:]}"
        reports.append(json.loads(lines[-1][len("RESULT "):]))
    return (reports, [out for _, out in outputs]) if with_outputs else reports


@pytest.mark.parametrize("on_timeout", [None, "wait"])
def test_abort_of_a_stuck_kernel_returns_within_a_second_and_a_new_communicator_works(gpus, tmp_path, on_timeout):
    reports = run("abort_stuck", 2, tmp_path, on_timeout=on_timeout)
    stuck = reports[0]
    assert stuck["init"] == 0 and stuck["backend"].startswith("jax_mscclpp's runtime"), stuck
    assert stuck["launch"] == 0 and stuck["stuck_before_abort"], "the all-reduce should wait for rank 1"
    assert stuck["abort"] == 0 and stuck["abort_s"] < 1.0, stuck
    assert stuck["stream_end_s"] < 5.0, f"the aborted kernel did not give up: {stuck}"
    for r in reports:
        assert r["abort"] == 0 and r["abort_s"] < 1.0, r
        assert r["init_again"] == 0 and r["all_reduce_again"] == [0, True], r
        assert r["destroy_again"] == 0


def test_destroy_with_a_peer_gone_returns_within_seconds(gpus, tmp_path):
    reports = run("destroy_peer_gone", 2, tmp_path)
    assert all(r["all_reduce"] == [0, True] for r in reports), reports
    assert reports[0]["destroy"] == 0 and reports[0]["destroy_s"] < 5.0, reports[0]


def test_destroy_completes_all_reduces_on_two_streams_a_late_peer_joins(gpus, tmp_path):
    from tests.gpu._nccl_lifecycle_worker import LATE_PEER_S

    reports = run("destroy_in_flight", 2, tmp_path)
    for r in reports:
        assert r["init"] == 0 and r["backend"].startswith("jax_mscclpp's runtime"), r
        assert r["launch"] == [0, 0] and r["destroy"] == 0, r
        assert r["stream_done_at_destroy"] == [True, True], f"an all-reduce still ran when the destroy returned: {r}"
        assert r["all_reduce_ok"] == [True, True] and r["nan_outputs"] == 0, f"rank {r['rank']}'s outputs: {r}"
        assert r["context_usable"], r
        assert r["init_again"] == 0 and r["all_reduce_again"] == [0, True] and r["destroy_again"] == 0, r
    early = reports[0]
    assert early["destroy_s"] > 0.75 * LATE_PEER_S, f"rank 0's destroy returned before rank 1 joined: {early}"


def test_destroy_waits_past_the_timeout_under_the_wait_policy(gpus, tmp_path):
    """As NCCL's destroy, ours completes the operations in flight however late the peer (JAX_MSCCLPP_TIMEOUT_S=3,
    rank 1 LATE_S later, the library's wait policy): right outputs, no NaN, the destroy held until the peer came,
    and one warning names the late wait."""
    from tests.gpu._nccl_lifecycle_worker import LATE_S

    reports, outputs = run("destroy_past_timeout", 2, tmp_path, timeout_s="3", on_timeout="wait", with_outputs=True)
    for r in reports:
        assert r["launch"] == [0, 0] and r["destroy"] == 0, r
        assert r["all_reduce_ok"] == [True, True] and r["nan_outputs"] == 0, f"rank {r['rank']}'s outputs: {r}"
        assert r["init_again"] == 0 and r["all_reduce_again"] == [0, True] and r["destroy_again"] == 0, r
    assert reports[0]["destroy_s"] > 0.75 * LATE_S, reports[0]
    warnings = [line for line in outputs[0].splitlines() if "libnccl.so.2: warning:" in line]
    assert len(warnings) == 1 and "rank 0 has waited" in warnings[0], outputs[0][-4000:]


def test_a_late_peer_is_waited_for_and_reported_once(gpus, tmp_path):
    """The library's wait policy with a 3 s timeout (JAX_MSCCLPP_NCCL_ON_TIMEOUT=wait, JAX_MSCCLPP_TIMEOUT_S=3): rank 1
    joins an all-reduce LATE_S later. Rank 0's kernel waits past the timeout without failing (no trap, no record),
    its all-reduce completes right, one warning line names rank 0, peer 1, the wait and the seconds waited, printed
    by ncclCommGetAsyncError while the wait went on, which answered ncclSuccess throughout; both processes go on."""
    timeout_s = 3.0  # below the worker's LATE_S
    reports, outputs = run("late_peer", 2, tmp_path, timeout_s=str(timeout_s), on_timeout="wait", with_outputs=True)
    for r, out in zip(reports, outputs):
        assert r["init"] == 0 and r["backend"].startswith("jax_mscclpp's runtime"), r
        assert r["launch"] == 0 and r["all_reduce_ok"] and r["nan_outputs"] == 0, (r, out[-4000:])
        assert r["async_errors"] == [[0, 0]] and r["async_error_after"] == [0, 0], r
        assert r["all_reduce_again"] == [0, True] and r["destroy"] == 0, r
        assert "timed out" not in out, out[-4000:]  # no failure record: a trap would have failed the process
    early = reports[0]
    assert early["stream_s"] > timeout_s + 1.0, f"rank 0 did not wait past the timeout: {early}"
    warnings = [line for line in outputs[0].splitlines() if "libnccl.so.2: warning:" in line]
    assert len(warnings) == 1, outputs[0][-4000:]
    (warning,) = warnings
    assert "rank 0 has waited" in warning and "for peer 1 in " in warning, warning
    assert "keeps waiting, as NVIDIA's NCCL does" in warning and "ncclCommAbort" in warning, warning
    waited = float(re.search(r"has waited ([0-9.]+) s", warning).group(1))
    assert timeout_s <= waited < timeout_s + 2.0, warning
    assert outputs[0].index(warning) < outputs[0].index("STREAM DONE"), "reported only after the wait ended"
    assert not [line for line in outputs[1].splitlines() if "libnccl.so.2: warning:" in line], outputs[1][-4000:]


def test_a_setup_that_fails_on_a_rank_fails_every_rank_naming_it(gpus, tmp_path):
    """The GPU has room for one rank's setup only: a rank whose allocation fails fails its init with the CUDA error,
    and a rank whose own setup went through fails too, at once rather than at the timeout (60 s) and never holding a
    communicator whose peer has none, with ncclRemoteError naming the failed rank and its reason; once the GPU is
    emptied, both make a new communicator that works."""
    reports = run("setup_out_of_memory", 2, tmp_path)
    out_of_memory = [r["rank"] for r in reports if r["init"] != 0 and "out of memory" in r["error"]]
    assert out_of_memory, reports
    for r in reports:
        assert r["init"] != 0, f"rank {r['rank']} kept a communicator whose peer's setup failed: {r}"
        assert r["init_s"] < 20, f"rank {r['rank']} failed after {r['init_s']:.1f} s: {r}"
        if r["rank"] not in out_of_memory:
            assert r["init"] == 6, r  # ncclRemoteError
            assert f"rank {out_of_memory[0]} of 2 failed:" in r["error"] and "out of memory" in r["error"], r
        assert r["init_again"] == 0 and r["all_reduce_again"] == [0, True] and r["destroy_again"] == 0, r


@pytest.mark.parametrize("scenario,dead", [("shrink_idle", 1), ("shrink_mid_call", 0)])
def test_a_killed_rank_is_shrunk_away_by_the_survivors(gpus, tmp_path, scenario, dead):
    """NCCL's shrink: the excluded rank (killed) never calls. The survivors meet without it, also where it made the
    id (its process held the parent's root) and where they were stuck in an all-reduce it never joined
    (NCCL_SHRINK_ABORT ends that first); the child has the survivors in order and its all-reduce is right."""
    reports = run(scenario, 3, tmp_path, allow_killed=dead)
    survivors = [r for r in reports if r is not None and r["rank"] != dead]
    assert [r["rank"] for r in survivors] == [q for q in range(3) if q != dead], reports
    for new_rank, r in enumerate(survivors):
        assert r["init"] == 0 and r["all_reduce"] == [0, True], r
        if scenario == "shrink_mid_call":
            assert r["stuck_launch"] == 0 and r["stuck"], f"the all-reduce should wait for the dead rank: {r}"
        assert r["shrink"] == 0, r["shrink_error"]
        assert r["shrink_s"] < 30, r
        assert r["child"] == [new_rank, 2], r
        assert r["child_all_reduce"] == [0, True] and r["child_destroy"] == 0 and r["parent_abort"] == 0, r


def test_splits_and_shrinks_in_a_group_from_one_thread(gpus, tmp_path):
    """NCCL makes a group's splits and shrinks at its end: one thread driving three ranks splits them (keys reversing
    the order) and shrinks them (the survivors' leader called last) inside groups; each child is null until the end,
    then ranked as asked, and its all-reduce is right."""
    (r,) = run("group_children", 1, tmp_path)
    assert r["inits"] == [0, 0, 0] and r["inits_end"] == 0 and r["all_reduce"] == [[0] * 4, [True] * 3], r
    assert r["splits"] == [0, 0, 0] and r["splits_null_in_group"] == [True] * 3, r
    assert r["splits_end"] == 0, r["splits_error"]
    assert r["split_ranks"] == [2, 1, 0], r
    assert r["split_all_reduce"] == [[0] * 4, [True] * 3], r
    assert r["shrinks"] == [0, 0] and r["shrinks_end"] == 0, r["shrinks_error"]
    assert r["shrink_all_reduce"] == [[0] * 3, [True] * 2], r
    assert r["destroys"] == [0] * 8, r


@pytest.mark.parametrize("nproc", [2, 3])
def test_non_blocking_init(gpus, tmp_path, nproc):
    for r in run("nonblocking", nproc, tmp_path):
        assert r["init"] == 7, "a non-blocking init returns ncclInProgress"
        assert r["states"][-1] == 0 and set(r["states"]) <= {0, 7}, r["states"]
        assert r["all_reduce"] == [0, True] and r["destroy"] == 0


def test_inits_in_a_group_from_one_thread(gpus, tmp_path):
    (r,) = run("group_inits", 1, tmp_path)
    assert r["start"] == 0 and r["inits"] == [0, 0]
    assert r["end"] == 0, r["end_error"]
    assert r["all_reduce"] == [[0, 0, 0], [True, True]], r
    assert r["destroys"] == [0, 0]
