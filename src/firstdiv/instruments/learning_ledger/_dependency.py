"""DEPENDENCY's probes beyond "every trainable parameter is on the loss's graph": evidence, read from the program
itself, that the graph is there but carries the wrong thing.

- ``dependency.target_leak``: an input tensor equal to the integer target sequence (beside other inputs) that the
  prediction at the same position reads: teacher forcing without the shift. A model that shifts it itself (the
  prediction at p does not move with that input at p) and a loss that shifts the labels (a Hugging Face causal LM:
  ``labels == input_ids``, read by TASK) are not leaks. The same where the targets are an input sequence shifted
  (``targets[:, j] == input[:, j + s]``) and the prediction at ``j`` reads ``input[:, j + s]``: a bidirectional LM
  whose states at the predicted position (or a lower layer's backward states) have read the token it predicts.
- ``dependency.future_visible``: next-token prediction (the targets are the token inputs shifted by one, or equal to
  them with the shift inside the loss, on at least 90 % of the supervised positions) where the prediction at a
  position moves when a later token changes: the model sees the token it must predict (a causal mask missing or
  built from the wrong triangle). Changing one token in the middle must leave every earlier prediction unchanged.
- ``dependency.input_without_gradient``: a float input that changes the loss but is not on its graph, beside a float
  output that carries no gradient: that input's branch runs under ``torch.no_grad()`` / ``.detach()`` (one tower of a
  siamese pair). A stop-gradient target (SimSiam's ``z.detach()``) leaves every input on the graph; a frozen backbone
  under ``no_grad`` returns outputs that require grad.

Both run the ledger's deep copy with the RNG forked (the user's generators are untouched).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..._globals import preserved_globals
from .._core.batch import Batch, compute_loss, rebuild
from .._core.checks import Check
from .._core.examples import logits_of
from .._core.task import Ctx, input_ids, is_int
from ._common import failed, g4
from ._perturbed import eval_mode


def reached_leaves(loss: torch.Tensor) -> tuple[set[int], int]:
    """ids of the leaf tensors the loss's autograd graph accumulates into, and the number of nodes walked."""
    leaves: set[int] = set()
    seen: dict[int, Any] = {}  # keeps nodes alive so ids stay unique during the walk
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        var = getattr(node, "variable", None)
        if var is not None:
            leaves.add(id(var))
        stack.extend(nxt for nxt, _ in getattr(node, "next_functions", ()))
    return leaves, len(seen)


def named_items(inputs: Any, name: str = "inputs") -> list[tuple[str, Any]]:
    if isinstance(inputs, dict):
        return list(inputs.items())
    if isinstance(inputs, (list, tuple)):
        return [(f"{name}[{i}]", v) for i, v in enumerate(inputs)]
    return [(name, inputs)]


def with_input(b: Batch, key: str, value: torch.Tensor) -> Batch:
    x = b.inputs
    new = {**x, key: value} if isinstance(x, dict) else rebuild(x, (value if f"inputs[{i}]" == key else v for i, v in enumerate(x))) \
        if isinstance(x, (list, tuple)) else value
    return Batch(new, b.targets, b.as_kwargs)


def seeded_loss(ctx: Ctx, batch: Batch, grad: bool = False) -> tuple[Any, Any] | None:
    """Forward and loss on the ledger's copy with every global RNG a program draws from (torch's, numpy's, Python's
    ``random``: a teacher-forcing coin, an exploration draw) reseeded alike and restored after, so dropout and the
    program's own draws repeat each call: ``(outputs, loss)``, or None where the user's code raised (the link already
    ran it once: no finding)."""
    try:
        with preserved_globals(seed=0), torch.set_grad_enabled(grad):
            return compute_loss(ctx.work, batch, ctx.loss_fn)
    except Exception:  # noqa: BLE001 - user code; the link already ran the program once
        return None


