"""step_probe: forward / backward / update separated, on inline models reproducing the catalog's faults."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status, step_probe
from firstdiv.instruments._core.state import Snapshot


class MLP(nn.Module):
    """fc1 -> ReLU -> fc2 -> ReLU -> fc3, like the zoo's `mlp`; ``fault`` injects a graph fault."""

    def __init__(self, fault=None, dropout=0.0):
        super().__init__()
        self.fault = fault
        self.fc1, self.fc2, self.fc3 = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 3)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.fault == "detach":
            h = h.detach()
        if self.fault == "zero":
            h = h * 0.0
        if self.fault == "blocked":
            h = _Blocked.apply(h)
        return self.fc3(self.drop(F.relu(self.fc2(h))))


class _Blocked(torch.autograd.Function):
    """Identity forward, zero gradient backward: the loss depends on what comes before, no gradient gets there."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.zeros_like(grad)


def program(seed=0, opt="sgd", fault=None, **kw):
    torch.manual_seed(seed)
    model = MLP(fault, **kw)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
    optimizer = {"sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1),
                 "momentum": lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                 "adam": lambda: torch.optim.Adam(model.parameters(), lr=1e-3)}[opt]()
    return model, (x, y), F.cross_entropy, optimizer


def train_step_for(model, batch, loss_fn, opt, fault=None):
    x, y = batch

    def step():
        if fault in (None, "no_step"):
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if fault == "zero_grad_before_step":
            opt.zero_grad()
        if fault != "no_step":
            opt.step()
        return loss
    return step


def probe(model, batch, loss_fn, opt, **kw):
    """Call step_probe and prove it left no trace and renders."""
    before = Snapshot.take(model, opt)
    report = step_probe(model, batch, loss_fn, opt, **kw)
    assert before.diff(Snapshot.take(model, opt)) == []
    assert report.instrument == "step_probe" and str(report)
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    return report


def kinds(report, status=Status.FAIL):
    return [(f.where, f.check) for f in report.findings if f.status is status]


def test_healthy_plain_sgd_passes_with_update_rule_numbers():
    r = probe(*program())
    assert r.status is Status.PASS and r.ok, str(r)
    rules = [f for f in r.findings if f.check == "step.update"]
    assert len(rules) == 6 and all(f.evidence["max_relative_error"] < 1e-4 for f in rules)
    assert all(f.evidence["delta_norm"] > 0 for f in rules)
    assert "deep copy" in r.side_effects


@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
def test_healthy_train_step_passes(opt):
    model, batch, loss_fn, optimizer = program(opt=opt, dropout=0.2)
    model(batch[0]).sum().backward()  # stale .grad and optimizer state the probe must give back untouched
    optimizer.step()
    r = probe(model, batch, loss_fn, optimizer, train_step=train_step_for(model, batch, loss_fn, optimizer))
    assert r.status is Status.PASS, str(r)
    assert r.details["train_step"]["optimizer_steps"] == [1, 1]
    assert "train_step called twice" in r.side_effects
    skipped_rule = [f for f in r.findings if f.check == "step.update_rule" and f.status is Status.SKIPPED]
    assert bool(skipped_rule) == (opt != "sgd")
    if skipped_rule:
        assert "not plain SGD" in skipped_rule[0].message


def test_missing_zero_grad_is_grad_accumulation_at_fc1_weight():
    model, batch, loss_fn, opt = program()
    r = probe(model, batch, loss_fn, opt, train_step=train_step_for(model, batch, loss_fn, opt, "missing_zero_grad"))
    d = r.first_divergence
    assert (d.where, d.kind) == ("fc1.weight", "step.grad_accumulation"), str(r)
    f = next(f for f in r.findings if f.check == "step.grad_accumulation")
    assert f.evidence["grad_before_step2_backward_norm"] > 0
    assert f.evidence["step2_grad_vs_g1_plus_g2_relative_error"] < 1e-5
    assert f.evidence["carried"] == 6


def test_zero_grad_between_backward_and_step_is_localized():
    model, batch, loss_fn, opt = program(opt="momentum")
    r = probe(model, batch, loss_fn, opt, train_step=train_step_for(model, batch, loss_fn, opt, "zero_grad_before_step"))
    d = r.first_divergence
    assert (d.where, d.kind) == ("fc1.weight", "step.zero_grad_before_step"), str(r)
    f = next(f for f in r.findings if f.check == "step.zero_grad_before_step")
    assert f.evidence["backward_grad_norm"] > 0 and f.evidence["cleared"] == f.evidence["produced"] == 6
    assert "call 1: optimizer.zero_grad" in r.details["train_step"]["events"]


def test_train_step_that_never_steps():
    model, batch, loss_fn, opt = program()
    r = probe(model, batch, loss_fn, opt, train_step=train_step_for(model, batch, loss_fn, opt, "no_step"))
    assert (r.first_divergence.where, r.first_divergence.kind) == ("optimizer.step", "step.no_optimizer_step")


def test_parameter_missing_from_optimizer_is_not_updated():
    model, batch, loss_fn, _ = program()
    opt = torch.optim.SGD([*model.fc2.parameters(), *model.fc3.parameters()], lr=0.1)
    r = probe(model, batch, loss_fn, opt)
    d = r.first_divergence
    assert (d.where, d.kind) == ("fc1.weight", "step.not_updated"), str(r)
    f = next(f for f in r.findings if f.where == "fc1.weight" and f.check == "step.not_updated")
    assert f.evidence["in_optimizer"] is False and f.evidence["grad_norm"] > 0


def test_an_sgd_subclass_with_its_own_step_that_departs_from_the_rule_is_a_warn():
    class DoubledSGD(torch.optim.SGD):  # looks like plain SGD, steps twice as far: by design or not, only its author knows
        def step(self, closure=None):
            for g in self.param_groups:
                for p in g["params"]:
                    p.data.add_(p.grad, alpha=-2 * g["lr"])

    model, batch, loss_fn, _ = program()
    r = probe(model, batch, loss_fn, DoubledSGD(model.parameters(), lr=0.1))
    f = next(f for f in r.findings if f.where == "fc1.weight" and f.check == "step.update_rule")
    assert f.status.value == "WARN" and "DoubledSGD has its own step" in f.message, f.message
    assert f.evidence["max_relative_error"] == pytest.approx(1.0, rel=1e-3)  # the departure is measured and named


def test_detached_layer_gets_no_gradient_and_zeroed_layer_zero_gradient():
    r = probe(*program(fault="detach"))
    assert (r.first_divergence.where, r.first_divergence.kind) == ("fc1.weight", "step.no_gradient")
    assert ("fc1.bias", "step.no_gradient") in kinds(r)
    r = probe(*program(fault="blocked"))
    assert (r.first_divergence.where, r.first_divergence.kind) == ("fc1.weight", "step.zero_gradient")
    assert r.status is Status.FAIL and "depends on it" in r.first_divergence.observed + str(r)


def test_parameter_the_loss_does_not_depend_on_is_a_warning_not_a_failure():
    """Evidence before FAIL: h * 0.0 (or a head the objective never reads) leaves the loss unchanged when fc1 is
    perturbed on a copy, so fc1's zero gradient is not shown to be a defect: WARN naming it and the declaration."""
    r = probe(*program(fault="zero"))
    assert r.status is Status.WARN, str(r)
    assert ("fc1.weight", "step.unused_parameter") in kinds(r, Status.WARN) and not kinds(r)
    warn = next(f for f in r.findings if f.where == "fc1.weight")
    assert warn.evidence["loss_depends"] is False and "does not depend on it" in warn.message


