"""Aspect-based sentiment classification with the Interactive Attention Network (IAN, Ma et al. 2017) of
songyouwei's ABSA-PyTorch: a sentence and one of its aspect terms, each through its own ``DynamicLSTM`` (sort by
length, pack, LSTM, unpack, unsort) over frozen pretrained word vectors, the two mean-pooled states attending over
each other's outputs with bilinear attention, the two attended vectors concatenated into a 3-way polarity layer
(negative / neutral / positive); cross-entropy, Adam with ``l2reg`` as weight decay, xavier-uniform
re-initialization of every trainable matrix; accuracy and macro F1 on the test set each epoch.

Source: https://github.com/songyouwei/ABSA-PyTorch
Commit: 9a7c6c1c993ad772d5f439d32af4899b6698ea67
Files: train.py, models/ian.py, layers/dynamic_rnn.py, layers/attention.py, data_utils.py
License: MIT (Copyright (c) 2018 Yury Soong; full text in LICENSES/songyouwei-ABSA-PyTorch.txt)
Domain: text classification, aspect-level sentiment (sentence + aspect pair)

Kept as written: ``IAN``, ``DynamicLSTM`` and ``Attention`` (``bi_linear`` score, its uniform ``reset_parameters``);
``data_utils``' ``Tokenizer`` (``fit_on_text``, ``text_to_sequence`` with the unknown index, ``pad_and_truncate``),
``build_tokenizer``'s reading of the three-line raw format (sentence with ``$T$``, aspect, polarity in -1/0/1) and
``ABSADataset``'s fields for the non-BERT models (``polarity + 1``); ``Instructor``'s ``_reset_params``
(``xavier_uniform_`` on matrices, ``uniform(-1/sqrt(n), 1/sqrt(n))`` on vectors, frozen parameters skipped),
``run``'s ``CrossEntropyLoss`` and ``Adam(filter(requires_grad), lr, weight_decay=l2reg)``, ``_train``'s loop body
(zero_grad, ``inputs = [batch[col] for col in inputs_cols]``, forward, loss, backward, step, the running
accuracy) and ``_evaluate_acc_f1`` (``model.eval()``, ``no_grad``, accuracy and macro F1 over labels 0-2);
``main``'s options for ``--model_name ian`` (``dropout`` 0.1, ``batch_size`` 16, ``polarities_dim`` 3, ``initializer`` xavier_uniform_, ``optimizer`` adam,
``inputs_cols`` ``['text_indices', 'aspect_indices']``) and its seeding.

Deviations from the original:
- SemEval-14 and GloVe are not here: the raw lines are synthetic restaurant-style reviews made from ``seed``, each
  sentence naming two aspects with an opinion word after each ("the $T$ was great but the service was awful"), the
  polarity the one of the target aspect's own opinion word (neutral words give 0); ``build_embedding_matrix``'s
  GloVe vectors are stood in by a fixed random table (``N(0, 0.5)``, rows 0 and ``len(word2idx) + 1`` zero as
  there), still loaded with ``nn.Embedding.from_pretrained`` (frozen); the tokenizer and embedding pickles
  (``.dat`` caches) and the ``.graph`` dependency files (ASGCN only) are not written or read;
- ``ABSADataset`` builds the non-BERT fields only (the BERT indices need a BERT tokenizer and the dependency graph
  a spaCy parse; IAN reads neither);
- ``lr`` 1e-3 (the help text's value for non-BERT models) -> 1e-2 and ``l2reg`` 0.01 -> 1e-5 (the value train.py
  lists for LCF-BERT): at these sizes Adam's coupled L2 of 0.01 holds the weights at their initialization and
  1e-3 shows no learning within the 30 steps of the self-check;
- sizes for 2 CPU cores: ``embed_dim`` 300 -> 32, ``hidden_dim`` 300 -> 32, ``max_seq_len`` 85 -> 24; 400 training
  and 100 test examples; ``valset_ratio`` 0 as by default, so validation is the test set as in ``__init__``;
- CPU only; logging, checkpoint saving and early stopping bookkeeping are dropped; ``torch.tensor(aspect_len, ...)``
  on a tensor is written ``aspect_len.clone().detach().float()`` (same values, no warning);
- one ``train_step`` is one batch of ``_train``'s epoch loop (``model.train()`` at each epoch's start, the
  shuffled DataLoader re-drawn); ``eval_fn`` is ``_evaluate_acc_f1`` on the test loader, returning the accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, UP004, PLR2044, SIM401

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import random
import sys

import numpy
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# layers/dynamic_rnn.py
class DynamicLSTM(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=True, dropout=0,
                 bidirectional=False, only_use_last_hidden_state=False, rnn_type='LSTM', bug=None):
        """
        LSTM which can hold variable length sequence, use like TensorFlow's RNN(input, length...).
        """
        super(DynamicLSTM, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = dropout
        self.bidirectional = bidirectional
        self.only_use_last_hidden_state = only_use_last_hidden_state
        self.rnn_type = rnn_type
        self.bug = bug

        if self.rnn_type == 'LSTM':
            self.RNN = nn.LSTM(
                input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                bias=bias, batch_first=batch_first, dropout=dropout, bidirectional=bidirectional)
        elif self.rnn_type == 'GRU':
            self.RNN = nn.GRU(
                input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                bias=bias, batch_first=batch_first, dropout=dropout, bidirectional=bidirectional)
        elif self.rnn_type == 'RNN':
            self.RNN = nn.RNN(
                input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                bias=bias, batch_first=batch_first, dropout=dropout, bidirectional=bidirectional)

    def forward(self, x, x_len):
        """
        sequence -> sort -> pad and pack ->process using RNN -> unpack ->unsort

        :param x: sequence embedding vectors
        :param x_len: numpy/tensor list
        :return:
        """
        """sort"""
        x_sort_idx = torch.sort(-x_len)[1].long()
        x_unsort_idx = torch.sort(x_sort_idx)[1].long()
        x_len = x_len[x_sort_idx]
        x = x[x_sort_idx]
        """pack"""
        x_emb_p = torch.nn.utils.rnn.pack_padded_sequence(x, x_len, batch_first=self.batch_first)

        # process using the selected RNN
        if self.rnn_type == 'LSTM':
            out_pack, (ht, ct) = self.RNN(x_emb_p, None)
        else:
            out_pack, ht = self.RNN(x_emb_p, None)
            ct = None
        """unsort: h"""
        ht = torch.transpose(ht, 0, 1)[
            x_unsort_idx]  # (num_layers * num_directions, batch, hidden_size) -> (batch, ...)
        ht = torch.transpose(ht, 0, 1)

        if self.only_use_last_hidden_state:
            return ht
        else:
            """unpack: out"""
            out = torch.nn.utils.rnn.pad_packed_sequence(out_pack, batch_first=self.batch_first)  # (sequence, lengths)
            out = out[0]  #
            if self.bug != "outputs_not_unsorted":
                out = out[x_unsort_idx]
            """unsort: out c"""
            if self.rnn_type == 'LSTM':
                ct = torch.transpose(ct, 0, 1)[
                    x_unsort_idx]  # (num_layers * num_directions, batch, hidden_size) -> (batch, ...)
                ct = torch.transpose(ct, 0, 1)

            return out, (ht, ct)


# layers/attention.py
class Attention(nn.Module):
    def __init__(self, embed_dim, hidden_dim=None, out_dim=None, n_head=1, score_function='dot_product', dropout=0,
                 bug=None):
        ''' Attention Mechanism
        :param embed_dim:
        :param hidden_dim:
        :param out_dim:
        :param n_head: num of head (Multi-Head Attention)
        :param score_function: scaled_dot_product / mlp (concat) / bi_linear (general dot)
        :return (?, q_len, out_dim,)
        '''
        super(Attention, self).__init__()
        if hidden_dim is None:
            hidden_dim = embed_dim // n_head
        if out_dim is None:
            out_dim = embed_dim
        self.embed_dim = embed_dim
        self.hidden_dim = hidden_dim
        self.n_head = n_head
        self.score_function = score_function
        self.bug = bug
        self.w_k = nn.Linear(embed_dim, n_head * hidden_dim)
        self.w_q = nn.Linear(embed_dim, n_head * hidden_dim)
        self.proj = nn.Linear(n_head * hidden_dim, out_dim)
        self.dropout = nn.Dropout(dropout)
        if score_function == 'mlp':
            self.weight = nn.Parameter(torch.Tensor(hidden_dim * 2))
        elif self.score_function == 'bi_linear':
            self.weight = nn.Parameter(torch.Tensor(hidden_dim, hidden_dim))
        else:  # dot_product / scaled_dot_product
            self.register_parameter('weight', None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.hidden_dim)
        if self.weight is not None:
            self.weight.data.uniform_(-stdv, stdv)

    def forward(self, k, q):
        if len(q.shape) == 2:  # q_len missing
            q = torch.unsqueeze(q, dim=1)
        if len(k.shape) == 2:  # k_len missing
            k = torch.unsqueeze(k, dim=1)
        mb_size = k.shape[0]  # ?
        k_len = k.shape[1]
        q_len = q.shape[1]
        # k: (?, k_len, embed_dim,)
        # q: (?, q_len, embed_dim,)
        # kx: (n_head*?, k_len, hidden_dim)
        # qx: (n_head*?, q_len, hidden_dim)
        # score: (n_head*?, q_len, k_len,)
        # output: (?, q_len, out_dim,)
        kx = self.w_k(k).view(mb_size, k_len, self.n_head, self.hidden_dim)
        kx = kx.permute(2, 0, 1, 3).contiguous().view(-1, k_len, self.hidden_dim)
        qx = self.w_q(q).view(mb_size, q_len, self.n_head, self.hidden_dim)
        qx = qx.permute(2, 0, 1, 3).contiguous().view(-1, q_len, self.hidden_dim)
        if self.score_function == 'dot_product':
            kt = kx.permute(0, 2, 1)
            score = torch.bmm(qx, kt)
        elif self.score_function == 'scaled_dot_product':
            kt = kx.permute(0, 2, 1)
            qkt = torch.bmm(qx, kt)
            score = torch.div(qkt, math.sqrt(self.hidden_dim))
        elif self.score_function == 'mlp':
            kxx = torch.unsqueeze(kx, dim=1).expand(-1, q_len, -1, -1)
            qxx = torch.unsqueeze(qx, dim=2).expand(-1, -1, k_len, -1)
            kq = torch.cat((kxx, qxx), dim=-1)  # (n_head*?, q_len, k_len, hidden_dim*2)
            score = torch.tanh(torch.matmul(kq, self.weight))
        elif self.score_function == 'bi_linear':
            qw = torch.matmul(qx, self.weight)
            kt = kx.permute(0, 2, 1)
            score = torch.bmm(qw, kt)
        else:
            raise RuntimeError('invalid score_function')
        if self.bug == "attention_softmax_over_batch":
            score = F.softmax(score, dim=0)
        else:
            score = F.softmax(score, dim=-1)
        output = torch.bmm(score, kx)  # (n_head*?, q_len, hidden_dim)
        output = torch.cat(torch.split(output, mb_size, dim=0), dim=-1)  # (?, q_len, n_head*hidden_dim)
        output = self.proj(output)  # (?, q_len, out_dim)
        output = self.dropout(output)
        return output, score


# models/ian.py
class IAN(nn.Module):
    def __init__(self, embedding_matrix, opt):
        super(IAN, self).__init__()
        self.opt = opt
        self.embed = nn.Embedding.from_pretrained(torch.tensor(embedding_matrix, dtype=torch.float))
        self.lstm_context = DynamicLSTM(opt.embed_dim, opt.hidden_dim, num_layers=1, batch_first=True, bug=opt.bug)
        self.lstm_aspect = DynamicLSTM(opt.embed_dim, opt.hidden_dim, num_layers=1, batch_first=True, bug=opt.bug)
        self.attention_aspect = Attention(opt.hidden_dim, score_function='bi_linear', bug=opt.bug)
        self.attention_context = Attention(opt.hidden_dim, score_function='bi_linear', bug=opt.bug)
        self.dense = nn.Linear(opt.hidden_dim * 2, opt.polarities_dim)

    def forward(self, inputs):
        text_raw_indices, aspect_indices = inputs[0], inputs[1]
        text_raw_len = torch.sum(text_raw_indices != 0, dim=-1)
        aspect_len = torch.sum(aspect_indices != 0, dim=-1)

        context = self.embed(text_raw_indices)
        aspect = self.embed(aspect_indices)
        context, (_, _) = self.lstm_context(context, text_raw_len)
        aspect, (_, _) = self.lstm_aspect(aspect, aspect_len)

        aspect_len = aspect_len.clone().detach().float().to(self.opt.device)
        aspect_pool = torch.sum(aspect, dim=1)
        aspect_pool = torch.div(aspect_pool, aspect_len.view(aspect_len.size(0), 1))

        text_raw_len = text_raw_len.clone().detach().float().to(self.opt.device)
        context_pool = torch.sum(context, dim=1)
        context_pool = torch.div(context_pool, text_raw_len.view(text_raw_len.size(0), 1))

        aspect_final, _ = self.attention_aspect(aspect, context_pool)
        aspect_final = aspect_final.squeeze(dim=1)
        context_final, _ = self.attention_context(context, aspect_pool)
        context_final = context_final.squeeze(dim=1)

        x = torch.cat((aspect_final, context_final), dim=-1)
        out = self.dense(x)
        return out


# data_utils.py
def build_tokenizer(lines_by_file, max_seq_len):
    text = ''
    for lines in lines_by_file:  # (port) the files' lines
        for i in range(0, len(lines), 3):
            text_left, _, text_right = [s.lower().strip() for s in lines[i].partition("$T$")]
            aspect = lines[i + 1].lower().strip()
            text_raw = text_left + " " + aspect + " " + text_right
            text += text_raw + " "

    tokenizer = Tokenizer(max_seq_len)
    tokenizer.fit_on_text(text)
    return tokenizer


def build_embedding_matrix(word2idx, embed_dim, rng):
    embedding_matrix = np.zeros((len(word2idx) + 2, embed_dim))  # idx 0 and len(word2idx)+1 are all-zeros
    word_vec = {w: rng.normal(0, 0.5, embed_dim).astype('float32') for w in word2idx}  # (port) GloVe stand-in
    for word, i in word2idx.items():
        vec = word_vec.get(word)
        if vec is not None:
            # words not found in embedding index will be all-zeros.
            embedding_matrix[i] = vec
    return embedding_matrix


def pad_and_truncate(sequence, maxlen, dtype='int64', padding='post', truncating='post', value=0):
    x = (np.ones(maxlen) * value).astype(dtype)
    if truncating == 'pre':
        trunc = sequence[-maxlen:]
    else:
        trunc = sequence[:maxlen]
    trunc = np.asarray(trunc, dtype=dtype)
    if padding == 'post':
        x[:len(trunc)] = trunc
    else:
        x[-len(trunc):] = trunc
    return x


class Tokenizer(object):
    def __init__(self, max_seq_len, lower=True):
        self.lower = lower
        self.max_seq_len = max_seq_len
        self.word2idx = {}
        self.idx2word = {}
        self.idx = 1

    def fit_on_text(self, text):
        if self.lower:
            text = text.lower()
        words = text.split()
        for word in words:
            if word not in self.word2idx:
                self.word2idx[word] = self.idx
                self.idx2word[self.idx] = word
                self.idx += 1

    def text_to_sequence(self, text, reverse=False, padding='post', truncating='post'):
        if self.lower:
            text = text.lower()
        words = text.split()
        unknownidx = len(self.word2idx) + 1
        sequence = [self.word2idx[w] if w in self.word2idx else unknownidx for w in words]
        if len(sequence) == 0:
            sequence = [0]
        if reverse:
            sequence = sequence[::-1]
        return pad_and_truncate(sequence, self.max_seq_len, padding=padding, truncating=truncating)


class ABSADataset(Dataset):
    def __init__(self, lines, tokenizer):
        # (port) the file's lines; the BERT and dependency-graph fields left out
        all_data = []
        for i in range(0, len(lines), 3):
            text_left, _, text_right = [s.lower().strip() for s in lines[i].partition("$T$")]
            aspect = lines[i + 1].lower().strip()
            polarity = lines[i + 2].strip()

            text_indices = tokenizer.text_to_sequence(text_left + " " + aspect + " " + text_right)
            context_indices = tokenizer.text_to_sequence(text_left + " " + text_right)
            left_indices = tokenizer.text_to_sequence(text_left)
            left_with_aspect_indices = tokenizer.text_to_sequence(text_left + " " + aspect)
            right_indices = tokenizer.text_to_sequence(text_right, reverse=True)
            right_with_aspect_indices = tokenizer.text_to_sequence(aspect + " " + text_right, reverse=True)
            aspect_indices = tokenizer.text_to_sequence(aspect)
            left_len = np.sum(left_indices != 0)
            aspect_len = np.sum(aspect_indices != 0)
            aspect_boundary = np.asarray([left_len, left_len + aspect_len - 1], dtype=np.int64)
            polarity = int(polarity) + 1

            data = {
                'text_indices': text_indices,
                'context_indices': context_indices,
                'left_indices': left_indices,
                'left_with_aspect_indices': left_with_aspect_indices,
                'right_indices': right_indices,
                'right_with_aspect_indices': right_with_aspect_indices,
                'aspect_indices': aspect_indices,
                'aspect_boundary': aspect_boundary,
                'polarity': polarity,
            }

            all_data.append(data)
        self.data = all_data

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return len(self.data)


# (port) synthetic SemEval-style raw lines
ASPECTS = ["food", "service", "pasta", "wine list", "staff", "decor", "prices", "dessert", "pizza", "waiter",
           "music", "sushi", "coffee", "ambience", "menu", "portions"]
OPINIONS = {1: ["great", "excellent", "delicious", "friendly", "superb", "lovely"],
            -1: ["awful", "terrible", "bland", "rude", "overpriced", "dreadful"],
            0: ["okay", "average", "ordinary", "standard"]}
FILLERS = ["the", "honestly", "really", "we", "thought", "i", "found", "quite", "very"]


def synthetic_lines(rng, n):
    lines = []
    for _ in range(n):
        a1, a2 = rng.choice(len(ASPECTS), size=2, replace=False)
        p1, p2 = (int(v) for v in rng.choice([-1, 0, 1], size=2))
        o1 = OPINIONS[p1][rng.integers(len(OPINIONS[p1]))]
        o2 = OPINIONS[p2][rng.integers(len(OPINIONS[p2]))]
        lead = " ".join(rng.choice(FILLERS, size=rng.integers(0, 3)))
        target_first = rng.random() < 0.5
        s1 = "the $T$" if target_first else "the " + ASPECTS[a1]
        s2 = "the " + ASPECTS[a2] if target_first else "the $T$"
        sent = f"{lead} {s1} was {o1} but {s2} was {o2} ."
        lines += [sent.strip() + "\n", (ASPECTS[a1] if target_first else ASPECTS[a2]) + "\n",
                  str(p1 if target_first else p2) + "\n"]
    return lines


def _f1_macro(y, p, labels=(0, 1, 2)):
    out = []
    for c in labels:
        tp = int(((y == c) & (p == c)).sum())
        fp = int(((y != c) & (p == c)).sum())
        fn = int(((y == c) & (p != c)).sum())
        out.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return sum(out) / len(out)


def _build(seed, bug=None):
    opt = argparse.Namespace(
        model_name='ian', dataset='restaurant', optimizer='adam', initializer='xavier_uniform_',
        lr=1e-2,  # (port) 1e-3
        dropout=0.1, l2reg=1e-5, num_epoch=20, batch_size=16, log_step=10,  # (port) l2reg 0.01
        embed_dim=32, hidden_dim=32,  # (port) 300, 300
        max_seq_len=24,  # (port) 85
        polarities_dim=3, hops=3, patience=5, device=None, seed=seed, valset_ratio=0)
    opt.bug = bug

    if opt.seed is not None:
        random.seed(opt.seed)
        numpy.random.seed(opt.seed)
        torch.manual_seed(opt.seed)

    rng = np.random.default_rng(seed)
    opt.model_class = IAN
    opt.inputs_cols = ['text_indices', 'aspect_indices']
    opt.initializer = torch.nn.init.xavier_uniform_
    opt.optimizer = torch.optim.Adam
    opt.device = torch.device('cpu')

    train_lines, test_lines = synthetic_lines(rng, 400), synthetic_lines(rng, 100)

    # Instructor.__init__
    tokenizer = build_tokenizer([train_lines, test_lines], max_seq_len=opt.max_seq_len)
    embedding_matrix = build_embedding_matrix(word2idx=tokenizer.word2idx, embed_dim=opt.embed_dim, rng=rng)
    model = opt.model_class(embedding_matrix, opt).to(opt.device)
    trainset = ABSADataset(train_lines, tokenizer)
    testset = ABSADataset(test_lines, tokenizer)
    valset = testset

    def _reset_params():
        for child in model.children():
            for p in child.parameters():
                if p.requires_grad:
                    if len(p.shape) > 1:
                        opt.initializer(p)
                    else:
                        stdv = 1. / math.sqrt(p.shape[0])
                        torch.nn.init.uniform_(p, a=-stdv, b=stdv)

    # Instructor.run
    criterion = nn.CrossEntropyLoss()
    _params = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = opt.optimizer(_params, lr=opt.lr, weight_decay=opt.l2reg)

    train_data_loader = DataLoader(dataset=trainset, batch_size=opt.batch_size, shuffle=True,
                                   generator=torch.Generator().manual_seed(seed))
    val_data_loader = DataLoader(dataset=valset, batch_size=opt.batch_size, shuffle=False)

    _reset_params()

    state = {"it": None, "global_step": 0, "n_correct": 0, "n_total": 0, "loss_total": 0.0}

    def train_step():
        # one batch of Instructor._train's epoch loop
        if state["it"] is None:
            state["n_correct"], state["n_total"], state["loss_total"] = 0, 0, 0
            # switch model to training mode
            model.train()
            state["it"] = iter(train_data_loader)
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = None
            return train_step()
        state["global_step"] += 1
        # clear gradient accumulators
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        inputs = [batch[col].to(opt.device) for col in opt.inputs_cols]
        outputs = model(inputs)
        targets = batch['polarity'].to(opt.device)

        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()

        state["n_correct"] += (torch.argmax(outputs, -1) == targets).sum().item()
        state["n_total"] += len(outputs)
        state["loss_total"] += loss.item() * len(outputs)
        return loss.item()

    def _evaluate_acc_f1(model, _batch=None, data_loader=val_data_loader):
        n_correct, n_total = 0, 0
        t_targets_all, t_outputs_all = None, None
        # switch model to evaluation mode
        model.eval()
        with torch.no_grad():
            for i_batch, t_batch in enumerate(data_loader):
                t_inputs = [t_batch[col].to(opt.device) for col in opt.inputs_cols]
                t_targets = t_batch['polarity'].to(opt.device)
                t_outputs = model(t_inputs)

                n_correct += (torch.argmax(t_outputs, -1) == t_targets).sum().item()
                n_total += len(t_outputs)

                if t_targets_all is None:
                    t_targets_all = t_targets
                    t_outputs_all = t_outputs
                else:
                    t_targets_all = torch.cat((t_targets_all, t_targets), dim=0)
                    t_outputs_all = torch.cat((t_outputs_all, t_outputs), dim=0)

        acc = n_correct / n_total
        f1 = _f1_macro(t_targets_all.cpu(), torch.argmax(t_outputs_all, -1).cpu(), labels=[0, 1, 2])  # noqa: F841
        state["it"] = None  # (port) the next epoch starts with model.train()
        return acc

    first = next(iter(DataLoader(dataset=trainset, batch_size=opt.batch_size, shuffle=False)))
    batch = ([first[col] for col in opt.inputs_cols], first['polarity'])
    return Program(name="absapytorch_ian", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=_evaluate_acc_f1, loader=train_data_loader,
                   frozen=("embed.weight",))


build = functools.partial(_build, bug=None)

BUGS = [
    # DynamicLSTM's outputs left in length-sorted order (classic: the unsort of the padded outputs dropped): every
    # example's context and aspect states belong to other examples of the batch, its label to itself.
    Bug("outputs_not_unsorted", functools.partial(_build, bug="outputs_not_unsorted"), "learning_ledger",
        ("TASK",)),
    # the attention softmax over dim 0, the batch, instead of the keys (classic wrong axis): each example's weights
    # depend on the other examples and no longer select its own words.
    Bug("attention_softmax_over_batch", functools.partial(_build, bug="attention_softmax_over_batch"),
        "learning_ledger", ("DEPENDENCY",)),
    # optimizer.zero_grad() left out of the loop (classic): gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
