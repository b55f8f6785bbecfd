"""A parameter frozen by accident beside a declared freeze (public-13's N-BEATS port, where the first block's backcast
was frozen instead of the last one's): with ``frozen=`` declared, a requires_grad=False parameter no pattern names,
which the optimizer owns and the loss depends on, contradicts the program's own declarations: a FAIL at it. Without
that evidence (not owned by the optimizer) it stays a WARN, and without ``frozen=`` it is not checked."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status


def _program(owned: bool = True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    model[4].requires_grad_(False)  # the head frozen on purpose, and declared
    model[0].requires_grad_(False)  # the first layer frozen by a slip
    params = list(model.parameters()) if owned else [p for n, p in model.named_parameters() if not n.startswith("0.")]
    opt = torch.optim.Adam(params, lr=1e-3)
    batch = (torch.randn(16, 4), torch.randint(0, 2, (16,)))
    return model, opt, batch


def _undeclared(report):
    return [f for f in report.findings if f.check == "frozen.undeclared"]


def test_a_frozen_parameter_the_declaration_leaves_out_and_the_optimizer_owns_fails_at_it() -> None:
    model, opt, batch = _program()
    r = firstdiv.four_structures(model, opt, batch, F.cross_entropy, frozen=("4.*",))
    f = _undeclared(r)
    assert f and f[0].status is Status.FAIL and f[0].where == "0.weight", [(x.status, x.where) for x in f]
    assert r.first_divergence is not None and r.first_divergence.kind == "frozen.undeclared"


def test_not_owned_by_the_optimizer_it_stays_a_warn_and_without_frozen_it_is_not_checked() -> None:
    model, opt, batch = _program(owned=False)
    f = _undeclared(firstdiv.four_structures(model, opt, batch, F.cross_entropy, frozen=("4.*",)))
    assert f and f[0].status is Status.WARN, f
    model, opt, batch = _program()
    assert not _undeclared(firstdiv.four_structures(model, opt, batch, F.cross_entropy))
