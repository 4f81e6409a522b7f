"""all_gather, psum_scatter and all_to_all against lax on random data, every dtype, every axis and tiling."""

import pytest
from jax import lax

import jax_mscclpp as jm
from tests.helpers import P, compare_with_lax, random_array

DTYPES = ["float32", "bfloat16", "float16", "int32", "uint32", "int8", "uint8"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [1, 3, 1023])
def test_all_gather_dtypes(mesh8, rng, dtype, count):
    x = random_array(rng, (8 * count,), dtype)
    compare_with_lax(lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x"), mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("axis,tiled", [(0, False), (1, False), (2, False), (-1, False), (0, True), (1, True)])
def test_all_gather_axes(mesh8, rng, axis, tiled):
    x = random_array(rng, (8 * 3, 5), "float32")
    compare_with_lax(lambda v: jm.all_gather(v, "x", axis=axis, tiled=tiled),
                     lambda v: lax.all_gather(v, "x", axis=axis, tiled=tiled), mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [1, 3, 1023])
def test_psum_scatter_dtypes(mesh8, rng, dtype, count):
    x = random_array(rng, (8 * 8, count), dtype)
    compare_with_lax(lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True),
                     mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("dim,tiled", [(0, False), (1, False), (1, True), (-1, True)])
def test_psum_scatter_dimensions(mesh8, rng, dim, tiled):
    shape = {(0, False): (8 * 8, 3), (1, False): (8 * 3, 8), (1, True): (8 * 3, 16), (-1, True): (8, 5, 24)}[(dim, tiled)]
    x = random_array(rng, shape, "float32")
    lax_dim = dim % len(shape)  # lax.psum_scatter rejects negative dimensions at lowering; ours accepts them
    compare_with_lax(lambda v: jm.reduce_scatter(v, "x", scatter_dimension=dim, tiled=tiled),
                     lambda v: lax.psum_scatter(v, "x", scatter_dimension=lax_dim, tiled=tiled),
                     mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all_dtypes(mesh8, rng, dtype):
    x = random_array(rng, (8 * 8, 7), dtype)
    compare_with_lax(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True),
                     lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("split,concat,tiled", [
    (0, 0, False), (0, 1, False), (1, 0, False), (1, 2, False), (2, 0, False),
    (0, 1, True), (1, 0, True), (2, 1, True), (1, 1, True),
])
def test_all_to_all_axes(mesh8, rng, split, concat, tiled):
    shape = [8 * 2, 3, 5]
    shape[split] = 8 * (2 if tiled else 1) * (8 if split == 0 else 1)
    x = random_array(rng, tuple(shape), "float32")
    compare_with_lax(lambda v: jm.all_to_all(v, "x", split, concat, tiled=tiled),
                     lambda v: lax.all_to_all(v, "x", split, concat, tiled=tiled), mesh8, (x,), P("x"), P("x"))
