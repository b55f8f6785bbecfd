"""Which of the user's own hooks ran while an instrument ran, and how many times: said in ``side_effects``.

Hooks are kept, on the user's objects and on deep copies alike. A hook is part of the user's computation
(a forward hook that returns a value replaces the output; a gradient hook may clip or mask), and which
hooks only observe cannot be known in advance: removing them would measure another program and could
hide the very bug an instrument looks for. The price is that a counting or logging hook also counts the
instrument's calls, and a copy's hooks are the user's very functions (``copy.deepcopy`` shares functions
and closures), so they count the copy's calls too. The instrument therefore says exactly that: every user
hook that ran, where (on the user's modules or on deep copies), and how many times.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

_ACTIVE: ContextVar[bool] = ContextVar("firstdiv_counting_hooks", default=False)
R = TypeVar("R")


def describe(tally: dict[str, list[int] | None]) -> str:
    """One sentence naming every hook that ran and how many times ("" when none ran); hooks present but not
    counted (None) are named as such."""
    parts, uncounted = [], [label for label, counts in tally.items() if counts is None]
    for label, counts in tally.items():
        if counts is not None and sum(counts):
            own, copies = counts
            where = "" if not copies else f" ({copies} of them on deep copies)" if own else " (all on deep copies)"
            parts.append(f"{label} {own + copies}x{where}")
    if uncounted:
        return (f"your hooks were kept and ran on firstdiv's copies, eager and compiled: {', '.join(uncounted)}; not "
                "counted, since torch.compile guards on hook objects and a counting wrapper would change what it compiles")
    if not parts:
        return ""
    why = "".join([
        "; deep copies run your very hook functions (closures are shared)" if any(c and c[1] for c in tally.values()) else "",
        "; global hooks run for every module, firstdiv's copies included" if any(k.startswith("global") for k in tally) else ""])
    return f"your hooks ran and were kept (they are part of your computation): {', '.join(parts)}{why}"


def reports_user_hooks(instrument: Callable[..., R] | None = None, *, count: bool = True) -> Any:
    """Decorate an instrument so its report's ``side_effects`` names the user hooks that ran during the call
    and how many times (an instrument called by another one is counted by the outer call only).
    ``count=False`` (``@reports_user_hooks(count=False)``) names the hooks present without wrapping them."""
    if instrument is None:
        return functools.partial(reports_user_hooks, count=count)

    @functools.wraps(instrument)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        if _ACTIVE.get():
            return instrument(*args, **kwargs)
        from .hook_tally import counting, user_modules  # torch only once an instrument runs
        from .state import kept_leaves

        token = _ACTIVE.set(True)
        try:
            # the batch's own tensors that require grad (inputs a Hamiltonian or a gradient penalty differentiates):
            # every backward through them writes their .grad, which the instrument must leave as it found it
            with kept_leaves((args, kwargs)), counting(user_modules(args, kwargs), wrapping=count) as tally:
                report = instrument(*args, **kwargs)
        finally:
            _ACTIVE.reset(token)
        return _noted(report, describe(tally))
    return wrapper


def _noted(report: Any, note: str) -> Any:
    if not note or not dataclasses.is_dataclass(report) or not isinstance(getattr(report, "side_effects", None), str):
        return report
    side = report.side_effects
    return dataclasses.replace(report, side_effects=note if side == "none" else f"{side}; {note}")
