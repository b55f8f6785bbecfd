# ruff: noqa: PLR0402, C408
"""The world model's memory from ctallec/world-models (``trainmdrnn.py``): an MDN-RNN (an LSTM over [action, latent]
with a linear head giving, per time step, a 5-component diagonal Gaussian mixture over the next latent, a reward
and a terminal logit), trained by RMSprop on the GMM negative log-likelihood of the next latent plus the terminal's
BCE, scaled by ``1 / (LSIZE + 1)``, on sequences of 32 steps cut from recorded rollouts with brownian-motion actions;
the test loss of each epoch drives ``ReduceLROnPlateau``.

Source: https://github.com/ctallec/world-models
Commit: d6abd9ce97409734a766eb67ccf0d1967ba9bf0c
Files: ``trainmdrnn.py``, ``models/mdrnn.py`` (``gmm_loss``, ``_MDRNNBase``, ``MDRNN``), ``data/loaders.py``
(``_RolloutDataset``, ``RolloutSequenceDataset``), ``data/carracing.py`` (``generate_data``), ``utils/misc.py``
(``sample_continuous_policy``, the sizes), README (``python trainmdrnn.py --logdir exp_dir``)
License: MIT (Copyright (c) 2018 Corentin Tallec; full text in LICENSES/ctallec-world-models.txt)
Domain: model-based RL (world model: mixture-density RNN dynamics on latents, terminal prediction)

Kept as written: ``gmm_loss`` (log-sum-exp over the mixture with the max subtracted), ``MDRNN`` (``gmm_linear`` to
``(2 * latents + 1) * gaussians + 2``, exp sigmas, log-softmax mixture weights), ``get_loss`` (the [B, T] -> [T, B]
transposes, ``include_reward`` False as the README runs it: scale ``LSIZE + 1``), ``data_pass``'s training branch
(zero_grad, backward, step) and test branch, RMSprop(lr 1e-3, alpha 0.9), ``ReduceLROnPlateau('min', factor 0.5,
patience 5)`` stepped on the test loss, BSIZE 16, SEQ_LEN 32, 5 Gaussians, the sequence dataset's indexing (obs
``[i : i+32]``, next obs ``[i+1 : i+33]``, actions / rewards / terminals ``[i+1 : i+33]``, as ``generate_data``
records the observation after each action) and its buffered loading.

Deviations from the original:
- no CarRacing, no pretrained VAE: the rollouts are made from ``seed`` directly in latent space (the VAE's role),
  latents ``z_t = 0.8 z_{t-1} + tanh(B a_t) + noise`` with a two-mode jump on some steps, driven by
  ``sample_continuous_policy``'s brownian actions in CarRacing's action box, terminal on the last step;
  ``to_latent`` (the frozen VAE's sampled encoding) is therefore the identity on the latents;
- sizes for 2 CPU cores: LSIZE 32 -> 8, RSIZE 256 -> 64, rollouts of 1000 -> 100 steps, 24 train / 6 test
  rollouts held in memory (``_files`` are in-memory rollouts instead of npz paths), no DataLoader workers;
- ``utils/learning.py``'s copy of ``ReduceLROnPlateau`` is torch's; EarlyStopping, checkpoints, reloading, tqdm
  and the prints are dropped; the training loop is a generator: one ``train_step`` = one training batch, the test
  pass and the scheduler step run at each epoch's end;
- the Program declares the MDRNN, its optimizer and ``get_loss``'s lines after the model call on one [T, B] batch
  (``batch_axis=1``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from bisect import bisect

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as f
from torch.distributions.normal import Normal
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

ASIZE, LSIZE, RSIZE = 3, 8, 64  # (port) utils/misc.py: 3, 32, 256
BSIZE = 16
SEQ_LEN = 32
epochs = 30


# models/mdrnn.py
def gmm_loss(batch, mus, sigmas, logpi, reduce=True, bug=None):  # pylint: disable=too-many-arguments
    """ Computes the gmm loss (minus the log probability of batch under the GMM model). """
    batch = batch.unsqueeze(-2)
    normal_dist = Normal(mus, sigmas)
    g_log_probs = normal_dist.log_prob(batch)
    if bug == "gmm_log_probs_summed":
        g_probs = logpi[:, :, :, None] + g_log_probs
        p_loss = torch.sum(g_probs, dim=-2)
        p_loss = p_loss.view(-1, p_loss.shape[-1]).sum(dim=0)
        return - p_loss.mean() if reduce else - p_loss
    g_log_probs = logpi + torch.sum(g_log_probs, dim=-1)
    max_log_probs = torch.max(g_log_probs, dim=-1, keepdim=True)[0]
    g_log_probs = g_log_probs - max_log_probs

    g_probs = torch.exp(g_log_probs)
    probs = torch.sum(g_probs, dim=-1)

    log_prob = max_log_probs.squeeze() + torch.log(probs)
    if reduce:
        return - torch.mean(log_prob)
    return - log_prob


class _MDRNNBase(nn.Module):
    def __init__(self, latents, actions, hiddens, gaussians):
        super().__init__()
        self.latents = latents
        self.actions = actions
        self.hiddens = hiddens
        self.gaussians = gaussians

        self.gmm_linear = nn.Linear(
            hiddens, (2 * latents + 1) * gaussians + 2)

    def forward(self, *inputs):
        pass


class MDRNN(_MDRNNBase):
    """ MDRNN model for multi steps forward """
    def __init__(self, latents, actions, hiddens, gaussians):
        super().__init__(latents, actions, hiddens, gaussians)
        self.rnn = nn.LSTM(latents + actions, hiddens)

    def forward(self, actions, latents):  # pylint: disable=arguments-differ
        """ MULTI STEPS forward: actions (SEQ_LEN, BSIZE, ASIZE), latents (SEQ_LEN, BSIZE, LSIZE). """
        seq_len, bs = actions.size(0), actions.size(1)

        ins = torch.cat([actions, latents], dim=-1)
        outs, _ = self.rnn(ins)
        gmm_outs = self.gmm_linear(outs)

        stride = self.gaussians * self.latents

        mus = gmm_outs[:, :, :stride]
        mus = mus.view(seq_len, bs, self.gaussians, self.latents)

        sigmas = gmm_outs[:, :, stride:2 * stride]
        sigmas = sigmas.view(seq_len, bs, self.gaussians, self.latents)
        sigmas = torch.exp(sigmas)

        pi = gmm_outs[:, :, 2 * stride: 2 * stride + self.gaussians]
        pi = pi.view(seq_len, bs, self.gaussians)
        logpi = f.log_softmax(pi, dim=-1)

        rs = gmm_outs[:, :, -2]

        ds = gmm_outs[:, :, -1]

        return mus, sigmas, logpi, rs, ds


# data/loaders.py
class _RolloutDataset(torch.utils.data.Dataset):  # pylint: disable=too-few-public-methods
    def __init__(self, root, transform, buffer_size=200, train=True):  # pylint: disable=too-many-arguments
        self._transform = transform

        self._files = list(root)  # (port) in-memory rollouts instead of the npz files under root
        n_test = len(self._files) // 5  # (port) the last 600 files are the test set
        if train:
            self._files = self._files[:-n_test]
        else:
            self._files = self._files[-n_test:]

        self._cum_size = None
        self._buffer = None
        self._buffer_fnames = None
        self._buffer_index = 0
        self._buffer_size = buffer_size

    def load_next_buffer(self):
        """ Loads next buffer """
        self._buffer_fnames = self._files[self._buffer_index:self._buffer_index + self._buffer_size]
        self._buffer_index += self._buffer_size
        self._buffer_index = self._buffer_index % len(self._files)
        self._buffer = []
        self._cum_size = [0]

        for data in self._buffer_fnames:
            self._buffer += [{k: np.copy(v) for k, v in data.items()}]
            self._cum_size += [self._cum_size[-1] +
                               self._data_per_sequence(data['rewards'].shape[0])]

    def __len__(self):
        if not self._cum_size:
            self.load_next_buffer()
        return self._cum_size[-1]

    def __getitem__(self, i):
        # binary search through cum_size
        file_index = bisect(self._cum_size, i) - 1
        seq_index = i - self._cum_size[file_index]
        data = self._buffer[file_index]
        return self._get_data(data, seq_index)


class RolloutSequenceDataset(_RolloutDataset):  # pylint: disable=too-few-public-methods
    def __init__(self, root, seq_len, transform, buffer_size=200, train=True, bug=None):  # pylint: disable=too-many-arguments
        super().__init__(root, transform, buffer_size, train)
        self._seq_len = seq_len
        self.bug = bug

    def _get_data(self, data, seq_index):
        obs_data = data['observations'][seq_index:seq_index + self._seq_len + 1]
        obs_data = self._transform(obs_data.astype(np.float32))
        obs, next_obs = obs_data[:-1], obs_data[1:]
        if self.bug == "actions_off_by_one":
            action = data['actions'][seq_index:seq_index + self._seq_len]
        else:
            action = data['actions'][seq_index+1:seq_index + self._seq_len + 1]
        action = action.astype(np.float32)
        reward, terminal = [data[key][seq_index+1:
                                      seq_index + self._seq_len + 1].astype(np.float32)
                            for key in ('rewards', 'terminals')]
        # data is given in the form
        # (obs, action, reward, terminal, next_obs)
        return obs, action, reward, terminal, next_obs

    def _data_per_sequence(self, data_length):
        return data_length - self._seq_len


# utils/misc.py
def sample_continuous_policy(action_space, seq_len, dt):
    """ Sample a continuous policy: a brownian motion a_{t+1} = a_t + sqrt(dt) N(0, 1). """
    actions = [action_space.sample()]
    for _ in range(seq_len):
        daction_dt = np.random.randn(*actions[-1].shape)
        actions.append(
            np.clip(actions[-1] + math.sqrt(dt) * daction_dt,
                    action_space.low, action_space.high))
    return actions


class _CarRacingActions:
    """(port) CarRacing's action box: steer in [-1, 1], gas and brake in [0, 1]."""
    low, high = np.array([-1.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0])

    def sample(self):
        return np.random.uniform(self.low, self.high)


