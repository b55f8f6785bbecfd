"""Kim's CNN for sentence classification (CNN-rand) as trained by the repository on the MR movie-review polarity
task: ``CNN_Text`` (embedding with ``padding_idx=0`` initialized uniform[-0.25, 0.25], one ``Conv2d`` per kernel
size 3/4/5 over the (words x embedding) plane, ReLU, max-over-time pooling, dropout 0.5, ``fc1``), the dataset's
``Vocab``/``MRDataset``/``collate_fn`` (padding to the longest, at least 5), Adam lr 0.001, and ``train()``'s loop
body: ``model.train()``, zero_grad, ``F.cross_entropy``, backward, step, then Kim's max-norm constraint (3.0) on the
rows of ``fc1.weight``.

Source: https://github.com/Shawn1993/cnn-text-classification-pytorch
Commit: 93415f08168a1ae60635320569f6eca0ae3a40bb
Files: model.py, train.py, mydatasets.py, main.py
License: Apache-2.0 (LICENSES/Shawn1993-cnn-text-classification-pytorch.txt)
Domain: text classification (TextCNN, sentence polarity)

Deviations from the original:
- sizes: main.py's defaults are kept (embed_dim 128, kernel_num 100, kernel sizes 3,4,5, dropout 0.5, batch size
  64, lr 0.001, max_norm 3.0); the vocabulary is the synthetic corpus's (about 140 words);
- data: the MR corpus (a download) is replaced by 1200 synthetic "reviews" made from ``seed`` (6-14 lower-case
  words: neutral words, plus two or three cue words of the review's polarity and at most one of the other), passed
  through ``MRDataset.splits``'s own steps (``clean_str(line).lower().split()``, shuffle, vocabularies from all data,
  the last 10% as the dev split) in place of reading ``rt-polarity.neg``/``.pos``; ``random.shuffle`` uses a
  ``random.Random(seed)``;
- ``args`` is an ``argparse.Namespace`` with main.py's defaults instead of the command line;
  no CUDA; snapshots, logging and early stopping are left out;
- one ``train_step`` is one iteration of ``train()``'s batch loop (a new epoch of the shuffled ``train_iter`` when
  one ends); ``eval_fn`` is ``eval()`` on one given batch (without its print), returning the accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, W605, F841  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import random
import re
import sys
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NEUTRAL = [f"word{i}" for i in range(120)]
POSITIVE = ["great", "wonderful", "moving", "brilliant", "charming", "superb", "delightful", "gripping"]
NEGATIVE = ["dull", "boring", "awful", "tedious", "clumsy", "bland", "pointless", "dreadful"]


# ---- mydatasets.py --------------------------------------------------------------------------------------------

class Vocab:
    """Simple vocabulary class to replace legacy torchtext Field.vocab."""

    def __init__(self, counter, specials=('<pad>', '<unk>')):
        self.itos = list(specials)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        # Sort by frequency desc, then alphabetically for deterministic ordering
        for word, _ in sorted(counter.items(), key=lambda x: (-x[1], x[0])):
            if word not in self.stoi:
                self.stoi[word] = len(self.itos)
                self.itos.append(word)

    def __len__(self):
        return len(self.itos)


def clean_str(string):
    """
    Tokenization/string cleaning for all datasets except for SST.
    Original taken from https://github.com/yoonkim/CNN_sentence/blob/master/process_data.py
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
    string = re.sub(r"\(", " \( ", string)
    string = re.sub(r"\)", " \) ", string)
    string = re.sub(r"\?", " \? ", string)
    string = re.sub(r"\s{2,}", " ", string)
    return string.strip()


