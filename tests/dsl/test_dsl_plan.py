"""The plan format: JSON round trip and stable text, structural validation, and element geometry."""

import copy
import json

import numpy as np
import pytest

from jax_mscclpp.dsl import (
    PLAN_VERSION,
    MemoryChannel,
    Program,
    VerificationError,
    all_pairs,
    library,
    plan_from_json,
    plan_to_json,
    validate_plan,
    verify,
)
from jax_mscclpp.dsl.geometry import ElementGeometry
from jax_mscclpp.dsl.simulate import run_plan


@pytest.fixture
def plan():
    return library.allreduce_2pa_hb(2).lower()


def test_json_round_trip_is_stable(plan):
    text = plan_to_json(plan)
    assert plan_from_json(text) == plan == json.loads(text)
    assert plan_to_json(plan_from_json(text)) == text
    shuffled = json.loads(json.dumps(plan, sort_keys=False))
    assert plan_to_json(shuffled) == text
    op_lines = [line.strip() for line in text.splitlines() if '"op":' in line]
    assert op_lines and all(line.startswith('{"op": ') for line in op_lines)


def test_header(plan):
    assert plan["version"] == PLAN_VERSION
    assert (plan["name"], plan["collective"], plan["world_size"]) == ("allreduce_2pa_hb", "all_reduce", 2)
    assert plan["buffers"]["input"] == {"blocks": 1, "chunks_per_block": 2}
    # scratch[p] and scratch[2 + p] of the program, for the peer p: each rank's two, compacted
    assert plan["buffers"]["scratch"] == {"blocks": 1, "chunks_per_block": 2, "packets": False}
    assert [ch["peer"] for ch in plan["ranks"][0]["channels"]] == [1, 1]
    assert library.allreduce_2pa_ll(2).lower()["buffers"]["scratch"]["packets"] is True
    assert library.alltoall_allpairs(4).lower()["buffers"]["input"]["blocks"] == 4


def broken(plan, edit):
    plan = copy.deepcopy(plan)
    edit(plan)
    with pytest.raises(VerificationError) as info:
        validate_plan(plan)
    return info.value


def first_op(plan):
    return plan["ranks"][0]["threadblocks"][0]["ops"][0]


@pytest.mark.parametrize("edit,kind,text", [
    (lambda p: p.update(version=2), "schema", "version"),
    (lambda p: p.pop("buffers"), "schema", "buffers"),
    (lambda p: p.update(collective="broadcast"), "schema", "collective"),
    (lambda p: p["buffers"]["output"].update(chunks_per_block=3), "schema", "chunks_per_block"),
    (lambda p: p["ranks"].pop(), "schema", "ranks"),
    (lambda p: first_op(p).update(op="send"), "schema", "unknown operation"),
    (lambda p: first_op(p).pop("dst"), "schema", "fields"),
    (lambda p: first_op(p).update(extra=1), "schema", "fields"),
    (lambda p: first_op(p).update(channel=9), "schema", "channel 9"),
    (lambda p: first_op(p)["dst"].update(buffer="stack"), "schema", "bad chunk reference"),
    (lambda p: first_op(p)["dst"].update(index=4), "range", "out of range"),
    (lambda p: first_op(p)["dst"].update(count=2), "schema", "same number of chunks"),
    (lambda p: p["ranks"][0]["channels"][0].update(peer_channel=5), "channel", "other end"),
    (lambda p: p["ranks"][0]["channels"][1].update(protocol="LL"), "channel", "other end"),
    (lambda p: p["ranks"][0]["channels"][0].update(type="switch"), "schema", "switch"),
])
def test_validation_errors(plan, edit, kind, text):
    error = broken(plan, edit)
    assert error.kind == kind and text in str(error)


def shift_program(world: int, pairs) -> Program:
    """A permutation written in the DSL: each pair's source puts its block into its destination's scratch and
    signals, and the destination copies it out (a pair of one rank copies its input into its output)."""
    prog = Program("permute", world, scratch_chunks=1, permutation=pairs)
    pipes = all_pairs(prog, MemoryChannel)
    for src, dst in pairs:
        if src == dst:
            prog.rank(dst).copy(prog.rank(dst).output[0], prog.rank(src).input[0])
            continue
        pipes[src, dst].put_with_signal(prog.rank(dst).scratch[0], prog.rank(src).input[0])
        pipes[src, dst].wait()
        prog.rank(dst).copy(prog.rank(dst).output[0], prog.rank(dst).scratch[0])
    return prog


