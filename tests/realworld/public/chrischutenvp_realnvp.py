"""Real NVP (Dinh, Sohl-Dickstein & Bengio) on images, Christopher Chute's PyTorch implementation: dequantized
logit pre-processing with its log-determinant, multi-scale affine couplings (checkerboard then channel-wise masks,
squeeze, factor-out split), weight-normed ResNet scale/translate networks with a ``tanh`` scale and a learnable
weight-normed rescale, the NLL with the ``-log(256)`` per dimension term, Adam with weight decay only on the
weight-norm scales, per-group gradient clipping.

Source: https://github.com/chrischute/real-nvp
Commit: df51ad570baf681e77df4d2265c0f1eb1b5b646c
Files: ``train.py``, ``models/real_nvp/real_nvp.py``, ``models/real_nvp/coupling_layer.py``,
``models/real_nvp/real_nvp_loss.py``, ``models/resnet/resnet.py``, ``models/resnet/residual_block.py``,
``util/array_util.py``, ``util/norm_util.py``, ``util/optim_util.py``
License: MIT (Copyright (c) 2019 Christopher Chute; full text in LICENSES/chrischute-real-nvp.txt)
Domain: generative model, normalizing flow (Real NVP, maximum likelihood in bits per dimension)

Kept as written: ``RealNVP`` (the ``data_constraint`` 0.9 buffer, ``_pre_process``'s dequantization, logit and
log-determinant), ``_RealNVP`` (3 checkerboard couplings, 3 channel-wise couplings on the squeezed tensor, the
alternate-order squeeze and the split into the next scale; 4 checkerboard couplings at the last scale),
``CouplingLayer`` (``s`` and ``t`` masked by ``1 - b``, ``x = (x + t) * exp(s)``, ``sldj += s.sum``), ``Rescale``
under ``nn.utils.weight_norm``, ``ResNet`` and ``ResidualBlock`` (BatchNorm, ``cat(x, -x)``, ReLU, ``WNConv2d``,
the skip sums), ``squeeze_2x2``, ``checkerboard_mask``, ``RealNVPLoss``, ``get_param_groups`` (weight decay 5e-5 on
the ``weight_g`` parameters only), ``clip_grad_norm`` (per group, max norm 100), ``bits_per_dim``, and ``train``'s
loop body (``net.train()``, zero_grad, ``z, sldj = net(x, reverse=False)``, the loss, backward, clipping, step);
Adam at the script's lr 1e-3; ``test`` (eval mode, no_grad, the average loss) as the evaluation.

Deviations from the original:
- CIFAR-10 (torchvision download) is replaced by synthetic 3-channel 8x8 images in [0, 1] made from ``seed``: a
  few smooth coloured blobs on a gradient background, quantized to 256 levels; 512 training and 64 test images.
  ``transforms.RandomHorizontalFlip()`` and ``ToTensor`` are written out (a per-image flip with probability 0.5 drawn
  from the seeded torch generator, in the dataset's ``__getitem__``).
- sizes for 2 CPU cores: images 32x32 -> 8x8, ``mid_channels`` 64 -> 16, ``num_blocks`` 8 -> 2 (``num_scales`` 2
  kept), batch size 64 -> 16, ``num_workers`` 8 -> 0.
- ``train_step`` is one batch of ``train``'s loop (tqdm, the loss meter and the progress bar dropped), returning the
  batch's loss; ``eval_fn`` is ``test``'s average loss on the test images (the checkpoint, the samples and the image
  grid dropped). CPU only: no DataParallel, cudnn or resume.
- ``squeeze_2x2``'s plain (not alt-order) path ends in ``.contiguous()``: current torch keeps the permuted strides
  through the convolutions and elementwise ops that follow, where the torch of 2019 returned contiguous tensors, and
  the original's later ``.view(z.size(0), -1)`` calls raise on them (the values are unchanged).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, PLR0402, RUF059

from __future__ import annotations

import functools
import pathlib
import sys
from enum import IntEnum

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils as utils
import torch.optim as optim
import torch.utils.data as data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 8  # (port) 32
BATCH_SIZE = 16  # (port) 64


# util/array_util.py
def squeeze_2x2(x, reverse=False, alt_order=False):
    """For each spatial position, a sub-volume of shape `1x1x(N^2 * C)`,
    reshape into a sub-volume of shape `NxNxC`, where `N = block_size`.

    Adapted from:
        https://github.com/tensorflow/models/blob/master/research/real_nvp/real_nvp_utils.py
    """
    block_size = 2
    del block_size
    if alt_order:
        n, c, h, w = x.size()

        if reverse:
            if c % 4 != 0:
                raise ValueError('Number of channels must be divisible by 4, got {}.'.format(c))
            c //= 4
        else:
            if h % 2 != 0:
                raise ValueError('Height must be divisible by 2, got {}.'.format(h))
            if w % 2 != 0:
                raise ValueError('Width must be divisible by 4, got {}.'.format(w))
        # Defines permutation of input channels (shape is (4, 1, 2, 2)).
        squeeze_matrix = torch.tensor([[[[1., 0.], [0., 0.]]],
                                       [[[0., 0.], [0., 1.]]],
                                       [[[0., 1.], [0., 0.]]],
                                       [[[0., 0.], [1., 0.]]]],
                                      dtype=x.dtype,
                                      device=x.device)
        perm_weight = torch.zeros((4 * c, c, 2, 2), dtype=x.dtype, device=x.device)
        for c_idx in range(c):
            slice_0 = slice(c_idx * 4, (c_idx + 1) * 4)
            slice_1 = slice(c_idx, c_idx + 1)
            perm_weight[slice_0, slice_1, :, :] = squeeze_matrix
        shuffle_channels = torch.tensor([c_idx * 4 for c_idx in range(c)]
                                        + [c_idx * 4 + 1 for c_idx in range(c)]
                                        + [c_idx * 4 + 2 for c_idx in range(c)]
                                        + [c_idx * 4 + 3 for c_idx in range(c)])
        perm_weight = perm_weight[shuffle_channels, :, :, :]

        if reverse:
            x = F.conv_transpose2d(x, perm_weight, stride=2)
        else:
            x = F.conv2d(x, perm_weight, stride=2)
    else:
        b, c, h, w = x.size()
        x = x.permute(0, 2, 3, 1)

        if reverse:
            if c % 4 != 0:
                raise ValueError('Number of channels {} is not divisible by 4'.format(c))
            x = x.view(b, h, w, c // 4, 2, 2)
            x = x.permute(0, 1, 4, 2, 5, 3)
            x = x.contiguous().view(b, 2 * h, 2 * w, c // 4)
        else:
            if h % 2 != 0 or w % 2 != 0:
                raise ValueError('Expected even spatial dims HxW, got {}x{}'.format(h, w))
            x = x.view(b, h // 2, 2, w // 2, 2, c)
            x = x.permute(0, 1, 3, 5, 2, 4)
            x = x.contiguous().view(b, h // 2, w // 2, c * 4)

        x = x.permute(0, 3, 1, 2).contiguous()  # (port) .contiguous(): see the docstring

    return x


def checkerboard_mask(height, width, reverse=False, dtype=torch.float32,
                      device=None, requires_grad=False):
    """Get a checkerboard mask, such that no two entries adjacent entries
    have the same value. In non-reversed mask, top-left entry is 0.
    """
    checkerboard = [[((i % 2) + j) % 2 for j in range(width)] for i in range(height)]
    mask = torch.tensor(checkerboard, dtype=dtype, device=device, requires_grad=requires_grad)

    if reverse:
        mask = 1 - mask

    # Reshape to (1, 1, height, width) for broadcasting with tensors of shape (B, C, H, W)
    mask = mask.view(1, 1, height, width)

    return mask


# util/norm_util.py
def get_param_groups(net, weight_decay, norm_suffix='weight_g', verbose=False):
    """Get two parameter groups from `net`: One named "normalized" which will
    override the optimizer with `weight_decay`, and one named "unnormalized"
    which will inherit all hyperparameters from the optimizer.
    """
    norm_params = []
    unnorm_params = []
    for n, p in net.named_parameters():
        if n.endswith(norm_suffix):
            norm_params.append(p)
        else:
            unnorm_params.append(p)

    param_groups = [{'name': 'normalized', 'params': norm_params, 'weight_decay': weight_decay},
                    {'name': 'unnormalized', 'params': unnorm_params}]

    if verbose:
        print('{} normalized parameters'.format(len(norm_params)))
        print('{} unnormalized parameters'.format(len(unnorm_params)))

    return param_groups


class WNConv2d(nn.Module):
    """Weight-normalized 2d convolution."""
    def __init__(self, in_channels, out_channels, kernel_size, padding, bias=True):
        super(WNConv2d, self).__init__()
        self.conv = nn.utils.weight_norm(
            nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, bias=bias))

    def forward(self, x):
        x = self.conv(x)

        return x


# util/optim_util.py
def bits_per_dim(x, nll):
    dim = np.prod(x.size()[1:])
    bpd = nll / (np.log(2) * dim)

    return bpd


def clip_grad_norm(optimizer, max_norm, norm_type=2):
    for group in optimizer.param_groups:
        utils.clip_grad_norm_(group['params'], max_norm, norm_type)


# models/resnet/residual_block.py
class ResidualBlock(nn.Module):
    """ResNet basic block with weight norm."""
    def __init__(self, in_channels, out_channels):
        super(ResidualBlock, self).__init__()

        self.in_norm = nn.BatchNorm2d(in_channels)
        self.in_conv = WNConv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)

        self.out_norm = nn.BatchNorm2d(out_channels)
        self.out_conv = WNConv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=True)

    def forward(self, x):
        skip = x

        x = self.in_norm(x)
        x = F.relu(x)
        x = self.in_conv(x)

        x = self.out_norm(x)
        x = F.relu(x)
        x = self.out_conv(x)

        x = x + skip

        return x


# models/resnet/resnet.py
class ResNet(nn.Module):
    """ResNet for scale and translate factors in Real NVP."""
    def __init__(self, in_channels, mid_channels, out_channels,
                 num_blocks, kernel_size, padding, double_after_norm):
        super(ResNet, self).__init__()
        self.in_norm = nn.BatchNorm2d(in_channels)
        self.double_after_norm = double_after_norm
        self.in_conv = WNConv2d(2 * in_channels, mid_channels, kernel_size, padding, bias=True)
        self.in_skip = WNConv2d(mid_channels, mid_channels, kernel_size=1, padding=0, bias=True)

        self.blocks = nn.ModuleList([ResidualBlock(mid_channels, mid_channels)
                                     for _ in range(num_blocks)])
        self.skips = nn.ModuleList([WNConv2d(mid_channels, mid_channels, kernel_size=1, padding=0, bias=True)
                                    for _ in range(num_blocks)])

        self.out_norm = nn.BatchNorm2d(mid_channels)
        self.out_conv = WNConv2d(mid_channels, out_channels, kernel_size=1, padding=0, bias=True)

    def forward(self, x):
        x = self.in_norm(x)
        if self.double_after_norm:
            x *= 2.
        x = torch.cat((x, -x), dim=1)
        x = F.relu(x)
        x = self.in_conv(x)
        x_skip = self.in_skip(x)

        for block, skip in zip(self.blocks, self.skips):
            x = block(x)
            x_skip += skip(x)

        x = self.out_norm(x_skip)
        x = F.relu(x)
        x = self.out_conv(x)

        return x


# models/real_nvp/coupling_layer.py
class MaskType(IntEnum):
    CHECKERBOARD = 0
    CHANNEL_WISE = 1


class CouplingLayer(nn.Module):
    """Coupling layer in RealNVP."""
    def __init__(self, in_channels, mid_channels, num_blocks, mask_type, reverse_mask, bug=None):
        super(CouplingLayer, self).__init__()
        self.bug = bug

        # Save mask info
        self.mask_type = mask_type
        self.reverse_mask = reverse_mask

        # Build scale and translate network
        if self.mask_type == MaskType.CHANNEL_WISE:
            in_channels //= 2
        self.st_net = ResNet(in_channels, mid_channels, 2 * in_channels,
                             num_blocks=num_blocks, kernel_size=3, padding=1,
                             double_after_norm=(self.mask_type == MaskType.CHECKERBOARD))

        # Learnable scale for s
        self.rescale = nn.utils.weight_norm(Rescale(in_channels))

    def forward(self, x, sldj=None, reverse=True):
        if self.mask_type == MaskType.CHECKERBOARD:
            # Checkerboard mask
            b = checkerboard_mask(x.size(2), x.size(3), self.reverse_mask, device=x.device)
            x_b = x * b
            st = self.st_net(x_b)
            s, t = st.chunk(2, dim=1)
            s = self.rescale(torch.tanh(s))
            if self.bug != "st_not_masked":
                s = s * (1 - b)
                t = t * (1 - b)

            # Scale and translate
            if reverse:
                inv_exp_s = s.mul(-1).exp()
                if torch.isnan(inv_exp_s).any():
                    raise RuntimeError('Scale factor has NaN entries')
                x = x * inv_exp_s - t
            else:
                exp_s = s.exp()
                if torch.isnan(exp_s).any():
                    raise RuntimeError('Scale factor has NaN entries')
                x = (x + t) * exp_s

                # Add log-determinant of the Jacobian
                if self.bug != "sldj_not_accumulated":
                    sldj += s.view(s.size(0), -1).sum(-1)
        else:
            # Channel-wise mask
            if self.reverse_mask:
                x_id, x_change = x.chunk(2, dim=1)
            else:
                x_change, x_id = x.chunk(2, dim=1)

            st = self.st_net(x_id)
            s, t = st.chunk(2, dim=1)
            s = self.rescale(torch.tanh(s))

            # Scale and translate
            if reverse:
                inv_exp_s = s.mul(-1).exp()
                if torch.isnan(inv_exp_s).any():
                    raise RuntimeError('Scale factor has NaN entries')
                x_change = x_change * inv_exp_s - t
            else:
                exp_s = s.exp()
                if torch.isnan(exp_s).any():
                    raise RuntimeError('Scale factor has NaN entries')
                x_change = (x_change + t) * exp_s

                # Add log-determinant of the Jacobian
                if self.bug != "sldj_not_accumulated":
                    sldj += s.view(s.size(0), -1).sum(-1)

            if self.reverse_mask:
                x = torch.cat((x_id, x_change), dim=1)
            else:
                x = torch.cat((x_change, x_id), dim=1)

        return x, sldj


class Rescale(nn.Module):
    """Per-channel rescaling. Need a proper `nn.Module` so we can wrap it
    with `torch.nn.utils.weight_norm`.
    """
    def __init__(self, num_channels):
        super(Rescale, self).__init__()
        self.weight = nn.Parameter(torch.ones(num_channels, 1, 1))

    def forward(self, x):
        x = self.weight * x
        return x


# models/real_nvp/real_nvp.py
class RealNVP(nn.Module):
    """RealNVP Model

    Based on the paper:
    "Density estimation using Real NVP"
    by Laurent Dinh, Jascha Sohl-Dickstein, and Samy Bengio
    (https://arxiv.org/abs/1605.08803).
    """
    def __init__(self, num_scales=2, in_channels=3, mid_channels=64, num_blocks=8, bug=None):
        super(RealNVP, self).__init__()
        # Register data_constraint to pre-process images, not learnable
        self.register_buffer('data_constraint', torch.tensor([0.9], dtype=torch.float32))

        self.flows = _RealNVP(0, num_scales, in_channels, mid_channels, num_blocks, bug=bug)

    def forward(self, x, reverse=False):
        sldj = None
        if not reverse:
            # Expect inputs in [0, 1]
            if x.min() < 0 or x.max() > 1:
                raise ValueError('Expected x in [0, 1], got x with min/max {}/{}'
                                 .format(x.min(), x.max()))

            # De-quantize and convert to logits
            x, sldj = self._pre_process(x)

        x, sldj = self.flows(x, sldj, reverse)

        return x, sldj

    def _pre_process(self, x):
        """Dequantize the input image `x` and convert to logits."""
        y = (x * 255. + torch.rand_like(x)) / 256.
        y = (2 * y - 1) * self.data_constraint
        y = (y + 1) / 2
        y = y.log() - (1. - y).log()

        # Save log-determinant of Jacobian of initial transform
        ldj = F.softplus(y) + F.softplus(-y) \
            - F.softplus((1. - self.data_constraint).log() - self.data_constraint.log())
        sldj = ldj.view(ldj.size(0), -1).sum(-1)

        return y, sldj


class _RealNVP(nn.Module):
    """Recursive builder for a `RealNVP` model."""
    def __init__(self, scale_idx, num_scales, in_channels, mid_channels, num_blocks, bug=None):
        super(_RealNVP, self).__init__()

        self.is_last_block = scale_idx == num_scales - 1

        self.in_couplings = nn.ModuleList([
            CouplingLayer(in_channels, mid_channels, num_blocks, MaskType.CHECKERBOARD, reverse_mask=False, bug=bug),
            CouplingLayer(in_channels, mid_channels, num_blocks, MaskType.CHECKERBOARD, reverse_mask=True, bug=bug),
            CouplingLayer(in_channels, mid_channels, num_blocks, MaskType.CHECKERBOARD, reverse_mask=False, bug=bug)
        ])

        if self.is_last_block:
            self.in_couplings.append(
                CouplingLayer(in_channels, mid_channels, num_blocks, MaskType.CHECKERBOARD, reverse_mask=True,
                              bug=bug))
        else:
            self.out_couplings = nn.ModuleList([
                CouplingLayer(4 * in_channels, 2 * mid_channels, num_blocks, MaskType.CHANNEL_WISE,
                              reverse_mask=False, bug=bug),
                CouplingLayer(4 * in_channels, 2 * mid_channels, num_blocks, MaskType.CHANNEL_WISE,
                              reverse_mask=True, bug=bug),
                CouplingLayer(4 * in_channels, 2 * mid_channels, num_blocks, MaskType.CHANNEL_WISE,
                              reverse_mask=False, bug=bug)
            ])
            self.next_block = _RealNVP(scale_idx + 1, num_scales, 2 * in_channels, 2 * mid_channels, num_blocks,
                                       bug=bug)

    def forward(self, x, sldj, reverse=False):
        if reverse:
            if not self.is_last_block:
                # Re-squeeze -> split -> next block
                x = squeeze_2x2(x, reverse=False, alt_order=True)
                x, x_split = x.chunk(2, dim=1)
                x, sldj = self.next_block(x, sldj, reverse)
                x = torch.cat((x, x_split), dim=1)
                x = squeeze_2x2(x, reverse=True, alt_order=True)

                # Squeeze -> 3x coupling (channel-wise)
                x = squeeze_2x2(x, reverse=False)
                for coupling in reversed(self.out_couplings):
                    x, sldj = coupling(x, sldj, reverse)
                x = squeeze_2x2(x, reverse=True)

            for coupling in reversed(self.in_couplings):
                x, sldj = coupling(x, sldj, reverse)
        else:
            for coupling in self.in_couplings:
                x, sldj = coupling(x, sldj, reverse)

            if not self.is_last_block:
                # Squeeze -> 3x coupling (channel-wise)
                x = squeeze_2x2(x, reverse=False)
                for coupling in self.out_couplings:
                    x, sldj = coupling(x, sldj, reverse)
                x = squeeze_2x2(x, reverse=True)

                # Re-squeeze -> split -> next block
                x = squeeze_2x2(x, reverse=False, alt_order=True)
                x, x_split = x.chunk(2, dim=1)
                x, sldj = self.next_block(x, sldj, reverse)
                x = torch.cat((x, x_split), dim=1)
                x = squeeze_2x2(x, reverse=True, alt_order=True)

        return x, sldj


# models/real_nvp/real_nvp_loss.py
class RealNVPLoss(nn.Module):
    """Get the NLL loss for a RealNVP model."""
    def __init__(self, k=256):
        super(RealNVPLoss, self).__init__()
        self.k = k

    def forward(self, z, sldj):
        prior_ll = -0.5 * (z ** 2 + np.log(2 * np.pi))
        prior_ll = prior_ll.view(z.size(0), -1).sum(-1) \
            - np.log(self.k) * np.prod(z.size()[1:])
        ll = prior_ll + sldj
        nll = -ll.mean()

        return nll


# (port) data: synthetic CIFAR-like images
class BlobImages(data.Dataset):
    """3x8x8 images in [0, 1]: a colour gradient background plus 2 smooth coloured blobs, quantized to 256 levels;
    ``RandomHorizontalFlip`` written out (probability 0.5, from a seeded generator)."""

    def __init__(self, seed, n, flip):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, IMG), torch.linspace(0, 1, IMG), indexing="ij")
        base = torch.rand(n, 3, 1, 1, generator=g) * 0.4 + 0.1
        grad = (torch.rand(n, 3, 1, 1, generator=g) - 0.5) * 0.4
        imgs = base + grad * (yy + xx)[None, None] / 2
        for _ in range(2):
            cy, cx = torch.rand(n, 1, 1, 1, generator=g), torch.rand(n, 1, 1, 1, generator=g)
            col = torch.rand(n, 3, 1, 1, generator=g) * 0.5
            blob = torch.exp(-((yy[None, None] - cy) ** 2 + (xx[None, None] - cx) ** 2) / 0.05)
            imgs = imgs + col * blob
        self.images = (imgs.clamp(0, 1) * 255).round() / 255
        self.flip = flip
        self.g = torch.Generator().manual_seed(seed + 1)

    def __getitem__(self, i):
        x = self.images[i]
        if self.flip and float(torch.rand((), generator=self.g)) < 0.5:
            x = torch.flip(x, dims=(2,))
        return x, 0

    def __len__(self):
        return len(self.images)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = 'cpu'
    trainset = BlobImages(seed, 512, flip=True)
    trainloader = data.DataLoader(trainset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                                  generator=torch.Generator().manual_seed(seed))
    testset = BlobImages(seed + 1000, 64, flip=False)
    testloader = data.DataLoader(testset, batch_size=BATCH_SIZE, shuffle=False, num_workers=0)

    # Model
    net = RealNVP(num_scales=2, in_channels=3, mid_channels=16, num_blocks=2, bug=bug)  # (port) 64, 8
    net = net.to(device)

    loss_fn = RealNVPLoss()
    param_groups = get_param_groups(net, 5e-5, norm_suffix='weight_g')
    optimizer = optim.Adam(param_groups, lr=1e-3)
    max_grad_norm = 100.

    st = {"it": iter(trainloader)}

    def train_step():
        net.train()
        try:
            x, _ = next(st["it"])
        except StopIteration:
            st["it"] = iter(trainloader)
            x, _ = next(st["it"])
        x = x.to(device)
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        z, sldj = net(x, reverse=False)
        loss = loss_fn(z, sldj)
        loss.backward()
        clip_grad_norm(optimizer, max_grad_norm)
        optimizer.step()
        return loss.detach()

    def test(model=None, batch=None):
        net.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, _ in testloader:
                x = x.to(device)
                z, sldj = net(x, reverse=False)
                loss = loss_fn(z, sldj)
                total += loss.item() * x.size(0)
                count += x.size(0)
        return float(bits_per_dim(x, total / count))

    def program_loss(out, _target=None):
        z, sldj = out
        return loss_fn(z, sldj)

    batch = (trainset.images[:BATCH_SIZE], torch.zeros(BATCH_SIZE, dtype=torch.long))
    return Program(name="chrischutenvp_realnvp", model=net, batch=batch, loss_fn=program_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=test, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the couplings' log-determinants not added to sldj (classic): the likelihood drops the volume change, so the
    # flow is paid to contract the data towards the prior's mode.
    Bug("sldj_not_accumulated", functools.partial(_build, bug="sldj_not_accumulated"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``s`` and ``t`` not masked by ``1 - b`` in the checkerboard couplings (the masking whose role is discussed in
    # https://github.com/chrischute/real-nvp/issues/4): the conditioning pixels are rescaled by a function of
    # themselves, the map is no longer triangular and sldj no longer its log-determinant.
    Bug("st_not_masked", functools.partial(_build, bug="st_not_masked"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() left out (classic): gradients accumulate over batches.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
