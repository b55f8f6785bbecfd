"""Ahmed Besbes' ``character-based-cnn``: Zhang et al.'s character-level CNN for sentiment classification (texts
lower-cased, one-hot encoded character by character in reverse order up to ``max_length``, ``Dropout2d`` on the
input, six convolutions with max pooling, three linear layers with dropout; weights drawn from N(0, 0.05)), star
ratings grouped into two classes (``{1: 0, 2: 0, 4: 1, 5: 1}``), a stratified train/validation split, plain
cross-entropy, SGD with momentum 0.9 at lr 0.01 and the "step" schedule (the lr halved every third epoch).

Source: https://github.com/ahmedbesbes/character-based-cnn
Commit: 593197610498bf0b4898b3bdf2e1f6730f954613
Files: train.py, src/model.py, src/data_loader.py, src/utils.py (process_text, lower), config.json
License: MIT (Copyright (c) 2019 Ahmed BESBES)
Domain: text classification (character-level CNN, sentiment)

Deviations from the original:
- sizes: batch_size 128 -> 16 (the layer widths, max_length 150, the alphabet of 69 characters and the kernel/pool
  sizes kept: with the fixed N(0, 0.05) initialization narrower layers shrink the signal until nothing trains);
  ``_get_conv_output`` probes with a batch of 2 instead of 128 (only the output size is read); the loss stays near
  0.69 for some 50 steps before it falls, so the self-check runs 100 steps;
- data: the review CSV (``pd.read_csv`` in chunks) is replaced by 1280 synthetic reviews made from ``seed``: 3-6
  sentiment words from a positive or a negative list, rated 4-5 or 1-2 accordingly;
  ``load_data``'s shuffling, processing and label grouping run on them as written (balance and sampler off, the
  defaults); sklearn is not installed: ``train_test_split(..., test_size=0.2, random_state=42, stratify=labels)``
  is written out as a stratified shuffle split in numpy (the same per-class proportions, not sklearn's indices);
- one ``train_step`` is one iteration of ``train()``'s loop; at the end of an epoch the "step" schedule halves the
  lr every third epoch as written; tqdm, TensorBoard, the sklearn metrics and reports, checkpoints and early
  stopping are left out; ``eval_fn`` is ``evaluate()`` on one batch (the accuracy); no GPU.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CHANNELS, FC = 256, 1024
SELF_CHECK_STEPS = 100
POSITIVE = ["great", "love", "happy", "awesome", "good", "best", "nice", "fun"]
NEGATIVE = ["awful", "hate", "sad", "terrible", "bad", "worst", "boring", "ugly"]


class Args:
    validation_split = 0.2
    steps = ("lower",)
    group_labels = 1
    ignore_center = 1
    label_ignored = None
    balance = 0
    use_sampler = 0
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-,;.!?:'\"/\\|_@#$%^&*~`+ =<>()[]{}"
    number_of_characters = 69
    extra_characters = ""
    max_length = 150
    dropout_input = 0.1
    epochs = 10
    batch_size = 16
    optimizer = "sgd"
    learning_rate = 0.01
    class_weights = 0
    focal_loss = 0
    scheduler = "step"
    workers = 0


# ---- src/model.py --------------------------------------------------------------------------------------------------

class CharacterLevelCNN(nn.Module):
    def __init__(self, args, number_of_classes):
        super().__init__()

        # define conv layers

        self.dropout_input = nn.Dropout2d(args.dropout_input)

        self.conv1 = nn.Sequential(
            nn.Conv1d(
                args.number_of_characters + len(args.extra_characters),
                CHANNELS,
                kernel_size=7,
                padding=0,
            ),
            nn.ReLU(),
            nn.MaxPool1d(3),
        )
        self.conv2 = nn.Sequential(
            nn.Conv1d(CHANNELS, CHANNELS, kernel_size=7, padding=0), nn.ReLU(), nn.MaxPool1d(3)
        )
        self.conv3 = nn.Sequential(nn.Conv1d(CHANNELS, CHANNELS, kernel_size=3, padding=0), nn.ReLU())
        self.conv4 = nn.Sequential(nn.Conv1d(CHANNELS, CHANNELS, kernel_size=3, padding=0), nn.ReLU())
        self.conv5 = nn.Sequential(nn.Conv1d(CHANNELS, CHANNELS, kernel_size=3, padding=0), nn.ReLU())
        self.conv6 = nn.Sequential(
            nn.Conv1d(CHANNELS, CHANNELS, kernel_size=3, padding=0), nn.ReLU(), nn.MaxPool1d(3)
        )

        # compute the  output shape after forwarding an input to the conv layers

        input_shape = (
            2,
            args.max_length,
            args.number_of_characters + len(args.extra_characters),
        )
        self.output_dimension = self._get_conv_output(input_shape)

        # define linear layers

        self.fc1 = nn.Sequential(nn.Linear(self.output_dimension, FC), nn.ReLU(), nn.Dropout(0.5))
        self.fc2 = nn.Sequential(nn.Linear(FC, FC), nn.ReLU(), nn.Dropout(0.5))
        self.fc3 = nn.Linear(FC, number_of_classes)

        # initialize weights

        self._create_weights()

    def _create_weights(self, mean=0.0, std=0.05):
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, nn.Linear)):
                module.weight.data.normal_(mean, std)

    def _get_conv_output(self, shape):
        x = torch.rand(shape)
        x = x.transpose(1, 2)
        x = self.conv1(x)
        x = self.conv2(x)
        x = self.conv3(x)
        x = self.conv4(x)
        x = self.conv5(x)
        x = self.conv6(x)
        x = x.view(x.size(0), -1)
        output_dimension = x.size(1)
        return output_dimension

    def forward(self, x):
        x = self.dropout_input(x)
        x = x.transpose(1, 2)
        x = self.conv1(x)
        x = self.conv2(x)
        x = self.conv3(x)
        x = self.conv4(x)
        x = self.conv5(x)
        x = self.conv6(x)
        x = x.view(x.size(0), -1)
        x = self.fc1(x)
        x = self.fc2(x)
        x = self.fc3(x)
        return x


# ---- src/data_loader.py ------------------------------------------------------------------------------------------

def make_reviews(gen, n):
    """Short reviews of 3-6 sentiment words of one polarity, rated 4-5 (positive) or 1-2 (negative)."""
    texts, ratings = [], []
    for _ in range(n):
        positive = bool(torch.rand(1, generator=gen) < 0.5)
        vocab = POSITIVE if positive else NEGATIVE
        words = [vocab[int(i)] for i in torch.randint(0, len(vocab), (int(torch.randint(3, 7, (1,), generator=gen)),),
                                                      generator=gen)]
        texts.append(" ".join(words).capitalize() + "!")
        ratings.append((4 if positive else 1) + int(torch.randint(0, 2, (1,), generator=gen)))
    return texts, ratings


def load_data(args, gen):
    raw_texts, raw_labels = make_reviews(gen, 1280)
    order = np.random.permutation(len(raw_texts))  # aux_df.sample(frac=1)
    texts = [raw_texts[i].lower() for i in order if len(raw_texts[i]) > 1]  # utils.process_text(["lower"], text)
    labels = [raw_labels[i] for i in order if len(raw_texts[i]) > 1]

    if bool(args.group_labels):
        if bool(args.ignore_center):
            label_ignored = args.label_ignored
            clean_data = [
                (text, label)
                for (text, label) in zip(texts, labels)
                if label not in [label_ignored]
            ]
            texts = [text for (text, label) in clean_data]
            labels = [label for (text, label) in clean_data]
            labels = [{1: 0, 2: 0, 4: 1, 5: 1}[lab] for lab in labels]
        else:
            labels = [{1: 0, 2: 0, 3: 1, 4: 2, 5: 2}[lab] for lab in labels]

    number_of_classes = len(set(labels))
    return texts, labels, number_of_classes


class MyDataset(Dataset):
    def __init__(self, texts, labels, args):
        self.texts = texts
        self.labels = labels
        self.length = len(self.texts)

        self.vocabulary = args.alphabet + args.extra_characters
        self.number_of_characters = args.number_of_characters + len(
            args.extra_characters
        )
        self.max_length = args.max_length
        self.preprocessing_steps = args.steps
        self.identity_mat = np.identity(self.number_of_characters)

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        raw_text = self.texts[index]

        data = np.array(
            [
                self.identity_mat[self.vocabulary.index(i)]
                for i in list(raw_text)[::-1]
                if i in self.vocabulary
            ],
            dtype=np.float32,
        )
        if len(data) > self.max_length:
            data = data[: self.max_length]
        elif 0 < len(data) < self.max_length:
            data = np.concatenate(
                (
                    data,
                    np.zeros(
                        (self.max_length - len(data), self.number_of_characters),
                        dtype=np.float32,
                    ),
                )
            )
        elif len(data) == 0:
            data = np.zeros(
                (self.max_length, self.number_of_characters), dtype=np.float32
            )

        label = self.labels[index]
        data = torch.Tensor(data)

        return data, label


def train_test_split(*arrays, test_size, random_state=None, stratify=None):
    """sklearn's stratified shuffle split, written out: the test share taken from every class."""
    rng = np.random.RandomState(random_state)
    stratify = np.asarray(stratify)
    test = []
    for c in np.unique(stratify):
        idx = rng.permutation(np.flatnonzero(stratify == c))
        test += idx[: round(test_size * len(idx))].tolist()
    test = rng.permutation(test)
    train = rng.permutation(np.setdiff1d(np.arange(len(stratify)), test))
    out = []
    for a in arrays:
        out += [[a[i] for i in train], [a[i] for i in test]]
    return out


