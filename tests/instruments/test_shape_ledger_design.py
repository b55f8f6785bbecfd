"""shape_ledger on real CNN shapes: the design (``designed=``), input rows/columns a window never reads, the flatten
culprit when a pooling layer was removed or changed, and the inputs and models practitioners hand it (channels_last,
bf16/fp16, sparse, nested outputs, torch.compile, no conv at all)."""

import importlib.util
import json
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.shape_ledger import shape_ledger

pytestmark = pytest.mark.usefixtures("one_thread")

_spec = importlib.util.spec_from_file_location(
    "shapes_models_for_unit_tests", pathlib.Path(__file__).parents[1] / "realworld" / "cases" / "_shapes_models.py")
models = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(models)


def ledger(model, inputs, **kw):
    """shape_ledger that must leave no trace, render and round-trip."""
    before = Snapshot.take(model)
    report = shape_ledger(model, inputs, **kw)
    assert before.diff(Snapshot.take(model)) == []
    assert torch._C._len_torch_function_stack() == 0
    assert isinstance(report, Report) and str(report)
    assert Report.from_dict(json.loads(json.dumps(report.to_dict()))).to_dict() == report.to_dict()
    return report


def finding(report, where, check):
    return next(f for f in report.findings if f.where == where and f.check == check)


def small_resnet(seed=0, **kw):
    torch.manual_seed(seed)
    return models.ResNet(**kw).eval()


X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
DESIGN = models.RESNET_DESIGN


# --- designed shapes -------------------------------------------------------------------------------------------------


def test_a_network_matching_its_design_passes_with_a_finding_per_designed_module():
    report = ledger(small_resnet(), X, designed={**DESIGN, "layer2.0.conv1": (16, None, 8)})
    assert report.status is Status.PASS, str(report)
    checked = [f.where for f in report.findings if f.check == "shape.design"]
    assert checked == ["conv1", "maxpool", "layer1", "layer2.0.conv1", "layer2", "layer3", "layer4", "avgpool", "fc"]


def test_patched_in_features_is_self_consistent_but_differs_from_the_design_at_layer4():
    model = small_resnet(widths=(8, 16, 32, 128))  # fc = nn.Linear(128, 10): it runs
    assert ledger(model, X).status is Status.PASS
    report = ledger(model, X, designed=DESIGN)
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("layer4", "shape.design_mismatch")
    assert (div.expected, div.observed) == ([64, 2, 2], [128, 2, 2])
    ev = finding(report, "layer4", "shape.design_mismatch").evidence
    assert ev["changed"] == "C" and ev["culprit"] == "layer4.0.conv1"
    assert "never patch a later layer's in_features" in div.hint
    assert finding(report, "avgpool", "shape.after_divergence").status is Status.SKIPPED
    upstream = ledger(model, X, designed={"avgpool": (64, 1, 1), "fc": (10,)})  # the change starts upstream
    assert upstream.first_divergence.where == "avgpool"
    assert finding(upstream, "avgpool", "shape.design_mismatch").evidence["culprit"] == "layer4.0.conv1"


def test_a_stride_change_inside_a_stage_is_caught_by_the_stage_design_and_blamed_on_its_conv():
    model = small_resnet()
    model.layer3[0].conv1.stride = (1, 1)
    model.layer3[0].downsample[0].stride = (1, 1)
    report = ledger(model, X, designed=DESIGN)
    div = report.first_divergence
    assert (div.where, div.kind, div.observed) == ("layer3", "shape.design_mismatch", [32, 8, 8])
    ev = finding(report, "layer3", "shape.design_mismatch").evidence
    assert ev["changed"] == "spatial" and ev["culprit"] == "layer3.0.conv1"
    assert "stride (2, 2) there gives the designed size" in div.hint
    model.layer3[0].conv1.stride = (4, 4)  # too small now; the shortcut still halves: the residual add raises
    report = ledger(model, X, designed={"layer3.0.conv1": (32, 4, 4)})
    assert (report.first_divergence.where, report.first_divergence.kind) == ("layer3.0.conv1", "shape.design_mismatch")


def test_a_designed_module_that_never_ran_is_skipped_not_failed():
    model = nn.ModuleDict({"conv": nn.Conv2d(3, 4, 3), "unused": nn.Linear(2, 2)})
    model.forward = lambda x: model["conv"](x)
    report = ledger(model, torch.randn(1, 3, 8, 8), designed={"unused": (2,), "conv": (4, 6, 6)})
    assert report.status is Status.PASS
    skipped = finding(report, "unused", "shape.design_not_checked")
    assert skipped.status is Status.SKIPPED and "returned no tensor" in skipped.message


