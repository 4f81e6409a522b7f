"""One process of tests/gpu/test_nccl_operations.py: jax_mscclpp's libnccl.so.2 through NCCL's C API (ctypes, no
JAX), in N processes that share GPU 0, where NVIDIA's NCCL refuses to run, so that every operation runs on our
runtime (collective kernels, point-to-point groups, compositions). Device buffers and the stream are cupy's.

Rank 0 makes the id (ncclGetUniqueId) and hands its 128 bytes to the others through a file in WORKDIR; every rank
calls ncclCommInitRank on GPU 0, then runs the cases in batches: every case of a batch allocates and uploads its
buffers (inputs random per rank and seeded, never zero; outputs poisoned: NaN bytes for floats, the complement of
the expected bytes for integers; every buffer followed by a guard that must stay intact), then all of them are
issued on one stream, then one synchronization, then each output is compared with numpy computing NCCL's semantics
(reduce_reference below). Every process rebuilds all ranks' inputs from the seeds, so each checks its own outputs.
A failing case reports the first element that differs and the run goes on with the next one.

Prints one line per case and, last, "RESULT " + JSON {rank, world, seconds, cases: [{name, passed, detail}],
calls: jax_mscclpp_nccl_call_counts() as {function: {column: count}}, destroy}. Exit status 0 when it got that far.

    python tests/gpu/_nccl_api_worker.py PROCESS_ID NUM_PROCESSES PORT LIBRARY WORKDIR

JAX_MSCCLPP_TEST_CASES (a substring, the same in every process) runs only the cases whose name contains it (the
cases of one batch are filtered alike on every rank, so the collectives still pair up).

The module's top level needs numpy and ml_dtypes only: tests/nccl/test_nccl_reference.py checks the reference
semantics on the CPU.
"""

import copy
import ctypes
import json
import os
import sys
import time
import traceback
import zlib

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests.nccl
from tests.nccl._nccl_structs import UniqueId  # noqa: E402,F401  (tests/gpu/_nccl_ranks.py imports it from here)

# ---- NCCL's ABI (nccl/include/jax_mscclpp_nccl/nccl_api.h) ----
NCCL_SUCCESS, NCCL_INVALID_ARGUMENT = 0, 4
DTYPE_CODES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
               "float32": 7, "float64": 8, "bfloat16": 9, "float8_e4m3": 10, "float8_e5m2": 11}
OP_CODES = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
SCALAR_DEVICE, SCALAR_HOST_IMMEDIATE = 0, 1
SIM_INFO_MAGIC = 0x74685283  # NCCL_SIM_INFO_INITIALIZER's
NCCL_VERSION_CODE = 23007
NCCL_WIN_DEFAULT, NCCL_WIN_COLL_SYMMETRIC = 0, 1  # ncclCommWindowRegister's winFlags
NUMPY_DTYPES = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
                "uint64": np.uint64, "float16": np.float16, "float32": np.float32, "float64": np.float64,
                "bfloat16": ml_dtypes.bfloat16, "float8_e4m3": ml_dtypes.float8_e4m3fn,
                "float8_e5m2": ml_dtypes.float8_e5m2}
ALL_DTYPES = list(DTYPE_CODES)

GUARD_BYTES = 64
GUARD_PATTERN = np.frombuffer(bytes(range(0xA0, 0xA0 + GUARD_BYTES)), np.uint8)


# ---- NCCL's semantics in numpy (what the GPU results are compared with) ----

def is_float(name: str) -> bool:
    return name.startswith(("float", "bfloat"))


def accumulator(name: str):
    """The type our fold accumulates in (kernels/collectives/fold.h): float for the 16- and 8-bit floats (one rounding
    at the end), the element type otherwise (integers wrap)."""
    if name == "float64":
        return np.float64
    if is_float(name):
        return np.float32
    return NUMPY_DTYPES[name]


def rank_data(seed: int, rank: int, count: int, name: str) -> np.ndarray:
    """Rank `rank`'s input of a case: random, seeded per (case, rank), no zero element. Integers: +-[1, 100) (wrapped
    into the unsigned types); floats: +-2^[-3, 2), rounded to the type (every product of 4 stays below fp8's max)."""
    rng = np.random.default_rng([seed, rank])
    sign = np.where(rng.random(count) < 0.5, -1, 1)
    if is_float(name):
        return (sign * 2.0 ** rng.uniform(-3, 2, count)).astype(np.float32).astype(NUMPY_DTYPES[name])
    return (sign * rng.integers(1, 100, count)).astype(np.int64).astype(NUMPY_DTYPES[name])


def _truncating_divide(values: np.ndarray, divisor: int) -> np.ndarray:
    """C's integer division (towards zero), in the values' type."""
    if np.issubdtype(values.dtype, np.unsignedinteger):
        return values // values.dtype.type(divisor)
    wide = values.astype(np.int64)
    return (np.sign(wide) * (np.abs(wide) // divisor)).astype(values.dtype)


def reduce_reference(blocks: list, name: str, op: str, scalar=None) -> np.ndarray:
    """NCCL's reduction `op` of one block per rank (rank order), as our fold computes it: a left fold in rank order in
    accumulator(name), narrowed once. avg: floats sum x * (1 / n) (NCCL's pre-multiplied average, the factor
    rounded to the accumulator), integers the (wrapping) sum divided by n towards zero. premulsum: the sum of
    x * scalar[q] over the blocks q (each rank's own factor, of the element type; one scalar: every rank's), each
    product rounded to the element type (NCCL's pre-operation, made by the rank that contributes it)."""
    dtype, acc_type, n = NUMPY_DTYPES[name], accumulator(name), len(blocks)
    with np.errstate(over="ignore", invalid="ignore"):
        terms = [np.asarray(b, dtype).astype(acc_type) for b in blocks]
        if op == "premulsum":
            factors = np.broadcast_to(np.asarray(scalar, dtype), (n,)).astype(acc_type)
            terms = [(t * f).astype(dtype).astype(acc_type) for t, f in zip(terms, factors)]
        elif op == "avg" and is_float(name):
            factor = acc_type(1.0 / n)
            terms = [t * factor for t in terms]
        acc = terms[0].copy()
        for t in terms[1:]:
            if op in ("sum", "avg", "premulsum"):
                acc = acc + t
            elif op == "prod":
                acc = acc * t
            elif op == "max":
                acc = np.maximum(acc, t)
            elif op == "min":
                acc = np.minimum(acc, t)
            else:
                raise ValueError(op)
        if op == "avg" and not is_float(name):
            acc = _truncating_divide(acc, n)
        return acc.astype(dtype)


def tolerance(blocks: list, name: str, op: str, scalar=None, want=None):
    """Per element, how far a GPU result may be from reduce_reference's (`want`, computed when not given); None: it
    must be exact (integers, max, min). One unit in the last place of the result (a fused multiply-add may round
    once differently), the accumulation's rounding (n + 1 roundings of the accumulator over the operands'
    magnitudes: a sum of 16-bit floats may run on a collective kernel that adds in the element type), and the
    smallest subnormal (results near zero)."""
    if not is_float(name) or op in ("max", "min"):
        return None
    dtype, n = NUMPY_DTYPES[name], len(blocks)
    finfo = ml_dtypes.finfo(dtype)
    summed_in_element_type = op == "sum" and name in ("float16", "bfloat16")
    acc_eps = float(finfo.eps if summed_in_element_type else ml_dtypes.finfo(accumulator(name)).eps)
    wide = [np.asarray(b, dtype).astype(np.float64) for b in blocks]
    if op == "prod":
        scale = np.abs(np.prod(wide, axis=0))
    else:
        factor = 1.0
        if op == "avg":
            factor = 1.0 / n
        factors = [factor] * n
        if op == "premulsum":
            factors = np.broadcast_to(np.asarray(scalar, dtype), (n,)).astype(np.float64)
        scale = np.sum([np.abs(v * f) for v, f in zip(wide, factors)], axis=0)
    if want is None:
        want = reduce_reference(blocks, name, op, scalar)
    magnitude = np.abs(np.asarray(want).astype(np.float64))
    return float(finfo.eps) * magnitude + (n + 1) * acc_eps * scale + float(finfo.smallest_subnormal)


def _unsigned_view(values: np.ndarray) -> np.ndarray:
    return values.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[values.dtype.itemsize])


def compare(got: np.ndarray, want: np.ndarray, tol=None) -> str | None:
    """None when `got` matches `want` (bit for bit where tol is None, else within tol per element); otherwise what
    differs: how many elements, the first index, expected and got there."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/type {got.shape} {got.dtype}, expected {want.shape} {want.dtype}"
    if got.size == 0:
        return None
    if tol is None:
        bad = _unsigned_view(got) != _unsigned_view(want)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(g - w) <= tol)
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    shown = (lambda v: float(v)) if np.issubdtype(got.dtype, np.floating) or is_float(str(got.dtype)) else int
    text = f"{int(bad.sum())} of {got.size} elements differ; first at [{i}]: expected {shown(want[i])!r}, " \
           f"got {shown(got[i])!r}"
    if tol is not None:
        text += f" (tolerance {float(tol[i]):.3g})"
    return text


def poison_for(want: np.ndarray) -> np.ndarray:
    """Bytes an output holds before its operation, never equal to the result: NaN in every float type (0xFF bytes),
    the complement of the expected bytes for integers."""
    if is_float(str(want.dtype)) or np.issubdtype(want.dtype, np.floating):
        return np.full(want.nbytes, 0xFF, np.uint8)
    return ~np.ascontiguousarray(want).view(np.uint8).reshape(-1)


def alltoallv_counts(seed: int, n: int) -> np.ndarray:
    """counts[s][d]: elements rank s sends to rank d, random and unequal, about a quarter of them 0 (rank 0 sends none
    to the last rank, and rank 1 none to itself), the same on every rank."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 5000, (n, n))
    counts[rng.random((n, n)) < 0.25] = 0
    counts[0, n - 1] = 0
    counts[1, 1] = 0
    return counts


# ---- the library and the device ----

class SimInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("estimatedTime", ctypes.c_float)]


