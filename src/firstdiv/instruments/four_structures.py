"""Four-structure audit (appendix section 5, "nn.Module: compare the four structures").

A tensor can require gradients, receive gradients and take part in the forward pass, and still not be
registered, saved, moved by ``model.to(...)`` or owned by the optimizer. This instrument reconciles,
by object identity, for every tensor the model holds:

1. PYTHON: what Python can reach (instance attributes of every module, and plain lists/tuples/dicts
   in them, outside PyTorch's ``_parameters`` / ``_buffers`` / ``_modules`` registries);
2. REGISTERED: what PyTorch registered (``named_parameters`` / ``named_buffers``; tied weights once,
   with all their names);
3. AUTOGRAD: what the autograd graph of one loss reaches (only with ``batch`` and ``loss_fn``);
4. OPTIMIZER: what the optimizer's param groups own.

Findings follow that order, so an unregistered tensor or module list is named before the optimizer
problem it causes. Kinds: ``structure.unregistered_tensor``, ``structure.unregistered_module``,
``structure.unreached_parameter`` (WARN), ``structure.device_mismatch``,
``optimizer.missing_parameter``, ``optimizer.stale_parameter``, ``optimizer.frozen_parameter`` (WARN),
``structure.duplicate_in_optimizer``. Informational checks: ``structure.unregistered_constant`` (a plain
tensor without requires_grad: PASS, WARN when on another device than the parameters) and
``structure.derived_tensor`` (a cached tensor computed from registered parameters: PASS).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..report import Report, Status
from ._core.batch import check_loss_fn, check_model, check_optimizer, compute_loss, loss_problem, split_batch
from ._core.checks import Check, check, compose, graph_leaves
from ._core.python_graph import Hidden, Registry, hidden_modules, python_graph
from ._core.state import guarded
from ._core.user_hooks import reports_user_hooks

__all__ = ["INSTRUMENT", "four_structures", "hidden_modules"]  # hidden_modules: re-exported from _core.python_graph

INSTRUMENT = "four_structures"
_LISTED = 8  # names listed in evidence before eliding


@reports_user_hooks
def four_structures(model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any = None,
                    loss_fn: Any = None) -> Report:
    """Reconcile the four structures of a module (Python, registered, autograd, optimizer) by identity.

    ``batch`` (tuple ``(inputs, targets)`` or dict, see :mod:`firstdiv.instruments._core.batch`) and
    ``loss_fn`` ``(outputs, targets) -> loss`` are optional; with both, one forward pass and loss run on
    your model inside a guard (no backward, no step) to see what the autograd graph reaches.
    ``optimizer`` may be None (the OPTIMIZER structure is then SKIPPED).
    """
    check_model(model)
    if optimizer is not None:
        check_optimizer(optimizer)
    if loss_fn is not None:
        check_loss_fn(loss_fn)
    if batch is not None:
        batch = split_batch(batch, model)
    reg = Registry.of(model)
    hidden, aliases = python_graph(model, reg)
    reached, reason = None, "pass both batch and loss_fn to see what the autograd graph reaches"
    if batch is not None and loss_fn is not None:
        reached, reason = _autograd(model, optimizer, batch, loss_fn, hidden)
    owned = [(g, i, t) for g, group in enumerate(optimizer.param_groups if optimizer is not None else [])
             for i, t in enumerate(group["params"])]
    audit = _Audit(model, optimizer, reg, hidden, aliases, reached, reason, owned)
    return _report(audit)


def _shape(t: torch.Tensor) -> list[int]:
    return [int(s) for s in t.shape]


def _few(names: list[str]) -> list[str]:
    return names[:_LISTED] + ([f"... {len(names) - _LISTED} more"] if len(names) > _LISTED else [])


def _autograd(model: nn.Module, optimizer: Any, batch: Any, loss_fn: Any,
              hidden: list[Hidden]) -> tuple[dict[int, torch.Tensor] | None, str]:
    """Leaves the loss's graph reaches, or None and why it could not be built. Runs one forward pass and
    the loss on the user's model inside ``guarded`` (no backward), so nothing it changes survives."""
    modules = [m for h in hidden for m in h.modules]
    try:
        with guarded(model, optimizer, *modules), torch.enable_grad():
            _, loss = compute_loss(model, batch, loss_fn)
            if not torch.is_tensor(loss):
                return None, loss_problem(loss) or "loss_fn did not return a tensor"
            return graph_leaves([loss.grad_fn] if loss.grad_fn is not None else []), ""
    except Exception as exc:  # noqa: BLE001 - user code failed; the other three structures still stand
        return None, f"forward pass or loss_fn raised {type(exc).__name__}: {exc}"


