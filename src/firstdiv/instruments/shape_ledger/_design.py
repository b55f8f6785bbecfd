"""The designed shapes ``shape_ledger(..., designed=...)`` checks: a self-consistent network can still differ from
its design (a user who got a shape error and patched ``fc = nn.Linear(2048, 10)`` where the design says 512).

``designed`` maps module paths (as in ``named_modules()``) to the per-example output shape the design gives that
module, the batch axis left out: ``{"layer4": (512, 7, 7), "avgpool": (512, 1, 1), "fc": (1000,)}``; ``None`` for
an axis the design leaves free (a sequence length). Every call of a designed module is compared; the first output
(in execution order) that differs is ``shape.design_mismatch`` at that module. When the module is a container
(a ResNet stage) or the difference starts earlier, the layers that ran since the last designed output that matched
are searched for the ``culprit``: for channels, the first layer there that produced the observed C; for the
spatial size, an ``nn.Identity`` there (a removed layer, when the size is larger than designed), else the first
conv/pooling window whose stride, changed alone, gives the designed size (e.g. ``layer3.0.conv1`` at stride 1
where the design downsamples).

API (for ``shape_ledger``):

- ``parse_designed(model, designed) -> dict[str, tuple]`` — validated, keyed by the model's raw module paths.
- ``design_checks(ledger, designed, user_path) -> list[tuple[int, Check]]`` — (clock, check) per designed output.
"""

from __future__ import annotations

import difflib
from typing import Any

from torch import nn

from ...errors import InvalidArgument
from ...report import Status
from .._core.checks import Check, check
from ._geometry import Entry, Ledger

_COMPILED = "_orig_mod."  # the wrapped module's attribute in a torch.compile OptimizedModule


def user_path(path: str) -> str:
    """A module path (or ``op:name@path``) in the user's terms: ``torch.compile``'s ``_orig_mod`` level left out."""
    if _COMPILED not in path + ".":
        return path
    head, sep, tail = path.rpartition("@")
    return head + sep + ".".join(p for p in tail.split(".") if p != "_orig_mod")


def _shape(path: str, value: Any) -> tuple[int | None, ...]:
    if not isinstance(value, (tuple, list)) or not all(v is None or (isinstance(v, int) and not isinstance(v, bool)
                                                                     and v >= 0) for v in value):
        raise InvalidArgument(f"Expected `designed[{path!r}]` to be a per-example shape (a tuple of ints, None for a "
                              f"free axis, batch axis left out) but got {value!r}")
    return tuple(value)


