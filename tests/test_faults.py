"""Faults mid-collective on the host backend (every rank a thread of this process): a skipped call and a rank
stopped mid-call end, on every other rank, in an error naming the missing peer within the wait limit; calls that
differ (op, size, collective, dtype, algorithm, a plan against a built-in) end at once, on every rank, in an error
naming both calls. Afterwards a fresh communicator works and the process exits normally."""

import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp.dsl import library
from jax_mscclpp.tools.soak import faults as fault_scenarios
from jax_mscclpp.testing import faults
from tests.helpers import P, random_array, sharded

TIMEOUT_S = 0.5
MISMATCH_LIMIT_S = 10.0
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plan_registered():
    jm.register_algorithm(library.allreduce_2pa_hb, name=fault_scenarios.PLAN_NAME, min_bytes=1 << 62)
    yield
    jm.unregister_algorithm(fault_scenarios.PLAN_NAME)


@pytest.mark.parametrize("scenario", fault_scenarios.SCENARIOS, ids=[s.name for s in fault_scenarios.SCENARIOS])
def test_scenario(cpu_devices, plan_registered, scenario, request):
    if scenario.expect == "lost peer":
        request.getfixturevalue("fault_hooks")
    # A mismatch is caught at the first exchange; its generous limit keeps a loaded 2-core machine (8 device
    # threads) from turning a slow peer into a timeout before that exchange.
    limit = MISMATCH_LIMIT_S if scenario.expect == "mismatch" else TIMEOUT_S
    record = fault_scenarios.run_scenario(scenario, list(cpu_devices[:8]), limit)
    assert record["raised"], record
    assert record["every_rank_failed"], record["rank_errors"]
    assert record["errors_name_the_fault"], record["rank_errors"]
    assert record["within_limit"], record["rank_seconds"]
    assert record["recovered"]
    if scenario.expect == "mismatch":
        assert record["max_rank_s"] < 1.0, record["rank_seconds"]  # seen at once, not by a timeout
        assert all("mismatched collective calls" in m for m in record["rank_errors"].values())
    else:
        lost = str(fault_scenarios.LOST_RANK)
        survivors = {r: m for r, m in record["rank_errors"].items() if r != lost}
        assert len(survivors) == 7 and all(f"peer {lost}" in m for m in survivors.values()), survivors


def test_an_empty_call_is_checked_too(cpu_devices, rng):
    """A rank whose message is empty still takes part once, so a peer whose message is not sees the mismatch."""
    mesh = Mesh(np.array(cpu_devices[:8])[[1, 0, 2, 3, 4, 5, 6, 7]], ("x",))
    x = random_array(rng, (8 * 6,), "float32")

    f = sharded(lambda v: lax.cond(lax.axis_index("x") == 3, lambda a: jm.psum(a[:0], "x").sum() + a * 0,
                                   lambda a: lax.pcast(jm.psum(a, "x"), "x", to="varying"), v), mesh, P("x"), P("x"))
    with faults.timeout(5.0):
        started = time.monotonic()
        with pytest.raises(Exception, match="mismatched collective calls.*of 0 float32 per block"):
            jax.block_until_ready(f(x))
        assert time.monotonic() - started < 2.5
    comm = jm.Communicator(mesh, "x")
    assert len(comm.errors()) == 8 and all("after" in e for e in comm.errors())
    comm.destroy()


def test_packets_never_match_data_left_in_scratch(cpu_devices):
    """An LL plan after built-in calls whose data, read as packets, carries the plan call's epoch as its flag: packets
    live apart from data, so the plan waits for real packets and gets the right sum. (Were they to share memory, a
    reader that comes before the writer would take the leftover data, or fail on a peer not yet in the call: a
    race, so the case runs on several fresh communicators.)"""
    mesh = Mesh(np.array(cpu_devices[:8]), ("x",))
    jm.register_algorithm(library.allreduce_1pa_ll, name="faults_1pa_ll_plan", min_bytes=1 << 62)
    epoch_3 = np.full(8 * 64, 3, np.int32)  # every 8-byte word reads as a packet with flag 3
    x = np.arange(8 * 64, dtype=np.int32)
    try:
        for _ in range(10):
            comm = jm.Communicator(mesh, "x")
            gather = sharded(lambda v: jm.all_gather(v, "x", tiled=True), mesh, P("x"), P("x"))
            jax.block_until_ready(gather(epoch_3))  # epoch 1, scratch half 1
            jax.block_until_ready(gather(epoch_3))  # epoch 2, scratch half 0
            psum = sharded(lambda v: jm.psum(v, "x", algorithm="faults_1pa_ll_plan"), mesh, P("x"), P())
            np.testing.assert_array_equal(np.asarray(psum(x)), x.reshape(8, 64).sum(axis=0))  # epoch 3, half 1
            comm.destroy()
    finally:
        jm.unregister_algorithm("faults_1pa_ll_plan")


def test_the_fault_tool_exits_normally(fault_hooks):
    env = dict(os.environ, JAX_PLATFORMS="cpu", NCCL_NVLS_ENABLE="0",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jax_mscclpp.tools.soak.faults", "--timeout", "0.3", "--scenarios",
                           "stopped_mid_call,mismatched_size"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "2 of 2 scenarios ended as they must" in proc.stdout
    assert time.monotonic() - started < 60


def test_an_injection_without_the_fault_hooks_says_where_they_are(mesh8):
    """Only the testing build has the hooks (JAX_MSCCLPP_TESTING); a module without them refuses an injection by
    saying so, and one with them takes it (0 calls skipped: nothing injected)."""
    comm = jm.Communicator(mesh8, "x")
    if faults.HOOKS_BUILT:
        faults.skip_next_calls(comm, mesh8.devices[0], 0)
    else:
        with pytest.raises(RuntimeError, match="no fault hooks; they come with the testing build"):
            faults.skip_next_calls(comm, mesh8.devices[0])
