"""How firstdiv calls the user's own step once per batch (the loader timing's consumer, the geometry instruments'
confirmation): ``train_step(batch)`` when it takes the batch, else one call of the zero-argument step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def batch_consumer(train_step: Callable[..., Any]) -> Callable[[Any], Any]:
    """``train_step`` itself when it takes the batch, else a consumer that runs one step of the user's loop."""
    import inspect

    try:
        params = [p for p in inspect.signature(train_step).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):  # a builtin without a signature: call it as the learning chain does
        params = []
    if params:
        return train_step

    def consume(_batch: Any) -> Any:
        return train_step()
    return consume
