"""AugMix (Hendrycks et al., "AugMix: A Simple Data Processing Method to Improve Robustness and Uncertainty", ICLR
2020) on CIFAR-10 from google-research/augmix, ``python cifar.py --model allconv``: every training image comes as a
triple (clean, AugMix view, AugMix view); a view mixes ``mixture_width`` 3 chains of 1-3 random operations
(autocontrast, equalize, posterize, rotate, solarize, shear, translate at severity 3) with Dirichlet weights and blends
the mix with the clean image by a Beta(1, 1) weight; the three views go through the AllConv net in one batch, the
cross-entropy is taken on the clean logits and 12 x the Jensen-Shannon consistency (the three KLs to the clamped
mixture of the softmaxes) is added; SGD Nesterov (lr 0.1, momentum 0.9, weight decay 5e-4) with a cosine LambdaLR
stepped every batch.

Source: https://github.com/google-research/augmix
Commit: 9b9824c7c19bf7e72df2d085d97b99b3bfb00ba4
Files: ``cifar.py`` (``get_lr``, ``aug``, ``AugMixDataset``, ``train``, ``test``, ``main``), ``augmentations.py``,
``models/cifar/allconv.py``
License: Apache-2.0 (Copyright 2019 Google LLC; full text in LICENSES/google-research-augmix.txt)
Domain: vision, image classification with AugMix augmentation and a Jensen-Shannon consistency loss

Kept as written: ``AllConvNet`` (``make_layers``, GELU, He init), ``aug``, ``AugMixDataset``, ``augmentations.py``'s
level scaling and its 9 default operations with their parameters, ``train``'s loop body (``zero_grad``,
``torch.cat(images, 0)``, ``torch.split``, cross-entropy on the clean logits, the clamped log-mixture and the three
``kl_div(..., reduction='batchmean')`` weighted 12 / 3, backward, step, ``scheduler.step()``), ``test``, the
optimizer, ``get_lr``'s cosine LambdaLR over ``epochs * len(train_loader)`` steps.

Deviations from the original:
- CIFAR-10 is not here: the 32x32 RGB images are synthetic uint8, made from ``seed``: 10 classes, each a colour
  and a stripe orientation/frequency, with random phase, brightness and pixel noise; 512 training, 128 test images;
- PIL is not here: each PIL operation of ``augmentations.py`` is written out on a uint8 ``[3, 32, 32]`` tensor
  (``ImageOps.autocontrast``/``equalize``/``posterize``/``solarize`` as per-channel lookup rules, ``rotate`` and the
  ``Image.AFFINE`` transforms as an inverse affine map sampled bilinearly with ``grid_sample``, zeros outside);
  torchvision's RandomHorizontalFlip, RandomCrop(32, padding=4), ToTensor and Normalize([0.5] * 3, [0.5] * 3) are
  written out per image;
- the ``--model`` default is ``wrn`` (``third_party/WideResNet_pytorch``, a copy of xternalz/WideResNet-pytorch,
  which another port already holds): the repository's own ``allconv`` choice is ported instead;
- sizes for 2 CPU cores: AllConv widths 96/192 -> 24/48, batch size 128 -> 16, eval batch 1000 -> 128, no workers;
  epochs 100 kept (the cosine is barely started in a short run);
- CUDA, DataParallel, cudnn.benchmark, checkpoints, the csv log, resume, ``--evaluate`` and the CIFAR-10-C
  evaluation (``test_c``) are dropped;
- one ``train_step`` is one iteration of ``train``'s loop (a new epoch runs ``test`` and ``net.train()`` first, as
  ``main`` and ``train`` do); ``eval_fn`` is ``test``'s accuracy on a batch; the Program's batch is the first batch
  (the three views concatenated, the labels) and its ``loss_fn`` the clean cross-entropy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# (port) argparse defaults of cifar.py with --model allconv, sizes as listed in the docstring
args = types.SimpleNamespace(dataset='cifar10', model='allconv', epochs=100, learning_rate=0.1, batch_size=16,
                             eval_batch_size=128, momentum=0.9, decay=0.0005, mixture_width=3, mixture_depth=-1,
                             aug_severity=3, no_jsd=False, all_ops=False)
WIDTH1, WIDTH2 = 24, 48  # (port) 96, 192
N_TRAIN, N_TEST = 512, 128
IMAGE_SIZE = 32


# models/cifar/allconv.py
class GELU(nn.Module):

  def forward(self, x):
    return torch.sigmoid(1.702 * x) * x


def make_layers(cfg):
  """Create a single layer."""
  layers = []
  in_channels = 3
  for v in cfg:
    if v == 'Md':
      layers += [nn.MaxPool2d(kernel_size=2, stride=2), nn.Dropout(p=0.5)]
    elif v == 'A':
      layers += [nn.AvgPool2d(kernel_size=8)]
    elif v == 'NIN':
      conv2d = nn.Conv2d(in_channels, in_channels, kernel_size=1, padding=1)
      layers += [conv2d, nn.BatchNorm2d(in_channels), GELU()]
    elif v == 'nopad':
      conv2d = nn.Conv2d(in_channels, in_channels, kernel_size=3, padding=0)
      layers += [conv2d, nn.BatchNorm2d(in_channels), GELU()]
    else:
      conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
      layers += [conv2d, nn.BatchNorm2d(v), GELU()]
      in_channels = v
  return nn.Sequential(*layers)


class AllConvNet(nn.Module):
  """AllConvNet main class."""

  def __init__(self, num_classes):
    super(AllConvNet, self).__init__()

    self.num_classes = num_classes
    self.width1, w1 = WIDTH1, WIDTH1  # (port) 96, 96
    self.width2, w2 = WIDTH2, WIDTH2  # (port) 192, 192

    self.features = make_layers([w1, w1, w1, 'Md', w2, w2, w2, 'Md', 'nopad', 'NIN', 'NIN', 'A'])
    self.classifier = nn.Linear(self.width2, num_classes)

    for m in self.modules():
      if isinstance(m, nn.Conv2d):
        n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
        m.weight.data.normal_(0, math.sqrt(2. / n))  # He initialization
      elif isinstance(m, nn.BatchNorm2d):
        m.weight.data.fill_(1)
        m.bias.data.zero_()
      elif isinstance(m, nn.Linear):
        m.bias.data.zero_()

  def forward(self, x):
    x = self.features(x)
    x = x.view(x.size(0), -1)
    x = self.classifier(x)
    return x


# (port) the PIL calls of augmentations.py, written out on uint8 [3, H, W] tensors (lookup tables per channel)
def _lut(img, luts):
  return torch.stack([lut[c.long()] for c, lut in zip(img, luts)]).to(torch.uint8)

def _autocontrast(img):
  v = torch.arange(256, dtype=torch.float32)
  return _lut(img, [((v - c.min()) * 255. / (c.max() - c.min())).round().clamp(0, 255) if c.max() > c.min() else v
                    for c in img.float()])

def _equalize(img):
  luts = []
  for c in img:
    h = torch.bincount(c.flatten().long(), minlength=256)
    step = (int(h.sum()) - int(h[h > 0][-1])) // 255
    luts.append(((torch.cumsum(h, 0) - h + step // 2) // step).clamp(0, 255) if step else torch.arange(256))
  return _lut(img, luts)

def _affine(img, coeffs):
  """PIL's Image.AFFINE (a, b, c, d, e, f): output pixel (x, y) samples the input at (a x + b y + c, d x + e y + f)."""
  a, b, c, d, e, f = coeffs
  ys, xs = torch.meshgrid(torch.arange(IMAGE_SIZE) + 0.5, torch.arange(IMAGE_SIZE) + 0.5, indexing='ij')
  grid = torch.stack([(a * xs + b * ys + c) / IMAGE_SIZE * 2 - 1, (d * xs + e * ys + f) / IMAGE_SIZE * 2 - 1], -1)
  out = F.grid_sample(img[None].float(), grid[None], mode='bilinear', padding_mode='zeros', align_corners=False)
  return out[0].round().clamp(0, 255).to(torch.uint8)

