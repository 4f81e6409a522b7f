"""Every operand and mesh a lax collective takes, held against lax on CPU devices: constants, empty axis tuples,
unreduced operands, axis_index_groups under pmap, vmap axis names, nested, partially manual and vmapped shard_maps.

Ids in the comments of each test are rows of docs/bad_input.md ("Operands and meshes").
"""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, Mesh, PartitionSpec as P

import jax_mscclpp as jm

from .helpers import OWN_SUMS, assert_same, own_sum, random_array


@pytest.fixture(scope="module")
def mesh24(cpu_devices):
    return Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("a", "b"))


@pytest.fixture(scope="module")
def mesh1(cpu_devices):
    return Mesh(np.array(cpu_devices[:1]), ("x",))


def _both(fn):
    """(ours, lax's) of a function taking the collectives' module."""
    return fn(jm), fn(lax)


def _primitives(fn, *args):
    """Names of the primitives of ``fn``'s jaxpr, at any depth."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            found.append(eqn.primitive.name)
            for value in eqn.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(item, "jaxpr", None)
                    if inner is not None and hasattr(inner, "eqns"):
                        walk(inner)
                    elif hasattr(item, "eqns"):
                        walk(item)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


# ---- operands ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 8])
def test_psum_of_a_constant_is_the_static_axis_size(cpu_devices, n):
    # x/psum_of_one_is_static
    mesh = Mesh(np.array(cpu_devices[:n]), ("x",))
    sizes = []

    def body(module):
        def run(v):
            size = module.psum(1, "x")
            sizes.append(size)
            return v + jnp.zeros((size,), v.dtype).sum() + module.psum(2.5, "x")
        return run

    x = jnp.arange(3.0 * n)
    ours, ref = (jax.jit(jax.shard_map(body(m), mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
                 for m in (jm, lax))
    assert_same(ours, ref)
    assert sizes[0] == n and not isinstance(sizes[0], jax.core.Tracer)


def test_psum_of_a_constant_under_vmap_and_grad(mesh8):
    def loss(v):
        return jnp.sum(v) * jm.psum(1, "x") / jm.psum(1.0, "x")

    f = jax.jit(jax.shard_map(jax.grad(loss), mesh=mesh8, in_specs=P("x"), out_specs=P("x")))
    np.testing.assert_array_equal(f(jnp.arange(8.0)), np.ones(8))


@pytest.mark.parametrize("collective", ["psum", "all_gather"])
def test_empty_axis_tuple_is_the_identity_of_lax(mesh8, rng, collective):
    # axis_name/empty, axis_name/empty_all_gather (also in test_bad_input), with grad and vmap
    x = random_array(rng, (8 * 3,), "float32")

    def body(module):
        if collective == "psum":
            return lambda v: module.psum(v, ()) * 2
        return lambda v: module.all_gather(v, (), tiled=True) + 1

    for check_vma in (True, False):
        ours, ref = (jax.jit(jax.shard_map(body(m), mesh=mesh8, in_specs=P("x"), out_specs=P("x"),
                                           check_vma=check_vma)) for m in (jm, lax))
        assert_same(ours(x), ref(x))
        assert_same(jax.grad(lambda v: ours(v).sum())(x), jax.grad(lambda v: ref(v).sum())(x))
        assert_same(jax.vmap(ours)(x.reshape(1, -1)), jax.vmap(ref)(x.reshape(1, -1)))


def test_transpose_psum_with_empty_axes_through_rewrite(mesh8, rng):
    # axis_name/empty_in_transpose: shard_map's own transpose under check_vma=False
    x = random_array(rng, (8 * 3,), "float32")
    w = random_array(rng, (3,), "float32")

    def loss(w, v):
        f = jax.shard_map(lambda w, v: lax.psum(jnp.sum(w * v), ("x",)), mesh=mesh8, in_specs=(P(), P("x")),
                          out_specs=P(), check_vma=False)
        return f(w, v)

    ours = jax.jit(jm.rewrite(jax.grad(loss)))(w, x)
    assert_same(ours, jax.jit(jax.grad(loss))(w, x))


def _unreduced_matmul(module, mesh):
    a = jnp.arange(64.0).reshape(8, 8)
    b = jnp.arange(32.0).reshape(8, 4) / 7

    @jax.jit
    def f(a, b):
        c = jnp.einsum("ij,jk->ik", a, b, out_sharding=P(None, None, unreduced={"x"}))
        g = jax.shard_map(lambda c: module.psum(c, "x"), in_specs=P(None, None, unreduced={"x"}), out_specs=P())
        return g(c)

    with jax.set_mesh(mesh):
        return f(jax.device_put(a, P(None, "x")), jax.device_put(b, P("x", None)))


def test_unreduced_operand_is_reduced_as_lax(cpu_devices, caplog):
    # x/unreduced
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,), devices=cpu_devices[:8])
    with caplog.at_level(logging.INFO, logger="jax_mscclpp.collectives"):
        ours = _unreduced_matmul(jm, mesh)
    assert_same(ours, _unreduced_matmul(lax, mesh))
    assert "unreduced" in caplog.text


# ---- axis_index_groups ---------------------------------------------------------------------------------------------

GROUPS = [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("name", ["psum", "pmax", "pmin", "pmean", "all_gather", "psum_scatter", "all_to_all"])
def test_axis_index_groups_under_pmap_are_lax_s(rng, name):
    # axis_index_groups/pmap: lax's result, whether pmap runs as a shard_map (ours composes the groups) or not
    # (lax's collective runs them); axis_index_groups/shard_map: tests/test_axis_index_groups.py
    calls = {
        "psum": lambda m, v: m.psum(v, "x", axis_index_groups=GROUPS),
        "pmax": lambda m, v: m.pmax(v, "x", axis_index_groups=GROUPS),
        "pmin": lambda m, v: m.pmin(v, "x", axis_index_groups=GROUPS),
        "pmean": lambda m, v: m.pmean(v, "x", axis_index_groups=GROUPS),
        "all_gather": lambda m, v: m.all_gather(v, "x", axis_index_groups=GROUPS),
        "psum_scatter": lambda m, v: m.psum_scatter(v, "x", axis_index_groups=GROUPS, tiled=True),
        "all_to_all": lambda m, v: m.all_to_all(v, "x", 0, 0, axis_index_groups=GROUPS, tiled=True),
    }
    x = random_array(rng, (8, 8), "float32")
    ours = jax.pmap(lambda v: calls[name](jm, v), axis_name="x")(x)
    assert_same(ours, jax.pmap(lambda v: calls[name](lax, v), axis_name="x")(x))


@pytest.mark.parametrize("name", OWN_SUMS)
def test_axis_index_groups_of_our_own_sums_under_pmap(rng, name):
    """Under pmap, psum_start/psum_done and the fused sums take axis_index_groups as psum does, then the rest of
    the composition: lax's results (under shard_map: tests/test_axis_index_groups.py)."""
    x, residual = random_array(rng, (8, 2, 8), "float32"), random_array(rng, (8, 2, 8), "float32")
    weight = random_array(rng, (8,), "float32")

    def reference(v, r):
        total = r + lax.psum(v, "x", axis_index_groups=GROUPS)
        if name != "all_reduce_residual_rmsnorm":
            return total
        return total * lax.rsqrt(jnp.mean(total * total, axis=-1, keepdims=True) + 1e-6) * weight, total

    def ours(v, r):
        return own_sum(name, v, r, weight, "x", GROUPS)

    got = jax.pmap(ours, axis_name="x")(x, residual)
    assert_same(got, jax.pmap(reference, axis_name="x")(x, residual))


