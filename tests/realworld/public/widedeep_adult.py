"""Wide & Deep of pytorch-widedeep as its ``examples/scripts/adult_census.py`` trains it: a ``Wide`` linear model
(an ``nn.Embedding(input_dim + 1, 1)`` summed over the one-hot wide and crossed columns, plus a bias) added to a
``TabMlp`` deep tabular model (per-column categorical embeddings sized by the fastai rule, concatenated with the
standardised continuous columns, an MLP [200, 100] with ReLU and dropout 0.2, then ``WideDeep``'s ``Linear`` to one
logit); objective ``"binary"`` (``BCEWithLogitsLoss``), one optimizer per component (``Adam`` lr 0.01 for ``wide``,
``AdamW`` lr 0.01 for ``deeptabular``, driven together by ``MultipleOptimizer``), ``StepLR`` schedulers (step sizes 2
and 3) stepped at each epoch's end, ``KaimingNormal`` / ``XavierNormal`` initializers, a 20% validation split, and
``Trainer._train_step`` per batch.

Source: https://github.com/jrzaurin/pytorch-widedeep
Commit: 268dad9c228d3e6c598d677a023979707524a313
Files: examples/scripts/adult_census.py, pytorch_widedeep/models/wide_deep.py, models/tabular/linear/wide.py,
  models/tabular/mlp/tab_mlp.py, models/tabular/mlp/_layers.py, models/tabular/_base_tabular_model.py,
  models/tabular/embeddings_layers.py, models/_get_activation_fn.py, initializers.py, training/trainer.py,
  training/_base_trainer.py, training/_multiple_optimizer.py, training/_multiple_lr_scheduler.py,
  training/_wd_dataset.py, training/_trainer_utils.py, preprocessing/tab_preprocessor.py,
  preprocessing/wide_preprocessor.py
License: MIT (Copyright (c) 2019 Javier Rodriguez Zaurin; the project is dual-licensed MIT / Apache-2.0)
Domain: tabular (Wide & Deep: linear wide part over crossed columns + MLP over embeddings, two optimizers)

Deviations from the original:
- sizes: mlp_hidden_dims [200, 100] -> [32, 16], batch_size 256 -> 64; dropout, lrs, step sizes, objective and
  initializers unchanged;
- data: the adult census download (``load_adult``) is replaced by 1024 synthetic rows made from ``seed`` with the
  example's columns (age, hours_per_week continuous; workclass, education, marital_status, occupation,
  relationship, race, gender, capital_gain, capital_loss, native_country categorical; age_buckets from age with the
  example's bins) and an income label drawn from a logistic rule over them (education, occupation, relationship,
  capital_gain, age and hours);
- pandas and scikit-learn are not used: ``WidePreprocessor`` (one global ``col_value`` -> 1.. vocabulary over the
  wide and crossed columns), ``TabPreprocessor`` (label encoding from 1, fastai embedding-size rule, standard
  scaling of the continuous columns) and the stratified ``train_test_split`` of ``wd_train_val_split`` are written
  out in numpy with the same outputs' layout (``column_idx``, ``cat_embed_input``, ``X_wide``, ``X_tab``);
- only the code paths the example runs are copied (no text/image components, no deephead, no TabNet, no
  continuous embeddings; ``Wide``'s ``@alias`` decorator and the type aliases are dropped); the callbacks
  (EarlyStopping, ModelCheckpoint, LRHistory), metrics (Accuracy, Precision), tqdm and the save/load part are left
  out; the epoch-end scheduler step that ``LRShedulerCallback`` makes is kept;
- one ``train_step`` is one ``_train_step`` of the running epoch; when the epoch's loader is exhausted the
  validation epoch (``_eval_epoch``) and the scheduler step run before the next epoch; ``eval_fn`` is
  ``_eval_step``'s loss on a batch; the program's batch is ``((X,), y)`` with ``X`` the component dict, as
  ``WideDeep.forward(X)`` takes it; the program's ``optimizer`` is the ``deeptabular`` AdamW (the Program contract
  takes one torch optimizer; ``train_step`` steps both through ``MultipleOptimizer`` as the Trainer does).
"""
# ruff: noqa: BLE001, PERF102, PLR0402, RUF015, RUF046, S110, UP004, UP008, UP032, UP034  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import re
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ROWS = 1024
BATCH_SIZE = 64
MLP_HIDDEN_DIMS = [32, 16]


