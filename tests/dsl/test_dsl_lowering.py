"""Lowering: fusion, barrier placement, replication, thread block groups and source lines."""

import inspect

import numpy as np
import pytest

from jax_mscclpp.dsl import (
    MemoryChannel,
    PortChannel,
    Program,
    ThreadBlockGroup,
    VerificationError,
    all_pairs,
    library,
    plan_to_json,
)
from jax_mscclpp.dsl.access import placed_refs
from jax_mscclpp.dsl.lowering import lower
from jax_mscclpp.dsl.simulate import run_plan


def op_names(plan, rank=0, tb=0):
    return [op["op"] for op in plan["ranks"][rank]["threadblocks"][tb]["ops"]]


def count_ops(plan, name):
    return sum(op["op"] == name for rank in plan["ranks"] for tb in rank["threadblocks"] for op in tb["ops"])


def simulate_all_reduce(plan, count=37):
    """Run an all_reduce plan on random int32 data and compare with numpy."""
    rng = np.random.default_rng(0)
    inputs = [rng.integers(1, 100, count).astype(np.int32) for _ in range(plan["world_size"])]
    for output in run_plan(plan, inputs, "sum"):
        np.testing.assert_array_equal(output, np.sum(inputs, axis=0, dtype=np.int32))


def assert_same_float32_sums(fused, unfused):
    """The fused plan keeps the unfused plan's order of reduction: float32 sums of numbers of many magnitudes equal
    bit for bit."""
    rng = np.random.default_rng(5)
    inputs = [(rng.standard_normal(41) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
              for _ in range(fused["world_size"])]
    for got, want in zip(run_plan(fused, inputs, "sum"), run_plan(unfused, inputs, "sum")):
        assert got.tobytes() == want.tobytes()


def reduce_then_put_program(channel_type):
    """2-rank all-reduce: reduce chunk r, put the result to the peer, signal; copy what arrives."""
    prog = Program("all_reduce", 2, chunks=2, scratch_chunks=4)
    pipes = all_pairs(prog, channel_type)
    for r, rank in enumerate(prog.ranks):
        p = 1 - r
        pipes[r, p].put(prog.rank(p).scratch[r], rank.input[p])
        pipes[r, p].signal()
        pipes[p, r].wait()
        rank.reduce(rank.output[r], [rank.input[r], rank.scratch[p]])
        pipes[r, p].put(prog.rank(p).scratch[2 + r], rank.output[r])
        pipes[r, p].signal()
        pipes[p, r].wait()
        rank.copy(rank.output[p], rank.scratch[2 + p])
        if channel_type is PortChannel:
            pipes[r, p].flush()
    return prog


def test_reduce_then_put_fuses_into_reduce_put():
    prog = reduce_then_put_program(MemoryChannel)
    fused = lower(prog, compact=False)  # the program's scratch indices
    assert op_names(fused) == ["put_with_signal", "wait", "reduce_put", "signal", "wait", "copy"]
    reduce_put = fused["ranks"][0]["threadblocks"][0]["ops"][2]
    assert reduce_put["dst"] == {"buffer": "output", "index": 0, "count": 1}
    assert reduce_put["remotes"] == [{"channel": 0, "dst": {"buffer": "scratch", "index": 2, "count": 1}}]
    unfused = prog.lower(fuse=False)
    # Without fusion the put reads what the reduce wrote: a barrier separates them.
    assert op_names(unfused) == ["put", "signal", "wait", "reduce", "barrier", "put", "signal", "wait", "copy"]
    simulate_all_reduce(fused)
    simulate_all_reduce(unfused)


def test_puts_of_a_reduction_with_signals_between_fuse_into_reduce_put():
    """3-rank all-reduce whose rank sends its reduced chunk to one peer, signals it, then the next: the puts move
    before the signals into one reduce_put, and the signals follow in their order."""
    prog = Program("all_reduce", 3, chunks=3, scratch_chunks=6)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        peers = prog.peers(r)
        for p in peers:
            pipes[r, p].put(prog.rank(p).scratch[r], rank.input[p])
            pipes[r, p].signal()
        for p in peers:
            pipes[p, r].wait()
        rank.reduce(rank.output[r], [rank.input[r]] + [rank.scratch[p] for p in peers])
        for p in peers:
            pipes[r, p].put(prog.rank(p).scratch[3 + r], rank.output[r])
            pipes[r, p].signal()
        for p in peers:
            pipes[p, r].wait()
            rank.copy(rank.output[p], rank.scratch[3 + p])
    fused = prog.lower()
    assert op_names(fused) == ["put_with_signal"] * 2 + ["wait"] * 2 + ["reduce_put", "signal", "signal"] + \
        ["wait", "copy"] * 2
    reduce_put = fused["ranks"][0]["threadblocks"][0]["ops"][4]
    assert [remote["channel"] for remote in reduce_put["remotes"]] == [0, 1]
    assert [op["channel"] for op in fused["ranks"][0]["threadblocks"][0]["ops"][5:7]] == [0, 1]
    simulate_all_reduce(fused)
    simulate_all_reduce(prog.lower(fuse=False))


def test_port_channel_keeps_the_reduce_and_fuses_put_with_signal():
    plan = reduce_then_put_program(PortChannel).lower()
    # The DMA reads memory, so the reduction stays. put_with_signal is a barrier point only after its put, whose
    # staging copy reads what the reduction wrote: a barrier separates them.
    assert op_names(plan) == ["put_with_signal", "wait", "reduce", "barrier", "put_with_signal", "wait", "copy",
                              "flush"]
    simulate_all_reduce(plan)


def test_put_then_signal_fuses_only_on_the_same_channel():
    prog = Program("all_gather", 3, chunks=1, scratch_chunks=3)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        first, second = prog.peers(r)
        pipes[r, first].put(prog.rank(first).scratch[r], rank.input[0])
        pipes[r, second].put(prog.rank(second).scratch[r], rank.input[0])
        pipes[r, first].signal()  # follows a put on another channel: not fused
        pipes[r, second].signal()  # follows the put? no: follows a signal
        rank.copy(rank.output.block(r)[0], rank.input[0])
        for p in prog.peers(r):
            pipes[p, r].wait()
            rank.copy(rank.output.block(p)[0], rank.scratch[p])
    plan = prog.lower()
    assert op_names(plan)[:4] == ["put", "put", "signal", "signal"]
    assert count_ops(plan, "put_with_signal") == 0


def test_read_packets_reduce_put_packets_fuse_into_one_packet_op():
    n = 4
    fused = lower(library.allreduce_2pa_ll(n), compact=False)  # the program's scratch indices
    unfused = library.allreduce_2pa_ll(n).lower(fuse=False)
    peers = n - 1
    # Unfused, the reduction reads the unpacked temporaries and the puts read its result: two barriers.
    assert op_names(unfused) == (["put_packets"] * peers + ["read_packets"] * peers + ["barrier", "reduce", "barrier"]
                                 + ["put_packets"] * peers + ["read_packets"] * peers)
    assert op_names(fused) == ["put_packets"] * peers + ["reduce_packets"] + ["read_packets"] * peers
    op = fused["ranks"][0]["threadblocks"][0]["ops"][peers]
    assert [item["src"]["index"] for item in op["packet_srcs"]] == [1, 2, 3]
    assert [item["dst"]["index"] for item in op["remotes"]] == [n] * peers
    assert op["srcs"] == [{"buffer": "input", "index": 0, "count": 1}]
    simulate_all_reduce(fused)
    simulate_all_reduce(unfused)


def test_a_temporary_read_twice_is_not_fused_away():
    prog = Program("all_reduce", 2, chunks=1, scratch_chunks=3, protocol="LL")
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        pipes[r, 1 - r].put_packets(prog.rank(1 - r).scratch[0], rank.input[0])
        pipes[1 - r, r].read_packets(rank.scratch[1], rank.scratch[0])
        rank.reduce(rank.output[0], [rank.input[0], rank.scratch[1]])
        rank.copy(rank.scratch[2], rank.scratch[1])  # a second reader of the temporary
    assert op_names(prog.lower()) == ["put_packets", "read_packets", "barrier", "reduce", "copy"]


def reduce_chain_program(links: str):
    """3-rank all-reduce whose rank reduces what arrives one source at a time, each peer's wait just before the link
    that reads its chunk: through a scratch temporary (as MSCCLang's ``c = c.reduce(...)`` lowers), ``links``
    "temporary"; the same with a second reader of the temporary, "temporary read twice"; accumulating in the output
    (as MSCCL-IR's reductions in place load), "in place"."""
    prog = Program("all_reduce", 3, chunks=1, scratch_chunks=5)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        for p in prog.peers(r):
            pipes[r, p].put(prog.rank(p).scratch[r], rank.input[0])
            pipes[r, p].signal()
        first, second = prog.peers(r)
        link = rank.output[0] if links == "in place" else rank.scratch[3]
        if links == "in place":
            rank.copy(link, rank.input[0])
        pipes[first, r].wait()
        rank.reduce(link, [link if links == "in place" else rank.input[0], rank.scratch[first]])
        pipes[second, r].wait()
        rank.reduce(rank.output[0], [link, rank.scratch[second]])
        if links == "temporary read twice":
            rank.copy(rank.scratch[4], rank.scratch[3])
    return prog


@pytest.mark.parametrize("links", ["temporary", "in place"])
def test_a_chain_of_reductions_is_one_reduction(links):
    fused = lower(reduce_chain_program(links), compact=False)  # the program's scratch indices
    unfused = reduce_chain_program(links).lower(fuse=False)
    assert count_ops(unfused, "reduce") == 2 * 3
    # In place, the copy of the input that the chain starts from folds in too: a reduction of one source.
    assert op_names(fused) == ["put_with_signal", "put_with_signal", "wait", "wait", "reduce"]
    (reduction,) = [op for op in fused["ranks"][0]["threadblocks"][0]["ops"] if op["op"] == "reduce"]
    first = {"buffer": "input", "index": 0, "count": 1}
    assert reduction["dst"] == {"buffer": "output", "index": 0, "count": 1}
    assert reduction["srcs"] == [first, {"buffer": "scratch", "index": 1, "count": 1},
                                 {"buffer": "scratch", "index": 2, "count": 1}]
    simulate_all_reduce(fused)
    assert_same_float32_sums(fused, unfused)


def test_a_chain_link_read_twice_stays():
    assert count_ops(reduce_chain_program("temporary read twice").lower(), "reduce") == 2 * 3


def packet_chain_program(last_link: str):
    """4-rank LL all-reduce whose rank unpacks each peer's chunk just before the link of an accumulation in its
    output that adds it (as MSCCL++'s ``reduce`` of packet chunks, one peer at a time, loads): ``last_link``
    "one source" adds one peer a link; "two sources" has the last link add the last two peers, the last peer first
    and from a temporary that a copy reads too (so that it stays a plain source, before the packets)."""
    n = 4
    prog = Program("all_reduce", n, chunks=1, scratch_chunks=2 * n + 1, protocol="LL")
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        for p in prog.peers(r):
            pipes[r, p].put_packets(prog.rank(p).scratch[r], rank.input[0])
        first, *others = prog.peers(r)
        pipes[first, r].read_packets(rank.scratch[n + first], rank.scratch[first])
        rank.reduce(rank.output[0], [rank.input[0], rank.scratch[n + first]])
        links = [[p] for p in others] if last_link == "one source" else [others[::-1]]
        for link in links:
            for p in link:
                pipes[p, r].read_packets(rank.scratch[n + p], rank.scratch[p])
            rank.reduce(rank.output[0], [rank.output[0]] + [rank.scratch[n + p] for p in link])
        if last_link == "two sources":
            rank.copy(rank.scratch[2 * n], rank.scratch[n + others[-1]])
    return prog


@pytest.mark.parametrize("last_link", ["one source", "two sources"])
def test_a_chain_of_packet_reductions_is_one_reduction_where_its_order_allows(last_link):
    fused = lower(packet_chain_program(last_link), compact=False)  # the program's scratch indices
    unfused = packet_chain_program(last_link).lower(fuse=False)
    peers = [1, 2, 3]
    reductions = [op for op in fused["ranks"][0]["threadblocks"][0]["ops"] if op["op"] == "reduce_packets"]
    if last_link == "one source":
        # i0 (+) P1 (+) P2 (+) P3: the plain source first, then the packets in the order the chain adds them.
        (reduction,) = reductions
        assert reduction["srcs"] == [{"buffer": "input", "index": 0, "count": 1}]
        assert [item["src"]["index"] for item in reduction["packet_srcs"]] == peers
    else:
        # The last link's plain source would come before the packets of both links: the links stay apart.
        assert len(reductions) == 2
        assert [item["src"]["index"] for item in reductions[0]["packet_srcs"]] == [1]
        assert reductions[1]["srcs"][0] == {"buffer": "output", "index": 0, "count": 1}
    simulate_all_reduce(fused)
    assert_same_float32_sums(fused, unfused)


def barrier_program():
    """One rank, one thread block: a chain of copies with DSL barriers, most of them useless."""
    prog = Program("all_gather", 2, chunks=1, scratch_chunks=3)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        rank.barrier()
        rank.barrier()  # back to back, before anything
        rank.copy(rank.scratch[1], rank.input[0])
        rank.copy(rank.output.block(r)[0], rank.input[0])  # reads input only: no conflict
        rank.barrier()  # needed: the next copy reads scratch[1]
        rank.copy(rank.scratch[0], rank.scratch[1])
        rank.barrier()  # needed: the put reads scratch[0] (put_with_signal is a barrier point after its put)
        pipes[r, 1 - r].put(prog.rank(1 - r).scratch[2], rank.scratch[0])
        rank.barrier()  # between a put and a signal: does not stop their fusion
        pipes[r, 1 - r].signal()
        rank.barrier()  # right after a barrier point
        pipes[1 - r, r].wait()
        rank.copy(rank.output.block(1 - r)[0], rank.scratch[2])
        rank.barrier()  # at the end
    return prog


def test_redundant_barriers_are_removed_and_needed_ones_kept():
    prog = barrier_program()
    written = sum(op.name == "barrier" for op in prog.operations if op.rank == 0)
    assert written == 7
    plan = prog.lower()
    assert op_names(plan) == ["copy", "copy", "barrier", "copy", "barrier", "put_with_signal", "wait", "copy"]
    assert count_ops(plan, "barrier") == 2 * 2
    assert op_names(prog.lower(fuse=False)) == ["copy", "copy", "barrier", "copy", "barrier", "put", "signal",
                                                "wait", "copy"]
    assert plan["ranks"][0]["threadblocks"][0]["ops"][2] == {"op": "barrier"}


def test_barrier_placement_is_minimal_for_dependence_chains():
    prog = Program("all_reduce", 1, chunks=2, scratch_chunks=3)
    rank = prog.rank(0)
    rank.copy(rank.scratch[0], rank.input[0])
    rank.copy(rank.scratch[1], rank.input[1])  # independent of the first: no barrier
    rank.reduce(rank.scratch[2], [rank.scratch[0], rank.scratch[1]])  # both chains need one barrier, once
    rank.copy(rank.output[0], rank.scratch[2])
    plan = prog.lower(verify=False)  # structure only: this program does not compute an all_reduce
    assert op_names(plan) == ["copy", "copy", "barrier", "reduce", "barrier", "copy"]


@pytest.mark.parametrize("name", sorted(library.PROGRAMS))
def test_replication_doubles_threadblocks_and_channels(name):
    single = library.PROGRAMS[name](4).lower()
    double = library.PROGRAMS[name](4).lower(instances=2)
    for one, two in zip(single["ranks"], double["ranks"]):
        assert len(two["threadblocks"]) == 2 * len(one["threadblocks"])
        pipes = [ch for ch in one["channels"] if ch["type"] != "switch"]
        switches = [ch for ch in one["channels"] if ch["type"] == "switch"]
        assert len(two["channels"]) == 2 * len(pipes) + len(switches)
    for buffer in ("input", "output", "scratch"):
        assert double["buffers"][buffer]["chunks_per_block"] == 2 * single["buffers"][buffer]["chunks_per_block"]
    assert count_ops(double, "put_with_signal") == 2 * count_ops(single, "put_with_signal")


def test_replicated_instances_use_their_own_chunks():
    plan = lower(library.allreduce_1pa_ll(2), instances=3, compact=False)  # the program's scratch indices
    ops = [tb["ops"] for tb in plan["ranks"][0]["threadblocks"]]
    assert [tb[0]["src"]["index"] for tb in ops] == [0, 1, 2]  # input chunk of instance i
    assert [tb[0]["dst"]["index"] for tb in ops] == [0, 4, 8]  # scratch[0] of instance i (4 per instance)
    assert [tb[0]["channel"] for tb in ops] == [0, 2, 4]
    simulate_all_reduce(plan, count=100)


def scratch_used(plan, rank):
    """The scratch chunks of ``rank`` that its operations and its peers' name."""
    used = set()
    for r, rank_plan in enumerate(plan["ranks"]):
        for tb in rank_plan["threadblocks"]:
            for op in tb["ops"]:
                for place in placed_refs(op, r, rank_plan["channels"]):
                    if place.rank == rank and place.ref["buffer"] == "scratch":
                        used.update(range(place.ref["index"], place.ref["index"] + place.ref["count"]))
    return used


def test_each_ranks_scratch_is_numbered_densely():
    # The program gives rank r's chunk from rank p scratch[p] and the reduced chunk p scratch[n + p]: no rank uses
    # its own two indices, and the fused-away temporaries scratch[2n + p] none. Compacted, each rank's 2 (n - 1)
    # chunks an instance are its scratch 0 .. 2 (n - 1) k - 1, in the program's order.
    n, k = 8, 4
    spread = lower(library.allreduce_2pa_ll(n), instances=k, compact=False)
    plan = library.allreduce_2pa_ll(n).lower(instances=k)
    assert spread["buffers"]["scratch"]["chunks_per_block"] == 3 * n * k
    assert plan["buffers"]["scratch"]["chunks_per_block"] == 2 * (n - 1) * k
    assert all(scratch_used(plan, r) == set(range(2 * (n - 1) * k)) for r in range(n))
    for r in range(n):
        order = sorted(scratch_used(spread, r))
        moved = {(op["op"], ref["index"]) for op in plan["ranks"][r]["threadblocks"][0]["ops"]
                 for ref in [item["src"] for item in op.get("packet_srcs", [])]}
        assert moved == {("reduce_packets", order.index(p)) for p in range(n) if p != r}
    simulate_all_reduce(plan)


def test_a_plan_with_a_switch_channel_keeps_its_scratch_indices():
    # A switch channel names one index in every member's scratch at once.
    program = library.allreduce_2pa_nvls(4)
    assert program.lower() == lower(library.allreduce_2pa_nvls(4), compact=False)


def test_replicating_a_chunk_range_across_blocks_is_refused():
    prog = Program("all_gather", 2, chunks=1, scratch_chunks=2)
    for rank in prog.ranks:
        rank.copy(rank.output[0:2], rank.scratch[0:2])
    with pytest.raises(VerificationError, match="crosses a block boundary"):
        prog.lower(instances=2, verify=False)


def group_program(receiver_group):
    """2-rank all-reduce over 4 chunks: each rank sends all 4 chunks to the peer with a group of 2 thread
    blocks; the receiver waits with ``receiver_group`` and reduces with it."""
    prog = Program("all_reduce", 2, chunks=4, scratch_chunks=4)
    pipes = all_pairs(prog, MemoryChannel)
    senders = ThreadBlockGroup([0, 1])
    for r, rank in enumerate(prog.ranks):
        p = 1 - r
        pipes[r, p].put(prog.rank(p).scratch[0:4], rank.input[0:4], tb=senders)
        pipes[r, p].signal(tb=senders)
        pipes[p, r].wait(tb=receiver_group)
        rank.reduce(rank.output[0:4], [rank.input[0:4], rank.scratch[0:4]], tb=receiver_group)
    return prog


def test_thread_block_group_shares_chunks_and_channel_copies():
    plan = group_program(ThreadBlockGroup([2, 3])).lower()
    rank0 = plan["ranks"][0]
    assert len(rank0["threadblocks"]) == 4
    assert len(rank0["channels"]) == 4  # two copies of each direction's pipe
    puts = [tb["ops"][0] for tb in rank0["threadblocks"][:2]]
    assert [(op["op"], op["src"]["index"], op["src"]["count"], op["channel"]) for op in puts] == [
        ("put_with_signal", 0, 2, 0), ("put_with_signal", 2, 2, 1)]
    assert [op["op"] for op in rank0["threadblocks"][2]["ops"]] == ["wait", "reduce"]
    simulate_all_reduce(plan, count=13)


def test_thread_block_group_mismatch_is_caught():
    with pytest.raises(VerificationError) as info:
        group_program(2).lower()  # one thread block waits for the first half only
    assert info.value.kind in ("race", "sync")


def test_source_lines_point_at_the_dsl_calls():
    prog = Program("all_reduce", 1, chunks=1)
    rank = prog.rank(0)
    line = inspect.currentframe().f_lineno + 1
    rank.copy(rank.output[0], rank.input[0])
    (op,) = prog.lower()["ranks"][0]["threadblocks"][0]["ops"]
    assert op["src_line"] == f"test_dsl_lowering.py:{line}"


def test_lowering_is_deterministic_and_binds_rank_count_late():
    for n in (2, 4, 8):
        assert plan_to_json(library.allreduce_2pr(n).lower()) == plan_to_json(library.allreduce_2pr(n).lower())
        plan = library.allreduce_2pa_hb(n).lower()
        assert plan["world_size"] == n and len(plan["ranks"]) == n


def test_lower_rejects_bad_instances():
    with pytest.raises(VerificationError, match="instances"):
        library.allreduce_2pa_hb(2).lower(instances=0)
