"""Setup for :func:`~firstdiv.instruments.attention_check.attention_check`: read the inputs and the module, derive the
axes (B, Tq, Tk, E, Nh), decide whether the attention is causal and which weights are forbidden, build the masks a
recognised module expects from its caller, and identify the q/k/v projections and the merged tensor in a run.

Conventions: ``key_padding_mask`` is ``[B, Tk]`` bool, True = padding (as in ``nn.MultiheadAttention``); a Hugging Face
``attention_mask`` is read the HF way (4-d additive with ``finfo.min``/``-inf`` = masked, 4-d bool True = attend, 2-d
1 = keep); an ``nn.MultiheadAttention`` ``attn_mask`` the torch way (bool True = masked, float ``-inf`` = masked).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Status
from .._core.checks import Check, check
from ._capture import FUSED_NAMES, K_NAMES, Q_NAMES, V_NAMES, Run, Site, linear_like

HIDDEN_KEYS = ("hidden_states", "x", "query", "input", "inputs", "hidden", "src")
HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_head", "n_heads", "heads", "nhead")
_TORCH_LAYERS = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder)


@dataclass
class Proj:
    """The module's own projections, identified by name and call order in the base run (batch-first tensors)."""

    q: str
    k: str
    v: str
    fused: bool
    q_out: torch.Tensor
    k_out: torch.Tensor
    v_out: torch.Tensor
    v_span: tuple[int, int]  # the value part of the v module's output (fused: the last third)
    merged: torch.Tensor | None
    merged_from: str
    out: str | None  # path of the output projection whose input is the merged tensor; None: the module output is
    owner: nn.Module | None  # module holding the q projection (where apply_rotary_pos_emb is looked up)


@dataclass
class Ctx:
    fn: Any
    module: nn.Module | None
    name: str
    args: tuple
    kwargs: dict
    hidden: torch.Tensor
    batch_first: bool
    B: int
    Tq: int
    Tk: int
    E: int
    atol: float
    num_heads: int | None = None
    heads_source: str = ""
    causal: bool | None = None
    causal_source: str = ""
    causal_unconfirmed: str = ""  # causality read from the weights and not confirmed by them: why (checks WARN, not FAIL)
    padding: torch.Tensor | None = None
    padding_source: str = ""
    user_forbidden: torch.Tensor | None = None
    hf: bool = False
    self_attention: bool = True
    built: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    base: Run | None = None
    proj: Proj | None = None
    proj_reason: str = ""
    path: str | None = None  # the module's named_modules() path in the user's model (None: the module was passed alone)
    scale: float | None = None  # the score scale declared with scale= (None: 1/sqrt(Dh))
    neutral: bool = False  # eval-mode dropout found: later runs leave it out so the other checks stay exact

    def bf(self, t: torch.Tensor) -> torch.Tensor:
        """A [B, T, ...] view of a tensor in the module's layout ([T, B, ...] when batch_first is False)."""
        return t if self.batch_first else t.transpose(0, 1)


