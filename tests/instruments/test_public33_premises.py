"""Premises confirmed before a FAIL, found at the first contact of batch public-33 (the new-behaviour test fails on
the code that measured it): ``update.ascends`` reads the loss train_step reports on its own batches. GAIL's
discriminator step descends its own loss on the rollouts it samples, while the declared batch (initial-policy actions
on expert states) drifts away from what it trains on, so that batch's loss rose at every call, along its gradient, in
the rerun too; a step that climbs its objective climbs the loss it reports, so where that loss fell, the climb on the
batch is no sign error. A negated loss that reports its loss still FAILs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


def _stream(sign: float, rule: float):
    """A regression step on a stream of batches labelled ``rule`` times the declared batch's rule (``rule=-1``: the
    batch the user handed is not what the step trains on); ``sign=-1`` negates the loss before backward. Returns the
    loss on its own batch."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    w = torch.randn(4, 1)
    x = torch.randn(64, 4)
    batch = (x, x @ w)  # the declared batch: one rule
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    stream = torch.Generator().manual_seed(1)

    def train_step() -> torch.Tensor:
        xs = torch.randn(64, 4, generator=stream)
        loss = F.mse_loss(model(xs), xs @ (rule * w))  # the step's own data
        optimizer.zero_grad()
        (sign * loss).backward()
        optimizer.step()
        return loss.detach()

    return model, batch, optimizer, train_step


def _update(model, batch, optimizer, train_step):
    report = firstdiv.learning_ledger(model, batch, F.mse_loss, optimizer, train_step=train_step)
    return next(f for f in report.findings if f.where == "PARAMETER_UPDATE")


def test_a_step_that_descends_the_loss_it_reports_is_not_called_ascending():
    found = _update(*_stream(1.0, -1.0))
    assert found.status is not Status.FAIL, found.message
    assert found.check != "update.ascends", found.message


def test_a_negated_loss_still_ascends_when_the_step_reports_its_loss():
    found = _update(*_stream(-1.0, 1.0))
    assert (found.status, found.check) == (Status.FAIL, "update.ascends"), found.message


class _HyperNet(nn.Module):
    """HypER's shape: a relation embedding made into convolution filters by a linear layer (``fc1``), whose output is
    detached on its way to the loss (the bug), so both the embedding and fc1 lose their path at fc1."""

    def __init__(self) -> None:
        super().__init__()
        self.R = nn.Embedding(5, 8)
        self.fc1 = nn.Linear(8, 3 * 4)
        self.out = nn.Linear(4 * 6, 2)

    def forward(self, r: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        filters = self.fc1(self.R(r)).detach().view(-1, 4, 1, 3)
        h = torch.stack([F.conv1d(x[i : i + 1], filters[i]) for i in range(len(x))]).flatten(1)
        return self.out(h)


def test_reachability_names_the_layer_whose_output_was_cut_before_the_embedding_upstream():
    torch.manual_seed(0)
    model = _HyperNet()
    batch = ((torch.randint(0, 5, (6,)), torch.randn(6, 1, 8)), torch.randint(0, 2, (6,)))
    report = firstdiv.reachability(model, batch, F.cross_entropy)
    div = report.first_divergence
    assert (div.where, div.kind) == ("fc1.weight", "reachability.detached"), str(report)
    assert "fc1" in str(div.observed)
    assert {f.where for f in report.findings if f.status is Status.FAIL} >= {"R.weight", "fc1.weight", "fc1.bias"}


class _FrameDecoder(nn.Module):
    """A teacher-forced frame decoder (the acoustic model's shape): conditioning features and the previous frames in,
    the next frames out, through an LSTM that reads the sequence in order."""

    def __init__(self) -> None:
        super().__init__()
        self.prenet = nn.Linear(6, 16)
        self.cond = nn.Linear(4, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.proj = nn.Linear(16, 6)

    def forward(self, units: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return self.proj(self.lstm(torch.relu(self.prenet(frames) + self.cond(units)))[0])


def _decoder_task(frames_in: str):
    torch.manual_seed(0)
    model = _FrameDecoder()
    mels, units = torch.randn(16, 13, 6), torch.randn(16, 12, 4)
    fed = mels[:, 1:] if frames_in == "targets" else mels[:, :-1]
    batch = ((units, fed), mels[:, 1:])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    report = firstdiv.learning_ledger(model, batch, F.l1_loss, optimizer)
    return next(f for f in report.findings if f.where == "TASK")


def test_a_causal_decoder_fed_the_frames_it_must_predict_is_given_its_targets():
    found = _decoder_task("targets")
    assert (found.status, found.check) == (Status.FAIL, "task.target_in_input"), found.message
    assert "causal along the input's axis 1" in found.message


def test_a_causal_decoder_fed_the_previous_frames_is_not_flagged():
    found = _decoder_task("previous")
    assert found.status is not Status.FAIL, found.message


def test_an_autoencoder_reading_its_whole_input_is_still_a_reconstruction():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12 * 6, 8), nn.ReLU(), nn.Linear(8, 12 * 6), nn.Unflatten(1, (12, 6)))
    x = torch.randn(16, 12, 6)
    report = firstdiv.learning_ledger(model, (x, x), F.mse_loss, torch.optim.Adam(model.parameters(), lr=1e-3))
    found = next(f for f in report.findings if f.where == "TASK")
    assert found.check != "task.target_in_input", found.message


class _BiLM(nn.Module):
    """A bidirectional LSTM language model predicting each middle token from its neighbours' states: the forward
    state before it and the backward state after it (``offset``), or both states at its own position (the bug)."""

    def __init__(self, layers: int, offset: bool) -> None:
        super().__init__()
        self.offset = offset
        self.embedding = nn.Embedding(24, 8)
        self.lstm = nn.LSTM(8, 8, num_layers=layers, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(16, 24)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.lstm(self.embedding(ids))[0]
        fwd, bwd = (out[:, :-2, :8], out[:, 2:, 8:]) if self.offset else (out[:, 1:-1, :8], out[:, 1:-1, 8:])
        return F.log_softmax(self.fc(torch.cat((fwd, bwd), -1)), -1)


def _bilm_dependency(layers: int, offset: bool):
    torch.manual_seed(0)
    model = _BiLM(layers, offset)
    ids = torch.randint(0, 24, (16, 12))
    report = firstdiv.learning_ledger(model, (ids, ids[:, 1:-1]), lambda o, t: F.nll_loss(o.transpose(1, 2), t),
                                      torch.optim.Adam(model.parameters(), lr=1e-3))
    return next(f for f in report.findings if f.where == "DEPENDENCY")


def test_a_bidirectional_lm_reading_the_token_it_predicts_leaks_its_target():
    found = _bilm_dependency(1, offset=False)
    assert (found.status, found.check) == (Status.FAIL, "dependency.target_leak"), found.message
    assert "shifted by 1" in found.message


def test_a_bidirectional_lm_reading_its_neighbours_states_is_not_a_leak():
    found = _bilm_dependency(1, offset=True)
    assert found.status is not Status.FAIL, found.message


def test_a_stacked_bidirectional_lm_leaks_through_its_lower_layer():
    """Two layers: the upper forward state before the token reads the lower backward state, which read the token."""
    found = _bilm_dependency(2, offset=True)
    assert (found.status, found.check) == (Status.FAIL, "dependency.target_leak"), found.message
