"""The code tables of ``kernels/include/jax_mscclpp/codes.def`` and the enums built from them, read without jax or
the native module (the DSL and the block layout use them; ``_types`` adds the dtypes JAX runs).

``CODE_TABLES`` has the shape of the native module's ``codes()`` ({table: [{enumerator, code, name, ...}, ...]},
``ffi/module.cc``); tests/test_codes.py checks that the two are equal. The enum members are the C++ enumerators
in upper snake case (``kTwoPhaseRing`` -> ``TWO_PHASE_RING``).
"""

from __future__ import annotations

import enum
import pathlib
import re

# A wheel ships the .def tables it reads (codes.def, settings.def) next to this file; a source tree (an editable
# install) has them under kernels/include.
_HERE = pathlib.Path(__file__).resolve().parent


def def_file_text(name: str) -> str:
    """The text of one of the tables shared with C++ (``kernels/include/jax_mscclpp/<name>``)."""
    paths = (_HERE / name, _HERE.parent / "kernels" / "include" / "jax_mscclpp" / name)
    for path in paths:
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(f"{name} not found at any of {[str(p) for p in paths]}")


# Row macro -> (table, the names of its columns after enumerator, code, name).
_ROW_MACROS = {
    "JAX_MSCCLPP_COLLECTIVE": ("collective", ("input_per_rank", "output_per_rank", "reduces")),
    "JAX_MSCCLPP_REDUCE_OP": ("reduce_op", ()),
    "JAX_MSCCLPP_DTYPE": ("dtype", ("bytes", "host_type", "device_type", "nccl_type", "xla_type")),
    "JAX_MSCCLPP_ALGORITHM": ("algorithm", ("collectives", "host", "needs")),
    "JAX_MSCCLPP_PLACEMENT": ("placement", ()),
    "JAX_MSCCLPP_PLAN_OP": ("plan_op", ()),
    "JAX_MSCCLPP_PLAN_BUFFER": ("plan_buffer", ()),
    "JAX_MSCCLPP_PLAN_CHANNEL": ("plan_channel", ()),
}
_ROW = re.compile(r"^(JAX_MSCCLPP_[A-Z_]+)\((.*)\)\s*(?://.*)?$")
_DEFINE = re.compile(r"^#define (JAX_MSCCLPP_[A-Z0-9_]+) (\d+)\s*$")


def _column(column: str, text: str, constants: dict[str, int]):
    """One column's value as the native module gives it (ffi/module.cc, code_tables)."""
    if column in ("input_per_rank", "output_per_rank", "reduces"):
        return int(text) != 0
    if column == "collectives":  # an OR of the JAX_MSCCLPP_AR / ... constants, or a number
        return sum(constants[term] if term in constants else int(term)
                   for term in (t.strip() for t in text.split("|")))
    if column in ("host", "needs", "host_type", "device_type", "nccl_type", "xla_type"):
        return text
    return int(text)


def read_code_tables(text: str) -> dict[str, list[dict]]:
    """The tables of a codes.def text, each row a dict in file order."""
    tables: dict[str, list[dict]] = {table: [] for table, _ in _ROW_MACROS.values()}
    constants: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        define = _DEFINE.match(line)
        if define:
            constants[define.group(1)] = int(define.group(2))
            continue
        row = _ROW.match(line)
        if not row or row.group(1) not in _ROW_MACROS:
            continue
        table, columns = _ROW_MACROS[row.group(1)]
        enumerator, code, name, *rest = (field.strip() for field in row.group(2).split(","))
        if len(rest) != len(columns):
            raise ValueError(f"codes.def: {line!r} has {len(rest)} columns after the name, not {len(columns)}")
        entry = {"enumerator": enumerator, "code": int(code), "name": name.strip('"')}
        entry.update((column, _column(column, value, constants)) for column, value in zip(columns, rest))
        tables[table].append(entry)
    return tables


CODE_TABLES = read_code_tables(def_file_text("codes.def"))


def _member(enumerator: str) -> str:
    """``kOnePhaseAllPairsLL`` -> ``ONE_PHASE_ALL_PAIRS_LL``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", enumerator[1:]).upper()


def _members(table: str) -> list[tuple[str, int]]:
    return [(_member(row["enumerator"]), row["code"]) for row in CODE_TABLES[table]]


_REDUCES = {row["code"]: row["reduces"] for row in CODE_TABLES["collective"]}


class _CollectiveBase(enum.IntEnum):
    @property
    def target(self) -> str:
        """The FFI target name of this collective (the same on every platform)."""
        return "jax_mscclpp_" + self.name.lower()

    @property
    def reduces(self) -> bool:
        """Whether the result combines ranks' elements with the call's reduce op (codes.def, column ``reduces``);
        False for a collective that moves elements unchanged."""
        return _REDUCES[int(self)]


Collective = _CollectiveBase("Collective", _members("collective"), module=__name__)
ReduceOp = enum.IntEnum("ReduceOp", _members("reduce_op"), module=__name__)
Algorithm = enum.IntEnum("Algorithm", _members("algorithm"), module=__name__)