def load_library(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    signatures = {
        "ncclGetUniqueId": [ctypes.POINTER(UniqueId)],
        "ncclCommInitRank": [ctypes.POINTER(P), I, UniqueId, I],
        "ncclCommDestroy": [P],
        "ncclCommSplit": [P, I, I, ctypes.POINTER(P), P],
        "ncclCommCount": [P, ctypes.POINTER(I)],
        "ncclCommUserRank": [P, ctypes.POINTER(I)],
        "ncclCommCuDevice": [P, ctypes.POINTER(I)],
        "ncclCommGetAsyncError": [P, ctypes.POINTER(I)],
        "ncclAllReduce": [P, P, S, I, I, P, P],
        "ncclReduceScatter": [P, P, S, I, I, P, P],
        "ncclAllGather": [P, P, S, I, P, P],
        "ncclAlltoAll": [P, P, S, I, P, P],
        "ncclReduce": [P, P, S, I, I, I, P, P],
        "ncclBroadcast": [P, P, S, I, I, P, P],
        "ncclBcast": [P, S, I, I, P, P],
        "ncclGather": [P, P, S, I, I, P, P],
        "ncclScatter": [P, P, S, I, I, P, P],
        "ncclSend": [P, S, I, I, P, P],
        "ncclRecv": [P, S, I, I, P, P],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
        "ncclGroupSimulateEnd": [ctypes.POINTER(SimInfo)],
        "ncclRedOpCreatePreMulSum": [ctypes.POINTER(I), P, I, I, P],
        "ncclRedOpDestroy": [I, P],
        "ncclGetErrorString": [I],
        "ncclGetLastError": [P],
        "jax_mscclpp_nccl_call_counts": [],
        "jax_mscclpp_nccl_runtime_enabled": [],
        "jax_mscclpp_nccl_group_depth": [],
        "jax_mscclpp_nccl_in_place_between_processes": [P, ctypes.POINTER(ctypes.c_ulonglong),
                                                        ctypes.POINTER(ctypes.c_ulonglong)],
        "ncclCommWindowRegister": [P, P, S, ctypes.POINTER(P), I],
        "ncclCommWindowDeregister": [P, P],
        "ncclCommRegister": [P, P, S, ctypes.POINTER(P)],
        "ncclCommDeregister": [P, P],
        "ncclMemAlloc": [ctypes.POINTER(P), S],
        "ncclMemFree": [P],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_char_p if name in ("ncclGetErrorString", "ncclGetLastError",
                                                        "jax_mscclpp_nccl_call_counts",
                                                        "jax_mscclpp_nccl_in_place_between_processes") else ctypes.c_int
    return lib


def call_counts(lib) -> dict:
    counts: dict = {}
    for line in (lib.jax_mscclpp_nccl_call_counts() or b"").decode().splitlines():
        function, column, calls = line.split()
        counts.setdefault(function, {})[column] = int(calls)
    return counts


class Buffer:
    """Device bytes followed by a guard: `content` (bytes, uploaded with the guard in one stream-ordered copy), in
    cupy's memory (cudaMalloc), or in ncclMemAlloc's (`nccl_memory`: freed with the world's windows); cupy's at
    `offset` bytes into its allocation where that is > 0 (a range inside an allocation, as a pool hands out)."""

    def __init__(self, world, content: np.ndarray, nccl_memory: bool = False, offset: int = 0):
        cp = world.cp
        host = np.concatenate([np.ascontiguousarray(content).view(np.uint8).reshape(-1), GUARD_PATTERN])
        self.nbytes = host.size - GUARD_BYTES
        self.host = host  # kept until the batch is synchronized (pageable copies may still read it)
        if nccl_memory:
            ptr = ctypes.c_void_p()
            result = world.lib.ncclMemAlloc(ctypes.byref(ptr), host.size)
            if result != NCCL_SUCCESS:
                raise RuntimeError(f"ncclMemAlloc returned {result}")
            world.nccl_allocations.append(ptr.value)
            memory = cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr.value, host.size, None), 0)
            self.dev = cp.ndarray(host.size, dtype=cp.uint8, memptr=memory)
        else:
            self.dev = cp.empty(offset + host.size, dtype=cp.uint8)[offset:]
        self.dev.set(host, stream=world.stream)

    @property
    def ptr(self) -> int:
        return self.dev.data.ptr

    def read(self) -> tuple:
        """(content bytes, whether the guard is intact), after the stream is synchronized."""
        data = self.dev.get()
        return data[:self.nbytes], bool(np.array_equal(data[self.nbytes:], GUARD_PATTERN))


