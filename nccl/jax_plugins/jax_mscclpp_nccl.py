"""``JAX_MSCCLPP_NCCL=1`` where the jax_mscclpp package cannot act yet; installed as
``<site-packages>/jax_plugins/jax_mscclpp_nccl.py``, beside ``<site-packages>/jax_mscclpp/``.

- ``at_interpreter_start()``: ``jax_mscclpp_nccl.pth`` calls it, with the variable set, in every interpreter whose
  ``site`` processes that site-packages folder. It loads ``jax_mscclpp/nccl_backend.py`` alone, as
  ``jax_mscclpp.nccl_backend`` (the package's ``__init__`` imports JAX, which must not happen at interpreter start),
  and that module's import runs the switch (``nccl_backend.switch``: ours loaded, and exported in ``LD_PRELOAD`` to
  the processes this one starts). Never raises: a failure is one line on stderr.
- ``initialize()``: JAX's plugin discovery imports every module of the ``jax_plugins`` namespace found on
  ``sys.path`` and calls its ``initialize()`` at the first backend use, also in a process whose interpreter never
  processed site-packages (the folder only on ``PYTHONPATH``, as in children started as ``/proc/self/exe``). With the
  variable set it registers ``check_binding`` to run once every plugin is initialized (JAX's CUDA plugin has loaded
  NVIDIA's NCCL then) and before any backend exists. It cannot load ours itself: JAX initializes plugins in no fixed
  order (a set), so ours would come before NVIDIA's in some processes of a job and after it in others.

This file stands alone: where site-packages were not processed, an editable install's package is not importable. It
knows ours by its place beside this folder and by an export only ours has (``nccl/include/.../introspection.h``).
"""

import os
import sys

VARIABLE = "JAX_MSCCLPP_NCCL"
LIBRARY_NAME = "libnccl.so.2"
OUR_EXPORT = "jax_mscclpp_nccl_group_depth"
SITE_PACKAGES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUR_LIBRARY = os.path.join(SITE_PACKAGES, "jax_mscclpp", "lib", LIBRARY_NAME)


def _warn(message: str) -> None:
    print(f"jax_mscclpp: {VARIABLE}=1 {message}", file=sys.stderr, flush=True)


def _load_nccl_backend():
    """``jax_mscclpp/nccl_backend.py`` as ``jax_mscclpp.nccl_backend``, without importing the package: its place
    comes from the package's spec (``find_spec`` of a top-level name runs no code of it)."""
    import importlib.util

    name = "jax_mscclpp.nccl_backend"
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("jax_mscclpp")
    locations = list(package.submodule_search_locations or []) if package is not None else []
    for location in locations:
        path = os.path.join(location, "nccl_backend.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
    raise ModuleNotFoundError(f"no jax_mscclpp/nccl_backend.py in {locations or 'this interpreter path'}")


def at_interpreter_start() -> None:
    try:
        _load_nccl_backend()
    except Exception as error:  # noqa: BLE001 (anything raised here is a traceback at every interpreter start)
        _warn(f"did not take effect: jax_mscclpp's nccl_backend cannot be loaded ({type(error).__name__}: {error})")


def _bound_library() -> tuple[str | None, bool]:
    """(path, is ours) of the ``libnccl.so.2`` that ``dlopen("libnccl.so.2")`` answers now; (None, False) while none
    is loaded. Loads nothing. Same answer as ``jax_mscclpp.nccl_backend.bound_library``."""
    import ctypes

    try:
        handle = ctypes.CDLL(LIBRARY_NAME, mode=os.RTLD_NOLOAD)
        address = ctypes.cast(handle.ncclGetVersion, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None, False
    is_ours = hasattr(handle, OUR_EXPORT)
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            start, _, end = fields[0].partition("-")
            if len(fields) == 6 and int(start, 16) <= address < int(end, 16):
                return os.path.realpath(fields[5].strip()), is_ours
    return None, is_ours


def _cuda_requested() -> bool:
    """Whether this process may start JAX's CUDA backend: a CUDA device file is there (JAX's own test) and JAX's
    platforms, when named, include CUDA. Otherwise XLA never calls NCCL."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-")):
        return False
    if not any(os.path.exists(path) for path in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")):
        return False
    from jax._src import config

    platforms = config.jax_platforms.value
    return not platforms or any(name.strip() in ("cuda", "gpu") for name in platforms.split(","))


def check_binding(**_) -> None:
    """Raises ``RuntimeError`` naming both libraries when ``JAX_MSCCLPP_NCCL=1`` and XLA's CUDA backend is about to
    start with a ``libnccl.so.2`` other than ours bound: raised from JAX's first backend use (``jax.devices()``,
    ``jit``), before any communicator exists, every time that use is retried."""
    if os.environ.get(VARIABLE) != "1" or not _cuda_requested():
        return
    bound, is_ours = _bound_library()
    if is_ours:
        return
    backend = sys.modules.get("jax_mscclpp.nccl_backend")
    why = getattr(backend, "status", lambda: {})().get("reason") if backend is not None else None
    if why is None:
        why = (f"jax_mscclpp_nccl.pth did not run in this process: its interpreter ({sys.executable}, prefix "
               f"{sys.prefix}) does not process {SITE_PACKAGES} as a site-packages folder (it is only on sys.path, "
               "as for a child started as /proc/self/exe or by another interpreter path, or with -S), and no parent "
               "process exported ours in LD_PRELOAD")
    raise RuntimeError(
        f"jax_mscclpp: {VARIABLE}=1, but XLA's CUDA backend would run its collectives on "
        f"{bound or 'the first libnccl.so.2 on the loader path'} instead of jax_mscclpp's {OUR_LIBRARY}: {why}. "
        f"Start this process with the interpreter whose site-packages hold jax_mscclpp, or set LD_PRELOAD="
        f"{OUR_LIBRARY}, or call jax_mscclpp.enable_nccl_backend() before the first jax.devices(); unset {VARIABLE} "
        "to run on NVIDIA's NCCL")


def initialize() -> None:
    """JAX's plugin entry point: registers ``check_binding`` when ``JAX_MSCCLPP_NCCL=1`` (one environment lookup
    otherwise); registers no backend."""
    if os.environ.get(VARIABLE) != "1":
        return
    from jax._src import xla_bridge

    register = getattr(xla_bridge, "register_plugin_callbacks", None)
    if register is not None:
        register(check_binding)
