"""What public-36's first contact showed, each fixed in general (tests/realworld/README.md):

- two GAN discriminators (MSG-GAN, progressive GAN) append the batch's standard deviation to every example as an extra
  feature map (the minibatch standard deviation layer): ``dependency.examples_mixed`` FAILed them at every seed. A
  batch statistic concatenated beside each example's own features, the same for every example, mixes the examples by
  design: now a note. A statistic applied to the features (a mean subtracted over the batch) or an attention
  softmaxed over the batch and concatenated with other features (different for each example) still FAILs;
- SAC-AE steps its encoder with the critic's optimizer (the critic's loss) and with an encoder optimizer of its own
  (the reconstruction loss): ``optimizer.multiple_owners`` FAILed because one owner's tensors were all the other's
  too. That is an extra optimizer for a shared part by design as often as a slip: now a WARN; two optimizers over
  exactly the same tensors still FAIL (tests/instruments/test_public28_premises.py);
- a WRN whose ``model.train()`` is dropped trains every call in eval mode after the evaluation its build ran: its
  BatchNorms had counted one batch (a forward at build), so ``step.norm_statistics_never_estimated`` (which wanted no
  batch counted) and the switch check (which wants a call in train mode first) both passed. Statistics that the few
  batches counted leave at least half the built values ((1 - momentum) ** n >= 1/2) are not estimated either.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")


class _Critic(nn.Module):
    """A discriminator whose last block sees a batch statistic: ``appended`` concatenates the batch's mean standard
    deviation as one more feature (the minibatch standard deviation layer); ``subtracted`` takes the batch's mean away
    from the features instead (the slip); ``pooled`` weights the examples by a softmax over the batch and concatenates
    the pooled features, which differ from example to example."""

    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.how, self.body = how, nn.Sequential(nn.Linear(8, 12), nn.LeakyReLU(0.2))
        self.head = nn.Linear(13 if how == "appended" else 24 if how == "pooled" else 12, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        if self.how == "appended":
            std = torch.sqrt(h.var(0, unbiased=False) + 1e-8).mean()
            h = torch.cat([h, std.view(1, 1).expand(h.shape[0], 1)], 1)
        elif self.how == "subtracted":
            h = h - h.mean(0, keepdim=True)
        else:
            h = torch.cat([h, F.softmax(h, dim=0) * h], 1)
        return self.head(h).squeeze(1)


@pytest.mark.parametrize("how", ["appended", "subtracted", "pooled"])
def test_a_batch_statistic_appended_as_a_feature_is_a_note(how):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 8, generator=g), (torch.rand(16, generator=g) < 0.5).float()
    model = _Critic(how)
    r = firstdiv.learning_ledger(model, (x, y), F.binary_cross_entropy_with_logits,
                                 torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    dep = next(f for f in r.findings if f.where == "DEPENDENCY")
    if how == "appended":
        assert dep.status is not Status.FAIL, dep.message
        assert any("concatenated beside each example's own features" in n for n in r.details["notes"]), r.details
    else:
        assert (dep.status, dep.check) == (Status.FAIL, "dependency.examples_mixed"), dep.message


class _SacAe(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(12, 8), nn.ReLU())
        self.q = nn.Linear(8 + 2, 1)
        self.decoder = nn.Linear(8, 12)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([self.encoder(obs), torch.zeros(obs.shape[0], 2)], 1)).squeeze(1)


def test_an_extra_optimizer_for_a_shared_encoder_is_a_warn():
    model = _SacAe()
    g = torch.Generator().manual_seed(0)
    obs, target = torch.randn(16, 12, generator=g), torch.randn(16, generator=g)
    critic_opt = torch.optim.Adam([*model.encoder.parameters(), *model.q.parameters()], 1e-3)
    encoder_opt = torch.optim.Adam(model.encoder.parameters(), 1e-3)
    decoder_opt = torch.optim.Adam(model.decoder.parameters(), 1e-3)

    def train_step() -> float:
        critic_loss = F.mse_loss(model(obs), target)
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        rec_loss = F.mse_loss(model.decoder(model.encoder(obs)), obs)
        encoder_opt.zero_grad()
        decoder_opt.zero_grad()
        rec_loss.backward()
        encoder_opt.step()
        decoder_opt.step()
        return float(critic_loss)

    report = firstdiv.four_structures(model, critic_opt, (obs, target), F.mse_loss, train_step=train_step)
    owners = [f for f in report.findings if f.check == "optimizer.multiple_owners"]
    assert owners and all(f.status is Status.WARN for f in owners), str(report)
    assert "a part of the other's" in owners[0].evidence["unconfirmed"] or "all owned by the other" in \
        owners[0].evidence["unconfirmed"], owners[0].evidence


class _Bn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.mark.parametrize("counted", [1, 40])
def test_training_on_statistics_counted_from_one_batch_in_eval_mode_fails(counted):
    """One train-mode forward at build (a weight-init pass, a first batch), then an evaluation whose ``model.eval()``
    is never undone: every training forward normalizes with running statistics that are still nine tenths the built
    (0, 1). Forty batches counted are estimated statistics (a frozen batch norm): no finding."""
    model = _Bn()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 6, generator=g) * 3 + 2, torch.randint(0, 3, (32,), generator=g)
    with torch.no_grad():
        for _ in range(counted):
            model(x)
    model.eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)

    report = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    found = [f for f in report.findings if f.check == "step.norm_statistics_never_estimated"]
    if counted == 1:
        assert found and found[0].status is Status.FAIL and found[0].where == "net.1", str(report)
        assert "1 batch(es) counted at momentum 0.1" in found[0].message, found[0].message
    else:
        assert not found, str(report)
