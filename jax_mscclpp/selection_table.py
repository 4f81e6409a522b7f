"""The built-in selection table, ``kernels/include/jax_mscclpp/selection.def``, shared with the NCCL-API library
(``nccl/runtime/selection_table.cc``) and the kernels' launchers (``kernels/collectives/protocol.h``):
``DEFAULT_TABLE``, the rules in file order; ``ANY_SIZE_ALGORITHM``, what runs where a rule says lax but lax cannot
run; ``PROTOCOL_RULES``, the protocol of each algorithm chosen by size on GPUs (name -> (largest LL block in bytes,
LL algorithm, HB algorithm)). Read without jax or the native module."""

from __future__ import annotations

import re

from ._codes import CODE_TABLES, Collective, _member, def_file_text
from .rule import Rule

_PLATFORMS = {"kCpu": "cpu", "kGpu": "gpu"}
_ROW = re.compile(r"^(JAX_MSCCLPP_SELECTION_RULE|JAX_MSCCLPP_ANY_SIZE_ALGORITHM|JAX_MSCCLPP_PROTOCOL_RULE)\((.*)\)"
                  r"\s*(?://.*)?$")


def _algorithm(enumerator: str) -> str:
    if enumerator == "kLax":
        return "lax"
    for row in CODE_TABLES["algorithm"]:
        if row["enumerator"] == enumerator:
            return row["name"]
    raise ValueError(f"selection.def: {enumerator!r} is not an algorithm of codes.def")


def read_selection_table(text: str) -> tuple[tuple[Rule, ...], dict[Collective, str], dict[str, tuple]]:
    """The rules, the any-size algorithms and the protocol rules of a selection.def text."""
    rules: list[Rule] = []
    any_size: dict[Collective, str] = {}
    protocols: dict[str, tuple] = {}
    for line in text.splitlines():
        row = _ROW.match(line.strip())
        if not row:
            continue
        fields = [field.strip() for field in row.group(2).split(",")]
        if row.group(1) == "JAX_MSCCLPP_PROTOCOL_RULE":
            protocols[_algorithm(fields[0])] = (int(fields[1]), _algorithm(fields[2]), _algorithm(fields[3]))
            continue
        collective = Collective[_member(fields[0])]
        if row.group(1) == "JAX_MSCCLPP_ANY_SIZE_ALGORITHM":
            any_size[collective] = _algorithm(fields[1])
            continue
        _, platform, max_bytes, algorithm, world = fields
        rules.append(Rule(collective, _PLATFORMS[platform], None if int(max_bytes) < 0 else int(max_bytes),
                          _algorithm(algorithm), None if int(world) == 0 else int(world)))
    return tuple(rules), any_size, protocols


DEFAULT_TABLE, ANY_SIZE_ALGORITHM, PROTOCOL_RULES = read_selection_table(def_file_text("selection.def"))
