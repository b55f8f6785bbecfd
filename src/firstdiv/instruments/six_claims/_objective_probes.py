"""The OBJECTIVE claim's probes, each on outputs or deep copies (never the user's objects): what task the
targets describe, whether the loss rewards outputs moved toward the targets (classification and
regression), and whether a small step along -grad lowers it. Each returns ``(kind or "", message,
evidence)`` or ``(kind or "", evidence)``; six_claims turns the first kind into the claim's failure."""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn

from .._core.batch import Batch, compute_loss, loss_problem
from .._core.copying import model_copy
from ._measured_step import SEED


class Recording:
    """``loss_fn`` that remembers why it failed, so a probe that could not run says so in the evidence."""

    def __init__(self, fn: Any, errors: list[str] | None = None) -> None:
        self.fn, self.errors = fn, [] if errors is None else errors

    @property
    def __wrapped__(self) -> Any:
        return self.fn

    def rewrapped(self, fn: Any) -> Recording:
        """The same recording around ``fn`` (the user's loss reading a copy: ``copy_origin.reading``)."""
        return Recording(fn, self.errors)

    def __call__(self, *args: Any) -> Any:
        try:
            return self.fn(*args)
        except Exception as exc:
            self.errors.append(f"loss_fn raised {type(exc).__name__}: {exc}")
            raise


def _probe_loss(loss_fn: Any, outputs: Any, targets: Any) -> float | None:
    """``loss_fn`` on modified outputs, as a float; None when it fails or is not a finite scalar."""
    try:
        with torch.no_grad():
            value = loss_fn(outputs, targets)
    except Exception:  # noqa: BLE001 - a probe that cannot run is no evidence, not a crash
        return None
    if loss_problem(value) is not None or not bool(torch.isfinite(value.detach()).all()):
        return None
    return float(value.detach().reshape(()))


def infer_task(out: Any, t: Any) -> tuple[str, int, int]:
    """("class", class_dim, K) for integer targets indexing a class axis, ("regression", 0, 0) for targets
    shaped like the outputs, ("", 0, 0) when the targets say nothing about the outputs."""
    if not (torch.is_tensor(out) and out.is_floating_point() and torch.is_tensor(t)) or t.dtype == torch.bool:
        return "", 0, 0
    if not t.is_floating_point() and out.dim() == t.dim() + 1:
        if out.shape[:-1] == t.shape and out.shape[-1] >= 2:
            return "class", -1, int(out.shape[-1])
        if out.dim() >= 2 and out.shape[0] == t.shape[0] and out.shape[2:] == t.shape[1:] and out.shape[1] >= 2:
            return "class", 1, int(out.shape[1])
    if t.numel() == out.numel() and out.dim() >= t.dim():
        return "regression", 0, 0
    return "", 0, 0


