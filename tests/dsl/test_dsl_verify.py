"""The verifier catches each kind of mistake and names the operation and DSL line at fault.

Mistakes are made two ways: by editing a correct library plan (what a hand-edited or mis-generated plan looks
like) and by writing a wrong DSL program (then the error names this file's line).
"""

import inspect

import pytest

from jax_mscclpp.dsl import (
    MemoryChannel,
    PortChannel,
    Program,
    VerificationError,
    all_pairs,
    library,
    verify,
)


def this_line(offset=1):
    """``file:line`` of the caller's line plus ``offset`` (the DSL call on the next line, by default)."""
    frame = inspect.currentframe().f_back
    return f"test_dsl_verify.py:{frame.f_lineno + offset}"


def ops_of(plan, rank, tb=0):
    return plan["ranks"][rank]["threadblocks"][tb]["ops"]


def index_of(ops, name, occurrence=0):
    return [i for i, op in enumerate(ops) if op["op"] == name][occurrence]


def expect_error(kind, plan_or_program):
    with pytest.raises(VerificationError) as info:
        if isinstance(plan_or_program, Program):
            plan_or_program.lower()
        else:
            verify(plan_or_program)
    assert info.value.kind == kind, str(info.value)
    return info.value


def exchange_program(*, wait=True, signal=True, peers_in_reduce=None):
    """A 2-rank all-reduce: each rank puts its input into the other's scratch and reduces what it got."""
    prog = Program("all_reduce", 2, chunks=1, scratch_chunks=1)
    pipes = all_pairs(prog, MemoryChannel)
    lines = {}
    for r, rank in enumerate(prog.ranks):
        p = 1 - r
        pipes[r, p].put(prog.rank(p).scratch[0], rank.input[0])
        if signal:
            pipes[r, p].signal()
        if wait:
            pipes[p, r].wait()
        srcs = [rank.input[0], rank.scratch[0]] if peers_in_reduce is None else peers_in_reduce(rank)
        lines[r] = this_line()
        rank.reduce(rank.output[0], srcs)
    return prog, lines


def test_correct_programs_verify():
    prog, _ = exchange_program()
    assert verify(prog) == prog.lower()
    for name, program in library.PROGRAMS.items():
        verify(program(4).lower())


def test_dropped_wait_in_plan_is_a_race_naming_rank_threadblock_op_and_line():
    plan = library.allreduce_2pa_hb(4).lower()
    ops = ops_of(plan, 1)
    del ops[index_of(ops, "wait")]
    error = expect_error("race", plan)
    assert (error.rank, error.threadblock, error.op) == (1, 0, "reduce_put")
    assert error.op_index == index_of(ops, "reduce_put")
    assert error.src_line.startswith("library.py:")
    assert f"rank 1, threadblock 0, op {error.op_index} (reduce_put) at {error.src_line}" in str(error)
    assert "no wait" in str(error)


def test_missing_wait_in_dsl_is_a_race_at_the_reading_line():
    prog, lines = exchange_program(wait=False)
    error = expect_error("race", prog)
    assert error.op == "reduce" and error.src_line == lines[error.rank]


def test_removed_signal_is_a_deadlock():
    plan = library.allreduce_2pa_hb(4).lower()
    ops = ops_of(plan, 2)
    del ops[index_of(ops, "signal")]
    error = expect_error("deadlock", plan)
    assert error.op == "wait" and "no signal satisfies this wait" in str(error)


def test_missing_signal_in_dsl_is_a_deadlock():
    prog, _ = exchange_program(signal=False)
    error = expect_error("deadlock", prog)
    assert error.op == "wait" and error.src_line.startswith("test_dsl_verify.py:")


def test_dropped_put_packets_is_a_deadlock():
    plan = library.allreduce_2pa_ll(4).lower()
    ops = ops_of(plan, 0)
    del ops[index_of(ops, "put_packets")]
    error = expect_error("deadlock", plan)
    assert "no put_packets writes" in str(error)


def test_out_of_range_chunk_names_its_line():
    prog = Program("all_reduce", 2, chunks=2, scratch_chunks=2)
    pipes = all_pairs(prog, MemoryChannel)
    line = this_line(2)
    for r, rank in enumerate(prog.ranks):
        pipes[r, 1 - r].put(prog.rank(1 - r).scratch[2], rank.input[0])
    error = expect_error("range", prog)
    assert error.op == "put" and error.src_line == line
    assert "scratch[2] is out of range: scratch has 2 chunks" in str(error)


