"""launch_collective (kernels/collectives) on virtual ranks: every (collective, algorithm), N = 2..8 ranks on one
GPU, against numpy. The streaming HB kernels (1PA-HB, 2PA-HB, all-pairs HB) run with 4 blocks per rank here (every
block of every virtual rank must be resident), so a small scratch cuts each block's part into many chunks; one test
runs them on the grid production gives ranks sharing a GPU. ``in_place`` is the kernel over the buffers the ranks
post (virtual ranks reach each other's buffers), which the call entry runs in place of the streaming ones.

Outputs are poisoned before every call and the bytes around them checked; results must equal the rank-order
fold bit for bit (all algorithms but 2PR, whose float sums are checked against a rounding bound) and agree across
ranks. Also: pipelining through a small scratch, 256 calls in flight back to back with changing data (epochs and
scratch halves), CUDA-graph replay (as XLA command buffers replay), and the contract's errors.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .collective_helpers import (
    BUFFER,
    COMBOS,
    POISON,
    REDUCING,
    Ranks,
    check_outputs,
    fold,
    download_outputs,
    in_blocks,
    out_blocks,
    random_array,
    ranks_by_size,
    upload_inputs,
)
from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, child_env, numpy_dtype

pytestmark = pytest.mark.gpu

NRANKS = [2, 3, 4, 5, 6, 7, 8]
COUNTS = [1, 3, 1023, 4096 * 8 + 5]
REDUCE_CASES = [
    ("float32", "sum"),
    ("bfloat16", "sum"),
    ("float16", "sum"),
    ("int32", "sum"),
    ("uint8", "sum"),
    ("float32", "max"),
    ("int8", "min"),
    ("float64", "min"),
    ("bfloat16", "max"),
    ("uint16", "min"),
    ("int64", "sum"),
    ("uint32", "max"),
]
COPY_DTYPES = ["float32", "bfloat16", "int32", "uint8", "float64"]
ALL_DTYPES = ["float32", "bfloat16", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64"]


def combo_id(c):
    return f"{c[0]}-{c[1]}"


@pytest.fixture(scope="module")
def ranks(cuda):
    yield from ranks_by_size(cuda, port_channels=True)


def run_case(rk, rng, collective, algorithm, dtype, op, count, src_off=0, dst_off=0):
    vr, n = rk.vr, rk.vr.nranks
    dt = numpy_dtype(dtype)
    data = [random_array(rng, dtype, in_blocks(collective, n) * count) for _ in range(n)]
    upload_inputs(vr, data, src_off)
    for r in range(n):
        vr.fill(r, OUTPUT, POISON)
    vr.collective(collective, algorithm, dtype=dtype, reduce_op=op, count=count, src_off=src_off, dst_off=dst_off)
    rk.epoch += rk.launches(collective, algorithm, count, dtype)
    outs = download_outputs(vr, out_blocks(collective, n) * count * dt.itemsize, dtype, dst_off)
    check_outputs(collective, algorithm, data, outs, count, dtype, op,
                  what=f"{collective}/{algorithm} n={n} {dtype} {op} count={count} off={src_off},{dst_off}")


MATRIX = [(n, c) for n in NRANKS for c in COMBOS]


@pytest.mark.parametrize("nranks,combo", MATRIX, ids=[f"{n}-{combo_id(c)}" for n, c in MATRIX])
def test_collective_matrix(ranks, rng, nranks, combo):
    collective, algorithm = combo
    rk = ranks(nranks)
    cases = REDUCE_CASES if collective in REDUCING else [(d, "sum") for d in COPY_DTYPES]
    for dtype, op in cases:
        for count in COUNTS:
            run_case(rk, rng, collective, algorithm, dtype, op, count)
    # Pointers that are element-aligned only (XLA's are 16-byte aligned; the kernels take any).
    run_case(rk, rng, collective, algorithm, "float32", "sum", 1023, src_off=4, dst_off=12)
    run_case(rk, rng, collective, algorithm, "bfloat16", "max", 4099, src_off=2, dst_off=6)
    rk.check_epochs()


@pytest.mark.parametrize("combo", [c for c in COMBOS if c[0] in REDUCING], ids=combo_id)
def test_every_dtype_and_op(ranks, rng, combo):
    collective, algorithm = combo
    rk = ranks(3)
    for dtype in ALL_DTYPES:
        for op in ("sum", "max", "min"):
            for count in (5, 1029):
                run_case(rk, rng, collective, algorithm, dtype, op, count)
    rk.check_epochs()


def streams(collective, algorithm, count, dtype, nranks):
    """Whether the call runs on the streaming HB protocol (one launch whatever the size) on ``nranks`` virtual
    ranks: ``allpairs`` as selection.def's protocol rows say for ranks sharing a GPU."""
    if algorithm == "allpairs":
        from jax_mscclpp import selection
        from jax_mscclpp._types import Collective

        algorithm = selection.protocol_of("allpairs", "gpu", count * numpy_dtype(dtype).itemsize,
                                          collective=Collective[collective.upper()], world=nranks, shares_gpu=True)
    return algorithm in ("1pa_hb", "2pa_hb", "allpairs_hb", "in_place")


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
@pytest.mark.parametrize("nranks", NRANKS)
def test_pipelined_through_small_scratch(cuda, rng, nranks, combo):
    """Messages many times the scratch: pieces (LL, ring, switch) or chunks streamed through slots (HB)."""
    collective, algorithm = combo
    count = 4096 * 8 + 5
    dtype, op = [("float32", "sum"), ("int32", "max"), ("bfloat16", "sum")][nranks % 3]
    rk = Ranks(cuda, nranks, scratch=64 << 10, buffer=BUFFER, port_channels=True)
    try:
        launches = rk.launches(collective, algorithm, count, dtype)
        if streams(collective, algorithm, count, dtype, nranks):
            assert launches == 1, launches
        else:
            assert launches >= 3, launches
        for _ in range(2):
            run_case(rk, rng, collective, algorithm, dtype, op, count)
        run_case(rk, rng, collective, algorithm, dtype, op, 77)
        rk.check_epochs()
    finally:
        rk.vr.close()


