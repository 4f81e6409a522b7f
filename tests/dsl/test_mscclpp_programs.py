"""Programs written in MSCCL++'s DSL (both APIs, tests/dsl/mscclpp_*_programs.py) lower to verified plans that
the numpy interpreter runs to numpy's result: 2, 4 and 8 ranks, one and two instances, element counts that
leave short and empty tail chunks."""

import numpy as np
import pytest

from jax_mscclpp.dsl import Program, library, load_plan, verify
from jax_mscclpp.dsl.simulate import run_plan
from tests.dsl import mscclpp_channel_programs, mscclpp_chunk_programs
from tests.dsl.test_dsl_simulate import expected_outputs

WORLD_SIZES = (2, 4, 8)
COUNTS_PER_RANK = (1, 3, 257)  # elements per block: chunks of one element, short tails, empty chunks
CASES = [(api.__name__.rsplit("_", 2)[1], name, fn, collective)
         for api in (mscclpp_channel_programs, mscclpp_chunk_programs)
         for name, (fn, collective) in api.PROGRAMS.items()]


def random_inputs(rng, world_size, count):
    """Random integers, never zero, with random signs (integer sums are exact in any order)."""
    shape = (world_size, count)
    return list((rng.integers(1, 1 << 20, size=shape) * rng.choice([-1, 1], size=shape)).astype(np.int32))


@pytest.mark.parametrize("instances", [1, 2])
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("api,name,fn,collective", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_lowers_verifies_and_matches_numpy(rng, api, name, fn, collective, world_size, instances):
    program = fn(world_size, instances)
    plan = program.plan()
    assert plan["collective"] == collective and plan["world_size"] == world_size
    assert plan["buffers"]["input"]["chunks_per_block"] == instances * program.chunks_per_block
    verify(plan)
    blocks = plan["buffers"]["input"]["blocks"]
    for count in COUNTS_PER_RANK:
        inputs = random_inputs(rng, world_size, count * blocks)
        for ours, expected in zip(run_plan(plan, inputs), expected_outputs(collective, inputs, np.add)):
            np.testing.assert_array_equal(ours, expected)


def test_to_program_is_our_program_and_lines_are_the_programs():
    program = mscclpp_channel_programs.allreduce_two_phase_port(4)
    ours = program.to_program()
    assert isinstance(ours, Program) and ours.collective == "all_reduce" and ours.world_size == 4
    lines = {op.get("src_line", "").split(":")[0] for *_, op in _ops(program.plan()) if op["op"] != "barrier"}
    assert lines == {"mscclpp_channel_programs.py"}


def test_the_channels_of_the_plan():
    """Port programs lower to port channels, LL programs to LL memory channels, and a chunk-API barrier to
    channels from a rank to itself."""
    assert _channel_kinds(mscclpp_channel_programs.alltoall_port(4)) == {("port", "HB")}
    assert _channel_kinds(mscclpp_chunk_programs.allgather_port(4)) == {("port", "HB")}
    assert _channel_kinds(mscclpp_channel_programs.allreduce_allpairs_ll(4)) == {("memory", "LL")}
    plan = mscclpp_chunk_programs.alltoall_allpairs(4).plan()
    assert any(c.get("peer") == r for r, rank in enumerate(plan["ranks"]) for c in rank["channels"])


def test_ll_reductions_fuse_into_reduce_packets():
    ops = {op["op"] for *_, op in _ops(mscclpp_channel_programs.allreduce_allpairs_ll(4).plan())}
    assert "reduce_packets" in ops and "read_packets" in ops and "reduce" not in ops


# MSCCL++'s program, ours, whether the order of operations is ours too
SAME_OPERATIONS = {
    # LL all-pairs: the peers' packets reduced into the output one peer at a time; the chain fuses into one.
    "ll_all_pairs": (mscclpp_chunk_programs.allreduce_allpairs_ll, library.allreduce_2pa_ll, True),
    # Two-phase: its own chunk copied into the output, the peers' accumulated into it, the result put to each peer
    # with a signal in between; the copy and the puts fold into the reduction (the last copies stay in the
    # program's order, each after its own wait).
    "two_phase": (mscclpp_chunk_programs.allreduce_two_phase, library.allreduce_2pa_hb, False),
}


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("name", sorted(SAME_OPERATIONS))
def test_the_all_reduces_run_the_operations_ours_run(name, world_size):
    """MSCCL++'s all-reduces, written and loaded back from their executor JSON, run the thread blocks,
    operations and channels of our two-phase all-reduce of the same protocol."""
    theirs_of, ours_of, ordered = SAME_OPERATIONS[name]
    program, ours = theirs_of(world_size), ours_of(world_size).lower()

    def operations(block):
        names = [op["op"] for op in block["ops"]]
        return names if ordered else sorted(names)

    for plan in (program.plan(), load_plan(program.to_json())):
        for mine, theirs in zip(ours["ranks"], plan["ranks"]):
            assert [operations(tb) for tb in mine["threadblocks"]] == \
                [operations(tb) for tb in theirs["threadblocks"]]
            assert len(mine["channels"]) == len(theirs["channels"])


def _ops(plan):
    for r, rank in enumerate(plan["ranks"]):
        for tb, block in enumerate(rank["threadblocks"]):
            for op in block["ops"]:
                yield r, tb, op


def _channel_kinds(program):
    return {(c["type"], c["protocol"]) for rank in program.plan()["ranks"] for c in rank["channels"]}
