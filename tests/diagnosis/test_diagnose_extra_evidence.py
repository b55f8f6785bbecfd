"""diagnose hands the newer instruments' declared evidence on: shape_ledger's designed shapes, stage_trace's
options, and loader_timing's consumer taken from the user's own train_step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")


def _cnn(in_features: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(in_features, 5))


def test_designed_shapes_reach_shape_ledger():
    x = torch.randn(2, 3, 8, 8)
    ws = firstdiv.diagnose(model=_cnn(4 * 4 * 4), inputs=x, designed={"2": (4, 4, 4), "4": (5,)},
                           stop_at_first=False)
    assert ws.report_of("shape_ledger").status.value == "PASS"
    patched = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Identity(), nn.Flatten(), nn.Linear(256, 5))
    report = firstdiv.diagnose(model=patched, inputs=x, designed={"2": (4, 4, 4)}, stop_at_first=False) \
        .report_of("shape_ledger")
    assert report.status.value == "FAIL" and report.first_divergence.where == "2"


def test_stage_options_reach_stage_trace():
    sample = (torch.rand(3, 4, 4), "cat")
    stages = [("label", lambda s: (s[0], {"cat": 1, "dog": 0}[s[1]]))]
    ws = firstdiv.diagnose(sample=sample, stages=stages, stage_options={"class_to_idx": {"cat": 0, "dog": 1}},
                           stop_at_first=False)
    report = ws.report_of("stage_trace")
    assert report.status.value == "FAIL" and report.first_divergence.where == "label"


def test_loader_timing_consumes_with_the_users_train_step_not_a_made_up_loss():
    """A GAN's loader yields (images, class labels); its loss is BCE on the discriminator's real/fake logit."""
    disc = nn.Sequential(nn.Flatten(), nn.Linear(12, 1))
    opt = torch.optim.Adam(disc.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(32, 3, 2, 2), torch.randint(0, 10, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    seen = []
    stream = iter(loader)

    def train_step():  # the user's loop: one step on the next batch, a new epoch when the loader runs out
        nonlocal stream
        try:
            images, _classes = next(stream)
        except StopIteration:
            stream = iter(loader)
            images, _classes = next(stream)
        seen.append(len(images))
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(disc(images), torch.ones(len(images), 1))
        loss.backward()
        opt.step()
        return loss

    before = [p.detach().clone() for p in disc.parameters()]
    report = firstdiv.diagnose(model=disc, loader=loader, loss_fn=nn.BCELoss(), optimizer=opt, train_step=train_step,
                               stop_at_first=False).report_of("loader_timing")
    assert report.status.value == "PASS", (report.reason, [f.message for f in report.findings][:3])
    assert all(torch.equal(a, b) for a, b in zip(before, disc.parameters()))
