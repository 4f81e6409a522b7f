"""The package's environment variables and the one policy for their values: a value that is not understood is a
``ValueError`` naming the variable, the value and what is accepted; nothing is silently ignored.

Most are checked when the package is imported (``check_environment``), before any of them is used; the
algorithm's name is checked where it is read (``forced_algorithm``), since a DSL algorithm registered after the
import is a valid name too. The native side reads some of them itself (the timeout, the streaming geometry,
NVLS); the same values are accepted there.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re

from ._codes import def_file_text

# Every variable, from kernels/include/jax_mscclpp/settings.def (the one table the native readers and README's
# "Environment" table follow): {name: {"kind", "default", "what"}} in file order.
_ROW = re.compile(r'^JAX_MSCCLPP_SETTING\((k\w+),\s*"(\w+)",\s*(k\w+),\s*"([^"]*)",\s*"([^"]*)"\)', re.M)
_ROWS_JOINED = re.sub(r"\s*\n\s+(?=\S)", " ", def_file_text("settings.def"))  # a row's continuation lines joined
SETTINGS = {name: {"kind": kind, "default": default, "what": what}
            for _, name, kind, default, what in _ROW.findall(_ROWS_JOINED)}

ENV_ALGORITHM = "JAX_MSCCLPP_ALGORITHM"
ENV_SCRATCH_BYTES = "JAX_MSCCLPP_SCRATCH_BYTES"
ENV_COMMAND_BUFFERS = "JAX_MSCCLPP_COMMAND_BUFFERS"
ENV_TRAP_ON_FAILURE = "JAX_MSCCLPP_TRAP_ON_FAILURE"


def value_of(name: str) -> str | None:
    """The variable's value, stripped; None when unset or empty (both mean: the default)."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _refuse(name: str, value: str, accepted: str):
    raise ValueError(f"jax_mscclpp: {name}={value!r} is not understood; accepted: {accepted}")


def _positive_number(name: str, default: str) -> None:
    value = value_of(name)
    if value is None:
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (number > 0 and math.isfinite(number)):
        _refuse(name, value, f"a positive number (unset: {default})")


def _positive_integer(name: str, accepted: str) -> None:
    value = value_of(name)
    if value is None:
        return
    if not value.isdigit() or int(value) == 0:
        _refuse(name, value, accepted)


def _one_of(name: str, choices: tuple, accepted: str) -> None:
    value = value_of(name)
    if value is not None and value not in choices:
        _refuse(name, value, accepted)


def _check(name: str, kind: str, default: str) -> None:
    """One variable by its kind (settings.def); the algorithm's name is checked where it is read."""
    value = value_of(name)
    if value is None or kind == "kAlgorithmName":
        return
    if kind == "kPositiveNumber":
        _positive_number(name, default)
    elif kind == "kPositiveInteger":
        _positive_integer(name, f"a whole, positive number (unset: {default})")
    elif kind == "kZeroOrOne":
        _one_of(name, ("0", "1"), f"0 or 1 (unset: {default})")
    elif kind == "kWaitOrFail":
        _one_of(name, ("wait", "fail"), f"wait or fail (unset: {default})")
    elif kind == "kAbsolutePath" and not os.path.isabs(value):
        _refuse(name, value, f"an absolute path (unset: {default})")
    elif kind == "kIPv4Address":
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            _refuse(name, value, f"an IPv4 address such as 10.0.0.1 (unset: {default})")


def check_environment() -> None:
    """Raises ValueError for the first variable of settings.def whose value is not understood (the algorithm's
    name excepted: it is checked where it is read; paths where they are opened)."""
    for name, row in SETTINGS.items():
        _check(name, row["kind"], row["default"])


def current() -> dict[str, str | None]:
    """Every variable's value in this process (None: unset, the default), for ``info()``."""
    return {name: value_of(name) for name in SETTINGS}


def forced_algorithm() -> str | None:
    """The algorithm JAX_MSCCLPP_ALGORITHM forces (None when unset), once it is known to name one: a built-in
    algorithm of some collective, "lax", or a registered DSL algorithm. Anything else is a ValueError listing the
    accepted names."""
    from . import plans
    from ._types import ALGORITHMS_OF, Collective

    value = value_of(ENV_ALGORITHM)
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
    return value_of(ENV_COMMAND_BUFFERS) or ""


def stops_on_failure() -> bool:
    """JAX_MSCCLPP_TRAP_ON_FAILURE=0: a failing GPU kernel stops rather than traps (kernels/include/jax_mscclpp/
    error_record.cuh), so the process's GPU context stays usable."""
    return value_of(ENV_TRAP_ON_FAILURE) == "0"


__all__ = ["SETTINGS", "check_environment", "command_buffers", "current", "forced_algorithm", "stops_on_failure",
           "value_of"]
