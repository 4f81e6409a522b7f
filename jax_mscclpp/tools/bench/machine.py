"""What a result was measured on (machine, devices, versions, date), and the host-device setup done before JAX
starts."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform as _platform
import socket
import sys

HOST_DEVICE_FLAG = "--xla_force_host_platform_device_count"
DEFAULT_HOST_DEVICES = 8


def backends_initialized() -> bool:
    """Whether JAX has started its backends (after which XLA_FLAGS no longer take effect)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # noqa: BLE001 - an older or newer JAX: assume started, change nothing
        return True


def ensure_host_devices(count: int = DEFAULT_HOST_DEVICES, environ=None) -> bool:
    """Adds ``--xla_force_host_platform_device_count=count`` to XLA_FLAGS unless a count is set already or JAX
    has started. Harmless with GPUs (it shapes only the CPU platform). Returns whether it changed XLA_FLAGS."""
    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "")
    if HOST_DEVICE_FLAG in flags or (environ is os.environ and backends_initialized()):
        return False
    environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICE_FLAG}={int(count)}".strip()
    return True


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


# The environment variables a record keeps: those that shape our kernels and XLA's.
RECORDED_ENVIRONMENT = ("XLA_FLAGS", "JAX_PLATFORMS", "NCCL_NVLS_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS")


def host() -> dict:
    """This host, the versions and the environment that shape a measurement, and the command: what every result
    file's header holds besides its devices. Starts no JAX backend."""
    import numpy as np

    import jax_mscclpp

    return {
        "hostname": socket.gethostname(),
        "os": _platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "versions": {
            "python": _platform.python_version(),
            "jax": _version("jax"),
            "jaxlib": _version("jaxlib"),
            "jax_mscclpp": getattr(jax_mscclpp, "__version__", None),
            "numpy": np.__version__,
        },
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith("JAX_MSCCLPP_") or k in RECORDED_ENVIRONMENT},
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
    }


def describe(devices=None) -> dict:
    """Machine, devices, versions and date, for the header of every result file."""
    import jax
    import numpy as np

    devices = list(np.asarray(devices).flat) if devices is not None else jax.devices()
    first = devices[0]
    accelerator = first.platform not in ("cpu",)
    try:
        platform_version = first.client.platform_version
    except Exception:  # noqa: BLE001
        platform_version = None
    try:
        from jax_mscclpp import _native

        cuda_built = bool(_native.CUDA_BUILT)
    except Exception:  # noqa: BLE001
        cuda_built = None
    facts = host()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **{k: facts[k] for k in ("hostname", "os", "cpu", "cpu_count")},
        "platform": first.platform,
        "platform_version": platform_version,
        "device_kind": first.device_kind,
        "device_count": len(devices),
        "local_device_count": sum(1 for d in devices if d.process_index == jax.process_index()),
        "process_count": jax.process_count(),
        "gpu_model": first.device_kind if accelerator else None,
        "gpu_count": len(devices) if accelerator else 0,
        "cuda_built": cuda_built,
        **{k: facts[k] for k in ("versions", "environment", "command")},
    }
