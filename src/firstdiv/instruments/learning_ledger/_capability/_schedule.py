"""CAPABILITY's "the parameters barely moved at every lr" checked against the program's own schedule.

The escalation multiplies the lr the program's optimizer holds at this instant. A schedule that warms up from a
near-zero rate (a one-cycle schedule's ``max_lr / div_factor``, 1e16 in a speed-run recipe; a linear warmup from 1e-8 of
the base rate) holds an lr there that no 1000-fold raise turns into a step that moves float32 weights, while the program
trains a few calls later at orders of magnitude more. The verdict's premise, that the lr at this instant is the step size
the program trains at, is checked on the program's own evidence: the lr each param group had at every
``optimizer.step`` of train_step's calls (PARAMETER_UPDATE's record, ``lr_at_steps``) and the rates a
``torch.optim.lr_scheduler`` keeps in the group (``initial_lr``, ``max_lr``). Where the largest of them is above every lr
the rounds tried, the escalation runs again from it on fresh copies (the counterfactual), and its verdict is the link's,
with a note naming both lrs: the same copy fitting there is a PASS; barely moving there too keeps the FAIL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ..._core.closure import innermost
from ..._core.lr import lr_of
from ..._core.task import Ctx
from .._common import g4

SCHEDULE_KEYS = ("initial_lr", "max_lr")  # the rates torch.optim.lr_scheduler records in a param group
STUCK = 1e-3  # the relative parameter change below which the rounds count as not having moved the weights


def schedule_lrs(ctx: Ctx) -> list[float] | None:
    """Per param group of the program's optimizer, the largest lr the program shows for it: now, at the steps of its
    own train_step calls, and in its schedule's records; None without an optimizer."""
    if ctx.optimizer is None:
        return None
    stepped = ctx.notes.get("lr_at_steps") or {}
    out = []
    for g in innermost(ctx.optimizer).param_groups:
        rates = [lr_of(g), *(float(g[k]) for k in SCHEDULE_KEYS if isinstance(g.get(k), (int, float))),
                 *(stepped[id(p)] for p in g["params"] if id(p) in stepped)]
        out.append(max((v for v in rates if math.isfinite(v)), default=math.nan))
    return out


def at_schedule(ctx: Ctx, rounds: list, escalate: Callable[[], tuple[list, str | None]], ev: dict[str, Any],
                budget: float) -> tuple[list, str | None] | None:
    """The escalation run again from the program's scheduled lr (module docstring), when every round barely moved
    the weights and that lr is above every lr they tried; None when the premise holds as it is."""
    usable = [r for r in rounds if r.outcome != "diverged"] or rounds
    if not usable or max(r.moved for r in usable) >= STUCK:
        return None
    base = schedule_lrs(ctx)
    tried = [max((r.lr[i] for r in rounds if i < len(r.lr)), default=math.nan) for i in range(len(base or []))]
    if not base or not any(b > t for b, t in zip(base, tried)):  # nan compares False: nothing to go on
        return None
    ctx.notes["capability_base_lr"] = base  # every later round (the plateau's counterfactual too) starts there
    ctx.notes.pop("capability_timed_out", None)
    ctx.notes["capability_deadline"] = time.perf_counter() + budget
    again = escalate()
    now = ", ".join(g4(v) for v in rounds[0].lr)
    ev.update(lr_at_this_step=rounds[0].lr, schedule_lr=base, rounds_at_this_step=[r.summary() for r in rounds])
    ctx.report_notes.append(f"note: the program's lr at this step ({now}) moved the weights of a copy by less than "
                            f"{STUCK:g} even 1000-fold, while its own schedule reaches {', '.join(g4(v) for v in base)} "
                            "(at train_step's optimizer steps, or as the rate its LR scheduler records): a warmup's "
                            "start, so CAPABILITY escalated from the scheduled lr")
    return again
