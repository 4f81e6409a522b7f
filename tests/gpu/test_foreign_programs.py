"""Programs written in the two foreign DSLs, on the GPU plan executor (virtual ranks of one GPU): MSCCLang's
(tests/dsl/msccl_programs.py, both protocols) and MSCCL++'s (both APIs), each lowered directly and loaded back from
the MSCCL-IR or executor JSON it writes, on 2, 4 and 8 ranks, against the numpy interpreter and numpy
(test_executor.check). Outputs are poisoned before every call; the element counts leave chunks short or empty.

A plan whose blocks on every rank cannot be resident on one GPU at once is skipped, saying so (PlanRanks refuses
it before launching). Every program's plan file loads back: a barrier across thread blocks travels as MSCCL++'s
barrier operation, a switch channel over scratch as its glre and gstore (run on the executor's emulated switch
channel). AllToNext's MSCCL-IR, a custom collective's, loads with the pairs its program implements (load_plan's
permutation=).
"""

import pytest

from tests.dsl import msccl_programs, mscclpp_channel_programs, mscclpp_chunk_programs

from .test_executor import check, random_input

pytestmark = pytest.mark.gpu

NRANKS = (2, 4, 8)
SIZES = (1, 3, 1023)  # elements per block
CASES = (("float32", "sum"), ("int32", "max"))


# "api-name" -> builder of (world size)
MSCCLPP = {f"{api.__name__.rsplit('_', 2)[1]}-{name}": fn
           for api in (mscclpp_chunk_programs, mscclpp_channel_programs) for name, (fn, _) in api.PROGRAMS.items()}


def run_plan_on_gpu(plan, rng):
    from tests.harness.plan_ranks import NotResidentError, PlanRanks

    with PlanRanks(plan, max_block_count=max(SIZES), itemsize=4, timeout_s=20) as pr:
        for dtype, op in CASES:
            try:
                pr.check_resident(dtype, op)
            except NotResidentError as why:
                pytest.skip(str(why))
            for size in SIZES:
                inputs = [random_input(rng, dtype, pr.input_blocks * size) for _ in range(pr.nranks)]
                outputs = pr.run(inputs, op)
                check(plan, inputs, outputs, op, dtype, pieces=pr.launch_count(size, dtype) > 1)


def loaded(text, permutation=None):
    from jax_mscclpp.dsl import load_plan

    return load_plan(text, permutation=permutation)  # every program's plan file loads back (tests/dsl)


@pytest.mark.parametrize("form", ["program", "msccl_ir"])
@pytest.mark.parametrize("protocol", ["Simple", "LL"])
@pytest.mark.parametrize("nranks", NRANKS)
@pytest.mark.parametrize("name", sorted(msccl_programs.PROGRAMS))
def test_msccl_program(cuda, rng, name, nranks, protocol, form):
    build, written_for = msccl_programs.PROGRAMS[name]
    if not written_for(nranks):
        pytest.skip(f"{name} is written for other world sizes")
    program = build(nranks, protocol)
    if form == "program":
        plan = program.lower()
    else:  # a custom collective's MSCCL-IR states no postcondition: the caller names the pairs it implements
        plan = loaded(program.generate_xml(), permutation=program.collective.permutation)
    run_plan_on_gpu(plan, rng)


@pytest.mark.parametrize("form", ["program", "json"])
@pytest.mark.parametrize("nranks", NRANKS)
@pytest.mark.parametrize("name", sorted(MSCCLPP))
def test_mscclpp_program(cuda, rng, name, nranks, form):
    program = MSCCLPP[name](nranks)
    run_plan_on_gpu(program.plan() if form == "program" else loaded(program.to_json()), rng)


def test_every_msccl_program_runs_here():
    """Every MSCCLang test program is in the table the tests above run (AllToNext, a custom collective, as a plan
    of the permutation)."""
    written = {name for name in dir(msccl_programs)
               if name.startswith(("allreduce_", "allgather_", "reducescatter_", "alltoall_", "alltonext"))}
    used = {"allreduce_ring", "allreduce_allpairs", "allreduce_recursive_halving_doubling", "allreduce_hierarchical",
            "allgather_ring", "reducescatter_ring", "alltoall_two_step", "alltonext"}
    assert written == used, written ^ used
