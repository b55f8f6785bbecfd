"""Caser (convolutional sequence embedding for next-item recommendation: the last ``history_max`` items embedded as
an image, horizontal filters of heights 1..L max-pooled over time, vertical filters over the whole history, a
fully-connected layer joined with the user embedding, dot products with the candidate items) trained by ReChorus's
``BaseRunner``: one positive and one sampled negative per training interaction (resampled every epoch, never an item
the user clicked in training), the candidates shuffled before the forward and the scores shuffled back, the
``GeneralModel.loss`` (BPR with a softmax over the negatives), Adam with weight decay only on non-bias parameters.

Source: https://github.com/THUwangcy/ReChorus
Commit: e58d752558634d42be60de561d6f74df748583cc
Files: src/models/sequential/Caser.py, src/models/BaseModel.py (BaseModel, GeneralModel, SequentialModel and their
Dataset classes), src/helpers/BaseRunner.py, src/helpers/BaseReader.py, src/helpers/SeqReader.py, src/main.py,
src/utils/utils.py (init_seed, batch_to_gpu)
License: MIT (Copyright (c) 2020 Chenyang Wang; full text in LICENSES/THUwangcy-ReChorus.txt)
Domain: sequential recommendation (next item, convolutional user-history encoder, sampled pairwise loss)

Kept as written: ``Caser`` (``_define_params``, ``forward``), ``BaseModel.init_weights`` / ``customize_parameters``,
``GeneralModel.loss`` and its ``Dataset`` (``_get_feed_dict``, ``actions_before_epoch``), ``SequentialModel`` and its
``Dataset`` (positions > 0, the history cut to ``history_max``), ``BaseModel.Dataset`` (``collate_batch``,
``prepare``), ``BaseReader`` (the clicked sets, ``n_users`` / ``n_items``), ``SeqReader._append_his_info``,
``BaseRunner`` (``_build_optimizer``, ``fit``'s batch loop body, ``evaluate_method``, ``predict``); ``main.py``'s order
(seed, reader, model, datasets, runner); the Caser command of the model's docstring (``--emb_size 64 --L 5
--num_horizon 64 --num_vertical 32 --lr 1e-3 --l2 1e-4 --history_max 20``) with the runner's defaults (batch_size
256, Adam, num_neg 1, test_all 0).

Deviations from the original:
- sizes: emb_size 64 -> 32, num_horizon 64 -> 16, num_vertical 32 -> 8, history_max 20 -> 10 (L 5 kept);
- data: the Grocery_and_Gourmet_Food csv files are replaced by a synthetic leave-one-out split made from ``seed`` in
  the same layout (``user_id``, ``item_id``, ``time``; dev and test rows with 99 ``neg_items``): 200 users whose
  sequences of 12-24 items walk a fixed item-transition table inside one of 6 item groups (items 1..300, 0 the
  padding), the last interaction in test, the one before in dev; ``BaseReader._read_data`` takes the DataFrames
  from memory instead of ``pd.read_csv`` (so ``utils.eval_list_columns`` has nothing to parse) and logging is left
  out; the corpus pickle cache is not written;
- numpy 2 removed ``np.object``: ``collate_batch`` compares with ``object``; the original's tab indentation is
  written with spaces;
- the device is the CPU; ``num_workers`` 5 -> 0; ``tqdm`` progress bars are left out;
- ``BaseRunner.train``'s epoch loop is not run to its end: one ``train_step`` is one batch of ``fit`` (the
  DataLoader of an epoch, with ``actions_before_epoch``, is made when the previous one ends); the dev evaluation,
  early stopping and model saving are left out; ``eval_fn`` is ``evaluate_method``'s main metric (NDCG@5) on the model's
  predictions for a given batch, as ``predict`` computes them;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, C419, F841, PLC0206, RUF012, UP004, UP006, UP008, UP032, UP035
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types
from typing import Dict, List

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as BaseDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_USERS, N_ITEMS, N_GROUPS = 200, 300, 6


# ---- src/utils/utils.py -------------------------------------------------------------------------------------

def init_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def batch_to_gpu(batch: dict, device) -> dict:
    for c in batch:
        if type(batch[c]) is torch.Tensor:
            batch[c] = batch[c].to(device)
    return batch


# ---- src/helpers/BaseReader.py, SeqReader.py ----------------------------------------------------------------

def make_interactions(seed):
    """(port) train/dev/test DataFrames in ReChorus's layout, leave-one-out by time."""
    rng = np.random.RandomState(seed)
    groups = np.array_split(rng.permutation(np.arange(1, N_ITEMS + 1)), N_GROUPS)
    nxt = {}  # each item's two likely successors inside its group
    for g in groups:
        for i in g:
            nxt[i] = rng.choice(g, size=2, replace=False)
    rows = {"train": [], "dev": [], "test": []}
    t = 0
    for u in range(1, N_USERS + 1):
        g = groups[rng.randint(N_GROUPS)]
        item = rng.choice(g)
        seq = []
        for _ in range(rng.randint(12, 25)):
            seq.append(item)
            item = nxt[item][rng.randint(2)] if rng.rand() < 0.9 else rng.choice(g)
        for k, i in enumerate(seq):
            t += 1
            key = "test" if k == len(seq) - 1 else "dev" if k == len(seq) - 2 else "train"
            rows[key].append((u, int(i), t))
    data_df = {}
    for key in ["train", "dev", "test"]:
        df = pd.DataFrame(rows[key], columns=["user_id", "item_id", "time"])
        if key != "train":
            df["neg_items"] = [list(rng.choice(np.setdiff1d(np.arange(1, N_ITEMS + 1), [i]), 99, replace=False))
                               for i in df["item_id"]]
        data_df[key] = df
    return data_df


