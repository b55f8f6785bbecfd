"""``task.target_in_input``: the targets sit, value for value, in an input the model reads for them.

A forecaster whose target window overlaps its input window (the horizon sliced from the window's start, a window one
step too long), a tabular row that still holds the label among its fields, a decoder fed the future it must predict:
the loss falls fast, towards nothing learned. The premise is read from the program's own batch, then confirmed by a
counterfactual on the ledger's copy:

1. A copy: target element ``j`` equals input element ``i`` (the same fixed position of one input tensor) in every
   example of the batch, and not when the targets are paired with another example's input (rolled by one example):
   a value constant across the batch (a start token, a padding value) copies nothing. Every element is compared
   exactly (a signature of each position's values over the examples, then the candidates checked one by one). Only
   values no position matches by chance count (floating values mostly distinct across the examples, integers carrying
   >= 32 bits over the batch), and only where they make up the target: at least half of a floating target, or the one
   integer label of each example. Integer sequences that copy some source tokens are what a seq2seq rule does.
2. Not a reconstruction: a target that copies the input at its own positions (an autoencoder, an imputer, labels
   handed to a model that computes its own loss) or that copies every non-constant position of an input (a copy or
   reversal task) is what the program asks for; no finding -- unless the program itself says otherwise: the step's
   loss compares with its input while the declared batch pairs the inputs with other targets of that shape (a
   super-resolution step scoring against its low-resolution input), the untrained model already returns the
   target (R^2 >= ``SOLVED``: a residual model asked for the input it passes through has nothing to learn), or the
   model is causal along an axis of that input (changed at one position, it moves outputs there and later, never
   before): it predicts each position from those before, so a target equal to its input there is handed to it (a
   teacher-forced decoder fed the frames it must predict instead of the previous ones).
3. The model reads it (the counterfactual): on the ledger's copy in eval mode, with every RNG reseeded alike,
   changing input ``i`` alone (to another example's value) moves the output the loss compares with target ``j`` (an
   output with the targets' elements, or one score vector per target element), by at least a twentieth of the largest
   move any output makes. A causal model whose labels are its inputs shifted by one does not: position ``j`` never
   reads the token it is asked for. At least half of up to eight probed elements must move.

4. When the loss receives several target tensors, the loss compares the output with this one (``_compared``).

Read on the declared batch, then on what ``train_step`` feeds (its model's first input and the target its loss saved).
Nothing is concluded when no output is aligned with the targets or the model raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..._globals import preserved_globals
from .._core.batch import fresh, positional, rebuild
from .._core.checks import Check
from .._core.task import Ctx
from ._common import failed
from ._compared import compares
from ._perturbed import eval_mode
from ._step_loss import step_fed

MAX_EXAMPLES = 256
MAX_CELLS = 1 << 24  # examples x elements of one input compared
MAX_TARGET = 4096  # target elements per example compared
PROBES = 8
MIN_BITS = 32.0
WHOLE = 0.9  # a shifted target copying this share of the input's varying positions is the sequence's next steps
READS = 0.05  # a probed output moves by this fraction of the largest move: the model reads the copied input
_PRIME = 2_147_483_629
SOLVED = 0.999  # R^2 of the untrained model's output against a copied target: the loss starts at its floor


def named_tensors(x: Any, path: str) -> list[tuple[str, torch.Tensor]]:
    if torch.is_tensor(x):
        return [(path, x)]
    if isinstance(x, dict):
        return [i for k, v in x.items() for i in named_tensors(v, f"{path}[{k!r}]" if path else str(k))]
    if isinstance(x, (list, tuple)):
        return [i for k, v in enumerate(x) for i in named_tensors(v, f"{path}[{k}]")]
    return []


def _replaced(x: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    """``x`` with the tensor ``old`` (by identity) replaced by ``new``, containers rebuilt."""
    if x is old:
        return new
    if isinstance(x, dict):
        return {k: _replaced(v, old, new) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return rebuild(x, [_replaced(v, old, new) for v in x])
    return x


def _signatures(v: torch.Tensor) -> torch.Tensor:
    """[B, N] values -> [2, N] int64: each column's values over the examples hashed (equal columns, equal signatures)."""
    bits = (v.double() + 0.0).nan_to_num(nan=1.5e300).view(torch.int64).remainder(_PRIME)
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(2):
        r = torch.randint(1, _PRIME, (v.shape[0], 1), generator=gen, dtype=torch.int64)
        out.append((bits * r).remainder(_PRIME).sum(0))
    return torch.stack(out)