def class_checks(out: torch.Tensor, t: torch.Tensor, dim: int, k: int, loss_fn: Any, loss0: float) -> tuple[str, str, dict]:
    """(kind or "", message, evidence) for a classification objective."""
    z = out.movedim(dim, -1) if dim != -1 else out
    valid = (t >= 0) & (t < k)
    ev: dict[str, Any] = {"task": "classification", "classes": k, "supervised": int(valid.sum())}
    if not bool(valid.any()):
        return "", "", {**ev, "note": "no target inside [0, K)"}
    rows = z[valid]
    probs = bool((rows >= 0).all()) and float((rows.sum(-1) - 1).abs().max()) < 1e-3
    if probs:
        ce = float(torch.nn.functional.cross_entropy(rows.float(), t[valid]))
        ev.update(outputs_are_probabilities=True, cross_entropy_of_outputs_as_logits=ce)
        if min(abs(loss0 - ce), abs(loss0 - ce * len(rows))) <= 1e-3 * max(1.0, abs(ce)):
            msg = (f"outputs are already probabilities (rows sum to 1, non-negative) and the loss equals cross-entropy "
                   f"taking them as logits ({loss0:.4g} vs {ce:.4g}); the loss cannot go below {ce:.3g}")
            return "claim.objective.probabilities_as_logits", msg, ev
    delta = 1e-2 * max(1.0, float(z.abs().mean()))
    bump = torch.zeros_like(z).scatter_(-1, t.clamp(0, k - 1).unsqueeze(-1), (delta * valid.to(z.dtype)).unsqueeze(-1))
    raised = _probe_loss(loss_fn, (z + bump).movedim(-1, dim) if dim != -1 else z + bump, t)
    ev.update(loss=loss0, loss_after_raising_correct_logit=raised, delta=delta)
    tol = 1e-6 * max(1.0, abs(loss0))
    if loss0 < -tol and raised is not None and raised > loss0 + tol:  # negative, and it punishes the targets
        msg = (f"loss is {loss0:.4g} < 0 for integer class targets and raising every correct-class output by "
               f"{delta:.2g} raises it ({loss0:.4g} -> {raised:.4g}): the sign is flipped and training maximizes the error")
        return "claim.objective.wrong_sign", msg, ev
    if raised is not None and raised > loss0 + tol:
        scored = _scores_read_by_class(z, t, valid, loss_fn, dim)
        ev["rows_read_as_class_scores"] = scored
        if scored is None or scored < 0.9:  # embeddings a distance loss reads (a prototypical network): not scores
            return "", "", ev
        msg = (f"raising every correct-class output by {delta:.2g} raised the loss {loss0:.4g} -> {raised:.4g}; "
               "the objective does not reward the targets")
        return "claim.objective.wrong_direction", msg, ev
    return "", "", ev


def _scores_read_by_class(z: torch.Tensor, t: torch.Tensor, valid: torch.Tensor, loss_fn: Any, dim: int) -> float | None:
    """The premise of the class checks, read from the loss's gradient on the outputs: the share of supervised rows
    whose target entry's gradient has the opposite sign of every other entry's (a softmax loss over class scores,
    whichever way it points); embeddings that a distance loss reads have mixed signs. None when it cannot be read."""
    zz = z.detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad():
            loss = loss_fn(zz.movedim(-1, dim) if dim != -1 else zz, t)
            (g,) = torch.autograd.grad(loss.reshape(()), zz)
    except Exception:  # noqa: BLE001 - the user's loss_fn; no evidence either way
        return None
    g = g[valid]
    gy = g.gather(-1, t[valid].unsqueeze(-1))
    others = torch.ones_like(g, dtype=torch.bool).scatter_(-1, t[valid].unsqueeze(-1), False)
    opposite = ((g * gy) < 0) | ~others
    return float(opposite.all(-1).float().mean()) if g.numel() else None


def regression_checks(out: torch.Tensor, t: torch.Tensor, loss_fn: Any, loss0: float) -> tuple[str, str, dict]:
    if t.layout is not torch.strided or not torch.is_tensor(out) or out.layout is not torch.strided:
        return "", "", {"task": "regression", "loss": loss0, "not_checked": f"{t.layout} targets are not moved toward"}
    target = t.reshape(out.shape).to(out.dtype)
    perfect = _probe_loss(loss_fn, target, t)
    closer = _probe_loss(loss_fn, out + 1e-2 * (target - out), t)
    ev = {"task": "regression", "loss": loss0, "loss_at_targets": perfect, "loss_one_percent_closer": closer}
    tol = 1e-6 * max(1.0, abs(loss0))
    if loss0 < -tol and perfect is not None and closer is not None and perfect > loss0 + tol and closer > loss0 + tol:
        msg = (f"loss is {loss0:.4g} < 0 and gets worse as the outputs approach the targets ({perfect:.4g} at the "
               "targets): the objective is flipped")
        return "claim.objective.wrong_sign", msg, ev
    return "", "", ev


