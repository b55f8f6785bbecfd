"""Keyword spotting with FastGRNN from Microsoft's EdgeML: featurized audio (frames x filter energies) normalized by
the training set's mean and std, two stacked FastGRNN layers (``z = sigmoid(Wx + Uh + b_g)``,
``h~ = tanh(Wx + Uh + b_u)``, ``h = z h + (sigmoid(zeta)(1 - z) + sigmoid(nu)) h~``) unrolled by ``BaseRNN`` over
``[seq, batch, feature]``, a linear layer on the last hidden state, ``log_softmax`` and ``nn.NLLLoss``; SGD (Nesterov
momentum 0.9, weight decay 1e-5) with a per-iteration ``CosineAnnealingLR`` stepped before ``optimizer.step()``, as
the README's training command configures it.

Source: https://github.com/microsoft/EdgeML
Commit: 81025fce8ba28707eabe72e11bf3987a8d745608
Files: examples/pytorch/FastCells/KWS-training/train_classifier.py, training_config.py, README.md (training command),
  pytorch/edgeml_pytorch/trainer/fastmodel.py, pytorch/edgeml_pytorch/graph/rnn.py (RNNCell, FastGRNNCell, BaseRNN,
  FastGRNN)
License: MIT (Copyright (c) Microsoft Corporation; full text in LICENSES/microsoft-EdgeML.txt)
Domain: audio, keyword spotting (recurrent classifier over featurized audio)

Deviations from the original:
- sizes: window_size 98 frames -> 20, 40 filters -> 8, hidden units 128 -> 16 (2 layers as in the README command),
  batch size 128 -> 16, 4 keywords (``<null>`` and three words); learning rate 0.005, lr_min 0.0005, lr_peaks 0,
  CosineAnnealingLR, SGD and its options as the README command and ``training_config.py`` set them;
- the README command's ``--architecture FastGRNNCUDA`` (the CUDA kernel) is replaced by ``FastGRNN``, the same cell in
  plain PyTorch from the same ``rnn.py`` (the model class's own CPU path); ``--use_gpu`` and the device moves are
  dropped; the README says to drop ``--rolling`` / ``--max_rolling_length`` for one-second clips, which these are;
- data: the ELL-featurized Speech Commands ``.npz`` files are replaced by synthetic featurized clips made from
  ``seed``: noise frames, and for a keyword a band of filters raised over a stretch of frames (each keyword its own
  band and stretch), so the keyword is learnable; ``AudioDataset`` takes these arrays instead of loading a file and
  keeps its normalization, label indexing and ``__getitem__``;
- copied in part: ``KeywordSpotter`` (``init_hidden``, ``batch_accuracy``, the SGD and Adam branches of
  ``configure_optimizer``, the CosineAnnealingLR branch of ``configure_lr``, whose unused ``num_epochs`` is
  deleted), ``get_model_class`` (without the FastGRNNCUDA, sparsify, rolling, model-size and ONNX paths; the cell
  looked up by name in ``edgeml_pytorch.graph.rnn`` is the ``FastGRNN`` class here), ``RNNCell`` (without
  sparsification, model size, ``getVars`` and the properties the training path never reads), ``FastGRNNCell``
  (without ``getVars``), ``BaseRNN`` (the time-major, non-LSTM, unidirectional path) and ``FastGRNN`` (without the
  unshared bidirectional cell); ``gen_nonlinearity`` keeps the sigmoid and tanh branches the config uses;
- ``training_config.py``'s option classes are written as one ``make_config`` holding the defaults with the README
  command's overrides (num_layers 2, hidden units, learning rate, lr_min, lr_peaks, scheduler, normalize);
- ``fit``'s set-up (normalize, ``self.training = True``, loss, optimizer, scheduler, ``self.train()``) runs in
  ``build``; one ``train_step`` is one iteration of its batch loop; the per-epoch validation is ``eval_fn`` (the
  accuracy of ``evaluate`` on a given batch); printing, logging, saving and the ONNX export are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, PIE808, PIE790, TRY002, SIM102, UP032, RUF059  (the original's style is kept)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WINDOW_SIZE = 20
INPUT_SIZE = 8
KEYWORDS = ["<null>", "yes", "no", "stop"]


# ---- pytorch/edgeml_pytorch/graph/rnn.py -------------------------------------------------------------------------

def gen_nonlinearity(A, nonlinearity):
    '''
    Returns required activation for a tensor based on the inputs

    nonlinearity is either a callable or a value in
        ['tanh', 'sigmoid', 'relu', 'quantTanh', 'quantSigm', 'quantSigm4']
    '''
    if nonlinearity == "tanh":
        return torch.tanh(A)
    elif nonlinearity == "sigmoid":
        return torch.sigmoid(A)
    else:
        raise ValueError(nonlinearity)


class RNNCell(nn.Module):
    def __init__(self, input_size, hidden_size,
                 gate_nonlinearity, update_nonlinearity,
                 num_W_matrices, num_U_matrices, num_biases,
                 wRank=None, uRank=None,
                 wSparsity=1.0, uSparsity=1.0):
        super(RNNCell, self).__init__()
        self._input_size = input_size
        self._hidden_size = hidden_size
        self._gate_nonlinearity = gate_nonlinearity
        self._update_nonlinearity = update_nonlinearity
        self._num_W_matrices = num_W_matrices
        self._num_U_matrices = num_U_matrices
        self._num_biases = num_biases
        self._num_weight_matrices = [self._num_W_matrices, self._num_U_matrices,
                                     self._num_biases]
        self._wRank = wRank
        self._uRank = uRank
        self._wSparsity = wSparsity
        self._uSparsity = uSparsity
        self.oldmats = []

    @property
    def state_size(self):
        return self._hidden_size

    @property
    def input_size(self):
        return self._input_size

    @property
    def output_size(self):
        return self._hidden_size

    @property
    def gate_nonlinearity(self):
        return self._gate_nonlinearity

    @property
    def update_nonlinearity(self):
        return self._update_nonlinearity


class FastGRNNCell(RNNCell):
    '''
    FastGRNN Cell with Both Full Rank and Low Rank Formulations

    z_t = gate_nl(Wx_t + Uh_{t-1} + B_g)
    h_t^ = update_nl(Wx_t + Uh_{t-1} + B_h)
    h_t = z_t*h_{t-1} + (sigmoid(zeta)(1-z_t) + sigmoid(nu))*h_t^

    W and U can further parameterised into low rank version by
    W = matmul(W_1, W_2) and U = matmul(U_1, U_2)
    '''

    def __init__(self, input_size, hidden_size, gate_nonlinearity="sigmoid",
                 update_nonlinearity="tanh", wRank=None, uRank=None,
                 wSparsity=1.0, uSparsity=1.0, zetaInit=1.0, nuInit=-4.0,
                 name="FastGRNN"):
        super(FastGRNNCell, self).__init__(input_size, hidden_size,
                                          gate_nonlinearity, update_nonlinearity,
                                          1, 1, 2, wRank, uRank, wSparsity,
                                          uSparsity)
        self._zetaInit = zetaInit
        self._nuInit = nuInit
        if wRank is not None:
            self._num_W_matrices += 1
            self._num_weight_matrices[0] = self._num_W_matrices
        if uRank is not None:
            self._num_U_matrices += 1
            self._num_weight_matrices[1] = self._num_U_matrices
        self._name = name

        if wRank is None:
            self.W = nn.Parameter(0.1 * torch.randn([input_size, hidden_size]))
        else:
            self.W1 = nn.Parameter(0.1 * torch.randn([input_size, wRank]))
            self.W2 = nn.Parameter(0.1 * torch.randn([wRank, hidden_size]))

        if uRank is None:
            self.U = nn.Parameter(0.1 * torch.randn([hidden_size, hidden_size]))
        else:
            self.U1 = nn.Parameter(0.1 * torch.randn([hidden_size, uRank]))
            self.U2 = nn.Parameter(0.1 * torch.randn([uRank, hidden_size]))

        self.bias_gate = nn.Parameter(torch.ones([1, hidden_size]))
        self.bias_update = nn.Parameter(torch.ones([1, hidden_size]))
        self.zeta = nn.Parameter(self._zetaInit * torch.ones([1, 1]))
        self.nu = nn.Parameter(self._nuInit * torch.ones([1, 1]))

    @property
    def name(self):
        return self._name

    @property
    def cellType(self):
        return "FastGRNN"

    def forward(self, input, state):
        if self._wRank is None:
            wComp = torch.matmul(input, self.W)
        else:
            wComp = torch.matmul(
                torch.matmul(input, self.W1), self.W2)

        if self._uRank is None:
            uComp = torch.matmul(state, self.U)
        else:
            uComp = torch.matmul(
                torch.matmul(state, self.U1), self.U2)

        pre_comp = wComp + uComp
        z = gen_nonlinearity(pre_comp + self.bias_gate,
                              self._gate_nonlinearity)
        c = gen_nonlinearity(pre_comp + self.bias_update,
                              self._update_nonlinearity)
        new_h = z * state + (torch.sigmoid(self.zeta) *
                             (1.0 - z) + torch.sigmoid(self.nu)) * c

        return new_h


class BaseRNN(nn.Module):
    '''
    Generic equivalent of static_rnn in tf
    Used to unroll all the cell written in this file
    We assume batch_first to be False by default
    (following the convention in pytorch) ie.,
    [timeSteps, batchSize, inputDims] else
    [batchSize, timeSteps, inputDims]
    '''

    def __init__(self, cell: RNNCell, batch_first=False, cell_reverse: RNNCell=None, bidirectional=False):
        super(BaseRNN, self).__init__()
        self.RNNCell = cell
        self._batch_first = batch_first
        self._bidirectional = bidirectional
        if cell_reverse is not None:
            self.RNNCell_reverse = cell_reverse
        elif self._bidirectional:
            self.RNNCell_reverse = cell

    def forward(self, input, hiddenState=None,
                cellState=None):
        self.device = input.device
        self.num_directions = 2 if self._bidirectional else 1
        hiddenStates = torch.zeros(
                [input.shape[0], input.shape[1],
                 self.RNNCell.output_size]).to(self.device)

        if hiddenState is None:
                hiddenState = torch.zeros(
                    [self.num_directions, input.shape[0] if self._batch_first else input.shape[1],
                    self.RNNCell.output_size]).to(self.device)

        # time-major, non-LSTM, unidirectional path (the one the keyword spotter takes)
        for i in range(0, input.shape[0]):
            hiddenState[0] = self.RNNCell(input[i, :, :], hiddenState[0].clone())
            hiddenStates[i, :, :] = hiddenState[0]
        return hiddenStates


class FastGRNN(nn.Module):
    """Equivalent to nn.FastGRNN using FastGRNNCell"""

    def __init__(self, input_size, hidden_size, gate_nonlinearity="sigmoid",
                 update_nonlinearity="tanh", wRank=None, uRank=None,
                 wSparsity=1.0, uSparsity=1.0, zetaInit=1.0, nuInit=-4.0,
                 batch_first=False, bidirectional=False, is_shared_bidirectional=True):
        super(FastGRNN, self).__init__()
        self._bidirectional = bidirectional
        self._batch_first = batch_first
        self._is_shared_bidirectional = is_shared_bidirectional
        self.cell = FastGRNNCell(input_size, hidden_size,
                                 gate_nonlinearity=gate_nonlinearity,
                                 update_nonlinearity=update_nonlinearity,
                                 wRank=wRank, uRank=uRank,
                                 wSparsity=wSparsity, uSparsity=uSparsity,
                                 zetaInit=zetaInit, nuInit=nuInit)
        self.unrollRNN = BaseRNN(self.cell, batch_first=self._batch_first, bidirectional=self._bidirectional)

    def forward(self, input, hiddenState=None, cellState=None):
        return self.unrollRNN(input, hiddenState, cellState)


# ---- examples/pytorch/FastCells/KWS-training/train_classifier.py ------------------------------------------------

class KeywordSpotter(nn.Module):
    """ This baseclass provides the PyTorch Module pattern for defining and training keyword spotters """

    def __init__(self):
        """
        Initialize the KeywordSpotter with the following parameters:
        input_dim - the size of the input audio frame in # samples
        num_keywords - the number of predictions to come out of the model.
        """
        super(KeywordSpotter, self).__init__()

        self.training = False
        self.tracking = False

        self.init_hidden()

    def name(self):
        return "KeywordSpotter"

    def init_hidden(self):
        """ Clear any  hidden state """
        pass

    def forward(self, input):
        """ Perform the forward processing of the given input and return the prediction """
        raise Exception("need to implement the forward method")

    def batch_accuracy(self, scores, labels):
        """ Compute the training accuracy of the results of a single mini-batch """
        batch_size = scores.shape[0]
        passed = 0
        results = []
        for i in range(batch_size):
            expected = labels[i]
            actual = scores[i].argmax()
            results += [int(actual)]
            if expected == actual:
                passed += 1
        return (float(passed) * 100.0 / float(batch_size), passed, results)

    def configure_optimizer(self, options):
        initial_rate = options.learning_rate
        oo = options.optimizer_options

        if options.optimizer == "Adam":
            optimizer = optim.Adam(self.parameters(), lr=initial_rate, weight_decay=oo.weight_decay,
                                   betas=oo.betas, eps=oo.eps)
        elif options.optimizer == "SGD":
            optimizer = optim.SGD(self.parameters(), lr=initial_rate, weight_decay=oo.weight_decay,
                                  momentum=oo.momentum, dampening=oo.dampening, nesterov=oo.nesterov)
        return optimizer

    def configure_lr(self, options, optimizer, ticks, total_iterations):
        num_epochs = options.max_epochs
        learning_rate = options.learning_rate
        lr_scheduler = options.lr_scheduler
        lr_min = options.lr_min
        lr_peaks = options.lr_peaks
        if not lr_min:
            lr_min = learning_rate
        scheduler = None
        if lr_scheduler == "CosineAnnealingLR":
            # divide by odd number to finish on the minimum learning rate
            cycles = lr_peaks * 2 + 1
            scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_iterations / cycles,
                                                             eta_min=lr_min)
        del num_epochs
        return scheduler


class AudioDataset(Dataset):
    """
    Featurized Audio in PyTorch Dataset so we can get a DataLoader that is needed for
    mini-batch training.
    """

    def __init__(self, features, label_names, config, keywords, training=False):
        """ Initialize the AudioDataset from the given arrays (the original loads a *.npz file) """
        self.window_size = WINDOW_SIZE
        self.input_size = INPUT_SIZE
        self.features = features.astype(np.float32)
        self.num_rows = len(self.features)
        self.features = self.features.reshape((self.num_rows, self.window_size, self.input_size))

        if config.normalize:
            mean = self.features.mean(axis=0)
            std = self.features.std(axis=0)
            self.mean = mean.mean(axis=0).astype(np.float32)
            std = std.mean(axis=0)
            # self.std is a divisor, so make sure it contains no zeros
            self.std = np.array(np.where(std == 0, 1, std)).astype(np.float32)
        else:
            self.mean = None
            self.std = None

        self.label_names = label_names
        self.keywords = keywords
        self.num_keywords = len(self.keywords)
        self.labels = self.to_long_vector()

        self.keywords_idx = None
        self.non_keywords_idx = None

    def get_data_loader(self, batch_size):
        """ Get a DataLoader that can enumerate shuffled batches of data in this dataset """
        return DataLoader(self, batch_size=batch_size, shuffle=True, drop_last=True)

    def to_long_vector(self):
        """ convert the expected labels to a list of integer indexes into the array of keywords """
        indexer = [(0 if x == "<null>" else self.keywords.index(x)) for x in self.label_names]
        return np.array(indexer, dtype=np.longlong)

    def __len__(self):
        """ Return the number of rows in this Dataset """
        if self.non_keywords_idx is None:
            return self.num_rows
        else:
            return int(len(self.keywords_idx) / (1-self.sample_non_kw_probability))

    def __getitem__(self, idx):
        """ Return a single labelled sample here as a tuple """
        if self.non_keywords_idx is None:
            updated_idx=idx
        else:
            if idx < len(self.keywords_idx):
                updated_idx=self.keywords_idx[idx]
            else:
                updated_idx=np.random.choice(self.non_keywords_idx)
        audio = self.features[updated_idx]  # batch index is second dimension
        label = self.labels[updated_idx]
        sample = (audio, label)
        return sample


# ---- pytorch/edgeml_pytorch/trainer/fastmodel.py -----------------------------------------------------------------

def get_model_class(inheritance_class=nn.Module, bug=None):
    class RNNClassifierModel(inheritance_class):
        """This class is a PyTorch Module that implements a 1, 2 or 3 layer
           RNN-based classifier
        """

        def __init__(self, rnn_name, input_dim, num_layers, hidden_units_list,
                     wRank_list, uRank_list, wSparsity_list, uSparsity_list,
                     gate_nonlinearity, update_nonlinearity, num_classes=None,
                     linear=True, batch_first=False, apply_softmax=True):
            self.input_dim = input_dim
            self.hidden_units_list = hidden_units_list
            self.num_layers = num_layers
            self.num_classes = num_classes
            self.wRank_list = wRank_list
            self.uRank_list = uRank_list
            self.wSparsity_list = wSparsity_list
            self.uSparsity_list = uSparsity_list
            self.gate_nonlinearity = gate_nonlinearity
            self.update_nonlinearity = update_nonlinearity
            self.linear = linear
            self.batch_first = batch_first
            self.apply_softmax = apply_softmax
            self.rnn_name = rnn_name

            if self.linear:
                if not self.num_classes:
                    raise Exception("num_classes need to be specified if linear is True")

            super(RNNClassifierModel, self).__init__()

            RNN = {"FastGRNN": FastGRNN}[rnn_name]  # getattr(edgeml_pytorch.graph.rnn, rnn_name)
            self.rnn_list = nn.ModuleList([
                RNN(self.input_dim if l==0 else self.hidden_units_list[l-1],
                            self.hidden_units_list[l],
                            gate_nonlinearity=self.gate_nonlinearity,
                            update_nonlinearity=self.update_nonlinearity,
                            wRank=self.wRank_list[l], uRank=self.uRank_list[l],
                            wSparsity=self.wSparsity_list[l],
                            uSparsity=self.uSparsity_list[l],
                            batch_first = self.batch_first)
                for l in range(self.num_layers)])

            # The linear layer is a fully connected layer that maps from hidden state space
            # to number of expected keywords
            if self.linear:
                last_output_size = self.hidden_units_list[self.num_layers-1]
                self.hidden2keyword = nn.Linear(last_output_size, num_classes)
            self.init_hidden()

        def normalize(self, mean, std):
            self.mean = mean
            self.std = std

        def name(self):
            return "{} layer FastGRNN".format(self.num_layers)

        def init_hidden(self):
            """ Clear the hidden state for the GRU nodes """
            self.hidden_states = []
            for l in range(self.num_layers):
                self.hidden_states.append(None)

        def forward(self, input):
            """ Perform the forward processing of the given input and return the prediction """
            # input is shape: [seq,batch,feature]
            if self.mean is not None:
                input = (input - self.mean) / self.std

            rnn_in = input
            for l in range(self.num_layers):
                rnn = self.rnn_list[l]
                if self.hidden_states[l] is not None:
                    self.hidden_states[l] = self.hidden_states[l].clone().unsqueeze(0)
                model_output = rnn(rnn_in, hiddenState=self.hidden_states[l])
                self.hidden_states[l] = model_output.detach()[-1, :, :]
                rnn_in = model_output

            if self.linear:
                if bug == "first_frame_classified":
                    # the keyword read from the hidden state after the FIRST frame instead of the last
                    model_output = self.hidden2keyword(model_output[0, :, :])
                else:
                    model_output = self.hidden2keyword(model_output[-1, :, :])
            if self.apply_softmax and bug != "log_softmax_dropped":
                model_output = F.log_softmax(model_output, dim=1)
            return model_output
    return RNNClassifierModel


def create_model(model_config, input_size, num_keywords, bug=None):
    ModelClass = get_model_class(KeywordSpotter, bug=bug)
    hidden_units_list = [model_config.hidden_units1, model_config.hidden_units2, model_config.hidden_units3]
    wRank_list = [model_config.wRank1, model_config.wRank2, model_config.wRank3]
    uRank_list = [model_config.uRank1, model_config.uRank2, model_config.uRank3]
    wSparsity_list = [model_config.wSparsity, model_config.wSparsity, model_config.wSparsity]
    uSparsity_list = [model_config.uSparsity, model_config.uSparsity, model_config.uSparsity]
    return ModelClass(model_config.architecture, input_size, model_config.num_layers,
                      hidden_units_list, wRank_list, uRank_list, wSparsity_list,
                      uSparsity_list, model_config.gate_nonlinearity,
                      model_config.update_nonlinearity, num_keywords)


# ---- training_config.py (the defaults) with the README command's options ----------------------------------------

class _Options:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def make_config():
    model = _Options(architecture="FastGRNN", num_layers=2, hidden_units=16, hidden_units1=16, hidden_units2=16,
                     hidden_units3=None, wRank1=None, uRank1=None, wRank2=None, uRank2=None, wRank3=None,
                     uRank3=None, wSparsity=1.0, uSparsity=1.0, sparsify=False, gate_nonlinearity="sigmoid",
                     update_nonlinearity="tanh")
    dataset = _Options(normalize=True)
    optimizer_options = _Options(weight_decay=1e-5, momentum=0.9, centered=False, alpha=0, eps=1e-8, rho=0,
                                 lr_decay=0, betas=(0.9, 0.999), lambd=0.0001, t0=1000000.0, etas=(0.5, 1.2),
                                 dampening=0, step_sizes=(1e-06, 50), nesterov=True)
    training = _Options(max_epochs=250, learning_rate=0.005, lr_scheduler="CosineAnnealingLR", lr_peaks=0,
                        lr_min=0.0005, lr_gamma=1, lr_step_size=1, batch_size=16, optimizer="SGD",
                        optimizer_options=optimizer_options, use_gpu=False, rolling=False,
                        max_rolling_length=100, trim_level=15)
    return _Options(model=model, dataset=dataset, training=training)


def make_clips(rng, n):
    """Featurized clips: log-energy-like noise; a keyword raises its own band of filters over its own frames."""
    features = rng.normal(0.0, 1.0, size=(n, WINDOW_SIZE, INPUT_SIZE)).astype(np.float32)
    labels = rng.integers(0, len(KEYWORDS), size=n)
    for k in range(1, len(KEYWORDS)):
        rows = labels == k
        band = slice(2 * (k - 1), 2 * (k - 1) + 3)
        frames = slice(3 + 2 * k, 9 + 2 * k)
        features[rows, frames, band] += 2.0
    return features.reshape(n, -1), [KEYWORDS[i] for i in labels]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = make_config()
    keywords = KEYWORDS

    features, label_names = make_clips(rng, 512)
    training_data = AudioDataset(features, label_names, config.dataset, keywords, training=True)
    features, label_names = make_clips(rng, 64)
    validation_data = AudioDataset(features, label_names, config.dataset, keywords)
    validation_data.mean = training_data.mean
    validation_data.std = training_data.std

    model = create_model(config.model, training_data.input_size, training_data.num_keywords, bug=bug)

    # ---- fit(): set-up -------------------------------------------------------------------------------------
    options = config.training
    if training_data.mean is not None:
        mean = torch.from_numpy(np.array([[training_data.mean]]))
        std = torch.from_numpy(np.array([[training_data.std]]))
    else:
        mean = None
        std = None

    model.normalize(mean, std)

    model.training = True
    loss_function = nn.NLLLoss()
    optimizer = model.configure_optimizer(options)

    num_epochs = options.max_epochs
    batch_size = options.batch_size
    ticks = training_data.num_rows / batch_size  # iterations per epoch
    total_iterations = ticks * num_epochs
    scheduler = model.configure_lr(options, optimizer, ticks, total_iterations)
    model.train()

    loader = training_data.get_data_loader(batch_size)
    state = {"it": iter(loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])

    def train_step():
        audio, labels = next_batch()
        if not model.batch_first:
            audio = audio.transpose(1, 0)  # GRU wants seq,batch,feature

        model.init_hidden()

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()

        # Run our forward pass.
        keyword_scores = model(audio)

        # Compute the loss, gradients
        loss = loss_function(keyword_scores, labels)

        loss.backward()
        if bug == "zero_grad_after_backward":
            # the zero_grad moved below the backward: every step applies a cleared gradient
            optimizer.zero_grad()
        # move to next learning rate
        if scheduler:
            scheduler.step()

        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        """evaluate()'s accuracy on one batch."""
        model.eval()
        with torch.no_grad():
            audio, labels = batch
            model.init_hidden()
            keyword_scores = model(audio)
            last_accuracy, ok, actual = model.batch_accuracy(keyword_scores, labels)
        return last_accuracy

    def loss_fn(keyword_scores, labels):
        return loss_function(keyword_scores, labels)

    audio0 = torch.from_numpy(np.stack([validation_data[i][0] for i in range(batch_size)])).transpose(1, 0)
    labels0 = torch.from_numpy(np.stack([validation_data[i][1] for i in range(batch_size)]))
    return Program(name="edgeml_fastgrnn_kws", model=model, batch=(audio0, labels0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # classic: the model's log_softmax left out (apply_softmax off) while the loss stays nn.NLLLoss: the "loss" is
    # minus the raw score of the true class, unbounded below.
    Bug("log_softmax_dropped", functools.partial(_build, bug="log_softmax_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic index slip: the classifier reads model_output[0] (after the first frame) for model_output[-1].
    Bug("first_frame_classified", functools.partial(_build, bug="first_frame_classified"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: optimizer.zero_grad() between backward and step: the step applies zero gradients.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
