"""An attribute batch read as a dict: torchtext's ``Batch`` (``batch.text``, ``batch.label``), a ``SimpleNamespace``
or a dataclass instance hands its tensors as attributes, where ``split_batch`` reads a dict's keys."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def tensor_fields(batch: Any) -> dict[str, Any]:
    """The public attributes of a plain attribute container that hold a tensor or a non-empty tuple/list of tensors,
    by name; {} for a module, a class, or an object without such attributes."""
    if isinstance(batch, (nn.Module, type)) or not hasattr(batch, "__dict__"):
        return {}
    return {k: v for k, v in vars(batch).items() if not k.startswith("_") and (torch.is_tensor(v) or (
        isinstance(v, (tuple, list)) and v and all(torch.is_tensor(x) for x in v)))}
