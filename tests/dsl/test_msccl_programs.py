"""MSCCLang programs (tests/dsl/msccl_programs.py) lowered to plans: each verifies, passes Check(), and its plan
computes the collective on random data through the numpy interpreter, for several world sizes, both protocols,
one and two instances, and element counts that leave chunks short or empty. Their MSCCL-IR loads back
(``load_plan``) into plans that compute the same."""

import json

import numpy as np
import pytest

from jax_mscclpp.dsl import VerificationError, library, run_plan, verify
from jax_mscclpp.dsl.load_plan import load_plan
from jax_mscclpp.dsl.msccl import PROTOCOLS, Buffer, MSCCLProgram, chunk
from jax_mscclpp.dsl.msccl.collectives import AllGather
from jax_mscclpp.dsl.msccl.topologies import ring
from tests.dsl import msccl_programs as programs
from tests.dsl import mscclpp_chunk_programs
from tests.dsl.test_dsl_simulate import expected_outputs

BLOCK_COUNTS = (1, 7, 33)
REDUCTIONS = {"sum": np.add, "max": np.maximum}


def assert_computes(plan, rng, dtype="float32", op="sum"):
    blocks = plan["buffers"]["input"]["blocks"]
    for block_count in BLOCK_COUNTS:
        if dtype == "float32":
            inputs = [rng.standard_normal(blocks * block_count).astype(dtype) for _ in range(plan["world_size"])]
        else:
            inputs = [rng.integers(-1000, 1000, blocks * block_count).astype(dtype) for _ in range(plan["world_size"])]
        outputs = run_plan(plan, inputs, op)
        wanted = expected_outputs(plan["collective"], inputs, REDUCTIONS[op], plan.get("permutation"))
        for rank, (ours, reference) in enumerate(zip(outputs, wanted)):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank}")


