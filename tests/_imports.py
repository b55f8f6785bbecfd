"""The import graph of ``src/firstdiv``, read from the source with :mod:`ast`: every import a module can
execute, at module level or deferred inside a function, resolved to the firstdiv module it loads.
Imports under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

SRC = Path(__file__).resolve().parent.parent / "src"


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted((SRC / "firstdiv").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            stack.append(child)


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def imported_names(module: str, path: Path) -> Iterator[tuple[tuple[str, ...], str]]:
    """For each name an import in ``path`` loads: (the dotted names it may be, most specific first; the
    import's text). ``from X import n`` is the module ``X.n`` when there is one, else ``X``."""
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        text = ast.unparse(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield (alias.name,), text
            continue
        base = _base(module, path, node)
        for alias in node.names:
            yield (f"{base}.{alias.name}", base), text


def _resolve(candidates: tuple[str, ...], files: dict[str, Path]) -> str | None:
    for name in candidates:
        if name in files:
            return name
    name = candidates[-1]
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    """firstdiv module -> the firstdiv modules it imports (module level and deferred)."""
    files = module_files()
    edges: dict[str, set[str]] = {name: set() for name in files}
    for module, path in files.items():
        for candidates, _text in imported_names(module, path):
            target = _resolve(candidates, files) if candidates[-1].startswith("firstdiv") else None
            if target and target != module:
                edges[module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of two or more modules, each sorted."""
    names = sorted(edges)
    index = {name: i for i, name in enumerate(names)}
    rows = [index[a] for a in names for b in edges[a]]
    cols = [index[b] for a in names for b in edges[a]]
    matrix = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(matrix, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for name, label in zip(names, labels):
        groups.setdefault(int(label), []).append(name)
    return sorted(sorted(group) for group in groups.values() if len(group) > 1)


def importers_of(prefix: str) -> dict[str, list[str]]:
    """Module -> its import lines that name ``prefix`` (an external package such as ``click``)."""
    out: dict[str, list[str]] = {}
    for module, path in module_files().items():
        for candidates, text in imported_names(module, path):
            name = candidates[-1]
            if name == prefix or name.startswith(prefix + "."):
                out.setdefault(module, []).append(text)
    return {module: sorted(set(lines)) for module, lines in out.items()}
