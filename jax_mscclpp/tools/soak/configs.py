"""What one soak program is (``Config``) and how the soak draws them at random.

A config fixes everything that is compiled: the collective and its arguments, one rank's operand shape and dtype,
the algorithm (``"auto"``, a built-in name or a registered plan), the mesh (its shape, axis names and device order)
and whether the call runs once or chained ``chain`` times inside a ``fori_loop``. The data of each call is drawn
afresh (``data.py``), so one compiled program serves many calls.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax.numpy as jnp
import numpy as np

from ... import plans, selection
from ..._types import COMPOSED_ALGORITHMS, Collective, REDUCE_OPS as _REDUCE_OPS
from ...collective_specs import SOAKED

OPS = SOAKED  # the collectives the soak builds (collective_specs.py)
REDUCE_OPS = tuple(_REDUCE_OPS)
AUTO = "auto"
# Chained configs only up to this many bytes per rank: a chain of large messages on CPU devices costs seconds.
CHAIN_MAX_BYTES = 4 << 20
CHAIN_LENGTHS = (2, 3, 5)
# Built-in algorithms never drawn, by platform: NVLink multicast (SwitchChannel) is opt-in and stays off on GPUs.
NOT_DRAWN = {"gpu": ("2pa_nvls",)}


@dataclasses.dataclass(frozen=True)
class Config:
    op: str  # all_reduce | all_gather | reduce_scatter | all_to_all
    dtype: str
    algorithm: str  # "auto", a built-in algorithm or a registered plan's name
    mesh_shape: tuple
    mesh_axes: tuple  # the mesh's axis names
    axes: tuple  # the collective's axes (a subset of mesh_axes, in the order the call names them)
    local_shape: tuple  # one rank's operand
    redop: str = "sum"  # all_reduce only
    dim: int = 0  # all_gather's axis, psum_scatter's scatter_dimension, all_to_all's split_axis (may be < 0)
    concat: int = 0  # all_to_all's concat_axis
    tiled: bool = False
    chain: int = 0  # 0: one call per program; K: K calls chained in a fori_loop
    mesh_seed: int = 0  # the device order of the mesh: a permutation drawn from this seed

    @property
    def world(self) -> int:
        sizes = dict(zip(self.mesh_axes, self.mesh_shape))
        return math.prod(sizes[a] for a in self.axes)

    @property
    def num_devices(self) -> int:
        return math.prod(self.mesh_shape)

    @property
    def itemsize(self) -> int:
        return np.dtype(jnp.dtype(self.dtype)).itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of one rank's operand."""
        return math.prod(self.local_shape) * self.itemsize

    @property
    def form(self) -> str:
        return f"chain{self.chain}" if self.chain else "single"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Config":
        fields = json.loads(text)
        for key in ("mesh_shape", "mesh_axes", "axes", "local_shape"):
            fields[key] = tuple(fields[key])
        return cls(**fields)