class BaseReader(object):
    def __init__(self, args, data_df):
        self.sep = args.sep
        self.prefix = args.path
        self.dataset = args.dataset
        self._read_data(data_df)

        self.train_clicked_set = dict()  # store the clicked item set of each user in training set
        self.residual_clicked_set = dict()  # store the residual clicked item set of each user
        for key in ['train', 'dev', 'test']:
            df = self.data_df[key]
            for uid, iid in zip(df['user_id'], df['item_id']):
                if uid not in self.train_clicked_set:
                    self.train_clicked_set[uid] = set()
                    self.residual_clicked_set[uid] = set()
                if key == 'train':
                    self.train_clicked_set[uid].add(iid)
                else:
                    self.residual_clicked_set[uid].add(iid)

    def _read_data(self, data_df):
        self.data_df = dict()
        for key in ['train', 'dev', 'test']:
            # (port) the DataFrame from memory instead of pd.read_csv(os.path.join(self.prefix, self.dataset, key + '.csv'))
            self.data_df[key] = data_df[key].reset_index(drop=True).sort_values(by = ['user_id','time'])

        key_columns = ['user_id','item_id','time']
        if 'label' in self.data_df['train'].columns: # Add label for CTR prediction
            key_columns.append('label')
        self.all_df = pd.concat([self.data_df[key][key_columns] for key in ['train', 'dev', 'test']])
        self.n_users, self.n_items = self.all_df['user_id'].max() + 1, self.all_df['item_id'].max() + 1
        for key in ['dev', 'test']:
            if 'neg_items' in self.data_df[key]:
                neg_items = np.array(self.data_df[key]['neg_items'].tolist())
                assert (neg_items >= self.n_items).sum() == 0  # assert negative items don't include unseen ones


