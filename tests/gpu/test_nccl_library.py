"""jax_mscclpp's libnccl.so.2 on GPUs: XLA's own collectives (lax's in shard_map, and those the partitioner inserts
under jit + shardings) in 2, 3 and 4 processes sharing GPU 0 under jax.distributed, where NVIDIA's NCCL refuses to run
("Duplicate GPU detected"): every call must run on our runtime and match numpy or the CPU backend
(tests/gpu/_nccl_worker.py). With and without XLA's command buffers holding the collectives."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.processes import launch_processes

WORKER = Path(__file__).with_name("_nccl_worker.py")

pytestmark = pytest.mark.gpu


def launch(nproc: int, xla_flags: str, timeout: int = 400):
    env = dict(os.environ, JAX_PLATFORMS="cuda,cpu", NCCL_NVLS_ENABLE="0", XLA_PYTHON_CLIENT_PREALLOCATE="false",
               XLA_FLAGS=xla_flags)
    env.pop("JAX_MSCCLPP_NVLS", None)
    env.pop("JAX_MSCCLPP_NCCL", None)  # the worker enables the library itself
    return launch_processes(WORKER, nproc, [], env, timeout, "XLA's collectives through our libnccl.so.2")


def worker_lines(out: str) -> str:
    """A failed worker's own lines (its checks, its traceback), without XLA's logging after a CUDA failure."""
    lines = [line for line in out.splitlines() if not line.startswith(("E1", "W1", "I1", "=== Source", "external/"))]
    return "\n".join(lines[-80:])


@pytest.mark.parametrize("nproc,command_buffers", [(2, "default"), (3, "default"), (4, "default"), (2, "collectives")])
def test_xla_collectives_run_on_ours(gpus, nproc, command_buffers):
    flags = {"default": "", "collectives": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUSTOM_CALL,COLLECTIVES"}
    for code, out in launch(nproc, flags[command_buffers]):
        assert code == 0, worker_lines(out)
        assert "MISMATCH" not in out
        assert "0 failures" in out


def test_moe_layer_gradients_across_processes(gpus, tmp_path):
    """The MoE example in 2 processes sharing GPU 0, both variants against its dense reference, outputs and
    gradients: lax's ragged all-to-alls and the gradients' all-reduces are XLA's, through our library; ours runs its
    ragged kernel (the default where processes share a GPU)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "moe_layer.py"
    report = tmp_path / "moe.json"
    args = ["--processes", "2", "--tokens", "256", "--d-model", "128", "--steps", "2", "--out", str(report)]
    env = dict(os.environ, JAX_PLATFORMS="cuda,cpu", NCCL_NVLS_ENABLE="0", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.pop("JAX_MSCCLPP_NVLS", None)
    env.pop("JAX_MSCCLPP_NCCL", None)  # the example enables the library itself
    proc = subprocess.run([sys.executable, str(example), *args], env=env, capture_output=True, text=True,
                          timeout=300)
    out = worker_lines(proc.stdout + proc.stderr)
    assert proc.returncode == 0, out
    results = {row["collectives"]: row for row in json.loads(report.read_text())["results"]}
    for variant in ("mscclpp", "lax"):
        row = results[variant]
        assert row["ran"] and row["passed"], (variant, row.get("grad_rel_error_by_param"), out)
    assert any(call.startswith("ragged_all_to_all lax") for call in results["lax"]["explained"]), out
    assert any(call.startswith("ragged_all_to_all p2p") for call in results["mscclpp"]["explained"]), out