def generate_rollouts(seed, rollouts=30, seq_len=100):
    """(port) ``generate_data``'s records, with the environment's frames replaced by latents of a synthetic dynamic."""
    rng = np.random.default_rng(seed)
    B = rng.normal(0, 0.6, (LSIZE, ASIZE))
    out = []
    for _ in range(rollouts):
        a_rollout = sample_continuous_policy(_CarRacingActions(), seq_len, 1. / 50)
        z, s_rollout, r_rollout, d_rollout = rng.normal(0, 0.5, LSIZE), [], [], []
        for t in range(seq_len):
            jump = rng.choice([-0.5, 0.5]) * (rng.random() < 0.3)
            z = 0.8 * z + np.tanh(B @ a_rollout[t]) + jump + 0.05 * rng.normal(size=LSIZE)
            s_rollout += [z.copy()]
            r_rollout += [float(z[0] - 0.1 * a_rollout[t][2])]
            d_rollout += [t == seq_len - 1]
        out.append(dict(observations=np.array(s_rollout), rewards=np.array(r_rollout),
                        actions=np.array(a_rollout), terminals=np.array(d_rollout)))
    return out


# trainmdrnn.py
def make_get_loss(mdrnn, bug=None):
    def get_loss(latent_obs, action, reward, terminal,
                 latent_next_obs, include_reward: bool):
        """ (GMMLoss(latent_next_obs, GMMPredicted) + MSE(reward, predicted_reward) + BCE(terminal, logit_terminal))
        / (LSIZE + 2), averaged on the batch and the sequence dimensions. """
        if bug != "sequences_not_transposed":
            latent_obs, action,\
                reward, terminal,\
                latent_next_obs = [arr.transpose(1, 0)
                                   for arr in [latent_obs, action,
                                               reward, terminal,
                                               latent_next_obs]]
        mus, sigmas, logpi, rs, ds = mdrnn(action, latent_obs)
        return loss_terms((mus, sigmas, logpi, rs, ds), (reward, terminal, latent_next_obs), include_reward, bug)
    return get_loss


