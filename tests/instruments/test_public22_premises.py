"""What public-22's first contact showed, each fixed in general (tests/realworld/README.md):

- a layer whose weights start at zero and are fed a constant zero tensor (Glow's learned prior: a zero-initialized
  convolution over a zero buffer, whose bias alone learns) was FAILed as a zero initialization, although random
  weights get no gradient there either: what keeps it silent is its input, not its initialization;
- a model that computes its own loss when called with ``return_loss=True`` (minGRU's LM), handed over with
  ``loss_fn=lambda loss, _: loss``, gave a per-token tensor from ``model(inputs)``, and three instruments FAILed the
  program for returning a non-scalar loss: the contract of the evidence's ``loss_fn`` was broken, not the program;
- a tagger that reads character ids ``[B * T, C]`` beside its word ids made the ledger's sequence reading compare
  rows of different batch sizes and raise, so every link said "could not check" (NCRF++).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status


class _WithLearnedPrior(nn.Module):
    """A classifier plus a learned prior: a zero-initialized layer over a zero buffer (only its bias matters)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        self.prior = nn.Linear(4, 3)
        nn.init.zeros_(self.prior.weight)
        nn.init.zeros_(self.prior.bias)
        self.register_buffer("prior_h", torch.zeros(1, 4))

    def forward(self, x):
        return self.body(x) + self.prior(self.prior_h)


def _data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 6, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def test_a_zero_layer_fed_zeros_is_not_a_zero_initialization():
    torch.manual_seed(0)
    model = _WithLearnedPrior()
    report = firstdiv.six_claims(model, _data(), F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-3))
    computation = next(f for f in report.findings if f.where == "COMPUTATION")
    assert computation.status is Status.WARN and computation.check == "claim.computation.tied_without_gradient"
    assert "random weights" in computation.message and computation.evidence["random_weights_get_gradient"] is False
    assert report.status is not Status.FAIL


def test_a_zero_initialized_hidden_layer_still_fails():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)
    report = firstdiv.six_claims(model, _data(), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1))
    assert report.first_divergence is not None and report.first_divergence.kind == "claim.computation.zero_init"


class _SelfLoss(nn.Module):
    """A causal LM that returns its logits, or its next-token loss when called with ``return_loss=True``."""

    def __init__(self, vocab: int = 11) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(vocab, 16), nn.Linear(16, vocab)

    def forward(self, x, return_loss=False):
        if return_loss:
            x, labels = x[:, :-1], x[:, 1:]
        logits = self.out(torch.tanh(self.emb(x)))
        return F.cross_entropy(logits.transpose(1, 2), labels) if return_loss else logits


def test_a_loss_fn_that_gives_no_scalar_is_the_evidence_not_a_fail_of_the_program():
    torch.manual_seed(0)
    model = _SelfLoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randint(0, 11, (4, 9))

    def train_step():
        opt.zero_grad()
        loss = model(x, return_loss=True)
        loss.backward()
        opt.step()
        return loss.detach()

    ws = firstdiv.diagnose(stop_at_first=False, model=model, batch=(x,), loss_fn=lambda loss, _t: loss, optimizer=opt,
                           train_step=train_step)
    reports = {name: ws.report_of(name) for name in ws.details["reports"]}
    assert {name: r.first_divergence for name, r in reports.items() if r.status is Status.FAIL} == {}
    facts = reports["tensor_facts"]
    assert facts.status is Status.SKIPPED and "shape (4, 9, 11)" in facts.reason and "return_loss=True" in facts.reason


class _WordsAndChars(nn.Module):
    """A tagger reading word ids [B, T] and the characters of every word [B * T, C] (as NCRF++ does)."""

    def __init__(self, vocab: int = 20, tags: int = 12) -> None:
        super().__init__()
        self.words, self.chars, self.out = nn.Embedding(vocab, 8), nn.Embedding(vocab, 8), nn.Linear(16, tags)

    def forward(self, words, chars):
        b, t = words.shape
        per_word = self.chars(chars).mean(1).reshape(b, t, -1)
        return self.out(torch.cat([self.words(words), per_word], -1))


def test_sequences_of_another_batch_size_are_not_read_against_the_outputs():
    """Character ids [B * T, C] whose length equals the outputs' T made the sequence reading compare rows of different
    batch sizes and raise: every link of the ledger said "could not check"."""
    torch.manual_seed(0)
    model = _WordsAndChars()
    words, chars = torch.randint(1, 20, (10, 10)), torch.randint(1, 12, (100, 10))
    tags = words % 12
    report = firstdiv.learning_ledger(model, ((words, chars), tags), lambda o, t: F.cross_entropy(o.transpose(1, 2), t),
                                      torch.optim.SGD(model.parameters(), lr=0.1), overfit_steps=0)
    assert not any("could not check" in f.message for f in report.findings), report.findings
