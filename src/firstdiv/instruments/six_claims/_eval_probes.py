"""What the EVALUATION claim observes while ``eval_fn`` runs: which mode-dependent modules ran in training mode (on the
model's copy and on every module ``eval_fn`` reaches through its closure, such as an EMA copy), whether two calls on the
same batch agree, and whether the model's eval-mode output on the batch goes non-finite where training mode does not."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .._core.batch import forward, fresh
from .._core.closure import closure_state
from .._core.copying import model_copy
from .._core.modes import drop_rate, mode_dependent, set_mode
from ._model_probes import flat
from ._written_dropout import user_site

REPEAT_RTOL = 1e-5  # two evaluations of the same batch agree to this (float reductions, not sampling noise)


@dataclasses.dataclass
class EvalRun:
    train: list[str]  # mode-dependent modules that ran in training mode, in the user's names
    evald: list[str]
    calls: int  # calls of the model's copy or of a module eval_fn reaches, per call of eval_fn
    results: list[Any]  # what each call of eval_fn returned
    owners: dict[str, str]  # module name -> the closure object it belongs to (label, class name)
    masks: int = 0  # random masks drawn inside the model's forward (dropout in training mode, bernoulli: a drop path)
    drop_draws: dict[str, int] = dataclasses.field(default_factory=dict)  # random draws inside an eval-mode module
    # built with a drop rate (a drop path called with training=True), by module name
    mask_sites: dict = dataclasses.field(default_factory=dict)  # (file, line) of the user's code -> masks drawn there
    masks_outside: int = 0  # bernoulli draws while no module of the model ran: eval_fn's data or sampling, not a mask
    written: list[str] = dataclasses.field(default_factory=list)  # the model's tensors eval_fn changed (state_dict)


class _Masks(TorchDispatchMode):
    """Counts the random masks a computation draws inside the model's forward: ``native_dropout`` in training mode and
    ``bernoulli`` (what ``F.dropout(x, p)`` without ``training=`` and a stochastic depth's drop path run). The mode is
    active only while a module of the model or of one eval_fn reaches runs (``depth`` > 0): what eval_fn computes
    around the model (a probe classifier fitted on features, metrics) runs at full speed. Random numbers drawn while no
    module runs (a dataset that binarizes its images, sampling in eval_fn) are no mask of the model: ``outside`` counts
    the stretches between the model's calls in which the default generator moved."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.outside = 0
        self.depth = 0
        self.inside: list[str] = []  # the eval-mode modules built with a drop rate now running, innermost last
        self.drop_draws: dict[str, int] = {}
        self.sites: dict = {}
        self._rng: torch.Tensor | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = getattr(func, "overloadpacket", None)
        if packet in (torch.ops.aten.bernoulli, torch.ops.aten.bernoulli_) or (
                packet is torch.ops.aten.native_dropout and (args[2] if len(args) > 2 else kwargs.get("train"))):
            self.count += 1
            site = user_site()
            self.sites[site] = self.sites.get(site, 0) + 1
        if self.inside and packet in _DRAWS and not (packet is torch.ops.aten.native_dropout and not (
                args[2] if len(args) > 2 else kwargs.get("train"))):
            self.drop_draws[self.inside[-1]] = self.drop_draws.get(self.inside[-1], 0) + 1
        return func(*args, **kwargs)

    def begin(self) -> None:
        """A stretch outside the model starts (eval_fn is called)."""
        self._rng = torch.random.get_rng_state()

    def end(self) -> None:
        """The stretch outside the model ends: count it where the default generator moved in it."""
        if self._rng is not None and not torch.equal(self._rng, torch.random.get_rng_state()):
            self.outside += 1
        self._rng = None

    def close(self) -> None:
        """Leave the mode if a module's forward raised past its hooks."""
        if self.depth:
            self.depth = 0
            self.__exit__(None, None, None)

    def hooks(self, name: str, m: nn.Module) -> list[Any]:
        """Enter/leave hooks marking ``m`` (built with a drop rate) as running while it is in eval mode."""
        def enter(mod: nn.Module, _i: Any) -> None:
            self.inside.append(name if not mod.training else "")

        def leave(_m: nn.Module, _i: Any, _o: Any) -> None:
            if self.inside:
                self.inside.pop()
        return [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]

    def running(self, m: nn.Module) -> list[Any]:
        """Hooks keeping ``depth`` (how many modules of the model are running now), entering the mode as the first
        starts and leaving it as the last returns."""
        def enter(_m: nn.Module, _i: Any) -> None:
            if not self.depth:
                self.end()
                self.__enter__()
            self.depth += 1

        def leave(_m: nn.Module, _i: Any, _o: Any) -> None:
            if self.depth:
                self.depth -= 1
                if not self.depth:
                    self.__exit__(None, None, None)
                    self.begin()
        return [m.register_forward_pre_hook(enter), m.register_forward_hook(leave, always_call=True)]


_DRAWS = (torch.ops.aten.bernoulli, torch.ops.aten.bernoulli_, torch.ops.aten.rand, torch.ops.aten.rand_like,
          torch.ops.aten.uniform_, torch.ops.aten.native_dropout)


def _names(fn: Any) -> dict[int, str]:
    """The variable names under which ``fn`` holds objects: closure cells and the globals it names."""
    f = getattr(fn, "func", fn)
    f = getattr(f, "__func__", f)
    if not isinstance(f, types.FunctionType):
        return {}
    out: dict[int, str] = {}
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        try:
            out.setdefault(id(cell.cell_contents), name)
        except ValueError:  # an empty cell
            continue
    for name in f.__code__.co_names:
        if name in f.__globals__:
            out.setdefault(id(f.__globals__[name]), name)
    return out


def closure_modules(eval_fn: Any, model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules ``eval_fn`` reaches other than its ``model`` argument (the user's model itself included: an eval_fn may
    run it instead of its argument), labelled by the variable holding them; a submodule of another one is dropped."""
    names = _names(eval_fn)
    found = [m for m in closure_state(eval_fn) if isinstance(m, nn.Module)]
    inner = {id(s) for m in found for s in m.modules() if s is not m}
    return [(names.get(id(m), type(m).__name__), m) for m in found if id(m) not in inner]


def is_ema(m: nn.Module) -> bool:
    kind = type(m).__name__.lower()
    return isinstance(m, torch.optim.swa_utils.AveragedModel) or "ema" in kind or "averaged" in kind


def _hook(roots: list[tuple[str, nn.Module]], seen: dict[str, bool], calls: list[int]) -> list[Any]:
    handles = []
    for label, root in roots:
        names = [(".".join(x for x in (label, n) if x), m) for n, m in mode_dependent(root)]
        handles += [m.register_forward_pre_hook(lambda mod, _i, n=n: seen.__setitem__(n, seen.get(n, False) or mod.training))
                    for n, m in names]

        def count(top: bool) -> None:
            calls[0] = calls[0] + 1 if top else max(calls[0], 1)
        # a call of any submodule counts (an EMA's eval_fn may call ``ema.module(x)``, skipping the root)
        handles += [m.register_forward_pre_hook(lambda _m, _i, top=(n == ""): count(top)) for n, m in root.named_modules()]
    return handles


def run_eval(model: nn.Module, batch: Any, eval_fn: Any, train_first: bool, repeat: int = 1) -> EvalRun:
    """eval_fn on a deep copy of the model (``repeat`` times on the same batch), the modules its closure reaches hooked
    too; the caller restores those (they are the user's objects). Where the closure holds the model or parts of it (an
    eval_fn that calls ``embedding_net.eval()`` and then runs its ``model`` argument, which wraps that network; one
    that reads the ``last_loss`` its forward stored on the model it closes over), a copy would split what the program
    keeps together: eval_fn runs on the user's model itself, restored by the caller."""
    others = closure_modules(eval_fn, model)
    inside = {id(s) for s in model.modules()}  # the model itself too: an eval_fn reading what its forward stored on it
    probe = model if any(id(m) in inside for _, m in others) else model_copy(model)
    others = [(label, m) for label, m in others if id(m) not in inside] if probe is model else others
    if train_first:
        for m in (probe, *(m for _, m in others)):
            set_mode(m, True)
    seen: dict[str, bool] = {}
    calls = [0]
    handles = _hook([("", probe), *others], seen, calls)
    masks = _Masks()
    handles += [h for label, root in [("", probe), *others] for n, m in root.named_modules() if drop_rate(m) > 0
                for h in masks.hooks(f"{label}.{n}".strip("."), m)]
    handles += [h for _, root in [("", probe), *others] for m in root.modules() for h in masks.running(m)]
    before = {k: v.detach().clone() for k, v in probe.state_dict().items() if torch.is_tensor(v)}
    try:
        masks.begin()
        results = [eval_fn(probe, fresh(batch)) for _ in range(repeat)]  # eval_fn may write the batch
        masks.end()
    finally:
        masks.close()
        for h in handles:
            h.remove()
    owners = {f"{label}.": f"{'the EMA copy ' if is_ema(m) else ''}{label} ({type(m).__name__})" for label, m in others}
    return EvalRun([n for n, t in seen.items() if t], [n for n, t in seen.items() if not t],
                   max(calls[0] // repeat, min(calls[0], 1)), results,
                   {n: o for n in seen for p, o in owners.items() if f"{n}.".startswith(p)}, masks.count,
                   {n: c for n, c in masks.drop_draws.items() if n}, masks.sites, masks.outside, _changed(probe, before))


def _changed(model: nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    """The state_dict entries of ``model`` whose values differ from ``before`` (a step counter of a batch norm left out)."""
    now = model.state_dict()
    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.shape == b.shape and bool((torch.eq(a, b) | (torch.isnan(a) & torch.isnan(b))).all()) \
            if a.is_floating_point() else torch.equal(a, b)
    return [k for k, v in before.items() if not k.endswith("num_batches_tracked") and k in now
            and not same(now[k].detach(), v)]


def _numbers(value: Any) -> np.ndarray | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return np.array([float(value)])
    if torch.is_tensor(value):
        return value.detach().double().reshape(-1).cpu().numpy() if value.is_floating_point() else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        parts = [p for p in (_numbers(v) for v in value) if p is not None]
        return np.concatenate(parts) if parts else None
    return None


def non_finite_metric(results: list[Any]) -> str | None:
    """The first non-finite value eval_fn returned, as text."""
    for r in results:
        x = _numbers(r)
        if x is not None and x.size and not np.isfinite(x).all():
            return str(float(x[~np.isfinite(x)][0]))
    return None


def disagree(results: list[Any]) -> tuple[float, float] | None:
    """Two calls on the same batch whose numbers differ (beyond float reduction noise): the first differing pair."""
    xs = [_numbers(r) for r in results[:2]]
    if len(xs) < 2 or xs[0] is None or xs[1] is None or xs[0].shape != xs[1].shape:
        return None
    a, b = xs
    ok = np.isclose(a, b, rtol=REPEAT_RTOL, atol=1e-12, equal_nan=True)
    if ok.all():
        return None
    i = int(np.argmin(ok))
    return float(a[i]), float(b[i])


def eval_mode_non_finite(model: nn.Module, batch: Any) -> dict[str, Any] | None:
    """The model's copy on the batch under no_grad, in eval then in train mode: when eval-mode output holds non-finite
    values and training-mode output does not, the count and the first module whose output went non-finite."""
    probe = model_copy(model)
    try:
        with torch.no_grad():
            out_eval = flat(forward(set_mode(probe, False), batch))
            if out_eval is None or bool(torch.isfinite(out_eval).all()):
                return None
            out_train = flat(forward(set_mode(probe, True), batch))
            if out_train is None or not bool(torch.isfinite(out_train).all()):
                return None
            first = _first_non_finite(set_mode(probe, False), batch)
    except Exception:  # noqa: BLE001 - a forward that needs autograd (a Hamiltonian's gradient inside it): no evidence
        return None
    bad = int((~torch.isfinite(out_eval)).sum())
    return {"non_finite_outputs": bad, "outputs": int(out_eval.numel()), "first_module": first}


def _first_non_finite(probe: nn.Module, batch: Any, depth: int = 8) -> str | None:
    """The deepest module on the path of first non-finite outputs, descending one level of children at a time (hooks on
    a fused block's insides would switch it to its unfused path, which may stay finite)."""
    where, node = None, probe
    for _ in range(depth):
        prefix = f"{where}." if where else ""
        hit = _first_child(probe, batch, [(prefix + n, m) for n, m in node.named_children()])
        if hit is None:
            break
        where, node = hit
    return where


def _first_child(probe: nn.Module, batch: Any, kids: list[tuple[str, nn.Module]]) -> tuple[str, nn.Module] | None:
    order: list[tuple[str, nn.Module]] = []

    def look(name: str, mod: nn.Module, out: Any) -> None:
        x = flat(out)
        if x is not None and not bool(torch.isfinite(x).all()) and not order:
            order.append((name, mod))
    handles = [m.register_forward_hook(lambda mod, _i, o, n=n: look(n, mod, o)) for n, m in kids]
    try:
        out = flat(forward(probe, batch))
    finally:
        for h in handles:
            h.remove()
    still = out is not None and not bool(torch.isfinite(out).all())
    return order[0] if order and still else None


def eval_forwards_differ(model: nn.Module, batch: Any) -> bool:
    """Whether two eval-mode forwards of a copy on the same batch, under two different seeds, give different outputs
    (the random generators' states are restored afterwards)."""
    probe = model_copy(model)
    set_mode(probe, False)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(1)
        first = flat(forward(probe, batch))
        torch.manual_seed(2)
        second = flat(forward(probe, batch))
    return first is not None and second is not None and first.shape == second.shape and not torch.equal(first, second)
