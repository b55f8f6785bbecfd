"""TASK: does the target still describe the input?

Checks, in order: float targets are finite (``task.nonfinite_targets``); class ids inside ``[0, K)`` (``ignore_index`` allowed); for a language model, that
targets are the inputs shifted by one (not by zero, not by two); and, when a ``task_probe`` is given,
that the probe's ground-truth labels agree with the batch's targets. Without a probe the link is a
PASS with a note ("note: ... not verified"): the structural checks passed but nobody told the ledger what
the labels mean. A model that shifts its labels itself (a Hugging Face causal LM computing its own loss:
``labels == input_ids``) is read as such: its labels are aligned at shift 0, and labels shifted by hand on
top of that are a double shift.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

from ...report import Status
from .._core.checks import Check
from .._core.examples import logits_of
from .._core.task import Ctx, input_ids, is_int, shape
from ._alignment import realigned_probe, target_misaligned
from ._common import failed, g4, isclose, passed, supervised, warned
from ._known import expected_from_probe
from ._leak import target_in_input
from ._masks import mask_unread
from ._padding import pulls_next
from ._sequence import copies_own_token, future_or_copy
from ._supervision import target_copy

AGREEMENT = 0.9  # below this fraction of matching labels the task is contradicted (see _probe)
SHIFT_MATCH = 0.9  # fraction of positions where targets equal the inputs at a given shift


def check_task(ctx: Ctx) -> Check:
    t = ctx.batch.targets
    ev: dict[str, Any] = {"task": ctx.task, "inferred": ctx.task_note, "targets_shape": shape(t),
                          "targets_dtype": str(getattr(t, "dtype", type(t).__name__)).replace("torch.", ""),
                          "outputs_shape": shape(ctx.outputs), "model_mode": "train" if ctx.model.training else "eval"}
    held = None  # a WARN (a named, unconfirmed premise) never hides what task_probe confirms
    for check in (_finite_targets, _label_range, _lm_shift, _copies_own_token, target_copy, mask_unread,
                  target_misaligned, target_in_input):
        result = check(ctx, ev)
        if result is not None and result.finding.status is Status.FAIL:
            return result
        held = held or result
    if held is not None:
        probed = _probe(ctx, ev) if ctx.task_probe is not None else None
        return probed if probed is not None and probed.finding.status is Status.FAIL else held
    if ctx.task_probe is None:
        note = ("note: targets are structurally valid; what they mean was not verified (no task_probe: pass "
                "task_probe=callable(inputs) -> expected targets, or task_probe=(known_inputs, known_targets))")
        ctx.report_notes.append(note)
        return passed("TASK", note, ev)
    return _probe(ctx, ev)


def _copies_own_token(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    return future_or_copy(ctx, ev, "same")


def _finite_targets(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    t = ctx.batch.targets
    if not torch.is_tensor(t) or not t.is_floating_point():
        return None
    bad = int((~torch.isfinite(t)).sum())
    ev["nonfinite_targets"] = bad
    if not bad:
        return None
    return failed("TASK", "task.nonfinite_targets", f"{bad} of {t.numel()} targets are NaN or infinite", ev,
                  expected="finite targets", observed=f"{bad} non-finite targets",
                  hint="the labels were corrupted before the batch (missing values, a division by zero in "
                       "preprocessing): trace one sample through the stages (stage_trace)")


def _loss_refuses(ctx: Ctx) -> bool:
    """Whether the user's loss_fn raises on these outputs and targets (the confirmation of an out-of-range label)."""
    try:
        with torch.no_grad():
            ctx.loss_fn(ctx.outputs, ctx.batch.targets)
    except Exception:  # noqa: BLE001 - the user's loss refusing the ids is the evidence
        return True
    return False


