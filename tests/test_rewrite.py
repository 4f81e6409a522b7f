"""jax_mscclpp.rewrite: unedited functions run on our collectives, forward and grad equal to lax, and the compiled
program holds our custom calls and no lax collective wherever everything was replaceable."""

import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from tests.helpers import P, assert_same, random_array

LAX_COLLECTIVE_OPS = re.compile(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all)(-start)?\(")


def run(fn, *args):
    """Compiles ``fn`` (a jitted function) once, runs it, and returns (its result, our custom-call targets in the
    compiled program, the lax collective ops in it)."""
    compiled = fn.lower(*args).compile()
    text = compiled.as_text()
    ours = set(re.findall(r"jax_mscclpp_\w+", text))
    return compiled(*args), ours, {m[0] for m in LAX_COLLECTIVE_OPS.findall(text)}


def run_ours(fn, *args, expected=None):
    """``run``, asserting that no lax collective is left (and that our targets are ``expected``)."""
    out, ours, theirs = run(fn, *args)
    assert not theirs, f"lax collectives left in the compiled program: {theirs}"
    if expected is not None:
        assert ours == {f"jax_mscclpp_{t}" for t in expected}, ours
    return out


# ---- every collective, forward and grad ---------------------------------------------------------------------

def every_collective(x, w):
    """A shard_map body over "x" (8 devices) using each lax collective the way models do."""
    h = jnp.tanh(x @ w)                                     # [rows, cols/8], varying
    s = lax.psum(h, "x")                                    # row-parallel sum
    m = lax.pmax(lax.stop_gradient(h), "x")                 # pmax is not differentiable, as in lax
    g = lax.all_gather(h, "x", axis=1, tiled=True)          # [rows, cols]
    rs = lax.psum_scatter(g, "x", scatter_dimension=0, tiled=True)
    a2a = lax.all_to_all(h, "x", 0, 1, tiled=True)
    mean = lax.pmean(h.sum(0), "x")
    local = (s * m).sum() + g.sum() + (rs ** 2).sum() + (a2a ** 3).sum()
    return lax.psum(local, "x") + mean.sum()


SPECS = dict(in_specs=(P(), P(None, "x")), out_specs=P())


def inputs(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return random_array(rng, (16, 5), dtype), random_array(rng, (5, 24), dtype)


def compare(ours_fn, lax_fn, *args, expected=None):
    """Our program (compiled once: checked to hold no lax collective) gives what the lax one gives."""
    assert_same(run_ours(ours_fn, *args, expected=expected), lax_fn(*args))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_matches_lax(mesh8, dtype):
    compare(jax.jit(jax.shard_map(jm.rewrite(every_collective), mesh=mesh8, **SPECS)),
            jax.jit(jax.shard_map(every_collective, mesh=mesh8, **SPECS)), *inputs(dtype),
            expected=("all_reduce", "all_gather", "reduce_scatter", "all_to_all"))


def test_untiled_all_gather_scatter_and_all_to_all(mesh8):
    def body(x):
        g = lax.all_gather(x, "x", axis=1)                  # [3, 8, 5]
        rs = lax.psum_scatter(g, "x", scatter_dimension=1)  # [3, 5]
        a = lax.all_to_all(g, "x", 1, 2)                    # split the 8, stack at 2
        b = lax.all_to_all(g, "x", 1, 0)
        return rs, a, b

    x = random_array(np.random.default_rng(1), (24, 5), "int32")
    specs = dict(mesh=mesh8, in_specs=P("x"), out_specs=(P("x"), P("x"), P("x")))
    compare(jax.jit(jax.shard_map(jm.rewrite(body), **specs)), jax.jit(jax.shard_map(body, **specs)), x,
            expected=("all_gather", "reduce_scatter", "all_to_all"))


def loss_of(body, mesh, **specs):
    return lambda x, w: jax.shard_map(body, mesh=mesh, **specs)(x, w).astype(jnp.float32).sum()


def rewritten_grads(body, mesh, specs, where):
    """The gradient of ``loss_of(body)`` with rewrite applied around grad, around the shard_map body, or inside
    grad (around the loss)."""
    if where == "around grad":
        return jax.jit(jm.rewrite(jax.grad(loss_of(body, mesh, **specs), argnums=(0, 1))))
    if where == "around the shard_map body":
        return jax.jit(jax.grad(loss_of(jm.rewrite(body), mesh, **specs), argnums=(0, 1)))
    return jax.jit(jax.grad(jm.rewrite(loss_of(body, mesh, **specs)), argnums=(0, 1)))


WHERE = ["around grad", "around the shard_map body", "inside grad"]


@pytest.fixture(scope="module")
def every_collective_grads(mesh8):
    x, w = inputs(seed=2)
    grads, _, lax_collectives = run(jax.jit(jax.grad(loss_of(every_collective, mesh8, **SPECS), argnums=(0, 1))),
                                    x, w)
    # The lax program sums the gradient of the replicated x: a check for lax collectives in ours is not vacuous.
    assert "all-reduce" in lax_collectives
    return x, w, grads


@pytest.mark.parametrize("where", WHERE)
def test_grad_matches_lax(mesh8, every_collective_grads, where):
    """The psums JAX inserts (gradient of the replicated x, transposes of pvary) run on ours too, wherever
    rewrite is applied."""
    x, w, ref = every_collective_grads
    assert_same(run_ours(rewritten_grads(every_collective, mesh8, SPECS, where), x, w), ref)


def test_grad_with_check_vma_off(mesh8):
    """Without check_vma, lax binds psum_p and shard_map's transpose inserts its own psums: all become ours."""
    def body(x, w):
        return lax.psum(jnp.tanh(x @ w), "x")

    specs = dict(in_specs=(P(), P(None, "x")), out_specs=P(None, "x"), check_vma=False)
    grad = jax.grad(loss_of(body, mesh8, **specs), argnums=(0, 1))
    compare(jax.jit(jm.rewrite(grad)), jax.jit(grad), *inputs(seed=3), expected=("all_reduce",))


# ---- through nested jit, scan, while, cond, remat, custom_vjp and custom_jvp ----------------------------------

@jax.custom_vjp
def copy_to_tp(x):
    """Megatron's f: identity forward, psum of the gradient backward."""
    return x


copy_to_tp.defvjp(lambda x: (x, None), lambda _, g: (lax.psum(g, "x"),))


@jax.custom_jvp
def reduce_from_tp(x):
    """Megatron's g: psum forward, written with a custom JVP that psums the tangent."""
    return lax.psum(x, "x")


reduce_from_tp.defjvp(lambda primals, tangents: (reduce_from_tp(primals[0]), lax.psum(tangents[0], "x")))


def layered(x, w):
    """A stack of tensor-parallel layers under scan, with remat, a nested jit, cond and a fori_loop."""
    w1, w2 = w

    def layer(c, ws):
        c = copy_to_tp(c)
        h = jax.checkpoint(lambda a: jnp.tanh(a @ ws[0]))(c)
        out = jax.jit(lambda a: reduce_from_tp(a @ ws[1]))(h)
        return out / 4, None

    y, _ = lax.scan(layer, x, (w1, w2))
    y = lax.cond(y.sum() > 0, lambda a: a * 2, lambda a: a - 1, y)
    return lax.fori_loop(0, 2, lambda i, a: a + 0.1 * lax.pmax(lax.stop_gradient(a), "x"), y)


LAYERED_SPECS = dict(in_specs=(P(), (P(None, None, "x"), P(None, "x", None))), out_specs=P())


@pytest.fixture(scope="module")
def layered_case(mesh8):
    rng = np.random.default_rng(4)
    x = random_array(rng, (4, 16), "float32")
    w = tuple(random_array(rng, shape, "float32") / 4 for shape in ((2, 16, 24), (2, 24, 16)))
    return x, w, jax.jit(jax.grad(loss_of(layered, mesh8, **LAYERED_SPECS), argnums=(0, 1)))(x, w)


def test_through_scan_remat_jit_cond_and_custom_rules_forward(mesh8, layered_case):
    x, w, _ = layered_case
    compare(jax.jit(jm.rewrite(jax.shard_map(layered, mesh=mesh8, **LAYERED_SPECS))),
            jax.jit(jax.shard_map(layered, mesh=mesh8, **LAYERED_SPECS)), x, w, expected=("all_reduce",))


@pytest.mark.parametrize("where", WHERE)
def test_through_scan_remat_jit_cond_and_custom_rules_grad(mesh8, layered_case, where):
    """The custom_vjp's backward psum and the custom_jvp's tangent psum run on ours however grad and rewrite
    are nested."""
    x, w, ref = layered_case
    assert_same(run_ours(rewritten_grads(layered, mesh8, LAYERED_SPECS, where), x, w, expected=("all_reduce",)),
                ref)


def test_while_loop_and_weakly_typed_carries(mesh8):
    """Replacements keep lax's types exactly: a while carry, a weakly typed fori_loop carry (lax's all_to_all
    result is strongly typed, ours must be too), check_vma on and off."""
    def body(x):
        c = lax.fori_loop(0, 3, lambda i, c: c + 0.5 * lax.psum(c, "x"), 1.0)  # weak float carry
        d = lax.fori_loop(0, 2, lambda i, d: lax.all_to_all(d, "x", 0, 0, tiled=True) + 1.0,
                          jnp.zeros(8) + 2.0 * lax.axis_index("x"))
        s = lax.psum(x, "x")
        e, _ = lax.while_loop(lambda a: a[1] < 3,
                              lambda a: (lax.psum(a[0] * (lax.axis_index("x") + 1), "x") / 10, a[1] + 1), (s, 0))
        return x * c, d, e

    x = random_array(np.random.default_rng(5), (16, 3), "float32")
    for check_vma in (True, False):
        specs = dict(mesh=mesh8, in_specs=P("x"), out_specs=(P("x"), P("x"), P()), check_vma=check_vma)
        compare(jax.jit(jm.rewrite(jax.shard_map(body, **specs))), jax.jit(jax.shard_map(body, **specs)), x,
                expected=("all_reduce", "all_to_all"))


def test_psum_over_two_axes_and_constants_in_inner_jaxprs(cpu_devices):
    mesh = Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("dp", "tp"))
    table = np.linspace(-1, 1, 7, dtype=np.float32)  # closed over: a constant of the remat and jit jaxprs

    def body(x):
        y = jax.checkpoint(lambda a: lax.psum(jnp.sin(a) * table, ("dp", "tp")))(x)
        return y + jax.jit(lambda a: lax.psum(a * jnp.asarray(table), "tp"))(x).sum()

    x = random_array(np.random.default_rng(6), (2, 4, 7), "float32")
    f = jax.shard_map(body, mesh=mesh, in_specs=P("dp", "tp"), out_specs=P("dp"))
    grad = jax.grad(lambda x: f(x).sum())
    compare(jax.jit(jm.rewrite(f)), jax.jit(f), x, expected=("all_reduce",))
    compare(jax.jit(jm.rewrite(grad)), jax.jit(grad), x, expected=("all_reduce",))


# ---- a pytree's psum: one call per bucket, as jax_mscclpp.psum -------------------------------------------------

def our_all_reduces(fn, *args) -> int:
    """The all_reduce custom calls of ``fn``'s lowered program."""
    return fn.lower(*args).as_text().count("custom_call @jax_mscclpp_all_reduce(")


def gradient_like_tree(n=8):
    """Per-rank shapes: small leaves of three dtypes and two leaves over psum's bucket size (each its own call)."""
    large = (jm.collectives.BUCKET_LEAF_BYTES // 4 + 16,)
    shapes = {"w0": ((n, 3), "float32"), "w1": ((n, 5, 2), "float32"), "b0": ((n,), "float32"),
              "b1": ((n, 7), "float32"), "steps": ((n,), "int32"), "count": ((n, 2), "int32"),
              "half": ((n, 4), "bfloat16"), "big0": ((n * large[0],), "float32"), "big1": ((n * large[0],), "float32")}
    return {k: jax.ShapeDtypeStruct(shape, dtype) for k, (shape, dtype) in shapes.items()}


@pytest.mark.parametrize("check_vma", [True, False], ids=["vma", "no_vma"])
def test_a_pytree_psum_makes_as_many_calls_as_jax_mscclpp_psum(mesh8, check_vma):
    tree = gradient_like_tree()
    specs = dict(mesh=mesh8, in_specs=(P("x"),), out_specs=P(), check_vma=check_vma)
    ours = jax.jit(jax.shard_map(lambda t: jm.psum(t, "x"), **specs))
    rewritten = jax.jit(jm.rewrite(jax.shard_map(lambda t: lax.psum(t, "x"), **specs)))
    expected = our_all_reduces(ours, tree)
    # Three buckets (float32, int32, bfloat16) and the two large leaves: fewer calls than the nine leaves.
    assert expected == 5
    assert our_all_reduces(rewritten, tree) == expected
    small = {k: random_array(np.random.default_rng(3), v.shape, v.dtype) for k, v in tree.items() if "big" not in k}
    assert_same(rewritten(small), jax.jit(jax.shard_map(lambda t: lax.psum(t, "x"), **specs))(small))
    assert our_all_reduces(rewritten, small) == our_all_reduces(ours, small) == 3


def test_the_gradient_psums_of_a_training_step_share_a_call(mesh8):
    """A replicated model's gradients, summed by the psums jax.grad inserts (check_vma) between the backward
    pass's other equations, then applied: one call, as ``jm.psum`` of the gradient tree."""
    rng = np.random.default_rng(5)
    params = {f"{kind}{i}": random_array(rng, (4, 4) if kind == "w" else (4,), "float32")
              for i in range(3) for kind in ("w", "b")}
    x = random_array(rng, (16, 4), "float32")

    def loss(p, v):
        for i in range(3):
            v = jnp.tanh(v @ p[f"w{i}"] + p[f"b{i}"])
        return jnp.sum(v * v)

    def train_step(p, v):
        return jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, p, jax.grad(loss)(p, v))

    step = jax.shard_map(train_step, mesh=mesh8, in_specs=(P(), P("x")), out_specs=P())
    rewritten = jax.jit(jm.rewrite(step))
    assert str(jax.make_jaxpr(step)(params, x)).count("psum") == 6
    assert our_all_reduces(rewritten, params, x) == 1
    assert_same(rewritten(params, x), jax.jit(step)(params, x))


# ---- what stays lax, and says so ------------------------------------------------------------------------------

def test_what_ours_cannot_run_stays_lax_with_the_reason_logged(mesh8, caplog):
    def body(x, z):
        return (lax.psum(x, "x"),                                  # replaced
                lax.psum(z, "x"),                                  # float8 sum: kept
                lax.psum(x[:1, :1], "x"),                          # 4 bytes < min_bytes: kept
                lax.all_gather(x, "x", tiled=True))                # not asked for: kept

    rng = np.random.default_rng(7)
    x = random_array(rng, (16, 3), "float32")
    z = random_array(rng, (16, 3), "float32").astype(jnp.float8_e5m2)
    specs = dict(mesh=mesh8, in_specs=(P("x"), P("x")), out_specs=(P(), P(), P(), P("x")))
    f = jax.shard_map(body, **specs)
    with caplog.at_level(logging.DEBUG, logger="jax_mscclpp.rewrite"):
        out, ours, theirs = run(jax.jit(jm.rewrite(f, collectives=("psum", "pmax"), min_bytes=8)), x, z)
    assert_same(out, jax.jit(f)(x, z))
    assert ours == {"jax_mscclpp_all_reduce"} and theirs == {"all-reduce", "all-gather"}
    log = caplog.text
    assert "replaced lax psum over ('x',) on float32[2,3]" in log
    assert "kept lax psum over ('x',) on float8_e5m2[2,3]{V:x}: dtype float8_e5m2 is not supported" in log
    assert "kept lax psum over ('x',) on float32[1,1]{V:x}: 4 bytes per rank is below min_bytes=8" in log
    assert "kept lax all_gather over ('x',) on float32[2,3]{V:x}: not among the collectives asked for" in log


def test_axis_index_groups_vmap_axes_and_partial_manual_stay_lax(cpu_devices, caplog):
    mesh = Mesh(np.array(cpu_devices[:4]), ("x",))
    x = random_array(np.random.default_rng(8), (8, 8), "float32")
    groups = jax.shard_map(lambda v: lax.psum(v, "x", axis_index_groups=[[0, 1], [2, 3]]), mesh=mesh,
                           in_specs=P("x"), out_specs=P("x"), check_vma=False)

    def vmapped(v):  # rewritten inside vmap: psum over the vmap axis "b" is vmap's business, over "x" ours
        return jax.vmap(jm.rewrite(lambda r: lax.psum(r, "b") + lax.psum(r, "x")), axis_name="b")(v)

    def vmapped_lax(v):
        return jax.vmap(lambda r: lax.psum(r, "b") + lax.psum(r, "x"), axis_name="b")(v)

    specs = dict(mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    mesh2 = Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("dp", "x"))
    partial = jax.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh2, in_specs=P(None, "x"), out_specs=P(),
                            axis_names={"x"})
    with caplog.at_level(logging.DEBUG, logger="jax_mscclpp.rewrite"):
        for ours_fn, lax_fn, kept in (
                (jax.jit(jm.rewrite(groups)), jax.jit(groups), {"all-reduce"}),
                (jax.jit(jax.shard_map(vmapped, **specs)), jax.jit(jax.shard_map(vmapped_lax, **specs)), set()),
                (jax.jit(jm.rewrite(partial)), jax.jit(partial), {"all-reduce"})):
            out, _, theirs = run(ours_fn, x)
            assert_same(out, lax_fn(x))
            assert theirs == kept
    assert "kept lax psum over ('x',) on float32[2,8]: axis_index_groups" in caplog.text
    assert "kept lax psum over ('b',) on float32[8]: axis 'b' is not a manual shard_map axis here" in caplog.text
    assert "the shard_map is manual over ['x'] only, not every mesh axis" in caplog.text


