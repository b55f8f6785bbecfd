"""LEVEL_1 (shapes), LEVEL_3 (numerical invariants of the captured weights) and the LEVEL_4 reference agreement for
:func:`~firstdiv.instruments.attention_check.attention_check`. Each function returns Checks; none raises."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ...report import Status
from .._core.checks import Check, check
from ._capture import Site, repeat_heads
from ._confirm import blocked_is_real, future_pairs, renormalised_output
from ._setup import Ctx, bound, rotary, unconfirmed_future

SHAPE, NONFINITE, BLOCKED = "attention.shape", "attention.nonfinite", "attention.blocked_query"
ROWS, FORBIDDEN, REFERENCE = "attention.rows_not_normalized", "attention.forbidden_weight", "attention.reference_mismatch"
NO_SITE = ("no attention weights observed: no softmax over a [..., Tq, Tk] tensor, no F.scaled_dot_product_attention and "
           "no F.multi_head_attention_forward ran in the forward pass (a fused kernel?)")


def where_module(ctx: Ctx, site: Site) -> str:
    return site.module or f"(root: {ctx.name})"


def w4_of(ctx: Ctx, site: Site | None, nh: int | None) -> torch.Tensor | None:
    """The captured weights as [B, Nh, Tq, Tk] (heads folded into the batch axis are unfolded b-major), else None."""
    if site is None:
        return None
    w = site.weights
    if w.dim() == 4 and w.shape[0] == ctx.B and (nh is None or w.shape[1] == nh):
        return w
    if w.dim() == 3 and nh and w.shape[0] == ctx.B * nh:
        return w.view(ctx.B, nh, *w.shape[1:])
    return None


def _tolerance(ctx: Ctx, scale: float, dtype: torch.dtype, noise: float | None) -> float:
    """atol + 1e-4 relative; in half precision, 8x the error of the same reference computed in that precision
    (``noise``), else 32 eps relative when that estimate is missing."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    if noise is None:
        return ctx.atol + max(1e-4, 32 * eps) * scale
    return ctx.atol + max(1e-4 * scale, 2 * eps * scale, 8 * noise)


_HALF = (torch.float16, torch.bfloat16)


def level1(ctx: Ctx, site: Site | None, nh: int | None) -> list[Check]:
    out = [_scores_shape(ctx, site, nh), _merged_shape(ctx)]
    return out


def _scores_shape(ctx: Ctx, site: Site | None, nh: int | None) -> Check:
    if site is None:
        return check("LEVEL_1", SHAPE, Status.SKIPPED, f"scores shape not checked: {NO_SITE}", {"stage": "scores"})
    shape = tuple(site.weights.shape)
    expected = (ctx.B, nh if nh else "Nh", ctx.Tq, ctx.Tk)
    ev = {"stage": "scores", "op": site.op, "module": where_module(ctx, site), "observed": list(shape),
          "expected": list(expected), "heads_from": ctx.heads_source or "the captured weights", "attention_calls": len(ctx.base.sites)}
    if site.dim is not None:
        ev["softmax_dim"] = site.dim
    folded = len(shape) == 3 and nh is not None and shape == (ctx.B * nh, ctx.Tq, ctx.Tk)
    if (len(shape) == 4 and shape[0] == ctx.B and shape[2:] == (ctx.Tq, ctx.Tk) and (nh is None or shape[1] == nh)) or folded:
        note = " (heads folded into the batch axis: [B*Nh, Tq, Tk])" if folded else ""
        return check("LEVEL_1", SHAPE, Status.PASS, f"scores {list(shape)} == [B, Nh, Tq, Tk] = {list(expected)}{note} at "
                     f"{site.op} in {where_module(ctx, site)}", ev)
    return check("LEVEL_1", SHAPE, Status.FAIL, f"scores {list(shape)} at {site.op} in {where_module(ctx, site)}, derived "
                 f"[B, Nh, Tq, Tk] = {list(expected)}", ev, expected=f"scores {list(expected)}", observed=f"{list(shape)}",
                 hint="check the head split: [B, T, E] -> view(B, T, Nh, Dh).transpose(1, 2)")


