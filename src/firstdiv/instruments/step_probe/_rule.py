"""The plain-SGD rule check's arithmetic: ``delta == -lr * grad`` within ``rtol`` plus the float rounding of the
update as torch performs it. A dense gradient is added in one rounding; a sparse gradient (``Embedding(sparse=True)``)
is added once per stored index, so a row looked up k times in the batch is rounded k times: its allowance scales with
k, and a departure at that size is float noise, not another update rule."""

from __future__ import annotations

import math

import torch


def roundings(grad: torch.Tensor) -> torch.Tensor | float:
    """How many roundings the update of each element takes: 1 for a dense gradient; for a sparse one, the number
    of times its index is stored (duplicates are added one by one), broadcast over the dense dimensions."""
    if not grad.is_sparse:
        return 1.0
    n = grad.sparse_dim()
    counts = torch.sparse_coo_tensor(grad._indices(), torch.ones(grad._nnz(), dtype=torch.float64),
                                     tuple(grad.shape[:n])).to_dense()
    return counts.reshape(tuple(counts.shape) + (1,) * (grad.dim() - n)).clamp(min=1.0)


def rule_error(before: torch.Tensor, after: torch.Tensor, grad: torch.Tensor, lr: float, rtol: float) -> tuple[float, bool]:
    """Max relative error of ``delta`` against ``-lr * grad`` and whether it exceeds rtol plus float rounding."""
    b, a, g = before.double(), after.double(), grad.to_dense().double()
    expected, delta = -lr * g, a - b
    err = (delta - expected).abs()
    eps = torch.finfo(after.dtype).eps if after.is_floating_point() else 0.0
    allowed = rtol * expected.abs() + eps * (a.abs() + expected.abs()) * roundings(grad)
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    rel = float(err.max()) / scale if scale > 0 else (0.0 if float(err.max(initial=0.0)) == 0 else math.inf)
    return rel, bool((err > allowed).any())
