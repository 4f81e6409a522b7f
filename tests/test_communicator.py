"""Communicator: caching, rank mapping on 2-D meshes with permuted devices, sub-axis groups, two at once."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp.communicator import partition_tables
from tests.helpers import P, compare_with_lax, random_array, sharded


def permuted_mesh(devices, shape, names, seed):
    order = np.random.default_rng(seed).permutation(len(devices))
    return Mesh(np.array(devices)[order].reshape(shape), names)


def test_cached_once_per_mesh_and_axes(mesh8):
    assert jm.Communicator(mesh8, "x") is jm.Communicator(mesh8, ("x",))
    info = jm.info()
    assert any("axes=('x',)" in c for c in info["communicators"])


def test_partition_tables_row_major():
    group, rank = partition_tables((2, 4), ("a", "b"), ("b",))
    assert rank == [0, 1, 2, 3, 0, 1, 2, 3] and group == [0, 0, 0, 0, 1, 1, 1, 1]
    group, rank = partition_tables((2, 4), ("a", "b"), ("b", "a"))
    assert rank == [0, 2, 4, 6, 1, 3, 5, 7] and group == [0] * 8


@pytest.mark.parametrize("axes", [("b",), ("a",), ("a", "b"), ("b", "a")])
def test_rank_matches_lax_axis_index(cpu_devices, axes):
    mesh = permuted_mesh(cpu_devices[:8], (2, 4), ("a", "b"), seed=len(axes) + 7 * ("a" in axes[0]))
    comm = jm.Communicator(mesh, axes)
    index = sharded(lambda: lax.axis_index(axes).reshape(1, 1), mesh, (), P("a", "b"))()
    index = np.asarray(index)
    for coords in itertools.product(range(2), range(4)):
        device = mesh.devices[coords]
        assert comm.rank(device) == index[coords]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("axes", [("b",), ("a",), ("a", "b"), ("b", "a")])
def test_two_d_mesh_permuted_devices(cpu_devices, rng, seed, axes):
    mesh = permuted_mesh(cpu_devices[:8], (2, 4), ("a", "b"), seed)
    x = random_array(rng, (2 * 3, 4 * 5), "float32")
    specs = P("a", "b")
    compare_with_lax(lambda v: jm.psum(v, axes), lambda v: lax.psum(v, axes), mesh, (x,), specs, specs)
    compare_with_lax(lambda v: jm.all_gather(v, axes, axis=1, tiled=True),
                     lambda v: lax.all_gather(v, axes, axis=1, tiled=True), mesh, (x,), specs, specs)
    y = random_array(rng, (2 * 8, 4 * 3), "int32")
    compare_with_lax(lambda v: jm.psum_scatter(v, axes, tiled=True), lambda v: lax.psum_scatter(v, axes, tiled=True),
                     mesh, (y,), specs, specs)
    compare_with_lax(lambda v: jm.all_to_all(v, axes, 0, 1, tiled=True),
                     lambda v: lax.all_to_all(v, axes, 0, 1, tiled=True), mesh, (y,), specs, specs)


def test_three_d_mesh_sub_groups(cpu_devices, rng):
    mesh = permuted_mesh(cpu_devices[:8], (2, 2, 2), ("p", "q", "r"), seed=3)
    x = random_array(rng, (2, 2, 2 * 7), "float32")
    specs = P("p", "q", "r")
    for axes in [("q",), ("r", "p"), ("p", "q", "r")]:
        compare_with_lax(lambda v: jm.pmin(v, axes), lambda v: lax.pmin(v, axes), mesh, (x,), specs, specs)


def test_two_communicators_alternate_in_one_program(cpu_devices, rng):
    mesh = permuted_mesh(cpu_devices[:8], (2, 4), ("a", "b"), seed=11)
    x = random_array(rng, (2 * 3, 4), "float32")

    def alternate(psum):
        def run(v):
            def step(i, acc):
                acc = lax.pcast(psum(acc, "a"), "a", to="varying") / 2.0
                return lax.pcast(psum(acc, "b"), "b", to="varying") / 4.0 + 0.01 * i
            return lax.fori_loop(0, 20, step, v)
        return run

    compare_with_lax(alternate(jm.psum), alternate(lax.psum), mesh, (x,), P("a", "b"), P("a", "b"))


def test_destroy_then_recreate(cpu_devices, rng):
    mesh = permuted_mesh(cpu_devices[:8], (8,), ("x",), seed=21)
    first = jm.Communicator(mesh, "x")
    first.destroy()
    assert not first.alive
    x = random_array(rng, (8 * 4,), "float32")
    compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh, (x,), P("x"), P())
    assert jm.Communicator(mesh, "x") is not first


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("shape", [(2 * 3, 4 * 5), (2, 4 * 1023)])
def test_hierarchical_all_reduce(cpu_devices, rng, op, shape):
    mesh = permuted_mesh(cpu_devices[:8], (2, 4), ("node", "gpu"), seed=5)
    x = random_array(rng, shape, "float32")
    ref = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}[op]
    specs = P("node", "gpu")
    compare_with_lax(lambda v: jm.all_reduce(v, ("node", "gpu"), op=op, algorithm="2ph"),
                     lambda v: ref(v, ("node", "gpu")), mesh, (x,), specs, P())
    text = sharded(lambda v: jm.psum(v, ("node", "gpu"), algorithm="2ph"), mesh, specs, P()).lower(x).as_text()
    assert "jax_mscclpp_reduce_scatter" in text and "jax_mscclpp_all_gather" in text


def test_hierarchical_grad_matches_lax(cpu_devices, rng):
    mesh = permuted_mesh(cpu_devices[:8], (2, 4), ("node", "gpu"), seed=6)
    x = random_array(rng, (2 * 3, 4 * 3), "float32")

    def loss(psum):
        f = sharded(lambda v: psum(jnp.sin(v), ("node", "gpu")), mesh, P("node", "gpu"), P())
        return jax.grad(lambda v: (f(v) ** 2).sum())(x)

    from tests.helpers import assert_same
    assert_same(loss(lambda v, a: jm.psum(v, a, algorithm="2ph")), loss(lax.psum))
