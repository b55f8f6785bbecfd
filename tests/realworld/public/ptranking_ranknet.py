# ruff: noqa: UP008, C408, RUF059
"""RankNet (Burges et al. 2005) in PT-Ranking: a point-wise feed-forward scoring function (5 hidden layers of 100
units, each dropout -> linear -> batch norm over the documents -> GELU, then a batch-normed sigmoid score), the
pairwise probabilities ``sigmoid(sigma (s_i - s_j))`` fitted to ``0.5 (1 + clamp(y_i - y_j, -1, 1))`` by a binary
cross-entropy over the upper triangle of each query's document pairs, summed; Adam with weight decay, StepLR per
epoch; nDCG@5 on presorted validation queries.

Source: https://github.com/wildltr/ptranking
Commit: f1d366cd4355fb9f38fb97cb89b224b182d9ca87
Files: ``ptranking/ltr_adhoc/pairwise/ranknet.py`` (``RankNet``, ``RankNetParameter``),
``ptranking/base/ranker.py`` (``NeuralRanker``: ``config_optimizer``, ``train``, ``train_op``, ``Evaluator.ndcg_at_k``),
``ptranking/base/point_ranker.py``, ``ptranking/base/adhoc_ranker.py``, ``ptranking/base/utils.py``
(``get_stacked_FFNet``, ``LTRBatchNorm``, ``get_AF``), ``ptranking/ltr_adhoc/util/lambda_utils.py``,
``ptranking/metric/adhoc/adhoc_metric.py``
(``torch_dcg_at_k``, ``torch_ndcg_at_k``), ``ptranking/data/data_utils.py`` (``LETORSampler``,
``pre_allocate_batch``), ``ptranking/ltr_adhoc/eval/parameter.py`` and ``eval/ltr.py`` (the default settings and the
epoch loop)
License: MIT (Copyright (c) 2018 pt-ranking; full text in LICENSES/wildltr-ptranking.txt)
Domain: learning to rank (pairwise RankNet cross-entropy, point-wise neural scorer, batch norm across documents)

Kept as written: ``RankNet.custom_loss_function`` (with its ``zero_grad``, ``backward``, ``step``),
``get_pairwise_comp_probs``, ``torch_dcg_at_k`` / ``torch_ndcg_at_k``, ``get_stacked_FFNet`` and
``LTRBatchNorm`` (xavier-normal weights), ``PointNeuralRanker.forward`` and ``ini_pointsf``, the default scoring
function (``num_layers`` 5, AF 'GE', TL_AF 'S' applied, BN of type 'BN' with affine, h_dim 100, dropout 0.1), the
optimizer (Adam lr 1e-4, weight_decay 1e-3) and ``StepLR(step_size=20, gamma=0.5)`` stepped per epoch, sigma 1.0,
``train_presort`` True, ``LETORSampler``'s batches of queries with the same number of documents (about 100
documents a batch), ``NeuralRanker.train_op`` (with its ``stop_training`` check every 10th epoch).

Deviations from the original:
- MQ2008 / MSLR are not here: 60 training and 20 validation queries are made from ``seed``, each with 10
  documents of 16 features (46 in MQ2008), so that ``LETORSampler`` makes 6 equal batches of 10 queries; the
  graded relevance 0-2 of a document is the bin of a hidden linear score of its features plus noise, so a query's
  ranking follows its features (learnable);
- ``LTRDataset`` (file loading, scaling, filtering) is written out as the presorting of each query's documents by
  label and ``LETORSampler``'s grouping; ``ScoringFunctionParameter`` / ``DataSetting`` become literal dicts;
- ``train``'s batch loop is unrolled: one ``train_step`` is one ``train_op`` (``train_mode()`` at an epoch's start,
  ``scheduler.step()`` when the epoch's batches are done) and returns the batch loss; ``eval_fn`` is
  ``ndcg_at_k(k=5, presort=True)`` on the validation queries; the tapes, logging, k-fold loop and saving are dropped;
- the ``pointsf`` path of ``NeuralRanker`` / ``PointNeuralRanker`` / ``AdhocNeuralRanker`` / ``RankNet`` is one class;
  ``get_AF`` keeps the ids used, the metrics the multi-level-label case, ``config_optimizer`` the Adam branch, and
  the GPU lines are dropped; ``custom_loss_function``'s loss lines sit in ``ranknet_loss``, which it calls;
- ``PointNeuralRanker`` is not an ``nn.Module``: the Program declares its scoring function ``point_sf``, the batch of
  the first training batch, and ``loss_fn`` the loss lines of ``custom_loss_function`` without the update;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.nn.init import xavier_normal_ as nr_init
from torch.optim.lr_scheduler import StepLR

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_FEATURES = 16  # (port) 46 in MQ2008


# ptranking/metric/adhoc/adhoc_metric.py (MultiLabel only)
def torch_dcg_at_k(batch_rankings, cutoff=None, device='cpu'):
    if cutoff is None: # using whole list
        cutoff = batch_rankings.size(1)
    batch_numerators = torch.pow(2.0, batch_rankings[:, 0:cutoff]) - 1.0
    # no expanding should also be OK due to the default broadcasting
    batch_discounts = torch.log2(torch.arange(cutoff, dtype=torch.float, device=device).expand_as(batch_numerators) + 2.0)
    batch_dcg_at_k = torch.sum(batch_numerators/batch_discounts, dim=1, keepdim=True)
    return batch_dcg_at_k


def torch_ndcg_at_k(batch_predict_rankings, batch_ideal_rankings, k=None, device='cpu'):
    batch_sys_dcg_at_k = torch_dcg_at_k(batch_predict_rankings, cutoff=k, device=device) # only using the cumulative gain at the final rank position
    batch_ideal_dcg_at_k = torch_dcg_at_k(batch_ideal_rankings, cutoff=k, device=device)
    batch_ndcg_at_k = batch_sys_dcg_at_k / batch_ideal_dcg_at_k
    return batch_ndcg_at_k


# ptranking/ltr_adhoc/util/lambda_utils.py
def get_pairwise_comp_probs(batch_preds, batch_std_labels, sigma=None, bug=None):
    # computing pairwise differences w.r.t. predictions, i.e., s_i - s_j
    if bug == "score_differences_reversed":
        batch_s_ij = torch.unsqueeze(batch_preds, dim=1) - torch.unsqueeze(batch_preds, dim=2)
    else:
        batch_s_ij = torch.unsqueeze(batch_preds, dim=2) - torch.unsqueeze(batch_preds, dim=1)
    batch_p_ij = torch.sigmoid(sigma * batch_s_ij)

    # computing pairwise differences w.r.t. standard labels, i.e., S_{ij}
    batch_std_diffs = torch.unsqueeze(batch_std_labels, dim=2) - torch.unsqueeze(batch_std_labels, dim=1)
    # ensuring S_{ij} \in {-1, 0, 1}
    batch_Sij = torch.clamp(batch_std_diffs, min=-1.0, max=1.0)
    batch_std_p_ij = 0.5 * (1.0 + batch_Sij)

    return batch_p_ij, batch_std_p_ij


# ptranking/base/utils.py
def get_AF(af_str):
    return {'R': nn.ReLU, 'GE': nn.GELU, 'S': nn.Sigmoid, 'T': nn.Tanh}[af_str]()  # (port) the ids used here


class LTRBatchNorm(nn.Module):
    def __init__(self, num_features, momentum=0.1, affine=True, track_running_stats=False):
        super(LTRBatchNorm, self).__init__()
        self.bn = nn.BatchNorm1d(num_features, momentum=momentum, affine=affine, track_running_stats=track_running_stats)

    def forward(self, X):
        if 3 == X.dim():
            return self.bn(X.permute(0, 2, 1)).permute(0, 2, 1)
        else:
            return self.bn(X)


def get_stacked_FFNet(ff_dims=None, AF=None, TL_AF=None, apply_tl_af=False, dropout=0.1,
                      BN=True, bn_type=None, bn_affine=False, device='cpu'):
    assert ff_dims is not None and len(ff_dims) >= 2

    ff_net = nn.Sequential()
    num_layers = len(ff_dims)
    if num_layers > 2:
        for i in range(1, num_layers-1):
            prior_dim, ff_i_dim = ff_dims[i - 1], ff_dims[i]
            ff_net.add_module('_'.join(['dr', str(i)]), nn.Dropout(dropout))
            nr_hi = nn.Linear(prior_dim, ff_i_dim)
            nr_init(nr_hi.weight)
            ff_net.add_module('_'.join(['ff', str(i + 1)]), nr_hi)

            if BN:  # before applying activation
                assert 'BN' == bn_type  # (port) LTRBatchNorm2 not copied
                bn_i = LTRBatchNorm(ff_i_dim, momentum=0.1, affine=bn_affine, track_running_stats=False)
                ff_net.add_module('_'.join(['bn', str(i + 1)]), bn_i)

            ff_net.add_module('_'.join(['act', str(i + 1)]), get_AF(AF))

    # last layer
    penultimate_dim, out_dim = ff_dims[-2], ff_dims[-1]
    nr_hn = nn.Linear(penultimate_dim, out_dim)
    nr_init(nr_hn.weight)
    ff_net.add_module('_'.join(['ff', str(num_layers)]), nr_hn)

    if apply_tl_af:
        if BN:  # before applying activation
            ff_net.add_module('_'.join(['bn', str(num_layers)]),
                              LTRBatchNorm(out_dim, momentum=0.1, affine=bn_affine, track_running_stats=False))
        ff_net.add_module('_'.join(['act', str(num_layers)]), get_AF(TL_AF))

    return ff_net


# ptranking/base/ranker.py + point_ranker.py + adhoc_ranker.py (the 'pointsf' path) + ltr_adhoc/pairwise/ranknet.py
class RankNet:
    def __init__(self, sf_para_dict=None, model_para_dict=None, weight_decay=1e-3, gpu=False, device=None, bug=None):
        self.id = 'RankNet'
        self.gpu, self.device = gpu, device
        self.sf_para_dict = sf_para_dict
        self.sf_id = sf_para_dict['sf_id']
        self.opt, self.lr = sf_para_dict['opt'], sf_para_dict['lr']
        self.weight_decay = weight_decay
        self.stop_check_freq = 10
        self.sigma = model_para_dict['sigma']
        self.bug = bug

    def init(self):
        self.point_sf = self.ini_pointsf(**self.sf_para_dict[self.sf_para_dict['sf_id']])
        self.config_optimizer()

    def config_optimizer(self):
        assert 'Adam' == self.opt  # (port) the RMS / Adagrad branches not copied
        self.optimizer = optim.Adam(self.point_sf.parameters(), lr = self.lr, weight_decay = self.weight_decay)
        self.scheduler = StepLR(self.optimizer, step_size=20, gamma=0.5)

    def ini_pointsf(self, num_features=None, h_dim=100, out_dim=1, num_layers=3, AF='R', TL_AF='S', apply_tl_af=False,
                    BN=True, bn_type=None, bn_affine=False, dropout=0.1):
        ff_dims = [num_features]
        for i in range(num_layers):
            ff_dims.append(h_dim)
        ff_dims.append(out_dim)

        point_sf = get_stacked_FFNet(ff_dims=ff_dims, AF=AF, TL_AF=TL_AF, apply_tl_af=apply_tl_af, dropout=dropout,
                                     BN=BN, bn_type=bn_type, bn_affine=bn_affine, device=self.device)
        return point_sf

    def forward(self, batch_q_doc_vectors):
        batch_size, num_docs, num_features = batch_q_doc_vectors.size()

        _batch_preds = self.point_sf(batch_q_doc_vectors)
        batch_preds = _batch_preds.view(-1, num_docs)  # [batch_size x num_docs, 1] -> [batch_size, num_docs]
        return batch_preds

    def predict(self, batch_q_doc_vectors):
        return self.forward(batch_q_doc_vectors)

    def eval_mode(self):
        self.point_sf.eval()

    def train_mode(self):
        self.point_sf.train(mode=True)

    def stop_training(self, batch_preds):
        if torch.nonzero(batch_preds, as_tuple=False).size(0) <= 0:
            print('All zero error.\n')
            return True
        if torch.isnan(batch_preds).any():
            print('Including NaN error.')
            return True
        return False

    def train_op(self, batch_q_doc_vectors, batch_std_labels, **kwargs):
        stop_training = False
        batch_preds = self.forward(batch_q_doc_vectors)

        if 'epoch_k' in kwargs and kwargs['epoch_k'] % self.stop_check_freq == 0:
            stop_training = self.stop_training(batch_preds)

        return self.custom_loss_function(batch_preds, batch_std_labels, **kwargs), stop_training

    def ranknet_loss(self, batch_preds, batch_std_labels):
        """(port) the loss lines of custom_loss_function, shared with the Program's loss_fn."""
        batch_p_ij, batch_std_p_ij = get_pairwise_comp_probs(batch_preds=batch_preds, batch_std_labels=batch_std_labels,
                                                             sigma=self.sigma, bug=self.bug)
        _batch_loss = F.binary_cross_entropy(input=torch.triu(batch_p_ij, diagonal=1),
                                             target=torch.triu(batch_std_p_ij, diagonal=1), reduction='none')
        batch_loss = torch.sum(torch.sum(_batch_loss, dim=(2, 1)))
        return batch_loss

    def custom_loss_function(self, batch_preds, batch_std_labels, **kwargs):
        batch_loss = self.ranknet_loss(batch_preds, batch_std_labels)

        if self.bug == "zero_grad_after_backward":
            batch_loss.backward()
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad()
            batch_loss.backward()
        self.optimizer.step()

        return batch_loss

    def ndcg_at_k(self, test_data=None, k=10, presort=False, device='cpu'):
        self.eval_mode() # switch evaluation mode

        num_queries = 0
        sum_ndcg_at_k = torch.zeros(1)
        for batch_ids, batch_q_doc_vectors, batch_std_labels in test_data:
            if batch_std_labels.size(1) < k:
                continue  # skip if the number of documents is smaller than k
            else:
                num_queries += len(batch_ids)
            batch_preds = self.predict(batch_q_doc_vectors)
            _, batch_pred_desc_inds = torch.sort(batch_preds, dim=1, descending=True)

            batch_predict_rankings = torch.gather(batch_std_labels, dim=1, index=batch_pred_desc_inds)
            if presort:
                batch_ideal_rankings = batch_std_labels
            else:
                batch_ideal_rankings, _ = torch.sort(batch_std_labels, dim=1, descending=True)

            batch_ndcg_at_k = torch_ndcg_at_k(batch_predict_rankings=batch_predict_rankings,
                                              batch_ideal_rankings=batch_ideal_rankings, k=k, device=device)
            sum_ndcg_at_k += torch.sum(batch_ndcg_at_k) # due to batch processing

        avg_ndcg_at_k = sum_ndcg_at_k / num_queries
        return avg_ndcg_at_k