def test_out_of_range_chunk_in_plan():
    plan = library.allgather_allpairs(4).lower()
    ops_of(plan, 3)[index_of(ops_of(plan, 3), "copy")]["dst"]["index"] = 4
    error = expect_error("range", plan)
    assert (error.rank, error.op) == (3, "copy")


def test_forgotten_contribution_fails_the_postcondition():
    prog, lines = exchange_program(peers_in_reduce=lambda rank: [rank.input[0], rank.input[0]] if rank.rank
                                   else [rank.input[0], rank.scratch[0]])
    error = expect_error("double_count", prog)
    assert error.rank == 1

    prog = Program("all_reduce", 3, chunks=1, scratch_chunks=3)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        for p in prog.peers(r):
            pipes[r, p].put_with_signal(prog.rank(p).scratch[r], rank.input[0])
        for p in prog.peers(r):
            pipes[p, r].wait()
        line = this_line()
        rank.reduce(rank.output[0], [rank.input[0], rank.scratch[prog.peers(r)[0]]])  # forgets one peer
    error = expect_error("postcondition", prog)
    assert error.op == "reduce" and error.src_line == line
    assert "expected input[0] of ranks [0, 1, 2]" in str(error)


def test_double_counting_in_plan():
    plan = library.allreduce_2pa_hb(4).lower()
    reduce_put = ops_of(plan, 0)[index_of(ops_of(plan, 0), "reduce_put")]
    reduce_put["srcs"].append(reduce_put["srcs"][0])
    error = expect_error("double_count", plan)
    assert "counts rank 0's input[0] twice" in str(error)


def test_port_put_source_overwritten_before_flush():
    prog = Program("all_gather", 2, chunks=1, scratch_chunks=2)
    ring = [PortChannel(prog, r, 1 - r) for r in range(2)]
    for r, rank in enumerate(prog.ranks):
        rank.copy(rank.output.block(r)[0], rank.input[0])
        ring[r].put(prog.rank(1 - r).scratch[0], rank.output.block(r)[0])
        ring[r].signal()
        line = this_line()
        rank.copy(rank.output.block(r)[0], rank.input[0])  # overwrites the DMA source before any flush
        ring[r].flush()
        ring[1 - r].wait()
        rank.copy(rank.output.block(1 - r)[0], rank.scratch[0])
    error = expect_error("flush", prog)
    assert error.src_line == line and "flush channel" in str(error)


def test_unflushed_port_put_at_the_end():
    plan = library.allreduce_2pr(4).lower()
    ops = ops_of(plan, 1)
    del ops[index_of(ops, "flush", 1)]
    error = expect_error("flush", plan)
    assert error.op == "put_with_signal" and "not flushed" in str(error)


def test_missing_barrier_in_plan():
    plan = library.allreduce_2pa_nvls(4).lower()
    ops = ops_of(plan, 2)
    del ops[index_of(ops, "barrier")]
    error = expect_error("barrier", plan)
    assert error.op == "switch_broadcast"


def test_put_with_signal_reading_an_unbarriered_write():
    """put_with_signal is a barrier point after its put only: its threads read the source (port: the staging
    copy of an output chunk) before the barrier, so the reduction that wrote it needs one of its own."""
    plan = library.allreduce_2pr(4).lower()
    ops = ops_of(plan, 1)
    ops[:] = [op for op in ops if op["op"] != "barrier"]
    error = expect_error("barrier", plan)
    assert error.op == "put_with_signal" and error.src_line.startswith("library.py:")
    assert "reduce" in str(error) and "output" in str(error)


def test_cross_threadblock_dependency_needs_a_semaphore():
    def program(with_loopback):
        prog = Program("all_gather", 1, chunks=1)
        rank = prog.rank(0)
        rank.copy(rank.output[0], rank.input[0], tb=0)
        if with_loopback:  # a channel from rank 0 to itself orders its two thread blocks
            local = MemoryChannel(prog, 0, 0)
            local.signal(tb=0)
            local.wait(tb=1)
        rank.copy(rank.output[0], rank.output[0], tb=1)
        return prog

    error = expect_error("race", program(with_loopback=False))
    assert (error.threadblock, error.op) == (1, "copy")
    plan = program(with_loopback=True).lower()
    assert [ch["peer"] for ch in plan["ranks"][0]["channels"]] == [0, 0]


