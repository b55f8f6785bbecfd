# ruff: noqa: PLR0402, UP008
"""Few-shot episodes with MetaOptNet's training script in its default configuration (``--network ProtoNet --head
ProtoNet``): a Conv-4 embedding (conv-BN-ReLU-maxpool blocks), the prototypical-network head (class means of the
support embeddings by a one-hot ``bmm``, negative squared distances through the Gram-matrix trick divided by the
dimension) times a learnable scale, label-smoothed cross-entropy on the queries of 5-way 15-shot episodes, SGD
Nesterov (lr 0.1, momentum 0.9, weight decay 5e-4) with the per-epoch LambdaLR step schedule.

Source: https://github.com/kjunelee/MetaOptNet
Commit: 19601591da8090734e2e69113c9510831da5528a
Files: ``train.py`` (``one_hot``, ``get_model``, the optimizer, the schedule and the epoch loop),
``models/protonet_embedding.py`` (``ConvBlock``, ``ProtoNetEmbedding``), ``models/classification_heads.py``
(``computeGramMatrix``, ``one_hot``, ``ProtoNetHead``, ``ClassificationHead``), ``data/mini_imagenet.py``
(``FewShotDataloader``'s episode sampling), ``utils.py`` (``count_accuracy``)
License: Apache-2.0 (full text in LICENSES/kjunelee-MetaOptNet.txt)
Domain: metric / few-shot learning (prototypical-network head on a Conv-4 embedding, episodic training)

Kept as written: ``ConvBlock`` / ``ProtoNetEmbedding`` (x_dim 3, h_dim = z_dim = 64, the He-style conv init, BN
weight 1 bias 0), ``ProtoNetHead`` (normalize=True) and ``ClassificationHead`` (``scale`` a parameter at 1.0),
the training loop body (support and query embedded separately and reshaped per episode, the head, the smoothed
one-hot with ``--eps`` 0.0, ``log_softmax`` and the mean of the per-query sums, ``count_accuracy``, zero_grad /
backward / step), the optimizer's two parameter groups, ``lambda_epoch`` and ``lr_scheduler.step()`` at the start of
each epoch, the validation pass (``eval()`` mode, ``CrossEntropyLoss`` on 5-way 5-shot 15-query episodes), the
episode sampler (``sample_base_and_novel_categories``' training branch, ``sample_train_and_test_examples_for_
novel_categories`` with the exemplars shuffled, the test examples shuffled by ``sample_episode``).

Deviations from the original:
- miniImageNet is not here: the images are synthetic 3x16x16 pictures made from ``seed`` (64 training and 16
  validation classes, each a smooth random template; an image is its class template, shifted by up to a pixel, plus
  noise), 30 images a class; the dataset object holds ``label2ind`` and ``labelIds_base`` as the loader expects.
  With 16x16 inputs the four pools leave a 64-d embedding (1600-d at 84x84).
- sizes for 2 CPU cores: ``--episodes-per-batch`` 8 -> 2, ``--train-shot`` 15 -> 5, epochs of 1000 batches -> 20,
  ``--val-episode`` 2000 -> 4; ``--train-query`` 6, ``--train-way`` / ``--test-way`` 5, ``--val-shot`` 5,
  ``--val-query`` 15 kept. ``.cuda()``, ``set_gpu``, the logs, checkpoints and tqdm are dropped (CPU).
- the Gidaris & Komodakis loader builds on torchnet's ``ListDataset(...).parallel``: here the same sampling
  functions feed a plain generator that stacks ``episodes_per_batch`` episodes (torchnet's default collate);
  ``random`` / ``np.random`` are reseeded by ``epoch`` at each epoch's iterator as ``get_iterator`` does, offset by
  ``seed``.
- the loop over epochs is not run as a whole: ``train_step`` is one batch of it (a new epoch steps the scheduler and
  calls ``train()`` first), returning the loss. The two networks are held by one ``nn.Module`` (``embedding_net``,
  ``cls_head``) whose ``forward`` is the loop's lines from the embeddings to ``logit_query``, so the Program has one
  model; the optimizer's groups are built from the same two modules as in train.py.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class opt:  # (port) train.py's argparse options, sizes as listed in the docstring
    train_shot = 5  # (port) 15
    val_shot = 5
    train_query = 6
    val_episode = 4  # (port) 2000
    val_query = 15
    train_way = 5
    test_way = 5
    network = 'ProtoNet'
    head = 'ProtoNet'
    episodes_per_batch = 2  # (port) 8
    eps = 0.0


BATCHES_PER_EPOCH = 20  # (port) epoch_size = episodes_per_batch * 1000
IMG = 16


# train.py
def one_hot(indices, depth):
    """
    Returns a one-hot tensor.
    This is a PyTorch equivalent of Tensorflow's tf.one_hot.

    Parameters:
      indices:  a (n_batch, m) Tensor or (m) Tensor.
      depth: a scalar. Represents the depth of the one hot dimension.
    Returns: a (n_batch, m, depth) Tensor or (m, depth) Tensor.
    """

    encoded_indicies = torch.zeros(indices.size() + torch.Size([depth]))
    index = indices.view(indices.size()+torch.Size([1]))
    encoded_indicies = encoded_indicies.scatter_(1,index,1)

    return encoded_indicies


# models/protonet_embedding.py
class ConvBlock(nn.Module):
    def __init__(self, in_channels, out_channels, retain_activation=True):
        super(ConvBlock, self).__init__()

        self.block = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(out_channels)
        )

        if retain_activation:
            self.block.add_module("ReLU", nn.ReLU(inplace=True))
        self.block.add_module("MaxPool2d", nn.MaxPool2d(kernel_size=2, stride=2, padding=0))

    def forward(self, x):
        out = self.block(x)
        return out


class ProtoNetEmbedding(nn.Module):
    def __init__(self, x_dim=3, h_dim=64, z_dim=64, retain_last_activation=True):
        super(ProtoNetEmbedding, self).__init__()
        self.encoder = nn.Sequential(
          ConvBlock(x_dim, h_dim),
          ConvBlock(h_dim, h_dim),
          ConvBlock(h_dim, h_dim),
          ConvBlock(h_dim, z_dim, retain_activation=retain_last_activation),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def forward(self, x):
        x = self.encoder(x)
        return x.view(x.size(0), -1)


# models/classification_heads.py
def computeGramMatrix(A, B):
    """
    Constructs a linear kernel matrix between A and B.
    We assume that each row in A and B represents a d-dimensional feature vector.
    """

    assert(A.dim() == 3)
    assert(B.dim() == 3)
    assert(A.size(0) == B.size(0) and A.size(2) == B.size(2))

    return torch.bmm(A, B.transpose(1,2))


def ProtoNetHead(query, support, support_labels, n_way, n_shot, normalize=True):
    """
    Constructs the prototype representation of each class(=mean of support vectors of each class) and
    returns the classification score (=L2 distance to each class prototype) on the query set.
    """

    tasks_per_batch = query.size(0)
    n_support = support.size(1)
    n_query = query.size(1)  # noqa: F841
    d = query.size(2)

    assert(query.dim() == 3)
    assert(support.dim() == 3)
    assert(query.size(0) == support.size(0) and query.size(2) == support.size(2))
    assert(n_support == n_way * n_shot)      # n_support must equal to n_way * n_shot

    support_labels_one_hot = one_hot(support_labels.view(tasks_per_batch * n_support), n_way)
    support_labels_one_hot = support_labels_one_hot.view(tasks_per_batch, n_support, n_way)

    #************************* Compute Prototypes **************************
    labels_train_transposed = support_labels_one_hot.transpose(1,2)
    prototypes = torch.bmm(labels_train_transposed, support)
    # Divide with the number of examples per novel category.
    prototypes = prototypes.div(
        labels_train_transposed.sum(dim=2, keepdim=True).expand_as(prototypes)
    )

    # Distance Matrix Vectorization Trick
    AB = computeGramMatrix(query, prototypes)
    AA = (query * query).sum(dim=2, keepdim=True)
    BB = (prototypes * prototypes).sum(dim=2, keepdim=True).reshape(tasks_per_batch, 1, n_way)
    logits = AA.expand_as(AB) - 2 * AB + BB.expand_as(AB)
    logits = -logits

    if normalize:
        logits = logits / d

    return logits


class ClassificationHead(nn.Module):
    def __init__(self, base_learner='MetaOptNet', enable_scale=True):
        super(ClassificationHead, self).__init__()
        if ('Proto' in base_learner):
            self.head = ProtoNetHead
        else:  # (port) the Ridge / R2D2 / SVM heads (qpth) are not copied
            print ("Cannot recognize the base learner type")
            assert(False)

        # Add a learnable scale
        self.enable_scale = enable_scale
        self.scale = nn.Parameter(torch.FloatTensor([1.0]))

    def forward(self, query, support, support_labels, n_way, n_shot, **kwargs):
        if self.enable_scale:
            return self.scale * self.head(query, support, support_labels, n_way, n_shot, **kwargs)
        else:
            return self.head(query, support, support_labels, n_way, n_shot, **kwargs)


def count_accuracy(logits, label):
    pred = torch.argmax(logits, dim=1).view(-1)
    label = label.view(-1)
    accuracy = 100 * pred.eq(label).float().mean()
    return accuracy


# ------------------------------------------------------------------------- (port) data and the episode sampler
class _SyntheticSplit:
    def __init__(self, templates, per_class, gen):
        images, labels = [], []
        for c, t in enumerate(templates):
            for _ in range(per_class):
                dx, dy = (int(v) for v in torch.randint(-1, 2, (2,), generator=gen))
                img = torch.roll(t, shifts=(dx, dy), dims=(1, 2)) + 0.3 * torch.randn(t.shape, generator=gen)
                images.append(img)
                labels.append(c)
        self.images, self.labels = images, labels
        self.label2ind = {}
        for i, c in enumerate(labels):
            self.label2ind.setdefault(c, []).append(i)
        self.labelIds_base = sorted(self.label2ind)
        self.labelIds_novel = self.labelIds_base

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def _templates(n, gen):
    low = torch.randn(n, 3, 4, 4, generator=gen)
    return F.interpolate(low, size=(IMG, IMG), mode='bilinear', align_corners=False) * 1.5


class FewShotDataloader:
    """data/mini_imagenet.py's sampler (nKbase = 0, nTestBase = 0) over a torchnet-free generator."""

    def __init__(self, dataset, nKnovel, nKbase, nExemplars, nTestNovel, nTestBase, batch_size, epoch_size,
                 seed):
        self.dataset = dataset
        self.nKnovel, self.nKbase, self.nExemplars = nKnovel, nKbase, nExemplars
        self.nTestNovel, self.nTestBase = nTestNovel, nTestBase
        self.batch_size, self.epoch_size, self.seed = batch_size, epoch_size, seed
        self.is_eval_mode = False

    def sampleImageIdsFrom(self, cat_id, sample_size=1):
        assert(cat_id in self.dataset.label2ind)
        assert(len(self.dataset.label2ind[cat_id]) >= sample_size)
        # Note: random.sample samples elements without replacement.
        return random.sample(self.dataset.label2ind[cat_id], sample_size)

    def sampleCategories(self, cat_set, sample_size=1):
        labelIds = self.dataset.labelIds_base
        assert(len(labelIds) >= sample_size)
        return random.sample(labelIds, sample_size)

    def sample_base_and_novel_categories(self, nKbase, nKnovel):
        # sample from the set of base categories 'nKnovel' + 'nKbase' number
        # of categories.
        cats_ids = self.sampleCategories('base', nKnovel+nKbase)
        assert(len(cats_ids) == (nKnovel+nKbase))
        # Randomly pick 'nKnovel' number of fake novel categories and keep
        # the rest as base categories.
        random.shuffle(cats_ids)
        Knovel = sorted(cats_ids[:nKnovel])
        Kbase = sorted(cats_ids[nKnovel:])
        return Kbase, Knovel

    def sample_train_and_test_examples_for_novel_categories(
            self, Knovel, nTestNovel, nExemplars, nKbase):
        if len(Knovel) == 0:
            return [], []
        nKnovel = len(Knovel)
        Tnovel = []
        Exemplars = []
        assert((nTestNovel % nKnovel) == 0)
        nEvalExamplesPerClass = int(nTestNovel / nKnovel)

        for Knovel_idx in range(len(Knovel)):
            imd_ids = self.sampleImageIdsFrom(
                Knovel[Knovel_idx],
                sample_size=(nEvalExamplesPerClass + nExemplars))

            imds_tnovel = imd_ids[:nEvalExamplesPerClass]
            imds_ememplars = imd_ids[nEvalExamplesPerClass:]

            Tnovel += [(img_id, nKbase+Knovel_idx) for img_id in imds_tnovel]
            Exemplars += [(img_id, nKbase+Knovel_idx) for img_id in imds_ememplars]
        assert(len(Tnovel) == nTestNovel)
        assert(len(Exemplars) == len(Knovel) * nExemplars)
        random.shuffle(Exemplars)

        return Tnovel, Exemplars

    def sample_episode(self):
        """Samples a training episode."""
        nKnovel = self.nKnovel
        nKbase = self.nKbase
        nTestNovel = self.nTestNovel
        nExemplars = self.nExemplars

        Kbase, Knovel = self.sample_base_and_novel_categories(nKbase, nKnovel)
        Tbase = []
        Tnovel, Exemplars = self.sample_train_and_test_examples_for_novel_categories(
            Knovel, nTestNovel, nExemplars, nKbase)

        # concatenate the base and novel category examples.
        Test = Tbase + Tnovel
        random.shuffle(Test)
        Kall = Kbase + Knovel

        return Exemplars, Test, Kall, nKbase

    def createExamplesTensorData(self, examples):
        images = torch.stack(
            [self.dataset[img_idx][0] for img_idx, _ in examples], dim=0)
        labels = torch.LongTensor([label for _, label in examples])
        return images, labels

    def get_iterator(self, epoch=0):
        rand_seed = epoch + 1000 * self.seed  # (port) offset by the build's seed
        random.seed(rand_seed)
        np.random.seed(rand_seed)

        def load_function(iter_idx):
            Exemplars, Test, Kall, nKbase = self.sample_episode()
            Xt, Yt = self.createExamplesTensorData(Test)
            Kall = torch.LongTensor(Kall)
            Xe, Ye = self.createExamplesTensorData(Exemplars)
            return Xe, Ye, Xt, Yt, Kall, nKbase

        for _ in range(int(self.epoch_size / self.batch_size)):
            items = [load_function(i) for i in range(self.batch_size)]
            yield [torch.stack([it[k] for it in items]) if k != 5 else torch.LongTensor([it[5] for it in items])
                   for k in range(6)]

    def __call__(self, epoch=0):
        return self.get_iterator(epoch)

    def __len__(self):
        return int(self.epoch_size / self.batch_size)


