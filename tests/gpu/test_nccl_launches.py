"""Launches per NCCL call of jax_mscclpp's libnccl.so.2: one kernel per call, nothing else. Each call of two ranks of
one process on GPU 0 is captured into a CUDA graph, as XLA captures command buffers, and the graph's nodes counted
(tests/gpu/_nccl_launches_worker.py): ncclAllReduce, ncclAllGather and ncclReduceScatter are one kernel node each,
a grouped ncclSend + ncclRecv with the other rank one kernel node, whatever its receives, and the same group with a
self send + recv one kernel node and the self copy's memcpy node. No memset, event or other node. Both where failing
kernels trap (the default) and where they stop (JAX_MSCCLPP_TRAP_ON_FAILURE=0): there the kernels poison their
outputs themselves (kernels/collectives/failed_outputs.cuh) rather than a kernel per output after the call. The
captured graphs are launched and their outputs checked too.

Run on one GPU: ``python -m pytest -q tests/gpu/test_nccl_launches.py`` (cupy needed; skipped without it).
"""

import importlib.util
import json
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import child_env
from tests.gpu.processes import launch_processes

WORKER = Path(__file__).with_name("_nccl_launches_worker.py")
TIMEOUT_S = 180

pytestmark = pytest.mark.gpu

if importlib.util.find_spec("cupy") is None:
    pytest.skip("the NCCL ranks need cupy for device buffers and streams", allow_module_level=True)

# Each case's nodes on every rank: the call's one kernel; a self message's copy besides.
EXPECTED_NODES = {
    "all_reduce": {"kernel": 1},
    "all_gather": {"kernel": 1},
    "reduce_scatter": {"kernel": 1},
    "send_recv": {"kernel": 1},
    "send_recv_with_self": {"kernel": 1, "memcpy": 1},
}
FUNCTIONS = ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv")


@pytest.fixture(scope="module", params=["1", "0"], ids=["trap", "stop"])
def report(request, gpus) -> dict:
    """The worker's report, JAX_MSCCLPP_TRAP_ON_FAILURE as the parameter says."""
    from jax_mscclpp import nccl_backend

    env = child_env(JAX_MSCCLPP_TRAP_ON_FAILURE=request.param, JAX_MSCCLPP_TIMEOUT_S="20",
                    TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    for name in ("JAX_MSCCLPP_NCCL", "JAX_MSCCLPP_NCCL_RUNTIME"):
        env.pop(name, None)
    [(code, out)] = launch_processes(WORKER, 1, [nccl_backend.library_path()], env, TIMEOUT_S,
                                     "the NCCL launch count")
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert code == 0 and results, f"exit status {code}, output:\n{out[-6000:]}"
    return json.loads(results[-1][len("RESULT "):])


@pytest.mark.parametrize("case", list(EXPECTED_NODES))
def test_one_kernel_per_call(report, case):
    result = report["cases"][case]
    assert not result["problems"], "\n".join(result["problems"])
    assert len(result["nodes"]) == 2, result
    for rank, (nodes, kernels) in enumerate(zip(result["nodes"], result["kernels"])):
        assert nodes == EXPECTED_NODES[case], f"rank {rank}: graph nodes {nodes}, kernels {kernels}"


def test_calls_ran_on_our_runtime(report):
    for function in FUNCTIONS:
        columns = report["calls"].get(function, {})
        assert columns and "nccl" not in columns, f"{function}: {columns}"