class MRDataset(Dataset):
    """Movie Review polarity dataset using standard PyTorch Dataset."""

    def __init__(self, examples, text_vocab, label_vocab):
        self.examples = examples  # list of (text_tokens, label_str)
        self.text_vocab = text_vocab
        self.label_vocab = label_vocab

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, idx):
        tokens, label = self.examples[idx]
        text_ids = [self.text_vocab.stoi.get(t, 1) for t in tokens]  # 1 = <unk>
        text_tensor = torch.tensor(text_ids, dtype=torch.long)
        label_id = self.label_vocab.stoi[label]
        label_tensor = torch.tensor(label_id, dtype=torch.long)
        return text_tensor, label_tensor

    @classmethod
    def splits(cls, neg_lines, pos_lines, rng, dev_ratio=0.1, shuffle=True):
        """Create train/dev dataset splits with vocabularies.

        Returns:
            train_dataset, dev_dataset, text_vocab, label_vocab
        """
        examples = []
        for line in neg_lines:
            line = line.strip()
            if line:
                tokens = clean_str(line).lower().split()
                examples.append((tokens, 'negative'))
        for line in pos_lines:
            line = line.strip()
            if line:
                tokens = clean_str(line).lower().split()
                examples.append((tokens, 'positive'))

        if shuffle:
            rng.shuffle(examples)

        # Build vocabularies from all data
        text_counter = Counter()
        label_counter = Counter()
        for tokens, label in examples:
            text_counter.update(tokens)
            label_counter[label] += 1

        text_vocab = Vocab(text_counter)
        label_vocab = Vocab(label_counter, specials=[])

        # Split into train/dev
        dev_index = -1 * int(dev_ratio * len(examples))
        train_examples = examples[:dev_index]
        dev_examples = examples[dev_index:]

        train_dataset = cls(train_examples, text_vocab, label_vocab)
        dev_dataset = cls(dev_examples, text_vocab, label_vocab)

        return train_dataset, dev_dataset, text_vocab, label_vocab


def collate_fn(batch, min_len=5, bug=None):
    """Pad sequences in a batch to the same length (at least min_len for conv kernels)."""
    texts, labels = zip(*batch)
    if bug == "collate_sorts_texts_only":
        # texts sorted by length (longest first, for tidy padding) while the labels keep the dataset's order
        texts = sorted(texts, key=len, reverse=True)
    max_len = max(max(len(t) for t in texts), min_len)
    padded = torch.zeros(len(texts), max_len, dtype=torch.long)
    for i, t in enumerate(texts):
        padded[i, :len(t)] = t
    labels = torch.stack(labels)
    return padded, labels


# ---- model.py -------------------------------------------------------------------------------------------------

class CNN_Text(nn.Module):

    def __init__(self, args):
        super(CNN_Text, self).__init__()
        self.args = args

        V = args.embed_num
        D = args.embed_dim
        C = args.class_num
        Ci = 1
        Co = args.kernel_num
        Ks = args.kernel_sizes

        self.embed = nn.Embedding(V, D, padding_idx=0)
        # Kim's paper: uniform[-0.25, 0.25] initialization for random embeddings
        nn.init.uniform_(self.embed.weight, -0.25, 0.25)
        self.embed.weight.data[0].fill_(0)  # padding stays zero

        self.convs = nn.ModuleList([nn.Conv2d(Ci, Co, (K, D)) for K in Ks])
        self.dropout = nn.Dropout(args.dropout)
        self.fc1 = nn.Linear(len(Ks) * Co, C)

        if self.args.static:
            self.embed.weight.requires_grad = False

    def forward(self, x):
        x = self.embed(x)  # (N, W, D)

        x = x.unsqueeze(1)  # (N, Ci, W, D)

        x = [F.relu(conv(x)).squeeze(3) for conv in self.convs]  # [(N, Co, W), ...]*len(Ks)

        x = [F.max_pool1d(i, i.size(2)).squeeze(2) for i in x]  # [(N, Co), ...]*len(Ks)

        x = torch.cat(x, 1)

        x = self.dropout(x)  # (N, len(Ks)*Co)
        logit = self.fc1(x)  # (N, C)
        if self.args.bug == "softmax_before_cross_entropy":
            # probabilities returned where F.cross_entropy expects logits
            return F.softmax(logit, dim=1)
        return logit


# ---- synthetic stand-in for rt-polarity.neg / rt-polarity.pos -----------------------------------------------

def make_reviews(rng, n, cues, other):
    lines = []
    for _ in range(n):
        words = [rng.choice(NEUTRAL) for _ in range(rng.randint(4, 10))]
        words += [rng.choice(cues) for _ in range(rng.randint(2, 3))]
        words += [rng.choice(other) for _ in range(rng.randint(0, 1))]
        rng.shuffle(words)
        lines.append(" ".join(words).capitalize() + " .")
    return lines


# ---- main.py / train.py -----------------------------------------------------------------------------------------

