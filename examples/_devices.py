"""Device setup shared by the examples: XLA's virtual CPU devices must be asked for before JAX is imported.

With no GPU in sight (JAX_PLATFORMS, else /dev/nvidia*), ``configure_cpu_devices`` gives XLA 8 virtual CPU devices;
``--cpu-devices N`` on the command line sets the count whatever the platform, and a count already in XLA_FLAGS is
kept.
"""

import argparse
import glob
import os
import re

DEFAULT_CPU_DEVICES = 8


def gpu_expected() -> bool:
    """Whether JAX will pick a GPU, judged without importing JAX (JAX_PLATFORMS first, then /dev/nvidia*)."""
    platforms = os.environ.get("JAX_PLATFORMS", "").lower()
    if platforms:
        return platforms.split(",")[0].strip() in ("cuda", "gpu", "rocm")
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def configure_cpu_devices(argv: list[str]) -> None:
    """Sets XLA's virtual CPU device count; must run before JAX is imported."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--cpu-devices", type=int, default=None)
    requested = pre.parse_known_args(argv)[0].cpu_devices
    flags = os.environ.get("XLA_FLAGS", "")
    has_count = "xla_force_host_platform_device_count" in flags
    if requested is not None:
        flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", flags)
        count = requested
    elif has_count or gpu_expected():
        return
    else:
        count = DEFAULT_CPU_DEVICES
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
