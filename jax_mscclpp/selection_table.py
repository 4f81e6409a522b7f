"""The built-in selection table, ``kernels/include/jax_mscclpp/selection.def``, as the one rule matcher holds it
(``runtime/select``, which the NCCL-API library calls and the native module binds as ``_jax_mscclpp.select``):
views of its rows for what shows them (``selection.table()``, ``info()``). Matching a call is the matcher's
(``selection.choose``).

``Rule`` is a rule as it crosses to and from the matcher; ``DEFAULT_TABLE``, the built-in rules in file order;
``PROTOCOL_RULES``, the protocol rows of the algorithms chosen by size on GPUs, in file order (``ProtocolRule``: the
first row matching a call decides), which the kernels' launchers apply (``kernels/collectives/protocol.h``);
``in_place_min_rank_bytes``, from the in-place rows, from which bytes a streaming call between ranks of one process
runs in place."""

from __future__ import annotations

from typing import NamedTuple

from ._codes import CODE_TABLES, Collective
from ._jax_mscclpp import select as _select


class Rule(NamedTuple):
    """One rule of the selection tables (``DEFAULT_TABLE`` and the tuning files, ``tuning_file.py``): the
    algorithm that runs a collective's calls on a platform up to a size."""

    collective: Collective
    platform: str
    max_bytes: int | None  # per-rank input bytes, inclusive; None = no limit
    algorithm: str
    world: int | None = None  # the world size the rule was measured at; None = any


def rule_of(row: tuple) -> Rule:
    """A rule as the matcher gives it: (collective code, platform, max_bytes, algorithm, world)."""
    collective, platform, max_bytes, algorithm, world = row
    return Rule(Collective(collective), platform, max_bytes, algorithm, world)


class ProtocolRule(NamedTuple):
    """One protocol row of selection.def: a call of ``collective`` (None: every one) on ``world`` ranks (None: any)
    placed as ``placement`` (codes.def: "own_gpu", "shared_gpu", "any") runs ``algorithm``'s blocks of at most
    ``ll_max_block_bytes`` as ``ll``, larger ones as ``hb``."""

    algorithm: str
    collective: Collective | None
    placement: str
    world: int | None
    ll_max_block_bytes: int
    ll: str
    hb: str


PLACEMENT_CODES = {row["name"]: row["code"] for row in CODE_TABLES["placement"]}
_PLACEMENT_NAMES = {code: name for name, code in PLACEMENT_CODES.items()}


def protocol_rule_of(row: tuple) -> ProtocolRule:
    """A protocol row as the matcher gives it (codes for the collective, -1 for every one, and the placement)."""
    algorithm, collective, placement, world, ll_max_block_bytes, ll, hb = row
    return ProtocolRule(algorithm, None if collective < 0 else Collective(collective), _PLACEMENT_NAMES[placement],
                        world or None, ll_max_block_bytes, ll, hb)


DEFAULT_TABLE = tuple(rule_of(row) for row in _select.builtin_rules())
PROTOCOL_RULES = tuple(protocol_rule_of(row) for row in _select.protocol_rules())
# selection.def's in-place rows: (world, or 0 for any; fewest bytes of a rank's larger buffer), in file order.
IN_PLACE_RULES = tuple(_select.in_place_rules())


def in_place_min_rank_bytes(world: int) -> int:
    """The fewest bytes a rank's larger buffer holds for a streaming call on ``world`` ranks of one process to run in
    place (the first in-place row of selection.def whose world matches)."""
    return next(min_bytes for rule_world, min_bytes in IN_PLACE_RULES if rule_world in (0, world))
