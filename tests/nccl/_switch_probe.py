"""One process of the JAX_MSCCLPP_NCCL=1 switch tests (tests/nccl/test_enable_backend.py), started by path in an
interpreter of the test's virtual environment or in one started from it; prints one JSON line.

    python _switch_probe.py report            what this process holds: was the start-up hook run, which NCCL is bound
    python _switch_probe.py other_after       loads JAX_MSCCLPP_REAL_NCCL (as JAX's CUDA plugin does), starts JAX
    python _switch_probe.py other_first       loads JAX_MSCCLPP_REAL_NCCL first, then imports jax_mscclpp: its
                                              info()["nccl_backend"]
    python _switch_probe.py variable_after_other   the same, JAX_MSCCLPP_NCCL=1 set just before the import
    python _switch_probe.py launch ARGS...    starts `/proc/self/exe _switch_probe.py ARGS...` the way JAX's
                                              multi-process test launcher starts its workers: this process's
                                              environment copied, its sys.path as PYTHONPATH; the child's JSON and
                                              stderr
    python _switch_probe.py spawn FLAGS ARGS  starts `sys.executable FLAGS _switch_probe.py ARGS` with a copy of
                                              this process's environment (subprocess, as torchrun and most
                                              launchers do); FLAGS: "-", "-I" or "-S"
"""

import sys

AT_START = {"backend_loaded": "jax_mscclpp.nccl_backend" in sys.modules, "jax_plugins_imported": "jax_plugins" in
            sys.modules, "jax_imported": "jax" in sys.modules}

import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402


def bound() -> dict:
    """The libnccl.so.2 dlopen answers now (RTLD_NOLOAD): its path and whether it is ours."""
    try:
        handle = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD)
    except OSError:
        return {"path": None, "ours": False}
    address = ctypes.cast(handle.ncclGetVersion, ctypes.c_void_p).value
    path = None
    for line in open("/proc/self/maps"):
        fields = line.split(None, 5)
        start, _, end = fields[0].partition("-")
        if len(fields) == 6 and int(start, 16) <= address < int(end, 16):
            path = os.path.realpath(fields[5].strip())
    return {"path": path, "ours": hasattr(handle, "jax_mscclpp_nccl_group_depth")}


def report() -> dict:
    mapped = sorted({os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps") if "libnccl.so" in line})
    return {"at_start": AT_START, "prefix": sys.prefix, "executable": sys.executable,
            "ld_preload": os.environ.get("LD_PRELOAD", ""), "real_nccl": os.environ.get("JAX_MSCCLPP_REAL_NCCL"),
            "mapped": mapped, "bound": bound()}


def other_after() -> dict:
    """NVIDIA's library (JAX_MSCCLPP_REAL_NCCL) loaded as JAX's CUDA plugin loads it (absolute path, RTLD_LOCAL);
    then what JAX's plugin discovery finds and does with the check of jax_plugins/jax_mscclpp_nccl.py."""
    import importlib.util

    ctypes.CDLL(os.environ["JAX_MSCCLPP_REAL_NCCL"])
    out = report()
    out["hook_found"] = importlib.util.find_spec("jax_plugins.jax_mscclpp_nccl") is not None
    import jax
    from jax._src import xla_bridge

    jax.devices()
    out["check_registered"] = any(getattr(c, "__module__", "") == "jax_plugins.jax_mscclpp_nccl"
                                  for c in getattr(xla_bridge, "_plugin_callbacks", []))
    return out


def other_first(set_variable: bool) -> dict:
    """NVIDIA's library loaded first, then `import jax_mscclpp` (with JAX_MSCCLPP_NCCL=1 set just before it when
    `set_variable`): its info()["nccl_backend"]."""
    ctypes.CDLL(os.environ["JAX_MSCCLPP_REAL_NCCL"])
    if set_variable:
        os.environ["JAX_MSCCLPP_NCCL"] = "1"
    import jax_mscclpp

    return {**report(), "status": jax_mscclpp.info()["nccl_backend"]}


def run_child(command: list[str], env: dict) -> dict:
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    lines = proc.stdout.strip().splitlines()
    return {"returncode": proc.returncode, "stderr": proc.stderr,
            "child": json.loads(lines[-1]) if proc.returncode == 0 and lines else None}


def launch(args: list[str]) -> dict:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.pathsep.join(sys.path), env.get("PYTHONPATH", "")] if p)
    return {**report(), "launched": run_child(["/proc/self/exe", os.path.abspath(__file__), *args], env)}


def spawn(flags: str, args: list[str]) -> dict:
    command = [sys.executable, *([] if flags == "-" else [flags]), os.path.abspath(__file__), *args]
    return {**report(), "launched": run_child(command, os.environ.copy())}


if __name__ == "__main__":
    scenario, rest = sys.argv[1], sys.argv[2:]
    result = {"report": report, "other_after": other_after, "other_first": lambda: other_first(False),
              "variable_after_other": lambda: other_first(True)}.get(scenario)
    if result is not None:
        print(json.dumps(result()))
    elif scenario == "launch":
        print(json.dumps(launch(rest)))
    else:
        print(json.dumps(spawn(rest[0], rest[1:])))
