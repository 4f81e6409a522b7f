"""The two programs of a soak config, ours and lax, compiled once and reused with fresh data.

Both are ``jax.jit(jax.shard_map(...))`` over the config's mesh. Each device's operand arrives flattened (one
block of a 1-D global array sharded over every mesh axis) and is reshaped to ``config.local_shape``; the result
is flattened back, so every device's result is compared. A chained config runs ``chain`` calls in a
``fori_loop``, each step bringing the result back to the operand's shape (and varying over every mesh axis) so
that the next call takes it: all_gather keeps block ``i % world``, reduce_scatter repeats its block, all_to_all
reshapes; float sums are scaled by 1/world to stay bounded.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ... import _compat, plans, public_calls
from ..._types import ALGORITHMS, Algorithm, Collective
from ...collective_specs import spec_named
from ...lax_equivalents import lax_collective
from .configs import AUTO, OPS, Config

_ALGORITHM_NAMES = {int(code): name for name, code in ALGORITHMS.items()}
_CUSTOM_CALL = re.compile(r'@?"?(jax_mscclpp_\w+)"?.*?algorithm = (\d+) : i32.*?plan_id = (-?\d+) : i64')


def make_mesh(devices: list, config: Config) -> Mesh:
    """The config's mesh: ``devices`` in the order drawn from ``config.mesh_seed``, shaped ``mesh_shape``."""
    order = np.random.default_rng(config.mesh_seed).permutation(len(devices))
    return Mesh(np.array(devices, dtype=object)[order].reshape(config.mesh_shape), config.mesh_axes)


def collective(config: Config, ours: bool) -> Callable:
    """One call of the config's collective on a rank's operand: ours (``public_calls.ours_collective``) or lax's
    (``lax_equivalents``), each given the dimensions as drawn (negative ones too). ValueError for an op the soak
    does not draw."""
    c = config
    if c.op not in OPS:
        raise ValueError(f"unknown op {c.op!r}; the soak draws: {', '.join(OPS)}")
    shape = dict(op=c.redop, dim=c.dim, concat=c.concat, tiled=c.tiled)
    which = spec_named(c.op).collective
    if not ours:
        return lax_collective(which, c.axes, **shape)
    return public_calls.ours_collective(which, c.axes, **shape, algorithm=None if c.algorithm == AUTO else c.algorithm)


def _back_to_operand(config: Config, y, i):
    """The chain step's result in the operand's shape (see the module docstring)."""
    c, world = config, config.world
    float_sum = jnp.issubdtype(y.dtype, jnp.floating) and spec_named(c.op).collective.reduces and c.redop == "sum"
    if c.op == "all_gather":
        ndim = len(c.local_shape)
        where = c.dim % (ndim if c.tiled else ndim + 1)
        if c.tiled:
            size = c.local_shape[where]
            y = lax.dynamic_slice_in_dim(y, (i % world) * size, size, axis=where)
        else:
            y = lax.dynamic_index_in_dim(y, i % world, axis=where, keepdims=False)
    elif c.op == "reduce_scatter":
        d = c.dim % len(c.local_shape)
        y = jnp.concatenate([y] * world, axis=d) if c.tiled else jnp.repeat(jnp.expand_dims(y, d), world, axis=d)
    elif c.op == "all_to_all":
        y = y.reshape(c.local_shape)
    if float_sum:
        y = y * jnp.asarray(1.0 / world, y.dtype)
    return _compat.make_varying(y, c.mesh_axes)


def per_device(config: Config, ours: bool) -> Callable:
    """What every device runs: its flattened operand in, its flattened result out."""
    call = collective(config, ours)

    def run(flat):
        v = flat.reshape(config.local_shape)
        if config.chain:
            v = lax.fori_loop(0, config.chain, lambda i, a: _back_to_operand(config, call(a), i), v)
        else:
            v = call(v)
        return v.reshape(-1)

    return run


@dataclasses.dataclass
class Compiled:
    ours: Callable
    lax: Callable
    ran: str  # what our program runs: algorithm names of its custom calls, or "lax" when it has none
    compile_s: float


def what_ran(hlo_text: str) -> str:
    """The algorithms of the jax_mscclpp custom calls in a lowered program ("plan:NAME" for a registered plan),
    joined by "+"; "lax" when there is none (the lax collective was emitted, or nothing was needed)."""
    names = set()
    plan_names = {p.id: p.name for c in Collective for p in plans.registered_for(c, None)}
    for _target, code, plan_id in _CUSTOM_CALL.findall(hlo_text):
        if int(code) == Algorithm.PLAN:
            names.add(f"plan:{plan_names.get(int(plan_id), plan_id)}")
        else:
            names.add(_ALGORITHM_NAMES.get(int(code), f"algorithm {code}"))
    return "+".join(sorted(names)) or "lax"


def compile_config(config: Config, mesh: Mesh, reference_mesh: Mesh | None = None) -> Compiled:
    """Ours on ``mesh`` and lax on ``reference_mesh`` (default: the same mesh), lowered and compiled for the
    config's operand."""
    n = int(np.prod(config.local_shape, dtype=np.int64))
    spec = P(config.mesh_axes)
    t0 = time.perf_counter()
    out = {}
    text = ""
    for ours, on in ((True, mesh), (False, mesh if reference_mesh is None else reference_mesh)):
        operand = jax.ShapeDtypeStruct((config.num_devices * n,), jnp.dtype(config.dtype),
                                       sharding=NamedSharding(on, spec))
        mapped = jax.shard_map(per_device(config, ours), mesh=on, in_specs=spec, out_specs=spec)
        lowered = jax.jit(mapped).lower(operand)
        if ours:
            text = lowered.as_text()
        out[ours] = lowered.compile()
    return Compiled(out[True], out[False], what_ran(text), time.perf_counter() - t0)
