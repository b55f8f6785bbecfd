"""A seed sweep of a user's Hugging Face Trainer script (argparse, a tiny BERT built from its config) that only
adds the callback: every stored record carries the Trainer's curves, the pre-clip grad norms, tokens per second,
the eval fingerprint and the TrainingArguments; the seed reaches the script, the evaluation does not change."""

from __future__ import annotations

import sys
import textwrap

import pytest

pytest.importorskip("transformers", reason="transformers is not installed: pip install 'firstdiv[hf]'")

import firstdiv
from firstdiv.lab.record import quantiles

SCRIPT = textwrap.dedent('''
    import argparse

    import torch
    import transformers
    from torch.utils.data import Dataset

    from firstdiv.integrations.hf import FirstdivCallback


    class Pairs(Dataset):
        def __init__(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            self.ids = torch.randint(1, 100, (n, 10), generator=g)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "attention_mask": torch.ones(10, dtype=torch.long),
                    "labels": int(self.ids[i, 0] % 2)}


    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    transformers.set_seed(args.seed)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    training = transformers.TrainingArguments(
        output_dir=args.out, learning_rate=args.lr, seed=args.seed, max_steps=4, eval_strategy="steps",
        eval_steps=2, logging_steps=1, per_device_train_batch_size=8, report_to=[], use_cpu=True,
        save_strategy="no", disable_tqdm=True, log_level="error")
    trainer = transformers.Trainer(model=model, args=training, train_dataset=Pairs(32, 0),
                                   eval_dataset=Pairs(16, 1), callbacks=[FirstdivCallback()])
    trainer.train()
''')


def test_a_seed_sweep_of_a_trainer_script_records_what_the_trainer_did(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train_hf.py").write_text(SCRIPT)
    monkeypatch.chdir(work)
    argv = [sys.executable, "train_hf.py", "--seed", "{seed}", "--lr", "{lr}", "--out", str(tmp_path / "out")]
    result = firstdiv.sweep(argv, seeds=[0, 1], name="hf", sets=["lr=0.001"], store=tmp_path / "store" / "runs.db")
    assert not result.failed, [r.error for r in result.failed]
    records = sorted(result.records, key=lambda r: r.seed)
    assert [(r.seed, r.exit_code) for r in records] == [(0, 0), (1, 0)]
    for r in records:
        assert len(r.curves["loss"]) == 4 and len(r.curves["eval_loss"]) == 2
        assert r.final["eval_loss"] == r.curves["eval_loss"][-1]
        assert len(r.curves["grad_norm"]) == 4 and r.grad_norm["max"] == max(r.curves["grad_norm"])
        assert r.grad_norm == quantiles(r.curves["grad_norm"])  # one measurement: the same numbers, not approx
        assert r.throughput["tokens"] == 4 * 8 * 10 and r.throughput["tokens_per_s"] > 0
        assert r.eval_contract["mode"] == "eval" and r.eval_contract["indices"]["count"] == 16
        reported = r.extra["reported_config"]
        assert (reported["learning_rate"], reported["seed"], reported["max_steps"]) == (0.001, r.seed, 4)
        assert r.config["lr"] == 0.001 and r.code["files"] == ["train_hf.py"]
    assert records[0].eval_fingerprint == records[1].eval_fingerprint  # the same evaluation, another seed
    assert records[0].curves["loss"] != records[1].curves["loss"]  # the seed reached the script
