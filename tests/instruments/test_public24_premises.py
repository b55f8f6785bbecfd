"""What public-24's first contact showed, each fixed in general (tests/realworld/README.md):

- a loop that accumulates gradients across calls of its step (MiniMind: backward every micro-batch, optimizer.step
  and zero_grad every k-th) left the first call's gradient in ``.grad`` at the second, and step_probe read it as a
  missing zero_grad: a gradient no step has applied yet is accumulation by design, not a carried one;
- an eval_fn that switches the networks it closes over to eval mode and then runs its ``model`` argument, a wrapper
  of those networks (MetaOptNet), was handed a copy of the model: the ``eval()`` calls reached the originals while the
  copy ran in training mode, and six_claims FAILed ``claim.evaluation.train_mode``;
- MetaOptNet at seed 2: two episodes of shuffled class ids, one ending with the same id twice, read as padding (a
  trailing run of one id) and FAILed as ``objective.padding_in_loss``: a run of two ends a row by chance about once in
  K classes;
- found by the gate's no-trace harness: WGAN-GP's reader shuffles its numpy dataset in place at each epoch, the batch
  handed to firstdiv is a view of it, and step_probe's calls of the user's step changed the batch's values: the
  instruments that run the user's step now guard the batch's tensors too.
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


def _shuffling_program():
    """A loop whose data pipeline shuffles its numpy dataset in place at each epoch's start (WGAN-GP's MNIST reader),
    with the batch handed to firstdiv a view of that dataset."""
    import numpy as np

    rng = np.random.default_rng(0)
    images = rng.standard_normal((16, 6)).astype(np.float32)
    labels = (images[:, 0] > 0).astype(np.int64)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step():
        order = rng.permutation(len(images))  # one batch per epoch: every call starts an epoch
        images[:], labels[:] = images[order], labels[order]
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(images)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        return loss.detach()

    return model, opt, train_step, (torch.from_numpy(images[:8]), torch.from_numpy(labels[:8]))


def test_instruments_that_run_the_users_step_put_back_the_batch_its_pipeline_rewrote():
    for instrument in (firstdiv.step_probe, firstdiv.learning_ledger, firstdiv.six_claims):
        model, opt, train_step, batch = _shuffling_program()
        before = [t.clone() for t in batch]
        instrument(model, batch, F.cross_entropy, opt, train_step=train_step)
        assert all(torch.equal(t, b) for t, b in zip(batch, before)), instrument.__name__


def test_a_class_id_repeated_at_the_end_of_a_few_shot_episode_is_no_padding():
    # two episodes of 30 query labels over 5 classes, shuffled: the second happens to end with 3, 3; at K = 5 a run of
    # two ends a row by chance about once in five, so it is no pad id (MetaOptNet at seed 2)
    g = torch.Generator().manual_seed(0)
    rows = []
    for tail in ((2, 4), (3, 3)):
        body = torch.tensor([c for c in range(5) for _ in range(6)])
        for c in tail:
            body = torch.cat([body[body != c], body[body == c][1:]])
        body = body[torch.randperm(len(body), generator=g)]
        rows.append(torch.cat([body, torch.tensor(tail)]))
    labels = torch.stack(rows)
    assert labels.shape == (2, 30) and int(labels[1, -1]) == int(labels[1, -2]) == 3
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 5))
    x = torch.randn(2, 30, 6, generator=g)
    report = firstdiv.learning_ledger(model, (x, labels),
                                      lambda logits, y: F.cross_entropy(logits.reshape(-1, 5), y.reshape(-1)),
                                      torch.optim.Adam(model.parameters(), lr=1e-3))
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    assert objective.check != "objective.padding_in_loss" and objective.status is not Status.FAIL, objective.message


def test_diagnose_puts_back_the_batch_the_users_pipeline_rewrote():
    model, opt, train_step, batch = _shuffling_program()
    before = [t.clone() for t in batch]
    firstdiv.diagnose(model=model, batch=batch, loss_fn=F.cross_entropy, optimizer=opt, train_step=train_step,
                      stop_at_first=False)
    assert all(torch.equal(t, b) for t, b in zip(batch, before))
