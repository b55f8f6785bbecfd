# ruff: noqa: PLR0402, C419, RUF059, F841
"""A convolutional autoencoder with a finite-scalar-quantization bottleneck (Mentzer et al., "Finite Scalar
Quantization: VQ-VAE Made Simple"), from lucidrains/vector-quantize-pytorch's FashionMNIST example.

Source: https://github.com/lucidrains/vector-quantize-pytorch
Commit: 0d7d1aa83334b6f2f8a40306bece75cdaa13d065
Files: ``examples/autoencoder_fsq.py``, ``vector_quantize_pytorch/finite_scalar_quantization.py``,
``vector_quantize_pytorch/utils.py`` (``Sequential``)
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-vector-quantize-pytorch.txt)
Domain: vision, discrete autoencoder (FSQ: tanh-bounded latents rounded with a straight-through estimator to
levels [8, 6, 5], implicit codebook of 240 codes; L1 reconstruction, AdamW)

Kept as written: ``SimpleFSQAutoEncoder`` (conv - maxpool - GELU - conv - maxpool - 1x1 conv to ``len(levels)``
channels, ``FSQ``, conv - upsample - conv - GELU - upsample - conv), the special ``Sequential`` (the quantizer's
extra outputs passed on), ``FSQ`` on the code paths the example takes (no projections since ``dim`` equals
``len(levels)``, one codebook, ``bound`` with ``round_ste``, ``codes_to_indices``, the implicit codebook; no
noise dropout, no symmetry preservation, no rotation), ``train``'s defaults (lr 3e-4, levels [8, 6, 5], AdamW) and
its loop body (zero_grad, next batch, ``out.clamp(-1., 1.)``, ``(out - x).abs().mean()``, backward, step),
``Normalize((0.5,), (0.5,))``.

Deviations from the original:
- data: torchvision's FashionMNIST download is replaced by synthetic 16x16 grayscale "garments" made from
  ``seed`` (ten classes of filled rectangles and bars with a class-dependent layout, jittered by a pixel, with
  pixel noise), scaled to [0, 1] and normalized by ``(x - 0.5) / 0.5`` as ``Normalize`` does; 28x28 -> 16x16
  (both max-pools need a side divisible by 4); ``batch_size`` 256 -> 32; the DataLoader shuffles with a
  ``torch.Generator(seed)``; the device is the CPU;
- einops / einx are not here: ``rearrange`` / ``pack`` / ``unpack`` on FSQ's paths are written out with
  ``permute`` and ``reshape`` (channel last, spatial positions flattened, and back);
- ``autocast('cuda', enabled=False)`` around the quantization (a no-op on the CPU) is dropped; ``tqdm``, ``fire``
  and the progress bar's description are dropped; ``train_step`` is one iteration of the ``for _ in pbar`` loop;
  ``eval_fn`` is the reconstruction L1 on a held-out batch (the example has no evaluation);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from functools import partial, wraps

import torch
import torch.nn as nn
from torch import Tensor, atanh, clamp, int32, tanh, tensor  # noqa: F401
from torch.nn import Module, ModuleList
from torch.optim import AdamW

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16  # (port) FashionMNIST's 28
BATCH = 32  # (port) 256


# finite_scalar_quantization.py: helper functions

def exists(v):
    return v is not None


def default(*args):
    for arg in args:
        if exists(arg):
            return arg
    return None


def identity(t):
    return t


def maybe(fn):
    @wraps(fn)
    def inner(x, *args, **kwargs):
        if not exists(x):
            return x
        return fn(x, *args, **kwargs)
    return inner


# tensor helpers

def round_ste(z):
    """ round with straight through gradients. """
    zhat = z.round()
    return z + (zhat - z).detach()


# main class

class FSQ(Module):
    def __init__(
        self,
        levels,
        dim=None,
        num_codebooks=1,
        keep_num_codebooks_dim=None,
        scale=None,
        allowed_dtypes=(torch.float32, torch.float64),
        channel_first=False,
        projection_has_bias=True,
        return_indices=True,
        force_quantization_f32=True,
        preserve_symmetry=False,
        noise_dropout=0.,
        bound_hard_clamp=False,
        orthogonal_rotation=False,
        bug=None,
    ):
        super().__init__()
        self.bug = bug

        assert not (any([l == 2 for l in levels]) and not preserve_symmetry), \
            'turn on `preserve_symmetry` for using any levels == 2, or use a greater level'

        if isinstance(levels, tuple):
            levels = list(levels)

        _levels = tensor(levels, dtype=int32)
        self.register_buffer('_levels', _levels, persistent=False)

        _basis = torch.cumprod(tensor([1] + levels[:-1]), dim=0, dtype=int32)
        self.register_buffer('_basis', _basis, persistent=False)

        self.scale = scale

        assert not (noise_dropout > 0 and not preserve_symmetry)
        self.preserve_symmetry = preserve_symmetry
        self.noise_dropout = noise_dropout

        codebook_dim = len(levels)
        self.codebook_dim = codebook_dim

        effective_codebook_dim = codebook_dim * num_codebooks
        self.num_codebooks = num_codebooks
        self.effective_codebook_dim = effective_codebook_dim

        keep_num_codebooks_dim = default(keep_num_codebooks_dim, num_codebooks > 1)
        assert not (num_codebooks > 1 and not keep_num_codebooks_dim)
        self.keep_num_codebooks_dim = keep_num_codebooks_dim

        self.dim = default(dim, len(_levels) * num_codebooks)

        self.channel_first = channel_first

        has_projections = self.dim != effective_codebook_dim
        self.project_in = nn.Linear(self.dim, effective_codebook_dim, bias=projection_has_bias) \
            if has_projections else nn.Identity()
        self.project_out = nn.Linear(effective_codebook_dim, self.dim, bias=projection_has_bias) \
            if has_projections else nn.Identity()

        self.has_projections = has_projections

        self.return_indices = return_indices

        if return_indices:
            self.codebook_size = self._levels.prod().item()
            implicit_codebook = self._indices_to_codes(torch.arange(self.codebook_size))
            self.register_buffer('implicit_codebook', implicit_codebook, persistent=False)

        self.allowed_dtypes = allowed_dtypes
        self.force_quantization_f32 = force_quantization_f32

        self.bound_hard_clamp = bound_hard_clamp

        self.orthogonal_rotation = orthogonal_rotation
        assert not orthogonal_rotation  # (port) the example's default; the rotation path is not copied

    def bound(self, z, eps=1e-3, hard_clamp=False):
        """ Bound `z`, an array of shape (..., d). """
        maybe_tanh = tanh if not hard_clamp else partial(clamp, min=-1., max=1.)
        maybe_atanh = atanh if not hard_clamp else identity

        half_l = (self._levels - 1) * (1 + eps) / 2
        offset = torch.where(self._levels % 2 == 0, 0.5, 0.0)
        shift = maybe_atanh(offset / half_l)
        bounded_z = maybe_tanh(z + shift) * half_l - offset
        half_width = self._levels // 2
        if self.bug == "round_without_ste":
            return bounded_z.round() / half_width
        return round_ste(bounded_z) / half_width

    def quantize(self, z):
        """ Quantizes z, returns quantized zhat, same shape as z. """
        assert not self.preserve_symmetry  # (port) symmetry_preserving_bound is not copied
        bound_fn = self.bound

        return bound_fn(z, hard_clamp=self.bound_hard_clamp)

    def maybe_apply_noise(self, bounded_z):
        noise_dropout = self.noise_dropout

        if not self.training or noise_dropout == 0.:
            return bounded_z

        offset_mask = torch.full_like(bounded_z, noise_dropout).bernoulli_().bool()
        offset = torch.rand_like(bounded_z) - 0.5

        bounded_z = torch.where(offset_mask, bounded_z + offset, bounded_z)

        return bounded_z.clamp(-1., 1.)

    def _scale_and_shift(self, zhat_normalized):
        half_width = self._levels // 2
        return (zhat_normalized * half_width) + half_width

    def _scale_and_shift_inverse(self, zhat):
        half_width = self._levels // 2
        return (zhat - half_width) / half_width

    def _indices_to_codes(self, indices):
        level_indices = self.indices_to_level_indices(indices)
        codes = self._scale_and_shift_inverse(level_indices)
        return codes

    def indices_to_level_indices(self, indices):
        """ Converts indices to indices at each level, perhaps needed for a transformer with factorized embeddings """
        indices = indices.unsqueeze(-1)  # rearrange(indices, '... -> ... 1')
        codes_non_centered = (indices // self._basis) % self._levels
        return codes_non_centered

    def codes_to_indices(self, zhat):
        """ Converts a `code` to an index in the codebook. """
        assert zhat.shape[-1] == self.codebook_dim
        zhat = self._scale_and_shift(zhat)
        return (zhat * self._basis).sum(dim=-1).round().to(int32)

    def forward(self, z):
        is_img_or_video = z.ndim >= 4
        need_move_channel_last = is_img_or_video or self.channel_first

        # standardize image or video into (batch, seq, dimension)

        if need_move_channel_last:
            # rearrange(z, 'b d ... -> b ... d'); pack_one(z, 'b * d')
            b, d = z.shape[:2]
            ps = z.shape[2:]
            if self.bug == "channels_viewed_not_moved":
                z = z.reshape(b, -1, d)
            else:
                z = z.permute(0, *range(2, z.ndim), 1).reshape(b, -1, d)

        assert z.shape[-1] == self.dim, f'expected dimension of {self.dim} but found dimension of {z.shape[-1]}'

        z = self.project_in(z)

        z = z.reshape(*z.shape[:2], self.num_codebooks, -1)  # rearrange(z, 'b n (c d) -> b n c d', c=...)

        orig_dtype = z.dtype

        if self.force_quantization_f32 and orig_dtype not in self.allowed_dtypes:
            z = z.float()

        codes = self.quantize(z)

        indices = None

        if self.return_indices:
            indices = self.codes_to_indices(codes)

        codes = self.maybe_apply_noise(codes)

        codes = codes.reshape(*codes.shape[:2], -1)  # rearrange(codes, 'b n c d -> b n (c d)')

        codes = codes.to(orig_dtype)

        # project out

        out = self.project_out(codes)

        # reconstitute image or video dimensions

        if need_move_channel_last:
            # unpack_one(out, ps, 'b * d'); rearrange(out, 'b ... d -> b d ...')
            if self.bug == "channels_viewed_not_moved":
                out = out.reshape(b, d, *ps)
            else:
                out = out.reshape(b, *ps, -1)
                out = out.permute(0, out.ndim - 1, *range(1, out.ndim - 1))

            indices = maybe(lambda t: t.reshape(b, *ps, t.shape[-1]))(indices)  # unpack_one(indices, ps, 'b * c')

        if not self.keep_num_codebooks_dim and self.return_indices:
            indices = maybe(lambda t: t.squeeze(-1))(indices)  # rearrange(indices, '... 1 -> ...')

        return out, indices


# utils.py
class Sequential(Module):
    def __init__(
        self,
        *fns: Module
    ):
        super().__init__()
        assert sum([int(isinstance(fn, FSQ)) for fn in fns]) == 1, \
            'this special Sequential must contain exactly one quantizer'

        self.fns = ModuleList(fns)

    def forward(
        self,
        x,
        **kwargs
    ):
        for fn in self.fns:

            if not isinstance(fn, FSQ):
                x = fn(x)
                continue

            x, *rest = fn(x, **kwargs)

        output = (x, *rest)

        return output


# examples/autoencoder_fsq.py
def SimpleFSQAutoEncoder(levels, orthogonal_rotation=False, bug=None):
    return Sequential(
        nn.Conv2d(1, 16, kernel_size=3, stride=1, padding=1),
        nn.MaxPool2d(kernel_size=2, stride=2),
        nn.GELU(),
        nn.Conv2d(16, 32, kernel_size=3, stride=1, padding=1),
        nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Conv2d(32, len(levels), kernel_size=1),
        FSQ(levels, orthogonal_rotation=orthogonal_rotation, bug=bug),
        nn.Conv2d(len(levels), 32, kernel_size=3, stride=1, padding=1),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.Conv2d(32, 16, kernel_size=3, stride=1, padding=1),
        nn.GELU(),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.Conv2d(16, 1, kernel_size=3, stride=1, padding=1),
    )


class SyntheticGarments(torch.utils.data.Dataset):
    """Ten classes of 16x16 grayscale shapes (a class-dependent filled body plus one or two bars), each jittered by up
    to one pixel, with pixel noise; ``Normalize((0.5,), (0.5,))`` applied."""

    def __init__(self, seed, n=640):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(10, IMG, IMG)
        for c in range(10):
            top, left = 2 + c % 3, 3 + c % 4
            templates[c, top:IMG - 2, left:IMG - left] = 0.6 + 0.04 * c
            for _ in range(1 + c % 2):
                k = int(torch.randint(2, IMG - 2, (), generator=gen))
                if float(torch.rand((), generator=gen)) < 0.5:
                    templates[c, k:k + 2, 1:IMG - 1] = 1.0
                else:
                    templates[c, 1:IMG - 1, k:k + 2] = 1.0
        self.labels = torch.arange(n) % 10
        shifts = torch.randint(-1, 2, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                            for c, sh in zip(self.labels, shifts)])
        imgs = (imgs + 0.05 * torch.randn(n, IMG, IMG, generator=gen)).clamp(0, 1).unsqueeze(1)
        self.images = (imgs - 0.5) / 0.5  # transforms.Normalize((0.5,), (0.5,))

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


def _build(seed, bug=None):
    lr = 3e-4
    levels = [8, 6, 5]
    batch_size = BATCH
    orthogonal_rotation = False

    torch.random.manual_seed(seed)
    device = "cpu"

    num_codes = math.prod(levels)

    model = SimpleFSQAutoEncoder(levels, orthogonal_rotation=orthogonal_rotation, bug=bug).to(device)

    opt = AdamW(model.parameters(), lr=lr)

    train_dataset = torch.utils.data.DataLoader(
        SyntheticGarments(seed),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    test_set = SyntheticGarments(seed + 1000, n=BATCH)

    def iterate_dataset(data_loader):
        data_iter = iter(data_loader)
        while True:
            try:
                x, y = next(data_iter)
            except StopIteration:
                data_iter = iter(data_loader)
                x, y = next(data_iter)
            yield x.to(device), y.to(device)

    dl_iter = iterate_dataset(train_dataset)

    def train_step():
        if bug != "zero_grad_dropped":
            opt.zero_grad()
        x, _ = next(dl_iter)

        out, indices = model(x)
        out = out.clamp(-1., 1.)

        rec_loss = (out - x).abs().mean()
        rec_loss.backward()

        opt.step()
        return rec_loss.detach()

    def loss_fn(outputs, x):
        out = outputs[0].clamp(-1., 1.)
        return (out - x).abs().mean()

    @torch.no_grad()
    def eval_fn(m, batch):
        x = test_set.images
        out, indices = m(x)
        out = out.clamp(-1., 1.)
        return float((out - x).abs().mean())

    x0 = SyntheticGarments(seed).images[:BATCH]
    return Program(name="vectorquantize_fsq_autoencoder", model=model, batch=(x0, x0), loss_fn=loss_fn,
                   optimizer=opt, train_step=train_step, eval_fn=eval_fn, loader=train_dataset)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``bounded_z.round()`` without the straight-through estimator (classic): the rounding has a zero gradient, so
    # nothing before the quantizer learns.
    Bug("round_without_ste", functools.partial(_build, bug="round_without_ste"), "reachability", ("fns.0",)),
    # the einops ``'b d ... -> b ... d'`` written out as a reshape instead of a permute (classic): every code mixes
    # channels of different positions.
    Bug("channels_viewed_not_moved", functools.partial(_build, bug="channels_viewed_not_moved"), "tensor_trace",
        ("fns.6",)),
    # ``opt.zero_grad()`` dropped from the loop (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
