"""Behaviour probes for :func:`~firstdiv.instruments.attention_check.attention_check`: forward passes on the copy with
one input position perturbed (batch isolation, time isolation with pinned weights, causality) and with the value
projection replaced by distinct tags (merge(split(x)) == x). Every probe returns a Check; none raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ...report import Status
from .._core.checks import Check, check
from ._capture import Run, Site, Tags, capture, repeat_heads
from ._setup import Ctx, unconfirmed_future

AXIS = "attention.axis_semantics"
CAUSALITY = "attention.causality"


def fresh(obj: Any, memo: dict[int, Any] | None = None) -> Any:
    """Clone every tensor in args/kwargs (tuples, lists, dicts) keeping aliasing (q is k is v stays so)."""
    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = obj.detach().clone()
        return memo[id(obj)]
    if isinstance(obj, (tuple, list)):
        return type(obj)(fresh(o, memo) for o in obj)
    if isinstance(obj, dict):
        return {k: fresh(v, memo) for k, v in obj.items()}
    return obj


def run(ctx: Ctx, hidden: torch.Tensor | None = None, **options: Any) -> Run:
    """One forward pass of the copy on fresh inputs; ``hidden`` replaces the hidden states (and every input equal to them)."""
    memo: dict[int, Any] = {}
    if hidden is not None:
        for t in [*ctx.args, *ctx.kwargs.values()]:
            if isinstance(t, torch.Tensor) and (t is ctx.hidden or (t.shape == ctx.hidden.shape and torch.equal(t, ctx.hidden))):
                memo[id(t)] = hidden
    args, kwargs = fresh((ctx.args, ctx.kwargs), memo)
    options.setdefault("neutral", ctx.neutral)
    return capture(ctx.fn, args, kwargs, ctx.Tq, ctx.Tk, **options)


def positions(ctx: Ctx) -> list[int]:
    return sorted({p for p in (1, ctx.Tq // 2, ctx.Tq - 1) if 1 <= p < ctx.Tq})


def perturb(ctx: Ctx, p: int, b: int = 0) -> torch.Tensor:
    """The hidden states with position ``p`` of batch element ``b`` moved by one standard deviation (seeded noise)."""
    g = torch.Generator().manual_seed(1000 + p)
    x = ctx.hidden.detach().clone()
    scale = max(float(x.float().std()) if x.numel() > 1 else 1.0, 1e-3)
    delta = (torch.randn(ctx.E, generator=g, dtype=torch.float64) * scale).to(x.dtype).to(x.device)
    index = (b, p) if ctx.batch_first else (p, b)
    x[index] = x[index] + delta
    return x


def _bt(ctx: Ctx, out: torch.Tensor | None) -> torch.Tensor | None:
    if out is None or out.dim() < 2:
        return None
    view = ctx.bf(out)
    return view if tuple(view.shape[:2]) == (ctx.B, ctx.Tq) else None


def changes(ctx: Ctx, base: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Largest absolute change per (batch, position), [B, Tq] float64; non-finite in both counts as unchanged."""
    a, b = _bt(ctx, base).double(), _bt(ctx, new).double()
    both = ~torch.isfinite(a) & ~torch.isfinite(b)
    d = torch.where(both, torch.zeros_like(a), (b - a).abs().nan_to_num(nan=float("inf")))
    return d.flatten(2).amax(-1)


def threshold(ctx: Ctx, base: torch.Tensor) -> float:
    finite = base[torch.isfinite(base)]
    return ctx.atol + 1e-5 * (float(finite.abs().max()) if finite.numel() else 0.0)


@dataclass
class Perturbations:
    """Per perturbed position p: change [B, Tq] unpinned and with pinned weights (None when that run failed)."""

    free: dict[int, torch.Tensor]
    pinned: dict[int, torch.Tensor]
    pin_note: str
    error: str = ""


