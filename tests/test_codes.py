"""One definition per code table (kernels/include/jax_mscclpp/codes.def) and per block layout: every Python
table, the native module's export, the test harness and the names selection uses agree, no hand-written copy of a
native enum has crept back into the sources, and Python's block layout is the native one."""

import pathlib
import re

import numpy as np
import pytest

from jax_mscclpp import _jax_mscclpp as native
from jax_mscclpp import layout, plan_encoding, selection
from jax_mscclpp._types import (ALGORITHMS, ALGORITHMS_OF, COMPOSED_ALGORITHMS, CODE_TABLES, DTYPE_CODES,
                                PLATFORM_ALGORITHMS, REDUCE_OPS, Algorithm, Collective, ReduceOp)

REPO = pathlib.Path(__file__).resolve().parents[1]
TABLES = native.codes()


def rows(table):
    return {row["name"]: row for row in TABLES[table]}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_each_table_has_unique_names_enumerators_and_codes(table):
    for key in ("name", "enumerator", "code"):
        values = [row[key] for row in TABLES[table]]
        assert len(values) == len(set(values)), (table, key)


@pytest.mark.parametrize("enum,table", [(Collective, "collective"), (ReduceOp, "reduce_op"),
                                        (Algorithm, "algorithm")])
def test_python_enums_are_the_native_tables(enum, table):
    snake = {re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", row["enumerator"][1:]).upper(): row["code"]
             for row in TABLES[table]}
    assert {m.name: int(m) for m in enum} == snake
    assert CODE_TABLES == TABLES


def test_names_python_uses_are_the_native_names():
    assert {name: int(op) for name, op in REDUCE_OPS.items()} == {n: r["code"] for n, r in rows("reduce_op").items()}
    assert DTYPE_CODES == {n: r["code"] for n, r in rows("dtype").items()}
    for name, row in rows("dtype").items():
        if name != "bfloat16":
            assert np.dtype(name).itemsize == row["bytes"]
    assert all(rows("algorithm")[name]["code"] == int(code) for name, code in ALGORITHMS.items())
    assert {c.name.lower() for c in Collective} == set(rows("collective"))
    assert {c.name.lower(): c.reduces for c in Collective} == {n: r["reduces"] for n, r in rows("collective").items()}
    assert plan_encoding.OPCODES == {n: r["code"] for n, r in rows("plan_op").items()}


def test_every_algorithm_name_in_use_is_known():
    """ALGORITHMS_OF, the platforms' lists and the selection rules name only algorithms the native table (or the
    Python compositions) has, for collectives it serves."""
    algorithms = rows("algorithm")
    for collective, names in ALGORITHMS_OF.items():
        for name in names:
            if name not in ("lax", *COMPOSED_ALGORITHMS):
                assert algorithms[name]["collectives"] >> int(collective) & 1, (collective, name)
    for platform, by_collective in PLATFORM_ALGORITHMS.items():
        for collective, names in by_collective.items():
            assert set(names) <= set(ALGORITHMS_OF[collective]), (platform, collective)
    for rule in selection.DEFAULT_TABLE:
        assert rule.algorithm == "lax" or rule.algorithm in PLATFORM_ALGORITHMS[rule.platform][rule.collective]


def test_the_cpu_backend_registers_every_collective_target():
    assert set(native.registrations()["cpu"]) == {c.target for c in Collective}


def test_the_harness_and_the_gpu_tests_use_the_native_tables():
    from tests.gpu import collective_helpers as h
    from tests.harness.virtual_ranks import ALGORITHM_CODES, COLLECTIVE_CODES, REDUCE_CODES

    assert COLLECTIVE_CODES == {n: r["code"] for n, r in rows("collective").items()}
    assert REDUCE_CODES == {n: r["code"] for n, r in rows("reduce_op").items()}
    assert ALGORITHM_CODES == {n: r["code"] for n, r in rows("algorithm").items() if n != "plan"}
    gpu = PLATFORM_ALGORITHMS["gpu"]
    assert h.ALL_REDUCE_ALGORITHMS == [a for a in gpu[Collective.ALL_REDUCE] if a not in COMPOSED_ALGORITHMS]
    assert set(h.ALL_PAIRS_ALGORITHMS) == {n for n in ALGORITHM_CODES if n.startswith("allpairs")}
    from tests.gpu import test_ppermute

    assert set(test_ppermute.ALGORITHMS) == {n for n in ALGORITHM_CODES if n.startswith("p2p")}
    assert set(h.REDUCING) == {n for n, r in rows("collective").items() if r["reduces"]}
    for c in Collective:
        for world in (1, 2, 8):
            assert (h.in_blocks(c.name.lower(), world), h.out_blocks(c.name.lower(), world)) == \
                layout.blocks(c, world)
    # The GPU tests' dtype lists (written out, as they collect without the package) cover every dtype row.
    from tests.gpu import gpu_helpers, test_collectives

    assert gpu_helpers.DTYPES == test_collectives.ALL_DTYPES == list(rows("dtype"))


