"""PixelCNN++ (``main.py``, CIFAR path): the two-stream gated-resnet PixelCNN with down- and down-right-shifted
convolutions (weight-normalized), two downsamplings and the mirrored up pass with skip connections, concat-ELU,
Dropout2d 0.5, trained by maximum likelihood under a discretized mixture of logistics with the sub-pixel mean
coupling (``discretized_mix_logistic_loss``, summed over the batch) on images rescaled to [-1, 1]; Adam lr 2e-4,
``StepLR(step_size=1, gamma=0.999995)`` stepped once per epoch as the script does, test bits per dimension.

Source: https://github.com/pclucas14/pixel-cnn-pp
Commit: 7cb4436f062fda9b63ecc9e3b75d2c2dcb379931
Files: main.py, utils.py (log_sum_exp, log_prob_from_logits, discretized_mix_logistic_loss), model.py, layers.py
       (the network in the helper ``_pixelcnnpp_lib.py``)
License: MIT (Copyright (c) [year] [fullname], as the repository's license.md reads; full text in
         LICENSES/pclucas14-pixel-cnn-pp.txt)
Domain: generative, autoregressive image model (PixelCNN++, discretized logistic mixture likelihood)

Deviations from the original:
- sizes: images 3x32x32 -> 3x8x8 (the two stride-2 downsamplings give 4x4 and 2x2), nr_resnet 5 -> 1,
  nr_filters 160 -> 16, nr_logistic_mix 10 -> 2, batch_size 64 -> 16; lr 2e-4 -> 2e-3 (30 steps instead of
  5000 epochs); lr_decay 0.999995 as given;
- data: CIFAR-10 is replaced by 320 synthetic 8x8 RGB images made from ``seed`` (a smooth colour gradient per image
  whose channels are coupled, quantized to 256 levels, so that a sub-pixel is predictable from the pixels above,
  to the left and the earlier channels), through ``ToTensor``'s [0, 1] and the script's ``rescaling``; a held-out
  set of 64 images stands in for the test set;
- no CUDA (``.cuda()`` / ``async=True`` dropped, ``torch.zeros(...)`` in the loss made on the CPU), no
  TensorBoard, checkpoints or sampling; ``Variable`` wrappers written as plain tensors, ``loss.data[0]`` as
  ``loss.item()``;
- one ``train_step`` is one iteration of the epoch loop (forward, loss, zero_grad, backward, step); the scheduler is
  stepped and ``model.train()`` set at each epoch boundary as in the script;
- ``eval_fn`` is the script's test pass on one held-out batch: ``model.eval()``, the loss in bits per dimension;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _pixelcnnpp_lib import PixelCNN

NR_RESNET, NR_FILTERS, NR_LOGISTIC_MIX, LR, LR_DECAY, BATCH_SIZE = 1, 16, 2, 2e-3, 0.999995, 16
OBS, N_TRAIN, N_TEST = (3, 8, 8), 320, 64


# ---- utils.py -------------------------------------------------------------------------------------------------

def log_sum_exp(x):
    """ numerically stable log_sum_exp implementation that prevents overflow """
    # TF ordering
    axis  = len(x.size()) - 1
    m, _  = torch.max(x, dim=axis)
    m2, _ = torch.max(x, dim=axis, keepdim=True)
    return m + torch.log(torch.sum(torch.exp(x - m2), dim=axis))


def log_prob_from_logits(x):
    """ numerically stable log_softmax implementation that prevents overflow """
    # TF ordering
    axis = len(x.size()) - 1
    m, _ = torch.max(x, dim=axis, keepdim=True)
    return x - m - torch.log(torch.sum(torch.exp(x - m), dim=axis, keepdim=True))


def discretized_mix_logistic_loss(x, l, bug=None):
    """ log-likelihood for mixture of discretized logistics, assumes the data has been rescaled to [-1,1] interval """
    # Pytorch ordering
    x = x.permute(0, 2, 3, 1)
    l = l.permute(0, 2, 3, 1)
    xs = [int(y) for y in x.size()]
    ls = [int(y) for y in l.size()]
   
    # here and below: unpacking the params of the mixture of logistics
    nr_mix = int(ls[-1] / 10) 
    logit_probs = l[:, :, :, :nr_mix]
    l = l[:, :, :, nr_mix:].contiguous().view(xs + [nr_mix * 3]) # 3 for mean, scale, coef
    means = l[:, :, :, :, :nr_mix]
    # log_scales = torch.max(l[:, :, :, :, nr_mix:2 * nr_mix], -7.)
    log_scales = torch.clamp(l[:, :, :, :, nr_mix:2 * nr_mix], min=-7.)
   
    coeffs = F.tanh(l[:, :, :, :, 2 * nr_mix:3 * nr_mix])
    # here and below: getting the means and adjusting them based on preceding
    # sub-pixels
    x = x.contiguous()
    x = x.unsqueeze(-1) + torch.zeros(xs + [nr_mix])
    m2 = (means[:, :, :, 1, :] + coeffs[:, :, :, 0, :]
                * x[:, :, :, 0, :]).view(xs[0], xs[1], xs[2], 1, nr_mix)

    m3 = (means[:, :, :, 2, :] + coeffs[:, :, :, 1, :] * x[:, :, :, 0, :] +
                coeffs[:, :, :, 2, :] * x[:, :, :, 1, :]).view(xs[0], xs[1], xs[2], 1, nr_mix)

    means = torch.cat((means[:, :, :, 0, :].unsqueeze(3), m2, m3), dim=3)
    centered_x = x - means
    inv_stdv = torch.exp(-log_scales)
    plus_in = inv_stdv * (centered_x + 1. / 255.)
    cdf_plus = F.sigmoid(plus_in)
    min_in = inv_stdv * (centered_x - 1. / 255.)
    cdf_min = F.sigmoid(min_in)
    # log probability for edge case of 0 (before scaling)
    log_cdf_plus = plus_in - F.softplus(plus_in)
    # log probability for edge case of 255 (before scaling)
    log_one_minus_cdf_min = -F.softplus(min_in)
    cdf_delta = cdf_plus - cdf_min  # probability for all other cases
    mid_in = inv_stdv * centered_x
    # log probability in the center of the bin, to be used in extreme cases
    # (not actually used in our code)
    log_pdf_mid = mid_in - log_scales - 2. * F.softplus(mid_in)

    # now select the right output: left edge case, right edge case, normal
    # case, extremely low prob case (doesn't actually happen for us)

    # this is what we are really doing, but using the robust version below for extreme cases in other applications and to avoid NaN issue with tf.select()
    # log_probs = tf.select(x < -0.999, log_cdf_plus, tf.select(x > 0.999, log_one_minus_cdf_min, tf.log(cdf_delta)))

    # robust version, that still works if probabilities are below 1e-5 (which never happens in our code)
    # tensorflow backpropagates through tf.select() by multiplying with zero instead of selecting: this requires use to use some ugly tricks to avoid potential NaNs
    # the 1e-12 in tf.maximum(cdf_delta, 1e-12) is never actually used as output, it's purely there to get around the tf.select() gradient issue
    # if the probability on a sub-pixel is below 1e-5, we use an approximation
    # based on the assumption that the log-density is constant in the bin of
    # the observed sub-pixel value
    
    inner_inner_cond = (cdf_delta > 1e-5).float()
    inner_inner_out  = inner_inner_cond * torch.log(torch.clamp(cdf_delta, min=1e-12)) + (1. - inner_inner_cond) * (log_pdf_mid - np.log(127.5))
    inner_cond       = (x > 0.999).float()
    inner_out        = inner_cond * log_one_minus_cdf_min + (1. - inner_cond) * inner_inner_out
    cond             = (x < -0.999).float()
    log_probs        = cond * log_cdf_plus + (1. - cond) * inner_out
    if bug == "mixture_logits_not_normalized":  # the raw logits added in place of their log-softmax
        log_probs    = torch.sum(log_probs, dim=3) + logit_probs
    else:
        log_probs    = torch.sum(log_probs, dim=3) + log_prob_from_logits(logit_probs)
    
    return -torch.sum(log_sum_exp(log_probs))




# ---- the data: smooth quantized 8x8 RGB images in CIFAR's place ------------------------------------------------

def make_images(gen, n):
    """Per image a colour gradient along a random direction; green and blue follow red (coupled sub-pixels)."""
    coords = torch.linspace(-1, 1, OBS[1])
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    angle = torch.rand(n, 1, 1, generator=gen) * 2 * np.pi
    ramp = torch.cos(angle) * xx + torch.sin(angle) * yy  # [n, H, W] in [-1.4, 1.4]
    base = torch.rand(n, 3, 1, 1, generator=gen) * 0.4 + 0.3
    gain = torch.rand(n, 3, 1, 1, generator=gen) * 0.2 + 0.05
    img = (base + gain * ramp[:, None]).clamp(0, 1)
    return torch.round(img * 255) / 255  # ToTensor() of 8-bit pixels


# ---- main.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    # reproducibility
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)

    obs = OBS
    input_channels = obs[0]
    rescaling     = lambda x : (x - .5) * 2.
    kwargs = {'drop_last': True}
    train_loader = DataLoader(TensorDataset(rescaling(make_images(gen, N_TRAIN)), torch.zeros(N_TRAIN)),
                              batch_size=BATCH_SIZE, shuffle=True, **kwargs)
    test_input = rescaling(make_images(gen, N_TEST))[:BATCH_SIZE]

    loss_op   = lambda real, fake : discretized_mix_logistic_loss(real, fake, bug=bug)

    model = PixelCNN(nr_resnet=NR_RESNET, nr_filters=NR_FILTERS,
                input_channels=input_channels, nr_logistic_mix=NR_LOGISTIC_MIX, bug=bug)

    optimizer = optim.Adam(model.parameters(), lr=LR)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=1, gamma=LR_DECAY)

    def epochs():
        for _epoch in range(5000):
            model.train(True)
            model.train()
            for _batch_idx, (input, _) in enumerate(train_loader):
                output = model(input)
                loss = loss_op(input, output)
                if bug == "zero_grad_after_backward":
                    loss.backward()
                    optimizer.zero_grad()
                else:
                    optimizer.zero_grad()
                    loss.backward()
                optimizer.step()
                yield loss.detach()

            # decrease learning rate
            scheduler.step()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            test_loss = loss_op(batch[0], model(batch[0])).item()
        model.train()
        deno = batch[0].size(0) * np.prod(obs) * np.log(2.)
        return test_loss / deno

    steps = epochs()
    return Program(name="pixelcnnpp_cifar", model=model, batch=(test_input, test_input),
                   loss_fn=lambda output, target: loss_op(target, output), optimizer=optimizer,
                   train_step=lambda: next(steps), eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the vertical stack's first convolution built without its output down-shift: row i of the u stream sees row i
    # of the input, so every sub-pixel's prediction reads the pixel it predicts.
    Bug("u_init_not_shifted_down", functools.partial(_build, bug="u_init_not_shifted_down"), "learning_ledger",
        ("DEPENDENCY",)),
    # the mixture weights' logits added to the component log-likelihoods without log_prob_from_logits: the
    # "likelihood" is no longer normalized and grows with the logits.
    Bug("mixture_logits_not_normalized", functools.partial(_build, bug="mixture_logits_not_normalized"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() moved after loss.backward(): every step is taken on zeroed gradients.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