def descent(model: nn.Module, batch: Batch, loss_fn: Any, grads: dict[str, torch.Tensor | None]) -> tuple[str, dict]:
    """Step a deep copy along -grad (three sizes); the loss must fall for at least one. Returns (kind, ev)."""
    probe = model_copy(model)
    pairs = [(p, grads[n]) for n, p in probe.named_parameters()
             if grads.get(n) is not None and bool(torch.isfinite(grads[n]).all())]
    gnorm = sum(float(g.double().pow(2).sum()) for _, g in pairs) ** 0.5
    if not pairs or gnorm == 0.0:
        return "", {"descent": "no gradient to follow"}
    pnorm = max(1.0, sum(float(p.detach().double().pow(2).sum()) for p, _ in pairs) ** 0.5)
    base = [_loss_at(probe, batch, loss_fn) for _ in range(2)]
    if None in base:
        return "", {"descent": "the loss could not be evaluated on a copy"}
    if base[0] != base[1]:
        return "", {"descent": f"loss not reproducible at fixed parameters ({base[0]} vs {base[1]})"}
    saved = [p.detach().clone() for p, _ in pairs]
    after = []
    for r in (1e-3, 1e-4, 1e-5):
        with torch.no_grad():
            for (p, g), s in zip(pairs, saved):
                p.copy_(s - (r * pnorm / gnorm) * g.to(p.dtype))
        after.append(_loss_at(probe, batch, loss_fn))
        if after[-1] is None or after[-1] < base[0]:
            break
    ev = {"loss_before_step": base[0], "loss_after_steps": after, "relative_step_sizes": [1e-3, 1e-4, 1e-5][:len(after)]}
    tol = 1e-6 * max(1.0, abs(base[0]))
    rose = len(after) == 3 and all(a is not None and a > base[0] + tol for a in after)
    if rose and not _scales([a - base[0] for a in after]):
        ev["descent"] = ("note: the loss rose at every step along -grad, but not in proportion to the step (a tenth of the "
                         "step, not about a tenth of the rise): it jumps at these weights (a ReLU unit switching under a "
                         "normalization with a tiny epsilon), so descent was not judged")
        return "", ev
    # a semi-gradient objective reads values of the parameters off the graph (an advantage R - value.item(), a
    # detached target): -grad is not the loss's gradient there, so a rise is no evidence of a broken gradient
    reads = _off_graph_reads(probe, batch, loss_fn) if rose else []
    if reads:
        ev["descent"] = (f"note: the loss reads {', '.join(reads)} of tensors that require grad (a semi-gradient "
                         "objective): -grad is not the gradient of the loss it reports, so descent was not judged")
        return "", ev
    return ("claim.objective.not_descended" if rose else ""), ev


def _scales(rises: list[float]) -> bool:
    """A gradient that points up the loss makes it rise in proportion to a small step: a tenth of the step, about a
    tenth of the rise (at most 0.3 of it at every size, curvature making the largest rise larger still, and at least
    0.03 between the two smallest); a jump in the loss (a discontinuity crossed at any step size) does not."""
    ratios = [b / a for a, b in itertools.pairwise(rises)]
    return all(r <= 0.3 for r in ratios) and ratios[-1] >= 0.03


_OFF_GRAPH = {torch.Tensor.item: "item()", torch.Tensor.detach: "detach()", torch.Tensor.tolist: "tolist()",
              torch.Tensor.numpy: "numpy()"}


class _OffGraph(torch.overrides.TorchFunctionMode):
    """Records the calls that take a value off the autograd graph of a tensor that requires grad."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = _OFF_GRAPH.get(func)
        if name and args and torch.is_tensor(args[0]) and args[0].requires_grad and name not in self.seen:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def _off_graph_reads(model: nn.Module, batch: Batch, loss_fn: Any) -> list[str]:
    torch.manual_seed(SEED)
    mode = _OffGraph()
    try:
        with torch.enable_grad(), mode:
            compute_loss(model, batch, loss_fn)
    except Exception:  # noqa: BLE001 - a probe that cannot run is no evidence
        return []
    return mode.seen



def _loss_at(model: nn.Module, batch: Batch, loss_fn: Any) -> float | None:
    torch.manual_seed(SEED)
    try:
        with torch.no_grad():
            loss = compute_loss(model, batch, loss_fn)[1]
    except Exception:  # noqa: BLE001 - a probe that cannot run is no evidence
        return None
    return None if loss_problem(loss) is not None else float(loss.reshape(()))
