"""reachability: where the dependency path from the loss to each parameter stops, and why."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status, reachability
from firstdiv.instruments._core.state import Snapshot


class MLP(nn.Module):
    """Classifier fc1 -> ReLU -> fc2 -> ReLU -> fc3 (+ an `aux` head), like the zoo's `mlp`."""

    def __init__(self, fault=None):
        super().__init__()
        self.fault = fault
        self.fc1, self.fc2, self.fc3 = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 3)
        if fault in ("unused_branch", "aux_ignored", "gate_item"):
            self.aux = nn.Linear(8, 3)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.fault == "detach":
            h = h.detach()
        if self.fault == "zero":
            h = h * 0.0
        if self.fault == "aux_ignored":
            self.aux(h)  # runs, result thrown away
        if self.fault == "gate_item":
            h = h * torch.sigmoid(self.aux(h)).mean().item()  # the gate's value as a Python float: no tensor, no cut
        return self.fc3(F.relu(self.fc2(h)))


class Regression(nn.Module):
    def __init__(self, fault=None):
        super().__init__()
        self.fault = fault
        self.fc1, self.fc2 = nn.Linear(3, 16), nn.Linear(16, 1)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.fault == "integer_cast":
            h = (h * 10).long().float() / 10  # quantised "by accident": integers carry no gradient
        return self.fc2(h)


class CNN(nn.Module):
    def __init__(self, fault=None):
        super().__init__()
        self.fault = fault
        self.conv1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        if self.fault == "no_grad_region":
            with torch.no_grad():
                x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        else:
            x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.head(x.flatten(1))


def data(kind="cls", seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "cnn":
        return torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 3, (8,), generator=g)
    if kind == "reg":
        return torch.randn(16, 3, generator=g), torch.randn(16, 1, generator=g)
    return torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)


def reach(model, *args, **kw):
    """Call reachability and prove it left no trace (values, .grad, buffers, hooks, RNG, grad mode) and renders."""
    before = Snapshot.take(model)
    report = reachability(model, *args, **kw)
    assert before.diff(Snapshot.take(model)) == []
    assert report.instrument == "reachability" and str(report)
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    return report


def first(report):
    """The first divergence of a FAIL, else the first WARN finding: (where, kind, boundary, cause)."""
    d = report.first_divergence
    f = next(f for f in report.findings if f.where == d.where and f.check == d.kind) if d is not None else \
        next(f for f in report.findings if f.status is Status.WARN)
    return f.where, f.check, f.evidence.get("boundary"), f.evidence.get("cause")


def seeded(cls, *a, seed=0):
    torch.manual_seed(seed)
    return cls(*a)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_models_pass(seed):
    for model, batch, loss_fn in ((seeded(MLP, seed=seed), data(seed=seed), F.cross_entropy),
                                  (seeded(CNN, seed=seed), data("cnn", seed), F.cross_entropy),
                                  (seeded(Regression, seed=seed), data("reg", seed), F.mse_loss)):
        r = reach(model, batch, loss_fn)
        assert r.status is Status.PASS and r.side_effects == "none", str(r)
        params = [f for f in r.findings if f.where != "loss"]
        assert len(params) == len(list(model.parameters()))
        assert all(f.evidence["reached"] and f.evidence["grad"] == "nonzero" and f.evidence["grad_norm"] > 0 for f in params)


@pytest.mark.parametrize("model, batch, loss_fn, expected", [
    (MLP("detach"), data(), F.cross_entropy, ("fc1.weight", "reachability.detached", "fc1", "detached")),
    (CNN("no_grad_region"), data("cnn"), F.cross_entropy, ("conv1.weight", "reachability.no_grad", "conv1", "no_grad")),
    (Regression("integer_cast"), data("reg"), F.mse_loss, ("fc1.weight", "reachability.integer_cast", "fc1", "integer_cast")),
], ids=["detach", "no_grad_region", "integer_cast"])
def test_faults_are_localized(model, batch, loss_fn, expected):
    """The parameter's value was traced into the loss through an op without a gradient: a confirmed cut, FAIL."""
    r = reach(model, batch, loss_fn)
    assert r.status is Status.FAIL and first(r) == expected, str(r)


@pytest.mark.parametrize("model, batch, loss_fn, expected", [
    (MLP("unused_branch"), data(), F.cross_entropy, ("aux.weight", "reachability.not_executed", "aux", "not_executed")),
    (MLP("aux_ignored"), data(), F.cross_entropy, ("aux.weight", "reachability.unused", "aux", "unused")),
    (MLP("zero"), data(), F.cross_entropy, ("fc1.weight", "reachability.zero_gradient", "fc1", "zero_gradient")),
], ids=["unused_branch", "unused", "zero_gradient"])
def test_parameters_the_loss_does_not_depend_on_are_named_as_warnings(model, batch, loss_fn, expected):
    """Evidence before FAIL: a module never run, run and thrown away, or multiplied by zero leaves the loss unchanged
    (its value never reaches the loss; a perturbation on a copy does not move it). Whether that is by design is the
    program's intent: a WARN naming the parameter, where its path stops and why."""
    r = reach(model, batch, loss_fn)
    assert r.status is Status.WARN and first(r) == expected, str(r)