# ---- pytorch_widedeep/models/_get_activation_fn.py ---------------------------------------------------------------

def get_activation_fn(activation):
    if activation == "relu":
        return nn.ReLU(inplace=True)
    elif activation == "leaky_relu":
        return nn.LeakyReLU(inplace=True)
    elif activation == "tanh":
        return nn.Tanh()
    elif activation == "gelu":
        return nn.GELU()
    else:
        raise ValueError("activation not ported: {}".format(activation))


# ---- pytorch_widedeep/models/tabular/linear/wide.py --------------------------------------------------------------

class Wide(nn.Module):
    def __init__(self, input_dim: int, pred_dim: int = 1):
        super(Wide, self).__init__()

        self.input_dim = input_dim
        self.pred_dim = pred_dim

        # Embeddings: val + 1 because 0 is reserved for padding/unseen cateogories.
        self.wide_linear = nn.Embedding(input_dim + 1, pred_dim, padding_idx=0)
        # (Sum(Embedding) + bias) is equivalent to (OneHotVector + Linear)
        self.bias = nn.Parameter(torch.zeros(pred_dim))
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        r"""initialize Embedding and bias like nn.Linear. See [original
        implementation](https://pytorch.org/docs/stable/_modules/torch/nn/modules/linear.html#Linear).
        """
        nn.init.kaiming_uniform_(self.wide_linear.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.wide_linear.weight)
        bound = 1 / math.sqrt(fan_in)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, X):
        r"""Forward pass. Simply connecting the Embedding layer with the ouput
        neuron(s)"""
        out = self.wide_linear(X.long()).sum(dim=1) + self.bias
        return out


# ---- pytorch_widedeep/models/tabular/embeddings_layers.py (DiffSizeCatEmbeddings) --------------------------------

class DiffSizeCatEmbeddings(nn.Module):
    def __init__(
        self,
        column_idx,
        embed_input,
        embed_dropout,
        use_bias,
        activation_fn=None,
    ):
        super(DiffSizeCatEmbeddings, self).__init__()

        self.column_idx = column_idx
        self.embed_input = embed_input
        self.use_bias = use_bias

        self.embed_layers_names = {
            e[0]: e[0].replace(".", "_") for e in self.embed_input
        }

        # Categorical: val + 1 because 0 is reserved for padding/unseen cateogories.
        self.embed_layers = nn.ModuleDict(
            {
                "emb_layer_"
                + self.embed_layers_names[col]: nn.Embedding(
                    val + 1, dim, padding_idx=0
                )
                for col, val, dim in self.embed_input
            }
        )
        self.activation_fn = (
            get_activation_fn(activation_fn) if activation_fn is not None else None
        )

        self.embedding_dropout = nn.Dropout(embed_dropout)

        if use_bias:
            self.biases = nn.ParameterDict()
            for col, _, dim in self.embed_input:
                bound = 1 / math.sqrt(dim)
                self.biases["bias_" + col] = nn.Parameter(
                    nn.init.uniform_(torch.Tensor(dim), -bound, bound)
                )

        self.emb_out_dim: int = int(np.sum([embed[2] for embed in self.embed_input]))

    def forward(self, X):
        embed = [
            self.embed_layers["emb_layer_" + self.embed_layers_names[col]](
                X[:, self.column_idx[col]].long()
            )
            + (
                self.biases["bias_" + col].unsqueeze(0)
                if self.use_bias
                else torch.zeros(1, dim, device=X.device)
            )
            for col, _, dim in self.embed_input
        ]
        x = torch.cat(embed, 1)
        if self.activation_fn is not None:
            x = self.activation_fn(x)
        x = self.embedding_dropout(x)
        return x


# ---- pytorch_widedeep/models/tabular/mlp/_layers.py --------------------------------------------------------------

