# ruff: noqa: UP008, UP004, PLR0402, B008, SIM211
"""The M2 model of Kingma et al. (NeurIPS 2014), "semi-supervised learning with deep generative models", from
wohlert/semi-supervised-pytorch: a VAE whose encoder q(z|x, y) and decoder p(x|y, z) are conditioned on the label,
with a classifier q(y|x). Labelled batches contribute the negative ELBO ``-L(x, y)``; unlabelled batches the
negative ``U(x)``, the ELBO enumerated over every label and weighted by q(y|x) plus its entropy; the classifier gets
an extra ``alpha``-weighted cross-entropy on the labelled batch. Bernoulli likelihood on binarized pixels, Adam.

Source: https://github.com/wohlert/semi-supervised-pytorch
Commit: 7cde4959468d271552febdcfed5e1cfae9857613
Files: ``examples/notebooks/Deep Generative Model.ipynb`` (the M2 cells), ``examples/notebooks/datautils.py``
(``get_mnist``), ``semi-supervised/`` (``models/dgm.py``, ``models/vae.py``, ``layers/stochastic.py``,
``inference/variational.py``, ``inference/distributions.py``, ``utils.py``)
License: MIT (Copyright (c) 2017 Jesper Wohlert; full text in LICENSES/wohlert-semi-supervised-pytorch.txt)
Domain: generative model, semi-supervised VAE (M2: label-conditioned encoder/decoder, enumeration over labels)

Kept as written: the classes and functions of those files that M2 uses (the softplus on ``log_var``, the
single-sample KL, the uniform categorical prior, Xavier-normal init, the softmax classifier, labels enumerated
class-major and ``L.view_as(logits.t()).t()``, the importance-weighted sampler with mc = iw = 1), the notebook's cells: ``DeepGenerativeModel([x_dim, y_dim, z_dim, h_dim])``, 10 labelled examples per
class, ``alpha = 0.1 * len(unlabelled) / len(labelled)``, Adam(lr 3e-4, betas (0.9, 0.999)), ``SVI(model,
likelihood=binary_cross_entropy, sampler=sampler)`` (beta ``repeat(1)``), the loop body (``zip(cycle(labelled),
unlabelled)``, ``L = -elbo(x, y)``, ``U = -elbo(u)``, ``classication_loss`` as the labelled log-likelihood, ``J_alpha
= L - alpha * classication_loss + U``, backward, step, zero_grad), the validation loop's accuracy.

Deviations from the original:
- MNIST (torchvision download) is not here: ``_synthetic_digits`` makes 8x8 gray "digits" from ``seed``: 10 class
  prototypes (three random strokes each on a dark background) plus per-image jitter; ``flatten_bernoulli``
  binarizes them at every fetch as the notebook's transform does; 1280 training and 320 validation images. The rule
  is learnable: the class is the prototype the image was drawn from;
- sizes for 2 CPU cores: x_dim 784 -> 64, z_dim 32 -> 8, h_dim [256, 128] -> [64, 32], batch size 64 -> 32; the
  loaders' ``num_workers=2`` / ``pin_memory`` are dropped;
- the branches the notebook never takes are left out: ``_kld``'s flow and ``p_param`` branches (no flow, standard
  prior), ``enumerate_discrete``'s ``.cuda()``; ``get_mnist``'s sampler import is at the top; the library's docstrings, comments and blank lines
  inside functions are dropped;
- PyTorch 0.3 idioms: ``Variable(...)`` wrappers are dropped, ``J_alpha.data[0]`` is ``.item()``; CPU;
- the epoch loop is unrolled: one ``train_step`` is one ``(x, y), (u, _)`` pair of it (a new ``zip(cycle(labelled),
  unlabelled)`` at the end of an epoch, as the next epoch's ``for`` makes); the per-epoch prints are dropped;
  ``eval_fn`` is the validation loop returning the accuracy;
- the declared model is the ``SVI`` module the notebook builds (``elbo``, holding the M2 model), on a labelled batch:
  ``loss_fn`` is ``-elbo(x, y)``, the labelled term;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from itertools import cycle, repeat

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import init
from torch.utils.data.sampler import SubsetRandomSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIDE, N_TRAIN, N_VALID = 8, 1280, 320  # (port) synthetic digits
n_labels = 10

# semi-supervised/utils.py
def enumerate_discrete(x, y_dim):
    def batch(batch_size, label):
        labels = (torch.ones(batch_size, 1) * label).type(torch.LongTensor)
        y = torch.zeros((batch_size, y_dim))
        y.scatter_(1, labels, 1)
        return y.type(torch.LongTensor)
    batch_size = x.size(0)
    generated = torch.cat([batch(batch_size, i) for i in range(y_dim)])
    return generated.float()

def onehot(k):
    def encode(label):
        y = torch.zeros(k)
        if label < k:
            y[label] = 1
        return y
    return encode

def log_sum_exp(tensor, dim=-1, sum_op=torch.sum):
    max, _ = torch.max(tensor, dim=dim, keepdim=True)
    return torch.log(sum_op(torch.exp(tensor - max), dim=dim, keepdim=True) + 1e-8) + max

# semi-supervised/inference/distributions.py
def log_standard_gaussian(x):
    return torch.sum(-0.5 * math.log(2 * math.pi) - x ** 2 / 2, dim=-1)

def log_gaussian(x, mu, log_var):
    log_pdf = - 0.5 * math.log(2 * math.pi) - log_var / 2 - (x - mu)**2 / (2 * torch.exp(log_var))
    return torch.sum(log_pdf, dim=-1)

def log_standard_categorical(p):
    # Uniform prior over y
    prior = F.softmax(torch.ones_like(p), dim=1)
    prior.requires_grad = False
    cross_entropy = -torch.sum(p * torch.log(prior + 1e-8), dim=1)
    return cross_entropy

# semi-supervised/layers/stochastic.py
class Stochastic(nn.Module):
    def reparametrize(self, mu, log_var):
        epsilon = torch.randn(mu.size())
        std = log_var.mul(0.5).exp_()
        z = mu.addcmul(std, epsilon)
        return z

class GaussianSample(Stochastic):
    def __init__(self, in_features, out_features):
        super(GaussianSample, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.mu = nn.Linear(in_features, out_features)
        self.log_var = nn.Linear(in_features, out_features)

    def forward(self, x):
        mu = self.mu(x)
        log_var = F.softplus(self.log_var(x))
        return self.reparametrize(mu, log_var), mu, log_var

# semi-supervised/models/vae.py
class Encoder(nn.Module):
    def __init__(self, dims, sample_layer=GaussianSample):
        super(Encoder, self).__init__()
        [x_dim, h_dim, z_dim] = dims
        neurons = [x_dim, *h_dim]
        linear_layers = [nn.Linear(neurons[i-1], neurons[i]) for i in range(1, len(neurons))]
        self.hidden = nn.ModuleList(linear_layers)
        self.sample = sample_layer(h_dim[-1], z_dim)

    def forward(self, x):
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.sample(x)

class Decoder(nn.Module):
    def __init__(self, dims):
        super(Decoder, self).__init__()
        [z_dim, h_dim, x_dim] = dims
        neurons = [z_dim, *h_dim]
        linear_layers = [nn.Linear(neurons[i-1], neurons[i]) for i in range(1, len(neurons))]
        self.hidden = nn.ModuleList(linear_layers)
        self.reconstruction = nn.Linear(h_dim[-1], x_dim)
        self.output_activation = nn.Sigmoid()

    def forward(self, x):
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.output_activation(self.reconstruction(x))

class VariationalAutoencoder(nn.Module):
    def __init__(self, dims):
        super(VariationalAutoencoder, self).__init__()
        [x_dim, z_dim, h_dim] = dims
        self.z_dim = z_dim
        self.flow = None
        self.encoder = Encoder([x_dim, h_dim, z_dim])
        self.decoder = Decoder([z_dim, list(reversed(h_dim)), x_dim])
        self.kl_divergence = 0
        for m in self.modules():
            if isinstance(m, nn.Linear):
                init.xavier_normal(m.weight.data)
                if m.bias is not None:
                    m.bias.data.zero_()

    def _kld(self, z, q_param, p_param=None):
        (mu, log_var) = q_param
        qz = log_gaussian(z, mu, log_var)  # (port) self.flow is None
        pz = log_standard_gaussian(z)  # (port) p_param is None
        kl = qz - pz
        return kl

# semi-supervised/models/dgm.py
class Classifier(nn.Module):
    def __init__(self, dims):
        super(Classifier, self).__init__()
        [x_dim, h_dim, y_dim] = dims
        self.dense = nn.Linear(x_dim, h_dim)
        self.logits = nn.Linear(h_dim, y_dim)

    def forward(self, x):
        x = F.relu(self.dense(x))
        x = F.softmax(self.logits(x), dim=-1)
        return x

class DeepGenerativeModel(VariationalAutoencoder):
    def __init__(self, dims):
        [x_dim, self.y_dim, z_dim, h_dim] = dims
        super(DeepGenerativeModel, self).__init__([x_dim, z_dim, h_dim])
        self.encoder = Encoder([x_dim + self.y_dim, h_dim, z_dim])
        self.decoder = Decoder([z_dim + self.y_dim, list(reversed(h_dim)), x_dim])
        self.classifier = Classifier([x_dim, h_dim[0], self.y_dim])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                init.xavier_normal(m.weight.data)
                if m.bias is not None:
                    m.bias.data.zero_()

    def forward(self, x, y):
        # Add label and data and generate latent variable
        z, z_mu, z_log_var = self.encoder(torch.cat([x, y], dim=1))
        self.kl_divergence = self._kld(z, (z_mu, z_log_var))
        # Reconstruct data point from latent data and label
        x_mu = self.decoder(torch.cat([z, y], dim=1))
        return x_mu

    def classify(self, x):
        logits = self.classifier(x)
        return logits

# semi-supervised/inference/variational.py
class ImportanceWeightedSampler(object):
    def __init__(self, mc=1, iw=1):
        self.mc = mc
        self.iw = iw

    def resample(self, x):
        return x.repeat(self.mc * self.iw, 1)

    def __call__(self, elbo):
        elbo = elbo.view(self.mc, self.iw, -1)
        elbo = torch.mean(log_sum_exp(elbo, dim=1, sum_op=torch.mean), dim=0)
        return elbo.view(-1)

class SVI(nn.Module):
    base_sampler = ImportanceWeightedSampler(mc=1, iw=1)
    def __init__(self, model, likelihood=F.binary_cross_entropy, beta=repeat(1), sampler=base_sampler, bug=None):
        super(SVI, self).__init__()
        self.model = model
        self.likelihood = likelihood
        self.sampler = sampler
        self.beta = beta
        self.bug = bug

    def forward(self, x, y=None):
        is_labelled = False if y is None else True
        # Prepare for sampling
        xs, ys = (x, y)
        # Enumerate choices of label
        if not is_labelled:
            ys = enumerate_discrete(xs, self.model.y_dim)
            xs = xs.repeat(self.model.y_dim, 1)
        # Increase sampling dimension
        xs = self.sampler.resample(xs)
        ys = self.sampler.resample(ys)
        reconstruction = self.model(xs, ys)
        # p(x|y,z)
        likelihood = -self.likelihood(reconstruction, xs)
        # p(y)
        prior = -log_standard_categorical(ys)
        # Equivalent to -L(x, y)
        elbo = likelihood + prior - next(self.beta) * self.model.kl_divergence
        L = self.sampler(elbo)
        if is_labelled:
            return torch.mean(L)
        logits = self.model.classify(x)
        if self.bug == "enumerated_elbo_viewed_not_transposed":
            # classic: the class-major [y_dim * B] ELBOs viewed as [B, y_dim] directly, so an example's row holds
            # other examples' ELBOs under other labels
            L = L.view_as(logits)
        else:
            L = L.view_as(logits.t()).t()
        # Calculate entropy H(q(y|x)) and sum over all labels
        H = -torch.sum(torch.mul(logits, torch.log(logits + 1e-8)), dim=-1)
        L = torch.sum(torch.mul(logits, L), dim=-1)
        # Equivalent to -U(x)
        U = L + H
        return torch.mean(U)

def binary_cross_entropy(r, x):
    return -torch.sum(x * torch.log(r + 1e-8) + (1 - x) * torch.log(1 - r + 1e-8), dim=-1)

class _Digits(torch.utils.data.Dataset):
    """(port) Gray 8x8 images and labels, ``flatten_bernoulli`` and ``onehot`` applied at fetch."""
    def __init__(self, images, labels, transform, target_transform):
        self.images, self.labels = images, labels
        self.transform, self.target_transform = transform, target_transform
    def __len__(self):
        return len(self.labels)
    def __getitem__(self, i):
        return self.transform(self.images[i]), self.target_transform(int(self.labels[i]))

def _synthetic_digits(seed, n):
    """(port) 10 prototypes of three strokes each; an image is its class's prototype, shifted and dimmed at random."""
    rng = np.random.RandomState(seed)
    protos = np.full((n_labels, SIDE, SIDE), 0.05)
    for c in range(n_labels):
        for _ in range(3):
            r, col, length = rng.randint(SIDE), rng.randint(SIDE), rng.randint(3, SIDE)
            if rng.rand() < 0.5:
                protos[c, r, col:col + length] = 0.95
            else:
                protos[c, r:r + length, col] = 0.95
    labels = rng.randint(n_labels, size=n)
    shifts = rng.randint(-1, 2, size=(n, 2))
    images = np.stack([np.roll(protos[c], tuple(s), axis=(0, 1)) for c, s in zip(labels, shifts)])
    images = np.clip(images * rng.uniform(0.8, 1.0, size=(n, 1, 1)), 0, 1)
    return torch.tensor(images, dtype=torch.float), torch.tensor(labels)