class Case:
    """One case of a batch: its buffers, the calls it makes and what each must return, the outputs to compare."""

    def __init__(self, world, name: str):
        self.world, self.name = world, name
        self.problems: list = []
        self.outputs: list = []
        self.buffers: list = []
        self.keep: list = []
        self.launch = None

    def buffer(self, content: np.ndarray, nccl_memory: bool = False, offset: int = 0) -> Buffer:
        b = Buffer(self.world, content, nccl_memory, offset)
        self.buffers.append(b)
        return b

    def window(self, b: Buffer):
        """Registers `b` (its guard included) as a symmetric window of the communicator (NCCL_WIN_COLL_SYMMETRIC:
        every rank's buffer is its whole window, so calls pass them at the same offsets): collective, so every
        rank's case registers its windows in the same order; deregistered after the batch (World.release_windows)."""
        w = self.world
        handle = ctypes.c_void_p()
        self.returned("ncclCommWindowRegister", w.lib.ncclCommWindowRegister(w.comm, b.ptr, b.nbytes + GUARD_BYTES,
                                                                             ctypes.byref(handle),
                                                                             NCCL_WIN_COLL_SYMMETRIC))
        w.windows.append(handle)

    def register(self, b: Buffer):
        """Registers `b` with the communicator (ncclCommRegister: local to the rank; every rank registers the buffers
        of a call, as NCCL requires); deregistered after the batch (World.release_windows)."""
        w = self.world
        handle = ctypes.c_void_p()
        self.returned("ncclCommRegister", w.lib.ncclCommRegister(w.comm, b.ptr, b.nbytes, ctypes.byref(handle)))
        w.registrations.append(handle)

    def output(self, label: str, want: np.ndarray, tol=None, buffer: Buffer | None = None,
               nccl_memory: bool = False) -> Buffer:
        """A poisoned output (or `buffer`, an in-place one) that must hold `want` after the batch."""
        b = buffer if buffer is not None else self.buffer(poison_for(want), nccl_memory)
        self.outputs.append((label, b, want, tol))
        return b

    def untouched(self, label: str, buffer: Buffer, content: np.ndarray):
        """`buffer` must still hold `content` (bit for bit) after the batch."""
        self.outputs.append((label, buffer, np.ascontiguousarray(content).view(np.uint8).reshape(-1), None))

    def returned(self, what: str, result: int, expected: int = NCCL_SUCCESS, text_has: str | None = None):
        if result != expected:
            self.problems.append(f"{what} returned {result} ({self.world.error_text(result)}), expected {expected}")
        elif text_has is not None:
            last = self.world.last_error()
            if text_has not in last:
                self.problems.append(f"{what}: ncclGetLastError {last!r} does not mention {text_has!r}")

    def verify(self):
        for label, b, want, tol in self.outputs:
            data, guard_ok = b.read()
            got = data.view(want.dtype) if want.dtype != np.uint8 else data
            if got.size != want.size:
                self.problems.append(f"{label}: {got.size} elements, expected {want.size}")
                continue
            differs = compare(got, want, tol)
            if differs:
                self.problems.append(f"{label}: {differs}")
            if not guard_ok:
                self.problems.append(f"{label}: the bytes after the output were written")


class World:
    """This rank: the library, the communicator, the stream, the inputs of every rank of the batch's cases."""

    def __init__(self, lib, cp, rank: int, n: int, comm, stream):
        self.lib, self.cp, self.rank, self.n, self.comm, self.stream = lib, cp, rank, n, comm, stream
        self.s = stream.ptr
        self._inputs: dict = {}
        self.windows: list = []  # registered by the batch's cases (Case.window)
        self.registrations: list = []  # ncclCommRegister's handles of the batch's cases (Case.register)
        self.nccl_allocations: list = []  # ncclMemAlloc's memory of the batch's buffers

    def release_windows(self):
        """After the batch: its windows deregistered, its ncclMemAlloc memory freed (the buffers are no longer used)."""
        problems = []
        for handle in self.windows:
            if self.lib.ncclCommWindowDeregister(self.comm, handle) != NCCL_SUCCESS:
                problems.append(f"ncclCommWindowDeregister: {self.last_error()}")
        for handle in self.registrations:
            if self.lib.ncclCommDeregister(self.comm, handle) != NCCL_SUCCESS:
                problems.append(f"ncclCommDeregister: {self.last_error()}")
        self.registrations.clear()
        for ptr in self.nccl_allocations:
            if self.lib.ncclMemFree(ptr) != NCCL_SUCCESS:
                problems.append(f"ncclMemFree: {self.last_error()}")
        self.windows.clear()
        self.nccl_allocations.clear()
        return problems

    def inputs(self, tag: str, count: int, name: str) -> list:
        key = (tag, count, name)
        if key not in self._inputs:
            seed = zlib.crc32(f"{tag}/{count}/{name}".encode())
            self._inputs[key] = [rank_data(seed, r, count, name) for r in range(self.n)]
        return self._inputs[key]

    def clear(self):
        self._inputs.clear()

    def error_text(self, result: int) -> str:
        text = self.lib.ncclGetErrorString(result)
        return text.decode() if text else "?"

    def last_error(self) -> str:
        text = self.lib.ncclGetLastError(self.comm)
        return text.decode() if text else ""


# ---- the cases: each a (name, build) pair; build(case, world) uploads and returns the function that issues ----

def _all_reduce(tag, name, op, count, in_place, title=""):
    def build(c, w):
        blocks = w.inputs(tag, count, name)
        want = reduce_reference(blocks, name, op)
        tol = tolerance(blocks, name, op, want=want)
        send = c.buffer(blocks[w.rank])
        out = c.output("result", want, tol, buffer=send if in_place else None)
        return lambda: c.returned("ncclAllReduce", w.lib.ncclAllReduce(send.ptr, out.ptr, count, DTYPE_CODES[name],
                                                                       OP_CODES[op], w.comm, w.s))
    return title or f"all_reduce {name} {op} count={count} {'in place' if in_place else 'out of place'}", build


WINDOW_CASE = "in windows"


def _call_on_own_buffers(tag, collective, name, op, count, nccl_memory, offset, register):
    """The build of a call whose input and output are this rank's buffers registered by `register(c, w, send, out)`
    (`offset` bytes into their allocations), with its reference result: an all-reduce, reduce-scatter, all-gather
    or all-to-all of `count` elements a block of `w.inputs(tag, ...)`."""
    def build(c, w):
        n = w.n
        per_rank = collective in ("reduce_scatter", "all_to_all")
        blocks = w.inputs(tag, n * count if per_rank else count, name)
        if collective == "all_reduce":
            want, tol = reduce_reference(blocks, name, op), tolerance(blocks, name, op)
        elif collective == "reduce_scatter":
            mine = [b[w.rank * count:(w.rank + 1) * count] for b in blocks]
            want, tol = reduce_reference(mine, name, op), tolerance(mine, name, op)
        elif collective == "all_gather":
            want, tol = np.concatenate(blocks), None
        else:
            want, tol = np.concatenate([b[w.rank * count:(w.rank + 1) * count] for b in blocks]), None
        send = c.buffer(blocks[w.rank], nccl_memory, offset)
        out = c.output("result", want, tol, buffer=c.buffer(poison_for(want), nccl_memory, offset))
        register(c, w, send, out)
        code = DTYPE_CODES[name]
        if collective in ("all_reduce", "reduce_scatter"):
            function = {"all_reduce": w.lib.ncclAllReduce, "reduce_scatter": w.lib.ncclReduceScatter}[collective]
            return lambda: c.returned(collective, function(send.ptr, out.ptr, count, code, OP_CODES[op], w.comm, w.s))
        function = {"all_gather": w.lib.ncclAllGather, "all_to_all": w.lib.ncclAlltoAll}[collective]
        return lambda: c.returned(collective, function(send.ptr, out.ptr, count, code, w.comm, w.s))
    return build


