"""The built-in selection table, ``kernels/include/jax_mscclpp/selection.def``, as the one rule matcher holds it
(``runtime/select``, which the NCCL-API library calls and the native module binds as ``_jax_mscclpp.select``):
views of its rows for what shows them (``selection.table()``, ``info()``). Matching a call is the matcher's
(``selection.choose``).

``Rule`` is a rule as it crosses to and from the matcher; ``DEFAULT_TABLE``, the built-in rules in file order;
``PROTOCOL_RULES``, the protocol of each algorithm chosen by size on GPUs (name -> (largest LL block in bytes, LL
algorithm, HB algorithm)), which the kernels' launchers apply (``kernels/collectives/protocol.h``)."""

from __future__ import annotations

from typing import NamedTuple

from ._codes import Collective
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


DEFAULT_TABLE = tuple(rule_of(row) for row in _select.builtin_rules())
PROTOCOL_RULES = dict(_select.protocol_rules())
