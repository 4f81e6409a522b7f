"""One process per device under ``jax.distributed``: ``--launch N`` on the command line.

The parent picks a free local port and starts N copies of the same command (without ``--launch``), child i with
``JAX_MSCCLPP_BENCH_PROCESS_ID=i``; each child calls ``jax.distributed.initialize(coordinator_address=
"localhost:PORT", num_processes=N, process_id=i)`` before anything touches a device. On GPU each child drives
local device i mod the GPU count (all GPUs stay visible, so peers can map each other's memory; on one GPU every
child shares GPU 0). On CPU each child gets one host
device unless XLA_FLAGS says otherwise, and jax's CPU collectives (gloo) connect them; the host reference
backend of jax_mscclpp runs within one process, so there only lax is timed.

Children always run with ``NCCL_NVLS_ENABLE=0`` and without ``JAX_MSCCLPP_NVLS``: NVLink multicast stays off
(docs/architecture.md). Process 0 prints and writes the results; the others stay quiet unless they fail.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time

ENV_PROCESS_ID = "JAX_MSCCLPP_BENCH_PROCESS_ID"
ENV_NUM_PROCESSES = "JAX_MSCCLPP_BENCH_NUM_PROCESSES"
ENV_COORDINATOR = "JAX_MSCCLPP_BENCH_COORDINATOR"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def child_env(process_id: int, num_processes: int, coordinator: str, base: dict | None = None) -> dict:
    """The environment of child ``process_id``."""
    env = dict(os.environ if base is None else base)
    env[ENV_PROCESS_ID] = str(process_id)
    env[ENV_NUM_PROCESSES] = str(num_processes)
    env[ENV_COORDINATOR] = coordinator
    env["NCCL_NVLS_ENABLE"] = "0"
    env.pop("JAX_MSCCLPP_NVLS", None)
    if "--xla_force_host_platform_device_count" not in env.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1").strip()
    return env


def strip_launch(argv: list[str]) -> list[str]:
    """``argv`` without ``--launch N`` / ``--launch=N``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--launch":
            skip = True
            continue
        if arg.startswith("--launch="):
            continue
        out.append(arg)
    return out


def _pump(stream, sink, prefix: str) -> None:
    for line in iter(stream.readline, ""):
        sink.write(prefix + line)
        sink.flush()
    stream.close()


def launch(num_processes: int, module: str, argv: list[str], timeout_s: float | None = None) -> int:
    """Runs ``python -m module argv`` as ``num_processes`` processes; returns the first non-zero exit status (0
    when all succeed). If one fails, the others are stopped."""
    if num_processes < 1:
        raise ValueError(f"--launch needs at least 1 process, got {num_processes}")
    coordinator = f"localhost:{free_port()}"
    argv = strip_launch(argv)
    children: list[subprocess.Popen] = []
    pumps = []
    for i in range(num_processes):
        env = child_env(i, num_processes, coordinator)
        cmd = [sys.executable, "-m", module, *argv]
        if i == 0:
            children.append(subprocess.Popen(cmd, env=env))
        else:
            # Later processes' output goes to stderr, prefixed, so process 0's table stays clean on stdout.
            child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            pump = threading.Thread(target=_pump, args=(child.stdout, sys.stderr, f"[process {i}] "), daemon=True)
            pump.start()
            pumps.append(pump)
            children.append(child)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    status = 0
    try:
        while any(c.poll() is None for c in children):
            failed = [c for c in children if c.returncode not in (None, 0)]
            if failed or (deadline is not None and time.monotonic() > deadline):
                status = failed[0].returncode if failed else 124
                break
            time.sleep(0.05)
    finally:
        for c in children:
            if c.poll() is None:
                c.terminate()
        for c in children:
            try:
                c.wait(timeout=10)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()
        for pump in pumps:
            pump.join(timeout=5)
    if status == 0:
        status = next((c.returncode for c in children if c.returncode), 0)
    return status


def is_child() -> bool:
    return ENV_PROCESS_ID in os.environ


def _gpu_plugin_installed() -> bool:
    if os.environ.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return False
    return any(importlib.util.find_spec(m) is not None for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm_plugin"))


def initialize_child(**options) -> tuple[int, int]:
    """Joins the job described by the environment; returns (process_id, num_processes). ``options`` go to
    ``jax.distributed.initialize`` (e.g. ``heartbeat_timeout_seconds``)."""
    import jax

    process_id = int(os.environ[ENV_PROCESS_ID])
    num_processes = int(os.environ[ENV_NUM_PROCESSES])
    kwargs = dict(
        coordinator_address=os.environ[ENV_COORDINATOR], num_processes=num_processes, process_id=process_id,
        **options,
    )
    if _gpu_plugin_installed():
        # Process i drives GPU i, or GPU i mod the GPU count when there are more processes than GPUs (several
        # processes sharing GPU 0 of a one-GPU machine).
        kwargs.setdefault("local_device_ids", [process_id % max(1, _cuda_device_count() or num_processes)])
    jax.distributed.initialize(**kwargs)
    return process_id, num_processes


_gathers = itertools.count()


def gather_from_processes(values):
    """Every process's ``values`` (anything JSON can carry), in process order, through ``jax.distributed``'s
    key-value store. No device collective: processes sharing one GPU cannot run one (NCCL refuses two ranks on a
    device). Every process must make the same calls in the same order."""
    import jax

    if jax.process_count() == 1:
        return [values]
    from jax._src import distributed

    client = distributed.global_state.client
    key = f"jax_mscclpp/gather/{next(_gathers)}"
    client.key_value_set(f"{key}/{jax.process_index()}", json.dumps(values))
    return [json.loads(client.blocking_key_value_get(f"{key}/{p}", 600_000)) for p in range(jax.process_count())]


def _cuda_device_count() -> int | None:
    """CUDA devices visible here, from jax_mscclpp's CUDA runtime (None in a CPU-only build); asks the driver only,
    without starting JAX's backends."""
    try:
        from jax_mscclpp._native import native
    except ImportError:
        return None
    cuda = getattr(native, "cuda", None)
    return int(cuda.device_count()) if cuda is not None else None
