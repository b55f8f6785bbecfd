"""What public-24's first contact showed, each fixed in general (tests/realworld/README.md):

- a loop that accumulates gradients across calls of its step (MiniMind: backward every micro-batch, optimizer.step
  and zero_grad every k-th) left the first call's gradient in ``.grad`` at the second, and step_probe read it as a
  missing zero_grad: a gradient no step has applied yet is accumulation by design, not a carried one;
- an eval_fn that switches the networks it closes over to eval mode and then runs its ``model`` argument, a wrapper
  of those networks (MetaOptNet), was handed a copy of the model: the ``eval()`` calls reached the originals while the
  copy ran in training mode, and six_claims FAILed ``claim.evaluation.train_mode``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status


def _data(n: int = 32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, 0] > 0).long()


def _accumulating(every: int, zero_grad: bool = True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = {"step": 0}

    def train_step():
        state["step"] += 1
        x, y = _data(seed=state["step"])
        loss = F.cross_entropy(model(x), y) / every
        loss.backward()
        if state["step"] % every == 0:
            opt.step()
            if zero_grad:
                opt.zero_grad()
        return loss.detach() * every

    return model, opt, train_step


def _carried(report):
    return [f for f in report.findings if f.check == "step.grad_accumulation" and f.status is Status.FAIL]


def test_gradient_accumulation_across_calls_is_no_missing_zero_grad():
    model, opt, train_step = _accumulating(every=2)
    report = firstdiv.step_probe(model, _data(), F.cross_entropy, opt, train_step=train_step)
    assert not _carried(report), [f.message for f in _carried(report)]
    assert report.status is not Status.FAIL


def test_a_loop_that_steps_every_call_without_zero_grad_still_fails():
    model, opt, train_step = _accumulating(every=1, zero_grad=False)
    report = firstdiv.step_probe(model, _data(), F.cross_entropy, opt, train_step=train_step)
    assert _carried(report)


class _Wrapper(nn.Module):
    """A model made of two networks the program also holds by name (an embedding net and a head)."""

    def __init__(self, embedding: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.embedding_net, self.cls_head = embedding, head

    def forward(self, x):
        return self.cls_head(self.embedding_net(x))


def _wrapped_eval(switches_the_parts: bool):
    torch.manual_seed(0)
    embedding_net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3))
    cls_head = nn.Linear(16, 2)
    model = _Wrapper(embedding_net, cls_head)
    x_val, y_val = _data(seed=9)

    def eval_fn(m, _batch=None):
        if switches_the_parts:
            for part in (embedding_net, cls_head):
                part.eval()
        with torch.no_grad():
            acc = float((m(x_val).argmax(1) == y_val).float().mean())
        embedding_net.train()
        cls_head.train()
        return acc

    report = firstdiv.six_claims(model, _data(), F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-3),
                                 eval_fn=eval_fn)
    return next(f for f in report.findings if f.where == "EVALUATION"), model


def test_eval_calls_on_the_networks_a_wrapper_holds_reach_the_model_evaluated():
    evaluation, model = _wrapped_eval(switches_the_parts=True)
    assert evaluation.status is Status.PASS, evaluation.message
    assert model.training and all(m.training for m in model.modules())  # the user's modes put back


def test_an_eval_fn_that_switches_nothing_still_fails():
    evaluation, _ = _wrapped_eval(switches_the_parts=False)
    assert evaluation.status is Status.FAIL and evaluation.check == "claim.evaluation.train_mode"