def test_a_permutation_plan_carries_its_pairs_and_zeros_the_ranks_that_receive_nothing(rng):
    plan = verify(shift_program(4, [(0, 1), (1, 2), (3, 0)]).lower())
    assert plan["permutation"] == [[0, 1], [1, 2], [3, 0]]
    assert plan_from_json(plan_to_json(plan)) == plan
    inputs = [rng.standard_normal(7).astype("float32") for _ in range(4)]
    outputs = run_plan(plan, inputs)
    for rank, source in ((1, 0), (2, 1), (0, 3)):
        assert np.array_equal(outputs[rank], inputs[source])
    assert np.array_equal(outputs[3], np.zeros(7, "float32"))  # no pair sends to rank 3


@pytest.mark.parametrize("edit,text", [
    (lambda p: p.pop("permutation"), "needs 'permutation'"),
    (lambda p: p.update(permutation=[[0, 1], [2, 1]]), "names a destination twice"),
    (lambda p: p.update(permutation=[[0, 1], [0, 2]]), "names a source twice"),
    (lambda p: p.update(permutation=[[0, 4]]), "ranks below 4"),
    (lambda p: p.update(permutation=[[0]]), "pairs"),
    (lambda p: p.update(collective="all_reduce"), "only a plan of the permutation"),
])
def test_permutation_validation_errors(edit, text):
    error = broken(shift_program(4, [(0, 1), (1, 2)]).lower(), edit)
    assert error.kind == "schema" and text in str(error)


def test_a_permutation_program_names_its_pairs_and_only_it():
    with pytest.raises(VerificationError, match="names its permutation"):
        Program("permute", 2)
    with pytest.raises(VerificationError, match="names its permutation"):
        Program("all_reduce", 2, permutation=[(0, 1)])


def test_validation_error_names_the_operation(plan):
    error = broken(plan, lambda p: p["ranks"][1]["threadblocks"][0]["ops"][2].update(op="send"))
    assert (error.rank, error.threadblock, error.op_index, error.op) == (1, 0, 2, "send")


@pytest.mark.parametrize("count,per_block,spans", [
    (10, 4, [(0, 3), (3, 6), (6, 9), (9, 10)]),
    (1, 4, [(0, 1), (1, 1), (1, 1), (1, 1)]),
    (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    (0, 2, [(0, 0), (0, 0)]),
])
def test_input_chunk_spans(count, per_block, spans):
    buffers = {"input": {"blocks": 1, "chunks_per_block": per_block},
               "output": {"blocks": 1, "chunks_per_block": per_block},
               "scratch": {"blocks": 1, "chunks_per_block": 3, "packets": False}}
    geometry = ElementGeometry(buffers, count)
    assert [geometry.span("input", i) for i in range(per_block)] == spans
    ce = geometry.chunk_elems
    assert geometry.span("scratch", 2) == (2 * ce, 3 * ce) and geometry.sizes["scratch"] == 3 * ce


def test_block_geometry_of_split_collectives():
    buffers = library.reducescatter_allpairs(4).lower(instances=2)["buffers"]
    geometry = ElementGeometry(buffers, 4 * 5)  # 5 elements per block, 2 chunks per block
    assert geometry.block_count == 5 and geometry.chunk_elems == 3
    assert [geometry.span("input", i) for i in range(4)] == [(0, 3), (3, 5), (5, 8), (8, 10)]
    assert geometry.sizes["output"] == 5
    with pytest.raises(ValueError, match="multiple"):
        ElementGeometry(buffers, 21)


def test_simulator_shows_what_a_plan_leaves_unwritten(plan):
    edited = copy.deepcopy(plan)
    ops = edited["ranks"][0]["threadblocks"][0]["ops"]
    ops[:] = [op for op in ops if op["op"] != "copy"]
    outputs = run_plan(edited, [np.ones(6, np.float32), np.ones(6, np.float32)])
    assert np.isnan(outputs[0][3:]).all() and (outputs[0][:3] == 2).all()


def test_simulator_reports_a_stuck_plan(plan):
    edited = copy.deepcopy(plan)
    ops = edited["ranks"][0]["threadblocks"][0]["ops"]
    ops[:] = [op for op in ops if op["op"] not in ("signal", "put_with_signal")]
    with pytest.raises(VerificationError, match="stuck") as info:
        run_plan(edited, [np.ones(4, np.int32)] * 2)
    assert info.value.kind == "deadlock"
