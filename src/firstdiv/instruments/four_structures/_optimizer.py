"""The OPTIMIZER structure: what the optimizer's param groups own against the model's parameters, one finding
per cause and module, the one that explains the symptom first (an optimizer owning only frozen tensors
before the trainable tensors it does not own; a replaced module's stale tensors named with their
replacements)."""

from __future__ import annotations

from collections import Counter

import torch

from ...report import Status
from .._core.checks import Check
from ._common import Audit, few, finding, listed, modules_of, note, severity, shape, where_of


def _pair_stale(a: Audit, missing: list[tuple[str, torch.Tensor]]) -> dict[str, tuple[int, int, torch.Tensor]]:
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


def optimizer_findings(a: Audit) -> list[Check]:
    if a.optimizer is None:
        return [finding("OPTIMIZER", "structure.optimizer", Status.SKIPPED, "not checked: pass the optimizer", {})]
    owned, stale, note_ = a.owned_ids, a.stale(), a.ownership_note()
    trainable = [(names[0], p) for p, names in a.reg.params.values() if p.requires_grad and id(p) not in a.declared]
    missing = [(n, p) for n, p in trainable if id(p) not in owned]
    pairs = _pair_stale(a, missing)
    ev = {"optimizer_tensors": len(owned), "stale_tensors": len(stale), "stale_shapes": [shape(t) for _, _, t in stale][:8],
          "param_groups": len(a.optimizer.param_groups)}
    only_frozen = _owns_only_frozen(a, missing, note_, ev)
    out = [*only_frozen, *_stale_groups(pairs, dict(missing), note_, ev),
           *_missing_group(a, [(n, p) for n, p in missing if n not in pairs], note_, ev)]
    out += _unpaired(stale, pairs, note_, ev) + _multiple_owners(a, owned) + _duplicates(a, owned)
    out += ([] if only_frozen else _frozen_owned(a, owned)) + _state_devices(a)
    status = max((c.finding.status for c in out), key=severity, default=Status.PASS)
    summary = finding("OPTIMIZER", "structure.optimizer", status,
                      f"{len(trainable) - len(missing)} of {len(trainable)} trainable parameters owned; {note_}",
                      {**ev, "trainable": len(trainable), "missing": len(missing)})
    return [summary, *out]


def _owns_only_frozen(a: Audit, missing: list[tuple[str, torch.Tensor]], note_: str, ev: dict) -> list[Check]:
    """Everything the optimizer owns is frozen while trainable tensors are left out: nothing it owns can move."""
    in_model = {id(t): t for _, _, t in a.owned if id(t) in a.reg.params}
    owned_names = [a.reg.params[i][1][0] for i in in_model]
    frozen = [a.reg.params[i][1][0] for i, t in in_model.items() if not t.requires_grad]
    if not owned_names or len(frozen) != len(owned_names) or not missing:
        return []
    names = [n for n, _ in missing]
    mods = modules_of(names)
    return [finding(frozen[0], "optimizer.owns_only_frozen", Status.FAIL,
                    f"everything the optimizer owns is frozen ({listed(frozen)}): it can never change anything; the "
                    f"{len(names)} trainable tensors ({len(mods)} modules: {listed(mods)}) are not owned ({note_})",
                    {**ev, "owned_frozen": few(frozen), "trainable_not_owned": len(names), "modules": few(mods)})]


def _stale_groups(pairs: dict[str, tuple[int, int, torch.Tensor]], current: dict[str, torch.Tensor], note_: str,
                  ev: dict) -> list[Check]:
    """One finding per replaced module: the old tensors the optimizer still owns and the new ones it does not."""
    by_module: dict[str, list[str]] = {}
    for name in current:
        if name in pairs:
            by_module.setdefault(where_of([name]), []).append(name)
    out = []
    for mod, names in by_module.items():
        old = [f"{shape(pairs[n][2])} at param_groups[{pairs[n][0]}][{pairs[n][1]}]" for n in names]
        new = [f"{n} {shape(current[n])}" for n in names]
        out.append(finding(names[0], "optimizer.stale_parameter", Status.FAIL,
                           f"{mod}: the optimizer owns {len(names)} tensors no longer in the model ({', '.join(old)}) and "
                           f"not the {len(names)} now in their place ({', '.join(new)}): it was built before {mod} was "
                           f"replaced ({note_})",
                           {**ev, "replaced": names, "stale_slots": {n: [pairs[n][0], pairs[n][1]] for n in names}}))
    return out


