"""Determinism audit (chapter 14's E2 and E3): the same seed twice, then one change at a time.

Each check reports whether curves and trained state are bit-identical, the first epoch where the
curves diverge, and the size of the difference relative to the seed noise floor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidArgument
from ..report import Divergence, Finding, Report, Status
from . import stats
from .record import RunRecord
from .runner import identity, run_seed
from .store import Store
from .sweep import sweep
from .workload import Workload, resolve


def _run(wl: Workload, config: dict[str, Any], seed: int, *, deterministic: bool = False) -> RunRecord:
    """One run outside the store, with torch.use_deterministic_algorithms set for its duration."""
    import torch

    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(deterministic or saved[0], warn_only=saved[1] if not deterministic else False)
    try:
        rec = run_seed(wl, seed, identity(wl, config))
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    if not rec.ok:
        raise InvalidArgument(f"The workload failed at seed {seed}: {rec.error}")
    return rec


def _diff(a: RunRecord, b: RunRecord, metric: str, floor: float | None) -> dict[str, Any]:
    names = sorted(set(a.curves) & set(b.curves))
    first: int | None = None
    for name in names:
        diverge = next((i for i, (x, y) in enumerate(zip(a.curves[name], b.curves[name])) if x != y), None)
        if len(a.curves[name]) != len(b.curves[name]) and diverge is None:
            diverge = min(len(a.curves[name]), len(b.curves[name]))
        if diverge is not None and (first is None or diverge < first):
            first = diverge
    ca, cb = a.curves.get(metric, []), b.curves.get(metric, [])
    gap = max((abs(x - y) for x, y in zip(ca, cb)), default=0.0)
    state_same = None if a.state_hash is None or b.state_hash is None else a.state_hash == b.state_hash
    identical = first is None and state_same is not False
    return {"bit_identical": identical, "curves_identical": first is None, "state_identical": state_same,
            "first_diverging_epoch": first, "max_abs_diff": gap,
            "relative_to_noise_floor": gap / floor if floor else None}


def _variants(wl: Workload, config: dict[str, Any]) -> list[tuple[str, Callable[[], Any] | str]]:
    """(name, how to run it or why it is skipped) for each one-at-a-time change."""
    import torch

    threads = 2 if int(config.get("threads", 1)) == 1 else 1
    out: list[tuple[str, Any]] = [
        (f"threads {config.get('threads', 1)} -> {threads}", {"threads": threads}),
        ("torch.use_deterministic_algorithms(True)", "deterministic"),
    ]
    if not torch.cuda.is_available():
        out.append(("device cpu -> cuda", "no GPU on this machine (torch.cuda.is_available() is False)"))
    elif "device" not in (wl.spec.defaults or {}) and "device" not in wl.spec.exec_keys:
        out.append(("device cpu -> cuda", f"{wl.target} has no `device` config key to move it"))
    else:
        out.append(("device cpu -> cuda", {"device": "cuda"}))
    return out


def determinism(target: str | Workload, seed: int = 0, *, sets: Sequence[str] | None = None,
                config: dict[str, Any] | None = None, metric: str = "val_loss", noise_seeds: str = "0-5",
                store: Store | str | os.PathLike[str] | None = None, progress: bool = False) -> Report:
    """Run ``seed`` twice under fixed conditions, then once per changed condition; see module docstring.

    The noise floor is the seed spread of ``metric`` over ``noise_seeds`` (a recorded sweep, reused).
    """
    wl = target if isinstance(target, Workload) else resolve(target)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InvalidArgument(f"Expected --seed to be a non-negative integer but got {seed!r}")
    cfg = wl.config(config, list(sets or []))
    noise = sweep(wl, noise_seeds, config=cfg, name=f"determinism-noise-{wl.target.split(':')[-1]}", store=store,
                  progress=progress)
    values = noise.values(metric)
    if not values:
        known = ", ".join(noise.metrics) or "none"
        raise InvalidArgument(f"Metric {metric!r} is not recorded by {wl.target} (recorded: {known}); pass --metric")
    floor = stats.describe(values)["spread"] if len(values) > 1 else None
    first, second = _run(wl, cfg, seed), _run(wl, cfg, seed)
    checks = [{"name": "same seed twice", **_diff(first, second, metric, floor)}]
    for name, how in _variants(wl, cfg):
        if isinstance(how, str) and how != "deterministic":
            checks.append({"name": name, "skipped": how})
            continue
        other = _run(wl, cfg, seed, deterministic=True) if how == "deterministic" else _run(wl, dict(cfg, **how), seed)
        checks.append({"name": name, **_diff(first, other, metric, floor)})
    return _report(wl, seed, metric, floor, checks, first)


def _report(wl: Workload, seed: int, metric: str, floor: float | None, checks: list[dict[str, Any]],
            first: RunRecord) -> Report:
    findings = []
    for c in checks:
        if c.get("skipped"):
            findings.append(Finding(c["name"], "determinism", Status.SKIPPED, c["skipped"]))
            continue
        status = Status.PASS if c["bit_identical"] else Status.FAIL if c["name"] == "same seed twice" else Status.WARN
        message = ("bit-identical" if c["bit_identical"] else
                   f"diverges at epoch {c['first_diverging_epoch']}, max |delta| {c['max_abs_diff']:.3g}"
                   + (f" = {c['relative_to_noise_floor']:.3g}x the noise floor" if c["relative_to_noise_floor"] else ""))
        findings.append(Finding(c["name"], "determinism", status, message, c))
    base = checks[0]
    div = None
    if not base["bit_identical"]:
        div = Divergence("same seed twice", "determinism.not_reproducible", "bit-identical curves and state",
                         f"first difference at epoch {base['first_diverging_epoch']}",
                         "something in the run is not controlled by the seed: unseeded RNG, nondeterministic kernels "
                         "(try torch.use_deterministic_algorithms(True)), or thread-dependent reductions")
    details = {"workload": wl.target, "seed": seed, "metric": metric, "noise_floor": floor, "checks": checks,
               "environment": {k: first.env.get(k) for k in ("threads", "device", "deterministic_algorithms",
                                                             "cublas_workspace_config", "torch")}}
    return DeterminismReport("determinism", Status.FAIL if div else Status.PASS, div, tuple(findings),
                             side_effects="none (global determinism flags and thread count restored after each run)",
                             details=details)


class DeterminismReport(Report):
    def __rich_body__(self) -> Any:
        from ..render.sweeps import render_determinism

        return render_determinism(self)
