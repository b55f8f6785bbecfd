# ruff: noqa: PLC0206, SIM118, SIM401, TRY002, UP031
"""Facebook's SentEval: a binary sentence-classification transfer task (``BinaryClassifierEval``: MR/CR/SUBJ/MPQA,
positives then negatives, the corpus sorted by (length, label) before the sentences are encoded batch by batch)
with the bag-of-words encoder of ``examples/bow.py`` (``create_dictionary``, the mean of the word vectors, a zero
vector for a sentence without known words), then ``InnerKFoldClassifier``'s PyTorch MLP: ``Linear -> Dropout ->
Sigmoid -> Linear``, ``CrossEntropyLoss``, the optimizer parsed by ``utils.get_optimizer`` with the l2 regularization
written into the first group's ``weight_decay``, ``trainepoch``'s shuffled minibatches (``zero_grad; backward;
step``) and ``fit``'s dev scoring under ``model.eval()`` after every ``epoch_size`` epochs (best model kept,
early stopping after ``tenacity`` non-improvements).

Source: https://github.com/facebookresearch/SentEval
Commit: 5d6dc117d1ac30357ddaeb7347fb5684e9b87015
Files: senteval/tools/classifier.py (PyTorchClassifier, MLP), senteval/tools/validation.py (InnerKFoldClassifier),
senteval/binary.py (BinaryClassifierEval.run), senteval/utils.py (get_optimizer), examples/bow.py (create_dictionary,
batcher), README.md (the classifier configs)
License: BSD-3-Clause (SentEval software, Copyright (c) 2017-present, Facebook, Inc.)
Domain: NLP classifier (probe on frozen sentence embeddings: bag of word vectors + MLP)

Deviations from the original:
- classifier config: the README's MLP for the probing tasks (``nhid`` 50, ``dropout`` 0.1, Sigmoid) with the default
  config's ``optim`` "adam", ``batch_size`` 64, ``tenacity`` 5, ``epoch_size`` 4; ``l2reg`` is the first value of the
  inner search (``10**-5``); the classifier's seed is ``1111 + seed`` (1111 in the original); one inner fold of the first outer fold is trained (the 5x5 cross-validation, the
  regularization search and the final refit repeat the same ``fit``); sklearn is not installed: ``StratifiedKFold``'s
  fold is written out as a stratified shuffled 1/5 hold-out in numpy (the same proportions, not sklearn's indices);
- data and vectors: the MR/CR/SUBJ/MPQA files and the fastText ``crawl-300d-2M.vec`` cannot be downloaded: 640
  synthetic sentences made from ``seed`` (4-12 words from a neutral vocabulary with 1-3 words from a subjective or
  an objective word list, label 1 or 0 accordingly) and 64-dimensional word vectors drawn from ``seed`` for the
  dictionary's words (``get_wordvec`` reads them from that table instead of a file), ``wvec_dim`` 300 -> 64;
- ``self.loss_fn.size_average = False`` is kept as written: in current PyTorch the attribute is no longer read after
  construction, so the loss is the batch mean (as it already was once PyTorch moved to ``reduction``);
- no GPU (``.cuda()`` calls dropped, ``cudaEfficient`` path); ``inspect.getargspec`` is gone from Python 3.11:
  ``get_optimizer``'s argument check uses ``inspect.signature``; one ``train_step`` is one minibatch of
  ``trainepoch``; after every ``epoch_size`` epochs ``fit``'s dev scoring and early-stopping bookkeeping run (the
  stop only ends the run in the original; here the steps go on); ``eval_fn`` is ``score`` on one batch.
"""

from __future__ import annotations

import copy
import functools
import inspect
import pathlib
import re
import sys

import numpy as np
import torch
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 40
WVEC_DIM = 64
NEUTRAL = [f"w{i}" for i in range(60)]
SUBJECTIVE = ["love", "hate", "wonderful", "awful", "beautiful", "boring", "charming", "stupid"]
OBJECTIVE = ["city", "year", "station", "river", "company", "report", "minister", "museum"]


# ---- senteval/utils.py ---------------------------------------------------------------------------------------------

