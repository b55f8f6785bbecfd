"""step_probe, four_structures, evidence_packet and reachability on program shapes the real-program corpus found:
a sparse embedding's .grad, LBFGS's closure, a declared-frozen backbone, a param group whose base lr is 0 under a
warmup schedule, a GAN whose generator optimizer owns the discriminator, a frozen tied embedding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from firstdiv import InvalidArgument, Status, evidence_packet, four_structures, reachability, step_probe
from firstdiv.instruments._core.frozen import check_frozen, declared, matches
from firstdiv.instruments._core.state import Snapshot


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _fails(report):
    return [f for f in report.findings if f.status is Status.FAIL]


# --- evidence_packet ------------------------------------------------------------------------------------------


class BagClassifier(nn.Module):
    """A bag-of-tokens text classifier with a sparse embedding table (trained by SparseAdam)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(50, 8, mode="mean", sparse=True)
        self.fc = nn.Linear(8, 3)

    def forward(self, inputs):
        text, offsets = inputs
        return self.fc(self.embedding(text, offsets))


def _bag_program():
    torch.manual_seed(0)
    model = BagClassifier()
    text, offsets = torch.randint(0, 50, (40,)), torch.arange(0, 40, 5)
    labels = torch.randint(0, 3, (8,))
    opt = torch.optim.SparseAdam(list(model.embedding.parameters()), lr=0.05)
    return model, ((text, offsets), labels), opt


def test_evidence_packet_describes_a_sparse_grad_by_layout_nnz_and_norm():
    model, batch, opt = _bag_program()
    before = Snapshot.take(model, opt)
    report = evidence_packet(model=model, batch=batch, loss_fn=nn.functional.cross_entropy, optimizer=opt)
    assert before.diff(Snapshot.take(model, opt)) == []
    assert report.status is Status.PASS, report.reason
    after = report.details["packet"]["parameters"]["embedding.weight"]["grad_after_backward"]
    assert after["layout"] == "sparse_coo" and after["nnz"] > 0 and after["state"] == "nonzero"
    nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()  # the same backward on the user's model
    expected = model.embedding.weight.grad.coalesce().values().norm()
    assert after["norm"] == pytest.approx(float(expected), rel=1e-5)
    assert report.details["packet"]["step"]["moved"] >= 1


def _curve_fit():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 32).unsqueeze(1)
    y = 0.7 * x ** 3 - 0.2 * x + 0.1
    model = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, history_size=5)
    return model, (x, y), opt


def test_evidence_packet_steps_lbfgs_with_a_closure_on_the_copy():
    model, batch, opt = _curve_fit()
    before = Snapshot.take(model, opt)
    report = evidence_packet(model=model, batch=batch, loss_fn=nn.functional.mse_loss, optimizer=opt)
    assert before.diff(Snapshot.take(model, opt)) == []
    assert report.status is Status.PASS, report.reason
    step = report.details["packet"]["step"]
    assert step["optimizer"] == "LBFGS" and step["moved"] == step["parameters"] == 4
    assert "step" not in report.details["not_captured"]


# --- reachability: declared-frozen parameters -------------------------------------------------------------------


class FineTune(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 12), nn.ReLU())
        self.head = nn.Linear(12, 2)

    def forward(self, x):
        return self.head(self.backbone(x))


def _finetune():
    torch.manual_seed(0)
    model = FineTune()
    model.backbone.requires_grad_(False)
    return model, (torch.randn(16, 6), torch.randint(0, 2, (16,)))


def test_reachability_declared_frozen_is_a_note_undeclared_a_warn():
    model, batch = _finetune()
    plain = reachability(model, batch, nn.functional.cross_entropy)
    assert plain.status is Status.WARN
    declared_ = reachability(model, batch, nn.functional.cross_entropy, frozen=("backbone.*",))
    assert declared_.status is Status.PASS
    notes = declared_.details["notes"]
    assert len(notes) == 4 and all(n.startswith("note: backbone.") for n in notes)
    partly = reachability(model, batch, nn.functional.cross_entropy, frozen=("backbone.0",))  # a module path
    warned = [f.where for f in partly.findings if f.status is Status.WARN]
    assert partly.status is Status.WARN and warned == ["backbone.2.weight", "backbone.2.bias"]


def test_reachability_frozen_bad_input_is_one_line():
    model, batch = _finetune()
    with pytest.raises(InvalidArgument, match="matches no parameter"):
        reachability(model, batch, nn.functional.cross_entropy, frozen=("backbon.*",))
    with pytest.raises(InvalidArgument, match="fnmatch patterns"):
        reachability(model, batch, nn.functional.cross_entropy, frozen=3)


