"""The lifecycle of communicators made from our ids, without a GPU: the decision every rank takes from the identity
round (ranks on different hosts, NCCL_HOSTID telling two processes apart, or ranks our runtime cannot run, make the
communicator NVIDIA's: the stand-in real NCCL receives the init and the later calls), the agreement fields compared
there (a difference fails every rank with ncclInvalidUsage naming the rank and the setting), non-blocking inits,
inits inside a group from one thread, ncclGroupSimulateEnd, and errors reported rather than thrown. The decision
and the comparison themselves through the harness module's bindings. What needs a GPU: tests/gpu/test_nccl_lifecycle.py."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.nccl.conftest import ROOT, run_worker

NCCL_SUCCESS, NCCL_CUDA_ERROR, NCCL_SYSTEM_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE = 0, 1, 2, 4, 5
NCCL_IN_PROGRESS = 7


def cuda_built() -> bool:
    from jax_mscclpp import info

    return bool(info()["cuda_built"])


def gpu_visible() -> bool:
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*"))


@pytest.fixture(scope="module", autouse=True)
def runtime_without_gpu():
    if not cuda_built() or gpu_visible():
        pytest.skip("needs the CUDA parts built (our ids) and no GPU (ranks our runtime cannot run)")


def run_ranks(our_library, real_nccl, tmp_path, per_rank_env, scenario="lifecycle_rank"):
    """`scenario` in one process per entry of `per_rank_env` (rank r gets RANK=r and its dict), meeting through our
    id, which rank 0 writes into a file; their JSON results in rank order."""
    import json

    base = dict(os.environ, JAX_PLATFORMS="cpu", JAX_MSCCLPP_NCCL_RUNTIME="1", OUR_NCCL=our_library,
                ID_FILE=str(tmp_path / "id"), NRANKS=str(len(per_rank_env)), JAX_MSCCLPP_TIMEOUT_S="30",
                NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    for name in ("JAX_MSCCLPP_NCCL", "JAX_MSCCLPP_REAL_NCCL", "NCCL_HOSTID"):
        base.pop(name, None)
    if real_nccl is not None:
        base["JAX_MSCCLPP_REAL_NCCL"] = real_nccl
    procs = [subprocess.Popen([sys.executable, "-m", "tests.nccl._worker", scenario], cwd=ROOT,
                              env=dict(base, RANK=str(r), **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r, extra in enumerate(per_rank_env)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_ranks_on_different_hosts_make_the_communicator_nvidias(our_library, stand_in, tmp_path):
    results = run_ranks(our_library, stand_in, tmp_path, [{"NCCL_HOSTID": "host-a"}, {"NCCL_HOSTID": "host-b"}])
    for rank, r in enumerate(results):
        assert r["init"] == NCCL_SUCCESS, r["init_error"]
        assert r["is_ours"] == 1
        assert r["backend"].startswith("NVIDIA's NCCL: ranks 0 and 1 are on different hosts"), r["backend"]
        calls = r["calls"]
        # Rank 0 made the real id; every rank inited the real communicator with it, and the call went there.
        assert ("ncclGetUniqueId" in calls) == (rank == 0)
        assert "ncclCommInitRank" in calls
        assert calls.index("ncclCommInitRank") < calls.index("ncclAllReduce(count=33,datatype=7,op=0)")
        assert r["allreduce"] == NCCL_SUCCESS and r["destroy"] == NCCL_SUCCESS
        assert "ncclCommDestroy" in calls


def test_ranks_our_runtime_cannot_run_make_it_nvidias(our_library, stand_in, tmp_path):
    results = run_ranks(our_library, stand_in, tmp_path, [{"NCCL_HOSTID": "one"}, {"NCCL_HOSTID": "one"}])
    for r in results:
        assert r["init"] == NCCL_SUCCESS, r["init_error"]
        assert r["backend"].startswith("NVIDIA's NCCL: rank 0: no GPU for jax_mscclpp's runtime (CUDA: "), r["backend"]
        assert "ncclAllReduce(count=33,datatype=7,op=0)" in r["calls"]


def test_nvidias_path_without_a_real_library_is_an_error_naming_it(our_library, tmp_path):
    results = run_ranks(our_library, "/nonexistent/libnccl.so.2", tmp_path,
                        [{"NCCL_HOSTID": "host-a"}, {"NCCL_HOSTID": "host-b"}])
    for r in results:
        assert r["init"] == NCCL_SYSTEM_ERROR
        assert "NVIDIA's NCCL must run this communicator (ranks 0 and 1 are on different hosts" in r["init_error"]
        assert "cannot open the real NCCL named by JAX_MSCCLPP_REAL_NCCL: /nonexistent/libnccl.so.2" in r["init_error"]


@pytest.mark.parametrize("setting,values", [
    ("JAX_MSCCLPP_SCRATCH_BYTES", ("1048576", "2097152")),
    ("JAX_MSCCLPP_TRAP_ON_FAILURE", ("1", "0")),
    ("JAX_MSCCLPP_STREAM_SLOTS", ("2", "4")),
], ids=["scratch", "trap", "stream-slots"])
def test_a_setting_that_differs_fails_every_rank_naming_rank_and_setting(our_library, stand_in, tmp_path, setting,
                                                                          values):
    results = run_ranks(our_library, stand_in, tmp_path,
                        [{"NCCL_HOSTID": "h", setting: values[0]}, {"NCCL_HOSTID": "h", setting: values[1]}])
    expected = f"rank 1 has {setting}={values[1]}, rank 0 has {setting}={values[0]}"
    for r in results:
        assert r["init"] == NCCL_INVALID_USAGE
        assert expected in r["init_error"], r["init_error"]
        assert r["calls"] == [""], "a disagreement must fail before any real communicator is made"


def test_non_blocking_init(our_library, stand_in, tmp_path):
    results = run_ranks(our_library, stand_in, tmp_path,
                        [{"NCCL_HOSTID": "a", "NONBLOCKING": "1"}, {"NCCL_HOSTID": "b", "NONBLOCKING": "1"}])
    for r in results:
        assert r["init"] == NCCL_IN_PROGRESS, "a non-blocking config's init returns at once"
        # The states ncclCommGetAsyncError went through (each change once): in progress until the init is done, then
        # success. The init may finish before the first poll, so the first may be success already.
        assert r["async_states"] in ([NCCL_IN_PROGRESS, NCCL_SUCCESS], [NCCL_SUCCESS]), r["async_states"]
        assert "ncclCommInitRankConfig(version=23007,blocking=0,splitShare=0)" in r["calls"]
        assert r["allreduce"] == NCCL_SUCCESS and r["destroy"] == NCCL_SUCCESS


def test_inits_in_a_group_from_one_thread(our_library, stand_in):
    r = run_worker("group_inits", stand_in,
                   extra_env={"OUR_NCCL": our_library, "JAX_MSCCLPP_NCCL_RUNTIME": "1", "NRANKS": "3"})
    assert r["inits"] == [NCCL_SUCCESS] * 3
    assert r["state_in_group"] == NCCL_IN_PROGRESS, "the init waits for the group's end"
    assert r["end"] == NCCL_SUCCESS, r["end_error"]
    assert r["states"] == [NCCL_SUCCESS] * 3
    assert r["calls"].count("ncclCommInitRank") == 3 and r["destroys"] == [NCCL_SUCCESS] * 3
    assert "ncclGroupEnd" not in r["calls"], "the real library never saw the group's start"


def test_a_failed_group_init_is_reported_by_the_group_end(our_library):
    r = run_worker("group_inits", None, extra_env={"OUR_NCCL": our_library, "JAX_MSCCLPP_NCCL_RUNTIME": "1",
                                                   "NRANKS": "2"})
    assert r["end"] == NCCL_SYSTEM_ERROR
    assert "NVIDIA's NCCL must run this communicator" in r["end_error"]
    assert r["states"] == [NCCL_SYSTEM_ERROR] * 2
    assert r["destroys"] == [NCCL_SUCCESS] * 2


def test_simulated_group_runs_nothing(our_library):
    r = run_worker("simulate_end", None, extra_env={"OUR_NCCL": our_library, "JAX_MSCCLPP_NCCL_RUNTIME": "1"})
    assert r["start"] == NCCL_SUCCESS and r["depth_in"] == 1
    assert r["simulate"] == NCCL_SUCCESS and r["depth_after"] == 0
    assert r["estimate"] == 0.0, "an empty group costs nothing"
    assert r["next_group"] == [NCCL_SUCCESS, NCCL_SUCCESS]
    assert r["async_error"] == [NCCL_SUCCESS, NCCL_INVALID_USAGE], "the simulated group's init is never made"
    assert "ncclGroupSimulateEnd" in r["last_error"]
    assert r["destroy"] == NCCL_SUCCESS
    assert r["simulate_null"] == NCCL_INVALID_ARGUMENT


def test_buffers_report_instead_of_throwing(our_library):
    r = run_worker("buffers_without_gpu", None, extra_env={"OUR_NCCL": our_library, "JAX_MSCCLPP_NCCL_RUNTIME": "1"})
    assert r["alloc"] == NCCL_CUDA_ERROR and r["alloc_error"].startswith("jax_mscclpp libnccl.so.2: ncclMemAlloc: ")
    assert r["free_foreign"] == NCCL_SYSTEM_ERROR, "a pointer we did not allocate is the real library's"
    assert r["peer_pointer"] == NCCL_SYSTEM_ERROR, "a window that is not ours is the real library's"


# ---- the decision and the agreement, through the harness module's bindings ----

FIELDS = [("library version", "0.1.0"), ("JAX_MSCCLPP_SCRATCH_BYTES", "67108864"), ("channels per peer", "8")]
UUID_A, UUID_B = b"A" * 16, b"B" * 16


def test_agreement_names_the_first_differing_rank_and_field(harness):
    assert harness.agreement_difference([FIELDS, FIELDS, FIELDS]) == ""
    other = [FIELDS[0], ("JAX_MSCCLPP_SCRATCH_BYTES", "1048576"), ("channels per peer", "4")]
    text = harness.agreement_difference([FIELDS, FIELDS, other])
    assert text.startswith("rank 2 has JAX_MSCCLPP_SCRATCH_BYTES=1048576, rank 0 has JAX_MSCCLPP_SCRATCH_BYTES=67108864")
    assert "rank 1 has no channels per peer" in harness.agreement_difference([FIELDS, FIELDS[:2]])


def test_backend_decision(harness):
    same_host = [("h", 1, UUID_A, "", "", FIELDS), ("h", 2, UUID_B, "", "", FIELDS)]
    agreed, _, ours, reason, shares, processes, real_refusal = harness.choose_backend(same_host)
    assert agreed and ours and not shares and processes == 2 and reason == "one host" and real_refusal == ""
    shared = [("h", 1, UUID_A, "", "", FIELDS), ("h", 2, UUID_A, "", "no library", FIELDS)]
    _, _, ours, _, shares, _, real_refusal = harness.choose_backend(shared)
    assert ours and shares and real_refusal == "rank 1: no library"
    hosts = [("h", 1, UUID_A, "", "", FIELDS), ("h", 2, UUID_B, "", "", FIELDS), ("g", 1, UUID_A, "", "", FIELDS)]
    _, _, ours, reason, _, processes, _ = harness.choose_backend(hosts)
    assert not ours and reason.startswith("ranks 0 and 2 are on different hosts") and processes == 3
    refused = [("h", 1, UUID_A, "", "", FIELDS), ("h", 2, b"", "no GPU", "", FIELDS)]
    assert harness.choose_backend(refused)[3] == "rank 1: no GPU"
    differ = [("h", 1, UUID_A, "", "", FIELDS), ("g", 2, UUID_B, "", "", FIELDS[:1] + [("channels per peer", "8")])]
    agreed, text, *_ = harness.choose_backend(differ)
    assert not agreed and text.startswith("rank 1 has no JAX_MSCCLPP_SCRATCH_BYTES, rank 0 has")


PROCESS_IDENTITY = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.harness import native_module; "
                    "import os; print(os.getpid(), native_module().this_process_identity())")


def test_process_identity_tells_processes_apart(harness):
    """Equal in every call of one process, different in another; two processes with the same pid in two PID
    namespaces (containers on one host) differ too, where this machine lets a process make one."""
    mine = harness.this_process_identity()
    assert mine == harness.this_process_identity() and mine >= 0
    other = subprocess.run([sys.executable, "-c", PROCESS_IDENTITY, str(ROOT)], capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert int(other[1]) != mine
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here to make a PID namespace")
    in_namespaces = [subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", PROCESS_IDENTITY, str(ROOT)],
                                    capture_output=True, text=True, timeout=120) for _ in range(2)]
    if any(p.returncode != 0 for p in in_namespaces):
        pytest.skip("this machine lets no process make a PID namespace (unshare --pid)")
    (pid_a, id_a), (pid_b, id_b) = (p.stdout.split() for p in in_namespaces)
    assert pid_a == pid_b == "1" and id_a != id_b


def test_identity_frames_are_checked(harness):
    with pytest.raises(RuntimeError, match="rank 3 sent no identity"):
        harness.decode_identity(b"\x01\x02", 3)
    os.environ["NCCL_HOSTID"] = "fake-host"
    try:
        assert harness.this_host_identity() == "fake-host"
    finally:
        del os.environ["NCCL_HOSTID"]
