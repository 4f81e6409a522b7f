"""The ragged record without a GPU (bench/kernels/ragged_record.py): its layouts are lax's semantics (every row sent
once, contiguous runs in destination order, each receiver's rows in sender order) and the DRAM bytes are read per
profiled range from Nsight Compute's CSV, both metrics summed, in range order."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("ragged_record", ROOT / "bench" / "kernels" / "ragged_record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n,rows", [(2, 16), (4, 1000), (8, 4096)])
def test_layout_sends_every_row_once(tool, n, rows):
    sizes, in_off, out_off = tool.layout(n, rows, seed=n)
    assert (sizes >= 0).all() and (sizes.sum(axis=1) == rows).all()
    for i in range(n):  # rank i's runs tile its operand in destination order
        ends = in_off[i] + sizes[i]
        assert in_off[i, 0] == 0 and (in_off[i, 1:] == ends[:-1]).all() and ends[-1] == rows
    for j in range(n):  # rank j receives the senders' rows back to back, sender 0 first
        assert out_off[0, j] == 0 and (out_off[1:, j] == (out_off[:, j] + sizes[:, j])[:-1]).all()


def test_sizes_parse(tool):
    assert [tool.parse_size(s) for s in ("64K", "16M", "2G", "100")] == [64 << 10, 16 << 20, 2 << 30, 100]


def test_dram_bytes_per_range_sums_both_metrics_in_order(tool):
    csv = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Process ID","Process Name","Host Name","Range Name","Metric Name","Metric Unit","Metric Value"',
        '"0","1","python3","vm","Range 0","dram__bytes_read.sum","byte","1,000"',
        '"0","1","python3","vm","Range 0","dram__bytes_write.sum","byte","24"',
        '"1","1","python3","vm","Range 1","dram__bytes_read.sum","byte","7"',
        '"1","1","python3","vm","Range 1","sm__cycles_elapsed.avg","cycle","99"',
        '"1","1","python3","vm","Range 1","dram__bytes_write.sum","byte","3"',
    ])
    assert tool.dram_bytes_per_range(csv) == [1024.0, 10.0]
    assert tool.dram_bytes_per_range("==PROF== nothing profiled") == []