def test_shared_frozen_matcher():
    model, _ = _finetune()
    assert check_frozen("backbone") == ("backbone",)
    assert matches("backbone.0.weight", "backbone") and not matches("head.weight", "backbone")
    assert sorted(declared(model, ("head",)).values()) == ["head.bias", "head.weight"]


# --- step_probe: a group whose base lr is 0 ------------------------------------------------------------------


def _warmup_program(decay_lr):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(20, 8), nn.Flatten(), nn.Linear(32, 20))
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    groups = [{"params": decay, "weight_decay": 0.01, **({"lr": decay_lr} if decay_lr is not None else {})},
              {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 10))  # linear warmup from 0
    ids = torch.randint(0, 20, (8, 4))
    return model, (ids, torch.randint(0, 20, (8,))), opt, sched


def test_step_probe_fails_a_group_with_base_lr_zero_and_names_it():
    model, batch, opt, _ = _warmup_program(0.0)
    report = step_probe(model, batch, nn.functional.cross_entropy, opt)
    fails = _fails(report)
    assert report.status is Status.FAIL and {f.check for f in fails} == {"step.lr_zero"}
    assert report.first_divergence.where == "0.weight"
    assert "param_group 0" in fails[0].message and fails[0].evidence["param_group"] == 0


def test_step_probe_warmup_lr_zero_is_a_note():
    model, batch, opt, _ = _warmup_program(None)
    assert all(g["lr"] == 0 and g["initial_lr"] > 0 for g in opt.param_groups)
    report = step_probe(model, batch, nn.functional.cross_entropy, opt)
    assert report.status is not Status.FAIL
    assert any(f.message.startswith("note: ") and "lr is 0 now" in f.message for f in report.findings)


# --- four_structures: two optimizers, a frozen tied embedding ----------------------------------------------------


def _gan(bug):
    torch.manual_seed(0)
    netG = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
    netD = nn.Sequential(nn.Linear(8, 1), nn.Sigmoid())
    bce = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4)
    optimizerG = torch.optim.Adam((netD if bug else netG).parameters(), lr=2e-4)
    real = torch.randn(8, 8)

    def train_step():
        optimizerD.zero_grad()
        fake = netG(torch.randn(8, 4))
        loss_d = bce(netD(real).squeeze(1), torch.ones(8)) + bce(netD(fake.detach()).squeeze(1), torch.zeros(8))
        loss_d.backward()
        optimizerD.step()
        optimizerG.zero_grad()
        bce(netD(fake).squeeze(1), torch.ones(8)).backward()
        optimizerG.step()

    batch = (torch.cat([real, netG(torch.randn(8, 4)).detach()]), torch.cat([torch.ones(8), torch.zeros(8)]))
    return netD, optimizerD, batch, train_step


def test_four_structures_names_the_optimizers_sharing_a_parameter():
    netD, optD, _batch, step = _gan(bug=True)
    report = four_structures(netD, optD, train_step=step)
    fails = [f for f in _fails(report) if f.where != "OPTIMIZER"]  # the summary row
    assert [f.check for f in fails] == ["optimizer.multiple_owners"]
    assert report.first_divergence.where == "0.weight"
    assert "optimizer (Adam)" in fails[0].message and "optimizerG (Adam, stepped by train_step)" in fails[0].message
    correct = four_structures(*_gan(bug=False)[:2], train_step=_gan(bug=False)[3])
    assert correct.status is Status.PASS


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(30, 8)
        self.block = nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 30, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.block(self.wte(ids))))


def test_four_structures_warns_a_frozen_tied_embedding():
    torch.manual_seed(0)
    model = TiedLM()
    model.wte.weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    report = four_structures(model, opt)
    warns = [f for f in report.findings if f.status is Status.WARN]
    assert report.status is Status.WARN and [f.check for f in warns] == ["frozen.tied"]
    assert warns[0].where == "wte.weight" and "lm_head" in warns[0].message
    assert four_structures(model, opt, frozen=("wte",)).status is Status.PASS  # declared: meant
    model.wte.weight.requires_grad_(True)
    assert four_structures(model, torch.optim.AdamW(model.parameters())).status is Status.PASS


def test_a_sparse_grad_on_the_users_model_survives_the_guard():
    """EmbeddingBag(sparse=True) leaves a sparse .grad after a backward: the guard compares and restores it."""
    from firstdiv.instruments._core.state import guarded

    bag = nn.EmbeddingBag(20, 4, sparse=True)
    bag(torch.randint(0, 20, (10,)), torch.tensor([0, 5])).sum().backward()
    grad = bag.weight.grad
    kept = grad.coalesce().values().clone()
    with guarded(bag):
        bag.weight.grad = None
    assert bag.weight.grad is grad and torch.equal(bag.weight.grad.coalesce().values(), kept)
