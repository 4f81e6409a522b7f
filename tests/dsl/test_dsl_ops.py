"""The op table (dsl/ops.py): its consistency, that every pass refuses an operation it does not list, that an
operation defined by its table row alone runs through every pass, and that the opcodes of the integer encoding
list the operations of the native code table (codes.def) and PLAN.md lists the table's operations."""

import copy
import importlib
import pathlib
import re

import numpy as np
import pytest

from jax_mscclpp import plan_encoding
from jax_mscclpp.dsl import (
    MemoryChannel,
    Program,
    VerificationError,
    all_pairs,
    library,
    plan_to_json,
    validate_plan,
    verify,
)
from jax_mscclpp.dsl import access, barriers, fusion, ops, simulate
from jax_mscclpp.dsl.program import Operation

verify_module = importlib.import_module("jax_mscclpp.dsl.verify")  # the package exports verify(), the function
REPO = pathlib.Path(__file__).resolve().parents[2]


# The table ----------------------------------------------------------------------------------------------

def test_names_are_unique_and_the_encoding_codes_them_densely():
    assert all(name == spec.name for name, spec in ops.OPS.items())
    assert sorted(plan_encoding.OPCODES.values()) == list(range(len(ops.OPS)))


@pytest.mark.parametrize("name", list(ops.OPS))
def test_row_is_consistent(name):
    spec = ops.OPS[name]
    assert not spec.channel or spec.channel_kinds
    assert spec.side in (None, ops.SEND, ops.RECV) and (spec.side is None or spec.channel)
    assert spec.sync in (None, ops.BARRIER, ops.SIGNAL, ops.WAIT, ops.FLUSH)
    assert spec.sync not in (ops.SIGNAL, ops.WAIT, ops.FLUSH) or spec.side is not None
    assert len({operand.field for operand in spec.operands}) == len(spec.operands)
    for operand in spec.operands:
        assert operand.shape in (ops.REF, ops.REFS, ops.VIA) and operand.access in (ops.READ, ops.WRITE)
        assert operand.place in (ops.LOCAL, ops.REMOTE)
        through_channel = operand.place == ops.REMOTE or operand.packets
        assert operand.shape != ops.REFS or not through_channel  # a plain list has no channel
        assert operand.shape == ops.VIA or not through_channel or spec.channel
        assert operand.shape != ops.VIA or spec.channel_kinds
        assert operand.min_entries == 0 or operand.shape != ops.REF
    assert set(spec.fields) <= ENCODED_FIELDS
    assert spec.min_sources == 0 or any(operand.access == ops.READ for operand in spec.operands)


def test_fusion_roles_are_consistent():
    assert ops.FUSED_PAIRS == {("put", "signal"): "put_with_signal"}
    for pair, name in ops.FUSED_PAIRS.items():
        fused, parts = ops.OPS[name], [ops.OPS[part] for part in pair]
        # The fused operation keeps the first part's fields; the second adds its role on the same channel.
        assert fused.operands == parts[0].operands and not parts[1].operands
        assert fused.sync == parts[1].sync and parts[0].sync is None
        assert parts[0].channel and parts[1].channel and fused.channel_kinds <= parts[0].channel_kinds
    reductions = ops.REDUCTIONS
    assert reductions[0].name == "reduce"
    for reduction in reductions:  # the reductions differ only in their VIA operands
        assert [o for o in reduction.operands if o.shape != ops.VIA] == list(reductions[0].operands)
    for spec in ops.OPS.values():
        if spec.fuses_into is None:
            continue
        targets = {r.operand(spec.fuses_into) for r in reductions if r.operand(spec.fuses_into)}
        assert len({(t.access, t.shape) for t in targets}) == 1, spec.name
        target = targets.pop()
        # The entry comes from the operand that goes through the channel, the other is the local chunk.
        moved, local = spec.operand(target.entry_key), spec.operand("src" if target.access == ops.WRITE else "dst")
        assert spec.channel and moved.place == target.place and local.place == ops.LOCAL


def test_barrier_op_is_a_barrier_point_and_nothing_else():
    spec = ops.OPS[ops.BARRIER_OP]
    assert spec.sync == ops.BARRIER and spec.barrier_point and not spec.operands and not spec.channel
    assert {name for name, spec in ops.OPS.items() if spec.barrier_point} == {
        "barrier", "signal", "wait", "flush", "put_with_signal"}


# An unknown operation is an error in every pass --------------------------------------------------------------

