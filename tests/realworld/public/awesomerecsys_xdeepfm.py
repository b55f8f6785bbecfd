# ruff: noqa: PLR0402, PLW0127, PIE808
"""xDeepFM (CIN + deep network + linear part) for click-through rate, from JianzhouZhan/Awesome-RecSystem-Models.

Source: https://github.com/JianzhouZhan/Awesome-RecSystem-Models
Commit: a4d1479686160ad2909e3438d87838c872852cb8
Files: ``Model/xDeepFM_PyTorch.py``
License: MIT (Copyright (c) 2020 JianzhouZhan; full text in LICENSES/JianzhouZhan-Awesome-RecSystem-Models.txt)
Domain: recommendation, click-through rate (xDeepFM on Criteo-style rows: 13 bucketized counts + 26 categorical
fields as one shared embedding table)

Kept as written: ``xDeepFM_layer`` (xavier embedding of every field's feature id, the Compressed Interaction
Network with ``einsum('bhd,bmd->bhmd')``, 1x1 ``Conv1d`` per layer, ReLU, split-half, sum pooling; the deep
network of Linear - BatchNorm - ReLU - Dropout blocks; the linear part over the flattened embeddings; the output
layer over their concatenation; ``feat_value`` unused as in the original), ``train_xDeepFM_model_demo``'s
configuration (39 fields, ``dropout_deep`` all 0, split-half CIN, layer sizes shrunk as listed below,
``Adam(model.parameters())`` at its defaults, reg_l2 1e-5), ``train``'s loop body (the batch sliced
from the shuffled file, ``ed_idx = min(ed_idx, train_item_count - 1)``, zero_grad, ``binary_cross_entropy_with_
logits``, the L2 term over every parameter, backward, ``clip_grad_norm_(max_norm=100)``, step), ``test``'s loss
and ``get_idx_value_label`` (counts: ``int(log(v) ** 2)`` above 2, ``'SP' + v`` otherwise, ``absence`` when
empty; categoricals seen 4 times or fewer mapped to ``C<k>#<count>``; the rows shuffled with ``np.random``).

Deviations from the original:
- Criteo and the preprocessing's pickles (``feat_dict_4.pkl2``, ``feat_cnt_4.pkl2``) are not here: the rows are
  synthetic Criteo-style tab-separated lines made from ``seed`` (label, I1-I13 counts with missing values, C1-C26
  hex tokens with a long tail; the click depends on a few categorical fields and two counts), and ``featIndex`` /
  ``feat_cnt`` are counted from the training lines the way those pickles map ``field#value`` strings to ids
  (rare values folded to ``field#count``, every key present). 2000 training and 500 test lines, one "file"
  each: ``get_idx_value_label`` reads a list of lines instead of opening a path.
- sizes for 2 CPU cores: ``BATCH_SIZE`` 2048 -> 128, deep layers [400] * 4 -> [200] * 4, CIN layers
  [100, 100, 50] -> [50, 50, 25], embedding 16 -> 8; ``DEVICE`` is the CPU.
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the next epoch starts,
  re-reading and re-shuffling the file, when it runs out), returning the batch's loss; the progress print is
  dropped.
- ``test`` returns its average loss (sklearn's ``roc_auc_score`` and the prints are dropped); like the
  original it calls ``model(idx, value)`` without ``model.eval()``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

EPOCHS = 5
BATCH_SIZE = 128  # (port) 2048
DEVICE = torch.device("cpu")


class xDeepFM_layer(nn.Module):
    def __init__(self, num_feat, num_field, dropout_deep, deep_layer_sizes, cin_layer_sizes, split_half=True,
                 reg_l1=0.01, reg_l2=1e-5, embedding_size=10):
        super().__init__()  # Python2 下使用 super(xDeepFM_layer, self).__init__()
        self.reg_l1 = reg_l1
        self.reg_l2 = reg_l2
        self.num_feat = num_feat
        self.num_field = num_field
        self.cin_layer_sizes = cin_layer_sizes
        self.deep_layer_sizes = deep_layer_sizes
        self.embedding_size = embedding_size    # denoted by M
        self.dropout_deep = dropout_deep
        self.split_half = split_half

        self.input_dim = num_field * embedding_size

        # init feature embedding
        feat_embedding = nn.Embedding(num_feat, embedding_size)
        nn.init.xavier_uniform_(feat_embedding.weight)
        self.feat_embedding = feat_embedding

        # Compress Interaction Network (CIN) Part
        cin_layer_dims = [self.num_field] + cin_layer_sizes

        prev_dim, fc_input_dim = self.num_field, 0
        self.conv1ds = nn.ModuleList()
        for k in range(1, len(cin_layer_dims)):
            conv1d = nn.Conv1d(cin_layer_dims[0] * prev_dim, cin_layer_dims[k], 1)
            nn.init.xavier_uniform_(conv1d.weight)
            self.conv1ds.append(conv1d)
            if self.split_half and k != len(self.cin_layer_sizes):
                prev_dim = cin_layer_dims[k] // 2
            else:
                prev_dim = cin_layer_dims[k]
            fc_input_dim += prev_dim

        # Deep Neural Network Part
        all_dims = [self.input_dim] + deep_layer_sizes
        for i in range(len(deep_layer_sizes)):
            setattr(self, 'linear_' + str(i + 1), nn.Linear(all_dims[i], all_dims[i + 1]))
            setattr(self, 'batchNorm_' + str(i + 1), nn.BatchNorm1d(all_dims[i + 1]))
            setattr(self, 'dropout_' + str(i + 1), nn.Dropout(dropout_deep[i + 1]))

        # Linear Part
        self.linear = nn.Linear(self.input_dim, 1)

        # output Part
        self.output_layer = nn.Linear(1 + fc_input_dim + deep_layer_sizes[-1], 1)

    def forward(self, feat_index, feat_value, use_dropout=True):
        # get feat embedding
        fea_embedding = self.feat_embedding(feat_index)    # None * F * K
        x0 = fea_embedding

        # Linear Part
        linear_part = self.linear(fea_embedding.reshape(-1, self.input_dim))

        # CIN Part
        x_list = [x0]
        res = []
        for k in range(1, len(self.cin_layer_sizes) + 1):
            # Batch * H_K * D, Batch * M * D -->  Batch * H_k * M * D
            z_k = torch.einsum('bhd,bmd->bhmd', x_list[-1], x_list[0])
            z_k = z_k.reshape(x0.shape[0], x_list[-1].shape[1] * x0.shape[1], x0.shape[2])
            x_k = self.conv1ds[k - 1](z_k)
            x_k = torch.relu(x_k)

            if self.split_half and k != len(self.cin_layer_sizes):
                next_hidden, hi = torch.split(x_k, x_k.shape[1] // 2, 1)
            else:
                next_hidden, hi = x_k, x_k

            x_list.append(next_hidden)
            res.append(hi)

        res = torch.cat(res, dim=1)
        res = torch.sum(res, dim=2)

        # Deep NN Part
        y_deep = fea_embedding.reshape(-1, self.num_field * self.embedding_size)  # None * (F * K)
        if use_dropout:
            y_deep = nn.Dropout(self.dropout_deep[0])(y_deep)

        for i in range(1, len(self.deep_layer_sizes) + 1):
            y_deep = getattr(self, 'linear_' + str(i))(y_deep)
            y_deep = getattr(self, 'batchNorm_' + str(i))(y_deep)
            y_deep = F.relu(y_deep)
            if use_dropout:
                y_deep = getattr(self, 'dropout_' + str(i))(y_deep)

        # Output Part
        concat_input = torch.cat((linear_part, res, y_deep), dim=1)
        output = self.output_layer(concat_input)
        return output


def get_idx_value_label(fname, featIndex, feat_cnt, shuffle=True, bug=None):
    continuous_range_ = range(1, 14)
    categorical_range_ = range(14, 40)

    def _process_line(line):
        features = line.rstrip('\n').split('\t')
        feat_idx = []
        feat_value = []

        for idx in continuous_range_:
            key = 'I' + str(idx)
            val = features[idx]

            if val == '':
                feat = str(key) + '#' + 'absence'
            else:
                val = int(float(val))
                if val > 2:
                    val = int(math.log(float(val)) ** 2)
                else:
                    val = 'SP' + str(val)
                feat = str(key) + '#' + str(val)

            feat_idx.append(featIndex[feat])
            feat_value.append(1)

        for idx in categorical_range_:
            key = 'C' + str(idx - 13)
            val = features[idx]

            if val == '':
                feat = str(key) + '#' + 'absence'
            else:
                feat = str(key) + '#' + str(val)
            if feat_cnt[feat] > 4:
                feat = feat
            else:
                feat = str(key) + '#' + str(feat_cnt[feat])

            feat_idx.append(featIndex[feat])
            feat_value.append(1)
        return feat_idx, feat_value, [int(features[0])]

    features_idxs, features_values, labels = [], [], []
    fin = fname  # (port) the file's lines
    for line in fin:
        feat_idx, feat_value, label = _process_line(line)
        features_idxs.append(feat_idx)
        features_values.append(feat_value)
        labels.append(label)

    features_idxs = np.array(features_idxs)
    features_values = np.array(features_values)
    labels = np.array(labels).astype(np.int32)

    # 进行shuffle
    if shuffle:
        idx_list = np.arange(len(features_idxs))
        np.random.shuffle(idx_list)

        features_idxs = features_idxs[idx_list, :]
        features_values = features_values[idx_list, :]
        if bug == "labels_shuffled_apart":
            np.random.shuffle(idx_list)
        labels = labels[idx_list, :]
    return features_idxs, features_values, labels


# ----------------------------------------------------------------------------------------------- (port) data
def synthetic_lines(rng, n, field_w):
    """Criteo-style lines: label, I1..I13, C1..C26 (tab separated), the click from C1-C4, I1 and I5."""
    lines = []
    for _ in range(n):
        ints = rng.geometric(p=rng.uniform(0.02, 0.3, size=13)) - 1
        miss = rng.random(13) < 0.1
        ints_s = ['' if m else str(int(v)) for v, m in zip(ints, miss)]
        cats = []
        score = -0.3
        for k in range(26):
            vocab = 8 if k < 4 else 30
            v = int(min(rng.zipf(1.6), vocab)) - 1
            cats.append('' if rng.random() < 0.05 else '%08x' % (v * 2654435761 % (1 << 32) ^ k))
            if k < 4 and cats[-1] != '':
                score += field_w[k][v]
        if ints_s[0] != '':
            score += 0.8 * (math.log1p(int(ints_s[0])) - 1.5)
        if ints_s[4] != '':
            score -= 0.5 * (math.log1p(int(ints_s[4])) - 1.5)
        label = int(rng.random() < 1 / (1 + math.exp(-score)))
        lines.append('\t'.join([str(label)] + ints_s + cats) + '\n')
    return lines


def feature_maps(lines):
    """featIndex and feat_cnt as the preprocessing's pickles hold them (id 0 left for nothing)."""
    feat_cnt = collections.Counter()
    keys = set()
    for line in lines:
        features = line.rstrip('\n').split('\t')
        for idx in range(1, 14):
            key = 'I' + str(idx)
            val = features[idx]
            if val == '':
                keys.add(key + '#absence')
            else:
                val = int(float(val))
                keys.add(key + '#' + (str(int(math.log(float(val)) ** 2)) if val > 2 else 'SP' + str(val)))
        for idx in range(14, 40):
            key = 'C' + str(idx - 13)
            val = features[idx]
            feat_cnt[key + '#' + (val if val != '' else 'absence')] += 1
    for k, c in list(feat_cnt.items()):
        keys.add(k if c > 4 else k.split('#')[0] + '#' + str(c))
    for idx in range(1, 27):  # every rare bucket and the unseen count 0
        for c in range(0, 5):
            keys.add('C' + str(idx) + '#' + str(c))
    for idx in range(1, 14):
        for v in range(0, 3):
            keys.add('I' + str(idx) + '#SP' + str(v))
        for v in range(0, 200):
            keys.add('I' + str(idx) + '#' + str(v))
        keys.add('I' + str(idx) + '#absence')
    featIndex = {k: i + 1 for i, k in enumerate(sorted(keys))}
    return featIndex, feat_cnt


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    field_w = rng.normal(0, 1.2, size=(4, 8))
    train_lines = synthetic_lines(rng, 2000, field_w)
    test_lines = synthetic_lines(rng, 500, field_w)
    featIndex, feat_cnt = feature_maps(train_lines)
    train_filelist, test_filelist = [train_lines], [test_lines]

    # 下面的num_feat的长度还需要考虑缺失值的处理而多了一个维度
    xdeepfm = xDeepFM_layer(num_feat=len(featIndex) + 1, num_field=39, dropout_deep=[0, 0, 0, 0, 0],
                            deep_layer_sizes=[200, 200, 200, 200], cin_layer_sizes=[50, 50, 25],
                            embedding_size=8).to(DEVICE)  # (port) [400] * 4, [100, 100, 50], 16

    # 定义损失函数还有优化器
    optimizer = torch.optim.Adam(xdeepfm.parameters())

    train_item_count = sum(len(f) for f in train_filelist)
    test_item_count = sum(len(f) for f in test_filelist)
    device = DEVICE
    model = xdeepfm
    use_reg_l2 = True
    n_batches = math.ceil(train_item_count / BATCH_SIZE)
    st = {"batch_idx": 0, "features_idxs": None, "features_values": None, "labels": None}

    def criterion(output, target):
        if bug == "sigmoid_before_bce_with_logits":
            return F.binary_cross_entropy_with_logits(torch.sigmoid(output), target)
        return F.binary_cross_entropy_with_logits(output, target)

    def train_step():
        # one batch of train(model, train_filelist, ...); a new epoch re-reads (and re-shuffles) the file
        batch_idx = st["batch_idx"] % n_batches
        if batch_idx == 0:
            st["features_idxs"] = None
        fname_idx = 0
        st_idx, ed_idx = batch_idx * BATCH_SIZE, (batch_idx + 1) * BATCH_SIZE
        ed_idx = min(ed_idx, train_item_count - 1)

        if st["features_idxs"] is None:
            st["features_idxs"], st["features_values"], st["labels"] = get_idx_value_label(
                train_filelist[fname_idx], featIndex, feat_cnt, bug=bug)
        features_idxs, features_values, labels = st["features_idxs"], st["features_values"], st["labels"]

        batch_fea_idxs = features_idxs[st_idx:ed_idx, :]
        batch_fea_values = features_values[st_idx:ed_idx, :]
        batch_labels = labels[st_idx:ed_idx, :]

        # 进行格式转换
        batch_fea_values = torch.from_numpy(batch_fea_values)
        batch_labels = torch.from_numpy(batch_labels)

        idx = torch.LongTensor([[int(x) for x in x_idx] for x_idx in batch_fea_idxs])
        idx = idx.to(device)
        value = batch_fea_values.to(device, dtype=torch.float32)
        target = batch_labels.to(device, dtype=torch.float32)
        optimizer.zero_grad()
        output = model(idx, value)
        loss = criterion(output, target)

        if use_reg_l2:
            regularization_loss = 0
            for param in model.parameters():
                regularization_loss += model.reg_l2 * torch.sum(torch.pow(param, 2))
            loss += regularization_loss

        loss.backward()

        if bug == "clip_after_step":
            optimizer.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=100)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=100)
            optimizer.step()
        st["batch_idx"] += 1
        return loss.item()

    def test(model, _batch=None):
        features_idxs, features_values, labels = get_idx_value_label(
            test_filelist[0], featIndex, feat_cnt, shuffle=False)
        test_loss = 0
        with torch.no_grad():
            for batch_idx in range(math.ceil(test_item_count / BATCH_SIZE)):
                st_idx, ed_idx = batch_idx * BATCH_SIZE, (batch_idx + 1) * BATCH_SIZE
                ed_idx = min(ed_idx, test_item_count - 1)
                batch_fea_idxs = features_idxs[st_idx:ed_idx, :]
                batch_fea_values = torch.from_numpy(features_values[st_idx:ed_idx, :])
                batch_labels = torch.from_numpy(labels[st_idx:ed_idx, :])

                idx = torch.LongTensor([[int(x) for x in x_idx] for x_idx in batch_fea_idxs])
                value = batch_fea_values.to(device, dtype=torch.float32)
                target = batch_labels.to(device, dtype=torch.float32)
                output = model(idx, value)

                test_loss += F.binary_cross_entropy_with_logits(output, target)
            test_loss /= math.ceil(test_item_count / BATCH_SIZE)
        return float(test_loss)

    # the Program's batch: the first BATCH_SIZE rows of the training file, unshuffled
    fi, fv, lb = get_idx_value_label(train_lines[:BATCH_SIZE], featIndex, feat_cnt, shuffle=False)
    batch = ((torch.LongTensor(fi), torch.from_numpy(fv).float()), torch.from_numpy(lb).float())

    return Program(name="awesomerecsys_xdeepfm", model=xdeepfm, batch=batch, loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=test)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels are permuted by a second shuffle of idx_list, apart from the features (classic: rows and labels
    # shuffled separately).
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # a sigmoid on the output before binary_cross_entropy_with_logits (classic).
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # clip_grad_norm_ after optimizer.step(): the clipping never reaches the update (classic).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
