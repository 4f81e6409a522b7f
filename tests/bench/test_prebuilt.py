"""bench/device/prebuilt.py without a GPU: the hash of the native sources follows every file the native build reads
and no other, and `install` refuses a build it cannot trust (none, another Python, other sources) before touching
anything."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "device" / "prebuilt.py"

spec = importlib.util.spec_from_file_location("prebuilt_under_test", TOOL)
pb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pb)


@pytest.fixture
def tree(tmp_path):
    """A small tree with the native layout: one file in every native folder, both top-level files, and Python."""
    for folder in pb.NATIVE_DIRS:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "source.cc").write_text(f"// {folder}\n")
    for name in pb.NATIVE_FILES:
        (tmp_path / name).write_text(f"# {name}\n")
    (tmp_path / "jax_mscclpp").mkdir()
    (tmp_path / "jax_mscclpp" / "module.py").write_text("x = 1\n")
    return tmp_path


def test_the_hash_follows_native_sources_only(tree):
    before = pb.native_sources_hash(tree)
    assert before == pb.native_sources_hash(tree)
    (tree / "jax_mscclpp" / "module.py").write_text("x = 2\n")  # Python: not read by the native build
    (tree / "kernels" / "built.so").write_bytes(b"\0")  # a build product
    assert pb.native_sources_hash(tree) == before
    for changed in ("kernels/source.cc", "tests/harness/native/source.cc", "CMakeLists.txt", "pyproject.toml"):
        original = (tree / changed).read_text()
        (tree / changed).write_text(original + "// edited\n")
        assert pb.native_sources_hash(tree) != before, changed
        (tree / changed).write_text(original)
    (tree / "nccl" / "new.h").write_text("")  # a new file counts too
    assert pb.native_sources_hash(tree) != before
    (tree / "nccl" / "new.h").unlink()
    shutil.move(tree / "ffi" / "source.cc", tree / "ffi" / "renamed.cc")  # and a path
    assert pb.native_sources_hash(tree) != before


def run_install(folder):
    return subprocess.run([sys.executable, str(TOOL), "install", "--dir", str(folder)], capture_output=True,
                          text=True, timeout=120)


def test_install_refuses_what_it_cannot_trust(tmp_path):
    proc = run_install(tmp_path)
    assert proc.returncode == 1 and "no prebuilt package" in proc.stdout
    stamp = {"sources": pb.native_sources_hash(), "python": "cp27", "archs": "90", "wheel": "absent.whl",
             "harness": "absent.so"}
    (tmp_path / "stamp.json").write_text(json.dumps(stamp))
    proc = run_install(tmp_path)
    assert proc.returncode == 1 and "prebuilt for cp27" in proc.stdout
    (tmp_path / "stamp.json").write_text(json.dumps({**stamp, "python": pb.python_tag(), "sources": "0" * 64}))
    proc = run_install(tmp_path)
    assert proc.returncode == 1 and "other native sources" in proc.stdout
