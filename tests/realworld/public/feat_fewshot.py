"""FEAT (Few-shot Embedding Adaptation with Transformer, Ye et al. CVPR 2020) from Sha-Lab's FEAT: a ConvNet-4
embeds a 5-way 1-shot episode, a one-head self-attention block adapts the class prototypes to the task, queries are
classified by negative squared Euclidean distance over a temperature, plus the contrastive regularizer (the
attention applied to each class's support + query embeddings, every instance classified against the adapted class
centres, weighted by ``balance``); Adam with the attention at ``lr * lr_mul``, StepLR per epoch.

Source: https://github.com/Sha-Lab/FEAT
Commit: 47bdc7c1672e00b027c67469d0291e7502918950
Files: ``train_fsl.py``, ``model/trainer/fsl_trainer.py``, ``model/trainer/helpers.py``, ``model/models/base.py``,
``model/models/feat.py``, ``model/networks/convnet.py``, ``model/dataloader/samplers.py``, ``model/utils.py``,
README (the 1-shot ConvNet command line)
License: MIT (Copyright (c) 2020 Sha-Lab; full text in LICENSES/Sha-Lab-FEAT.txt)
Domain: few-shot / meta-learning (episodic training, prototype adaptation by self-attention, metric classifier)

Kept as written: ``FewShotModel`` (``split_instances`` for training and evaluation, ``forward``), ``FEAT``
(``ScaledDotProductAttention``, ``MultiHeadAttention`` with its initializations, the prototype adaptation, the
Euclidean logits, the auxiliary task and ``logits_reg``), ``ConvNet`` (four conv-BN-ReLU-max-pool blocks),
``CategoriesSampler``, ``prepare_label``, ``prepare_optimizer`` (the encoder at ``lr``, the other parameters at
``lr * lr_mul``, ``StepLR``), ``count_acc``, ``Averager``, ``compute_confidence_interval``, the README's 1-shot
ConvNet configuration (``--model_class FEAT --use_euclidean --way 5 --shot 1 --balance 1 --temperature 64
--temperature2 16 --lr_mul 10 --lr_scheduler step --step_size 20 --gamma 0.5``), ``FSLTrainer.train``'s loop body
(forward, the two cross-entropies, zero_grad, backward, step; ``lr_scheduler.step()`` at the end of an epoch) and
``evaluate`` (eval mode, the validation episodes' loss and accuracy, back to train mode).

Deviations from the original:
- MiniImageNet (84x84 images read from ``data/miniimagenet``) is not here: the dataset is synthetic 32x32 RGB
  images made from ``seed`` (each class a smooth random colour template, each image the template shifted by up to
  two pixels plus pixel noise), 24 training classes and 8 validation classes of 20 images each; ``ToTensor`` and
  the normalization are the identity on these tensors; the DataLoader has no workers.
- sizes for 2 CPU cores: the images 84 -> 32, so ``ConvNet``'s final ``nn.MaxPool2d(5)`` over the 5x5 map becomes
  ``nn.MaxPool2d(2)`` over the 2x2 map (the embedding stays 64-d); ``query`` and ``eval_query`` 15 -> 5,
  ``episodes_per_epoch`` 100 -> 10, ``num_eval_episodes`` 600 -> 10.
- no ``--init_weights`` (the pre-trained ConvNet checkpoint is not here): the encoder starts from its random init;
  ``lr`` 1e-4 -> 1e-3 so that the 30 steps of the self-check show the loss falling (the original runs 200 epochs
  from the pre-trained encoder).
- CUDA, ``DataParallel``, the timers, the logger, ``try_evaluate``'s checkpoints and ``evaluate_test`` are dropped;
  ``train_step`` is one episode of ``train``'s loop and returns ``total_loss``; ``eval_fn`` is ``evaluate`` on the
  validation loader (its mean loss).
- the Program's ``batch`` is one training episode ``(data, label)``; ``loss_fn`` is the loop's ``total_loss`` given
  ``(logits, reg_logits)``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, F841, RUF059

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

IMG = 32  # (port) 84


# model/utils.py
class Averager:

    def __init__(self):
        self.n = 0
        self.v = 0

    def add(self, x):
        self.v = (self.v * self.n + x) / (self.n + 1)
        self.n += 1

    def item(self):
        return self.v


def count_acc(logits, label):
    pred = torch.argmax(logits, dim=1)
    return (pred == label).type(torch.FloatTensor).mean().item()


def compute_confidence_interval(data):
    """
    Compute 95% confidence interval
    :param data: An array of mean accuracy (or mAP) across a number of sampled episodes.
    :return: the 95% confidence interval for this data.
    """
    a = 1.0 * np.array(data)
    m = np.mean(a)
    std = np.std(a)
    pm = 1.96 * (std / np.sqrt(len(a)))
    return m, pm


# model/dataloader/samplers.py
class CategoriesSampler:

    def __init__(self, label, n_batch, n_cls, n_per):
        self.n_batch = n_batch
        self.n_cls = n_cls
        self.n_per = n_per

        label = np.array(label)
        self.m_ind = []
        for i in range(max(label) + 1):
            ind = np.argwhere(label == i).reshape(-1)
            ind = torch.from_numpy(ind)
            self.m_ind.append(ind)

    def __len__(self):
        return self.n_batch

    def __iter__(self):
        for i_batch in range(self.n_batch):
            batch = []
            classes = torch.randperm(len(self.m_ind))[:self.n_cls]
            for c in classes:
                l = self.m_ind[c]
                pos = torch.randperm(len(l))[:self.n_per]
                batch.append(l[pos])
            batch = torch.stack(batch).t().reshape(-1)
            yield batch


# model/networks/convnet.py
def conv_block(in_channels, out_channels):
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
        nn.MaxPool2d(2)
    )


class ConvNet(nn.Module):

    def __init__(self, x_dim=3, hid_dim=64, z_dim=64):
        super().__init__()
        self.encoder = nn.Sequential(
            conv_block(x_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, z_dim),
        )

    def forward(self, x):
        x = self.encoder(x)
        x = nn.MaxPool2d(2)(x)  # (port) nn.MaxPool2d(5) on the 84x84 images' 5x5 map
        x = x.view(x.size(0), -1)
        return x


# model/models/base.py
class FewShotModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        if args.backbone_class == 'ConvNet':
            self.encoder = ConvNet()
        else:
            raise ValueError('')

    def split_instances(self, data):
        args = self.args
        if self.training:
            return  (torch.Tensor(np.arange(args.way*args.shot)).long().view(1, args.shot, args.way),
                     torch.Tensor(np.arange(args.way*args.shot, args.way * (args.shot + args.query))).long().view(1, args.query, args.way))
        else:
            return  (torch.Tensor(np.arange(args.eval_way*args.eval_shot)).long().view(1, args.eval_shot, args.eval_way),
                     torch.Tensor(np.arange(args.eval_way*args.eval_shot, args.eval_way * (args.eval_shot + args.eval_query))).long().view(1, args.eval_query, args.eval_way))

    def forward(self, x, get_feature=False):
        if get_feature:
            # get feature with the provided embeddings
            return self.encoder(x)
        else:
            # feature extraction
            x = x.squeeze(0)
            instance_embs = self.encoder(x)
            num_inst = instance_embs.shape[0]
            # split support query set for few-shot data
            support_idx, query_idx = self.split_instances(x)
            if self.training:
                logits, logits_reg = self._forward(instance_embs, support_idx, query_idx)
                return logits, logits_reg
            else:
                logits = self._forward(instance_embs, support_idx, query_idx)
                return logits

    def _forward(self, x, support_idx, query_idx):
        raise NotImplementedError('Suppose to be implemented by subclass')


# model/models/feat.py
class ScaledDotProductAttention(nn.Module):
    ''' Scaled Dot-Product Attention '''

    def __init__(self, temperature, attn_dropout=0.1):
        super().__init__()
        self.temperature = temperature
        self.dropout = nn.Dropout(attn_dropout)
        self.softmax = nn.Softmax(dim=2)

    def forward(self, q, k, v):

        attn = torch.bmm(q, k.transpose(1, 2))
        attn = attn / self.temperature
        log_attn = F.log_softmax(attn, 2)
        attn = self.softmax(attn)
        attn = self.dropout(attn)
        output = torch.bmm(attn, v)
        return output, attn, log_attn


class MultiHeadAttention(nn.Module):
    ''' Multi-Head Attention module '''

    def __init__(self, n_head, d_model, d_k, d_v, dropout=0.1):
        super().__init__()
        self.n_head = n_head
        self.d_k = d_k
        self.d_v = d_v

        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=False)
        nn.init.normal_(self.w_qs.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_k)))
        nn.init.normal_(self.w_ks.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_k)))
        nn.init.normal_(self.w_vs.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_v)))

        self.attention = ScaledDotProductAttention(temperature=np.power(d_k, 0.5))
        self.layer_norm = nn.LayerNorm(d_model)

        self.fc = nn.Linear(n_head * d_v, d_model)
        nn.init.xavier_normal_(self.fc.weight)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v):
        d_k, d_v, n_head = self.d_k, self.d_v, self.n_head
        sz_b, len_q, _ = q.size()
        sz_b, len_k, _ = k.size()
        sz_b, len_v, _ = v.size()

        residual = q
        q = self.w_qs(q).view(sz_b, len_q, n_head, d_k)
        k = self.w_ks(k).view(sz_b, len_k, n_head, d_k)
        v = self.w_vs(v).view(sz_b, len_v, n_head, d_v)

        q = q.permute(2, 0, 1, 3).contiguous().view(-1, len_q, d_k) # (n*b) x lq x dk
        k = k.permute(2, 0, 1, 3).contiguous().view(-1, len_k, d_k) # (n*b) x lk x dk
        v = v.permute(2, 0, 1, 3).contiguous().view(-1, len_v, d_v) # (n*b) x lv x dv

        output, attn, log_attn = self.attention(q, k, v)

        output = output.view(n_head, sz_b, len_q, d_v)
        output = output.permute(1, 2, 0, 3).contiguous().view(sz_b, len_q, -1) # b x lq x (n*dv)

        output = self.dropout(self.fc(output))
        output = self.layer_norm(output + residual)

        return output


class FEAT(FewShotModel):
    def __init__(self, args):
        super().__init__(args)
        if args.backbone_class == 'ConvNet':
            hdim = 64
        else:
            raise ValueError('')

        self.slf_attn = MultiHeadAttention(1, hdim, hdim, hdim, dropout=0.5)

    def _forward(self, instance_embs, support_idx, query_idx):
        emb_dim = instance_embs.size(-1)

        # organize support/query data
        support = instance_embs[support_idx.contiguous().view(-1)].contiguous().view(*(support_idx.shape + (-1,)))
        query   = instance_embs[query_idx.contiguous().view(-1)].contiguous().view(  *(query_idx.shape   + (-1,)))

        # get mean of the support
        proto = support.mean(dim=1) # Ntask x NK x d
        num_batch = proto.shape[0]
        num_proto = proto.shape[1]
        num_query = np.prod(query_idx.shape[-2:])

        # query: (num_batch, num_query, num_proto, num_emb)
        # proto: (num_batch, num_proto, num_emb)
        proto = self.slf_attn(proto, proto, proto)
        if self.args.use_euclidean:
            query = query.view(-1, emb_dim).unsqueeze(1) # (Nbatch*Nq*Nw, 1, d)
            proto = proto.unsqueeze(1).expand(num_batch, num_query, num_proto, emb_dim).contiguous()
            proto = proto.view(num_batch*num_query, num_proto, emb_dim) # (Nbatch x Nq, Nk, d)

            if self.args.bug == "distance_as_similarity":
                logits = torch.sum((proto - query) ** 2, 2) / self.args.temperature
            else:
                logits = - torch.sum((proto - query) ** 2, 2) / self.args.temperature
        else:
            proto = F.normalize(proto, dim=-1) # normalize for cosine distance
            query = query.view(num_batch, -1, emb_dim) # (Nbatch,  Nq*Nw, d)

            logits = torch.bmm(query, proto.permute([0,2,1])) / self.args.temperature
            logits = logits.view(-1, num_proto)

        # for regularization
        if self.training:
            aux_task = torch.cat([support.view(1, self.args.shot, self.args.way, emb_dim),
                                  query.view(1, self.args.query, self.args.way, emb_dim)], 1) # T x (K+Kq) x N x d
            num_query = np.prod(aux_task.shape[1:3])
            aux_task = aux_task.permute([0, 2, 1, 3])
            aux_task = aux_task.contiguous().view(-1, self.args.shot + self.args.query, emb_dim)
            # apply the transformation over the Aug Task
            aux_emb = self.slf_attn(aux_task, aux_task, aux_task) # T x N x (K+Kq) x d
            # compute class mean
            aux_emb = aux_emb.view(num_batch, self.args.way, self.args.shot + self.args.query, emb_dim)
            aux_center = torch.mean(aux_emb, 2) # T x N x d

            if self.args.use_euclidean:
                aux_task = aux_task.permute([1,0,2]).contiguous().view(-1, emb_dim).unsqueeze(1) # (Nbatch*Nq*Nw, 1, d)
                aux_center = aux_center.unsqueeze(1).expand(num_batch, num_query, num_proto, emb_dim).contiguous()
                aux_center = aux_center.view(num_batch*num_query, num_proto, emb_dim) # (Nbatch x Nq, Nk, d)

                logits_reg = - torch.sum((aux_center - aux_task) ** 2, 2) / self.args.temperature2
            else:
                aux_center = F.normalize(aux_center, dim=-1) # normalize for cosine distance
                aux_task = aux_task.permute([1,0,2]).contiguous().view(num_batch, -1, emb_dim) # (Nbatch,  Nq*Nw, d)

                logits_reg = torch.bmm(aux_task, aux_center.permute([0,2,1])) / self.args.temperature2
                logits_reg = logits_reg.view(-1, num_proto)

            return logits, logits_reg
        else:
            return logits


# model/trainer/helpers.py
def prepare_optimizer(model, args):
    top_para = [v for k,v in model.named_parameters() if 'encoder' not in k]
    # as in the literature, we use ADAM for ConvNet and SGD for other backbones
    if args.backbone_class == 'ConvNet':
        if args.bug == "encoder_not_optimized":
            optimizer = optim.Adam(
                [{'params': top_para, 'lr': args.lr * args.lr_mul}],
                lr=args.lr,
            )
        else:
            optimizer = optim.Adam(
                [{'params': model.encoder.parameters()},
                 {'params': top_para, 'lr': args.lr * args.lr_mul}],
                lr=args.lr,
                # weight_decay=args.weight_decay, do not use weight_decay here
            )
    else:
        raise ValueError('')

    if args.lr_scheduler == 'step':
        lr_scheduler = optim.lr_scheduler.StepLR(
                            optimizer,
                            step_size=int(args.step_size),
                            gamma=args.gamma
                        )
    else:
        raise ValueError('No Such Scheduler')

    return optimizer, lr_scheduler


# ------------------------------------------------------------------------------------------------ (port) data
class SyntheticFewShot(Dataset):
    """Class templates (smooth random colour fields) shifted by up to two pixels, plus pixel noise."""

    def __init__(self, templates, per_class, rng):
        data, label = [], []
        for c, tpl in enumerate(templates):
            for _ in range(per_class):
                dx, dy = rng.integers(-2, 3, size=2)
                img = np.roll(tpl, (int(dy), int(dx)), axis=(1, 2)) + 0.3 * rng.standard_normal(tpl.shape)
                data.append(torch.from_numpy(img.astype(np.float32)))
                label.append(c)
        self.data, self.label = data, label
        self.num_class = len(templates)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i], self.label[i]


def make_templates(rng, n):
    out = []
    for _ in range(n):
        coarse = rng.standard_normal((3, 4, 4))
        tpl = np.kron(coarse, np.ones((IMG // 4, IMG // 4)))
        out.append(tpl)
    return out


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = types.SimpleNamespace(
        max_epoch=200, episodes_per_epoch=10, num_eval_episodes=10,  # (port) 100, 600
        model_class='FEAT', use_euclidean=True, backbone_class='ConvNet', dataset='MiniImageNet',
        way=5, eval_way=5, shot=1, eval_shot=1, query=5, eval_query=5,  # (port) query 15, eval_query 15
        balance=1.0, temperature=64.0, temperature2=16.0, orig_imsize=-1,
        lr=0.001, lr_mul=10.0, lr_scheduler='step', step_size='20', gamma=0.5,  # (port) lr 0.0001
        fix_BN=False, augment=False, multi_gpu=False, init_weights=None,
        mom=0.9, weight_decay=0.0005, num_workers=0, log_interval=50, eval_interval=1, bug=bug)
    args.num_classes = args.way

    templates = make_templates(rng, 32)
    trainset = SyntheticFewShot(templates[:24], 20, rng)
    valset = SyntheticFewShot(templates[24:], 20, rng)
    args.num_class = trainset.num_class
    train_sampler = CategoriesSampler(trainset.label,
                                      args.episodes_per_epoch,
                                      max(args.way, args.num_classes),
                                      args.shot + args.query)
    train_loader = DataLoader(dataset=trainset, num_workers=0, batch_sampler=train_sampler)
    val_sampler = CategoriesSampler(valset.label,
                            args.num_eval_episodes,
                            args.eval_way, args.eval_shot + args.eval_query)
    val_loader = DataLoader(dataset=valset, batch_sampler=val_sampler, num_workers=0)

    model = FEAT(args)
    para_model = model
    optimizer, lr_scheduler = prepare_optimizer(model, args)

    # prepare_label
    label = torch.arange(args.way, dtype=torch.int16).repeat(args.query)
    if bug == "labels_repeat_interleaved":
        label = torch.arange(args.way, dtype=torch.int16).repeat_interleave(args.query)
    label_aux = torch.arange(args.way, dtype=torch.int8).repeat(args.shot + args.query)
    label = label.type(torch.LongTensor)
    label_aux = label_aux.type(torch.LongTensor)

    model.train()
    st = {"it": None, "train_epoch": 0, "train_step": 0}

    def total_loss_of(out, label):
        logits, reg_logits = out
        if reg_logits is not None:
            loss = F.cross_entropy(logits, label)
            total_loss = loss + args.balance * F.cross_entropy(reg_logits, label_aux)
        else:
            loss = F.cross_entropy(logits, label)
            total_loss = F.cross_entropy(logits, label)
        return total_loss

    def train_step():
        if st["it"] is None:
            st["train_epoch"] += 1
            model.train()
            st["tl1"], st["tl2"], st["ta"] = Averager(), Averager(), Averager()
            st["it"] = iter(train_loader)
        batch = next(st["it"])
        st["train_step"] += 1
        data, gt_label = batch[0], batch[1]

        # get saved centers
        logits, reg_logits = para_model(data)
        if reg_logits is not None:
            loss = F.cross_entropy(logits, label)
            total_loss = loss + args.balance * F.cross_entropy(reg_logits, label_aux)
        else:
            loss = F.cross_entropy(logits, label)
            total_loss = F.cross_entropy(logits, label)

        st["tl2"].add(loss)
        acc = count_acc(logits, label)
        st["tl1"].add(total_loss.item())
        st["ta"].add(acc)

        optimizer.zero_grad()
        total_loss.backward()
        optimizer.step()

        if st["train_step"] % args.episodes_per_epoch == 0:  # the end of the epoch's loader
            lr_scheduler.step()
            st["it"] = None
        return total_loss.item()

    def evaluate(model, _batch=None):
        model.eval()
        record = np.zeros((args.num_eval_episodes, 2)) # loss and acc
        label = torch.arange(args.eval_way, dtype=torch.int16).repeat(args.eval_query)
        label = label.type(torch.LongTensor)
        with torch.no_grad():
            for i, batch in enumerate(val_loader, 1):
                data = batch[0]
                logits = model(data)
                loss = F.cross_entropy(logits, label)
                acc = count_acc(logits, label)
                record[i-1, 0] = loss.item()
                record[i-1, 1] = acc
        assert(i == record.shape[0])
        vl, _ = compute_confidence_interval(record[:,0])
        va, vap = compute_confidence_interval(record[:,1])
        # train mode
        model.train()
        return float(vl)

    first = next(iter(DataLoader(dataset=trainset, num_workers=0, batch_sampler=CategoriesSampler(
        trainset.label, 1, args.way, args.shot + args.query))))
    return Program(name="feat_fewshot", model=model, batch=(first[0], label), loss_fn=total_loss_of,
                   optimizer=optimizer, train_step=train_step, eval_fn=evaluate)


build = functools.partial(_build, bug=None)

BUGS = [
    # the query labels built with repeat_interleave for repeat (classic): the episode's queries are ordered
    # class-fastest ([q0c0, q0c1, ...]), the labels class-slowest, so most queries are trained toward another class.
    Bug("labels_repeat_interleaved", functools.partial(_build, bug="labels_repeat_interleaved"), "learning_ledger",
        ("TASK",)),
    # the squared distance used as the logit without its minus sign (classic): the classifier rewards the query
    # for being far from its own prototype.
    Bug("distance_as_similarity", functools.partial(_build, bug="distance_as_similarity"), "learning_ledger",
        ("OBJECTIVE",)),
    # the encoder's parameter group left out of the Adam groups (classic): only the attention block trains.
    Bug("encoder_not_optimized", functools.partial(_build, bug="encoder_not_optimized"), "four_structures",
        ("encoder",)),
]