def target_as_input(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """An input tensor equal to the integer target sequence, beside other inputs, where the output at position p
    moves with that input at p: the model reads the answer it is asked for (teacher forcing without the shift)."""
    t, items = ctx.batch.targets, named_items(ctx.batch.inputs)
    if not is_int(t) or t.dim() < 2 or t.shape[1] < 2 or ctx.notes.get("shifted_inside") or len(items) < 2:
        return None
    key = next((k for k, v in items if torch.is_tensor(v) and v is not t and v.shape == t.shape and torch.equal(v, t)), None)
    if key is None:
        return None
    v, p = dict(items)[key], t.shape[1] // 2
    rows = v[:, p] != v[:, p].roll(1, 0)
    if not bool(rows.any()):
        return None
    changed = v.clone()
    changed[:, p] = v[:, p].roll(1, 0)
    base, moved = seeded_loss(ctx, ctx.batch), seeded_loss(ctx, with_input(ctx.batch, key, changed))
    a, b = (logits_of(r[0]) if r is not None else None for r in (base, moved))
    if a is None or b is None or a.dim() < 3 or a.shape[:2] != t.shape:
        return None
    here = float((a[rows, p] - b[rows, p]).abs().max())
    ev.update(input_equal_to_targets=key, leak_position=p, output_change_at_position=here)
    if here == 0.0:
        return None  # the model shifts that input itself: position p reads only earlier tokens
    return failed("DEPENDENCY", "dependency.target_leak",
                  f"input '{key}' equals the targets {list(t.shape)} and the prediction at position {p} changes when "
                  f"'{key}'[:, {p}] changes (by {g4(here)}): the model reads the token it is asked to predict", ev,
                  expected=f"the prediction at position p depends on '{key}' only before p (targets shifted right)",
                  observed=f"'{key}' == targets; output at position {p} moves with '{key}'[:, {p}]",
                  hint=f"shift '{key}' right: [SOS] + targets[:, :-1] (teacher forcing feeds the previous target token)")


def _shift_of(t: torch.Tensor, v: torch.Tensor, ignore: int) -> int | None:
    """The shift ``s != 0`` with ``t[:, j] == v[:, j + s]`` on >= 90 % of the supervised positions and on < half of
    them with ``v`` paired with other examples (rolled by one: tokens every sequence shares match by chance)."""
    for s in (1, -1, 2, -2):
        lo, hi = max(0, -s), min(t.shape[1], v.shape[1] - s)
        if hi - lo < 4:
            continue
        tt, vv = t[:, lo:hi], v[:, lo + s:hi + s]
        keep = tt != ignore
        if bool(keep.any()) and float((tt == vv)[keep].float().mean()) >= 0.9 and \
                float((tt == vv.roll(1, 0))[keep].float().mean()) < 0.5:
            return s
    return None


def shifted_target_read(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """The targets are an input sequence shifted (``t[:, j] == v[:, j + s]``, ``s != 0``: next-token, or a
    bidirectional LM's middle tokens) and the prediction at a supervised ``j``, compared with ``t[:, j]``, moves when
    ``v[:, j + s]`` alone changes (on the copy in eval mode, the RNGs reseeded), through every input that carries the
    tokens (a copy task's encoder input is read whole by design, its decoder input is not): the model reads the token
    it is asked for."""
    t, items = ctx.batch.targets, named_items(ctx.batch.inputs)
    if not is_int(t) or t.dim() != 2 or ctx.batch_axis != 0 or ctx.notes.get("shifted_inside"):
        return None
    carriers = [(k, v, s) for k, v in items if is_int(v) and v.dim() == 2 and v.shape[0] == t.shape[0]
                and (s := _shift_of(t, v, ctx.ignore_index)) is not None]
    reads = [_reads_target(ctx, t, *c) for c in carriers]
    if not reads or any(r is None for r in reads):
        return None
    (key, _, s), (j, here) = carriers[0], reads[0]
    ev.update(targets_shift_of=[key, s], leak_position=j, output_change_at_position=here)
    return failed("DEPENDENCY", "dependency.target_leak",
                  f"the targets are '{key}' shifted by {s} (targets[:, j] == '{key}'[:, j + {s}]), and the prediction "
                  f"at position {j} changes when '{key}'[:, {j + s}] alone changes (by {g4(here)}): the model reads the "
                  "token it is asked to predict", ev,
                  expected=f"the prediction at j independent of '{key}'[:, j + {s}] (the token it predicts)",
                  observed=f"output at {j} moves with '{key}'[:, {j + s}]",
                  hint="read the context that excludes the predicted token: a causal mask, or the neighbours' states "
                       "of a bidirectional model (the forward state before it, the backward state after it)")


def _reads_target(ctx: Ctx, t: torch.Tensor, key: str, v: torch.Tensor, s: int) -> tuple[int, float] | None:
    """(j, move) where the prediction at the middle supervised position j moves with ``v[:, j + s]`` alone by more than
    1e-6 of the largest move; None where it does not (or cannot be read)."""
    j = max(0, -s) + (min(t.shape[1], v.shape[1] - s) - max(0, -s)) // 2
    changed = v.clone()
    changed[:, j + s] = v[:, j + s].roll(1, 0)
    rows = (changed[:, j + s] != v[:, j + s]) & (t[:, j] != ctx.ignore_index)
    with eval_mode(ctx.work):
        base, moved = seeded_loss(ctx, ctx.batch), seeded_loss(ctx, with_input(ctx.batch, key, changed))
    a, b = (logits_of(r[0]) if r is not None else None for r in (base, moved))
    if a is None or b is None or a.dim() != 3 or tuple(a.shape[:2]) != tuple(t.shape):
        return None
    sup = supervised_positions(ctx)  # a padded query attends anywhere, and the loss asks nothing of it
    rows = rows & sup[:, j] if sup is not None and tuple(sup.shape) == tuple(t.shape) else rows
    if not bool(rows.any()):
        return None
    here, most = float((a[rows, j] - b[rows, j]).abs().max()), float((a - b).abs().max())
    return (j, here) if here > 1e-6 * max(most, 1e-12) else None


def _next_token(ctx: Ctx, ids: torch.Tensor) -> bool:
    """Whether the targets ask for the next token: targets[:, t] == ids[:, t + 1] (or targets == ids, shifted inside
    the loss) on >= 90 % of the supervised positions."""
    t = ctx.batch.targets
    if not is_int(t) or t.shape != ids.shape or ids.dim() != 2 or ids.shape[1] < 4:
        return False
    keep = t[:, :-1] != ctx.ignore_index
    if not bool(keep.any()):
        return False
    shifted = float((t[:, :-1] == ids[:, 1:])[keep].float().mean())
    same = float((t == ids)[t != ctx.ignore_index].float().mean()) if ctx.notes.get("shifted_inside") else 0.0
    return max(shifted, same) >= 0.9  # targets == ids count only when TASK saw the loss shift them (not an autoencoder)


def future_visible(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """Next-token prediction whose earlier predictions move when a later token changes (module docstring)."""
    ids = input_ids(ctx.batch)
    if ids is None or ctx.batch_axis != 0 or not _next_token(ctx, ids):
        return None
    logits = logits_of(ctx.outputs)
    if logits is None or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(ids.shape):
        return None
    j = ids.shape[1] // 2
    changed = ids.clone()
    changed[:, j] = (ids[:, j] + 1) % logits.shape[-1]
    key = next((k for k, v in named_items(ctx.batch.inputs) if v is ids), "inputs")
    with eval_mode(ctx.work):  # the wiring, not batch statistics shared across positions (_perturbed)
        base, moved = seeded_loss(ctx, ctx.batch), seeded_loss(ctx, with_input(ctx.batch, key, changed))
    a, b = (logits_of(r[0]) if r is not None else None for r in (base, moved))
    if a is None or b is None or a.shape != logits.shape:
        return None
    sup = supervised_positions(ctx)  # a leak trains nothing where the loss asks nothing (padding left unsupervised)
    diff = (a[:, :j] - b[:, :j]).abs().flatten(2).amax(-1)
    if sup is not None and tuple(sup.shape) == tuple(a.shape[:2]):
        diff = diff[sup[:, :j]]
        ev["supervised_positions_before"] = int(sup[:, :j].sum())
    before = float(diff.max()) if diff.numel() else 0.0
    after = float((a[:, j:] - b[:, j:]).abs().max())
    scale = max(float(a.abs().max()), 1e-12)
    ev.update(changed_position=j, earlier_predictions_change=before, later_predictions_change=after)
    if before <= 1e-5 * scale or after == 0.0:
        return None  # causal (or the change did not reach the model at all)
    return failed("DEPENDENCY", "dependency.future_visible",
                  f"next-token prediction (the targets are the inputs shifted by one), and the predictions before "
                  f"position {j} change (by up to {g4(before)}) when only the token at {j} changes: each position sees "
                  "the tokens after it, including the one it must predict", ev,
                  expected=f"predictions at positions < {j} independent of the token at {j} (a causal mask)",
                  observed=f"predictions before {j} move by {g4(before)}",
                  hint="mask attention to later positions (an upper-triangular mask above the diagonal, or is_causal=True)")


def supervised_positions(ctx: Ctx) -> torch.Tensor | None:
    """``[B, T]``: the positions of the logits where the loss's gradient on the ledger's copy is nonzero (what the loss
    asks of them), or None where it cannot be read."""
    with eval_mode(ctx.work):
        run = seeded_loss(ctx, ctx.batch, grad=True)
    logits = logits_of(run[0]) if run is not None else None
    loss = run[1] if run is not None else None
    if logits is None or logits.dim() != 3 or not logits.requires_grad or not torch.is_tensor(loss) or loss.numel() != 1:
        return None
    try:
        (g,) = torch.autograd.grad(loss.reshape(()), logits, allow_unused=True)
    except RuntimeError:  # a loss not differentiable to the logits: nothing read
        return None
    return None if g is None else (g != 0).flatten(2).any(-1)


def input_without_gradient(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """A float output the loss reads that carries no gradient, and a float input that changes the loss but is not on
    its graph: that input's branch runs under torch.no_grad() / .detach() (one tower of a siamese pair)."""
    outs = [k for k, v in named_items(ctx.outputs, "outputs") if torch.is_tensor(v) and v.is_floating_point() and not v.requires_grad]
    items = [(k, v) for k, v in named_items(ctx.batch.inputs) if torch.is_tensor(v) and v.is_floating_point() and v.layout == torch.strided]
    if not outs or not items or ctx.batch.inputs is None:
        return None
    batch = ctx.batch
    for k, v in items:
        batch = with_input(batch, k, v.detach().clone().requires_grad_(True))
    run = seeded_loss(ctx, batch, grad=True)
    base = seeded_loss(ctx, ctx.batch)
    if run is None or base is None or not torch.is_tensor(run[1]) or run[1].numel() != 1 or run[1].grad_fn is None:
        return None
    leaves, _ = reached_leaves(run[1])
    value = float(base[1])
    for k, _v in items:
        leaf = dict(named_items(batch.inputs))[k]
        if id(leaf) in leaves:
            continue
        noise = torch.linspace(-1.0, 1.0, leaf.numel(), dtype=leaf.dtype).reshape(leaf.shape).roll(1)
        moved = seeded_loss(ctx, with_input(ctx.batch, k, leaf.detach() + 0.5 * (1 + leaf.detach().abs()) * noise))
        if moved is None or not math.isfinite(float(moved[1])) or float(moved[1]) == value:
            continue
        ev.update(input_without_gradient=k, outputs_without_gradient=outs, loss_when_input_perturbed=float(moved[1]))
        return failed("DEPENDENCY", "dependency.input_without_gradient",
                      f"input '{k}' changes the loss ({g4(value)} -> {g4(float(moved[1]))} when perturbed) but is not on its "
                      f"autograd graph, and output {', '.join(outs)} carries no gradient: the branch that reads '{k}' runs "
                      f"under torch.no_grad() or is detached, so no parameter learns from it", ev,
                      expected=f"a gradient path from the loss through the branch that reads '{k}'",
                      observed=f"'{k}' reaches the loss only through {', '.join(outs)} (requires_grad=False)",
                      hint=f"compute the branch of '{k}' with gradients (remove the torch.no_grad() / .detach() around it)")
    return None
