"""The failure notebook (chapter 31): incidents stored in the run store, a cause that is a hypothesis
until it is confirmed at close, secrets scrubbed before anything is written, and the schema migration
that added the incidents table."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner

import firstdiv.diagnosis.incident as incident_mod
from firstdiv._secrets import Scrubber, scrub_json
from firstdiv.cli.incident import incident_command
from firstdiv.diagnosis.incident import (
    CLOSE_FIELDS,
    Incident,
    incident_close,
    incident_list,
    incident_new,
    incident_show,
)
from firstdiv.errors import InvalidArgument, NotFound, StoreError
from firstdiv.lab.record import RunRecord
from firstdiv.lab.store import MIGRATIONS, SCHEMA_VERSION, Store
from firstdiv.report import Divergence, Finding, Report, Status

CLOSE = {"cause": "optimizer built before the head was replaced: head.weight not in any param group",
         "repair": "build the optimizer after model surgery",
         "verification": "step_probe: head.weight moves by -lr*grad; val loss falls from 2.30 to 0.41 in 50 steps",
         "regression_test": "tests/test_training.py::test_head_is_optimized"}


def _raw_rows(path) -> list[tuple]:
    """Every incidents row, read with plain sqlite3 (not through the code under test)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT id, title, status, created, updated, record FROM incidents ORDER BY id").fetchall()
    finally:
        conn.close()


def _raw_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _ids(monkeypatch, *hexes):
    """Make the next incident ids deterministic (they are random otherwise)."""
    it = iter(hexes)

    class _U:
        def __init__(self, h):
            self.hex = h

    monkeypatch.setattr(incident_mod.uuid, "uuid4", lambda: _U(next(it)))


# -- the Python API ---------------------------------------------------------------------------------

def test_round_trip_through_the_store(store_path):
    fields = {"symptom": "loss flat at 2.3026 (= ln 10) for 200 steps", "title": "flat loss after head swap",
              "expected": "loss below 1.0 by step 50", "reproduction": "builtin:mlp seed 0, batch 32",
              "first_contract": "ownership", "observations": "step_probe: head.weight grad norm 0.031, delta 0",
              "first_divergence": "OPTIMIZER_OWNERSHIP: head.weight", "hypotheses": "A. stale optimizer\nB. frozen head",
              "distinguishing_experiment": "compare id(p) of optimizer params with model.parameters()",
              "intervention": "rebuild the optimizer", "must_change": "head.weight delta != 0",
              "must_not_change": "eval fingerprint", "cause": "stale optimizer", "notes": "found in 10 minutes"}
    made = incident_new(store_path, **fields)
    assert made.id.startswith("inc-") and made.status == "open" and made.cause_status == "hypothesis"
    assert made.created == made.updated and made.created
    assert not made.confirmed and made.missing_to_close == ["repair", "verification", "regression_test"]
    shown = incident_show(made.id, store=store_path)
    assert shown == made
    assert {k: getattr(shown, k) for k in fields} == fields
    assert Incident.from_dict(json.loads(json.dumps(made.to_dict()))) == made
    with Store(store_path) as st:  # an open Store works as the store argument too
        assert incident_show(made.id, store=st) == made
        assert [i.id for i in incident_list(st)] == [made.id]


def test_html_view_escapes_user_text(store_path):
    inc = incident_new(store_path, symptom="<script>alert(1)</script> in the label map")
    page = inc._repr_html_()
    assert inc.id in page and "&lt;script&gt;" in page and "<script>alert" not in page


def test_title_defaults_to_the_symptoms_first_line(store_path):
    inc = incident_new(store_path, symptom="RuntimeError: CUDA out of memory\nTried to allocate 2.00 GiB")
    assert inc.title == "RuntimeError: CUDA out of memory"
    long = incident_new(store_path, symptom="x" * 200)
    assert len(long.title) == 80 and long.title.endswith("…")


