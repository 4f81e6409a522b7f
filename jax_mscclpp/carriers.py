"""How values of a dtype the kernels do not have travel through them, and the calls they cannot travel through.

The kernels run the dtypes of ``_types.SUPPORTED_DTYPES``. A collective that only moves data (all_gather,
all_to_all, the permutation) moves every other dtype unchanged, as values of a dtype the kernels have:

- a dtype of whole bytes as the unsigned integer of its width (the fp8 variants as uint8, ...), XORed with the
  bits of the dtype's zero, so that a rank the permutation sends nothing gets the dtype's zero, as lax's does
  (float8_e8m0fnu has no zero: its 0 converts to 0xff);
- bool as uint8 (0 or 1);
- complex as its real and imaginary parts side by side (a trailing axis of 2 of the part's float type), which
  moves and sums like the complex value;
- a dtype of fewer bits than a byte (int4, uint4, int2, uint2, float4_e2m1fn) packed ``8 // bits`` elements to a
  uint8 (``lax.bitcast_convert_type``) where every block's element count is a multiple of that, so that no byte
  straddles two blocks; otherwise one element to a byte, converted exactly to the one-byte type that holds every
  value (int8, uint8, or float8_e4m3fn moved as uint8);
- a PRNG key array as its key data (uint32).

A reduction runs complex sums (on the parts) and bool max/min (on 0/1) besides the kernels' dtypes. Every other
call of a dtype lax takes lowers to lax's collective, with the reason on the ``jax_mscclpp.collectives`` logger and
in ``explain`` (``lax_reason``; ``primitives._lower``): the sums, maxima and minima of the fp8 variants, of the
sub-byte dtypes and of every other dtype no kernel reduces, and complex max/min. The only dtype errors are lax's own
(``check``).

The conversion happens where the primitive is lowered (``lowered_through``), not where it is bound, so the
primitives keep the caller's dtype: their transposes and batching rules apply unchanged, and jax.grad of a moved
complex or fp8 value is that of the movement.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax
from jax.interpreters import mlir

from ._types import SUPPORTED_DTYPES, Collective

_UNSIGNED_OF_WIDTH = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                      8: np.dtype(np.uint64)}


class Carrier(NamedTuple):
    """How a dtype travels: as ``dtype`` (one the kernels have), ``pack`` elements to one carried element, or, with
    ``widened``, each element converted exactly to ``widened`` (a one-byte type) and moved as ``dtype``. ``zero``:
    the carried bits of the dtype's zero, XORed into every carried element (0 for all but float8_e8m0fnu)."""

    dtype: np.dtype
    pack: int = 1
    widened: np.dtype | None = None
    zero: int = 0


# The one-byte type that holds every value of a sub-byte type of each kind: int4/int2, uint4/uint2, float4_e2m1fn.
_WIDENED = ((jnp.signedinteger, np.dtype(np.int8)), (jnp.unsignedinteger, np.dtype(np.uint8)),
            (jnp.floating, np.dtype(jnp.float8_e4m3fn)))


def dtype_name(dtype) -> str:
    """numpy's name of ``dtype``, or JAX's for an extended dtype (``key<fry>``)."""
    return dtype.name if _is_key(dtype) else np.dtype(dtype).name


def _is_key(dtype) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _bits(dtype: np.dtype) -> int | None:
    """The bits of one element of a numeric ``dtype`` (4 for int4 and float4_e2m1fn, whose itemsize is 1)."""
    for info in (jnp.iinfo, jnp.finfo):
        try:
            return info(dtype).bits
        except ValueError:
            pass
    return None


def _decide(dtype, collective: Collective, op: str, block_elements: int | None) -> tuple[Carrier | None, str | None]:
    """(how ``dtype`` travels through ``collective`` with ``op``, why lax's collective runs it instead): both None
    when the kernels have it."""
    if _is_key(dtype):
        if not collective.reduces:
            return Carrier(np.dtype(np.uint32)), None
        return None, f"dtype {dtype.name} is not supported for op {op!r}: a PRNG key has no arithmetic"
    dtype = np.dtype(dtype)
    if dtype in SUPPORTED_DTYPES:
        return None, None
    moves = not collective.reduces  # any dtype can travel through a collective that only moves data
    if dtype.kind == "c":
        if moves or op == "sum":
            return Carrier(np.dtype(jnp.finfo(dtype).dtype)), None
    elif dtype == np.bool_:
        if moves or op in ("max", "min"):
            return Carrier(np.dtype(np.uint8)), None
    elif moves:
        bits = _bits(dtype)
        if bits == 8 * dtype.itemsize and dtype.itemsize in _UNSIGNED_OF_WIDTH:
            unsigned = _UNSIGNED_OF_WIDTH[dtype.itemsize]
            return Carrier(unsigned, zero=int(np.zeros((), np.float32).astype(dtype).view(unsigned))), None
        if bits is not None and bits < 8 and 8 % bits == 0:
            pack = 8 // bits
            if block_elements is None or block_elements % pack == 0:
                return Carrier(np.dtype(np.uint8), pack), None
            widened = next(wide for kind, wide in _WIDENED if jnp.issubdtype(dtype, kind))
            return Carrier(widened if widened in SUPPORTED_DTYPES else np.dtype(np.uint8), widened=widened), None
        return None, f"dtype {dtype.name} is not supported: ours moves elements of whole bytes or of 1, 2 or 4 bits"
    return None, f"dtype {dtype.name} is not supported for op {op!r}: no kernel of ours reduces it"