def get_optimizer(s):
    """
    Parse optimizer parameters.
    Input should be of the form:
        - "sgd,lr=0.01"
        - "adagrad,lr=0.1,lr_decay=0.05"
    """
    if "," in s:
        method = s[:s.find(',')]
        optim_params = {}
        for x in s[s.find(',') + 1:].split(','):
            split = x.split('=')
            assert len(split) == 2
            assert re.match(r"^[+-]?(\d+(\.\d*)?|\.\d+)$", split[1]) is not None
            optim_params[split[0]] = float(split[1])
    else:
        method = s
        optim_params = {}

    if method == 'adadelta':
        optim_fn = optim.Adadelta
    elif method == 'adagrad':
        optim_fn = optim.Adagrad
    elif method == 'adam':
        optim_fn = optim.Adam
    elif method == 'adamax':
        optim_fn = optim.Adamax
    elif method == 'asgd':
        optim_fn = optim.ASGD
    elif method == 'rmsprop':
        optim_fn = optim.RMSprop
    elif method == 'rprop':
        optim_fn = optim.Rprop
    elif method == 'sgd':
        optim_fn = optim.SGD
        assert 'lr' in optim_params
    else:
        raise Exception('Unknown optimization method: "%s"' % method)

    # check that we give good parameters to the optimizer
    expected_args = list(inspect.signature(optim_fn.__init__).parameters)
    assert expected_args[:2] == ['self', 'params']
    if not all(k in expected_args[2:] for k in optim_params.keys()):
        raise Exception('Unexpected parameters: expected "%s", got "%s"' % (
            str(expected_args[2:]), str(optim_params.keys())))

    return optim_fn, optim_params


# ---- examples/bow.py -----------------------------------------------------------------------------------------------

class Params:
    pass


def create_dictionary(sentences, threshold=0):
    words = {}
    for s in sentences:
        for word in s:
            words[word] = words.get(word, 0) + 1

    if threshold > 0:
        newwords = {}
        for word in words:
            if words[word] >= threshold:
                newwords[word] = words[word]
        words = newwords
    words['<s>'] = 1e9 + 4
    words['</s>'] = 1e9 + 3
    words['<p>'] = 1e9 + 2

    sorted_words = sorted(words.items(), key=lambda x: -x[1])  # inverse sort
    id2word = []
    word2id = {}
    for i, (w, _) in enumerate(sorted_words):
        id2word.append(w)
        word2id[w] = i

    return id2word, word2id


def get_wordvec(vector_table, word2id):
    word_vec = {}
    for word, vec in vector_table.items():
        if word in word2id:
            word_vec[word] = vec
    return word_vec


def prepare(params, samples):
    _, params.word2id = create_dictionary(samples)
    params.word_vec = get_wordvec(params.vector_table, params.word2id)
    params.wvec_dim = WVEC_DIM


def batcher(params, batch):
    batch = [sent if sent != [] else ['.'] for sent in batch]
    embeddings = []

    for sent in batch:
        sentvec = []
        for word in sent:
            if word in params.word_vec:
                sentvec.append(params.word_vec[word])
        if not sentvec:
            vec = np.zeros(params.wvec_dim)
            sentvec.append(vec)
        sentvec = np.mean(sentvec, 0)
        embeddings.append(sentvec)

    embeddings = np.vstack(embeddings)
    return embeddings


# ---- senteval/tools/classifier.py ----------------------------------------------------------------------------------