def _args(seed):
    """main.py's defaults."""
    return argparse.Namespace(
        lr=0.001, epochs=256, batch_size=64, log_interval=1, test_interval=100, save_interval=500,
        save_dir='snapshot', early_stop=1000, save_best=True, dataset='MR', no_phrases=False, shuffle=False,
        dropout=0.5, max_norm=3.0, embed_dim=128, kernel_num=100, kernel_sizes='3,4,5', static=False,
        optimizer='adam', device=-1, snapshot=None, predict=None, test=False, cuda=False)


def _build(seed, bug=None):
    args = _args(seed)
    args.bug = bug
    torch.manual_seed(seed)
    rng = random.Random(seed)

    # load dataset
    train_dataset, dev_dataset, text_vocab, label_vocab = MRDataset.splits(
        make_reviews(rng, 600, NEGATIVE, POSITIVE), make_reviews(rng, 600, POSITIVE, NEGATIVE), rng)

    collate = functools.partial(collate_fn, bug=bug)
    train_iter = DataLoader(train_dataset, batch_size=args.batch_size,
                            shuffle=True, collate_fn=collate, generator=torch.Generator().manual_seed(seed))
    dev_iter = DataLoader(dev_dataset, batch_size=len(dev_dataset),
                          shuffle=False, collate_fn=collate)

    # update args
    args.embed_num = len(text_vocab)
    args.class_num = len(label_vocab)
    args.kernel_sizes = [int(k) for k in args.kernel_sizes.split(',')]

    # model
    model = CNN_Text(args)

    # train.train()
    if getattr(args, 'optimizer', 'adam') == 'adadelta':
        optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr, rho=0.95)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    state = {"steps": 0, "it": None}
    model.train()

    def next_batch():
        while True:
            if state["it"] is None:  # for epoch in range(1, args.epochs+1): for batch in train_iter:
                state["it"] = iter(train_iter)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        batch = next_batch()
        model.train()
        feature, target = batch

        optimizer.zero_grad()
        logit = model(feature)
        loss = F.cross_entropy(logit, target)
        loss.backward()
        optimizer.step()

        # Kim's paper: L2 weight constraint on fc layer (rescale if norm > max_norm)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if 'fc1.weight' in name:
                    norms = param.norm(2, dim=-1, keepdim=True)
                    desired = torch.clamp(norms, max=args.max_norm)
                    param.mul_(desired / (norms + 1e-8))

        state["steps"] += 1
        return loss.detach()

    def eval_fn(model, batch):
        # train.eval(data_iter, model, args) on one batch
        if bug != "eval_without_model_eval":
            model.eval()
        corrects, avg_loss = 0, 0
        total = 0
        with torch.no_grad():
            feature, target = batch

            logit = model(feature)
            loss = F.cross_entropy(logit, target, reduction='sum')

            avg_loss += loss.item()
            corrects += (torch.max(logit, 1)[1] == target).sum().item()
            total += target.size(0)

        avg_loss /= total
        accuracy = 100.0 * corrects / total
        return accuracy

    pos_ids = {text_vocab.stoi[w] for w in POSITIVE if w in text_vocab.stoi}
    neg_ids = {text_vocab.stoi[w] for w in NEGATIVE if w in text_vocab.stoi}

    def task_probe(feature):
        """The reviews' rule: more positive cue words than negative ones is a positive review."""
        pos = sum((feature == i).sum(1) for i in pos_ids)
        neg = sum((feature == i).sum(1) for i in neg_ids)
        return torch.where(pos > neg, label_vocab.stoi['positive'], label_vocab.stoi['negative'])

    first = collate([train_dataset[i] for i in range(args.batch_size)])
    return Program(name="textcnn_mr", model=model, batch=first, loss_fn=F.cross_entropy, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, task="classification",
                   loader=train_iter)


build = functools.partial(_build, bug=None)

BUGS = [
    # F.softmax at the end of forward (classic): F.cross_entropy applies log_softmax to probabilities, the loss
    # saturates and its gradient shrinks.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # collate_fn sorts the texts by length but not the labels (classic): every batch pairs reviews with other
    # reviews' labels.
    Bug("collate_sorts_texts_only", functools.partial(_build, bug="collate_sorts_texts_only"), "learning_ledger",
        ("TASK",)),
    # eval() without model.eval() (classic): the dev accuracy is measured with dropout 0.5 active.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
]
