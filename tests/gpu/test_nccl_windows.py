"""Windows of jax_mscclpp's libnccl.so.2 (ncclCommWindowRegister): calls whose buffers lie in every rank's symmetric
window (NCCL_WIN_COLL_SYMMETRIC) run in place (collective.h, launch_in_place: no scratch), here with 2 and 4 ranks of
one process on GPU 0 (tests/gpu/_nccl_ranks.py), against numpy: all-reduce, reduce-scatter, all-gather and
all-to-all, several dtypes, reductions and odd sizes, NCCL's in-place layouts, windows inside larger allocations, at
odd offsets and in ncclMemAlloc's memory, registered from a thread per rank and from one thread in a group; a call
outside the windows, an all-to-all in place (whose blocks a peer still reads) and a call after the windows are
deregistered run the table's algorithm instead, as jax_mscclpp_nccl_call_counts() shows. Default windows (winFlags
0), whose buffers NCCL lets each rank pass at its own offset, run the table's algorithm too: correct outputs, and
nothing of any rank's memory written but its output. ncclMemAlloc's memory is read-write for its own GPU and every
GPU of the process that can access it as a peer (cuMemGetAccess). Windows between processes (CUDA IPC):
tests/gpu/test_nccl_operations.py.

Kernels stop instead of trapping (JAX_MSCCLPP_TRAP_ON_FAILURE=0) and give up after 20 s, so a bug fails the case.
"""

import ctypes
import importlib.util
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if importlib.util.find_spec("cupy") is None:
    pytest.skip("the NCCL ranks need cupy for device buffers and streams", allow_module_level=True)

from tests.gpu._nccl_api_worker import (GUARD_BYTES, GUARD_PATTERN, NCCL_WIN_COLL_SYMMETRIC,  # noqa: E402
                                        NCCL_WIN_DEFAULT, NUMPY_DTYPES, compare, poison_for, rank_data,
                                        reduce_reference, tolerance)
from tests.gpu._nccl_ranks import FUNCTIONS  # noqa: E402

WINDOW_SLACK = 256  # bytes of each rank's allocation before and after its window


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}ranks")
def ranks(request, gpus):
    # The library reads these when a communicator is made; they are set back afterwards, so that the processes later
    # tests launch (which copy this environment) trap as they expect.
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"NCCL_NVLS_ENABLE": "0", "JAX_MSCCLPP_TRAP_ON_FAILURE": "0",
                            "JAX_MSCCLPP_TIMEOUT_S": "20"}.items():
            patch.setenv(name, value)
        patch.delenv("JAX_MSCCLPP_NVLS", raising=False)
        from jax_mscclpp import nccl_backend
        from tests.gpu._nccl_ranks import NcclRanks

        made = NcclRanks(nccl_backend.library_path(), request.param)
        yield made
        made.close()


def expected(collective: str, blocks: list, name: str, op: str, rank: int, n: int):
    """(want, tolerance) of rank `rank`'s output; `blocks` are every rank's inputs."""
    if collective == "all_reduce":
        return reduce_reference(blocks, name, op), tolerance(blocks, name, op)
    if collective == "reduce_scatter":
        count = blocks[0].size // n
        mine = [b[rank * count:(rank + 1) * count] for b in blocks]
        return reduce_reference(mine, name, op), tolerance(mine, name, op)
    if collective == "all_gather":
        return np.concatenate(blocks), None
    count = blocks[0].size // n
    return np.concatenate([b[rank * count:(rank + 1) * count] for b in blocks]), None


def sizes(collective: str, count: int, n: int) -> tuple[int, int]:
    """Elements of (input, output) per rank for NCCL's `count`."""
    return {"all_reduce": (count, count), "reduce_scatter": (n * count, count), "all_gather": (count, n * count),
            "all_to_all": (n * count, n * count)}[collective]


