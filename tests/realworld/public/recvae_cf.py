"""RecVAE (collaborative filtering variational autoencoder for top-N recommendation: densely connected swish +
LayerNorm encoder on L2-normalized, dropped-out user rating rows, linear decoder, multinomial log-likelihood, KL
against a composite prior that mixes a standard normal, a wide normal and the posterior of the previous epoch's
encoder, KL weight ``gamma`` times the user's number of ratings) trained by ``run.py``: alternating epochs, 3 of the
encoder's Adam (dropout 0.5), ``update_prior``, 1 of the decoder's Adam (dropout 0), lr 5e-4, NDCG@100 evaluation
after each epoch.

Source: https://github.com/ilya-shenbin/RecVAE
Commit: 05fdd528a3c973bc125ad001cdf34af526ad78d9
Files: run.py, model.py, utils.py (ndcg), README.md (``--gamma 0.005``)
License: Apache-2.0
Domain: recommendation (collaborative filtering, VAE over implicit-feedback rows)

Deviations from the original:
- sizes: hidden_dim 600 -> 64, latent_dim 200 -> 16, batch_size 500 -> 50; gamma 0.005, lr 5e-4, 3 encoder and
  1 decoder epochs as in the README's command;
- data: MovieLens-20M (``preprocessing.py`` output read by ``get_data``) is replaced by synthetic implicit feedback
  made from ``seed``: 200 items in 5 groups, each user liking one or two groups and clicking 20 items mostly from
  them; 300 training users and 50 validation users whose clicks are split 80/20 into fold-in and held-out rows, as
  ``scipy.sparse`` CSR matrices like the original's;
- CUDA dropped (``device`` is the CPU); bottleneck is not installed, so ``ndcg`` uses ``np.argpartition`` (the same
  partial sort); the ImplicitSLIM option (off by default) and the final test evaluation are left out;
- ``run`` yields after each batch's update, so that one ``train_step`` is one iteration of its batch loop; the
  script's outer epoch loop (encoder epochs, ``update_prior``, decoder epoch, evaluation, best-model copy) drives
  those generators unchanged;
- the bug variants reach ``VAE.forward`` through a module-level switch ``_BUG`` set by ``build``; ``eval_fn`` is
  ``evaluate`` with NDCG@100 on the validation users.
"""
# ruff: noqa: B006, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys
from copy import deepcopy

import numpy as np
import torch
from scipy import sparse
from torch import nn, optim
from torch.nn import functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

_BUG = [None]

# ---- model.py -----------------------------------------------------------------------------------------------------

def swish(x):
    return x.mul(torch.sigmoid(x))

def log_norm_pdf(x, mu, logvar):
    return -0.5*(logvar + np.log(2 * np.pi) + (x - mu).pow(2) / logvar.exp())

class CompositePrior(nn.Module):
    def __init__(self, hidden_dim, latent_dim, input_dim, mixture_weights=[3/20, 3/4, 1/10]):
        super(CompositePrior, self).__init__()

        self.mixture_weights = mixture_weights

        self.mu_prior = nn.Parameter(torch.Tensor(1, latent_dim), requires_grad=False)
        self.mu_prior.data.fill_(0)

        self.logvar_prior = nn.Parameter(torch.Tensor(1, latent_dim), requires_grad=False)
        self.logvar_prior.data.fill_(0)

        self.logvar_uniform_prior = nn.Parameter(torch.Tensor(1, latent_dim), requires_grad=False)
        self.logvar_uniform_prior.data.fill_(10)

        self.encoder_old = Encoder(hidden_dim, latent_dim, input_dim)
        self.encoder_old.requires_grad_(False)

    def forward(self, x, z):
        post_mu, post_logvar = self.encoder_old(x, 0)

        stnd_prior = log_norm_pdf(z, self.mu_prior, self.logvar_prior)
        post_prior = log_norm_pdf(z, post_mu, post_logvar)
        unif_prior = log_norm_pdf(z, self.mu_prior, self.logvar_uniform_prior)

        gaussians = [stnd_prior, post_prior, unif_prior]
        gaussians = [g.add(np.log(w)) for g, w in zip(gaussians, self.mixture_weights)]

        density_per_gaussian = torch.stack(gaussians, dim=-1)

        return torch.logsumexp(density_per_gaussian, dim=-1)

