# ruff: noqa: UP008, UP004, PLR0402
"""NARM (Neural Attentive Session-based Recommendation) from beta-recsys' ``examples/train_narm.py``: each user's
item sequence is cut into (prefix, next item) pairs, padded by a sorting ``collate_fn`` into sequence-first
batches; the model packs the embedded prefix through a GRU, combines the last hidden state (global) with an
additive attention over the outputs (local), and scores every item by a bilinear map of the item embeddings;
cross-entropy over all items, Adam(lr 0.01), ``StepLR(80, 0.1)`` stepped with the epoch at each epoch's start.

Source: https://github.com/beta-team/beta-recsys
Commit: 625189d5e1002a3edc27c3e3ce075fddf7ae1c92
Files: ``examples/train_narm.py``, ``beta_rec/models/narm.py`` (``NARM``, ``NARMEngine``),
``beta_rec/models/torch_engine.py`` (``ModelEngine.set_optimizer``), ``beta_rec/datasets/seq_data_utils.py``
(``reindex_items``, ``create_seq_db``, ``dataset_to_seq_target_format``, ``SeqDataset``, ``collate_fn``),
``configs/narm_default.json``
License: MIT (Copyright (c) Beta-Recsys Team; full text in LICENSES/beta-team-beta-recsys.txt)
Domain: recommendation, session-based / sequential (NARM: GRU encoder with attention, full softmax over items)

Kept as written: ``NARM`` (padding_idx 0, embedding and context dropouts 0.25 / 0.5, packed GRU, ``a_1``, ``a_2``,
``v_t`` attention with the mask on ``q2``, ``b`` bilinear scoring against every item), ``NARMEngine`` (Adam at the
config's lr 0.01, ``StepLR(step_size=80, gamma=0.1)`` with ``scheduler.step(epoch=epoch)``, ``CrossEntropyLoss``,
``train_an_epoch``'s zero_grad / forward / loss / backward / step), the data pipeline (``reindex_items`` from 1,
``create_seq_db``, every prefix of every sequence as a (seq, target) pair, ``SeqDataset``, ``collate_fn``'s sort by
length, padding and transpose, the DataLoader with ``shuffle=False``), the config's sizes (embedding_dim 32,
hidden_size 100, one GRU layer).

Deviations from the original:
- MovieLens-100k is not downloaded: a synthetic interaction table (``col_user``, ``col_item``, ``col_timestamp``)
  made from ``seed``: 80 users, 60 items, sequences of 6 to 12 items following a fixed next-item rule 70% of the
  time; ``make_temporal_split`` is a plain temporal 80/20 split (no validation set);
- sizes for 2 CPU cores: batch_size 1024 -> 32; CPU; max_epoch 200 kept (the loop runs as long as it is called);
- the engine's tensorboard writer, prints, tqdm, the early-stop check, the evaluation engine and ``predict`` /
  ``recommend`` are dropped; ``train_an_epoch`` is a generator yielding each batch's loss (one ``train_step``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import warnings

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


# beta_rec/models/narm.py
class NARM(nn.Module):
    """Neural Attentive Session Based Recommendation Model Class."""

    def __init__(self, config, bug=None):
        """Initialize NARM Class."""
        super(NARM, self).__init__()
        self.config = config
        self.bug = bug
        self.n_items = config["dataset"]["n_items"]
        self.hidden_size = config["model"]["hidden_size"]
        self.batch_size = config["model"]["batch_size"]
        self.n_layers = config["model"]["n_layers"]
        self.dropout_input = config["model"]["dropout_input"]
        self.dropout_hidden = config["model"]["dropout_hidden"]
        self.embedding_dim = config["model"]["embedding_dim"]
        self.emb = nn.Embedding(self.n_items, self.embedding_dim, padding_idx=0)
        self.emb_dropout = nn.Dropout(self.dropout_input)
        self.gru = nn.GRU(self.embedding_dim, self.hidden_size, self.n_layers)
        self.a_1 = nn.Linear(self.hidden_size, self.hidden_size, bias=False)
        self.a_2 = nn.Linear(self.hidden_size, self.hidden_size, bias=False)
        self.v_t = nn.Linear(self.hidden_size, 1, bias=False)
        self.ct_dropout = nn.Dropout(self.dropout_hidden)
        self.b = nn.Linear(self.embedding_dim, 2 * self.hidden_size, bias=False)
        # self.sf = nn.Softmax()
        self.device = torch.device("cpu")  # (port) no CUDA here

    def forward(self, seq, lengths):
        """Train the model."""
        hidden = self.init_hidden(seq.size(1))
        embs = self.emb_dropout(self.emb(seq))
        embs = pack_padded_sequence(embs, lengths)
        gru_out, hidden = self.gru(embs, hidden)
        gru_out, lengths = pad_packed_sequence(gru_out)

        # fetch the last hidden state of last timestamp
        ht = gru_out[-1] if self.bug == "last_output_from_padding" else hidden[-1]
        gru_out = gru_out.permute(1, 0, 2)

        c_global = ht
        q1 = self.a_1(gru_out.contiguous().view(-1, self.hidden_size)).view(
            gru_out.size()
        )
        q2 = self.a_2(ht)

        mask = torch.where(
            seq.permute(1, 0) > 0,
            torch.tensor([1.0], device=self.device),
            torch.tensor([0.0], device=self.device),
        )
        q2_expand = q2.unsqueeze(1).expand_as(q1)
        q2_masked = mask.unsqueeze(2).expand_as(q1) * q2_expand

        alpha = self.v_t(torch.sigmoid(q1 + q2_masked).view(-1, self.hidden_size)).view(
            mask.size()
        )
        c_local = torch.sum(alpha.unsqueeze(2).expand_as(gru_out) * gru_out, 1)

        c_t = torch.cat([c_local, c_global], 1)
        c_t = self.ct_dropout(c_t)

        item_embs = self.emb(torch.arange(self.n_items).to(self.device))
        scores = torch.matmul(c_t, self.b(item_embs).permute(1, 0))
        # scores = self.sf(scores)

        return scores

    def init_hidden(self, batch_size):
        """Initialize hidden layers."""
        return torch.zeros(
            (self.n_layers, batch_size, self.hidden_size), requires_grad=True
        ).to(self.device)


class NARMEngine(object):
    """Engine for training & evaluating NARM model ((port) with ``ModelEngine.__init__`` / ``set_optimizer``)."""

    def __init__(self, config, bug=None):
        """Initialize NARMEngine Class."""
        self.config = config
        self.bug = bug
        self.model = NARM(config, bug=bug)
        self.device = torch.device(self.config["model"]["device_str"])
        self.model.device = self.device
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.config["model"]["lr"])  # "adam"
        self.model.to(self.device)
        self.scheduler = StepLR(
            self.optimizer,
            step_size=self.config["model"]["lr_dc_step"],
            gamma=self.config["model"]["lr_dc"],
        )
        self.loss_func = nn.CrossEntropyLoss()

    def train_an_epoch(self, train_loader, epoch):
        """Train the model in one epoch ((port) a generator: it yields each batch's loss)."""
        assert hasattr(self, "model"), "Please specify the exact model !"
        with warnings.catch_warnings(action="ignore"):  # (port) torch's warnings on step(epoch=...)
            self.scheduler.step(epoch=epoch)

        self.model.train()
        losses = []

        for i, (seq, target, lens) in enumerate(train_loader):
            seq = seq.to(self.device)
            target = target.to(self.device)

            if self.bug != "zero_grad_dropped":
                self.optimizer.zero_grad()
            logit = self.model(seq, lens)

            loss = self.loss_func(logit, target)
            losses.append(loss.item())
            loss.backward()

            self.optimizer.step()
            yield loss.detach()

        mean_loss = np.mean(losses)
        return mean_loss


# beta_rec/datasets/seq_data_utils.py
def reindex_items(train_data, valid_data=None, test_data=None):
    """Reindex the item ids from 1 ("0" is left for padding)."""
    train_data = train_data.sort_values(by=["col_user", "col_timestamp"])
    test_data = test_data.sort_values(by=["col_user", "col_timestamp"])
    # train data
    item_ids = train_data.col_item.unique()
    item2idx = pd.Series(data=np.arange(len(item_ids)) + 1, index=item_ids)
    # Build itemmap is a DataFrame that have 2 columns (col_item, item_idx)
    itemmap = pd.DataFrame(
        {"col_item": item_ids, "item_idx": item2idx[item_ids].values}
    )
    train_data = pd.merge(train_data, itemmap, on="col_item", how="inner")
    train_data.col_item = train_data.item_idx
    train_data = train_data.drop(columns=["item_idx"])
    train_data = train_data.sort_values(by=["col_user", "col_timestamp"])
    # test data
    test_data = pd.merge(test_data, itemmap, on="col_item", how="inner")
    test_data.col_item = test_data.item_idx
    test_data = test_data.drop(columns=["item_idx"])
    test_data = test_data.sort_values(by=["col_user", "col_timestamp"])
    return train_data, valid_data, test_data


def create_seq_db(data):
    """Convert interactions of a user to a sequence."""
    # group by user id and concat item id
    groups = data.groupby("col_user")
    # convert item ids to int, then aggregate them to lists
    aggregated = groups.col_item.agg(col_sequence=lambda x: list(map(int, x)))
    result = aggregated
    result.reset_index(inplace=True)
    return result


def dataset_to_seq_target_format(data):
    """Convert a list of sequences to (seq,target) format."""
    iseqs = data["col_sequence"]
    out_seqs = []
    labs = []
    ids = []
    for id, seq in zip(range(len(iseqs)), iseqs):
        for i in range(1, len(seq)):
            tar = seq[-i]
            labs += [tar]
            out_seqs += [seq[:-i]]
            ids += [id]
    return out_seqs, labs


class SeqDataset(Dataset):
    """Sequential Dataset."""

    def __init__(self, data, print_info=True):
        """Init SeqDataset Class."""
        self.data = data

    def __getitem__(self, index):
        """Get an item from the dataset by index."""
        session_items = self.data[0][index]
        target_item = self.data[1][index]
        return session_items, target_item

    def __len__(self):
        """Get the length of the dataset."""
        return len(self.data[0])


def make_collate_fn(bug=None):
    def collate_fn(data):
        """Pad the sessions to the batch's max length and transpose to max_seq_len x batch_size."""
        if bug == "labels_before_sort":
            labels = [label for sess, label in data]
        data.sort(key=lambda x: len(x[0]), reverse=True)
        lens = [len(sess) for sess, label in data]
        if bug != "labels_before_sort":
            labels = []
        padded_sesss = torch.zeros(len(data), max(lens)).long()
        for i, (sess, label) in enumerate(data):
            padded_sesss[i, : lens[i]] = torch.LongTensor(sess)
            if bug != "labels_before_sort":
                labels.append(label)
        padded_sesss = padded_sesss.transpose(0, 1)
        return padded_sesss, torch.tensor(labels).long(), lens
    return collate_fn


def make_interactions(seed, n_users=80, n_items=60):
    """(port) An ml_100k-shaped table: each user's sequence follows a fixed next-item rule 70% of the time."""
    rng = np.random.default_rng(seed)
    raw_ids = rng.permutation(np.arange(1, 1700))[:n_items]
    nxt = rng.permutation(n_items)
    rows = []
    for u in range(n_users):
        item = rng.integers(n_items)
        for t in range(rng.integers(6, 13)):
            rows.append((u + 1, raw_ids[item], 874700000 + 3600 * t + u))
            item = nxt[item] if rng.random() < 0.7 else rng.integers(n_items)
    return pd.DataFrame(rows, columns=["col_user", "col_item", "col_timestamp"])


def _config():
    return {"dataset": {}, "model": {"batch_size": 32, "embedding_dim": 32, "lr": 0.01, "optimizer": "adam",  # (port) 1024
                                     "max_epoch": 200, "hidden_size": 100, "n_layers": 1, "dropout_input": 0.25,
                                     "dropout_hidden": 0.5, "lr_dc": 0.1, "lr_dc_step": 80, "device_str": "cpu"}}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    config = _config()
    dataset = make_interactions(seed)
    cut = dataset.col_timestamp.quantile(0.8)  # (port) make_temporal_split(n_negative=0, n_test=0)
    train_data, valid_data, test_data = dataset[dataset.col_timestamp <= cut], None, dataset[dataset.col_timestamp > cut]
    config["dataset"]["n_users"] = train_data.col_user.nunique()
    config["dataset"]["n_items"] = train_data.col_item.nunique() + 1
    # build_data_loader
    train_data, valid_data, test_data = reindex_items(train_data, valid_data, test_data)
    seq_train_data = create_seq_db(train_data)
    load_train_data = dataset_to_seq_target_format(seq_train_data)
    load_train_data = SeqDataset(load_train_data)
    train_loader = DataLoader(load_train_data, batch_size=config["model"]["batch_size"], shuffle=False,
                              collate_fn=make_collate_fn(bug))
    engine = NARMEngine(config, bug=bug)

    def loop():  # _train
        for epoch in range(config["model"]["max_epoch"]):
            yield from engine.train_an_epoch(train_loader, epoch=epoch)

    steps = loop()
    seq, target, lens = make_collate_fn()([load_train_data[i] for i in range(32)])
    return Program(name="betarecsys_narm", model=engine.model, batch=({"seq": seq, "lengths": lens}, target),
                   loss_fn=engine.loss_func, optimizer=engine.optimizer, train_step=lambda: next(steps), batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: collate_fn reads the labels before sorting the batch by length, so the padded sequences are sorted
    # and their targets are not (each prefix is trained toward another prefix's next item).
    Bug("labels_before_sort", functools.partial(_build, bug="labels_before_sort"), "learning_ledger", ("TASK",)),
    # classic padding slip: the global context read from the GRU output at the last padded time step
    # (``gru_out[-1]``, zeros for every prefix shorter than the batch's longest) instead of the final hidden state.
    Bug("last_output_from_padding", functools.partial(_build, bug="last_output_from_padding"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: ``optimizer.zero_grad()`` left out of train_an_epoch, so gradients accumulate over the batches;
    # every parameter alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
