"""What a training callback gathers about one run, whichever trainer drives it (this module imports neither).

A :class:`RunLog` collects rows of metrics (one per epoch, one per evaluation), one global gradient norm per
optimizer step, the examples and non-padding tokens trained on and the seconds spent training (evaluation
excluded), the eval contract and the hyper-parameters. Under a command sweep each row is a :func:`firstdiv.log`
line as it happens and the rest are run lines (:func:`firstdiv._log.report`) at the end of training; the sweep
turns them into the run record. Bare, :meth:`RunLog.record` is the same record's fields, computed by the same
:class:`~firstdiv.lab.record.Recorder`, so a fingerprint seen bare equals the one a sweep stores.

:class:`HostedWatch` runs :func:`firstdiv.watch` on the trainer's model and optimizers, fed by the callback's
hooks, and prints a failing report once at the end of training.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from .. import _log
from ..errors import InvalidArgument

#: HF log keys that are cost, not a metric of the run (they are in the record's throughput)
_CHUNK = 512  # gradient norms read back per synchronisation
_COST_KEYS = ("epoch", "total_flos", "train_runtime", "eval_runtime", "num_input_tokens_seen")


class RunLog:
    """One run's rows, gradient norms, throughput, eval contract and config (see the module docstring)."""

    def __init__(self) -> None:
        self.sweep = _log.reporting()
        self.rows: list[dict[str, float]] = []
        self._norms: list[torch.Tensor] = []  # not yet read back
        self._done: list[float] = []  # read back: the numbers the record keeps, curve and quantiles alike
        self._seen = 0  # of them, how many latest_norm() has looked at
        self.examples = 0
        self._tokens: torch.Tensor | int | None = None
        self.seconds = 0.0
        self._since: float | None = None
        self.contract: dict[str, Any] | None = None
        self.config: dict[str, Any] = {}
        self.failure: dict[str, str] | None = None  # {"status": "failed" | "interrupted", "error": ...}
        self.flushed = False

    # -- what the hooks tell it ---------------------------------------------------------------------------------
    def row(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One row of numbers (tensors are read once here); the sweep gets it at once."""
        row = {}
        for name, value in metrics.items():
            number = _number(value)
            if number is not None and name not in _COST_KEYS and not name.endswith(("_per_second", "_runtime")):
                row[name] = number
        if not row:
            return
        self.rows.append({"step": int(step), **row})
        if self.sweep:
            _log.log(step=int(step), **row)

    def grad_norm(self, params: Iterable[nn.Parameter]) -> None:
        """The global L2 norm of the gradients of ``params`` now (kept as a tensor: no synchronisation here)."""
        grads = [p.grad.detach() for p in params if p.grad is not None and not p.grad.is_sparse]
        if not grads:
            return
        with torch.no_grad():
            try:  # one kernel for all tensors of one device
                per_tensor = list(torch._foreach_norm(grads))
            except (AttributeError, RuntimeError):  # no _foreach_norm, or gradients on several devices
                per_tensor = [torch.linalg.vector_norm(g) for g in grads]
            device = grads[0].device
            self.add_norm(torch.linalg.vector_norm(torch.stack([n.float().to(device) for n in per_tensor])))

    def add_norm(self, norm: torch.Tensor) -> None:
        """A global gradient norm (a 0-d tensor); read back as numbers in chunks (one synchronisation each)."""
        self._norms.append(norm.detach())
        if len(self._norms) >= _CHUNK:
            self._done.extend(self._read_pending())

    def _read_pending(self) -> list[float]:
        """The one conversion of a norm to a number: float32 on the device, read back as a Python float."""
        pending, self._norms = self._norms, []
        if not pending:
            return []
        device = pending[0].device
        return [float(v) for v in torch.stack([n.float().to(device) for n in pending]).tolist()]

    def latest_norm(self) -> float | None:
        """The last optimizer step's norm, as the record's quantiles count it, when a step was measured since the
        previous call (else None): a logged ``grad_norm`` row takes it, so the curve is the same measurement."""
        self._done.extend(self._read_pending())
        fresh, self._seen = len(self._done) > self._seen, len(self._done)
        return self._done[-1] if fresh else None

    def batch(self, batch: Any) -> None:
        """Count one training batch: its examples, and its non-padding tokens when it carries ``input_ids``."""
        n, tokens = batch_size(batch)
        self.examples += n
        if tokens is not None:
            self._tokens = tokens if self._tokens is None else self._tokens + tokens

    def resume(self) -> None:
        """Training (re)starts: the clock runs."""
        if self._since is None:
            self._since = time.perf_counter()

    def pause(self) -> None:
        """Training stops (evaluation, or its end): the clock stops."""
        if self._since is not None:
            self.seconds += time.perf_counter() - self._since
            self._since = None

    def eval_contract(self, contract: dict[str, Any]) -> None:
        """The first evaluation's contract is the run's (the same loader is evaluated every time)."""
        if self.contract is None:
            self.contract = contract

    def begin(self) -> None:
        """Training starts: the sweep is told the run is under way, so one that never reaches :meth:`flush` (the
        trainer raised and the script caught it) is not taken for a finished run."""
        if self.sweep and not self.flushed:
            _log.report("status", {"status": "running"})

    def fail(self, exc: BaseException | None) -> None:
        """Training raised ``exc`` (None: an exception not known here): the run is failed (interrupted for
        Ctrl-C), with its error scrubbed of secrets as the store scrubs a failed run's error."""
        from .._secrets import scrub_text
        from ..lab.runner import describe

        if exc is None:
            self.failure = {"status": "failed", "error": "the training raised before its end (pass the exception to "
                                                        "cb.close(exc) to have it named)"}
            return
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        self.failure = {"status": status, "error": scrub_text(describe(exc))}

    # -- what comes out -----------------------------------------------------------------------------------------
    def norms(self) -> list[float]:
        self._done.extend(self._read_pending())
        return list(self._done)

    def tokens(self) -> int | None:
        return None if self._tokens is None else int(self._tokens)

    def throughput_line(self) -> dict[str, Any]:
        line: dict[str, Any] = {"examples": self.examples, "seconds": self.seconds}
        if self.tokens() is not None:
            line["tokens"] = self.tokens()
        return line

    def flush(self) -> None:
        """End of training: the run lines to the sweep (once); bare, nothing is written."""
        self.pause()
        if not self.sweep or self.flushed:
            return
        self.flushed = True
        norms = self.norms()
        if norms:
            _log.report("grad_norm", norms)
        if self.examples:
            _log.report("throughput", self.throughput_line())
        if self.contract:
            _log.report("eval_contract", self.contract)
        if self.config:
            _log.report("config", self.config)
        _log.report("status", self.failure or {"status": "ok"})

    def record(self, seed: int | None = None) -> dict[str, Any]:
        """The run record's fields this run produced: status ("ok", "failed" or "interrupted") and error, curves,
        final, grad_norm, throughput, eval contract and fingerprint, config (as
        :class:`~firstdiv.lab.record.RunRecord.to_dict` spells them)."""
        from ..lab._command_run import apply_run_lines
        from ..lab.record import Recorder, jsonable, quantiles, short_hash

        rec = Recorder(-1 if seed is None else seed, {})
        for row in self.rows:
            row = dict(row)
            rec.log(row.pop("step"), **row)
        runs = {"grad_norm": self.norms(), "throughput": self.throughput_line() if self.examples else None,
                "eval_contract": self.contract, "config": self.config}
        apply_run_lines(rec, {k: v for k, v in runs.items() if v})
        curves: dict[str, list[float]] = {}
        for row in rec.rows:
            for name, value in row.items():
                if name != "epoch":
                    curves.setdefault(name, []).append(value)
        put: dict[str, float] = {"examples": rec.examples_seen, "seconds": rec.train_seconds or 0.0}
        if put["seconds"] > 0:
            put["examples_per_s"] = rec.examples_seen / put["seconds"]
            if rec.tokens_seen:
                put.update(tokens=rec.tokens_seen, tokens_per_s=rec.tokens_seen / put["seconds"])
        failure = self.failure or {"status": "ok", "error": None}
        return jsonable({
            "seed": seed, "status": failure["status"], "error": failure["error"],
            "config": dict(rec.extra.get("reported_config", {})), "curves": curves,
            "final": {k: v[-1] for k, v in curves.items()}, "grad_norm": quantiles(rec.grad_norm_values),
            "throughput": put, "eval_contract": rec.contract,
            "eval_fingerprint": short_hash(rec.contract) if rec.contract else None,
            "eval_fields": sorted(rec.contract) if rec.contract else [],
        })


class HostedWatch:
    """:func:`firstdiv.watch` fed by a trainer's hooks: ``step(loss)`` after each optimizer step, ``observe``
    for the other micro-batches, ``evaluating()`` around evaluation, ``finish()`` at the end (or on an error)."""

    def __init__(self, model: nn.Module, optimizers: list[torch.optim.Optimizer], options: dict[str, Any]) -> None:
        from ..instruments.watch import watch

        self.watch = watch(model, optimizers, **options)
        self._eval: Any = None
        self.printed = False

    def step(self, loss: Any) -> None:
        self.watch.step(_scalar(loss))

    def gradients_ready(self, optimizer: torch.optim.Optimizer) -> None:
        self.watch.gradients_ready(optimizer)

    def observe(self, loss: Any) -> None:
        loss = _scalar(loss)
        if loss is not None:
            self.watch.observe(loss=loss)

    def eval_start(self) -> None:
        if self._eval is None:
            self._eval = self.watch.evaluating()
            self._eval.__enter__()

    def eval_end(self) -> None:
        if self._eval is not None:
            ctx, self._eval = self._eval, None
            ctx.__exit__(None, None, None)

    def finish(self, *, show: bool) -> Any:
        """Close the watch (every hook removed) and, when it failed, print the report once to stderr."""
        self.eval_end()
        self.watch.close()
        report = self.watch.report
        if show and not report.ok and report.status.value == "FAIL" and not self.printed:
            self.printed = True
            from .._rich import Console

            Console(stderr=True).print(report)
        return report


class Recording:
    """What both trainers' callbacks hold: the run being gathered, the finished ``record``, the watch ``report``
    (None until training ends), and the watch options checked at construction."""

    def __init__(self, *, watch: bool = False, every: int = 50, frozen: Any = None, ratio_bounds: Any = None,
                 show: bool = True) -> None:
        self._watch_options = watch_options(watch, every, frozen, ratio_bounds)
        self.show = show
        self._run = RunLog()
        self.record: dict[str, Any] | None = None
        self.report: Any = None
        self._watch: HostedWatch | None = None


def watch_options(watch: bool, every: int, frozen: Any, ratio_bounds: Any) -> dict[str, Any] | None:
    """The options passed on to :func:`firstdiv.watch` (checked now, not at the first step), or None."""
    if not isinstance(watch, bool):
        raise InvalidArgument(f"Expected `watch` to be True or False but got {watch!r}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise InvalidArgument(f"Expected `every` to be an integer >= 1 but got {every!r}")
    if not watch:
        return None
    options: dict[str, Any] = {"every": every, "frozen": frozen}
    if ratio_bounds is not None:
        options["ratio_bounds"] = ratio_bounds
    return options


def batch_size(batch: Any) -> tuple[int, Any]:
    """(examples, non-padding tokens or None) of a batch: a tensor, a tuple/list whose first item is one, or a
    mapping (``input_ids`` / ``attention_mask`` give tokens; the mask's sum, else every id)."""
    if isinstance(batch, Mapping):
        mask, ids = batch.get("attention_mask"), batch.get("input_ids")
        if isinstance(mask, torch.Tensor):
            return int(mask.shape[0]), mask.detach().sum()
        if isinstance(ids, torch.Tensor):
            return int(ids.shape[0]), int(ids.numel())
        first = next((v for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() > 0), None)
        return (int(first.shape[0]) if first is not None else 0), None
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size(batch[0])[0], None
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        return int(batch.shape[0]), None
    return 0, None


def _scalar(loss: Any) -> Any:
    if isinstance(loss, Mapping):
        loss = loss.get("loss")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss.detach()
    if isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return float(loss)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            return None
        value = value.detach().float().item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)  # NaN and inf too: a diverged run's curve says so
