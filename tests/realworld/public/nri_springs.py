"""Neural Relational Inference (Kipf, Fetaya et al. 2018) on the springs simulation, from ethanfetaya/NRI: a
factor-graph MLP encoder passes messages node -> edge -> node -> edge over the fully connected graph of 5 particles
to give each directed edge logits over 2 interaction types; a Gumbel-softmax sample (tau 0.5) of them drives an MLP
message-passing decoder (one message MLP per edge type, summed into the receivers) that predicts the trajectory 10
steps at a time from every 10th true state; the loss is the Gaussian NLL (variance 5e-5) of the predicted states
plus the KL of the edge posterior to a uniform prior; Adam 5e-4 on both networks, StepLR.

Source: https://github.com/ethanfetaya/NRI
Commit: e63fcb0144bca60eb1cffed9a94489de928d6c23
Files: ``train.py``, ``modules.py`` (``MLP``, ``MLPEncoder``, ``MLPDecoder``), ``utils.py`` (``my_softmax``,
``sample_gumbel``, ``gumbel_softmax_sample``, ``gumbel_softmax``, ``load_data``, ``encode_onehot``,
``kl_categorical_uniform``, ``nll_gaussian``, ``edge_accuracy``), ``data/synthetic_sim.py`` (``SpringSim``),
``data/generate_dataset.py``
License: MIT (Copyright (c) 2018 Ethan Fetaya, Thomas Kipf; full text in LICENSES/ethanfetaya-NRI.txt)
Domain: GNN (message passing on a fully connected interaction graph, latent edge types by Gumbel-softmax, VAE)

Kept as written: ``SpringSim.sample_trajectory`` (springs with probability 1/2 between each pair, leapfrog with
``delta_T`` 0.001, elastic walls, forces clipped), ``load_data``'s normalization to [-1, 1] by the training set's
min/max, the ``[sims, atoms, timesteps, 4]`` features and the off-diagonal edge labels, ``rel_rec`` / ``rel_send`` from
``encode_onehot``, the modules (``MLP`` with ELU, dropout and batch norm over ``[sims * atoms, features]``, xavier
init with 0.1 biases; ``MLPEncoder`` with the factor graph; ``MLPDecoder`` with ``pred_steps`` re-assembly), the
arguments' defaults (mlp encoder and decoder, ``temp`` 0.5, ``edge_types`` 2, ``prediction_steps`` 10, ``var`` 5e-5,
no prior, soft samples, ``lr`` 5e-4, ``lr_decay`` 200, ``gamma`` 0.5, dropout 0) and ``train``'s loop body
(zero_grad, encoder, ``gumbel_softmax``, ``my_softmax``, decoder, ``target = data[:, :, 1:, :]``, ``nll_gaussian`` +
``kl_categorical_uniform``, ``edge_accuracy``, backward, step).

Deviations from the original:
- sizes for 2 CPU cores: the dataset is simulated at build time from ``seed`` by the repository's own ``SpringSim``
  (no ``.npy`` files): 32 training and 16 validation simulations (50000 / 10000), ``length`` 5000 -> 1000 with
  ``sample_freq`` 100 -> 50, so ``timesteps`` 49 -> 19; ``batch_size`` 128 -> 16; ``encoder_hidden`` and
  ``decoder_hidden`` 256 -> 64. The test split, ``test()`` and the plotting are not ported.
- ``load_data`` takes the simulated arrays instead of reading files; the training ``DataLoader`` is unshuffled, as
  written.
- modern torch / numpy: ``nn.init.xavier_normal`` -> ``xavier_normal_``; the implicit-dimension ``F.softmax`` of
  ``my_softmax`` is given the dimension it picked (0, after the transpose); ``.data[0]`` on the logged scalars ->
  ``.item()``; ``np.float`` -> ``float``; ``scheduler.step()`` stays where it was (at the start of each epoch).
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the next epoch, with its
  ``scheduler.step()``, starts when the loader runs out) and returns ``loss.item()``; the validation half of
  ``train`` is ``eval_fn`` (the validation NLL with hard samples and teacher forcing); the prints, log files and
  ``torch.save`` are dropped.
- the Program's model is ``NRIModel``, a wrapper holding the ported ``encoder`` and ``decoder`` (parameter names
  ``encoder.*`` and ``decoder.*``) whose ``forward(data)`` runs the loop's encoder-sample-decoder lines and returns
  ``(output, prob, logits)``; its batch is ``(data, data[:, :, 1:, :])`` of the first training batch and its ``loss_fn`` the
  loop's ``nll_gaussian + kl_categorical_uniform``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, PLR0402, C408, B006, PIE808, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader
from torch.utils.data.dataset import TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

_EPS = 1e-10


# ------------------------------------------------------------------------------------------------------ utils.py
def my_softmax(input, axis=1):
    trans_input = input.transpose(axis, 0).contiguous()
    soft_max_1d = F.softmax(trans_input, dim=0)  # (port) the implicit dimension, 0 for these 3-d inputs
    return soft_max_1d.transpose(axis, 0)


def sample_gumbel(shape, eps=1e-10):
    """Sample from Gumbel(0, 1) (stolen from https://github.com/pytorch/pytorch/pull/3341)."""
    U = torch.rand(shape).float()
    return - torch.log(eps - torch.log(U + eps))


def gumbel_softmax_sample(logits, tau=1, eps=1e-10):
    """Draw a sample from the Gumbel-Softmax distribution."""
    gumbel_noise = sample_gumbel(logits.size(), eps=eps)
    if logits.is_cuda:
        gumbel_noise = gumbel_noise.cuda()
    y = logits + Variable(gumbel_noise)
    return my_softmax(y / tau, axis=-1)


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10):
    """Sample from the Gumbel-Softmax distribution and optionally discretize."""
    y_soft = gumbel_softmax_sample(logits, tau=tau, eps=eps)
    if hard:
        shape = logits.size()
        _, k = y_soft.data.max(-1)
        # this bit is based on
        # https://discuss.pytorch.org/t/stop-gradients-for-st-gumbel-softmax/530/5
        y_hard = torch.zeros(*shape)
        if y_soft.is_cuda:
            y_hard = y_hard.cuda()
        y_hard = y_hard.zero_().scatter_(-1, k.view(shape[:-1] + (1,)), 1.0)
        # this cool bit of code achieves two things:
        # - makes the output value exactly one-hot (since we add then
        #   subtract y_soft value)
        # - makes the gradient equal to y_soft gradient (since we strip
        #   all other gradients)
        y = Variable(y_hard - y_soft.data) + y_soft
    else:
        y = y_soft
    return y


