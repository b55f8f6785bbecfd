"""six_claims: one finding per claim, in order; the first failing claim tells the six failures apart."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import six_claims
from firstdiv.errors import InvalidArgument
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.six_claims import CLAIMS
from firstdiv.report import Report, Status


def audit(model, batch, loss_fn, optimizer, eval_fn=None) -> Report:
    """Call the instrument; assert it left no trace and that its report renders and round-trips."""
    before = Snapshot.take(model, optimizer)
    report = six_claims(model, batch, loss_fn, optimizer, eval_fn=eval_fn)
    assert before.diff(Snapshot.take(model, optimizer)) == []
    assert [f.where for f in report.findings] == list(CLAIMS)
    assert str(report) and Report.from_dict(report.to_dict()).to_dict() == report.to_dict()
    return report


def claim(report: Report, name: str):
    return next(f for f in report.findings if f.where == name)


def first(report: Report) -> tuple[str, str]:
    div = report.first_divergence
    return (div.where, div.kind) if div else ("", "")


class MLP(nn.Module):
    def __init__(self, seed: int = 0, act: bool = True, detach: bool = False) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, 4)
        self.act, self.detach = act, detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = F.relu if self.act else (lambda t: t)
        h = act(self.fc1(x))
        h = h.detach() if self.detach else h
        return self.fc3(act(self.fc2(h)))


class SmallCNN(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Dropout(0.2))
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def mlp_data(seed: int = 0, n: int = 32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 4, (n,), generator=g)


def cnn_data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 3, (8,), generator=g)


def accuracy(model, batch):
    """A correct eval_fn: eval mode, mode restored."""
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(batch[0])
    model.train(was)
    return (out.argmax(-1) == batch[1]).float().mean().item()


def accuracy_in_train_mode(model, batch):
    with torch.no_grad():  # the eval_in_train_mode fault: no model.eval()
        return (model(batch[0]).argmax(-1) == batch[1]).float().mean().item()


def sgd(model, lr=0.1):
    return torch.optim.SGD(model.parameters(), lr=lr)


# ---- the six failures are told apart ------------------------------------------------------------

def test_remove_activation_fails_representation():
    model = MLP(act=False)
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model), accuracy)
    assert first(report) == ("REPRESENTATION", "claim.representation.affine")
    ev = claim(report, "REPRESENTATION").evidence
    assert ev["relative_error"] < 1e-6 and ev["threshold"] == 1e-4
    assert [f.status for f in report.findings[1:]] == [Status.PASS] * 5


def test_zero_init_fails_computation():
    model = MLP()
    for layer in (model.fc1, model.fc2):
        nn.init.zeros_(layer.weight)
        nn.init.zeros_(layer.bias)
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model), accuracy)
    assert first(report) == ("COMPUTATION", "claim.computation.zero_init")
    ev = claim(report, "COMPUTATION").evidence
    assert ev["module"] == "fc1" and ev["max_abs_weight"] == 0.0 and ev["max_grad_row_difference"] == 0.0
    assert ev["activation_unit_spread"] == 0.0 and ev["symmetric_layers"] == ["fc1", "fc2"]
    assert claim(report, "REPRESENTATION").status is Status.SKIPPED  # constant output: no evidence either way


def test_symmetric_init_fails_computation():
    model = MLP()
    for layer in (model.fc1, model.fc2):
        nn.init.constant_(layer.weight, 0.1)
        nn.init.zeros_(layer.bias)
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model), accuracy)
    assert first(report) == ("COMPUTATION", "claim.computation.symmetric_init")
    ev = claim(report, "COMPUTATION").evidence
    assert ev["module"] == "fc1" and ev["max_row_difference"] == 0.0 and ev["units"] == 16
    assert claim(report, "REPRESENTATION").status is Status.PASS


def test_zero_initialized_output_layer_is_not_an_alarm():
    model = MLP()
    nn.init.zeros_(model.fc3.weight)  # a common deliberate choice: the loss's gradient breaks the tie at once
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model), accuracy)
    comp = claim(report, "COMPUTATION")
    assert comp.status is Status.PASS and comp.evidence["module"] == "fc3" and comp.evidence["max_grad_row_difference"] > 0


def test_flipped_loss_sign_fails_objective():
    model = MLP()
    report = audit(model, mlp_data(), lambda out, t: -F.cross_entropy(out, t), sgd(model), accuracy)
    assert first(report) == ("OBJECTIVE", "claim.objective.wrong_sign")
    ev = claim(report, "OBJECTIVE").evidence
    assert ev["loss"] < 0 and ev["loss_after_raising_correct_logit"] > ev["loss"]


def test_flipped_regression_loss_fails_objective():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1), nn.Flatten(0))
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    y = x.sum(1)
    assert first(audit(model, (x, y), F.mse_loss, sgd(model))) == ("", "")
    report = audit(model, (x, y), lambda o, t: -F.mse_loss(o, t), sgd(model))
    assert first(report) == ("OBJECTIVE", "claim.objective.wrong_sign")


def test_probabilities_fed_to_cross_entropy_fail_objective():
    class SoftmaxMLP(MLP):
        def forward(self, x):
            return F.softmax(super().forward(x), dim=-1)

    model = SoftmaxMLP()
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model), accuracy)
    assert first(report) == ("OBJECTIVE", "claim.objective.probabilities_as_logits")
    # probabilities with a loss that takes their log are a consistent objective
    report = audit(model, mlp_data(), lambda p, t: F.nll_loss(p.log(), t), sgd(model), accuracy)
    assert claim(report, "OBJECTIVE").status is Status.PASS


def test_detached_parameter_fails_differentiation():
    model = MLP(detach=True)
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model), accuracy)
    assert first(report) == ("DIFFERENTIATION", "claim.differentiation.detached")
    ev = claim(report, "DIFFERENTIATION").evidence
    assert ev["none"] == ["fc1.weight", "fc1.bias"] and ev["trainable"] == 6


def test_parameter_outside_the_optimizer_fails_update():
    model = MLP()
    opt = torch.optim.SGD([*model.fc2.parameters(), *model.fc3.parameters()], lr=0.1)
    report = audit(model, mlp_data(), F.cross_entropy, opt, accuracy)
    assert first(report) == ("UPDATE", "claim.update.not_updated")
    ev = claim(report, "UPDATE").evidence
    assert ev["not_moved"] == ["fc1.weight", "fc1.bias"] and ev["owned_by_optimizer"] is False and ev["grad_norm"] > 0


def test_zero_learning_rate_group_is_named_not_failed():
    model = MLP()
    opt = torch.optim.Adam([{"params": model.fc1.parameters(), "lr": 0.0},
                            {"params": [*model.fc2.parameters(), *model.fc3.parameters()]}], lr=1e-3)
    report = audit(model, mlp_data(), F.cross_entropy, opt)
    # evidence before FAIL: lr 0 is what the optimizer was told; named as a WARN (frozen by lr, or a slip)
    update = claim(report, "UPDATE")
    assert (update.status, update.check) == (Status.WARN, "claim.update.lr_zero"), str(report)
    assert update.evidence["lr"] == 0.0 and update.evidence["lr_zero"][0] == "fc1.weight"
    # every group at lr 0 (a warmup written by hand, at its first step): nothing to name
    warm = torch.optim.Adam(model.parameters(), lr=0.0)
    assert claim(audit(model, mlp_data(), F.cross_entropy, warm), "UPDATE").status is Status.PASS


def test_eval_in_train_mode_fails_evaluation():
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    report = audit(model, cnn_data(), F.cross_entropy, opt, accuracy_in_train_mode)
    assert first(report) == ("EVALUATION", "claim.evaluation.train_mode")
    ev = claim(report, "EVALUATION").evidence
    assert ev["ran_in_train_mode"] == ["features.1", "features.4"] and ev["mode_dependent_modules"] == 2


def test_eval_fn_relying_on_the_caller_warns():
    model = SmallCNN().eval()
    report = audit(model, cnn_data(), F.cross_entropy, sgd(model), accuracy_in_train_mode)
    ev = claim(report, "EVALUATION")
    assert ev.status is Status.WARN and ev.evidence["relies_on_caller"] == ["features.1", "features.4"]


# ---- healthy programs pass; no claim passes without evidence -------------------------------------

class TiedLM(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed, self.mix = nn.Embedding(11, 8), nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 11, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        return self.lm_head(torch.tanh(self.mix(self.embed(tokens))))


def _lm_loss(out, t):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))


def _healthy(kind: str, seed: int):
    if kind == "mlp":
        m = MLP(seed)
        return m, mlp_data(seed), F.cross_entropy, sgd(m)
    if kind == "cnn":
        m = SmallCNN(seed)
        return m, cnn_data(seed), F.cross_entropy, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    if kind == "groups":
        m = MLP(seed)
        opt = torch.optim.AdamW([{"params": m.fc1.parameters(), "lr": 1e-3},
                                 {"params": [*m.fc2.parameters(), *m.fc3.parameters()], "weight_decay": 0.0}], lr=1e-2)
        return m, mlp_data(seed), F.cross_entropy, opt
    if kind == "tied":
        m = TiedLM(seed)
        tokens = torch.randint(0, 11, (4, 7), generator=torch.Generator().manual_seed(seed))
        return m, (tokens[:, :-1], tokens[:, 1:]), _lm_loss, torch.optim.Adam(m.parameters())
    m = MLP(seed)  # frozen backbone, trainable head
    m.fc1.requires_grad_(False)
    m.fc2.requires_grad_(False)
    return m, mlp_data(seed), F.cross_entropy, torch.optim.Adam(m.fc3.parameters())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "groups", "tied", "frozen_backbone"])
def test_healthy_programs_raise_no_alarm(kind, seed):
    model, batch, loss_fn, opt = _healthy(kind, seed)
    report = audit(model, batch, loss_fn, opt, accuracy)
    assert report.status is Status.PASS and report.first_divergence is None, str(report)
    if kind in ("mlp", "cnn"):
        assert all(f.status is Status.PASS for f in report.findings), str(report)
    if kind == "tied":  # token ids cannot be mixed: no evidence, so SKIPPED with the reason, never PASS
        rep = claim(report, "REPRESENTATION")
        assert rep.status is Status.SKIPPED and "torch.int64" in rep.message


def test_missing_eval_fn_skips_evaluation_with_how_to():
    model = MLP()
    report = audit(model, mlp_data(), F.cross_entropy, sgd(model))
    ev = claim(report, "EVALUATION")
    assert ev.status is Status.SKIPPED and "eval_fn=" in ev.message and report.status is Status.PASS


def test_eval_fn_that_ignores_its_model_is_no_evidence():
    model = SmallCNN()
    report = audit(model, cnn_data(), F.cross_entropy, sgd(model), lambda m, b: 0.5)
    assert claim(report, "EVALUATION").status is Status.SKIPPED


def test_model_without_linear_layers_skips_computation():
    model = nn.Sequential(nn.Embedding(5, 3), nn.Tanh())
    tokens = torch.randint(0, 5, (4,), generator=torch.Generator().manual_seed(0))
    report = audit(model, (tokens, tokens % 3), F.cross_entropy, sgd(model))
    assert claim(report, "COMPUTATION").status is Status.SKIPPED


def test_dict_batch_and_closure_optimizer():
    model = MLP()
    x, y = mlp_data()
    report = audit(model, {"inputs": x, "labels": y}, F.cross_entropy, torch.optim.LBFGS(model.parameters(), max_iter=2))
    assert report.status is Status.PASS and claim(report, "UPDATE").status is Status.PASS


# ---- invalid losses, user code that raises, bad input --------------------------------------------

def test_non_scalar_loss_is_skipped_with_the_fix_and_skips_what_needs_it():
    model = MLP()
    report = audit(model, mlp_data(), lambda o, t: F.cross_entropy(o, t, reduction="none"), sgd(model))
    assert report.status is not Status.FAIL and report.first_divergence is None
    objective = claim(report, "OBJECTIVE")
    assert objective.status is Status.SKIPPED and "shape (32,)" in objective.message
    assert "reduce a per-example loss inside loss_fn" in objective.message
    assert claim(report, "DIFFERENTIATION").status is Status.SKIPPED and claim(report, "UPDATE").status is Status.SKIPPED


def test_nan_loss_fails_objective():
    model = MLP()
    report = audit(model, mlp_data(), lambda o, t: F.cross_entropy(o, t) * float("nan"), sgd(model))
    assert first(report) == ("OBJECTIVE", "claim.objective.nonfinite_loss")


def _raising_on(call: int):
    count = []

    def loss_fn(out, t):
        count.append(1)
        if len(count) >= call:
            raise RuntimeError(f"boom on call {len(count)}")
        return F.cross_entropy(out, t)
    return loss_fn


def test_no_trace_when_loss_fn_raises_on_its_first_call():
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = Snapshot.take(model, opt)
    report = six_claims(model, cnn_data(), _raising_on(1), opt, eval_fn=accuracy)  # reported, not raised
    assert report.status is Status.SKIPPED and "loss_fn raised RuntimeError: boom on call 1" in report.reason
    assert before.diff(Snapshot.take(model, opt)) == []


def test_no_trace_when_loss_fn_raises_on_its_second_call():
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    report = audit(model, cnn_data(), _raising_on(2), opt, accuracy)
    obj = claim(report, "OBJECTIVE")
    assert obj.status is Status.SKIPPED and "RuntimeError: boom on call 2" in obj.message
    assert report.status is Status.PASS  # the claims with evidence still stand


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((3, None, F.mse_loss, None), {}, "Expected `model` to be a torch.nn.Module but got int"),
    ((nn.Linear(2, 2), 5, F.mse_loss, None), {}, "Expected `batch` to be a tuple (inputs, targets) or a dict but got int"),
    ((nn.Linear(2, 2), (torch.zeros(1, 2),), "mse", None), {}, "Expected `loss_fn` to be callable but got str"),
    ((nn.Linear(2, 2), (torch.zeros(1, 2),), F.mse_loss, None), {},
     ("Expected `optimizer` (the torch.optim.Optimizer that steps the model) or, for a loop that updates parameters by "
      "hand, `train_step` (a zero-argument step) but got neither")),  # optimizer may be None when train_step is given
])
def test_bad_inputs_are_one_line_errors(args, kwargs, message):
    with pytest.raises(InvalidArgument) as err:
        six_claims(*args, **kwargs)
    assert str(err.value) == message


def test_eval_fn_must_be_callable():
    model = nn.Linear(2, 2)
    with pytest.raises(InvalidArgument, match="Expected `eval_fn` to be callable but got int"):
        six_claims(model, (torch.zeros(1, 2), torch.zeros(1, 2)), F.mse_loss, sgd(model), eval_fn=1)
