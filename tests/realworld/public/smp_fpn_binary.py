"""Binary segmentation with segmentation_models.pytorch, as its ``binary_segmentation_intro`` notebook trains it:
``PetModel`` (a LightningModule) wraps ``smp.create_model("FPN", "resnet34", in_channels=3, classes=1)`` (a
ResNet encoder returning six feature maps, the FPN decoder: lateral 1x1 convs with nearest upsampling, four
segmentation branches of 3x3 conv + GroupNorm + ReLU with bilinear upsampling, summed, Dropout2d 0.2, a 1x1
segmentation head with x4 bilinear upsampling), normalizes the image with the encoder's preprocessing mean/std in
``forward``, and trains ``smp.losses.DiceLoss(BINARY_MODE, from_logits=True)`` with Adam lr 1e-4 under Lightning's
automatic optimization.

Source: https://github.com/qubvel/segmentation_models.pytorch
Commit: bd7f877fec51309a1a7de7670aed232954450037
Files: examples/binary_segmentation_intro.ipynb, segmentation_models_pytorch/decoders/fpn/{model,decoder}.py,
  segmentation_models_pytorch/base/{model,heads,modules,initialization}.py, segmentation_models_pytorch/encoders/
  {resnet,_base}.py, segmentation_models_pytorch/losses/{dice,_functional,constants}.py,
  segmentation_models_pytorch/datasets/oxford_pet.py (SimpleOxfordPetDataset's sample layout)
License: MIT (Copyright (c) 2019, Pavel Iakubovskii; LICENSES/qubvel-segmentation_models.pytorch.txt)
Domain: semantic segmentation (binary masks, Dice loss, FPN over a ResNet encoder, Lightning module)

Deviations from the original:
- the encoder: smp's ``ResNetEncoder`` subclasses torchvision's ``ResNet`` (torchvision is not installed): the
  ``_tv_resnet.ResNet`` written out here stands in for it, with the encoder class (``get_stages``, ``forward``,
  ``out_channels``, ``output_stride``) copied; resnet34's BasicBlock [3, 4, 6, 3] at width 64 -> [1, 1, 1, 1] at
  width 8 (out_channels (3, 8, 8, 16, 32, 64)); ``encoder_weights="imagenet"`` -> None (no download, no encoder
  weights); the decoder's pyramid_channels 256 -> 32 and segmentation_channels 128 -> 32 (GroupNorm(32, ...)
  needs a multiple of 32); ``smp.create_model`` / ``get_encoder`` are replaced by building ``FPN`` directly;
  ``SMPHubMixin``, ``predict`` and the aux classification head (not configured) are left out;
- data: the Oxford-IIIT Pet download is replaced by synthetic 64x64 samples made from ``seed`` in
  ``SimpleOxfordPetDataset``'s layout (``image`` uint8 CHW in 0..255, ``mask`` float 1xHxW in {0, 1}): a noisy dark
  background (0..100) with one bright "pet" ellipse (130..255) whose pixels are the mask; 256 -> 64 pixels, batch
  16 -> 8, 96 training and 16 validation samples, no workers; at lr 1e-4 the Dice loss falls slowly and noisily:
  ``SELF_CHECK_STEPS`` is 60; ``get_preprocessing_params`` returns resnet34's ImageNet settings as a constant
  (the notebook normalizes the 0..255 image with them, as written);
- Lightning: the notebook targets pytorch-lightning 1.5 (``training_epoch_end`` hooks, removed in Lightning 2);
  no ``Trainer`` is run: one ``train_step`` is one batch of automatic optimization as Lightning runs it
  (``optimizer_step`` calls ``optimizer.step(closure)``; the closure runs ``training_step``, the
  ``optimizer_zero_grad`` hook and ``loss.backward()``); ``shared_step``'s tp/fp/fn/tn statistics and the
  epoch-end IoU logging (``smp.metrics``, for logging only) are left out; ``eval_fn`` is the validation step's
  dataset IoU at threshold 0.5 on a given batch (``eval()``, no gradients);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, PLR0402, UP006, UP008, UP032, UP035, UP045  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from typing import List, Optional

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.loss import _Loss
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tv_resnet import BasicBlock, ResNet

IMG, N_TRAIN, N_VAL, BATCH_SIZE = 64, 96, 16, 8
SELF_CHECK_STEPS = 60

# ---- segmentation_models_pytorch/losses/constants.py ----------------------------------------------------------

BINARY_MODE: str = "binary"
MULTICLASS_MODE: str = "multiclass"
MULTILABEL_MODE: str = "multilabel"


# ---- segmentation_models_pytorch/losses/_functional.py -------------------------------------------------------

def to_tensor(x, dtype=None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        if dtype is not None:
            x = x.type(dtype)
        return x
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
        if dtype is not None:
            x = x.type(dtype)
        return x
    if isinstance(x, (list, tuple)):
        x = np.array(x)
        x = torch.from_numpy(x)
        if dtype is not None:
            x = x.type(dtype)
        return x


def soft_dice_score(
    output: torch.Tensor,
    target: torch.Tensor,
    smooth: float = 0.0,
    eps: float = 1e-7,
    dims=None,
) -> torch.Tensor:
    assert output.size() == target.size()
    if dims is not None:
        intersection = torch.sum(output * target, dim=dims)
        cardinality = torch.sum(output + target, dim=dims)
    else:
        intersection = torch.sum(output * target)
        cardinality = torch.sum(output + target)
    dice_score = (2.0 * intersection + smooth) / (cardinality + smooth).clamp_min(eps)
    return dice_score


# ---- segmentation_models_pytorch/losses/dice.py --------------------------------------------------------------

class DiceLoss(_Loss):
    def __init__(
        self,
        mode: str,
        classes: Optional[List[int]] = None,
        log_loss: bool = False,
        from_logits: bool = True,
        smooth: float = 0.0,
        ignore_index: Optional[int] = None,
        eps: float = 1e-7,
    ):
        assert mode in {BINARY_MODE, MULTILABEL_MODE, MULTICLASS_MODE}
        super(DiceLoss, self).__init__()
        self.mode = mode
        if classes is not None:
            assert (
                mode != BINARY_MODE
            ), "Masking classes is not supported with mode=binary"
            classes = to_tensor(classes, dtype=torch.long)

        self.classes = classes
        self.from_logits = from_logits
        self.smooth = smooth
        self.eps = eps
        self.log_loss = log_loss
        self.ignore_index = ignore_index

    def forward(self, y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
        assert y_true.size(0) == y_pred.size(0)

        if self.from_logits:
            # Apply activations to get [0..1] class probabilities
            # Using Log-Exp as this gives more numerically stable result and does not cause vanishing gradient on
            # extreme values 0 and 1
            if self.mode == MULTICLASS_MODE:
                y_pred = y_pred.log_softmax(dim=1).exp()
            else:
                y_pred = F.logsigmoid(y_pred).exp()

        bs = y_true.size(0)
        num_classes = y_pred.size(1)
        dims = (0, 2)

        if self.mode == BINARY_MODE:
            y_true = y_true.view(bs, 1, -1)
            y_pred = y_pred.view(bs, 1, -1)

            if self.ignore_index is not None:
                mask = y_true != self.ignore_index
                y_pred = y_pred * mask
                y_true = y_true * mask

        if self.mode == MULTICLASS_MODE:
            y_true = y_true.view(bs, -1)
            y_pred = y_pred.view(bs, num_classes, -1)

            if self.ignore_index is not None:
                mask = y_true != self.ignore_index
                y_pred = y_pred * mask.unsqueeze(1)

                y_true = F.one_hot(
                    (y_true * mask).to(torch.long), num_classes
                )  # N,H*W -> N,H*W, C
                y_true = y_true.permute(0, 2, 1) * mask.unsqueeze(1)  # N, C, H*W
            else:
                y_true = F.one_hot(y_true, num_classes)  # N,H*W -> N,H*W, C
                y_true = y_true.permute(0, 2, 1)  # N, C, H*W

        if self.mode == MULTILABEL_MODE:
            y_true = y_true.view(bs, num_classes, -1)
            y_pred = y_pred.view(bs, num_classes, -1)

            if self.ignore_index is not None:
                mask = y_true != self.ignore_index
                y_pred = y_pred * mask
                y_true = y_true * mask

        scores = self.compute_score(
            y_pred, y_true.type_as(y_pred), smooth=self.smooth, eps=self.eps, dims=dims
        )

        if self.log_loss:
            loss = -torch.log(scores.clamp_min(self.eps))
        else:
            loss = 1.0 - scores

        # Dice loss is undefined for non-empty classes
        # So we zero contribution of channel that does not have true pixels
        # NOTE: A better workaround would be to use loss term `mean(y_pred)`
        # for this case, however it will be a modified jaccard loss

        mask = y_true.sum(dims) > 0
        loss *= mask.to(loss.dtype)

        if self.classes is not None:
            loss = loss[self.classes]

        return self.aggregate_loss(loss)

    def aggregate_loss(self, loss):
        return loss.mean()

    def compute_score(
        self, output, target, smooth=0.0, eps=1e-7, dims=None
    ) -> torch.Tensor:
        return soft_dice_score(output, target, smooth, eps, dims)


# ---- segmentation_models_pytorch/encoders/_base.py, encoders/resnet.py ----------------------------------------

class EncoderMixin:
    """Add encoder functionality such as:
    - output channels specification of feature tensors (produced by encoder)
    - patching first convolution for arbitrary input channels
    """

    _output_stride = 32

    @property
    def out_channels(self):
        """Return channels dimensions for each tensor of forward output of encoder"""
        return self._out_channels[: self._depth + 1]

    @property
    def output_stride(self):
        return min(self._output_stride, 2**self._depth)

    def get_stages(self):
        """Override it in your implementation"""
        raise NotImplementedError


class ResNetEncoder(ResNet, EncoderMixin):
    def __init__(self, out_channels, depth=5, **kwargs):
        super().__init__(**kwargs)
        self._depth = depth
        self._out_channels = out_channels
        self._in_channels = 3

        del self.fc
        del self.avgpool

    def get_stages(self):
        return [
            nn.Identity(),
            nn.Sequential(self.conv1, self.bn1, self.relu),
            nn.Sequential(self.maxpool, self.layer1),
            self.layer2,
            self.layer3,
            self.layer4,
        ]

    def forward(self, x):
        stages = self.get_stages()

        features = []
        for i in range(self._depth + 1):
            x = stages[i](x)
            features.append(x)

        return features


ENCODER_PARAMS = {
    "out_channels": (3, 8, 8, 16, 32, 64),
    "block": BasicBlock,
    "layers": [1, 1, 1, 1],
    "width": 8,
}


def get_encoder(name, in_channels=3, depth=5, weights=None):
    params = dict(ENCODER_PARAMS)
    params.update(depth=depth)
    encoder = ResNetEncoder(**params)
    assert weights is None and in_channels == 3
    return encoder


def get_preprocessing_params(encoder_name, pretrained="imagenet"):
    # pretrained_settings["resnet34"]["imagenet"]
    return {"input_space": "RGB", "input_range": [0, 1], "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


# ---- segmentation_models_pytorch/base/ -----------------------------------------------------------------------

class Activation(nn.Module):
    def __init__(self, name, **params):
        super().__init__()

        if name is None or name == "identity":
            self.activation = nn.Identity(**params)
        elif name == "sigmoid":
            self.activation = nn.Sigmoid()
        elif name == "softmax2d":
            self.activation = nn.Softmax(dim=1, **params)
        elif name == "softmax":
            self.activation = nn.Softmax(**params)
        elif name == "logsoftmax":
            self.activation = nn.LogSoftmax(**params)
        elif name == "tanh":
            self.activation = nn.Tanh()
        elif callable(name):
            self.activation = name(**params)
        else:
            raise ValueError(
                f"Activation should be callable/sigmoid/softmax/logsoftmax/tanh/"
                f"argmax/argmax2d/clamp/None; got {name}"
            )

    def forward(self, x):
        return self.activation(x)


class SegmentationHead(nn.Sequential):
    def __init__(
        self, in_channels, out_channels, kernel_size=3, activation=None, upsampling=1
    ):
        conv2d = nn.Conv2d(
            in_channels, out_channels, kernel_size=kernel_size, padding=kernel_size // 2
        )
        upsampling = (
            nn.UpsamplingBilinear2d(scale_factor=upsampling)
            if upsampling > 1
            else nn.Identity()
        )
        activation = Activation(activation)
        super().__init__(conv2d, upsampling, activation)


def initialize_decoder(module):
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_uniform_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)

        elif isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)


def initialize_head(module):
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)


class SegmentationModel(torch.nn.Module):
    def initialize(self):
        initialize_decoder(self.decoder)
        initialize_head(self.segmentation_head)
        if self.classification_head is not None:
            initialize_head(self.classification_head)

    def check_input_shape(self, x):
        h, w = x.shape[-2:]
        output_stride = self.encoder.output_stride
        if h % output_stride != 0 or w % output_stride != 0:
            new_h = (
                (h // output_stride + 1) * output_stride
                if h % output_stride != 0
                else h
            )
            new_w = (
                (w // output_stride + 1) * output_stride
                if w % output_stride != 0
                else w
            )
            raise RuntimeError(
                f"Wrong input shape height={h}, width={w}. Expected image height and width "
                f"divisible by {output_stride}. Consider pad your images to shape ({new_h}, {new_w})."
            )

    def forward(self, x):
        """Sequentially pass `x` trough model`s encoder, decoder and heads"""

        self.check_input_shape(x)

        features = self.encoder(x)
        decoder_output = self.decoder(*features)

        masks = self.segmentation_head(decoder_output)

        if self.classification_head is not None:
            labels = self.classification_head(features[-1])
            return masks, labels

        return masks


# ---- segmentation_models_pytorch/decoders/fpn/decoder.py -----------------------------------------------------

class Conv3x3GNReLU(nn.Module):
    def __init__(self, in_channels, out_channels, upsample=False):
        super().__init__()
        self.upsample = upsample
        self.block = nn.Sequential(
            nn.Conv2d(
                in_channels, out_channels, (3, 3), stride=1, padding=1, bias=False
            ),
            nn.GroupNorm(32, out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        x = self.block(x)
        if self.upsample:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return x


class FPNBlock(nn.Module):
    def __init__(self, pyramid_channels, skip_channels):
        super().__init__()
        self.skip_conv = nn.Conv2d(skip_channels, pyramid_channels, kernel_size=1)

    def forward(self, x, skip=None):
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        skip = self.skip_conv(skip)
        x = x + skip
        return x


class SegmentationBlock(nn.Module):
    def __init__(self, in_channels, out_channels, n_upsamples=0):
        super().__init__()

        blocks = [Conv3x3GNReLU(in_channels, out_channels, upsample=bool(n_upsamples))]

        if n_upsamples > 1:
            for _ in range(1, n_upsamples):
                blocks.append(Conv3x3GNReLU(out_channels, out_channels, upsample=True))

        self.block = nn.Sequential(*blocks)

    def forward(self, x):
        return self.block(x)


class MergeBlock(nn.Module):
    def __init__(self, policy):
        super().__init__()
        if policy not in ["add", "cat"]:
            raise ValueError(
                "`merge_policy` must be one of: ['add', 'cat'], got {}".format(policy)
            )
        self.policy = policy

    def forward(self, x):
        if self.policy == "add":
            return sum(x)
        elif self.policy == "cat":
            return torch.cat(x, dim=1)
        else:
            raise ValueError(
                "`merge_policy` must be one of: ['add', 'cat'], got {}".format(
                    self.policy
                )
            )


class FPNDecoder(nn.Module):
    def __init__(
        self,
        encoder_channels,
        encoder_depth=5,
        pyramid_channels=256,
        segmentation_channels=128,
        dropout=0.2,
        merge_policy="add",
    ):
        super().__init__()

        self.out_channels = (
            segmentation_channels
            if merge_policy == "add"
            else segmentation_channels * 4
        )
        if encoder_depth < 3:
            raise ValueError(
                "Encoder depth for FPN decoder cannot be less than 3, got {}.".format(
                    encoder_depth
                )
            )

        encoder_channels = encoder_channels[::-1]
        encoder_channels = encoder_channels[: encoder_depth + 1]

        self.p5 = nn.Conv2d(encoder_channels[0], pyramid_channels, kernel_size=1)
        self.p4 = FPNBlock(pyramid_channels, encoder_channels[1])
        self.p3 = FPNBlock(pyramid_channels, encoder_channels[2])
        self.p2 = FPNBlock(pyramid_channels, encoder_channels[3])

        self.seg_blocks = nn.ModuleList(
            [
                SegmentationBlock(
                    pyramid_channels, segmentation_channels, n_upsamples=n_upsamples
                )
                for n_upsamples in [3, 2, 1, 0]
            ]
        )

        self.merge = MergeBlock(merge_policy)
        self.dropout = nn.Dropout2d(p=dropout, inplace=True)

    def forward(self, *features):
        c2, c3, c4, c5 = features[-4:]

        p5 = self.p5(c5)
        p4 = self.p4(p5, c4)
        p3 = self.p3(p4, c3)
        p2 = self.p2(p3, c2)

        feature_pyramid = [
            seg_block(p) for seg_block, p in zip(self.seg_blocks, [p5, p4, p3, p2])
        ]
        x = self.merge(feature_pyramid)
        x = self.dropout(x)

        return x


# ---- segmentation_models_pytorch/decoders/fpn/model.py -------------------------------------------------------

class FPN(SegmentationModel):
    def __init__(
        self,
        encoder_name: str = "resnet34",
        encoder_depth: int = 5,
        encoder_weights: Optional[str] = "imagenet",
        decoder_pyramid_channels: int = 256,
        decoder_segmentation_channels: int = 128,
        decoder_merge_policy: str = "add",
        decoder_dropout: float = 0.2,
        in_channels: int = 3,
        classes: int = 1,
        activation: Optional[str] = None,
        upsampling: int = 4,
        aux_params: Optional[dict] = None,
    ):
        super().__init__()

        self.encoder = get_encoder(
            encoder_name,
            in_channels=in_channels,
            depth=encoder_depth,
            weights=encoder_weights,
        )

        self.decoder = FPNDecoder(
            encoder_channels=self.encoder.out_channels,
            encoder_depth=encoder_depth,
            pyramid_channels=decoder_pyramid_channels,
            segmentation_channels=decoder_segmentation_channels,
            dropout=decoder_dropout,
            merge_policy=decoder_merge_policy,
        )

        self.segmentation_head = SegmentationHead(
            in_channels=self.decoder.out_channels,
            out_channels=classes,
            activation=activation,
            kernel_size=1,
            upsampling=upsampling,
        )

        self.classification_head = None

        self.name = "fpn-{}".format(encoder_name)
        self.initialize()


# ---- examples/binary_segmentation_intro.ipynb ----------------------------------------------------------------

class PetModel(pl.LightningModule):

    def __init__(self, arch, encoder_name, in_channels, out_classes, bug=None, **kwargs):
        super().__init__()
        assert arch == "FPN"
        self.model = FPN(
            encoder_name=encoder_name, in_channels=in_channels, classes=out_classes, **kwargs
        )
        self.bug = bug

        # preprocessing parameteres for image
        params = get_preprocessing_params(encoder_name)
        self.register_buffer("std", torch.tensor(params["std"]).view(1, 3, 1, 1))
        self.register_buffer("mean", torch.tensor(params["mean"]).view(1, 3, 1, 1))

        # for image segmentation dice loss could be the best first choice
        self.loss_fn = DiceLoss(BINARY_MODE, from_logits=True)

    def forward(self, image):
        # normalize image here
        image = (image - self.mean) / self.std
        mask = self.model(image)
        return mask

    def shared_step(self, batch, stage):

        image = batch["image"]

        # Shape of the image should be (batch_size, num_channels, height, width)
        # if you work with grayscale images, expand channels dim to have [batch_size, 1, height, width]
        assert image.ndim == 4

        # Check that image dimensions are divisible by 32,
        # encoder and decoder connected by `skip connections` and usually encoder have 5 stages of
        # downsampling by factor 2 (2 ^ 5 = 32); e.g. if we have image with shape 65x65 we will have
        # following shapes of features in encoder and decoder: 84, 42, 21, 10, 5 -> 5, 10, 20, 40, 80
        # and we will get an error trying to concat these features
        h, w = image.shape[2:]
        assert h % 32 == 0 and w % 32 == 0

        mask = batch["mask"]

        # Shape of the mask should be [batch_size, num_classes, height, width]
        # for binary segmentation num_classes = 1
        assert mask.ndim == 4

        # Check that mask values in between 0 and 1, NOT 0 and 255 for binary segmentation
        assert mask.max() <= 1.0 and mask.min() >= 0

        logits_mask = self.forward(image)

        # Predicted mask contains logits, and loss_fn param `from_logits` is set to True
        loss = self.loss_fn(logits_mask, mask)

        return {
            "loss": loss,
        }

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        return self.shared_step(batch, "valid")

    def configure_optimizers(self):
        if self.bug == "optimizer_over_encoder_only":
            return torch.optim.Adam(self.model.encoder.parameters(), lr=0.0001)
        return torch.optim.Adam(self.parameters(), lr=0.0001)


# ---- data (SimpleOxfordPetDataset's sample layout, synthetic) ------------------------------------------------

class SyntheticPetDataset(torch.utils.data.Dataset):
    """A dark noisy background and one bright ellipse, the "pet", whose pixels are the mask."""

    def __init__(self, n, rs):
        yy, xx = np.mgrid[0:IMG, 0:IMG]
        self.samples = []
        for _ in range(n):
            image = rs.uniform(0, 100, size=(IMG, IMG, 3))
            cy, cx = rs.uniform(16, IMG - 16, size=2)
            ry, rx = rs.uniform(6, 18, size=2)
            mask = (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0).astype(np.float32)
            colour = rs.uniform(150, 235, size=3)
            pet = colour + rs.uniform(-20, 20, size=(IMG, IMG, 3))
            image = np.where(mask[..., None] > 0, pet, image).astype(np.uint8)
            sample = dict(image=image, mask=mask)
            sample["image"] = np.moveaxis(image, -1, 0)
            sample["mask"] = np.expand_dims(mask, 0)
            self.samples.append(sample)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, idx):
        return dict(self.samples[idx])


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rs = np.random.RandomState(seed)
    train_dataset = SyntheticPetDataset(N_TRAIN, rs)
    valid_dataset = SyntheticPetDataset(N_VAL, rs)
    train_dataloader = DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                                  generator=torch.Generator().manual_seed(seed))

    model = PetModel("FPN", "resnet34", in_channels=3, out_classes=1, bug=bug,
                     encoder_weights=None, decoder_pyramid_channels=32, decoder_segmentation_channels=32,
                     activation="sigmoid" if bug == "model_activation_with_from_logits" else None)
    optimizer = model.configure_optimizers()

    state = {"it": None, "epoch": -1, "batch_idx": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # a new epoch
            state["epoch"] += 1
            model.train()
            state["it"], state["batch_idx"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        batch["image"] = batch["image"].float()
        result = {}

        def closure():
            loss = model.training_step(batch, batch_idx)["loss"]
            model.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            loss.backward()
            result["loss"] = loss.detach().clone()
            return result["loss"]

        model.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    def eval_fn(model, batch):
        image, mask = batch
        model.eval()
        with torch.no_grad():
            pred_mask = (model(image).sigmoid() > 0.5).float()
        model.train()
        tp = (pred_mask * mask).sum()
        fp = (pred_mask * (1 - mask)).sum()
        fn = ((1 - pred_mask) * mask).sum()
        return float(tp / (tp + fp + fn).clamp_min(1))

    def task_probe(image):
        """The labelling rule: the bright pixels are the pet."""
        return (image.float().mean(dim=1, keepdim=True) > 115.0).float()

    first = next(iter(DataLoader(valid_dataset, batch_size=BATCH_SIZE)))
    return Program(name="smp_fpn_binary", model=model, batch=(first["image"].float(), first["mask"]),
                   loss_fn=model.loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   task_probe=task_probe, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # the model built with activation="sigmoid" while DiceLoss keeps from_logits=True: the loss squashes the
    # probabilities a second time (the activation/from_logits mix-up of
    # https://github.com/qubvel-org/segmentation_models.pytorch/issues/1263).
    Bug("model_activation_with_from_logits", functools.partial(_build, bug="model_activation_with_from_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # configure_optimizers over the encoder's parameters only: the FPN decoder and the head never train (classic).
    Bug("optimizer_over_encoder_only", functools.partial(_build, bug="optimizer_over_encoder_only"),
        "four_structures", ("model.decoder",)),
]
