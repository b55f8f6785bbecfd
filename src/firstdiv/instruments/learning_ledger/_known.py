"""TASK's ``task_probe``: the labels the probe gives for the batch's examples, from a callable (``inputs -> expected
targets``) or from a ``(known_inputs, known_targets)`` pair whose inputs are found among the batch's (one tensor, or a
tuple of them for a model with several inputs)."""

from __future__ import annotations

from typing import Any

import torch

from .._core.task import Ctx, err, shape


def expected_from_probe(ctx: Ctx) -> tuple[torch.Tensor | None, torch.Tensor | None, str]:
    """``(expected, rows, note)``: the probe's labels and which batch rows they cover (None = all)."""
    probe, inputs = ctx.task_probe, ctx.batch.inputs
    if callable(probe):
        try:
            return torch.as_tensor(probe(inputs)), None, "task_probe(inputs)"
        except Exception as exc:  # noqa: BLE001 - user code; its failure is a finding
            return None, None, f"task_probe raised {err(exc)}"
    known_x, known_y = _rows(probe[0], 0), torch.as_tensor(probe[1])
    x = _rows(inputs, ctx.batch_axis)
    if x is None or known_x is None:
        return None, None, "a (known_inputs, known_targets) probe needs tensor inputs; pass a callable task_probe"
    kx = known_x.to(x.device)
    if x.shape[1] != kx.shape[1]:
        return None, None, f"known_inputs {shape(probe[0])} do not have the batch inputs' per-example shape {shape(inputs)}"
    rows, which = [], []
    for i in range(x.shape[0]):
        hit = ((kx - x[i]).abs().amax(dim=1) <= 1e-6).nonzero()
        if hit.numel():
            rows.append(i)
            which.append(int(hit[0]))
    if not rows:
        return None, None, f"none of the {x.shape[0]} batch inputs equals any of the {kx.shape[0]} known inputs"
    ky = known_y.to(x.device)
    return ky[which], torch.tensor(rows, device=x.device), f"{len(rows)} batch rows found among the known inputs"


def _rows(x: Any, axis: int) -> torch.Tensor | None:
    """One float64 row per example of a tensor, or of a tuple/list of tensors (several inputs, concatenated)."""
    parts = list(x) if isinstance(x, (tuple, list)) else [x]
    if not parts or not all(torch.is_tensor(p) and p.dim() > 0 for p in parts):
        return None
    flat = [p.detach().movedim(axis if p.dim() > axis else 0, 0) for p in parts]
    if len({f.shape[0] for f in flat}) != 1:
        return None
    return torch.cat([f.reshape(f.shape[0], -1).to(torch.float64) for f in flat], dim=1)
