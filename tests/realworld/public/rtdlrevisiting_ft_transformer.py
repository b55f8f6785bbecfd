# ruff: noqa: PLR0402, PLR2044, UP006, UP045
"""FT-Transformer (feature tokenizer + [CLS] transformer) on a binary tabular task, from "Revisiting Deep Learning
Models for Tabular Data".

Source: https://github.com/Yura52/tabular-dl-revisiting-models (now yandex-research/rtdl-revisiting-models), commit
e8b1193fac6091f8749f00138cc20f498f034798, files ``bin/ft_transformer.py`` (Tokenizer, MultiheadAttention, Transformer,
the training script), ``lib/deep.py`` (reglu, get_activation_fn, get_nonglu_activation_fn, make_optimizer,
IndexLoader, train_with_auto_virtual_batch, is_oom_exception), with the default configuration
``output/adult/ft_transformer/default/0.toml``. License: MIT (Copyright (c) 2022 Authors of "Revisiting Deep Learning
Models for Tabular Data"; full text in LICENSES/Yura52-tabular-dl-revisiting-models.txt).

Kept as written: the model classes; the adult default config (reglu, prenormalization, kaiming initialization,
attention_dropout 0.2, ffn_dropout 0.1, residual_dropout 0.0, n_heads 8, n_layers 3, d_ffn_factor 4/3, token_bias,
no kv compression); AdamW with lr 1e-4 and weight_decay 1e-5 over two groups (no decay on the tokenizer, norms and
biases, ``needs_wd``); ``F.binary_cross_entropy_with_logits`` (binclass); the epoch loop body (model.train(), one
``train_with_auto_virtual_batch`` call per batch of a shuffled IndexLoader); the evaluation in eval mode.

Deviations:
- the adult dataset (``lib.Dataset.from_dir``, quantile normalization) is replaced by synthetic data made from the
  seed: 6 numeric features drawn standard normal (what the quantile transform outputs) and 3 categorical features
  (cardinalities 5, 8, 3), 512 train / 256 val rows; the label is a fixed rule of both (``label_rule``).
- sizes for 2 CPU cores: d_token 192 -> 32 (8 heads of 4), batch_size 256 -> 64, eval_batch_size 8192 -> 256.
- ``train_with_auto_virtual_batch`` is called with chunk_size = batch_size // 2: the virtual-batch path the script
  switches to after a CUDA out-of-memory error (each chunk's loss scaled by ``len(chunk) / batch_size``, one
  ``optimizer.step()``). No OOM can happen here, so the split is set from the start.
- the ``zero`` library is written out: ``zero.iloader`` -> a seeded ``torch.randperm`` split into batches,
  ``zero.iter_batches`` -> ``Tensor.split``; ``zero.get_random_state``/``set_random_state`` (restoring the RNGs
  before an OOM retry) are dropped, as no retry happens.
- ``make_optimizer``'s table keeps adam/adamw/sgd (RAdam and AdaBelief, defined in lib/deep.py, are not used by
  this config); ``IndexLoader`` takes a seeded generator for its shuffle.
- the print of the category embedding shape, the checkpointing, patience and stats files are dropped; the
  evaluation reports accuracy from the logits (``lib.calculate_metrics`` for binclass).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import typing as ty

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as nn_init
import torch.optim as optim
from torch import Tensor

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

N_NUM, CATEGORIES = 6, [5, 8, 3]
N_TRAIN, N_VAL = 512, 256
CONFIG = {
    "model": {"activation": "reglu", "attention_dropout": 0.2, "d_ffn_factor": 1.333333333333333, "d_token": 32,
              "ffn_dropout": 0.1, "initialization": "kaiming", "n_heads": 8, "n_layers": 3, "prenormalization": True,
              "residual_dropout": 0.0},
    "training": {"batch_size": 64, "eval_batch_size": 256, "lr": 0.0001, "optimizer": "adamw", "weight_decay": 1e-05},
}


# ---------------------------------------------------------------- lib/deep.py
def reglu(x: Tensor) -> Tensor:
    a, b = x.chunk(2, dim=-1)
    return a * F.relu(b)


def geglu(x: Tensor) -> Tensor:
    a, b = x.chunk(2, dim=-1)
    return a * F.gelu(b)


def get_activation_fn(name: str) -> ty.Callable[[Tensor], Tensor]:
    return (
        reglu
        if name == 'reglu'
        else geglu
        if name == 'geglu'
        else torch.sigmoid
        if name == 'sigmoid'
        else getattr(F, name)
    )


def get_nonglu_activation_fn(name: str) -> ty.Callable[[Tensor], Tensor]:
    return (
        F.relu
        if name == 'reglu'
        else F.gelu
        if name == 'geglu'
        else get_activation_fn(name)
    )


def make_optimizer(
    optimizer: str,
    parameter_groups,
    lr: float,
    weight_decay: float,
) -> optim.Optimizer:
    Optimizer = {
        'adam': optim.Adam,
        'adamw': optim.AdamW,
        'sgd': optim.SGD,
    }[optimizer]
    momentum = (0.9,) if Optimizer is optim.SGD else ()
    return Optimizer(parameter_groups, lr, *momentum, weight_decay=weight_decay)


class IndexLoader:
    def __init__(
        self, train_size: int, batch_size: int, shuffle: bool, device: torch.device, generator=None
    ) -> None:
        self._train_size = train_size
        self._batch_size = batch_size
        self._shuffle = shuffle
        self._device = device
        self._generator = generator

    def __len__(self) -> int:
        return math.ceil(self._train_size / self._batch_size)

    def __iter__(self):
        # zero.iloader(train_size, batch_size, shuffle=...), written out
        order = (torch.randperm(self._train_size, generator=self._generator) if self._shuffle
                 else torch.arange(self._train_size))
        indices = list(order.split(self._batch_size))
        return iter(torch.cat(indices).to(self._device).split(self._batch_size))


def is_oom_exception(err: RuntimeError) -> bool:
    return any(
        x in str(err)
        for x in [
            'CUDA out of memory',
            'CUBLAS_STATUS_ALLOC_FAILED',
            'CUDA error: out of memory',
        ]
    )


def train_with_auto_virtual_batch(
    optimizer,
    loss_fn,
    step,
    batch,
    chunk_size: int,
) -> ty.Tuple[Tensor, int]:
    batch_size = len(batch)
    while chunk_size != 0:
        try:
            optimizer.zero_grad()
            if batch_size <= chunk_size:
                loss = loss_fn(*step(batch))
                loss.backward()
            else:
                loss = None
                for chunk in batch.split(chunk_size):
                    chunk_loss = loss_fn(*step(chunk))
                    chunk_loss = chunk_loss * (len(chunk) / batch_size)
                    chunk_loss.backward()
                    if loss is None:
                        loss = chunk_loss.detach()
                    else:
                        loss += chunk_loss.detach()
        except RuntimeError as err:
            if not is_oom_exception(err):
                raise
            chunk_size //= 2
        else:
            break
    if not chunk_size:
        raise RuntimeError('Not enough memory even for batch_size=1')
    optimizer.step()
    return loss, chunk_size  # type: ignore[code]


# ---------------------------------------------------------------- bin/ft_transformer.py
class Tokenizer(nn.Module):
    category_offsets: ty.Optional[Tensor]

    def __init__(
        self,
        d_numerical: int,
        categories: ty.Optional[ty.List[int]],
        d_token: int,
        bias: bool,
    ) -> None:
        super().__init__()
        if categories is None:
            d_bias = d_numerical
            self.category_offsets = None
            self.category_embeddings = None
        else:
            d_bias = d_numerical + len(categories)
            category_offsets = torch.tensor([0] + categories[:-1]).cumsum(0)
            self.register_buffer('category_offsets', category_offsets)
            self.category_embeddings = nn.Embedding(sum(categories), d_token)
            nn_init.kaiming_uniform_(self.category_embeddings.weight, a=math.sqrt(5))

        # take [CLS] token into account
        self.weight = nn.Parameter(Tensor(d_numerical + 1, d_token))
        self.bias = nn.Parameter(Tensor(d_bias, d_token)) if bias else None
        # The initialization is inspired by nn.Linear
        nn_init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            nn_init.kaiming_uniform_(self.bias, a=math.sqrt(5))

    @property
    def n_tokens(self) -> int:
        return len(self.weight) + (
            0 if self.category_offsets is None else len(self.category_offsets)
        )

    def forward(self, x_num: Tensor, x_cat: ty.Optional[Tensor]) -> Tensor:
        x_some = x_num if x_cat is None else x_cat
        assert x_some is not None
        x_num = torch.cat(
            [torch.ones(len(x_some), 1, device=x_some.device)]  # [CLS]
            + ([] if x_num is None else [x_num]),
            dim=1,
        )
        x = self.weight[None] * x_num[:, :, None]
        if x_cat is not None:
            x = torch.cat(
                [x, self.category_embeddings(x_cat + self.category_offsets[None])],
                dim=1,
            )
        if self.bias is not None:
            bias = torch.cat(
                [
                    torch.zeros(1, self.bias.shape[1], device=x.device),
                    self.bias,
                ]
            )
            x = x + bias[None]
        return x


class MultiheadAttention(nn.Module):
    def __init__(
        self, d: int, n_heads: int, dropout: float, initialization: str
    ) -> None:
        if n_heads > 1:
            assert d % n_heads == 0
        assert initialization in ['xavier', 'kaiming']

        super().__init__()
        self.W_q = nn.Linear(d, d)
        self.W_k = nn.Linear(d, d)
        self.W_v = nn.Linear(d, d)
        self.W_out = nn.Linear(d, d) if n_heads > 1 else None
        self.n_heads = n_heads
        self.dropout = nn.Dropout(dropout) if dropout else None

        for m in [self.W_q, self.W_k, self.W_v]:
            if initialization == 'xavier' and (n_heads > 1 or m is not self.W_v):
                # gain is needed since W_qkv is represented with 3 separate layers
                nn_init.xavier_uniform_(m.weight, gain=1 / math.sqrt(2))
            nn_init.zeros_(m.bias)
        if self.W_out is not None:
            nn_init.zeros_(self.W_out.bias)

    def _reshape(self, x: Tensor) -> Tensor:
        batch_size, n_tokens, d = x.shape
        d_head = d // self.n_heads
        return (
            x.reshape(batch_size, n_tokens, self.n_heads, d_head)
            .transpose(1, 2)
            .reshape(batch_size * self.n_heads, n_tokens, d_head)
        )

    def forward(
        self,
        x_q: Tensor,
        x_kv: Tensor,
        key_compression: ty.Optional[nn.Linear],
        value_compression: ty.Optional[nn.Linear],
    ) -> Tensor:
        q, k, v = self.W_q(x_q), self.W_k(x_kv), self.W_v(x_kv)
        for tensor in [q, k, v]:
            assert tensor.shape[-1] % self.n_heads == 0
        if key_compression is not None:
            assert value_compression is not None
            k = key_compression(k.transpose(1, 2)).transpose(1, 2)
            v = value_compression(v.transpose(1, 2)).transpose(1, 2)
        else:
            assert value_compression is None

        batch_size = len(q)
        d_head_key = k.shape[-1] // self.n_heads
        d_head_value = v.shape[-1] // self.n_heads
        n_q_tokens = q.shape[1]

        q = self._reshape(q)
        k = self._reshape(k)
        attention = F.softmax(q @ k.transpose(1, 2) / math.sqrt(d_head_key), dim=-1)
        if self.dropout is not None:
            attention = self.dropout(attention)
        x = attention @ self._reshape(v)
        x = (
            x.reshape(batch_size, self.n_heads, n_q_tokens, d_head_value)
            .transpose(1, 2)
            .reshape(batch_size, n_q_tokens, self.n_heads * d_head_value)
        )
        if self.W_out is not None:
            x = self.W_out(x)
        return x


class Transformer(nn.Module):
    """Transformer.

    References:
    - https://pytorch.org/docs/stable/generated/torch.nn.Transformer.html
    - https://github.com/facebookresearch/pytext/tree/master/pytext/models/representations/transformer
    - https://github.com/pytorch/fairseq/blob/1bba712622b8ae4efb3eb793a8a40da386fe11d0/examples/linformer/linformer_src/modules/multihead_linear_attention.py#L19
    """

    def __init__(
        self,
        *,
        # tokenizer
        d_numerical: int,
        categories: ty.Optional[ty.List[int]],
        token_bias: bool,
        # transformer
        n_layers: int,
        d_token: int,
        n_heads: int,
        d_ffn_factor: float,
        attention_dropout: float,
        ffn_dropout: float,
        residual_dropout: float,
        activation: str,
        prenormalization: bool,
        initialization: str,
        # linformer
        kv_compression: ty.Optional[float],
        kv_compression_sharing: ty.Optional[str],
        #
        d_out: int,
    ) -> None:
        assert (kv_compression is None) ^ (kv_compression_sharing is not None)

        super().__init__()
        self.tokenizer = Tokenizer(d_numerical, categories, d_token, token_bias)
        n_tokens = self.tokenizer.n_tokens

        def make_kv_compression():
            assert kv_compression
            compression = nn.Linear(
                n_tokens, int(n_tokens * kv_compression), bias=False
            )
            if initialization == 'xavier':
                nn_init.xavier_uniform_(compression.weight)
            return compression

        self.shared_kv_compression = (
            make_kv_compression()
            if kv_compression and kv_compression_sharing == 'layerwise'
            else None
        )

        def make_normalization():
            return nn.LayerNorm(d_token)

        d_hidden = int(d_token * d_ffn_factor)
        self.layers = nn.ModuleList([])
        for layer_idx in range(n_layers):
            layer = nn.ModuleDict(
                {
                    'attention': MultiheadAttention(
                        d_token, n_heads, attention_dropout, initialization
                    ),
                    'linear0': nn.Linear(
                        d_token, d_hidden * (2 if activation.endswith('glu') else 1)
                    ),
                    'linear1': nn.Linear(d_hidden, d_token),
                    'norm1': make_normalization(),
                }
            )
            if not prenormalization or layer_idx:
                layer['norm0'] = make_normalization()
            if kv_compression and self.shared_kv_compression is None:
                layer['key_compression'] = make_kv_compression()
                if kv_compression_sharing == 'headwise':
                    layer['value_compression'] = make_kv_compression()
                else:
                    assert kv_compression_sharing == 'key-value'
            self.layers.append(layer)

        self.activation = get_activation_fn(activation)
        self.last_activation = get_nonglu_activation_fn(activation)
        self.prenormalization = prenormalization
        self.last_normalization = make_normalization() if prenormalization else None
        self.ffn_dropout = ffn_dropout
        self.residual_dropout = residual_dropout
        self.head = nn.Linear(d_token, d_out)

    def _get_kv_compressions(self, layer):
        return (
            (self.shared_kv_compression, self.shared_kv_compression)
            if self.shared_kv_compression is not None
            else (layer['key_compression'], layer['value_compression'])
            if 'key_compression' in layer and 'value_compression' in layer
            else (layer['key_compression'], layer['key_compression'])
            if 'key_compression' in layer
            else (None, None)
        )

    def _start_residual(self, x, layer, norm_idx):
        x_residual = x
        if self.prenormalization:
            norm_key = f'norm{norm_idx}'
            if norm_key in layer:
                x_residual = layer[norm_key](x_residual)
        return x_residual

    def _end_residual(self, x, x_residual, layer, norm_idx):
        if self.residual_dropout:
            x_residual = F.dropout(x_residual, self.residual_dropout, self.training)
        x = x + x_residual
        if not self.prenormalization:
            x = layer[f'norm{norm_idx}'](x)
        return x

    def forward(self, x_num: Tensor, x_cat: ty.Optional[Tensor]) -> Tensor:
        x = self.tokenizer(x_num, x_cat)

        for layer_idx, layer in enumerate(self.layers):
            is_last_layer = layer_idx + 1 == len(self.layers)
            layer = ty.cast(ty.Dict[str, nn.Module], layer)

            x_residual = self._start_residual(x, layer, 0)
            x_residual = layer['attention'](
                # for the last attention, it is enough to process only [CLS]
                (x_residual[:, :1] if is_last_layer else x_residual),
                x_residual,
                *self._get_kv_compressions(layer),
            )
            if is_last_layer:
                x = x[:, : x_residual.shape[1]]
            x = self._end_residual(x, x_residual, layer, 0)

            x_residual = self._start_residual(x, layer, 1)
            x_residual = layer['linear0'](x_residual)
            x_residual = self.activation(x_residual)
            if self.ffn_dropout:
                x_residual = F.dropout(x_residual, self.ffn_dropout, self.training)
            x_residual = layer['linear1'](x_residual)
            x = self._end_residual(x, x_residual, layer, 1)

        assert x.shape[1] == 1
        x = x[:, 0]
        if self.last_normalization is not None:
            x = self.last_normalization(x)
        x = self.last_activation(x)
        x = self.head(x)
        x = x.squeeze(-1)
        return x


# ---------------------------------------------------------------- synthetic data
def label_rule(x_num: Tensor, x_cat: Tensor) -> Tensor:
    """The target: a fixed interaction of numeric and categorical features."""
    cat0 = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0])
    cat1 = torch.linspace(-1.0, 1.0, CATEGORIES[1])
    logit = 1.5 * x_num[:, 0] - x_num[:, 1] * x_num[:, 2] + cat0[x_cat[:, 0]] + cat1[x_cat[:, 1]]
    return (logit > 0).float()


def make_data(seed: int, bug=None):
    g = torch.Generator().manual_seed(seed)
    X_num, X_cat, Y = {}, {}, {}
    for part, n in (("train", N_TRAIN), ("val", N_VAL)):
        X_num[part] = torch.randn(n, N_NUM, generator=g)
        X_cat[part] = torch.stack([torch.randint(0, c, (n,), generator=g) for c in CATEGORIES], dim=1)
        Y[part] = label_rule(X_num[part], X_cat[part])
    if bug == "labels_misaligned":  # the rows are shuffled after the labels were taken: labels no longer match
        perm = torch.randperm(N_TRAIN, generator=g)
        X_num["train"], X_cat["train"] = X_num["train"][perm], X_cat["train"][perm]
    return X_num, X_cat, Y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = CONFIG
    args['model'].setdefault('token_bias', True)
    args['model'].setdefault('kv_compression', None)
    args['model'].setdefault('kv_compression_sharing', None)
    X_num, X_cat, Y_device = make_data(seed, bug)
    device = torch.device('cpu')

    train_size = N_TRAIN
    batch_size = args['training']['batch_size']
    chunk_size = batch_size // 2

    loss_fn = F.binary_cross_entropy_with_logits
    if bug == "sigmoid_before_bce_with_logits":
        loss_fn = lambda logits, y: F.binary_cross_entropy_with_logits(torch.sigmoid(logits), y)
    model = Transformer(
        d_numerical=X_num['train'].shape[1],
        categories=CATEGORIES,
        d_out=1,
        **args['model'],
    ).to(device)

    def needs_wd(name):
        return all(x not in name for x in ['tokenizer', '.norm', '.bias'])

    for x in ['tokenizer', '.norm', '.bias']:
        assert any(x in a for a in (b[0] for b in model.named_parameters()))
    parameters_with_wd = [v for k, v in model.named_parameters() if needs_wd(k)]
    parameters_without_wd = [v for k, v in model.named_parameters() if not needs_wd(k)]
    optimizer = make_optimizer(
        args['training']['optimizer'],
        (
            [
                {'params': parameters_with_wd},
                {'params': parameters_without_wd, 'weight_decay': 0.0},
            ]
        ),
        args['training']['lr'],
        args['training']['weight_decay'],
    )

    gen = torch.Generator().manual_seed(seed)
    stream = IndexLoader(train_size, batch_size, True, device, generator=gen)

    def apply_model(part, idx):
        return model(
            None if X_num is None else X_num[part][idx],
            None if X_cat is None else X_cat[part][idx],
        )

    state = {"epoch": None}

    def next_batch_idx():
        while True:
            if state["epoch"] is None:
                state["epoch"] = iter(stream)
                model.train()
            try:
                return next(state["epoch"])
            except StopIteration:
                state["epoch"] = None

    def train_step():
        nonlocal chunk_size
        batch_idx = next_batch_idx()
        loss, new_chunk_size = train_with_auto_virtual_batch(
            optimizer,
            loss_fn,
            lambda x: (apply_model('train', x), Y_device['train'][x]),
            batch_idx,
            chunk_size or batch_size,
        )
        if new_chunk_size and new_chunk_size < (chunk_size or batch_size):
            chunk_size = new_chunk_size
        return loss

    @torch.no_grad()
    def evaluate(model, batch):
        model.eval()
        predictions = torch.cat([
            model(X_num['val'][idx], X_cat['val'][idx])
            for idx in IndexLoader(N_VAL, args['training']['eval_batch_size'], False, device)
        ])
        return ((predictions > 0).float() == Y_device['val']).float().mean().item()

    class Batches:
        """The training batches of one epoch, as (inputs, targets)."""

        def __iter__(self):
            for idx in IndexLoader(train_size, batch_size, True, device, generator=torch.Generator().manual_seed(seed)):
                yield ({"x_num": X_num['train'][idx], "x_cat": X_cat['train'][idx]}, Y_device['train'][idx])

        def __len__(self):
            return len(stream)

    first = next(iter(Batches()))

    def task_probe(inputs):
        return label_rule(inputs["x_num"], inputs["x_cat"])

    return Program(name="rtdlrevisiting_ft_transformer", model=model, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task_probe=task_probe, loader=Batches())


build = functools.partial(_build, bug=None)

BUGS = [
    # a sigmoid before F.binary_cross_entropy_with_logits: probabilities are squashed a second time (classic).
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # the training rows are reordered after the labels were computed: features and labels no longer match (classic).
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
]
