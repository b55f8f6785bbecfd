# ruff: noqa: PLR0402, SIM113, UP008
"""Deep autoencoder collaborative filtering (Kuchaiev & Ginsburg, "Training Deep AutoEncoders for Collaborative
Filtering") from NVIDIA/DeepRecommender: a user's sparse rating vector through a SELU encoder/decoder with dropout 0.8
on the code, a masked MSE over the observed ratings only, momentum SGD with a per-epoch MultiStepLR, and "dense
re-feeding" (the output fed back as a new input, one extra update per batch).

Source: https://github.com/NVIDIA/DeepRecommender
Commit: a32a8a5c23092c551616acf6fac5b32e1155d18b
Files: ``reco_encoder/model/model.py`` (``activation``, ``MSEloss``, ``AutoEncoder``), ``run.py`` (``main``'s
optimizer and epoch loop, ``do_eval``), ``reco_encoder/data/input_layer.py`` (``UserItemRecDataProvider``'s
``iterate_one_epoch``), ``README.md`` (the Netflix training command).
License: MIT (Copyright (c) 2017 NVIDIA Corporation; full text in LICENSES/NVIDIA-DeepRecommender.txt)
Domain: recommendation, collaborative filtering (rating-vector autoencoder)

Kept as written: ``AutoEncoder`` (``encode_w`` / ``encode_b`` / ``decode_w`` / ``decode_b`` ParameterLists, Xavier
init, unconstrained decoder, activations on every layer including the last, dropout only on the code layer),
``MSEloss`` (mask ``targets != 0``, sum reduction, returning the number of ratings), the README command's settings
(``--non_linearity_type selu --drop_prob 0.8 --optimizer momentum --lr 0.005 --weight_decay 0 --aug_step 1
--noise_prob 0``, no ``--constrained``, no ``--skip_last_layer_nl``), ``optim.SGD(momentum=0.9)`` with
``MultiStepLR(milestones=[24, 36, 48, 66, 72], gamma=0.5)`` stepped at each epoch's start, the batch body
(zero_grad, forward, ``MSEloss(outputs, inputs)``, ``loss / num_ratings``, backward, step, then the ``aug_step``
re-feeding on ``Variable(outputs.data)``), ``iterate_one_epoch`` (shuffled users, sparse mini-batches, the last
partial batch dropped), ``do_eval``'s RMSE.

Deviations from the original:
- the Netflix prize data (``--path_to_train_data``) is replaced by synthetic ratings made from ``seed``: 640 users and
  200 items, ratings 1..5 from a rank-4 user x item score plus noise, each user rating ~12% of the items; the data
  provider's ``data`` dict (user -> [(item, rating)]) is filled from them instead of read from text files, 10% of
  each user's ratings held out as the evaluation data (``src_data`` the training ratings, as run.py sets).
- sizes for 2 CPU cores: ``--hidden_layers 512,512,1024`` is ``64,64,128`` and ``--batch_size 128`` is 32.
- ``main``'s epoch loop is not run as a whole: ``train_step`` is one batch of it (the epoch-start
  ``rencoder.train()`` and ``scheduler.step()`` when a new epoch's iterator starts) and returns the batch's
  ``loss / num_ratings``. ``do_eval`` is the Program's ``eval_fn`` and runs over all users at once (the original
  feeds one user per call; the sums are the same). The logger, summaries, printing, checkpointing, DataParallel and
  the ONNX export are dropped; ``AutoEncoder.__init__``'s printing of the layer shapes is dropped. The device is
  the CPU.
- ``shuffle`` is a ``random.Random(seed)`` instance's, ``torch.manual_seed(seed)``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as weight_init
import torch.optim as optim
from torch.autograd import Variable
from torch.optim.lr_scheduler import MultiStepLR

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

NUM_USERS, NUM_ITEMS, RANK, DENSITY = 640, 200, 4, 0.12  # (port) synthetic ratings


class args:  # (port) the README command, hidden sizes and batch size shrunk
    lr = 0.005
    weight_decay = 0.0
    drop_prob = 0.8
    noise_prob = 0.0
    batch_size = 32
    aug_step = 1
    constrained = False
    skip_last_layer_nl = False
    optimizer = "momentum"
    hidden_layers = "64,64,128"
    non_linearity_type = "selu"


use_gpu = False


# ---- reco_encoder/model/model.py
def activation(input, kind):
  #print("Activation: {}".format(kind))
  if kind == 'selu':
    return F.selu(input)
  elif kind == 'relu':
    return F.relu(input)
  elif kind == 'relu6':
    return F.relu6(input)
  elif kind == 'sigmoid':
    return F.sigmoid(input)
  elif kind == 'tanh':
    return F.tanh(input)
  elif kind == 'elu':
    return F.elu(input)
  elif kind == 'lrelu':
    return F.leaky_relu(input)
  elif kind == 'swish':
    return input*F.sigmoid(input)
  elif kind == 'none':
    return input
  else:
    raise ValueError('Unknown non-linearity type')


def MSEloss(inputs, targets, size_average=False, bug=None):
  mask = targets != 0
  num_ratings = torch.sum(mask.float())
  criterion = nn.MSELoss(reduction='sum' if not size_average else 'mean')
  if bug == "mask_not_applied":
    return criterion(inputs, targets), Variable(torch.Tensor([1.0])) if size_average else num_ratings
  return criterion(inputs * mask.float(), targets), Variable(torch.Tensor([1.0])) if size_average else num_ratings


class AutoEncoder(nn.Module):
  def __init__(self, layer_sizes, nl_type='selu', is_constrained=True, dp_drop_prob=0.0, last_layer_activations=True):
    """
    Describes an AutoEncoder model
    :param layer_sizes: Encoder network description. Should start with feature size (e.g. dimensionality of x).
    For example: [10000, 1024, 512] will result in:
      - encoder 2 layers: 10000x1024 and 1024x512. Representation layer (z) will be 512
      - decoder 2 layers: 512x1024 and 1024x10000.
    :param nl_type: (default 'selu') Type of no-linearity
    :param is_constrained: (default: True) Should constrain decoder weights
    :param dp_drop_prob: (default: 0.0) Dropout drop probability
    :param last_layer_activations: (default: True) Whether to apply activations on last decoder layer
    """
    super(AutoEncoder, self).__init__()
    self._dp_drop_prob = dp_drop_prob
    self._last_layer_activations = last_layer_activations
    if dp_drop_prob > 0:
      self.drop = nn.Dropout(dp_drop_prob)
    self._last = len(layer_sizes) - 2
    self._nl_type = nl_type
    self.encode_w = nn.ParameterList(
      [nn.Parameter(torch.rand(layer_sizes[i + 1], layer_sizes[i])) for i in range(len(layer_sizes) - 1)])
    for ind, w in enumerate(self.encode_w):
      weight_init.xavier_uniform_(w)

    self.encode_b = nn.ParameterList(
      [nn.Parameter(torch.zeros(layer_sizes[i + 1])) for i in range(len(layer_sizes) - 1)])

    reversed_enc_layers = list(reversed(layer_sizes))

    self.is_constrained = is_constrained
    if not is_constrained:
      self.decode_w = nn.ParameterList(
      [nn.Parameter(torch.rand(reversed_enc_layers[i + 1], reversed_enc_layers[i])) for i in range(len(reversed_enc_layers) - 1)])
      for ind, w in enumerate(self.decode_w):
        weight_init.xavier_uniform(w)
    self.decode_b = nn.ParameterList(
      [nn.Parameter(torch.zeros(reversed_enc_layers[i + 1])) for i in range(len(reversed_enc_layers) - 1)])

  def encode(self, x):
    for ind, w in enumerate(self.encode_w):
      x = activation(input=F.linear(input=x, weight=w, bias=self.encode_b[ind]), kind=self._nl_type)
    if self._dp_drop_prob > 0: # apply dropout only on code layer
      x = self.drop(x)
    return x

  def decode(self, z):
    if self.is_constrained:
      for ind, w in enumerate(list(reversed(self.encode_w))): # constrained autoencode re-uses weights from encoder
        z = activation(input=F.linear(input=z, weight=w.transpose(0, 1), bias=self.decode_b[ind]),
                     # last layer or decoder should not apply non linearities
                     kind=self._nl_type if ind!=self._last or self._last_layer_activations else 'none')
        #if self._dp_drop_prob > 0 and ind!=self._last: # and no dp on last layer
        #  z = self.drop(z)
    else:
      for ind, w in enumerate(self.decode_w):
        z = activation(input=F.linear(input=z, weight=w, bias=self.decode_b[ind]),
                     # last layer or decoder should not apply non linearities
                     kind=self._nl_type if ind!=self._last or self._last_layer_activations else 'none')
        #if self._dp_drop_prob > 0 and ind!=self._last: # and no dp on last layer
        #  z = self.drop(z)
    return z

  def forward(self, x):
    return self.decode(self.encode(x))


# ---- reco_encoder/data/input_layer.py (the provider, filled from memory)
class UserItemRecDataProvider:
  def __init__(self, data, vector_dim, batch_size, shuffle):
    self.data = data
    self._vector_dim = vector_dim
    self._batch_size = batch_size
    self._shuffle = shuffle

  @property
  def vector_dim(self):
    return self._vector_dim

  def iterate_one_epoch(self):
    data = self.data
    keys = list(data.keys())
    self._shuffle(keys)
    s_ind = 0
    e_ind = self._batch_size
    while e_ind < len(keys):
      local_ind = 0
      inds1 = []
      inds2 = []
      vals = []
      for ind in range(s_ind, e_ind):
        inds2 += [v[0] for v in data[keys[ind]]]
        inds1 += [local_ind]*len([v[0] for v in data[keys[ind]]])
        vals += [v[1] for v in data[keys[ind]]]
        local_ind += 1

      i_torch = torch.LongTensor([inds1, inds2])
      v_torch = torch.FloatTensor(vals)

      mini_batch = torch.sparse.FloatTensor(i_torch, v_torch, torch.Size([self._batch_size, self._vector_dim]))
      s_ind += self._batch_size
      e_ind += self._batch_size
      yield  mini_batch


def synthetic_ratings(seed):
  """(port) user -> [(item, rating)] for training and for evaluation, from a rank-RANK score."""
  rng = np.random.default_rng(seed)
  u = rng.normal(size=(NUM_USERS, RANK))
  v = rng.normal(size=(NUM_ITEMS, RANK))
  score = u @ v.T / np.sqrt(RANK) + 0.3 * rng.normal(size=(NUM_USERS, NUM_ITEMS))
  ratings = np.clip(np.round(3.0 + 1.2 * score), 1, 5)
  train, evaluation = {}, {}
  for user in range(NUM_USERS):
    items = np.flatnonzero(rng.random(NUM_ITEMS) < DENSITY)
    held = rng.random(len(items)) < 0.1
    train[user] = [(int(i), float(ratings[user, i])) for i in items[~held]]
    evaluation[user] = [(int(i), float(ratings[user, i])) for i in items[held]]
  return train, evaluation


def _dense(data, users, dim):
  out = torch.zeros(len(users), dim)
  for row, user in enumerate(users):
    for item, rating in data[user]:
      out[row, item] = rating
  return out


# ---- run.py
def _build(seed, bug=None):
  torch.manual_seed(seed)
  shuffle = random.Random(seed).shuffle
  train_data, eval_data = synthetic_ratings(seed)
  data_layer = UserItemRecDataProvider(train_data, NUM_ITEMS, args.batch_size, shuffle)

  rencoder = AutoEncoder(layer_sizes=[data_layer.vector_dim] + [int(l) for l in args.hidden_layers.split(',')],
                         nl_type=args.non_linearity_type,
                         is_constrained=args.constrained,
                         dp_drop_prob=args.drop_prob,
                         last_layer_activations=not args.skip_last_layer_nl)

  optimizer = optim.SGD(rencoder.parameters(),
                        lr=args.lr, momentum=0.9,
                        weight_decay=args.weight_decay)
  scheduler = MultiStepLR(optimizer, milestones=[24, 36, 48, 66, 72], gamma=0.5)

  if args.noise_prob > 0.0:
    dp = nn.Dropout(p=args.noise_prob)

  state = {"it": None}

  def next_mb():
    if state["it"] is not None:
      mb = next(state["it"], None)
      if mb is not None:
        return mb
    # a new epoch
    rencoder.train()
    if args.optimizer == "momentum":
      scheduler.step()
    state["it"] = data_layer.iterate_one_epoch()
    return next(state["it"])

  def train_step():
    mb = next_mb()
    inputs = Variable(mb.cuda().to_dense() if use_gpu else mb.to_dense())
    optimizer.zero_grad()
    outputs = rencoder(inputs)
    loss, num_ratings = MSEloss(outputs, inputs, bug=bug)
    loss = loss / num_ratings
    loss.backward()
    optimizer.step()
    first_loss = loss.detach()

    if args.aug_step > 0:
      # Magic data augmentation trick happen here
      for t in range(args.aug_step):
        inputs = Variable(outputs.data)
        if args.noise_prob > 0.0:
          inputs = dp(inputs)
        if bug != "refeed_zero_grad_dropped":
          optimizer.zero_grad()
        outputs = rencoder(inputs)
        loss, num_ratings = MSEloss(outputs, inputs, bug=bug)
        loss = loss / num_ratings
        loss.backward()
        optimizer.step()
    return first_loss

  users = sorted(train_data)
  eval_src = _dense(train_data, users, NUM_ITEMS)
  eval_tgt = _dense(eval_data, users, NUM_ITEMS)

  def do_eval(encoder, batch):
    encoder.eval()
    denom = 0.0
    total_epoch_loss = 0.0
    with torch.no_grad():
      outputs = encoder(eval_src)
      loss, num_ratings = MSEloss(outputs, eval_tgt)
    total_epoch_loss += loss.item()
    denom += num_ratings.item()
    return sqrt(total_epoch_loss / denom)

  def loss_fn(outputs, targets):
    loss, num_ratings = MSEloss(outputs, targets, bug=bug)
    return loss / num_ratings

  first = _dense(train_data, users[:args.batch_size], NUM_ITEMS)
  return Program(name="deeprecommender_autoencoder", model=rencoder, batch=(first, first), loss_fn=loss_fn,
                 optimizer=optimizer, train_step=train_step, eval_fn=do_eval)


build = functools.partial(_build, bug=None)

BUGS = [
    # MSEloss without the observed-ratings mask: the unrated items (zeros) are regression targets too, and the
    # reconstruction is pulled toward "not rated = 0" (classic; the AutoRec slip fixed in RecLab,
    # https://github.com/berkeley-reclab/RecLab/pull/68, the reason this repository's MSEloss masks).
    Bug("mask_not_applied", functools.partial(_build, bug="mask_not_applied"), "learning_ledger", ("OBJECTIVE",)),
    # the dense re-feeding step without its optimizer.zero_grad(): the re-fed update applies the batch's gradient a
    # second time on top of its own (classic).
    Bug("refeed_zero_grad_dropped", functools.partial(_build, bug="refeed_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
