"""``dependency.examples_mixed``: a model whose output for one example moves with another example's input, through a
normalization or reduction taken over the examples' axis inside ``forward`` (a softmax over the batch instead of the
sentences, a dueling head's ``advantage.mean()`` over the whole batch, ``F.normalize(x, dim=0)``).

Confirmed twice on the ledger's copy in eval mode (no batch statistics, no dropout), after one warm-up forward (a
data-dependent initialization, as an ActNorm's, runs once):

1. example j's inputs replaced by example k's moves the outputs of the other examples (beyond rounding), and a second
   unchanged forward reproduces the first (an eval forward that draws random numbers is not judged);
2. one operation of the forward reduces or normalizes over an axis of the examples' size, and handing the other
   examples that operation's result from the unchanged batch (the replaced example keeps its new one) takes the move
   away: that operation is the channel, and the report names the module that ran it. Where no one operation carries
   the whole move (one attention class, softmaxed over the batch, run twice), up to eight held together do, and each
   whose release keeps the move away is dropped: the rest are the channel.

Examples meant to meet (a graph's nodes through its adjacency, a mixup, batch statistics without running estimates)
leave no set of reductions that carries the whole move: no finding. A batch statistic appended beside each example's
own features (a GAN discriminator's minibatch standard deviation: ``torch.cat([x, std.expand(...)], 1)``) mixes the
examples by design: when the one channel's result, followed through every operation that reads it, is joined, the
same for every example, to tensors that do not derive from it along an axis other than the examples', the report gets
a note, not a finding (an attention softmaxed over the batch and concatenated with other features differs from example
to example: still a finding). Outputs with a second axis of the batch's size (a
similarity matrix of in-batch pairs) are not judged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._core.batch import Batch
from .._core.checks import Check
from .._core.examples import logits_of, num_examples, tensors
from .._core.task import Ctx
from ._common import failed, g4
from ._dependency import seeded_loss
from ._perturbed import eval_mode

_REDUCERS = {"softmax", "log_softmax", "mean", "sum", "std", "var", "amax", "amin", "max", "min", "logsumexp", "norm",
             "normalize", "std_mean", "var_mean"}
_MOVES = 1e-4  # another example's output change beyond this fraction of the outputs' scale is a move
_CANDIDATES = 8  # reductions tried as the channel, in forward order


def _name(func: Any) -> str:
    return getattr(func, "__name__", str(func)).split(".")[-1]


def _dims(func: Any, args: tuple, kwargs: dict) -> Any:
    if "dim" in kwargs:
        return kwargs["dim"]
    if _name(func) == "normalize":
        return args[2] if len(args) > 2 else 1
    return args[1] if len(args) > 1 and isinstance(args[1], (int, tuple, list)) else None


def _over_examples(x: torch.Tensor, dims: Any, b: int) -> bool:
    """Whether a reduction over ``dims`` of ``x`` (None: every axis) takes in an axis of the examples' size."""
    axes = range(x.dim()) if dims is None else [d % x.dim() for d in ((dims,) if isinstance(dims, int) else dims)]
    return any(x.shape[a] == b for a in axes)


class _Reductions(TorchFunctionMode):
    """Records (or, with ``swap``, replaces) each reduction over an axis of the examples' size, with the module that
    ran it. ``swap``: index -> (base result, example j): the others get the base result's rows (or all of it).
    ``follow``: the index of one reduction whose result is followed through every operation that reads it;
    ``appended`` tells whether it was joined (``cat``), the same for every example, beside tensors that do not derive
    from it, off the examples' axis."""

    def __init__(self, b: int, stack: list[str], swap: dict[int, tuple[Any, int]] | None = None,
                 follow: int | None = None) -> None:
        super().__init__()
        self.b, self.stack, self.swap, self.seen = b, stack, swap or {}, []
        self.follow, self.derived, self.appended = follow, {}, False

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.derived:
            self._followed(func, args, kwargs, out)
        x = args[0] if args else None
        if not self.stack or _name(func) not in _REDUCERS or not torch.is_tensor(x) or x.dim() < 2 or \
                not x.is_floating_point() or not _over_examples(x, _dims(func, args, kwargs), self.b):
            return out
        i = len(self.seen)
        self.seen.append((self.stack[-1], _name(func), out))  # inside the model's forward (loss_fn's are not)
        if i == self.follow:
            self._derive(out)
        return _mixed(out, *self.swap[i], self.b) if i in self.swap else out

    def _derive(self, out: Any) -> None:
        for t in tensors(out):
            self.derived[id(t)] = t  # held, so that no other tensor takes its id during the run

    def _followed(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        inputs = tensors((args, kwargs))
        if not any(id(t) in self.derived for t in inputs):
            return
        self._derive(out)
        if _name(func) in _JOINS and args and isinstance(args[0], (list, tuple)):
            dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else 0)
            parts = [t for t in args[0] if torch.is_tensor(t) and t.dim() > 0 and t.shape[0] == self.b]
            own = [t for t in parts if id(t) not in self.derived]
            shared = [t for t in parts if id(t) in self.derived]
            if own and shared and dim % parts[0].dim() != 0 and all(_same_rows(t) for t in shared):
                self.appended = True


_JOINS = {"cat", "concat", "concatenate"}


def _same_rows(t: torch.Tensor) -> bool:
    """Every example holds the same values (a statistic of the batch, expanded to each example)."""
    t = t.detach()
    return bool(torch.equal(t, t[:1].expand_as(t)))


