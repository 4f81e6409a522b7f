"""``enable_nccl_backend()``: jax_mscclpp's ``libnccl.so.2`` in place of NCCL, for the collectives XLA inserts.

XLA's CUDA plugin opens NCCL as ``dlopen("libnccl.so.2")`` and looks its functions up there; the dynamic loader
answers that call with the first library loaded whose SONAME is ``libnccl.so.2`` (the *bound* library,
``bound_library``). Loaded first, with ``RTLD_GLOBAL``, our library (``jax_mscclpp/lib/libnccl.so.2``,
``nccl/README.md``) is that library, and every NCCL call of XLA goes through it. It must be loaded before JAX's first
use of a backend (the first ``jax.devices()`` or ``jit``, not ``import jax``), which is when JAX's CUDA plugin loads
NVIDIA's library; once another ``libnccl.so.2`` is in the process, ours would never be asked.

``JAX_MSCCLPP_NCCL=1`` in the environment does the same with no code change (``switch``): at interpreter start
wherever site-packages are processed (the ``jax_mscclpp_nccl.pth`` file installed there, through
``jax_plugins/jax_mscclpp_nccl.py``), and at ``import jax_mscclpp``. A process where the switch loaded ours exports
it in ``LD_PRELOAD``, so that every process it starts binds ours first, also those whose interpreter never processes
that site-packages folder (started as ``/proc/self/exe`` or by another interpreter path with the folder only on
``PYTHONPATH``, or with ``-S``). Where the switch cannot take effect it says so in one line on stderr, and
``status()["reason"]`` keeps why. Built with the CUDA parts, our library runs the collectives it has algorithms for
on our runtime (``runs_collectives``) and forwards the rest to the real NCCL: ``JAX_MSCCLPP_REAL_NCCL`` when set,
else the nvidia-nccl wheel's ``nvidia/nccl/lib/libnccl.so.2``.

This module imports nothing of JAX nor of the rest of the package (the start-up hook loads it alone) until it has to
look at JAX's backends.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys

ENABLE_VARIABLE = "JAX_MSCCLPP_NCCL"
REAL_NCCL_VARIABLE = "JAX_MSCCLPP_REAL_NCCL"
LIBRARY_NAME = "libnccl.so.2"
# The device files JAX itself looks for before it starts its CUDA backend (a GPU, a container's control device, WSL).
CUDA_DEVICE_FILES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")

_library: ctypes.CDLL | None = None
# Why the switch left ours inactive in this process (None: it was not asked, or it succeeded).
_switch_failure: str | None = None
_switch_ran = False


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


def _mapped_files() -> list[tuple[int, int, str]]:
    """(start, end, path) of every file mapping of this process (``/proc/self/maps``), in address order."""
    mappings: list[tuple[int, int, str]] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    start, end = fields[0].split("-")
                    mappings.append((int(start, 16), int(end, 16), fields[5].rstrip("\n")))
    except OSError:
        pass
    return mappings


def loaded_nccl_libraries() -> list[str]:
    """Paths of every ``libnccl.so*`` mapped into this process (``/proc/self/maps``), resolved, in map order."""
    found: list[str] = []
    for _, _, path in _mapped_files():
        if os.path.basename(path).startswith("libnccl.so"):
            resolved = os.path.realpath(path)
            if resolved not in found:
                found.append(resolved)
    return found


def bound_library() -> str | None:
    """The ``libnccl.so.2`` that ``dlopen("libnccl.so.2")`` answers in this process now, resolved: the one XLA's CUDA
    plugin has bound or will bind (the loader keeps the first one loaded with that SONAME). None while none is loaded
    (XLA would then load the first one on the loader's search path). Loads nothing (``RTLD_NOLOAD``)."""
    try:
        handle = ctypes.CDLL(LIBRARY_NAME, mode=os.RTLD_NOLOAD)
        address = ctypes.cast(handle.ncclGetVersion, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    for start, end, path in _mapped_files():
        if start <= address < end:
            return os.path.realpath(path)
    return None


def cuda_device_visible() -> bool:
    """Whether this machine shows a CUDA device the way JAX checks before it starts its CUDA backend (its device
    files), and ``CUDA_VISIBLE_DEVICES`` does not hide every one. Starts nothing of CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-")):
        return False
    return any(os.path.exists(path) for path in CUDA_DEVICE_FILES)


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
    """Whether our ``libnccl.so.2`` is the one ``dlopen("libnccl.so.2")`` answers in this process (``bound_library``):
    XLA's NCCL calls come to it."""
    try:
        ours = library_path()
    except FileNotFoundError:
        return False
    return bound_library() == ours


def _refusal(ours: str) -> str | None:
    """Why ours cannot become the bound library now, or None when it can (or is bound already)."""
    bound = bound_library()
    if bound is not None and bound != ours:
        return f"another NCCL is already loaded in this process ({bound}), and XLA keeps the first one loaded"
    if bound is None and _jax_backends_initialized():
        return "JAX's backends are already started (the first jax.devices(), jit or device_put loads NCCL)"
    return None


def enable_nccl_backend() -> None:
    """Loads jax_mscclpp's ``libnccl.so.2`` so that XLA's NCCL calls come to it, and opens the real NCCL through it
    now (before JAX's CUDA plugin loads the same file); where ours is bound already (``LD_PRELOAD``, an earlier
    call), only the real NCCL is opened, once per process.

    Raises ``RuntimeError`` when another ``libnccl.so.2`` is bound or JAX's backends are already started (either way
    XLA keeps that one): call it before the first ``jax.devices()`` / ``jit``, or set ``JAX_MSCCLPP_NCCL=1``; raises
    ``RuntimeError`` too when the real NCCL cannot be opened (our library is loaded by then, and every NCCL call fails
    with ncclSystemError, ``ncclGetLastError`` saying why), and ``FileNotFoundError`` when ours is not installed.
    """
    refusal = _refusal(library_path())
    if refusal is not None:
        raise RuntimeError(
            f"jax_mscclpp.enable_nccl_backend(): {refusal}; call enable_nccl_backend() before anything loads NCCL "
            f"(before the first jax.devices() or jit), or set {ENABLE_VARIABLE}=1 in the environment"
        )
    _load_ours()


# XLA (from jaxlib 0.11) runs a ragged all-to-all across processes as NCCL sends and receives only where this flag
# allows it, refusing the call otherwise; our library serves those sends and receives as one launch of its
# point-to-point engine per group, so loading ours allows them (where the running XLA knows the flag: an unknown
# flag in XLA_FLAGS stops XLA).
RAGGED_OVER_NCCL_FLAG = "xla_gpu_allow_ragged_all_to_all_nccl_send_recv_fallback"


def _xla_knows_flag(name: str) -> bool:
    """Whether the installed jaxlib's XLA defines the flag ``name`` (its name is in the library that parses them)."""
    import mmap

    spec = importlib.util.find_spec("jaxlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "libjax_common.so")
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(name.encode()) >= 0
    return False


def _allow_ragged_all_to_all_over_nccl() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if RAGGED_OVER_NCCL_FLAG not in flags and _xla_knows_flag(RAGGED_OVER_NCCL_FLAG):
        os.environ["XLA_FLAGS"] = f"{flags} --{RAGGED_OVER_NCCL_FLAG}=true".strip()


def _load_ours() -> None:
    global _library
    _allow_ragged_all_to_all_over_nccl()
    real = real_nccl_path()
    if real is not None and REAL_NCCL_VARIABLE not in os.environ:
        os.environ[REAL_NCCL_VARIABLE] = real  # where the library looks first; inherited by child processes
    if _library is None:
        _library = ctypes.CDLL(library_path(), mode=os.RTLD_GLOBAL)
    # The real NCCL is opened now, before JAX's CUDA plugin loads it by the same path: the process then keeps it as
    # our library opened it (RTLD_DEEPBIND: its calls to its own functions stay inside it). Opened once per process.
    _library.ncclGetLastError.restype = ctypes.c_char_p
    _library.ncclGetLastError.argtypes = [ctypes.c_void_p]
    if _library.jax_mscclpp_nccl_open_real_library() != 0 and not runs_collectives():
        reason = (_library.ncclGetLastError(None) or b"").decode()
        raise RuntimeError(
            f"jax_mscclpp.enable_nccl_backend(): our libnccl.so.2 is loaded but has no real NCCL to forward to, so "
            f"every NCCL call will fail: {reason}"
        )


def _export_to_child_processes(ours: str) -> None:
    """Puts ours first in ``LD_PRELOAD``, so that every process started from this one binds it before anything
    else loads a ``libnccl.so.2``, whatever its interpreter processes at start."""
    entries = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    if ours not in entries:
        os.environ["LD_PRELOAD"] = " ".join([ours, *entries])


def _warn(message: str) -> None:
    print(f"jax_mscclpp: {ENABLE_VARIABLE}=1 {' '.join(message.split())}", file=sys.stderr, flush=True)


def switch() -> bool:
    """What ``JAX_MSCCLPP_NCCL=1`` does, at interpreter start (``jax_mscclpp_nccl.pth``) and at ``import
    jax_mscclpp`` (this module's import runs it): ``enable_nccl_backend()``, then ours first in ``LD_PRELOAD`` for
    the processes this one starts. Never raises: where ours cannot take effect, one line on stderr says why (kept as
    ``status()["reason"]``); on a machine without a visible CUDA device, one line says that the switch changes
    nothing there (XLA:CPU never calls NCCL), ours loaded all the same. Whether ours is bound afterwards. Runs once
    per process; later calls answer the first one's outcome."""
    global _switch_failure, _switch_ran
    if _switch_ran:
        return is_active()
    _switch_ran = True
    no_device = "" if cuda_device_visible() else (
        "changes nothing here: no CUDA device is visible (none of " + ", ".join(CUDA_DEVICE_FILES) + ", or "
        "CUDA_VISIBLE_DEVICES hides them all), and XLA:CPU never calls NCCL")
    try:
        ours = library_path()
        refusal = _refusal(ours)
        if refusal is not None:
            raise RuntimeError(refusal)
        _load_ours()
    except (RuntimeError, OSError) as error:
        _switch_failure = str(error)
        _warn(no_device or f"did not take effect: {error}")
        return False
    _export_to_child_processes(ours)
    if no_device:
        _warn(no_device)
    return True


def _not_active_reason(ours: str | None, bound: str | None) -> str | None:
    if ours is None:
        return f"jax_mscclpp's {LIBRARY_NAME} is not installed"
    if bound == ours:
        return None
    if _switch_failure is not None:
        return _switch_failure
    if bound is not None:
        return (f"XLA binds {bound}: it was loaded before ours (the first {LIBRARY_NAME} loaded is the one "
                "dlopen answers); enable_nccl_backend() or JAX_MSCCLPP_NCCL=1 must come before anything loads NCCL")
    if os.environ.get(ENABLE_VARIABLE) == "1":
        return (f"{ENABLE_VARIABLE}=1 was set after jax_mscclpp.nccl_backend was imported; call "
                "enable_nccl_backend() before the first jax.devices()")
    return f"not enabled: neither enable_nccl_backend() nor {ENABLE_VARIABLE}=1"


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
    """For ``info()``: whether ours is the library XLA binds (``active``), the one it binds (``bound``), every
    ``libnccl.so*`` mapped (``mapped``), why ours is not active (``reason``, None when it is), whether
    ``JAX_MSCCLPP_NCCL=1`` asked for it (``requested``), whether it runs collectives on our runtime, where it and the
    real NCCL are, and the calls it ran (``call_counts``)."""
    try:
        ours: str | None = library_path()
    except FileNotFoundError:
        ours = None
    bound = bound_library()
    library = _loaded_library()
    real_opened = None
    if library is not None:
        function = library.jax_mscclpp_nccl_real_library
        function.restype = ctypes.c_char_p
        real_opened = function().decode() or None
    return {
        "active": ours is not None and bound == ours,
        "requested": os.environ.get(ENABLE_VARIABLE) == "1",
        "bound": bound,
        "mapped": loaded_nccl_libraries(),
        "reason": _not_active_reason(ours, bound),
        "runs_collectives": runs_collectives(),
        "library": ours,
        "real_nccl": real_nccl_path(),
        "real_nccl_opened": real_opened,
        "calls": call_counts(),
    }


if os.environ.get(ENABLE_VARIABLE) == "1":
    switch()

__all__ = ["bound_library", "call_counts", "cuda_device_visible", "enable_nccl_backend", "is_active", "library_path",
           "loaded_nccl_libraries", "real_nccl_path", "runs_collectives", "status", "switch"]