def load_data(batch_size=1, suffix='', arrays=None):
    # (port) the arrays simulated at build time instead of np.load('data/..._train' + suffix + '.npy')
    (loc_train, vel_train, edges_train), (loc_valid, vel_valid, edges_valid) = arrays

    # [num_samples, num_timesteps, num_dims, num_atoms]
    num_atoms = loc_train.shape[3]

    loc_max = loc_train.max()
    loc_min = loc_train.min()
    vel_max = vel_train.max()
    vel_min = vel_train.min()

    # Normalize to [-1, 1]
    loc_train = (loc_train - loc_min) * 2 / (loc_max - loc_min) - 1
    vel_train = (vel_train - vel_min) * 2 / (vel_max - vel_min) - 1

    loc_valid = (loc_valid - loc_min) * 2 / (loc_max - loc_min) - 1
    vel_valid = (vel_valid - vel_min) * 2 / (vel_max - vel_min) - 1

    # Reshape to: [num_sims, num_atoms, num_timesteps, num_dims]
    loc_train = np.transpose(loc_train, [0, 3, 1, 2])
    vel_train = np.transpose(vel_train, [0, 3, 1, 2])
    feat_train = np.concatenate([loc_train, vel_train], axis=3)
    edges_train = np.reshape(edges_train, [-1, num_atoms ** 2])
    edges_train = np.array((edges_train + 1) / 2, dtype=np.int64)

    loc_valid = np.transpose(loc_valid, [0, 3, 1, 2])
    vel_valid = np.transpose(vel_valid, [0, 3, 1, 2])
    feat_valid = np.concatenate([loc_valid, vel_valid], axis=3)
    edges_valid = np.reshape(edges_valid, [-1, num_atoms ** 2])
    edges_valid = np.array((edges_valid + 1) / 2, dtype=np.int64)

    feat_train = torch.FloatTensor(feat_train)
    edges_train = torch.LongTensor(edges_train)
    feat_valid = torch.FloatTensor(feat_valid)
    edges_valid = torch.LongTensor(edges_valid)

    # Exclude self edges
    off_diag_idx = np.ravel_multi_index(
        np.where(np.ones((num_atoms, num_atoms)) - np.eye(num_atoms)),
        [num_atoms, num_atoms])
    edges_train = edges_train[:, off_diag_idx]
    edges_valid = edges_valid[:, off_diag_idx]

    train_data = TensorDataset(feat_train, edges_train)
    valid_data = TensorDataset(feat_valid, edges_valid)

    train_data_loader = DataLoader(train_data, batch_size=batch_size)
    valid_data_loader = DataLoader(valid_data, batch_size=batch_size)

    return train_data_loader, valid_data_loader, loc_max, loc_min, vel_max, vel_min


