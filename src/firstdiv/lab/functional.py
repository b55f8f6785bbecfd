"""Workloads that describe themselves functionally, and the loop that trains a stack of their seeds.

A plain workload ``train(seed, config, rec)`` is a black box that firstdiv can only call once per
seed. A functional workload returns a description instead (the data, one seed's parameter init from
a generator, the forward function, the loss, the optimizer settings) and firstdiv writes the loop.
The same loop trains a stack of S seeds: S = 1 when the serial or process backend calls ``train``,
many under ``--backend vectorized``. Every seed draws its init, batch order and random draws from its
own generators and no operation mixes seeds, so a seed's record does not depend on its stack::

    import torch
    import firstdiv
    from firstdiv.lab.functional import Functional, vectorizable

    @firstdiv.workload(defaults={"lr": 0.01, "epochs": 5, "batch_size": 64})
    @vectorizable
    def train(config):
        x, y, x_val, y_val = load()                  # a pure function of config
        return Functional(
            data=(x, y, x_val, y_val),
            init=lambda gen: [torch.randn(8, 3, generator=gen) * 0.3, torch.zeros(3)],
            apply=lambda params, x: x @ params[0] + params[1],   # ONE seed: x [B, 8] -> logits [B, 3]
            epochs=config["epochs"], batch_size=config["batch_size"], lr=config["lr"])

``train`` is then an ordinary workload that also runs under ``--backend vectorized``. Randomness
inside training comes from ``draws`` (e.g. dropout masks from the seed's own generator), never from
the global RNG. Everything the run record needs is recorded by the loop: data identity, eval
contract, per-epoch curves, per-step gradient norms, throughput and the trained state's hash.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._globals import preserved_globals
from ..errors import InvalidArgument
from .record import content_hash

Tensor = torch.Tensor
SpecFn = Callable[[dict[str, Any]], "Functional"]
#: The attribute ``vectorizable`` sets on the train function it builds.
MARK = "__firstdiv_functional__"
_OPTIMIZERS = ("adamw", "adam", "sgd")
_LOSSES = ("cross_entropy", "mse")
_STREAMS = ("init", "order", "dropout", "eval")
#: Each seed's row of the flat parameter buffer is padded to a multiple of this many values.
_ALIGN = 64


@dataclass(frozen=True)
class Functional:
    """One seed's training, as data and functions.

    ``data``: ``(x_train, y_train, x_val, y_val)``, the same for every seed.
    ``init(gen)``: one seed's parameters (a list of tensors), drawn only from ``gen``.
    ``apply(params, x)``: logits ``[B, ...]`` for one seed's params and inputs ``x [B, ...]``; firstdiv
    maps it over the stack with ``torch.func.vmap``. ``stacked=True`` says it already takes stacked
    params ``[S, ...]`` and inputs ``[S, B, ...]`` (and ``r`` [S, B, ...]). With ``draws``, the signature is
    ``apply(params, x, r)``: ``r`` holds the batch's rows of ``draws(gen, n)`` (or ``draws(gen, n, out=row)``
    filling a buffer row in place, when it takes ``out``), which is called once per
    epoch with the seed's own generator (dropout masks, say), and is None at evaluation.
    ``loss``: ``"cross_entropy"``, ``"mse"`` or a per-seed ``(logits, y) -> scalar`` (mean over the batch).
    ``evaluate(params, gens)``: optional stacked evaluation returning ``{metric: tensor [S]}``; the
    default reports val_loss (and val_acc for cross_entropy) on the whole validation set.
    """

    data: tuple[Tensor, Tensor, Tensor, Tensor]
    init: Callable[[torch.Generator], Sequence[Tensor]]
    apply: Callable[..., Tensor]
    epochs: int = 1
    batch_size: int = 32
    lr: float = 1e-3
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    loss: str | Callable[[Tensor, Tensor], Tensor] = "cross_entropy"
    draws: Callable[[torch.Generator, int], Tensor] | None = None
    stacked: bool = False
    evaluate: Callable[[list[Tensor], list[torch.Generator]], dict[str, Tensor]] | None = None
    data_identity: str | None = None
    eval_contract: dict[str, Any] | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not (isinstance(self.data, (tuple, list)) and len(self.data) == 4
                and all(isinstance(t, Tensor) for t in self.data)):
            raise InvalidArgument("Expected Functional `data` to be four tensors (x_train, y_train, x_val, y_val)")
        if self.data[0].shape[0] != self.data[1].shape[0] or self.data[2].shape[0] != self.data[3].shape[0]:
            raise InvalidArgument(f"Functional `data`: inputs and targets differ in length "
                                  f"({self.data[0].shape[0]} vs {self.data[1].shape[0]} train, "
                                  f"{self.data[2].shape[0]} vs {self.data[3].shape[0]} val)")
        for key in ("epochs", "batch_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Expected Functional `{key}` to be an integer >= 1 but got {value!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise InvalidArgument(f"Expected Functional `lr` to be a number > 0 but got {self.lr!r}")
        if self.optimizer not in _OPTIMIZERS:
            raise InvalidArgument(f"Expected Functional `optimizer` to be one of {', '.join(_OPTIMIZERS)} "
                                  f"but got {self.optimizer!r}")
        if not callable(self.loss) and self.loss not in _LOSSES:
            raise InvalidArgument(f"Expected Functional `loss` to be {' or '.join(_LOSSES)} or a callable "
                                  f"(logits, y) -> scalar but got {self.loss!r}")
        if not (callable(self.init) and callable(self.apply)):
            raise InvalidArgument("Functional needs callables `init(gen) -> params` and `apply(params, x) -> logits`")


def vectorizable(spec: SpecFn) -> Callable[[int, dict[str, Any], Any], None]:
    """Turn ``spec(config) -> Functional`` into a workload ``train(seed, config, rec)``.

    The result runs in every backend: one seed at a time (a stack of one) in serial and process,
    many seeds at once in vectorized. Stack it under ``@firstdiv.workload(...)`` for typed defaults.
    """

    @functools.wraps(spec)
    def train(seed: int, config: dict[str, Any], rec: Any) -> None:
        train_stack(build(spec, config), [seed], [rec])

    setattr(train, MARK, spec)
    return train


def spec_of(fn: Any) -> SpecFn | None:
    """The ``config -> Functional`` function behind a workload, or None for a plain one."""
    return getattr(fn, MARK, None)


def build(spec: SpecFn, config: dict[str, Any]) -> Functional:
    """Call ``spec(config)`` with the global RNGs seeded to 0, so data built from them is the same for
    every seed and every stack; the caller's RNG states are restored."""
    with fixed_global_rng(0):
        out = spec(dict(config))
    if not isinstance(out, Functional):
        raise InvalidArgument(f"Expected {getattr(spec, '__name__', 'the spec')}(config) to return a Functional "
                              f"but got {type(out).__name__}")
    return out


