"""DSL plans as algorithms on the host backend: every library program against lax, selection by size range,
the platforms a registration names, the GPU selection rules (scratch pipelining, port channels), and the errors
of registration and of a plan whose peer never comes."""

import contextlib

import jax
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp import plans
from jax_mscclpp._types import Collective
from jax_mscclpp.dsl import library
from jax_mscclpp.testing import faults
from tests.helpers import P, compare_with_lax, random_array, sharded

LAX_REDUCE = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


@contextlib.contextmanager
def registered(source, name, **kwargs):
    jm.register_algorithm(source, name=name, **kwargs)
    try:
        yield name
    finally:
        jm.unregister_algorithm(name)


@pytest.mark.parametrize("program", ["allreduce_1pa_ll", "allreduce_2pa_ll", "allreduce_2pa_hb", "allreduce_2pr",
                                     "allreduce_2pa_nvls"])
@pytest.mark.parametrize("dtype,op", [("float32", "sum"), ("bfloat16", "max"), ("int32", "sum"), ("int8", "min")])
def test_all_reduce_programs_match_lax(mesh8, rng, program, dtype, op):
    with registered(getattr(library, program), "plan_" + program) as name:
        for count in (1, 3, 1023):
            x = random_array(rng, (8 * count,), dtype)
            compare_with_lax(lambda v: jm.all_reduce(v, "x", op=op, algorithm=name), lambda v: LAX_REDUCE[op](v, "x"),
                             mesh8, (x,), P("x"), P())


def test_programs_on_sub_groups_of_a_2d_mesh(cpu_devices, rng):
    mesh = Mesh(np.array(cpu_devices[:8])[[6, 2, 0, 4, 1, 7, 3, 5]].reshape(2, 4), ("a", "b"))
    with registered(library.allreduce_2pa_ll, "plan_2pa_ll_groups") as name:
        x = random_array(rng, (2 * 5, 4 * 7), "float32")
        for axes in ["a", "b", ("b", "a")]:
            compare_with_lax(lambda v: jm.psum(v, axes, algorithm=name), lambda v: lax.psum(v, axes), mesh,
                             (x,), P("a", "b"), P("a", "b"))


def test_other_collectives(mesh8, rng):
    x = random_array(rng, (8 * 8 * 5,), "float32")
    with registered(library.allgather_allpairs, "plan_ag") as ag, \
            registered(library.reducescatter_allpairs, "plan_rs") as rs, \
            registered(library.alltoall_allpairs, "plan_a2a") as a2a:
        compare_with_lax(lambda v: jm.all_gather(v, "x", algorithm=ag), lambda v: lax.all_gather(v, "x"),
                         mesh8, (x,), P("x"), P("x"))
        compare_with_lax(lambda v: jm.psum_scatter(v, "x", tiled=True, algorithm=rs),
                         lambda v: lax.psum_scatter(v, "x", tiled=True), mesh8, (x,), P("x"), P("x"))
        compare_with_lax(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True, algorithm=a2a),
                         lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), mesh8, (x,), P("x"), P("x"))


def test_a_plan_dict_and_repeated_calls(mesh8, rng):
    plan = library.allreduce_1pa_ll(8).lower()
    x = random_array(rng, (8 * 33,), "float32")
    with registered(plan, "plan_dict") as name:
        def loop(psum):
            return lambda v: lax.fori_loop(0, 100, lambda i, a: lax.pcast(psum(a, "x"), "x", to="varying") / 8.0, v)
        compare_with_lax(loop(lambda v, a: jm.psum(v, a, algorithm=name)), loop(lax.psum), mesh8, (x,), P("x"), P("x"))


def test_selected_by_size_range(mesh8, rng):
    small, large = random_array(rng, (8 * 16,), "float32"), random_array(rng, (8 * 4096,), "float32")
    with registered(library.allreduce_2pa_hb, "plan_small_only", max_bytes=1024):
        for x, expect_plan in [(small, True), (large, False)]:
            f = sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P())
            text = f.lower(x).as_text()
            assert ("algorithm = 6" in text) == expect_plan
            compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh8, (x,), P("x"), P())


def test_environment_names_a_plan(mesh8, rng, monkeypatch):
    """JAX_MSCCLPP_ALGORITHM naming an all_gather plan: all_gather runs it, psum (which has no such plan) ignores
    the variable."""
    x = random_array(rng, (8 * 8 * 5,), "float32")
    with registered(library.allgather_allpairs, "plan_ag_env") as name:
        monkeypatch.setenv("JAX_MSCCLPP_ALGORITHM", name)
        gather = sharded(lambda v: jm.all_gather(v, "x"), mesh8, P("x"), P("x"))
        assert "algorithm = 6" in gather.lower(x).as_text()
        compare_with_lax(lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x"), mesh8, (x,), P("x"),
                         P("x"))
        compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh8, (x,), P("x"), P())


