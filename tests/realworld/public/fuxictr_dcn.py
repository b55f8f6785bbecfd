"""Deep & Cross Network for click-through-rate prediction from reczoo/FuxiCTR's model zoo: per-feature embeddings
(``FeatureEmbedding`` over a feature map of numeric and categorical fields, flattened), a 3-layer ``CrossNet``
(``x_{i+1} = x_0 * w_i(x_i) + b_i + x_i``) beside an ``MLP_Block`` tower, a linear logit on their concatenation with
a sigmoid output, binary cross-entropy plus the embedding L2 regularizer, Adam, gradient-norm clipping at 10.

Source: https://github.com/reczoo/FuxiCTR
Commit: 0245987fdc1d43c36164ea496a02324885a8557a
Files: ``model_zoo/DCN/DCN_torch/src/DCN.py``, ``model_zoo/DCN/DCN_torch/config/model_config.yaml`` (``DCN_test``),
``model_zoo/DCN/DCN_torch/run_expid.py``, ``fuxictr/pytorch/models/rank_model.py`` (``BaseModel``),
``fuxictr/pytorch/layers/embeddings/feature_embedding.py``, ``fuxictr/pytorch/layers/blocks/mlp_block.py``,
``fuxictr/pytorch/layers/interactions/cross_net.py``, ``fuxictr/pytorch/torch_utils.py``
License: Apache-2.0 (Copyright (C) 2024 The FuxiCTR Library, (C) 2022 Huawei Technologies Co., Ltd.; full text in
LICENSES/reczoo-FuxiCTR.txt)
Domain: recommendation, click-through rate (DCN: cross network + DNN over field embeddings)

Kept as written: ``DCN`` (its ``__init__`` and ``forward``), ``CrossInteraction`` / ``CrossNet``, ``MLP_Block``,
``get_activation``, ``get_optimizer``, ``get_loss``, ``get_regularizer``, ``BaseModel``'s ``compile``,
``regularization_loss`` (the ``FeatureEmbeddingDict`` parameters under the embedding regularizer), ``add_loss``,
``compute_loss``, ``reset_parameters`` (xavier-normal Linear weights, zero biases, then ``init_weights``),
``get_inputs``, ``get_labels``, ``get_output_activation`` and ``train_step`` (zero_grad, forward, labels,
``compute_loss``, backward, ``clip_grad_norm_(max_gradient_norm=10)``, step), the ``DCN_test`` configuration
(embedding_dim 4, dnn_hidden_units [64, 32] relu, net_dropout 0, no batch norm, Adam lr 1e-3,
embedding_regularizer 1e-8, net_regularizer 0, batch_size 128, binary_crossentropy).

Deviations from the original:
- the parquet dataset and ``FeatureMap`` / ``RankDataLoader`` are not here: the feature map is a small object with
  the same ``features`` / ``labels`` / ``sum_emb_out_dim`` / ``dataset_id`` fields, describing 4 numeric and 6
  categorical fields of synthetic click logs made from ``seed`` (the click depends on two categorical fields, a
  crossing of two more and one numeric field); batches are dicts of tensors, 128 rows, drawn from a shuffled
  training table with a ``torch.Generator(seed)``.
- ``FeatureEmbeddingDict`` keeps the numeric (``nn.Linear(1, d)``) and categorical (``nn.Embedding``) paths with
  their initialization (``normal_(std=1e-4)``, written as a ``functools.partial``: ``get_initializer``'s ``eval``
  of the string); the sequence, pretrained, shared and feature-encoder paths are left out (no such features here).
- ``get_activation`` leaves out its ``prelu`` / ``dice`` branches and ``get_loss`` its ``fuxictr.pytorch.losses``
  fallback (neither is reached by this configuration).
- ``BaseModel.__init__`` keeps the attributes ``train_step`` and the loss use; the ``Monitor``, checkpoint paths,
  logging, ``fit`` / ``train_epoch`` bookkeeping, early stopping and lr-on-plateau are dropped. ``train_step`` is
  ``BaseModel.train_step`` on the next batch (a new shuffle when the table runs out), returning ``loss.item()``;
  ``eval_fn`` is the log loss on a held-out table (``evaluate``'s metric computation written as BCE).
- ``torch.manual_seed(seed)`` before the model is built; the device is the CPU; ``SELF_CHECK_STEPS`` is 60.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, B006, B008, SIM102, E722, PIE810, PERF102, SIM118, FLY002, C408

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VALID = 4096, 1024
SELF_CHECK_STEPS = 60  # lr 1e-3 on embeddings initialized at std 1e-4: the loss moves slowly
NUMERIC = ["I1", "I2", "I3", "I4"]
CATEGORICAL = {"C1": 20, "C2": 30, "C3": 12, "C4": 12, "C5": 50, "C6": 8}


# fuxictr/pytorch/torch_utils.py
def get_optimizer(optimizer, params, lr):
    if isinstance(optimizer, str):
        if optimizer.lower() == "adam":
            optimizer = "Adam"
    try:
        optimizer = getattr(torch.optim, optimizer)(params, lr=lr)
    except:
        raise NotImplementedError("optimizer={} is not supported.".format(optimizer))
    return optimizer


def get_loss(loss):
    if isinstance(loss, str):
        if loss in ["bce", "binary_crossentropy", "binary_cross_entropy"]:
            loss = "binary_cross_entropy"
    try:
        loss_fn = getattr(torch.functional.F, loss)
    except:
        raise NotImplementedError("loss={} is not supported.".format(loss))
    return loss_fn


def get_regularizer(reg):
    reg_pair = [] # of tuples (p_norm, weight)
    if isinstance(reg, float):
        reg_pair.append((2, reg))
    elif isinstance(reg, str):
        try:
            if reg.startswith("l1(") or reg.startswith("l2("):
                reg_pair.append((int(reg[1]), float(reg.rstrip(")").split("(")[-1])))
            elif reg.startswith("l1_l2"):
                l1_reg, l2_reg = reg.rstrip(")").split("(")[-1].split(",")
                reg_pair.append((1, float(l1_reg)))
                reg_pair.append((2, float(l2_reg)))
            else:
                raise NotImplementedError
        except:
            raise NotImplementedError("regularizer={} is not supported.".format(reg))
    return reg_pair


def get_activation(activation, hidden_units=None):
    if isinstance(activation, str):
        if activation.lower() == "relu":
            return nn.ReLU()
        elif activation.lower() == "sigmoid":
            return nn.Sigmoid()
        elif activation.lower() == "tanh":
            return nn.Tanh()
        elif activation.lower() == "softmax":
            return nn.Softmax(dim=-1)
        else:
            return getattr(nn, activation)()
    elif isinstance(activation, list):
        if hidden_units is not None:
            assert len(activation) == len(hidden_units)
            return [get_activation(act, units) for act, units in zip(activation, hidden_units)]
        else:
            return [get_activation(act) for act in activation]
    return activation


# fuxictr/pytorch/layers/embeddings/feature_embedding.py (numeric and categorical paths)
class FeatureEmbeddingDict(nn.Module):
    def __init__(self,
                 feature_map,
                 embedding_dim,
                 embedding_initializer=functools.partial(nn.init.normal_, std=1e-4)):
        super(FeatureEmbeddingDict, self).__init__()
        self._feature_map = feature_map
        self.embedding_initializer = embedding_initializer
        self.embedding_layers = nn.ModuleDict()
        for feature, feature_spec in self._feature_map.features.items():
            feat_dim = feature_spec.get("embedding_dim", embedding_dim)
            if feature_spec["type"] == "numeric":
                self.embedding_layers[feature] = nn.Linear(1, feat_dim, bias=False)
            elif feature_spec["type"] in ["categorical", "sequence"]:
                padding_idx = feature_spec.get("padding_idx", None)
                self.embedding_layers[feature] = nn.Embedding(feature_spec["vocab_size"],
                                                              feat_dim,
                                                              padding_idx=padding_idx)
        self.init_weights()

    def init_weights(self):
        for k, v in self.embedding_layers.items():
            if type(v) == nn.Embedding:
                if v.padding_idx is not None:
                    self.embedding_initializer(v.weight[1:, :]) # set padding_idx to zero
                else:
                    self.embedding_initializer(v.weight)

    def dict2tensor(self, embedding_dict, flatten_emb=False):
        feature_emb_list = []
        for feature, feature_spec in self._feature_map.features.items():
            if feature in embedding_dict:
                feature_emb_list.append(embedding_dict[feature])
        if flatten_emb:
            feature_emb = torch.cat(feature_emb_list, dim=-1)
        else:
            feature_emb = torch.stack(feature_emb_list, dim=1)
        return feature_emb

    def forward(self, inputs):
        feature_emb_dict = OrderedDict()
        for feature in inputs.keys():
            feature_spec = self._feature_map.features[feature]
            if feature in self.embedding_layers:
                if feature_spec["type"] == "numeric":
                    inp = inputs[feature].float().view(-1, 1)
                    embeddings = self.embedding_layers[feature](inp)
                elif feature_spec["type"] == "categorical":
                    inp = inputs[feature].long()
                    embeddings = self.embedding_layers[feature](inp)
                else:
                    raise NotImplementedError
                feature_emb_dict[feature] = embeddings
        return feature_emb_dict


class FeatureEmbedding(nn.Module):
    def __init__(self, feature_map, embedding_dim):
        super(FeatureEmbedding, self).__init__()
        self.embedding_layer = FeatureEmbeddingDict(feature_map, embedding_dim)

    def forward(self, X, flatten_emb=False):
        feature_emb_dict = self.embedding_layer(X)
        feature_emb = self.embedding_layer.dict2tensor(feature_emb_dict, flatten_emb=flatten_emb)
        return feature_emb


# fuxictr/pytorch/layers/blocks/mlp_block.py
class MLP_Block(nn.Module):
    def __init__(self,
                 input_dim,
                 hidden_units=[],
                 hidden_activations="ReLU",
                 output_dim=None,
                 output_activation=None,
                 dropout_rates=0.0,
                 batch_norm=False,
                 bn_only_once=False, # Set True for inference speed up
                 use_bias=True):
        super(MLP_Block, self).__init__()
        dense_layers = []
        if not isinstance(dropout_rates, list):
            dropout_rates = [dropout_rates] * len(hidden_units)
        if not isinstance(hidden_activations, list):
            hidden_activations = [hidden_activations] * len(hidden_units)
        hidden_activations = get_activation(hidden_activations, hidden_units)
        hidden_units = [input_dim] + hidden_units
        if batch_norm and bn_only_once:
            dense_layers.append(nn.BatchNorm1d(input_dim))
        for idx in range(len(hidden_units) - 1):
            dense_layers.append(nn.Linear(hidden_units[idx], hidden_units[idx + 1], bias=use_bias))
            if batch_norm and not bn_only_once:
                dense_layers.append(nn.BatchNorm1d(hidden_units[idx + 1]))
            if hidden_activations[idx]:
                dense_layers.append(hidden_activations[idx])
            if dropout_rates[idx] > 0:
                dense_layers.append(nn.Dropout(p=dropout_rates[idx]))
        if output_dim is not None:
            dense_layers.append(nn.Linear(hidden_units[-1], output_dim, bias=use_bias))
        if output_activation is not None:
            dense_layers.append(get_activation(output_activation))
        self.mlp = nn.Sequential(*dense_layers) # * used to unpack list

    def forward(self, inputs):
        return self.mlp(inputs)


# fuxictr/pytorch/layers/interactions/cross_net.py
class CrossInteraction(nn.Module):
    def __init__(self, input_dim):
        super(CrossInteraction, self).__init__()
        self.weight = nn.Linear(input_dim, 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(input_dim))

    def forward(self, X_0, X_i):
        interact_out = self.weight(X_i) * X_0 + self.bias
        return interact_out


class CrossNet(nn.Module):
    def __init__(self, input_dim, num_layers):
        super(CrossNet, self).__init__()
        self.num_layers = num_layers
        self.cross_net = nn.ModuleList(CrossInteraction(input_dim)
                                       for _ in range(self.num_layers))

    def forward(self, X_0):
        X_i = X_0 # b x dim
        for i in range(self.num_layers):
            X_i = X_i + self.cross_net[i](X_0, X_i)
        return X_i


# fuxictr/pytorch/models/rank_model.py (the parts train_step uses)
class BaseModel(nn.Module):
    def __init__(self,
                 feature_map,
                 model_id="BaseModel",
                 task="binary_classification",
                 gpu=-1,
                 embedding_regularizer=None,
                 net_regularizer=None,
                 max_gradient_norm=10.,
                 **kwargs):
        super(BaseModel, self).__init__()
        self.device = torch.device("cpu")
        self._embedding_regularizer = embedding_regularizer
        self._net_regularizer = net_regularizer
        self._max_gradient_norm = max_gradient_norm  # set by fit() in the original
        self.feature_map = feature_map
        self.output_activation = self.get_output_activation(task)
        self.model_id = model_id

    def compile(self, optimizer, loss, lr):
        self.optimizer = get_optimizer(optimizer, self.parameters(), lr)
        self.loss_fn = get_loss(loss)

    def regularization_loss(self):
        reg_term = 0
        if self._embedding_regularizer or self._net_regularizer:
            emb_reg = get_regularizer(self._embedding_regularizer)
            net_reg = get_regularizer(self._net_regularizer)
            emb_params = set()
            for m_name, module in self.named_modules():
                if type(module) == FeatureEmbeddingDict:
                    for p_name, param in module.named_parameters():
                        if param.requires_grad:
                            emb_params.add(".".join([m_name, p_name]))
                            for emb_p, emb_lambda in emb_reg:
                                reg_term += (emb_lambda / emb_p) * torch.norm(param, emb_p) ** emb_p
            for name, param in self.named_parameters():
                if param.requires_grad:
                    if name not in emb_params:
                        for net_p, net_lambda in net_reg:
                            reg_term += (net_lambda / net_p) * torch.norm(param, net_p) ** net_p
        return reg_term

    def add_loss(self, return_dict, y_true):
        loss = self.loss_fn(return_dict["y_pred"], y_true, reduction='mean')
        return loss

    def compute_loss(self, return_dict, y_true):
        loss = self.add_loss(return_dict, y_true) + self.regularization_loss()
        return loss

    def reset_parameters(self):
        def default_reset_params(m):
            if type(m) in [nn.Linear, nn.Conv1d]:
                nn.init.xavier_normal_(m.weight)
                if m.bias is not None:
                    m.bias.data.fill_(0)

        def custom_reset_params(m):
            if hasattr(m, 'init_weights'):
                m.init_weights()
        self.apply(default_reset_params)
        self.apply(custom_reset_params)

    def get_inputs(self, inputs, feature_source=None):
        X_dict = dict()
        for feature in inputs.keys():
            if feature in self.feature_map.labels:
                continue
            spec = self.feature_map.features[feature]
            if spec["type"] == "meta":
                continue
            X_dict[feature] = inputs[feature].to(self.device)
        return X_dict

    def get_labels(self, inputs):
        labels = self.feature_map.labels
        y = inputs[labels[0]].to(self.device)
        return y.float().view(-1, 1)

    def get_output_activation(self, task):
        if task == "binary_classification":
            return nn.Sigmoid()
        elif task == "regression":
            return nn.Identity()
        else:
            raise NotImplementedError("task={} is not supported.".format(task))

    def model_to_device(self):
        self.to(device=self.device)

    def train_step(self, batch_data):
        self.optimizer.zero_grad()
        return_dict = self.forward(batch_data)
        y_true = self.get_labels(batch_data)
        loss = self.compute_loss(return_dict, y_true)
        loss.backward()
        nn.utils.clip_grad_norm_(self.parameters(), self._max_gradient_norm)
        self.optimizer.step()
        return loss


# model_zoo/DCN/DCN_torch/src/DCN.py
class DCN(BaseModel):
    def __init__(self,
                 feature_map,
                 model_id="DCN",
                 gpu=-1,
                 learning_rate=1e-3,
                 embedding_dim=10,
                 dnn_hidden_units=[],
                 dnn_activations="ReLU",
                 num_cross_layers=3,
                 net_dropout=0,
                 batch_norm=False,
                 embedding_regularizer=None,
                 net_regularizer=None,
                 bug=None,
                 **kwargs):
        super(DCN, self).__init__(feature_map,
                                  model_id=model_id,
                                  gpu=gpu,
                                  embedding_regularizer=embedding_regularizer,
                                  net_regularizer=net_regularizer,
                                  **kwargs)
        self.bug = bug
        self.embedding_layer = FeatureEmbedding(feature_map, embedding_dim)
        input_dim = feature_map.sum_emb_out_dim()
        self.dnn = MLP_Block(input_dim=input_dim,
                             output_dim=None, # output hidden layer
                             hidden_units=dnn_hidden_units,
                             hidden_activations=dnn_activations,
                             output_activation=None,
                             dropout_rates=net_dropout,
                             batch_norm=batch_norm) \
                   if dnn_hidden_units else None # in case of only crossing net used
        self.crossnet = CrossNet(input_dim, num_cross_layers)
        final_dim = input_dim
        if isinstance(dnn_hidden_units, list) and len(dnn_hidden_units) > 0: # if use dnn
            final_dim += dnn_hidden_units[-1]
        self.fc = nn.Linear(final_dim, 1) # [cross_part, dnn_part] -> logit
        self.compile(kwargs["optimizer"], kwargs["loss"], learning_rate)
        self.reset_parameters()
        self.model_to_device()

    def forward(self, inputs):
        X = self.get_inputs(inputs)
        feature_emb = self.embedding_layer(X, flatten_emb=True)
        cross_out = self.crossnet(feature_emb)
        if self.dnn is not None:
            dnn_out = self.dnn(feature_emb)
            final_out = torch.cat([cross_out, dnn_out], dim=-1)
        else:
            final_out = cross_out
        y_pred = self.fc(final_out)
        if self.bug != "output_activation_skipped":
            y_pred = self.output_activation(y_pred)
        else:
            y_pred = torch.clamp(y_pred, 1e-7, 1 - 1e-7)  # bug: the logit clamped into (0, 1), no sigmoid
        return_dict = {"y_pred": y_pred}
        return return_dict


class _FeatureMap:
    """deviation: the fields of fuxictr's FeatureMap the model reads, for the synthetic click logs"""

    def __init__(self, embedding_dim):
        self.dataset_id = "synthetic_clicks"
        self.labels = ["label"]
        self.features = OrderedDict()
        for f in NUMERIC:
            self.features[f] = {"source": "", "type": "numeric"}
        for f, vocab in CATEGORICAL.items():
            self.features[f] = {"source": "", "type": "categorical", "vocab_size": vocab + 2, "padding_idx": 0}
        self.embedding_dim = embedding_dim

    def sum_emb_out_dim(self):
        return sum(spec.get("embedding_dim", self.embedding_dim) for spec in self.features.values()
                   if spec["type"] != "meta")