def _registered(collective, name, op, count, nccl_memory):
    """A call whose input and output every rank registered (ncclCommRegister), large enough for the selection to
    stream it: in place on the buffers where they are, each process's cudaMalloc allocations mapped by the others
    through CUDA IPC (runtime/gpu/allocation_exchange.h); the table's algorithm through scratch where one cannot be
    (ncclMemAlloc's cuMem memory between processes); the same results either way."""
    def register(c, w, send, out):
        c.register(send)
        c.register(out)
    memory = "ncclMemAlloc" if nccl_memory else "cudaMalloc"
    return (f"{collective} {name} {op} count={count} {REGISTERED_CASE} of {memory} memory",
            _call_on_own_buffers(f"reg-{collective}", collective, name, op, count, nccl_memory, 0, register))


# The registered cases: (collective, dtype, op, elements of a block, in ncclMemAlloc's memory); 4 MiB and more a rank,
# which the selection streams on 2, 3 and 4 ranks sharing a GPU, so that those of cudaMalloc memory run in place.
REGISTERED_CASE = "in registered buffers"
REGISTERED_CASES = [("all_reduce", "float32", "sum", (1 << 20) + 7, False),
                    ("all_reduce", "bfloat16", "max", (2 << 20) + 5, False),
                    ("reduce_scatter", "float32", "sum", (1 << 20) + 3, False),
                    ("all_gather", "int32", "sum", (1 << 20) + 1, False),
                    ("all_reduce", "float32", "sum", (1 << 20) + 7, True)]


def registered_batch():
    return [_registered(*case) for case in REGISTERED_CASES]


def _windowed(collective, name, op, count, nccl_memory, grouped=False):
    """A call whose input and output are windows of every rank: in place where every rank maps every other's window
    (cupy's cudaMalloc memory, through CUDA IPC); ncclMemAlloc's cuMem memory between processes in place through the
    ranks' per-call agreement (file descriptors) where the in-place rule takes the size, else the table's algorithm;
    the same results either way. `grouped`: the two windows registered in one group, as
    nccl-tests -R 2 registers them (each registration collective: a rank's two pair up with its peers' in order),
    by the group's thread for the communicator (which has made no CUDA call before), and each window 4 KiB into its
    allocation (a peer maps the allocation and adds the window's offset: an offset taken as 0 reads the wrong
    bytes)."""
    def register(c, w, send, out):
        if grouped:
            c.returned("ncclGroupStart", w.lib.ncclGroupStart())
        c.window(send)
        c.window(out)
        if grouped:
            c.returned("ncclGroupEnd", w.lib.ncclGroupEnd())
    memory = "ncclMemAlloc" if nccl_memory else "cudaMalloc"
    offset = 4096 if grouped and not nccl_memory else 0
    return (f"{collective} {name} {op} count={count} {WINDOW_CASE} of {memory} memory"
            + (", registered in a group" if grouped else ""),
            _call_on_own_buffers(f"win-{collective}", collective, name, op, count, nccl_memory, offset, register))



# The calls of the window cases.
WINDOW_CALLS = [("all_reduce", "float32", "sum", 65541), ("all_reduce", "bfloat16", "max", 1023),
                ("reduce_scatter", "int32", "sum", 4099), ("all_gather", "float16", "sum", 3),
                ("all_to_all", "int8", "sum", 1027)]


# The window cases: (call, in ncclMemAlloc's memory, registered in a group); those of cudaMalloc memory run in place.
WINDOW_CASES = ([(call, False, False) for call in WINDOW_CALLS] + [(call, True, False) for call in WINDOW_CALLS[:2]] +
                [(WINDOW_CALLS[0], nccl_memory, True) for nccl_memory in (False, True)])


def window_batch():
    return [_windowed(*call, nccl_memory=nccl_memory, grouped=grouped) for call, nccl_memory, grouped in WINDOW_CASES]


def all_reduce_batches():
    batches = []
    for name in ALL_DTYPES:
        batches.append([_all_reduce("ar", name, op, count, in_place) for op in OP_CODES for count in (1, 3, 1023, 65541)
                        for in_place in (False, True)])
    big = 4 * 1024 * 1024 + 7  # past the 16 MiB staging buffer: composed reductions run in pieces
    batches.append([_all_reduce("ar-big", "float32", op, big, in_place) for op in ("sum", "prod")
                    for in_place in (False, True)])
    return batches


def rank_factors(scalar, n: int, dtype) -> np.ndarray:
    """The pre-multiplied sums' factor of each rank: `scalar` times 1, -2, 3, ... (ranks pass different factors, as
    nccl-tests' do), in the element type."""
    values = [scalar * (r + 1) * (-1) ** r for r in range(n)]
    if np.issubdtype(np.dtype(dtype), np.integer):
        return np.array(values, np.int64).astype(dtype)  # wraps into the unsigned types
    return np.array(values, np.float64).astype(dtype)


def _premulsum(function, name, residence, scalars, count, root=0):
    """ncclRedOpCreatePreMulSum of each rank's own factor (rank_factors of scalars[0]), a `function` (ncclAllReduce,
    ncclReduceScatter, ncclReduce to `root`) with it; for a device scalar, the scalar is then changed on the stream
    to rank_factors of scalars[1] and a second call must use the new values; for a host-immediate one, the host
    variable changes after creation and the op must keep the first value. Then destroyed: destroying it again, and
    using it, are ncclInvalidArgument."""
    def build(c, w):
        dtype, code = NUMPY_DTYPES[name], DTYPE_CODES[name]
        scatters = function == "ncclReduceScatter"
        blocks = w.inputs(f"pms-{function}-{residence}", w.n * count if scatters else count, name)
        mine = [b[w.rank * count:(w.rank + 1) * count] for b in blocks] if scatters else blocks
        used = scalars if residence == SCALAR_DEVICE else scalars[:1]  # a host-immediate op keeps the first
        send = c.buffer(blocks[w.rank])
        gets_result = function != "ncclReduce" or w.rank == root
        outs = []
        for s in used:
            factors = rank_factors(s, w.n, dtype)
            if gets_result:
                want = reduce_reference(mine, name, "premulsum", factors)
                outs.append(c.output(f"with factors {factors.tolist()}", want,
                                     tolerance(mine, name, "premulsum", factors, want)))
            else:
                outs.append(c.buffer(np.zeros(1, np.uint8)))
        refused = c.buffer(np.zeros(count, dtype))
        c.untouched("the output of the call with the destroyed op", refused, np.zeros(count, dtype))
        c.untouched("input", send, blocks[w.rank])
        host_scalar = rank_factors(scalars[0], w.n, dtype)[w.rank:w.rank + 1].copy()
        device_scalar = c.buffer(host_scalar) if residence == SCALAR_DEVICE else None
        next_scalar = (c.buffer(rank_factors(scalars[1], w.n, dtype)[w.rank:w.rank + 1].copy())
                       if residence == SCALAR_DEVICE else None)
        c.keep.append(host_scalar)

        def call(op, out):
            if function == "ncclAllReduce":
                return w.lib.ncclAllReduce(send.ptr, out.ptr, count, code, op, w.comm, w.s)
            if function == "ncclReduceScatter":
                return w.lib.ncclReduceScatter(send.ptr, out.ptr, count, code, op, w.comm, w.s)
            return w.lib.ncclReduce(send.ptr, out.ptr, count, code, op, root, w.comm, w.s)

        def launch():
            op = ctypes.c_int(-1)
            where = device_scalar.ptr if device_scalar is not None else host_scalar.ctypes.data
            c.returned("ncclRedOpCreatePreMulSum", w.lib.ncclRedOpCreatePreMulSum(
                ctypes.byref(op), where, code, residence, w.comm))
            if op.value < len(OP_CODES):
                c.problems.append(f"the op made is {op.value}, not one from ncclNumOps up")
            host_scalar[0] = dtype(scalars[1])  # a host-immediate scalar was read at creation
            c.returned(f"{function} with it", call(op.value, outs[0]))
            if residence == SCALAR_DEVICE:
                device_scalar.dev.data.copy_from_device_async(next_scalar.dev.data, dtype(0).nbytes, w.stream)
                c.returned(f"{function} after the device scalar changed", call(op.value, outs[1]))
            c.returned("ncclRedOpDestroy", w.lib.ncclRedOpDestroy(op.value, w.comm))
            c.returned("ncclRedOpDestroy again", w.lib.ncclRedOpDestroy(op.value, w.comm), NCCL_INVALID_ARGUMENT)
            c.returned(f"{function} with the destroyed op", call(op.value, refused), NCCL_INVALID_ARGUMENT)
        return launch
    kind = "device scalar" if residence == SCALAR_DEVICE else "host-immediate scalar"
    where = f" root={root}" if function == "ncclReduce" else ""
    return f"premulsum {function} {name} {kind} count={count}{where}", build


