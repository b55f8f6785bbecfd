"""Checkpoint-selection policies, declared before a run and applied to its per-epoch curve.

    last                 the final epoch
    best                 the best epoch over the whole budget (post-hoc; biased across unequal budgets)
    best:patience=N      early stopping: stop after N epochs without improvement, keep the best so far
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidArgument

_PATTERN = re.compile(r"^(last|best)(?::patience=(\d+))?$")
FORMS_HELP = "'last', 'best' or 'best:patience=N'"


@dataclass(frozen=True)
class Policy:
    kind: str  # "last" or "best"
    patience: int | None = None

    def __str__(self) -> str:
        return self.kind + (f":patience={self.patience}" if self.patience is not None else "")

    def select(self, curve: Sequence[float], *, higher_is_better: bool = False) -> tuple[int, float]:
        """(epoch, value) this policy keeps from ``curve`` (one value per epoch)."""
        if not curve:
            raise InvalidArgument("Cannot select a checkpoint from an empty curve")
        if self.kind == "last":
            return len(curve) - 1, float(curve[-1])
        better = (lambda a, b: a > b) if higher_is_better else (lambda a, b: a < b)
        best_epoch, best = 0, float(curve[0])
        for epoch, value in enumerate(curve[1:], start=1):
            if self.patience is not None and epoch - best_epoch > self.patience:
                break  # early stopping fired: later epochs were never trained
            if better(float(value), best):
                best_epoch, best = epoch, float(value)
        return best_epoch, best


def parse_policy(text: str) -> Policy:
    m = _PATTERN.match(text.strip())
    if not m or (m.group(1) == "last" and m.group(2) is not None):
        raise InvalidArgument(f"Unknown checkpoint policy {text!r}; write {FORMS_HELP}")
    patience = int(m.group(2)) if m.group(2) is not None else None
    if patience is not None and patience < 1:
        raise InvalidArgument(f"Expected patience >= 1 in {text!r}")
    return Policy(m.group(1), patience)
