"""One step of Lightning's automatic optimization driven by hand, as ``Trainer.fit`` runs it for a module with one
optimizer (there is no trainer loop to call here): the batch from the module's training loader (a new epoch, with
``epoch_end`` and ``module.train()``, when it runs out), then ``optimizer_step`` with the closure Lightning builds --
``training_step``, the ``optimizer_zero_grad`` hook, ``backward``. Shared by the Lightning ports whose loop has nothing
else in it; ports whose loop adds gradient clipping, a per-step scheduler or manual optimization keep their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def automatic_step(module: Any, optimizer: Any, loader: Any,
                   epoch_end: Callable[[], None] | None = None) -> Callable[[], Any]:
    """``train_step()``: one optimizer step of ``module`` on the next batch of ``loader``; returns the loss."""
    state = {"it": None, "epoch": 0, "batch_idx": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch
                if epoch_end is not None:
                    epoch_end()
                state["epoch"] += 1
            module.train()
            state["it"], state["batch_idx"] = iter(loader), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        result = {}

        def closure():
            loss = module.training_step(batch, batch_idx)
            module.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            module.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        module.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    return train_step
