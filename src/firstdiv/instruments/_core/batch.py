"""Shared evidence handling for the learning instruments: validate the evidence keys (DESIGN.md,
"Evidence keys") and run one forward pass + loss on a batch, the same way in every instrument.

API (stable; other instruments import it):

- ``check_model(model)``, ``check_loss_fn(loss_fn)``, ``check_optimizer(optimizer)``,
  ``check_callable(value, name)`` — raise :class:`~firstdiv.errors.InvalidArgument` with a one-line
  message ("Expected `model` to be a torch.nn.Module but got int"); return the value unchanged.
- ``split_batch(batch, model=None) -> Batch`` — normalise a batch into ``Batch(inputs, targets, as_kwargs)``;
  raises InvalidArgument for anything else (``model`` decides whether a dict's targets key goes to forward).
- ``forward(model, batch) -> outputs`` — ``model(inputs)``, or ``model(**inputs)`` for dict inputs.
- ``compute_loss(model, batch, loss_fn) -> (outputs, loss)`` — forward, then ``loss_fn(outputs, targets)``;
  :class:`UserCodeError` (a one-line reason naming shapes and the user's frame) when either raises.
- ``loss_problem(loss) -> str | None`` — None when ``loss`` is a one-element real floating-point tensor, else a
  one-line reason (for a FAIL/SKIPPED finding; never an exception).

Accepted batches:

- a tuple/list ``(inputs, targets)``, or ``(inputs,)`` (targets None);
- a tensor: unlabelled inputs, ``model(batch)``, targets None (a self-supervised batch whose loss reads the outputs);
- a tuple/list of three or more items that ``forward`` takes as its positional arguments (a ``TensorDataset`` batch
  of ``input_ids, attention_mask, ..., labels`` into a model that computes its own loss): all inputs, targets None;
- else one whose leading items ``forward`` takes as its positional arguments: those, and the last item the targets;
- a dict with an inputs key (``inputs``, ``input``, ``x``) and optionally a targets key
  (``targets``, ``target``, ``labels``, ``y``, ``label``): the model gets ``model(batch[inputs_key])``;
- any other dict: the model gets ``model(**batch)`` (targets keys are left out unless ``forward``
  names them or takes ``**kwargs``; so is any key a ``forward`` without ``**kwargs`` does not name, and when no
  targets key is there and one key is left out, that key is the targets); the loss gets the targets value (or None
  when absent).

If ``inputs`` is itself a dict, the model is called as ``model(**inputs)``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...errors import FirstdivError, InvalidArgument
from .attributes import tensor_fields
from .copy_origin import reading
from .loss_contract import LOSS_CONTRACT, loss_problem  # noqa: F401 - imported from here by the instruments

INPUT_KEYS = ("inputs", "input", "x")
#: Where torch and firstdiv themselves live: a frame under either is not the user's code. By package
#: folder, not by a "/firstdiv/" in the path, which a user's own checkout or project folder may contain
#: (firstdiv's folder is the parent of instruments/, two levels above this file).
LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(f)) + os.sep
                      for f in (torch.__file__, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TARGET_KEYS = ("targets", "target", "labels", "y", "label")


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def check_model(model: Any) -> nn.Module:
    """``model`` must be an ``nn.Module``."""
    if not isinstance(model, nn.Module):
        raise InvalidArgument(f"Expected `model` to be a torch.nn.Module but got {_type_name(model)}")
    return model


def check_callable(value: Any, name: str) -> Callable[..., Any]:
    """``value`` (the evidence key ``name``) must be callable."""
    if not callable(value):
        raise InvalidArgument(f"Expected `{name}` to be callable but got {_type_name(value)}")
    return value


def check_evidence(ev: dict[str, Any], callables: tuple[str, ...] = ("train_step", "eval_fn")) -> None:
    """The evidence keys every instrument reads alike: model, optimizer, loss_fn, the named callables,
    ``task_probe`` (callable or a (inputs, targets) pair) and ``loader`` (an iterable of batches)."""
    for key, check in (("model", check_model), ("optimizer", check_optimizer), ("loss_fn", check_loss_fn)):
        if key in ev:
            check(ev[key])
    for key in callables:
        if key in ev:
            check_callable(ev[key], key)
    probe = ev.get("task_probe")
    if probe is not None and not callable(probe) and not (isinstance(probe, (tuple, list)) and len(probe) == 2):
        raise InvalidArgument("Expected `task_probe` to be a callable inputs -> expected targets or a tuple "
                              f"(known_inputs, known_targets) but got {type(probe).__name__}")
    if "loader" in ev and not hasattr(ev["loader"], "__iter__"):
        raise InvalidArgument(f"Expected `loader` to be an iterable of batches but got {type(ev['loader']).__name__}")


def check_loss_fn(loss_fn: Any) -> Callable[..., Any]:
    """``loss_fn`` must be a callable ``(outputs, targets) -> scalar loss``."""
    return check_callable(loss_fn, "loss_fn")


def check_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """``optimizer`` must be a ``torch.optim.Optimizer``."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidArgument(f"Expected `optimizer` to be a torch.optim.Optimizer but got {_type_name(optimizer)}")
    return optimizer