def premulsum_batch(n):
    cases = []
    for function in ("ncclAllReduce", "ncclReduceScatter", "ncclReduce"):
        cases += [_premulsum(function, "float32", SCALAR_HOST_IMMEDIATE, (0.37, 99.0), 1023),
                  _premulsum(function, "int32", SCALAR_HOST_IMMEDIATE, (3, -7), 1023),
                  _premulsum(function, "int8", SCALAR_HOST_IMMEDIATE, (3, -7), 1021, root=n - 1),
                  _premulsum(function, "uint8", SCALAR_DEVICE, (5, 2), 257),
                  _premulsum(function, "bfloat16", SCALAR_HOST_IMMEDIATE, (0.75, 1.5), 65541),
                  _premulsum(function, "float8_e4m3", SCALAR_HOST_IMMEDIATE, (0.5, 1.0), 1023),
                  _premulsum(function, "float16", SCALAR_DEVICE, (-1.25, 0.75), 1023),
                  _premulsum(function, "float16", SCALAR_DEVICE, (0.5, -2.0), 3)]
    return cases


def _reduce_scatter(name, op, count):
    def build(c, w):
        blocks = w.inputs("rs", w.n * count, name)
        mine = [b[w.rank * count:(w.rank + 1) * count] for b in blocks]
        send = c.buffer(blocks[w.rank])
        out = c.output("result", reduce_reference(mine, name, op), tolerance(mine, name, op))
        return lambda: c.returned("ncclReduceScatter", w.lib.ncclReduceScatter(
            send.ptr, out.ptr, count, DTYPE_CODES[name], OP_CODES[op], w.comm, w.s))
    return f"reduce_scatter {name} {op} count={count}", build


def _reduce(name, op, count, root, in_place):
    def build(c, w):
        blocks = w.inputs("reduce", count, name)
        send = c.buffer(blocks[w.rank])
        if w.rank == root:
            want = reduce_reference(blocks, name, op)
            out = c.output("result at the root", want, tolerance(blocks, name, op, want=want),
                           buffer=send if in_place else None)
        else:
            out = send if in_place else c.buffer(np.zeros(1, np.uint8))
        if w.rank != root or not in_place:
            c.untouched("input", send, blocks[w.rank])
        return lambda: c.returned("ncclReduce", w.lib.ncclReduce(send.ptr, out.ptr, count, DTYPE_CODES[name],
                                                                 OP_CODES[op], root, w.comm, w.s))
    return f"reduce {name} {op} count={count} root={root}{' in place' if in_place else ''}", build


def reduction_batches(n):
    names, ops = ("float32", "bfloat16", "int64", "float8_e4m3"), ("sum", "prod", "min", "avg")
    batches = [[_reduce_scatter(name, op, count) for name in names for op in ops for count in (1, 1023, 65541)]]
    for name in names:
        batches.append([_reduce(name, op, count, root, False) for op in ops for count in (3, 65541)
                        for root in range(n)] + [_reduce(name, "sum", 1023, root, True) for root in range(n)])
    return batches


def _rooted(function, name, count, root):
    """ncclBroadcast, ncclBcast (in place), ncclGather, ncclScatter from `root`."""
    def build(c, w):
        code, n = DTYPE_CODES[name], w.n
        if function in ("ncclBroadcast", "ncclBcast"):
            data = w.inputs("bcast", count, name)
            if function == "ncclBroadcast":
                send = c.buffer(data[w.rank])
                out = c.output("result", data[root])
                c.untouched("input", send, data[w.rank])
                return lambda: c.returned(function, w.lib.ncclBroadcast(send.ptr, out.ptr, count, code, root, w.comm,
                                                                        w.s))
            buf = c.buffer(data[root] if w.rank == root else poison_for(data[root]))
            c.output("result", data[root], buffer=buf)
            return lambda: c.returned(function, w.lib.ncclBcast(buf.ptr, count, code, root, w.comm, w.s))
        if function == "ncclGather":
            data = w.inputs("gather", count, name)
            send = c.buffer(data[w.rank])
            out = c.output("result at the root", np.concatenate(data)) if w.rank == root else \
                c.buffer(np.zeros(1, np.uint8))
            c.untouched("input", send, data[w.rank])
            return lambda: c.returned(function, w.lib.ncclGather(send.ptr, out.ptr, count, code, root, w.comm, w.s))
        data = w.inputs("scatter", n * count, name)  # ncclScatter: the root's blocks
        send = c.buffer(data[root] if w.rank == root else np.zeros(1, np.uint8))
        out = c.output("result", data[root][w.rank * count:(w.rank + 1) * count])
        return lambda: c.returned(function, w.lib.ncclScatter(send.ptr, out.ptr, count, code, root, w.comm, w.s))
    return f"{function} {name} count={count} root={root}", build


def rooted_batches(n):
    return [[_rooted(f, name, count, root) for f in ("ncclBroadcast", "ncclBcast", "ncclGather", "ncclScatter")
             for count in (0, 1, 1023, 65541) for root in range(n)] for name in ("int8", "float64")]


def _all_gather(name, count):
    def build(c, w):
        data = w.inputs("ag", count, name)
        send = c.buffer(data[w.rank])
        out = c.output("result", np.concatenate(data))
        return lambda: c.returned("ncclAllGather", w.lib.ncclAllGather(send.ptr, out.ptr, count, DTYPE_CODES[name],
                                                                       w.comm, w.s))
    return f"all_gather {name} count={count}", build


