"""Padding that reaches a loss the model computes itself (``outputs.loss`` from ``labels=``, as a Hugging Face model
does): the ledger cannot hand such a loss other predictions, so it reads the loss's own gradient at the predictions.
A causal model shifts its labels inside (the prediction at t is asked for the label at t + 1); a token classifier asks
each position for its own label. Padding labels set to the ignore index, or to a pad id the loss ignores by value, give
no finding; left padding whose last pad position predicts the first real token is not padding asked for."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")

PAD, V = 1, 12


class _TokenModel(nn.Module):
    """Embeds, mixes causally with a GRU and scores every position; the loss is computed inside from ``labels``."""

    def __init__(self, shift: bool, ignore: int = -100) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.rnn, self.head = nn.Embedding(V, 16), nn.GRU(16, 16, batch_first=True), nn.Linear(16, V)
        self.shift, self.ignore = shift, ignore

    def forward(self, input_ids, attention_mask=None, labels=None):
        h, _ = self.rnn(self.emb(input_ids))
        logits = self.head(h)
        out = {"logits": logits}
        if labels is not None:
            lg, lb = (logits[:, :-1], labels[:, 1:]) if self.shift else (logits, labels)
            out["loss"] = F.cross_entropy(lg.reshape(-1, V), lb.reshape(-1), ignore_index=self.ignore)
        return out


def _batch(left: bool = False, pad_label: int = -100, same: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, V, (8, 10), generator=g)
    mask = torch.ones_like(ids)
    for i, n in enumerate([0, 2, 0, 3, 0, 0, 4, 0]):  # padding in 3 rows of 8: only the mask tells it
        if n:
            (mask[i, :n] if left else mask[i, -n:]).zero_()
    ids = ids.masked_fill(mask == 0, PAD)
    labels = (ids % 3) if same else ids.clone()  # a tag per token, or the tokens themselves (the model shifts them)
    labels = labels.masked_fill(mask == 0, pad_label)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _ledger(model: nn.Module, batch: dict) -> firstdiv.Report:
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    return firstdiv.learning_ledger(model, batch, lambda outputs, labels: outputs["loss"], opt, overfit_steps=5)


def _padding_fail(r: firstdiv.Report) -> bool:
    d = r.first_divergence
    return d is not None and d.kind == "objective.padding_in_loss"


@pytest.mark.parametrize("shift,same", [(True, False), (False, True)], ids=["causal_lm", "token_tags"])
def test_padding_labels_a_model_scores_itself_are_found(shift, same):
    r = _ledger(_TokenModel(shift), _batch(pad_label=PAD if not same else 0, same=same))
    assert _padding_fail(r), r.findings
    assert next(f for f in r.findings if f.where == "OBJECTIVE").evidence["target_shift"] == int(shift)


@pytest.mark.parametrize("case", ["ignore_index", "pad_ignored_by_value", "left_padding"])
def test_padding_left_out_of_a_loss_inside_the_model_is_no_finding(case):
    model = _TokenModel(True, ignore=PAD if case == "pad_ignored_by_value" else -100)
    batch = _batch(left=case == "left_padding", pad_label=PAD if case == "pad_ignored_by_value" else -100)
    r = _ledger(model, batch)
    assert not _padding_fail(r), r.first_divergence
    assert r.status.value != "FAIL", r.first_divergence
