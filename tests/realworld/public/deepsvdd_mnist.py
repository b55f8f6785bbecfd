"""One-class Deep SVDD (Ruff et al., ICML 2018) as lukasruff/Deep-SVDD-PyTorch runs its MNIST example: a bias-free
LeNet (``MNIST_LeNet``: two 5x5 convolutions with affine-free batch norms, leaky ReLU and max-pooling, a linear map
to a 32-d representation) is initialized from the encoder of an autoencoder pretrained on the normal class
(``AETrainer``: summed squared reconstruction error), the hypersphere center ``c`` is the mean initial
representation (entries within 0.1 of zero pushed to +-0.1), and training minimizes the mean squared distance of
the normal data to ``c`` with Adam and MultiStepLR; test scores are the distances, evaluated by AUC against outliers.

Source: https://github.com/lukasruff/Deep-SVDD-PyTorch
Commit: 1901612d595e23675fb75c4ebb563dd0ffebc21e
Files: ``src/optim/deepSVDD_trainer.py`` (``DeepSVDDTrainer.train``, ``test``, ``init_center_c``),
``src/optim/ae_trainer.py`` (``AETrainer.train``), ``src/networks/mnist_LeNet.py`` (``MNIST_LeNet``,
``MNIST_LeNet_Autoencoder``), ``src/deepSVDD.py`` (``pretrain``, ``init_network_weights_from_pretraining``),
``src/datasets/mnist.py``, ``src/datasets/preprocessing.py`` (``global_contrast_normalization``), ``README.md``
(the MNIST example's hyperparameters)
License: MIT (Copyright (c) 2018 Lukas Ruff; full text in LICENSES/lukasruff-Deep-SVDD-PyTorch.txt)
Domain: anomaly detection (one-class deep SVDD, autoencoder pretraining, fixed hypersphere center)

Kept as written: both networks (no bias terms, ``affine=False`` batch norms, the decoder's interpolations and
sigmoid), ``AETrainer.train``'s loop body, ``init_network_weights_from_pretraining`` (the encoder keys of the
autoencoder's state_dict loaded into the network), ``init_center_c`` (eval mode, mean output over the train loader,
the eps rule), ``DeepSVDDTrainer.train`` (``scheduler.step()`` at the start of each epoch, zero_grad, forward,
``dist = sum((outputs - c) ** 2, dim=1)``, one-class loss ``mean(dist)``, backward, step), ``test`` (eval mode,
distances as scores), ``global_contrast_normalization`` (l1) then min-max scaling; the README's MNIST example (lr
1e-4, weight decay 0.5e-6, milestone 50; autoencoder lr 1e-4, weight decay 0.5e-3, milestone 50).

Deviations from the original:
- MNIST is not here (nor torchvision): 28x28 synthetic "digits" made from ``seed`` (10 classes of three random
  strokes, shifted by up to 3 pixels, intensity noise); normal class 3: 256 of its images train, the test set has
  64 normal and 64 outlier images; the per-class min / max constants precomputed for MNIST are computed on the
  synthetic normal training images after GCN;
- sizes for 2 CPU cores: batch 200 -> 32; the autoencoder is pretrained for 2 epochs at build time (150 in the
  example); CUDA, logging, timing and model saving are dropped;
- ``roc_auc_score`` (scikit-learn is not here) is written out as the Mann-Whitney rank statistic;
- one ``train_step`` is one batch of ``DeepSVDDTrainer.train``'s epoch loop (``scheduler.step()`` where an epoch
  starts); ``eval_fn`` is ``test``'s AUC, restoring train mode after it;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIDE, NORMAL_CLASS, N_TRAIN, N_TEST_EACH, BATCH = 28, 3, 256, 64, 32  # (port)


# src/networks/mnist_LeNet.py (bias / affine switch for the bug variant only)
class MNIST_LeNet(nn.Module):

    def __init__(self, bias=False):
        super().__init__()

        self.rep_dim = 32
        self.pool = nn.MaxPool2d(2, 2)

        self.conv1 = nn.Conv2d(1, 8, 5, bias=bias, padding=2)
        self.bn1 = nn.BatchNorm2d(8, eps=1e-04, affine=bias)
        self.conv2 = nn.Conv2d(8, 4, 5, bias=bias, padding=2)
        self.bn2 = nn.BatchNorm2d(4, eps=1e-04, affine=bias)
        self.fc1 = nn.Linear(4 * 7 * 7, self.rep_dim, bias=bias)

    def forward(self, x):
        x = self.conv1(x)
        x = self.pool(F.leaky_relu(self.bn1(x)))
        x = self.conv2(x)
        x = self.pool(F.leaky_relu(self.bn2(x)))
        x = x.view(x.size(0), -1)
        x = self.fc1(x)
        return x


class MNIST_LeNet_Autoencoder(nn.Module):

    def __init__(self, bias=False):
        super().__init__()

        self.rep_dim = 32
        self.pool = nn.MaxPool2d(2, 2)

        # Encoder (must match the Deep SVDD network above)
        self.conv1 = nn.Conv2d(1, 8, 5, bias=bias, padding=2)
        self.bn1 = nn.BatchNorm2d(8, eps=1e-04, affine=bias)
        self.conv2 = nn.Conv2d(8, 4, 5, bias=bias, padding=2)
        self.bn2 = nn.BatchNorm2d(4, eps=1e-04, affine=bias)
        self.fc1 = nn.Linear(4 * 7 * 7, self.rep_dim, bias=bias)

        # Decoder
        self.deconv1 = nn.ConvTranspose2d(2, 4, 5, bias=False, padding=2)
        self.bn3 = nn.BatchNorm2d(4, eps=1e-04, affine=False)
        self.deconv2 = nn.ConvTranspose2d(4, 8, 5, bias=False, padding=3)
        self.bn4 = nn.BatchNorm2d(8, eps=1e-04, affine=False)
        self.deconv3 = nn.ConvTranspose2d(8, 1, 5, bias=False, padding=2)

    def forward(self, x):
        x = self.conv1(x)
        x = self.pool(F.leaky_relu(self.bn1(x)))
        x = self.conv2(x)
        x = self.pool(F.leaky_relu(self.bn2(x)))
        x = x.view(x.size(0), -1)
        x = self.fc1(x)
        x = x.view(x.size(0), int(self.rep_dim / 16), 4, 4)
        x = F.interpolate(F.leaky_relu(x), scale_factor=2)
        x = self.deconv1(x)
        x = F.interpolate(F.leaky_relu(self.bn3(x)), scale_factor=2)
        x = self.deconv2(x)
        x = F.interpolate(F.leaky_relu(self.bn4(x)), scale_factor=2)
        x = self.deconv3(x)
        x = torch.sigmoid(x)

        return x


# src/datasets/preprocessing.py
def global_contrast_normalization(x: torch.tensor, scale='l2'):
    assert scale in ('l1', 'l2')
    n_features = int(np.prod(x.shape))
    mean = torch.mean(x)  # mean over all features (pixels) per sample
    x -= mean
    if scale == 'l1':
        x_scale = torch.mean(torch.abs(x))
    if scale == 'l2':
        x_scale = torch.sqrt(torch.sum(x ** 2)) / n_features
    x /= x_scale
    return x


def _synthetic_mnist(seed):
    """(port) (image, target, index) triples as MyMNIST returns them; target 0 normal, 1 outlier."""
    g = torch.Generator().manual_seed(seed)
    templates = []
    for _ in range(10):
        t = torch.zeros(SIDE, SIDE)
        for _ in range(3):
            r, c = torch.randint(6, SIDE - 6, (2,), generator=g).tolist()
            if torch.rand((), generator=g) < 0.5:
                t[r - 1:r + 1, 6:SIDE - 6] = 1.0
            else:
                t[6:SIDE - 6, c - 1:c + 1] = 1.0
        templates.append(t)

    def draw(label):
        dy, dx = torch.randint(-3, 4, (2,), generator=g).tolist()
        img = torch.roll(templates[label], (dy, dx), (0, 1)) * (0.6 + 0.4 * torch.rand(SIDE, SIDE, generator=g))
        return global_contrast_normalization(img[None].clone(), scale='l1')

    train = [draw(NORMAL_CLASS) for _ in range(N_TRAIN)]
    outliers = [c for c in range(10) if c != NORMAL_CLASS]
    test = [(draw(NORMAL_CLASS), 0) for _ in range(N_TEST_EACH)]
    test += [(draw(outliers[i % 9]), 1) for i in range(N_TEST_EACH)]
    lo, hi = min(float(x.min()) for x in train), max(float(x.max()) for x in train)  # min_max[normal_class]
    scale = lambda x: (x - lo) / (hi - lo)  # transforms.Normalize([min], [max - min])
    train_set = [(scale(x), 0, i) for i, x in enumerate(train)]
    test_set = [(scale(x), y, i) for i, (x, y) in enumerate(test)]
    return train_set, test_set


def _pretrain(ae_net, train_loader, lr, n_epochs, lr_milestones, weight_decay):
    # AETrainer.train
    optimizer = optim.Adam(ae_net.parameters(), lr=lr, weight_decay=weight_decay, amsgrad=False)
    scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=lr_milestones, gamma=0.1)
    ae_net.train()
    for epoch in range(n_epochs):
        scheduler.step()
        for data in train_loader:
            inputs, _, _ = data
            # Zero the network parameter gradients
            optimizer.zero_grad()
            # Update network parameters via backpropagation: forward + backward + optimize
            outputs = ae_net(inputs)
            scores = torch.sum((outputs - inputs) ** 2, dim=tuple(range(1, outputs.dim())))
            loss = torch.mean(scores)
            loss.backward()
            optimizer.step()
    return ae_net


def init_center_c(train_loader, net, eps=0.1):
    """Initialize hypersphere center c as the mean from an initial forward pass on the data."""
    n_samples = 0
    c = torch.zeros(net.rep_dim)
    net.eval()
    with torch.no_grad():
        for data in train_loader:
            # get the inputs of the batch
            inputs, _, _ = data
            outputs = net(inputs)
            n_samples += outputs.shape[0]
            c += torch.sum(outputs, dim=0)
    c /= n_samples
    # If c_i is too close to 0, set to +-eps. Reason: a zero unit can be trivially matched with zero weights.
    c[(abs(c) < eps) & (c < 0)] = -eps
    c[(abs(c) < eps) & (c > 0)] = eps
    return c


def _auc(labels, scores):
    """(port) roc_auc_score for binary labels: the Mann-Whitney rank statistic."""
    ranks = np.argsort(np.argsort(scores)) + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _pretrained_net(train_loader, bias):
    # DeepSVDD.set_network, pretrain, init_network_weights_from_pretraining
    net = MNIST_LeNet(bias=bias)
    ae_net = _pretrain(MNIST_LeNet_Autoencoder(bias=bias), train_loader, lr=1e-4, n_epochs=2, lr_milestones=(50,),
                       weight_decay=0.5e-3)
    net_dict = net.state_dict()
    ae_net_dict = ae_net.state_dict()
    # Filter out decoder network keys
    ae_net_dict = {k: v for k, v in ae_net_dict.items() if k in net_dict}
    # Overwrite values in the existing state_dict
    net_dict.update(ae_net_dict)
    # Load the new state_dict
    net.load_state_dict(net_dict)
    return net


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    bias = bug == "bias_terms_enabled"
    train_set, test_set = _synthetic_mnist(seed)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=False)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=BATCH, shuffle=False, drop_last=False)

    net = _pretrained_net(train_loader, bias)

    # DeepSVDDTrainer.train, up to the epoch loop
    optimizer = optim.Adam(net.parameters(), lr=1e-4, weight_decay=0.5e-6, amsgrad=False)
    scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=(50,), gamma=0.1)
    c = torch.zeros(net.rep_dim) if bug == "center_at_zero" else init_center_c(train_loader, net)
    net.train()
    st = {"it": None}

    def train_step():
        data = next(st["it"], None) if st["it"] is not None else None
        if data is None:  # a new epoch
            scheduler.step()
            st["it"] = iter(train_loader)
            data = next(st["it"])
        inputs, _, _ = data
        # Zero the network parameter gradients
        optimizer.zero_grad()
        # Update network parameters via backpropagation: forward + backward + optimize
        outputs = net(inputs)
        dist = torch.sum((outputs - c) ** 2, dim=1)
        loss = torch.mean(dist)
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # DeepSVDDTrainer.test: distances as anomaly scores, AUC against the outlier labels
        idx_label_score = []
        if bug != "test_in_train_mode":
            model.eval()
        with torch.no_grad():
            for inputs, labels, idx in test_loader:
                scores = torch.sum((model(inputs) - c) ** 2, dim=1)
                idx_label_score += list(zip(idx.tolist(), labels.tolist(), scores.tolist()))
        model.train()
        _, labels, scores = zip(*idx_label_score)
        return _auc(np.array(labels), np.array(scores))

    inputs0, _, _ = next(iter(train_loader))
    loss_fn = lambda outputs, target: torch.mean(torch.sum((outputs - target) ** 2, dim=1)) 
    return Program(name="deepsvdd_mnist", model=net, batch=(inputs0, c.expand(len(inputs0), -1)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # bias terms (and affine batch norms) switched on: the network can map every input to c, the trivial solution
    # of the paper's Proposition 2 (reported for pyod's DeepSVDD in https://github.com/yzhao062/pyod/issues/385).
    Bug("bias_terms_enabled", functools.partial(_build, bug="bias_terms_enabled"), "learning_ledger",
        ("OBJECTIVE",)),
    # the center left at zero instead of the mean initial representation: all-zero weights solve the objective
    # (the collapse of https://github.com/yzhao062/pyod/pull/711, Proposition 1).
    Bug("center_at_zero", functools.partial(_build, bug="center_at_zero"), "learning_ledger", ("OBJECTIVE",)),
    # classic: test() without net.eval(); the batch norms score the test batches with their own statistics.
    Bug("test_in_train_mode", functools.partial(_build, bug="test_in_train_mode"), "six_claims", ("EVALUATION",)),
]
