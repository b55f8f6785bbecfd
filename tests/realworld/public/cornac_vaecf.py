# ruff: noqa: PLR0402, UP008, UP032, B008, UP028
"""Variational autoencoders for collaborative filtering (Liang et al., Mult-VAE) as Cornac's ``VAECF``: each user's
binarized row of the user-item matrix encoded by a tanh MLP into a 10-dimensional Gaussian latent, decoded by the
mirrored MLP into a softmax over all items; the loss is the mean over users of ``beta * KL - sum_i x_i log p_i``
(the multinomial likelihood), Adam lr 1e-3, batches of 100 users in a fixed order.

Source: https://github.com/PreferredAI/cornac
Commit: 4db147def0c79c6b2ba5210457808d6041f0d0b3
Files: ``cornac/models/vaecf/vaecf.py`` (``VAE``, ``learn``), ``cornac/models/vaecf/recom_vaecf.py`` (``VAECF.fit``,
``score``), ``cornac/data/dataset.py`` (``Dataset.matrix``, ``user_iter``, ``idx_iter``), ``cornac/utils/common.py``
(``estimate_batches``), ``examples/vaecf_citeulike.py`` (the configuration)
License: Apache-2.0 (Copyright 2018 The Cornac Authors; full text in LICENSES/PreferredAI-cornac.txt)
Domain: recommendation, collaborative filtering (Mult-VAE on implicit feedback)

Kept as written: ``VAE`` (encoder ``fc{i}`` + activation per layer of ``[num_items] + autoencoder_structure``,
``enc_mu`` / ``enc_logvar`` heads, the mirrored decoder without a last activation, ``softmax(h, dim=1)`` for the
``mult`` likelihood, the reparameterization, ``loss`` with its likelihood choices, ``EPS`` 1e-10 and the KL written
through ``std``), ``learn``'s loop body (the batch's rows of ``train_set.matrix``, binarized, made dense; forward,
loss, zero_grad, backward, step), ``VAECF.fit`` (``torch.manual_seed(self.seed)``, ``VAE(self.k, [data_dim] +
self.autoencoder_structure, act_fn, likelihood)``), ``score`` (decode of the encoder's mean), ``user_iter`` /
``idx_iter`` / ``estimate_batches``, and the example's settings (``k=10``, ``autoencoder_structure=[20]``,
``act_fn="tanh"``, ``likelihood="mult"``, ``batch_size=100``, ``learning_rate=0.001``, ``beta=1.0``, ``seed=123``;
``RatioSplit(test_size=0.2, exclude_unknowns=True, rating_threshold=0.5)``).

Deviations from the original:
- the CiteULike download (5551 users, 16980 items) is replaced by synthetic implicit feedback made from ``seed``:
  500 users in 8 taste groups, 300 items; each group's item distribution mixes a global popularity with a
  group-specific set of favourite items, and each user has 15 to 40 distinct interactions (value 1) drawn from it.
  ``RatioSplit`` is written as a seeded 80/20 shuffle of the (user, item, rating) triples with test triples of
  unknown users or items dropped; ``Dataset`` keeps only what ``learn`` and ``score`` use (``uir_tuple``,
  ``num_users``, ``num_items``, ``matrix`` as a scipy CSR matrix, ``user_iter``, ``idx_iter``, ``rng``).
- the example's ``seed=123`` becomes ``seed``; ``use_gpu=True`` falls back to the CPU as it does without CUDA.
- ``n_epochs`` 100 is not run: ``train_step`` is one batch of ``learn``'s loop (the next epoch starts when the
  users run out) and returns the batch's loss; ``trange`` and its postfix are dropped. ``eval_fn`` is the example's
  Recall@20 on the test triples (scores from ``VAECF.score``, train items of the user excluded as Cornac's ranking
  evaluation does), averaged over test users.
- the Program's model is the ``VAE``, its batch the first batch of users (their binarized rows), its ``loss_fn``
  ``vae.loss`` with ``beta``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from scipy.sparse import csr_matrix

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_USERS, N_ITEMS, N_GROUPS = 500, 300, 8  # (port) CiteULike: 5551 users, 16980 items

# ---- cornac/utils/common.py ---------------------------------------------------------------------------------------


def estimate_batches(input_size, batch_size):
    """
    Estimate number of batches give `input_size` and `batch_size`
    """
    return int(np.ceil(input_size / batch_size))


# ---- cornac/data/dataset.py (what learn and score use) ------------------------------------------------------------

class Dataset:
    def __init__(self, uir_tuple, num_users, num_items, seed=None):
        self.uir_tuple = uir_tuple
        self.num_users = num_users
        self.num_items = num_items
        self.rng = np.random.RandomState(seed)
        self.__csr_matrix = None

    @property
    def matrix(self):
        """The user-item interaction matrix in CSR sparse format"""
        return self.csr_matrix

    @property
    def csr_matrix(self):
        """The user-item interaction matrix in CSR sparse format"""
        if self.__csr_matrix is None:
            (u_indices, i_indices, r_values) = self.uir_tuple
            self.__csr_matrix = csr_matrix(
                (r_values, (u_indices, i_indices)),
                shape=(self.num_users, self.num_items),
            )
        return self.__csr_matrix

    def idx_iter(self, idx_range, batch_size=1, shuffle=False):
        indices = np.arange(idx_range)
        if shuffle:
            self.rng.shuffle(indices)

        n_batches = estimate_batches(len(indices), batch_size)
        for b in range(n_batches):
            start_offset = batch_size * b
            end_offset = batch_size * b + batch_size
            end_offset = min(end_offset, len(indices))
            batch_ids = indices[start_offset:end_offset]
            yield batch_ids

    def user_iter(self, batch_size=1, shuffle=False):
        user_indices = np.fromiter(set(self.uir_tuple[0]), dtype="int")
        for batch_ids in self.idx_iter(len(user_indices), batch_size, shuffle):
            yield user_indices[batch_ids]


# ---- cornac/models/vaecf/vaecf.py ---------------------------------------------------------------------------------

torch.set_default_dtype(torch.float32)

EPS = 1e-10

ACT = {
    "sigmoid": nn.Sigmoid(),
    "tanh": nn.Tanh(),
    "elu": nn.ELU(),
    "relu": nn.ReLU(),
    "relu6": nn.ReLU6(),
}


class VAE(nn.Module):
    def __init__(self, z_dim, ae_structure, act_fn, likelihood, bug=None):
        super(VAE, self).__init__()

        self.likelihood = likelihood
        self.act_fn = ACT.get(act_fn, None)
        if self.act_fn is None:
            raise ValueError("Supported act_fn: {}".format(ACT.keys()))
        self.bug = bug

        # Encoder
        self.encoder = nn.Sequential()
        for i in range(len(ae_structure) - 1):
            self.encoder.add_module(
                "fc{}".format(i), nn.Linear(ae_structure[i], ae_structure[i + 1])
            )
            self.encoder.add_module("act{}".format(i), self.act_fn)
        self.enc_mu = nn.Linear(ae_structure[-1], z_dim)  # mu
        self.enc_logvar = nn.Linear(ae_structure[-1], z_dim)  # logvar

        # Decoder
        ae_structure = [z_dim] + ae_structure[::-1]
        self.decoder = nn.Sequential()
        for i in range(len(ae_structure) - 1):
            self.decoder.add_module(
                "fc{}".format(i), nn.Linear(ae_structure[i], ae_structure[i + 1])
            )
            if i != len(ae_structure) - 2:
                self.decoder.add_module("act{}".format(i), self.act_fn)

    def encode(self, x):
        h = self.encoder(x)
        return self.enc_mu(h), self.enc_logvar(h)

    def decode(self, z):
        h = self.decoder(z)
        if self.likelihood == "mult":
            if self.bug == "softmax_over_users":
                return torch.softmax(h, dim=0)
            return torch.softmax(h, dim=1)
        else:
            return torch.sigmoid(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(mu)
        return mu + eps * std

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar

    def loss(self, x, x_, mu, logvar, beta):
        # Likelihood
        ll_choices = {
            "mult": x * torch.log(x_ + EPS),
            "bern": x * torch.log(x_ + EPS) + (1 - x) * torch.log(1 - x_ + EPS),
            "gaus": -((x - x_) ** 2),
            "pois": x * torch.log(x_ + EPS) - x_,
        }

        ll = ll_choices.get(self.likelihood, None)
        if ll is None:
            raise ValueError("Supported likelihoods: {}".format(ll_choices.keys()))

        ll = torch.sum(ll, dim=1)

        # KL term
        std = torch.exp(0.5 * logvar)
        kld = -0.5 * (1 + 2.0 * torch.log(std) - mu.pow(2) - std.pow(2))
        kld = torch.sum(kld, dim=1)

        return torch.mean(beta * kld - ll)


def learn_batches(vae, train_set, batch_size, learn_rate, beta, device=torch.device("cpu"), bug=None):
    """(port) ``learn`` with its epoch loop turned inside out: returns the optimizer and a ``train_step`` that runs one
    batch of the loop body (the next epoch starts when the users run out)."""
    optimizer = torch.optim.Adam(params=vae.parameters(), lr=learn_rate)
    st = {"it": None}

    def batches():
        for batch_id, u_ids in enumerate(
            train_set.user_iter(batch_size, shuffle=False)
        ):
            yield batch_id, u_ids

    def train_step():
        try:
            if st["it"] is None:
                raise StopIteration
            _batch_id, u_ids = next(st["it"])
        except StopIteration:
            st["it"] = batches()
            _batch_id, u_ids = next(st["it"])
        u_batch = train_set.matrix[u_ids, :]
        u_batch.data = np.ones(len(u_batch.data))  # Binarize data
        u_batch = u_batch.toarray()
        u_batch = torch.tensor(u_batch, dtype=torch.float32, device=device)

        # Reconstructed batch
        u_batch_, mu, logvar = vae(u_batch)

        if bug == "loss_arguments_swapped":
            loss = vae.loss(u_batch_, u_batch, mu, logvar, beta)
        else:
            loss = vae.loss(u_batch, u_batch_, mu, logvar, beta)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        return loss.data.item()

    return optimizer, train_step


# ---- (port) data: synthetic implicit feedback and RatioSplit ------------------------------------------------------

def synthetic_feedback(rng):
    popularity = rng.dirichlet(np.full(N_ITEMS, 0.3))
    groups = rng.integers(0, N_GROUPS, size=N_USERS)
    favourites = [rng.choice(N_ITEMS, size=25, replace=False) for _ in range(N_GROUPS)]
    triples = []
    for u in range(N_USERS):
        p = 0.3 * popularity.copy()
        p[favourites[groups[u]]] += 0.7 / 25
        p /= p.sum()
        n = int(rng.integers(15, 41))
        for i in rng.choice(N_ITEMS, size=n, replace=False, p=p):
            triples.append((u, int(i), 1.0))
    return triples


def ratio_split(triples, rng, test_size=0.2, rating_threshold=0.5):
    order = rng.permutation(len(triples))
    n_test = int(test_size * len(triples))
    test = [triples[k] for k in order[:n_test]]
    train = [triples[k] for k in order[n_test:]]
    train_users = {u for u, _, _ in train}
    train_items = {i for _, i, _ in train}
    # exclude_unknowns=True; rating_threshold: positives for the ranking metrics
    test = [(u, i, r) for u, i, r in test if u in train_users and i in train_items and r >= rating_threshold]
    u, i, r = (np.array(x) for x in zip(*train))
    return Dataset((u, i, r.astype(np.float64)), N_USERS, N_ITEMS), test


# ---- recom_vaecf.py + examples/vaecf_citeulike.py -----------------------------------------------------------------

def _build(seed, bug=None):
    rng = np.random.default_rng(seed)
    train_set, test_triples = ratio_split(synthetic_feedback(rng), rng)

    k, autoencoder_structure, act_fn, likelihood = 10, [20], "tanh", "mult"
    batch_size, learning_rate, beta = 100, 0.001, 1.0
    device = torch.device("cpu")  # (port) use_gpu=True without CUDA

    torch.manual_seed(seed)  # (port) seed=123
    r_mat = train_set.matrix
    data_dim = r_mat.shape[1]
    vae = VAE(k, [data_dim] + autoencoder_structure, act_fn, likelihood, bug=bug).to(device)
    optimizer, train_step = learn_batches(vae, train_set, batch_size=batch_size, learn_rate=learning_rate,
                                          beta=beta, device=device, bug=bug)

    def score(model, user_idx):
        x_u = r_mat[user_idx].copy()
        x_u.data = np.ones(len(x_u.data))
        z_u, _ = model.encode(torch.tensor(x_u.toarray(), dtype=torch.float32, device=device))
        return model.decode(z_u).data.cpu().numpy().flatten()

    test_by_user = {}
    for u, i, _ in test_triples:
        test_by_user.setdefault(u, set()).add(i)

    def eval_fn(model, _batch=None):
        recalls = []
        with torch.no_grad():
            for u, items in test_by_user.items():
                s = score(model, u)
                s[r_mat[u].indices] = -np.inf  # train items are not ranked
                top = np.argsort(-s)[:20]
                recalls.append(len(items & set(top.tolist())) / len(items))
        return float(np.mean(recalls))

    u_ids = next(train_set.user_iter(batch_size, shuffle=False))
    u_batch = train_set.matrix[u_ids, :]
    u_batch.data = np.ones(len(u_batch.data))
    x = torch.tensor(u_batch.toarray(), dtype=torch.float32)

    def loss_fn(outputs, target):
        u_batch_, mu, logvar = outputs
        if bug == "loss_arguments_swapped":
            return vae.loss(u_batch_, target, mu, logvar, beta)
        return vae.loss(target, u_batch_, mu, logvar, beta)

    return Program(name="cornac_vaecf", model=vae, batch=(x, x), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``torch.softmax(h, dim=0)`` in ``decode`` (classic wrong axis): each item's probabilities are normalized over
    # the users of the batch instead of each user's over the items.
    Bug("softmax_over_users", functools.partial(_build, bug="softmax_over_users"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``vae.loss(u_batch_, u_batch, ...)`` (classic argument swap): the likelihood takes the logarithm of the data
    # and weights it by the reconstruction, so it no longer scores the observed items.
    Bug("loss_arguments_swapped", functools.partial(_build, bug="loss_arguments_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``optimizer.zero_grad()`` left out (classic): every step applies the sum of all past gradients. Every parameter
    # is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
