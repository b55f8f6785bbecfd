"""What the first contact of batch public-34 showed firstdiv could not read (the new-behaviour tests fail on the code
that measured it): a batch handed as an attribute container (torchtext's ``Batch`` with ``batch.text`` and
``batch.label``, a ``SimpleNamespace``, a dataclass) made ``diagnose`` raise ``InvalidArgument`` before any instrument
ran; it is read as the dict of its tensor attributes now, as a dict batch is (its ``label``/``target``/``y`` key the
targets). Anything else that is neither a tuple nor a dict is still refused with the one-line error."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status
from firstdiv.errors import InvalidArgument
from firstdiv.instruments._core.batch import split_batch


@dataclasses.dataclass
class _Example:
    x: torch.Tensor
    label: torch.Tensor
    batch_size: int = 8


def _program():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    return model, x, y, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("make", [lambda x, y: types.SimpleNamespace(x=x, label=y, batch_size=8),
                                  lambda x, y: _Example(x, y)], ids=["namespace", "dataclass"])
def test_an_attribute_batch_is_read_as_the_dict_of_its_tensors(make):
    model, x, y, _ = _program()
    b = split_batch(make(x, y), model)
    assert b.targets is y
    assert b.inputs is x or b.inputs == {"x": x}


def test_diagnose_runs_on_an_attribute_batch_and_still_finds_the_slip():
    model, x, y, opt = _program()
    batch = types.SimpleNamespace(x=x, label=y, batch_size=8)

    def train_step():  # zero_grad left out: the gradients pile up
        loss = F.cross_entropy(model(batch.x), batch.label)
        loss.backward()
        opt.step()
        return loss.detach()

    ws = firstdiv.diagnose(model=model, batch=batch, loss_fn=F.cross_entropy, optimizer=opt, train_step=train_step)
    assert ws.status is Status.FAIL, ws
    assert ws.first_divergence.kind == "step.grad_accumulation", ws.first_divergence


@pytest.mark.parametrize("bad", [7, object(), types.SimpleNamespace(name="no tensors")])
def test_a_batch_without_tensors_is_still_refused_in_one_line(bad):
    model, *_ = _program()
    with pytest.raises(InvalidArgument, match="Expected `batch` to be a tuple"):
        split_batch(bad, model)


def test_a_known_inputs_probe_of_a_two_input_model_is_read():
    """A (known_inputs, known_targets) probe whose inputs are a tuple (images, poses) for a two-input model: TASK looked
    them up among the batch's examples instead of raising on the tuple."""
    torch.manual_seed(0)

    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(6, 2), nn.Linear(2, 2)

        def forward(self, images: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
            return self.a(images) + self.b(poses)

    model = TwoInputs()
    images, poses = torch.randn(16, 6), torch.randn(16, 2)
    gazes = images[:, :2] + poses
    probe = ((images[:8], poses[:8]), gazes[:8])
    for targets, status in ((gazes, Status.PASS), (gazes.roll(1, 0), Status.FAIL)):
        report = firstdiv.learning_ledger(model, ((images, poses), targets), F.mse_loss,
                                          torch.optim.SGD(model.parameters(), lr=0.05), task_probe=probe)
        task = next(f for f in report.findings if f.where == "TASK")
        assert task.status is status, task.message


class _Codebook(nn.Module):
    """A VQ layer whose codebook follows an EMA of the encodings assigned to it, updated in forward under
    ``if self.training`` (or always: the bug)."""

    def __init__(self, guarded: bool) -> None:
        super().__init__()
        self.guarded = guarded
        self.enc = nn.Linear(4, 2)
        self.register_buffer("codes", torch.randn(5, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        idx = torch.cdist(z, self.codes).argmin(1)
        if self.training or not self.guarded:
            with torch.no_grad():
                for k in idx.unique():
                    self.codes[k] = 0.5 * self.codes[k] + 0.5 * z[idx == k].mean(0)
        return z + (self.codes[idx] - z).detach()


@pytest.mark.parametrize("guarded", [True, False])
def test_an_evaluation_that_updates_the_codebook_writes_into_the_model(guarded):
    torch.manual_seed(0)
    model = _Codebook(guarded)
    x = torch.randn(16, 4)

    def eval_fn(m, batch):
        m.eval()
        with torch.no_grad():
            out = float(F.mse_loss(m(batch[0]), batch[1]))
        m.train()
        return out

    report = firstdiv.six_claims(model, (x, x[:, :2]), F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                                 eval_fn=eval_fn)
    found = next(f for f in report.findings if f.where == "EVALUATION")
    if guarded:
        assert found.status is not Status.FAIL, found.message
    else:
        assert (found.status, found.check) == (Status.FAIL, "claim.evaluation.writes_model"), found.message
        assert "codes" in found.message