def fixed_global_rng(seed: int) -> Any:
    """Global RNGs seeded from ``seed`` inside, the caller's states restored afterwards."""
    return preserved_globals(seed=seed)


def generators(seed: int) -> dict[str, torch.Generator]:
    """One torch generator per random stream of a run (init, order, dropout, eval), from the seed alone."""
    states = np.random.SeedSequence(seed).generate_state(len(_STREAMS), dtype=np.uint64)
    return {name: torch.Generator().manual_seed(int(states[i]) & ((1 << 63) - 1)) for i, name in enumerate(_STREAMS)}


class Stack:
    """S seeds' parameters in one flat leaf tensor ``flat`` [S, L].

    L is padded to a multiple of 64 values, so every value of seed s sits at the same offset within
    a vector register whatever S is: elementwise kernels treat it identically in a stack of one or
    of many. ``views()`` gives apply() its params, each [S, *shape] (a view into ``flat``).
    """

    def __init__(self, fs: Functional, gens: list[dict[str, torch.Generator]]) -> None:
        per_seed = [_param_list(fs.init(g["init"])) for g in gens]
        self.shapes = [p.shape for p in per_seed[0]]
        if any([p.shape for p in ps] != self.shapes for ps in per_seed):
            raise InvalidArgument("Functional init(gen) returned different parameter shapes for different seeds; "
                                  "only the values may depend on the generator")
        self.sizes = [p.numel() for p in per_seed[0]]
        total = sum(self.sizes)
        self.pad = -total % _ALIGN
        rows = [torch.cat([p.reshape(-1) for p in ps] + [ps[0].new_zeros(self.pad)]) for ps in per_seed]
        self.flat = torch.stack(rows).to(fs.device).requires_grad_()

    def views(self) -> list[Tensor]:
        s = self.flat.shape[0]
        pieces = self.flat.split([*self.sizes, self.pad], dim=1)
        return [piece.view(s, *shape) for piece, shape in zip(pieces, self.shapes)]

    def seed(self, i: int) -> list[Tensor]:
        """Seed i's trained parameters, detached copies shaped as init returned them."""
        pieces = self.flat[i].detach().split([*self.sizes, self.pad])
        return [piece.view(shape).clone() for piece, shape in zip(pieces, self.shapes)]


