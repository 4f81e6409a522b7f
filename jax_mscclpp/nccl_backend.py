"""``enable_nccl_backend()``: jax_mscclpp's ``libnccl.so.2`` in place of NCCL, for the collectives XLA inserts.

XLA's CUDA plugin opens NCCL as ``dlopen("libnccl.so.2")`` and looks its functions up there; the dynamic loader
answers that call with a library already loaded whose SONAME is ``libnccl.so.2``. Loaded first, with
``RTLD_GLOBAL``, our library (``jax_mscclpp/lib/libnccl.so.2``, ``nccl/README.md``) is that library, and every
NCCL call of XLA goes through it. It must be loaded before JAX's first use of a backend (the first
``jax.devices()`` or ``jit``, not ``import jax``), which is when JAX's CUDA plugin loads NVIDIA's library; once
another ``libnccl.so.2`` is in the process, ours would never be asked.

``JAX_MSCCLPP_NCCL=1`` in the environment does the same at interpreter start (the ``jax_mscclpp_nccl.pth`` file
installed beside the package), with no code change. Built with the CUDA parts, our library runs the collectives it
has algorithms for on our runtime (``runs_collectives``) and forwards the rest to the real NCCL:
``JAX_MSCCLPP_REAL_NCCL`` when set, else the nvidia-nccl wheel's ``nvidia/nccl/lib/libnccl.so.2``.

This module imports nothing of JAX (nor of the rest of the package) until it has to look at JAX's backends.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys

ENABLE_VARIABLE = "JAX_MSCCLPP_NCCL"
REAL_NCCL_VARIABLE = "JAX_MSCCLPP_REAL_NCCL"
LIBRARY_NAME = "libnccl.so.2"

_library: ctypes.CDLL | None = None


def library_path() -> str:
    """Where this installation's ``libnccl.so.2`` is (``jax_mscclpp/lib/``; an editable install keeps it in
    site-packages, found through ``sys.path``). Raises ``FileNotFoundError`` when it was not built."""
    package_dirs = [os.path.dirname(os.path.abspath(__file__))]
    package_dirs += [os.path.join(entry, "jax_mscclpp") for entry in sys.path if entry]
    for package_dir in package_dirs:
        candidate = os.path.join(package_dir, "lib", LIBRARY_NAME)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    raise FileNotFoundError(
        f"jax_mscclpp's {LIBRARY_NAME} is not installed (looked in jax_mscclpp/lib/ of {package_dirs[0]} and of "
        "every sys.path entry); reinstall the package: python -m pip install -e ."
    )


def real_nccl_path() -> str | None:
    """The NVIDIA ``libnccl.so.2`` our library forwards to: ``JAX_MSCCLPP_REAL_NCCL``, else the nvidia-nccl wheel's
    (``nvidia/nccl/lib/libnccl.so.2``); None when neither is there."""
    from_environment = os.environ.get(REAL_NCCL_VARIABLE)
    if from_environment:
        return from_environment
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(location, "lib", LIBRARY_NAME)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


def loaded_nccl_libraries() -> list[str]:
    """Paths of every ``libnccl.so*`` mapped into this process (``/proc/self/maps``), resolved, in map order."""
    found: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) < 6:
                    continue
                path = fields[5].strip()
                if os.path.basename(path).startswith("libnccl.so"):
                    resolved = os.path.realpath(path)
                    if resolved not in found:
                        found.append(resolved)
    except OSError:
        pass
    return found


def _jax_backends_initialized() -> bool:
    """Whether JAX has started its backends (the moment its CUDA plugin loads NVIDIA's NCCL). JAX's internal
    ``xla_bridge`` is the only place that says; this is the one use of it here. Without ``jax`` imported, no."""
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    initialized = getattr(xla_bridge, "backends_are_initialized", None)
    if initialized is not None:
        return bool(initialized())
    return bool(getattr(xla_bridge, "_backends", {}))


def is_active() -> bool:
    """Whether our ``libnccl.so.2`` is loaded in this process."""
    try:
        ours = library_path()
    except FileNotFoundError:
        return False
    return ours in loaded_nccl_libraries()


def enable_nccl_backend() -> None:
    """Loads jax_mscclpp's ``libnccl.so.2`` so that XLA's NCCL calls come to it; a no-op when it is loaded already.

    Raises ``RuntimeError`` when JAX's backends are already started or another ``libnccl.so.2`` is already in the
    process (either way XLA would keep that one): call it before the first ``jax.devices()`` / ``jit``, or set
    ``JAX_MSCCLPP_NCCL=1``; raises ``RuntimeError`` too when the real NCCL cannot be opened (our library is loaded
    by then, and every NCCL call fails with ncclSystemError, ``ncclGetLastError`` saying why).
    """
    global _library
    ours = library_path()
    loaded = loaded_nccl_libraries()
    if ours in loaded:
        if _library is None:
            _library = ctypes.CDLL(ours, mode=os.RTLD_GLOBAL)
        return
    others = [path for path in loaded if path != ours]
    if others:
        raise RuntimeError(
            f"jax_mscclpp.enable_nccl_backend(): another NCCL is already loaded in this process ({', '.join(others)}),"
            " so XLA would keep using it; call enable_nccl_backend() before anything loads NCCL (before the first "
            f"jax.devices() or jit), or set {ENABLE_VARIABLE}=1 in the environment"
        )
    if _jax_backends_initialized():
        raise RuntimeError(
            "jax_mscclpp.enable_nccl_backend() must run before JAX starts its backends (the first jax.devices(), "
            f"jit or device_put), which load NCCL; call it earlier, or set {ENABLE_VARIABLE}=1 in the environment"
        )
    real = real_nccl_path()
    if real is not None and REAL_NCCL_VARIABLE not in os.environ:
        os.environ[REAL_NCCL_VARIABLE] = real  # where the library looks first
    _library = ctypes.CDLL(ours, mode=os.RTLD_GLOBAL)
    # The real NCCL is opened now, before JAX's CUDA plugin loads it by the same path: the process then keeps it as
    # our library opened it (RTLD_DEEPBIND: its calls to its own functions stay inside it).
    _library.ncclGetLastError.restype = ctypes.c_char_p
    _library.ncclGetLastError.argtypes = [ctypes.c_void_p]
    if _library.jax_mscclpp_nccl_open_real_library() != 0 and not runs_collectives():
        reason = (_library.ncclGetLastError(None) or b"").decode()
        raise RuntimeError(
            f"jax_mscclpp.enable_nccl_backend(): our libnccl.so.2 is loaded but has no real NCCL to forward to, so "
            f"every NCCL call will fail: {reason}"
        )


def _loaded_library() -> ctypes.CDLL | None:
    """Our library as loaded in this process, or None when it is not. Once found (a loaded library stays loaded),
    kept: later calls neither read the process's maps nor open it again."""
    global _library
    if _library is not None:
        return _library
    try:
        ours = library_path()
    except FileNotFoundError:
        return None
    if ours not in loaded_nccl_libraries():
        return None
    _library = ctypes.CDLL(ours, mode=os.RTLD_GLOBAL)
    return _library


def runs_collectives() -> bool:
    """Whether our loaded library runs collectives on our runtime (built with the CUDA parts, and
    ``JAX_MSCCLPP_NCCL_RUNTIME`` not 0): then XLA's NCCL calls run on our kernels wherever ours have an algorithm,
    also between processes that share a GPU, where NVIDIA's NCCL refuses to run."""
    library = _loaded_library()
    if library is None:
        return False
    function = library.jax_mscclpp_nccl_runtime_enabled
    function.restype = ctypes.c_int
    return bool(function())


def call_counts() -> dict[str, dict[str, int]]:
    """The calls our library ran on our runtime, {NCCL function: {algorithm: calls}}, with algorithm "nccl" for those
    on our communicators that it forwarded to NVIDIA's NCCL; empty when it is not loaded."""
    library = _loaded_library()
    if library is None:
        return {}
    function = library.jax_mscclpp_nccl_call_counts
    function.restype = ctypes.c_char_p
    counts: dict[str, dict[str, int]] = {}
    for line in (function() or b"").decode().splitlines():
        name, algorithm, calls = line.split()
        counts.setdefault(name, {})[algorithm] = int(calls)
    return counts


def status() -> dict:
    """For ``info()``: whether our library is loaded, whether it runs collectives on our runtime, where it and the
    real NCCL are, and the calls it ran (``call_counts``)."""
    try:
        ours: str | None = library_path()
    except FileNotFoundError:
        ours = None
    library = _loaded_library()
    real_opened = None
    if library is not None:
        function = library.jax_mscclpp_nccl_real_library
        function.restype = ctypes.c_char_p
        real_opened = function().decode() or None
    return {
        "active": library is not None,
        "runs_collectives": runs_collectives(),
        "library": ours,
        "real_nccl": real_nccl_path(),
        "real_nccl_opened": real_opened,
        "calls": call_counts(),
    }


__all__ = ["call_counts", "enable_nccl_backend", "is_active", "library_path", "loaded_nccl_libraries", "real_nccl_path",
           "runs_collectives", "status"]
