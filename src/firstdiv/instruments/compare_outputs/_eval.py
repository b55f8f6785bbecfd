"""Is the reference's evaluation path deterministic? compare_outputs restores the RNG state before every
variant, so a model whose eval path still draws random numbers would agree with itself. Here the reference runs
twice on the same inputs WITHOUT restoring the RNG state between the two calls, and, during the second call,
every dropout-family function (``F.dropout`` and its 1d/2d/3d/alpha variants, ``torch.dropout``,
``F.scaled_dot_product_attention`` with ``dropout_p > 0``, ``F.rrelu``) that is active while the module calling it is in
eval mode is recorded with that module's path (a ``TorchFunctionMode`` plus forward hooks on the named modules,
all removed afterwards).

- the two calls differ beyond the reference's tolerance: ``outputs.nondeterministic_eval`` FAIL at
  ``"<reference>:<module path>"`` (the module that ran the active op, else the first module whose output differed);
- the calls agree but an active op ran in an eval-mode module: ``outputs.stochastic_in_eval`` WARN there;
- otherwise PASS. ``mode="train"`` makes a random training forward expected: it is measured, never flagged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ...report import Status
from .._core.batch import describe_error
from .._core.checks import Check, check
from .._core.layers import NotComparable, by_call, is_compiled, layer_outputs, listed, orig_module
from .._core.outputs import Run, Tolerance, clone_tree, compare
from .._core.state import guarded
from ._diverged import g

# function -> (name, p position, p keyword, p default, training position, training keyword, training default)
_OPS: dict[Any, tuple[str, int, str, float, int | None, str, bool]] = {
    F.dropout: ("F.dropout", 1, "p", 0.5, 2, "training", True),
    F.dropout1d: ("F.dropout1d", 1, "p", 0.5, 2, "training", True),
    F.dropout2d: ("F.dropout2d", 1, "p", 0.5, 2, "training", True),
    F.dropout3d: ("F.dropout3d", 1, "p", 0.5, 2, "training", True),
    F.alpha_dropout: ("F.alpha_dropout", 1, "p", 0.5, 2, "training", False),
    F.feature_alpha_dropout: ("F.feature_alpha_dropout", 1, "p", 0.5, 2, "training", False),
    torch.dropout: ("torch.dropout", 1, "p", 0.0, 2, "train", False),
    torch.alpha_dropout: ("torch.alpha_dropout", 1, "p", 0.0, 2, "train", False),
    torch.feature_dropout: ("torch.feature_dropout", 1, "p", 0.0, 2, "train", False),
    F.scaled_dot_product_attention: ("F.scaled_dot_product_attention", 4, "dropout_p", 0.0, None, "", True),
    F.rrelu: ("F.rrelu", 1, "lower", 1.0, 3, "training", False),
}


def _arg(args: tuple, kwargs: dict, pos: int | None, key: str, default: Any) -> Any:
    if pos is not None and len(args) > pos:
        return args[pos]
    return kwargs.get(key, default)


class _Watch(TorchFunctionMode):
    """Records active dropout-family calls made while the innermost running module is in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, nn.Module]] = []
        self.seen: list[dict[str, Any]] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        spec = _OPS.get(func)
        if spec is not None and self.stack:
            name, p_pos, p_key, p_default, t_pos, t_key, t_default = spec
            path, module = self.stack[-1]
            p = _arg(args, kwargs, p_pos, p_key, p_default)
            live = bool(_arg(args, kwargs, t_pos, t_key, t_default)) if t_pos is not None else True
            active = live and (func is F.rrelu or (isinstance(p, (int, float)) and p > 0))
            if active and not module.training:
                self.seen.append({"module": path, "op": name, "p": float(p)})
        return func(*args, **kwargs)


@contextmanager
def _watching(root: nn.Module) -> Iterator[_Watch]:
    mode = _Watch()

    def enter(label: str, module: nn.Module) -> None:
        mode.stack.append((label, module))

    def leave(*_: Any) -> None:  # returns None: a forward hook's return value would replace the output
        if mode.stack:
            mode.stack.pop()

    handles = []
    for path, m in root.named_modules():
        handles.append(m.register_forward_pre_hook(lambda mod, _i, label=path or "(root)": enter(label, mod)))
        handles.append(m.register_forward_hook(leave, always_call=True))
    try:
        with mode:
            yield mode
    finally:
        for h in handles:
            h.remove()


def _call(variant: Any, args: tuple, kwargs: dict) -> Any:
    return variant(*clone_tree(args), **clone_tree(kwargs))


