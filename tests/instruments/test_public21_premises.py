"""What public-21's first contact showed in firstdiv's own calls, each fixed in general (tests/realworld/README.md):

- an optimizer that wraps another and never calls ``Optimizer.__init__`` (torchlars' LARS around SGD: no ``.state``, no
  hook tables) made the no-trace snapshot raise, so learning_ledger and step_probe raised on a correct program;
- a model whose ``train`` method is not the train/eval switch (Hands-on-RL's ensemble model defines ``train(self,
  loss)``, which steps its optimizer) was put in eval mode through ``model.eval()``, which called that method: the
  DEPENDENCY link raised, and on a program where the call had not raised it would have run a training step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.instruments._core.modes import mode_switch, set_mode


class _Wrapping(torch.optim.Optimizer):
    """An optimizer over another's groups that skips ``Optimizer.__init__`` (as torchlars' LARS does)."""

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        self.optim = inner

    @property
    def param_groups(self):
        return self.optim.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optim.zero_grad(set_to_none)

    def step(self, closure=None):
        return self.optim.step(closure)


def _program(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    x = torch.randn(24, 6)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return model, (x, y)


def test_a_wrapping_optimizer_without_state_is_snapshotted_through_the_one_it_wraps():
    model, batch = _program()
    inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = _Wrapping(inner)
    assert not hasattr(opt, "state")
    F.cross_entropy(model(batch[0]), batch[1]).backward()
    opt.step()
    opt.zero_grad()
    buffers = {id(p): (s["momentum_buffer"], s["momentum_buffer"].clone()) for p, s in inner.state.items()}
    weights = [p.detach().clone() for p in model.parameters()]
    for report in (firstdiv.learning_ledger(model, batch, F.cross_entropy, opt),
                   firstdiv.step_probe(model, batch, F.cross_entropy, opt)):
        assert report.status.name in ("PASS", "WARN"), report
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))
    assert {id(p) for p in inner.state} == set(buffers)
    for p, s in inner.state.items():  # the inner optimizer's state: the same tensors, the same values
        kept, value = buffers[id(p)]
        assert s["momentum_buffer"] is kept and torch.equal(kept, value)


class _Ensemble(nn.Module):
    """A model whose ``train`` steps its own optimizer (not the train/eval switch)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.1), nn.Linear(16, 3))
        self.calls = 0

    def forward(self, x):
        return self.net(x)

    def train(self, loss):  # the program's own method of this name
        self.calls += 1
        loss.backward()


def test_a_train_method_that_is_not_the_mode_switch_is_never_called():
    torch.manual_seed(0)
    model = _Ensemble()
    x = torch.randn(24, 6)
    y = (x[:, 0] > 0).long()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ws = firstdiv.diagnose(model=model, batch=(x, y), loss_fn=F.cross_entropy, optimizer=opt, stop_at_first=False)
    assert model.calls == 0
    ledger = ws.report_of("learning_ledger")
    dependency = next(f for f in ledger.findings if f.where == "DEPENDENCY")
    assert "could not check" not in dependency.message, dependency.message
    assert ws.status.name != "FAIL", ws
    assert not mode_switch(model) and mode_switch(model.net) and mode_switch(nn.Linear(1, 1))
    assert set_mode(model, False) is model and not any(m.training for m in model.modules()) and model.calls == 0


class _RateMLP(nn.Module):
    """Dropout written as F.dropout with the module's own rates (GRAND's MLP): no Dropout module to hook."""

    def __init__(self) -> None:
        super().__init__()
        self.input_droprate, self.hidden_droprate = 0.5, 0.5
        self.layer1, self.layer2 = nn.Linear(6, 32), nn.Linear(32, 3)

    def forward(self, x):
        x = F.dropout(x, self.input_droprate, training=self.training)
        x = F.dropout(torch.relu(self.layer1(x)), self.hidden_droprate, training=self.training)
        return self.layer2(x)


def test_an_evaluation_left_in_training_mode_is_found_where_the_model_applies_its_own_drop_rates():
    torch.manual_seed(0)
    model = _RateMLP()
    x = torch.randn(64, 6)
    y = (x[:, 0] > 0).long()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def evaluate(m, batch, call_eval):
        if call_eval:
            m.eval()
        with torch.no_grad():
            acc = float((m(batch[0]).argmax(1) == batch[1]).float().mean())
        m.train()
        return acc

    bad = firstdiv.six_claims(model, (x, y), F.cross_entropy, opt, eval_fn=lambda m, b: evaluate(m, b, False))
    assert bad.first_divergence is not None and bad.first_divergence.kind == "claim.evaluation.train_mode", bad
    good = firstdiv.six_claims(model, (x, y), F.cross_entropy, opt, eval_fn=lambda m, b: evaluate(m, b, True))
    assert next(f for f in good.findings if f.where == "EVALUATION").status.name == "PASS", good


class _Upsampler(nn.Module):
    """A forecaster that also reconstructs its input window (FITS-like): outputs [B, L + H, C] for an input [B, L, C]."""

    def __init__(self, length: int = 32, horizon: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(length, length + horizon)

    def forward(self, x):
        return self.proj(x.transpose(1, 2)).transpose(1, 2)


def _forecast_batch(inside: bool):
    torch.manual_seed(0)
    series = torch.randn(32, 40, 3).cumsum(1)
    x = series[:, :32]
    y = x[:, 8:16] if inside else series[:, 32:40]  # the horizon taken from inside the window, or after it
    return x, y


def test_a_target_copied_from_the_input_window_is_found_where_the_output_also_reconstructs_the_window():
    model = _Upsampler()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_fn(out, y):
        return F.mse_loss(out[:, -y.shape[1]:], y)

    bad = firstdiv.learning_ledger(model, _forecast_batch(True), loss_fn, opt)
    assert bad.first_divergence is not None and bad.first_divergence.kind == "task.target_in_input", bad
    good = firstdiv.learning_ledger(model, _forecast_batch(False), loss_fn, opt)
    assert next(f for f in good.findings if f.where == "TASK").status.name == "PASS", good


def _sr_batch(flip_low_only: bool):
    """A x4 super-resolution batch: smooth 32 x 32 targets and their 8 x 8 averages, half of the pairs flipped
    left-right on the low-resolution side alone when ``flip_low_only``."""
    torch.manual_seed(0)
    hr = F.interpolate(torch.randn(16, 1, 8, 8), size=(32, 32), mode="bicubic", align_corners=False)
    hr = hr + 0.5 * torch.linspace(-1, 1, 32).view(1, 1, 1, 32) * torch.randn(16, 1, 1, 1)
    lr = F.avg_pool2d(hr, 4)
    if flip_low_only:
        lr[::2] = lr[::2].flip(-1)
    return lr, hr


def test_a_flip_applied_to_a_small_low_resolution_input_alone_is_found_on_the_targets_grid():
    model = nn.Sequential(nn.Upsample(scale_factor=4, mode="bilinear"), nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 1, 3, padding=1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    bad = firstdiv.learning_ledger(model, _sr_batch(True), F.mse_loss, opt)
    assert bad.first_divergence is not None and bad.first_divergence.kind == "task.target_misaligned", bad
    good = firstdiv.learning_ledger(model, _sr_batch(False), F.mse_loss, opt)
    assert next(f for f in good.findings if f.where == "TASK").status.name == "PASS", good
