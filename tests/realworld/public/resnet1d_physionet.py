"""ResNet1D / ResNeXt1D on single-lead ECG (the PhysioNet/CinC Challenge 2017 AF classification: normal, AF, other
rhythm, noisy), Shenda Hong's resnet1d as run by its ``test_physionet.py``: per-record z-scoring, a 90/10 record
split, sliding windows cut with class-dependent strides (the rarer classes cut more densely), a pre-activation 1-d
ResNeXt of grouped SAME-padded convolutions (BatchNorm, ReLU, dropout 0.5, max-pool and zero-padded channels on the
shortcut), global average pooling and a linear layer; cross-entropy, Adam 1e-3 with weight decay 1e-3,
ReduceLROnPlateau stepped once an epoch; test windows voted per record, macro F1 over the four classes.

Source: https://github.com/hsd1503/resnet1d
Commit: 9cccb9f08fde65087272472d0572c2dbe16a8119
Files: test_physionet.py, resnet1d.py, util.py
License: Apache-2.0 (full text in LICENSES/hsd1503-resnet1d.txt)
Domain: time series classification, physiological signals (ECG rhythm)

Kept as written: ``MyDataset``, ``MyConv1dPadSame``, ``MyMaxPool1dPadSame``, ``BasicBlock`` and ``ResNet1D``
(``use_bn`` and ``use_do`` on, the first block without pre-activation, downsampling at ``i_block %
downsample_gap == 1``, channels doubled every ``increasefilter_gap`` blocks); ``util.slide_and_cut`` and
``read_data_physionet_4``'s scaling, label encoding, split, slide-and-cut and training shuffle; the script's
optimizer, ``ReduceLROnPlateau(mode='min', factor=0.1, patience=10)`` stepped with the epoch index as written
(``scheduler.step(_)``), ``CrossEntropyLoss``, the loop body (forward, loss, zero_grad, backward, step) and the
test (``model.eval()``, ``no_grad``, argmax, the majority vote per ``pid``, the mean of the four classes' F1).

Deviations from the original:
- the challenge's records (``challenge2017.pkl``) are not here: the records are synthetic single-lead "ECGs" made
  from ``seed`` at 100 Hz, 20-40 s each, labelled N (regular beats with P waves), A (irregular RR intervals, no P
  wave, fibrillatory ripple), O (regular rhythm with wide, inverted ectopic beats) or ~ (mostly noise), in the
  challenge's rough proportions; 100 records;
- sklearn is not here: ``train_test_split(test_size=0.1, random_state=0)`` is written out as its shuffled split
  (a ``RandomState(0)`` permutation, the first tenth held out) and ``classification_report``'s per-class F1 as
  the plain formula;
- sizes for 2 CPU cores: ``window_size`` 3000 -> 256, ``stride`` 500 -> 128 (so the class strides 128, 21, 64 and
  6), ``base_filters`` 128 -> 8, ``groups`` 32 -> 2, ``n_block`` 48 -> 4, ``downsample_gap`` 6 -> 2,
  ``increasefilter_gap`` 12 -> 4, ``kernel_size`` 16 kept, ``batch_size`` 32 -> 16;
- tensorboardX, torchsummary, tqdm and the prints are dropped; CPU only; the training windows' shuffle uses a
  ``np.random.RandomState(seed)`` in place of the global ``np.random``;
- one ``train_step`` is one batch of the epoch loop (at the end of an epoch ``scheduler.step(_)`` runs and the next
  epoch starts); ``eval_fn`` is the test block, returning the macro F1, and puts the model back in train mode as
  the next epoch's ``model.train()`` does;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, RUF059

from __future__ import annotations

import functools
import pathlib
import sys
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# resnet1d.py
class MyDataset(Dataset):
    def __init__(self, data, label):
        self.data = data
        self.label = label

    def __getitem__(self, index):
        return (torch.tensor(self.data[index], dtype=torch.float), torch.tensor(self.label[index], dtype=torch.long))

    def __len__(self):
        return len(self.data)


class MyConv1dPadSame(nn.Module):
    """
    extend nn.Conv1d to support SAME padding
    """
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups=1):
        super(MyConv1dPadSame, self).__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.groups = groups
        self.conv = torch.nn.Conv1d(
            in_channels=self.in_channels,
            out_channels=self.out_channels,
            kernel_size=self.kernel_size,
            stride=self.stride,
            groups=self.groups)

    def forward(self, x):

        net = x

        # compute pad shape
        in_dim = net.shape[-1]
        out_dim = (in_dim + self.stride - 1) // self.stride
        p = max(0, (out_dim - 1) * self.stride + self.kernel_size - in_dim)
        pad_left = p // 2
        pad_right = p - pad_left
        net = F.pad(net, (pad_left, pad_right), "constant", 0)

        net = self.conv(net)

        return net


class MyMaxPool1dPadSame(nn.Module):
    """
    extend nn.MaxPool1d to support SAME padding
    """
    def __init__(self, kernel_size):
        super(MyMaxPool1dPadSame, self).__init__()
        self.kernel_size = kernel_size
        self.stride = 1
        self.max_pool = torch.nn.MaxPool1d(kernel_size=self.kernel_size)

    def forward(self, x):

        net = x

        # compute pad shape
        in_dim = net.shape[-1]
        out_dim = (in_dim + self.stride - 1) // self.stride
        p = max(0, (out_dim - 1) * self.stride + self.kernel_size - in_dim)
        pad_left = p // 2
        pad_right = p - pad_left
        net = F.pad(net, (pad_left, pad_right), "constant", 0)

        net = self.max_pool(net)

        return net


class BasicBlock(nn.Module):
    """
    ResNet Basic Block
    """
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, downsample, use_bn, use_do,
                 is_first_block=False):
        super(BasicBlock, self).__init__()

        self.in_channels = in_channels
        self.kernel_size = kernel_size
        self.out_channels = out_channels
        self.stride = stride
        self.groups = groups
        self.downsample = downsample
        if self.downsample:
            self.stride = stride
        else:
            self.stride = 1
        self.is_first_block = is_first_block
        self.use_bn = use_bn
        self.use_do = use_do

        # the first conv
        self.bn1 = nn.BatchNorm1d(in_channels)
        self.relu1 = nn.ReLU()
        self.do1 = nn.Dropout(p=0.5)
        self.conv1 = MyConv1dPadSame(
            in_channels=in_channels,
            out_channels=out_channels,
            kernel_size=kernel_size,
            stride=self.stride,
            groups=self.groups)

        # the second conv
        self.bn2 = nn.BatchNorm1d(out_channels)
        self.relu2 = nn.ReLU()
        self.do2 = nn.Dropout(p=0.5)
        self.conv2 = MyConv1dPadSame(
            in_channels=out_channels,
            out_channels=out_channels,
            kernel_size=kernel_size,
            stride=1,
            groups=self.groups)

        self.max_pool = MyMaxPool1dPadSame(kernel_size=self.stride)

    def forward(self, x):

        identity = x

        # the first conv
        out = x
        if not self.is_first_block:
            if self.use_bn:
                out = self.bn1(out)
            out = self.relu1(out)
            if self.use_do:
                out = self.do1(out)
        out = self.conv1(out)

        # the second conv
        if self.use_bn:
            out = self.bn2(out)
        out = self.relu2(out)
        if self.use_do:
            out = self.do2(out)
        out = self.conv2(out)

        # if downsample, also downsample identity
        if self.downsample:
            identity = self.max_pool(identity)

        # if expand channel, also pad zeros to identity
        if self.out_channels != self.in_channels:
            identity = identity.transpose(-1, -2)
            ch1 = (self.out_channels - self.in_channels) // 2
            ch2 = self.out_channels - self.in_channels - ch1
            identity = F.pad(identity, (ch1, ch2), "constant", 0)
            identity = identity.transpose(-1, -2)

        # shortcut
        out += identity

        return out


class ResNet1D(nn.Module):
    """
    Input:
        X: (n_samples, n_channel, n_length)
        Y: (n_samples)

    Output:
        out: (n_samples)

    Pararmetes:
        in_channels: dim of input, the same as n_channel
        base_filters: number of filters in the first several Conv layer, it will double at every 4 layers
        kernel_size: width of kernel
        stride: stride of kernel moving
        groups: set larget to 1 as ResNeXt
        n_block: number of blocks
        n_classes: number of classes
    """

    def __init__(self, in_channels, base_filters, kernel_size, stride, groups, n_block, n_classes, downsample_gap=2,
                 increasefilter_gap=4, use_bn=True, use_do=True, verbose=False):
        super(ResNet1D, self).__init__()

        self.verbose = verbose
        self.n_block = n_block
        self.kernel_size = kernel_size
        self.stride = stride
        self.groups = groups
        self.use_bn = use_bn
        self.use_do = use_do

        self.downsample_gap = downsample_gap  # 2 for base model
        self.increasefilter_gap = increasefilter_gap  # 4 for base model

        # first block
        self.first_block_conv = MyConv1dPadSame(in_channels=in_channels, out_channels=base_filters,
                                                kernel_size=self.kernel_size, stride=1)
        self.first_block_bn = nn.BatchNorm1d(base_filters)
        self.first_block_relu = nn.ReLU()
        out_channels = base_filters

        # residual blocks
        self.basicblock_list = nn.ModuleList()
        for i_block in range(self.n_block):
            # is_first_block
            if i_block == 0:
                is_first_block = True
            else:
                is_first_block = False
            # downsample at every self.downsample_gap blocks
            if i_block % self.downsample_gap == 1:
                downsample = True
            else:
                downsample = False
            # in_channels and out_channels
            if is_first_block:
                in_channels = base_filters
                out_channels = in_channels
            else:
                # increase filters at every self.increasefilter_gap blocks
                in_channels = int(base_filters * 2 ** ((i_block - 1) // self.increasefilter_gap))
                if (i_block % self.increasefilter_gap == 0) and (i_block != 0):
                    out_channels = in_channels * 2
                else:
                    out_channels = in_channels

            tmp_block = BasicBlock(
                in_channels=in_channels,
                out_channels=out_channels,
                kernel_size=self.kernel_size,
                stride=self.stride,
                groups=self.groups,
                downsample=downsample,
                use_bn=self.use_bn,
                use_do=self.use_do,
                is_first_block=is_first_block)
            self.basicblock_list.append(tmp_block)

        # final prediction
        self.final_bn = nn.BatchNorm1d(out_channels)
        self.final_relu = nn.ReLU(inplace=True)
        # self.do = nn.Dropout(p=0.5)
        self.dense = nn.Linear(out_channels, n_classes)
        # self.softmax = nn.Softmax(dim=1)

    def forward(self, x):

        out = x

        # first conv
        out = self.first_block_conv(out)
        if self.use_bn:
            out = self.first_block_bn(out)
        out = self.first_block_relu(out)

        # residual blocks, every block has two conv
        for i_block in range(self.n_block):
            net = self.basicblock_list[i_block]
            out = net(out)

        # final prediction
        if self.use_bn:
            out = self.final_bn(out)
        out = self.final_relu(out)
        out = out.mean(-1)
        # out = self.do(out)
        out = self.dense(out)
        # out = self.softmax(out)

        return out


# util.py
def slide_and_cut(X, Y, window_size, stride, output_pid=False, datatype=4):
    out_X = []
    out_Y = []
    out_pid = []
    n_sample = X.shape[0]
    for i in range(n_sample):
        tmp_ts = X[i]
        tmp_Y = Y[i]
        if tmp_Y == 0:
            i_stride = stride
        elif tmp_Y == 1:
            if datatype == 4:
                i_stride = stride // 6
            elif datatype == 2:
                i_stride = stride // 10
            elif datatype == 2.1:
                i_stride = stride // 7
        elif tmp_Y == 2:
            i_stride = stride // 2
        elif tmp_Y == 3:
            i_stride = stride // 20
        for j in range(0, len(tmp_ts) - window_size, i_stride):
            out_X.append(tmp_ts[j:j + window_size])
            out_Y.append(tmp_Y)
            out_pid.append(i)
    if output_pid:
        return np.array(out_X), np.array(out_Y), np.array(out_pid)
    else:
        return np.array(out_X), np.array(out_Y)


def train_test_split(X, Y, test_size, random_state):
    """sklearn's shuffled split written out (port)."""
    n_test = int(np.ceil(test_size * len(X)))
    perm = np.random.RandomState(random_state).permutation(len(X))
    test, train = perm[:n_test], perm[n_test:]
    return X[train], X[test], Y[train], Y[test]


