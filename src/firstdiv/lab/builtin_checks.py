"""What `builtin:mlp` accepts: value ranges, finite numbers, and a memory bound on its sizes.

Checked before the store is opened, so a config that could only produce NaN runs, or that the OOM
killer would end without a word, is one line and exit 2 with nothing written.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

CHOICES = {
    "optimizer": ("adamw", "adam", "sgd"),
    "eval_mode": ("eval", "train"),
    "eval_reduction": ("mean", "sum"),
}
_FLOATS = ("noise", "val_noise", "dropout", "lr", "weight_decay", "eval_input_scale")
_SIZES = ("n_train", "n_val", "in_dim", "hidden", "classes", "batch_size")


def validate(config: dict[str, Any]) -> None:
    """Raise ValueError naming the key when a value is outside what the workload supports."""
    if config["val_noise"] is not None and (isinstance(config["val_noise"], bool)
                                            or not isinstance(config["val_noise"], (int, float))):
        raise ValueError(f"`val_noise` must be a number in [0, 1) or null but got {config['val_noise']!r}")
    for key in _FLOATS:  # nan passes every comparison below unnoticed, and inf trains to nan
        if config[key] is not None and not math.isfinite(config[key]):
            raise ValueError(f"`{key}` must be a finite number but got {config[key]}")
    for key in (*_SIZES, "epochs"):
        if config[key] < 1:
            raise ValueError(f"`{key}` must be >= 1 but got {config[key]}")
    if config["classes"] < 2:
        raise ValueError(f"`classes` must be >= 2 but got {config['classes']}")
    for key in ("noise", "val_noise", "dropout"):
        value = config[key]
        if value is not None and not 0.0 <= value < 1.0:
            raise ValueError(f"`{key}` must be in [0, 1) but got {value}")
    if config["lr"] <= 0:
        raise ValueError(f"`lr` must be > 0 but got {config['lr']}")
    if config["weight_decay"] < 0:
        raise ValueError(f"`weight_decay` must be >= 0 but got {config['weight_decay']}")
    if config["data_seed"] < 0:
        raise ValueError(f"`data_seed` must be >= 0 but got {config['data_seed']}")
    if not 0 <= config["eval_subset"] <= config["n_val"]:
        raise ValueError(f"`eval_subset` must be in [0, n_val={config['n_val']}] but got {config['eval_subset']}")
    if config["device"] != "cpu" and not _device_available(config["device"]):
        raise ValueError(f"`device` {config['device']!r} is not available here (torch.cuda.is_available() is "
                         f"{torch.cuda.is_available()}); use device=cpu")
    if config["threads"] < 1:
        raise ValueError(f"`threads` must be >= 1 but got {config['threads']}")
    for key, allowed in CHOICES.items():
        if config[key] not in allowed:
            raise ValueError(f"`{key}` must be one of {', '.join(allowed)} but got {config[key]!r}")
    _check_memory(config)


def footprint(config: dict[str, Any]) -> int:
    """Bytes one seed needs, roughly: the data (and numpy's float64 draft of it), the parameters with
    their gradients and Adam state, an epoch's dropout draws and a forward pass over the validation set.
    A batch_size above n_train is one full batch (the training loop slices the epoch's order), so it counts
    as n_train rows."""
    n, d, h, k = config["n_train"] + config["n_val"], config["in_dim"], config["hidden"], config["classes"]
    params = d * h + h * h + h * k + 2 * h + k
    rows = max(min(config["batch_size"], config["n_train"]), config["n_val"])
    return 12 * n * d + 8 * n * k + 16 * params + 4 * config["n_train"] * h + 16 * rows * (2 * h + k)


def _check_memory(config: dict[str, Any]) -> None:
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on POSIX: no bound to check against
        return
    need = footprint(config)
    if need > memory:
        sizes = ", ".join(f"{key}={config[key]}" for key in _SIZES)
        raise ValueError(f"{sizes} needs about {need / 2**30:.3g} GiB per run, more than this machine's "
                         f"{memory / 2**30:.3g} GiB of memory; make the sizes smaller")


def _device_available(device: str) -> bool:
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError):
        return False
    return True
