"""JAX_MSCCLPP_NCCL=1, no code change, in 2 processes sharing GPU 0 started the way JAX's multi-process test
launcher starts its workers (tests/gpu/_switch_worker.py: `/proc/self/exe`, the environment copied, sys.path as
PYTHONPATH; the workers' interpreter never runs jax_mscclpp_nccl.pth and they never import jax_mscclpp).
- The variable in the launcher's environment: its switch exports ours in LD_PRELOAD, XLA's collectives in the
  workers run on our library (NVIDIA's refuses a shared GPU) and match numpy.
- The variable added to the workers' environment only: nothing of ours ran at their start, and JAX's first backend
  use raises the RuntimeError of jax_plugins/jax_mscclpp_nccl.py naming NVIDIA's library and ours, instead of a
  hang in NVIDIA's communicator setup."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.processes import ROOT, free_port

WORKER = Path(__file__).with_name("_switch_worker.py")

pytestmark = pytest.mark.gpu


def launch(mode: str, nproc: int = 2) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cuda", CUDA_VISIBLE_DEVICES="0", NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    for name in ("JAX_MSCCLPP_NVLS", "LD_PRELOAD", "PYTHONPATH", "JAX_MSCCLPP_REAL_NCCL"):
        env.pop(name, None)
    if mode == "collectives":
        env["JAX_MSCCLPP_NCCL"] = "1"
    else:
        env.pop("JAX_MSCCLPP_NCCL", None)
    return subprocess.run([sys.executable, str(WORKER), "launch", mode, str(nproc), str(free_port())], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=420)


def test_launcher_workers_run_on_ours(gpus):
    run = launch("collectives")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert run.stdout.count(": 0 failures") == 2 and "MISMATCH" not in run.stdout
    assert run.stdout.count("start-up hook ran here: False") == 2


def test_variable_only_in_the_workers_is_refused_by_name(gpus):
    run = launch("refused")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert run.stdout.count(": refused: jax_mscclpp: JAX_MSCCLPP_NCCL=1") == 2