class SeqReader(BaseReader):
    def __init__(self, args, data_df):
        super().__init__(args, data_df)
        self._append_his_info()

    def _append_his_info(self):
        """
        self.user_his: store user history sequence [(i1,t1), (i1,t2), ...]
        add the 'position' of each interaction in user_his to data_df
        """
        sort_df = self.all_df.sort_values(by=['time', 'user_id'], kind='mergesort')
        position = list()
        self.user_his = dict()  # store the already seen sequence of each user
        for uid, iid, t in zip(sort_df['user_id'], sort_df['item_id'], sort_df['time']):
            if uid not in self.user_his:
                self.user_his[uid] = list()
            position.append(len(self.user_his[uid]))
            self.user_his[uid].append((iid, t))
        sort_df['position'] = position
        for key in ['train', 'dev', 'test']:
            self.data_df[key] = pd.merge(
                left=self.data_df[key], right=sort_df, how='left',
                on=['user_id', 'item_id', 'time'])
        del sort_df


# ---- src/models/BaseModel.py --------------------------------------------------------------------------------

class BaseModel(nn.Module):
    reader, runner = None, None  # choose helpers in specific model classes
    extra_log_args = []

    @staticmethod
    def init_weights(m):
        if 'Linear' in str(type(m)):
            nn.init.normal_(m.weight, mean=0.0, std=0.01)
            if m.bias is not None:
                nn.init.normal_(m.bias, mean=0.0, std=0.01)
        elif 'Embedding' in str(type(m)):
            nn.init.normal_(m.weight, mean=0.0, std=0.01)

    def __init__(self, args, corpus: BaseReader):
        super(BaseModel, self).__init__()
        self.device = args.device
        self.model_path = args.model_path
        self.buffer = args.buffer
        self.optimizer = None
        self.check_list = list()  # observe tensors in check_list every check_epoch

    def customize_parameters(self) -> list:
        # customize optimizer settings for different parameters
        weight_p, bias_p = [], []
        for name, p in filter(lambda x: x[1].requires_grad, self.named_parameters()):
            if 'bias' in name:
                bias_p.append(p)
            else:
                weight_p.append(p)
        optimize_dict = [{'params': weight_p}, {'params': bias_p, 'weight_decay': 0}]
        return optimize_dict

    class Dataset(BaseDataset):
        def __init__(self, model, corpus, phase: str):
            self.model = model  # model object reference
            self.corpus = corpus  # reader object reference
            self.phase = phase  # train / dev / test

            self.buffer_dict = dict()
            self.data = corpus.data_df[phase].to_dict('list')
            # ↑ DataFrame is not compatible with multi-thread operations

        def __len__(self):
            if type(self.data) == dict:
                for key in self.data:
                    return len(self.data[key])
            return len(self.data)

        def __getitem__(self, index: int) -> dict:
            if self.model.buffer and self.phase != 'train':
                return self.buffer_dict[index]
            return self._get_feed_dict(index)

        # ! Key method to construct input data for a single instance
        def _get_feed_dict(self, index: int) -> dict:
            pass

        # Called after initialization
        def prepare(self):
            if self.model.buffer and self.phase != 'train':
                for i in range(len(self)):
                    self.buffer_dict[i] = self._get_feed_dict(i)

        # Called before each training epoch (only for the training dataset)
        def actions_before_epoch(self):
            pass

        # Collate a batch according to the list of feed dicts
        def collate_batch(self, feed_dicts: List[dict]) -> dict:
            feed_dict = dict()
            for key in feed_dicts[0]:
                if isinstance(feed_dicts[0][key], np.ndarray):
                    tmp_list = [len(d[key]) for d in feed_dicts]
                    if any([tmp_list[0] != l for l in tmp_list]):
                        stack_val = np.array([d[key] for d in feed_dicts], dtype=object)
                    else:
                        stack_val = np.array([d[key] for d in feed_dicts])
                else:
                    stack_val = np.array([d[key] for d in feed_dicts])
                if stack_val.dtype == object:  # inconsistent length (e.g., history)
                    feed_dict[key] = pad_sequence([torch.from_numpy(x) for x in stack_val], batch_first=True)
                else:
                    feed_dict[key] = torch.from_numpy(stack_val)
            feed_dict['batch_size'] = len(feed_dicts)
            feed_dict['phase'] = self.phase
            return feed_dict