@dataclass(frozen=True)
class Batch:
    """A normalised batch. ``inputs`` goes to the model (as keywords when ``as_kwargs``), ``targets``
    to the loss function (None when the batch has none)."""

    inputs: Any
    targets: Any
    as_kwargs: bool


def _takes(model: nn.Module, key: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == key or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _split_dict(batch: dict, model: nn.Module | None) -> Batch:
    in_key = next((k for k in INPUT_KEYS if k in batch), None)
    tgt_key = next((k for k in TARGET_KEYS if k in batch), None)
    targets = batch[tgt_key] if tgt_key is not None else None
    if in_key is not None:
        inputs = batch[in_key]
        return Batch(inputs, targets, isinstance(inputs, dict))
    keep_target = tgt_key is not None and model is not None and _takes(model, tgt_key)
    kwargs = {k: v for k, v in batch.items() if keep_target or k not in TARGET_KEYS}
    if model is not None and _one_dict_argument(model, kwargs):
        return Batch(batch, targets, False)  # forward(self, feed_dict): the whole dict is its one argument
    taken = _named_parameters(model) if model is not None else None
    if taken is not None and set(kwargs) - taken and set(kwargs) & taken:
        rest = [k for k in kwargs if k not in taken]  # keys a fixed forward cannot take are not its inputs
        targets = kwargs[rest[0]] if tgt_key is None and len(rest) == 1 else targets
        kwargs = {k: v for k, v in kwargs.items() if k in taken}
    return Batch(kwargs, targets, True)


def _named_parameters(model: nn.Module) -> set[str] | None:
    """The keyword names ``model.forward`` takes; None when it takes ``**kwargs`` or has no readable signature."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY}


def _one_dict_argument(model: nn.Module, kwargs: dict) -> bool:
    """A forward that takes one positional parameter and none of the dict's keys as keywords (``forward(self,
    feed_dict)``): the dict is its argument, not its keywords."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params) or any(p.name in kwargs for p in params):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]
    return len(required) == 1


def plain(value: Any) -> Any:
    """A mapping that is not a ``dict`` (a tokenizer's ``BatchEncoding``, a ``UserDict``, a frozen mapping) as a plain
    ``dict`` of the same values (the same tensor objects, nothing copied); anything else as is. The instruments walk
    dicts; the user's own callables (``eval_fn``, ``train_step``) still get the user's batch object."""
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return dict(value.items())
    return value


def rebuild(like: Any, items: Any) -> Any:
    """A tuple or list of ``like``'s type holding ``items`` (a namedtuple takes them as positional fields)."""
    items = list(items)
    return type(like)(*items) if isinstance(like, tuple) and hasattr(like, "_fields") else type(like)(items)


def split_batch(batch: Any, model: nn.Module | None = None) -> Batch:
    """Normalise ``batch`` (see the module docstring); ``model`` decides whether a dict's targets key is
    passed on to ``forward``. Raises InvalidArgument for anything else."""
    if isinstance(batch, Batch):
        return batch
    if isinstance(batch, Mapping):
        return _split_dict(plain(batch), model)
    if torch.is_tensor(batch) and batch.dim() > 0:
        return Batch(batch, None, False)  # unlabelled inputs: the loss reads the outputs alone (targets None)
    if isinstance(batch, (tuple, list)) and len(batch) in (1, 2):
        inputs = plain(batch[0])
        targets = plain(batch[1]) if len(batch) == 2 else None
        whole = isinstance(inputs, dict) and model is not None and _one_dict_argument(model, inputs)
        return Batch(inputs, targets, isinstance(inputs, dict) and not whole)  # whole: forward(self, batch_dict)
    if isinstance(batch, (tuple, list)) and model is not None and positional(model, tuple(batch)):
        return Batch(tuple(plain(v) for v in batch), None, False)  # forward's arguments; the model computes its loss
    if isinstance(batch, (tuple, list)) and model is not None and positional(model, tuple(batch[:-1])):
        return Batch(tuple(plain(v) for v in batch[:-1]), plain(batch[-1]), False)  # (x1, ..., xk, targets)
    if isinstance(batch, (tuple, list)):
        raise InvalidArgument(f"Expected `batch` to be a tuple (inputs, targets), the model's positional arguments or a "
                              f"dict but got a {type(batch).__name__} of length {len(batch)}: pass (inputs, targets)")
    if fields := tensor_fields(batch):  # an attribute batch (attributes.py): the dict of its tensors
        return _split_dict(fields, model)
    raise InvalidArgument(f"Expected `batch` to be a tuple (inputs, targets) or a dict but got {_type_name(batch)}")


