"""ppermute, pshuffle and pbroadcast against lax on random data: every permutation shape (full, partial, empty,
identity, shifts), odd sizes, every dtype (bit for bit), jax.grad, vmap, 1-device, 1-D and 2-D meshes with tuples
of axes, payloads larger than the scratch, jm.rewrite of lax's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp._types import _ALWAYS
from tests.helpers import (BYTE_DTYPES, P, any_array, assert_same,
                           assert_same_bits, compare_with_lax, random_array, sharded)

NATIVE_DTYPES = list(_ALWAYS)  # every dtype row of codes.def but the 8-byte ones
PERMS = {
    "shift": [(i, (i + 1) % 8) for i in range(8)],
    "reverse": [(i, 7 - i) for i in range(8)],
    "partial_shift": [(i, i + 1) for i in range(7)],
    "swap_pairs": [(0, 1), (1, 0), (4, 6), (6, 4)],
    "one_pair": [(5, 2)],
    "identity": [(i, i) for i in range(8)],
    "mixed_self": [(0, 0), (1, 3), (3, 1), (7, 5)],
    "empty": [],
}


@pytest.mark.parametrize("name", sorted(PERMS))
@pytest.mark.parametrize("count", [1, 3, 1023])
def test_ppermute_matches_lax(mesh8, rng, name, count):
    x = random_array(rng, (8 * count,), "float32")
    perm = PERMS[name]
    compare_with_lax(lambda v: jm.ppermute(v, "x", perm), lambda v: lax.ppermute(v, "x", perm),
                     mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("dtype", NATIVE_DTYPES + BYTE_DTYPES)
def test_ppermute_every_dtype_bit_for_bit(mesh8, rng, dtype):
    x = any_array(rng, (8 * 5, 3), dtype)
    perm = PERMS["partial_shift"]
    ours = sharded(lambda v: jm.ppermute(v, "x", perm), mesh8, P("x"), P("x"))(x)
    assert_same_bits(ours, sharded(lambda v: lax.ppermute(v, "x", perm), mesh8, P("x"), P("x"))(x))


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("name", ["shift", "partial_shift", "one_pair"])
def test_grad_ppermute(mesh8, rng, name, check_vma):
    x = random_array(rng, (8 * 3, 2), "float32")
    w = random_array(rng, (8 * 3, 2), "float32")
    perm = PERMS[name]

    def loss(permute):
        f = sharded(lambda v, u: (permute(jnp.sin(v), "x", perm) * u).sum(keepdims=True),
                    mesh8, (P("x"), P("x")), P("x"), check_vma)
        return lambda v, u: f(v, u).sum()

    assert_same(jax.grad(loss(jm.ppermute), argnums=(0, 1))(x, w), jax.grad(loss(lax.ppermute), argnums=(0, 1))(x, w))


def test_vmap_ppermute_inside_shard_map(mesh8, rng):
    x = random_array(rng, (8 * 2, 6, 5), "float32")
    perm = PERMS["reverse"]

    def run(permute):
        return lambda v: (jax.vmap(lambda r: permute(r, "x", perm))(v),
                          jax.vmap(lambda r: permute(r, "x", perm), in_axes=2, out_axes=1)(v))

    compare_with_lax(run(jm.ppermute), run(lax.ppermute), mesh8, (x,), P("x"), (P("x"), P("x")))


def test_pshuffle_matches_lax(mesh8, rng):
    x = random_array(rng, (8 * 7,), "int32")
    perm = [3, 0, 7, 1, 2, 6, 5, 4]
    compare_with_lax(lambda v: jm.pshuffle(v, "x", perm), lambda v: lax.pshuffle(v, "x", perm),
                     mesh8, (x,), P("x"), P("x"))


def test_pytree_and_odd_shapes(mesh8, rng):
    tree = {"a": random_array(rng, (8 * 3, 5, 7), "bfloat16"), "b": random_array(rng, (8,), "int8")}
    perm = PERMS["swap_pairs"]
    compare_with_lax(lambda t: jm.ppermute(t, "x", perm), lambda t: lax.ppermute(t, "x", perm),
                     mesh8, (tree,), P("x"), P("x"))


TUPLE_OF_AXES_CASES = [(("a", "b"), [(i, (3 * i + 1) % 8) for i in range(8)]), (("b", "a"), [(0, 7), (7, 0), (2, 3)]),
                       ("b", [(0, 3), (3, 2), (2, 0)]), ("a", [(0, 1)])]


def _2d_mesh(cpu_devices):
    # A device order of its own, so that the ranks of ("a", "b") are not the device ids.
    return Mesh(np.array(cpu_devices[:8])[[5, 2, 7, 0, 3, 6, 1, 4]].reshape(2, 4), ("a", "b"))


def _ppermute_like_lax(mesh, x, axes, perm):
    """Ours and lax's agree, or both refuse the call with the same exception type (jax 0.11 and newer refuse a
    tuple of axes named out of the mesh's order while jax_raise_on_ppermute_sort_diff is on)."""
    specs = P("a", "b")
    try:
        jax.block_until_ready(sharded(lambda v: lax.ppermute(v, axes, perm), mesh, specs, specs)(x))
    except RuntimeError as refused:
        assert "order" in str(refused), refused
        with pytest.raises(RuntimeError, match="not in the mesh's order"):
            sharded(lambda v: jm.ppermute(v, axes, perm), mesh, specs, specs)(x)
        return
    compare_with_lax(lambda v: jm.ppermute(v, axes, perm), lambda v: lax.ppermute(v, axes, perm),
                     mesh, (x,), specs, specs)


