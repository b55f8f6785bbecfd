"""The Annotated Transformer's "first example": the encoder-decoder Transformer (``make_model``: post-embedding
positional encoding, pre-norm ``SublayerConnection``, ``MultiHeadedAttention``, ``Generator`` = linear +
``log_softmax``, Glorot init) trained on the synthetic copy task (``data_gen``: ``Batch`` with ``tgt``/``tgt_y``
shifted by one, the source padding mask and ``subsequent_mask``), with ``LabelSmoothing(size=V, padding_idx=0,
smoothing=0.0)`` (``KLDivLoss(reduction="sum")`` against the smoothed target distribution, padding rows zeroed),
``SimpleLossCompute`` (the sum divided by ``batch.ntokens``), Adam(lr=0.5, betas=(0.9, 0.98), eps=1e-9) under the
Noam schedule (``LambdaLR`` with ``rate(step, model_size=d_model, factor=1.0, warmup)``), and ``run_epoch``'s loop
body (forward, loss_compute, backward, step, ``zero_grad(set_to_none=True)``, ``scheduler.step()``).

Source: https://github.com/harvardnlp/annotated-transformer
Commit: debc9fd747bb2123160a98046ad1c2d4da44a567
Files: the_annotated_transformer.py (Part 1 model, Part 2 training: Batch, run_epoch, rate, LabelSmoothing,
  data_gen, SimpleLossCompute, example_simple_model)
License: MIT (Copyright (c) 2018 Alexander Rush; LICENSES/harvardnlp-annotated-transformer.txt)
Domain: sequence-to-sequence Transformer (copy task, label smoothing, Noam schedule)

Deviations from the original:
- sizes: ``make_model(V, V, N=2)`` keeps V=11 and N=2 but d_model 512 -> 32, d_ff 2048 -> 64, h 8 -> 4 (dropout 0.1
  kept); batch_size 80 -> 32; the Noam warmup 400 -> 40 (the original's 400 steps are its whole run of 20 epochs of
  20 batches; the self-check runs 30 steps, so the warm-up is shortened in proportion to what is run here);
- data: ``data_gen`` draws its batches from a ``torch.Generator`` seeded with ``seed`` instead of the global RNG (same
  rule: tokens 1..V-1, first token 1, the target is the source);
- one ``train_step`` is one iteration of ``run_epoch``'s loop in mode "train" with ``accum_iter=1`` (as
  ``example_simple_model`` calls it; with ``i % 1 == 0`` every iteration steps); the per-40-iteration print and the
  epoch's token totals are left out, and the step returns ``loss_node`` (the per-token loss);
- ``eval_fn`` is the evaluation pass of ``example_simple_model`` on a given batch (``model.eval()``, the same
  ``SimpleLossCompute``, nothing stepped: ``DummyOptimizer``/``DummyScheduler``), returning the per-token loss;
- the notebook's visualisation helpers (altair, pandas), the real-world (Multi30k, spacy) part, the inference test
  and greedy decoding are not copied; the unused ``DummyOptimizer`` stand-ins are not needed;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
from torch.nn.functional import log_softmax
from torch.optim.lr_scheduler import LambdaLR

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

V = 11
BATCH_SIZE = 32
D_MODEL, D_FF, HEADS, N_LAYERS = 32, 64, 4, 2
WARMUP = 40


# ---- Part 1: Model Architecture ----------------------------------------------------------------------------------

class EncoderDecoder(nn.Module):
    """
    A standard Encoder-Decoder architecture. Base for this and many
    other models.
    """

    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super(EncoderDecoder, self).__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def forward(self, src, tgt, src_mask, tgt_mask):
        "Take in and process masked src and target sequences."
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)


class Generator(nn.Module):
    "Define standard linear + softmax generation step."

    def __init__(self, d_model, vocab, bug=None):
        super(Generator, self).__init__()
        self.proj = nn.Linear(d_model, vocab)
        self.bug = bug

    def forward(self, x):
        if self.bug == "generator_without_log_softmax":
            # the projection's raw scores handed to KLDivLoss, which expects log-probabilities
            return self.proj(x)
        return log_softmax(self.proj(x), dim=-1)


def clones(module, N):
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class Encoder(nn.Module):
    "Core encoder is a stack of N layers"

    def __init__(self, layer, N):
        super(Encoder, self).__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, mask):
        "Pass the input (and mask) through each layer in turn."
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    """
    A residual connection followed by a layer norm.
    Note for code simplicity the norm is first as opposed to last.
    """

    def __init__(self, size, dropout):
        super(SublayerConnection, self).__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        "Apply residual connection to any sublayer with the same size."
        return x + self.dropout(sublayer(self.norm(x)))


class EncoderLayer(nn.Module):
    "Encoder is made up of self-attn and feed forward (defined below)"

    def __init__(self, size, self_attn, feed_forward, dropout):
        super(EncoderLayer, self).__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 2)
        self.size = size

    def forward(self, x, mask):
        "Follow Figure 1 (left) for connections."
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class Decoder(nn.Module):
    "Generic N layer decoder with masking."

    def __init__(self, layer, N):
        super(Decoder, self).__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class DecoderLayer(nn.Module):
    "Decoder is made of self-attn, src-attn, and feed forward (defined below)"

    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super(DecoderLayer, self).__init__()
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        "Follow Figure 1 (right) for connections."
        m = memory
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))
        return self.sublayer[2](x, self.feed_forward)


def subsequent_mask(size):
    "Mask out subsequent positions."
    attn_shape = (1, size, size)
    subsequent_mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(
        torch.uint8
    )
    return subsequent_mask == 0


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        "Take in model size and number of heads."
        super(MultiHeadedAttention, self).__init__()
        assert d_model % h == 0
        # We assume d_v always equals d_k
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        "Implements Figure 2"
        if mask is not None:
            # Same mask applied to all h heads.
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]

        # 2) Apply attention on all the projected vectors in batch.
        x, self.attn = attention(
            query, key, value, mask=mask, dropout=self.dropout
        )

        # 3) "Concat" using a view and apply a final linear.
        x = (
            x.transpose(1, 2)
            .contiguous()
            .view(nbatches, -1, self.h * self.d_k)
        )
        del query
        del key
        del value
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    "Implements FFN equation."

    def __init__(self, d_model, d_ff, dropout=0.1):
        super(PositionwiseFeedForward, self).__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super(Embeddings, self).__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    "Implement the PE function."

    def __init__(self, d_model, dropout, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model)
        )
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


def make_model(
    src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, bug=None
):
    "Helper: Construct a model from hyperparameters."
    c = copy.deepcopy
    attn = MultiHeadedAttention(h, d_model)
    ff = PositionwiseFeedForward(d_model, d_ff, dropout)
    position = PositionalEncoding(d_model, dropout)
    model = EncoderDecoder(
        Encoder(EncoderLayer(d_model, c(attn), c(ff), dropout), N),
        Decoder(DecoderLayer(d_model, c(attn), c(attn), c(ff), dropout), N),
        nn.Sequential(Embeddings(d_model, src_vocab), c(position)),
        nn.Sequential(Embeddings(d_model, tgt_vocab), c(position)),
        Generator(d_model, tgt_vocab, bug=bug),
    )

    # This was important from their code.
    # Initialize parameters with Glorot / fan_avg.
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


# ---- Part 2: Model Training --------------------------------------------------------------------------------------

class Batch:
    """Object for holding a batch of data with mask during training."""

    def __init__(self, src, tgt=None, pad=2, bug=None):  # 2 = <blank>
        self.src = src
        self.src_mask = (src != pad).unsqueeze(-2)
        if tgt is not None:
            self.tgt = tgt[:, :-1]
            self.tgt_y = tgt[:, 1:]
            self.tgt_mask = self.make_std_mask(self.tgt, pad, bug)
            self.ntokens = (self.tgt_y != pad).data.sum()

    @staticmethod
    def make_std_mask(tgt, pad, bug=None):
        "Create a mask to hide padding and future words."
        tgt_mask = (tgt != pad).unsqueeze(-2)
        if bug == "no_subsequent_mask":
            # only the padding is hidden: every target position attends to the words after it
            return tgt_mask
        tgt_mask = tgt_mask & subsequent_mask(tgt.size(-1)).type_as(
            tgt_mask.data
        )
        return tgt_mask


class TrainState:
    """Track number of steps, examples, and tokens processed"""

    step: int = 0  # Steps in the current epoch
    accum_step: int = 0  # Number of gradient accumulation steps
    samples: int = 0  # total # of examples used
    tokens: int = 0  # total # of tokens processed


def rate(step, model_size, factor, warmup):
    """
    we have to default the step to 1 for LambdaLR function
    to avoid zero raising to negative power.
    """
    if step == 0:
        step = 1
    return factor * (
        model_size ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5))
    )


class LabelSmoothing(nn.Module):
    "Implement label smoothing."

    def __init__(self, size, padding_idx, smoothing=0.0):
        super(LabelSmoothing, self).__init__()
        self.criterion = nn.KLDivLoss(reduction="sum")
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.true_dist = None

    def forward(self, x, target):
        assert x.size(1) == self.size
        true_dist = x.data.clone()
        true_dist.fill_(self.smoothing / (self.size - 2))
        true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        true_dist[:, self.padding_idx] = 0
        mask = torch.nonzero(target.data == self.padding_idx)
        if mask.dim() > 0:
            true_dist.index_fill_(0, mask.squeeze(), 0.0)
        self.true_dist = true_dist
        return self.criterion(x, true_dist.clone().detach())


def data_gen(V, batch_size, nbatches, generator=None, bug=None):
    "Generate random data for a src-tgt copy task."
    for i in range(nbatches):
        data = torch.randint(1, V, size=(batch_size, 10), generator=generator)
        data[:, 0] = 1
        src = data.requires_grad_(False).clone().detach()
        tgt = data.requires_grad_(False).clone().detach()
        yield Batch(src, tgt, 0, bug=bug)


class SimpleLossCompute:
    "A simple loss compute and train function."

    def __init__(self, generator, criterion):
        self.generator = generator
        self.criterion = criterion

    def __call__(self, x, y, norm):
        x = self.generator(x)
        sloss = (
            self.criterion(
                x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)
            )
            / norm
        )
        return sloss.data * norm, sloss


# ---- example_simple_model ----------------------------------------------------------------------------------------

def _as_pair(batch):
    """A ``Batch`` as the (inputs, targets) the model and the loss see: ``model.forward(src, tgt, src_mask,
    tgt_mask)`` and ``loss_compute(out, tgt_y, ntokens)``."""
    return ({"src": batch.src, "tgt": batch.tgt, "src_mask": batch.src_mask, "tgt_mask": batch.tgt_mask}, batch.tgt_y)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    criterion = LabelSmoothing(size=V, padding_idx=0, smoothing=0.0)
    model = make_model(V, V, N=N_LAYERS, d_model=D_MODEL, d_ff=D_FF, h=HEADS, bug=bug)

    optimizer = torch.optim.Adam(
        model.parameters(), lr=0.5, betas=(0.9, 0.98), eps=1e-9
    )
    lr_scheduler = LambdaLR(
        optimizer=optimizer,
        lr_lambda=lambda step: rate(
            step, model_size=model.src_embed[0].d_model, factor=1.0, warmup=WARMUP
        ),
    )
    loss_compute = SimpleLossCompute(model.generator, criterion)
    train_state = TrainState()
    data_iter = data_gen(V, BATCH_SIZE, 10**9, gen, bug)

    def train_step():
        # run_epoch(data_gen(V, batch_size, 20), model, SimpleLossCompute(model.generator, criterion), optimizer,
        #           lr_scheduler, mode="train"): one iteration of its loop, accum_iter=1
        model.train()
        batch = next(data_iter)
        out = model.forward(
            batch.src, batch.tgt, batch.src_mask, batch.tgt_mask
        )
        loss, loss_node = loss_compute(out, batch.tgt_y, batch.ntokens)
        # loss_node = loss_node / accum_iter
        loss_node.backward()
        train_state.step += 1
        train_state.samples += batch.src.shape[0]
        train_state.tokens += batch.ntokens
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        train_state.accum_step += 1
        lr_scheduler.step()
        return loss_node.detach()

    def eval_fn(model, batch):
        # run_epoch(data_gen(V, batch_size, 5), model, ..., DummyOptimizer(), DummyScheduler(), mode="eval")
        inputs, tgt_y = batch
        model.eval()
        out = model.forward(inputs["src"], inputs["tgt"], inputs["src_mask"], inputs["tgt_mask"])
        loss, _loss_node = loss_compute(out, tgt_y, (tgt_y != 0).data.sum())
        return float(loss / (tgt_y != 0).data.sum())

    def loss_fn(out, tgt_y):
        # batch.ntokens is (tgt_y != pad).data.sum(), pad 0
        return loss_compute(out, tgt_y, (tgt_y != 0).data.sum())[1]

    class Batches:
        """data_gen(V, batch_size, 20): one epoch of copy-task batches, as (inputs, targets)."""

        def __iter__(self):
            for batch in data_gen(V, BATCH_SIZE, 20, torch.Generator().manual_seed(seed + 1), bug):
                yield _as_pair(batch)

        def __len__(self):
            return 20

    first = next(iter(Batches()))

    def task_probe(inputs):
        # the copy task: the target sequence is the source, read one position on
        return inputs["src"][:, 1:]

    return Program(name="annotatedtransformer_copy", model=model, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, loader=Batches())


build = functools.partial(_build, bug=None)

BUGS = [
    # make_std_mask without subsequent_mask (classic: only the padding mask kept): the decoder's self-attention sees
    # the target words it is asked to predict, so the copy is read off the decoder input, not the source.
    Bug("no_subsequent_mask", functools.partial(_build, bug="no_subsequent_mask"), "learning_ledger",
        ("DEPENDENCY",)),
    # Generator returns the projection's raw scores (the log_softmax dropped, classic): KLDivLoss, which expects
    # log-probabilities, is minimized by pushing the target's score up without bound.
    Bug("generator_without_log_softmax", functools.partial(_build, bug="generator_without_log_softmax"),
        "learning_ledger", ("OBJECTIVE",)),
]
