"""learning_ledger on correct programs that used to be misjudged: a link whose own check raises is a SKIPPED "could
not check" (the walk goes on), an actor-critic step (policy softmax over the last dimension, tuple targets, a
semi-gradient ``value.item()``) runs every link, and CAPABILITY gives a probe round that is on course to fit the
whole budget, and calls a large fall still under way learning (PASS with a note), not a reason to look."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

from firstdiv import learning_ledger
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.learning_ledger import _capability as cap
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")

LINKS = ["TASK", "OBJECTIVE", "DEPENDENCY", "GRADIENT", "OPTIMIZER_OWNERSHIP", "PARAMETER_UPDATE", "CAPABILITY"]


def run(model, batch, loss_fn, optimizer=None, **kw):
    before = Snapshot.take(model, optimizer)
    report = learning_ledger(model, batch, loss_fn, optimizer, **kw)
    assert before.diff(Snapshot.take(model, optimizer)) == []
    return report


def link(report, name):
    return report.findings[LINKS.index(name)]


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 24)
        self.pi = nn.Linear(24, 3)
        self.v = nn.Linear(24, 1)

    def forward(self, obs):
        h = torch.tanh(self.body(obs))
        return F.softmax(self.pi(h), dim=-1), self.v(h)


def a2c_loss(outputs, targets):
    probs, values = outputs
    actions, returns = targets
    logp = Categorical(probs).log_prob(actions)
    losses = []
    for lp, value, ret in zip(logp, values, returns.tolist()):
        adv = ret - value.item()  # semi-gradient: the critic's estimate is a constant in the actor's loss
        losses.append(-lp * adv + F.mse_loss(value, torch.tensor([ret])))
    return torch.stack(losses).mean()


def test_actor_critic_with_last_dim_softmax_and_tuple_targets_runs_every_link():
    torch.manual_seed(0)
    model = ActorCritic()
    opt = torch.optim.RMSprop(model.parameters(), lr=7e-4)
    obs = torch.randn(12, 6)
    batch = (obs, (torch.randint(0, 3, (12,)), torch.randn(12)))
    report = run(model, batch, a2c_loss, opt)
    assert report.status is not Status.FAIL, str(report)
    for name in LINKS:
        f = link(report, name)
        assert f.status is not Status.FAIL, str(report)
        assert f.status is not Status.SKIPPED or f.message.startswith("could not check"), str(report)


def test_a_link_that_raises_is_skipped_and_the_walk_goes_on(monkeypatch):
    import firstdiv.instruments.learning_ledger as ll

    def broken(ctx):
        raise IndexError("cannot fit 'int' into an index-sized integer")

    monkeypatch.setitem(ll._CHECKS, "OPTIMIZER_OWNERSHIP", broken)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    report = run(model, (torch.randn(16, 5), torch.randint(0, 3, (16,))), F.cross_entropy, opt)
    grad = link(report, "OPTIMIZER_OWNERSHIP")
    assert grad.status is Status.SKIPPED and grad.message.startswith("could not check: the OPTIMIZER_OWNERSHIP check raised IndexError")
    assert report.status is not Status.FAIL
    assert link(report, "PARAMETER_UPDATE").status is Status.PASS and link(report, "CAPABILITY").status is Status.PASS


def _losses(first: float, per_step: list[float]) -> list[float]:
    out = [first]
    for d in per_step:
        out.append(out[-1] - d * first)
    return out


def test_a_probe_on_course_to_fit_keeps_the_budget_and_a_slowing_one_does_not():
    on_course = cap.Round(10.0, [5e-3], _losses(4.0, [0.02] * cap.PROBE))  # 80% down at PROBE, 2% a step
    on_course.accs = [None] * len(on_course.losses)
    assert cap._judge(on_course, True, cap.PROBE, 200, last=False) is None
    slowing = cap.Round(10.0, [5e-3], _losses(4.0, [0.035] * cap.WINDOW + [0.0002] * cap.WINDOW))  # 70% down, then crawls
    slowing.accs = [None] * len(slowing.losses)
    assert cap._judge(slowing, True, cap.PROBE, 200, last=False) == "slow"
    early = cap.Round(1.0, [5e-4], _losses(4.0, [0.004] * cap.WINDOW))  # 8% in 20 steps: cheaper to try x10
    early.accs = [None] * len(early.losses)
    assert cap._judge(early, True, cap.WINDOW, 200, last=False) == "slow"


def _ctx():
    model = nn.Linear(2, 2)
    return SimpleNamespace(optimizer=torch.optim.AdamW(model.parameters(), lr=5e-4), report_notes=[], overfit_steps=200)


def _verdict(rounds):
    ctx = _ctx()
    for r in rounds:
        r.accs = [None] * len(r.losses)
    ev = {"examples": 8, "rounds": [r.summary() for r in rounds],
          "steps": sum(len(r.losses) - 1 for r in rounds)}
    return ctx, cap._verdict(ctx, rounds, True, ev)


def _round(scale, losses, outcome, moved=0.5):
    r = cap.Round(scale, [5e-4 * scale], losses, outcome=outcome)
    r.moved = moved
    return r


def test_a_large_fall_still_under_way_is_learning_with_a_note():
    ctx, check = _verdict([_round(1.0, _losses(4.0, [0.004] * 20), "slow"),
                           _round(10.0, _losses(4.0, [0.012] * 60), "slow"),  # 72% down, 24% in its last 20 steps
                           _round(100.0, [4.0] * 21, "plateau", moved=20.0)])
    f = check.finding
    assert f.status is Status.PASS and "note: learning: 72% down in 60 steps at lr 0.005" in f.message
    assert "raise overfit_steps to see it fit" in f.message and ctx.report_notes == [f.message.split("; ", 1)[1]]


def test_a_large_fall_that_stopped_is_still_a_warn():
    flat = _losses(4.0, [0.03] * 20 + [0.0005] * 40)  # 64% down, then 1% over the last 20 steps
    _, check = _verdict([_round(1.0, _losses(4.0, [0.004] * 20), "slow"), _round(10.0, flat, "slow"),
                         _round(100.0, [4.0] * 21, "plateau", moved=20.0)])
    assert check.finding.status is Status.WARN and "learning but not fitted" in check.finding.message


def test_a_small_fall_still_under_way_is_still_a_warn():
    _, check = _verdict([_round(1.0, _losses(4.0, [0.01] * 40), "slow"),  # 40% down
                         _round(10.0, _losses(4.0, [0.006] * 40), "slow"), _round(100.0, [4.0] * 21, "plateau", moved=9.0)])
    assert check.finding.status is Status.WARN and "learning but not fitted" in check.finding.message


class CharLM(nn.Module):
    """A tiny next-character model in the shape of char-rnn scripts: embedding, GRU, a vocabulary head."""

    def __init__(self, vocab=40, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.head(self.rnn(self.embed(ids))[0])


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def test_a_recipe_lr_language_model_gets_no_warn_from_capability():
    torch.manual_seed(0)
    model = CharLM()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    text = torch.randint(0, 40, (16, 17))
    report = run(model, (text[:, :-1], text[:, 1:]), lm_loss, opt)
    f = link(report, "CAPABILITY")
    assert f.status is Status.PASS, str(report)
    rounds = f.evidence["rounds"]
    assert all(r["outcome"] != "diverged" for r in rounds[:-1]) and math.isfinite(f.evidence["best_loss"])


def test_a_train_step_on_a_data_stream_is_not_called_ascending():
    """A word-LM style loop drawing a new batch each call moves the known batch's loss up and down by chance; only a
    loss that rises at every call with the update clearly up the gradient is an ascent."""
    import firstdiv

    torch.manual_seed(1)
    stream = [torch.randn(16, 6) for _ in range(8)]
    targets = [(x[:, 0] > 0).long() for x in stream]
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    position = {"i": 0}

    def train_step():
        i = position["i"] % len(stream)
        position["i"] += 1
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(stream[i]), targets[i])
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-2.0)
        return loss

    for start in range(4):
        position["i"] = start
        r = firstdiv.learning_ledger(model, (stream[7], targets[7]), torch.nn.functional.cross_entropy, None,
                                     train_step=train_step, overfit_steps=0)
        update = next(f for f in r.findings if f.where == "PARAMETER_UPDATE")
        assert update.check != "update.ascends", update.message