def _param_list(params: Any) -> list[Tensor]:
    if not isinstance(params, (list, tuple)) or not params or not all(isinstance(p, Tensor) for p in params):
        raise InvalidArgument(f"Expected Functional init(gen) to return a non-empty list of tensors but got "
                              f"{type(params).__name__}")
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise InvalidArgument(f"Expected Functional init(gen) to return tensors of one floating dtype but got "
                              f"{', '.join(sorted(map(str, dtypes)))}")
    return [p.detach() for p in params]


def forward(fs: Functional, params: list[Tensor], x: Tensor, r: Tensor | None) -> Tensor:
    """Stacked logits [S, B, ...] from stacked params and stacked inputs [S, B, ...] (r: [S, B, ...] or None)."""
    args = (params, x) if fs.draws is None else (params, x, r)
    if fs.stacked:
        return fs.apply(*args)
    dims = (0, 0) if fs.draws is None else (0, 0, None if r is None else 0)
    try:
        return torch.func.vmap(fs.apply, in_dims=dims)(*args)
    except RuntimeError as exc:
        if "randomness" not in str(exc):
            raise
        raise InvalidArgument("apply() drew random numbers from the global RNG, which would tie a seed to its "
                              "stack; draw them from the seed's own generator with Functional(draws=lambda gen, n: "
                              "...) and take them as apply(params, x, r)") from None


def losses(loss: str | Callable[[Tensor, Tensor], Tensor], out: Tensor, y: Tensor, reduction: str = "mean") -> Tensor:
    """Per-seed loss [S] of stacked outputs [S, B, ...] against targets [S, B, ...]; no reduction mixes seeds."""
    s = out.shape[0]
    if loss == "cross_entropy":  # seeds as the batch axis, classes moved to axis 1: [S, C, B, ...]
        per = F.cross_entropy(out.movedim(2, 1), y, reduction="none").reshape(s, -1)
    elif loss == "mse":
        per = (out - y).square().reshape(s, -1)
    else:
        per = torch.func.vmap(loss)(out, y).reshape(s, 1)
    return per.sum(1) if reduction == "sum" else per.mean(1)


def predicted(logits: Tensor) -> Tensor:
    """The predicted class, ``logits.argmax(-1)`` (the first of tied maxima), through ``max``: argmax
    over a few classes is several times slower on the CPU."""
    return logits.max(dim=-1).indices


@torch.no_grad()
def evaluate(fs: Functional, params: list[Tensor], gens: list[dict[str, torch.Generator]]) -> dict[str, Tensor]:
    """Validation metrics per seed, each a tensor [S]."""
    if fs.evaluate is not None:
        return fs.evaluate(params, [g["eval"] for g in gens])
    s = params[0].shape[0]
    x = fs.data[2].to(fs.device).expand(s, *fs.data[2].shape)
    y = fs.data[3].to(fs.device).expand(s, *fs.data[3].shape)
    out = forward(fs, params, x, None)
    metrics = {"val_loss": losses(fs.loss, out, y)}
    if fs.loss == "cross_entropy":
        metrics["val_acc"] = (predicted(out) == y).to(torch.float64).reshape(s, -1).mean(1)
    return metrics


