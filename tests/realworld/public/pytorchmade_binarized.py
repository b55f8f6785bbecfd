# ruff: noqa: RUF007, RUF059
"""MADE (Germain et al., ICML 2015) as karpathy/pytorch-made trains it on binarized MNIST: an MLP of
``MaskedLinear`` layers whose masks come from a (random) ordering of the input dimensions and random connectivity
degrees of the hidden units, so every output logit depends only on earlier inputs; the negative log-likelihood is
``binary_cross_entropy_with_logits(..., size_average=False) / B``, Adam (lr 1e-3, weight decay 1e-4) with StepLR
(45 epochs, x0.1); each epoch first runs a few test batches with gradients disabled, then the training pass.

Source: https://github.com/karpathy/pytorch-made
Commit: 81886ccc8270cdf3a2b32cbbca5c7feab422f907
Files: ``made.py`` (``MaskedLinear``, ``MADE``), ``run.py`` (``run_epoch``, the main block and its defaults)
License: MIT (stated in the README's "License" section; the repository has no LICENSE file; LICENSES/karpathy-pytorch-made.txt)
Domain: generative, autoregressive density estimation (masked autoencoder, Bernoulli likelihood)

Kept as written: ``MaskedLinear`` (the mask a buffer, ``F.linear(input, mask * weight, bias)``), ``MADE`` (the MLP
with the last ReLU popped, ``update_masks``: orderings and degrees from ``RandomState(seed)`` cycling over
``num_masks``, hidden masks ``<=``, output mask ``<``, the early return for a single mask), ``run_epoch``'s body
(``torch.set_grad_enabled(split == 'train')``, train / eval mode, mask resampling every ``resample_every`` steps
or on every test batch, logits averaged over ``nsamples``, the summed BCE over the batch size, zero_grad /
backward / step), the main block (seeds, ``MADE(D, hidden_list, D, num_masks)``, Adam, StepLR,
``scheduler.step(epoch)`` then ``run_epoch('test', upto=5)`` then ``run_epoch('train')`` per epoch), the defaults
(one mask, resample every 20, one sample).

Deviations from the original:
- binarized MNIST (``binarized_mnist.npz``) is not here: 1200 synthetic binary 10x10 images made from ``seed``
  (1000 train, 200 "valid"): one or two random horizontal / vertical bars of random length over 3% salt noise, so
  pixels are strongly dependent along rows and columns;
- sizes for 2 CPU cores: hidden 500 -> 128, batch 100 -> 32; the CUDA calls are dropped; ``Variable(...)`` is the
  tensor itself and ``size_average=False`` is ``reduction='sum'`` (the same loss; ``size_average`` is deprecated);
- ``run_epoch`` reads the script's globals (``model``, ``opt``, ``args``, ``xtr``, ``xte``) from a namespace and
  is split: one ``train_step`` is one batch of ``run_epoch('train')`` (at an epoch's start the main
  block's ``scheduler.step(epoch)`` and ``run_epoch('test', upto=5)`` run first); ``eval_fn`` is
  ``run_epoch('test')``'s mean loss, restoring the grad mode it found; the prints are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIDE, N_TRAIN, N_VALID = 10, 1000, 200  # (port) synthetic binarized images


# made.py
class MaskedLinear(nn.Linear):
    """ same as Linear except has a configurable mask on the weights """

    def __init__(self, in_features, out_features, bias=True):
        super().__init__(in_features, out_features, bias)
        self.register_buffer('mask', torch.ones(out_features, in_features))

    def set_mask(self, mask):
        self.mask.data.copy_(torch.from_numpy(mask.astype(np.uint8).T))

    def forward(self, input):
        return F.linear(input, self.mask * self.weight, self.bias)

class MADE(nn.Module):
    def __init__(self, nin, hidden_sizes, nout, num_masks=1, natural_ordering=False, bug=None):
        super().__init__()
        self.nin = nin
        self.nout = nout
        self.hidden_sizes = hidden_sizes
        self.bug = bug
        assert self.nout % self.nin == 0, "nout must be integer multiple of nin"

        # define a simple MLP neural net
        self.net = []
        hs = [nin] + hidden_sizes + [nout]
        for h0,h1 in zip(hs, hs[1:]):
            self.net.extend([
                    MaskedLinear(h0, h1),
                    nn.ReLU(),
                ])
        self.net.pop() # pop the last ReLU for the output layer
        self.net = nn.Sequential(*self.net)

        # seeds for orders/connectivities of the model ensemble
        self.natural_ordering = natural_ordering
        self.num_masks = num_masks
        self.seed = 0 # for cycling through num_masks orderings

        self.m = {}
        self.update_masks() # builds the initial self.m connectivity
        # note, we could also precompute the masks and cache them, but this
        # could get memory expensive for large number of masks.

    def update_masks(self):
        if self.m and self.num_masks == 1: return # only a single seed, skip for efficiency
        L = len(self.hidden_sizes)

        # fetch the next seed and construct a random stream
        rng = np.random.RandomState(self.seed)
        self.seed = (self.seed + 1) % self.num_masks

        # sample the order of the inputs and the connectivity of all neurons
        self.m[-1] = np.arange(self.nin) if self.natural_ordering else rng.permutation(self.nin)
        for l in range(L):
            self.m[l] = rng.randint(self.m[l-1].min(), self.nin-1, size=self.hidden_sizes[l])

        # construct the mask matrices
        masks = [self.m[l-1][:,None] <= self.m[l][None,:] for l in range(L)]
        if self.bug == "output_mask_leq":
            masks.append(self.m[L-1][:,None] <= self.m[-1][None,:])
        else:
            masks.append(self.m[L-1][:,None] < self.m[-1][None,:])

        # handle the case where nout = nin * k, for integer k > 1
        if self.nout > self.nin:
            k = int(self.nout / self.nin)
            # replicate the mask across the other outputs
            masks[-1] = np.concatenate([masks[-1]]*k, axis=1)

        # set the masks in all MaskedLinear layers
        layers = [l for l in self.net.modules() if isinstance(l, MaskedLinear)]
        for l,m in zip(layers, masks):
            l.set_mask(m)

    def forward(self, x):
        return self.net(x)


def _synthetic_binarized(seed):
    """(port) Bars of random length on a sparse-noise background, flattened to 100 binary pixels."""
    rng = np.random.RandomState(seed)
    x = (rng.rand(N_TRAIN + N_VALID, SIDE, SIDE) < 0.03).astype(np.float32)
    for img in x:
        for _ in range(rng.randint(1, 3)):
            i, a = rng.randint(SIDE), rng.randint(0, SIDE // 2)
            b = rng.randint(a + 3, SIDE + 1)
            if rng.rand() < 0.5:
                img[i, a:b] = 1.0
            else:
                img[a:b, i] = 1.0
    x = x.reshape(len(x), -1)
    return {'train_data': x[:N_TRAIN], 'valid_data': x[N_TRAIN:]}


# run.py
def _run_epoch(g, split, upto=None, step_only=None):
    """run_epoch with the globals it reads (model, opt, args, xtr, xte) in ``g``; ``step_only`` runs that one
    training step of the epoch (port)."""
    model, opt, args, xtr, xte, bug = g.model, g.opt, g.args, g.xtr, g.xte, g.bug
    torch.set_grad_enabled(split=='train') # enable/disable grad for efficiency of forwarding test batches
    model.train() if split == 'train' else model.eval()
    nsamples = 1 if split == 'train' else args.samples
    x = xtr if split == 'train' else xte
    N,D = x.size()
    B = 32 # batch size
    nsteps = N//B if upto is None else min(N//B, upto)
    lossfs = []
    for step in range(nsteps) if step_only is None else [step_only]:

        # fetch the next batch of data
        xb = x[step*B:step*B+B]

        # get the logits, potentially run the same batch a number of times, resampling each time
        xbhat = torch.zeros_like(xb)
        for s in range(nsamples):
            # perform order/connectivity-agnostic training by resampling the masks
            if step % args.resample_every == 0 or split == 'test': # if in test, cycle masks every time
                model.update_masks()
            # forward the model
            xbhat += model(xb)
        xbhat /= nsamples

        # evaluate the binary cross entropy loss
        if bug == "sigmoid_before_bce_with_logits":
            xbhat = torch.sigmoid(xbhat)
        loss = F.binary_cross_entropy_with_logits(xbhat, xb, reduction='sum') / B
        lossf = loss.data.item()
        lossfs.append(lossf)

        # backward/update
        if split == 'train':
            if bug != "no_zero_grad":
                opt.zero_grad()
            loss.backward()
            opt.step()

    return np.mean(lossfs)  # (port) instead of printing the epoch average


def _build(seed, bug=None):
    args = types.SimpleNamespace(hiddens='128', num_masks=1, resample_every=20, samples=1)
    # reproducibility is good
    np.random.seed(seed)
    torch.manual_seed(seed)

    # load the dataset
    mnist = _synthetic_binarized(seed)
    xtr, xte = mnist['train_data'], mnist['valid_data']
    xtr = torch.from_numpy(xtr)
    xte = torch.from_numpy(xte)

    # construct model
    hidden_list = list(map(int, args.hiddens.split(',')))
    model = MADE(xtr.size(1), hidden_list, xtr.size(1), num_masks=args.num_masks, bug=bug)

    # set up the optimizer
    opt = torch.optim.Adam(model.parameters(), 1e-3, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=45, gamma=0.1)
    g = types.SimpleNamespace(model=model, opt=opt, args=args, xtr=xtr, xte=xte, bug=bug)
    st = {"epoch": 0, "step": 0}

    def train_step():
        # one batch of the epoch loop: for epoch in range(100): scheduler.step(epoch); test upto 5; train
        if st["step"] == 0:
            scheduler.step(st["epoch"])
            _run_epoch(g, 'test', upto=5)
        loss = _run_epoch(g, 'train', step_only=st["step"])
        st["step"] += 1
        if st["step"] == xtr.size(0) // 32:
            st["step"], st["epoch"] = 0, st["epoch"] + 1
        return loss

    def eval_fn(model, _batch=None):
        # run_epoch('test') over the whole validation split; the grad mode is restored afterwards (port)
        was, mode = torch.is_grad_enabled(), model.training
        try:
            return float(_run_epoch(g, 'test'))
        finally:
            torch.set_grad_enabled(was)
            model.train(mode)

    xb = xtr[:32]
    loss_fn = lambda xbhat, xb: F.binary_cross_entropy_with_logits(xbhat, xb, reduction='sum') / 32
    return Program(name="pytorchmade_binarized", model=model, batch=(xb, xb), loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic MADE mask slip: the output mask built with <= like the hidden ones, so output d sees input d and the
    # "likelihood" is learned by copying the pixel it should predict.
    Bug("output_mask_leq", functools.partial(_build, bug="output_mask_leq"), "learning_ledger", ("DEPENDENCY",)),
    # classic: a sigmoid applied to the logits before the with-logits BCE.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: opt.zero_grad() left out, gradients accumulate across steps.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