def _copies(x: torch.Tensor, y: torch.Tensor) -> dict[int, list[int]]:
    """Target column j -> the input columns i with x[:, i] == y[:, j] in every example, for the columns that no
    rolled pairing also matches (step 1)."""
    sx, sy, sr = _signatures(x), _signatures(y), _signatures(y.roll(1, 0))
    index: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(*sx.tolist())):
        index.setdefault(key, []).append(i)
    rolled = {k for k in zip(*sr.tolist()) if k in index}
    found = {}
    for j, key in enumerate(zip(*sy.tolist())):
        if key in index and key not in rolled:
            src = [i for i in index[key] if torch.equal(x[:, i], y[:, j])]
            if src:
                found[j] = src
    return found


def _informative(column: torch.Tensor) -> bool:
    """A column no input position matches by chance: floating values mostly distinct across the examples, or values
    whose empirical distribution over the examples carries >= 32 bits (a binary label over 32 examples)."""
    _, counts = torch.unique(column, return_counts=True)
    if column.is_floating_point() and len(counts) >= 0.75 * len(column):
        return True
    p = counts.double() / len(column)
    return float((counts * -torch.log2(p)).sum()) >= MIN_BITS


def _enough(copies: dict[int, list[int]], t: torch.Tensor) -> bool:
    """Floating targets: at least half of each example's values copied (a horizon inside the window). Integer targets:
    the one label per example (a label among the fields); integer sequences that copy some source tokens are what a
    seq2seq rule does (copying, summarizing), and their shifts are the sequence checks' to read."""
    per = t[0].numel()
    return bool(copies) and (2 * len(copies) >= per if t.is_floating_point() else per == 1)


def _reconstruction(found: dict[int, list[int]], x: torch.Tensor, y: torch.Tensor) -> bool:
    """Step 2: the target copies the input at its own positions, or copies all of it."""
    if x.shape[1] == y.shape[1] and all(j in src for j, src in found.items()):
        return True
    varying = set(torch.nonzero((x != x[:1]).any(0)).flatten().tolist())
    return varying <= {i for src in found.values() for i in src}


def _shifted_whole(found: dict[int, list[int]], x: torch.Tensor, xs: tuple[int, ...], ts: tuple[int, ...]
                   ) -> tuple[int, int] | None:
    """(axis, offset) where the target is the input shifted along one axis (every copy at the same offset) and copies
    at least ``WHOLE`` of the input's varying positions: a sequence's next-step targets (NRI's ``data[:, :, 1:]``), not
    a window overlapping its horizon by a few steps."""
    if len(xs) != len(ts) or not found or not xs:
        return None
    js = torch.tensor(sorted(found))
    at_t = torch.stack(torch.unravel_index(js, ts), 1)
    src = torch.tensor([found[j][0] for j in js.tolist()])
    offsets = torch.stack(torch.unravel_index(src, xs), 1) - at_t
    if not bool((offsets == offsets[:1]).all()):
        return None
    d = offsets[0]
    axes = torch.nonzero(d).flatten().tolist()
    varying = int((x != x[:1]).any(0).sum())
    if len(axes) != 1 or len(found) < WHOLE * varying:
        return None
    return axes[0], int(d[axes[0]])