class _Optimizer:
    """AdamW, Adam and SGD over a stack's flat parameters [S, L]: elementwise, so no value of one seed
    touches another's. Adam and AdamW run torch.optim's fused kernel (``fused=True``: one pass over the
    stack per step) where this torch has it for the device, else torch.optim's single-tensor arithmetic."""

    def __init__(self, fs: Functional, flat: Tensor) -> None:
        self.fs, self.flat, self.step = fs, flat, 0
        self.m, self.v = torch.zeros_like(flat), torch.zeros_like(flat)
        self.fused = fs.optimizer != "sgd" and _has_fused(fs.optimizer, flat.device.type)
        self.steps = torch.zeros((), dtype=torch.float32, device=flat.device)

    @torch.no_grad()
    def update(self, grad: Tensor) -> None:
        fs, param = self.fs, self.flat
        self.step += 1
        if self.fused:
            self.steps.add_(1)
            _FUSED[fs.optimizer]([param], [grad], [self.m], [self.v], [], [self.steps], lr=fs.lr, beta1=fs.betas[0],
                                 beta2=fs.betas[1], weight_decay=fs.weight_decay, eps=fs.eps, amsgrad=False,
                                 maximize=False)
            return
        if fs.optimizer == "adamw":
            param.mul_(1 - fs.lr * fs.weight_decay)
        elif fs.weight_decay:
            grad = grad.add(param, alpha=fs.weight_decay)
        if fs.optimizer == "sgd":
            param.add_(grad, alpha=-fs.lr)
            return
        b1, b2 = fs.betas
        self.m.lerp_(grad, 1 - b1)
        self.v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (self.v.sqrt() / math.sqrt(1 - b2 ** self.step)).add_(fs.eps)
        param.addcdiv_(self.m, denom, value=-fs.lr / (1 - b1 ** self.step))


_FUSED: dict[str, Callable[..., None]] = {"adamw": getattr(torch, "_fused_adamw_", None),
                                           "adam": getattr(torch, "_fused_adam_", None)}


