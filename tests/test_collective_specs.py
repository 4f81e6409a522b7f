"""The one spec per collective (jax_mscclpp/collective_specs.py) against what it describes: codes.def's
collectives, the public functions, lax's functions and primitives, and the tables derived from it."""

import importlib
import inspect

import jax
import pytest
from jax import lax
from jax._src.lax import parallel

import jax_mscclpp as jm
from jax_mscclpp import _compat, collective_specs as specs, public_calls
from jax_mscclpp._codes import CODE_TABLES, Collective
from jax_mscclpp.testing import fixtures
from jax_mscclpp.tools.bench import metrics, programs
from jax_mscclpp.tools.soak import configs


def test_every_codes_def_collective_has_one_spec():
    assert sorted(specs.SPECS) == sorted(Collective)
    assert [s.name for s in specs.SPECS.values()] == [row["name"] for row in CODE_TABLES["collective"]]


def test_every_public_name_is_ours_and_lax_s():
    for public in specs.PUBLIC_NAMES:
        assert callable(getattr(jm, public.name)), public.name
        assert callable(getattr(lax, public.name)), public.name


def test_the_lax_primitives_exist_where_jax_has_them():
    # The primitives every supported release has; the others (all_gather_invariant, pbroadcast) may be absent.
    for name in ("psum_p", "pmax_p", "pmin_p", "all_gather_p", "reduce_scatter_p", "all_to_all_p", "ppermute_p"):
        assert name in specs.LAX_PRIMITIVE_NAMES and hasattr(parallel, name), name
    present = {getattr(parallel, name) for name in specs.LAX_PRIMITIVE_NAMES if hasattr(parallel, name)}
    assert set(_compat.LAX_COLLECTIVES) == present


def test_a_traced_lax_collective_maps_to_its_public_name():
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))
    calls = {"psum": lambda v: lax.psum(v, "x"), "pmax": lambda v: lax.pmax(v, "x"),
             "all_gather": lambda v: lax.all_gather(v, "x"),
             "psum_scatter": lambda v: lax.psum_scatter(v, "x", tiled=True),
             "all_to_all": lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True),
             "ppermute": lambda v: lax.ppermute(v, "x", [(0, 0)])}
    for name, call in calls.items():
        f = jax.shard_map(call, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"))
        jaxpr = jax.make_jaxpr(f)(jax.numpy.ones(4)).jaxpr.eqns[0].params["jaxpr"]
        found = [e for e in jaxpr.eqns if e.primitive in _compat.LAX_COLLECTIVES]
        assert [_compat.LAX_COLLECTIVES[e.primitive] for e in found] == [name], (name, jaxpr)
        lax_params = [p.lax_param for p in specs.SPECS[specs.REWRITABLE[name]].shape if p.lax_param]
        assert all(param in found[0].params for param in lax_params), (name, found[0].params)


def test_the_shape_parameters_are_keywords_of_ours_and_lax_s():
    for collective, spec in specs.SPECS.items():
        ours = inspect.signature(public_calls._PUBLIC_CALLS[collective]).parameters
        assert {p.keyword for p in spec.shape} <= set(ours), collective
    # lax's function of each collective but the reductions (lax has one per op) takes the same keywords.
    for public in specs.PUBLIC_NAMES:
        if public.is_the_collective and public.name not in specs.REDUCTION_OF:
            keywords = {p.keyword for p in specs.SPECS[public.collective].shape}
            assert keywords <= set(inspect.signature(getattr(lax, public.name)).parameters), public.name
            assert keywords <= set(inspect.signature(getattr(jm, public.name)).parameters), public.name


def test_the_derived_tables():
    rewrite = importlib.import_module("jax_mscclpp.rewrite")  # the module, not the function it exports
    assert rewrite.COLLECTIVES == {p.name: p.collective for p in specs.PUBLIC_NAMES}
    assert specs.REDUCTION_OF == {"psum": "sum", "pmax": "max", "pmin": "min"}
    assert programs.OPS == configs.OPS == ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
    assert fixtures.OP_ALIASES == {"all_reduce": "all_reduce", "psum": "all_reduce", "pmax": "all_reduce",
                                   "pmin": "all_reduce", "all_gather": "all_gather",
                                   "reduce_scatter": "reduce_scatter", "psum_scatter": "reduce_scatter",
                                   "all_to_all": "all_to_all"}


@pytest.mark.parametrize("world", [1, 2, 8])
def test_bus_factors_are_nccl_tests(world):
    assert metrics.bus_factor("all_reduce", world) == pytest.approx(2 * (world - 1) / world)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert metrics.bus_factor(op, world) == pytest.approx((world - 1) / world)
    assert metrics.bus_factor("permute", world) == 1.0
    with pytest.raises(ValueError, match="unknown collective 'broadcast'; known: all_reduce"):
        specs.spec_named("broadcast")
