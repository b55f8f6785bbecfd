"""OBJECTIVE: are the outputs in the representation the loss expects, and can one example reproduce
the loss by hand?

The checks run on the outputs of one forward pass, detached, so every probe of the loss is a call of
``loss_fn`` on those same numbers (dropout or batch statistics cannot make two calls disagree):

1. the loss is a scalar floating tensor (else the ledger is SKIPPED: the evidence's ``loss_fn`` breaks its contract);
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
   A masked loss (``cross_entropy(o[mask], t[mask])``) is cross-entropy over the elements the loss reads
   (those with a non-zero d loss / d logits); a model that shifts its own labels (Hugging Face causal LM)
   is next-token cross-entropy on shifted logits. Binary / multilabel 0/1 targets: binary cross-entropy
   (with logits, or of probabilities). With ``reference_loss`` (the intended objective written by hand,
   e.g. a focal loss), the loss is compared with it instead, on the batch and on single examples
   (``objective.manual_mismatch``).

Before these, the output layer itself (``_forms``): constant outputs, outputs normalised over
the examples, targets the output layer cannot produce. An objective the ledger cannot identify (a VAE's
ELBO, an RL loss, a loss without targets) and a probe that could not run are notes on a PASS, never a
verdict: they say what was checked.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ....report import Status
from ..._core.batch import LOSS_CONTRACT, loss_problem
from ..._core.checks import Check, check
from ..._core.examples import logits_of, num_examples
from ..._core.loss_graph import head_inside_loss, misfed
from ..._core.task import Ctx, is_int, shape
from .._adversarial import adversarial_direction
from .._common import failed, g4, isclose, manual_ce, passed, skipped_link, supervised, to_logits_2d
from .._flow_logdet import log_det_mismatch
from .._padding import padding_in_loss, padding_pulled
from .._penalty import loss_terms
from .._step_loss import step_misfed
from ._calls import call, example_axis, output_grad, packer, per_example
from ._forms import constant_outputs, labels_compete, normalized_over_examples, output_op, unbounded, unreachable
from ._ids import identify, row_weights, standard
from ._loss_nodes import bce_outside, broadcast_in_step, broadcast_inside

PER_EXAMPLE = 8  # examples sliced out for the per-example checks
FAR = 0.10  # relative distance from cross-entropy beyond which the loss is "another objective"


def check_objective(ctx: Ctx) -> Check:
    loss = ctx.loss
    problem = loss_problem(loss)
    if problem is not None and loss is None:  # it computes nothing from what it is handed (a loss stored elsewhere)
        return skipped_link("OBJECTIVE", f"not checked: {problem} on the ledger's copy of the model (a loss_fn that reads "
                            "a loss stored on your model gives nothing on a copy): make loss_fn compute the loss from "
                            "(outputs, targets)", {"loss": None})
    if problem is not None:  # the evidence's loss_fn, not the program (the ledger reports it before this link)
        return skipped_link("OBJECTIVE", f"not checked: {problem}; {LOSS_CONTRACT}", {"loss": shape(loss)})
    value, ev = float(loss.detach()), {"loss": float(loss.detach()), "task": ctx.task}
    padded = padding_pulled(ctx, ev)
    if padded is not None:
        return padded
    logits = logits_of(ctx.outputs)
    if (logits is None or not logits.is_floating_point()) and not math.isfinite(value):
        return failed("OBJECTIVE", "objective.nonfinite_loss", f"loss is {value}", ev, expected="a finite loss",
                      observed=f"loss {value}", hint="trace the forward pass to the first non-finite value (tensor_trace)")
    if logits is None or not logits.is_floating_point():
        misfed_loss = _misfed(ctx, None, value, ev)  # the loss's graph needs no prediction tensor
        if misfed_loss is not None:
            return misfed_loss
        return note(ctx, f"objective not identified: outputs are {shape(ctx.outputs)}, with no floating prediction tensor; "
                         f"checked: the loss {g4(value)} is a scalar", ev)
    od = logits.detach()
    ctx.notes.update(pack=packer(ctx), output_op=output_op(logits),
                     example_axis=example_axis(od, num_examples(ctx.batch, ctx.batch_axis), ctx.batch_axis) or 0)
    ctx.notes["grad"] = output_grad(ctx, od, ev)
    # _misfed reads the loss's own graph (a with-logits loss fed by a sigmoid wherever it sits: in the model, in
    # loss_fn, in a discriminator loss_fn applies), so it runs before _blind sets the output-reading checks aside
    for probe in (constant_outputs, loss_terms, _empty_mask, _misfed, adversarial_direction, log_det_mismatch, _blind, normalized_over_examples,
                  _probabilities, padding_in_loss, _wrong_sign, unbounded, _broadcast, unreachable, labels_compete,
                  _sum_reduction, identify):
        result = probe(ctx, od, value, ev)
        if result is not None:
            return result
    return _verdict(ctx, od, value, ev)


_MISFED = {
    "binary_cross_entropy_with_logits": (
        ("a {loss} whose input comes straight out of a {fed} (values in [{input_min:.3g}, {input_max:.3g}]): the loss "
        "applies its own sigmoid to probabilities, so it cannot approach its floor"),
        "raw logits into the with-logits loss", ("drop the {fed} before the loss (BCEWithLogitsLoss applies it), or use "
        "BCELoss on the probabilities")),
    "cross_entropy": (
        ("a {loss} whose logits come straight out of a {fed}: probabilities read as logits, so the loss cannot approach "
        "its floor"), "raw logits into cross_entropy", ("drop the {fed} before the loss (cross_entropy applies "
        "log_softmax), or use nll_loss on log-probabilities")),
    "nll_loss": (
        ("an {loss} fed scores with no log-normalization behind them (made by {fed}; logsumexp over the classes is "
        "{logsumexp_over_classes_max_abs:.3g} away from 0): NLL of raw scores is unbounded below"),
        "log-probabilities into nll_loss", ("apply log_softmax over the classes before nll_loss, or use cross_entropy "
        "on the raw scores")),
    "nll_loss_axis": (
        ("an nll_loss fed a log_softmax taken over another axis than the classes (its dim {log_softmax_dim}; logsumexp "
         "over the classes is {logsumexp_over_classes_max_abs:.3g} away from 0): the classes do not compete, each "
         "position's scores are normalized against the other positions"),
        "log-probabilities over the classes into nll_loss", ("take log_softmax over the class axis (the vocabulary, "
        "usually the last) before moving it to dim 1 for nll_loss")),
    "log_probs_axis": (
        ("log-probabilities taken along dims {consumed_dims} of a {consumed_shape} tensor (a weighted sum or a gather: a "
         "cross-entropy written out), but the log_softmax behind them normalized over its dim {log_softmax_dim} of "
         "{log_softmax_shape}; along the axes the loss takes them, logsumexp is {logsumexp_over_consumed_max_abs:.3g} "
         "away from 0: the classes there do not compete, each is normalized against the other rows"),
        "log-probabilities normalized over the axis the loss takes them along", ("take log_softmax over the axis the "
        "targets weight or index (dims {consumed_dims} of the weighted tensor), not dim {log_softmax_dim}")),
    "ctc_loss": (
        ("a {loss} fed scores with no log-normalization behind them (made by {fed}; logsumexp over the classes is "
        "{logsumexp_over_classes_max_abs:.3g} away from 0): CTC of raw scores is unbounded below"),
        "log-probabilities into ctc_loss", "apply log_softmax over the classes (the last axis) before ctc_loss"),
    "ctc_loss_axis": (
        ("a ctc_loss fed a log_softmax taken over another axis than the classes (its dim {log_softmax_dim}; logsumexp over "
         "the classes is {logsumexp_over_classes_max_abs:.3g} away from 0): the classes do not compete at each frame"),
        "log-probabilities over the classes into ctc_loss", "take log_softmax over the classes (the last axis of [T, N, C])"),
}


def _misfed(ctx: Ctx, od: torch.Tensor | None, value: float, ev: dict[str, Any]) -> Check | None:
    """A loss node of the user's own graph fed what it cannot use (``_core.loss_graph``): graph and values agree."""
    wrong, in_step = misfed(ctx.loss), False
    if wrong is None:
        wrong, in_step = step_misfed(ctx), True  # the loss train_step computes itself, where loss_fn's is sound
    if wrong is None:
        return broadcast_in_step(ctx, value, ev) or bce_outside(ctx, value, ev)
    if wrong.loss == "nll_loss_axis" and od is not None:  # over the examples: the more specific finding names the axis
        over = normalized_over_examples(ctx, od, value, ev)
        if over is not None:
            return over
    text, expected, hint = _MISFED[wrong.loss]
    fields = {"loss": wrong.loss, **wrong.evidence, "fed": wrong.fed}
    ev.update({**wrong.evidence, "loss_node": wrong.loss, "fed": wrong.fed})
    ev["in_train_step"] = in_step
    where = "in the loss train_step backpropagates (loss_fn's is sound), " if in_step else ""
    return failed("OBJECTIVE", wrong.kind, f"loss {g4(value)}: {where}" + text.format(**fields), ev, expected=expected,
                  observed=f"{wrong.loss} <- {wrong.fed}", hint=hint.format(**fields))