def run_case(ranks, collective, name, op, count, layout="apart", offset=64, memory="cupy", windowed=True,
             grouped=False):
    """One call of every rank with buffers in windows (layout "apart": the output after the input; "nccl": NCCL's
    in-place layout; "same": the output is the input), checked against numpy; returns the in-place calls it added."""
    cp, n = ranks.cp, ranks.n
    itemsize = np.dtype(NUMPY_DTYPES[name]).itemsize
    in_count, out_count = sizes(collective, count, n)
    seed = zlib.crc32(f"{collective}/{name}/{count}".encode())
    blocks = [rank_data(seed, r, in_count, name) for r in range(n)]
    window_bytes = offset + (in_count + out_count) * itemsize + GUARD_BYTES + 16
    total = window_bytes + 2 * WINDOW_SLACK
    allocations = []
    bases = []
    for _ in range(n):
        if memory == "ncclMemAlloc":
            ptr = ranks.mem_alloc(total)
            allocations.append(ptr)
        else:
            array = cp.empty(total, dtype=cp.uint8)
            allocations.append(array)
            ptr = array.data.ptr
        bases.append(ptr)
    in_bytes, out_bytes = in_count * itemsize, out_count * itemsize
    wants, sends, recvs = [], [], []
    for r in range(n):
        want, tol = expected(collective, blocks, name, op, r, n)
        window = bases[r] + WINDOW_SLACK
        if layout == "nccl" and collective == "all_gather":  # NCCL's in place: the input is this rank's output block
            recv = window + offset
            send = recv + r * in_bytes
        else:
            send = window + offset
            # "nccl" reduce_scatter: the output is this rank's block of the input
            recv = {"apart": send + in_bytes, "same": send, "nccl": send + r * out_bytes}[layout]
        s0, r0 = send - bases[r], recv - bases[r]
        host = np.full(total, 0x5A, np.uint8)
        host[r0:r0 + out_bytes] = poison_for(want)
        host[s0:s0 + in_bytes] = blocks[r].view(np.uint8)
        guarded = r0 + out_bytes >= s0 + in_bytes  # the bytes after the output are no input's
        if guarded:
            host[r0 + out_bytes:r0 + out_bytes + GUARD_BYTES] = GUARD_PATTERN
        cp.cuda.runtime.memcpy(bases[r], host.ctypes.data, total, cp.cuda.runtime.memcpyHostToDevice)
        wants.append((want, tol, r0, guarded))
        sends.append(send)
        recvs.append(recv)
    windows = (ranks.register_windows([b + WINDOW_SLACK for b in bases], window_bytes, grouped) if windowed else None)
    before = ranks.calls().get(FUNCTIONS[collective], {}).get("in_place", 0)
    try:
        ranks.collective(collective, sends, recvs, count, name, op)
        ranks.synchronize()
    finally:
        if windows is not None:
            ranks.deregister_windows(windows)
    problems = []
    for r in range(n):
        want, tol, r0, guarded = wants[r]
        data = np.empty(total, np.uint8)
        cp.cuda.runtime.memcpy(data.ctypes.data, bases[r], total, cp.cuda.runtime.memcpyDeviceToHost)
        got = data[r0:r0 + out_bytes].view(want.dtype)
        differs = compare(got, want, tol)
        if differs:
            problems.append(f"rank {r}: {differs}")
        if guarded and not np.array_equal(data[r0 + out_bytes:r0 + out_bytes + GUARD_BYTES], GUARD_PATTERN):
            problems.append(f"rank {r}: the bytes after the output were written")
        if not np.all(data[:WINDOW_SLACK] == 0x5A) or not np.all(data[total - WINDOW_SLACK:] == 0x5A):
            problems.append(f"rank {r}: bytes outside the window were written")
    for ptr in allocations:
        if memory == "ncclMemAlloc":
            ranks.mem_free(ptr)
    assert not problems, f"{collective} {name} {op} count={count} {layout}: " + "; ".join(problems)
    return ranks.calls().get(FUNCTIONS[collective], {}).get("in_place", 0) - before


