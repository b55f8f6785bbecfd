"""OBJECTIVE: are the outputs in the representation the loss expects, and can one example reproduce
the loss by hand?

The checks run on the outputs of one forward pass, detached, so every probe of the loss is a call of
``loss_fn`` on those same numbers (dropout or batch statistics cannot make two calls disagree):

1. the loss is a scalar floating tensor (``objective.unusable_loss``);
2. something is supervised (``objective.empty_mask``): not every target is ``ignore_index``, a NaN
   loss does not come from finite outputs (a mean over an empty mask is 0/0), and the loss is not
   blind to its outputs (d loss / d outputs exactly zero and unchanged under a perturbation);
   an infinite or NaN loss from non-finite outputs is ``objective.nonfinite_loss``;
3. classification: outputs are not already probabilities fed to a logits loss
   (``objective.probabilities_as_logits``; probabilities passed through ``log`` then NLL are fine);
4. the loss is not negative while falling as the correct answer gets worse (``objective.wrong_sign``);
5. regression: outputs and targets do not broadcast against each other (``objective.shape_broadcast``:
   different shapes and the loss is not zero when outputs equal the targets);
6. loss on m <= 8 examples is their mean per-example loss, not m times it (``objective.sum_reduction``);
7. classification: the loss is cross-entropy of the outputs read as logits — on the batch, per example
   (class weights change only the batch mean), or with label smoothing (fitted, 0 < eps < 1).
   Otherwise: more than 10% away from that cross-entropy (which is ~ln K for an untrained model) ->
   ``objective.initial_loss``; closer -> ``objective.manual_mismatch``. ln K alone is never a verdict:
   a trained model's loss is legitimately below it, a badly scaled init legitimately above it.
   With ``reference_loss`` (the intended objective written by hand, e.g. a focal loss), the loss is
   compared with it instead, on the batch and on single examples (``objective.manual_mismatch``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from .._core.batch import loss_problem
from .._core.checks import Check
from .._core.task import Ctx, err, is_int, shape
from ._common import failed, g4, isclose, manual_ce, passed, supervised, to_logits_2d, warned

PER_EXAMPLE = 8  # examples sliced out for the per-example checks
FAR = 0.10  # relative distance from cross-entropy beyond which the loss is "another objective"


def check_objective(ctx: Ctx) -> Check:
    loss = ctx.loss
    problem = loss_problem(loss)
    if problem is not None:
        return failed("OBJECTIVE", "objective.unusable_loss", problem, {"loss": shape(loss)},
                      expected="a scalar floating-point loss tensor attached to the graph", observed=problem,
                      hint="return the reduced loss tensor from loss_fn (e.g. .mean()), not a per-example vector or .item()")
    value = float(loss.detach())
    ev: dict[str, Any] = {"loss": value, "task": ctx.task}
    if not torch.is_tensor(ctx.outputs) or not ctx.outputs.is_floating_point():
        return warned("OBJECTIVE", f"loss {g4(value)}; outputs are {shape(ctx.outputs)}, not a floating tensor: only the loss value "
                      "was checked", ev)
    od = ctx.outputs.detach()
    ctx.notes["grad"] = _output_grad(ctx, od, ev)
    for check in (_empty_mask, _probabilities, _wrong_sign, _broadcast, _sum_reduction, _cross_entropy):
        result = check(ctx, od, value, ev)
        if result is not None:
            return result
    verdict = ev.pop("verdict", f"loss {g4(value)}: finite, scalar, supervised, mean-reduced")
    if ev.get("not_checked"):
        return warned("OBJECTIVE", f"{verdict}; {len(ev['not_checked'])} probe(s) of loss_fn could not run, first: {ev['not_checked'][0]}", ev)
    return passed("OBJECTIVE", verdict, ev)


def _call(ctx: Ctx, outputs: Any, targets: Any, ev: dict[str, Any], what: str) -> float | None:
    """``loss_fn(outputs, targets)`` as a float; None (and a note in ``ev``) when it raises or is not scalar."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the probes repeat the user's call: its warnings were shown once already
            out = ctx.loss_fn(outputs, targets)
    except Exception as exc:  # noqa: BLE001 - user code; a failure disables one check and is reported
        ev.setdefault("not_checked", []).append(f"{what}: loss_fn raised {err(exc)}")
        return None
    if loss_problem(out) is not None:
        ev.setdefault("not_checked", []).append(f"{what}: {loss_problem(out)}")
        return None
    return float(out)


