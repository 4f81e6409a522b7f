"""Programs written in MSCCL++'s DSL run as algorithms of ours: their plans, registered with
``jax_mscclpp.register_algorithm`` and forced with ``algorithm=name``, match lax on 8 CPU devices."""

import pytest
from jax import lax

import jax_mscclpp as jm
from tests.dsl import mscclpp_channel_programs, mscclpp_chunk_programs
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
}


@pytest.mark.parametrize("api,name,fn,collective", CASES, ids=[f"{c[0].__name__[15:]}-{c[1]}" for c in CASES])
def test_registered_program_matches_lax(mesh8, rng, api, name, fn, collective):
    algorithm = f"mscclpp_{api.__name__[15:]}_{name}"
    jm.register_algorithm(fn(8, 2).plan(), name=algorithm)
    try:
        ours, reference, out_spec = CALLS[collective]
        for dtype, per_rank in (("float32", 8 * 3), ("int32", 8 * 129)):
            x = random_array(rng, (8 * per_rank,), dtype)
            compare_with_lax(ours(algorithm), reference, mesh8, (x,), P("x"), out_spec)
    finally:
        jm.unregister_algorithm(algorithm)
