"""Extractive question answering with the BiDAF baseline of the Stanford CS224N SQuAD starter code: frozen
pre-trained word vectors, a linear projection and a 2-layer highway encoder, a packed bidirectional LSTM encoder
shared by context and question, bidirectional (context-to-query and query-to-context) attention with masked
softmaxes, a 2-layer bidirectional LSTM modeling layer and an output layer giving masked log-softmax start and end
distributions; SQuAD 2.0 with index 0 as the no-answer token; loss ``nll(log_p1, y1) + nll(log_p2, y2)``, Adadelta
lr 0.5, gradient clipping 5.0, a constant ``LambdaLR``, and an EMA of the parameters (decay 0.999) used for
evaluation.

Source: https://github.com/chrischute/squad
Commit: 85623adeb9e6639f145081fea9cae2d8f3a26379
Files: train.py, models.py, layers.py, util.py (SQuAD, collate_fn, EMA, masked_softmax, discretize), args.py
License: MIT (Copyright (c) 2019 Christopher Chute; full text in LICENSES/chrischute-squad.txt)
Domain: NLP, extractive question answering (span start/end pointers)

Deviations from the original:
- sizes: GloVe 300-d vectors over 2.2M words -> 24-d random vectors over 40 words (made from ``seed``, frozen by
  ``nn.Embedding.from_pretrained`` as in the original), hidden_size 100 -> 16, batch_size 64 -> 16, para_limit 400 ->
  20, ques_limit 50 -> 6, char_limit 16 -> 4; drop_prob 0.2, lr 0.5, l2_wd 0, max_grad_norm 5.0, ema_decay 0.999
  as in args.py;
- ``nn.DataParallel`` and the device moves are dropped (CPU; parameter names lose the ``module.`` prefix);
- data: the preprocessed SQuAD ``.npz`` record file is replaced by synthetic records made from ``seed`` (the same
  arrays: context/question word and char indices, y1s, y2s, ids): each question starts with a key word; in an
  answerable example the key word occurs once in the context and the answer is the two words that follow it, in an
  unanswerable one (1 in 5) it does not occur and y1 = y2 = -1; ``SQuAD`` takes these arrays instead of loading
  the file and keeps its v2 handling (the prepended no-answer token and the +1 shift of y1s/y2s);
- copied in part: ``util.py``'s ``SQuAD``, ``collate_fn`` (which the original says it adapted from yunjey's
  seq2seq-dataloader, not one of the excluded repositories), ``EMA`` (``__call__``, ``assign``, ``resume``),
  ``masked_softmax`` and ``discretize``; logging, TensorBoard, the checkpoint saver, ``AverageMeter`` and the
  official F1/EM scoring are left out; the docstrings are shortened;
- ``main``'s set-up (model, EMA, Adadelta, LambdaLR, loader) runs in ``build``; one ``train_step`` is one iteration
  of its batch loop; ``eval_fn`` is ``evaluate`` on one batch under the EMA weights (``ema.assign`` /
  ``ema.resume``), returning the exact-match rate of the discretized spans instead of the official F1/EM;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF059  (the original's style is kept)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.optim.lr_scheduler as sched
import torch.utils.data as data
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 16
HIDDEN_SIZE = 16
DROP_PROB = 0.2
LR = 0.5
L2_WD = 0
MAX_GRAD_NORM = 5.0
EMA_DECAY = 0.999
MAX_ANS_LEN = 15
USE_SQUAD_V2 = True
VOCAB = 40
EMB_DIM = 24
PARA_LIMIT = 20
QUES_LIMIT = 6
CHAR_LIMIT = 4
SELF_CHECK_STEPS = 60


# ---- util.py ---------------------------------------------------------------------------------------------------

def masked_softmax(logits, mask, dim=-1, log_softmax=False):
    """Take the softmax of `logits` over given dimension, and set
    entries to 0 wherever `mask` is 0.
    """
    mask = mask.type(torch.float32)
    masked_logits = mask * logits + (1 - mask) * -1e30
    softmax_fn = F.log_softmax if log_softmax else F.softmax
    probs = softmax_fn(masked_logits, dim)

    return probs


class SQuAD(data.Dataset):
    """Stanford Question Answering Dataset (SQuAD), built from the record arrays (see the module docstring)."""
    def __init__(self, dataset, use_v2=True):
        super(SQuAD, self).__init__()

        self.context_idxs = torch.from_numpy(dataset['context_idxs']).long()
        self.context_char_idxs = torch.from_numpy(dataset['context_char_idxs']).long()
        self.question_idxs = torch.from_numpy(dataset['ques_idxs']).long()
        self.question_char_idxs = torch.from_numpy(dataset['ques_char_idxs']).long()
        self.y1s = torch.from_numpy(dataset['y1s']).long()
        self.y2s = torch.from_numpy(dataset['y2s']).long()

        if use_v2:
            # SQuAD 2.0: Use index 0 for no-answer token (token 1 = OOV)
            batch_size, c_len, w_len = self.context_char_idxs.size()
            ones = torch.ones((batch_size, 1), dtype=torch.int64)
            self.context_idxs = torch.cat((ones, self.context_idxs), dim=1)
            self.question_idxs = torch.cat((ones, self.question_idxs), dim=1)

            ones = torch.ones((batch_size, 1, w_len), dtype=torch.int64)
            self.context_char_idxs = torch.cat((ones, self.context_char_idxs), dim=1)
            self.question_char_idxs = torch.cat((ones, self.question_char_idxs), dim=1)

            self.y1s += 1
            self.y2s += 1

        # SQuAD 1.1: Ignore no-answer examples
        self.ids = torch.from_numpy(dataset['ids']).long()
        self.valid_idxs = [idx for idx in range(len(self.ids))
                           if use_v2 or self.y1s[idx].item() >= 0]

    def __getitem__(self, idx):
        idx = self.valid_idxs[idx]
        example = (self.context_idxs[idx],
                   self.context_char_idxs[idx],
                   self.question_idxs[idx],
                   self.question_char_idxs[idx],
                   self.y1s[idx],
                   self.y2s[idx],
                   self.ids[idx])

        return example

    def __len__(self):
        return len(self.valid_idxs)


def collate_fn(examples):
    """Create batch tensors from a list of individual examples returned
    by `SQuAD.__getitem__`. Merge examples of different length by padding
    all examples to the maximum length in the batch.
    """
    def merge_0d(scalars, dtype=torch.int64):
        return torch.tensor(scalars, dtype=dtype)

    def merge_1d(arrays, dtype=torch.int64, pad_value=0):
        lengths = [(a != pad_value).sum() for a in arrays]
        padded = torch.zeros(len(arrays), max(lengths), dtype=dtype)
        for i, seq in enumerate(arrays):
            end = lengths[i]
            padded[i, :end] = seq[:end]
        return padded

    def merge_2d(matrices, dtype=torch.int64, pad_value=0):
        heights = [(m.sum(1) != pad_value).sum() for m in matrices]
        widths = [(m.sum(0) != pad_value).sum() for m in matrices]
        padded = torch.zeros(len(matrices), max(heights), max(widths), dtype=dtype)
        for i, seq in enumerate(matrices):
            height, width = heights[i], widths[i]
            padded[i, :height, :width] = seq[:height, :width]
        return padded

    # Group by tensor type
    context_idxs, context_char_idxs, \
        question_idxs, question_char_idxs, \
        y1s, y2s, ids = zip(*examples)

    # Merge into batch tensors
    context_idxs = merge_1d(context_idxs)
    context_char_idxs = merge_2d(context_char_idxs)
    question_idxs = merge_1d(question_idxs)
    question_char_idxs = merge_2d(question_char_idxs)
    y1s = merge_0d(y1s)
    y2s = merge_0d(y2s)
    ids = merge_0d(ids)

    return (context_idxs, context_char_idxs,
            question_idxs, question_char_idxs,
            y1s, y2s, ids)


class EMA:
    """Exponential moving average of model parameters.
    Args:
        model (torch.nn.Module): Model with parameters whose EMA will be kept.
        decay (float): Decay rate for exponential moving average.
    """
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = {}
        self.original = {}

        # Register model parameters
        for name, param in model.named_parameters():
            if param.requires_grad:
                self.shadow[name] = param.data.clone()

    def __call__(self, model, num_updates):
        decay = min(self.decay, (1.0 + num_updates) / (10.0 + num_updates))
        for name, param in model.named_parameters():
            if param.requires_grad:
                assert name in self.shadow
                new_average = \
                    (1.0 - decay) * param.data + decay * self.shadow[name]
                self.shadow[name] = new_average.clone()

    def assign(self, model):
        """Assign exponential moving average of parameter values to the
        respective parameters.
        """
        for name, param in model.named_parameters():
            if param.requires_grad:
                assert name in self.shadow
                self.original[name] = param.data.clone()
                param.data = self.shadow[name]

    def resume(self, model):
        """Restore original parameters to a model. That is, put back
        the values that were in each parameter at the last call to `assign`.
        """
        for name, param in model.named_parameters():
            if param.requires_grad:
                assert name in self.shadow
                param.data = self.original[name]


def discretize(p_start, p_end, max_len=15, no_answer=False):
    """Discretize soft predictions to get start and end indices.

    Choose the pair `(i, j)` of indices that maximizes `p1[i] * p2[j]`
    subject to `i <= j` and `j - i + 1 <= max_len`.
    """
    if p_start.min() < 0 or p_start.max() > 1 \
            or p_end.min() < 0 or p_end.max() > 1:
        raise ValueError('Expected p_start and p_end to have values in [0, 1]')

    # Compute pairwise probabilities
    p_start = p_start.unsqueeze(dim=2)
    p_end = p_end.unsqueeze(dim=1)
    p_joint = torch.matmul(p_start, p_end)  # (batch_size, c_len, c_len)

    # Restrict to pairs (i, j) such that i <= j <= i + max_len - 1
    c_len, device = p_start.size(1), p_start.device
    is_legal_pair = torch.triu(torch.ones((c_len, c_len), device=device))
    is_legal_pair -= torch.triu(torch.ones((c_len, c_len), device=device),
                                diagonal=max_len)
    if no_answer:
        # Index 0 is no-answer
        p_no_answer = p_joint[:, 0, 0].clone()
        is_legal_pair[0, :] = 0
        is_legal_pair[:, 0] = 0
    else:
        p_no_answer = None
    p_joint *= is_legal_pair

    # Take pair (i, j) that maximizes p_joint
    max_in_row, _ = torch.max(p_joint, dim=2)
    max_in_col, _ = torch.max(p_joint, dim=1)
    start_idxs = torch.argmax(max_in_row, dim=-1)
    end_idxs = torch.argmax(max_in_col, dim=-1)

    if no_answer:
        # Predict no-answer whenever p_no_answer > max_prob
        max_prob, _ = torch.max(max_in_col, dim=-1)
        start_idxs[p_no_answer > max_prob] = 0
        end_idxs[p_no_answer > max_prob] = 0

    return start_idxs, end_idxs


# ---- layers.py -------------------------------------------------------------------------------------------------

class Embedding(nn.Module):
    """Embedding layer used by BiDAF, without the character-level component.

    Word-level embeddings are further refined using a 2-layer Highway Encoder
    (see `HighwayEncoder` class for details).
    """
    def __init__(self, word_vectors, hidden_size, drop_prob):
        super(Embedding, self).__init__()
        self.drop_prob = drop_prob
        self.embed = nn.Embedding.from_pretrained(word_vectors)
        self.proj = nn.Linear(word_vectors.size(1), hidden_size, bias=False)
        self.hwy = HighwayEncoder(2, hidden_size)

    def forward(self, x):
        emb = self.embed(x)   # (batch_size, seq_len, embed_size)
        emb = F.dropout(emb, self.drop_prob, self.training)
        emb = self.proj(emb)  # (batch_size, seq_len, hidden_size)
        emb = self.hwy(emb)   # (batch_size, seq_len, hidden_size)

        return emb


class HighwayEncoder(nn.Module):
    """Encode an input sequence using a highway network."""
    def __init__(self, num_layers, hidden_size):
        super(HighwayEncoder, self).__init__()
        self.transforms = nn.ModuleList([nn.Linear(hidden_size, hidden_size)
                                         for _ in range(num_layers)])
        self.gates = nn.ModuleList([nn.Linear(hidden_size, hidden_size)
                                    for _ in range(num_layers)])

    def forward(self, x):
        for gate, transform in zip(self.gates, self.transforms):
            # Shapes of g, t, and x are all (batch_size, seq_len, hidden_size)
            g = torch.sigmoid(gate(x))
            t = F.relu(transform(x))
            x = g * t + (1 - g) * x

        return x


class RNNEncoder(nn.Module):
    """General-purpose layer for encoding a sequence using a bidirectional RNN.

    Encoded output is the RNN's hidden state at each position, which
    has shape `(batch_size, seq_len, hidden_size * 2)`.
    """
    def __init__(self,
                 input_size,
                 hidden_size,
                 num_layers,
                 drop_prob=0.):
        super(RNNEncoder, self).__init__()
        self.drop_prob = drop_prob
        self.rnn = nn.LSTM(input_size, hidden_size, num_layers,
                           batch_first=True,
                           bidirectional=True,
                           dropout=drop_prob if num_layers > 1 else 0.)

    def forward(self, x, lengths):
        # Save original padded length for use by pad_packed_sequence
        orig_len = x.size(1)

        # Sort by length and pack sequence for RNN
        lengths, sort_idx = lengths.sort(0, descending=True)
        x = x[sort_idx]     # (batch_size, seq_len, input_size)
        x = pack_padded_sequence(x, lengths, batch_first=True)

        # Apply RNN
        x, _ = self.rnn(x)  # (batch_size, seq_len, 2 * hidden_size)

        # Unpack and reverse sort
        x, _ = pad_packed_sequence(x, batch_first=True, total_length=orig_len)
        _, unsort_idx = sort_idx.sort(0)
        x = x[unsort_idx]   # (batch_size, seq_len, 2 * hidden_size)

        # Apply dropout (RNN applies dropout after all but the last layer)
        x = F.dropout(x, self.drop_prob, self.training)

        return x


class BiDAFAttention(nn.Module):
    """Bidirectional attention originally used by BiDAF.

    The output of this layer is the concatenation of [context, c2q_attention,
    context * c2q_attention, context * q2c_attention].
    """
    def __init__(self, hidden_size, drop_prob=0.1):
        super(BiDAFAttention, self).__init__()
        self.drop_prob = drop_prob
        self.c_weight = nn.Parameter(torch.zeros(hidden_size, 1))
        self.q_weight = nn.Parameter(torch.zeros(hidden_size, 1))
        self.cq_weight = nn.Parameter(torch.zeros(1, 1, hidden_size))
        for weight in (self.c_weight, self.q_weight, self.cq_weight):
            nn.init.xavier_uniform_(weight)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, c, q, c_mask, q_mask):
        batch_size, c_len, _ = c.size()
        q_len = q.size(1)
        s = self.get_similarity_matrix(c, q)        # (batch_size, c_len, q_len)
        c_mask = c_mask.view(batch_size, c_len, 1)  # (batch_size, c_len, 1)
        q_mask = q_mask.view(batch_size, 1, q_len)  # (batch_size, 1, q_len)
        s1 = masked_softmax(s, q_mask, dim=2)       # (batch_size, c_len, q_len)
        s2 = masked_softmax(s, c_mask, dim=1)       # (batch_size, c_len, q_len)

        # (bs, c_len, q_len) x (bs, q_len, hid_size) => (bs, c_len, hid_size)
        a = torch.bmm(s1, q)
        # (bs, c_len, c_len) x (bs, c_len, hid_size) => (bs, c_len, hid_size)
        b = torch.bmm(torch.bmm(s1, s2.transpose(1, 2)), c)

        x = torch.cat([c, a, c * a, c * b], dim=2)  # (bs, c_len, 4 * hid_size)

        return x

    def get_similarity_matrix(self, c, q):
        """Get the "similarity matrix" between context and query (using the
        terminology of the BiDAF paper).
        """
        c_len, q_len = c.size(1), q.size(1)
        c = F.dropout(c, self.drop_prob, self.training)  # (bs, c_len, hid_size)
        q = F.dropout(q, self.drop_prob, self.training)  # (bs, q_len, hid_size)

        # Shapes: (batch_size, c_len, q_len)
        s0 = torch.matmul(c, self.c_weight).expand([-1, -1, q_len])
        s1 = torch.matmul(q, self.q_weight).transpose(1, 2)\
                                           .expand([-1, c_len, -1])
        s2 = torch.matmul(c * self.cq_weight, q.transpose(1, 2))
        s = s0 + s1 + s2 + self.bias

        return s


class BiDAFOutput(nn.Module):
    """Output layer used by BiDAF for question answering."""
    def __init__(self, hidden_size, drop_prob, bug=None):
        super(BiDAFOutput, self).__init__()
        self.bug = bug
        self.att_linear_1 = nn.Linear(8 * hidden_size, 1)
        self.mod_linear_1 = nn.Linear(2 * hidden_size, 1)

        self.rnn = RNNEncoder(input_size=2 * hidden_size,
                              hidden_size=hidden_size,
                              num_layers=1,
                              drop_prob=drop_prob)

        self.att_linear_2 = nn.Linear(8 * hidden_size, 1)
        self.mod_linear_2 = nn.Linear(2 * hidden_size, 1)

    def forward(self, att, mod, mask):
        # Shapes: (batch_size, seq_len, 1)
        logits_1 = self.att_linear_1(att) + self.mod_linear_1(mod)
        mod_2 = self.rnn(mod, mask.sum(-1))
        logits_2 = self.att_linear_2(att) + self.mod_linear_2(mod_2)

        # Shapes: (batch_size, seq_len)
        if self.bug == "softmax_not_log_softmax":
            # the pointers come out as probabilities while the loss stays F.nll_loss
            log_p1 = masked_softmax(logits_1.squeeze(), mask, log_softmax=False)
            log_p2 = masked_softmax(logits_2.squeeze(), mask, log_softmax=False)
        else:
            log_p1 = masked_softmax(logits_1.squeeze(), mask, log_softmax=True)
            log_p2 = masked_softmax(logits_2.squeeze(), mask, log_softmax=True)

        return log_p1, log_p2


# ---- models.py -------------------------------------------------------------------------------------------------

class BiDAF(nn.Module):
    """Baseline BiDAF model for SQuAD."""
    def __init__(self, word_vectors, hidden_size, drop_prob=0., bug=None):
        super(BiDAF, self).__init__()
        self.emb = Embedding(word_vectors=word_vectors,
                             hidden_size=hidden_size,
                             drop_prob=drop_prob)

        self.enc = RNNEncoder(input_size=hidden_size,
                              hidden_size=hidden_size,
                              num_layers=1,
                              drop_prob=drop_prob)

        self.att = BiDAFAttention(hidden_size=2 * hidden_size,
                                  drop_prob=drop_prob)

        self.mod = RNNEncoder(input_size=8 * hidden_size,
                              hidden_size=hidden_size,
                              num_layers=2,
                              drop_prob=drop_prob)

        self.out = BiDAFOutput(hidden_size=hidden_size,
                               drop_prob=drop_prob, bug=bug)

    def forward(self, cw_idxs, qw_idxs):
        c_mask = torch.zeros_like(cw_idxs) != cw_idxs
        q_mask = torch.zeros_like(qw_idxs) != qw_idxs
        c_len, q_len = c_mask.sum(-1), q_mask.sum(-1)

        c_emb = self.emb(cw_idxs)         # (batch_size, c_len, hidden_size)
        q_emb = self.emb(qw_idxs)         # (batch_size, q_len, hidden_size)

        c_enc = self.enc(c_emb, c_len)    # (batch_size, c_len, 2 * hidden_size)
        q_enc = self.enc(q_emb, q_len)    # (batch_size, q_len, 2 * hidden_size)

        att = self.att(c_enc, q_enc,
                       c_mask, q_mask)    # (batch_size, c_len, 8 * hidden_size)

        mod = self.mod(att, c_len)        # (batch_size, c_len, 2 * hidden_size)

        out = self.out(att, mod, c_mask)  # 2 tensors, each (batch_size, c_len)

        return out


# ---- synthetic SQuAD records (replacing setup.py's .npz) -------------------------------------------------------

def make_records(rng, n):
    """Word ids: 0 pad, 1 OOV, 2.. words. A question starts with a key word; answerable: the key word occurs once in
    the context and the answer is the two words after it; unanswerable (1 in 5): the key word is absent."""
    context_idxs = np.zeros((n, PARA_LIMIT), dtype=np.int32)
    ques_idxs = np.zeros((n, QUES_LIMIT), dtype=np.int32)
    y1s = np.zeros(n, dtype=np.int32)
    y2s = np.zeros(n, dtype=np.int32)
    for i in range(n):
        c_len = int(rng.integers(10, PARA_LIMIT + 1))
        q_len = int(rng.integers(3, QUES_LIMIT + 1))
        key = int(rng.integers(2, VOCAB))
        others = [w for w in range(2, VOCAB) if w != key]
        context = rng.choice(others, size=c_len)
        question = np.concatenate([[key], rng.choice(others, size=q_len - 1)])
        if rng.random() < 0.2:
            y1s[i] = y2s[i] = -1
        else:
            p = int(rng.integers(0, c_len - 2))
            context[p] = key
            y1s[i], y2s[i] = p + 1, p + 2
        context_idxs[i, :c_len] = context
        ques_idxs[i, :q_len] = question

    def chars(words):
        c = np.stack([(words * (k + 3)) % 26 + 1 for k in range(CHAR_LIMIT)], axis=-1)
        return np.where(words[..., None] > 0, c, 0).astype(np.int32)

    return {"context_idxs": context_idxs, "context_char_idxs": chars(context_idxs), "ques_idxs": ques_idxs,
            "ques_char_idxs": chars(ques_idxs), "y1s": y1s, "y2s": y2s, "ids": np.arange(1, n + 1)}


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    # Get embeddings
    word_vectors = torch.from_numpy(rng.standard_normal((VOCAB, EMB_DIM)).astype(np.float32))
    word_vectors[0] = 0.0

    # Get model
    model = BiDAF(word_vectors=word_vectors,
                  hidden_size=HIDDEN_SIZE,
                  drop_prob=DROP_PROB, bug=bug)
    step = 0
    model.train()
    ema = EMA(model, EMA_DECAY)

    # Get optimizer and scheduler
    optimizer = optim.Adadelta(model.parameters(), LR,
                               weight_decay=L2_WD)
    scheduler = sched.LambdaLR(optimizer, lambda s: 1.)  # Constant LR

    # Get data loader
    train_dataset = SQuAD(make_records(rng, 320), USE_SQUAD_V2)
    train_loader = data.DataLoader(train_dataset,
                                   batch_size=BATCH_SIZE,
                                   shuffle=True,
                                   num_workers=0,
                                   collate_fn=collate_fn)
    dev_dataset = SQuAD(make_records(rng, BATCH_SIZE), USE_SQUAD_V2)
    dev_batch = collate_fn([dev_dataset[i] for i in range(len(dev_dataset))])
    state = {"it": iter(train_loader), "step": step}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        step = state["step"]
        cw_idxs, cc_idxs, qw_idxs, qc_idxs, y1, y2, ids = next_batch()
        # Setup for forward
        batch_size = cw_idxs.size(0)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        # Forward
        log_p1, log_p2 = model(cw_idxs, qw_idxs)
        if bug == "start_end_targets_swapped":
            loss = F.nll_loss(log_p1, y2) + F.nll_loss(log_p2, y1)
        else:
            loss = F.nll_loss(log_p1, y1) + F.nll_loss(log_p2, y2)
        loss_val = loss.item()

        # Backward
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step(step // batch_size)
        ema(model, step // batch_size)

        # Log info
        state["step"] = step + batch_size
        return loss_val

    def eval_fn(model, batch):
        """evaluate() on one batch under the EMA weights: the exact-match rate of the discretized spans."""
        (cw_idxs, qw_idxs), (y1, y2) = batch
        ema.assign(model)
        model.eval()
        with torch.no_grad():
            log_p1, log_p2 = model(cw_idxs, qw_idxs)
            p1, p2 = log_p1.exp(), log_p2.exp()
            starts, ends = discretize(p1, p2, MAX_ANS_LEN, USE_SQUAD_V2)
        model.train()
        ema.resume(model)
        return float(((starts == y1) & (ends == y2)).float().mean())

    def loss_fn(outputs, targets):
        log_p1, log_p2 = outputs
        y1, y2 = targets
        return F.nll_loss(log_p1, y1) + F.nll_loss(log_p2, y2)

    cw0, _cc0, qw0, _qc0, y10, y20, _ids0 = dev_batch
    return Program(name="chrischutesquad_bidaf", model=model, batch=((cw0, qw0), (y10, y20)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   frozen=("emb.embed.weight",), loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: masked_softmax called without log_softmax=True for the pointers while the loss stays F.nll_loss: the
    # "loss" is minus the probability of the gold index, not its log.
    Bug("softmax_not_log_softmax", functools.partial(_build, bug="softmax_not_log_softmax"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip: the start log-probabilities scored against the end index and the end ones against the
    # start index: each pointer is trained toward the other end of the answer span.
    Bug("start_end_targets_swapped", functools.partial(_build, bug="start_end_targets_swapped"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() left out of the batch loop: gradients accumulate over all steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
