# ruff: noqa: RUF059, SIM101, UP028
"""ASAPP's SRU repository, ``classification/train_classifier.py`` run with ``--lstm`` on MR (the README evaluates
CNN, LSTM and SRU on the six sentence-classification benchmarks): ``read_MR`` (``clean_str``, examples and labels
shuffled with one permutation), ``cv_split`` (fold ``cv`` as the test set, 10% of the rest as validation),
``EmbeddingLayer`` (pre-trained vectors, uniform(-0.25, 0.25) for the other words, rows L2-normalized, frozen),
``create_batches`` (left-padded, sequence-first ``[T, B]`` batches built once), the ``Model``: embedding dropout,
``nn.LSTM(n_d, d, depth, dropout)``, the last time step's output, dropout, a linear layer; ``CrossEntropyLoss``,
Adam over the parameters that require grad, ``model.zero_grad(); loss.backward(); optimizer.step()``;
``eval_model`` under ``no_grad`` + ``model.eval()`` (``model.train()`` restored after).

Source: https://github.com/asappresearch/sru
Commit: 9ddc8da12f067125c2cfdd4f3b28a87c02889681
Files: classification/train_classifier.py, classification/dataloader.py, classification/modules.py
(EmbeddingLayer), classification/README.md
License: MIT (Copyright (c) 2017 ASAPP Inc.)
Domain: NLP classifier (sentence classification, LSTM over frozen word vectors)

Deviations from the original:
- sizes: ``--d`` 128 -> 32, 300-dimensional word2vec vectors -> 32-dimensional; ``depth`` 2, dropout 0.5,
  batch 32 and lr 0.001 kept;
- data: the MR corpus (``rt-polarity.all``) and the GoogleNews word2vec file cannot be downloaded: 800 synthetic
  lines ``"<label> <text>"`` made from ``seed`` (5-14 filler words with 1-2 polar words from a positive or a
  negative list at random positions, label 1 or 0) go through ``read_corpus``'s parsing and ``clean_str``; the
  ``load_embedding`` table is drawn from ``seed`` for the filler words and the polar words (the OOV words of the
  original, here none, would get the uniform init); ``read_MR``'s ``random.seed(1234)`` and ``cv_split``'s
  ``random.shuffle`` run as written;
- no GPU (the ``.cuda()`` calls dropped); ``print(model)`` and the progress writes left out; one ``train_step`` is
  one batch of ``train_model``'s loop (``eval_model`` on the validation batches at the end of each epoch, the test
  error when it improves, as written); ``eval_fn`` is ``eval_model``'s accuracy on one batch; the model's
  ``args`` is a namespace with the command line's values.
"""

from __future__ import annotations

import functools
import pathlib
import random
import re
import sys
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 150
FILLER = [f"w{i}" for i in range(60)]
POSITIVE = ["moving", "funny", "charming", "gripping", "beautiful", "smart"]
NEGATIVE = ["dull", "stupid", "boring", "mess", "tedious", "flat"]


# ---- classification/dataloader.py ----------------------------------------------------------------------------------

def clean_str(string, TREC=False):
    """
    Tokenization/string cleaning for all datasets except for SST.
    Every dataset is lower cased except for TREC
    """
    string = re.sub(r"[^A-Za-z0-9(),!?\'\`]", " ", string)
    string = re.sub(r"\'s", " \'s", string)
    string = re.sub(r"\'ve", " \'ve", string)
    string = re.sub(r"n\'t", " n\'t", string)
    string = re.sub(r"\'re", " \'re", string)
    string = re.sub(r"\'d", " \'d", string)
    string = re.sub(r"\'ll", " \'ll", string)
    string = re.sub(r",", " , ", string)
    string = re.sub(r"!", " ! ", string)
    string = re.sub(r"\(", r" \( ", string)
    string = re.sub(r"\)", r" \) ", string)
    string = re.sub(r"\?", r" \? ", string)
    string = re.sub(r"\s{2,}", " ", string)
    return string.strip() if TREC else string.strip().lower()


def read_corpus(lines, clean=True, TREC=False):
    data = []
    labels = []
    for line in lines:
        label, sep, text = line.partition(' ')
        label = int(label)
        text = clean_str(text.strip()) if clean else text.strip()
        labels.append(label)
        data.append(text.split())
    return data, labels


def read_MR(lines, seed=1234, bug=None):
    data, labels = read_corpus(lines)
    random.seed(seed)
    perm = list(range(len(data)))
    random.shuffle(perm)
    data = [ data[i] for i in perm ]
    if bug != "labels_not_permuted":  # the labels left in file order while the sentences are shuffled
        labels = [ labels[i] for i in perm ]
    return data, labels


