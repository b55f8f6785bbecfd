"""RCNN text classification from AnubhavGupta3377/Text-Classification-Models-Pytorch (``Model_RCNN``): frozen
pre-trained word vectors, a bidirectional LSTM over the sequence-first batch, each position's ``[left ctx; word;
right ctx]`` through a linear layer and tanh, max-pooling over time, dropout and a linear classifier; plain SGD at
lr 0.5 with the learning rate halved at a third and two thirds of ``max_epochs`` (``reduce_lr``), NLLLoss on the
labels shifted from 1..4 to 0..3, AG-News-style four topics.

Source: https://github.com/AnubhavGupta3377/Text-Classification-Models-Pytorch
Commit: 8571fe63040354919b4607bb986a8b0a4031969b
Files: Model_RCNN/model.py (``RCNN``, ``run_epoch``, ``reduce_lr``), Model_RCNN/train.py, Model_RCNN/utils.py
(``Dataset``, ``parse_label``, ``evaluate_model``), Model_RCNN/config.py
License: MIT (Copyright (c) 2018 Anubhav Gupta; full text in LICENSES/AnubhavGupta3377-Text-Classification-Models-Pytorch.txt)
Domain: text classification (recurrent convolutional network over frozen word vectors, sequence-first batches)

Kept as written: ``RCNN`` (the embedding's weight replaced by ``nn.Parameter(word_embeddings, requires_grad=False)``,
the LSTM's ``dropout = dropout_keep`` on one layer, ``nn.Dropout(dropout_keep)`` with dropout_keep 0.8 as the drop
probability, ``torch.cat([lstm_out, embedded_sent], 2).permute(1,0,2)``, tanh, ``max_pool1d`` over the whole
length), ``train.py``'s ``optim.SGD(model.parameters(), lr=config.lr)`` and ``nn.NLLLoss()``, ``run_epoch``'s
``reduce_lr`` epochs and its loop body (``zero_grad``, ``y = (batch.label - 1)``, forward, loss, backward, step),
``parse_label`` (``__label__k`` strings) and ``evaluate_model`` (``torch.max(y_pred, 1)[1] + 1``).

Deviations from the original:
- the model's output ``nn.Softmax()`` into ``nn.NLLLoss`` is the repository's open issue #9
  (https://github.com/AnubhavGupta3377/Text-Classification-Models-Pytorch/issues/9: NLLLoss expects
  log-probabilities, the loss is always negative): the correct program takes its fix, ``nn.LogSoftmax(dim=1)``, and
  the as-written softmax is the bug variant ``softmax_into_nll``;
- AG News, spaCy's tokenizer, torchtext's Field / BucketIterator and the GloVe 840B vectors are not here: the
  corpus is synthetic, made from ``seed`` (four topics, each owning 12 of 60 topic words, a line of 8-20 lowercase
  words drawing 40% from its topic and the rest from 40 common words, written as ``__label__k,text`` lines and read
  by ``parse_label``), tokenized by whitespace, numericalized by a vocabulary built from the training split (<unk>
  0, <pad> 1, as torchtext's), padded to each batch's longest (the config names no ``max_sen_len`` for
  ``fix_length``) into the sequence-first ``(seq_len, batch)`` tensors torchtext yields; the word vectors are
  random normal vectors standing for GloVe (topic words of one topic share a direction), frozen as written;
- sizes for 2 CPU cores: embed_size 300 -> 32, hidden_size 64 -> 32, hidden_size_linear 64 -> 32, batch_size 128
  -> 32, 512 training and 128 validation lines (80/20 as ``train_data.split(0.8)``; the validation lines go
  unused), max_epochs 15 kept;
- ``train_step`` is one batch of ``run_epoch`` (the shuffled iterator restarts each epoch, and ``reduce_lr`` runs at
  the epochs the original runs it); the every-100-iterations printing and validation are left out, and so is
  ``evaluate_model`` (it never calls ``model.eval()``, so it would score with dropout on); no ``eval_fn``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402, RUF059, UP031

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.optim as optim
from torch import nn
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program


class Config(object):
    embed_size = 32  # (port) 300
    hidden_layers = 1
    hidden_size = 32  # (port) 64
    output_size = 4
    max_epochs = 15
    hidden_size_linear = 32  # (port) 64
    lr = 0.5
    batch_size = 32  # (port) 128
    seq_len = None # Sequence length for RNN
    dropout_keep = 0.8


# Model_RCNN/model.py
class RCNN(nn.Module):
    def __init__(self, config, vocab_size, word_embeddings, bug=None):
        super(RCNN, self).__init__()
        self.config = config

        # Embedding Layer
        self.embeddings = nn.Embedding(vocab_size, self.config.embed_size)
        self.embeddings.weight = nn.Parameter(word_embeddings, requires_grad=False)

        # Bi-directional LSTM for RCNN
        self.lstm = nn.LSTM(input_size = self.config.embed_size,
                            hidden_size = self.config.hidden_size,
                            num_layers = self.config.hidden_layers,
                            dropout = self.config.dropout_keep,
                            bidirectional = True)

        self.dropout = nn.Dropout(self.config.dropout_keep)

        # Linear layer to get "convolution output" to be passed to Pooling Layer
        self.W = nn.Linear(
            self.config.embed_size + 2*self.config.hidden_size,
            self.config.hidden_size_linear
        )

        # Tanh non-linearity
        self.tanh = nn.Tanh()

        # Fully-Connected Layer
        self.fc = nn.Linear(
            self.config.hidden_size_linear,
            self.config.output_size
        )

        # Softmax non-linearity
        # (port) issue #9's fix: LogSoftmax for NLLLoss; the as-written nn.Softmax() is the bug variant
        self.softmax = nn.Softmax(dim=1) if bug == "softmax_into_nll" else nn.LogSoftmax(dim=1)

    def forward(self, x):
        # x.shape = (seq_len, batch_size)
        embedded_sent = self.embeddings(x)
        # embedded_sent.shape = (seq_len, batch_size, embed_size)

        lstm_out, (h_n,c_n) = self.lstm(embedded_sent)
        # lstm_out.shape = (seq_len, batch_size, 2 * hidden_size)

        input_features = torch.cat([lstm_out,embedded_sent], 2).permute(1,0,2)
        # final_features.shape = (batch_size, seq_len, embed_size + 2*hidden_size)

        linear_output = self.tanh(
            self.W(input_features)
        )
        # linear_output.shape = (batch_size, seq_len, hidden_size_linear)

        linear_output = linear_output.permute(0,2,1) # Reshaping fot max_pool

        max_out_features = F.max_pool1d(linear_output, linear_output.shape[2]).squeeze(2)
        # max_out_features.shape = (batch_size, hidden_size_linear)

        max_out_features = self.dropout(max_out_features)
        final_out = self.fc(max_out_features)
        return self.softmax(final_out)

    def add_optimizer(self, optimizer):
        self.optimizer = optimizer

    def add_loss_op(self, loss_op):
        self.loss_op = loss_op

    def reduce_lr(self):
        for g in self.optimizer.param_groups:
            g['lr'] = g['lr'] / 2


def parse_label(label):
    '''
    Get the actual labels from label string
    '''
    return int(label.strip()[-1])


# (port) the synthetic corpus and torchtext's numericalization and BucketIterator batches
def _lines(rng, n):
    common = ['c%d' % i for i in range(40)]
    topics = [['t%d_%d' % (k, i) for i in range(12)] for k in range(4)]
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        words = [topics[k][rng.integers(0, 12)] if rng.random() < 0.4 else common[rng.integers(0, 40)]
                 for _ in range(int(rng.integers(8, 21)))]
        out.append('__label__%d,%s' % (k + 1, ' '.join(words)))
    return out


def _vectors(vocab, embed_size, rng):
    """(port) Stands in for GloVe: random vectors, a topic's words sharing a direction."""
    directions = rng.normal(size=(4, embed_size))
    vecs = rng.normal(scale=0.5, size=(len(vocab), embed_size))
    for w, i in vocab.items():
        if w.startswith('t'):
            vecs[i] += directions[int(w[1])]
    return torch.tensor(vecs, dtype=torch.float32)