IN_FLIGHT = [(n, c) for n in (3, 8) for c in COMBOS]


@pytest.mark.parametrize("nranks,combo", IN_FLIGHT, ids=[f"{n}-{combo_id(c)}" for n, c in IN_FLIGHT])
def test_many_calls_in_flight(ranks, rng, nranks, combo):
    """256 calls with different data queued on every rank's stream before any is awaited: ranks drift apart by
    whole launches, so a call whose scratch half or flags were reused too early would read stale data."""
    collective, algorithm = combo
    calls, count, dtype, op = 256, 301, "float32", "sum"
    rk = ranks(nranks)
    vr, n = rk.vr, nranks
    esize = numpy_dtype(dtype).itemsize
    ib, ob = in_blocks(collective, n) * count * esize, out_blocks(collective, n) * count * esize
    assert calls * max(ib, ob) <= BUFFER
    data = [[random_array(rng, dtype, in_blocks(collective, n) * count) for _ in range(n)] for _ in range(calls)]
    for r in range(n):
        vr.upload(r, INPUT, np.concatenate([data[k][r] for k in range(calls)]))
        vr.fill(r, OUTPUT, POISON)
    for k in range(calls):
        order = range(n) if k % 2 == 0 else reversed(range(n))
        for r in order:
            vr.launch("collective", ranks=[r], collective=collective, algorithm=algorithm, dtype=dtype, reduce_op=op,
                      count=count, src_off=k * ib, dst_off=k * ob)
    vr.synchronize()
    rk.epoch += calls * rk.launches(collective, algorithm, count, dtype)
    rk.check_epochs()
    raw = [vr.download(r, OUTPUT, calls * ob) for r in range(n)]
    for k in range(calls):
        outs = [raw[r][k * ob : (k + 1) * ob].copy().view(numpy_dtype(dtype)) for r in range(n)]
        check_outputs(collective, algorithm, data[k], outs, count, dtype, op, what=f"call {k}")


STREAMING = [c for c in COMBOS if streams(c[0], c[1], 1 << 20, "float32", 2)]


