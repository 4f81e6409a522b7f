"""The vocabulary shared with the native side: collectives, ops, algorithms and dtypes.

Every integer code comes from ``kernels/include/jax_mscclpp/codes.def`` (the one definition, docs/architecture.md
"Codes"), read by ``_codes`` (pure: no jax, no native module), which also builds the enums; this module adds what
needs JAX (the dtypes the collectives run on).
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp

from ._codes import CODE_TABLES, Algorithm, Collective, ReduceOp

REDUCE_OPS = {row["name"]: ReduceOp(row["code"]) for row in CODE_TABLES["reduce_op"]}

# Algorithm names a call may choose (codes.def: those serving some collective), in the table's order.
ALGORITHMS = {row["name"]: Algorithm(row["code"]) for row in CODE_TABLES["algorithm"] if row["collectives"]}

# Algorithms composed in Python from other collectives rather than run by one native kernel:
#   "2ph": hierarchical all_reduce over (slow, fast) axes = our reduce-scatter over the fast axis, the lax
#          collective over the slow axis on 1/n of the data, our all-gather over the fast axis.
COMPOSED_ALGORITHMS = ("2ph",)
_COMPOSED_OF = {"2ph": "ALL_REDUCE"}


def _native_names(collective: Collective, where=lambda row: True) -> tuple[str, ...]:
    return tuple(row["name"] for row in CODE_TABLES["algorithm"]
                 if row["collectives"] >> int(collective) & 1 and where(row))


def _composed(collective: Collective) -> tuple[str, ...]:
    return tuple(name for name, of in _COMPOSED_OF.items() if of == collective.name)


# Algorithm names each collective knows (on some platform). "lax" always means: emit the lax collective.
ALGORITHMS_OF = {c: _native_names(c) + _composed(c) + ("lax",) for c in Collective}

# Algorithms each platform's backend runs: on CPU those codes.def gives a host shape, on GPUs every one.
PLATFORM_ALGORITHMS = {
    "cpu": {c: _native_names(c, lambda row: row["host"] != "kHostNone") + _composed(c) for c in Collective},
    "gpu": {c: _native_names(c) + _composed(c) for c in Collective},
}

# DType codes of the native side, by numpy name.
DTYPE_CODES = {row["name"]: row["code"] for row in CODE_TABLES["dtype"]}

# The dtypes the kernels run: every dtype row of codes.def; the 8-byte ones need jax_enable_x64.
_ALWAYS = tuple(row["name"] for row in CODE_TABLES["dtype"] if row["bytes"] < 8)
_WITH_X64 = tuple(row["name"] for row in CODE_TABLES["dtype"] if row["bytes"] == 8)
SUPPORTED_DTYPES = tuple(np.dtype(jnp.dtype(n)) for n in _ALWAYS + _WITH_X64)


def check_dtype(dtype, api_name: str) -> None:
    """Raises TypeError, naming what is supported, unless ``dtype`` is one the collectives run on."""
    if np.dtype(dtype) not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{api_name}: unsupported dtype {np.dtype(dtype).name}; supported: "
            f"{', '.join(_ALWAYS)} (and {', '.join(_WITH_X64)} with jax_enable_x64)"
        )
