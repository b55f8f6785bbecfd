"""What the public-15 batch showed at first contact, each cause reproduced on a small program and confirmed fixed:

- a batch that is one tensor (unlabelled inputs; the loss reads the outputs alone) was refused (RAISED);
- ``optimizer.step(closure)`` runs the backward inside the step: it was read as a step before the backward (FAIL);
- (public-16) a physics-informed loss whose residual term is computed from the program's own model, which no training
  of the ledger's copy can lower, plateaued the copy's loss: read as a model that cannot fit (FAIL);
- a ``loss_fn`` that computes its loss from the program's own model (not from the outputs it is given) leaves the
  ledger's trained copy without a gradient: that was read as weights too slow to move (``capability.cannot_overfit``);
- a view that regroups each example's features into rows of a batch of vectors, whose sizes happen to swap ([16, 512]
  to [512, 16]), keeps every example's output its own: that was ``layout.values_moved`` FAIL;
- a model that stores its recurrent state on itself (``self.hidden = ...``), re-initialized by the user's loop, made
  the ledger's second forward backward through a freed graph (GRADIENT SKIPPED);
- the parameters of a loss module (Proxy-Anchor's proxies) that the optimizer trains beside the model were "tensors
  not in the model" (WARN);
- a target sliced inside ``train_step`` for an ``nn.L1Loss`` (whose node saves no target) was never read by TASK;
- (public-16) a DenseNet with reentrant checkpointing refuses ``autograd.grad``: ``step_probe`` raised on it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = __import__("pytest").mark.usefixtures("one_thread")


def _finding(report: firstdiv.Report, where: str) -> firstdiv.Finding:
    return next(f for f in report.findings if f.where == where)


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(x), dim=-1)


def _spread(embeds: torch.Tensor, _targets: object = None) -> torch.Tensor:
    """An unsupervised loss on the outputs alone: pull the embeddings of consecutive pairs together."""
    return (embeds[0::2] - embeds[1::2]).pow(2).sum(-1).mean()


def test_a_tensor_batch_is_unlabelled_inputs():
    model = _Encoder()
    x = torch.randn(16, 10, generator=torch.Generator().manual_seed(0))
    r = firstdiv.learning_ledger(model, x, _spread, torch.optim.Adam(model.parameters(), 1e-2), overfit_steps=20)
    assert r.status.value in ("PASS", "WARN"), r.reason
    ws = firstdiv.diagnose(model=model, batch=x, loss_fn=_spread, optimizer=torch.optim.Adam(model.parameters(), 1e-2))
    assert ws.status.value != "FAIL", ws


def test_a_step_with_a_closure_runs_its_backward_inside():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 6), torch.randint(0, 2, (32,))

    def train_step():
        def closure():
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss
        opt.zero_grad()
        return opt.step(closure).detach()

    r = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    assert not [f for f in r.findings if f.status.name == "FAIL"], r


def test_a_loss_from_the_programs_own_model_is_not_a_model_that_cannot_fit():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))

    def loss_fn(_outputs, targets):  # recomputes the outputs with the user's model, ignoring the ones it is given
        return F.cross_entropy(model(x[:len(targets)]), targets)

    r = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.Adam(model.parameters(), 1e-2), overfit_steps=40)
    capability = _finding(r, "CAPABILITY")
    # the loss closes over the model: on each copy it reads that copy (copy_origin), so the copy's fit is judged
    assert capability.status.name == "PASS", capability.message
    global _GLOBAL_MODEL
    _GLOBAL_MODEL = model  # reached through a global instead, the loss reads the user's model: no copy can lower it
    r = firstdiv.learning_ledger(model, (x, y), _global_loss, torch.optim.Adam(model.parameters(), 1e-2), overfit_steps=40)
    capability = _finding(r, "CAPABILITY")
    assert capability.status.name == "SKIPPED" and "program's own model" in capability.message, capability.message


_GLOBAL_MODEL: nn.Module | None = None


def _global_loss(_outputs, targets):
    return F.cross_entropy(_GLOBAL_MODEL(torch.randn(len(targets), 6, generator=torch.Generator().manual_seed(0))),
                           targets)


def test_a_loss_term_from_the_programs_own_model_is_read_on_the_copy():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.linspace(0, 1, 10)[:, None]
    y, grid = torch.exp(-2 * x) * torch.cos(6 * x), torch.linspace(0, 1, 30)[:, None].requires_grad_(True)

    def physics(net: nn.Module) -> torch.Tensor:  # the residual of y'' + 4y' + 40y = 0 on a grid, from net itself
        u = net(grid)
        du = torch.autograd.grad(u, grid, torch.ones_like(u), create_graph=True)[0]
        ddu = torch.autograd.grad(du, grid, torch.ones_like(du), create_graph=True)[0]
        return 1e-4 * (ddu + 4 * du + 40 * u).pow(2).mean()

    def loss_fn(out, target):
        return (out - target).pow(2).mean() + physics(model)

    r = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.Adam(model.parameters(), 1e-3))
    capability = _finding(r, "CAPABILITY")  # the residual reads each copy the ledger trains (the closure's model)
    assert capability.status.name != "SKIPPED" and "program's own model" not in capability.message, capability.message


class _Householder(nn.Module):
    """Each example's 512 features read as 32 vectors of 16 (examples x vectors as one axis), as a flow's amortized
    reflections are: with 16 examples the view is [16, 512] -> [512, 16]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.amor = nn.Linear(8, 512)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q = self.amor(h).view(-1, 16)
        v = q / q.norm(dim=1, keepdim=True)
        return v.view(h.shape[0], -1).sum(-1)