def positional(model: Any, inputs: Any) -> bool:
    """Whether a tuple of inputs is the model's positional arguments, read from its ``forward`` signature: as many
    items as it takes positional parameters (``((x, lengths), y)`` into ``forward(self, x, lengths)``, ``((), y)`` into
    ``forward(self)``, ``((features,), y)`` into ``forward(self, X)``, ``(((x, lengths),), y)`` into ``forward(self,
    inputs)`` that unpacks ``x, lengths = inputs``). A tuple that a one-parameter ``forward`` takes whole
    (``((x, lengths), y)`` into ``forward(self, inputs)``) and a namedtuple stay one argument. A list is the
    positional arguments only of a ``forward`` that takes several (``([state, action], y)`` into ``forward(self,
    state, action=None)``); a one-parameter ``forward`` takes it whole (a list of feature maps)."""
    listed = isinstance(inputs, list)
    if not (isinstance(inputs, tuple) or listed) or hasattr(inputs, "_fields"):
        return False
    try:
        params = list(inspect.signature(getattr(model, "forward", model)).parameters.values())
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    pos = [p for p in params if p.kind in kinds]
    required = sum(p.default is inspect.Parameter.empty for p in pos)
    spread = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    k = len(inputs)
    if listed and (k < 2 or len(pos) < 2):
        return False
    return not (k < required or (k > len(pos) and not spread))


def forward(model: nn.Module, batch: Any) -> Any:
    """Run the model on copies (:func:`fresh`) of the batch's inputs: ``model(**inputs)`` for dict inputs,
    ``model(*inputs)`` for a tuple that is its positional arguments (:func:`positional`), else ``model(inputs)``."""
    inputs = fresh((b := split_batch(batch, model)).inputs)
    if b.as_kwargs:
        return model(**inputs)
    return model(*inputs) if positional(model, inputs) else model(inputs)


def fresh(x: Any) -> Any:
    """Copies of the tensors in ``x`` (tuples, lists, plain dicts) that a forward may write into (TS2Vec's ``x[nan] =
    0`` on its input would move the version counter of the user's tensor); tensors requiring grad stay as they are."""
    if torch.is_tensor(x):
        return x.clone() if not x.requires_grad and x.layout == torch.strided else x
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(fresh(v) for v in x))
    if type(x) in (tuple, list):
        return type(x)(fresh(v) for v in x)
    if type(x) is dict:
        return {k: fresh(v) for k, v in x.items()}
    return x


class UserCodeError(FirstdivError):
    """The user's model or loss_fn raised on the evidence; instruments report it (SKIPPED, with this
    one-line reason) instead of crashing deep inside torch."""


def describe(value: Any) -> str:
    """``[16, 3] float32`` for a tensor; the same for each item of a tuple/list/dict."""
    if torch.is_tensor(value):
        return f"{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    return _type_name(value)


def _origin(exc: BaseException) -> str:
    """' (at file.py:12 in fn)': the innermost frame of the traceback outside torch and firstdiv."""
    tb, found = exc.__traceback__, ""
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(path).startswith(LIBRARY_DIRS):
            found = f" (at {path.rsplit('/', 1)[-1]}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name})"
        tb = tb.tb_next
    return found


def describe_error(exc: BaseException) -> str:
    """``RuntimeError: first line of the message (at user_file.py:12 in fn)``."""
    text = str(exc).strip().splitlines()
    head = f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
    return head + _origin(exc)


def compute_loss(model: nn.Module, batch: Any, loss_fn: Callable[..., Any]) -> tuple[Any, Any]:
    """Forward then ``loss_fn(outputs, targets)``; returns ``(outputs, loss)`` without checking the loss. A model that
    returns a tuple whose first item is the prediction (``(logits, attention)``) and a ``loss_fn`` that refuses the
    tuple but takes that first item: ``(outputs[0], loss)``, what the user's own loop computes. Called with gradients
    off, a loss that differentiates inside itself (a gradient penalty's ``torch.autograd.grad``) is computed again with
    them on, and its value returned detached: firstdiv's ``no_grad`` is not the program's failure.
    Raises :class:`UserCodeError` (one line: what raised, on which shapes, where) when either raises."""
    if torch.is_grad_enabled():
        return _compute_loss(model, batch, loss_fn)
    try:
        return _compute_loss(model, batch, loss_fn)
    except UserCodeError as first:
        if not isinstance(first.__cause__, RuntimeError):
            raise
        try:
            with torch.enable_grad():
                outputs, loss = _compute_loss(model, batch, loss_fn)
        except UserCodeError:
            raise first from first.__cause__
        return outputs, loss.detach() if torch.is_tensor(loss) else loss


