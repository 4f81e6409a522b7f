"""The traffic record between processes without a GPU (bench/kernels/traffic_between_processes.py): its least
traffic is every input byte read once and every output byte written once over all ranks, its inputs are exact in
bfloat16 whatever the sum, and a command line naming something it does not run is refused."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "kernels" / "traffic_between_processes.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("traffic_between_processes", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [2, 4, 8])
def test_minimum_bytes(tool, n):
    size = 16 << 20
    assert tool.minimum_bytes("all_reduce", size, n) == 2 * n * size
    assert tool.minimum_bytes("all_gather", size, n) == (n + 1) * size == tool.minimum_bytes("reduce_scatter", size, n)


def test_rank_values_are_exact_in_bfloat16_and_differ(tool):
    import ml_dtypes

    count = 10_007
    values = [tool.rank_values(r, count, np) for r in range(8)]
    assert all(np.count_nonzero(v) > count // 2 for v in values)
    assert all(not np.array_equal(values[0], v) for v in values[1:])
    total = np.zeros(count, np.float32)
    for v in values:  # every partial sum, in any rank order's prefix, is an integer bfloat16 holds
        total += v
        assert np.array_equal(total.astype(ml_dtypes.bfloat16).astype(np.float32), total)
        assert np.array_equal(v.astype(ml_dtypes.bfloat16).astype(np.float32), v)


@pytest.mark.parametrize("option,value", [("--collectives", "all_to_all"), ("--paths", "torch")])
def test_refuses_what_it_does_not_run(option, value):
    proc = subprocess.run([sys.executable, str(TOOL), option, value], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and value in proc.stderr, proc.stderr
