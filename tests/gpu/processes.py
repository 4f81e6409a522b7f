"""Launching the multi-process GPU tests' workers: N processes of one worker script on this host, each told its
process id, the process count and the coordinator's port, their outputs collected; one that outlives the timeout
fails the test with every process's last output (all are killed)."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch_processes(worker: Path, nproc: int, extra_args: list[str], env: dict, timeout: int, what: str):
    """[(return code, output)] of each process, in process order."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(worker), str(i), str(nproc), str(port), *extra_args], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(nproc)]
    deadline = time.monotonic() + timeout
    outputs = []
    for i, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            tails = [f"--- process {j}:\n" + q.communicate()[0][-1500:] for j, q in enumerate(procs)]
            pytest.fail(f"{what} with {nproc} processes did not finish in {timeout} s (process {i} was running); "
                        "each one's last output:\n" + "\n".join(tails))
        outputs.append((p.returncode, out))
    return outputs
