"""A Lightning fit that raises is recorded as failed (interrupted for Ctrl-C), with the exception's type and
message scrubbed of secrets, also when the script catches the exception and exits 0 under a command sweep."""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest

pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed: pip install 'firstdiv[lightning]'")

import firstdiv
from firstdiv.lab.store import Store

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
SCRIPT = textwrap.dedent('''
    import sys

    import pytorch_lightning as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from firstdiv.integrations.lightning import FirstdivCallback


    class Net(pl.LightningModule):
        def __init__(self, raise_in_epoch, what):
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.raise_in_epoch, self.what = raise_in_epoch, what

        def training_step(self, batch, i):
            if self.current_epoch == self.raise_in_epoch and i == 1:
                raise self.what
            x, y = batch
            loss = nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, on_epoch=True, on_step=False)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)


    def fit(raise_in_epoch, what):
        torch.manual_seed(0)
        x = torch.randn(64, 4)
        cb = FirstdivCallback()
        trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, callbacks=[cb])
        try:
            trainer.fit(Net(raise_in_epoch, what), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16))
        except (Exception, SystemExit) as exc:  # the script goes on, as a notebook or a retry loop would
            print("caught", type(exc).__name__, file=sys.stderr)
        return cb.record


    if __name__ == "__main__":
        fit(int(sys.argv[1]), RuntimeError("the loader lost its shard, token SECRET"))
''').replace("SECRET", SECRET)


@pytest.fixture
def script(tmp_path, monkeypatch):
    path = tmp_path / "train_fails.py"
    path.write_text(SCRIPT)
    monkeypatch.syspath_prepend(str(tmp_path))
    import train_fails

    yield path, train_fails
    sys.modules.pop("train_fails", None)


def test_a_fit_that_raised_in_epoch_2_and_was_caught_is_a_failed_record_naming_the_error(script):
    _, module = script
    record = module.fit(1, RuntimeError(f"the loader lost its shard, token {SECRET}"))
    assert record["status"] == "failed", record
    assert record["error"].startswith("RuntimeError: the loader lost its shard, token [redacted]"), record["error"]
    assert SECRET not in str(record)
    assert len(record["curves"]["train_loss"]) == 1  # one of three epochs
    finished = module.fit(-1, RuntimeError("never raised"))
    assert (finished["status"], finished["error"], len(finished["curves"]["train_loss"])) == ("ok", None, 3)


def test_a_fit_stopped_by_ctrl_c_is_an_interrupted_record(script):
    _, module = script
    try:
        record = module.fit(1, KeyboardInterrupt())  # Lightning shuts down and exits 1
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning ignores further Ctrl-C
    assert record["status"] == "interrupted" and record["error"].startswith("KeyboardInterrupt"), record


def test_under_a_command_sweep_the_caught_failure_fails_the_run_with_the_scrubbed_error(script, tmp_path):
    path, _ = script
    store = tmp_path / "store" / "runs.db"
    result = firstdiv.sweep([sys.executable, str(path), "{raise_in_epoch}", "{seed}"], seeds=[0], name="pl-fails",
                            sets=["raise_in_epoch=1"], store=store)
    assert not result.records and len(result.failed) == 1
    error = result.failed[0].error
    assert "RuntimeError: the loader lost its shard, token [redacted]" in error and SECRET not in error, error
    assert "the script went on and exited 0" in error
    with Store(store, readonly=True) as st:
        (stored,) = list(st.iter_runs())
    assert stored.status == "failed" and SECRET not in stored.error and len(stored.curves["train_loss"]) == 1
    ok = firstdiv.sweep([sys.executable, str(path), "{raise_in_epoch}", "{seed}"], seeds=[0], name="pl-ok",
                        sets=["raise_in_epoch=-1"], store=store)
    assert not ok.failed and len(ok.records[0].curves["train_loss"]) == 3

