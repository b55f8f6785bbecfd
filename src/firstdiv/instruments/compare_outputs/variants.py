"""Build the common deployment variants of one model for :func:`~firstdiv.instruments.compare_outputs.compare_outputs`
(chapter 31, "When the exported model differs": compare the training checkpoint, the reloaded model, the
compiled and exported graphs and the quantized export on the same fixed inputs).

Every variant is built from a deep copy; the user's model is never changed. Each copy keeps the user's
training/eval flags, so a model left in training mode shows up as ``outputs.train_mode`` instead of being
silently fixed (int8: ``quantize_dynamic`` switches to eval; the flags are put back afterwards).

- ``eager``: the deep copy itself.
- ``compiled``: ``torch.compile(copy, backend=compile_backend)`` (compiles lazily on the first call).
- ``reloaded``: the ``state_dict`` saved with ``torch.save`` to a temporary file, then
  - with ``factory="pkg.mod:make_model"``: a :class:`~firstdiv.instruments.compare_outputs._reload_worker.FreshProcessVariant`,
    a callable that starts a fresh Python process per call, imports the factory, loads the state_dict
    strictly and runs the inputs there;
  - without: in this process, a deep copy whose state_dict entries are first filled with NaN (floating) or -1
    (integer) and then loaded strictly from the file, so anything the file does not restore shows. State
    held outside the state_dict (plain tensor attributes) is carried by the deep copy and is NOT tested:
    pass a factory for that.
- ``export``: ``torch.export.export(copy, args, kwargs).module()`` (needs ``example_inputs``, same calling
  convention as compare_outputs' ``inputs``).
- ``int8``: ``torch.ao.quantization.quantize_dynamic(copy, {nn.Linear}, dtype=torch.qint8)`` (per-tensor
  weight scales, dynamic per-tensor activation scales); an :class:`Unavailable` placeholder when this torch
  has no eager-mode dynamic quantization or the model's Linear layers are not float32 (bf16/fp16 models):
  compare_outputs reports it SKIPPED.
- ``export`` of a model whose output holds a key/value cache object without a pytree registration (transformers'
  ``DynamicCache``/``EncoderDecoderCache``) retries through a wrapper returning the cache as a dict of its
  tensors, the leaves compare_outputs compares it by.

A kind that cannot be built for this model (``torch.export`` refusing data-dependent control flow, say) is an
:class:`Unavailable` with ``failed=True``: compare_outputs reports it as ``outputs.raised`` at that variant.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from .._core.batch import check_model, describe_error
from .._core.copying import folded, model_copy
from .._core.layers import train_mode_modules
from .._core.outputs import Tolerance, cache_tree, is_cache, split_inputs
from .._core.state import guarded

__all__ = ["KINDS", "TOLERANCES", "Tolerance", "Unavailable", "variants"]

KINDS = ("eager", "compiled", "reloaded", "export", "int8")
#: per-kind tolerances: int8 is lossy (5% of the output's scale, calibrated on the zoo's clean programs, whose
#: worst int8 error is ~0.5 of it, while a ruined per-tensor scale costs ~20x); the others compute the same thing
TOLERANCES = {"eager": Tolerance(1e-4, 1e-5), "compiled": Tolerance(1e-4, 1e-5), "reloaded": Tolerance(1e-4, 1e-5),
              "export": Tolerance(1e-4, 1e-5), "int8": Tolerance(5e-2, 1e-5, "scale")}
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class Unavailable:
    """A variant that could not be built: ``failed`` is True when building raised on this model (a finding),
    False when this environment lacks what the kind needs (SKIPPED). Calling it raises."""

    def __init__(self, kind: str, reason: str, *, failed: bool) -> None:
        self.kind, self.reason, self.failed = kind, reason, failed
        self.firstdiv_description = f"not built: {reason}"

    def __repr__(self) -> str:
        return f"Unavailable({self.kind!r}, {self.reason!r}, failed={self.failed})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"variant {self.kind!r} was not built: {self.reason}")


def _describe(obj: Any, text: str) -> Any:
    obj.firstdiv_description = text
    return obj


def _copy(model: nn.Module) -> nn.Module:
    try:
        return model_copy(model)
    except Exception as exc:  # noqa: BLE001 - every variant is built from a copy; say why there is none
        raise InvalidArgument(f"Expected `model` to be deep-copyable (variants are built from copies) but copying raised "
                              f"{describe_error(exc)}") from None


def _eager(model: nn.Module, **_: Any) -> Any:
    return _describe(_copy(model), "eager: a deep copy of the model, in its own training/eval mode")


def _compiled(model: nn.Module, *, compile_backend: Any, **_: Any) -> Any:
    name = compile_backend if isinstance(compile_backend, str) else getattr(compile_backend, "__name__", "custom")
    return _describe(torch.compile(_copy(model), backend=compile_backend),
                     f"compiled: torch.compile(copy, backend={name!r})")


def _poison(model: nn.Module) -> None:
    with torch.no_grad():
        for t in model.state_dict(keep_vars=True).values():
            if torch.is_tensor(t) and not t.is_meta:
                t.fill_(float("nan") if (t.is_floating_point() or t.is_complex()) else (-1 if t.dtype != torch.bool else 0))


def _reloaded(model: nn.Module, *, factory: str | None, **_: Any) -> Any:
    if factory is not None:
        # imported here: the child runs ``-m`` on that module, and runpy warns when importing this package
        # (the child's parent package) has already imported it
        from ._reload_worker import FreshProcessVariant

        modes = {name: m.training for name, m in model.named_modules()}
        return FreshProcessVariant(factory, model.state_dict(), modes, train_mode_modules(model))
    with tempfile.TemporaryDirectory(prefix="firstdiv-reload-") as tmp:
        path = os.path.join(tmp, "state_dict.pt")
        torch.save(model.state_dict(), path)
        twin = _copy(model)
        _poison(twin)
        twin.load_state_dict(torch.load(path, weights_only=True), strict=True)
    return _describe(twin, "reloaded in this process (no factory given): deep copy, state_dict poisoned, then "
                           "load_state_dict(strict=True) from a torch.save file; state outside the state_dict is "
                           "not tested -- pass factory='pkg.mod:make_model' for a fresh-process reload")


class _PlainOutputs(nn.Module):
    """Exports a model whose output holds a key/value cache object torch.export cannot flatten (no pytree
    registration): the same forward, returning the cache as the dict of its tensors (the leaves compare_outputs
    compares it by)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return _plain_caches(self.model(*args, **kwargs))


