"""Loads the private native module and registers its FFI targets with JAX, once, at import."""

from __future__ import annotations

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


REGISTERED_TARGETS = _register_targets()
CUDA_BUILT = bool(native.cuda_built())
