"""What public-22's first contact showed, each fixed in general (tests/realworld/README.md):

- a layer whose weights start at zero and are fed a constant zero tensor (Glow's learned prior: a zero-initialized
  convolution over a zero buffer, whose bias alone learns) was FAILed as a zero initialization, although random
  weights get no gradient there either: what keeps it silent is its input, not its initialization;
- a model that computes its own loss when called with ``return_loss=True`` (minGRU's LM), handed over with
  ``loss_fn=lambda loss, _: loss``, gave a per-token tensor from ``model(inputs)``, and three instruments FAILed the
  program for returning a non-scalar loss: the contract of the evidence's ``loss_fn`` was broken, not the program;
- a tagger that reads character ids ``[B * T, C]`` beside its word ids made the ledger's sequence reading compare
  rows of different batch sizes and raise, so every link said "could not check" (NCRF++);
- found by a scan of the whole corpus for firstdiv's own errors after public-22: outputs ``[B * 16, K]`` with as many
  classes as scored positions (pytorch-wavenet's 256 and 256) made OBJECTIVE's per-example cross-entropy slice the
  class axis and raise; a sparse adjacency as targets (VGAE) made TASK and OBJECTIVE raise inside torch's sparse
  kernels.
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


class _Causal(nn.Module):
    """A WaveNet-style model: one-hot input [B, K, L], the last 16 positions of every example scored over K classes,
    flattened to [B * 16, K] (as pytorch-wavenet does, with 256 classes and 256 scored positions)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(k, k, 2)

    def forward(self, x):
        return self.conv(x)[:, :, -16:].transpose(1, 2).reshape(-1, x.shape[1])


def test_per_example_slices_that_do_not_pair_are_not_read():
    """Outputs [B * 16, K] against targets [B * 16] with K == B * 16 (pytorch-wavenet: 256 and 256): the OBJECTIVE
    link's per-example cross-entropy sliced the outputs along their class axis and raised ("could not check")."""
    torch.manual_seed(0)
    model = _Causal(256)
    ids = torch.randint(0, 256, (16, 20))
    x = F.one_hot(ids, 256).transpose(1, 2).float()
    report = firstdiv.learning_ledger(model, (x, ids[:, 4:].reshape(-1)), lambda o, t: F.cross_entropy(o.squeeze(), t.squeeze()),
                                      torch.optim.SGD(model.parameters(), lr=0.1), overfit_steps=0)
    assert not any("could not check" in f.message for f in report.findings), [f.message for f in report.findings]


class _Gae(nn.Module):
    """A graph auto-encoder over a dense adjacency input: inner products of node embeddings score every edge."""

    def __init__(self, n: int = 12) -> None:
        super().__init__()
        self.lin = nn.Linear(n, 4)

    def forward(self, adj):
        z = self.lin(adj)
        return z @ z.T


def test_sparse_targets_are_named_not_a_failure_of_firstdiv():
    """A sparse adjacency as targets (VGAE's link prediction): the TASK and OBJECTIVE checks raised inside torch's sparse
    kernels and said "could not check ... report it to firstdiv"; they now say which targets they cannot read."""
    torch.manual_seed(0)
    adj = (torch.rand(12, 12) < 0.3).float()
    adj = ((adj + adj.T) > 0).float()
    model = _Gae()
    report = firstdiv.learning_ledger(model, (adj, adj.to_sparse()),
                                      lambda o, t: F.binary_cross_entropy_with_logits(o, t.to_dense()),
                                      torch.optim.Adam(model.parameters(), lr=0.01), overfit_steps=0)
    assert not any("report it to firstdiv" in f.message for f in report.findings), [f.message for f in report.findings]
    task = next(f for f in report.findings if f.where == "TASK")
    assert task.status is Status.SKIPPED and "sparse_coo" in task.message