# ---- vmap axis names ---------------------------------------------------------------------------------------------

def test_vmap_axis_inside_shard_map(mesh8, rng):
    # placement/vmap_axis_in_shard_map: a vmap axis in a shard_map body, alone and with a mesh axis
    x = random_array(rng, (8 * 4, 3), "float32")

    def body(module):
        def per_row(v):
            return module.psum(v, "v") + module.psum(v, ("v", "x")) + module.all_gather(v, "v")[0]
        return lambda v: jax.vmap(per_row, axis_name="v")(v)

    ours, ref = (jax.jit(jax.shard_map(body(m), mesh=mesh8, in_specs=P("x"), out_specs=P("x"), check_vma=False))
                 for m in (jm, lax))
    assert_same(ours(x), ref(x))
    assert_same(jax.grad(lambda v: ours(v).sum())(x), jax.grad(lambda v: ref(v).sum())(x))
    # check_vma=True: lax fails with a bare AssertionError; ours says why at trace time
    f = jax.jit(jax.shard_map(body(jm), mesh=mesh8, in_specs=P("x"), out_specs=P("x")))
    with pytest.raises(NotImplementedError, match="vmap axis inside a jax.shard_map with check_vma=True"):
        f(x)


def test_pmap_axis(rng):
    # placement/pmap (also in test_bad_input), all_gather and odd sizes
    x = random_array(rng, (8, 5), "float32")
    assert_same(jax.pmap(lambda v: jm.all_gather(v, "i"), axis_name="i")(x),
                jax.pmap(lambda v: lax.all_gather(v, "i"), axis_name="i")(x))


