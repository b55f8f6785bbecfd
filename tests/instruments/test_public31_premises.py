"""Premises confirmed before a FAIL, found at the first contact of batch public-31 (each test fails on the code that
measured it):

- ``objective.padding_in_loss`` FAILs only where the program shows it treats its padding as padding (an attention
  mask, an embedding's ``padding_idx``, a pad id the model holds, a mask in the batch, an ignore index or a zero class
  weight in the loss); fixed-length rows counted on purpose (a sentence VAE scaled by its padded length, a CRF without
  a mask) are a note;
- ``capability.cannot_overfit`` does not read a loss that is NaN on the first examples alone (a mean over an empty
  subset: no negatives among them) as a model that cannot fit: it overfits the whole batch;
- ``objective.shape_broadcast`` needs the loss at a perfect prediction to fall when the targets are given in the
  outputs' shape (scores ``[N, 1]`` against 0/1 targets ``[N]`` that a loss indexes by is no broadcast);
- ``reachability`` reads parameters the model loss uses under ``no_grad`` as another objective's when a second
  optimizer the step runs owns them too and finds a gradient on them when it steps (TD-MPC's policy).
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status

V, T, B = 12, 10, 16


class Tagger(nn.Module):
    def __init__(self, padding_idx: int | None = None) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, 16, padding_idx=padding_idx)
        self.out = nn.Linear(16, V)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.out(self.emb(ids))


def _rows() -> torch.Tensor:
    """Right-padded rows: tokens 2.., an end token 1, then the pad id 0 to the fixed length."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(2, V, (B, T), generator=g)
    for i in range(B):
        n = 3 + i % 6
        x[i, n] = 1
        x[i, n + 1:] = 0
    return x


def _tags(x: torch.Tensor) -> torch.Tensor:
    """A tag per token (a rule of the token), the end token and the padding kept."""
    return torch.where(x >= 2, 2 + (x * 5) % (V - 2), x)


def _objective(model: nn.Module, batch, loss_fn) -> tuple[firstdiv.Finding, firstdiv.Report]:
    r = firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    return next(f for f in r.findings if f.where == "OBJECTIVE"), r


def _ce(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, V), t.reshape(-1))


def test_fixed_length_rows_counted_on_purpose_are_a_note_not_a_fail() -> None:
    torch.manual_seed(0)
    x = _rows()
    objective, report = _objective(Tagger(), (x, _tags(x)), _ce)
    assert objective.check != "objective.padding_in_loss", objective.message
    assert any("shows no padding of its own" in n for n in report.details["notes"]), report.details["notes"]


def _with_pad_attribute() -> nn.Module:
    model = Tagger()
    model.pad_idx = 0
    return model


def _with_config() -> nn.Module:
    model = Tagger()
    model.config = types.SimpleNamespace(pad_token_id=0, vocab_size=V)
    return model


@pytest.mark.parametrize("signal", ["padding_idx", "pad_attribute", "config", "mask_in_batch", "ignore_index",
                                    "zero_class_weight"])
def test_padding_the_program_knows_is_a_fail_when_the_loss_trains_on_it(signal: str) -> None:
    torch.manual_seed(0)
    x = _rows()
    model = {"padding_idx": lambda: Tagger(padding_idx=0), "pad_attribute": _with_pad_attribute,
             "config": _with_config}.get(signal, Tagger)()
    inputs = (x, (x != 0).long()) if signal == "mask_in_batch" else x
    loss_fn = _ce
    if signal == "ignore_index":  # ignores -1 while the rows are padded with 0: the labels padded with the wrong value
        crit = nn.CrossEntropyLoss(ignore_index=-1)
        loss_fn = lambda out, t: crit(out.reshape(-1, V), t.reshape(-1))
    if signal == "zero_class_weight":  # the end token weighs 0, the pad id still 1
        crit = nn.CrossEntropyLoss(weight=torch.ones(V).index_fill(0, torch.tensor([1]), 0.0))
        loss_fn = lambda out, t: crit(out.reshape(-1, V), t.reshape(-1))
    objective, _ = _objective(model, (inputs, _tags(x)), loss_fn)
    assert (objective.status, objective.check) == (Status.FAIL, "objective.padding_in_loss"), objective.message
    assert objective.evidence.get("padding_known_from"), objective.evidence


