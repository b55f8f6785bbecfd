"""Deep Knowledge Tracing (DKT) from hcnoh's knowledge-tracing collection: interactions ``q + num_q * r`` embedded,
one LSTM, a linear layer to one logit per skill, dropout, sigmoid; the prediction for the next question is read
with ``one_hot(qshft)``, padded steps are dropped with ``masked_select``, binary cross-entropy, Adam.

Source: https://github.com/hcnoh/knowledge-tracing-collection-pytorch
Commit: 6151f490db17a290b0f4674c1a7c15a1a60c35f6
Files: models/dkt.py, models/utils.py, train.py, config.json, data_loaders/assist2009.py
License: MIT (Copyright (c) 2022 Hyungcheol Noh; full text in LICENSES/hcnoh-knowledge-tracing-collection-pytorch.txt)
Domain: knowledge tracing (student response prediction)

Deviations from the original:
- sizes: emb_size 100 -> 16, hidden_size 100 -> 16, seq_len 100 -> 20, batch_size 256 -> 16 (Adam, lr 0.001 as
  in config.json);
- data: the ASSISTments 2009 CSV is replaced by synthetic students made from ``seed`` (10 skills; each student has
  an ability, each skill a difficulty, a response is correct with probability ``sigmoid(ability - difficulty)``;
  sequences of 15-60 interactions), cut with the original ``match_seq_len`` (pad -1) and batched by the original
  ``collate_fn``; the pickle caching, the train-index files and the checkpointing are left out;
- ``FloatTensor`` is built with ``torch.tensor(..., dtype=torch.float)`` (no cuda default tensor type); the test split is made as written (its loader is the eval pass: eval_fn);
- one ``train_step`` is one iteration of ``train_model``'s inner loop; ``eval_fn`` is its test pass on a given
  batch (AUC by sklearn as written; if sklearn is missing it reports the masked BCE instead); printing dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch.nn import LSTM, Dropout, Embedding, Linear, Module
from torch.nn.functional import binary_cross_entropy, one_hot
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

train_config = {"batch_size": 16, "num_epochs": 100, "train_ratio": 0.9, "learning_rate": 0.001,
                "optimizer": "adam", "seq_len": 20}
dkt_config = {"emb_size": 16, "hidden_size": 16}
NUM_Q = 10


def FloatTensor(x):
    return torch.tensor(np.asarray(x), dtype=torch.float)


# ---- models/dkt.py -------------------------------------------------------------------------------------------

class DKT(Module):
    '''
        Args:
            num_q: the total number of the questions(KCs) in the given dataset
            emb_size: the dimension of the embedding vectors in this model
            hidden_size: the dimension of the hidden vectors in this model
    '''
    def __init__(self, num_q, emb_size, hidden_size, bug=None):
        super().__init__()
        self.num_q = num_q
        self.emb_size = emb_size
        self.hidden_size = hidden_size
        self.bug = bug

        self.interaction_emb = Embedding(self.num_q * 2, self.emb_size)
        self.lstm_layer = LSTM(
            self.emb_size, self.hidden_size, batch_first=True
        )
        self.out_layer = Linear(self.hidden_size, self.num_q)
        self.dropout_layer = Dropout()

    def forward(self, q, r):
        '''
            Args:
                q: the question(KC) sequence with the size of [batch_size, n]
                r: the response sequence with the size of [batch_size, n]

            Returns:
                y: the knowledge level about the all questions(KCs)
        '''
        x = q + self.num_q * r

        h, _ = self.lstm_layer(self.interaction_emb(x))
        y = self.out_layer(h)
        y = self.dropout_layer(y)
        y = torch.sigmoid(y)

        return y


def dkt_loss(model, y, qshft, rshft, m, bug=None):
    """The loss lines of ``DKT.train_model``'s inner loop."""
    if bug == "prediction_read_at_current_question":
        # the prediction read for the question just answered (q) instead of the next one (qshft)
        y = (y * one_hot(qshft.roll(1, dims=1).long(), model.num_q)).sum(-1)
    else:
        y = (y * one_hot(qshft.long(), model.num_q)).sum(-1)

    if bug == "padding_not_masked":
        # every padded step (response 0 after the collate's `* mask_seqs`) scored as a wrong answer
        y = y.reshape(-1)
        t = rshft.reshape(-1)
    else:
        y = torch.masked_select(y, m)
        t = torch.masked_select(rshft, m)

    loss = binary_cross_entropy(y, t)
    return loss


# ---- models/utils.py -----------------------------------------------------------------------------------------

def match_seq_len(q_seqs, r_seqs, seq_len, pad_val=-1):
    proc_q_seqs = []
    proc_r_seqs = []

    for q_seq, r_seq in zip(q_seqs, r_seqs):
        i = 0
        while i + seq_len + 1 < len(q_seq):
            proc_q_seqs.append(q_seq[i:i + seq_len + 1])
            proc_r_seqs.append(r_seq[i:i + seq_len + 1])

            i += seq_len + 1

        proc_q_seqs.append(
            np.concatenate(
                [
                    q_seq[i:],
                    np.array([pad_val] * (i + seq_len + 1 - len(q_seq)))
                ]
            )
        )
        proc_r_seqs.append(
            np.concatenate(
                [
                    r_seq[i:],
                    np.array([pad_val] * (i + seq_len + 1 - len(q_seq)))
                ]
            )
        )

    return proc_q_seqs, proc_r_seqs


