"""Bidirectional-GRU sentence classifier trained by the repository's ``train_ALL_LSTM.train`` with the shipped
``Config/config.cfg`` (``BiGRU = True``, the two-class task): ``BiGRU`` (word embedding with the pad row, dropout
0.75, a one-layer bidirectional ``nn.GRU`` over sequence-first ``[T, B]`` input, max-pooling over time, ``tanh``, a
linear head), ``F.cross_entropy`` on labels shifted down by one in place (``batch.label.data.sub_(1)``: torchtext's
label vocabulary keeps index 0 for ``<unk>``), Adam lr 1e-3 with weight decay 1e-8, ``clip_grad_norm_`` at 10.

Source: https://github.com/bamtercelboo/cnn-lstm-bilstm-deepcnn-clstm-in-pytorch
Commit: 71b8c3f21b6dbc39562a3f8f221e90a1c7d9592f
Files: models/model_BiGRU.py, train_ALL_LSTM.py, main.py, Config/config.cfg, DataUtils/Common.py,
DataLoader/mydatasets_self_two.py
License: Apache-2.0 (full text in LICENSES/bamtercelboo-cnn-lstm-bilstm-deepcnn-clstm-in-pytorch.txt)
Domain: NLP sentence classification (binary sentiment, recurrent encoder with max-over-time pooling)

Kept as written: ``BiGRU`` (``__init__`` and ``forward``: the ``view(len(input), embed.size(1), -1)``, the two
transposes, ``max_pool1d`` over the whole length, ``tanh``), ``main.update_arguments``' mapping of the config onto the
model and loop arguments (``embed_num``, ``class_num = len(label vocab) - 1``, ``paddingId``), the optimizer choice
(``Adam = True``) and the loop body of ``train``: ``batch.text``, ``batch.label.data.sub_(1)``, ``zero_grad``,
forward, ``F.cross_entropy``, ``backward``, ``clip_grad_norm_`` at ``init_clip_max_norm``, ``step``; ``eval``'s
accuracy (``torch.max(logit, 1)[1]``) as ``eval_fn``.

Deviations from the original:
- sizes for 2 CPU cores: embed_dim 300 -> 32, lstm_hidden_dim 300 -> 32 (one layer, bidirectional, dropout 0.75 as
  configured); learning_rate 1e-3 -> 1e-2 so that the 30 steps of the self-check show the loss falling (the config
  runs 500 epochs);
- ``word_Embedding = True`` copies GloVe vectors (``word2vec/glove.sentiment.conj.pretrained.txt``) into the
  embedding; here the embedding keeps its random initialization (no pretrained file);
- data: the MR-style files ``Data/raw.clean.*`` read through torchtext are replaced by synthetic sentences made from
  ``seed``: 5-20 words from a 200-word vocabulary in which 15 words are "positive" and 15 "negative"; each word is,
  with probability 0.3, one of the sentence's polarity (positive or negative, drawn per sentence), else one of the 170
  neutral words; the label is ``positive`` when the sentence holds more positive than negative words (sentences with
  none redrawn). torchtext's ``Field``,
  ``build_vocab`` and ``Iterator`` are written out: the word vocabulary starts with ``<unk>`` 0 and ``<pad>`` 1 and
  orders words by frequency, the label vocabulary is ``<unk>`` 0, ``negative`` 1, ``positive`` 2, the iterator
  shuffles the examples each epoch and pads each batch of 16 to its longest sentence, sequence-first;
- the seed 233 of ``DataUtils/Common.py`` is replaced by ``seed``; ``.cuda()`` calls dropped (CPU);
- one ``train_step`` is one batch of ``train``'s loop; printing, the dev/test evaluation every 200 steps and the
  snapshots are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008

from __future__ import annotations

import collections
import functools
import pathlib
import random
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils as utils

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

pad = "<pad>"
unk = "<unk>"


# ---- models/model_BiGRU.py ---------------------------------------------------------------------------------------

class BiGRU(nn.Module):

    def __init__(self, args):
        super(BiGRU, self).__init__()
        self.args = args
        self.hidden_dim = args.lstm_hidden_dim
        self.num_layers = args.lstm_num_layers
        V = args.embed_num
        D = args.embed_dim
        C = args.class_num
        self.embed = nn.Embedding(V, D, padding_idx=args.paddingId)
        # pretrained  embedding
        if args.word_Embedding:
            self.embed.weight.data.copy_(args.pretrained_weight)
        # gru
        self.bigru = nn.GRU(D, self.hidden_dim, dropout=args.dropout, num_layers=self.num_layers, bidirectional=True)
        # linear
        self.hidden2label = nn.Linear(self.hidden_dim * 2, C)
        #  dropout
        self.dropout = nn.Dropout(args.dropout)

    def forward(self, input):
        embed = self.embed(input)
        if self.args.bug == "dropout_always_on":
            embed = F.dropout(embed, self.args.dropout)
        else:
            embed = self.dropout(embed)
        input = embed.view(len(input), embed.size(1), -1)
        # gru
        gru_out, _ = self.bigru(input)
        gru_out = torch.transpose(gru_out, 0, 1)
        gru_out = torch.transpose(gru_out, 1, 2)
        # pooling
        # gru_out = F.tanh(gru_out)
        gru_out = F.max_pool1d(gru_out, gru_out.size(2)).squeeze(2)
        gru_out = F.tanh(gru_out)
        # linear
        y = self.hidden2label(gru_out)
        logit = y
        return logit


# ---- (port) torchtext Field / build_vocab / Iterator, written out -----------------------------------------------

def make_examples(rng, n):
    """(port) Sentences of 5-20 words from a 200-word vocabulary; words 0-14 positive, 15-29 negative."""
    words = [f"w{i}" for i in range(200)]
    positive, negative = set(words[:15]), set(words[15:30])
    examples = []
    while len(examples) < n:
        polar = words[:15] if rng.random() < 0.5 else words[15:30]
        sent = [rng.choice(polar) if rng.random() < 0.3 else rng.choice(words[30:]) for _ in range(rng.randint(5, 20))]
        score = sum(w in positive for w in sent) - sum(w in negative for w in sent)
        if score != 0:
            examples.append(types.SimpleNamespace(text=sent, label="positive" if score > 0 else "negative"))
    return examples


def build_vocab(examples):
    counts = collections.Counter(w for ex in examples for w in ex.text)
    itos = [unk, pad] + [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {w: i for i, w in enumerate(itos)}


class Iterator:
    """(port) torchtext's ``data.Iterator`` (shuffle each epoch, pad to the longest, sequence-first)."""

    def __init__(self, examples, batch_size, stoi, label_stoi, rng, bug=None):
        self.examples, self.batch_size, self.stoi, self.label_stoi, self.rng = examples, batch_size, stoi, label_stoi, rng
        self.bug = bug
        self.dataset = examples

    def make_batch(self, chunk, labels=None):
        labels = labels if labels is not None else [ex.label for ex in chunk]
        length = max(len(ex.text) for ex in chunk)
        text = torch.tensor([[self.stoi.get(w, 0) for w in ex.text] + [self.stoi[pad]] * (length - len(ex.text))
                             for ex in chunk]).t().contiguous()
        label = torch.tensor([self.label_stoi[lab] for lab in labels])
        return types.SimpleNamespace(text=text, label=label, batch_size=len(chunk))

    def __iter__(self):
        order = list(range(len(self.examples)))
        self.rng.shuffle(order)
        if self.bug == "labels_shuffled_apart":
            label_order = list(range(len(self.examples)))
            self.rng.shuffle(label_order)
        else:
            label_order = order
        for i in range(0, len(order), self.batch_size):
            chunk = [self.examples[j] for j in order[i:i + self.batch_size]]
            labels = [self.examples[j].label for j in label_order[i:i + self.batch_size]]
            yield self.make_batch(chunk, labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)

    examples = make_examples(rng, 1600)
    stoi = build_vocab(examples)
    label_stoi = {unk: 0, "negative": 1, "positive": 2}

    # Config/config.cfg and main.update_arguments
    config = types.SimpleNamespace(
        word_Embedding=False,  # (port) True: GloVe vectors copied in
        embed_dim=32,  # (port) 300
        lstm_hidden_dim=32,  # (port) 300
        lstm_num_layers=1,
        dropout=0.75,
        dropout_embed=0.75,
        clip_max_norm=10,
        learning_rate=1e-2,  # (port) 0.001
        Adam=True, SGD=False, Adadelta=False,
        weight_decay=1e-8,
        batch_size=16,
        cuda=False,
        bug=bug,
    )
    config.lr = config.learning_rate
    config.init_weight_decay = config.weight_decay
    config.init_clip_max_norm = config.clip_max_norm
    config.embed_num = len(stoi)
    config.class_num = len(label_stoi) - 1
    config.paddingId = stoi[pad]
    config.unkId = stoi[unk]
    args = config

    model = BiGRU(config)
    train_iter = Iterator(examples, config.batch_size, stoi, label_stoi, rng, bug=bug)

    # train_ALL_LSTM.train
    if args.Adam is True:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.init_weight_decay)
    model.train()

    def batches():
        while True:
            yield from train_iter

    stream = batches()
    probe = train_iter.make_batch(examples[:config.batch_size])
    batch0 = (probe.text, probe.label.sub(1))

    def train_step():
        batch = next(stream)
        feature, target = batch.text, batch.label.data.sub_(1)
        optimizer.zero_grad()
        logit = model(feature)
        loss = F.cross_entropy(logit, target)
        loss.backward()
        if args.init_clip_max_norm is not None:
            utils.clip_grad_norm_(model.parameters(), max_norm=args.init_clip_max_norm)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        feature, target = batch
        with torch.no_grad():
            logit = model(feature)
        corrects = (torch.max(logit, 1)[1].view(target.size()).data == target.data).sum()
        model.train()
        return float(corrects) / target.size(0) * 100.0

    return Program(name="bamtercelboo_bigru", model=model, batch=batch0, loss_fn=F.cross_entropy,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # the embedding dropout written as ``F.dropout(embed, p)`` (classic: the functional form defaults to
    # ``training=True``), so 75% of the embedding stays dropped under ``model.eval()`` and evaluation is noisy.
    Bug("dropout_always_on", functools.partial(_build, bug="dropout_always_on"), "six_claims", ("EVALUATION",)),
    # the epoch shuffle draws one permutation for the sentences and another for their labels (classic: the two
    # parallel lists shuffled apart): every batch pairs sentences with other sentences' labels.
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
]
