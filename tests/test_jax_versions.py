"""The supported jax releases: one range in pyproject.toml, the import check and the build's header pin, and an
ImportError naming the range when the installed jax or jaxlib is outside it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jax_mscclpp import _jax_versions

ROOT = Path(__file__).resolve().parents[1]


def test_versions_outside_the_range_are_named():
    assert _jax_versions.unsupported({"jax": "0.10.2", "jaxlib": "0.12.0.1"}) == []
    assert _jax_versions.unsupported({"jax": "0.11.0.dev20261101", "jaxlib": "0.11.2"}) == []
    assert _jax_versions.unsupported({"jax": "0.9.2", "jaxlib": "0.13.0"}) == ["jax 0.9.2", "jaxlib 0.13.0"]
    assert _jax_versions.unsupported({"jaxlib": "unknown"}) == ["jaxlib unknown"]
    with pytest.raises(ImportError, match=r"supports jax and jaxlib >=0\.10,<0\.13 .*this Python has jaxlib 0\.9\.2"):
        _jax_versions.require_supported_jax({"jax": "0.10.2", "jaxlib": "0.9.2"})
    _jax_versions.require_supported_jax()  # the installed ones


def test_import_refuses_an_unsupported_jaxlib():
    code = "import jaxlib; jaxlib.__version__ = '0.13.1'; import jax_mscclpp"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_MSCCLPP_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=ROOT)
    assert proc.returncode != 0
    assert "ImportError: jax_mscclpp supports jax and jaxlib >=0.10,<0.13" in proc.stderr, proc.stderr
    assert "this Python has jaxlib 0.13.1" in proc.stderr, proc.stderr


def test_one_range_everywhere():
    """pyproject.toml's dependencies state the range the import checks; the build pins the oldest tested jaxlib
    for its headers, and CMakeLists.txt checks the headers against that release's FFI API."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _jax_versions.supported_range()
    for name in ("jax", "jaxlib"):
        assert f"{name}{wanted}" in project["dependencies"], project["dependencies"]
    backend = (ROOT / "tools" / "build_backend.py").read_text()
    pin = re.search(r'^HEADERS_JAXLIB = "([^"]+)"', backend, re.M).group(1)
    assert pin == _jax_versions.TESTED_JAX[0]
    assert _jax_versions.release_of(pin) == _jax_versions.SUPPORTED_JAX[0]
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert f"jaxlib=={pin}" in cmake and 'set(JAX_MSCCLPP_OLDEST_XLA_FFI_API "0.3")' in cmake

