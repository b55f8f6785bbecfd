"""A seed sweep of a user's Lightning script that only adds the callback: every stored record carries curves,
grad norms, throughput, the eval fingerprint and the config; the same script run bare writes no file."""

from __future__ import annotations

import runpy
import sys
import textwrap

import pytest

pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed: pip install 'firstdiv[lightning]'")

import firstdiv

SCRIPT = textwrap.dedent('''
    import argparse

    import pytorch_lightning as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from firstdiv.integrations.lightning import FirstdivCallback


    class Net(pl.LightningModule):
        def __init__(self, lr):
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, i):
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            self.log("train_loss", loss, on_epoch=True, on_step=False)
            return loss

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self(x), y))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pl.seed_everything(args.seed, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(1, keepdim=True)
    cb = FirstdivCallback(watch=True, every=4)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[cb])
    trainer.fit(Net(lr=0.01), DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True),
                DataLoader(TensorDataset(x[:32], y[:32]), batch_size=16))
    print("fingerprint", cb.record["eval_fingerprint"], "watch", cb.report.status.value)
''')


def test_a_seed_sweep_records_everything_and_the_bare_script_writes_nothing(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    script = work / "train_lightning.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(work)
    result = firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}"], seeds=[0, 1], name="pl",
                            store=tmp_path / "store" / "runs.db")
    assert not result.failed, [r.error for r in result.failed]
    records = sorted(result.records, key=lambda r: r.seed)
    assert [r.seed for r in records] == [0, 1]
    for r in records:
        assert len(r.curves["val_loss"]) == 2 and len(r.curves["train_loss"]) == 2
        assert r.final["val_loss"] == r.curves["val_loss"][-1]
        assert set(r.grad_norm) == {"min", "median", "p90", "max"} and r.grad_norm["max"] > 0
        assert r.throughput["examples"] == 128 and r.throughput["examples_per_s"] > 0
        assert r.eval_contract["mode"] == "eval" and "indices" in r.eval_fields
        assert r.extra["reported_config"]["lr"] == 0.01 and r.extra["reported_config"]["optimizer"] == "Adam"
    assert records[0].eval_fingerprint == records[1].eval_fingerprint  # same evaluation, another seed
    assert records[0].curves["train_loss"] != records[1].curves["train_loss"]  # the seed reached the script

    # bare: the same script as `python train_lightning.py --seed 0` would run it (in this process, which has
    # Lightning imported already), outside any sweep
    monkeypatch.delenv("FIRSTDIV_REPORT_FILE", raising=False)
    monkeypatch.delenv("FIRSTDIV_REPORT_FD", raising=False)
    monkeypatch.setattr(sys, "argv", [str(script), "--seed", "0"])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    assert sorted(p.name for p in work.iterdir()) == ["train_lightning.py"]  # no file written bare
    assert f"fingerprint {records[0].eval_fingerprint} watch PASS" in capsys.readouterr().out
