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
3. **Outputs.** Each variant against the reference: max and mean absolute error and max relative error over
   every leaf of a nested output, under the variant's tolerance (``tolerances={name: (rtol, atol)}`` or a
   :class:`~firstdiv.instruments._core.outputs.Tolerance`, else ``rtol``/``atol``; see that module for
   the element/scale rules). Outside tolerance is ``outputs.diverged``; a variant that raises is
   ``outputs.raised``; one that could not be built for want of a dependency is a SKIPPED finding.
4. **First diverging layer** (``layers=True``). When the variant and the reference expose module paths
   (see :mod:`~firstdiv.instruments._core.layers`), each named module's output is recorded in both on
   the same inputs and the first module, in the reference's execution order, whose output leaves the
   variant's tolerance is named: ``where = "<variant>:<module path>"``; ``"<variant>"`` when the layers
   cannot be compared or all shared modules agree.

Every variant runs under ``torch.no_grad`` on its own clone of the inputs inside
:func:`~firstdiv.instruments._core.state.guarded` (values, buffers, hooks, RNG states and grad mode restored), so
the user's modules are left as they were; with identical RNG states, two copies in training mode draw the
same dropout masks. Variants are called once each; layer recording runs only for a variant that diverged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.batch import describe, describe_error
from .._core.checks import Check, check, compose
from .._core.layers import (
    NotComparable,
    by_call,
    is_compiled,
    is_exported,
    layer_outputs,
    listed,
    orig_module,
    train_mode_modules,
)
from .._core.outputs import Run, Tolerance, as_tolerance, call_once, clone_tree, compare, split_inputs
from .._core.state import guarded
from .._core.user_hooks import reports_user_hooks
from ._fed import fed_checks, fingerprint
from .variants import Unavailable

__all__ = ["Tolerance", "compare_outputs", "fingerprint"]

_NAME = "compare_outputs"


@reports_user_hooks
def compare_outputs(variants: dict[str, Any], inputs: Any, *, reference: str | None = None, rtol: float = 1e-4,
                    atol: float = 1e-5, tolerances: dict[str, Any] | None = None, layers: bool = True,
                    preprocessing: dict[str, dict] | None = None, generation: dict[str, dict] | None = None) -> Report:
    """Run ``inputs`` through every variant and compare with ``reference`` (default: the first variant).

    ``inputs``: a tensor (one positional argument), a tuple (positional arguments) or a dict (keyword
    arguments). Returns a Report with findings in the order of the module docstring and, in ``details``,
    per variant: description, tolerance, max/mean absolute and max relative error, tolerance ratio, worst
    leaf, seconds, and the first diverging layer.
    """
    named = _check_variants(variants)
    if reference is not None and reference not in named:
        raise InvalidArgument(f"Expected `reference` to be one of the variant names ({', '.join(named)}) but got {reference!r}")
    ref_name = reference if reference is not None else next(iter(named))
    tols = _tolerances(named, rtol, atol, tolerances)
    if not isinstance(layers, bool):
        raise InvalidArgument(f"Expected `layers` to be True or False but got {layers!r}")
    settings = {arg: _check_settings(arg, value, named) for arg, value in (("preprocessing", preprocessing),
                                                                           ("generation", generation))}
    args, kwargs = split_inputs(inputs)
    before = {n: getattr(v, "processes_started", 0) for n, v in named.items()}
    details: dict[str, Any] = {"reference": ref_name, "inputs": describe(inputs), "layers": layers,
                               "variants": {n: {"description": _describe_variant(v), "tolerance": tols[n].to_dict()}
                                            for n, v in named.items()}}
    checks: list[Check] = []
    for arg, value in settings.items():
        checks += fed_checks(arg, value, named, ref_name, details)
    checks += [_mode_check(n, v) for n, v in named.items() if _inspectable(v)]
    ref_run = call_once(named[ref_name], args, kwargs)
    details["variants"][ref_name]["seconds"] = ref_run.seconds
    if ref_run.error:
        return compose(_NAME, checks, _side_effects(named, [], before), details,
                       reason=f"the reference variant {ref_name!r} raised {ref_run.error}; fix it or choose another with "
                              f"reference=...")
    layer_ctx = _Layers(ref_name, named[ref_name], args, kwargs)
    outputs = [_output_check(n, v, ref_run, tols[n], layer_ctx, layers, details["variants"])
               for n, v in named.items() if n != ref_name]
    checks += outputs
    reason = "" if any(c.finding.status is not Status.SKIPPED for c in outputs) else (
        "no variant besides the reference could run: " + "; ".join(c.finding.message for c in outputs))
    return compose(_NAME, checks, _side_effects(named, layer_ctx.effects, before), details, reason)


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