def _causal(call: ModelCall, x: torch.Tensor, t: torch.Tensor) -> str | None:
    """Step 2's other exception: the model is causal along an axis of the copied input (changing the input at one
    position of it moves outputs there or later, never before), so it predicts each position from what precedes it,
    and a target equal to its input at the same position is handed to it (a decoder fed the frames it must predict);
    None when no axis shows it."""
    base = call.base()
    views = _aligned(base, t) if base is not None and x.shape == t.shape else []
    if not views:
        return None
    path, view = views[0]
    before = view(dict(named_tensors(base, "outputs"))[path]).reshape(t.shape[0], *t.shape[1:], -1)
    for axis in range(1, x.dim()):
        p = x.shape[axis] // 2
        if x.shape[axis] < 4:
            continue
        changed = x.clone()
        changed.narrow(axis, p, 1).copy_(x.narrow(axis, p, 1).roll(1, 0))
        out = call(x, changed)
        other = dict(named_tensors(out, "outputs")).get(path) if out is not None else None
        if other is None or other.numel() != before.numel():
            continue
        delta = (view(other).reshape(before.shape) - before).abs().nan_to_num(0.0)
        early, late = float(delta.narrow(axis, 0, p).max()), float(delta.narrow(axis, p, x.shape[axis] - p).max())
        if late > 0.0 and early <= 1e-6 * late:
            return (f"while the model is causal along the input's axis {axis} (changing it at position {p} moves "
                    f"outputs there and later, none before), so it predicts each position from those before it")
    return None


def _aligned(outputs: Any, t: torch.Tensor) -> list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]]:
    """The outputs the loss can compare with the targets ``t``: each as a view [B, per, k] (per: the target elements of
    an example). An output longer than the targets along one axis alone (a forecaster that also reconstructs its
    input window: [B, L + H, C] for targets [B, H, C]) is read at its last positions, where a forecast sits."""
    b, per, found = t.shape[0], t[0].numel(), []
    for path, o in named_tensors(outputs, "outputs"):
        if not o.is_floating_point() or o.dim() == 0 or o.shape[0] != b:
            continue
        n = o[0].numel()
        longer = [i for i in range(1, o.dim()) if o.dim() == t.dim() and o.shape[i] != t.shape[i]]
        if n == per:
            found.append((path, lambda o, b=b, per=per: o.reshape(b, per, 1)))
        elif o.dim() >= 2 and n == per * o.shape[-1] and o.shape[-1] > 1:
            found.append((path, lambda o, b=b, per=per: o.reshape(b, per, -1)))
        elif len(longer) == 1 and o.shape[longer[0]] > t.shape[longer[0]]:
            a, k = longer[0], t.shape[longer[0]]
            found.append((path, lambda o, b=b, per=per, a=a, k=k: o.narrow(a, o.shape[a] - k, k).reshape(b, per, 1)))
    return found


class ModelCall:
    """The model's forward on the ledger's copy: ``args``/``kwargs`` with one tensor replaced, outputs or None."""

    def __init__(self, ctx: Ctx, args: tuple, kwargs: dict, whole: bool = False) -> None:
        self.ctx, self.args, self.kwargs = ctx, args, kwargs
        self.whole = whole  # args is (inputs,): the batch's inputs handed over whole
        self._base: list[Any] = []

    def base(self) -> Any:
        """The outputs on the unchanged inputs, run once (steps 2 and 3 both read them)."""
        if not self._base:
            self._base.append(self())
        return self._base[0]

    def __call__(self, old: torch.Tensor | None = None, new: torch.Tensor | None = None) -> Any:
        args, kwargs = (self.args, self.kwargs) if old is None else \
            (_replaced(self.args, old, new), _replaced(self.kwargs, old, new))
        try:
            with preserved_globals(seed=0), torch.no_grad(), eval_mode(self.ctx.work):
                return self.ctx.work(*fresh(args), **fresh(kwargs))  # it may write its inputs in place
        except Exception:  # noqa: BLE001 - user code on a changed input: no finding
            return None


def _declared_call(ctx: Ctx) -> ModelCall:
    inputs = ctx.batch.inputs
    if ctx.batch.as_kwargs:
        return ModelCall(ctx, (), dict(inputs))
    return ModelCall(ctx, tuple(inputs), {}) if positional(ctx.work, inputs) else ModelCall(ctx, (inputs,), {}, whole=True)