class Encoder(nn.Module):
    def __init__(self, hidden_dim, latent_dim, input_dim, eps=1e-1):
        super(Encoder, self).__init__()

        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.ln1 = nn.LayerNorm(hidden_dim, eps=eps)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.ln2 = nn.LayerNorm(hidden_dim, eps=eps)
        self.fc3 = nn.Linear(hidden_dim, hidden_dim)
        self.ln3 = nn.LayerNorm(hidden_dim, eps=eps)
        self.fc4 = nn.Linear(hidden_dim, hidden_dim)
        self.ln4 = nn.LayerNorm(hidden_dim, eps=eps)
        self.fc5 = nn.Linear(hidden_dim, hidden_dim)
        self.ln5 = nn.LayerNorm(hidden_dim, eps=eps)
        self.fc_mu = nn.Linear(hidden_dim, latent_dim)
        self.fc_logvar = nn.Linear(hidden_dim, latent_dim)

    def forward(self, x, dropout_rate):
        norm = x.pow(2).sum(dim=-1).sqrt()
        x = x / norm[:, None]

        x = F.dropout(x, p=dropout_rate, training=self.training)

        h1 = self.ln1(swish(self.fc1(x)))
        h2 = self.ln2(swish(self.fc2(h1) + h1))
        h3 = self.ln3(swish(self.fc3(h2) + h1 + h2))
        h4 = self.ln4(swish(self.fc4(h3) + h1 + h2 + h3))
        h5 = self.ln5(swish(self.fc5(h4) + h1 + h2 + h3 + h4))
        return self.fc_mu(h5), self.fc_logvar(h5)

class VAE(nn.Module):
    def __init__(self, hidden_dim, latent_dim, input_dim):
        super(VAE, self).__init__()

        self.encoder = Encoder(hidden_dim, latent_dim, input_dim)
        self.prior = CompositePrior(hidden_dim, latent_dim, input_dim)
        self.decoder = nn.Linear(latent_dim, input_dim)

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(0.5*logvar)
            eps = torch.randn_like(std)
            return eps.mul(std).add_(mu)
        else:
            return mu

    def forward(self, user_ratings, beta=None, gamma=1, dropout_rate=0.5, calculate_loss=True):
        mu, logvar = self.encoder(user_ratings, dropout_rate=dropout_rate)
        z = self.reparameterize(mu, logvar)
        x_pred = self.decoder(z)

        if calculate_loss:
            if gamma:
                norm = user_ratings.sum(dim=-1)
                kl_weight = gamma * norm
            elif beta:
                kl_weight = beta

            if _BUG[0] == "log_softmax_over_users":
                mll = (F.log_softmax(x_pred, dim=0) * user_ratings).sum(dim=-1).mean()
            else:
                mll = (F.log_softmax(x_pred, dim=-1) * user_ratings).sum(dim=-1).mean()
            kld = (log_norm_pdf(z, mu, logvar) - self.prior(user_ratings, z)).sum(dim=-1).mul(kl_weight).mean()
            negative_elbo = -(mll - kld)

            return (mll, kld), negative_elbo

        else:
            return x_pred

    def update_prior(self):
        self.prior.encoder_old.load_state_dict(deepcopy(self.encoder.state_dict()))


# ---- utils.py -----------------------------------------------------------------------------------------------------

def ndcg(X_pred, heldout_batch, k=100):
    '''
    normalized discounted cumulative gain@k for binary relevance
    ASSUMPTIONS: all the 0's in heldout_data indicate 0 relevance
    '''
    batch_users = X_pred.shape[0]
    idx_topk_part = np.argpartition(-X_pred, k, axis=1)  # bn.argpartition
    topk_part = X_pred[np.arange(batch_users)[:, np.newaxis],
                       idx_topk_part[:, :k]]
    idx_part = np.argsort(-topk_part, axis=1)
    # X_pred[np.arange(batch_users)[:, np.newaxis], idx_topk] is the sorted
    # topk predicted score
    idx_topk = idx_topk_part[np.arange(batch_users)[:, np.newaxis], idx_part]
    # build the discount template
    tp = 1. / np.log2(np.arange(2, k + 2))

    DCG = (heldout_batch[np.arange(batch_users)[:, np.newaxis],
                         idx_topk].toarray() * tp).sum(axis=1)
    IDCG = np.array([(tp[:min(n, k)]).sum()
                     for n in heldout_batch.getnnz(axis=1)])
    return DCG / IDCG


