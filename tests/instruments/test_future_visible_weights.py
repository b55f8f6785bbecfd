"""``dependency.future_visible`` read at the model's wiring, not at its momentary weights or batch statistics (public-9:
gMLP's spatial gating unit without its causal mask is near the identity at initialization, so later tokens move the
earlier outputs by 1e-5 only; the counterfactual is read again at perturbed weights). The counterfactual runs in eval
mode: a causal convolution with batch norm shares batch statistics across positions in train mode, which is no wiring
to later tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

V, T, B, D = 16, 12, 8, 24


class _GatedLM(nn.Module):
    """A spatial gating unit as gMLP builds it: weights near 0 and bias 1, so it starts as the identity."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.causal = causal
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, V)
        eps = 1e-3 / T
        self.spatial = nn.Parameter(torch.empty(T, T).uniform_(-eps, eps))
        self.bias = nn.Parameter(torch.ones(T, 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        w = self.spatial
        if self.causal:
            w = w.masked_fill(torch.ones(T, T).triu(1).bool(), 0.0)
        return self.head(x * (torch.einsum("ij,bjd->bid", w, x) + self.bias))


class _CausalConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.conv, self.norm = nn.Embedding(V, D), nn.Conv1d(D, D, 3), nn.BatchNorm1d(D)
        self.head = nn.Linear(D, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = F.pad(self.emb(ids).transpose(1, 2), (2, 0))  # left padding only: causal
        return self.head(torch.relu(self.norm(self.conv(x))).transpose(1, 2))


class _ShiftInside(nn.Module):
    """``model(tokens) -> loss``, the shift inside (an autoregressive wrapper): the program declares no targets."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(tokens[:, :-1]).reshape(-1, V), tokens[:, 1:].reshape(-1))


def _ledger(model: nn.Module, inside: bool = False) -> firstdiv.Report:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, V, (B, T + 1), generator=g)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    if inside:
        wrapped = _ShiftInside(model)
        return firstdiv.learning_ledger(wrapped, (tokens,), lambda loss, _t: loss, opt, overfit_steps=0)
    batch = (tokens[:, :-1], tokens[:, 1:])
    loss_fn = lambda out, t: F.cross_entropy(out.reshape(-1, V), t.reshape(-1))
    return firstdiv.learning_ledger(model, batch, loss_fn, opt, overfit_steps=0)


def _future(r: firstdiv.Report) -> bool:
    return any(f.check == "dependency.future_visible" and f.status.value == "FAIL" for f in r.findings)


def test_a_gating_unit_without_its_causal_mask_leaks_once_its_weights_move() -> None:
    r = _ledger(_GatedLM(causal=False), inside=True)
    assert _future(r), r
    f = next(f for f in r.findings if f.check == "dependency.future_visible")
    assert f.evidence["earlier_outputs_change_at_perturbed_weights"] > 100 * f.evidence["earlier_outputs_change"]
    assert not _future(_ledger(_GatedLM(causal=True), inside=True))


def test_batch_statistics_shared_across_positions_are_no_future_leak() -> None:
    assert not _future(_ledger(_CausalConvBN()))
    assert not _future(_ledger(_CausalConvBN(), inside=True))
