"""ppermute, pshuffle and pbroadcast against lax on random data: every permutation shape (full, partial, empty,
identity, shifts), odd sizes, every dtype, jax.grad, vmap, 1-device, 1-D and 2-D meshes with tuples of axes,
payloads larger than the scratch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from tests.helpers import P, assert_same, compare_with_lax, random_array, sharded

NATIVE_DTYPES = ["float32", "bfloat16", "float16", "int32", "uint32", "int8", "uint8", "int16", "uint16"]
# Dtypes the kernels do not have, moved as bytes (jax_mscclpp/carriers.py).
BYTE_DTYPES = ["bool", "complex64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
               "float8_e4m3b11fnuz"]


def any_array(rng, shape, dtype):
    """Random values of any dtype, never all zeros: bool half true, complex with both parts random, fp8 from
    random floats."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        first = np.arange(np.prod(shape)).reshape(shape) == 0
        return jnp.asarray(rng.integers(0, 2, size=shape).astype(bool) | first)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        parts = rng.standard_normal((2, *shape)).astype(np.float32) * 3
        return jnp.asarray((parts[0] + 1j * parts[1]).astype(dtype))
    if dtype.name.startswith("float8"):
        return jnp.asarray(rng.standard_normal(shape).astype(np.float32) * 3).astype(dtype)
    return random_array(rng, shape, dtype)


def bits_equal(a, b):
    a, b = np.asarray(jax.block_until_ready(a)), np.asarray(jax.block_until_ready(b))
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


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
    bits_equal(ours, sharded(lambda v: lax.ppermute(v, "x", perm), mesh8, P("x"), P("x"))(x))


@pytest.mark.parametrize("dtype", BYTE_DTYPES)
def test_data_movement_of_byte_dtypes_is_lax_bit_for_bit(mesh8, rng, dtype):
    x = any_array(rng, (8 * 8, 3), dtype)
    for ours, ref in [
        (lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x")),
        (lambda v: jm.all_gather(v, "x", axis=1, tiled=True), lambda v: lax.all_gather(v, "x", axis=1, tiled=True)),
        (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True), lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True)),
        (lambda v: jm.all_to_all(v, "x", 0, 1), lambda v: lax.all_to_all(v, "x", 0, 1)),
        (lambda v: jm.pbroadcast(v, "x", 6), lambda v: jm.psum(jnp.where(lax.axis_index("x") == 6, v, 0), "x")
         if v.dtype == jnp.complex64 else _masked_broadcast(v, 6)),
    ]:
        bits_equal(sharded(ours, mesh8, P("x"), P("x"))(x), sharded(ref, mesh8, P("x"), P("x"))(x))


def _masked_broadcast(v, source):
    """lax.pbroadcast's definition (it has no CPU lowering): the source's block, everywhere."""
    return lax.all_gather(v, "x")[source]


def test_complex_psum_and_bool_sums_match_lax(mesh8, rng):
    z = any_array(rng, (8 * 4, 3), "complex64")
    compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh8, (z,), P("x"), P())
    compare_with_lax(lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True),
                     mesh8, (jnp.tile(z, (8, 1)),), P("x"), P("x"))
    b = any_array(rng, (8 * 4, 3), "bool")
    for ours, ref in [(jm.psum, lax.psum), (jm.pmax, lax.pmax), (jm.pmin, lax.pmin)]:
        assert_same(sharded(lambda v: ours(v, "x"), mesh8, P("x"), P())(b),
                    sharded(lambda v: ref(v, "x"), mesh8, P("x"), P())(b))
    assert sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P())(b).dtype == jnp.int32


def test_grad_of_complex_and_gathered_values(mesh8, rng):
    x = random_array(rng, (8 * 4,), "float32")

    def loss(gather, psum):
        def f(v):
            z = v * (1 + 2j)
            g = gather(z, "x", tiled=True)
            return jnp.real(psum(g * jnp.conj(g), "x")).sum(keepdims=True)
        return sharded(f, mesh8, P("x"), P())

    ours = jax.grad(lambda v: loss(jm.all_gather, jm.psum)(v).sum())(x)
    ref = jax.grad(lambda v: loss(lax.all_gather, lax.psum)(v).sum())(x)
    assert_same(ours, ref)


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


