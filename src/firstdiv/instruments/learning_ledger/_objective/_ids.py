"""OBJECTIVE's identification of the loss: which standard objective of the task it is (:func:`standard` lists
their batch means and the counts a sum would multiply them by), and :func:`identify`, the last check: the loss is
cross-entropy of the logits (plain, per example with class weights, label-smoothed, masked to the elements the
loss reads, next-token on shifted logits when the model shifts its own labels), binary cross-entropy for 0/1
targets, MSE / MAE for regression, or the user's ``reference_loss``. It sets ``ev['verdict']`` when it identifies
the loss, FAILs when a classification loss provably is not the cross-entropy it should be, and otherwise leaves
the verdict unset (the link then notes that the objective was not identified)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ....report import Status
from ..._core.checks import Check, check
from ..._core.task import Ctx, err, is_int
from .._common import failed, g4, isclose, manual_ce, to_logits_2d
from ._calls import call, example_axis, per_example

PER_EXAMPLE = 8
FAR = 0.10  # relative distance from cross-entropy beyond which the loss is "another objective"


def _shifted_ce(ctx: Ctx, od: torch.Tensor, t: torch.Tensor) -> float:
    with torch.no_grad():
        z = od[:, :-1].reshape(-1, od.shape[-1]).float()
        return float(F.cross_entropy(z, t[:, 1:].reshape(-1).long(), ignore_index=ctx.ignore_index))


def standard(ctx: Ctx, od: torch.Tensor) -> list[tuple[str, float, tuple[int, ...]]]:
    """``(name, batch mean, counts)`` of the task's standard objectives at these outputs; ``counts`` are the
    numbers of terms a sum over elements or over examples would multiply the mean by."""
    t, out = ctx.batch.targets, []
    if not torch.is_tensor(t):
        return out
    n = int(t.shape[ctx.notes.get("example_axis", 0)] if t.dim() > ctx.notes.get("example_axis", 0) else t.shape[0]) if t.dim() else 1
    with torch.no_grad():
        if ctx.class_dim is not None and is_int(t):
            sup = int((t != ctx.ignore_index).sum())
            if ctx.notes.get("shifted_inside"):
                out.append(("next-token cross-entropy on shifted logits", _shifted_ce(ctx, od, t), (sup, n)))
            else:
                out.append(("mean cross-entropy", manual_ce(ctx, od, t), (sup, n)))
        elif ctx.label_kind in ("binary", "multilabel") and tuple(t.shape) == tuple(od.shape):
            x, y = od.double(), t.double()
            out.append(("binary cross-entropy with logits", float(F.binary_cross_entropy_with_logits(x, y)), (t.numel(), n)))
            if bool((x >= 0).all()) and bool((x <= 1).all()):
                out.append(("binary cross-entropy of probabilities", float(F.binary_cross_entropy(x, y)), (t.numel(), n)))
        if t.is_floating_point() and tuple(t.shape) == tuple(od.shape):
            diff = od.double() - t.double()
            out += [("mean squared error", float(diff.pow(2).mean()), (t.numel(), n)),
                    ("mean absolute error", float(diff.abs().mean()), (t.numel(), n))]
    return out


def identify(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    if ctx.reference_loss is not None:
        return _reference(ctx, od, value, ev)
    if ctx.class_dim is not None and is_int(ctx.batch.targets):
        return None if ev.get("outputs_are_probabilities") else _cross_entropy(ctx, od, value, ev)
    if ctx.label_kind in ("binary", "multilabel"):
        bad = _sigmoid_into_logits_loss(ctx, od, value, ev)
        if bad is not None:
            return bad
    name = next((name for name, mean, _ in standard(ctx, od) if isclose(value, mean)), None)
    if name is not None:
        ev["verdict"] = f"loss {g4(value)} = {name} of the outputs" + (f" ({ctx.label_kind} targets)" if ctx.label_kind else "")
    return None


def _sigmoid_into_logits_loss(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    op, t = ctx.notes.get("output_op"), ctx.batch.targets
    if op is None or op[0] != "sigmoid" or tuple(t.shape) != tuple(od.shape):
        return None
    with torch.no_grad():
        as_logits = float(F.binary_cross_entropy_with_logits(od.double(), t.double()))
        as_probs = float(F.binary_cross_entropy(od.double(), t.double()))
    if not isclose(value, as_logits) or isclose(value, as_probs):
        return None
    ev.update(bce_reading_outputs_as_logits=as_logits, bce_of_outputs_as_probabilities=as_probs)
    return failed("OBJECTIVE", "objective.probabilities_as_logits",
                  f"the outputs come out of a sigmoid (in [{g4(od.min())}, {g4(od.max())}]) and the loss ({g4(value)}) "
                  f"applies a sigmoid again (BCE with logits {g4(as_logits)}; BCE of them as probabilities {g4(as_probs)})",
                  ev, expected="raw logits into BCEWithLogitsLoss (or probabilities into BCELoss)",
                  observed=f"sigmoid outputs; loss {g4(value)} = BCE-with-logits of them",
                  hint="remove the sigmoid at the end of forward (BCEWithLogitsLoss applies it), or use BCELoss")


def _support(ctx: Ctx, od: torch.Tensor) -> torch.Tensor | None:
    """Rows of the ``[elements, K]`` logits the loss reads (non-zero d loss / d logits), when that is a strict subset."""
    g = ctx.notes.get("grad")
    if g is None:
        return None
    rows = to_logits_2d(ctx, g).ne(0).any(-1) & (ctx.batch.targets.reshape(-1) != ctx.ignore_index)
    return rows if 0 < int(rows.sum()) < rows.numel() else None


def _examples(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any]) -> list[tuple[float, float]]:
    """(loss_fn, cross-entropy by hand) on each of the first examples that loss_fn could evaluate alone."""
    each = per_example(ctx, od, ev, PER_EXAMPLE)[1]
    oax = ctx.notes.get("example_axis", 0)
    t = ctx.batch.targets
    tax = example_axis(t, od.shape[oax], oax) or 0
    manual = [_one_ce(ctx, od.narrow(oax, i, 1), t.narrow(tax, i, 1)) for i in range(len(each))]
    return [(a, b) for a, b in zip(each, manual) if a is not None and math.isfinite(b)]


def _one_ce(ctx: Ctx, o: torch.Tensor, t: torch.Tensor) -> float:
    """One example's cross-entropy by hand; NaN where its slices do not pair (the targets' example axis is not the
    outputs': a WaveNet's one sequence of 256 positions against its targets sliced along another axis)."""
    pairs = o.numel() // o.shape[ctx.class_dim] if ctx.class_dim is not None and o.dim() > ctx.class_dim else -1
    return manual_ce(ctx, o, t) if pairs == t.numel() else math.nan


def _cross_entropy(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    t, k = ctx.batch.targets, ctx.num_classes or 0
    if ctx.notes.get("shifted_inside"):
        ce = _shifted_ce(ctx, od, t)
        if isclose(value, ce):
            ev["verdict"] = (f"loss {g4(value)} = next-token cross-entropy on shifted logits (the model shifts labels == "
                             f"input_ids itself; {ctx.ignore_index} ignored)")
        return None
    ce = manual_ce(ctx, od, t)
    pairs = _examples(ctx, od, ev)
    ev.update(cross_entropy_manual=ce, ln_k=math.log(k) if k else None)
    if pairs:
        ev.update(example_library_loss=pairs[0][0], example_manual_ce=pairs[0][1])
    twice = _softmax_then_ce(ctx, od, ev)
    if twice is not None:
        return twice
    if isclose(value, ce):
        ev["verdict"] = f"loss {g4(value)} = cross-entropy of the outputs as logits (ln K = {g4(math.log(k))})"
        return None
    if pairs and all(isclose(a, b) for a, b in pairs):
        ev["verdict"] = (f"each of {len(pairs)} examples reproduces cross-entropy by hand; the batch loss {g4(value)} "
                         f"weights them (class weights?) against the plain mean {g4(ce)}")
        return None
    eps = _smoothing(ctx, od, value, ce)
    if eps is not None:
        ev["label_smoothing"] = eps
        ev["verdict"] = f"loss {g4(value)} = cross-entropy with label smoothing {eps:.3g}"
        return None
    if _masked(ctx, od, value, ev) or not pairs:
        return None  # a masked cross-entropy (verdict set), or nothing to compare one example with: a note
    return _not_cross_entropy(ctx, od, value, ce, pairs, ev)


def _softmax_then_ce(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any]) -> Check | None:
    """The loss is cross-entropy of softmax(outputs): loss_fn turns the logits into probabilities and cross_entropy
    reads those as logits. At an untrained model's small logits both are ~ln K, so the loss is probed at the same
    logits spread out (std 3), where the two differ."""
    std = float(od.float().std()) if od.numel() > 1 else 0.0
    if not math.isfinite(std) or std == 0.0:
        return None
    z = (od.float() - od.float().mean()) * (3.0 / std)
    t = ctx.batch.targets
    probe = call(ctx, z.to(od.dtype), t, ev, "spread-out logits")
    if probe is None:
        return None
    plain, twice = manual_ce(ctx, z, t), manual_ce(ctx, z.softmax(ctx.class_dim), t)
    ev.update(loss_at_spread_logits=probe, ce_at_spread_logits=plain, ce_of_softmax_at_spread_logits=twice)
    if not isclose(probe, twice) or isclose(probe, plain):
        return None
    return failed("OBJECTIVE", "objective.probabilities_as_logits",
                  f"the loss is cross-entropy of softmax(outputs): at logits spread to std 3 it is {g4(probe)} = cross-entropy "
                  f"of their softmax ({g4(twice)}), not of the logits ({g4(plain)}); loss_fn softmaxes the logits and "
                  f"cross_entropy softmaxes them again, so the loss cannot fall far below ln K and its gradients vanish", ev,
                  expected="raw logits into cross_entropy (it applies log_softmax itself)",
                  observed=f"loss at spread logits {g4(probe)} = cross-entropy of softmax(logits) {g4(twice)}",
                  hint="drop the .softmax() before F.cross_entropy / nn.CrossEntropyLoss (or use nll_loss of log_softmax)")


def _masked(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> bool:
    rows = _support(ctx, od)
    if rows is None:
        return False
    with torch.no_grad():
        z = to_logits_2d(ctx, od.float())[rows]
        masked = float(F.cross_entropy(z, ctx.batch.targets.reshape(-1)[rows].long()))
    ev.update(loss_reads_elements=int(rows.sum()), cross_entropy_over_read_elements=masked)
    if not isclose(value, masked):
        return False
    ev["verdict"] = (f"loss {g4(value)} = cross-entropy over the {int(rows.sum())} of {rows.numel()} elements the loss "
                     f"reads (a mask)")
    return True


def row_weights(ctx: Ctx, od: torch.Tensor) -> torch.Tensor | None:
    """Per-element weights ``w`` with d loss / d logits == w * (softmax - one_hot) on every element the loss reads: the
    loss is a per-example weighted cross-entropy (class / sample weights, a policy gradient's advantages); None if not."""
    g, t = ctx.notes.get("grad"), ctx.batch.targets
    if g is None or ctx.class_dim is None or not is_int(t):
        return None
    gz, flat = to_logits_2d(ctx, g.double()), t.reshape(-1)
    rows = gz.ne(0).any(-1) & (flat != ctx.ignore_index)
    if not bool(rows.any()):
        return None
    z = to_logits_2d(ctx, od.double())[rows]
    ref = z.softmax(-1) - F.one_hot(flat[rows].long(), z.shape[-1]).double()
    gz = gz[rows]
    w = (gz * ref).sum(-1) / ref.pow(2).sum(-1).clamp_min(1e-300)
    residual = (gz - w[:, None] * ref).norm(dim=-1)
    return w if bool((residual <= 1e-4 * gz.norm(dim=-1) + 1e-12).all()) else None


def _rewards_correct_class(ctx: Ctx) -> bool:
    """d loss / d logit < 0 for the correct class and >= 0 for the others, on every element the loss reads."""
    g = ctx.notes.get("grad")
    if g is None:
        return False
    gz, flat = to_logits_2d(ctx, g.double()), ctx.batch.targets.reshape(-1)
    rows = gz.ne(0).any(-1) & (flat != ctx.ignore_index)
    if not bool(rows.any()):
        return False
    gz, y = gz[rows], flat[rows].long()
    correct = gz.gather(1, y[:, None]).squeeze(1)
    others = gz.scatter(1, y[:, None], 0.0)
    tol = 1e-9 * float(gz.abs().max())
    return bool((correct < -tol).all()) and bool((others >= -tol).all())


def _not_cross_entropy(ctx: Ctx, od: torch.Tensor, value: float, ce: float, pairs: list[tuple[float, float]],
                       ev: dict[str, Any]) -> Check | None:
    k = ctx.num_classes or 0
    w = row_weights(ctx, od)
    if w is not None and float(w.max() - w.min()) > 1e-3 * float(w.abs().max()):
        ev.update(example_weight_min=float(w.min()), example_weight_max=float(w.max()))
        ev.setdefault("objective_notes", []).append(
            f"it is cross-entropy weighted per example (weights from {g4(w.min())} to {g4(w.max())}: sample weights, "
            f"a policy gradient's advantages?): pass it as reference_loss= to check it")
        return None
    ratios = [a / b for a, b in pairs if b > 1e-12]
    scaled = len(ratios) == len(pairs) and max(ratios) - min(ratios) <= 1e-3 * abs(ratios[0])
    if not scaled and _rewards_correct_class(ctx):
        ev.setdefault("objective_notes", []).append(
            "it is not cross-entropy, but on every example it rewards the correct class's logit and penalises the "
            "others (a focal or custom classification loss?): pass it as reference_loss= to check it")
        return None
    example = f"example 0: library {g4(pairs[0][0])} vs manual cross-entropy {g4(pairs[0][1])}"
    if abs(value - ce) > FAR * max(abs(ce), 1e-12):
        # that cross-entropy is meant is an assumption the program cannot confirm (a metric-learning loss on
        # embeddings with class labels looks the same): named, never a FAIL
        return check("OBJECTIVE", "objective.initial_loss", Status.WARN,
                     f"loss {g4(value)} is not the cross-entropy of these outputs ({g4(ce)}; ln K = {g4(math.log(k))} for "
                     f"an untrained {k}-class model; {example}): if the outputs are class scores and cross-entropy is "
                     "meant, the loss is another objective (e.g. MSE on one column); if this objective is intended (a "
                     "metric or ranking loss on embeddings), pass it written by hand as reference_loss= to check it", ev)
    return check("OBJECTIVE", "objective.manual_mismatch", Status.WARN,
                 f"loss {g4(value)} is within {FAR:.0%} of cross-entropy ({g4(ce)}) but not equal, and single examples do "
                 f"not reproduce it ({example}): a wrong class axis, a misaligned target or an extra term, unless this "
                 "objective is meant; pass it written by hand as reference_loss= to check it", ev)


def _smoothing(ctx: Ctx, od: torch.Tensor, value: float, ce: float) -> float | None:
    """The label-smoothing eps that makes ``value`` the smoothed cross-entropy, when one in (0, 1) does."""
    t = ctx.batch.targets.reshape(-1).long()
    m = t != ctx.ignore_index
    with torch.no_grad():
        uniform = float(-(to_logits_2d(ctx, od.float())[m].log_softmax(-1)).mean(-1).mean())
    if uniform == ce:
        return None
    eps = (value - ce) / (uniform - ce)
    if not 0 < eps < 1:
        return None
    z = to_logits_2d(ctx, od.float())
    again = float(F.cross_entropy(z, t, ignore_index=ctx.ignore_index, label_smoothing=eps))
    return eps if isclose(value, again) else None


def _reference(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """The user's hand-written objective against loss_fn: on the batch, then on each of a few examples."""
    t = ctx.batch.targets
    try:
        ref = float(ctx.reference_loss(od, t))
        each = [(call(ctx, od[i:i + 1], t[i:i + 1], ev, f"example {i}", (i, i + 1)),
                 float(ctx.reference_loss(od[i:i + 1], t[i:i + 1]))) for i in range(min(PER_EXAMPLE, od.shape[0]))]
    except Exception as exc:  # noqa: BLE001 - user code
        ev.setdefault("objective_notes", []).append(f"reference_loss raised {err(exc)}: the objective was not compared")
        return None
    pairs = [(a, b) for a, b in each if a is not None]
    ev.update(reference_loss=ref, example_library_loss=pairs[0][0] if pairs else None,
              example_reference_loss=pairs[0][1] if pairs else None)
    bad = next(((i, a, b) for i, (a, b) in enumerate(pairs) if not isclose(a, b)), None)
    if isclose(value, ref) and bad is None:
        ev["verdict"] = f"loss {g4(value)} = reference_loss on the batch and on {len(pairs)} single examples"
        return None
    where = f"example {bad[0]}: loss_fn {g4(bad[1])} vs reference {g4(bad[2])}" if bad else f"batch: {g4(value)} vs {g4(ref)}"
    return failed("OBJECTIVE", "objective.manual_mismatch", f"loss_fn disagrees with reference_loss ({where})", ev,
                  expected="loss_fn(outputs, targets) == reference_loss(outputs, targets)", observed=where,
                  hint="compare the two on that example term by term: a wrong axis, a misaligned target or an extra term")
