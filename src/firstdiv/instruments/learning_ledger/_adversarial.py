"""``objective.adversarial_direction``: the two players of an adversarial step pull the discriminator's score the way
a min-max game cannot.

A GAN's step trains a discriminator D (its own optimizer) to score real inputs and generated ones apart, and a
generator G (another optimizer) to move D's score on its samples toward the real side. A swapped label, a dropped or
doubled sign, or a target of ones where zeros were meant trains both players toward the same side: the losses keep
falling, and nothing is learned. The premise is read from one call of the user's ``train_step`` (on the user's objects,
restored afterwards), never assumed from names:

1. the step reaches two or more optimizers; its networks are the largest modules it reaches whose parameters one
   optimizer owns alone;
2. a network (D) runs both on an input from the pipeline (no autograd history, not another network's output) and on
   an output of a network another optimizer owns (G's sample: attached, or detached from it: the same storage);
3. a backward reaches D's scores on both kinds of input and D's optimizer steps next (D's loss); another backward
   reaches D's score on an attached sample and another optimizer steps next (G's loss).

From the gradient each loss sends into D's scores (summed over the scores): D's loss must push its scores on real and
on generated inputs in opposite directions, and G's loss must push the score on its samples the way D's loss pushes the
real one. Either failing is the finding, graph and values showing it; where a gradient is exactly 0 there (a hinge
already satisfied) or the inputs cannot be told apart (a sample concatenated with its condition), nothing is judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

import torch
from torch import nn

from .._core.checks import Check
from .._core.closure import closure_state, innermost
from .._core.loss_graph import graph_nodes
from .._core.state import guarded
from .._core.task import Ctx
from ._common import failed, g4

TINY = 1e-12  # a summed gradient below this is no push
_NONE = object()  # no instance attribute ``forward`` before the watch
CALLS = 2  # train_step calls watched at most, until both players' optimizers have stepped


@dataclass
class _Call:
    net: int  # index of the network
    kind: str  # "real", "attached" (a sample with its graph), "detached" (a sample cut from it) or "other"
    pushes: dict[int, float] = field(default_factory=dict)  # backward index -> gradient summed over the scores


class _Watch:
    def __init__(self, nets: list[tuple[str, nn.Module, int]], owner: dict[int, int],
                 optimizers: list[torch.optim.Optimizer]) -> None:
        self.nets, self.owner, self.optimizers = nets, owner, optimizers
        self.calls: list[_Call] = []
        self.kept: list[torch.Tensor] = []  # the outputs seen, held so their storage is not reused by a later tensor
        self.samples: dict[int, int] = {}  # storage pointer of a network's output -> the owning optimizer
        self.backwards, self.steps = 0, []  # steps: (backwards before it, optimizer index)
        self.inside = False
        self.handles: list[Any] = []
        self.forwards: list[tuple[nn.Module, Any]] = []

    def _kind(self, x: Any, k: int) -> str:
        if not torch.is_tensor(x) or not x.is_floating_point():
            return "other"
        if x.grad_fn is not None:
            theirs = {self.owner.get(id(getattr(n, "variable", None))) for n in graph_nodes(x)} - {None, k}
            return "attached" if theirs else "other"
        # a leaf: the pipeline's input (requires_grad for a gradient penalty on it, R1), or a sample cut from the other
        # network's output; an interpolate for a penalty gets no push from the loss's value, so it adds nothing
        got = self.samples.get(x.untyped_storage().data_ptr())
        return "real" if got is None else "detached" if got != k else "other"

    def _hook(self, i: int) -> Any:
        def hook(_m: nn.Module, args: tuple, out: Any) -> None:
            k = self.nets[i][2]
            score = out if torch.is_tensor(out) else next((t for t in (out if isinstance(out, (tuple, list)) else ())
                                                           if torch.is_tensor(t)), None)
            if score is None or not score.is_floating_point():
                return
            self.samples[score.untyped_storage().data_ptr()] = k
            self.kept.append(score)
            call = _Call(i, self._kind(args[0] if args else None, k))
            self.calls.append(call)
            if score.requires_grad:
                score.register_hook(lambda g, c=call: self._push(c, g))
        return hook

    def _push(self, call: _Call, g: torch.Tensor) -> None:
        """A loss's gradient at a score, counted only inside a backward (a penalty's autograd.grad is no loss)."""
        if self.inside:
            call.pushes[self.backwards] = call.pushes.get(self.backwards, 0.0) + float(g.detach().double().sum())

    def __enter__(self) -> Self:
        # the networks' forward wrapped on the instance (not a forward hook): a player that calls ``self.forward(x)``
        # itself (a trainer method on the network) is seen too; put back on exit
        self.forwards = [(m, m.__dict__.get("forward", _NONE)) for _, m, _ in self.nets]
        for i, (_, m, _) in enumerate(self.nets):
            m.forward = self._wrapped(i, m.forward)
        self._original = torch.autograd.backward

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.backwards, self.inside = self.backwards + 1, True
            try:
                return self._original(*args, **kwargs)
            finally:
                self.inside = False
        torch.autograd.backward = counted
        opts = sorted({k for *_, k in self.nets})
        self.handles += [innermost(self.optimizers[k]).register_step_pre_hook(
            lambda *_, k=k: self.steps.append((self.backwards, k))) for k in opts]
        return self

    def __exit__(self, *exc: object) -> None:
        torch.autograd.backward = self._original
        for h in self.handles:
            h.remove()
        for m, before in self.forwards:
            if before is _NONE:
                m.__dict__.pop("forward", None)
            else:
                m.__dict__["forward"] = before

    def _wrapped(self, i: int, forward: Any) -> Any:
        hook = self._hook(i)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = forward(*args, **kwargs)
            hook(self.nets[i][1], args, out)
            return out
        return wrapped


def _networks(modules: list[nn.Module], owner: dict[int, int]) -> list[tuple[str, nn.Module, int]]:
    """The largest modules whose parameters one optimizer owns alone, those no optimizer owns aside (a wrapper holding
    both players is not one)."""
    found: dict[int, tuple[str, nn.Module, int]] = {}
    inner: set[int] = set()
    for root in modules:
        for name, m in root.named_modules():
            ks = {owner.get(id(p)) for p in m.parameters()} - {None}  # a parameter no optimizer owns: frozen, ignored
            if len(ks) == 1 and id(m) not in inner:
                found.setdefault(id(m), (name or type(m).__name__, m, ks.pop()))
                inner |= {id(s) for s in m.modules() if s is not m}
    return [v for i, v in found.items() if i not in inner]


def _phases(w: _Watch) -> list[tuple[int, range]]:
    """Per optimizer step: (the optimizer, the backwards since the step before it), the backwards a loss of that
    player ran (one or several: a WGAN's critic backpropagates its real and its fake term apart)."""
    out, last = [], 0
    for before, k in w.steps:
        if before > last:
            out.append((k, range(last + 1, before + 1)))
        last = max(last, before)
    return out


def _pushes(w: _Watch, net: int, kinds: tuple[str, ...], backwards: range) -> float:
    return sum(v for c in w.calls if c.net == net and c.kind in kinds for b, v in c.pushes.items() if b in backwards)


def _judge(w: _Watch) -> dict[str, Any] | None:
    phases = _phases(w)
    for d in sorted({c.net for c in w.calls}):
        k = w.nets[d][2]
        kinds = {c.kind for c in w.calls if c.net == d}
        if "real" not in kinds or not kinds & {"attached", "detached"}:
            continue
        mine = [bs for o, bs in phases if o == k and abs(_pushes(w, d, ("real",), bs)) > TINY
                and abs(_pushes(w, d, ("attached", "detached"), bs)) > TINY]
        theirs = [bs for o, bs in phases if o != k and abs(_pushes(w, d, ("attached",), bs)) > TINY]
        if not mine:
            continue
        r, f = _pushes(w, d, ("real",), mine[0]), _pushes(w, d, ("attached", "detached"), mine[0])
        g = _pushes(w, d, ("attached",), theirs[-1]) if theirs else 0.0
        ev = {"discriminator": w.nets[d][0], "push_on_real_in_its_loss": r, "push_on_generated_in_its_loss": f,
              "push_on_generated_in_the_generator_loss": g if theirs else None}
        if r * f > 0:
            return {**ev, "which": "discriminator"}
        if theirs and g * f > 0:
            return {**ev, "which": "generator"}
    return None


def adversarial_direction(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """The module docstring's finding, or None."""
    if ctx.train_step is None:
        return None
    reached = closure_state(ctx.train_step)
    opts = [o for o in reached if isinstance(o, torch.optim.Optimizer)]
    if ctx.optimizer is not None and all(innermost(o) is not innermost(ctx.optimizer) for o in opts):
        opts.insert(0, ctx.optimizer)
    owner = {id(p): k for k, o in enumerate(opts) for g in innermost(o).param_groups for p in g["params"]}
    nets = _networks([ctx.model, *(m for m in reached if isinstance(m, nn.Module))], owner)
    if len(opts) < 2 or len({k for *_, k in nets}) < 2:
        return None
    watch = _Watch(nets, owner, opts)
    with guarded(ctx.model, ctx.optimizer, ctx.train_step, reached), torch.enable_grad():
        try:
            with watch:
                for _ in range(CALLS):  # a step that alternates the players across calls shows both in two
                    ctx.train_step()
                    if len({k for k, _ in _phases(watch)}) >= 2:
                        break
        except Exception:  # noqa: BLE001 - user code: the other links report it
            return None
    seen = _judge(watch)
    if seen is None:
        return None
    ev.update(seen)
    return _finding(seen, ev)


def _finding(seen: dict[str, Any], ev: dict[str, Any]) -> Check:
    d, r, f = seen["discriminator"], seen["push_on_real_in_its_loss"], seen["push_on_generated_in_its_loss"]
    side = lambda v: "down" if v > 0 else "up"
    if seen["which"] == "discriminator":
        text = (f"the discriminator's loss pushes {d}'s scores on real inputs ({side(r)}, summed gradient {g4(r)}) and "
                f"on generated ones ({side(f)}, {g4(f)}) the same way: it is not trained to tell them apart")
        hint = "give the real and the generated inputs opposite targets (or signs) in the discriminator's loss"
    else:
        g = seen["push_on_generated_in_the_generator_loss"]
        text = (f"the generator's loss pushes {d}'s score on its samples {side(g)} (summed gradient {g4(g)}), the way "
                f"the discriminator's own loss pushes them ({side(f)}), not the way it pushes real inputs ({side(r)}): "
                "the two players cooperate instead of competing")
        hint = ("the generator's loss should move the discriminator's score on its samples toward the real side: check "
                "its target (real, not fake), its sign, and the discriminator loss's signs")
    return failed("OBJECTIVE", "objective.adversarial_direction", text, ev,
                  expected="the discriminator pushes real and generated scores apart; the generator pushes its "
                           "samples' score toward the real side",
                  observed=f"pushes: real {side(r)}, generated {side(f)} (discriminator's loss)"
                           + (f", generated {side(seen['push_on_generated_in_the_generator_loss'])} (generator's loss)"
                              if seen["which"] == "generator" else ""), hint=hint)
