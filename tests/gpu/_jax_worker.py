"""One process of a multi-process JAX run on GPUs (all processes may share GPU 0), driven by test_jax_*.py.

    python _jax_worker.py PROCESS_ID NUM_PROCESSES PORT SCENARIO

Each process holds one device (GPU pid mod JAX_MSCCLPP_TEST_GPUS); the mesh spans the processes. Every rank's
input comes from a seed known to all processes, so each checks its own output against numpy. Prints one line per
check and exits non-zero on any mismatch. Scenarios:
  "collectives"          every algorithm, dtypes, odd sizes, repeated calls;
  "quick"                fewer cases of the same;
  "in_place"             calls in place on XLA's buffers between the processes;
  "in_place_mixed"       the same where one process's buffers cannot be mapped;
  "plans"                DSL library plans registered with register_algorithm, run on the GPU executor;
  "lost_peer"            the last process skips the collective: the others must report a timeout naming rank and
                         peer;
  "lost_peer_in_place"   the same where the calls would run in place between the processes;
  "large_world"          more ranks than an emulated SwitchChannel holds: every other algorithm runs, 2PA-NVLS is
                         refused with an error;
  "setup_fails"          the last process asks for more scratch than the GPU holds: every process's setup fails at
                         once, naming it; then a communicator made again works everywhere;
  "recover"              failing kernels stop rather than trap: mismatched calls, a refused call, a fresh program.
"""

import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)

import numpy as np  # noqa: E402
from _rank_data import per_rank_inputs  # noqa: E402  (tests/gpu, beside this script)


