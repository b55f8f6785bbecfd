"""``objective.log_det_mismatch``: a normalizing flow whose loss adds a log-determinant that is not its transform's.

A flow is trained on ``-log p(x) = -log N(z) - log|det dz/dx|``, the log-determinant summed by hand over its layers:
a sign flipped in one layer, a layer's term dropped, a determinant left out of the loss, a mask that lets an output see
the input it transforms (the diagonal no longer gives the determinant) all train without an error, towards a
"density" that does not integrate to one. The premise is read from the program's own loss, then the determinant
computed by autograd:

1. The batch is one float input ``x`` (targets, as class labels, sliced with it), ``D`` values per example (2 <= D <= ``MAX_DIM``), and the model
   returns ``z`` shaped like ``x`` beside per-example scalars ``L`` (``[B]``, ``[B, 1]``, or ``[B, D]`` summed over D);
   on the ledger's copy in eval mode, with every RNG reseeded alike.
2. The loss is the change-of-variables NLL under a standard normal base, read from ``loss_fn`` on ``PROBED`` single
   examples: ``nll_i * s + log N(z_i) + sigma * L_i`` is one constant for every example, for a scale ``s`` in (1, D,
   D ln 2) (nats, per dimension, bits per dimension) and ``sigma`` +1 or -1 for one of the scalars (the determinant
   the loss adds), or with no scalar at all (the loss adds none). A loss that is not this (a VAE's reconstruction
   beside its KL, a learned base) is not judged.
3. Autograd's Jacobian ``dz_i/dx_i`` (D backward passes of the batch) gives the transform's ``T_i = log|det|``. A
   FAIL when the determinant the loss adds (``sigma * L_i``, or 0) differs from ``T_i`` beyond ``TOLERANCE`` in most
   probed examples. Where ``T`` is ~0 at these weights (a flow initialized to the identity), or they match and D <=
   ``AGAIN_DIM`` (a mask's extra dependency may run through a weight that starts at zero), both are read again on a
   copy with perturbed weights: a correct flow's determinant matches at any weights. A singular Jacobian (not a
   bijection) is not judged.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._core.checks import Check
from .._core.task import Ctx
from ._common import failed, g4
from ._dependency import seeded_loss
from ._perturbed import at_perturbed_weights, eval_mode

MAX_DIM = 256  # values per example: one backward pass of the batch per value
AGAIN_DIM = 64  # up to this many values per example a match is read again on perturbed weights
PROBED = 6  # single examples whose loss is read
TOLERANCE = 1e-2  # |loss's determinant - autograd's| above this fraction of (1 + |autograd's|) is a mismatch
CONSTANT = 1e-4  # spread of the NLL identity across examples, as a fraction of its terms' size, that is one constant
EXPLAINS = 100.0  # the model's side of the identity varies across examples at least this many times its spread


def _scalars(out: Any, n: int, d: int) -> list[tuple[int, torch.Tensor]]:
    """(index, [B] values) of the per-example scalar outputs."""
    found = []
    for k, v in enumerate(out):
        if torch.is_tensor(v) and v.is_floating_point() and v.dim() >= 1 and v.shape[0] == n:
            flat = v.reshape(n, -1)
            if flat.shape[1] in (1, d) and v.dim() <= 2:
                found.append((k, flat.sum(1)))
    return found


def _one(out: Any, i: int) -> Any:
    return type(out)(v[i:i + 1] if torch.is_tensor(v) and v.dim() >= 1 else v for v in out)


def _nll(ctx: Ctx, out: Any, k: int) -> list[float] | None:
    t, n = ctx.batch.targets, out[0].shape[0] if torch.is_tensor(out[0]) and out[0].dim() else None
    try:
        with torch.no_grad():
            vals = [ctx.loss_fn(_one(out, i), t[i:i + 1] if torch.is_tensor(t) and t.dim() and t.shape[0] == n else t)
                    for i in range(k)]
    except Exception:  # noqa: BLE001 - a loss_fn that needs the whole batch: no per-example reading
        return None
    if not all(torch.is_tensor(v) and v.numel() == 1 for v in vals):
        return None
    return [float(v.detach().double()) for v in vals]


def _identity(nll: list[float], lpz: torch.Tensor, scalars: list[tuple[int, torch.Tensor]], d: int) -> tuple | None:
    """(scale, sigma, index) for which the loss is the standard-normal change-of-variables NLL (module docstring).
    The identity must explain how the examples differ: where the model's side (``log N(z) + sigma * L``) barely varies
    across them (a decoder whose output is one constant at these weights), a loss that barely varies either matches
    any such identity and tells nothing."""
    for s in (1.0, float(d), d * math.log(2)):
        for k, v in [*scalars, (None, torch.zeros_like(lpz))]:
            for sigma in ((1.0, -1.0) if k is not None else (0.0,)):
                side = lpz + sigma * v
                r = torch.tensor(nll, dtype=torch.float64) * s + side
                size, spread = float((lpz.abs() + v.abs()).max()) + 1.0, float(r.max() - r.min())
                if spread <= CONSTANT * size and float(side.max() - side.min()) > max(EXPLAINS * spread, CONSTANT):
                    return s, sigma, k
    return None


def _read(ctx: Ctx, x: torch.Tensor, z_at: int) -> tuple[Any, torch.Tensor] | None:
    """The outputs of an eval-mode forward at ``x`` and autograd's log|det dz_i/dx_i| of the first ``PROBED``."""
    n, d = x.shape[0], x[0].numel()
    xg = x.detach().clone().requires_grad_(True)
    with eval_mode(ctx.work), torch.enable_grad():
        run = seeded_loss(ctx, type(ctx.batch)(xg, ctx.batch.targets, ctx.batch.as_kwargs), grad=True)
        if run is None or not torch.is_tensor(run[0][z_at]) or not run[0][z_at].requires_grad:
            return None
        z = run[0][z_at].reshape(n, d)
        rows = []
        for j in range(d):
            (g,) = torch.autograd.grad(z[:, j].sum(), xg, retain_graph=True, allow_unused=True)
            if g is None:
                return None
            rows.append(g.reshape(n, d)[:PROBED])
    jac = torch.stack(rows, 1).double()  # [k, d (output), d (input)]
    sign, logdet = torch.linalg.slogdet(jac)
    if bool((sign == 0).any()) or not bool(torch.isfinite(logdet).all()):
        return None
    out = type(run[0])(v.detach() if torch.is_tensor(v) else v for v in run[0])
    return out, logdet


