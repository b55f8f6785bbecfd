"""A geometry instrument's raised forward, on the inputs diagnose read from the batch, is the program's FAIL only
when the program's own step meets it too: a Lightning-style module whose ``training_step`` flattens the images before
its encoder runs fine under its loop, so ``model(images)`` raising is firstdiv's call, reported as not checked; a
program whose own step calls the model on the same images and raises keeps the FAIL, with the step's error as its
confirmation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class FlatAutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 64))

    def forward(self, x):  # inference: the embedding of a flattened image
        return self.encoder(x)

    def training_step(self, batch, flatten: bool = True):
        x, _ = batch
        x = x.view(x.size(0), -1) if flatten else x
        return F.mse_loss(self.decoder(self.encoder(x)), x)


@pytest.mark.parametrize("flatten", [True, False], ids=["step_flattens", "step_raises_too"])
def test_a_forward_that_raises_only_on_firstdivs_call_is_not_checked(flatten):
    torch.manual_seed(0)
    model = FlatAutoEncoder()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    batch = (torch.randn(16, 1, 8, 8), torch.zeros(16, dtype=torch.long))

    def train_step():
        opt.zero_grad()
        loss = model.training_step(batch, flatten)
        loss.backward()
        opt.step()
        return loss.detach()

    before = [p.detach().clone() for p in model.parameters()]
    ws = firstdiv.diagnose(model=model, batch=batch, loss_fn=lambda loss, _t: loss, optimizer=opt, train_step=train_step,
                           stop_at_first=False)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # the confirming step left no trace
    for name in ("shape_ledger", "tensor_trace"):
        report = ws.report_of(name)
        if flatten:
            assert report.status is Status.SKIPPED, str(report)
            assert "your loop does not call the model this way; pass inputs=" in report.reason
        else:
            assert report.status is Status.FAIL, str(report)
            assert report.details["confirmed_by_train_step"].startswith("your train_step raises too: RuntimeError")
