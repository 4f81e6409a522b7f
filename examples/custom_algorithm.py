"""Write an all_reduce in the DSL, verify it, register it, and use it in a model.

The algorithm: a ring reduce-scatter over HB memory channels followed by an all-pairs all-gather. The verifier
proves it computes an all_reduce for the world size it is lowered for, and shows what a dropped `wait` does.
Registered for messages up to 1 MiB, it then serves every jm.psum of that size in the model below: on CPU
devices through the host backend, on GPUs through the plan executor kernel.

    python examples/custom_algorithm.py                        # 8 virtual CPU devices
    JAX_PLATFORMS=cuda python examples/custom_algorithm.py     # every local GPU
"""

from __future__ import annotations

import os
import sys

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import jax_mscclpp as jm
from jax_mscclpp import dsl


def ring_then_allpairs(n: int, drop_a_wait: bool = False) -> dsl.Program:
    """Ring reduce-scatter (n-1 steps, chunk c travels along the ring and is summed at every hop, ending fully
    reduced at rank c), then each rank sends its reduced chunk to every peer."""
    prog = dsl.Program("all_reduce", n, name="ring_rs_allpairs_ag", chunks=n, scratch_chunks=2 * n)
    ring = {r: dsl.MemoryChannel(prog, r, (r + 1) % n) for r in range(n)}
    pairs = dsl.all_pairs(prog, dsl.MemoryChannel)
    for step in range(n - 1):
        for r, rank in enumerate(prog.ranks):
            c = (r - step - 1) % n  # the chunk rank r forwards at this step
            source = rank.input[c] if step == 0 else rank.output[c]
            ring[r].put(prog.rank((r + 1) % n).scratch[step], source)
            ring[r].signal()
        for r, rank in enumerate(prog.ranks):
            c = (r - step - 2) % n  # the chunk rank r receives at this step
            if not (drop_a_wait and step == 0 and r == 1):
                ring[(r - 1) % n].wait()
            rank.reduce(rank.output[c], [rank.input[c], rank.scratch[step]])
    for r, rank in enumerate(prog.ranks):
        for p in prog.peers(r):
            pairs[r, p].put(prog.rank(p).scratch[n + r], rank.output[r])
            pairs[r, p].signal()
        for p in prog.peers(r):
            pairs[p, r].wait()
            rank.copy(rank.output[p], rank.scratch[n + p])
    return prog


def main() -> int:
    devices = jax.devices()
    n = len(devices)
    plan = ring_then_allpairs(n).lower()  # lowering verifies
    ops = sum(len(tb["ops"]) for rank in plan["ranks"] for tb in rank["threadblocks"])
    print(f"lowered '{plan['name']}' for {n} ranks: {ops} operations, verified")

    try:
        ring_then_allpairs(n, drop_a_wait=True).lower()
        print("the verifier missed a dropped wait: FAIL")
        return 1
    except dsl.VerificationError as error:
        print(f"a dropped wait is caught: {error.kind}:\n  {error}")

    jm.register_algorithm(ring_then_allpairs, name="ring_rs_allpairs_ag", max_bytes=1 << 20)

    # A two-layer tensor-parallel MLP: the row-parallel matmul's partial sums meet in jm.psum, which the
    # selection table now serves with the registered plan.
    mesh = Mesh(np.array(devices), ("tp",))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((16, 64)), jnp.float32)
    w1 = jnp.asarray(rng.standard_normal((64, 32 * n)) / 8, jnp.float32)
    w2 = jnp.asarray(rng.standard_normal((32 * n, 64)) / 8, jnp.float32)

    def mlp(psum):
        @jax.jit
        @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "tp"), P("tp", None)), out_specs=P())
        def run(x, w1, w2):
            return psum(jax.nn.gelu(x @ w1) @ w2, "tp")
        return run

    ours, ref = mlp(jm.psum)(x, w1, w2), mlp(lax.psum)(x, w1, w2)
    hlo = mlp(jm.psum).lower(x, w1, w2).as_text()
    uses_plan = "algorithm = 6" in hlo
    err = float(jnp.max(jnp.abs(ours - ref)))
    print(f"model output vs lax.psum: max abs error {err:.2e}; the psum ran the registered plan: {uses_plan}")
    ok = err < 1e-4 and uses_plan
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
