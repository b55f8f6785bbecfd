"""Premises that public-11's first contact showed (tests/realworld/README.md, "What public-11 showed"), each confirmed
on the program's own behaviour."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.instruments._core.state import guarded


class FeaturesAndLogits(nn.Module):
    """A center-loss classifier: 2-d features and 10 class logits, returned in that order."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(8, 2), nn.Linear(2, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.body(x)
        return f, self.head(f)


def test_targets_that_fit_the_logits_a_model_returns_after_its_features_are_no_task_warning() -> None:
    """The ids exceed the first output's size (the 2-d features) but fit the logits beside it, which loss_fn reads:
    a note, not a TASK warning about the label range."""
    torch.manual_seed(0)
    model, x = FeaturesAndLogits(), torch.randn(32, 8)
    y = torch.arange(32) % 10

    def loss_fn(outputs: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        features, logits = outputs
        return F.cross_entropy(logits, targets) + 1e-3 * features.pow(2).sum(1).mean()
    r = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.SGD(model.parameters(), 0.1), overfit_steps=0)
    task = next(f for f in r.findings if f.where == "TASK")
    assert task.status.value == "PASS", task.message
    assert "outputs[1]" in task.message


def _refeeding(clear_between: bool):
    """DeepRecommender's shape: a step on the batch, then a second update on the model's own output re-fed."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.SELU(), nn.Linear(4, 6))
    x = torch.randn(16, 6)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train_step() -> float:
        opt.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, x)
        loss.backward()
        opt.step()
        refed = out.detach()
        if clear_between:
            opt.zero_grad()
        F.mse_loss(model(refed), refed).backward()
        opt.step()
        return float(loss)
    return model, x, opt, train_step


def test_a_second_step_in_one_call_on_the_gradient_the_first_applied_is_grad_accumulation() -> None:
    model, x, opt, step = _refeeding(clear_between=False)
    r = firstdiv.step_probe(model, (x, x), F.mse_loss, opt, train_step=step)
    assert r.status.value == "FAIL"
    assert r.first_divergence.kind == "step.grad_accumulation"
    assert "applied twice" in next(f.message for f in r.findings if f.status.value == "FAIL")


def test_a_second_step_after_zero_grad_is_sound() -> None:
    model, x, opt, step = _refeeding(clear_between=True)
    r = firstdiv.step_probe(model, (x, x), F.mse_loss, opt, train_step=step)
    assert not any(f.check == "step.grad_accumulation" and f.status.value == "FAIL" for f in r.findings)



class _SentenceAttention(nn.Module):
    """A document classifier pooling its sentences by attention; ``over_batch`` normalizes the weights over the
    documents of the batch (softmax dim=0) instead of over the sentences."""

    def __init__(self, over_batch: bool) -> None:
        super().__init__()
        self.over_batch = over_batch
        self.encode, self.score, self.head = nn.Linear(5, 8), nn.Linear(8, 1), nn.Linear(8, 3)

    def forward(self, docs: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.encode(docs))  # [B, S, 8]
        w = F.softmax(self.score(h).squeeze(-1), dim=0 if self.over_batch else 1)
        return self.head((w.unsqueeze(-1) * h).sum(1))


class _Graph(nn.Module):
    """Nodes meet through a fixed adjacency on purpose (the batch is the graph): no reduction carries the mixing."""

    def __init__(self, n: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("adj", (torch.rand(n, n, generator=g) < 0.3).float())
        self.lin = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adj @ self.lin(x)


def _mixed(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list:
    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), 0.1),
                                 overfit_steps=0)
    return [f for f in r.findings if f.check == "dependency.examples_mixed" and f.status.value == "FAIL"]


def test_a_softmax_over_the_batch_inside_forward_mixes_the_examples_and_is_named() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 4, 5)
    y = x[:, 0, :3].argmax(1)
    found = _mixed(_SentenceAttention(over_batch=True), x, y)
    assert found and found[0].evidence["mixing_op"] == "softmax"
    assert found[0].evidence["mixing_module"] == "(root module)"
    assert not _mixed(_SentenceAttention(over_batch=False), x, y)


def test_examples_that_meet_by_design_or_through_batch_norm_are_no_finding() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 5)
    y = x[:, :3].argmax(1)
    assert not _mixed(_Graph(16), x, y)
    assert not _mixed(nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)), x, y)


class _CarriedState(nn.Module):
    """A recurrent classifier that keeps its last hidden state in a plain list between calls (EdgeML's keyword
    spotter: ``self.hidden_states[l] = output.detach()[-1]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell, self.head = nn.GRUCell(5, 8), nn.Linear(8, 3)
        self.hidden_states = [None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden_states[0]
        h = torch.zeros(x.shape[0], 8) if h is None or h.shape[0] != x.shape[0] else h
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        self.hidden_states[0] = h.detach()
        return self.head(h)


def test_a_list_the_forward_writes_into_holds_the_same_objects_after_an_instrument() -> None:
    torch.manual_seed(0)
    model, x = _CarriedState(), torch.randn(8, 4, 5)
    y = x[:, 0, :3].argmax(1)
    with guarded(model):  # how every instrument that runs the user's own model holds it
        model(x)
    assert model.hidden_states == [None], "the slot the forward filled is empty again"
    firstdiv.four_structures(model=model, batch=(x, y), loss_fn=F.cross_entropy,
                             optimizer=torch.optim.SGD(model.parameters(), 0.1))
    assert model.hidden_states == [None]


def test_a_stream_whose_next_batches_oppose_the_probe_batch_is_not_a_climbing_step() -> None:
    """A correct SGD step on a data stream: its first six batches carry the probe batch's inputs with the other
    label (descending on them climbs the probe batch's loss, by the data, not the step); the batches after those are
    ordinary. The same start run again, on the stream's next batches, does not climb: no update.ascends."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    x = torch.randn(32, 4)
    y = (x[:, 0] > 0).long()
    stream = iter([(x, 1 - y)] * 6 + [(x, y)] * 40)  # two calls go to other links first
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train_step() -> float:
        xb, yb = next(stream)
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return float(loss)
    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, opt, train_step=train_step, overfit_steps=0)
    update = next(f for f in r.findings if f.where == "PARAMETER_UPDATE")
    assert update.status.value != "FAIL", update.message


def _bn_program(freeze_module_by_module: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(16, 5)
    y = x[:, :3].argmax(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step() -> float:
        if freeze_module_by_module:  # RetinaNet's freeze_bn(): the model trains, its batch norms stay frozen
            model.train()
            for m in model.modules():
                if isinstance(m, nn.BatchNorm1d):
                    m.eval()
        else:
            model.eval()  # the whole model left in eval mode
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)
    return model, (x, y), opt, train_step


def test_batch_norm_frozen_module_by_module_is_a_warning_and_a_model_in_eval_mode_a_failure() -> None:
    """public-12's retinanet_csv freezes its batch norms on purpose while the model trains (from random weights in
    the port, so their statistics are the built ones): a warning, not "the model is trained in eval mode"."""
    model, batch, opt, step = _bn_program(freeze_module_by_module=True)
    r = firstdiv.step_probe(model, batch, F.cross_entropy, opt, train_step=step)
    norm = [f for f in r.findings if f.check == "step.norm_statistics_never_estimated"]
    assert norm and norm[0].status.value == "WARN"
    model, batch, opt, step = _bn_program(freeze_module_by_module=False)
    r = firstdiv.step_probe(model, batch, F.cross_entropy, opt, train_step=step)
    assert r.first_divergence is not None and r.first_divergence.kind == "step.norm_statistics_never_estimated"


def test_a_divergence_only_without_the_programs_own_clipping_is_inconclusive_not_cannot_overfit() -> None:
    """public-12's vdsr_sr trains at SGD lr 0.1 held stable by its own gradient clipping: the ledger's copy steps
    without it and diverges at every lr down to 100x below, while train_step's own calls keep the loss finite."""
    torch.manual_seed(0)
    model = nn.Linear(10, 1)
    x = 100 * torch.randn(32, 10)
    y = x @ torch.randn(10, 1) * 0.01
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train_step() -> float:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        opt.step()
        return float(loss)
    r = firstdiv.learning_ledger(model, (x, y), F.mse_loss, opt, train_step=train_step)
    cap = next(f for f in r.findings if f.where == "CAPABILITY")
    assert cap.status.value == "WARN" and "train_step's own calls kept the loss finite" in cap.message, cap.message


def _proto_loss(emb: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A prototypical-network loss: class prototypes are the mean embeddings, logits the negated squared distances."""
    protos = torch.stack([emb[y == c].mean(0) for c in range(int(y.max()) + 1)])
    return F.cross_entropy(-torch.cdist(emb, protos).pow(2), y)


def _claim_fails(model: nn.Module, batch, loss_fn) -> list:
    r = firstdiv.six_claims(model, batch, loss_fn, torch.optim.SGD(model.parameters(), 0.01))
    return [f for f in r.findings if f.check == "claim.objective.wrong_direction" and f.status.value == "FAIL"]


def test_embeddings_a_distance_loss_reads_are_not_taken_for_class_scores() -> None:
    """public-12's prototypical network: outputs [N, 64] and labels in [0, 5) look like class scores; raising the
    label's coordinate moves a distance loss by chance, and raising the other coordinates moves it the same way."""
    hits = 0
    for seed in range(6):
        torch.manual_seed(seed)
        x, y = torch.randn(30, 8), torch.arange(30) % 5
        hits += bool(_claim_fails(nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64)), (x, y), _proto_loss))
    assert hits == 0


