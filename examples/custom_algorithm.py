"""Write an all_reduce in the DSL, verify it, register it, and use it in a model.

The algorithm: a ring reduce-scatter over HB memory channels followed by an all-pairs all-gather. The verifier
proves it computes an all_reduce for the world size it is lowered for, and shows what a dropped `wait` does.
Registered for messages up to 1 MiB, it then serves every jm.psum of that size in the model below: on CPU
devices through the host backend, on GPUs through the plan executor kernel.

    python examples/custom_algorithm.py                        # 8 virtual CPU devices
    JAX_PLATFORMS=cuda python examples/custom_algorithm.py     # every local GPU

Unless JAX_PLATFORMS says otherwise it runs on the CPU, with ``--cpu-devices`` (default 8) virtual devices; an
``xla_force_host_platform_device_count`` already in XLA_FLAGS is kept unless ``--cpu-devices`` is given. Exit
status: 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

from _devices import add_common_arguments, configure_cpu_devices  # examples/_devices.py
from _mlp import row_parallel_mlp  # examples/_mlp.py

os.environ.setdefault("JAX_PLATFORMS", "cpu")
configure_cpu_devices(sys.argv[1:])

import jax  # noqa: E402  (after XLA_FLAGS is set)
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import jax_mscclpp as jm  # noqa: E402
from jax_mscclpp import dsl  # noqa: E402

# The model's output against lax.psum's, relative to the largest magnitude of lax's: the two differ only in the
# order of the cross-device sums (float32), or also in where bfloat16 rounds them.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, tp=False, dtype="float32")
    return parser.parse_args(argv)


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


def main(argv=None) -> int:
    args = parse_args(argv)
    devices = jax.devices()
    n = len(devices)
    # A ring needs two ranks; on one device the program is shown for two (jm.psum there exchanges nothing).
    shown = max(n, 2)
    plan = ring_then_allpairs(shown).lower()  # lowering verifies
    ops = sum(len(tb["ops"]) for rank in plan["ranks"] for tb in rank["threadblocks"])
    print(f"lowered '{plan['name']}' for {shown} ranks: {ops} operations, verified")

    try:
        ring_then_allpairs(shown, drop_a_wait=True).lower()
        print("the verifier missed a dropped wait: FAIL")
        return 1
    except dsl.VerificationError as error:
        print(f"a dropped wait is caught: {error.kind}:\n  {error}")

    jm.register_algorithm(ring_then_allpairs, name="ring_rs_allpairs_ag", max_bytes=1 << 20)

    # A two-layer tensor-parallel MLP: the row-parallel matmul's partial sums meet in jm.psum, which the
    # selection table now serves with the registered plan.
    (x, w1, w2), mlp = row_parallel_mlp(devices, args.seed, args.dtype)
    ours, ref = mlp(jm.psum)(x, w1, w2), mlp(lax.psum)(x, w1, w2)
    hlo = mlp(jm.psum).lower(x, w1, w2).as_text()
    uses_plan = "algorithm = 6" in hlo
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    err = float(np.max(np.abs(ours - ref))) / max(float(np.max(np.abs(ref))), 1e-30)
    tol = TOLERANCE[args.dtype]
    alone = " (one device: nothing to exchange, lax's own reduction)" if n == 1 else ""
    print(f"model output vs lax.psum ({args.dtype}): max rel error {err:.2e} (tolerance {tol:g}); the psum ran the "
          f"registered plan: {uses_plan}{alone}")
    ok = err <= tol and (uses_plan or n == 1)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
