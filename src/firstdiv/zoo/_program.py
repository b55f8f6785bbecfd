"""How a zoo program is put together: a :class:`Recipe` (the user's code, part by part) becomes a
:class:`Program` (the user's live objects) under a seed.

Every random value comes from local ``torch.Generator`` objects derived from the seed: one for the
data, one for the weights, one for the loader's shuffling. Module constructors still draw their
default initialization from the global generator, so construction runs under ``fork_rng`` and every
parameter is then re-drawn from the local weight generator: the global RNG ends as it started and
the program does not depend on it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..errors import InvalidArgument

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
EvalFn = Callable[[nn.Module, Batch], float]
TaskProbe = Callable[[torch.Tensor], torch.Tensor]
StepFactory = Callable[[nn.Module, torch.optim.Optimizer, LossFn, Callable[[], Batch]], Callable[[], float]]

#: offsets that give the data, the weights and the loader their own generator streams for one seed
_DATA, _WEIGHTS, _SHUFFLE = 0, 10_007, 20_011


@dataclass(frozen=True)
class Data:
    """A program's training data: ``inputs`` and ``targets`` (first dimension = examples) and the rule."""

    inputs: torch.Tensor
    targets: torch.Tensor
    task_probe: TaskProbe | None


def no_user_code(model: nn.Module, gen: torch.Generator) -> None:
    """No user code at this point of the script."""


@dataclass(frozen=True)
class Recipe:
    """The user's program, part by part; a fault replaces one or two parts (``dataclasses.replace``).

    ``prepare`` is user code between building the model and building the optimizer (custom
    initialization, replacing a head); ``after_optimizer`` is user code that runs after it.
    ``loader`` (optional) turns the data into ``(DataLoader, fixed batch)``; ``train_step`` then draws
    the next batch from the loader each call. Otherwise the whole data is the one fixed batch.
    """

    data: Callable[[torch.Generator], Data]
    model: Callable[[], nn.Module]
    loss_fn: LossFn
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    train_step: StepFactory
    eval_fn: EvalFn
    prepare: Callable[[nn.Module, torch.Generator], None] = no_user_code
    after_optimizer: Callable[[nn.Module, torch.Generator], None] = no_user_code
    loader: Callable[[Data, torch.Generator], tuple[DataLoader, Batch]] | None = None

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, eq=False)
class Program:
    """A built reference program: the user's live objects, named by the DESIGN evidence keys.

    ``batch`` is a fixed ``(inputs, targets)`` batch; ``train_step()`` does one full user step
    (zero_grad/forward/loss/backward/step, as this program's code writes it) and returns ``loss.item()``.
    """

    reference: str
    fault: str | None
    seed: int
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: Batch
    loss_fn: LossFn
    train_step: Callable[[], float]
    eval_fn: EvalFn
    task_probe: TaskProbe | None = None
    loader: DataLoader | None = None

    def evidence(self) -> dict[str, Any]:
        """The DESIGN evidence keys this program has (those that are not None)."""
        keys = ("model", "batch", "loss_fn", "optimizer", "loader", "train_step", "eval_fn", "task_probe")
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}

    def train(self, steps: int = 50) -> list[float]:
        """Run the user's loop: ``train_step()`` ``steps`` times; returns the loss of every step."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise InvalidArgument(f"Expected `steps` to be a non-negative int but got {steps!r}")
        return [self.train_step() for _ in range(steps)]

    def __repr__(self) -> str:
        fault = "" if self.fault is None else f", fault={self.fault!r}"
        return f"Program({self.reference!r}{fault}, seed={self.seed})"


def _reachable_modules(root: nn.Module) -> list[nn.Module]:
    """Every module the Python object graph reaches from ``root``: registered children and modules
    held in plain list/tuple/dict attributes (a fault may keep blocks in a list)."""
    found: dict[int, nn.Module] = {}
    stack = [root]
    while stack:
        module = stack.pop()
        if id(module) in found:
            continue
        found[id(module)] = module
        stack.extend(module.children())
        for value in vars(module).values():
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
            stack.extend(item for item in items if isinstance(item, nn.Module))
    return list(found.values())


def _draw(module: nn.Module, gen: torch.Generator) -> None:
    """PyTorch's default initialization for one module's own parameters, drawn from ``gen``."""
    with torch.no_grad():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            bound = 1.0 / math.sqrt(module.weight[0].numel())  # = kaiming_uniform(a=sqrt(5)) and the bias rule
            for param in module.parameters(recurse=False):
                param.uniform_(-bound, bound, generator=gen)
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=gen)
        elif isinstance(module, (nn.LayerNorm, nn.BatchNorm2d)):
            module.reset_parameters()  # ones and zeros: nothing random
        elif any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"zoo cannot seed parameters of {type(module).__name__}; add it to _draw")


def seeded(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """Re-draw every parameter reachable from ``module`` from ``gen``; returns ``module``."""
    for sub in _reachable_modules(module):
        _draw(sub, gen)
    return module


def _next_batch(data: Data, loader: DataLoader | None) -> Callable[[], Batch]:
    if loader is None:
        batch = (data.inputs, data.targets)
        return lambda: batch

    def epochs() -> Iterator[Batch]:  # the user's `for epoch ...: for inputs, targets in loader:` one step at a time
        while True:
            yield from loader

    stream = epochs()
    return lambda: next(stream)


def assemble(reference: str, fault: str | None, seed: int, recipe: Recipe) -> Program:
    """Run the recipe's user code in order under ``seed``; the global RNG is left as it was."""
    data = recipe.data(torch.Generator().manual_seed(seed + _DATA))
    weights = torch.Generator().manual_seed(seed + _WEIGHTS)
    with torch.random.fork_rng(devices=[]):  # constructors' default-init draws are thrown away
        model = seeded(recipe.model(), weights)
        recipe.prepare(model, weights)
        optimizer = recipe.optimizer(model)
        recipe.after_optimizer(model, weights)
    loader, batch = (None, (data.inputs, data.targets)) if recipe.loader is None else \
        recipe.loader(data, torch.Generator().manual_seed(seed + _SHUFFLE))
    train_step = recipe.train_step(model, optimizer, recipe.loss_fn, _next_batch(data, loader))
    return Program(reference, fault, seed, model, optimizer, batch, recipe.loss_fn, train_step,
                   recipe.eval_fn, data.task_probe, loader)