# ---- train.py ----------------------------------------------------------------------------------------------------------

def _split(args, texts, labels, bug=None):
    if bug == "labels_split_separately":
        # texts and labels split by two calls, the second without random_state: the pairs no longer match
        train_texts, val_texts = train_test_split(
            texts, test_size=args.validation_split, random_state=42, stratify=labels)
        train_labels, val_labels = train_test_split(labels, test_size=args.validation_split, stratify=labels)
    else:
        (train_texts, val_texts, train_labels, val_labels) = train_test_split(
            texts, labels, test_size=args.validation_split, random_state=42, stratify=labels)
    return train_texts, val_texts, train_labels, val_labels


def _build(seed, bug=None):
    args = Args()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batch_size = args.batch_size

    training_params = {"batch_size": batch_size, "shuffle": True, "num_workers": args.workers, "drop_last": True,
                       "generator": torch.Generator().manual_seed(seed)}
    texts, labels, number_of_classes = load_data(args, gen)
    train_texts, val_texts, train_labels, val_labels = _split(args, texts, labels, bug)

    training_set = MyDataset(train_texts, train_labels, args)
    validation_set = MyDataset(val_texts, val_labels, args)
    training_generator = DataLoader(training_set, **training_params)

    model = CharacterLevelCNN(args, number_of_classes)
    if bug == "softmax_before_cross_entropy":
        model.fc3 = nn.Sequential(model.fc3, nn.Softmax(dim=1))  # probabilities handed to CrossEntropyLoss
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    state = {"epoch": 0, "iter": None, "n": 0}

    def train_step():
        if state["iter"] is None:  # train(model, training_generator, ...): model.train() at the epoch start
            model.train()
            state["iter"], state["n"] = iter(training_generator), 0
        features, labels = next(state["iter"])
        state["n"] += 1

        if bug != "no_zero_grad":
            optimizer.zero_grad()
        predictions = model(features)
        loss = criterion(predictions, labels)
        loss.backward()
        optimizer.step()

        if state["n"] == len(training_generator):  # the epoch ends: learning rate scheduling
            epoch, state["iter"] = state["epoch"], None
            state["epoch"] += 1
            if args.scheduler == "step":  # noqa: SIM102
                if args.optimizer == "sgd" and ((epoch + 1) % 3 == 0) and epoch > 0:
                    current_lr = optimizer.state_dict()["param_groups"][0]["lr"]
                    current_lr /= 2
                    for param_group in optimizer.param_groups:
                        param_group["lr"] = current_lr
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        features, labels = batch
        with torch.no_grad():
            predictions = model(features)
        model.train()
        return float((torch.max(predictions, 1)[1] == labels).float().mean())

    first = next(iter(DataLoader(validation_set, batch_size=batch_size, shuffle=False, drop_last=True)))
    return Program(name="besbescharcnn_sentiment", model=model, batch=first, loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=training_generator)


build = functools.partial(_build)

BUGS = [
    # texts and labels split by separate train_test_split calls (the labels' without random_state): every
    # training text is paired with the label of another one.
    Bug("labels_split_separately", functools.partial(_build, bug="labels_split_separately"), "learning_ledger",
        ("TASK",)),
    # a softmax after fc3: CrossEntropyLoss applies log_softmax to probabilities (classic).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() left out: gradients add up across iterations (classic).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
