"""COMPUTATION (six_claims): hidden units of every Linear/Conv layer differ: weight rows not all zero or identical,
or, if they are, their gradient rows differ so the first update breaks the tie (``claim.computation.zero_init`` /
``symmetric_init``).

Evidence before FAIL: identical rows whose gradient rows are identical and nonzero stay tied for good (confirmed).
Identical rows that get no gradient at all are confirmed only when two steps of the program's optimizer on a copy
leave them without one *and* the same layers given random weights on another copy get one: then the initialization
is what keeps them silent. A layer that gets no gradient with random weights either (its input is all zeros, a
learned prior fed a constant zero tensor; its output unused) is silent whatever its weights: a WARN, not an
initialization defect.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..._globals import preserved_globals
from ...report import Status
from .._core.batch import Batch, compute_loss
from .._core.checks import Check
from .._core.state import detached_copy
from ._measured_step import Measured, weighted_layers
from ._verdict import claim, frozen_tie, skip

WEIGHT_RTOL = 1e-6  # rows "identical": max |row_i - row_0| <= WEIGHT_RTOL * max |W|
GRAD_RTOL = 1e-5  # gradient rows "identical" (BLAS tiling can differ in the last bits)


def _units(m: nn.Module, w: torch.Tensor) -> torch.Tensor:
    """Weight as one row per output unit: [units, fan_in]."""
    rows = w.detach().transpose(0, 1) if isinstance(m, nn.modules.conv._ConvTransposeNd) else w.detach()
    return rows.reshape(rows.shape[0], -1).float()


# ---- COMPUTATION -------------------------------------------------------------------------------

def _row_spread(rows: torch.Tensor) -> float:
    return float((rows - rows[0]).abs().max())


def _symmetry(lname: str, m: nn.Module, run: Measured) -> tuple[dict[str, Any], bool] | None:
    """Evidence for a layer whose weight rows are identical (or all zero), and whether its gradient rows
    differ (the first update then breaks the tie); None when the weight rows already differ."""
    rows = _units(m, m.weight)
    wmax = float(rows.abs().max())
    wspread = _row_spread(rows)
    if wspread > WEIGHT_RTOL * wmax:
        return None
    ev = {"module": lname, "units": int(rows.shape[0]), "max_abs_weight": wmax, "max_row_difference": wspread,
          "zero": wmax == 0.0}
    grad = run.grads.get(f"{lname}.weight" if lname else "weight")
    if grad is not None:
        grows = _units(m, grad)
        ev["max_grad_row_difference"] = _row_spread(grows)
        ev["max_abs_grad"] = float(grows.abs().max())
    act = run.activations.get(lname)
    axis = -1 if isinstance(m, nn.Linear) else 1  # where the units are: features last, channels second
    if act is not None and act.dim() >= 2 and act.shape[axis] == rows.shape[0]:
        ev["activation_unit_spread"] = _row_spread(act.movedim(axis, 0).reshape(rows.shape[0], -1).float())
    return ev, grad is not None and ev["max_grad_row_difference"] > GRAD_RTOL * ev["max_abs_grad"]


def _has_gradient(run: Measured, module: str) -> bool:
    g = run.grads.get(f"{module}.weight")
    return g is not None and bool(g.any())


def _heals(model: nn.Module, step: tuple[Any, Batch, Any], modules: list[str]) -> bool | None:
    """Whether the silent layers get a gradient after one step of the program's optimizer on a copy (a zero layer
    downstream moves and lets it through); None when that step could not run."""
    optimizer, b, loss_fn = step
    try:
        work, opt = detached_copy(model, optimizer)
        opt = opt if opt is not None else torch.optim.SGD(work.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            compute_loss(work, b, loss_fn)[1].backward()
            opt.step()
        opt.zero_grad()
        compute_loss(work, b, loss_fn)[1].backward()
    except Exception:  # noqa: BLE001 - user code; the finding stays unconfirmed
        return None
    grads = dict(work.named_parameters())
    return all(grads[f"{m}.weight"].grad is not None and bool(grads[f"{m}.weight"].grad.any()) for m in modules)


def computation(model: nn.Module, run: Measured, step: tuple[Any, Batch, Any]) -> Check:
    name = "COMPUTATION"
    layers = [(n, m) for n, m in weighted_layers(model) if m.weight.numel() and _units(m, m.weight).shape[0] >= 2]
    if not layers:
        return skip(name, "claim.computation", "no Linear/Conv layer with at least 2 units to compare")
    broken, healed = [], []
    for lname, m in layers:
        found = _symmetry(lname, m, run)
        if found is not None:
            (healed if found[1] else broken).append(found[0])
    summary = {"layers_checked": len(layers), "symmetric_layers": [e["module"] for e in broken + healed],
               "weight_rtol": WEIGHT_RTOL, "grad_rtol": GRAD_RTOL}
    # identical rows that get no gradient at all (a zero-initialized layer downstream, the output conv of a residual
    # block): the loss does not depend on them at these weights, so whether they stay tied after the first steps is
    # not shown; identical rows that get identical nonzero gradients stay tied for good (confirmed)
    fixed = {n for n, m in layers if not m.weight.requires_grad}  # a frozen layer: tied by design or by a slip
    frozen, broken = [e for e in broken if e["module"] in fixed], [e for e in broken if e["module"] not in fixed]
    silent = [e for e in broken if not _has_gradient(run, e["module"])]
    broken = [e for e in broken if e not in silent]
    heals = _heals(model, step, [e["module"] for e in silent]) if silent and not broken else None
    if heals is False:  # still no gradient after steps of the program's own optimizer: stuck for good ...
        caused = _init_is_the_cause(model, step, [e["module"] for e in silent])
        # ... and because of the initialization when random weights on a copy get a gradient (confirmed); a layer
        # whose random weights get none either is silent whatever its weights (a zero input, an unused output)
        broken, silent = [e for e in silent if caused.get(e["module"])], [e for e in silent if not caused.get(e["module"])]
        for e in silent:
            e["random_weights_get_gradient"] = caused.get(e["module"])
    if silent and not broken:
        return claim(name, Status.WARN, "claim.computation.tied_without_gradient",
                     f"{len(silent)} layers have identical/zero weight rows and get no gradient at these weights (first: "
                     f"{silent[0]['module']}): " + _silent_why(heals, silent[0].get("random_weights_get_gradient")),
                     {**silent[0], **summary, "heals": heals})
    if broken:
        ev = {**broken[0], **summary}
        kind = "claim.computation.zero_init" if ev["zero"] else "claim.computation.symmetric_init"
        what = "all-zero weights" if ev["zero"] else f"{ev['units']} identical weight rows (max difference {ev['max_row_difference']:.2e})"
        grad_note = ("its gradient rows are identical too" if "max_grad_row_difference" in ev
                     else "it gets no gradient to break the tie")
        return claim(name, Status.FAIL, kind,
                     f"{ev['module']}: {what}; {grad_note}, so its {ev['units']} units compute the same function and "
                     f"cannot differentiate ({len(broken)} such layers)", ev,
                     "hidden units with different weights (random initialization)",
                     "initialize with random weights (nn.init.kaiming_uniform_ / the layer's default reset_parameters())")
    if frozen:
        return frozen_tie(name, frozen, summary)
    if healed:
        return claim(name, Status.PASS, "claim.computation",
                     f"{len(healed)} layers start with identical/zero rows ({', '.join(e['module'] for e in healed)}), but "
                     "their gradient rows differ, so the first update breaks the symmetry", {**healed[0], **summary})
    return claim(name, Status.PASS, "claim.computation",
                 f"all {len(layers)} Linear/Conv layers have distinct weight rows", summary)


def _init_is_the_cause(model: nn.Module, step: tuple[Any, Batch, Any], modules: list[str]) -> dict[str, bool]:
    """Per silent layer, whether it gets a nonzero weight gradient once those layers hold random weights (their own
    ``reset_parameters()``, seeded) on a copy; empty when that copy or its backward could not run (unconfirmed)."""
    _optimizer, b, loss_fn = step
    try:
        work = detached_copy(model, None)[0]
        named = dict(work.named_modules())
        with preserved_globals(seed=0), torch.no_grad():
            for m in modules:
                named[m].reset_parameters()
        compute_loss(work, b, loss_fn)[1].backward()
    except Exception:  # noqa: BLE001 - user code, or a layer without reset_parameters: unconfirmed
        return {}
    grads = {m: named[m].weight.grad for m in modules}
    return {m: g is not None and bool(g.any()) for m, g in grads.items()}


def _silent_why(heals: bool | None, random_gets_one: bool | None) -> str:
    if heals:
        return "a zero-initialized layer downstream keeps them silent; after two steps of the program's optimizer on a copy they get one"
    if heals is None:
        return "a zero-initialized layer downstream keeps them silent; whether they get one once it moves could not be checked"
    if random_gets_one is False:
        return ("two steps of the program's optimizer on a copy leave them without one, and so do random weights on "
                "another copy: they are silent whatever their weights (an all-zero input, an unused output), which "
                "their initialization does not cause")
    return ("two steps of the program's optimizer on a copy leave them without one; whether random weights would get one "
            "could not be checked")