def test_2d_mesh_tuple_of_axes(cpu_devices, rng):
    mesh = _2d_mesh(cpu_devices)
    x = random_array(rng, (2 * 3, 4 * 5), "float32")
    for axes, perm in TUPLE_OF_AXES_CASES:
        _ppermute_like_lax(mesh, x, axes, perm)
    compare_with_lax(lambda v: jm.pbroadcast(v, ("a", "b"), 5), lambda v: lax.all_gather(v, ("a", "b"))[5],
                     mesh, (x,), P("a", "b"), P("a", "b"))


def test_2d_mesh_axes_out_of_order_with_lax_check_off(cpu_devices, rng):
    """Where lax.ppermute can be told to take a tuple of axes out of the mesh's order (jax 0.11 and newer), it then
    numbers the ranks in the order named, and so does ours."""
    if not hasattr(jax.config, "jax_raise_on_ppermute_sort_diff"):
        pytest.skip("this jax numbers a ppermute's ranks in the mesh's order always")
    mesh = _2d_mesh(cpu_devices)
    x = random_array(rng, (2 * 3, 4 * 5), "float32")
    before = jax.config.jax_raise_on_ppermute_sort_diff
    jax.config.update("jax_raise_on_ppermute_sort_diff", False)
    try:
        for axes, perm in TUPLE_OF_AXES_CASES:
            _ppermute_like_lax(mesh, x, axes, perm)
        in_mesh_order = sharded(lambda v: jm.ppermute(v, ("a", "b"), [(0, 7), (7, 0), (2, 3)]), mesh,
                                P("a", "b"), P("a", "b"))(x)
        named_order = sharded(lambda v: jm.ppermute(v, ("b", "a"), [(0, 7), (7, 0), (2, 3)]), mesh,
                              P("a", "b"), P("a", "b"))(x)
        assert not np.array_equal(np.asarray(in_mesh_order), np.asarray(named_order))
    finally:
        jax.config.update("jax_raise_on_ppermute_sort_diff", before)


def test_one_device_axis(cpu_devices, rng):
    mesh = Mesh(np.array(cpu_devices[:8]).reshape(8, 1), ("x", "one"))
    x = random_array(rng, (8, 3), "float32")
    for perm in ([(0, 0)], []):
        compare_with_lax(lambda v: jm.ppermute(v, "one", perm), lambda v: lax.ppermute(v, "one", perm),
                         mesh, (x,), P("x", "one"), P("x", "one"))
    compare_with_lax(lambda v: jm.pbroadcast(v, "one", 0), lambda v: v, mesh, (x,), P("x", "one"), P("x", "one"))


def test_one_device_mesh(cpu_devices, rng):
    mesh = Mesh(np.array(cpu_devices[:1]), ("x",))
    x = random_array(rng, (3, 2), "float32")
    compare_with_lax(lambda v: jm.ppermute(v, "x", [(0, 0)]), lambda v: lax.ppermute(v, "x", [(0, 0)]),
                     mesh, (x,), P("x"), P("x"))
    compare_with_lax(lambda v: jm.all_gather(v, "x", to="invarying"), lambda v: lax.all_gather(v, "x", to="invarying"),
                     mesh, (x,), P("x"), P())