def cv_split(data, labels, nfold, test_id):
    assert (nfold > 1) and (test_id >= 0) and (test_id < nfold)
    lst_x = [ x for i, x in enumerate(data) if i%nfold != test_id ]
    lst_y = [ y for i, y in enumerate(labels) if i%nfold != test_id ]
    test_x = [ x for i, x in enumerate(data) if i%nfold == test_id ]
    test_y = [ y for i, y in enumerate(labels) if i%nfold == test_id ]
    perm = list(range(len(lst_x)))
    random.shuffle(perm)
    M = int(len(lst_x)*0.9)
    train_x = [ lst_x[i] for i in perm[:M] ]
    train_y = [ lst_y[i] for i in perm[:M] ]
    valid_x = [ lst_x[i] for i in perm[M:] ]
    valid_y = [ lst_y[i] for i in perm[M:] ]
    return train_x, train_y, valid_x, valid_y, test_x, test_y


def pad(sequences, pad_token='<pad>', pad_left=True):
    ''' input sequences is a list of text sequence [[str]]
        pad each text sequence to the length of the longest
    '''
    max_len = max(5,max(len(seq) for seq in sequences))
    if pad_left:
        return [ [pad_token]*(max_len-len(seq)) + seq for seq in sequences ]
    return [ seq + [pad_token]*(max_len-len(seq)) for seq in sequences ]


def create_one_batch(x, y, map2id, oov='<oov>'):
    oov_id = map2id[oov]
    x = pad(x)
    length = len(x[0])
    batch_size = len(x)
    x = [ map2id.get(w, oov_id) for seq in x for w in seq ]
    x = torch.LongTensor(x)
    assert x.size(0) == length*batch_size
    return x.view(batch_size, length).t().contiguous(), torch.LongTensor(y)


# shuffle training examples and create mini-batches
def create_batches(x, y, batch_size, map2id, perm=None, sort=False):

    lst = perm or range(len(x))

    # sort sequences based on their length; necessary for SST
    if sort:
        lst = sorted(lst, key=lambda i: len(x[i]))

    x = [ x[i] for i in lst ]
    y = [ y[i] for i in lst ]

    batches_x = [ ]
    batches_y = [ ]
    size = batch_size
    nbatch = (len(x)-1) // size + 1
    for i in range(nbatch):
        bx, by = create_one_batch(x[i*size:(i+1)*size], y[i*size:(i+1)*size], map2id)
        batches_x.append(bx)
        batches_y.append(by)

    if sort:
        perm = list(range(nbatch))
        random.shuffle(perm)
        batches_x = [ batches_x[i] for i in perm ]
        batches_y = [ batches_y[i] for i in perm ]

    return batches_x, batches_y


# ---- classification/modules.py -------------------------------------------------------------------------------------

def deep_iter(x):
    if isinstance(x, list) or isinstance(x, tuple):
        for u in x:
            for v in deep_iter(u):
                yield v
    else:
        yield x


class EmbeddingLayer(nn.Module):
    def __init__(self, n_d, words, embs=None, fix_emb=True, oov='<oov>', pad='<pad>', normalize=True):
        super().__init__()
        word2id = {}
        if embs is not None:
            embwords, embvecs = embs
            for word in embwords:
                assert word not in word2id, "Duplicate words in pre-trained embeddings"
                word2id[word] = len(word2id)

            if n_d != len(embvecs[0]):
                n_d = len(embvecs[0])

        for w in deep_iter(words):
            if w not in word2id:
                word2id[w] = len(word2id)

        if oov not in word2id:
            word2id[oov] = len(word2id)

        if pad not in word2id:
            word2id[pad] = len(word2id)

        self.word2id = word2id
        self.n_V, self.n_d = len(word2id), n_d
        self.oovid = word2id[oov]
        self.padid = word2id[pad]
        self.embedding = nn.Embedding(self.n_V, n_d)
        self.embedding.weight.data.uniform_(-0.25, 0.25)

        if embs is not None:
            weight  = self.embedding.weight
            weight.data[:len(embwords)].copy_(torch.from_numpy(embvecs))

        if normalize:
            weight = self.embedding.weight
            norms = weight.data.norm(2,1)
            if norms.dim() == 1:
                norms = norms.unsqueeze(1)
            weight.data.div_(norms.expand_as(weight.data))

        if fix_emb:
            self.embedding.weight.requires_grad = False

    def forward(self, input):
        return self.embedding(input)


# ---- classification/train_classifier.py ----------------------------------------------------------------------------

