"""The process of tests/gpu/test_nccl_launches.py: what each NCCL call of jax_mscclpp's libnccl.so.2 enqueues, read
from a CUDA graph. Two ranks of this process on GPU 0 (tests/gpu/_nccl_ranks.py: NVIDIA's NCCL refuses ranks that
share a GPU, so our runtime runs every call); for each case every rank's stream is captured (the driver's
cuStreamBeginCapture in thread-local mode, as XLA captures command buffers) around one group of every rank's call,
and the nodes of each rank's graph are counted by type: a kernel node per kernel launch, a memcpy or memset node
per device copy or fill. Each case first runs eagerly; then the captured graphs are launched and the outputs checked
against numpy, so the counted launches are the ones that do the work.

Cases of a few KiB a rank (one piece: one launch of the collective's kernel): all_reduce, all_gather, reduce_scatter
(f32 sum), a grouped send + recv with the other rank, and the same group with a self send + recv added (a device
copy besides the kernel).

Prints, last, "RESULT " + JSON {cases: {name: {nodes: [{type: count} per rank], kernels: [[kernel names] per rank],
problems: [...]}}, calls: jax_mscclpp_nccl_call_counts()}.

    python tests/gpu/_nccl_launches_worker.py PROCESS_ID NUM_PROCESSES PORT LIBRARY
"""

import ctypes
import json
import sys
import traceback

import numpy as np

from tests.gpu._nccl_api_worker import DTYPE_CODES
from tests.gpu._nccl_ranks import NcclRanks

RANKS = 2
COUNT = 1024  # float32 elements per block: 4 KiB
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
              7: "event_record", 8: "ext_semas_signal", 9: "ext_semas_wait", 10: "mem_alloc", 11: "mem_free",
              12: "batch_mem_op", 13: "conditional"}


class Driver:
    """The CUDA driver API's graph calls (libcuda.so.1: one copy per process, whatever runtime the library links)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        P, S = ctypes.c_void_p, ctypes.c_size_t
        for name, argtypes in {"cuStreamBeginCapture_v2": [P, ctypes.c_int], "cuStreamEndCapture": [P, P],
                               "cuGraphGetNodes": [P, P, ctypes.POINTER(S)],
                               "cuGraphNodeGetType": [P, ctypes.POINTER(ctypes.c_int)],
                               "cuGraphInstantiateWithFlags": [P, P, ctypes.c_ulonglong],
                               "cuGraphLaunch": [P, P], "cuGraphExecDestroy": [P], "cuGraphDestroy": [P],
                               "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]}.items():
            function = getattr(self.lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int

    def check(self, result: int, what: str) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"{what} returned {result} ({name.value.decode() if name.value else '?'})")

    def begin_capture(self, stream: int) -> None:
        self.check(self.lib.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                   "cuStreamBeginCapture")

    def end_capture(self, stream: int) -> int:
        graph = ctypes.c_void_p()
        self.check(self.lib.cuStreamEndCapture(stream, ctypes.byref(graph)), "cuStreamEndCapture")
        return graph.value

    def nodes(self, graph: int) -> list:
        n = ctypes.c_size_t(0)
        self.check(self.lib.cuGraphGetNodes(graph, None, ctypes.byref(n)), "cuGraphGetNodes")
        nodes = (ctypes.c_void_p * max(n.value, 1))()
        self.check(self.lib.cuGraphGetNodes(graph, nodes, ctypes.byref(n)), "cuGraphGetNodes")
        return list(nodes[:n.value])

    def node_type(self, node: int) -> str:
        kind = ctypes.c_int()
        self.check(self.lib.cuGraphNodeGetType(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        return NODE_TYPES.get(kind.value, str(kind.value))

    def kernel_name(self, node: int) -> str:
        """The kernel's name where the driver tells it (cuFuncGetName, CUDA 12.3+), else "?"."""
        try:
            params = (ctypes.c_void_p * 16)()  # CUDA_KERNEL_NODE_PARAMS_v2: the CUfunction first
            if self.lib.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node), params) != 0 or not params[0]:
                return "?"
            name = ctypes.c_char_p()
            if self.lib.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params[0])) != 0 or not name.value:
                return "?"
            return name.value.decode(errors="replace")
        except AttributeError:
            return "?"

    def launch(self, graph: int, stream: int) -> int:
        executable = ctypes.c_void_p()
        self.check(self.lib.cuGraphInstantiateWithFlags(ctypes.byref(executable), graph, 0), "cuGraphInstantiate")
        self.check(self.lib.cuGraphLaunch(executable, stream), "cuGraphLaunch")
        return executable.value