# ---- options, arguments and calls outside jit -----------------------------------------------------------------

def algorithm_codes(fn, *args) -> set:
    return set(re.findall(r"algorithm = (\d+) : i32", fn.lower(*args).as_text()))


def test_algorithm_reaches_the_collectives_that_know_it(mesh8):
    from jax_mscclpp._types import ALGORITHMS

    def body(x):
        return lax.psum(x, "x"), lax.all_gather(x, "x", tiled=True)

    x = random_array(np.random.default_rng(9), (16, 3), "float32")
    f = jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=(P(), P("x")))
    ref = jax.jit(f)(x)
    ours_fn = jax.jit(jm.rewrite(f, algorithm="2pa_ll"))  # an all_reduce algorithm: all_gather keeps its own
    assert_same(ours_fn(x), ref)
    assert algorithm_codes(ours_fn, x) == {str(int(ALGORITHMS["2pa_ll"])), str(int(ALGORITHMS["allpairs"]))}
    by_collective = jax.jit(jm.rewrite(f, algorithm={"psum": "1pa_ll", "all_gather": "lax"}))
    assert_same(by_collective(x), ref)
    assert algorithm_codes(by_collective, x) == {str(int(ALGORITHMS["1pa_ll"]))}
    assert run(by_collective, x)[2] == {"all-gather"}
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        jax.jit(jm.rewrite(f, algorithm="nope"))(x)
    with pytest.raises(ValueError, match="unknown algorithm 'allpairs'"):
        jax.jit(jm.rewrite(f, algorithm={"psum": "allpairs"}))(x)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown collective.*'psum_all'.*known: psum, pmax"):
        jm.rewrite(lambda x: x, collectives=("psum_all",))
    with pytest.raises(ValueError, match="algorithm= names unknown collective"):
        jm.rewrite(lambda x: x, algorithm={"all_reduce": "1pa_ll"})
    with pytest.raises(ValueError, match="min_bytes must be a non-negative integer"):
        jm.rewrite(lambda x: x, min_bytes=-1)
    with pytest.raises(TypeError, match="expected a function"):
        jm.rewrite(3)


