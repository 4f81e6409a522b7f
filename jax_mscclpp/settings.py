"""The package's environment variables and the one policy for their values: a value that is not understood is a
``ValueError`` naming the variable, the value and what is accepted; nothing is silently ignored.

Most are checked when the package is imported (``check_environment``), before any of them is used; the
algorithm's name is checked where it is read (``forced_algorithm``), since a DSL algorithm registered after the
import is a valid name too. The native side reads some of them itself (the timeout, the streaming geometry,
NVLS); the same values are accepted there.
"""

from __future__ import annotations

import math
import os

ENV_TIMEOUT = "JAX_MSCCLPP_TIMEOUT_S"
ENV_ALGORITHM = "JAX_MSCCLPP_ALGORITHM"
ENV_SCRATCH_BYTES = "JAX_MSCCLPP_SCRATCH_BYTES"
ENV_COMMAND_BUFFERS = "JAX_MSCCLPP_COMMAND_BUFFERS"
ENV_NVLS = "JAX_MSCCLPP_NVLS"
# Read by our libnccl.so.2 (nccl/README.md); checked here for the same policy.
ENV_NCCL = "JAX_MSCCLPP_NCCL"
ENV_NCCL_RUNTIME = "JAX_MSCCLPP_NCCL_RUNTIME"
ENV_STREAM = ("JAX_MSCCLPP_STREAM_BLOCKS", "JAX_MSCCLPP_STREAM_BLOCK_BYTES", "JAX_MSCCLPP_STREAM_CHUNK",
              "JAX_MSCCLPP_STREAM_SLOTS")


def _value(name: str) -> str | None:
    """The variable's value, stripped; None when unset or empty (both mean: the default)."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _refuse(name: str, value: str, accepted: str):
    raise ValueError(f"jax_mscclpp: {name}={value!r} is not understood; accepted: {accepted}")


def _positive_number(name: str) -> None:
    value = _value(name)
    if value is None:
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (number > 0 and math.isfinite(number)):
        _refuse(name, value, "a positive number of seconds (unset: 300)")


def _positive_integer(name: str, accepted: str) -> None:
    value = _value(name)
    if value is None:
        return
    if not value.isdigit() or int(value) == 0:
        _refuse(name, value, accepted)


def _one_of(name: str, choices: tuple, accepted: str) -> None:
    value = _value(name)
    if value is not None and value not in choices:
        _refuse(name, value, accepted)


def check_environment() -> None:
    """Raises ValueError for the first variable whose value is not understood (the algorithm's name excepted: it
    is checked where it is read)."""
    _positive_number(ENV_TIMEOUT)
    _positive_integer(ENV_SCRATCH_BYTES, "a whole, positive number of bytes (unset: 8 MiB on CPU, 64 MiB on GPU)")
    _one_of(ENV_COMMAND_BUFFERS, ("0", "1"), "0 (no GPU call in command buffers), 1 (every call), unset (calls "
            "above 1 MiB per rank)")
    _one_of(ENV_NVLS, ("0", "1"), "1 (opt in to NVLink multicast), 0 or unset (off)")
    _one_of(ENV_NCCL, ("0", "1"), "1 (load our libnccl.so.2 at interpreter start), 0 or unset (not)")
    _one_of(ENV_NCCL_RUNTIME, ("0", "1"), "0 (our libnccl.so.2 forwards every call to NVIDIA's), 1 or unset (our "
            "runtime runs the collectives it has algorithms for)")
    for name in ENV_STREAM:
        _positive_integer(name, "a whole, positive number (unset: the measured default)")


def forced_algorithm() -> str | None:
    """The algorithm JAX_MSCCLPP_ALGORITHM forces (None when unset), once it is known to name one: a built-in
    algorithm of some collective, "lax", or a registered DSL algorithm. Anything else is a ValueError listing the
    accepted names."""
    from . import plans
    from ._types import ALGORITHMS_OF, Collective

    value = _value(ENV_ALGORITHM)
    if value is None:
        return None
    builtin = sorted({name for names in ALGORITHMS_OF.values() for name in names} | {"lax"})
    registered = sorted({p.name for c in Collective for p in plans.registered_for(c, None)})
    if value in builtin or plans.registered(value) is not None:
        return value
    _refuse(ENV_ALGORITHM, value, ", ".join(builtin + registered) + " (or a name given to register_algorithm)")


def command_buffers() -> str:
    """JAX_MSCCLPP_COMMAND_BUFFERS: "0", "1" or "" (unset), checked."""
    _one_of(ENV_COMMAND_BUFFERS, ("0", "1"), "0, 1 or unset")
    return _value(ENV_COMMAND_BUFFERS) or ""


__all__ = ["check_environment", "command_buffers", "forced_algorithm"]