def test_symptom_is_required_and_unknown_fields_are_refused(store_path):
    with pytest.raises(InvalidArgument, match="needs a symptom"):
        incident_new(store_path, expected="loss falls")
    with pytest.raises(InvalidArgument, match="needs a symptom"):
        incident_new(store_path, symptom="   ")
    with pytest.raises(InvalidArgument, match="Unknown incident field.*colour"):
        incident_new(store_path, symptom="s", colour="red")
    with pytest.raises(InvalidArgument, match="--confirmed needs the cause"):
        incident_new(store_path, symptom="s", confirmed=True)
    assert not store_path.exists()  # refused before anything was created


def test_confirmed_at_creation(store_path):
    inc = incident_new(store_path, symptom="s", cause="label map shifted by one", confirmed=True)
    assert inc.cause_status == "confirmed" and inc.status == "open"


def test_list_filters_by_status_oldest_first(store_path):
    a = incident_new(store_path, symptom="first")
    b = incident_new(store_path, symptom="second")
    c = incident_new(store_path, symptom="third")
    incident_close(b.id, **CLOSE, store=store_path)
    assert [i.id for i in incident_list(store_path)] == [a.id, b.id, c.id]
    assert [i.id for i in incident_list(store_path, "all")] == [a.id, b.id, c.id]
    assert [i.id for i in incident_list(store_path, "open")] == [a.id, c.id]
    assert [i.id for i in incident_list(store_path, "closed")] == [b.id]
    with pytest.raises(InvalidArgument, match="open, closed or all"):
        incident_list(store_path, "pending")


def test_list_without_a_store_is_empty_and_creates_nothing(tmp_path):
    path = tmp_path / "none" / "runs.db"
    assert incident_list(path) == []
    assert not path.parent.exists()
    with pytest.raises(NotFound, match="no store at"):
        incident_show("inc-1", store=path)
    assert not path.parent.exists()


def test_show_by_prefix_with_or_without_inc(store_path, monkeypatch):
    _ids(monkeypatch, "abcd1111" + "0" * 24, "abcd2222" + "0" * 24, "ef000000" + "0" * 24)
    a, b, c = (incident_new(store_path, symptom=s) for s in "abc")
    assert (a.id, b.id, c.id) == ("inc-abcd1111", "inc-abcd2222", "inc-ef000000")
    assert incident_show("inc-abcd1", store=store_path).id == a.id
    assert incident_show("abcd2", store=store_path).id == b.id
    assert incident_show("E", store=store_path).id == c.id  # case-insensitive
    assert incident_show(" inc-ef000000 ", store=store_path).id == c.id
    with pytest.raises(NotFound, match=r"ambiguous \(2 incidents: inc-abcd1111, inc-abcd2222\)"):
        incident_show("abcd", store=store_path)
    with pytest.raises(NotFound, match=r"ambiguous \(3 incidents"):
        incident_show("inc-", store=store_path)
    with pytest.raises(NotFound, match="No incident '99' .*firstdiv incident list"):
        incident_show("99", store=store_path)
    with pytest.raises(NotFound, match="No incident '%'"):  # LIKE wildcards are literal
        incident_show("%", store=store_path)
    with pytest.raises(InvalidArgument, match="empty"):
        incident_show("", store=store_path)


def test_close_requires_all_four_fields_and_changes_nothing_otherwise(store_path):
    inc = incident_new(store_path, symptom="loss flat", cause="stale optimizer")
    before = _raw_rows(store_path)
    for name in CLOSE_FIELDS:
        for empty in (None, "", "  "):
            with pytest.raises(InvalidArgument, match="--" + name.replace("_", "-")):
                incident_close(inc.id, **{**CLOSE, name: empty}, store=store_path)
    with pytest.raises(InvalidArgument, match="missing --cause, --repair, --verification, --regression-test"):
        incident_close(inc.id, store=store_path)
    with pytest.raises(InvalidArgument, match="stays open"):
        incident_close(inc.id, **CLOSE, confirmed=False, store=store_path)
    with pytest.raises(NotFound, match="No incident 'nope'"):
        incident_close("nope", **CLOSE, store=store_path)
    assert _raw_rows(store_path) == before

    with pytest.raises(InvalidArgument, match="Unknown close field.*symptom"):
        incident_close(inc.id, **CLOSE, symptom="rewritten", store=store_path)
    assert _raw_rows(store_path) == before

    closed = incident_close(inc.id[:7], **CLOSE, must_change="head.weight delta != 0", store=store_path)
    assert closed.status == "closed" and closed.cause_status == "confirmed" and closed.confirmed
    assert closed.must_change == "head.weight delta != 0" and closed.symptom == "loss flat"
    assert {k: getattr(closed, k) for k in CLOSE} == CLOSE
    assert closed.created == inc.created and closed.updated > inc.updated
    assert incident_show(inc.id, store=store_path) == closed
    after = _raw_rows(store_path)
    with pytest.raises(InvalidArgument, match="already closed"):
        incident_close(inc.id, **CLOSE, store=store_path)
    assert _raw_rows(store_path) == after
    assert after[0][2] == "closed" and json.loads(after[0][5])["cause_status"] == "confirmed"


