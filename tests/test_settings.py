"""The one table of environment variables (kernels/include/jax_mscclpp/settings.def): the package checks each at
import by its kind (tests/test_visibility.py refuses one value of each kind), info() lists them, README's
"Environment" table has exactly its rows, the Python constants name rows of it, and no native source reads a
variable of ours except through jax_mscclpp/settings.h."""

import re
from pathlib import Path

import pytest

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


STREAM_SETTINGS = ("JAX_MSCCLPP_STREAM_BLOCKS", "JAX_MSCCLPP_STREAM_BLOCK_BYTES", "JAX_MSCCLPP_STREAM_CHUNK",
                   "JAX_MSCCLPP_STREAM_SLOTS")


def test_the_runtime_reads_the_stream_settings_from_the_table(monkeypatch, capfd):
    """The GPU runtime's streaming knobs (runtime/gpu/rank_context.h): settings.def's defaults, the variables where
    set, and the default with a line on stderr for a value the package did not check (a process without it)."""
    from tests.harness import native_module

    harness = native_module()
    if harness is None:
        pytest.skip("needs the CUDA build's test harness")
    for name in STREAM_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    defaults = tuple(int(settings.SETTINGS[name]["default"]) for name in STREAM_SETTINGS)
    assert harness.stream_settings() == defaults
    monkeypatch.setenv("JAX_MSCCLPP_STREAM_SLOTS", "7")
    monkeypatch.setenv("JAX_MSCCLPP_STREAM_CHUNK", "1000")  # rounded up to 16 bytes
    monkeypatch.setenv("JAX_MSCCLPP_STREAM_BLOCKS", "2000")  # capped at the epoch slots
    assert harness.stream_settings() == (1024, defaults[1], 1008, 7)
    monkeypatch.setenv("JAX_MSCCLPP_STREAM_SLOTS", "4x")
    assert harness.stream_settings()[3] == defaults[3]
    assert 'ignoring JAX_MSCCLPP_STREAM_SLOTS="4x" (not a positive integer)' in capfd.readouterr().err


def test_the_kernels_read_no_setting():
    """Device code and its launchers take every knob as an argument (the runtime reads the settings)."""
    readers = []
    for path in (ROOT / "kernels").rglob("*"):
        if path.suffix in (".h", ".cc", ".cu", ".cuh") and path.name != "settings.h":
            text = path.read_text()
            readers += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(r"\b(getenv|setting_value|"
                                                                            r"positive_integer_setting)\s*\(", text)]
    assert readers == []
