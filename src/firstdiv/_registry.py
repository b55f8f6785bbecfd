"""Every instrument, once. Adding an instrument is one :class:`InstrumentSpec` here; from this table come
``firstdiv``'s lazy public names, ``diagnose``'s escalation ladder (order, evidence, call), the routing
table's exact calls and the worksheet's contract per instrument, and the tests check the no-trace battery
and the routing table against it. Every check kind an instrument can FAIL has its premise here too
(:data:`PREMISES`, from :mod:`._premises`; :func:`premise`).

This module imports nothing heavy: ``import firstdiv`` reads it. The calls import the instruments when
they run.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._book import ESCALATION
from ._geometry_call import confirmed_by_step
from ._premises import PREMISES, Premise
from ._step_call import batch_consumer
from .report import Report, skipped

__all__ = ["EVIDENCE_KEYS", "PREMISES", "SPECS", "InstrumentSpec", "Premise", "ladder", "lazy_names", "premise", "spec"]

#: DESIGN's evidence keys, in the order ``diagnose`` documents them
EVIDENCE_KEYS = ("model", "batch", "loss_fn", "optimizer", "loader", "train_step", "eval_fn", "task_probe")
_TRAINING = ("model", "batch", "loss_fn", ("optimizer", "train_step"))

#: side-effect tiers: what an instrument does to the user's objects (its report's ``side_effects`` says it
#: in full): it only reads them, its mutating work runs on copies, or it runs the user's code on them and
#: restores everything afterwards
TIERS = ("reads", "copies", "restores")

Evidence = dict[str, Any]
LadderCall = Callable[[Evidence, dict[str, Report]], Report]


@dataclass(frozen=True)
class InstrumentSpec:
    """One instrument: its public name and module, the worksheet contract its divergences violate, its
    side-effect tier, the exact call a route names and, when ``diagnose`` runs it, its rung on the
    escalation ladder, the evidence it needs (a key, or a tuple of alternatives), how it is called from
    that evidence, and the call a regression test asserts ``.ok`` on."""

    name: str
    module: str
    contract: str
    tier: str
    call: str
    rung: str | None = None
    needs: tuple[str | tuple[str, ...], ...] = ()
    run: LadderCall | None = None
    test: str = ""
    public: bool = True

    def missing(self, ev: Evidence) -> str:
        """The evidence this instrument needs that ``ev`` lacks, as the worksheet names it ("" when none)."""
        absent = [need if isinstance(need, str) else " or ".join(need) for need in self.needs
                  if not any(k in ev for k in ((need,) if isinstance(need, str) else need))]
        return ", ".join(absent)

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"{self.name}: tier {self.tier!r} is not one of {TIERS}")
        if (self.rung is None) != (self.run is None):
            raise ValueError(f"{self.name}: a rung and a run go together")


class _Instruments:
    """``_fi().name`` is the public instrument ``name``, imported when a call runs (``import firstdiv`` reads this
    table, so it must not import torch)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(_BY_NAME[name].module), name)


def _fi() -> _Instruments:
    return _Instruments()


def _opt(ev: Evidence, *keys: str) -> Evidence:
    return {k: ev[k] for k in keys if k in ev}


def _inputs(ev: Evidence) -> Any:
    if "inputs" in ev:
        return ev["inputs"]
    from .instruments._core.batch import positional, split_batch
    inputs = split_batch(ev["batch"], ev.get("model")).inputs
    # the geometry instruments read a tuple as positional arguments; the batch's call makes a tuple one argument
    # unless the model's forward takes it as its positional arguments (the learning instruments' rule)
    if isinstance(inputs, list) and positional(ev.get("model"), inputs):
        return tuple(inputs)  # a list of a several-argument forward's arguments
    return (inputs,) if isinstance(inputs, tuple) and not positional(ev.get("model"), inputs) else inputs


def _tensor_facts(_: Evidence, reports: dict[str, Report]) -> Report:
    from .instruments.tensor_facts import tensor_facts
    return tensor_facts(reports["evidence_packet"])


