"""Run the escalation ladder over the evidence at hand, stop at the first divergence, and pre-fill the incident
worksheet (appendix: "When to escalate", "The one-bug rule", "A reusable incident worksheet").

>>> ws = firstdiv.diagnose(model=model, batch=(x, y), loss_fn=loss_fn, optimizer=opt, symptom="loss is flat")
>>> ws.status, ws.first_divergence.where      # FAIL, "four_structures:head.weight"
>>> print(ws.to_markdown())                   # paste into an issue

The order ("Start cheap. Escalate only when the cheaper instrument passes."), rung by rung:

1. print / assert tensor facts: ``evidence_packet`` records the minimum packet first, because "Preserve
   observations before your intervention destroys the failing state"; then ``tensor_facts`` asserts on that
   packet the facts no design intends: the loss on the known batch is finite (kind ``facts.nonfinite_loss``,
   where ``"loss"``; a loss that is no scalar tensor is the evidence's ``loss_fn`` breaking its contract: SKIPPED). A NaN loss found here is not later
   mistaken for a zero gradient by the graph instruments.
2. known-sample contract: ``stage_trace`` walks one known sample through the preprocessing stages. Chapter 31:
   "first print the exact input it received"; the model may be answering an unintended input correctly.
3. graph / ownership inspection: ``four_structures`` (reads the Python, registered and optimizer structures by
   identity; one forward, no backward) before ``reachability`` (a forward plus ``autograd.grad``). Ownership is
   the cheaper read and section 15 routes "the head never moves" to it.
4. controlled one-step probe: ``step_probe`` (one step on a copy; the user's ``train_step`` twice, restored).
5. tiny-batch capability test: ``learning_ledger`` before ``six_claims``. The ledger walks TASK -> OBJECTIVE ->
   ... and stops at the first failing link, so a target or objective bug costs it one forward; its
   CAPABILITY link (the tiny-batch overfit) runs only after every earlier link passed. ``six_claims`` probes
   representation, initialization and evaluation mode, which chapter 31 says to consider "only after those
   checks" (alignment, objective, ownership); it names the mechanism behind a CAPABILITY failure when run.
6. hooks / detailed activation inspection, least instrumented first: ``shape_ledger`` (shapes at shape-changing
   modules, derived before execution; it names the culprit of a flatten mismatch), ``attention_check`` (one
   module the user pointed at, on a copy), ``tensor_trace`` (every module and functional op, plus an arange
   layout probe on a copy), ``feature_space`` (interpreting activation vectors only makes sense once the
   tensors that carry them are right).
7. profiler / allocator / compiler: ``loader_timing`` (first ask whether the loop waits for batches),
   ``performance_ledger`` (phase times, allocator, live-tensor growth), ``compile_ledger`` ("Begin with eager.
   If eager is already wrong, compilation is not the first problem"), ``compare_outputs`` (eager vs compiled,
   exported, quantized variants on fixed inputs).
8. multi-seed comparison: never run here (it needs runs at several seeds: the lab's ``sweep`` and ``compare``);
   always listed under NOT CHECKED.

An instrument whose evidence is missing is not run and is listed as "not checked: needs X". With
``stop_at_first`` (the one-bug rule) nothing after the first FAIL runs; those instruments are listed as not
reached. WARN never stops the ladder.

Evidence keys: the DESIGN keys ``model``, ``batch`` (one known batch: ``(inputs, targets)`` or a dict),
``loss_fn``, ``optimizer``, ``loader``, ``train_step``, ``eval_fn``, ``task_probe``, and these extra ones
(:data:`EXTRA_KEYS`): ``inputs`` (what ``model`` receives; default: the batch's inputs), ``contracts``
(``{module path: "B T D"}`` for tensor_trace), ``attention`` (``(module, inputs)`` or ``(module, inputs,
options)`` for attention_check), ``sample`` + ``stages`` (+ ``stage_probes``, ``stage_contracts``) for
stage_trace, ``features`` (vectors along the last axis, for feature_space), ``step`` (``step(batch)``: one
training step on a given batch: the consumer loader_timing times and the step performance_ledger measures;
without it loader_timing consumes with a forward/backward/step of a deep copy of ``model`` and
performance_ledger measures ``train_step()``), ``compile_inputs`` (+ ``compile_options``) for compile_ledger on
``model``, ``variants`` + ``variant_inputs`` (+ ``variant_options``) for compare_outputs. None counts as absent.

The worksheet's ``first_divergence`` is the first FAIL's divergence with ``where`` written
``"<instrument>:<where>"`` (e.g. ``"four_structures:head.weight"``, ``"compare_outputs:int8:fc1"``: split at
the first colon), because a bare ``LEVEL_2`` or ``loss`` does not say which instrument it belongs to;
``details["first_divergence"]`` holds the same fields plus ``instrument`` and ``instrument_where`` (the
instrument's own ``where``).
"""