def make_data(seed, n_items=200, n_train=300, n_valid=50, n_groups=5, clicks=20):
    """Synthetic implicit feedback (replaces MovieLens-20M): users like one or two item groups."""
    rng = np.random.RandomState(seed)
    group = np.arange(n_items) % n_groups

    def user_items():
        liked = rng.choice(n_groups, size=rng.randint(1, 3), replace=False)
        p = np.where(np.isin(group, liked), 1.0, 0.05)
        return rng.choice(n_items, size=clicks, replace=False, p=p / p.sum())

    def csr(rows):
        r = np.concatenate([[u] * len(items) for u, items in enumerate(rows)])
        c = np.concatenate(rows)
        return sparse.csr_matrix((np.ones_like(r), (r, c)), dtype='float64', shape=(len(rows), n_items))

    train = [user_items() for _ in range(n_train)]
    valid = [user_items() for _ in range(n_valid)]
    valid_in = [items[:16] for items in valid]
    valid_out = [items[16:] for items in valid]
    data = csr(train), csr(valid_in), csr(valid_out)
    return (x.astype('float32') for x in data)


# ---- run.py -------------------------------------------------------------------------------------------------------

class Args:
    hidden_dim = 64
    latent_dim = 16
    batch_size = 50
    beta = None
    gamma = 0.005
    lr = 5e-4
    n_epochs = 1000
    n_enc_epochs = 3
    n_dec_epochs = 1
    not_alternating = False


def generate(batch_size, device, data_in, data_out=None, shuffle=False, samples_perc_per_epoch=1):
    assert 0 < samples_perc_per_epoch <= 1

    total_samples = data_in.shape[0]
    samples_per_epoch = int(total_samples * samples_perc_per_epoch)

    if shuffle:
        idxlist = np.arange(total_samples)
        np.random.shuffle(idxlist)
        idxlist = idxlist[:samples_per_epoch]
    else:
        idxlist = np.arange(samples_per_epoch)

    for st_idx in range(0, samples_per_epoch, batch_size):
        end_idx = min(st_idx + batch_size, samples_per_epoch)
        idx = idxlist[st_idx:end_idx]

        yield Batch(device, idx, data_in, data_out)


class Batch:
    def __init__(self, device, idx, data_in, data_out=None):
        self._device = device
        self._idx = idx
        self._data_in = data_in
        self._data_out = data_out

    def get_idx(self):
        return self._idx

    def get_idx_to_dev(self):
        return torch.LongTensor(self.get_idx()).to(self._device)

    def get_ratings(self, is_out=False):
        data = self._data_out if is_out else self._data_in
        return data[self._idx]

    def get_ratings_to_dev(self, is_out=False):
        return torch.Tensor(
            self.get_ratings(is_out).toarray()
        ).to(self._device)


