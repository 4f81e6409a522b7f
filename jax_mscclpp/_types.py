"""The vocabulary shared with the native side: collectives, ops, algorithms and dtypes.

The integer codes travel to the FFI handlers as custom-call attributes; they mirror ``ffi/collective_types.h``.
"""

from __future__ import annotations

import enum

import numpy as np
import jax.numpy as jnp


class Collective(enum.IntEnum):
    ALL_REDUCE = 0
    ALL_GATHER = 1
    REDUCE_SCATTER = 2
    ALL_TO_ALL = 3

    @property
    def target(self) -> str:
        """The FFI target name of this collective (the same on every platform)."""
        return "jax_mscclpp_" + self.name.lower()


class ReduceOp(enum.IntEnum):
    SUM = 0
    MAX = 1
    MIN = 2


REDUCE_OPS = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN}


class Algorithm(enum.IntEnum):
    ONE_PHASE_ALL_PAIRS_LL = 0
    TWO_PHASE_ALL_PAIRS_LL = 1
    TWO_PHASE_ALL_PAIRS_HB = 2
    TWO_PHASE_RING = 3
    TWO_PHASE_NVLS = 4
    ALL_PAIRS = 5
    PLAN = 6  # a registered execution plan (plans.py)
    ONE_PHASE_ALL_PAIRS_HB = 9


ALGORITHMS = {
    "1pa_ll": Algorithm.ONE_PHASE_ALL_PAIRS_LL,
    "1pa_hb": Algorithm.ONE_PHASE_ALL_PAIRS_HB,
    "2pa_ll": Algorithm.TWO_PHASE_ALL_PAIRS_LL,
    "2pa_hb": Algorithm.TWO_PHASE_ALL_PAIRS_HB,
    "2pr": Algorithm.TWO_PHASE_RING,
    "2pa_nvls": Algorithm.TWO_PHASE_NVLS,
    "allpairs": Algorithm.ALL_PAIRS,
}

# Algorithms composed in Python from other collectives rather than run by one native kernel:
#   "2ph": hierarchical all_reduce over (slow, fast) axes = our reduce-scatter over the fast axis, the lax
#          collective over the slow axis on 1/n of the data, our all-gather over the fast axis.
COMPOSED_ALGORITHMS = ("2ph",)

# Algorithm names each collective knows (on some platform). "lax" always means: emit the lax collective.
ALGORITHMS_OF = {
    Collective.ALL_REDUCE: ("1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "2pr", "2pa_nvls", "2ph", "lax"),
    Collective.ALL_GATHER: ("allpairs", "lax"),
    Collective.REDUCE_SCATTER: ("allpairs", "lax"),
    Collective.ALL_TO_ALL: ("allpairs", "lax"),
}

# DType codes of the native side (ffi/collective_types.h, DType; kernels/include/jax_mscclpp/reduce.cuh).
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2, "float64": 3, "int8": 4, "uint8": 5, "int16": 6,
               "uint16": 7, "int32": 8, "uint32": 9, "int64": 10, "uint64": 11}

_ALWAYS = ("float32", "bfloat16", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32")
_WITH_X64 = ("float64", "int64", "uint64")
SUPPORTED_DTYPES = tuple(np.dtype(jnp.dtype(n)) for n in _ALWAYS + _WITH_X64)


def check_dtype(dtype, api_name: str) -> None:
    """Raises TypeError, naming what is supported, unless ``dtype`` is one the collectives run on."""
    if np.dtype(dtype) not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{api_name}: unsupported dtype {np.dtype(dtype).name}; supported: "
            f"{', '.join(_ALWAYS)} (and {', '.join(_WITH_X64)} with jax_enable_x64)"
        )