def encode_onehot(labels):
    classes = set(labels)
    classes_dict = {c: np.identity(len(classes))[i, :] for i, c in
                    enumerate(classes)}
    labels_onehot = np.array(list(map(classes_dict.get, labels)),
                             dtype=np.int32)
    return labels_onehot


def kl_categorical_uniform(preds, num_atoms, num_edge_types, add_const=False,
                           eps=1e-16):
    kl_div = preds * torch.log(preds + eps)
    if add_const:
        const = np.log(num_edge_types)
        kl_div += const
    return kl_div.sum() / (num_atoms * preds.size(0))


def nll_gaussian(preds, target, variance, add_const=False):
    neg_log_p = ((preds - target) ** 2 / (2 * variance))
    if add_const:
        const = 0.5 * np.log(2 * np.pi * variance)
        neg_log_p += const
    return neg_log_p.sum() / (target.size(0) * target.size(1))


def edge_accuracy(preds, target):
    _, preds = preds.max(-1)
    correct = preds.float().data.eq(
        target.float().data.view_as(preds)).cpu().sum()
    return float(correct) / (target.size(0) * target.size(1))  # (port) np.float


# ---------------------------------------------------------------------------------------------------- modules.py
class MLP(nn.Module):
    """Two-layer fully-connected ELU net with batch norm."""

    def __init__(self, n_in, n_hid, n_out, do_prob=0.):
        super(MLP, self).__init__()
        self.fc1 = nn.Linear(n_in, n_hid)
        self.fc2 = nn.Linear(n_hid, n_out)
        self.bn = nn.BatchNorm1d(n_out)
        self.dropout_prob = do_prob

        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight.data)
                m.bias.data.fill_(0.1)
            elif isinstance(m, nn.BatchNorm1d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def batch_norm(self, inputs):
        x = inputs.view(inputs.size(0) * inputs.size(1), -1)
        x = self.bn(x)
        return x.view(inputs.size(0), inputs.size(1), -1)

    def forward(self, inputs):
        # Input shape: [num_sims, num_things, num_features]
        x = F.elu(self.fc1(inputs))
        x = F.dropout(x, self.dropout_prob, training=self.training)
        x = F.elu(self.fc2(x))
        return self.batch_norm(x)


class MLPEncoder(nn.Module):
    def __init__(self, n_in, n_hid, n_out, do_prob=0., factor=True):
        super(MLPEncoder, self).__init__()

        self.factor = factor

        self.mlp1 = MLP(n_in, n_hid, n_hid, do_prob)
        self.mlp2 = MLP(n_hid * 2, n_hid, n_hid, do_prob)
        self.mlp3 = MLP(n_hid, n_hid, n_hid, do_prob)
        if self.factor:
            self.mlp4 = MLP(n_hid * 3, n_hid, n_hid, do_prob)
        else:
            self.mlp4 = MLP(n_hid * 2, n_hid, n_hid, do_prob)
        self.fc_out = nn.Linear(n_hid, n_out)
        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight.data)
                m.bias.data.fill_(0.1)

    def edge2node(self, x, rel_rec, rel_send):
        # NOTE: Assumes that we have the same graph across all samples.
        incoming = torch.matmul(rel_rec.t(), x)
        return incoming / incoming.size(1)

    def node2edge(self, x, rel_rec, rel_send):
        # NOTE: Assumes that we have the same graph across all samples.
        receivers = torch.matmul(rel_rec, x)
        senders = torch.matmul(rel_send, x)
        edges = torch.cat([senders, receivers], dim=2)
        return edges

    def forward(self, inputs, rel_rec, rel_send):
        # Input shape: [num_sims, num_atoms, num_timesteps, num_dims]
        x = inputs.view(inputs.size(0), inputs.size(1), -1)
        # New shape: [num_sims, num_atoms, num_timesteps*num_dims]

        x = self.mlp1(x)  # 2-layer ELU net per node

        x = self.node2edge(x, rel_rec, rel_send)
        x = self.mlp2(x)
        x_skip = x

        if self.factor:
            x = self.edge2node(x, rel_rec, rel_send)
            x = self.mlp3(x)
            x = self.node2edge(x, rel_rec, rel_send)
            x = torch.cat((x, x_skip), dim=2)  # Skip connection
            x = self.mlp4(x)
        else:
            x = self.mlp3(x)
            x = torch.cat((x, x_skip), dim=2)  # Skip connection
            x = self.mlp4(x)

        return self.fc_out(x)


