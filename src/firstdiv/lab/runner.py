"""Run one seed of a workload and turn what it reported into a run record."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from .._globals import preserved_globals
from .env import code_version, env_hash, environment
from .identity import RunIdentity
from .record import Recorder, RunRecord, build_record, short_hash, timer
from .workload import Workload


def identity(workload: Workload, config: dict[str, Any], *, store_path: Path | None = None,
             hypothesis: str | None = None, success: str | None = None) -> RunIdentity:
    """Everything that makes two runs of one seed interchangeable, computed once per sweep."""
    train_cfg, _, execs = workload.split(config)
    exclude = (store_path.resolve().parent,) if store_path is not None else ()
    code = code_version(workload.source, exclude=exclude, fallback=workload.fallback_version)
    env = environment(threads=int(execs.get("threads", 1)), device=str(execs.get("device", "cpu")))
    ehash = env_hash(env)
    return RunIdentity(
        workload=workload.target, config=config, config_hash=short_hash(train_cfg), code=code, env=env, env_hash=ehash,
        hypothesis=hypothesis, success=success,
        extra={"eval_keys": list(workload.spec.eval_keys), "exec_keys": list(workload.spec.exec_keys)},
        identity=short_hash({"workload": workload.target, "config": config, "code": code["version"], "env": ehash}),
    )


def describe(exc: BaseException) -> str:
    """The one-line error a failed record carries: what was raised and where, e.g.
    "RuntimeError: boom at train.py:12" or "SystemExit(3) at train.py:9" (sys.exit ends no sweep)."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    if isinstance(exc, Exception):
        return f"{type(exc).__name__}: {exc}{where}"
    args = ", ".join(map(repr, exc.args))
    return f"{type(exc).__name__}({args}){where}"


def run_seed(workload: Workload, seed: int, ident: RunIdentity) -> RunRecord:
    """Train one seed; a workload exception becomes a failed record carrying the error.

    Global RNGs are seeded from ``seed`` for workloads that use them; the caller's thread count and
    RNG states are restored afterwards.
    """
    rec = Recorder(seed, ident.config)
    start = timer()
    status, error = "ok", None
    with preserved_globals(seed=seed, threads=ident.threads):
        try:
            out = workload.fn(seed, dict(ident.config), rec)
            if isinstance(out, dict):
                for name, value in out.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        rec.metric(name, value)
            if not rec.rows and not rec.final:
                status, error = "failed", "the workload reported no metrics: call rec.log(...) or return a dict of numbers"
        except KeyboardInterrupt:
            raise  # Ctrl-C stops the sweep; every finished run is already recorded
        except BaseException as exc:  # noqa: BLE001 (sys.exit() in a workload fails its run, not the sweep)
            status, error = "failed", describe(exc)
    return build_record(rec, workload=workload.target, identity=ident, wall=timer() - start,
                        status=status, error=error)
