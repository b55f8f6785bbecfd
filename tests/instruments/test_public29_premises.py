"""What public-29's first contact showed, each fixed in general (tests/realworld/README.md):

- BPR matrix factorization and GraphSAINT hand ``diagnose`` a batch of three tensors whose first two are the model's
  positional arguments: it raised InvalidArgument. ``(x1, ..., xk, targets)`` is now read as the forward's arguments
  and the targets; a loss_fn that cannot take them is the user's error, reported as such. On the way: tensor_facts
  raised AttributeError on a packet without a loss (it read the notes list as a dict).
- A SAC critic ``Q(state, action)`` declared with the replay sample ``(states, actions, rewards, next_states, dones)``
  as its targets, from which the loss computes the TD target: ``task.target_in_input`` took ``actions`` (a column of
  the critic's input, by design) for the target. With several target tensors, the loss must be seen to fit the one
  that is copied (lowest with the output at its values).
- GAN zoo's DCGAN clears D's gradients after D's step, before G's backward reaches D again; the next call's
  ``optimizerD.zero_grad()`` erases those: ``step.gradient_discarded`` took it for a step's micro-batches thrown away.
  Windows are now per call of ``train_step``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.instruments._core.batch import split_batch
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.users, self.items = nn.Embedding(10, 4), nn.Embedding(12, 4)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return (self.users(users) * self.items(items)).sum(-1)


def test_a_batch_of_the_forwards_arguments_then_targets_is_split_so() -> None:
    g = torch.Generator().manual_seed(0)
    u, i, y = torch.randint(0, 10, (16,), generator=g), torch.randint(0, 12, (16,), generator=g), torch.rand(16, generator=g)
    model = _Pair()
    b = split_batch((u, i, y), model)
    assert isinstance(b.inputs, tuple) and len(b.inputs) == 2 and b.targets is y
    ws = firstdiv.diagnose(model=model, batch=(u, i, y), loss_fn=F.mse_loss,
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1), stop_at_first=False)
    assert ws.status is not Status.FAIL, ws


def test_a_loss_fn_that_cannot_take_the_split_is_the_users_error_not_a_raise() -> None:
    g = torch.Generator().manual_seed(0)
    u, i, j = (torch.randint(0, 10, (16,), generator=g) for _ in range(3))
    model = _Pair()

    def bpr(_outputs, batch):  # reads the whole batch, as BPR's loss does: the split hands it the last item alone
        users, pos, neg = batch
        return -F.logsigmoid(model(users, pos) - model(users, neg)).mean()
    ws = firstdiv.diagnose(model=model, batch=(u, i, j), loss_fn=bpr,
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1), stop_at_first=False)
    assert ws.status is not Status.FAIL, ws
    facts = ws.report_of("tensor_facts")
    assert facts.status is Status.SKIPPED and "loss_fn raised" in facts.reason, facts


def _critic_program(leak: bool):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    s, a = torch.randn(32, 4, generator=g), torch.rand(32, 1, generator=g) * 2 - 1
    r, s2, d = torch.randn(32, 1, generator=g), torch.randn(32, 4, generator=g), torch.zeros(32, 1)
    critic = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 1))
    target_net = nn.Sequential(nn.Linear(4, 1))

    def td_loss(q, batch):  # the loss computes its own regression target from the sample
        _, _, rewards, next_states, dones = batch
        with torch.no_grad():
            target = rewards + 0.99 * (1 - dones) * target_net(next_states)
        return F.mse_loss(q, target)

    def leaky_loss(q, batch):  # a weighted fit of the first element, which copies an input column
        target, weight = batch
        return (weight * (q - target) ** 2).mean()
    if leak:
        return critic, (torch.cat([s, a], dim=1), (a, torch.rand(32, 1, generator=g) + 0.5)), leaky_loss
    return critic, (torch.cat([s, a], dim=1), (s, a, r, s2, d)), td_loss


def _leak(report) -> list:
    return [f for f in report.findings if f.check == "task.target_in_input" and f.status is Status.FAIL]


def test_a_critics_action_among_its_replay_targets_is_context_not_a_leak() -> None:
    critic, batch, loss_fn = _critic_program(leak=False)
    r = firstdiv.learning_ledger(critic, batch, loss_fn, torch.optim.Adam(critic.parameters(), lr=1e-3))
    assert not _leak(r), [(f.where, f.message) for f in _leak(r)]


def test_a_copied_target_the_loss_fits_among_several_still_fails() -> None:
    critic, batch, loss_fn = _critic_program(leak=True)
    r = firstdiv.learning_ledger(critic, batch, loss_fn, torch.optim.Adam(critic.parameters(), lr=1e-3))
    assert _leak(r), [(f.check, f.status) for f in r.findings]


def _gan_step():
    torch.manual_seed(0)
    d = nn.Sequential(nn.Linear(4, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    gen = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 4))
    opt_d, opt_g = torch.optim.Adam(d.parameters(), lr=1e-3), torch.optim.Adam(gen.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    real = torch.randn(32, 4, generator=g)
    ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)

    def train_step() -> torch.Tensor:
        opt_d.zero_grad()  # D's window opens
        fake = gen(torch.randn(32, 2)).detach()
        loss_d = F.binary_cross_entropy_with_logits(d(real), ones) + F.binary_cross_entropy_with_logits(d(fake), zeros)
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        opt_d.zero_grad()  # cleared after its step; G's backward below reaches D again, erased by the next call
        loss_g = F.binary_cross_entropy_with_logits(d(gen(torch.randn(32, 2))), ones)
        loss_g.backward()
        opt_g.step()
        return loss_d.detach()
    batch = (torch.cat([real, gen(torch.randn(32, 2)).detach()]), torch.cat([ones, zeros]))
    return d, batch, opt_d, train_step


def test_a_discriminator_cleared_after_its_step_discards_nothing_of_its_own_step() -> None:
    d, batch, opt_d, train_step = _gan_step()
    r = firstdiv.step_probe(d, batch, F.binary_cross_entropy_with_logits, opt_d, train_step=train_step)
    bad = [f for f in r.findings if f.check == "step.gradient_discarded" and f.status is Status.FAIL]
    assert not bad, [f.message for f in bad]


class _FlippedGrad(torch.autograd.Function):
    """A hand-written backward with its sign flipped (the classic slip in a custom op): -grad points up the loss."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        return -g