def _compute_loss(model: nn.Module, batch: Any, loss_fn: Callable[..., Any]) -> tuple[Any, Any]:
    b = split_batch(batch, model)
    try:
        outputs = forward(model, b)
    except Exception as exc:
        raise UserCodeError(f"the model raised {describe_error(exc)} on inputs {describe(b.inputs)}") from exc
    loss_fn = reading(loss_fn, model)  # a loss reading its model through its closure reads this copy
    try:
        loss = loss_fn(outputs, b.targets)
    except Exception as exc:
        adapted = on_first_output(loss_fn, outputs, b.targets)
        if adapted is not None:  # (logits, attention): a loss_fn that takes the prediction, as the user's loop does
            return outputs, adapted[1]
        raise UserCodeError(f"loss_fn raised {describe_error(exc)} on outputs {describe(outputs)} and targets "
                            f"{describe(b.targets)}") from exc
    unfed = unfed_target(model, b) if loss_problem(loss) is not None else None
    if unfed is not None:  # firstdiv's call, not the user's loss_fn: the forward that makes the loss was not run
        raise UserCodeError(unfed_message(loss, unfed))
    return outputs, loss


def unfed_message(loss: Any, name: str) -> str:
    return (f"{str(loss_problem(loss)).split(';')[0]} on model(inputs), whose forward left `{name}` at its default: if the "
            f"batch's targets go to forward too, pass batch=((inputs, targets), targets) or a dict naming `{name}`")


def unfed_target(model: nn.Module, b: Batch) -> str | None:
    """A parameter of ``forward`` named like the targets (``label``, ``y``, ...) that this call left at its default:
    a loss_fn that gets no scalar from such a call is not shown to be wrong (the model may compute its loss from it)."""
    try:
        params = list(inspect.signature(getattr(model, "forward", model)).parameters.values())
    except (TypeError, ValueError):
        return None
    if b.as_kwargs:
        fed, names = 0, set(b.inputs)
    else:
        fed, names = (len(b.inputs) if positional(model, b.inputs) else 1), set()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    free = [p for i, p in enumerate(q for q in params if q.kind in kinds) if i >= fed and p.name not in names]
    return next((p.name for p in free if p.name in TARGET_KEYS and p.default is not inspect.Parameter.empty), None)


class FirstOutput:
    """The user's ``loss_fn`` applied to the first item of a tuple output (the prediction of ``(logits, attention)``)."""

    def __init__(self, loss_fn: Callable[..., Any]) -> None:
        self.loss_fn = loss_fn

    def __call__(self, outputs: Any, targets: Any) -> Any:
        first = outputs[0] if isinstance(outputs, (tuple, list)) and not hasattr(outputs, "_fields") and outputs else outputs
        return self.loss_fn(first, targets)


def on_first_output(loss_fn: Callable[..., Any], outputs: Any, targets: Any) -> tuple[FirstOutput, Any] | None:
    """When ``loss_fn`` refused ``outputs``, a tuple whose first item is a tensor it takes: ``(FirstOutput(loss_fn),
    loss)``; else None (the first error is the one to report)."""
    if not (isinstance(outputs, (tuple, list)) and not hasattr(outputs, "_fields") and outputs
            and torch.is_tensor(outputs[0])) or isinstance(loss_fn, FirstOutput):
        return None
    wrapped = FirstOutput(loss_fn)
    with contextlib.suppress(Exception):
        return wrapped, wrapped(outputs, targets)
    return None


def to_device(value: Any, device: torch.device | None) -> Any:
    """``value`` moved to ``device`` (tensors inside tuples, lists and dicts; other values unchanged); None: as is."""
    if device is None:
        return value
    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return rebuild(value, (to_device(v, device) for v in value))
    return value


def check_step_source(optimizer: Any, train_step: Any) -> torch.optim.Optimizer | None:
    """``optimizer`` must be an Optimizer, or None when ``train_step`` (a loop that updates parameters by hand,
    ``p.data.add_(p.grad, alpha=-lr)``) is given; returns the optimizer (or None)."""
    if optimizer is None:
        if train_step is None:
            raise InvalidArgument("Expected `optimizer` (the torch.optim.Optimizer that steps the model) or, for a loop "
                                  "that updates parameters by hand, `train_step` (a zero-argument step) but got neither")
        return None
    return check_optimizer(optimizer)
