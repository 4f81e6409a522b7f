"""Bounded waits: a peer that never answers gives a timeout error naming rank, peer, op and epoch, not a hang.

A trap poisons the CUDA context, so each case runs in its own process.
"""

import subprocess
import sys
import textwrap
import time

import pytest

from .gpu_helpers import child_env

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.harness.virtual_ranks import VirtualRanks, VirtualRanksError
    from tests.harness import synchronize_or_exit
    mode, timeout = int(sys.argv[1]), float(sys.argv[2])
    vr = VirtualRanks(2, timeout_s=timeout or None, port_channels=(mode == 2), channels_per_peer=1)
    print("rank timeout", vr.ranks[0].timeout_seconds)
    vr.launch("wait_forever", ranks=[0], mode=mode, peer=1)   # rank 1 never runs
    synchronize_or_exit(lambda: vr.synchronize([0]), VirtualRanksError)
    print("NO ERROR")
    """
)

OPS = {0: "semaphore wait", 1: "LL packet read", 2: "proxy semaphore wait", 3: "relaxed semaphore wait"}


def run_case(mode, timeout, **env):
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(mode), str(timeout)],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("mode", sorted(OPS), ids=[OPS[m] for m in sorted(OPS)])
def test_missing_peer_times_out_with_a_record(cuda, mode):
    proc, elapsed = run_case(mode, 0.5)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ERROR:" in out and "NO ERROR" not in out, out
    assert "rank 0 timed out" in out and "peer 1" in out and OPS[mode] in out, out
    assert "waited for 1" in out, out  # the first epoch / expected value
    assert elapsed < 60, elapsed


def test_timeout_comes_from_the_environment(cuda):
    proc, _ = run_case(0, 0, JAX_MSCCLPP_TIMEOUT_S="0.3")
    out = proc.stdout + proc.stderr
    assert "rank timeout 0.3" in out, out
    assert "limit 0.300 s" in out, out
