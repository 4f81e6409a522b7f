"""psum / pmax / pmin against lax on random data: every dtype, odd sizes, scalars, every CPU algorithm."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from jax_mscclpp._types import _ALWAYS
from tests.helpers import P, assert_same, compare_with_lax, random_array, sharded

DTYPES = list(_ALWAYS)  # every dtype row of codes.def but the 8-byte ones (tests/test_x64.py)
LAX_OF = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("count", [1, 3, 1023])
def test_matches_lax(mesh8, rng, dtype, op, count):
    x = random_array(rng, (8 * count,), dtype)
    compare_with_lax(
        lambda v: jm.all_reduce(v, "x", op=op),
        lambda v: LAX_OF[op](v, "x"),
        mesh8, (x,), P("x"), P(),
    )


@pytest.mark.parametrize("algorithm", ["1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "lax"])
@pytest.mark.parametrize("shape", [(8, 1), (8, 5, 7), (8 * 4099,)])
def test_forced_algorithms(mesh8, rng, algorithm, shape):
    x = random_array(rng, shape, "float32")
    compare_with_lax(
        lambda v: jm.psum(v, "x", algorithm=algorithm), lambda v: lax.psum(v, "x"), mesh8, (x,), P("x"), P()
    )


def test_scalars_and_python_numbers(mesh8, rng):
    x = random_array(rng, (8,), "float32")
    compare_with_lax(lambda v: jm.psum(v[0], "x"), lambda v: lax.psum(v[0], "x"), mesh8, (x,), P("x"), P())
    # An invariant value is cast to varying first, as lax does: psum(1) is the axis size.
    out = compare_with_lax(lambda v: jm.psum(1.5, "x"), lambda v: lax.psum(1.5, "x"), mesh8, (x,), P("x"), P())
    assert float(out) == 12.0


def test_pytree(mesh8, rng):
    tree = {"a": random_array(rng, (8, 3), "float32"), "b": [random_array(rng, (8,), "int32")]}
    specs = {"a": P("x"), "b": [P("x")]}
    compare_with_lax(lambda t: jm.pmax(t, "x"), lambda t: lax.pmax(t, "x"), mesh8, (tree,), (specs,),
                     {"a": P(), "b": [P()]})


def test_large_message_pipelines_through_small_scratch(cpu_devices, rng):
    from jax.sharding import Mesh

    # A mesh of its own (reversed device order), so its communicator is made here with a tiny scratch:
    # every algorithm then runs many rounds, alternating scratch halves.
    mesh = Mesh(np.array(cpu_devices[:8][::-1]), ("x",))
    jm.Communicator(mesh, "x", scratch_bytes=1024)
    x = random_array(rng, (8 * 3001,), "float32")
    for algorithm in ["1pa_ll", "2pa_hb"]:
        compare_with_lax(lambda v: jm.psum(v, "x", algorithm=algorithm), lambda v: lax.psum(v, "x"),
                         mesh, (x,), P("x"), P())
    y = random_array(rng, (8 * 8 * 301,), "int32")
    compare_with_lax(lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x"), mesh, (y,), P("x"), P("x"))
    compare_with_lax(lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True),
                     mesh, (y,), P("x"), P("x"))
    compare_with_lax(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True),
                     lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), mesh, (y,), P("x"), P("x"))


def test_back_to_back_calls_in_fori_loop(mesh8, rng):
    x = random_array(rng, (8 * 17,), "float32")

    def body(reduce):
        def run(v):
            return lax.fori_loop(0, 200, lambda i, acc: reduce(acc, "x") / 8.0 + 0.001 * i, v)
        return run

    compare_with_lax(body(lambda v, a: lax.pcast(jm.psum(v, a), a, to="varying")),
                     body(lambda v, a: lax.pcast(lax.psum(v, a), a, to="varying")),
                     mesh8, (x,), P("x"), P("x"))


def test_check_vma_false(mesh8, rng):
    x = random_array(rng, (8 * 6,), "float32")
    compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh8, (x,), P("x"), P("x"),
                     check_vma=False)


def test_world_size_one_is_identity(cpu_devices, rng):
    from jax.sharding import Mesh

    mesh = Mesh(np.array(cpu_devices[:8]).reshape(8, 1), ("x", "one"))
    x = random_array(rng, (8, 3), "float32")
    compare_with_lax(lambda v: jm.psum(v, "one"), lambda v: lax.psum(v, "one"), mesh, (x,), P("x"), P("x"))


def test_inside_pmap_matches_lax(cpu_devices, rng):
    x = random_array(rng, (8, 3), "float32")
    ours = jax.pmap(lambda v: jm.psum(v, "i"), axis_name="i")(x)
    assert_same(ours, jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x))


def _lowered_calls(mesh8, fn, tree):
    """(our custom calls, lax all-reduces) in the lowered program of fn over ``tree`` (shapes per rank)."""
    specs = jax.tree_util.tree_map(lambda _: P("x"), tree)
    outs = jax.tree_util.tree_map(lambda _: P(), tree)
    args = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct((8 * s.shape[0], *s.shape[1:]), s.dtype), tree)
    text = sharded(fn, mesh8, (specs,), outs).lower(args).as_text()
    return text.count("@jax_mscclpp_all_reduce"), text.count("stablehlo.all_reduce")


def test_gradient_like_tree_sum_emits_lax_for_its_large_leaves(mesh8, monkeypatch):
    """Under auto, psum of a tree with two or more large leaves totalling 64 MiB per rank (a training step's
    gradients) emits lax's all-reduces for those leaves, which XLA overlaps with the backward pass; the small leaves
    still share one call of ours. Anything else stays ours."""
    monkeypatch.delenv("JAX_MSCCLPP_ALGORITHM", raising=False)
    big = jax.ShapeDtypeStruct((5 << 20,), jnp.float32)  # 20 MiB per rank
    bias = jax.ShapeDtypeStruct((4096,), jnp.float32)
    grads = [{"w": big, "b": bias} for _ in range(4)]  # 80 MiB of large leaves
    assert _lowered_calls(mesh8, lambda t: jm.psum(t, "x"), grads) == (1, 4)
    # A forced algorithm, the environment's, or other reductions: ours for every leaf.
    assert _lowered_calls(mesh8, lambda t: jm.psum(t, "x", algorithm="2pa_hb"), grads) == (5, 0)
    assert _lowered_calls(mesh8, lambda t: jm.pmax(t, "x"), grads) == (5, 0)
    monkeypatch.setenv("JAX_MSCCLPP_ALGORITHM", "2pa_hb")
    assert _lowered_calls(mesh8, lambda t: jm.psum(t, "x"), grads) == (5, 0)
    monkeypatch.delenv("JAX_MSCCLPP_ALGORITHM")
    # One large leaf, or large leaves under 64 MiB in all: not a gradient sum.
    assert _lowered_calls(mesh8, lambda t: jm.psum(t, "x"), grads[:1]) == (2, 0)
    assert _lowered_calls(mesh8, lambda t: jm.psum(t, "x"), grads[:3]) == (4, 0)
