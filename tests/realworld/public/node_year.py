"""NODE (Neural Oblivious Decision Ensembles: a ``DenseBlock`` of ``ODST`` layers, differentiable oblivious trees
whose feature choice is an entmax-1.5 over features and whose splits are entmoid-1.5 bins against learned
thresholds and temperatures, initialised data-aware on the first 1000 training rows) trained by the repository's
``year_node_shallow`` notebook: the YEAR regression with quantile-transformed features and a standardised target, the
prediction the mean of the first response channel of every tree, ``lib.Trainer.train_on_batch`` (``F.mse_loss``,
QHAdam with nus (0.7, 1.0) and betas (0.95, 0.998)) over ``lib.iterate_minibatches`` of 512 rows.

Source: https://github.com/Qwicen/node
Commit: 3bae6a8a63f0205683270b6d566d9cfa659403e4
Files: notebooks/year_node_shallow.ipynb, lib/odst.py, lib/arch.py, lib/nn_utils.py, lib/trainer.py, lib/utils.py,
lib/data.py (+ ``QHAdam`` from https://github.com/facebookresearch/qhoptim, commit
e81dea3f2765780cf4fbb90b87b22ba7604b8625, qhoptim/pyt/qhadam.py, MIT, LICENSES/facebookresearch-qhoptim.txt)
License: MIT (Copyright (c) 2019 Sergey Popov; full text in LICENSES/Qwicen-node.txt)
Domain: tabular (differentiable oblivious decision trees, regression)

Kept as written: ``ODST`` (forward, the data-aware ``initialize``), ``DenseBlock``, ``ModuleWithInit``,
``SparsemaxFunction`` / ``sparsemax`` / ``sparsemoid``, ``Entmax15Function`` / ``entmax15``, ``Entmoid15`` /
``entmoid15`` (``torch.jit.script``-ed as written), ``Lambda``; ``Trainer.__init__`` (the optimizer over
``list(self.model.parameters())``), ``train_on_batch``, ``evaluate_mse``; ``iterate_minibatches``,
``process_in_chunks``, ``check_numpy``; ``Dataset.__init__``'s custom-data path with ``quantile_transform`` and
``quantile_noise``; the notebook's cells (target standardisation with the training mean and std, the model, the
data-aware init under ``no_grad`` on ``X_train[:1000]``, QHAdam's parameters, the loop ``for batch in
iterate_minibatches(..., batch_size=512, shuffle=True, epochs=inf): trainer.train_on_batch(...)``); ``QHAdam``
(its deprecated ``add_(scalar, tensor)`` / ``addcdiv_(scalar, ...)`` overloads as written).

Deviations from the original:
- data: YEAR (463,715 songs, 90 audio features, release year) cannot be downloaded: a synthetic regression made
  from ``seed`` with the same roles (2048 training, 512 validation, 512 test rows, 16 features, some of them
  discrete; the "year" a sum of threshold effects and one interaction of a few features plus noise, around 1998),
  passed through ``lib.Dataset``'s custom-data path (``X_train=..., y_train=...``) as the library allows;
  ``random_state`` 1337 -> ``seed``;
- sklearn is not available: ``QuantileTransformer(output_distribution='normal')`` is written out (per feature, 1000
  quantiles of the (noised) training data, the forward/backward interpolation sklearn averages, clipped and mapped
  through the normal quantile function of scipy);
- sizes: the ``DenseBlock``'s 2048 trees -> 32, depth 6 -> 4 (tree_dim 3 and one layer kept);
- the device is the CPU (``DataParallel`` is not used); tensorboardX is not installed: ``Trainer``'s
  ``SummaryWriter`` and its ``add_scalar`` are left out, and with them the experiment directory; the notebook's
  report every 100 steps (checkpoints saved, averaged and reloaded from disk, the validation MSE, plots) and the
  early stopping are left out; ``eval_fn`` is ``evaluate_mse`` on a given batch;
- one ``train_step`` is one iteration of the notebook's loop (the next minibatch, ``train_on_batch``);
- ``to_one_hot``, the checkpoint methods of ``Trainer``, the download helpers and the classification / AUC /
  log-loss evaluations (unused by this run) are left out; the ``ODST`` docstring is a raw string (its ``\\in`` is an
  invalid escape);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B006, C408, F841, PLR0402, UP008, UP032
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys
import time
from warnings import warn

import numpy as np
import scipy.stats
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function
from torch.jit import script
from torch.optim.optimizer import Optimizer

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

LAYER_DIM = 32
DEPTH = 4
#: QHAdam at the notebook's lr 1e-3 moves the tree responses slowly: the loss shows its fall after ~100 updates
SELF_CHECK_STEPS = 100

# ---- lib/nn_utils.py -------------------------------------------------------------------------------------------

def _make_ix_like(input, dim=0):
    d = input.size(dim)
    rho = torch.arange(1, d + 1, device=input.device, dtype=input.dtype)
    view = [1] * input.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


class SparsemaxFunction(Function):
    """
    An implementation of sparsemax (Martins & Astudillo, 2016). See
    :cite:`DBLP:journals/corr/MartinsA16` for detailed description.

    By Ben Peters and Vlad Niculae
    """

    @staticmethod
    def forward(ctx, input, dim=-1):
        """sparsemax: normalizing sparse transform (a la softmax)

        Parameters:
            input (Tensor): any shape
            dim: dimension along which to apply sparsemax

        Returns:
            output (Tensor): same shape as input
        """
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input -= max_val  # same numerical stability trick as for softmax
        tau, supp_size = SparsemaxFunction._threshold_and_support(input, dim=dim)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0

        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze()
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None


    @staticmethod
    def _threshold_and_support(input, dim=-1):
        """Sparsemax building block: compute the threshold

        Args:
            input: any dimension
            dim: dimension along which to apply the sparsemax

        Returns:
            the threshold value
        """

        input_srt, _ = torch.sort(input, descending=True, dim=dim)
        input_cumsum = input_srt.cumsum(dim) - 1
        rhos = _make_ix_like(input, dim)
        support = rhos * input_srt > input_cumsum

        support_size = support.sum(dim=dim).unsqueeze(dim)
        tau = input_cumsum.gather(dim, support_size - 1)
        tau /= support_size.to(input.dtype)
        return tau, support_size


sparsemax = lambda input, dim=-1: SparsemaxFunction.apply(input, dim)
sparsemoid = lambda input: (0.5 * input + 0.5).clamp_(0, 1)


class Entmax15Function(Function):
    """
    An implementation of exact Entmax with alpha=1.5 (B. Peters, V. Niculae, A. Martins). See
    :cite:`https://arxiv.org/abs/1905.05702 for detailed description.
    Source: https://github.com/deep-spin/entmax
    """

    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim

        max_val, _ = input.max(dim=dim, keepdim=True)
        input = input - max_val  # same numerical stability trick as for softmax
        input = input / 2  # divide by 2 to solve actual Entmax

        tau_star, _ = Entmax15Function._threshold_and_support(input, dim)
        output = torch.clamp(input - tau_star, min=0) ** 2
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        Y, = ctx.saved_tensors
        gppr = Y.sqrt()  # = 1 / g'' (Y)
        dX = grad_output * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        Xsrt, _ = torch.sort(input, descending=True, dim=dim)

        rho = _make_ix_like(input, dim)
        mean = Xsrt.cumsum(dim) / rho
        mean_sq = (Xsrt ** 2).cumsum(dim) / rho
        ss = rho * (mean_sq - mean ** 2)
        delta = (1 - ss) / rho

        # NOTE this is not exactly the same as in reference algo
        # Fortunately it seems the clamped values never wrongly
        # get selected by tau <= sorted_z. Prove this!
        delta_nz = torch.clamp(delta, 0)
        tau = mean - torch.sqrt(delta_nz)

        support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
        tau_star = tau.gather(dim, support_size - 1)
        return tau_star, support_size


class Entmoid15(Function):
    """ A highly optimized equivalent of labda x: Entmax15([x, 0]) """

    @staticmethod
    def forward(ctx, input):
        output = Entmoid15._forward(input)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    @script
    def _forward(input):
        input, is_pos = abs(input), input >= 0
        tau = (input + torch.sqrt(F.relu(8 - input ** 2))) / 2
        tau.masked_fill_(tau <= input, 2.0)
        y_neg = 0.25 * F.relu(tau - input, inplace=True) ** 2
        return torch.where(is_pos, 1 - y_neg, y_neg)

    @staticmethod
    def backward(ctx, grad_output):
        return Entmoid15._backward(ctx.saved_tensors[0], grad_output)

    @staticmethod
    @script
    def _backward(output, grad_output):
        gppr0, gppr1 = output.sqrt(), (1 - output).sqrt()
        grad_input = grad_output * gppr0
        q = grad_input / (gppr0 + gppr1)
        grad_input -= q * gppr0
        return grad_input


entmax15 = lambda input, dim=-1: Entmax15Function.apply(input, dim)
entmoid15 = Entmoid15.apply


class Lambda(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, *args, **kwargs):
        return self.func(*args, **kwargs)


class ModuleWithInit(nn.Module):
    """ Base class for pytorch module with data-aware initializer on first batch """
    def __init__(self):
        super().__init__()
        self._is_initialized_tensor = nn.Parameter(torch.tensor(0, dtype=torch.uint8), requires_grad=False)
        self._is_initialized_bool = None
        # Note: this module uses a separate flag self._is_initialized so as to achieve both
        # * persistence: is_initialized is saved alongside model in state_dict
        # * speed: model doesn't need to cache
        # please DO NOT use these flags in child modules

    def initialize(self, *args, **kwargs):
        """ initialize module tensors using first batch of data """
        raise NotImplementedError("Please implement ")

    def __call__(self, *args, **kwargs):
        if self._is_initialized_bool is None:
            self._is_initialized_bool = bool(self._is_initialized_tensor.item())
        if not self._is_initialized_bool:
            self.initialize(*args, **kwargs)
            self._is_initialized_tensor.data[...] = 1
            self._is_initialized_bool = True
        return super().__call__(*args, **kwargs)


# ---- lib/odst.py -----------------------------------------------------------------------------------------------

class ODST(ModuleWithInit):
    def __init__(self, in_features, num_trees, depth=6, tree_dim=1, flatten_output=True,
                 choice_function=sparsemax, bin_function=sparsemoid,
                 initialize_response_=nn.init.normal_, initialize_selection_logits_=nn.init.uniform_,
                 threshold_init_beta=1.0, threshold_init_cutoff=1.0,
                 ):
        r"""
        Oblivious Differentiable Sparsemax Trees. http://tinyurl.com/odst-readmore
        One can drop (sic!) this module anywhere instead of nn.Linear
        :param in_features: number of features in the input tensor
        :param num_trees: number of trees in this layer
        :param tree_dim: number of response channels in the response of individual tree
        :param depth: number of splits in every tree
        :param flatten_output: if False, returns [..., num_trees, tree_dim],
            by default returns [..., num_trees * tree_dim]
        :param choice_function: f(tensor, dim) -> R_simplex computes feature weights s.t. f(tensor, dim).sum(dim) == 1
        :param bin_function: f(tensor) -> R[0, 1], computes tree leaf weights

        :param initialize_response_: in-place initializer for tree output tensor
        :param initialize_selection_logits_: in-place initializer for logits that select features for the tree
        both thresholds and scales are initialized with data-aware init (or .load_state_dict)
        :param threshold_init_beta: initializes threshold to a q-th quantile of data points
            where q ~ Beta(:threshold_init_beta:, :threshold_init_beta:)
            If this param is set to 1, initial thresholds will have the same distribution as data points
            If greater than 1 (e.g. 10), thresholds will be closer to median data value
            If less than 1 (e.g. 0.1), thresholds will approach min/max data values.

        :param threshold_init_cutoff: threshold log-temperatures initializer, \in (0, inf)
            By default(1.0), log-remperatures are initialized in such a way that all bin selectors
            end up in the linear region of sparse-sigmoid. The temperatures are then scaled by this parameter.
            Setting this value > 1.0 will result in some margin between data points and sparse-sigmoid cutoff value
            Setting this value < 1.0 will cause (1 - value) part of data points to end up in flat sparse-sigmoid region
            For instance, threshold_init_cutoff = 0.9 will set 10% points equal to 0.0 or 1.0
            Setting this value > 1.0 will result in a margin between data points and sparse-sigmoid cutoff value
            All points will be between (0.5 - 0.5 / threshold_init_cutoff) and (0.5 + 0.5 / threshold_init_cutoff)
        """
        super().__init__()
        self.depth, self.num_trees, self.tree_dim, self.flatten_output = depth, num_trees, tree_dim, flatten_output
        self.choice_function, self.bin_function = choice_function, bin_function
        self.threshold_init_beta, self.threshold_init_cutoff = threshold_init_beta, threshold_init_cutoff

        self.response = nn.Parameter(torch.zeros([num_trees, tree_dim, 2 ** depth]), requires_grad=True)
        initialize_response_(self.response)

        self.feature_selection_logits = nn.Parameter(
            torch.zeros([in_features, num_trees, depth]), requires_grad=True
        )
        initialize_selection_logits_(self.feature_selection_logits)

        self.feature_thresholds = nn.Parameter(
            torch.full([num_trees, depth], float('nan'), dtype=torch.float32), requires_grad=True
        )  # nan values will be initialized on first batch (data-aware init)

        self.log_temperatures = nn.Parameter(
            torch.full([num_trees, depth], float('nan'), dtype=torch.float32), requires_grad=True
        )

        # binary codes for mapping between 1-hot vectors and bin indices
        with torch.no_grad():
            indices = torch.arange(2 ** self.depth)
            offsets = 2 ** torch.arange(self.depth)
            bin_codes = (indices.view(1, -1) // offsets.view(-1, 1) % 2).to(torch.float32)
            bin_codes_1hot = torch.stack([bin_codes, 1.0 - bin_codes], dim=-1)
            self.bin_codes_1hot = nn.Parameter(bin_codes_1hot, requires_grad=False)
            # ^-- [depth, 2 ** depth, 2]

    def forward(self, input):
        assert len(input.shape) >= 2
        if len(input.shape) > 2:
            return self.forward(input.view(-1, input.shape[-1])).view(*input.shape[:-1], -1)
        # new input shape: [batch_size, in_features]

        feature_logits = self.feature_selection_logits
        feature_selectors = self.choice_function(feature_logits, dim=0)
        # ^--[in_features, num_trees, depth]

        feature_values = torch.einsum('bi,ind->bnd', input, feature_selectors)
        # ^--[batch_size, num_trees, depth]

        threshold_logits = (feature_values - self.feature_thresholds) * torch.exp(-self.log_temperatures)

        threshold_logits = torch.stack([-threshold_logits, threshold_logits], dim=-1)
        # ^--[batch_size, num_trees, depth, 2]

        bins = self.bin_function(threshold_logits)
        # ^--[batch_size, num_trees, depth, 2], approximately binary

        bin_matches = torch.einsum('btds,dcs->btdc', bins, self.bin_codes_1hot)
        # ^--[batch_size, num_trees, depth, 2 ** depth]

        response_weights = torch.prod(bin_matches, dim=-2)
        # ^-- [batch_size, num_trees, 2 ** depth]

        response = torch.einsum('bnd,ncd->bnc', response_weights, self.response)
        # ^-- [batch_size, num_trees, tree_dim]

        return response.flatten(1, 2) if self.flatten_output else response

    def initialize(self, input, eps=1e-6):
        # data-aware initializer
        assert len(input.shape) == 2
        if input.shape[0] < 1000:
            warn("Data-aware initialization is performed on less than 1000 data points. This may cause instability."
                 "To avoid potential problems, run this model on a data batch with at least 1000 data samples."
                 "You can do so manually before training. Use with torch.no_grad() for memory efficiency.")
        with torch.no_grad():
            feature_selectors = self.choice_function(self.feature_selection_logits, dim=0)
            # ^--[in_features, num_trees, depth]

            feature_values = torch.einsum('bi,ind->bnd', input, feature_selectors)
            # ^--[batch_size, num_trees, depth]

            # initialize thresholds: sample random percentiles of data
            percentiles_q = 100 * np.random.beta(self.threshold_init_beta, self.threshold_init_beta,
                                                 size=[self.num_trees, self.depth])
            self.feature_thresholds.data[...] = torch.as_tensor(
                list(map(np.percentile, check_numpy(feature_values.flatten(1, 2).t()), percentiles_q.flatten())),
                dtype=feature_values.dtype, device=feature_values.device
            ).view(self.num_trees, self.depth)

            # init temperatures: make sure enough data points are in the linear region of sparse-sigmoid
            temperatures = np.percentile(check_numpy(abs(feature_values - self.feature_thresholds)),
                                         q=100 * min(1.0, self.threshold_init_cutoff), axis=0)

            # if threshold_init_cutoff > 1, scale everything down by it
            temperatures /= max(1.0, self.threshold_init_cutoff)
            self.log_temperatures.data[...] = torch.log(torch.as_tensor(temperatures) + eps)

    def __repr__(self):
        return "{}(in_features={}, num_trees={}, depth={}, tree_dim={}, flatten_output={})".format(
            self.__class__.__name__, self.feature_selection_logits.shape[0],
            self.num_trees, self.depth, self.tree_dim, self.flatten_output
        )


# ---- lib/arch.py -----------------------------------------------------------------------------------------------

class DenseBlock(nn.Sequential):
    def __init__(self, input_dim, layer_dim, num_layers, tree_dim=1, max_features=None,
                 input_dropout=0.0, flatten_output=True, Module=ODST, **kwargs):
        layers = []
        for i in range(num_layers):
            oddt = Module(input_dim, layer_dim, tree_dim=tree_dim, flatten_output=True, **kwargs)
            input_dim = min(input_dim + layer_dim * tree_dim, max_features or float('inf'))
            layers.append(oddt)

        super().__init__(*layers)
        self.num_layers, self.layer_dim, self.tree_dim = num_layers, layer_dim, tree_dim
        self.max_features, self.flatten_output = max_features, flatten_output
        self.input_dropout = input_dropout

    def forward(self, x):
        initial_features = x.shape[-1]
        for layer in self:
            layer_inp = x
            if self.max_features is not None:
                tail_features = min(self.max_features, layer_inp.shape[-1]) - initial_features
                if tail_features != 0:
                    layer_inp = torch.cat([layer_inp[..., :initial_features], layer_inp[..., -tail_features:]], dim=-1)
            if self.training and self.input_dropout:
                layer_inp = F.dropout(layer_inp, self.input_dropout)
            h = layer(layer_inp)
            x = torch.cat([x, h], dim=-1)

        outputs = x[..., initial_features:]
        if not self.flatten_output:
            outputs = outputs.view(*outputs.shape[:-1], self.num_layers * self.layer_dim, self.tree_dim)
        return outputs


# ---- lib/utils.py ---------------------------------------------------------------------------------------------

def iterate_minibatches(*tensors, batch_size, shuffle=True, epochs=1,
                        allow_incomplete=True, callback=lambda x:x, bug=None):
    indices = np.arange(len(tensors[0]))
    upper_bound = int((np.ceil if allow_incomplete else np.floor) (len(indices) / batch_size)) * batch_size
    epoch = 0
    while True:
        if shuffle:
            np.random.shuffle(indices)
        for batch_start in callback(range(0, upper_bound, batch_size)):
            batch_ix = indices[batch_start: batch_start + batch_size]
            if bug == "labels_sliced_by_position":
                # the inputs gathered through the shuffled indices, the targets sliced by position
                batch = [tensors[0][batch_ix], tensors[1][batch_start: batch_start + batch_size]]
            else:
                batch = [tensor[batch_ix] for tensor in tensors]
            yield batch if len(tensors) > 1 else batch[0]
        epoch += 1
        if epoch >= epochs:
            break


def process_in_chunks(function, *args, batch_size, out=None, **kwargs):
    """
    Computes output by applying batch-parallel function to large data tensor in chunks
    :param function: a function(*[x[indices, ...] for x in args]) -> out[indices, ...]
    :param args: one or many tensors, each [num_instances, ...]
    :param batch_size: maximum chunk size processed in one go
    :param out: memory buffer for out, defaults to torch.zeros of appropriate size and type
    :returns: function(data), computed in a memory-efficient way
    """
    total_size = args[0].shape[0]
    first_output = function(*[x[0: batch_size] for x in args])
    output_shape = (total_size,) + tuple(first_output.shape[1:])
    if out is None:
        out = torch.zeros(*output_shape, dtype=first_output.dtype, device=first_output.device,
                          layout=first_output.layout, **kwargs)

    out[0: batch_size] = first_output
    for i in range(batch_size, total_size, batch_size):
        batch_ix = slice(i, min(i + batch_size, total_size))
        out[batch_ix] = function(*[x[batch_ix] for x in args])
    return out


def check_numpy(x):
    """ Makes sure x is a numpy array """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    assert isinstance(x, np.ndarray)
    return x


# ---- lib/data.py ----------------------------------------------------------------------------------------------

class QuantileTransformer:
    """(port) sklearn.preprocessing.QuantileTransformer(n_quantiles=1000, output_distribution='normal')."""

    BOUNDS_THRESHOLD = 1e-7

    def __init__(self, random_state=None, output_distribution='normal', n_quantiles=1000):
        self.output_distribution = output_distribution
        self.n_quantiles = n_quantiles

    def fit(self, X):
        self.n_quantiles_ = max(1, min(self.n_quantiles, X.shape[0]))
        self.references_ = np.linspace(0, 1, self.n_quantiles_, endpoint=True)
        self.quantiles_ = np.maximum.accumulate(np.nanpercentile(X, self.references_ * 100, axis=0), axis=0)
        return self

    def transform(self, X):
        dtype = X.dtype  # sklearn keeps float32 input float32
        X = np.array(X, dtype=np.float64, copy=True)
        for j in range(X.shape[1]):
            q = self.quantiles_[:, j]
            col = 0.5 * (np.interp(X[:, j], q, self.references_)
                         - np.interp(-X[:, j], -q[::-1], -self.references_[::-1]))
            col[X[:, j] <= q[0]] = 0
            col[X[:, j] >= q[-1]] = 1
            col = scipy.stats.norm.ppf(np.clip(col, self.BOUNDS_THRESHOLD, 1 - self.BOUNDS_THRESHOLD))
            X[:, j] = col
        return X.astype(dtype)


class Dataset:

    def __init__(self, dataset, random_state, data_path='./data', normalize=False,
                 quantile_transform=False, output_distribution='normal', quantile_noise=0, **kwargs):
        np.random.seed(random_state)
        torch.manual_seed(random_state)
        random.seed(random_state)

        assert all(key in kwargs for key in ('X_train', 'y_train', 'X_valid', 'y_valid', 'X_test', 'y_test')), \
            "Unknown dataset. Provide X_train, y_train, X_valid, y_valid, X_test and y_test params"
        data_dict = kwargs  # (port) the custom-data path: DATASETS (downloads) is left out

        self.data_path = data_path
        self.dataset = dataset

        self.X_train = data_dict['X_train']
        self.y_train = data_dict['y_train']
        self.X_valid = data_dict['X_valid']
        self.y_valid = data_dict['y_valid']
        self.X_test = data_dict['X_test']
        self.y_test = data_dict['y_test']

        if normalize:
            mean = np.mean(self.X_train, axis=0)
            std = np.std(self.X_train, axis=0)
            self.X_train = (self.X_train - mean) / std
            self.X_valid = (self.X_valid - mean) / std
            self.X_test = (self.X_test - mean) / std

        if quantile_transform:
            quantile_train = np.copy(self.X_train)
            if quantile_noise:
                stds = np.std(quantile_train, axis=0, keepdims=True)
                noise_std = quantile_noise / np.maximum(stds, quantile_noise)
                quantile_train += noise_std * np.random.randn(*quantile_train.shape)

            qt = QuantileTransformer(random_state=random_state, output_distribution=output_distribution).fit(quantile_train)
            self.X_train = qt.transform(self.X_train)
            self.X_valid = qt.transform(self.X_valid)
            self.X_test = qt.transform(self.X_test)


def make_year_like(seed, n_train=2048, n_valid=512, n_test=512, n_features=16):
    """(port) the synthetic YEAR stand-in: float32 features (every 4th discrete), a "release year" target."""
    rng = np.random.RandomState(seed)
    n = n_train + n_valid + n_test
    X = rng.randn(n, n_features)
    X[:, ::4] = rng.randint(0, 5, size=(n, len(range(0, n_features, 4))))
    w = rng.uniform(2, 5, size=4)
    y = (1998 + w[0] * (X[:, 1] > 0.3) - w[1] * (X[:, 2] > -0.5) + w[2] * (X[:, 4] >= 2)
         + w[3] * (X[:, 5] > 0) * (X[:, 6] > 0) + 1.5 * np.tanh(X[:, 7]) + 0.5 * rng.randn(n))
    X, y = X.astype(np.float32), y.astype(np.float32)
    a, b = n_train, n_train + n_valid
    return dict(X_train=X[:a], y_train=y[:a], X_valid=X[a:b], y_valid=y[a:b], X_test=X[b:], y_test=y[b:])


# ---- qhoptim/pyt/qhadam.py (facebookresearch/qhoptim) ---------------------------------------------------------

class QHAdam(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        nus=(1.0, 1.0),
        weight_decay=0.0,
        decouple_weight_decay=False,
        eps=1e-8,
    ):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))

        defaults = {
            "lr": lr,
            "betas": betas,
            "nus": nus,
            "weight_decay": weight_decay,
            "decouple_weight_decay": decouple_weight_decay,
            "eps": eps,
        }
        super(QHAdam, self).__init__(params, defaults)

    def step(self, closure=None):
        """Performs a single optimization step.

        Args:
            closure (callable, optional):
                A closure that reevaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            nu1, nu2 = group["nus"]
            weight_decay = group["weight_decay"]
            decouple_weight_decay = group["decouple_weight_decay"]
            eps = group["eps"]

            for p in group["params"]:
                if p.grad is None:
                    continue

                d_p = p.grad.data
                if d_p.is_sparse:
                    raise RuntimeError("QHAdam does not support sparse gradients")

                param_state = self.state[p]

                if weight_decay != 0:
                    if decouple_weight_decay:
                        p.data.mul_(1 - lr * weight_decay)
                    else:
                        d_p.add_(weight_decay, p.data)

                d_p_sq = d_p.mul(d_p)

                if len(param_state) == 0:
                    param_state["beta1_weight"] = 0.0
                    param_state["beta2_weight"] = 0.0
                    param_state["exp_avg"] = torch.zeros_like(p.data)
                    param_state["exp_avg_sq"] = torch.zeros_like(p.data)

                param_state["beta1_weight"] = 1.0 + beta1 * param_state["beta1_weight"]
                param_state["beta2_weight"] = 1.0 + beta2 * param_state["beta2_weight"]

                beta1_weight = param_state["beta1_weight"]
                beta2_weight = param_state["beta2_weight"]
                exp_avg = param_state["exp_avg"]
                exp_avg_sq = param_state["exp_avg_sq"]

                beta1_adj = 1.0 - (1.0 / beta1_weight)
                beta2_adj = 1.0 - (1.0 / beta2_weight)
                exp_avg.mul_(beta1_adj).add_(1.0 - beta1_adj, d_p)
                exp_avg_sq.mul_(beta2_adj).add_(1.0 - beta2_adj, d_p_sq)

                avg_grad = exp_avg.mul(nu1)
                if nu1 != 1.0:
                    avg_grad.add_(1.0 - nu1, d_p)

                avg_grad_rms = exp_avg_sq.mul(nu2)
                if nu2 != 1.0:
                    avg_grad_rms.add_(1.0 - nu2, d_p_sq)
                avg_grad_rms.sqrt_()
                if eps != 0.0:
                    avg_grad_rms.add_(eps)

                p.data.addcdiv_(-lr, avg_grad, avg_grad_rms)

        return loss


# ---- lib/trainer.py -------------------------------------------------------------------------------------------

class Trainer(nn.Module):
    def __init__(self, model, loss_function, experiment_name=None, warm_start=False,
                 Optimizer=torch.optim.Adam, optimizer_params={}, verbose=False,
                 n_last_checkpoints=1, **kwargs):
        """
        :type model: torch.nn.Module
        :param loss_function: the metric to use in trainnig
        :param experiment_name: a path where all logs and checkpoints are saved
        :param warm_start: when set to True, loads last checpoint
        :param Optimizer: function(parameters) -> optimizer
        :param verbose: when set to True, produces logging information
        """
        super().__init__()
        self.model = model
        self.loss_function = loss_function
        self.verbose = verbose
        self.opt = Optimizer(list(self.model.parameters()), **optimizer_params)
        self.step = 0
        self.n_last_checkpoints = n_last_checkpoints

    def train_on_batch(self, *batch, device):
        x_batch, y_batch = batch
        x_batch = torch.as_tensor(x_batch, device=device)
        y_batch = torch.as_tensor(y_batch, device=device)

        self.model.train()
        self.opt.zero_grad()
        loss = self.loss_function(self.model(x_batch), y_batch).mean()
        loss.backward()
        self.opt.step()
        self.step += 1

        return {'loss': loss}

    def evaluate_mse(self, X_test, y_test, device, batch_size=4096):
        X_test = torch.as_tensor(X_test, device=device)
        y_test = check_numpy(y_test)
        self.model.train(False)
        with torch.no_grad():
            prediction = process_in_chunks(self.model, X_test, batch_size=batch_size)
            prediction = check_numpy(prediction)
            error_rate = ((y_test - prediction) ** 2).mean()
        return error_rate


# ---- notebooks/year_node_shallow.ipynb ------------------------------------------------------------------------

def _build(seed, bug=None):
    device = 'cpu'

    experiment_name = 'year_node_shallow'
    experiment_name = '{}_{}.{:0>2d}.{:0>2d}_{:0>2d}:{:0>2d}'.format(experiment_name, *time.gmtime()[:5])

    data = Dataset("YEAR", random_state=seed, quantile_transform=True, quantile_noise=1e-3, **make_year_like(seed))
    in_features = data.X_train.shape[1]

    mu, std = data.y_train.mean(), data.y_train.std()
    normalize = lambda x: ((x - mu) / std).astype(np.float32)
    data.y_train, data.y_valid, data.y_test = map(normalize, [data.y_train, data.y_valid, data.y_test])

    if bug == "output_keepdim_broadcast":
        # the tree average kept as a column [batch, 1] against targets [batch]: F.mse_loss broadcasts to
        # [batch, batch] and every prediction is pulled towards every target of the batch
        head = Lambda(lambda x: x[..., 0].mean(dim=-1, keepdim=True))
    else:
        head = Lambda(lambda x: x[..., 0].mean(dim=-1))  # average first channels of every tree
    model = nn.Sequential(
        DenseBlock(in_features, LAYER_DIM, num_layers=1, tree_dim=3, depth=DEPTH, flatten_output=False,
                   choice_function=entmax15, bin_function=entmoid15),
        head,

    ).to(device)

    with torch.no_grad():
        res = model(torch.as_tensor(data.X_train[:1000], device=device))
        # trigger data-aware init

    optimizer_params = { 'nus':(0.7, 1.0), 'betas':(0.95, 0.998) }

    trainer = Trainer(
        model=model, loss_function=F.mse_loss,
        experiment_name=experiment_name,
        warm_start=False,
        Optimizer=QHAdam,
        optimizer_params=optimizer_params,
        verbose=True,
        n_last_checkpoints=5
    )

    batches = iterate_minibatches(data.X_train, data.y_train, batch_size=512,
                                  shuffle=True, epochs=float('inf'), bug=bug)
    loss_history = []

    def train_step():
        batch = next(batches)
        metrics = trainer.train_on_batch(*batch, device=device)

        loss_history.append(metrics['loss'])
        return metrics['loss'].detach()

    def eval_fn(model, batch):
        x, y = batch
        return float(trainer.evaluate_mse(x, y, device=device, batch_size=1024))

    x0, y0 = next(iterate_minibatches(data.X_train, data.y_train, batch_size=512, shuffle=True, bug=bug))
    batch = (torch.as_tensor(x0), torch.as_tensor(y0))
    return Program(name="node_year", model=model, batch=batch, loss_fn=lambda out, y: F.mse_loss(out, y).mean(),
                   optimizer=trainer.opt, train_step=train_step, eval_fn=eval_fn, task="regression")


build = functools.partial(_build, bug=None)

BUGS = [
    # the notebook's loop over a hand-written loader that gathers the inputs through the shuffled indices but slices
    # the targets by position: every row is paired with another row's target (classic).
    Bug("labels_sliced_by_position", functools.partial(_build, bug="labels_sliced_by_position"), "learning_ledger",
        ("TASK",)),
    # ``mean(dim=-1, keepdim=True)`` in the head: predictions [B, 1] against targets [B] broadcast inside F.mse_loss
    # to a [B, B] loss (classic shape slip; torch only warns).
    Bug("output_keepdim_broadcast", functools.partial(_build, bug="output_keepdim_broadcast"), "learning_ledger",
        ("OBJECTIVE",)),
]
