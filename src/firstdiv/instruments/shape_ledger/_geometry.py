"""The geometry ``shape_ledger`` derives, and the ledger that records it.

Before each layer runs, its expected output is derived from the observed input and the layer's hyperparameters
(kernel, stride, padding, dilation, output size or scale; the CHANNEL question apart from the SPATIAL one), and the
input is checked against what the layer declares (``in_channels``, ``num_features``, ``in_features``,
``normalized_shape``, rank). Functional ``flatten``, pooling and ``interpolate`` in a model's own forward are derived
too; ``view``/``reshape``/``permute``/``cat`` are recorded as observed.

API (for ``shape_ledger`` and its ``_flatten_culprit``):

- ``Entry`` — one ledger row (stage, operation, observed input, expected output, observed output) and what the
  layer declares; ``Entry.row()`` is its JSON-safe form.
- ``Ledger`` — ``pre``/``post`` (module boundaries) and ``op`` (the functional ops in ``OP_FUNCS``) callbacks for
  :class:`~firstdiv.instruments._core.trace.Recorder`; ``Ledger.entries`` in execution order.
- ``AXES`` — spatial axis names by spatial rank; ``PASS_NAMES`` — layers that keep the shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import conv, padding, pooling

from .._core.trace import op_name, tensors
from ._confirm import Call, admitted, output_size
from ._unread import AXES, op_window, window_of

_PASS_THROUGH = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish,
                 nn.Sigmoid, nn.Tanh, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Softsign, nn.Tanhshrink,
                 nn.Threshold, nn.LogSigmoid, nn.Softmax, nn.LogSoftmax, nn.Softmin, nn.Dropout, nn.Dropout1d,
                 nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout, nn.Identity, nn.LocalResponseNorm)
#: layer names whose output has the input's shape (a ledger of only these derives no geometry)
PASS_NAMES = {cls.__name__ for cls in _PASS_THROUGH} | {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LayerNorm",
                                                        "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"}


def _n(value: Any, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _dims(cls_name: str) -> int:
    return 3 if "3d" in cls_name else 2 if "2d" in cls_name else 1


def _window(length: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """Output length of a convolution/pooling window (PyTorch's formula, ceil_mode included)."""
    num = length + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= length + p:
        out -= 1
    return out


def _rank_problem(name: str, shape: list[int], n: int) -> str:
    if len(shape) in (n + 1, n + 2):
        return ""
    axes = ", ".join(AXES[n])
    return f"{name} expects [N, C, {axes}] (rank {n + 2}) or unbatched rank {n + 1} but got rank {len(shape)} {shape}"


def _held(m: conv._ConvNd, n: int) -> tuple[int, int, tuple[int, ...]]:
    """(C_in, C_out, kernel) of the weight torch's forward convolves with: a weight replaced after construction
    (a whitening conv given twice ``out_channels`` filters) is what runs, whatever the attributes say."""
    w = m.weight
    if isinstance(w, nn.parameter.UninitializedParameter) or not isinstance(w, torch.Tensor) or w.dim() != n + 2:
        return m.in_channels, m.out_channels, tuple(m.kernel_size)
    if isinstance(m, conv._ConvTransposeNd):
        return w.shape[0], w.shape[1] * m.groups, tuple(w.shape[2:])
    return w.shape[1] * m.groups, w.shape[0], tuple(w.shape[2:])


def _conv(m: conv._ConvNd, shape: list[int], rest: tuple = ()) -> tuple[list[int] | None, str, str]:
    n, name = len(m.kernel_size), type(m).__name__
    c_in, c_out, ks = _held(m, n)
    pad = m.padding if isinstance(m.padding, str) else _n(m.padding, n)
    held = "" if (c_in, c_out, ks) == (m.in_channels, m.out_channels, tuple(m.kernel_size)) else \
        f", weight {list(m.weight.shape)}"
    desc = (f"{name}({c_in}->{c_out}, k={ks}, s={tuple(m.stride)}, p={pad}"
            + (f", d={tuple(m.dilation)}" if any(d != 1 for d in m.dilation) else "") + held + ")")
    problem = _rank_problem(name, shape, n)
    if problem:
        return None, problem, desc
    c = shape[-n - 1]
    if c != c_in:
        problem = f"in_channels={c_in} but the input has C={c} (axis {len(shape) - n - 1})"
    if isinstance(m, conv._ConvTransposeNd):
        out = [(length - 1) * s - 2 * p + d * (k - 1) + op + 1 for length, k, s, p, d, op
               in zip(shape[-n:], ks, m.stride, pad, m.dilation, m.output_padding)]
        size = rest[0] if rest and isinstance(rest[0], (tuple, list, torch.Size)) else None
        if size is not None and len(size) >= n:  # forward(input, output_size): torch derives output_padding from it
            out, desc = [int(v) for v in size[-n:]], desc[:-1] + f", output_size={tuple(int(v) for v in size[-n:])})"
    elif pad == "same":
        out = list(shape[-n:])
    else:
        pads = (0,) * n if pad == "valid" else pad
        out = [_window(length, k, s, p, d, False) for length, k, s, p, d
               in zip(shape[-n:], ks, m.stride, pads, m.dilation)]
    if not problem and min(out) <= 0:
        problem = f"spatial input {shape[-n:]} is too small for kernel {ks}: output would be {out}"
    return shape[:-n - 1] + [c_out] + out, problem, desc


def _pool(kind: str, n: int, shape: list[int], k: Any, s: Any, p: Any = 0, d: Any = 1,
          ceil: bool = False) -> tuple[list[int] | None, str, str]:
    ks, ss = _n(k, n), _n(s if s not in (None, ()) else k, n)
    ps, ds = _n(p, n), _n(d, n)
    desc = f"{kind}(k={ks}, s={ss}, p={ps}" + (f", d={ds}" if any(x != 1 for x in ds) else "") + \
        (", ceil" if ceil else "") + ")"
    problem = _rank_problem(kind, shape, n)
    if problem:
        return None, problem, desc
    out = [_window(length, *args, ceil) for length, *args in zip(shape[-n:], ks, ss, ps, ds)]
    if min(out) <= 0:
        problem = f"spatial input {shape[-n:]} is too small for pooling window {ks}: output would be {out}"
    return shape[:-n] + out, problem, desc


def _adaptive(kind: str, n: int, shape: list[int], size: Any) -> tuple[list[int] | None, str, str]:
    sizes = _n(size, n)
    problem = _rank_problem(kind, shape, n)
    out = [length if s is None else s for length, s in zip(shape[-n:], sizes)]
    return (None if problem else shape[:-n] + out), problem, f"{kind}(output_size={sizes})"


def _resize(shape: list[int], size: Any, scale: Any, kind: str = "Upsample") -> tuple[list[int] | None, str, str]:
    n = len(shape) - 2
    if n < 1:
        return None, f"{kind} expects [N, C, spatial...] but got rank {len(shape)} {shape}", kind
    if size is not None:
        out = list(_n(size, n))
        return shape[:2] + out, "", f"{kind}(size={tuple(out)})"
    scales = _n(scale, n)
    return shape[:2] + [math.floor(length * float(f)) for length, f in zip(shape[2:], scales)], "", \
        f"{kind}(scale_factor={scales})"


def _flatten(shape: list[int], start: int, end: int) -> list[int]:
    rank = max(len(shape), 1)
    start, end = start % rank, end % rank
    return shape[:start] + [math.prod(shape[start:end + 1])] + shape[end + 1:]


def _channels(m: nn.Module, shape: list[int], count: int, what: str) -> str:
    if len(shape) < 2:
        return f"{type(m).__name__} expects [N, C, ...] but got rank {len(shape)} {shape}"
    return "" if shape[1] == count else f"{what}={count} but the input has C={shape[1]} (axis 1)"


def _own_forward(m: nn.Module) -> bool:
    """Whether ``m`` is a subclass of a torch layer that writes its own ``forward`` (a learned positional embedding
    built on nn.Embedding that returns [1, T, D]): the layer's rule derives what torch's forward computes, so for such
    a module a different geometry may be its design; a disagreement is named, not failed."""
    forward = type(m).forward
    base = next((c for c in type(m).__mro__[1:] if c.__module__.startswith("torch.nn.modules") and "forward" in vars(c)),
                None)
    return not type(m).__module__.startswith("torch.") and base is not None and forward is not vars(base)["forward"]


def _derive(m: nn.Module, shape: list[int], rest: tuple = ()) -> tuple[list[int] | None, str, str, str] | None:
    """(expected output, input problem, operation, what the layer declares) or None when no rule applies; ``rest``:
    the call's positional arguments after the input."""
    name = type(m).__name__
    if isinstance(m, conv._ConvNd):
        return (*_conv(m, shape, rest), "C")
    if isinstance(m, (pooling._MaxPoolNd, pooling._AvgPoolNd, pooling._LPPoolNd)):
        d = getattr(m, "dilation", 1)
        p = getattr(m, "padding", 0)
        return (*_pool(name, _dims(name), shape, m.kernel_size, m.stride, p, d, bool(m.ceil_mode)), "")
    if isinstance(m, (pooling._AdaptiveAvgPoolNd, pooling._AdaptiveMaxPoolNd)):
        return (*_adaptive(name, _dims(name), shape, m.output_size), "")
    if isinstance(m, nn.Flatten):
        return _flatten(shape, m.start_dim, m.end_dim), "", f"Flatten({m.start_dim}, {m.end_dim})", ""
    if isinstance(m, nn.Unflatten):
        dim = m.dim % max(len(shape), 1)
        return shape[:dim] + list(m.unflattened_size) + shape[dim + 1:], "", f"Unflatten({m.dim}, {m.unflattened_size})", ""
    if isinstance(m, nn.Linear):
        lazy = isinstance(m.weight, nn.parameter.UninitializedParameter)
        bad = not lazy and (not shape or shape[-1] != m.in_features)
        problem = f"in_features={m.in_features} but {shape[-1] if shape else 'no'} features arrive (last axis)" if bad else ""
        return shape[:-1] + [m.out_features], problem, f"Linear({m.in_features}->{m.out_features})", "features"
    if isinstance(m, nn.Upsample):
        return (*_resize(shape, m.size, m.scale_factor), "")
    if isinstance(m, (nn.PixelShuffle, nn.PixelUnshuffle)):
        return _pixel(m, shape)
    if isinstance(m, (padding._ConstantPadNd, padding._ReflectionPadNd, padding._ReplicationPadNd, padding._CircularPadNd)):
        pads, out = list(m.padding), list(shape)
        for i in range(len(pads) // 2):
            out[-1 - i] += pads[2 * i] + pads[2 * i + 1]
        return out, "", f"{name}({tuple(pads)})", ""
    if isinstance(m, nn.Embedding):
        return shape + [m.embedding_dim], "", f"Embedding({m.num_embeddings}, {m.embedding_dim})", "features"
    return _derive_norm(m, shape, name)


def _pixel(m: nn.Module, shape: list[int]) -> tuple[list[int] | None, str, str, str]:
    shuffle = isinstance(m, nn.PixelShuffle)
    r = m.upscale_factor if shuffle else m.downscale_factor
    desc = f"{type(m).__name__}({r})"
    if len(shape) < 3:
        return None, f"{type(m).__name__} expects [..., C, H, W] but got rank {len(shape)} {shape}", desc, "C"
    c, h, w = shape[-3:]
    if shuffle:
        problem = "" if c % (r * r) == 0 else f"C={c} is not divisible by upscale_factor**2={r * r}"
        return shape[:-3] + [c // (r * r), h * r, w * r], problem, desc, "C"
    problem = "" if h % r == 0 and w % r == 0 else f"H, W = {h}, {w} are not divisible by downscale_factor={r}"
    return shape[:-3] + [c * r * r, h // r, w // r], problem, desc, "C"


def _derive_norm(m: nn.Module, shape: list[int], name: str) -> tuple[list[int] | None, str, str, str] | None:
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        want = {"BatchNorm1d": (2, 3), "BatchNorm2d": (4,), "BatchNorm3d": (5,)}.get(name, (len(shape),))
        problem = "" if len(shape) in want else f"{name} expects rank {' or '.join(map(str, want))} but got {len(shape)} {shape}"
        return list(shape), problem or _channels(m, shape, m.num_features, "num_features"), f"{name}({m.num_features})", ""
    if isinstance(m, nn.modules.instancenorm._InstanceNorm):
        problem = ""
        if m.affine or m.track_running_stats:
            n = _dims(name)
            c = shape[-n - 1] if len(shape) > n else None
            problem = "" if c == m.num_features else f"num_features={m.num_features} but the input has C={c}"
        return list(shape), problem, f"{name}({m.num_features})", ""
    if isinstance(m, nn.GroupNorm):
        return list(shape), _channels(m, shape, m.num_channels, "num_channels"), f"GroupNorm({m.num_groups}, {m.num_channels})", ""
    if isinstance(m, nn.LayerNorm):
        tail = list(m.normalized_shape)
        problem = "" if shape[len(shape) - len(tail):] == tail else f"normalized_shape={tail} but the trailing axes are {shape[-len(tail):]}"
        return list(shape), problem, f"LayerNorm({tail})", ""
    if isinstance(m, _PASS_THROUGH):
        return list(shape), "", name, ""
    return None


# --- functional ops in the model's own forward ----------------------------------------------------------------------

_POOL_ARGS = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
_AVG_ARGS = ("input", "kernel_size", "stride", "padding", "ceil_mode")


def _bind(names: tuple[str, ...], args: tuple, kwargs: dict) -> dict[str, Any]:
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    return bound


def _op_rule(func: Any, args: tuple, kwargs: dict, shape: list[int]) -> tuple[list[int] | None, str, str] | None:
    name = op_name(func)
    if name == "flatten":
        b = _bind(("input", "start_dim", "end_dim"), args, kwargs)
        return _flatten(shape, b.get("start_dim", 0), b.get("end_dim", -1)), "", f"flatten({b.get('start_dim', 0)}, {b.get('end_dim', -1)})"
    if name.startswith(("max_pool", "avg_pool")):
        avg = name.startswith("avg")
        b = _bind(_AVG_ARGS if avg else _POOL_ARGS, args, kwargs)
        return _pool(name, int(name[-2]), shape, b["kernel_size"], b.get("stride"), b.get("padding", 0),
                     1 if avg else b.get("dilation", 1), bool(b.get("ceil_mode", False)))
    if name.startswith("adaptive_"):
        b = _bind(("input", "output_size"), args, kwargs)
        return _adaptive(name, int(name[-2]), shape, b["output_size"])
    if name == "interpolate":
        b = _bind(("input", "size", "scale_factor"), args, kwargs)
        return _resize(shape, b.get("size"), b.get("scale_factor"), "interpolate")
    return None


OP_FUNCS = (torch.flatten, torch.Tensor.flatten, F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d, F.avg_pool2d,
             F.avg_pool3d, F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.adaptive_max_pool1d,
             F.adaptive_max_pool2d, F.adaptive_max_pool3d, F.interpolate, torch.Tensor.view, torch.Tensor.reshape,
             torch.reshape, torch.Tensor.permute, torch.permute, torch.Tensor.transpose, torch.transpose, torch.cat,
             torch.concat)


# --- the ledger -----------------------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One ledger row: a layer (or functional op) with its observed input, derived and observed output."""

    index: int
    stage: str
    operation: str
    observed_input: list[int]
    expected_output: list[int] | None
    problem: str = ""  # the input disagrees with what the layer declares (found before it ran)
    declares: str = ""  # "C" (channels), "features" (last axis) when the layer declares that count
    flatten_start: int | None = None  # a flatten (module, op, view/reshape to [N, -1]): first flattened axis
    observed_output: list[int] | None = None
    ran: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    start: int = 0  # the ledger's clock when the layer began, and when it returned
    end: int = 0

    def row(self) -> dict[str, Any]:
        status = ("input_mismatch" if self.problem else "raised" if not self.ran else "observed" if self.expected_output
                  is None else "ok" if self.expected_output == self.observed_output else "mismatch")
        return {"stage": self.stage, "operation": self.operation, "observed_input": self.observed_input,
                "expected_output": self.expected_output, "observed_output": self.observed_output, "status": status}


class Ledger:
    """The Recorder's callbacks: derive before each layer runs (``pre``), observe after (``post``), and record
    the watched functional ops (``op``, after they ran)."""

    def __init__(self, outputs_of: frozenset[str] = frozenset()) -> None:
        self.entries: list[Entry] = []
        self.open: dict[int, list[Entry]] = {}
        self.clock = 0
        self.outputs_of = outputs_of  # module paths whose every output shape is recorded (the designed ones)
        self.outputs: list[tuple[int, str, list[int] | None]] = []  # (clock, path, output shape)
        self.calls: dict[int, Call] = {}  # entry index -> how the layer was called (for confirming a mismatch)

    def pre(self, path: str, module: nn.Module, args: tuple) -> None:
        self.clock += 1
        first = next(tensors(args), None)
        if first is None:
            return
        rest = args[1:] if args and args[0] is first else ()
        rule = _derive(module, list(first.shape), rest)
        if rule is None:
            return
        expected, problem, operation, declares = rule
        entry = Entry(len(self.entries), path, operation, list(first.shape), expected, problem, declares,
                      flatten_start=(module.start_dim % max(first.dim(), 1)) if isinstance(module, nn.Flatten) else None,
                      start=self.clock)
        window = window_of(module)
        if window is not None:
            entry.extra["window"] = window
        if _own_forward(module):
            entry.extra["own_forward"] = type(module).__name__
        if isinstance(module, nn.Linear):
            entry.extra["in_features"] = module.in_features
        elif isinstance(module, conv._ConvNd):
            entry.extra["in_channels"] = _held(module, len(module.kernel_size))[0]
            if isinstance(module, conv._ConvTransposeNd) and not rest and expected is not None:
                entry.extra["admits"] = admitted(module, expected)
        self.calls[entry.index] = Call(module, first.dtype, None if any(tensors(rest)) else rest)
        self.entries.append(entry)
        self.open.setdefault(id(module), []).append(entry)

    def post(self, path: str, module: nn.Module, args: tuple, output: Any) -> None:
        self.clock += 1
        pending = self.open.get(id(module))
        out = next(tensors(output), None) if pending or path in self.outputs_of else None
        if path in self.outputs_of:
            self.outputs.append((self.clock, path, list(out.shape) if out is not None else None))
        if not pending:
            return
        entry = pending.pop()
        entry.ran, entry.observed_output, entry.end = True, (list(out.shape) if out is not None else None), self.clock
        output_size(entry)

    def op(self, func: Any, args: tuple, kwargs: dict, out: torch.Tensor, path: str) -> None:
        src = args[0] if args and isinstance(args[0], torch.Tensor) else next(tensors(args), None)
        if src is None or (tuple(src.shape) == tuple(out.shape) and op_name(func) not in ("cat", "concat")):
            return
        shape, name = list(src.shape), op_name(func)
        rule = _op_rule(func, args, kwargs, shape)
        expected, problem, operation = rule if rule is not None else (None, "", name)
        flat = None
        if name == "flatten" or (name in ("view", "reshape") and out.dim() == 2 and src.dim() >= 3 and out.shape[0] == src.shape[0]):
            flat = 1 if name != "flatten" else _bind(("input", "start_dim"), args, kwargs).get("start_dim", 0) % max(src.dim(), 1)
        declares = "C" if name in ("cat", "concat") and _bind(("tensors", "dim"), args, kwargs).get("dim", 0) in (1, -3) else ""
        self.clock += 1
        entry = Entry(len(self.entries), f"op:{name}@{path}", operation, shape, expected, problem, declares, flat,
                      list(out.shape), True, start=self.clock, end=self.clock)
        window = op_window(name, _bind(_AVG_ARGS if name.startswith("avg") else _POOL_ARGS, args, kwargs))
        if window is not None:
            entry.extra["window"] = window
        self.entries.append(entry)

