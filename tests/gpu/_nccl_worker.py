"""One process of tests/gpu/test_nccl_library.py: XLA's own collectives (lax's inside shard_map, and those XLA's
partitioner inserts under jit with shardings) through jax_mscclpp's libnccl.so.2, in N processes sharing GPU 0,
where NVIDIA's NCCL refuses to run. Each process checks its own results: the lax collectives against numpy over
every rank's data (each process rebuilds all ranks' inputs from their seeds), the GSPMD programs against the same
program on this process's CPU device over the whole arrays. Prints one line per check, the calls our library ran,
and "N failures"; exit status 1 on any mismatch.

    python tests/gpu/_nccl_worker.py PROCESS_ID NUM_PROCESSES PORT
"""

import json
import os
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402
from _rank_data import per_rank_inputs  # noqa: E402  (tests/gpu, beside this script)


def main() -> int:
    pid, nproc, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    from jax_mscclpp import nccl_backend

    nccl_backend.enable_nccl_backend()  # before JAX starts its backends
    import jax

    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc, process_id=pid,
                               local_device_ids=[0])
    import jax.numpy as jnp
    import ml_dtypes
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices("cuda")
    n = len(devices)
    mesh = Mesh(np.array(devices), ("x",))
    mine = [r for r, d in enumerate(devices) if d.process_index == jax.process_index()][0]
    started = time.monotonic()
    failures = 0
    checks = []

    def check(name, got, want, tol):
        nonlocal failures
        got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
        ok = got64.shape == want64.shape and np.allclose(
            got64, want64, rtol=0, atol=tol * max(1.0, np.abs(want64).max(initial=0)))
        failures += not ok
        checks.append({"check": name, "ok": bool(ok)})
        how = "ok"
        if not ok:  # what differs, for the log: the shapes, or the largest difference against the tolerance
            how = (f"MISMATCH (shape {got64.shape}, want {want64.shape})" if got64.shape != want64.shape else
                   f"MISMATCH (max |got - want| {np.abs(got64 - want64).max(initial=0):.3g}, max |want| "
                   f"{np.abs(want64).max(initial=0):.3g}, tolerance {tol:g} of max(1, that))")
        print(f"rank {mine}: {name}: {how} ({time.monotonic() - started:.1f} s)", flush=True)

    def inputs(seed, count, dtype):
        return per_rank_inputs(n, seed, count, dtype)

    def run(fn, per_rank):
        """fn under shard_map over "x"; this rank's block of the result."""
        if os.environ.get("JAX_MSCCLPP_TEST_TRACE"):
            print(f"rank {mine}: running {fn} on {per_rank[mine].dtype}[{per_rank[mine].size}]", flush=True)
        shard = jax.device_put(per_rank[mine], devices[mine])
        x = jax.make_array_from_single_device_arrays((n * per_rank[mine].shape[0],), NamedSharding(mesh, P("x")),
                                                     [shard])
        f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
        return np.asarray(f(x).addressable_data(0))

    reducers = {"psum": (lax.psum, np.add), "pmax": (lax.pmax, np.maximum), "pmin": (lax.pmin, np.minimum)}
    tolerance = {np.float32: 1e-5, ml_dtypes.bfloat16: 3e-2, np.int32: 0}
    for dtype in (np.float32, ml_dtypes.bfloat16, np.int32):
        for count in (1, 1023, 8 * 4096 + 5):
            name = f"{np.dtype(dtype).name} n={count}"
            for reduce_name, (reduce, combine) in reducers.items():
                per_rank = inputs(count + len(reduce_name), count, dtype)
                want = per_rank[0].copy()
                for r in range(1, n):
                    want = combine(want, per_rank[r]).astype(dtype)
                check(f"{reduce_name} {name}", run(lambda v: reduce(v, "x"), per_rank), want, tolerance[dtype])
            per_rank = inputs(count, n * count, dtype)
            blocks = [p.reshape(n, count) for p in per_rank]
            check(f"all_gather {name}", run(lambda v: lax.all_gather(v, "x", tiled=True), per_rank),
                  np.concatenate(per_rank), 0)
            check(f"psum_scatter {name}", run(lambda v: lax.psum_scatter(v, "x", tiled=True), per_rank),
                  np.sum([b[mine].astype(np.float64) for b in blocks], axis=0), tolerance[dtype] or 0)
            check(f"all_to_all {name}", run(lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), per_rank),
                  np.concatenate([b[mine] for b in blocks]), 0)
            shift = [(r, (r + 1) % n) for r in range(n)]
            per_rank = inputs(count + 5, count, dtype)
            check(f"ppermute {name}", run(lambda v: lax.ppermute(v, "x", shift), per_rank),
                  per_rank[(mine - 1) % n], 0)

    # lax.ragged_all_to_all: XLA's sends and receives to every peer in a group (two groups a call in XLA 0.11: the
    # output offsets, then the rows), which our library runs as one launch of its point-to-point engine per group
    # (the ncclGroupEnd row of the call counts), never one per peer. Where XLA's command buffers hold collectives it
    # runs its one-shot kernel instead, which needs every rank in one process: nothing of ours to check there.
    ragged_in_command_buffers = "COLLECTIVES" in os.environ.get("XLA_FLAGS", "")
    if ragged_in_command_buffers:
        print(f"rank {mine}: ragged_all_to_all not checked: XLA's command buffers run it as a one-shot kernel, "
              "every rank in one process", flush=True)
    rng = np.random.default_rng(11)
    rows, width = 40, 6
    sizes = rng.integers(0, rows // n + 1, size=(n, n))  # sizes[i, j]: rows rank i sends rank j
    sizes[0, :] = 0  # rank 0 sends nothing
    operands = [rng.standard_normal((rows, width)).astype(np.float32) for _ in range(n)]
    in_offsets = np.zeros((n, n), np.int32)
    for i in range(n):  # rank i's rows for j: a random start that leaves room for them
        for j in range(n):
            in_offsets[i, j] = rng.integers(0, rows - sizes[i, j] + 1)
    out_rows = int(sizes.sum(axis=0).max()) + 3
    out_offsets = np.zeros((n, n), np.int32)  # where rank i's rows land in rank j's output: after lower ranks'
    for j in range(n):
        out_offsets[:, j] = np.cumsum(sizes[:, j]) - sizes[:, j] + 1
    fill = rng.standard_normal((out_rows, width)).astype(np.float32)
    want = fill.copy()
    for i in range(n):
        want[out_offsets[i, mine]: out_offsets[i, mine] + sizes[i, mine]] = \
            operands[i][in_offsets[i, mine]: in_offsets[i, mine] + sizes[i, mine]]

    def global_of(per_rank_value):
        shard = jax.device_put(per_rank_value, devices[mine])
        shape = (n * per_rank_value.shape[0],) + per_rank_value.shape[1:]
        return jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, P("x")), [shard])

    ragged = jax.jit(jax.shard_map(
        lambda a, b, c, d, e, f: lax.ragged_all_to_all(a, b, c, d, e, f, axis_name="x"), mesh=mesh,
        in_specs=P("x"), out_specs=P("x"), check_vma=False))
    tables = [in_offsets[mine], sizes[mine].astype(np.int32), out_offsets[mine], sizes[:, mine].astype(np.int32)]
    args = [global_of(operands[mine]), global_of(fill)] + [global_of(t) for t in tables]
    calls = 0 if ragged_in_command_buffers else 3
    if calls:
        jax.block_until_ready(ragged(*args))  # compiled and run once before counting
    before = nccl_backend.call_counts()
    for attempt in range(calls):
        got = np.asarray(ragged(*args).addressable_data(0))
        check(f"ragged_all_to_all run {attempt}", got, want, 0)
    after = nccl_backend.call_counts()
    delta = {f: {a: c - before.get(f, {}).get(a, 0) for a, c in per.items() if c != before.get(f, {}).get(a, 0)}
             for f, per in after.items()}
    delta = {f: per for f, per in delta.items() if per}
    launches = delta.get("ncclGroupEnd", {}).get("p2p_group", 0)
    messages = sum(delta.get(f, {}).get("p2p_group", 0) for f in ("ncclSend", "ncclRecv"))
    if calls:
        print(f"rank {mine}: ragged_all_to_all x{calls}: calls {json.dumps(delta, sort_keys=True)}", flush=True)
        check(f"ragged_all_to_all: {launches} point-to-point launches for {calls} calls of {messages} messages (at most "
              "two a call, whatever the peers)", np.array([calls <= launches <= 2 * calls and messages > launches]),
              np.array([True]), 0)

    # The gradient of lax.ragged_all_to_all (lax's transpose: the offsets exchanged by all_to_all, then the ragged
    # exchange the other way), against numpy: each operand row sent gets the cotangent of the row it landed in.
    # lax's transpose writes every peer's cotangent rows into a zero operand, so of two ranges of one operand that
    # overlap, one peer's rows land there, not their sum: this check's ranges do not overlap (runs in peer order,
    # random gaps between them).
    if not ragged_in_command_buffers:
        cotangents = [rng.standard_normal((out_rows, width)).astype(np.float32) for _ in range(n)]
        apart = np.zeros((n, n), np.int32)
        for i in range(n):
            gaps = rng.multinomial(rows - int(sizes[i].sum()), np.full(n + 1, 1.0 / (n + 1)))
            apart[i] = np.cumsum(gaps[:n]) + np.cumsum(sizes[i]) - sizes[i]
        want_grad = np.zeros((rows, width), np.float32)
        for j in range(n):
            a, b, k = apart[mine, j], out_offsets[mine, j], sizes[mine, j]
            want_grad[a:a + k] = cotangents[j][b:b + k]
        grad_args = [args[0], args[1], global_of(apart[mine])] + args[3:]
        ragged_grad = jax.jit(jax.grad(lambda a, b, c, d, e, f, g: jnp.sum(jax.shard_map(
            lambda a, b, c, d, e, f, g: lax.ragged_all_to_all(a, b, c, d, e, f, axis_name="x") * g, mesh=mesh,
            in_specs=P("x"), out_specs=P("x"), check_vma=False)(a, b, c, d, e, f, g))))
        for attempt in range(2):
            got = np.asarray(ragged_grad(*grad_args, global_of(cotangents[mine])).addressable_data(0))
            check(f"grad of ragged_all_to_all run {attempt}", got, want_grad, 1e-6)

    # A mixture-of-experts round trip (jax_mscclpp.moe: dispatch, an expert scaling its rows by a replicated
    # parameter, combine), its loss summed over the ranks, and the gradients in the tokens and the parameter: with
    # lax's ragged all-to-alls (XLA's, through our library, beside the all-reduces of the loss and the parameter's
    # gradient) they must equal those of our ragged kernel over the JAX path.
    if not ragged_in_command_buffers:
        from jax_mscclpp import moe

        tokens_per_rank, d_model, top_k = 64, 16, 2
        tokens = [rng.standard_normal((tokens_per_rank, d_model)).astype(np.float32) for _ in range(n)]
        ids = [rng.integers(0, 2 * n, size=(tokens_per_rank, top_k)).astype(np.int32) for _ in range(n)]
        gates = [rng.random((tokens_per_rank, top_k)).astype(np.float32) for _ in range(n)]
        weights = [rng.standard_normal((tokens_per_rank, d_model)).astype(np.float32) for _ in range(n)]

        def moe_gradients(algorithm):
            def local(x, e, w, c, scale):
                expert_in, routing = moe.dispatch(x, e, num_experts=2 * n, axis_name="x", algorithm=algorithm)
                y = moe.combine(expert_in * scale, routing, w)
                return lax.psum(jnp.sum(y * c), "x")

            loss = jax.shard_map(local, mesh=mesh, in_specs=(P("x"), P("x"), P("x"), P("x"), P()), out_specs=P())
            grads = jax.jit(jax.grad(loss, argnums=(0, 4)))(
                global_of(tokens[mine]), global_of(ids[mine]), global_of(gates[mine]), global_of(weights[mine]),
                jnp.float32(1.5))
            return np.asarray(grads[0].addressable_data(0)), np.asarray(grads[1].addressable_data(0))

        want_tokens, want_scale = moe_gradients("p2p")
        for attempt in range(2):
            got_tokens, got_scale = moe_gradients("lax")
            check(f"moe round trip: gradient in the tokens, lax's ragged all-to-alls run {attempt}", got_tokens,
                  want_tokens, 1e-5)
            check(f"moe round trip: gradient in the scale, lax's ragged all-to-alls run {attempt}", got_scale,
                  want_scale, 1e-5)

    # GSPMD: no shard_map; XLA's partitioner inserts the collectives. A two-layer MLP, tensor parallel (weights
    # sharded, activations replicated) and data parallel (batch sharded, weights replicated), loss and gradients.
    cpu = jax.local_devices(backend="cpu")[0]
    rng = np.random.default_rng(7)
    d, h, b = 64, 32 * n, 8 * n
    params = {"w1": rng.standard_normal((d, h)).astype(np.float32) / 8,
              "w2": rng.standard_normal((h, d)).astype(np.float32) / 8}
    batch = rng.standard_normal((b, d)).astype(np.float32)

    def loss(p, x):
        y = jax.nn.relu(x @ p["w1"]) @ p["w2"]
        return jnp.mean((y - x) ** 2)

    step = jax.value_and_grad(loss)
    want_loss, want_grads = jax.jit(step, device=cpu)(params, batch)
    layouts = {
        "tensor parallel": ({"w1": P(None, "x"), "w2": P("x", None)}, P()),
        "data parallel": ({"w1": P(), "w2": P()}, P("x", None)),
    }
    for label, (param_specs, batch_spec) in layouts.items():
        placed = {k: jax.make_array_from_callback(v.shape, NamedSharding(mesh, param_specs[k]), lambda i, v=v: v[i])
                  for k, v in params.items()}
        x = jax.make_array_from_callback(batch.shape, NamedSharding(mesh, batch_spec), lambda i: batch[i])
        compiled = jax.jit(step).lower(placed, x).compile()
        inserted = sum(compiled.as_text().count(op) for op in ("all-reduce(", "all-gather(", "reduce-scatter(",
                                                                "all-reduce-start(", "all-gather-start("))
        for attempt in range(2):
            got_loss, got_grads = compiled(placed, x)
            check(f"gspmd {label} loss (XLA inserted {inserted} collectives, run {attempt})",
                  np.asarray(got_loss.addressable_data(0)), np.asarray(want_loss), 1e-4)
            for k, g in got_grads.items():
                for shard in g.addressable_shards:
                    check(f"gspmd {label} grad {k} {shard.index} run {attempt}", np.asarray(shard.data),
                          np.asarray(want_grads[k])[shard.index], 1e-4)

    calls = nccl_backend.call_counts()
    print(f"rank {mine}: calls {json.dumps(calls, sort_keys=True)}", flush=True)
    ours = sum(c for per in calls.values() for a, c in per.items() if a != "nccl")
    forwarded = sum(per.get("nccl", 0) for per in calls.values())
    check("calls ran on ours, none on NVIDIA's NCCL", np.array([ours > 0 and forwarded == 0]), np.array([True]), 0)
    record_dir = os.environ.get("JAX_MSCCLPP_TEST_RECORD_DIR")
    if record_dir:  # what a device run keeps: this process's checks and the calls our library ran
        os.makedirs(record_dir, exist_ok=True)
        flags = os.environ.get("XLA_FLAGS", "")
        with open(os.path.join(record_dir, f"nccl-{n}proc-{'cmdbuf' if 'COLLECTIVES' in flags else 'default'}-"
                               f"rank{mine}.json"), "w") as f:
            json.dump({"rank": mine, "processes": n, "xla_flags": flags, "checks": len(checks),
                       "mismatches": failures, "calls": calls, "seconds": round(time.monotonic() - started, 1),
                       "failed": [c["check"] for c in checks if not c["ok"]]}, f, indent=1)
    jax.distributed.shutdown()
    print(f"rank {mine}: {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
