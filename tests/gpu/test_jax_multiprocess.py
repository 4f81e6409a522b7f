"""The JAX path end to end on GPUs: 2 and 4 processes sharing GPU 0 through jax.distributed, each holding one
device of a mesh that spans them; every algorithm forced, against numpy; DSL plans registered as algorithms, on
the GPU executor; command buffers on and off; a lost peer. Slow (contexts time-slice on one GPU): correctness,
not speed."""

import os
from pathlib import Path

import pytest

from tests.gpu.processes import launch_processes

WORKER = Path(__file__).with_name("_jax_worker.py")

pytestmark = pytest.mark.gpu


def launch(nproc: int, scenario: str, extra_env: dict | None = None, timeout: int = 400, gpus: int = 1):
    env = dict(os.environ, JAX_PLATFORMS="cuda", NCCL_NVLS_ENABLE="0", XLA_PYTHON_CLIENT_PREALLOCATE="false",
               JAX_MSCCLPP_TEST_GPUS=str(gpus))
    # Only what a test asks for: a stop mode or timeout left in this process's environment would change what the
    # workers' failing kernels do.
    for name in ("JAX_MSCCLPP_NVLS", "XLA_FLAGS", "JAX_MSCCLPP_TRAP_ON_FAILURE", "JAX_MSCCLPP_TIMEOUT_S"):
        env.pop(name, None)
    env.update(extra_env or {})
    return launch_processes(WORKER, nproc, [scenario], env, timeout, scenario)


@pytest.mark.parametrize("nproc,command_buffers,scenario", [
    (2, "default", "collectives"), (4, "default", "collectives"), (2, "off", "quick"), (4, "off", "quick"),
    (2, "default", "plans"), (4, "off", "plans")])
def test_collectives_across_processes(gpus, nproc, command_buffers, scenario):
    extra = {} if command_buffers == "default" else {"XLA_FLAGS": "--xla_gpu_enable_command_buffer="}
    for code, out in launch(nproc, scenario, extra, gpus=min(nproc, gpus)):
        assert code == 0, out[-6000:]
        assert "MISMATCH" not in out
        assert "0 failures" in out


@pytest.mark.parametrize("nproc,map_cumem", [(2, "1"), (4, "1"), (2, "0")])
def test_calls_run_in_place_on_xla_buffers_between_processes(gpus, nproc, map_cumem):
    """Large calls of every collective run in place on XLA's buffers, each process's allocations mapped by the others
    (XLA's allocator's cuMem memory through file descriptors: JAX_MSCCLPP_MAP_CUMEM=1), and agree with numpy (random
    data, odd sizes, repeated calls on reused buffers); without it they copy through scratch, with no agreement per
    call, and agree with numpy all the same."""
    for code, out in launch(nproc, "in_place", {"JAX_MSCCLPP_MAP_CUMEM": map_cumem}, gpus=min(nproc, gpus)):
        assert code == 0, out[-6000:]
        assert "MISMATCH" not in out, out[-6000:]
        assert "0 failures" in out


def test_calls_copy_through_scratch_where_a_process_buffers_cannot_be_mapped(gpus):
    """One process keeps XLA's buffers in cudaMallocAsync's pool, which CUDA IPC does not export: the processes
    agree, call by call, to copy through scratch, and the results are right."""
    for code, out in launch(2, "in_place_mixed", {"JAX_MSCCLPP_MAP_CUMEM": "1"}, gpus=min(2, gpus)):
        assert code == 0, out[-6000:]
        assert "MISMATCH" not in out, out[-6000:]
        assert "0 failures" in out


def test_large_world(gpus):
    """A communicator of 10 ranks, past the 8 members of an emulated SwitchChannel (and few enough processes for
    their CUDA contexts to fit one GPU): set up by every process, every algorithm but 2PA-NVLS runs, 2PA-NVLS is an
    error."""
    results = launch(10, "large_world", {"XLA_FLAGS": "--xla_gpu_enable_command_buffer="}, timeout=420,
                     gpus=min(10, gpus))
    for code, out in results:
        assert code == 0, out[-6000:]
        assert "MISMATCH" not in out
        assert "0 failures" in out


def test_recovery_after_mismatched_calls(gpus):
    """Failing kernels stop rather than trap (JAX_MSCCLPP_TRAP_ON_FAILURE=0): both processes go on past mismatched
    calls, whose outputs are poisoned; the failed program's next call is refused with the record; a program lowered
    afterwards is right."""
    for code, out in launch(2, "recover", {"JAX_MSCCLPP_TRAP_ON_FAILURE": "0", "JAX_MSCCLPP_TIMEOUT_S": "10",
                                           "XLA_FLAGS": "--xla_gpu_shard_autotuning=false"}, timeout=200):
        assert code == 0, out[-6000:]
        assert "the mismatched call returned, all NaN" in out and "mismatched collective calls" in out, out[-3000:]
        assert "the second call was refused" in out
        assert "a program lowered afterwards: ok" in out


def test_a_setup_that_fails_on_one_process_fails_every_process_naming_it(gpus):
    """The last process cannot allocate its scratch: every process's setup fails within seconds (not at the
    timeout), naming that process, and a communicator made again works on all of them."""
    for code, out in launch(2, "setup_fails", {"JAX_MSCCLPP_TIMEOUT_S": "120"}, timeout=300):
        assert code == 0, out[-6000:]
        assert "setup failed after" in out and "NOT NAMED" not in out, out[-3000:]
        assert "psum after the failed setup: ok" in out, out[-3000:]


def test_a_peer_lost_where_calls_run_in_place_is_named(gpus):
    """Where the calls would run in place between the processes, the others find the lost peer on the host (it never
    maps their buffers or reaches the call): the call fails within the timeout, naming it, and nothing hangs."""
    results = launch(2, "lost_peer_in_place", {"JAX_MSCCLPP_TIMEOUT_S": "3", "JAX_MSCCLPP_MAP_CUMEM": "1"},
                     timeout=200)
    code, out = results[0]
    assert code == 0, out[-6000:]
    assert "error raised" in out
    assert "rank 1 did not" in out and "rank 0" in out, out[-3000:]


def test_lost_peer_is_reported(gpus):
    results = launch(2, "lost_peer", {"JAX_MSCCLPP_TIMEOUT_S": "3"}, timeout=200)
    code, out = results[0]
    assert code == 0, out[-6000:]
    assert "error raised" in out
    assert "rank 0" in out and "peer 1" in out, out[-3000:]