@functools.cache
def _has_fused(optimizer: str, device: str) -> bool:
    """Whether torch.optim's fused kernel for ``optimizer`` runs on ``device`` here (CPU: torch >= 2.4)."""
    kernel = _FUSED[optimizer]
    if kernel is None:
        return False
    t = [torch.zeros(1, device=device) for _ in range(4)]
    try:
        kernel([t[0]], [t[1]], [t[2]], [t[3]], [], [torch.ones((), device=device)], lr=0.1, beta1=0.9, beta2=0.99,
               weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def _epoch_inputs(fs: Functional, gens: list[dict[str, torch.Generator]], n: int,
                  buf: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Each seed's batch order [S, n] and draws [S, n, ...] for one epoch (``buf``: last epoch's draws, reused)."""
    order = torch.stack([torch.randperm(n, generator=g["order"]) for g in gens]).to(fs.device)
    if fs.draws is None:
        return order, None
    if buf is not None and buf.device.type == "cpu" and _fills(fs.draws):  # each seed's row drawn in place
        for row, g in zip(buf, gens):
            got = fs.draws(g["dropout"], n, out=row)
            if got is not row:  # it took `out` but returned its own tensor: that one holds the draws
                row.copy_(got)
        return order, buf
    rows = [fs.draws(g["dropout"], n) for g in gens]
    if buf is None or buf.shape[1:] != rows[0].shape or buf.dtype != rows[0].dtype:
        return order, torch.stack(rows).to(fs.device)
    return order, torch.stack(rows, out=buf) if buf.device == rows[0].device else buf.copy_(torch.stack(rows))


def _fills(draws: Callable[..., Tensor]) -> bool:
    """Whether ``draws`` takes ``out=``: it can then fill last epoch's buffer row by row, without a copy."""
    try:
        return "out" in inspect.signature(draws).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _epoch(fs: Functional, stack: Stack, opt: _Optimizer, gens: list[dict[str, torch.Generator]],
           x: Tensor, y: Tensor, buf: Tensor | None) -> tuple[list[list[float]], list[list[float]], Tensor | None]:
    """One epoch for the stack: per-step losses and gradient norms, [steps][S], and the draws buffer."""
    n, bs = x.shape[0], fs.batch_size
    order, draws = _epoch_inputs(fs, gens, n, buf)
    step_losses, step_norms = [], []
    for start in range(0, n, bs):
        idx = order[:, start : start + bs]
        r = None if draws is None else draws[:, start : start + bs]
        loss = losses(fs.loss, forward(fs, stack.views(), rows(x, idx), r), rows(y, idx))
        (grad,) = torch.autograd.grad(loss.sum(), stack.flat)  # d(sum)/d(loss_s) = 1: each seed gets its own gradient
        step_norms.append(torch.linalg.vector_norm(grad, dim=1))
        opt.update(grad)
        step_losses.append(loss.detach())
    return torch.stack(step_losses).tolist(), torch.stack(step_norms).tolist(), draws


def rows(t: Tensor, idx: Tensor) -> Tensor:
    """``t[idx]`` for a stack's batch indices ``idx`` [S, B]: [S, B, ...] (index_select, several times
    faster than advanced indexing with a 2-D index)."""
    return t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


def train_stack(fs: Functional, seeds: Sequence[int], recs: Sequence[Any]) -> list[list[Tensor]]:
    """Train ``seeds`` as one stack, logging each seed to its own recorder; returns each seed's params.

    Per seed: data identity, eval contract, per-epoch train_loss and validation metrics, per-step
    gradient norms, examples and its equal share of the stack's training seconds, and the state hash.
    """
    data_id = fs.data_identity or content_hash(*fs.data)
    contract = fs.eval_contract or default_contract(fs)
    gens = [generators(seed) for seed in seeds]
    stack = Stack(fs, gens)
    opt = _Optimizer(fs, stack.flat)
    x, y = fs.data[0].to(fs.device), fs.data[1].to(fs.device)
    n, sizes = x.shape[0], [min(fs.batch_size, x.shape[0] - a) for a in range(0, x.shape[0], fs.batch_size)]
    seconds, buf = 0.0, None
    for rec in recs:
        rec.data_identity(data_id)
        rec.eval_contract(contract)
    for epoch in range(fs.epochs):
        t0 = time.perf_counter()
        step_losses, step_norms, buf = _epoch(fs, stack, opt, gens, x, y, buf)
        seconds += time.perf_counter() - t0
        metrics = {k: v.tolist() for k, v in evaluate(fs, stack.views(), gens).items()}
        for i, rec in enumerate(recs):
            total = 0.0
            for row, size in zip(step_losses, sizes):
                total += row[i] * size
            rec.grad_norms(row[i] for row in step_norms)
            rec.log(epoch=epoch, train_loss=total / n, **{k: v[i] for k, v in metrics.items()})
    final = [stack.seed(i) for i in range(len(recs))]
    for rec, ps in zip(recs, final):
        rec.throughput(examples=n * fs.epochs, seconds=seconds / len(recs))
        rec.state([p.cpu() for p in ps])
    return final


def default_contract(fs: Functional) -> dict[str, Any]:
    """What the default evaluation measures: every validation example, mean loss, eval mode."""
    n = int(fs.data[2].shape[0])
    metric = "val_loss, val_acc" if fs.loss == "cross_entropy" else "val_loss"
    loss = fs.loss if isinstance(fs.loss, str) else getattr(fs.loss, "__qualname__", "custom")
    return {"indices": {"range": [0, n]}, "count": n, "reduction": "mean", "loss": loss, "mode": "eval",
            "metric": metric}
