"""``step.never_trained``: a module that runs in every step, owned by the optimizer, whose output no loss uses, is
named as such when the user's own train_step confirms that nothing ever trains it: a WARN, since correct programs
compute heads they never train (a decision transformer's state and return heads) exactly as a copy-paste slip does;
a module that never ran, ran without gradients, or is trained by another call keeps the plain unused-parameter note."""

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


class TwinCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.q1 = nn.Linear(4, 1)
        self.q2 = nn.Linear(4, 1)
        self.spare = nn.Linear(4, 1)  # defined, never called

    def forward(self, x):
        return self.q1(x), self.q2(x)


def _program(slip: bool, seed: int = 0, train_step: bool = True):
    torch.manual_seed(seed)
    model = TwinCritic()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def loss_fn(out, target):
        q1, q2 = out
        return F.mse_loss(q1, target) + F.mse_loss(q1 if slip else q2, target)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, (x, y), loss_fn, opt, (step if train_step else None)


def _kinds(report):
    return {(f.check, f.where, f.status.name) for f in report.findings}


def test_a_head_whose_term_repeats_another_is_named_computed_and_dropped():
    model, batch, loss_fn, opt, step = _program(slip=True)
    report = firstdiv.step_probe(model, batch, loss_fn, opt, train_step=step)
    assert report.status.name == "WARN"
    assert ("step.never_trained", "q2.weight", "WARN") in _kinds(report)
    assert "computed and dropped" in next(f.message for f in report.findings if f.check == "step.never_trained")
    # a module that never ran is not "computed and dropped": the WARN stays
    assert ("step.unused_parameter", "spare.weight", "WARN") in _kinds(report)


def test_the_correct_twin_head_and_a_step_without_train_step_say_nothing_of_it():
    model, batch, loss_fn, opt, step = _program(slip=False)
    assert not any(f.check == "step.never_trained" for f in firstdiv.step_probe(model, batch, loss_fn, opt,
                                                                                 train_step=step).findings)
    model, batch, loss_fn, opt, _ = _program(slip=True, train_step=False)
    report = firstdiv.step_probe(model, batch, loss_fn, opt)
    assert ("step.unused_parameter", "q2.weight", "WARN") in _kinds(report)
    assert not any(f.status.name == "FAIL" for f in report.findings)


def test_a_module_trained_by_another_call_of_the_step_or_run_without_grad_is_not_named():
    torch.manual_seed(0)
    model = TwinCritic()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    calls = [0]

    def loss_fn(out, target):
        return F.mse_loss(out[0], target)

    def step():  # alternating: every other call fits q2 instead (and q2 runs without grad otherwise)
        calls[0] += 1
        opt.zero_grad()
        if calls[0] % 2:
            q1 = model.q1(x)
            with torch.no_grad():
                model.q2(x)
            loss = F.mse_loss(q1, y)
        else:
            loss = F.mse_loss(model(x)[1], y)
        loss.backward()
        opt.step()
        return loss

    report = firstdiv.step_probe(model, (x, y), loss_fn, opt, train_step=step)
    assert not any(f.check == "step.never_trained" for f in report.findings), _kinds(report)


class Learner(nn.Module):
    """MAML's learner (dragen1860/MAML-Pytorch): ``parameters()`` overridden without ``recurse``."""

    def __init__(self):
        super().__init__()
        self.vars = nn.ParameterList([nn.Parameter(torch.randn(2, 4) * 0.1), nn.Parameter(torch.zeros(2))])

    def forward(self, x):
        return F.linear(x, self.vars[0], self.vars[1])

    def parameters(self):  # as written upstream
        return self.vars


def test_a_module_overriding_parameters_without_recurse_is_watched_not_blamed():
    torch.manual_seed(0)
    model = Learner()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    report = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=step)
    assert not any(f.check == "step.train_step_raised" for f in report.findings), _kinds(report)
