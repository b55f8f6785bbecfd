"""Metric learning with pytorch-metric-learning as its single-cell example notebook trains it: an MLP embedder
(``EmbeddingNet``, fast.ai tabular style) trained by the library's ``trainers.MetricLossOnly`` with
``losses.TripletMarginLoss(margin=0.1)`` (default ``LpDistance`` on L2-normalized embeddings, default
``AvgNonZeroReducer``) on the pairs mined by ``miners.MultiSimilarityMiner(epsilon=0.1)`` (default
``CosineSimilarity``), batches drawn by ``samplers.MPerClassSampler(m=4)``, Adam(lr 1e-5, weight_decay 1e-4).
The library's loss, miner, distances, reducer, pair-to-triplet conversion, sampler and the trainer's
``forward_and_backward`` are written out below as the library computes them.

Source: https://github.com/KevinMusgrave/pytorch-metric-learning
Commit: 216a792c22b0154d3d3bf008a7317edc7d677e71
Files: examples/notebooks/scRNAseq_MetricEmbedding.ipynb, src/pytorch_metric_learning/losses/triplet_margin_loss.py,
       losses/base_metric_loss_function.py, miners/multi_similarity_miner.py, miners/base_miner.py,
       distances/base_distance.py, distances/lp_distance.py, distances/dot_product_similarity.py,
       distances/cosine_similarity.py, reducers/base_reducer.py, reducers/threshold_reducer.py,
       reducers/avg_non_zero_reducer.py, utils/loss_and_miner_utils.py, utils/common_functions.py,
       samplers/m_per_class_sampler.py, trainers/base_trainer.py, trainers/metric_loss_only.py
License: MIT (Copyright (c) 2019 Kevin Musgrave; full text in LICENSES/KevinMusgrave-pytorch-metric-learning.txt)
Domain: metric learning (triplet margin loss on mined pairs, m-per-class batches)

Deviations from the original:
- the library's class machinery is collapsed: ``ModuleWithRecords`` statistics, ``collect_stats``, the key checkers,
  the loss tracker, logging and hooks (``record_keeper``, tester, tensorboard) are left out; the computing lines of
  ``forward``/``compute_loss``/``mine``/``compute_mat``/``maybe_normalize``/``element_reduction_helper``/
  ``convert_to_triplets``/``get_all_pairs_indices``/``MPerClassSampler.__iter__`` are copied; the embedding
  regularizer mixin is dropped (no regularizer is configured);
- the notebook's pip installs, scanpy (``sc.datasets.paul15()``), sklearn's ``train_test_split``, TSNE and plotting
  are replaced by synthetic "expression profiles" made from ``seed``: 10 clusters, 64 non-negative features, a
  cluster mean profile plus noise, so the cluster is recoverable from the profile;
- sizes: in_sz 3451 -> 64, emb_szs [1000, 500, 250, 100] -> [64, 48, 32, 16], out_sz 25 -> 16; batch_size 64,
  m 4, margin, epsilon and weight decay unchanged; Adam's lr 1e-5 -> 1e-3 (the notebook runs 10 epochs of
  ~2,000 cells; at 1e-5 the 30 steps of a check barely move the loss, at 1e-3 the embedding clusters form); ``nn.DataParallel`` and the device move are dropped (CPU);
  ``dataloader_num_workers`` 2 -> 0;
- ``c_f.NUMPY_RANDOM`` (the global ``np.random``) is a ``np.random.RandomState(seed)`` so that a build is
  reproducible;
- one ``train_step`` is one ``forward_and_backward`` of ``BaseTrainer.train`` (zero_grad, get_batch,
  ``MetricLossOnly.calculate_loss``, backward, step); ``eval_fn`` is precision@1 of held-out profiles against the
  training profiles (what the notebook's ``GlobalEmbeddingSpaceTester`` reports, written out);
- declared evidence: ``loss_fn(embeddings, labels)`` is the trainer's metric loss on a batch (mine, then loss);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B008, PERF102, PLR0402, RUF015, SIM102, SIM118, UP008  (the original's code style is kept as written)

from __future__ import annotations

import collections
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data.sampler import Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_CLASSES, N_PER_CLASS, N_TEST_PER_CLASS, N_GENES = 10, 40, 10, 64
BATCH_SIZE = 64


# ---- utils/common_functions.py -------------------------------------------------------------------------------

def neg_inf(dtype):
    return torch.finfo(dtype).min


def pos_inf(dtype):
    return torch.finfo(dtype).max


def get_labels_to_indices(labels):
    """
    Creates labels_to_indices, which is a dictionary mapping each label
    to a numpy array of indices that will be used to index into self.dataset
    """
    if torch.is_tensor(labels):
        labels = labels.cpu().numpy()
    labels_to_indices = collections.defaultdict(list)
    for i, label in enumerate(labels):
        labels_to_indices[label].append(i)
    for k, v in labels_to_indices.items():
        labels_to_indices[k] = np.array(v, dtype=int)
    return labels_to_indices


# ---- utils/loss_and_miner_utils.py ---------------------------------------------------------------------------

def get_matches_and_diffs(labels, ref_labels=None):
    if ref_labels is None:
        ref_labels = labels
    labels1 = labels.unsqueeze(1)
    labels2 = ref_labels.unsqueeze(0)
    matches = (labels1 == labels2).byte()
    diffs = matches ^ 1
    if ref_labels is labels:
        matches.fill_diagonal_(0)
    return matches, diffs


def get_all_pairs_indices(labels, ref_labels=None):
    """
    Given a tensor of labels, this will return 4 tensors.
    The first 2 tensors are the indices which form all positive pairs
    The second 2 tensors are the indices which form all negative pairs
    """
    matches, diffs = get_matches_and_diffs(labels, ref_labels)
    a1_idx, p_idx = torch.where(matches)
    a2_idx, n_idx = torch.where(diffs)
    return a1_idx, p_idx, a2_idx, n_idx


def get_all_triplets_indices(labels, ref_labels=None):
    all_matches, all_diffs = get_matches_and_diffs(labels, ref_labels)
    triplets = all_matches.unsqueeze(2) * all_diffs.unsqueeze(1)
    return torch.where(triplets)


def convert_to_triplets(indices_tuple, labels, ref_labels=None, t_per_anchor=100, bug=None):
    """
    This returns anchor-positive-negative triplets
    regardless of what the input indices_tuple is
    """
    if indices_tuple is None:
        return get_all_triplets_indices(labels, ref_labels)
    elif len(indices_tuple) == 3:
        return indices_tuple
    else:
        a1, p, a2, n = indices_tuple
        if bug == "pairs_zipped_into_triplets":
            # positive and negative pairs zipped by position, not matched by anchor
            k = min(len(a1), len(a2))
            return a1[:k], p[:k], n[:k]
        p_idx, n_idx = torch.where(a1.unsqueeze(1) == a2)
        return a1[p_idx], p[p_idx], n[n_idx]


# ---- distances/ ----------------------------------------------------------------------------------------------

class BaseDistance(torch.nn.Module):
    def __init__(self, normalize_embeddings=True, p=2, power=1, is_inverted=False, bug=None):
        super().__init__()
        self.normalize_embeddings = normalize_embeddings
        self.p = p
        self.power = power
        self.is_inverted = is_inverted
        self.bug = bug

    def forward(self, query_emb, ref_emb=None):
        query_emb_normalized = self.maybe_normalize(query_emb)
        if ref_emb is None:
            ref_emb = query_emb
            ref_emb_normalized = query_emb_normalized
        else:
            ref_emb_normalized = self.maybe_normalize(ref_emb)
        mat = self.compute_mat(query_emb_normalized, ref_emb_normalized)
        if self.power != 1:
            mat = mat**self.power
        assert mat.size() == torch.Size((query_emb.size(0), ref_emb.size(0)))
        return mat

    # This measures the margin between x and y
    def margin(self, x, y):
        if self.is_inverted:
            return y - x
        return x - y

    def normalize(self, embeddings, dim=1, **kwargs):
        if self.bug == "normalize_over_batch":
            dim = 0  # each feature normalized across the batch instead of each embedding
        return torch.nn.functional.normalize(embeddings, p=self.p, dim=dim, **kwargs)

    def maybe_normalize(self, embeddings, dim=1, **kwargs):
        if self.normalize_embeddings:
            return self.normalize(embeddings, dim=dim, **kwargs)
        return embeddings


class LpDistance(BaseDistance):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        assert not self.is_inverted

    def compute_mat(self, query_emb, ref_emb):
        if ref_emb is None:
            ref_emb = query_emb
        return torch.cdist(query_emb, ref_emb, p=self.p)


class DotProductSimilarity(BaseDistance):
    def __init__(self, **kwargs):
        super().__init__(is_inverted=True, **kwargs)
        assert self.is_inverted

    def compute_mat(self, query_emb, ref_emb):
        return torch.matmul(query_emb, ref_emb.t())


class CosineSimilarity(DotProductSimilarity):
    def __init__(self, **kwargs):
        super().__init__(normalize_embeddings=True, **kwargs)
        assert self.is_inverted
        assert self.normalize_embeddings


# ---- reducers/ -----------------------------------------------------------------------------------------------

class AvgNonZeroReducer(torch.nn.Module):
    """ThresholdReducer(low=0): the mean of the losses above zero (BaseReducer.forward / reduce_the_loss)."""

    def __init__(self):
        super().__init__()
        self.low = 0
        self.high = None

    def forward(self, loss_dict, embeddings, labels):
        assert len(loss_dict) == 1
        loss_name = list(loss_dict.keys())[0]
        loss_info = loss_dict[loss_name]
        losses = loss_info["losses"]
        if (not torch.is_tensor(losses)) and (losses == 0):
            return self.zero_loss(embeddings)
        return self.element_reduction_helper(losses, embeddings)

    def zero_loss(self, embeddings):
        return torch.sum(embeddings * 0)

    def element_reduction_helper(self, losses, embeddings):
        if self.low is not None:
            low_condition = losses > self.low
            losses = losses[low_condition]
        if self.high is not None:
            high_condition = losses < self.high
            losses = losses[high_condition]
        num_past_filter = len(losses)
        if num_past_filter >= 1:
            loss = torch.mean(losses)
        else:
            loss = self.zero_loss(embeddings)
        return loss


# ---- losses/triplet_margin_loss.py, base_metric_loss_function.py ---------------------------------------------

class TripletMarginLoss(torch.nn.Module):
    def __init__(self, margin=0.05, swap=False, smooth_loss=False, triplets_per_anchor="all", distance=None,
                 reducer=None, bug=None):
        super().__init__()
        self.margin = margin
        self.swap = swap
        self.smooth_loss = smooth_loss
        self.triplets_per_anchor = triplets_per_anchor
        self.distance = LpDistance(bug=bug) if distance is None else distance
        self.reducer = AvgNonZeroReducer() if reducer is None else reducer
        self.bug = bug

    def forward(self, embeddings, labels=None, indices_tuple=None, ref_emb=None, ref_labels=None):
        if ref_emb is None:
            ref_emb, ref_labels = embeddings, labels
        loss_dict = self.compute_loss(embeddings, labels, indices_tuple, ref_emb, ref_labels)
        return self.reducer(loss_dict, embeddings, labels)

    def zero_losses(self):
        return {"loss": {"losses": 0, "indices": None, "reduction_type": "already_reduced"}}

    def compute_loss(self, embeddings, labels, indices_tuple, ref_emb, ref_labels):
        indices_tuple = convert_to_triplets(
            indices_tuple, labels, ref_labels, t_per_anchor=self.triplets_per_anchor, bug=self.bug
        )
        anchor_idx, positive_idx, negative_idx = indices_tuple
        if len(anchor_idx) == 0:
            return self.zero_losses()
        mat = self.distance(embeddings, ref_emb)
        ap_dists = mat[anchor_idx, positive_idx]
        an_dists = mat[anchor_idx, negative_idx]

        current_margins = self.distance.margin(ap_dists, an_dists)
        violation = current_margins + self.margin
        if self.smooth_loss:
            loss = torch.nn.functional.softplus(violation)
        else:
            loss = torch.nn.functional.relu(violation)

        return {
            "loss": {
                "losses": loss,
                "indices": indices_tuple,
                "reduction_type": "triplet",
            }
        }


# ---- miners/multi_similarity_miner.py, base_miner.py ---------------------------------------------------------

class MultiSimilarityMiner(torch.nn.Module):
    def __init__(self, epsilon=0.1, distance=None):
        super().__init__()
        self.epsilon = epsilon
        self.distance = CosineSimilarity() if distance is None else distance

    def forward(self, embeddings, labels, ref_emb=None, ref_labels=None):
        with torch.no_grad():
            if ref_emb is None:
                ref_emb, ref_labels = embeddings, labels
            mining_output = self.mine(embeddings, labels, ref_emb, ref_labels)
        self.num_pos_pairs = len(mining_output[0])
        self.num_neg_pairs = len(mining_output[2])
        return mining_output

    def mine(self, embeddings, labels, ref_emb, ref_labels):
        mat = self.distance(embeddings, ref_emb)
        a1, p, a2, n = get_all_pairs_indices(labels, ref_labels)

        if len(a1) == 0 or len(a2) == 0:
            empty = torch.tensor([], device=labels.device, dtype=torch.long)
            return empty.clone(), empty.clone(), empty.clone(), empty.clone()

        mat_neg_sorting = mat
        mat_pos_sorting = mat.clone()

        dtype = mat.dtype
        pos_ignore = (
            pos_inf(dtype) if self.distance.is_inverted else neg_inf(dtype)
        )
        neg_ignore = (
            neg_inf(dtype) if self.distance.is_inverted else pos_inf(dtype)
        )

        mat_pos_sorting[a2, n] = pos_ignore
        mat_neg_sorting[a1, p] = neg_ignore
        if embeddings is ref_emb:
            mat_pos_sorting.fill_diagonal_(pos_ignore)
            mat_neg_sorting.fill_diagonal_(neg_ignore)

        pos_sorted, pos_sorted_idx = torch.sort(mat_pos_sorting, dim=1)
        neg_sorted, neg_sorted_idx = torch.sort(mat_neg_sorting, dim=1)

        if self.distance.is_inverted:
            hard_pos_idx = torch.where(
                pos_sorted - self.epsilon < neg_sorted[:, -1].unsqueeze(1)
            )
            hard_neg_idx = torch.where(
                neg_sorted + self.epsilon > pos_sorted[:, 0].unsqueeze(1)
            )
        else:
            hard_pos_idx = torch.where(
                pos_sorted + self.epsilon > neg_sorted[:, 0].unsqueeze(1)
            )
            hard_neg_idx = torch.where(
                neg_sorted - self.epsilon < pos_sorted[:, -1].unsqueeze(1)
            )

        a1 = hard_pos_idx[0]
        p = pos_sorted_idx[a1, hard_pos_idx[1]]
        a2 = hard_neg_idx[0]
        n = neg_sorted_idx[a2, hard_neg_idx[1]]

        return a1, p, a2, n


# ---- samplers/m_per_class_sampler.py -------------------------------------------------------------------------

class MPerClassSampler(Sampler):
    """
    At every iteration, this will return m samples per class. For example,
    if dataloader's batchsize is 100, and m = 5, then 20 classes with 5 samples
    each will be returned
    """

    def __init__(self, labels, m, batch_size=None, length_before_new_iter=100000, random_state=None):
        if isinstance(labels, torch.Tensor):
            labels = labels.numpy()
        self.NUMPY_RANDOM = random_state
        self.m_per_class = int(m)
        self.batch_size = int(batch_size) if batch_size is not None else batch_size
        self.labels_to_indices = get_labels_to_indices(labels)
        self.labels = list(self.labels_to_indices.keys())
        self.length_of_single_pass = self.m_per_class * len(self.labels)
        self.list_size = length_before_new_iter
        if self.batch_size is None:
            if self.length_of_single_pass < self.list_size:
                self.list_size -= (self.list_size) % (self.length_of_single_pass)

    def __len__(self):
        return self.list_size

    def __iter__(self):
        idx_list = [0] * self.list_size
        i = 0
        num_iters = self.calculate_num_iters()
        for _ in range(num_iters):
            self.NUMPY_RANDOM.shuffle(self.labels)
            curr_label_set = self.labels
            for label in curr_label_set:
                t = self.labels_to_indices[label]
                idx_list[i : i + self.m_per_class] = self.safe_random_choice(
                    t, size=self.m_per_class
                )
                i += self.m_per_class
        return iter(idx_list)

    def safe_random_choice(self, input_data, size):
        replace = len(input_data) < size
        return self.NUMPY_RANDOM.choice(input_data, size=size, replace=replace)

    def calculate_num_iters(self):
        divisor = (
            self.length_of_single_pass if self.batch_size is None else self.batch_size
        )
        return self.list_size // divisor if divisor < self.list_size else 1


# ---- examples/notebooks/scRNAseq_MetricEmbedding.ipynb -------------------------------------------------------

class EmbeddingNet(nn.Module):
    # Useful code from fast.ai tabular model
    # https://github.com/fastai/fastai/blob/3b7c453cfa3845c6ffc496dd4043c07f3919270e/fastai/tabular/models.py#L6
    def __init__(self, in_sz, out_sz, emb_szs, ps, use_bn=True, actn=nn.ReLU()):
        super(EmbeddingNet, self).__init__()
        self.in_sz = in_sz
        self.out_sz = out_sz
        self.n_embs = len(emb_szs) - 1
        if ps == 0:
            ps = np.zeros(self.n_embs)
        # input layer
        layers = [nn.Linear(self.in_sz, emb_szs[0]), actn]
        # hidden layers
        for i in range(self.n_embs):
            layers += self.bn_drop_lin(
                n_in=emb_szs[i], n_out=emb_szs[i + 1], bn=use_bn, p=ps[i], actn=actn
            )
        # output layer
        layers.append(nn.Linear(emb_szs[-1], self.out_sz))
        self.fc = nn.Sequential(*layers)

    def bn_drop_lin(
        self,
        n_in: int,
        n_out: int,
        bn: bool = True,
        p: float = 0.0,
        actn: nn.Module = None,
    ):
        # https://github.com/fastai/fastai/blob/3b7c453cfa3845c6ffc496dd4043c07f3919270e/fastai/layers.py#L44
        "Sequence of batchnorm (if `bn`), dropout (with `p`) and linear (`n_in`,`n_out`) layers followed by `actn`."
        layers = [nn.BatchNorm1d(n_in)] if bn else []
        if p != 0:
            layers.append(nn.Dropout(p))
        layers.append(nn.Linear(n_in, n_out))
        if actn is not None:
            layers.append(actn)
        return layers

    def forward(self, x):
        output = self.fc(x)
        return output


# This will be used to create train and val sets
class BasicDataset(torch.utils.data.Dataset):
    def __init__(self, data, labels):
        self.data = torch.from_numpy(data).float()
        self.labels = labels

    def __getitem__(self, index):
        return self.data[index], self.labels[index]

    def __len__(self):
        return len(self.data)


def make_profiles(seed):
    """Non-negative cluster profiles: a cluster's mean expression plus noise (the stand-in for paul15)."""
    g = np.random.RandomState(seed)
    means = np.abs(g.randn(N_CLASSES, N_GENES)) * 2
    def draw(per):
        labels = np.repeat(np.arange(N_CLASSES), per)
        data = np.maximum(means[labels] + g.randn(len(labels), N_GENES), 0).astype(np.float32)
        order = g.permutation(len(labels))
        return data[order], labels[order].astype(np.int64)
    X_train, y_train = draw(N_PER_CLASS)
    X_val, y_val = draw(N_TEST_PER_CLASS)
    return X_train, X_val, y_train, y_val


