"""The learning ledger on programs in the shapes real code takes: recipe learning rates, a VAE, sequence-first
batches, manual updates through the user's train_step, a head-only optimizer over frozen parameters, sparse
gradients. Correct programs get no FAIL; each bug stops at its link with its kind, in the program's names."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import learning_ledger
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")

LINKS = ["TASK", "OBJECTIVE", "DEPENDENCY", "GRADIENT", "OPTIMIZER_OWNERSHIP", "PARAMETER_UPDATE", "CAPABILITY"]


def run(model, batch, loss_fn, optimizer=None, **kw):
    before = Snapshot.take(model, optimizer)
    report = learning_ledger(model, batch, loss_fn, optimizer, **kw)
    assert before.diff(Snapshot.take(model, optimizer)) == []
    return report


def link(report, name):
    return report.findings[LINKS.index(name)]


def no_fail(report):
    assert report.status is not Status.FAIL, str(report)


def mlp_program(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 10, generator=g)
    y = (x[:, :3] @ torch.randn(3, 3, generator=g)).argmax(1)
    return model, (x, y)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("make_opt", [lambda p: torch.optim.SGD(p, lr=1e-3), lambda p: torch.optim.AdamW(p, lr=1e-5),
                                      lambda p: torch.optim.AdamW(p, lr=1e-4)], ids=["sgd1e-3", "adamw1e-5", "adamw1e-4"])
def test_recipe_learning_rates_are_not_a_failure(seed, make_opt):
    model, batch = mlp_program(seed)
    opt = make_opt(model.parameters())
    t0 = time.perf_counter()
    report = run(model, batch, F.cross_entropy, opt)
    elapsed = time.perf_counter() - t0
    no_fail(report)
    cap = link(report, "CAPABILITY")
    assert cap.status is Status.PASS and "cannot represent" not in cap.message, str(report)
    assert any("fitted at lr" in n and "the program uses" in n for n in report.details["notes"]), report.details
    assert elapsed < 1.5, elapsed


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.mu, self.logvar = nn.Linear(20, 16), nn.Linear(16, 4), nn.Linear(16, 4)
        self.dec = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 20))

    def forward(self, x):
        h = torch.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return torch.sigmoid(self.dec(z)), mu, logvar


def vae_loss(out, x):
    recon, mu, logvar = out
    bce = F.binary_cross_entropy(recon, x, reduction="sum")
    return bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


@pytest.mark.parametrize("seed", [0, 1])
def test_vae_elbo_is_judged_learning_with_a_note(seed):
    torch.manual_seed(seed)
    model = VAE()
    x = (torch.rand(32, 20, generator=torch.Generator().manual_seed(seed)) > 0.5).float()
    report = run(model, (x, x), vae_loss, torch.optim.Adam(model.parameters(), lr=1e-3))
    no_fail(report)
    assert link(report, "CAPABILITY").status is Status.PASS, str(report)
    assert any("no known floor" in n for n in report.details["notes"])


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.GRU(5, 16), nn.Linear(16, 3)

    def forward(self, x):  # x: [T, B, F], sequence-first
        _, h = self.rnn(x)
        return self.head(h[-1])


def test_sequence_first_batches_take_examples_along_axis_1():
    torch.manual_seed(0)
    model = GRUClassifier()
    x = torch.randn(12, 16, 5)
    y = (x.sum(0)[:, 0] > 0).long()
    report = run(model, (x, y), F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-2))
    no_fail(report)
    cap = link(report, "CAPABILITY")
    assert cap.status is Status.PASS and cap.evidence["examples"] == 8, str(report)


def test_flattened_targets_overfit_the_whole_batch_and_say_so():
    torch.manual_seed(0)
    emb, head = nn.Embedding(20, 16), nn.Linear(16, 20)
    model = nn.Sequential(emb, head)
    ids = torch.randint(0, 20, (6, 4))  # [T, B], targets flattened to [T*B]
    targets = torch.roll(ids, -1, 0).reshape(-1)
    report = run(model, (ids, targets), lambda o, t: F.cross_entropy(o.reshape(-1, 20), t),
                 torch.optim.Adam(model.parameters(), lr=1e-2), task="classification")
    no_fail(report)
    assert any("overfits the whole batch" in n for n in report.details["notes"]), report.details


def regression_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3


def manual_sgd_step(model, batch, lr, sign=1.0):
    x, y = batch

    def train_step():
        loss = F.mse_loss(model(x), y)
        model.zero_grad()
        (sign * loss).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
        return loss
    return train_step


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_manual_updates_with_train_step_and_no_optimizer(seed):
    torch.manual_seed(seed)
    model, batch = nn.Linear(3, 1), regression_data(seed)
    report = run(model, batch, F.mse_loss, None, train_step=manual_sgd_step(model, batch, 0.05))
    no_fail(report)
    assert "note: no torch.optim optimizer" in link(report, "OPTIMIZER_OWNERSHIP").message
    assert link(report, "PARAMETER_UPDATE").status is Status.PASS and link(report, "CAPABILITY").status is Status.PASS
    assert "restored" in report.side_effects


def test_training_that_ascends_stops_at_parameter_update():
    torch.manual_seed(0)
    model, batch = nn.Linear(3, 1), regression_data()
    report = run(model, batch, F.mse_loss, None, train_step=manual_sgd_step(model, batch, 0.05, sign=-1.0))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("PARAMETER_UPDATE", "update.ascends"), str(report)
    assert "weight" in link(report, "PARAMETER_UPDATE").message


def test_negated_loss_inside_train_step_with_an_optimizer_ascends():
    model, (x, y) = mlp_program(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train_step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        (-loss).backward()
        opt.step()
        return loss
    report = run(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("PARAMETER_UPDATE", "update.ascends"), str(report)


def test_a_diverging_step_size_names_the_lr_and_group():
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(3, 1), regression_data()
    x = x * 10
    opt = torch.optim.SGD(model.parameters(), lr=1.0)

    def train_step():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    report = run(model, (x, y), F.mse_loss, opt, train_step=train_step)
    div = report.first_divergence
    assert (div.where, div.kind) == ("PARAMETER_UPDATE", "update.diverges"), str(report)
    ev = link(report, "PARAMETER_UPDATE").evidence
    assert ev["lr"] == 1.0 and ev["param_group"] == 0


def _loops(model, x, y):
    """Correct user loops: momentum + clipping + a scheduler, gradient accumulation, dropout, LBFGS."""
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(sgd, 1, gamma=0.9)

    def momentum_clip():
        sgd.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        sgd.step()
        sched.step()
        return loss
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)

    def accumulate():
        adam.zero_grad()
        for xs, ys in zip(x.chunk(4), y.chunk(4)):
            (F.cross_entropy(model(xs), ys) / 4).backward()
        adam.step()
    lbfgs = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)

    def lbfgs_step():
        def closure():
            lbfgs.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss
        return lbfgs.step(closure)
    return [(sgd, momentum_clip), (adam, accumulate), (lbfgs, lbfgs_step)]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["momentum-clip-scheduler", "accumulation", "lbfgs"])
def test_correct_user_loops_do_not_fail(which):
    torch.manual_seed(0)
    base, (x, y) = mlp_program(0)
    model = nn.Sequential(base[0], nn.Dropout(0.1), *list(base)[1:])
    opt, step = _loops(model, x, y)[which]
    report = run(model, (x, y), F.cross_entropy, opt, train_step=step)
    no_fail(report)
    assert link(report, "PARAMETER_UPDATE").evidence["source"] == "train_step"
    assert "restored" in report.side_effects


class Finetune(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.body(x))


def test_optimizer_owning_only_the_frozen_head_says_so_first():
    torch.manual_seed(0)
    model = Finetune()
    model.head.requires_grad_(False)
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    _, batch = mlp_program(0)
    report = run(model, batch, F.cross_entropy, opt)
    div = report.first_divergence
    assert (div.where, div.kind) == ("OPTIMIZER_OWNERSHIP", "optimizer.owns_only_frozen"), str(report)
    message = link(report, "OPTIMIZER_OWNERSHIP").message
    assert message.startswith("everything the optimizer owns is frozen: head") and "head" in div.observed
    assert "body.0 (weight, bias)" in message and "body.0.weight," not in message


def test_sparse_embedding_bag_with_sparse_adam_has_no_raw_exception():
    torch.manual_seed(0)

    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag, self.head = nn.EmbeddingBag(50, 8, sparse=True), nn.Linear(8, 2)

        def forward(self, ids):
            return self.head(self.bag(ids))
    model = Bag()
    ids = torch.randint(0, 50, (32, 6))
    y = (ids[:, 0] > 25).long()
    opt = torch.optim.SparseAdam(list(model.bag.parameters()), lr=1e-2)
    dense = torch.optim.Adam(model.head.parameters(), lr=1e-2)

    def train_step():
        opt.zero_grad()
        dense.zero_grad()
        loss = F.cross_entropy(model(ids), y)
        loss.backward()
        opt.step()
        dense.step()
        return loss
    report = run(model, (ids, y), F.cross_entropy, None, train_step=train_step)
    no_fail(report)
    assert link(report, "PARAMETER_UPDATE").status is Status.PASS, str(report)
