# ruff: noqa: F841, PLR0402, UP004, UP008, UP032, SIM101
"""Mixture of Softmaxes (Yang, Dai et al., "Breaking the Softmax Bottleneck"): an AWD-style 3-layer LSTM language
model (embedding dropout, locked dropout, DropConnect on the hidden-to-hidden weights, tied embedding) whose output
is a mixture of ``n_experts`` softmaxes: a ``latent`` tanh projection gives one context per expert, a ``prior``
gives the mixture weights, and the loss is ``nll_loss`` on the log of the mixed probabilities. ``main.py``'s
``train()``: batchified ``[T, B]`` data, a random BPTT length per batch (capped at ``bptt + max_seq_len_delta``)
with the learning rate scaled by ``seq_len / bptt``, the batch split into ``small_batch_size`` column chunks, each
with its own repackaged hidden state and its own backward (loss scaled by ``small_batch_size / batch_size``), AR
and TAR regularization, ``clip_grad_norm_`` 0.25, SGD.

Source: https://github.com/zihangdai/mos
Commit: 9c0c6089bc1041ccb64657c7b5603294df60d0a7
Files: ``main.py`` (``train``, ``evaluate``, the argparse defaults), ``model.py`` (``RNNModel``), ``utils.py``
(``repackage_hidden``, ``batchify``, ``get_batch``), ``data.py`` (``Dictionary``, ``Corpus``), ``weight_drop.py``,
``locked_dropout.py``, ``embed_regularize.py`` (these three and ``Dictionary`` in the helper
``_mos_layers.py``), README.md (the WikiText-2 command)
License: MIT (Copyright (c) 2017 Zihang Dai and Zhilin Yang; full text in LICENSES/zihangdai-mos.txt)
Domain: recurrent word-level language model (LSTM, truncated BPTT, mixture of softmaxes, gradient accumulation over
column chunks)

Kept as written: ``RNNModel`` (``init_weights``, the forward with the mixture, ``prob.add_(1e-8)`` before the log,
``init_hidden``), ``WeightDrop``, ``LockedDropout``, ``embedded_dropout``, ``repackage_hidden``, ``batchify``,
``get_batch``, ``train()``'s loop body and ``evaluate``; the WikiText-2 command's structure (``--small_batch_size
5`` of ``--batch_size 15``: three chunks; ``--dropouth 0.2 --dropoutl 0.29 --dropouti 0.55``), the defaults
(``--dropout 0.4 --dropoute 0.1 --wdrop 0.5 --alpha 2 --beta 1 --wdecay 1.2e-6 --clip 0.25``, tied weights,
``nlayers 3``), SGD.

Deviations from the original:
- sizes for 2 CPU cores: emsize 300 -> 16, nhid 1150 -> 48, nhidlast 650 -> 24, n_experts 15 -> 4, batch_size 15
  and small_batch_size 5 kept, bptt 70 -> 20, max_seq_len_delta 20 -> 5; lr 15 -> 10 (in a model this small the
  clipped step at lr 15 overshoots);
- data: WikiText-2 (``data.Corpus`` reading train/valid/test.txt) is replaced by a synthetic corpus made from
  ``seed`` with the same ``Dictionary`` and LongTensor layout: 48 "words" where each word is followed by one of two
  successors fixed per word (picked 80/20), sentences of 6-14 words ended by ``<eos>``;
- ``np.random.random`` / ``np.random.normal`` (the random BPTT length) come from a ``np.random.RandomState(seed)``;
  ``torch.manual_seed(seed)``; no GPU (``args.cuda`` False, no ``DataParallel``: ``parallel_model = model``); the
  ``print`` calls, ``create_exp_dir``, the logging, ``gc.collect()`` and checkpointing are left out;
- ``weight_drop.py``: in evaluation mode ``F.dropout(raw_w, training=False)`` returns the raw ``Parameter``, which
  ``setattr`` registers as a second parameter and the next training forward fails on any PyTorch >= 1.0; the
  workaround of salesforce/awd-lstm-lm#79 (``w = w.data`` when not training) is applied;
- one ``train_step`` is one iteration of ``train()``'s ``while`` loop (a fresh ``hidden`` list and ``i = 0`` at the
  start of each epoch) and returns the chunk-weighted ``raw_loss``; ``eval_fn`` is ``evaluate`` on the validation
  data (eval batch size 10); the end-of-epoch ASGD switch and checkpointing are outside the step;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _mos_layers import Dictionary, LockedDropout, WeightDrop, embedded_dropout


def _args(seed):
    return argparse.Namespace(
        model='LSTM', emsize=16, nhid=48, nhidlast=24, nlayers=3, lr=10.0, clip=0.25, batch_size=15, bptt=20,
        dropout=0.4, dropouth=0.2, dropouti=0.55, dropoute=0.1, dropoutl=0.29, wdrop=0.5, tied=True, seed=seed,
        alpha=2, beta=1, wdecay=1.2e-6, n_experts=4, small_batch_size=5, max_seq_len_delta=5, cuda=False)


# ---- model.py ----------------------------------------------------------------------------------------------------

class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nhidlast, nlayers,
                 dropout=0.5, dropouth=0.5, dropouti=0.5, dropoute=0.1, wdrop=0,
                 tie_weights=False, ldropout=0.5, n_experts=10, bug=None):
        super(RNNModel, self).__init__()
        self.bug = bug
        self.use_dropout = True
        self.lockdrop = LockedDropout()
        self.encoder = nn.Embedding(ntoken, ninp)

        self.rnns = [torch.nn.LSTM(ninp if l == 0 else nhid, nhid if l != nlayers - 1 else nhidlast, 1, dropout=0) for l in range(nlayers)]
        if wdrop:
            self.rnns = [WeightDrop(rnn, ['weight_hh_l0'], dropout=wdrop if self.use_dropout else 0) for rnn in self.rnns]
        self.rnns = torch.nn.ModuleList(self.rnns)

        self.prior = nn.Linear(nhidlast, n_experts, bias=False)
        self.latent = nn.Sequential(nn.Linear(nhidlast, n_experts*ninp), nn.Tanh())
        self.decoder = nn.Linear(ninp, ntoken)

        if tie_weights:
            #if nhid != ninp:
            #    raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.ninp = ninp
        self.nhid = nhid
        self.nhidlast = nhidlast
        self.nlayers = nlayers
        self.dropout = dropout
        self.dropouti = dropouti
        self.dropouth = dropouth
        self.dropoute = dropoute
        self.ldropout = ldropout
        self.dropoutl = ldropout
        self.n_experts = n_experts
        self.ntoken = ntoken

    def init_weights(self):
        initrange = 0.1
        self.encoder.weight.data.uniform_(-initrange, initrange)
        self.decoder.bias.data.fill_(0)
        self.decoder.weight.data.uniform_(-initrange, initrange)

    def forward(self, input, hidden, return_h=False, return_prob=False):
        batch_size = input.size(1)

        emb = embedded_dropout(self.encoder, input, dropout=self.dropoute if (self.training and self.use_dropout) else 0)
        #emb = self.idrop(emb)

        emb = self.lockdrop(emb, self.dropouti if self.use_dropout else 0)

        raw_output = emb
        new_hidden = []
        #raw_output, hidden = self.rnn(emb, hidden)
        raw_outputs = []
        outputs = []
        for l, rnn in enumerate(self.rnns):
            current_input = raw_output
            raw_output, new_h = rnn(raw_output, hidden[l])
            new_hidden.append(new_h)
            raw_outputs.append(raw_output)
            if l != self.nlayers - 1:
                #self.hdrop(raw_output)
                raw_output = self.lockdrop(raw_output, self.dropouth if self.use_dropout else 0)
                outputs.append(raw_output)
        hidden = new_hidden

        output = self.lockdrop(raw_output, self.dropout if self.use_dropout else 0)
        outputs.append(output)

        latent = self.latent(output)
        latent = self.lockdrop(latent, self.dropoutl if self.use_dropout else 0)
        logit = self.decoder(latent.view(-1, self.ninp))

        prior_logit = self.prior(output).contiguous().view(-1, self.n_experts)
        prior = nn.functional.softmax(prior_logit, 0 if self.bug == "prior_softmax_over_positions" else -1)

        prob = nn.functional.softmax(logit.view(-1, self.ntoken), -1).view(-1, self.n_experts, self.ntoken)
        prob = (prob * prior.unsqueeze(2).expand_as(prob)).sum(1)

        if return_prob:
            model_output = prob
        else:
            log_prob = torch.log(prob.add_(1e-8))
            model_output = log_prob

        model_output = model_output.view(-1, batch_size, self.ntoken)

        if return_h:
            return model_output, hidden, raw_outputs, outputs
        return model_output, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters()).data
        return [(Variable(weight.new(1, bsz, self.nhid if l != self.nlayers - 1 else self.nhidlast).zero_()),
                 Variable(weight.new(1, bsz, self.nhid if l != self.nlayers - 1 else self.nhidlast).zero_()))
                for l in range(self.nlayers)]


# ---- data.py (the file reads replaced by synthetic lines), utils.py -----------------------------------------------

def make_lines(rng, succ, n):
    """(port) Sentences of 6-14 words; word k is followed by succ[k][0] (80%) or succ[k][1] (20%)."""
    lines = []
    for _ in range(n):
        w = [rng.randint(48)]
        for _ in range(rng.randint(5, 14)):
            w.append(succ[w[-1]][0 if rng.random_sample() < 0.8 else 1])
        lines.append(' '.join('w{}'.format(k) for k in w))
    return lines


class Corpus(object):
    def __init__(self, seed):
        rng = np.random.RandomState(seed)
        succ = [rng.choice(48, size=2, replace=False) for _ in range(48)]
        self.dictionary = Dictionary()
        self.train = self.tokenize(make_lines(rng, succ, 500))
        self.valid = self.tokenize(make_lines(rng, succ, 60))

    def tokenize(self, lines):
        """Tokenizes a text file (here: a list of lines)."""
        tokens = 0
        for line in lines:
            words = line.split() + ['<eos>']
            tokens += len(words)
            for word in words:
                self.dictionary.add_word(word)
        ids = torch.LongTensor(tokens)
        token = 0
        for line in lines:
            words = line.split() + ['<eos>']
            for word in words:
                ids[token] = self.dictionary.word2idx[word]
                token += 1
        return ids


def repackage_hidden(h):
    """Wraps hidden states in new Variables, to detach them from their history."""
    if isinstance(h, tuple) or isinstance(h, list):
        return tuple(repackage_hidden(v) for v in h)
    else:
        return h.detach()

def batchify(data, bsz, args):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data

def get_batch(source, i, args, seq_len=None, bug=None):
    seq_len = min(seq_len if seq_len else args.bptt, len(source) - 1 - i)
    data = Variable(source[i:i+seq_len])
    # target = Variable(source[i+1:i+1+seq_len].view(-1))
    target = Variable(source[i+1:i+1+seq_len])
    if bug == "targets_not_shifted":
        target = Variable(source[i:i+seq_len])
    return data, target


# ---- main.py -----------------------------------------------------------------------------------------------------

def _train_step(args, model, optimizer, train_data, np_random, state, bug):
    """One iteration of ``train()``'s ``while`` loop (the hidden list and ``i`` kept in ``state``)."""
    parallel_model = model
    if state["hidden"] is None or not state["i"] < train_data.size(0) - 1 - 1:  # a new epoch: `def train()`
        state["hidden"] = [model.init_hidden(args.small_batch_size) for _ in range(args.batch_size // args.small_batch_size)]
        state["i"] = 0
    hidden, i = state["hidden"], state["i"]
    total_loss = 0

    bptt = args.bptt if np_random.random() < 0.95 else args.bptt / 2.
    # Prevent excessively small or negative sequence lengths
    seq_len = max(5, int(np_random.normal(bptt, 5)))
    # There's a very small chance that it could select a very long sequence length resulting in OOM
    seq_len = min(seq_len, args.bptt + args.max_seq_len_delta)

    lr2 = optimizer.param_groups[0]['lr']
    optimizer.param_groups[0]['lr'] = lr2 * seq_len / args.bptt
    model.train()
    data, targets = get_batch(train_data, i, args, seq_len=seq_len, bug=bug)

    optimizer.zero_grad()

    start, end, s_id = 0, args.small_batch_size, 0
    while start < args.batch_size:
        cur_data, cur_targets = data[:, start: end], targets[:, start: end].contiguous().view(-1)
        if bug == "zero_grad_every_chunk":
            optimizer.zero_grad()

        # Starting each batch, we detach the hidden state from how it was previously produced.
        # If we didn't, the model would try backpropagating all the way to start of the dataset.
        hidden[s_id] = repackage_hidden(hidden[s_id])

        log_prob, hidden[s_id], rnn_hs, dropped_rnn_hs = parallel_model(cur_data, hidden[s_id], return_h=True)
        raw_loss = nn.functional.nll_loss(log_prob.view(-1, log_prob.size(2)), cur_targets)

        loss = raw_loss
        # Activiation Regularization
        loss = loss + sum(args.alpha * dropped_rnn_h.pow(2).mean() for dropped_rnn_h in dropped_rnn_hs[-1:])
        # Temporal Activation Regularization (slowness)
        loss = loss + sum(args.beta * (rnn_h[1:] - rnn_h[:-1]).pow(2).mean() for rnn_h in rnn_hs[-1:])
        loss *= args.small_batch_size / args.batch_size
        total_loss += raw_loss.data * args.small_batch_size / args.batch_size
        loss.backward()

        s_id += 1
        start = end
        end = start + args.small_batch_size

    # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    optimizer.step()

    # total_loss += raw_loss.data
    optimizer.param_groups[0]['lr'] = lr2
    state["i"] = i + seq_len
    return total_loss.item()


def _build(seed, bug=None):
    args = _args(seed)
    np_random = np.random.RandomState(args.seed)
    torch.manual_seed(args.seed)

    corpus = Corpus(args.seed)
    eval_batch_size = 10
    train_data = batchify(corpus.train, args.batch_size, args)
    val_data = batchify(corpus.valid, eval_batch_size, args)

    ntokens = len(corpus.dictionary)
    model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nhidlast, args.nlayers,
                     args.dropout, args.dropouth, args.dropouti, args.dropoute, args.wdrop,
                     args.tied, args.dropoutl, args.n_experts, bug=bug)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=args.wdecay)
    state = {"hidden": None, "i": 0}

    def evaluate(data_source, batch_size=10):
        # Turn on evaluation mode which disables dropout.
        model.eval()
        total_loss = 0
        hidden = model.init_hidden(batch_size)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args)
                targets = targets.view(-1)

                log_prob, hidden = model(data, hidden)
                loss = nn.functional.nll_loss(log_prob.view(-1, log_prob.size(2)), targets).data

                total_loss += loss * len(data)

                hidden = repackage_hidden(hidden)
        return total_loss.item() / len(data_source)

    data, targets = get_batch(train_data, 0, args, bug=bug)
    batch = ({"input": data[:, :args.small_batch_size], "hidden": model.init_hidden(args.small_batch_size)},
             targets[:, :args.small_batch_size].contiguous().view(-1))
    loss_fn = lambda outputs, targets: nn.functional.nll_loss(outputs[0].view(-1, outputs[0].size(2)), targets)
    return Program(name="mos_lm", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=lambda: _train_step(args, model, optimizer, train_data, np_random, state, bug),
                   eval_fn=lambda m, _batch=None: evaluate(val_data, eval_batch_size), batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # get_batch's targets without the one-step shift (classic): the model is trained to copy its current input.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # the mixture weights normalized over the rows (positions) instead of the experts (softmax on axis 0 of
    # prior_logit): the mixed probabilities of a position no longer sum to one (classic wrong axis).
    Bug("prior_softmax_over_positions", functools.partial(_build, bug="prior_softmax_over_positions"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() inside the chunk loop: only the last small_batch_size chunk's gradient reaches the
    # step (classic; the accumulation the loop is written for is discarded).
    Bug("zero_grad_every_chunk", functools.partial(_build, bug="zero_grad_every_chunk"), "step_probe", (),
        kind="step.gradient_discarded"),
]
