"""The faults of speed, memory, compilation and deployment: programs that learn correctly but are slow,
grow, recompile or change when deployed.

Like :mod:`firstdiv.zoo.faults`, each is the user's code with the bug in the line a user would get
wrong: a Dataset that decodes slowly in the main process, a loss history that keeps every step's
graph alive, a compiled model fed sequences of changing length with dynamic shapes off, and a
regression whose weights span a range per-tensor int8 cannot hold.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import TensorDataset

from . import references
from ._program import Batch, Data, LossFn, Recipe

#: the pause of the slow Dataset's per-example "decode", in seconds
DECODE_SECONDS = 0.02
#: the sequence lengths of the batches the compiled language model serves (all within its context)
VARYING_LENGTHS = (4, 8, references.CONTEXT)
#: the unit the regression's second feature is recorded in (kilometres, where the model was fit on metres)
FEATURE_UNIT = 1e-3


class SlowDecodeDataset(TensorDataset):
    """fault ``sleeping_getitem``: every example is "decoded" (read and resized) in ``__getitem__``."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        time.sleep(DECODE_SECONDS)  # bug: a slow per-example decode in the main process (num_workers=0)
        return super().__getitem__(index)


def step_keeping_history(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
                         next_batch: Callable[[], Batch]) -> Callable[[], float]:
    """fault ``appended_loss``: the standard step, logging every loss to ``history`` for a plot."""
    history: list[torch.Tensor] = []

    def train_step() -> float:
        inputs, targets = next_batch()
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        history.append(loss)  # bug: the tensor, not loss.item(): every step's graph stays alive
        return loss.item()
    return train_step


def kilometre_regression_data(gen: torch.Generator) -> Data:
    """fault ``int8_divergence``: the regression data with its second feature recorded in kilometres."""
    data = references.regression_data(gen)
    unit = torch.tensor([1.0, FEATURE_UNIT])

    def rule(inputs: torch.Tensor) -> torch.Tensor:
        return data.task_probe(inputs / unit)

    return Data(data.inputs * unit, data.targets, rule)


def kilometre_weights(model: nn.Module, gen: torch.Generator) -> None:
    """fault ``int8_divergence``: the "pretrained" fc1 weights for the kilometre feature, 1000x the rest.

    The eager model computes the clean function exactly; per-tensor int8 takes fc1's scale from these
    weights and rounds every other fc1 weight to zero."""
    with torch.no_grad():
        model.fc1.weight[:, 1] /= FEATURE_UNIT  # bug: a weight range of ~1000x that one int8 scale per tensor cannot hold


INJECTIONS: dict[str, Callable[[Recipe], Recipe]] = {
    "sleeping_getitem": lambda r: r.replace(loader=functools.partial(references.cnn_loader, dataset=SlowDecodeDataset)),
    "appended_loss": lambda r: r.replace(train_step=step_keeping_history),
    "recompiling_shapes": lambda r: r.replace(
        compile_case=functools.partial(references.lm_compile_case, lengths=VARYING_LENGTHS, dynamic=False)),
    "int8_divergence": lambda r: r.replace(data=kilometre_regression_data, prepare=kilometre_weights),
}
