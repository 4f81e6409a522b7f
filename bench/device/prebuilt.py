"""The package and the GPU tests' harness built on another machine, for a device machine that would otherwise spend
its first minutes compiling (bench/device/recipes.sh build: about 3 minutes on 16 cores).

    python3.12 bench/device/prebuilt.py make [--dir .devcache/prebuilt] [--archs 90]   # here, before the call
    python3 bench/device/prebuilt.py install [--dir .devcache/prebuilt]                # there (recipe prebuilt)

``make`` builds README's wheel (the CUDA parts for ``--archs``, with the Python that runs it: it must be the device's
minor version, 3.12) and the harness module, and writes them with a stamp: a hash of every file the native build
reads. ``install`` recomputes the hash over the tree it runs in and refuses (exit status 1) where the sources
differ from those built, so a stale build never runs; else it installs the wheel (the NCCL hook and the plugin
into site-packages) and puts the wheel's native files beside the source tree's modules and the harness into
tests/harness, as an editable build leaves them, since the repository root comes first on the recipes'
PYTHONPATH. Carry the folder (``carry: [".devcache"]``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the native build reads: its sources and CMake files, the build backend and the project's metadata.
NATIVE_DIRS = ("kernels", "runtime", "nccl", "ffi", "tests/harness/native", "tools")
NATIVE_FILES = ("pyproject.toml", "CMakeLists.txt")
SKIPPED_SUFFIXES = (".so", ".pyc")
HARNESS_PREFIX = "_jax_mscclpp_testing"


def native_sources_hash(root: Path = ROOT) -> str:
    """sha256 over the path and bytes of every file the native build reads, in path order."""
    paths = {root / name for name in NATIVE_FILES}
    for folder in NATIVE_DIRS:
        paths.update(p for p in (root / folder).rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in sorted(paths):
        if path.suffix in SKIPPED_SUFFIXES or "__pycache__" in path.parts or not path.is_file():
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def make(out: Path, archs: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    sources = native_sources_hash()
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out),
                    "-C", "cmake.define.JAX_MSCCLPP_CUDA=ON", "-C", f"cmake.define.JAX_MSCCLPP_CUDA_ARCHS={archs}",
                    "-C", "cmake.define.JAX_MSCCLPP_TESTING=ON", "-C", f"build-dir=build/prebuilt-{python_tag()}"],
                   check=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    harness = ROOT / "tests" / "harness" / f"{HARNESS_PREFIX}{suffix}"
    with open(harness, "rb") as src, lzma.open(out / (harness.name + ".xz"), "wb", preset=1) as dst:
        shutil.copyfileobj(src, dst)
    if native_sources_hash() != sources:
        sys.exit("the native sources changed during the build; make again")
    stamp = {"sources": sources, "python": python_tag(), "archs": archs,
             "wheel": next(out.glob("*.whl")).name, "harness": harness.name}
    (out / "stamp.json").write_text(json.dumps(stamp, indent=1) + "\n")
    print(f"prebuilt for {python_tag()}, sm {archs}, sources {sources[:12]}: {out}")


def install(folder: Path) -> int:
    stamp_path = folder / "stamp.json"
    if not stamp_path.is_file():
        print(f"no prebuilt package in {folder}")
        return 1
    stamp = json.loads(stamp_path.read_text())
    if stamp["python"] != python_tag():
        print(f"prebuilt for {stamp['python']}, this Python is {python_tag()}")
        return 1
    if stamp["sources"] != native_sources_hash():
        print("the prebuilt package was built from other native sources than this tree's")
        return 1
    wheel = folder / stamp["wheel"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                    str(wheel)], check=True, env={**os.environ, "PIP_BREAK_SYSTEM_PACKAGES": "1"})
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        native = [n for n in archive.namelist()
                  if n.startswith("jax_mscclpp/") and (n.endswith(".so") or n.startswith("jax_mscclpp/lib/"))]
        for name in native:
            archive.extract(name, tmp)
            target = ROOT / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(Path(tmp) / name), target)
    with lzma.open(folder / (stamp["harness"] + ".xz"), "rb") as src, \
            open(ROOT / "tests" / "harness" / stamp["harness"], "wb") as dst:
        shutil.copyfileobj(src, dst)
    print(f"installed the prebuilt package ({stamp['python']}, sm {stamp['archs']}) and its harness")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("make", "install"))
    parser.add_argument("--dir", default=str(ROOT / ".devcache" / "prebuilt"))
    parser.add_argument("--archs", default="90", help="CMake CUDA architectures (make)")
    args = parser.parse_args(argv)
    if args.action == "make":
        make(Path(args.dir), args.archs)
        return 0
    return install(Path(args.dir))


if __name__ == "__main__":
    sys.exit(main())
