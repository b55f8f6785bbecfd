"""Pre-norm encoder-decoder Transformer for translation trained by the repository's ``train.py``: ``get_model``
(xavier-uniform init of every matrix), ``create_masks`` (source padding mask; target padding mask AND the
no-peak mask), teacher forcing ``trg_input = trg[:, :-1]`` with targets ``trg[:, 1:]``, ``F.cross_entropy`` with
``ignore_index=opt.trg_pad``, Adam (lr 1e-4) betas (0.9, 0.98) eps 1e-9 (no SGDR, the default), the ``train_model``
loop body.

Source: https://github.com/SamLynnEvans/Transformer
Commit: 49e01800aab01dcd83403a056c059f429a7d7512
Files: train.py, Models.py, Layers.py, Sublayers.py, Embed.py, Batch.py
License: Apache-2.0 (full text in LICENSES/SamLynnEvans-Transformer.txt)
Domain: seq2seq translation

Deviations from the original:
- sizes: d_model 512 -> 32, n_layers 6 -> 2, heads 8 -> 4, max_seq_len of the positional table 200 -> 40, batches
  of 16 sentence pairs instead of 1500-token torchtext batches, the FeedForward default d_ff 2048 -> 128 (dropout
  0.1, betas, eps unchanged), lr 1e-4 -> 5e-4 so the loss falls within the 30 steps of the self-check;
- data: the English/French files, spacy tokenization and torchtext ``Field``/``MyIterator`` (Process.py,
  Tokenize.py, Batch.py's iterator) are replaced by a synthetic "translation" made from ``seed``: a source sentence
  of 4-10 words from a 20-word vocabulary, its target the words mapped through a fixed word-to-word dictionary in
  reverse order, framed by ``<sos>``/``<eos>`` and padded; the vocabularies follow torchtext's layout
  (``<unk>`` 0, ``<pad>`` 1, ``<sos>`` 2, ``<eos>`` 3 on the target side) and batches carry ``.src``/``.trg``
  sequence-first ``[len, batch]`` as torchtext's do, so the loop's ``transpose(0, 1)`` is kept;
- ``opt`` is a namespace with the fields the loop and masks read (device cpu); ``torch.autograd.Variable`` (a no-op
  since torch 0.4) is dropped from ``nopeak_mask`` and ``PositionalEncoder``;
- one ``train_step`` is one batch of ``train_model``'s inner loop (printing, checkpointing and the interactive
  prompt are left out); ``eval_fn`` is the same forward and loss without gradient in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_WORDS = 20
BATCH_SIZE = 16


# ---- Embed.py ----------------------------------------------------------------------------------------------------

class Embedder(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
    def forward(self, x):
        return self.embed(x)

class PositionalEncoder(nn.Module):
    def __init__(self, d_model, max_seq_len = 40, dropout = 0.1):
        super().__init__()
        self.d_model = d_model
        self.dropout = nn.Dropout(dropout)
        # create constant 'pe' matrix with values dependant on
        # pos and i
        pe = torch.zeros(max_seq_len, d_model)
        for pos in range(max_seq_len):
            for i in range(0, d_model, 2):
                pe[pos, i] = \
                math.sin(pos / (10000 ** ((2 * i)/d_model)))
                pe[pos, i + 1] = \
                math.cos(pos / (10000 ** ((2 * (i + 1))/d_model)))
        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)


    def forward(self, x):
        # make embeddings relatively larger
        x = x * math.sqrt(self.d_model)
        #add constant to embedding
        seq_len = x.size(1)
        pe = self.pe[:,:seq_len]
        x = x + pe
        return self.dropout(x)


# ---- Sublayers.py ------------------------------------------------------------------------------------------------

class Norm(nn.Module):
    def __init__(self, d_model, eps = 1e-6):
        super().__init__()

        self.size = d_model

        # create two learnable parameters to calibrate normalisation
        self.alpha = nn.Parameter(torch.ones(self.size))
        self.bias = nn.Parameter(torch.zeros(self.size))

        self.eps = eps

    def forward(self, x):
        norm = self.alpha * (x - x.mean(dim=-1, keepdim=True)) \
        / (x.std(dim=-1, keepdim=True) + self.eps) + self.bias
        return norm

def attention(q, k, v, d_k, mask=None, dropout=None):

    scores = torch.matmul(q, k.transpose(-2, -1)) /  math.sqrt(d_k)

    if mask is not None:
        mask = mask.unsqueeze(1)
        scores = scores.masked_fill(mask == 0, -1e9)

    scores = F.softmax(scores, dim=-1)

    if dropout is not None:
        scores = dropout(scores)

    output = torch.matmul(scores, v)
    return output

class MultiHeadAttention(nn.Module):
    def __init__(self, heads, d_model, dropout = 0.1):
        super().__init__()

        self.d_model = d_model
        self.d_k = d_model // heads
        self.h = heads

        self.q_linear = nn.Linear(d_model, d_model)
        self.v_linear = nn.Linear(d_model, d_model)
        self.k_linear = nn.Linear(d_model, d_model)

        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):

        bs = q.size(0)

        # perform linear operation and split into N heads
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k)
        q = self.q_linear(q).view(bs, -1, self.h, self.d_k)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k)

        # transpose to get dimensions bs * N * sl * d_model
        k = k.transpose(1,2)
        q = q.transpose(1,2)
        v = v.transpose(1,2)


        # calculate attention using function we will define next
        scores = attention(q, k, v, self.d_k, mask, self.dropout)
        # concatenate heads and put through final linear layer
        concat = scores.transpose(1,2).contiguous()\
        .view(bs, -1, self.d_model)
        output = self.out(concat)

        return output

class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff=128, dropout = 0.1):
        super().__init__()

        # We set d_ff as a default to 2048 (128 here: sizes)
        self.linear_1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        x = self.dropout(F.relu(self.linear_1(x)))
        x = self.linear_2(x)
        return x


# ---- Layers.py ---------------------------------------------------------------------------------------------------

class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, dropout=0.1):
        super().__init__()
        self.norm_1 = Norm(d_model)
        self.norm_2 = Norm(d_model)
        self.attn = MultiHeadAttention(heads, d_model, dropout=dropout)
        self.ff = FeedForward(d_model, dropout=dropout)
        self.dropout_1 = nn.Dropout(dropout)
        self.dropout_2 = nn.Dropout(dropout)

    def forward(self, x, mask):
        x2 = self.norm_1(x)
        x = x + self.dropout_1(self.attn(x2,x2,x2,mask))
        x2 = self.norm_2(x)
        x = x + self.dropout_2(self.ff(x2))
        return x

# build a decoder layer with two multi-head attention layers and
# one feed-forward layer
class DecoderLayer(nn.Module):
    def __init__(self, d_model, heads, dropout=0.1):
        super().__init__()
        self.norm_1 = Norm(d_model)
        self.norm_2 = Norm(d_model)
        self.norm_3 = Norm(d_model)

        self.dropout_1 = nn.Dropout(dropout)
        self.dropout_2 = nn.Dropout(dropout)
        self.dropout_3 = nn.Dropout(dropout)

        self.attn_1 = MultiHeadAttention(heads, d_model, dropout=dropout)
        self.attn_2 = MultiHeadAttention(heads, d_model, dropout=dropout)
        self.ff = FeedForward(d_model, dropout=dropout)

    def forward(self, x, e_outputs, src_mask, trg_mask):
        x2 = self.norm_1(x)
        x = x + self.dropout_1(self.attn_1(x2, x2, x2, trg_mask))
        x2 = self.norm_2(x)
        x = x + self.dropout_2(self.attn_2(x2, e_outputs, e_outputs, \
        src_mask))
        x2 = self.norm_3(x)
        x = x + self.dropout_3(self.ff(x2))
        return x


# ---- Models.py ---------------------------------------------------------------------------------------------------

def get_clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for i in range(N)])

class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, N, heads, dropout):
        super().__init__()
        self.N = N
        self.embed = Embedder(vocab_size, d_model)
        self.pe = PositionalEncoder(d_model, dropout=dropout)
        self.layers = get_clones(EncoderLayer(d_model, heads, dropout), N)
        self.norm = Norm(d_model)
    def forward(self, src, mask):
        x = self.embed(src)
        x = self.pe(x)
        for i in range(self.N):
            x = self.layers[i](x, mask)
        return self.norm(x)

class Decoder(nn.Module):
    def __init__(self, vocab_size, d_model, N, heads, dropout):
        super().__init__()
        self.N = N
        self.embed = Embedder(vocab_size, d_model)
        self.pe = PositionalEncoder(d_model, dropout=dropout)
        self.layers = get_clones(DecoderLayer(d_model, heads, dropout), N)
        self.norm = Norm(d_model)
    def forward(self, trg, e_outputs, src_mask, trg_mask):
        x = self.embed(trg)
        x = self.pe(x)
        for i in range(self.N):
            x = self.layers[i](x, e_outputs, src_mask, trg_mask)
        return self.norm(x)

class Transformer(nn.Module):
    def __init__(self, src_vocab, trg_vocab, d_model, N, heads, dropout):
        super().__init__()
        self.encoder = Encoder(src_vocab, d_model, N, heads, dropout)
        self.decoder = Decoder(trg_vocab, d_model, N, heads, dropout)
        self.out = nn.Linear(d_model, trg_vocab)
    def forward(self, src, trg, src_mask, trg_mask):
        e_outputs = self.encoder(src, src_mask)
        #print("DECODER")
        d_output = self.decoder(trg, e_outputs, src_mask, trg_mask)
        output = self.out(d_output)
        return output

def get_model(opt, src_vocab, trg_vocab):

    assert opt.d_model % opt.heads == 0
    assert opt.dropout < 1

    model = Transformer(src_vocab, trg_vocab, opt.d_model, opt.n_layers, opt.heads, opt.dropout)
    model.to(opt.device)

    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)

    return model


# ---- Batch.py (masks) ----------------------------------------------------------------------------------------------

def nopeak_mask(size, opt):
    np_mask = np.triu(np.ones((1, size, size)), k=1).astype('uint8')
    np_mask = torch.from_numpy(np_mask == 0).to(opt.device)
    return np_mask

def create_masks(src, trg, opt):

    src_mask = (src != opt.src_pad).unsqueeze(-2).to(opt.device)

    if trg is not None:
        trg_mask = (trg != opt.trg_pad).unsqueeze(-2).to(opt.device)
        size = trg.size(1)  # get seq_len for matrix
        np_mask = nopeak_mask(size, opt).to(opt.device)
        if opt.bug == "nopeak_mask_dropped":
            # the target mask built from padding alone: the decoder reads the words it must predict
            trg_mask = trg_mask & torch.ones_like(np_mask)
        else:
            trg_mask = trg_mask & np_mask

    else:
        trg_mask = None
    return src_mask, trg_mask


# ---- synthetic corpus (replaces data/english.txt, data/french.txt and torchtext) ----------------------------------

class SyntheticBatches:
    """Batches of (src, trg) sentence pairs, sequence-first ``[len, batch]`` like torchtext's ``.src``/``.trg``."""

    def __init__(self, seed, n_batches=40):
        g = np.random.default_rng(seed)
        self.dictionary = np.random.default_rng(12345).permutation(N_WORDS)  # the fixed word-to-word "translation"
        self.batches = []
        for _ in range(n_batches):
            srcs, trgs = [], []
            for _ in range(BATCH_SIZE):
                words = g.integers(0, N_WORDS, int(g.integers(4, 11)))
                srcs.append([2 + w for w in words])                                   # SRC: <unk> 0, <pad> 1
                trgs.append([2] + [4 + self.dictionary[w] for w in words[::-1]] + [3])  # TRG: <sos> 2, <eos> 3
            s_len, t_len = max(map(len, srcs)), max(map(len, trgs))
            src = torch.tensor([s + [1] * (s_len - len(s)) for s in srcs]).t()
            trg = torch.tensor([t + [1] * (t_len - len(t)) for t in trgs]).t()
            self.batches.append(types.SimpleNamespace(src=src, trg=trg))

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    opt = types.SimpleNamespace(device='cpu', d_model=32, n_layers=2, heads=4, dropout=0.1, lr=0.0005,
                                SGDR=False, src_pad=1, trg_pad=1, bug=bug)
    opt.train = SyntheticBatches(seed)
    opt.train_len = len(opt.train)
    model = get_model(opt, 2 + N_WORDS, 4 + N_WORDS)

    opt.optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, betas=(0.9, 0.98), eps=1e-9)
    ignore_index = -100 if bug == "pad_not_ignored" else opt.trg_pad

    state = {"it": iter(opt.train)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the next epoch
            state["it"] = iter(opt.train)
            return next(state["it"])

    model.train()

    def train_step():
        batch = next_batch()
        src = batch.src.transpose(0, 1).to(opt.device)
        trg = batch.trg.transpose(0, 1).to(opt.device)
        trg_input = trg[:, :-1]
        src_mask, trg_mask = create_masks(src, trg_input, opt)
        src_mask.to(opt.device)
        trg_mask.to(opt.device)
        preds = model(src, trg_input, src_mask, trg_mask)
        ys = trg[:, 1:].contiguous().view(-1)
        opt.optimizer.zero_grad()
        loss = F.cross_entropy(preds.view(-1, preds.size(-1)), ys, ignore_index=ignore_index)
        loss.backward()
        opt.optimizer.step()
        return loss.detach()

    b0 = SyntheticBatches(seed + 1, n_batches=1).batches[0]
    src0, trg0 = b0.src.transpose(0, 1), b0.trg.transpose(0, 1)
    src_mask0, trg_mask0 = create_masks(src0, trg0[:, :-1], opt)
    first = ({"src": src0, "trg": trg0[:, :-1], "src_mask": src_mask0, "trg_mask": trg_mask0},
             trg0[:, 1:].contiguous().view(-1))

    def loss_fn(preds, ys):
        return F.cross_entropy(preds.view(-1, preds.size(-1)), ys, ignore_index=ignore_index)

    def eval_fn(model, batch):
        inputs, ys = batch
        model.eval()
        with torch.no_grad():
            preds = model(**inputs)
            loss = F.cross_entropy(preds.view(-1, preds.size(-1)), ys, ignore_index=opt.trg_pad)
        model.train()
        return float(loss)

    return Program(name="samlynnevans_transformer", model=model, batch=first, loss_fn=loss_fn,
                   optimizer=opt.optimizer, train_step=train_step, eval_fn=eval_fn, loader=opt.train)


build = functools.partial(_build)

BUGS = [
    # the no-peak mask left out of the target mask (padding mask alone): the decoder attends to the next words.
    Bug("nopeak_mask_dropped", functools.partial(_build, bug="nopeak_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # `ignore_index=opt.trg_pad` left out of the cross-entropy: the padding after <eos> is trained as targets.
    Bug("pad_not_ignored", functools.partial(_build, bug="pad_not_ignored"), "learning_ledger", ("OBJECTIVE",)),
]
