"""How OBJECTIVE calls the user's ``loss_fn`` on outputs it chose: the logits (``logits_of``) put back into the
structure the model returned (a tuple ``(recon, mu, logvar)``, a dict, a ``ModelOutput``), the examples cut along
their own axis (sequence-first batches keep theirs), and one float per call (None, with the reason kept, when
``loss_fn`` raises). A ``ModelOutput`` that carries its own ``loss`` cannot be probed: the loss was computed
inside the model, so only its value is compared with the objectives the ledger knows."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..._core.batch import loss_problem, rebuild
from ..._core.examples import logits_of, num_examples
from ..._core.task import Ctx, err

Pack = Callable[[torch.Tensor, "tuple[int, int] | None"], Any]


def example_axis(x: Any, n: int | None, axis: int) -> int | None:
    """The axis of ``x`` holding the ``n`` examples: the batch axis, else axis 0 (targets ``[B]`` beside ``[T, B]``)."""
    if not torch.is_tensor(x) or x.dim() == 0 or n is None:
        return None
    if x.dim() > axis and x.shape[axis] == n:
        return axis
    return 0 if x.shape[0] == n else None


def cut(x: Any, rows: tuple[int, int] | None, n: int | None, axis: int) -> Any:
    """``x`` restricted to examples ``rows`` along its example axis; kept whole when it has none (a shared adjacency)."""
    if rows is None:
        return x
    if torch.is_tensor(x):
        ax = example_axis(x, n, axis) if x.layout == torch.strided else None
        return x if ax is None else x.narrow(ax, rows[0], rows[1] - rows[0])
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return rebuild(x, (cut(v, rows, n, axis) for v in x))
    return x


def _uses(loss: Any, inner: torch.Tensor, pred: torch.Tensor) -> bool:
    """Whether the user's loss is computed from the model's own ``outputs.loss`` (its autograd graph reaches that
    loss's node; the walk stops at the logits, which both depend on). True when it cannot tell."""
    start, target, stop = getattr(loss, "grad_fn", None), inner.grad_fn, pred.grad_fn
    if start is None or target is None:
        return True
    seen: set[int] = set()
    stack = [start]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen or node is stop:
            continue
        if node is target:
            return True
        seen.add(id(node))
        stack.extend(n for n, _ in node.next_functions)
    return False


def packer(ctx: Ctx) -> Pack | None:
    """``pack(logits, rows)``: the model's output structure with ``logits`` in place of its prediction tensor and
    every other per-example tensor cut to ``rows``; None when the loss was computed inside the model."""
    out, n, axis = ctx.outputs, num_examples(ctx.batch, ctx.batch_axis), ctx.batch_axis
    if torch.is_tensor(out):
        return lambda z, rows: z
    pred = logits_of(out)
    if pred is None:
        return None
    if isinstance(out, dict):
        if torch.is_tensor(out.get("loss")) and _uses(getattr(ctx, "loss", None), out["loss"], pred):
            return None
        key = next(k for k, v in out.items() if v is pred)

        def pack_dict(z: torch.Tensor, rows: tuple[int, int] | None) -> Any:
            items = {k: (z if k == key else cut(v, rows, n, axis)) for k, v in out.items()}
            try:
                return type(out)(**items)
            except Exception:  # noqa: BLE001 - a mapping type without keyword construction
                return items
        return pack_dict
    if isinstance(out, (list, tuple)):
        i = next(j for j, v in enumerate(out) if v is pred)

        def pack_seq(z: torch.Tensor, rows: tuple[int, int] | None) -> Any:
            return type(out)(z if j == i else cut(v, rows, n, axis) for j, v in enumerate(out))
        return pack_seq
    return None


def call(ctx: Ctx, logits: torch.Tensor, targets: Any, ev: dict[str, Any], what: str,
         rows: tuple[int, int] | None = None) -> float | None:
    """``loss_fn`` at these logits as a float; None (and the reason in ``ev['not_checked']``) when it cannot run."""
    pack = ctx.notes.get("pack")
    if pack is None:
        ev.setdefault("not_checked", []).append(f"{what}: the loss was computed inside the model (outputs.loss)")
        return None
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the probes repeat the user's call: its warnings were shown once already
            out = ctx.loss_fn(pack(logits, rows), targets)
    except Exception as exc:  # noqa: BLE001 - user code; a failure disables one check and is reported
        ev.setdefault("not_checked", []).append(f"{what}: loss_fn raised {err(exc)}")
        return None
    if loss_problem(out) is not None:
        ev.setdefault("not_checked", []).append(f"{what}: {loss_problem(out)}")
        return None
    return float(out)


def output_grad(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any], targets: Any = None) -> torch.Tensor | None:
    """d loss / d logits at the observed outputs, against ``targets`` (default the batch's); None when the loss does
    not reach them or raises."""
    pack = ctx.notes.get("pack")
    if pack is None:
        return None
    o = od.clone().requires_grad_(True)
    try:
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = ctx.loss_fn(pack(o, None), ctx.batch.targets if targets is None else targets)
            if not torch.is_tensor(out) or out.numel() != 1 or not out.requires_grad:
                ev["loss_depends_on_outputs"] = False
                return None
            (g,) = torch.autograd.grad(out.reshape(()), o, allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - user code
        ev.setdefault("not_checked", []).append(f"d loss/d outputs: {err(exc)}")
        return None
    ev["loss_depends_on_outputs"] = g is not None
    return g


def per_example(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any], k: int) -> tuple[float | None, list[float | None]]:
    """``loss_fn`` on the first m <= k examples together, and on each alone (cached); ([], None) when the
    outputs have no example axis."""
    if "per_example" not in ctx.notes:
        t, axis = ctx.batch.targets, ctx.batch_axis
        n = num_examples(ctx.batch, axis)
        oax = example_axis(od, n, axis)
        if oax is None or n is None:
            ctx.notes["per_example"] = (None, [])
            return ctx.notes["per_example"]
        m = min(n, k)

        def part(i: int, j: int) -> tuple[torch.Tensor, Any]:
            return od.narrow(oax, i, j - i), cut(t, (i, j), n, axis)
        sub = call(ctx, *part(0, m), ev, f"loss on the first {m} examples", (0, m)) if m >= 2 else None
        each = [call(ctx, *part(i, i + 1), ev, f"loss on example {i}", (i, i + 1)) for i in range(m)]
        ctx.notes["per_example"] = (sub, each)
        ctx.notes["example_axis"] = oax
    return ctx.notes["per_example"]