def perturbations(ctx: Ctx) -> Perturbations | str:
    """Runs for batch isolation, time isolation and causality; a reason string when they cannot run."""
    base = ctx.base
    if ctx.Tq < 2:
        return "Tq = 1: no other position to perturb"
    if _bt(ctx, base.output) is None:
        return (f"the output {tuple(base.output.shape) if base.output is not None else None} has no "
                f"[{'B, Tq' if ctx.batch_first else 'Tq, B'}, ...] axes to compare per position")
    pinnable = bool(base.sites) and not any(s.op.endswith("multi_head_attention_forward") for s in base.sites)
    pins = [s.weights for s in base.sites] if pinnable else None
    note = ("weights pinned to the unperturbed run's" if pinnable else
            "weights not pinned (computed inside F.multi_head_attention_forward or not captured)")
    out = Perturbations({}, {}, note)
    pinned_base = run(ctx, pinned=pins) if pins is not None else base  # pinned SDPA is a plain matmul: compare like with like
    if pinned_base.error or pinned_base.output is None or _bt(ctx, pinned_base.output) is None:
        out.error = f"the module raised {pinned_base.error} with pinned weights"
        return out
    for p in positions(ctx):
        x = perturb(ctx, p)
        free = run(ctx, x)
        if free.error or free.output is None:
            out.error = f"the module raised {free.error} on the perturbed inputs (position {p})"
            return out
        out.free[p] = changes(ctx, base.output, free.output)
        if pins is not None:
            fixed = run(ctx, x, pinned=pins)
            if fixed.error or fixed.output is None:
                out.error = f"the module raised {fixed.error} with pinned weights (position {p})"
                return out
            out.pinned[p] = changes(ctx, pinned_base.output, fixed.output)
        else:
            out.pinned[p] = out.free[p]
    return out


def batch_isolation(ctx: Ctx, pert: Perturbations | str) -> Check:
    if isinstance(pert, str) or pert.error or ctx.B < 2:
        reason = "B = 1: needs two batch elements" if ctx.B < 2 else pert if isinstance(pert, str) else pert.error
        return check("LEVEL_2", AXIS, Status.SKIPPED, f"batch isolation not checked: {reason}", {"probe": "batch_isolation"})
    thr = threshold(ctx, ctx.base.output)
    worst = max(((p, c[1:].max()) for p, c in pert.free.items()), key=lambda pc: float(pc[1]))
    p, change = worst[0], float(worst[1])
    ev = {"probe": "batch_isolation", "perturbed": f"batch 0, position {p}", "max_change_other_batches": change,
          "threshold": thr, "positions_probed": list(pert.free)}
    if change > thr:
        b, t = divmod(int(pert.free[p][1:].argmax()), ctx.Tq)
        ev["first_changed"] = [b + 1, t]
        return check("LEVEL_2", AXIS, Status.FAIL, f"perturbing batch 0 position {p} changed batch {b + 1} position {t} by "
                     f"{change:.3g} (> {thr:.3g}): heads/batch mixed", ev, expected="other batch elements unchanged",
                     observed=f"batch {b + 1} position {t} changed by {change:.3g}",
                     hint="a reshape/view that folds heads into the batch axis in the wrong order")
    return check("LEVEL_2", AXIS, Status.PASS, f"batch elements independent: perturbing batch 0 changed the others by at "
                 f"most {change:.3g} (threshold {thr:.3g})", ev)


