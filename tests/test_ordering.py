"""Independent collectives in one program on CPU devices. XLA's CPU runtime orders operations only by the buffers
they use and runs independent ones concurrently; the lowering chains the collectives of a block so that every
device runs them one at a time in program order (jax_mscclpp/_ordering.py), and what it cannot chain the host
backend refuses with a clear error: never a wrong answer, never a hang."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from tests.helpers import P, assert_same, random_array, sharded

CALLS = {
    "psum": (lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x")),
    "all_gather": (lambda v: jm.all_gather(v, "x", tiled=True), lambda v: lax.all_gather(v, "x", tiled=True)),
    "psum_scatter": (lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True)),
    "all_to_all": (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True),
                   lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True)),
}


def test_independent_collectives_of_a_pytree_and_of_a_block(cpu_devices, rng):
    mesh = Mesh(np.array(cpu_devices[:5])[[3, 0, 4, 1, 2]], ("x",))
    names = list(CALLS) * 5  # 20 independent calls, buffers past 512 bytes: XLA would run them concurrently
    xs = [random_array(rng, (5 * 5 * (8 + i),), ("float32", "int32")[i % 2]) for i in range(len(names))]
    tree = {"a": [random_array(rng, (5 * 300,), "float32") for _ in range(6)], "b": random_array(rng, (5 * 7,), "int8")}

    def program(which):
        def run(tree, *vs):
            return jm.psum(tree, "x") if which == 0 else lax.psum(tree, "x"), tuple(
                CALLS[name][which](v) for name, v in zip(names, vs))
        return sharded(run, mesh, (P("x"), *(P("x"),) * len(xs)), (P(), (P("x"),) * len(xs)))

    text = program(0).lower(tree, *xs).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call @jax_mscclpp" in line]
    # 20 calls and the tree's 7 small leaves in 2 buckets (float32, int8); each call after its predecessor.
    assert len(calls) == 22 and all(line.count("%") >= 4 for line in calls[1:])
    for _ in range(3):
        assert_same(program(0)(tree, *xs), program(1)(tree, *xs))


def test_collectives_in_different_blocks_never_mix(cpu_devices, rng):
    """A collective outside a loop and one inside it are not chained: XLA may overlap them. Whatever it does, the
    result is lax's or an error saying that two calls overlapped."""
    mesh = Mesh(np.array(cpu_devices[:8])[::-1], ("x",))
    a, b = random_array(rng, (8 * 512,), "float32"), random_array(rng, (8 * 512,), "float32")

    def program(psum):
        def run(a, b):
            inside = lax.fori_loop(0, 3, lambda i, v: lax.pcast(psum(v, "x"), "x", to="varying") * 0.125, b)
            return psum(a, "x"), inside
        return sharded(run, mesh, (P("x"), P("x")), (P(), P("x")))

    want = program(lax.psum)(a, b)
    for _ in range(4):
        try:
            got = program(jm.psum)(a, b)
        except Exception as error:  # noqa: BLE001 - the one failure allowed
            assert "ran at the same time" in str(error), error
            jm.Communicator(mesh, "x").destroy()  # the failed group is unusable; the next program gets a new one
            continue
        assert_same(got, want)
