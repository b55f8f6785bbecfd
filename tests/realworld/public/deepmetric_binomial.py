"""Deep metric learning of bnu-wangxun/Deep_Metric: a BN-Inception backbone (BatchNorm frozen in eval mode by
``set_bn_eval``), global max pooling and an L2-normalized linear ``Embedding`` head trained with the repository's
``BinomialLoss`` (binomial deviance on the cosine-similarity matrix: ``log(1 + exp(-2 (s_pos - margin)))`` for
every positive pair and ``log(1 + exp(alpha (s_neg - margin)))`` for every negative pair of each anchor, averaged
over anchors), Adam with weight decay over two parameter groups (backbone / new ``classifier`` with the
repository's ``lr_mult`` keys, which Adam ignores), batches of ``num_instances`` images per class drawn by
``FastRandomIdentitySampler``, evaluated by Recall@K on the cosine similarity (``evaluations/recall_at_k.py``).

Source: https://github.com/bnu-wangxun/Deep_Metric
Commit: 04ca51093db13135a04e3c94401bc898c6af0c40
Files: train.py (main, set_bn_eval, the parameter groups), trainer.py (train), models/BN_Inception.py
       (Embedding, BNInception), losses/Binomial.py (BinomialLoss), utils/sampler.py (FastRandomIdentitySampler),
       DataSet/CUB200.py (MyData's class Index), evaluations/recall_at_k.py, run_train_00.sh
License: Apache-2.0 (LICENSES/bnu-wangxun-Deep_Metric.txt)
Domain: metric learning

Deviations from the original:
- sizes: BN-Inception is cut after its first inception block: the stem (conv1 7x7/2, pool, conv2 reduce, conv2
  3x3, pool) and ``inception_3a`` are copied line by line with the original widths (the 256 channels of 3a's
  output feed the head), blocks 3b..5b are left out for 2 CPU cores; images 3x24x24 instead of 227x227; embedding
  dim 512 -> 64; batch 80 -> 40 (8 classes x ``num_instances`` 5, the script's 5); ``Embedding``'s in_dim follows
  (1024 -> 256);
- no ImageNet weights (``pretrained=True`` loads a local file): the backbone is randomly initialized by the
  model's own "official init"; lr 1e-5 -> 1e-3 (the script's 1e-5 fine-tunes a pretrained net; from scratch it
  does not move the loss in 30 steps), weight decay 5e-4, Adam unchanged;
- the loss is ``BinomialLoss`` (``--loss Binomial``, alpha 40, margin 0.5: the script names ``Weight``, whose
  module is commented out of ``losses/__init__.py``);
- data: CUB-200 is replaced by synthetic classes made from ``seed`` (each class a random smooth 3x24x24 prototype,
  each image the prototype with a random shift in brightness and pixel noise); ``FastRandomIdentitySampler`` is
  copied and uses numpy's global generator as written (seeded here); no transforms, DataParallel, GPU, logging or
  checkpoints;
- one ``train_step`` is one batch of ``trainer.train``; ``eval_fn`` is Recall@1 on one batch of held-out images
  of the same classes (``Recall_at_ks``' rule written for k=1 on the cosine similarity, the query itself left out).
"""
# ruff: noqa: C408, F841, PLR0402, PLW0127, RUF059, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- models/BN_Inception.py ----------------------------------------------------------------------------------

class Embedding(nn.Module):
    def __init__(self, in_dim, out_dim, dropout=None, normalized=True):
        super(Embedding, self).__init__()
        self.bn = nn.BatchNorm2d(in_dim, eps=1e-5)
        self.linear = nn.Linear(in_features=in_dim, out_features=out_dim)
        self.dropout = dropout
        self.normalized = normalized

    def forward(self, x):
        # x = self.bn(x)
        # x = F.relu(x, inplace=True)
        if self.dropout is not None:
            x = nn.Dropout(p=self.dropout)(x, inplace=True)
        x = self.linear(x)
        if self.normalized:
            norm = x.norm(dim=1, p=2, keepdim=True)
            x = x.div(norm.expand_as(x))
        return x