def _mixed(new: Any, base: Any, j: int, b: int) -> Any:
    if isinstance(new, tuple):
        return type(new)(_mixed(n, o, j, b) for n, o in zip(new, base)) if not hasattr(new, "_fields") else \
            type(new)(*(_mixed(n, o, j, b) for n, o in zip(new, base)))
    if not torch.is_tensor(new) or not torch.is_tensor(base) or new.shape != base.shape:
        return new
    if new.dim() == 0 or new.shape[0] != b:
        return base
    out = base.clone()
    out[j] = new[j]
    return out


@contextlib.contextmanager
def _module_stack(model: torch.nn.Module) -> Iterator[list[str]]:
    stack: list[str] = []

    def leave(*_: Any) -> None:  # returns None: a forward hook's return value would replace the module's output
        if stack:
            stack.pop()
    handles = []
    for path, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(lambda _m, _a, p=path: stack.append(p)))
        handles.append(m.register_forward_hook(leave))
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()


def _replaced(x: Any, b: int, j: int, k: int) -> Any:
    if torch.is_tensor(x):
        if x.dim() == 0 or x.shape[0] != b:
            return x
        y = x.clone()
        y[j] = x[k]
        return y
    if isinstance(x, dict):
        return {key: _replaced(v, b, j, k) for key, v in x.items()}
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_replaced(v, b, j, k) for v in x)
    return x


def _run(ctx: Ctx, batch: Batch, b: int, swap: dict | None = None) -> tuple[torch.Tensor | None, list]:
    with _module_stack(ctx.work) as stack, _Reductions(b, stack, swap) as seen:
        r = seeded_loss(ctx, batch)
    out = None if r is None else logits_of(r[0])
    return (out.detach().float() if out is not None else None), seen.seen


def _appended(ctx: Ctx, b: int, i: int) -> bool:
    """Whether reduction ``i``'s result, followed through the unchanged batch's forward, is concatenated beside
    tensors of the examples that do not derive from it (a batch statistic appended as a feature)."""
    with _module_stack(ctx.work) as stack, _Reductions(b, stack, follow=i) as mode:
        seeded_loss(ctx, ctx.batch)
    return mode.appended


def _others_move(base: torch.Tensor, out: torch.Tensor | None, j: int) -> float:
    if out is None or out.shape != base.shape:
        return 0.0
    keep = torch.ones(base.shape[0], dtype=torch.bool)
    keep[j] = False
    scale = max(float(base[keep].abs().max()), 1e-12)
    return float((out[keep] - base[keep]).abs().max()) / scale


def examples_mixed(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """The module docstring's finding, or None."""
    b = num_examples(ctx.batch, 0) if ctx.batch_axis == 0 else None
    if b is None or b < 4:
        return None
    with eval_mode(ctx.work):
        _run(ctx, ctx.batch, b)  # warm-up: a data-dependent initialization runs here
        base, seen = _run(ctx, ctx.batch, b)
        again, _ = _run(ctx, ctx.batch, b)
        if base is None or again is None or base.dim() == 0 or base.shape[0] != b or b in base.shape[1:] or \
                not torch.equal(base, again) or not seen:
            return None
        j, k = 0, 1
        other = Batch(_replaced(ctx.batch.inputs, b, j, k), ctx.batch.targets, ctx.batch.as_kwargs)
        moved = _others_move(base, _run(ctx, other, b)[0], j)
        if moved <= _MOVES:
            return None
        for i, (path, op, result) in enumerate(seen[:_CANDIDATES]):
            left = _others_move(base, _run(ctx, other, b, {i: (result, j)})[0], j)
            if left <= min(_MOVES, moved / 100):
                if _appended(ctx, b, i):
                    ctx.report_notes.append(f"DEPENDENCY: the {op} over the examples' axis in {path or '(root module)'} "
                                            "mixes the examples, and its result is concatenated beside each example's "
                                            "own features (a batch statistic as a feature, as a minibatch standard "
                                            "deviation): by design, not judged")
                    return None
                return _finding(path, op, moved, left, ev)
        return _together(ctx, other, b, j, base, seen[:_CANDIDATES], moved, ev)
    return None


def _together(ctx: Ctx, other: Batch, b: int, j: int, base: torch.Tensor, seen: list, moved: float,
              ev: dict[str, Any]) -> Check | None:
    """Several reductions that each carry part of the move (the same attention, softmaxed over the batch, run twice):
    held together they take it away; each one whose release keeps it away is dropped (the rest are the channel)."""
    def left(keep: list[int]) -> float:
        return _others_move(base, _run(ctx, other, b, {i: (seen[i][2], j) for i in keep})[0], j)

    keep = list(range(len(seen)))
    if len(keep) < 2 or left(keep) > min(_MOVES, moved / 100):
        return None
    for i in list(keep):
        rest = [k for k in keep if k != i]
        if rest and left(rest) <= min(_MOVES, moved / 100):
            keep = rest
    paths = list(dict.fromkeys(seen[i][0] or "(root module)" for i in keep))
    ops = list(dict.fromkeys(seen[i][1] for i in keep))
    return _finding(", ".join(paths), "/".join(ops), moved, left(keep), ev)


def _finding(path: str, op: str, moved: float, left: float, ev: dict[str, Any]) -> Check:
    where = path or "(root module)"
    ev.update(mixing_module=where, mixing_op=op, other_examples_move=moved, move_with_op_held=left)
    return failed("DEPENDENCY", "dependency.examples_mixed",
                  f"the outputs of the other examples move (by {g4(moved)} of their scale, eval mode) when one example's "
                  f"input changes, through a {op} over the examples' axis in {where}: holding that {op}'s result for "
                  "the other examples takes the move away", ev,
                  expected="each example's output depends on its own input only (eval mode)",
                  observed=f"{op} over the batch axis in {where} mixes the examples",
                  hint=f"reduce over the feature or sequence axis in {where} (dim=1 or dim=-1), not over the batch")
