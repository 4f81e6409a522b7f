"""The native tree's layers (docs/architecture.md, "Layers"): the device code (kernels/), the runtime below the
frontends (runtime/) and the NCCL-API library (nccl/) include nothing of XLA, nanobind or Python, and nothing of
the frontend layer (ffi/); the runtime includes no frontend's header by name."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("*.h", "*.cc", "*.cu", "*.cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
FRONTEND_HEADERS = {p.name for p in (ROOT / "ffi").rglob("*.h")}


def includes(folder: str) -> dict[str, list[str]]:
    found = {}
    for pattern in SOURCES:
        for path in (ROOT / folder).rglob(pattern):
            found[str(path.relative_to(ROOT))] = INCLUDE.findall(path.read_text())
    return found


@pytest.mark.parametrize("folder", ["kernels", "runtime", "nccl"])
def test_below_the_frontends_nothing_of_xla_or_python(folder):
    files = includes(folder)
    assert files, f"no sources under {folder}/"
    foreign = ("xla/", "nanobind/", "Python.h", "pybind11/")
    bad = {f: [i for i in inc if i.startswith(foreign)] for f, inc in files.items()}
    assert not {f: i for f, i in bad.items() if i}


@pytest.mark.parametrize("folder", ["kernels", "runtime", "nccl"])
def test_below_the_frontends_no_frontend_header(folder):
    bad = {f: [i for i in inc if Path(i).name in FRONTEND_HEADERS] for f, inc in includes(folder).items()}
    assert not {f: i for f, i in bad.items() if i}, f"frontend headers ({sorted(FRONTEND_HEADERS)}) included"


def test_the_frontend_headers_are_the_xla_facing_ones():
    assert {"call_decoding.h", "handlers.h", "host_failure_status.h", "bindings.h"} == FRONTEND_HEADERS
