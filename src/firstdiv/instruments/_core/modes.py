"""Facts about a module's train/eval switch that several instruments read: the drop probability a module was built
with (torch's dropout layers, or a custom module whose forward reads ``self.training`` and holds a drop rate, such as
stochastic depth), which modules' outputs depend on the mode, and whether a module's own forward reads the flag; and
how to set the mode of a module whose ``train`` is not the switch (:func:`set_mode`)."""

from __future__ import annotations

import functools
import inspect

from torch import nn

#: float attributes through which a module applies functional dropout only in training mode (Hugging Face attention:
#: ``dropout=0.0 if not self.training else self.attention_dropout``)
DROPOUT_ATTRS = ("dropout", "attention_dropout", "dropout_prob", "attn_dropout", "dropout_p")  # MultiheadAttention: dropout


def drop_rate(m: nn.Module) -> float:
    """``p`` of torch's dropout layers, or a float ``drop*`` attribute in (0, 1) of a module whose own ``forward`` reads
    ``self.training`` (a drop path); 0 for anything else."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return float(m.p)
    if not reads_mode(m):
        return 0.0
    rates = [v for k, v in vars(m).items() if "drop" in k.lower() and isinstance(v, float) and 0 < v < 1]
    return rates[0] if rates else 0.0


def reads_mode(m: nn.Module) -> bool:
    """Whether ``m``'s own ``forward`` code touches ``self.training`` (a custom dropout, a stochastic-depth block, a
    codebook updated only in training)."""
    code = getattr(getattr(type(m), "forward", None), "__code__", None)
    return code is not None and "training" in code.co_names


def functional_dropout(m: nn.Module) -> bool:
    """Whether ``m`` holds a positive dropout rate it applies functionally (Hugging Face attention, a stacked RNN). A
    one-layer ``nn.LSTM``/``GRU``/``RNN`` applies its ``dropout`` only between layers: none, whatever the mode."""
    if isinstance(m, nn.RNNBase) and m.num_layers <= 1:
        return False
    return any(isinstance(v, float) and v > 0 for v in (vars(m).get(a) for a in DROPOUT_ATTRS))


def mode_dependent(model: nn.Module, own_code: bool = False) -> list[tuple[str, nn.Module]]:
    """Modules whose output depends on train/eval mode: Dropout with p > 0, norms tracking running stats, and modules
    holding a positive dropout rate they apply functionally (HF attention, a drop path, a ``*drop*`` rate their own
    forward applies while ``self.training``); with ``own_code``, also any other module
    whose own forward reads ``self.training``. A Dropout with p = 0, or a norm without running statistics (batch
    statistics in both modes), reads the flag but computes the same either way: not mode-dependent."""
    return [(n, m) for n, m in model.named_modules() if switches(m, own_code)]


def switches(m: nn.Module, own_code: bool = True) -> bool:
    """Whether ``m`` itself computes differently in train and eval mode (see :func:`mode_dependent`)."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return m.p > 0
    if isinstance(m, nn.modules.batchnorm._NormBase):
        return m.track_running_stats
    own_rate = not isinstance(m, nn.RNNBase) and drop_rate(m) > 0  # GRAND's MLP: F.dropout(x, self.input_droprate, ...)
    return functional_dropout(m) or own_rate or (own_code and reads_mode(m))


@functools.lru_cache(maxsize=512)
def _switch(train: object) -> bool:
    if train is nn.Module.train:
        return True
    try:
        params = list(inspect.signature(train).parameters.values())[1:]
    except (TypeError, ValueError):
        return True
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.default is p.empty and p.kind in (*plain, inspect.Parameter.KEYWORD_ONLY)]
    return not required and any(p.kind in (*plain, inspect.Parameter.VAR_POSITIONAL) for p in params)


def mode_switch(m: nn.Module) -> bool:
    """Whether ``type(m).train`` is the train/eval switch (``nn.Module.train``, or an override taking ``mode``), not a
    method of that name that does something else: Hands-on-RL's ensemble model defines ``train(self, loss)``, which
    steps its optimizer, so ``model.eval()`` (``train(False)``) would run a training step on ``False``."""
    return _switch(type(m).train)


def switches_modes(model: nn.Module) -> bool:
    """Whether ``model.train()`` / ``model.eval()`` only switch modes: every module's ``train`` is the switch."""
    return all(mode_switch(m) for m in model.modules())


def set_mode(model: nn.Module, training: bool) -> nn.Module:
    """``model.train(training)``; where some module's ``train`` is not the switch (:func:`switches_modes`), every
    module's ``training`` flag is set instead. Returns ``model``."""
    if switches_modes(model):
        return model.train(training)
    for m in model.modules():
        m.training = training
    return model
