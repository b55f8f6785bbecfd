"""Attention, four levels of correctness (appendix section 10): derive the axes, execute, verify the invariant each
stage introduces, and report the earliest level that fails.

``attention_check(attn, inputs)`` runs an attention module (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``,
Hugging Face ``GPT2Attention``/``BertSelfAttention``/``BertAttention``/``LlamaAttention``, a hand-written module) or a
function on a deep copy in eval mode, and watches it without editing its code:

- a ``TorchFunctionMode`` captures the attention weights wherever they are made: a top-level ``torch.softmax`` /
  ``F.softmax`` / ``Tensor.softmax`` whose output ends in ``[..., Tq, Tk]`` (the weights as the module made them, with
  the softmax's ``dim``), an ``F.scaled_dot_product_attention`` call (weights recomputed from its own q, k, mask and
  scale) or an ``F.multi_head_attention_forward`` call (re-run with ``need_weights=True, average_attn_weights=False``;
  the caller gets what it asked for);
- module hooks record every linear-like call (``nn.Linear``, HF ``Conv1D``) in order. The q/k/v projections are the
  last calls before the weights of modules named ``qkv``/``c_attn`` (fused, split in thirds) or ``q_proj|query|q``,
  ``k_proj|key|k``, ``v_proj|value|v``; the merged heads are the input of the first linear-like module called after the
  weights (``proj``, ``c_proj``, ``o_proj``, ``out_proj``, BERT's ``output.dense``), else the module's output.

LEVEL_1 SHAPE: the captured weights are ``[B, Nh, Tq, Tk]`` (``[B*Nh, Tq, Tk]`` accepted) with B, Tq, Tk from the inputs
and Nh from ``num_heads`` or the module (``num_heads``, ``num_attention_heads``, ``n_head`` ... or its config); the
output is ``[B, Tq, E]`` (``[Tq, B, E]`` for ``batch_first=False``) and the merged heads ``[B, Tq, Nh*Dh]``.

LEVEL_2 AXIS SEMANTICS, three probes that do not depend on the mask, the softmax axis or the scale being right (those
belong to later levels), because they use the weights the module itself produced:

- merge_split: the value projection's output is replaced (forward hook on the copy) by tags, a seeded permutation of
  ``arange`` so every value is distinct; the merged heads must equal ``weights @ split(tags)`` placed at
  ``[b, t, h*Dh:(h+1)*Dh]``, i.e. merge(split(x)) == x seen through the weights. For ``nn.MultiheadAttention`` the
  same probe re-runs ``F.multi_head_attention_forward`` with value = tags and identity v/out projections. A wrong merge
  (``.view(B, T, E)`` of ``[B, Nh, T, Dh]``) is reported with where the misplaced value came from (batch, position,
  head).
- batch_isolation: perturb one position of batch element 0; no other batch element's output may change.
- time_isolation: perturb position p with the weights pinned to the unperturbed run's (the mode hands back the recorded
  softmax output, or ``pinned @ v`` for SDPA); the perturbation can then reach position t only through a nonzero weight
  ``w[0, h, t, p]``, so a change at a t that no head lets see p means values moved across time by a reshape. Pinning
  keeps a wrong softmax axis (whose normalizer sees later queries) out of this level.

LEVEL_3 NUMERICAL INVARIANTS on the captured weights: finite (and a finite output), no query with every key forbidden,
rows sum to 1 over keys (``|sum - 1| <= max(atol, 4*eps*Tk)``; the finding says whether columns sum to 1 instead), and
forbidden weights (causal future, padding, masks the inputs carried) exactly 0.

LEVEL_4 BEHAVIOUR: with causal attention, changing a future token leaves every earlier output unchanged (threshold
``atol + 1e-5 * max|output|``); and the merged heads agree with ``F.scaled_dot_product_attention`` (default scale
``1/sqrt(Dh)``, the intended mask) on the module's own q/k/v projections, with rotary embeddings applied when the
inputs carry ``position_embeddings`` and the module's source defines ``apply_rotary_pos_emb`` (Llama) and grouped
key/value heads repeated; for ``nn.MultiheadAttention`` from the weights passed to ``F.multi_head_attention_forward``;
for a bare ``F.scaled_dot_product_attention`` call from its own q/k/v. Tolerance ``atol + max(1e-4, 32*eps) * max|ref|``.
The finding also gives the error against the unscaled (scale 1) reference, which names a missing 1/sqrt(Dh).

Causality: ``causal`` if given; else an ``is_causal``/``causal`` attribute of the module or a submodule; else a causal
pattern in a mask the inputs carry (HF ``attention_mask``, the ``attn_mask`` given to ``nn.MultiheadAttention``); else
the captured weights (most weights above the diagonal exactly 0 -> causal). ``details['causal_from']`` says which.
Masks a recognised module takes from its caller are built when the inputs leave them empty and the attention is causal
or padded: an additive ``attention_mask [B, 1, Tq, Tk]`` (0 / finfo.min) for Hugging Face attention modules, ``attn_mask``
+ ``is_causal`` / ``src_mask`` for ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer``, and ``key_padding_mask`` /
``src_key_padding_mask`` for modules whose forward takes one (``details['masks_built']``).

EVAL-MODE RANDOMNESS: the eval path runs twice on the same input (no reseeding in between) and must agree, and no
dropout may be active under ``eval()`` (``F.dropout(training=True)``, SDPA ``dropout_p > 0``); the references never
reproduce dropout: once some is found, later passes leave it out and a note says so.

THE USER'S MODEL: ``attention_check(model, model_inputs, module="blocks.0.attn")`` runs a copy of the model once and
checks the module at that ``named_modules()`` path on exactly what the model passes it (masks, ``position_embeddings``,
``cache_position``; a key/value cache is not passed on); every finding's ``where`` is that path and a failing check's
``kind`` names the problem (``attention.missing_scale``, ``attention.wrong_scale``, ``attention.future_visible``,
``attention.head_split_merge``, ``attention.eval_dropout`` ...), its level in ``evidence['level']``. Passed alone, the
module's findings keep ``where = LEVEL_n`` and the level's kind, the diagnosis in ``observed``. ``torch.compile``d
models and modules are checked through the eager module they wrap. T5-style attention (a relative position bias, no
1/sqrt(Dh) by design) leaves the LEVEL_4 reference SKIPPED with that reason.

Every level runs (each is independent evidence); the first divergence is the earliest failing check. A check that
cannot run is SKIPPED with the reason. Limits: positional schemes other than ``position_embeddings`` (ALiBi, RoPE
computed inside the module) make the LEVEL_4 reference disagree; fused qkv projections must be laid out ``[q | k | v]``;
a function ``attn`` is called as-is (not copied, not put in eval mode).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.checks import Check, compose
from .._core.modes import set_mode
from .._core.state import detached_copy, guarded
from .._core.user_hooks import reports_user_hooks
from ._capture import Site
from ._confirm import confirm_inferred_causal, reference_forbidden
from ._diagnose import relabel
from ._levels import level1, level3, reference, w4_of
from ._model import attention_inputs_reason, check_path, eager, module_inputs
from ._probes import batch_isolation, causality, merge_probe, perturbations, run, time_isolation
from ._randomness import eval_randomness
from ._setup import (
    Ctx,
    batch_first_of,
    bound,
    build_masks,
    causal_before_run,
    causal_from_weights,
    causal_pattern,
    check_hidden,
    check_num_heads,
    forbidden,
    heads_of,
    identify,
    is_hf,
    read_hf_mask,
    read_keys,
    read_padding,
    site_forbidden,
    split_inputs,
    type_name,
)

__all__ = ["LEVELS", "attention_check"]

_NAME = "attention_check"
LEVELS = ("LEVEL_1", "LEVEL_2", "LEVEL_3", "LEVEL_4")


@reports_user_hooks
def attention_check(attn: Any, inputs: Any, *, num_heads: int | None = None, causal: bool | None = None,
                    key_padding_mask: torch.Tensor | None = None, atol: float = 1e-5, module: str | None = None,
                    scale: float | None = None) -> Report:
    """Check an attention module or function at four levels and report the earliest that fails.

    Args:
        attn: an attention ``nn.Module`` (run as a deep copy in eval mode) or a callable; with ``module``, the user's
            whole model.
        inputs: what ``attn`` receives: the hidden states ``[B, T, E]`` (``[T, B, E]`` for ``batch_first=False``
            ``nn.MultiheadAttention``), a tuple of positional arguments (hidden states first, e.g. ``(x, x, x)`` for
            ``nn.MultiheadAttention``) or a dict of keyword arguments (``hidden_states``, ``position_embeddings``...);
            with ``module``, the model's own inputs (``input_ids``, a dict of them, ``pixel_values``...).
        num_heads: Nh; default: read from the module (``num_heads``, ``num_attention_heads``, ``n_head``, its config),
            else from the captured weights.
        causal: whether future keys are forbidden; default: inferred (``details['causal_from']`` says from what).
        key_padding_mask: ``[B, Tk]`` bool, True = padding key (as in ``nn.MultiheadAttention``).
        atol: absolute tolerance for row sums, comparisons and "unchanged".
        module: the ``named_modules()`` path of the attention module inside the model ``attn`` (``"blocks.0.attn"``,
            ``"transformer.h.0.attn"``): the model runs once on ``inputs`` and the module is checked on what it receives.
        scale: the score scale the module is meant to use (default: ``1/sqrt(Dh)``); declares a design such as muP's
            ``1/Dh``, which the LEVEL_4 reference then uses (``nn.MultiheadAttention`` always uses ``1/sqrt(Dh)``).

    Returns:
        A Report. With ``module``, every finding's ``where`` is that path and a failing check's ``kind`` names the
        problem (``attention.missing_scale``, ``attention.wrong_scale``, ``attention.future_visible``,
        ``attention.padding_visible``, ``attention.head_split_merge``, ``attention.softmax_axis``,
        ``attention.eval_dropout``, ``attention.eval_randomness``, ...), the level in ``evidence['level']``. Without it,
        ``where`` is ``LEVEL_1``..``LEVEL_4`` and ``kind`` the level's check (``attention.shape``,
        ``attention.axis_semantics``, ``attention.nonfinite``, ``attention.blocked_query``,
        ``attention.rows_not_normalized``, ``attention.forbidden_weight``, ``attention.causality``,
        ``attention.reference_mismatch``, ``attention.eval_dropout``, ``attention.eval_randomness``); the diagnosis is
        in ``observed``. Findings' evidence names the op and module.
    """
    notes: list[str] = []
    if module is None:
        attn = eager(attn, notes)
        return _checked(attn, inputs, (num_heads, causal, key_padding_mask, atol, scale), None, notes, guard=True)
    model = eager(attn, notes)
    check_path(model, module)
    _options(causal, atol, scale)
    with guarded(attn), torch.no_grad():
        found = module_inputs(model, inputs, module)
        why = found.reason or attention_inputs_reason(found.inputs, module)
        if why:
            return Report(_NAME, Status.SKIPPED, side_effects=_COPY, reason=f"{module} not checked: {why}",
                          details={"path": module, "notes": notes + found.notes})
        try:
            return _checked(found.module, found.inputs, (num_heads, causal, key_padding_mask, atol, scale), module,
                            notes + found.notes, guard=False)
        except InvalidArgument as exc:  # what the model passes does not fit; a bad argument of the user's still raises
            if num_heads is not None or key_padding_mask is not None:
                raise
            return Report(_NAME, Status.SKIPPED, side_effects=_COPY, details={"path": module, "notes": notes + found.notes},
                          reason=f"{module} not checked: what the model passes it does not fit ({exc})")


_COPY = "none: every forward pass ran on a deep copy in eval mode under no_grad"


def _checked(attn: Any, inputs: Any, options: tuple, path: str | None, notes: list[str], *, guard: bool) -> Report:
    ctx = _context(attn, inputs, *options)
    ctx.path, ctx.notes = path, notes + ctx.notes
    with guarded(attn if guard and isinstance(attn, nn.Module) else ()), torch.no_grad():
        effects = _prepare(ctx, attn)
        first = run(ctx)
        if first.error or first.output is None:
            return _not_run(ctx, first, effects)
        random_check, ctx.base = eval_randomness(ctx, first)
        checks = _levels(ctx)
        # eval-mode randomness blurs every other comparison: when it fails it is the first divergence
        checks = [random_check, *checks] if random_check.finding.status is Status.FAIL else [*checks, random_check]
    return _report(ctx, checks, effects)


def _not_run(ctx: Ctx, first: Any, effects: str) -> Report:
    what = first.error or "no tensor in its output"
    b = bound(ctx)
    rotary_hint = ("; it takes position_embeddings (cos, sin): build them with the model's rotary embedding module "
                   "(e.g. LlamaRotaryEmbedding(config)(x, position_ids)) and pass them in `inputs`, or pass the whole model "
                   "with module=" if b is not None and "position_embeddings" in b.signature.parameters
                   and b.arguments.get("position_embeddings") is None else "")
    ctx.base = first
    return Report(_NAME, Status.SKIPPED, side_effects=effects, details=_details(ctx, {}),
                  reason=f"{ctx.path or ctx.name} raised {what} on inputs {_shapes(ctx)}{rotary_hint}; attention_check needs "
                         "one forward pass that runs and returns the attention output [B, Tq, E] (or a tuple starting with it)")


def _options(causal: Any, atol: Any, scale: Any = None) -> None:
    if causal is not None and not isinstance(causal, bool):
        raise InvalidArgument(f"Expected `causal` to be True, False or None but got {causal!r}")
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol >= 0:
        raise InvalidArgument(f"Expected `atol` to be a number >= 0 but got {atol!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf):
        raise InvalidArgument(f"Expected `scale` to be None or a finite number > 0 but got {scale!r}")


def _context(attn: Any, inputs: Any, num_heads: Any, causal: Any, key_padding_mask: Any, atol: Any, scale: Any) -> Ctx:
    if not isinstance(attn, nn.Module) and not callable(attn):
        raise InvalidArgument(f"Expected `attn` to be a torch.nn.Module or a callable but got {type_name(attn)}")
    _options(causal, atol, scale)
    args, kwargs, loc = split_inputs(inputs)
    hidden = args[loc] if isinstance(loc, int) else kwargs[loc]
    check_hidden(hidden)
    bf = batch_first_of(attn)
    B, T, E = (hidden.shape[0], hidden.shape[1], hidden.shape[2]) if bf else (hidden.shape[1], hidden.shape[0], hidden.shape[2])
    check_num_heads(attn, num_heads, E)
    name = type(attn).__name__ if isinstance(attn, nn.Module) else getattr(attn, "__name__", type(attn).__name__)
    ctx = Ctx(attn, attn if isinstance(attn, nn.Module) else None, name, args, kwargs, hidden, bf, int(B), int(T), int(T),
              int(E), float(atol))
    ctx.scale = None if scale is None else float(scale)
    read_keys(ctx)
    ctx.hf = is_hf(attn)
    if ctx.hf:
        read_hf_mask(ctx)
    read_padding(ctx, key_padding_mask)
    causal_before_run(ctx, causal)
    ctx.num_heads, ctx.heads_source = (num_heads, "argument num_heads=") if num_heads else heads_of(attn)
    return ctx


def _prepare(ctx: Ctx, attn: Any) -> str:
    """Work on a deep copy in eval mode (dropout off), with the masks the module expects from its caller."""
    if isinstance(attn, nn.Module):
        try:
            work = detached_copy(attn)[0]
            effects = _COPY
        except Exception as exc:  # noqa: BLE001 - an uncopyable module is still observable under guarded()
            work = attn
            effects = f"forward passes on your module in eval mode (deep copy failed: {type(exc).__name__}); every value restored"
            ctx.notes.append(f"could not deep-copy the module ({type(exc).__name__}: {exc}); ran it under guarded()")
        if attn.training:
            ctx.notes.append("the module was in training mode; the probes ran in eval mode so dropout does not blur comparisons")
        ctx.fn = ctx.module = set_mode(work, False)
    else:
        effects = "none: the function ran under no_grad (it is called as-is: not copied, not put in eval mode)"
    build_masks(ctx)
    return effects


def _levels(ctx: Ctx) -> list[Check]:
    site = ctx.base.sites[0] if ctx.base.sites else None
    nh = ctx.num_heads
    if nh is None and site is not None and site.weights.dim() in (3, 4):
        nh = int(site.weights.shape[1]) if site.weights.dim() == 4 else int(site.weights.shape[0]) // ctx.B or None
        ctx.heads_source = "the captured weights (no num_heads given or found on the module)"
    if site is not None:
        identify(ctx, ctx.base, site)
    w4 = w4_of(ctx, site, nh)
    if ctx.causal is None:
        _infer_causal(ctx, site, w4, nh)
    forb = forbidden(ctx, site, nh or 1)
    pert = perturbations(ctx)
    checks = level1(ctx, site, nh)
    checks += [merge_probe(ctx, nh), batch_isolation(ctx, pert), time_isolation(ctx, pert, w4)]
    checks += level3(ctx, site, w4, forb)
    checks += [causality(ctx, pert), reference(ctx, site, nh, reference_forbidden(ctx, forb, w4))]
    ctx.num_heads = nh
    return checks


def _infer_causal(ctx: Ctx, site: Site | None, w4: torch.Tensor | None, nh: int | None) -> None:
    given = site_forbidden(site, ctx.B, nh or 1) if site is not None else None
    if given is not None and causal_pattern(given):
        ctx.causal, ctx.causal_source = True, "the attn_mask given to nn.MultiheadAttention masks every future position"
    elif w4 is not None:
        ctx.causal = False
        excluded = forbidden(ctx, site, nh or 1).flatten(0, 1).any(0)  # padding / masks: not evidence of causality
        causal_from_weights(ctx, w4, excluded)
        if ctx.causal:
            confirm_inferred_causal(ctx, w4, excluded)
    else:
        ctx.causal, ctx.causal_source = False, "no evidence (no attention weights captured); pass causal= to say"


def _level_status(checks: list[Check], level: str) -> str:
    statuses = [c.finding.status for c in checks if c.finding.where == level]  # before relabel(): where is the level
    for s in (Status.FAIL, Status.WARN, Status.PASS):
        if s in statuses:
            return s.value
    return Status.SKIPPED.value


def _report(ctx: Ctx, checks: list[Check], effects: str) -> Report:
    levels = {lv: _level_status(checks, lv) for lv in LEVELS}
    failing = next((lv for lv in LEVELS if levels[lv] == "FAIL"), None)
    reason = ""
    if all(c.finding.status is Status.SKIPPED for c in checks):
        reason = f"no level could be checked; first reason: {checks[0].finding.message}"
    details = _details(ctx, {"levels": levels, "first_failing_level": failing, "path": ctx.path})
    return compose(_NAME, relabel(checks, ctx.path), effects, details, reason)


def _details(ctx: Ctx, extra: dict) -> dict:
    proj = ctx.proj
    base = ctx.base
    sites = [{"op": s.op, "module": s.module or f"(root: {ctx.name})", "shape": list(s.weights.shape)}
             for s in (base.sites if base is not None else [])]
    return {**extra, "module": ctx.name, "axes": {"B": ctx.B, "Nh": ctx.num_heads, "Tq": ctx.Tq, "Tk": ctx.Tk, "E": ctx.E},
            "layout": "[B, T, E]" if ctx.batch_first else "[T, B, E]", "heads_from": ctx.heads_source,
            "causal": ctx.causal, "causal_from": ctx.causal_source, "padding_from": ctx.padding_source or None,
            "masks_built": list(ctx.built), "attention_calls": sites,
            "projections": ({"q": proj.q, "k": proj.k, "v": proj.v, "fused": proj.fused, "merged": proj.merged_from}
                            if proj is not None else ctx.proj_reason or None),
            "notes": list(ctx.notes)}


def _shapes(ctx: Ctx) -> str:
    def one(v: Any) -> Any:
        return list(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
    parts = [str(one(a)) for a in ctx.args] + [f"{k}={one(v)}" for k, v in ctx.kwargs.items()]
    return "(" + ", ".join(parts) + ")"
