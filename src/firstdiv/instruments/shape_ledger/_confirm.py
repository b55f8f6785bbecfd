"""Evidence before a ``shape.mismatch`` FAIL on a layer's output: the derived geometry is the ledger's model of
torch's arithmetic, so a disagreement is confirmed on the program's own layer before it FAILs.

Two gaps no rule should FAIL on: a ``ConvTranspose`` called with ``output_size=`` as a keyword (module hooks do not
see keyword arguments; torch admits, per spatial axis, the size without output_padding up to that plus
``stride - 1``), and any other geometry torch computes that a rule misses. The counterfactual: torch's own
``forward`` of the layer's class runs on a meta copy of the layer (its parameters and buffers as meta tensors: no
data, no state changed) and a meta input of the observed shape, with the call's positional arguments. It gives the
observed geometry: the layer is torch's arithmetic (a PASS). It gives the derived geometry while the call could pass
no keyword argument that changes it: confirmed (the call ran something other than the class's forward: an instance
``forward`` or a hook). Anything else is a WARN that names the assumption.

API (for ``_geometry`` and ``shape_ledger``):

- ``Call`` — how a derived layer was called; ``admitted(module, expected)``, ``output_size(entry)``.
- ``confirm(entry, call) -> (verdict, reason)`` with verdict ``"torch"``, ``"confirmed"`` or ``"unconfirmed"``.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from ._geometry import Entry


@dataclass
class Call:
    """How a derived layer was called: the module, the input's dtype, and the positional arguments after the input
    (None when they hold tensors: not kept)."""

    module: nn.Module
    dtype: torch.dtype
    rest: tuple | None


def _n(value: Any, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def admitted(m: nn.Module, expected: list[int]) -> list[tuple[int, int]]:
    """Per spatial axis, the output sizes a transposed conv's ``forward(input, output_size=...)`` admits: torch derives
    output_padding from ``output_size``, between the size without output_padding and that plus ``stride - 1``."""
    n = len(m.kernel_size)
    lows = [size - op for size, op in zip(expected[-n:], _n(m.output_padding, n))]
    return [(lo, lo + s - 1) for lo, s in zip(lows, _n(m.stride, n))]


def output_size(e: Entry) -> None:
    """A transposed conv called with ``output_size=`` as a keyword: an observed size this input admits is the
    layer's own arithmetic, recorded as the derived size."""
    admits, out, exp = e.extra.get("admits"), e.observed_output, e.expected_output
    if not admits or out is None or exp is None or out == exp or len(out) != len(exp):
        return
    n = len(admits)
    if out[:-n] == exp[:-n] and all(lo <= v <= hi for v, (lo, hi) in zip(out[-n:], admits)):
        e.expected_output = list(out)
        e.operation = e.operation[:-1] + f", output_size={tuple(out[-n:])} within {admits})"


def _torch_forward(m: nn.Module) -> Any:
    """The ``forward`` torch defines for the layer's class (the first torch.nn class in its MRO that defines one)."""
    base = next((c for c in type(m).__mro__ if c.__module__.startswith("torch.nn.modules") and "forward" in vars(c)),
                None)
    return None if base is None else vars(base)["forward"]


def _meta(m: nn.Module) -> nn.Module:
    """A shallow copy of the layer whose parameters and buffers are meta tensors of the same shape and dtype."""
    twin = copy.copy(m)
    twin._parameters = {k: None if v is None else torch.empty_like(v, device="meta") for k, v in m._parameters.items()}
    twin._buffers = {k: None if v is None else torch.empty_like(v, device="meta") for k, v in m._buffers.items()}
    return twin


def _keywords(forward: Any, given: int) -> list[str]:
    """The parameters of ``forward`` after ``self``, the input and the ``given`` positional ones: what the call may
    have passed by keyword."""
    params = list(inspect.signature(forward).parameters.values())[2 + given:]
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL,)]


def confirm(e: Entry, call: Call | None) -> tuple[str, str]:
    """Rerun the class's torch ``forward`` on a meta copy: ``("torch", why)``, ``("confirmed", why)`` or
    ``("unconfirmed", why)``."""
    forward = None if call is None else _torch_forward(call.module)
    if call is None or call.rest is None or forward is None:
        return "unconfirmed", "the call could not be replayed (tensor arguments, or no torch forward)"
    name = type(call.module).__name__
    try:
        with torch.no_grad():
            out = forward(_meta(call.module), torch.empty(e.observed_input, dtype=call.dtype, device="meta"), *call.rest)
        shape = list(next(t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)).shape)
    except Exception as exc:  # noqa: BLE001 - an op without a meta kernel: nothing confirmed
        return "unconfirmed", f"torch's {name}.forward could not be replayed on a meta copy ({type(exc).__name__})"
    if shape == e.observed_output:
        return "torch", f"torch's {name}.forward on a meta copy of the layer gives {shape} too"
    keywords = _keywords(forward, len(call.rest))
    if shape == e.expected_output and not keywords:
        return "confirmed", (f"torch's {name}.forward on a meta copy of the layer gives the derived {shape}: the call "
                             "ran something else (an instance forward or a hook)")
    if keywords:
        return "unconfirmed", (f"{name}.forward takes {', '.join(keywords)}, which the call may have passed by keyword "
                               "(module hooks do not see keyword arguments)")
    return "unconfirmed", f"torch's {name}.forward on a meta copy of the layer gives {shape}"
