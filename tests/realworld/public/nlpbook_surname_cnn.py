"""Surname nationality classifier with a CNN over one-hot characters, from "Natural Language Processing with PyTorch"
(Rao & McMahan), chapter 4.4: ``Vocabulary`` / ``SurnameVectorizer`` (a ``vocab x max_surname_length`` one-hot
matrix per surname), ``SurnameDataset`` (splits from the data frame's ``split`` column, inverse-frequency class
weights ordered by the nationality vocabulary), ``SurnameClassifier`` (four ``Conv1d`` layers with ELU, kernel 3,
strides 1-2-2-1, that bring the length to 1, then a linear layer), ``nn.CrossEntropyLoss(weight=class_weights)``,
Adam lr 1e-3, ``generate_batches`` (shuffled, ``drop_last``) and the notebook's five-step training routine.

Source: https://github.com/joosthub/PyTorchNLPBook
Commit: 6169d3ec6f1fb57e70a078815170f0d2a7e330fe
Files: chapters/chapter_4/4_4_cnn_surnames/4_4_Classifying_Surnames_with_a_CNN.ipynb (the code cells)
License: Apache-2.0 (full text in LICENSES/joosthub-PyTorchNLPBook.txt)
Domain: NLP classifier (character-level CNN, 18-way nationality of a surname in the book; imbalanced classes)

Kept as written: ``Vocabulary`` (``add_unk``, ``lookup_token`` with the UNK fallback), ``SurnameVectorizer``
(``vectorize``, ``from_dataframe`` with ``unk_token="@"`` and ``add_unk=False`` for nationalities, the longest
surname as matrix width), ``SurnameDataset`` (``set_split``, ``__getitem__``, the class weights from
``value_counts`` sorted by ``nationality_vocab.lookup_token``), ``generate_batches``, ``SurnameClassifier``
(``apply_softmax`` flag, ``squeeze(dim=2)``), ``compute_accuracy``, the loss, the optimizer and the loop body
(``zero_grad``, forward, loss, ``backward``, ``step``).

Deviations from the original:
- sizes for 2 CPU cores: num_channels 256 -> 64, batch_size 128 -> 64; learning_rate 1e-3 -> 3e-3 so that the 30
  steps of the self-check show the loss falling (the notebook runs up to 100 epochs with early stopping);
- data: ``data/surnames/surnames_with_splits.csv`` (10,980 surnames, 18 nationalities) is replaced by a synthetic data
  frame made from ``seed`` with the same columns (``surname``, ``nationality``, ``split``): 2,000 surnames of 6
  nationalities with imbalanced shares (35/20/15/12/10/8 %); each nationality draws its letters from its own pool of
  8 letters and ends its surnames with its own 2-3 letter suffix; lengths 4-17 (one surname of 17 letters so the
  matrix width, and so the conv stack's output length 1, is the book's); split 70/15/15 %;
- ``pd.read_csv`` is replaced by building the data frame in memory; the vectorizer is not saved to disk;
  ``set_seed_everywhere(1337)`` is ``torch.manual_seed(seed)``/``np.random.seed(seed)``;
- one ``train_step`` is one batch of the training routine (the batch generator restarts when an epoch ends);
  ``eval_fn`` is the validation pass's accuracy on a given batch; the tqdm bars, the running averages, the
  validation epoch with ``ReduceLROnPlateau`` and early stopping, checkpointing and the test pass are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402, UP031, PERF102, PLR1733

from __future__ import annotations

import functools
import pathlib
import string
import sys
from argparse import Namespace

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class Vocabulary(object):
    """Class to process text and extract Vocabulary for mapping"""

    def __init__(self, token_to_idx=None, add_unk=True, unk_token="<UNK>"):
        if token_to_idx is None:
            token_to_idx = {}
        self._token_to_idx = token_to_idx

        self._idx_to_token = {idx: token
                              for token, idx in self._token_to_idx.items()}

        self._add_unk = add_unk
        self._unk_token = unk_token

        self.unk_index = -1
        if add_unk:
            self.unk_index = self.add_token(unk_token)

    def add_token(self, token):
        try:
            index = self._token_to_idx[token]
        except KeyError:
            index = len(self._token_to_idx)
            self._token_to_idx[token] = index
            self._idx_to_token[index] = token
        return index

    def add_many(self, tokens):
        return [self.add_token(token) for token in tokens]

    def lookup_token(self, token):
        if self.unk_index >= 0:
            return self._token_to_idx.get(token, self.unk_index)
        else:
            return self._token_to_idx[token]

    def lookup_index(self, index):
        if index not in self._idx_to_token:
            raise KeyError("the index (%d) is not in the Vocabulary" % index)
        return self._idx_to_token[index]

    def __str__(self):
        return "<Vocabulary(size=%d)>" % len(self)

    def __len__(self):
        return len(self._token_to_idx)


class SurnameVectorizer(object):
    """ The Vectorizer which coordinates the Vocabularies and puts them to use"""
    def __init__(self, surname_vocab, nationality_vocab, max_surname_length):
        self.surname_vocab = surname_vocab
        self.nationality_vocab = nationality_vocab
        self._max_surname_length = max_surname_length

    def vectorize(self, surname):
        one_hot_matrix_size = (len(self.surname_vocab), self._max_surname_length)
        one_hot_matrix = np.zeros(one_hot_matrix_size, dtype=np.float32)

        for position_index, character in enumerate(surname):
            character_index = self.surname_vocab.lookup_token(character)
            one_hot_matrix[character_index][position_index] = 1

        return one_hot_matrix

    @classmethod
    def from_dataframe(cls, surname_df):
        surname_vocab = Vocabulary(unk_token="@")
        nationality_vocab = Vocabulary(add_unk=False)
        max_surname_length = 0

        for index, row in surname_df.iterrows():
            max_surname_length = max(max_surname_length, len(row.surname))
            for letter in row.surname:
                surname_vocab.add_token(letter)
            nationality_vocab.add_token(row.nationality)

        return cls(surname_vocab, nationality_vocab, max_surname_length)


class SurnameDataset(Dataset):
    def __init__(self, surname_df, vectorizer, bug=None):
        self.surname_df = surname_df
        self._vectorizer = vectorizer
        self.train_df = self.surname_df[self.surname_df.split=='train']
        self.train_size = len(self.train_df)

        self.val_df = self.surname_df[self.surname_df.split=='val']
        self.validation_size = len(self.val_df)

        self.test_df = self.surname_df[self.surname_df.split=='test']
        self.test_size = len(self.test_df)

        self._lookup_dict = {'train': (self.train_df, self.train_size),
                             'val': (self.val_df, self.validation_size),
                             'test': (self.test_df, self.test_size)}

        self.set_split('train')

        # Class weights
        class_counts = surname_df.nationality.value_counts().to_dict()
        def sort_key(item):
            return self._vectorizer.nationality_vocab.lookup_token(item[0])
        if bug == "class_weights_sorted_by_name":
            sorted_counts = sorted(class_counts.items())
        else:
            sorted_counts = sorted(class_counts.items(), key=sort_key)
        frequencies = [count for _, count in sorted_counts]
        self.class_weights = 1.0 / torch.tensor(frequencies, dtype=torch.float32)

    @classmethod
    def load_dataset_and_make_vectorizer(cls, surname_df, bug=None):
        # (port) surname_df = pd.read_csv(surname_csv): the synthetic frame is passed in
        train_surname_df = surname_df[surname_df.split=='train']
        return cls(surname_df, SurnameVectorizer.from_dataframe(train_surname_df), bug=bug)

    def get_vectorizer(self):
        """ returns the vectorizer """
        return self._vectorizer

    def set_split(self, split="train"):
        """ selects the splits in the dataset using a column in the dataframe """
        self._target_split = split
        self._target_df, self._target_size = self._lookup_dict[split]

    def __len__(self):
        return self._target_size

    def __getitem__(self, index):
        row = self._target_df.iloc[index]

        surname_matrix = \
            self._vectorizer.vectorize(row.surname)

        nationality_index = \
            self._vectorizer.nationality_vocab.lookup_token(row.nationality)

        return {'x_surname': surname_matrix,
                'y_nationality': nationality_index}

    def get_num_batches(self, batch_size):
        return len(self) // batch_size


def generate_batches(dataset, batch_size, shuffle=True,
                     drop_last=True, device="cpu"):
    """
    A generator function which wraps the PyTorch DataLoader. It will
      ensure each tensor is on the write device location.
    """
    dataloader = DataLoader(dataset=dataset, batch_size=batch_size,
                            shuffle=shuffle, drop_last=drop_last)

    for data_dict in dataloader:
        out_data_dict = {}
        for name, tensor in data_dict.items():
            out_data_dict[name] = data_dict[name].to(device)
        yield out_data_dict


class SurnameClassifier(nn.Module):
    def __init__(self, initial_num_channels, num_classes, num_channels):
        super(SurnameClassifier, self).__init__()

        self.convnet = nn.Sequential(
            nn.Conv1d(in_channels=initial_num_channels,
                      out_channels=num_channels, kernel_size=3),
            nn.ELU(),
            nn.Conv1d(in_channels=num_channels, out_channels=num_channels,
                      kernel_size=3, stride=2),
            nn.ELU(),
            nn.Conv1d(in_channels=num_channels, out_channels=num_channels,
                      kernel_size=3, stride=2),
            nn.ELU(),
            nn.Conv1d(in_channels=num_channels, out_channels=num_channels,
                      kernel_size=3),
            nn.ELU()
        )
        self.fc = nn.Linear(num_channels, num_classes)

    def forward(self, x_surname, apply_softmax=False):
        features = self.convnet(x_surname).squeeze(dim=2)

        prediction_vector = self.fc(features)

        if apply_softmax:
            prediction_vector = F.softmax(prediction_vector, dim=1)

        return prediction_vector


def compute_accuracy(y_pred, y_target):
    y_pred_indices = y_pred.max(dim=1)[1]
    n_correct = torch.eq(y_pred_indices, y_target).sum().item()
    return n_correct / len(y_pred_indices) * 100


def make_surnames(rng, n):
    """(port) The synthetic surname frame (see the module docstring)."""
    letters = list(string.ascii_lowercase)
    names = ["Arvenic", "Bolgar", "Cendrish", "Dunmark", "Estovan", "Fyrian"]
    shares = [0.35, 0.20, 0.15, 0.12, 0.10, 0.08]
    pools = [list(rng.choice(letters, 8, replace=False)) for _ in names]
    suffixes = ["".join(rng.choice(letters, int(rng.integers(2, 4)))) for _ in names]
    rows = []
    for i in range(n):
        k = int(rng.choice(len(names), p=shares))
        length = 17 if i == 0 else int(rng.integers(4, 18))
        body = "".join(rng.choice(pools[k], length - len(suffixes[k])))
        surname = (body + suffixes[k]).capitalize()
        split = "train" if i == 0 else str(rng.choice(["train", "val", "test"], p=[0.7, 0.15, 0.15]))
        rows.append({"surname": surname, "nationality": names[k], "split": split})
    return pd.DataFrame(rows)


def _build(seed, bug=None):
    args = Namespace(
        # Model hyper parameters
        hidden_dim=100,
        num_channels=64,  # (port) 256
        # Training hyper parameters
        seed=seed,  # (port) 1337
        learning_rate=3e-3,  # (port) 0.001
        batch_size=64,  # (port) 128
        num_epochs=100,
        early_stopping_criteria=5,
        dropout_p=0.1,
        # Runtime options
        cuda=False,
    )
    args.device = torch.device("cpu")
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    surname_df = make_surnames(np.random.default_rng(seed), 2000)
    dataset = SurnameDataset.load_dataset_and_make_vectorizer(surname_df, bug=bug)
    vectorizer = dataset.get_vectorizer()

    classifier = SurnameClassifier(initial_num_channels=len(vectorizer.surname_vocab),
                                   num_classes=len(vectorizer.nationality_vocab),
                                   num_channels=args.num_channels)

    classifer = classifier.to(args.device)  # noqa: F841
    dataset.class_weights = dataset.class_weights.to(args.device)

    loss_func = nn.CrossEntropyLoss(weight=dataset.class_weights)
    optimizer = optim.Adam(classifier.parameters(), lr=args.learning_rate)

    dataset.set_split('train')
    state = {"batches": iter(())}

    def next_batch():
        try:
            return next(state["batches"])
        except StopIteration:
            dataset.set_split('train')
            state["batches"] = generate_batches(dataset, batch_size=args.batch_size, device=args.device)
            return next(state["batches"])

    probe = next(generate_batches(dataset, batch_size=args.batch_size, shuffle=False, device=args.device))
    batch = (probe['x_surname'], probe['y_nationality'])

    def train_step():
        classifier.train()
        batch_dict = next_batch()
        # the training routine is these 5 steps:

        # --------------------------------------
        # step 1. zero the gradients
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()

        # step 2. compute the output
        y_pred = classifier(batch_dict['x_surname'], apply_softmax=(bug == "softmax_into_cross_entropy"))

        # step 3. compute the loss
        loss = loss_func(y_pred, batch_dict['y_nationality'])

        # step 4. use loss to produce gradients
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()

        # step 5. use optimizer to take gradient step
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            y_pred = model(batch[0])
        model.train()
        return compute_accuracy(y_pred, batch[1])

    return Program(name="nlpbook_surname_cnn", model=classifier, batch=batch, loss_fn=loss_func,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the classifier called with ``apply_softmax=True`` in the training routine (classic: the prediction path's flag
    # used for training), so ``CrossEntropyLoss`` takes log-softmax of probabilities.
    Bug("softmax_into_cross_entropy", functools.partial(_build, bug="softmax_into_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # the class counts sorted by nationality name instead of by ``nationality_vocab.lookup_token`` (classic: the
    # ``key=sort_key`` left out): each class's inverse-frequency weight lands on another class in the loss.
    Bug("class_weights_sorted_by_name", functools.partial(_build, bug="class_weights_sorted_by_name"),
        "learning_ledger", ("OBJECTIVE",)),
    # ``optimizer.zero_grad()`` moved between ``loss.backward()`` and ``optimizer.step()`` (classic): every step
    # applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