def dense_layer(
    inp: int,
    out: int,
    activation: str,
    p: float,
    bn: bool,
    linear_first: bool,
):
    # This is basically the LinBnDrop class at the fastai library
    act_fn = get_activation_fn(activation)
    layers = [nn.BatchNorm1d(out if linear_first else inp)] if bn else []
    if p != 0:
        layers.append(nn.Dropout(p))  # type: ignore[arg-type]
    lin = [nn.Linear(inp, out, bias=not bn), act_fn]
    layers = lin + layers if linear_first else layers + lin
    return nn.Sequential(*layers)


class MLP(nn.Module):
    def __init__(
        self,
        d_hidden,
        activation,
        dropout,
        batchnorm,
        batchnorm_last,
        linear_first,
    ):
        super(MLP, self).__init__()

        if dropout is None:
            _dropout = [0.0] * len(d_hidden)
        elif isinstance(dropout, float):
            _dropout = [dropout] * len(d_hidden)
        else:
            assert isinstance(
                dropout, list
            ), "If not None, dropout must be a float or a list of floats"
            _dropout = dropout

        self.mlp = nn.Sequential()
        for i in range(1, len(d_hidden)):
            self.mlp.add_module(
                "dense_layer_{}".format(i - 1),
                dense_layer(
                    d_hidden[i - 1],
                    d_hidden[i],
                    activation,
                    _dropout[i - 1],
                    batchnorm and (i != len(d_hidden) - 1 or batchnorm_last),
                    linear_first,
                ),
            )

    def forward(self, X):
        return self.mlp(X)


# ---- pytorch_widedeep/models/tabular/_base_tabular_model.py + mlp/tab_mlp.py --------------------------------------

class BaseTabularModelWithoutAttention(nn.Module):
    def __init__(
        self,
        column_idx,
        *,
        cat_embed_input,
        cat_embed_dropout,
        use_cat_bias,
        cat_embed_activation,
        continuous_cols,
        cont_norm_layer,
    ):
        super().__init__()

        self.column_idx = column_idx

        # datasets can have anything, only categorical cols, only continuous
        # cols or both, therefore, all parameters below are optional inputs
        # Categorical Parameters
        self.cat_embed_input = cat_embed_input
        self.cat_embed_dropout = cat_embed_dropout
        self.use_cat_bias = use_cat_bias
        self.cat_embed_activation = cat_embed_activation

        # Continuous Parameters
        self.continuous_cols = continuous_cols
        self.cont_norm_layer = cont_norm_layer
        self.embed_continuous = False

        # Categorical Embeddings
        if self.cat_embed_input is not None:
            self.cat_embed = DiffSizeCatEmbeddings(
                column_idx=self.column_idx,
                embed_input=self.cat_embed_input,
                embed_dropout=(
                    0.0 if self.cat_embed_dropout is None else self.cat_embed_dropout
                ),
                use_bias=False if self.use_cat_bias is None else self.use_cat_bias,
                activation_fn=self.cat_embed_activation,
            )
            self.cat_out_dim = int(np.sum([embed[2] for embed in self.cat_embed_input]))
        else:
            self.cat_out_dim = 0

        # Continuous cols can be embedded or not
        if self.continuous_cols is not None:
            self.cont_idx = [column_idx[col] for col in self.continuous_cols]
            self.cont_norm = nn.Identity() if self.cont_norm_layer is None else nn.LayerNorm(len(continuous_cols))
            self.cont_out_dim = len(self.continuous_cols)
        else:
            self.cont_out_dim = 0

    def _get_embeddings(self, X):
        tensors_to_concat = []
        if self.cat_embed_input is not None:
            x_cat = self.cat_embed(X)
            tensors_to_concat.append(x_cat)

        if self.continuous_cols is not None:
            x_cont = self.cont_norm((X[:, self.cont_idx].float()))
            tensors_to_concat.append(x_cont)

        x = torch.cat(tensors_to_concat, 1)
        return x


