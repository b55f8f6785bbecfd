"""What public-28's first contact showed, each fixed in general (tests/realworld/README.md):

- allRank scores slates with a tanh head against relevance grades in [0, 4] under NeuralNDCG: ``objective.unreachable``
  took outputs == targets for the loss's floor, while a ranking loss is lower still at twice the targets (it reads how
  the scores spread). The premise is now checked: a loss lower at twice the targets, or at the floor with the targets
  mapped affinely into the output's range, is a note;
- USAD trains one encoder with two optimizers, each beside a decoder of its own (two autoencoders, two objectives):
  ``optimizer.multiple_owners`` FAILed. It now FAILs where two owners hold exactly the same tensors (two optimizers
  over one list, a GAN's generator optimizer given the discriminator's parameters); a shared part beside parts of
  their own is a WARN, and so (since public-36's SAC-AE, whose encoder optimizer owns a part of the critic's
  parameters) is one owner's tensors being a part of the other's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")


def _pairwise_ranking_loss(scores: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """RankNet's loss: over each slate's pairs with the first document more relevant, log(1 + exp(-(s_i - s_j))); it
    reads how the scores compare, and falls the wider the well-ordered scores spread."""
    diff = scores[:, :, None] - scores[:, None, :]
    better = (relevance[:, :, None] > relevance[:, None, :]).float()
    return (F.softplus(-diff) * better).sum() / better.sum()


@pytest.mark.parametrize("ranking", [True, False], ids=["ranking_loss", "regression_loss"])
def test_a_bounded_score_under_a_ranking_loss_is_not_unreachable(ranking):
    """public-28: allRank's NeuralNDCG scores slates with a tanh head against relevance grades in [0, 4]:
    ``objective.unreachable`` FAILed, taking outputs == targets for the loss's floor, while a ranking loss is lower
    still at twice the targets (it reads how the scores spread). A regression loss under the same head still FAILs."""
    g = torch.Generator().manual_seed(0)
    x, rel = torch.randn(16, 8, 5, generator=g), torch.randint(0, 5, (16, 8), generator=g).float()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1), nn.Flatten(-2), nn.Tanh())
    loss_fn = _pairwise_ranking_loss if ranking else F.mse_loss
    report = firstdiv.learning_ledger(model, (x, rel), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      overfit_steps=0)
    found = [f for f in report.findings if f.check == "objective.unreachable" and f.status is Status.FAIL]
    assert bool(found) is not ranking, str(report)


class _TwoDecoders(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        self.decoder1, self.decoder2 = nn.Linear(4, 8), nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder1(self.encoder(x))


@pytest.mark.parametrize("second", ["own_decoder", "everything", "same_list"])
def test_a_shared_encoder_of_two_objectives_is_not_failed(second):
    torch.manual_seed(0)
    model = _TwoDecoders()
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    opt1 = torch.optim.Adam([*model.encoder.parameters(), *model.decoder1.parameters()], 1e-3)
    opt2 = torch.optim.Adam({"own_decoder": [*model.encoder.parameters(), *model.decoder2.parameters()],
                             "everything": list(model.parameters()),
                             "same_list": [*model.encoder.parameters(), *model.decoder1.parameters()]}[second], 1e-3)

    def train_step() -> float:
        opt1.zero_grad()
        loss1 = F.mse_loss(model.decoder1(model.encoder(x)), x)
        loss1.backward()
        opt1.step()
        opt2.zero_grad()
        loss2 = F.mse_loss(model.decoder2(model.encoder(x)), x)
        loss2.backward()
        opt2.step()
        return float(loss1)

    report = firstdiv.four_structures(model, opt1, (x, x), F.mse_loss, train_step=train_step)
    owners = [f for f in report.findings if f.check == "optimizer.multiple_owners"]
    assert owners and owners[0].status is (Status.FAIL if second == "same_list" else Status.WARN), str(report)