def test_a_closed_incident_cannot_be_built_without_its_confirmation():
    with pytest.raises(InvalidArgument, match="missing: repair"):
        Incident(symptom="s", status="closed", cause="c", cause_status="confirmed", verification="v",
                 regression_test="t")
    with pytest.raises(InvalidArgument, match="missing: confirmation"):
        Incident(symptom="s", status="closed", **CLOSE)
    with pytest.raises(InvalidArgument, match="cause_status"):
        Incident(symptom="s", cause_status="likely")


# -- worksheets and evidence --------------------------------------------------------------------------

def _worksheet(**details):
    return Report("diagnose", Status.FAIL,
                  first_divergence=Divergence("head.weight", "optimizer.stale_parameter", "owned by optimizer",
                                              "not in any param group", "rebuild the optimizer after surgery"),
                  findings=(Finding("head.weight", "ownership", Status.FAIL, "0 of 2 tensors owned", {"owned": 0}),),
                  details=details)


def test_from_worksheet_fills_the_fields_and_attaches_it():
    rep = _worksheet(symptom="loss flat", expected="loss falls", first_contract="ownership",
                     hypotheses=["stale optimizer", "frozen head"], distinguishing_experiment="compare ids",
                     must_change="head.weight delta != 0", must_not_change="eval fingerprint", unrelated=3)
    inc = Incident.from_worksheet(rep)
    assert (inc.symptom, inc.expected, inc.first_contract) == ("loss flat", "loss falls", "ownership")
    assert inc.hypotheses == "- stale optimizer\n- frozen head"
    assert inc.first_divergence.startswith("head.weight: optimizer.stale_parameter (expected owned by optimizer")
    assert inc.observations == "- head.weight ownership FAIL: 0 of 2 tensors owned"
    assert (inc.must_change, inc.must_not_change) == ("head.weight delta != 0", "eval fingerprint")
    assert inc.id == "" and inc.status == "open"
    (ev,) = inc.evidence
    assert (ev["kind"], ev["instrument"], ev["status"]) == ("worksheet", "diagnose", "FAIL")
    assert "head.weight" in ev["summary"] and ev["data"] == rep.to_dict()
    assert Incident.from_worksheet(rep.to_dict()) == inc  # a dict works as well as a Report


def test_from_worksheet_is_tolerant_of_missing_and_odd_keys():
    bare = Incident.from_worksheet({"details": {}, "instrument": "diagnose", "status": "FAIL",
                                    "first_divergence": {"where": "loss", "kind": "step.nonfinite_loss"}})
    assert bare.symptom == "diagnose found step.nonfinite_loss at loss"
    plain = Incident.from_worksheet({"SYMPTOM": "oom at step 1", "Must Change": "peak memory", "experiment": "halve batch",
                                     "observations": [{"where": "opt", "check": "state", "status": "FAIL", "message": "2x"}]})
    assert (plain.symptom, plain.must_change, plain.distinguishing_experiment) == ("oom at step 1", "peak memory", "halve batch")
    assert plain.observations == "- opt state FAIL: 2x" and plain.evidence[0]["kind"] == "json"
    assert Incident.from_worksheet({"details": {"worksheet": {"symptom": "nested"}}, "instrument": "diagnose",
                                    "status": "PASS"}).symptom == "nested"
    with pytest.raises(InvalidArgument, match="needs a symptom"):
        Incident.from_worksheet({"details": {}, "instrument": "diagnose", "status": "PASS"})
    assert Incident.from_worksheet({}, symptom="given").symptom == "given"