def _label_range(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    t, k = ctx.batch.targets, ctx.num_classes
    mask = supervised(ctx)
    if k is None or mask is None:
        return None
    labels = t[mask]
    bad = (labels < 0) | (labels >= k)
    ev.update(num_classes=k, supervised_elements=int(mask.sum()), target_elements=int(t.numel()),
              label_min=int(labels.min()) if labels.numel() else None, label_max=int(labels.max()) if labels.numel() else None,
              ignore_index=ctx.ignore_index)
    if not bool(bad.any()):
        return None
    n_bad = int(bad.sum())
    ev.update(out_of_range=n_bad, out_of_range_values=sorted({int(v) for v in labels[bad].unique()[:10]}))
    if _loss_refuses(ctx):
        return failed("TASK", "task.label_out_of_range",
                      f"{n_bad} of {labels.numel()} supervised targets are outside [0, {k}) for a model with {k} outputs "
                      f"(min {ev['label_min']}, max {ev['label_max']}), and loss_fn raises on them", ev,
                      expected=f"class ids in [0, {k}) or ignore_index {ctx.ignore_index}",
                      observed=f"{n_bad} ids outside, e.g. {ev['out_of_range_values'][:3]}",
                      hint="the label ids and the output dimension disagree: check the class mapping, or size the head "
                           "to the number of classes")
    # the premise (the loss indexes these outputs by these ids) is refuted by the loss itself: an index loss on ids
    # outside its classes raises, and this one ran, so it reads the targets another way (a sampled or adaptive
    # softmax, a decoder inside the loss, its own ignore value): named, not failed, and no later link reads the
    # outputs as class scores over these targets
    ctx.class_dim, ctx.num_classes = None, None
    other = _fitting_output(ctx, labels)
    if other is not None:  # (features, logits): the ids fit another output the model returns, which the loss reads
        ev["labels_fit_output"] = other
        return passed("TASK", f"note: the targets (max {ev['label_max']}) fit outputs[{other[0]}] (size {other[1]}), not "
                      f"the first floating output (size {k}); loss_fn ran on them, so it indexes that output; the label "
                      "range holds for it", ev)
    return warned("TASK", f"{n_bad} of {labels.numel()} supervised targets are outside [0, {k}) for outputs of size "
                  f"{k} (min {ev['label_min']}, max {ev['label_max']}, e.g. {ev['out_of_range_values'][:3]}), and "
                  "loss_fn ran on them, so it does not index these outputs by the targets (a head inside the loss, a "
                  "sampled softmax, its own ignore value); the label range was not checked: declare task= if the "
                  "outputs are not class scores", ev)


def _fitting_output(ctx: Ctx, labels: torch.Tensor) -> tuple[int, int] | None:
    """(position, size) of another floating tensor in a tuple or list of outputs, with the targets' leading size, whose
    last axis holds every supervised id (a model returning (features, logits)); None when there is none."""
    outs, t = ctx.outputs, ctx.batch.targets
    if not isinstance(outs, (tuple, list)) or not labels.numel():
        return None
    for i, o in enumerate(outs):
        if torch.is_tensor(o) and o.is_floating_point() and o.dim() >= 2 and o.shape[0] == t.shape[0] and \
                int(labels.min()) >= 0 and int(labels.max()) < o.shape[-1]:
            return i, int(o.shape[-1])
    return None


def _agreement(ids: torch.Tensor, t: torch.Tensor, shift: int, ignore: int) -> float | None:
    """Fraction of supervised positions p with ``t[:, p] == ids[:, p + shift]``."""
    length = t.shape[1]
    if length <= shift:
        return None
    tt, ii = t[:, : length - shift], ids[:, shift:]
    m = tt != ignore
    n = int(m.sum())
    return None if n == 0 else float(((tt == ii) & m).sum()) / n


def _ce(logits: torch.Tensor, labels: torch.Tensor, ignore: int) -> float:
    with torch.no_grad():
        return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).long(), ignore_index=ignore))


_SELF_SHIFTING = ("ForCausalLM", "LMHeadModel")  # transformers' causal LM heads: loss(labels=input_ids)


