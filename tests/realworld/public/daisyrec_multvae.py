# ruff: noqa: PLR0402, UP008, RUF007, F841
"""Mult-VAE collaborative filtering (VAECF), from daisyRec.

Source: https://github.com/AmazingDD/daisyRec, commit 7b46481e89a5a637e3ece9f0ac8b64f5042f53ab,
files ``daisy/model/VAECFRecommender.py``, ``daisy/model/AbstractRecommender.py`` (AbstractRecommender,
GeneralRecommender.fit, AERecommender.get_user_rating_matrix), ``daisy/utils/utils.py`` (get_history_matrix),
``daisy/utils/dataset.py`` (AEDataset, get_dataloader), ``daisy/assets/multi-vae.yaml``, ``basic.yaml``,
``run_examples/test.py`` (the multi-vae branch). License: MIT (full text in LICENSES/AmazingDD-daisyRec.txt).
Domain: recommendation (variational autoencoder over each user's interaction row, multinomial likelihood, KL
annealing).

Kept as written: ``VAECF`` (encoder item_num->600->latent_dim with Tanh, decoder latent_dim/2->600->item_num,
``F.normalize`` + ``F.dropout`` on the input row, mu / logvar halves, ``reparameterize``, ``calc_loss`` with the
annealed KL ``min(anneal_cap, update / total_anneal_steps)`` and the multinomial ``-(log_softmax(z) * rating).sum(1)
.mean()``), the xavier_normal init of ``_init_weight``, ``_build_optimizer`` (Adam), ``get_user_rating_matrix``
(``index_put_`` of the padded history), ``get_history_matrix``, and ``fit``'s batch body (``self.zero_grad()``,
``calc_loss``, the NaN check, ``backward``, ``optimizer.step()``); multi-vae.yaml's values (dropout 0.5, lr 0.001,
latent_dim 128, total_anneal_steps 100000, anneal_cap 0.2) and basic.yaml's batch_size 256.

Deviations from the original:
- the ml-100k download and pandas preprocessing are replaced by synthetic implicit feedback made from ``seed``:
  240 users in 6 taste groups, 240 items, each user with 12 items drawn mostly from the group's 40 items (a
  learnable rule); 2 interactions per user are held out for ``eval_fn``. ``get_history_matrix`` reads the
  (user, item) arrays instead of a DataFrame, with the same loops.
- sizes for 2 CPU cores: 240 items and 240 users (ml-100k: 1682 / 943).
- ``fit``'s epoch loop is unrolled: ``train_step`` is one batch of it (a new shuffled epoch when the loader is
  exhausted), the tqdm bar, logger and early-stop bookkeeping are dropped; ``num_workers`` 4 -> 0; device CPU.
- ``eval_fn`` is the ranking the original runs after training, written small: ``full_rank``'s scores in eval mode,
  seen items masked, hit rate of the held-out items in the top 10.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_USERS, N_ITEMS, N_GROUPS, GROUP_ITEMS, PER_USER, HELD_OUT = 240, 240, 6, 40, 12, 2

CONFIG = {
    "mlp_hidden_size": None, "epochs": 10, "dropout": 0.5, "lr": 0.001, "latent_dim": 128,
    "total_anneal_steps": 100000, "anneal_cap": 0.2, "batch_size": 256, "init_method": "default",
    "optimizer": "default", "early_stop": True, "topk": 50, "gpu": "0", "logger": None,
}


class AbstractRecommender(nn.Module):
    def __init__(self):
        super(AbstractRecommender, self).__init__()
        self.optimizer = None
        self.initializer = None
        self.loss_type = None
        self.lr = 0.01
        self.logger = None

        self.initializer_param_config = {
            'normal': {'mean':0.0, 'std':0.01},
            'uniform': {'a':0.0, 'b':1.0},
            'xavier_normal': {'gain':1.0},
            'xavier_uniform': {'gain':1.0}
        }

        self.initializer_config = {
            'normal': nn.init.normal_,
            'uniform': nn.init.uniform_,
            'xavier_normal': nn.init.xavier_normal_,
            'xavier_uniform': nn.init.xavier_uniform_
        }

    def _build_optimizer(self, **kwargs):
        params = self.parameters()
        learner = kwargs.pop('optimizer', self.optimizer)
        learning_rate = kwargs.pop('lr', self.lr)

        if learner.lower() == 'adam':
            optimizer = optim.Adam(params, lr=learning_rate)
        elif learner.lower() == 'sgd':
            optimizer = optim.SGD(params, lr=learning_rate)
        else:
            optimizer = optim.Adam(params, lr=learning_rate)

        return optimizer

    def _init_weight(self, m):
        if isinstance(m, nn.Linear):
            self.initializer_config[self.initializer](m.weight, **self.initializer_param_config[self.initializer])
            if m.bias is not None:
                nn.init.constant_(m.bias.data, 0.)
        elif isinstance(m, nn.Embedding):
            self.initializer_config[self.initializer](m.weight, **self.initializer_param_config[self.initializer])
        else:
            pass


class GeneralRecommender(AbstractRecommender):
    def __init__(self, config):
        super(GeneralRecommender, self).__init__()
        self.device = 'cpu'
        self.logger = config['logger']


class AERecommender(GeneralRecommender):
    def __init__(self, config):
        super(AERecommender, self).__init__(config)
        self.user_num = None
        self.item_num = None
        self.history_user_id, self.history_item_id = None, None
        self.history_user_value, self.history_item_value = None, None

    def get_user_rating_matrix(self, user):
        '''
        just convert the raw rating matrix to a much smaller matrix for calculation,
        the row index will be the new id for uid, but col index will still remain the old iid
        '''
        col_indices = self.history_item_id[user].flatten() # batch * max_inter_by_user -> (batch * max_inter_by_user)
        row_indices = torch.arange(user.shape[0]).to(self.device).repeat_interleave(
            self.history_item_id.shape[1], dim=0) # batch -> (batch * max_inter_by_user)
        rating_matrix = torch.zeros(1).to(self.device).repeat(user.shape[0], self.item_num) # batch * item_num
        rating_matrix.index_put_((row_indices, col_indices), self.history_item_value[user].flatten())

        return rating_matrix


class VAECF(AERecommender):
    def __init__(self, config, bug=None):
        super(VAECF, self).__init__(config)
        self.epochs = config['epochs']
        self.lr = config['lr']
        self.dropout = config['dropout']
        self.bug = bug

        self.layers = config["mlp_hidden_size"] if config['mlp_hidden_size'] is not None else [600]
        self.lat_dim = config['latent_dim']
        self.anneal_cap = config['anneal_cap']
        self.total_anneal_steps = config["total_anneal_steps"]

        self.user_num = config['user_num']
        self.item_num = config['item_num']

        self.history_item_id = config['history_item_id'].to(self.device)
        self.history_item_value = config['history_item_value'].to(self.device)
        self.update = 0

        self.encode_layer_dims = [self.item_num] + self.layers + [self.lat_dim]
        self.decode_layer_dims = [int(self.lat_dim / 2)] + self.encode_layer_dims[::-1][1:]

        self.encoder = self.mlp_layers(self.encode_layer_dims)
        self.decoder = self.mlp_layers(self.decode_layer_dims)

        self.optimizer = config['optimizer'] if config['optimizer'] != 'default' else 'adam'
        self.initializer = config['init_method'] if config['init_method'] != 'default' else 'xavier_normal'
        self.early_stop = config['early_stop']

        self.apply(self._init_weight)
        self.topk = config['topk']

    def mlp_layers(self, layer_dims):
        mlp_modules = []
        for i, (in_dim, out_dim) in enumerate(zip(layer_dims[:-1], layer_dims[1:])):
            mlp_modules.append(nn.Linear(in_dim, out_dim))
            if i != len(layer_dims[:-1]) - 1:
                mlp_modules.append(nn.Tanh())
        return nn.Sequential(*mlp_modules)

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return eps.mul(std).add_(mu)  # core calculation for predicting the real distribution
        else:
            return mu

    def forward(self, rating_matrix):
        h = F.normalize(rating_matrix)
        if self.bug == "dropout_always_on":
            h = F.dropout(h, self.dropout)
        else:
            h = F.dropout(h, self.dropout, training=self.training)
        h = self.encoder(h)

        mu = h[:, :int(self.lat_dim / 2)]
        logvar = h[:, math.ceil(self.lat_dim / 2):]

        z = self.reparameterize(mu, logvar)
        z = self.decoder(z)

        return z, mu, logvar

    def calc_loss(self, batch):
        user = batch.to(self.device).long()
        rating_matrix = self.get_user_rating_matrix(user)

        self.update += 1
        if self.total_anneal_steps > 0:
            anneal = min(self.anneal_cap, 1. * self.update / self.total_anneal_steps)
        else:
            anneal = self.anneal_cap

        z, mu, logvar = self.forward(rating_matrix)
        return vae_loss(z, mu, logvar, rating_matrix, anneal, self.bug)


def vae_loss(z, mu, logvar, rating_matrix, anneal, bug=None):
    """``calc_loss``'s last lines, as written there."""
    # KL loss
    kl_loss = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1)) * anneal
    # CE loss
    if bug == "log_softmax_over_users":
        ce_loss = -(F.log_softmax(z, 0) * rating_matrix).sum(1).mean()
    else:
        ce_loss = -(F.log_softmax(z, 1) * rating_matrix).sum(1).mean()

    loss = ce_loss + kl_loss

    return loss


