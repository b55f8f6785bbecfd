"""Character-level CNN text classifier (Zhang, Zhao & LeCun, 2015) of srviest/char-cnn-text-classification-pytorch
on AG's News: each text lower-cased, reversed and one-hot encoded over a 70-character alphabet up to ``l0``
characters, six temporal convolutions (kernels 7, 7, 3, 3, 3, 3; max-pooling by 3 after the 1st, 2nd and 6th), two
fully connected layers with dropout 0.5, a 4-way ``LogSoftmax``; ``F.nll_loss`` on labels shifted from 1..4 to
0..3 in place, Adam lr 1e-4, ``clip_grad_norm`` at 400; evaluation in ``model.eval()`` by the summed NLL and the
accuracy.

Source: https://github.com/srviest/char-cnn-text-classification-pytorch
Commit: f269894ad40ef4d716b76b24db20379f102cae37
Files: train.py (train, eval, make_data_loader, main), model.py (CharCNN), data_loader.py (AGNEWs), alphabet.json
License: Apache-2.0 (full text in LICENSES/srviest-char-cnn-text-classification-pytorch.txt)
Domain: text classification, character level (one-hot characters, temporal CNN, news topics)

Deviations from the original:
- AG's News is not here: the rows are synthetic AG-style CSV rows made from ``seed`` (label 1-4, a title and a
  description of made-up words, under ``l0`` characters as ``oneHotEncode`` needs; each class draws most of its
  words from its own 30-word vocabulary, spelled with six letters of its own, and the rest from a shared one), 1280
  training and 256 validation rows, read by ``AGNEWs.load`` from a list of rows instead of a file (``csv.reader``
  over the lines as written); ``alphabet.json``'s 70 characters are inlined (its duplicated "-" kept).
- sizes for 2 CPU cores: ``l0`` 1014 -> 258, the convolutions' 256 channels -> 32, the fully connected 1024 units
  -> 64; ``fc1``'s input, hard-coded as 8704 (= 256 x 34 for ``l0`` 1014), is 32 x 6 = 192 for ``l0`` 258;
  ``batch_size`` 32 and ``dropout`` 0.5 kept; ``lr`` 1e-4 -> 2e-3 so that the 30 steps of the self-check show the
  loss falling (the original runs 200 epochs of AG's 120000 rows); the optimizer is train.py's default 'Adam' (no
  dynamic lr with Adam, as written).
- no CUDA, checkpoints, result logging, prints or ``print_f_score`` (metric.py); ``Variable`` kept (a no-op);
  ``volatile=True`` (removed from torch) dropped from ``eval``'s ``Variable``, which runs under ``torch.no_grad()``
  instead; ``size_average = False`` (removed) is ``reduction='sum'``; ``num_workers`` 1 -> 0, the DataLoader
  shuffled by a ``torch.Generator`` seeded from ``seed``.
- one ``train_step`` is one batch of ``train``'s loop (a new epoch starts when the loader runs out), returning
  the loss; ``eval_fn`` is ``eval`` over the validation loader returning ``(avg_loss, accuracy)``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, PLR0402, RUF059

from __future__ import annotations

import csv
import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# alphabet.json (port: inlined)
ALPHABET = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t",
            "u", "v", "w", "x", "y", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "-", ",", ";", ".",
            "!", "?", ":", "'", "\"", "\\", "/", "|", "_", "@", "#", "$", "%", "^", "&", "*", "~", "`", "+",
            "-", "=", "<", ">", "(", ")", "[", "]", "{", "}", "\n"]

WIDTH = 32  # (port) 256
FC = 64  # (port) 1024


# ---- model.py ----------------------------------------------------------------------------------------------------
class  CharCNN(nn.Module):
    def __init__(self, args, bug=None):
        super(CharCNN, self).__init__()
        self.conv1 = nn.Sequential(
            nn.Conv1d(args.num_features, WIDTH, kernel_size=7, stride=1),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=3, stride=3)
        )

        self.conv2 = nn.Sequential(
            nn.Conv1d(WIDTH, WIDTH, kernel_size=7, stride=1),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=3, stride=3)
        )

        self.conv3 = nn.Sequential(
            nn.Conv1d(WIDTH, WIDTH, kernel_size=3, stride=1),
            nn.ReLU()
        )

        self.conv4 = nn.Sequential(
            nn.Conv1d(WIDTH, WIDTH, kernel_size=3, stride=1),
            nn.ReLU()
        )

        self.conv5 = nn.Sequential(
            nn.Conv1d(WIDTH, WIDTH, kernel_size=3, stride=1),
            nn.ReLU()
        )

        self.conv6 = nn.Sequential(
            nn.Conv1d(WIDTH, WIDTH, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=3, stride=3)
        )


        self.fc1 = nn.Sequential(
            nn.Linear(WIDTH * 6, FC),  # (port) nn.Linear(8704, 1024)
            nn.ReLU(),
            nn.Dropout(p=args.dropout)
        )

        self.fc2 = nn.Sequential(
            nn.Linear(FC, FC),
            nn.ReLU(),
            nn.Dropout(p=args.dropout)
        )

        self.fc3 = nn.Linear(FC, 4)
        if bug == "log_softmax_over_batch":
            self.log_softmax = nn.LogSoftmax(dim=0)
        else:
            self.log_softmax = nn.LogSoftmax()

    def forward(self, x):
        x = self.conv1(x)
        x = self.conv2(x)
        x = self.conv3(x)
        x = self.conv4(x)
        x = self.conv5(x)
        x = self.conv6(x)

        # collapse
        x = x.view(x.size(0), -1)
        # linear layer
        x = self.fc1(x)
        # linear layer
        x = self.fc2(x)
        # linear layer
        x = self.fc3(x)
        # output layer
        x = self.log_softmax(x)

        return x


# ---- data_loader.py ----------------------------------------------------------------------------------------------
class AGNEWs(Dataset):
    def __init__(self, label_data_path, alphabet_path, l0 = 1014):
        """Create AG's News dataset object.

        Arguments:
            label_data_path: The path of label and data file in csv.
            l0: max length of a sample.
            alphabet_path: The path of alphabet json file.
        """
        self.label_data_path = label_data_path
        self.l0 = l0
        # read alphabet
        self.loadAlphabet(alphabet_path)
        self.load(label_data_path)


    def __len__(self):
        return len(self.label)


    def __getitem__(self, idx):
        X = self.oneHotEncode(idx)
        y = self.y[idx]
        return X, y

    def loadAlphabet(self, alphabet_path):
        self.alphabet = ''.join(alphabet_path)  # (port) ''.join(json.load(open(alphabet_path)))

    def load(self, label_data_path, lowercase = True):
        self.label = []
        self.data = []
        f = label_data_path  # (port) the CSV's lines
        rdr = csv.reader(f, delimiter=',', quotechar='"')
        # num_samples = sum(1 for row in rdr)
        for index, row in enumerate(rdr):
            self.label.append(int(row[0]))
            txt = ' '.join(row[1:])
            if lowercase:
                txt = txt.lower()
            self.data.append(txt)

        self.y = torch.LongTensor(self.label)


    def oneHotEncode(self, idx):
        # X = (batch, 70, sequence_length)
        X = torch.zeros(len(self.alphabet), self.l0)
        sequence = self.data[idx]
        for index_char, char in enumerate(sequence[::-1]):
            if self.char2Index(char)!=-1:
                X[self.char2Index(char)][index_char] = 1.0
        return X

    def char2Index(self, character):
        return self.alphabet.find(character)


def synthetic_agnews_rows(rng, n, vocabs, shared):
    """(port) AG-style CSV rows: "label","title","description"; most words from the class's own vocabulary."""
    rows = []
    for _ in range(n):
        label = int(rng.integers(1, 5))

        def words(k, label=label):
            return " ".join(vocabs[label - 1][int(rng.integers(30))] if rng.random() < 0.7
                            else shared[int(rng.integers(len(shared)))] for _ in range(k))
        title = words(int(rng.integers(2, 5))).capitalize()
        desc = words(int(rng.integers(10, 23))).capitalize() + "."
        assert len(title) + len(desc) + 1 <= 258  # (port) oneHotEncode indexes past l0 on a longer text
        rows.append('"{}","{}","{}"\n'.format(label, title, desc))
    return rows