class TabMlp(BaseTabularModelWithoutAttention):
    def __init__(
        self,
        column_idx,
        *,
        cat_embed_input=None,
        cat_embed_dropout=None,
        use_cat_bias=None,
        cat_embed_activation=None,
        continuous_cols=None,
        cont_norm_layer=None,
        mlp_hidden_dims=[200, 100],  # noqa: B006
        mlp_activation="relu",
        mlp_dropout=0.1,
        mlp_batchnorm=False,
        mlp_batchnorm_last=False,
        mlp_linear_first=True,
    ):
        super(TabMlp, self).__init__(
            column_idx=column_idx,
            cat_embed_input=cat_embed_input,
            cat_embed_dropout=cat_embed_dropout,
            use_cat_bias=use_cat_bias,
            cat_embed_activation=cat_embed_activation,
            continuous_cols=continuous_cols,
            cont_norm_layer=cont_norm_layer,
        )

        self.mlp_hidden_dims = mlp_hidden_dims
        self.mlp_activation = mlp_activation
        self.mlp_dropout = mlp_dropout
        self.mlp_batchnorm = mlp_batchnorm
        self.mlp_batchnorm_last = mlp_batchnorm_last
        self.mlp_linear_first = mlp_linear_first

        # Embeddings are instantiated at the base model
        # Mlp
        mlp_input_dim = self.cat_out_dim + self.cont_out_dim
        mlp_hidden_dims = [mlp_input_dim] + mlp_hidden_dims
        self.encoder = MLP(
            mlp_hidden_dims,
            mlp_activation,
            mlp_dropout,
            mlp_batchnorm,
            mlp_batchnorm_last,
            mlp_linear_first,
        )

    def forward(self, X):
        x = self._get_embeddings(X)
        return self.encoder(x)

    @property
    def output_dim(self) -> int:
        r"""The output dimension of the model. This is a required property
        neccesary to build the `WideDeep` class"""
        return self.mlp_hidden_dims[-1]


# ---- pytorch_widedeep/models/wide_deep.py (wide + deeptabular, no deephead) ---------------------------------------

class WideDeep(nn.Module):
    def __init__(self, wide=None, deeptabular=None, pred_dim: int = 1):
        super(WideDeep, self).__init__()

        self.wd_device = None
        self.pred_dim = pred_dim
        self.enforce_positive = False
        self.is_tabnet = deeptabular.__class__.__name__ == "TabNet"
        self.with_deephead = False
        self.deephead = None
        self.wide = wide
        self.deeptabular = self._set_model_component(deeptabular, is_deeptabular=True)

    def forward(self, X, y=None):
        wide_out = self._forward_wide(X)
        deep = self._forward_deep(X, wide_out)
        return deep

    def _forward_wide(self, X):
        if self.wide is not None:
            out = self.wide(X["wide"])
        else:
            batch_size = X[list(X.keys())[0]].size(0)
            out = torch.zeros(batch_size, self.pred_dim).to(self.wd_device)
        return out

    def _forward_deep(self, X, wide_out):
        if self.deeptabular is not None:
            wide_out = self._forward_component(
                X, self.deeptabular, "deeptabular", wide_out
            )
        res = wide_out
        return res

    def _forward_component(self, X, component, component_type, wide_out):
        component_out = component(X[component_type])
        return wide_out.add_(component_out)

    def _set_model_component(self, component, is_deeptabular=False):
        if self.with_deephead or component.output_dim == 1:
            component_ = component
        else:
            component_ = nn.Sequential(
                component, nn.Linear(component.output_dim, self.pred_dim)
            )
        return component_


# ---- pytorch_widedeep/initializers.py -----------------------------------------------------------------------------

class Initializer(object):
    def __call__(self, submodel: nn.Module):
        raise NotImplementedError("Initializer must implement this method")


class MultipleInitializer(object):
    def __init__(self, initializers, verbose=True):
        self.verbose = verbose
        instantiated_initializers = {}
        for model_name, initializer in initializers.items():
            instantiated_initializers[model_name] = self._instansiate_maybe(initializer)
        self._initializers = instantiated_initializers

    def apply(self, submodel):
        for name, child in submodel.named_children():
            try:
                self._initializers[name](child)
            except KeyError:
                pass

    def _instansiate_maybe(self, initializer: object):
        if isinstance(initializer, type):
            return initializer()
        else:
            return initializer


class XavierNormal(Initializer):
    def __init__(self, gain=1, pattern="."):
        self.gain = gain
        self.pattern = pattern
        super(XavierNormal, self).__init__()

    def __call__(self, submodel: nn.Module):
        for n, p in submodel.named_parameters():
            if re.search(self.pattern, n):
                if "bias" in n:
                    nn.init.constant_(p, val=0)
                elif p.requires_grad:
                    try:
                        nn.init.xavier_normal_(p, gain=self.gain)
                    except Exception:
                        pass