@dataclass
class _Audit:
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    reg: Registry
    hidden: list[Hidden]
    aliases: int
    reached: dict[int, torch.Tensor] | None
    autograd_reason: str
    owned: list[tuple[int, int, torch.Tensor]]  # (group, index, tensor), optimizer order

    @property
    def owned_ids(self) -> Counter:
        return Counter(id(t) for _, _, t in self.owned)

    def hidden_ids(self) -> set[int]:
        return {id(t) for h in self.hidden for t in h.tensors()}

    def stale(self) -> list[tuple[int, int, torch.Tensor]]:
        known = set(self.reg.params) | set(self.reg.buffers) | self.hidden_ids()
        out, seen = [], set()
        for g, i, t in self.owned:
            if id(t) not in known and id(t) not in seen:
                seen.add(id(t))
                out.append((g, i, t))
        return out

    def ownership_note(self) -> str:
        n_unique = len(self.owned_ids)
        return f"optimizer owns {n_unique} tensors, {len(self.stale())} of them no longer in the model"


# ---- PYTHON ---------------------------------------------------------------------------------------

def _hidden_finding(a: _Audit, h: Hidden, model_devices: set[torch.device]) -> Check:
    owned = a.owned_ids
    tensors = h.tensors()
    n_owned = sum(1 for t in tensors if id(t) in owned)
    n_reached = None if a.reached is None else sum(1 for t in tensors if id(t) in a.reached)
    if h.tensor is None:
        reach = "autograd not checked (no batch/loss_fn)" if n_reached is None else f"{n_reached} reached by autograd"
        return _module_finding(h, tensors, n_owned, n_reached, reach)
    t = h.tensor
    reach = f"reached by autograd: {'not checked' if n_reached is None else ('yes' if n_reached else 'no')}"
    ev = {"shape": _shape(t), "dtype": str(t.dtype), "device": str(t.device), "requires_grad": bool(t.requires_grad),
          "owned_by_optimizer": n_owned == 1, "reached_by_autograd": None if n_reached is None else n_reached == 1,
          "aliases": h.aliases}
    if t.requires_grad:
        leaves = graph_leaves([t.grad_fn]) if t.grad_fn is not None else {}
        if t.grad_fn is not None and leaves and all(i in a.reg.params for i in leaves):
            ev["derived_from"] = _few([a.reg.params[i][1][0] for i in leaves])
            return _check(h.path, "structure.derived_tensor", Status.PASS,
                          f"{h.path}: computed from {len(leaves)} registered parameters (a cached derived tensor, "
                          "not a separate trainable object)", ev)
        return _check(h.path, "structure.unregistered_tensor", Status.FAIL,
                      f"{h.path}: tensor {_shape(t)} with requires_grad=True held as a plain attribute; not in "
                      f"parameters()/state_dict(), not moved by .to(); owned by optimizer: {'yes' if n_owned else 'no'}; "
                      f"{reach}", ev)
    if model_devices and t.device not in model_devices:
        return _check(h.path, "structure.unregistered_constant", Status.WARN,
                      f"{h.path}: plain tensor {_shape(t)} on {t.device} while the parameters are on "
                      f"{sorted(map(str, model_devices))}; .to() will not move it (register_buffer would)", ev)
    return _check(h.path, "structure.unregistered_constant", Status.PASS,
                  f"{h.path}: plain constant tensor {_shape(t)} on {t.device}, same device as the parameters "
                  "(it will not follow model.to(); register_buffer if it must)", ev)


