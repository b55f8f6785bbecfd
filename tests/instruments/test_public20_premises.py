"""The false FAILs public-20 showed at first contact, each fixed in general (tests/realworld/first_contact.json):

- ``structure.unregistered_module`` on NOCD's GCN (every seed): it keeps ``nn.BatchNorm1d(affine=False,
  track_running_stats=False)`` layers in a plain list. Such a norm has no parameter and no buffer and uses the batch's
  statistics in eval mode too, so nothing the registry would carry is hidden; a norm with running statistics, or a
  Dropout with p > 0, in the same list still FAILs.
- ``claim.objective.not_descended`` on GAN_stability's discriminator step (seed 1): its loss evaluates the
  discriminator it closes over on the generated images. six_claims wraps the user's loss to record why its probes
  fail, and that wrapper hid the closure from ``copy_origin.reading``: the descent probe stepped a copy while the loss's
  second term still read the user's discriminator, so the step along the copy's full gradient could raise the loss it
  evaluated.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


class ListNormGCN(nn.Module):
    """Linear layers in a ModuleList, the norms between them in a plain list (NOCD's GCN keeps them so)."""

    def __init__(self, norm: str) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 16), nn.Linear(16, 4)])
        make = {"stateless_norm": lambda: nn.BatchNorm1d(16, affine=False, track_running_stats=False),
                "running_norm": lambda: nn.BatchNorm1d(16, affine=False),
                "dropout": lambda: nn.Dropout(0.5), "no_dropout": lambda: nn.Dropout(0.0)}[norm]
        self.norms = [make()]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](self.norms[0](torch.relu(self.layers[0](x))))


@pytest.mark.parametrize(("norm", "fails"), [("stateless_norm", False), ("no_dropout", False), ("running_norm", True),
                                             ("dropout", True)])
def test_a_norm_without_running_statistics_in_a_plain_list_hides_nothing(norm: str, fails: bool) -> None:
    torch.manual_seed(0)
    model = ListNormGCN(norm)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    r = firstdiv.four_structures(model, opt, batch=(x, y), loss_fn=F.cross_entropy)
    hits = {f.status.name for f in r.findings if f.check == "structure.unregistered_module"}
    assert ("FAIL" in hits) is fails, (norm, hits, r.summary)
    if not fails:
        assert hits == {"PASS"}, hits


def test_the_loss_six_claims_probes_reads_the_copy_it_evaluates() -> None:
    from firstdiv.instruments._core.copy_origin import reading
    from firstdiv.instruments._core.copying import model_copy
    from firstdiv.instruments.six_claims._objective_probes import Recording

    disc = nn.Linear(3, 1)

    def loss_fn(d_real: torch.Tensor, x_fake: torch.Tensor) -> nn.Module:
        return disc

    copy = model_copy(disc)
    wrapped = Recording(loss_fn)
    swapped = reading(wrapped, copy)
    assert isinstance(swapped, Recording) and swapped(None, None) is copy
    assert swapped.errors is wrapped.errors  # what a probe records reaches the report either way
    assert reading(wrapped, disc) is wrapped


class Depth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.mark.parametrize("pose_trained", [True, False])
def test_a_loss_reading_a_second_network_the_optimizer_trains_is_not_judged_on_a_copy_of_the_model(pose_trained) -> None:
    """SfMLearner (seed 2): the depth network is the model, its photometric loss reads the pose network the same
    optimizer trains. A copy of the depth network cannot train the pose network the loss reads, so its plateau is no
    evidence that the model cannot fit: CAPABILITY is SKIPPED saying why. A fixed network the loss reads (not trained
    by the program) leaves the check as it was."""
    torch.manual_seed(0)
    depth, pose = Depth(), nn.Linear(6, 6)
    params = [*depth.parameters(), *pose.parameters()] if pose_trained else list(depth.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    x = torch.randn(16, 6)

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out * pose(target), target)

    r = firstdiv.learning_ledger(depth, (x, x), loss_fn, opt)
    cap = next(f for f in r.findings if f.where == "CAPABILITY")
    outside = cap.status.name == "SKIPPED" and "trained outside the copy" in cap.message
    assert outside is pose_trained, cap.message


class MemoryBank(nn.Module):
    """A forward that first updates a buffer in place, then computes with it (TS2Vec, GRU4Rec keep state so): the
    program's own loop runs one forward before each backward and never meets the in-place error."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("bank", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.bank.mul_(0.9).add_(0.1)
        return self.lin(x) * self.bank


def test_gradient_is_judged_when_another_forward_of_the_copy_wrote_a_tensor_the_kept_loss_saved() -> None:
    """TS2Vec and GRU4Rec: the ledger's later forwards on its copy updated the buffer the kept loss's graph saved, so
    its backward raised and GRADIENT (and every link after it) went unjudged on a correct program."""
    torch.manual_seed(0)
    model = MemoryBank()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, opt)
    grad = next(f for f in r.findings if f.where == "GRADIENT")
    assert grad.status.name == "PASS", grad.message


class ZeroesMissing(nn.Module):
    """TS2Vec's encoder: ``x[~nan_mask] = 0`` on its own input before anything else."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x[torch.isnan(x)] = 0.0
        return self.lin(x)


def test_a_model_writing_its_input_in_place_leaves_the_users_batch_untouched_by_diagnose() -> None:
    """The program's own loop writes into its batch on every forward; the forwards firstdiv runs (every instrument,
    the ledger's calls with the loop's own arguments) get copies, so not even the version counter of the user's batch
    moves."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness import assert_no_trace, watched

    torch.manual_seed(0)
    model = ZeroesMissing()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))

    def train_step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.clone()), y)
        loss.backward()
        opt.step()
        return loss

    program = SimpleNamespace(model=model, optimizer=opt, batch=(x, y))
    out = assert_no_trace(lambda: firstdiv.diagnose(model=model, batch=(x, y), loss_fn=F.cross_entropy, optimizer=opt,
                                                    train_step=train_step, stop_at_first=False), watched(program))
    assert not isinstance(out, Exception), out
