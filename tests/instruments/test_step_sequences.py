"""A sequence model whose loop builds its targets itself: the loss ``train_step`` backpropagates, not ``loss_fn``,
says what each position is asked for (``learning_ledger/_step_sequences.py``).

A translation loop that writes ``criterion(predicted[:, :-1], target_sequences[:, :-1])`` trains every decoder position
to copy the token it reads, while the ``loss_fn`` and batch handed to firstdiv state the shifted pairing. The
relation is read from one guarded call of the user's step, and the causal counterfactual runs on a copy with the
step's own arguments.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")

V, T, B = 24, 10, 16


class _CausalLM(nn.Module):
    """Embedding, a causal convolution (left padding only) and a head: position t reads tokens <= t."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.conv, self.head = nn.Embedding(V, 32), nn.Conv1d(32, 32, 3), nn.Linear(32, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids).transpose(1, 2)
        h = torch.relu(self.conv(F.pad(h, (2, 0)))).transpose(1, 2)
        return self.head(h)


def _program(shift: bool) -> tuple[nn.Module, tuple, object, torch.optim.Optimizer, object]:
    torch.manual_seed(0)
    model = _CausalLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(1, V, (B, T), generator=g) for _ in range(4)]
    state = {"i": 0}

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:  # what the user meant
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    def train_step() -> float:  # what the loop does
        seqs = data[state["i"] % len(data)]
        state["i"] += 1
        logits = model(seqs)
        if shift:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), seqs[:, 1:].reshape(-1))
        else:  # the slip: each position asked for the token it reads
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), seqs[:, :-1].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return model, (data[0][:, :-1], data[0][:, 1:]), loss_fn, opt, train_step


def test_targets_left_unshifted_inside_train_step_are_task_target_not_shifted() -> None:
    model, batch, loss_fn, opt, step = _program(shift=False)
    r = firstdiv.learning_ledger(model, batch, loss_fn, opt, train_step=step)
    assert r.status is Status.FAIL and r.first_divergence.kind == "task.target_not_shifted", r
    assert r.first_divergence.where == "TASK"


def test_the_shifted_step_of_the_same_model_passes_the_sequence_checks() -> None:
    model, batch, loss_fn, opt, step = _program(shift=True)
    r = firstdiv.learning_ledger(model, batch, loss_fn, opt, train_step=step)
    assert r.status is not Status.FAIL, r


def test_a_loss_fn_that_shifts_inside_is_read_from_its_gradient_on_a_fresh_model() -> None:
    """At initialization the shifted and unshifted cross-entropies are the same number: the gradient tells them apart
    (the batch is ``(ids, ids)`` and ``loss_fn`` compares ``logits[:, :-1]`` with ``targets[:, 1:]``)."""
    model, batch, _, opt, _ = _program(shift=True)
    ids = torch.cat([batch[0], batch[1][:, -1:]], 1)

    def shifting(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1))
    r = firstdiv.learning_ledger(model, (ids, ids), shifting, opt)
    assert not any(f.status is Status.FAIL and f.check.startswith("task.") for f in r.findings), r