def _loader(ev: Evidence, _: dict[str, Report]) -> Report:
    """The consumer is the user's: ``step(batch)``, else their ``train_step`` (called per batch; a zero-argument
    one does the work of one step of their loop), and only without either one step of a copy of ``model`` on
    ``loss_fn(model(inputs), targets)`` (which need not be what their loop computes: a GAN's class labels)."""
    step = ev.get("step")
    if step is None and "train_step" in ev:
        step = batch_consumer(ev["train_step"])
    if step is None and all(k in ev for k in ("model", "loss_fn", "optimizer")):
        step = _copy_consumer(ev["model"], ev["optimizer"], ev["loss_fn"])
    return _fi().loader_timing(ev["loader"], step, batches=8)


def _copy_consumer(model: Any, optimizer: Any, loss_fn: Any) -> Callable[[Any], float]:
    """One forward/backward/step of a deep copy per batch: the consumer when no ``step`` was given."""
    import torch

    from .instruments._core.batch import compute_loss
    from .instruments._core.state import detached_copy

    work, opt = detached_copy(model, optimizer)

    def step(batch: Any) -> float:
        opt.zero_grad(set_to_none=True)
        _, loss = compute_loss(work, batch, loss_fn)
        loss.backward()
        if not isinstance(opt, torch.optim.LBFGS):
            opt.step()
        return float(loss.detach())
    # loader_timing reads this: its consumer is a stand-in, so a starved verdict is not confirmed for the user's loop
    step._firstdiv_surrogate_step = ("one forward/backward/step of a copy of model on loss_fn(model(inputs), targets) "
                                     "(diagnose's stand-in: no step or train_step given)")
    return step


#: diagnose's triage timing (performance_ledger called directly measures 2 warm-up and 10 timed calls): half the
#: calls of the user's step, the ladder's largest single cost on a healthy program
_TRIAGE_TIMING = {"warmup": 1, "repeats": 5}


def _performance(ev: Evidence, _: dict[str, Report]) -> Report:
    objects = {**_opt(ev, "model", "optimizer", "loss_fn"), **_TRIAGE_TIMING}
    if "step" in ev and "batch" in ev:
        return _fi().performance_ledger(ev["step"], ev["batch"], **objects)
    if "train_step" in ev:
        return _fi().performance_ledger(ev["train_step"], None, **objects)
    return skipped("performance_ledger", "step(batch) needs a batch to run on: pass batch=(inputs, targets), or "
                                         "train_step=<a zero-argument step>")


def _attention(ev: Evidence, _: dict[str, Report]) -> Report:
    module, inputs, *rest = ev["attention"]
    return _fi().attention_check(module, inputs, **(rest[0] if rest else {}))


_M = "firstdiv.instruments."
_R = ESCALATION
_FINITE = "torch.isfinite(loss_fn(model(inputs), targets)).all()"