def plan_with_unknown_op():
    """A correct plan in which rank 0's first put is renamed to an operation the table does not list."""
    plan = library.allreduce_2pa_hb(2).lower()
    ops_0 = plan["ranks"][0]["threadblocks"][0]["ops"]
    index = next(i for i, op in enumerate(ops_0) if op["op"] in ("put", "put_with_signal"))
    ops_0[index]["op"] = "get"
    return plan, ops_0[index]


def run_symbolically(plan):
    verify_module._SymbolicRun(plan).run()


def simulate_unchecked(plan):
    inputs = [np.arange(8, dtype=np.float32) for _ in range(plan["world_size"])]
    simulate._Machine(plan, inputs, np.add).run()


PASSES = {
    "validate_plan": validate_plan,
    "plan_to_json": plan_to_json,
    "accesses": lambda plan: [access.op_accesses(op, 0, plan["ranks"][0]["channels"])
                              for op in plan["ranks"][0]["threadblocks"][0]["ops"]],
    "fusion": fusion.fuse_plan,
    "barriers": barriers.place_barriers,
    "verify": verify,
    "verify_channel_use": verify_module._check_channel_use,
    "verify_barriers": verify_module._check_barriers,
    "verify_symbolic_run": run_symbolically,
    "simulate": lambda plan: simulate.run_plan(plan, [np.ones(4, np.float32)] * plan["world_size"]),
    "simulate_unchecked": simulate_unchecked,
    "encode_plan": plan_encoding.encode_plan,
}


@pytest.mark.parametrize("name", list(PASSES))
def test_every_pass_refuses_an_unknown_operation(name):
    plan, _ = plan_with_unknown_op()
    with pytest.raises(VerificationError, match="unknown operation 'get'") as info:
        PASSES[name](plan)
    assert info.value.kind == "schema"


def test_unknown_operation_error_names_the_operation():
    plan, op = plan_with_unknown_op()
    with pytest.raises(VerificationError) as info:
        verify(plan)
    assert (info.value.rank, info.value.threadblock, info.value.op) == (0, 0, "get")
    assert info.value.src_line == op["src_line"]


def test_the_dsl_refuses_an_unknown_operation():
    prog = Program("all_reduce", 2, chunks=1, scratch_chunks=1)
    rank = prog.rank(0)
    with pytest.raises(VerificationError, match="unknown operation 'get'") as info:
        prog.record("get", 0, 0, {"dst": rank.output[0], "src": rank.input[0]})
    assert info.value.kind == "program"
    with pytest.raises(VerificationError, match="copy takes the chunk arguments") as info:
        prog.record("copy", 0, 0, {"dst": rank.output[0], "srcs": [rank.input[0]]})
    assert info.value.kind == "program"


def test_lowering_refuses_an_unknown_operation():
    prog = Program("all_reduce", 1, chunks=1)
    rank = prog.rank(0)
    rank.copy(rank.output[0], rank.input[0])
    prog.operations.append(Operation("get", 0, 0, {"dst": rank.output[0], "src": rank.input[0]}, None, "x.py:7"))
    with pytest.raises(VerificationError, match="unknown operation 'get'") as info:
        prog.lower()
    assert info.value.kind == "program" and info.value.src_line == "x.py:7"


def test_the_simulator_refuses_a_channel_the_operation_cannot_use():
    plan = library.allreduce_2pa_ll(2).lower()
    ops_0 = plan["ranks"][0]["threadblocks"][0]["ops"]
    packets = next(op for op in ops_0 if op["op"] == "put_packets")
    switch_op = {"op": "switch_broadcast", "channel": packets["channel"], "dst": packets["dst"],
                 "src": packets["src"]}
    ops_0[ops_0.index(packets)] = switch_op
    with pytest.raises(VerificationError, match="switch_broadcast cannot use channel") as info:
        simulate.run_plan(plan, [np.ones(4, np.float32)] * 2)
    assert info.value.kind == "channel"


# An operation defined by its table row alone --------------------------------------------------------------

GET = ops.OpSpec("get", (ops.Operand("dst", ops.REF, ops.WRITE),
                             ops.Operand("src", ops.REF, ops.READ, ops.REMOTE)),
                 channel=True, channel_kinds=frozenset({("memory", "HB")}), side=ops.RECV)