def log_det_mismatch(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    x, out = ctx.batch.inputs, ctx.outputs
    if not torch.is_tensor(x) or not x.is_floating_point() or x.dim() < 2 \
            or not isinstance(out, (tuple, list)) or hasattr(out, "_fields") or ctx.batch_axis != 0:
        return None
    n, d = x.shape[0], x[0].numel()
    z_at = next((k for k, v in enumerate(out) if torch.is_tensor(v) and v.shape == x.shape), None)
    if z_at is None or not 2 <= d <= MAX_DIM or n < 2:
        return None
    seen = _judge(ctx, x, z_at, n, d)
    if seen is not None and (seen[0] is None or not seen[0] and d <= AGAIN_DIM):
        # the identity at these weights, or a match that weights at initialization may owe to the zeros they hold
        # (a mask's extra dependency through a weight that starts at zero): read again on perturbed weights
        again = at_perturbed_weights(ctx, lambda: _judge(ctx, x, z_at, n, d))
        seen = again if again is not None or seen[0] is None else seen
    if seen is None or seen[0] is None:
        return None
    if not seen[0]:  # the term a "falls in proportion" reading would WARN about is the transform's own determinant
        ctx.notes["log_det_confirmed"] = seen[1]["log_det_output"]
        ev["log_det_confirmed_by_autograd"] = seen[1]["log_det_output"]
        return None
    return _finding(seen[1], ev)


def _judge(ctx: Ctx, x: torch.Tensor, z_at: int, n: int, d: int) -> tuple[bool | None, dict[str, Any]] | None:
    """(mismatch in most probed examples, or None where the transform's determinant is ~0; evidence), or None when
    the premise does not hold."""
    read = _read(ctx, x, z_at)
    if read is None:
        return None
    out, true = read
    k = true.shape[0]
    z = out[z_at].reshape(n, d)[:k].double()
    lpz = -0.5 * z.pow(2).sum(1) - 0.5 * d * math.log(2 * math.pi)
    scalars = [(i, v[:k].double()) for i, v in _scalars(out, n, d) if i != z_at]
    nll = _nll(ctx, out, k)
    found = _identity(nll, lpz, scalars, d) if nll is not None else None
    if found is None:
        return None
    s, sigma, at = found
    added = sigma * dict(scalars)[at] if at is not None else torch.zeros_like(true)
    gap = (added - true).abs()
    ev = {"log_det_output": at, "log_det_sign_in_loss": sigma, "nll_scale": s, "examples_probed": k,
          "log_det_added_by_loss": [round(float(v), 4) for v in added],
          "log_det_by_autograd": [round(float(v), 4) for v in true]}
    if float(true.abs().max()) < TOLERANCE and float(added.abs().max()) < TOLERANCE:
        return None, ev
    return int((gap > TOLERANCE * (1 + true.abs())).sum()) * 2 > k, ev


def _finding(seen: dict[str, Any], ev: dict[str, Any]) -> Check:
    ev.update(seen)
    at, sigma = seen["log_det_output"], seen["log_det_sign_in_loss"]
    added, true = seen["log_det_added_by_loss"][0], seen["log_det_by_autograd"][0]
    what = (f"{'+' if sigma > 0 else '-'}outputs[{at}] as the log-determinant" if at is not None else
            "no log-determinant")
    return failed("OBJECTIVE", "objective.log_det_mismatch",
                  f"the loss is the change-of-variables NLL of a standard normal base and adds {what} (example 0: "
                  f"{g4(added)}), while autograd's log|det dz/dx| of the model's transform is {g4(true)}: the density "
                  "it trains does not integrate to one", ev,
                  expected="the loss's log-determinant equal to log|det dz/dx| of the transform",
                  observed=f"{g4(added)} against {g4(true)} (example 0)",
                  hint="check each layer's log-determinant term (its sign, that every layer adds its own, that the "
                       "total reaches the loss) and the masks that keep each output from reading the input it "
                       "transforms")