def test_registration_errors(mesh8, rng):
    with pytest.raises(ValueError, match="built-in algorithm name"):
        jm.register_algorithm(library.allreduce_1pa_ll, name="1pa_ll")
    with pytest.raises(ValueError, match="implements all_gather, not all_reduce"):
        jm.register_algorithm(library.allgather_allpairs, "all_reduce", name="wrong")
    x = random_array(rng, (8 * 4096,), "float32")
    cpu = jax.devices("cpu")[:8]
    mesh = Mesh(np.array(cpu)[[1, 0, 2, 3, 4, 5, 6, 7]], ("x",))
    jm.Communicator(mesh, "x", scratch_bytes=4096)
    with registered(library.allreduce_1pa_ll, "plan_too_big") as name:
        with pytest.raises(ValueError, match="needs more scratch"):
            sharded(lambda v: jm.psum(v, "x", algorithm=name), mesh, P("x"), P()).lower(x)


def test_platforms_of_a_registration(mesh8, rng):
    with registered(library.allreduce_1pa_ll, "plan_both") as name:
        assert plans.registered(name).platforms == ("cpu", "gpu")
    with registered(library.allreduce_1pa_ll, "plan_gpu_only", platforms="gpu") as name:
        assert plans.registered(name).platforms == ("gpu",)
        x = random_array(rng, (8 * 16,), "float32")
        assert "algorithm = 6" not in sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P()).lower(x).as_text()
        with pytest.raises(ValueError, match="no all_reduce plan for 8 ranks on platform 'cpu'"):
            sharded(lambda v: jm.psum(v, "x", algorithm=name), mesh8, P("x"), P()).lower(x)
    for platforms in [("cpu", "tpu"), "tpu", ()]:
        with pytest.raises(ValueError, match="plans run on platforms 'cpu', 'gpu'"):
            jm.register_algorithm(library.allreduce_1pa_ll, name="plan_elsewhere", platforms=platforms)
    assert plans.registered("plan_elsewhere") is None


def test_gpu_rules_of_pick():
    """On GPUs a message larger than scratch is pipelined through it, so only a scratch without room for one
    element per chunk refuses a plan; a port-channel plan needs a communicator with port channels."""
    def pick(platform, requested, scratch_bytes, port_channels, block_count=1 << 20):
        return plans.pick(Collective.ALL_REDUCE, platform, requested, nbytes=4 * block_count, world_size=8,
                          block_count=block_count, itemsize=4, scratch_bytes=scratch_bytes,
                          port_channels=port_channels)

    with registered(library.allreduce_2pa_hb, "plan_hb") as name:
        one_per_chunk = plans.scratch_bytes(plans.registered(name).plan_for(8), 8, 4)  # 8 chunks per block
        with pytest.raises(ValueError, match="needs more scratch for this message"):
            pick("cpu", name, one_per_chunk, True)
        assert pick("gpu", name, one_per_chunk, False)[0].name == name
        assert pick("gpu", None, one_per_chunk, False)[0].name == name
        with pytest.raises(ValueError, match="needs more scratch for one element per chunk"):
            pick("gpu", name, one_per_chunk - 1, False)
    with registered(library.allreduce_2pr, "plan_ring") as name:
        assert plans.uses_port_channels(plans.registered(name).plan_for(8))
        with pytest.raises(ValueError, match=r"uses port channels: .*port_channels=True"):
            pick("gpu", name, 1 << 30, False, block_count=256)
        assert pick("gpu", None, 1 << 30, False, block_count=256) is None
        assert pick("gpu", name, 1 << 30, True, block_count=256)[0].name == name
        assert pick("cpu", name, 1 << 30, True, block_count=256)[0].name == name


def test_lost_peer_in_a_plan_times_out(cpu_devices, rng, fault_hooks):
    mesh = Mesh(np.array(cpu_devices[:8])[[0, 1, 2, 3, 4, 5, 7, 6]], ("x",))
    comm = jm.Communicator(mesh, "x")
    x = random_array(rng, (8 * 8,), "float32")
    with registered(library.allreduce_2pa_hb, "plan_timeout") as name:
        f = sharded(lambda v: jm.psum(v, "x", algorithm=name), mesh, P("x"), P())
        jax.block_until_ready(f(x))
        faults.skip_next_calls(comm, mesh.devices[2])
        with faults.timeout(1.0):
            with pytest.raises(Exception, match=r"plan 'plan_timeout'.*rank \d of 8 at epoch \d+ is blocked: "
                                                r"thread block \d+ op \d+ \(wait for peer 2\)"):
                jax.block_until_ready(f(x))
    comm.destroy()
