"""AWD-LSTM word-level language model (Merity et al.): a 3-layer LSTM with DropConnect on the hidden-to-hidden
weights (``WeightDrop``), variational ``LockedDropout`` on the inputs, between layers and on the output, embedding
dropout, tied encoder/decoder weights, the ``SplitCrossEntropyLoss`` criterion, activation (AR) and temporal
activation (TAR) regularization, trained by ``main.py``'s ``train()``: batchified ``[T, B]`` data, a random BPTT
length per batch with the learning rate scaled by ``seq_len / bptt`` (and restored after the step), the hidden state
repackaged (detached) between batches, ``clip_grad_norm_(params, 0.25)``, SGD (the README's PTB command:
``--batch_size 20 --dropouti 0.4 --dropouth 0.25``).

Source: https://github.com/salesforce/awd-lstm-lm
Commit: 1d466ec5875675ca6b6f0caacbb741240a29da9e
Files: main.py, model.py, weight_drop.py, locked_dropout.py, embed_regularize.py, splitcross.py, utils.py, data.py
License: BSD-3-Clause (Copyright (c) 2017, full text in LICENSES/salesforce-awd-lstm-lm.txt)
Domain: recurrent language model (LSTM, truncated BPTT)

Deviations from the original:
- sizes: emsize 400 -> 16, nhid 1150 -> 48, bptt 70 -> 20 (nlayers 3, batch_size 20, clip 0.25, dropouts, wdrop
  0.5, alpha 2, beta 1, wdecay 1.2e-6 as in the README's PTB command); SGD lr 30 -> 10: in a model this small the
  clipped gradient (norm 0.25) times lr 30 is a step the size of the weights themselves and the loss does not
  settle;
- data: Penn Treebank (``data.Corpus`` reading train/valid/test.txt) is replaced by a synthetic corpus made from
  ``seed`` with the same ``Dictionary`` and LongTensor layout: sentences of 56 "words" drawn with Zipf-like
  frequencies, each sentence one 3-5 word phrase repeated 2-4 times and ended by ``<eos>``, so a word is predictable
  from the words before it;
  the corpus cache file (``corpus.<md5>.data``) is not written;
- ``np.random.random()`` / ``np.random.normal`` (the random BPTT length) come from a ``np.random.RandomState(seed)``
  instead of the seeded global generator, so a build is reproducible; ``torch.manual_seed(seed)``;
- no GPU (``args.cuda`` False, so ``batchify`` keeps the data on the CPU), QRNN/GRU branches not taken (LSTM);
  the ``print`` calls of ``RNNModel``, ``WeightDrop`` and the parameter count are left out;
- ``weight_drop.py``: in evaluation mode ``F.dropout(raw_w, training=False)`` returns the raw ``Parameter`` itself,
  which ``setattr`` then registers as a second parameter, and the next training forward raises "cannot assign
  'torch.FloatTensor' as parameter 'weight_hh_l0'" on any PyTorch >= 1.0
  (https://github.com/salesforce/awd-lstm-lm/issues/79, #114); the workaround given there (``w = w.data`` when not
  training) is applied, so ``evaluate`` can run between epochs;
- ``torch.autograd.Variable`` (a no-op wrapper since PyTorch 0.4) is kept where the original uses it;
- one ``train_step`` is one iteration of ``train()``'s ``while`` loop (with ``hidden = model.init_hidden`` and
  ``i = 0`` at the start of each epoch); the end-of-epoch evaluation, the ASGD switch, ``--when`` and checkpointing
  are outside the step; ``eval_fn`` is ``evaluate``'s loop body on a given batch from a fresh hidden state;
  ``train_step`` returns ``raw_loss``.
"""
# ruff: noqa: F841, PLR0402, UP004, UP008, UP032  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
from collections import Counter, defaultdict

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable
from torch.nn import Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


def _args(seed):
    """main.py's argparse defaults with the README's PTB command and the sizes of this port."""
    return argparse.Namespace(
        data='data/penn/', model='LSTM', emsize=16, nhid=48, nlayers=3, lr=10, clip=0.25, epochs=8000,
        batch_size=20, bptt=20, dropout=0.4, dropouth=0.25, dropouti=0.4, dropoute=0.1, wdrop=0.5, seed=seed,
        nonmono=5, cuda=False, log_interval=200, save='', alpha=2, beta=1, wdecay=1.2e-6, resume='',
        optimizer='sgd', when=[-1], tied=True)