# Sources that define codes of codes.def by hand: two or more enumerators of one table given numbers outside
# codes.def (the plan's buffer and channel enumerators are too generic a name to search for).
_SOURCES = [p for d in ("ffi", "kernels", "tests/harness/native") for p in (REPO / d).rglob("*")
            if p.suffix in (".h", ".cc", ".cu", ".cuh")]


@pytest.mark.parametrize("table", ["collective", "reduce_op", "dtype", "algorithm", "plan_op"])
def test_no_source_defines_codes_by_hand(table):
    pattern = re.compile(r"\b(" + "|".join(row["enumerator"] for row in TABLES[table]) + r")\s*=\s*-?\d")
    found = {str(p.relative_to(REPO)): hits for p in _SOURCES if len(hits := pattern.findall(p.read_text())) > 1}
    assert not found


# Whether a collective reduces is codes.def's column (codes.h, collective_reduces; Python, Collective.reduces):
# no source names the reducing collectives to ask it.
_ASKS_BY_NAME = {
    ".py": re.compile(r"[(\[{]\s*(?:Collective\.)?(?:ALL_REDUCE|\"all_reduce\")\s*,\s*"
                      r"(?:Collective\.)?(?:REDUCE_SCATTER|\"reduce_scatter\")\s*[)\]}]"),
    ".cc": re.compile(r"\bk(?:AllReduce|ReduceScatter)\b[^;{}]*\|\|[^;{}]*\bk(?:ReduceScatter|AllReduce)\b"),
}


def test_no_source_lists_the_reducing_collectives():
    sources = [p for d in ("jax_mscclpp", "ffi", "kernels", "runtime", "nccl") for p in (REPO / d).rglob("*")
               if p.suffix in (".py", ".h", ".cc", ".cu", ".cuh")]
    found = [str(p.relative_to(REPO)) for p in sources
             if _ASKS_BY_NAME[".py" if p.suffix == ".py" else ".cc"].search(p.read_text())]
    assert not found
    assert _ASKS_BY_NAME[".py"].search('REDUCING = ("all_reduce", "reduce_scatter")')
    assert _ASKS_BY_NAME[".py"].search("collective in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER)")
    assert _ASKS_BY_NAME[".cc"].search("return code == codes::kAllReduce || code == codes::kReduceScatter;")


# The block layout ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("collective", list(Collective))
def test_python_block_layout_is_the_native_one(collective):
    for world in (1, 2, 3, 8, 16):
        for in_elems in (0, 1, 6, 24, 48):
            for out_elems in (0, 1, 2, 3, 6, 24, 48, 144, 384):
                assert layout.block_count_of(collective, in_elems, out_elems, world) == \
                    native.block_count_of(int(collective), in_elems, out_elems, world), (world, in_elems, out_elems)
    assert native.block_count_of(len(Collective), 4, 4, 2) is None
    assert native.block_count_of(int(collective), 4, 4, 0) is None


@pytest.mark.parametrize("collective", list(Collective))
def test_out_shape_fits_the_layout(collective):
    world = 4
    in_blocks, _ = layout.blocks(collective, world)
    in_shape = (world, 3, 5) if in_blocks > 1 else (3, 5)
    out = layout.out_shape(collective, in_shape, world)
    block = layout.block_count_of(collective, int(np.prod(in_shape)), int(np.prod(out)), world)
    assert block == 15