def _blind(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """A note instead of any output-reading check when loss_fn ignores the outputs it is handed, or applies a head
    of its own to them (the outputs are then not the scores it compares with the targets)."""
    if not _ignores_outputs(ctx, od, value, ev):
        head = head_inside_loss(ctx.loss, ctx.outputs, ctx.work)
        if head:
            ev["head_inside_loss"] = head[:8]
            return note(ctx, f"objective not identified: loss_fn applies {len(head)} trainable parameters of its own to the "
                             f"outputs (first: {head[0]}; a generator or decoder inside the loss), so the outputs are not "
                             "the scores it compares with the targets; checked: the loss is a scalar", ev)
        return None
    return note(ctx, f"objective not identified: loss_fn gives the same loss {g4(value)} for other outputs (it reads the "
                     "loss from elsewhere, e.g. one the model stored), so no check reads the outputs; checked: the loss "
                     "is a scalar", ev)


def _ignores_outputs(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> bool:
    """The premise of every output-reading check: the loss is a function of the outputs it is handed. Confirmed by
    handing loss_fn other outputs (a seeded perturbation of a unit or more): a loss that does not move ignores them."""
    g = torch.Generator().manual_seed(0)
    spread = float(od.float().std()) if od.numel() > 1 else 0.0
    other = od + torch.randn(od.shape, generator=g, dtype=torch.float32).to(od.dtype) * max(spread, 1.0)
    moved = call(ctx, other, ctx.batch.targets, ev, "loss_fn reads the outputs")
    ev["loss_reads_outputs"] = None if moved is None else moved != value
    return moved is not None and moved == value


def note(ctx: Ctx, text: str, ev: dict[str, Any]) -> Check:
    """A PASS whose message is a note (something not verified), the line also kept for ``details['notes']``."""
    line = text if text.startswith("note: ") else f"note: {text}"
    ctx.report_notes.append(line)
    return passed("OBJECTIVE", line, ev)


def _verdict(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check:
    """The identified objective, or a note saying what was checked when none was identified."""
    verdict, extra = ev.pop("verdict", None), ev.get("objective_notes", [])
    ctx.notes["objective_identified"] = verdict is not None  # CAPABILITY: an unidentified loss has no known floor
    if verdict is not None:
        return note(ctx, f"{verdict}; {'; '.join(extra)}", ev) if extra else passed("OBJECTIVE", verdict, ev)
    g = ctx.notes.get("grad")
    checked = ["finite", "scalar"]
    if g is not None:
        checked += ["differentiable in the outputs"] + (["depends on the outputs"] if bool(g.any()) else [])
    why = f"; {ev['not_checked'][0]}" if ev.get("not_checked") else ""
    return note(ctx, f"objective not identified (loss {g4(value)}); checked: {', '.join(checked)}{why}"
                     + (f"; {'; '.join(extra)}" if extra else ""), ev)


def _call(ctx: Ctx, outputs: Any, targets: Any, ev: dict[str, Any], what: str) -> float | None:
    return call(ctx, outputs, targets, ev, what)


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
    if isclose(value, as_probs) or not isclose(value, as_logits):  # NLL of their log, or a form of its own (masked)
        ev["verdict"] = f"outputs are probabilities and the loss ({g4(value)}) does not read them as logits"
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
    w = row_weights(ctx, od) if value < 0 and not negated else None
    if w is not None and bool((w < 0).any()) and bool((w > 0).any()):
        return None  # signed per-example weights (advantages): a negative loss is no sign of a flipped objective
    if value < 0 and (negated or (slope is not None and slope > 0)):
        why = f"loss = -cross-entropy ({g4(-ce)})" if negated else f"loss rises ({g4(slope)}) as the answer improves"
        return failed("OBJECTIVE", "objective.wrong_sign", f"loss is {g4(value)} and {why}: minimising it makes the answers worse", ev,
                      expected="a loss >= 0 that falls as the correct answer becomes more likely",
                      observed=f"loss {g4(value)}, d loss toward correct answer {g4(slope) if slope is not None else 'n/a'}",
                      hint="remove the minus sign on the loss (or maximize=True on the optimizer, not both)")
    return None


def _broadcast(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    inside = broadcast_inside(ctx, od, ev)
    if inside is not None:
        return inside
    t = ctx.batch.targets
    if ctx.task != "regression" or not torch.is_tensor(t) or t.shape == od.shape or t.numel() != od.numel():
        return None
    try:
        wide = list(torch.broadcast_shapes(od.shape, t.shape))
    except RuntimeError:
        return None  # the shapes cannot broadcast: loss_fn reshapes one of them itself ([B, 256] vs [B, 1, 16, 16])
    if math.prod(wide) <= od.numel():
        return None
    at_target = _call(ctx, t.reshape(od.shape).to(od.dtype), t, ev, "outputs equal to targets")
    ev["loss_when_outputs_equal_targets"] = at_target
    if at_target is None or at_target <= 1e-6 * max(abs(value), 1e-12) or at_target <= 1e-12:
        return None
    lined_up = _call(ctx, t.reshape(od.shape).to(od.dtype), t.reshape(od.shape), ev, "outputs equal to targets of their shape")
    ev["loss_when_outputs_equal_targets_of_their_shape"] = lined_up
    if lined_up is None or at_target - lined_up <= 1e-3 * at_target:
        return None  # lining the shapes up leaves the loss at a perfect prediction where it was: not the broadcast
    if not _crosstalk(ctx, od, t, ev):
        return None  # loss_fn lines the shapes up itself: each output meets only its own target
    if _crosstalk(ctx, od, t.reshape(od.shape), {}, given=True):
        ev["pairwise_with_matching_shapes"] = True  # a pairwise loss (RankNet): every example meets every other anyway
        return None
    return failed("OBJECTIVE", "objective.shape_broadcast",
                  f"outputs {shape(od)} and targets {shape(t)} differ in shape, and the loss is {g4(at_target)} (not 0) "
                  f"even when the outputs equal the targets: every output is compared with every target", ev,
                  expected="outputs and targets of the same shape (loss 0 at a perfect prediction)",
                  observed=f"outputs {shape(od)}, targets {shape(t)}, broadcast to {wide}",
                  hint="squeeze the outputs (outputs.squeeze(-1)) or unsqueeze the targets so the shapes match")


def _crosstalk(ctx: Ctx, od: torch.Tensor, t: torch.Tensor, ev: dict[str, Any], given: bool = False) -> bool:
    """The counterfactual: the gradient of the loss at the first example's outputs moves when only the other examples'
    targets change (each output compared with every target); False when it stays put or cannot be read. ``given``:
    against ``t`` (the targets reshaped to the outputs' shape: does the cross-talk outlive the broadcast?)."""
    n = t.shape[0]
    oax = example_axis(od, n, ctx.batch_axis)
    if oax is None or n < 2:
        return False
    other = t.clone()
    other[1:] = ~t[1:] if t.dtype == torch.bool else t[1:].flip(0) + 1
    g, h = output_grad(ctx, od, ev, t if given else None), output_grad(ctx, od, ev, other)
    if g is None or h is None:
        return False
    mine, theirs = g.narrow(oax, 0, 1), h.narrow(oax, 0, 1)
    moved = float((mine - theirs).abs().max())
    ev["first_example_gradient_change_when_other_targets_change"] = moved
    return moved > 1e-6 * max(float(mine.abs().max()), 1e-12)


def _per_example(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any]) -> tuple[float | None, list[float | None]]:
    return per_example(ctx, od, ev, PER_EXAMPLE)


def _sum_reduction(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    if not torch.is_tensor(ctx.batch.targets) or ctx.task == "unknown":
        return None  # no targets (a toy energy), no task: nothing says what one example's loss should be
    known = standard(ctx, od)
    plain = next((name for name, mean, _ in known if isclose(value, mean)), None)
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
    if not (abs(ratio - m) <= 0.05 * m and abs(ratio - 1) > 0.5):
        return None
    summed = next((name for name, mean_, counts in known for c in counts if isclose(value, mean_ * c)), None)
    if summed is None:
        ev.setdefault("objective_notes", []).append(
            f"the loss on {m} examples is {g4(ratio)} x their mean (summed over examples: its scale sets the step size)")
        return None
    ev["reduction"] = f"sum of {summed}"
    # the sum is shown; that a sum is wrong is not the program's to confirm (many programs sum on purpose): named
    return check("OBJECTIVE", "objective.sum_reduction", Status.WARN,
                 f"the loss on {m} examples ({g4(sub)}) is {g4(ratio)} x their mean per-example loss ({g4(mean)}): it is "
                 f"summed ({summed}), so its scale (and the step size) grows with the batch; if a mean is meant, use "
                 "reduction='mean'", ev)
