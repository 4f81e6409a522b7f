"""The programs a benchmark runs: per-rank layouts, ours and lax, the trivial stand-in, inputs and the check.

Every program is ``jax.jit(jax.shard_map(...))`` over a 1-D mesh whose axis is ``AXIS``; a rank's operand is a
1-D slice of a global array sharded over that axis. Three kinds of program per configuration:

- single: one collective per dispatch (what a user's step sees, and the one the correctness check compares);
- chained: K collectives unrolled in one program, each on the result of the last
  (``x = post(barrier(collective(x)), s)``), so that JAX's per-dispatch overhead is paid once for K calls;
- trivial: the chained program with the collective replaced by an op of the same output shape that moves no
  data between ranks. (chained - trivial) / K is the device time of one collective.

``post`` brings the collective's result back to the operand's shape (all_gather keeps the first block,
reduce_scatter tiles its block) and multiplies by ``s``, a per-rank scale passed in as an argument: it keeps sums
bounded (1/n for float sums, 1 otherwise) and, being varying over the axis, keeps every operand varying, so the
lax collective always runs as a real collective. The optimization barrier stops XLA from simplifying across
steps. The trivial program pays the same ``post`` and barrier, so they cancel in the difference.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_mscclpp import lax_equivalents, public_calls
from jax_mscclpp._types import Collective
from jax_mscclpp.collective_specs import BENCHED, OPERATION_NAMES, REDUCTION_OF, spec_named

AXIS = "x"
OPS = BENCHED  # collective_specs.py
COLLECTIVE = {op: spec_named(op).collective for op in OPS}
REDOPS = ("sum", "max", "min")
# Every name an op is given by (``--ops``, ``bench.run(ops=...)``), with the benched op it names: ours
# (codes.def's) and the public drop-ins' (psum, pmax, psum_scatter, ...), as the pytest fixtures take them
# (collective_specs.OPERATION_NAMES).
OP_NAMES = OPERATION_NAMES

# Relative to the largest magnitude of the reference: sums in another order round differently.
FLOAT_TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Per-rank sizes of one configuration. ``size`` is nccl-tests' size (see ``metrics``), rounded down so
    that it splits into ``world`` blocks of whole elements."""

    op: str
    world: int
    itemsize: int
    size: int
    in_elems: int
    out_elems: int

    @property
    def selection_bytes(self) -> int:
        """Per-rank input bytes: what the runtime's algorithm selection sees."""
        return self.in_elems * self.itemsize

    @property
    def block_elems(self) -> int:
        """Elements of one block (launch_collective's ``count``, what the protocol rows see): reduce_scatter's
        output, a block of all_to_all's input, the input of the others."""
        if self.op == "reduce_scatter":
            return self.out_elems
        if self.op == "all_to_all":
            return self.in_elems // self.world
        return self.in_elems


