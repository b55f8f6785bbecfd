"""The minimum evidence packet for a training problem (appendix, "The minimum evidence packet"):
"Preserve observations before your intervention destroys the failing state."

From the evidence at hand (``model``, ``batch`` or ``loader``, ``loss_fn``, ``optimizer``) it records (JSON-safe):

- one known batch: inputs shape / dtype / device / range; targets shape / dtype / meaning / range,
  number of classes and ignored elements (``batch``: the given batch, else the first batch of a fresh
  iterator over ``loader``);
- the model: class, mode (and modules whose mode differs), devices, dtypes, expected trainable
  parameter names, frozen names;
- the loss on that batch: value, ``requires_grad``, ``grad_fn`` name (on a deep copy);
- per parameter: shape, ``requires_grad``, the ``.grad`` state as found (None / zero / nonzero /
  nonfinite, norm; a sparse ``.grad``: layout, nnz, norm of its values), the grad state after one controlled backward
  from ``.grad=None`` on the copy, optimizer membership, its delta after one controlled step (LBFGS: ``step(closure)``);
- the optimizer: class, every param group's current lr and hyperparameters, stale tensors it owns; the environment.

The report is a packet, not a verdict: PASS when the training packet is complete, WARN when a section
could not be captured (the user's code raised: the error is in the packet), SKIPPED (with the partial
packet in ``details`` and the missing keys, each with how to supply it) when model, batch/loader,
loss_fn or optimizer is absent. ``train_step``, ``eval_fn`` and ``task_probe`` are accepted and noted
but never called (the step_probe / six_claims / learning_ledger instruments run them); a ``train_step``
without an optimizer (manual updates) makes the optimizer and step sections notes. Batches may be bare
tensors, dicts (``{"x1", "x2", "label"}``), and hold sparse tensors (layout, shape, nnz: a note).

Only the training packet is built (the performance packet is ``performance_ledger``'s; the regression
packet is what the lab's run records hold). ``save_packet(report, path)`` writes it as JSON; ``load_packet(path)`` reads it back into a Report.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import InvalidArgument
from ..report import Report, Status
from ._core.batch import Batch, check_evidence, compute_loss, loss_problem, split_batch
from ._core.checks import check, compose
from ._core.state import detached_copy, guarded
from ._core.task import Ctx, err, infer_task, is_int, seed_copies
from ._core.user_hooks import reports_user_hooks

__all__ = ["EVIDENCE_KEYS", "FORMAT_VERSION", "evidence_packet", "load_packet", "save_packet"]

FORMAT_VERSION = 1  # 1: first version (training packet)
EVIDENCE_KEYS = ("model", "batch", "loss_fn", "optimizer", "loader", "train_step", "eval_fn", "task_probe")
HOW = {
    "model": "pass model=<the nn.Module you train>",
    "batch": "pass batch=(inputs, targets) — one known batch — or loader=<your DataLoader> to take its first batch",
    "loss_fn": "pass loss_fn=<callable (outputs, targets) -> scalar loss>",
    "optimizer": "pass optimizer=<the torch.optim.Optimizer that steps the model>",
}
#: packet section -> the evidence it needs
NEEDS = {"batch": ("batch",), "model": ("model",), "loss": ("model", "batch", "loss_fn"),
         "parameters": ("model",), "optimizer": ("optimizer",), "step": ("model", "batch", "loss_fn", "optimizer")}


@reports_user_hooks
def evidence_packet(**evidence: Any) -> Report:
    """Capture the minimum evidence packet for a training problem from the evidence at hand.

    Keyword arguments are the shared evidence keys (DESIGN.md): ``model``, ``batch`` (tuple or dict),
    ``loss_fn``, ``optimizer``, ``loader``, ``train_step``, ``eval_fn``, ``task_probe``; None counts as
    absent. Returns a Report whose ``details["packet"]`` is the packet (JSON-safe) and
    ``details["missing"]`` maps each absent key to how to supply it.
    """
    ev = _validated(evidence)
    model, optimizer = ev.get("model"), ev.get("optimizer")
    packet: dict[str, Any] = {"taken_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                              "environment": _environment(), "supplied": sorted(k for k, v in evidence.items() if v is not None)}
    notes: dict[str, str] = {}
    with guarded(model, optimizer), torch.enable_grad():
        seed_copies()
        batch = _batch(ev, packet, notes)
        if batch is not None:
            ev["batch"] = batch
        _sections(ev, packet, notes)
    return _report(ev, packet, notes)


def _validated(evidence: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(evidence) - set(EVIDENCE_KEYS))
    if unknown:
        raise InvalidArgument(f"Expected evidence keys among {', '.join(EVIDENCE_KEYS)} but got {', '.join(map(repr, unknown))}")
    ev = {k: v for k, v in evidence.items() if v is not None}
    check_evidence(ev)
    if "batch" in ev:
        ev["batch"] = _as_batch(ev["batch"], ev.get("model"))
    return ev


def _as_batch(batch: Any, model: nn.Module | None) -> Batch:
    """What real loaders yield: a bare tensor (a loader over a plain tensor: inputs, no targets), a dict whose
    targets key is ``label`` (``{"x1", "x2", "label"}``), and everything :func:`split_batch` takes."""
    if torch.is_tensor(batch):
        return Batch(batch, None, False)
    return split_batch(batch, model)


def _environment() -> dict[str, Any]:
    return {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(terse=True),
            "cuda_available": torch.cuda.is_available(), "cuda_devices": torch.cuda.device_count(),
            # device names need a CUDA context: read them only when the user's process already made one
            "cuda_names": ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                           if torch.cuda.is_available() and torch.cuda.is_initialized() else [])}


def _batch(ev: dict[str, Any], packet: dict[str, Any], notes: dict[str, str]) -> Batch | None:
    if "batch" in ev:
        return ev["batch"]
    if "loader" not in ev:
        return None
    try:
        first = next(iter(ev["loader"]))
    except Exception as exc:  # noqa: BLE001 - user code
        notes["batch"] = f"could not draw a batch from loader: {err(exc)}"
        return None
    packet["batch_source"] = "first batch of a fresh iterator over loader"
    return _as_batch(first, ev.get("model"))


def _sections(ev: dict[str, Any], packet: dict[str, Any], notes: dict[str, str]) -> None:
    model, b = ev.get("model"), ev.get("batch")
    if b is not None:
        packet.setdefault("batch_source", "batch")
        packet["batch"] = {"inputs": describe(b.inputs), "targets": describe(b.targets)}
    if model is not None:
        packet["model"] = _model(model)
        packet["parameters"] = {n: {"shape": list(p.shape), "dtype": _dtype(p), "requires_grad": bool(p.requires_grad),
                                    "grad_now": _grad_state(p.grad)} for n, p in model.named_parameters()}
    if "optimizer" in ev:
        packet["optimizer"] = _optimizer(ev["optimizer"], model, packet.get("parameters"))
        packet["lr"] = packet["optimizer"]["lr"]
    if model is not None and b is not None and "loss_fn" in ev:
        _controlled(ev, packet, notes)


def describe(x: Any) -> Any:
    """Shape / dtype / device / range of a tensor (recursively for dicts, lists, tuples)."""
    if torch.is_tensor(x):
        out: dict[str, Any] = {"shape": list(x.shape), "dtype": _dtype(x), "device": str(x.device)}
        if x.layout != torch.strided:  # sparse: its layout and stored elements; no value statistics
            nnz = x._nnz() if x.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc) else None
            out.update(layout=str(x.layout).replace("torch.", ""), nnz=nnz, values="not summarised (sparse layout)")
        elif x.numel() and not x.is_complex():
            v = x.detach()
            finite = torch.isfinite(v) if v.is_floating_point() else torch.ones_like(v, dtype=torch.bool)
            good = v[finite].double() if bool(finite.any()) else None
            out.update(min=float(good.min()) if good is not None else None, max=float(good.max()) if good is not None else None,
                       mean=float(good.mean()) if good is not None else None, nonfinite=int((~finite).sum()))
            if is_int(v):
                out["distinct"] = int(v.unique().numel())
        return out
    if isinstance(x, dict):
        return {str(k): describe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [describe(v) for v in x]
    return {"type": type(x).__name__} if x is not None else None


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _grad_state(g: torch.Tensor | None) -> dict[str, Any]:
    if g is None:
        return {"state": "None", "norm": None}
    g, sparse = g.detach(), {}
    if g.layout != torch.strided:  # a sparse .grad (EmbeddingBag(sparse=True)): its stored values carry the state
        sparse = {"layout": str(g.layout).replace("torch.", ""), "nnz": int(g._nnz())}
        g = g.coalesce().values() if g.layout == torch.sparse_coo else g.values()
    if not bool(torch.isfinite(g).all()):
        return {"state": "nonfinite", "norm": None, **sparse}
    norm = float(g.float().norm())
    return {"state": "zero" if norm == 0.0 else "nonzero", "norm": norm, **sparse}


def _model(model: nn.Module) -> dict[str, Any]:
    mods = dict(model.named_modules())
    other = [n or "(root)" for n, m in mods.items() if m.training != model.training]
    stochastic = [n for n, m in mods.items() if isinstance(m, (nn.Dropout, nn.modules.batchnorm._BatchNorm))]
    params = list(model.named_parameters())
    return {"class": type(model).__name__, "mode": "train" if model.training else "eval",
            "modules_in_other_mode": other[:50], "dropout_or_batchnorm": {n: ("train" if mods[n].training else "eval") for n in stochastic[:50]},
            "parameters": len(params), "elements": sum(p.numel() for _, p in params),
            "trainable": [n for n, p in params if p.requires_grad], "frozen": [n for n, p in params if not p.requires_grad],
            "devices": sorted({str(p.device) for _, p in params}), "dtypes": sorted({_dtype(p) for _, p in params}),
            "buffers": len(list(model.buffers()))}


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v
    if torch.is_tensor(v) and v.numel() == 1:
        return float(v)
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, bool)) for x in v):
        return list(v)
    return str(v)[:80]


def _optimizer(opt: torch.optim.Optimizer, model: nn.Module | None, params: dict[str, Any] | None) -> dict[str, Any]:
    groups = [{"index": i, "params": len(g["params"]), **{k: _plain(v) for k, v in g.items() if k != "params"}}
              for i, g in enumerate(opt.param_groups)]
    out: dict[str, Any] = {"class": type(opt).__name__, "groups": groups, "lr": [g.get("lr") for g in groups],
                           "owned": sum(len(g["params"]) for g in opt.param_groups),
                           "state_entries": len(opt.state)}
    if model is not None and params is not None:
        group_of = {id(p): i for i, g in enumerate(opt.param_groups) for p in g["params"]}
        for n, p in model.named_parameters():
            params[n].update(owned=id(p) in group_of, group=group_of.get(id(p)))
        model_ids = {id(p) for p in model.parameters()}
        out["stale"] = [{"group": i, "shape": list(p.shape)} for i, g in enumerate(opt.param_groups)
                        for p in g["params"] if id(p) not in model_ids]
        out["trainable_not_owned"] = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in group_of]
    return out


def _controlled(ev: dict[str, Any], packet: dict[str, Any], notes: dict[str, str]) -> None:
    """Loss, controlled backward and one optimizer step, all on a deep copy."""
    try:
        work, work_opt = detached_copy(ev["model"], ev.get("optimizer"))
        for p in work.parameters():
            p.grad = None
        outputs, loss = compute_loss(work, ev["batch"], ev["loss_fn"])
    except Exception as exc:  # noqa: BLE001 - user code; the error is part of the packet
        notes["loss"] = f"forward/loss raised {err(exc)}"
        return
    problem = loss_problem(loss)
    packet["loss"] = {"value": float(loss.detach()) if problem is None else None, "problem": problem,
                      "requires_grad": bool(getattr(loss, "requires_grad", False)),
                      "grad_fn": type(loss.grad_fn).__name__ if getattr(loss, "grad_fn", None) is not None else None,
                      "outputs": describe(outputs)}
    _meaning(ev, outputs, packet["batch"]["targets"], work)
    names = dict(work.named_parameters())
    if problem is not None or not loss.requires_grad:
        notes["parameters"] = "no controlled backward: " + (problem or "the loss does not require grad")
        return
    try:
        loss.backward()
    except Exception as exc:  # noqa: BLE001
        notes["parameters"] = f"backward raised {err(exc)}"
        return
    for n, p in names.items():
        packet["parameters"][n]["grad_after_backward"] = _grad_state(p.grad)
    if work_opt is not None:
        _step(work_opt, names, packet, notes, lambda: _reevaluate(work, work_opt, ev))


def _reevaluate(work: nn.Module, opt: torch.optim.Optimizer, ev: dict[str, Any]) -> torch.Tensor:
    """The closure LBFGS needs, on the copy: zero the gradients, the loss on the batch, backward."""
    opt.zero_grad()
    (loss := compute_loss(work, ev["batch"], ev["loss_fn"])[1]).backward()
    return loss


def _step(opt: torch.optim.Optimizer, names: dict[str, Any], packet: dict[str, Any], notes: dict[str, str], closure: Any) -> None:
    before = {n: p.detach().clone() for n, p in names.items()}
    try:  # LBFGS re-evaluates the model: it steps with the closure; the others step on the gradients just taken
        opt.step(closure) if isinstance(opt, torch.optim.LBFGS) else opt.step()
    except Exception as exc:  # noqa: BLE001
        notes["step"] = f"optimizer.step() raised {err(exc)}"
        return
    moved = 0
    for n, p in names.items():
        d = float((p.detach() - before[n]).float().norm())
        rel = d / max(float(before[n].float().norm()), 1e-12)
        packet["parameters"][n].update(delta_norm=d, relative_delta=rel if math.isfinite(rel) else None, moved=d != 0.0)
        moved += d != 0.0
    packet["step"] = {"optimizer": type(opt).__name__, "moved": moved, "parameters": len(names),
                      "not_moved_trainable": [n for n, p in names.items() if p.requires_grad and not packet["parameters"][n]["moved"]]}


def _meaning(ev: dict[str, Any], outputs: Any, targets: dict[str, Any] | None, work: nn.Module) -> None:
    """What the targets mean, read from their shapes against the outputs (the ledger's task inference)."""
    if not isinstance(targets, dict):
        return
    ctx = Ctx(model=work, optimizer=None, work=work, work_opt=None, loss_fn=ev["loss_fn"], batch=ev["batch"], outputs=outputs)  # type: ignore[arg-type]
    infer_task(ctx)
    meaning = {"classification": f"class ids for {ctx.num_classes} classes (output axis {ctx.class_dim})",
               "language_model": f"next-token ids over a vocabulary of {ctx.num_classes}",
               "regression": "real-valued targets compared with the outputs"}.get(ctx.task, ctx.task_note)
    t = ev["batch"].targets
    targets.update(meaning=meaning, task=ctx.task, num_classes=ctx.num_classes, inferred=ctx.task_note)
    if is_int(t):
        targets["ignored"] = int((t == ctx.ignore_index).sum())


def _report(ev: dict[str, Any], packet: dict[str, Any], notes: dict[str, str]) -> Report:
    """One check per section: PASS when captured, WARN when not (each noted section is one, so the report is
    WARN exactly when a capture note was taken), SKIPPED when its evidence is absent (the report is then SKIPPED)."""
    have = set(ev) | ({"batch"} if "batch" in packet else set())
    by_hand = "train_step" in ev and "optimizer" not in ev  # manual updates: there is no torch.optim to read
    missing = {k: HOW[k] for k in ("model", "batch", "loss_fn", "optimizer") if k not in have and not (by_hand and k == "optimizer")}
    checks, lines = [], _sparse_notes(packet)
    for section, needs in NEEDS.items():
        absent = [k for k in needs if k not in have]
        if by_hand and absent == ["optimizer"] and section not in notes:
            lines.append(f"note: no optimizer: train_step updates by hand (not called here; step_probe runs it), so no {section} "
                         "section" + (" (no controlled step)" if section == "step" else ""))
            checks.append(check(section, f"packet.{section}", Status.PASS, lines[-1]))
        elif absent and section not in notes:
            checks.append(check(section, f"packet.{section}", Status.SKIPPED,
                                f"needs {', '.join(absent)}: " + "; ".join(HOW[k] for k in absent)))
        elif section in notes or section not in packet:
            why = notes.get(section, "an earlier section could not be captured")
            notes.setdefault(section, why)
            checks.append(check(section, f"packet.{section}", Status.WARN, f"not captured: {why}"))
        else:
            extra = f" (grad after backward not captured: {notes['parameters']})" if section == "parameters" and "parameters" in notes else ""
            checks.append(check(section, f"packet.{section}", Status.PASS, _summary(section, packet) + extra))
    noted = [k for k in ("train_step", "eval_fn", "task_probe") if k in ev]
    checks += [check("batch", "packet.sparse", Status.PASS, line) for line in lines if "sparse" in line]
    details = {"format": "firstdiv.evidence_packet", "version": FORMAT_VERSION, "packet": packet, "missing": missing,
               "not_captured": notes, "notes": lines, "noted_not_called": noted}
    side = ("one forward, backward and optimizer step on a deep copy; the originals untouched"
            + ("; the first batch drawn from a fresh iterator over loader" if packet.get("batch_source", "").startswith("first") else ""))
    reason = ("incomplete training packet: missing " + "; ".join(f"{k} ({v})" for k, v in missing.items())
              + "".join(f"; {k}: {v}" for k, v in notes.items())) if missing else ""
    return compose("evidence_packet", checks, side, details, reason)


def _sparse_notes(packet: dict[str, Any]) -> list[str]:
    """A note per sparse tensor in the batch: described by layout, shape and stored elements, no value statistics."""
    found: list[str] = []

    def walk(d: Any, path: str) -> None:
        if isinstance(d, dict) and "layout" in d and "shape" in d:
            found.append(f"note: {path} is a {d['layout']} tensor {d['shape']} with {d['nnz']} stored elements: its value "
                         "statistics (min, max, mean, nonfinite) are not computed")
        elif isinstance(d, (dict, list)):
            for k, v in (d.items() if isinstance(d, dict) else enumerate(d)):
                walk(v, f"{path}[{k!r}]")

    for key, value in (packet.get("batch") or {}).items():
        walk(value, f"batch {key}")
    return found


def _summary(section: str, packet: dict[str, Any]) -> str:
    if section == "batch":
        b = packet["batch"]
        return f"inputs {_short(b['inputs'])}; targets {_short(b['targets'])}"
    if section == "model":
        m = packet["model"]
        return (f"{m['class']} in {m['mode']} mode ({len(m['modules_in_other_mode'])} modules in the other mode); "
                f"{len(m['trainable'])} trainable, {len(m['frozen'])} frozen parameters")
    if section == "loss":
        lo = packet.get("loss", {})
        value = f"{lo['value']:.6g}" if isinstance(lo.get("value"), float) else f"not a scalar ({lo.get('problem')})"
        return f"loss {value}, requires_grad {lo.get('requires_grad')}, grad_fn {lo.get('grad_fn')}"
    if section == "parameters":
        ps = packet["parameters"].values()
        states = [p.get("grad_after_backward", p["grad_now"])["state"] for p in ps]
        return f"{len(states)} parameters; grad states " + ", ".join(f"{s}: {states.count(s)}" for s in sorted(set(states)))
    if section == "optimizer":
        o = packet["optimizer"]
        return (f"{o['class']}, {len(o['groups'])} group(s), lr {o['lr']}; owns {o['owned']} tensors, "
                f"{len(o.get('stale', []))} stale, {len(o.get('trainable_not_owned', []))} trainable not owned")
    s = packet.get("step", {})
    return f"one {s.get('optimizer')} step on a copy moved {s.get('moved')} of {s.get('parameters')} parameters"


def _short(d: Any) -> str:
    if isinstance(d, dict) and "shape" in d:
        rng = f" in [{d['min']:.4g}, {d['max']:.4g}]" if d.get("min") is not None else ""
        return f"{d['shape']} {d['dtype']} on {d['device']}{rng}"
    return json.dumps(d)[:120]


def save_packet(report: Report, path: str | Path) -> Path:
    """Write an evidence packet report to ``path`` as JSON (the whole report: findings, packet, missing)."""
    if not isinstance(report, Report) or report.instrument != "evidence_packet":
        raise InvalidArgument(f"Expected `report` to be an evidence_packet Report but got {type(report).__name__}"
                              + (f" from {report.instrument}" if isinstance(report, Report) else ""))
    out = Path(path)
    out.write_text(report.to_json(indent=2) + "\n", encoding="utf-8")
    return out


def load_packet(path: str | Path) -> Report:
    """Read a packet written by :func:`save_packet`."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("instrument") != "evidence_packet":
        raise InvalidArgument(f"Expected an evidence_packet JSON file but {path} holds {data.get('instrument')!r}")
    return Report.from_dict(data)