# ---- meshes --------------------------------------------------------------------------------------------------------

def _nested(module, mesh, context_mesh: bool):
    inner = jax.shard_map(lambda v: module.psum(v, "b"), in_specs=P("b"), out_specs=P(), axis_names={"b"})
    outer = jax.shard_map(lambda v: inner(v) * 2, mesh=None if context_mesh else mesh, in_specs=P("a"),
                          out_specs=P("a"), axis_names={"a"})
    return outer


@pytest.mark.parametrize("context_mesh", [False, True])
def test_nested_shard_map(mesh24, rng, context_mesh):
    # mesh/nested_shard_map
    x = random_array(rng, (8 * 3, 5), "float32")
    ours, ref = (jax.jit(_nested(m, mesh24, context_mesh)) for m in (jm, lax))
    with jax.set_mesh(mesh24) if context_mesh else _no_context():
        assert_same(ours(x), ref(x))
        assert_same(jax.grad(lambda v: ours(v).sum())(x), jax.grad(lambda v: ref(v).sum())(x))
        rewritten = jax.jit(jm.rewrite(_nested(lax, mesh24, context_mesh)))
        assert_same(rewritten(x), ref(x))


class _no_context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_partial_manual_shard_map(mesh24, rng, caplog):
    # mesh/partial_manual
    x = random_array(rng, (8 * 3,), "float32")
    for names in ({"b"}, {"a"}):
        axis = next(iter(names))
        ours, ref = (jax.jit(jax.shard_map(lambda v, m=m: m.psum(v, axis), mesh=mesh24, in_specs=P(axis),
                                           out_specs=P(), axis_names=names)) for m in (jm, lax))
        with caplog.at_level(logging.INFO, logger="jax_mscclpp.collectives"):
            assert_same(ours(x), ref(x))
        assert "not every mesh axis" in caplog.text
        assert_same(jax.grad(lambda v: ours(v).sum())(x), jax.grad(lambda v: ref(v).sum())(x))
    # through rewrite too
    f = jax.shard_map(lambda v: lax.all_gather(v, "b", tiled=True), mesh=mesh24, in_specs=P("b"), out_specs=P("b"),
                      axis_names={"b"})
    assert_same(jax.jit(jm.rewrite(f))(x), jax.jit(f)(x))


@pytest.mark.parametrize("spmd_axis_name", [None, "a"])
@pytest.mark.parametrize("axis_names", [None, {"b"}])
def test_vmap_of_a_shard_map(mesh24, rng, spmd_axis_name, axis_names):
    # mesh/vmap_of_shard_map
    if axis_names is None and spmd_axis_name is None:
        pytest.skip("a shard_map over both axes with in_specs P('b') is the partial case below")
    x = random_array(rng, (2, 8 * 3), "float32")
    kwargs = {} if axis_names is None else {"axis_names": axis_names}

    def make(module):
        f = jax.shard_map(lambda v: module.psum(v, "b") + module.all_gather(v, "b", tiled=True)[:v.shape[0]],
                          mesh=mesh24, in_specs=P("b"), out_specs=P("b"), **kwargs)
        return jax.jit(jax.vmap(f, spmd_axis_name=spmd_axis_name))

    try:
        ref = make(lax)(x)
    except Exception as error:  # what lax refuses (spmd_axis_name over an axis left automatic), ours refuses too
        with pytest.raises(type(error)):
            make(jm)(x)
        return
    assert_same(make(jm)(x), ref)


def test_one_device_mesh(mesh1, rng):
    # odd sizes on a world of one: every new operand kind there too
    x = random_array(rng, (7,), "float32")
    for body in (lambda m: (lambda v: m.psum(v, ()) + m.psum(1, "x")),
                 lambda m: (lambda v: jax.vmap(lambda r: m.psum(r, "v"), axis_name="v")(v.reshape(7, 1)).ravel())):
        ours, ref = (jax.jit(jax.shard_map(body(m), mesh=mesh1, in_specs=P("x"), out_specs=P("x"), check_vma=False))
                     for m in (jm, lax))
        assert_same(ours(x), ref(x))