def _all_to_all(name, count, in_place):
    def build(c, w):
        data = w.inputs("a2a", w.n * count, name)
        want = np.concatenate([d[w.rank * count:(w.rank + 1) * count] for d in data])
        send = c.buffer(data[w.rank])
        out = c.output("result", want, buffer=send if in_place else None)
        return lambda: c.returned("ncclAlltoAll", w.lib.ncclAlltoAll(send.ptr, out.ptr, count, DTYPE_CODES[name],
                                                                     w.comm, w.s))
    return f"all_to_all {name} count={count}{' in place' if in_place else ''}", build


def gather_batch():
    return ([_all_gather(name, count) for name in ("float16", "int8") for count in (1, 3, 1023, 65541)] +
            [_all_to_all(name, count, in_place) for name in ("float16", "int8") for count in (1, 3, 1023, 16411)
             for in_place in (False, True)])


# Point-to-point: `messages` per rank as lists of ("send" | "recv", peer, data-or-expected); each case's data is
# rank_data of (tag, sender, receiver, index).

def _message(w, tag, sender, receiver, index, count, name):
    """The data of the index-th message of `tag` from `sender` to `receiver` (what both ranks compute)."""
    return rank_data(zlib.crc32(f"{tag}/{sender}->{receiver}#{index}".encode()), sender, count, name)


class P2P:
    """This rank's messages of a case, uploaded; issue() calls ncclSend / ncclRecv in the order they were added."""

    def __init__(self, c, w, name, label=""):
        self.c, self.w, self.name, self.label, self.calls = c, w, name, label, []

    def send(self, peer, data):
        b = self.c.buffer(data)
        self.c.untouched(f"{self.label}send buffer to {peer}", b, data)
        self.calls.append(("ncclSend", b, data.size, peer))

    def recv(self, peer, want):
        b = self.c.output(f"{self.label}receive #{sum(1 for f, *_ in self.calls if f == 'ncclRecv')} from {peer}",
                          want)
        self.calls.append(("ncclRecv", b, want.size, peer))

    def issue(self):
        lib, w, code = self.w.lib, self.w, DTYPE_CODES[self.name]
        for function, b, count, peer in self.calls:
            result = getattr(lib, function)(b.ptr, count, code, peer, w.comm, w.s)
            self.c.returned(f"{function} peer={peer} count={count}", result)

    def grouped(self):
        w = self.w
        self.c.returned("ncclGroupStart", w.lib.ncclGroupStart())
        self.issue()
        self.c.returned("ncclGroupEnd", w.lib.ncclGroupEnd())


def _p2p_case(title, name, plan, grouped=True, idle_ranks_group=False):
    """plan(w) -> this rank's [("send"|"recv", peer, count, index)]; data of message (sender, receiver, index)."""
    def build(c, w):
        p = P2P(c, w, name)
        steps = plan(w)
        for kind, peer, count, index in steps:
            if kind == "send":
                p.send(peer, _message(w, title, w.rank, peer, index, count, name))
            else:
                p.recv(peer, _message(w, title, peer, w.rank, index, count, name))
        if not steps and not idle_ranks_group:
            return lambda: None  # this rank makes no call at all
        return p.grouped if grouped else p.issue
    return title, build


def p2p_batch(n):
    nxt = lambda w: (w.rank + 1) % w.n
    prv = lambda w: (w.rank - 1) % w.n

    def ring(w):
        return [("send", nxt(w), 4099, 0), ("recv", prv(w), 4099, 0)]

    def both_directions(w):
        if w.rank > 1:
            return []
        other = 1 - w.rank
        return [("send", other, 1001 + 2000 * w.rank, 0), ("recv", other, 1001 + 2000 * other, 0)]

    def several_to_one_peer(w):  # 1, 3, 70000 and 3 MiB bytes from rank 0 to rank 1, received in order
        sizes = (1, 3, 70000, 3 << 20)
        if w.rank == 0:
            return [("send", 1, size, i) for i, size in enumerate(sizes)]
        if w.rank == 1:
            return [("recv", 0, size, i) for i, size in enumerate(sizes)]
        return []

    def alltoallv(w):
        counts = alltoallv_counts(zlib.crc32(b"alltoallv") + w.n, w.n)
        return ([("send", d, int(counts[w.rank, d]), 0) for d in range(w.n)] +
                [("recv", s, int(counts[s, w.rank]), 0) for s in range(w.n)])

    def with_self(w):
        return [("send", w.rank, 777, 0), ("send", nxt(w), 555, 0), ("recv", w.rank, 777, 0), ("recv", prv(w), 555, 0)]

    def idle_others(w):  # ranks 2.. make no call at all while 0 and 1 exchange 1 MiB each way, twice
        if w.rank > 1:
            return []
        other = 1 - w.rank
        return [("send", other, 1 << 18, 0), ("recv", other, 1 << 18, 0), ("send", other, 3, 1), ("recv", other, 3, 1)]

    def ungrouped(w):  # rank 0 sends then receives; rank 1 receives first
        if w.rank == 0:
            return [("send", 1, 70001, 0), ("recv", 1, 333, 0)]
        if w.rank == 1:
            return [("recv", 0, 70001, 0), ("send", 0, 333, 0)]
        return []

    cases = [
        _p2p_case("p2p ring in one group", "float32", ring),
        _p2p_case("p2p both directions between 0 and 1 in one group (others: an empty group)", "int32",
                  both_directions, idle_ranks_group=True),
        _p2p_case("p2p 1, 3, 70000, 3 MiB bytes to one peer in one group", "int8", several_to_one_peer),
        _p2p_case("p2p all-to-all-v (unequal counts, 0 included) in one group", "float16", alltoallv),
        _p2p_case("p2p a rank sends to itself inside a group", "float64", with_self),
        _p2p_case("p2p ungrouped send / recv between 0 and 1 (rank 1 receives first)", "float64", ungrouped,
                  grouped=False),
        _p2p_case("p2p ranks 2.. make no call while 0 and 1 exchange", "uint8", idle_others),
        _all_reduce("after-idle", "float32", "sum", 1023, False, "all_reduce after ranks 2.. made no call"),
    ]
    return [cases, [_fifty_groups(), _mixed_group()]]


def _fifty_groups():
    def build(c, w):
        nxt, prv = (w.rank + 1) % w.n, (w.rank - 1) % w.n
        plans = []
        for i in range(50):
            p = P2P(c, w, "int32", f"group {i}: ")
            count = 1 + 97 * i
            p.send(nxt, _message(w, "fifty", w.rank, nxt, i, count, "int32"))
            p.recv(prv, _message(w, "fifty", prv, w.rank, i, count, "int32"))
            plans.append(p)

        def launch():
            for p in plans:
                p.grouped()
        return launch
    return "p2p 50 ring groups back to back without a sync", build


