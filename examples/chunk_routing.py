"""A ring all-reduce written as chunk routing (MSCCLang's language), taken into a jitted model.

The program is MSCCLang's: ``chunk``, ``reduce`` and ``copy`` over a ring topology, the way MSCCLang programs are
written, imported from ``jax_mscclpp.dsl.msccl`` in place of ``msccl.language``. ``Check()``
proves it computes an all-reduce, ``XML()`` writes it as MSCCL-IR (what MSCCL's runtime would load), and
``load_plan`` reads that XML back into a plan. Both are registered: the program itself serves every ``jm.psum``
of the model below by size; the plan read back from its XML is forced by name. On CPU devices they run on the host
backend, on GPUs on the plan executor kernel.

    python examples/chunk_routing.py                        # 8 virtual CPU devices
    JAX_PLATFORMS=cuda python examples/chunk_routing.py     # every local GPU

Unless JAX_PLATFORMS says otherwise it runs on the CPU, with ``--cpu-devices`` (default 8) virtual devices. Exit
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
from jax_mscclpp.dsl import load_plan  # noqa: E402
from jax_mscclpp.dsl.msccl import Buffer, Check, MSCCLProgram, chunk  # noqa: E402  (MSCCLang's language)
from jax_mscclpp.dsl.msccl.collectives import AllReduce  # noqa: E402
from jax_mscclpp.dsl.msccl.topologies import ring  # noqa: E402

# The model's output against lax.psum's, relative to the largest magnitude of lax's (the order of the sums differs).
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}


def ring_all_reduce(n: int, protocol: str = "Simple") -> MSCCLProgram:
    """Chunk r starts on rank r + 1 and is reduced around the ring into rank r; the reduced chunk is then copied
    around the ring into every rank's output. In place: the output is the input."""
    with MSCCLProgram("ring_allreduce", ring(n), AllReduce(n, n, True), 1, protocol=protocol) as prog:
        for r in range(n):
            c = chunk((r + 1) % n, Buffer.input, r)
            for step in range(2, n + 1):
                c = chunk((r + step) % n, Buffer.input, r).reduce(c)
            for step in range(1, n):
                c = c.copy((r + step) % n, Buffer.output, r)
    return prog


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, tp=False, dtype="float32")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    devices = jax.devices()
    n = len(devices)
    shown = max(n, 2)  # a ring needs two ranks; on one device jm.psum exchanges nothing
    with ring_all_reduce(shown) as prog:
        checked = Check()
        xml = prog.generate_xml()
    plan = load_plan(xml)
    print(f"ring all-reduce for {shown} ranks: Check() {'passes' if checked else 'FAILS'}; its MSCCL-IR "
          f"({len(xml)} bytes) loads back as a plan of {len(plan['ranks'][0]['threadblocks'])} thread blocks a rank")

    jm.register_algorithm(ring_all_reduce, name="msccl_ring", max_bytes=1 << 20)
    jm.register_algorithm(lambda world: load_plan(ring_all_reduce(world).generate_xml()), name="msccl_ring_xml",
                          max_bytes=0)  # never chosen by size: forced by name below

    (x, w1, w2), mlp = row_parallel_mlp(devices, args.seed, args.dtype)

    reference = np.asarray(mlp(lax.psum)(x, w1, w2), np.float64)
    ok = checked
    for label, name, psum in (
            ("by size", "msccl_ring", jm.psum),
            ("from its MSCCL-IR", "msccl_ring_xml", lambda v, axis: jm.psum(v, axis, algorithm="msccl_ring_xml"))):
        runs = any(call.algorithm == name for call in jm.explain(mlp(psum), x, w1, w2))
        ours = np.asarray(mlp(psum)(x, w1, w2), np.float64)
        err = float(np.max(np.abs(ours - reference))) / max(float(np.max(np.abs(reference))), 1e-30)
        alone = " (one device: nothing to exchange)" if n == 1 else ""
        print(f"model with the ring {label}: max rel error against lax.psum {err:.2e} (tolerance "
              f"{TOLERANCE[args.dtype]:g}); the ring ran: {runs}{alone}")
        ok = ok and err <= TOLERANCE[args.dtype] and (runs or n == 1)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