# ---- data.py (Dictionary as written; Corpus over synthetic sentences) ------------------------------------------

class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []
        self.counter = Counter()
        self.total = 0

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        token_id = self.word2idx[word]
        self.counter[token_id] += 1
        self.total += 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


def make_lines(rng, n):
    """Sentences: one phrase of 3-5 words (w0..w55, word k drawn with probability ~ 1/(k+1), as word frequencies
    are) repeated 2-4 times."""
    p = 1.0 / np.arange(1, 57)
    p = p / p.sum()
    lines = []
    for _ in range(n):
        phrase = ['w{}'.format(w) for w in rng.choice(56, size=rng.randint(3, 6), p=p)]
        lines.append(' '.join(phrase * rng.randint(2, 5)))
    return lines


class Corpus(object):
    def __init__(self, seed):
        rng = np.random.RandomState(seed)
        self.dictionary = Dictionary()
        self.train = self.tokenize(make_lines(rng, 600))
        self.valid = self.tokenize(make_lines(rng, 60))
        self.test = self.tokenize(make_lines(rng, 60))

    def tokenize(self, lines):
        """Tokenizes a text file (here: a list of lines)."""
        # Add words to the dictionary
        tokens = 0
        for line in lines:
            words = line.split() + ['<eos>']
            tokens += len(words)
            for word in words:
                self.dictionary.add_word(word)

        # Tokenize file content
        ids = torch.LongTensor(tokens)
        token = 0
        for line in lines:
            words = line.split() + ['<eos>']
            for word in words:
                ids[token] = self.dictionary.word2idx[word]
                token += 1

        return ids


# ---- utils.py ---------------------------------------------------------------------------------------------------