def _mixed_group():
    def build(c, w):
        nxt, prv = (w.rank + 1) % w.n, (w.rank - 1) % w.n
        sums = w.inputs("mixed-ar", 1025, "float32")
        maxes = w.inputs("mixed-max", 7, "int32")
        send_sum, send_max = c.buffer(sums[w.rank]), c.buffer(maxes[w.rank])
        out_sum = c.output("all_reduce sum", reduce_reference(sums, "float32", "sum"),
                           tolerance(sums, "float32", "sum"))
        out_max = c.output("all_reduce max", reduce_reference(maxes, "int32", "max"))
        p = P2P(c, w, "bfloat16")
        p.send(nxt, _message(w, "mixed", w.rank, nxt, 0, 4097, "bfloat16"))
        p.recv(prv, _message(w, "mixed", prv, w.rank, 0, 4097, "bfloat16"))

        def launch():
            lib = w.lib
            c.returned("ncclGroupStart", lib.ncclGroupStart())
            c.returned("ncclAllReduce", lib.ncclAllReduce(send_sum.ptr, out_sum.ptr, 1025, DTYPE_CODES["float32"],
                                                          OP_CODES["sum"], w.comm, w.s))
            p.issue()
            c.returned("ncclAllReduce", lib.ncclAllReduce(send_max.ptr, out_max.ptr, 7, DTYPE_CODES["int32"],
                                                          OP_CODES["max"], w.comm, w.s))
            c.returned("ncclGroupEnd", lib.ncclGroupEnd())
        return launch
    return "a group of two all_reduces and a ring of sends / receives", build


def _bad_input():
    """Rank-local refusals (every rank makes the same calls): nothing is launched, the communicator goes on."""
    def build(c, w):
        n, lib, f32 = w.n, w.lib, DTYPE_CODES["float32"]
        send = c.buffer(np.ones(16, np.float32))
        spare = c.buffer(np.ones(16, np.float32))
        blocks = w.inputs("after-bad", 257, "float32")
        after_in = c.buffer(blocks[w.rank])
        after_out = c.output("all_reduce after the refusals", reduce_reference(blocks, "float32", "sum"),
                             tolerance(blocks, "float32", "sum"))

        def launch():
            bad = NCCL_INVALID_ARGUMENT
            c.returned(f"ncclSend peer={n}", lib.ncclSend(send.ptr, 16, f32, n, w.comm, w.s), bad, "peer")
            c.returned("ncclRecv peer=-1", lib.ncclRecv(spare.ptr, 16, f32, -1, w.comm, w.s), bad, "peer")
            c.returned("ncclGroupStart", lib.ncclGroupStart())
            c.returned(f"ncclSend peer={n + 3} in a group", lib.ncclSend(send.ptr, 16, f32, n + 3, w.comm, w.s), bad,
                       "peer")
            lib.ncclGroupEnd()  # what it returns after a refused call is not asserted; it must not launch anything
            depth = lib.jax_mscclpp_nccl_group_depth()
            if depth != 0:
                c.problems.append(f"group depth {depth} after ncclGroupEnd")
            c.returned(f"ncclBroadcast root={n}", lib.ncclBroadcast(send.ptr, spare.ptr, 16, f32, n, w.comm, w.s),
                       bad, "root")
            c.returned("ncclReduce root=-1", lib.ncclReduce(send.ptr, spare.ptr, 16, f32, 0, -1, w.comm, w.s), bad,
                       "root")
            c.returned(f"ncclGather root={n}", lib.ncclGather(send.ptr, spare.ptr, 1, f32, n, w.comm, w.s), bad,
                       "root")
            c.returned(f"ncclScatter root={n + 1}", lib.ncclScatter(send.ptr, spare.ptr, 1, f32, n + 1, w.comm, w.s),
                       bad, "root")
            c.returned("ncclBcast root=-2", lib.ncclBcast(spare.ptr, 16, f32, -2, w.comm, w.s), bad, "root")
            c.returned("ncclAllReduce data type 12", lib.ncclAllReduce(send.ptr, spare.ptr, 16, 12, 0, w.comm, w.s),
                       bad)
            c.returned("ncclAllReduce op 77 (never made)", lib.ncclAllReduce(send.ptr, spare.ptr, 16, f32, 77, w.comm,
                                                                             w.s), bad)
            c.returned("ncclAllReduce after the refusals", lib.ncclAllReduce(
                after_in.ptr, after_out.ptr, 257, f32, OP_CODES["sum"], w.comm, w.s))
        c.untouched("the refused calls' output", spare, np.ones(16, np.float32))
        return launch
    return "bad input is refused (peer, root, data type, op out of range)", build


def _communicator_queries():
    def build(c, w):
        def launch():
            value = ctypes.c_int(-1)
            for function, want in (("ncclCommCount", w.n), ("ncclCommUserRank", w.rank), ("ncclCommCuDevice", 0),
                                   ("ncclCommGetAsyncError", NCCL_SUCCESS)):
                c.returned(function, getattr(w.lib, function)(w.comm, ctypes.byref(value)))
                if value.value != want:
                    c.problems.append(f"{function} says {value.value}, expected {want}")
        return launch
    return "communicator: count, rank, device 0, no async error", build


def _on_several_streams():
    """One communicator's operations issued on three streams in turn, nothing synchronizing them: a streaming
    all-reduce, a ring of sends and receives, small reductions, an all-gather, an all-to-all, another streaming
    all-reduce. NCCL runs a communicator's operations in the order they were issued, whatever their streams (XLA
    relies on it); run side by side on one rank, ours would share epochs and scratch."""
    big = (4 << 20) + 3  # 16 MiB of float32: the streaming kernels

    def ring(w):
        return [("send", (w.rank + 1) % w.n, 3 << 20, 0), ("recv", (w.rank - 1) % w.n, 3 << 20, 0)]

    steps = [_all_reduce("streams-big", "float32", "sum", big, False)[1],
             _p2p_case("streams ring", "bfloat16", ring)[1],
             _all_reduce("streams-max", "int32", "max", 1025, False)[1],
             _all_gather("float32", (1 << 18) + 1)[1],
             _all_to_all("bfloat16", 4099, False)[1],
             _all_reduce("streams-small", "float32", "sum", 4097, True)[1],
             _all_reduce("streams-big-2", "bfloat16", "sum", big, False)[1]]

    def build(c, w):
        streams = [w.cp.cuda.Stream(non_blocking=True) for _ in range(3)]
        c.keep.extend(streams)
        launches = []
        for i, step in enumerate(steps):
            side = copy.copy(w)  # the same rank, issuing on another stream (its uploads too)
            side.stream, side.s = streams[i % 3], streams[i % 3].ptr
            launches.append(step(c, side))

        def launch():
            for issue in launches:
                issue()
            for stream in streams:  # the batch's synchronization of w.stream covers them
                w.stream.wait_event(stream.record())
        return launch
    return "operations on three streams in turn, in the order issued", build


SIMULATE_CASE = "ncclGroupSimulateEnd launches nothing, then a real group runs"
NOT_DISCARDED = "the simulated all_reduce wrote its output"


def _group_simulate_end():
    """Last of the run: where ncclGroupSimulateEnd does not discard the group, its queue would launch later."""
    def build(c, w):
        blocks = w.inputs("simulate", 1023, "float32")
        send = c.buffer(blocks[w.rank])
        poison = np.full(1023 * 4, 0xFF, np.uint8)
        simulated = c.buffer(poison)
        real = c.output("the real all_reduce", reduce_reference(blocks, "float32", "sum"),
                        tolerance(blocks, "float32", "sum"))
        info = SimInfo(ctypes.sizeof(SimInfo), SIM_INFO_MAGIC, NCCL_VERSION_CODE, -1.0)
        c.keep.append(info)

        def launch():
            lib, f32, s = w.lib, DTYPE_CODES["float32"], OP_CODES["sum"]
            c.returned("ncclGroupStart", lib.ncclGroupStart())
            c.returned("ncclAllReduce (simulated)", lib.ncclAllReduce(send.ptr, simulated.ptr, 1023, f32, s, w.comm,
                                                                      w.s))
            c.returned("ncclGroupSimulateEnd", lib.ncclGroupSimulateEnd(ctypes.byref(info)))
            c.returned("ncclGroupStart", lib.ncclGroupStart())
            c.returned("ncclAllReduce", lib.ncclAllReduce(send.ptr, real.ptr, 1023, f32, s, w.comm, w.s))
            c.returned("ncclGroupEnd", lib.ncclGroupEnd())

        original_verify = c.verify

        def verify():
            original_verify()
            data, _ = simulated.read()
            if not np.array_equal(data, poison):
                c.problems.append(f"{NOT_DISCARDED} (estimatedTime {info.estimatedTime})")
        c.verify = verify
        return launch
    return SIMULATE_CASE, build


