"""Feature space (appendix section 9): name the represented object before interpreting numbers.

``vectors`` is any tensor (or numpy array) of representations and ``axis`` the axis holding one
vector's coordinates; every other axis enumerates vectors, so ``[B, T, D]`` with ``axis=-1`` is
``B*T`` vectors of ``D`` coordinates. The inspector rows, in this order:

- non-finite values (``features.nonfinite``, where ``"vectors"``); later rows use the finite vectors;
- vector norms (min / median / max) and collapse toward zero (``features.collapse_zero``): a vector is
  *zero* when its norm is at most ``1e-6`` times the largest norm (or exactly 0); FAIL when more than 90%
  of the vectors are zero (WARN above 50%), confirmed on the vectors first: they are zero also against the
  99th-percentile norm (not only against a few outliers), and on a ``[B, T, D]``-like grid they are not a
  contiguous head or tail of every row (padding positions); unconfirmed: a WARN saying which;
- per-coordinate scales (std per coordinate, constant coordinates) and dominant coordinates
  (``features.dominant_coordinate``, where ``"coordinate k"``): WARN when one coordinate holds more than
  ``max(0.5, min(0.9, 8 / D))`` of the total energy ``sum x_k^2`` (uniform share is ``1 / D``): from the
  vectors alone that cannot be told from a design (massive activations, raw features in their units);
- pairwise cosine on at most 256 non-zero vectors taken at evenly spaced indices (deterministic), raw
  and after centering; collapse toward one direction (``features.collapse_direction``): FAIL when the
  mean ``|cos|`` exceeds 0.99 *and* the centered vectors have nothing left but one direction (top
  principal component > 90% of the centered variance, or centered energy < 1e-4 of the mean vector's
  energy); a mean ``|cos|`` above 0.99 with a rich centered spread is only a WARN (anisotropy: a shared
  offset dominates cosine). Non-negative (post-ReLU) features have raw cosine around 0.5-0.8 and pass.
- invariances the user asks for (``features.invariance_broken``, where ``"invariance:<name>"``), each
  comparing ``encoder(inputs)`` with ``encoder(transform(inputs))`` by the named quantity.

The tensor is read (a float64 copy), never modified. The encoder runs in its current train/eval mode
under ``torch.no_grad()`` inside :func:`~firstdiv.instruments._core.state.guarded` (parameters, buffers,
modes, hooks, RNG states and grad mode restored), on copies of ``inputs``, with the same torch RNG
state before every call so dropout in training mode draws the same masks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import InvalidArgument
from ..report import Report, Status, skipped
from ._core.checks import Check, check, compose
from ._core.state import guarded
from ._core.user_hooks import reports_user_hooks

__all__ = ["dominant_threshold", "feature_space"]

_NAME = "feature_space"
ZERO_RELATIVE = 1e-6       # a vector is zero when its norm <= this times the largest norm
ZERO_FAIL, ZERO_WARN = 0.9, 0.5
COSINE_SAMPLE = 256
DIRECTION_COS = 0.99       # mean |cos| above this: all vectors on (nearly) one line through the origin
DIRECTION_TOP_PC = 0.9     # ... and the centered vectors vary along one direction only
DIRECTION_SPREAD = 1e-4    # ... or hardly vary at all relative to the mean vector
QUANTITIES = ("cosine", "value", "norm", "argmax")
_DEFAULT_TOL = {"cosine": 1e-4, "value": 1e-4, "norm": 1e-4, "argmax": 0.0}


@reports_user_hooks
def feature_space(vectors: Any, axis: int = -1, *, encoder: Callable | None = None, inputs: Any = None,
                  invariances: dict[str, Any] | None = None) -> Report:
    """Inspect a tensor of representation vectors whose coordinates lie along ``axis``.

    ``vectors``: tensor or numpy array, at least 2-d; every axis but ``axis`` enumerates vectors.
    ``invariances``: ``{name: transform}`` (compared by per-vector cosine, tol 1e-4) or
    ``{name: (transform, quantity[, tol])}`` with quantity ``"cosine"`` (min cosine >= 1 - tol),
    ``"value"`` (relative Frobenius change <= tol), ``"norm"`` (relative per-vector norm change <= tol),
    ``"argmax"`` (fraction of vectors whose argmax changes <= tol), or a callable ``outputs -> tensor``
    (max abs change <= tol * max(1, max |quantity|)). Each needs ``encoder`` and ``inputs``: the
    encoder is called as ``encoder(inputs)`` (``encoder(*inputs)`` for a tuple, ``encoder(**inputs)``
    for a dict) and ``encoder(transform(inputs))``; its output holds vectors along ``axis`` too.
    Returns a :class:`~firstdiv.report.Report`; bad arguments raise ``InvalidArgument``.
    """
    x, shape, coord_axis = _as_matrix(vectors, axis)
    specs = _check_invariances(invariances, encoder, inputs)
    details: dict[str, Any] = {"shape": shape, "axis": coord_axis, "vectors": x.shape[0], "coordinates": x.shape[1]}
    if x.numel() == 0:
        return skipped(_NAME, f"`vectors` of shape {shape} holds no values: pass a non-empty tensor", **details)
    rows = []
    finite_row, x = _nonfinite(x)
    rows.append(finite_row)
    if x.shape[0] == 0:
        details["finite_vectors"] = 0
    else:
        grid = [n for i, n in enumerate(shape) if i != coord_axis]
        norm_rows, nonzero = _norms(x, details, grid)
        rows += norm_rows + _coordinates(x, details) + _cosine(nonzero, details)
    if specs:
        rows += _invariance_rows(encoder, inputs, specs, axis)  # type: ignore[arg-type]
    effects = "none"
    if specs:
        effects = (f"encoder called {1 + len(specs)} times in its current mode under torch.no_grad on copies of `inputs`, "
                   "inside guarded(): parameters, buffers, modes, hooks and RNG states restored")
    return compose(_NAME, rows, effects, details)


def dominant_threshold(d: int) -> float:
    """Energy share above which one of ``d`` coordinates is called dominant (uniform share: 1/d)."""
    return max(0.5, min(0.9, 8.0 / d))


# ---- argument checks ------------------------------------------------------------------------------

def _as_matrix(vectors: Any, axis: Any) -> tuple[torch.Tensor, list[int], int]:
    """``[N, D]`` float64 copy of ``vectors`` with the coordinate axis last; also the shape and the axis."""
    if isinstance(vectors, np.ndarray):
        if vectors.dtype == object or not (np.issubdtype(vectors.dtype, np.number) or vectors.dtype == np.bool_):
            raise InvalidArgument(f"Expected `vectors` to be a numeric array but got dtype {vectors.dtype}")
        vectors = torch.from_numpy(np.array(vectors, copy=True))
    if not isinstance(vectors, torch.Tensor):
        raise InvalidArgument(f"Expected `vectors` to be a torch.Tensor or numpy array but got {type(vectors).__name__}")
    if vectors.is_complex():
        raise InvalidArgument(f"Expected `vectors` to be real-valued but got {vectors.dtype}")
    if vectors.dim() < 2:
        raise InvalidArgument(f"Expected `vectors` to have at least 2 dims (vectors x coordinates) but got shape {list(vectors.shape)}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -vectors.dim() <= axis < vectors.dim():
        raise InvalidArgument(f"Expected `axis` to be an int in [-{vectors.dim()}, {vectors.dim() - 1}] but got {axis!r}")
    x = vectors.detach().to("cpu", torch.float64, copy=True).movedim(axis, -1)
    return x.reshape(-1, x.shape[-1]), list(vectors.shape), axis % vectors.dim()


def _check_invariances(invariances: Any, encoder: Any, inputs: Any) -> dict[str, tuple[Callable, Any, float]]:
    if invariances is None:
        return {}
    if not isinstance(invariances, dict) or not invariances:
        raise InvalidArgument(f"Expected `invariances` to be a non-empty dict name -> transform but got {invariances!r:.60}")
    if encoder is None or inputs is None or not callable(encoder):
        raise InvalidArgument("Expected `encoder` (a callable) and `inputs` with `invariances` but got "
                              f"encoder={type(encoder).__name__}, inputs={type(inputs).__name__}")
    out: dict[str, tuple[Callable, Any, float]] = {}
    for name, spec in invariances.items():
        fn, quantity, tol = None, None, None
        if callable(spec):
            fn, quantity = spec, "cosine"
        elif isinstance(spec, tuple) and 2 <= len(spec) <= 3:
            fn, quantity, tol = (*spec, None)[:3]
        if not isinstance(name, str) or not callable(fn):
            raise InvalidArgument(f"Expected invariance {name!r} to be a transform or (transform, quantity[, tol]) but got {spec!r:.60}")
        if not (callable(quantity) or quantity in QUANTITIES):
            raise InvalidArgument(f"Expected the quantity of invariance {name!r} to be one of {', '.join(QUANTITIES)} "
                                  f"or a callable outputs -> tensor but got {quantity!r}")
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float)) or tol < 0):
            raise InvalidArgument(f"Expected the tolerance of invariance {name!r} to be a non-negative number but got {tol!r}")
        out[name] = (fn, quantity, float(tol) if tol is not None else _DEFAULT_TOL.get(quantity, 1e-4))  # type: ignore[arg-type]
    return out


# ---- the inspector rows ---------------------------------------------------------------------------

def _nonfinite(x: torch.Tensor) -> tuple[Check, torch.Tensor]:
    bad = ~torch.isfinite(x)
    rows = bad.any(dim=1)
    count = int(bad.sum())
    if count == 0:
        return check("vectors", "features.nonfinite", Status.PASS, f"all {x.numel()} values finite"), x
    first = [int(i) for i in bad.nonzero()[0]]
    ev = {"nonfinite_values": count, "vectors_affected": int(rows.sum()), "vectors": x.shape[0],
          "nan": int(x.isnan().sum()), "inf": int(x.isinf().sum()), "first": {"vector": first[0], "coordinate": first[1]}}
    return check("vectors", "features.nonfinite", Status.FAIL,
                 f"{count} non-finite values in {ev['vectors_affected']} of {x.shape[0]} vectors "
                 f"(first at vector {first[0]}, coordinate {first[1]}); later rows use the finite vectors", ev,
                 expected="all values finite", observed=f"{ev['nan']} NaN, {ev['inf']} Inf",
                 hint="find the first producer of the non-finite value (an overflow, log(0), 0/0 upstream)"), x[~rows]


def _norms(x: torch.Tensor, details: dict, grid: list[int]) -> tuple[list[Check], torch.Tensor]:
    norms = x.norm(dim=1)
    top = float(norms.max())
    zero = norms <= ZERO_RELATIVE * top
    frac = float(zero.float().mean())
    stats = {"min": float(norms.min()), "median": float(norms.median()), "max": top}
    details["norms"] = stats
    rows = [check("vectors", "features.norms", Status.PASS,
                  f"norms min {stats['min']:.4g}, median {stats['median']:.4g}, max {top:.4g} over {x.shape[0]} vectors", stats)]
    ev = {"zero_vectors": int(zero.sum()), "vectors": x.shape[0], "fraction": frac, "threshold_norm": ZERO_RELATIVE * top,
          "max_norm": top}
    msg = (f"{ev['zero_vectors']} of {x.shape[0]} vectors ({frac:.1%}) have norm <= {ZERO_RELATIVE:g} x max norm "
           f"({top:.4g})")
    if frac <= ZERO_FAIL:
        rows.append(check("vectors", "features.collapse_zero", Status.WARN if frac > ZERO_WARN else Status.PASS, msg, ev))
        return rows, x[~zero]
    why = _zero_unconfirmed(norms, zero, grid, ev)
    if why:
        rows.append(check("vectors", "features.collapse_zero", Status.WARN, f"{msg}; not a FAIL: {why}",
                          {**ev, "premise_confirmed": False}))
    else:
        rows.append(check("vectors", "features.collapse_zero", Status.FAIL, msg, ev,
                          expected=f"at most {ZERO_FAIL:.0%} zero vectors", observed=f"{frac:.1%} zero vectors",
                          hint="dead units: look for a large negative bias before a ReLU, a zero init, or a saturated gate"))
    return rows, x[~zero]


def _zero_unconfirmed(norms: torch.Tensor, zero: torch.Tensor, grid: list[int], ev: dict) -> str:
    """Why "mostly zero vectors" is not confirmed as collapse, or "": the vectors are zero also against the 99th
    percentile norm (or exactly 0), not only against one outlier; and, on a [n0, n1] grid of vectors ([B, T, D]),
    the zero ones are not a contiguous head or tail of every row along one axis (padding positions)."""
    robust = float(norms.sort().values[int(0.99 * (norms.numel() - 1))])
    kept = float(((norms == 0) | (norms <= ZERO_RELATIVE * robust)).float().mean())
    ev["fraction_vs_99th_percentile_norm"] = kept
    if kept <= ZERO_FAIL:
        return (f"against the 99th-percentile norm ({robust:.4g}) only {kept:.1%} are zero: a few outlying vectors make "
                "the rest look zero")
    if len(grid) == 2:
        z = zero.view(*grid)
        for j in (0, 1):
            lines = z.movedim(j, -1)
            tail = ~(lines[:, :-1] & ~lines[:, 1:]).any(1)
            head = ~(~lines[:, :-1] & lines[:, 1:]).any(1)
            if bool((tail | head).all()) and bool((lines.any(1) & ~lines.all(1)).any()):
                ev["padding_like_axis"] = j
                return (f"the zero vectors are a contiguous head or tail of every line along vector axis {j} of the "
                        f"{grid} grid: padding positions, not representations; pass only the real positions")
    return ""


def _coordinates(x: torch.Tensor, details: dict) -> list[Check]:
    d = x.shape[1]
    std = x.std(dim=0, unbiased=False)
    energy = (x * x).sum(dim=0)
    total = float(energy.sum())
    share = energy / total if total > 0 else torch.zeros(d, dtype=x.dtype)
    k = int(share.argmax())
    scales = {"min": float(std.min()), "median": float(std.median()), "max": float(std.max()),
              "constant": int((std == 0).sum()), "coordinates": d}
    details["coordinate_std"] = scales
    details["energy_share"] = {"max": float(share[k]), "coordinate": k, "uniform": 1.0 / d}
    rows = [check("vectors", "features.coordinate_scales", Status.PASS,
                  f"coordinate std min {scales['min']:.4g}, median {scales['median']:.4g}, max {scales['max']:.4g}; "
                  f"{scales['constant']} of {d} coordinates constant", scales)]
    limit = dominant_threshold(d)
    ev = {"coordinate": k, "energy_share": float(share[k]), "threshold": limit, "uniform_share": 1.0 / d,
          "std": float(std[k]), "median_std": scales["median"]}
    msg = f"coordinate {k} holds {float(share[k]):.1%} of the energy (uniform share {1.0 / d:.1%}, limit {limit:.0%})"
    if d >= 2 and float(share[k]) > limit:  # from the vectors alone a dominant coordinate cannot be told from a design
        rows.append(check(f"coordinate {k}", "features.dominant_coordinate", Status.WARN, f"{msg}; not a FAIL: one "
                          "coordinate holding most of the energy may be the design (massive activations in transformer "
                          "hidden states, raw features in their own units), and no argument declares the coordinates' "
                          "intended scales", {**ev, "premise_confirmed": False},
                          hint="one coordinate dominates dot products and distances: a unit change, a missing "
                               "normalization, or an exploding unit"))
    else:
        rows.append(check(f"coordinate {k}", "features.dominant_coordinate", Status.PASS, msg, ev))
    return rows


def _sample(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] <= COSINE_SAMPLE:
        return x
    return x[torch.linspace(0, x.shape[0] - 1, COSINE_SAMPLE, dtype=torch.float64).round().long().unique()]


def _mean_offdiag(m: torch.Tensor) -> float:
    n = m.shape[0]
    return float((m.sum() - m.diagonal().sum()) / (n * (n - 1)))


def _cosine(x: torch.Tensor, details: dict) -> list[Check]:
    s = _sample(x)
    if s.shape[1] < 2:
        return [check("vectors", "features.cosine", Status.SKIPPED, "one coordinate: every direction is trivially the same")]
    if s.shape[0] < 2:
        return [check("vectors", "features.cosine", Status.SKIPPED, f"only {s.shape[0]} non-zero finite vector(s): "
                      "pairwise cosine needs at least 2")]
    u = s / s.norm(dim=1, keepdim=True)
    cos = u @ u.T
    mean = x.mean(dim=0)
    centered = s - mean
    cn = centered.norm(dim=1, keepdim=True)
    uc = centered / cn.clamp_min(1e-300)
    sv = torch.linalg.svdvals(centered)
    var = float((sv * sv).sum())
    top = float(sv[0] ** 2 / var) if var > 0 else 1.0
    spread = var / (s.shape[0] * float(mean @ mean)) if float(mean @ mean) > 0 else float("inf")
    off = ~torch.eye(s.shape[0], dtype=torch.bool)
    ev = {"sampled": s.shape[0], "mean_cos": _mean_offdiag(cos), "mean_abs_cos": _mean_offdiag(cos.abs()),
          "min_cos": float(cos[off].min()), "max_cos": float(cos[off].max()),
          "mean_centered_cos": _mean_offdiag(uc @ uc.T), "top_component_share": top, "centered_spread": spread}
    details["cosine"] = ev
    rows = [check("vectors", "features.cosine", Status.PASS,
                  f"pairwise cosine on {s.shape[0]} vectors: mean {ev['mean_cos']:.3f} (|cos| {ev['mean_abs_cos']:.3f}), "
                  f"min {ev['min_cos']:.3f}, max {ev['max_cos']:.3f}; after centering mean {ev['mean_centered_cos']:.3f}", ev)]
    msg = (f"mean |cos| {ev['mean_abs_cos']:.4f} (limit {DIRECTION_COS}); centered: top component {top:.1%} of the variance, "
           f"spread {spread:.3g} x mean-vector energy")
    if ev["mean_abs_cos"] > DIRECTION_COS and (top > DIRECTION_TOP_PC or spread < DIRECTION_SPREAD):
        rows.append(check("vectors", "features.collapse_direction", Status.FAIL, msg, ev,
                          expected=f"mean |cos| <= {DIRECTION_COS}", observed=f"{ev['mean_abs_cos']:.4f}",
                          hint="every vector points the same way: a collapsed representation (constant output, "
                               "a dominant bias, or a normalization that removed the variation)"))
    elif ev["mean_abs_cos"] > DIRECTION_COS:
        rows.append(check("vectors", "features.collapse_direction", Status.WARN,
                          msg + ": a shared offset dominates cosine; center the vectors before comparing them", ev))
    else:
        rows.append(check("vectors", "features.collapse_direction", Status.PASS, msg, ev))
    return rows


# ---- invariances ----------------------------------------------------------------------------------

def _call(encoder: Callable, inputs: Any) -> Any:
    inputs = copy.deepcopy(inputs)  # neither the encoder nor the transform may touch the user's inputs
    if isinstance(inputs, dict):
        return encoder(**inputs)
    if isinstance(inputs, tuple):
        return encoder(*inputs)
    return encoder(inputs)


def _vectors_of(out: Any, axis: int, label: str) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"encoder returned {type(out).__name__} for {label}, expected a tensor of vectors")
    x = out.detach().to("cpu", torch.float64, copy=True)
    if out.dim() < 1 or not -out.dim() <= axis < out.dim():
        raise TypeError(f"encoder output for {label} has shape {list(out.shape)}: no axis {axis}")
    return x.movedim(axis, -1).reshape(-1, x.shape[axis])


def _compare(a: Any, b: Any, quantity: Any, tol: float, axis: int) -> tuple[bool, dict[str, Any], str]:
    """(holds, evidence, observed) for the named quantity of outputs ``a`` (inputs) and ``b`` (transformed)."""
    if callable(quantity):
        qa, qb = (torch.as_tensor(quantity(o)).detach().to("cpu", torch.float64) for o in (a, b))
        if qa.shape != qb.shape:
            return False, {"shape": list(qa.shape), "shape_transformed": list(qb.shape)}, "quantity changed shape"
        err = float((qa - qb).abs().max()) if qa.numel() else 0.0
        scale = float(qa.abs().max()) if qa.numel() else 0.0
        return err <= tol * max(scale, 1.0), {"max_abs_change": err, "scale": scale, "tol": tol}, f"max change {err:.4g}"
    va, vb = _vectors_of(a, axis, "inputs"), _vectors_of(b, axis, "transform(inputs)")
    if va.shape != vb.shape:
        return False, {"vectors": list(va.shape), "vectors_transformed": list(vb.shape)}, "output changed shape"
    if quantity == "cosine":
        na, nb = va.norm(dim=1), vb.norm(dim=1)
        cos = (va * vb).sum(dim=1) / (na * nb).clamp_min(1e-300)
        cos = torch.where((na == 0) & (nb == 0), torch.ones_like(cos), cos)
        worst = int(cos.argmin())
        return float(cos.min()) >= 1 - tol, {"min_cos": float(cos.min()), "mean_cos": float(cos.mean()), "worst_vector": worst,
                                             "tol": tol}, f"min cosine {float(cos.min()):.6f} (vector {worst})"
    if quantity == "argmax":
        same = (va.argmax(dim=1) == vb.argmax(dim=1)).double()
        frac = float(same.mean())
        return frac >= 1 - tol, {"same_argmax": frac, "tol": tol}, f"argmax unchanged for {frac:.1%} of vectors"
    if quantity == "norm":
        na, nb = va.norm(dim=1), vb.norm(dim=1)
        rel = float(((na - nb).abs() / na.clamp_min(1e-300)).max())
        return rel <= tol, {"max_rel_norm_change": rel, "tol": tol}, f"norm changes by up to {rel:.4g} (relative)"
    rel = float((va - vb).norm() / va.norm().clamp_min(1e-300))
    return rel <= tol, {"rel_change": rel, "tol": tol}, f"outputs change by {rel:.4g} (relative Frobenius)"


def _invariance_rows(encoder: Callable, inputs: Any, specs: dict, axis: int) -> list[Check]:
    objects = [encoder] if isinstance(encoder, nn.Module) else []
    rows: list[Check] = []
    with guarded(*objects), torch.no_grad():
        state = torch.get_rng_state()
        try:
            base = _call(encoder, inputs)
        except Exception as exc:  # noqa: BLE001 - the user's encoder failing is a finding, not a crash
            msg = f"not evaluated: encoder(inputs) raised {type(exc).__name__}: {exc}"
            return [check(f"invariance:{n}", "features.invariance_broken", Status.WARN, msg) for n in specs]
        for name, (fn, quantity, tol) in specs.items():
            where, qname = f"invariance:{name}", quantity if isinstance(quantity, str) else getattr(quantity, "__name__", "quantity")
            try:
                moved = fn(copy.deepcopy(inputs))
                torch.set_rng_state(state)
                out = _call(encoder, moved)
                holds, ev, observed = _compare(base, out, quantity, tol, axis)
            except Exception as exc:  # noqa: BLE001
                rows.append(check(where, "features.invariance_broken", Status.WARN,
                                  f"not evaluated: {type(exc).__name__}: {exc}"))
                continue
            ev["quantity"] = qname
            if holds:
                rows.append(check(where, "features.invariance_broken", Status.PASS, f"{qname} unchanged: {observed}", ev))
            else:
                rows.append(check(where, "features.invariance_broken", Status.FAIL, f"{qname} changed: {observed}", ev,
                                  expected=f"{qname} unchanged under {name!r} (tol {tol:g})", observed=observed,
                                  hint="the quantity is not invariant to this transform: either the quantity is named "
                                       "wrongly (dot product vs cosine) or the encoder is not invariant"))
    return rows