class MLPDecoder(nn.Module):
    """MLP decoder module."""

    def __init__(self, n_in_node, edge_types, msg_hid, msg_out, n_hid,
                 do_prob=0., skip_first=False):
        super(MLPDecoder, self).__init__()
        self.msg_fc1 = nn.ModuleList(
            [nn.Linear(2 * n_in_node, msg_hid) for _ in range(edge_types)])
        self.msg_fc2 = nn.ModuleList(
            [nn.Linear(msg_hid, msg_out) for _ in range(edge_types)])
        self.msg_out_shape = msg_out
        self.skip_first_edge_type = skip_first

        self.out_fc1 = nn.Linear(n_in_node + msg_out, n_hid)
        self.out_fc2 = nn.Linear(n_hid, n_hid)
        self.out_fc3 = nn.Linear(n_hid, n_in_node)

        self.dropout_prob = do_prob

    def single_step_forward(self, single_timestep_inputs, rel_rec, rel_send,
                            single_timestep_rel_type):

        # single_timestep_inputs has shape
        # [batch_size, num_timesteps, num_atoms, num_dims]

        # single_timestep_rel_type has shape:
        # [batch_size, num_timesteps, num_atoms*(num_atoms-1), num_edge_types]

        # Node2edge
        receivers = torch.matmul(rel_rec, single_timestep_inputs)
        senders = torch.matmul(rel_send, single_timestep_inputs)
        pre_msg = torch.cat([senders, receivers], dim=-1)

        all_msgs = Variable(torch.zeros(pre_msg.size(0), pre_msg.size(1),
                                        pre_msg.size(2), self.msg_out_shape))
        if single_timestep_inputs.is_cuda:
            all_msgs = all_msgs.cuda()

        if self.skip_first_edge_type:
            start_idx = 1
        else:
            start_idx = 0

        # Run separate MLP for every edge type
        # NOTE: To exlude one edge type, simply offset range by 1
        for i in range(start_idx, len(self.msg_fc2)):
            msg = F.relu(self.msg_fc1[i](pre_msg))
            msg = F.dropout(msg, p=self.dropout_prob)
            msg = F.relu(self.msg_fc2[i](msg))
            msg = msg * single_timestep_rel_type[:, :, :, i:i + 1]
            all_msgs += msg

        # Aggregate all msgs to receiver
        agg_msgs = all_msgs.transpose(-2, -1).matmul(rel_rec).transpose(-2, -1)
        agg_msgs = agg_msgs.contiguous()

        # Skip connection
        aug_inputs = torch.cat([single_timestep_inputs, agg_msgs], dim=-1)

        # Output MLP
        pred = F.dropout(F.relu(self.out_fc1(aug_inputs)), p=self.dropout_prob)
        pred = F.dropout(F.relu(self.out_fc2(pred)), p=self.dropout_prob)
        pred = self.out_fc3(pred)

        # Predict position/velocity difference
        return single_timestep_inputs + pred

    def forward(self, inputs, rel_type, rel_rec, rel_send, pred_steps=1):
        # NOTE: Assumes that we have the same graph across all samples.

        inputs = inputs.transpose(1, 2).contiguous()

        sizes = [rel_type.size(0), inputs.size(1), rel_type.size(1),
                 rel_type.size(2)]
        rel_type = rel_type.unsqueeze(1).expand(sizes)

        time_steps = inputs.size(1)
        assert (pred_steps <= time_steps)
        preds = []

        # Only take n-th timesteps as starting points (n: pred_steps)
        last_pred = inputs[:, 0::pred_steps, :, :]
        curr_rel_type = rel_type[:, 0::pred_steps, :, :]
        # NOTE: Assumes rel_type is constant (i.e. same across all time steps).

        # Run n prediction steps
        for step in range(0, pred_steps):
            last_pred = self.single_step_forward(last_pred, rel_rec, rel_send,
                                                 curr_rel_type)
            preds.append(last_pred)

        sizes = [preds[0].size(0), preds[0].size(1) * pred_steps,
                 preds[0].size(2), preds[0].size(3)]

        output = Variable(torch.zeros(sizes))
        if inputs.is_cuda:
            output = output.cuda()

        # Re-assemble correct timeline
        for i in range(len(preds)):
            output[:, i::pred_steps, :, :] = preds[i]

        pred_all = output[:, :(inputs.size(1) - 1), :, :]

        return pred_all.transpose(1, 2).contiguous()