def get_mnist(seed, batch_size=64, labels_per_class=100):
    from functools import reduce
    from operator import __or__
    flatten_bernoulli = lambda x: x.view(-1).bernoulli()  # (port) transforms.ToTensor()(x) on a float image
    images, labels = _synthetic_digits(seed, N_TRAIN + N_VALID)
    mnist_train = _Digits(images[:N_TRAIN], labels[:N_TRAIN], flatten_bernoulli, onehot(n_labels))
    mnist_valid = _Digits(images[N_TRAIN:], labels[N_TRAIN:], flatten_bernoulli, onehot(n_labels))

    def get_sampler(labels, n=None):
        # Only choose digits in n_labels
        (indices,) = np.where(reduce(__or__, [labels == i for i in np.arange(n_labels)]))
        # Ensure uniform distribution of labels
        np.random.shuffle(indices)
        indices = np.hstack([list(filter(lambda idx: labels[idx] == i, indices))[:n] for i in range(n_labels)])
        indices = torch.from_numpy(indices)
        sampler = SubsetRandomSampler(indices)
        return sampler
    labelled = torch.utils.data.DataLoader(mnist_train, batch_size=batch_size,
                                           sampler=get_sampler(mnist_train.labels.numpy(), labels_per_class))
    unlabelled = torch.utils.data.DataLoader(mnist_train, batch_size=batch_size,
                                             sampler=get_sampler(mnist_train.labels.numpy()))
    validation = torch.utils.data.DataLoader(mnist_valid, batch_size=batch_size,
                                             sampler=get_sampler(mnist_valid.labels.numpy()))
    return labelled, unlabelled, validation

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    y_dim = 10
    z_dim = 8  # (port) 32
    h_dim = [64, 32]  # (port) [256, 128]
    model = DeepGenerativeModel([SIDE * SIDE, y_dim, z_dim, h_dim])
    labelled, unlabelled, validation = get_mnist(seed, batch_size=32, labels_per_class=10)
    alpha = 0.1 * len(unlabelled) / len(labelled)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.999))
    sampler = ImportanceWeightedSampler(mc=1, iw=1)
    elbo = SVI(model, likelihood=binary_cross_entropy, sampler=sampler, bug=bug)
    state = {"it": None}

    def train_step():
        if state["it"] is None:
            model.train()
            state["it"] = zip(cycle(labelled), unlabelled)
        try:
            (x, y), (u, _) = next(state["it"])
        except StopIteration:
            model.train()
            state["it"] = zip(cycle(labelled), unlabelled)
            (x, y), (u, _) = next(state["it"])
        L = -elbo(x, y)
        U = -elbo(u)
        # Add auxiliary classification loss q(y|x)
        logits = model.classify(x)
        # Regular cross entropy
        classication_loss = torch.sum(y * torch.log(logits + 1e-8), dim=1).mean()
        J_alpha = L - alpha * classication_loss + U
        if bug == "classification_sign_from_validation":
            # the validation cell's sign (J_alpha = L + alpha * classication_loss + U) pasted into the training
            # cell, where classication_loss is the log-likelihood: the classifier is pushed away from the labels
            J_alpha = L + alpha * classication_loss + U
        J_alpha.backward()
        if bug == "zero_grad_before_step":
            optimizer.zero_grad()
        optimizer.step()
        optimizer.zero_grad()
        return J_alpha.item()

    def loss_fn(out, _y):
        return -out

    def eval_fn(elbo, batch):
        model.eval()
        accuracy = 0
        with torch.no_grad():
            for x, y in validation:
                logits = model.classify(x)
                accuracy += torch.mean((torch.max(logits, 1)[1].data == torch.max(y, 1)[1].data).float())
        m = len(validation)
        model.train()
        return float(accuracy / m)
    x, y = next(iter(labelled))
    return Program(name="semisupervisedpytorch_m2", model=elbo, batch=((x, y), y), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=labelled)

build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the enumerated ELBOs reshaped to [B, y_dim] without the transpose, misaligned with q(y|x)
    Bug("enumerated_elbo_viewed_not_transposed", functools.partial(_build, bug="enumerated_elbo_viewed_not_transposed"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic copy-paste slip between the notebook's two loops: the classification term's sign flipped
    Bug("classification_sign_from_validation", functools.partial(_build, bug="classification_sign_from_validation"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: zero_grad between backward and step, the step uses no gradient
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
