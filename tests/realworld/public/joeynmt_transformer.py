"""Joey NMT's Transformer encoder-decoder (pre-layer-norm layers, scaled and tied embeddings, tied softmax, xavier
initialization, the decoder's subsequent mask) trained by Joey NMT's ``TrainManager``: each micro-batch is a
``Batch`` (source with ``</s>``, target ``<s> ... </s>``; ``trg_input`` drops the last token, ``trg`` the first;
``trg_mask`` marks non-pad targets), sorted by source length, ``model(return_type="loss", **vars(batch))``
(``log_softmax`` then ``XentLoss``: label-smoothed KL divergence, summed, padding rows zeroed), normalized by the
number of sequences and the ``batch_multiplier``, ``backward``; every ``batch_multiplier`` micro-batches: clip the
gradient norm, AdamW step, ``model.zero_grad()``; ``ReduceLROnPlateau`` stepped after validations.

Source: https://github.com/joeynmt/joeynmt
Commit: cdc4d03d430a1b0f29793a0d95743c5e72ae2f6c
Files: joeynmt/model.py, joeynmt/transformer_layers.py, joeynmt/encoders.py, joeynmt/decoders.py,
  joeynmt/embeddings.py, joeynmt/initialization.py, joeynmt/loss.py, joeynmt/batch.py, joeynmt/builders.py,
  joeynmt/helpers.py (subsequent_mask), joeynmt/vocabulary.py (sentences_to_ids), joeynmt/training.py
  (train_and_validate, _train_step), configs/transformer_reverse.yaml, configs/iwslt14_deen_bpe.yaml
License: Apache-2.0 (full text in LICENSES/joeynmt-joeynmt.txt)
Domain: neural machine translation (Transformer, label smoothing, gradient accumulation)

Deviations from the original:
- configuration: the model and training sections of ``configs/transformer_reverse.yaml`` as written (2+2 layers,
  4 heads, hidden 64, ff 256, dropout 0.1, pre layer norm, tied embeddings and softmax, xavier_uniform; AdamW lr
  0.001, weight decay 0, ``clip_grad_norm`` 1.0, 12 sentences per batch, ``batch_multiplier`` 2, plateau
  scheduling with patience 5 and factor 0.5, normalization "batch" and Adam betas (0.9, 0.999) by the config
  defaults), except ``label_smoothing: 0.1`` taken from ``configs/iwslt14_deen_bpe.yaml`` (the reverse config
  leaves it at 0.0, which would use NLLLoss with ``ignore_index`` instead);
- data: the reverse task's files are replaced by synthetic pairs made from ``seed``: a shared word-level
  vocabulary of the four specials and 20 words; a source is 3-10 random words, its target the same positions
  mapped through a fixed random permutation of the words (a learnable token mapping). Sentences go through
  ``Vocabulary.sentences_to_ids`` (written out) and ``Batch`` as in ``collate_fn``; Joey's
  ``SentenceBatchSampler`` is a shuffled ``DataLoader`` with 12 sentences per batch;
- code that is not on this path is left out: the recurrent encoder/decoder, prompts (``src_prompt_mask`` stays
  None), DataParallel/DDP (``n_gpu`` 1, ``ddp_reduce`` the identity), fp16 autocast and the GradScaler (CPU),
  checkpoints, logging, pretrained-embedding loading, the other schedulers and optimizers; the ``Vocabulary``
  keeps only the index attributes ``Model`` reads;
- one ``train_step`` is one update of ``train_and_validate`` (``batch_multiplier`` micro-batches through
  ``_train_step``, clip, step, zero_grad) and returns the summed normalized loss Joey logs; validation (greedy
  decoding and BLEU) is not run, so the plateau scheduler (stepped only after a validation) does not step: the
  ``eval_fn`` is the validation loss (``compute_loss=True`` in ``predict``) summed over a held-out batch, normalized
  the same way;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF013, UP006, UP034, UP035, UP045  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from functools import partial
from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import Variable
from torch.nn.modules.loss import _Loss
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CFG = {
    "training": {
        "optimizer": "adamw",
        "adam_betas": [0.9, 0.999],
        "learning_rate": 0.001,
        "weight_decay": 0.0,
        "clip_grad_val": None,
        "clip_grad_norm": 1.0,
        "batch_size": 12,
        "batch_multiplier": 2,
        "normalization": "batch",
        "label_smoothing": 0.1,
        "scheduling": "plateau",
        "patience": 5,
        "decrease_factor": 0.5,
    },
    "model": {
        "initializer": "xavier_uniform",
        "init_gain": 1.0,
        "bias_initializer": "zeros",
        "embed_initializer": "xavier_uniform",
        "embed_init_gain": 1.0,
        "tied_embeddings": True,
        "tied_softmax": True,
        "encoder": {"type": "transformer", "num_layers": 2, "num_heads": 4,
                    "embeddings": {"embedding_dim": 64, "scale": True}, "hidden_size": 64, "ff_size": 256,
                    "dropout": 0.1, "layer_norm": "pre", "activation": "relu"},
        "decoder": {"type": "transformer", "num_layers": 2, "num_heads": 4,
                    "embeddings": {"embedding_dim": 64, "scale": True}, "hidden_size": 64, "ff_size": 256,
                    "dropout": 0.1, "layer_norm": "pre", "activation": "relu"},
    },
}
UNK, PAD, BOS, EOS = 0, 1, 2, 3
N_WORDS = 20


# ---- joeynmt/helpers.py, joeynmt/builders.py -------------------------------------------------------------------

def subsequent_mask(size: int) -> Tensor:
    """
    Mask out subsequent positions (to prevent attending to future positions)
    Transformer helper function.
    """
    ones = torch.ones(size, size, dtype=torch.bool)
    return torch.tril(ones, out=ones).unsqueeze(0)


def build_activation(activation: str = "relu"):
    if activation == "relu":
        return nn.ReLU
    elif activation == "gelu":
        return nn.GELU
    raise ValueError(activation)


def build_gradient_clipper(cfg):
    clip_grad_fun = None
    if cfg["clip_grad_val"] is not None:
        clip_grad_fun = partial(
            nn.utils.clip_grad_value_, clip_value=cfg["clip_grad_val"]
        )
    elif cfg["clip_grad_norm"] is not None:
        clip_grad_fun = partial(
            nn.utils.clip_grad_norm_, max_norm=cfg["clip_grad_norm"]
        )
    return clip_grad_fun


def build_optimizer(cfg, parameters):
    optimizer_name = cfg.get("optimizer", "sgd").lower()

    kwargs = {
        "lr": cfg.get("learning_rate", 3.0e-4),
        "weight_decay": cfg.get("weight_decay", 0),
    }
    assert optimizer_name == "adamw"
    kwargs["betas"] = cfg.get("adam_betas", (0.0, 0.999))
    optimizer = torch.optim.AdamW(parameters, **kwargs)
    return optimizer


def build_scheduler(cfg, optimizer, scheduler_mode, hidden_size=0):
    scheduler_name = cfg.get("scheduling", None)
    assert scheduler_name == "plateau"
    # learning rate scheduler
    kwargs = {
        "mode": scheduler_mode,
        "threshold_mode": "abs",
        "eps": 0.0,
        "factor": cfg.get("decrease_factor", 0.1),
        "patience": cfg.get("patience", 10),
    }
    scheduler = ReduceLROnPlateau(optimizer=optimizer, **kwargs)
    # scheduler step is executed after every validation
    scheduler_step_at = "validation"
    return scheduler, scheduler_step_at


# ---- joeynmt/loss.py -------------------------------------------------------------------------------------------

class XentLoss(nn.Module):
    """
    Cross-Entropy Loss with optional label smoothing
    """

    def __init__(self, pad_index: int, smoothing: float = 0.0, bug=None):
        super().__init__()
        self.smoothing = smoothing
        self.pad_index = pad_index
        self.bug = bug
        self.criterion: _Loss  # (type annotation)
        if self.smoothing <= 0.0:
            # standard xent loss
            self.criterion = nn.NLLLoss(ignore_index=self.pad_index, reduction="sum")
        else:
            # custom label-smoothed loss, computed with KL divergence loss
            self.criterion = nn.KLDivLoss(reduction="sum")

    def _smooth_targets(self, targets: Tensor, vocab_size: int) -> Variable:
        # batch*seq_len x vocab_size
        smooth_dist = targets.new_zeros((targets.size(0), vocab_size)).float()
        # fill distribution uniformly with smoothing
        smooth_dist.fill_(self.smoothing / (vocab_size - 2))
        # assign true label the probability of 1-smoothing ("confidence")
        smooth_dist.scatter_(1, targets.unsqueeze(1).data, 1.0 - self.smoothing)
        # give padding probability of 0 everywhere
        smooth_dist[:, self.pad_index] = 0
        # masking out padding area (sum of probabilities for padding area = 0)
        padding_positions = torch.nonzero(
            targets.data == self.pad_index, as_tuple=False
        )
        if len(padding_positions) > 0 and self.bug != "padding_rows_not_zeroed":
            smooth_dist.index_fill_(0, padding_positions.squeeze(), 0.0)
        return Variable(smooth_dist, requires_grad=False)

    def _reshape(self, log_probs: Tensor, targets: Tensor) -> Tensor:
        vocab_size = log_probs.size(-1)

        # reshape log_probs to (batch*seq_len x vocab_size)
        log_probs_flat = log_probs.contiguous().view(-1, vocab_size)

        if self.smoothing > 0:
            targets_flat = self._smooth_targets(
                targets=targets.contiguous().view(-1), vocab_size=vocab_size
            )
            # targets: distributions with batch*seq_len x vocab_size
            assert log_probs_flat.size() == targets_flat.size(), (
                log_probs.size(),
                targets_flat.size(),
            )
        else:
            # targets: indices with batch*seq_len
            targets_flat = targets.contiguous().view(-1)
            assert log_probs_flat.size(0) == targets_flat.size(0), (
                log_probs.size(0),
                targets_flat.size(0),
            )

        return log_probs_flat, targets_flat

    def forward(self, log_probs: Tensor, **kwargs) -> Tensor:
        assert "trg" in kwargs
        log_probs, targets = self._reshape(log_probs, kwargs["trg"])

        # compute loss
        logits = self.criterion(log_probs, targets)
        return logits


# ---- joeynmt/embeddings.py -------------------------------------------------------------------------------------

class Embeddings(nn.Module):
    """
    Simple embeddings class
    """

    def __init__(
        self,
        embedding_dim: int = 64,
        scale: bool = False,
        vocab_size: int = 0,
        padding_idx: int = 1,
        freeze: bool = False,
        **kwargs,
    ):
        # pylint: disable=unused-argument
        super().__init__()
        self.embedding_dim = embedding_dim
        self.scale = scale
        self.vocab_size = vocab_size
        self.lut = nn.Embedding(vocab_size, self.embedding_dim, padding_idx=padding_idx)

    def forward(self, x: Tensor) -> Tensor:
        if self.scale:
            return self.lut(x) * math.sqrt(self.embedding_dim)
        return self.lut(x)


# ---- joeynmt/transformer_layers.py -----------------------------------------------------------------------------

class MultiHeadedAttention(nn.Module):
    """
    Multi-Head Attention module from "Attention is All You Need"

    Implementation modified from OpenNMT-py.
    https://github.com/OpenNMT/OpenNMT-py
    """

    def __init__(self, num_heads: int, size: int, dropout: float = 0.1) -> None:
        super().__init__()

        assert size % num_heads == 0

        self.head_size = head_size = size // num_heads
        self.model_size = size
        self.num_heads = num_heads

        self.k_layer = nn.Linear(size, num_heads * head_size)
        self.v_layer = nn.Linear(size, num_heads * head_size)
        self.q_layer = nn.Linear(size, num_heads * head_size)

        self.output_layer = nn.Linear(size, size)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        k: Tensor,
        v: Tensor,
        q: Tensor,
        mask: Optional[Tensor] = None,
        return_weights: Optional[bool] = None,
    ):
        batch_size = k.size(0)
        key_len = k.size(1)
        query_len = q.size(1)

        # project the queries (q), keys (k), and values (v)
        k = self.k_layer(k)
        v = self.v_layer(v)
        q = self.q_layer(q)

        # reshape q, k, v for our computation to [batch_size, num_heads, ..]
        k = k.view(batch_size, -1, self.num_heads, self.head_size).transpose(1, 2)
        v = v.view(batch_size, -1, self.num_heads, self.head_size).transpose(1, 2)
        q = q.view(batch_size, -1, self.num_heads, self.head_size).transpose(1, 2)

        # compute scores
        q = q / math.sqrt(self.head_size)

        # [batch_size, num_heads, query_len, key_len]
        scores = torch.matmul(q, k.transpose(2, 3))

        # apply the mask (if we have one)
        # we add a dimension for the heads to it below: [batch_size, 1, 1, key_len]
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))

        # apply attention dropout and compute context vectors.
        attention_weights = self.softmax(scores)
        attention_probs = self.dropout(attention_weights)

        # get context vector (select values with attention) and reshape
        # back to [batch_size, query_len, num_heads * head_size]
        context = torch.matmul(attention_probs, v)
        context = context.transpose(1, 2).contiguous().view(
            batch_size, -1, self.num_heads * self.head_size
        )

        output = self.output_layer(context)

        if return_weights:
            # average attention weights over heads: [batch_size, query_len, key_len]
            attention_output_weights = attention_weights.view(
                batch_size, self.num_heads, query_len, key_len
            )
            return output, attention_output_weights.sum(dim=1) / self.num_heads
        return output, None


class PositionwiseFeedForward(nn.Module):
    """
    Position-wise Feed-forward layer
    Projects to ff_size and then back down to input_size.
    """

    def __init__(
        self,
        input_size: int,
        ff_size: int,
        dropout: float = 0.1,
        alpha: float = 1.0,
        layer_norm: str = "post",
        activation: str = "relu",
    ) -> None:
        super().__init__()
        activation_fnc = build_activation(activation=activation)

        self.layer_norm = nn.LayerNorm(input_size, eps=1e-6)
        self.pwff_layer = nn.Sequential(
            nn.Linear(input_size, ff_size),
            activation_fnc(),
            nn.Dropout(dropout),
            nn.Linear(ff_size, input_size),
            nn.Dropout(dropout),
        )

        self.alpha = alpha
        self._layer_norm_position = layer_norm
        assert self._layer_norm_position in {"pre", "post"}

    def forward(self, x: Tensor) -> Tensor:
        residual = x
        if self._layer_norm_position == "pre":
            x = self.layer_norm(x)

        x = self.pwff_layer(x) + self.alpha * residual

        if self._layer_norm_position == "post":
            x = self.layer_norm(x)
        return x


class PositionalEncoding(nn.Module):
    """
    Pre-compute position encodings (PE).
    In forward pass, this adds the position-encodings to the input for as many time
    steps as necessary.

    Implementation based on OpenNMT-py.
    https://github.com/OpenNMT/OpenNMT-py
    """

    def __init__(self, size: int = 0, max_len: int = 5000) -> None:
        if size % 2 != 0:
            raise ValueError(
                f"Cannot use sin/cos positional encoding with odd dim (got dim={size})"
            )
        pe = torch.zeros(max_len, size)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(
            (torch.arange(0, size, 2, dtype=torch.float) * -(math.log(10000.0) / size))
        )
        pe[:, 0::2] = torch.sin(position.float() * div_term)
        pe[:, 1::2] = torch.cos(position.float() * div_term)
        pe = pe.unsqueeze(0)  # shape: (1, max_len, size)
        super().__init__()
        self.register_buffer("pe", pe)
        self.dim = size

    def forward(self, emb: Tensor) -> Tensor:
        # Add position encodings
        return emb + self.pe[:, :emb.size(1)]


class TransformerEncoderLayer(nn.Module):
    """
    One Transformer encoder layer has a Multi-head attention layer plus a position-wise
    feed-forward layer.
    """

    def __init__(
        self,
        size: int = 0,
        ff_size: int = 0,
        num_heads: int = 0,
        dropout: float = 0.1,
        alpha: float = 1.0,
        layer_norm: str = "post",
        activation: str = "relu",
    ) -> None:
        super().__init__()

        self.layer_norm = nn.LayerNorm(size, eps=1e-6)
        self.src_src_att = MultiHeadedAttention(num_heads, size, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(
            size,
            ff_size=ff_size,
            dropout=dropout,
            alpha=alpha,
            layer_norm=layer_norm,
            activation=activation,
        )
        self.dropout = nn.Dropout(dropout)
        self.size = size

        self.alpha = alpha
        self._layer_norm_position = layer_norm
        assert self._layer_norm_position in {"pre", "post"}

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        residual = x
        if self._layer_norm_position == "pre":
            x = self.layer_norm(x)

        x, _ = self.src_src_att(x, x, x, mask)
        x = self.dropout(x) + self.alpha * residual

        if self._layer_norm_position == "post":
            x = self.layer_norm(x)

        out = self.feed_forward(x)
        return out


class TransformerDecoderLayer(nn.Module):
    """
    Transformer decoder layer.

    Consists of self-attention, source-attention, and feed-forward.
    """

    def __init__(
        self,
        size: int = 0,
        ff_size: int = 0,
        num_heads: int = 0,
        dropout: float = 0.1,
        alpha: float = 1.0,
        layer_norm: str = "post",
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.size = size

        self.trg_trg_att = MultiHeadedAttention(num_heads, size, dropout=dropout)
        self.src_trg_att = MultiHeadedAttention(num_heads, size, dropout=dropout)

        self.feed_forward = PositionwiseFeedForward(
            size,
            ff_size=ff_size,
            dropout=dropout,
            alpha=alpha,
            layer_norm=layer_norm,
            activation=activation,
        )

        self.x_layer_norm = nn.LayerNorm(size, eps=1e-6)
        self.dec_layer_norm = nn.LayerNorm(size, eps=1e-6)

        self.dropout = nn.Dropout(dropout)
        self.alpha = alpha

        self._layer_norm_position = layer_norm
        assert self._layer_norm_position in {"pre", "post"}

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        trg_mask: Tensor,
        return_attention: bool = False,
        **kwargs,
    ) -> Tensor:
        # pylint: disable=unused-argument
        # 1. target-target self-attention
        residual = x
        if self._layer_norm_position == "pre":
            x = self.x_layer_norm(x)

        h1, _ = self.trg_trg_att(x, x, x, mask=trg_mask)
        h1 = self.dropout(h1) + self.alpha * residual

        if self._layer_norm_position == "post":
            h1 = self.x_layer_norm(h1)

        # 2. source-target cross-attention
        h1_residual = h1
        if self._layer_norm_position == "pre":
            h1 = self.dec_layer_norm(h1)

        h2, att = self.src_trg_att(
            memory, memory, h1, mask=src_mask, return_weights=return_attention
        )
        h2 = self.dropout(h2) + self.alpha * h1_residual

        if self._layer_norm_position == "post":
            h2 = self.dec_layer_norm(h2)

        # 3. final position-wise feed-forward layer
        out = self.feed_forward(h2)

        if return_attention:
            return out, att
        return out, None


# ---- joeynmt/encoders.py, joeynmt/decoders.py ------------------------------------------------------------------

class TransformerEncoder(nn.Module):
    """
    Transformer Encoder
    """

    def __init__(
        self,
        hidden_size: int = 512,
        ff_size: int = 2048,
        num_layers: int = 8,
        num_heads: int = 4,
        dropout: float = 0.1,
        emb_dropout: float = 0.1,
        freeze: bool = False,
        **kwargs,
    ):
        super().__init__()

        self._output_size = hidden_size

        # build all (num_layers) layers
        self.layers = nn.ModuleList([
            TransformerEncoderLayer(
                size=hidden_size,
                ff_size=ff_size,
                num_heads=num_heads,
                dropout=dropout,
                alpha=kwargs.get("alpha", 1.0),
                layer_norm=kwargs.get("layer_norm", "pre"),
                activation=kwargs.get("activation", "relu"),
            ) for _ in range(num_layers)
        ])

        self.pe = PositionalEncoding(hidden_size)
        self.emb_dropout = nn.Dropout(p=emb_dropout)

        self.layer_norm = (
            nn.LayerNorm(hidden_size, eps=1e-6)
            if kwargs.get("layer_norm", "post") == "pre" else None
        )

    def forward(
        self,
        src_embed: Tensor,
        src_length: Tensor,  # unused
        mask: Tensor = None,
        **kwargs,
    ) -> Tuple[Tensor, Tensor]:
        # pylint: disable=unused-argument
        x = self.pe(src_embed)  # add position encoding to word embeddings
        if kwargs.get("src_prompt_mask", None) is not None:  # add src_prompt_mask
            x = x + kwargs["src_prompt_mask"]
        x = self.emb_dropout(x)

        for layer in self.layers:
            x = layer(x, mask)

        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x, None


class TransformerDecoder(nn.Module):
    """
    A transformer decoder with N masked layers.
    Decoder layers are masked so that an attention head cannot see the future.
    """

    def __init__(
        self,
        num_layers: int = 4,
        num_heads: int = 8,
        hidden_size: int = 512,
        ff_size: int = 2048,
        dropout: float = 0.1,
        emb_dropout: float = 0.1,
        vocab_size: int = 1,
        freeze: bool = False,
        bug=None,
        **kwargs,
    ):
        super().__init__()

        self._hidden_size = hidden_size
        self._output_size = vocab_size
        self.bug = bug

        # create num_layers decoder layers and put them in a list
        self.layers = nn.ModuleList([
            TransformerDecoderLayer(
                size=hidden_size,
                ff_size=ff_size,
                num_heads=num_heads,
                dropout=dropout,
                alpha=kwargs.get("alpha", 1.0),
                layer_norm=kwargs.get("layer_norm", "post"),
                activation=kwargs.get("activation", "relu"),
            ) for _ in range(num_layers)
        ])

        self.pe = PositionalEncoding(hidden_size)
        self.layer_norm = (
            nn.LayerNorm(hidden_size, eps=1e-6)
            if kwargs.get("layer_norm", "post") == "pre" else None
        )

        self.emb_dropout = nn.Dropout(p=emb_dropout)
        self.output_layer = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(
        self,
        trg_embed: Tensor,
        encoder_output: Tensor,
        encoder_hidden: Tensor,
        src_mask: Tensor,
        unroll_steps: int,
        hidden: Tensor,
        trg_mask: Tensor,
        **kwargs,
    ):
        # pylint: disable=arguments-differ,too-many-locals,unused-argument
        assert trg_mask is not None, "trg_mask required for Transformer"

        x = self.pe(trg_embed)  # add position encoding to word embedding
        if kwargs.get("trg_prompt_mask", None) is not None:  # add trg_prompt_mask
            x = x + kwargs["trg_prompt_mask"]
        x = self.emb_dropout(x)

        if self.bug != "subsequent_mask_dropped":
            trg_mask = trg_mask & subsequent_mask(trg_embed.size(1)).type_as(trg_mask)

        last_layer = len(self.layers) - 1
        return_attention = kwargs.get("return_attention", False)
        for i, layer in enumerate(self.layers):
            x, att = layer(
                x=x,
                memory=encoder_output,
                src_mask=src_mask,
                trg_mask=trg_mask,
                return_attention=(return_attention and i == last_layer)
            )

        if self.layer_norm is not None:
            x = self.layer_norm(x)

        out = self.output_layer(x)
        return out, x, att, None


# ---- joeynmt/model.py ------------------------------------------------------------------------------------------

class Model(nn.Module):
    """
    Base Model class
    """

    def __init__(self, encoder, decoder, src_embed, trg_embed, src_vocab, trg_vocab, bug=None) -> None:
        super().__init__()

        self.src_embed = src_embed
        self.trg_embed = trg_embed
        self.encoder = encoder
        self.decoder = decoder
        self.src_vocab = src_vocab
        self.trg_vocab = trg_vocab
        self.pad_index = self.trg_vocab.pad_index
        self.bos_index = self.trg_vocab.bos_index
        self.eos_index = self.trg_vocab.eos_index
        self.unk_index = self.trg_vocab.unk_index
        self._loss_function = None  # set by `prepare()` func in prediction.py
        self.bug = bug

    @property
    def loss_function(self):
        return self._loss_function

    @loss_function.setter
    def loss_function(self, cfg: Tuple):
        loss_type, label_smoothing = cfg
        assert loss_type == "crossentropy"
        self._loss_function = XentLoss(
            pad_index=self.pad_index, smoothing=label_smoothing, bug=self.bug
        )

    def forward(self, return_type: str = None, **kwargs) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        if return_type is None:
            raise ValueError(
                "Please specify return_type: "
                "{`loss`, `encode`, `decode`}."
            )

        if return_type == "loss":
            assert self.loss_function is not None
            assert "trg" in kwargs and "trg_mask" in kwargs  # need trg to compute loss

            out, _, att_probs, _ = self._encode_decode(**kwargs)

            # compute log probs
            log_probs = F.log_softmax(out, dim=-1)

            # compute batch loss
            # pylint: disable=not-callable
            batch_loss = self.loss_function(log_probs, **kwargs)

            # count correct tokens before decoding (for accuracy)
            trg_mask = kwargs["trg_mask"].squeeze(1)
            assert kwargs["trg"].size() == trg_mask.size()
            n_correct = torch.sum(
                log_probs.argmax(-1).masked_select(trg_mask).eq(
                    kwargs["trg"].masked_select(trg_mask)
                )
            )

            # return batch loss
            #     = sum over all elements in batch that are not pad
            return_tuple = (batch_loss, log_probs, att_probs, n_correct)

        elif return_type == "encode":
            kwargs["pad"] = True  # TODO: only if multi-gpu
            encoder_output, encoder_hidden = self._encode(**kwargs)

            # return encoder outputs
            return_tuple = (encoder_output, encoder_hidden, None, None)

        elif return_type == "decode":
            outputs, hidden, att_probs, att_vectors = self._decode(**kwargs)

            # return decoder outputs
            return_tuple = (outputs, hidden, att_probs, att_vectors)

        return tuple(return_tuple)

    def _encode_decode(
        self,
        src: Tensor,
        trg_input: Tensor,
        src_mask: Tensor,
        src_length: Tensor,
        trg_mask: Tensor = None,
        **kwargs,
    ) -> Tensor:
        encoder_output, encoder_hidden = self._encode(
            src=src, src_length=src_length, src_mask=src_mask, **kwargs
        )

        unroll_steps = trg_input.size(1)

        return self._decode(
            encoder_output=encoder_output,
            encoder_hidden=encoder_hidden,
            src_mask=src_mask,
            trg_input=trg_input,
            unroll_steps=unroll_steps,
            trg_mask=trg_mask,
            **kwargs,
        )

    def _encode(self, src: Tensor, src_length: Tensor, src_mask: Tensor,
                **_kwargs) -> Tuple[Tensor, Tensor, Tensor]:
        return self.encoder(self.src_embed(src), src_length, src_mask, **_kwargs)

    def _decode(
        self,
        encoder_output: Tensor,
        encoder_hidden: Tensor,
        src_mask: Tensor,
        trg_input: Tensor,
        unroll_steps: int,
        decoder_hidden: Tensor = None,
        att_vector: Tensor = None,
        trg_mask: Tensor = None,
        **_kwargs,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        return self.decoder(
            trg_embed=self.trg_embed(trg_input),
            encoder_output=encoder_output,
            encoder_hidden=encoder_hidden,
            src_mask=src_mask,
            unroll_steps=unroll_steps,
            hidden=decoder_hidden,
            prev_att_vector=att_vector,
            trg_mask=trg_mask,
            **_kwargs,
        )


def initialize_model(model: nn.Module, cfg: dict, src_padding_idx: int, trg_padding_idx: int) -> None:
    gain = float(cfg.get("init_gain", 1.0))  # for xavier
    init = cfg.get("initializer", "xavier_uniform")
    init_weight = float(cfg.get("init_weight", 0.01))

    embed_init = cfg.get("embed_initializer", "xavier_uniform")
    embed_init_weight = float(cfg.get("embed_init_weight", 0.01))
    embed_gain = float(cfg.get("embed_init_gain", 1.0))  # for xavier

    bias_init = cfg.get("bias_initializer", "zeros")
    bias_init_weight = float(cfg.get("bias_init_weight", 0.01))

    def _parse_init(s: str, scale: float, _gain: float):
        # pylint: disable=no-else-return,unnecessary-lambda
        scale = float(scale)
        assert scale > 0.0, "incorrect init_weight"
        if s.lower() == "xavier_uniform":
            return lambda p: nn.init.xavier_uniform_(p, gain=_gain)
        elif s.lower() == "xavier_normal":
            return lambda p: nn.init.xavier_normal_(p, gain=_gain)
        elif s.lower() == "uniform":
            return lambda p: nn.init.uniform_(p, a=-scale, b=scale)
        elif s.lower() == "normal":
            return lambda p: nn.init.normal_(p, mean=0.0, std=scale)
        elif s.lower() == "zeros":
            return lambda p: nn.init.zeros_(p)
        else:
            raise ValueError("Unknown initializer.")

    init_fn_ = _parse_init(init, init_weight, gain)
    embed_init_fn_ = _parse_init(embed_init, embed_init_weight, embed_gain)
    bias_init_fn_ = _parse_init(bias_init, bias_init_weight, gain)

    with torch.no_grad():
        for name, p in model.named_parameters():

            if "embed" in name:
                embed_init_fn_(p)

            elif "bias" in name:
                bias_init_fn_(p)

            elif len(p.size()) > 1:
                init_fn_(p)

        # zero out paddings
        model.src_embed.lut.weight.data[src_padding_idx].zero_()
        model.trg_embed.lut.weight.data[trg_padding_idx].zero_()


def build_model(cfg, src_vocab, trg_vocab, bug=None) -> Model:
    enc_cfg = cfg["encoder"]
    dec_cfg = cfg["decoder"]

    src_pad_index = src_vocab.pad_index
    trg_pad_index = trg_vocab.pad_index

    src_embed = Embeddings(
        **enc_cfg["embeddings"],
        vocab_size=len(src_vocab),
        padding_idx=src_pad_index,
    )

    # this ties source and target embeddings for softmax layer tying, see further below
    if cfg.get("tied_embeddings", False):
        if src_vocab == trg_vocab:
            trg_embed = src_embed  # share embeddings for src and trg
        else:
            raise ValueError("Embedding cannot be tied since vocabularies differ.")
    else:
        trg_embed = Embeddings(
            **dec_cfg["embeddings"],
            vocab_size=len(trg_vocab),
            padding_idx=trg_pad_index,
        )

    # build encoder
    enc_dropout = enc_cfg.get("dropout", 0.0)
    enc_emb_dropout = enc_cfg["embeddings"].get("dropout", enc_dropout)
    assert enc_cfg["embeddings"]["embedding_dim"] == enc_cfg["hidden_size"], (
        "for transformer, emb_size must be "
        "the same as hidden_size"
    )
    emb_size = src_embed.embedding_dim
    encoder = TransformerEncoder(
        **enc_cfg,
        emb_size=emb_size,
        emb_dropout=enc_emb_dropout,
        pad_index=src_pad_index,
    )

    # build decoder
    dec_dropout = dec_cfg.get("dropout", 0.0)
    dec_emb_dropout = dec_cfg["embeddings"].get("dropout", dec_dropout)
    decoder = TransformerDecoder(
        **dec_cfg,
        encoder=encoder,
        vocab_size=len(trg_vocab),
        emb_size=trg_embed.embedding_dim,
        emb_dropout=dec_emb_dropout,
        bug=bug,
    )

    model = Model(
        encoder=encoder,
        decoder=decoder,
        src_embed=src_embed,
        trg_embed=trg_embed,
        src_vocab=src_vocab,
        trg_vocab=trg_vocab,
        bug=bug,
    )

    # tie softmax layer with trg embeddings
    if cfg.get("tied_softmax", False):
        if trg_embed.lut.weight.shape == model.decoder.output_layer.weight.shape:
            # (also) share trg embeddings and softmax layer:
            model.decoder.output_layer.weight = trg_embed.lut.weight
        else:
            raise ValueError("For tied_softmax, the decoder embedding_dim and decoder hidden_size must be the same.")

    # custom initialization of model parameters
    initialize_model(model, cfg, src_pad_index, trg_pad_index)
    return model


# ---- joeynmt/vocabulary.py, joeynmt/batch.py -------------------------------------------------------------------

class Vocabulary:
    """The index attributes ``Model`` and ``Batch`` read; the word list is ``<unk> <pad> <s> </s> w0 .. w19``."""

    def __init__(self, words):
        self._itos = ["<unk>", "<pad>", "<s>", "</s>"] + list(words)
        self._stoi = {s: i for i, s in enumerate(self._itos)}
        self.unk_index, self.pad_index, self.bos_index, self.eos_index = UNK, PAD, BOS, EOS

    def __len__(self):
        return len(self._itos)

    def lookup(self, token):
        return self._stoi.get(token, self.unk_index)

    def sentences_to_ids(self, sentences: List[List[str]], bos: bool = True, eos: bool = True):
        max_len = max([len(sent) for sent in sentences])
        if bos:
            max_len += 1
        if eos:
            max_len += 1
        padded, lengths = [], []
        for sent in sentences:
            encoded = [self.lookup(s) for s in sent]
            if bos:
                encoded = [self.bos_index] + encoded
            if eos:
                encoded = encoded + [self.eos_index]
            offset = max(0, max_len - len(encoded))
            padded.append(encoded + [self.pad_index] * offset)
            lengths.append(len(encoded))
        return padded, lengths


class Batch:
    """
    Object for holding a batch of data with mask during training.
    Input is yielded from `collate_fn()` called by torch.data.utils.DataLoader.
    """

    def __init__(self, src, src_length, src_prompt_mask, trg, trg_prompt_mask, indices, device, pad_index,
                 eos_index, is_train=True, bug=None):
        self.src: Tensor = src
        self.src_length: Tensor = src_length
        self.src_mask: Tensor = (self.src != pad_index).unsqueeze(1)
        self.src_prompt_mask: Optional[Tensor] = None  # equivalent to `token_type_ids`
        self.trg_input: Optional[Tensor] = None
        self.trg: Optional[Tensor] = None
        self.trg_mask: Optional[Tensor] = None
        self.trg_prompt_mask: Optional[Tensor] = None
        self.indices: Tensor = indices
        self.nseqs: int = src.size(0)
        self.ntokens: Optional[Tensor] = None
        self.has_trg: bool = trg is not None
        self.is_train: bool = is_train
        self._bug = bug

        if self.has_trg:
            # trg_input is used for teacher forcing, last one (EOS) is cut off
            has_eos = torch.any(trg == eos_index).item()  # true in training
            trg_input = torch.where(trg == eos_index, pad_index, trg)
            self.trg_input: Tensor = trg_input[:, :-1] if has_eos else trg_input

            # trg is used for loss computation, shifted by one since BOS
            self.trg: Tensor = trg[:, 1:]  # trg: shape (batch_size, trg_len)

            # we exclude the padded areas (and blank areas) from the loss computation
            # `trg_mask` shape (batch_size, 1, trg_len); passed to attention layers
            self.trg_mask: Tensor = (self.trg != pad_index).unsqueeze(1)
            self.ntokens: int = self.trg_mask.sum().item()

        # a batch has to contain more than one src sentence
        assert self.nseqs > 0, self.nseqs

    def normalize(self, tensor: Tensor, normalization: str = "none", n_gpu: int = 1,
                  n_accumulation: int = 1) -> Tensor:
        if tensor is None:
            return None
        assert torch.is_tensor(tensor), tensor

        if n_gpu > 1:
            tensor = tensor.sum()

        if normalization == "sum":  # pylint: disable=no-else-return
            return tensor
        elif normalization == "batch":
            normalizer = self.nseqs
        elif normalization == "tokens":
            normalizer = self.ntokens
        elif normalization == "none":
            normalizer = 1

        norm_tensor = tensor / normalizer

        if n_gpu > 1:
            norm_tensor = norm_tensor / n_gpu

        if n_accumulation > 1:
            norm_tensor = norm_tensor / n_accumulation
        return norm_tensor

    def sort_by_src_length(self) -> List[int]:
        _, perm_index = self.src_length.sort(0, descending=True)
        rev_index = [0] * perm_index.size(0)
        for new_pos, old_pos in enumerate(perm_index.cpu().numpy()):
            rev_index[old_pos] = new_pos

        self.src = self.src[perm_index]
        self.src_length = self.src_length[perm_index]
        self.src_mask = self.src_mask[perm_index]
        self.indices = self.indices[perm_index]

        if self.src_prompt_mask is not None:
            self.src_prompt_mask = self.src_prompt_mask[perm_index]

        if self.has_trg and self._bug != "trg_not_sorted_with_src":
            self.trg_input = self.trg_input[perm_index]
            self.trg_mask = self.trg_mask[perm_index]
            self.trg = self.trg[perm_index]
            if self.trg_prompt_mask is not None:
                self.trg_prompt_mask = self.trg_prompt_mask[perm_index]

        assert max(rev_index) < len(rev_index), rev_index
        return rev_index

    def model_kwargs(self):
        """``vars(batch)`` as ``_train_step`` passes it (the bug switch is not part of the batch)."""
        return {k: v for k, v in vars(self).items() if k != "_bug"}


def make_pairs(seed, n):
    """Sources of 3-10 random words; each target word is the source word at the same position, mapped through a
    fixed random permutation of the words."""
    g = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(N_WORDS)]
    perm = np.random.default_rng(1234).permutation(N_WORDS)
    pairs = []
    for _ in range(n):
        src = g.integers(0, N_WORDS, int(g.integers(3, 11)))
        pairs.append(([words[i] for i in src], [words[perm[i]] for i in src]))
    return words, pairs


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_cfg, model_cfg = CFG["training"], CFG["model"]
    words, pairs = make_pairs(seed, 480)
    _, dev_pairs = make_pairs(seed + 1, 24)
    vocab = Vocabulary(words)
    src_vocab = trg_vocab = vocab

    model = build_model(model_cfg, src_vocab=src_vocab, trg_vocab=trg_vocab, bug=bug)
    model.loss_function = ("crossentropy", train_cfg["label_smoothing"])

    clip_grad_fun = build_gradient_clipper(cfg=train_cfg)
    optimizer = build_optimizer(cfg=train_cfg, parameters=model.parameters())
    scheduler, scheduler_step_at = build_scheduler(cfg=train_cfg, scheduler_mode="min", optimizer=optimizer,
                                                   hidden_size=model.encoder._output_size)

    def collate_fn(items):
        indices = torch.tensor([i for i, _, _ in items])
        src_list, src_length = src_vocab.sentences_to_ids([s for _, s, _ in items], bos=False, eos=True)
        trg_list, _ = trg_vocab.sentences_to_ids([t for _, _, t in items], bos=True, eos=True)
        return Batch(
            src=torch.tensor(src_list).long(),
            src_length=torch.tensor(src_length).long(),
            src_prompt_mask=None,
            trg=torch.tensor(trg_list).long(),
            trg_prompt_mask=None,
            indices=indices,
            device=torch.device("cpu"),
            pad_index=PAD,
            eos_index=EOS,
            is_train=True,
            bug=bug,
        )

    data = [(i, s, t) for i, (s, t) in enumerate(pairs)]
    train_iter = DataLoader(data, batch_size=train_cfg["batch_size"], shuffle=True, collate_fn=collate_fn)
    batch_multiplier = train_cfg["batch_multiplier"]
    normalization = train_cfg["normalization"]

    def _train_step(batch):
        # reactivate training
        model.train()

        # sort batch now by src length
        batch.sort_by_src_length()

        # get loss (run as during training with teacher forcing)
        batch_loss, _, _, correct_tokens = model(return_type="loss", **batch.model_kwargs())

        # normalize batch loss
        norm_batch_loss = batch.normalize(
            batch_loss,
            normalization=normalization,
            n_gpu=1,
            n_accumulation=batch_multiplier
        )

        # sum over multiple gpus
        sum_correct_tokens = batch.normalize(correct_tokens, "sum", 1)

        # accumulate gradients
        norm_batch_loss.backward()

        return norm_batch_loss.item(), sum_correct_tokens.item()

    def batches():
        while True:  # one pass per epoch (model.zero_grad() at each epoch start is a no-op here: updates align)
            yield from train_iter

    stream = batches()
    state = {"steps": 0}

    def train_step():
        total_batch_loss = 0.0
        for _ in range(batch_multiplier):
            batch_loss, _correct = _train_step(next(stream))
            total_batch_loss += batch_loss

        # clip gradients (in-place)
        if clip_grad_fun is not None:
            clip_grad_fun(parameters=model.parameters())

        # make gradient step
        optimizer.step()

        # decay lr
        if scheduler_step_at == "step":
            scheduler.step(state["steps"])

        # reset gradients
        model.zero_grad()

        # increment step counter
        state["steps"] += 1
        return total_batch_loss

    dev_batch = collate_fn([(i, s, t) for i, (s, t) in enumerate(dev_pairs)])
    dev_batch.sort_by_src_length()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            batch_loss, _, _, _ = model(return_type="loss", **dev_batch.model_kwargs())
        return float(dev_batch.normalize(batch_loss, normalization=normalization))

    first = collate_fn(data[:train_cfg["batch_size"]])
    first.sort_by_src_length()
    inputs = {"return_type": "loss", **first.model_kwargs()}

    def loss_fn(outputs, _targets):
        return first.normalize(outputs[0], normalization=normalization, n_accumulation=batch_multiplier)

    return Program(name="joeynmt_transformer", model=model, batch=(inputs, first.trg), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_iter)


build = functools.partial(_build, bug=None)

BUGS = [
    # the label-smoothed target rows of padding positions are not zeroed (the index_fill_ skipped): every pad
    # position is trained toward the smoothed uniform distribution (classic: padding not ignored by the loss).
    Bug("padding_rows_not_zeroed", functools.partial(_build, bug="padding_rows_not_zeroed"), "learning_ledger",
        ("OBJECTIVE",)),
    # sort_by_src_length permutes the sources but not the targets (classic): sentences are paired with other
    # sentences' translations.
    Bug("trg_not_sorted_with_src", functools.partial(_build, bug="trg_not_sorted_with_src"), "learning_ledger",
        ("TASK",)),
    # the decoder's subsequent mask is not combined into trg_mask (classic): the decoder attends to the target
    # tokens it must predict.
    Bug("subsequent_mask_dropped", functools.partial(_build, bug="subsequent_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
]
