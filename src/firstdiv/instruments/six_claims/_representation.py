"""The REPRESENTATION claim: is the output affine in the input (``f(a x1 + (1-a) x2)`` vs ``a f(x1) + (1-a) f(x2)``
on an eval-mode copy), and, when it is, does the task need more? An affine output is a bug only when the model
stacks more than one linear layer AND there is evidence the task needs more: the batch's targets are not fit by a
linear map (``._linear_fit``). A model that names an ``nn.Identity`` as its activation (``self.act = nn.Identity()``)
without that evidence is a WARN (the activation may be off on purpose); otherwise it is a note. An output that does not change with the input, even after every weight is perturbed,
cannot learn anything: that FAILs naming the last module that ran."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.batch import Batch, fresh, rebuild
from .._core.checks import Check
from .._core.copying import model_copy
from .._core.modes import set_mode
from ._linear_fit import linear_fit
from ._measured_step import weighted_layers
from ._model_probes import ALPHA, activations, affine_error
from ._verdict import claim, note, skip

NAME, CHECK = "REPRESENTATION", "claim.representation.affine"
AFFINE_RTOL = 1e-4  # float32 rounding of an affine map is ~1e-7 of the output spread; ReLU/tanh nets are >1e-2
# Lower precision: the affine test's rounding error scales with the output dtype's eps. Measured on a 3-layer linear
# bf16 net (eps 7.8e-3): relative error 2.4e-3 (0.3 eps); the same net with ReLU: 0.36 (46 eps). 4 eps sits between.
EPS_FACTOR = 4
PERTURB = 0.5  # relative size of the random weight perturbation that tells a constant output from a zero init
SEED = 0


def tolerance(dtype: torch.dtype | None) -> float:
    """The affine test's relative-error threshold for outputs of ``dtype``."""
    if dtype is None or not dtype.is_floating_point:
        return AFFINE_RTOL
    return max(AFFINE_RTOL, EPS_FACTOR * torch.finfo(dtype).eps)


def representation(model: nn.Module, batch: Batch, axis: int) -> Check:
    x, rebuild = _mixable(batch)
    if x is None:
        return skip(NAME, CHECK, "inputs are not a single tensor, nor a tuple holding exactly one dense floating-point "
                    "tensor; the affine test mixes two input tensors")
    if x.layout != torch.strided:
        return skip(NAME, CHECK, f"inputs are a {x.layout} tensor; the affine test mixes two dense inputs")
    if not x.is_floating_point():
        return skip(NAME, CHECK, f"inputs are {x.dtype} (e.g. token ids): a mixture of two inputs is not an input",
                    dtype=str(x.dtype))
    if not bool(x.ne(0).any()):
        return skip(NAME, CHECK, "the floating-point input the affine test mixes is all zeros (an initial hidden state, "
                    "a mask): no two different inputs to compare")
    try:
        worst, spread, pairs, dtype = _affine_error(model, x, axis, rebuild)
    except Exception as exc:  # noqa: BLE001 - the model refused a mixed input: no evidence, not a crash
        return skip(NAME, CHECK, f"the model raised {type(exc).__name__} on a mixture of inputs: {exc}")
    if worst is None:
        return skip(NAME, CHECK, "the model's output holds no floating-point tensor")
    tol = tolerance(dtype)
    ev = {"relative_error": worst, "threshold": tol, "output_dtype": str(dtype), "alpha": ALPHA, "pairs": pairs,
          "output_spread": spread, "activation_modules": activations(model)}
    if spread == 0 and rebuild is not None:  # one member of the inputs: the output may read only the others
        return skip(NAME, CHECK, "the output does not change with the one floating-point input the affine test mixes; "
                    "it may depend on the other inputs alone (an input the model does not read is not a constant "
                    "output)", **ev)
    if spread == 0:
        return _constant(model, x, axis, ev)
    if worst >= tol:
        return claim(NAME, Status.PASS, CHECK, f"output is not affine in the input: relative error {worst:.3g} "
                     f"(affine would be < {tol:g})", ev)
    return _affine(model, Batch(x, batch.targets, False), axis, ev)