def main() -> int:
    pid, nproc, port, scenario = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if scenario == "in_place_mixed" and pid == 0:
        os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] = "cuda_async"  # a pool whose memory CUDA IPC does not export
    import jax

    # One device per process: GPU pid mod the GPU count (all processes share GPU 0 on a one-GPU machine).
    gpus = int(os.environ.get("JAX_MSCCLPP_TEST_GPUS", "1"))
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc, process_id=pid,
                               local_device_ids=[pid % gpus])
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jax_mscclpp as jm

    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("x",))
    mine = [r for r, d in enumerate(devices) if d.process_index == jax.process_index()][0]
    local_device = devices[mine]
    n = len(devices)

    def global_array(per_rank, on=mesh):
        shard = jax.device_put(per_rank[mine], local_device)
        shape = (n * per_rank[mine].shape[0], *per_rank[mine].shape[1:])
        return jax.make_array_from_single_device_arrays(shape, NamedSharding(on, P(*on.axis_names)), [shard])

    def run(fn, per_rank, out_spec=P("x")):
        f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=out_spec))
        out = f(global_array(per_rank))
        return np.asarray(out.addressable_data(0))

    def inputs(seed, count, dtype):
        return per_rank_inputs(n, seed, count, dtype)

    failures = 0
    started = time.monotonic()

    def check(name, got, want, tol):
        nonlocal failures
        got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
        ok = got.shape == want.shape and np.allclose(got64, want64, rtol=0, atol=tol * max(1.0, np.abs(want64).max(initial=0)))
        failures += not ok
        print(f"rank {mine}: {name}: {'ok' if ok else 'MISMATCH'} ({time.monotonic() - started:.1f} s)", flush=True)

    if scenario in ("lost_peer", "lost_peer_in_place"):
        # In place between processes (with JAX_MSCCLPP_MAP_CUMEM=1): the lost peer is found on the host, when the
        # others wait for it to map their buffers, rather than by a kernel's bounded wait.
        x = inputs(1, (1 << 20) + 5 if scenario == "lost_peer_in_place" else 64, np.float32)
        f = jax.jit(jax.shard_map(lambda v: jm.psum(v, "x", algorithm="2pa_hb"), mesh=mesh, in_specs=P("x"),
                                  out_specs=P()))
        if mine == n - 1:
            jm.Communicator(mesh, "x")  # takes part in the setup, then never in the call
            print(f"rank {mine}: skipping the collective", flush=True)
            time.sleep(30)
            os._exit(0)  # no orderly shutdown: the peers' contexts are gone after their traps
        try:
            jax.block_until_ready(f(global_array(x)))
            print(f"rank {mine}: no error", flush=True)
            os._exit(1)
        except Exception as error:  # the kernel trapped on its bounded wait
            comm = jm.Communicator(mesh, "x")
            print(f"rank {mine}: error raised: {type(error).__name__}", flush=True)
            if scenario == "lost_peer_in_place":
                print(f"rank {mine}: {str(error)[:600]}", flush=True)
            for line in comm.errors():
                print(line, flush=True)
            os._exit(0)

    if scenario == "setup_fails":
        return check_setup_failure(jax, jm, mesh, mine, n, run, inputs)

    if scenario == "recover":
        return check_recovery(jax, jm, mesh, mine, n, global_array, inputs)

    import ml_dtypes

    jm.Communicator(mesh, "x", port_channels=True)  # before the first call: 2PR needs port channels

    reducers = {"sum": np.add, "max": np.maximum, "min": np.minimum}
    if scenario == "large_world":
        check_large_world(jm, n, mine, run, inputs, check, reducers)
        jax.distributed.shutdown()
        print(f"rank {mine}: {failures} failures", flush=True)
        return 1 if failures else 0
    if scenario in ("in_place", "in_place_mixed"):
        # Every call in place where XLA's buffers can be mapped (XLA's cuMem allocations are mapped unless
        # JAX_MSCCLPP_MAP_CUMEM=0); none where one process keeps them in a pool no transport exports; no agreement
        # with the mapping off.
        expect = ("none" if scenario == "in_place_mixed" else "all") if os.environ.get(
            "JAX_MSCCLPP_MAP_CUMEM", "1") != "0" else "off"
        check_in_place(jm, mesh, n, mine, run, inputs, check, reducers, expect)
        jax.distributed.shutdown()
        print(f"rank {mine}: {failures} failures", flush=True)
        return 1 if failures else 0
    if scenario == "plans":
        check_plans(jax, jm, mesh, n, mine, local_device, global_array, inputs, check, reducers)
        jax.distributed.shutdown()
        print(f"rank {mine}: {failures} failures", flush=True)
        return 1 if failures else 0
    dtypes = [np.float32, ml_dtypes.bfloat16, np.float16, np.int32, np.uint8]
    # Every algorithm: float32 sums over odd sizes, then every dtype and op at one odd size.
    quick = scenario == "quick"
    cases = [(np.float32, "sum", count) for count in ([3, 8 * 4096 + 5] if quick else [1, 3, 1023, 8 * 4096 + 5])]
    cases += [(dtype, op, 1023) for dtype in dtypes for op in ["sum", "max", "min"]][: 3 if quick else None]
    for algorithm in ["1pa_ll", "2pa_ll", "2pa_hb", "2pr", "2pa_nvls"]:
        for dtype, op, count in cases:
            per_rank = inputs(count + len(algorithm), count, dtype)
            got = run(lambda v: jm.all_reduce(v, "x", op=op, algorithm=algorithm), per_rank, P())
            want = per_rank[0].copy()
            for r in range(1, n):
                want = reducers[op](want, per_rank[r]).astype(dtype)
            tol = {np.float32: 1e-5, np.float16: 4e-3}.get(dtype, 3e-2 if dtype is ml_dtypes.bfloat16 else 0)
            check(f"all_reduce {algorithm} {np.dtype(dtype).name} {op} n={count}", got, want, tol)
    check_data_movement(jm, n, mine, run, inputs, check, [1, 7, 4099])
    check_ragged(jax, jm, mesh, n, mine, global_array, check)
    # `auto` where the table gives lax a size (65,541 float32: at 4 ranks for all_reduce and all_gather, at every
    # count for ppermute): lax cannot run on a shared GPU, so ours must.
    per_rank = inputs(13, 65541, np.float32)
    check("psum auto n=65541", run(lambda v: jm.psum(v, "x"), per_rank, P()), np.sum(per_rank, axis=0), 1e-5)
    check("all_gather auto n=65541", run(lambda v: jm.all_gather(v, "x", tiled=True), per_rank),
          np.concatenate(per_rank), 0)
    shift = [(r, (r + 1) % n) for r in range(n)]
    check("ppermute auto n=65541", run(lambda v: jm.ppermute(v, "x", shift), per_rank), per_rank[(mine - 1) % n], 0)
    # Repeated calls inside one program: epochs advance on the device.
    per_rank = inputs(11, 1000, np.float32)
    mean_step = lambda i, a: jax.lax.pcast(jm.psum(a, "x", algorithm="1pa_ll"), "x", to="varying") / n
    loop = lambda v: jax.lax.fori_loop(0, 300, mean_step, v)
    want = np.mean(per_rank, axis=0)
    check("300 psums in a fori_loop", run(loop, per_rank), want, 1e-4)
    jax.distributed.shutdown()
    print(f"rank {mine}: {failures} failures", flush=True)
    return 1 if failures else 0


