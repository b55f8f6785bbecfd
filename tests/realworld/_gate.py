"""Run the learning-chain instruments on the corpus (shared by ``test_corpus.py`` and
``benchmarks/realworld_rates.py``).

- :func:`run_correct` runs ``firstdiv.diagnose`` with ``stop_at_first=False`` on a correct program, so every
  instrument whose evidence the program has runs once, exactly as ``diagnose`` calls it; the verdicts are read
  from the worksheet's reports. The program's ``loader`` is left out: loader timing is the performance
  instruments' corpus (its verdicts depend on the machine's load).
- :func:`run_bug` runs the one instrument a bug names, called as a user would with everything the program has.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from _api import Bug, Program

import firstdiv
from firstdiv._registry import EVIDENCE_KEYS

#: the instruments whose verdicts the gates read (diagnose runs more: their verdicts count too)
CHAIN = ("evidence_packet", "four_structures", "step_probe", "learning_ledger", "six_claims")


def _axis(p: Program) -> dict[str, Any]:
    return {"batch_axis": p.batch_axis} if p.batch_axis else {}


def _inputs(p: Program) -> Any:
    """What a user hands tensor_trace: the batch's inputs (a tensor, positional args or keyword args)."""
    from firstdiv.instruments._core.batch import split_batch

    return split_batch(p.batch, p.model).inputs


def _first_attention(model: Any) -> str | None:
    """The path a user points attention_check at: the model's first innermost module whose class is an attention."""
    found = [n for n, m in model.named_modules() if "attention" in type(m).__name__.lower()]
    inner = [n for n in found if not any(o != n and o.startswith(n + ".") for o in found)]
    return inner[0] if inner else None


CALLS = {
    "evidence_packet": lambda p: firstdiv.evidence_packet(**{k: v for k, v in p.evidence().items() if k in EVIDENCE_KEYS
                                                             and k != "loader"}),
    "four_structures": lambda p: firstdiv.four_structures(p.model, p.optimizer, p.batch, p.loss_fn, frozen=p.frozen,
                                                          train_step=p.train_step),
    "step_probe": lambda p: firstdiv.step_probe(p.model, p.batch, p.loss_fn, p.optimizer, train_step=p.train_step),
    "learning_ledger": lambda p: firstdiv.learning_ledger(p.model, p.batch, p.loss_fn, p.optimizer, train_step=p.train_step,
                                                          task_probe=p.task_probe, task=p.task, **_axis(p)),
    "reachability": lambda p: firstdiv.reachability(p.model, p.batch, p.loss_fn, frozen=p.frozen),
    "tensor_trace": lambda p: firstdiv.tensor_trace(p.model, _inputs(p), batch_axis=p.batch_axis),
    "attention_check": lambda p: firstdiv.attention_check(p.model, _inputs(p), module=_first_attention(p.model)),
    "six_claims": lambda p: firstdiv.six_claims(p.model, p.batch, p.loss_fn, p.optimizer, eval_fn=p.eval_fn,
                                                train_step=p.train_step, **_axis(p)),
}


@dataclasses.dataclass
class Verdict:
    instrument: str
    status: str
    where: str | None
    kind: str | None
    summary: str
    not_applicable: bool = False  # SKIPPED because nothing of its kind is there (no shape-changing layer)


def _summary(report: firstdiv.Report) -> str:
    div = report.first_divergence
    if div is not None:
        return f"{div.where} {div.kind}: {str(div.observed)[:160]}"
    bad = [f for f in report.findings if f.status.name in ("WARN", "SKIPPED", "FAIL")]
    return report.reason[:200] if report.reason else "; ".join(f"{f.where}: {f.message[:120]}" for f in bad[:2])


def verdict(report: firstdiv.Report) -> Verdict:
    div = report.first_divergence
    return Verdict(report.instrument, report.status.value, div.where if div else None, div.kind if div else None,
                   _summary(report), bool(report.details.get("not_applicable")))


def run_correct(program: Program) -> tuple[str, dict[str, Verdict]]:
    """``diagnose``'s status and every instrument's verdict on a correct program."""
    ev = program.evidence()
    ev.pop("loader", None)
    ws = firstdiv.diagnose(stop_at_first=False, **ev)
    names = ws.details.get("reports", {})
    return ws.status.value, {name: verdict(ws.report_of(name)) for name in names}


def run_bug(bug: Bug, seed: int = 0) -> Verdict:
    """The named instrument's verdict on the buggy program."""
    program = bug.build(seed)
    try:
        return verdict(CALLS[bug.instrument](program))
    except Exception as exc:  # noqa: BLE001 - an instrument that raises on a bug has not localized it
        return Verdict(bug.instrument, "RAISED", None, None, f"{type(exc).__name__}: {str(exc)[:200]}")


def localized(bug: Bug, v: Verdict) -> bool:
    """The instrument gave the bug's status and its first divergence names every string of ``bug.where``."""
    if v.status != bug.status:
        return False
    if bug.status != "FAIL":
        return True
    text = f"{v.where or ''}"
    return all(w in text for w in bug.where) and (not bug.kind or bug.kind in (v.kind or ""))
