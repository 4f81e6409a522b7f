"""One spec per collective: what the Python layers know of each, written once (pure: no jax, no native module).

``SPECS`` holds a ``CollectiveSpec`` per collective of ``codes.def``, keyed by its ``Collective``: its name (the
codes.def name, which the benchmark tool, the soak and the test fixtures use, as nccl-tests does), nccl-tests'
algbw -> busbw factor, whether the benchmark tool and the soak build it (whether it reduces, else it only
moves bytes so that ours and lax agree exactly, is codes.def's: ``Collective.reduces``), and its shape parameters
(``ShapeParameter``: ``public_calls`` passes them to our public function, ``lax_equivalents`` to lax's, and
``rewrite`` reads them from lax's primitive). ``PUBLIC_NAMES`` holds a ``PublicName`` per lax collective we give a
drop-in for: the collective it runs, its reduction, the lax primitives ``rewrite`` replaces by it, and whether it
is the collective itself (``pbroadcast`` is an all_gather and a slice of it). Every table below is derived from
the two:

- ``REWRITABLE``: the names ``rewrite(collectives=...)`` takes (``rewrite.py``), with their collective;
- ``REDUCTION_OF``: the reduce op of each all_reduce name;
- ``LAX_PRIMITIVE_NAMES``: lax primitive name -> public name (``_compat.LAX_COLLECTIVES`` looks them up);
- ``OPERATION_NAMES``: every name the fixtures' ``CollectiveBenchmark`` takes, with the collective's name;
- ``BENCHED`` / ``SOAKED``: the codes.def names the benchmark tool and the soak build.

The lax equivalent of each collective is ``lax_equivalents.py``; its primitive, autodiff and batching rules are
``primitives.py`` (``permute.py`` for the permutations); docs/architecture.md, "Adding things", lists the files a
new collective touches.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ._codes import Collective


@dataclasses.dataclass(frozen=True)
class ShapeParameter:
    """A parameter of a collective's call beyond its operand, axes and algorithm (all_reduce's: its reduction)."""

    name: str  # its keyword in public_calls.ours_collective and lax_equivalents.lax_collective
    keyword: str  # its keyword in our public function of the collective, and in lax's where lax has one
    lax_param: str | None = None  # the lax primitive's parameter rewrite reads it from (None: the primitive has none)


@dataclasses.dataclass(frozen=True)
class CollectiveSpec:
    collective: Collective
    bus_factor: Callable[[int], float]  # nccl-tests' algbw -> busbw factor over ``world`` ranks
    benched: bool  # python -m jax_mscclpp.tools.bench builds it
    soaked: bool  # python -m jax_mscclpp.tools.soak draws it
    shape: tuple[ShapeParameter, ...]  # its shape parameters

    @property
    def name(self) -> str:
        """codes.def's name of the collective."""
        return self.collective.name.lower()


@dataclasses.dataclass(frozen=True)
class PublicName:
    name: str  # jax_mscclpp.<name>, the drop-in for lax.<name>
    collective: Collective
    lax_primitives: tuple[str, ...]  # jax._src.lax.parallel primitives rewrite replaces by it (absent ones skipped)
    reduction: str | None = None  # the reduce op of an all_reduce
    is_the_collective: bool = True  # computes the collective itself (False: something built of it)


def _all_reduce_factor(world: int) -> float:
    return 2.0 * (world - 1) / world


def _moving_factor(world: int) -> float:
    return (world - 1) / world


def _one(world: int) -> float:  # nccl-tests' sendrecv: every byte crosses one link
    return 1.0