def check_setup_failure(jax, jm, mesh, mine, n, run, inputs) -> int:
    """The last process's setup fails (its scratch cannot be allocated); every process must fail the same setup
    within seconds, naming that process, then set up again and run a sum."""
    from jax.sharding import PartitionSpec as P

    failing = n - 1
    started = time.monotonic()
    try:
        jm.Communicator(mesh, "x", scratch_bytes=(1 << 39) if mine == failing else None)
        print(f"rank {mine}: the setup did not fail", flush=True)
        return 1
    except Exception as error:
        seconds = time.monotonic() - started
        named = mine == failing or f"process {failing}" in str(error)
        print(f"rank {mine}: setup failed after {seconds:.1f} s ({'named' if named else 'NOT NAMED'}): {error}",
              flush=True)
        if not named or seconds > 30:
            return 1
    per_rank = inputs(5, 4099, np.float32)
    got = run(lambda v: jm.psum(v, "x", algorithm="1pa_ll"), per_rank, P())
    ok = np.allclose(got, np.sum(per_rank, axis=0), rtol=1e-5, atol=1e-5)
    print(f"rank {mine}: psum after the failed setup: {'ok' if ok else 'MISMATCH'}", flush=True)
    jax.distributed.shutdown()
    return 0 if ok else 1


def check_data_movement(jm, n, mine, run, inputs, check, counts):
    """all_gather, psum_scatter and all_to_all of ``counts`` float32 elements per block against numpy. Every call
    names our algorithm: processes that share a GPU cannot run XLA's NCCL collectives (NCCL refuses a duplicate
    GPU), which is what `auto` picks for some sizes and rank counts."""
    for count in counts:
        per_rank = inputs(7, n * count, np.float32)
        gathered = run(lambda v: jm.all_gather(v, "x", tiled=True, algorithm="allpairs"), per_rank)
        check(f"all_gather n={count}", gathered, np.concatenate(per_rank), 0)
        scattered = run(lambda v: jm.psum_scatter(v, "x", tiled=True, algorithm="allpairs"), per_rank)
        check(f"psum_scatter n={count}", scattered, np.sum(per_rank, axis=0).reshape(n, count)[mine], 1e-5)
        exchanged = run(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True, algorithm="allpairs"), per_rank)
        check(f"all_to_all n={count}", exchanged, np.concatenate([p.reshape(n, count)[mine] for p in per_rank]), 0)