class Case:
    """One group of every rank's call(s) over fresh buffers: issue() makes the calls, expected() each rank's outputs."""

    def __init__(self, ranks: NcclRanks, name: str):
        import cupy as cp

        self.ranks, self.name, self.cp = ranks, name, cp
        self.inputs = [np.arange(COUNT * RANKS, dtype=np.float32) * (r + 1) + 1000 * r for r in range(RANKS)]
        self.sends = [cp.asarray(x) for x in self.inputs]
        self.recvs = [cp.full(COUNT * RANKS, np.nan, dtype=cp.float32) for _ in range(RANKS)]
        self.selves = [cp.full(COUNT, np.nan, dtype=cp.float32) for _ in range(RANKS)]
        cp.cuda.runtime.deviceSynchronize()

    def reset_outputs(self) -> None:
        for b in self.recvs + self.selves:
            b.fill(np.nan)
        self.cp.cuda.runtime.deviceSynchronize()

    def issue(self) -> None:
        r = self.ranks
        lib, f32 = r.lib, DTYPE_CODES["float32"]
        if self.name in ("all_reduce", "all_gather", "reduce_scatter"):
            count = COUNT * RANKS if self.name == "all_reduce" else COUNT
            r.collective(self.name, [s.data.ptr for s in self.sends], [d.data.ptr for d in self.recvs], count,
                         "float32", "sum")
            return
        r.check(lib.ncclGroupStart(), "ncclGroupStart")
        for q in range(RANKS):
            peer, comm, stream = 1 - q, r.comms[q], r.streams[q].ptr
            r.check(lib.ncclSend(self.sends[q].data.ptr, COUNT, f32, peer, comm, stream), f"ncclSend on rank {q}", comm)
            r.check(lib.ncclRecv(self.recvs[q].data.ptr, COUNT, f32, peer, comm, stream), f"ncclRecv on rank {q}", comm)
            if self.name == "send_recv_with_self":
                r.check(lib.ncclSend(self.sends[q].data.ptr + 4 * COUNT, COUNT, f32, q, comm, stream),
                        f"ncclSend to itself on rank {q}", comm)
                r.check(lib.ncclRecv(self.selves[q].data.ptr, COUNT, f32, q, comm, stream),
                        f"ncclRecv from itself on rank {q}", comm)
        r.check(lib.ncclGroupEnd(), f"ncclGroupEnd ({self.name})")

    def problems(self, when: str) -> list:
        """What differs from numpy in every rank's outputs."""
        total = sum(self.inputs)
        found = []
        for q in range(RANKS):
            got = self.recvs[q].get()
            if self.name == "all_reduce":
                want = {"recv": total}
            elif self.name == "all_gather":
                want = {"recv": np.concatenate([x[:COUNT] for x in self.inputs])}
            elif self.name == "reduce_scatter":
                want = {"recv[:count]": total[q * COUNT:(q + 1) * COUNT]}
                got = got[:COUNT]
            else:
                want = {"recv[:count]": self.inputs[1 - q][:COUNT]}
                got = got[:COUNT]
            for label, expected in want.items():
                if not np.array_equal(got, expected):
                    found.append(f"{when}: rank {q} {label}: first differences at "
                                 f"{np.flatnonzero(got != expected)[:4].tolist()}")
            if self.name == "send_recv_with_self" and not np.array_equal(self.selves[q].get(),
                                                                         self.inputs[q][COUNT:2 * COUNT]):
                found.append(f"{when}: rank {q}: the self receive differs")
        return found


def run_case(ranks: NcclRanks, driver: Driver, name: str) -> dict:
    case = Case(ranks, name)
    case.issue()  # eagerly first: the kernels load, and the results are checked
    ranks.synchronize()
    problems = case.problems("eager")
    case.reset_outputs()
    streams = [s.ptr for s in ranks.streams]
    graphs, nodes, kernels = [], [], []
    for s in streams:
        driver.begin_capture(s)
    failures = []
    try:
        case.issue()
    finally:
        for s in streams:  # every capture ends, whatever failed
            try:
                graphs.append(driver.end_capture(s))
            except RuntimeError as error:
                failures.append(str(error))
    if failures:
        for g in graphs:
            driver.lib.cuGraphDestroy(g)
        raise RuntimeError("; ".join(failures))
    for g in graphs:
        counts, names = {}, []
        for node in driver.nodes(g):
            kind = driver.node_type(node)
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "kernel":
                names.append(driver.kernel_name(node))
        nodes.append(counts)
        kernels.append(names)
    executables = [driver.launch(g, s) for g, s in zip(graphs, streams)]
    ranks.synchronize()
    problems += case.problems("graph")
    for e in executables:
        driver.check(driver.lib.cuGraphExecDestroy(e), "cuGraphExecDestroy")
    for g in graphs:
        driver.check(driver.lib.cuGraphDestroy(g), "cuGraphDestroy")
    return {"nodes": nodes, "kernels": kernels, "problems": problems}


def main() -> int:
    library = sys.argv[4]
    ranks = NcclRanks(library, RANKS)
    driver = Driver()
    cases = {}
    for name in ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "send_recv_with_self"):
        try:
            cases[name] = run_case(ranks, driver, name)
        except Exception:  # noqa: BLE001 - reported, and the next case runs
            cases[name] = {"nodes": [], "kernels": [], "problems": [traceback.format_exc()]}
        print(name, json.dumps(cases[name]), flush=True)
    calls = ranks.calls()
    ranks.close()
    print("RESULT " + json.dumps({"cases": cases, "calls": calls}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