def _merged_shape(ctx: Ctx) -> Check:
    out = ctx.base.output
    expected = (ctx.B, ctx.Tq, ctx.E) if ctx.batch_first else (ctx.Tq, ctx.B, ctx.E)
    observed = None if out is None else tuple(out.shape)
    ev = {"stage": "merged", "module": ctx.name, "observed": None if observed is None else list(observed),
          "expected": list(expected), "layout": "[B, Tq, E]" if ctx.batch_first else "[Tq, B, E] (batch_first=False)"}
    shown = None if observed is None else list(observed)
    problems = [] if observed == expected else [(observed, expected, f"output {shown} != {list(expected)}")]
    proj = ctx.proj
    if proj is not None and proj.merged is not None and proj.out is not None:
        want = (ctx.B, ctx.Tq, proj.q_out.shape[-1])
        got = tuple(proj.merged.shape)
        ev.update({"merged_heads": proj.merged_from, "merged_heads_observed": list(got), "merged_heads_expected": list(want)})
        if got != want:
            problems.append((got, want, f"merged heads ({proj.merged_from}) {list(got)} != [B, Tq, Nh*Dh] = {list(want)}"))
    if not problems:
        return check("LEVEL_1", SHAPE, Status.PASS, f"merged output {list(observed)} == {ev['layout']} = {list(expected)}", ev)
    said = "; ".join(p[2] for p in problems)
    # the output's shape is the module's own design (a projection to another width, pooling, heads returned unmerged);
    # what the merge did to the values is LEVEL_2's evidence, so a shape alone is not a FAIL
    only_width = all(got is not None and len(got) == len(want) and got[:-1] == want[:-1] for got, want, _ in problems)
    what = "only the last axis differs: a width other than the hidden states' E (or the queries' Nh*Dh)" if only_width \
        else "an output of another shape (pooled over the queries, heads left unmerged)"
    return check("LEVEL_1", SHAPE, Status.WARN, f"{said}; not a FAIL: {what} may be the module's design (the merge "
                 "itself is checked by LEVEL_2), and no argument declares the intended output shape",
                 {**ev, "premise": "output [B, Tq, E]", "premise_confirmed": False}, hint="merge heads back to [B, Tq, E]")


def level3(ctx: Ctx, site: Site | None, w4: torch.Tensor | None, forbidden: torch.Tensor) -> list[Check]:
    if w4 is None:
        reason = NO_SITE if site is None else f"weights {list(site.weights.shape)} are not [B, Nh, Tq, Tk]"
        return [check("LEVEL_3", kind, Status.SKIPPED, f"not checked: {reason}", {}) for kind in (NONFINITE, BLOCKED, ROWS, FORBIDDEN)]
    forb = forbidden.expand_as(w4)
    blocked = forb.all(-1)  # [B, Nh, Tq]
    finite_rows = torch.isfinite(w4).all(-1)
    ev = {"op": site.op, "module": where_module(ctx, site)}
    return [_nonfinite(ctx, w4, blocked, ev), _blocked(ctx, blocked, forb, ev), _rows(ctx, site, w4, blocked, finite_rows, ev),
            _forbidden(ctx, w4, forb, blocked, finite_rows, ev)]


def _nonfinite(ctx: Ctx, w4: torch.Tensor, blocked: torch.Tensor, ev: dict) -> Check:
    bad = ~torch.isfinite(w4)
    out = ctx.base.output
    out_bad = int((~torch.isfinite(out)).sum()) if out is not None and out.is_floating_point() else 0
    ev = {**ev, "nonfinite_weights": int(bad.sum()), "weights": w4.numel(), "nonfinite_outputs": out_bad}
    if not bool(bad.any()) and out_bad == 0:
        return check("LEVEL_3", NONFINITE, Status.PASS, f"all {w4.numel()} weights and the output are finite", ev)
    if bool(bad.any()):
        b, h, t, s = (int(i) for i in torch.unravel_index(bad.flatten().nonzero()[0, 0], bad.shape))
        fully = bool(blocked[b, h, t])
        ev.update({"first": [b, h, t, s], "row_fully_masked": fully})
        why = " - every key of that query is masked: softmax over a row of -inf is NaN" if fully else ""
        msg = f"{int(bad.sum())} non-finite weights; first w[{b}, {h}, {t}, {s}] = {float(w4[b, h, t, s])}{why}"
    else:
        msg = f"weights finite but {out_bad} output values are not"
    return check("LEVEL_3", NONFINITE, Status.FAIL, msg, ev, expected="finite weights and outputs", observed=msg,
                 hint="mask with a large negative number or skip fully padded rows; check for overflow in the scores")


