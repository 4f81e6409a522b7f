"""How values of a dtype the kernels do not have travel through them: as the bytes of a dtype they have.

The kernels run the dtypes of ``_types.SUPPORTED_DTYPES``. A collective that only moves data (all_gather,
all_to_all, the permutation) moves any other dtype of whole bytes unchanged, reinterpreted as the unsigned integer
of its width (fp8 variants as uint8, ...); bool travels as uint8 (0 or 1), complex as its real and imaginary parts
side by side (a trailing axis of 2 of the part's float type), which moves and sums like the complex value. A
reduction runs complex sums (on the parts) and bool max/min (on 0/1); every other unsupported case is a TypeError
at trace time (``check``).

The conversion happens where the primitive is lowered (``lowered_through``), not where it is bound, so the
primitives keep the caller's dtype: their transposes and batching rules apply unchanged, and jax.grad of a moved
complex or fp8 value is that of the movement.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from jax import lax
from jax.interpreters import mlir

from ._types import SUPPORTED_DTYPES, Collective, check_dtype

# Collectives that only move data: any dtype of whole bytes can travel as bytes.
MOVES_DATA = frozenset({Collective.ALL_GATHER, Collective.ALL_TO_ALL, Collective.PERMUTE})

_UNSIGNED_OF_WIDTH = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                      8: np.dtype(np.uint64)}


def _whole_bytes(dtype: np.dtype) -> bool:
    """Whether every element of ``dtype`` fills its itemsize (not a packed sub-byte type such as int4, float4)."""
    for info in (jnp.iinfo, jnp.finfo):
        try:
            return info(dtype).bits == 8 * dtype.itemsize
        except ValueError:
            pass
    return False


def carrier(dtype, collective: Collective, op: str = "sum") -> np.dtype | None:
    """The dtype ``dtype`` travels as through ``collective`` (with ``op`` for the reductions): None when the
    kernels have it; raises TypeError when it cannot travel. Complex travels as its part's float dtype, with a
    trailing axis of 2."""
    dtype = np.dtype(dtype)
    if dtype in SUPPORTED_DTYPES:
        return None
    if dtype.kind == "c":
        if collective in MOVES_DATA or (op == "sum" and collective in (Collective.ALL_REDUCE,
                                                                       Collective.REDUCE_SCATTER)):
            return np.dtype(jnp.finfo(dtype).dtype)
    elif dtype == np.bool_:
        if collective in MOVES_DATA or op in ("max", "min"):
            return np.dtype(np.uint8)
    elif collective in MOVES_DATA and _whole_bytes(dtype) and dtype.itemsize in _UNSIGNED_OF_WIDTH:
        return _UNSIGNED_OF_WIDTH[dtype.itemsize]
    return _unsupported(dtype, collective, op)


def _unsupported(dtype: np.dtype, collective: Collective, op: str):
    raise TypeError(f"{collective.name.lower()}: unsupported dtype {dtype.name}" + (
        f" for op {op!r}" if collective not in MOVES_DATA else ""))


def check(dtype, api_name: str, collective: Collective, op: str = "sum") -> None:
    """Raises TypeError, naming what is supported, unless ``dtype`` can go through ``collective`` with ``op``."""
    try:
        carrier(dtype, collective, op)
    except TypeError:
        try:
            check_dtype(dtype, api_name)
        except TypeError as error:
            moves = ("; any other dtype of whole bytes (bool, complex, fp8, ...) travels as bytes through "
                     "all_gather, all_to_all, ppermute and pbroadcast; psum also sums complex, pmax/pmin bool")
            raise TypeError(str(error) + moves) from None


def to_carrier(x, carried: np.dtype):
    """``x`` as the values of ``carried`` (the result of ``carrier``) that stand for its bytes."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    if x.dtype == np.bool_:
        return x.astype(carried)
    return lax.bitcast_convert_type(x, carried)


def from_carrier(y, dtype: np.dtype):
    """``to_carrier``'s inverse: the values of ``dtype`` that ``y`` carries."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return lax.complex(y[..., 0], y[..., 1]).astype(dtype)
    if dtype == np.bool_:
        return y != 0
    return lax.bitcast_convert_type(y, dtype)


def lowered_through(ctx, x, carried: np.dtype, bind):
    """Lowers ``bind`` (a function binding the primitive being lowered) on ``x`` moved as ``carried``: the
    lowering of ``from_carrier(bind(to_carrier(x)))``."""
    dtype = np.dtype(ctx.avals_in[0].dtype)

    def run(value):
        return from_carrier(bind(to_carrier(value, carried)), dtype)

    return mlir.lower_fun(run, multiple_results=False)(ctx, x)