def _rotate(img, degrees):  # about the centre, counter-clockwise
  t, cx = math.radians(degrees), IMAGE_SIZE / 2
  a, b, d, e = math.cos(t), math.sin(t), -math.sin(t), math.cos(t)
  return _affine(img, (a, b, cx - a * cx - b * cx, d, e, cx - d * cx - e * cx))


# augmentations.py
def int_parameter(level, maxval):
  return int(level * maxval / 10)

def float_parameter(level, maxval):
  return float(level) * maxval / 10.

def sample_level(n):
  return np.random.uniform(low=0.1, high=n)

def autocontrast(pil_img, _):
  return _autocontrast(pil_img)

def equalize(pil_img, _):
  return _equalize(pil_img)

def posterize(pil_img, level):
  level = int_parameter(sample_level(level), 4)
  bits = 4 - level
  return pil_img & (~(2 ** (8 - bits) - 1) & 0xff)

def rotate(pil_img, level):
  degrees = int_parameter(sample_level(level), 30)
  if np.random.uniform() > 0.5:
    degrees = -degrees
  return _rotate(pil_img, degrees)

def solarize(pil_img, level):
  level = int_parameter(sample_level(level), 256)
  threshold = 256 - level
  return torch.where(pil_img < threshold, pil_img, 255 - pil_img)

