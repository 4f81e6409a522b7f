"""Device setup shared by the examples: XLA's virtual CPU devices must be asked for before JAX is imported.

With no GPU in sight (JAX_PLATFORMS, else /dev/nvidia*), ``configure_cpu_devices`` gives XLA 8 virtual CPU devices;
``--cpu-devices N`` on the command line sets the count whatever the platform, and a count already in XLA_FLAGS is
kept. ``add_common_arguments`` gives every example the same ``--dtype``, ``--tp``, ``--cpu-devices`` and ``--seed``;
``placed`` makes a global array of host data, as every process of a multi-process run holds it.
"""

import argparse
import glob
import os
import re
import sys

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


def add_common_arguments(parser: argparse.ArgumentParser, *, tp: bool = True, dtype: str | None = None,
                         dtype_help: str = "parameter dtype (default: float32 on CPU, bfloat16 on GPU)") -> None:
    """The options every example shares. ``tp``: whether it has a tensor-parallel axis; ``dtype``: the default
    dtype (None: the example picks by platform)."""
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=dtype,
                        help=dtype_help if dtype is None else f"parameter dtype (default: {dtype})")
    if tp:
        parser.add_argument("--tp", type=int, default=None, help="devices on the 'tp' axis (default: all)")
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help=f"virtual CPU devices when running on the CPU (default {DEFAULT_CPU_DEVICES})")
    parser.add_argument("--seed", type=int, default=0)


def tensor_parallel_devices(tp: int | None) -> tuple:
    """(devices, platform, degree): this process's JAX devices, their platform, and the tensor-parallel degree
    (``tp``, the --tp flag, else every device); exits naming both counts when --tp asks for more devices."""
    import jax

    devices = jax.devices()
    platform = devices[0].platform
    degree = tp or len(devices)
    if degree > len(devices):
        sys.exit(f"--tp {degree} needs {degree} devices; {len(devices)} {platform} devices are here")
    return devices, platform, degree


def placed(host, sharding):
    """A global array of ``host`` (a numpy array, the same in every process) laid out by ``sharding``: each device
    gets its slice, so this works unchanged in one process and in several."""
    import jax

    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
