"""shape_ledger: derive each layer's geometry before it runs, compare with what it produced, and derive
backward from "mat1 and mat2 shapes cannot be multiplied" to the layer that changed C or H, W."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.shape_ledger import shape_ledger


class CNN(nn.Module):
    """The zoo's cnn: conv/BatchNorm/ReLU/pool x2 and a Linear head; ``wide`` widens conv2 (and bn2) only."""

    def __init__(self, wide=16, head_in=16 * 3 * 3, second_pool=True):
        super().__init__()
        self.second_pool = second_pool
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, wide, 3, padding=1), nn.BatchNorm2d(wide)
        self.pool, self.head = nn.MaxPool2d(2), nn.Linear(head_in, 4)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.bn2(self.conv2(x)))
        if self.second_pool:
            x = self.pool(x)
        return self.head(x.flatten(1))


class ResBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + self.down(x))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layer1, self.layer2 = ResBlock(8, 8, 1), ResBlock(8, 16, 2)
        self.pool, self.flatten, self.fc = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.layer2(self.layer1(self.stem(x))))))


class UNetish(nn.Module):
    """Encoder/decoder: stride-2 conv, ceil-mode pool, dilation, 'same' padding, transposed conv, upsampling,
    pixel shuffle, padding layers, a channel concat, and 1d/3d layers on the side."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 4, stride=2, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.dil = nn.Conv2d(8, 8, 3, padding="same", dilation=2)
        self.avg = nn.AvgPool2d(2, stride=1, padding=1, ceil_mode=True)
        self.up1 = nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1, output_padding=1)
        self.up2 = nn.Upsample(size=(13, 13))
        self.pad = nn.ReflectionPad2d((1, 2, 0, 1))
        self.shuffle = nn.PixelShuffle(2)
        self.gn = nn.GroupNorm(2, 4)
        self.conv1d = nn.Conv1d(4, 6, 5, stride=3, padding=2)
        self.conv3d = nn.Conv3d(1, 2, (2, 3, 3), stride=(1, 2, 2))
        self.lp = nn.LPPool2d(2, 3, stride=2)

    def forward(self, x):
        skip = self.down(x)
        y = self.up1(self.avg(self.dil(self.pool(skip))))
        y = F.interpolate(self.up2(y), scale_factor=1.5)
        y = self.gn(self.shuffle(torch.cat([y, F.adaptive_max_pool2d(skip, y.shape[-2:])], dim=1)))
        y = self.lp(self.pad(y))
        seq = self.conv1d(y.flatten(2))
        vol = self.conv3d(y[:, :2].unsqueeze(1))
        return seq.mean() + vol.mean()


class MLP(nn.Module):
    def __init__(self, fc2_in=32):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(fc2_in, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def ledger(model, inputs):
    """shape_ledger that must leave no trace and render."""
    before = Snapshot.take(model)
    report = shape_ledger(model, inputs)
    assert before.diff(Snapshot.take(model)) == []
    assert torch._C._len_torch_function_stack() == 0
    assert isinstance(report, Report) and report.instrument == "shape_ledger" and str(report)
    assert Report.from_dict(json.loads(json.dumps(report.to_dict()))).to_dict() == report.to_dict()
    return report


def rows(report):
    return {r["stage"]: r for r in report.details["ledger"]}


# --- clean models ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_cnn_derives_every_layer(seed):
    torch.manual_seed(seed)
    report = ledger(CNN().train(), torch.randn(8, 1, 12, 12))
    assert report.status is Status.PASS, str(report)
    ledger_rows = report.details["ledger"]
    assert [r["stage"] for r in ledger_rows] == ["conv1", "bn1", "pool", "conv2", "bn2", "pool", "op:flatten@", "head"]
    assert ledger_rows[0] == {"stage": "conv1", "operation": "Conv2d(1->8, k=(3, 3), s=(1, 1), p=(1, 1))",
                              "observed_input": [8, 1, 12, 12], "expected_output": [8, 8, 12, 12],
                              "observed_output": [8, 8, 12, 12], "status": "ok"}
    assert all(r["status"] == "ok" for r in ledger_rows)


def test_clean_resnet_unet_mlp_and_transformer_like_models():
    resnet = ledger(SmallResNet().eval(), torch.randn(2, 3, 32, 32))
    assert resnet.status is Status.PASS, str(resnet)
    assert rows(resnet)["layer2.conv1"]["expected_output"] == [2, 16, 4, 4]
    assert rows(resnet)["pool"]["expected_output"] == [2, 16, 1, 1] and rows(resnet)["flatten"]["expected_output"] == [2, 16]
    unet = ledger(UNetish(), torch.randn(2, 3, 30, 30))
    # the one thing to say: conv3d (k=3, s=2, no padding) on W=20 never reads column 19
    assert unet.status is Status.WARN, str(unet)
    assert [(f.where, f.check, f.evidence["unread"]) for f in unet.findings if f.status is not Status.PASS] == [
        ("conv3d", "shape.unread_pixels", {"W": [19, 19]})]
    derived = {r["stage"] for r in unet.details["ledger"] if r["status"] == "ok"}
    assert {"down", "pool", "dil", "avg", "up1", "up2", "op:interpolate@", "op:adaptive_max_pool2d@", "shuffle", "gn",
            "pad", "lp", "conv1d", "conv3d"} <= derived
    assert rows(unet)["op:cat@"]["status"] == "observed"
    assert ledger(MLP(), torch.randn(4, 16)).status is Status.PASS
    lm = nn.Sequential(nn.Embedding(16, 8), nn.LayerNorm(8), nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                       nn.Linear(8, 16))
    assert ledger(lm, torch.randint(0, 16, (2, 5))).status is Status.PASS


@pytest.mark.parametrize("seed", range(3))
def test_derivation_agrees_with_pytorch_on_random_hyperparameters(seed):
    g = torch.Generator().manual_seed(seed)

    def r(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))
    for _ in range(12):
        k, s, d, ceil = r(1, 4), r(1, 3), r(1, 2), bool(r(0, 1))
        p = r(0, k // 2)
        layers = nn.Sequential(nn.Conv2d(2, 3, k, s, p, d), nn.MaxPool2d(k, s, p, d, ceil_mode=ceil),
                               nn.ConvTranspose2d(3, 2, k, s, p, output_padding=r(0, s - 1) if s > 1 else 0),
                               nn.AvgPool2d(k, s, p, ceil_mode=ceil))
        report = ledger(layers, torch.randn(1, 2, 40, 37))
        assert all(f.status in (Status.PASS, Status.WARN) for f in report.findings), str(report)
        assert {f.check for f in report.findings if f.status is Status.WARN} <= {"shape.unread_pixels"}
        assert [r["status"] for r in report.details["ledger"]] == ["ok"] * 4


# --- faults -----------------------------------------------------------------------------------------------------


def test_wrong_flatten_names_the_head_and_conv2_as_culprit():
    report = ledger(CNN(wide=32), torch.randn(8, 1, 12, 12))
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("head", "shape.flatten_mismatch")
    assert div.expected == "144 features (16*3*3)" and div.observed == "288 features (32*3*3)"
    assert div.hint.startswith("Never repair the final Linear first") and "change at conv2 was intended" in div.hint
    ev = report.findings[[f.where for f in report.findings].index("head")].evidence
    assert ev["culprit"] == "conv2" and ev["changed"] == "C"
    assert ev["implied"] == {"C": 16, "H": 3, "W": 3} and ev["observed"] == {"C": 32, "H": 3, "W": 3}
    assert ev["in_features"] == 144 and ev["arriving_features"] == 288 and ev["flattened_from"] == [8, 32, 3, 3]
    # the forward crashed in head, and the ledger up to it is still there
    assert report.details["raised"] and rows(report)["head"]["status"] == "input_mismatch"
    assert report.findings[-1].check == "shape.forward_raised"
    assert "mat1 and mat2 shapes cannot be multiplied" in report.findings[-1].message


def test_spatial_change_points_at_the_last_layer_that_set_the_spatial_size():
    report = ledger(CNN(), torch.randn(2, 1, 20, 20))  # 20x20 images: 5x5 at the flatten, in_features implies 3x3
    ev = report.findings[[f.where for f in report.findings].index("head")].evidence
    assert report.first_divergence.kind == "shape.flatten_mismatch"
    assert ev["changed"] == "spatial" and ev["implied"] == {"C": 16, "H": 3, "W": 3} and ev["culprit"] == "pool"


def test_a_widened_conv_without_its_batchnorm_fails_at_the_batchnorm():
    model = CNN()
    model.conv2 = nn.Conv2d(8, 32, 3, padding=1)
    report = ledger(model, torch.randn(4, 1, 12, 12))
    div = report.first_divergence
    assert (div.where, div.kind) == ("bn2", "shape.mismatch") and "conv2" in div.hint
    assert report.findings[[f.where for f in report.findings].index("bn2")].evidence["culprit"] == "conv2"


def test_channels_last_batch_into_a_conv_is_a_mismatch_with_the_nhwc_hint():
    report = ledger(SmallResNet(), torch.randn(2, 32, 32, 3))
    div = report.first_divergence
    assert (div.where, div.kind) == ("stem.0", "shape.mismatch")
    assert "never change in_channels to match an NHWC batch" in div.hint
    assert report.findings[0].evidence["culprit"] == "inputs"


def test_linear_without_flatten_names_the_previous_layer():
    report = ledger(MLP(fc2_in=16), torch.randn(4, 16))
    div = report.first_divergence
    assert (div.where, div.kind) == ("fc2", "shape.mismatch")
    assert report.findings[[f.where for f in report.findings].index("fc2")].evidence["culprit"] == "fc1"


def test_functional_linear_crash_is_derived_backward_too():
    class Functional(CNN):
        def __init__(self):
            super().__init__(wide=32)
            self.w = nn.Parameter(torch.zeros(4, 144))

        def forward(self, x):
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            x = self.pool(torch.relu(self.bn2(self.conv2(x))))
            return F.linear(x.flatten(1), self.w)
    report = ledger(Functional(), torch.randn(2, 1, 12, 12))
    div = report.first_divergence
    assert (div.where, div.kind) == ("op:linear@", "shape.flatten_mismatch")
    assert report.findings[-1].evidence["culprit"] == "conv2"


def test_a_layer_whose_forward_disagrees_with_its_hyperparameters():
    class PaddedConv(nn.Conv2d):
        def forward(self, x):
            return super().forward(F.pad(x, (1, 1, 1, 1)))  # pads twice: output grows by 2
    model = nn.Sequential(nn.Conv2d(1, 4, 3), PaddedConv(4, 4, 3, padding=1), nn.Flatten())
    report = ledger(model, torch.randn(2, 1, 10, 10))
    # evidence before FAIL: the subclass writes its own forward, so a geometry other than Conv2d's may be its design
    # (a learned positional embedding on nn.Embedding returns [1, T, D]): named as a WARN with both shapes
    assert report.status is Status.WARN, str(report)
    warn = next(f for f in report.findings if f.check == "shape.mismatch")
    assert warn.where == "1" and "[2, 4, 8, 8]" in warn.message and "[2, 4, 10, 10]" in warn.message
    assert "PaddedConv writes its own forward" in warn.message


def test_forward_raising_elsewhere_returns_the_ledger():
    class Broken(CNN):
        def forward(self, x):
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            raise RuntimeError("custom code failed")
    report = ledger(Broken().train(), torch.randn(2, 1, 12, 12))
    div = report.first_divergence
    assert (div.where, div.kind) == ("", "shape.forward_raised") and "RuntimeError: custom code failed" in div.observed
    assert [r["stage"] for r in report.details["ledger"]] == ["conv1", "bn1", "pool"]


def test_a_forward_that_refuses_the_inputs_it_was_handed_is_not_a_failure():
    """The model's own top-level code raising a Python error on the inputs (it takes the whole batch dict): that is
    how the inputs were read, not a defect shown in the program: SKIPPED with the reason and the way to pass them."""
    class WholeBatch(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)

        def forward(self, batch):
            return self.conv(batch.get("input"))

    report = ledger(WholeBatch(), torch.randn(2, 1, 8, 8))
    assert report.status is not Status.FAIL, str(report)
    assert any(f.check == "shape.inputs_refused" and "inputs=" in f.message for f in report.findings)


def test_skipped_when_nothing_changes_shape():
    report = ledger(nn.Sequential(nn.ReLU(), nn.Dropout()), torch.randn(3, 4))
    assert report.status is Status.SKIPPED and "no shape-changing layer ran" in report.reason


def test_keyword_and_tuple_inputs():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 4), nn.Linear(5, 4)

        def forward(self, x, y=None):
            return self.a(x) + self.b(y)
    x, y = torch.randn(2, 3), torch.randn(2, 5)
    assert ledger(Two(), (x, y)).status is Status.PASS
    assert ledger(Two(), {"x": x, "y": y}).status is Status.PASS


@pytest.mark.parametrize("call, message", [
    (lambda: shape_ledger(lambda x: x, torch.randn(2)), "Expected `model` to be a torch.nn.Module but got function"),
    (lambda: shape_ledger(MLP(), None), "Expected `inputs` to be a tensor, a tuple of positional arguments or a dict"),
    (lambda: shape_ledger(MLP(), {1: torch.randn(2)}), "Expected `inputs` dict keys to be argument names (str) but got int"),
])
def test_misuse_is_one_line_invalid_argument(call, message):
    with pytest.raises(InvalidArgument) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)