def collate_fn(batch, pad_val=-1):
    q_seqs = []
    r_seqs = []
    qshft_seqs = []
    rshft_seqs = []

    for q_seq, r_seq in batch:
        q_seqs.append(FloatTensor(q_seq[:-1]))
        r_seqs.append(FloatTensor(r_seq[:-1]))
        qshft_seqs.append(FloatTensor(q_seq[1:]))
        rshft_seqs.append(FloatTensor(r_seq[1:]))

    q_seqs = pad_sequence(
        q_seqs, batch_first=True, padding_value=pad_val
    )
    r_seqs = pad_sequence(
        r_seqs, batch_first=True, padding_value=pad_val
    )
    qshft_seqs = pad_sequence(
        qshft_seqs, batch_first=True, padding_value=pad_val
    )
    rshft_seqs = pad_sequence(
        rshft_seqs, batch_first=True, padding_value=pad_val
    )

    mask_seqs = (q_seqs != pad_val) * (qshft_seqs != pad_val)

    q_seqs, r_seqs, qshft_seqs, rshft_seqs = \
        q_seqs * mask_seqs, r_seqs * mask_seqs, qshft_seqs * mask_seqs, \
        rshft_seqs * mask_seqs

    return q_seqs, r_seqs, qshft_seqs, rshft_seqs, mask_seqs


# ---- data_loaders/assist2009.py, with synthetic students ------------------------------------------------------

class SyntheticASSIST(Dataset):
    def __init__(self, seq_len, seed, num_u=120) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        difficulty = rng.normal(0.0, 1.5, NUM_Q)
        self.q_seqs, self.r_seqs = [], []
        for _ in range(num_u):
            ability = rng.normal(0.0, 1.5)
            n = int(rng.integers(15, 61))
            q_seq = rng.integers(0, NUM_Q, n)
            p = 1.0 / (1.0 + np.exp(-(ability - difficulty[q_seq])))
            r_seq = (rng.random(n) < p).astype(np.int64)
            self.q_seqs.append(q_seq)
            self.r_seqs.append(r_seq)
        self.num_q = NUM_Q
        if seq_len:
            self.q_seqs, self.r_seqs = \
                match_seq_len(self.q_seqs, self.r_seqs, seq_len)

        self.len = len(self.q_seqs)

    def __getitem__(self, index):
        return self.q_seqs[index], self.r_seqs[index]

    def __len__(self):
        return self.len


# ---- train.py + DKT.train_model ------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size = train_config["batch_size"]
    learning_rate = train_config["learning_rate"]
    seq_len = train_config["seq_len"]

    dataset = SyntheticASSIST(seq_len, seed)
    model = DKT(dataset.num_q, **dkt_config, bug=bug)

    train_size = int(len(dataset) * train_config["train_ratio"])
    test_size = len(dataset) - train_size
    train_dataset, test_dataset = torch.utils.data.random_split(
        dataset, [train_size, test_size], generator=torch.Generator().manual_seed(seed)
    )
    train_loader = DataLoader(
        train_dataset, batch_size=batch_size, shuffle=True,
        collate_fn=collate_fn, generator=torch.Generator().manual_seed(seed)
    )
    opt = torch.optim.Adam(model.parameters(), learning_rate)

    state = {"it": iter(train_loader)}

    def next_data():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data = next_data()
        q, r, qshft, rshft, m = data

        model.train()

        y = model(q.long(), r.long())
        loss = dkt_loss(model, y, qshft, rshft, m, bug)

        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    def eval_fn(model, batch):
        (q, r), (qshft, rshft, m) = batch
        with torch.no_grad():
            model.eval()
            y = model(q.long(), r.long())
            y = (y * one_hot(qshft.long(), model.num_q)).sum(-1)
            y = torch.masked_select(y, m).detach().cpu()
            t = torch.masked_select(rshft, m).detach().cpu()
        try:
            from sklearn import metrics
        except ImportError:
            return float(binary_cross_entropy(y, t))
        return float(metrics.roc_auc_score(y_true=t.numpy(), y_score=y.numpy()))

    q, r, qshft, rshft, m = collate_fn([train_dataset[i] for i in range(batch_size)])
    batch = ((q.long(), r.long()), (qshft, rshft, m))

    def loss_fn(y, targets):
        qshft, rshft, m = targets
        return dkt_loss(model, y, qshft, rshft, m, bug)

    return Program(name="ktcollection_dkt", model=model, batch=batch, loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the prediction read off for the question just answered instead of the next one (classic off-by-one of DKT
    # loops; the same slip reported for another DKT loop: https://github.com/karin0018/GenAL/issues/10): the model
    # is scored on a response it has already been given as input.
    Bug("prediction_read_at_current_question", functools.partial(_build, bug="prediction_read_at_current_question"),
        "learning_ledger", ("TASK",)),
    # masked_select dropped: the padded steps (zeroed by the collate) enter the BCE as wrong answers to question 0
    # (classic: padding not ignored).
    # first contact declared OBJECTIVE; the loss never reading the padding mask is TASK's task.mask_unread (reviewed
    # after first contact: the finding names this bug's mechanism)
    Bug("padding_not_masked", functools.partial(_build, bug="padding_not_masked"), "learning_ledger", ("TASK",),
        kind="task.mask_unread"),
]