def allgather_by_get(with_wait=True):
    """2-rank all-gather in which each rank reads its peer's scratch (``get``, a row added to the table)."""
    prog = Program("all_gather", 2, chunks=2, scratch_chunks=2)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        rank.copy(rank.scratch[0:2], rank.input[0:2])
        rank.copy(rank.output.block(r)[0:2], rank.input[0:2])
        pipes[r, 1 - r].signal()
    for r, rank in enumerate(prog.ranks):
        if with_wait:
            pipes[1 - r, r].wait()
        prog.record("get", r, 0, {"dst": rank.output.block(1 - r)[0:2], "src": prog.rank(1 - r).scratch[0:2]},
                    channel=pipes[1 - r, r])
    return prog


def test_an_operation_added_to_the_table_runs_through_every_pass(monkeypatch):
    monkeypatch.setitem(ops.OPS, "get", GET)
    plan = allgather_by_get().lower()  # fusion, barriers and verification
    names = [op["op"] for op in plan["ranks"][0]["threadblocks"][0]["ops"]]
    assert names == ["copy", "copy", "signal", "wait", "get"]
    assert access.op_accesses(plan["ranks"][0]["threadblocks"][0]["ops"][-1], 0, plan["ranks"][0]["channels"]) \
        == ([(1, "scratch", 0), (1, "scratch", 1)], [(0, "output", 2), (0, "output", 3)])
    rng = np.random.default_rng(5)
    for count in (1, 7, 64):
        inputs = [rng.standard_normal(count).astype(np.float32) for _ in range(2)]
        for output in simulate.run_plan(plan, inputs):
            np.testing.assert_array_equal(output, np.concatenate(inputs))
    with pytest.raises(VerificationError) as info:
        allgather_by_get(with_wait=False).lower()
    assert info.value.kind == "race" and info.value.op == "get"


# The encoding and the documentation ---------------------------------------------------------------------

def test_the_op_table_and_the_encoding_list_the_same_operations():
    """Meanings live in the op table, codes in codes.def (the native executors' enums are generated from it)."""
    assert set(plan_encoding.OPCODES) == set(ops.OPS)


# The fields the integer encoding carries (plan_encoding.py's docstring), read back by decode_op.
ENCODED_FIELDS = {"channel", "dst", "src", "srcs", "packet_srcs", "remotes"}
BUFFER_CODES = ["input", "output", "scratch"]


def decode_op(words: list) -> tuple[dict, int]:
    """The operation the words start with, every field present (as its empty value when absent), and the
    number of words it took."""
    def chunk(at):
        code, index, count = words[at:at + 3]
        return None if code == -1 else {"buffer": BUFFER_CODES[code], "index": index, "count": count}

    name = next(name for name, code in plan_encoding.OPCODES.items() if code == words[0])
    n_srcs, n_packet_srcs, n_remotes = words[2:5]
    op = {"op": name, "channel": words[1], "dst": chunk(5), "src": chunk(8)}
    at = 11
    op["srcs"] = [chunk(at + 3 * i) for i in range(n_srcs)]
    at += 3 * n_srcs
    op["packet_srcs"] = [{"channel": words[at + 4 * i], "src": chunk(at + 4 * i + 1)} for i in range(n_packet_srcs)]
    at += 4 * n_packet_srcs
    op["remotes"] = [{"channel": words[at + 4 * i], "dst": chunk(at + 4 * i + 1)} for i in range(n_remotes)]
    return op, at + 4 * n_remotes


@pytest.mark.parametrize("name", list(library.PROGRAMS))
def test_encoding_carries_every_field_of_every_operation(name):
    plan = library.PROGRAMS[name](4).lower(instances=2)
    encoded = plan_encoding.encode_plan(plan)["threadblocks"]
    for rank, rank_plan in enumerate(plan["ranks"]):
        for tb, block in enumerate(rank_plan["threadblocks"]):
            words, decoded = encoded[rank][tb], []
            while words:
                op, used = decode_op(words)
                decoded.append(op)
                words = words[used:]
            empty = {"channel": -1, "dst": None, "src": None, "srcs": [], "packet_srcs": [], "remotes": []}
            assert decoded == [{**empty, **{k: v for k, v in op.items() if k != "src_line"}} for op in block["ops"]]


def test_encoding_refuses_unknown_operations():
    plan = library.allreduce_2pa_ll(2).lower()
    unknown = copy.deepcopy(plan["ranks"][1]["threadblocks"][0]["ops"][0])
    unknown["op"] = "get"
    with pytest.raises(VerificationError, match="unknown operation 'get'"):
        plan_encoding.encode_op(unknown)


def test_plan_md_lists_the_tables_operations():
    text = (REPO / "jax_mscclpp" / "dsl" / "PLAN.md").read_text()
    section = text.split("## Operations", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `(\w+)` \|", section, re.M) == list(ops.OPS)