def get_history_matrix(user_ids, item_ids, config):
    '''
    get the history interactions by user/item
    '''
    user_num, item_num = config['user_num'], config['item_num']
    values = np.ones(len(user_ids))
    row_num = user_num
    row_ids, col_ids = user_ids, item_ids

    history_len = np.zeros(row_num, dtype=np.int64)
    for row_id in row_ids:
        history_len[row_id] += 1

    col_num = np.max(history_len)

    history_matrix = np.zeros((row_num, col_num), dtype=np.int64)
    history_value = np.zeros((row_num, col_num))
    history_len[:] = 0
    for row_id, value, col_id in zip(row_ids, values, col_ids):
        history_matrix[row_id, history_len[row_id]] = col_id
        history_value[row_id, history_len[row_id]] = value
        history_len[row_id] += 1

    return torch.LongTensor(history_matrix), torch.FloatTensor(history_value), torch.LongTensor(history_len)


class AEDataset(Dataset):
    def __init__(self, users):
        super(AEDataset, self).__init__()
        self.data = np.unique(users)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


def make_interactions(seed):
    """(user, item) training pairs and each user's held-out items: users of a taste group pick mostly its items."""
    rng = np.random.default_rng(seed)
    group_items = rng.permutation(N_ITEMS)[: N_GROUPS * GROUP_ITEMS].reshape(N_GROUPS, GROUP_ITEMS)
    users, items, held = [], [], np.zeros((N_USERS, HELD_OUT), dtype=np.int64)
    for u in range(N_USERS):
        g = u % N_GROUPS
        n_in = PER_USER + HELD_OUT - 2
        picked = list(rng.choice(group_items[g], size=n_in, replace=False))
        others = [i for i in rng.permutation(N_ITEMS) if i not in picked][:2]
        picked = picked + others
        held[u] = picked[:HELD_OUT]
        for i in picked[HELD_OUT:]:
            users.append(u)
            items.append(int(i))
    return np.array(users), np.array(items), torch.from_numpy(held)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    users, items, held = make_interactions(seed)
    config = dict(CONFIG, user_num=N_USERS, item_num=N_ITEMS)
    history_item_id, history_item_value, _ = get_history_matrix(users, items, config)
    config['history_item_id'], config['history_item_value'] = history_item_id, history_item_value

    model = VAECF(config, bug=bug)
    train_dataset = AEDataset(users)
    train_loader = DataLoader(train_dataset, batch_size=config['batch_size'], shuffle=True, num_workers=0,
                              generator=torch.Generator().manual_seed(seed))

    # fit()
    model.to(model.device)
    optimizer = model._build_optimizer(optimizer=model.optimizer, lr=model.lr)
    model.criterion = None
    model.train()
    state = {"it": iter(train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # a new epoch
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        model.zero_grad()
        loss = model.calc_loss(batch)

        if torch.isnan(loss):
            raise ValueError('Loss=Nan or Infinity: current settings does not fit the recommender')

        loss.backward()
        optimizer.step()
        return loss

    all_users = torch.arange(N_USERS)
    rating_matrix = model.get_user_rating_matrix(all_users)

    def loss_fn(outputs, rating_matrix):
        z, mu, logvar = outputs
        anneal = min(model.anneal_cap, 1. * max(model.update, 1) / model.total_anneal_steps)
        return vae_loss(z, mu, logvar, rating_matrix, anneal, bug)

    def eval_fn(model, batch):
        rating_matrix, _ = batch
        model.eval()
        with torch.no_grad():
            scores, _, _ = model(rating_matrix)
        model.train()
        scores = scores.masked_fill(rating_matrix > 0, -float("inf"))
        top = torch.argsort(scores, dim=1, descending=True)[:, :10]
        hits = (top.unsqueeze(2) == held[: len(top)].unsqueeze(1)).any(dim=1).float()
        return float(hits.mean())

    return Program(name="daisyrec_multvae", model=model, batch=(rating_matrix, rating_matrix), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the multinomial log-likelihood normalized over the batch's users instead of over the items
    # (classic: ``log_softmax`` on the wrong dimension).
    Bug("log_softmax_over_users", functools.partial(_build, bug="log_softmax_over_users"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``F.dropout`` without ``training=self.training``: half the input row is still dropped when the model ranks
    # in eval mode (classic).
    Bug("dropout_always_on", functools.partial(_build, bug="dropout_always_on"), "six_claims", ("EVALUATION",)),
]
