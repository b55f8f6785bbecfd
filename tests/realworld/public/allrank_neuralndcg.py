# ruff: noqa: UP004, C408
"""Listwise learning to rank with allegro/allRank: a fully connected input block and a self-attention Transformer
encoder over the documents of a slate (padding masked in the attention), a Tanh output layer giving one score per
document, trained with NeuralNDCG (Pobrotyn & Bialobrzeski 2021: NeuralSort's relaxed permutation matrices,
Sinkhorn-scaled, applied to the true gains, the negated NDCG as the loss); Adam with a StepLR schedule per epoch,
NDCG@k on the validation slates after every epoch. The configuration is the repository's reproducibility config
``neuralndcg_atmax.json`` (NeuralNDCG at the maximum rank).

Source: https://github.com/allegro/allRank
Commit: c88475661cb72db292d13283fdbc4f2ae6498ee4
Files: ``allrank/main.py`` (``run``), ``allrank/training/train_utils.py`` (``loss_batch``, ``metric_on_batch``,
``fit``), ``allrank/models/losses/neuralNDCG.py`` (``neuralNDCG``), ``allrank/models/losses/loss_utils.py``
(``sinkhorn_scaling``, ``deterministic_neural_sort``), ``allrank/models/metrics.py`` (``ndcg``, ``dcg``),
``allrank/data/dataset_loading.py`` (``FixLength``, ``ToTensor``, ``LibSVMDataset``, ``create_data_loaders``),
``allrank/models/model.py`` and ``allrank/models/transformer.py`` (copied into ``_allrank_lib.py``),
``reproducibility/configs/neuralndcg_web30k/neuralndcg_atmax.json``
License: Apache-2.0 (full text in LICENSES/allegro-allRank.txt)
Domain: learning to rank (listwise, self-attention over the slate, differentiable NDCG loss)

Kept as written: the model blocks and ``make_model`` (Glorot init of every matrix; fc_model one layer without
activation or input norm, transformer with one head and dropout 0.1, no positional encoding, post_model Tanh with
``d_output`` 1), ``neuralNDCG`` (deterministic NeuralSort, temperature 1, powered relevancies, ``k`` the slate
length, Sinkhorn scaling with tol 1e-6 and 50 iterations, the padding masked out of the permutation matrices, IDCG
from ``dcg``), ``dcg`` / ``ndcg``, ``FixLength`` (padding with ``PADDED_Y_VALUE`` -1, sampling longer slates),
``ToTensor``, ``LibSVMDataset``'s grouping of documents by query id, ``loss_batch`` (the padding mask
``yb == PADDED_Y_VALUE``; backward, step, then ``zero_grad``), ``fit``'s epoch (``model.train()``, the shuffled
training loader, ``scheduler.step()`` after the epoch, ``model.eval()`` and ``no_grad`` for validation), Adam lr
1e-3, StepLR(step_size 50, gamma 0.1), ``torch.manual_seed(42)`` / ``np.random.seed(42)`` replaced by the seed.

Deviations from the original:
- MSLR-WEB30K is not here (nor sklearn's svmlight loader): ``LibSVMDataset`` gets a dense synthetic dataset made
  from ``seed``: 96 training and 24 validation queries of 6 to 16 documents with 16 features each; the graded
  relevance 0-4 of a document is the quantile bin of a hidden linear score of its features plus a query-level
  offset shared by its documents (learnable: the ranking follows the features), so validation NDCG rises;
- sizes for 2 CPU cores: 136 features -> 16, fc size 96 -> 32, d_ff 384 -> 64, slate_length 240 -> 12 (longer
  training slates are sampled by ``FixLength`` as written), batch_size 64 -> 16; ``num_workers`` 0;
- torchvision's ``transforms.Compose`` is a two-line function composing ``FixLength`` and ``ToTensor``; the
  device helper always answers CPU; ``positional_encoding`` (``null``) is not built;
- ``fit``'s epoch loop is unrolled: one ``train_step`` is one ``loss_batch`` with the optimizer (``model.train()``
  and a new loader iterator at the start of an epoch, ``scheduler.step()`` when it ends) and returns its loss;
  ``eval_fn`` is ``model.eval()`` and the mean NDCG@5 of ``metric_on_batch`` over the validation loader under
  ``no_grad``; tensorboard, logging, early stopping (patience 100 > epochs) and model saving are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _allrank_lib import make_model
from _api import Bug, Program

PADDED_Y_VALUE = -1
PADDED_INDEX_VALUE = -1
DEFAULT_EPS = 1e-10
N_FEATURES = 16  # (port) 136 in MSLR-WEB30K


def get_torch_device():
    return torch.device("cpu")  # (port) CUDA when available


# allrank/models/metrics.py
def ndcg(y_pred, y_true, ats=None, gain_function=lambda x: torch.pow(2, x) - 1, padding_indicator=PADDED_Y_VALUE,
         filler_value=1.0):
    idcg = dcg(y_true, y_true, ats, gain_function, padding_indicator)
    ndcg_ = dcg(y_pred, y_true, ats, gain_function, padding_indicator) / idcg
    idcg_mask = idcg == 0
    ndcg_[idcg_mask] = filler_value  # if idcg == 0 , set ndcg to filler_value
    return ndcg_


def __apply_mask_and_get_true_sorted_by_preds(y_pred, y_true, padding_indicator=PADDED_Y_VALUE):
    mask = y_true == padding_indicator

    y_pred[mask] = float('-inf')
    y_true[mask] = 0.0

    _, indices = y_pred.sort(descending=True, dim=-1)
    return torch.gather(y_true, dim=1, index=indices)


def dcg(y_pred, y_true, ats=None, gain_function=lambda x: torch.pow(2, x) - 1, padding_indicator=PADDED_Y_VALUE):
    y_true = y_true.clone()
    y_pred = y_pred.clone()

    actual_length = y_true.shape[1]

    if ats is None:
        ats = [actual_length]
    ats = [min(at, actual_length) for at in ats]

    true_sorted_by_preds = __apply_mask_and_get_true_sorted_by_preds(y_pred, y_true, padding_indicator)

    discounts = (torch.tensor(1) / torch.log2(torch.arange(true_sorted_by_preds.shape[1], dtype=torch.float) + 2.0)).to(
        device=true_sorted_by_preds.device)

    gains = gain_function(true_sorted_by_preds)

    discounted_gains = (gains * discounts)[:, :np.max(ats)]

    cum_dcg = torch.cumsum(discounted_gains, dim=1)

    ats_tensor = torch.tensor(ats, dtype=torch.long) - torch.tensor(1)

    dcg = cum_dcg[:, ats_tensor]

    return dcg


# allrank/models/losses/loss_utils.py
def sinkhorn_scaling(mat, mask=None, tol=1e-6, max_iter=50):
    if mask is not None:
        mat = mat.masked_fill(mask[:, None, :] | mask[:, :, None], 0.0)
        mat = mat.masked_fill(mask[:, None, :] & mask[:, :, None], 1.0)

    for _ in range(max_iter):
        mat = mat / mat.sum(dim=1, keepdim=True).clamp(min=DEFAULT_EPS)
        mat = mat / mat.sum(dim=2, keepdim=True).clamp(min=DEFAULT_EPS)

        if torch.max(torch.abs(mat.sum(dim=2) - 1.)) < tol and torch.max(torch.abs(mat.sum(dim=1) - 1.)) < tol:
            break

    if mask is not None:
        mat = mat.masked_fill(mask[:, None, :] | mask[:, :, None], 0.0)

    return mat


def deterministic_neural_sort(s, tau, mask):
    dev = get_torch_device()

    n = s.size()[1]
    one = torch.ones((n, 1), dtype=torch.float32, device=dev)
    s = s.masked_fill(mask[:, :, None], -1e8)
    A_s = torch.abs(s - s.permute(0, 2, 1))
    A_s = A_s.masked_fill(mask[:, :, None] | mask[:, None, :], 0.0)

    B = torch.matmul(A_s, torch.matmul(one, torch.transpose(one, 0, 1)))

    temp = [n - m + 1 - 2 * (torch.arange(n - m, device=dev) + 1) for m in mask.squeeze(-1).sum(dim=1)]
    temp = [t.type(torch.float32) for t in temp]
    temp = [torch.cat((t, torch.zeros(n - len(t), device=dev))) for t in temp]
    scaling = torch.stack(temp).type(torch.float32).to(dev)  # type: ignore

    s = s.masked_fill(mask[:, :, None], 0.0)
    C = torch.matmul(s, scaling.unsqueeze(-2))

    P_max = (C - B).permute(0, 2, 1)
    P_max = P_max.masked_fill(mask[:, :, None] | mask[:, None, :], -np.inf)
    P_max = P_max.masked_fill(mask[:, :, None] & mask[:, None, :], 1.0)
    sm = torch.nn.Softmax(-1)
    P_hat = sm(P_max / tau)
    return P_hat


# allrank/models/losses/neuralNDCG.py (the deterministic variant of the config; stochastic_neural_sort not copied)
def neuralNDCG(y_pred, y_true, padded_value_indicator=PADDED_Y_VALUE, temperature=1., powered_relevancies=True, k=None,
               stochastic=False, n_samples=32, beta=0.1, log_scores=True, bug=None):
    dev = get_torch_device()

    if k is None:
        k = y_true.shape[1]

    mask = (y_true == padded_value_indicator)
    P_hat = deterministic_neural_sort(y_pred.unsqueeze(-1), tau=temperature, mask=mask).unsqueeze(0)

    # Perform sinkhorn scaling to obtain doubly stochastic permutation matrices
    P_hat = sinkhorn_scaling(P_hat.view(P_hat.shape[0] * P_hat.shape[1], P_hat.shape[2], P_hat.shape[3]),
                             mask.repeat_interleave(P_hat.shape[0], dim=0), tol=1e-6, max_iter=50)
    P_hat = P_hat.view(int(P_hat.shape[0] / y_pred.shape[0]), y_pred.shape[0], P_hat.shape[1], P_hat.shape[2])

    # Mask P_hat and apply to true labels, ie approximately sort them
    P_hat = P_hat.masked_fill(mask[None, :, :, None] | mask[None, :, None, :], 0.)
    y_true_masked = y_true.masked_fill(mask, 0.).unsqueeze(-1).unsqueeze(0)
    if powered_relevancies:
        y_true_masked = torch.pow(2., y_true_masked) - 1.

    ground_truth = torch.matmul(P_hat, y_true_masked).squeeze(-1)
    discounts = (torch.tensor(1.) / torch.log2(torch.arange(y_true.shape[-1], dtype=torch.float) + 2.)).to(dev)
    discounted_gains = ground_truth * discounts

    if powered_relevancies:
        idcg = dcg(y_true, y_true, ats=[k]).permute(1, 0)
    else:
        idcg = dcg(y_true, y_true, ats=[k], gain_function=lambda x: x).permute(1, 0)

    discounted_gains = discounted_gains[:, :, :k]
    ndcg = discounted_gains.sum(dim=-1) / (idcg + DEFAULT_EPS)
    idcg_mask = idcg == 0.
    ndcg = ndcg.masked_fill(idcg_mask.repeat(ndcg.shape[0], 1), 0.)

    assert (ndcg < 0.).sum() >= 0, "every ndcg should be non-negative"
    if idcg_mask.all():
        return torch.tensor(0.)

    mean_ndcg = ndcg.sum() / ((~idcg_mask).sum() * ndcg.shape[0])  # type: ignore
    if bug == "loss_sign_dropped":
        return mean_ndcg
    return -1. * mean_ndcg  # -1 cause we want to maximize NDCG


# allrank/data/dataset_loading.py
class ToTensor(object):
    def __call__(self, sample):
        x, y, indices = sample
        return torch.from_numpy(x).type(torch.float32), torch.from_numpy(y).type(torch.float32), torch.from_numpy(indices).type(torch.long)


class FixLength(object):
    def __init__(self, dim_given, bug=None):
        assert isinstance(dim_given, int)
        self.dim_given = dim_given
        self.bug = bug

    def __call__(self, sample):
        sample_size = len(sample[1])
        if sample_size < self.dim_given:  # when expected dimension is larger than number of observation in instance do the padding
            fixed_len_x, fixed_len_y, indices = self._pad(sample, sample_size)
        else:  # otherwise do the sampling
            fixed_len_x, fixed_len_y, indices = self._sample(sample, sample_size)

        return fixed_len_x, fixed_len_y, indices

    def _sample(self, sample, sample_size):
        indices = np.random.choice(sample_size, self.dim_given, replace=False)
        fixed_len_y = sample[1][indices]
        if fixed_len_y.sum() == 0:
            if sample[1].sum() == 1:
                indices = np.concatenate([np.random.choice(indices, self.dim_given - 1, replace=False), [np.argmax(sample[1])]])
                fixed_len_y = sample[1][indices]
            elif sample[1].sum() > 0:
                return self._sample(sample, sample_size)
        if self.bug == "features_not_sampled_with_labels":
            fixed_len_x = sample[0][:self.dim_given]
        else:
            fixed_len_x = sample[0][indices]
        return fixed_len_x, fixed_len_y, indices

    def _pad(self, sample, sample_size):
        fixed_len_x = np.pad(sample[0], ((0, self.dim_given - sample_size), (0, 0)), "constant")
        fixed_len_y = np.pad(sample[1], (0, self.dim_given - sample_size), "constant", constant_values=PADDED_Y_VALUE)
        indices = np.pad(np.arange(0, sample_size), (0, self.dim_given - sample_size), "constant", constant_values=PADDED_INDEX_VALUE)
        return fixed_len_x, fixed_len_y, indices


def compose(transforms):
    """(port) torchvision.transforms.Compose."""
    return lambda sample: functools.reduce(lambda s, t: t(s), transforms, sample)


class LibSVMDataset(Dataset):
    def __init__(self, X, y, query_ids, transform=None):
        _, indices, counts = np.unique(query_ids, return_index=True, return_counts=True)
        groups = np.cumsum(counts[np.argsort(indices)])

        self.X_by_qid = np.split(X, groups)[:-1]
        self.y_by_qid = np.split(y, groups)[:-1]

        self.longest_query_length = max([len(a) for a in self.X_by_qid])
        self.transform = transform

    def __len__(self):
        return len(self.X_by_qid)

    def __getitem__(self, idx):
        X = self.X_by_qid[idx]
        y = self.y_by_qid[idx]

        sample = X, y

        if self.transform:
            sample = self.transform(sample)

        return sample


def synthetic_queries(rng, w, n_queries):
    """(port) The data: queries of 6-16 documents, relevance 0-4 from a hidden linear score plus a query offset."""
    X, y, qids = [], [], []
    for q in range(n_queries):
        n_docs = int(rng.integers(6, 17))
        x = rng.normal(size=(n_docs, N_FEATURES))
        score = x @ w + rng.normal() * 0.5 + 0.3 * rng.normal(size=n_docs)
        X.append(x)
        y.append(np.digitize(score, [-0.5, 0.5, 1.2, 2.0]).astype(np.float64))
        qids.append(np.full(n_docs, q))
    return np.concatenate(X), np.concatenate(y), np.concatenate(qids)


# allrank/training/train_utils.py
def loss_batch(model, loss_func, xb, yb, indices, gradient_clipping_norm, opt=None, bug=None):
    mask = (yb == PADDED_Y_VALUE)
    if bug == "padding_mask_dropped":
        mask = torch.zeros_like(yb, dtype=torch.bool)
    loss = loss_func(model(xb, mask, indices), yb)

    if opt is not None:
        loss.backward()
        if gradient_clipping_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping_norm)
        opt.step()
        opt.zero_grad()

    return loss.item(), len(xb)


def metric_on_batch(metric, model, xb, yb, indices):
    mask = (yb == PADDED_Y_VALUE)
    return metric(model.score(xb, mask, indices), yb)


def _build(seed, bug=None):
    torch.manual_seed(seed)  # (port) 42 in allrank/main.py
    np.random.seed(seed)
    config = dict(
        model=dict(fc_model=dict(sizes=[32], input_norm=False, activation=None, dropout=0.0),
                   transformer=dict(N=2, d_ff=64, h=1, positional_encoding=None, dropout=0.1),
                   post_model=dict(output_activation="Tanh", d_output=1)),
        data=dict(batch_size=16, slate_length=12), optimizer=dict(lr=0.001),
        lr_scheduler=dict(step_size=50, gamma=0.1), training=dict(gradient_clipping_norm=None),
        loss=dict(temperature=1.0, k=None, powered_relevancies=True, stochastic=False))

    rng = np.random.default_rng(seed)
    w = rng.normal(size=N_FEATURES) / np.sqrt(N_FEATURES)
    train_ds = LibSVMDataset(*synthetic_queries(rng, w, 96))
    val_ds = LibSVMDataset(*synthetic_queries(rng, w, 24))
    train_ds.transform = compose([FixLength(config["data"]["slate_length"], bug=bug), ToTensor()])
    val_ds.transform = compose([FixLength(int(val_ds.longest_query_length)), ToTensor()])
    n_features = N_FEATURES
    train_dl = DataLoader(train_ds, batch_size=config["data"]["batch_size"], num_workers=0, shuffle=True)
    val_dl = DataLoader(val_ds, batch_size=config["data"]["batch_size"], num_workers=0, shuffle=False)

    model = make_model(n_features=n_features, **config["model"])
    optimizer = optim.Adam(params=model.parameters(), **config["optimizer"])
    loss_func = functools.partial(neuralNDCG, **config["loss"], bug=bug)
    scheduler = optim.lr_scheduler.StepLR(optimizer, **config["lr_scheduler"])
    gradient_clipping_norm = config["training"]["gradient_clipping_norm"]
    state = {"it": None, "n": 0}

    def train_step():
        if state["it"] is None:
            model.train()
            state["it"], state["n"] = iter(train_dl), 0
        xb, yb, indices = next(state["it"])
        state["n"] += 1
        loss, _ = loss_batch(model, loss_func, xb, yb, indices, gradient_clipping_norm, optimizer, bug=bug)
        if state["n"] == len(train_dl):  # the epoch ends
            scheduler.step()
            state["it"] = None
        return loss

    def eval_fn(model, batch=None):
        model.eval()
        with torch.no_grad():
            values = torch.cat([metric_on_batch(functools.partial(ndcg, ats=[5]), model, xb, yb, indices)
                                for xb, yb, indices in val_dl])
        model.train()
        return float(values.mean())

    xb, yb, indices = next(iter(DataLoader(train_ds, batch_size=16, shuffle=False)))
    batch = ({"x": xb, "mask": yb == PADDED_Y_VALUE, "indices": indices}, yb)
    return Program(name="allrank_neuralndcg", model=model, batch=batch, loss_fn=loss_func, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the -1 of neuralNDCG's return dropped, so Adam minimizes the relaxed NDCG (the ranking is
    # pushed to put the least relevant documents first).
    Bug("loss_sign_dropped", functools.partial(_build, bug="loss_sign_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: a slate longer than slate_length has its labels sampled at random indices but its features cut to the
    # first slate_length documents, so the labels no longer belong to the feature rows beside them.
    Bug("features_not_sampled_with_labels", functools.partial(_build, bug="features_not_sampled_with_labels"),
        "learning_ledger", ("TASK",)),
    # classic: the padding mask not passed to the model (an all-False mask), so every document attends to the
    # zero-padded slots and a document's score depends on how much padding its slate has.
    Bug("padding_mask_dropped", functools.partial(_build, bug="padding_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
]
