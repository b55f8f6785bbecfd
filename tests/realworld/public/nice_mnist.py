# ruff: noqa: UP008, PLR0402
"""NICE (Dinh, Krueger & Bengio, "NICE: Non-linear Independent Components Estimation", 2014) on MNIST as written in
fmu2/NICE: four additive coupling layers (alternating odd/even halves of the flattened image, each shift a 5-layer
ReLU MLP of the other half), a diagonal log-scaling layer that carries the whole log-determinant, a standard
logistic prior, dequantized and mean-centred inputs, the negative log-likelihood minimized with Adam (betas (0.9,
0.999), eps 1e-4).

Source: https://github.com/fmu2/NICE
Commit: 90559a1ad251a257721ab4787e426aa66945a405
Files: ``nice.py`` (``Coupling``, ``Scaling``, ``NICE``), ``train.py`` (``main``), ``utils.py`` (``dequantize``,
``prepare_data``, ``StandardLogistic``)
License: MIT (Copyright (c) 2019 Fangzhou Mu; full text in LICENSES/fmu2-NICE.txt)
Domain: normalizing flow (NICE: additive couplings + log-scaling, maximum likelihood on images)

Kept as written: ``Coupling`` (the ``[B, W//2, 2]`` reshape that splits odd and even pixels, ``mask_config`` 1
alternating per layer), ``Scaling`` (``log_det_J = sum(scale)``), ``NICE`` (``f``, ``g``, ``log_prob``,
``forward``), ``dequantize`` / ``prepare_data`` (uniform noise, ``(x * 255 + noise) / 256``, flattening, the
dataset mean subtracted), ``StandardLogistic.log_prob``, train.py's loop body (``flow.train()``, zero_grad,
``loss = -flow(inputs).mean()``, backward, step), coupling 4, hidden 5, latent 'logistic', lr 1e-3, betas (0.9,
0.999), eps 1e-4.

Deviations from the original:
- MNIST (a torchvision download) is replaced by synthetic 28x28 grey images made from ``seed``: ten class
  templates of 3 random strokes each (a thick line between two random points), drawn with a random shift of up to
  2 pixels, random intensity and a little noise, quantized to k/255 as ToTensor gives; ``statistics/mnist_mean.pt``
  is replaced by the same per-pixel mean computed on the synthetic training set; torchvision is not installed;
- sizes for 2 CPU cores: mid_dim 1000 -> 256, batch_size 200 -> 64, 2048 training images; the DataLoader is
  seeded and has no workers;
- CUDA is not used (``device`` is the CPU; ``.cuda()`` is dropped from ``NICE.sample`` and
  ``StandardLogistic.sample``); ``StandardLogistic`` passes ``validate_args=False`` to the Distribution constructor
  (newer torch validates the argument-free base); the reconstruction and sample images every 1000 iterations, the
  bits/dim print and the checkpoint are dropped;
- one ``train_step`` is one iteration of ``main``'s loop (the loader restarted when it runs out); the Program's
  batch is the first prepared batch and its ``loss_fn`` the loop's ``-flow(inputs).mean()`` on the model's output;
  ``eval_fn`` the same NLL on held-out prepared images under ``eval()``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# nice.py
"""Additive coupling layer.
"""
class Coupling(nn.Module):
    def __init__(self, in_out_dim, mid_dim, hidden, mask_config):
        """Initialize a coupling layer.

        Args:
            in_out_dim: input/output dimensions.
            mid_dim: number of units in a hidden layer.
            hidden: number of hidden layers.
            mask_config: 1 if transform odd units, 0 if transform even units.
        """
        super(Coupling, self).__init__()
        self.mask_config = mask_config

        self.in_block = nn.Sequential(
            nn.Linear(in_out_dim//2, mid_dim),
            nn.ReLU())
        self.mid_block = nn.ModuleList([
            nn.Sequential(
                nn.Linear(mid_dim, mid_dim),
                nn.ReLU()) for _ in range(hidden - 1)])
        self.out_block = nn.Linear(mid_dim, in_out_dim//2)

    def forward(self, x, reverse=False):
        """Forward pass.

        Args:
            x: input tensor.
            reverse: True in inference mode, False in sampling mode.
        Returns:
            transformed tensor.
        """
        [B, W] = list(x.size())
        x = x.reshape((B, W//2, 2))
        if self.mask_config:
            on, off = x[:, :, 0], x[:, :, 1]
        else:
            off, on = x[:, :, 0], x[:, :, 1]

        off_ = self.in_block(off)
        for i in range(len(self.mid_block)):
            off_ = self.mid_block[i](off_)
        shift = self.out_block(off_)
        if reverse:
            on = on - shift
        else:
            on = on + shift

        if self.mask_config:
            x = torch.stack((on, off), dim=2)
        else:
            x = torch.stack((off, on), dim=2)
        return x.reshape((B, W))

"""Log-scaling layer.
"""
class Scaling(nn.Module):
    def __init__(self, dim):
        """Initialize a (log-)scaling layer.

        Args:
            dim: input/output dimensions.
        """
        super(Scaling, self).__init__()
        self.scale = nn.Parameter(
            torch.zeros((1, dim)), requires_grad=True)

    def forward(self, x, reverse=False):
        """Forward pass.

        Args:
            x: input tensor.
            reverse: True in inference mode, False in sampling mode.
        Returns:
            transformed tensor and log-determinant of Jacobian.
        """
        log_det_J = torch.sum(self.scale)
        if reverse:
            x = x * torch.exp(-self.scale)
        else:
            x = x * torch.exp(self.scale)
        return x, log_det_J

"""NICE main model.
"""
class NICE(nn.Module):
    def __init__(self, prior, coupling, 
        in_out_dim, mid_dim, hidden, mask_config):
        """Initialize a NICE.

        Args:
            prior: prior distribution over latent space Z.
            coupling: number of coupling layers.
            in_out_dim: input/output dimensions.
            mid_dim: number of units in a hidden layer.
            hidden: number of hidden layers.
            mask_config: 1 if transform odd units, 0 if transform even units.
        """
        super(NICE, self).__init__()
        self.prior = prior
        self.bug = None  # (port) set by _build for the bug variants
        self.in_out_dim = in_out_dim

        self.coupling = nn.ModuleList([
            Coupling(in_out_dim=in_out_dim, 
                     mid_dim=mid_dim, 
                     hidden=hidden, 
                     mask_config=(mask_config+i)%2) \
            for i in range(coupling)])
        self.scaling = Scaling(in_out_dim)

    def g(self, z):
        """Transformation g: Z -> X (inverse of f).

        Args:
            z: tensor in latent space Z.
        Returns:
            transformed tensor in data space X.
        """
        x, _ = self.scaling(z, reverse=True)
        for i in reversed(range(len(self.coupling))):
            x = self.coupling[i](x, reverse=True)
        return x

    def f(self, x):
        """Transformation f: X -> Z (inverse of g).

        Args:
            x: tensor in data space X.
        Returns:
            transformed tensor in latent space Z.
        """
        for i in range(len(self.coupling)):
            x = self.coupling[i](x)
        return self.scaling(x)

    def log_prob(self, x):
        """Computes data log-likelihood.

        (See Section 3.3 in the NICE paper.)

        Args:
            x: input minibatch.
        Returns:
            log-likelihood of input.
        """
        z, log_det_J = self.f(x)
        log_ll = torch.sum(self.prior.log_prob(z), dim=1)
        if self.bug == "log_det_dropped":
            return log_ll
        return log_ll + log_det_J

    def sample(self, size):
        """Generates samples.

        Args:
            size: number of samples to generate.
        Returns:
            samples from the data space X.
        """
        z = self.prior.sample((size, self.in_out_dim))  # (port) .cuda() dropped
        return self.g(z)

    def forward(self, x):
        """Forward pass.

        Args:
            x: input minibatch.
        Returns:
            log-likelihood of input.
        """
        return self.log_prob(x)


# utils.py
def dequantize(x, dataset):
    '''Dequantize data.

    Add noise sampled from Uniform(0, 1) to each pixel (in [0, 255]).

    Args:
        x: input tensor.
        reverse: True in inference mode, False in training mode.
    Returns:
        dequantized data.
    '''
    noise = torch.distributions.Uniform(0., 1.).sample(x.size())
    return (x * 255. + noise) / 256.

def prepare_data(x, dataset, zca=None, mean=None, reverse=False):
    """Prepares data for NICE.

    In training mode, flatten and dequantize the input.
    In inference mode, reshape tensor into image size.

    Args:
        x: input minibatch.
        dataset: name of dataset.
        zca: ZCA whitening transformation matrix.
        mean: center of original dataset.
        reverse: True if in inference mode, False if in training mode.
    Returns:
        transformed data.
    """
    if reverse:
        assert len(list(x.size())) == 2
        [B, W] = list(x.size())

        if dataset in ['mnist', 'fashion-mnist']:
            assert W == 1 * 28 * 28
            x += mean
            x = x.reshape((B, 1, 28, 28))
        elif dataset in ['svhn', 'cifar10']:
            assert W == 3 * 32 * 32
            x = torch.matmul(x, zca.inverse()) + mean
            x = x.reshape((B, 3, 32, 32))
    else:
        assert len(list(x.size())) == 4
        [B, C, H, W] = list(x.size())

        if dataset in ['mnist', 'fashion-mnist']:
            assert [C, H, W] == [1, 28, 28]
        elif dataset in ['svhn', 'cifar10']:
            assert [C, H, W] == [3, 32, 32]

        x = dequantize(x, dataset)
        x = x.reshape((B, C*H*W))

        if dataset in ['mnist', 'fashion-mnist']:
            x -= mean
        elif dataset in ['svhn', 'cifar10']:
            x = torch.matmul((x - mean), zca)
    return x

"""Standard logistic distribution.
"""
class StandardLogistic(torch.distributions.Distribution):
    def __init__(self):
        super(StandardLogistic, self).__init__(validate_args=False)  # (port) validate_args=False

    def log_prob(self, x):
        """Computes data log-likelihood.

        Args:
            x: input tensor.
        Returns:
            log-likelihood.
        """
        return -(F.softplus(x) + F.softplus(-x))

    def sample(self, size):
        """Samples from the distribution.

        Args:
            size: number of samples to generate.
        Returns:
            samples.
        """
        z = torch.distributions.Uniform(0., 1.).sample(size)  # (port) .cuda() dropped
        return torch.log(z) - torch.log(1. - z)


# ----------------------------------------------------------------------------------------------- (port) data
def _strokes_images(rs, n):
    yy, xx = np.mgrid[0:28, 0:28]
    templates = []
    for _ in range(10):
        strokes = []
        for _ in range(3):
            (y0, x0), (y1, x1) = rs.uniform(5, 23, size=(2, 2))
            strokes.append((y0, x0, y1, x1))
        templates.append(strokes)
    labels = rs.randint(0, 10, size=n)
    imgs = np.zeros((n, 1, 28, 28), dtype=np.float32)
    for k in range(n):
        dy, dx = rs.randint(-2, 3, size=2)
        img = np.zeros((28, 28))
        for (y0, x0, y1, x1) in templates[labels[k]]:
            t = np.clip(((yy - y0 - dy) * (y1 - y0) + (xx - x0 - dx) * (x1 - x0)) / ((y1 - y0) ** 2 + (x1 - x0) ** 2 + 1e-6), 0, 1)
            d = np.hypot(yy - dy - (y0 + t * (y1 - y0)), xx - dx - (x0 + t * (x1 - x0)))
            img = np.maximum(img, np.clip(1.6 - d, 0, 1))
        img = np.clip(img * rs.uniform(0.7, 1.0) + 0.03 * rs.rand(28, 28), 0, 1)
        imgs[k, 0] = np.round(img * 255) / 255
    return torch.from_numpy(imgs), torch.from_numpy(labels).long()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")  # (port) cuda:0

    # model hyperparameters
    dataset = 'mnist'
    batch_size = 64  # (port) 200
    latent = 'logistic'
    coupling = 4
    mask_config = 1.

    # optimization hyperparameters
    lr = 1e-3
    momentum = 0.9
    decay = 0.999

    zca = None
    images, labels = _strokes_images(np.random.RandomState(seed), 2048 + 256)
    train_images, test_images = images[:2048], images[2048:]
    mean = train_images.reshape(2048, -1).mean(0)  # (port) statistics/mnist_mean.pt of the synthetic set
    (full_dim, mid_dim, hidden) = (1 * 28 * 28, 256, 5)  # (port) mid_dim 1000
    trainset = torch.utils.data.TensorDataset(train_images, labels[:2048])
    trainloader = torch.utils.data.DataLoader(trainset,
        batch_size=batch_size, shuffle=True, num_workers=0, generator=torch.Generator().manual_seed(seed))

    if latent == 'normal':
        prior = torch.distributions.Normal(
            torch.tensor(0.).to(device), torch.tensor(1.).to(device))
    elif latent == 'logistic':
        prior = StandardLogistic()

    flow = NICE(prior=prior,
                coupling=coupling,
                in_out_dim=full_dim,
                mid_dim=mid_dim,
                hidden=hidden,
                mask_config=mask_config).to(device)
    flow.bug = bug
    optimizer = torch.optim.Adam(
        flow.parameters(), lr=lr, betas=(momentum, decay), eps=1e-4)

    st = {"it": iter(trainloader)}

    def train_step():
        try:
            data = next(st["it"])
        except StopIteration:
            st["it"] = iter(trainloader)
            data = next(st["it"])
        flow.train()    # set to training mode

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()    # clear gradient tensors

        inputs, _ = data
        inputs = prepare_data(
            inputs, dataset, zca=zca, mean=mean).to(device)

        # log-likelihood of input minibatch
        loss = -flow(inputs).mean()

        # backprop and update parameters
        loss.backward()
        optimizer.step()
        return loss.item()

    g = torch.Generator().manual_seed(seed + 1)
    held_out = (test_images * 255. + torch.rand(test_images.shape, generator=g)) / 256.
    held_out = held_out.reshape(len(held_out), -1) - mean

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        with torch.no_grad():
            out = float(-model(held_out).mean())
        model.train(was)
        return out

    first = (train_images[:batch_size] * 255. + torch.rand((batch_size, 1, 28, 28), generator=g)) / 256.
    first = first.reshape(batch_size, -1) - mean

    return Program(name="nice_mnist", model=flow, batch=(first,), loss_fn=lambda out, _targets=None: -out.mean(),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: log_prob returns the prior's log-density of z without the scaling layer's log-determinant: the
    # likelihood rewards shrinking every output to the prior's mode (the scales run off to -inf).
    Bug("log_det_dropped", functools.partial(_build, bug="log_det_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() left out of the loop: gradients pile up across iterations.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
