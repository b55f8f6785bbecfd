"""The PYTHON, REGISTERED and AUTOGRAD structures: what Python reaches outside the registry, what PyTorch
registered, what the loss's graph reaches."""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check, graph_leaves
from .._core.modes import switches
from .._core.python_graph import Hidden
from ._common import LISTED, Audit, few, finding, shape

# ---- PYTHON ---------------------------------------------------------------------------------------

def hidden_finding(a: Audit, h: Hidden, model_devices: set[torch.device]) -> Check:
    owned = a.owned_ids
    tensors = h.tensors()
    n_owned = sum(1 for t in tensors if id(t) in owned)
    n_reached = None if a.reached is None else sum(1 for t in tensors if id(t) in a.reached)
    if h.tensor is None:
        # a tensor the registry holds by another path (a ParameterList of the blocks' parameters) is not hidden
        registered = a.reg.params.keys() | a.reg.buffers.keys()
        elsewhere = sum(1 for t in tensors if id(t) in registered)
        tensors = [t for t in tensors if id(t) not in registered]
        n_owned = sum(1 for t in tensors if id(t) in owned)
        n_reached = None if a.reached is None else sum(1 for t in tensors if id(t) in a.reached)
        reach = "autograd not checked (no batch/loss_fn)" if n_reached is None else f"{n_reached} reached by autograd"
        return _module_finding(h, tensors, n_owned, n_reached, reach, None if a.ran is None else h.path in a.ran,
                               elsewhere)
    t = h.tensor
    reach = f"reached by autograd: {'not checked' if n_reached is None else ('yes' if n_reached else 'no')}"
    ev = {"shape": shape(t), "dtype": str(t.dtype), "device": str(t.device), "requires_grad": bool(t.requires_grad),
          "owned_by_optimizer": n_owned == 1, "reached_by_autograd": None if n_reached is None else n_reached == 1,
          "aliases": h.aliases}
    if t.requires_grad:
        leaves = graph_leaves([t.grad_fn]) if t.grad_fn is not None else {}
        if t.grad_fn is not None and leaves and all(i in a.reg.params for i in leaves):
            ev["derived_from"] = few([a.reg.params[i][1][0] for i in leaves])
            return finding(h.path, "structure.derived_tensor", Status.PASS,
                          f"{h.path}: computed from {len(leaves)} registered parameters (a cached derived tensor, "
                          "not a separate trainable object)", ev)
        if not n_owned and not n_reached:  # nothing uses it: a stale copy (a parameter deleted from the registry)
            return finding(h.path, "structure.unregistered_tensor", Status.WARN,
                           f"{h.path}: tensor {shape(t)} with requires_grad=True held as a plain attribute, but no "
                           f"optimizer owns it and {'the loss does not reach it' if n_reached == 0 else 'whether the loss reaches it was not checked (give batch and loss_fn)'}: "
                           "nothing trains it or reads it, so it is not shown to be a hidden trainable tensor (a stale "
                           "copy of a parameter replaced by a wrapper?)", ev)
        return finding(h.path, "structure.unregistered_tensor", Status.FAIL,
                      f"{h.path}: tensor {shape(t)} with requires_grad=True held as a plain attribute; not in "
                      f"parameters()/state_dict(), not moved by .to(); owned by optimizer: {'yes' if n_owned else 'no'}; "
                      f"{reach}", ev)
    if model_devices and t.device not in model_devices:
        return finding(h.path, "structure.unregistered_constant", Status.WARN,
                      f"{h.path}: plain tensor {shape(t)} on {t.device} while the parameters are on "
                      f"{sorted(map(str, model_devices))}; .to() will not move it (register_buffer would)", ev)
    return finding(h.path, "structure.unregistered_constant", Status.PASS,
                  f"{h.path}: plain constant tensor {shape(t)} on {t.device}, same device as the parameters "
                  "(it will not follow model.to(); register_buffer if it must)", ev)