# ------------------------------------------------------------------------------------------ data/synthetic_sim.py
class SpringSim(object):
    def __init__(self, n_balls=5, box_size=5., loc_std=.5, vel_norm=.5,
                 interaction_strength=.1, noise_var=0.):
        self.n_balls = n_balls
        self.box_size = box_size
        self.loc_std = loc_std
        self.vel_norm = vel_norm
        self.interaction_strength = interaction_strength
        self.noise_var = noise_var

        self._spring_types = np.array([0., 0.5, 1.])
        self._delta_T = 0.001
        self._max_F = 0.1 / self._delta_T

    def _clamp(self, loc, vel):
        '''
        :param loc: 2xN location at one time stamp
        :param vel: 2xN velocity at one time stamp
        :return: location and velocity after hiting walls and returning after
            elastically colliding with walls
        '''
        assert (np.all(loc < self.box_size * 3))
        assert (np.all(loc > -self.box_size * 3))

        over = loc > self.box_size
        loc[over] = 2 * self.box_size - loc[over]
        assert (np.all(loc <= self.box_size))

        # assert(np.all(vel[over]>0))
        vel[over] = -np.abs(vel[over])

        under = loc < -self.box_size
        loc[under] = -2 * self.box_size - loc[under]
        # assert (np.all(vel[under] < 0))
        assert (np.all(loc >= -self.box_size))
        vel[under] = np.abs(vel[under])

        return loc, vel

    def sample_trajectory(self, T=10000, sample_freq=10,
                          spring_prob=[1. / 2, 0, 1. / 2]):
        n = self.n_balls
        assert (T % sample_freq == 0)
        T_save = int(T / sample_freq - 1)
        diag_mask = np.ones((n, n), dtype=bool)
        np.fill_diagonal(diag_mask, 0)
        counter = 0
        # Sample edges
        edges = np.random.choice(self._spring_types,
                                 size=(self.n_balls, self.n_balls),
                                 p=spring_prob)
        edges = np.tril(edges) + np.tril(edges, -1).T
        np.fill_diagonal(edges, 0)
        # Initialize location and velocity
        loc = np.zeros((T_save, 2, n))
        vel = np.zeros((T_save, 2, n))
        loc_next = np.random.randn(2, n) * self.loc_std
        vel_next = np.random.randn(2, n)
        v_norm = np.sqrt((vel_next ** 2).sum(axis=0)).reshape(1, -1)
        vel_next = vel_next * self.vel_norm / v_norm
        loc[0, :, :], vel[0, :, :] = self._clamp(loc_next, vel_next)

        # disables division by zero warning, since I fix it with fill_diagonal
        with np.errstate(divide='ignore'):

            forces_size = - self.interaction_strength * edges
            np.fill_diagonal(forces_size,
                             0)  # self forces are zero (fixes division by zero)
            F = (forces_size.reshape(1, n, n) *
                 np.concatenate((
                     np.subtract.outer(loc_next[0, :],
                                       loc_next[0, :]).reshape(1, n, n),
                     np.subtract.outer(loc_next[1, :],
                                       loc_next[1, :]).reshape(1, n, n)))).sum(
                axis=-1)
            F[F > self._max_F] = self._max_F
            F[F < -self._max_F] = -self._max_F

            vel_next += self._delta_T * F
            # run leapfrog
            for i in range(1, T):
                loc_next += self._delta_T * vel_next
                loc_next, vel_next = self._clamp(loc_next, vel_next)

                if i % sample_freq == 0:
                    loc[counter, :, :], vel[counter, :, :] = loc_next, vel_next
                    counter += 1

                forces_size = - self.interaction_strength * edges
                np.fill_diagonal(forces_size, 0)
                # assert (np.abs(forces_size[diag_mask]).min() > 1e-10)

                F = (forces_size.reshape(1, n, n) *
                     np.concatenate((
                         np.subtract.outer(loc_next[0, :],
                                           loc_next[0, :]).reshape(1, n, n),
                         np.subtract.outer(loc_next[1, :],
                                           loc_next[1, :]).reshape(1, n,
                                                                   n)))).sum(
                    axis=-1)
                F[F > self._max_F] = self._max_F
                F[F < -self._max_F] = -self._max_F
                vel_next += self._delta_T * F
            # Add noise to observations
            loc += np.random.randn(T_save, 2, self.n_balls) * self.noise_var
            vel += np.random.randn(T_save, 2, self.n_balls) * self.noise_var
            return loc, vel, edges