def test_a_value_that_reaches_the_loss_past_a_cut_the_trace_cannot_see_fails():
    """A gate read with .item() multiplies the activations by a Python float: the trace sees no cut (no tensor comes
    out), but perturbing the gate on a copy moves the loss, so its value reaches the loss while no gradient does."""
    r = reach(MLP("gate_item"), data(), F.cross_entropy)
    assert r.status is Status.FAIL and first(r) == ("aux.weight", "reachability.cut", "aux", "cut"), str(r)
    r = reach(MLP("aux_ignored"), data(), F.cross_entropy)
    f = next(f for f in r.findings if f.where == "aux.weight")
    assert f.evidence["loss_depends"] is False and "perturbing it on a copy leaves the loss unchanged" in f.message


def test_fault_evidence_names_the_operation():
    r = reach(MLP("detach"), data(), F.cross_entropy)
    f = next(f for f in r.findings if f.where == "fc1.weight")
    assert f.evidence["op"] == "Tensor.detach" and f.evidence["grad"] == "none" and f.evidence["reached"] is False
    assert [g.where for g in r.findings if g.status is Status.FAIL] == ["fc1.weight", "fc1.bias"]
    r = reach(Regression("integer_cast"), data("reg"), F.mse_loss)
    f = next(f for f in r.findings if f.where == "fc1.weight")
    assert f.evidence["op"] == "Tensor.long" and f.evidence["op_output_dtype"] == "int64"
    r = reach(CNN("no_grad_region"), data("cnn"), F.cross_entropy)
    assert {f.where: f.evidence["boundary"] for f in r.findings if f.status is Status.FAIL} == {
        "conv1.weight": "conv1", "conv1.bias": "conv1", "bn1.weight": "bn1", "bn1.bias": "bn1"}


def test_cut_inside_the_loss_function():
    r = reach(seeded(MLP), data(), lambda out, y: (out.argmax(1) != y).float().mean())
    # the layer whose output was cut is named first (every layer lost its path there)
    assert first(r) == ("fc3.weight", "reachability.integer_cast", "fc3", "integer_cast"), str(r)
    f = next(f for f in r.findings if f.where == "fc1.weight")
    assert (f.status, f.evidence["boundary"]) == (Status.FAIL, "fc3")
    assert f.evidence["inside"] == "loss_fn"
    assert next(f for f in r.findings if f.where == "loss").status is Status.WARN


def test_frozen_models_warn_not_fail():
    model = seeded(MLP)
    for p in model.parameters():
        p.requires_grad_(False)
    r = reach(model, data(), F.cross_entropy)
    assert r.status is Status.WARN and r.first_divergence is None, str(r)
    warned = [f for f in r.findings if f.check == "reachability.requires_grad_false"]
    assert len(warned) == 6 and warned[0].evidence["cause"] == "requires_grad_false"
    model = seeded(MLP)
    model.fc1.requires_grad_(False)  # frozen backbone, trainable head
    r = reach(model, data(), F.cross_entropy)
    assert r.status is Status.WARN and {f.where for f in r.findings if f.status is Status.WARN} == {"fc1.weight", "fc1.bias"}


def test_tied_weights_and_dict_batches_pass():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec = nn.Linear(6, 6, bias=False), nn.Linear(6, 6)
            self.dec.weight = self.enc.weight

        def forward(self, inputs):
            return self.dec(torch.tanh(self.enc(inputs)))

    model = seeded(Tied)
    r = reach(model, {"inputs": torch.randn(4, 6), "targets": torch.randn(4, 6)}, F.mse_loss)
    assert r.status is Status.PASS, str(r)
    tied = [f for f in r.findings if f.where == "enc.weight"]
    assert len(tied) == 1 and tied[0].evidence["names"] == ["enc.weight", "dec.weight"]
    assert not any(f.where == "dec.weight" for f in r.findings)

    class KW(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 3)

        def forward(self, a, b):
            return self.fc1(a * b)

    x, y = data()
    assert reach(seeded(KW), {"a": x, "b": x, "labels": y}, F.cross_entropy).status is Status.PASS


