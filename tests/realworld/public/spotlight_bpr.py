"""Implicit-feedback matrix factorization of maciejkula/spotlight: ``ImplicitFactorizationModel(loss='bpr')`` with its
``BilinearNet`` representation (scaled user/item embeddings, zero-initialized user/item bias embeddings, score = dot
product + biases), negative sampling of one random item per positive pair, the library's BPR loss
(``1 - sigmoid(positive - negative)``, as written; issue #185 asks why it is not ``-log sigmoid``), Adam(lr 1e-2,
weight_decay = l2 = 0), shuffled minibatches every epoch; ``predict`` puts the network in ``train(False)``.

Source: https://github.com/maciejkula/spotlight
Commit: 75f4c8c55090771b52b88ef1a00f75bb39f9f2a9
Files: spotlight/factorization/implicit.py, spotlight/factorization/representations.py, spotlight/layers.py,
       spotlight/losses.py, spotlight/sampling.py, spotlight/torch_utils.py
License: MIT (Copyright (c) 2017 Maciej Kula)
Domain: recommendation (implicit feedback, pairwise ranking)

Deviations from the original:
- sizes: 60 users, 120 items, 900 interactions; batch_size 256 -> 64 (embedding_dim 32, lr 1e-2, l2 0 unchanged);
- data: instead of a MovieLens/Goodbooks download, synthetic interactions made from ``seed``: users and items fall
  into 6 groups and every user interacts with 15 items of its own group; ``Interactions`` is replaced by the two id
  arrays ``fit`` reads from it;
- the model's ``random_state`` is ``np.random.RandomState(seed)``; no CUDA; only the ``bpr`` branch of the loss
  selection and the ``_get_negative_prediction`` path are kept (the adaptive-hinge path is left out);
- one ``train_step`` is one minibatch of ``ImplicitFactorizationModel.fit`` (positive prediction, negative sampling
  and prediction, ``zero_grad``, loss, backward, ``step``); a new epoch shuffles the ids as ``fit`` does; the epoch
  loss bookkeeping, the degenerate-loss check and printing are left out; ``eval_fn`` scores the batch the way
  ``predict`` does (``train(False)``, no restore) and returns the fraction of pairs ranked correctly.
- declared evidence: the batch is one forward over the positive and the sampled negative pairs together
  (``user_ids`` repeated, ``item_ids`` = positives then negatives) and ``loss_fn`` splits the scores in halves.
"""
# ruff: noqa: C401, PLR0402, UP004, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_USERS, NUM_ITEMS, GROUPS, PER_USER, BATCH_SIZE = 60, 120, 6, 15, 64


# ---- spotlight/layers.py -------------------------------------------------------------------------------------

class ScaledEmbedding(nn.Embedding):
    """
    Embedding layer that initialises its values
    to using a normal variable scaled by the inverse
    of the embedding dimension.
    """
    def reset_parameters(self):
        """
        Initialize parameters.
        """
        self.weight.data.normal_(0, 1.0 / self.embedding_dim)
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx].fill_(0)


class ZeroEmbedding(nn.Embedding):
    """
    Embedding layer that initialises its values
    to using a normal variable scaled by the inverse
    of the embedding dimension.

    Used for biases.
    """
    def reset_parameters(self):
        """
        Initialize parameters.
        """
        self.weight.data.zero_()
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx].fill_(0)


# ---- spotlight/factorization/representations.py --------------------------------------------------------------

class BilinearNet(nn.Module):
    """
    Bilinear factorization representation.

    Encodes both users and items as an embedding layer; the score
    for a user-item pair is given by the dot product of the item
    and user latent vectors.
    """
    def __init__(self, num_users, num_items, embedding_dim=32,
                 user_embedding_layer=None, item_embedding_layer=None, sparse=False):

        super(BilinearNet, self).__init__()

        self.embedding_dim = embedding_dim

        if user_embedding_layer is not None:
            self.user_embeddings = user_embedding_layer
        else:
            self.user_embeddings = ScaledEmbedding(num_users, embedding_dim,
                                                   sparse=sparse)

        if item_embedding_layer is not None:
            self.item_embeddings = item_embedding_layer
        else:
            self.item_embeddings = ScaledEmbedding(num_items, embedding_dim,
                                                   sparse=sparse)

        self.user_biases = ZeroEmbedding(num_users, 1, sparse=sparse)
        self.item_biases = ZeroEmbedding(num_items, 1, sparse=sparse)

    def forward(self, user_ids, item_ids):
        user_embedding = self.user_embeddings(user_ids)
        item_embedding = self.item_embeddings(item_ids)

        user_embedding = user_embedding.squeeze()
        item_embedding = item_embedding.squeeze()

        user_bias = self.user_biases(user_ids).squeeze()
        item_bias = self.item_biases(item_ids).squeeze()

        dot = (user_embedding * item_embedding).sum(1)

        return dot + user_bias + item_bias


