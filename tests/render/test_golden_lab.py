"""Golden files for what the lab's command line prints: the noise-floor table of a sweep, the RUN/BASELINE
comparison (also against a min effect), curves, the 2x2 factorial, the gate (calibrate and a failing check),
the incident worksheet (open and closed), ``route`` (a symptom and the instrument table) and a ``diagnose`` worksheet.

Every command runs as a user runs it (``python -m firstdiv ...`` at 120 columns, plain text), in one folder
holding copies of the numpy-only test workloads and one store, so the numbers are the same on any CPU.
Paths are relative to that folder, so they read the same everywhere. ``pytest --update-golden`` rewrites
tests/golden/ instead of comparing.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from _paths import WORKLOADS
from conftest import run_cli

STORE = ("--store", "store/runs.db")
#: plain text at a fixed width whatever the caller's terminal settings (TTY_COMPATIBLE=0 beats FORCE_COLOR)
PLAIN = {"COLUMNS": "120", "TTY_COMPATIBLE": "0", "NO_COLOR": "1"}

CASE = '''from firstdiv import zoo


def make_evidence():
    program = zoo.build("finetune", fault="stale_optimizer", seed=0)
    return {**program.evidence(), "symptom": "the new head never moves", "expected": "head.weight changes every step"}
'''

INCIDENT = ("incident", "new", "--title", "flat loss after head swap", "--symptom", "loss flat at 2.3026 (= ln 10) for 200 steps",
            "--expected", "loss below 1.0 by step 50", "--reproduction", "builtin:mlp seed 0, batch 32",
            "--first-contract", "ownership", "--observations", "step_probe: head.weight grad norm 0.031, delta 0",
            "--hypotheses", "A. stale optimizer\nB. frozen head", "--cause", "stale optimizer", *STORE)
CLOSE = ("--cause", "optimizer built before the head was replaced", "--repair", "build the optimizer after model surgery",
         "--verification", "step_probe: head.weight moves by -lr*grad", "--regression-test",
         "tests/test_training.py::test_head_is_optimized", *STORE)

#: (golden file or None, expected exit code, arguments), run in this order: later commands read earlier runs
STEPS = (
    ("sweep_noise_floor.txt", 0, ("sweep", "lab.py:interact", "--seeds", "0-19", *STORE)),
    (None, 0, ("sweep", "curvy.py:train", "--seeds", "0-7", "--set", "jitter=0.25", "--name", "base", *STORE)),
    (None, 0, ("sweep", "curvy.py:train", "--seeds", "0-7", "--set", "jitter=0.25", "--set", "gap=0.3", "--set", "gap_from=2",
               "--name", "cand", *STORE)),
    ("compare_run_baseline.txt", 0, ("compare", "base", "cand", *STORE)),
    ("compare_min_effect.txt", 0, ("compare", "base", "cand", "--min-effect", "2x", *STORE)),
    ("compare_practically_equivalent.txt", 0, ("compare", "base", "cand", "--min-effect", "0.5", "--fail-on-regression",
                                              *STORE)),
    ("curves.txt", 0, ("curves", "base", "cand", *STORE)),
    ("factorial.txt", 0, ("factorial", "curvy.py:train", "--a", "a=0.5", "--b", "b=0.25", "--seeds", "0-5",
                          "--set", "jitter=0.25", "--set", "ab=0.3", *STORE)),
    ("gate_calibrate.txt", 0, ("gate", "calibrate", "interact-default", "--alpha", "0.05", "--holdout-seeds", "20-39",
                               "-o", "gate.json", *STORE)),
    ("gate_check_fail.txt", 1, ("gate", "check", "gate.json", "lab.py:interact", "--set", "a=1", "--set", "b=1", *STORE)),
    ("incident_open.txt", 0, INCIDENT),
    ("incident_closed.txt", 0, ("incident", "close", "{incident}", *CLOSE)),
    ("route_symptom.txt", 0, ("route", "loss is flat")),
    ("route_instruments.txt", 0, ("route", "--list")),
    ("diagnose_worksheet.txt", 1, ("diagnose", "case.py:make_evidence")),
)
GOLDEN = [name for name, _, _ in STEPS if name]


def scrub(text: str, hashes: dict[str, str]) -> str:
    """What differs between runs or machines, and nothing else:

    - ``hashes`` (exact values, from ``firstdiv runs --json``): the environment hash, which covers the Python,
      torch and numpy versions, the OS release and the CPU model, and the sweep ids derived from it;
      each becomes ``#`` of the same width, so columns stay aligned;
    - incident ids (``inc-`` + random hex) and the created/updated/closed clock times of an incident;
    - the measured throughput in compare's COST line (examples/s of each side and the relative change);
    - the seconds each instrument took in diagnose's OBSERVATIONS table (``0.01s`` -> ``#.##s``).
    """
    for value in sorted(hashes, key=len, reverse=True):
        text = text.replace(value, "#" * len(value))
    text = re.sub(r"\binc-[0-9a-f]{8}\b", "inc-########", text)
    text = re.sub(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b", "YYYY-MM-DD hh:mm:ss", text)
    text = re.sub(r"(?m)^(  examples/s .*)$", lambda m: re.sub(r"[-+]?\d[\d,.]*%?", "#", m.group(1)), text)
    return re.sub(r"(?m)^(    \d+  \w+ +[\w ]+? +(?:PASS|FAIL|WARN|SKIPPED) +)\d\.\d\ds ", r"\1#.##s ", text)


def _run(folder: Path, args: tuple[str, ...]):
    return run_cli(*args, cwd=folder, env=PLAIN, timeout=300)


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> dict[str, tuple[int, str, str]]:
    """golden name -> (exit code, scrubbed stdout, stderr) of every step, run once in one folder and store."""
    folder = tmp_path_factory.mktemp("lab")
    for name in ("lab.py", "curvy.py"):
        shutil.copy(WORKLOADS / name, folder / name)
    (folder / "case.py").write_text(CASE)
    raw, incident = {}, ""
    for name, _, args in STEPS:
        proc = _run(folder, tuple(a.replace("{incident}", incident) for a in args))
        incident = incident or "".join(re.findall(r"\binc-[0-9a-f]{8}\b", proc.stdout)[:1])
        if name:
            raw[name] = proc
    listed = json.loads(_run(folder, ("runs", "--json", *STORE)).stdout)["payload"]
    hashes = {s[key] for s in listed["sweeps"] for key in ("id", "env_hash")}
    return {name: (p.returncode, scrub(p.stdout, hashes), p.stderr) for name, p in raw.items()}


@pytest.mark.parametrize("name", GOLDEN)
def test_command_output_matches_its_golden_file(printed, golden, name):
    expected_code = next(code for n, code, _ in STEPS if n == name)
    code, stdout, stderr = printed[name]
    assert code == expected_code, f"{name}: exit {code}\n{stdout}\n{stderr}"
    golden(name, stdout)


def test_scrub_masks_only_what_varies():
    text = ("SWEEP base  [0123456789ab]  env fedcba987654  config 82f261594e48\n"
            "  examples/s  693,888  ->  613,225   (-11.6%)\n"
            "PYTORCH INCIDENT  inc-83abebe3  OPEN\ncreated 2026-12-01 19:41:04\n"
            "    3  four_structures  ownership  FAIL    0.01s  head.weight [optimizer.stale_parameter]\n")
    assert scrub(text, {"0123456789ab", "fedcba987654"}) == (
        "SWEEP base  [############]  env ############  config 82f261594e48\n"
        "  examples/s  #  ->  #   (#)\n"
        "PYTORCH INCIDENT  inc-########  OPEN\ncreated YYYY-MM-DD hh:mm:ss\n"
        "    3  four_structures  ownership  FAIL    #.##s  head.weight [optimizer.stale_parameter]\n")
