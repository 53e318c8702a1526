"""The package's import graph has no cycles.

Every import counts, wherever it is written (module level, inside a function, under
TYPE_CHECKING): a cycle hidden in a function or a type-only import is still two modules that
cannot be understood, changed or tested one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the README's Quick start promises 3.10+
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _packages() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = config.get("package-dir", {})
    return {name: ROOT / folders.get(name, name.replace(".", "/")) for name in config["packages"]
            if "." not in name or name in folders}


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in _packages().items():
        for file in folder.rglob("*.py"):
            parts = [p for p in file.relative_to(folder).with_suffix("").parts if p != "__init__"]
            modules[".".join([package, *parts])] = file
    return modules


def _imports(name: str, file: Path, modules: dict[str, Path]) -> set[str]:
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {imported for imported in found if imported in modules and imported != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, file, modules) for name, file in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle():
    graph = _graph()
    assert "gradlint.file_model" in graph and "gradlint.flow" in graph["gradlint.file_model"]
    assert _cycles(graph) == []