def _plain_caches(value: Any) -> Any:
    if is_cache(value):
        return cache_tree(value)
    if isinstance(value, Mapping):
        return {k: _plain_caches(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_plain_caches(v) for v in value)
    return value


def _export(model: nn.Module, *, example_inputs: Any, **_: Any) -> Any:
    args, kwargs = split_inputs(example_inputs)
    try:
        program = torch.export.export(_copy(model), args, kwargs)
    except Exception as exc:  # noqa: BLE001 - a model export refuses is a finding about the deployment path
        if "pytree" not in str(exc) or "Cache" not in str(exc):
            return Unavailable("export", f"torch.export.export raised {describe_error(exc)}", failed=True)
        try:
            program = torch.export.export(_PlainOutputs(_copy(model)), args, kwargs)
        except Exception as inner:  # noqa: BLE001 - as above
            return Unavailable("export", f"torch.export.export raised {describe_error(inner)}", failed=True)
        gm = program.module()
        gm.firstdiv_path_prefix = "model."  # the wrapper's attribute: layers are compared under the model's own paths
        return _describe(gm, "export: torch.export.export(copy, example_inputs).module(), through a wrapper returning "
                             "the output's key/value cache as a dict of its tensors (the cache type has no pytree "
                             "registration)")
    return _describe(program.module(), "export: torch.export.export(copy, example_inputs).module()")


def _quantize_dynamic() -> Callable[..., Any] | None:
    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:
        return None
    if not torch.backends.quantized.supported_engines or torch.backends.quantized.engine == "none":
        return None
    return quantize_dynamic


def _int8(model: nn.Module, **_: Any) -> Any:
    quantize = _quantize_dynamic()
    if quantize is None:
        return Unavailable("int8", f"torch {torch.__version__} has no eager-mode dynamic quantization "
                                   f"(torch.ao.quantization.quantize_dynamic) or no quantized engine; build the int8 "
                                   f"variant with torchao and pass it in the variants dict", failed=False)
    # parameters, not ``m.weight``: a parametrized weight (spectral norm) is recomputed, in place, when read
    dtypes = sorted({str(p.dtype).replace("torch.", "") for m in model.modules() if isinstance(m, nn.Linear)
                     for p in m.parameters() if p.is_floating_point() and p.dtype != torch.float32})
    if dtypes:
        return Unavailable("int8", f"dynamic int8 quantization takes float32 nn.Linear layers, and this model's are "
                                   f"{', '.join(dtypes)}: quantize a float32 copy (model.float()) and feed it float32 "
                                   f"inputs, then pass it in the variants dict", failed=False)
    twin = _copy(model)
    modes = {name: m.training for name, m in twin.named_modules()}
    folds = folded(twin)  # a deployment folds spectral/weight norm and parametrizations before quantizing
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices, on every call
            quantized = quantize(twin, {nn.Linear}, dtype=torch.qint8, inplace=True)
    except Exception as exc:  # noqa: BLE001 - a model int8 cannot convert is a finding about the deployment path
        return Unavailable("int8", f"quantize_dynamic raised {describe_error(exc)}", failed=True)
    for name, m in quantized.named_modules():
        if name in modes:
            m.training = modes[name]
    return _describe(quantized, "int8: torch.ao.quantization.quantize_dynamic(copy, {nn.Linear}, dtype=torch.qint8) "
                                "(per-tensor scales)" + (f"; reparametrizations folded first: {', '.join(folds)}" if folds else ""))


_BUILDERS = {"eager": _eager, "compiled": _compiled, "reloaded": _reloaded, "export": _export, "int8": _int8}


def _check_kinds(kinds: Any) -> tuple[str, ...]:
    if isinstance(kinds, str):
        kinds = (kinds,)
    if not isinstance(kinds, Sequence) or not kinds:
        raise InvalidArgument(f"Expected `kinds` to be a non-empty sequence of {', '.join(KINDS)} but got {kinds!r}")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise InvalidArgument(f"Expected `kinds` to be among {', '.join(KINDS)} but got {bad[0]!r}")
    if len(set(kinds)) != len(kinds):
        raise InvalidArgument(f"Expected `kinds` without repeats but got {list(kinds)}")
    return tuple(kinds)


def _check_factory(factory: Any) -> str | None:
    if factory is None:
        return None
    if not isinstance(factory, str) or not _FACTORY.match(factory):
        raise InvalidArgument(f"Expected `factory` to be 'module.path:function' (importable, no arguments) but got {factory!r}")
    module = factory.partition(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise InvalidArgument(f"Expected `factory` module {module!r} to be importable (installed or on sys.path) but it "
                              f"was not found")
    return factory


def variants(model: nn.Module, kinds: Sequence[str] = KINDS, *, example_inputs: Any = None, factory: str | None = None,
             compile_backend: str | Callable[..., Any] = "inductor") -> tuple[dict[str, Any], dict[str, Tolerance]]:
    """``(variants, tolerances)``: ``{kind: variant}`` in the order of ``kinds`` and ``{kind: Tolerance}``, ready for
    ``compare_outputs(variants, inputs, tolerances=tolerances)``. See the module docstring for how each is built."""
    check_model(model)
    kinds = _check_kinds(kinds)
    if "export" in kinds and example_inputs is None:
        raise InvalidArgument("Expected `example_inputs` (the inputs torch.export traces with) for the 'export' variant but "
                              "got None; pass example_inputs=... or leave 'export' out of kinds")
    if not (isinstance(compile_backend, str) or callable(compile_backend)):
        raise InvalidArgument(f"Expected `compile_backend` to be a backend name or callable but got {compile_backend!r}")
    factory = _check_factory(factory)
    with guarded():  # RNG states and grad mode: building (export tracing, say) must not move them
        built = {kind: _BUILDERS[kind](model, example_inputs=example_inputs, factory=factory, compile_backend=compile_backend)
                 for kind in kinds}
    return built, {kind: TOLERANCES[kind] for kind in kinds}
