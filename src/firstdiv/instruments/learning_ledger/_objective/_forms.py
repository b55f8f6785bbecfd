"""OBJECTIVE's checks of what the output layer can produce, read from the op that made the outputs (the autograd
node behind them, through views) and from their values:

- ``objective.constant_outputs``: a softmax / log_softmax over a dimension of size 1 is always 1 / 0, whatever
  the input (``nn.Linear(h, 1)`` then ``log_softmax(dim=1)``);
- ``objective.normalized_over_examples``: the outputs are normalised over the examples' axis (``log_softmax(dim=0)``):
  exp(outputs) sums to 1 over the batch instead of over the classes;
- ``objective.unreachable``: the loss cannot approach its floor even at the best output the layer can give for
  these targets (a softmax's rows sum to 1, a sigmoid is in [0, 1], a tanh in [-1, 1], a relu / softplus / exp is
  non-negative): the floor is the loss at
  outputs == targets, the scale the loss of a constant (input-blind) prediction, the mean target.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..._core.checks import Check
from ..._core.examples import logits_of
from ..._core.task import Ctx, shape
from .._common import failed, g4, warned
from ._calls import call

_VIEWS = ("View", "Reshape", "Squeeze", "Unsqueeze", "Clone", "Alias", "Expand", "Contiguous", "ToCopy", "Permute",
          "Transpose", "Select", "Slice")
_OPS = {"SoftmaxBackward0": "softmax", "LogSoftmaxBackward0": "log_softmax", "SigmoidBackward0": "sigmoid",
        "TanhBackward0": "tanh", "ReluBackward0": "relu", "SoftplusBackward0": "softplus", "ExpBackward0": "exp"}
_BOUNDS = {"sigmoid": (0.0, 1.0), "tanh": (-1.0, 1.0), "relu": (0.0, None), "softplus": (0.0, None), "exp": (0.0, None)}
UNREACHABLE = 0.10  # the best reachable loss stays above this fraction of the constant predictor's gap to the floor


def output_op(outputs: torch.Tensor) -> tuple[str, int | None, list[int]] | None:
    """``(op, dim, input_shape)`` of the normalising/bounding op that produced ``outputs`` (through views); for a
    ``torch.cat`` / ``torch.stack`` of parts made by the same op over the same dim (one head per label), that op
    with one part's shape."""
    return _op_of(getattr(outputs, "grad_fn", None), list(outputs.shape), 6)


def _op_of(node: Any, full: list[int], depth: int) -> tuple[str, int | None, list[int]] | None:
    for _ in range(depth):
        if node is None:
            return None
        name = type(node).__name__
        if name in _OPS:
            result = getattr(node, "_saved_result", None)
            dim = getattr(node, "_saved_dim", None)
            shp = list(result.shape) if torch.is_tensor(result) else full
            if dim is not None and dim >= 2 ** 63:  # a saved int64 -1 reads back as 2**64 - 1
                dim -= 2 ** 64
            if dim is not None and dim < 0:
                dim += len(shp)
            return _OPS[name], dim, shp
        if name in ("CatBackward0", "StackBackward0"):
            parts = [_op_of(n, full, depth - 1) for n, _ in node.next_functions]
            same = {(p[0], p[1]) for p in parts if p is not None}
            return parts[0] if parts and None not in parts and len(same) == 1 else None
        if not any(name.startswith(v) for v in _VIEWS):
            return None
        node = next((n for n, _ in node.next_functions if n is not None), None)
    return None