def _meant_to_train(a: Audit, missing: list[tuple[str, torch.Tensor]]) -> tuple[list[str], list[str], str]:
    """The premise's confirmation, for trainable tensors no optimizer owns: the loss's graph reaches them (the program
    computes their gradient) and one call of train_step, when given, does not move them in another way. Returns the
    confirmed names, the names train_step moves itself, and why the rest are not confirmed ('' if all are)."""
    if a.reached is None:  # the model could not be called as read from the batch: the program's own step can tell
        run = a.step_run() if a.train_step is not None else None
        unknown = f"whether the loss reaches them is not known ({a.autograd_reason})"
        if run is None or run.error:
            return [], [], unknown
        moved = [n for n, p in missing if id(p) in run.moved]
        graded = [n for n, p in missing if id(p) in run.with_grad and n not in moved]
        return graded, moved, "" if len(graded) + len(moved) == len(missing) else unknown
    reached = [(n, p) for n, p in missing if id(p) in a.reached]
    why = "" if len(reached) == len(missing) else "the loss's graph does not reach them, so they get no gradient"
    run = a.step_run() if reached else None
    if run is not None and run.error:
        return [], [], f"whether train_step moves them in another way is not known ({run.error})"
    moved = [n for n, p in reached if run is not None and id(p) in run.moved]
    return [n for n, _ in reached if n not in moved], moved, why


def _missing_group(a: Audit, missing: list[tuple[str, torch.Tensor]], note_: str, ev: dict) -> list[Check]:
    if not missing:
        return []
    confirmed, moved, why = _meant_to_train(a, missing)
    names = confirmed or [n for n, _ in missing if n not in moved]
    out: list[Check] = []
    if moved:
        out.append(note(a, moved[0], "optimizer.missing_parameter", f"no optimizer owns {len(moved)} trainable tensors "
                        f"(first: {moved[0]}), but train_step moves them itself (a hand-written update)",
                        {"moved_by_train_step": few(moved)}))
    if not names:
        return out
    mods, first = modules_of(names), dict(missing)[names[0]]
    text = (f"optimizer does not own {len(names)} trainable tensors in {len(mods)} modules: {listed(mods)} "
            f"(first: {names[0]} {shape(first)}) ({note_})")
    evidence = {**ev, "missing": few(names), "modules": few(mods), "count": len(names)}
    if confirmed:
        moves = "; train_step does not move them in another way" if a.train_step is not None else ""
        how = "the loss reaches them" if a.reached is not None else "train_step's own backward gives them a gradient"
        return [*out, finding(names[0], "optimizer.missing_parameter", Status.FAIL,
                              f"{text}; {how}, so their gradient is computed and never applied{moves}", evidence)]
    return [*out, finding(names[0], "optimizer.missing_parameter", Status.WARN,
                          f"{text}; not confirmed that they are meant to train: {why}; if they are frozen on purpose, "
                          "set requires_grad_(False) or declare them with frozen=", {**evidence, "unconfirmed": why})]


def _unpaired(stale: list, pairs: dict, note_: str, ev: dict) -> list[Check]:
    paired = {id(e[2]) for e in pairs.values()}
    rest = [(g, i, t) for g, i, t in stale if id(t) not in paired]
    if not rest:
        return []
    g, i, _ = rest[0]
    slots = [f"param_groups[{g}][{i}] {shape(t)}" for g, i, t in rest]
    return [finding(f"optimizer.param_groups[{g}][{i}]", "optimizer.stale_parameter", Status.WARN,
                    f"the optimizer owns {len(rest)} tensors that are not in the model: {listed(slots)} ({note_})",
                    {**ev, "slots": [[g, i] for g, i, _ in rest][:8]})]


def _duplicates(a: Audit, owned: Counter) -> list[Check]:
    out, shared = [], _shared(a, owned)
    for pid, count in owned.items():
        if count > 1 and pid not in shared:
            slots = [[g, i] for g, i, t in a.owned if id(t) == pid]
            tensor = next(t for _, _, t in a.owned if id(t) == pid)
            where = a.reg.name(tensor) or f"optimizer.param_groups[{slots[0][0]}][{slots[0][1]}]"
            out.append(finding(where, "structure.duplicate_in_optimizer", Status.FAIL,
                               f"{where}: owned {count} times by the optimizer (slots {slots}); it is updated {count} "
                               "times per step", {"count": count, "slots": slots}))
    return out


def _shared(a: Audit, owned: Counter) -> dict[int, tuple[str, ...]]:
    """Parameters owned by more than one optimizer, each with its owners' names: each step updates them once per
    optimizer, each with its own objective (a GAN's generator optimizer built over the discriminator)."""
    owners: dict[int, list[str]] = {}
    for g, _, t in a.owned:
        if owned[id(t)] > 1 and g < len(a.owners):
            owners.setdefault(id(t), []).append(a.owners[g])
    return {pid: tuple(dict.fromkeys(names)) for pid, names in owners.items() if len(set(names)) > 1}