def generate_dataset(sim, num_sims, length, sample_freq):
    # data/generate_dataset.py, without the progress prints
    loc_all = list()
    vel_all = list()
    edges_all = list()

    for i in range(num_sims):
        loc, vel, edges = sim.sample_trajectory(T=length,
                                                sample_freq=sample_freq)
        loc_all.append(loc)
        vel_all.append(vel)
        edges_all.append(edges)

    loc_all = np.stack(loc_all)
    vel_all = np.stack(vel_all)
    edges_all = np.stack(edges_all)

    return loc_all, vel_all, edges_all


# ------------------------------------------------------------------------------------------------------ train.py
class _Args:
    seed = 42
    epochs = 500
    batch_size = 16  # (port) 128
    lr = 0.0005
    encoder_hidden = 64  # (port) 256
    decoder_hidden = 64  # (port) 256
    temp = 0.5
    num_atoms = 5
    encoder = 'mlp'
    decoder = 'mlp'
    no_factor = False
    suffix = '_springs5'
    encoder_dropout = 0.0
    decoder_dropout = 0.0
    edge_types = 2
    dims = 4
    timesteps = 19  # (port) 49
    prediction_steps = 10
    lr_decay = 200
    gamma = 0.5
    skip_first = False
    var = 5e-5
    hard = False
    prior = False
    dynamic_graph = False


class NRIModel(nn.Module):
    """(port) The loop's encoder -> Gumbel-softmax -> decoder forward, as one module for the Program."""

    def __init__(self, encoder, decoder, args, rel_rec, rel_send):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.args, self.rel_rec, self.rel_send = args, rel_rec, rel_send

    def forward(self, data):
        args, rel_rec, rel_send = self.args, self.rel_rec, self.rel_send
        logits = self.encoder(data, rel_rec, rel_send)
        edges = gumbel_softmax(logits, tau=args.temp, hard=args.hard)
        prob = my_softmax(logits, -1)
        output = self.decoder(data, edges, rel_rec, rel_send,
                              args.prediction_steps)
        return output, prob, logits