def time_isolation(ctx: Ctx, pert: Perturbations | str, w4: torch.Tensor | None) -> Check:
    """With pinned weights, a perturbation at p may reach position t only through a nonzero weight w[0, h, t, p]."""
    reason = pert if isinstance(pert, str) else pert.error
    if not reason and not ctx.self_attention:
        reason = "cross-attention: the keys do not come from the perturbed hidden states"
    elif not reason and w4 is None:
        reason = "no attention weights captured"
    elif not reason and len(ctx.base.sites) != 1:
        reason = f"{len(ctx.base.sites)} attention computations in one forward: dependencies compound; pass one attention module"
    if reason:
        return check("LEVEL_2", AXIS, Status.SKIPPED, f"time isolation not checked: {reason}", {"probe": "time_isolation"})
    thr = threshold(ctx, ctx.base.output)
    informative, worst = 0, (0.0, -1, -1)
    for p, change in pert.pinned.items():
        silent = (w4[0, :, :, p] == 0).all(dim=0)  # [Tq]: no head of query t attends to key p
        silent[p] = False
        informative += int(silent.sum())
        if silent.any():
            c = change[0].masked_fill(~silent, 0.0)
            if float(c.max()) > worst[0]:
                worst = (float(c.max()), p, int(c.argmax()))
    ev = {"probe": "time_isolation", "pinning": pert.pin_note, "informative_pairs": informative, "threshold": thr}
    if informative == 0:
        return check("LEVEL_2", AXIS, Status.SKIPPED, "time isolation not informative: every query attends to every probed key "
                     "(no zero weight to test against)", ev)
    change, p, t = worst
    ev.update({"max_change_where_weight_zero": change})
    if change > thr:
        ev.update({"perturbed_position": p, "changed_position": t})
        return check("LEVEL_2", AXIS, Status.FAIL, f"perturbing position {p} changed position {t} by {change:.3g} although no "
                     f"head of query {t} attends to key {p} ({pert.pin_note} weights): heads mixed with time", ev,
                     expected=f"position {t} unchanged (w[0, :, {t}, {p}] = 0)", observed=f"changed by {change:.3g}",
                     hint="heads merged with .view/.reshape without transposing [B, Nh, T, Dh] back to [B, T, Nh, Dh]")
    return check("LEVEL_2", AXIS, Status.PASS, f"values move only along attention weights: {informative} (query, key) pairs "
                 f"with zero weight, max change {change:.3g} (threshold {thr:.3g})", ev)


def causality(ctx: Ctx, pert: Perturbations | str) -> Check:
    if not ctx.causal:
        return check("LEVEL_4", CAUSALITY, Status.SKIPPED, f"not causal ({ctx.causal_source}): the future-token check applies "
                     "to causal attention; pass causal=True if it is meant to be causal", {"probe": "future_token"})
    reason = pert if isinstance(pert, str) else pert.error
    reason = reason or ("" if ctx.self_attention else "cross-attention: the keys do not come from the perturbed hidden states")
    if reason:
        return check("LEVEL_4", CAUSALITY, Status.SKIPPED, f"future-token check not run: {reason}", {"probe": "future_token"})
    thr = threshold(ctx, ctx.base.output)
    worst = (0.0, -1, -1)
    for p, change in pert.free.items():
        c = change[0, :p]
        if c.numel() and float(c.max()) > worst[0]:
            worst = (float(c.max()), p, int(c.argmax()))
    change, p, t = worst
    ev = {"probe": "future_token", "positions_probed": list(pert.free), "max_prefix_change": change, "threshold": thr}
    if change > thr:
        ev.update({"changed_token": p, "earlier_position": t})
        if ctx.causal_unconfirmed:
            return unconfirmed_future("LEVEL_4", CAUSALITY, f"changing token {p} changed the output at earlier position "
                                      f"{t} by {change:.3g} (> {thr:.3g})", ev, ctx)
        return check("LEVEL_4", CAUSALITY, Status.FAIL, f"changing token {p} changed the output at earlier position {t} by "
                     f"{change:.3g} (> {thr:.3g})", ev, expected=f"outputs before position {p} unchanged",
                     observed=f"position {t} changed by {change:.3g}", hint="a future key is visible: check the causal mask")
    return check("LEVEL_4", CAUSALITY, Status.PASS, f"changing tokens {list(pert.free)} left every earlier output unchanged "
                 f"(max change {change:.3g}, threshold {thr:.3g})", ev)


