"""What public-27's first contact showed, each fixed in general (tests/realworld/README.md):

- a VQ-VAE at one seed: its decoder's reconstruction was one constant across the examples at initialization, so
  ``log N(z)`` of it was one number, and its MSE barely varied across the examples either. The flow reading matched
  the change-of-variables identity "loss + log N(z) is one constant" within its tolerance (set by the size of
  ``log N(z)``, which the constant ``D/2 log 2 pi`` dominates), found the model's transform had a determinant, and
  FAILed ``objective.log_det_mismatch``. The identity must now explain how the examples differ: the model's side of
  it has to vary across them far more than the identity's residual.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")


class _FlatDecoder(nn.Module):
    """An autoencoder whose reconstruction is nearly one constant at these weights (tiny weights, no bias), returned
    beside its code, as a VQ-VAE returns its reconstruction beside the encoder's output."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        with torch.no_grad():
            self.dec.weight.mul_(1e-3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        code = self.enc(x)
        return self.dec(code), code


def test_a_reconstruction_constant_across_examples_is_no_flow_identity():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (32, 16), generator=g).float() * 2 - 1  # every example's squared norm is 16
    torch.manual_seed(0)
    model = _FlatDecoder()
    loss_fn = lambda out, t: F.mse_loss(out[0], t)
    report = firstdiv.learning_ledger(model, (x, x), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    assert objective.check != "objective.log_det_mismatch" and objective.status is not Status.FAIL, str(report)