def check_in_place(jm, mesh, n, mine, run, inputs, check, reducers, expect) -> None:
    """Calls large enough to run in place on XLA's buffers between the processes (docs/architecture.md, "In place
    between processes"): every collective, odd sizes, several dtypes and ops, each twice on fresh data (XLA reuses
    its buffers), against numpy. Then how many ran in place (`expect`): "all" where every process's buffers can be
    mapped by the others, "none" where one process keeps XLA's buffers in a pool no transport exports (every rank
    then copies through scratch, correctly, after agreeing so call by call), "off" where the ranks do not map each
    other's allocations (no agreement: every call copies through scratch, and the communicator says why)."""
    import ml_dtypes
    from jax.sharding import PartitionSpec as P

    from jax_mscclpp import selection_table

    comm = jm.Communicator(mesh, "x")
    before = comm.in_place_between_processes()
    rank_bytes = max(selection_table.in_place_min_rank_bytes(n), 1 << 20)
    calls = 0
    for repeat in range(2):
        for dtype, op in [(np.float32, "sum"), (ml_dtypes.bfloat16, "max"), (np.int32, "min")]:
            count = rank_bytes // np.dtype(dtype).itemsize + 5
            per_rank = inputs(31 + repeat, count, dtype)
            got = run(lambda v: jm.all_reduce(v, "x", op=op, algorithm="2pa_hb"), per_rank, P())
            want = per_rank[0].copy()
            for r in range(1, n):
                want = reducers[op](want, per_rank[r]).astype(dtype)
            check(f"in place: all_reduce {np.dtype(dtype).name} {op} n={count} (call {repeat + 1})", got, want,
                  1e-5 if dtype == np.float32 else 0)
            calls += 1
        count = rank_bytes // (4 * n) + 3
        per_rank = inputs(41 + repeat, n * count, np.float32)
        gathered = run(lambda v: jm.all_gather(v, "x", tiled=True, algorithm="allpairs"), per_rank)
        check(f"in place: all_gather n={count} (call {repeat + 1})", gathered, np.concatenate(per_rank), 0)
        scattered = run(lambda v: jm.psum_scatter(v, "x", tiled=True, algorithm="allpairs"), per_rank)
        check(f"in place: psum_scatter n={count} (call {repeat + 1})", scattered,
              np.sum(per_rank, axis=0).reshape(n, count)[mine], 1e-5)
        exchanged = run(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True, algorithm="allpairs"), per_rank)
        check(f"in place: all_to_all n={count} (call {repeat + 1})", exchanged,
              np.concatenate([p.reshape(n, count)[mine] for p in per_rank]), 0)
        calls += 3
    after = comm.in_place_between_processes()
    in_place = after["in_place"] - before["in_place"]
    through_scratch = after["through_scratch"] - before["through_scratch"]
    print(f"rank {mine}: {in_place} of {calls} calls in place between processes, {through_scratch} through scratch"
          + (f" (unavailable: {after['unavailable']})" if after["unavailable"] else ""), flush=True)
    want = {"all": [calls, 0], "none": [0, calls], "off": [0, 0]}[expect]
    check("in place: calls that ran in place, and that agreed on scratch", np.array([in_place, through_scratch]),
          np.array(want), 0)
    if expect == "off":
        check("in place: the communicator says why no call may", np.array([bool(after["unavailable"])]),
              np.array([True]), 0)


def check_recovery(jax, jm, mesh, mine, n, global_array, inputs) -> int:
    """JAX_MSCCLPP_TRAP_ON_FAILURE=0: rank 0 calls psum where the others call pmax (mismatched calls). The kernels
    stop rather than trap, so each process's GPU context stays usable: the program that failed returns outputs
    with every bit set (NaN), the next call of it is refused with the record (ABORTED), and a program lowered
    afterwards runs on a fresh communicator and is right. Prints one line per step; exit status 0 when every step
    went as said."""
    from jax.sharding import PartitionSpec as P

    x = inputs(5, 1000, np.float32)
    body = (lambda v: jm.psum(v, "x", algorithm="1pa_ll")) if mine == 0 else (
        lambda v: jm.pmax(v, "x", algorithm="1pa_ll"))
    failing = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P()))
    poisoned = np.asarray(failing(global_array(x)).addressable_data(0))
    print(f"rank {mine}: the mismatched call returned, {'all NaN' if np.isnan(poisoned).all() else 'NOT POISONED'}",
          flush=True)
    for line in jm.Communicator(mesh, "x").errors():
        print(f"rank {mine}: record: {line}", flush=True)
    try:
        jax.block_until_ready(failing(global_array(x)))
        print(f"rank {mine}: the second call was not refused", flush=True)
        return 1
    except Exception as error:  # noqa: BLE001
        print(f"rank {mine}: the second call was refused: {str(error)[:400]}", flush=True)
        if "ABORTED" not in str(error) or "unusable after an earlier failure" not in str(error):
            return 1
    fresh = jax.jit(jax.shard_map(lambda v: jm.psum(v, "x", algorithm="1pa_ll"), mesh=mesh, in_specs=P("x"),
                                  out_specs=P()))
    got = np.asarray(fresh(global_array(x)).addressable_data(0))
    ok = np.allclose(got, np.sum(x, axis=0), rtol=0, atol=1e-4 * np.abs(np.sum(x, axis=0)).max())
    print(f"rank {mine}: a program lowered afterwards: {'ok' if ok else 'MISMATCH'}", flush=True)
    jax.distributed.shutdown()
    return 0 if ok else 1


