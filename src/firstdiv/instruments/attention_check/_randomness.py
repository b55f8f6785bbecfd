"""Eval-mode randomness for :func:`~firstdiv.instruments.attention_check.attention_check`: the module's eval path runs
twice on the same input (no reseeding in between) and must give the same output, and no stochastic op (dropout with
``training=True``, ``F.scaled_dot_product_attention`` with ``dropout_p > 0``, ``F.multi_head_attention_forward``
with ``training=True``) may run under ``eval()``. The checks never reproduce dropout: when some is active, the later
runs leave it out (``ctx.neutral``) so the other levels compare exact values, and the report says so."""

from __future__ import annotations

import torch

from ...report import Status
from .._core.checks import Check, check
from ._capture import Run
from ._probes import run, threshold
from ._setup import Ctx

DROPOUT, RANDOM = "attention.eval_dropout", "attention.eval_randomness"


def _difference(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    if a.shape != b.shape:
        return float("inf")
    x, y = a.double(), b.double()
    both = ~torch.isfinite(x) & ~torch.isfinite(y) & ((x == y) | (torch.isnan(x) & torch.isnan(y)))
    d = torch.where(both, torch.zeros_like(x), (x - y).abs().nan_to_num(nan=float("inf")))
    return float(d.max()) if d.numel() else 0.0


def _named(ctx: Ctx, op: str) -> str:
    """'F.dropout(p=0.1) in drop' with the module's own path in front ('blocks.0.attn.drop'); '(root)' is the module."""
    text, _, inner = op.rpartition(" in ")
    root = ctx.path or ctx.name
    return f"{text} in {root if inner == '(root)' else f'{root}.{inner}' if ctx.path else inner}"


def eval_randomness(ctx: Ctx, first: Run) -> tuple[Check, Run]:
    """(the check, the run the other levels use as their base: ``first``, or a run without the active dropout)."""
    where = ctx.path or ctx.name
    second = run(ctx)
    ev = {"probe": "eval_twice", "module": where, "mode": "eval()" if ctx.module is not None else "as called (a function)"}
    if second.error or second.output is None:
        return check("LEVEL_4", RANDOM, Status.SKIPPED, f"eval path not run twice: the second pass raised {second.error or 'nothing'}",
                     ev), first
    ops = list(dict.fromkeys(_named(ctx, op) for op in first.stochastic + second.stochastic))
    diff, thr = _difference(first.output, second.output), threshold(ctx, first.output)
    ev.update({"max_abs_difference": diff, "threshold": thr, "stochastic_ops": ops})
    if not ops and diff <= thr:
        return check("LEVEL_4", RANDOM, Status.PASS, f"two eval-mode passes on the same input agree (max difference {diff:.3g}) "
                     "and no dropout ran", ev), first
    ctx.neutral = True
    base = run(ctx)
    ctx.notes.append("eval-mode dropout left out of every later pass so the other checks compare exact values")
    base = first if base.error or base.output is None else base
    if ops:
        observed = f"{ops[0]} is active under eval(); two passes differ by {diff:.3g}"
        return check("LEVEL_4", DROPOUT, Status.FAIL, f"{len(ops)} stochastic op(s) ran in eval mode: {'; '.join(ops[:3])}; two "
                     f"passes on the same input differ by {diff:.3g}", ev, expected="no dropout under eval(): the same output "
                     "for the same input", observed=observed, hint="pass dropout_p=self.dropout if self.training else 0.0 "
                     "(or F.dropout(..., training=self.training)); a hard-coded training=True ignores eval()"), base
    return check("LEVEL_4", RANDOM, Status.FAIL, f"two eval-mode passes on the same input differ by {diff:.3g} (> {thr:.3g}) "
                 "although no dropout call was seen", ev, expected="the same output for the same input in eval mode",
                 observed=f"outputs differ by {diff:.3g} between two eval passes",
                 hint="a random op (torch.rand, bernoulli, noise) runs regardless of self.training"), base