IN_PLACE_CASES = [
    ("all_reduce", "float32", "sum", 1), ("all_reduce", "float32", "sum", 65541), ("all_reduce", "bfloat16", "sum", 1023),
    ("all_reduce", "int32", "max", 3), ("all_reduce", "float64", "min", (1 << 20) + 3), ("all_reduce", "int8", "sum", 4099),
    ("reduce_scatter", "float32", "sum", 1023), ("reduce_scatter", "bfloat16", "max", 7),
    ("reduce_scatter", "uint8", "sum", 65541), ("all_gather", "float16", "sum", 1), ("all_gather", "int8", "sum", 3),
    ("all_gather", "float32", "sum", 65541), ("all_to_all", "bfloat16", "sum", 1023), ("all_to_all", "int8", "sum", 5),
]


@pytest.mark.parametrize("collective,name,op,count", IN_PLACE_CASES, ids=lambda v: str(v))
def test_a_call_on_windows_runs_in_place(ranks, collective, name, op, count):
    assert run_case(ranks, collective, name, op, count) == ranks.n


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather"])
def test_nccls_in_place_layouts_run_in_place(ranks, collective):
    layout = "same" if collective == "all_reduce" else "nccl"
    assert run_case(ranks, collective, "float32", "sum", 1023, layout=layout) == ranks.n


def test_odd_offsets_and_ncclmemalloc_memory(ranks):
    assert run_case(ranks, "all_gather", "uint8", "sum", 1001, offset=3) == ranks.n
    assert run_case(ranks, "all_reduce", "bfloat16", "sum", 70001, offset=6) == ranks.n
    assert run_case(ranks, "reduce_scatter", "float32", "sum", 65541, memory="ncclMemAlloc") == ranks.n


def test_windows_registered_in_one_group_by_one_thread(ranks):
    assert run_case(ranks, "all_reduce", "float32", "max", 4097, grouped=True) == ranks.n


def test_each_ranks_input_and_output_windows_registered_in_one_group_by_one_thread(ranks):
    """As nccl-tests -R 2 registers them: in one group, every rank's window over its input, then one over its output
    (two allocations); each registration is collective, so a rank's two pair up with its peers' in call order. The
    all-reduce from the one to the other then runs in place."""
    cp, n, count = ranks.cp, ranks.n, 4099
    blocks = [rank_data(zlib.crc32(b"two windows"), r, count, "float32") for r in range(n)]
    sends = [cp.asarray(b) for b in blocks]
    recvs = [cp.full(count, np.nan, cp.float32) for _ in range(n)]
    windows = ranks.register_windows([[s.data.ptr, r.data.ptr] for s, r in zip(sends, recvs)], count * 4,
                                     grouped=True)
    before = ranks.calls().get(FUNCTIONS["all_reduce"], {}).get("in_place", 0)
    try:
        ranks.collective("all_reduce", [s.data.ptr for s in sends], [r.data.ptr for r in recvs], count, "float32",
                         "sum")
        ranks.synchronize()
    finally:
        ranks.deregister_windows(windows)
    want, tol = expected("all_reduce", blocks, "float32", "sum", 0, n)
    for r in range(n):
        assert not compare(cp.asnumpy(recvs[r]), want, tol), f"rank {r}"
    assert ranks.calls().get(FUNCTIONS["all_reduce"], {}).get("in_place", 0) - before == n


def test_what_windows_do_not_serve_runs_the_tables_algorithm(ranks):
    assert run_case(ranks, "all_to_all", "float32", "sum", 1023, layout="same") == 0  # in place would race
    assert run_case(ranks, "all_reduce", "float32", "sum", 4099, windowed=False) == 0


POISON = 0x5A  # every byte of a rank's allocation that is neither its input nor its output