def _both_step(a: Audit, pids: list[int]) -> tuple[int, str]:
    """The premise's confirmation for shared tensors: in one call of train_step, at least two of their owners step
    while they hold a gradient. How many of ``pids`` that shows, and why not ('' when some)."""
    run = a.step_run()
    if run is None:
        return 0, "train_step was not given"
    if run.error:
        return 0, run.error
    shown = [p for p in pids if len([k for k in a.owner_indices(p) if p in run.graded.get(k, set())]) >= 2]
    return len(shown), "" if shown else ("one call of train_step did not step two of their owners while they held a "
                                         "gradient (owners stepped in different phases or calls?)")


def _by_design(a: Audit, pids: list[int]) -> str:
    """The premise's second half: two owners of the shared tensors own exactly the same tensors (two optimizers over
    one list, a GAN's generator optimizer built over the discriminator's parameters): '' when so, else why the
    sharing may be by design (each owner has parameters of its own beside the shared ones: a shared encoder's two
    objectives; or one owner's tensors are a part of the other's: an extra optimizer for a shared part, SAC-AE's
    encoder optimizer beside the critic's, or an optimizer built over more than its own network)."""
    owners = {k for p in pids for k in a.owner_indices(p)}
    sets = {k: {id(t) for g, _, t in a.owned if g < len(a.opt_of_group) and a.opt_of_group[g] == k} for k in owners}
    if any(sets[i] == sets[j] for i in sets for j in sets if i != j):
        return ""
    if any(sets[i] < sets[j] for i in sets for j in sets if i != j):
        return ("one owner's tensors are all owned by the other too: an extra optimizer for a shared part (an encoder "
                "an auxiliary loss also trains) by design, or an optimizer built over more than its own network")
    return ("each of those optimizers also owns parameters of its own: a shared part trained on two objectives (a "
            "shared encoder) by design, or a slip")


def _multiple_owners(a: Audit, owned: Counter) -> list[Check]:
    by_owners: dict[tuple[str, ...], list[int]] = {}
    for pid, names in _shared(a, owned).items():
        if pid in a.reg.params:
            by_owners.setdefault(names, []).append(pid)
    out = []
    for owners, pids in by_owners.items():
        params = [a.reg.params[p][1][0] for p in pids]
        mods = modules_of(params)
        shown, why = _both_step(a, pids)
        text = (f"{params[0]}: owned by {len(owners)} optimizers ({', '.join(owners)}), with {len(params) - 1} more "
                f"of {type(a.model).__name__}'s parameters ({len(mods)} modules: {listed(mods)})")
        ev = {"owners": list(owners), "parameters": few(params), "count": len(params), "shown_by_train_step": shown}
        design = _by_design(a, pids) if shown else ""
        if design:
            out.append(finding(params[0], "optimizer.multiple_owners", Status.WARN,
                               f"{text}: in one call of train_step two of them stepped while {shown} of these tensors "
                               f"held a gradient, but {design}; not confirmed",
                               {**ev, "unconfirmed": design}))
        elif shown:
            out.append(finding(params[0], "optimizer.multiple_owners", Status.FAIL,
                               f"{text}: in one call of train_step two of them stepped while {shown} of these tensors "
                               f"held a gradient, so every train_step updates them once with each optimizer's objective",
                               ev))
        else:
            out.append(finding(params[0], "optimizer.multiple_owners", Status.WARN,
                               f"{text}: not confirmed that one train_step updates them with more than one: {why}",
                               {**ev, "unconfirmed": why}))
    return out


def _frozen_owned(a: Audit, owned: Counter) -> list[Check]:
    frozen = [(names[0], id(p) in a.declared) for p, names in a.reg.params.values()
              if not p.requires_grad and id(p) in owned]
    undeclared = [n for n, declared in frozen if not declared]
    declared = [n for n, declared in frozen if declared]
    out = []
    if undeclared:
        out.append(finding(undeclared[0], "optimizer.frozen_parameter", Status.WARN,
                           f"{len(undeclared)} parameters with requires_grad=False are owned by the optimizer (first: "
                           f"{undeclared[0]}); they get no gradient, but weight decay or momentum may still move them",
                           {"count": len(undeclared), "names": few(undeclared)}))
    if declared:
        out.append(note(a, declared[0], "optimizer.frozen_parameter",
                        f"the optimizer owns {len(declared)} parameters declared frozen (first: {declared[0]}); with "
                        "requires_grad=False they get no gradient, and torch.optim skips a parameter without one",
                        {"count": len(declared), "names": few(declared)}))
    return out


def _state_devices(a: Audit) -> list[Check]:
    out = []
    for p, state in a.optimizer.state.items():
        bad = {k: str(v.device) for k, v in state.items()
               if torch.is_tensor(v) and v.dim() > 0 and torch.is_tensor(p) and v.device != p.device}
        if bad:
            where = a.reg.name(p) or "optimizer.state"
            out.append(finding(where, "structure.device_mismatch", Status.FAIL,
                               f"{where}: parameter on {p.device} but its optimizer state {sorted(bad)} is on "
                               f"{sorted(set(bad.values()))}", {"parameter_device": str(p.device), "state_devices": bad}))
    return out
