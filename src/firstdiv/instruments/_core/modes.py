"""Facts about a module's train/eval switch that several instruments read: the drop probability a module was built
with (torch's dropout layers, or a custom module whose forward reads ``self.training`` and holds a drop rate, such as
stochastic depth)."""

from __future__ import annotations

from torch import nn


def drop_rate(m: nn.Module) -> float:
    """``p`` of torch's dropout layers, or a float ``drop*`` attribute in (0, 1) of a module whose own ``forward`` reads
    ``self.training`` (a drop path); 0 for anything else."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return float(m.p)
    code = getattr(getattr(type(m), "forward", None), "__code__", None)
    if code is None or "training" not in code.co_names:
        return 0.0
    rates = [v for k, v in vars(m).items() if "drop" in k.lower() and isinstance(v, float) and 0 < v < 1]
    return rates[0] if rates else 0.0
