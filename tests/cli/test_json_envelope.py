"""Every command's --json is one envelope (docs/json.md) that validates against docs/json-envelope.schema.json, with
``exit_code`` the process's exit code; every bad input under --json is the one stderr line and an error envelope.
Every command takes -q (only the result) and -v (more detail). The commands run in this process, on the tests'
tiny workload and one small store shared by the module."""

from __future__ import annotations

import json
import textwrap

import click
import jsonschema
import pytest
from _paths import ROOT, WORKLOADS

from firstdiv.cli import LAZY_COMMANDS, cli, main

TINY = f"{WORKLOADS / 'tiny.py'}:train"
SCHEMA = json.loads((ROOT / "docs" / "json-envelope.schema.json").read_text(encoding="utf-8"))

CASE = textwrap.dedent("""
    import torch

    def make_evidence():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        batch = (torch.randn(8, 4), torch.randint(0, 3, (8,)))
        return {"model": model, "batch": batch, "loss_fn": torch.nn.functional.cross_entropy,
                "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
""")


def _subcommands(name: str) -> list[str]:
    cmd = cli.get_command(click.Context(cli), name)
    return [f"{name} {sub}" for sub in sorted(cmd.commands)] if isinstance(cmd, click.Group) else []


#: every command: LAZY_COMMANDS itself, and each group's subcommands in place of the group
COMMANDS = [sub or name for name in sorted(LAZY_COMMANDS) for sub in (_subcommands(name) or [None])]