class KaimingNormal(Initializer):
    def __init__(self, a=0, mode="fan_in", nonlinearity="leaky_relu", pattern="."):
        self.a = a
        self.mode = mode
        self.nonlinearity = nonlinearity
        self.pattern = pattern
        super(KaimingNormal, self).__init__()

    def __call__(self, submodel: nn.Module):
        for n, p in submodel.named_parameters():
            if re.search(self.pattern, n):
                if "bias" in n:
                    nn.init.constant_(p, val=0)
                elif p.requires_grad:
                    try:
                        nn.init.kaiming_normal_(
                            p, a=self.a, mode=self.mode, nonlinearity=self.nonlinearity
                        )
                    except Exception:
                        pass


# ---- pytorch_widedeep/training/_multiple_optimizer.py, _multiple_lr_scheduler.py ---------------------------------

class MultipleOptimizer(object):
    def __init__(self, opts) -> None:
        self._optimizers = opts

    def zero_grad(self):
        for _, op in self._optimizers.items():
            if isinstance(op, list):
                for _op in op:
                    _op.zero_grad()
            else:
                op.zero_grad()

    def step(self):
        for _, op in self._optimizers.items():
            if isinstance(op, list):
                for _op in op:
                    _op.step()
            else:
                op.step()


class MultipleLRScheduler(object):
    def __init__(self, scheds) -> None:
        self._schedulers = scheds

    def step(self):
        for _, sc in self._schedulers.items():
            if isinstance(sc, list):
                for _sc in sc:
                    _sc.step()
            else:
                sc.step()


# ---- pytorch_widedeep/training/_wd_dataset.py (wide + tabular) ----------------------------------------------------

class WideDeepDataset(Dataset):
    def __init__(self, X_wide=None, X_tab=None, target=None):
        super(WideDeepDataset, self).__init__()
        self.X_wide = X_wide
        self.X_tab = X_tab
        self.Y = target

    def __getitem__(self, idx: int):
        x = {}
        if self.X_wide is not None:
            x["wide"] = self.X_wide[idx]
        if self.X_tab is not None:
            x["deeptabular"] = self.X_tab[idx]
        if self.Y is None:
            return x
        else:
            y = self.Y[idx]
            return x, y

    def __len__(self):
        return len(self.Y)


# ---- data: the adult census columns, synthetic; the preprocessors in numpy ----------------------------------------

CATS = {"workclass": 7, "education": 16, "marital_status": 7, "occupation": 14, "relationship": 6, "race": 5,
        "gender": 2, "capital_gain": 10, "capital_loss": 8, "native_country": 10}


def make_adult(seed):
    rng = np.random.RandomState(seed)
    df = {col: rng.randint(0, n, N_ROWS) for col, n in CATS.items()}
    df["capital_gain"] = np.where(rng.rand(N_ROWS) < 0.8, 0, df["capital_gain"])
    df["capital_loss"] = np.where(rng.rand(N_ROWS) < 0.85, 0, df["capital_loss"])
    df["age"] = rng.randint(17, 91, N_ROWS).astype(float)
    df["hours_per_week"] = np.clip(rng.normal(40, 12, N_ROWS), 1, 99).round()
    df["age_buckets"] = np.digitize(df["age"], [16, 25, 30, 35, 40, 45, 50, 55, 60, 91]) - 1
    w_edu = rng.normal(0, 1.2, CATS["education"])
    w_occ = rng.normal(0, 1.0, CATS["occupation"])
    w_rel = rng.normal(0, 0.8, CATS["relationship"])
    score = (w_edu[df["education"]] + w_occ[df["occupation"]] + w_rel[df["relationship"]]
             + 1.5 * (df["capital_gain"] > 0) + 0.04 * (df["age"] - 40) + 0.03 * (df["hours_per_week"] - 40) - 0.8)
    df["income_label"] = (rng.rand(N_ROWS) < 1 / (1 + np.exp(-2 * score))).astype(int)
    return df


