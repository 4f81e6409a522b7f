"""The DSL (``jax_mscclpp/dsl/``) imports neither jax nor the native module, nor any part of jax_mscclpp that does.

``import jax_mscclpp.dsl`` runs the package's ``__init__`` first, which imports jax and the native module, so
importing it the ordinary way proves nothing. The check runs in a fresh interpreter that registers
``jax_mscclpp`` as a bare package (its ``__path__`` only, its ``__init__`` not run) and puts a finder first on
``sys.meta_path`` that refuses jax, jaxlib and the native module and loads the package's modules from its
directory (ahead of any finder an editable install added). It then imports ``jax_mscclpp.dsl`` and every
module of it: each import the DSL makes, of its own modules or of the package's, runs for real, and one that
reaches a refused module fails, naming it. ``sys.modules`` is checked afterwards as well.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[2] / "jax_mscclpp"
REFUSED = ("jax", "jaxlib", "jax_mscclpp._jax_mscclpp", "jax_mscclpp._native")

_CHILD = r"""
import importlib, importlib.abc, importlib.machinery, json, pkgutil, sys, types

package_dir, refused = sys.argv[1], tuple(json.loads(sys.argv[2]))

def is_refused(name):
    return any(name == r or name.startswith(r + ".") for r in refused)

class RefuseOrLoadFromPackageDir(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if is_refused(name):
            raise ImportError(f"the DSL imported {name}")
        if name.startswith("jax_mscclpp."):  # from package_dir's files, whatever an installed finder maps
            return importlib.machinery.PathFinder.find_spec(name, path)
        return None

sys.meta_path.insert(0, RefuseOrLoadFromPackageDir())
package = types.ModuleType("jax_mscclpp")
package.__path__ = [package_dir]
sys.modules["jax_mscclpp"] = package

dsl = importlib.import_module("jax_mscclpp.dsl")
names = [info.name for info in pkgutil.walk_packages(dsl.__path__, "jax_mscclpp.dsl.")]
for name in names:
    importlib.import_module(name)
dsl.run_plan  # imported on first use
print(json.dumps({"modules": names, "refused_loaded": sorted(m for m in sys.modules if is_refused(m))}))
"""


def test_dsl_imports_no_jax_and_no_native_module():
    result = subprocess.run([sys.executable, "-c", _CHILD, str(PACKAGE_DIR), json.dumps(REFUSED)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "jax_mscclpp.dsl.program" in report["modules"] and "jax_mscclpp.dsl.simulate" in report["modules"]
    assert report["refused_loaded"] == []


def test_the_check_refuses_what_it_should(tmp_path):
    """The same child, pointed at a package whose DSL imports jax, fails: the check is not vacuous."""
    dsl = tmp_path / "jax_mscclpp" / "dsl"
    dsl.mkdir(parents=True)
    (dsl / "__init__.py").write_text("import jax\n")
    result = subprocess.run([sys.executable, "-c", _CHILD, str(dsl.parent), json.dumps(REFUSED)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "the DSL imported jax" in result.stderr
