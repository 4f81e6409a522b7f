"""Collectives over a world of one (a one-device mesh, or axes whose sizes multiply to one on a larger mesh) type
and compute exactly as lax does: a reduction's result is invariant over the reduced axes, so ``out_specs=P()``
works, under ``jax.grad``, ``vmap`` and with ``check_vma`` on and off."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp import _compat, fused

from .helpers import P, assert_same, random_array, sharded

# (mesh shape, axis names, the axes reduced over): each product of reduced sizes is one.
MESHES = {
    "one_device": ((1,), ("tp",), "tp"),
    "size_one_inner": ((8, 1), ("dp", "tp"), "tp"),
    "size_one_outer": ((1, 8), ("tp", "dp"), "tp"),
    "two_size_one_axes": ((1, 1, 8), ("a", "b", "dp"), ("a", "b")),
}


def make_mesh(cpu_devices, case):
    shape, names, axes = MESHES[case]
    n = int(np.prod(shape))
    return Mesh(np.array(cpu_devices[:n]).reshape(shape), names), axes


def in_spec(mesh):
    """Rows sharded over every mesh axis, so each device holds its own (varying) block."""
    return P(mesh.axis_names)


REDUCTIONS = {"psum": (jm.psum, lax.psum), "pmax": (jm.pmax, lax.pmax), "pmin": (jm.pmin, lax.pmin)}


@pytest.mark.parametrize("check_vma", [True, False], ids=["vma", "no_vma"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("case", sorted(MESHES))
def test_reductions_are_invariant_as_lax(cpu_devices, rng, case, name, check_vma):
    mesh, axes = make_mesh(cpu_devices, case)
    ours_fn, lax_fn = REDUCTIONS[name]
    x = random_array(rng, (mesh.devices.size * 3, 5), "float32")
    # The reduced axes are replicated in the output; the other axes keep their rows.
    others = tuple(a for a in mesh.axis_names if a not in (axes if isinstance(axes, tuple) else (axes,)))
    out = P(others or None)
    got = sharded(lambda v: ours_fn(v, axes), mesh, (in_spec(mesh),), out, check_vma)(x)
    want = sharded(lambda v: lax_fn(v, axes), mesh, (in_spec(mesh),), out, check_vma)(x)
    assert_same(got, want)


@pytest.mark.parametrize("case", sorted(MESHES))
def test_types_match_lax_for_every_collective(cpu_devices, case):
    """The varying axes of every result equal lax's."""
    mesh, axes = make_mesh(cpu_devices, case)
    pairs = {
        "psum": (lambda v: jm.psum(v, axes), lambda v: lax.psum(v, axes)),
        "psum_of_pytree": (lambda v: jm.psum({"a": v, "b": v[:1]}, axes),
                           lambda v: lax.psum({"a": v, "b": v[:1]}, axes)),
        "psum_done": (lambda v: jm.psum_done(jm.psum_start(v, axes)), lambda v: lax.psum(v, axes)),
        "all_gather": (lambda v: jm.all_gather(v, axes), lambda v: lax.all_gather(v, axes)),
        "all_gather_tiled": (lambda v: jm.all_gather(v, axes, tiled=True),
                             lambda v: lax.all_gather(v, axes, tiled=True)),
        "psum_scatter": (lambda v: jm.psum_scatter(v, axes, tiled=True),
                         lambda v: lax.psum_scatter(v, axes, tiled=True)),
        "all_to_all": (lambda v: jm.all_to_all(v, axes, 0, 1, tiled=True),
                       lambda v: lax.all_to_all(v, axes, 0, 1, tiled=True)),
        "all_reduce_residual": (lambda v: fused.all_reduce_residual(v, v, axes),
                                lambda v: v + lax.psum(v, axes)),
    }
    seen = {}

    def body(v):
        for name, (ours_fn, lax_fn) in pairs.items():
            for tag, fn in (("ours", ours_fn), ("lax", lax_fn)):
                seen[name, tag] = jax.tree_util.tree_map(lambda a: _compat.varying_axes(jax.typeof(a)), fn(v))
        return v

    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(in_spec(mesh),), out_specs=in_spec(mesh)))(
        jnp.ones((mesh.devices.size * 4, 4), jnp.float32))
    for name in pairs:
        assert seen[name, "ours"] == seen[name, "lax"], (name, seen[name, "ours"], seen[name, "lax"])


@pytest.mark.parametrize("case", sorted(MESHES))
def test_fused_rmsnorm_matches_its_composition(cpu_devices, rng, case):
    mesh, axes = make_mesh(cpu_devices, case)
    x = random_array(rng, (mesh.devices.size * 2, 16), "float32")
    residual = random_array(rng, (mesh.devices.size * 2, 16), "float32")
    weight = random_array(rng, (16,), "float32")
    spec = in_spec(mesh)

    def ours(a, r, w):
        return fused.all_reduce_residual_rmsnorm(a, r, w, axes)

    def reference(a, r, w):
        total = r + lax.psum(a, axes)
        t32 = total * lax.rsqrt(jnp.mean(total * total, axis=-1, keepdims=True) + 1e-6)
        return t32 * w, total

    got = sharded(ours, mesh, (spec, spec, P()), (spec, spec))(x, residual, weight)
    want = sharded(reference, mesh, (spec, spec, P()), (spec, spec))(x, residual, weight)
    assert_same(got, want)


@pytest.mark.parametrize("check_vma", [True, False], ids=["vma", "no_vma"])
@pytest.mark.parametrize("case", sorted(MESHES))
def test_grad_of_psum_matches_lax(cpu_devices, rng, case, check_vma):
    mesh, axes = make_mesh(cpu_devices, case)
    x = random_array(rng, (mesh.devices.size * 2, 3), "float32")
    spec = in_spec(mesh)

    def loss(psum_fn):
        def f(v):
            return jnp.sum(jnp.sin(psum_fn(v * v, axes)))
        return lambda v: jax.grad(f)(v)

    got = sharded(loss(jm.psum), mesh, (spec,), spec, check_vma)(x)
    want = sharded(loss(lax.psum), mesh, (spec,), spec, check_vma)(x)
    assert_same(got, want)


@pytest.mark.parametrize("case", sorted(MESHES))
def test_vmap_of_psum_matches_lax(cpu_devices, rng, case):
    mesh, axes = make_mesh(cpu_devices, case)
    x = random_array(rng, (mesh.devices.size * 2, 4, 3), "float32")
    spec = in_spec(mesh)
    got = sharded(jax.vmap(lambda v: jm.psum(v, axes)), mesh, (spec,), spec)(x)
    want = sharded(jax.vmap(lambda v: lax.psum(v, axes)), mesh, (spec,), spec)(x)
    assert_same(got, want)


def test_readme_snippet_on_one_device(cpu_devices, rng):
    """README's row-parallel example, on a mesh of one device (a laptop, a one-GPU box)."""
    mesh = Mesh(np.array(cpu_devices[:1]), ("tp",))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(None, "tp"), P("tp", None)), out_specs=P())
    def row_parallel(h, w):
        return jm.psum(h @ w, "tp")

    h, w = random_array(rng, (4, 8), "float32"), random_array(rng, (8, 6), "float32")
    np.testing.assert_allclose(np.asarray(row_parallel(h, w)), np.asarray(h @ w), rtol=1e-5, atol=1e-5)