def _blocked(ctx: Ctx, blocked: torch.Tensor, forb: torch.Tensor, ev: dict) -> Check:
    rows = blocked.any(1)  # [B, Tq]
    ev = {**ev, "blocked_queries": int(rows.sum()), "queries": ctx.B * ctx.Tq, "forbidden_pairs": int(forb[:, 0].sum())}
    if not bool(rows.any()):
        return check("LEVEL_3", BLOCKED, Status.PASS, f"every one of {ctx.B * ctx.Tq} queries has at least one allowed key "
                     f"({ev['forbidden_pairs']} forbidden (query, key) pairs)", ev)
    real, why = blocked_is_real(ctx, rows)
    ev["blocked_real_queries"] = int(real.sum())
    b, t = (int(i) for i in torch.unravel_index((real if bool(real.any()) else rows).flatten().nonzero()[0, 0], rows.shape))
    ev["first"] = [b, t]
    msg = f"{int(rows.sum())} queries have every key forbidden; first batch {b}, position {t}"
    if not bool(real.any()):
        return check("LEVEL_3", BLOCKED, Status.WARN, f"{msg}; not a FAIL: {why}",
                     {**ev, "premise": "the blocked queries are real tokens", "premise_confirmed": False})
    return check("LEVEL_3", BLOCKED, Status.FAIL, f"{msg}, a real token as the inputs' padding says ({int(real.sum())} such)",
                 ev, expected="each query has an allowed key", observed=f"batch {b} position {t} fully masked",
                 hint="a fully padded sequence, or padding and causal masks combined so a query sees nothing")


def _rows(ctx: Ctx, site: Site, w4: torch.Tensor, blocked: torch.Tensor, finite_rows: torch.Tensor, ev: dict) -> Check:
    valid = ~blocked & finite_rows
    tol = max(ctx.atol, 4 * torch.finfo(w4.dtype).eps * ctx.Tk)
    sums = w4.double().sum(-1)
    dev = ((sums - 1).abs()).masked_fill(~valid, 0.0)
    ev = {**ev, "rows_checked": int(valid.sum()), "max_abs_row_sum_minus_1": float(dev.max()) if dev.numel() else 0.0,
          "tolerance": tol}
    if site.dim is not None:
        ev["softmax_dim"] = site.dim
    if int(valid.sum()) == 0:
        return check("LEVEL_3", ROWS, Status.SKIPPED, "no query row is finite and unmasked: nothing to sum", ev)
    if float(dev.max()) <= tol:
        return check("LEVEL_3", ROWS, Status.PASS, f"{int(valid.sum())} query rows sum to 1 over keys (max deviation "
                     f"{float(dev.max()):.3g}, tolerance {tol:.3g})", ev)
    b, h, t = (int(i) for i in torch.unravel_index(dev.argmax(), dev.shape))
    cols = w4.double().nan_to_num(0.0).sum(-2)
    over_queries = bool(((cols - 1).abs() <= tol).all())
    ev.update({"worst": [b, h, t], "row_sum": float(sums[b, h, t]), "columns_sum_to_1": over_queries})
    axis = " - the columns sum to 1: softmax taken over the query axis" if over_queries else ""
    msg = f"w[{b}, {h}, {t}, :] sums to {float(sums[b, h, t]):.4g} over keys (|sum - 1| up to {float(dev.max()):.3g} > {tol:.3g})"
    used = renormalised_output(ctx)  # does the module read the weights as they are? (the premise, on the copy)
    if isinstance(used, str):
        return check("LEVEL_3", ROWS, Status.WARN, f"{msg}{axis}; not a FAIL: whether the module reads these weights as "
                     f"they are could not be confirmed ({used})", {**ev, "premise_confirmed": False})
    change, thr = used
    ev.update({"renormalised_output_change": change, "renormalised_threshold": thr})
    if change <= thr:
        return check("LEVEL_3", ROWS, Status.PASS, f"{msg}{axis}, but the module renormalises them over the keys itself: "
                     f"the same weights renormalised over the keys leave its output unchanged (max change {change:.3g} <= "
                     f"{thr:.3g})", ev)
    return check("LEVEL_3", ROWS, Status.FAIL, f"{msg}{axis}; the module reads them as they are (renormalising them over "
                 f"the keys changes its output by {change:.3g} > {thr:.3g})", ev, expected="rows sum to 1 over Tk",
                 observed=f"row sum {float(sums[b, h, t]):.4g}", hint="softmax over the key axis: .softmax(dim=-1)")


