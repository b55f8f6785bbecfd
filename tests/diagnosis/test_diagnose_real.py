"""diagnose on programs in the shapes real code takes: the learning instruments get the evidence a real loop
has (manual updates without an optimizer, a declared task, frozen parameters, a sequence-first batch axis), and an
instrument with nothing of its kind to check is listed, not warned on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")


class Propagate(nn.Module):
    """A graph layer written with raw parameters and a sparse adjacency (no Linear, no Conv)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) / n_in ** 0.5)

    def forward(self, data):
        x, adj = data
        return torch.sparse.mm(adj, x @ self.weight), adj


def _graph(seed: int):
    g = torch.Generator().manual_seed(seed)
    n = 24
    idx = torch.randint(0, n, (2, 80), generator=g)
    adj = torch.sparse_coo_tensor(torch.cat([idx, torch.arange(n).repeat(2, 1)], 1), torch.ones(80 + n), (n, n)).coalesce()
    x = torch.randn(n, 6, generator=g)
    y = (x[:, 0] > 0).long()
    return (x, adj), y


def test_a_model_without_shape_changing_layers_gets_a_clean_bill_with_shape_ledger_listed():
    torch.manual_seed(0)
    model = nn.Sequential(Propagate(6, 8), nn.Identity())
    model = _Head(model)
    batch = _graph(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ws = firstdiv.diagnose(model=model, batch=batch, loss_fn=F.cross_entropy, optimizer=opt, task="classification")
    shape = next(o for o in ws.details["observations"] if o["instrument"] == "shape_ledger")
    assert shape["status"] == "SKIPPED" and shape["not_applicable"]
    assert ws.status.value == "PASS", [(o["instrument"], o["status"], o["summary"]) for o in ws.details["observations"]]
    assert any(n["instrument"] == "shape_ledger" for n in ws.details["not_checked"])


class _Head(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.out = Propagate(8, 2)

    def forward(self, data):
        h, adj = self.body(data)
        return self.out((torch.relu(h), adj))[0]


def test_manual_updates_are_diagnosed_through_train_step():
    torch.manual_seed(0)
    x = torch.randn(48, 5)
    w = torch.randn(5, 1)
    y = x @ w + 0.3
    model = nn.Linear(5, 1)

    def train_step():
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.05)
        return loss

    ws = firstdiv.diagnose(model=model, batch=(x, y), loss_fn=F.mse_loss, train_step=train_step, task="regression")
    ran = {o["instrument"]: o["status"] for o in ws.details["observations"]}
    assert {"step_probe", "learning_ledger", "six_claims"} <= set(ran)
    assert ws.status.value == "PASS", ran


def test_diagnose_refuses_an_unknown_evidence_key_with_the_known_ones():
    with pytest.raises(firstdiv.errors.InvalidArgument, match="batch_axis"):
        firstdiv.diagnose(model=nn.Linear(2, 2), batch_axes=1)
