"""Capture for :func:`~firstdiv.instruments.attention_check.attention_check`: run an attention module (a deep copy)
or function once and record what its attention computed, without editing its code.

- A ``TorchFunctionMode`` (:class:`Recorder`) sees every top-level ``torch.softmax`` / ``F.softmax`` /
  ``Tensor.softmax`` whose output ends in ``[..., Tq, Tk]`` (the attention weights), every
  ``F.scaled_dot_product_attention`` call (the weights are recomputed from its own q, k, mask and scale) and every
  ``F.multi_head_attention_forward`` call (``nn.MultiheadAttention``; re-run with ``need_weights=True,
  average_attn_weights=False``, and what the caller asked for is handed back). Each such call is a :class:`Site`.
  With ``pinned`` weights the mode hands back the pinned weights (softmax) or ``pinned @ v`` (SDPA) instead, so a
  perturbation can only travel through the value path and the merge of heads.
- Module hooks record the module path running at each site, and every linear-like module call (a 2-D ``weight``:
  ``nn.Linear``, HF ``Conv1D``) with its input and output, in call order; a :class:`Tags` replaces the value part of one
  projection's output by distinct probe values.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

FUSED_NAMES = ("qkv", "c_attn", "qkv_proj", "wqkv", "to_qkv")
Q_NAMES = ("q_proj", "query", "q", "to_q", "wq", "q_lin", "q_linear")
K_NAMES = ("k_proj", "key", "k", "to_k", "wk", "k_lin", "k_linear")
V_NAMES = ("v_proj", "value", "v", "to_v", "wv", "v_lin", "v_linear")
_MHA_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def first_tensor(out: Any) -> torch.Tensor | None:
    """The attention output: the tensor itself, or the first tensor of a tuple/list/dict/ModelOutput."""
    if isinstance(out, torch.Tensor):
        return out
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


def linear_like(module: nn.Module) -> bool:
    weight = getattr(module, "_parameters", {}).get("weight")
    return isinstance(weight, torch.Tensor) and weight.dim() == 2 and not isinstance(module, nn.Embedding)


@dataclass
class Site:
    """One attention computation seen during a forward pass."""

    index: int
    seq: int
    op: str
    module: str
    weights: torch.Tensor  # as produced by the softmax, or recomputed for SDPA / MHA
    dim: int | None = None  # the softmax's dim (non-negative), for softmax sites
    args: dict[str, Any] = field(default_factory=dict)  # bound arguments of an SDPA / MHA call
    output: Any = None


@dataclass
class ModuleCall:
    seq: int
    path: str
    input: torch.Tensor | None
    output: torch.Tensor | None


@dataclass
class Run:
    output: torch.Tensor | None
    sites: list[Site]
    calls: list[ModuleCall]
    error: str = ""
    stochastic: list[str] = field(default_factory=list)  # "op (p=...) in module" for each random op that ran


@dataclass
class Tags:
    """Replace ``output[..., start:stop]`` of the module at ``path`` by ``values`` (the probe's value tags)."""

    path: str
    start: int
    stop: int
    values: torch.Tensor

    def apply(self, output: torch.Tensor) -> torch.Tensor:
        out = output.clone()
        out[..., self.start:self.stop] = self.values.to(out.dtype)
        return out


def sdpa_weights(q: torch.Tensor, k: torch.Tensor, attn_mask: Any = None, is_causal: bool = False,
                 scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """softmax(q k^T * scale + mask) exactly as F.scaled_dot_product_attention defines it (bool mask: True = attend)."""
    k = repeat_heads(k, q.size(-3)) if enable_gqa and q.dim() >= 3 else k
    s = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    logits = (q.double() @ k.double().transpose(-2, -1)) * s
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        logits = logits.masked_fill(~keep, float("-inf"))
    if isinstance(attn_mask, torch.Tensor):
        if attn_mask.dtype == torch.bool:
            logits = logits.masked_fill(~attn_mask, float("-inf"))
        else:
            logits = logits + attn_mask.double()
    return torch.softmax(logits, dim=-1).to(q.dtype)


def repeat_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: each key/value head serves ``heads // kv_heads`` consecutive query heads."""
    kv = t.size(-3)
    return t if kv == heads or heads % kv else t.repeat_interleave(heads // kv, dim=-3)


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", "?")
    if getattr(func, "__objclass__", None) is not None:
        return f"Tensor.{name}"
    module = getattr(func, "__module__", "") or ""
    return f"F.{name}" if "functional" in module or "_nn" in module else f"torch.{name}"


class Recorder(TorchFunctionMode):
    """Records attention sites (softmax / SDPA / MHA), module paths and linear-like module calls."""

    def __init__(self, tq: int, tk: int, pinned: list[torch.Tensor] | None = None, neutral: bool = False) -> None:
        super().__init__()
        self.tq, self.tk, self.pinned, self.neutral = tq, tk, pinned or [], neutral
        self.stochastic: list[str] = []
        self.sites: list[Site] = []
        self.calls: list[ModuleCall] = []
        self.stack: list[str] = []
        self.seq = 0

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _site(self, op: str, weights: torch.Tensor, **extra: Any) -> Site:
        site = Site(len(self.sites), self._next(), op, self.stack[-1] if self.stack else "", weights.detach().clone(), **extra)
        self.sites.append(site)
        return site

    def _pin(self, index: int) -> torch.Tensor | None:
        return self.pinned[index] if index < len(self.pinned) else None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "softmax":
            return self._softmax(func, args, kwargs)
        if name == "scaled_dot_product_attention":
            return self._sdpa(func, args, kwargs)
        if name == "multi_head_attention_forward":
            return self._mha(func, args, kwargs)
        if name in _DROPOUTS:
            return self._dropout(func, args, kwargs)
        return func(*args, **kwargs)

    def _random(self, op: str, p: float) -> None:
        where = self.stack[-1] if self.stack else ""
        self.stochastic.append(f"{op}(p={p:g}) in {where or '(root)'}")

    def _dropout(self, func: Any, args: Any, kwargs: dict) -> Any:
        """Dropout that is active (training=True, p > 0) is recorded; a neutral run replaces it by the identity."""
        a = dict(zip(("input", "p", "training"), args))
        a.update(kwargs)
        p, training = float(a.get("p", 0.5)), bool(a.get("training", True))
        if not (training and p > 0):
            return func(*args, **kwargs)
        self._random(_op_name(func), p)
        return a["input"] if self.neutral else func(*args, **kwargs)

    def _fits(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() >= 3 and tuple(t.shape[-2:]) == (self.tq, self.tk)

    def _softmax(self, func: Any, args: Any, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        if not self._fits(out):
            return out
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        site = self._site(_op_name(func), out, dim=None if dim is None else int(dim) % out.dim())
        pinned = self._pin(site.index)
        return out if pinned is None or pinned.shape != out.shape else pinned.to(out.dtype)

    def _sdpa(self, func: Any, args: Any, kwargs: dict) -> Any:
        a = dict(zip(_SDPA_ARGS, args))
        a.update(kwargs)
        q, k, v = a["query"], a["key"], a["value"]
        weights = sdpa_weights(q, k, a.get("attn_mask"), bool(a.get("is_causal", False)), a.get("scale"),
                               bool(a.get("enable_gqa", False)))
        p = float(a.get("dropout_p", 0.0) or 0.0)
        if p > 0:
            self._random("F.scaled_dot_product_attention dropout_p", p)
        call = {**a, "dropout_p": 0.0} if self.neutral else a  # a neutral run leaves the eval-mode dropout out
        if not self._fits(weights):
            return func(**call)
        site = self._site("F.scaled_dot_product_attention", weights, args=a)
        pinned = self._pin(site.index)
        if pinned is not None and pinned.shape == weights.shape:
            out = pinned.to(v.dtype) @ repeat_heads(v, q.size(-3))
        else:
            out = func(**call)
        site.output = out.detach().clone()
        return out

    def _mha(self, func: Any, args: Any, kwargs: dict) -> Any:
        bound = _MHA_SIGNATURE.bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        need, average = a["need_weights"], a["average_attn_weights"]
        training = bool(a["training"]) and float(a["dropout_p"]) > 0
        if training:
            self._random("F.multi_head_attention_forward dropout_p", float(a["dropout_p"]))
        out, weights = func(**{**a, "need_weights": True, "average_attn_weights": False,
                               "training": training and not self.neutral})
        if weights is None or not self._fits(weights):
            return out, (weights.mean(dim=-3) if average and weights is not None and weights.dim() == 4 else weights)
        site = self._site("F.multi_head_attention_forward", weights, args=a)
        site.output = out.detach().clone()
        return out, (None if not need else weights.mean(dim=1) if average else weights)

    def enter(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: Any) -> None:
            self.stack.append(path)
        return hook

    def leave(self, path: str, tags: Tags | None) -> Callable[..., Any]:
        def hook(module: nn.Module, inputs: Any, output: Any) -> Any:
            if self.stack and self.stack[-1] == path:
                self.stack.pop()
            if not linear_like(module):
                return None
            replaced = None
            if tags is not None and tags.path == path and isinstance(output, torch.Tensor):
                output = replaced = tags.apply(output)
            x = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
            y = output if isinstance(output, torch.Tensor) else None
            self.calls.append(ModuleCall(self._next(), path, None if x is None else x.detach().clone(),
                                         None if y is None else y.detach().clone()))
            return replaced
        return hook


def capture(fn: Any, args: tuple, kwargs: dict, tq: int, tk: int, *, pinned: list[torch.Tensor] | None = None,
            tags: Tags | None = None, neutral: bool = False) -> Run:
    """One forward pass of ``fn(*args, **kwargs)`` under no_grad with the recorder; never raises (``Run.error``).
    ``neutral``: active dropout (an eval-mode bug, reported by the randomness check) is left out of this run."""
    rec = Recorder(tq, tk, pinned, neutral)
    handles = []
    try:
        if isinstance(fn, nn.Module):
            for path, module in fn.named_modules():
                handles.append(module.register_forward_pre_hook(rec.enter(path)))
                handles.append(module.register_forward_hook(rec.leave(path, tags)))
        with torch.no_grad(), rec:
            out = fn(*args, **kwargs)
        return Run(first_tensor(out), rec.sites, rec.calls, stochastic=rec.stochastic)
    except Exception as exc:  # noqa: BLE001 - user code: the probe reports it
        return Run(None, rec.sites, rec.calls, describe(exc), rec.stochastic)
    finally:
        for handle in handles:
            handle.remove()
