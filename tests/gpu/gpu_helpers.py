"""Helpers shared by the GPU primitive tests.

Nothing here imports jax_mscclpp at module level (the package loads its native module), so the tests collect
without a build; VirtualRanks is imported when a test first builds one.
"""

import os

import numpy as np

INPUT, OUTPUT, SCRATCH = 0, 1, 2  # buffers of a virtual rank (tests.harness.virtual_ranks)
DTYPES = ["float32", "bfloat16", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
          "int64", "uint64"]
REDUCE_OPS = ["sum", "max", "min"]


def VirtualRanks(*args, **kwargs):  # noqa: N802 - stands in for the class
    from tests.harness.virtual_ranks import VirtualRanks as _VirtualRanks

    return _VirtualRanks(*args, **kwargs)


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(**extra) -> dict:
    """Environment for subprocesses: NVLink multicast off, CPU-only JAX, the repository on the path (the harness is
    tests.harness), the test's settings."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env["NCCL_NVLS_ENABLE"] = "0"
    env.pop("JAX_MSCCLPP_NVLS", None)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def random_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=n, dtype=np.uint8)


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def is_float(dt) -> bool:
    """Floating-point dtype, bfloat16 (numpy kind 'V' from ml_dtypes) included."""
    dt = np.dtype(dt)
    return dt.kind == "f" or dt.name == "bfloat16"
