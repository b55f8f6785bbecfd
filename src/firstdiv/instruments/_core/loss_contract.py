"""The contract of the evidence's ``loss_fn``: ``loss_fn(outputs, targets)`` returns the loss the program's loop
backpropagates, one scalar floating-point tensor. A loss that is not one is the evidence breaking that contract (a
per-example loss the loop reduces itself, a model that computes its loss when called with other arguments), never a
divergence of the program: the instruments that need it say SKIPPED with :data:`LOSS_CONTRACT`."""

from __future__ import annotations

from typing import Any

import torch

#: what a loss the instruments cannot use (see :func:`loss_problem`) says: the evidence's contract, not the program's fault
LOSS_CONTRACT = ("the instruments need loss_fn(outputs, targets) to return the loss your loop backpropagates, as one "
                 "scalar tensor: reduce a per-example loss inside loss_fn as your loop does, and where the model computes "
                 "its loss when called with other arguments (return_loss=True, labels=...), put them in the batch's inputs")


def loss_problem(loss: Any) -> str | None:
    """None when ``loss`` is a scalar floating-point tensor; otherwise one line saying what it is."""
    if not torch.is_tensor(loss):
        return f"loss_fn returned {'None' if loss is None else type(loss).__name__}, not a tensor; return the loss tensor itself (not loss.item())"
    if loss.numel() != 1:
        return (f"loss_fn returned a tensor of shape {tuple(loss.shape)}, not a scalar; reduce it "
                f"(e.g. .mean()) before backward")
    if not loss.is_floating_point():
        return f"loss_fn returned a {loss.dtype} tensor; gradients need a real floating-point loss"
    return None
