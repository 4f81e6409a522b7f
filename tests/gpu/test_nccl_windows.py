"""Windows of jax_mscclpp's libnccl.so.2 (ncclCommWindowRegister): calls whose buffers lie in every rank's window run
in place (collective.h, launch_in_place: no scratch), here with 2 and 4 ranks of one process on GPU 0
(tests/gpu/_nccl_ranks.py), against numpy: all-reduce, reduce-scatter, all-gather and all-to-all, several dtypes,
reductions and odd sizes, NCCL's in-place layouts, windows inside larger allocations, at odd offsets and in
ncclMemAlloc's memory, registered from a thread per rank and from one thread in a group; a call outside the windows, an all-to-all in place (whose blocks a peer still reads) and a
call after the windows are deregistered run the table's algorithm instead, as jax_mscclpp_nccl_call_counts() shows.
Windows between processes (CUDA IPC): tests/gpu/test_nccl_operations.py.

Kernels stop instead of trapping (JAX_MSCCLPP_TRAP_ON_FAILURE=0) and give up after 20 s, so a bug fails the case.
"""

import importlib.util
import os
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if importlib.util.find_spec("cupy") is None:
    pytest.skip("the NCCL ranks need cupy for device buffers and streams", allow_module_level=True)

from tests.gpu._nccl_api_worker import (GUARD_BYTES, GUARD_PATTERN, NUMPY_DTYPES, compare, poison_for,  # noqa: E402
                                        rank_data, reduce_reference, tolerance)
from tests.gpu._nccl_ranks import FUNCTIONS  # noqa: E402

WINDOW_SLACK = 256  # bytes of each rank's allocation before and after its window


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}ranks")
def ranks(request, gpus):
    os.environ.update(NCCL_NVLS_ENABLE="0", JAX_MSCCLPP_TRAP_ON_FAILURE="0", JAX_MSCCLPP_TIMEOUT_S="20")
    os.environ.pop("JAX_MSCCLPP_NVLS", None)
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


def test_what_windows_do_not_serve_runs_the_tables_algorithm(ranks):
    assert run_case(ranks, "all_to_all", "float32", "sum", 1023, layout="same") == 0  # in place would race
    assert run_case(ranks, "all_reduce", "float32", "sum", 4099, windowed=False) == 0