def test_a_loss_that_punishes_the_correct_class_is_still_wrong_direction() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(30, 8), torch.arange(30) % 5
    assert _claim_fails(nn.Linear(8, 5), (x, y), lambda out, t: F.cross_entropy(-out, t))


class _SAM(torch.optim.Optimizer):
    """Sharpness-aware minimization as davda54/sam writes it: a wrapper over a base optimizer sharing its groups,
    stepped by first_step / second_step (step() itself needs a closure)."""

    def __init__(self, params, base_optimizer, rho: float = 0.05, **kwargs) -> None:
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self) -> None:
        norm = torch.norm(torch.stack([p.grad.norm() for g in self.param_groups for p in g["params"]
                                       if p.grad is not None]))
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * g["rho"] / (norm + 1e-12))
        self.zero_grad()

    @torch.no_grad()
    def second_step(self) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if "old_p" in self.state[p]:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        self.zero_grad()

    def step(self, closure=None):
        assert closure is not None, "Sharpness Aware Minimization requires closure, but it was not provided"
        closure = torch.enable_grad()(closure)
        self.first_step()
        closure()
        self.second_step()


def test_a_sharpness_aware_optimizer_is_probed_through_its_base_optimizer_without_raising() -> None:
    """public-12's sam_wrn_cifar: step_probe raised the optimizer's own AssertionError (its step wants a closure), and
    the step hooks sat on the wrapper, whose step() the loop never calls."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(16, 5)
    y = x[:, :3].argmax(1)
    opt = _SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)

    def train_step() -> float:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.first_step()
        F.cross_entropy(model(x), y).backward()
        opt.second_step()
        return float(loss)
    r = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    assert r.status.value != "FAIL", r.first_divergence
