"""DiagnosticSet (chapter 31): known-by-hand examples stored with their outputs, run after every change; a
changed output, argmax or abstention decision is reported; writes are atomic; the schema is versioned."""

import json

import pytest
import torch
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments import diagnostic_set as ds_module
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.diagnostic_set import SCHEMA_VERSION, DiagnosticSet, decision

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting




class Classifier(nn.Module):
    """Three classes; class 2 is "I don't know"."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(3, 3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.eye(3) * 4)
            self.fc.bias.zero_()

    def forward(self, x, mask=None):
        if mask is not None:
            x = x * mask
        return self.fc(x)


def _examples():
    return [
        {"name": "cat", "category": "ordinary", "inputs": torch.tensor([[1.0, 0.0, 0.0]]), "note": "clearly class 0"},
        {"name": "tie", "category": "boundary", "inputs": torch.tensor([[0.5, 0.45, 0.0]]), "note": "close to the 0/1 edge"},
        {"name": "blank", "category": "missing_input",
         "inputs": {"x": torch.tensor([[1.0, 1.0, 0.0]]), "mask": torch.tensor([[0.0, 1.0, 1.0]])},
         "note": "first feature missing: masked to zero"},
        {"name": "unsure", "category": "abstention", "inputs": torch.tensor([[0.0, 0.0, 1.0]]), "abstain_class": 2,
         "note": "must answer 'don't know'"},
    ]


@pytest.fixture
def stored(tmp_path):
    model = Classifier().eval()
    return DiagnosticSet.create(tmp_path / "diag", _examples(), model), model


def test_round_trip_and_an_unchanged_model_passes(stored, tmp_path):
    _ds, model = stored
    index = json.loads((tmp_path / "diag" / "index.json").read_text())
    assert index["schema_version"] == SCHEMA_VERSION
    entry = index["examples"][2]
    assert entry["name"] == "blank" and entry["category"] == "missing_input"
    assert entry["input_keys"] == ["inputs['x']", "inputs['mask']"] and entry["output_keys"] == ["output"]
    assert len(entry["output_fingerprint"]) == 64
    assert [e["decision"] for e in index["examples"]] == [0, 0, 1, "abstain"]
    loaded = DiagnosticSet.load(tmp_path / "diag")
    assert loaded.names == ["cat", "tie", "blank", "unsure"] and len(loaded) == 4
    before = Snapshot.take(model)
    report = loaded.check(model)
    assert before.diff(Snapshot.take(model)) == []
    assert report.instrument == "diagnostic_set" and report.status is Status.PASS, str(report)
    assert report.details["categories"] == {"ordinary": 1, "boundary": 1, "missing_input": 1, "abstention": 1}
    assert "DIAGNOSTIC_SET" in str(report)
    assert Report.from_dict(json.loads(report.to_json())).findings == report.findings
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diag"]  # no temp directory left behind


def test_changes_are_reported_with_category_error_and_decision(stored):
    ds, _model = stored
    changed = Classifier().eval()
    with torch.no_grad():
        changed.fc.bias.copy_(torch.tensor([0.0, 0.3, -4.5]))  # tips the boundary case; ruins abstention
    report = ds.check(changed)
    assert report.status is Status.FAIL
    failed = {f.where: f for f in report.findings if f.status is Status.FAIL}
    assert set(failed) == {"cat", "tie", "blank", "unsure"}
    assert report.first_divergence.where == "cat" and report.first_divergence.kind == "diagnostic.changed"
    assert failed["tie"].evidence["category"] == "boundary"
    assert "argmax changed: 0 -> 1" in failed["tie"].message
    assert "abstention decision changed: abstain -> " in failed["unsure"].message
    assert failed["cat"].evidence["decision_changed"] is False and failed["cat"].evidence["max_abs_error"] == pytest.approx(4.5)
    assert report.details["changed"] == ["cat", "tie", "blank", "unsure"]
    within = ds.check(changed, atol=5.0)  # every output within tolerance: the decisions still changed
    assert {f.where for f in within.findings if f.status is Status.FAIL} == {"tie", "unsure"}


def test_update_accepts_new_outputs_deliberately(stored, tmp_path):
    ds, _model = stored
    changed = Classifier().eval()
    with torch.no_grad():
        changed.fc.bias.add_(0.01)
    ds.update(changed, names=["cat"])
    again = DiagnosticSet.load(tmp_path / "diag").check(changed)
    assert {f.where for f in again.findings if f.status is Status.FAIL} == {"tie", "blank", "unsure"}
    ds.update(changed)
    assert DiagnosticSet.load(tmp_path / "diag").check(changed).status is Status.PASS
    with pytest.raises(InvalidArgument, match="Expected `names` among the stored examples"):
        ds.update(changed, names=["dog"])


def test_a_failed_write_leaves_the_previous_set_intact(stored, tmp_path, monkeypatch):
    ds, model = stored
    index_before = (tmp_path / "diag" / "index.json").read_bytes()
    tensors_before = (tmp_path / "diag" / "tensors.pt").read_bytes()

    def half_written(target, index):
        target.write_text(json.dumps(index)[:40])  # the disk fills up half-way through the index
        raise OSError("No space left on device")

    monkeypatch.setattr(ds_module, "_write_index", half_written)
    changed = Classifier().eval()
    with torch.no_grad():
        changed.fc.bias.add_(1.0)
    with pytest.raises(OSError, match="No space left"):
        ds.update(changed)
    with pytest.raises(OSError, match="No space left"):
        DiagnosticSet.create(tmp_path / "fresh", _examples(), model)
    assert (tmp_path / "diag" / "index.json").read_bytes() == index_before
    assert (tmp_path / "diag" / "tensors.pt").read_bytes() == tensors_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diag"]  # no half-written set, no temp directory
    monkeypatch.undo()
    assert DiagnosticSet.load(tmp_path / "diag").check(model).status is Status.PASS


def test_a_failed_swap_puts_the_old_set_back(stored, tmp_path, monkeypatch):
    ds, model = stored
    index_before = (tmp_path / "diag" / "index.json").read_bytes()
    real = ds_module.os.replace
    calls = []

    def flaky_replace(src, dst):
        calls.append((str(src), str(dst)))
        if len(calls) == 2:  # moving the new set into place fails after the old one moved aside
            raise OSError("rename failed")
        return real(src, dst)

    monkeypatch.setattr(ds_module.os, "replace", flaky_replace)
    with pytest.raises(OSError, match="rename failed"):
        ds.update(model)
    monkeypatch.undo()
    assert (tmp_path / "diag" / "index.json").read_bytes() == index_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diag"]


def test_missing_and_extra_examples_and_fingerprints_are_reported(stored, tmp_path):
    _ds, model = stored
    path = tmp_path / "diag"
    index = json.loads((path / "index.json").read_text())
    index["examples"].append({**index["examples"][0], "name": "ghost"})  # listed, never stored
    index["examples"][1]["output_fingerprint"] = "0" * 64
    dropped = index["examples"].pop(3)  # stored, no longer listed
    (path / "index.json").write_text(json.dumps(index))
    report = DiagnosticSet.load(path).check(model)
    by = {(f.where, f.check): f.status for f in report.findings}
    assert by[("ghost", "diagnostic.missing")] is Status.FAIL
    assert by[("tie", "diagnostic.fingerprint_mismatch")] is Status.FAIL
    assert by[(dropped["name"], "diagnostic.extra")] is Status.WARN
    assert by[("abstention", "diagnostic.category_missing")] is Status.WARN
    assert report.first_divergence.where == "tie"  # integrity findings first, in index order


def test_schema_and_path_errors_are_one_line(stored, tmp_path):
    _ds, model = stored
    path = tmp_path / "diag"
    index = json.loads((path / "index.json").read_text())
    (path / "index.json").write_text(json.dumps({**index, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(InvalidArgument, match="written by a newer firstdiv") as info:
        DiagnosticSet.load(path)
    assert "\n" not in str(info.value)
    (path / "index.json").write_text(json.dumps({**index, "schema_version": "one"}))
    with pytest.raises(InvalidArgument, match="integer schema_version"):
        DiagnosticSet.load(path)
    (path / "index.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="valid JSON"):
        DiagnosticSet.load(path)
    with pytest.raises(InvalidArgument, match="does not exist"):
        DiagnosticSet.load(tmp_path / "nowhere")
    with pytest.raises(InvalidArgument, match="not to exist"):
        DiagnosticSet.create(path, _examples(), model)
    (path / "index.json").write_text(json.dumps(index))
    (path / "tensors.pt").write_bytes(b"garbage")
    with pytest.raises(InvalidArgument, match="readable tensors file"):
        DiagnosticSet.load(path)


@pytest.mark.parametrize("examples, message", [
    ([], "non-empty list"),
    ([{"name": "a", "category": "weird", "inputs": torch.ones(1, 3)}], "Expected category of 'a' to be one of"),
    ([{"name": "a", "category": "ordinary"}], "no ['inputs']"),
    ([{"name": "a", "category": "ordinary", "inputs": torch.ones(1, 3), "label": 3}], "unknown ['label']"),
    ([{"name": "a", "category": "ordinary", "inputs": torch.ones(1, 3)}] * 2, "unique non-empty str name"),
    ([{"name": "a", "category": "ordinary", "inputs": object()}], "tensors, numbers, strings or None"),
    ([{"name": "a", "category": "abstention", "inputs": torch.ones(1, 3), "abstain_below": 2}], "probability in (0, 1]"),
])
def test_bad_examples_write_nothing(tmp_path, examples, message):
    with pytest.raises(InvalidArgument) as info:
        DiagnosticSet.create(tmp_path / "d", examples, Classifier())
    assert message in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_model_that_raises_on_create_writes_nothing_and_on_check_is_reported(stored, tmp_path):
    ds, _model = stored

    def broken(x, mask=None):
        raise ValueError("tokenizer missing")

    with pytest.raises(InvalidArgument, match="raised ValueError: tokenizer missing"):
        DiagnosticSet.create(tmp_path / "other", _examples(), broken)
    assert not (tmp_path / "other").exists()
    report = ds.check(broken)
    assert report.first_divergence.kind == "diagnostic.raised" and report.first_divergence.where == "cat"


def test_functions_strings_and_train_mode(tmp_path):
    def answer(text):
        return None if "?" in text else text.upper()

    examples = [{"name": "hi", "category": "ordinary", "inputs": "hi", "note": ""},
                {"name": "q", "category": "abstention", "inputs": "what?", "note": "abstain"}]
    ds = DiagnosticSet.create(tmp_path / "s", examples, answer)
    assert ds.check(answer).status is Status.WARN  # boundary and missing_input categories absent
    report = ds.check(lambda text: text.upper())
    assert "abstention decision changed: abstain -> WHAT?" in next(f.message for f in report.findings if f.where == "q")
    assert decision(torch.tensor([[0.1, 0.2, 0.7]]), abstain_below=0.9) == "abstain"
    assert decision(torch.tensor([[0.0, 5.0], [5.0, 0.0]])) == [1, 0]
    noisy = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).train()
    ds2 = DiagnosticSet.create(tmp_path / "t", _examples()[:1], noisy.eval())
    warned = ds2.check(noisy.train())
    assert any(f.check == "diagnostic.train_mode" and f.status is Status.WARN for f in warned.findings)


def test_a_model_that_differs_from_itself_warns_instead_of_failing(tmp_path):
    torch.manual_seed(0)
    noisy = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    examples = [{"name": "x", "category": "ordinary", "inputs": torch.randn(4, 3), "note": ""}]
    ds = DiagnosticSet.create(tmp_path / "n", examples, noisy.eval())
    report = ds.check(noisy.train())
    changed = next(f for f in report.findings if f.where == "x")
    assert changed.check == "diagnostic.changed" and changed.status is Status.WARN, changed.message
    assert "not a FAIL: model_or_fn's own outputs, run twice with different RNG seeds, differ by" in changed.message
    assert changed.evidence["own_spread"]["varies"] is True and report.status is not Status.FAIL
    assert noisy.training  # the mode the user left it in


def test_a_changed_deterministic_model_still_fails_with_its_own_spread_in_evidence(stored, tmp_path):
    ds, _ = stored
    changed = Classifier().eval()
    with torch.no_grad():
        changed.fc.bias.copy_(torch.tensor([0.0, 0.3, -4.5]))
    report = ds.check(changed)
    failed = next(f for f in report.findings if f.where == "cat")
    assert failed.status is Status.FAIL and failed.evidence["own_spread"]["varies"] is False