def target_in_input(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """On the declared batch, then on what ``train_step`` feeds."""
    if ctx.batch_axis != 0:
        return None
    call = _declared_call(ctx)
    declared = [t for _, t in named_tensors(ctx.batch.targets, "")]
    found = _search(ctx, ev, call, declared, "", several=len(declared) > 1)
    if found is not None:
        return found
    fed = step_fed(ctx)
    if fed is None:
        return None
    (args, kwargs), targets = fed
    # declared targets that are no input's copy, where the step's loss compares the model's own output with its target
    others = [t for t in declared if not _copied(call, t)] if ctx.notes.get("step_fed_model_in_loss") else []
    return _search(ctx, ev, ModelCall(ctx, tuple(args), dict(kwargs)), targets, " in the batches train_step feeds",
                   others)


def _copied(call: ModelCall, t: torch.Tensor) -> bool:
    """Whether the declared target ``t`` copies some declared input at its own positions (an autoencoder's batch)."""
    b = min(t.shape[0], MAX_EXAMPLES) if t.dim() and t.layout is torch.strided else 0
    return any(b and x.layout is torch.strided and x.shape == t.shape and torch.equal(x[:b], t[:b])
               for _, x in named_tensors((call.args, call.kwargs), ""))


def _solved(call: ModelCall, t: torch.Tensor) -> float | None:
    """R^2 of the untrained model's aligned output against ``t`` when it reaches ``SOLVED``, else None."""
    base = call.base()
    views = _aligned(base, t) if base is not None else []
    if not views or not t.is_floating_point():
        return None
    o = views[0][1](dict(named_tensors(base, "outputs"))[views[0][0]]).double()
    y = t.reshape(o.shape[0], -1, 1).double()
    if o.shape[-1] != 1 or o.shape != y.shape:
        return None
    var = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((o - y) ** 2).sum()) / var if var > 0 else None
    return r2 if r2 is not None and r2 >= SOLVED else None


def _contradicted(call: ModelCall, t: torch.Tensor, where: str, others: list[torch.Tensor]) -> str | None:
    """Step 2's exception: why the program itself contradicts a reconstruction (module docstring), or None."""
    if where and any(o.dim() == t.dim() and o.shape[1:] == t.shape[1:] for o in others):
        return "while the declared batch pairs the inputs with other targets of this shape"
    r2 = _solved(call, t)
    return None if r2 is None else f"which the untrained model already returns (R^2 {r2:.4f}): nothing to learn"


def _search(ctx: Ctx, ev: dict[str, Any], call: ModelCall, targets: list[torch.Tensor], where: str,
            others: list[torch.Tensor] = (), several: bool = False) -> Check | None:
    inputs = named_tensors((call.args, call.kwargs), "")
    for t in targets:
        b = min(t.shape[0], MAX_EXAMPLES) if t.dim() and t.layout is torch.strided else 0
        if b < 4 or t.is_complex() or t[0].numel() > MAX_TARGET:
            continue
        y = t[:b].reshape(b, -1)
        for path, x in inputs:
            if x is t or x.layout is not torch.strided or x.dim() == 0 or x.shape[0] != t.shape[0] or x.is_complex() \
                    or b * x[0].numel() > MAX_CELLS:
                continue
            xf = x[:b].reshape(b, -1)
            copies = {j: src for j, src in _copies(xf, y).items() if _informative(y[:, j])}
            if not _enough(copies, t):
                continue
            why = _contradicted(call, t, where, others) if _reconstruction(copies, xf, y) else ""
            why = _causal(call, x, t) if why is None else why
            if why is None:
                continue
            shift = _shifted_whole(copies, xf, tuple(x.shape[1:]), tuple(t.shape[1:]))
            if shift is not None:
                ctx.report_notes.append(
                    f"note: the targets{where} are input {_name(path, call.whole)!r} shifted by {shift[1]} along its "
                    f"axis {shift[0] + 1} (next-step prediction of the whole sequence); whether the model may read the "
                    "step it predicts (a latent-variable model encoding the whole sequence) or must not (a forecaster) "
                    "is the program's design: task.target_in_input not judged")
                continue
            result = _confirm(call, x, t, copies)
            if result is not None and several and not compares(ctx, call.base(), result["output"], t, named_tensors,
                                                               _replaced):
                ctx.report_notes.append(f"note: a target tensor among several the loss receives copies input "
                                        f"{_name(path, call.whole)!r}, but the loss is not lowest with the output at "
                                        "its values (context the loss reads, not what it fits): not judged")
                continue
            if result is not None:
                return _finding(ev, _name(path, call.whole), x, t, copies, result, where, why)
    return None


