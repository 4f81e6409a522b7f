"""The benchmark's command line as its tests run it: ``python -m jax_mscclpp.tools.bench`` in a fresh process on
CPU devices."""

import os
import subprocess
import sys

# The fewest iterations that still run every step of the tool and write every file.
FAST = ["--iters", "2", "--warmup", "1", "--chain", "2", "--no-progress"]


def bench(*args, devices=4, timeout=120, env_extra=None) -> subprocess.CompletedProcess:
    """The tool's run with ``args`` on ``devices`` CPU devices (None: no --devices), without this process's XLA
    flags and tuning file, ``env_extra`` added to its environment."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the tool sets the CPU device count itself
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_MSCCLPP_TUNING_FILE", None)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "jax_mscclpp.tools.bench", *args]
    if devices:
        cmd += ["--devices", str(devices)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
