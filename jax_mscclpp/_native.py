"""Loads the private native module and registers its FFI targets with JAX, once, at import."""

from __future__ import annotations

import os

import jax

from . import _jax_mscclpp as native

# Platform names of the native module -> JAX's.
_JAX_PLATFORM = {"cpu": "cpu", "CUDA": "CUDA"}


def _register_targets() -> dict:
    registered = {}
    for platform, targets in native.registrations().items():
        for name, capsule in targets.items():
            jax.ffi.register_ffi_target(name, capsule, platform=_JAX_PLATFORM[platform])
        registered[platform] = tuple(sorted(targets))
    return registered


def timeout_from_environment(environ=os.environ) -> float | None:
    """JAX_MSCCLPP_TIMEOUT_S as seconds (None when unset); a ValueError naming the variable unless it is a
    positive number."""
    text = environ.get("JAX_MSCCLPP_TIMEOUT_S")
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"JAX_MSCCLPP_TIMEOUT_S must be a positive, finite number of seconds, got {text!r}")
    return seconds


REGISTERED_TARGETS = _register_targets()
CUDA_BUILT = bool(native.cuda_built())

if timeout_from_environment() is not None:
    native.set_timeout_seconds(timeout_from_environment())
