"""Export / deployment comparison (chapter 31, "When the exported model differs"): the same fixed inputs
through named variants -- eager, compiled, reloaded, exported, quantized, or anything callable -- compared
with a reference, and the first layer where a variant's outputs leave tolerance.

Order of checks (findings in this order; the first FAIL is the first divergence):

1. **Fed the same?** ``preprocessing`` / ``generation`` = ``{variant: {setting: value}}`` are fingerprinted
   (sha256 of the sorted JSON) and compared with the reference's (or the first declared variant's); a
   variant whose settings differ is ``outputs.fed_differently`` at ``"<variant>"`` with the differing keys
   (nested keys dotted) -- "it was fed differently" told apart from "the exported model differs", before
   any output is compared.
2. **Evaluation mode?** A variant (module, compiled module, exported graph) with dropout or BatchNorm active
   in training mode is ``outputs.train_mode`` at ``"<variant>"``. It is compared in that mode all the same:
   the bug is what is reported, never silently fixed.
3. **Deterministic evaluation?** The reference runs twice more without reseeding between the two calls (its
   module state restored in between): outputs that differ are ``outputs.nondeterministic_eval`` at
   ``"<reference>:<module path>"``, the module that ran a dropout-family op while in eval mode (``F.dropout``
   with its default ``training=True``, ``scaled_dot_product_attention`` with ``dropout_p > 0`` ...), else the first
   module whose output differed; such an op with no visible effect is a WARN (see :mod:`._eval`).
   A key/value cache object in the output (transformers ``DynamicCache`` ...) is compared by the tensors it
   holds: a note finding ``outputs.cache_objects`` names where.
4. **Outputs.** Each variant against the reference: max and mean absolute error and max relative error over
   every leaf of a nested output, under the variant's tolerance (``tolerances={name: (rtol, atol)}`` or a
   :class:`~firstdiv.instruments._core.outputs.Tolerance`, else ``rtol``/``atol``; see that module for
   the element/scale rules). Outside tolerance is ``outputs.diverged``; a variant that raises is
   ``outputs.raised``; one that could not be built for want of a dependency is a SKIPPED finding.
5. **First diverging layer** (``layers=True``). When the variant and the reference expose module paths
   (see :mod:`~firstdiv.instruments._core.layers`), each named module's output is recorded in both on
   the same inputs and the first module, in the reference's execution order, whose output leaves the
   variant's tolerance is named: ``where = "<variant>:<module path>"``; ``"<variant>"`` when the layers
   cannot be compared or all shared modules agree.

``mode="train"``: every variant runs a training forward with grad enabled (its modules in the flags they have;
the evaluation-mode check is not made, a random training forward is expected) and, with ``loss=`` (``output ->
scalar``), parameter gradients are compared per name: ``outputs.gradient_diverged`` at ``"<variant>:<parameter>"``
(see :mod:`._train`). A compiled variant of a random training forward (dropout) is not judged (SKIPPED): its
generated code draws other random numbers than eager.

Otherwise every variant runs under ``torch.no_grad`` on its own clone of the inputs inside
:func:`~firstdiv.instruments._core.state.guarded` (values, buffers, hooks, RNG states and grad mode restored), so
the user's modules are left as they were; with identical RNG states, two copies in training mode draw the
same dropout masks. Variants are called once each; layer recording runs only for a variant that diverged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.batch import describe
from .._core.checks import Check, check, compose
from .._core.layers import is_compiled, is_exported, listed, orig_module, train_mode_modules
from .._core.outputs import Run, Tolerance, as_tolerance, call_once, leaves, split_inputs
from .._core.user_hooks import reports_user_hooks
from ._diverged import Layers, output_check
from ._eval import determinism_check
from ._fed import fed_checks, fingerprint
from ._train import call_train, gradient_check
from .variants import Unavailable

__all__ = ["Tolerance", "compare_outputs", "fingerprint"]

_NAME = "compare_outputs"


@reports_user_hooks
def compare_outputs(variants: dict[str, Any], inputs: Any, *, reference: str | None = None, rtol: float = 1e-4,
                    atol: float = 1e-5, tolerances: dict[str, Any] | None = None, layers: bool = True,
                    preprocessing: dict[str, dict] | None = None, generation: dict[str, dict] | None = None,
                    mode: str = "eval", loss: Callable[[Any], Any] | None = None) -> Report:
    """Run ``inputs`` through every variant and compare with ``reference`` (default: the first variant).

    ``inputs``: a tensor (one positional argument), a tuple (positional arguments) or a dict (keyword
    arguments). ``mode``: ``"eval"`` (under ``torch.no_grad``) or ``"train"`` (grad enabled, a training forward;
    with ``loss`` = a callable ``output -> scalar tensor``, parameter gradients are compared per name). Returns a
    Report with findings in the order of the module docstring and, in ``details``, per variant: description,
    tolerance, max/mean absolute and max relative error, tolerance ratio, worst leaf, seconds, and the first
    diverging layer.
    """
    named = _check_variants(variants)
    if reference is not None and reference not in named:
        raise InvalidArgument(f"Expected `reference` to be one of the variant names ({', '.join(named)}) but got {reference!r}")
    ref_name = reference if reference is not None else next(iter(named))
    tols = _tolerances(named, rtol, atol, tolerances)
    if not isinstance(layers, bool):
        raise InvalidArgument(f"Expected `layers` to be True or False but got {layers!r}")
    train = _check_mode(mode, loss)
    settings = {arg: _check_settings(arg, value, named) for arg, value in (("preprocessing", preprocessing),
                                                                           ("generation", generation))}
    args, kwargs = split_inputs(inputs)
    before = {n: getattr(v, "processes_started", 0) for n, v in named.items()}
    details: dict[str, Any] = {"reference": ref_name, "inputs": describe(inputs), "layers": layers, "mode": mode,
                               "variants": {n: {"description": _describe_variant(v), "tolerance": tols[n].to_dict()}
                                            for n, v in named.items()}}
    checks: list[Check] = []
    for arg, value in settings.items():
        checks += fed_checks(arg, value, named, ref_name, details)
    if not train:
        checks += [_mode_check(n, v) for n, v in named.items() if _inspectable(v)]

    def run(variant: Any) -> Run:
        return call_train(variant, args, kwargs, loss) if train else call_once(variant, args, kwargs)

    ref_run = run(named[ref_name])
    details["variants"][ref_name]["seconds"] = ref_run.seconds
    if ref_run.error:
        return compose(_NAME, checks, _side_effects(named, [], before, train), details,
                       reason=f"the reference variant {ref_name!r} raised {ref_run.error}; fix it or choose another with "
                              f"reference=...")
    determinism, stochastic = determinism_check(ref_name, named[ref_name], ref_run, args, kwargs, tols[ref_name], train)
    checks += [determinism] + _cache_note(ref_name, ref_run, details)
    layer_ctx = Layers(ref_name, named[ref_name], args, kwargs)
    outputs: list[Check] = []
    for n, v in named.items():
        if n != ref_name:
            outputs += _variant_checks(n, v, run, ref_run, tols[n], layer_ctx, layers, details["variants"][n], stochastic,
                                       loss is not None)
    checks += outputs
    reason = "" if any(c.finding.status is not Status.SKIPPED for c in outputs) else (
        "no variant besides the reference could run: " + "; ".join(c.finding.message for c in outputs))
    return compose(_NAME, checks, _side_effects(named, layer_ctx.effects, before, train), details, reason)


def _variant_checks(name: str, variant: Any, run: Callable[[Any], Run], ref: Run, tol: Tolerance, layer_ctx: Layers,
                    localize: bool, info: dict[str, Any], stochastic: bool, grads: bool) -> list[Check]:
    if isinstance(variant, Unavailable) and not variant.failed:
        return [check(name, "outputs.unavailable", Status.SKIPPED, variant.reason, {"reason": variant.reason})]
    got = run(variant)
    out = [output_check(name, variant, ref, got, tol, layer_ctx, localize, info, stochastic)]
    if grads and not got.error and out[0].finding.check == "outputs.not_comparable":
        out.append(check(name, "outputs.gradient_diverged", Status.SKIPPED, "gradients not judged: " + out[0].finding.message))
    elif grads and not got.error:
        out.append(gradient_check(name, layer_ctx.name, ref, got, tol))
    return out


def _cache_note(ref_name: str, ref: Run, details: dict[str, Any]) -> list[Check]:
    caches: list[str] = []
    found = leaves(ref.output, caches=caches)
    if not caches:
        return []
    tensors = sum(1 for path, v in found.items() if torch.is_tensor(v) and any(path.startswith(c) for c in caches))
    details["cache_objects"] = caches
    return [check(ref_name, "outputs.cache_objects", Status.PASS,
                  f"note: {len(caches)} key/value cache object(s) in the output ({listed(caches)}) compared by the "
                  f"{tensors} tensor(s) they hold (per layer keys/values), not by ==", {"paths": caches, "tensors": tensors})]


# --- arguments -----------------------------------------------------------------------------------------------------

def _check_variants(variants: Any) -> dict[str, Any]:
    if not isinstance(variants, dict):
        raise InvalidArgument(f"Expected `variants` to be a dict {{name: module or callable}} but got {type(variants).__name__}")
    if len(variants) < 2:
        raise InvalidArgument(f"Expected `variants` to hold at least two variants (a reference and one to compare) but got "
                              f"{len(variants)}")
    for name, v in variants.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"Expected `variants` keys to be non-empty names but got {name!r}")
        if not callable(v):
            raise InvalidArgument(f"Expected variant {name!r} to be an nn.Module or a callable but got {type(v).__name__}")
    return dict(variants)


def _check_mode(mode: Any, loss: Any) -> bool:
    if mode not in ("eval", "train"):
        raise InvalidArgument(f"Expected `mode` to be 'eval' (no_grad) or 'train' (a training forward, grad enabled) but got "
                              f"{mode!r}")
    if loss is not None and not callable(loss):
        raise InvalidArgument(f"Expected `loss` to be a callable output -> scalar tensor but got {type(loss).__name__}")
    if loss is not None and mode != "train":
        raise InvalidArgument("Expected `loss` only with mode='train' (gradients need a training forward); pass "
                              "mode='train' or drop loss=")
    return mode == "train"


def _check_settings(arg: str, settings: Any, names: dict[str, Any]) -> dict[str, dict] | None:
    if settings is None:
        return None
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        raise InvalidArgument(f"Expected `{arg}` to be a dict {{variant name: dict of settings}} but got {settings!r:.80}")
    unknown = [k for k in settings if k not in names]
    if unknown:
        raise InvalidArgument(f"Expected `{arg}` keys to be variant names ({', '.join(names)}) but got {unknown[0]!r}")
    return settings


def _tolerances(names: dict[str, Any], rtol: float, atol: float, tolerances: Any) -> dict[str, Tolerance]:
    default = Tolerance(rtol, atol)
    if tolerances is None:
        return {name: default for name in names}
    if not isinstance(tolerances, dict):
        raise InvalidArgument(f"Expected `tolerances` to be a dict {{variant name: (rtol, atol)}} but got "
                              f"{type(tolerances).__name__}")
    unknown = [k for k in tolerances if k not in names]
    if unknown:
        raise InvalidArgument(f"Expected `tolerances` keys to be variant names ({', '.join(names)}) but got {unknown[0]!r}")
    return {name: as_tolerance(tolerances[name], name) if name in tolerances else default for name in names}


# --- evaluation mode ----------------------------------------------------------------------------------------------

def _inspectable(variant: Any) -> bool:
    return (getattr(variant, "firstdiv_train_modules", None) is not None or is_exported(variant)
            or orig_module(variant) is not None)


def _mode_check(name: str, variant: Any) -> Check:
    active = train_mode_modules(variant)
    ev = {"train_mode_modules": active, "count": len(active)}
    if not active:
        return check(name, "outputs.train_mode", Status.PASS, "no dropout or BatchNorm active in training mode", ev)
    return check(name, "outputs.train_mode", Status.FAIL,
                 f"{len(active)} module(s) behave as in training: {listed(active)}", ev,
                 expected="evaluation mode (dropout off, BatchNorm using running statistics)",
                 observed=f"training mode in {listed(active)}",
                 hint="call model.eval() before comparing or serving; an exported graph bakes the mode in: export "
                      "after model.eval()")


# --- the instrument --------------------------------------------------------------------------------------------------

def _describe_variant(variant: Any) -> str:
    text = getattr(variant, "firstdiv_description", None)
    if isinstance(text, str):
        return text
    if is_compiled(variant):
        return f"compiled {type(variant._orig_mod).__name__}"
    if is_exported(variant):
        return "exported program module"
    return type(variant).__name__ if isinstance(variant, nn.Module) else f"callable {getattr(variant, '__name__', type(variant).__name__)}"


def _side_effects(names: dict[str, Any], effects: list[str], before: dict[str, int], train: bool = False) -> str:
    started = sum(getattr(v, "processes_started", 0) for v in names.values()) - sum(before.values())
    how = ("with grad enabled (a training forward; gradients by torch.autograd.grad, .grad untouched)" if train
           else "under torch.no_grad")
    parts = [(f"each variant ran {how} on clones of the inputs; the reference ran twice more, without reseeding between the two calls; module "
              f"values, buffers, hooks, train flags, RNG states and grad mode restored")]
    if started:
        parts.append(f"{started} fresh Python process(es) started")
    return "; ".join(parts + effects)
