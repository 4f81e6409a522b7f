"""No import cycle among jax_mscclpp's modules, counting every import: module level, inside functions and
classes, under ``if`` or ``try``, relative ones resolved; and the package's core never imports its command-line
tools (``jax_mscclpp.tools``), which are built on it.

The graph is read from the source with ``ast`` (nothing is imported): an edge A -> B for every ``import B``,
``from B import x`` or ``from B.x import y`` in A (``from package import submodule`` is an edge to the
submodule). Importing a package runs its ``__init__``, so an edge to ``a.b.c`` also stands for edges to ``a.b``
and ``a``'s ``__init__``; those implicit edges are left out here, since every package's ``__init__`` importing
its submodules is how packages work, not a cycle to break. The native extension (``NATIVE_MODULES``, built, not
a .py) is a module of the graph that imports none of the package.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = "jax_mscclpp"
ROOT = pathlib.Path(__file__).resolve().parents[1] / PACKAGE
NATIVE_MODULES = ("jax_mscclpp._jax_mscclpp",)
TOOLS = PACKAGE + ".tools"
# Beside the tools themselves, the modules that may import them: the pytest fixtures (``CollectiveBenchmark`` runs
# the benchmark tool's sweep).
USES_TOOLS = (PACKAGE + ".testing",)


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py under the package."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of a relative import ``from <level dots><name> import ...`` in ``module``."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package's modules ``module`` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            # `import a.b.c` imports a.b.c; keep the longest prefix that is one of the package's modules.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph = {module: set() for module in NATIVE_MODULES}
    modules.update(dict.fromkeys(NATIVE_MODULES))
    graph.update({module: imports_of(module, path, modules) for module, path in modules.items() if path})
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from .sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("import pkg.a\nfrom .. import a as _\n")
    modules = module_files(package)
    assert imports_of("pkg.a", modules["pkg.a"], modules) == {"pkg.sub.b"}
    assert imports_of("pkg.sub.b", modules["pkg.sub.b"], modules) == {"pkg.a"}
    graph = {m: imports_of(m, p, modules) for m, p in modules.items()}
    assert find_cycle(graph) in (["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.sub.b", "pkg.a", "pkg.sub.b"])


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    if cycle:
        pytest.fail("import cycle: " + " -> ".join(cycle))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_core_never_imports_the_tools():
    graph = import_graph()
    assert any(_within(m, TOOLS) for m in graph), "no tools found: the layout changed"
    found = {module: sorted(t for t in targets if _within(t, TOOLS)) for module, targets in graph.items()
             if not any(_within(module, allowed) for allowed in (TOOLS, *USES_TOOLS))}
    assert not {module: tools for module, tools in found.items() if tools}
