"""A Hugging Face ``Trainer.train()`` that raises (the Trainer calls no callback then) is not taken for a finished
run: ``cb.close(exc)`` makes the record a failed run naming the exception, secrets scrubbed, and under a command
sweep a script that catches the exception and exits 0 fails its run, with or without that call."""

from __future__ import annotations

import sys
import textwrap

import pytest

pytest.importorskip("transformers", reason="transformers is not installed: pip install 'firstdiv[hf]'")

import firstdiv

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
SCRIPT = textwrap.dedent('''
    import sys

    import torch
    import transformers
    from torch.utils.data import Dataset

    from firstdiv.integrations.hf import FirstdivCallback


    class Pairs(Dataset):
        def __init__(self, n):
            self.ids = torch.randint(1, 100, (n, 10), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "attention_mask": torch.ones(10, dtype=torch.long),
                    "labels": int(self.ids[i, 0] % 2)}


    class Breaks(transformers.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.state.global_step == self.args.raise_at:
                raise RuntimeError("the shard server went away, token SECRET")
            return super().training_step(model, inputs, num_items_in_batch)


    def train(out, raise_at, close):
        transformers.set_seed(0)
        config = transformers.BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=16, num_labels=2)
        args = transformers.TrainingArguments(output_dir=out, max_steps=4, logging_steps=1, per_device_train_batch_size=8,
                                              report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                                              log_level="error")
        args.raise_at = raise_at
        cb = FirstdivCallback()
        trainer = Breaks(model=transformers.BertForSequenceClassification(config), args=args, train_dataset=Pairs(32),
                         callbacks=[cb])
        try:
            trainer.train()
        except RuntimeError as exc:  # the script goes on, as a notebook or a retry loop would
            if close:
                cb.close(exc)
        return cb


    if __name__ == "__main__":
        train(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "close")
''').replace("SECRET", SECRET)


@pytest.fixture
def script(tmp_path, monkeypatch):
    path = tmp_path / "train_hf_fails.py"
    path.write_text(SCRIPT)
    monkeypatch.syspath_prepend(str(tmp_path))
    import train_hf_fails

    yield path, train_hf_fails
    sys.modules.pop("train_hf_fails", None)


def test_close_with_the_exception_makes_the_record_a_failed_run_naming_it(script, tmp_path):
    _, module = script
    cb = module.train(str(tmp_path / "out"), 2, close=False)
    assert cb.record is None  # train() raised: no record claims a finished run
    cb.close(RuntimeError(f"the shard server went away, token {SECRET}"))
    record = cb.record
    assert record["status"] == "failed" and SECRET not in str(record)
    assert record["error"].startswith("RuntimeError: the shard server went away, token [redacted]"), record["error"]
    assert len(record["curves"]["loss"]) == 2 and len(record["curves"]["grad_norm"]) == 2  # 2 of 4 steps
    cb.close()  # again: nothing changes
    assert cb.record == record
    finished = module.train(str(tmp_path / "out"), -1, close=True)
    assert finished.record["status"] == "ok" and finished.record["error"] is None
    finished.close()  # after a training that ended: the record stays ok
    assert finished.record["status"] == "ok"


def test_under_a_command_sweep_a_train_that_raised_and_was_caught_fails_the_run(script, tmp_path):
    path, _ = script
    argv = [sys.executable, str(path), str(tmp_path / "out"), "{raise_at}", "{close}", "--seed", "{seed}"]
    result = firstdiv.sweep(argv, seeds=[0], sets=["raise_at=2", "close=no"], store=tmp_path / "runs.db", name="a")
    (failed,) = result.failed
    assert "training began but never reached its end, and the script exited 0" in failed.error, failed.error
    assert len(failed.curves["loss"]) == 2
    named = firstdiv.sweep(argv, seeds=[0], sets=["raise_at=2", "close=close"], store=tmp_path / "runs.db", name="b")
    (failed,) = named.failed
    assert "training failed: RuntimeError: the shard server went away, token [redacted]" in failed.error, failed.error
    assert SECRET not in failed.error and failed.grad_norm