def wide_preprocess(df, wide_cols, crossed_cols):
    """WidePreprocessor.fit_transform: crossed columns joined with '-', then every 'col_value' mapped to 1.."""
    cols = {c: df[c].astype(str) for c in wide_cols}
    for a, b in crossed_cols:
        cols[a + "-" + b] = np.char.add(np.char.add(df[a].astype(str), "-"), df[b].astype(str))
    glob_feature_list = []
    for col, vals in cols.items():
        glob_feature_list += [col + "_" + v for v in np.unique(vals)]
    encoding_dict = {v: i + 1 for i, v in enumerate(glob_feature_list)}
    X_wide = np.stack([[encoding_dict[col + "_" + v] for v in vals] for col, vals in cols.items()], 1)
    return X_wide.astype(np.int64)


def tab_preprocess(df, cat_embed_cols, continuous_cols):
    """TabPreprocessor(scale=True).fit_transform: label encoding from 1, fastai embedding sizes, standard scaling."""
    column_idx = {}
    cat_embed_input = []
    columns = []
    for col in cat_embed_cols:
        uniques = np.unique(df[col])
        columns.append(np.searchsorted(uniques, df[col]) + 1)
        n_cat = len(uniques)
        cat_embed_input.append((col, n_cat, int(min(600, round(1.6 * n_cat**0.56)))))
    for col in continuous_cols:
        x = df[col].astype(float)
        columns.append((x - x.mean()) / x.std())
    for i, col in enumerate(list(cat_embed_cols) + list(continuous_cols)):
        column_idx[col] = i
    return np.stack(columns, 1).astype(np.float32), column_idx, cat_embed_input


def stratified_split(target, val_split, seed):
    rng = np.random.RandomState(seed)
    idx_val = []
    for c in np.unique(target):
        idx = np.flatnonzero(target == c)
        idx_val += list(rng.choice(idx, int(round(len(idx) * val_split)), replace=False))
    is_val = np.zeros(len(target), dtype=bool)
    is_val[idx_val] = True
    idx_tr = rng.permutation(np.flatnonzero(~is_val))
    return idx_tr, rng.permutation(np.flatnonzero(is_val))