class _Flipped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.head = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FlippedGrad.apply(self.head(torch.relu(self.lin(x))))


def _descent(report):
    return next(f for f in report.findings if f.where == "OBJECTIVE")


def test_a_gradient_that_points_up_the_loss_fails_and_a_loss_that_jumps_is_a_note() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    torch.manual_seed(0)
    flipped = _Flipped()
    f = _descent(firstdiv.six_claims(flipped, (x, y), F.cross_entropy, torch.optim.SGD(flipped.parameters(), lr=0.1)))
    assert f.status is Status.FAIL and f.check == "claim.objective.not_descended", f
    # a loss that jumps where the steps along -grad cross a threshold (GraphSAINT's normalization with epsilon 1e-9
    # over units a ReLU zeroed): it rises by about the jump at every step size, not in proportion to the step
    model = nn.Linear(8, 1)
    t = x.sum(1, keepdim=True) + 5.0  # -grad raises every output
    with torch.no_grad():
        start = float(model(x).mean())

    def jumpy(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, target) + 10.0 * (out.mean() > start + 1e-7).float()
    f = _descent(firstdiv.six_claims(model, (x, t), jumpy, torch.optim.SGD(model.parameters(), lr=0.1)))
    assert f.status is not Status.FAIL, f.message
    assert "not in proportion to the step" in str(f.evidence.get("descent", "")), f.evidence


def _broadcast(report) -> list:
    return [f for f in report.findings if f.check == "objective.shape_broadcast" and f.status is Status.FAIL]


@pytest.mark.parametrize("slip", [False, True], ids=["pairwise_quantiles", "target_not_unsqueezed"])
def test_a_squared_difference_written_out_fails_only_for_rows_met_by_every_target(slip):
    """DDQN's next-state values left [B] against [B, 1] rewards: ``(q - target) ** 2`` is a [B, B] table, every
    Q(s, a) fitted to every example's target (a FAIL). A quantile regression's pairwise TD errors, [B, N, 1] against
    [B, 1, N] with N equal to the batch size (FQF), pair quantiles within each example by design: no finding."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    n = 16
    x, r = torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)
    net = nn.Linear(4, n)

    def dqn_loss(q: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
        q_sa = q[:, :1]
        target = rewards + 0.9 * q.detach().max(1)[0].unsqueeze(1)
        return (0.5 * (q_sa - (target.squeeze(1) if slip else target)) ** 2).mean()

    def quantile_loss(q: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
        target = (rewards + 0.9 * q.detach()).unsqueeze(1)  # [B, 1, N]
        td = target - q.unsqueeze(2)  # [B, N, N]
        return td.abs().mean()
    loss_fn = dqn_loss if slip else quantile_loss
    found = _broadcast(firstdiv.learning_ledger(net, (x, r), loss_fn, torch.optim.SGD(net.parameters(), lr=0.1)))
    assert bool(found) == slip, [f.message for f in found]
