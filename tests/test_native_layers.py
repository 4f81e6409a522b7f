"""The native tree's layers (docs/architecture.md, "Layers"): the device code (kernels/), the runtime below the
frontends (runtime/) and the NCCL-API library (nccl/) include nothing of XLA, nanobind or Python, and nothing of
the frontend layer (ffi/); the runtime includes no frontend's header by name. Within them: the kernels include only
the kernels' headers, CUDA's and the standard library's; what every layer shares (runtime/common) includes nothing of
the layers that share it; the GPU runtime includes nothing of the CPU backend (runtime/reference) and links neither
it nor does the NCCL-API library."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("*.h", "*.cc", "*.cu", "*.cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
QUOTED_OR_ANGLED = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
FRONTEND_HEADERS = {p.name for p in (ROOT / "ffi").rglob("*.h")}


def headers(folder: str) -> set[str]:
    return {p.name for pattern in ("*.h", "*.cuh") for p in (ROOT / folder).rglob(pattern)}


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


def test_the_kernels_include_only_kernels_cuda_and_the_standard_library():
    """A quoted include names a header of kernels/ (kernels/include/, a folder of kernels/, or beside the file); an
    angled one CUDA's (cuda*.h) or the standard library's (<cstdint>: no folder, no extension)."""
    bad = {}
    for pattern in SOURCES:
        for path in (ROOT / "kernels").rglob(pattern):
            for form, i in QUOTED_OR_ANGLED.findall(path.read_text()):
                if form == '"':
                    kernels = ROOT / "kernels"
                    bases = (kernels / "include", kernels, path.parent)
                    ok = any((b / i).is_file() and kernels in (b / i).resolve().parents for b in bases)
                else:
                    ok = re.fullmatch(r"cuda[a-z0-9_]*\.h|[a-z_]+", i) is not None
                if not ok:
                    bad.setdefault(str(path.relative_to(ROOT)), []).append(i)
    assert not bad


def test_what_every_layer_shares_includes_none_of_them():
    layers = {"runtime/reference", "runtime/gpu", "runtime/select", "nccl", "ffi"}
    theirs = set().union(*(headers(layer) for layer in layers)) - headers("runtime/common")
    prefixes = ("reference/", "gpu/", "select/", "nccl/", "ffi/", "cuda/")
    bad = {f: [i for i in inc if Path(i).name in theirs or i.startswith(prefixes)]
           for f, inc in includes("runtime/common").items()}
    assert not {f: i for f, i in bad.items() if i}, f"runtime/common includes a header of {sorted(layers)}"


def test_the_gpu_runtime_includes_nothing_of_the_cpu_backend():
    reference = headers("runtime/reference") - headers("runtime/common")
    assert "host_executor.h" in reference
    bad = {f: [i for i in inc if Path(i).name in reference or i.startswith("reference/")]
           for f, inc in includes("runtime/gpu").items()}
    assert not {f: i for f, i in bad.items() if i}


LINK = re.compile(r"target_link_libraries\(\s*(\S+)([^)]*)\)", re.S)


@pytest.mark.parametrize("cmake", ["runtime/gpu/CMakeLists.txt", "nccl/CMakeLists.txt"])
def test_the_gpu_runtime_and_the_nccl_library_do_not_link_the_cpu_backend(cmake):
    links = [(target, args.split()) for target, args in LINK.findall((ROOT / cmake).read_text())]
    assert links, f"no target_link_libraries in {cmake}"
    assert not [(t, a) for t, a in links if "jax_mscclpp_reference" in a]
    if cmake.startswith("runtime/gpu"):
        assert ("jax_mscclpp_gpu_runtime", "jax_mscclpp_common") in {(t, lib) for t, a in links for lib in a}
