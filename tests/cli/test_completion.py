"""Shell completion (click's, docs/cli.md): each shell gets its script; command names, subcommands and the
options of a lazily loaded command complete; completing a command name loads no torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import sys
    from firstdiv.cli import main
    try:
        main([])
    except SystemExit:
        pass
    print("loaded:" + ",".join(m for m in ("torch", "scipy") if m in sys.modules), file=sys.stderr)
""")


def _complete(words: str) -> tuple[list[str], str]:
    """What `firstdiv WORDS<TAB>` offers in bash (click's bash_complete protocol), and what the process loaded."""
    env = {**os.environ, "_FIRSTDIV_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split(" ")) - 1)}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    offered = [line.partition(",")[2] for line in proc.stdout.splitlines()]
    return offered, proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _firstdiv_completion firstdiv"),
                                           ("zsh", "compdef _firstdiv_completion firstdiv"),
                                           ("fish", "complete --no-files --command firstdiv")])
def test_each_shell_gets_its_script(shell, marker):
    proc = subprocess.run([sys.executable, "-m", "firstdiv"], env={**os.environ, "_FIRSTDIV_COMPLETE": f"{shell}_source"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and f"_FIRSTDIV_COMPLETE={shell}_complete" in proc.stdout


def test_command_names_complete_without_loading_torch():
    offered, loaded = _complete("firstdiv com")
    assert offered == ["compare"]
    offered, loaded = _complete("firstdiv ")
    assert {"compare", "sweep", "gate", "incident", "rng-audit"} <= set(offered)
    assert loaded == "loaded:", loaded  # every command's module is imported for its help line, none loads torch


def test_options_and_subcommands_of_lazy_commands_complete():
    assert _complete("firstdiv compare --min")[0] == ["--min-effect"]
    assert set(_complete("firstdiv compare --")[0]) >= {"--metric", "--json", "--quiet", "--verbose", "--store"}
    assert _complete("firstdiv gate c")[0] == ["calibrate", "check"]
    assert _complete("firstdiv gate check --min")[0] == ["--min-effect"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_the_bash_script_completes_in_bash(tmp_path):
    """The generated script, sourced in a real bash, fills COMPREPLY through a `firstdiv` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "firstdiv"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m firstdiv \"$@\"\n")
    exe.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = subprocess.run(["firstdiv"], env={**env, "_FIRSTDIV_COMPLETE": "bash_source"}, capture_output=True,
                            text=True, timeout=60, check=True).stdout
    (tmp_path / "complete.bash").write_text(script)
    probe = ('. ./complete.bash; COMP_WORDS=(firstdiv compare --min); COMP_CWORD=2; _firstdiv_completion firstdiv; '
             'echo "${COMPREPLY[@]}"')
    proc = subprocess.run(["bash", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["--min-effect"]