def batches(n: int) -> list:
    return ([[_communicator_queries()]] + all_reduce_batches() + [premulsum_batch(n)] + reduction_batches(n) +
            rooted_batches(n) + [gather_batch(), window_batch(), registered_batch()] + p2p_batch(n) +
            [[_on_several_streams()], [_bad_input()], [_group_simulate_end()]])


def one_rank_batches() -> list:
    """What a communicator of one rank (a split with a color per rank) runs: every collective a copy of ours (a PreMulSum
    a one-block fold), with NVIDIA's NCCL never made beside it."""
    reductions = [_all_reduce("one", name, op, count, in_place) for name in ("float32", "bfloat16", "int8",
                                                                             "float8_e5m2")
                  for op in OP_CODES for count in (1, 1023) for in_place in (False, True)]
    return ([reductions, premulsum_batch(1)] + reduction_batches(1) + rooted_batches(1) + [gather_batch()] +
            [[case for case in p2p_batch(1)[0] if "self" in case[0]]])


# ---- the run ----

def run_batch(w, cases: list, report: list, started: float):
    built = []
    for name, build in cases:
        c = Case(w, name)
        try:
            c.launch = build(c, w)
        except Exception:  # noqa: BLE001 - reported per case; the other ranks then see this rank's calls missing
            c.problems.append("building: " + traceback.format_exc(limit=3))
        built.append(c)
    for c in built:
        if c.launch is not None:
            try:
                c.launch()
            except Exception:  # noqa: BLE001
                c.problems.append("issuing: " + traceback.format_exc(limit=3))
    try:
        w.stream.synchronize()
    except Exception as error:  # noqa: BLE001 - a CUDA error ends the batch's every case
        for c in built:
            c.problems.append(f"stream synchronize: {error!r}")
    for c in built:
        if not c.problems:
            try:
                c.verify()
            except Exception:  # noqa: BLE001
                c.problems.append("checking: " + traceback.format_exc(limit=3))
        passed = not c.problems
        detail = "; ".join(c.problems)[:2000]
        report.append({"name": c.name, "passed": passed, "detail": detail})
        if not passed:
            print(f"rank {w.rank}: {c.name}: FAIL {detail}", flush=True)
    for problem in w.release_windows():
        report.append({"name": "releasing the batch's windows", "passed": False, "detail": problem})
    failed = sum(bool(c.problems) for c in built)
    print(f"rank {w.rank}: {len(built)} cases from {built[0].name!r}: {len(built) - failed} ok, {failed} failed "
          f"({time.monotonic() - started:.1f} s)", flush=True)
    w.clear()


def exchange_id(lib, rank: int, workdir: str) -> UniqueId:
    uid = UniqueId()
    path = os.path.join(workdir, "nccl-id")
    if rank == 0:
        result = lib.ncclGetUniqueId(ctypes.byref(uid))
        if result != NCCL_SUCCESS:
            raise RuntimeError(f"ncclGetUniqueId returned {result}: {lib.ncclGetLastError(None)!r}")
        with open(path + ".tmp", "wb") as f:
            f.write(bytes(uid))
        os.replace(path + ".tmp", path)
        return uid
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank 0 wrote no id to {path} in 60 s")
        time.sleep(0.01)
    with open(path, "rb") as f:
        ctypes.memmove(ctypes.byref(uid), f.read(128), 128)
    return uid


def main() -> int:
    rank, n, library, workdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4], sys.argv[5]
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.pop("JAX_MSCCLPP_NVLS", None)
    lib = load_library(library)  # before cupy: no other libnccl.so.2 in this process
    import cupy as cp

    cp.cuda.Device(0).use()
    started = time.monotonic()
    if not lib.jax_mscclpp_nccl_runtime_enabled():
        print("RESULT " + json.dumps({"rank": rank, "world": n, "cases": [
            {"name": "runtime", "passed": False, "detail": "jax_mscclpp_nccl_runtime_enabled() is 0"}], "calls": {}}))
        return 0
    uid = exchange_id(lib, rank, workdir)
    comm = ctypes.c_void_p()
    result = lib.ncclCommInitRank(ctypes.byref(comm), n, uid, rank)
    if result != NCCL_SUCCESS:
        print(f"rank {rank}: ncclCommInitRank returned {result}: {lib.ncclGetLastError(None)!r}", flush=True)
        return 1
    print(f"rank {rank}: communicator of {n} ranks on GPU 0 ({time.monotonic() - started:.1f} s)", flush=True)
    stream = cp.cuda.Stream(non_blocking=True)
    w = World(lib, cp, rank, n, comm, stream)
    only = os.environ.get("JAX_MSCCLPP_TEST_CASES", "")
    report: list = []
    for cases in batches(n):
        cases = [case for case in cases if only in case[0]]
        if cases:
            run_batch(w, cases, report, started)
    # A communicator of one rank per process, split from this one.
    alone = ctypes.c_void_p()
    split = lib.ncclCommSplit(comm, rank, 0, ctypes.byref(alone), None)
    if split != NCCL_SUCCESS:
        report.append({"name": "one-rank split", "passed": False,
                       "detail": f"ncclCommSplit returned {split}: {lib.ncclGetLastError(comm)!r}"})
    else:
        lone = World(lib, cp, 0, 1, alone, stream)
        for cases in one_rank_batches():
            cases = [(f"one-rank split: {name}", build) for name, build in cases if only in name]
            if cases:
                run_batch(lone, cases, report, started)
        if lib.ncclCommDestroy(alone) != NCCL_SUCCESS:
            report.append({"name": "one-rank split destroy", "passed": False, "detail": lone.last_error()})
    calls = call_counts(lib)
    ran, copied = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    absence = lib.jax_mscclpp_nccl_in_place_between_processes(comm, ctypes.byref(ran), ctypes.byref(copied))
    between_processes = {"in_place": ran.value, "through_scratch": copied.value, "unavailable": absence.decode()}
    seconds = round(time.monotonic() - started, 1)
    destroy = lib.ncclCommDestroy(comm)
    out = {"rank": rank, "world": n, "seconds": seconds, "cases": report, "calls": calls, "destroy": destroy,
           "between_processes": between_processes}
    record_dir = os.environ.get("JAX_MSCCLPP_TEST_RECORD_DIR")
    if record_dir:
        os.makedirs(record_dir, exist_ok=True)
        with open(os.path.join(record_dir, f"nccl-api-{n}proc-rank{rank}.json"), "w") as f:
            json.dump(out, f, indent=1)
    failed = sum(not c["passed"] for c in report)
    print(f"rank {rank}: {len(report)} cases, {failed} failed, {seconds} s", flush=True)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
