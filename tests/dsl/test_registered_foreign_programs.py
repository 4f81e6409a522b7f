"""Programs written in MSCCL++'s DSL and in MSCCLang's run as algorithms of ours: registered with
``jax_mscclpp.register_algorithm`` (the written program, a function of the world size returning it, or its plan)
and forced with ``algorithm=name``, they match lax on 8 CPU devices; MSCCLang's AllToNext, a custom collective, as
a plan of the permutation that ``ppermute`` with its pairs runs, and no other permutation."""

import re

import jax
import pytest
from jax import lax

import jax_mscclpp as jm
from tests.dsl import msccl_programs, mscclpp_channel_programs, mscclpp_chunk_programs
from tests.helpers import P, compare_with_lax, random_array

CASES = [(api, name, fn, collective)
         for api in (mscclpp_channel_programs, mscclpp_chunk_programs)
         for name, (fn, collective) in api.PROGRAMS.items()]

# collective -> (ours with algorithm=name, lax's, output spec)
CALLS = {
    "all_reduce": (lambda name: lambda v: jm.all_reduce(v, "x", algorithm=name), lambda v: lax.psum(v, "x"), P()),
    "all_gather": (lambda name: lambda v: jm.all_gather(v, "x", algorithm=name), lambda v: lax.all_gather(v, "x"),
                   P("x")),
    "reduce_scatter": (lambda name: lambda v: jm.psum_scatter(v, "x", tiled=True, algorithm=name),
                       lambda v: lax.psum_scatter(v, "x", tiled=True), P("x")),
    "all_to_all": (lambda name: lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True, algorithm=name),
                   lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), P("x")),
    # AllToNext's pairs at 8 ranks
    "permute": (lambda name: lambda v: jm.ppermute(v, "x", ALL_TO_NEXT, algorithm=name),
                lambda v: lax.ppermute(v, "x", ALL_TO_NEXT), P("x")),
}
ALL_TO_NEXT = [(r, r + 1) for r in range(7)]


# What is registered: world-size function of the program -> source.
SOURCES = {
    "program": lambda fn: fn(8, 2),
    "function": lambda fn: lambda n: fn(n, 2),
    "plan": lambda fn: fn(8, 2).plan(),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("api,name,fn,collective", CASES, ids=[f"{c[0].__name__[15:]}-{c[1]}" for c in CASES])
def test_registered_program_matches_lax(mesh8, rng, api, name, fn, collective, source):
    entry = jm.register_algorithm(SOURCES[source](fn), name=f"mscclpp_{api.__name__[15:]}_{name}_{source}")
    runs_like_lax(mesh8, rng, entry)
    assert entry.plan_for(8) == fn(8, 2).plan()


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
@pytest.mark.parametrize("name", sorted(n for n, (_, written_for) in msccl_programs.PROGRAMS.items() if written_for(8)))
def test_registered_msccl_program_matches_lax(mesh8, rng, name, protocol):
    runs_like_lax(mesh8, rng, jm.register_algorithm(msccl_programs.PROGRAMS[name][0](8, protocol),
                                                    name=f"msccl_{name}_{protocol}"))


def runs_like_lax(mesh8, rng, entry):
    """The registered ``entry``, forced on 8 CPU devices, against lax on random float32 and int32; then it goes."""
    try:
        ours, reference, out_spec = CALLS[entry.plan_for(8)["collective"]]
        for dtype, per_rank in (("float32", 8 * 3), ("int32", 8 * 129)):
            x = random_array(rng, (8 * per_rank,), dtype)
            compare_with_lax(ours(entry.name), reference, mesh8, (x,), P("x"), out_spec)
    finally:
        jm.unregister_algorithm(entry.name)


def test_a_permutation_plan_runs_its_own_permutation_only(mesh8, rng):
    """Registered by size range, AllToNext's plan runs ppermute with its pairs; the reverse permutation runs ours
    (not the plan), and forcing the plan on it is refused at trace time, naming both permutations."""
    entry = jm.register_algorithm(msccl_programs.alltonext(8), name="msccl_alltonext_by_size")
    try:
        x = random_array(rng, (8 * 5,), "float32")
        ours, reference, out_spec = CALLS["permute"]
        compare_with_lax(lambda v: jm.ppermute(v, "x", ALL_TO_NEXT), reference, mesh8, (x,), P("x"), out_spec)
        explained = jm.explain(jax.shard_map(lambda v: jm.ppermute(v, "x", ALL_TO_NEXT), mesh=mesh8,
                                             in_specs=P("x"), out_specs=P("x")), x)
        assert [call.algorithm for call in explained] == [entry.name]
        back = [(dst, src) for src, dst in ALL_TO_NEXT]
        explained = jm.explain(jax.shard_map(lambda v: jm.ppermute(v, "x", back), mesh=mesh8,
                                             in_specs=P("x"), out_specs=P("x")), x)
        assert [call.algorithm for call in explained] != [entry.name]
        compare_with_lax(lambda v: jm.ppermute(v, "x", back), lambda v: lax.ppermute(v, "x", back), mesh8, (x,),
                         P("x"), P("x"))
        with pytest.raises(ValueError, match=r"implements the permutation \[\(0, 1\).*not this call's \[\(1, 0\)"):
            jax.jit(jax.shard_map(lambda v: jm.ppermute(v, "x", back, algorithm=entry.name), mesh=mesh8,
                                  in_specs=P("x"), out_specs=P("x")))(x)
    finally:
        jm.unregister_algorithm(entry.name)


def test_a_function_serves_every_world_size_and_a_program_its_own():
    fn = mscclpp_channel_programs.PROGRAMS["reducescatter_allpairs"][0]
    for source, sizes in ((lambda n: fn(n).plan(), {2: 2, 4: 4}), (lambda n: fn(n), {2: 2, 4: 4}),
                          (fn(4), {2: None, 4: 4})):
        entry = jm.register_algorithm(source, name="mscclpp_world_sizes")
        try:
            for n, world_size in sizes.items():
                plan = entry.plan_for(n)
                assert (plan and plan["world_size"]) == world_size
        finally:
            jm.unregister_algorithm("mscclpp_world_sizes")


def test_other_sources_are_refused_naming_what_is_taken():
    accepted = ("register_algorithm takes a dsl.Program, an MSCCLang MSCCLProgram, an MSCCL++ MSCCLPPProgram or "
                "CollectiveProgram, a plan dict, or a function of the world size returning one of these; got str")
    with pytest.raises(TypeError, match=re.escape(accepted)):
        jm.register_algorithm("allreduce", name="not_a_source")
