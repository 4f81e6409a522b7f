"""Runs in its own process with 16 CPU devices (JAX fixes the count when it starts): every algorithm that claims a
rank count, on communicators of 1, 3, 5, 12 and 16 ranks, against lax. Prints one JSON line per case."""

import json
import os
import sys

RANKS = (1, 3, 5, 12, 16)
# 2-D meshes (slow, fast) for the hierarchical all_reduce.
TWO_AXES = {1: (1, 1), 3: (1, 3), 5: (5, 1), 12: (3, 4), 16: (4, 4)}
BUILTIN = {
    "all_reduce": ("1pa_ll", "2pa_ll", "2pa_hb", "auto"),
    "all_gather": ("allpairs", "auto"),
    "reduce_scatter": ("allpairs", "auto"),
    "all_to_all": ("allpairs", "auto"),
}
PLANS = {
    "all_reduce": ("allreduce_1pa_ll", "allreduce_2pa_ll", "allreduce_2pa_hb", "allreduce_2pr", "allreduce_2pa_nvls"),
    "all_gather": ("allgather_allpairs",),
    "reduce_scatter": ("reducescatter_allpairs",),
    "all_to_all": ("alltoall_allpairs",),
}
DTYPES = ("float32", "int32", "bfloat16", "int8", "uint16")
REDOPS = ("sum", "max", "min")


def cases():
    """(ranks, op, algorithm) for every case, "2ph" on the 2-D mesh of that rank count."""
    out = []
    for n in RANKS:
        for op in BUILTIN:
            out += [(n, op, a) for a in BUILTIN[op]]
            out += [(n, op, "plan:" + p) for p in PLANS[op]]
        out.append((n, "all_reduce", "2ph"))
    return out


def _case_functions(n, i, op, algorithm, devices):
    """(mesh, spec, operand, ours, lax, record) of case i."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jax_mscclpp as jm

    order = np.random.default_rng(n).permutation(16)[:n]  # one device order per rank count
    rng = np.random.default_rng([n, i])
    dtype = jnp.dtype(DTYPES[i % len(DTYPES)])
    redop = REDOPS[i % len(REDOPS)] if op == "all_reduce" else "sum"
    forced = None if algorithm == "auto" else algorithm
    if algorithm == "2ph":
        mesh = Mesh(np.array(devices, dtype=object)[order].reshape(TWO_AXES[n]), ("slow", "fast"))
        axes, spec = ("slow", "fast"), P(("slow", "fast"))
    else:
        mesh = Mesh(np.array(devices, dtype=object)[order], ("x",))
        axes, spec = ("x",), P("x")
    per_rank = n * (3 + i % 4) + (0 if op != "all_reduce" else 1 + i % 5)  # odd sizes; blocks of n elements
    if jnp.issubdtype(dtype, jnp.floating):
        data = rng.standard_normal(n * per_rank).astype(np.float32).astype(dtype)
    else:
        data = rng.integers(0, 100, n * per_rank).astype(dtype)
    x = jax.device_put(data, NamedSharding(mesh, spec))  # numpy in, placed once: no conversion programs
    lax_reduce = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}[redop]
    ours, ref = {
        "all_reduce": (lambda v: jm.all_reduce(v, axes, op=redop, algorithm=forced), lambda v: lax_reduce(v, axes)),
        "all_gather": (lambda v: jm.all_gather(v, axes, tiled=True, algorithm=forced),
                       lambda v: lax.all_gather(v, axes, tiled=True)),
        "reduce_scatter": (lambda v: jm.psum_scatter(v, axes, tiled=True, algorithm=forced),
                           lambda v: lax.psum_scatter(v, axes, tiled=True)),
        "all_to_all": (lambda v: jm.all_to_all(v, axes, 0, 0, tiled=True, algorithm=forced),
                       lambda v: lax.all_to_all(v, axes, 0, 0, tiled=True)),
    }[op]
    record = {"ranks": n, "op": op, "algorithm": algorithm, "dtype": dtype.name, "redop": redop}
    return mesh, spec, x, ours, ref, record


def _judge(record, got, want):
    import numpy as np

    got, want = np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32)
    floating_sum = record["dtype"] in ("float32", "bfloat16") and (record["redop"] == "sum")
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    tolerance = {"float32": 1e-5, "bfloat16": 3e-2}[record["dtype"]] * scale if floating_sum else 0.0
    error = float(np.max(np.abs(got - want))) if want.size else 0.0
    return {**record, "ok": bool(got.shape == want.shape and error <= tolerance), "error": error}


def main():
    """Runs the cases of one rank count and mesh as one program of ours and one of lax (two compiles); a program
    that fails is run again case by case, so every failure is reported against its case."""
    import jax

    import jax_mscclpp as jm
    from jax_mscclpp.dsl import library

    devices = jax.devices("cpu")
    assert len(devices) >= 16, devices
    for names in PLANS.values():
        for name in names:
            jm.register_algorithm(getattr(library, name), name="plan:" + name, min_bytes=1 << 62)
    groups: dict = {}
    for i, (n, op, algorithm) in enumerate(cases()):
        made = _case_functions(n, i, op, algorithm, devices)
        groups.setdefault((n, algorithm == "2ph"), []).append(made)
    for members in groups.values():
        mesh, spec = members[0][0], members[0][1]
        xs = tuple(m[2] for m in members)

        def program(fns, which):  # which: 3 for ours, 4 for lax (never both in one program, see below)
            def run(*vs):
                return tuple(f[which](v) for f, v in zip(fns, vs))
            return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=(spec,) * len(fns), out_specs=(spec,) * len(fns)))

        # Ours and lax's collectives run in separate programs: XLA's CPU runtime may run a jax_mscclpp call and an
        # independent lax collective of one program in different orders on different devices, and each blocks
        # its device until every device joins it (docs/reliability.md).
        try:
            got, want = program(members, 3)(*xs), program(members, 4)(*xs)
            records = [_judge(m[5], got[k], want[k]) for k, m in enumerate(members)]
        except Exception:  # noqa: BLE001 - find the case that fails
            records = []
            for m in members:
                try:
                    records.append(_judge(m[5], program([m], 3)(m[2])[0], program([m], 4)(m[2])[0]))
                except Exception as e:  # noqa: BLE001 - reported to the test
                    records.append({**m[5], "ok": False, "error": f"{type(e).__name__}: {str(e)[:400]}"})
        for record in records:
            print(json.dumps(record), flush=True)
        for comm in jm.Communicator.live():
            comm.destroy()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
