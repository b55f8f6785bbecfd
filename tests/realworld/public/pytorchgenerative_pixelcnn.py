"""PixelCNN (van den Oord et al.) from Eugen Hotaj's pytorch-generative, the ``reproduce`` script of
``models/autoregressive/pixel_cnn.py``: a 7x7 causal convolution with the centre pixel masked, causal residual blocks
(1x1 down, 3x3 causal convolution with the centre kept, 1x1 up, ReLU before each) added again around each block in
``forward``, a two-layer 1x1 head to one logit per pixel; the summed per-pixel Bernoulli NLL
(``binary_cross_entropy_with_logits`` on the flattened image, summed over pixels, averaged over the batch) on
dynamically binarized images, Adam (lr 1e-3) and a ``MultiplicativeLR`` (0.999977 per step), driven by the
repository's ``Trainer`` (zero_grad, loss, backward, ``clip_grad_norm_`` with the no-op max norm 1e50, step,
scheduler step).

Source: https://github.com/EugenHotaj/pytorch-generative
Commit: d1f0a5ce45195fed3e2787be86ad87c7c8229481
Files: pytorch_generative/models/autoregressive/pixel_cnn.py, pytorch_generative/nn/convolution.py,
pytorch_generative/models/base.py, pytorch_generative/trainer.py, pytorch_generative/datasets.py
License: MIT (Copyright (c) 2020 Eugen Hotaj; full text in LICENSES/EugenHotaj-pytorch-generative.txt)
Domain: vision, generative model (autoregressive PixelCNN, masked convolutions, Bernoulli likelihood)

Deviations from the original:
- sizes for 2 CPU cores: images 28x28 -> 12x12; ``n_residual`` 15 -> 4 (``residual_channels`` 16 and
  ``head_channels`` 32 kept); batch_size 256 -> 16;
- data: torchvision's MNIST (``ToTensor`` then ``_dynamically_binarize``) is replaced by 256 synthetic 12x12 grey
  "digits" in [0, 1] made from ``seed`` (one of four stroke shapes, shifted by up to two pixels, soft edges),
  binarized per draw by ``_dynamically_binarize`` (a Bernoulli sample with the pixel as probability, as written)
  under a seeded generator; the loaders shuffle with a ``torch.Generator(seed)``, no workers;
- the ``Trainer``'s tensorboard writer, checkpoints, logging, timing and sampling are dropped; ``n_gpus`` 0 (CPU);
  ``GenerativeModel``'s shape buffers and ``AutoregressiveModel.sample`` are copied (sampling is not run;
  ``GenerativeModel.load_state_dict`` and the docstrings' argument lists are left out);
- one ``train_step`` is one ``Trainer._train_one_batch`` on the next batch, returning the loss; ``eval_fn`` is the
  mean of ``_eval_one_batch``'s loss over the test loader; the Program's batch is ``(x, x)`` (the targets are the
  image itself) and ``loss_fn(preds, x)`` the script's ``loss_fn(x, _, preds)``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import abc
import functools
import pathlib
import sys

import torch
from torch import distributions, nn, optim
from torch.nn import functional as F
from torch.nn import utils
from torch.optim import lr_scheduler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 12
N_TRAIN = 256


# pytorch_generative/nn/convolution.py
class CausalConv2d(nn.Conv2d):
    """A Conv2d layer masked to respect the autoregressive property.

    Autoregressive masking means that the computation of the current pixel only
    depends on itself, pixels to the left, and pixels above. When mask_center=True, the
    computation of the current pixel does not depend on itself.
    """

    def __init__(self, mask_center, *args, **kwargs):
        super().__init__(*args, **kwargs)
        i, o, h, w = self.weight.shape
        mask = torch.zeros((i, o, h, w))
        mask.data[:, :, : h // 2, :] = 1
        mask.data[:, :, h // 2, : w // 2 + int(not mask_center)] = 1
        self.register_buffer("mask", mask)

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


# pytorch_generative/models/base.py
def _default_sample_fn(logits):
    return distributions.Bernoulli(logits=logits).sample()


class GenerativeModel(abc.ABC, nn.Module):
    """Base class inherited by all generative models in pytorch-generative."""

    def __call__(self, x, *args, **kwargs):
        """Saves input tensor attributes so they can be accessed during sampling."""
        if getattr(self, "_c", None) is None and x.dim() == 4:
            _, c, h, w = x.shape
            self._create_shape_buffers(c, h, w)
        return super().__call__(x, *args, **kwargs)

    def _create_shape_buffers(self, channels, height, width):
        channels = channels if torch.is_tensor(channels) else torch.tensor(channels)
        height = height if torch.is_tensor(height) else torch.tensor(height)
        width = width if torch.is_tensor(width) else torch.tensor(width)
        self.register_buffer("_c", channels)
        self.register_buffer("_h", height)
        self.register_buffer("_w", width)

    @property
    def device(self):
        return next(self.parameters()).device

    @abc.abstractmethod
    def sample(self, n_samples):
        ...


class AutoregressiveModel(GenerativeModel):
    """The base class for Autoregressive generative models."""

    def __init__(self, sample_fn=None):
        super().__init__()
        self._sample_fn = sample_fn or _default_sample_fn

    def _get_conditioned_on(self, n_samples, conditioned_on):
        assert (
            n_samples is not None or conditioned_on is not None
        ), 'Must provided one, and only one, of "n_samples" or "conditioned_on"'
        if conditioned_on is None:
            shape = (n_samples, self._c, self._h, self._w)
            conditioned_on = (torch.ones(shape) * -1).to(self.device)
        else:
            conditioned_on = conditioned_on.clone()
        return conditioned_on

    @torch.no_grad()
    def sample(self, n_samples=None, conditioned_on=None):
        conditioned_on = self._get_conditioned_on(n_samples, conditioned_on)
        n, c, h, w = conditioned_on.shape
        for row in range(h):
            for col in range(w):
                out = self.forward(conditioned_on)[:, :, row, col]
                out = self._sample_fn(out).view(n, c)
                conditioned_on[:, :, row, col] = torch.where(
                    conditioned_on[:, :, row, col] < 0,
                    out,
                    conditioned_on[:, :, row, col],
                )
        return conditioned_on


# pytorch_generative/models/autoregressive/pixel_cnn.py
class CausalResidualBlock(nn.Module):
    """A residual block masked to respect the autoregressive property."""

    def __init__(self, n_channels):
        super().__init__()
        self._net = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(
                in_channels=n_channels, out_channels=n_channels // 2, kernel_size=1
            ),
            nn.ReLU(),
            CausalConv2d(
                mask_center=False,
                in_channels=n_channels // 2,
                out_channels=n_channels // 2,
                kernel_size=3,
                padding=1,
            ),
            nn.ReLU(),
            nn.Conv2d(
                in_channels=n_channels // 2, out_channels=n_channels, kernel_size=1
            ),
        )

    def forward(self, x):
        return x + self._net(x)


class PixelCNN(AutoregressiveModel):
    """The PixelCNN model."""

    def __init__(
        self,
        in_channels=1,
        out_channels=1,
        n_residual=15,
        residual_channels=128,
        head_channels=32,
        sample_fn=None,
        bug=None,
    ):
        super().__init__(sample_fn)
        self._input = CausalConv2d(
            mask_center=bug != "input_center_unmasked",
            in_channels=in_channels,
            out_channels=2 * residual_channels,
            kernel_size=7,
            padding=3,
        )
        self._causal_layers = nn.ModuleList(
            [
                CausalResidualBlock(n_channels=2 * residual_channels)
                for _ in range(n_residual)
            ]
        )
        self._head = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(
                in_channels=2 * residual_channels,
                out_channels=head_channels,
                kernel_size=1,
            ),
            nn.ReLU(),
            nn.Conv2d(
                in_channels=head_channels, out_channels=out_channels, kernel_size=1
            ),
        )

    def forward(self, x):
        x = self._input(x)
        for layer in self._causal_layers:
            x = x + layer(x)
        return self._head(x)


# pytorch_generative/datasets.py, with the MNIST download replaced by synthetic strokes in [0, 1]
def _synthetic_digits(seed, n):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(IMG).float(), torch.arange(IMG).float(), indexing="ij")
    images = torch.zeros(n, 1, IMG, IMG)
    for i in range(n):
        k = int(torch.randint(0, 4, (1,), generator=g))
        dy, dx = (torch.randint(-2, 3, (2,), generator=g).float()).tolist()
        cy, cx = 5.5 + dy, 5.5 + dx
        if k == 0:    # a ring
            d = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
            img = (1.5 - (d - 3.0).abs()).clamp(0, 1)
        elif k == 1:  # a vertical stroke
            img = (1.5 - (xx - cx).abs()).clamp(0, 1) * ((yy - cy).abs() <= 4).float()
        elif k == 2:  # a horizontal stroke
            img = (1.5 - (yy - cy).abs()).clamp(0, 1) * ((xx - cx).abs() <= 4).float()
        else:         # a diagonal
            img = (1.5 - ((yy - cy) - (xx - cx)).abs() / 1.4).clamp(0, 1) * ((yy - cy).abs() <= 4).float()
        images[i, 0] = img
    return images


class Digits(torch.utils.data.Dataset):
    def __init__(self, seed, n):
        self.images = _synthetic_digits(seed, n)
        self.g = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        # _dynamically_binarize: distributions.Bernoulli(probs=x).sample() (with a seeded generator here)
        x = torch.bernoulli(self.images[i], generator=self.g)
        return x, 0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size = 16  # 256 in reproduce()

    train_loader = torch.utils.data.DataLoader(Digits(seed, N_TRAIN), batch_size=batch_size, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))
    test_loader = torch.utils.data.DataLoader(Digits(seed + 1000, 32), batch_size=batch_size)

    model = PixelCNN(
        in_channels=1,
        out_channels=1,
        n_residual=4,  # 15 in reproduce()
        residual_channels=16,
        head_channels=32,
        bug=bug,
    )
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    scheduler = lr_scheduler.MultiplicativeLR(optimizer, lr_lambda=lambda _: 0.999977)

    def loss_fn(x, _, preds):
        batch_size = x.shape[0]
        x, preds = x.view((batch_size, -1)), preds.view((batch_size, -1))
        if bug == "sigmoid_before_bce_with_logits":
            preds = torch.sigmoid(preds)
        loss = F.binary_cross_entropy_with_logits(preds, x, reduction="none")
        return loss.sum(dim=1).mean()

    # trainer.Trainer (clip_grad_norm=None, skip_grad_norm=None, n_gpus=0)
    device = "cpu"
    clip_grad_norm = None
    skip_grad_norm = None
    model = model.to(device)
    state = {"it": iter(train_loader)}

    def _train_one_batch(x, y):
        model.train()
        x = x.to(device)
        if y is not None:
            y = y.to(device)
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        preds = model(x)
        metrics = {"loss": loss_fn(x, y, preds)}
        metrics["loss"].backward()

        max_norm = clip_grad_norm or skip_grad_norm or 1e50
        norm = utils.clip_grad_norm_(model.parameters(), max_norm)
        metrics["grad_norm"] = norm
        if not skip_grad_norm or norm.item() <= skip_grad_norm:
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
        return metrics["loss"].detach()

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            batch = next(state["it"])
        batch = batch if isinstance(batch, (tuple, list)) else (batch, None)
        x, y = batch
        return _train_one_batch(x, y)

    @torch.no_grad()
    def eval_fn(m, _batch):
        m.eval()
        n_examples, total = 0, 0.0
        for x, y in test_loader:
            preds = m(x)
            total += float(loss_fn(x, y, preds)) * x.shape[0]
            n_examples += x.shape[0]
        m.train()
        return total / n_examples

    x0 = next(iter(torch.utils.data.DataLoader(Digits(seed, N_TRAIN), batch_size=batch_size)))[0]

    return Program(name="pytorchgenerative_pixelcnn", model=model, batch=(x0, x0),
                   loss_fn=lambda preds, x: loss_fn(x, None, preds), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the input layer's mask keeps its centre (``mask_center=False``, the type-B mask, where PixelCNN needs type A):
    # every logit sees the very pixel it predicts (classic), so the model copies its input instead of modelling it.
    Bug("input_center_unmasked", functools.partial(_build, bug="input_center_unmasked"), "learning_ledger",
        ("DEPENDENCY",), kind="dependency.target_leak"),
    # a sigmoid put on the logits before ``binary_cross_entropy_with_logits`` (classic): the loss squashes twice and
    # its minimum is no longer the data's likelihood.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # ``optimizer.zero_grad()`` left out of ``_train_one_batch`` (classic): the gradients pile up across steps
    # (a whole-model slip: declared by its mechanism, README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