def test_past_the_scratch_and_in_loops(cpu_devices, rng):
    # A mesh of its own (a device order no other test uses), so that its communicator is made here with a tiny
    # scratch: the permutation runs many rounds, alternating scratch halves.
    mesh = Mesh(np.array(cpu_devices[:8])[[2, 7, 4, 1, 6, 3, 0, 5]], ("x",))
    jm.Communicator(mesh, "x", scratch_bytes=1024)
    x = random_array(rng, (8 * 3001,), "float32")
    perm = PERMS["partial_shift"]
    compare_with_lax(lambda v: jm.ppermute(v, "x", perm), lambda v: lax.ppermute(v, "x", perm),
                     mesh, (x,), P("x"), P("x"))

    def ring(permute):
        return lambda v: lax.fori_loop(0, 50, lambda i, acc: permute(acc, "x", PERMS["shift"]) + 0.5 * i, v)

    compare_with_lax(ring(jm.ppermute), ring(lax.ppermute), mesh, (x[:8 * 33],), P("x"), P("x"))


def test_pbroadcast_matches_lax_definition_and_gradient(mesh8, rng):
    x = random_array(rng, (8 * 4, 3), "float32")
    compare_with_lax(lambda v: jm.pbroadcast(v, "x", 2), lambda v: _masked_broadcast(v, 2), mesh8, (x,),
                     P("x"), P("x"))

    def grad(broadcast):
        f = sharded(lambda v: (broadcast(jnp.sin(v), "x", 2) ** 2).sum(keepdims=True), mesh8, P("x"), P("x"))
        return jax.grad(lambda v: f(v).sum())(x)

    assert_same(grad(jm.pbroadcast), grad(_masked_broadcast_named))


def _masked_broadcast(v, source):
    """lax.pbroadcast's definition (it has no CPU lowering): the source's block, everywhere."""
    return lax.all_gather(v, "x")[source]


def _masked_broadcast_named(v, axis, source):
    return jm.psum(jnp.where(lax.axis_index(axis) == source, v, 0), axis)


def test_rewrite_replaces_ppermute_pshuffle_pbroadcast_and_invariant_gather(mesh8, rng):
    x = random_array(rng, (8 * 3,), "float32")

    def body(v):
        a = lax.ppermute(v, "x", [(i, (i + 3) % 8) for i in range(8)])
        b = lax.pshuffle(v, "x", [1, 2, 3, 4, 5, 6, 7, 0])
        c = lax.ppermute(v, "x", [(7, 1)])
        d = lax.all_gather(v, "x", to="invarying")
        return a + b + c, d

    f = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=(P("x"), P())))
    rewritten = jax.jit(jm.rewrite(jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=(P("x"), P()))))
    text = rewritten.lower(x).as_text()
    assert "jax_mscclpp_permute" in text and "collective_permute" not in text
    assert "jax_mscclpp_all_gather" in text and "all_gather" not in text.replace("jax_mscclpp_all_gather", "")
    assert_same(rewritten(x), f(x))
    grad = jax.grad(lambda v: jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=(P("x"), P()))(v)[0].sum())
    assert_same(jax.jit(jm.rewrite(grad))(x), jax.jit(grad)(x))
    # lax.pbroadcast has no CPU lowering: rewritten, it runs (as our all_gather) and equals its definition.
    broadcast = jax.shard_map(lambda v: lax.pbroadcast(v, "x", 3), mesh=mesh8, in_specs=P("x"), out_specs=P("x"))
    assert_same(jax.jit(jm.rewrite(broadcast))(x), jnp.tile(x.reshape(8, -1)[3], 8))


@pytest.mark.parametrize("name", ["mixed_self", "swap_pairs", "one_pair"])
def test_a_plan_of_the_permutation_runs_its_pairs(mesh8, rng, name):
    """A permutation written in our DSL, registered: ppermute with its pairs runs the plan, every dtype bit for
    bit, ranks that receive nothing get zeros; by size range a call of another permutation passes it over."""
    from tests.dsl.test_dsl_plan import shift_program

    perm = PERMS[name]
    entry = jm.register_algorithm(shift_program(8, perm), name=f"dsl_permute_{name}")
    try:
        for dtype in ("float32", "bfloat16", "int8"):
            x = random_array(rng, (8 * 37,), dtype)
            ours = jax.shard_map(lambda v: jm.ppermute(v, "x", perm), mesh=mesh8, in_specs=P("x"), out_specs=P("x"))
            assert [call.algorithm for call in jm.explain(ours, x)] == [entry.name]
            compare_with_lax(lambda v: jm.ppermute(v, "x", perm), lambda v: lax.ppermute(v, "x", perm),
                             mesh8, (x,), P("x"), P("x"))
        other = jax.shard_map(lambda v: jm.ppermute(v, "x", PERMS["shift"]), mesh=mesh8, in_specs=P("x"),
                              out_specs=P("x"))
        assert [call.algorithm for call in jm.explain(other, x)] != [entry.name]
    finally:
        jm.unregister_algorithm(entry.name)
