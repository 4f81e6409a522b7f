"""Call checks on the GPU (kernels/include/jax_mscclpp/call_check.cuh): ranks in different calls fail with a record
naming both calls, instead of returning a wrong answer or timing out on one rank only.

A trap poisons the CUDA context, so each mismatched case runs in its own process; the matched sequence runs here.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, child_env

pytestmark = pytest.mark.gpu

# argv: timeout, then per rank "collective:algorithm:dtype:op:count".
SCRIPT = textwrap.dedent(
    """
    import os, sys
    from tests.harness.virtual_ranks import VirtualRanks, VirtualRanksError
    from tests.harness import synchronize_or_exit
    timeout, calls = float(sys.argv[1]), [c.split(":") for c in sys.argv[2:]]
    vr = VirtualRanks(len(calls), timeout_s=timeout, port_channels=True, channels_per_peer=2)
    # Every kernel instance runs once on every rank first: CUDA loads a kernel lazily at its first launch and the
    # load waits for the device to go idle, which it never does while another rank's kernel spins on this GPU.
    for collective, algorithm, dtype, op, count in calls:
        vr.collective(collective, algorithm, dtype=dtype, reduce_op=op, count=int(count))
    for r, (collective, algorithm, dtype, op, count) in enumerate(calls):
        vr.launch("collective", ranks=[r], collective=collective, algorithm=algorithm, dtype=dtype, reduce_op=op,
                  count=int(count))
    synchronize_or_exit(lambda: vr.synchronize(), VirtualRanksError)
    print("NO ERROR")
    """
)


def run_ranks(calls, timeout=5.0):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(timeout), *calls], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ERROR:" in out and "NO ERROR" not in out, out
    return out


# (rank 0's call, rank 1's call, what rank 0's description and the peer's must contain)
MISMATCHES = {
    # One protocol, another reduction: before the check both ranks returned different answers without an error.
    "op": ("all_reduce:1pa_ll:float32:sum:1000", "all_reduce:1pa_ll:float32:max:1000",
           "all_reduce(sum) of 1000 float32", "all_reduce(max) of 1000 float32"),
    "dtype": ("all_reduce:2pa_ll:int32:sum:512", "all_reduce:2pa_ll:uint32:sum:512",
              "of 512 int32", "of 512 uint32"),
    "size": ("all_reduce:2pa_hb:bfloat16:sum:65536", "all_reduce:2pa_hb:bfloat16:sum:65528",
             "of 65536 bfloat16", "of 65528 bfloat16"),
    "collective": ("all_gather:allpairs:float32:sum:256", "all_to_all:allpairs:float32:sum:128",
                   "all_gather of 256 float32", "all_to_all of 128 float32"),
    "algorithm": ("all_reduce:2pr:float32:sum:4096", "all_reduce:2pa_hb:float32:sum:4096",
                  "algorithm 2pr", "algorithm 2pa_hb"),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatched_calls_name_both(cuda, case):
    mine, theirs, says_mine, says_theirs = MISMATCHES[case]
    out = run_ranks([mine, theirs])
    assert "mismatched collective calls" in out, out
    assert says_mine in out and says_theirs in out, out


def test_matched_calls_of_every_kind_pass(cuda, rng):
    """A sequence that changes collective, algorithm, dtype, op and size every call, matched on every rank: no
    record, and the last result is right (the check must never fire on matched calls, whatever came before)."""
    sequence = [("all_reduce", "1pa_ll", "float32", "sum", 1000), ("all_reduce", "1pa_ll", "float32", "max", 1000),
                ("all_gather", "allpairs", "int32", "sum", 77), ("all_reduce", "2pa_hb", "bfloat16", "sum", 65536),
                ("all_to_all", "allpairs", "uint8", "sum", 4097), ("reduce_scatter", "allpairs", "float16", "min", 33),
                ("all_reduce", "2pr", "float32", "sum", 4096), ("all_reduce", "2pa_ll", "int64", "sum", 5)]
    with VirtualRanks(3, port_channels=True, channels_per_peer=2, timeout_s=15) as vr:
        for _ in range(3):
            for collective, algorithm, dtype, op, count in sequence:
                vr.collective(collective, algorithm, dtype=dtype, reduce_op=op, count=count)
        data = [rng.standard_normal(1000).astype(np.float32) for _ in range(3)]
        for r in range(3):
            vr.upload(r, INPUT, data[r])
            vr.fill(r, OUTPUT, 0xFF)
        vr.collective("all_reduce", "1pa_ll", dtype="float32", reduce_op="max", count=1000)
        want = np.maximum(np.maximum(data[0], data[1]), data[2])
        for r in range(3):
            np.testing.assert_array_equal(vr.download(r, OUTPUT, 4000, dtype="float32"), want)