def test_2d_mesh_tuple_of_axes(cpu_devices, rng):
    # A device order of its own, so that the ranks of ("a", "b") are not the device ids.
    mesh = Mesh(np.array(cpu_devices[:8])[[5, 2, 7, 0, 3, 6, 1, 4]].reshape(2, 4), ("a", "b"))
    x = random_array(rng, (2 * 3, 4 * 5), "float32")
    specs = P("a", "b")
    for axes, perm in [(("a", "b"), [(i, (3 * i + 1) % 8) for i in range(8)]), (("b", "a"), [(0, 7), (7, 0), (2, 3)]),
                       ("b", [(0, 3), (3, 2), (2, 0)]), ("a", [(0, 1)])]:
        compare_with_lax(lambda v: jm.ppermute(v, axes, perm), lambda v: lax.ppermute(v, axes, perm),
                         mesh, (x,), specs, specs)
    compare_with_lax(lambda v: jm.pbroadcast(v, ("a", "b"), 5), lambda v: lax.all_gather(v, ("a", "b"))[5],
                     mesh, (x,), specs, specs)


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


def _masked_broadcast_named(v, axis, source):
    return jm.psum(jnp.where(lax.axis_index(axis) == source, v, 0), axis)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8", "bool"])
def test_pmean_matches_lax(mesh8, rng, dtype):
    x = any_array(rng, (8 * 5, 2), dtype)
    ours = sharded(lambda v: jm.pmean(v, "x"), mesh8, P("x"), P())(x)
    ref = sharded(lambda v: lax.pmean(v, "x"), mesh8, P("x"), P())(x)
    assert ours.dtype == ref.dtype
    np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(ref, np.float64), rtol=2e-2, atol=1e-5)


def test_all_gather_to_invarying(mesh8, rng):
    x = random_array(rng, (8 * 3, 2), "float32")
    w = random_array(rng, (8 * 3, 2), "float32")
    compare_with_lax(lambda v: jm.all_gather(v, "x", axis=1, tiled=True, to="invarying"),
                     lambda v: lax.all_gather(v, "x", axis=1, tiled=True, to="invarying"), mesh8, (x,), P("x"), P())

    def loss(gather):
        f = sharded(lambda v, u: (gather(jnp.sin(v), "x", to="invarying") ** 2).sum(keepdims=True) * u.sum(),
                    mesh8, (P("x"), P("x")), P("x"))
        return lambda v, u: f(v, u).sum()

    assert_same(jax.grad(loss(jm.all_gather), argnums=(0, 1))(x, w),
                jax.grad(loss(lax.all_gather), argnums=(0, 1))(x, w))
    batched = lambda gather: lambda v: jax.vmap(lambda r: gather(r, "x", to="invarying"), in_axes=1)(v)
    compare_with_lax(batched(jm.all_gather), batched(lax.all_gather), mesh8, (x,), P("x"), P())


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


def test_bf16_and_f16_sums_accumulate_in_f32(mesh8, rng):
    """The host backend folds 16-bit floats in f32 and rounds once, as the GPU kernels do: its error against the
    exact sum is about lax's (XLA's CPU all-reduce), not that of a rounding after every add."""
    for dtype in ("bfloat16", "float16"):
        x = jnp.asarray(rng.standard_normal((8 * 4096,)).astype(np.float32)).astype(dtype)
        exact = np.asarray(x, np.float64).reshape(8, -1).sum(0)
        errors = {}
        for name, algorithm in [("lax", "lax"), ("1pa_ll", "1pa_ll"), ("2pa_hb", "2pa_hb")]:
            out = sharded(lambda v: jm.psum(v, "x", algorithm=algorithm), mesh8, P("x"), P())(x)
            errors[name] = float(np.mean(np.abs(np.asarray(out, np.float64) - exact)))
        assert errors["1pa_ll"] <= 1.1 * errors["lax"] and errors["2pa_hb"] <= 1.1 * errors["lax"], (dtype, errors)