# ``dim``: all_gather's axis, psum_scatter's scatter dimension, all_to_all's split axis; ``concat``: all_to_all's
# concat axis. rewrite sets those without a lax_param itself (``rewrite._shape_of``), and takes a reduction's op from
# its public name (``REDUCTION_OF``).
SPECS = {spec.collective: spec for spec in (
    CollectiveSpec(Collective.ALL_REDUCE, _all_reduce_factor, benched=True, soaked=True,
                   shape=(ShapeParameter("op", "op"),)),
    CollectiveSpec(Collective.ALL_GATHER, _moving_factor, benched=True, soaked=True,
                   shape=(ShapeParameter("dim", "axis", "all_gather_dimension"),
                          ShapeParameter("tiled", "tiled", "tiled"), ShapeParameter("to", "to"))),
    CollectiveSpec(Collective.REDUCE_SCATTER, _moving_factor, benched=True, soaked=True,
                   shape=(ShapeParameter("dim", "scatter_dimension", "scatter_dimension"),
                          ShapeParameter("tiled", "tiled", "tiled"))),
    CollectiveSpec(Collective.ALL_TO_ALL, _moving_factor, benched=True, soaked=True,
                   shape=(ShapeParameter("dim", "split_axis", "split_axis"),
                          ShapeParameter("concat", "concat_axis", "concat_axis"), ShapeParameter("tiled", "tiled"))),
    CollectiveSpec(Collective.PERMUTE, _one, benched=False, soaked=False,
                   shape=(ShapeParameter("perm", "perm", "perm"),)),
)}

PUBLIC_NAMES = (
    # psum_invariant_p is psum under check_vma=True; psum_p is psum under check_vma=False and in transposes there.
    PublicName("psum", Collective.ALL_REDUCE, ("psum_p", "psum_invariant_p"), reduction="sum"),
    PublicName("pmax", Collective.ALL_REDUCE, ("pmax_p",), reduction="max"),
    PublicName("pmin", Collective.ALL_REDUCE, ("pmin_p",), reduction="min"),
    # all_gather_invariant_p: lax.all_gather(..., to="invarying").
    PublicName("all_gather", Collective.ALL_GATHER, ("all_gather_p", "all_gather_invariant_p")),
    PublicName("psum_scatter", Collective.REDUCE_SCATTER, ("reduce_scatter_p",)),
    PublicName("all_to_all", Collective.ALL_TO_ALL, ("all_to_all_p",)),
    # lax.pshuffle binds ppermute_p.
    PublicName("ppermute", Collective.PERMUTE, ("ppermute_p",)),
    PublicName("pbroadcast", Collective.ALL_GATHER, ("pbroadcast_p",), is_the_collective=False),
    # Six operands (ragged.py): rewrite replaces it with a branch of its own.
    PublicName("ragged_all_to_all", Collective.ALL_TO_ALL, ("ragged_all_to_all_p",), is_the_collective=False),
)

REWRITABLE = {p.name: p.collective for p in PUBLIC_NAMES}
REDUCTION_OF = {p.name: p.reduction for p in PUBLIC_NAMES if p.reduction}
LAX_PRIMITIVE_NAMES = {prim: p.name for p in PUBLIC_NAMES for prim in p.lax_primitives}
BENCHED = tuple(s.name for s in SPECS.values() if s.benched)
SOAKED = tuple(s.name for s in SPECS.values() if s.soaked)
OPERATION_NAMES = {
    **{name: name for name in BENCHED},
    **{p.name: SPECS[p.collective].name for p in PUBLIC_NAMES if p.is_the_collective and SPECS[p.collective].benched},
}


def spec_named(name: str) -> CollectiveSpec:
    """The spec of codes.def's collective ``name``; ValueError naming the known ones otherwise."""
    for spec in SPECS.values():
        if spec.name == name:
            return spec
    raise ValueError(f"unknown collective {name!r}; known: {', '.join(s.name for s in SPECS.values())}")


__all__ = ["BENCHED", "CollectiveSpec", "LAX_PRIMITIVE_NAMES", "OPERATION_NAMES", "PUBLIC_NAMES", "PublicName",
           "REDUCTION_OF", "REWRITABLE", "SOAKED", "SPECS", "ShapeParameter", "spec_named"]