# --- outputs ------------------------------------------------------------------------------------------------------

def _record(variant: Any, args: tuple, kwargs: dict) -> tuple[list[tuple[str, Any]], str]:
    module = variant if isinstance(variant, nn.Module) else None
    with guarded(*([module] if module is not None else [])), torch.no_grad():
        return layer_outputs(variant, clone_tree(args), clone_tree(kwargs))


class _Layers:
    """The reference's layer outputs, recorded once (only if some variant diverges)."""

    def __init__(self, name: str, reference: Any, args: tuple, kwargs: dict) -> None:
        self.name, self.reference, self.args, self.kwargs = name, reference, args, kwargs
        self._records: Any = None
        self.effects: list[str] = []

    def reference_calls(self) -> dict[tuple[str, int], Any]:
        if self._records is None:
            try:
                self._records = by_call(_record(self.reference, self.args, self.kwargs)[0])
            except NotComparable as exc:
                self._records = exc
        if isinstance(self._records, NotComparable):
            raise self._records
        return self._records


def _weight_range(root: nn.Module | None, path: str) -> dict[str, Any]:
    module = dict(root.named_modules()).get(path) if root is not None else None
    w = getattr(module, "weight", None)
    if not torch.is_tensor(w) or not w.is_floating_point() or w.numel() == 0:
        return {}
    mag = w.detach().abs().double()
    med = float(mag.median())
    return {"weight_max_abs": float(mag.max()), "weight_median_abs": med,
            "weight_range_ratio": float(mag.max()) / med if med > 0 else "inf"}


def _localize(name: str, variant: Any, layers: _Layers, tol: Tolerance) -> tuple[str, dict[str, Any]]:
    """(module path or '', evidence) of the first shared module whose output leaves tolerance."""
    try:
        ref = layers.reference_calls()
        records, how = _record(variant, layers.args, layers.kwargs)
    except NotComparable as exc:
        return "", {"layers": f"not compared: {exc}"}
    except Exception as exc:  # noqa: BLE001 - recording is best effort; the output divergence stands
        return "", {"layers": f"not compared: recording layer outputs raised {describe_error(exc)}"}
    if is_compiled(variant):
        layers.effects.append(f"{name!r} recompiled once with recording hooks (a fresh wrapper function)")
    var = by_call(records)
    shared = [key for key in ref if key in var]
    if not shared:
        return "", {"layers": "not compared: no module paths in common with the reference", "how": how}
    previous = ""
    for i, key in enumerate(shared):
        result = compare(ref[key], var[key], tol)
        if not result.ok:
            ev = _layer_evidence(variant, layers.reference, key, result.summary())
            ev.update({"layers_compared": i + 1, "layers_shared": len(shared), "last_agreeing_layer": previous, "how": how})
            return key[0], ev
        previous = key[0]
    return "", {"layers": f"all {len(shared)} shared modules within tolerance: the divergence arises outside them "
                          f"(in the root module's own forward code)", "how": how}


def _layer_evidence(variant: Any, reference: Any, key: tuple[str, int], summary: dict[str, Any]) -> dict[str, Any]:
    path = key[0]
    root = None if is_exported(variant) else orig_module(variant)  # an exported graph's submodules only hold weights
    module = dict(root.named_modules()).get(path) if root is not None else None
    ev = {"layer": path, "call": key[1], "layer_max_abs_error": summary["max_abs_error"],
          "layer_tolerance_ratio": summary["tolerance_ratio"], "variant_module": module._get_name() if module is not None else ""}
    if "problems" in summary:
        ev["problems"] = summary["problems"]
    ev.update(_weight_range(orig_module(reference), path))
    return ev