def repackage_hidden(h):
    """Wraps hidden states in new Tensors,
    to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def batchify(data, bsz, args):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    if args.cuda:
        data = data.cuda()
    return data


def get_batch(source, i, args, seq_len=None, evaluation=False, bug=None):
    seq_len = min(seq_len if seq_len else args.bptt, len(source) - 1 - i)
    data = source[i:i+seq_len]
    if bug == "targets_not_shifted":
        # the targets taken at the inputs' own positions (the +1 dropped): the model learns to copy its input
        target = source[i:i+seq_len].view(-1)
    else:
        target = source[i+1:i+1+seq_len].view(-1)
    return data, target


# ---- embed_regularize.py ----------------------------------------------------------------------------------------

def embedded_dropout(embed, words, dropout=0.1, scale=None):
  if dropout:
    mask = embed.weight.data.new().resize_((embed.weight.size(0), 1)).bernoulli_(1 - dropout).expand_as(embed.weight) / (1 - dropout)
    masked_embed_weight = mask * embed.weight
  else:
    masked_embed_weight = embed.weight
  if scale:
    masked_embed_weight = scale.expand_as(masked_embed_weight) * masked_embed_weight

  padding_idx = embed.padding_idx
  if padding_idx is None:
      padding_idx = -1

  X = torch.nn.functional.embedding(words, masked_embed_weight,
    padding_idx, embed.max_norm, embed.norm_type,
    embed.scale_grad_by_freq, embed.sparse
  )
  return X


# ---- locked_dropout.py ------------------------------------------------------------------------------------------

class LockedDropout(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, dropout=0.5):
        if not self.training or not dropout:
            return x
        m = x.data.new(1, x.size(1), x.size(2)).bernoulli_(1 - dropout)
        mask = Variable(m, requires_grad=False) / (1 - dropout)
        mask = mask.expand_as(x)
        return mask * x


# ---- weight_drop.py ---------------------------------------------------------------------------------------------

class WeightDrop(torch.nn.Module):
    def __init__(self, module, weights, dropout=0, variational=False, bug=None):
        super(WeightDrop, self).__init__()
        self.module = module
        self.weights = weights
        self.dropout = dropout
        self.variational = variational
        self.bug = bug
        self._setup()

    def widget_demagnetizer_y2k_edition(*args, **kwargs):
        # We need to replace flatten_parameters with a nothing function
        # It must be a function rather than a lambda as otherwise pickling explodes
        # We can't write boring code though, so ... WIDGET DEMAGNETIZER Y2K EDITION!
        # (╯°□°）╯︵ ┻━┻
        return

    def _setup(self):
        # Terrible temporary solution to an issue regarding compacting weights re: CUDNN RNN
        if issubclass(type(self.module), torch.nn.RNNBase):
            self.module.flatten_parameters = self.widget_demagnetizer_y2k_edition

        for name_w in self.weights:
            w = getattr(self.module, name_w)
            del self.module._parameters[name_w]
            self.module.register_parameter(name_w + '_raw', Parameter(w.data))

    def _setweights(self):
        for name_w in self.weights:
            raw_w = getattr(self.module, name_w + '_raw')
            w = None
            if self.variational:
                mask = torch.autograd.Variable(torch.ones(raw_w.size(0), 1))
                if raw_w.is_cuda: mask = mask.cuda()
                mask = torch.nn.functional.dropout(mask, p=self.dropout, training=True)
                w = mask.expand_as(raw_w) * raw_w
            else:
                w = torch.nn.functional.dropout(raw_w, p=self.dropout, training=self.training)
            if not self.training:  # the workaround of issue #79 (see the module docstring)
                w = w.data
            if self.bug == "weight_drop_detached":
                # issue #79's workaround applied in training as well: the dropped weight is cut from raw_w's graph,
                # so weight_hh_l0_raw never gets a gradient (the bug of fastai's copy of this class,
                # https://github.com/fastai/fastai2/pull/427)
                w = w.data
            setattr(self.module, name_w, w)

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)


# ---- model.py ---------------------------------------------------------------------------------------------------

class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, dropouth=0.5, dropouti=0.5, dropoute=0.1, wdrop=0, tie_weights=False, bug=None):
        super(RNNModel, self).__init__()
        self.lockdrop = LockedDropout()
        self.idrop = nn.Dropout(dropouti)
        self.hdrop = nn.Dropout(dropouth)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        assert rnn_type in ['LSTM', 'QRNN', 'GRU'], 'RNN type is not supported'
        if rnn_type == 'LSTM':
            self.rnns = [torch.nn.LSTM(ninp if l == 0 else nhid, nhid if l != nlayers - 1 else (ninp if tie_weights else nhid), 1, dropout=0) for l in range(nlayers)]
            if wdrop:
                self.rnns = [WeightDrop(rnn, ['weight_hh_l0'], dropout=wdrop, bug=bug) for rnn in self.rnns]
        self.rnns = torch.nn.ModuleList(self.rnns)
        self.decoder = nn.Linear(nhid, ntoken)

        # Optionally tie weights as in:
        # "Using the Output Embedding to Improve Language Models" (Press & Wolf 2016)
        # https://arxiv.org/abs/1608.05859
        # and
        # "Tying Word Vectors and Word Classifiers: A Loss Framework for Language Modeling" (Inan et al. 2016)
        # https://arxiv.org/abs/1611.01462
        if tie_weights:
            #if nhid != ninp:
            #    raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.ninp = ninp
        self.nhid = nhid
        self.nlayers = nlayers
        self.dropout = dropout
        self.dropouti = dropouti
        self.dropouth = dropouth
        self.dropoute = dropoute
        self.tie_weights = tie_weights

    def reset(self):
        if self.rnn_type == 'QRNN': [r.reset() for r in self.rnns]

    def init_weights(self):
        initrange = 0.1
        self.encoder.weight.data.uniform_(-initrange, initrange)
        self.decoder.bias.data.fill_(0)
        self.decoder.weight.data.uniform_(-initrange, initrange)

    def forward(self, input, hidden, return_h=False):
        emb = embedded_dropout(self.encoder, input, dropout=self.dropoute if self.training else 0)
        #emb = self.idrop(emb)

        emb = self.lockdrop(emb, self.dropouti)

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
                raw_output = self.lockdrop(raw_output, self.dropouth)
                outputs.append(raw_output)
        hidden = new_hidden

        output = self.lockdrop(raw_output, self.dropout)
        outputs.append(output)

        result = output.view(output.size(0)*output.size(1), output.size(2))
        if return_h:
            return result, hidden, raw_outputs, outputs
        return result, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters()).data
        if self.rnn_type == 'LSTM':
            return [(weight.new(1, bsz, self.nhid if l != self.nlayers - 1 else (self.ninp if self.tie_weights else self.nhid)).zero_(),
                    weight.new(1, bsz, self.nhid if l != self.nlayers - 1 else (self.ninp if self.tie_weights else self.nhid)).zero_())
                    for l in range(self.nlayers)]
        elif self.rnn_type == 'QRNN' or self.rnn_type == 'GRU':
            return [weight.new(1, bsz, self.nhid if l != self.nlayers - 1 else (self.ninp if self.tie_weights else self.nhid)).zero_()
                    for l in range(self.nlayers)]


# ---- splitcross.py ----------------------------------------------------------------------------------------------

class SplitCrossEntropyLoss(nn.Module):
    r'''SplitCrossEntropyLoss calculates an approximate softmax'''
    def __init__(self, hidden_size, splits, verbose=False):
        # We assume splits is [0, split1, split2, N] where N >= |V|
        # For example, a vocab of 1000 words may have splits [0] + [100, 500] + [inf]
        super(SplitCrossEntropyLoss, self).__init__()
        self.hidden_size = hidden_size
        self.splits = [0] + splits + [100 * 1000000]
        self.nsplits = len(self.splits) - 1
        self.stats = defaultdict(list)
        self.verbose = verbose
        # Each of the splits that aren't in the head require a pretend token, we'll call them tombstones
        # The probability given to this tombstone is the probability of selecting an item from the represented split
        if self.nsplits > 1:
            self.tail_vectors = nn.Parameter(torch.zeros(self.nsplits - 1, hidden_size))
            self.tail_bias = nn.Parameter(torch.zeros(self.nsplits - 1))

    def logprob(self, weight, bias, hiddens, splits=None, softmaxed_head_res=None, verbose=False):
        # First we perform the first softmax on the head vocabulary and the tombstones
        if softmaxed_head_res is None:
            start, end = self.splits[0], self.splits[1]
            head_weight = None if end - start == 0 else weight[start:end]
            head_bias = None if end - start == 0 else bias[start:end]
            # We only add the tombstones if we have more than one split
            if self.nsplits > 1:
                head_weight = self.tail_vectors if head_weight is None else torch.cat([head_weight, self.tail_vectors])
                head_bias = self.tail_bias if head_bias is None else torch.cat([head_bias, self.tail_bias])

            # Perform the softmax calculation for the word vectors in the head for all splits
            # We need to guard against empty splits as torch.cat does not like random lists
            head_res = torch.nn.functional.linear(hiddens, head_weight, bias=head_bias)
            softmaxed_head_res = torch.nn.functional.log_softmax(head_res, dim=-1)

        if splits is None:
            splits = list(range(self.nsplits))

        results = []
        running_offset = 0
        for idx in splits:

            # For those targets in the head (idx == 0) we only need to return their loss
            if idx == 0:
                results.append(softmaxed_head_res[:, :-(self.nsplits - 1)])

            # If the target is in one of the splits, the probability is the p(tombstone) * p(word within tombstone)
            else:
                start, end = self.splits[idx], self.splits[idx + 1]
                tail_weight = weight[start:end]
                tail_bias = bias[start:end]

                # Calculate the softmax for the words in the tombstone
                tail_res = torch.nn.functional.linear(hiddens, tail_weight, bias=tail_bias)

                # Then we calculate p(tombstone) * p(word in tombstone)
                # Adding is equivalent to multiplication in log space
                head_entropy = (softmaxed_head_res[:, -idx]).contiguous()
                tail_entropy = torch.nn.functional.log_softmax(tail_res, dim=-1)
                results.append(head_entropy.view(-1, 1) + tail_entropy)

        if len(results) > 1:
            return torch.cat(results, dim=1)
        return results[0]

    def split_on_targets(self, hiddens, targets):
        # Split the targets into those in the head and in the tail
        split_targets = []
        split_hiddens = []

        # Determine to which split each element belongs (for each start split value, add 1 if equal or greater)
        # This method appears slower at least for WT-103 values for approx softmax
        #masks = [(targets >= self.splits[idx]).view(1, -1) for idx in range(1, self.nsplits)]
        #mask = torch.sum(torch.cat(masks, dim=0), dim=0)
        ###
        # This is equally fast for smaller splits as method below but scales linearly
        mask = None
        for idx in range(1, self.nsplits):
            partial_mask = targets >= self.splits[idx]
            mask = mask + partial_mask if mask is not None else partial_mask
        ###
        #masks = torch.stack([targets] * (self.nsplits - 1))
        #mask = torch.sum(masks >= self.split_starts, dim=0)
        for idx in range(self.nsplits):
            # If there are no splits, avoid costly masked select
            if self.nsplits == 1:
                split_targets, split_hiddens = [targets], [hiddens]
                continue
            # If all the words are covered by earlier targets, we have empties so later stages don't freak out
            if sum(len(t) for t in split_targets) == len(targets):
                split_targets.append([])
                split_hiddens.append([])
                continue
            # Are you in our split?
            tmp_mask = mask == idx
            split_targets.append(torch.masked_select(targets, tmp_mask))
            split_hiddens.append(hiddens.masked_select(tmp_mask.unsqueeze(1).expand_as(hiddens)).view(-1, hiddens.size(1)))
        return split_targets, split_hiddens

    def forward(self, weight, bias, hiddens, targets, verbose=False):
        if self.verbose or verbose:
            for idx in sorted(self.stats):
                print('{}: {}'.format(idx, int(np.mean(self.stats[idx]))), end=', ')
            print()

        total_loss = None
        if len(hiddens.size()) > 2: hiddens = hiddens.view(-1, hiddens.size(2))

        split_targets, split_hiddens = self.split_on_targets(hiddens, targets)

        # First we perform the first softmax on the head vocabulary and the tombstones
        start, end = self.splits[0], self.splits[1]
        head_weight = None if end - start == 0 else weight[start:end]
        head_bias = None if end - start == 0 else bias[start:end]

        # We only add the tombstones if we have more than one split
        if self.nsplits > 1:
            head_weight = self.tail_vectors if head_weight is None else torch.cat([head_weight, self.tail_vectors])
            head_bias = self.tail_bias if head_bias is None else torch.cat([head_bias, self.tail_bias])

        # Perform the softmax calculation for the word vectors in the head for all splits
        # We need to guard against empty splits as torch.cat does not like random lists
        combo = torch.cat([split_hiddens[i] for i in range(self.nsplits) if len(split_hiddens[i])])
        ###
        all_head_res = torch.nn.functional.linear(combo, head_weight, bias=head_bias)
        softmaxed_all_head_res = torch.nn.functional.log_softmax(all_head_res, dim=-1)
        if self.verbose or verbose:
            self.stats[0].append(combo.size()[0] * head_weight.size()[0])

        running_offset = 0
        for idx in range(self.nsplits):
            # If there are no targets for this split, continue
            if len(split_targets[idx]) == 0: continue

            # For those targets in the head (idx == 0) we only need to return their loss
            if idx == 0:
                softmaxed_head_res = softmaxed_all_head_res[running_offset:running_offset + len(split_hiddens[idx])]
                entropy = -torch.gather(softmaxed_head_res, dim=1, index=split_targets[idx].view(-1, 1))
            # If the target is in one of the splits, the probability is the p(tombstone) * p(word within tombstone)
            else:
                softmaxed_head_res = softmaxed_all_head_res[running_offset:running_offset + len(split_hiddens[idx])]

                if self.verbose or verbose:
                    start, end = self.splits[idx], self.splits[idx + 1]
                    tail_weight = weight[start:end]
                    self.stats[idx].append(split_hiddens[idx].size()[0] * tail_weight.size()[0])

                # Calculate the softmax for the words in the tombstone
                tail_res = self.logprob(weight, bias, split_hiddens[idx], splits=[idx], softmaxed_head_res=softmaxed_head_res)

                # Then we calculate p(tombstone) * p(word in tombstone)
                # Adding is equivalent to multiplication in log space
                head_entropy = softmaxed_head_res[:, -idx]
                # All indices are shifted - if the first split handles [0,...,499] then the 500th in the second split will be 0 indexed
                indices = (split_targets[idx] - self.splits[idx]).view(-1, 1)
                # Warning: if you don't squeeze, you get an N x 1 return, which acts oddly with broadcasting
                tail_entropy = torch.gather(torch.nn.functional.log_softmax(tail_res, dim=-1), dim=1, index=indices).squeeze()
                entropy = -(head_entropy + tail_entropy)
            ###
            running_offset += len(split_hiddens[idx])
            total_loss = entropy.float().sum() if total_loss is None else total_loss + entropy.float().sum()

        return (total_loss / len(targets)).type_as(weight)


# ---- main.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    args = _args(seed)
    np_random = np.random.RandomState(args.seed)
    torch.manual_seed(args.seed)

    corpus = Corpus(args.seed)
    train_data = batchify(corpus.train, args.batch_size, args)

    criterion = None
    ntokens = len(corpus.dictionary)
    model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.dropouth, args.dropouti, args.dropoute, args.wdrop, args.tied, bug=bug)
    if not criterion:
        splits = []
        if ntokens > 500000:
            # One Billion
            # This produces fairly even matrix mults for the buckets:
            # 0: 11723136, 1: 10854630, 2: 11270961, 3: 11219422
            splits = [4200, 35000, 180000]
        elif ntokens > 75000:
            # WikiText-103
            splits = [2800, 20000, 76000]
        criterion = SplitCrossEntropyLoss(args.emsize, splits=splits, verbose=False)
    params = list(model.parameters()) + list(criterion.parameters())

    optimizer = None
    # Ensure the optimizer is optimizing params, which includes both the model's weights as well as the criterion's weight (i.e. Adaptive Softmax)
    if args.optimizer == 'sgd':
        optimizer = torch.optim.SGD(params, lr=args.lr, weight_decay=args.wdecay)
    if args.optimizer == 'adam':
        optimizer = torch.optim.Adam(params, lr=args.lr, weight_decay=args.wdecay)

    state = {"hidden": None, "i": 0, "batch": 0}

    def train_step():
        # `def train()`: at the start of an epoch the hidden state is fresh and i starts at 0
        if state["hidden"] is None or not state["i"] < train_data.size(0) - 1 - 1:
            if args.model == 'QRNN': model.reset()
            state["hidden"] = model.init_hidden(args.batch_size)
            state["i"], state["batch"] = 0, 0
        hidden, i = state["hidden"], state["i"]

        bptt = args.bptt if np_random.random() < 0.95 else args.bptt / 2.
        # Prevent excessively small or negative sequence lengths
        seq_len = max(5, int(np_random.normal(bptt, 5)))
        # There's a very small chance that it could select a very long sequence length resulting in OOM
        # seq_len = min(seq_len, args.bptt + 10)

        lr2 = optimizer.param_groups[0]['lr']
        optimizer.param_groups[0]['lr'] = lr2 * seq_len / args.bptt
        model.train()
        data, targets = get_batch(train_data, i, args, seq_len=seq_len, bug=bug)

        # Starting each batch, we detach the hidden state from how it was previously produced.
        # If we didn't, the model would try backpropagating all the way to start of the dataset.
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()

        output, hidden, rnn_hs, dropped_rnn_hs = model(data, hidden, return_h=True)
        raw_loss = criterion(model.decoder.weight, model.decoder.bias, output, targets)

        loss = raw_loss
        # Activiation Regularization
        if args.alpha: loss = loss + sum(args.alpha * dropped_rnn_h.pow(2).mean() for dropped_rnn_h in dropped_rnn_hs[-1:])
        # Temporal Activation Regularization (slowness)
        if args.beta: loss = loss + sum(args.beta * (rnn_h[1:] - rnn_h[:-1]).pow(2).mean() for rnn_h in rnn_hs[-1:])
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        if args.clip: torch.nn.utils.clip_grad_norm_(params, args.clip)
        optimizer.step()

        optimizer.param_groups[0]['lr'] = lr2
        ###
        state["hidden"], state["i"], state["batch"] = hidden, i + seq_len, state["batch"] + 1
        return raw_loss.detach()

    def eval_fn(model, batch):
        # Turn on evaluation mode which disables dropout.
        model.eval()
        if args.model == 'QRNN': model.reset()
        inputs, targets = batch
        hidden = model.init_hidden(inputs["input"].size(1))
        with torch.no_grad():
            output, hidden = model(inputs["input"], hidden)
            loss = criterion(model.decoder.weight, model.decoder.bias, output, targets).data
        return loss.item()

    data, targets = get_batch(train_data, 0, args, bug=bug)
    batch = ({"input": data, "hidden": model.init_hidden(args.batch_size)}, targets)
    loss_fn = lambda outputs, targets: criterion(model.decoder.weight, model.decoder.bias, outputs[0], targets)
    return Program(name="awdlstm_lm", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # The fix of https://github.com/salesforce/awd-lstm-lm/issues/79 (``w = w.data``) applied in training too: the
    # dropped hidden-to-hidden weight is detached from weight_hh_l0_raw, which never gets a gradient (the bug of
    # fastai's copy of WeightDrop, https://github.com/fastai/fastai2/pull/427).
    Bug("weight_drop_detached", functools.partial(_build, bug="weight_drop_detached"), "reachability",
        ("rnns.0.module.weight_hh_l0_raw",)),
    # get_batch's targets without the one-step shift (classic): the model is trained to copy its current input.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
]