def constant_outputs(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    op = ctx.notes.get("output_op")
    if op is None or op[0] not in ("softmax", "log_softmax") or op[1] is None or op[2][op[1]] != 1:
        return None
    name, dim, full = op
    const = 1 if name == "softmax" else 0
    ev.update(output_op=name, output_op_dim=dim, output_op_input_shape=full)
    return failed("OBJECTIVE", "objective.constant_outputs",
                  f"outputs do not depend on the inputs: {name} over dimension {dim} of size 1 is always {const} (outputs "
                  f"{full}), so loss_fn sees the same {const} for every example (loss {g4(value)})", ev,
                  expected="outputs that vary with the inputs", observed=f"{name}(dim={dim}) over a dimension of size 1: always {const}",
                  hint=f"a single output unit has nothing to normalise against: drop the {name} and use the raw logit with "
                       "BCEWithLogitsLoss (or give the head one unit per class and use cross_entropy)")


def _sums_to_one(x: torch.Tensor, dim: int) -> bool:
    return x.shape[dim] > 1 and float((x.sum(dim) - 1).abs().max()) <= 1e-3


def normalized_over_examples(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    oax = ctx.notes.get("example_axis", 0)
    if od.dim() < 2 or od.shape[oax] < 2:
        return None
    op = ctx.notes.get("output_op")
    if op is not None and op[2] != list(od.shape):
        op = None  # the outputs are a part of the op's result (a column of a softmax): read the values only
    normalising = op is not None and op[0] in ("softmax", "log_softmax")
    if normalising and op[1] != oax:
        return None
    if not normalising and ctx.class_dim is None:  # read from the values only where the outputs are class scores
        return None
    other = [d for d in range(od.dim()) if d != oax]
    logs = (normalising and op[0] == "log_softmax") or (not normalising and bool((od <= 0).all()))
    probs = od.double().exp() if logs else od.double()
    if not (bool((probs >= 0).all()) and _sums_to_one(probs, oax) and not any(_sums_to_one(probs, d) for d in other)):
        return None
    name = "log_softmax" if logs else "softmax"
    ev.update(output_op=name, normalized_axis=oax, output_shape=shape(od))
    return failed("OBJECTIVE", "objective.normalized_over_examples",
                  f"the outputs are a {name} over dimension {oax}, the {od.shape[oax]} examples: "
                  f"{'exp(outputs)' if name == 'log_softmax' else 'outputs'} sum to 1 over the batch, not over the "
                  f"{od.shape[other[-1]]} classes (axis {other[-1]}), so each example's scores depend on the others", ev,
                  expected=f"{name} over the class axis (dim=-1 or 1)", observed=f"{name} over dim={oax} (the batch axis)",
                  hint=f"normalise over the classes: {name}(dim=1) (nn.{'LogSoftmax' if name == 'log_softmax' else 'Softmax'}(dim=1))")


def simplex_projection(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Euclidean projection of each slice of ``t`` along ``dim`` onto the probability simplex (Duchi et al. 2008)."""
    v = t.movedim(dim, -1).double()
    u, _ = v.sort(dim=-1, descending=True)
    css = u.cumsum(-1) - 1
    idx = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype)
    rho = ((u - css / idx) > 0).sum(-1, keepdim=True).clamp_min(1)
    theta = css.gather(-1, rho - 1) / rho.to(v.dtype)
    return (v - theta).clamp_min(0).movedim(-1, dim).to(t.dtype)


def _best(op: tuple[str, int | None, list[int]], t: torch.Tensor) -> tuple[torch.Tensor, str, str] | None:
    """The closest output the op can give to ``t``, the constraint, and what the targets do instead."""
    name, dim = op[0], op[1]
    if name == "softmax" and dim is not None:
        sums = t.double().sum(dim)
        return (simplex_projection(t, dim), f"the outputs' slices along dim {dim} sum to 1 (softmax)",
                f"the targets' sum to {g4(sums.mean())} on average (from {g4(sums.min())} to {g4(sums.max())})")
    if name not in _BOUNDS:
        return None
    lo, hi = _BOUNDS[name]
    where = f"[{lo:g}, {hi:g}]" if hi is not None else f"[{lo:g}, inf)"
    return (t.clamp(lo, hi), f"the outputs lie in {where} ({name})", f"the targets range over [{g4(t.min())}, {g4(t.max())}]")


def unreachable(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    op, t = ctx.notes.get("output_op"), ctx.batch.targets
    if op is None or not torch.is_tensor(t) or not t.is_floating_point() or tuple(t.shape) != tuple(od.shape):
        return None
    if op[2] != list(od.shape) and op[0] == "softmax":
        return None  # a part of a softmax (one column): its slices need not sum to 1
    best = _best(op, t.to(od.dtype))
    if best is None:
        return None
    point, constraint, instead = best
    oax = ctx.notes.get("example_axis", 0)
    floor = call(ctx, t.to(od.dtype), t, ev, "outputs equal to the targets")
    reached = call(ctx, point, t, ev, "the best output the layer can give")
    blind = call(ctx, t.to(od.dtype).mean(oax, keepdim=True).expand_as(od).contiguous(), t, ev, "the mean target")
    ev.update(loss_floor=floor, loss_at_best_reachable=reached, loss_of_constant_prediction=blind, output_op=op[0])
    if floor is None or reached is None or blind is None or blind - floor <= 1e-12:
        return None
    if reached - floor <= UNREACHABLE * (blind - floor):
        return None
    if _order_suffices(ctx, op, t.to(od.dtype), floor, blind, ev):
        return None
    if op[0] == "softmax" and ctx.requested_task != "classification" and _likelihood_weighted(ctx, od, point, t, ev):
        return warned("OBJECTIVE", f"the loss cannot reach its floor: {constraint} while {instead} (best reachable "
                      f"{g4(reached)}, {g4(floor)} at outputs == targets). The loss is the targets' weighted "
                      "log-likelihood of the softmax (affine in the targets, and at zero targets it does not read the "
                      "outputs): a multinomial likelihood over multi-hot targets (a recommender's Mult-VAE, a listwise "
                      "ranking loss) is this by design; independent labels behind a softmax are a bug. Declare "
                      "task='classification' if each label is predicted on its own", ev, kind="objective.unreachable")
    return failed("OBJECTIVE", "objective.unreachable",
                  f"the loss cannot reach its floor: {constraint} while {instead}; at the best output the layer can give "
                  f"the loss is {g4(reached)}, far from its value {g4(floor)} at outputs == targets (a constant prediction "
                  f"gives {g4(blind)}, the model now {g4(value)})", ev,
                  expected="an output layer that can produce the targets (loss ~ its floor at the correct answer)",
                  observed=f"{constraint}; {instead}; best reachable loss {g4(reached)} vs floor {g4(floor)}",
                  hint="match the output layer to the targets: independent labels (multilabel 0/1) need one sigmoid per "
                       "label (raw logits + BCEWithLogitsLoss), not a softmax; unbounded targets need an unbounded output")


def _order_suffices(ctx: Ctx, op: tuple[str, int | None, list[int]], t: torch.Tensor, floor: float, blind: float,
                    ev: dict[str, Any]) -> bool:
    """The premise that outputs == targets is the loss's floor, and the counterfactual for a bounded output: a loss
    lower at twice the targets is not lowest at them (it reads how the outputs rank or spread: a ranking loss); the
    targets mapped affinely into the layer's range (their order and spacing kept) reaching the floor show a loss that
    reads how the outputs compare, satisfied by an output the layer can give."""
    bounds = _BOUNDS.get(op[0]) if op[0] != "softmax" else None
    if bounds is None or float(t.max() - t.min()) <= 0:
        return False
    wider = call(ctx, 2 * t, t, ev, "outputs equal to twice the targets")
    if wider is not None and floor - wider > 1e-3 * (blind - floor):  # not its floor: it wants a wider spread
        ev["loss_at_twice_the_targets"] = wider
        ctx.report_notes.append(f"note: the outputs' range ({op[0]}) cannot hold the targets, but the loss is not lowest at "
                                f"outputs == targets ({g4(floor)}; {g4(wider)} at twice them): it reads how the outputs "
                                "rank or spread (a ranking loss), not their values, so the range was not judged")
        return True
    if bounds[1] is None:
        return False
    lo, hi = bounds
    margin = 0.02 * (hi - lo)  # inside the range, not on its edge (a tanh never reaches 1)
    inside = lo + margin + (t - t.min()) / (t.max() - t.min()) * (hi - lo - 2 * margin)
    got = call(ctx, inside, t, ev, "the targets mapped affinely into the layer's range")
    ev["loss_at_targets_mapped_into_range"] = got
    if got is None or got - floor > UNREACHABLE * (blind - floor):
        return False
    ctx.report_notes.append(f"note: the outputs lie in [{lo:g}, {hi:g}] ({op[0]}) and the targets do not, but the targets "
                            f"mapped affinely into that range give the loss {g4(got)}, near its {g4(floor)} at outputs "
                            "== targets: the loss reads how the outputs rank or compare, which the layer can give")
    return True


def _likelihood_weighted(ctx: Ctx, od: torch.Tensor, other: torch.Tensor, t: torch.Tensor, ev: dict[str, Any]) -> bool:
    """The loss is ``-sum(t * f(outputs)) + c`` (a likelihood the targets weight, beside terms that do not read the
    targets, as a VAE's KL): affine in the targets (L(2t) - 2 L(t) + L(0) = 0), and at zero targets it stays put when
    the outputs change. A binary cross-entropy on the same probabilities is affine too but reads the outputs at zero
    targets (its ``(1 - t) log(1 - p)`` term): an independent-label loss, which stays a FAIL."""
    t = t.to(od.dtype)
    at = [call(ctx, od, k * t, ev, f"the loss at {k} x the targets") for k in (0.0, 1.0, 2.0)]
    moved = call(ctx, other, 0.0 * t, ev, "the loss at zero targets, other outputs")
    if any(v is None for v in at) or moved is None:
        return False
    scale = max(abs(at[1]), abs(at[2]), 1e-8)
    weighted = abs(at[2] - 2 * at[1] + at[0]) <= 1e-4 * scale and abs(moved - at[0]) <= 1e-6 * scale
    ev["loss_weighted_by_targets"] = weighted
    return weighted


def labels_compete(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """Multilabel 0/1 targets (several labels on in a row) and a loss that does not change when one constant is
    added to all of a row's logits: the loss normalises over the labels (a softmax inside loss_fn), so they compete
    for one unit of probability and a row with two labels on can never be fitted. A loss linear in the targets
    (``-sum(t * log_softmax(z))``, a multinomial likelihood over multi-hot targets: a recommender's objective by design)
    FAILs only where the program declares task='classification' (each label a class of its own), else it is a WARN of
    the same kind; a loss that asks the softmax to equal the targets (MSE on it) FAILs."""
    t = ctx.batch.targets
    if ctx.label_kind != "multilabel" or not torch.is_tensor(t) or od.dim() < 2 or tuple(t.shape) != tuple(od.shape):
        return None
    oax = ctx.notes.get("example_axis", 0)
    on = t.movedim(oax, 0).reshape(t.shape[oax], -1).sum(-1)
    if od.shape[-1] < 2 or not bool((on >= 2).any()):
        return None
    shift = torch.linspace(-2.0, 2.0, od.shape[oax], dtype=od.dtype).reshape([-1 if d == oax else 1 for d in range(od.dim())])
    moved = call(ctx, od + shift, t, ev, "logits shifted by a constant per example")
    ev["loss_after_shifting_each_row"] = moved
    if moved is None or abs(moved - value) > 1e-5 * max(abs(value), 1e-8):
        return None
    proj = simplex_projection(t.to(od.dtype), od.dim() - 1)
    reached = call(ctx, proj.clamp_min(1e-6).log(), t, ev, "the best softmax over the labels")
    ev.update(rows_with_several_labels=int((on >= 2).sum()), loss_at_best_softmax=reached)
    doubled = call(ctx, od, t * 2, ev, "the loss at doubled targets")
    weighted = doubled is not None and abs(doubled - 2 * value) <= 1e-4 * max(abs(value), 1e-8)
    ev["loss_linear_in_targets"] = weighted
    # a likelihood weighted by the targets (-sum(t * log_softmax(z))) is a multinomial over the labels: by design for a
    # recommender, a bug for independent labels, and only the program's word (task='classification') tells which
    if weighted and ctx.requested_task != "classification":
        return warned("OBJECTIVE", f"the loss ({g4(value)}) is unchanged when a constant is added to an example's "
                      f"{od.shape[-1]} logits while {int((on >= 2).sum())} of {len(on)} examples have several labels on: "
                      "the labels compete for one unit of probability. A multinomial likelihood over the labels (a "
                      "recommender's Mult-VAE, a listwise ranking loss) is this by design; independent labels behind a "
                      "softmax are a bug. Declare task='classification' if each label is predicted on its own", ev,
                      kind="objective.unreachable")
    return failed("OBJECTIVE", "objective.unreachable",
                  f"the labels are independent ({int((on >= 2).sum())} of {len(on)} examples have several on) but the loss "
                  f"({g4(value)}) is unchanged when a constant is added to an example's {od.shape[-1]} logits: loss_fn "
                  f"normalises over the labels (a softmax), so they compete for one unit of probability and the best it "
                  f"can do is {g4(reached) if reached is not None else 'n/a'}, not a fit", ev,
                  expected="one independent score per label (sigmoid / BCEWithLogitsLoss): the loss moves with each logit",
                  observed=f"loss invariant to a per-example shift of all {od.shape[-1]} logits; multilabel 0/1 targets",
                  hint="drop the softmax over the labels: use nn.BCEWithLogitsLoss on the raw logits (one sigmoid per label)")


def _leaves(out: Any, path: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], torch.Tensor]]:
    """The tensors of nested tuples and lists (not named tuples), each with its index path."""
    if torch.is_tensor(out):
        return [(path, out)]
    if isinstance(out, (list, tuple)) and not hasattr(out, "_fields"):
        return [leaf for i, v in enumerate(out) for leaf in _leaves(v, (*path, i))]
    return []


def _put(out: Any, path: tuple[int, ...], new: torch.Tensor) -> Any:
    """``out`` with the leaf at ``path`` replaced by ``new`` and every other tensor detached."""
    if not path:
        return new
    if torch.is_tensor(out):
        return out.detach()
    return type(out)(_put(v, path[1:], new) if j == path[0] else _detached(v) for j, v in enumerate(out))


def _detached(out: Any) -> Any:
    if torch.is_tensor(out):
        return out.detach()
    return type(out)(_detached(v) for v in out) if isinstance(out, (list, tuple)) and not hasattr(out, "_fields") else out


def unbounded_below(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """A side tensor of a tuple output, nested or not (a VAE's ``mu``), that, scaled up 10x and 100x, drives the loss
    down each time, far below zero and faster than in proportion: the loss has no minimum, a term with the wrong sign
    (``+0.5 * sum(1 + logvar - mu^2 - ...)``). A fall in proportion (a term linear in the output: a flow's
    log-determinant) is a WARN. The prediction itself (the first output, the scores the loss compares) is not scaled."""
    out = ctx.outputs
    if not isinstance(out, (list, tuple)) or hasattr(out, "_fields"):
        return None
    for path, v in _leaves(out):
        if v is out[0] or v is logits_of(out) or not v.is_floating_point() or not bool(v.detach().abs().gt(0).any()):
            continue
        if path == (ctx.notes.get("log_det_confirmed"),):  # log|det dz/dx| by autograd (_flow_logdet): linear by design
            continue
        losses = []
        for k in (10.0, 100.0):
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    losses.append(float(ctx.loss_fn(_put(out, path, v.detach() * k), ctx.batch.targets)))
            except Exception:  # noqa: BLE001 - user code: this probe is skipped
                break
        if len(losses) < 2 or not (value > losses[0] > losses[1]) or losses[1] > -10 * max(abs(value), 1.0):
            continue
        name = "outputs" + "".join(f"[{i}]" for i in path)
        ev.update(unbounded_output=name, loss_at_10x=losses[0], loss_at_100x=losses[1])
        if losses[0] - losses[1] < 30 * (value - losses[0]):  # linear in the output: a log-determinant term's design
            return warned("OBJECTIVE", f"the loss falls in proportion as {name} grows ({g4(value)} -> "
                          f"{g4(losses[0])} -> {g4(losses[1])} at 10 and 100 times): a term linear in that output, as a "
                          "flow's log-determinant is by design (the model ties it to its other outputs); a regulariser "
                          "with the wrong sign looks the same", ev, kind="objective.wrong_sign")
        return failed("OBJECTIVE", "objective.wrong_sign",
                      f"the loss has no minimum: scaling {name} {list(v.shape)} by 10 and 100 takes it from {g4(value)} "
                      f"to {g4(losses[0])} and {g4(losses[1])}: a term of the loss rewards that output growing without bound "
                      f"(a regulariser / KL term with the wrong sign)", ev,
                      expected="a loss bounded below (a KL divergence >= 0 rises as mu grows)",
                      observed=f"loss {g4(value)} -> {g4(losses[1])} at 100 x {name}",
                      hint=f"check the sign of each term that reads {name}: KLD = -0.5 * sum(1 + logvar - mu^2 - exp(logvar))")
    return None


def unbounded_in_scores(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """Class scores whose target entry, raised by 10 and by 100 in every supervised row, take the loss down in
    proportion and far below zero: a class loss linear in its scores (label smoothing, or a soft-target loss, written
    without log_softmax) has no minimum, and the model can lower it forever by inflating one score. A cross-entropy
    of any form flattens towards 0 instead. Outputs the model normalized itself (log-probabilities, probabilities)
    cannot be raised one entry at a time: no finding."""
    t = ctx.batch.targets
    if ctx.label_kind != "multiclass" or ctx.class_dim is None or not torch.is_tensor(t) or t.is_floating_point():
        return None
    moved = od.movedim(ctx.class_dim, -1)
    k = moved.shape[-1]
    if t.numel() != moved[..., 0].numel():
        return None
    labels = t.reshape(moved.shape[:-1])
    keep = (labels >= 0) & (labels < k)
    if not bool(keep.any()) or _normalized(moved[keep]):  # the model's log_softmax / softmax: one raised entry leaves
        return None                                         # the outputs' domain
    onehot = torch.nn.functional.one_hot(labels.clamp(0, k - 1).long(), k).to(od.dtype) * keep[..., None]
    losses = [call(ctx, (moved + s * onehot).movedim(-1, ctx.class_dim), t, ev, f"the target scores raised by {s:g}")
              for s in (10.0, 100.0)]
    if None in losses or not (value > losses[0] > losses[1]) or losses[1] > -10 * max(abs(value), 1.0):
        return None
    ev.update(loss_target_scores_plus_10=losses[0], loss_target_scores_plus_100=losses[1])
    return failed("OBJECTIVE", "objective.unbounded_in_scores",
                  f"the loss has no minimum in the class scores: raising every row's target score by 10 and by 100 takes "
                  f"it from {g4(value)} to {g4(losses[0])} and {g4(losses[1])}: it is linear in the scores (a soft-target "
                  "or label-smoothing loss without log_softmax), so inflating one score lowers it forever", ev,
                  expected="a class loss bounded below (cross-entropy flattens towards 0 as the target score grows)",
                  observed=f"loss {g4(value)} -> {g4(losses[1])} with the target scores raised by 100",
                  hint="take log_softmax of the scores before weighting them by the (smoothed) targets: "
                       "loss = -(soft_targets * scores.log_softmax(-1)).sum(-1).mean()")


def _normalized(rows: torch.Tensor) -> bool:
    """Most rows are log-probabilities (logsumexp 0) or probabilities (non-negative, summing to 1): a model that
    normalizes its outputs (a sequence model's unused first step may hold zeros)."""
    z = rows.detach().float()
    log_probs = torch.logsumexp(z, -1).abs() < 1e-3
    probs = (z >= 0).all(-1) & ((z.sum(-1) - 1).abs() < 1e-3)
    return float((log_probs | probs).float().mean()) >= 0.5


def unbounded(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """The loss without a minimum: in a side output (:func:`unbounded_below`) or in the class scores."""
    return unbounded_below(ctx, od, value, ev) or unbounded_in_scores(ctx, od, value, ev)