class GeneralModel(BaseModel):
    reader, runner = 'BaseReader', 'BaseRunner'

    def __init__(self, args, corpus):
        super().__init__(args, corpus)
        self.user_num = corpus.n_users
        self.item_num = corpus.n_items
        self.num_neg = args.num_neg
        self.dropout = args.dropout
        self.test_all = args.test_all
        self.bug = getattr(args, 'bug', None)  # (port) the bug switch

    def loss(self, out_dict: dict) -> torch.Tensor:
        """
        BPR ranking loss with optimization on multiple negative samples (a little different now to follow the paper ↓)
        "Recurrent neural networks with top-k gains for session-based recommendations"
        :param out_dict: contain prediction with [batch_size, -1], the first column for positive, the rest for negative
        :return:
        """
        predictions = out_dict['prediction']
        pos_pred, neg_pred = predictions[:, 0], predictions[:, 1:]
        neg_softmax = (neg_pred - neg_pred.max()).softmax(dim=1)
        if self.bug == "bpr_minus_dropped":
            # the log-likelihood minimised instead of its negative: the positive is pushed below the negatives
            loss = (((pos_pred[:, None] - neg_pred).sigmoid() * neg_softmax).sum(dim=1)).clamp(min=1e-8,max=1-1e-8).log().mean()
        else:
            loss = -(((pos_pred[:, None] - neg_pred).sigmoid() * neg_softmax).sum(dim=1)).clamp(min=1e-8,max=1-1e-8).log().mean()
        # neg_pred = (neg_pred * neg_softmax).sum(dim=1)
        # loss = F.softplus(-(pos_pred - neg_pred)).mean()
        # ↑ For numerical stability, use 'softplus(-x)' instead of '-log_sigmoid(x)'
        return loss

    class Dataset(BaseModel.Dataset):
        def _get_feed_dict(self, index):
            user_id, target_item = self.data['user_id'][index], self.data['item_id'][index]
            if self.phase != 'train' and self.model.test_all:
                neg_items = np.arange(1, self.corpus.n_items)
            else:
                neg_items = self.data['neg_items'][index]
            item_ids = np.concatenate([[target_item], neg_items]).astype(int)
            feed_dict = {
                'user_id': user_id,
                'item_id': item_ids
            }
            return feed_dict

        # Sample negative items for all the instances
        def actions_before_epoch(self):
            neg_items = np.random.randint(1, self.corpus.n_items, size=(len(self), self.model.num_neg))
            for i, u in enumerate(self.data['user_id']):
                clicked_set = self.corpus.train_clicked_set[u]  # neg items are possible to appear in dev/test set
                # clicked_set = self.corpus.clicked_set[u]  # neg items will not include dev/test set
                for j in range(self.model.num_neg):
                    while neg_items[i][j] in clicked_set:
                        neg_items[i][j] = np.random.randint(1, self.corpus.n_items)
            self.data['neg_items'] = neg_items


class SequentialModel(GeneralModel):
    reader = 'SeqReader'

    def __init__(self, args, corpus):
        super().__init__(args, corpus)
        self.history_max = args.history_max

    class Dataset(GeneralModel.Dataset):
        def __init__(self, model, corpus, phase):
            super().__init__(model, corpus, phase)
            idx_select = np.array(self.data['position']) > 0  # history length must be non-zero
            for key in self.data:
                self.data[key] = np.array(self.data[key],dtype=object)[idx_select].tolist()

        def _get_feed_dict(self, index):
            feed_dict = super()._get_feed_dict(index)
            pos = self.data['position'][index]
            if self.model.bug == "history_includes_target":
                # the slice's end off by one: the item to predict is the last item of its own history
                user_seq = self.corpus.user_his[feed_dict['user_id']][:pos + 1]
            else:
                user_seq = self.corpus.user_his[feed_dict['user_id']][:pos]
            if self.model.history_max > 0:
                user_seq = user_seq[-self.model.history_max:]
            feed_dict['history_items'] = np.array([x[0] for x in user_seq])
            feed_dict['history_times'] = np.array([x[1] for x in user_seq])
            feed_dict['lengths'] = len(feed_dict['history_items'])
            return feed_dict


