"""The GPU plan executor (kernels/executor) on virtual ranks: every program of the DSL library, N = 2, 4, 8,
against the numpy plan simulator (jax_mscclpp.dsl.run_plan) and numpy itself.

Outputs are poisoned before every call. f32 and i32 results (and every max/min) must equal the simulator's bit
for bit (same reduction order); bf16 sums are reduced in f32 and rounded once on the GPU, step by step in the
simulator, so they are compared with a tolerance. The native module is imported inside fixtures.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .gpu_helpers import child_env, numpy_dtype

pytestmark = pytest.mark.gpu

PROGRAMS = ["allreduce_1pa_ll", "allreduce_2pa_ll", "allreduce_2pa_hb", "allreduce_2pr", "allreduce_2pa_nvls",
            "allgather_allpairs", "reducescatter_allpairs", "alltoall_allpairs"]
NRANKS = [2, 4, 8]
CASES = [(dt, op) for dt in ("float32", "bfloat16", "int32") for op in ("sum", "max", "min")]
SIZES = [1, 3, 1023, 4096 * 8 + 5]  # elements per block
REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def lower(name, n, instances=1):
    from jax_mscclpp.dsl import library

    return library.PROGRAMS[name](n).lower(instances=instances)


def random_input(rng, dtype, count):
    dt = numpy_dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(-1000, 1000, size=count).astype(dt)
    return rng.standard_normal(count).astype(np.float32).astype(dt)


def numpy_reference(collective, inputs, op, n, permutation=None):
    """Each rank's expected output, in float64 for floats (the permutation's: its (source, destination) pairs)."""
    wide = [x.astype(np.float64) if x.dtype.kind not in "iu" else x.astype(np.int64) for x in inputs]
    if collective == "permute":
        sources = {dst: src for src, dst in permutation}
        return [wide[sources[r]] if r in sources else np.zeros_like(wide[r]) for r in range(n)]
    fold = REDUCE[op]

    def reduce(arrays):
        out = arrays[0].copy()
        for a in arrays[1:]:
            out = fold(out, a)
        return out

    if collective == "all_reduce":
        return [reduce(wide)] * n
    if collective == "all_gather":
        return [np.concatenate(wide)] * n
    blocks = [np.split(x, n) for x in wide]
    if collective == "reduce_scatter":
        return [reduce([blocks[q][r] for q in range(n)]) for r in range(n)]
    return [np.concatenate([blocks[q][r] for q in range(n)]) for r in range(n)]  # all_to_all


def check(plan, inputs, outputs, op, dtype, pieces=False):
    """pieces: the call ran as several launches, each with its own chunk geometry, so which rank reduces an
    element (and in which order) differs from the simulator's whole-message run: float sums then agree with
    it to rounding only."""
    from jax_mscclpp.dsl import run_plan

    n = plan["world_size"]
    simulated = run_plan(plan, inputs, op)
    expected = numpy_reference(plan["collective"], inputs, op, n, plan.get("permutation"))
    dt = numpy_dtype(dtype)
    exact = op != "sum" or dt.kind in "iu" or (dt.name != "bfloat16" and not pieces)
    for r in range(n):
        got, sim = outputs[r], simulated[r]
        assert got.shape == sim.shape, (r, got.shape, sim.shape)
        if exact:
            assert got.tobytes() == sim.tobytes(), f"rank {r}: differs from the simulator at " \
                f"{np.flatnonzero(got.view(np.uint8) != sim.view(np.uint8))[:8] // dt.itemsize}"
        elif dt.name != "bfloat16":
            np.testing.assert_allclose(got.astype(np.float64), sim.astype(np.float64), rtol=1e-5, atol=1e-5)
        else:
            # bf16 sums: rounded once here, after every step in the simulator
            np.testing.assert_allclose(got.astype(np.float64), sim.astype(np.float64), rtol=3e-2, atol=0.25)
        if dt.kind in "iu":
            wrapped = expected[r].astype(dt)  # integer sums wrap alike
            assert np.array_equal(got, wrapped), f"rank {r}"
        else:
            tol = 1e-5 if dt.itemsize == 4 else 3e-2
            np.testing.assert_allclose(got.astype(np.float64), expected[r], rtol=tol, atol=tol * 8)


@pytest.fixture
def ranks_of(cuda):
    """PlanRanks for (program, world size, instances), closed after the test: at most one set of ranks lives at
    a time, so every rank's stream gets its own hardware queue (CUDA_DEVICE_MAX_CONNECTIONS) and ranks that wait
    for each other never queue behind each other."""
    from tests.harness.plan_ranks import PlanRanks

    made = []

    def get(name, n, instances=1, **kw):
        while made:
            made.pop().close()
        kw.setdefault("timeout_s", 20)
        made.append(PlanRanks(lower(name, n, instances), max_block_count=max(SIZES), itemsize=4, **kw))
        return made[-1]

    yield get
    while made:
        made.pop().close()


def run_sizes(pr, rng, dtype, op, sizes=SIZES):
    for size in sizes:
        inputs = [random_input(rng, dtype, pr.input_blocks * size) for _ in range(pr.nranks)]
        outputs = pr.run(inputs, op)
        check(pr.plan, inputs, outputs, op, dtype, pieces=pr.launch_count(size, dtype) > 1)


@pytest.mark.parametrize("nranks", NRANKS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_library_program(ranks_of, rng, name, nranks):
    """f32 / bf16 / i32 x sum / max / min x every size, on one set of ranks."""
    pr = ranks_of(name, nranks)
    before = [pr.epoch(r) for r in range(nranks)]
    launches = 0
    for dtype, op in CASES:
        run_sizes(pr, rng, dtype, op)
        launches += sum(pr.launch_count(s, dtype) for s in SIZES)
    advanced = {pr.epoch(r) - before[r] for r in range(nranks)}
    assert advanced == {launches}, advanced


@pytest.mark.parametrize("nranks", [4, 8])
@pytest.mark.parametrize("name", PROGRAMS)
def test_replicated_program(ranks_of, rng, name, nranks):
    pr = ranks_of(name, nranks, instances=2)
    assert pr.ranks[0].plan_info()["threadblocks"] == len(pr.plan["ranks"][0]["threadblocks"]) >= 2
    for dtype, op in [("float32", "sum"), ("bfloat16", "max"), ("int32", "sum")]:
        run_sizes(pr, rng, dtype, op)


@pytest.mark.parametrize("name", ["allreduce_1pa_ll", "allreduce_2pa_ll", "allreduce_2pa_hb", "allgather_allpairs"])
def test_more_peers_than_register_operands(ranks_of, rng, name):
    """12 ranks: 11 packet sources, remote destinations, grouped signals / waits and put_packets destinations per
    operation, past the 8 operands the executor keeps in registers."""
    pr = ranks_of(name, 12)
    for dtype, op in [("float32", "sum"), ("bfloat16", "max"), ("int32", "min")]:
        run_sizes(pr, rng, dtype, op, sizes=[3, 1023])


@pytest.mark.parametrize("name", PROGRAMS)
def test_repeated_calls_advance_epochs(ranks_of, rng, name):
    """200 calls with fresh inputs each time: every call's output is this call's (no stale packets or data)."""
    pr = ranks_of(name, 4)
    start = pr.epoch(0)
    size = 1023
    for _ in range(200):
        inputs = [random_input(rng, "float32", pr.input_blocks * size) for _ in range(pr.nranks)]
        outputs = pr.run(inputs, "sum")
        expected = numpy_reference(pr.plan["collective"], inputs, "sum", pr.nranks)
        for r in range(pr.nranks):
            np.testing.assert_allclose(outputs[r].astype(np.float64), expected[r], rtol=1e-5, atol=1e-4)
    assert {pr.epoch(r) for r in range(pr.nranks)} == {start + 200 * pr.launch_count(size, "float32")}


@pytest.mark.parametrize("name", PROGRAMS)
def test_back_to_back_calls(ranks_of, rng, name):
    """100 calls queued without a host synchronization: fast ranks run ahead into the next call while slow
    ones finish the last (scratch halves by epoch parity, packet flags). The last output is checked."""
    pr = ranks_of(name, 8)
    size = 4096 + 3
    inputs = [random_input(rng, "float32", pr.input_blocks * size) for _ in range(pr.nranks)]
    for r, x in enumerate(inputs):
        pr.upload(r, 0, x)
        pr.fill(r, 1, 0xEE)
    start = pr.epoch(0)
    for _ in range(100):
        pr.launch(size, np.float32, "max")
    pr.synchronize()
    outputs = [pr.download(r, 1, pr.output_blocks * size * 4, dtype=np.float32) for r in range(pr.nranks)]
    check(pr.plan, inputs, outputs, "max", "float32")
    assert {pr.epoch(r) for r in range(pr.nranks)} == {start + 100 * pr.launch_count(size, "float32")}


@pytest.mark.parametrize("name", ["allreduce_1pa_ll", "allreduce_2pa_hb", "allreduce_2pr", "alltoall_allpairs"])
def test_pipelined_over_a_small_scratch(cuda, rng, name):
    """A scratch too small for the message: the call runs as several launches (pieces), same result."""
    from tests.harness.plan_ranks import PlanRanks

    size = 4096 * 8 + 5
    plan = lower(name, 4)
    with PlanRanks(plan, max_block_count=size, itemsize=4, timeout_s=20, scratch_bytes=256 << 10) as pr:
        assert pr.launch_count(size, "float32") > 1
        run_sizes(pr, rng, "float32", "sum", sizes=[size, 1023])
        run_sizes(pr, rng, "bfloat16", "min", sizes=[size])


def test_plan_info_and_channel_binding(cuda_build):
    """Both ends of every channel get the same RankContext channel index; fused-away scratch takes no room."""
    from tests.harness.plan_ranks import plan_spec

    for name in PROGRAMS:
        for n in (2, 5):
            for instances in (1, 3):
                plan = lower(name, n, instances)
                spec = plan_spec(cuda_build, plan)
                idx = spec.channel_indices()
                for r, chans in enumerate(plan["ranks"]):
                    for c, ch in enumerate(chans["channels"]):
                        if ch["type"] == "switch":
                            assert idx[r][c] == -1
                            continue
                        assert idx[r][c] == idx[ch["peer"]][ch["peer_channel"]] >= 0, (name, n, r, c)
                assert spec.channels_per_peer == max(k for row in idx for k in row) + 1


def test_unsupported_plans_are_refused(cuda):
    """An out-of-range chunk and a port channel from a rank to itself are clear errors when the plan is bound."""
    import copy

    from tests.harness.plan_ranks import PlanRanks

    plan = lower("allreduce_2pa_hb", 2)
    bad = copy.deepcopy(plan)
    op = next(op for op in bad["ranks"][0]["threadblocks"][0]["ops"] if op.get("dst", {}).get("buffer") == "output")
    op["dst"]["index"] = 7  # the output has 2 chunks
    with pytest.raises(ValueError, match="out of range"):
        PlanRanks(bad, max_block_count=16, itemsize=4)

    selfish = copy.deepcopy(plan)
    chans = selfish["ranks"][0]["channels"]
    c = len(chans)
    chans += [{"type": "port", "peer": 0, "peer_channel": c + 1, "protocol": "HB"},
              {"type": "port", "peer": 0, "peer_channel": c, "protocol": "HB"}]
    with pytest.raises(ValueError, match="port channel to itself"):
        PlanRanks(selfish, max_block_count=16, itemsize=4)


def widened(plan: dict, extra: int) -> dict:
    """``plan`` with ``extra`` more thread blocks a rank (empty ones: the same work over more blocks)."""
    import copy

    wide = copy.deepcopy(plan)
    for rank in wide["ranks"]:
        rank["threadblocks"] += [{"ops": []} for _ in range(extra)]
    return wide


def test_plans_whose_blocks_cannot_all_be_resident_are_refused_before_launch(cuda, rng):
    """A launch's blocks wait for each other and for the peers', so every block must be resident at once: a plan with
    more blocks a rank than the GPU holds is refused where it is bound (for every call), and on virtual ranks, which
    share one GPU, one whose blocks over all the ranks do not fit is refused before it launches (launched, it would
    wait forever, and the timeout's trap would end the process's CUDA context). The process then runs a plan that
    fits."""
    from tests.harness.plan_ranks import NotResidentError, PlanRanks, dtype_code
    from tests.harness.virtual_ranks import REDUCE_CODES

    base = lower("allreduce_2pa_ll", 8)
    with PlanRanks(base, max_block_count=max(SIZES), itemsize=4, timeout_s=20) as pr:
        holds = pr.ranks[0].resident_blocks(dtype_code("float32"), REDUCE_CODES["sum"])
    assert holds >= 8  # the 8-rank plan of one block a rank fits

    with pytest.raises(ValueError, match=r"thread blocks a rank; GPU 0 holds at most \d+ of them at once"):
        PlanRanks(widened(lower("allreduce_2pa_ll", 2), holds), max_block_count=1024, itemsize=4, timeout_s=20)

    per_rank = 1 + holds // 4  # fits one rank, not eight on one GPU
    with PlanRanks(widened(base, holds // 4), max_block_count=1024, itemsize=4, timeout_s=20) as pr:
        with pytest.raises(NotResidentError, match=f"8 ranks x {per_rank} blocks .* = {8 * per_rank} blocks must be "
                                                   f"resident at once on one GPU, which holds {holds}"):
            pr.launch(1024, "float32", "sum")
        with pytest.raises(NotResidentError):
            pr.time(1024, "float32", "sum", repeats=4, samples=1)

    with PlanRanks(base, max_block_count=max(SIZES), itemsize=4, timeout_s=20) as pr:
        run_sizes(pr, rng, "float32", "sum", sizes=[1023, 4096 * 8 + 5])


TIMEOUT_SCRIPT = textwrap.dedent(
    """
    import sys
    from jax_mscclpp.dsl import library
    from tests.harness.plan_ranks import PlanRanks, PlanRanksError
    from tests.harness import synchronize_or_exit
    name = sys.argv[1]
    pr = PlanRanks(library.PROGRAMS[name](2).lower(), max_block_count=1024, itemsize=4, timeout_s=0.5)
    pr.launch(1024, "float32", "sum", ranks=[0])   # rank 1 never runs
    synchronize_or_exit(lambda: pr.synchronize([0]), PlanRanksError)
    print("NO ERROR")
    """
)


@pytest.mark.parametrize("name,what", [("allreduce_2pa_hb", "semaphore wait"), ("allreduce_1pa_ll", "LL packet read")])
def test_missing_peer_times_out(cuda, name, what):
    """A peer that never runs: the executor's bounded wait reports rank, peer and operation, not a hang."""
    proc = subprocess.run([sys.executable, "-c", TIMEOUT_SCRIPT, name], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ERROR:" in out and "NO ERROR" not in out, out
    assert "rank 0 timed out" in out and "peer 1" in out and what in out, out
