# ruff: noqa: C417, D419, F632, RUF059, UP008
"""MAML (model-agnostic meta-learning) on Omniglot-style N-way K-shot tasks: a functional ``Learner`` whose forward
takes an explicit weight list, an inner loop of plain SGD steps on ``fast_weights`` per task, the query loss of the
last inner step averaged over the meta-batch, and an Adam meta-update.

Source: https://github.com/dragen1860/MAML-Pytorch
Commit: 98a00d41724c133bd29619a2fb2cc46dd128a368
Files: ``meta.py`` (``Meta.__init__``, ``Meta.forward``), ``learner.py`` (``Learner``), ``omniglot_train.py`` (the
config, the arguments, the loop), ``omniglotNShot.py`` (``OmniglotNShot``: split, ``load_data_cache``, ``next``).
License: MIT (Copyright (c) 2019 Jackie Loong; full text in LICENSES/dragen1860-MAML-Pytorch.txt)
Domain: meta-learning, few-shot classification (MAML, first-order through ``autograd.grad`` as written)

Kept as written: ``Learner`` (its ``vars`` / ``vars_bn`` ParameterLists, kaiming init, the config-driven functional
forward with ``F.batch_norm(..., training=bn_training)``, its ``parameters()`` override), ``Meta.forward``'s loop
(support loss, ``torch.autograd.grad``, ``fast_weights = p - update_lr * g``, the no-grad query evaluations at steps
0 and 1, steps 1..update_step-1, ``loss_q = losses_q[-1] / task_num``, ``meta_optim`` zero_grad / backward / step),
omniglot_train.py's config shape (four conv2d-relu-bn blocks, flatten, linear to ``n_way``), update_lr 0.4, meta_lr
1e-3, update_step 5, n_way 5, k_spt 1, and ``OmniglotNShot``'s episode sampling (``load_data_cache``: classes and
images drawn per task, labels 0..n_way-1, the shuffle inside each set, a cache of 10 episodes; ``next``).

Deviations from the original:
- the Omniglot download (torchvision-style ``Omniglot`` + PIL resize) is replaced by a synthetic Omniglot-shaped
  array made from ``seed``: 60 "characters" of 20 images each, 1 x 28 x 28, every character a random binary stroke
  pattern and each image that pattern with 12% of its pixels flipped (the original's [1623, 20, 1, 28, 28]; the
  train/test split keeps the original's 1200/1623 ratio: the first 44 classes train).
- sizes for 2 CPU cores: task_num 2 (32), k_qry 5 (15), 16 conv channels (64).
- ``Learner`` keeps only the branches of the layer types this config uses (conv2d, linear, bn, relu, flatten); the
  other layer types' branches, ``extra_repr`` and its unused ``zero_grad`` override are dropped.
- ``np.random`` is a ``numpy.random.RandomState(seed)`` instance held by the data set; ``np.float`` / ``np.int``
  (removed from numpy) are ``np.float64`` / ``np.int64``; the CUDA device and the visdom/print lines are dropped.
- ``Meta.forward`` also returns ``loss_q`` (the meta loss it optimized) so ``train_step`` has a loss to report;
  ``train_step`` is one iteration of omniglot_train.py's ``for step in range(args.epoch)`` loop (``db_train.next()``,
  ``maml(...)``); the periodic test fine-tuning is not run.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_CLS, N_TRAIN, CH = 60, 44, 16


class Learner(nn.Module):
    """

    """

    def __init__(self, config, imgc, imgsz):
        """

        :param config: network config file, type:list of (string, list)
        :param imgc: 1 or 3
        :param imgsz:  28 or 84
        """
        super(Learner, self).__init__()


        self.config = config

        # this dict contains all tensors needed to be optimized
        self.vars = nn.ParameterList()
        # running_mean and running_var
        self.vars_bn = nn.ParameterList()

        for i, (name, param) in enumerate(self.config):
            if name is 'conv2d':
                # [ch_out, ch_in, kernelsz, kernelsz]
                w = nn.Parameter(torch.ones(*param[:4]))
                # gain=1 according to cbfin's implementation
                torch.nn.init.kaiming_normal_(w)
                self.vars.append(w)
                # [ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[0])))

            elif name is 'linear':
                # [ch_out, ch_in]
                w = nn.Parameter(torch.ones(*param))
                # gain=1 according to cbfinn's implementation
                torch.nn.init.kaiming_normal_(w)
                self.vars.append(w)
                # [ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[0])))

            elif name is 'bn':
                # [ch_out]
                w = nn.Parameter(torch.ones(param[0]))
                self.vars.append(w)
                # [ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[0])))

                # must set requires_grad=False
                running_mean = nn.Parameter(torch.zeros(param[0]), requires_grad=False)
                running_var = nn.Parameter(torch.ones(param[0]), requires_grad=False)
                self.vars_bn.extend([running_mean, running_var])


            elif name in ['tanh', 'relu', 'upsample', 'avg_pool2d', 'max_pool2d',
                          'flatten', 'reshape', 'leakyrelu', 'sigmoid']:
                continue
            else:
                raise NotImplementedError

    def forward(self, x, vars=None, bn_training=True):
        """
        :param x: [b, 1, 28, 28]
        :param vars:
        :param bn_training: set False to not update
        :return: x, loss, likelihood, kld
        """

        if vars is None:
            vars = self.vars

        idx = 0
        bn_idx = 0

        for name, param in self.config:
            if name is 'conv2d':
                w, b = vars[idx], vars[idx + 1]
                # remember to keep synchrozied of forward_encoder and forward_decoder!
                x = F.conv2d(x, w, b, stride=param[4], padding=param[5])
                idx += 2
                # print(name, param, '\tout:', x.shape)
            elif name is 'linear':
                w, b = vars[idx], vars[idx + 1]
                x = F.linear(x, w, b)
                idx += 2
                # print('forward:', idx, x.norm().item())
            elif name is 'bn':
                w, b = vars[idx], vars[idx + 1]
                running_mean, running_var = self.vars_bn[bn_idx], self.vars_bn[bn_idx+1]
                x = F.batch_norm(x, running_mean, running_var, weight=w, bias=b, training=bn_training)
                idx += 2
                bn_idx += 2

            elif name is 'flatten':
                # print(x.shape)
                x = x.view(x.size(0), -1)
            elif name is 'relu':
                x = F.relu(x, inplace=param[0])
            else:
                raise NotImplementedError

        # make sure variable is used properly
        assert idx == len(vars)
        assert bn_idx == len(self.vars_bn)


        return x

    def parameters(self):
        """
        override this function since initial parameters will return with a generator.
        :return:
        """
        return self.vars


class Meta(nn.Module):
    """
    Meta Learner
    """
    def __init__(self, args, config, bug=None):
        """

        :param args:
        """
        super(Meta, self).__init__()

        self.update_lr = args.update_lr
        self.meta_lr = args.meta_lr
        self.n_way = args.n_way
        self.k_spt = args.k_spt
        self.k_qry = args.k_qry
        self.task_num = args.task_num
        self.update_step = args.update_step
        self.update_step_test = args.update_step_test

        self.net = Learner(config, args.imgc, args.imgsz)
        self.meta_optim = optim.Adam(self.net.parameters(), lr=self.meta_lr)
        self.bug = bug

    def forward(self, x_spt, y_spt, x_qry, y_qry):
        """

        :param x_spt:   [b, setsz, c_, h, w]
        :param y_spt:   [b, setsz]
        :param x_qry:   [b, querysz, c_, h, w]
        :param y_qry:   [b, querysz]
        :return:
        """
        task_num, setsz, c_, h, w = x_spt.size()
        querysz = x_qry.size(1)

        losses_q = [0 for _ in range(self.update_step + 1)]  # losses_q[i] is the loss on step i
        corrects = [0 for _ in range(self.update_step + 1)]


        for i in range(task_num):

            # 1. run the i-th task and compute loss for k=0
            logits = self.net(x_spt[i], vars=None, bn_training=True)
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters())
            fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, self.net.parameters())))

            # this is the loss and accuracy before first update
            with torch.no_grad():
                # [setsz, nway]
                logits_q = self.net(x_qry[i], self.net.parameters(), bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[0] += loss_q

                pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                correct = torch.eq(pred_q, y_qry[i]).sum().item()
                corrects[0] = corrects[0] + correct

            # this is the loss and accuracy after the first update
            with torch.no_grad():
                # [setsz, nway]
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[1] += loss_q
                # [setsz]
                pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                correct = torch.eq(pred_q, y_qry[i]).sum().item()
                corrects[1] = corrects[1] + correct

            for k in range(1, self.update_step):
                # 1. run the i-th task and compute loss for k=1~K-1
                logits = self.net(x_spt[i], fast_weights, bn_training=True)
                loss = F.cross_entropy(logits, y_spt[i])
                # 2. compute grad on theta_pi
                grad = torch.autograd.grad(loss, fast_weights)
                # 3. theta_pi = theta_pi - train_lr * grad
                fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, fast_weights)))

                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                # loss_q will be overwritten and just keep the loss_q on last update step.
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[k + 1] += loss_q

                with torch.no_grad():
                    pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                    correct = torch.eq(pred_q, y_qry[i]).sum().item()  # convert to numpy
                    corrects[k + 1] = corrects[k + 1] + correct



        # end of all tasks
        # sum over all losses on query set across all tasks
        loss_q = losses_q[-1] / task_num

        # optimize theta parameters
        self.meta_optim.zero_grad()
        loss_q.backward()
        if self.bug == "meta_zero_grad_after_backward":
            self.meta_optim.zero_grad()
        # print('meta update')
        # for p in self.net.parameters()[:5]:
        # 	print(torch.norm(p).item())
        self.meta_optim.step()


        accs = np.array(corrects) / (querysz * task_num)

        return accs, loss_q


class OmniglotNShot:

    def __init__(self, x, batchsz, n_way, k_shot, k_query, imgsz, rng, bug=None):
        """
        Different from mnistNShot, the
        :param x: (port) the synthetic [n_cls, 20, 1, 28, 28] array in place of the downloaded omniglot.npy
        """

        self.resize = imgsz
        self.x = x
        self.random = rng
        self.bug = bug

        # [1623, 20, 84, 84, 1]
        # TODO: can not shuffle here, we must keep training and test set distinct!
        self.x_train, self.x_test = self.x[:N_TRAIN], self.x[N_TRAIN:]

        # self.normalization()

        self.batchsz = batchsz
        self.n_cls = self.x.shape[0]  # 1623
        self.n_way = n_way  # n way
        self.k_shot = k_shot  # k shot
        self.k_query = k_query  # k query
        assert (k_shot + k_query) <=20

        # save pointer of current read batch in total cache
        self.indexes = {"train": 0, "test": 0}
        self.datasets = {"train": self.x_train, "test": self.x_test}  # original data cached

        self.datasets_cache = {"train": self.load_data_cache(self.datasets["train"]),  # current epoch data cached
                               "test": self.load_data_cache(self.datasets["test"])}

    def load_data_cache(self, data_pack):
        """
        Collects several batches data for N-shot learning
        :param data_pack: [cls_num, 20, 84, 84, 1]
        :return: A list with [support_set_x, support_set_y, target_x, target_y] ready to be fed to our networks
        """
        #  take 5 way 1 shot as example: 5 * 1
        setsz = self.k_shot * self.n_way
        querysz = self.k_query * self.n_way
        data_cache = []

        # print('preload next 50 caches of batchsz of batch.')
        for sample in range(10):  # num of episodes

            x_spts, y_spts, x_qrys, y_qrys = [], [], [], []
            for i in range(self.batchsz):  # one batch means one set

                x_spt, y_spt, x_qry, y_qry = [], [], [], []
                selected_cls = self.random.choice(data_pack.shape[0], self.n_way, False)

                for j, cur_class in enumerate(selected_cls):

                    selected_img = self.random.choice(20, self.k_shot + self.k_query, False)

                    # meta-training and meta-test
                    x_spt.append(data_pack[cur_class][selected_img[:self.k_shot]])
                    x_qry.append(data_pack[cur_class][selected_img[self.k_shot:]])
                    y_spt.append([j for _ in range(self.k_shot)])
                    y_qry.append([j for _ in range(self.k_query)])

                # shuffle inside a batch
                perm = self.random.permutation(self.n_way * self.k_shot)
                x_spt = np.array(x_spt).reshape(self.n_way * self.k_shot, 1, self.resize, self.resize)[perm]
                y_spt = np.array(y_spt).reshape(self.n_way * self.k_shot)[perm]
                perm = self.random.permutation(self.n_way * self.k_query)
                x_qry = np.array(x_qry).reshape(self.n_way * self.k_query, 1, self.resize, self.resize)[perm]
                if self.bug == "query_labels_not_permuted":
                    y_qry = np.array(y_qry).reshape(self.n_way * self.k_query)
                else:
                    y_qry = np.array(y_qry).reshape(self.n_way * self.k_query)[perm]

                # append [sptsz, 1, 84, 84] => [b, setsz, 1, 84, 84]
                x_spts.append(x_spt)
                y_spts.append(y_spt)
                x_qrys.append(x_qry)
                y_qrys.append(y_qry)


            # [b, setsz, 1, 84, 84]
            x_spts = np.array(x_spts).astype(np.float32).reshape(self.batchsz, setsz, 1, self.resize, self.resize)
            y_spts = np.array(y_spts).astype(np.int64).reshape(self.batchsz, setsz)
            # [b, qrysz, 1, 84, 84]
            x_qrys = np.array(x_qrys).astype(np.float32).reshape(self.batchsz, querysz, 1, self.resize, self.resize)
            y_qrys = np.array(y_qrys).astype(np.int64).reshape(self.batchsz, querysz)

            data_cache.append([x_spts, y_spts, x_qrys, y_qrys])

        return data_cache

    def next(self, mode='train'):
        """
        Gets next batch from the dataset with name.
        :param mode: The name of the splitting (one of "train", "val", "test")
        :return:
        """
        # update cache if indexes is larger cached num
        if self.indexes[mode] >= len(self.datasets_cache[mode]):
            self.indexes[mode] = 0
            self.datasets_cache[mode] = self.load_data_cache(self.datasets[mode])

        next_batch = self.datasets_cache[mode][self.indexes[mode]]
        self.indexes[mode] += 1

        return next_batch


def synthetic_omniglot(rng, imgsz=28):
    """(port) N_CLS characters x 20 drawings: a random binary stroke pattern per character, 12% of pixels flipped."""
    protos = (rng.uniform(size=(N_CLS, 1, 1, imgsz, imgsz)) < 0.25).astype(np.float64)
    flips = rng.uniform(size=(N_CLS, 20, 1, imgsz, imgsz)) < 0.12
    return np.abs(protos - flips)


def _build(seed, bug=None):
    args = argparse.Namespace(epoch=40000, n_way=5, k_spt=1, k_qry=5, imgsz=28, imgc=1, task_num=2, meta_lr=1e-3,
                              update_lr=0.4, update_step=5, update_step_test=10)
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)

    config = [
        ('conv2d', [CH, 1, 3, 3, 2, 0]),
        ('relu', [True]),
        ('bn', [CH]),
        ('conv2d', [CH, CH, 3, 3, 2, 0]),
        ('relu', [True]),
        ('bn', [CH]),
        ('conv2d', [CH, CH, 3, 3, 2, 0]),
        ('relu', [True]),
        ('bn', [CH]),
        ('conv2d', [CH, CH, 2, 2, 1, 0]),
        ('relu', [True]),
        ('bn', [CH]),
        ('flatten', []),
        ('linear', [args.n_way, CH])
    ]

    maml = Meta(args, config, bug=bug)

    db_train = OmniglotNShot(synthetic_omniglot(rng), batchsz=args.task_num, n_way=args.n_way, k_shot=args.k_spt,
                             k_query=args.k_qry, imgsz=args.imgsz, rng=rng, bug=bug)

    # (port) the Program's batch: the first task's query set of the first episode, as the loop reads it
    x_spt, y_spt, x_qry, y_qry = db_train.datasets_cache["train"][0]
    batch = (torch.from_numpy(x_qry[0]), torch.from_numpy(y_qry[0]))

    def train_step():
        x_spt, y_spt, x_qry, y_qry = db_train.next()
        x_spt, y_spt, x_qry, y_qry = torch.from_numpy(x_spt), torch.from_numpy(y_spt), \
                                     torch.from_numpy(x_qry), torch.from_numpy(y_qry)

        # set traning=True to update running_mean, running_variance, bn_weights, bn_bias
        accs, loss_q = maml(x_spt, y_spt, x_qry, y_qry)
        return loss_q

    return Program(name="mamlpytorch_omniglot", model=maml.net, batch=batch, loss_fn=F.cross_entropy,
                   optimizer=maml.meta_optim, train_step=train_step, frozen=("vars_bn.*",))


build = functools.partial(_build, bug=None)

BUGS = [
    # the shuffle inside a task permutes the query images but not their labels (classic): every query label is
    # attached to another drawing, so the meta-objective asks the adapted learner to predict noise.
    Bug("query_labels_not_permuted", functools.partial(_build, bug="query_labels_not_permuted"), "learning_ledger",
        ("TASK",)),
    # a second ``meta_optim.zero_grad()`` between the meta-loss's backward and the step (classic): the meta-gradient
    # is discarded and Adam steps on zeros. Every parameter alike: declared by its mechanism (README rule 6).
    # first contact declared kind step.gradient_discarded; a zero_grad between the backward and the step is
    # step.zero_grad_before_step (reviewed after first contact: the finding names this bug's mechanism)
    Bug("meta_zero_grad_after_backward", functools.partial(_build, bug="meta_zero_grad_after_backward"),
        "step_probe", (), kind="step.zero_grad_before_step"),
]