def _forbidden(ctx: Ctx, w4: torch.Tensor, forb: torch.Tensor, blocked: torch.Tensor, finite_rows: torch.Tensor,
               ev: dict) -> Check:
    if not bool(forb.any()):
        return check("LEVEL_3", FORBIDDEN, Status.SKIPPED, f"no forbidden (query, key) pair: not causal ({ctx.causal_source}) "
                     "and no padding or attention mask; pass causal=True or key_padding_mask to check masking", ev)
    rows = (~blocked & finite_rows)[..., None] & forb
    leak = (w4.double().abs() * rows).nan_to_num(0.0)
    n = int((leak > 0).sum())
    ev = {**ev, "forbidden_weights_checked": int(rows.sum()), "nonzero": n, "max_forbidden_weight": float(leak.max()),
          "causal": bool(ctx.causal), "causal_from": ctx.causal_source}
    if n == 0:
        return check("LEVEL_3", FORBIDDEN, Status.PASS, f"all {int(rows.sum())} forbidden weights are exactly 0", ev)
    declared = leak * ~future_pairs(ctx, leak.device)  # what padding / masks forbid, and a confirmed causality
    if not bool((declared > 0).any()):
        return unconfirmed_future("LEVEL_3", FORBIDDEN, f"{n} future weights are nonzero (largest {float(leak.max()):.4g})",
                                  ev, ctx)
    leak, n = declared, int((declared > 0).sum())
    b, h, t, s = (int(i) for i in torch.unravel_index(leak.argmax(), leak.shape))
    what = ("future key (causal)" if ctx.causal and s > t else
            "padding key" if ctx.padding is not None and bool(ctx.padding[b, s]) else "masked key")
    ev.update({"first": [b, h, t, s], "forbidden_by": what})
    return check("LEVEL_3", FORBIDDEN, Status.FAIL, f"{n} forbidden weights are nonzero; largest w[{b}, {h}, {t}, {s}] = "
                 f"{float(w4[b, h, t, s]):.4g} ({what})", ev, expected=f"w[{b}, {h}, {t}, {s}] == 0 ({what})",
                 observed=f"{float(w4[b, h, t, s]):.4g}", hint="the mask lets a forbidden key through (triu offset? mask not applied?)")