from __future__ import annotations

import time
from typing import Any

from .._book import ESCALATION
from .._format import clip
from .._registry import EVIDENCE_KEYS, InstrumentSpec, ladder
from ..errors import InvalidArgument
from ..instruments._core.user_hooks import reports_user_hooks
from ..report import Report, Status, skipped
from .worksheet import Worksheet, build, contract_of

__all__ = ["EVIDENCE_KEYS", "EXTRA_KEYS", "LADDER", "ORDER", "Worksheet", "diagnose"]

EXTRA_KEYS = {
    "inputs": "what model(...) receives (default: the batch's inputs)",
    "contracts": "{module path: 'B T D'} named axes for tensor_trace",
    "attention": "(module, inputs) or (module, inputs, options) for attention_check",
    "sample": "one raw sample for stage_trace", "stages": "[(name, fn), ...] preprocessing stages for stage_trace",
    "stage_probes": "probes for stage_trace", "stage_contracts": "per-stage contracts for stage_trace",
    "stage_options": "stage_trace's other options: {'class_to_idx': ..., 'eval_stages': [...], 'augmentations': [...]}",
    "designed": "{module path: per-example output shape} the network was designed to produce, for shape_ledger",
    "features": "representation vectors (coordinates on the last axis) for feature_space",
    "step": "step(batch): one training step on a given batch (loader_timing's consumer, performance_ledger's step)",
    "compile_inputs": "the real input sequence for compile_ledger(model, ...)", "compile_options": "compile_ledger options",
    "variants": "{name: model or callable} for compare_outputs", "variant_inputs": "fixed inputs for compare_outputs",
    "variant_options": "compare_outputs options",
    "task": "the declared task for learning_ledger: 'classification', 'regression' or 'language_model'",
    "frozen": "fnmatch patterns of the parameters frozen on purpose, for four_structures (checked both ways)",
    "batch_axis": "the axis of the batch's examples (1 for sequence-first [T, B] inputs) for the learning instruments",
}
_R = ESCALATION  # the rungs, in the appendix's words
_SEEDS = {"instrument": "multi-seed comparison", "rung": _R[7],
          "needs": "runs at several seeds: `firstdiv sweep file.py:train --seeds 0-11`, then `firstdiv compare A B` "
                   "(diagnose inspects one run)"}


#: the instruments diagnose runs, in its order (the registry's ladder)
LADDER: tuple[InstrumentSpec, ...] = ladder()
#: the instruments in the order diagnose runs them
ORDER: tuple[str, ...] = tuple(r.name for r in LADDER)


@reports_user_hooks
def diagnose(*, symptom: str | None = None, expected: str | None = None, stop_at_first: bool = True,
             **evidence: Any) -> Worksheet:
    """Run the applicable instruments in the escalation order (module docstring), stop at the first FAIL unless
    ``stop_at_first=False`` (then everything runs and the first FAIL is still the first divergence), and return
    the pre-filled incident worksheet. ``symptom`` and ``expected`` are the user's words, copied as given.

    Evidence (keyword arguments; None counts as absent): the DESIGN keys ``model``, ``batch``, ``loss_fn``,
    ``optimizer``, ``loader``, ``train_step``, ``eval_fn``, ``task_probe`` and the extra keys of :data:`EXTRA_KEYS`
    (module docstring: what each is for and which instrument takes it).

    Status: FAIL at a divergence; WARN when nothing failed but an instrument warned or had its evidence and still
    could not run; PASS otherwise (a clean bill listing what was and was not checked); SKIPPED when no instrument
    had its evidence or none could check anything. Malformed evidence raises :class:`~firstdiv.errors.InvalidArgument`.
    """
    for name, text in (("symptom", symptom), ("expected", expected)):
        if text is not None and not isinstance(text, str):
            raise InvalidArgument(f"Expected `{name}` to be a string or None but got {type(text).__name__}")
    if not isinstance(stop_at_first, bool):
        raise InvalidArgument(f"Expected `stop_at_first` to be True or False but got {stop_at_first!r}")
    ev = _validated(evidence)
    reports: dict[str, Report] = {}
    observations: list[dict[str, Any]] = []
    not_checked: list[dict[str, str]] = []
    not_reached: list[str] = []
    first: dict[str, Any] | None = None
    for rung in LADDER:
        needs = rung.missing(ev)
        if needs:
            not_checked.append({"instrument": rung.name, "rung": rung.rung, "needs": needs})
        elif first is not None and stop_at_first:
            not_reached.append(rung.name)
        else:
            report, seconds = _run(rung, ev, reports)
            reports[rung.name] = report
            observations.append(_observation(rung, report, seconds))
            if report.status is Status.FAIL and first is None:
                first = observations[-1]
    not_checked.append(dict(_SEEDS))
    test = next((r.test for r in LADDER if first and r.name == first["instrument"]), None)
    return build(symptom, expected, ev, reports, observations, not_checked, not_reached, first, ORDER, test)


