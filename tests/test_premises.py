"""Evidence before FAIL: every check kind an instrument can FAIL has its premise in ``firstdiv._premises``
(served by the registry, rendered to ``docs/checks.md``). A static scan of the instruments' source finds the kinds
passed beside a FAIL, so a new FAIL without a premise fails here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import firstdiv
from firstdiv._premises import OTHER_INSTRUMENTS, PREMISES, REGENERATE, render_checks_md, unconfirmed_kinds
from firstdiv._registry import SPECS, premise

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "firstdiv"
INSTRUMENTS = PACKAGE / "instruments"
KIND = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
PREFIX = re.compile(r"^[a-z][a-z0-9_]*\.([a-z0-9_]+\.)*$")
#: where the kind sits among a call's positional arguments, for the callees that take one beside a status
KIND_ARG = {"check": 1, "_check": 1, "finding": 1, "Finding": 1, "claim": 2, "add": 1}
#: dotted literals the scan finds beside a FAIL that never FAIL themselves, and why
NOT_FAILING = {"step.update": 'the PASS branch of `"step.update_rule" if bad else "step.update"`, whose status is FAIL '
                              "only when bad"}


# ---- the scan -----------------------------------------------------------------------------------------------------

def _has_fail(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == "FAIL") or (isinstance(n, ast.Constant) and n.value == "FAIL")
               for n in ast.walk(node))


def _assignments(body: list[ast.stmt]) -> dict[str, list[ast.expr]]:
    """Name -> the expressions assigned to it in ``body`` (nested functions left out; tuples matched by position)."""
    out: dict[str, list[ast.expr]] = {}
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and isinstance(
                    node.value, ast.Tuple) else [(target, node.value)]
                for t, v in pairs:
                    if isinstance(t, ast.Name):
                        out.setdefault(t.id, []).append(v)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _module_of(path: Path, node: ast.ImportFrom) -> Path | None:
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    target = base.joinpath(*(node.module or "").split(".")) if node.module else base
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _tree(path: Path, cache: dict[Path, ast.Module] = {}) -> ast.Module:  # noqa: B006 - a cache on purpose
    if path not in cache:
        cache[path] = ast.parse(path.read_text())
    return cache[path]


def _constants(path: Path, seen: frozenset[Path] = frozenset()) -> dict[str, list[ast.expr]]:
    """A module's top-level assignments, with the names it imports from sibling modules resolved there (one level:
    a constant is defined where it is written)."""
    tree = _tree(path)
    out = _assignments([s for s in tree.body if isinstance(s, ast.Assign)])
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level and not seen:
            source = _module_of(path, node)
            if source is not None:
                theirs = _constants(source, seen | {path})
                out.update({a.asname or a.name: theirs[a.name] for a in node.names if a.name in theirs})
    return out


class _Scan(ast.NodeVisitor):
    """Kinds passed beside a FAIL (call or tuple arguments; a local or module constant resolved to its strings), kinds
    passed to a helper that FAILs with its argument, and the fixed prefixes of f-string kinds."""

    def __init__(self, constants: dict[str, list[ast.expr]], helpers: dict[str, int]) -> None:
        self.scopes = [constants]
        self.helpers, self.kinds, self.prefixes = helpers, set(), set()
        self.found_helpers: dict[str, int] = {}

    def strings(self, node: ast.AST | None, depth: int = 0) -> list[str]:
        if node is None or depth > 4:
            return []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            return self.strings(node.body, depth + 1) + self.strings(node.orelse, depth + 1)
        if isinstance(node, ast.BinOp):
            return self.strings(node.left, depth + 1)
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and PREFIX.match(str(head.value)):
                self.prefixes.add(str(head.value))
            return []
        if isinstance(node, ast.Name):
            scope = next((s for s in reversed(self.scopes) if node.id in s), {})
            return [s for v in scope.get(node.id, []) for s in self.strings(v, depth + 1)]
        return []

    def failing(self, node: ast.AST) -> bool:
        if _has_fail(node) and not isinstance(node, (ast.Call, ast.Tuple)):
            return True
        if isinstance(node, ast.Name):
            scope = next((s for s in reversed(self.scopes) if node.id in s), {})
            return any(_has_fail(v) for v in scope.get(node.id, []))
        return False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scopes.append(_assignments(node.body))
        params = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            name = getattr(call.func, "id", getattr(call.func, "attr", ""))
            index = KIND_ARG.get(name)
            if index is not None and len(call.args) > index and any(self.failing(a) for a in call.args) \
                    and isinstance(call.args[index], ast.Name) and call.args[index].id in params:
                self.found_helpers[node.name] = params.index(call.args[index].id)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _collect(self, values: list[ast.AST]) -> None:
        self.kinds.update(s for v in values for s in self.strings(v) if KIND.match(s))

    def visit_Call(self, node: ast.Call) -> None:
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        if any(self.failing(a) for a in node.args):
            index = KIND_ARG.get(name)
            self._collect(node.args if index is None else node.args[index:index + 1])
        elif name in self.helpers:
            i = self.helpers[name]
            self._collect(node.args[i:i + 1])
        self.generic_visit(node)

    def visit_Tuple(self, node: ast.Tuple) -> None:
        if any(self.failing(e) for e in node.elts):
            self._collect(node.elts)
        self.generic_visit(node)


def scan(root: Path = INSTRUMENTS) -> tuple[set[str], set[str]]:
    """(kinds passed beside a FAIL, fixed prefixes of f-string kinds) in every module under ``root``; two passes,
    the first finding the helpers that FAIL with a kind they are given (``failed(link, kind, ...)``)."""
    files = sorted(root.rglob("*.py"))
    helpers: dict[str, int] = {}
    for _ in range(2):
        kinds, prefixes, found = set(), set(), {}
        for path in files:
            s = _Scan(_constants(path), helpers)
            s.visit(_tree(path))
            kinds |= s.kinds
            prefixes |= s.prefixes
            found.update(s.found_helpers)
        helpers = found
    return kinds, prefixes


def missing_premises(premises: dict, scanned: tuple[set[str], set[str]]) -> list[str]:
    kinds, prefixes = scanned
    absent = sorted(k for k in kinds if k not in premises and k not in NOT_FAILING)
    absent += sorted(f"{p}* (an f-string kind)" for p in prefixes if not any(k.startswith(p) for k in premises))
    return absent


@pytest.fixture(scope="module")
def scanned() -> tuple[set[str], set[str]]:
    return scan()


# ---- the tests ----------------------------------------------------------------------------------------------------

def test_docs_checks_md_is_the_rendering_of_the_table():
    text = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")
    assert text == render_checks_md(), f"docs/checks.md is stale: regenerate it with\n    {REGENERATE}"


def test_every_kind_names_an_instrument_that_exists():
    registered = [s.name for s in SPECS]
    for kind, p in PREMISES.items():
        for name in p.instruments:
            assert name in registered or name in OTHER_INSTRUMENTS, f"{kind}: {name!r} is not an instrument"
    assert all(firstdiv._LAZY[name] == module for name, module in OTHER_INSTRUMENTS.items())
    order = [p.instrument for p in PREMISES.values() if p.instrument in registered]
    assert sorted(dict.fromkeys(order), key=registered.index) == list(dict.fromkeys(order)), "table not in SPECS order"


def test_every_kind_passed_beside_a_fail_has_a_premise(scanned):
    kinds, prefixes = scanned
    assert len(kinds) > 80 and {"reachability.", "gradient.", "stage."} <= prefixes, (len(kinds), prefixes)
    assert missing_premises(PREMISES, scanned) == [], "kinds that can FAIL without a premise in firstdiv._premises.PREMISES"


@pytest.mark.parametrize("kind", ["step.no_gradient", "ownership.unowned", "attention.axis_semantics",
                                  "task.label_mismatch", "objective.empty_mask", "facts.nonfinite_loss",
                                  "claim.computation.zero_init", "compile.graph_break", "mode.train_at_eval"])
def test_the_scan_notices_a_removed_premise(scanned, kind):
    """Each way a kind reaches a FAIL (a literal, a tuple, an imported constant, a helper, a local variable, a status
    variable) is seen: dropping its premise is reported."""
    assert kind in scanned[0]
    assert missing_premises({k: v for k, v in PREMISES.items() if k != kind}, scanned) == [kind]


def test_every_premise_names_a_kind_in_the_source(scanned):
    text = "\n".join(p.read_text() for root in (INSTRUMENTS, PACKAGE / "lab") for p in root.rglob("*.py"))
    stray = [k for k in PREMISES if f'"{k}"' not in text and not any(k.startswith(p) for p in scanned[1])]
    assert not stray, f"premises for kinds no instrument emits: {stray}"


def test_confirmed_says_what_the_text_says():
    for kind, p in PREMISES.items():
        assert p.premise and p.confirmation and p.unconfirmed, kind
        if p.confirmed:
            assert not p.unconfirmed.startswith("not confirmed"), kind
        else:
            assert "not confirmed" in p.unconfirmed or p.unconfirmed.startswith("that of the failing item"), kind
            assert not p.unconfirmed.startswith("always confirmed"), kind
    assert unconfirmed_kinds() == [k for k, p in PREMISES.items() if not p.confirmed]


def test_premise_looks_a_kind_up_and_names_near_ones():
    assert premise("step.no_gradient").instrument == "step_probe"
    assert premise("optimizer.missing_parameter").instruments == ("four_structures", "learning_ledger")
    with pytest.raises(KeyError, match="step.no_gradient"):
        premise("step.no_gradiant")


def test_the_table_loads_without_torch():
    code = "import sys, firstdiv, firstdiv._registry as r; r.premise('step.no_gradient'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
