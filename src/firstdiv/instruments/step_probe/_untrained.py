"""``step.never_trained`` (WARN): a module that runs in every training step, whose parameters the optimizer owns, and
whose output no loss of the program ever uses (a copy-paste slip that repeats one head's term for another's, a value
the model computed replaced by a stored one, a block whose result is never assigned).

The controlled step alone says ``step.unused_parameter``. What the user's own steps add is confirmed on the program's
objects: the optimizer passed in owns the parameter with ``requires_grad``, its module ran a forward with gradients on
in the user's ``train_step`` calls, and yet no backward of those calls reached it, nothing moved it, and no other
optimizer the step holds owns it; the controlled step on a copy showed its gradient is None and that perturbing it
leaves the loss unchanged. It stays a WARN: that the step is *meant* to train it is not shown by anything in the
program. Correct public code computes heads it never trains (a decision transformer's state and return predictions
beside the action loss it trains on), exactly as a copy-paste slip that fits one critic head twice does.
"""

from __future__ import annotations

from typing import Any

import torch

from ...report import Status
from .._core.checks import Check, check, label
from .._core.elsewhere import noted_other


def never_trained(checks: list[Check], watch: Any, optimizer: torch.optim.Optimizer | None) -> list[Check]:
    """``checks`` with each confirmed ``step.unused_parameter`` WARN replaced by a ``step.never_trained`` WARN
    that says what the user's own steps showed, and each no-gradient FAIL at a parameter another optimizer the step
    reaches trains (not the one passed in) made a note: another objective trains it (``_core.elsewhere``)."""
    if optimizer is None:
        return checks
    owned = {id(p) for g in optimizer.param_groups for p in g["params"]}
    reached = {pid for grads in watch.call_grads.values() for pid in grads}
    by_name = {names[0]: (p, names) for p, names in watch.params}
    left = watch.moved_names | watch.elsewhere
    out = []
    for c in checks:
        f = c.finding
        hit = by_name.get(f.where)
        if (f.check == "step.unused_parameter" and hit is not None and f.evidence.get("loss_depends") is False
                and f.evidence.get("grad") == "none" and f.where not in left):
            p, names = hit
            module = names[0].rpartition(".")[0]
            if id(p) in owned and id(p) not in reached and module in watch.ran:
                c = _named(names, module or "(root module)", f.evidence)
        out.append(c)
    return noted_other(out, watch.elsewhere, ("step.no_gradient", "step.zero_gradient"))


def _named(names: list[str], module: str, evidence: dict) -> Check:
    return check(names[0], "step.never_trained", Status.WARN,
                 f"{label(names)}: module {module} runs with gradients on in train_step's calls and the optimizer owns "
                 "this parameter, but no backward of train_step reaches it and nothing moves it (its gradient is None; "
                 "perturbing it on a copy leaves the loss unchanged): the module's output is computed and dropped (by design for a head kept for inference, else a slip)",
                 {**evidence, "module": module, "in_optimizer": True, "train_step_gradient": None},
                 hint="find where its output should enter the loss (a term that repeats another module's output, a "
                      "value replaced by a stored or detached copy, a result never assigned); if that is by design, "
                      "set requires_grad_(False) on it or leave it out of the optimizer")