def _batches(examples, batch_size, vocab, rng=None):
    order = rng.permutation(len(examples)) if rng is not None else np.arange(len(examples))
    out = []
    for s in range(0, len(order), batch_size):
        chunk = [examples[i] for i in order[s:s + batch_size]]
        T = max(len(t) for t, _ in chunk)
        text = torch.full((T, len(chunk)), 1, dtype=torch.long)  # <pad> = 1, sequence-first
        for j, (t, _) in enumerate(chunk):
            text[:len(t), j] = torch.tensor([vocab.get(w, 0) for w in t])
        out.append((text, torch.tensor([lab for _, lab in chunk])))
    return out


def _data(seed, config):
    rng = np.random.default_rng(seed)
    data = [line.strip().split(',', maxsplit=1) for line in _lines(rng, 640)]
    examples = [(x[1].lower().split(), parse_label(x[0])) for x in data]
    train, val = examples[:512], examples[512:]
    vocab = {'<unk>': 0, '<pad>': 1}
    for t, _ in train:
        for w in t:
            vocab.setdefault(w, len(vocab))
    return train, val, vocab, _vectors(vocab, config.embed_size, rng), rng


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = Config()
    train, val, vocab, word_embeddings, rng = _data(seed, config)
    model = RCNN(config, len(vocab), word_embeddings, bug=bug)
    model.train()
    optimizer = optim.SGD(model.parameters(), lr=config.lr)
    NLLLoss = nn.NLLLoss()
    model.add_optimizer(optimizer)
    model.add_loss_op(NLLLoss)
    st = {"epoch": 0, "batches": _batches(train, config.batch_size, vocab, rng), "i": 0}

    def train_step():
        if st["i"] == len(st["batches"]):
            st.update(epoch=st["epoch"] + 1, i=0, batches=_batches(train, config.batch_size, vocab, rng))
            epoch = st["epoch"]
            # Reduce learning rate as number of epochs increase
            if (epoch == int(model.config.max_epochs/3)) or (epoch == int(2*model.config.max_epochs/3)):
                model.reduce_lr()
        text, label = st["batches"][st["i"]]
        st["i"] += 1
        if bug != "no_zero_grad":
            model.optimizer.zero_grad()
        x = text
        y = (label - 1).type(torch.LongTensor)
        y_pred = model(x)
        loss = model.loss_op(y_pred, y)
        loss.backward()
        model.optimizer.step()
        return loss.item()

    text, label = _batches(train, config.batch_size, vocab)[0]
    return Program(name="textclsmodels_rcnn", model=model, batch=(text, label - 1),
                   loss_fn=lambda y_pred, y: NLLLoss(y_pred, y), optimizer=optimizer, train_step=train_step,
                   frozen=("embeddings.weight",), batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # as written at the commit: nn.Softmax() into NLLLoss, which expects log-probabilities (issue #9,
    # https://github.com/AnubhavGupta3377/Text-Classification-Models-Pytorch/issues/9): the loss is -p(y), always
    # negative, with vanishing gradients on confident mistakes.
    Bug("softmax_into_nll", functools.partial(_build, bug="softmax_into_nll"), "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() dropped from the loop, so every step applies the sum of all past gradients.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
