"""Token sequences: what the loss asks each position for, read from the loss itself, and whether the positions
see what they are asked for.

The ledger cannot assume a program is a language model from its shapes, and a model that computes its own loss
(``model(x) -> loss``, a wrapper that shifts inside) declares no targets at all. So the premise is read from the
program: one forward and backward of the user's ``loss_fn`` on the ledger's copy, with every module output that is
aligned with an integer input sequence ``ids`` (``[B, T, V]`` or ``[B, T - 1, V]``) kept. Where the loss's gradient
at a position is a pull (its most negative entry), the index pulled up is the token the loss asks that position
for. Against the input sequence that gives:

- ``next``: position ``t`` is asked for ``ids[t + 1]`` (at >= 90 % of the positions the loss supervises): next-token
  prediction, whatever the program calls it;
- ``same``: position ``t`` is asked for ``ids[t]``, the token it reads.

Another integer input equal to ``ids`` shifted by one (SASRec's ``pos_seqs``, Transformer-XL's ``target``) is the
same premise stated by the data. Then a counterfactual on the copy: change ``ids[:, j]`` only and run again.

- ``dependency.future_visible`` (``next``): the outputs at positions before ``j`` move (beyond the floating-point
  noise of the change, and beyond a thousandth of how much position ``j`` itself moves): an earlier position sees the
  token it must predict. ``j`` is the middle, then the position after it: a local attention's windows start at the
  middle of a power-of-two length and see nothing of the next window, so a mask dropped inside each window shows only
  off the boundary.
- ``task.target_not_shifted`` (``same``): the outputs before ``j`` do not move (the model is causal) but the output
  at ``j`` does: every position is asked for the token it already reads, a copy with nothing to learn. An
  autoencoder or a masked LM is not this: their positions read later tokens, or their inputs differ from the
  tokens asked for.

Nothing is concluded where no position is pulled, no input is an integer sequence, or the change does not reach the
outputs. Everything runs on the ledger's deep copy with the RNG forked and reseeded per forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._core.batch import Batch
from .._core.checks import Check
from .._core.task import Ctx, is_int
from ._common import failed, g4
from ._dependency import named_items, seeded_loss, with_input
from ._loss_inputs import LossInputs
from ._perturbed import at_perturbed_weights, eval_mode
from ._step_sequences import SOURCE, fed_ids, fed_moves, pulled_sites

MATCH = 0.9  # fraction of supervised positions that must agree for a relation to count
#: at perturbed weights (``_perturbed``), a leak is earlier outputs moving by this fraction of the changed position's
#: move: a gMLP without its causal mask 0.11-0.17 (2e-5 at its near-identity initialization), a Performer's causal
#: linear attention, whose global key stabilizer leaks by rounding, 0.004
PERTURBED_LEAK = 0.02


@dataclass
class Seq:
    key: str  # the input's name ("inputs", "inputs[1]", a keyword)
    ids: torch.Tensor  # [B, T], batch first
    relation: str  # "next" or "same"
    agreement: float
    source: str  # how the relation was read: "the loss's gradient" or "input '...' == ids shifted by one"
    site: tuple[str, int] | None  # (module name, call index) of the aligned output; None: the model's outputs
    pulled: torch.Tensor | None = None  # [B, T'] bool: the positions the loss's gradient pulls at the site
    fed: tuple[int | str, str] | None = None  # read from train_step: (the argument's slot, the output's site)


def batch_first(t: torch.Tensor, axis: int) -> torch.Tensor:
    """``t`` with its batch axis first (a ``[T, B]`` sequence becomes ``[B, T]``)."""
    return t.transpose(0, 1) if axis == 1 and t.dim() >= 2 else t


def int_sequences(ctx: Ctx) -> list[tuple[str, torch.Tensor]]:
    """The integer ``[B, T]`` inputs (batch first), T >= 4."""
    out = []
    for k, v in named_items(ctx.batch.inputs):
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
            v = torch.from_numpy(v)
        if torch.is_tensor(v) and is_int(v) and v.dim() == 2:
            ids = batch_first(v, ctx.batch_axis)
            if ids.shape[1] >= 4 and ids.shape[0] >= 1:
                out.append((k, ids))
    return out


class _Capture:
    """Forward hooks keeping every float module output aligned with a sequence of length T or T - 1."""

    def __init__(self, models: list[torch.nn.Module], lengths: set[int], batch: int, axis: int, grad: bool) -> None:
        self.kept: dict[tuple[str, int], torch.Tensor] = {}
        self.calls: dict[str, int] = {}
        self.handles = [m.register_forward_hook(self._hook(f"{i}:{n}"))
                        for i, model in enumerate(models) for n, m in model.named_modules()]
        self.lengths, self.batch, self.axis, self.grad = lengths, batch, axis, grad

    def _hook(self, name: str) -> Any:
        def hook(_m: Any, _i: Any, out: Any) -> None:
            n = self.calls[name] = self.calls.get(name, -1) + 1
            if not torch.is_tensor(out) or not out.is_floating_point() or out.dim() < 2:
                return
            o = batch_first(out, self.axis)
            if o.shape[0] != self.batch or o.shape[1] not in self.lengths:
                return
            if self.grad and o.requires_grad:
                out.retain_grad()
            self.kept[(name, n)] = out
        return hook

    def loss_inputs(self) -> LossInputs:
        """The mode keeping the scores the model's own loss reads (``_loss_inputs``), batch-first sequences only."""
        return LossInputs(lambda name, n, v: self.kept.__setitem__((name, n), v),
                          self.lengths if self.axis == 0 else set(), self.batch, self.grad)

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def run_captured(ctx: Ctx, batch: Batch, lengths: set[int], n: int, grad: bool) -> tuple[Any, Any, _Capture] | None:
    # the user's model too: a head the loss_fn closes over runs there (its hooks are removed below, its .grad restored
    # by the ledger's guard)
    cap = _Capture([ctx.work] if ctx.model is ctx.work else [ctx.work, ctx.model], lengths, n, ctx.batch_axis, grad)
    try:
        with cap.loss_inputs():
            run = seeded_loss(ctx, batch, grad)
        if run is None:
            return None
        outputs, loss = run
        if grad and torch.is_tensor(loss) and loss.numel() == 1 and loss.requires_grad:
            loss.backward()
    except Exception:  # noqa: BLE001 - user code (its backward); the link already ran the program once
        return None
    finally:
        cap.close()
        if grad:
            for p in ctx.work.parameters():
                p.grad = None
    return outputs, loss, cap


