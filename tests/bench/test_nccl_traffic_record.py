"""The NCCL traffic record without a GPU (bench/kernels/nccl_traffic_record.py): a cell's buffers are NCCL's for
each collective, and its least traffic is every input byte read once and every output byte written once."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool():
    path = ROOT / "bench" / "kernels" / "nccl_traffic_record.py"
    spec = importlib.util.spec_from_file_location("nccl_traffic_record", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [2, 4, 8])
def test_buffers_and_least_traffic(tool, n):
    size = 16 << 20
    assert tool.buffer_sizes("all_reduce", size, n) == (size, size, size // 4)
    assert tool.buffer_sizes("all_gather", size, n) == (size // n, size, size // n // 4)
    assert tool.buffer_sizes("reduce_scatter", size, n) == (size, size // n, size // n // 4)
    assert tool.minimum_bytes("all_reduce", size, n) == 2 * n * size
    assert tool.minimum_bytes("all_gather", size, n) == (n + 1) * size
    assert tool.minimum_bytes("reduce_scatter", size, n) == (n + 1) * size


def test_sizes_must_split_into_float32_blocks(tool):
    with pytest.raises(SystemExit):
        tool.main(["--ranks", "8", "--sizes", "100"])