def loss_terms(outputs, targets, include_reward=False, bug=None):
    """(port) ``get_loss``'s lines after the model call, shared with the Program's loss_fn."""
    mus, sigmas, logpi, rs, ds = outputs
    reward, terminal, latent_next_obs = targets
    gmm = gmm_loss(latent_next_obs, mus, sigmas, logpi, bug=bug)
    bce = f.binary_cross_entropy_with_logits(ds, terminal)
    if include_reward:
        mse = f.mse_loss(rs, reward)
        scale = LSIZE + 2
    else:
        mse = 0
        scale = LSIZE + 1
    loss = (gmm + bce + mse) / scale
    return dict(gmm=gmm, bce=bce, mse=mse, loss=loss)


def make_data_pass(mdrnn, optimizer, train_loader, test_loader, get_loss, device):
    def data_pass(epoch, train, include_reward):  # pylint: disable=too-many-locals
        """ One pass through the data ((port) a generator: it yields after each training batch) """
        if train:
            mdrnn.train()
            loader = train_loader
        else:
            mdrnn.eval()
            loader = test_loader

        loader.dataset.load_next_buffer()

        cum_loss = 0
        for i, data in enumerate(loader):
            obs, action, reward, terminal, next_obs = [arr.to(device) for arr in data]

            # transform obs
            latent_obs, latent_next_obs = obs, next_obs  # (port) to_latent: the rollouts are latents already

            if train:
                losses = get_loss(latent_obs, action, reward,
                                  terminal, latent_next_obs, include_reward)

                optimizer.zero_grad()
                losses['loss'].backward()
                optimizer.step()
                yield losses['loss'].detach()
            else:
                with torch.no_grad():
                    losses = get_loss(latent_obs, action, reward,
                                      terminal, latent_next_obs, include_reward)

            cum_loss += losses['loss'].item()
        return cum_loss * BSIZE / len(loader.dataset)
    return data_pass


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device('cpu')
    include_reward = False  # the README's command has no --include_reward
    mdrnn = MDRNN(LSIZE, ASIZE, RSIZE, 5)
    mdrnn.to(device)
    optimizer = torch.optim.RMSprop(mdrnn.parameters(), lr=1e-3, alpha=.9)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, 'min', factor=0.5, patience=5)

    rollouts = generate_rollouts(seed)
    transform = lambda x: x  # (port) the frames' transform; the rollouts are latents
    train_loader = DataLoader(
        RolloutSequenceDataset(rollouts, SEQ_LEN, transform, buffer_size=30, bug=bug),
        batch_size=BSIZE, num_workers=0, shuffle=True)
    test_loader = DataLoader(
        RolloutSequenceDataset(rollouts, SEQ_LEN, transform, train=False, buffer_size=10, bug=bug),
        batch_size=BSIZE, num_workers=0)
    get_loss = make_get_loss(mdrnn, bug)
    data_pass = make_data_pass(mdrnn, optimizer, train_loader, test_loader, get_loss, device)

    def loop():
        for e in range(epochs):
            yield from data_pass(e, train=True, include_reward=include_reward)
            test_loss = yield from data_pass(e, train=False, include_reward=include_reward)
            scheduler.step(test_loss)

    steps = loop()
    obs, action, reward, terminal, next_obs = next(iter(DataLoader(train_loader.dataset, batch_size=BSIZE)))
    batch = ({"actions": action.transpose(1, 0), "latents": obs.transpose(1, 0)},
             (reward.transpose(1, 0), terminal.transpose(1, 0), next_obs.transpose(1, 0)))

    def loss_fn(outputs, targets):
        return loss_terms(outputs, targets, include_reward, bug)['loss']

    return Program(name="ctallecworldmodels_mdrnn", model=mdrnn, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=lambda: next(steps), batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # the mixture likelihood replaced by the sum of the per-component weighted log-densities, as suggested in
    # https://github.com/ctallec/world-models/issues/41 (not the GMM's log-likelihood: no log-sum-exp over components).
    Bug("gmm_log_probs_summed", functools.partial(_build, bug="gmm_log_probs_summed"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic off-by-one in the sequence dataset: the action recorded before obs[t] paired with the transition
    # obs[t] -> obs[t+1] (the pairing slip fixed in https://github.com/epignatelli/navix/pull/152 for its world model).
    Bug("actions_off_by_one", functools.partial(_build, bug="actions_off_by_one"), "learning_ledger", ("TASK",)),
    # classic: the [B, T] batches fed to the sequence-first LSTM without the transposes, so the recurrence runs
    # across the batch's sequences and every step sees the other sequences' past.
    Bug("sequences_not_transposed", functools.partial(_build, bug="sequences_not_transposed"), "tensor_trace",
        ("rnn",)),
]
