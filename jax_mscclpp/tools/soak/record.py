"""Result files of the reliability tools: one JSON object with the machine, the date, the settings and the figures
(the same machine header as the benchmark's, ``jax_mscclpp.tools.bench.machine.describe``)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import sys

from ..bench.machine import describe
from ..bench.json_safe import json_safe


def _header_without_devices() -> dict:
    """The machine header of a process that must not start JAX's backends (the parent of launched processes,
    which would otherwise hold a GPU beside its children)."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "hostname": socket.gethostname(), "os": platform.platform(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "environment": {k: v for k, v in sorted(os.environ.items())
                            if k.startswith("JAX_MSCCLPP_") or k in ("XLA_FLAGS", "JAX_PLATFORMS", "NCCL_NVLS_ENABLE")},
            "command": " ".join([os.path.basename(sys.executable), *sys.argv])}


def write_json(path: str, tool: str, devices, settings: dict, results: dict) -> str:
    """Writes ``{"schema", "machine", "settings", "results"}`` to ``path`` (directories made as needed).
    ``devices`` None: a header that does not start JAX."""
    machine = describe(devices) if devices is not None else _header_without_devices()
    payload = {"schema": f"jax_mscclpp.soak.{tool}/1", "machine": machine, "settings": settings,
               "results": results}
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as f:
        json.dump(json_safe(payload), f, indent=1, sort_keys=False, default=str)
        f.write("\n")
    return path