def synthetic_records(rng, n_records, fs=100):
    """Single-lead ECG-like records (port): N, A, O, ~ in roughly the challenge's proportions."""
    kinds = rng.choice(4, size=n_records, p=[0.5, 0.15, 0.25, 0.10])
    letters = np.array(['N', 'A', 'O', '~'])[kinds]
    data = np.empty(n_records, dtype=object)

    def beat(t, c, amp=1.0, width=0.025):
        return amp * np.exp(-0.5 * ((t - c) / width) ** 2)

    for i, k in enumerate(kinds):
        dur = rng.uniform(20, 40)
        t = np.arange(int(dur * fs)) / fs
        x = np.zeros_like(t)
        rr = rng.uniform(0.7, 1.1)
        c = rng.uniform(0.1, rr)
        n_beat = 0
        while c < dur:
            if k == 1:  # AF: irregular RR, no P wave, fibrillatory ripple
                x += beat(t, c, 1.0)
                c += rr * rng.uniform(0.5, 1.5)
            elif k == 2 and n_beat % 4 == 3:  # other: a wide inverted ectopic beat
                x += beat(t, c, -1.2, width=0.07)
                c += rr * 1.3
            else:  # regular with P and T waves
                x += beat(t, c - 0.16, 0.15, 0.03) + beat(t, c, 1.0) + beat(t, c + 0.25, 0.3, 0.06)
                c += rr * rng.uniform(0.97, 1.03)
            n_beat += 1
        if k == 1:
            x += 0.08 * np.sin(2 * np.pi * rng.uniform(5, 7) * t + rng.uniform(0, 6.28))
        x += 0.03 * rng.standard_normal(len(t)) + 0.1 * np.sin(2 * np.pi * 0.2 * t)
        if k == 3:
            x = 0.3 * x + 0.8 * np.cumsum(rng.standard_normal(len(t))) / np.sqrt(fs) + 0.5 * rng.standard_normal(len(t))
        data[i] = (x * rng.uniform(200, 800) + rng.uniform(-100, 100)).astype(np.float64)
    return {'data': data, 'label': letters}


