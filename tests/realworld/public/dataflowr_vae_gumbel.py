"""A VAE with a continuous and a categorical latent (Gumbel-softmax) for clustering MNIST, from the dataflowr course's
homework 3: an MLP encoder (784 -> 400, ReLU) giving ``mu``, ``log_var`` (20 each) and the log-probabilities of 10
classes, a reparameterized Gaussian code and a hard Gumbel-softmax one-hot (tau 0.5) concatenated into an MLP decoder
with a sigmoid output; loss = summed binary cross-entropy + beta * (Gaussian KL - entropy of the class posterior),
beta 1, Adam lr 1e-3, batch 128.

Source: https://github.com/dataflowr/notebooks
Commit: 043dff0f792a5ae67005ba147f7b9dd5fc66e2a1
Files: HW3/VAE_clustering_sol.ipynb (cells 1-3 data, 5 hyper-parameters, 30 ``VAE_Gumbel``, 31 model and optimizer,
33 ``train_G``, 34 ``train_G(model_G, num_epochs=10)``)
License: Apache-2.0 (Copyright 2019 Marc Lelarge; full text in LICENSES/dataflowr-notebooks.txt)
Domain: generative, variational autoencoder (mixed continuous/categorical latent, unsupervised clustering)

Kept as written: ``VAE_Gumbel`` (sizes unchanged: 784/400/20/10), ``train_G``'s loop body (forward, ``torch.max`` of
``log_p`` for the estimated labels, ``binary_cross_entropy(..., reduction='sum')``, the KL and ``H_cat`` terms,
``loss = reconst_loss + beta*(kl_div-H_cat)``, ``zero_grad``/``backward``/``step``), Adam at lr 1e-3, batch 128.

Deviations from the original:
- data: torchvision's MNIST (``ToTensor``, pixels in [0, 1]) is replaced by 1280 synthetic 28x28 "digits" made from
  ``seed`` (a fixed pair of thick strokes per class, shifted by up to two pixels, with pixel noise), in [0, 1]; the
  DataLoader shuffles with a seeded generator;
- the device is the CPU; the prints, the per-epoch label lists kept for the NMI score (``all_labels``,
  ``all_labels_est``: collected but unused by ``train_G``) and the plots are left out; ``labels_est`` is still
  computed;
- one ``train_step`` is one iteration of ``train_G``'s inner loop (``model.train(True)`` once at build, as in
  ``train_G``); the Program's batch is one fixed batch ``(x, x)`` of flattened images (the model's input and the
  reconstruction target) and ``loss_fn`` the same loss on the model's output tuple;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn  # noqa: PLR0402  (as written)
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 1280

# ---- HW3/VAE_clustering_sol.ipynb, cell 5 (hyper-parameters) -----------------------------------------------------

image_size = 784
h_dim = 400
z_dim = 20
num_epochs = 15
learning_rate = 1e-3
n_classes = 10

# ---- cell 30 -----------------------------------------------------------------------------------------------------


class VAE_Gumbel(nn.Module):
    def __init__(self, image_size=784, h_dim=400, z_dim=20, n_classes = 10):
        super(VAE_Gumbel, self).__init__()  # noqa: UP008
        self.fc1 = nn.Linear(image_size, h_dim)
        self.fc2 = nn.Linear(h_dim, z_dim)
        self.fc3 = nn.Linear(h_dim, z_dim)
        self.fc4 = nn.Linear(h_dim, n_classes)
        self.fc5 = nn.Linear(z_dim+n_classes, h_dim)
        self.fc6 = nn.Linear(h_dim, image_size)

    def encode(self, x):
        h = F.relu(self.fc1(x))
        return self.fc2(h), self.fc3(h), F.log_softmax(self.fc4(h),dim=1)

    def reparameterize(self, mu, log_var):
        std = torch.exp(log_var/2)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z, y_onehot):
        x = torch.cat([z, y_onehot], 1)
        h = F.relu(self.fc5(x))
        return torch.sigmoid(self.fc6(h))

    def forward(self, x):
        mu, log_var, log_p = self.encode(x)
        z = self.reparameterize(mu, log_var)
        y_onehot = F.gumbel_softmax(log_p,tau=0.5,hard=True)
        x_reconst = self.decode(z,y_onehot)
        return x_reconst, mu, log_var, log_p


# ---- the data (port) ---------------------------------------------------------------------------------------------


def synthetic_digits(n, seed, s=28):
    """Stands in for MNIST: 28x28 images in [0, 1]; class c is a fixed pair of thick strokes, shifted by up to two
    pixels, with pixel noise."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, s, s)
    for c in range(10):
        for _ in range(2):
            k = int(torch.randint(6, s - 6, (), generator=gen))
            lo = int(torch.randint(3, s // 2, (), generator=gen))
            hi = lo + int(torch.randint(7, s // 2, (), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                templates[c, k - 2:k + 2, lo:hi] = 1.0
            else:
                templates[c, lo:hi, k - 2:k + 2] = 1.0
    labels = torch.arange(n) % 10
    shifts = torch.randint(-2, 3, (n, 2), generator=gen)
    imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                        for c, sh in zip(labels, shifts)])
    imgs = (0.9 * imgs + 0.1 * torch.rand(n, s, s, generator=gen)).clamp(0, 1)
    return TensorDataset(imgs.unsqueeze(1), labels)


# ---- cells 3, 31, 33 ---------------------------------------------------------------------------------------------


def _loss(x_reconst, mu, log_var, log_p, x, beta, bug=None):
    if bug == "reconst_loss_mean":
        # the reconstruction term averaged over the 128 x 784 pixels while the KL and entropy stay summed
        reconst_loss = F.binary_cross_entropy(x_reconst, x, reduction='mean')
    else:
        reconst_loss = F.binary_cross_entropy(x_reconst, x, reduction='sum')
    kl_div =  - 0.5 * torch.sum(1 + log_var - mu.pow(2) - log_var.exp())
    H_cat =  -torch.sum(torch.exp(log_p)*log_p)
    return reconst_loss + beta*(kl_div-H_cat)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    dataset = synthetic_digits(N_IMAGES, seed)
    data_loader = DataLoader(dataset=dataset,
                             batch_size=128,
                             shuffle=True,
                             generator=torch.Generator().manual_seed(seed))

    model_G = VAE_Gumbel().to(device)
    optimizer = torch.optim.Adam(model_G.parameters(), lr=learning_rate)

    model = model_G
    beta = 1.
    model.train(True)
    state = {"it": iter(data_loader)}

    def train_step():  # one iteration of train_G's `for i, (x, labels) in enumerate(data_loader)`
        try:
            x, labels = next(state["it"])
        except StopIteration:
            state["it"] = iter(data_loader)
            x, labels = next(state["it"])  # noqa: RUF059  (as written)
        # Forward pass
        x = x.to(device).view(-1, image_size)
        x_reconst, mu, log_var, log_p = model(x)
        _,labels_est = torch.max(log_p,1)  # noqa: RUF059  (as written)

        reconst_loss = F.binary_cross_entropy(x_reconst, x, reduction='sum')
        if bug == "reconst_loss_mean":
            reconst_loss = F.binary_cross_entropy(x_reconst, x, reduction='mean')
        kl_div =  - 0.5 * torch.sum(1 + log_var - mu.pow(2) - log_var.exp())
        H_cat =  -torch.sum(torch.exp(log_p)*log_p)

        # Backprop and optimize
        loss = reconst_loss + beta*(kl_div-H_cat)
        if bug == "zero_grad_after_backward":
            # zero_grad moved below backward: the step applies cleared gradients
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    x0 = dataset.tensors[0][:128].view(-1, image_size)
    return Program(name="dataflowr_vae_gumbel", model=model, batch=(x0, x0),
                   loss_fn=lambda out, x: _loss(*out, x, beta, bug), optimizer=optimizer, train_step=train_step,
                   loader=data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the reconstruction term averaged (`reduction='mean'`) while the KL and the entropy stay summed over the
    # batch: the prior terms outweigh the data term by ~10^5 and the code collapses to the prior.
    Bug("reconst_loss_mean", functools.partial(_build, bug="reconst_loss_mean"), "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() placed after loss.backward(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