# (name, builder taking (world size, protocol, instances), world sizes)
PROGRAMS = [
    ("ring_inplace", programs.allreduce_ring, (2, 3, 5)),
    ("ring_out_of_place", lambda n, p, i: programs.allreduce_ring(n, p, i, inplace=False), (2, 4)),
    ("allpairs_manual", programs.allreduce_allpairs, (2, 3, 5)),
    ("recursive_halving_doubling", programs.allreduce_recursive_halving_doubling, (2, 4, 8)),
    ("hierarchical", lambda n, p, i: programs.allreduce_hierarchical(2, n // 2, p, i), (4, 6)),
    ("allgather_ring", programs.allgather_ring, (2, 3, 5)),
    ("allgather_ring_inplace", lambda n, p, i: programs.allgather_ring(n, p, i, inplace=True), (3, 4)),
    ("reducescatter_ring", lambda n, p, i: programs.reducescatter_ring(n, p, i, chunk_factor=2), (2, 3, 5)),
    ("alltoall_two_step", lambda n, p, i: programs.alltoall_two_step(2, n // 2, p, i), (4, 6)),
    ("alltonext", programs.alltonext, (2, 3, 5)),
    ("alltonext_direct", lambda n, p, i: programs.alltonext(n, p, i, relay=False), (2, 4)),
]


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
@pytest.mark.parametrize("instances", [1, 2])
@pytest.mark.parametrize("name,build,sizes", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_program_lowers_verifies_and_computes(rng, name, build, sizes, protocol, instances):
    for n in sizes:
        prog = build(n, protocol, instances)
        assert prog.check()
        plan = verify(prog.lower())
        assert plan["world_size"] == n and plan["name"] == prog.name
        between_ranks = {c["protocol"] for r, rank in enumerate(plan["ranks"]) for c in rank["channels"]
                         if c["peer"] != r}
        within_ranks = {c["protocol"] for r, rank in enumerate(plan["ranks"]) for c in rank["channels"]
                        if c["peer"] == r}
        assert between_ranks == {PROTOCOLS[protocol]} and within_ranks <= {"HB"}
        assert plan["buffers"]["scratch"]["packets"] == (protocol == "LL")
        assert plan["buffers"]["input"]["chunks_per_block"] == prog.collective.chunk_factor * instances
        assert_computes(plan, rng)


def test_integer_max_and_ll128(rng):
    """LL128 lowers to LL channels; a max reduction of integers is exact."""
    plan = programs.allreduce_ring(4, "LL128").lower()
    assert {c["protocol"] for r, rank in enumerate(plan["ranks"]) for c in rank["channels"] if c["peer"] != r} == {"LL"}
    assert_computes(plan, rng, dtype="int32", op="max")


def test_to_program_replicates_like_the_dsl():
    prog = programs.allreduce_ring(3, instances=2)
    program = prog.to_program()
    assert program.collective == "all_reduce" and program.world_size == 3
    assert program.lower(instances=2) == prog.lower()


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
@pytest.mark.parametrize("build", [lambda p: programs.allreduce_ring(4, p, 2),
                                   lambda p: programs.allreduce_allpairs(3, p),
                                   lambda p: programs.allreduce_recursive_halving_doubling(4, p, 2),
                                   lambda p: programs.allgather_ring(5, p, inplace=True),
                                   lambda p: programs.reducescatter_ring(3, p, chunk_factor=2),
                                   lambda p: programs.allreduce_ring(3, p, inplace=False),
                                   lambda p: programs.alltoall_two_step(2, 2, p)],
                         ids=["ring", "allpairs", "rhd", "allgather", "reducescatter", "ring_out_of_place",
                              "alltoall"])
def test_msccl_ir_loads_back(rng, build, protocol):
    assert_computes(load_plan(build(protocol).generate_xml()), rng)


# Out of place, these reduce into input chunks, so their MSCCL-IR writes the input: (world size, protocol,
# instances) -> MSCCLProgram.
WRITES_INPUT = {
    "reducescatter_ring": lambda n, p, i: programs.reducescatter_ring(n, p, i, chunk_factor=2),
    "ring_out_of_place": lambda n, p, i: programs.allreduce_ring(n, p, i, inplace=False),
}


@pytest.mark.parametrize("protocol", ["Simple", "LL", "LL128"])
@pytest.mark.parametrize("name", sorted(WRITES_INPUT))
def test_msccl_ir_that_writes_its_input_writes_a_private_copy(rng, name, protocol):
    """The steps that write a rank's input write a copy of it in scratch; those that read it before any step wrote
    it read the input itself, so no prologue copies it and no thread block waits for one; nothing writes the
    input (the verifier) and the plan computes the collective."""
    for n in range(2, 6):
        for instances in (1, 2):
            xml = WRITES_INPUT[name](n, protocol, instances).generate_xml()
            assert 'dstbuf="i"' in xml
            plan = load_plan(xml)
            for ranked in plan["ranks"]:
                assert "prologue" not in json.dumps(ranked)
            assert any('"input"' in json.dumps(ranked) for ranked in plan["ranks"])
            assert_computes(plan, rng)


def test_msccl_ir_of_a_program_runs_what_the_program_lowers_to(rng):
    """In place, MSCCL-IR's input is its output: the all-pairs all-reduce reads each chunk from the input until a
    step writes it, and every output chunk is written, so no prologue copies it; a Simple receive's copy out of
    its slot is forwarded to the reduction that reads it. The plan loaded from the XML runs as many thread blocks
    as the program lowered directly (one a rank: both merge), each with the same operations (in the order of its
    own symbolic run), over as many channels."""
    for protocol in ("LL", "Simple"):
        program = programs.allreduce_allpairs(4, protocol)
        direct, imported = program.lower(), load_plan(program.generate_xml())
        for ours, theirs in zip(direct["ranks"], imported["ranks"]):
            assert len(ours["threadblocks"]) == len(theirs["threadblocks"]) == 1
            assert sorted(op["op"] for op in ours["threadblocks"][0]["ops"]) == \
                sorted(op["op"] for op in theirs["threadblocks"][0]["ops"])
            assert len(ours["channels"]) == len(theirs["channels"])
        assert "prologue" not in json.dumps(imported)
        assert_computes(imported, rng)


@pytest.mark.parametrize("buffer", [Buffer.input, Buffer.output])
def test_a_copy_into_input_or_output_needs_an_index(buffer):
    """The message names the buffer as programs do (``output``), not by its MSCCL-IR code (``o``)."""
    with MSCCLProgram("no_index", ring(2), AllGather(2, 1, False), 1):
        with pytest.raises(VerificationError, match=rf"\[program\] at test_msccl_programs\.py:\d+: copy into "
                                                    rf"{buffer.name}: give an index \(only scratch buffers append\)"):
            chunk(0, Buffer.input, 0).copy(1, buffer)


@pytest.mark.parametrize("protocol", ["LL", "Simple"])
def test_the_allpairs_allreduce_takes_our_dsls_scratch_through_every_front_end(protocol):
    # Scratch is compacted per rank, so where each front end placed its chunks no longer sizes the plan: the
    # all-pairs all-reduce needs what ours does, 2 (n - 1) chunks a rank and instance.
    n, k = 8, 4
    ours = library.PROGRAMS["allreduce_2pa_ll" if protocol == "LL" else "allreduce_2pa_hb"](n).lower(instances=k)
    theirs = programs.allreduce_allpairs(n, protocol, k)
    chunk_program = (mscclpp_chunk_programs.allreduce_allpairs_ll if protocol == "LL"
                     else mscclpp_chunk_programs.allreduce_two_phase)(n, k)
    plans = [ours, theirs.lower(), load_plan(theirs.generate_xml()), chunk_program.plan(),
             load_plan(chunk_program.to_json())]
    assert [plan["buffers"]["scratch"]["chunks_per_block"] for plan in plans] == [2 * (n - 1) * k] * len(plans)