def test_from_a_real_diagnose_worksheet(store_path, tmp_path):
    torch = pytest.importorskip("torch")
    from firstdiv.diagnosis import diagnose

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)  # the head is not in the optimizer
    batch = (torch.randn(16, 4), torch.randint(0, 2, (16,)))
    ws = diagnose(model=model, batch=batch, loss_fn=torch.nn.functional.cross_entropy, optimizer=opt,
                  symptom="loss is flat; wandb said WANDB_API_KEY=abc123secret")
    assert ws.first_divergence is not None  # precondition: diagnose found the ownership bug
    path = tmp_path / "ws.json"
    path.write_text(ws.to_json())
    inc = incident_new(store_path, worksheet=path)
    assert inc.symptom == "loss is flat; wandb said WANDB_API_KEY=[redacted]"
    assert inc.first_contract == ws.details["first_contract"] and inc.first_divergence.startswith(ws.first_divergence.where)
    assert inc.hypotheses.count("\n- ") == len(ws.details["hypotheses"]) - 1
    assert all(f"- {m}" in inc.must_change for m in ws.details["must_change"])
    assert "four_structures FAIL" in inc.observations and "evidence_packet PASS" in inc.observations
    assert inc.verification == "" and inc.regression_test == ""  # diagnose's "[fill in]" placeholders are not results
    assert inc.missing_to_close == ["cause", "repair", "verification", "regression_test"]
    (ev,) = inc.evidence
    assert ev["kind"] == "worksheet" and ev["source"] == str(path) and ev["status"] == "FAIL"
    assert b"abc123secret" not in _raw_bytes(store_path)


def test_new_from_worksheet_file_explicit_fields_win(store_path, tmp_path):
    path = tmp_path / "ws.json"
    path.write_text(_worksheet(symptom="from worksheet", expected="from worksheet").to_json())
    extra = tmp_path / "after.json"
    extra.write_text(json.dumps({"type": "Report", "instrument": "step_probe", "status": "PASS", "details": {}}))
    inc = incident_new(store_path, worksheet=str(path), attach=[extra, {"note": "plain dict"}], expected="mine")
    assert (inc.symptom, inc.expected) == ("from worksheet", "mine")
    kinds = [(e["kind"], e["source"]) for e in inc.evidence]
    assert kinds == [("worksheet", str(path)), ("report", str(extra)), ("json", "")]
    assert incident_show(inc.id, store=store_path).evidence == inc.evidence


@pytest.mark.parametrize("content, message", [("{not json", "is not valid JSON at line 1"),
                                              ("[1, 2]", "to hold a JSON object"),
                                              (None, "Cannot read")])
def test_bad_json_file_is_refused_before_anything_is_written(tmp_path, content, message):
    store = tmp_path / "store" / "runs.db"
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    before = _tree(tmp_path)
    with pytest.raises(InvalidArgument, match=message):
        incident_new(store, symptom="s", worksheet=bad)
    with pytest.raises(InvalidArgument, match=message):
        incident_new(store, symptom="s", attach=[bad])
    assert _tree(tmp_path) == before and not store.parent.exists()


