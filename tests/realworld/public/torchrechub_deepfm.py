# ruff: noqa: B008, C408, PLR0402, UP004, UP008, UP031
"""DeepFM click-through-rate model trained by ``CTRTrainer``, from datawhalechina/torch-rechub.

Source: https://github.com/datawhalechina/torch-rechub
Commit: 5a73b2eebc3a670dc64c54971cc06a78ddd55394
Files: ``examples/ranking/run_criteo.py`` (``--model_name deepfm``), ``torch_rechub/models/ranking/deepfm.py``,
``torch_rechub/basic/layers.py`` (EmbeddingLayer, LR, FM, MLP), ``torch_rechub/basic/features.py``,
``torch_rechub/basic/initializers.py`` (RandomNormal), ``torch_rechub/basic/activation.py``,
``torch_rechub/trainers/ctr_trainer.py`` (``CTRTrainer.__init__``, ``train_one_epoch``, ``evaluate``).
License: MIT (Copyright (c) 2022 Datawhale; full text in LICENSES/datawhalechina-torch-rechub.txt).
Domain: recommendation, click-through-rate prediction (DeepFM on Criteo-style dense + sparse features).

Kept as written: ``DeepFM`` (LR over the flattened FM embeddings + FM second-order term + MLP over the dense
features, summed, sigmoid), ``EmbeddingLayer`` (sparse and dense branches used by DeepFM), ``LR``, ``FM``,
``MLP`` (Linear, BatchNorm1d, ReLU, Dropout per layer, then Linear(*, 1)), ``SparseFeature`` / ``DenseFeature``,
``RandomNormal(0, 0.0001)`` embeddings, ``run_criteo.py``'s feature construction (dense features MinMax-scaled,
each dense feature also discretized by ``convert_numeric_feature`` into a new ``<name>_cat`` sparse feature,
sparse ids label-encoded, embed_dim 16, ``mlp_params={"dims": [256, 128], "dropout": 0.2, "activation": "relu"}``
at smaller dims), and ``CTRTrainer``'s optimizer (Adam over ``model.parameters()`` with lr 1e-3 and
weight_decay 1e-3 from ``run_criteo.py``), criterion (``BCELoss``) and the loop body of ``train_one_epoch``.

Deviations from the original:
- the Criteo sample CSV is replaced by synthetic rows made from ``seed``: 4 integer count features ``I1..I4`` and
  4 categorical features ``C1..C4`` (the CSV has 13 and 26); the click label is 1 when a fixed score of the
  (log) counts plus a per-category effect of C1 and C2 is positive. pandas/sklearn preprocessing is written out
  in numpy (min-max scaling, label encoding with ``np.unique``), ``convert_numeric_feature`` kept as written.
- ``DataGenerator`` / ``generate_dataloader`` are replaced by a small dict-of-tensors dataset and a shuffling
  ``DataLoader`` of batch size 128 (2048 in the script); the MLP dims are [32, 16] instead of [256, 128].
- ``RegularizationLoss`` is left out: with the trainer's default coefficients (all 0.0) it adds 0.
- tqdm progress, logging, early stopping, saving and the ONNX export are dropped; ``train_step`` is one iteration
  of ``train_one_epoch``'s loop, the loader cycled (``model.train()`` at each epoch's start as written).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_ROWS = 1024
N_DENSE = 4
N_SPARSE = 4
N_CATS = 12


# ---- torch_rechub/basic/initializers.py
class RandomNormal(object):
    """Returns an embedding initialized with a normal distribution.

    Args:
        mean (float): the mean of the normal distribution
        std (float): the standard deviation of the normal distribution
    """

    def __init__(self, mean=0.0, std=1.0):
        self.mean = mean
        self.std = std

    def __call__(self, vocab_size, embed_dim, padding_idx=None):
        embed = torch.nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        torch.nn.init.normal_(embed.weight, self.mean, self.std)
        if padding_idx is not None:
            torch.nn.init.zeros_(embed.weight[padding_idx])
        return embed


# ---- torch_rechub/basic/features.py
class SparseFeature(object):
    def __init__(self, name, vocab_size, embed_dim=None, shared_with=None, padding_idx=None, initializer=RandomNormal(0, 0.0001)):
        self.name = name
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.shared_with = shared_with
        self.padding_idx = padding_idx
        self.initializer = initializer

    def __repr__(self):
        return f'<SparseFeature {self.name} with Embedding shape ({self.vocab_size}, {self.embed_dim})>'

    def get_embedding_layer(self):
        if not hasattr(self, 'embed'):
            self.embed = self.initializer(self.vocab_size, self.embed_dim, padding_idx=self.padding_idx)
        return self.embed


class DenseFeature(object):
    def __init__(self, name, embed_dim=1):
        self.name = name
        self.embed_dim = embed_dim

    def __repr__(self):
        return f'<DenseFeature {self.name}>'


# ---- torch_rechub/basic/activation.py (the branch used)
def activation_layer(act_name):
    if isinstance(act_name, str):
        if act_name.lower() == 'relu':
            act_layer = nn.ReLU(inplace=True)
        else:
            raise NotImplementedError
    else:
        raise NotImplementedError
    return act_layer


# ---- torch_rechub/basic/layers.py
class EmbeddingLayer(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features
        self.embed_dict = nn.ModuleDict()
        self.n_dense = 0

        for fea in features:
            if fea.name in self.embed_dict:  # exist
                continue
            if isinstance(fea, SparseFeature) and fea.shared_with is None:
                self.embed_dict[fea.name] = fea.get_embedding_layer()
            elif isinstance(fea, DenseFeature):
                self.n_dense += 1

    def forward(self, x, features, squeeze_dim=False):
        sparse_emb, dense_values = [], []
        sparse_exists, dense_exists = False, False
        for fea in features:
            if isinstance(fea, SparseFeature):
                if fea.shared_with is None:
                    sparse_emb.append(self.embed_dict[fea.name](x[fea.name].long()).unsqueeze(1))
                else:
                    sparse_emb.append(self.embed_dict[fea.shared_with](x[fea.name].long()).unsqueeze(1))
            else:
                dense_values.append(x[fea.name].float() if x[fea.name].float().dim() > 1 else x[fea.name].float().unsqueeze(1))  # .unsqueeze(1).unsqueeze(1)

        if len(dense_values) > 0:
            dense_exists = True
            dense_values = torch.cat(dense_values, dim=1)
        if len(sparse_emb) > 0:
            sparse_exists = True
            # [batch_size, num_features, embed_dim]
            sparse_emb = torch.cat(sparse_emb, dim=1)

        if squeeze_dim:  # Note: if the emb_dim of sparse features is different, we must squeeze_dim
            if dense_exists and not sparse_exists:  # only input dense features
                return dense_values
            elif not dense_exists and sparse_exists:
                # squeeze dim to : [batch_size, num_features*embed_dim]
                return sparse_emb.flatten(start_dim=1)
            elif dense_exists and sparse_exists:
                # concat dense value with sparse embedding
                return torch.cat((sparse_emb.flatten(start_dim=1), dense_values), dim=1)
            else:
                raise ValueError("The input features can note be empty")
        else:
            if sparse_exists:
                return sparse_emb  # [batch_size, num_features, embed_dim]
            else:
                raise ValueError("If keep the original shape:[batch_size, num_features, embed_dim], expected %s in feature list, got %s" % ("SparseFeatures", features))


class LR(nn.Module):
    def __init__(self, input_dim, sigmoid=False):
        super().__init__()
        self.sigmoid = sigmoid
        self.fc = nn.Linear(input_dim, 1, bias=True)

    def forward(self, x):
        if self.sigmoid:
            return torch.sigmoid(self.fc(x))
        else:
            return self.fc(x)


class MLP(nn.Module):
    def __init__(self, input_dim, output_layer=True, dims=None, dropout=0, activation="relu"):
        super().__init__()
        if dims is None:
            dims = []
        layers = list()
        for i_dim in dims:
            layers.append(nn.Linear(input_dim, i_dim))
            layers.append(nn.BatchNorm1d(i_dim))
            layers.append(activation_layer(activation))
            layers.append(nn.Dropout(p=dropout))
            input_dim = i_dim
        if output_layer:
            layers.append(nn.Linear(input_dim, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        return self.mlp(x)


class FM(nn.Module):
    def __init__(self, reduce_sum=True):
        super().__init__()
        self.reduce_sum = reduce_sum

    def forward(self, x):
        square_of_sum = torch.sum(x, dim=1)**2
        sum_of_square = torch.sum(x**2, dim=1)
        ix = square_of_sum - sum_of_square
        if self.reduce_sum:
            ix = torch.sum(ix, dim=1, keepdim=True)
        return 0.5 * ix


# ---- torch_rechub/models/ranking/deepfm.py
class DeepFM(torch.nn.Module):
    """Deep Factorization Machine Model

    Args:
        deep_features (list): the list of `Feature Class`, training by the deep part module.
        fm_features (list): the list of `Feature Class`, training by the fm part module.
        mlp_params (dict): the params of the last MLP module, keys include:`{"dims":list, "activation":str, "dropout":float, "output_layer":bool`}
    """

    def __init__(self, deep_features, fm_features, mlp_params):
        super(DeepFM, self).__init__()
        self.deep_features = deep_features
        self.fm_features = fm_features
        self.deep_dims = sum([fea.embed_dim for fea in deep_features])
        self.fm_dims = sum([fea.embed_dim for fea in fm_features])
        self.linear = LR(self.fm_dims)  # 1-odrder interaction
        self.fm = FM(reduce_sum=True)  # 2-odrder interaction
        self.embedding = EmbeddingLayer(deep_features + fm_features)
        self.mlp = MLP(self.deep_dims, **mlp_params)

    def forward(self, x):
        input_deep = self.embedding(x, self.deep_features, squeeze_dim=True)  # [batch_size, deep_dims]
        # [batch_size, num_fields, embed_dim]
        input_fm = self.embedding(x, self.fm_features, squeeze_dim=False)

        y_linear = self.linear(input_fm.flatten(start_dim=1))
        y_fm = self.fm(input_fm)
        y_deep = self.mlp(input_deep)  # [batch_size, 1]
        y = y_linear + y_fm + y_deep
        return torch.sigmoid(y.squeeze(1))


# ---- examples/ranking/run_criteo.py
def convert_numeric_feature(val):
    v = int(val)
    if v > 2:
        return int(np.log(v)**2)
    else:
        return v - 2


def get_criteo_data_dict(seed):
    """``get_criteo_data_dict`` on synthetic Criteo-style rows (pandas/sklearn written out in numpy)."""
    rng = np.random.default_rng(seed)
    counts = rng.geometric(0.05, size=(N_ROWS, N_DENSE)) - 1
    cats = rng.integers(0, N_CATS, size=(N_ROWS, N_SPARSE))
    effect = np.linspace(-1.5, 1.5, N_CATS)
    score = (np.log1p(counts) @ np.array([0.8, -0.6, 0.5, 0.0]) - 1.0
             + effect[cats[:, 0]] - effect[(cats[:, 1] * 5) % N_CATS])
    label = (score > 0).astype(np.float32)

    data = {}
    dense_features = [f"I{i + 1}" for i in range(N_DENSE)]
    sparse_features = [f"C{i + 1}" for i in range(N_SPARSE)]
    for i, f in enumerate(dense_features):
        data[f] = counts[:, i].astype(np.float64)
    for i, f in enumerate(sparse_features):
        data[f] = cats[:, i]

    for feat in dense_features:  # discretize dense feature and as new sparse feature
        sparse_features.append(feat + "_cat")
        data[feat + "_cat"] = np.array([convert_numeric_feature(x) for x in data[feat]])

    for feat in dense_features:  # MinMaxScaler
        lo, hi = data[feat].min(), data[feat].max()
        data[feat] = (data[feat] - lo) / (hi - lo if hi > lo else 1.0)

    for feat in sparse_features:  # encode sparse feature (LabelEncoder)
        data[feat] = np.unique(data[feat], return_inverse=True)[1]

    dense_feas = [DenseFeature(feature_name) for feature_name in dense_features]
    sparse_feas = [SparseFeature(feature_name, vocab_size=len(np.unique(data[feature_name])), embed_dim=16) for feature_name in sparse_features]
    y = label
    x = data
    return dense_feas, sparse_feas, x, y


class DictDataset(Dataset):
    """``TorchDataset`` of torch_rechub.utils.data: ``({name: value[i]}, y[i])``."""

    def __init__(self, x, y):
        self.x = {k: torch.as_tensor(v) for k, v in x.items()}
        self.y = torch.as_tensor(y)

    def __getitem__(self, index):
        return {k: v[index] for k, v in self.x.items()}, self.y[index]

    def __len__(self):
        return len(self.y)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    learning_rate, weight_decay, batch_size = 1e-3, 1e-3, 128
    dense_feas, sparse_feas, x, y = get_criteo_data_dict(seed)
    dataset = DictDataset(x, y)
    train_dataloader = DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                  generator=torch.Generator().manual_seed(seed))
    model = DeepFM(deep_features=dense_feas, fm_features=sparse_feas, mlp_params={"dims": [32, 16], "dropout": 0.2, "activation": "relu"})

    # CTRTrainer.__init__
    optimizer_params = {"lr": learning_rate, "weight_decay": weight_decay}
    optimizer = torch.optim.Adam(model.parameters(), **optimizer_params)  # default optimizer
    if bug == "bce_with_logits_on_probabilities":
        criterion = torch.nn.BCEWithLogitsLoss()
    else:
        criterion = torch.nn.BCELoss()  # default loss cross_entropy

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            model.train()
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        x_dict, y = next_batch()
        x_dict = {k: v for k, v in x_dict.items()}  # tensor to GPU
        y = y.float()
        y_pred = model(x_dict)
        loss = criterion(y_pred, y)
        if bug == "zero_grad_after_backward":
            loss.backward()
            model.zero_grad()
        else:
            model.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        x_dict, y = batch
        with torch.no_grad():
            y_pred = model(x_dict)
        return float(((y_pred > 0.5).float() == y).float().mean())

    first = next(iter(DataLoader(dataset, batch_size=batch_size)))
    return Program(name="torchrechub_deepfm", model=model, batch=first,
                   loss_fn=lambda y_pred, y: criterion(y_pred, y.float()), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # BCEWithLogitsLoss swapped in for BCELoss while DeepFM still ends in torch.sigmoid (classic: sigmoid before a
    # with-logits loss): the loss reads probabilities as logits.
    Bug("bce_with_logits_on_probabilities", functools.partial(_build, bug="bce_with_logits_on_probabilities"),
        "learning_ledger", ("OBJECTIVE",)),
    # model.zero_grad() moved between loss.backward() and optimizer.step() (classic): every step applies a zero
    # gradient (Adam's weight decay alone moves the weights); a slip of the whole model's step.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