def _output_grad(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any]) -> torch.Tensor | None:
    """d loss / d outputs at the observed outputs (None when the loss does not reach them or raises)."""
    o = od.clone().requires_grad_(True)
    try:
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = ctx.loss_fn(o, ctx.batch.targets)
            if not torch.is_tensor(out) or out.numel() != 1 or not out.requires_grad:
                ev["loss_depends_on_outputs"] = False
                return None
            (g,) = torch.autograd.grad(out.reshape(()), o, allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - user code
        ev.setdefault("not_checked", []).append(f"d loss/d outputs: {err(exc)}")
        return None
    ev["loss_depends_on_outputs"] = g is not None
    return g


def _empty_mask(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    mask = supervised(ctx)
    if mask is not None:
        ev.update(supervised_elements=int(mask.sum()), target_elements=int(mask.numel()))
        if mask.numel() and not bool(mask.any()):
            return _empty(f"all {mask.numel()} targets equal ignore_index {ctx.ignore_index}: nothing is supervised "
                          f"(loss {g4(value)})", ev, f"0 of {mask.numel()} target elements supervised")
    if not math.isfinite(value):
        finite_out = bool(torch.isfinite(od).all())
        ev["outputs_finite"] = finite_out
        t = ctx.batch.targets
        if math.isnan(value) and finite_out and not (torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()):
            return _empty(f"loss is NaN although all {od.numel()} outputs are finite: a mean over an empty mask (0/0)",
                          ev, "NaN loss from finite outputs")
        return failed("OBJECTIVE", "objective.nonfinite_loss", f"loss is {value}; {int((~torch.isfinite(od)).sum())} outputs non-finite",
                      ev, expected="a finite loss", observed=f"loss {value}",
                      hint="the first non-finite value appears before the loss: trace the forward pass (tensor_trace)")
    g = ctx.notes.get("grad")
    if g is not None and not bool(g.any()):
        delta = torch.linspace(-1.0, 1.0, od.numel(), device=od.device, dtype=od.dtype).reshape(od.shape)
        moved = _call(ctx, od + 0.5 * (1 + od.abs()) * delta, ctx.batch.targets, ev, "perturbed outputs")
        ev["loss_after_perturbing_outputs"] = moved
        if moved is not None and moved == value:
            return _empty(f"the loss ({g4(value)}) ignores every one of {od.numel()} outputs: d loss/d outputs is 0 and "
                          "perturbing all outputs leaves it unchanged (mask all zero?)", ev, "no output element supervised")
    return None


def _empty(message: str, ev: dict[str, Any], observed: str) -> Check:
    return failed("OBJECTIVE", "objective.empty_mask", message, ev, expected="at least one supervised element in the loss",
                  observed=observed,
                  hint="count supervised elements per batch (targets != ignore_index, mask.sum()) and build the mask "
                       "from the data, not a default of zeros / ignore_index")


def _probabilities(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    t = ctx.batch.targets
    if ctx.class_dim is None or not is_int(t) or (ctx.num_classes or 0) < 2:
        return None
    z = to_logits_2d(ctx, od.float())
    sums = z.sum(-1)
    is_prob = bool(z.min() >= 0) and float((sums - 1).abs().max()) <= 1e-3
    ev.update(outputs_min=float(z.min()), outputs_row_sum_max_dev=float((sums - 1).abs().max()),
              outputs_are_probabilities=is_prob)
    if not is_prob:
        return None
    as_logits = manual_ce(ctx, od, t)
    with torch.no_grad():
        as_probs = float(F.nll_loss(z.clamp_min(1e-12).log(), t.reshape(-1).long(), ignore_index=ctx.ignore_index))
    ev.update(ce_reading_outputs_as_logits=as_logits, nll_of_log_outputs=as_probs)
    if isclose(value, as_probs):
        ev["verdict"] = f"outputs are probabilities and the loss ({g4(value)}) is NLL of their log, as it should be"
        return None
    return failed("OBJECTIVE", "objective.probabilities_as_logits",
                  f"outputs are already probabilities (min {g4(z.min())}, rows sum to 1 within "
                  f"{float((sums - 1).abs().max()):.1e}) and the loss ({g4(value)}) reads them as logits "
                  f"(cross-entropy of them as logits {g4(as_logits)}, of them as probabilities {g4(as_probs)})", ev,
                  expected="raw logits (unnormalised scores) into a cross-entropy loss",
                  observed=f"probabilities: rows sum to 1, loss {g4(value)} ~ cross-entropy-as-logits {g4(as_logits)}",
                  hint="remove the softmax at the end of forward: cross_entropy applies log_softmax itself "
                       "(softmax twice squashes the gradients)")


def _directional(ctx: Ctx, od: torch.Tensor) -> float | None:
    """d loss along 'a better answer': the correct-class logits up (classification) or outputs toward targets."""
    g, t = ctx.notes.get("grad"), ctx.batch.targets
    if g is None or not torch.is_tensor(t):
        return None
    if ctx.class_dim is not None and is_int(t):
        gz = to_logits_2d(ctx, g)
        flat = t.reshape(-1)
        m = flat != ctx.ignore_index
        return float(gz[m].gather(1, flat[m].long().unsqueeze(1)).sum())
    if t.shape == od.shape and t.is_floating_point():
        return float((g * (t - od)).sum())
    return None


def _wrong_sign(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    slope = _directional(ctx, od)
    ev["d_loss_toward_correct"] = slope
    ce = manual_ce(ctx, od, ctx.batch.targets) if ctx.class_dim is not None and is_int(ctx.batch.targets) else None
    negated = ce is not None and isclose(value, -ce)
    if value < 0 and (negated or (slope is not None and slope > 0)):
        why = f"loss = -cross-entropy ({g4(-ce)})" if negated else f"loss rises ({g4(slope)}) as the answer improves"
        return failed("OBJECTIVE", "objective.wrong_sign", f"loss is {g4(value)} and {why}: minimising it makes the answers worse", ev,
                      expected="a loss >= 0 that falls as the correct answer becomes more likely",
                      observed=f"loss {g4(value)}, d loss toward correct answer {g4(slope) if slope is not None else 'n/a'}",
                      hint="remove the minus sign on the loss (or maximize=True on the optimizer, not both)")
    return None


def _broadcast(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    t = ctx.batch.targets
    if ctx.task != "regression" or not torch.is_tensor(t) or t.shape == od.shape or t.numel() != od.numel():
        return None
    at_target = _call(ctx, t.reshape(od.shape).to(od.dtype), t, ev, "outputs equal to targets")
    ev["loss_when_outputs_equal_targets"] = at_target
    if at_target is None or at_target <= 1e-6 * max(abs(value), 1e-12) or at_target <= 1e-12:
        return None
    try:
        wide = list(torch.broadcast_shapes(od.shape, t.shape))
    except RuntimeError:
        wide = None
    return failed("OBJECTIVE", "objective.shape_broadcast",
                  f"outputs {shape(od)} and targets {shape(t)} differ in shape, and the loss is {g4(at_target)} (not 0) "
                  f"even when the outputs equal the targets: every output is compared with every target", ev,
                  expected="outputs and targets of the same shape (loss 0 at a perfect prediction)",
                  observed=f"outputs {shape(od)}, targets {shape(t)}, broadcast to {wide}",
                  hint="squeeze the outputs (outputs.squeeze(-1)) or unsqueeze the targets so the shapes match")


def _per_example(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any]) -> tuple[float | None, list[float | None]]:
    """``loss_fn`` on the first m <= PER_EXAMPLE examples together, and on each alone (cached)."""
    if "per_example" not in ctx.notes:
        m = min(od.shape[0] if od.dim() else 0, PER_EXAMPLE)
        t = ctx.batch.targets
        cut = (lambda i, j: t[i:j]) if torch.is_tensor(t) else (lambda i, j: t)
        sub = _call(ctx, od[:m], cut(0, m), ev, f"loss on the first {m} examples") if m >= 2 else None
        each = [_call(ctx, od[i:i + 1], cut(i, i + 1), ev, f"loss on example {i}") for i in range(m)]
        ctx.notes["per_example"] = (sub, each)
    return ctx.notes["per_example"]


def _plain_mean(ctx: Ctx, od: torch.Tensor, value: float) -> str | None:
    """Which standard mean-reduced loss ``value`` is, if any (then its reduction is the mean by construction)."""
    t = ctx.batch.targets
    if ctx.class_dim is not None and is_int(t) and isclose(value, manual_ce(ctx, od, t)):
        return "mean cross-entropy"
    if ctx.task == "regression" and torch.is_tensor(t) and t.shape == od.shape:
        with torch.no_grad():
            diff = (od.double() - t.double())
            for name, v in (("mean squared error", diff.pow(2).mean()), ("mean absolute error", diff.abs().mean())):
                if isclose(value, float(v)):
                    return name
    return None


def _sum_reduction(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    plain = _plain_mean(ctx, od, value)
    if plain is not None:  # sum / constant == mean at this batch size is not a sum reduction
        ev["reduction"] = plain
        return None
    sub, each = _per_example(ctx, od, ev)
    m = len(each)
    good = [v for v in each if v is not None and math.isfinite(v)]
    if sub is None or m < 2 or len(good) != m:
        return None
    mean = sum(good) / m
    if abs(mean) < 1e-12:
        return None
    ratio = sub / mean
    ev.update(loss_first_m=sub, per_example_mean=mean, ratio_to_per_example_mean=ratio, m=m)
    if abs(ratio - m) <= 0.05 * m and abs(ratio - 1) > 0.5:
        return failed("OBJECTIVE", "objective.sum_reduction",
                      f"the loss on {m} examples ({g4(sub)}) is {g4(ratio)} x their mean per-example loss ({g4(mean)}): "
                      f"it is summed, so its scale (and the step size) grows with the batch", ev,
                      expected=f"loss on {m} examples ~ mean of their per-example losses (ratio 1)",
                      observed=f"ratio {g4(ratio)} ~ {m} (sum reduction)",
                      hint="use reduction='mean' (or divide by the number of supervised elements)")
    return None


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
        each = [(_call(ctx, od[i:i + 1], t[i:i + 1], ev, f"example {i}"), float(ctx.reference_loss(od[i:i + 1], t[i:i + 1])))
                for i in range(min(PER_EXAMPLE, od.shape[0]))]
    except Exception as exc:  # noqa: BLE001 - user code
        return warned("OBJECTIVE", f"loss {g4(value)}; reference_loss raised {err(exc)}: the objective was not compared", ev)
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


def _cross_entropy(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    if ctx.reference_loss is not None:
        return _reference(ctx, od, value, ev)
    t = ctx.batch.targets
    if ctx.class_dim is None or not is_int(t) or ev.get("outputs_are_probabilities"):
        return None  # probabilities were already matched against NLL of their log
    k = ctx.num_classes or 0
    ce = manual_ce(ctx, od, t)
    each = _per_example(ctx, od, ev)[1]
    manual_each = [manual_ce(ctx, od[i:i + 1], t[i:i + 1]) for i in range(len(each))]
    pairs = [(a, b) for a, b in zip(each, manual_each) if a is not None and math.isfinite(b)]
    ev.update(cross_entropy_manual=ce, ln_k=math.log(k) if k else None)
    if pairs:
        ev.update(example_library_loss=pairs[0][0], example_manual_ce=pairs[0][1])
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
    far = abs(value - ce) > FAR * max(abs(ce), 1e-12)
    example = (f"example 0: library {g4(pairs[0][0])} vs manual cross-entropy {g4(pairs[0][1])}" if pairs
               else "single examples could not be evaluated")
    if far:
        return failed("OBJECTIVE", "objective.initial_loss",
                      f"loss {g4(value)} is not the cross-entropy of these outputs ({g4(ce)}; ln K = {g4(math.log(k))} for "
                      f"an untrained {k}-class model); {example}", ev,
                      expected=f"~ ln K = {g4(math.log(k))} at initialisation (cross-entropy of these outputs {g4(ce)})",
                      observed=f"loss {g4(value)}",
                      hint="the loss is a different objective from cross-entropy over the class logits (e.g. MSE on one "
                           "column): use F.cross_entropy(logits, class_ids); if this objective is intended, pass it written by hand "
                           "as reference_loss= to check it instead")
    return failed("OBJECTIVE", "objective.manual_mismatch",
                  f"loss {g4(value)} is within {FAR:.0%} of cross-entropy ({g4(ce)}) but not equal, and single examples do "
                  f"not reproduce it: {example}", ev,
                  expected="loss_fn on one example == F.cross_entropy(logits, target) on that example",
                  observed=example,
                  hint="write the loss for one example by hand and compare: a wrong class axis, a misaligned target "
                       "or an extra term")
