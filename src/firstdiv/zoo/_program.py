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
import functools
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
#: what attention_check receives: ``(attention module, positional inputs, options)``
AttentionCase = tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]
#: what the speed, memory, compilation and deployment instruments receive (see :class:`Program`)
LoaderCase = tuple[DataLoader, Callable[[Any], float], dict[str, Any]]
PerfCase = tuple[Callable[[Any], float], Batch, dict[str, Any]]
CompileCase = tuple[Callable[..., Any], list[torch.Tensor], dict[str, Any]]
VariantsCase = tuple[dict[str, Any], torch.Tensor, dict[str, Any]]

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

    The last parts are what the instruments get, not user code: ``contracts`` (module path, or "" for
    the output -> named axes, for tensor_trace), ``features_at`` (the module whose input is the
    penultimate activation, for feature_space), ``attention`` (``(model, inputs) -> AttentionCase``
    for attention_check), ``compile_case`` (``(model, data) -> CompileCase`` for compile_ledger: the
    user's real input sequence and torch.compile options) and ``variants_case`` (``(model, inputs) ->
    VariantsCase`` for compare_outputs; called on first access of :attr:`Program.variants_case`).
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
    contracts: dict[str, str] | None = None
    features_at: str | None = None
    attention: Callable[[nn.Module, torch.Tensor], AttentionCase] | None = None
    compile_case: Callable[[nn.Module, Data], CompileCase] | None = None
    variants_case: Callable[[nn.Module, torch.Tensor], VariantsCase] | None = None

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, eq=False)
class Program:
    """A built reference program: the user's live objects, named by the DESIGN evidence keys.

    ``batch`` is a fixed ``(inputs, targets)`` batch; ``train_step()`` does one full user step
    (zero_grad/forward/loss/backward/step, as this program's code writes it) and returns ``loss.item()``.

    What the shape and meaning instruments get (None where it does not apply):
    ``inputs`` is what ``model(...)`` receives for ``batch``; ``contracts`` maps a module path (""
    for the model output) to named axes such as ``"B T D"`` that hold on the clean reference;
    ``attention`` is ``(attention module, (hidden [B, T, E],), {"num_heads": H, "causal": True})``;
    ``features`` are the penultimate activations ``[N, D]`` for ``batch``, taken under no_grad in eval
    mode from the model as built (None when the forward cannot run). The ``pipeline`` reference has no
    model: it has ``sample`` (one raw example), ``stages`` (``[(name, callable), ...]``, each mapping a
    sample to the next), ``stage_probes`` and ``stage_contracts`` for stage_trace.

    What the speed, memory, compilation and deployment instruments get (None where it does not apply).
    ``step(batch)`` below is the program's own ``train_step`` code run on a given batch (the same
    closure, fed that batch instead of the next one):
    ``loader_case = (loader, step, {"batches": 8})`` for loader_timing (programs with a loader);
    ``perf_case = (step, batch, {"model", "optimizer", "loss_fn", "repeats": 6, "warmup": 2})`` for
    performance_ledger; ``compile_case = (model, inputs_seq, options)`` for compile_ledger (the
    transformer: its real input sequence and torch.compile options such as ``backend``/``dynamic``);
    ``variants_case = (variants, inputs, {"tolerances": ...})`` for compare_outputs (the regression: its
    eager model and an int8 copy from :func:`firstdiv.variants`, built on first
    access from the model as it is then, and kept).
    """

    reference: str
    fault: str | None
    seed: int
    model: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    batch: Batch | None = None
    loss_fn: LossFn | None = None
    train_step: Callable[[], float] | None = None
    eval_fn: EvalFn | None = None
    task_probe: TaskProbe | None = None
    loader: DataLoader | None = None
    inputs: torch.Tensor | None = None
    contracts: dict[str, str] | None = None
    attention: AttentionCase | None = None
    features: torch.Tensor | None = None
    sample: Any = None
    stages: Any = None
    stage_probes: Any = None
    stage_contracts: Any = None
    loader_case: LoaderCase | None = None
    perf_case: PerfCase | None = None
    compile_case: CompileCase | None = None
    variants_builder: Callable[[], VariantsCase] | None = dataclasses.field(default=None, repr=False)

    @functools.cached_property
    def variants_case(self) -> VariantsCase | None:
        """``(variants, inputs, options)`` for compare_outputs, built by ``variants_builder`` on first access."""
        return None if self.variants_builder is None else self.variants_builder()

    def evidence(self) -> dict[str, Any]:
        """The DESIGN evidence keys this program has (those that are not None)."""
        keys = ("model", "batch", "loss_fn", "optimizer", "loader", "train_step", "eval_fn", "task_probe")
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}

    def train(self, steps: int = 50) -> list[float]:
        """Run the user's loop: ``train_step()`` ``steps`` times; returns the loss of every step."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise InvalidArgument(f"Expected `steps` to be a non-negative int but got {steps!r}")
        if self.train_step is None:
            raise InvalidArgument(f"Expected a program with a training loop but {self.reference!r} has none (train_step is None)")
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


class Feed:
    """What the user's ``train_step`` draws its batch from: the program's next batch, or the one batch
    :meth:`step` hands it. One ``train_step`` closure then serves both the user's loop and ``step(batch)``."""

    def __init__(self, next_batch: Callable[[], Batch]) -> None:
        self.next_batch, self.given = next_batch, None

    def __call__(self) -> Batch:
        return self.next_batch() if self.given is None else self.given

    def step(self, train_step: Callable[[], float]) -> Callable[[Any], float]:
        """``step(batch)``: ``train_step()`` run on ``batch``; returns what it returns."""
        def step(batch: Any) -> float:
            self.given = batch
            try:
                return train_step()
            finally:
                self.given = None
        return step


