"""The tools' short names (pyproject.toml's [project.scripts]) name the entry points `python -m` runs: each is a
`main` that takes argv and answers --help."""

import importlib
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
# What each short name stands for: the module `python -m` runs (README.md, "Benchmarking").
MODULES = {"jax-mscclpp-bench": "jax_mscclpp.tools.bench",
           "jax-mscclpp-kernel-record": "jax_mscclpp.tools.bench.kernel_record",
           "jax-mscclpp-tune": "jax_mscclpp.tools.tune",
           "jax-mscclpp-soak": "jax_mscclpp.tools.soak"}


def test_every_short_name_is_listed_in_readme():
    readme = (REPO / "README.md").read_text()
    assert set(SCRIPTS) == set(MODULES)
    for name in SCRIPTS:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_short_name_runs_what_python_m_runs(name, capsys):
    module_name, function = SCRIPTS[name].split(":")
    main = getattr(importlib.import_module(module_name), function)
    runs = importlib.import_module(MODULES[name])
    entry = getattr(runs, "main", None) or importlib.import_module(MODULES[name] + ".__main__").main
    assert main is entry
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()