def _run(rung: InstrumentSpec, ev: dict[str, Any], reports: dict[str, Report]) -> tuple[Report, float]:
    """Run one instrument; what it raises becomes a SKIPPED observation (the rest of the ladder still runs)."""
    from ..instruments._core.batch import describe_error
    from ..instruments._core.closure import tensors_in
    from ..instruments._core.state import guarded

    start = time.perf_counter()
    try:
        # an instrument that runs the user's step (the performance ledger times train_step) runs the program's data
        # pipeline, which may rewrite memory the evidence batch shares with it (a numpy dataset shuffled in place)
        with guarded(tensors_in(ev.get("batch"))):
            report = rung.run(ev, reports)
    except InvalidArgument as exc:
        report = skipped(rung.name, f"the evidence does not suit {rung.name}: {exc}")
    except Exception as exc:  # noqa: BLE001 - user code or an instrument bug: recorded, never a crash of the ladder
        report = skipped(rung.name, f"{rung.name} raised {describe_error(exc)}")
    return report, time.perf_counter() - start


def _observation(rung: InstrumentSpec, report: Report, seconds: float) -> dict[str, Any]:
    div = report.first_divergence
    contract = contract_of(rung.name, div.kind if div else "")
    return {"instrument": rung.name, "rung": rung.rung, "contract": contract, "status": report.status.value,
            "summary": _summary(report), "where": div.where if div else None, "kind": div.kind if div else None,
            "seconds": seconds, "not_applicable": bool(report.details.get("not_applicable"))}


def _summary(report: Report) -> str:
    """One line: the divergence, the reason it could not run, or the count of checks and the first warning."""
    div = report.first_divergence
    if report.status is Status.FAIL and div is not None:
        return clip(f"{div.where} [{div.kind}]: expected {clip(div.expected, 60)}; observed {clip(div.observed, 80)}", 200)
    if report.status is Status.SKIPPED:
        return clip(report.reason, 200)
    counts = {s: sum(f.status is s for f in report.findings) for s in Status}
    n = len(report.findings)
    text = f"{n} check{'s' * (n != 1)}: {counts[Status.PASS]} pass" + "".join(
        f", {counts[s]} {s.value.lower()}" for s in (Status.WARN, Status.SKIPPED) if counts[s])
    warn = next((f for f in report.findings if f.status is Status.WARN), None)
    return clip(text + (f"; WARN {warn.where}: {warn.message}" if warn else ""), 200)


# ---- evidence -------------------------------------------------------------------------------------------------------------


def _validated(evidence: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(evidence) - set(EVIDENCE_KEYS) - set(EXTRA_KEYS))
    if unknown:
        raise InvalidArgument(f"Expected evidence keys among {', '.join((*EVIDENCE_KEYS, *EXTRA_KEYS))} but got "
                              + ", ".join(map(repr, unknown)))
    ev = {k: v for k, v in evidence.items() if v is not None}
    if not ev:
        return ev
    from ..instruments._core import batch as _batch

    _batch.check_evidence(ev, callables=("train_step", "eval_fn", "step"))
    if "batch" in ev:
        _batch.split_batch(ev["batch"], ev.get("model"))
    attention = ev.get("attention")
    if attention is not None and not (isinstance(attention, (tuple, list)) and len(attention) in (2, 3)
                                      and (len(attention) == 2 or isinstance(attention[2], dict))):
        raise InvalidArgument("Expected `attention` to be (module, inputs) or (module, inputs, options dict) but got "
                              f"{type(attention).__name__}")
    for key in ("compile_options", "variant_options", "contracts", "variants"):
        if key in ev and not isinstance(ev[key], dict):
            raise InvalidArgument(f"Expected `{key}` to be a dict but got {type(ev[key]).__name__}")
    return ev