class PyTorchClassifier:
    def __init__(self, inputdim, nclasses, l2reg=0., batch_size=64, seed=1111,
                 cudaEfficient=False):
        # fix seed
        np.random.seed(seed)
        torch.manual_seed(seed)

        self.inputdim = inputdim
        self.nclasses = nclasses
        self.l2reg = l2reg
        self.batch_size = batch_size
        self.cudaEfficient = cudaEfficient

    def prepare_split(self, X, y, validation_data=None, validation_split=None):
        # Preparing validation data
        assert validation_split or validation_data
        if validation_data is not None:
            trainX, trainy = X, y
            devX, devy = validation_data
        else:
            permutation = np.random.permutation(len(X))
            trainidx = permutation[int(validation_split * len(X)):]
            devidx = permutation[0:int(validation_split * len(X))]
            trainX, trainy = X[trainidx], y[trainidx]
            devX, devy = X[devidx], y[devidx]

        trainX = torch.from_numpy(trainX).to(dtype=torch.float32)
        trainy = torch.from_numpy(trainy).to(dtype=torch.int64)
        devX = torch.from_numpy(devX).to(dtype=torch.float32)
        devy = torch.from_numpy(devy).to(dtype=torch.int64)

        return trainX, trainy, devX, devy

    def score(self, devX, devy):
        if self.bug != "score_without_eval":
            self.model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(devX), self.batch_size):
                Xbatch = devX[i:i + self.batch_size]
                ybatch = devy[i:i + self.batch_size]
                output = self.model(Xbatch)
                pred = output.data.max(1)[1]
                correct += pred.long().eq(ybatch.data.long()).sum().item()
            accuracy = 1.0 * correct / len(devX)
        return accuracy


class MLP(PyTorchClassifier):
    def __init__(self, params, inputdim, nclasses, l2reg=0., batch_size=64,
                 seed=1111, cudaEfficient=False, bug=None):
        super(self.__class__, self).__init__(inputdim, nclasses, l2reg,
                                             batch_size, seed, cudaEfficient)
        self.bug = bug
        self.nhid = 0 if "nhid" not in params else params["nhid"]
        self.optim = "adam" if "optim" not in params else params["optim"]
        self.tenacity = 5 if "tenacity" not in params else params["tenacity"]
        self.epoch_size = 4 if "epoch_size" not in params else params["epoch_size"]
        self.max_epoch = 200 if "max_epoch" not in params else params["max_epoch"]
        self.dropout = 0. if "dropout" not in params else params["dropout"]
        self.batch_size = 64 if "batch_size" not in params else params["batch_size"]

        if params["nhid"] == 0:
            self.model = nn.Sequential(
                nn.Linear(self.inputdim, self.nclasses),
            )
        else:
            self.model = nn.Sequential(
                nn.Linear(self.inputdim, params["nhid"]),
                nn.Dropout(p=self.dropout),
                nn.Sigmoid(),
                nn.Linear(params["nhid"], self.nclasses),
            )

        if bug == "nll_on_logits":
            self.loss_fn = nn.NLLLoss()
        else:
            self.loss_fn = nn.CrossEntropyLoss()
        self.loss_fn.size_average = False

        optim_fn, optim_params = get_optimizer(self.optim)
        self.optimizer = optim_fn(self.model.parameters(), **optim_params)
        self.optimizer.param_groups[0]['weight_decay'] = self.l2reg