def run_offsets_case(ranks, collective, name, op, count, offsets, flags):
    """One call of every rank whose input starts `offsets[r]` bytes into rank r's window (registered with winFlags
    `flags`) and whose output follows it after a gap; every other byte of each allocation, inside the window and
    around it, is poison. Checks every rank's output against numpy and every other byte of its allocation (its input
    included) bit for bit; returns the in-place calls it added."""
    cp, n = ranks.cp, ranks.n
    itemsize = np.dtype(NUMPY_DTYPES[name]).itemsize
    in_count, out_count = sizes(collective, count, n)
    in_bytes, out_bytes = in_count * itemsize, out_count * itemsize
    seed = zlib.crc32(f"offsets/{collective}/{name}/{count}/{offsets}".encode())
    blocks = [rank_data(seed, r, in_count, name) for r in range(n)]
    window_bytes = max(offsets) + in_bytes + GUARD_BYTES + out_bytes + GUARD_BYTES
    total = WINDOW_SLACK + window_bytes + WINDOW_SLACK
    arrays = [cp.empty(total, dtype=cp.uint8) for _ in range(n)]
    bases = [a.data.ptr for a in arrays]
    images, places, sends, recvs = [], [], [], []
    for r in range(n):
        want, tol = expected(collective, blocks, name, op, r, n)
        s0 = WINDOW_SLACK + offsets[r]
        r0 = s0 + in_bytes + GUARD_BYTES
        image = np.full(total, POISON, np.uint8)
        image[s0:s0 + in_bytes] = blocks[r].view(np.uint8)
        image[r0:r0 + out_bytes] = poison_for(want)
        cp.cuda.runtime.memcpy(bases[r], image.ctypes.data, total, cp.cuda.runtime.memcpyHostToDevice)
        images.append(image)
        places.append((want, tol, r0))
        sends.append(bases[r] + s0)
        recvs.append(bases[r] + r0)
    windows = ranks.register_windows([b + WINDOW_SLACK for b in bases], window_bytes, flags=flags)
    before = ranks.calls().get(FUNCTIONS[collective], {}).get("in_place", 0)
    try:
        ranks.collective(collective, sends, recvs, count, name, op)
        ranks.synchronize()
    finally:
        ranks.deregister_windows(windows)
    added = ranks.calls().get(FUNCTIONS[collective], {}).get("in_place", 0) - before
    problems = []
    for r in range(n):
        want, tol, r0 = places[r]
        data = np.empty(total, np.uint8)
        cp.cuda.runtime.memcpy(data.ctypes.data, bases[r], total, cp.cuda.runtime.memcpyDeviceToHost)
        differs = compare(data[r0:r0 + out_bytes].view(want.dtype), want, tol)
        if differs:
            problems.append(f"rank {r} (its input {offsets[r]} bytes into its window): {differs}")
        rest = np.ones(total, bool)
        rest[r0:r0 + out_bytes] = False
        written = np.flatnonzero(data[rest] != images[r][rest])
        if written.size:
            first = int(np.flatnonzero(rest)[written[0]])
            problems.append(f"rank {r}: {written.size} bytes outside its output were written, the first at byte "
                            f"{first} of its allocation (its input at {WINDOW_SLACK + offsets[r]}, its output at {r0})")
    del arrays
    assert not problems, (f"{collective} {name} {op} count={count} offsets={offsets} flags={flags}: " +
                          "; ".join(problems))
    return added


OFFSET_CASES = [("all_reduce", "float32", "sum", 4099), ("all_reduce", "bfloat16", "max", 65541),
                ("all_reduce", "int32", "sum", 1023), ("reduce_scatter", "float32", "sum", 1023),
                ("reduce_scatter", "int8", "sum", 4097), ("all_gather", "float32", "sum", 1001),
                ("all_gather", "bfloat16", "sum", 65541)]