class BNInception(nn.Module):
    def __init__(self, dim=512):
        super(BNInception, self).__init__()
        self.dim = dim

        inplace = True
        self.conv1_7x7_s2 = nn.Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3))
        self.conv1_7x7_s2_bn = nn.BatchNorm2d(64, eps=1e-05, momentum=0.9, affine=True)
        self.conv1_relu_7x7 = nn.ReLU (inplace)
        self.pool1_3x3_s2 = nn.MaxPool2d ((3, 3), stride=(2, 2), dilation=(1, 1), ceil_mode=True)
        self.conv2_3x3_reduce = nn.Conv2d(64, 64, kernel_size=(1, 1), stride=(1, 1))
        self.conv2_3x3_reduce_bn = nn.BatchNorm2d(64, eps=1e-05, momentum=0.9, affine=True)
        self.conv2_relu_3x3_reduce = nn.ReLU (inplace)
        self.conv2_3x3 = nn.Conv2d(64, 192, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
        self.conv2_3x3_bn = nn.BatchNorm2d(192, eps=1e-05, momentum=0.9, affine=True)
        self.conv2_relu_3x3 = nn.ReLU (inplace)
        self.pool2_3x3_s2 = nn.MaxPool2d ((3, 3), stride=(2, 2), dilation=(1, 1), ceil_mode=True)
        self.inception_3a_1x1 = nn.Conv2d(192, 64, kernel_size=(1, 1), stride=(1, 1))
        self.inception_3a_1x1_bn = nn.BatchNorm2d(64, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_1x1 = nn.ReLU (inplace)
        self.inception_3a_3x3_reduce = nn.Conv2d(192, 64, kernel_size=(1, 1), stride=(1, 1))
        self.inception_3a_3x3_reduce_bn = nn.BatchNorm2d(64, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_3x3_reduce = nn.ReLU (inplace)
        self.inception_3a_3x3 = nn.Conv2d(64, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
        self.inception_3a_3x3_bn = nn.BatchNorm2d(64, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_3x3 = nn.ReLU (inplace)
        self.inception_3a_double_3x3_reduce = nn.Conv2d(192, 64, kernel_size=(1, 1), stride=(1, 1))
        self.inception_3a_double_3x3_reduce_bn = nn.BatchNorm2d(64, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_double_3x3_reduce = nn.ReLU (inplace)
        self.inception_3a_double_3x3_1 = nn.Conv2d(64, 96, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
        self.inception_3a_double_3x3_1_bn = nn.BatchNorm2d(96, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_double_3x3_1 = nn.ReLU (inplace)
        self.inception_3a_double_3x3_2 = nn.Conv2d(96, 96, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
        self.inception_3a_double_3x3_2_bn = nn.BatchNorm2d(96, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_double_3x3_2 = nn.ReLU (inplace)
        self.inception_3a_pool = nn.AvgPool2d (3, stride=1, padding=1, ceil_mode=True, count_include_pad=True)
        self.inception_3a_pool_proj = nn.Conv2d(192, 32, kernel_size=(1, 1), stride=(1, 1))
        self.inception_3a_pool_proj_bn = nn.BatchNorm2d(32, eps=1e-05, momentum=0.9, affine=True)
        self.inception_3a_relu_pool_proj = nn.ReLU (inplace)
        if self.dim == 0:
            pass
        else:
            self.classifier = Embedding(256, self.dim, normalized=True)

        # Official init from torch repo.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def features(self, input):
        conv1_7x7_s2_out = self.conv1_7x7_s2(input)
        conv1_7x7_s2_bn_out = self.conv1_7x7_s2_bn(conv1_7x7_s2_out)
        conv1_relu_7x7_out = self.conv1_relu_7x7(conv1_7x7_s2_bn_out)
        pool1_3x3_s2_out = self.pool1_3x3_s2(conv1_7x7_s2_bn_out)
        conv2_3x3_reduce_out = self.conv2_3x3_reduce(pool1_3x3_s2_out)
        conv2_3x3_reduce_bn_out = self.conv2_3x3_reduce_bn(conv2_3x3_reduce_out)
        conv2_relu_3x3_reduce_out = self.conv2_relu_3x3_reduce(conv2_3x3_reduce_bn_out)
        conv2_3x3_out = self.conv2_3x3(conv2_3x3_reduce_bn_out)
        conv2_3x3_bn_out = self.conv2_3x3_bn(conv2_3x3_out)
        conv2_relu_3x3_out = self.conv2_relu_3x3(conv2_3x3_bn_out)
        pool2_3x3_s2_out = self.pool2_3x3_s2(conv2_3x3_bn_out)
        inception_3a_1x1_out = self.inception_3a_1x1(pool2_3x3_s2_out)
        inception_3a_1x1_bn_out = self.inception_3a_1x1_bn(inception_3a_1x1_out)
        inception_3a_relu_1x1_out = self.inception_3a_relu_1x1(inception_3a_1x1_bn_out)
        inception_3a_3x3_reduce_out = self.inception_3a_3x3_reduce(pool2_3x3_s2_out)
        inception_3a_3x3_reduce_bn_out = self.inception_3a_3x3_reduce_bn(inception_3a_3x3_reduce_out)
        inception_3a_relu_3x3_reduce_out = self.inception_3a_relu_3x3_reduce(inception_3a_3x3_reduce_bn_out)
        inception_3a_3x3_out = self.inception_3a_3x3(inception_3a_3x3_reduce_bn_out)
        inception_3a_3x3_bn_out = self.inception_3a_3x3_bn(inception_3a_3x3_out)
        inception_3a_relu_3x3_out = self.inception_3a_relu_3x3(inception_3a_3x3_bn_out)
        inception_3a_double_3x3_reduce_out = self.inception_3a_double_3x3_reduce(pool2_3x3_s2_out)
        inception_3a_double_3x3_reduce_bn_out = self.inception_3a_double_3x3_reduce_bn(inception_3a_double_3x3_reduce_out)
        inception_3a_relu_double_3x3_reduce_out = self.inception_3a_relu_double_3x3_reduce(inception_3a_double_3x3_reduce_bn_out)
        inception_3a_double_3x3_1_out = self.inception_3a_double_3x3_1(inception_3a_double_3x3_reduce_bn_out)
        inception_3a_double_3x3_1_bn_out = self.inception_3a_double_3x3_1_bn(inception_3a_double_3x3_1_out)
        inception_3a_relu_double_3x3_1_out = self.inception_3a_relu_double_3x3_1(inception_3a_double_3x3_1_bn_out)
        inception_3a_double_3x3_2_out = self.inception_3a_double_3x3_2(inception_3a_double_3x3_1_bn_out)
        inception_3a_double_3x3_2_bn_out = self.inception_3a_double_3x3_2_bn(inception_3a_double_3x3_2_out)
        inception_3a_relu_double_3x3_2_out = self.inception_3a_relu_double_3x3_2(inception_3a_double_3x3_2_bn_out)
        inception_3a_pool_out = self.inception_3a_pool(pool2_3x3_s2_out)
        inception_3a_pool_proj_out = self.inception_3a_pool_proj(inception_3a_pool_out)
        inception_3a_pool_proj_bn_out = self.inception_3a_pool_proj_bn(inception_3a_pool_proj_out)
        inception_3a_relu_pool_proj_out = self.inception_3a_relu_pool_proj(inception_3a_pool_proj_bn_out)
        inception_3a_output_out = torch.cat([inception_3a_1x1_bn_out,inception_3a_3x3_bn_out,inception_3a_double_3x3_2_bn_out,inception_3a_pool_proj_bn_out], 1)
        return inception_3a_output_out

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_max_pool2d(x, output_size=1)
        x = x.view(x.size(0), -1)
        if self.dim == 0:
            return x
        x = self.classifier(x)
        return x


# ---- losses/Binomial.py --------------------------------------------------------------------------------------

class BinomialLoss(nn.Module):
    def __init__(self, alpha=40, beta=0, margin=0.5, hard_mining=None, bug=None, **kwargs):
        super(BinomialLoss, self).__init__()
        self.margin = margin
        self.alpha = alpha
        self.beta = beta
        self.hard_mining = hard_mining
        self.bug = bug

    def forward(self, inputs, targets):
        n = inputs.size(0)
        sim_mat = torch.matmul(inputs, inputs.t())
        targets = targets

        base = 0.5
        loss = list()
        c = 0

        for i in range(n):
            pos_pair_ = torch.masked_select(sim_mat[i], targets==targets[i])

            #  move itself
            pos_pair_ = torch.masked_select(pos_pair_, pos_pair_ < 1)
            neg_pair_ = torch.masked_select(sim_mat[i], targets!=targets[i])

            pos_pair_ = torch.sort(pos_pair_)[0]
            neg_pair_ = torch.sort(neg_pair_)[0]

            pos_pair = pos_pair_
            neg_pair = neg_pair_

            pos_loss = torch.mean(torch.log(1 + torch.exp(-2*(pos_pair - self.margin))))
            if self.bug == "negative_sign_flipped":
                # the negative term's sign flipped: negatives are pulled towards the anchor like positives
                neg_loss = torch.mean(torch.log(1 + torch.exp(-self.alpha*(neg_pair - self.margin))))
            else:
                neg_loss = torch.mean(torch.log(1 + torch.exp(self.alpha*(neg_pair - self.margin))))

            if len(neg_pair) == 0:
                c += 1
                continue

            loss.append(pos_loss + neg_loss)

        loss = sum(loss)/n
        prec = float(c)/n
        mean_neg_sim = torch.mean(neg_pair_).item()
        mean_pos_sim = torch.mean(pos_pair_).item()
        return loss, prec, mean_pos_sim, mean_neg_sim


# ---- utils/sampler.py ----------------------------------------------------------------------------------------

class FastRandomIdentitySampler(Sampler):
    def __init__(self, data_source, num_instances=1):
        self.data_source = data_source
        self.num_instances = num_instances
        self.index_dic = defaultdict(list)

        # for index, (_, pid) in enumerate(data_source):
        #     self.index_dic[pid].append(index)

        self.index_dic = data_source.Index

        self.pids = list(self.index_dic.keys())
        self.num_samples = len(self.pids)

    def __len__(self):
        return self.num_samples * self.num_instances

    def __iter__(self):
        indices = torch.randperm(self.num_samples)
        ret = []
        for i in indices:
            pid = self.pids[i]
            t = self.index_dic[pid]
            if len(t) >= self.num_instances:
                t = np.random.choice(t, size=self.num_instances, replace=False)
            else:
                t = np.random.choice(t, size=self.num_instances, replace=True)
            ret.extend(t)
        # print('Done data sampling')
        return iter(ret)


# ---- DataSet/CUB200.py (MyData on synthetic classes) ---------------------------------------------------------

def make_images(seed, num_classes=8, per_class=40, draw=0):
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(num_classes, 3, 8, 8, generator=g)
    protos = F.interpolate(coarse, size=(24, 24), mode="bilinear", align_corners=False)
    g.manual_seed(seed * 1000 + 1 + draw)
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    images = (protos[labels] + 0.5 * torch.randn(len(labels), 1, 1, 1, generator=g)
              + 1.5 * torch.randn(len(labels), 3, 24, 24, generator=g))
    return images, labels


class MyData(Dataset):
    def __init__(self, images, labels):
        self.images = images
        self.labels = labels
        # Generate Index Dictionary for every class
        Index = defaultdict(list)
        for i, label in enumerate(labels.tolist()):
            Index[label].append(i)
        self.Index = Index

    def __getitem__(self, index):
        return self.images[index], self.labels[index]

    def __len__(self):
        return len(self.labels)


# ---- train.py / trainer.py -----------------------------------------------------------------------------------

# Batch Norm Freezer : bring 2% improvement on CUB
def set_bn_eval(m):
    classname = m.__class__.__name__
    if classname.find('BatchNorm') != -1:
        m.eval()


def recall_at_1(model, batch):
    inputs, labels = batch
    was_training = model.training
    model.eval()
    with torch.no_grad():
        feats = model(inputs)
    model.train(was_training)
    if was_training:
        model.apply(set_bn_eval)
    sim_mat = feats @ feats.t()
    sim_mat.fill_diagonal_(-float("inf"))
    return float((labels[sim_mat.argmax(1)] == labels).float().mean())


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = dict(lr=1e-3, batch_size=40, num_instances=5, dim=64, alpha=40, margin=0.5, loss_base=0.75,
                weight_decay=5e-4, freeze_BN=True, orth_reg=0)
    model = BNInception(dim=args["dim"])

    # freeze BN
    if args["freeze_BN"] is True:
        model.apply(set_bn_eval)

    # Fine-tune the model: the learning rate for pre-trained parameter is 1/10
    new_param_ids = set(map(id, model.classifier.parameters()))

    new_params = [p for p in model.parameters() if
                  id(p) in new_param_ids]

    base_params = [p for p in model.parameters() if
                   id(p) not in new_param_ids]

    param_groups = [
                {'params': base_params, 'lr_mult': 0.0},
                {'params': new_params, 'lr_mult': 1.0}]
    if bug == "classifier_left_out_of_optimizer":
        # the new head's group dropped when the groups were edited: only the backbone is updated
        param_groups = param_groups[:1]

    optimizer = torch.optim.Adam(param_groups, lr=args["lr"],
                                 weight_decay=args["weight_decay"])

    criterion = BinomialLoss(margin=args["margin"], alpha=args["alpha"], base=args["loss_base"],
                             bug=bug)

    images, labels = make_images(seed, per_class=40)
    test_images, test_labels = make_images(seed, per_class=5, draw=1)
    train_set = MyData(images, labels)
    train_loader = DataLoader(
        train_set, batch_size=args["batch_size"],
        sampler=FastRandomIdentitySampler(train_set, num_instances=args["num_instances"]),
        drop_last=True, num_workers=0)

    state = {"it": iter(train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        inputs, labels = next_batch()
        if bug == "labels_rolled":
            labels = labels.roll(1)

        optimizer.zero_grad()

        embed_feat = model(inputs)

        loss, inter_, dist_ap, dist_an = criterion(embed_feat, labels)

        loss.backward()
        optimizer.step()
        return loss.detach()

    first_inputs, first_labels = next(iter(DataLoader(
        train_set, batch_size=args["batch_size"],
        sampler=FastRandomIdentitySampler(train_set, num_instances=args["num_instances"]))))
    eval_batch = (test_images, test_labels)
    return Program(name="deepmetric_binomial", model=model, batch=(first_inputs, first_labels),
                   loss_fn=lambda embed_feat, labels: criterion(embed_feat, labels)[0],
                   optimizer=optimizer, train_step=train_step,
                   eval_fn=lambda m, _batch: recall_at_1(m, eval_batch), loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the negative term's sign flipped (exp(-alpha (s_neg - margin))): the loss asks negatives to be as similar
    # as positives, so the objective no longer separates classes.
    Bug("negative_sign_flipped", functools.partial(_build, bug="negative_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the labels shifted by one position against the images (a collate that pairs each image with its
    # neighbour's label): the identity groups the loss sees are not the images' classes.
    Bug("labels_rolled", functools.partial(_build, bug="labels_rolled"), "learning_ledger", ("TASK",)),
    # the classifier's parameter group dropped from Adam: the new embedding head stays at its random init.
    Bug("classifier_left_out_of_optimizer", functools.partial(_build, bug="classifier_left_out_of_optimizer"),
        "four_structures", ("classifier",)),
]
