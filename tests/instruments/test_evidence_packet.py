"""The minimum evidence packet: every item of the appendix's training packet is captured from the
evidence at hand, as plain JSON that round-trips and saves to a file; what is missing is listed with
how to supply it; the user's objects are never touched."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from firstdiv import InvalidArgument, evidence_packet, learning_ledger
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.evidence_packet import load_packet, save_packet
from firstdiv.report import Report, Status

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting




class Net(nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.fc1, self.drop, self.head = nn.Linear(8, 16), nn.Dropout(0.1), nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(torch.relu(self.fc1(x))))


def program(seed: int = 0):
    torch.manual_seed(seed)
    model = Net()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(20, 8, generator=gen)
    y = torch.randint(0, 3, (20,), generator=gen)
    groups = [{"params": model.fc1.parameters(), "lr": 0.01}, {"params": model.head.parameters()}]
    return model, (x, y), F.cross_entropy, torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def packet_of(**evidence) -> Report:
    """Call evidence_packet; assert no trace and that the report round-trips through JSON."""
    watched = [v for k, v in evidence.items() if k in ("model", "optimizer") and v is not None]
    before = Snapshot.take(*watched)
    report = evidence_packet(**evidence)
    assert before.diff(Snapshot.take(*watched)) == []
    assert report.instrument == "evidence_packet" and report.status is not Status.FAIL
    text = report.to_json()
    assert Report.from_dict(json.loads(text)).to_json() == text
    return report


def test_complete_training_packet():
    model, batch, loss_fn, optimizer = program()
    report = packet_of(model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer)
    assert report.status is Status.PASS and report.details["missing"] == {}
    p = report.details["packet"]
    inputs, targets = p["batch"]["inputs"], p["batch"]["targets"]
    assert (inputs["shape"], inputs["dtype"], inputs["device"]) == ([20, 8], "float32", "cpu")
    assert inputs["min"] == pytest.approx(float(batch[0].min())) and inputs["max"] == pytest.approx(float(batch[0].max()))
    assert (targets["shape"], targets["dtype"], targets["num_classes"], targets["task"]) == ([20], "int64", 3, "classification")
    assert "class ids for 3 classes" in targets["meaning"]
    assert p["model"]["mode"] == "train" and p["model"]["dropout_or_batchnorm"] == {"drop": "train"}
    assert p["model"]["trainable"] == ["fc1.weight", "fc1.bias", "head.weight", "head.bias"]
    with torch.no_grad():
        expected_loss = float(F.cross_entropy(model.eval()(batch[0]), batch[1]))
    model.train()
    assert p["loss"]["requires_grad"] is True and p["loss"]["grad_fn"] == "NllLossBackward0"
    assert p["loss"]["value"] == pytest.approx(expected_loss, rel=0.5)  # dropout is on in train mode
    fc1, head = p["parameters"]["fc1.weight"], p["parameters"]["head.weight"]
    assert fc1["grad_now"] == {"state": "None", "norm": None}
    assert fc1["grad_after_backward"]["state"] == "nonzero" and fc1["grad_after_backward"]["norm"] > 0
    assert (fc1["owned"], fc1["group"], head["group"]) == (True, 0, 1)
    assert fc1["moved"] and fc1["delta_norm"] == pytest.approx(0.01 * fc1["grad_after_backward"]["norm"], rel=1e-4)
    assert head["delta_norm"] == pytest.approx(0.1 * head["grad_after_backward"]["norm"], rel=1e-4)
    assert p["lr"] == [0.01, 0.1] and p["optimizer"]["groups"][0]["momentum"] == 0.9
    assert p["step"]["moved"] == 4 and p["step"]["not_moved_trainable"] == []
    assert [f.where for f in report.findings] == ["batch", "model", "loss", "parameters", "optimizer", "step"]
    assert "one forward, backward and optimizer step on a deep copy" in report.side_effects


def test_the_gradients_as_found_are_recorded_before_any_intervention():
    model, (x, y), loss_fn, optimizer = program()
    loss_fn(model(x), y).backward()  # the user's failing state: grads left over from their step
    norm = float(model.head.weight.grad.norm())
    p = packet_of(model=model, batch=(x, y), loss_fn=loss_fn, optimizer=optimizer).details["packet"]
    assert p["parameters"]["head.weight"]["grad_now"] == {"state": "nonzero", "norm": pytest.approx(norm)}


def test_stale_and_missing_membership():
    model, batch, loss_fn, optimizer = program()
    model.head = nn.Linear(16, 3)  # replaced after the optimizer was built
    p = packet_of(model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer).details["packet"]
    assert p["optimizer"]["stale"] == [{"group": 1, "shape": [3, 16]}, {"group": 1, "shape": [3]}]
    assert p["optimizer"]["trainable_not_owned"] == ["head.weight", "head.bias"]
    assert p["parameters"]["head.weight"]["owned"] is False and p["parameters"]["head.weight"]["group"] is None
    assert p["parameters"]["head.weight"]["moved"] is False
    assert p["step"]["not_moved_trainable"] == ["head.weight", "head.bias"]


def test_missing_evidence_is_listed_with_how_to_supply_it():
    model, _, _, optimizer = program()
    report = packet_of(model=model)
    assert report.status is Status.SKIPPED
    assert set(report.details["missing"]) == {"batch", "loss_fn", "optimizer"}
    assert "pass batch=(inputs, targets)" in report.details["missing"]["batch"] and "loss_fn" in report.reason
    assert report.details["packet"]["model"]["trainable"]  # the partial packet is kept
    statuses = {f.where: f.status for f in report.findings}
    assert statuses == {"batch": Status.SKIPPED, "model": Status.PASS, "loss": Status.SKIPPED,
                        "parameters": Status.PASS, "optimizer": Status.SKIPPED, "step": Status.SKIPPED}
    nothing = packet_of()
    assert nothing.status is Status.SKIPPED and set(nothing.details["missing"]) == {"model", "batch", "loss_fn", "optimizer"}
    only_optimizer = packet_of(optimizer=optimizer)
    assert only_optimizer.details["packet"]["lr"] == [0.01, 0.1]


def test_batch_from_a_loader_leaves_its_rng_alone():
    model, (x, y), loss_fn, optimizer = program()
    loader = DataLoader(TensorDataset(x, y), batch_size=5, shuffle=True)
    report = packet_of(model=model, loader=loader, loss_fn=loss_fn, optimizer=optimizer)
    assert report.status is Status.PASS
    assert report.details["packet"]["batch"]["inputs"]["shape"] == [5, 8]
    assert report.details["packet"]["batch_source"].startswith("first batch") and "loader" in report.side_effects


def test_user_code_that_raises_is_part_of_the_packet():
    model, batch, _, optimizer = program()

    def broken(outputs, targets):
        raise RuntimeError("loss exploded")

    report = packet_of(model=model, batch=batch, loss_fn=broken, optimizer=optimizer)
    assert report.status is Status.WARN
    assert "RuntimeError: loss exploded" in report.details["not_captured"]["loss"]
    assert {f.where: f.status for f in report.findings}["step"] is Status.WARN


def test_non_scalar_loss_is_recorded_without_backward():
    model, batch, _, optimizer = program()
    report = packet_of(model=model, batch=batch, loss_fn=lambda o, t: F.cross_entropy(o, t, reduction="none"),
                       optimizer=optimizer)
    loss = report.details["packet"]["loss"]
    assert loss["value"] is None and "shape (20,)" in loss["problem"] and report.status is Status.WARN


def test_eval_mode_frozen_and_tied_and_language_model_targets():
    torch.manual_seed(0)
    embed = nn.Embedding(10, 6)
    head = nn.Linear(6, 10, bias=False)
    head.weight = embed.weight  # tied
    model = nn.Sequential(embed, nn.Dropout(0.1), nn.LayerNorm(6), head).eval()
    model[2].requires_grad_(False)
    ids = torch.randint(1, 10, (4, 7))
    targets = torch.cat([ids[:, 1:], torch.full((4, 1), -100)], dim=1)
    loss_fn = lambda o, t: F.cross_entropy(o.reshape(-1, 10), t.reshape(-1))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    p = packet_of(model=model, batch=(ids, targets), loss_fn=loss_fn, optimizer=optimizer).details["packet"]
    assert p["model"]["mode"] == "eval" and p["model"]["dropout_or_batchnorm"] == {"1": "eval"}
    assert p["model"]["trainable"] == ["0.weight"] and p["model"]["frozen"] == ["2.weight", "2.bias"]
    assert p["batch"]["targets"]["task"] == "language_model" and p["batch"]["targets"]["ignored"] == 4
    assert "next-token ids over a vocabulary of 10" in p["batch"]["targets"]["meaning"]
    assert p["parameters"]["2.weight"]["owned"] is False and p["step"]["not_moved_trainable"] == []


def test_dict_batch_and_noted_callables_are_not_called():
    model, (x, y), loss_fn, optimizer = program()

    def never(*args):
        raise AssertionError("the packet must not call this")

    report = packet_of(model=model, batch={"inputs": x, "labels": y}, loss_fn=loss_fn, optimizer=optimizer,
                       train_step=never, eval_fn=never, task_probe=never)
    assert report.status is Status.PASS
    assert report.details["noted_not_called"] == ["train_step", "eval_fn", "task_probe"]


def test_save_and_load_packet(tmp_path):
    model, batch, loss_fn, optimizer = program()
    report = packet_of(model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer)
    path = save_packet(report, tmp_path / "packet.json")
    data = json.loads(path.read_text())
    assert data["details"]["format"] == "firstdiv.evidence_packet" and data["details"]["version"] == 1
    assert load_packet(path).to_json() == report.to_json()
    other = learning_ledger(model, batch, loss_fn, optimizer, overfit_steps=1)
    with pytest.raises(InvalidArgument, match="evidence_packet Report but got Report from learning_ledger"):
        save_packet(other, tmp_path / "x.json")
    (tmp_path / "other.json").write_text(other.to_json())
    with pytest.raises(InvalidArgument, match="evidence_packet JSON"):
        load_packet(tmp_path / "other.json")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"modle": 1}, "Expected evidence keys among model, batch"),
    ({"model": "net"}, "Expected `model` to be a torch.nn.Module but got str"),
    ({"optimizer": 0.1}, "Expected `optimizer` to be a torch.optim.Optimizer but got float"),
    ({"loss_fn": 3}, "Expected `loss_fn` to be callable but got int"),
    ({"batch": 7}, "Expected `batch` to be a tuple (inputs, targets) or a dict but got int"),
    ({"loader": 7}, "Expected `loader` to be an iterable of batches but got int"),
    ({"train_step": 1}, "Expected `train_step` to be callable but got int"),
    ({"task_probe": 2}, "Expected `task_probe` to be a callable"),
])
def test_misuse_is_a_one_line_invalid_argument(kwargs, message):
    with pytest.raises(InvalidArgument) as info:
        evidence_packet(**kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_loader_that_raises_is_said_in_the_reason():
    model, _, loss_fn, optimizer = program()

    class Broken:
        def __iter__(self):
            raise OSError("shard missing")

    report = packet_of(model=model, loader=Broken(), loss_fn=loss_fn, optimizer=optimizer)
    assert report.status is Status.SKIPPED and "OSError: shard missing" in report.reason
    assert {f.where: f.status for f in report.findings}["batch"] is Status.WARN
