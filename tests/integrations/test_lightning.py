"""The Lightning callback on a real ``pl.Trainer``: what it records, and the watch it hosts (a PASS on a correct
program that leaves no trace; real bugs named at the user's parameter or module)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed: pip install 'firstdiv[lightning]'")
from firstdiv.integrations.lightning import FirstdivCallback


class Net(pl.LightningModule):
    def __init__(self, lr: float = 0.01, omit_head: bool = False, eval_in_train: bool = False, boom_at: int = -1):
        super().__init__()
        self.save_hyperparameters()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.1))
        self.head = nn.Linear(16, 1)
        self.loss_fn = nn.MSELoss()

    def forward(self, x):
        return self.head(self.body(x))

    def training_step(self, batch, i):
        if i == self.hparams.boom_at:
            raise RuntimeError("boom")
        x, y = batch
        loss = self.loss_fn(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", self.loss_fn(self(x), y))

    def on_validation_model_eval(self):
        if not self.hparams.eval_in_train:  # the bug: evaluation left in train mode
            super().on_validation_model_eval()

    def configure_optimizers(self):
        params = self.body.parameters() if self.hparams.omit_head else self.parameters()
        return torch.optim.Adam(params, lr=self.hparams.lr)


class Scaled(Dataset):
    """An eval set with a preprocessing step (its ``transform``)."""

    def __init__(self, x, y, scale: float):
        self.x, self.y, self.transform = x, y, Scale(scale)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.transform(self.x[i]), self.y[i]


class Scale:
    def __init__(self, factor: float):
        self.factor = factor

    def __call__(self, x):
        return x * self.factor


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]])
    return x, y


def _fit(module_kw=None, callbacks=(), seed=0, val=None, epochs=2):
    torch.manual_seed(seed)
    model = Net(**(module_kw or {}))
    x, y = _data()
    val = val if val is not None else TensorDataset(x[:32], y[:32])
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=list(callbacks),
                         num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=16), DataLoader(val, batch_size=16))
    return model, trainer


class NormProbe(pl.Callback):
    """An independent global gradient norm before each optimizer step."""

    def __init__(self):
        self.norms = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        squares = [p.grad.double().pow(2).sum() for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.stack(squares).sum().sqrt()))


def _no_hooks(model, optimizer):
    modules = [m for m in model.modules() if m._forward_pre_hooks or m._forward_hooks or m._backward_hooks]
    params = [n for n, p in model.named_parameters() if getattr(p, "_backward_hooks", None)
              or getattr(p, "_post_accumulate_grad_hooks", None)]
    return not modules and not params and not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks


def test_it_records_curves_grad_norms_throughput_eval_contract_and_config(tmp_path):
    cb, probe = FirstdivCallback(), NormProbe()
    _fit(callbacks=[cb, probe])
    rec = cb.record
    assert len(rec["curves"]["val_loss"]) == 2 and len(rec["curves"]["train_loss"]) == 2  # per eval, per epoch
    assert rec["final"]["val_loss"] == rec["curves"]["val_loss"][-1]
    expected = np.quantile(probe.norms, [0.5, 0.9, 1.0])
    assert len(probe.norms) == 12
    np.testing.assert_allclose([rec["grad_norm"][k] for k in ("median", "p90", "max")], expected, rtol=1e-5)
    assert rec["throughput"]["examples"] == 192 and rec["throughput"]["examples_per_s"] > 0
    assert "tokens_per_s" not in rec["throughput"]  # tabular batches carry no tokens
    contract = rec["eval_contract"]
    assert contract["mode"] == "eval" and contract["reduction"] == "MSELoss:mean"
    assert contract["indices"]["order"] == "sequential" and contract["indices"]["count"] == 32
    assert rec["eval_fingerprint"] and "indices" in rec["eval_fields"]
    assert rec["config"]["lr"] == 0.01 and rec["config"]["optimizer"] == "Adam"
    assert rec["config"]["optimizer.betas"] == [0.9, 0.999] and rec["config"]["trainer.max_epochs"] == 2
    assert cb.report is None  # no watch asked for
    assert not list(tmp_path.iterdir())


def test_the_eval_fingerprint_follows_the_eval_data_not_the_seed():
    x, y = _data()

    def fingerprint(val, seed=0):
        cb = FirstdivCallback()
        _fit(callbacks=[cb], seed=seed, val=val, epochs=1)
        return cb.record["eval_fingerprint"]

    base = fingerprint(Scaled(x[:32], y[:32], 1.0))
    assert fingerprint(Scaled(x[:32], y[:32], 1.0), seed=1) == base
    assert fingerprint(Scaled(x[:32], y[:32], 255.0)) != base  # another preprocessing
    assert fingerprint(Subset(Scaled(x, y, 1.0), list(range(31, -1, -1)))) != base  # another order


def test_a_correct_program_passes_and_leaves_no_trace():
    plain, _ = _fit(seed=3)
    cb = FirstdivCallback(watch=True, every=2)
    watched, trainer = _fit(callbacks=[cb], seed=3)
    assert cb.report.status.value == "PASS", str(cb.report)
    assert not [f for f in cb.report.findings if f.status.value == "FAIL"]
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert _no_hooks(watched, trainer.optimizers[0])


def test_an_optimizer_missing_the_head_is_named(capsys):
    cb = FirstdivCallback(watch=True, every=2)
    _fit({"omit_head": True}, callbacks=[cb])
    div = cb.report.first_divergence
    assert div.kind == "ownership.unowned" and div.where in ("step 0: head.weight", "step 0: head.bias")
    err = capsys.readouterr().err
    assert err.count("WATCH  FAIL") == 1 and "head.weight" in err


def test_evaluation_in_train_mode_is_named_at_the_dropout():
    cb = FirstdivCallback(watch=True, every=2)
    _fit({"eval_in_train": True}, callbacks=[cb], epochs=1)
    div = cb.report.first_divergence
    assert div.kind == "mode.train_at_eval" and div.where.endswith("body.2")
    assert cb.record["eval_contract"]["mode"] == "train"


def test_a_layer_frozen_by_mistake_fails_once_nothing_is_declared_frozen():
    cb = FirstdivCallback(watch=True, every=2, frozen=())

    class Freeze(pl.Callback):  # the user's own callback, freezing the head by mistake
        def on_fit_start(self, trainer, pl_module):
            pl_module.head.weight.requires_grad_(False)

    _fit(callbacks=[Freeze(), cb], epochs=1)
    div = cb.report.first_divergence
    assert div.where == "step 0: head.weight" and cb.report.status.value == "FAIL"


def test_training_that_raises_leaves_no_hook():
    cb = FirstdivCallback(watch=True, every=1)
    torch.manual_seed(0)
    model = Net(boom_at=3)
    x, y = _data()
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[cb])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=16))
    assert _no_hooks(model, trainer.optimizers[0])
    assert cb.report is not None and cb.record["grad_norm"]
