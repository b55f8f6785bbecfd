"""``step.clip_after_step``: ``train_step`` clips the gradients only after ``optimizer.step`` has applied them, so
the clipping bounds no update (and ``zero_grad`` or the next backward throws the clipped values away). Read from the
order of the program's own calls while ``train_step`` runs: gradient hooks (a backward), the optimizer's step pre-
and post-hooks, and ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` looked up through ``torch.nn.utils``
(Accelerate's and most loops' way of calling them). Only a clip of the watched model's parameters counts: a program
with two networks and two optimizers (a PPO's policy and value nets) clips one after stepping the other. A clip inside the step (a closure run by ``step``, as Lightning
does) or between a backward and the next step is in time. Everything patched or hooked is restored in ``finally``
by the caller's undo list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.utils as nn_utils
import torch.nn.utils.clip_grad as clip_grad_module

from ...report import Status
from .._core.checks import Check, check

_FUNCS = ("clip_grad_norm_", "clip_grad_value_")


class ClipWatch:
    def __init__(self, names: dict[int, list[str]], call: Callable[[], int]) -> None:
        self.names, self.call = names, call
        self.seq: list[tuple[int, str, list[str]]] = []

    def event(self, what: str, params: list[str] | None = None) -> None:
        if what == "backward" and self.seq and self.seq[-1][:2] == (self.call(), "backward"):
            return
        self.seq.append((self.call(), what, params or []))

    def _clip_names(self, parameters: Any) -> list[str]:
        ps = [parameters] if torch.is_tensor(parameters) else list(parameters) if parameters is not None else []
        return [self.names[id(p)][0] for p in ps if torch.is_tensor(p) and id(p) in self.names][:3]

    def patch(self, undo: list[Callable[[], None]]) -> None:
        for mod in (nn_utils, clip_grad_module):
            for attr in _FUNCS:
                orig = getattr(mod, attr, None)
                if orig is None or getattr(orig, "_firstdiv_clip_watch", False):
                    continue

                def wrapper(parameters: Any, *args: Any, _orig: Any = orig, **kwargs: Any) -> Any:
                    parameters = list(parameters) if not torch.is_tensor(parameters) and parameters is not None \
                        else parameters  # a generator is read once: by the watch and then by the original
                    names = self._clip_names(parameters)
                    if names:  # a clip of another model's gradients (a second network, its own optimizer) is not judged
                        self.event("clip", names)
                    return _orig(parameters, *args, **kwargs)
                wrapper._firstdiv_clip_watch = True  # type: ignore[attr-defined]
                setattr(mod, attr, wrapper)
                undo.append(lambda mod=mod, attr=attr, orig=orig: setattr(mod, attr, orig))

    def finding(self) -> Check | None:
        late, timely = [], False
        for call in sorted({c for c, _, _ in self.seq}):
            last = None
            for _, what, params in (e for e in self.seq if e[0] == call):
                if what != "clip":
                    last = what
                elif last == "stepped":
                    late.append(params)
                elif last in ("backward", "step"):
                    timely = True
        if not late or timely:
            return None
        where = next((p[0] for p in late if p), "optimizer.step")
        return check(where, "step.clip_after_step", Status.FAIL,
                     f"train_step clips the gradients after optimizer.step has applied them ({len(late)} time(s), never "
                     f"before a step): the clipping bounds no update", {"order": [w for _, w, _ in self.seq][:20]},
                     expected="backward -> clip_grad_norm_ -> optimizer.step",
                     observed="backward -> optimizer.step -> clip_grad_norm_",
                     hint="move the clip_grad_norm_/clip_grad_value_ call between loss.backward() and optimizer.step() "
                          "(after scaler.unscale_(optimizer) with AMP)")
