"""GRU4Rec next-item recommendation trained by RecBole's ``Trainer``: the sequential dataset's ``data_augmentation``
(every prefix of a user's time-sorted history, at most ``MAX_ITEM_LIST_LENGTH`` items, predicts the next item),
``GRU4Rec`` (item embedding with padding index 0, embedding dropout, a bias-free GRU, a dense layer back to the
embedding size, the output gathered at ``item_seq_len - 1``), the ``CE`` loss over all item embeddings, Adam
(``learner: adam``, lr 0.001, weight decay 0) and ``Trainer._train_epoch``'s loop body (zero_grad, loss,
``_check_nan``, scaled backward, optional clipping, scaler step).

Source: https://github.com/RUCAIBox/RecBole
Commit: 7b02be5ec80a88310f2d04a27a82adfcbb5dc211
Files: recbole/model/sequential_recommender/gru4rec.py, recbole/model/abstract_recommender.py
  (SequentialRecommender, gather_indexes), recbole/trainer/trainer.py (Trainer.__init__, _build_optimizer,
  _train_epoch, _check_nan), recbole/data/dataset/sequential_dataset.py (data_augmentation),
  recbole/properties/model/GRU4Rec.yaml, recbole/properties/overall.yaml
License: MIT (Copyright (c) 2020 RUCAIBox; LICENSES/RUCAIBox-RecBole.txt)
Domain: sequential recommendation (session-based next-item prediction, GRU)

Deviations from the original:
- sizes: embedding_size 64 -> 16, hidden_size 128 -> 32, MAX_ITEM_LIST_LENGTH 50 -> 10, train_batch_size 2048 -> 64
  (num_layers 1, dropout_prob 0.3, loss_type CE, learner adam, learning_rate 0.001, weight_decay 0, clip_grad_norm
  None, enable_amp/enable_scaler False as configured);
- data: a MovieLens atomic file is replaced by synthetic interactions made from ``seed``: 64 users, 40 items
  (ids 1..40, 0 is padding), each user's history of 8-15 items walks a fixed random successor table from a random
  first item, so the next item is a function of the last one; ``data_augmentation`` is copied over a plain
  ``(uid, item)`` array already sorted by user and time; RecBole's ``Interaction`` is a dict of tensors keyed by the
  configured field names (``item_id_list``, ``item_length``, ``item_id``), batched by a shuffling ``DataLoader``;
- ``Trainer`` keeps only what ``_train_epoch`` uses (config, optimizer, clip_grad_norm, amp flags, device); the
  logger, tensorboard, wandb, checkpointing, evaluation collector and DDP branches (``single_spec`` True) are left
  out; ``amp.GradScaler`` is ``torch.amp.GradScaler("cpu", enabled=False)`` and autocast runs on the CPU device type
  disabled, as the configuration has them; the tqdm/GPU-RAM progress display is left out;
- ``GRU4Rec``'s BPR branch (not configured; ``BPRLoss`` is not copied) raises, and ``predict`` is left out;
- ``_train_epoch`` is split in two methods: ``_train_epoch_start`` (its lines before the batch loop) and
  ``_train_batch`` (the loop body, unchanged); one ``train_step`` is one iteration of that batch loop; ``self.model.train()`` runs when a new epoch
  starts; ``eval_fn`` is the full-sort next-item hit rate at 10 (``full_sort_predict``) on a given batch; at lr
  0.001 the loss falls slowly: ``SELF_CHECK_STEPS`` is 60 (about 6 epochs of the ~660-example training set);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.optim as optim
from torch import amp, nn
from torch.nn.init import xavier_normal_, xavier_uniform_
from torch.nn.utils.clip_grad import clip_grad_norm_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_USERS, N_ITEMS = 64, 40
SELF_CHECK_STEPS = 60

CONFIG = {
    "USER_ID_FIELD": "user_id",
    "ITEM_ID_FIELD": "item_id",
    "LIST_SUFFIX": "_list",
    "ITEM_LIST_LENGTH_FIELD": "item_length",
    "NEG_PREFIX": "neg_",
    "MAX_ITEM_LIST_LENGTH": 10,
    "device": torch.device("cpu"),
    # GRU4Rec.yaml
    "embedding_size": 16,
    "hidden_size": 32,
    "num_layers": 1,
    "dropout_prob": 0.3,
    "loss_type": "CE",
    # overall.yaml
    "train_batch_size": 64,
    "learner": "adam",
    "learning_rate": 0.001,
    "weight_decay": 0.0,
    "clip_grad_norm": None,
    "enable_amp": False,
    "enable_scaler": False,
    "single_spec": True,
    "reg_weight": None,
}


class Dataset:
    """What ``SequentialRecommender.__init__`` reads from a dataset: the number of item ids (with padding 0)."""

    def __init__(self, n_items):
        self.n_items = n_items

    def num(self, field):
        return self.n_items


# ---- recbole/model/abstract_recommender.py ----------------------------------------------------------------------

class AbstractRecommender(nn.Module):
    r"""Base class for all models"""

    def __init__(self):
        super(AbstractRecommender, self).__init__()


class SequentialRecommender(AbstractRecommender):
    """
    This is a abstract sequential recommender. All the sequential model should implement This class.
    """

    def __init__(self, config, dataset):
        super(SequentialRecommender, self).__init__()

        # load dataset info
        self.USER_ID = config["USER_ID_FIELD"]
        self.ITEM_ID = config["ITEM_ID_FIELD"]
        self.ITEM_SEQ = self.ITEM_ID + config["LIST_SUFFIX"]
        self.ITEM_SEQ_LEN = config["ITEM_LIST_LENGTH_FIELD"]
        self.POS_ITEM_ID = self.ITEM_ID
        self.NEG_ITEM_ID = config["NEG_PREFIX"] + self.ITEM_ID
        self.max_seq_length = config["MAX_ITEM_LIST_LENGTH"]
        self.n_items = dataset.num(self.ITEM_ID)

        # load parameters info
        self.device = config["device"]

    def gather_indexes(self, output, gather_index):
        """Gathers the vectors at the specific positions over a minibatch"""
        gather_index = gather_index.view(-1, 1, 1).expand(-1, -1, output.shape[-1])
        output_tensor = output.gather(dim=1, index=gather_index)
        return output_tensor.squeeze(1)


# ---- recbole/model/sequential_recommender/gru4rec.py ------------------------------------------------------------

class GRU4Rec(SequentialRecommender):
    r"""GRU4Rec is a model that incorporate RNN for recommendation.

    Note:

        Regarding the innovation of this article,we can only achieve the data augmentation mentioned
        in the paper and directly output the embedding of the item,
        in order that the generation method we used is common to other sequential models.
    """

    def __init__(self, config, dataset):
        super(GRU4Rec, self).__init__(config, dataset)

        # load parameters info
        self.embedding_size = config["embedding_size"]
        self.hidden_size = config["hidden_size"]
        self.loss_type = config["loss_type"]
        self.num_layers = config["num_layers"]
        self.dropout_prob = config["dropout_prob"]

        # define layers and loss
        self.item_embedding = nn.Embedding(
            self.n_items, self.embedding_size, padding_idx=0
        )
        self.emb_dropout = nn.Dropout(self.dropout_prob)
        self.gru_layers = nn.GRU(
            input_size=self.embedding_size,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            bias=False,
            batch_first=True,
        )
        self.dense = nn.Linear(self.hidden_size, self.embedding_size)
        if self.loss_type == "BPR":
            raise NotImplementedError("BPRLoss is not copied (the configuration uses CE)")
        elif self.loss_type == "CE":
            self.loss_fct = nn.CrossEntropyLoss()
        else:
            raise NotImplementedError("Make sure 'loss_type' in ['BPR', 'CE']!")

        # parameters initialization
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Embedding):
            xavier_normal_(module.weight)
        elif isinstance(module, nn.GRU):
            xavier_uniform_(module.weight_hh_l0)
            xavier_uniform_(module.weight_ih_l0)

    def forward(self, item_seq, item_seq_len):
        item_seq_emb = self.item_embedding(item_seq)
        item_seq_emb_dropout = self.emb_dropout(item_seq_emb)
        gru_output, _ = self.gru_layers(item_seq_emb_dropout)
        gru_output = self.dense(gru_output)
        # the embedding of the predicted item, shape of (batch_size, embedding_size)
        seq_output = self.gather_indexes(gru_output, item_seq_len - 1)
        return seq_output

    def calculate_loss(self, interaction):
        item_seq = interaction[self.ITEM_SEQ]
        item_seq_len = interaction[self.ITEM_SEQ_LEN]
        seq_output = self.forward(item_seq, item_seq_len)
        pos_items = interaction[self.POS_ITEM_ID]
        # self.loss_type = 'CE'
        test_item_emb = self.item_embedding.weight
        logits = torch.matmul(seq_output, test_item_emb.transpose(0, 1))
        loss = self.loss_fct(logits, pos_items)
        return loss

    def full_sort_predict(self, interaction):
        item_seq = interaction[self.ITEM_SEQ]
        item_seq_len = interaction[self.ITEM_SEQ_LEN]
        seq_output = self.forward(item_seq, item_seq_len)
        test_items_emb = self.item_embedding.weight
        scores = torch.matmul(
            seq_output, test_items_emb.transpose(0, 1)
        )  # [B, n_items]
        return scores


# ---- recbole/data/dataset/sequential_dataset.py (data_augmentation, on a plain array) ----------------------------

def data_augmentation(inter_feat, config, bug=None):
    max_item_list_len = config["MAX_ITEM_LIST_LENGTH"]
    uids, items = inter_feat[:, 0], inter_feat[:, 1]
    last_uid = None
    uid_list, item_list_index, target_index, item_list_length = [], [], [], []
    seq_start = 0
    for i, uid in enumerate(uids):
        if last_uid != uid:
            last_uid = uid
            seq_start = i
        else:
            if i - seq_start > max_item_list_len:
                seq_start += 1
            uid_list.append(uid)
            if bug == "item_window_off_by_one":
                # the history window shifted by one: it ends at the target itself
                item_list_index.append(slice(seq_start + 1, i + 1))
            else:
                item_list_index.append(slice(seq_start, i))
            target_index.append(i)
            item_list_length.append(i - seq_start)

    item_list_length = np.array(item_list_length, dtype=np.int64)
    new_length = len(item_list_index)
    item_id_list = np.zeros((new_length, max_item_list_len), dtype=np.int64)
    for i, (index, length) in enumerate(zip(item_list_index, item_list_length)):
        item_id_list[i][:length] = items[index]
    return {
        config["ITEM_ID_FIELD"] + config["LIST_SUFFIX"]: torch.tensor(item_id_list),
        config["ITEM_LIST_LENGTH_FIELD"]: torch.tensor(item_list_length),
        config["ITEM_ID_FIELD"]: torch.tensor(items[np.array(target_index)]),
    }


class InteractionDataset(torch.utils.data.Dataset):
    def __init__(self, fields):
        self.fields = fields

    def __len__(self):
        return len(next(iter(self.fields.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.fields.items()}


# ---- recbole/trainer/trainer.py ---------------------------------------------------------------------------------

class Trainer:
    def __init__(self, config, model, bug=None):
        self.config = config
        self.model = model
        self.bug = bug
        self.learner = config["learner"]
        self.learning_rate = config["learning_rate"]
        self.clip_grad_norm = config["clip_grad_norm"]
        self.gpu_available = torch.cuda.is_available() and config.get("use_gpu", False)
        self.device = config["device"]
        self.enable_amp = config["enable_amp"]
        self.enable_scaler = torch.cuda.is_available() and config["enable_scaler"]
        self.weight_decay = config["weight_decay"]
        self.optimizer = self._build_optimizer()

    def _build_optimizer(self, **kwargs):
        params = kwargs.pop("params", self.model.parameters())
        learner = kwargs.pop("learner", self.learner)
        learning_rate = kwargs.pop("learning_rate", self.learning_rate)
        weight_decay = kwargs.pop("weight_decay", self.weight_decay)

        if learner.lower() == "adam":
            optimizer = optim.Adam(params, lr=learning_rate, weight_decay=weight_decay)
        elif learner.lower() == "adamw":
            optimizer = optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
        elif learner.lower() == "sgd":
            optimizer = optim.SGD(params, lr=learning_rate, weight_decay=weight_decay)
        elif learner.lower() == "adagrad":
            optimizer = optim.Adagrad(
                params, lr=learning_rate, weight_decay=weight_decay
            )
        elif learner.lower() == "rmsprop":
            optimizer = optim.RMSprop(
                params, lr=learning_rate, weight_decay=weight_decay
            )
        elif learner.lower() == "sparse_adam":
            optimizer = optim.SparseAdam(params, lr=learning_rate)
        else:
            optimizer = optim.Adam(params, lr=learning_rate)
        return optimizer

    def _check_nan(self, loss):
        if torch.isnan(loss):
            raise ValueError("Training loss is nan")

    def _train_epoch_start(self, epoch_idx, loss_func=None):
        """The lines of ``_train_epoch`` before its batch loop."""
        self.model.train()
        self.loss_func = loss_func or self.model.calculate_loss
        self.total_loss = None
        self.scaler = amp.GradScaler("cpu", enabled=self.enable_scaler)
        if self.bug == "zero_grad_once_per_epoch":
            self.optimizer.zero_grad()

    def _train_batch(self, interaction):
        """One iteration of ``_train_epoch``'s ``for batch_idx, interaction in enumerate(iter_data)`` loop."""
        loss_func = self.loss_func
        total_loss = self.total_loss
        scaler = self.scaler
        interaction = {k: v.to(self.device) for k, v in interaction.items()}
        if self.bug != "zero_grad_once_per_epoch":
            self.optimizer.zero_grad()
        sync_loss = 0

        with torch.autocast(device_type=self.device.type, enabled=self.enable_amp):
            losses = loss_func(interaction)

        if isinstance(losses, tuple):
            loss = sum(losses)
            loss_tuple = tuple(per_loss.item() for per_loss in losses)
            total_loss = (
                loss_tuple
                if total_loss is None
                else tuple(map(sum, zip(total_loss, loss_tuple)))
            )
        else:
            loss = losses
            total_loss = (
                losses.item() if total_loss is None else total_loss + losses.item()
            )
        self._check_nan(loss)
        scaler.scale(loss + sync_loss).backward()
        if self.clip_grad_norm:
            clip_grad_norm_(self.model.parameters(), **self.clip_grad_norm)
        scaler.step(self.optimizer)
        scaler.update()
        self.total_loss = total_loss
        return loss.detach()