def _affine_error(model: nn.Module, x: torch.Tensor, axis: int, rebuild: Any) -> tuple:
    """affine_error on an eval-mode copy, under no_grad; again with autograd on where the forward needs it."""
    try:
        return affine_error(set_mode(model_copy(model), False), x, axis, rebuild)
    except RuntimeError:
        return affine_error(set_mode(model_copy(model), False), x, axis, rebuild, grad=True)


def _mixable(batch: Batch) -> tuple[torch.Tensor | None, Any]:
    """The input tensor the affine test mixes, and how to put it back among the inputs (None: it is the input).
    A tuple/list input (GCN ``(features, sparse_adj)``, ``(x, lengths)``) gets its one dense floating-point tensor
    mixed, the rest held fixed."""
    x = batch.inputs
    if batch.as_kwargs:
        return None, None
    if torch.is_tensor(x):
        return x, None
    if not isinstance(x, (tuple, list)):
        return None, None
    dense = [i for i, v in enumerate(x) if torch.is_tensor(v) and v.layout == torch.strided and v.is_floating_point()]
    if len(dense) != 1:
        return None, None
    i = dense[0]
    return x[i], (lambda t: rebuild(x, (*x[:i], t, *x[i + 1:])))


def _affine(model: nn.Module, batch: Batch, axis: int, ev: dict[str, Any]) -> Check:
    layers = [n for n, _ in weighted_layers(model)]
    ev["linear_layers"] = layers[:8]
    affine = f"output is affine in the input (relative error {ev['relative_error']:.2e} < {ev['threshold']:g})"
    if len(layers) <= 1:
        return note(NAME, CHECK, f"{affine}; fine for a linear model ({len(layers)} linear layer: nothing stacked to "
                    "collapse)", ev)
    fit = linear_fit(batch, axis)
    ev["linear_fit"] = fit
    intended = _identity_activations(model)
    if intended:  # the model's own names say a nonlinearity belongs there; the targets still have to confirm it
        ev["identity_activations"] = intended[:8]
    if not fit["needs_nonlinear"] and intended:
        return _switched_off(affine, intended, layers, fit, ev)
    if fit["needs_nonlinear"] is None:
        return note(NAME, CHECK, f"{affine} through {len(layers)} stacked linear layers; not verified whether the task "
                    f"needs more: {fit.get('why', 'no evidence')}", ev)
    if not fit["needs_nonlinear"]:
        return note(NAME, CHECK, f"{affine}; fine for a linear model: {_fits(fit)}", ev)
    why = ("the batch's labels are not linearly separable" if "classes" in fit else
           f"a linear map leaves {fit['residual_fraction']:.0%} of the targets' variance, and random nonlinear features "
           f"explain it (F-test p={fit['p_value']:.2g})")
    if intended:
        why += f", and `{intended[0]}` is nn.Identity where its name says activation"
    return claim(NAME, Status.FAIL, CHECK,
                 f"{affine} over {ev['pairs']} input pairs, but {why}; the {len(layers)} stacked layers "
                 f"({', '.join(layers[:4])}) collapse to one linear map", ev,
                 "a nonlinear map of the input (relative error well above the threshold)",
                 "put a nonlinearity (ReLU, GELU, tanh) between the linear layers")


def _fits(fit: dict[str, Any]) -> str:
    return ("the batch's labels are linearly separable" if "classes" in fit
            else f"a linear map fits the targets (residual {fit.get('residual_fraction', 0):.2g} of their variance)")


