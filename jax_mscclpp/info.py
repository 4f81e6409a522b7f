"""``info()``: what this installation can do and what it holds right now."""

from __future__ import annotations

from . import _native, nccl_backend, selection, settings
from .communicator import Communicator


def info() -> dict:
    """Backend and platforms built, live communicators, timeout, the algorithm selection table, whether our
    libnccl.so.2 is loaded (``enable_nccl_backend``), and every environment variable's value (settings.def)."""
    return {
        "platforms": sorted(_native.REGISTERED_TARGETS),
        "targets": {p: list(t) for p, t in _native.REGISTERED_TARGETS.items()},
        "cuda_built": _native.CUDA_BUILT,
        "timeout_s": _native.native.timeout_seconds(),
        "communicators": [repr(c) for c in Communicator.live()],
        "algorithms": selection.table(),
        "fallback": "outside every rule's range (and for algorithm='lax') the lax collective is emitted",
        "nccl_backend": nccl_backend.status(),
        "settings": settings.current(),
    }