@pytest.mark.filterwarnings("ignore:.*holds no lax collective")
def test_called_outside_jit_with_static_arguments_and_pytrees(mesh8):
    """rewrite of a function around a jitted step, called eagerly: non-array arguments pass through, outputs keep
    their structure, and later calls reuse the compiled step."""
    @jax.jit
    def step(w, x):
        return jax.shard_map(lambda w, v: lax.psum(v @ w, "x"), mesh=mesh8, in_specs=(P("x", None), P(None, "x")),
                             out_specs=P())(w, x)

    def train(params, x, scale, note):
        return {"y": step(params["w"], x) * scale, "none": None, "note": note}

    rng = np.random.default_rng(10)
    params, x = {"w": random_array(rng, (16, 4), "float32")}, random_array(rng, (3, 16), "float32")
    ref = train(params, x, 2.0, "n")
    ours = jm.rewrite(train)
    compiles = []

    def on_event(event, duration_s, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        for call in range(3):
            out = ours(params, x, 2.0, "n")
            assert out["none"] is None and out["note"] == "n"
            assert_same(out["y"], ref["y"])
            if call == 0:
                assert compiles  # the rewritten step
                compiles.clear()
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    assert not compiles, "a later call compiled again"
    run_ours(jax.jit(jm.rewrite(step)), params["w"], x, expected=("all_reduce",))


def test_decorator_form(mesh8):
    @jm.rewrite(collectives=("psum",))
    def body(x):
        return lax.psum(x, "x")

    x = random_array(np.random.default_rng(11), (16,), "float32")
    f = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=P()))
    assert_same(run_ours(f, x, expected=("all_reduce",)), x.reshape(8, 2).sum(0))


