"""Fixtures of the libnccl.so.2 tests: our built library, the stand-in "real NCCL" compiled from stand_in_nccl.c,
and a runner of _worker.py scenarios in a fresh process (the library opens the real NCCL once per process, and a
process that loaded a libnccl.so.2 keeps it)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="session")
def our_library() -> str:
    from jax_mscclpp import nccl_backend

    return nccl_backend.library_path()


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory) -> str:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("needs a C compiler for the stand-in NCCL")
    out = tmp_path_factory.mktemp("stand_in") / "libnccl.so.2"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-pthread", "-Wl,-soname,libnccl.so.2", "-o", str(out),
                    str(HERE / "stand_in_nccl.c")], check=True)
    return str(out)


def run_worker(scenario: str, real_nccl: str | None, *, extra_env: dict | None = None) -> dict:
    """Runs _worker.py's `scenario` with JAX_MSCCLPP_REAL_NCCL = `real_nccl` (unset for None); its JSON result. Our
    runtime is off (JAX_MSCCLPP_NCCL_RUNTIME=0: every call goes to the real library) unless `extra_env` says."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_MSCCLPP_NCCL_RUNTIME="0")
    env.pop("JAX_MSCCLPP_NCCL", None)
    env.pop("JAX_MSCCLPP_REAL_NCCL", None)
    if real_nccl is not None:
        env["JAX_MSCCLPP_REAL_NCCL"] = real_nccl
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-m", "tests.nccl._worker", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def worker():
    return run_worker