class Model(nn.Module):
    def __init__(self, args, emb_layer, nclasses=2):
        super().__init__()
        self.args = args
        self.drop = nn.Dropout(args.dropout)
        self.emb_layer = emb_layer
        self.encoder = nn.LSTM(
            emb_layer.n_d,
            args.d,
            args.depth,
            dropout = args.dropout,
        )
        d_out = args.d
        self.out = nn.Linear(d_out, nclasses)

    def forward(self, input):
        emb = self.emb_layer(input)
        emb = self.drop(emb)

        output, hidden = self.encoder(emb)
        if self.args.bug == "first_step_output":
            # output[0]: the first time step, a <pad> position for every sentence shorter than the batch's longest
            output = output[0]
        else:
            output = output[-1]

        output = self.drop(output)
        return self.out(output)


def eval_model(niter, model, valid_x, valid_y):
    with torch.no_grad():
        model.eval()
        criterion = nn.CrossEntropyLoss()
        correct = 0.0
        cnt = 0
        total_loss = 0.0
        for x, y in zip(valid_x, valid_y):
            output = model(x)
            loss = criterion(output, y)
            total_loss += loss.item()*x.size(1)
            pred = output.data.max(1)[1]
            correct += pred.eq(y).sum().item()
            cnt += y.numel()
        model.train()
    return 1.0-correct/cnt


def make_lines(rng, n):
    lines = []
    for _ in range(n):
        label = int(rng.random() < 0.5)
        words = [str(w) for w in rng.choice(FILLER, size=rng.integers(5, 15))]
        for _ in range(rng.integers(1, 3)):
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(POSITIVE if label else NEGATIVE)))
        lines.append(f"{label} {' '.join(words)} .")
    return lines


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = SimpleNamespace(dataset="mr", batch_size=32, max_epoch=100, d=32, dropout=0.5, depth=2, lr=0.001,
                           lr_decay=0, cv=0, lstm=True, cnn=False, bug=bug)
    data, label = read_MR(make_lines(rng, 800), bug=bug)
    embwords = FILLER + POSITIVE + NEGATIVE
    embs = (embwords, rng.normal(size=(len(embwords), 32)))
    emb_layer = EmbeddingLayer(args.d, data, embs=embs)
    train_x, train_y, valid_x, valid_y, test_x, test_y = cv_split(data, label, nfold=10, test_id=args.cv)

    nclasses = max(train_y)+1

    train_x, train_y = create_batches(train_x, train_y, args.batch_size, emb_layer.word2id)
    valid_x, valid_y = create_batches(valid_x, valid_y, args.batch_size, emb_layer.word2id)
    test_x, test_y = create_batches(test_x, test_y, args.batch_size, emb_layer.word2id)

    model = Model(args, emb_layer, nclasses)
    need_grad = lambda x: x.requires_grad
    optimizer = optim.Adam(
        filter(need_grad, model.parameters()),
        lr = args.lr
    )
    criterion = nn.CrossEntropyLoss()
    state = {"epoch": 0, "i": 0, "niter": 0, "best_valid": 1e+8, "test_err": 1e+8}
    model.train()

    def train_step():
        if state["i"] >= len(train_x):  # end of train_model: validation, then the next epoch
            valid_err = eval_model(state["niter"], model, valid_x, valid_y)
            if valid_err < state["best_valid"]:
                state["best_valid"] = valid_err
                state["test_err"] = eval_model(state["niter"], model, test_x, test_y)
            if args.lr_decay > 0:
                optimizer.param_groups[0]['lr'] *= args.lr_decay
            state["epoch"] += 1
            state["i"] = 0
            model.train()
        x, y = train_x[state["i"]], train_y[state["i"]]
        state["i"] += 1
        state["niter"] += 1
        model.zero_grad()
        output = model(x)
        loss = criterion(output, y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        x, y = batch
        return 1.0 - eval_model(state["niter"], model, [x], [y])

    return Program(name="sru_lstm_classifier", model=model, batch=(train_x[0], train_y[0]),
                   loss_fn=lambda out, y: criterion(out, y), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, frozen=("emb_layer.embedding.weight",), batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # classic: read_MR shuffles the sentences with perm but the labels line is left out (or applied to a copy):
    # every sentence is paired with the label of another line of the file.
    Bug("labels_not_permuted", functools.partial(_build, bug="labels_not_permuted"), "learning_ledger", ("TASK",)),
    # classic: output[0] instead of output[-1] with left-padded sequence-first batches: the classifier reads the
    # LSTM state at the first position, which is <pad> for all but the longest sentence of the batch.
    Bug("first_step_output", functools.partial(_build, bug="first_step_output"), "learning_ledger",
        ("DEPENDENCY",)),
]