#: the instruments in the order ``diagnose`` runs them, then those it does not run
SPECS: tuple[InstrumentSpec, ...] = (
    InstrumentSpec("evidence_packet", _M + "evidence_packet", "tensor", "copies",
                   "firstdiv.evidence_packet(model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer, loader=loader)",
                   _R[0], (("model", "batch", "loader"),), lambda ev, _: _fi().evidence_packet(**_opt(ev, *EVIDENCE_KEYS)),
                   _FINITE),
    InstrumentSpec("tensor_facts", _M + "tensor_facts", "tensor", "reads", "", _R[0], ("model", "batch", "loss_fn"),
                   _tensor_facts, _FINITE, public=False),
    InstrumentSpec("stage_trace", _M + "stage_trace", "input representation", "copies",
                   "firstdiv.stage_trace(sample, stages, probes=probes, contracts=contracts)", _R[1], ("sample", "stages"),
                   lambda ev, _: _fi().stage_trace(ev["sample"], ev["stages"], probes=ev.get("stage_probes"),
                                                   contracts=ev.get("stage_contracts"), **ev.get("stage_options", {})),
                   "firstdiv.stage_trace(sample, stages, probes=probes, contracts=contracts).ok"),
    InstrumentSpec("four_structures", _M + "four_structures", "ownership", "restores",
                   "firstdiv.four_structures(model, optimizer, batch, loss_fn, frozen=frozen)", _R[2], ("model",),
                   lambda ev, _: _fi().four_structures(ev["model"], ev.get("optimizer"), ev.get("batch"),
                                                       ev.get("loss_fn") if "batch" in ev else None,
                                                       **_opt(ev, "frozen", "train_step")),
                   "firstdiv.four_structures(model, optimizer, batch, loss_fn).ok"),
    InstrumentSpec("reachability", _M + "reachability", "graph", "reads", "firstdiv.reachability(model, batch, loss_fn)",
                   _R[2], ("model", "batch", "loss_fn"),
                   lambda ev, _: _fi().reachability(ev["model"], ev["batch"], ev["loss_fn"],
                                                    **_opt(ev, "frozen", "optimizer", "train_step")),
                   "firstdiv.reachability(model, batch, loss_fn).ok"),
    InstrumentSpec("step_probe", _M + "step_probe", "learning chain", "restores",
                   "firstdiv.step_probe(model, batch, loss_fn, optimizer, train_step=train_step)", _R[3], _TRAINING,
                   lambda ev, _: _fi().step_probe(ev["model"], ev["batch"], ev["loss_fn"], ev.get("optimizer"),
                                                  train_step=ev.get("train_step")),
                   "firstdiv.step_probe(model, batch, loss_fn, optimizer, train_step=train_step).ok"),
    InstrumentSpec("learning_ledger", _M + "learning_ledger", "learning chain", "copies",
                   "firstdiv.learning_ledger(model, batch, loss_fn, optimizer, train_step=train_step, task_probe=task_probe)",
                   _R[4], _TRAINING,
                   lambda ev, _: _fi().learning_ledger(ev["model"], ev["batch"], ev["loss_fn"], ev.get("optimizer"),
                                                       task_probe=ev.get("task_probe"), train_step=ev.get("train_step"),
                                                       **_opt(ev, "task", "batch_axis")),
                   "firstdiv.learning_ledger(model, batch, loss_fn, optimizer, train_step=train_step, task_probe=task_probe).ok"),
    InstrumentSpec("six_claims", _M + "six_claims", "learning chain", "copies",
                   "firstdiv.six_claims(model, batch, loss_fn, optimizer, eval_fn=eval_fn, train_step=train_step)", _R[4],
                   _TRAINING,
                   lambda ev, _: _fi().six_claims(ev["model"], ev["batch"], ev["loss_fn"], ev.get("optimizer"),
                                                  eval_fn=ev.get("eval_fn"), train_step=ev.get("train_step"),
                                                  **_opt(ev, "batch_axis")),
                   "firstdiv.six_claims(model, batch, loss_fn, optimizer, eval_fn=eval_fn, train_step=train_step).ok"),
    InstrumentSpec("shape_ledger", _M + "shape_ledger", "geometry", "reads", "firstdiv.shape_ledger(model, inputs)",
                   _R[5], ("model", ("inputs", "batch")),
                   confirmed_by_step("shape_ledger", lambda ev: _fi().shape_ledger(ev["model"], _inputs(ev),
                                                                                   **_opt(ev, "designed"))),
                   "firstdiv.shape_ledger(model, inputs).ok"),
    InstrumentSpec("attention_check", _M + "attention_check", "attention", "copies",
                   "firstdiv.attention_check(attn, inputs, causal=True)", _R[5], ("attention",), _attention,
                   "firstdiv.attention_check(module, inputs, **options).ok"),
    InstrumentSpec("tensor_trace", _M + "tensor_trace", "tensor", "reads",
                   'firstdiv.tensor_trace(model, inputs, contracts={"": "B T D"})', _R[5], ("model", ("inputs", "batch")),
                   confirmed_by_step("tensor_trace", lambda ev: _fi().tensor_trace(
                       ev["model"], _inputs(ev), contracts=ev.get("contracts"), batch_axis=ev.get("batch_axis", 0))),
                   "firstdiv.tensor_trace(model, inputs, contracts=contracts).ok"),
    InstrumentSpec("feature_space", _M + "feature_space", "tensor", "reads", "firstdiv.feature_space(vectors, axis=-1)",
                   _R[5], ("features",), lambda ev, _: _fi().feature_space(ev["features"]),
                   "firstdiv.feature_space(features).ok"),
    InstrumentSpec("loader_timing", _M + "loader_timing", "performance", "restores",
                   'firstdiv.loader_timing(loader, step=train_step, sweep={"num_workers": [0, 1, 2, 4, 8]})', _R[6],
                   ("loader",), _loader, "firstdiv.loader_timing(loader, step, batches=8).ok"),
    InstrumentSpec("performance_ledger", _M + "performance_ledger", "performance", "restores",
                   "firstdiv.performance_ledger(step, batch, model=model, optimizer=optimizer, loss_fn=loss_fn)", _R[6],
                   (("train_step", "step"),), _performance, "firstdiv.performance_ledger(train_step).ok"),
    InstrumentSpec("compile_ledger", _M + "compile_ledger", "compiler", "copies", "firstdiv.compile_ledger(model, inputs_seq)",
                   _R[6], ("model", "compile_inputs"),
                   lambda ev, _: _fi().compile_ledger(ev["model"], ev["compile_inputs"], **ev.get("compile_options", {})),
                   "firstdiv.compile_ledger(model, compile_inputs).ok"),
    InstrumentSpec("compare_outputs", _M + "compare_outputs", "run comparison", "restores",
                   ("variants, tolerances = firstdiv.variants(model, example_inputs=inputs); "
                    "firstdiv.compare_outputs(variants, inputs, tolerances=tolerances)"), _R[6],
                   ("variants", "variant_inputs"),
                   lambda ev, _: _fi().compare_outputs(ev["variants"], ev["variant_inputs"], **ev.get("variant_options", {})),
                   "firstdiv.compare_outputs(variants, variant_inputs).ok"),
    InstrumentSpec("memory_phases", _M + "memory_phases", "performance", "restores",
                   "with firstdiv.memory_phases(model, optimizer) as mp: train_step()  # then print(mp.report)"),
    InstrumentSpec("DiagnosticSet", _M + "diagnostic_set", "run comparison", "restores",
                   "firstdiv.DiagnosticSet.load(path).check(model)"),
)
_BY_NAME = {s.name: s for s in SPECS}


def spec(name: str) -> InstrumentSpec:
    """The spec of instrument ``name`` (KeyError names the known ones)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no instrument {name!r}; known: {', '.join(_BY_NAME)}") from None


def lazy_names() -> dict[str, str]:
    """Public instrument name -> the module that defines it (``firstdiv``'s lazy names)."""
    return {s.name: s.module for s in SPECS if s.public}


def ladder() -> tuple[InstrumentSpec, ...]:
    """The instruments ``diagnose`` runs, in its order."""
    return tuple(s for s in SPECS if s.run is not None)


def premise(kind: str) -> Premise:
    """What check ``kind`` assumes before it FAILs, how it confirms it and what it does when it cannot (KeyError
    names the nearest known kinds)."""
    try:
        return PREMISES[kind]
    except KeyError:
        family = kind.split(".")[0] + "."
        near = difflib.get_close_matches(kind, PREMISES, n=5, cutoff=0.6)
        near += [k for k in PREMISES if k.startswith(family) and k not in near][:8 - len(near)]
        hint = f"; near: {', '.join(near)}" if near else f"; {len(PREMISES)} kinds are known (docs/checks.md)"
        raise KeyError(f"no check kind {kind!r} can FAIL in the premise table{hint}") from None