def test_loss_tensor_mode_walks_the_graph_and_keeps_it_usable():
    model, (x, y) = seeded(MLP, "detach"), data()
    loss = F.cross_entropy(model(x), y)
    r = reach(model, loss=loss)
    assert r.status is Status.WARN  # the loss alone cannot show that the loss depends on fc1: not confirmed
    assert first(r)[:2] == ("fc1.weight", "reachability.unreached")
    assert any(f.check == "reachability.boundary" and f.status is Status.SKIPPED and "no forward hooks" in f.message
               for f in r.findings)
    assert [f.where for f in r.findings if f.check == "reachability.reached"] == ["fc2.weight", "fc2.bias", "fc3.weight",
                                                                                  "fc3.bias"]
    loss.backward()  # the user's graph was retained
    assert model.fc2.weight.grad is not None
    model.zero_grad(set_to_none=True)
    r = reach(model, loss=loss)  # graph now freed: reachability still walks it, gradients unknown
    assert any(f.check == "reachability.controlled_backward" for f in r.findings)
    assert [f.where for f in r.findings if f.status is Status.WARN] == ["fc1.weight", "fc1.bias"]


def test_no_parameters_missing_evidence_and_non_tensor_loss_are_skipped():
    r = reach(nn.ReLU(), (torch.randn(2, 3), torch.randn(2, 3)), F.mse_loss)
    assert r.status is Status.SKIPPED and "no parameters" in r.reason
    r = reach(seeded(MLP), data())
    assert r.status is Status.SKIPPED and "loss_fn" in r.reason
    r = reach(seeded(MLP), data(), lambda out, y: F.cross_entropy(out, y).item())
    assert r.status is Status.SKIPPED and "not a tensor" in r.reason


def test_non_scalar_loss_is_a_clear_warning():
    r = reach(seeded(MLP), data(), lambda out, y: F.cross_entropy(out, y, reduction="none"))
    assert r.status is Status.WARN and any(f.check == "reachability.loss_not_scalar" for f in r.findings)
    assert all(f.evidence["grad"] == "nonzero" for f in r.findings if f.check == "reachability.reached")


@pytest.mark.parametrize("args, kw, message", [
    ((3, data(), F.cross_entropy), {}, "Expected `model` to be a torch.nn.Module but got int"),
    ((nn.Linear(4, 3), data(), 7), {}, "Expected `loss_fn` to be callable but got int"),
    ((nn.Linear(4, 3),), {"loss": 1.5}, "Expected `loss` to be a torch.Tensor but got float"),
    ((nn.Linear(4, 3), data(), F.cross_entropy), {"loss": torch.ones(())}, "Expected either `loss` or `batch` and `loss_fn` but got both"),
    ((nn.Linear(4, 3), 5, F.cross_entropy), {}, "Expected `batch` to be a tuple (inputs, targets) or a dict but got int"),
])
def test_misuse_is_one_line_invalid_argument(args, kw, message):
    with pytest.raises(InvalidArgument) as exc:
        reachability(*args, **kw)
    assert str(exc.value) == message


def test_no_trace_when_loss_fn_raises_on_its_second_call_or_forward_raises():
    model = seeded(CNN)
    model.train()
    model(data("cnn")[0]).sum().backward()  # existing .grad must survive
    calls = []

    def flaky(out, y):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom on call 2")
        return F.cross_entropy(out, y)

    before = Snapshot.take(model)
    with torch.no_grad():  # the caller's grad mode comes back too
        assert reachability(model, data("cnn"), flaky).status is Status.PASS
        failed = reachability(model, data("cnn"), flaky)  # user code failing is reported, not raised
        assert failed.status is Status.SKIPPED and "loss_fn raised RuntimeError: boom on call 2" in failed.reason
        assert not torch.is_grad_enabled()
    assert before.diff(Snapshot.take(model)) == []
    assert torch._C._len_torch_function_stack() == 0

    class Broken(MLP):
        def forward(self, x):
            raise ValueError("forward failed")

    broken = seeded(Broken)
    before = Snapshot.take(broken)
    failed = reachability(broken, data(), F.cross_entropy)
    assert failed.status is Status.SKIPPED and "the model raised ValueError: forward failed" in failed.reason
    assert "test_reachability.py" in failed.reason  # the user's own frame is named
    assert before.diff(Snapshot.take(broken)) == [] and torch._C._len_torch_function_stack() == 0


def test_users_frame_is_named_when_their_project_folder_is_called_firstdiv(tmp_path, monkeypatch):
    # A checkout of this project, or any user folder named like it, is still the user's code.
    project = tmp_path / "firstdiv" / "myproject"
    project.mkdir(parents=True)
    (project / "userloss.py").write_text("def loss(out, y):\n    raise ValueError('bad target')\n")
    monkeypatch.syspath_prepend(str(project))
    import userloss

    failed = reachability(seeded(MLP), data(), userloss.loss)
    assert failed.status is Status.SKIPPED and "(at userloss.py:2 in loss)" in failed.reason, failed.reason
