"""What the four_structures helpers share: the audit's inputs, a finding with its divergence, and the
grouping of tensor names by the module that holds them (one finding per module and cause)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check, check
from .._core.python_graph import Hidden, Registry
from ._confirm import StepRun, step_once

LISTED = 8  # names listed in evidence before eliding


@dataclass
class Audit:
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    reg: Registry
    hidden: list[Hidden]
    aliases: int
    reached: dict[int, torch.Tensor] | None
    autograd_reason: str
    owned: list[tuple[int, int, torch.Tensor]]  # (group, index, tensor), optimizer order
    declared: dict[int, str] = field(default_factory=dict)  # id -> name of parameters declared frozen
    notes: list[str] = field(default_factory=list)
    owners: list[str] = field(default_factory=list)  # per group of ``owned``: the optimizer holding it, in the user's name
    ran: set[str] | None = None  # paths of the hidden entries whose modules ran in the forward pass (None: not run)
    batch: Any = None
    loss_fn: Any = None
    train_step: Any = None
    opts: list[torch.optim.Optimizer] = field(default_factory=list)  # the owners, the optimizer passed first
    opt_of_group: list[int] = field(default_factory=list)  # per group of ``owned``: its optimizer's index in ``opts``
    _step: StepRun | None = None

    def step_run(self) -> StepRun | None:
        """One observed call of ``train_step`` (None without one), run the first time a finding needs it."""
        if self.train_step is None:
            return None
        if self._step is None:
            self._step = step_once(self.model, self.optimizer, self.train_step, self.opts)
        return self._step

    def owner_indices(self, pid: int) -> set[int]:
        """The indices in ``opts`` of the optimizers owning the tensor with this id."""
        return {self.opt_of_group[g] for g, _, t in self.owned if id(t) == pid and g < len(self.opt_of_group)}

    @property
    def owned_ids(self) -> Counter:
        return Counter(id(t) for _, _, t in self.owned)

    def hidden_ids(self) -> set[int]:
        return {id(t) for h in self.hidden for t in h.tensors()}

    def stale(self) -> list[tuple[int, int, torch.Tensor]]:
        known = set(self.reg.params) | set(self.reg.buffers) | self.hidden_ids()
        if isinstance(self.loss_fn, torch.nn.Module):  # a loss module's own parameters (proxies, class centres)
            known |= {id(p) for p in self.loss_fn.parameters()}
        out, seen = [], set()
        for g, i, t in self.owned:
            if id(t) not in known and id(t) not in seen:
                seen.add(id(t))
                out.append((g, i, t))
        return out

    def ownership_note(self) -> str:
        return f"optimizer owns {len(self.owned_ids)} tensors, {len(self.stale())} of them no longer in the model"


def shape(t: torch.Tensor) -> list[int]:
    return [int(s) for s in t.shape]


def few(names: list[str]) -> list[str]:
    return names[:LISTED] + ([f"... {len(names) - LISTED} more"] if len(names) > LISTED else [])


def listed(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f", ... {len(names) - n} more" if len(names) > n else "")


def severity(s: Status) -> int:
    return {Status.SKIPPED: 0, Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}[s]


def _module_path(name: str) -> list[str]:
    return name.split(".")[:-1]


def common_module(names: list[str]) -> str:
    """The deepest module holding every named tensor ('' for the model itself)."""
    return ".".join(os.path.commonprefix([_module_path(n) for n in names])) if names else ""


def modules_of(names: list[str]) -> list[str]:
    """The modules one level below the common ancestor that hold the named tensors, in order ('(model)' for
    tensors of the model itself): 18 tensors of body.0.0 ... body.5.1 -> body.0 ... body.5."""
    depth = len(os.path.commonprefix([_module_path(n) for n in names])) + 1
    return list(dict.fromkeys(".".join(_module_path(n)[:depth]) or "(model)" for n in names))


def where_of(names: list[str]) -> str:
    """Where a finding about these tensors points: their common module, else the first one's module (or name)."""
    common = common_module(names)
    if common:
        return common
    first = modules_of(names[:1])[0]
    return names[0] if first == "(model)" else first


HINTS = {
    "structure.unregistered_tensor": ("registered as nn.Parameter (or a buffer)",
                                      "register it: self.{attr} = nn.Parameter(...) (or self.register_buffer)"),
    "structure.unregistered_module": ("modules held in nn.ModuleList / nn.ModuleDict",
                                      "self.{attr} = nn.ModuleList([...]) (nn.ModuleDict for a dict)"),
    "optimizer.owns_only_frozen": ("the optimizer owns the parameters that train",
                                   ("build the optimizer over the trainable parameters: torch.optim.X(filter(lambda p: "
                                    "p.requires_grad, model.parameters()), ...)")),
    "optimizer.missing_parameter": ("every trainable parameter owned by the optimizer",
                                    "build the optimizer from model.parameters() after the model is complete"),
    "optimizer.stale_parameter": ("the optimizer owns the model's current parameter objects",
                                  "rebuild the optimizer (or add_param_group) after replacing a module"),
    "structure.duplicate_in_optimizer": ("each tensor owned once", "remove the duplicate from the param groups"),
    "optimizer.multiple_owners": ("each parameter owned by one optimizer the step steps",
                                  "build each optimizer over its own model's parameters (e.g. optimizerG over netG.parameters())"),
    "structure.device_mismatch": ("optimizer state on its parameter's device",
                                  "move the model before building or loading the optimizer"),
    "frozen.unfrozen_by_train": ("parameters declared frozen keep requires_grad=False across model.train()/eval()",
                                 "do not set requires_grad in train(); freeze once after building the model"),
    "frozen.requires_grad": ("parameters declared frozen have requires_grad=False",
                             "call .requires_grad_(False) on them before building the optimizer"),
    "frozen.undeclared": ("every parameter with requires_grad=False is declared frozen",
                          ("find what set requires_grad=False on it (a freeze loop over the wrong modules), or add it "
                           "to frozen= if freezing it is meant")),
}


def finding(where: str, kind: str, status: Status, message: str, evidence: dict | None = None) -> Check:
    """A finding; a failing one also carries its divergence: what its kind expects and how to fix it, the
    message being what was observed."""
    if status is not Status.FAIL:
        return check(where, kind, status, message, evidence)
    expected, hint = HINTS.get(kind, ("consistent structures", ""))
    attr = where.split("[")[0].rsplit(".", 1)[-1]
    if kind == "structure.unregistered_tensor" and "[" in where:
        hint = "hold them in nn.ParameterList / nn.ParameterDict: self.{attr} = nn.ParameterList([...])"
    return check(where, kind, status, message, evidence, expected=expected, observed=message,
                 hint=hint.replace("{attr}", attr))


def note(a: Audit, where: str, kind: str, message: str, evidence: dict | None = None) -> Check:
    """A NOTE: PASS, its message starting with 'note: ', also kept for ``report.details['notes']``."""
    line = f"note: {message}"
    a.notes.append(line)
    return check(where, kind, Status.PASS, line, evidence)