@pytest.mark.parametrize("slots,chunk", [(1, 16), (3, 48), (8, 1 << 20)])
@pytest.mark.parametrize("combo", STREAMING, ids=combo_id)
def test_stream_settings_reach_the_kernels(cuda, rng, combo, slots, chunk):
    """The streaming kernels' slots and largest chunk come from the ranks' options (the process's
    JAX_MSCCLPP_STREAM_* settings, here the harness's): one 16-byte slot, odd chunk counts, a chunk past the slots'
    room; every result still exact."""
    collective, algorithm = combo
    rk = Ranks(cuda, 3, scratch=256 << 10, stream_slots=slots, stream_chunk=chunk)
    try:
        for count in (4096 * 3 + 5, 77):
            run_case(rk, rng, collective, algorithm, "float32", "sum", count)
        rk.check_epochs()
    finally:
        rk.vr.close()


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_streaming_with_the_production_grid(cuda, rng, nranks):
    """The streaming kernels on the grid production gives ranks sharing a GPU (every block of every rank resident):
    parts of one chunk (one hop) with most blocks empty, parts of one chunk on every block, parts of many chunks
    (a small largest chunk, slots reused within a launch), and 40 calls back to back with changing data (no
    credits carried between launches); every result exact, every epoch counted."""
    blocks = cuda.production_stream_blocks(nranks)
    one = cuda.production_stream_blocks(1)  # a rank alone on its GPU: the setting, at most the multiprocessors
    assert 1 <= one <= cuda.stream_settings()[0] and blocks == max(1, one // nranks)
    for chunk in (0, 1024):  # the setting's (one chunk a part), or 8 chunks a part of the largest count
        rk = Ranks(cuda, nranks, scratch=16 << 20, stream_blocks=blocks, stream_chunk=chunk)
        try:
            for collective, algorithm in STREAMING:
                for count in (5, 1029, blocks * 2048 + 13):
                    run_case(rk, rng, collective, algorithm, "float32", "sum", count)
                run_case(rk, rng, collective, algorithm, "bfloat16", "max", 4099, src_off=2, dst_off=6)
            for _ in range(40):
                run_case(rk, rng, "all_reduce", "2pa_hb", "float32", "sum", 3000)
            rk.check_epochs()
        finally:
            rk.vr.close()


def test_ranks_with_other_stream_settings_do_not_connect(cuda):
    from tests.harness.virtual_ranks import make_rank

    a = make_rank(cuda.HarnessRank, 0, 2, stream_slots=2)
    b = make_rank(cuda.HarnessRank, 1, 2, stream_slots=3)
    try:
        with pytest.raises(ValueError, match="rank 1 streams with other settings than rank 0"):
            a.connect(1, b.endpoint())
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_graph_replay(cuda, rng, combo):
    """One pipelined call captured into a CUDA graph per rank and replayed: the epoch advances in device memory
    only, as under XLA command buffers."""
    collective, algorithm = combo
    n, count, dtype, op, replays = 4, 6000, "float32", "max", 70
    rk = Ranks(cuda, n, scratch=64 << 10, buffer=BUFFER, port_channels=True)
    try:
        vr = rk.vr
        launches = rk.launches(collective, algorithm, count, dtype)
        assert launches >= (1 if streams(collective, algorithm, count, dtype, n) else 2)
        data = [random_array(rng, dtype, in_blocks(collective, n) * count) for _ in range(n)]
        upload_inputs(vr, data)
        for r in range(n):
            vr.fill(r, OUTPUT, POISON)
        vr.replay_graph("collective", replays, collective=collective, algorithm=algorithm, dtype=dtype, reduce_op=op,
                        count=count)
        rk.epoch = replays * launches
        rk.check_epochs()
        outs = download_outputs(vr, out_blocks(collective, n) * count * 4, dtype)
        check_outputs(collective, algorithm, data, outs, count, dtype, op, what="graph replay")
    finally:
        rk.vr.close()


def test_world_of_one_is_a_copy(cuda, rng):
    rk = Ranks(cuda, 1, scratch=1 << 20, buffer=1 << 20, port_channels=True)
    try:
        for collective, algorithm in COMBOS:
            run_case(rk, rng, collective, algorithm, "float32", "sum", 1000)
        rk.check_epochs()  # no kernel ran
    finally:
        rk.vr.close()


def test_supported_table_and_launch_counts(cuda_build):
    from tests.harness.virtual_ranks import ALGORITHM_CODES as A, COLLECTIVE_CODES as C, DTYPE_CODES as D

    sup = cuda_build.collective_supported
    for a in ("1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "2pr", "2pa_nvls"):
        assert all(sup(C["all_reduce"], A[a], code, o) for code in D.values() for o in range(3))
        assert not sup(C["all_gather"], A[a], D["float32"], 0)
    for c in ("all_gather", "reduce_scatter", "all_to_all"):
        for a in ("allpairs", "allpairs_ll", "allpairs_hb"):
            assert all(sup(C[c], A[a], code, 0) for code in D.values())
        assert not sup(C[c], A["2pa_hb"], D["float32"], 0)
    assert not sup(C["all_reduce"], A["allpairs"], D["float32"], 0)
    assert not sup(C["all_reduce"], A["2pa_ll"], 12, 0)  # unknown dtype code
    assert not sup(C["all_reduce"], A["2pa_ll"], D["float32"], 3)  # unknown op
    assert sup(C["all_gather"], A["allpairs"], D["float32"], 3)  # the op does not matter there
    count = cuda_build.collective_launch_count
    assert count(C["all_reduce"], A["2pa_hb"], 0, D["float32"], 8, 1 << 20) == 0
    assert count(C["all_reduce"], A["2pa_hb"], 1000, D["float32"], 1, 1 << 20) == 0
    assert count(C["all_reduce"], A["2pa_hb"], 1, D["float32"], 8, 1 << 20) == 1  # reduce-scatter + all-gather
    assert count(C["all_reduce"], A["1pa_hb"], 1 << 24, D["float32"], 8, 1 << 20) == 1  # any size: one launch
    assert count(C["all_reduce"], A["2pa_hb"], 1, D["float32"], 8, 256) == 0  # no room for one slot
    assert count(C["all_reduce"], A["2pa_nvls"], 1, D["float32"], 9, 1 << 20) == 0  # emulation: 8 members at most
    # The launch count is a function of the sizes: twice the bytes, (about) twice the launches.
    one = count(C["all_reduce"], A["2pr"], 1 << 20, D["float32"], 8, 1 << 20)
    assert one >= 2 and count(C["all_reduce"], A["2pr"], 2 << 20, D["float32"], 8, 1 << 20) in (2 * one - 1, 2 * one)


def test_the_placement_chooses_the_protocol(cuda_build):
    """The size-chosen all-pairs call of 512 KiB blocks on 2 ranks streams (one launch) where the ranks share a GPU
    and runs LL pieces through a 1 MiB scratch (several launches) where each has its own, as the protocol rows say;
    the forced protocols do not depend on the placement."""
    from jax_mscclpp import selection
    from jax_mscclpp._types import Collective
    from tests.harness.virtual_ranks import ALGORITHM_CODES as A, COLLECTIVE_CODES as C, DTYPE_CODES as D

    count, block = 1 << 17, 1 << 19  # float32 elements, bytes of one block
    for shares_gpu, launches in ((True, lambda n: n == 1), (False, lambda n: n >= 2)):
        assert selection.protocol_of("allpairs", "gpu", block, collective=Collective.ALL_GATHER, world=2,
                                     shares_gpu=shares_gpu) == ("allpairs_hb" if shares_gpu else "allpairs_ll")
        got = cuda_build.collective_launch_count(C["all_gather"], A["allpairs"], count, D["float32"], 2, 1 << 20,
                                                 shares_gpu=shares_gpu)
        assert launches(got), (shares_gpu, got)
        for forced in ("allpairs_ll", "allpairs_hb"):
            assert cuda_build.collective_launch_count(C["all_gather"], A[forced], count, D["float32"], 2, 1 << 20,
                                                      shares_gpu=shares_gpu) == \
                cuda_build.collective_launch_count(C["all_gather"], A[forced], count, D["float32"], 2, 1 << 20)


@pytest.mark.parametrize("nranks", [2, 5, 8])
def test_the_call_entry_runs_streaming_calls_in_place(cuda, rng, nranks):
    """Between ranks of one process the JAX path's call entry (GpuRank::run on XLA's buffers) runs in place every
    call whose algorithm would stream through scratch (on 2 ranks from 4 MiB a rank), keeps the LL sizes, and runs
    every call as asked where the ranks do not reach each other's buffers; in place and through scratch agree bit
    for bit (both fold in rank order)."""
    from jax_mscclpp import selection
    from jax_mscclpp._types import Collective
    from jax_mscclpp.selection_table import in_place_min_rank_bytes

    big, small = 300_001, 5  # float32 elements per block: streaming HB sizes, LL sizes
    two_rank_min = in_place_min_rank_bytes(2)
    direct = Ranks(cuda, nranks, buffer=BUFFER * 2, stream_blocks=8)
    scratch = Ranks(cuda, nranks, buffer=BUFFER * 2, stream_blocks=8, direct_exchange=False)
    try:
        for collective, asked in [("all_reduce", "1pa_hb"), ("all_reduce", "2pa_hb"), ("all_reduce", "1pa_ll"),
                                  ("all_gather", "allpairs"), ("reduce_scatter", "allpairs"),
                                  ("all_to_all", "allpairs"), ("all_to_all", "allpairs_hb")]:
            for count in (big, small, two_rank_min // 4 + 3):
                rank_bytes = count * 4 * (1 if collective == "all_reduce" else nranks)
                if rank_bytes > BUFFER * 2:
                    continue
                runs = asked if asked != "allpairs" else selection.protocol_of(
                    "allpairs", "gpu", count * 4, collective=Collective[collective.upper()], world=nranks,
                    shares_gpu=True)
                streams = runs in ("1pa_hb", "2pa_hb", "allpairs_hb")
                want = "in_place" if streams and rank_bytes >= in_place_min_rank_bytes(nranks) else asked
                assert direct.vr.call_algorithm(collective, asked, dtype="float32", count=count) == want
                assert scratch.vr.call_algorithm(collective, asked, dtype="float32", count=count) == asked
                data = [random_array(rng, "float32", in_blocks(collective, nranks) * count) for _ in range(nranks)]
                outs = []
                for rk, algorithm in ((direct, want), (scratch, asked)):
                    upload_inputs(rk.vr, data, 0)
                    for r in range(nranks):
                        rk.vr.fill(r, OUTPUT, POISON)
                    rk.vr.collective(collective, algorithm, dtype="float32", reduce_op="sum", count=count)
                    outs.append(download_outputs(rk.vr, out_blocks(collective, nranks) * count * 4, "float32"))
                check_outputs(collective, want, data, outs[0], count, "float32", "sum", what=f"{collective} {want}")
                assert all(a.tobytes() == b.tobytes() for a, b in zip(*outs)), (collective, asked, count)
    finally:
        direct.vr.close()
        scratch.vr.close()


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_the_kernel_records_auto_runs_in_place_where_the_call_entry_does(cuda, nranks):
    """The kernel record's ``auto`` of a virtual-rank cell (kernel_record_auto.auto_algorithm, which restates the
    call entry's in-place decision) is in place exactly where the call entry runs the selection's algorithm in
    place, at the sizes around the in-place and protocol bounds, for every collective that has a kernel in place."""
    from jax_mscclpp import selection
    from jax_mscclpp._types import Collective
    from jax_mscclpp.tools.bench.kernel_record_auto import auto_algorithm
    from jax_mscclpp.tools.bench.kernel_record_jax import layout

    direct = Ranks(cuda, nranks, buffer=BUFFER * 2, stream_blocks=8)
    try:
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            for size in (1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 19, 1 << 20, 1 << 22, BUFFER * 2):
                lay = layout(op, size, nranks, "float32")
                chosen = selection.choose(Collective[op.upper()], "gpu", lay.selection_bytes, None, nranks,
                                          shares_gpu=True)
                runs = direct.vr.call_algorithm(op, chosen, dtype="float32", count=lay.block_elems)
                assert (runs == "in_place") == (auto_algorithm(op, size, nranks, "float32") == "in_place"), (
                    op, size, runs)
    finally:
        direct.vr.close()


@pytest.mark.parametrize("collective, asked", [("all_reduce", "1pa_ll"), ("all_reduce", "2pa_hb"),
                                               ("all_gather", "allpairs"), ("reduce_scatter", "allpairs")])
def test_the_timed_call_entry_computes_the_collective(cuda, rng, collective, asked):
    """HarnessRank.time_call_entry (bench/kernels/host_time.py) runs GpuRank::run as the JAX path does: a time per
    round, and outputs that are the collective of the inputs after every round's calls."""
    nranks, count, calls, rounds = 4, 30_001, 3, 2
    rk = Ranks(cuda, nranks, buffer=BUFFER * 2, stream_blocks=8)
    try:
        data = [random_array(rng, "float32", in_blocks(collective, nranks) * count) for _ in range(nranks)]
        upload_inputs(rk.vr, data, 0)
        for r in range(nranks):
            rk.vr.fill(r, OUTPUT, POISON)
        from tests.harness.virtual_ranks import make_params

        params = make_params(cuda, "collective", collective=collective, algorithm=asked, dtype="float32",
                             reduce_op="sum", count=count)
        times = cuda.HarnessRank.time_call_entry(rk.vr.ranks, params, calls, rounds)
        assert len(times) == rounds and all(t > 0 for t in times), times
        ran = rk.vr.call_algorithm(collective, asked, dtype="float32", count=count)
        outs = download_outputs(rk.vr, out_blocks(collective, nranks) * count * 4, "float32")
        check_outputs(collective, ran, data, outs, count, "float32", "sum", what=f"{collective} {ran}")
    finally:
        rk.vr.close()


def test_missing_context_parts_are_reported(cuda, rng):
    with VirtualRanks(2, buffer_bytes=1 << 16, scratch_bytes=1 << 16, channels_per_peer=2) as vr:
        with pytest.raises(ValueError, match="lacks"):  # no port channels for the ring
            vr.launch("collective", collective="all_reduce", algorithm="2pr", dtype="float32", count=100)
        with pytest.raises(ValueError):  # all_reduce has no plain all-pairs algorithm
            vr.launch("collective", collective="all_reduce", algorithm="allpairs", dtype="float32", count=100)
        with pytest.raises(IndexError):  # past the rank's buffers
            vr.launch("collective", collective="all_gather", algorithm="allpairs", dtype="float32", count=1 << 14)


TIMEOUT_SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.harness.virtual_ranks import VirtualRanks, VirtualRanksError
    from tests.harness import synchronize_or_exit
    collective, algorithm = sys.argv[1], sys.argv[2]
    vr = VirtualRanks(3, timeout_s=0.5, channels_per_peer=2, port_channels=True)
    vr.launch("collective", ranks=[0], collective=collective, algorithm=algorithm, dtype="float32", count=4096)
    synchronize_or_exit(lambda: vr.synchronize([0]), VirtualRanksError)
    print("NO ERROR")
    """
)


STOP_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks
    collective, algorithm = sys.argv[1], sys.argv[2]
    vr = VirtualRanks(3, timeout_s=0.5, channels_per_peer=2, port_channels=True, stop_on_failure=True)
    vr.launch("collective", ranks=[0], collective=collective, algorithm=algorithm, dtype="float32", count=4096)
    vr.synchronize([0])  # the kernel stopped: no CUDA error
    print("STOPPED:", vr.ranks[0].error_message())
    vr.close()
    # The context is usable: fresh ranks run a call right.
    fresh = VirtualRanks(3, channels_per_peer=2, port_channels=True)
    data = [np.random.default_rng(r).standard_normal(777).astype(np.float32) for r in range(3)]
    for r in range(3):
        fresh.upload(r, INPUT, data[r])
    fresh.collective(collective, algorithm, dtype="float32", reduce_op="sum", count=777)
    got = fresh.download(0, OUTPUT, 777 * 4, dtype="float32")
    print("FRESH:", "ok" if np.allclose(got, sum(data), atol=1e-4) else "MISMATCH")
    """
)


@pytest.mark.parametrize("algorithm", ["2pa_ll", "2pa_hb", "2pr"])
def test_a_stopping_kernel_leaves_the_context_usable(cuda, algorithm):
    """Ranks 1 and 2 never launch; rank 0's kernel stops at its timeout rather than trapping (stop_on_failure):
    its stream completes without a CUDA error, the record names the timeout, and new ranks in the same process run
    a call right."""
    proc = subprocess.run([sys.executable, "-c", STOP_SCRIPT, "all_reduce", algorithm], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "STOPPED:" in out and "rank 0 timed out" in out, out
    assert "FRESH: ok" in out, out


@pytest.mark.parametrize("combo,what", [(("all_reduce", "2pa_ll"), "LL packet read"),
                                        (("all_reduce", "2pa_hb"), "semaphore wait"),
                                        (("all_reduce", "2pr"), "proxy semaphore wait"),
                                        (("all_reduce", "in_place"), "semaphore wait")],
                         ids=["2pa_ll", "2pa_hb", "2pr", "in_place"])
def test_absent_peers_time_out_with_a_record(cuda, combo, what):
    """Ranks 1 and 2 never launch: rank 0's kernel gives up after the timeout and names rank, peer, op, epoch."""
    proc = subprocess.run([sys.executable, "-c", TIMEOUT_SCRIPT, *combo], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ERROR:" in out and "NO ERROR" not in out, out
    assert "rank 0 timed out" in out and "peer" in out and what in out, out
    assert "waited for 1" in out, out  # the first epoch (packet flag) or the first semaphore count
    # the calls, from the call inbox: rank 0's, and that the peer it waited for made none
    assert f"rank 0 was in all_reduce(sum) of 4096 float32 per block, algorithm {combo[1]}" in out, out
    assert "has posted no call" in out, out


EPILOGUE_DTYPES = ["float32", "bfloat16", "float16"]


def epilogue_reference(xs, residual, weight, dtype, norm, eps=1e-6):
    """The unfused composition the fused kernel must match: the rank sum rounded to the dtype, the residual added
    and rounded, then RMSNorm over each row in float32 (x * rsqrt(mean(x^2) + eps) * weight), rounded."""
    dt = numpy_dtype(dtype)
    s = fold(xs, dtype, "sum")
    new_residual = (residual.astype(np.float32) + s.astype(np.float32)).astype(dt)
    if not norm:
        return new_residual, None
    rows = new_residual.astype(np.float32).reshape(-1, weight.size)
    inv = 1.0 / np.sqrt(np.mean(rows * rows, axis=1, keepdims=True) + eps)
    return new_residual, ((rows * inv) * weight.astype(np.float32)).astype(dt).reshape(-1)


@pytest.mark.parametrize("nranks", [2, 3, 8])
@pytest.mark.parametrize("norm", [False, True], ids=["residual", "rmsnorm"])
def test_fused_epilogue(cuda, rng, nranks, norm):
    """all_reduce + residual (+ RMSNorm) in one kernel against the composition: residual bit for bit, the norm
    within one rounding (its row sum is added in another order); rows of 8..4096 elements, 1..64 rows."""
    from jax_mscclpp._types import DTYPE_CODES

    shapes = [(1, 4096), (8, 4096), (64, 1024), (3, 8), (5, 2048)]
    buffer = 4 << 20
    with VirtualRanks(nranks, buffer_bytes=buffer, scratch_bytes=16 << 20, channels_per_peer=1) as vr:
        calls = 0
        for dtype in EPILOGUE_DTYPES:
            dt = numpy_dtype(dtype)
            for rows, row in shapes:
                count = rows * row
                if not cuda.epilogue_supported(nranks, count, row, DTYPE_CODES[dtype], 16 << 20):
                    continue
                xs = [random_array(rng, dtype, count) for _ in range(nranks)]
                residual = random_array(rng, dtype, count)
                weight = random_array(rng, dtype, row)
                for r in range(nranks):
                    vr.upload(r, INPUT, np.concatenate([xs[r], residual, weight]))
                    vr.fill(r, OUTPUT, POISON)
                vr.run("all_reduce_epilogue", dtype=dtype, count=count, bytes=row, mode=int(norm), blocks=0,
                       threads=0)
                calls += 1
                want_res, want_norm = epilogue_reference(xs, residual, weight, dtype, norm)
                for r in range(nranks):
                    got = vr.download(r, OUTPUT, 2 * count * dt.itemsize, dtype=dt)
                    what = f"{dtype} {rows}x{row} rank {r}"
                    assert got[:count].tobytes() == want_res.tobytes(), what
                    if norm:
                        tol = {4: 1e-5, 2: 1e-2}[dt.itemsize]
                        np.testing.assert_allclose(got[count:].astype(np.float64), want_norm.astype(np.float64),
                                                   rtol=tol, atol=tol, err_msg=what)
        assert calls >= 12
        assert {vr.epoch(r) for r in range(nranks)} == {calls}


def test_fused_epilogue_limits(cuda):
    from jax_mscclpp._types import DTYPE_CODES as D

    ok = cuda.epilogue_supported
    assert ok(2, 8 * 4096, 4096, D["bfloat16"], 64 << 20)
    assert not ok(2, 8 * 4096, 4096, D["int32"], 64 << 20)  # float dtypes only
    assert not ok(2, 12, 6, D["bfloat16"], 64 << 20)  # rows of 16-byte multiples
    assert not ok(2, 4096 * 4096, 4096, D["float32"], 64 << 20)  # past one LL half
    assert not ok(1, 4096, 4096, D["float32"], 64 << 20)