# ---- spotlight/losses.py, sampling.py, torch_utils.py --------------------------------------------------------

def bpr_loss(positive_predictions, negative_predictions, mask=None):
    """
    Bayesian Personalised Ranking [1]_ pairwise loss function.
    """
    loss = (1.0 - torch.sigmoid(positive_predictions -
                                negative_predictions))

    if mask is not None:
        mask = mask.float()
        loss = loss * mask
        return loss.sum() / mask.sum()

    return loss.mean()


def sample_items(num_items, shape, random_state=None):
    """
    Randomly sample a number of items.
    """
    if random_state is None:
        random_state = np.random.RandomState()

    items = random_state.randint(0, num_items, shape, dtype=np.int64)

    return items


def minibatch(*tensors, **kwargs):
    batch_size = kwargs.get('batch_size', 128)

    if len(tensors) == 1:
        tensor = tensors[0]
        for i in range(0, len(tensor), batch_size):
            yield tensor[i:i + batch_size]
    else:
        for i in range(0, len(tensors[0]), batch_size):
            yield tuple(x[i:i + batch_size] for x in tensors)


def shuffle(*arrays, **kwargs):
    random_state = kwargs.get('random_state')

    if len(set(len(x) for x in arrays)) != 1:
        raise ValueError('All inputs to shuffle must have '
                         'the same length.')

    if random_state is None:
        random_state = np.random.RandomState()

    shuffle_indices = np.arange(len(arrays[0]))
    random_state.shuffle(shuffle_indices)

    if len(arrays) == 1:
        return arrays[0][shuffle_indices]
    else:
        return tuple(x[shuffle_indices] for x in arrays)


def set_seed(seed, cuda=False):
    torch.manual_seed(seed)


# ---- spotlight/factorization/implicit.py ---------------------------------------------------------------------

