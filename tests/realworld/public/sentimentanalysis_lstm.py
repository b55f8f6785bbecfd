"""The bidirectional LSTM sentiment classifier of "2 - Recurrent Neural Networks": ``LSTM`` (embedding with
``padding_idx``, dropout, a 2-layer bidirectional ``nn.LSTM`` over a ``pack_padded_sequence`` with
``enforce_sorted=False``, the last layer's two final hidden states concatenated, dropout, ``fc``),
``initialize_weights`` (xavier-normal linear, orthogonal LSTM weights, zero biases), Adam lr 5e-4,
``nn.CrossEntropyLoss``, and the ``train()`` loop body (``model.train()``, forward, loss, accuracy, zero_grad,
backward, step) with ``evaluate()`` after each epoch.

Source: https://github.com/bentrevett/pytorch-sentiment-analysis
Commit: 329f654b2cfaed22fee432569ebd7a2674584f79
Files: 2 - Recurrent Neural Networks.ipynb
License: MIT (LICENSES/bentrevett-pytorch-sentiment-analysis.txt)
Domain: text classification (bidirectional LSTM, packed padded sequences, sentiment)

Deviations from the original:
- sizes: embedding_dim 16, hidden_dim 16 (300 and 300), batch size 32 (512); n_layers 2, bidirectional,
  dropout 0.5, lr 5e-4 and the loss are kept;
- data: IMDb (a ``datasets`` download), the torchtext tokenizer and vocabulary are replaced by synthetic reviews
  made from ``seed``: 4-16 token ids (ids 0 and 1 are ``<unk>`` and ``<pad>`` as in the notebook's specials),
  neutral words plus cue words, the label is 1 when the review has more positive than negative cue words; the
  notebook's ``get_collate_fn``/``get_data_loader`` are kept over a list of example dicts;
- the GloVe vectors copied into ``model.embedding.weight`` (a download) are left out: the embedding keeps its
  initialization;
- no CUDA, no tqdm, no plots, no ``torch.save`` of the best model;
- one ``train_step`` is one iteration of ``train()``'s batch loop (``evaluate()`` on the validation loader when an
  epoch ends, as the epoch loop does); ``eval_fn`` is ``evaluate()``'s body on one batch returning the accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059, F841  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

UNK, PAD = 0, 1
NEUTRAL = list(range(2, 42))
POSITIVE = list(range(42, 50))
NEGATIVE = list(range(50, 58))
VOCAB_SIZE = 58
SELF_CHECK_STEPS = 60


def make_reviews(rng, n):
    data = []
    for _ in range(n):
        label = int(rng.integers(2))
        cues, other = (POSITIVE, NEGATIVE) if label == 1 else (NEGATIVE, POSITIVE)
        words = list(rng.choice(NEUTRAL, size=int(rng.integers(2, 11))))
        words += list(rng.choice(cues, size=int(rng.integers(2, 4))))
        words += list(rng.choice(other, size=int(rng.integers(0, 2))))
        rng.shuffle(words)
        ids = torch.tensor(words, dtype=torch.long)
        data.append({"ids": ids, "label": torch.tensor(label), "length": torch.tensor(len(words))})
    return data


# ---- the notebook's data loading ---------------------------------------------------------------------------------

def get_collate_fn(pad_index):
    def collate_fn(batch):
        batch_ids = [i["ids"] for i in batch]
        batch_ids = nn.utils.rnn.pad_sequence(
            batch_ids, padding_value=pad_index, batch_first=True
        )
        batch_length = [i["length"] for i in batch]
        batch_length = torch.stack(batch_length)
        batch_label = [i["label"] for i in batch]
        batch_label = torch.stack(batch_label)
        batch = {"ids": batch_ids, "length": batch_length, "label": batch_label}
        return batch

    return collate_fn


def get_data_loader(dataset, batch_size, pad_index, shuffle=False, generator=None):
    collate_fn = get_collate_fn(pad_index)
    data_loader = torch.utils.data.DataLoader(
        dataset=dataset,
        batch_size=batch_size,
        collate_fn=collate_fn,
        shuffle=shuffle,
        generator=generator,
    )
    return data_loader


# ---- the notebook's model ----------------------------------------------------------------------------------------

class LSTM(nn.Module):
    def __init__(
        self,
        vocab_size,
        embedding_dim,
        hidden_dim,
        output_dim,
        n_layers,
        bidirectional,
        dropout_rate,
        pad_index,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_index)
        self.lstm = nn.LSTM(
            embedding_dim,
            hidden_dim,
            n_layers,
            bidirectional=bidirectional,
            dropout=dropout_rate,
            batch_first=True,
        )
        self.fc = nn.Linear(hidden_dim * 2 if bidirectional else hidden_dim, output_dim)
        self.dropout = nn.Dropout(dropout_rate)
        self.bug = None

    def forward(self, ids, length):
        # ids = [batch size, seq len]
        # length = [batch size]
        if self.bug == "padded_length_packed":
            # every review packed at the padded batch length: the final hidden state is read after the pads
            length = torch.full_like(length, ids.shape[1])
        embedded = self.dropout(self.embedding(ids))
        # embedded = [batch size, seq len, embedding dim]
        packed_embedded = nn.utils.rnn.pack_padded_sequence(
            embedded, length, batch_first=True, enforce_sorted=False
        )
        packed_output, (hidden, cell) = self.lstm(packed_embedded)
        # hidden = [n layers * n directions, batch size, hidden dim]
        # cell = [n layers * n directions, batch size, hidden dim]
        output, output_length = nn.utils.rnn.pad_packed_sequence(packed_output)
        # output = [batch size, seq len, hidden dim * n directions]
        if self.lstm.bidirectional:
            hidden = self.dropout(torch.cat([hidden[-1], hidden[-2]], dim=-1))
            # hidden = [batch size, hidden dim * 2]
        else:
            hidden = self.dropout(hidden[-1])
            # hidden = [batch size, hidden dim]
        prediction = self.fc(hidden)
        # prediction = [batch size, output dim]
        return prediction


def initialize_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_normal_(m.weight)
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LSTM):
        for name, param in m.named_parameters():
            if "bias" in name:
                nn.init.zeros_(param)
            elif "weight" in name:
                nn.init.orthogonal_(param)


def get_accuracy(prediction, label):
    batch_size, _ = prediction.shape
    predicted_classes = prediction.argmax(dim=-1)
    correct_predictions = predicted_classes.eq(label).sum()
    accuracy = correct_predictions / batch_size
    return accuracy


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_data = make_reviews(rng, 480)
    valid_data = make_reviews(rng, 96)
    pad_index = PAD

    batch_size = 32
    train_data_loader = get_data_loader(train_data, batch_size, pad_index, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    valid_data_loader = get_data_loader(valid_data, batch_size, pad_index)

    vocab_size = VOCAB_SIZE
    embedding_dim = 16
    hidden_dim = 16
    output_dim = 2
    n_layers = 2
    bidirectional = True
    dropout_rate = 0.5

    model = LSTM(
        vocab_size,
        embedding_dim,
        hidden_dim,
        output_dim,
        n_layers,
        bidirectional,
        dropout_rate,
        pad_index,
    )
    model.bug = bug
    model.apply(initialize_weights)

    lr = 5e-4

    optimizer = optim.Adam(model.parameters(), lr=lr)

    criterion = nn.CrossEntropyLoss()
    device = torch.device("cpu")

    def evaluate(dataloader, model, criterion, device):
        model.eval()
        epoch_losses = []
        epoch_accs = []
        with torch.no_grad():
            for batch in dataloader:
                ids = batch["ids"].to(device)
                length = batch["length"]
                label = batch["label"].to(device)
                prediction = model(ids, length)
                loss = criterion(prediction, label)
                accuracy = get_accuracy(prediction, label)
                epoch_losses.append(loss.item())
                epoch_accs.append(accuracy.item())
        return np.mean(epoch_losses), np.mean(epoch_accs)

    state = {"it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                state["it"] = iter(train_data_loader)
            try:
                return next(state["it"])
            except StopIteration:  # the epoch ends: evaluate(valid_data_loader, ...) as the epoch loop does
                evaluate(valid_data_loader, model, criterion, device)
                state["it"] = None

    def train_step():
        batch = next_batch()
        model.train()
        ids = batch["ids"].to(device)
        length = batch["length"]
        label = batch["label"].to(device)
        prediction = model(ids, length)
        loss = criterion(prediction, label)
        accuracy = get_accuracy(prediction, label)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            prediction = model(batch["ids"], batch["length"])
            return get_accuracy(prediction, batch["label"]).item()

    def task_probe(batch):
        """The reviews' rule: more positive cue words than negative ones is a positive review."""
        ids = batch["ids"]
        pos = sum((ids == i).sum(1) for i in POSITIVE)
        neg = sum((ids == i).sum(1) for i in NEGATIVE)
        return (pos > neg).long()

    first = get_collate_fn(pad_index)(train_data[:batch_size])
    return Program(name="sentimentanalysis_lstm", model=model, batch=first,
                   loss_fn=lambda prediction, label: criterion(prediction, label), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, task="classification",
                   loader=train_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # The reviews packed at the padded batch length instead of their own lengths (classic): the final hidden
    # states are read after the pad tokens, so the prediction depends on the padding.
    Bug("padded_length_packed", functools.partial(_build, bug="padded_length_packed"), "learning_ledger",
        ("DEPENDENCY",)),
    # optimizer.zero_grad() left out of train() (classic): every step applies the sum of all gradients so far.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