def _module_finding(h: Hidden, tensors: list[torch.Tensor], n_owned: int, n_reached: int | None, reach: str) -> Check:
    n_params = sum(1 for m in h.modules for _ in m.parameters())
    numel = sum(int(p.numel()) for m in h.modules for p in m.parameters())
    mode_dependent = sum(1 for m in h.modules for s in m.modules()
                         if isinstance(s, (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)))
    ev = {"modules": len(h.modules), "parameters": n_params, "parameter_elements": numel,
          "tensors": len(tensors), "owned_by_optimizer": n_owned, "reached_by_autograd": n_reached,
          "mode_dependent_modules": mode_dependent, "types": sorted({type(m).__name__ for m in h.modules})}
    status = Status.FAIL if tensors or mode_dependent else Status.WARN
    return _check(h.path, "structure.unregistered_module", status,
                  f"{h.path}: {len(h.modules)} modules held outside the registry, hiding {n_params} parameter "
                  f"tensors ({numel} elements) and {mode_dependent} Dropout/BatchNorm modules from parameters(), "
                  f".to(), .train()/.eval() and state_dict(); {n_owned} of {len(tensors)} tensors owned by the "
                  f"optimizer; {reach}", ev)


# ---- REGISTERED ----------------------------------------------------------------------------------

def _registered_findings(a: _Audit) -> list[Check]:
    reg = a.reg
    tied = [names for _, names in reg.params.values() if len(names) > 1]
    trainable = sum(1 for p, _ in reg.params.values() if p.requires_grad)
    ev = {"parameters": len(reg.params), "trainable": trainable, "frozen": len(reg.params) - trainable,
          "parameter_names": sum(len(n) for _, n in reg.params.values()), "buffers": len(reg.buffers),
          "tied": tied[:_LISTED], "plain_attribute_aliases": a.aliases}
    out = [_check("REGISTERED", "structure.registered", Status.PASS,
                  f"{len(reg.params)} parameter tensors ({trainable} trainable, {len(tied)} tied groups counted once), "
                  f"{len(reg.buffers)} buffers", ev)]
    devices = Counter()
    first_at: dict[torch.device, str] = {}
    for t, names in (*reg.params.values(), *reg.buffers.values()):
        devices[t.device] += 1
        first_at.setdefault(t.device, names[0])
    if len(devices) > 1:
        main = devices.most_common(1)[0][0]
        odd = next(d for d in devices if d != main)
        out.append(_check(first_at[odd], "structure.device_mismatch", Status.WARN,
                          f"{first_at[odd]} is on {odd} while {devices[main]} tensors are on {main} "
                          f"(model spans {len(devices)} devices)",
                          {"devices": {str(d): n for d, n in devices.items()}}))
    return out


# ---- AUTOGRAD ------------------------------------------------------------------------------------

def _autograd_findings(a: _Audit) -> list[Check]:
    if a.reached is None:
        return [_check("AUTOGRAD", "structure.autograd", Status.SKIPPED, f"not checked: {a.autograd_reason}", {})]
    trainable = [(p, names) for p, names in a.reg.params.values() if p.requires_grad]
    unreached = [names[0] for p, names in trainable if id(p) not in a.reached]
    hidden_reached = sum(1 for h in a.hidden for t in h.tensors() if id(t) in a.reached)
    ev = {"trainable": len(trainable), "reached": len(trainable) - len(unreached), "unreached": _few(unreached),
          "hidden_tensors_reached": hidden_reached, "graph_leaves": len(a.reached)}
    out = [_check("AUTOGRAD", "structure.autograd", Status.WARN if unreached else Status.PASS,
                  f"the loss's graph reaches {len(trainable) - len(unreached)} of {len(trainable)} trainable registered "
                  f"parameters and {hidden_reached} tensors held outside the registry", ev)]
    if unreached:
        out.append(_check(unreached[0], "structure.unreached_parameter", Status.WARN,
                          f"{len(unreached)} trainable parameters are registered but the loss does not reach them "
                          f"(first: {unreached[0]}); run reachability to see where the path stops", ev))
    return out


# ---- OPTIMIZER -----------------------------------------------------------------------------------