def _agree(pulled: torch.Tensor, rows: torch.Tensor, ids: torch.Tensor) -> tuple[float, float]:
    """Fractions of pulled positions where the pulled token is ids[t + 1] and ids[t]."""
    length = pulled.shape[1]
    nxt = rows[:, : ids.shape[1] - 1] if length >= ids.shape[1] else rows
    a_next = (pulled[:, : nxt.shape[1]] == ids[:, 1: nxt.shape[1] + 1])[nxt].float().mean() if bool(nxt.any()) else None
    same = (pulled == ids[:, :length])[rows].float().mean() if length <= ids.shape[1] and bool(rows.any()) else None
    return (float(a_next) if a_next is not None else 0.0), (float(same) if same is not None else 0.0)


def pulled_toward(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """From the loss's gradient ``g`` at ``[..., V]`` scores: the positions it pulls (some score's gradient is
    negative: the loss wants it up) and the class pulled up most there (a cross-entropy's target)."""
    return (g != 0).any(-1) & (g.min(-1).values < 0), g.argmin(-1)


def _by_gradient(ctx: Ctx, seqs: list[tuple[str, torch.Tensor]]) -> list[Seq]:
    n = seqs[0][1].shape[0]
    lengths = {ids.shape[1] for _, ids in seqs} | {ids.shape[1] - 1 for _, ids in seqs}
    run = run_captured(ctx, ctx.batch, lengths, n, grad=True)
    if run is None:
        return []
    found = []
    for site, out in run[2].kept.items():
        g = out.grad
        if g is None or out.shape[-1] < 2 or out.dim() != 3:
            continue
        g, o = batch_first(g, ctx.batch_axis), batch_first(out, ctx.batch_axis)
        rows, pulled = pulled_toward(g)
        if not bool(rows.any()):
            continue
        for key, ids in seqs:
            if o.shape[0] != ids.shape[0] or o.shape[1] not in (ids.shape[1], ids.shape[1] - 1) or int(ids.max()) >= o.shape[-1]:
                continue
            a_next, a_same = _agree(pulled, rows, ids)
            best = max(a_next, a_same)
            if best >= MATCH:
                found.append(Seq(key, ids, "next" if a_next >= a_same else "same", best, "the loss's gradient", site,
                                 rows))
    return found


def _by_step(ctx: Ctx, known: list[Seq]) -> list[Seq]:
    """The relations the loss ``train_step`` backpropagates asks of the sequences its model reads
    (``_step_sequences``), where the declared batch and ``loss_fn`` showed none of that relation."""
    found: dict[tuple[str, str], Seq] = {}  # one site per sequence and relation: the outermost output
    have = {s.relation for s in known}
    for site, out, g in pulled_sites(ctx):
        rows, pulled = pulled_toward(g)
        for key, slot, ids in fed_ids(ctx):
            if out.shape[0] != ids.shape[0] or out.shape[1] not in (ids.shape[1], ids.shape[1] - 1) or \
                    int(ids.max()) >= out.shape[-1] or not bool(rows.any()):
                continue
            a_next, a_same = _agree(pulled, rows, ids)
            relation = "next" if a_next >= a_same else "same"
            if max(a_next, a_same) >= MATCH and relation not in have:
                found[key, relation] = Seq(key, ids, relation, max(a_next, a_same), SOURCE, None, rows, (slot, site))
    return list(found.values())


def _by_data(seqs: list[tuple[str, torch.Tensor]]) -> list[Seq]:
    """An integer input equal to another one shifted by one position (the next-item targets fed to the model)."""
    found = []
    for key, ids in seqs:
        for other, t in seqs:
            if other == key or t.shape != ids.shape:
                continue
            keep = (t[:, :-1] != 0) & (ids[:, 1:] != 0)  # 0: the usual padding id
            if int(keep.sum()) < 4:
                continue
            agree = float((t[:, :-1] == ids[:, 1:])[keep].float().mean())
            if agree >= MATCH and float((t == ids)[t != 0].float().mean()) < MATCH:
                found.append(Seq(key, ids, "next", agree, f"input '{other}' == '{key}' shifted by one", None))
    return found


def read_sequences(ctx: Ctx) -> list[Seq]:
    """The input sequences and what the loss asks of their positions (module docstring), cached on ``ctx``."""
    if "sequences" not in ctx.notes:
        seqs = int_sequences(ctx)
        found = (_by_gradient(ctx, seqs) or _by_data(seqs)) if seqs else []
        ctx.notes["sequences"] = found + (_by_step(ctx, found) if ctx.train_step is not None else [])
    return ctx.notes["sequences"]


def _aligned(outputs: Any, n: int, length: int, axis: int) -> list[torch.Tensor]:
    items = list(outputs.values()) if isinstance(outputs, dict) else list(outputs) if isinstance(outputs, (list, tuple)) \
        else [outputs]
    return [batch_first(v, axis) for v in items if torch.is_tensor(v) and v.is_floating_point() and v.dim() >= 2
            and batch_first(v, axis).shape[0] == n and batch_first(v, axis).shape[1] in (length, length - 1)]


def _is_declared_target(s: Seq, t: Any, ctx: Ctx) -> bool:
    """The input equals the declared targets beside other inputs: DEPENDENCY's target_as_input names its key."""
    return s.fed is None and (torch.is_tensor(t) and len(named_items(ctx.batch.inputs)) >= 2 and tuple(batch_first(t, ctx.batch_axis).shape) ==
            tuple(s.ids.shape) and torch.equal(batch_first(t, ctx.batch_axis), s.ids))


def _position(s: Seq) -> tuple[int, torch.Tensor | None]:
    """The position to change and the rows to change it in: for a copy ("same") the position, near the middle, that
    the loss supervises in most rows, in those rows only (a masked LM supervises positions whose token it hides, so
    the question is whether the supervised position reads its own answer); else the middle, every row."""
    length = s.ids.shape[1]
    if s.relation != "same" or s.pulled is None:
        return length // 2, None
    counts = s.pulled.sum(0).float()
    counts[0] = -1  # position 0 has nothing before it
    j = int(max(range(counts.shape[0]), key=lambda i: (float(counts[i]), -abs(i - length // 2))))
    return j, s.pulled[:, j]


def moves(ctx: Ctx, s: Seq, at_j: int | None = None) -> tuple[float, float, float] | None:
    """How much the outputs at positions < j and at j move when only ids[:, j] changes (module docstring), and their
    scale, over the rows changed; ``j`` from ``_position`` unless ``at_j`` is given."""
    n, length = s.ids.shape
    j, rows = _position(s)
    j = j if at_j is None else at_j
    rows = torch.ones(n, dtype=torch.bool) if rows is None else rows
    changed = s.ids.clone()
    changed[rows, j] = s.ids[:, j].roll(1, 0)[rows]  # another example's token: inside the vocabulary
    if n < 2 or bool((changed[:, j] == s.ids[:, j]).all()):
        return None
    if s.fed is not None:
        return fed_moves(ctx, s.fed, s.ids, changed, rows, j)
    raw = batch_first(changed, ctx.batch_axis).contiguous()
    original = dict(named_items(ctx.batch.inputs))[s.key]
    with eval_mode(ctx.work):  # no batch statistics across positions, no dropout: only the model's wiring moves them
        a = run_captured(ctx, ctx.batch, {length, length - 1}, n, grad=False)
        b = run_captured(ctx, with_input(ctx.batch, s.key, raw.numpy() if isinstance(original, np.ndarray) else raw),
                         {length, length - 1}, n, grad=False)
        c = run_captured(ctx, ctx.batch, {length, length - 1}, n, grad=False)  # unchanged again: what it moves by itself
    if a is None or b is None or c is None:
        return None
    pairs = [(x.detach().float()[rows], y.detach().float()[rows], z.detach().float()[rows])
             for x, y, z in _site_outputs(ctx, s, [a, b, c], n, length) if x.shape == y.shape == z.shape and x.shape[1] > j]
    if not pairs:
        return None
    # a model that changes itself between calls (random features redrawn every k forwards) moves every position a
    # little: the earlier outputs must move beyond what they move with nothing changed
    noise = max(float((x[:, :j] - z[:, :j]).abs().max()) for x, _, z in pairs)
    before = max(0.0, max(float((x[:, :j] - y[:, :j]).abs().max()) for x, y, _ in pairs) - 2 * noise)
    noise_at = max(float((x[:, j] - z[:, j]).abs().max()) for x, _, z in pairs)
    at = max(0.0, max(float((x[:, j] - y[:, j]).abs().max()) for x, y, _ in pairs) - 2 * noise_at)
    scale = max(float(x.abs().max()) for x, _, _ in pairs)
    return before, at, max(scale, 1e-12)


def _site_outputs(ctx: Ctx, s: Seq, runs: list[Any], n: int, length: int) -> list[tuple[torch.Tensor, ...]]:
    """The kept output at the sequence's site in each run (batch first), or the model's aligned outputs."""
    if s.site is not None:
        kept = [r[2].kept.get(s.site) for r in runs]
        return [tuple(batch_first(k, ctx.batch_axis) for k in kept)] if all(k is not None for k in kept) else []
    return list(zip(*(_aligned(r[0], n, length, ctx.batch_axis) for r in runs)))


def future_or_copy(ctx: Ctx, ev: dict[str, Any], relation: str) -> Check | None:
    """The FAIL for the sequences whose relation is ``relation`` ("next": DEPENDENCY; "same": TASK), else None.
    Where several inputs carry the tokens asked for (a copy task feeds them to an encoder and to a decoder), the
    finding needs every one of them to show it: the encoder's input is read whole by design, the decoder's is not."""
    t = ctx.batch.targets
    seqs = [s for s in read_sequences(ctx) if s.relation == relation
            and not (relation == "same" and _is_declared_target(s, t, ctx))]  # target_as_input names that one
    seen = []
    for s in seqs:
        if relation == "next":
            # the middle, and the position after it: a local attention's windows start at the middle (a power of two)
            # and see nothing of the next window, so a mask missing inside each window shows only off its boundary
            length = s.ids.shape[1]
            hit = next(((j, m) for j in dict.fromkeys((length // 2, length // 2 + 1)) if j < length
                        for m in [_leak_at(ctx, s, j, ev)] if m is not None), None)
            if hit is None:  # a leak needs every input carrying the tokens to leak (an encoder reads its whole)
                return None
            seen.append((s, hit[1][0], hit[1][1], hit[0]))
            continue
        moved = moves(ctx, s)
        # a copy needs the earlier outputs untouched to rounding (a bidirectional model's attention moves them only a
        # little at initialization)
        if moved is not None and moved[0] <= 1e-6 * moved[2] and moved[1] > 1e-5 * moved[2]:
            seen.append((s, moved[0], moved[1], _position(s)[0]))
    # a copy needs one causal input asked for the token it reads (a decoder beside an encoder that reads the source)
    if not seen:
        return None
    s, before, at, j = seen[-1]
    ev.update(sequence_input=s.key, asked_for=relation, agreement=round(s.agreement, 4), read_from=s.source,
              changed_position=j, earlier_outputs_change=before, output_change_at_position=at,
              other_inputs_with_these_tokens=[x[0].key for x in seen[:-1]])
    return _future(s, j, before, ev) if relation == "next" else copy_finding(s, j, at, ev)


def _leak_at(ctx: Ctx, s: Seq, j: int, ev: dict[str, Any]) -> tuple[float, float, float] | None:
    """The moves when only ids[:, j] changes, where they show a leak: beyond floating-point noise and what position j
    itself moves, or (a leak too small at these weights) at perturbed weights; else None."""
    moved = moves(ctx, s, j)
    if moved is None or _leaks(moved):
        return moved
    if moved[0] > 1e-6 * moved[2] and moved[1] != 0:
        again = at_perturbed_weights(ctx, lambda: moves(ctx, s, j))
        if again is not None and again[0] > PERTURBED_LEAK * again[1] and _leaks(again):
            ev["earlier_outputs_change_at_perturbed_weights"] = again[0]
            return moved
    return None


def _leaks(moved: tuple[float, float, float]) -> bool:
    """Earlier outputs move beyond floating-point noise and beyond a thousandth of what the changed position moves."""
    return moved[0] > max(1e-5 * moved[2], 1e-3 * moved[1]) and moved[1] != 0


def copies_own_token(ctx: Ctx, ids: torch.Tensor, agreement: float, ev: dict[str, Any]) -> bool | None:
    """For declared targets equal to the token inputs: True when the model is causal on them (changing the middle
    token moves the output there and none before it: a copy), False when earlier outputs move too (an autoencoder reads
    the whole sequence), None when it cannot be shown."""
    key = next((k for k, v in named_items(ctx.batch.inputs) if v is ids), None)
    if key is None or ctx.batch_axis != 0:
        return None
    moved = moves(ctx, Seq(key, ids, "same", agreement, "the declared targets", None))
    if moved is None:
        return None
    before, at, scale = moved
    ev.update(changed_position=ids.shape[1] // 2, earlier_outputs_change=before, output_change_at_position=at)
    if at <= 1e-5 * scale:
        return None
    return before <= 1e-6 * scale  # untouched to rounding (see future_or_copy)


def _future(s: Seq, j: int, before: float, ev: dict[str, Any]) -> Check:
    return failed("DEPENDENCY", "dependency.future_visible",
                  f"the loss asks position t for the token '{s.key}'[:, t + 1] ({s.agreement:.0%} of the supervised "
                  f"positions, read from {s.source}), and the outputs before position {j} change (by up to {g4(before)}) "
                  f"when only '{s.key}'[:, {j}] changes: each position sees the tokens after it, including the one it "
                  "must predict", ev,
                  expected=f"outputs at positions < {j} independent of '{s.key}'[:, {j}] (a causal mask)",
                  observed=f"outputs before {j} move by {g4(before)}",
                  hint="mask attention to later positions (a mask above the diagonal, is_causal=True, or a decoder "
                       "instead of an encoder)")


def copy_finding(s: Seq, j: int, at: float, ev: dict[str, Any]) -> Check:
    return failed("TASK", "task.target_not_shifted",
                  f"the loss asks position t for the token '{s.key}'[:, t] it reads ({s.agreement:.0%} of the supervised "
                  f"positions, read from {s.source}), and the model is causal (earlier outputs do not move when "
                  f"'{s.key}'[:, {j}] changes, the output at {j} moves by {g4(at)}): the targets are not shifted, so "
                  "every position is trained to copy its own input", ev,
                  expected=f"position t asked for '{s.key}'[:, t + 1] (the next token)",
                  observed=f"position t asked for '{s.key}'[:, t]",
                  hint="shift the targets by one: inputs = tokens[:, :-1], targets = tokens[:, 1:]")