def carrier(dtype, collective: Collective, op: str = "sum", block_elements: int | None = None) -> Carrier | None:
    """How ``dtype`` travels through ``collective`` (with ``op`` for the reductions) in blocks of
    ``block_elements`` elements (None: any size ours takes): None when the kernels have it, or when ours cannot
    run it (``lax_reason`` then says why)."""
    return _decide(dtype, collective, op, block_elements)[0]


def lax_reason(dtype, collective: Collective, op: str = "sum") -> str | None:
    """Why a call of ``collective`` (with ``op``) on ``dtype`` runs lax's collective, or None when ours runs it (the
    kernels have the dtype, or ``carrier`` gives how it travels, whatever the call's size)."""
    return _decide(dtype, collective, op, None)[1]


def check(dtype, api_name: str, collective: Collective, op: str = "sum") -> None:
    """Raises TypeError where lax's collective refuses ``dtype`` at trace time too: a reduction without that
    arithmetic, which is a sum of bool (psum counts bools as int32 before this check, as lax does) or any reduction
    of a PRNG key. Every other dtype runs, ours or lax's (``lax_reason``)."""
    if not collective.reduces:
        return
    if _is_key(dtype) or (np.dtype(dtype) == np.bool_ and op == "sum"):
        raise TypeError(f"{api_name}: unsupported dtype {dtype_name(dtype)} for op {op!r} (as lax's: the "
                        "reduction has no such arithmetic)")


def to_carrier(x, carried: Carrier, leading: int = 0):
    """``x`` as the values of ``carried`` (the result of ``carrier``) that stand for its bytes. ``leading``: the
    leading dimensions of ``x`` that index blocks (packed elements never straddle them)."""
    if _is_key(x.dtype):
        return jax.random.key_data(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    if x.dtype == np.bool_:
        return x.astype(carried.dtype)
    if carried.widened is not None:
        x = x.astype(carried.widened)
        return x if x.dtype == carried.dtype else lax.bitcast_convert_type(x, carried.dtype)
    if carried.pack > 1:
        x = x.reshape(x.shape[:leading] + (-1, carried.pack))
    bits = lax.bitcast_convert_type(x, carried.dtype)
    return bits ^ np.asarray(carried.zero, carried.dtype) if carried.zero else bits


def from_carrier(y, dtype, carried: Carrier, shape: tuple, *, like=None):
    """``to_carrier``'s inverse: the values of ``dtype`` and ``shape`` that ``y`` (moved as ``carried``) carries.
    ``like``: an array of ``dtype`` (a PRNG key array: the keys take its implementation)."""
    if _is_key(dtype):
        return jax.random.wrap_key_data(y, impl=jax.random.key_impl(like))
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return lax.complex(y[..., 0], y[..., 1]).astype(dtype)
    if dtype == np.bool_:
        return y != 0
    if carried.widened is not None:
        if y.dtype != carried.widened:
            y = lax.bitcast_convert_type(y, carried.widened)
        return y.astype(dtype)
    if carried.zero:
        y = y ^ np.asarray(carried.zero, carried.dtype)
    return lax.bitcast_convert_type(y, dtype).reshape(shape)


def lowered_through(ctx, x, carried: Carrier, bind, leading: int = 0):
    """Lowers ``bind`` (a function binding the primitive being lowered) on ``x`` moved as ``carried``: the
    lowering of ``from_carrier(bind(to_carrier(x)))``. ``leading``: as ``to_carrier``'s."""
    dtype, shape = ctx.avals_in[0].dtype, tuple(ctx.avals_out[0].shape)

    def run(value):
        return from_carrier(bind(to_carrier(value, carried, leading)), dtype, carried, shape, like=value)

    return mlir.lower_fun(run, multiple_results=False)(ctx, x)