def shear_x(pil_img, level):
  level = float_parameter(sample_level(level), 0.3)
  if np.random.uniform() > 0.5:
    level = -level
  return _affine(pil_img, (1, level, 0, 0, 1, 0))

def shear_y(pil_img, level):
  level = float_parameter(sample_level(level), 0.3)
  if np.random.uniform() > 0.5:
    level = -level
  return _affine(pil_img, (1, 0, 0, level, 1, 0))

def translate_x(pil_img, level):
  level = int_parameter(sample_level(level), IMAGE_SIZE / 3)
  if np.random.random() > 0.5:
    level = -level
  return _affine(pil_img, (1, 0, level, 0, 1, 0))

def translate_y(pil_img, level):
  level = int_parameter(sample_level(level), IMAGE_SIZE / 3)
  if np.random.random() > 0.5:
    level = -level
  return _affine(pil_img, (1, 0, 0, 0, 1, level))


augmentations = [autocontrast, equalize, posterize, rotate, solarize, shear_x, shear_y, translate_x, translate_y]


# cifar.py
def get_lr(step, total_steps, lr_max, lr_min):
  """Compute learning rate according to cosine annealing schedule."""
  return lr_min + (lr_max - lr_min) * 0.5 * (1 + np.cos(step / total_steps * np.pi))


def aug(image, preprocess):
  """Perform AugMix augmentations and compute mixture."""
  aug_list = augmentations

  ws = np.float32(np.random.dirichlet([1] * args.mixture_width))
  m = np.float32(np.random.beta(1, 1))

  mix = torch.zeros_like(preprocess(image))
  for i in range(args.mixture_width):
    image_aug = image.clone()
    depth = args.mixture_depth if args.mixture_depth > 0 else np.random.randint(1, 4)
    for _ in range(depth):
      op = np.random.choice(aug_list)
      image_aug = op(image_aug, args.aug_severity)
    # Preprocessing commutes since all coefficients are convex
    mix += ws[i] * preprocess(image_aug)

  mixed = (1 - m) * preprocess(image) + m * mix
  return mixed


class AugMixDataset(torch.utils.data.Dataset):
  """Dataset wrapper to perform AugMix augmentation."""

  def __init__(self, dataset, preprocess, no_jsd=False):
    self.dataset = dataset
    self.preprocess = preprocess
    self.no_jsd = no_jsd

  def __getitem__(self, i):
    x, y = self.dataset[i]
    if self.no_jsd:
      return aug(x, self.preprocess), y
    else:
      im_tuple = (self.preprocess(x), aug(x, self.preprocess), aug(x, self.preprocess))
      return im_tuple, y

  def __len__(self):
    return len(self.dataset)


# (port) synthetic CIFAR-like data (a colour and a stripe orientation per class) and the torchvision transforms
class StripeImages(torch.utils.data.Dataset):
  def __init__(self, gen, n, transform=None):
    colours, angles = torch.rand(10, 3, 1, 1, generator=gen) * 0.6 + 0.2, torch.arange(10) * (math.pi / 5)
    ys, xs = torch.meshgrid(torch.arange(32.), torch.arange(32.), indexing='ij')
    self.targets = y = torch.randint(0, 10, (n,), generator=gen)
    phase, bright = torch.rand(n, 1, 1, generator=gen) * 6.3, 0.7 + 0.3 * torch.rand(n, 1, 1, 1, generator=gen)
    proj = xs * torch.cos(angles[y])[:, None, None] + ys * torch.sin(angles[y])[:, None, None]
    stripes = 0.5 + 0.5 * torch.sin(proj * (0.6 + 0.1 * (y % 3))[:, None, None] + phase)
    img = bright * colours[y] * (0.4 + 0.6 * stripes[:, None]) + 0.08 * torch.randn(n, 3, 32, 32, generator=gen)
    self.data, self.transform = (img.clamp(0, 1) * 255).round().to(torch.uint8), transform

  def __getitem__(self, i):
    return (self.transform(self.data[i]) if self.transform else self.data[i]), int(self.targets[i])

  def __len__(self):
    return len(self.data)


def train_transform(img):  # RandomHorizontalFlip(), RandomCrop(32, padding=4)
  img = img.flip(-1) if torch.rand(1) < 0.5 else img
  i, j = torch.randint(0, 9, (2,)).tolist()
  return F.pad(img, (4, 4, 4, 4))[:, i:i + 32, j:j + 32]


def preprocess(img):  # ToTensor(), Normalize([0.5] * 3, [0.5] * 3)
  return (img.float() / 255. - 0.5) / 0.5


