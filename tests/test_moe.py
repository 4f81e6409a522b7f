"""jm.moe.dispatch and combine against a numpy model of their semantics (every device's tokens routed over the whole
axis at once): random tokens and top-1/top-2 routing on 2, 4 and 8 CPU devices, float32 and bfloat16, dropless and
over capacity (which rows are dropped, and how many), a device that sends nothing, every row to one expert, one
device; jax.grad against a dense jnp MoE, vmap of the body, lax's exchanges where asked for, the docstrings'
examples, and clear errors at trace time for bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import jax_mscclpp as jm

from .helpers import FLOAT_TOL, P, random_array


def model(tokens, ids, num_experts, capacity):
    """The semantics on every device at once: tokens [n, T, ...], ids [n, T, k]. Returns per device j the rows its
    experts receive (dispatch's layout), the (sender, token, slot) of each of those rows, group sizes, and per
    device the rows dropped and the kept mask [n, T, k]."""
    n, num_tokens, k = ids.shape
    local = num_experts // n
    taken, kept = np.zeros(num_experts, int), np.zeros(ids.shape, bool)
    for s in range(k):  # first choices before second ones, then device 0's tokens first, in token order
        for i in range(n):
            for t in range(num_tokens):
                e = ids[i, t, s]
                if 0 <= e < num_experts and (capacity is None or taken[e] < capacity):
                    kept[i, t, s], taken[e] = True, taken[e] + 1
    routed = (ids >= 0) & (ids < num_experts)
    outputs, owners, group_sizes = [], [], []
    for j in range(n):
        groups = [[(i, t, s) for i in range(n) for s in range(k) for t in range(num_tokens)
                   if kept[i, t, s] and ids[i, t, s] == j * local + l] for l in range(local)]
        group_sizes.append([len(g) for g in groups])
        if capacity is None:
            flat = [row for g in groups for row in g]
            out = np.zeros((n * num_tokens * k,) + tokens.shape[2:], tokens.dtype)
            for r, (i, t, _) in enumerate(flat):
                out[r] = tokens[i, t]
            owners.append(flat)
        else:
            out = np.zeros((local, capacity) + tokens.shape[2:], tokens.dtype)
            for l, g in enumerate(groups):
                for q, (i, t, _) in enumerate(g):
                    out[l, q] = tokens[i, t]
            owners.append([[row for row in g] for g in groups])
        outputs.append(out)
    dropped = routed.sum((1, 2)) - kept.sum((1, 2))
    return np.stack(outputs), owners, np.array(group_sizes), dropped, kept


def model_combine(expert_outputs, owners, weights, capacity):
    """y[i, t] = sum over the rows (i, t, s) reached of weights[i, t, s] * their expert output, in float64."""
    n, num_tokens, _ = weights.shape
    y = np.zeros((n, num_tokens) + expert_outputs.shape[2 if capacity is None else 3:])
    for j in range(n):
        rows = [(o, (r,)) for r, o in enumerate(owners[j])] if capacity is None else \
            [(o, (l, q)) for l, g in enumerate(owners[j]) for q, o in enumerate(g)]
        for (i, t, s), where in rows:
            y[i, t] += weights[i, t, s] * expert_outputs[(j,) + where].astype(np.float64)
    return y


def route(rng, n, num_tokens, k, num_experts):
    """Top-k routing: k distinct experts per token, random, [n, T, k]."""
    return np.stack([np.stack([rng.permutation(num_experts)[:k] for _ in range(num_tokens)]) for _ in range(n)])


def program(mesh, num_experts, capacity, **kwargs):
    """(tokens, ids, weights, expert_outputs) -> (dispatch's rows, group sizes, dropped, kept, combine's result)
    of every device, concatenated along the axis."""
    def body(x, ids, w, eo):
        rows, routing = jm.moe.dispatch(x, ids, num_experts=num_experts, axis_name="x", capacity=capacity,
                                        **kwargs)
        return rows, routing.group_sizes, routing.dropped[None], routing.kept, jm.moe.combine(eo, routing, w)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 4, out_specs=(P("x"),) * 5))


def mesh_of(devices, n):
    return Mesh(np.array(devices[:n]), ("x",))


def check(mesh, rng, tokens, ids, num_experts, capacity, dtype="float32", width=None):
    """Runs dispatch and combine on [n, T, ...] tokens and [n, T, k] ids, checks them against the model; returns
    the rows dropped per device."""
    n, num_tokens, k = ids.shape
    local = num_experts // n
    want_rows, owners, want_sizes, want_dropped, want_kept = model(np.asarray(tokens), ids, num_experts, capacity)
    lead = (local, capacity) if capacity is not None else (n * num_tokens * k,)
    expert_outputs = random_array(rng, (n,) + lead + (width or tokens.shape[2:]), dtype)
    weights = random_array(rng, (n, num_tokens, k), "float32")
    flat = lambda a: a.reshape((-1,) + a.shape[2:])  # noqa: E731  [n, a, ...] -> [n * a, ...]
    rows, sizes, dropped, kept, y = program(mesh, num_experts, capacity)(
        flat(jnp.asarray(tokens)), flat(ids), flat(weights), flat(expert_outputs))
    np.testing.assert_array_equal(np.asarray(rows), flat(want_rows))  # data movement: exact in every dtype
    np.testing.assert_array_equal(np.asarray(sizes), want_sizes.reshape(-1))
    np.testing.assert_array_equal(np.asarray(dropped), want_dropped)
    np.testing.assert_array_equal(np.asarray(kept), flat(want_kept))
    want_y = model_combine(np.asarray(expert_outputs.astype(jnp.float32)), owners, np.asarray(weights), capacity)
    assert y.dtype == jnp.dtype(dtype)
    scale = np.maximum(1, model_combine(np.abs(np.asarray(expert_outputs.astype(jnp.float32))), owners,
                                        np.abs(np.asarray(weights)), capacity))
    np.testing.assert_array_less(np.abs(np.asarray(y, np.float64) - flat(want_y)), FLOAT_TOL[dtype] * flat(scale))
    return want_dropped


@pytest.mark.parametrize("n,k,capacity,dtype,width", [
    (2, 1, None, "float32", None), (2, 2, 3, "bfloat16", None), (4, 2, None, "bfloat16", (2, 2)),
    (4, 1, 2, "float32", None), (8, 2, None, "float32", None), (8, 2, 2, "bfloat16", (5,)),
])
def test_against_the_model(cpu_devices, rng, n, k, capacity, dtype, width):
    """``width``: the experts return rows of another shape (combine takes any trailing shape)."""
    num_tokens, num_experts = 6, 2 * n
    tokens = random_array(rng, (n, num_tokens, 3), dtype)
    ids = route(rng, n, num_tokens, k, num_experts)
    dropped = check(mesh_of(cpu_devices, n), rng, tokens, ids, num_experts, capacity, dtype, width)
    if capacity is not None:  # the sizes above are picked so that some rows are dropped
        assert dropped.sum() > 0


def test_a_device_that_sends_nothing(cpu_devices, rng):
    """Device 0's ids are all out of range (padding: nothing sent, nothing dropped); device 1 routes only to its
    own experts (nothing to its peers); the others every other way, over capacity (device 1's rows first)."""
    n, num_tokens, k, num_experts = 4, 5, 2, 8
    ids = route(rng, n, num_tokens, k, num_experts)
    ids[0] = -1
    ids[1] = np.stack([rng.permutation([2, 3]) for _ in range(num_tokens)])
    tokens = random_array(rng, (n, num_tokens, 4), "float32")
    dropped = check(mesh_of(cpu_devices, n), rng, tokens, ids, num_experts, 3)
    assert dropped[0] == 0 and dropped.sum() > 0


@pytest.mark.parametrize("capacity", [None, 5])
def test_every_row_to_one_expert(cpu_devices, rng, capacity):
    """Both slots of every token to expert 3: dropless, the receive buffer's worst case exactly (n * T * k rows on
    one device); with capacity, the first 5 first choices of the axis kept, nothing else."""
    n, num_tokens, k, num_experts = 4, 3, 2, 4
    ids = np.full((n, num_tokens, k), 3)
    tokens = random_array(rng, (n, num_tokens, 2), "float32")
    dropped = check(mesh_of(cpu_devices, n), rng, tokens, ids, num_experts, capacity)
    want = [0] * n if capacity is None else [2 * num_tokens - 3, 2 * num_tokens - 2, 2 * num_tokens, 2 * num_tokens]
    np.testing.assert_array_equal(dropped, want)


def test_one_device(cpu_devices, rng):
    """Every expert on one device, 14 rows for 3 experts of capacity 3: some dropped, nothing exchanged."""
    tokens = random_array(rng, (1, 7, 3), "float32")
    assert check(mesh_of(cpu_devices, 1), rng, tokens, route(rng, 1, 7, 2, 3), 3, 3).sum() > 0


def dense_moe(x, ids, w, w1, keep):
    """The dense reference: y[t] = sum_s keep * w[t, s] * gelu(x[t] @ w1[ids[t, s]]), every token to every one of its
    experts on one device."""
    h = jax.nn.gelu(jnp.einsum("td,tsdf->tsf", x, w1[ids]))
    return jnp.einsum("ts,tsf->tf", jnp.where(keep, w, 0), h)


@pytest.mark.parametrize("capacity", [None, 3])
def test_grad_against_a_dense_moe(cpu_devices, rng, capacity):
    n, num_tokens, k, num_experts, d = 4, 6, 2, 8, 3
    mesh = mesh_of(cpu_devices, n)
    ids = route(rng, n, num_tokens, k, num_experts).reshape(n * num_tokens, k)
    x = random_array(rng, (n * num_tokens, d), "float32")
    w = random_array(rng, (n * num_tokens, k), "float32")
    w1 = random_array(rng, (num_experts, d, d), "float32")
    cot = random_array(rng, (n * num_tokens, d), "float32")

    def body(x, ids, w, w1):
        rows, routing = jm.moe.dispatch(x, ids, num_experts=num_experts, axis_name="x", capacity=capacity)
        if capacity is None:  # each row times its expert's weights (lax.ragged_dot's product, cheaper to compile)
            expert = jnp.searchsorted(jnp.cumsum(routing.group_sizes), jnp.arange(rows.shape[0]), side="right")
            h = jax.nn.gelu(jnp.einsum("rd,rdf->rf", rows, w1[jnp.minimum(expert, w1.shape[0] - 1)]))
        else:
            h = jax.nn.gelu(jnp.einsum("lcd,ldf->lcf", rows, w1))
        return jm.moe.combine(h, routing, w), routing.kept

    f = jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 4, out_specs=(P("x"), P("x")))

    def loss(x, w, w1):
        y, keep = f(x, ids, w, w1)
        return (y * cot).sum(), (y, keep)

    (_, (y, keep)), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(x, w, w1)
    if capacity is not None:
        _, _, _, dropped, want_keep = model(np.zeros((n, num_tokens)), ids.reshape(n, num_tokens, k), num_experts,
                                            capacity)
        np.testing.assert_array_equal(np.asarray(keep), want_keep.reshape(-1, k))
        assert dropped.sum() > 0

    def dense(x, w, w1):
        y = dense_moe(x, ids, w, w1, keep)
        return (y * cot).sum(), y

    (_, want_y), want = jax.jit(jax.value_and_grad(dense, argnums=(0, 1, 2), has_aux=True))(x, w, w1)
    np.testing.assert_allclose(np.asarray(y), np.asarray(want_y), rtol=1e-5, atol=1e-5)
    # The gradients sum the same float32 terms in another order than the dense model (per device, then across),
    # which jax releases compile differently: a few parts in 1e4.
    for got, ref in zip(grads, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=5e-4, atol=1e-4)


def test_vmap_of_the_body(cpu_devices, rng):
    """Two independent routings in one call, by jax.vmap inside the shard_map."""
    n, num_tokens, k, num_experts, capacity, batch = 4, 5, 2, 4, 3, 2
    tokens = random_array(rng, (batch, n, num_tokens, 2), "float32")
    ids = np.stack([route(rng, n, num_tokens, k, num_experts) for _ in range(batch)])
    weights = random_array(rng, (batch, n, num_tokens, k), "float32")

    def one(x, i, w):
        rows, routing = jm.moe.dispatch(x, i, num_experts=num_experts, axis_name="x", capacity=capacity)
        return rows, jm.moe.combine(rows * 2, routing, w)

    spec = P(None, "x")  # [batch, n * T, ...]: each device's tokens of every batch
    f = jax.jit(jax.shard_map(jax.vmap(one), mesh=mesh_of(cpu_devices, n), in_specs=(spec,) * 3,
                              out_specs=(spec, spec)))
    flat = lambda a: a.reshape(a.shape[:1] + (-1,) + a.shape[3:])  # noqa: E731
    rows, y = f(flat(tokens), flat(ids), flat(weights))
    for b in range(batch):
        want_rows, owners, *_ = model(np.asarray(tokens[b]), ids[b], num_experts, capacity)
        np.testing.assert_array_equal(np.asarray(rows[b]), want_rows.reshape((-1,) + want_rows.shape[2:]))
        want_y = model_combine(2 * want_rows, owners, np.asarray(weights[b]), capacity)
        np.testing.assert_allclose(np.asarray(y[b]), want_y.reshape(-1, 2), rtol=1e-5, atol=1e-5)


def test_lax_s_exchanges_where_asked_for(mesh8, rng):
    """algorithm="lax": lax's ragged_all_to_all both ways and lax's all_gather of the counts (which XLA:CPU cannot
    compile, as lax's own call: lowered here, not run); by default ours on CPU devices (no lax ragged-all-to-all)."""
    n, num_tokens = 8, 4
    x = random_array(rng, (n * num_tokens, 2), "float32")
    ids = route(rng, n, num_tokens, 2, 16).reshape(-1, 2)
    args = (x, ids, random_array(rng, (n * num_tokens, 2), "float32"),
            random_array(rng, (n * n * num_tokens * 2, 2), "float32"))
    lax_text = program(mesh8, 16, None, algorithm="lax").lower(*args).as_text()
    assert lax_text.count("ragged_all_to_all") == 2 and "all_gather" in lax_text
    assert "ragged_all_to_all" not in program(mesh8, 16, None).lower(*args).as_text()


@pytest.mark.parametrize("function", [jm.moe.dispatch, jm.moe.combine])
def test_the_docstring_example_runs(cpu_devices, function):
    code = function.__doc__.split("::\n", 1)[1]
    exec(compile("\n".join(line[8:] for line in code.splitlines()), function.__name__, "exec"), {})


@pytest.mark.parametrize("change,error,match", [
    ({"num_experts": 12}, ValueError, r"num_experts=12 does not divide over the axis of 8 devices"),
    ({"num_experts": 0}, ValueError, "num_experts must be a positive int"),
    ({"ids": lambda i: i[..., 0]}, ValueError, r"expert_ids must be \[tokens, k\] = \[4, k\].*got shape \(4,\)"),
    ({"ids": lambda i: i[:, :3]}, ValueError, r"expert_ids must be \[tokens, k\] = \[4, k\].*got shape \(3, 2\)"),
    ({"ids": lambda i: i.astype(np.float32)}, TypeError, "expert_ids must be integers"),
    ({"capacity": 0}, ValueError, "capacity must be None .* or a positive int; got 0"),
    ({"weights": lambda w: w[..., :1]}, ValueError, r"weights must be \[tokens, k\] = \[4, 2\]"),
    ({"outputs": lambda o: o[:, :-1]}, ValueError, r"expert_outputs must have dispatch's output layout \[64\]"),
])
def test_bad_input_is_a_clear_error_at_trace_time(mesh8, rng, change, error, match):
    n, num_tokens = 8, 4
    ids = route(rng, n, num_tokens, 2, 16).reshape(n, num_tokens, 2)
    weights = random_array(rng, (n, num_tokens, 2), "float32")
    outputs = random_array(rng, (n, n * num_tokens * 2, 3), "float32")
    ids, weights, outputs = (change.get(key, lambda a: a)(a) for key, a in
                             (("ids", ids), ("weights", weights), ("outputs", outputs)))
    num_experts, capacity = change.get("num_experts", 16), change.get("capacity")

    def body(x, i, w, o):
        rows, routing = jm.moe.dispatch(x[0], i[0], num_experts=num_experts, axis_name="x", capacity=capacity)
        return jm.moe.combine(o[0], routing, w[0])[None]

    f = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=(P("x"),) * 4, out_specs=P("x")))
    with pytest.raises(error, match=match):
        f.trace(random_array(rng, (n, num_tokens, 3), "float32"), ids, weights, outputs)
