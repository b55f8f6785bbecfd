"""What the user's loss is fed, read from its own autograd graph (wherever the activation sits: the model's forward
or ``loss_fn``). Each finding is confirmed twice, by the graph and by the values the loss node saved:

- a with-logits loss (``BCEWithLogitsLoss``, ``binary_cross_entropy_with_logits``) whose input comes straight out of
  a sigmoid or softmax (through views) and lies in [0, 1]: the loss squashes it again, so it cannot approach its
  floor (BCE-with-logits of a probability stays above ln(1 + e^-1) for a positive);
- a cross-entropy (log_softmax then NLL) whose logits come straight out of a softmax: rows that sum to 1;
- an NLL loss (``nll_loss``, ``NLLLoss``) whose input has no log-normalization behind it (no log_softmax / log /
  logsigmoid among its producers), or comes straight out of a log_softmax taken over another axis, and whose rows
  are not log-probabilities (logsumexp over the classes is not 0):
  NLL of raw scores is unbounded below, the model can raise the target's score forever;
- a CTC loss (``ctc_loss``, ``CTCLoss``) fed the same (its ``log_probs`` not log-normalized over the classes, the last
  axis): the alignment probabilities are not probabilities, and the loss falls below 0 without bound.

Anything else (a graph without these nodes, values that do not confirm it) finds nothing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

_VIEWS = ("View", "Reshape", "Squeeze", "Unsqueeze", "Clone", "Alias", "Expand", "Contiguous", "ToCopy", "Permute",
          "Transpose", "Select", "Slice", "Index", "Unsafe")
_LOG_OPS = ("LogSoftmaxBackward0", "LogBackward0", "LogSigmoidBackward0", "LogsumexpBackward0")
_SQUASH = {"SigmoidBackward0": "sigmoid", "SoftmaxBackward0": "softmax"}
_NLL = ("NllLossBackward0", "NllLoss2DBackward0")
_MAX_NODES = 5000


@dataclass
class Misfed:
    """One loss node fed what it cannot use: ``kind`` (a check kind), what it is and what fed it, and the evidence."""

    kind: str
    loss: str
    fed: str
    evidence: dict[str, Any] = field(default_factory=dict)


def graph_nodes(loss: torch.Tensor) -> Iterator[Any]:
    seen, stack = set(), [loss.grad_fn]
    while stack and len(seen) < _MAX_NODES:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(n for n, _ in getattr(node, "next_functions", ()))


def _through_views(node: Any, depth: int = 8) -> Any:
    for _ in range(depth):
        if node is None or not any(type(node).__name__.startswith(v) for v in _VIEWS):
            return node
        node = next((n for n, _ in node.next_functions if n is not None), None)
    return node


def _has_log_behind(node: Any, depth: int = 6) -> bool:
    frontier = [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            if n is None:
                continue
            if type(n).__name__ in _LOG_OPS:
                return True
            nxt += [m for m, _ in getattr(n, "next_functions", ())]
        frontier = nxt
    return False


def saved_tensor(node: Any, name: str, floating: bool = True) -> torch.Tensor | None:
    """The tensor a graph node saved under ``name`` (detached; a floating one unless ``floating=False``), or None."""
    try:
        value = getattr(node, name)
    except (AttributeError, RuntimeError):  # freed after a backward, or not saved
        return None
    return value.detach() if torch.is_tensor(value) and (value.is_floating_point() or not floating) else None


def _with_logits(node: Any) -> Misfed | None:
    fed = _through_views(node.next_functions[0][0] if node.next_functions else None)
    op = _SQUASH.get(type(fed).__name__)
    x = saved_tensor(node, "_saved_self")
    if op is None or x is None or x.numel() == 0 or float(x.min()) < 0 or float(x.max()) > 1:
        return None
    return Misfed("objective.probabilities_as_logits", "binary_cross_entropy_with_logits", op,
                  {"input_min": float(x.min()), "input_max": float(x.max()), "fed_by": type(fed).__name__})


def _nll(node: Any) -> Misfed | None:
    producer = node.next_functions[0][0] if node.next_functions else None
    x = saved_tensor(node, "_saved_self")
    if x is None or x.dim() < 2 or x.numel() == 0:
        return None
    fed = _through_views(producer)
    if type(fed).__name__ == "LogSoftmaxBackward0":
        inner = _through_views(fed.next_functions[0][0] if fed.next_functions else None)
        if type(inner).__name__ in _SQUASH:
            return Misfed("objective.probabilities_as_logits", "cross_entropy", _SQUASH[type(inner).__name__],
                          {"fed_by": type(inner).__name__})
        off = float(torch.logsumexp(x.double(), dim=1).abs().max())  # normalized, but over the classes?
        if off <= (1e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-3):
            return None
        return Misfed("objective.nll_of_raw_scores", "nll_loss_axis", "log_softmax",
                      {"logsumexp_over_classes_max_abs": off, "log_softmax_dim": getattr(fed, "_saved_dim", None),
                       "fed_by": type(fed).__name__})
    if _has_log_behind(producer):
        return None
    lse = torch.logsumexp(x.double(), dim=1)
    off = float(lse.abs().max())
    if off <= 1e-3:
        return None
    return Misfed("objective.nll_of_raw_scores", "nll_loss", type(fed).__name__ if fed is not None else "a leaf",
                  {"logsumexp_over_classes_max_abs": off, "input_max": float(x.max()), "fed_by": type(fed).__name__})


def _ctc(node: Any) -> Misfed | None:
    x = saved_tensor(node, "_saved_log_probs")
    producer = node.next_functions[0][0] if node.next_functions else None
    if x is None or x.dim() < 2 or x.numel() == 0:
        return None
    fed = _through_views(producer)
    off = float(torch.logsumexp(x.double(), dim=-1).abs().max())
    if type(fed).__name__ == "LogSoftmaxBackward0" and off > (1e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-3):
        return Misfed("objective.nll_of_raw_scores", "ctc_loss_axis", "log_softmax",  # normalized, not over the classes
                      {"logsumexp_over_classes_max_abs": off, "log_softmax_dim": getattr(fed, "_saved_dim", None),
                       "fed_by": type(fed).__name__})
    if off <= 1e-3 or _has_log_behind(producer):
        return None
    return Misfed("objective.nll_of_raw_scores", "ctc_loss", type(fed).__name__ if fed is not None else "a leaf",
                  {"logsumexp_over_classes_max_abs": off, "input_max": float(x.max()), "fed_by": type(fed).__name__})


_CONSUMERS = ("SumBackward1", "MeanBackward1", "GatherBackward0")
_ROW_MAJOR = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "SqueezeBackward0", "SqueezeBackward1",
              "SqueezeBackward2", "UnsqueezeBackward0", "CloneBackward0", "AliasBackward0", "NegBackward0")


def _normalized(x: torch.Tensor, dims: list[int]) -> bool:
    """``x`` holds log-probabilities over ``dims`` jointly (logsumexp 0 wherever it is finite)."""
    lse = torch.logsumexp(x, dim=dims)
    finite = lse[torch.isfinite(lse)]
    return finite.numel() > 0 and float(finite.abs().max()) <= 1e-3


def _log_softmax_below(node: Any, depth: int = 6) -> tuple[Any, torch.Tensor | None] | None:
    """The log_softmax a reduction or gather consumes through row-major views, negations and at most one weighting
    product: (its node, the product's other factor where the graph saved it), or None."""
    weights, weighted = None, False
    for _ in range(depth):
        name = type(node).__name__
        if name == "LogSoftmaxBackward0":
            return node, weights
        if name == "MulBackward0" and not weighted:
            found = [(i, n) for i, (n, _) in enumerate(node.next_functions)
                     if n is not None and _log_softmax_below(n, depth - 1) is not None]
            if len(found) != 1:
                return None
            weights = saved_tensor(node, "_saved_other" if found[0][0] == 0 else "_saved_self")
            weighted, node = True, found[0][1]
            continue
        if name not in _ROW_MAJOR or not node.next_functions:
            return None
        node = node.next_functions[0][0]
    return None


def _log_probs_axis(node: Any) -> Misfed | None:
    """A sum or mean over given axes of log-probabilities (weighted by targets, a hand-written cross-entropy), or a
    gather of them along an axis, where the log_softmax behind them normalized over another axis: the values taken
    along the consumed axes are not log-probabilities there (logsumexp over them is not 0), while a weighting that is
    itself a distribution over the log_softmax's axis (an unusual order of sums of a sound cross-entropy) is none."""
    dims, sizes = getattr(node, "_saved_dim", None), getattr(node, "_saved_self_sym_sizes", None)
    if sizes is None:  # a gather saves its input itself
        sizes = getattr(saved_tensor(node, "_saved_self"), "shape", None)
    below = _log_softmax_below(node.next_functions[0][0]) if node.next_functions and dims is not None else None
    if below is None or sizes is None:
        return None
    fed, weights = below
    result, axis = saved_tensor(fed, "_saved_result"), getattr(fed, "_saved_dim", None)
    shape = [int(v) for v in sizes]
    if result is None or axis is None or result.numel() != math.prod(shape) or not shape:
        return None
    consumed = sorted({d % len(shape) for d in ([dims] if isinstance(dims, int) else dims)} - {
        d for d, n in enumerate(shape) if n == 1})
    x = result.double().reshape(shape)
    if not consumed or _normalized(x, consumed) or any(_normalized(x, [d]) for d in consumed):
        return None
    if weights is not None and weights.numel() == result.numel() and \
            bool(torch.allclose(weights.double().reshape(result.shape).sum(axis), torch.ones(()).double(), atol=1e-3)):
        return None
    off = float(torch.logsumexp(x, dim=consumed).nan_to_num(0.0, 0.0, 0.0).abs().max())
    return Misfed("objective.nll_of_raw_scores", "log_probs_axis", "log_softmax",
                  {"log_softmax_dim": int(axis), "log_softmax_shape": list(result.shape), "consumed_shape": shape,
                   "consumed_dims": consumed, "logsumexp_over_consumed_max_abs": off, "fed_by": type(node).__name__})


_ELEMENTWISE = ("MseLossBackward0", "SmoothL1LossBackward0", "HuberLossBackward0")
_SQUARED = ("PowBackward0", "AbsBackward0")  # a squared or absolute error written out: (pred - target) ** 2
_PRODUCTS = ("MulBackward0", "DivBackward0")  # a per-example weight applied: log_prob * advantage, ratio * advantage


def broadcast_into_loss(loss: Any) -> tuple[list[int], list[int]] | None:
    """(the prediction's shape, the shape it was expanded to) for an elementwise regression loss whose prediction was
    broadcast against a target of another shape, or None. Read from the graph: an mse / smooth L1 / Huber node one of
    whose inputs (the prediction may be either argument) is an expand of a smaller tensor; or a squared or absolute
    difference written out whose one operand with a gradient is smaller than the difference (the other, the target,
    without one: a pairwise distance between two model outputs is no regression); or a product (or quotient) of one
    operand with a gradient by a vector without one, each example's prediction times every example's weight (a
    policy gradient's ``log_prob [B, 1] * advantage [B]``). Where the prediction is the second argument, the
    difference is written out or the product is read, only an [n, n] table of [n] predictions counts
    (``_pairs_rows``)."""
    if not torch.is_tensor(loss) or loss.grad_fn is None:
        return None
    for node in graph_nodes(loss):
        name = type(node).__name__
        found = _expanded_operand(node) if name in _ELEMENTWISE else _broadcast_difference(node) if name in _SQUARED \
            else _broadcast_product(node) if name in _PRODUCTS else None
        if found is not None:
            return found
    return None


def _shape(node: Any) -> list[int] | None:
    """The forward output shape of the autograd node ``node`` (a leaf's variable, else its input metadata)."""
    try:
        if hasattr(node, "variable"):
            return list(node.variable.shape)
        return [int(d) for d in node._input_metadata[0].shape]
    except (AttributeError, IndexError, RuntimeError, TypeError):
        return None


def _expanded_operand(node: Any) -> tuple[list[int], list[int]] | None:
    for i, (producer, _) in enumerate(node.next_functions):
        if producer is None or type(producer).__name__ != "ExpandBackward0":
            continue
        try:
            small = [int(d) for d in producer._saved_self_sym_sizes]
        except (AttributeError, RuntimeError, TypeError):
            continue
        wide = _shape(producer)
        if wide is not None and torch.Size(wide).numel() > max(1, torch.Size(small).numel()) \
                and (i == 0 or _pairs_rows(small, wide)):
            return small, wide
    return None


def _pairs_rows(small: list[int], wide: list[int]) -> bool:
    """A [n, 1] (or [n]) prediction met by [n] targets as an [n, n] table: each row against every other row's target.
    A prediction expanded along an axis of its own within each row (a quantile regression's pairwise TD errors,
    [B, N, 1] against [B, 1, N]) pairs nothing across rows."""
    return len(wide) == 2 and wide[0] == wide[1] >= 2 and [d for d in small if d != 1] == [wide[0]]


def _broadcast_difference(node: Any) -> tuple[list[int], list[int]] | None:
    if type(node).__name__ == "PowBackward0" and getattr(node, "_saved_exponent", None) != 2:
        return None
    diff = saved_tensor(node, "_saved_self")
    sub = node.next_functions[0][0] if node.next_functions else None
    if diff is None or sub is None or type(sub).__name__ != "SubBackward0":
        return None
    graded = [p for p, _ in sub.next_functions if p is not None]
    small = _shape(graded[0]) if len(graded) == 1 else None
    if small is None or not _pairs_rows(small, list(diff.shape)):
        return None
    return small, list(diff.shape)


def _broadcast_product(node: Any) -> tuple[list[int], list[int]] | None:
    """An [n, n] product whose one operand with a gradient is [n, 1] or [n] and whose other, without one, is a vector
    of n (a weight per example: a table of weights would be a pairwise loss's mask)."""
    wide = _shape(node)
    slots = [i for i, (p, _) in enumerate(node.next_functions) if p is not None]
    if wide is None or len(slots) != 1 or len(node.next_functions) != 2:
        return None
    small = _shape(node.next_functions[slots[0]][0])
    other = saved_tensor(node, "_saved_other" if slots[0] == 0 else "_saved_self")
    if small is None or other is None or not _pairs_rows(small, wide):
        return None
    return (small, wide) if [d for d in other.shape if d != 1] == [wide[0]] and other.dim() <= 2 else None


_BCE = ("BinaryCrossEntropyWithLogitsBackward0", "BinaryCrossEntropyBackward0")
_FULL_REDUCTIONS = ("SumBackward0", "MeanBackward0")  # sum() / mean() over every element


def bce_target_outside(loss: Any) -> dict[str, Any] | None:
    """A binary cross-entropy node of ``loss``'s graph (with or without logits) that reduces its elements (mean or sum:
    each one counts) and whose saved targets hold finite values outside [0, 1] with a nonzero weight: the loss has no
    floor at them (``y * log p`` with y < 0 falls without bound as p -> 0). A ``reduction='none'`` node counts only
    where a full sum or mean takes its elements next (a mask applied afterwards may drop them)."""
    if not torch.is_tensor(loss) or loss.grad_fn is None:
        return None
    nodes = list(graph_nodes(loss))
    reduced = {id(child) for n in nodes if type(n).__name__ in _FULL_REDUCTIONS for child, _ in n.next_functions
               if child is not None}
    for node in nodes:
        name = type(node).__name__
        t = saved_tensor(node, "_saved_target") if name in _BCE else None
        if t is None or (getattr(node, "_saved_reduction", 0) not in (1, 2) and id(node) not in reduced):
            continue
        bad = torch.isfinite(t) & ((t < 0) | (t > 1))
        w = saved_tensor(node, "_saved_weight")
        if w is not None and w.numel():
            bad &= torch.broadcast_to(w, t.shape) != 0
        if bool(bad.any()):
            return {"loss_node": name, "targets_outside_0_1": int(bad.sum()), "target_elements": t.numel(),
                    "values_outside": sorted({float(v) for v in t[bad].unique()[:5]}),
                    "reduction": {1: "mean", 2: "sum"}.get(node._saved_reduction, "a full sum or mean after reduction='none'")}
    return None


def misfed(loss: Any) -> Misfed | None:
    """The first loss node of ``loss``'s graph fed what it cannot use (module docstring), or None."""
    if not torch.is_tensor(loss) or loss.grad_fn is None:
        return None
    for node in graph_nodes(loss):
        name = type(node).__name__
        found = _with_logits(node) if name == "BinaryCrossEntropyWithLogitsBackward0" else \
            _nll(node) if name in _NLL else _ctc(node) if name == "CtcLossBackward0" else \
            _log_probs_axis(node) if name in _CONSUMERS else None
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def misfed_backwards(found: list[Misfed]) -> Iterator[None]:
    """While open, every ``torch.autograd.backward`` (``loss.backward()``, Accelerate's and Lightning's backward) first
    reads its root's graph with :func:`misfed` (before the backward frees the saved values) and appends what it finds
    to ``found``; the original function is put back on exit, also when the body raises."""
    original = torch.autograd.backward

    def reading(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        for t in (tensors if isinstance(tensors, (tuple, list)) else (tensors,)):
            wrong = misfed(t) if not found else None
            found.extend([wrong] if wrong is not None else [])
        return original(tensors, *args, **kwargs)

    torch.autograd.backward = reading
    try:
        yield
    finally:
        torch.autograd.backward = original


def _leaves(t: torch.Tensor) -> set[int]:
    out: set[int] = set()
    for node in graph_nodes(t):
        var = getattr(node, "variable", None)
        if var is not None:
            out.add(id(var))
    return out


def head_inside_loss(loss: Any, outputs: Any, model: Any) -> list[str]:
    """The model's trainable parameters the loss reaches that the outputs do not: loss_fn applies a head of its own
    (a generator, a decoder weight) to the outputs, so the outputs are not the scores the loss compares with the
    targets, and no check may read them as such. Empty when none (or the graphs are not there)."""
    if not torch.is_tensor(loss) or loss.grad_fn is None:
        return []
    out_leaves: set[int] = set()
    for t in (outputs if isinstance(outputs, (tuple, list)) else outputs.values() if isinstance(outputs, dict)
              else [outputs]):
        if torch.is_tensor(t) and t.grad_fn is not None:
            out_leaves |= _leaves(t)
    extra = _leaves(loss) - out_leaves
    names = {id(p): n for n, p in model.named_parameters() if p.requires_grad} if model is not None else {}
    found = [names[i] for i in extra if i in names]
    outside = sum(1 for node in graph_nodes(loss) if id(getattr(node, "variable", None)) in extra - set(names)
                  and getattr(node.variable, "requires_grad", False))
    return sorted(found) + [f"{outside} trainable tensors outside the model"] * bool(outside)