# -- secrets ------------------------------------------------------------------------------------------

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
SECRETS = [  # (text as a user would paste it, the secret that must not be stored, what must remain)
    (f"HfHubHTTPError 401 with token {HF}", HF, "HfHubHTTPError 401 with token"),
    ("git push failed: ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "ghp_a1B2c3D4e5F6", "git push failed:"),
    ("openai.AuthenticationError: key sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm", "sk-proj-Zx9Yw8", "openai.AuthenticationError"),
    ("boto3 used AKIA" + "IOSFODNN7EXAMPLE for s3://bucket", "AKIAIOSFODNN7EXAMPLE", "s3://bucket"),
    ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc' https://x", "eyJhbGciOiJIUzI1NiJ9",
     "Authorization: Bearer [redacted]"),
    ("psql failed: password=hunter2 host=db", "hunter2", "host=db"),
    ("wandb login token=0123456789abcdef0123", "0123456789abcdef0123", "wandb login token=[redacted]"),
    ("export HF_TOKEN=hfvalue_not_prefixed_123", "hfvalue_not_prefixed_123", "HF_TOKEN=[redacted]"),
    ("WANDB_API_KEY=k3y-v4lue-99 python train.py", "k3y-v4lue-99", "python train.py"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI", "AWS_SECRET_ACCESS_KEY="),
    ("MY_SERVICE_SECRET=s3cr3t-v4lu3", "s3cr3t-v4lu3", "MY_SERVICE_SECRET="),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----\nthen the job died",
     "MIIEpAIBAAKCAQEA7bq", "then the job died"),
    ("cannot connect to postgres://trainer:pa55w0rd@db:5432/runs", "pa55w0rd", "postgres://trainer:[redacted]@db"),
    ("huggingface-cli login --token abcdef0123456789", "abcdef0123456789", "huggingface-cli login --token"),
    ('headers {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}', "dXNlcjpwYXNzd29yZA", '"Authorization": "[redacted]"'),
    ("wandb: jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpM", "SflKxwRJSMeKKF2QT4fwpM",
     "wandb: jwt [redacted]"),
    ("signature mismatch for secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI",
     "signature mismatch for secret [redacted]"),
    ("the password is Hunter2Correct-Horse", "Hunter2Correct-Horse", "the password is [redacted]"),
    ("wandb login --host https://wandb.example.com 0123456789ABCDEF0123456789abcdef01234567", "0123456789ABCDEF",
     "wandb login --host https://wandb.example.com [redacted]"),
]


@pytest.mark.parametrize("text, secret, kept", SECRETS, ids=[f"{i}-{s[1][:8]}" for i, s in enumerate(SECRETS)])
def test_each_secret_pattern_is_scrubbed_in_text_and_json(store_path, text, secret, kept):
    assert secret in text  # precondition: the case really carries the secret
    attached = {"instrument": "x", "status": "FAIL", "details": {"log": text, "nested": [{"msg": text}]}}
    inc = incident_new(store_path, symptom=text, notes=f"MARKER-notes {text}", observations=text, attach=[attached])
    assert secret not in json.dumps(inc.to_dict()) and kept in inc.symptom and inc.redacted > 0
    rows = _raw_rows(store_path)
    assert len(rows) == 1 and "MARKER-notes" in rows[0][5]  # we really read the stored worksheet
    assert kept in json.loads(rows[0][5])["evidence"][0]["data"]["details"]["log"]
    assert all(secret not in str(col) for row in rows for col in row)
    assert secret.encode() not in _raw_bytes(store_path)


def test_secrets_in_close_fields_and_in_json_keys_are_scrubbed(store_path):
    inc = incident_new(store_path, symptom="upload failed")
    closed = incident_close(inc.id, **{**CLOSE, "verification": f"re-ran with {HF}, upload ok"}, store=store_path,
                            attach=[{"config": {"api_key": {"id": "nested-key-value"}, "hf_token": HF, "password": "pw-value",
                                                "lr": 0.1}}])
    data = closed.evidence[0]["data"]["config"]
    assert data == {"api_key": "[redacted]", "hf_token": "[redacted]", "password": "[redacted]", "lr": 0.1}
    raw = _raw_bytes(store_path)
    assert HF.encode() not in raw and b"pw-value" not in raw and b"nested-key-value" not in raw
    assert "re-ran with [redacted], upload ok" in _raw_rows(store_path)[0][5]