def test(net, test_loader):
  """Evaluate network on given dataset."""
  net.eval()
  total_loss, total_correct, n = 0., 0, 0
  with torch.no_grad():
    for images, targets in test_loader:
      logits = net(images)
      loss = F.cross_entropy(logits, targets)
      pred = logits.data.max(1)[1]
      total_loss += float(loss.data)
      total_correct += pred.eq(targets.data).sum().item()
      n += len(targets)  # (port) len(test_loader.dataset), also for a single batch
  return total_loss / n, total_correct / n


def jsd_loss(logits_all, targets, n, bug=None):
  """(port) the loss lines of train(), as written."""
  logits_clean, logits_aug1, logits_aug2 = torch.split(logits_all, n)
  # Cross-entropy is only computed on clean images
  loss = F.cross_entropy(logits_clean, targets)
  p_clean, p_aug1, p_aug2 = F.softmax(logits_clean, dim=1), F.softmax(logits_aug1, dim=1), F.softmax(
      logits_aug2, dim=1)
  # Clamp mixture distribution to avoid exploding KL divergence
  if bug == "mixture_not_logged":
    p_mixture = torch.clamp((p_clean + p_aug1 + p_aug2) / 3., 1e-7, 1)
  else:
    p_mixture = torch.clamp((p_clean + p_aug1 + p_aug2) / 3., 1e-7, 1).log()
  loss += 12 * (F.kl_div(p_mixture, p_clean, reduction='batchmean') +
                F.kl_div(p_mixture, p_aug1, reduction='batchmean') +
                F.kl_div(p_mixture, p_aug2, reduction='batchmean')) / 3.
  return loss


def _build(seed, bug=None):
  torch.manual_seed(seed)  # (port) main() seeds 1
  np.random.seed(seed)
  gen = torch.Generator().manual_seed(seed)
  train_data = StripeImages(gen, N_TRAIN, transform=train_transform)
  test_data = StripeImages(gen, N_TEST, transform=preprocess)
  num_classes = 10
  train_data = AugMixDataset(train_data, preprocess, args.no_jsd)
  train_loader = torch.utils.data.DataLoader(train_data, batch_size=args.batch_size, shuffle=True,
                                             generator=torch.Generator().manual_seed(seed))
  test_loader = torch.utils.data.DataLoader(test_data, batch_size=args.eval_batch_size, shuffle=False)
  net = AllConvNet(num_classes)
  optimizer = torch.optim.SGD(net.parameters(), args.learning_rate, momentum=args.momentum,
                              weight_decay=args.decay, nesterov=True)
  scheduler = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lr_lambda=lambda step: get_lr(step, args.epochs * len(train_loader),
                                               1,  # lr_lambda computes multiplicative factor
                                               1e-6 / args.learning_rate))
  loop = {"it": None}
  def next_batch():
    try:
      return next(loop["it"])
    except (StopIteration, TypeError):
      if loop["it"] is not None:  # the end of an epoch in main()
        test(net, test_loader)
      net.train()
      loop["it"] = iter(train_loader)
      return next(loop["it"])
  def train_step():
    images, targets = next_batch()
    if bug != "zero_grad_dropped":
      optimizer.zero_grad()
    if bug == "views_interleaved":
      images_all = torch.stack(images, 1).flatten(0, 1)
    else:
      images_all = torch.cat(images, 0)
    logits_all = net(images_all)
    loss = jsd_loss(logits_all, targets, images[0].size(0), bug)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.detach()
  def loss_fn(logits_all, targets):
    return F.cross_entropy(torch.split(logits_all, len(targets))[0], targets)
  def eval_fn(model, batch):
    _, acc = test([batch], model)
    model.train()
    return acc
  first_images, first_targets = next(iter(torch.utils.data.DataLoader(train_data, batch_size=args.batch_size)))
  known = (torch.stack([preprocess(x) for x in test_data.data]), test_data.targets)
  return Program(name="augmix_allconv", model=net, batch=(torch.cat(first_images, 0), first_targets),
                 loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                 task_probe=known, task="classification", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the mixture's ``.log()`` left off: F.kl_div takes its first argument as log-probabilities (the
    # argument convention asked about in https://github.com/google-research/augmix/issues/17), so the "JSD" term is
    # no divergence at all and pushes the softmaxes apart instead of together.
    Bug("mixture_not_logged", functools.partial(_build, bug="mixture_not_logged"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic layout slip: the three views stacked on a new axis and flattened (clean, aug1, aug2 of image 0, then of
    # image 1, ...) while torch.split still cuts three contiguous blocks: the "clean" logits mix views of different
    # images and the cross-entropy pairs them with the wrong labels.
    Bug("views_interleaved", functools.partial(_build, bug="views_interleaved"), "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() dropped from the loop body: every step applies the sum of all past gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
