"""The scores a model's own loss reads, kept where no module outputs them: a model that computes its loss inside
``forward`` (``model(ids, return_loss=True)``) may build its logits with a plain matmul against a tied embedding and
hand them to ``F.cross_entropy`` without any module returning them. While open, :class:`LossInputs` (a torch-function
mode) sees each ``cross_entropy`` / ``nll_loss`` call whose scores are laid out ``[B, C, T']`` against ``[B, T']``
targets (or flattened, ``[B * T', C]`` against ``[B * T']``) for a ``T'`` of interest, and routes the scores through a
``[B, T', C]`` view it keeps (with its gradient retained when asked): the same values reach the loss, and the view is
a site aligned with the sequence, read like a module's output."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_LOSSES = (F.cross_entropy, F.nll_loss)


class LossInputs(TorchFunctionMode):
    def __init__(self, keep: Any, lengths: set[int], batch: int, grad: bool) -> None:
        super().__init__()
        self.keep, self.lengths, self.batch, self.grad, self.calls = keep, lengths, batch, grad, 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _LOSSES and len(args) >= 2:
            routed = self._routed(args[0], args[1])
            if routed is not None:
                args = (routed, *args[1:])
        return func(*args, **kwargs)

    def _routed(self, x: Any, t: Any) -> torch.Tensor | None:
        if not (torch.is_tensor(x) and torch.is_tensor(t) and x.is_floating_point()) or t.is_floating_point():
            return None
        n = self.batch
        if x.dim() == 3 and t.dim() == 2 and x.shape[0] == n and tuple(t.shape) == (n, x.shape[2]) \
                and x.shape[2] in self.lengths:
            view, back = x.transpose(1, 2), (lambda v: v.transpose(1, 2))
        elif x.dim() == 2 and t.dim() == 1 and x.shape[0] == t.shape[0] and x.shape[0] % n == 0 \
                and x.shape[0] // n in self.lengths:
            view, back = x.reshape(n, x.shape[0] // n, x.shape[1]), (lambda v: v.reshape(-1, v.shape[-1]))
        else:
            return None
        if self.grad and view.requires_grad:
            view.retain_grad()
        self.keep("<the loss's scores>", self.calls, view)
        self.calls += 1
        return back(view)
