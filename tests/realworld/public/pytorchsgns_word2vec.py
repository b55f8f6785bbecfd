# ruff: noqa: UP004, UP008, UP031, PLR0402, C403  (the original's style is kept as written)
"""Word2vec skip-gram with negative sampling (Mikolov et al., 2013) from theeluwin/pytorch-sgns: ``preprocess.py``
turns each sentence into (center word, its 2 x ``window`` context words, padded with ``<UNK>``) pairs over a
vocabulary ordered by count, ``train.py`` trains a ``Word2Vec`` bundle of two embedding tables (input and output
vectors, index 0 the padding ``<UNK>`` row, uniform init in +-0.5 / dim) inside ``SGNS``, whose forward draws
``n_negs`` negatives per context word (uniformly over the vocabulary without ``--weights``), and returns minus the
mean of log sigmoid of the positive dot products plus the summed log sigmoid of the negated negative dot products;
Adam at its defaults, shuffled mini-batches.

Source: https://github.com/theeluwin/pytorch-sgns
Commit: 2d007c700545ae2a3e44b1f4bf37fa1b034a7d27
Files: ``model.py`` (``Bundler``, ``Word2Vec``, ``SGNS``), ``train.py`` (``PermutedSubsampledCorpus``, ``train``),
``preprocess.py`` (``Preprocess.skipgram``, ``build``, ``convert``)
License: MIT (Copyright (c) 2017 Jamie J Seol; full text in LICENSES/theeluwin-pytorch-sgns.txt)
Domain: NLP, word embeddings (skip-gram with negative sampling)

Kept as written: ``model.py`` whole (the ``LT`` / ``FT`` legacy constructors, the ``.cuda()`` branches that never
fire on CPU), ``Preprocess.skipgram`` / ``build`` / ``convert`` (UNK first, then words by decreasing count, context
padded with UNK), ``train``'s word-frequency and subsampling arithmetic (``ws`` is computed and, as upstream, never
passed to the dataset), ``PermutedSubsampledCorpus``, ``Adam(sgns.parameters())`` with default lr, the loop body
(``loss = sgns(iword, owords)``, ``zero_grad``, backward, step), the defaults window 5, n_negs 20, ss_t 1e-5,
``--weights`` off.

Deviations from the original:
- the text corpus (``./data/corpus.txt``) is not here: a synthetic corpus is made from ``seed``: 600 sentences of 12
  words, each sentence drawn from one of 8 topics, each topic a Zipf-weighted distribution over its own 40 words
  (plus 10 function words shared by all); the learnable rule is that context words come from the center word's
  topic; ``Preprocess`` works on the sentences in memory instead of reading and pickling files;
- sizes for 2 CPU cores: max_vocab 20000 -> the 330 entries made (UNK and the 329 words seen), e_dim 300 -> 32,
  mb 4096 -> 256;
- tqdm, argparse, the pickles and checkpoints are dropped; the dataset is built once instead of once per epoch;
- one ``train_step`` is one iteration of the loop over the DataLoader (a new shuffled epoch when it runs out),
  returning the loss; there is no evaluation upstream; the Program's batch is the first mini-batch as
  ``({"iword", "owords"}, None)`` with ``loss_fn`` taking the loss SGNS returns;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch as t
import torch.nn as nn
from torch import FloatTensor as FT
from torch import LongTensor as LT
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# model.py
class Bundler(nn.Module):

    def forward(self, data):
        raise NotImplementedError

    def forward_i(self, data):
        raise NotImplementedError

    def forward_o(self, data):
        raise NotImplementedError


class Word2Vec(Bundler):

    def __init__(self, vocab_size=20000, embedding_size=300, padding_idx=0):
        super(Word2Vec, self).__init__()
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.ivectors = nn.Embedding(self.vocab_size, self.embedding_size, padding_idx=padding_idx)
        self.ovectors = nn.Embedding(self.vocab_size, self.embedding_size, padding_idx=padding_idx)
        self.ivectors.weight = nn.Parameter(t.cat([t.zeros(1, self.embedding_size), FT(self.vocab_size - 1, self.embedding_size).uniform_(-0.5 / self.embedding_size, 0.5 / self.embedding_size)]))
        self.ovectors.weight = nn.Parameter(t.cat([t.zeros(1, self.embedding_size), FT(self.vocab_size - 1, self.embedding_size).uniform_(-0.5 / self.embedding_size, 0.5 / self.embedding_size)]))
        self.ivectors.weight.requires_grad = True
        self.ovectors.weight.requires_grad = True

    def forward(self, data):
        return self.forward_i(data)

    def forward_i(self, data):
        v = LT(data)
        v = v.cuda() if self.ivectors.weight.is_cuda else v
        return self.ivectors(v)

    def forward_o(self, data):
        v = LT(data)
        v = v.cuda() if self.ovectors.weight.is_cuda else v
        return self.ovectors(v)


class SGNS(nn.Module):

    def __init__(self, embedding, vocab_size=20000, n_negs=20, weights=None):
        super(SGNS, self).__init__()
        self.embedding = embedding
        self.vocab_size = vocab_size
        self.n_negs = n_negs
        self.weights = None
        if weights is not None:
            wf = np.power(weights, 0.75)
            wf = wf / wf.sum()
            self.weights = FT(wf)

    def forward(self, iword, owords):
        batch_size = iword.size()[0]
        context_size = owords.size()[1]
        if self.weights is not None:
            nwords = t.multinomial(self.weights, batch_size * context_size * self.n_negs, replacement=True).view(batch_size, -1)
        else:
            nwords = FT(batch_size, context_size * self.n_negs).uniform_(0, self.vocab_size - 1).long()
        if getattr(self, "bug", None) == "input_vectors_from_output_table":
            ivectors = self.embedding.forward_o(iword).unsqueeze(2)
        else:
            ivectors = self.embedding.forward_i(iword).unsqueeze(2)
        ovectors = self.embedding.forward_o(owords)
        if getattr(self, "bug", None) == "negatives_not_negated":
            nvectors = self.embedding.forward_o(nwords)
        else:
            nvectors = self.embedding.forward_o(nwords).neg()
        oloss = t.bmm(ovectors, ivectors).squeeze().sigmoid().log().mean(1)
        nloss = t.bmm(nvectors, ivectors).squeeze().sigmoid().log().view(-1, context_size, self.n_negs).sum(2).mean(1)
        return -(oloss + nloss).mean()


# preprocess.py
class Preprocess(object):

    def __init__(self, window=5, unk='<UNK>', data_dir='./data/'):
        self.window = window
        self.unk = unk
        self.data_dir = data_dir

    def skipgram(self, sentence, i):
        iword = sentence[i]
        left = sentence[max(i - self.window, 0): i]
        right = sentence[i + 1: i + 1 + self.window]
        return iword, [self.unk for _ in range(self.window - len(left))] + left + right + [self.unk for _ in range(self.window - len(right))]

    def build(self, lines, max_vocab=20000):  # (port) lines in memory instead of a file; no pickles
        self.wc = {self.unk: 1}
        for line in lines:
            line = line.strip()
            if not line:
                continue
            sent = line.split()
            for word in sent:
                self.wc[word] = self.wc.get(word, 0) + 1
        self.idx2word = [self.unk] + sorted(self.wc, key=self.wc.get, reverse=True)[:max_vocab - 1]
        self.word2idx = {self.idx2word[idx]: idx for idx, _ in enumerate(self.idx2word)}
        self.vocab = set([word for word in self.word2idx])

    def convert(self, lines, bug=None):
        data = []
        for line in lines:
            line = line.strip()
            if not line:
                continue
            sent = []
            for word in line.split():
                if word in self.vocab:
                    sent.append(word)
                else:
                    sent.append(self.unk)
            for i in range(len(sent)):
                iword, owords = self.skipgram(sent, i)
                data.append((self.word2idx[iword], [self.word2idx[oword] for oword in owords]))
        if bug == "center_words_permuted_alone":
            iwords = [iword for iword, _ in data]
            random.shuffle(iwords)
            data = [(iwords[k], data[k][1]) for k in range(len(data))]
        return data


# train.py
class PermutedSubsampledCorpus(Dataset):

    def __init__(self, data, ws=None):  # (port) the pairs in memory instead of train.dat
        if ws is not None:
            self.data = []
            for iword, owords in data:
                if random.random() > ws[iword]:
                    self.data.append((iword, owords))
        else:
            self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        iword, owords = self.data[idx]
        return iword, np.array(owords)


def _corpus(rng, n_sent=600, n_words=12, n_topics=8, per_topic=40, n_func=10):  # (port) the stand-in for corpus.txt
    zipf = 1.0 / np.arange(1, per_topic + 1)
    zipf = zipf / zipf.sum()
    lines = []
    for _ in range(n_sent):
        k = rng.integers(n_topics)
        words = []
        for _ in range(n_words):
            if rng.random() < 0.2:
                words.append("f%d" % rng.integers(n_func))
            else:
                words.append("t%d_%d" % (k, rng.choice(per_topic, p=zipf)))
        lines.append(" ".join(words))
    return lines


class args:  # (port) train.py / preprocess.py defaults, sizes as in the docstring
    e_dim = 32  # (port) 300
    n_negs = 20
    mb = 256  # (port) 4096
    ss_t = 1e-5
    weights = False
    window = 5
    max_vocab = 20000


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    lines = _corpus(np.random.default_rng(seed))
    pre = Preprocess(window=args.window)
    pre.build(lines, max_vocab=args.max_vocab)
    data = pre.convert(lines, bug=bug)

    idx2word = pre.idx2word
    wc = pre.wc
    wf = np.array([wc[word] for word in idx2word])
    wf = wf / wf.sum()
    ws = 1 - np.sqrt(args.ss_t / wf)
    ws = np.clip(ws, 0, 1)
    vocab_size = len(idx2word)
    weights = wf if args.weights else None
    model = Word2Vec(vocab_size=vocab_size, embedding_size=args.e_dim)
    sgns = SGNS(embedding=model, vocab_size=vocab_size, n_negs=args.n_negs, weights=weights)
    sgns.bug = bug
    optim = Adam(sgns.parameters())
    dataset = PermutedSubsampledCorpus(data)
    dataloader = DataLoader(dataset, batch_size=args.mb, shuffle=True,
                            generator=torch.Generator().manual_seed(seed))
    st = {"it": iter(dataloader)}

    def train_step():
        try:
            iword, owords = next(st["it"])
        except StopIteration:
            st["it"] = iter(dataloader)
            iword, owords = next(st["it"])
        loss = sgns(iword, owords)
        optim.zero_grad()
        loss.backward()
        optim.step()
        return loss.item()

    first = [dataset[i] for i in range(args.mb)]
    iword = torch.tensor([w for w, _ in first])
    owords = torch.from_numpy(np.stack([o for _, o in first]))
    return Program(name="pytorchsgns_word2vec", model=sgns, batch=({"iword": iword, "owords": owords}, None),
                   loss_fn=lambda loss, _targets: loss, optimizer=optim, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the negatives' dot products not negated (``.neg()`` left out), so the objective pulls the sampled
    # negatives towards the center word exactly as it pulls the true context words.
    Bug("negatives_not_negated", functools.partial(_build, bug="negatives_not_negated"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the center words read from the output table (``forward_o`` for ``forward_i``, a copy-paste slip): the
    # input vectors, the embeddings the script saves, never receive a gradient.
    Bug("input_vectors_from_output_table", functools.partial(_build, bug="input_vectors_from_output_table"),
        "reachability", ("embedding.ivectors.weight",)),
    # classic: the center words permuted on their own while the pairs are made (the contexts keep their order), so
    # the contexts no longer surround their center words.
    Bug("center_words_permuted_alone", functools.partial(_build, bug="center_words_permuted_alone"),
        "learning_ledger", ("TASK",)),
]
