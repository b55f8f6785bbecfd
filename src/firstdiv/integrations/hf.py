"""``FirstdivCallback`` for the Hugging Face ``Trainer`` (a ``TrainerCallback``): records the run, and with
``watch=True`` hosts :func:`firstdiv.watch` on the real training.

::

    from firstdiv.integrations.hf import FirstdivCallback

    cb = FirstdivCallback(watch=True, every=50)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val, callbacks=[cb])
    trainer.train()
    cb.record   # status / error, curves, final, grad_norm, throughput, eval_contract / eval_fingerprint, config
    cb.report   # the watch's Report

What it records: a row of the training logs at every ``on_log`` (``loss``, ``grad_norm``, ``learning_rate``; the
``eval_*`` keys are left to ``on_evaluate``) and of the metrics at every ``on_evaluate``; the global L2 gradient
norm of every optimizer step, before clipping (each parameter's gradient as its last backward before the step
left it, read by a post-accumulate-grad hook, divided by fp16's gradient scale), which is also the number a
logged row's ``grad_norm`` holds (the curve and the record's quantiles are one measurement); examples per second, and non-padding tokens per second when the
model is called with ``input_ids``/``attention_mask``, counted by a forward hook on training forwards (grad
enabled, model in train mode), evaluation time excluded; the contract of the eval dataloader at the first
evaluation step (:mod:`firstdiv.integrations._contract`); and the ``TrainingArguments`` that shape the result.

The watch gets the model and optimizer from the callback's arguments, its loss from the training forwards'
``loss`` output, and wraps each evaluation that the Trainer's flow schedules after a step or an epoch (an
explicit ``trainer.evaluate()`` outside training is not watched). Every hook is removed at train end. The
Trainer calls no callback when training raises: then call ``cb.close(exc)`` with the exception caught, which
removes the hooks and makes ``cb.record`` a ``"failed"`` run (``"interrupted"`` for Ctrl-C) naming it, secrets
scrubbed (hooks are also removed at the next ``on_train_begin``). Under a command sweep a run whose training
began and did not end is failed even without that call: the callback reports the training as running when it
begins and as ok at its end, so a script that catches the exception and exits 0 does not pass for a finished run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import transformers as _transformers
except ImportError:
    raise ImportError("firstdiv.integrations.hf needs transformers: pip install 'firstdiv[hf]'") from None

import torch

from ._contract import describe, eval_mode, loader_contract
from ._recorder import HostedWatch, Recording, RunLog

__all__ = ["FirstdivCallback"]

#: the TrainingArguments fields kept as the run's config (those that exist in the installed version)
ARG_FIELDS = ("learning_rate", "per_device_train_batch_size", "per_device_eval_batch_size",
              "gradient_accumulation_steps", "num_train_epochs", "max_steps", "seed", "data_seed",
              "lr_scheduler_type", "warmup_steps", "warmup_ratio", "weight_decay", "adam_beta1", "adam_beta2",
              "adam_epsilon", "max_grad_norm", "optim", "fp16", "bf16", "label_smoothing_factor")


class FirstdivCallback(Recording, _transformers.TrainerCallback):
    """Records a Hugging Face Trainer run and optionally watches it: ``FirstdivCallback(watch=True, every=50)``;
    after ``train()``, ``cb.record`` and ``cb.report``. See :mod:`firstdiv.integrations.hf`."""

    def __init__(self, *, watch: bool = False, every: int = 50, frozen: Any = None, ratio_bounds: Any = None,
                 show: bool = True) -> None:
        super().__init__(watch=watch, every=every, frozen=frozen, ratio_bounds=ratio_bounds, show=show)
        self._handles: list[Any] = []
        self._squares: dict[int, torch.Tensor] = {}
        self._scaler: Any = None  # accelerate's gradient scaler (fp16): the squares are of scaled gradients
        self._evaluating = False
        self._training = False  # between on_train_begin and its end (on_train_end, or close() after a raise)
        self._seed: int | None = None

    # -- training -----------------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        self._release()
        self._run, self.record, self.report, self._training = RunLog(), None, None, True
        self._run.begin()
        self._run.config = {f: _plain(getattr(args, f)) for f in ARG_FIELDS if hasattr(args, f)}
        self._seed = int(args.seed)
        self._handles.append(model.register_forward_hook(self._forward, with_kwargs=True))
        for p in model.parameters():
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(self._grad_arrived))
        self._scaler = getattr(optimizer, "scaler", None)
        if self._watch_options is not None:
            inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper steps the user's optimizer
            self._watch = HostedWatch(model, [inner], self._watch_options)
        self._run.resume()

    def _forward(self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not (torch.is_grad_enabled() and module.training):
            return  # an evaluation forward
        inputs = kwargs if kwargs else (args[0] if args else None)
        self._run.batch(inputs if isinstance(inputs, Mapping) else args)
        if self._watch is not None:
            loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
            self._watch.observe(loss)

    def _grad_arrived(self, p: torch.nn.Parameter) -> None:
        if p.grad is not None and not p.grad.is_sparse:
            self._squares[id(p)] = p.grad.detach().float().pow(2).sum()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._take_norm()

    def _take_norm(self) -> None:
        """The step's global norm from the squares its backward left (a transformers without
        ``on_pre_optimizer_step`` gets it at ``on_step_end``: the squares were read before clipping all the same)."""
        if self._squares:
            norm = torch.stack(list(self._squares.values())).sum().sqrt()
            if self._scaler is not None and self._scaler.is_enabled():  # the scale the backward ran under
                norm = norm / self._scaler.get_scale()
            self._run.add_norm(norm)
            self._squares = {}

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._eval_done()  # an evaluation the flow scheduled but did not run

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._take_norm()
        if self._watch is not None:
            self._watch.step(None)
        if control.should_evaluate:
            self._eval_begins()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_evaluate:
            self._eval_begins()

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        row = {k: v for k, v in (logs or {}).items() if not k.startswith("eval_")}
        if "grad_norm" in row:  # the Trainer's own computation of it: the row takes the callback's (one source)
            row["grad_norm"] = self._run.latest_norm()
        self._run.row(state.global_step, row)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.pause()
        self._finish()

    # -- evaluation ---------------------------------------------------------------------------------------------
    def _eval_begins(self) -> None:
        self._run.pause()
        self._evaluating = True
        if self._watch is not None:
            self._watch.eval_start()

    def _eval_done(self) -> None:
        if self._evaluating:
            self._evaluating = False
            if self._watch is not None:
                self._watch.eval_end()
            self._run.resume()

    def on_prediction_step(self, args: Any, state: Any, control: Any, model: Any = None, eval_dataloader: Any = None,
                           **kwargs: Any) -> None:
        if self._run.contract is None and eval_dataloader is not None and model is not None:
            self._run.eval_contract(loader_contract(eval_dataloader, model, mode=eval_mode(model)))

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any) -> None:
        self._run.row(state.global_step, dict(metrics or {}))
        self._eval_done()

    # -- the end ------------------------------------------------------------------------------------------------
    def _finish(self) -> None:
        self._training = False
        self._eval_done()
        self._run.pause()
        self._unhook()
        self._run.flush()
        if self._watch is not None:
            watch, self._watch = self._watch, None
            self.report = watch.finish(show=self.show)
        self.record = self._run.record(self._seed)

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self._squares = [], {}

    def close(self, error: BaseException | None = None) -> None:
        """After ``trainer.train()`` raised ``error`` (the Trainer calls no callback then): remove every hook and
        end the run as failed (interrupted for Ctrl-C). ``cb.record`` is then the run so far with its ``status``
        and ``error`` (pass the exception caught to have it named), ``cb.report`` the watch's report so far.
        After a training that ended, it only checks that no hook is left."""
        if not self._training:
            self._release()
            return
        self._training = False
        self._run.fail(error)
        self._release()
        self._run.pause()
        self._run.flush()
        self.record = self._run.record(self._seed)

    def _release(self) -> None:
        """Remove every hook, and close the watch (its report so far, not printed)."""
        self._unhook()
        self._evaluating = False
        if self._watch is not None:
            watch, self._watch = self._watch, None
            self.report = watch.finish(show=False)


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return describe(getattr(value, "value", value))  # an enum (lr_scheduler_type, optim) by its value