def _build(seed, bug=None):
    args = _Args()
    args.seed = seed
    args.factor = not args.no_factor

    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    sim = SpringSim(noise_var=0.0, n_balls=args.num_atoms)
    arrays = (generate_dataset(sim, 32, 1000, 50), generate_dataset(sim, 16, 1000, 50))  # (port) sizes
    train_loader, valid_loader, loc_max, loc_min, vel_max, vel_min = load_data(
        args.batch_size, args.suffix, arrays=arrays)

    # Generate off-diagonal interaction graph
    off_diag = np.ones([args.num_atoms, args.num_atoms]) - np.eye(args.num_atoms)

    rel_rec = np.array(encode_onehot(np.where(off_diag)[0]), dtype=np.float32)
    rel_send = np.array(encode_onehot(np.where(off_diag)[1]), dtype=np.float32)
    rel_rec = torch.FloatTensor(rel_rec)
    rel_send = torch.FloatTensor(rel_send)

    encoder = MLPEncoder(args.timesteps * args.dims, args.encoder_hidden,
                         args.edge_types,
                         args.encoder_dropout, args.factor)
    decoder = MLPDecoder(n_in_node=args.dims,
                         edge_types=args.edge_types,
                         msg_hid=args.decoder_hidden,
                         msg_out=args.decoder_hidden,
                         n_hid=args.decoder_hidden,
                         do_prob=args.decoder_dropout,
                         skip_first=args.skip_first)

    optimizer = optim.Adam(list(encoder.parameters()) + list(decoder.parameters()),
                           lr=args.lr)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=args.lr_decay,
                                    gamma=args.gamma)

    rel_rec = Variable(rel_rec)
    rel_send = Variable(rel_send)

    def target_of(data):
        if bug == "target_not_shifted":
            return data[:, :, :-1, :]
        return data[:, :, 1:, :]

    def total_loss(output, prob, target):
        loss_nll = nll_gaussian(output, target, args.var)
        loss_kl = kl_categorical_uniform(prob, args.num_atoms,
                                         args.edge_types)
        if bug == "kl_sign_flipped":
            return loss_nll - loss_kl, loss_nll, loss_kl
        return loss_nll + loss_kl, loss_nll, loss_kl

    st = {"it": None, "acc_train": [], "mse_train": [], "nll_train": [], "kl_train": []}

    def train_step():
        # one batch of train(epoch, best_val_loss); a new epoch steps the scheduler, as train() does first
        if st["it"] is None:
            encoder.train()
            decoder.train()
            scheduler.step()
            st["it"] = iter(train_loader)
        try:
            data, relations = next(st["it"])
        except StopIteration:
            st["it"] = None
            return train_step()
        data, relations = Variable(data), Variable(relations)

        if bug != "no_zero_grad":
            optimizer.zero_grad()

        logits = encoder(data, rel_rec, rel_send)
        edges = gumbel_softmax(logits, tau=args.temp, hard=args.hard)
        prob = my_softmax(logits, -1)

        output = decoder(data, edges, rel_rec, rel_send,
                         args.prediction_steps)

        target = target_of(data)

        loss, loss_nll, loss_kl = total_loss(output, prob, target)

        acc = edge_accuracy(logits, relations)
        st["acc_train"].append(acc)

        loss.backward()
        optimizer.step()

        st["mse_train"].append(F.mse_loss(output, target).item())
        st["nll_train"].append(loss_nll.item())
        st["kl_train"].append(loss_kl.item())
        return loss.item()

    def eval_fn(_model=None, _batch=None):
        # the validation half of train(): hard samples, teacher forcing (pred_steps 1)
        nll_val = []
        encoder.eval()
        decoder.eval()
        with torch.no_grad():
            for batch_idx, (data, relations) in enumerate(valid_loader):
                logits = encoder(data, rel_rec, rel_send)
                edges = gumbel_softmax(logits, tau=args.temp, hard=True)
                output = decoder(data, edges, rel_rec, rel_send, 1)
                target = target_of(data)
                nll_val.append(nll_gaussian(output, target, args.var).item())
        encoder.train()
        decoder.train()
        return float(np.mean(nll_val))

    model = NRIModel(encoder, decoder, args, rel_rec, rel_send)
    first_data, _ = next(iter(train_loader))

    def loss_fn(outputs, target):
        output, prob, _logits = outputs
        return total_loss(output, prob, target)[0]

    return Program(name="nri_springs", model=model, batch=(first_data, target_of(first_data)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the target taken as data[:, :, :-1, :] (classic: not shifted): the decoder is trained to return the state
    # it is given instead of the next one.
    Bug("target_not_shifted", functools.partial(_build, bug="target_not_shifted"), "learning_ledger", ("TASK",)),
    # loss_nll - loss_kl (classic sign slip): the edge posterior is pushed away from the uniform prior, toward
    # certainty, instead of toward it.
    Bug("kl_sign_flipped", functools.partial(_build, bug="kl_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from the loop (classic). A whole-model step slip: declared by its mechanism
    # (README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