def _synthetic_table(rng, n, w_cat, bug=None):
    """synthetic click logs (deviation): numeric fields standardized, categorical ids from 1 (0 is padding)"""
    cols = {}
    for f in NUMERIC:
        cols[f] = rng.normal(size=n).astype(np.float32)
    for f, vocab in CATEGORICAL.items():
        cols[f] = rng.integers(1, vocab + 1, size=n)
    logit = (w_cat["C1"][cols["C1"]] + w_cat["C2"][cols["C2"]]
             + 2.5 * np.where((cols["C3"] % 2) == (cols["C4"] % 2), 1.0, -1.0) + 0.8 * cols["I1"] - 0.3)
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    table = {k: torch.tensor(v) for k, v in cols.items()}
    table["label"] = torch.tensor(label)
    return table


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    w_cat = {f: rng.normal(0, 2.5, size=CATEGORICAL[f] + 1) for f in ("C1", "C2")}
    train = _synthetic_table(rng, N_TRAIN, w_cat)
    valid = _synthetic_table(rng, N_VALID, w_cat)
    # model_config.yaml, DCN_test
    params = {"model": "DCN", "dataset_id": "synthetic_clicks", "loss": 'binary_crossentropy',
              "metrics": ['logloss', 'AUC'], "task": "binary_classification", "optimizer": "adam",
              "learning_rate": 1.0e-3, "embedding_regularizer": 1.e-8, "net_regularizer": 0, "batch_size": 128,
              "embedding_dim": 4, "dnn_hidden_units": [64, 32], "dnn_activations": "relu", "crossing_layers": 3,
              "net_dropout": 0, "batch_norm": False, "verbose": 1, "model_root": './checkpoints/'}
    feature_map = _FeatureMap(params["embedding_dim"])
    model = DCN(feature_map, bug=bug, **params)
    batch_size = params["batch_size"]
    gen = torch.Generator().manual_seed(seed)
    st = {"perm": torch.randperm(N_TRAIN, generator=gen), "i": 0}

    def next_batch():
        if st["i"] + batch_size > N_TRAIN:
            st["perm"], st["i"] = torch.randperm(N_TRAIN, generator=gen), 0
        idx = st["perm"][st["i"]: st["i"] + batch_size]
        st["i"] += batch_size
        batch = {k: v[idx] for k, v in train.items()}
        if bug == "labels_from_other_rows":
            # bug: the labels gathered with a second permutation, apart from the features
            batch["label"] = train["label"][torch.randperm(N_TRAIN, generator=gen)[:batch_size]]
        return batch

    def train_step():
        model.train()
        loss = model.train_step(next_batch())
        return loss.item()

    def eval_fn(m, _batch=None):
        m.eval()
        with torch.no_grad():
            y_pred = m.forward(valid)["y_pred"]
            out = F.binary_cross_entropy(y_pred, m.get_labels(valid)).item()
        m.train()
        return out

    def loss_fn(return_dict, y_true):
        return model.compute_loss(return_dict, y_true)

    first = {k: v[:batch_size] for k, v in train.items()}
    batch = (first, model.get_labels(first))
    return Program(name="fuxictr_dcn", model=model, batch=batch, loss_fn=loss_fn, optimizer=model.optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the output activation skipped: ``binary_cross_entropy`` gets the raw logit clamped into (0, 1) (classic).
    Bug("output_activation_skipped", functools.partial(_build, bug="output_activation_skipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the batch's labels gathered with a second permutation, apart from its features (classic).
    Bug("labels_from_other_rows", functools.partial(_build, bug="labels_from_other_rows"), "learning_ledger",
        ("TASK",)),
]