def read_data_physionet_4(res, window_size=3000, stride=500, shuffle_rng=None, bug=None):

    # read pkl (port: the records are passed in)
    ## scale data
    all_data = res['data']
    for i in range(len(all_data)):
        tmp_data = all_data[i]
        tmp_std = np.std(tmp_data)
        tmp_mean = np.mean(tmp_data)
        all_data[i] = (tmp_data - tmp_mean) / tmp_std
    ## encode label
    all_label = []
    for i in res['label']:
        if i == 'N':
            all_label.append(0)
        elif i == 'A':
            all_label.append(1)
        elif i == 'O':
            all_label.append(2)
        elif i == '~':
            all_label.append(3)
    all_label = np.array(all_label)

    # split train test
    X_train, X_test, Y_train, Y_test = train_test_split(all_data, all_label, test_size=0.1, random_state=0)

    # slide and cut
    X_train, Y_train = slide_and_cut(X_train, Y_train, window_size=window_size, stride=stride)
    X_test, Y_test, pid_test = slide_and_cut(X_test, Y_test, window_size=window_size, stride=stride, output_pid=True)

    # shuffle train
    shuffle_pid = shuffle_rng.permutation(Y_train.shape[0])
    X_train = X_train[shuffle_pid]
    if bug == "labels_shuffled_apart":
        # a second permutation for the labels: windows and labels no longer match
        shuffle_pid = shuffle_rng.permutation(Y_train.shape[0])
    Y_train = Y_train[shuffle_pid]

    X_train = np.expand_dims(X_train, 1)
    X_test = np.expand_dims(X_test, 1)

    return X_train, X_test, Y_train, Y_test, pid_test


