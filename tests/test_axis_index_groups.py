"""``axis_index_groups=`` over one mesh axis under shard_map (where lax's collectives refuse them), held against a
model of lax's semantics: each rank's collective runs over its group's members, in the order the group lists them.
The model works on the stacked operands of every rank (``xs[r]``: rank r's), rank by rank, with static indices."""

import importlib
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp import groups

from .helpers import OWN_SUMS, P, assert_same, own_sum, random_array, sharded

PAIRS = [[0, 5], [1, 4], [2, 7], [3, 6]]      # size 2, not contiguous
QUADS = [[7, 1, 4, 2], [0, 6, 3, 5]]          # size 4, not contiguous, not in axis order
HALVES = [[0, 2, 4, 6], [1, 3, 5, 7]]
UNEQUAL = [[0, 1, 6], [2, 3, 4, 5, 7]]        # the reductions take groups of different sizes
DTYPES = ["float32", "int32", "bfloat16"]
COMPOSED = importlib.import_module("jax_mscclpp.explain").COMPOSED
ROWS = 4  # leading rows per rank's operand: divisible by every group size here


def _group_of(groups_, rank):
    (group,) = [g for g in groups_ if rank in g]
    return group


def model(name, xs, groups_, **kw):
    """lax's semantics of ``name`` with ``groups_``: the stacked results of every rank (xs stacked the same way)."""
    out = []
    for rank in range(xs.shape[0]):
        group = _group_of(groups_, rank)
        k, p = len(group), group.index(rank)
        mine = [xs[m] for m in group]
        if name in ("psum", "pmax", "pmin", "pmean"):
            combine = {"pmax": jnp.maximum, "pmin": jnp.minimum}.get(name, jnp.add)
            total = mine[0]
            for v in mine[1:]:
                total = combine(total, v)
            out.append(total / k if name == "pmean" else total)
        elif name == "all_gather":
            axis, tiled = kw["axis"], kw["tiled"]
            out.append(jnp.concatenate(mine, axis) if tiled else jnp.stack(mine, axis))
        elif name == "psum_scatter":
            d, tiled = kw["scatter_dimension"], kw["tiled"]
            total = mine[0]
            for v in mine[1:]:
                total = total + v
            chunk = jnp.split(total, k, axis=d)[p]
            out.append(chunk if tiled else jnp.squeeze(chunk, d))
        elif name == "all_to_all":
            split, concat, tiled = kw["split_axis"], kw["concat_axis"], kw["tiled"]
            pieces = [jnp.split(v, k, axis=split)[p] for v in mine]
            if tiled:
                out.append(jnp.concatenate(pieces, concat))
            else:
                out.append(jnp.stack([jnp.squeeze(piece, split) for piece in pieces], concat))
    return jnp.stack(out)


def ours(name, groups_, **kw):
    fn = getattr(jm, name)
    if name == "all_to_all":
        return lambda v: fn(v, "x", kw["split_axis"], kw["concat_axis"], tiled=kw["tiled"],
                            axis_index_groups=groups_)
    return lambda v: fn(v, "x", axis_index_groups=groups_, **kw)


def run_ours(mesh, name, groups_, xs, **kw):
    """Ours under jit(shard_map) on the per-rank operands ``xs`` (stacked), its results stacked per rank."""
    f = sharded(lambda v: ours(name, groups_, **kw)(v[0])[None], mesh, P("x"), P("x"))
    return jax.block_until_ready(f(xs))


def check(mesh, name, groups_, xs, **kw):
    got = run_ours(mesh, name, groups_, xs, **kw)
    want = model(name, xs, groups_, **kw)
    magnitude = None
    if jnp.issubdtype(xs.dtype, jnp.floating):
        magnitude = model(name, jnp.abs(xs.astype(jnp.float32)), groups_, **kw)
    assert_same(got, want.astype(got.dtype) if name != "pmean" else want, magnitude)