def _switched_off(affine: str, intended: list[str], layers: list[str], fit: dict[str, Any], ev: dict[str, Any]) -> Check:
    """An activation's name on an nn.Identity, but the targets do not show the task needs a nonlinear map: the name
    alone does not confirm the premise (a configuration may switch the activation off on purpose), so a WARN."""
    told = _fits(fit) if fit["needs_nonlinear"] is False else f"not verified: {fit.get('why', 'no evidence')}"
    return claim(NAME, Status.WARN, CHECK,
                 f"{affine}; `{intended[0]}` is nn.Identity where its name says activation, so the {len(layers)} stacked "
                 f"layers collapse to one linear map; not confirmed that the task needs more (whether a linear map fits "
                 f"the batch's targets: {told}): if the activation is off on purpose, this is fine", ev)


ACTIVATION_NAMES = ("act", "activation", "nonlinearity", "nonlin", "relu", "gelu", "tanh", "sigmoid", "silu", "elu")


def _identity_activations(model: nn.Module) -> list[str]:
    """Modules that are ``nn.Identity`` under an activation's name (``self.act = nn.Identity()``)."""
    return [n for n, m in model.named_modules() if n and isinstance(m, nn.Identity)
            and n.rsplit(".", 1)[-1].lower().rstrip("0123456789_") in ACTIVATION_NAMES]


def _perturbed(model: nn.Module) -> nn.Module:
    probe = set_mode(model_copy(model), False)
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for p in probe.parameters():
            if p.is_floating_point() and p.numel() and p.layout == torch.strided:
                scale = PERTURB * max(float(p.detach().float().abs().max()), 0.1)
                p.add_((torch.randn(p.shape, generator=g) * scale).to(p.device, p.dtype))
    return probe


def _last_modules(probe: nn.Module, x: torch.Tensor) -> list[tuple[str, str, list[int]]]:
    """(name, type, output shape) of each leaf module, in the order it ran on the input tensor ``x``."""
    ran: list[tuple[str, str, list[int]]] = []
    hooks = [m.register_forward_hook(lambda mod, _i, out, n=n: ran.append((n, type(mod).__name__, list(out.shape)))
                                     if torch.is_tensor(out) else None)
             for n, m in probe.named_modules() if n and not list(m.children())]
    try:
        with torch.no_grad():
            probe(fresh(x))
    finally:
        for h in hooks:
            h.remove()
    return ran


def _constant(model: nn.Module, x: torch.Tensor, axis: int, ev: dict[str, Any]) -> Check:
    """The output of a one-tensor input does not move with it: FAIL where it still does not once every weight is
    perturbed (no initialization explains it)."""
    try:
        probe = _perturbed(model)
        spread = affine_error(probe, x, axis, None)[1]
        ran = _last_modules(probe, x)
    except Exception as exc:  # noqa: BLE001 - the perturbed copy would not run: no evidence
        return skip(NAME, CHECK, f"the output does not change with the input (spread 0), and a perturbed copy raised "
                    f"{type(exc).__name__}: {exc}", **ev)
    ev["spread_after_perturbing_weights"] = spread
    if spread > 0:
        return skip(NAME, CHECK, "the output does not change with the input at these weights (spread 0; a zero-initialized "
                    "output layer?) but does once they are perturbed, so affinity cannot be judged here", **ev)
    last = ran[-1] if ran else ("", type(model).__name__, [])
    ev["last_modules"] = [f"{n} ({t}) -> {s}" for n, t, s in ran[-3:]]
    where = f"the last module that ran, `{last[0]}` ({last[1]}, output shape {last[2]})" if last[0] else "the model"
    single = next((f"; `{n}` ({t}) has 1 output unit, and a softmax/log_softmax over one unit is constant"
                   for n, t, s in reversed(ran) if t in ("Linear", "LazyLinear") and s and s[-1] == 1), "")
    return claim(NAME, Status.FAIL, "claim.representation.constant_output",
                 f"outputs identical for every input, also after perturbing every weight: the output of {where} cannot "
                 f"depend on the input{single}", ev, "an output that depends on the input",
                 "check the last layers: the output width (e.g. Linear(h, 1) before log_softmax over dim 1) and the "
                 "normalization axis")