class ImplicitFactorizationModel(object):
    """
    An implicit feedback matrix factorization model, trained through negative sampling.
    """

    def __init__(self,
                 loss='pointwise',
                 embedding_dim=32,
                 n_iter=10,
                 batch_size=256,
                 l2=0.0,
                 learning_rate=1e-2,
                 optimizer_func=None,
                 use_cuda=False,
                 representation=None,
                 sparse=False,
                 random_state=None,
                 num_negative_samples=5,
                 bug=None):

        assert loss in ('pointwise',
                        'bpr',
                        'hinge',
                        'adaptive_hinge')

        self._loss = loss
        self._embedding_dim = embedding_dim
        self._n_iter = n_iter
        self._learning_rate = learning_rate
        self._batch_size = batch_size
        self._l2 = l2
        self._use_cuda = use_cuda
        self._representation = representation
        self._sparse = sparse
        self._optimizer_func = optimizer_func
        self._random_state = random_state or np.random.RandomState()
        self._num_negative_samples = num_negative_samples
        self._bug = bug

        self._num_users = None
        self._num_items = None
        self._net = None
        self._optimizer = None
        self._loss_func = None

        set_seed(self._random_state.randint(-10**8, 10**8),
                 cuda=self._use_cuda)

    def _initialize(self, num_users, num_items):

        (self._num_users,
         self._num_items) = (num_users, num_items)

        self._net = BilinearNet(self._num_users,
                                self._num_items,
                                self._embedding_dim,
                                sparse=self._sparse)

        if self._optimizer_func is None:
            self._optimizer = optim.Adam(
                self._net.parameters(),
                weight_decay=self._l2,
                lr=self._learning_rate
            )
        else:
            self._optimizer = self._optimizer_func(self._net.parameters())

        if self._loss == 'bpr':
            self._loss_func = bpr_loss
        else:
            raise NotImplementedError("only the bpr branch is ported")

    def _epoch_batches(self, user_ids, item_ids):
        """The `for epoch_num in range(self._n_iter)` loop of `fit`, yielding its minibatches one at a time."""
        while True:
            users, items = shuffle(user_ids,
                                   item_ids,
                                   random_state=self._random_state)

            user_ids_tensor = torch.from_numpy(users)
            item_ids_tensor = torch.from_numpy(items)

            for (minibatch_num,
                 (batch_user,
                  batch_item)) in enumerate(minibatch(user_ids_tensor,
                                                      item_ids_tensor,
                                                      batch_size=self._batch_size)):
                yield batch_user, batch_item

    def fit_step(self, batch_user, batch_item):
        """The body of `fit`'s inner loop."""
        positive_prediction = self._net(batch_user, batch_item)

        negative_prediction = self._get_negative_prediction(batch_user)
        if self._bug == "negatives_detached":
            negative_prediction = negative_prediction.detach()

        self._optimizer.zero_grad()

        loss = self._loss_func(positive_prediction, negative_prediction)

        loss.backward()
        if self._bug == "zero_grad_before_step":
            self._optimizer.zero_grad()
        self._optimizer.step()
        return loss.detach()

    def _get_negative_prediction(self, user_ids):

        negative_items = sample_items(
            self._num_items,
            len(user_ids),
            random_state=self._random_state)
        negative_var = torch.from_numpy(negative_items)

        negative_prediction = self._net(user_ids, negative_var)

        return negative_prediction


def make_interactions(seed):
    g = np.random.RandomState(seed)
    user_group = g.randint(0, GROUPS, NUM_USERS)
    item_group = np.arange(NUM_ITEMS) % GROUPS
    user_ids, item_ids = [], []
    for u in range(NUM_USERS):
        own = np.flatnonzero(item_group == user_group[u])
        for i in g.choice(own, PER_USER, replace=False):
            user_ids.append(u)
            item_ids.append(i)
    return np.array(user_ids, dtype=np.int64), np.array(item_ids, dtype=np.int64)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    user_ids, item_ids = make_interactions(seed)
    rec = ImplicitFactorizationModel(loss='bpr', batch_size=BATCH_SIZE, random_state=np.random.RandomState(seed),
                                     bug=bug)
    rec._initialize(NUM_USERS, NUM_ITEMS)
    batches = rec._epoch_batches(user_ids, item_ids)
    net = rec._net

    def train_step():
        return rec.fit_step(*next(batches))

    # the evidence: one forward over positive and negative pairs; the loss compares the halves
    g = np.random.RandomState(seed + 1)
    pick = g.choice(len(user_ids), BATCH_SIZE, replace=False)
    users = torch.from_numpy(user_ids[pick])
    positives = torch.from_numpy(item_ids[pick])
    negatives = torch.from_numpy(sample_items(NUM_ITEMS, BATCH_SIZE, random_state=g))
    batch = ({"user_ids": torch.cat([users, users]), "item_ids": torch.cat([positives, negatives])}, None)

    def loss_fn(scores, _targets):
        positive_prediction, negative_prediction = scores[:BATCH_SIZE], scores[BATCH_SIZE:]
        if bug == "negatives_detached":
            negative_prediction = negative_prediction.detach()
        return bpr_loss(positive_prediction, negative_prediction)

    def eval_fn(model, batch):
        inputs, _ = batch
        model.train(False)
        scores = model(**inputs)
        n = scores.shape[0] // 2
        return float((scores[:n] > scores[n:]).float().mean())

    return Program(name="spotlight_bpr", model=net, batch=batch, loss_fn=loss_fn, optimizer=rec._optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the negative scores detached before the loss: the sampled items are never pushed down, only positives pulled up.
    Bug("negatives_detached", functools.partial(_build, bug="negatives_detached"), "learning_ledger", ("DEPENDENCY",)),
    # zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe",
        ("user_embeddings.weight",)),
]