def _pair_stale(a: _Audit, missing: list[tuple[str, torch.Tensor]]) -> dict[str, tuple[int, int, torch.Tensor]]:
    """Match each stale optimizer tensor to the current parameter in its slot: by name when the optimizer
    records ``param_names``, else by shape, else by order among tensors of the same rank."""
    stale, pairs = list(a.stale()), {}
    groups = a.optimizer.param_groups if a.optimizer is not None else []
    for g, i, t in list(stale):
        names = groups[g].get("param_names") if g < len(groups) else None
        name = names[i] if isinstance(names, (list, tuple)) and i < len(names) else None
        if name is not None and any(n == name for n, _ in missing) and name not in pairs:
            pairs[name] = (g, i, t)
            stale.remove((g, i, t))
    for same in (lambda s, p: s.shape == p.shape, lambda s, p: s.dim() == p.dim()):
        for name, p in missing:
            match = next((e for e in stale if name not in pairs and same(e[2], p)), None)
            if match is not None:
                pairs[name] = match
                stale.remove(match)
    return pairs


def _optimizer_findings(a: _Audit) -> list[Check]:
    if a.optimizer is None:
        return [_check("OPTIMIZER", "structure.optimizer", Status.SKIPPED, "not checked: pass the optimizer", {})]
    reg, owned, stale = a.reg, a.owned_ids, a.stale()
    note = a.ownership_note()
    trainable = [(names[0], p) for p, names in reg.params.values() if p.requires_grad]
    missing = [(n, p) for n, p in trainable if id(p) not in owned]
    pairs = _pair_stale(a, missing)
    stale_shapes = [_shape(t) for _, _, t in stale]
    ev_base = {"optimizer_tensors": len(owned), "stale_tensors": len(stale), "stale_shapes": stale_shapes[:_LISTED],
               "param_groups": len(a.optimizer.param_groups)}
    out: list[Check] = []
    for name, p in missing:
        if name in pairs:
            g, i, old = pairs[name]
            out.append(_check(name, "optimizer.stale_parameter", Status.FAIL,
                              f"{name}: not owned by the optimizer, which still holds an older tensor {_shape(old)} in "
                              f"its place (param_groups[{g}][{i}]) ({note})", {**ev_base, "stale_slot": [g, i]}))
        else:
            out.append(_check(name, "optimizer.missing_parameter", Status.FAIL,
                              f"{name}: trainable {_shape(p)} but not owned by the optimizer ({note})",
                              {**ev_base, "shape": _shape(p)}))
    paired = {id(e[2]) for e in pairs.values()}
    for g, i, t in stale:
        if id(t) not in paired:
            out.append(_check(f"optimizer.param_groups[{g}][{i}]", "optimizer.stale_parameter", Status.WARN,
                              f"optimizer tensor {_shape(t)} at param_groups[{g}][{i}] is not in the model ({note})", ev_base))
    out += _duplicates(a, owned) + _frozen(a, owned) + _state_devices(a)
    status = max((c.finding.status for c in out), key=_severity, default=Status.PASS)
    summary = _check("OPTIMIZER", "structure.optimizer", status,
                     f"{len(trainable) - len(missing)} of {len(trainable)} trainable parameters owned; {note}",
                     {**ev_base, "trainable": len(trainable), "missing": len(missing)})
    return [summary, *out]


def _duplicates(a: _Audit, owned: Counter) -> list[Check]:
    out = []
    for pid, count in owned.items():
        if count > 1:
            slots = [[g, i] for g, i, t in a.owned if id(t) == pid]
            tensor = next(t for _, _, t in a.owned if id(t) == pid)
            where = a.reg.name(tensor) or f"optimizer.param_groups[{slots[0][0]}][{slots[0][1]}]"
            out.append(_check(where, "structure.duplicate_in_optimizer", Status.FAIL,
                              f"{where}: owned {count} times by the optimizer (slots {slots}); it is updated {count} "
                              "times per step", {"count": count, "slots": slots}))
    return out


def _frozen(a: _Audit, owned: Counter) -> list[Check]:
    frozen = [names[0] for p, names in a.reg.params.values() if not p.requires_grad and id(p) in owned]
    if not frozen:
        return []
    return [_check(frozen[0], "optimizer.frozen_parameter", Status.WARN,
                   f"{len(frozen)} parameters with requires_grad=False are owned by the optimizer (first: {frozen[0]}); "
                   "they get no gradient, but weight decay or momentum may still move them",
                   {"count": len(frozen), "names": _few(frozen)})]


