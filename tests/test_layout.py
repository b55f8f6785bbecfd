"""The layout's rules (DESIGN "Where things live"), checked on the source and in fresh interpreters, so a
change that breaks one fails here instead of quietly growing back: one import circle at most, render/
knows no lab, only cli/ imports click, no instrument reads another's private module, the sizes STYLE
asks for, and the public surface unchanged.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys

import pytest
from _imports import circles, graph, importers_of, module_files

import firstdiv

#: modules that are declared data tables (STYLE: exempt from the 400-line module limit)
DATA_TABLES = {"firstdiv.diagnosis._routing_table", "firstdiv.diagnosis._playbook", "firstdiv._premises"}
#: strings shaped like module names that are file-format tags (the gate file's and the evidence packet's)
FORMAT_TAGS = {"firstdiv.gate", "firstdiv.evidence_packet"}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter and return what it printed (the check's evidence)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_at_most_one_import_circle_and_it_is_the_report_display_hook():
    found = circles(graph())
    assert len(found) <= 1, f"import circles: {found}"
    for group in found:
        strangers = [m for m in group if m != "firstdiv.report" and not m.startswith("firstdiv.render")]
        assert not strangers, f"the one allowed circle is report <-> render/, this one holds {strangers}: {group}"


def test_the_circle_check_sees_deferred_imports(tmp_path, monkeypatch):
    """A deferred import inside a function closes a circle as surely as a module-level one."""
    import _imports

    pkg = tmp_path / "firstdiv"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n")
    monkeypatch.setattr(_imports, "SRC", tmp_path)
    assert _imports.circles(_imports.graph()) == [["firstdiv.a", "firstdiv.b"]]


def test_only_the_cli_imports_click():
    outside = {m: lines for m, lines in importers_of("click").items() if not m.startswith("firstdiv.cli")}
    assert not outside, f"click imported outside firstdiv/cli/: {outside}"


def test_render_imports_no_lab_instrument_or_diagnosis_module():
    edges = graph()
    bad = {m: sorted(t for t in targets if t.startswith(("firstdiv.lab", "firstdiv.instruments", "firstdiv.diagnosis")))
           for m, targets in edges.items() if m.startswith("firstdiv.render")}
    assert not {m: t for m, t in bad.items() if t}, bad
    loaded = _fresh("import sys, firstdiv.render, firstdiv.render.html\n"
                    "print(sorted(m for m in sys.modules if m.startswith(('firstdiv.lab', 'firstdiv.instruments', "
                    "'firstdiv.diagnosis'))))")
    assert loaded == "[]"


def test_lab_instruments_and_diagnosis_load_no_click():
    packages = ("firstdiv.lab", "firstdiv.instruments", "firstdiv.diagnosis")
    names = [m for m in module_files() if m.startswith(packages) and "ray_backend" not in m]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'click' not in sys.modules, name\n"
            "print('ok')")
    assert _fresh(code) == "ok"


def test_an_html_report_loads_no_scipy():
    code = ("import sys\nfrom firstdiv import Report, Status\n"
            "page = Report('shape_ledger', Status.PASS)._repr_html_()\n"
            "assert '<' in page\n"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('scipy', 'click')}))")
    assert _fresh(code) == "[]"


def test_no_instrument_imports_another_instruments_private_module():
    edges = graph()
    home = "firstdiv.instruments."
    bad = []
    for module, targets in edges.items():
        if not module.startswith(home) or module.startswith(home + "_core"):
            continue
        owner = module[len(home):].split(".")[0]
        for target in targets:
            parts = target[len(home):].split(".") if target.startswith(home) else []
            if len(parts) > 1 and parts[0] != owner and parts[0] != "_core" and parts[1].startswith("_"):
                bad.append(f"{module} -> {target}")
    assert not bad, bad


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_module_and_function_sizes_hold():
    too_long, long_functions = [], []
    for module, path in module_files().items():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and module not in DATA_TABLES:
            too_long.append(f"{module}: {lines} lines")
        for fn in _functions(ast.parse(text)):
            size = fn.end_lineno - fn.lineno + 1
            if size > MAX_FUNCTION_LINES:
                long_functions.append(f"{module}.{fn.name}: {size} lines")
    assert not too_long and not long_functions, (too_long, long_functions)


def test_declared_data_tables_exist():
    assert DATA_TABLES <= set(module_files()), DATA_TABLES - set(module_files())


@pytest.mark.parametrize("name", sorted(firstdiv.__all__))
def test_every_public_name_resolves(name):
    assert getattr(firstdiv, name) is not None


def test_the_public_surface_is_unchanged():
    assert sorted(firstdiv.__all__) == sorted(
        ["Comparison", "CurveComparison", "DiagnosticSet", "Divergence", "Factorial", "Finding", "FirstdivError", "Functional", "Gate", "Incident", "InvalidArgument", "NotFound", "Recorder", "Report", "RunRecord", "Status", "Store", "StoreError", "SweepResult", "WorkloadError", "Worksheet", "__version__", "aa", "attention_check", "bisect", "compare", "compare_outputs", "compile_ledger", "curves", "determinism", "diagnose", "eval_contract", "evidence_packet", "factorial", "feature_space", "four_structures", "grad_norm", "incident_close", "incident_list", "incident_new", "incident_show", "learning_ledger", "loader_timing", "log", "log_config", "memory_phases", "performance_ledger", "reachability", "rng_audit", "route", "routes", "shape_ledger", "six_claims", "stage_trace", "step_probe", "sweep", "tensor_trace", "throughput", "to_html", "variants", "vectorizable", "watch", "workload"])



def _module_strings() -> set[str]:
    """Every string constant in src/ that names a firstdiv module, or a ``module:attr`` in one."""
    pattern = re.compile(r"firstdiv(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?")
    found = set()
    for path in module_files().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.fullmatch(node.value):
                found.add(node.value)
    return found - FORMAT_TAGS


def test_the_check_finds_the_strings_resolved_at_run_time():
    strings = _module_strings()
    assert any(s.endswith(":run") for s in strings) and any(":" in s and "_command" in s for s in strings)


@pytest.mark.parametrize("target", sorted(_module_strings()))
def test_every_module_string_in_the_code_resolves(target):
    """LAZY_COMMANDS, BACKENDS, PRELOAD, ``-m`` paths, package loaders: a move that breaks one fails here, not
    at the user's first sweep (the fork server ignores a preload name that fails to import)."""
    module, _, attr = target.partition(":")
    loaded = importlib.import_module(module)
    assert not attr or hasattr(loaded, attr), f"{module} has no {attr}"


def test_the_command_lines_help_loads_neither_torch_nor_scipy():
    """Every command loads on first use: ``firstdiv --help`` is a fraction of a second, not an import of torch."""
    code = ("import sys\nfrom firstdiv.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'scipy', 'numpy') if m in sys.modules))")
    assert _fresh(code).splitlines()[-1] == "[]"
