"""`firstdiv diagnose FILE.py:fn` imports the helper modules beside FILE, from any working directory, as a sweep's
workload file does; the folder is taken off sys.path again afterwards."""

import json
import sys
import textwrap

import pytest

from firstdiv.errors import InvalidArgument

HELPERS = textwrap.dedent("""
    from firstdiv import zoo

    def evidence():
        return zoo.build("regression", seed=0).evidence()
""")

CASE = textwrap.dedent("""
    import casehelpers_top

    def make_evidence():
        return casehelpers_top.evidence()

    def lazy():
        import casehelpers_lazy  # imported when the function runs, not when the file is loaded
        return casehelpers_lazy.evidence()

    def missing():
        import casehelpers_nowhere
        return {}
""")


@pytest.fixture
def case(tmp_path):
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "casehelpers_top.py").write_text(HELPERS)
    (folder / "casehelpers_lazy.py").write_text(HELPERS)
    (folder / "case.py").write_text(CASE)
    (tmp_path / "elsewhere").mkdir()
    return folder / "case.py"


def test_the_command_imports_helpers_beside_the_case_file(case, cli, tmp_path):
    for fn in ("make_evidence", "lazy"):
        proc = cli("diagnose", f"{case}:{fn}", "--json", cwd=tmp_path / "elsewhere")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["payload"]["status"] == "PASS"
    relative = cli("diagnose", "cases/case.py:make_evidence", "--json", cwd=tmp_path)
    assert relative.returncode == 0, relative.stderr


def test_a_helper_that_is_not_there_is_still_one_line_exit_2(case, cli, tmp_path):
    proc = cli("diagnose", f"{case}:missing", cwd=tmp_path / "elsewhere")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "casehelpers_nowhere" in lines[0], proc.stderr


def test_the_folder_is_on_sys_path_only_while_the_case_loads_and_runs(case, monkeypatch):
    from firstdiv.cli.diagnose import _case_evidence

    for name in ("casehelpers_top", "casehelpers_lazy"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    before = list(sys.path)
    evidence = _case_evidence(f"{case}:lazy")
    assert {"model", "batch"} <= set(evidence)
    assert sys.path == before and str(case.parent) not in sys.path
    with pytest.raises(InvalidArgument, match="casehelpers_nowhere"):
        _case_evidence(f"{case}:missing")
    assert sys.path == before
    for name in ("casehelpers_top", "casehelpers_lazy"):
        sys.modules.pop(name, None)
