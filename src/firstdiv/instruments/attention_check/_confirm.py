"""Evidence before FAIL for :func:`~firstdiv.instruments.attention_check.attention_check`: what confirms, on the
module's own behaviour, the premise a LEVEL_3/LEVEL_4 check rests on before it FAILs, and the WARN it gives when
nothing does.

- Causality read from the captured weights (no ``causal=``, no ``is_causal``/``causal`` attribute, no causal mask in
  the inputs) is confirmed when every future weight is exactly 0, or when the nonzero ones are exactly a causal mask
  shifted by k (query t sees keys t+1..t+k and nothing beyond: ``tril(diagonal=k)``). Any other pattern (a bidirectional
  prefix, blocks) may be the design: the future-key checks WARN and name ``causal=``.
- Rows of the weights that do not sum to 1 over the keys FAIL only when the module reads them as they are: on the copy,
  the same forward pass with the captured weights replaced by the same weights renormalised over the keys must change
  the output. A module that renormalises over the keys itself (slot attention: softmax over the queries, then a
  weighted mean over the keys) gives the same output and PASSes with that evidence.
  (:func:`~firstdiv.instruments.attention_check._setup.unconfirmed_future` words that WARN.)
- A query with every key forbidden FAILs only when the inputs' padding says the query is a real token; a padding query
  (left padding under a causal mask), or one whose own padding nobody declared, is a WARN.
"""

from __future__ import annotations

import torch

from ._probes import changes, run, threshold
from ._setup import Ctx


def confirm_inferred_causal(ctx: Ctx, w4: torch.Tensor, excluded: torch.Tensor) -> None:
    """After causality was read from the weights: say why it is confirmed (in ``causal_source``) or why not (in
    ``causal_unconfirmed``). ``w4`` [B, Nh, Tq, Tk]; ``excluded`` [Tq, Tk] pairs padding or masks forbid anyway."""
    tq, tk = w4.shape[-2:]
    off = torch.arange(tk, device=w4.device)[None, :] - torch.arange(tq, device=w4.device)[:, None]
    upper = (off > 0) & ~excluded
    visible = (w4 != 0) & upper
    if not bool(visible.any()):
        return  # every future weight is exactly 0: the weights themselves are a causal mask
    k = int(off.expand_as(visible)[visible].max())
    band = upper & (off <= k)
    if bool((visible == band.expand_as(visible)).all()):
        ctx.causal_source += f"; the visible future keys are exactly a causal mask shifted by {k} (tril(diagonal={k}))"
        return
    ctx.causal_unconfirmed = (f"causality was read from the captured weights ({ctx.causal_source.split(': ', 1)[-1]}), "
                              "not declared, and the visible future keys are not a causal mask shifted by a constant "
                              "(a bidirectional prefix or a block pattern may be the design)")


def future_pairs(ctx: Ctx, device: torch.device) -> torch.Tensor:
    """[Tq, Tk] bool: the pairs forbidden only by the inferred, unconfirmed causality (none when it is confirmed)."""
    if not ctx.causal_unconfirmed or not ctx.causal or ctx.Tq != ctx.Tk:
        return torch.zeros(ctx.Tq, ctx.Tk, dtype=torch.bool, device=device)
    return torch.ones(ctx.Tq, ctx.Tk, dtype=torch.bool, device=device).triu(1)


def renormalised_output(ctx: Ctx) -> tuple[float, float] | str:
    """(largest output change, threshold) when the first captured weights are renormalised over the keys on the copy;
    a reason string when the counterfactual cannot run."""
    base = ctx.base
    if not base.sites or base.sites[0].op.endswith("multi_head_attention_forward"):
        return "the weights cannot be replaced in this call"
    pins = [s.weights for s in base.sites]
    w = pins[0].double()
    pins[0] = (w / w.sum(-1, keepdim=True)).nan_to_num(0.0).to(pins[0].dtype)
    same = run(ctx, pinned=[s.weights for s in base.sites])
    renorm = run(ctx, pinned=pins)
    for r in (same, renorm):
        if r.error or r.output is None or r.output.shape != base.output.shape:
            return f"the module raised {r.error or 'nothing comparable'} with the weights replaced"
    try:
        change = float(changes(ctx, same.output, renorm.output).max())
    except (TypeError, AttributeError, RuntimeError):
        return "the output has no [B, Tq, ...] axes to compare"
    return change, threshold(ctx, same.output)


def blocked_is_real(ctx: Ctx, rows: torch.Tensor) -> tuple[torch.Tensor, str]:
    """([B, Tq] bool: blocked queries the inputs' padding declares real tokens, why the others are not confirmed). The
    padding is key_padding_mask (argument or input), else the keys the mask the inputs carry (HF attention_mask)
    forbids to every query of every head."""
    padding = ctx.padding
    given = ctx.user_forbidden
    if padding is None and given is not None and given.dim() == 4 and given.shape[0] in (1, ctx.B):
        padding = given.all(-2).all(1).expand(ctx.B, -1)  # [B, Tk]
    if padding is None or not ctx.self_attention or ctx.Tq != ctx.Tk:
        return torch.zeros_like(rows), ("no padding of the queries is known, so whether their outputs are used could not "
                                        "be confirmed; key_padding_mask= (or the inputs' padding mask) declares it")
    real = rows & ~padding.to(rows.device)
    return real, ("those queries are padding themselves (as the inputs' padding says): their outputs are normally "
                  "discarded")


def reference_forbidden(ctx: Ctx, forb: torch.Tensor, w4: torch.Tensor | None) -> torch.Tensor:
    """The mask the LEVEL_4 reference uses: under unconfirmed causality a future key counts as forbidden only where the
    module itself gave it weight 0 in every head (its own pattern: a prefix stays visible), so the design is not
    compared against a plain causal mask."""
    if w4 is None or not ctx.causal_unconfirmed:
        return forb
    seen = (w4 != 0).any(1, keepdim=True)  # [B, 1, Tq, Tk]
    return forb & ~(future_pairs(ctx, forb.device) & seen)