def _features(model: nn.Module, inputs: torch.Tensor, at: str | None) -> torch.Tensor | None:
    """The input of module ``at`` (the penultimate activations) for ``inputs``, as ``[N, D]``; computed
    under no_grad in eval mode, every module's mode restored. None when ``at`` is missing or the
    forward raises (a fault such as wrong_flatten)."""
    module = None if at is None else dict(model.named_modules()).get(at)
    if module is None:
        return None
    captured: list[torch.Tensor] = []
    hook = module.register_forward_pre_hook(lambda mod, args: captured.append(args[0]))
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            model(inputs)
    except RuntimeError:
        return None
    finally:
        hook.remove()
        for m, training in modes:
            m.training = training
    return captured[0].reshape(-1, captured[0].shape[-1]) if captured else None


def _views(model: nn.Module, batch: Batch, recipe: Recipe) -> dict[str, Any]:
    """The Program fields for the shape and meaning instruments; contracts keep only module paths the
    model registers (a fault may have moved or hidden one)."""
    names = dict(model.named_modules())
    contracts = None if recipe.contracts is None else \
        {path: axes for path, axes in recipe.contracts.items() if path == "" or path in names}
    inputs = batch[0]
    attention = None if recipe.attention is None else recipe.attention(model, inputs)
    return {"inputs": inputs, "contracts": contracts, "attention": attention,
            "features": _features(model, inputs, recipe.features_at)}


def _cases(model: nn.Module, optimizer: torch.optim.Optimizer, data: Data, loader: DataLoader | None, batch: Batch,
           recipe: Recipe, step: Callable[[Any], float]) -> dict[str, Any]:
    """The Program fields for the speed, memory, compilation and deployment instruments."""
    perf = {"model": model, "optimizer": optimizer, "loss_fn": recipe.loss_fn, "repeats": 6, "warmup": 2}
    return {"loader_case": None if loader is None else (loader, step, {"batches": 8}),
            "perf_case": (step, batch, perf),
            "compile_case": None if recipe.compile_case is None else recipe.compile_case(model, data),
            "variants_builder": None if recipe.variants_case is None else functools.partial(recipe.variants_case, model, batch[0])}


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
    feed = Feed(_next_batch(data, loader))
    train_step = recipe.train_step(model, optimizer, recipe.loss_fn, feed)
    return Program(reference, fault, seed, model, optimizer, batch, recipe.loss_fn, train_step,
                   recipe.eval_fn, data.task_probe, loader, **_views(model, batch, recipe),
                   **_cases(model, optimizer, data, loader, batch, recipe, feed.step(train_step)))


def assemble_pipeline(reference: str, fault: str | None, seed: int, parts: dict[str, Any]) -> Program:
    """A data-pipeline program: no model or training loop, a raw ``sample`` and its ``stages``."""
    return Program(reference, fault, seed, sample=parts["sample"], stages=parts["stages"],
                   stage_probes=parts.get("probes"), stage_contracts=parts.get("contracts"))
