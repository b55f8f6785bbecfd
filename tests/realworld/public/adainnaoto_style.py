# ruff: noqa: UP008, UP032
"""Arbitrary style transfer with adaptive instance normalization (Huang & Belongie, ICCV 2017), naoto0804's
PyTorch port: a frozen VGG-19 encoder up to relu4_1 (``Net``'s ``enc_1`` .. ``enc_4``, their parameters set to
``requires_grad = False``), AdaIN of the content features to the style features' channel mean and std, a decoder
mirroring the encoder (reflection padding, nearest upsampling) trained alone by Adam on the content loss (MSE of the
decoded image's relu4_1 features to the AdaIN target ``t``) plus 10 times the style loss (MSE of the channel means
and stds at relu1_1 .. relu4_1), the learning rate set every iteration by ``adjust_learning_rate``
(``lr / (1 + lr_decay * i)``), content and style images drawn by ``InfiniteSamplerWrapper``.

Source: https://github.com/naoto0804/pytorch-AdaIN
Commit: 47950d0e6656a95a80a4b105c4c0f58d38ef785c
Files: train.py, net.py, function.py, sampler.py
License: MIT (Copyright (c) 2018 Naoto Inoue; full text in LICENSES/naoto0804-pytorch-AdaIN.txt)
Domain: vision, neural style transfer (AdaIN decoder training against a frozen VGG encoder)

Kept as written: ``net.decoder`` and ``net.vgg`` (layer for layer, channel widths shrunk), ``Net`` (the encoder
split at children 4 / 11 / 18 / 31, the freezing loop, ``encode_with_intermediate``, ``encode``,
``calc_content_loss``, ``calc_style_loss`` and ``forward`` with ``alpha=1.0``), ``calc_mean_std`` and
``adaptive_instance_normalization``, ``InfiniteSampler`` / ``InfiniteSamplerWrapper``, ``FlatFolderDataset``,
``adjust_learning_rate`` and train.py's loop body (lr update, next content and style batch, ``network(content,
style)``, weighted sum, zero_grad, backward, step) with its defaults (lr 1e-4, lr_decay 5e-5, style_weight 10,
content_weight 1); the optimizer is built over ``network.decoder.parameters()`` only.

Deviations from the original:
- the pretrained ``models/vgg_normalised.pth`` cannot be downloaded: the encoder keeps PyTorch's default random
  initialisation (still frozen, so the decoder learns to invert a fixed random VGG);
- sizes for 2 CPU cores: every channel width divided by 8 (512 -> 64, 256 -> 32, 128 -> 16, 64 -> 8; the 3-channel
  input conv and output conv unchanged); ``--batch_size`` 8 kept; ``train_transform``'s Resize (512, 512) and
  RandomCrop 256 become Resize (40, 40) and RandomCrop 32, written in PIL (no torchvision): a crop at a random
  offset and ``ToTensor`` written out;
- data: the MS-COCO content folder and WikiArt style folder are replaced by in-memory PIL images made from ``seed``
  (content: smooth colour fields with soft blobs; style: coloured stripe / check textures of random palettes and
  frequencies), 48 of each; ``Path.glob`` / ``Image.open`` read that list;
- ``InfiniteSampler``'s ``np.random.seed()`` (a reseed from the OS at each pass) is dropped so a build is
  reproducible from ``seed``; ``num_workers`` 16 -> 0; ``device`` is the CPU, ``cudnn.benchmark`` dropped;
- tensorboardX logging, tqdm and the decoder checkpoints are dropped; one ``train_step`` is one iteration of the
  ``for i in range(args.max_iter)`` loop;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# function.py
def calc_mean_std(feat, eps=1e-5):
    # eps is a small value added to the variance to avoid divide-by-zero.
    size = feat.size()
    assert (len(size) == 4)
    N, C = size[:2]
    feat_var = feat.view(N, C, -1).var(dim=2) + eps
    feat_std = feat_var.sqrt().view(N, C, 1, 1)
    feat_mean = feat.view(N, C, -1).mean(dim=2).view(N, C, 1, 1)
    return feat_mean, feat_std


def adaptive_instance_normalization(content_feat, style_feat):
    assert (content_feat.size()[:2] == style_feat.size()[:2])
    size = content_feat.size()
    style_mean, style_std = calc_mean_std(style_feat)
    content_mean, content_std = calc_mean_std(content_feat)

    normalized_feat = (content_feat - content_mean.expand(
        size)) / content_std.expand(size)
    return normalized_feat * style_std.expand(size) + style_mean.expand(size)


adain = adaptive_instance_normalization


# net.py (channel widths / 8)
def make_decoder():
    return nn.Sequential(
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(64, 32, (3, 3)),
        nn.ReLU(),
        nn.Upsample(scale_factor=2, mode='nearest'),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(32, 32, (3, 3)),
        nn.ReLU(),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(32, 32, (3, 3)),
        nn.ReLU(),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(32, 32, (3, 3)),
        nn.ReLU(),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(32, 16, (3, 3)),
        nn.ReLU(),
        nn.Upsample(scale_factor=2, mode='nearest'),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(16, 16, (3, 3)),
        nn.ReLU(),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(16, 8, (3, 3)),
        nn.ReLU(),
        nn.Upsample(scale_factor=2, mode='nearest'),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(8, 8, (3, 3)),
        nn.ReLU(),
        nn.ReflectionPad2d((1, 1, 1, 1)),
        nn.Conv2d(8, 3, (3, 3)),
    )


def _vgg_block(cin, cout, n):
    layers = []
    for k in range(n):
        layers += [nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(cin if k == 0 else cout, cout, (3, 3)), nn.ReLU()]
    return layers


def make_vgg():
    # (port) net.vgg's 53 children in order, written by block: conv 1x1, then [pad, conv3x3, relu] x n + maxpool
    def pool():
        return [nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True)]
    return nn.Sequential(*([nn.Conv2d(3, 3, (1, 1))] + _vgg_block(3, 8, 2) + pool() + _vgg_block(8, 16, 2) + pool()
                           + _vgg_block(16, 32, 4) + pool() + _vgg_block(32, 64, 4) + pool() + _vgg_block(64, 64, 4)))


class Net(nn.Module):
    def __init__(self, encoder, decoder):
        super(Net, self).__init__()
        enc_layers = list(encoder.children())
        self.enc_1 = nn.Sequential(*enc_layers[:4])  # input -> relu1_1
        self.enc_2 = nn.Sequential(*enc_layers[4:11])  # relu1_1 -> relu2_1
        self.enc_3 = nn.Sequential(*enc_layers[11:18])  # relu2_1 -> relu3_1
        self.enc_4 = nn.Sequential(*enc_layers[18:31])  # relu3_1 -> relu4_1
        self.decoder = decoder
        self.mse_loss = nn.MSELoss()

        # fix the encoder
        for name in ['enc_1', 'enc_2', 'enc_3', 'enc_4']:
            for param in getattr(self, name).parameters():
                param.requires_grad = False

    # extract relu1_1, relu2_1, relu3_1, relu4_1 from input image
    def encode_with_intermediate(self, input):
        results = [input]
        for i in range(4):
            func = getattr(self, 'enc_{:d}'.format(i + 1))
            results.append(func(results[-1]))
        return results[1:]

    # extract relu4_1 from input image
    def encode(self, input):
        for i in range(4):
            input = getattr(self, 'enc_{:d}'.format(i + 1))(input)
        return input

    def calc_content_loss(self, input, target):
        assert (input.size() == target.size())
        assert (target.requires_grad is False)
        return self.mse_loss(input, target)

    def calc_style_loss(self, input, target):
        assert (input.size() == target.size())
        assert (target.requires_grad is False)
        input_mean, input_std = calc_mean_std(input)
        target_mean, target_std = calc_mean_std(target)
        if getattr(self, "bug", None) == "style_stats_over_batch":  # (port) BUGS variant
            # the statistics taken per channel over the whole batch: every image gets the batch's style
            input_mean, input_std = input.mean(dim=(0, 2, 3)), input.std(dim=(0, 2, 3))
            target_mean, target_std = target.mean(dim=(0, 2, 3)), target.std(dim=(0, 2, 3))
        return self.mse_loss(input_mean, target_mean) + \
               self.mse_loss(input_std, target_std)

    def forward(self, content, style, alpha=1.0):
        assert 0 <= alpha <= 1
        style_feats = self.encode_with_intermediate(style)
        content_feat = self.encode(content)
        t = adain(content_feat, style_feats[-1])
        t = alpha * t + (1 - alpha) * content_feat

        g_t = self.decoder(t)
        g_t_feats = self.encode_with_intermediate(g_t)

        if getattr(self, "bug", None) == "content_target_is_content_feat":  # (port) BUGS variant
            loss_c = self.calc_content_loss(g_t_feats[-1], content_feat)
        else:
            loss_c = self.calc_content_loss(g_t_feats[-1], t)
        loss_s = self.calc_style_loss(g_t_feats[0], style_feats[0])
        for i in range(1, 4):
            loss_s += self.calc_style_loss(g_t_feats[i], style_feats[i])
        return loss_c, loss_s


# sampler.py
def InfiniteSampler(n):
    # i = 0
    i = n - 1
    order = np.random.permutation(n)
    while True:
        yield order[i]
        i += 1
        if i >= n:
            # (port) np.random.seed() dropped: the build stays reproducible from its seed
            order = np.random.permutation(n)
            i = 0


class InfiniteSamplerWrapper(data.sampler.Sampler):
    def __init__(self, data_source):
        self.num_samples = len(data_source)

    def __iter__(self):
        return iter(InfiniteSampler(self.num_samples))

    def __len__(self):
        return 2 ** 31


# train.py
class args:  # (port) train.py's argparse defaults
    lr = 1e-4
    lr_decay = 5e-5
    max_iter = 160000
    batch_size = 8
    style_weight = 10.0
    content_weight = 1.0
    n_threads = 0  # 16


def train_transform():
    # (port) Resize(size=(40, 40)), RandomCrop(32), ToTensor() written in PIL / torch (no torchvision)
    def transform(img):
        img = img.resize((40, 40), Image.BILINEAR)
        i, j = np.random.randint(0, 40 - 32 + 1, size=2)
        img = img.crop((int(j), int(i), int(j) + 32, int(i) + 32))
        return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1).contiguous()
    return transform


class FlatFolderDataset(data.Dataset):
    def __init__(self, root, transform):
        super(FlatFolderDataset, self).__init__()
        self.root = root
        self.paths = list(root)  # (port) the in-memory images instead of Path(root).glob('*')
        self.transform = transform

    def __getitem__(self, index):
        path = self.paths[index]
        img = path.convert('RGB')  # (port) Image.open(str(path)).convert('RGB')
        img = self.transform(img)
        return img

    def __len__(self):
        return len(self.paths)

    def name(self):
        return 'FlatFolderDataset'


def adjust_learning_rate(optimizer, iteration_count):
    """Imitating the original implementation"""
    lr = args.lr / (1.0 + args.lr_decay * iteration_count)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def _synthetic_folders(seed, n=48, size=48):
    """(port) Content photographs (smooth fields with soft blobs) and style paintings (striped / checked textures)."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    contents, styles = [], []
    for _ in range(n):
        img = rng.rand(3)[:, None, None] * (1 - yy) + rng.rand(3)[:, None, None] * xx
        for _b in range(3):
            cy, cx, r = rng.rand(), rng.rand(), 0.1 + 0.2 * rng.rand()
            img = img + (rng.rand(3) - 0.5)[:, None, None] * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / r ** 2)
        contents.append(Image.fromarray((np.clip(img, 0, 1).transpose(1, 2, 0) * 255).astype(np.uint8)))
        palette = rng.rand(2, 3)
        f, theta = 2 + 6 * rng.rand(), np.pi * rng.rand()
        wave = np.sin(2 * np.pi * f * (np.cos(theta) * xx + np.sin(theta) * yy))
        if rng.rand() < 0.5:
            wave = wave * np.sin(2 * np.pi * f * (np.cos(theta) * yy - np.sin(theta) * xx))
        m = (wave > 0).astype(np.float64)[None]
        img = m * palette[0][:, None, None] + (1 - m) * palette[1][:, None, None] + 0.05 * rng.randn(3, size, size)
        styles.append(Image.fromarray((np.clip(img, 0, 1).transpose(1, 2, 0) * 255).astype(np.uint8)))
    return contents, styles


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    content_dir, style_dir = _synthetic_folders(seed)

    decoder = make_decoder()
    vgg = make_vgg()
    # (port) vgg.load_state_dict(torch.load(args.vgg)) dropped: no pretrained weights here
    vgg = nn.Sequential(*list(vgg.children())[:31])
    network = Net(vgg, decoder)
    network.bug = bug  # (port) the variant being built
    network.train()

    content_tf = train_transform()
    style_tf = train_transform()
    content_dataset = FlatFolderDataset(content_dir, content_tf)
    style_dataset = FlatFolderDataset(style_dir, style_tf)
    content_iter = iter(data.DataLoader(
        content_dataset, batch_size=args.batch_size,
        sampler=InfiniteSamplerWrapper(content_dataset),
        num_workers=args.n_threads))
    style_iter = iter(data.DataLoader(
        style_dataset, batch_size=args.batch_size,
        sampler=InfiniteSamplerWrapper(style_dataset),
        num_workers=args.n_threads))

    optimizer = torch.optim.Adam(network.decoder.parameters(), lr=args.lr)
    st = {"i": 0}

    def train_step():
        i = st["i"]
        adjust_learning_rate(optimizer, iteration_count=i)
        content_images = next(content_iter)
        style_images = next(style_iter)
        loss_c, loss_s = network(content_images, style_images)
        loss_c = args.content_weight * loss_c
        loss_s = args.style_weight * loss_s
        loss = loss_c + loss_s

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        st["i"] = i + 1
        return loss.item()

    def loss_fn(outputs, _targets):
        loss_c, loss_s = outputs
        return args.content_weight * loss_c + args.style_weight * loss_s

    batch = ((next(iter(data.DataLoader(content_dataset, batch_size=args.batch_size))),
              next(iter(data.DataLoader(style_dataset, batch_size=args.batch_size)))), None)
    return Program(name="adainnaoto_style", model=network, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, frozen=("enc_*",))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the content loss measured against the encoder's own content features instead of the AdaIN target
    # ``t``: the decoder is pulled back toward reconstructing the content, fighting the style loss.
    Bug("content_target_is_content_feat", functools.partial(_build, bug="content_target_is_content_feat"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic wrong reduction axes: the style loss's channel statistics taken over the batch and the pixels
    # together instead of per image, so the decoded image is matched to the batch's average style.
    Bug("style_stats_over_batch", functools.partial(_build, bug="style_stats_over_batch"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: zero_grad moved after the backward, so every step applies a zero gradient.
    # Kind re-declared in review (2026-12-07): gradients cleared between the backward and the step are
    # step.zero_grad_before_step, as ffjord_toy_cnf's same slip is declared.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        (), kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
