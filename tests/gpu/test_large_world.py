"""A world of 16 ranks on one GPU, past the 8 members an emulated SwitchChannel holds. Every virtual rank is the
JAX path's own rank (a GpuRank, whose channel tables GpuRank::finalize builds, as for a communicator of 16 GPUs),
so this is that setup: the hand-written collectives and library plans against numpy on random data, and
2PA-NVLS refused with a clear error (the world has no SwitchChannel), after which the ranks still work."""

import numpy as np
import pytest

from .collective_helpers import (
    POISON,
    REDUCING,
    check_outputs,
    download_outputs,
    in_blocks,
    out_blocks,
    random_array,
    upload_inputs,
)
from .gpu_helpers import OUTPUT, VirtualRanks, numpy_dtype
from .test_executor import check, lower, random_input

pytestmark = pytest.mark.gpu

N = 16
CPP = 4  # channels per peer: HB grids have at most this many blocks, so 16 ranks' blocks stay resident
BUFFER, SCRATCH = 4 << 20, 16 << 20
COMBOS = [("all_reduce", a) for a in ("1pa_ll", "2pa_ll", "2pa_hb", "2pr")] + [
    (c, a) for c in ("all_gather", "reduce_scatter", "all_to_all") for a in ("allpairs", "allpairs_ll", "allpairs_hb")
]
COUNTS = [1, 1023, 2 * 4096 + 5]


@pytest.fixture(scope="module")
def ranks16(cuda):
    with VirtualRanks(N, buffer_bytes=BUFFER, scratch_bytes=SCRATCH, channels_per_peer=CPP, port_channels=True,
                      timeout_s=60) as vr:
        yield vr


def run_collective(vr, rng, collective, algorithm, dtype, op, count):
    data = [random_array(rng, dtype, in_blocks(collective, N) * count) for _ in range(N)]
    upload_inputs(vr, data)
    for r in range(N):
        vr.fill(r, OUTPUT, POISON)
    vr.collective(collective, algorithm, dtype=dtype, reduce_op=op, count=count)
    outs = download_outputs(vr, out_blocks(collective, N) * count * numpy_dtype(dtype).itemsize, dtype)
    check_outputs(collective, algorithm, data, outs, count, dtype, op,
                  what=f"{collective}/{algorithm} n={N} {dtype} {op} count={count}")


@pytest.mark.parametrize("combo", COMBOS, ids=[f"{c}-{a}" for c, a in COMBOS])
def test_collectives(ranks16, rng, combo):
    collective, algorithm = combo
    cases = ([("float32", "sum"), ("bfloat16", "max"), ("int32", "sum"), ("float16", "min")]
             if collective in REDUCING else [("float32", "sum"), ("uint8", "sum")])
    for dtype, op in cases:
        for count in COUNTS:
            run_collective(ranks16, rng, collective, algorithm, dtype, op, count)


def test_no_switch_channel_and_2pa_nvls_is_refused(ranks16, rng, cuda):
    from tests.harness.virtual_ranks import ALGORITHM_CODES, COLLECTIVE_CODES, DTYPE_CODES

    assert cuda.collective_launch_count(COLLECTIVE_CODES["all_reduce"], ALGORITHM_CODES["2pa_nvls"], 1000,
                                        DTYPE_CODES["float32"], N, SCRATCH) == 0
    before = [ranks16.epoch(r) for r in range(N)]
    with pytest.raises(ValueError, match="lacks"):
        ranks16.launch("collective", ranks=[0], collective="all_reduce", algorithm="2pa_nvls", dtype="float32",
                       count=1000)
    with pytest.raises(ValueError, match="lacks"):  # the emulated switch all-reduce of the primitive tests
        ranks16.launch("switch_all_reduce", ranks=[0], count=1024, dtype="float32", reduce_op="sum")
    assert [ranks16.epoch(r) for r in range(N)] == before  # nothing ran
    run_collective(ranks16, rng, "all_reduce", "2pa_hb", "float32", "sum", 1023)


@pytest.mark.parametrize("name", ["allreduce_1pa_ll", "allreduce_2pa_hb", "allreduce_2pr", "allgather_allpairs",
                                  "reducescatter_allpairs"])
def test_plans(cuda, rng, name):
    from tests.harness.plan_ranks import PlanRanks

    with PlanRanks(lower(name, N), max_block_count=COUNTS[-1], itemsize=4, timeout_s=60) as pr:
        for dtype, op in [("float32", "sum"), ("bfloat16", "max"), ("int32", "min")]:
            for size in COUNTS:
                inputs = [random_input(rng, dtype, pr.input_blocks * size) for _ in range(N)]
                outputs = pr.run(inputs, op)
                check(pr.plan, inputs, outputs, op, dtype, pieces=pr.launch_count(size, dtype) > 1)


def test_a_plan_with_switch_channels_is_refused(cuda, rng):
    from tests.harness.plan_ranks import PlanRanks

    with PlanRanks(lower("allreduce_2pa_nvls", N), max_block_count=1024, itemsize=4, timeout_s=60) as pr:
        with pytest.raises(ValueError, match="lacks"):
            pr.launch(1024, np.float32, "sum", ranks=[0])
        assert pr.epoch(0) == 0