@pytest.mark.parametrize("designed, message", [
    ({"layer9": (1,)}, "'layer9' is not one (did you mean 'layer4'?)"),
    ({"fc": 10}, "Expected `designed['fc']` to be a per-example shape"),
    ({"fc": (10.0,)}, "Expected `designed['fc']` to be a per-example shape"),
    ([("fc", (10,))], "Expected `designed` to be a dict {module path: per-example output shape}"),
])
def test_bad_designs_are_one_line_invalid_arguments(designed, message):
    with pytest.raises(InvalidArgument) as info:
        shape_ledger(small_resnet(), X, designed=designed)
    assert message in str(info.value) and "\n" not in str(info.value)
    model = small_resnet()
    before = Snapshot.take(model)
    with pytest.raises(InvalidArgument, match=r"\(2, 10\) is the whole output shape \(2, 10\): give \(10,\)"):
        shape_ledger(model, X, designed={"fc": (2, 10)})  # the batch axis included: found after the forward
    assert before.diff(Snapshot.take(model)) == []
    with pytest.raises(InvalidArgument, match="Expected `unread` to be one of"):
        shape_ledger(small_resnet(), X, unread="ignore")


# --- unread pixels ---------------------------------------------------------------------------------------------------


def _read_rows(layer, size):
    """Input rows a layer reads, measured: the gradient of its summed output with all-ones weights."""
    x = torch.zeros(1, 1, size, 5, requires_grad=True)
    layer(x).sum().backward()
    return (x.grad.abs().sum(dim=(0, 1, 3)) > 0).tolist()


@pytest.mark.parametrize("seed", range(2))
def test_unread_rows_agree_with_the_rows_the_gradient_reaches(seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(15):
        # dilation 1: a dilated window's holes are unread by design, also at the edge
        k, s, d, size = (int(torch.randint(lo, hi + 1, (1,), generator=g)) for lo, hi in ((1, 5), (1, 4), (1, 1), (9, 20)))
        p = int(torch.randint(0, k // 2 + 1, (1,), generator=g))
        conv = nn.Conv2d(1, 1, (k, 1), (s, 1), (p, 0), (d, 1), bias=False)
        nn.init.ones_(conv.weight)
        read = _read_rows(conv, size)
        trailing = len(read) - (max(i for i, r in enumerate(read) if r) + 1)
        report = ledger(conv, torch.randn(1, 1, size, 5))
        flagged = [f.evidence["unread"] for f in report.findings if f.check == "shape.unread_pixels"]
        regular_skip = max(s - d * (k - 1) - 1, 0)
        want = [{"H": [size - trailing, size - 1]}] if trailing > regular_skip else []
        assert flagged == want, (k, s, p, d, size, read)


def test_a_dropped_edge_is_a_warn_naming_the_layer_and_rows_or_a_fail_or_note_as_declared():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.MaxPool2d(3, stride=2))
    report = ledger(model, torch.randn(1, 3, 8, 8))
    f = finding(report, "1", "shape.unread_pixels")
    assert report.status is Status.WARN and report.first_divergence is None
    assert f.evidence["unread"] == {"H": [7, 7], "W": [7, 7]} and "never reads input row 7 of H=8; column 7 of W=8" in f.message
    failed = ledger(model, torch.randn(1, 3, 8, 8), unread="fail")
    assert (failed.first_divergence.where, failed.first_divergence.kind) == ("1", "shape.unread_pixels")
    noted = ledger(model, torch.randn(1, 3, 8, 8), unread="note")
    assert noted.status is Status.PASS and finding(noted, "1", "shape.unread_pixels").status is Status.PASS

    class Functional(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 3, 2)
    report = ledger(Functional(), torch.randn(1, 2, 10, 9))
    assert finding(report, "op:max_pool2d@", "shape.unread_pixels").evidence["unread"] == {"H": [9, 9]}


def test_designs_that_read_every_pixel_are_not_flagged():
    stem = nn.Sequential(nn.Conv2d(1, 2, 7, 2, 3), nn.MaxPool2d(3, 2, 1))  # ResNet's stem on 224 and 64
    for size in (224, 64, 65):
        assert ledger(stem, torch.randn(1, 1, size, size)).status is Status.PASS
    shortcut = nn.Conv2d(2, 2, 1, stride=2)  # a 1x1 stride-2 shortcut skips every other row by design
    assert ledger(shortcut, torch.randn(1, 2, 8, 8)).status is Status.PASS
    vgg = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(2, 2, 3, padding="same"),
                        nn.ConvTranspose2d(2, 2, 3, stride=2), nn.AdaptiveAvgPool2d(3))
    assert ledger(vgg, torch.randn(1, 1, 16, 16)).status is Status.PASS


# --- the flatten culprit -------------------------------------------------------------------------------------------


def test_a_removed_average_pool_is_the_flatten_culprit():
    model = small_resnet()
    model.avgpool = nn.Identity()
    report = ledger(model, X)
    div = report.first_divergence
    assert (div.where, div.kind) == ("fc", "shape.flatten_mismatch")
    ev = finding(report, "fc", "shape.flatten_mismatch").evidence
    assert ev["culprit"] == "avgpool" and ev["changed"] == "spatial" and ev["implied"] == {"C": 64, "H": 1, "W": 1}
    assert "avgpool is an nn.Identity where a pooling layer would reduce the spatial size" in div.hint
    model.avgpool = nn.AdaptiveAvgPool2d((2, 2))  # a changed output size
    ev = finding(ledger(model, X), "fc", "shape.flatten_mismatch").evidence
    assert ev["culprit"] == "avgpool" and ev["culprit_operation"] == "AdaptiveAvgPool2d(output_size=(2, 2))"
    designed = ledger(model, X, designed=DESIGN)
    assert (designed.first_divergence.where, designed.first_divergence.kind) == ("avgpool", "shape.design_mismatch")


# --- inputs and models practitioners hand it ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["channels_last", "bf16", "fp16"])
def test_channels_last_and_half_precision_models(variant):
    model, x = small_resnet(), X
    if variant == "channels_last":
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    else:
        dtype = torch.bfloat16 if variant == "bf16" else torch.float16
        model, x = model.to(dtype), x.to(dtype)
    report = ledger(model, x, designed=DESIGN)
    assert report.status is Status.PASS, str(report)


def test_sparse_inputs_and_nested_outputs():
    class Sparse(nn.Module):
        def __init__(self):
            super().__init__()
            self.table, self.fc = nn.Parameter(torch.randn(20, 8)), nn.Linear(8, 3)

        def forward(self, x):
            return {"logits": self.fc(torch.sparse.mm(x, self.table)), "extra": (x.shape[0], [self.table])}
    x = (torch.randn(4, 20).relu() * (torch.rand(4, 20) < 0.2)).to_sparse()
    report = ledger(Sparse(), x, designed={"fc": (3,)})
    assert report.status is Status.PASS and finding(report, "fc", "shape.design").status is Status.PASS

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.a, self.b = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1), nn.Conv2d(4, 6, 1)

        def forward(self, x):
            f = self.conv(x)
            return self.a(f), {"b": [self.b(f)]}
    assert ledger(Heads(), torch.randn(2, 3, 9, 9), designed={"b": (6, 7, 7)}).status is Status.PASS