# ---- trainers/metric_loss_only.py, base_trainer.py -----------------------------------------------------------

class MetricLossOnly:
    def __init__(self, models, optimizers, batch_size, loss_funcs, dataset, mining_funcs=None, sampler=None,
                 dataloader_num_workers=2, bug=None):
        self.models = models
        self.optimizers = optimizers
        self.batch_size = batch_size
        self.loss_funcs = loss_funcs
        self.dataset = dataset
        self.mining_funcs = {} if mining_funcs is None else mining_funcs
        self.sampler = sampler
        self.dataloader_num_workers = dataloader_num_workers
        self.loss_weights = {k: 1 for k in self.loss_funcs}
        self.losses = {"metric_loss": 0, "total_loss": 0}
        self.bug = bug
        if "embedder" not in self.models:
            self.models["embedder"] = torch.nn.Identity()
        self.dataloader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=int(self.batch_size),
            sampler=self.sampler,
            drop_last=True,
            num_workers=self.dataloader_num_workers,
        )
        self.dataloader_iter = iter(self.dataloader)

    def set_to_train(self):
        for T in [self.models, self.loss_funcs]:
            for k, v in T.items():
                v.train()

    def forward_and_backward(self):
        self.zero_losses()
        if self.bug != "no_zero_grad":
            self.zero_grad()
        self.calculate_loss(self.get_batch())
        self.losses["total_loss"] = sum(self.loss_weights[k] * self.losses[k] for k in self.loss_funcs)
        self.backward()
        self.step_optimizers()
        return self.losses["total_loss"].detach()

    def zero_losses(self):
        for k in self.losses.keys():
            self.losses[k] = 0

    def zero_grad(self):
        for v in self.models.values():
            v.zero_grad()
        for v in self.optimizers.values():
            v.zero_grad()

    def get_batch(self):
        try:
            curr_batch = next(self.dataloader_iter)
        except StopIteration:
            self.dataloader_iter = iter(self.dataloader)
            curr_batch = next(self.dataloader_iter)
        data, labels = curr_batch
        return data, labels

    def compute_embeddings(self, data):
        trunk_output = self.models["trunk"](data)
        embeddings = self.models["embedder"](trunk_output)
        return embeddings

    def maybe_mine_embeddings(self, embeddings, labels):
        if "tuple_miner" in self.mining_funcs:
            return self.mining_funcs["tuple_miner"](embeddings, labels)
        return None

    def backward(self):
        self.losses["total_loss"].backward()

    def step_optimizers(self):
        for k, v in self.optimizers.items():
            v.step()

    def calculate_loss(self, curr_batch):
        data, labels = curr_batch
        embeddings = self.compute_embeddings(data)
        indices_tuple = self.maybe_mine_embeddings(embeddings, labels)
        self.losses["metric_loss"] = self.maybe_get_metric_loss(
            embeddings, labels, indices_tuple
        )

    def maybe_get_metric_loss(self, embeddings, labels, indices_tuple):
        if self.loss_weights.get("metric_loss", 0) > 0:
            return self.loss_funcs["metric_loss"](embeddings, labels, indices_tuple)
        return 0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    X_train, X_val, y_train, y_val = make_profiles(seed)

    # Training, validation set
    train_dataset = BasicDataset(X_train, y_train)

    # Set embedder model. This takes in the output of the trunk and outputs 64 dimensional embeddings
    model = EmbeddingNet(
        in_sz=N_GENES,
        out_sz=16,
        emb_szs=[64, 48, 32, 16],
        ps=0,
        use_bn=False,
        actn=nn.ReLU(),
    )

    # Set optimizers
    model_optimizer = torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.0001)  # notebook: lr=0.00001

    # Set the loss function
    loss = TripletMarginLoss(margin=0.1, bug=bug)

    # Set the mining function
    miner = MultiSimilarityMiner(epsilon=0.1)

    # Set the dataloader sampler
    sampler = MPerClassSampler(
        y_train.flatten(), m=4, length_before_new_iter=len(train_dataset),
        random_state=np.random.RandomState(seed),
    )

    # Set other training parameters
    batch_size = BATCH_SIZE

    # Package the above stuff into dictionaries.
    models = {"trunk": model}
    optimizers = {"trunk_optimizer": model_optimizer}
    loss_funcs = {"metric_loss": loss}
    mining_funcs = {"tuple_miner": miner}

    trainer = MetricLossOnly(
        models,
        optimizers,
        batch_size,
        loss_funcs,
        train_dataset,
        mining_funcs=mining_funcs,
        sampler=sampler,
        dataloader_num_workers=0,
        bug=bug,
    )
    trainer.set_to_train()

    # the evidence: one m-per-class batch of the sampler
    g = np.random.RandomState(seed + 1)
    labels_to_indices = get_labels_to_indices(y_train)
    idx = np.concatenate([g.choice(labels_to_indices[k], 4, replace=False) for k in sorted(labels_to_indices)])
    idx = np.concatenate([idx, g.choice(len(y_train), BATCH_SIZE - len(idx), replace=False)])
    batch = (train_dataset.data[idx], torch.from_numpy(y_train[idx]))

    def loss_fn(embeddings, labels):
        return loss(embeddings, labels, miner(embeddings, labels))

    def eval_fn(model, batch):
        # precision@1: the nearest training profile (cosine, as the tester's normalized embeddings) has the label
        model.eval()
        with torch.no_grad():
            ref = torch.nn.functional.normalize(model(torch.from_numpy(X_train)), dim=1)
            query = torch.nn.functional.normalize(model(torch.from_numpy(X_val)), dim=1)
        model.train()
        nearest = (query @ ref.t()).argmax(dim=1).numpy()
        return float((y_train[nearest] == y_val).mean())

    return Program(name="pml_triplet_miner", model=model, batch=batch, loss_fn=loss_fn, optimizer=model_optimizer,
                   train_step=trainer.forward_and_backward, eval_fn=eval_fn, loader=trainer.dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the miner's positive and negative pairs zipped by position into triplets instead of matched by anchor
    # (convert_to_triplets' torch.where(a1.unsqueeze(1) == a2)): the anchor-negative distance is some other
    # anchor's pair.
    Bug("pairs_zipped_into_triplets", functools.partial(_build, bug="pairs_zipped_into_triplets"), "learning_ledger",
        ("OBJECTIVE",)),
    # the loss's LpDistance normalizes along the batch axis (dim 0) instead of each embedding (dim 1): distances
    # between unit vectors become distances between batch-dependent columns.
    Bug("normalize_over_batch", functools.partial(_build, bug="normalize_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # the trainer's zero_grad() dropped from forward_and_backward: gradients accumulate over iterations.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("fc.0.weight",)),
]
