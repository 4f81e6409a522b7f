"""Random inputs and comparisons against lax, shared by the collective tests."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

# Relative to the magnitude of what was summed (the same collective over |inputs|, at least 1): sums in a
# different order round differently, by up to about (n - 1) roundings of the summands' magnitude, and cancellation
# can leave a result far smaller than that.
FLOAT_TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 4e-3, "bfloat16": 3e-2}


def random_array(rng, shape, dtype):
    """Random values spanning the dtype (integers over their whole range), never all zeros."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(rng.standard_normal(shape).astype(np.float32) * 3).astype(dtype)
    info = jnp.iinfo(dtype)  # jnp's: it knows int4, uint4, int2, uint2 too
    lo, hi = max(int(info.min), -(2**31)), min(int(info.max), 2**31 - 1)
    return jnp.asarray(rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype))


def sharded(fn, mesh, in_specs, out_specs, check_vma=True):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma))


def assert_same(ours, ref, magnitude=None):
    """Exact for integers and max/min; within the dtype's rounding for float sums. ``magnitude``: the same
    collective over the inputs' absolute values (a pytree like ``ref``); without it, the reference's largest
    magnitude stands in."""
    ours_leaves, ref_leaves = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)
    mag_leaves = [None] * len(ref_leaves) if magnitude is None else jax.tree_util.tree_leaves(magnitude)
    assert len(ours_leaves) == len(ref_leaves) == len(mag_leaves)
    for a, b, m in zip(ours_leaves, ref_leaves, mag_leaves):
        a, b = np.asarray(jax.block_until_ready(a)), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        name = jnp.dtype(a.dtype).name
        if name in FLOAT_TOL:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            if m is None:
                scale = max(1.0, float(np.max(np.abs(b64)))) if b64.size else 1.0
            else:
                scale = np.maximum(1.0, np.abs(np.asarray(m).astype(np.float64)))
            np.testing.assert_array_less(np.abs(a64 - b64), FLOAT_TOL[name] * scale + 1e-300)
        else:
            np.testing.assert_array_equal(a, b)


def compare_with_lax(ours_fn, lax_fn, mesh, args, in_specs, out_specs, check_vma=True):
    """Runs both under jit(shard_map) on the same inputs (blocking on each) and asserts they agree; float results
    within their rounding relative to the lax collective over the inputs' absolute values."""
    reference = sharded(lax_fn, mesh, in_specs, out_specs, check_vma)
    ours = jax.block_until_ready(sharded(ours_fn, mesh, in_specs, out_specs, check_vma)(*args))
    ref = jax.block_until_ready(reference(*args))
    magnitude = None
    if any(jnp.issubdtype(leaf.dtype, jnp.floating) for leaf in jax.tree_util.tree_leaves(args)):
        magnitude = reference(*jax.tree_util.tree_map(jnp.abs, args))
    assert_same(ours, ref, magnitude)
    return ours


# The fp8 variants this jax has (jax 0.10 has them all).
FP8_DTYPES = [name for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu")
              if hasattr(jnp, name)]
# Dtypes the kernels do not have, moved as bytes by the data movement (jax_mscclpp/carriers.py).
BYTE_DTYPES = ["bool", "complex64", *FP8_DTYPES]
# Dtypes of fewer bits than a byte this jax has: moved packed into bytes, or one to a byte (carriers.py).
SUB_BYTE_DTYPES = [name for name in ("int4", "uint4", "int2", "uint2", "float4_e2m1fn") if hasattr(jnp, name)]


def any_array(rng, shape, dtype):
    """Random values of any dtype, never all zeros: bool about half true, complex with both parts random, fp8
    from random floats (positive for float8_e8m0fnu, which has no sign), the others as ``random_array``."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        first = np.arange(np.prod(shape)).reshape(shape) == 0
        return jnp.asarray(rng.integers(0, 2, size=shape).astype(bool) | first)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        parts = rng.standard_normal((2, *shape)).astype(np.float32) * 3
        return jnp.asarray((parts[0] + 1j * parts[1]).astype(dtype))
    if dtype.name == "float8_e8m0fnu":
        return jnp.asarray(np.abs(rng.standard_normal(shape)).astype(np.float32) * 3 + 2**-10).astype(dtype)
    if dtype.name.startswith("float8"):
        return jnp.asarray(rng.standard_normal(shape).astype(np.float32) * 3).astype(dtype)
    return random_array(rng, shape, dtype)


def assert_same_bits(ours, ref):
    """The same shape, dtype and bytes."""
    a, b = np.asarray(jax.block_until_ready(ours)), np.asarray(jax.block_until_ready(ref))
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


__all__ = ["BYTE_DTYPES", "FP8_DTYPES", "SUB_BYTE_DTYPES", "P", "any_array", "assert_same", "assert_same_bits",
           "compare_with_lax", "random_array", "sharded", "FLOAT_TOL"]


# Our sums that end in more than the sum (psum_start / psum_done, the fused epilogues), by name.
OWN_SUMS = ("psum_start", "all_reduce_residual", "all_reduce_residual_rmsnorm")


def own_sum(name, v, r, weight, axis_name, axis_index_groups):
    """``r`` plus the sum of ``v`` over ``axis_name`` by our sum ``name`` (OWN_SUMS), with ``weight``'s RMSNorm for
    the last: what each returns."""
    import jax_mscclpp as jm
    from jax_mscclpp import fused

    if name == "psum_start":
        return r + jm.psum_done(jm.psum_start(v, axis_name, axis_index_groups=axis_index_groups))
    if name == "all_reduce_residual":
        return fused.all_reduce_residual(v, r, axis_name, axis_index_groups=axis_index_groups)
    return fused.all_reduce_residual_rmsnorm(v, r, weight, axis_name, axis_index_groups=axis_index_groups)