# ---- src/models/sequential/Caser.py -------------------------------------------------------------------------

class Caser(SequentialModel):
    reader = 'SeqReader'
    runner = 'BaseRunner'
    extra_log_args = ['emb_size', 'num_horizon', 'num_vertical', 'L']

    def __init__(self, args, corpus):
        super().__init__(args, corpus)
        self.emb_size = args.emb_size
        self.max_his = args.history_max
        self.num_horizon = args.num_horizon
        self.num_vertical = args.num_vertical
        self.l = args.L
        assert self.l <= self.max_his  # use L instead of max_his to avoid excessive conv_h
        self._define_params()
        self.apply(self.init_weights)

    def _define_params(self):
        self.u_embeddings = nn.Embedding(self.user_num, self.emb_size)
        self.i_embeddings = nn.Embedding(self.item_num, self.emb_size, padding_idx=0)
        lengths = [i + 1 for i in range(self.l)]
        self.conv_h = nn.ModuleList(
            [nn.Conv2d(in_channels=1, out_channels=self.num_horizon, kernel_size=(i, self.emb_size)) for i in lengths])
        self.conv_v = nn.Conv2d(in_channels=1, out_channels=self.num_vertical, kernel_size=(self.max_his, 1))

        self.fc_dim_h = self.num_horizon * len(lengths)
        self.fc_dim_v = self.num_vertical * self.emb_size
        fc_dim_in = self.fc_dim_v + self.fc_dim_h
        self.fc = nn.Linear(fc_dim_in, self.emb_size)
        self.out = nn.Linear(self.emb_size * 2, self.emb_size)


    def forward(self, feed_dict):
        self.check_list = []
        u_ids = feed_dict['user_id']
        i_ids = feed_dict['item_id']  # [batch_size, -1]
        history = feed_dict['history_items']  # [batch_size, history_max]
        batch_size, seq_len = history.shape

        pad_len = self.max_his - seq_len
        history = F.pad(history, [0, pad_len])
        his_vectors = self.i_embeddings(history).unsqueeze(1)  # [batch_size, 1, history_max, emb_size]

        # Convolution Layers
        out, out_h, out_v = None, None, None
        # vertical conv layer
        if self.num_vertical > 0:
            out_v = self.conv_v(his_vectors)
            out_v = out_v.view(-1, self.fc_dim_v)  # prepare for fully connect
        # horizontal conv layer
        out_hs = list()
        if self.num_horizon > 0:
            for conv in self.conv_h:
                conv_out = conv(his_vectors).squeeze(3).relu()
                pool_out = F.max_pool1d(conv_out, conv_out.size(2)).squeeze(2)
                out_hs.append(pool_out)
            out_h = torch.cat(out_hs, 1)  # prepare for fully connect

        # Fully-connected Layers
        user_vector = self.u_embeddings(u_ids)
        z = self.fc(torch.cat([out_v, out_h], 1)).relu()
        his_vector = self.out(torch.cat([z, user_vector], 1))

        i_vectors = self.i_embeddings(i_ids)
        prediction = (his_vector[:, None, :] * i_vectors).sum(-1)
        return {'prediction': prediction.view(batch_size, -1)}


# ---- src/helpers/BaseRunner.py ------------------------------------------------------------------------------