# ---- data ------------------------------------------------------------------------------------------------------

def make_interactions(gen):
    """(uid, item) rows sorted by user and time: each history walks a fixed successor table."""
    successor = torch.randperm(N_ITEMS, generator=gen) + 1  # item i -> successor[i - 1]
    rows = []
    for uid in range(1, N_USERS + 1):
        item = int(torch.randint(1, N_ITEMS + 1, (1,), generator=gen))
        for _ in range(int(torch.randint(8, 16, (1,), generator=gen))):
            rows.append((uid, item))
            item = int(successor[item - 1])
    return np.array(rows, dtype=np.int64), successor


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = dict(CONFIG)
    inter_feat, successor = make_interactions(gen)
    fields = data_augmentation(inter_feat, config, bug=bug)
    train_data = torch.utils.data.DataLoader(InteractionDataset(fields), batch_size=config["train_batch_size"],
                                             shuffle=True, generator=torch.Generator().manual_seed(seed))

    model = GRU4Rec(config, Dataset(N_ITEMS + 1))
    trainer = Trainer(config, model, bug=bug)

    state = {"it": None, "epoch": -1}

    def next_interaction():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # a new epoch
            state["epoch"] += 1
            trainer._train_epoch_start(state["epoch"])
            state["it"] = iter(train_data)
            return next(state["it"])

    def train_step():
        return trainer._train_batch(next_interaction())

    first = next(iter(torch.utils.data.DataLoader(InteractionDataset(fields), batch_size=config["train_batch_size"])))

    def loss_fn(seq_output, pos_items):
        test_item_emb = model.item_embedding.weight
        logits = torch.matmul(seq_output, test_item_emb.transpose(0, 1))
        return model.loss_fct(logits, pos_items)

    def eval_fn(model, batch):
        inputs, pos_items = batch
        interaction = {model.ITEM_SEQ: inputs["item_seq"], model.ITEM_SEQ_LEN: inputs["item_seq_len"]}
        model.eval()
        with torch.no_grad():
            scores = model.full_sort_predict(interaction)
            scores[:, 0] = -np.inf
            hit = (scores.topk(10, dim=-1).indices == pos_items.unsqueeze(1)).any(dim=1).float().mean()
        model.train()
        return float(hit)

    def task_probe(inputs):
        """The labelling rule: the successor of the history's last item."""
        last = inputs["item_seq"].gather(1, (inputs["item_seq_len"] - 1).view(-1, 1)).squeeze(1)
        return successor[last - 1]

    batch = ({"item_seq": first[model.ITEM_SEQ], "item_seq_len": first[model.ITEM_SEQ_LEN]}, first[model.POS_ITEM_ID])
    return Program(name="recbole_gru4rec", model=model, batch=batch, loss_fn=loss_fn, optimizer=trainer.optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, task="classification",
                   loader=train_data)


build = functools.partial(_build)

BUGS = [
    # the augmentation's history window shifted by one, slice(seq_start + 1, i + 1): every history ends with the
    # item it must predict (classic target leak; RecBole's own off-by-one in gathered positions, for BERT4Rec's
    # evaluation, is https://github.com/RUCAIBox/RecBole/issues/1113).
    Bug("item_window_off_by_one", functools.partial(_build, bug="item_window_off_by_one"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() moved out of the batch loop to the start of the epoch: gradients pile up (classic).
    Bug("zero_grad_once_per_epoch", functools.partial(_build, bug="zero_grad_once_per_epoch"), "step_probe",
        ("item_embedding.weight",)),
]
