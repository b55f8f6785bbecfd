"""``FirstdivCallback`` for the Lightning ``Trainer``: records the run, and with ``watch=True`` hosts
:func:`firstdiv.watch` on the real training.

::

    from firstdiv.integrations.lightning import FirstdivCallback

    cb = FirstdivCallback(watch=True, every=50)
    trainer = pl.Trainer(max_epochs=10, callbacks=[cb])
    trainer.fit(model, train_loader, val_loader)
    cb.record   # status / error, curves, final, grad_norm, throughput, eval_contract / eval_fingerprint, config
    cb.report   # the watch's Report (PASS, or the first step and parameter where an invariant broke)

What it records, from Lightning's hooks: a row of ``trainer.callback_metrics`` at every validation end (the
metrics that validation logged; the sanity check is not a row) and at every training epoch end (the others);
the global L2 gradient norm before every optimizer step (``on_before_optimizer_step``: after AMP's unscale,
before clipping); examples per second (tokens per second, non-padding, when batches are mappings carrying
``input_ids``/``attention_mask``) over the training time, evaluation excluded; the contract of the first
validation dataloader (:mod:`firstdiv.integrations._contract`); the LightningModule's ``hparams``, the trainer's
schedule and the optimizers' settings. Under a command sweep every seed's run record gets all of it. A fit that
raises (``on_exception``) is a ``"failed"`` record (``"interrupted"`` for Ctrl-C) whose ``error`` names the
exception, secrets scrubbed; under a command sweep that run fails even when the script catches the exception and
exits 0. The watch closes (every hook removed) at train end and when training raises. The class derives from the ``Callback`` of
``pytorch_lightning`` and of ``lightning.pytorch``, whichever are installed, so either Trainer accepts it.
"""

from __future__ import annotations

import os
from typing import Any

from ._contract import describe, eval_mode, loader_contract
from ._recorder import HostedWatch, Recording, RunLog

_bases: list[type] = []
try:
    import pytorch_lightning as _pl

    _bases.append(_pl.Callback)
except ImportError:
    pass
try:
    import lightning.pytorch as _lpl  # the unified package

    _bases.append(_lpl.Callback)
except ImportError:
    pass
if not _bases:
    raise ImportError("firstdiv.integrations.lightning needs Lightning: pip install 'firstdiv[lightning]'")

__all__ = ["FirstdivCallback"]


class _Hooks(Recording):
    """The hooks of :class:`FirstdivCallback` (see the module docstring)."""

    def __init__(self, *, watch: bool = False, every: int = 50, frozen: Any = None, ratio_bounds: Any = None,
                 show: bool = True) -> None:
        super().__init__(watch=watch, every=every, frozen=frozen, ratio_bounds=ratio_bounds, show=show)
        self._step = 0
        self._before: dict[str, Any] = {}
        self._val_keys: set[str] = set()
        self._first_batch = False

    # -- training -----------------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._run, self.record, self.report, self._val_keys = RunLog(), None, None, set()
        self._run.begin()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._run.config = _config(trainer, pl_module)
        self._step = trainer.global_step
        if self._watch_options is not None:
            self._watch = HostedWatch(pl_module, list(trainer.optimizers), self._watch_options)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._run.resume()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._run.grad_norm(p for group in optimizer.param_groups for p in group["params"])
        if self._watch is not None:  # inside optimizer.step(closure): the backward is done, the update is next
            self._watch.gradients_ready(getattr(optimizer, "optimizer", optimizer))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._run.batch(batch)
        if self._watch is not None:
            if trainer.global_step != self._step:  # an optimizer step ended this batch
                self._watch.step(outputs)
            else:  # a micro-batch of gradient accumulation
                self._watch.observe(outputs)
        self._step = trainer.global_step

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._run.pause()
        metrics = {k: v for k, v in trainer.callback_metrics.items() if k not in self._val_keys}
        self._run.row(trainer.global_step, metrics)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if trainer.state.fn == "fit" and not self._run.flushed:  # the fit did not reach its end
            self._run.fail(exception)
        self._finish(trainer)

    # -- validation ---------------------------------------------------------------------------------------------
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._run.pause()
        self._before = dict(trainer.callback_metrics)
        self._first_batch = True
        if self._watch is not None and not trainer.sanity_checking:
            self._watch.eval_start()

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        if not self._first_batch:
            return
        self._first_batch = False
        loaders = trainer.val_dataloaders
        loader = loaders[dataloader_idx] if isinstance(loaders, (list, tuple)) else loaders
        if loader is not None:
            self._run.eval_contract(loader_contract(loader, pl_module, mode=eval_mode(pl_module)))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._watch is not None:
            self._watch.eval_end()
        if trainer.sanity_checking:
            return
        metrics = {k: v for k, v in trainer.callback_metrics.items() if self._before.get(k) is not v}
        self._val_keys |= set(metrics)
        self._run.row(trainer.global_step, metrics)
        if trainer.state.fn == "fit":  # validation inside fit: training goes on
            self._run.resume()

    # -- the end ------------------------------------------------------------------------------------------------
    def _finish(self, trainer: Any) -> None:
        self._run.flush()
        if self._watch is not None:
            watch, self._watch = self._watch, None
            self.report = watch.finish(show=self.show)
        seed = os.environ.get("PL_GLOBAL_SEED") or os.environ.get("FIRSTDIV_SEED")
        self.record = self._run.record(int(seed) if seed and seed.lstrip("-").isdigit() else None)


class FirstdivCallback(_Hooks, *_bases):  # type: ignore[misc]
    """Records a Lightning run and optionally watches it: ``FirstdivCallback(watch=True, every=50, frozen=None)``;
    after ``fit``, ``cb.record`` and ``cb.report``. See :mod:`firstdiv.integrations.lightning`."""


def _config(trainer: Any, pl_module: Any) -> dict[str, Any]:
    """The run's hyper-parameters: ``hparams``, the trainer's schedule, each optimizer's class and settings."""
    out: dict[str, Any] = {k: _plain(v) for k, v in dict(getattr(pl_module, "hparams", {}) or {}).items()}
    for name in ("max_epochs", "max_steps", "accumulate_grad_batches", "gradient_clip_val", "precision"):
        value = getattr(trainer, name, None)
        if value is not None:
            out[f"trainer.{name}"] = _plain(value)
    loader = getattr(trainer, "train_dataloader", None)
    if getattr(loader, "batch_size", None) is not None:
        out["batch_size"] = loader.batch_size
    for i, opt in enumerate(trainer.optimizers):
        key = "optimizer" if i == 0 else f"optimizer{i}"
        out[key] = type(opt).__name__
        group = opt.param_groups[0] if opt.param_groups else {}
        for setting in ("lr", "weight_decay", "momentum", "betas", "eps"):
            if setting in group:
                out[f"{key}.{setting}"] = _plain(group[setting])
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return describe(value)
