"""Keon Kim's ``seq2seq``: a German-to-English GRU encoder-decoder with Bahdanau-style attention (bidirectional
2-layer encoder whose two directions are summed, a 1-layer decoder fed the attended context, log-softmax outputs,
teacher forcing with ratio 0.5 drawn per time step), trained by ``train.py``: ``F.nll_loss`` over ``output[1:]`` and
``trg[1:]`` with ``ignore_index=pad``, Adam lr 1e-4, ``clip_grad_norm_(10.0)``, sequence-first ``[T, B]`` batches.

Source: https://github.com/keon/seq2seq
Commit: 0e124a7b0da81f44cba9fa9944d95fdbd4e16efc
Files: model.py, train.py, utils.py
License: MIT (Copyright (c) 2017 Keon)
Domain: seq2seq with attention (translation, teacher forcing)

Deviations from the original:
- sizes: hidden 512 -> 32, embed 256 -> 16, batch size 32 -> 16, vocabularies of Multi30k -> 24 source and 24
  target tokens; lr 1e-4 -> 3e-3 (30 steps instead of 100 epochs); grad_clip, layers and dropouts unchanged;
- data: Multi30k with spaCy tokenisation and torchtext ``Field``/``BucketIterator`` is replaced by synthetic
  sentence pairs made from ``seed``: a source of 4-8 tokens, its target the source reversed and mapped through a
  fixed token permutation, both wrapped in ``<sos>``/``<eos>`` and padded with ``<pad>`` in torchtext's special-token
  order (``<unk>`` 0, ``<pad>`` 1, ``<sos>`` 2, ``<eos>`` 3), sequence-first as the ``BucketIterator`` gives them;
- ``.cuda()`` calls and ``Variable`` wrappers are dropped (``outputs`` is created as ``torch.zeros``);
- one ``train_step`` is one batch of ``train()``; ``eval_fn`` is ``evaluate()``'s loss on a given batch
  (teacher_forcing_ratio 0.0); printing and checkpointing are left out.
"""
# ruff: noqa: UP008, RUF059

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.nn.utils import clip_grad_norm_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

UNK, PAD, SOS, EOS = 0, 1, 2, 3
DE_SIZE = EN_SIZE = 24
HIDDEN_SIZE, EMBED_SIZE, BATCH_SIZE, LR, GRAD_CLIP = 32, 16, 16, 3e-3, 10.0


# ---- model.py ---------------------------------------------------------------------------------------------------

class Encoder(nn.Module):
    def __init__(self, input_size, embed_size, hidden_size,
                 n_layers=1, dropout=0.5):
        super(Encoder, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.embed_size = embed_size
        self.embed = nn.Embedding(input_size, embed_size)
        self.gru = nn.GRU(embed_size, hidden_size, n_layers,
                          dropout=dropout, bidirectional=True)

    def forward(self, src, hidden=None):
        embedded = self.embed(src)
        outputs, hidden = self.gru(embedded, hidden)
        # sum bidirectional outputs
        outputs = (outputs[:, :, :self.hidden_size] +
                   outputs[:, :, self.hidden_size:])
        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, hidden_size, bug=None):
        super(Attention, self).__init__()
        self.hidden_size = hidden_size
        self.attn = nn.Linear(self.hidden_size * 2, hidden_size)
        self.v = nn.Parameter(torch.rand(hidden_size))
        stdv = 1. / math.sqrt(self.v.size(0))
        self.v.data.uniform_(-stdv, stdv)
        self.bug = bug

    def forward(self, hidden, encoder_outputs):
        timestep = encoder_outputs.size(0)
        h = hidden.repeat(timestep, 1, 1).transpose(0, 1)
        encoder_outputs = encoder_outputs.transpose(0, 1)  # [B*T*H]
        attn_energies = self.score(h, encoder_outputs)
        if self.bug == "attention_softmax_over_batch":
            # normalised over the batch axis: each sentence's weights depend on the other sentences of the batch
            return F.softmax(attn_energies, dim=0).unsqueeze(1)
        return F.softmax(attn_energies, dim=1).unsqueeze(1)

    def score(self, hidden, encoder_outputs):
        # [B*T*2H]->[B*T*H]
        energy = F.relu(self.attn(torch.cat([hidden, encoder_outputs], 2)))
        energy = energy.transpose(1, 2)  # [B*H*T]
        v = self.v.repeat(encoder_outputs.size(0), 1).unsqueeze(1)  # [B*1*H]
        energy = torch.bmm(v, energy)  # [B*1*T]
        return energy.squeeze(1)  # [B*T]