def _rng() -> tuple[Any, Any]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng(state: tuple[Any, Any]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def twice(variant: Any, args: tuple, kwargs: dict, watch: bool) -> tuple[Any, Any, list[dict[str, Any]]]:
    """(first output, second output, active ops seen in the second call). The module's state is restored between
    the two calls (a model that keeps state between calls is not random), the RNG state is not: the second call
    continues the first one's random stream. Everything is restored afterwards."""
    module = variant if isinstance(variant, nn.Module) else None
    root = orig_module(variant)
    with guarded(*([module] if module is not None else [])), torch.no_grad():
        first = _call(variant, args, kwargs)
        state = _rng()
    with guarded(*([module] if module is not None else [])), torch.no_grad():
        _set_rng(state)
        if watch and root is not None and not is_compiled(variant):
            with _watching(root) as mode:
                return first, _call(variant, args, kwargs), mode.seen
        return first, _call(variant, args, kwargs), []


def _first_differing_layer(variant: Any, args: tuple, kwargs: dict, tol: Tolerance) -> str:
    module = variant if isinstance(variant, nn.Module) else None
    try:
        with guarded(*([module] if module is not None else [])), torch.no_grad():
            one = by_call(layer_outputs(variant, clone_tree(args), clone_tree(kwargs))[0])
            state = _rng()
        with guarded(*([module] if module is not None else [])), torch.no_grad():
            _set_rng(state)
            two = by_call(layer_outputs(variant, clone_tree(args), clone_tree(kwargs))[0])
    except (NotComparable, Exception):  # noqa: BLE001 - localizing is best effort; the finding stands
        return ""
    return next((key[0] for key in one if key in two and not compare(one[key], two[key], tol).ok), "")


def determinism_check(name: str, variant: Any, run: Run, args: tuple, kwargs: dict, tol: Tolerance,
                      train: bool) -> tuple[Check, bool]:
    """(the check, whether the reference's forward is random); ``run`` is the reference's first call."""
    if hasattr(variant, "processes_started"):
        return check(name, "outputs.nondeterministic_eval", Status.SKIPPED, "not checked: the reference runs in a fresh "
                     "process per call (its random state is not shared between calls)"), False
    try:
        first, second, seen = twice(variant, args, kwargs, watch=not train)
    except Exception as exc:  # noqa: BLE001 - it ran once already; a second call failing is reported, not raised
        return check(name, "outputs.nondeterministic_eval", Status.SKIPPED,
                     f"not checked: a second call of the reference raised {describe_error(exc)}"), False
    result = compare(first, second, tol)
    summary = result.summary()
    ev = {"max_abs_error": summary["max_abs_error"], "worst_leaf": summary["worst_leaf"], "active_ops": seen[:10],
          "mode": "train" if train else "eval"}
    if train:
        text = "differ: the training forward draws random numbers" if not result.ok else "agree"
        return check(name, "outputs.nondeterministic_eval", Status.PASS, f"two training forwards of the reference "
                     f"without reseeding {text} (max abs error {g(summary['max_abs_error'])})", ev), not result.ok
    if result.ok and not seen:
        return check(name, "outputs.nondeterministic_eval", Status.PASS, "two calls of the reference without reseeding "
                     "agree and no dropout-family op is active in an eval-mode module", ev), False
    ops = [f"{s['op']}(p={s['p']:g}) in {s['module']}" for s in seen]
    path = seen[0]["module"] if seen else _first_differing_layer(variant, args, kwargs, tol)
    where = f"{name}:{path}" if path else name
    hint = ("an eval path must not draw random numbers: pass training=self.training to F.dropout, "
            "dropout_p=self.p if self.training else 0.0 to scaled_dot_product_attention, or use nn.Dropout")
    if result.ok:
        return check(where, "outputs.stochastic_in_eval", Status.WARN, f"two calls agree, but {len(ops)} active "
                     f"random op(s) ran in eval-mode modules: {listed(ops)}", ev, expected="no random op in eval mode",
                     observed=listed(ops), hint=hint), False
    seen_text = f"; active random op(s) in eval mode: {listed(ops)}" if ops else ""
    return check(where, "outputs.nondeterministic_eval", Status.FAIL, f"two calls of the reference on the same inputs, "
                 f"without reseeding, differ by up to {g(summary['max_abs_error'])} at {summary['worst_leaf']}"
                 f"{seen_text}", ev, expected="the same outputs on every call in evaluation mode",
                 observed=f"max abs error {g(summary['max_abs_error'])} between two calls" + (f" ({ops[0]})" if ops else
                                                                                              (f"; first at {path}" if path else "")),
                 hint=hint), False
