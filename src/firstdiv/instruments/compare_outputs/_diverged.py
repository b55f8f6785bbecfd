"""compare_outputs' output comparison: one variant's outputs against the reference's, and, when they leave
tolerance, the first module (in the reference's execution order) whose output does (``where =
"<variant>:<module path>"``), with a hint for the kind of variant."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.batch import describe_error
from .._core.checks import Check, check
from .._core.layers import NotComparable, by_call, is_compiled, is_exported, layer_outputs, orig_module
from .._core.outputs import Run, Tolerance, clone_tree, compare
from .._core.state import guarded


def record(variant: Any, args: tuple, kwargs: dict) -> tuple[list[tuple[str, Any]], str]:
    module = variant if isinstance(variant, nn.Module) else None
    with guarded(*([module] if module is not None else [])), torch.no_grad():
        records, how = layer_outputs(variant, clone_tree(args), clone_tree(kwargs))
    prefix = getattr(variant, "firstdiv_path_prefix", "")  # a wrapper's attribute name in front of the model's paths
    if prefix:
        records = [(path[len(prefix):], value) for path, value in records if path.startswith(prefix)]
    return records, how


class Layers:
    """The reference's layer outputs, recorded once (only if some variant diverges)."""

    def __init__(self, name: str, reference: Any, args: tuple, kwargs: dict) -> None:
        self.name, self.reference, self.args, self.kwargs = name, reference, args, kwargs
        self._records: Any = None
        self.effects: list[str] = []

    def reference_calls(self) -> dict[tuple[str, int], Any]:
        if self._records is None:
            try:
                self._records = by_call(record(self.reference, self.args, self.kwargs)[0])
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


def _localize(name: str, variant: Any, layers: Layers, tol: Tolerance) -> tuple[str, dict[str, Any]]:
    """(module path or '', evidence) of the first shared module whose output leaves tolerance."""
    try:
        ref = layers.reference_calls()
        records, how = record(variant, layers.args, layers.kwargs)
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
    previous, unmatched = "", []
    exported = is_exported(variant)
    for i, key in enumerate(shared):
        result = compare(ref[key], var[key], tol)
        if not result.ok and exported and any(leaf.problem for leaf in result.leaves):
            # an exported graph's last node under a module path is not always that module's whole output (a
            # module returning a tuple): a value of another structure is not evidence of a divergence
            unmatched.append(key[0])
            continue
        if not result.ok:
            ev = _layer_evidence(variant, layers.reference, key, result.summary())
            ev.update({"layers_compared": i + 1, "layers_shared": len(shared), "last_agreeing_layer": previous, "how": how,
                       "layers_not_matched": unmatched[:10]})
            return key[0], ev
        previous = key[0]
    return "", {"layers": f"all {len(shared) - len(unmatched)} comparable shared modules within tolerance: the "
                          f"divergence arises outside them (in the root module's own forward code)", "how": how,
                "layers_not_matched": unmatched[:10]}


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
    return (f"max abs error {g(summary['max_abs_error'])} ({g(summary['tolerance_ratio'])}x the tolerance) at "
            f"{summary['worst_leaf']}")


def g(x: Any) -> str:
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


def output_check(name: str, variant: Any, ref: Run, run: Run, tol: Tolerance, layers: Layers, localize: bool,
                 info: dict[str, Any], stochastic: bool = False) -> Check:
    """The variant's output against the reference's; ``stochastic``: the reference's (training) forward draws
    random numbers, which a compiled variant's generated code draws differently (then not judged)."""
    info["seconds"] = run.seconds
    if run.error:
        ev = {"error": run.error}
        return check(name, "outputs.raised", Status.FAIL, f"raised {run.error}", ev, expected="outputs for the fixed inputs",
                     observed=f"raised {run.error}", hint="validate the actual deployment path on these inputs")
    result = compare(ref.output, run.output, tol)
    summary = result.summary()
    info.update(summary)
    ev = {**summary, "tolerance": tol.describe()}
    if result.caches:
        ev["cache_objects"] = result.caches
    text = (f"max abs error {g(summary['max_abs_error'])}, mean {g(summary['mean_abs_error'])}, max rel "
            f"{g(summary['max_rel_error'])} over {summary['elements']} elements")
    if result.ok:
        return check(name, "outputs.diverged", Status.PASS, f"{text}; within {tol.describe()}", ev)
    if stochastic and is_compiled(variant):
        return check(name, "outputs.not_comparable", Status.SKIPPED, f"{text}; not judged: the reference's forward "
                     f"draws random numbers (dropout in training mode: two runs differ), and torch.compile's generated "
                     f"code draws different ones than eager; compare with dropout p=0 or in eval mode", ev)
    path, lev = _localize(name, variant, layers, tol) if localize else ("", {"layers": "not compared (layers=False)"})
    ev.update(lev)
    info["first_diverging_layer"] = path
    where = f"{name}:{path}" if path else name
    at = (f"; first diverging layer {path} (max abs error {g(lev['layer_max_abs_error'])})" if path
          else f"; {lev['layers']}")
    return check(where, "outputs.diverged", Status.FAIL, f"{text}; {summary['violations']} element(s) outside "
                 f"{tol.describe()}{at}", ev, expected=f"every output element within tolerance of {layers.name!r}: {tol.describe()}",
                 observed=_observed(summary) + (f"; first diverging layer {path}" if path else ""),
                 hint=_hint(variant, lev))
