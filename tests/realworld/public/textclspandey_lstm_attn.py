# ruff: noqa: UP008, PLR0402, RUF059
"""Binary sentiment classification with an LSTM and attention over its outputs, from prakashpandey9's
Text-Classification-Pytorch.

Source: https://github.com/prakashpandey9/Text-Classification-Pytorch
Commit: 8649eec7a840d55e314b4b992048f3ce966fd05d
Files: ``main.py``, ``models/LSTM_Attn.py``, ``load_data.py``
License: MIT (Copyright (c) 2018 Prakash Pandey; full text in LICENSES/prakashpandey9-Text-Classification-Pytorch.txt)
Domain: text classification, binary sentiment (IMDB-shaped reviews)

Kept as written: ``AttentionModel`` (an embedding table with the GloVe vectors assigned to ``.weights`` (sic: an
extra frozen parameter, the table itself stays trainable), one-layer LSTM over ``[T, B, E]`` with zero initial
states of the fixed ``batch_size``, dot-product attention of every output against the final hidden state, softmax
over timesteps, the attended state through a linear label layer), ``main.py``'s ``train_model`` body (the batch
skipped unless it holds exactly 32 reviews, ``Adam`` over the parameters that require gradients at its default lr
(the script's ``learning_rate = 2e-5`` is never passed), ``F.cross_entropy``, ``clip_gradient`` clamping every
gradient to +-0.1, step) and ``eval_model``; ``load_data.py``'s field: lower-cased whitespace tokens, fixed length
(padded at the end with ``<pad>`` = 1, ``<unk>`` = 0).

Deviations from the original:
- IMDB and GloVe are not here: the reviews are synthetic (from ``seed``): filler words with a few positive or
  negative cue words, the label the sign of their count; the "GloVe" vectors are a random table. Vocabulary built
  from the training reviews as torchtext's ``build_vocab`` does (``<unk>`` 0, ``<pad>`` 1, then by frequency).
- sizes for 2 CPU cores: ``fix_length`` 200 -> 12, ``hidden_size`` 256 -> 32, ``embedding_length`` 300 -> 32;
  ``batch_size`` 32 kept; 640 training and 128 validation reviews.
- ``.cuda()`` calls dropped (CPU); ``Variable`` is the tensor itself; BucketIterator is a shuffling iterator over
  fixed-length batches (every review has the fixed length, so bucketing changes nothing).
- one ``train_step`` is one batch of ``train_model``'s loop (the Adam optimizer is created once, where the original
  creates a new one every epoch); the accuracy bookkeeping and prints are dropped; ``eval_fn`` is ``eval_model``'s
  loss on the validation batches.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

FIX_LENGTH = 12  # (port) 200
N_TRAIN, N_VALID = 640, 128


class AttentionModel(torch.nn.Module):
    def __init__(self, batch_size, output_size, hidden_size, vocab_size, embedding_length, weights, bug=None):
        super(AttentionModel, self).__init__()

        """
        Arguments
        ---------
        batch_size : Size of the batch which is same as the batch_size of the data returned by the TorchText BucketIterator
        output_size : 2 = (pos, neg)
        hidden_sie : Size of the hidden_state of the LSTM
        vocab_size : Size of the vocabulary containing unique words
        embedding_length : Embeddding dimension of GloVe word embeddings
        weights : Pre-trained GloVe word_embeddings which we will use to create our word_embedding look-up table

        --------

        """

        self.batch_size = batch_size
        self.output_size = output_size
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.embedding_length = embedding_length
        self.bug = bug

        self.word_embeddings = nn.Embedding(vocab_size, embedding_length)
        self.word_embeddings.weights = nn.Parameter(weights, requires_grad=False)
        self.lstm = nn.LSTM(embedding_length, hidden_size)
        self.label = nn.Linear(hidden_size, output_size)
        # self.attn_fc_layer = nn.Linear()

    def attention_net(self, lstm_output, final_state):
        hidden = final_state.squeeze(0)
        attn_weights = torch.bmm(lstm_output, hidden.unsqueeze(2)).squeeze(2)
        if self.bug == "attention_softmax_over_batch":
            soft_attn_weights = F.softmax(attn_weights, 0)
        else:
            soft_attn_weights = F.softmax(attn_weights, 1)
        new_hidden_state = torch.bmm(lstm_output.transpose(1, 2), soft_attn_weights.unsqueeze(2)).squeeze(2)

        return new_hidden_state

    def forward(self, input_sentences, batch_size=None):
        input = self.word_embeddings(input_sentences)
        input = input.permute(1, 0, 2)
        if batch_size is None:
            h_0 = torch.zeros(1, self.batch_size, self.hidden_size)  # (port) Variable(...).cuda()
            c_0 = torch.zeros(1, self.batch_size, self.hidden_size)
        else:
            h_0 = torch.zeros(1, batch_size, self.hidden_size)
            c_0 = torch.zeros(1, batch_size, self.hidden_size)

        output, (final_hidden_state, final_cell_state) = self.lstm(input, (h_0, c_0))  # final_hidden_state.size() = (1, batch_size, hidden_size)
        output = output.permute(1, 0, 2)  # output.size() = (batch_size, num_seq, hidden_size)

        attn_output = self.attention_net(output, final_hidden_state)
        logits = self.label(attn_output)

        return logits


def clip_gradient(model, clip_value):
    params = list(filter(lambda p: p.grad is not None, model.parameters()))
    for p in params:
        p.grad.data.clamp_(-clip_value, clip_value)


# ----------------------------------------------------------------------------------------------- (port) data
POS = ["great", "loved", "superb", "wonderful", "best", "brilliant"]
NEG = ["awful", "boring", "worst", "waste", "ridiculous", "terrible"]
FILLER = [f"w{i}" for i in range(60)]


def synthetic_reviews(rng, n):
    """Reviews of fillers with 1-4 cue words; the label 1 (pos) when the positive cues outnumber the negative."""
    texts, labels = [], []
    for _ in range(n):
        length = int(rng.integers(4, 10))
        words = list(rng.choice(FILLER, size=length))
        label = int(rng.integers(0, 2))
        n_major = int(rng.integers(1, 4))
        n_minor = int(rng.integers(0, n_major))
        major, minor = (POS, NEG) if label == 1 else (NEG, POS)
        for w in list(rng.choice(major, size=n_major)) + list(rng.choice(minor, size=n_minor)):
            words.insert(int(rng.integers(0, len(words) + 1)), w)
        texts.append(" ".join(words).capitalize())
        labels.append(label)
    return texts, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    # load_data.py: Field(sequential=True, tokenize=str.split, lower=True, batch_first=True, fix_length=...)
    def tokenize(x):
        return x.split()

    train_texts, train_labels = synthetic_reviews(rng, N_TRAIN)
    valid_texts, valid_labels = synthetic_reviews(rng, N_VALID)
    counts = collections.Counter(t for s in train_texts for t in tokenize(s.lower()))
    itos = ["<unk>", "<pad>"] + [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    stoi = {w: i for i, w in enumerate(itos)}

    def numericalize(texts):
        rows = []
        for s in texts:
            toks = tokenize(s.lower())[:FIX_LENGTH]
            toks = toks + ["<pad>"] * (FIX_LENGTH - len(toks))
            rows.append([stoi.get(t, 0) for t in toks])
        return torch.tensor(rows, dtype=torch.long)

    train_x, train_y = numericalize(train_texts), torch.tensor(train_labels, dtype=torch.float)
    valid_x, valid_y = numericalize(valid_texts), torch.tensor(valid_labels, dtype=torch.float)
    vocab_size = len(itos)
    word_embeddings = torch.randn(vocab_size, 32)  # (port) TEXT.vocab.vectors (GloVe 6B 300d)

    learning_rate = 2e-5  # noqa: F841  (main.py sets it and never uses it)
    batch_size = 32
    output_size = 2
    hidden_size = 32  # (port) 256
    embedding_length = 32  # (port) 300

    model = AttentionModel(batch_size, output_size, hidden_size, vocab_size, embedding_length, word_embeddings,
                           bug=bug)
    loss_fn = F.cross_entropy
    optim = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()))
    gen = torch.Generator().manual_seed(seed)
    st = {"order": None, "pos": 0}

    def next_batch():
        # BucketIterator(shuffle=True, batch_size=32) over the training reviews, one epoch after another
        if st["order"] is None or st["pos"] >= len(st["order"]):
            st["order"], st["pos"] = torch.randperm(N_TRAIN, generator=gen), 0
        idx = st["order"][st["pos"]:st["pos"] + batch_size]
        st["pos"] += batch_size
        label = train_y[idx]
        if bug == "labels_misaligned":
            label = train_y[idx.roll(1)]
        return train_x[idx], label

    def train_step():
        model.train()
        while True:
            text, target = next_batch()
            target = target.long()
            if text.size()[0] != 32:  # One of the batch returned by BucketIterator has length different than 32.
                continue
            break
        if bug != "zero_grad_dropped":
            optim.zero_grad()
        prediction = model(text)
        loss = loss_fn(prediction, target)
        loss.backward()
        clip_gradient(model, 1e-1)
        optim.step()
        return loss.item()

    def eval_model(model, _batch=None):
        total_epoch_loss = 0
        model.eval()
        n = 0
        with torch.no_grad():
            for start in range(0, N_VALID, batch_size):
                text = valid_x[start:start + batch_size]
                if text.size()[0] != 32:
                    continue
                target = valid_y[start:start + batch_size].long()
                prediction = model(text)
                loss = loss_fn(prediction, target)
                total_epoch_loss += loss.item()
                n += 1
        model.train()
        return total_epoch_loss / n

    batch = (train_x[:batch_size], train_y[:batch_size].long())
    return Program(name="textclspandey_lstm_attn", model=model, batch=batch, loss_fn=loss_fn, optimizer=optim,
                   train_step=train_step, eval_fn=eval_model, frozen=("word_embeddings.weights",))


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels taken from the neighbouring review of the shuffled order (classic index slip).
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # the attention's softmax over dim 0, the batch, instead of the timesteps (classic wrong axis): each review's
    # weights depend on the other reviews of the batch.
    Bug("attention_softmax_over_batch", functools.partial(_build, bug="attention_softmax_over_batch"),
        "learning_ledger", ("DEPENDENCY",)),
    # optim.zero_grad() left out: gradients accumulate over the steps (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