def _name(path: str, whole: bool) -> str:
    """The input's name as the user passed it: ``[0][1]`` -> ``inputs[1]`` (``inputs`` when handed over whole),
    ``[1]['x'][0]`` -> ``x[0]``."""
    if path.startswith("[1]"):
        key, _, rest = path[5:].partition("']")
        return key + rest
    return "inputs" + path[6 if whole else 3:]


def _confirm(call: ModelCall, x: torch.Tensor, t: torch.Tensor, copies: dict[int, list[int]]) -> dict[str, Any] | None:
    """Step 3: which probed target elements' outputs move with their source input alone."""
    base = call.base()
    views = _aligned(base, t) if base is not None else []
    if not views:
        return None
    path, view = views[0]
    js = sorted(copies)
    probes = [js[k * len(js) // min(PROBES, len(js))] for k in range(min(PROBES, len(js)))]
    flat = x.reshape(x.shape[0], -1)
    moved = []
    for j in probes:
        i = copies[j][0]
        changed = flat.clone()
        changed[:, i] = flat[:, i].roll(1, 0)
        rows = changed[:, i] != flat[:, i]
        out = call(x, changed.reshape(x.shape))
        other = dict(named_tensors(out, "outputs")).get(path) if out is not None else None
        if other is None or other.shape != dict(named_tensors(base, "outputs"))[path].shape or not bool(rows.any()):
            continue
        delta = (view(other) - view(dict(named_tensors(base, "outputs"))[path])).abs()[rows].nan_to_num(0.0)
        at_j, largest = float(delta[:, j].max()), float(delta.max())
        moved.append((j, i, at_j > 0.0 and at_j >= READS * largest))
    if not moved or sum(m for *_, m in moved) * 2 < len(moved):
        return None
    return {"output": path, "probes": [[j, i, bool(m)] for j, i, m in moved]}


def _at(name: str, shape: tuple[int, ...], flat: int) -> str:
    """``name[:, i, j]``: a flat per-example index as the user indexes the batch."""
    index = [str(int(k)) for k in torch.unravel_index(torch.tensor(flat), shape)] if shape else []
    return f"{name}[{', '.join([':', *index])}]"


def _finding(ev: dict[str, Any], name: str, x: torch.Tensor, t: torch.Tensor, copies: dict[int, list[int]],
             result: dict[str, Any], where: str, why: str = "") -> Check:
    per = t[0].numel()
    j = next(j for j, _, m in result["probes"] if m)
    source, target = _at(name, tuple(x.shape[1:]), copies[j][0]), _at("targets", tuple(t.shape[1:]), j)
    ev["target_in_input"] = {"input": name + where, "copied": len(copies), "of": per, "example": [target, source],
                             **result, **({"reconstruction_contradicted": why} if why else {})}
    if why:
        return failed("TASK", "task.target_in_input",
                      f"the targets{where} are input {name!r} itself, value for value at their own positions ({target} == "
                      f"{source} in every example), {why}: the loss asks the model to return its input", ev,
                      expected="targets the model does not already see (the high-resolution image, the next state, the "
                               "clean signal)",
                      observed=f"{len(copies)}/{per} target values per example equal {name!r} at the same positions",
                      hint="compare the output with the target of the batch, not with the tensor fed to the model")
    return failed("TASK", "task.target_in_input",
                  f"{len(copies)} of the {per} target values per example{where} are copies of input {name!r} at fixed "
                  f"positions ({target} == {source} in every example, not when paired with another example's input), "
                  "and the model's prediction of them changes when that input alone changes: the model is given what "
                  "it must predict", ev,
                  expected="targets the model does not see (a horizon after the input window, labels not among the "
                           "features)",
                  observed=f"{len(copies)}/{per} target values found in {name!r} and read by {result['output']}",
                  hint="slice the target after the input window (x = s[t:t+L], y = s[t+L:t+L+H]), drop the label "
                       "column from the features, and feed a decoder only the known part of the sequence")