def _f1(gt, pred, c):
    tp = sum(1 for g, p in zip(gt, pred) if g == c and p == c)
    fp = sum(1 for g, p in zip(gt, pred) if g != c and p == c)
    fn = sum(1 for g, p in zip(gt, pred) if g == c and p != c)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    res = synthetic_records(rng, 100)

    batch_size = 16  # (port) 32

    # make data
    X_train, X_test, Y_train, Y_test, pid_test = read_data_physionet_4(
        res, window_size=256, stride=128, shuffle_rng=np.random.RandomState(seed), bug=bug)  # (port) 3000, 500
    dataset = MyDataset(X_train, Y_train)
    dataset_test = MyDataset(X_test, Y_test)
    dataloader = DataLoader(dataset, batch_size=batch_size)
    dataloader_test = DataLoader(dataset_test, batch_size=batch_size, drop_last=False)

    # make model
    device = torch.device("cpu")
    kernel_size = 16
    stride = 2
    n_block = 4  # (port) 48
    downsample_gap = 2  # (port) 6
    increasefilter_gap = 4  # (port) 12
    model = ResNet1D(
        in_channels=1,
        base_filters=8,  # (port) 128
        kernel_size=kernel_size,
        stride=stride,
        groups=2,  # (port) 32
        n_block=n_block,
        n_classes=4,
        downsample_gap=downsample_gap,
        increasefilter_gap=increasefilter_gap,
        use_do=True)
    model.to(device)

    # train and test
    model.verbose = False
    optimizer = optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.1, patience=10)
    loss_func = torch.nn.CrossEntropyLoss()

    state = {"epoch": 0, "it": None, "step": 0}

    def train_step():
        if state["it"] is None:
            # train
            model.train()
            state["it"] = iter(dataloader)
        try:
            batch = next(state["it"])
        except StopIteration:
            scheduler.step(state["epoch"])
            state["epoch"] += 1
            model.train()
            state["it"] = iter(dataloader)
            batch = next(state["it"])

        input_x, input_y = tuple(t.to(device) for t in batch)
        pred = model(input_x)
        loss = loss_func(pred, input_y)
        optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        state["step"] += 1
        return loss.item()

    def test(model, _batch=None):
        # test
        if bug != "test_in_train_mode":
            model.eval()
        all_pred_prob = []
        with torch.no_grad():
            for batch_idx, batch in enumerate(dataloader_test):
                input_x, input_y = tuple(t.to(device) for t in batch)
                pred = model(input_x)
                all_pred_prob.append(pred.cpu().data.numpy())
        all_pred_prob = np.concatenate(all_pred_prob)
        all_pred = np.argmax(all_pred_prob, axis=1)
        ## vote most common
        final_pred = []
        final_gt = []
        for i_pid in np.unique(pid_test):
            tmp_pred = all_pred[pid_test == i_pid]
            tmp_gt = Y_test[pid_test == i_pid]
            final_pred.append(Counter(tmp_pred).most_common(1)[0][0])
            final_gt.append(Counter(tmp_gt).most_common(1)[0][0])
        f1_score = sum(_f1(final_gt, final_pred, c) for c in range(4)) / 4
        model.train()  # (port) the next epoch's model.train()
        return f1_score

    first = next(iter(DataLoader(dataset, batch_size=batch_size)))
    return Program(name="resnet1d_physionet", model=model, batch=(first[0], first[1]), loss_fn=loss_func,
                   optimizer=optimizer, train_step=train_step, eval_fn=test, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the training labels permuted by a second draw of the shuffle, apart from their windows (classic).
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # model.eval() left out of the test block (classic): dropout 0.5 on and BatchNorm on the test batch's statistics.
    Bug("test_in_train_mode", functools.partial(_build, bug="test_in_train_mode"), "six_claims", ("EVALUATION",)),
    # optimizer.zero_grad() repeated between backward and step (classic): every update applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
