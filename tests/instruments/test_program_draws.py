"""A program's own draws from Python's ``random`` (a teacher-forcing coin, an exploration draw) repeat in the ledger's
counterfactual runs like torch's: a seq2seq decoder that shifts inside (output ``t`` reads ``trg[t - 1]``, fed by a
coin between the true token and its own guess) and is trained on ``trg[t]`` is not a copy of its own input; before,
the coin drew anew in every run and the output at the changed position moved by the coin alone."""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class CoinSeq2Seq(nn.Module):
    def __init__(self, vocab: int = 12, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(dim, dim)
        self.out = nn.Linear(dim, vocab)
        self.vocab = vocab

    def forward(self, src, trg, teacher_forcing_ratio: float = 0.5):  # [T, B] sequences, time first
        h = self.emb(src).mean(0)
        outputs = torch.zeros(trg.size(0), trg.size(1), self.vocab)
        token = trg[0]
        for t in range(1, trg.size(0)):
            h = self.cell(self.emb(token), h)
            outputs[t] = F.log_softmax(self.out(h), -1)
            token = trg[t] if random.random() < teacher_forcing_ratio else outputs[t].argmax(-1)
        return outputs


def test_a_decoder_fed_by_a_python_coin_is_not_read_as_a_copy() -> None:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, 12, (8, 16), generator=g)
    trg = src.flip(0)
    torch.manual_seed(0)
    model = CoinSeq2Seq()
    loss_fn = lambda out, t: F.nll_loss(out[1:].reshape(-1, 12), t[1:].reshape(-1))
    state = random.getstate()
    report = firstdiv.learning_ledger(model, ({"src": src, "trg": trg}, trg), loss_fn,
                                      torch.optim.Adam(model.parameters(), 1e-3), batch_axis=1, overfit_steps=0)
    assert random.getstate() == state  # the coin's generator is given back
    task = next(f for f in report.findings if f.where == "TASK")
    assert task.status is not Status.FAIL, str(report)
    assert not any(f.check == "task.target_not_shifted" for f in report.findings), str(report)
