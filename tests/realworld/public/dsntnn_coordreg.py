"""Coordinate regression with DSNT of anibali/dsntnn: the basic-usage example's ``CoordRegressionNetwork`` (a
three-layer 3x3 conv FCN with ReLU and BatchNorm, a 1x1 conv to one unnormalized heatmap per location,
``dsntnn.flat_softmax``, ``dsntnn.dsnt`` soft-argmax to normalized (x, y) coordinates) trained as the example trains
it: per-location ``euclidean_losses`` plus ``js_reg_losses`` (Jensen-Shannon divergence to a Gaussian of sigma 1
pixel at the target), ``average_loss``, RMSprop lr 2.5e-4; targets normalized to (-1, 1) by
``(coords * 2 + 1) / image_size - 1``.

Source: https://github.com/anibali/dsntnn
Commit: 779631f80ad13da6332276b69acfc04669e49cbe
Files: ``examples/basic_usage.md`` (``FCN``, ``CoordRegressionNetwork``, the training loop), ``dsntnn/__init__.py``
(``linear_expectation``, ``normalized_linspace``, ``soft_argmax``, ``dsnt``, ``flat_softmax``, ``euclidean_losses``,
``make_gauss``, ``average_loss``, ``_kl``, ``_js``, ``_divergence_reg_losses``, ``js_reg_losses``)
License: Apache-2.0 (Copyright 2017 Aiden Nibali; full text in LICENSES/anibali-dsntnn.txt)
Domain: vision, keypoint / pose localization (heatmap soft-argmax coordinate regression)

Deviations from the original:
- the example overfits one 40x40 image (the raccoon's eye from ``scipy.misc.face``, resized with the removed
  ``scipy.misc.imresize``) with one location; here a set of 96 40x40 images made from ``seed`` is used, each with
  two locations (a red and a blue blob at random places on a noisy background, 2 heatmaps: ``n_locations=2``), in
  shuffled batches of 16; the coordinates are the blobs' pixel centres, normalized exactly as the example does;
- the permuted input batch is made ``.contiguous()``: on current PyTorch a permuted (channels-last) batch makes the
  convolutions' outputs channels-last, which ``flat_softmax``'s ``view`` refuses (the example's one image did not);
- no GPU: ``.cuda()`` dropped; plotting and printing left out; 400 iterations -> what the test runs;
- one ``train_step`` is one iteration of the example's loop; ``eval_fn`` is the mean euclidean error in pixels on a
  batch (``model.eval()``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP032  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from functools import reduce
from operator import mul

import torch
import torch.nn.functional
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES, BATCH = 96, 16


# ---- dsntnn/__init__.py --------------------------------------------------------------------------------------

def linear_expectation(probs, values):
    assert(len(values) == probs.ndimension() - 2)
    expectation = []
    for i in range(2, probs.ndimension()):
        # Marginalise probabilities
        marg = probs
        for j in range(probs.ndimension() - 1, 1, -1):
            if i != j:
                marg = marg.sum(j, keepdim=False)
        # Calculate expectation along axis `i`
        expectation.append((marg * values[len(expectation)]).sum(-1, keepdim=False))
    return torch.stack(expectation, -1)


def normalized_linspace(length, dtype=None, device=None):
    if isinstance(length, torch.Tensor):
        length = length.to(device, dtype)
    first = -(length - 1.0) / length
    return torch.arange(length, dtype=dtype, device=device) * (2.0 / length) + first


def soft_argmax(heatmaps, normalized_coordinates=True):
    if normalized_coordinates:
        values = [normalized_linspace(d, dtype=heatmaps.dtype, device=heatmaps.device)
                  for d in heatmaps.size()[2:]]
    else:
        values = [torch.arange(0, d, dtype=heatmaps.dtype, device=heatmaps.device)
                  for d in heatmaps.size()[2:]]
    coords = linear_expectation(heatmaps, values)
    # We flip the tensor like this instead of using `coords.flip(-1)` because aten::flip is not yet
    # supported by the ONNX exporter.
    coords = torch.cat(tuple(reversed(coords.split(1, -1))), -1)
    return coords


def dsnt(heatmaps, **kwargs):
    return soft_argmax(heatmaps, **kwargs)


def flat_softmax(inp, bug=None):
    """Compute the softmax with all but the first two tensor dimensions combined."""
    orig_size = inp.size()
    if bug == "softmax_over_locations":
        return torch.nn.functional.softmax(inp, 1)
    flat = inp.view(-1, reduce(mul, orig_size[2:]))
    flat = torch.nn.functional.softmax(flat, -1)
    return flat.view(*orig_size)


def euclidean_losses(actual, target):
    assert actual.size() == target.size(), 'input tensors must have the same size'
    return torch.norm(actual - target, p=2, dim=-1, keepdim=False)


def make_gauss(means, size, sigma, normalize=True):
    dim_range = range(-1, -(len(size) + 1), -1)
    coords_list = [normalized_linspace(s, dtype=means.dtype, device=means.device)
                   for s in reversed(size)]

    # PDF = exp(-(x - \mu)^2 / (2 \sigma^2))

    # dists <- (x - \mu)^2
    dists = [(x - mean) ** 2 for x, mean in zip(coords_list, means.split(1, -1))]

    # ks <- -1 / (2 \sigma^2)
    stddevs = [2 * sigma / s for s in reversed(size)]
    ks = [-0.5 * (1 / stddev) ** 2 for stddev in stddevs]

    exps = [(dist * k).exp() for k, dist in zip(ks, dists)]

    # Combine dimensions of the Gaussian
    gauss = reduce(mul, [
        reduce(lambda t, d: t.unsqueeze(d), filter(lambda d: d != dim, dim_range), dist)
        for dim, dist in zip(dim_range, exps)
    ])

    if not normalize:
        return gauss

    # Normalize the Gaussians
    val_sum = reduce(lambda t, dim: t.sum(dim, keepdim=True), dim_range, gauss) + 1e-24
    return gauss / val_sum


def average_loss(losses, mask=None):
    if mask is not None:
        assert mask.size() == losses.size(), 'mask must be the same size as losses'
        losses = losses * mask
        denom = mask.sum()
    else:
        denom = losses.numel()

    # Prevent division by zero
    if isinstance(denom, int):
        denom = max(denom, 1)
    else:
        denom = denom.clamp(1)

    return losses.sum() / denom


def _kl(p, q, ndims):
    eps = 1e-24
    unsummed_kl = p * ((p + eps).log() - (q + eps).log())
    kl_values = reduce(lambda t, _: t.sum(-1, keepdim=False), range(ndims), unsummed_kl)
    return kl_values


def _js(p, q, ndims):
    m = 0.5 * (p + q)
    return 0.5 * _kl(p, m, ndims) + 0.5 * _kl(q, m, ndims)


def _divergence_reg_losses(heatmaps, mu_t, sigma_t, divergence):
    ndims = mu_t.size(-1)
    assert heatmaps.dim() == ndims + 2, 'expected heatmaps to be a {}D tensor'.format(ndims + 2)
    assert heatmaps.size()[:-ndims] == mu_t.size()[:-1]

    gauss = make_gauss(mu_t, heatmaps.size()[2:], sigma_t)
    divergences = divergence(heatmaps, gauss, ndims)
    return divergences


def js_reg_losses(heatmaps, mu_t, sigma_t):
    return _divergence_reg_losses(heatmaps, mu_t, sigma_t, _js)


# ---- examples/basic_usage.md ---------------------------------------------------------------------------------

class FCN(nn.Module):
    def __init__(self):
        super().__init__()

        self.layers = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.BatchNorm2d(16),
            nn.Conv2d(16, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.BatchNorm2d(16),
            nn.Conv2d(16, 16, kernel_size=3, padding=1),
        )

    def forward(self, x):
        return self.layers(x)


class CoordRegressionNetwork(nn.Module):
    def __init__(self, n_locations, bug=None):
        super().__init__()
        self.fcn = FCN()
        self.hm_conv = nn.Conv2d(16, n_locations, kernel_size=1, bias=False)
        self.bug = bug

    def forward(self, images):
        # 1. Run the images through our FCN
        fcn_out = self.fcn(images)
        # 2. Use a 1x1 conv to get one unnormalized heatmap per location
        unnormalized_heatmaps = self.hm_conv(fcn_out)
        # 3. Normalize the heatmaps
        heatmaps = flat_softmax(unnormalized_heatmaps, bug=self.bug)
        # 4. Calculate the coordinates
        coords = dsnt(heatmaps)

        return coords, heatmaps


def _images(gen, n, image_size):
    """(port) ``n`` uint8 HWC images with a red and a blue 3x3 blob at random pixels, and their (x, y) centres."""
    h, w = image_size
    imgs = 90 + 25 * torch.randn(n, h, w, 3, generator=gen)
    xy = torch.stack([torch.randint(2, w - 2, (n, 2), generator=gen),
                      torch.randint(2, h - 2, (n, 2), generator=gen)], -1)  # (n, location, [x, y])
    colours = torch.tensor([[250.0, 30.0, 30.0], [30.0, 30.0, 250.0]])
    for i in range(n):
        for loc in range(2):
            x, y = xy[i, loc].tolist()
            imgs[i, y - 1:y + 2, x - 1:x + 2] = colours[loc]
    return imgs.clamp(0, 255).round().to(torch.uint8), xy.float()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    image_size = [40, 40]
    images, eye_coords = _images(gen, N_IMAGES, image_size)

    input_tensor = images.permute(0, 3, 1, 2).contiguous().float().div(255)  # (port) contiguous, see above
    eye_coords_tensor = eye_coords
    if bug == "targets_in_pixels":
        target_tensor = eye_coords_tensor
    else:
        target_tensor = (eye_coords_tensor * 2 + 1) / torch.Tensor(image_size) - 1

    model = CoordRegressionNetwork(n_locations=2, bug=bug)
    optimizer = optim.RMSprop(model.parameters(), lr=2.5e-4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(input_tensor, target_tensor),
                                         batch_size=BATCH, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(loader)
            return next(state["it"])

    def loss_fn(outputs, target_var):
        coords, heatmaps = outputs
        # Per-location euclidean losses
        euc_losses = euclidean_losses(coords, target_var)
        # Per-location regularization losses
        reg_losses = js_reg_losses(heatmaps, target_var, sigma_t=1.0)
        # Combine losses into an overall loss
        return average_loss(euc_losses + reg_losses)

    def train_step():
        input_var, target_var = next_batch()
        # Forward pass
        coords, heatmaps = model(input_var)

        # Per-location euclidean losses
        euc_losses = euclidean_losses(coords, target_var)
        # Per-location regularization losses
        reg_losses = js_reg_losses(heatmaps, target_var, sigma_t=1.0)
        # Combine losses into an overall loss
        loss = average_loss(euc_losses + reg_losses)

        # Calculate gradients
        optimizer.zero_grad()
        loss.backward()

        # Update model parameters with RMSprop
        optimizer.step()
        return loss.item()

    def eval_fn(model, batch):
        inputs, targets = batch
        model.eval()
        with torch.no_grad():
            coords, _ = model(inputs)
        model.train()
        scale = torch.Tensor(image_size) / 2
        return float(euclidean_losses(coords * scale, targets * scale).mean())

    return Program(name="dsntnn_coordreg", model=model, batch=(input_tensor[:BATCH], target_tensor[:BATCH]),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=loader)


build = functools.partial(_build)

BUGS = [
    # The normalization of the targets to (-1, 1) left out (the example's own warning: "the target coordinates are
    # normalized so that they are in the range (-1, 1). The DSNT layer always outputs coordinates in this range"):
    # the targets stay in pixels, out of the soft-argmax's reach.
    Bug("targets_in_pixels", functools.partial(_build, bug="targets_in_pixels"), "learning_ledger", ("TASK",)),
    # ``flat_softmax`` replaced by a softmax over dim 1 (the location axis) instead of over each heatmap's pixels:
    # the heatmaps no longer sum to one over the image and the soft-argmax is no expectation.
    Bug("softmax_over_locations", functools.partial(_build, bug="softmax_over_locations"), "learning_ledger",
        ("OBJECTIVE",)),
]