# ptranking/data/data_utils.py
def pre_allocate_batch(dict_univ_bin, num_docs_per_batch):
    list_batch_inds = []
    for univ in dict_univ_bin:
        bin = dict_univ_bin[univ]
        bin_length = len(bin)

        if univ * bin_length < num_docs_per_batch: # merge all queries as one batch
            list_batch_inds.append(bin)
        else:
            num_inds_per_batch = num_docs_per_batch // univ  # split with an approximate value (univ < 100 here)
            for i in range(0, bin_length, num_inds_per_batch):
                sub_bin = bin[i: min(i+num_inds_per_batch, bin_length)]
                list_batch_inds.append(sub_bin)
    return list_batch_inds


def synthetic_letor(rng, w, n_queries, bug=None):
    """(port) Presorted queries (qid, doc vectors, labels) of 10 documents with at least one relevant one
    (``min_rele`` 1), batched as ``LETORSampler`` does with a rough batch size of 100 documents."""
    queries = []
    while len(queries) < n_queries:
        n_docs = 10
        x = rng.normal(size=(n_docs, N_FEATURES)).astype(np.float32)
        labels = np.digitize(x @ w + 0.3 * rng.normal(size=n_docs), [0.4, 1.2]).astype(np.float32)
        if labels.sum() < 1:
            continue
        order = np.argsort(-labels, kind="stable")  # train_presort
        x = x if bug == "labels_sorted_without_documents" else x[order]
        queries.append((len(queries), torch.from_numpy(x), torch.from_numpy(labels[order])))
    dict_univ_bin = {}
    for ind, (_, _, labels) in enumerate(queries):
        dict_univ_bin.setdefault(labels.size(0), []).append(ind)
    return [([queries[i][0] for i in inds], torch.stack([queries[i][1] for i in inds]),
             torch.stack([queries[i][2] for i in inds])) for inds in pre_allocate_batch(dict_univ_bin, 100)]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    w = rng.normal(size=N_FEATURES) / np.sqrt(N_FEATURES)
    train_data, vali_data = synthetic_letor(rng, w, 60, bug=bug), synthetic_letor(rng, w, 20)
    sf_para_dict = dict(opt='Adam', lr=0.0001, sf_id='pointsf',
                        pointsf=dict(num_layers=5, AF='GE', TL_AF='S', apply_tl_af=True, BN=True, bn_type='BN',
                                     bn_affine=True, num_features=N_FEATURES))
    ranker = RankNet(sf_para_dict=sf_para_dict, model_para_dict=dict(model_id='RankNet', sigma=1.0),
                        device='cpu', bug=bug)
    ranker.init()
    state = {"epoch_k": 0, "i": len(train_data)}

    def train_step():
        if state["i"] >= len(train_data):  # a new epoch of ranker.train(train_data, epoch_k=...)
            state["epoch_k"], state["i"] = state["epoch_k"] + 1, 0
            ranker.train_mode()
        batch_ids, batch_q_doc_vectors, batch_std_labels = train_data[state["i"]]
        state["i"] += 1
        batch_loss, stop_training = ranker.train_op(batch_q_doc_vectors, batch_std_labels, batch_ids=batch_ids,
                                                    epoch_k=state["epoch_k"], presort=True)
        if state["i"] >= len(train_data):
            ranker.scheduler.step()  # adaptive learning rate with step_size=40, gamma=0.5
        return batch_loss.item()

    def eval_fn(model, batch=None):
        value = float(ranker.ndcg_at_k(test_data=vali_data, k=5, presort=True))
        ranker.train_mode()
        return value

    def loss_fn(outputs, batch_std_labels):
        return ranker.ranknet_loss(outputs.view(-1, batch_std_labels.size(1)), batch_std_labels)

    _, x0, y0 = train_data[0]
    return Program(name="ptranking_ranknet", model=ranker.point_sf, batch=(x0, y0), loss_fn=loss_fn,
                   optimizer=ranker.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the presort of a query orders its labels by relevance but leaves the document vectors in their
    # original order, so every label sits beside another document's features.
    Bug("labels_sorted_without_documents", functools.partial(_build, bug="labels_sorted_without_documents"),
        "learning_ledger", ("TASK",)),
    # classic sign slip: s_j - s_i for s_i - s_j in get_pairwise_comp_probs, so the more relevant document of a pair
    # is pushed below the other.
    Bug("score_differences_reversed", functools.partial(_build, bug="score_differences_reversed"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: zero_grad moved between backward and step inside custom_loss_function (every step applies only the
    # weight decay).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