def layout(op: str, size_bytes: int, world: int, dtype) -> Layout:
    """The per-rank layout for ``op`` at (about) ``size_bytes``; never less than one element per block."""
    benched_collective(op)
    itemsize = np.dtype(jnp.dtype(dtype)).itemsize
    unit = itemsize if op == "all_reduce" else itemsize * world
    size = max(unit, size_bytes // unit * unit)
    elems = size // itemsize
    in_elems = elems // world if op == "all_gather" else elems
    out_elems = elems // world if op == "reduce_scatter" else elems
    return Layout(op, world, itemsize, size, in_elems, out_elems)


def ours_collective(op: str, algorithm: str | None, redop: str = "sum") -> Callable:
    """Our collective on a rank's 1-D operand (``public_calls.ours_collective``); ``algorithm`` None lets the
    runtime choose. ValueError for an op that is not benched."""
    return public_calls.ours_collective(benched_collective(op), AXIS, op=redop, algorithm=algorithm)


def lax_collective(op: str, redop: str = "sum") -> Callable:
    """The lax collective computing the same result (lax_equivalents.py)."""
    return lax_equivalents.lax_collective(benched_collective(op), AXIS, op=redop)


def resolve_ops(names, redop: str | None = None) -> tuple[tuple[str, ...], str]:
    """(the benched ops, the all_reduce reduction) that ``names`` (``OP_NAMES``) and ``redop`` (None: unset)
    ask for: a drop-in's name stands for its op (psum_scatter -> reduce_scatter), and one that names a
    reduction (psum, pmax, pmin) sets it. ValueError for an unknown name, or for reductions that disagree."""
    ops, asked = [], {} if redop is None else {redop: "--redop"}
    for name in names:
        if name not in OP_NAMES:
            raise ValueError(f"unknown op {name!r}; known: {', '.join(OP_NAMES)}")
        if name in REDUCTION_OF:
            asked.setdefault(REDUCTION_OF[name], name)
        ops.append(OP_NAMES[name])
    if len(asked) > 1:
        raise ValueError(f"different reductions asked for: {', '.join(f'{v} ({k})' for k, v in asked.items())}; "
                         "one run times one all_reduce reduction")
    return tuple(dict.fromkeys(ops)), next(iter(asked), "sum")


def benched_collective(op: str) -> Collective:
    """The collective the benched op ``op`` (codes.def's name) runs; ValueError naming the benched ones."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    return COLLECTIVE[op]


def trivial_collective(op: str, world: int) -> Callable:
    """An op with the collective's output shape that moves nothing between ranks."""
    if op == "all_gather":
        return lambda x: jnp.tile(x, world)
    if op == "reduce_scatter":
        return lambda x: x[: x.shape[0] // world]
    return lambda x: x


def _post(op: str, world: int) -> Callable:
    if op == "all_gather":
        return lambda y, s: y[: y.shape[0] // world] * s
    if op == "reduce_scatter":
        return lambda y, s: jnp.tile(y, world) * s
    return lambda y, s: y * s


def scale_value(op: str, redop: str, dtype, world: int):
    """The per-step scale: 1/world for float sums (keeps chained sums bounded), 1 otherwise."""
    sums = spec_named(op).collective.reduces and redop == "sum"  # reduce_scatter's redop is always sum
    if sums and jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        return 1.0 / world
    return 1


def make_mesh(devices) -> Mesh:
    """A 1-D mesh named ``AXIS`` over ``devices``. On GPUs its communicator is made here, with port channels,
    so that every algorithm (2PR included) can be timed on it."""
    mesh = Mesh(np.array(list(devices)), (AXIS,))
    if mesh.devices.flat[0].platform == "gpu":
        import jax_mscclpp as jm

        jm.Communicator(mesh, AXIS, port_channels=True)
    return mesh


def _random_block(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return rng.standard_normal(n).astype(np.float32).astype(dtype)
    if jnp.issubdtype(dtype, jnp.unsignedinteger):
        return rng.integers(0, 8, size=n).astype(dtype)
    return rng.integers(-4, 5, size=n).astype(dtype)


def make_inputs(mesh: Mesh, lay: Layout, dtype, scale, seed: int = 0):
    """(operand, scale): random data, each rank's block drawn from its own seeded stream (so every process of a
    multi-process run builds only its own blocks and all agree), and the per-rank scale."""
    sharding = NamedSharding(mesh, P(AXIS))
    n = lay.in_elems

    def block(index):
        start = index[0].start or 0
        rank = start // n
        return _random_block(np.random.default_rng([seed, rank]), n, dtype)

    x = jax.make_array_from_callback((lay.world * n,), sharding, block)
    s = jax.make_array_from_callback(
        (lay.world,), sharding, lambda index: np.full((1,), scale, dtype=jnp.dtype(dtype))
    )
    return x, s


def _compile(fn: Callable, mesh: Mesh, args, compiler_options: dict | None):
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=tuple(P(AXIS) for _ in args), out_specs=P(AXIS))
    lowered = jax.jit(mapped).lower(*args)
    return lowered.compile(compiler_options=compiler_options) if compiler_options else lowered.compile()


def compile_single(collective: Callable, mesh: Mesh, x, compiler_options: dict | None = None):
    """One collective per dispatch: ``f(x)``."""
    return _compile(collective, mesh, (x,), compiler_options)


def compile_chain(collective: Callable, op: str, world: int, chain: int, mesh: Mesh, x, s,
                  compiler_options: dict | None = None):
    """``chain`` collectives unrolled in one program, each on the last one's result: ``f(x, s)``."""
    post = _post(op, world)

    def body(x, s):
        for _ in range(chain):
            x = post(lax.optimization_barrier(collective(x)), s)
        return x

    return _compile(body, mesh, (x, s), compiler_options)


@dataclasses.dataclass(frozen=True)
class Check:
    ok: bool
    max_error: float
    tolerance: float


def compare(ours, ref, dtype) -> Check:
    """Ours against lax on this process's shards: exact for integers, within rounding for float sums."""
    name = jnp.dtype(dtype).name
    worst, scale = 0.0, 1.0
    exact = name not in FLOAT_TOLERANCE
    for a, b in zip(ours.addressable_shards, ref.addressable_shards):
        a64 = np.asarray(a.data).astype(np.float64)
        b64 = np.asarray(b.data).astype(np.float64)
        if a64.shape != b64.shape:
            return Check(False, float("inf"), 0.0)
        if b64.size:
            worst = max(worst, float(np.max(np.abs(a64 - b64))))
            scale = max(scale, float(np.max(np.abs(b64))))
    tolerance = 0.0 if exact else FLOAT_TOLERANCE[name] * scale
    return Check(worst <= tolerance, worst, tolerance)
