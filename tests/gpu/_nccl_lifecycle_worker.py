"""One process of tests/gpu/test_nccl_lifecycle.py: jax_mscclpp's libnccl.so.2 through NCCL's C API (ctypes; device
buffers and streams are cupy's), in processes sharing GPU 0 (so every communicator is our runtime's alone).

    python tests/gpu/_nccl_lifecycle_worker.py PROCESS_ID NUM_PROCESSES PORT LIBRARY WORKDIR SCENARIO

Scenarios (every process runs the same one; ids and flags travel through files in WORKDIR):
  abort_stuck        rank 0 launches an all-reduce rank 1 never joins (its kernel waits), aborts it, and times the
                     abort and the stream's end; then both make a new communicator and check an all-reduce.
  destroy_peer_gone  an all-reduce, then rank 1 exits without destroying; rank 0 times its destroy.
  destroy_in_flight  rank 0 launches two all-reduces, on two streams, and destroys its communicator at once; rank 1
                     joins them LATE_PEER_S later and destroys too; both check their outputs (both of rank 0's
                     streams must be done when its destroy returns: the destroy waits for the rank's work on every
                     stream), then make a new communicator and check an all-reduce on it.
  destroy_past_timeout  destroy_in_flight with rank 1 LATE_S late (the test sets a shorter timeout and the
                     library's wait policy: the destroy still completes the all-reduces).
  nonblocking        a non-blocking config: ncclInProgress, ncclCommGetAsyncError until success, an all-reduce.
  group_inits        one process, one thread, inits two ranks inside a group, then an all-reduce on both.
  setup_out_of_memory  rank 1 fills the GPU but for room for one rank's setup, so the ranks' inits race for it
                     and at least one fails on its own; both time their inits and keep the last error, then the
                     GPU is emptied and both make a new communicator and check an all-reduce on it.
  shrink_idle        3 ranks check an all-reduce, then rank 1 dies (SIGKILL); ranks 0 and 2 shrink it away
                     (NCCL_SHRINK_DEFAULT, the dead rank never calls) and check an all-reduce on the child.
  shrink_mid_call    the same with rank 0 dying (the process that made the id and holds the parent's root), after
                     ranks 1 and 2 launched an all-reduce it never joins: they shrink with NCCL_SHRINK_ABORT.
  group_children     one process, one thread: three ranks inited, split and shrunk, each step in one group, with an
                     all-reduce on every communicator made.
  late_peer          rank 0 launches an all-reduce at once and polls ncclCommGetAsyncError until its stream is done;
                     rank 1 launches it LATE_S later; both check it, print "STREAM DONE", run another all-reduce and
                     destroy (the test sets a timeout shorter than LATE_S and the library's wait policy).
Prints "RESULT " + JSON last.
"""

import ctypes
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests.nccl
from tests.nccl._nccl_structs import Config, UniqueId  # noqa: E402

NCCL_SUCCESS, NCCL_IN_PROGRESS, FLOAT32, SUM = 0, 7, 7, 0
NCCL_SHRINK_DEFAULT, NCCL_SHRINK_ABORT = 0, 1


