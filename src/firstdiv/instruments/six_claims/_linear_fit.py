"""Whether the task needs more than a linear map of the input, from the batch alone: an affine output is a bug
only when it does. Regression: an F-test (scipy) of the least-squares linear fit against the same fit plus
squares of each input and random ReLU features (numpy generator, fixed seed); the targets need a nonlinear map when the extra features
explain a significant share of what the linear fit leaves. Classification: whether the batch's labels are
linearly separable (least squares on one-hot labels, then a feasibility LP with scipy's HiGHS)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._core.batch import Batch

SEED = 0
P_VALUE = 1e-3  # the random features must explain the linear residual at this significance
MIN_RESIDUAL = 0.05  # ... and the linear fit must leave at least this fraction of the targets' variance
LP_LIMIT = 2_000_000  # variables x constraints above which the separability LP is not attempted


def _examples(x: torch.Tensor, axis: int, n: int) -> np.ndarray | None:
    if x.layout != torch.strided or x.dim() <= axis or x.shape[axis] != n:
        return None
    return x.detach().movedim(axis, 0).reshape(n, -1).double().cpu().numpy()


def linear_fit(batch: Batch, axis: int) -> dict[str, Any]:
    """``{"needs_nonlinear": True/False/None, ...evidence}``; None when the batch cannot tell."""
    x, t = batch.inputs, batch.targets
    if not (torch.is_tensor(x) and torch.is_tensor(t)) or t.layout != torch.strided or t.dim() == 0:
        return {"needs_nonlinear": None, "why": "targets are not one tensor"}
    n = int(t.shape[0])
    xs = _examples(x, axis, n)
    if xs is None:
        return {"needs_nonlinear": None, "why": "inputs and targets do not share the example axis"}
    design = np.hstack([xs, np.ones((n, 1))])
    ev: dict[str, Any] = {"examples": n, "features": int(xs.shape[1])}
    if n <= design.shape[1]:
        return {**ev, "needs_nonlinear": None, "why": f"{n} examples in {xs.shape[1]} input dimensions: any targets fit linearly"}
    if t.is_floating_point():
        return {**ev, **_regression(design, t.detach().reshape(n, -1).double().cpu().numpy())}
    if t.dim() == 1 and t.dtype != torch.bool:
        return {**ev, **_separable(design, t.detach().cpu().numpy().astype(np.int64))}
    return {**ev, "needs_nonlinear": None, "why": f"targets of shape {tuple(t.shape)} are neither values nor class labels"}


def _rss(design: np.ndarray, y: np.ndarray) -> float:
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    return float(((y - design @ coef) ** 2).sum())


def _regression(design: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    n, p = design.shape
    total = float(((y - y.mean(0)) ** 2).sum())
    if total == 0:
        return {"needs_nonlinear": False, "residual_fraction": 0.0, "why": "constant targets"}
    rss1 = _rss(design, y)
    m = min(2 * (p - 1), (n - p) // 2)
    frac = rss1 / total
    ev: dict[str, Any] = {"residual_fraction": frac, "min_residual_fraction": MIN_RESIDUAL}
    if m < 1:
        return {**ev, "needs_nonlinear": frac > MIN_RESIDUAL or None, "why": "too few examples for the F-test"}
    rng = np.random.default_rng(SEED)
    xs = design[:, :-1]
    z = (xs - xs.mean(0)) / np.where(xs.std(0) > 0, xs.std(0), 1.0)
    relu = np.maximum(z @ rng.standard_normal((p - 1, p - 1)) / np.sqrt(p - 1) + rng.standard_normal(p - 1) * 0.5, 0.0)
    feats = np.hstack([z ** 2, relu])[:, :m]  # per-input squares, then random ReLU features
    rss2 = _rss(np.hstack([design, feats]), y)
    from scipy import stats  # lazily: importing scipy.stats costs ~0.5 s, and only a linear model gets here

    k = y.shape[1]
    dof = k * (n - p - m)
    f = ((rss1 - rss2) / (k * m)) / max(rss2 / max(dof, 1), 1e-300)
    pval = float(stats.f.sf(f, k * m, max(dof, 1)))
    ev.update(random_features=m, f_statistic=float(f), p_value=pval, p_threshold=P_VALUE)
    return {**ev, "needs_nonlinear": bool(frac > MIN_RESIDUAL and pval < P_VALUE)}


def _separable(design: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    classes = np.unique(y)
    if classes.size < 2:
        return {"needs_nonlinear": False, "classes": int(classes.size), "why": "one class in the batch"}
    idx = np.searchsorted(classes, y)
    n, p, k = design.shape[0], design.shape[1], classes.size
    onehot = np.eye(k)[idx]
    coef = np.linalg.lstsq(design, onehot, rcond=None)[0]
    ev: dict[str, Any] = {"classes": int(k)}
    if bool(((design @ coef).argmax(1) == idx).all()):
        return {**ev, "needs_nonlinear": False, "separable": True, "how": "least squares on one-hot labels"}
    if p * k * n * (k - 1) > LP_LIMIT:
        return {**ev, "needs_nonlinear": None, "why": "batch too large for the separability LP"}
    from scipy import optimize  # lazily, as above

    rows = []
    for i in range(n):  # (w_y - w_c) . x_i >= 1 for every other class c, as -(...) <= -1
        for c in range(k):
            if c != idx[i]:
                r = np.zeros((k, p))
                r[idx[i]], r[c] = -design[i], design[i]
                rows.append(r.reshape(-1))
    res = optimize.linprog(np.zeros(k * p), A_ub=np.array(rows), b_ub=-np.ones(len(rows)), bounds=(None, None),
                           method="highs")
    if res.status not in (0, 2):
        return {**ev, "needs_nonlinear": None, "why": f"separability LP: {res.message}"}
    return {**ev, "needs_nonlinear": res.status == 2, "separable": res.status == 0, "how": "linear program (HiGHS)"}