def parse_designed(model: nn.Module, designed: Any) -> dict[str, tuple[int | None, ...]]:
    if designed is None:
        return {}
    if not isinstance(designed, dict) or not all(isinstance(k, str) for k in designed):
        raise InvalidArgument("Expected `designed` to be a dict {module path: per-example output shape}, e.g. "
                              f"{{'fc': (1000,)}}, but got {type(designed).__name__}")
    raw = {user_path(p): p for p, _ in model.named_modules()}
    out = {}
    for path, value in designed.items():
        key = user_path(path)
        if key not in raw:
            close = difflib.get_close_matches(key, [p for p in raw if p], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgument(f"Expected `designed` keys to be module paths of the model (named_modules()) but "
                                  f"{path!r} is not one{hint}")
        out[raw[key]] = _shape(path, value)
    return out


def _matches(observed: list[int], design: tuple[int | None, ...]) -> bool:
    return len(observed) == len(design) and all(d is None or d == o for o, d in zip(observed, design))


def _out_len(length: int, k: int, s: int, p: int, d: int) -> int:
    return (length + 2 * p - d * (k - 1) - 1) // s + 1


def _stride_explains(e: Entry, observed: list[int], design: list[int]) -> list[int] | None:
    """The stride at ``e`` that, the rest of the span unchanged, gives the designed spatial size (None if none)."""
    win, inp, out = e.extra["window"], e.observed_input[2:], e.observed_output[2:]
    strides = []
    for length, o_e, k, s, p, d, o, want in zip(inp, out, win["k"], win["s"], win["p"], win["d"], observed, design):
        if o == want:
            strides.append(s)
            continue
        if (s * o) % want or s * o // want < 1:
            return None
        stride = s * o // want
        if _out_len(length, k, stride, p, d) * o != want * o_e:
            return None
        strides.append(stride)
    return strides


def _spatial_culprit(span: list[Entry], observed: list[int], design: list[int]) -> tuple[Entry | None, str]:
    """A layer replaced by ``nn.Identity`` (spatial size too large), else the first window whose stride, changed
    alone, gives the designed size."""
    n = len(design)
    if any(o > d for o, d in zip(observed, design)):
        identity = next((e for e in span if e.operation == "Identity"), None)
        if identity is not None:
            return identity, "an nn.Identity (a removed layer?)"
    for e in span:
        if e.extra.get("window") is None or e.observed_output is None or len(e.observed_input) != n + 2:
            continue
        strides = _stride_explains(e, observed, design)
        if strides is not None:
            return e, f"stride {tuple(strides)} there gives the designed size"
    return None, ""


def _culprit(span: list[Entry], observed: list[int], design: tuple[int | None, ...]) -> tuple[Entry | None, str]:
    """The layer in the span whose geometry explains the difference, and which quantity differs."""
    if len(observed) != len(design):
        return next((e for e in reversed(span) if e.observed_output and len(e.observed_output) != len(e.observed_input)),
                    None), "rank"
    if design and design[0] is not None and observed[0] != design[0]:
        axis = 1 if len(observed) > 1 else -1  # C of [C, spatial...], the features of [features]
        return next((e for e in span if e.declares in ("C", "features") and e.observed_output
                     and len(e.observed_output) > abs(axis) and e.observed_output[axis] == observed[0]), None), "C"
    keep = [i for i, d in enumerate(design[1:]) if d is not None]
    culprit, why = _spatial_culprit(span, [observed[1 + i] for i in keep], [design[1 + i] for i in keep]) \
        if len(keep) == len(design) - 1 else (None, "")
    return culprit, "spatial" + (f": {why}" if why else "")


def _mismatch(ledger: Ledger, path: str, clock: int, observed: list[int], design: tuple[int | None, ...],
              since: int, name: str) -> Check:
    span = [e for e in ledger.entries if since < e.start <= clock]
    culprit, changed = _culprit(span, observed, design)
    changed, _, why = changed.partition(": ")
    ev = {"designed": list(design), "observed": observed, "changed": changed or "shape"}
    tail = ""
    if culprit is not None and culprit.stage != user_path(path):
        ev.update(culprit=culprit.stage, culprit_operation=culprit.operation, culprit_output=culprit.observed_output)
        what = "the spatial size" if changed == "spatial" else "C" if changed == "C" else "the rank"
        tail = (f"; since the last designed output that matched, the layer that set {what} is {culprit.stage} "
                f"({culprit.operation}: {culprit.observed_input} -> {culprit.observed_output}"
                + (f"; {why}" if why else "") + ")")
    return check(name, "shape.design_mismatch", Status.FAIL,
                 f"{name}: designed per-example output {tuple(design)}, observed {tuple(observed)}{tail}", ev,
                 expected=list(design), observed=observed,
                 hint=f"the network runs but differs from its design at {name}{tail}: repair the layer that changed; "
                      "never patch a later layer's in_features to match")


def design_checks(ledger: Ledger, designed: dict[str, tuple[int | None, ...]],
                  user_path_of: Any) -> list[tuple[int, Check]]:
    """A check per designed module (its first mismatching call, else its first call), in execution order; designed
    modules that never returned an output are SKIPPED with the reason."""
    out: list[tuple[int, Check]] = []
    seen: set[str] = set()
    since, failed = 0, False
    for clock, path, shape in ledger.outputs:
        name = user_path_of(path)
        design = designed[path]
        observed = shape[1:] if shape else None
        if observed is None or path in seen:
            continue
        if _matches(observed, design):
            since = clock
            if not any(c.finding.where == name for _, c in out):
                out.append((clock, check(name, "shape.design", Status.PASS, f"{name}: per-example output "
                                         f"{tuple(observed)} as designed", {"designed": list(design)})))
            continue
        if _matches(shape, design) and len(shape) > 1:
            raise InvalidArgument(f"Expected `designed[{name!r}]` to be a per-example shape (batch axis left out) but "
                                  f"{tuple(design)} is the whole output shape {tuple(shape)}: give {tuple(shape[1:])}")
        seen.add(path)
        out = [(k, c) for k, c in out if c.finding.where != name]
        if failed:
            out.append((clock, check(name, "shape.after_divergence", Status.SKIPPED, f"{name}: designed "
                                     f"{tuple(design)}, observed {tuple(observed)} (after the first divergence)")))
            continue
        out.append((clock, _mismatch(ledger, path, clock, observed, design, since, name)))
        failed = True
    ran = {p for _, p, s in ledger.outputs if s is not None}
    for path, design in designed.items():
        if path not in ran:
            out.append((ledger.clock + 1, check(user_path_of(path), "shape.design_not_checked", Status.SKIPPED,
                                                f"{user_path_of(path)}: designed {tuple(design)} not checked: the "
                                                "module returned no tensor in this forward pass")))
    return sorted(out, key=lambda kc: kc[0])