def differing_offsets(n: int) -> list[int]:
    """Every rank's input at another offset in its window (multiples of 8 bytes, apart by more than a block)."""
    return [64 + 1064 * r for r in range(n)]


@pytest.mark.parametrize("collective,name,op,count", OFFSET_CASES, ids=lambda v: str(v))
def test_default_windows_at_different_offsets_run_correctly_and_write_only_the_outputs(ranks, collective, name, op,
                                                                                       count):
    """A call on default windows never takes the peers' buffers at its own offsets in their windows: it copies
    through scratch, or (buffers every rank registered, as windows are) runs in place on the buffers each rank
    posts for the call where the table's direct algorithm says so. Either way every output is right and nothing
    else is written (run_offsets_case checks both)."""
    run_offsets_case(ranks, collective, name, op, count, differing_offsets(ranks.n), NCCL_WIN_DEFAULT)


@pytest.mark.parametrize("collective,name,op,count", OFFSET_CASES[:1] + OFFSET_CASES[3:4] + OFFSET_CASES[5:6],
                         ids=lambda v: str(v))
def test_default_windows_at_equal_offsets_run_the_tables_algorithm(ranks, collective, name, op, count):
    assert run_offsets_case(ranks, collective, name, op, count, [64] * ranks.n, NCCL_WIN_DEFAULT) == 0


@pytest.mark.parametrize("collective,name,op,count", OFFSET_CASES[:1] + OFFSET_CASES[3:4] + OFFSET_CASES[5:6],
                         ids=lambda v: str(v))
def test_symmetric_windows_at_equal_offsets_run_in_place(ranks, collective, name, op, count):
    offsets = [1128] * ranks.n
    assert run_offsets_case(ranks, collective, name, op, count, offsets, NCCL_WIN_COLL_SYMMETRIC) == ranks.n


# CUDA's driver API, as cuMemGetAccess takes it.
CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 1, 3


class CuMemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def access_flags(driver, ptr: int, device: int) -> int:
    """cuMemGetAccess's flags of `device` on the allocation at `ptr` (0: no access)."""
    flags = ctypes.c_ulonglong(0)
    location = CuMemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device)
    result = driver.cuMemGetAccess(ctypes.byref(flags), ctypes.byref(location), ctypes.c_ulonglong(ptr))
    assert result == 0, f"cuMemGetAccess of device {device} returned {result}"
    return flags.value


def test_ncclmemalloc_memory_is_read_write_for_its_gpu_and_every_peer_gpu(ranks):
    cp = ranks.cp
    driver = ctypes.CDLL("libcuda.so.1")
    driver.cuMemGetAccess.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.POINTER(CuMemLocation),
                                      ctypes.c_ulonglong]
    driver.cuMemGetAccess.restype = ctypes.c_int
    driver.cuMemRetainAllocationHandle.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p]
    driver.cuMemRetainAllocationHandle.restype = ctypes.c_int
    driver.cuMemRelease.argtypes = [ctypes.c_ulonglong]
    cp.cuda.Device(0).use()
    ptr = ranks.mem_alloc(3 << 20)
    try:
        handle = ctypes.c_ulonglong(0)
        if driver.cuMemRetainAllocationHandle(ctypes.byref(handle), ctypes.c_void_p(ptr)) != 0:
            pytest.skip("ncclMemAlloc made cudaMalloc memory here (the driver has no virtual memory management)")
        driver.cuMemRelease(handle)
        assert access_flags(driver, ptr, 0) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        peers = [d for d in range(1, cp.cuda.runtime.getDeviceCount()) if cp.cuda.runtime.deviceCanAccessPeer(d, 0)]
        for d in peers:
            assert access_flags(driver, ptr, d) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, f"GPU {d}, a peer of GPU 0"
        if not peers:
            pytest.skip("GPU 0's own access checked; no other GPU here can access it as a peer")
    finally:
        ranks.mem_free(ptr)