def test_nonfinite_loss_is_named_loss():
    model, batch, _, opt = program()
    r = probe(model, batch, lambda out, y: F.cross_entropy(out, y) * float("inf"), opt)
    assert (r.first_divergence.where, r.first_divergence.kind) == ("loss", "step.nonfinite_loss")


def test_tied_weights_reported_once_with_both_names_and_several_groups():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec = nn.Linear(6, 6, bias=False), nn.Linear(6, 6)
            self.dec.weight = self.enc.weight

        def forward(self, x):
            return self.dec(torch.tanh(self.enc(x)))

    torch.manual_seed(1)
    model = Tied()
    opt = torch.optim.SGD([{"params": [model.enc.weight]}, {"params": [model.dec.bias], "lr": 0.01}], lr=0.1)
    batch = (torch.randn(8, 6), torch.randn(8, 6))
    r = probe(model, batch, F.mse_loss, opt)
    assert r.status is Status.PASS, str(r)
    grads = [f for f in r.findings if f.check == "step.gradient"]
    assert [f.where for f in grads] == ["enc.weight", "dec.bias"]
    assert grads[0].evidence["names"] == ["enc.weight", "dec.weight"] and "tied" in grads[0].message
    bias = next(f for f in r.findings if f.where == "dec.bias" and f.check == "step.update")
    assert bias.evidence["lr"] == pytest.approx(0.01)


