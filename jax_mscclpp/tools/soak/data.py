"""The data of one soak call and the comparison of ours with lax.

Every rank's block is drawn from its own stream, seeded by (seed, call, device position): a process builds only the
blocks of its own devices, and ``(seed, call)`` reproduces a call's data exactly. Floats are uniform in [-3, 3),
now and then with +-Inf mixed in, and NaN too except for max and min (they must propagate as lax propagates them;
lax's pmax and pmin on CPU devices drop NaN where ours propagate it, as ``maximum`` does: docs/bad_input.md);
integers span the dtype's range (sums wrap, as in XLA).

The comparison is exact (NaN equal to NaN) for integers and for every op that only moves data or picks values
(all_gather, all_to_all, max, min); float sums differ from lax only by summation order, within the tolerance
of ``jax_mscclpp.tools.bench.programs`` per chained step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from ..bench.programs import FLOAT_TOLERANCE
from ...collective_specs import spec_named
from .configs import Config

SPECIAL_VALUE_RATE = 0.05  # share of float calls whose data holds NaN and +-Inf


def _random_bytes(rng: np.random.Generator, nbytes: int) -> np.ndarray:
    """``nbytes`` uniformly random bytes (the generator's raw words: several times faster than its samplers)."""
    return rng.bit_generator.random_raw((nbytes + 7) // 8).view(np.uint8)[:nbytes]


def _block(rng: np.random.Generator, n: int, dtype, specials: tuple) -> np.ndarray:
    """``n`` random values: integers over the dtype's whole range, floats uniform in [-3, 3) (in the dtype's
    precision) with ``specials`` at random positions."""
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        return _random_bytes(rng, n * dtype.itemsize).view(dtype)
    bits = _random_bytes(rng, 4 * n).view(np.uint32)
    # 23 random mantissa bits under the exponent of 1.0: uniform in [1, 2).
    block = ((bits >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32)
    block -= np.float32(1.5)
    block *= np.float32(6)
    block = block.astype(dtype, copy=False)
    if specials and n:
        where = rng.integers(0, n, size=min(n, len(specials)))
        block[where] = np.array(specials[: len(where)], dtype=np.float32).astype(dtype)
    return block


def make_input(config: Config, mesh, seed: int, call: int) -> jax.Array:
    """The operand of call ``call``: a 1-D global array, one rank's flattened operand per device, in the row-major
    device order of ``mesh`` (what ``P(mesh_axes)`` puts on each device)."""
    n = int(np.prod(config.local_shape, dtype=np.int64))
    call_rng = np.random.default_rng([seed, call])
    specials = ()
    if jnp.issubdtype(jnp.dtype(config.dtype), jnp.floating) and call_rng.random() < SPECIAL_VALUE_RATE:
        picks = config.op == "all_reduce" and config.redop != "sum"
        specials = (np.inf, -np.inf) if picks else (np.nan, np.inf, -np.inf)

    def block(index):
        start = index[0].start or 0
        position = start // n if n else 0
        return _block(np.random.default_rng([seed, call, position]), n, config.dtype, specials)

    sharding = NamedSharding(mesh, P(config.mesh_axes))
    return jax.make_array_from_callback((config.num_devices * n,), sharding, block)


@dataclasses.dataclass(frozen=True)
class Comparison:
    ok: bool
    max_error: float  # largest |ours - lax| over finite values (inf when shapes or special values differ)
    tolerance: float
    detail: str = ""


def exact(config: Config) -> bool:
    """Whether ours must equal lax bit for bit (up to NaN payloads)."""
    if not jnp.issubdtype(jnp.dtype(config.dtype), jnp.floating):
        return True
    return not spec_named(config.op).collective.reduces or config.redop != "sum"


def _span(shard) -> tuple:
    """Where a shard of a 1-D global array lies: (start, stop)."""
    index = shard.index[0]
    return (index.start or 0, index.stop)


def compare(config: Config, ours: jax.Array, ref: jax.Array) -> Comparison:
    """Ours against lax on this process's shards of ours (the reference's shard at the same place of the global
    array, which may live on other devices: --reference cpu)."""
    floating = jnp.issubdtype(jnp.dtype(config.dtype), jnp.floating)
    worst, scale = 0.0, 1.0
    reference = {_span(shard): shard for shard in ref.addressable_shards}
    for a_shard in ours.addressable_shards:
        b_shard = reference.get(_span(a_shard))
        if b_shard is None:
            return Comparison(False, float("inf"), 0.0, f"no reference shard at {_span(a_shard)}")
        a, b = np.asarray(a_shard.data), np.asarray(b_shard.data)
        if a.shape != b.shape or a.dtype != b.dtype:
            return Comparison(False, float("inf"), 0.0, f"shape/dtype {a.shape} {a.dtype} vs lax {b.shape} {b.dtype}")
        if np.array_equal(a, b):
            if floating and b.size:
                scale = max(scale, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
            continue
        if not floating:
            bad = int(np.count_nonzero(a != b))
            return Comparison(False, float("inf"), 0.0, f"{bad} of {a.size} elements differ")
        wide = np.float64 if a.dtype == np.float64 else np.float32
        a, b = a.astype(wide, copy=False), b.astype(wide, copy=False)
        special = ~np.isfinite(b)
        special |= ~np.isfinite(a)
        if not np.array_equal(a[special], b[special], equal_nan=True):
            return Comparison(False, float("inf"), 0.0, "NaN or Inf differ from lax's")
        a, b = a[~special], b[~special]
        if b.size:
            diff = np.subtract(a, b)
            np.abs(diff, out=diff)
            worst = max(worst, float(diff.max()))
            scale = max(scale, float(np.max(np.abs(b))))
    tolerance = 0.0 if not floating or exact(config) else (
        FLOAT_TOLERANCE[jnp.dtype(config.dtype).name] * scale * max(1, config.chain))
    return Comparison(worst <= tolerance, worst, tolerance)