def test_a_function_without_lax_collectives_is_told_about_the_nccl_path(mesh8):
    """A GSPMD-style function (jit with shardings, no shard_map) holds no lax collective for rewrite to replace:
    one warning per function says so and names the path that reaches XLA's own collectives."""
    def gspmd_loss(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    sharded = jax.sharding.NamedSharding(mesh8, P(None, "x"))
    rng = np.random.default_rng(11)
    w = jax.device_put(random_array(rng, (8, 16), np.float32), sharded)
    x = random_array(rng, (4, 8), np.float32)
    with pytest.warns(UserWarning, match=r"holds no lax collective.*enable_nccl_backend") as caught:
        grads = jax.jit(jm.rewrite(jax.grad(gspmd_loss)))(w, x)
        jax.jit(jm.rewrite(jax.grad(gspmd_loss)))(w, x[:2])  # the same function again: no second warning
    assert sum("holds no lax collective" in str(w.message) for w in caught) == 1
    assert_same(grads, jax.jit(jax.grad(gspmd_loss))(w, x))


def test_a_function_with_lax_collectives_is_not_warned(mesh8, recwarn):
    body = jax.shard_map(jm.rewrite(lambda v: lax.psum(v, "x")), mesh=mesh8, in_specs=P("x"), out_specs=P())
    jax.jit(body)(random_array(np.random.default_rng(12), (16,), np.float32))
    assert not [w for w in recwarn if "holds no lax collective" in str(w.message)]
