"""The Hugging Face callback's record holds one measurement of each number: the grad_norm curve and the
grad_norm quantiles are the same per-step norms (a gradient scaler's factor removed), whatever the Trainer logs."""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed: pip install 'firstdiv[hf]'")
from test_hf import _train

from firstdiv.integrations.hf import FirstdivCallback
from firstdiv.lab.record import quantiles


class TrainerLogs(transformers.TrainerCallback):
    """What the Trainer itself logs as grad_norm, by step."""

    def __init__(self):
        self.norms = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "grad_norm" in logs:
            self.norms[state.global_step] = float(logs["grad_norm"])


class Scaled(transformers.Trainer):
    """fp16 as on a GPU: the loss is scaled before backward by a gradient scaler (here on the CPU, scale 1024)."""

    def create_accelerator_and_postprocess(self):
        super().create_accelerator_and_postprocess()
        self.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        self.accelerator.native_amp = True  # so that clipping unscales the gradients first, as on a GPU


@pytest.mark.parametrize("settings", [{}, {"gradient_accumulation_steps": 2}, {"logging_steps": 2}],
                         ids=["plain", "accumulation", "every-2nd-step-logged"])
def test_the_grad_norm_curve_and_its_quantiles_are_one_measurement(tmp_path, settings):
    cb, logs = FirstdivCallback(), TrainerLogs()
    _train(tmp_path, [cb, logs], max_grad_norm=0.5, **settings)
    measured = cb._run.norms()
    curve = cb.record["curves"]["grad_norm"]
    every = settings.get("logging_steps", 1)
    assert len(measured) == 6 and curve == measured[every - 1 :: every]  # each logged step's own measurement
    assert cb.record["grad_norm"] == quantiles(measured) and cb.record["grad_norm"]["max"] == max(measured)
    trainer = [logs.norms[step] for step in sorted(logs.norms)]
    assert curve == pytest.approx(trainer, rel=1e-5)  # the Trainer's norm, up to float32 summation order


def test_under_a_gradient_scaler_the_norm_is_of_the_unscaled_gradients(tmp_path):
    cb, logs = FirstdivCallback(), TrainerLogs()
    _train(tmp_path, [cb, logs], max_grad_norm=1.0, fp16=True, trainer_cls=Scaled, max_steps=3)
    trainer = [logs.norms[step] for step in sorted(logs.norms)]
    assert all(math.isfinite(v) and 0 < v < 10 for v in trainer), trainer  # the Trainer's, unscaled
    assert cb.record["curves"]["grad_norm"] == pytest.approx(trainer, rel=1e-4)
    assert cb.record["grad_norm"]["max"] == max(cb.record["curves"]["grad_norm"])
