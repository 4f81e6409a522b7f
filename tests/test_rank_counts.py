"""Communicators of 1, 3, 5, 12 and 16 ranks on CPU devices, for every algorithm that claims them (the built-in
ones, auto, 2PH over two axes and the DSL library's plans), against lax. 16 CPU devices need their own process:
JAX fixes the device count when it starts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _rank_counts_worker as worker

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ, JAX_PLATFORMS="cpu", NCCL_NVLS_ENABLE="0",
               XLA_FLAGS="--xla_force_host_platform_device_count=16")
    env.pop("JAX_MSCCLPP_NVLS", None)
    proc = subprocess.run([sys.executable, "-m", "tests._rank_counts_worker"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {(r["ranks"], r["op"], r["algorithm"]): r for r in lines}


@pytest.mark.parametrize("ranks,op,algorithm", worker.cases(), ids=[f"{n}-{op}-{a}" for n, op, a in worker.cases()])
def test_rank_count(results, ranks, op, algorithm):
    record = results.get((ranks, op, algorithm))
    assert record is not None, "the case did not run"
    assert record["ok"], record
