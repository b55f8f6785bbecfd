"""shape_ledger: a layer whose output differs from the derived geometry FAILs only when torch's own forward of its
class, replayed on a meta copy, confirms the derived geometry (evidence before FAIL)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.shape_ledger import _geometry, shape_ledger


def ledger(model, inputs):
    before = Snapshot.take(model)
    report = shape_ledger(model, inputs)
    assert before.diff(Snapshot.take(model)) == []
    return report


def rows(report):
    return {r["stage"]: r for r in report.details["ledger"]}


class SegHead(nn.Module):
    """An encoder-decoder whose transposed conv restores the input's size by passing output_size (ENet's head)."""

    def __init__(self, positional=False):
        super().__init__()
        self.positional = positional
        self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, bias=False)

    def forward(self, x):
        size = x.size()
        h = self.down(x)
        return self.up(h, size) if self.positional else self.up(h, output_size=size)


def test_a_transposed_conv_given_output_size_is_its_own_arithmetic():
    for positional in (False, True):
        report = ledger(SegHead(positional), torch.randn(2, 3, 48, 64))  # 24x32 -> 47x63 without output_size
        assert report.status is Status.PASS, str(report)
        row = rows(report)["up"]
        assert row["status"] == "ok" and row["observed_output"] == [2, 4, 48, 64]
        assert "output_size=(48, 64)" in row["operation"]


def test_a_conv_whose_weight_was_replaced_derives_from_the_weight_that_runs():
    """A whitening conv declared with 12 filters and given 24 (eigenvectors and their negatives) after construction:
    torch convolves with the weight it holds, and the next layer is declared for 24 channels."""
    whiten = nn.Conv2d(3, 12, 2, bias=False)
    with torch.no_grad():
        whiten.weight.data = torch.cat((whiten.weight, -whiten.weight))
    model = nn.Sequential(whiten, nn.Conv2d(24, 8, 3, padding=1), nn.Flatten())
    report = ledger(model, torch.randn(2, 3, 32, 32))
    assert report.status is Status.PASS, str(report)
    assert rows(report)["0"]["expected_output"] == [2, 24, 31, 31] and "weight [24, 3, 2, 2]" in rows(report)["0"]["operation"]


def test_a_geometry_the_rule_misses_is_confirmed_on_torch_forward(monkeypatch):
    """Where the ledger's rule is wrong, torch's forward on a meta copy gives the observed geometry: no FAIL."""
    window = _geometry._window
    monkeypatch.setattr(_geometry, "_window", lambda *a: window(*a) + 1)  # a rule off by one
    report = ledger(nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten()), torch.randn(2, 1, 10, 10))
    assert report.status is Status.PASS, str(report)
    derived = next(f for f in report.findings if f.where == "0")
    assert derived.check == "shape.derived" and "meta copy" in derived.message


def test_a_layer_that_does_not_compute_its_class_geometry_still_fails():
    """An instance forward (or a hook) that pads before the conv: torch's Conv2d.forward on the same input gives the
    derived 8x8, the call gave 10x10: confirmed."""
    conv = nn.Conv2d(4, 4, 3)
    conv.forward = lambda x: nn.Conv2d.forward(conv, F.pad(x, (1, 1, 1, 1)))
    report = ledger(nn.Sequential(nn.Conv2d(1, 4, 3), conv, nn.Flatten()), torch.randn(2, 1, 10, 10))
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("1", "shape.mismatch"), str(report)
    assert div.expected == [2, 4, 6, 6] and div.observed == [2, 4, 8, 8]
    assert "meta copy" in next(f for f in report.findings if f.where == "1").evidence["confirmation"]