def load(path):
    lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
    lib.jax_mscclpp_nccl_backend.restype = ctypes.c_char_p
    lib.jax_mscclpp_nccl_backend.argtypes = [ctypes.c_void_p]
    lib.ncclCommInitRank.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int]
    lib.ncclCommInitRankConfig.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int, ctypes.c_void_p]
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_void_p]
    for name in ("ncclCommDestroy", "ncclCommAbort"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclCommShrink.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int]
    for name in ("ncclCommUserRank", "ncclCommCount"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib


def wait_for(path, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)


def shared_id(lib, rank, workdir, name):
    path = os.path.join(workdir, name)
    uid = UniqueId()
    if rank == 0:
        assert lib.ncclGetUniqueId(ctypes.byref(uid)) == NCCL_SUCCESS, lib.ncclGetLastError(None)
        with open(path + ".tmp", "wb") as f:
            f.write(bytes(uid))
        os.replace(path + ".tmp", path)
    else:
        wait_for(path)
        ctypes.memmove(ctypes.byref(uid), open(path, "rb").read(), 128)
    return uid


def all_reduce_checked(lib, comm, rank, nranks, count, stream, seed=7):
    """A float32 sum of per-rank random inputs (rebuilt from the seed on every rank), checked against numpy."""
    import cupy as cp

    inputs = [np.random.default_rng(seed + r).standard_normal(count).astype(np.float32) for r in range(nranks)]
    send = cp.asarray(inputs[rank])
    recv = cp.full(count, np.nan, np.float32)
    code = lib.ncclAllReduce(send.data.ptr, recv.data.ptr, count, FLOAT32, SUM, comm, stream.ptr)
    stream.synchronize()
    expected = np.sum(inputs, axis=0, dtype=np.float64).astype(np.float32)
    return code, bool(np.allclose(cp.asnumpy(recv), expected, rtol=1e-5, atol=1e-5))


def checked_new_communicator(lib, rank, nranks, workdir, stream):
    """A new communicator (id "id2") made, checked with an all-reduce on `stream` and destroyed: the report's
    init_again, all_reduce_again and destroy_again."""
    again = ctypes.c_void_p()
    out = {"init_again": lib.ncclCommInitRank(ctypes.byref(again), nranks, shared_id(lib, rank, workdir, "id2"), rank)}
    out["all_reduce_again"] = all_reduce_checked(lib, again, rank, nranks, 100_003, stream)
    out["destroy_again"] = lib.ncclCommDestroy(again)
    return out


def abort_stuck(lib, rank, nranks, workdir):
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    comm = ctypes.c_void_p()
    out = {"init": lib.ncclCommInitRank(ctypes.byref(comm), nranks, shared_id(lib, rank, workdir, "id1"), rank)}
    out["backend"] = lib.jax_mscclpp_nccl_backend(comm).decode()
    if rank == 0:
        send = cp.ones(1 << 18, np.float32)
        recv = cp.zeros(1 << 18, np.float32)
        out["launch"] = lib.ncclAllReduce(send.data.ptr, recv.data.ptr, 1 << 18, FLOAT32, SUM, comm, stream.ptr)
        time.sleep(1.0)
        out["stuck_before_abort"] = not stream.done
        t0 = time.monotonic()
        out["abort"] = lib.ncclCommAbort(comm)
        out["abort_s"] = time.monotonic() - t0
        stream.synchronize()
        out["stream_end_s"] = time.monotonic() - t0
        open(os.path.join(workdir, "aborted"), "w").close()
    else:
        wait_for(os.path.join(workdir, "aborted"))
        t0 = time.monotonic()
        out["abort"] = lib.ncclCommAbort(comm)
        out["abort_s"] = time.monotonic() - t0
    out.update(checked_new_communicator(lib, rank, nranks, workdir, stream))
    return out


def destroy_peer_gone(lib, rank, nranks, workdir):
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    comm = ctypes.c_void_p()
    out = {"init": lib.ncclCommInitRank(ctypes.byref(comm), nranks, shared_id(lib, rank, workdir, "id1"), rank)}
    out["all_reduce"] = all_reduce_checked(lib, comm, rank, nranks, 4099, stream)
    if rank != 0:
        print("RESULT " + json.dumps(dict(out, rank=rank)), flush=True)
        open(os.path.join(workdir, f"gone{rank}"), "w").close()
        os._exit(0)
    for r in range(1, nranks):
        wait_for(os.path.join(workdir, f"gone{r}"))
    time.sleep(0.5)
    t0 = time.monotonic()
    out["destroy"] = lib.ncclCommDestroy(comm)
    out["destroy_s"] = time.monotonic() - t0
    return out


LATE_PEER_S = 4.0  # twice the destroy's barrier


def destroy_in_flight(lib, rank, nranks, workdir, late_s=None):
    import cupy as cp

    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    comm = ctypes.c_void_p()
    out = {"init": lib.ncclCommInitRank(ctypes.byref(comm), nranks, shared_id(lib, rank, workdir, "id1"), rank)}
    out["backend"] = lib.jax_mscclpp_nccl_backend(comm).decode()
    count = 1 << 18
    inputs = [[np.random.default_rng(seed + r).standard_normal(count).astype(np.float32) for r in range(nranks)]
              for seed in (23, 29)]
    sends = [cp.asarray(x[rank]) for x in inputs]
    recvs = [cp.full(count, np.nan, np.float32) for _ in inputs]
    cp.cuda.Device().synchronize()  # the rank's streams do not wait for cupy's
    if rank != 0:
        time.sleep(LATE_PEER_S if late_s is None else late_s)
    out["launch"] = [lib.ncclAllReduce(send.data.ptr, recv.data.ptr, count, FLOAT32, SUM, comm, stream.ptr)
                     for send, recv, stream in zip(sends, recvs, streams)]
    t0 = time.monotonic()
    out["destroy"] = lib.ncclCommDestroy(comm)
    out["destroy_s"] = time.monotonic() - t0
    out["stream_done_at_destroy"] = [stream.done for stream in streams]
    cp.cuda.Device().synchronize()
    got = [cp.asnumpy(recv) for recv in recvs]
    out["all_reduce_ok"] = [bool(np.allclose(g, np.sum(x, axis=0, dtype=np.float64).astype(np.float32), rtol=1e-5,
                                             atol=1e-5)) for g, x in zip(got, inputs)]
    out["nan_outputs"] = sum(int(np.isnan(g).sum()) for g in got)
    check = cp.arange(1000, dtype=cp.float32) * 2  # the context still runs kernels
    cp.cuda.Device().synchronize()
    out["context_usable"] = float(check.sum()) == 999_000.0
    out.update(checked_new_communicator(lib, rank, nranks, workdir, streams[0]))
    return out


def nonblocking(lib, rank, nranks, workdir):
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    config = Config(size=ctypes.sizeof(Config), magic=0xCAFEBEEF, version=23007, blocking=0)
    comm = ctypes.c_void_p()
    uid = shared_id(lib, rank, workdir, "id1")
    out = {"init": lib.ncclCommInitRankConfig(ctypes.byref(comm), nranks, uid, rank, ctypes.byref(config))}
    states, state = [], ctypes.c_int(-1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
        if not states or states[-1] != state.value:
            states.append(state.value)
        if state.value != NCCL_IN_PROGRESS:
            break
        time.sleep(0.001)
    out["states"] = states
    out["all_reduce"] = all_reduce_checked(lib, comm, rank, nranks, 65_537, stream)
    out["destroy"] = lib.ncclCommDestroy(comm)
    return out


def group_inits(lib, rank, nranks, workdir):
    import cupy as cp

    uid = UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == NCCL_SUCCESS
    comms = [ctypes.c_void_p(), ctypes.c_void_p()]
    out = {"start": lib.ncclGroupStart()}
    out["inits"] = [lib.ncclCommInitRank(ctypes.byref(c), 2, uid, r) for r, c in enumerate(comms)]
    out["end"] = lib.ncclGroupEnd()
    out["end_error"] = lib.ncclGetLastError(None).decode()
    count = 10_007
    inputs = [np.random.default_rng(11 + r).standard_normal(count).astype(np.float32) for r in range(2)]
    sends = [cp.asarray(x) for x in inputs]
    recvs = [cp.full(count, np.nan, np.float32) for _ in range(2)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    lib.ncclGroupStart()
    codes = [lib.ncclAllReduce(sends[r].data.ptr, recvs[r].data.ptr, count, FLOAT32, SUM, comms[r], streams[r].ptr)
             for r in range(2)]
    codes.append(lib.ncclGroupEnd())
    for s in streams:
        s.synchronize()
    expected = (inputs[0].astype(np.float64) + inputs[1]).astype(np.float32)
    out["all_reduce"] = (codes, [bool(np.allclose(cp.asnumpy(r), expected, rtol=1e-5, atol=1e-5)) for r in recvs])
    destroys = [None, None]

    def destroy(r):
        destroys[r] = lib.ncclCommDestroy(comms[r])

    threads = [threading.Thread(target=destroy, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["destroys"] = destroys
    return out


def destroy_past_timeout(lib, rank, nranks, workdir):
    return destroy_in_flight(lib, rank, nranks, workdir, late_s=LATE_S)


def setup_out_of_memory(lib, rank, nranks, workdir):
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    barrier(workdir, "contexts", rank, nranks)  # every process's context made before the GPU fills
    filler = None
    if rank == 1:  # the GPU left with room for one rank's setup (a scratch of 64 MiB), not for both
        free, _ = cp.cuda.runtime.memGetInfo()
        filler = cp.cuda.runtime.malloc(free - (LEFT_FREE_MIB << 20))
    barrier(workdir, "filled", rank, nranks)
    uid = shared_id(lib, rank, workdir, "id1")
    comm = ctypes.c_void_p()
    t0 = time.monotonic()
    out = {"init": lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank)}
    out["init_s"] = time.monotonic() - t0
    out["error"] = lib.ncclGetLastError(None).decode()
    if out["init"] == NCCL_SUCCESS:
        out["destroy"] = lib.ncclCommDestroy(comm)
    barrier(workdir, "inits_done", rank, nranks)
    if filler is not None:
        cp.cuda.runtime.free(filler)
    barrier(workdir, "emptied", rank, nranks)
    out.update(checked_new_communicator(lib, rank, nranks, workdir, stream))
    return out


def shrink_after_a_death(lib, rank, nranks, workdir, dead, mid_call):
    """Rank `dead` dies (SIGKILL, as a crash); the others shrink it away and check an all-reduce on the child. With
    `mid_call` they had launched an all-reduce the dead rank never joins, stuck until the shrink's NCCL_SHRINK_ABORT
    stops it; else the parent is idle (NCCL_SHRINK_DEFAULT)."""
    import signal

    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    comm = ctypes.c_void_p()
    out = {"init": lib.ncclCommInitRank(ctypes.byref(comm), nranks, shared_id(lib, rank, workdir, "id1"), rank)}
    out["all_reduce"] = all_reduce_checked(lib, comm, rank, nranks, 4099, stream)
    barrier(workdir, "checked", rank, nranks)
    if rank == dead:
        print("RESULT " + json.dumps(dict(out, rank=rank)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if mid_call:
        send = cp.ones(1 << 16, np.float32)
        recv = cp.zeros(1 << 16, np.float32)
        cp.cuda.Device().synchronize()
        out["stuck_launch"] = lib.ncclAllReduce(send.data.ptr, recv.data.ptr, 1 << 16, FLOAT32, SUM, comm, stream.ptr)
        time.sleep(1.0)
        out["stuck"] = not stream.done
    excluded = (ctypes.c_int * 1)(dead)
    child = ctypes.c_void_p()
    t0 = time.monotonic()
    out["shrink"] = lib.ncclCommShrink(comm, excluded, 1, ctypes.byref(child), None,
                                       NCCL_SHRINK_ABORT if mid_call else NCCL_SHRINK_DEFAULT)
    out["shrink_s"] = time.monotonic() - t0
    out["shrink_error"] = lib.ncclGetLastError(None).decode()
    if mid_call:
        stream.synchronize()  # the stuck all-reduce gave up
    child_rank, child_ranks = ctypes.c_int(-1), ctypes.c_int(-1)
    lib.ncclCommUserRank(child, ctypes.byref(child_rank))
    lib.ncclCommCount(child, ctypes.byref(child_ranks))
    out["child"] = [child_rank.value, child_ranks.value]
    out["child_all_reduce"] = all_reduce_checked(lib, child, child_rank.value, child_ranks.value, 65_537, stream,
                                                 seed=41)
    out["child_destroy"] = lib.ncclCommDestroy(child)
    out["parent_abort"] = lib.ncclCommAbort(comm)
    return out


def shrink_idle(lib, rank, nranks, workdir):
    return shrink_after_a_death(lib, rank, nranks, workdir, dead=1, mid_call=False)


def shrink_mid_call(lib, rank, nranks, workdir):
    return shrink_after_a_death(lib, rank, nranks, workdir, dead=0, mid_call=True)


LEFT_FREE_MIB = 100  # setup_out_of_memory: a rank's setup needs its 64 MiB scratch and a few MiB more


def grouped_all_reduce(lib, comms, seed):
    """One float32 sum over `comms` (every rank of one communicator, in its rank order), called from this thread in
    one group: (codes, every rank's output right)."""
    import cupy as cp

    count = 10_007
    inputs = [np.random.default_rng(seed + r).standard_normal(count).astype(np.float32) for r in range(len(comms))]
    sends = [cp.asarray(x) for x in inputs]
    recvs = [cp.full(count, np.nan, np.float32) for _ in comms]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in comms]
    cp.cuda.Device().synchronize()
    lib.ncclGroupStart()
    codes = [lib.ncclAllReduce(sends[r].data.ptr, recvs[r].data.ptr, count, FLOAT32, SUM, comms[r], streams[r].ptr)
             for r in range(len(comms))]
    codes.append(lib.ncclGroupEnd())
    for s in streams:
        s.synchronize()
    expected = np.sum(inputs, axis=0, dtype=np.float64).astype(np.float32)
    return codes, [bool(np.allclose(cp.asnumpy(r), expected, rtol=1e-5, atol=1e-5)) for r in recvs]


def group_children(lib, rank, nranks, workdir):
    """One thread inits three ranks in a group, then splits them in a group (one color, keys reversing the order)
    and shrinks them in a group (rank 1 excluded; rank 2 called before rank 0, the survivors' leader), checking an
    all-reduce on each communicator."""
    uid = UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == NCCL_SUCCESS
    comms = [ctypes.c_void_p() for _ in range(3)]
    lib.ncclGroupStart()
    out = {"inits": [lib.ncclCommInitRank(ctypes.byref(c), 3, uid, r) for r, c in enumerate(comms)]}
    out["inits_end"] = lib.ncclGroupEnd()
    out["all_reduce"] = grouped_all_reduce(lib, comms, 51)
    splits = [ctypes.c_void_p() for _ in range(3)]
    lib.ncclGroupStart()
    out["splits"] = [lib.ncclCommSplit(comms[r], 0, -r, ctypes.byref(splits[r]), None) for r in range(3)]
    out["splits_null_in_group"] = [s.value is None for s in splits]
    out["splits_end"] = lib.ncclGroupEnd()
    out["splits_error"] = lib.ncclGetLastError(None).decode()
    split_ranks = []
    for s in splits:
        r = ctypes.c_int(-1)
        lib.ncclCommUserRank(s, ctypes.byref(r))
        split_ranks.append(r.value)
    out["split_ranks"] = split_ranks
    by_split_rank = [splits[split_ranks.index(q)] for q in range(3)] if sorted(split_ranks) == [0, 1, 2] else []
    out["split_all_reduce"] = grouped_all_reduce(lib, by_split_rank, 61) if by_split_rank else None
    shrunk = {2: ctypes.c_void_p(), 0: ctypes.c_void_p()}
    excluded = (ctypes.c_int * 1)(1)
    lib.ncclGroupStart()
    out["shrinks"] = [lib.ncclCommShrink(comms[r], excluded, 1, ctypes.byref(shrunk[r]), None, NCCL_SHRINK_DEFAULT)
                      for r in (2, 0)]
    out["shrinks_end"] = lib.ncclGroupEnd()
    out["shrinks_error"] = lib.ncclGetLastError(None).decode()
    out["shrink_all_reduce"] = grouped_all_reduce(lib, [shrunk[0], shrunk[2]], 71)
    destroys = [lib.ncclCommDestroy(c) for c in (shrunk[0], shrunk[2])]
    out["destroys"] = destroys + destroy_concurrently(lib, splits + comms)
    return out


def destroy_concurrently(lib, comms):
    """ncclCommDestroy of every communicator of `comms`, each on a thread of its own (destroy meets the other ranks)."""
    codes = [None] * len(comms)

    def destroy(i):
        codes[i] = lib.ncclCommDestroy(comms[i])

    threads = [threading.Thread(target=destroy, args=(i,)) for i in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


LATE_S = 8.0  # rank 1's delay in late_peer: past the 3 s timeout its test sets


def barrier(workdir, name, rank, nranks):
    """Every process has reached `name` (a file each in `workdir`)."""
    open(os.path.join(workdir, f"{name}{rank}"), "w").close()
    for r in range(nranks):
        wait_for(os.path.join(workdir, f"{name}{r}"))


def late_peer(lib, rank, nranks, workdir):
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    count = 65_537
    inputs = [np.random.default_rng(31 + r).standard_normal(count).astype(np.float32) for r in range(nranks)]
    send = cp.asarray(inputs[rank])
    recv = cp.full(count, np.nan, np.float32)
    cp.cuda.Device().synchronize()  # the rank's stream does not wait for cupy's
    barrier(workdir, "ready", rank, nranks)  # both contexts made: the init's rounds meet well within the timeout
    comm = ctypes.c_void_p()
    out = {"init": lib.ncclCommInitRank(ctypes.byref(comm), nranks, shared_id(lib, rank, workdir, "id1"), rank)}
    out["backend"] = lib.jax_mscclpp_nccl_backend(comm).decode()
    if rank != 0:
        time.sleep(LATE_S)
    t0 = time.monotonic()
    out["launch"] = lib.ncclAllReduce(send.data.ptr, recv.data.ptr, count, FLOAT32, SUM, comm, stream.ptr)
    # What a client such as PyTorch's watchdog does while it waits: poll the communicator's asynchronous error.
    seen, state = set(), ctypes.c_int(-1)
    deadline = t0 + 120
    while True:
        seen.add((lib.ncclCommGetAsyncError(comm, ctypes.byref(state)), state.value))
        if stream.done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    out["stream_s"] = time.monotonic() - t0
    out["async_errors"] = sorted(seen)
    print("STREAM DONE", flush=True)
    stream.synchronize()
    expected = np.sum(inputs, axis=0, dtype=np.float64).astype(np.float32)
    got = cp.asnumpy(recv)
    out["all_reduce_ok"] = bool(np.allclose(got, expected, rtol=1e-5, atol=1e-5))
    out["nan_outputs"] = int(np.isnan(got).sum())
    out["all_reduce_again"] = all_reduce_checked(lib, comm, rank, nranks, 4099, stream)
    out["async_error_after"] = [lib.ncclCommGetAsyncError(comm, ctypes.byref(state)), state.value]
    out["destroy"] = lib.ncclCommDestroy(comm)
    return out


def main():
    rank, nranks = int(sys.argv[1]), int(sys.argv[2])
    library, workdir, scenario = sys.argv[4], sys.argv[5], sys.argv[6]
    import cupy as cp

    cp.cuda.Device(0).use()
    lib = load(library)
    out = globals()[scenario](lib, rank, nranks, workdir)
    out["rank"] = rank
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