def test_unmatched_signal():
    plan = library.allgather_allpairs(2).lower()
    ops = ops_of(plan, 0)
    ops.append({"op": "signal", "channel": ops[0]["channel"]})
    error = expect_error("sync", plan)
    assert error.rank == 0 and "unmatched signal" in str(error)


def test_plain_read_of_packets():
    plan = library.allreduce_2pa_ll(2).lower()
    ops = ops_of(plan, 0)
    read = ops[index_of(ops, "read_packets")]
    ops[index_of(ops, "read_packets")] = {"op": "copy", "dst": read["dst"], "src": read["src"]}
    error = expect_error("packets", plan)
    assert error.op == "copy" and "read_packets" in str(error)


def test_packets_from_the_wrong_sender():
    prog = Program("all_gather", 3, chunks=1, scratch_chunks=3, protocol="LL")
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        rank.copy(rank.output.block(r)[0], rank.input[0])
        for p in prog.peers(r):
            pipes[r, p].put_packets(prog.rank(p).scratch[r], rank.input[0])
        for p in prog.peers(r):
            pipes[p, r].read_packets(rank.output.block(p)[0], rank.scratch[(p + 1) % 3 if r == 0 else p])
    error = expect_error("packets", prog)
    assert error.rank == 0 and "not from this channel's sender" in str(error)


def test_channel_endpoint_shared_by_two_threadblocks():
    prog = Program("all_gather", 2, chunks=1, scratch_chunks=2)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        rank.copy(rank.output.block(r)[0], rank.input[0])
        pipes[r, 1 - r].put(prog.rank(1 - r).scratch[0], rank.input[0], tb=0)
        pipes[r, 1 - r].signal(tb=1)
        pipes[1 - r, r].wait()
        rank.copy(rank.output.block(1 - r)[0], rank.scratch[0])
    error = expect_error("channel", prog)
    assert "one thread block" in str(error)


def test_writes_outside_scratch_and_into_input():
    prog = Program("all_gather", 2, chunks=1, scratch_chunks=2)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        pipes[r, 1 - r].put(prog.rank(1 - r).output.block(r)[0], rank.input[0])
    assert "only use scratch" in str(expect_error("buffer", prog))

    prog = Program("all_reduce", 1, chunks=1)
    prog.rank(0).copy(prog.rank(0).input[0], prog.rank(0).input[0])
    assert "read-only" in str(expect_error("buffer", prog))


def test_read_of_nothing_is_undefined():
    prog = Program("all_reduce", 1, chunks=1, scratch_chunks=1)
    rank = prog.rank(0)
    line = this_line()
    rank.reduce(rank.output[0], [rank.input[0], rank.scratch[0]])
    error = expect_error("undefined", prog)
    assert error.src_line == line


def test_mistakes_caught_while_writing_the_program():
    prog = Program("all_reduce", 2, chunks=1, scratch_chunks=1)
    pipe = MemoryChannel(prog, 0, 1)
    line = this_line(2)
    with pytest.raises(VerificationError) as info:
        pipe.put(prog.rank(0).scratch[0], prog.rank(0).input[0])
    assert info.value.kind == "program" and info.value.src_line == line
    assert "chunk of rank 1" in str(info.value)
    with pytest.raises(VerificationError, match="two sources"):
        prog.rank(0).reduce(prog.rank(0).output[0], [prog.rank(0).input[0]])
    with pytest.raises(VerificationError, match="same number of chunks"):
        prog.rank(0).copy(prog.rank(0).output[0:1], prog.rank(0).scratch[0:2])
    with pytest.raises(VerificationError, match="unknown collective"):
        Program("broadcast", 2)


def test_a_permutation_plan_is_held_to_its_pairs():
    """The plan's pairs are its postcondition: a destination must hold its source's input, and a rank no pair
    sends to must have no output written (its executor zeroes it)."""
    from tests.dsl.test_dsl_plan import shift_program

    plan = shift_program(3, [(0, 1), (1, 2)]).lower()
    for pairs, text in (([[0, 2], [1, 1]], "permute leaves rank 1 output[0] = input[0] of ranks [0]; expected "
                                             "input[0] of ranks [1]"),
                        ([[1, 2]], "permute leaves rank 1 output[0] = input[0] of ranks [0]; expected nothing")):
        edited = dict(plan, permutation=pairs)
        error = expect_error("postcondition", edited)
        assert text in str(error)