def stratified_fold(y, k, rng):
    test_idx = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test_idx += list(idx[:len(idx) // k])
    test_idx = np.sort(test_idx)
    return np.setdiff1d(np.arange(len(y)), test_idx), test_idx


def _build(seed, bug=None):
    rng = np.random.default_rng(seed)
    pos, neg = [], []
    for _ in range(640):
        subjective = rng.random() < 0.5
        words = [str(w) for w in rng.choice(NEUTRAL, size=rng.integers(4, 13))]
        for _ in range(rng.integers(1, 4)):
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(SUBJECTIVE if subjective else OBJECTIVE)))
        (pos if subjective else neg).append(words)

    # BinaryClassifierEval.__init__ / do_prepare / run
    samples, labels = pos + neg, [1] * len(pos) + [0] * len(neg)
    params = Params()
    params.batch_size = 128
    params.usepytorch = True
    params.classifier = {'nhid': 50, 'optim': 'adam', 'batch_size': 64, 'tenacity': 5, 'epoch_size': 4,
                         'dropout': 0.1}
    params.vector_table = {w: rng.normal(size=WVEC_DIM) for w in NEUTRAL + SUBJECTIVE + OBJECTIVE}
    prepare(params, samples)

    enc_input = []
    # Sort to reduce padding
    sorted_corpus = sorted(zip(samples, labels),
                           key=lambda z: (len(z[0]), z[1]))
    sorted_samples = [x for (x, y) in sorted_corpus]
    if bug == "labels_left_unsorted":
        # the sentences sorted by length for batching, the labels kept in the original (positives-first) order
        sorted_labels = list(labels)
    else:
        sorted_labels = [y for (x, y) in sorted_corpus]
    for ii in range(0, len(samples), params.batch_size):
        batch = sorted_samples[ii:ii + params.batch_size]
        embeddings = batcher(params, batch)
        enc_input.append(embeddings)
    enc_input = np.vstack(enc_input)
    X, y = enc_input, np.array(sorted_labels)

    # InnerKFoldClassifier.run: the first inner fold of the first outer fold, reg = regs[0]
    split_rng = np.random.default_rng(1111)
    train_idx, _test_idx = stratified_fold(y, 5, split_rng)
    X_train, y_train = X[train_idx], y[train_idx]
    inner_train_idx, inner_test_idx = stratified_fold(y_train, 5, split_rng)
    X_in_train, X_in_test = X_train[inner_train_idx], X_train[inner_test_idx]
    y_in_train, y_in_test = y_train[inner_train_idx], y_train[inner_test_idx]
    reg = 10 ** -5

    clf = MLP(params.classifier, inputdim=X.shape[1], nclasses=2, l2reg=reg, seed=1111 + seed, bug=bug)
    # fit(X_in_train, y_in_train, validation_data=(X_in_test, y_in_test))
    clf.nepoch = 0
    trainX, trainy, devX, devy = clf.prepare_split(X_in_train, y_in_train, validation_data=(X_in_test, y_in_test))
    state = {"epoch": 0, "i": 0, "permutation": None, "best": -1, "stop_count": 0}

    def train_step():
        if state["permutation"] is None or state["i"] >= len(trainX):  # trainepoch: one pass per epoch
            if state["permutation"] is not None:
                state["epoch"] += 1
                if state["epoch"] % clf.epoch_size == 0:  # fit: score on dev after epoch_size epochs
                    clf.nepoch += clf.epoch_size
                    accuracy = clf.score(devX, devy)
                    if accuracy > state["best"]:
                        state["best"] = accuracy
                        state["bestmodel"] = copy.deepcopy(clf.model)
                    else:
                        state["stop_count"] += 1
            if state["epoch"] % clf.epoch_size == 0:
                clf.model.train()
            state["permutation"] = np.random.permutation(len(trainX))
            state["i"] = 0
        i = state["i"]
        state["i"] += clf.batch_size
        idx = torch.from_numpy(state["permutation"][i:i + clf.batch_size]).long().to(trainX.device)

        Xbatch = trainX[idx]
        ybatch = trainy[idx]

        output = clf.model(Xbatch)
        # loss
        loss = clf.loss_fn(output, ybatch)
        # backward
        clf.optimizer.zero_grad()
        loss.backward()
        # Update parameters
        clf.optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        clf.model = model
        return clf.score(*batch)

    return Program(name="senteval_mlp_probe", model=clf.model, batch=(trainX[:64], trainy[:64]),
                   loss_fn=lambda out, yb: clf.loss_fn(out, yb), optimizer=clf.optimizer, train_step=train_step,
                   eval_fn=eval_fn, task_probe=(devX, devy))


build = functools.partial(_build)

BUGS = [
    # classic: the corpus sorted by length to reduce padding, the labels kept in their original order: the sorted
    # sentences' embeddings are paired with the labels of other sentences.
    Bug("labels_left_unsorted", functools.partial(_build, bug="labels_left_unsorted"), "learning_ledger", ("TASK",)),
    # classic: score() without self.model.eval(): the dev accuracy that selects the best model and drives early
    # stopping is measured with dropout on.
    Bug("score_without_eval", functools.partial(_build, bug="score_without_eval"), "six_claims", ("EVALUATION",)),
    # classic: NLLLoss on the MLP's raw outputs (the model has no LogSoftmax): the loss is minus the target logit.
    Bug("nll_on_logits", functools.partial(_build, bug="nll_on_logits"), "learning_ledger", ("OBJECTIVE",)),
]