def _module_finding(h: Hidden, tensors: list[torch.Tensor], n_owned: int, n_reached: int | None, reach: str,
                    ran: bool | None, elsewhere: int = 0) -> Check:
    """``tensors``: the modules' parameters and buffers the registry does not hold by any path."""
    n_params = sum(1 for t in tensors if isinstance(t, nn.Parameter))
    numel = sum(int(t.numel()) for t in tensors if isinstance(t, nn.Parameter))
    n_buffers = len(tensors) - n_params
    mode_dependent = sum(1 for m in h.modules for s in m.modules() if switches(s))  # eval would compute otherwise
    ev = {"modules": len(h.modules), "parameters": n_params, "parameter_elements": numel,
          "buffers": n_buffers, "tensors": len(tensors), "owned_by_optimizer": n_owned, "reached_by_autograd": n_reached,
          "mode_dependent_modules": mode_dependent, "ran_in_forward": ran, "registered_by_another_path": elsewhere,
          "types": sorted({type(m).__name__ for m in h.modules})}
    if not tensors and not mode_dependent:
        # Nothing that parameters(), .to(), .train()/.eval() or state_dict() would have carried: a helper object
        # (a kernel table, an activation) held as an attribute is not a divergence of the learning structures.
        also = (f" ({elsewhere} of their tensors are registered by another path, e.g. a ParameterList)" if elsewhere
                else "")
        return finding(h.path, "structure.unregistered_module", Status.PASS,
                      f"{h.path}: {len(h.modules)} modules held outside the registry hide nothing: no parameter, "
                      f"no buffer and no module that computes otherwise in eval mode (a Dropout with p > 0, a norm with running "
                      f"statistics, a forward reading self.training){also}", ev)
    if not n_owned and not n_reached and not ran:
        # The premise of a FAIL is that the program uses what is hidden: its forward runs it, the loss reaches it or
        # an optimizer trains it. None holds (or the forward was not run): a copy kept aside, e.g. a saved
        # hyperparameter, is no divergence of the learning structures.
        confirm = ("the forward pass does not run them, the loss's graph reaches none of them and no optimizer owns "
                   "them: a copy kept aside (a saved hyperparameter, a cache)?" if ran is not None else
                   "no optimizer owns them and the forward pass was not run: pass batch and loss_fn to see whether "
                   "the model uses them")
        return finding(h.path, "structure.unregistered_module", Status.WARN,
                      f"{h.path}: {len(h.modules)} modules held outside the registry hold {n_params} parameter tensors "
                      f"({numel} elements) and {n_buffers} buffers, but {confirm}", ev)
    return finding(h.path, "structure.unregistered_module", Status.FAIL,
                  f"{h.path}: {len(h.modules)} modules held outside the registry, hiding {n_params} parameter "
                  f"tensors ({numel} elements), {n_buffers} buffers and {mode_dependent} modules that compute "
                  f"otherwise in eval mode from parameters(), .to(), .train()/.eval() and state_dict(); "
                  f"{n_owned} of {len(tensors)} tensors owned by the optimizer; {reach}", ev)


# ---- REGISTERED ----------------------------------------------------------------------------------

def registered_findings(a: Audit) -> list[Check]:
    reg = a.reg
    tied = [names for _, names in reg.params.values() if len(names) > 1]
    trainable = sum(1 for p, _ in reg.params.values() if p.requires_grad)
    ev = {"parameters": len(reg.params), "trainable": trainable, "frozen": len(reg.params) - trainable,
          "parameter_names": sum(len(n) for _, n in reg.params.values()), "buffers": len(reg.buffers),
          "tied": tied[:LISTED], "plain_attribute_aliases": a.aliases}
    out = [finding("REGISTERED", "structure.registered", Status.PASS,
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
        out.append(finding(first_at[odd], "structure.device_mismatch", Status.WARN,
                          f"{first_at[odd]} is on {odd} while {devices[main]} tensors are on {main} "
                          f"(model spans {len(devices)} devices)",
                          {"devices": {str(d): n for d, n in devices.items()}}))
    return out


# ---- AUTOGRAD ------------------------------------------------------------------------------------

def autograd_findings(a: Audit) -> list[Check]:
    if a.reached is None:
        return [finding("AUTOGRAD", "structure.autograd", Status.SKIPPED, f"not checked: {a.autograd_reason}", {})]
    trainable = [(p, names) for p, names in a.reg.params.values() if p.requires_grad]
    unreached = [names[0] for p, names in trainable if id(p) not in a.reached]
    hidden_reached = sum(1 for h in a.hidden for t in h.tensors() if id(t) in a.reached)
    ev = {"trainable": len(trainable), "reached": len(trainable) - len(unreached), "unreached": few(unreached),
          "hidden_tensors_reached": hidden_reached, "graph_leaves": len(a.reached)}
    out = [finding("AUTOGRAD", "structure.autograd", Status.WARN if unreached else Status.PASS,
                  f"the loss's graph reaches {len(trainable) - len(unreached)} of {len(trainable)} trainable registered "
                  f"parameters and {hidden_reached} tensors held outside the registry", ev)]
    if unreached:
        out.append(finding(unreached[0], "structure.unreached_parameter", Status.WARN,
                          f"{len(unreached)} trainable parameters are registered but the loss does not reach them "
                          f"(first: {unreached[0]}); run reachability to see where the path stops", ev))
    return out