def test_hf_model_output_and_a_model_without_conv():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                     max_position_embeddings=16)
    ids = torch.randint(0, 32, (2, 5))
    report = ledger(BertForSequenceClassification(cfg).eval(), {"input_ids": ids}, designed={"classifier": (2,)})
    assert report.status is Status.PASS, str(report)
    activations = ledger(nn.Sequential(nn.GELU(), nn.LayerNorm(4)), torch.randn(2, 4))
    assert activations.status is Status.SKIPPED and activations.details["not_applicable"] is True


def test_a_compiled_model_runs_eagerly_with_the_users_paths():
    compiled = torch.compile(small_resnet())
    report = ledger(compiled, X, designed={"_orig_mod.layer4": (64, 2, 2), "fc": (10,)})
    assert report.status is Status.PASS, str(report)
    stages = [r["stage"] for r in report.details["ledger"]]
    assert stages[:2] == ["conv1", "bn1"] and not any("_orig_mod" in s for s in stages)
    assert "ran eagerly" in report.details["compiled"]
    broken = torch.compile(small_resnet(widths=(8, 16, 32, 128)))
    div = ledger(broken, X, designed=DESIGN).first_divergence
    assert (div.where, div.kind) == ("layer4", "shape.design_mismatch")


def test_a_backend_without_a_kernel_for_the_dtype_is_skipped_not_failed():
    class HalfOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            self.conv(x)
            raise NotImplementedError('"slow_conv2d_cpu" not implemented for \'Half\'')
    report = ledger(HalfOnly(), torch.randn(1, 3, 8, 8))
    assert report.status is Status.SKIPPED and "this backend cannot run the model as given" in report.reason
    assert [r["stage"] for r in report.details["ledger"]] == ["conv"]
    report = ledger(HalfOnly(), torch.randn(1, 3, 8, 8), designed={"conv": (5, 6, 6)})  # a divergence before it
    assert (report.first_divergence.where, report.first_divergence.kind) == ("conv", "shape.design_mismatch")
