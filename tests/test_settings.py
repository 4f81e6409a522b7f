"""The one table of environment variables (kernels/include/jax_mscclpp/settings.def): the package checks each at
import by its kind (tests/test_visibility.py refuses one value of each kind), info() lists them, README's
"Environment" table has exactly its rows, the Python constants name rows of it, and no native source reads a
variable of ours except through jax_mscclpp/settings.h."""

import re
from pathlib import Path

import jax_mscclpp as jm
from jax_mscclpp import settings

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_is_read():
    assert len(settings.SETTINGS) >= 15
    timeout = settings.SETTINGS["JAX_MSCCLPP_TIMEOUT_S"]
    assert timeout["kind"] == "kPositiveNumber" and timeout["default"] == "300"
    assert all(row["what"] and row["default"] for row in settings.SETTINGS.values())


def test_readme_lists_every_setting_and_no_other():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("### Environment"):].split("\n### ")[0]
    first_columns = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    named = {name for column in first_columns for name in re.findall(r"`(JAX_MSCCLPP_\w+)`", column)}
    assert named == set(settings.SETTINGS)


def test_python_constants_name_rows():
    constants = {v for k, v in vars(settings).items() if k.startswith("ENV_") and isinstance(v, str)}
    assert constants <= set(settings.SETTINGS), constants - set(settings.SETTINGS)


def test_info_lists_every_setting(monkeypatch):
    monkeypatch.setenv("JAX_MSCCLPP_NCCL_RUNTIME", "0")
    listed = jm.info()["settings"]
    assert set(listed) == set(settings.SETTINGS)
    assert listed["JAX_MSCCLPP_NCCL_RUNTIME"] == "0"


def test_native_sources_read_our_variables_through_the_table():
    raw = []
    for folder in ("kernels", "runtime", "ffi", "nccl"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".h", ".cc", ".cu", ".cuh") and path.name != "settings.h":
                for match in re.finditer(r'getenv\(\s*"(JAX_MSCCLPP_\w+)"', path.read_text()):
                    raw.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert raw == []
    names = set(re.findall(r'"(JAX_MSCCLPP_\w+)"', (ROOT / "kernels/include/jax_mscclpp/settings.def").read_text()))
    assert names == set(settings.SETTINGS)