class _EpisodeModel(nn.Module):
    """(port) the two networks of train.py in one module; forward is the loop's lines up to ``logit_query``."""

    def __init__(self, embedding_net, cls_head):
        super().__init__()
        self.embedding_net = embedding_net
        self.cls_head = cls_head

    def forward(self, data_support, labels_support, data_query, n_way=opt.train_way, n_shot=opt.train_shot):
        embedding_net, cls_head = self.embedding_net, self.cls_head
        episodes = data_support.shape[0]
        emb_support = embedding_net(data_support.reshape([-1] + list(data_support.shape[-3:])))
        emb_support = emb_support.reshape(episodes, data_support.shape[1], -1)

        emb_query = embedding_net(data_query.reshape([-1] + list(data_query.shape[-3:])))
        emb_query = emb_query.reshape(episodes, data_query.shape[1], -1)

        return cls_head(emb_query, emb_support, labels_support, n_way, n_shot)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    dataset_train = _SyntheticSplit(_templates(64, gen), 30, gen)
    dataset_val = _SyntheticSplit(_templates(16, gen), 30, gen)

    # Dataloader of Gidaris & Komodakis (CVPR 2018)
    dloader_train = FewShotDataloader(
        dataset=dataset_train,
        nKnovel=opt.train_way,
        nKbase=0,
        nExemplars=opt.train_shot, # num training examples per novel category
        nTestNovel=opt.train_way * opt.train_query, # num test examples for all the novel categories
        nTestBase=0, # num test examples for all the base categories
        batch_size=opt.episodes_per_batch,
        epoch_size=opt.episodes_per_batch * BATCHES_PER_EPOCH, # num of batches per epoch
        seed=seed,
    )

    dloader_val = FewShotDataloader(
        dataset=dataset_val,
        nKnovel=opt.test_way,
        nKbase=0,
        nExemplars=opt.val_shot, # num training examples per novel category
        nTestNovel=opt.val_query * opt.test_way, # num test examples for all the novel categories
        nTestBase=0, # num test examples for all the base categories
        batch_size=1,
        epoch_size=1 * opt.val_episode, # num of batches per epoch
        seed=seed,
    )

    embedding_net = ProtoNetEmbedding()
    cls_head = ClassificationHead(base_learner='ProtoNet')
    model = _EpisodeModel(embedding_net, cls_head)

    if bug == "head_left_out_of_optimizer":
        optimizer = torch.optim.SGD([{'params': embedding_net.parameters()}], lr=0.1, momentum=0.9,
                                    weight_decay=5e-4, nesterov=True)
    else:
        optimizer = torch.optim.SGD([{'params': embedding_net.parameters()},
                                     {'params': cls_head.parameters()}], lr=0.1, momentum=0.9, \
                                              weight_decay=5e-4, nesterov=True)

    lambda_epoch = lambda e: 1.0 if e < 20 else (0.06 if e < 40 else 0.012 if e < 50 else (0.0024))
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_epoch, last_epoch=-1)

    x_entropy = torch.nn.CrossEntropyLoss()

    def loss_fn(logit_query, labels_query):
        smoothed_one_hot = one_hot(labels_query.reshape(-1), opt.train_way)
        smoothed_one_hot = smoothed_one_hot * (1 - opt.eps) + (1 - smoothed_one_hot) * opt.eps / (opt.train_way - 1)

        if bug == "log_softmax_over_queries":
            log_prb = F.log_softmax(logit_query.reshape(-1, opt.train_way), dim=0)
        else:
            log_prb = F.log_softmax(logit_query.reshape(-1, opt.train_way), dim=1)
        loss = -(smoothed_one_hot * log_prb).sum(dim=1)
        loss = loss.mean()
        return loss

    st = {"epoch": 0, "it": iter(())}

    def next_batch():
        batch = next(st["it"], None)
        if batch is None:
            st["epoch"] += 1
            # Train on the training split
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (port) the original steps the scheduler before the optimizer
                lr_scheduler.step()
            _, _ = [x.train() for x in (embedding_net, cls_head)]
            st["it"] = dloader_train(st["epoch"])
            batch = next(st["it"])
        return batch

    def train_step():
        batch = next_batch()
        data_support, labels_support, data_query, labels_query, _, _ = [x for x in batch]
        if bug == "support_labels_shuffled":
            labels_support = labels_support[:, torch.randperm(labels_support.shape[1])]

        logit_query = model(data_support, labels_support, data_query, opt.train_way, opt.train_shot)

        loss = loss_fn(logit_query, labels_query)

        acc = count_accuracy(logit_query.reshape(-1, opt.train_way), labels_query.reshape(-1))  # noqa: F841

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # Evaluate on the validation split
        was = model.training
        _, _ = [x.eval() for x in (embedding_net, cls_head)]
        val_accuracies = []
        val_losses = []
        with torch.no_grad():
            for i, batch in enumerate(dloader_val(st["epoch"]), 1):
                data_support, labels_support, data_query, labels_query, _, _ = [x for x in batch]
                logit_query = model(data_support, labels_support, data_query, opt.test_way, opt.val_shot)

                loss = x_entropy(logit_query.reshape(-1, opt.test_way), labels_query.reshape(-1))
                acc = count_accuracy(logit_query.reshape(-1, opt.test_way), labels_query.reshape(-1))

                val_accuracies.append(acc.item())
                val_losses.append(loss.item())
        model.train(was)
        return float(np.mean(np.array(val_losses)))

    # the Program's batch: one training batch of episodes drawn apart from the loop's stream
    state = random.getstate(), np.random.get_state()
    first = next(dloader_train(10_000))
    random.setstate(state[0])
    np.random.set_state(state[1])
    data_support, labels_support, data_query, labels_query, _, _ = first
    batch = ((data_support, labels_support, data_query), labels_query)

    return Program(name="metaoptnet_protonet", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the support labels permuted apart from the support images: every prototype is a mean over random classes
    # (classic: data and labels shuffled separately).
    Bug("support_labels_shuffled", functools.partial(_build, bug="support_labels_shuffled"), "learning_ledger",
        ("TASK",)),
    # log_softmax over the queries (dim=0) instead of the ways (classic wrong axis).
    Bug("log_softmax_over_queries", functools.partial(_build, bug="log_softmax_over_queries"), "learning_ledger",
        ("OBJECTIVE",)),
    # the optimizer built over the embedding only: the head's learnable scale is never updated (classic).
    Bug("head_left_out_of_optimizer", functools.partial(_build, bug="head_left_out_of_optimizer"),
        "four_structures", ("cls_head.scale",)),
]
