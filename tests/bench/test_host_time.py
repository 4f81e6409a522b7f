"""The host-time tool's plan without a GPU (bench/kernels/host_time.py): every JAX cell asks the call entry for the
algorithm the selection gives ranks sharing a GPU where lax cannot run, one the harness launches; a call the
selection leaves to lax is planned as skipped, with why."""

import importlib.util
from pathlib import Path

import pytest

from jax_mscclpp import selection
from jax_mscclpp._codes import Collective
from tests.harness.virtual_ranks import ALGORITHM_CODES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tool(monkeypatch):
    # The tool sets the NVLS environment when loaded; monkeypatch puts it back after the test.
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.delenv("JAX_MSCCLPP_NVLS", raising=False)
    spec = importlib.util.spec_from_file_location("host_time_tool", ROOT / "bench" / "kernels" / "host_time.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_jax_cells_ask_for_our_algorithm_where_lax_cannot_run(tool):
    ranks, sizes = [2, 4, 8], [1 << 10, 1 << 20]
    plan = tool.jax_plan(ranks, sizes, list(tool.COLLECTIVES))
    assert [(c["ranks"], c["collective"], c["bytes"]) for c in plan] == [
        (n, collective, size) for n in ranks for collective in tool.COLLECTIVES for size in sizes]
    for cell in plan:
        assert "skipped" not in cell, cell
        assert cell["algorithm"] in ALGORITHM_CODES, cell
        assert cell["algorithm"] == selection._ours_where_lax_cannot_run(
            Collective[cell["collective"].upper()], "gpu", cell["bytes"], cell["ranks"])


@pytest.mark.parametrize("answer", ["lax", "not_a_kernel_algorithm"])
def test_a_call_without_a_kernel_algorithm_is_skipped_with_why(tool, monkeypatch, answer):
    monkeypatch.setattr(selection, "_ours_where_lax_cannot_run", lambda *a: answer)
    (cell,) = tool.jax_plan([2], [1 << 10], ["all_reduce"])
    assert "algorithm" not in cell and cell["skipped"]
    assert cell["path"] == "jax" and (cell["ranks"], cell["collective"], cell["bytes"]) == (2, "all_reduce", 1 << 10)
