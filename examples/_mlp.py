"""The small row-parallel MLP the algorithm examples serve (custom_algorithm.py, chunk_routing.py)."""

from __future__ import annotations


def row_parallel_mlp(devices, seed: int, dtype: str):
    """A two-layer tensor-parallel MLP over ``devices`` (mesh axis "tp"): its random inputs ``(x, w1, w2)`` and
    ``mlp(psum)``, the jitted model whose row-parallel matmul's partial sums meet in ``psum(value, "tp")``."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    n = len(devices)
    mesh = Mesh(np.array(devices), ("tp",))
    rng = np.random.default_rng(seed)
    dt = jnp.dtype(dtype)
    x = jnp.asarray(rng.standard_normal((16, 64)), dt)
    w1 = jnp.asarray(rng.standard_normal((64, 32 * n)) / 8, dt)
    w2 = jnp.asarray(rng.standard_normal((32 * n, 64)) / 8, dt)

    def mlp(psum):
        @jax.jit
        @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "tp"), P("tp", None)), out_specs=P())
        def run(x, w1, w2):
            return psum(jax.nn.gelu(x @ w1) @ w2, "tp")
        return run

    return (x, w1, w2), mlp