# (name, parameters, per-rank operand shape given the group size k)
CASES = [
    ("psum", {}, lambda k: (ROWS, 3)),
    ("pmax", {}, lambda k: (ROWS, 3)),
    ("pmin", {}, lambda k: (ROWS, 3)),
    ("pmean", {}, lambda k: (ROWS, 3)),
    ("all_gather", {"axis": 0, "tiled": False}, lambda k: (ROWS, 3)),
    ("all_gather", {"axis": 2, "tiled": False}, lambda k: (ROWS, 3)),
    ("all_gather", {"axis": 1, "tiled": True}, lambda k: (ROWS, 3)),
    ("psum_scatter", {"scatter_dimension": 0, "tiled": True}, lambda k: (ROWS, 3)),
    ("psum_scatter", {"scatter_dimension": 1, "tiled": False}, lambda k: (3, k)),
    ("all_to_all", {"split_axis": 0, "concat_axis": 1, "tiled": True}, lambda k: (ROWS, 3)),
    ("all_to_all", {"split_axis": 1, "concat_axis": 0, "tiled": True}, lambda k: (3, ROWS)),
    ("all_to_all", {"split_axis": 0, "concat_axis": 1, "tiled": False}, lambda k: (k, 3)),
    ("all_to_all", {"split_axis": 1, "concat_axis": 0, "tiled": False}, lambda k: (3, k, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups_", [PAIRS, QUADS, HALVES], ids=["pairs", "quads", "halves"])
@pytest.mark.parametrize("name,kw,shape", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_against_the_model(mesh8, rng, name, kw, shape, groups_, dtype):
    xs = random_array(rng, (8, *shape(len(groups_[0]))), dtype)
    check(mesh8, name, groups_, xs, **kw)


def test_pmean_of_integers(mesh8, rng):
    # As lax: the integer sum divided by the group size, a float.
    xs = jnp.asarray(rng.integers(-1000, 1000, size=(8, ROWS, 3)).astype(np.int32))
    got = run_ours(mesh8, "pmean", QUADS, xs)
    assert got.dtype == jnp.float32
    assert_same(got, model("pmean", xs, QUADS))


@pytest.mark.parametrize("name", ["psum", "pmax", "pmin"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_take_groups_of_unequal_sizes(mesh8, rng, name, dtype):
    check(mesh8, name, UNEQUAL, random_array(rng, (8, ROWS, 3), dtype))


def test_a_pytree_of_small_leaves_and_bool_counts(mesh8, rng):
    x = random_array(rng, (8, 5), "float32")
    n = random_array(rng, (8, 2, 3), "int32")
    b = jnp.asarray(rng.integers(0, 2, size=(8, 7)).astype(bool))
    def body(x, n, b):
        summed = jm.psum((x[0], {"n": n[0], "b": b[0]}), "x", axis_index_groups=PAIRS)
        return jax.tree_util.tree_map(lambda v: v[None], summed)

    f = sharded(body, mesh8, (P("x"),) * 3, P("x"))
    got = f(x, n, b)
    assert_same(got, (model("psum", x, PAIRS), {"n": model("psum", n, PAIRS),
                                                "b": model("psum", b.astype(jnp.int32), PAIRS)}))


def test_one_group_of_the_whole_axis_is_the_plain_call(mesh8, rng):
    xs = random_array(rng, (8, ROWS, 3), "float32")
    whole = [list(range(8))]
    for name, kw in [("psum", {}), ("all_gather", {"axis": 0, "tiled": True})]:
        plain = sharded(lambda v: ours(name, None, **kw)(v[0])[None], mesh8, P("x"), P("x"))
        assert_same(run_ours(mesh8, name, whole, xs, **kw), plain(xs))
    # the plain call: no composition noted, and psum's result is invariant over the axis as ours types it
    calls = jm.explain(sharded(lambda v: jm.psum(v, "x", axis_index_groups=whole), mesh8, P("x"), P()), xs)
    assert not [c for c in calls if c.algorithm == COMPOSED]
    # a whole-axis group in another order gathers in that order
    check(mesh8, "all_gather", [list(range(8))[::-1]], xs, axis=0, tiled=False)


def _gather_scatter_a2a(module, groups_):
    def f(v, w):
        h = jnp.sin(v @ w)
        g = module.all_gather(h, "x", axis=1, tiled=True, axis_index_groups=groups_)
        s = module.psum_scatter(g * g, "x", scatter_dimension=0, tiled=True, axis_index_groups=groups_)
        t = module.all_to_all(s, "x", 1, 0, tiled=True, axis_index_groups=groups_)
        m = module.pmean(t, "x", axis_index_groups=groups_)
        return module.psum(jnp.tanh(t) * m, "x", axis_index_groups=groups_)
    return f


@pytest.mark.parametrize("groups_", [PAIRS, QUADS], ids=["pairs", "quads"])
def test_grad_matches_lax_under_pmap(mesh8, rng, groups_):
    # lax computes these groups under pmap (not under shard_map): ours under shard_map against lax's under pmap
    # (lax has no gradient of pmax; test_grad_matches_the_model covers ours).
    x, w = random_array(rng, (8, 4, 3), "float32"), random_array(rng, (3, 4), "float32")
    ct = random_array(rng, (8, 4, 4), "float32")

    def loss_ours(x, w):
        f = sharded(lambda v, w: _gather_scatter_a2a(jm, groups_)(v[0], w)[None], mesh8, (P("x"), P()), P("x"))
        return (f(x, w) * ct).sum()

    def loss_lax(x, w):
        return (jax.pmap(_gather_scatter_a2a(lax, groups_), axis_name="x", in_axes=(0, None))(x, w) * ct).sum()

    ref_value, ref_grads = jax.value_and_grad(loss_lax, argnums=(0, 1))(x, w)
    value, got = jax.value_and_grad(loss_ours, argnums=(0, 1))(x, w)
    assert_same(value, ref_value)
    assert_same(got, ref_grads)


@pytest.mark.parametrize("name,kw,shape", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_grad_matches_the_model(mesh8, rng, name, kw, shape):
    xs = random_array(rng, (8, *shape(2)), "float32")
    out_shape = model(name, xs, PAIRS, **kw).shape
    ct = random_array(rng, out_shape, "float32")
    f = sharded(lambda v: ours(name, PAIRS, **kw)(v[0])[None], mesh8, P("x"), P("x"))
    got = jax.grad(lambda v: (f(jnp.sin(v)) * ct).sum())(xs)
    want = jax.grad(lambda v: (model(name, jnp.sin(v), PAIRS, **kw) * ct).sum())(xs)
    assert_same(got, want)


def test_vmap_inside_shard_map(mesh8, rng):
    xs = random_array(rng, (8, 5, ROWS, 3), "float32")
    f = sharded(lambda v: jax.vmap(lambda u: jm.psum_scatter(u, "x", tiled=True, axis_index_groups=QUADS))(v[0])[None],
                mesh8, P("x"), P("x"))
    want = jnp.stack([model("psum_scatter", xs[:, b], QUADS, scatter_dimension=0, tiled=True) for b in range(5)], 1)
    assert_same(f(xs), want)


@pytest.mark.parametrize("name", OWN_SUMS)
def test_our_own_sums_take_groups(mesh8, rng, name):
    xs, rs = random_array(rng, (8, 2, 8), "float32"), random_array(rng, (8, 2, 8), "float32")
    weight = random_array(rng, (8,), "float32")

    def call(v, r):
        return own_sum(name, v, r, weight, "x", PAIRS)

    got = sharded(lambda v, r: jax.tree_util.tree_map(lambda t: t[None], call(v[0], r[0])), mesh8,
                  (P("x"), P("x")), P("x"))(xs, rs)
    total = rs + model("psum", xs, PAIRS)
    want = total
    if name == "all_reduce_residual_rmsnorm":
        want = (total * lax.rsqrt(jnp.mean(total * total, axis=-1, keepdims=True) + 1e-6) * weight, total)
    assert_same(got, want)


def test_explain_records_the_composition(mesh8):
    f = sharded(lambda v: jm.psum(v, "x", axis_index_groups=PAIRS), mesh8, P("x"), P("x"))
    calls = jm.explain(f, jax.ShapeDtypeStruct((8 * 4,), jnp.float32))
    composed = [c for c in calls if c.algorithm == COMPOSED]
    assert [(c.collective, c.axes, c.reason) for c in composed] == [("psum", ("x",), groups.REASON)]
    assert groups.REASON == "axis_index_groups: composed of our all_gather and a local reduction"
    assert "composed (axis_index_groups: composed of our all_gather" in str(composed[0])
    assert any(c.collective == "all_gather" for c in calls)  # the gather, as lowered


def test_a_tuple_of_axes_is_lax_s(cpu_devices, caplog):
    mesh = Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("a", "b"))
    f = sharded(lambda v: jm.psum(v, ("a", "b"), axis_index_groups=HALVES), mesh, P(("a", "b")), P(("a", "b")))
    g = sharded(lambda v: lax.psum(v, ("a", "b"), axis_index_groups=HALVES), mesh, P(("a", "b")), P(("a", "b")))
    raised = []
    with caplog.at_level(logging.INFO, logger="jax_mscclpp.collectives"):
        for fn in (f, g):
            try:
                fn(jnp.ones(8))
            except Exception as error:  # noqa: BLE001 - lax refuses groups under shard_map; ours does what lax does
                raised.append(type(error))
    assert raised in ([], [NotImplementedError] * 2), raised
    assert "runs lax's collective: axis_index_groups over a tuple of axes" in caplog.text


BAD = [
    ("psum", [[0, 1], [1, 2], [3, 4], [5, 6, 7]], ValueError, r"not a partition .*index 1 is in more than one"),
    ("psum", [[0, 1, 2, 3], [4, 5, 6]], ValueError, r"not a partition .*index 7 is in no group"),
    ("pmax", [[0, 1, 2, 3], [4, 5, 6, 8]], ValueError, r"index 8 is out of range for the axis of size 8"),
    ("pmin", [[0, 1, 2, 3], [4, 5, 6, -1]], ValueError, r"index -1 is out of range"),
    ("psum", [[0, 1, 2, 3, 4, 5, 6, 7], []], ValueError, "has an empty group"),
    ("psum", [], ValueError, "axis_index_groups is empty"),
    ("psum", [[0, 1, 2, 3], [4, 5, 6, 7.0]], TypeError, "must be a list of lists of axis indices"),
    ("pmean", UNEQUAL, ValueError, r"unequal sizes \[3, 5\]; pmean needs every group the same size"),
    ("all_gather", UNEQUAL, ValueError, "all_gather needs every group the same size"),
    ("psum_scatter", UNEQUAL, ValueError, "psum_scatter needs every group the same size"),
    ("all_to_all", UNEQUAL, ValueError, "all_to_all needs every group the same size"),
    ("all_to_all", [[0, 1, 2], [3, 4, 5], [6, 7]], ValueError, "unequal sizes"),
]


@pytest.mark.parametrize("name,groups_,error,match", BAD)
def test_bad_groups_are_a_clear_error_at_trace_time(mesh8, name, groups_, error, match):
    kw = {"split_axis": 0, "concat_axis": 0, "tiled": True} if name == "all_to_all" else {}
    if name == "psum_scatter":
        kw = {"tiled": True}
    f = sharded(lambda v: ours(name, groups_, **kw)(v), mesh8, P("x"), P("x"))
    with pytest.raises(error, match=match):
        f.trace(jax.ShapeDtypeStruct((8 * 8,), jnp.float32))


def test_shapes_are_checked_against_the_group_size(mesh8):
    f = sharded(lambda v: jm.psum_scatter(v, "x", axis_index_groups=PAIRS), mesh8, P("x"), P("x"))
    with pytest.raises(ValueError, match="must equal the group size 2"):
        f.trace(jax.ShapeDtypeStruct((8 * 8,), jnp.float32))
    g = sharded(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True, axis_index_groups=QUADS), mesh8, P("x"), P("x"))
    with pytest.raises(ValueError, match="does not divide by 4"):
        g.trace(jax.ShapeDtypeStruct((8 * 6,), jnp.float32))


def test_an_invariant_gather_of_groups_is_refused(mesh8):
    f = sharded(lambda v: jm.all_gather(v, "x", to="invarying", axis_index_groups=PAIRS), mesh8, P("x"), P())
    with pytest.raises(ValueError, match="to='invarying' with axis_index_groups"):
        f.trace(jax.ShapeDtypeStruct((8 * 4,), jnp.float32))