def test_a_loss_that_is_nan_on_the_first_examples_alone_is_fitted_on_the_whole_batch() -> None:
    """Positives first, negatives after: the first 8 examples hold no negative, so the negatives' mean is NaN there."""
    torch.manual_seed(0)
    x = torch.randn(32, 6)
    target = torch.cat([torch.ones(16), torch.zeros(16)])
    model = nn.Sequential(nn.Linear(6, 1), nn.Flatten(0))  # one score per example, [N] like the targets

    def loss_fn(score: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return -(F.logsigmoid(score[t == 1]).mean() + F.logsigmoid(-score[t == 0]).mean()) / 2

    r = firstdiv.learning_ledger(model, (x, target), loss_fn, torch.optim.Adam(model.parameters(), 1e-2))
    capability = next(f for f in r.findings if f.where == "CAPABILITY")
    assert capability.status is not Status.FAIL, capability.message


def test_scores_against_binary_targets_the_loss_indexes_by_are_no_broadcast() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 6)
    target = (x[:, 0] > 0).float()
    model = nn.Linear(6, 1)

    def loss_fn(score: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        score = score.squeeze(1)
        return -(F.logsigmoid(score[t == 1]).mean() + F.logsigmoid(-score[t == 0]).mean()) / 2

    objective, _ = _objective(model, (x, target), loss_fn)
    assert objective.check != "objective.shape_broadcast", objective.message
    broadcast, _ = _objective(model, (x, target), lambda o, t: F.mse_loss(o, t))  # [64, 1] - [64] -> [64, 64]
    assert (broadcast.status, broadcast.check) == (Status.FAIL, "objective.shape_broadcast"), broadcast.message


class Agent(nn.Module):
    """A world model whose value target reads the policy under no_grad; the policy has its own loss and optimizer."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.q, self.pi = nn.Linear(4, 8), nn.Linear(8 + 2, 1), nn.Linear(8, 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        z = self.enc(obs)
        with torch.no_grad():
            a = torch.tanh(self.pi(z))
        return self.q(torch.cat([z, a], 1))


def _agent(second_optimizer: bool):
    torch.manual_seed(0)
    model = Agent()
    obs, target = torch.randn(32, 4), torch.randn(32, 1)
    optim = torch.optim.Adam(model.parameters(), 1e-3)  # over every parameter, the policy's too
    pi_optim = torch.optim.Adam(model.pi.parameters(), 1e-3)

    def loss_fn(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(q, t)

    def train_step() -> torch.Tensor:
        optim.zero_grad(set_to_none=True)
        loss = loss_fn(model(obs), target)
        loss.backward()
        optim.step()
        if second_optimizer:
            pi_optim.zero_grad(set_to_none=True)
            z = model.enc(obs).detach()
            pi_loss = -model.q(torch.cat([z, torch.tanh(model.pi(z))], 1)).mean()
            pi_loss.backward()
            pi_optim.step()
        return loss.detach()

    return model, (obs, target), loss_fn, optim, train_step


@pytest.mark.parametrize("second_optimizer", [True, False], ids=["policy_trained_by_its_own_loss", "policy_never_trained"])
def test_a_policy_read_under_no_grad_and_trained_by_its_own_optimizer_is_another_objective(second_optimizer: bool) -> None:
    model, batch, loss_fn, optim, step = _agent(second_optimizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = firstdiv.reachability(model, batch, loss_fn, optimizer=optim, train_step=step)
    fails = [f for f in r.findings if f.status is Status.FAIL and f.where.startswith("pi.")]
    assert bool(fails) is (not second_optimizer), [f.message for f in r.findings]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the watched call left no trace


def test_a_log_softmax_over_time_into_ctc_loss_is_named() -> None:
    """CRNN's CTC: log-probabilities ``[T, N, C]`` normalized over the time axis instead of the classes."""
    torch.manual_seed(0)
    frames, n, classes = 12, 8, 6
    x = torch.randn(n, frames, 5)
    targets = torch.randint(1, classes, (n, 4))
    model = nn.Linear(5, classes)

    def loss_fn(logits: torch.Tensor, t: torch.Tensor, over: int = 0) -> torch.Tensor:
        log_probs = F.log_softmax(logits.permute(1, 0, 2), dim=over)  # [T, N, C]
        return F.ctc_loss(log_probs, t, torch.full((n,), frames), torch.full((n,), t.shape[1]))

    wrong, _ = _objective(model, (x, targets), loss_fn)
    assert (wrong.status, wrong.check) == (Status.FAIL, "objective.nll_of_raw_scores"), wrong.message
    assert "over another axis than the classes" in wrong.message
    right, _ = _objective(model, (x, targets), lambda o, t: loss_fn(o, t, over=2))
    assert right.status is not Status.FAIL, right.message