def _shifts_inside(ctx: Ctx, t: torch.Tensor) -> bool:
    """Whether the loss shifts the labels itself: it equals next-token cross-entropy of ``logits[:, :-1]`` against
    ``labels[:, 1:]`` and not the unshifted one (a Hugging Face causal LM given ``labels=input_ids``)."""
    logits = logits_of(ctx.outputs, t)
    if logits is None or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(t.shape) or t.shape[1] < 2:
        return False
    if int(t.max()) >= logits.shape[-1]:  # no tensor of the outputs scores these labels: nothing to compare
        return False
    loss = ctx.outputs.get("loss") if isinstance(ctx.outputs, dict) else None
    if not torch.is_tensor(loss):
        try:
            with torch.no_grad():
                loss = ctx.loss_fn(ctx.outputs, t)
        except Exception:  # noqa: BLE001 - user code; OBJECTIVE reports a loss_fn that raises
            return False
    if not torch.is_tensor(loss) or loss.numel() != 1:
        return False
    value, ignore = float(loss.detach()), ctx.ignore_index
    shifted, plain = _ce(logits[:, :-1], t[:, 1:], ignore), _ce(logits, t, ignore)
    if isclose(value, shifted) and isclose(shifted, plain):
        # near-uniform logits (a fresh model) make the two values indistinguishable: a Hugging Face causal LM's own
        # loss shifts the labels by its documented contract; any other loss shows it in its gradient
        return type(ctx.model).__name__.endswith(_SELF_SHIFTING) or pulls_next(ctx, t, SHIFT_MATCH)
    if isclose(value, shifted) and not isclose(value, plain):
        return True
    return pulls_next(ctx, t, SHIFT_MATCH)


