"""What public-26's first contact showed, each fixed in general (tests/realworld/README.md):

- the 2015 nonequilibrium-thermodynamics diffusion model keeps one output head per time step and each call of its
  step trains the head of one time step drawn at random. The declared batch's loss reads one head; in the four calls
  watched the step drew others, and ``update.not_moved`` FAILed on the head it never drew. The ledger now records
  which parameters each call's own backward reached: where the calls reached different sets, a parameter no call
  reached was trained by none of them on purpose (a subset drawn per call) and is noted, not judged. A step that
  reaches the same set at every call and never the parameter still FAILs;
- VPG's value net was fitted inside train_step with ``mse_loss(v, returns)``, v ``[N, 1]`` against returns ``[N]``:
  every value met every return. OBJECTIVE read that broadcast in loss_fn's graph only; it now reads the graph of every
  backward the step runs too, where the prediction was expanded along an axis it had as 1 to the length of another of
  its own axes (the step's data carries no declared example count);
- AKT's knowledge tracing marks padded steps with the label -1; with the mask dropped they entered a summed
  BCE-with-logits. A binary cross-entropy whose elements all count (mean or sum, or a full sum or mean right after
  ``reduction='none'``) and whose targets leave [0, 1] at a nonzero weight has no floor there:
  ``objective.target_out_of_range``. A mask or a zero weight on those positions is no finding.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")


class _Heads(nn.Module):
    """A trunk and one linear head per time step; ``t`` picks the head."""

    def __init__(self, steps: int = 8) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
        self.heads = nn.ModuleList(nn.Linear(16, 1) for _ in range(steps))

    def forward(self, x: torch.Tensor, t: int = 7) -> torch.Tensor:
        return self.heads[t](self.trunk(x))


def _program(drawn: bool):
    torch.manual_seed(0)
    model = _Heads()
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)

    def train_step() -> float:
        # a time step drawn per call (never the last, which the declared batch's loss reads), or always head 0
        t = int(torch.randint(0, 7, (1,), generator=g)) if drawn else 0
        opt.zero_grad()
        loss = F.mse_loss(model(x, t), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return model, (x, y), F.mse_loss, opt, train_step


def _update(drawn: bool) -> firstdiv.Finding:
    model, batch, loss_fn, opt, step = _program(drawn)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt, train_step=step)
    return next(f for f in report.findings if f.where == "PARAMETER_UPDATE"), report


def test_a_head_the_step_draws_per_call_and_did_not_draw_is_noted_not_failed():
    update, report = _update(drawn=True)
    assert update.status is Status.PASS, update.message
    assert update.evidence["never_reached_by_the_step"][0].startswith("heads.7.")
    assert any("a subset it draws per call" in n for n in report.details.get("notes", []))


def test_a_head_no_call_of_a_fixed_step_reaches_still_fails():
    update, _ = _update(drawn=False)
    assert update.status is Status.FAIL and update.check == "update.not_moved"
    assert update.evidence["not_moved"][0].startswith("heads.7.")


def _value_step(squeeze: bool, horizon: int | None = None):
    """A value net fitted by train_step to returns it computes itself (a rollout's discounted sums), with loss_fn
    declared sound; the step's own mse_loss gets v [N, 1] against returns [N] unless ``squeeze``, or [N, horizon]
    returns (one value against several horizons: a broadcast that crosses no example axis)."""
    torch.manual_seed(0)
    vf = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    obs = torch.randn(40, 3)
    ret = obs.sum(1) if horizon is None else obs.sum(1, keepdim=True).expand(40, horizon).contiguous()
    opt = torch.optim.Adam(vf.parameters(), lr=1e-2)

    def train_step() -> float:
        v = vf(obs)
        loss = F.mse_loss(v.squeeze(-1) if squeeze else v, ret)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.detach())

    return firstdiv.learning_ledger(vf, (obs, obs.sum(1, keepdim=True)), F.mse_loss, opt, train_step=train_step)


def _objective(report) -> firstdiv.Finding:
    return next(f for f in report.findings if f.where == "OBJECTIVE")


@pytest.mark.filterwarnings("ignore:Using a target size")
def test_a_prediction_broadcast_against_its_targets_inside_train_step_fails_at_the_objective():
    objective = _objective(_value_step(squeeze=False))
    assert objective.status is Status.FAIL and objective.check == "objective.shape_broadcast"
    assert objective.evidence["in_train_step"] and objective.evidence["broadcast_to"] == [40, 40]


@pytest.mark.filterwarnings("ignore:Using a target size")
def test_a_step_whose_shapes_match_or_whose_broadcast_crosses_no_example_axis_passes():
    assert _objective(_value_step(squeeze=True)).status is not Status.FAIL
    assert _objective(_value_step(squeeze=False, horizon=5)).status is not Status.FAIL


def _padded_bce(how: str):
    """Per-step logits of a small sequence model against labels in {0, 1} with the padded steps marked -1, through a
    loss that keeps them (``how="kept"``), selects the supervised steps, or weights the padded ones 0."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1), nn.Flatten(0))
    x = torch.randn(48, 4)
    y = (x[:, 0] > 0).float()
    y[-12:] = -1.0  # padding

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if how == "selected":
            keep = labels > -0.9
            return F.binary_cross_entropy_with_logits(logits[keep], labels[keep], reduction="none").sum()
        if how == "weighted":
            return F.binary_cross_entropy_with_logits(logits, labels, weight=(labels > -0.9).float(), reduction="sum")
        return F.binary_cross_entropy_with_logits(logits, labels, reduction="none").sum()

    report = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.Adam(model.parameters(), lr=1e-2))
    return _objective(report)


def test_padded_labels_left_in_a_summed_binary_cross_entropy_fail_at_the_objective():
    objective = _padded_bce("kept")
    assert objective.status is Status.FAIL and objective.check == "objective.target_out_of_range"
    assert objective.evidence["targets_outside_0_1"] == 12 and objective.evidence["values_outside"] == [-1.0]


@pytest.mark.parametrize("how", ["selected", "weighted"])
def test_padded_labels_masked_or_weighted_out_of_the_binary_cross_entropy_are_no_finding(how):
    assert _padded_bce(how).check != "objective.target_out_of_range"
