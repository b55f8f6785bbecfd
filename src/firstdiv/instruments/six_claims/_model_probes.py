"""What the REPRESENTATION and EVALUATION claims measure on a copy of the model: how far the output is from affine
in the input, and which modules (Dropout, BatchNorm) depend on train/eval mode (``_eval_probes`` watches them)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._core.batch import fresh, positional


def flat(value: Any) -> torch.Tensor | None:
    parts: list[torch.Tensor] = []
    values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if torch.is_tensor(v) and v.is_floating_point():
            parts.append(v.detach().double().reshape(-1))
    return torch.cat(parts) if parts else None


ALPHA = 0.3  # mixing weight: f(a x1 + (1-a) x2) vs a f(x1) + (1-a) f(x2)


def out_dtype(value: Any) -> torch.dtype | None:
    values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
    return next((v.dtype for v in values if torch.is_tensor(v) and v.is_floating_point()), None)


def affine_error(probe: nn.Module, x: torch.Tensor, axis: int = 0, rebuild: Any = None, grad: bool = False
                 ) -> tuple[float | None, float, int, torch.dtype | None]:
    """Largest ||f(mix) - mix(f)|| / ||f(x1) - f(x2)|| over input pairs (batch vs rolled batch, x vs -x, 3x vs -3x),
    the largest output spread, the number of pairs and the output's dtype. ``rebuild(t)``: the model's inputs holding the
    mixed tensor ``t`` (a tuple input whose other members stay fixed); None: ``t`` itself. ``grad``: run with autograd
    on (a forward that differentiates inside, a Hamiltonian network's), else under no_grad."""
    def run(t: torch.Tensor) -> Any:  # on copies: the model may write its inputs in place
        inputs = fresh(t if rebuild is None else rebuild(t))
        return probe(*inputs) if rebuild is not None and positional(probe, inputs) else probe(inputs)

    others = [x.roll(1, axis)] if x.dim() > axis and x.shape[axis] > 1 else []
    pairs = [(x, o) for o in others if not torch.equal(o, x)] + [(x, -x), (3 * x, -3 * x)]
    a, worst, spread, dtype = ALPHA, 0.0, 0.0, None
    with torch.enable_grad() if grad else torch.no_grad():
        for x1, x2 in pairs:
            o1 = run(x1)
            dtype = dtype or out_dtype(o1)
            f1, f2, fm = flat(o1), flat(run(x2)), flat(run(a * x1 + (1 - a) * x2))
            if f1 is None or f2 is None or fm is None:
                return None, 0.0, len(pairs), dtype
            gap = float((f1 - f2).norm())
            if gap > 0:
                spread = max(spread, gap)
                worst = max(worst, float((fm - (a * f1 + (1 - a) * f2)).norm()) / gap)
    return worst, spread, len(pairs), dtype


def activations(model: nn.Module) -> int:
    kinds = (nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.SiLU, nn.Softplus, nn.Mish, nn.PReLU,
             nn.SELU, nn.Hardtanh, nn.LayerNorm, nn.Softmax)
    return sum(1 for m in model.modules() if isinstance(m, kinds))