def _state_devices(a: _Audit) -> list[Check]:
    out = []
    for p, state in a.optimizer.state.items():
        bad = {k: str(v.device) for k, v in state.items()
               if torch.is_tensor(v) and v.dim() > 0 and torch.is_tensor(p) and v.device != p.device}
        if bad:
            where = a.reg.name(p) or "optimizer.state"
            out.append(_check(where, "structure.device_mismatch", Status.FAIL,
                              f"{where}: parameter on {p.device} but its optimizer state {sorted(bad)} is on "
                              f"{sorted(set(bad.values()))}", {"parameter_device": str(p.device), "state_devices": bad}))
    return out


def _severity(s: Status) -> int:
    return {Status.SKIPPED: 0, Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}[s]


# ---- the report ------------------------------------------------------------------------------------

_HINTS = {
    "structure.unregistered_tensor": ("registered as nn.Parameter (or a buffer)",
                                      "register it: self.{attr} = nn.Parameter(...) (or self.register_buffer)"),
    "structure.unregistered_module": ("modules held in nn.ModuleList / nn.ModuleDict",
                                      "self.{attr} = nn.ModuleList([...]) (nn.ModuleDict for a dict)"),
    "optimizer.missing_parameter": ("every trainable parameter owned by the optimizer",
                                    "build the optimizer from model.parameters() after the model is complete"),
    "optimizer.stale_parameter": ("the optimizer owns the model's current parameter objects",
                                  "rebuild the optimizer (or add_param_group) after replacing a module"),
    "structure.duplicate_in_optimizer": ("each tensor owned once", "remove the duplicate from the param groups"),
    "structure.device_mismatch": ("optimizer state on its parameter's device",
                                  "move the model before building or loading the optimizer"),
}


_STRUCTURES = ("PYTHON", "REGISTERED", "AUTOGRAD", "OPTIMIZER")  # the summary rows; the divergence is an item


def _check(where: str, kind: str, status: Status, message: str, evidence: dict | None = None) -> Check:
    """A finding; a failing one also carries its divergence: what its kind expects and how to fix it, the
    message being what was observed."""
    if status is not Status.FAIL:
        return check(where, kind, status, message, evidence)
    expected, hint = _HINTS.get(kind, ("consistent structures", ""))
    attr = where.split("[")[0].rsplit(".", 1)[-1]
    if kind == "structure.unregistered_tensor" and "[" in where:
        hint = "hold them in nn.ParameterList / nn.ParameterDict: self.{attr} = nn.ParameterList([...])"
    return check(where, kind, status, message, evidence, expected=expected, observed=message,
                 hint=hint.replace("{attr}", attr))


def _report(a: _Audit) -> Report:
    devices = {t.device for t, _ in (*a.reg.params.values(), *a.reg.buffers.values())}
    python = [_hidden_finding(a, h, devices) for h in a.hidden]
    py_status = max((c.finding.status for c in python), key=_severity, default=Status.PASS)
    summary = _check("PYTHON", "structure.python", py_status,
                     f"{len(a.hidden)} objects held as plain attributes outside the registry; "
                     f"{a.aliases} plain attributes alias registered objects", {"hidden": len(a.hidden), "aliases": a.aliases})
    checks = [summary, *python, *_registered_findings(a), *_autograd_findings(a), *_optimizer_findings(a)]
    side = ("one forward pass and loss on your model inside a guard (no backward); every value, mode and RNG state "
            "restored" if a.reached is not None else "none")
    details = {"python": [h.path for h in a.hidden], "parameters": len(a.reg.params), "buffers": len(a.reg.buffers),
               "optimizer_tensors": len(a.owned_ids), "stale_tensors": len(a.stale()) if a.optimizer is not None else 0,
               "autograd_leaves": None if a.reached is None else len(a.reached)}
    return compose(INSTRUMENT, checks, side, details, diverges=lambda c: c.finding.where not in _STRUCTURES)