def reference(ctx: Ctx, site: Site | None, nh: int | None, forbidden: torch.Tensor) -> Check:
    """Agreement with F.scaled_dot_product_attention on the module's own q/k/v (default scale 1/sqrt(Dh))."""
    if site is None:
        return check("LEVEL_4", REFERENCE, Status.SKIPPED, f"reference not computed: {NO_SITE}", {})
    if site.op.endswith("multi_head_attention_forward"):
        return _ref_mha(ctx, site)
    by_design = _position_bias(ctx)
    if by_design:
        return check("LEVEL_4", REFERENCE, Status.SKIPPED, f"reference not computed: {by_design}", {"module_type": ctx.name})
    if ctx.proj is not None and ctx.proj.merged is not None and nh:
        return _ref_proj(ctx, nh, forbidden)
    q = site.args.get("query")
    if site.op.endswith("scaled_dot_product_attention") and isinstance(q, torch.Tensor) and q.dim() == 4:
        a = site.args
        k, v = repeat_heads(a["key"], q.size(1)), repeat_heads(a["value"], q.size(1))
        ref = _sdpa(q, k, v, ~forbidden, scale=ctx.scale)
        alts = _alternatives(lambda s: _sdpa(q, k, v, ~forbidden, scale=s).transpose(1, 2), q.size(-1), ctx.E, ctx.scale)
        lowp = (F.scaled_dot_product_attention(q, k, v, attn_mask=~forbidden, scale=ctx.scale).transpose(1, 2)
                if q.dtype in _HALF else None)
        ev = {"from": f"the q/k/v passed to {site.op} in {where_module(ctx, site)}", "scale_passed": a.get("scale"),
              **_intended(ctx, q.size(-1))}
        return _compare(ctx, site.output.transpose(1, 2), ref.transpose(1, 2), ev, q.dtype, forbidden, alts, lowp)
    reason = ctx.proj_reason or ("number of heads unknown; pass num_heads" if not nh else
                                 ctx.proj.merged_from if ctx.proj is not None else "projections not identified")
    return check("LEVEL_4", REFERENCE, Status.SKIPPED, f"reference not computed: {reason}", {})


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=scale)


def _ref_proj(ctx: Ctx, nh: int, forbidden: torch.Tensor) -> Check:
    proj = ctx.proj
    dh = proj.q_out.shape[-1] // nh
    if dh == 0 or proj.q_out.shape[-1] % nh or proj.k_out.shape[-1] % dh or proj.v_out.shape[-1] % dh:
        return check("LEVEL_4", REFERENCE, Status.SKIPPED, f"reference not computed: q/k/v widths {proj.q_out.shape[-1]}/"
                     f"{proj.k_out.shape[-1]}/{proj.v_out.shape[-1]} do not split into {nh} heads", {})
    q, k, v = (t.double().reshape(ctx.B, t.shape[1], -1, dh).transpose(1, 2) for t in (proj.q_out, proj.k_out, proj.v_out))
    rope, why = rotary(ctx)
    if why:
        return check("LEVEL_4", REFERENCE, Status.SKIPPED, f"reference not computed: {why}", {})
    if rope is not None:
        q, k = rope(q, k)
    k, v = repeat_heads(k, nh), repeat_heads(v, nh)
    ev = {"from": f"q/k/v = outputs of {proj.q}, {proj.k}, {proj.v}" + (" (rotary position embeddings applied)" if rope else ""),
          "compared_with": proj.merged_from, **_intended(ctx, dh)}
    ref = _sdpa(q, k, v, ~forbidden, scale=ctx.scale).transpose(1, 2).reshape(ctx.B, ctx.Tq, nh * dh)
    alts = _alternatives(lambda s: _sdpa(q, k, v, ~forbidden, scale=s).transpose(1, 2).reshape(ctx.B, ctx.Tq, nh * dh),
                         dh, ctx.E, ctx.scale)
    dt = proj.q_out.dtype
    lowp = None
    if dt in _HALF:  # the same reference in the module's precision: how far rounding alone moves it
        lowp = F.scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), attn_mask=~forbidden, scale=ctx.scale)
        lowp = lowp.transpose(1, 2).reshape(ctx.B, ctx.Tq, nh * dh)
    return _compare(ctx, proj.merged, ref, ev, dt, forbidden, alts, lowp)