# ---- examples/scripts/adult_census.py + Trainer ----------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    df = make_adult(seed)

    # Define wide, crossed and deep tabular columns
    wide_cols = [
        "age_buckets",
        "education",
        "relationship",
        "workclass",
        "occupation",
        "native_country",
        "gender",
    ]
    crossed_cols = [("education", "occupation"), ("native_country", "occupation")]

    cat_embed_cols = [
        "workclass",
        "education",
        "marital_status",
        "occupation",
        "relationship",
        "race",
        "gender",
        "capital_gain",
        "capital_loss",
        "native_country",
    ]
    continuous_cols = ["age", "hours_per_week"]
    target = "income_label"
    target = df[target]

    if bug == "target_from_unshuffled_frame":
        # the rows shuffled for the features, the target left in the original order
        perm = np.random.RandomState(seed + 1).permutation(N_ROWS)
        df = {k: v[perm] for k, v in df.items()}

    X_wide = wide_preprocess(df, wide_cols, crossed_cols)
    X_tab, column_idx, cat_embed_input = tab_preprocess(df, cat_embed_cols, continuous_cols)

    wide = Wide(input_dim=np.unique(X_wide).shape[0], pred_dim=1)
    tab_mlp = TabMlp(
        column_idx=column_idx,
        cat_embed_input=cat_embed_input,
        continuous_cols=continuous_cols,
        mlp_hidden_dims=MLP_HIDDEN_DIMS,
        mlp_dropout=[0.2, 0.2],
    )
    model = WideDeep(wide=wide, deeptabular=tab_mlp)

    wide_opt = torch.optim.Adam(model.wide.parameters(), lr=0.01)
    if bug == "deep_optimizer_over_wide":
        # copy-paste slip: the deeptabular optimizer built over the wide component's parameters
        deep_opt = torch.optim.AdamW(model.wide.parameters(), lr=0.01)
    else:
        deep_opt = torch.optim.AdamW(model.deeptabular.parameters(), lr=0.01)
    wide_sch = torch.optim.lr_scheduler.StepLR(wide_opt, step_size=2)
    deep_sch = torch.optim.lr_scheduler.StepLR(deep_opt, step_size=3)
    optimizers = {"wide": wide_opt, "deeptabular": deep_opt}
    schedulers = {"wide": wide_sch, "deeptabular": deep_sch}
    initializers = {"wide": KaimingNormal, "deeptabular": XavierNormal}

    # Trainer(model, objective="binary", optimizers=..., lr_schedulers=..., initializers=...)
    MultipleInitializer(initializers, verbose=False).apply(model)
    if bug == "regression_objective":
        # objective="regression" for the 0/1 income label: MSELoss on the raw logit
        loss_fn = nn.MSELoss()
    else:
        loss_fn = nn.BCEWithLogitsLoss(pos_weight=None)
    optimizer = MultipleOptimizer(optimizers)
    lr_scheduler = MultipleLRScheduler(schedulers)
    method = "binary"

    # fit(X_wide=X_wide, X_tab=X_tab, target=target, n_epochs=2, batch_size=256, val_split=0.2)
    idx_tr, idx_val = stratified_split(target, 0.2, seed)
    train_set = WideDeepDataset(X_wide=X_wide[idx_tr], X_tab=X_tab[idx_tr], target=target[idx_tr])
    eval_set = WideDeepDataset(X_wide=X_wide[idx_val], X_tab=X_tab[idx_val], target=target[idx_val])
    train_loader = DataLoader(dataset=train_set, batch_size=BATCH_SIZE, num_workers=0)
    eval_loader = DataLoader(dataset=eval_set, batch_size=BATCH_SIZE, num_workers=0)

    def _train_step(data, target, batch_idx):
        model.train()

        X = {k: v for k, v in data.items()}
        y = (
            target.view(-1, 1).float()
            if method not in ["multiclass", "qregression", "multitarget"]
            else target
        )

        optimizer.zero_grad()

        y_pred = model(X)
        loss = loss_fn(y_pred, y)

        loss.backward()
        optimizer.step()
        return loss

    def _eval_step(data, target):
        model.eval()
        with torch.no_grad():
            X = {k: v for k, v in data.items()}
            y = (
                target.view(-1, 1).float()
                if method not in ["multiclass", "qregression", "multitarget"]
                else target
            )
            y_pred = model(X)
            loss = loss_fn(y_pred, y)
        model.train()
        return loss.item()

    state = {"epoch_iter": iter(train_loader), "batch_idx": 0}

    def train_step():
        try:
            data, targett = next(state["epoch_iter"])
        except StopIteration:
            # end of epoch: _eval_epoch, then LRShedulerCallback.on_epoch_end
            for data, targett in eval_loader:
                _eval_step(data, targett)
            lr_scheduler.step()
            state["epoch_iter"], state["batch_idx"] = iter(train_loader), 0
            data, targett = next(state["epoch_iter"])
        loss = _train_step(data, targett, state["batch_idx"])
        state["batch_idx"] += 1
        return loss.detach()

    first_x, first_y = next(iter(DataLoader(dataset=train_set, batch_size=BATCH_SIZE)))

    def program_loss(y_pred, target):
        return loss_fn(y_pred, target.view(-1, 1).float())

    def eval_fn(model, batch):
        (X,), y = batch
        return _eval_step(X, y)

    return Program(name="widedeep_adult", model=model, batch=((first_x,), first_y), loss_fn=program_loss,
                   optimizer=deep_opt, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the deeptabular optimizer built over model.wide.parameters() (classic copy-paste slip): the MLP and the
    # categorical embeddings are never updated, the wide part gets two optimizers.
    Bug("deep_optimizer_over_wide", functools.partial(_build, bug="deep_optimizer_over_wide"), "four_structures",
        ("deeptabular",)),
    # objective="regression" for the binary income label (classic): MSE on the raw logit instead of BCE with logits.
    Bug("regression_objective", functools.partial(_build, bug="regression_objective"), "learning_ledger",
        ("OBJECTIVE",)),
    # the feature rows shuffled but the target taken from the unshuffled frame (classic): labels misaligned.
    Bug("target_from_unshuffled_frame", functools.partial(_build, bug="target_from_unshuffled_frame"),
        "learning_ledger", ("TASK",)),
]
