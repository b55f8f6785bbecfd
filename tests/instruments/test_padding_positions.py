"""Padding that reaches the loss, read from the program's own batch in shapes beyond a language model's ``[B, T, V]``
scores: one score per position (``[B, T]``: a recommender's positive- and negative-item logits), left padding (an item
history padded at its start), and integer targets handed over as a numpy array that the user's loss indexes with."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class PositionScorer(nn.Module):
    """Scores the item at every position of a left-padded history (the positive and a sampled negative item)."""

    def __init__(self, items: int = 20, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(items + 1, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, dim, batch_first=True)

    def forward(self, seq, pos, neg):
        h, _ = self.rnn(self.emb(torch.as_tensor(seq)))
        return (h * self.emb(torch.as_tensor(pos))).sum(-1), (h * self.emb(torch.as_tensor(neg))).sum(-1)


def _history(n: int = 16, length: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rs = np.random.RandomState(0)
    seq = rs.randint(1, 21, size=(n, length + 1))
    for i, keep in enumerate(rs.randint(3, length, size=n)):
        seq[i, : length + 1 - keep] = 0  # left padding: the oldest positions of a short history
    neg = np.where(seq[:, 1:] > 0, rs.randint(1, 21, size=(n, length)), 0)
    return seq[:, :-1], seq[:, 1:], neg


@pytest.mark.parametrize("masked", [True, False], ids=["pad_masked", "pad_in_loss"])
def test_left_padding_scored_per_position_must_be_left_out_of_the_loss(masked):
    seq, pos, neg = _history()
    torch.manual_seed(0)
    model = PositionScorer()

    def loss_fn(outputs, pos):
        pos_logits, neg_logits = outputs
        keep = np.where(pos != 0) if masked else np.where(pos >= 0)
        return (F.binary_cross_entropy_with_logits(pos_logits[keep], torch.ones_like(pos_logits[keep]))
                + F.binary_cross_entropy_with_logits(neg_logits[keep], torch.zeros_like(neg_logits[keep])))

    batch = ({"seq": seq, "pos": pos, "neg": neg}, pos)
    report = firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    if masked:
        assert objective.status is Status.PASS, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.padding_in_loss"), str(report)
        assert "the id 0 at the edge" in objective.message


@pytest.mark.parametrize("ignored", [True, False], ids=["pad_ignored", "pad_in_loss"])
def test_time_first_targets_are_read_along_the_time_axis(ignored):
    """A tagger over ``[T, B, F]`` features with ``[T, B]`` token targets padded at their end (``batch_axis=1``): the
    runs of the pad id are read along time, not across the batch."""
    g = torch.Generator().manual_seed(0)
    steps, n = 12, 16
    feats = torch.randn(steps, n, 6, generator=g)
    tags = torch.randint(1, 9, (steps, n), generator=g)
    for b, length in enumerate(torch.randint(5, steps - 1, (n,), generator=g).tolist()):
        tags[length:, b] = 0  # pad id 0 after each sequence
    torch.manual_seed(0)
    model = nn.Linear(6, 9)
    model.pad_idx = 0  # the tagger holds its pad id (the padding is the program's own, not a design)
    loss_fn = (lambda out, t: F.cross_entropy(out.reshape(-1, 9), t.reshape(-1), ignore_index=0)) if ignored else \
        (lambda out, t: F.cross_entropy(out.reshape(-1, 9), t.reshape(-1)))
    report = firstdiv.learning_ledger(model, (feats, tags), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      batch_axis=1, overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    if ignored:
        assert objective.status is Status.PASS, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.padding_in_loss"), str(report)


class SlotLM(nn.Module):
    """Predicts the token at each of a fixed number of masked slots (a BERT-style masked LM head)."""

    def __init__(self, vocab: int = 30, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids, slots):
        h = self.emb(ids).mean(1, keepdim=True) + self.emb(torch.gather(ids, 1, slots))
        return self.out(h)


@pytest.mark.parametrize("weighted", [True, False], ids=["weights_per_slot", "weights_after_mean"])
def test_slots_a_0_1_weight_switches_off_must_not_reach_the_loss(weighted):
    """Masked-LM targets ``(masked_ids, masked_weights)``: slots beyond a sentence's masked tokens hold id 0 and weight 0.
    A loss that averages first and weights a scalar afterwards trains those slots; per-slot weights do not."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 30, (16, 12), generator=g)
    slots = torch.randint(0, 12, (16, 5), generator=g)
    weights = (torch.arange(5).expand(16, 5) < torch.randint(1, 6, (16, 1), generator=g)).long()
    masked_ids = torch.gather(ids, 1, slots) * weights
    torch.manual_seed(0)
    model = SlotLM()

    def loss_fn(logits, targets):
        masked, w, = targets
        per = F.cross_entropy(logits.transpose(1, 2), masked, reduction="none" if weighted else "mean")
        return (per * w.float()).mean()

    report = firstdiv.learning_ledger(model, ({"ids": ids, "slots": slots}, (masked_ids, weights)), loss_fn,
                                      torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    if weighted:
        assert objective.check != "objective.padding_in_loss" or objective.status is not Status.FAIL, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.padding_in_loss"), str(report)
        assert "targets[1] weights 0" in objective.message