def _words(rng, n, letters="abcdefghijklmnopqrstuvwxyz"):
    letters = np.array(list(letters))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 9)))) for _ in range(n)]


# ---- train.py ----------------------------------------------------------------------------------------------------
def make_data_loader(dataset_path, alphabet_path, l0, batch_size, num_workers, seed):
    dataset = AGNEWs(label_data_path=dataset_path, alphabet_path=alphabet_path, l0=l0)
    dataset_loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, drop_last=True, shuffle=True,
                                generator=torch.Generator().manual_seed(seed))
    return dataset, dataset_loader


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = SimpleNamespace(lr=0.002, epochs=200, batch_size=32, max_norm=400, optimizer='Adam', class_weight=None,
                           dynamic_lr=False, milestones=[5, 10, 15], decay_factor=0.5, l0=258, dropout=0.5,
                           num_workers=0, cuda=False, verbose=False, log_interval=1, val_interval=200)

    classes = rng.permutation(list("abcdefghijklmnopqrstuvwxyz"))[:24].reshape(4, 6)
    vocabs = [_words(rng, 30, "".join(c)) for c in classes]
    shared = _words(rng, 60)
    train_rows = synthetic_agnews_rows(rng, 1280, vocabs, shared)
    val_rows = synthetic_agnews_rows(rng, 256, vocabs, shared)

    # load train and dev data
    train_dataset, train_loader = make_data_loader(train_rows, ALPHABET, args.l0, args.batch_size,
                                                   args.num_workers, seed)
    dev_dataset, dev_loader = make_data_loader(val_rows, ALPHABET, args.l0, args.batch_size,
                                               args.num_workers, seed + 1)

    # feature length
    args.num_features = len(train_dataset.alphabet)

    # model
    model = CharCNN(args, bug=bug)

    # train(train_loader, dev_loader, model, args)
    # optimization scheme
    if args.optimizer == 'Adam':
        optimizer = optim.Adam(model.parameters(), lr = args.lr)
    elif args.optimizer == 'SGD':
        optimizer = optim.SGD(model.parameters(), lr = args.lr, momentum = 0.9)
    elif args.optimizer == 'ASGD':
        optimizer = optim.ASGD(model.parameters(), lr = args.lr)

    model.train()
    state = {"it": iter(train_loader)}

    def train_step():
        try:
            data = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            data = next(state["it"])
        inputs, target = data
        target.sub_(1)

        inputs = Variable(inputs)
        target = Variable(target)
        logit = model(inputs)
        loss = F.nll_loss(logit, target)
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        torch.nn.utils.clip_grad_norm(model.parameters(), args.max_norm)
        optimizer.step()
        return loss.detach()

    def eval(model, _batch=None):
        data_loader = dev_loader
        if bug != "eval_without_model_eval":
            model.eval()
        corrects, avg_loss, accumulated_loss, size = 0, 0, 0, 0
        predicates_all, target_all = [], []
        with torch.no_grad():  # (port) Variable(inputs, volatile=True)
            for i_batch, (data) in enumerate(data_loader):
                inputs, target = data
                target.sub_(1)

                size += len(target)

                inputs = Variable(inputs)
                target = Variable(target)
                logit = model(inputs)
                predicates = torch.max(logit, 1)[1].view(target.size()).data
                accumulated_loss += F.nll_loss(logit, target, reduction='sum').data  # (port) size_average = False
                corrects += (torch.max(logit, 1)[1].view(target.size()).data == target.data).sum()
                predicates_all += predicates.cpu().numpy().tolist()
                target_all += target.data.cpu().numpy().tolist()

        avg_loss = accumulated_loss / size
        accuracy = 100.0 * corrects / size
        model.train()
        return float(avg_loss), float(accuracy)

    x0 = torch.stack([train_dataset[i][0] for i in range(args.batch_size)])
    y0 = train_dataset.y[:args.batch_size] - 1
    return Program(name="charcnn_agnews", model=model, batch=(x0, y0), loss_fn=F.nll_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the implicit-dim ``nn.LogSoftmax()`` "fixed" with ``dim=0``: the log-probabilities are normalized
    # over the batch, not over the four classes, before ``nll_loss``.
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``eval`` without ``model.eval()``: the validation loss and accuracy are measured with dropout on.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
    # optimizer.zero_grad() moved between loss.backward() and optimizer.step() (classic): every step applies a zero
    # gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
