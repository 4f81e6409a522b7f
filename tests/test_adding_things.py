"""docs/architecture.md's "Adding things" against the tree: every path it names exists, a numbered list has as many
items as the count its paragraph gives, and each file the list for a new collective names holds every collective
of codes.def today (its row, its case, its entry), so that the list is the files a new one touches."""

import pathlib
import re

import pytest

from jax_mscclpp._codes import CODE_TABLES
from jax_mscclpp.collective_specs import PUBLIC_NAMES

REPO = pathlib.Path(__file__).resolve().parents[1]
SECTION = re.search(r"^## Adding things\n(.*?)(?=^## |\Z)", (REPO / "docs" / "architecture.md").read_text(),
                    re.S | re.M).group(1)
# The paragraphs of the section: "**A collective** ... touches N files plus tests:" and what follows it.
PARAGRAPHS = {m.group(1): m.group(0) for m in re.finditer(r"^\*\*(An? [^*]+)\*\*.*?(?=^\*\*An? |\Z)", SECTION,
                                                         re.S | re.M)}
_TOP = ("kernels", "runtime", "ffi", "nccl", "jax_mscclpp", "tests", "docs", "bench", "examples")


def paths_named(text: str) -> list[str]:
    """The repository paths among the backticked words of ``text`` (a ``{h,cc}`` group expanded; a ``<name>``
    placeholder, a file still to write, left out)."""
    found = []
    for word in re.findall(r"`([^`\s]+)`", text):
        if not word.startswith(tuple(t + "/" for t in _TOP)) or "<" in word:
            continue
        group = re.search(r"\{([^}]*)\}", word)
        found += [word[:group.start()] + alt + word[group.end():] for alt in group.group(1).split(",")] if group \
            else [word]
    return found


def exists(path: str) -> bool:
    """``path`` from the repository root, or as an include path (``jax_mscclpp/settings.h``)."""
    return (REPO / path).exists() or (REPO / "kernels" / "include" / path).exists()


def test_the_section_has_its_paragraphs():
    assert {"An all_reduce algorithm", "A collective", "A DSL op", "A setting", "A dtype", "A channel kind"} <= \
        set(PARAGRAPHS)


@pytest.mark.parametrize("path", sorted(set(paths_named(SECTION))))
def test_every_path_named_exists(path):
    assert exists(path), path


@pytest.mark.parametrize("what", [w for w, text in PARAGRAPHS.items() if re.search(r"^1\. ", text, re.M)])
def test_a_numbered_list_has_the_count_its_paragraph_gives(what):
    text = PARAGRAPHS[what]
    count = int(re.search(r"touches (\d+) files? plus tests", text).group(1))
    items = [int(n) for n in re.findall(r"^(\d+)\. ", text, re.M)]
    assert items == list(range(1, count + 1)), (what, count, items)


def _forms(row) -> list[str]:
    """How a source names the collective of codes.def row ``row``: its enumerator, its Python member, its name and
    the public names of the drop-ins that are the collective itself."""
    member = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", row["enumerator"][1:]).upper()
    public = [p.name for p in PUBLIC_NAMES if p.is_the_collective and p.collective.name == member]
    return [row["enumerator"], member, row["name"], *public]


def _names(text: str, row) -> bool:
    return any(re.search(r"\b" + re.escape(form) + r"\b", text) for form in _forms(row))


def _text(path: str) -> str:
    target = REPO / path
    if target.is_dir():
        return "\n".join(p.read_text() for p in sorted(target.rglob("*")) if p.is_file())
    return target.read_text()


def test_each_file_a_collective_touches_holds_every_collective():
    text = PARAGRAPHS["A collective"]
    items = re.findall(r"^(\d+)\. `([^`]+)`", text, re.M)
    assert len(items) == int(re.search(r"touches (\d+) files", text).group(1))
    # "A family of its own puts items 3, 5 and 6 in one module, as the permutation does (`<module>`...": those
    # items may leave the family's collectives to that module.
    family = re.search(r"puts items ([\d, and]+) in one module, as the \w+ does \(`([^`]+)`", text)
    family_items = {int(n) for n in re.findall(r"\d+", family.group(1))}
    family_text = _text(family.group(2))
    missing = {}
    for number, path in items:
        body = _text(path)
        for row in CODE_TABLES["collective"]:
            if _names(body, row):
                continue
            if int(number) in family_items and _names(family_text, row):
                continue
            missing.setdefault(path, []).append(row["name"])
    assert not missing


def test_the_files_where_they_apply_exist():
    text = PARAGRAPHS["A collective"]
    also = text[text.index("Where they apply"):]
    named = paths_named(also)
    assert "jax_mscclpp/tools/soak/configs.py" in named and "ffi/call_decoding.h" in named
    assert all(exists(p) for p in named), [p for p in named if not exists(p)]