def _observed(summary: dict[str, Any]) -> str:
    if summary.get("problems"):
        return "outputs differ in structure: " + "; ".join(summary["problems"][:3])
    return (f"max abs error {_g(summary['max_abs_error'])} ({_g(summary['tolerance_ratio'])}x the tolerance) at "
            f"{summary['worst_leaf']}")


def _g(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _hint(variant: Any, ev: dict[str, Any]) -> str:
    module = str(ev.get("variant_module", ""))
    if "Quantized" in module:
        ratio = ev.get("weight_range_ratio")
        spread = f" (its weights span {ratio:.0f}x max/median)" if isinstance(ratio, float) else ""
        return (f"int8 with one scale per tensor{spread}: small weights or inputs round to zero; use per-channel "
                f"quantization, keep this layer in float, or rescale its inputs/weights")
    if is_compiled(variant):
        return "compare backend='eager' and 'aot_eager' with the failing backend to split capture from code generation (compile_ledger)"
    if is_exported(variant):
        return "export traces one path: check for data-dependent control flow or specialized shapes in this module"
    if hasattr(variant, "firstdiv_layer_outputs"):
        return ("state outside the state_dict (plain tensor attributes, non-persistent buffers) or a factory that builds "
                "something else is lost on reload: run four_structures on the model")
    return "print this module's inputs and outputs in both variants on the same example"


def _output_check(name: str, variant: Any, ref: Run, tol: Tolerance, layers: _Layers, localize: bool,
                  details: dict[str, Any]) -> Check:
    info = details[name]
    if isinstance(variant, Unavailable) and not variant.failed:
        return check(name, "outputs.unavailable", Status.SKIPPED, variant.reason, {"reason": variant.reason})
    run = call_once(variant, layers.args, layers.kwargs)
    info["seconds"] = run.seconds
    if run.error:
        ev = {"error": run.error}
        return check(name, "outputs.raised", Status.FAIL, f"raised {run.error}", ev, expected="outputs for the fixed inputs",
                     observed=f"raised {run.error}", hint="validate the actual deployment path on these inputs")
    result = compare(ref.output, run.output, tol)
    summary = result.summary()
    info.update(summary)
    ev = {**summary, "tolerance": tol.describe()}
    text = (f"max abs error {_g(summary['max_abs_error'])}, mean {_g(summary['mean_abs_error'])}, max rel "
            f"{_g(summary['max_rel_error'])} over {summary['elements']} elements")
    if result.ok:
        return check(name, "outputs.diverged", Status.PASS, f"{text}; within {tol.describe()}", ev)
    path, lev = _localize(name, variant, layers, tol) if localize else ("", {"layers": "not compared (layers=False)"})
    ev.update(lev)
    info["first_diverging_layer"] = path
    where = f"{name}:{path}" if path else name
    at = (f"; first diverging layer {path} (max abs error {_g(lev['layer_max_abs_error'])})" if path
          else f"; {lev['layers']}")
    return check(where, "outputs.diverged", Status.FAIL, f"{text}; {summary['violations']} element(s) outside "
                 f"{tol.describe()}{at}", ev, expected=f"every output element within tolerance of {layers.name!r}: {tol.describe()}",
                 observed=_observed(summary) + (f"; first diverging layer {path}" if path else ""),
                 hint=_hint(variant, lev))


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


def _side_effects(names: dict[str, Any], effects: list[str], before: dict[str, int]) -> str:
    started = sum(getattr(v, "processes_started", 0) for v in names.values()) - sum(before.values())
    parts = [("each variant ran under torch.no_grad on clones of the inputs; module values, buffers, hooks, train "
              "flags, RNG states and grad mode restored")]
    if started:
        parts.append(f"{started} fresh Python process(es) started")
    return "; ".join(parts + effects)
