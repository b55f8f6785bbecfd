"""DCRNN (diffusion convolutional recurrent neural network) for traffic forecasting from chnsh/DCRNN_PyTorch, the
PyTorch port of Li et al.'s DCRNN: a sequence-to-sequence model of DCGRU cells whose gates and candidate state are
diffusion convolutions over the sensor graph (dual random walk supports, K-step Chebyshev-style recursion with
``torch.sparse.mm``), parameters registered lazily on the first forward, scheduled sampling in the decoder
(curriculum learning), masked MAE on the inverse-scaled speeds, Adam with eps 1e-3, MultiStepLR, gradient clipping.

Source: https://github.com/chnsh/DCRNN_PyTorch
Commit: d92490b808ba5c5be2f23d427d96e9a56b066d7f
Files: ``model/pytorch/dcrnn_cell.py``, ``model/pytorch/dcrnn_model.py``, ``model/pytorch/dcrnn_supervisor.py``,
``model/pytorch/loss.py``, ``lib/utils.py`` (``DataLoader``, ``StandardScaler``, ``calculate_random_walk_matrix``,
``load_dataset``), ``scripts/generate_training_data.py``, ``data/model/dcrnn_la.yaml``
License: MIT (Copyright (c) 2017 Yaguang Li; full text in LICENSES/chnsh-DCRNN_PyTorch.txt)
Domain: GNN in plain torch, spatio-temporal node-level regression (graph diffusion convolution inside a GRU
seq2seq)

Kept as written: ``LayerParams`` and ``DCGRUCell`` (lazily registered xavier-normal weights and constant biases,
``_gconv`` with the diffusion recursion ``x2 = 2 * S x1 - x0`` per support, ``_fc``, the GRU update), the
``EncoderModel`` / ``DecoderModel`` / ``DCRNNModel`` seq2seq (zero go symbol, the projection layer, scheduled
sampling with ``cl_decay_steps / (cl_decay_steps + exp(batches_seen / cl_decay_steps))``), ``masked_mae_loss``,
the supervisor's ``_train`` loop body (``zero_grad``, ``_prepare_data``, the forward with labels and
``batches_seen``, the optimizer rebuilt after the first forward to take the dynamically registered parameters,
``_compute_loss`` on inverse-transformed values, ``backward``, ``clip_grad_norm_(max_grad_norm)``, ``step``; the
MultiStepLR stepped per epoch), ``evaluate``, ``load_dataset``'s scaling of channel 0 and its ``DataLoader`` (padding
with the last sample, a shuffle at construction), ``generate_graph_seq2seq_io_data`` (offsets, time-in-day channel)
and the METR-LA configuration's choices (dual_random_walk, max_diffusion_step 2, two layers, input_dim 2,
output_dim 1, curriculum on, base_lr 0.01, epsilon 1e-3, max_grad_norm 5, lr_decay_ratio 0.1).

Deviations from the original:
- METR-LA (``metr-la.h5`` and ``adj_mx.pkl``) is not here: the sensor graph is a random directed road graph of 12
  sensors made from ``seed`` (each sensor fed by 2 upstream sensors, Gaussian-kernel weights), and the speeds a
  synthetic 5-minute series with a daily profile per sensor plus congestion waves that travel downstream along the
  edges, and noise; ``generate_graph_seq2seq_io_data`` builds x/y from it (train/val/test 70/10/20 as in the
  script) with the time-in-day channel computed from the step index instead of a pandas index.
- sizes for 2 CPU cores: num_nodes 207 -> 12, rnn_units 64 -> 16, seq_len and horizon 12 -> 6 (x offsets -5..0,
  y offsets 1..6), batch_size 64 -> 16, cl_decay_steps 2000 kept, MultiStepLR milestones [20, 30, 40, 50] kept
  (epochs, stepped when the training loader runs out).
- tensorboard, the log directory, checkpoint saving and loading, early stopping and the test-every-n-epochs prints
  are dropped; the logger is ``logging.getLogger``. The device is the CPU; the adjacency is float32 (as the
  pickled METR-LA matrix), so the sparse supports are float32.
- ``_train``'s epoch loop is not run as a whole: ``train_step`` is one batch of it (a new epoch, with its
  ``lr_scheduler.step()``, starts when the loader runs out) returning ``loss.item()``; ``eval_fn`` is
  ``evaluate('val')``'s mean loss. The Program's model is ``dcrnn_model`` (its parameters made by one forward on a
  training batch before the Program is returned, as the original's first step does), its batch one prepared
  training batch ``(x, y)`` in the ``(seq_len, batch, nodes * dim)`` layout, its ``batch_axis`` 1.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP032, PLR0402, PLR0124, F841

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import types

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")

NUM_NODES = 12  # the original 207
RNN_UNITS = 16  # the original 64
SEQ_LEN = HORIZON = 6  # the original 12
BATCH_SIZE = 16  # the original 64
N_STEPS = 1200  # 5-minute steps of the synthetic series


# lib/utils.py
class DataLoader(object):
    def __init__(self, xs, ys, batch_size, pad_with_last_sample=True, shuffle=False):
        """

        :param xs:
        :param ys:
        :param batch_size:
        :param pad_with_last_sample: pad with the last sample to make number of samples divisible to batch_size.
        """
        self.batch_size = batch_size
        self.current_ind = 0
        if pad_with_last_sample:
            num_padding = (batch_size - (len(xs) % batch_size)) % batch_size
            x_padding = np.repeat(xs[-1:], num_padding, axis=0)
            y_padding = np.repeat(ys[-1:], num_padding, axis=0)
            xs = np.concatenate([xs, x_padding], axis=0)
            ys = np.concatenate([ys, y_padding], axis=0)
        self.size = len(xs)
        self.num_batch = int(self.size // self.batch_size)
        if shuffle:
            permutation = np.random.permutation(self.size)
            xs, ys = xs[permutation], ys[permutation]
        self.xs = xs
        self.ys = ys

    def get_iterator(self):
        self.current_ind = 0

        def _wrapper():
            while self.current_ind < self.num_batch:
                start_ind = self.batch_size * self.current_ind
                end_ind = min(self.size, self.batch_size * (self.current_ind + 1))
                x_i = self.xs[start_ind: end_ind, ...]
                y_i = self.ys[start_ind: end_ind, ...]
                yield (x_i, y_i)
                self.current_ind += 1

        return _wrapper()


class StandardScaler:
    """
    Standard the input
    """

    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return (data * self.std) + self.mean


def calculate_random_walk_matrix(adj_mx):
    adj_mx = sp.coo_matrix(adj_mx)
    d = np.array(adj_mx.sum(1))
    d_inv = np.power(d, -1).flatten()
    d_inv[np.isinf(d_inv)] = 0.
    d_mat_inv = sp.diags(d_inv)
    random_walk_mx = d_mat_inv.dot(adj_mx).tocoo()
    return random_walk_mx


def load_dataset(cat_datas, batch_size, test_batch_size=None, **kwargs):
    data = {}
    for category in ['train', 'val', 'test']:
        cat_data = cat_datas[category]  # deviation: the synthetic arrays, not an npz file
        data['x_' + category] = cat_data['x']
        data['y_' + category] = cat_data['y']
    scaler = StandardScaler(mean=data['x_train'][..., 0].mean(), std=data['x_train'][..., 0].std())
    # Data format
    for category in ['train', 'val', 'test']:
        data['x_' + category][..., 0] = scaler.transform(data['x_' + category][..., 0])
        data['y_' + category][..., 0] = scaler.transform(data['y_' + category][..., 0])
    data['train_loader'] = DataLoader(data['x_train'], data['y_train'], batch_size, shuffle=True)
    data['val_loader'] = DataLoader(data['x_val'], data['y_val'], test_batch_size, shuffle=False)
    data['test_loader'] = DataLoader(data['x_test'], data['y_test'], test_batch_size, shuffle=False)
    data['scaler'] = scaler

    return data


utils = types.SimpleNamespace(calculate_random_walk_matrix=calculate_random_walk_matrix)


# model/pytorch/dcrnn_cell.py
class LayerParams:
    def __init__(self, rnn_network: torch.nn.Module, layer_type: str):
        self._rnn_network = rnn_network
        self._params_dict = {}
        self._biases_dict = {}
        self._type = layer_type

    def get_weights(self, shape):
        if shape not in self._params_dict:
            nn_param = torch.nn.Parameter(torch.empty(*shape, device=device))
            torch.nn.init.xavier_normal_(nn_param)
            self._params_dict[shape] = nn_param
            self._rnn_network.register_parameter('{}_weight_{}'.format(self._type, str(shape)),
                                                 nn_param)
        return self._params_dict[shape]

    def get_biases(self, length, bias_start=0.0):
        if length not in self._biases_dict:
            biases = torch.nn.Parameter(torch.empty(length, device=device))
            torch.nn.init.constant_(biases, bias_start)
            self._biases_dict[length] = biases
            self._rnn_network.register_parameter('{}_biases_{}'.format(self._type, str(length)),
                                                 biases)

        return self._biases_dict[length]


class DCGRUCell(torch.nn.Module):
    def __init__(self, num_units, adj_mx, max_diffusion_step, num_nodes, nonlinearity='tanh',
                 filter_type="laplacian", use_gc_for_ru=True):
        """

        :param num_units:
        :param adj_mx:
        :param max_diffusion_step:
        :param num_nodes:
        :param nonlinearity:
        :param filter_type: "laplacian", "random_walk", "dual_random_walk".
        :param use_gc_for_ru: whether to use Graph convolution to calculate the reset and update gates.
        """

        super().__init__()
        self._activation = torch.tanh if nonlinearity == 'tanh' else torch.relu
        # support other nonlinearities up here?
        self._num_nodes = num_nodes
        self._num_units = num_units
        self._max_diffusion_step = max_diffusion_step
        self._supports = []
        self._use_gc_for_ru = use_gc_for_ru
        supports = []
        if filter_type == "laplacian":
            supports.append(utils.calculate_scaled_laplacian(adj_mx, lambda_max=None))
        elif filter_type == "random_walk":
            supports.append(utils.calculate_random_walk_matrix(adj_mx).T)
        elif filter_type == "dual_random_walk":
            supports.append(utils.calculate_random_walk_matrix(adj_mx).T)
            supports.append(utils.calculate_random_walk_matrix(adj_mx.T).T)
        else:
            supports.append(utils.calculate_scaled_laplacian(adj_mx))
        for support in supports:
            self._supports.append(self._build_sparse_matrix(support))

        self._fc_params = LayerParams(self, 'fc')
        self._gconv_params = LayerParams(self, 'gconv')

    @staticmethod
    def _build_sparse_matrix(L):
        L = L.tocoo()
        indices = np.column_stack((L.row, L.col))
        # this is to ensure row-major ordering to equal torch.sparse.sparse_reorder(L)
        indices = indices[np.lexsort((indices[:, 0], indices[:, 1]))]
        L = torch.sparse_coo_tensor(indices.T, L.data, L.shape, device=device)
        return L

    def forward(self, inputs, hx):
        """Gated recurrent unit (GRU) with Graph Convolution.
        :param inputs: (B, num_nodes * input_dim)
        :param hx: (B, num_nodes * rnn_units)

        :return
        - Output: A `2-D` tensor with shape `(B, num_nodes * rnn_units)`.
        """
        output_size = 2 * self._num_units
        if self._use_gc_for_ru:
            fn = self._gconv
        else:
            fn = self._fc
        value = torch.sigmoid(fn(inputs, hx, output_size, bias_start=1.0))
        value = torch.reshape(value, (-1, self._num_nodes, output_size))
        r, u = torch.split(tensor=value, split_size_or_sections=self._num_units, dim=-1)
        r = torch.reshape(r, (-1, self._num_nodes * self._num_units))
        u = torch.reshape(u, (-1, self._num_nodes * self._num_units))

        c = self._gconv(inputs, r * hx, self._num_units)
        if self._activation is not None:
            c = self._activation(c)

        new_state = u * hx + (1.0 - u) * c
        return new_state

    @staticmethod
    def _concat(x, x_):
        x_ = x_.unsqueeze(0)
        return torch.cat([x, x_], dim=0)

    def _fc(self, inputs, state, output_size, bias_start=0.0):
        batch_size = inputs.shape[0]
        inputs = torch.reshape(inputs, (batch_size * self._num_nodes, -1))
        state = torch.reshape(state, (batch_size * self._num_nodes, -1))
        inputs_and_state = torch.cat([inputs, state], dim=-1)
        input_size = inputs_and_state.shape[-1]
        weights = self._fc_params.get_weights((input_size, output_size))
        value = torch.sigmoid(torch.matmul(inputs_and_state, weights))
        biases = self._fc_params.get_biases(output_size, bias_start)
        value += biases
        return value

    def _gconv(self, inputs, state, output_size, bias_start=0.0):
        # Reshape input and state to (batch_size, num_nodes, input_dim/state_dim)
        batch_size = inputs.shape[0]
        inputs = torch.reshape(inputs, (batch_size, self._num_nodes, -1))
        state = torch.reshape(state, (batch_size, self._num_nodes, -1))
        inputs_and_state = torch.cat([inputs, state], dim=2)
        input_size = inputs_and_state.size(2)

        x = inputs_and_state
        x0 = x.permute(1, 2, 0)  # (num_nodes, total_arg_size, batch_size)
        x0 = torch.reshape(x0, shape=[self._num_nodes, input_size * batch_size])
        x = torch.unsqueeze(x0, 0)

        if self._max_diffusion_step == 0:
            pass
        else:
            for support in self._supports:
                x1 = torch.sparse.mm(support, x0)
                x = self._concat(x, x1)

                for k in range(2, self._max_diffusion_step + 1):
                    x2 = 2 * torch.sparse.mm(support, x1) - x0
                    x = self._concat(x, x2)
                    x1, x0 = x2, x1

        num_matrices = len(self._supports) * self._max_diffusion_step + 1  # Adds for x itself.
        x = torch.reshape(x, shape=[num_matrices, self._num_nodes, input_size, batch_size])
        x = x.permute(3, 1, 2, 0)  # (batch_size, num_nodes, input_size, order)
        x = torch.reshape(x, shape=[batch_size * self._num_nodes, input_size * num_matrices])

        weights = self._gconv_params.get_weights((input_size * num_matrices, output_size))
        x = torch.matmul(x, weights)  # (batch_size * self._num_nodes, output_size)

        biases = self._gconv_params.get_biases(output_size, bias_start)
        x += biases
        # Reshape res back to 2D: (batch_size, num_node, state_dim) -> (batch_size, num_node * state_dim)
        return torch.reshape(x, [batch_size, self._num_nodes * output_size])


# model/pytorch/dcrnn_model.py
def count_parameters(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class Seq2SeqAttrs:
    def __init__(self, adj_mx, **model_kwargs):
        self.adj_mx = adj_mx
        self.max_diffusion_step = int(model_kwargs.get('max_diffusion_step', 2))
        self.cl_decay_steps = int(model_kwargs.get('cl_decay_steps', 1000))
        self.filter_type = model_kwargs.get('filter_type', 'laplacian')
        self.num_nodes = int(model_kwargs.get('num_nodes', 1))
        self.num_rnn_layers = int(model_kwargs.get('num_rnn_layers', 1))
        self.rnn_units = int(model_kwargs.get('rnn_units'))
        self.hidden_state_size = self.num_nodes * self.rnn_units


class EncoderModel(nn.Module, Seq2SeqAttrs):
    def __init__(self, adj_mx, **model_kwargs):
        nn.Module.__init__(self)
        Seq2SeqAttrs.__init__(self, adj_mx, **model_kwargs)
        self.input_dim = int(model_kwargs.get('input_dim', 1))
        self.seq_len = int(model_kwargs.get('seq_len'))  # for the encoder
        self.dcgru_layers = nn.ModuleList(
            [DCGRUCell(self.rnn_units, adj_mx, self.max_diffusion_step, self.num_nodes,
                       filter_type=self.filter_type) for _ in range(self.num_rnn_layers)])

    def forward(self, inputs, hidden_state=None):
        """
        Encoder forward pass.

        :param inputs: shape (batch_size, self.num_nodes * self.input_dim)
        :param hidden_state: (num_layers, batch_size, self.hidden_state_size)
               optional, zeros if not provided
        :return: output: # shape (batch_size, self.hidden_state_size)
                 hidden_state # shape (num_layers, batch_size, self.hidden_state_size)
                 (lower indices mean lower layers)
        """
        batch_size, _ = inputs.size()
        if hidden_state is None:
            hidden_state = torch.zeros((self.num_rnn_layers, batch_size, self.hidden_state_size),
                                       device=device)
        hidden_states = []
        output = inputs
        for layer_num, dcgru_layer in enumerate(self.dcgru_layers):
            next_hidden_state = dcgru_layer(output, hidden_state[layer_num])
            hidden_states.append(next_hidden_state)
            output = next_hidden_state

        return output, torch.stack(hidden_states)  # runs in O(num_layers) so not too slow


class DecoderModel(nn.Module, Seq2SeqAttrs):
    def __init__(self, adj_mx, **model_kwargs):
        # super().__init__(is_training, adj_mx, **model_kwargs)
        nn.Module.__init__(self)
        Seq2SeqAttrs.__init__(self, adj_mx, **model_kwargs)
        self.output_dim = int(model_kwargs.get('output_dim', 1))
        self.horizon = int(model_kwargs.get('horizon', 1))  # for the decoder
        self.projection_layer = nn.Linear(self.rnn_units, self.output_dim)
        self.dcgru_layers = nn.ModuleList(
            [DCGRUCell(self.rnn_units, adj_mx, self.max_diffusion_step, self.num_nodes,
                       filter_type=self.filter_type) for _ in range(self.num_rnn_layers)])

    def forward(self, inputs, hidden_state=None):
        """
        Decoder forward pass.

        :param inputs: shape (batch_size, self.num_nodes * self.output_dim)
        :param hidden_state: (num_layers, batch_size, self.hidden_state_size)
               optional, zeros if not provided
        :return: output: # shape (batch_size, self.num_nodes * self.output_dim)
                 hidden_state # shape (num_layers, batch_size, self.hidden_state_size)
                 (lower indices mean lower layers)
        """
        hidden_states = []
        output = inputs
        for layer_num, dcgru_layer in enumerate(self.dcgru_layers):
            next_hidden_state = dcgru_layer(output, hidden_state[layer_num])
            hidden_states.append(next_hidden_state)
            output = next_hidden_state

        projected = self.projection_layer(output.view(-1, self.rnn_units))
        output = projected.view(-1, self.num_nodes * self.output_dim)

        return output, torch.stack(hidden_states)


class DCRNNModel(nn.Module, Seq2SeqAttrs):
    def __init__(self, adj_mx, logger, **model_kwargs):
        super().__init__()
        Seq2SeqAttrs.__init__(self, adj_mx, **model_kwargs)
        self.encoder_model = EncoderModel(adj_mx, **model_kwargs)
        self.decoder_model = DecoderModel(adj_mx, **model_kwargs)
        self.cl_decay_steps = int(model_kwargs.get('cl_decay_steps', 1000))
        self.use_curriculum_learning = bool(model_kwargs.get('use_curriculum_learning', False))
        self._logger = logger

    def _compute_sampling_threshold(self, batches_seen):
        return self.cl_decay_steps / (
                self.cl_decay_steps + np.exp(batches_seen / self.cl_decay_steps))

    def encoder(self, inputs):
        """
        encoder forward pass on t time steps
        :param inputs: shape (seq_len, batch_size, num_sensor * input_dim)
        :return: encoder_hidden_state: (num_layers, batch_size, self.hidden_state_size)
        """
        encoder_hidden_state = None
        for t in range(self.encoder_model.seq_len):
            _, encoder_hidden_state = self.encoder_model(inputs[t], encoder_hidden_state)

        return encoder_hidden_state

    def decoder(self, encoder_hidden_state, labels=None, batches_seen=None):
        """
        Decoder forward pass
        :param encoder_hidden_state: (num_layers, batch_size, self.hidden_state_size)
        :param labels: (self.horizon, batch_size, self.num_nodes * self.output_dim) [optional, not exist for inference]
        :param batches_seen: global step [optional, not exist for inference]
        :return: output: (self.horizon, batch_size, self.num_nodes * self.output_dim)
        """
        batch_size = encoder_hidden_state.size(1)
        go_symbol = torch.zeros((batch_size, self.num_nodes * self.decoder_model.output_dim),
                                device=device)
        decoder_hidden_state = encoder_hidden_state
        decoder_input = go_symbol

        outputs = []

        for t in range(self.decoder_model.horizon):
            decoder_output, decoder_hidden_state = self.decoder_model(decoder_input,
                                                                      decoder_hidden_state)
            decoder_input = decoder_output
            outputs.append(decoder_output)
            if self.training and self.use_curriculum_learning:
                c = np.random.uniform(0, 1)
                if c < self._compute_sampling_threshold(batches_seen):
                    decoder_input = labels[t]
        outputs = torch.stack(outputs)
        return outputs

    def forward(self, inputs, labels=None, batches_seen=None):
        """
        seq2seq forward pass
        :param inputs: shape (seq_len, batch_size, num_sensor * input_dim)
        :param labels: shape (horizon, batch_size, num_sensor * output)
        :param batches_seen: batches seen till now
        :return: output: (self.horizon, batch_size, self.num_nodes * self.output_dim)
        """
        encoder_hidden_state = self.encoder(inputs)
        self._logger.debug("Encoder complete, starting decoder")
        outputs = self.decoder(encoder_hidden_state, labels, batches_seen=batches_seen)
        self._logger.debug("Decoder complete")
        if batches_seen == 0:
            self._logger.info(
                "Total trainable parameters {}".format(count_parameters(self))
            )
        return outputs


# model/pytorch/loss.py
def masked_mae_loss(y_pred, y_true):
    mask = (y_true != 0).float()
    mask /= mask.mean()
    loss = torch.abs(y_pred - y_true)
    loss = loss * mask
    # trick for nans: https://discuss.pytorch.org/t/how-to-set-nan-in-tensor-to-0/3918/3
    loss[loss != loss] = 0
    return loss.mean()


# scripts/generate_training_data.py
def generate_graph_seq2seq_io_data(
        values, x_offsets, y_offsets, add_time_in_day=True, add_day_in_week=False, scaler=None
):
    """
    Generate samples from
    # x: (epoch_size, input_length, num_nodes, input_dim)
    # y: (epoch_size, output_length, num_nodes, output_dim)
    """
    num_samples, num_nodes = values.shape
    data = np.expand_dims(values, axis=-1)
    data_list = [data]
    if add_time_in_day:
        time_ind = (np.arange(num_samples) % 288) / 288.0  # deviation: 5-minute steps, no pandas index
        time_in_day = np.tile(time_ind, [1, num_nodes, 1]).transpose((2, 1, 0))
        data_list.append(time_in_day)
    data = np.concatenate(data_list, axis=-1)
    # epoch_len = num_samples + min(x_offsets) - max(y_offsets)
    x, y = [], []
    # t is the index of the last observation.
    min_t = abs(min(x_offsets))
    max_t = abs(num_samples - abs(max(y_offsets)))  # Exclusive
    for t in range(min_t, max_t):
        x_t = data[t + x_offsets, ...]
        y_t = data[t + y_offsets, ...]
        x.append(x_t)
        y.append(y_t)
    x = np.stack(x, axis=0)
    y = np.stack(y, axis=0)
    return x, y


def _synthetic_traffic(rng, bug=None):
    """deviation: a directed sensor graph and speeds with waves travelling downstream (stands in for METR-LA)"""
    adj = np.zeros((NUM_NODES, NUM_NODES), dtype=np.float32)
    for i in range(NUM_NODES):
        for j in rng.choice([k for k in range(NUM_NODES) if k != i], size=2, replace=False):
            adj[j, i] = np.exp(-(rng.uniform(0.2, 1.0) ** 2))  # j feeds i
    np.fill_diagonal(adj, 1.0)
    t = np.arange(N_STEPS)
    day = (t % 288) / 288.0
    phase = rng.uniform(0, 1, size=NUM_NODES)
    profile = 60 - 12 * np.exp(-((day[:, None] - 0.35 - 0.1 * phase[None]) ** 2) / 0.004)
    up = adj.copy()
    np.fill_diagonal(up, 0.0)
    up = up / up.sum(0, keepdims=True)
    wave = np.zeros((N_STEPS, NUM_NODES))
    for s in range(1, N_STEPS):
        shock = (rng.random(NUM_NODES) < 0.03) * rng.uniform(1.0, 2.0, size=NUM_NODES)
        wave[s] = 0.55 * wave[s - 1] + 0.4 * wave[s - 1] @ up + shock
    speed = profile - 8.0 * wave + rng.normal(0, 0.5, size=wave.shape)
    x_offsets = np.sort(np.arange(-(SEQ_LEN - 1), 1, 1))
    if bug == "targets_are_inputs":
        # bug: the targets cut from the input window (y offsets equal to the x offsets), not the next steps
        y_offsets = x_offsets.copy()
    else:
        y_offsets = np.sort(np.arange(1, HORIZON + 1, 1))
    x, y = generate_graph_seq2seq_io_data(speed, x_offsets, y_offsets)
    num_samples = x.shape[0]
    num_test = round(num_samples * 0.2)
    num_train = round(num_samples * 0.7)
    num_val = num_samples - num_test - num_train
    splits = {
        'train': {'x': x[:num_train], 'y': y[:num_train]},
        'val': {'x': x[num_train: num_train + num_val], 'y': y[num_train: num_train + num_val]},
        'test': {'x': x[-num_test:], 'y': y[-num_test:]},
    }
    return adj, splits


# model/pytorch/dcrnn_supervisor.py (the parts _train uses)
class DCRNNSupervisor:
    def __init__(self, adj_mx, cat_datas, bug=None, **kwargs):
        self._kwargs = kwargs
        self._data_kwargs = kwargs.get('data')
        self._model_kwargs = kwargs.get('model')
        self._train_kwargs = kwargs.get('train')
        self.bug = bug

        self.max_grad_norm = self._train_kwargs.get('max_grad_norm', 1.)

        self._logger = logging.getLogger(__name__)

        # data set
        self._data = load_dataset(cat_datas, **self._data_kwargs)
        self.standard_scaler = self._data['scaler']

        self.num_nodes = int(self._model_kwargs.get('num_nodes', 1))
        self.input_dim = int(self._model_kwargs.get('input_dim', 1))
        self.seq_len = int(self._model_kwargs.get('seq_len'))  # for the encoder
        self.output_dim = int(self._model_kwargs.get('output_dim', 1))
        self.use_curriculum_learning = bool(
            self._model_kwargs.get('use_curriculum_learning', False))
        self.horizon = int(self._model_kwargs.get('horizon', 1))  # for the decoder

        # setup model
        dcrnn_model = DCRNNModel(adj_mx, self._logger, **self._model_kwargs)
        self.dcrnn_model = dcrnn_model
        self._logger.info("Model created")
        self._epoch_num = self._train_kwargs.get('epoch', 0)

    def _setup_graph(self):
        with torch.no_grad():
            self.dcrnn_model = self.dcrnn_model.eval()

            val_iterator = self._data['val_loader'].get_iterator()

            for _, (x, y) in enumerate(val_iterator):
                x, y = self._prepare_data(x, y)
                output = self.dcrnn_model(x)
                break

    def evaluate(self, dataset='val', batches_seen=0):
        """
        Computes mean L1Loss
        :return: mean L1Loss
        """
        with torch.no_grad():
            self.dcrnn_model = self.dcrnn_model.eval()

            val_iterator = self._data['{}_loader'.format(dataset)].get_iterator()
            losses = []

            for _, (x, y) in enumerate(val_iterator):
                x, y = self._prepare_data(x, y)

                output = self.dcrnn_model(x)
                loss = self._compute_loss(y, output)
                losses.append(loss.item())

            mean_loss = np.mean(losses)
            return mean_loss

    def _prepare_data(self, x, y):
        x, y = self._get_x_y(x, y)
        x, y = self._get_x_y_in_correct_dims(x, y)
        return x.to(device), y.to(device)

    def _get_x_y(self, x, y):
        """
        :param x: shape (batch_size, seq_len, num_sensor, input_dim)
        :param y: shape (batch_size, horizon, num_sensor, input_dim)
        :returns x shape (seq_len, batch_size, num_sensor, input_dim)
                 y shape (horizon, batch_size, num_sensor, input_dim)
        """
        x = torch.from_numpy(x).float()
        y = torch.from_numpy(y).float()
        x = x.permute(1, 0, 2, 3)
        y = y.permute(1, 0, 2, 3)
        return x, y

    def _get_x_y_in_correct_dims(self, x, y):
        """
        :param x: shape (seq_len, batch_size, num_sensor, input_dim)
        :param y: shape (horizon, batch_size, num_sensor, input_dim)
        :return: x: shape (seq_len, batch_size, num_sensor * input_dim)
                 y: shape (horizon, batch_size, num_sensor * output_dim)
        """
        batch_size = x.size(1)
        x = x.view(self.seq_len, batch_size, self.num_nodes * self.input_dim)
        y = y[..., :self.output_dim].view(self.horizon, batch_size,
                                          self.num_nodes * self.output_dim)
        return x, y

    def _compute_loss(self, y_true, y_predicted):
        y_true = self.standard_scaler.inverse_transform(y_true)
        if self.bug != "prediction_left_scaled":
            y_predicted = self.standard_scaler.inverse_transform(y_predicted)
        return masked_mae_loss(y_predicted, y_true)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    adj_mx, cat_datas = _synthetic_traffic(np.random.default_rng(seed), bug)
    # data/model/dcrnn_la.yaml, sizes shrunk
    kwargs = {
        'data': {'batch_size': BATCH_SIZE, 'test_batch_size': BATCH_SIZE, 'val_batch_size': BATCH_SIZE},
        'model': {'cl_decay_steps': 2000, 'filter_type': 'dual_random_walk', 'horizon': HORIZON, 'input_dim': 2,
                  'l1_decay': 0, 'max_diffusion_step': 2, 'num_nodes': NUM_NODES, 'num_rnn_layers': 2,
                  'output_dim': 1, 'rnn_units': RNN_UNITS, 'seq_len': SEQ_LEN, 'use_curriculum_learning': True},
        'train': {'base_lr': 0.01, 'dropout': 0, 'epoch': 0, 'epochs': 100, 'epsilon': 1.0e-3, 'global_step': 0,
                  'lr_decay_ratio': 0.1, 'max_grad_norm': 5, 'max_to_keep': 100, 'min_learning_rate': 2.0e-06,
                  'optimizer': 'adam', 'patience': 50, 'steps': [20, 30, 40, 50], 'test_every_n_epochs': 10},
    }
    sup = DCRNNSupervisor(adj_mx, cat_datas, bug=bug, **kwargs)
    tk = sup._train_kwargs
    base_lr, steps, lr_decay_ratio, epsilon = tk['base_lr'], tk['steps'], tk['lr_decay_ratio'], tk['epsilon']

    if bug == "optimizer_before_lazy_params":
        # bug: the optimizer built before any forward and never rebuilt (the workaround for the dynamically
        # registered DCGRU parameters left out): it holds the projection layer only
        optimizer = torch.optim.Adam(sup.dcrnn_model.parameters(), lr=base_lr, eps=epsilon)
        sup._setup_graph()
    else:
        sup._setup_graph()  # deviation: the lazily registered parameters made before the optimizer
        optimizer = torch.optim.Adam(sup.dcrnn_model.parameters(), lr=base_lr, eps=epsilon)
    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=steps,
                                                        gamma=lr_decay_ratio)
    num_batches = sup._data['train_loader'].num_batch
    st = {'batches_seen': num_batches * sup._epoch_num, 'it': None}

    def train_step():
        if st['it'] is None:
            sup.dcrnn_model = sup.dcrnn_model.train()
            st['it'] = sup._data['train_loader'].get_iterator()
        try:
            x, y = next(st['it'])
        except StopIteration:
            lr_scheduler.step()  # epoch complete
            sup.dcrnn_model = sup.dcrnn_model.train()
            st['it'] = sup._data['train_loader'].get_iterator()
            x, y = next(st['it'])
        batches_seen = st['batches_seen']
        optimizer.zero_grad()

        x, y = sup._prepare_data(x, y)

        output = sup.dcrnn_model(x, y, batches_seen)

        loss = sup._compute_loss(y, output)

        st['batches_seen'] += 1
        loss.backward()

        # gradient clipping - this does it in place
        torch.nn.utils.clip_grad_norm_(sup.dcrnn_model.parameters(), sup.max_grad_norm)

        optimizer.step()
        return loss.item()

    def loss_fn(output, y):
        return sup._compute_loss(y, output)

    x0, y0 = next(DataLoader(cat_datas['train']['x'][:BATCH_SIZE], cat_datas['train']['y'][:BATCH_SIZE],
                             BATCH_SIZE).get_iterator())
    batch = sup._prepare_data(x0, y0)

    def eval_fn(model, _batch=None):
        out = sup.evaluate(dataset='val')
        sup.dcrnn_model.train()
        return out

    return Program(name="dcrnnpytorch_traffic", model=sup.dcrnn_model, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # the optimizer built before the DCGRU cells have registered their weights, without the rebuild after the first
    # forward: only the decoder's projection layer is ever updated (classic for lazily created parameters).
    Bug("optimizer_before_lazy_params", functools.partial(_build, bug="optimizer_before_lazy_params"),
        "four_structures", ("encoder_model.dcgru_layers",)),
    # the targets cut with the input offsets: the model is trained to reproduce its input window, not to forecast
    # (classic window-indexing slip).
    Bug("targets_are_inputs", functools.partial(_build, bug="targets_are_inputs"), "learning_ledger", ("TASK",)),
    # _compute_loss inverse-transforms the targets but not the predictions: the MAE compares standardized outputs
    # with speeds in mph (classic).
    Bug("prediction_left_scaled", functools.partial(_build, bug="prediction_left_scaled"), "learning_ledger",
        ("OBJECTIVE",)),
]