def mesh_layouts(num_devices: int) -> list[tuple[tuple, tuple, list[tuple]]]:
    """(mesh shape, axis names, the axis tuples collectives run over) for a soak over ``num_devices``."""
    layouts = [((num_devices,), ("x",), [("x",)])]
    if num_devices >= 4 and num_devices % 2 == 0:
        layouts.append(((2, num_devices // 2), ("a", "b"), [("a",), ("b",), ("a", "b"), ("b", "a")]))
    return layouts


def _split(rng: np.random.Generator, elems: int, ndim: int) -> list[int]:
    """``ndim`` dimensions whose product is about ``elems`` (odd sizes welcome)."""
    dims = []
    for _ in range(ndim - 1):
        d = int(rng.integers(1, 8))
        dims.append(d)
        elems = max(1, elems // d)
    dims.append(max(1, elems))
    rng.shuffle(dims)
    return dims


def _maybe_negative(rng: np.random.Generator, dim: int, ndim: int) -> int:
    return dim - ndim if rng.random() < 0.3 else dim


class Drawer:
    """Draws random configs that can run on ``devices`` (platform ``platform``) up to ``max_bytes`` per rank."""

    def __init__(self, num_devices: int, platform: str, dtypes: list[str], max_bytes: int,
                 plan_names: dict[str, list[str]], algorithms: tuple = ()):
        self.num_devices = num_devices
        self.algorithms = algorithms  # drawn from these alone, where they run the op ("lax" runs every op)
        self.platform = platform
        self.dtypes = dtypes
        self.max_bytes = max_bytes
        self.plan_names = plan_names  # op -> registered plans for it
        self.layouts = mesh_layouts(num_devices)

    def draw(self, rng: np.random.Generator, scratch_bytes) -> Config:
        """A random config. ``scratch_bytes(config)`` is the scratch of the config's communicator (a plan is
        chosen only when a call fits there, ``plans.fits_scratch``)."""
        while True:
            config = self._draw_once(rng)
            if config.algorithm in plans_of(self.plan_names) and not self._plan_runs(config, scratch_bytes):
                continue
            return config

    def _draw_once(self, rng: np.random.Generator) -> Config:
        op = OPS[int(rng.integers(len(OPS)))]
        dtype = self.dtypes[int(rng.integers(len(self.dtypes)))]
        mesh_shape, mesh_axes, axis_choices = self.layouts[int(rng.integers(len(self.layouts)))]
        axes = axis_choices[int(rng.integers(len(axis_choices)))]
        world = math.prod(dict(zip(mesh_axes, mesh_shape))[a] for a in axes)
        itemsize = np.dtype(jnp.dtype(dtype)).itemsize
        nbytes = int(round(2 ** rng.uniform(0, math.log2(self.max_bytes))))
        elems = max(1, nbytes // itemsize)
        fields = dict(op=op, dtype=dtype, mesh_shape=mesh_shape, mesh_axes=mesh_axes, axes=axes,
                      mesh_seed=int(rng.integers(1 << 16)))
        if op == "all_reduce":
            ndim = 0 if elems == 1 and rng.random() < 0.5 else int(rng.integers(1, 4))
            fields.update(local_shape=tuple(_split(rng, elems, ndim)) if ndim else (),
                          redop=REDUCE_OPS[int(rng.integers(len(REDUCE_OPS)))])
        elif op == "all_gather":
            tiled = bool(rng.random() < 0.5)
            ndim = int(rng.integers(1, 4)) if tiled else int(rng.integers(0, 4))
            shape = _split(rng, max(1, elems // world), ndim) if ndim else []
            out_ndim = ndim if tiled else ndim + 1
            fields.update(local_shape=tuple(shape), tiled=tiled,
                          dim=_maybe_negative(rng, int(rng.integers(out_ndim)), out_ndim))
        else:  # reduce_scatter, all_to_all: one dimension holds one block per rank
            tiled = bool(rng.random() < 0.5)
            ndim = int(rng.integers(1, 4))
            shape = _split(rng, max(1, elems // world), ndim)
            d = int(rng.integers(ndim))
            shape[d] = shape[d] * world if tiled else world
            fields.update(local_shape=tuple(shape), tiled=tiled, dim=_maybe_negative(rng, d, ndim))
            if op == "all_to_all":
                fields["concat"] = _maybe_negative(rng, int(rng.integers(ndim)), ndim)
        fields["algorithm"] = self._algorithm(rng, op, axes)
        config = Config(**fields)
        if config.nbytes <= CHAIN_MAX_BYTES and rng.random() < 0.3:
            config = dataclasses.replace(config, chain=CHAIN_LENGTHS[int(rng.integers(len(CHAIN_LENGTHS)))])
        return config

    def _algorithm(self, rng: np.random.Generator, op: str, axes: tuple) -> str:
        collective = Collective[op.upper()]
        builtin = [a for a in selection.PLATFORM_ALGORITHMS[self.platform][collective]
                   if (a not in COMPOSED_ALGORITHMS or len(axes) == 2) and a not in NOT_DRAWN.get(self.platform, ())]
        named = builtin + list(self.plan_names.get(op, ()))
        if self.algorithms:
            chosen = [a for a in self.algorithms if a in ("lax", AUTO) or a in named]
            return chosen[int(rng.integers(len(chosen)))] if chosen else AUTO
        return AUTO if rng.random() < 0.3 or not named else named[int(rng.integers(len(named)))]

    def _plan_runs(self, config: Config, scratch_bytes) -> bool:
        entry = plans.registered(config.algorithm)
        if entry is None or self.platform not in entry.platforms:
            return False
        try:
            plan = entry.plan_for(config.world)
        except Exception:  # noqa: BLE001 - the program has no plan for this world size
            return False
        if plan is None:
            return False
        blocks = config.world if config.op in ("reduce_scatter", "all_to_all") else 1
        count = math.prod(config.local_shape) // blocks
        scratch = plans.scratch_per_call(self.platform, scratch_bytes(config))
        return plans.fits_scratch(plan, self.platform, count, config.itemsize, scratch)


def plans_of(plan_names: dict[str, list[str]]) -> set:
    return {name for names in plan_names.values() for name in names}