#: per command: the arguments of a run on a tiny real input (None: too slow here, see SLOW) and of a bad input;
#: {w[key]} fields are filled from the module's world
CASES: dict[str, tuple[list[str] | None, list[str]]] = {
    "aa": ([TINY, "--pairs", "2", "--seeds-per-side", "2"], [TINY, "--min-effect", "0x"]),
    "bisect": ([TINY, "--candidate", "shift=0.5,noise=0.06", "--seeds", "0-1", "--max-seeds", "2"],
               [TINY, "--candidate", "zz=1"]),
    "compare": (["a", "b"], ["a", "nope"]),
    "curves": (["a", "b"], ["a", "b", "--alpha", "2"]),
    "demo": (None, ["--store", "{tmp}"]),
    "determinism": ([TINY, "--noise-seeds", "0-1"], [TINY, "--metric", "nope"]),
    "diagnose": (["{case}:make_evidence"], ["{case}:nothing"]),
    "export": (["--output", "{tmp}/runs.csv"], []),
    "factorial": ([TINY, "--a", "shift=0.5", "--b", "noise=0.1", "--seeds", "0-2"], [TINY, "--a", "shift=0.5",
                                                                                      "--b", "shift=1"]),
    "gate calibrate": (["a", "--alpha", "0.5", "-o", "{tmp}/gate2.json"], ["a", "-o", "{missing_dir}/gate.json"]),
    "gate check": (["{gate}", "b"], ["{tmp}/no-gate.json", "b"]),
    "incident close": (["{fresh_incident}", "--cause", "lr too high", "--repair", "lr 0.1", "--verification", "rerun",
                        "--regression-test", "tests/test_lr.py"], ["no-such-incident", "--cause", "x"]),
    "incident list": ([], ["--status", "sideways"]),
    "incident new": (["--symptom", "loss is flat"], ["--title", "no symptom"]),
    "incident show": (["{incident}"], ["no-such-incident"]),
    "report": (["incident:{incident}", "--html", "{tmp}/incident.html"], ["{tmp}/no-report.json"]),
    "rng-audit": (["--items", "4", "--workers", "0"], ["--workers", "abc"]),
    "route": (["loss", "is", "flat"], ["--list", "--instrument", "shape_ledger"]),
    "runs": ([], ["--drop", "abc"]),
    "sweep": ([TINY, "--seeds", "0-1", "--name", "s"], [TINY, "--seeds", "5-2"]),
    "ui": (None, ["--port", "-5"]),
}
#: what takes too long for this file, and where its envelope is checked instead
SLOW = {"ui": "it serves until Ctrl-C: tests/site/test_site_server.py checks its SERVING envelope",
        "demo": "the chapter's experiments take a minute: tests/demo/test_demo_chapter14.py validates its envelope"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One small store (sweeps a and b of the tiny workload, a gate, an incident) and the files the cases use."""
    tmp = tmp_path_factory.mktemp("envelope")
    (tmp / "case.py").write_text(CASE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIRSTDIV_STORE", str(tmp / "runs.db"))
        mp.setenv("COLUMNS", "120")
        mp.chdir(tmp)
        for args in (["sweep", TINY, "--seeds", "0-2", "--name", "a"],
                     ["sweep", TINY, "--seeds", "0-2", "--name", "b", "--set", "shift=0.5"],
                     ["gate", "calibrate", "a", "--alpha", "0.5", "-o", str(tmp / "gate.json")]):
            assert main(["-q", *args]) in (0, 1), args
        w = {"tmp": str(tmp), "case": str(tmp / "case.py"), "gate": str(tmp / "gate.json"),
             "missing_dir": str(tmp / "missing"), "incident": _new_incident()}
        yield w


def _new_incident() -> str:
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["incident", "new", "--symptom", "val loss rises", "--json"]) == 0
    return json.loads(out.getvalue())["payload"]["id"]


def run(capsys, command: str, args: list[str], world: dict, *flags: str) -> tuple[int, str, str]:
    capsys.readouterr()
    if any("{fresh_incident}" in a for a in args):  # closing takes an open one each time
        world = {**world, "fresh_incident": _new_incident()}
    argv = [*command.split(), *[a.format(**world) for a in args], *flags]
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def case(command: str) -> tuple[list[str] | None, list[str]]:
    if command not in CASES:
        pytest.fail(f"`firstdiv {command}` has no case in CASES of {__file__}: add its tiny run and a bad input, "
                    "so its JSON envelope and -q/-v are tested")
    return CASES[command]


def test_every_case_is_a_command():
    assert sorted(CASES) == sorted(COMMANDS), "CASES names a command that does not exist"


def _validated(out: str, rc: int, command: str) -> dict:
    env = json.loads(out)  # exactly one JSON object, nothing else on stdout
    jsonschema.validate(env, SCHEMA)
    assert env["exit_code"] == rc
    assert env["command"] == command
    return env


@pytest.mark.parametrize("command", COMMANDS)
def test_json_envelope(command, world, capsys):
    good, _ = case(command)
    if good is None:
        pytest.skip(SLOW[command])
    rc, out, _ = run(capsys, command, good, world, "--json")
    env = _validated(out, rc, command)
    assert rc in (0, 1)
    assert "payload" in env and "error" not in env
    assert env["ok"] is (env["ok"] and rc == 0)  # never ok with a non-zero exit
    assert env["status"] != "ERROR"


@pytest.mark.parametrize("command", COMMANDS)
def test_json_error_envelope(command, world, capsys):
    _, bad = case(command)
    rc, out, err = run(capsys, command, bad, world, "--json")  # export: --json without --output
    env = _validated(out, rc, command)
    assert rc == 2
    assert env["status"] == "ERROR" and env["ok"] is False and "payload" not in env
    line, = err.splitlines()
    assert line.startswith("firstdiv: error: ")
    assert env["error"]["message"] in line
    assert env["error"]["type"]


@pytest.mark.parametrize("command", COMMANDS)
def test_quiet_and_verbose(command, world, capsys):
    good, bad = case(command)
    if good is None:  # still: both flags are accepted, and an error is still printed under -q
        for flag in ("-q", "-v"):
            rc, out, err = run(capsys, command, bad, world, flag)
            assert rc == 2 and err.startswith("firstdiv: error: ") and "no such option" not in err.lower(), err
        return
    runs = {flag: run(capsys, command, good, world, *([flag] if flag else [])) for flag in ("", "-q", "-v")}
    (rc, out, err), (qrc, qout, qerr), (vrc, vout, verr) = runs[""], runs["-q"], runs["-v"]
    assert rc == qrc == vrc
    assert qerr == "", f"-q printed on stderr: {qerr!r}"
    assert 0 < len(qout) <= len(out) and len(qout.splitlines()) <= len(out.splitlines())
    assert qout.split()[0] == out.split()[0]  # the headline first
    assert len(vout) + len(verr) >= len(out) + len(err)
    assert "took" in verr


@pytest.mark.parametrize("flags", [["-q", "-v"], ["-v", "-q"]])
@pytest.mark.parametrize("command", COMMANDS)
def test_quiet_with_verbose_is_a_usage_error(command, flags, world, capsys):
    rc, out, err = run(capsys, command, [], world, *flags, "--json")
    assert rc == 2 and "contradict" in err
    assert _validated(out, rc, command)["error"]["type"] == "UsageError"


def test_group_takes_the_levels_too(world, capsys):
    rc, out, err = run(capsys, "-q", ["compare", "a", "b"], world)
    assert rc == 0 and err == "" and out.startswith("COMPARE")
    rc, out, err = run(capsys, "-q", ["compare", "a", "b", "-v"], world)
    assert rc == 2 and "contradict" in err


def test_json_after_the_command_separator_is_the_commands(world, capsys):
    """`firstdiv sweep ... -- python train.py --json`: that --json is the swept program's, not firstdiv's."""
    rc, out, err = run(capsys, "sweep", ["--seeds", "5-2", "--", "python", "train.py", "--json"], world)
    assert rc == 2 and out == "" and err.startswith("firstdiv: error: ")


def test_report_reads_back_an_envelope_and_a_bare_payload(world, capsys, tmp_path):
    rc, out, _ = run(capsys, "compare", ["a", "b", "--json"], world)
    env = json.loads(out)
    saved, bare, failed = tmp_path / "saved.json", tmp_path / "bare.json", tmp_path / "failed.json"
    saved.write_text(out, encoding="utf-8")
    bare.write_text(json.dumps(env["payload"]), encoding="utf-8")
    for path in (saved, bare):
        rc, out, _ = run(capsys, "report", [str(path), "--html", f"{path}.html", "--json"], world)
        page = _validated(out, rc, "report")
        assert page["payload"]["kind"] == "report" and page["status"] == "SYSTEM_CHANGED" and page["ok"] is False
        assert page["payload"]["report"]["details"]["verdict"] == env["status"] == "SYSTEM_CHANGED"
    failed.write_text(run(capsys, "compare", ["a", "nope", "--json"], world)[1], encoding="utf-8")
    rc, out, err = run(capsys, "report", [str(failed)], world)
    assert rc == 2 and "no report but a failed command's output" in err and "nope" in err


def test_incident_takes_a_saved_diagnose_envelope(world, capsys, tmp_path):
    rc, out, _ = run(capsys, "diagnose", ["{case}:make_evidence", "--json"], world)
    saved = tmp_path / "worksheet.json"
    saved.write_text(out, encoding="utf-8")
    rc, out, _ = run(capsys, "incident", ["new", "--symptom", "flat", "--from", str(saved), "--json"], world)
    made = _validated(out, rc, "incident new")["payload"]
    assert made["evidence"][0]["kind"] == "worksheet" and made["evidence"][0]["instrument"] == "diagnose"


def test_an_interrupted_command_under_json_says_so(world, capsys, tmp_path):
    """Ctrl-C in the middle of a run (the KeyboardInterrupt SIGINT raises): exit 130 and an error envelope."""
    (tmp_path / "stop.py").write_text("def train(seed, config, rec):\n    raise KeyboardInterrupt\n")
    rc, out, err = run(capsys, "sweep", [f"{tmp_path / 'stop.py'}:train", "--seeds", "0", "--json"], world)
    env = _validated(out, rc, "sweep")
    assert rc == 130 and env["error"]["type"] == "Abort" and "interrupted" in env["error"]["message"]
    assert err.strip().splitlines()[-1] == "firstdiv: interrupted; recorded runs are kept and a rerun resumes"


@pytest.mark.parametrize("broken", [
    {"status": "ERROR"},  # an error status with a payload
    {"payload": None},  # a payload that is not an object
    {"schema_version": 2},
    {"error": {"type": "X", "message": "m"}},  # payload and error at once
    {"exit_code": "0"},
    {"surprise": 1},
])
def test_the_schema_refuses_what_docs_json_md_rules_out(broken):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    good = {"schema_version": 1, "command": "runs", "ok": True, "status": "OK", "exit_code": 0, "payload": {}}
    jsonschema.validate(good, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, **broken}, SCHEMA)
