"""N ranks of jax_mscclpp's libnccl.so.2 in this process, all on GPU 0, through NCCL's C API (ctypes; cupy for
device memory and streams): what tests/gpu/test_nccl_windows.py checks and bench/kernels/nccl_traffic_record.py
measures. The communicators are made in one group (ncclGroupStart, an init per rank, ncclGroupEnd: one thread may
init several ranks); each rank has a stream of its own; a collective is one group of every rank's call, as a client
driving several GPUs from one thread issues it. Window registration is collective and blocks until every rank has
registered: each rank registers from a thread of its own, as a process per rank would, or all from this thread in
one group.

    ranks = NcclRanks(library_path, n)
    windows = ranks.register_windows([buffer_of_rank_0, ...], nbytes)
    ranks.collective("all_reduce", sends, recvs, count, "float32", "sum")
    ranks.synchronize(); ranks.deregister_windows(windows); ranks.close()

Buffers are device addresses (ints). Needs cupy.
"""

from __future__ import annotations

import ctypes
import threading

from tests.gpu._nccl_api_worker import (DTYPE_CODES, NCCL_SUCCESS, NCCL_WIN_COLL_SYMMETRIC, OP_CODES, UniqueId,
                                        call_counts, load_library)

FUNCTIONS = {"all_reduce": "ncclAllReduce", "all_gather": "ncclAllGather", "reduce_scatter": "ncclReduceScatter",
             "all_to_all": "ncclAlltoAll"}


class NcclError(RuntimeError):
    pass


def _declare(lib) -> None:
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    for name, argtypes in {"ncclCommWindowRegister": [P, P, S, ctypes.POINTER(P), I],
                           "ncclCommWindowDeregister": [P, P], "ncclMemAlloc": [ctypes.POINTER(P), S],
                           "ncclMemFree": [P]}.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int


class NcclRanks:
    def __init__(self, library: str, n: int):
        import cupy as cp

        self.lib = load_library(library)
        _declare(self.lib)
        self.cp, self.n = cp, n
        cp.cuda.Device(0).use()
        uid = UniqueId()
        self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        self.comms = [ctypes.c_void_p() for _ in range(n)]
        self.check(self.lib.ncclGroupStart(), "ncclGroupStart")
        for r in range(n):
            self.check(self.lib.ncclCommInitRank(ctypes.byref(self.comms[r]), n, uid, r), f"ncclCommInitRank {r}")
        self.check(self.lib.ncclGroupEnd(), "ncclGroupEnd (the inits)")
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(n)]

    def check(self, result: int, what: str, comm=None) -> None:
        if result != NCCL_SUCCESS:
            text = self.lib.ncclGetLastError(comm)
            raise NcclError(f"{what} returned {result}: {text.decode() if text else ''}")

    def _each_rank(self, work) -> list:
        """work(r) on a thread per rank, all at once; their results, or the first error raised."""
        results, errors = [None] * self.n, []

        def run(r):
            try:
                results[r] = work(r)
            except Exception as error:  # noqa: BLE001 - re-raised below
                errors.append(error)

        threads = [threading.Thread(target=run, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def register_windows(self, buffers: list, nbytes: int, grouped: bool = False,
                         flags: int = NCCL_WIN_COLL_SYMMETRIC) -> list:
        """Every rank's window over its buffer (buffers[r]; a list: a window over each, registered in its order),
        registered with winFlags `flags` (symmetric unless told: the calls pass every rank's buffers at the same
        offsets in the windows): from a thread per rank, or (`grouped`) from this thread in one group, as NCCL lets
        one thread register the windows of several ranks."""
        def register(r):
            self.cp.cuda.Device(0).use()
            made = []
            for buffer in buffers[r] if isinstance(buffers[r], list) else [buffers[r]]:
                window = ctypes.c_void_p()
                self.check(self.lib.ncclCommWindowRegister(self.comms[r], buffer, nbytes, ctypes.byref(window),
                                                           flags),
                           f"ncclCommWindowRegister on rank {r}", self.comms[r])
                made.append(window)
            return made if isinstance(buffers[r], list) else made[0]
        if not grouped:
            return self._each_rank(register)
        self.check(self.lib.ncclGroupStart(), "ncclGroupStart")
        windows = [register(r) for r in range(self.n)]
        self.check(self.lib.ncclGroupEnd(), "ncclGroupEnd (the window registrations)")
        return windows

    def deregister_windows(self, windows: list) -> None:
        for r, made in enumerate(windows):
            for window in made if isinstance(made, list) else [made]:
                self.check(self.lib.ncclCommWindowDeregister(self.comms[r], window), f"ncclCommWindowDeregister {r}",
                           self.comms[r])

    def mem_alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        self.check(self.lib.ncclMemAlloc(ctypes.byref(ptr), nbytes), "ncclMemAlloc")
        return ptr.value

    def mem_free(self, ptr: int) -> None:
        self.check(self.lib.ncclMemFree(ptr), "ncclMemFree")

    def collective(self, name: str, sends: list[int], recvs: list[int], count: int, dtype: str,
                   op: str = "sum") -> None:
        """One call of every rank, in one group; `count` as NCCL counts it (reduce_scatter: recvcount)."""
        function = getattr(self.lib, FUNCTIONS[name])
        self.check(self.lib.ncclGroupStart(), "ncclGroupStart")
        for r in range(self.n):
            args = [sends[r], recvs[r], count, DTYPE_CODES[dtype]]
            if name in ("all_reduce", "reduce_scatter"):
                args.append(OP_CODES[op])
            self.check(function(*args, self.comms[r], self.streams[r].ptr), f"{FUNCTIONS[name]} on rank {r}",
                       self.comms[r])
        self.check(self.lib.ncclGroupEnd(), f"ncclGroupEnd ({FUNCTIONS[name]})")

    def synchronize(self) -> None:
        for s in self.streams:
            s.synchronize()

    def calls(self) -> dict:
        return call_counts(self.lib)

    def close(self) -> None:
        self.synchronize()
        self._each_rank(lambda r: self.check(self.lib.ncclCommDestroy(self.comms[r]), f"ncclCommDestroy {r}"))