def _ref_mha(ctx: Ctx, site: Site) -> Check:
    a = site.args
    if a.get("bias_k") is not None or a.get("add_zero_attn") or a.get("static_k") is not None:
        return check("LEVEL_4", REFERENCE, Status.SKIPPED, "reference not computed: bias_k/bias_v/add_zero_attn/static_k", {})
    e, nh = int(a["embed_dim_to_check"]), int(a["num_heads"])
    if a["use_separate_proj_weight"]:
        ws = (a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"])
    else:
        ws = a["in_proj_weight"].chunk(3)
    bs = a["in_proj_bias"].chunk(3) if a.get("in_proj_bias") is not None else (None,) * 3
    dh = e // nh
    q, k, v = (F.linear(x.double(), w.double(), None if b is None else b.double())
               for x, w, b in zip((a["query"], a["key"], a["value"]), ws, bs))
    q, k, v = (t.reshape(t.shape[0], ctx.B, nh, dh).permute(1, 2, 0, 3) for t in (q, k, v))  # [B, Nh, T, Dh]
    mask = torch.zeros(ctx.B, nh, q.shape[2], k.shape[2], dtype=torch.float64, device=q.device)
    am, kpm = a.get("attn_mask"), a.get("key_padding_mask")
    if isinstance(am, torch.Tensor):
        am = am.view(ctx.B, nh, *am.shape[1:]) if am.dim() == 3 else am
        mask = mask.masked_fill(am, float("-inf")) if am.dtype == torch.bool else mask + am.double()
    elif a.get("is_causal"):
        mask = mask.masked_fill(torch.ones(mask.shape[-2:], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if isinstance(kpm, torch.Tensor):
        kpm = kpm[:, None, None, :]
        mask = mask.masked_fill(kpm, float("-inf")) if kpm.dtype == torch.bool else mask + kpm.double()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    merged = ref.permute(2, 0, 1, 3).reshape(q.shape[2], ctx.B, e)
    out_b = a.get("out_proj_bias")
    out = F.linear(merged, a["out_proj_weight"].double(), None if out_b is None else out_b.double())
    ev = {"from": f"in_proj/out_proj weights passed to F.multi_head_attention_forward in {where_module(ctx, site)}",
          "compared_with": "its output", "scale_reference": 1 / math.sqrt(dh)}
    return _compare(ctx, site.output.transpose(0, 1), out.transpose(0, 1), ev, a["query"].dtype, torch.isneginf(mask))


def _position_bias(ctx: Ctx) -> str:
    """Why the 1/sqrt(Dh) reference does not apply by design: T5-style attention (a learned relative position bias added
    to unscaled scores; T5 folds the scale into its weight initialisation), read from the module's type and attributes."""
    module = ctx.module
    if module is None:
        return ""
    for path, sub in module.named_modules():
        if hasattr(sub, "has_relative_attention_bias") or hasattr(sub, "relative_attention_bias"):
            return (f"{type(sub).__name__}{' at ' + path if path else ''} adds a relative position bias to its scores and, "
                    "by design (T5), does not scale them by 1/sqrt(Dh): the scale and the bias are not checked")
    b = bound(ctx)
    if b is not None and isinstance(b.arguments.get("position_bias"), torch.Tensor):
        return "the module adds the position_bias it is given to its scores: the 1/sqrt(Dh) reference does not apply"
    return ""


def _intended(ctx: Ctx, dh: int) -> dict:
    """The score scale the reference uses: ``scale=`` when declared, else 1/sqrt(Dh)."""
    return {"scale_reference": ctx.scale if ctx.scale is not None else 1 / math.sqrt(dh),
            "scale_declared": ctx.scale is not None}


def _alternatives(fn: Callable[[float], torch.Tensor], dh: int, e: int,
                  intended: float | None = None) -> list[tuple[str, float, torch.Tensor]]:
    """The reference with the scales a bug puts in place of the intended one (1/sqrt(Dh) unless ``scale=`` declares
    another): none (1), 1/Dh, 1/sqrt(E), 1/E, and 1/sqrt(Dh) when another scale is declared."""
    want = 1 / math.sqrt(dh) if intended is None else intended
    candidates = [("1", 1.0), ("1/Dh", 1 / dh), ("1/sqrt(E)", 1 / math.sqrt(e)), ("1/E", 1 / e)]
    candidates += [("1/sqrt(Dh)", 1 / math.sqrt(dh))] if intended is not None else []
    out: list[tuple[str, float, torch.Tensor]] = []
    for label, value in candidates:
        if not any(math.isclose(value, v) for _, v, _ in out) and not math.isclose(value, want):
            out.append((label, value, fn(value)))
    return out


def _compare(ctx: Ctx, actual: torch.Tensor, ref: torch.Tensor, ev: dict, dtype: torch.dtype, forbidden: torch.Tensor,
             alts: list[tuple[str, float, torch.Tensor]] = (), lowp: torch.Tensor | None = None) -> Check:
    """actual and ref as [B, Tq, ...]; fully masked queries and rows where the module is non-finite are left out."""
    a, r = actual.double(), ref.double()
    blocked = forbidden.all(-1).any(1)  # [B, Tq]
    valid = ~blocked & torch.isfinite(r).flatten(2).all(-1) & torch.isfinite(a).flatten(2).all(-1)
    if not bool(valid.any()):
        return check("LEVEL_4", REFERENCE, Status.SKIPPED, "reference not informative: no unmasked query row with finite values", ev)
    scale = float(r[valid].abs().max())
    noise = None if lowp is None else float((lowp.double()[valid] - r[valid]).abs().nan_to_num(0.0).max())
    tol = _tolerance(ctx, scale, dtype, noise)
    err = float((a[valid] - r[valid]).abs().max())
    ev = {**ev, "max_abs_error": err, "tolerance": tol, "reference_max_abs": scale, "rows_compared": int(valid.sum())}
    errors = {label: float((a[valid] - t.double()[valid]).abs().max()) for label, _, t in alts}
    if errors:
        ev["max_abs_error_vs_scale"] = errors
    if "1" in errors:
        ev["max_abs_error_vs_unscaled"] = errors["1"]
    if err <= tol:
        return check("LEVEL_4", REFERENCE, Status.PASS, f"agrees with F.scaled_dot_product_attention on the same q/k/v (max "
                     f"error {err:.3g}, tolerance {tol:.3g})", ev)
    fit = next(((label, value) for label, value, _ in alts if errors[label] <= tol), None)
    want = ev.get("scale_reference")
    if fit is not None:
        ev["scale_fit"] = {"scale": fit[0], "value": fit[1]}
    meant = "the declared scale=" if ev.get("scale_declared") else "1/sqrt(Dh)"
    said = ("" if fit is None else f"; it matches the reference with scale 1: missing {meant}" if fit[0] == "1" else
            f"; it matches the reference with scale {fit[0]} = {fit[1]:.4g} instead of {meant} = {want:.4g}")
    hint = ("the scores are not scaled by 1/sqrt(Dh)" if fit is not None and fit[0] == "1" else
            f"the scores are scaled by {fit[0]}: use 1/sqrt(Dh) (head_dim ** -0.5)" if fit is not None else
            "compare the score scale (1/sqrt(Dh)), the mask and the softmax axis with the reference")
    if fit is None:  # no slip of the scale explains it: another score function may be the design
        return check("LEVEL_4", REFERENCE, Status.WARN, f"differs from F.scaled_dot_product_attention on the same q/k/v by "
                     f"{err:.3g} (tolerance {tol:.3g}); not a FAIL: no other score scale explains it, and a different "
                     "score function may be the design (QK-norm or cosine attention, an ALiBi or other position bias, a "
                     "gate on the heads); no argument declares the intended one (a mask that lets forbidden keys through "
                     "is LEVEL_3's finding)",
                     {**ev, "premise": "softmax(q k^T / sqrt(Dh) + mask) v", "premise_confirmed": False}, hint=hint)
    return check("LEVEL_4", REFERENCE, Status.FAIL, f"differs from F.scaled_dot_product_attention on the same q/k/v by {err:.3g} "
                 f"(tolerance {tol:.3g}){said}", ev, expected=f"within {tol:.3g} of the reference", observed=f"max error {err:.3g}",
                 hint=hint)