class Decoder(nn.Module):
    def __init__(self, embed_size, hidden_size, output_size,
                 n_layers=1, dropout=0.2, bug=None):
        super(Decoder, self).__init__()
        self.embed_size = embed_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers

        self.embed = nn.Embedding(output_size, embed_size)
        self.dropout = nn.Dropout(dropout, inplace=True)
        self.attention = Attention(hidden_size, bug=bug)
        self.gru = nn.GRU(hidden_size + embed_size, hidden_size,
                          n_layers, dropout=dropout)
        self.out = nn.Linear(hidden_size * 2, output_size)

    def forward(self, input, last_hidden, encoder_outputs):
        # Get the embedding of the current input word (last output word)
        embedded = self.embed(input).unsqueeze(0)  # (1,B,N)
        embedded = self.dropout(embedded)
        # Calculate attention weights and apply to encoder outputs
        attn_weights = self.attention(last_hidden[-1], encoder_outputs)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))  # (B,1,N)
        context = context.transpose(0, 1)  # (1,B,N)
        # Combine embedded input word and attended context, run through RNN
        rnn_input = torch.cat([embedded, context], 2)
        output, hidden = self.gru(rnn_input, last_hidden)
        output = output.squeeze(0)  # (1,B,N) -> (B,N)
        context = context.squeeze(0)
        output = self.out(torch.cat([output, context], 1))
        output = F.log_softmax(output, dim=1)
        return output, hidden, attn_weights


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, bug=None):
        super(Seq2Seq, self).__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.bug = bug

    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        batch_size = src.size(1)
        max_len = trg.size(0)
        vocab_size = self.decoder.output_size
        outputs = torch.zeros(max_len, batch_size, vocab_size)

        encoder_output, hidden = self.encoder(src)
        hidden = hidden[:self.decoder.n_layers]
        output = trg.data[0, :]  # sos
        for t in range(1, max_len):
            output, hidden, attn_weights = self.decoder(
                    output, hidden, encoder_output)
            outputs[t] = output
            is_teacher = random.random() < teacher_forcing_ratio
            top1 = output.data.max(1)[1]
            if self.bug == "teacher_forces_current_token":
                # the word to predict at t+1 fed as the input at t+1 (trg[t + 1] for trg[t])
                output = trg.data[min(t + 1, max_len - 1)] if is_teacher else top1
            else:
                output = trg.data[t] if is_teacher else top1
        return outputs


# ---- data (replaces utils.py's Multi30k + torchtext) --------------------------------------------------------------

def make_pairs(gen, n, perm):
    """Source: 4-8 tokens from 4..DE_SIZE-1; target: the source reversed and mapped through ``perm``."""
    pairs = []
    for _ in range(n):
        length = int(torch.randint(4, 9, (1,), generator=gen))
        src = torch.randint(4, DE_SIZE, (length,), generator=gen)
        trg = perm[src.flip(0)]
        pairs.append((src, trg))
    return pairs


def to_batch(pairs):
    """torchtext Field.process: <sos> ... <eos>, padded with <pad>, sequence-first [T, B]."""
    def pad(seqs):
        t = max(len(s) for s in seqs) + 2
        out = torch.full((t, len(seqs)), PAD, dtype=torch.long)
        for j, s in enumerate(seqs):
            out[0, j] = SOS
            out[1:len(s) + 1, j] = s
            out[len(s) + 1, j] = EOS
        return out
    return pad([p[0] for p in pairs]), pad([p[1] for p in pairs])


# ---- train.py ---------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.cat([torch.arange(4), 4 + torch.randperm(EN_SIZE - 4, generator=gen)])
    train_pairs = make_pairs(gen, 640, perm)
    train_iter = [to_batch(train_pairs[i:i + BATCH_SIZE]) for i in range(0, len(train_pairs), BATCH_SIZE)]

    de_size, en_size = DE_SIZE, EN_SIZE
    hidden_size = HIDDEN_SIZE
    embed_size = EMBED_SIZE
    encoder = Encoder(de_size, embed_size, hidden_size,
                      n_layers=2, dropout=0.5)
    decoder = Decoder(embed_size, hidden_size, en_size,
                      n_layers=1, dropout=0.5, bug=bug)
    seq2seq = Seq2Seq(encoder, decoder, bug=bug)
    optimizer = optim.Adam(seq2seq.parameters(), lr=LR)

    model, vocab_size, grad_clip = seq2seq, en_size, GRAD_CLIP
    pad = PAD
    state = {"b": 0}

    def train_step():
        """One batch of train()."""
        model.train()
        src, trg = train_iter[state["b"] % len(train_iter)]
        state["b"] += 1
        optimizer.zero_grad()
        output = model(src, trg)
        if bug == "pad_not_ignored":
            loss = F.nll_loss(output[1:].view(-1, vocab_size),
                                   trg[1:].contiguous().view(-1))
        else:
            loss = F.nll_loss(output[1:].view(-1, vocab_size),
                                   trg[1:].contiguous().view(-1),
                                   ignore_index=pad)
        loss.backward()
        clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        """evaluate()'s loss on one batch."""
        with torch.no_grad():
            model.eval()
            src, trg = batch[0]["src"], batch[0]["trg"]
            output = model(src, trg, teacher_forcing_ratio=0.0)
            loss = F.nll_loss(output[1:].view(-1, vocab_size),
                                   trg[1:].contiguous().view(-1),
                                   ignore_index=pad)
            return loss.data.item()

    def loss_fn(output, trg):  # the loss train_step computes, bug included
        if bug == "pad_not_ignored":
            return F.nll_loss(output[1:].view(-1, vocab_size), trg[1:].contiguous().view(-1))
        return F.nll_loss(output[1:].view(-1, vocab_size), trg[1:].contiguous().view(-1), ignore_index=pad)

    src0, trg0 = train_iter[0]
    return Program(name="keonseq2seq_attention", model=seq2seq, batch=({"src": src0, "trg": trg0}, trg0),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # ignore_index=pad left out of the training loss: the <pad> positions after every short target are learned.
    Bug("pad_not_ignored", functools.partial(_build, bug="pad_not_ignored"), "learning_ledger", ("OBJECTIVE",)),
    # teacher forcing feeds trg[t + 1] where trg[t] belongs: the decoder is given the very word it must predict.
    # first contact declared DEPENDENCY; position t asked for the token it is fed is TASK's task.target_not_shifted
    # (reviewed after first contact: the finding names this bug's mechanism)
    Bug("teacher_forces_current_token", functools.partial(_build, bug="teacher_forces_current_token"),
        "learning_ledger", ("TASK",), kind="task.target_not_shifted"),
    # attention weights normalised over the batch (dim=0) instead of the source positions (dim=1).
    Bug("attention_softmax_over_batch", functools.partial(_build, bug="attention_softmax_over_batch"),
        "learning_ledger", ("DEPENDENCY",)),
]
