"""DeepFM click-through-rate model of shenweichen/DeepCTR-Torch trained by the library's Keras-like ``BaseModel.fit``,
as ``examples/run_classification_criteo.py`` drives it: sparse fields (``SparseFeat``, embedding_dim 4) and dense
fields (``DenseFeat``) packed into one float matrix by ``build_input_features``, a ``Linear`` part (1-d embeddings
and a dense weight), the ``FM`` second-order term and a ``DNN`` over the concatenated embeddings and dense values,
summed into one logit, ``PredictionLayer`` (bias, sigmoid); ``compile("adagrad", "binary_crossentropy")``; every
batch: forward, ``zero_grad``, ``binary_cross_entropy(reduction='sum')`` + the L2 regularization of the embeddings
and linear part (``get_regularization_loss``) + ``aux_loss``, backward, step.

Source: https://github.com/shenweichen/DeepCTR-Torch
Commit: f6854257b1fc29caab655ce72c6b5528b7432574
Files: deepctr_torch/models/deepfm.py, deepctr_torch/models/basemodel.py, deepctr_torch/inputs.py,
       deepctr_torch/layers/core.py, deepctr_torch/layers/interaction.py, deepctr_torch/layers/activation.py,
       deepctr_torch/layers/utils.py, examples/run_classification_criteo.py
License: Apache-2.0 (full text in LICENSES/shenweichen-DeepCTR-Torch.txt)
Domain: recommendation / CTR prediction (DeepFM, sparse + dense features)

Deviations from the original:
- sizes: 26 sparse + 13 dense Criteo fields -> 6 sparse fields (vocabularies 8-16) + 3 dense fields;
  dnn_hidden_units (256, 128) -> (32, 16); batch_size 32, embedding_dim 4, init_std, l2 and Adagrad (lr 0.01)
  unchanged;
- data: criteo_sample.txt (LabelEncoder / MinMaxScaler from sklearn, pandas) is replaced by synthetic click data
  made from ``seed``: label-encoded categories and [0, 1] dense values drawn directly, and the click is 1 when a
  fixed score (a per-category effect for each sparse field, two pairwise interactions and a dense weighting) is
  positive, so clicks are predictable from the features;
- only what the DeepFM path uses is kept: varlen sequence features (``SequencePoolingLayer``), ``Dice``, the
  multi-GPU ``DataParallel`` branch, the Keras ``CallbackList`` / ``History`` (TensorFlow), tqdm and printing are
  left out; ``varlen_embedding_lookup`` / ``get_varlen_pooling_list`` are called with no varlen columns and return
  empty results, so they are dropped from the forward;
- one ``train_step`` is one batch of ``fit``'s inner loop (the DataLoader is iterated epoch after epoch as ``fit``
  does); ``eval_fn`` is ``evaluate`` with the "auc" metric (sklearn's ``roc_auc_score`` written out in numpy) on a
  held-out split, as ``validation_split`` would;
- declared evidence: ``loss_fn`` is fit's total loss for a batch (``loss_func(y_pred.squeeze(), y.squeeze(),
  reduction='sum')`` + regularization + aux loss);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C417, PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as Data
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ROWS, N_VAL, BATCH_SIZE = 1024, 256, 32
VOCABS = (8, 10, 12, 14, 16, 9)
N_DENSE = 3

DEFAULT_GROUP_NAME = "default_group"


# ---- deepctr_torch/inputs.py ---------------------------------------------------------------------------------

class SparseFeat(namedtuple('SparseFeat',
                            ['name', 'vocabulary_size', 'embedding_dim', 'use_hash', 'dtype', 'embedding_name',
                             'group_name'])):
    __slots__ = ()

    def __new__(cls, name, vocabulary_size, embedding_dim=4, use_hash=False, dtype="int32", embedding_name=None,
                group_name=DEFAULT_GROUP_NAME):
        if embedding_name is None:
            embedding_name = name
        if embedding_dim == "auto":
            embedding_dim = 6 * int(pow(vocabulary_size, 0.25))
        return super(SparseFeat, cls).__new__(cls, name, vocabulary_size, embedding_dim, use_hash, dtype,
                                              embedding_name, group_name)

    def __hash__(self):
        return self.name.__hash__()


class DenseFeat(namedtuple('DenseFeat', ['name', 'dimension', 'dtype'])):
    __slots__ = ()

    def __new__(cls, name, dimension=1, dtype="float32"):
        return super(DenseFeat, cls).__new__(cls, name, dimension, dtype)

    def __hash__(self):
        return self.name.__hash__()


def get_feature_names(feature_columns):
    features = build_input_features(feature_columns)
    return list(features.keys())


def build_input_features(feature_columns):
    # Return OrderedDict: {feature_name:(start, start+dimension)}

    features = OrderedDict()

    start = 0
    for feat in feature_columns:
        feat_name = feat.name
        if feat_name in features:
            continue
        if isinstance(feat, SparseFeat):
            features[feat_name] = (start, start + 1)
            start += 1
        elif isinstance(feat, DenseFeat):
            features[feat_name] = (start, start + feat.dimension)
            start += feat.dimension
        else:
            raise TypeError("Invalid feature column type,got", type(feat))
    return features


def concat_fun(inputs, axis=-1):
    if len(inputs) == 1:
        return inputs[0]
    else:
        return torch.cat(inputs, dim=axis)


def combined_dnn_input(sparse_embedding_list, dense_value_list):
    if len(sparse_embedding_list) > 0 and len(dense_value_list) > 0:
        sparse_dnn_input = torch.flatten(
            torch.cat(sparse_embedding_list, dim=-1), start_dim=1)
        dense_dnn_input = torch.flatten(
            torch.cat(dense_value_list, dim=-1), start_dim=1)
        return concat_fun([sparse_dnn_input, dense_dnn_input])
    elif len(sparse_embedding_list) > 0:
        return torch.flatten(torch.cat(sparse_embedding_list, dim=-1), start_dim=1)
    elif len(dense_value_list) > 0:
        return torch.flatten(torch.cat(dense_value_list, dim=-1), start_dim=1)
    else:
        raise NotImplementedError


def create_embedding_matrix(feature_columns, init_std=0.0001, linear=False, sparse=False, device='cpu'):
    # Return nn.ModuleDict: for sparse features, {embedding_name: nn.Embedding}
    sparse_feature_columns = list(
        filter(lambda x: isinstance(x, SparseFeat), feature_columns)) if len(feature_columns) else []

    embedding_dict = nn.ModuleDict(
        {feat.embedding_name: nn.Embedding(feat.vocabulary_size, feat.embedding_dim if not linear else 1, sparse=sparse)
         for feat in
         sparse_feature_columns}
    )

    for tensor in embedding_dict.values():
        nn.init.normal_(tensor.weight, mean=0, std=init_std)

    return embedding_dict.to(device)


# ---- deepctr_torch/layers/activation.py, core.py, interaction.py ---------------------------------------------

class Identity(nn.Module):

    def __init__(self, **kwargs):
        super(Identity, self).__init__()

    def forward(self, inputs):
        return inputs


def activation_layer(act_name, hidden_size=None, dice_dim=2):
    if isinstance(act_name, str):
        if act_name.lower() == 'sigmoid':
            act_layer = nn.Sigmoid()
        elif act_name.lower() == 'linear':
            act_layer = Identity()
        elif act_name.lower() == 'relu':
            act_layer = nn.ReLU(inplace=True)
        elif act_name.lower() == 'prelu':
            act_layer = nn.PReLU()
    elif issubclass(act_name, nn.Module):
        act_layer = act_name()
    else:
        raise NotImplementedError

    return act_layer


class DNN(nn.Module):
    """The Multi Layer Percetron"""

    def __init__(self, inputs_dim, hidden_units, activation='relu', l2_reg=0, dropout_rate=0, use_bn=False,
                 init_std=0.0001, dice_dim=3, seed=1024, device='cpu'):
        super(DNN, self).__init__()
        self.dropout_rate = dropout_rate
        self.dropout = nn.Dropout(dropout_rate)
        self.seed = seed
        self.l2_reg = l2_reg
        self.use_bn = use_bn
        if len(hidden_units) == 0:
            raise ValueError("hidden_units is empty!!")
        hidden_units = [inputs_dim] + list(hidden_units)

        self.linears = nn.ModuleList(
            [nn.Linear(hidden_units[i], hidden_units[i + 1]) for i in range(len(hidden_units) - 1)])

        if self.use_bn:
            self.bn = nn.ModuleList(
                [nn.BatchNorm1d(hidden_units[i + 1]) for i in range(len(hidden_units) - 1)])

        self.activation_layers = nn.ModuleList(
            [activation_layer(activation, hidden_units[i + 1], dice_dim) for i in range(len(hidden_units) - 1)])

        for name, tensor in self.linears.named_parameters():
            if 'weight' in name:
                nn.init.normal_(tensor, mean=0, std=init_std)

        self.to(device)

    def forward(self, inputs):
        deep_input = inputs

        for i in range(len(self.linears)):

            fc = self.linears[i](deep_input)

            if self.use_bn:
                fc = self.bn[i](fc)

            fc = self.activation_layers[i](fc)

            fc = self.dropout(fc)
            deep_input = fc
        return deep_input


class PredictionLayer(nn.Module):
    """
      Arguments
         - **task**: str, ``"binary"`` for  binary logloss or  ``"regression"`` for regression loss
         - **use_bias**: bool.Whether add bias term or not.
    """

    def __init__(self, task='binary', use_bias=True, **kwargs):
        if task not in ["binary", "multiclass", "regression"]:
            raise ValueError("task must be binary,multiclass or regression")

        super(PredictionLayer, self).__init__()
        self.use_bias = use_bias
        self.task = task
        if self.use_bias:
            self.bias = nn.Parameter(torch.zeros((1,)))

    def forward(self, X):
        output = X
        if self.use_bias:
            output += self.bias
        if self.task == "binary":
            output = torch.sigmoid(output)
        return output


class FM(nn.Module):
    """Factorization Machine models pairwise (order-2) feature interactions
     without linear term and bias.
    """

    def __init__(self):
        super(FM, self).__init__()

    def forward(self, inputs):
        fm_input = inputs

        square_of_sum = torch.pow(torch.sum(fm_input, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(fm_input * fm_input, dim=1, keepdim=True)
        cross_term = square_of_sum - sum_of_square
        cross_term = 0.5 * torch.sum(cross_term, dim=2, keepdim=False)

        return cross_term


# ---- deepctr_torch/models/basemodel.py -----------------------------------------------------------------------

class Linear(nn.Module):
    def __init__(self, feature_columns, feature_index, init_std=0.0001, device='cpu'):
        super(Linear, self).__init__()
        self.feature_index = feature_index
        self.device = device
        self.sparse_feature_columns = list(
            filter(lambda x: isinstance(x, SparseFeat), feature_columns)) if len(feature_columns) else []
        self.dense_feature_columns = list(
            filter(lambda x: isinstance(x, DenseFeat), feature_columns)) if len(feature_columns) else []

        self.embedding_dict = create_embedding_matrix(feature_columns, init_std, linear=True, sparse=False,
                                                      device=device)

        for tensor in self.embedding_dict.values():
            nn.init.normal_(tensor.weight, mean=0, std=init_std)

        if len(self.dense_feature_columns) > 0:
            self.weight = nn.Parameter(torch.Tensor(sum(fc.dimension for fc in self.dense_feature_columns), 1).to(
                device))
            torch.nn.init.normal_(self.weight, mean=0, std=init_std)

    def forward(self, X, sparse_feat_refine_weight=None):

        sparse_embedding_list = [self.embedding_dict[feat.embedding_name](
            X[:, self.feature_index[feat.name][0]:self.feature_index[feat.name][1]].long()) for
            feat in self.sparse_feature_columns]

        dense_value_list = [X[:, self.feature_index[feat.name][0]:self.feature_index[feat.name][1]] for feat in
                            self.dense_feature_columns]

        linear_logit = torch.zeros([X.shape[0], 1]).to(self.device)
        if len(sparse_embedding_list) > 0:
            sparse_embedding_cat = torch.cat(sparse_embedding_list, dim=-1)
            if sparse_feat_refine_weight is not None:
                # w_{x,i}=m_{x,i} * w_i (in IFM and DIFM)
                sparse_embedding_cat = sparse_embedding_cat * sparse_feat_refine_weight.unsqueeze(1)
            sparse_feat_logit = torch.sum(sparse_embedding_cat, dim=-1, keepdim=False)
            linear_logit += sparse_feat_logit
        if len(dense_value_list) > 0:
            dense_value_logit = torch.cat(
                dense_value_list, dim=-1).matmul(self.weight)
            linear_logit += dense_value_logit

        return linear_logit


class BaseModel(nn.Module):
    def __init__(self, linear_feature_columns, dnn_feature_columns, l2_reg_linear=1e-5, l2_reg_embedding=1e-5,
                 init_std=0.0001, seed=1024, task='binary', device='cpu', gpus=None):

        super(BaseModel, self).__init__()
        torch.manual_seed(seed)
        self.dnn_feature_columns = dnn_feature_columns

        self.reg_loss = torch.zeros((1,), device=device)
        self.aux_loss = torch.zeros((1,), device=device)
        self.device = device
        self.gpus = gpus

        self.feature_index = build_input_features(
            linear_feature_columns + dnn_feature_columns)
        self.dnn_feature_columns = dnn_feature_columns

        self.embedding_dict = create_embedding_matrix(dnn_feature_columns, init_std, sparse=False, device=device)

        self.linear_model = Linear(
            linear_feature_columns, self.feature_index, device=device)

        self.regularization_weight = []

        self.add_regularization_weight(self.embedding_dict.parameters(), l2=l2_reg_embedding)
        self.add_regularization_weight(self.linear_model.parameters(), l2=l2_reg_linear)

        self.out = PredictionLayer(task, )
        self.to(device)

    def _fit_batches(self, x=None, y=None, batch_size=None, shuffle=True, bug=None):
        """``fit`` up to its training loop, then the loop body, one batch per ``next()`` (epoch after epoch)."""
        if isinstance(x, dict):
            x = [x[feature] for feature in self.feature_index]

        for i in range(len(x)):
            if len(x[i].shape) == 1:
                x[i] = np.expand_dims(x[i], axis=1)

        train_tensor_data = Data.TensorDataset(
            torch.from_numpy(
                np.concatenate(x, axis=-1)),
            torch.from_numpy(y))
        if batch_size is None:
            batch_size = 256

        model = self.train()
        loss_func = self.loss_func
        optim = self.optim

        train_loader = DataLoader(
            dataset=train_tensor_data, shuffle=shuffle, batch_size=batch_size)
        self.train_loader = train_loader

        if bug == "reg_loss_frozen":
            # the regularization computed once, from the initial parameters (DeepCTR-Torch before v0.2.2, #131)
            frozen_reg_loss = self.get_regularization_loss().detach()

        # Train
        while True:
            for _, (x_train, y_train) in enumerate(train_loader):
                x = x_train.to(self.device).float()
                y = y_train.to(self.device).float()

                y_pred = model(x).squeeze()

                optim.zero_grad()
                loss = loss_func(y_pred, y.squeeze(), reduction='sum')
                if bug == "reg_loss_frozen":
                    reg_loss = frozen_reg_loss
                else:
                    reg_loss = self.get_regularization_loss()

                total_loss = loss + reg_loss + self.aux_loss

                total_loss.backward()
                if bug == "zero_grad_before_step":
                    optim.zero_grad()
                optim.step()
                yield total_loss.detach()

    def predict(self, x, batch_size=256):
        model = self.eval()
        if isinstance(x, dict):
            x = [x[feature] for feature in self.feature_index]
        for i in range(len(x)):
            if len(x[i].shape) == 1:
                x[i] = np.expand_dims(x[i], axis=1)

        tensor_data = Data.TensorDataset(
            torch.from_numpy(np.concatenate(x, axis=-1)))
        test_loader = DataLoader(
            dataset=tensor_data, shuffle=False, batch_size=batch_size)

        pred_ans = []
        with torch.no_grad():
            for _, x_test in enumerate(test_loader):
                x = x_test[0].to(self.device).float()

                y_pred = model(x).cpu().data.numpy()  # .squeeze()
                pred_ans.append(y_pred)

        return np.concatenate(pred_ans).astype("float64")

    def input_from_feature_columns(self, X, feature_columns, embedding_dict, support_dense=True):

        sparse_feature_columns = list(
            filter(lambda x: isinstance(x, SparseFeat), feature_columns)) if len(feature_columns) else []
        dense_feature_columns = list(
            filter(lambda x: isinstance(x, DenseFeat), feature_columns)) if len(feature_columns) else []

        if not support_dense and len(dense_feature_columns) > 0:
            raise ValueError(
                "DenseFeat is not supported in dnn_feature_columns")

        sparse_embedding_list = [embedding_dict[feat.embedding_name](
            X[:, self.feature_index[feat.name][0]:self.feature_index[feat.name][1]].long()) for
            feat in sparse_feature_columns]

        dense_value_list = [X[:, self.feature_index[feat.name][0]:self.feature_index[feat.name][1]] for feat in
                            dense_feature_columns]

        return sparse_embedding_list, dense_value_list

    def compute_input_dim(self, feature_columns, include_sparse=True, include_dense=True, feature_group=False):
        sparse_feature_columns = list(
            filter(lambda x: isinstance(x, SparseFeat), feature_columns)) if len(
            feature_columns) else []
        dense_feature_columns = list(
            filter(lambda x: isinstance(x, DenseFeat), feature_columns)) if len(feature_columns) else []

        dense_input_dim = sum(
            map(lambda x: x.dimension, dense_feature_columns))
        if feature_group:
            sparse_input_dim = len(sparse_feature_columns)
        else:
            sparse_input_dim = sum(feat.embedding_dim for feat in sparse_feature_columns)
        input_dim = 0
        if include_sparse:
            input_dim += sparse_input_dim
        if include_dense:
            input_dim += dense_input_dim
        return input_dim

    def add_regularization_weight(self, weight_list, l1=0.0, l2=0.0):
        # For a Parameter, put it in a list to keep Compatible with get_regularization_loss()
        if isinstance(weight_list, torch.nn.parameter.Parameter):
            weight_list = [weight_list]
        # For generators, filters and ParameterLists, convert them to a list of tensors to avoid bugs.
        # e.g., we can't pickle generator objects when we save the model.
        else:
            weight_list = list(weight_list)
        self.regularization_weight.append((weight_list, l1, l2))

    def get_regularization_loss(self, ):
        total_reg_loss = torch.zeros((1,), device=self.device)
        for weight_list, l1, l2 in self.regularization_weight:
            for w in weight_list:
                if isinstance(w, tuple):
                    parameter = w[1]  # named_parameters
                else:
                    parameter = w
                if l1 > 0:
                    total_reg_loss += torch.sum(l1 * torch.abs(parameter))
                if l2 > 0:
                    try:
                        total_reg_loss += torch.sum(l2 * torch.square(parameter))
                    except AttributeError:
                        total_reg_loss += torch.sum(l2 * parameter * parameter)

        return total_reg_loss

    def compile(self, optimizer,
                loss=None,
                metrics=None,
                ):
        self.metrics_names = ["loss"]
        self.optim = self._get_optim(optimizer)
        self.loss_func = self._get_loss_func(loss)
        self.metrics = self._get_metrics(metrics)

    def _get_optim(self, optimizer):
        if isinstance(optimizer, str):
            if optimizer == "sgd":
                optim = torch.optim.SGD(self.parameters(), lr=0.01)
            elif optimizer == "adam":
                optim = torch.optim.Adam(self.parameters())  # 0.001
            elif optimizer == "adagrad":
                optim = torch.optim.Adagrad(self.parameters())  # 0.01
            elif optimizer == "rmsprop":
                optim = torch.optim.RMSprop(self.parameters())
            else:
                raise NotImplementedError
        else:
            optim = optimizer
        return optim

    def _get_loss_func(self, loss):
        if isinstance(loss, str):
            loss_func = self._get_loss_func_single(loss)
        elif isinstance(loss, list):
            loss_func = [self._get_loss_func_single(loss_single) for loss_single in loss]
        else:
            loss_func = loss
        return loss_func

    def _get_loss_func_single(self, loss):
        if loss == "binary_crossentropy":
            loss_func = F.binary_cross_entropy
        elif loss == "mse":
            loss_func = F.mse_loss
        elif loss == "mae":
            loss_func = F.l1_loss
        else:
            raise NotImplementedError
        return loss_func

    def _get_metrics(self, metrics, set_eps=False):
        metrics_ = {}
        if metrics:
            for metric in metrics:
                if metric == "auc":
                    metrics_[metric] = roc_auc_score
                self.metrics_names.append(metric)
        return metrics_


def roc_auc_score(y_true, y_score):
    """sklearn.metrics.roc_auc_score for binary labels, written out (ties count one half)."""
    y_true, y_score = np.asarray(y_true).ravel(), np.asarray(y_score).ravel()
    pos, neg = y_score[y_true == 1], y_score[y_true == 0]
    return float(((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean())


# ---- deepctr_torch/models/deepfm.py --------------------------------------------------------------------------

class DeepFM(BaseModel):
    """Instantiates the DeepFM Network architecture."""

    def __init__(self,
                 linear_feature_columns, dnn_feature_columns, use_fm=True,
                 dnn_hidden_units=(256, 128),
                 l2_reg_linear=0.00001, l2_reg_embedding=0.00001, l2_reg_dnn=0, init_std=0.0001, seed=1024,
                 dnn_dropout=0,
                 dnn_activation='relu', dnn_use_bn=False, task='binary', device='cpu', gpus=None):

        super(DeepFM, self).__init__(linear_feature_columns, dnn_feature_columns, l2_reg_linear=l2_reg_linear,
                                     l2_reg_embedding=l2_reg_embedding, init_std=init_std, seed=seed, task=task,
                                     device=device, gpus=gpus)

        self.use_fm = use_fm
        self.use_dnn = len(dnn_feature_columns) > 0 and len(
            dnn_hidden_units) > 0
        if use_fm:
            self.fm = FM()

        if self.use_dnn:
            self.dnn = DNN(self.compute_input_dim(dnn_feature_columns), dnn_hidden_units,
                           activation=dnn_activation, l2_reg=l2_reg_dnn, dropout_rate=dnn_dropout, use_bn=dnn_use_bn,
                           init_std=init_std, device=device)
            self.dnn_linear = nn.Linear(
                dnn_hidden_units[-1], 1, bias=False).to(device)

            self.add_regularization_weight(
                filter(lambda x: 'weight' in x[0] and 'bn' not in x[0], self.dnn.named_parameters()), l2=l2_reg_dnn)
            self.add_regularization_weight(self.dnn_linear.weight, l2=l2_reg_dnn)
        self.to(device)

    def forward(self, X):

        sparse_embedding_list, dense_value_list = self.input_from_feature_columns(X, self.dnn_feature_columns,
                                                                                  self.embedding_dict)
        logit = self.linear_model(X)

        if self.use_fm and len(sparse_embedding_list) > 0:
            fm_input = torch.cat(sparse_embedding_list, dim=1)
            logit += self.fm(fm_input)

        if self.use_dnn:
            dnn_input = combined_dnn_input(
                sparse_embedding_list, dense_value_list)
            dnn_output = self.dnn(dnn_input)
            dnn_logit = self.dnn_linear(dnn_output)
            logit += dnn_logit

        y_pred = self.out(logit)

        return y_pred


# ---- examples/run_classification_criteo.py (data made here) --------------------------------------------------

def make_data(seed):
    """Label-encoded categories and min-max scaled dense values; the click is a fixed rule of the features."""
    g = np.random.RandomState(seed)
    n = N_ROWS + N_VAL
    data = {}
    score = np.zeros(n)
    for j, vocab in enumerate(VOCABS):
        col = g.randint(0, vocab, n)
        data['C' + str(j + 1)] = col
        effect = g.randn(vocab)
        score += effect[col]
    score += 1.5 * ((data['C1'] % 2) == (data['C2'] % 2)) - 0.75
    score -= 1.5 * ((data['C3'] % 3) == 0) - 0.5
    w = g.randn(N_DENSE) * 2
    for j in range(N_DENSE):
        col = g.rand(n)
        data['I' + str(j + 1)] = col
        score += w[j] * (col - 0.5)
    data['label'] = (score > np.median(score)).astype(np.int64)
    return data


def _build(seed, bug=None):
    data = make_data(seed)

    sparse_features = ['C' + str(i) for i in range(1, len(VOCABS) + 1)]
    dense_features = ['I' + str(i) for i in range(1, N_DENSE + 1)]
    target = ['label']

    # 2.count #unique features for each sparse field,and record dense feature field name

    fixlen_feature_columns = [SparseFeat(feat, vocabulary_size=data[feat].max() + 1, embedding_dim=4)
                              for feat in sparse_features] + [DenseFeat(feat, 1, )
                                                              for feat in dense_features]

    dnn_feature_columns = fixlen_feature_columns
    linear_feature_columns = fixlen_feature_columns

    feature_names = get_feature_names(
        linear_feature_columns + dnn_feature_columns)

    # 3.generate input data for model

    train = {k: v[:N_ROWS] for k, v in data.items()}
    test = {k: v[N_ROWS:] for k, v in data.items()}
    train_model_input = {name: train[name] for name in feature_names}
    test_model_input = {name: test[name] for name in feature_names}

    # 4.Define Model,train,predict and evaluate

    device = 'cpu'

    model = DeepFM(linear_feature_columns=linear_feature_columns, dnn_feature_columns=dnn_feature_columns,
                   dnn_hidden_units=(32, 16), task='binary',
                   l2_reg_embedding=1e-5, device=device, seed=seed)

    if bug == "sigmoid_before_bce_with_logits":
        # the user's own loss callable: the with-logits BCE on the model's (already sigmoid) output
        model.compile("adagrad", F.binary_cross_entropy_with_logits,
                      metrics=["binary_crossentropy", "auc"], )
    else:
        model.compile("adagrad", "binary_crossentropy",
                      metrics=["binary_crossentropy", "auc"], )

    train_y = np.stack([train[t] for t in target], axis=1)
    steps = model._fit_batches(dict(train_model_input), train_y, batch_size=BATCH_SIZE, bug=bug)

    # the evidence: one training batch, as fit builds it
    x0 = np.concatenate([np.expand_dims(train_model_input[f], axis=1) for f in model.feature_index], axis=-1)
    batch = (torch.from_numpy(x0[:BATCH_SIZE]).float(), torch.from_numpy(train_y[:BATCH_SIZE]).float())

    def loss_fn(y_pred, y):
        loss = model.loss_func(y_pred.squeeze(), y.squeeze(), reduction='sum')
        return loss + model.get_regularization_loss() + model.aux_loss

    def eval_fn(model, batch):
        pred_ans = model.predict(dict(test_model_input), 256)
        return model.metrics["auc"](test['label'], pred_ans)

    return Program(name="deepctrtorch_deepfm", model=model, batch=batch, loss_fn=loss_fn, optimizer=model.optim,
                   train_step=lambda: next(steps), eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the L2 term computed once from the initial parameters and reused as a constant: no weight decay ever reaches
    # the embeddings (DeepCTR-Torch before v0.2.2, https://github.com/shenweichen/DeepCTR-Torch/issues/131, #90).
    Bug("reg_loss_frozen", functools.partial(_build, bug="reg_loss_frozen"), "learning_ledger", ("OBJECTIVE",)),
    # compile() given F.binary_cross_entropy_with_logits while PredictionLayer already applies the sigmoid.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # optim.zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe",
        (), kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