class BaseRunner(object):
    @staticmethod
    def evaluate_method(predictions: np.ndarray, topk: list, metrics: list) -> Dict[str, float]:
        """
        :param predictions: (-1, n_candidates) shape, the first column is the score for ground-truth item
        :param topk: top-K value list
        :param metrics: metric string list
        :return: a result dict, the keys are metric@topk
        """
        evaluations = dict()
        # sort_idx = (-predictions).argsort(axis=1)
        # gt_rank = np.argwhere(sort_idx == 0)[:, 1] + 1
        # ↓ As we only have one positive sample, comparing with the first item will be more efficient.
        gt_rank = (predictions >= predictions[:,0].reshape(-1,1)).sum(axis=-1)
        for k in topk:
            hit = (gt_rank <= k)
            for metric in metrics:
                key = '{}@{}'.format(metric, k)
                if metric == 'HR':
                    evaluations[key] = hit.mean()
                elif metric == 'NDCG':
                    evaluations[key] = (hit / np.log2(gt_rank + 1)).mean()
                else:
                    raise ValueError('Undefined evaluation metric: {}.'.format(metric))
        return evaluations

    def __init__(self, args):
        self.train_models = args.train
        self.epoch = args.epoch
        self.check_epoch = args.check_epoch
        self.test_epoch = args.test_epoch
        self.early_stop = args.early_stop
        self.learning_rate = args.lr
        self.batch_size = args.batch_size
        self.eval_batch_size = args.eval_batch_size
        self.l2 = args.l2
        self.optimizer_name = args.optimizer
        self.num_workers = args.num_workers
        self.pin_memory = args.pin_memory
        self.topk = [int(x) for x in args.topk.split(',')]
        self.metrics = [m.strip().upper() for m in args.metric.split(',')]
        self.main_metric = '{}@{}'.format(self.metrics[0], self.topk[0]) if not len(args.main_metric) else args.main_metric # early stop based on main_metric
        self.main_topk = int(self.main_metric.split("@")[1]) if "@" in self.main_metric else 0
        self.time = None  # will store [start_time, last_step_time]

    def _build_optimizer(self, model):
        optimizer = eval('torch.optim.{}'.format(self.optimizer_name))(
            model.customize_parameters(), lr=self.learning_rate, weight_decay=self.l2)
        return optimizer

    def fit_batch(self, model, batch):
        """(port) one iteration of ``fit``'s batch loop."""
        batch = batch_to_gpu(batch, model.device)

        # randomly shuffle the items to avoid models remembering the first item being the target
        item_ids = batch['item_id']
        # for each row (sample), get random indices and shuffle the original items
        indices = torch.argsort(torch.rand(*item_ids.shape), dim=-1)
        batch['item_id'] = item_ids[torch.arange(item_ids.shape[0]).unsqueeze(-1), indices]

        model.optimizer.zero_grad()
        out_dict = model(batch)

        # shuffle the predictions back so that the prediction scores match the original order (first item is the target)
        prediction = out_dict['prediction']
        if len(prediction.shape)==2 and model.bug != "predictions_not_restored": # only for ranking tasks
            restored_prediction = torch.zeros(*prediction.shape).to(prediction.device)
            # use the random indices to shuffle back
            restored_prediction[torch.arange(item_ids.shape[0]).unsqueeze(-1), indices] = prediction
            out_dict['prediction'] = restored_prediction
        loss = model.loss(out_dict)
        loss.backward()
        model.optimizer.step()
        return loss

    def predict(self, dataset: BaseModel.Dataset, save_prediction: bool = False) -> np.ndarray:
        dataset.model.eval()
        predictions = list()
        dl = DataLoader(dataset, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers,
                        collate_fn=dataset.collate_batch, pin_memory=self.pin_memory)
        for batch in dl:
            if hasattr(dataset.model,'inference'):
                prediction = dataset.model.inference(batch_to_gpu(batch, dataset.model.device))['prediction']
            else:
                prediction = dataset.model(batch_to_gpu(batch, dataset.model.device))['prediction']
            predictions.extend(prediction.cpu().data.numpy())
        predictions = np.array(predictions)
        return predictions