def tags_for(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A seeded permutation of arange, centred and scaled: every value distinct, so a misplaced one is visible."""
    n = 1
    for s in shape:
        n *= s
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(6)).double()
    return ((perm - (n - 1) / 2) / n).view(shape).to(device)


def merge_probe(ctx: Ctx, nh: int | None) -> Check:
    site = ctx.base.sites[0] if ctx.base.sites else None
    if site is not None and site.op.endswith("multi_head_attention_forward"):
        return _merge_mha(ctx, site)
    if ctx.proj is None or nh is None or ctx.proj.merged is None:
        reason = ctx.proj_reason or ("no attention weights captured" if site is None else
                                     "number of heads unknown; pass num_heads" if nh is None else ctx.proj.merged_from)
        return check("LEVEL_2", AXIS, Status.SKIPPED, f"merge(split(x)) probe not run: {reason}", {"probe": "merge_split"})
    proj = ctx.proj
    start, stop = proj.v_span
    values = tags_for(tuple(_own(ctx, proj.v_out).shape), ctx.hidden.device)
    tagged = run(ctx, tags=Tags(proj.v, start, stop, values))
    if tagged.error or not tagged.sites:
        return check("LEVEL_2", AXIS, Status.SKIPPED, f"merge(split(x)) probe not run: the module raised {tagged.error or 'nothing'} "
                     "with tagged values", {"probe": "merge_split"})
    merged = _merged(ctx, tagged)
    dh = proj.q_out.shape[-1] // nh
    w = _w4(tagged.sites[0].weights, ctx.B, nh)
    if merged is None or w is None or dh == 0 or values.shape[-1] % dh or nh % (values.shape[-1] // dh):
        return check("LEVEL_2", AXIS, Status.SKIPPED, "merge(split(x)) probe not run: merged tensor, weights or head sizes "
                     f"not readable (q width {proj.q_out.shape[-1]}, v width {values.shape[-1]}, Nh {nh})", {"probe": "merge_split"})
    v = ctx.bf(values.to(proj.v_out.dtype)).reshape(ctx.B, ctx.Tk, -1, dh).transpose(1, 2)  # as the module sees them
    expected = (w.double() @ repeat_heads(v.double(), nh)).transpose(1, 2).reshape(ctx.B, ctx.Tq, nh * dh)
    return _compare_merge(ctx, merged, expected, w, dh, f"{proj.v} output replaced by tags; merged = {proj.merged_from}")


def _own(ctx: Ctx, bf_tensor: torch.Tensor) -> torch.Tensor:
    return bf_tensor if ctx.batch_first else bf_tensor.transpose(0, 1)


def _merged(ctx: Ctx, tagged: Run) -> torch.Tensor | None:
    site = tagged.sites[0]
    if ctx.proj.out is None:
        return ctx.bf(tagged.output) if tagged.output is not None else None
    call = next((c for c in tagged.calls if c.seq > site.seq and c.path == ctx.proj.out), None)
    return None if call is None else ctx.bf(call.input)


def _w4(weights: torch.Tensor, B: int, nh: int) -> torch.Tensor | None:
    if weights.dim() == 4 and weights.shape[:2] == (B, nh):
        return weights
    if weights.dim() == 3 and weights.shape[0] == B * nh:
        return weights.view(B, nh, *weights.shape[1:])
    return None


def _merge_mha(ctx: Ctx, site: Site) -> Check:
    a = dict(site.args)
    if a.get("bias_k") is not None or a.get("add_zero_attn") or a.get("static_v") is not None:
        return check("LEVEL_2", AXIS, Status.SKIPPED, "merge(split(x)) probe not run: bias_k/bias_v/add_zero_attn/static_v "
                     "change the keys", {"probe": "merge_split"})
    e, nh = int(a["embed_dim_to_check"]), int(a["num_heads"])
    value = a["value"]
    if value.shape[-1] != e:
        return check("LEVEL_2", AXIS, Status.SKIPPED, f"merge(split(x)) probe not run: vdim {value.shape[-1]} != embed_dim {e}",
                     {"probe": "merge_split"})
    eye = torch.eye(e, dtype=value.dtype, device=value.device)
    tags = tags_for(tuple(value.shape), value.device).to(value.dtype)
    if a["use_separate_proj_weight"]:
        a["v_proj_weight"] = eye
    else:
        a["in_proj_weight"] = torch.cat([a["in_proj_weight"][: 2 * e], eye])
    if a.get("in_proj_bias") is not None:
        a["in_proj_bias"] = torch.cat([a["in_proj_bias"][: 2 * e], torch.zeros(e, dtype=value.dtype, device=value.device)])
    a.update(value=tags, out_proj_weight=eye, out_proj_bias=None, need_weights=True, average_attn_weights=False,
             training=False, dropout_p=0.0)
    try:
        with torch.no_grad():
            out, w = F.multi_head_attention_forward(**a)
    except Exception as exc:  # noqa: BLE001 - torch on the user's arguments
        return check("LEVEL_2", AXIS, Status.SKIPPED, f"merge(split(x)) probe not run: {type(exc).__name__}: {exc}",
                     {"probe": "merge_split"})
    dh = e // nh
    v = tags.transpose(0, 1).reshape(ctx.B, -1, nh, dh).transpose(1, 2)  # [Tk, B, E] -> [B, Nh, Tk, Dh]
    expected = (w.double() @ v.double()).transpose(1, 2).reshape(ctx.B, ctx.Tq, e)
    return _compare_merge(ctx, out.transpose(0, 1), expected, w, dh,
                          "value = tags, v and out projections = identity in F.multi_head_attention_forward")


def _compare_merge(ctx: Ctx, actual: torch.Tensor, expected: torch.Tensor, w: torch.Tensor, dh: int, how: str) -> Check:
    valid = torch.isfinite(w).all(-1).all(1)  # [B, Tq]: rows whose weights are finite in every head
    a, e = actual.double(), expected
    diff = (a - e).abs().masked_fill(~valid[..., None], 0.0).nan_to_num(nan=float("inf"))
    scale = float(e[valid].abs().max()) if bool(valid.any()) else 0.0
    tol = ctx.atol + max(1e-4, 4 * torch.finfo(actual.dtype).eps) * scale
    err = float(diff.max()) if diff.numel() else 0.0
    ev = {"probe": "merge_split", "how": how, "max_abs_error": err, "tolerance": tol, "rows_compared": int(valid.sum())}
    if int(valid.sum()) == 0:
        return check("LEVEL_2", AXIS, Status.SKIPPED, "merge(split(x)) probe not informative: no query row has finite weights", ev)
    if err <= tol:
        return check("LEVEL_2", AXIS, Status.PASS, f"merge(split(x)) == x: merged heads hold weights @ tagged values at "
                     f"[b, t, h*Dh:(h+1)*Dh] (max error {err:.3g}, tolerance {tol:.3g})", ev)
    b, t, c = (int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    found = (e - a[b, t, c]).abs().argmin()
    fb, ft, fc = (int(i) for i in torch.unravel_index(found, e.shape))
    ev.update({"first_wrong": [b, t, c], "head": c // dh, "value_belongs_to": {"batch": fb, "position": ft, "head": fc // dh}})
    mixed = "batch" if fb != b else "time" if ft != t else "other heads" if fc // dh != c // dh else ""
    hint = {"time": "merge heads with x.transpose(1, 2).reshape(B, T, E), not x.view(B, T, E)",
            "batch": "split heads with x.view(B, T, Nh, Dh).transpose(1, 2) and merge back the same way; never fold Nh "
                     "into the batch axis in another order",
            "other heads": "heads are permuted between split and merge"}.get(mixed, "the value path changes values")
    origin = (f"that value belongs to batch {fb}, position {ft}, head {fc // dh}: heads mixed with {mixed}" if mixed else
              "no other (batch, position, head) holds it: the values are wrong in place, not moved")
    return check("LEVEL_2", AXIS, Status.FAIL, f"merged[{b}, {t}, {c}] (head {c // dh}) holds {float(a[b, t, c]):.4g}, expected "
                 f"{float(e[b, t, c]):.4g}; {origin}", ev, expected=f"merged[{b}, {t}, {c}] = {float(e[b, t, c]):.4g}",
                 observed=f"{float(a[b, t, c]):.4g}", hint=hint)