def type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def split_inputs(inputs: Any) -> tuple[tuple, dict, Any]:
    """(args, kwargs, hidden-states location: an index into args or a key of kwargs)."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}, 0
    if isinstance(inputs, (tuple, list)):
        if not inputs or not isinstance(inputs[0], torch.Tensor):
            first = type_name(inputs[0]) if inputs else "nothing"
            raise InvalidArgument(f"Expected the first of `inputs` to be the hidden-states tensor [B, T, E] but got {first}")
        return tuple(inputs), {}, 0
    if isinstance(inputs, dict):
        key = next((k for k in HIDDEN_KEYS if isinstance(inputs.get(k), torch.Tensor)), None)
        key = key or next((k for k, v in inputs.items() if isinstance(v, torch.Tensor)), None)
        if key is None:
            raise InvalidArgument("Expected `inputs` (a dict of keyword arguments) to hold the hidden-states tensor [B, T, E] "
                                  f"but got no tensor among {sorted(map(str, inputs))}")
        return (), dict(inputs), key
    raise InvalidArgument("Expected `inputs` to be a tensor [B, T, E], a tuple of positional arguments or a dict of keyword "
                          f"arguments but got {type_name(inputs)}")


def check_hidden(hidden: torch.Tensor) -> None:
    if hidden.dim() != 3 or not hidden.is_floating_point():
        raise InvalidArgument("Expected the hidden states (first of `inputs`) to be a 3-d floating-point tensor [B, T, E] but "
                              f"got shape {tuple(hidden.shape)} {str(hidden.dtype).replace('torch.', '')}; for a whole model "
                              "pass its own inputs with module='<named_modules() path of its attention module>'")


def bound(ctx: Ctx) -> inspect.BoundArguments | None:
    try:
        sig = inspect.signature(ctx.fn.forward if isinstance(ctx.fn, nn.Module) else ctx.fn)
        return sig.bind_partial(*ctx.args, **ctx.kwargs)
    except (TypeError, ValueError):
        return None


def batch_first_of(attn: Any) -> bool:
    if isinstance(attn, nn.MultiheadAttention):
        return bool(attn.batch_first)
    if isinstance(attn, _TORCH_LAYERS):
        mha = next((m for m in attn.modules() if isinstance(m, nn.MultiheadAttention)), None)
        return True if mha is None else bool(mha.batch_first)
    flag = getattr(attn, "batch_first", True)
    return flag if isinstance(flag, bool) else True


def read_keys(ctx: Ctx) -> None:
    """Tk from the key input (nn.MultiheadAttention ``key``, ``encoder_hidden_states``), else Tq; cross-attention when
    that input is not the hidden states."""
    b = bound(ctx)
    args = b.arguments if b is not None else {}
    for name in ("key", "encoder_hidden_states"):
        t = args.get(name)
        if isinstance(t, torch.Tensor) and t.dim() == 3:
            ctx.Tk = int(ctx.bf(t).shape[1])
            h = ctx.hidden
            ctx.self_attention = t is h or (t.shape == h.shape and bool(torch.equal(t, h)))
            return


def heads_of(attn: Any) -> tuple[int | None, str]:
    """Nh from the module (or a submodule): num_heads / num_attention_heads / n_head ... attributes, or its config."""
    if not isinstance(attn, nn.Module):
        return None, ""
    for path, module in attn.named_modules():
        for obj, prefix in ((module, path), (getattr(module, "config", None), f"{path}.config".lstrip("."))):
            for attr in HEAD_ATTRS:
                value = getattr(obj, attr, None) if obj is not None else None
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value, f"{prefix}.{attr}".lstrip(".") if prefix else attr
    return None, ""


def check_num_heads(attn: Any, num_heads: Any, E: int) -> None:
    if num_heads is None:
        return
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads <= 0:
        raise InvalidArgument(f"Expected `num_heads` to be a positive integer but got {num_heads!r}")
    if E % num_heads == 0:
        return
    widths = [_out_width(m) // (3 if n.rsplit(".", 1)[-1].lower() in FUSED_NAMES else 1)
              for n, m in (attn.named_modules() if isinstance(attn, nn.Module) else ())
              if linear_like(m) and n.rsplit(".", 1)[-1].lower() in Q_NAMES + FUSED_NAMES]
    if not any(w % num_heads == 0 for w in widths):  # a config head_dim may make Nh*Dh != E (Llama)
        raise InvalidArgument(f"Expected `num_heads` to divide the embedding size E={E} but got {num_heads}")


def _out_width(module: nn.Module) -> int:
    nf = getattr(module, "nf", None)  # transformers' Conv1D stores weight as [in, out]
    return int(nf) if isinstance(nf, int) else int(module.weight.shape[0])


def causal_before_run(ctx: Ctx, causal: bool | None) -> None:
    """From the argument, else an ``is_causal``/``causal`` attribute, else a causal pattern in a mask the inputs carry."""
    if causal is not None:
        ctx.causal, ctx.causal_source = causal, "argument causal="
        return
    for path, module in ctx.module.named_modules() if ctx.module is not None else ():
        for obj, prefix in ((module, path), (getattr(module, "config", None), f"{path}.config".lstrip("."))):
            for attr in ("is_causal", "causal"):
                value = getattr(obj, attr, None) if obj is not None else None
                if isinstance(value, bool):
                    ctx.causal, ctx.causal_source = value, f"attribute {prefix + '.' if prefix else ''}{attr}={value}"
                    return
    if ctx.user_forbidden is not None and causal_pattern(ctx.user_forbidden):
        ctx.causal, ctx.causal_source = True, "the attention_mask in inputs masks every future position"


def causal_pattern(forbidden: torch.Tensor) -> bool:
    tq, tk = forbidden.shape[-2:]
    if tq != tk or tq < 2:
        return False
    upper = torch.ones(tq, tk, dtype=torch.bool, device=forbidden.device).triu(1)
    return bool(forbidden[..., upper].all())


def causal_from_weights(ctx: Ctx, w4: torch.Tensor, excluded: torch.Tensor) -> None:
    """No other evidence: weights above the diagonal that are exactly 0 (outside padding) mean future keys are masked;
    a majority of them zero is read as causal attention with a leak."""
    tq, tk = w4.shape[-2:]
    if tq != tk or tq < 2:
        ctx.causal, ctx.causal_source = False, f"Tq={tq} != Tk={tk}: not causal self-attention"
        return
    upper = (torch.ones(tq, tk, dtype=torch.bool, device=w4.device).triu(1) & ~excluded).expand_as(w4)
    n = int(upper.sum())
    zero = int(((w4 == 0) & upper).sum())
    if n == 0 or zero * 2 < n:
        ctx.causal, ctx.causal_source = False, f"captured weights: {n - zero} of {n} weights above the diagonal are nonzero"
    else:
        ctx.causal = True
        ctx.causal_source = (f"captured weights: {zero} of {n} weights above the diagonal are exactly 0"
                             + ("" if zero == n else " (most future keys masked: read as causal; pass causal= to override)"))


def read_padding(ctx: Ctx, key_padding_mask: Any) -> None:
    if key_padding_mask is None:
        b = bound(ctx)
        for name in ("key_padding_mask", "src_key_padding_mask"):
            given = b.arguments.get(name) if b is not None else None
            if isinstance(given, torch.Tensor):
                key_padding_mask, ctx.padding_source = _as_padding(given), f"inputs {name}"
                break
        if key_padding_mask is None:
            return
    else:
        ctx.padding_source = "argument key_padding_mask="
    if not (isinstance(key_padding_mask, torch.Tensor) and key_padding_mask.dtype == torch.bool
            and tuple(key_padding_mask.shape) == (ctx.B, ctx.Tk)):
        got = (f"{str(key_padding_mask.dtype).replace('torch.', '')} {tuple(key_padding_mask.shape)}"
               if isinstance(key_padding_mask, torch.Tensor) else type_name(key_padding_mask))
        raise InvalidArgument(f"Expected `key_padding_mask` to be a bool tensor [B, Tk] = [{ctx.B}, {ctx.Tk}] (True = padding, "
                              f"as in nn.MultiheadAttention) but got {got}")
    ctx.padding = key_padding_mask.to(ctx.hidden.device)


def _as_padding(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else torch.isneginf(mask) | (mask <= torch.finfo(mask.dtype).min / 2)


def is_hf(attn: Any) -> bool:
    """A Hugging Face attention module or layer (not a whole model: those take 2-d masks and build the 4-d one)."""
    if not isinstance(attn, nn.Module) or hasattr(attn, "base_model_prefix"):
        return False
    has_config = any(hasattr(getattr(m, "config", None), "_attn_implementation") for m in attn.modules())
    try:
        return has_config and "attention_mask" in inspect.signature(attn.forward).parameters
    except (TypeError, ValueError):
        return False


def read_hf_mask(ctx: Ctx) -> None:
    """An attention_mask the user passed to a Hugging Face module: its forbidden positions, [B|1, 1|Nh, Tq, Tk]."""
    b = bound(ctx)
    mask = b.arguments.get("attention_mask") if b is not None else None
    if not isinstance(mask, torch.Tensor):
        return
    if mask.dim() == 2:
        ctx.user_forbidden = (mask == 0)[:, None, None, :]
    elif mask.dim() == 4:
        ctx.user_forbidden = ~mask if mask.dtype == torch.bool else _as_padding(mask)


def build_masks(ctx: Ctx) -> None:
    """Masks a recognised module takes from its caller, built when the inputs leave them empty (said in details)."""
    b = bound(ctx)
    if b is None:
        return
    args, future = b.arguments, _future(ctx)
    if ctx.hf and args.get("attention_mask") is None and (ctx.causal or ctx.padding is not None):
        forbidden = torch.zeros(ctx.B, 1, ctx.Tq, ctx.Tk, dtype=torch.bool, device=ctx.hidden.device)
        forbidden = forbidden | future if ctx.causal else forbidden
        forbidden = forbidden | ctx.padding[:, None, None, :] if ctx.padding is not None else forbidden
        dtype = ctx.hidden.dtype
        args["attention_mask"] = torch.zeros(forbidden.shape, dtype=dtype, device=forbidden.device).masked_fill(
            forbidden, torch.finfo(dtype).min)
        ctx.built.append(f"attention_mask [B, 1, Tq, Tk] additive (0 / finfo.min) for {ctx.name}, as its model would pass it")
    params = set(_parameters(ctx.fn))
    if ctx.causal and isinstance(ctx.fn, _TORCH_LAYERS):
        name = "attn_mask" if "attn_mask" in params else "mask" if "mask" in params else "src_mask"
        if args.get(name) is None:
            args[name], args["is_causal"] = future, True
            ctx.built.append(f"{name} (bool, True = masked future key) and is_causal=True for {ctx.name}")
    for name in ("key_padding_mask", "src_key_padding_mask"):
        if ctx.padding is not None and name in params and args.get(name) is None:
            args[name] = ctx.padding
            ctx.built.append(f"{name} from the key_padding_mask argument")
    ctx.args, ctx.kwargs = b.args, b.kwargs


def _parameters(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn.forward if isinstance(fn, nn.Module) else fn).parameters)
    except (TypeError, ValueError):
        return []


def _future(ctx: Ctx) -> torch.Tensor:
    return torch.ones(ctx.Tq, ctx.Tk, dtype=torch.bool, device=ctx.hidden.device).triu(1)


def site_forbidden(site: Site, B: int, nh: int) -> torch.Tensor | None:
    """The masks an nn.MultiheadAttention call received, as forbidden positions [B, Nh|1, Tq, Tk]."""
    if not site.op.endswith("multi_head_attention_forward"):
        return None
    tq, tk = site.weights.shape[-2:]
    out = torch.zeros(B, 1, tq, tk, dtype=torch.bool, device=site.weights.device)
    mask, pad = site.args.get("attn_mask"), site.args.get("key_padding_mask")
    if isinstance(mask, torch.Tensor):
        m = _as_padding(mask)
        out = out | (m.view(B, nh, tq, tk) if m.dim() == 3 else m)
    elif site.args.get("is_causal"):
        out = out | torch.ones(tq, tk, dtype=torch.bool, device=out.device).triu(1)
    if isinstance(pad, torch.Tensor):
        out = out | _as_padding(pad)[:, None, None, :]
    return out


def forbidden(ctx: Ctx, site: Site | None, nh: int) -> torch.Tensor:
    """Every forbidden (query, key) pair: causal future, padding, masks the inputs carried. [B, Nh|1, Tq, Tk] bool."""
    out = torch.zeros(ctx.B, 1, ctx.Tq, ctx.Tk, dtype=torch.bool, device=ctx.hidden.device)
    if ctx.causal and ctx.Tq == ctx.Tk:
        out = out | _future(ctx)
    if ctx.padding is not None:
        out = out | ctx.padding[:, None, None, :]
    if ctx.user_forbidden is not None:
        out = out | ctx.user_forbidden.to(out.device)
    from_site = site_forbidden(site, ctx.B, nh) if site is not None else None
    return out if from_site is None else out | from_site


def identify(ctx: Ctx, run: Run, site: Site) -> None:
    """q/k/v: the last calls before the attention site of modules named like projections; the merged tensor: the
    input of the first linear-like module called after the site (the output projection), else the module output."""
    before = {c.path.rsplit(".", 1)[-1].lower(): c for c in run.calls if c.seq < site.seq and c.output is not None}
    fused = next((before[n] for n in FUSED_NAMES if n in before and before[n].output.shape[-1] % 3 == 0), None)
    if fused is not None:
        w = fused.output.shape[-1] // 3
        q_out, k_out, v_out = (ctx.bf(fused.output)[..., i * w:(i + 1) * w] for i in range(3))
        paths, span = (fused.path,) * 3, (2 * w, 3 * w)
    else:
        found = [next((before[n] for n in names if n in before), None) for names in (Q_NAMES, K_NAMES, V_NAMES)]
        if any(c is None for c in found):
            ctx.proj_reason = (f"q/k/v projections not identified: no module called before the attention weights is named "
                               f"{'/'.join(FUSED_NAMES)} (fused) or q_proj|query|q, k_proj|key|k, v_proj|value|v")
            return
        q_out, k_out, v_out = (ctx.bf(c.output) for c in found)
        paths, span = tuple(c.path for c in found), (0, found[2].output.shape[-1])
    width = q_out.shape[-1]
    after = next((c for c in run.calls if c.seq > site.seq and c.input is not None and c.input.shape[-1] == width), None)
    if after is not None:
        merged, merged_from, out = ctx.bf(after.input), f"input of {after.path}", after.path
    elif run.output is not None and run.output.shape[-1] == width:
        merged, merged_from, out = ctx.bf(run.output), "module output (no projection after the attention)", None
    else:
        merged, merged_from, out = None, "not found: no linear-like module after the attention takes the merged heads", None
    owner = ctx.module.get_submodule(paths[0].rpartition(".")[0]) if ctx.module is not None else None
    ctx.proj = Proj(*paths, fused is not None, q_out, k_out, v_out, span, merged, merged_from, out, owner)


def rotary(ctx: Ctx) -> tuple[Any, str]:
    """(apply_rotary_pos_emb, '') when the inputs carry position_embeddings (cos, sin) and the module's own source file
    defines apply_rotary_pos_emb (Hugging Face models); (None, '') without them; (None, reason) when it cannot apply them."""
    b = bound(ctx)
    pe = b.arguments.get("position_embeddings") if b is not None else None
    if pe is None:
        return None, ""
    owner = ctx.proj.owner if ctx.proj is not None and ctx.proj.owner is not None else ctx.module
    source = sys.modules.get(type(owner).__module__) if owner is not None else None
    fn = getattr(source, "apply_rotary_pos_emb", None)
    if fn is None or not (isinstance(pe, (tuple, list)) and len(pe) == 2):
        return None, (f"position_embeddings passed but no apply_rotary_pos_emb(q, k, cos, sin) in "
                      f"{getattr(source, '__name__', '?')}: cannot rotate the reference's q and k")
    return (lambda q, k: fn(q, k, pe[0], pe[1])), ""


def unconfirmed_future(where: str, kind: str, message: str, ev: dict, ctx: Ctx) -> Check:
    """The WARN a future-key check gives under causality read from the weights and not confirmed by them."""
    ev = {**ev, "premise": "causal attention", "premise_confirmed": False, "declare_with": "causal="}
    return check(where, kind, Status.WARN, f"{message}; not a FAIL: {ctx.causal_unconfirmed}; pass causal=True to check "
                 "the future keys as forbidden, causal=False to leave them out", ev)

