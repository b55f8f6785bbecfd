"""Edge cases every learning instrument must meet with a clear report or a clear one-line error,
never a crash deep inside torch: no parameters, frozen models, several param groups, tied weights,
non-float targets, dict batches, non-scalar losses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import assert_no_trace
from torch import nn

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.report import Report

INSTRUMENTS = {
    "step_probe": lambda m, b, l, o: firstdiv.step_probe(m, b, l, o),
    "reachability": lambda m, b, l, o: firstdiv.reachability(m, b, l),
    "four_structures": lambda m, b, l, o: firstdiv.four_structures(m, o, b, l),
    "six_claims": lambda m, b, l, o: firstdiv.six_claims(m, b, l, o),
    "learning_ledger": lambda m, b, l, o: firstdiv.learning_ledger(m, b, l, o, overfit_steps=20),
    "evidence_packet": lambda m, b, l, o: firstdiv.evidence_packet(model=m, batch=b, loss_fn=l, optimizer=o),
}


def _gen():
    return torch.Generator().manual_seed(0)


def _mlp():
    g = _gen()
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m


def _batch():
    g = _gen()
    return torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)


class NoParams(nn.Module):
    def forward(self, x):
        return x[:, :3] * 2


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(self.embed(x))


class DictModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _mlp()

    def forward(self, features, mask=None):
        return self.net(features)


def _case(name):
    ce = F.cross_entropy
    if name == "no_parameters":
        x, y = _batch()
        return NoParams(), (x, y), ce, None
    if name == "frozen":
        m = _mlp().requires_grad_(False)
        return m, _batch(), ce, torch.optim.SGD(m.parameters(), lr=0.1)
    if name == "param_groups":
        m = _mlp()
        return m, _batch(), ce, torch.optim.SGD([{"params": m[0].parameters(), "lr": 0.1},
                                                 {"params": m[2].parameters(), "lr": 0.01}], lr=0.05)
    if name == "tied_weights":
        m = Tied()
        g = _gen()
        x = torch.randint(0, 5, (12,), generator=g)
        return m, (x, x), ce, torch.optim.Adam(m.parameters(), lr=0.1)  # tied in/out embedding: identity is learnable
    if name == "float_targets_for_classifier":
        m = _mlp()
        x, y = _batch()
        return m, (x, y.float()), ce, torch.optim.SGD(m.parameters(), lr=0.1)
    if name == "dict_batch":
        m = DictModel()
        x, y = _batch()
        return m, {"features": x, "mask": torch.ones(16), "labels": y}, ce, torch.optim.SGD(m.parameters(), lr=0.1)
    if name == "lbfgs":
        m = _mlp()
        return m, _batch(), ce, torch.optim.LBFGS(m.parameters(), lr=0.5)
    if name == "non_scalar_loss":
        m = _mlp()
        return m, _batch(), lambda o, t: F.cross_entropy(o, t, reduction="none"), torch.optim.SGD(m.parameters(), lr=0.1)
    raise AssertionError(name)


CASES = ["no_parameters", "frozen", "param_groups", "tied_weights", "float_targets_for_classifier", "dict_batch",
         "non_scalar_loss", "lbfgs"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("instrument", sorted(INSTRUMENTS))
def test_edge_cases_give_a_report_or_a_clear_error(instrument, case):
    model, batch, loss_fn, optimizer = _case(case)
    if optimizer is None:
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # an optimizer of nothing in the model
    out = assert_no_trace(lambda: INSTRUMENTS[instrument](model, batch, loss_fn, optimizer), [model, optimizer])
    if isinstance(out, InvalidArgument):
        message = str(out)
        assert "\n" not in message and len(message) < 400, message
        return
    assert isinstance(out, Report), f"{instrument} on {case}: {type(out).__name__}: {out}"
    text = str(out)
    assert instrument.upper() in text
    if case in ("param_groups", "tied_weights", "dict_batch", "lbfgs"):  # healthy programs: no alarm
        assert out.status.value != "FAIL", text
    if case in ("no_parameters", "non_scalar_loss", "frozen") and instrument not in ("evidence_packet", "four_structures"):
        assert out.status.value in ("FAIL", "WARN", "SKIPPED"), text
    if case == "float_targets_for_classifier" and out.status.value == "SKIPPED":
        assert "loss_fn raised" in out.reason and "[16] float32" in out.reason, out.reason