def test_dict_batches_and_keyword_models():
    model, (x, y), loss_fn, opt = program()
    assert probe(model, {"x": x, "labels": y}, loss_fn, opt).status is Status.PASS

    class KW(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 3)

        def forward(self, a, b):
            return self.fc1(a + b)

    kw = KW()
    r = probe(kw, {"a": x, "b": x, "y": y}, F.cross_entropy, torch.optim.Adam(kw.parameters()))
    assert r.status is Status.PASS, str(r)


def test_no_parameters_and_frozen_models():
    r = probe(nn.ReLU(), (torch.randn(2, 3), torch.randn(2, 3)), F.mse_loss, torch.optim.SGD([nn.Parameter(torch.ones(1))]))
    assert r.status is Status.SKIPPED and "no parameters" in r.reason
    model, batch, loss_fn, opt = program()
    for p in model.parameters():
        p.requires_grad_(False)
    r = probe(model, batch, loss_fn, opt)
    assert r.status is Status.WARN and ("fc1.weight", "step.requires_grad_false") in kinds(r, Status.WARN)


def test_non_scalar_loss_is_a_skipped_report_with_reason():
    model, batch, _, opt = program()
    r = probe(model, batch, lambda out, y: F.cross_entropy(out, y, reduction="none"), opt)
    assert r.status is Status.SKIPPED and "not a scalar" in r.reason and "(16,)" in r.reason


@pytest.mark.parametrize("args, message", [
    ((3, None, F.mse_loss, None), "Expected `model` to be a torch.nn.Module but got int"),
    ((nn.Linear(2, 2), None, "mse", None), "Expected `loss_fn` to be callable but got str"),
    ((nn.Linear(2, 2), None, F.mse_loss, "sgd"), "Expected `optimizer` to be a torch.optim.Optimizer but got str"),
])
def test_misuse_is_one_line_invalid_argument(args, message):
    with pytest.raises(InvalidArgument) as exc:
        step_probe(*args)
    assert str(exc.value) == message


def test_bad_batch_and_train_step():
    model, (x, y), loss_fn, opt = program()
    with pytest.raises(InvalidArgument, match="of length 3"):
        step_probe(model, (x, y, y), loss_fn, opt)
    with pytest.raises(InvalidArgument, match="`train_step` to be callable"):
        step_probe(model, (x, y), loss_fn, opt, train_step=5)


def test_no_trace_when_loss_fn_raises_on_its_second_call():
    model, batch, _, opt = program(opt="adam", dropout=0.3)
    model(batch[0]).sum().backward()
    calls = []

    def flaky(out, y):  # the probe's own evaluations call it too: it raises inside train_step's second call
        if len(calls) == 2:
            raise RuntimeError("boom on call 2")
        return F.cross_entropy(out, y)

    def train_step():
        calls.append(1)
        opt.zero_grad()
        loss = flaky(model(batch[0]), batch[1])
        loss.backward()
        opt.step()

    before = Snapshot.take(model, opt)
    report = step_probe(model, batch, flaky, opt, train_step=train_step)  # user code failing is reported, not raised
    raised = [f for f in report.findings if f.check == "step.train_step_raised"]
    assert raised and "RuntimeError: boom on call 2" in raised[0].message
    assert before.diff(Snapshot.take(model, opt)) == []
    assert "zero_grad" not in vars(opt) and "zero_grad" not in vars(model)


def test_sparse_embedding_and_uncopyable_model():
    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.fc1 = nn.Embedding(10, 4, sparse=True), nn.Linear(4, 3)

        def forward(self, idx):
            return self.fc1(self.emb(idx).mean(1))

    torch.manual_seed(0)
    model = Bag()
    batch = (torch.randint(0, 10, (8, 5)), torch.randint(0, 3, (8,)))
    r = probe(model, batch, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.5))
    assert r.status is Status.PASS, str(r)
    assert next(f for f in r.findings if f.where == "emb.weight" and f.check == "step.update").evidence["max_relative_error"] < 1e-4

    import threading

    model, batch, loss_fn, opt = program()
    model.lock = threading.Lock()
    r = probe(model, batch, loss_fn, opt)
    assert r.status is Status.SKIPPED and "could not deep-copy" in r.reason


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_conv_bias_before_batchnorm_with_momentum_is_not_a_false_alarm(seed):
    # A conv bias followed by BatchNorm gets a gradient of ~1e-7 (zero up to rounding): momentum steps may leave it
    # bit-identical; that is not a missing update.
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    batch = (torch.randn(16, 1, 6, 6, generator=g), torch.randint(0, 3, (16,), generator=g))
    r = probe(model, batch, F.cross_entropy, opt, train_step=train_step_for(model, batch, F.cross_entropy, opt))
    assert r.status is Status.PASS, str(r)
