"""Two processes share GPU 0: endpoints (CUDA IPC handles as bytes) pass through files; put/signal/wait, LL
packets, ping-pong and PortChannel across processes; every setup is torn down with no mapping or thread left.

The two contexts time-slice the GPU, so iteration counts stay small.
"""

import json
import os
import subprocess
import sys

import pytest

from .gpu_helpers import child_env

pytestmark = pytest.mark.gpu

CYCLES = 3


def test_two_processes_share_gpu0(cuda, tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "_xproc_worker.py")
    env = child_env()
    procs = [
        subprocess.Popen(
            [sys.executable, worker, str(r), str(tmp_path), str(CYCLES)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
        line = [l for l in out.splitlines() if l.startswith("RESULT ")]
        assert line, out
        results.append(json.loads(line[-1][len("RESULT ") :]))
    for res in results:
        assert len(res["cycles"]) == CYCLES
        for c in res["cycles"]:
            assert c["ipc_mappings_open"] == 2  # the peer's scratch and semaphore pool
            assert c["hb_ok"] and c["port_ok"], c
            assert c["ll_bad_words"] == 0, c
            assert c["ipc_mappings_after_close"] == 0 and c["proxy_threads_after_close"] == 0, c