def test_examples_regrouped_with_their_features_are_not_mixed():
    r = firstdiv.tensor_trace(_Householder(), torch.randn(16, 8))
    moved = [f for f in r.findings if f.check == "layout.values_moved"]
    assert moved and all(f.status.name == "WARN" for f in moved), r
    assert moved[0].evidence["output_crosstalk"] is False


class _SeqFirstByView(nn.Module):
    """[B, T, C] viewed as [T, B, C] (a reshape where a permute was meant) into a recurrent layer: examples mix."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.GRU(3, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x.view(x.shape[1], x.shape[0], x.shape[2]))[0][-1]


def test_examples_mixed_by_a_view_still_fail():
    r = firstdiv.tensor_trace(_SeqFirstByView(), torch.randn(4, 6, 3))
    moved = [f for f in r.findings if f.check == "layout.values_moved"]
    assert moved and moved[0].status.name == "FAIL", r
    assert moved[0].evidence["output_crosstalk"] is True


class _Stateful(nn.Module):
    """Keeps its LSTM state on itself (a sentiment classifier over token ids, as the structured self-attention
    model's); the user's loop calls ``init_hidden`` before every batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.lstm, self.head = nn.Embedding(30, 4), nn.LSTM(4, 8, batch_first=True), nn.Linear(8, 1)
        self.hidden_state = self.init_hidden()

    def init_hidden(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, 16, 8), torch.zeros(1, 16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, self.hidden_state = self.lstm(self.emb(x), self.hidden_state)
        return torch.sigmoid(self.head(out[:, -1]))


def test_a_state_the_model_stores_on_itself_restarts_on_the_ledgers_copy():
    model = _Stateful()
    x = torch.randint(0, 30, (16, 5), generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 14).float()[:, None]
    r = firstdiv.learning_ledger(model, (x, y), F.binary_cross_entropy, torch.optim.RMSprop(model.parameters()))
    assert _finding(r, "GRADIENT").status.name == "PASS", _finding(r, "GRADIENT").message


class _Proxies(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proxies = nn.Parameter(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, embeds: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(F.normalize(embeds, dim=-1) @ F.normalize(self.proxies, dim=-1).T * 8, labels)


def test_a_loss_modules_parameters_train_beside_the_model():
    torch.manual_seed(0)
    model, criterion = nn.Linear(6, 4), _Proxies()
    opt = torch.optim.Adam([{"params": model.parameters()}, {"params": criterion.parameters(), "lr": 0.1}], 1e-2)
    batch = (torch.randn(12, 6), torch.randint(0, 3, (12,)))
    ledger = firstdiv.learning_ledger(model, batch, criterion, opt, overfit_steps=0)
    assert _finding(ledger, "OPTIMIZER_OWNERSHIP").status.name == "PASS", _finding(ledger, "OPTIMIZER_OWNERSHIP").message
    audit = firstdiv.four_structures(model, opt, batch, criterion)
    assert audit.status.value == "PASS", audit


def test_a_target_sliced_inside_the_step_for_an_l1_loss_is_read():
    gen = torch.Generator().manual_seed(0)
    t = torch.arange(36, dtype=torch.float64)
    series = torch.sin(0.3 * t + torch.rand(64, 1, generator=gen, dtype=torch.float64) * 6)
    x, y = series[:, :24, None], series[:, 24:, None]  # the declared batch is right
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(24, 12), nn.Unflatten(1, (12, 1))).double()
    opt, criterion = torch.optim.Adam(model.parameters(), 1e-3), nn.L1Loss()

    def train_step():  # the loop slices the target from the window's start
        opt.zero_grad()
        loss = criterion(model(x), series[:, :12, None])
        loss.backward()
        opt.step()
        return loss.detach()

    r = firstdiv.learning_ledger(model, (x, y), criterion, opt, train_step=train_step, overfit_steps=0)
    task = _finding(r, "TASK")
    assert task.check == "task.target_in_input" and "train_step feeds" in task.message, task.message


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pre, self.block, self.head = nn.Linear(6, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.utils.checkpoint.checkpoint(self.block, self.pre(x), use_reentrant=True)
        return self.head(h)


def test_reentrant_checkpointing_gets_its_gradients_by_a_full_backward():
    model = _Checkpointed()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 6), torch.randint(0, 2, (16,))

    def train_step():  # zero_grad left out: step 1's gradient is still there at step 2
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    r = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    assert r.first_divergence is not None and r.first_divergence.kind == "step.grad_accumulation", r