def _lm_shift(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    ids, t = input_ids(ctx.batch), ctx.batch.targets
    if ctx.task != "language_model" or ids is None or not is_int(t) or tuple(ids.shape) != tuple(t.shape) or t.dim() != 2:
        return None
    a0, a1, a2 = (_agreement(ids, t, s, ctx.ignore_index) for s in (0, 1, 2))
    inside = _shifts_inside(ctx, t)
    ev.update(match_shift0=a0, match_shift1=a1, match_shift2=a2, loss_shifts_labels=inside)
    if a0 is None or a1 is None:
        return None
    expected = "targets[:, t] == inputs[:, t + 1] (the next token)"
    if inside:
        ctx.notes["shifted_inside"] = True
        if a1 >= SHIFT_MATCH and a1 > a0:
            return failed("TASK", "task.target_shifted_twice",
                          f"the labels are already the next token (labels[:, t] == input_ids[:, t + 1] at {a1:.0%} of "
                          f"supervised positions) and the loss shifts them again: each position is trained on the token two "
                          f"ahead", ev, expected="labels == input_ids (the model shifts them inside its loss)",
                          observed=f"labels[:, t] == input_ids[:, t + 1] at {a1:.0%}; the loss compares logits[:, :-1] "
                                   f"with labels[:, 1:]",
                          hint="pass labels=input_ids (padding set to -100): the model shifts them itself; shift exactly once")
        return None
    mlm = _mlm_copies(ctx, ids, t, ev)
    if mlm is not None:
        return mlm
    if a0 >= SHIFT_MATCH and a0 > a1:
        causal = copies_own_token(ctx, ids, a0, ev)
        if causal is None:
            return warned("TASK", f"targets equal the inputs at {a0:.0%} of supervised positions (next token at "
                          f"{a1:.0%}): each position is asked for the token it reads, but whether the model reads later "
                          "tokens (an autoencoder) could not be shown on the copy", ev)
        if not causal:  # the positions read later tokens too: reconstructing the input (an autoencoder) or a copy
            return warned("TASK", f"targets equal the inputs at {a0:.0%} of supervised positions (next token at {a1:.0%}) "
                          "and the model reads the whole sequence: it is trained to reproduce its input, which an "
                          "autoencoder means and a language model or a translation does not; if this is not an "
                          "autoencoder, the targets come from the wrong column or are not shifted", ev)
        return failed("TASK", "task.target_not_shifted",
                      f"targets equal the inputs at {a0:.0%} of supervised positions (next token at {a1:.0%}) and the "
                      f"model is causal (changing a token moves its own position's output and none before it): the model "
                      "is asked to copy its current token", ev,
                      expected=expected, observed=f"targets[:, t] == inputs[:, t] at {a0:.0%} of positions",
                      hint="shift the targets by one: inputs = tokens[:, :-1], targets = tokens[:, 1:]")
    if a2 is not None and a2 >= SHIFT_MATCH and a2 > a1:
        return warned("TASK", f"targets equal the inputs two positions ahead at {a2:.0%} of supervised positions (next "
                      f"token at {a1:.0%}): shifted twice (once in the data, once in the loss?), unless the program "
                      "predicts two tokens ahead on purpose", ev, kind="task.target_shifted_twice")
    return None


def _mlm_copies(ctx: Ctx, ids: torch.Tensor, t: torch.Tensor, ev: dict[str, Any]) -> Check | None:
    """A masked LM (one input id, the mask token, stands at most supervised positions whose target differs from the
    input, and is never a target) that also supervises positions where the input is visible: the BERT recipe keeps
    10% of the masked positions unchanged, so more than half of the supervised positions being copies of a visible
    token means the unmasked positions were not set to ignore_index."""
    sup = t != ctx.ignore_index
    differ = sup & (t != ids)
    if int(differ.sum()) < 4:
        return None
    values, counts = ids[differ].unique(return_counts=True)
    mask_id = int(values[counts.argmax()])
    share = float(counts.max()) / int(differ.sum())
    if share < 0.5 or bool((t[sup] == mask_id).any()):
        return None
    copies = sup & (t == ids) & (ids != mask_id)
    frac = int(copies.sum()) / int(sup.sum())
    ev.update(mask_token_id=mask_id, mask_share_of_changed=share, supervised_copies=frac)
    if frac <= 0.5:
        return None
    return failed("TASK", "task.mlm_labels_not_masked",
                  f"a masked LM (input id {mask_id}, the mask token, stands at {share:.0%} of the supervised positions whose "
                  f"target differs) whose labels also supervise the visible tokens: at {frac:.0%} of the {int(sup.sum())} "
                  f"supervised positions the target equals the input the model sees, so it is mostly asked to copy", ev,
                  expected=f"labels == {ctx.ignore_index} wherever the input was not chosen for masking (~10% copies)",
                  observed=f"targets == visible inputs at {frac:.0%} of supervised positions",
                  hint=f"set labels[~masked_indices] = {ctx.ignore_index} (only the masked positions are predicted)")


def _probe(ctx: Ctx, ev: dict[str, Any]) -> Check:
    expected, rows, note = expected_from_probe(ctx)
    ev["probe"] = note
    t = ctx.batch.targets
    if expected is None or not torch.is_tensor(t):
        return warned("TASK", f"unverified: {note}", ev)
    observed = t if rows is None else t[rows]
    expected = expected.to(observed.device)
    if ctx.class_dim is not None and expected.is_floating_point() and expected.dim() == observed.dim() + 1:
        expected = expected.argmax(dim=ctx.class_dim)  # the probe returned scores: read its labels
    if expected.shape != observed.shape:
        if expected.numel() != observed.numel():
            return warned("TASK", f"unverified: task_probe gave shape {shape(expected)} for targets of shape {shape(observed)}", ev)
        expected = expected.reshape(observed.shape)
    if is_int(observed):
        return _compare_labels(ctx, expected, observed, ev)
    return _compare_values(ctx, expected.to(observed.dtype), observed, ev)


def _compare_labels(ctx: Ctx, expected: torch.Tensor, observed: torch.Tensor, ev: dict[str, Any]) -> Check:
    m = observed != ctx.ignore_index
    e, o = expected[m].long(), observed[m].long()
    if o.numel() == 0:
        return warned("TASK", "unverified: no supervised target to compare with the probe", ev)
    agree = float((e == o).float().mean())
    pairs = Counter(zip(e[e != o].tolist(), o[e != o].tolist()))
    ev.update(agreement=agree, compared=int(o.numel()),
              confusion=[[a, b, n] for (a, b), n in pairs.most_common(5)])
    if agree >= AGREEMENT:
        return passed("TASK", f"task_probe agrees with {agree:.1%} of {o.numel()} targets", ev)
    per_label = {}
    for a in sorted(set(e.tolist())):
        got = Counter(o[e == a].tolist()).most_common(1)[0]
        per_label[a] = got
    consistent = all(n == int((e == a).sum()) for a, (_, n) in per_label.items())
    ev["mapping"] = [[a, b] for a, (b, _) in per_label.items()]
    ev["consistent_mapping"] = consistent
    top = ", ".join(f"{a}->{b} x{n}" for (a, b), n in pairs.most_common(3))
    what = "a consistent relabelling (a permuted label mapping)" if consistent else "the disagreements"
    g = torch.Generator().manual_seed(0)
    chance = sum(float((e == o[torch.randperm(o.numel(), generator=g)]).float().mean()) for _ in range(8)) / 8
    ev["chance_agreement"] = chance
    if (moved := realigned_probe(expected, observed, ctx.ignore_index, agree, ev)) is not None:
        return moved  # a dense map that agrees flipped or transposed: misaligned, not noisy
    if not consistent and agree > chance + 0.5 * (1 - chance):
        # most targets follow the rule, scattered ones do not: an approximate task_probe or label noise as easily
        # as a defect; a wrong mapping or misaligned rows fall to chance (or map consistently)
        return warned("TASK", f"task_probe agrees with {agree:.1%} of {o.numel()} targets, far above chance "
                      f"({chance:.1%}), and the disagreements are scattered ({top}, expected->observed): label noise or "
                      "an approximate task_probe, not shown to be wrong targets", ev)
    return failed("TASK", "task.label_mismatch",
                  f"task_probe agrees with only {agree:.1%} of {o.numel()} targets; {what}: {top} (expected->observed)", ev,
                  expected=f"targets agree with task_probe on >= {AGREEMENT:.0%}",
                  observed=f"{agree:.1%} agree; most common expected->observed: {top}",
                  hint="the labels no longer describe the inputs: check the label mapping (class index order, "
                       "label encoder fitted on a different split) before touching the model")


def _near(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).abs() <= 1e-3 * (1 + b.abs())


def _copied_input(ctx: Ctx, observed: torch.Tensor) -> str | None:
    """``inputs[:, 19, 0]`` when every target column is a copy of one input element of its example (continuous
    targets, >= 4 examples, all distinct: a chance match is out of reach), else None."""
    x = ctx.batch.inputs
    if not torch.is_tensor(x) or not x.is_floating_point() or x.dim() < 2 or ctx.batch_axis != 0 or observed.dim() == 0:
        return None
    n = observed.shape[0]
    if x.shape[0] != n or n < 4:
        return None
    flat, o = x.detach().reshape(n, -1).double(), observed.detach().reshape(n, -1).double()
    names = []
    for c in range(o.shape[1]):
        col = o[:, c]
        if col.unique().numel() < n:
            return None
        hits = _near(flat, col[:, None]).all(0).nonzero()
        if not hits.numel():
            return None
        idx = torch.unravel_index(hits[-1], x.shape[1:])
        names.append("inputs[:, " + ", ".join(str(int(i)) for i in idx) + "]")
    return ", ".join(dict.fromkeys(names))


def _compare_values(ctx: Ctx, expected: torch.Tensor, observed: torch.Tensor, ev: dict[str, Any]) -> Check:
    e, o = expected.double(), observed.double()
    close = float(_near(e, o).double().mean())
    var = float(o.var(unbiased=False)) if o.numel() > 1 else 0.0
    mse = float(((e - o) ** 2).mean())
    r2 = 1 - mse / var if var > 0 else (1.0 if mse == 0 else float("-inf"))
    ev.update(agreement=close, r2=r2 if r2 != float("-inf") else None, compared=int(o.numel()))
    copy = _copied_input(ctx, observed) if close < AGREEMENT else None
    if copy is not None:
        ev["targets_copy"] = copy
        return failed("TASK", "task.label_mismatch",
                      f"the targets are a copy of the inputs' {copy} in every one of {observed.shape[0]} examples, while "
                      f"task_probe gives other values ({close:.1%} within 1e-3, R^2 {g4(r2)}): the model is asked to repeat "
                      f"a value it already sees", ev,
                      expected="targets == task_probe(inputs) (within 1e-3)",
                      observed=f"targets == {copy}; {close:.1%} of targets within 1e-3 of task_probe",
                      hint="the target window is off by one: take the value after the input window (series[:, T]), "
                           "not its last element")
    if close >= AGREEMENT or r2 >= AGREEMENT:
        return passed("TASK", f"task_probe agrees: {close:.1%} of {o.numel()} targets within 1e-3, R^2 {g4(r2)}", ev)
    return failed("TASK", "task.label_mismatch",
                  f"task_probe explains the targets poorly: {close:.1%} within 1e-3, R^2 {g4(r2)} over {o.numel()} values",
                  ev, expected=f">= {AGREEMENT:.0%} of targets within 1e-3 of task_probe, or R^2 >= {AGREEMENT}",
                  observed=f"{close:.1%} within 1e-3, R^2 {g4(r2)}",
                  hint="the targets no longer describe the inputs: check target construction, scaling and row order")