# ---- src/main.py --------------------------------------------------------------------------------------------

def make_args(seed, bug=None):
    """The parsed arguments: main.py's global arguments, BaseReader's, BaseRunner's and the model's defaults with the
    Caser command of its docstring (sizes reduced, see the module docstring)."""
    return types.SimpleNamespace(
        # main.py
        gpu='', verbose=20, log_file='', random_seed=seed, load=0, train=1, save_final_results=0, regenerate=0,
        # BaseReader
        path='data/', dataset='Grocery_and_Gourmet_Food', sep='\t',
        # BaseRunner
        epoch=200, check_epoch=1, test_epoch=-1, early_stop=10, lr=1e-3, l2=1e-4, batch_size=256,
        eval_batch_size=256, optimizer='Adam', num_workers=0, pin_memory=0, topk='5,10,20,50', metric='NDCG,HR',
        main_metric='',
        # BaseModel, GeneralModel, SequentialModel, Caser
        model_path='', buffer=1, num_neg=1, dropout=0, test_all=0, history_max=10,
        emb_size=32, num_horizon=16, num_vertical=8, L=5,
        bug=bug,
    )


def _build(seed, bug=None):
    args = make_args(seed, bug)
    # Random seed
    init_seed(args.random_seed)
    args.device = torch.device('cpu')

    # Read data
    corpus = SeqReader(args, make_interactions(seed))

    # Define model
    model = Caser(args, corpus).to(args.device)

    # Define dataset
    data_dict = dict()
    for phase in ['train', 'dev', 'test']:
        data_dict[phase] = Caser.Dataset(model, corpus, phase)
        data_dict[phase].prepare()

    # Run model
    runner = BaseRunner(args)

    # BaseRunner.fit, before its batch loop
    dataset = data_dict['train']
    if model.optimizer is None:
        model.optimizer = runner._build_optimizer(model)

    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["epoch"] += 1
            dataset.actions_before_epoch()  # must sample before multi thread start
            model.train()
            dl = DataLoader(dataset, batch_size=runner.batch_size, shuffle=True, num_workers=runner.num_workers,
                            collate_fn=dataset.collate_batch, pin_memory=runner.pin_memory)
            state["it"] = iter(dl)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        return runner.fit_batch(model, batch).detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            prediction = model(batch_to_gpu(dict(batch), model.device))['prediction']
        return float(runner.evaluate_method(prediction.cpu().data.numpy(), [runner.main_topk], runner.metrics)[runner.main_metric])

    dataset.actions_before_epoch()
    first = dataset.collate_batch([dataset[i] for i in range(runner.batch_size)])
    return Program(name="rechorus_caser", model=model, batch=first,
                   loss_fn=lambda out_dict, _targets: model.loss(out_dict), optimizer=model.optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # fit shuffles each row's candidates before the forward (so a model cannot learn that the first candidate is the
    # target, https://github.com/THUwangcy/ReChorus/issues/43) and must shuffle the scores back; here the shuffle
    # back is left out, so the loss takes a random candidate's score as the positive's.
    Bug("predictions_not_restored", functools.partial(_build, bug="predictions_not_restored"), "learning_ledger",
        ("TASK",)),
    # the history slice ends one position late: the target item is the last item of the history it is predicted from
    # (classic off-by-one target leak).
    Bug("history_includes_target", functools.partial(_build, bug="history_includes_target"), "learning_ledger",
        ("TASK",)),
    # the minus sign of the pairwise loss dropped: the log-likelihood of ranking the positive first is minimised
    # (classic sign slip).
    Bug("bpr_minus_dropped", functools.partial(_build, bug="bpr_minus_dropped"), "learning_ledger", ("OBJECTIVE",)),
]