def _build(seed, bug=None):
    _BUG[0] = bug
    args = Args()

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    device = torch.device("cpu")

    train_data, valid_in_data, valid_out_data = make_data(seed)

    def evaluate(model, data_in, data_out, metrics, samples_perc_per_epoch=1, batch_size=500):
        metrics = deepcopy(metrics)
        model.eval()

        for m in metrics:
            m['score'] = []

        for batch in generate(batch_size=batch_size,
                              device=device,
                              data_in=data_in,
                              data_out=data_out,
                              samples_perc_per_epoch=samples_perc_per_epoch
                             ):

            ratings_in = batch.get_ratings_to_dev()
            ratings_out = batch.get_ratings(is_out=True)

            ratings_pred = model(ratings_in, calculate_loss=False).cpu().detach().numpy()

            if not (data_in is data_out):
                ratings_pred[batch.get_ratings().nonzero()] = -np.inf

            for m in metrics:
                m['score'].append(m['metric'](ratings_pred, ratings_out, k=m['k']))

        for m in metrics:
            m['score'] = np.concatenate(m['score']).mean()

        return [x['score'] for x in metrics]

    def run(model, opts, train_data, batch_size, n_epochs, beta, gamma, dropout_rate):
        model.train()
        for epoch in range(n_epochs):
            for batch in generate(batch_size=batch_size, device=device, data_in=train_data, shuffle=True):
                ratings = batch.get_ratings_to_dev()

                for optimizer in opts:
                    optimizer.zero_grad()

                _, loss = model(ratings, beta=beta, gamma=gamma, dropout_rate=dropout_rate)
                loss.backward()

                for optimizer in opts:
                    optimizer.step()
                yield loss.detach()  # (deviation: one train_step per batch)

    model_kwargs = {
        'hidden_dim': args.hidden_dim,
        'latent_dim': args.latent_dim,
        'input_dim': train_data.shape[1]
    }
    metrics = [{'metric': ndcg, 'k': 100}]

    state = {'best_ndcg': -np.inf}
    train_scores, valid_scores = [], []

    model = VAE(**model_kwargs).to(device)
    model_best = VAE(**model_kwargs).to(device)

    learning_kwargs = {
        'model': model,
        'train_data': train_data,
        'batch_size': args.batch_size,
        'beta': args.beta,
        'gamma': args.gamma
    }

    decoder_params = set(model.decoder.parameters())
    encoder_params = set(model.encoder.parameters())

    optimizer_encoder = optim.Adam(encoder_params, lr=args.lr)
    if bug == "decoder_optimizer_over_encoder":
        # copy-paste slip (classic): the decoder's optimizer built over the encoder's parameters
        optimizer_decoder = optim.Adam(encoder_params, lr=args.lr)
    else:
        optimizer_decoder = optim.Adam(decoder_params, lr=args.lr)

    def epochs():
        for epoch in range(args.n_epochs):

            if args.not_alternating:
                yield from run(opts=[optimizer_encoder, optimizer_decoder], n_epochs=1, dropout_rate=0.5, **learning_kwargs)
            else:
                yield from run(opts=[optimizer_encoder], n_epochs=args.n_enc_epochs, dropout_rate=0.5, **learning_kwargs)
                model.update_prior()
                yield from run(opts=[optimizer_decoder], n_epochs=args.n_dec_epochs, dropout_rate=0, **learning_kwargs)

            train_scores.append(
                evaluate(model, train_data, train_data, metrics, 0.01)[0]
            )
            valid_scores.append(
                evaluate(model, valid_in_data, valid_out_data, metrics, 1)[0]
            )

            if valid_scores[-1] > state['best_ndcg']:
                state['best_ndcg'] = valid_scores[-1]
                model_best.load_state_dict(deepcopy(model.state_dict()))

    loop = epochs()

    def train_step():
        _BUG[0] = bug
        try:
            return next(loop)
        finally:
            _BUG[0] = None

    def eval_fn(model, batch):
        _BUG[0] = bug
        try:
            return float(evaluate(model, valid_in_data, valid_out_data, metrics, 1)[0])
        finally:
            _BUG[0] = None

    ratings0 = torch.Tensor(train_data[:args.batch_size].toarray())
    _BUG[0] = None

    def loss_fn(outputs, _targets):
        return outputs[1]

    return Program(name="recvae_cf", model=model, batch=((ratings0, args.beta, args.gamma, 0.5), ratings0),
                   loss_fn=loss_fn, optimizer=optimizer_encoder, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the multinomial log-likelihood normalized over the batch's users (dim=0) instead of over the items (classic
    # axis slip): the loss no longer scores each user's item distribution.
    Bug("log_softmax_over_users", functools.partial(_build, bug="log_softmax_over_users"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer_decoder built over the encoder's parameters (classic copy-paste slip): the decoder is never trained.
    Bug("decoder_optimizer_over_encoder", functools.partial(_build, bug="decoder_optimizer_over_encoder"),
        "four_structures", ("decoder",)),
]