def test_non_secrets_are_kept_verbatim(store_path):
    text = ("tokenizer.pad_token=<pad> eos_token: </s> max_tokens=512 num_tokens: 40 token_count=7 hf_hub_download "
            "sk-learn risk-free lr=0.001 loss=nan shape: (4, 3) monkey=1 tokenizer=bert")
    inc = incident_new(store_path, symptom=text, attach=[{"pad_token": "<pad>", "max_tokens": 512, "loss": 2.3}])
    assert inc.symptom == text and inc.redacted == 0
    assert inc.evidence[0]["data"] == {"pad_token": "<pad>", "max_tokens": 512, "loss": 2.3}
    for text, _, _ in SECRETS:  # scrubbing twice (as closing does) changes and counts nothing more
        once = Scrubber()
        clean = once.text(text)
        twice = Scrubber()
        assert twice.text(clean) == clean and once.redacted >= 1 and twice.redacted == 0


def test_environment_dumps_are_reduced_to_diagnostic_variables(store_path):
    environ = {"PATH": "/usr/bin", "HOME": "/home/me", "USER": "me", "HF_TOKEN": HF, "DATABASE_URL": "postgres://a:b@c/d",
               "INTERNAL_SERVICE": "x", "CUDA_VISIBLE_DEVICES": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
               "PYTHONHASHSEED": "0", "python": "3.11", "torch": "2.4"}
    evidence = {"env": environ, "details": {"snapshot": {k: v for k, v in environ.items() if k.isupper()}},
                "environ": "PATH=/usr/bin\nSECRETLESS=1\nOMP_NUM_THREADS=4", "record_env": {"python": "3.11"}}
    pasted = "job env:\nPATH=/usr/bin\nHOME=/root\nPRIVATE_THING=abc\nNCCL_DEBUG=INFO\ndone"
    inc = incident_new(store_path, symptom="nccl hang", notes=pasted, attach=[evidence])
    data = inc.evidence[0]["data"]
    kept = {"CUDA_VISIBLE_DEVICES": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONHASHSEED": "0"}
    assert data["env"] == {**kept, "python": "3.11", "torch": "2.4"}  # firstdiv's own lower-case summary stays
    assert data["details"]["snapshot"] == kept  # detected by its PATH/HOME/USER keys, whatever its name
    assert data["environ"] == "OMP_NUM_THREADS=4"
    assert data["record_env"] == {"python": "3.11"}
    assert inc.notes == "job env:\nNCCL_DEBUG=INFO\ndone"
    assert inc.env_dropped == 6 + 6 + 2 + 3
    raw = _raw_bytes(store_path)
    assert b"/home/me" not in raw and b"INTERNAL_SERVICE" not in raw and b"PRIVATE_THING" not in raw


def test_scrub_json_helpers_are_pure():
    src = {"token": "abc", "env": {"HOME": "/h"}}
    assert scrub_json(src) == {"token": "[redacted]", "env": {}} and src == {"token": "abc", "env": {"HOME": "/h"}}


# -- the store: migration, newer schema, concurrent writers -------------------------------------------

def _run_record(seed: int) -> RunRecord:
    return RunRecord(workload="w.py:train", seed=seed, config={"lr": 0.1}, config_hash="c", identity="ident", code={},
                     env={}, env_hash="e", data_identity=None, eval_contract=None, eval_fingerprint=None, eval_fields=[],
                     curves={"val_loss": [1.0, 0.5]}, final={"val_loss": 0.5}, directions={"val_loss": "min"},
                     grad_norm={}, throughput={}, wall_seconds=0.1, created="2024-01-01T00:00:00")


def test_migration_from_the_previous_schema_keeps_runs_and_adds_incidents(store_path):
    store_path.parent.mkdir(parents=True)
    v1_runs = "SELECT id, identity, seed, workload, status, created, record FROM runs ORDER BY id"
    conn = sqlite3.connect(store_path)  # a store as the firstdiv before incidents (schema 1) wrote it
    conn.executescript(MIGRATIONS[0])
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO sweeps VALUES ('s1', 's', 'ident', 'w.py:train', '2024-01-01T00:00:00', ?)",
                 (json.dumps({"config": {}}),))
    for seed in (0, 1, 2):
        rec = _run_record(seed)
        conn.execute("INSERT INTO runs (identity, seed, workload, status, created, record) VALUES (?, ?, ?, ?, ?, ?)",
                     (rec.identity, seed, rec.workload, rec.status, rec.created, json.dumps(rec.to_dict())))
        conn.execute("INSERT INTO sweep_seeds VALUES ('s1', ?)", (seed,))
    conn.commit()
    old_runs = conn.execute(v1_runs).fetchall()
    conn.close()

    assert incident_list(store_path) == []  # opening migrates
    inc = incident_new(store_path, symptom="after migration")
    conn = sqlite3.connect(store_path)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert conn.execute(v1_runs).fetchall() == old_runs
    conn.close()
    assert "CREATE TABLE incidents" in MIGRATIONS[1]
    with Store(store_path) as st:
        (sweep,) = st.sweeps()
        assert [r.seed for r in st.records(sweep)] == [0, 1, 2]
        assert [r["id"] for r in st.incidents()] == [inc.id]


