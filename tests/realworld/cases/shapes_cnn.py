"""shape_ledger on CNNs shaped like torchvision's (ResNet-18, VGG, MobileNet), a UNet and a 1-D audio net, each
with and without its design (``designed=`` per-example output shapes by module path); and the bugs users make
with them: a head's ``in_features`` patched to whatever ran, a removed average pool, a changed stride, a window that
drops the last row and column, a pointwise conv's ``in_channels`` typo."""

from __future__ import annotations

import torch
from _cases import Case
from _shapes_models import VGG, AudioNet, MobileNet, Program, ResNet, UNet, resnet
from torch import nn

import firstdiv

VGG_DESIGN = {"features": (64, 4, 4), "avgpool": (64, 2, 2), "classifier": (10,)}
MOBILENET_DESIGN = {"features.0": (8, 32, 32), "features.2": (24, 16, 16), "features": (64, 4, 4), "classifier": (10,)}
UNET_DESIGN = {"inc": (8, 32, 32), "down1": (16, 16, 16), "down2": (32, 8, 8), "up1": (16, 16, 16), "outc": (2, 32, 32)}
AUDIO_DESIGN = {"frontend": (16, 256), "blocks": (32, 16), "pool": (32, 1), "fc": (5,)}


def _ledger(p: Program):
    return firstdiv.shape_ledger(p.model, p.inputs)


def _designed(p: Program):
    return firstdiv.shape_ledger(p.model, p.inputs, designed=p.designed)


def _build(cls, shape, design, **kw):
    def build(seed: int) -> Program:
        torch.manual_seed(seed)
        return Program(cls(**kw).eval(), torch.randn(*shape), dict(design))
    return build


def _fc_patched(seed: int) -> Program:
    """layer4 built with 128 planes where the design says 64; the shape error at fc 'fixed' by nn.Linear(128, 10)."""
    torch.manual_seed(seed)
    p = resnet(seed)
    p.model = ResNet(widths=(8, 16, 32, 128)).eval()  # fc = nn.Linear(widths[3], 10): runs, self-consistent
    return p


def _no_avgpool(seed: int) -> Program:
    p = resnet(seed)
    p.model.avgpool = nn.Identity()  # fc now receives 64*2*2
    return p


def _layer3_stride(seed: int) -> Program:
    """Keeping resolution in layer3 (stride 1 in its first block and shortcut): it runs, the design says 4x4."""
    p = resnet(seed)
    p.model.layer3[0].conv1.stride = (1, 1)
    p.model.layer3[0].downsample[0].stride = (1, 1)
    return p


class SmallNet(nn.Module):
    """A 32x32 classifier whose stem is a 3x3 stride-2 conv without padding: row and column 31 are never read."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.BatchNorm2d(16), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.body(self.stem(x)).flatten(1))


def _unread(seed: int) -> Program:
    torch.manual_seed(seed)
    return Program(SmallNet().eval(), torch.randn(2, 3, 32, 32))


def _pw_typo(seed: int) -> Program:
    torch.manual_seed(seed)
    return Program(MobileNet(pw_in=16).eval(), torch.randn(2, 3, 64, 64), dict(MOBILENET_DESIGN))


class _SkipMixUp(UNet):
    """The decoder's first DoubleConv declared for the upsampled half only (16 in_channels), not the concatenation."""

    def __init__(self):
        super().__init__()
        self.up1.conv[0] = nn.Conv2d(16, 16, 3, padding=1, bias=False)


CASES = [
    Case("resnet18_like", "shape_ledger", resnet, _ledger),
    Case("resnet18_like_designed", "shape_ledger", resnet, _designed),
    Case("vgg_like", "shape_ledger", _build(VGG, (2, 3, 64, 64), VGG_DESIGN), _ledger),
    Case("vgg_like_designed", "shape_ledger", _build(VGG, (2, 3, 64, 64), VGG_DESIGN), _designed),
    Case("mobilenet_like", "shape_ledger", _build(MobileNet, (2, 3, 64, 64), MOBILENET_DESIGN), _ledger),
    Case("mobilenet_like_designed", "shape_ledger", _build(MobileNet, (2, 3, 64, 64), MOBILENET_DESIGN), _designed),
    Case("unet_skip_concat", "shape_ledger", _build(UNet, (2, 3, 32, 32), UNET_DESIGN), _ledger),
    Case("unet_skip_concat_designed", "shape_ledger", _build(UNet, (2, 3, 32, 32), UNET_DESIGN), _designed),
    Case("audio_conv1d", "shape_ledger", _build(AudioNet, (2, 1, 4096), AUDIO_DESIGN), _ledger),
    Case("audio_conv1d_designed", "shape_ledger", _build(AudioNet, (2, 1, 4096), AUDIO_DESIGN), _designed),
    Case("fc_in_features_patched", "shape_ledger", _fc_patched, _designed, bug=True, where=("layer4",),
         kind="shape.design_mismatch"),
    Case("avgpool_removed", "shape_ledger", _no_avgpool, _ledger, bug=True, where=("fc",),
         kind="shape.flatten_mismatch"),
    Case("avgpool_removed_designed", "shape_ledger", _no_avgpool, _designed, bug=True, where=("avgpool",),
         kind="shape.design_mismatch"),
    Case("layer3_stride_changed", "shape_ledger", _layer3_stride, _designed, bug=True, where=("layer3",),
         kind="shape.design_mismatch"),
    Case("stem_drops_last_row", "shape_ledger", _unread, _ledger, bug=True, status="WARN"),
    Case("pointwise_in_channels_typo", "shape_ledger", _pw_typo, _ledger, bug=True, where=("features.4.pw.0",),
         kind="shape.mismatch"),
    Case("unet_decoder_in_channels", "shape_ledger", _build(_SkipMixUp, (2, 3, 32, 32), UNET_DESIGN), _designed,
         bug=True, where=("up1.conv.0",), kind="shape.mismatch"),
]