def check_ragged(jax, jm, mesh, n, mine, global_array, check):
    """ragged_all_to_all of a random ragged layout, zero sizes and gaps included, against numpy: rank i's rows
    [in_off[i, j], + send[i, j]) land on rank j at out_off[i, j], the rest of rank j's output is kept. By default
    (the one launch, "p2p", where processes share a GPU; lax's on distinct GPUs) and with algorithm="p2p"; the
    gradients of "p2p" in the operand and the output against the composition's (algorithm="allpairs")."""
    from jax.sharding import PartitionSpec as P

    from jax_mscclpp import ragged

    rng = np.random.default_rng(20261201)  # the same layout in every process
    rows, out_rows = 3 * n + 5, 4 * n + 7
    send = rng.integers(0, 4, (n, n)).astype(np.int32)
    in_off = np.concatenate([np.zeros((n, 1), np.int32), np.cumsum(send, axis=1)[:, :-1]], axis=1).astype(np.int32)
    out_off = (np.concatenate([np.zeros((1, n), np.int32), np.cumsum(send, axis=0)[:-1]], axis=0) +
               np.arange(n, dtype=np.int32)[:, None]).astype(np.int32)  # one row of gap per sender
    operand = [rng.standard_normal((rows, 3)).astype(np.float32) for _ in range(n)]
    output = [rng.standard_normal((out_rows, 3)).astype(np.float32) for _ in range(n)]
    weights = global_array([rng.standard_normal((out_rows, 3)).astype(np.float32) for _ in range(n)])

    def program(algorithm):
        body = lambda a, b, c, d, e, f: jm.ragged_all_to_all(a, b, c[0], d[0], e[0], f[0], axis_name="x",  # noqa
                                                             algorithm=algorithm)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x")))

    per_rank = [operand, output, list(in_off[:, None]), list(send[:, None]), list(out_off[:, None]),
                list(send.T[:, None])]
    arrays = [global_array([np.ascontiguousarray(a) for a in x]) for x in per_rank]
    want = output[mine].copy()
    for i in range(n):
        want[out_off[i, mine]:out_off[i, mine] + send[i, mine]] = operand[i][in_off[i, mine]:in_off[i, mine] + send[i, mine]]
    default = ragged.P2P if ragged._processes_share_gpus() else "lax"
    chosen = [c.algorithm for c in jm.explain(program(None), *arrays) if c.collective == "ragged_all_to_all"]
    check(f"ragged_all_to_all auto runs {default} (explain: {chosen})", np.array([chosen == [default]], np.float32),
          np.array([1], np.float32), 0)
    for algorithm in (None, "p2p"):
        got = np.asarray(program(algorithm)(*arrays).addressable_data(0))
        check(f"ragged_all_to_all {algorithm or 'auto'}", got, want, 0)

    def grads(algorithm):
        f = program(algorithm)
        # Every global array an argument: a jitted function cannot close over arrays of other processes.
        g = jax.jit(jax.grad(lambda a, b, tables, w: (f(a, b, *tables) * w).sum(), argnums=(0, 1)))
        return [np.asarray(x.addressable_data(0)) for x in g(arrays[0], arrays[1], arrays[2:], weights)]

    for name, got, composed in zip(("operand", "output"), grads("p2p"), grads("allpairs")):
        check(f"ragged_all_to_all p2p grad in the {name}", got, composed, 0)


