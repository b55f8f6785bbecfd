"""Where the store is without --store: the nearest .firstdiv/ upwards, inside the git work tree; created at its top
(or in the working directory outside one) with a .gitignore that keeps it out of commits."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import firstdiv
from firstdiv.lab.store import Store, default_path
from firstdiv.lab.store_discovery import discover


@pytest.fixture(autouse=True)
def _no_env_store(monkeypatch):
    monkeypatch.delenv("FIRSTDIV_STORE", raising=False)


def test_the_nearest_store_upwards_is_found_from_a_subdirectory(tmp_path, monkeypatch):
    (tmp_path / ".firstdiv").mkdir()
    (tmp_path / "a" / ".firstdiv").mkdir(parents=True)
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert default_path() == tmp_path / "a" / ".firstdiv" / "runs.db"
    monkeypatch.chdir(tmp_path)
    assert default_path() == Path(".firstdiv") / "runs.db"  # here: named as before, relative


def test_without_a_store_it_is_created_in_the_working_directory_with_a_gitignore(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Store() as st:
        assert st.path == Path(".firstdiv") / "runs.db"
    assert (tmp_path / ".firstdiv" / "runs.db").is_file()
    assert (tmp_path / ".firstdiv" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_the_search_stops_at_the_git_work_tree_and_creates_the_store_at_its_top(tmp_path, monkeypatch):
    (tmp_path / ".firstdiv").mkdir()  # another project's (or the home directory's) store: not this repository's
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    sub = repo / "src" / "exp"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert default_path() == repo / ".firstdiv" / "runs.db"
    worktree = tmp_path / "wt"
    (worktree / "deep").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")  # a worktree's .git is a file
    assert discover(worktree / "deep") == worktree / ".firstdiv" / "runs.db"
    assert discover(tmp_path / "elsewhere") == tmp_path / ".firstdiv" / "runs.db"  # outside git: upwards


def test_the_environment_variable_wins(tmp_path, monkeypatch):
    (tmp_path / ".firstdiv").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIRSTDIV_STORE", str(tmp_path / "other.db"))
    assert default_path() == tmp_path / "other.db"


def test_an_explicit_store_directory_gets_no_gitignore(tmp_path):
    with Store(tmp_path / "mine" / "runs.db"):
        pass
    assert (tmp_path / "mine" / "runs.db").is_file()
    assert not (tmp_path / "mine" / ".gitignore").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_sweep_from_a_subdirectory_lands_at_the_repo_top_git_ignores_it_and_runs_finds_it(tmp_path, monkeypatch,
                                                                                             tiny, cli):
    repo = tmp_path / "proj"
    (repo / "exp" / "a").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo / "exp" / "a")
    result = firstdiv.sweep(f"{tiny}:train", "0-1", name="here")
    assert Path(result.store_path) == repo / ".firstdiv" / "runs.db"
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, check=True,
                            capture_output=True, text=True).stdout
    assert ".firstdiv" not in status
    proc = cli("runs", "--json", cwd=repo / "exp")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)["payload"]
    assert Path(listed["store"]) == repo / ".firstdiv" / "runs.db"
    assert [s["name"] for s in listed["sweeps"]] == ["here"]