def test_newer_store_schema_is_a_clear_error_and_untouched(store_path):
    incident_new(store_path, symptom="s")
    conn = sqlite3.connect(store_path)
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    before = store_path.read_bytes()
    for call in (lambda: incident_new(store_path, symptom="t"), lambda: incident_list(store_path),
                 lambda: incident_show("inc", store=store_path), lambda: incident_close("inc", **CLOSE, store=store_path)):
        with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this firstdiv's {SCHEMA_VERSION}"):
            call()
    assert store_path.read_bytes() == before


def _writer(path: str, tag: str, n: int, barrier, queue) -> None:
    try:
        from firstdiv.diagnosis.incident import incident_new as new

        barrier.wait(timeout=60)
        queue.put((tag, [new(path, symptom=f"{tag}-{i}").id for i in range(n)], None))
    except Exception:  # noqa: BLE001  (any failure in the worker is reported to the parent, with its traceback)
        queue.put((tag, [], traceback.format_exc()))


def test_concurrent_writers_lose_no_incident(store_path):
    incident_new(store_path, symptom="exists first")  # the store exists: writers race on inserts, not creation
    ctx = mp.get_context("spawn")
    barrier, queue, n = ctx.Barrier(2), ctx.Queue(), 25
    procs = [ctx.Process(target=_writer, args=(str(store_path), tag, n, barrier, queue)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=90) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [err for _, _, err in results if err] == []
    ids = [i for _, got, _ in results for i in got]
    assert len(ids) == 2 * n == len(set(ids))
    stored = incident_list(store_path)
    assert len(stored) == 2 * n + 1
    assert {i.symptom for i in stored} == {"exists first", *(f"{t}-{i}" for t in "ab" for i in range(n))}
    assert set(ids) <= {i.id for i in stored}


# -- command line (the click group) ---------------------------------------------------------------------

def _invoke(*args, ok=True):
    res = CliRunner().invoke(incident_command, [str(a) for a in args], env={"COLUMNS": "120"})
    if ok:
        assert res.exit_code == 0, (res.output, res.exception, traceback.format_exception(*res.exc_info))
    return res


def test_cli_new_list_show_close(store_path, tmp_path):
    ws = tmp_path / "ws.json"
    ws.write_text(_worksheet(hypotheses=["stale optimizer", "frozen head"]).to_json())
    out = json.loads(_invoke("new", "--symptom", f"loss flat; HF_TOKEN={HF}", "--expected", "falls", "--from", ws,
                             "--cause", "stale optimizer", "--experiment", "compare ids", "--store", store_path,
                             "--json").output)["payload"]
    assert out["status"] == "open" and out["cause_status"] == "hypothesis" and out["symptom"] == "loss flat; HF_TOKEN=[redacted]"
    assert out["distinguishing_experiment"] == "compare ids" and out["hypotheses"] == "- stale optimizer\n- frozen head"
    assert out["evidence"][0]["source"] == str(ws)
    other = json.loads(_invoke("new", "--symptom", "gpu idle", "--store", store_path, "--json").output)["payload"]

    text = _invoke("show", out["id"][:7], "--store", store_path).output
    for heading in ("PYTORCH INCIDENT", "SYMPTOM", "EXPECTED", "FIRST DIVERGENCE", "HYPOTHESES", "DISTINGUISHING EXPERIMENT",
                    "MUST CHANGE", "MUST NOT CHANGE", "VERIFICATION", "REGRESSION TEST", "EVIDENCE"):
        assert heading in text
    assert "CAUSE — HYPOTHESIS (not confirmed)" in text and "CONFIRMED" not in text and HF not in text
    assert text.index("SYMPTOM") < text.index("HYPOTHESES") < text.index("MUST CHANGE") < text.index("REGRESSION TEST")

    flags = [part for k, v in CLOSE.items() for part in ("--" + k.replace("_", "-"), v)]
    closed = json.loads(_invoke("close", out["id"], *flags, "--must-not-change", "eval fingerprint", "--store", store_path,
                                "--json").output)["payload"]
    assert closed["status"] == "closed" and closed["cause_status"] == "confirmed" and closed["confirmed"] is True
    assert closed["must_not_change"] == "eval fingerprint" and closed["hypotheses"] == out["hypotheses"]
    text = _invoke("show", out["id"], "--store", store_path).output
    assert "CAUSE — CONFIRMED" in text and "HYPOTHESIS" not in text and CLOSE["regression_test"] in text

    listed = json.loads(_invoke("list", "--status", "open", "--store", store_path, "--json").output)["payload"]
    assert [i["id"] for i in listed["incidents"]] == [other["id"]] and listed["store"] == str(store_path)
    table = _invoke("list", "--store", store_path).output
    assert out["id"] in table and other["id"] in table and "confirmed" in table
    assert "no closed incidents" not in _invoke("list", "--status", "closed", "--store", store_path).output


def test_cli_store_from_environment_and_errors_raise_firstdiv_errors(store_path, monkeypatch):
    monkeypatch.setenv("FIRSTDIV_STORE", str(store_path))
    made = json.loads(_invoke("new", "--symptom", "s", "--json").output)["payload"]
    assert [r[0] for r in _raw_rows(store_path)] == [made["id"]]
    res = _invoke("close", made["id"], "--cause", "c", ok=False)  # cli.main turns these into exit 2
    assert isinstance(res.exception, InvalidArgument) and "missing --repair, --verification, --regression-test" in str(res.exception)
    assert isinstance(_invoke("show", "zzz", ok=False).exception, NotFound)
    assert _invoke("list", "--status", "pending", ok=False).exit_code == 2  # click's own usage error


# -- `python -m firstdiv incident` (exit codes and one-line errors) -------------------------------------

def _firstdiv(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "FIRSTDIV_STORE"}
    return subprocess.run([sys.executable, "-m", "firstdiv", *map(str, args)], cwd=cwd, env={**env, "COLUMNS": "120"},
                          capture_output=True, text=True, timeout=60, check=False)


def _one_error_line(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("firstdiv: error: "), proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_command_line_exit_codes(tmp_path, store_path):
    made = _firstdiv("incident", "new", "--symptom", f"token={HF}", "--store", store_path, "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    inc = json.loads(made.stdout)["payload"]
    shown = _firstdiv("incident", "show", inc["id"][4:9], "--store", store_path, cwd=tmp_path)
    assert shown.returncode == 0 and "PYTORCH INCIDENT" in shown.stdout and HF not in shown.stdout

    _one_error_line(_firstdiv("incident", "show", "nope", "--store", store_path, cwd=tmp_path), "No incident 'nope'")
    _one_error_line(_firstdiv("incident", "close", inc["id"], "--cause", "c", "--store", store_path, cwd=tmp_path),
                    "--repair", "--verification", "--regression-test")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    before = _tree(tmp_path)
    _one_error_line(_firstdiv("incident", "new", "--symptom", "s", "--from", bad, "--store", tmp_path / "new" / "runs.db",
                              cwd=tmp_path), "bad.json is not valid JSON")
    assert _tree(tmp_path) == before  # no store created, nothing else written
    assert not (tmp_path / ".firstdiv").exists()

    conn = sqlite3.connect(store_path)
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    _one_error_line(_firstdiv("incident", "list", "--store", store_path, cwd=tmp_path), "newer", str(SCHEMA_VERSION + 1))