def check_large_world(jm, n, mine, run, inputs, check, reducers):
    """A communicator of more ranks than an emulated SwitchChannel holds (n > 8) has none: the selection's choice
    and every algorithm but 2PA-NVLS run against numpy, all_gather / psum_scatter / all_to_all too, and a forced
    2PA-NVLS call is an error, after which the communicator still works."""
    import ml_dtypes
    from jax.sharding import PartitionSpec as P

    assert n > 8, n
    # One case per algorithm (each is one compile in every process, and 16 processes time-slice one GPU): the
    # dtypes, ops and sizes rotate over the algorithms.
    cases = [(None, np.float32, "sum", 1023), ("1pa_ll", ml_dtypes.bfloat16, "max", 4099),
             ("2pa_ll", np.int32, "min", 5), ("2pa_hb", np.float32, "sum", 4099),
             ("2pr", ml_dtypes.bfloat16, "max", 1023)]
    for algorithm, dtype, op, count in cases:
        per_rank = inputs(count + len(str(algorithm)), count, dtype)
        got = run(lambda v: jm.all_reduce(v, "x", op=op, algorithm=algorithm), per_rank, P())
        want = per_rank[0].copy()
        for r in range(1, n):
            want = reducers[op](want, per_rank[r]).astype(dtype)
        check(f"all_reduce {algorithm or 'auto'} {np.dtype(dtype).name} {op} n={count}", got, want,
              1e-5 if dtype is np.float32 else 0)
    check_data_movement(jm, n, mine, run, inputs, check, [7])
    per_rank = inputs(3, 64, np.float32)
    try:
        run(lambda v: jm.psum(v, "x", algorithm="2pa_nvls"), per_rank, P())
        refused = "no error"
    except Exception as error:  # noqa: BLE001 - refused at trace time or by the handler: either is an error
        refused = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    print(f"rank {mine}: 2pa_nvls with {n} ranks: {refused}", flush=True)
    check("2pa_nvls is refused", np.array([refused != "no error"]), np.array([True]), 0)
    check("psum after the refusal", run(lambda v: jm.psum(v, "x", algorithm="1pa_ll"), per_rank, P()),
          np.sum(per_rank, axis=0), 1e-5)


