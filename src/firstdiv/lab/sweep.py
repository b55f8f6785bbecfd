"""Seed sweeps: run a workload at many seeds, record every run, summarise the noise floor."""

from __future__ import annotations

import os
import re
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..errors import InvalidArgument
from ..report import Divergence, Finding, Report, Status
from . import backends, stats
from .record import RunRecord
from .runner import identity
from .store import Store, SweepInfo
from .workload import Workload, resolve

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_seeds(text: str | Iterable[int]) -> list[int]:
    """'0-11', '0,3,5' or '0-3,8' -> sorted unique seeds; an iterable of ints passes through."""
    if not isinstance(text, str):
        seeds = list(text)
        if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise InvalidArgument(f"Expected `seeds` to be non-empty non-negative integers but got {seeds!r}")
        return sorted(set(seeds))
    seeds: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part)
        if not m:
            raise InvalidArgument(f"Expected seeds like 0-11 or 0,3,5 but got {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise InvalidArgument(f"Seed range {part.strip()!r} is empty: write LOW-HIGH with LOW <= HIGH")
        if hi - lo > 100_000:
            raise InvalidArgument(f"Seed range {part.strip()!r} has more than 100000 seeds")
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


@dataclass(frozen=True)
class SweepResult:
    """A sweep's runs (seed order) and what this call did: which seeds ran, which were reused."""

    sweep: SweepInfo
    records: tuple[RunRecord, ...]
    ran: tuple[int, ...] = ()
    reused: tuple[int, ...] = ()
    failed: tuple[RunRecord, ...] = ()
    store_path: str = ""

    @property
    def metrics(self) -> list[str]:
        names: dict[str, None] = {}
        for r in self.records:
            names.update(dict.fromkeys(r.final))
        return list(names)

    def values(self, metric: str) -> list[float]:
        return [r.final[metric] for r in self.records if metric in r.final]

    def summary(self) -> dict[str, dict[str, float]]:
        """The noise floor: per metric, median/stdev/min/max/spread over seeds."""
        return {m: stats.describe(self.values(m)) for m in self.metrics}

    def report(self) -> Report:
        findings = [Finding(m, "seed variation", Status.PASS, f"median {s['median']:.6g} stdev {s['stdev']:.3g} "
                            f"spread {s['spread']:.3g} over {s['n']} seeds", s)
                    for m, s in self.summary().items() if s.get("n")]
        findings += [Finding(f"seed {r.seed}", "run", Status.FAIL, r.error or "failed") for r in self.failed]
        div = None
        if self.failed:
            r = self.failed[0]
            div = Divergence(f"seed {r.seed}", "run.failed", "the workload completes", r.error or "failed",
                             "rerunning the same command retries only the failed seeds; a fix to the code is a new "
                             "code version, so its sweep starts fresh")
        return Report("sweep", Status.FAIL if div else Status.PASS, div, tuple(findings),
                      side_effects="none (runs recorded in the store)", details=self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"sweep": self.sweep.to_dict(), "store": self.store_path, "ran": list(self.ran),
                "reused": list(self.reused), "failed": [{"seed": r.seed, "error": r.error} for r in self.failed],
                "summary": self.summary(), "seeds": [r.seed for r in self.records],
                "runs": [{"seed": r.seed, "final": r.final, "eval_fingerprint": r.eval_fingerprint,
                          "created": r.created} for r in self.records]}

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from .render import render_sweep

        yield from render_sweep(self)

    def __str__(self) -> str:
        from .._render import to_text

        return to_text(self)


def default_name(workload: Workload, config: dict[str, Any]) -> str:
    defaults = dict(workload.spec.defaults or {})
    defaults.setdefault("threads", 1)
    changed = [f"{k}={v}" for k, v in sorted(config.items()) if k not in defaults or defaults[k] != v]
    base = workload.target.split(":")[-1]
    return base + ("-" + "-".join(changed) if changed else "-default")


def sweep(target: str | Workload, seeds: str | Sequence[int], *, config: dict[str, Any] | None = None,
          sets: list[str] | None = None, name: str | None = None, store: Store | str | os.PathLike[str] | None = None,
          backend: str = "serial", workers: int | None = None, backend_options: dict[str, Any] | None = None,
          hypothesis: str | None = None,
          success: str | None = None, checkpoint_policy: str | None = None, force: bool = False,
          progress: bool = False,
          on_record: Callable[[RunRecord], None] | None = None) -> SweepResult:
    """Run ``target`` at every seed not yet recorded for this identity and return the whole sweep.

    Everything is validated before the store is opened, so bad input writes nothing.
    """
    from .._secrets import scrub_text
    from .criteria import parse_criterion
    from .policy import parse_policy

    seed_list = parse_seeds(seeds)
    backends.get(backend)  # an unknown backend is a usage error before anything is written
    if workers is not None and workers < 1:
        raise InvalidArgument(f"Expected --workers >= 1 but got {workers}")
    if (hypothesis is None) != (success is None):
        raise InvalidArgument("Declare both --hypothesis and --success (the criterion that grades it), or neither")
    if success is not None:
        parse_criterion(success)
    if checkpoint_policy is not None:
        checkpoint_policy = str(parse_policy(checkpoint_policy))
    if name is not None and not name.strip():
        raise InvalidArgument("Expected a non-empty --name")
    options = dict(backend_options or {})
    # e.g. a fork server importing torch while this process imports the workload
    backends.warm(backend, options, workers, target if isinstance(target, str) else target.target)
    workload = target if isinstance(target, Workload) else resolve(target)
    cfg = workload.config(config, sets)
    backends.check(backend, workload, options)
    owned = not isinstance(store, Store)
    st = Store(store) if owned else store  # type: ignore[arg-type]
    try:
        ident = identity(workload, cfg, store_path=st.path, hypothesis=hypothesis, success=success)
        sweep_name = name or default_name(workload, cfg)
        existing = st.find_sweep_exact(sweep_name, ident["identity"])
        for key, value in (("hypothesis", hypothesis), ("checkpoint_policy", checkpoint_policy)):
            # the store keeps a hypothesis scrubbed of secrets: the same declaration compares equal scrubbed
            if existing is not None and value is not None and existing.info.get(key) not in (value, scrub_text(value)):
                raise InvalidArgument(f"Sweep {sweep_name!r} was declared with another {key.replace('_', ' ')}; "
                                      "it is declared before the runs: use a new --name")
        info = {"config": cfg, "config_hash": ident["config_hash"], "code": ident["code"], "env": ident["env"],
                "env_hash": ident["env_hash"], "hypothesis": hypothesis, "success": success,
                "checkpoint_policy": checkpoint_policy,
                "declared_before": not st.recorded_seeds(ident["identity"]) if hypothesis or checkpoint_policy else None}
        info = existing.info if existing is not None else info
        info_sweep = st.upsert_sweep(sweep_name, ident["identity"], workload.target, info, seed_list)
        done = set() if force else st.recorded_seeds(ident["identity"], sweep=info_sweep)
        todo = [s for s in seed_list if s not in done]
        failed: list[RunRecord] = []

        def record(rec: RunRecord) -> None:
            st.add(rec, replace=force, sweep=info_sweep)  # a forced run is appended: other sweeps keep theirs
            if not rec.ok:
                failed.append(rec)
            if on_record is not None:
                on_record(rec)

        _execute(workload, todo, ident, backend, workers, record, progress, sweep_name, options)
        records = tuple(r for r in st.records(info_sweep) if r.seed in set(seed_list))
        return SweepResult(info_sweep, records, tuple(todo), tuple(s for s in seed_list if s in done),
                           tuple(failed), str(st.path))
    finally:
        if owned:
            st.close()


def _progress(enabled: bool, total: int, label: str) -> Any:
    import sys

    if not enabled or total == 0 or not sys.stderr.isatty():
        return nullcontext(None)  # a bar is for a person at a terminal, not for logs
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from .._render import safe_console

    text = label.replace("{", "{{").replace("}", "}}")  # a sweep name is data: not markup, not a format field
    return Progress(TextColumn(text, style="bold", markup=False), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=safe_console(file=sys.stderr), transient=True)


def _execute(workload: Workload, seeds: list[int], ident: dict[str, Any], backend: str, workers: int | None,
             record: Callable[[RunRecord], None], progress: bool, label: str, options: dict[str, Any]) -> None:
    run = backends.get(backend)
    with _progress(progress, len(seeds), f"{label} [{backend}]") as bar:
        task = bar.add_task("runs", total=len(seeds)) if bar is not None else None

        def done(rec: RunRecord) -> None:
            record(rec)
            if bar is not None:
                bar.advance(task)

        if seeds:
            run(workload, seeds, ident, workers=workers, done=done, options=options)
