"""The plan fixed-cost tool without a GPU (bench/kernels/plan_fixed_cost.py): each variant is the lowered plan cut as
its name says, on the same channels, and the executor's plan check accepts every one."""

import importlib.util
from pathlib import Path

import pytest

from jax_mscclpp.dsl import library
from tests.harness.plan_ranks import plan_spec
from tests.harness.virtual_ranks import ALGORITHM_CODES, native_cuda

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tool(monkeypatch):
    # The tool sets the environment of bench/kernels/_environment.py when loaded; monkeypatch puts it back after.
    for name in ("NCCL_NVLS_ENABLE", "JAX_MSCCLPP_NVLS", "JAX_PLATFORMS", "CUDA_DEVICE_MAX_CONNECTIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "kernels"))
    spec = importlib.util.spec_from_file_location("plan_fixed_cost", ROOT / "bench" / "kernels" / "plan_fixed_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_variant_cuts_the_plan_as_it_says(tool):
    cuda = native_cuda()
    for _protocol, program, kernel, n, _sizes in tool.CASES:
        assert kernel in ALGORITHM_CODES
        plan = library.PROGRAMS[program](n).lower(instances=2)
        for variant, (make, threads) in tool.VARIANTS.items():
            cut = make(plan)
            counts = [len(tb["ops"]) for rank in cut["ranks"] for tb in rank["threadblocks"]]
            expected = {"no_operations": [0] * len(counts), "first_operation": [1] * len(counts)}
            if variant in expected:
                assert counts == expected[variant]
            else:
                assert cut is plan
            assert [rank["channels"] for rank in cut["ranks"]] == [rank["channels"] for rank in plan["ranks"]]
            assert threads in (0, 256)
            if cuda is not None:
                assert plan_spec(cuda, cut).world_size == n