def check_plans(jax, jm, mesh, n, mine, local_device, global_array, inputs, check, reducers):
    """Library plans registered as algorithms run on the GPU executor: all_reduce 1PA-LL, 2PA-HB and 2PR (port
    channels), all-pairs all_gather, MSCCLang's AllToNext (a permutation); odd sizes, several dtypes and ops, each case twice on fresh data over
    poisoned memory, and messages larger than one scratch piece on a communicator with a small scratch."""
    import ml_dtypes
    from jax.sharding import Mesh, PartitionSpec as P

    from jax_mscclpp import plans
    from jax_mscclpp.dsl import library

    names = {}
    for program in (library.allreduce_1pa_ll, library.allreduce_2pa_hb, library.allreduce_2pr,
                    library.allgather_allpairs):
        names[program.__name__] = jm.register_algorithm(program, name="plan_" + program.__name__).name
    # A second communicator over the same devices, with a scratch far smaller than the largest messages: the
    # executor pipelines them through it, one launch per piece. It has no port channels.
    small_scratch = 128 << 10
    small = Mesh(mesh.devices, ("y",))
    jm.Communicator(small, "y", scratch_bytes=small_scratch)

    def holds(label, ok):
        check(label, np.array([bool(ok)]), np.array([True]), 0)

    def poison(nbytes):  # leaves freed device memory that a stale output would show
        jax.device_put(np.full(nbytes, 0xA5, np.uint8), local_device).block_until_ready().delete()

    def run_plan(name, fn, cases, on=mesh):
        """cases: (dtype, count per rank, want(per_rank) -> this rank's expected output, tolerance)."""
        axis = on.axis_names[0]
        f = jax.jit(jax.shard_map(lambda v: fn(v, axis), mesh=on, in_specs=P(axis), out_specs=P(axis)))
        for dtype, count, want_of, tol in cases:
            label = f"{name} {np.dtype(dtype).name} n={count} on {axis}"
            for repeat in range(2):
                per_rank = inputs(1 + repeat + count % 97, count, dtype)
                arg = global_array(per_rank, on)
                if repeat == 0:
                    holds(f"{label} lowers to the plan", "algorithm = 6" in f.lower(arg).as_text())
                want = want_of(per_rank)
                poison(want.nbytes)
                got = np.asarray(f(arg).addressable_data(0))
                check(f"{label} call {repeat}", got, want, tol)

    def reduced(op, dtype):
        def want(per_rank):
            out = per_rank[0].copy()
            for r in range(1, n):
                out = reducers[op](out, per_rank[r]).astype(dtype)
            return out
        return want

    def tolerance(dtype):
        return {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 4e-3,
                np.dtype(ml_dtypes.bfloat16): 3e-2}.get(np.dtype(dtype), 0)

    def all_reduce_cases(counts, dtype_ops):
        return [(dtype, count, reduced(op, dtype), tolerance(dtype)) for count in counts for dtype, op in dtype_ops]

    dtype_ops = [(np.float32, "sum"), (ml_dtypes.bfloat16, "max"), (np.float16, "sum"), (np.int32, "min"),
                 (np.uint8, "sum")]
    for program in ("allreduce_1pa_ll", "allreduce_2pa_hb"):
        for op in ("sum", "max", "min"):
            def reduce(v, axis, op=op, program=program):
                return jm.all_reduce(v, axis, op=op, algorithm=names[program])

            counts = [1, 3, 1023, 8 * 4096 + 5] if op == "sum" else [1023]
            run_plan(f"{program} {op}", reduce, all_reduce_cases(counts, [(d, o) for d, o in dtype_ops if o == op]))
    run_plan("allreduce_2pr sum", lambda v, a: jm.psum(v, a, algorithm=names["allreduce_2pr"]),
             all_reduce_cases([3, 4097], [(np.float32, "sum"), (ml_dtypes.bfloat16, "sum")]))
    gather = lambda v, a: jm.all_gather(v, a, tiled=True, algorithm=names["allgather_allpairs"])
    gathered = lambda per_rank: np.concatenate(per_rank)
    run_plan("allgather_allpairs", gather,
             [(dtype, count, gathered, 0) for count in (1, 7, 4099) for dtype in (np.float32, ml_dtypes.bfloat16,
                                                                                   np.uint8)])

    # MSCCLang's AllToNext, a plan of the permutation: rank r's block lands on rank r + 1, rank 0 gets zeros (the
    # runtime's, written over poisoned memory).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests.dsl
    from tests.dsl import msccl_programs

    pairs = [(r, r + 1) for r in range(n - 1)]
    from_previous = lambda per_rank: per_rank[mine - 1] if mine > 0 else np.zeros_like(per_rank[mine])
    for protocol in ("Simple", "LL"):
        name = names[f"alltonext_{protocol}"] = jm.register_algorithm(
            msccl_programs.alltonext(n, protocol), name=f"plan_alltonext_{protocol}").name
        run_plan(f"alltonext {protocol}", lambda v, a, name=name: jm.ppermute(v, a, pairs, algorithm=name),
                 [(dtype, count, from_previous, 0) for count in (1, 7, 4099)
                  for dtype in (np.float32, ml_dtypes.bfloat16, np.uint8)])

    # Larger than one piece: the plan's scratch for the whole message exceeds the communicator's whole scratch,
    # so any one half of it.
    big = 8 * 4096 + 5
    for program in ("allreduce_1pa_ll", "allreduce_2pa_hb", "allgather_allpairs"):
        plan = plans.registered(names[program]).plan_for(n)
        holds(f"{program} n={big} needs more than one scratch piece",
              plans.scratch_bytes(plan, big, 4) > small_scratch)
    for program in ("allreduce_1pa_ll", "allreduce_2pa_hb"):
        run_plan(f"{program} pipelined", lambda v, a, program=program: jm.psum(v, a, algorithm=names[program]),
                 all_reduce_cases([big], [(np.float32, "sum"), (ml_dtypes.bfloat16, "sum")]), on=small)
    run_plan("allgather_allpairs pipelined", gather, [(np.float32, big, gathered, 0)], on=small)

    # A port-channel plan on a communicator made without port channels: refused when traced.
    try:
        f = jax.jit(jax.shard_map(lambda v: jm.psum(v, "y", algorithm=names["allreduce_2pr"]), mesh=small,
                                  in_specs=P("y"), out_specs=P("y")))
        f.lower(global_array(inputs(5, 64, np.float32), small))
        refused = False
    except ValueError as error:
        refused = "port_channels=True" in str(error)
    holds("a port-channel plan without port channels is refused", refused)
    for name in names.values():
        jm.unregister_algorithm(name)


if __name__ == "__main__":
    sys.exit(main())
