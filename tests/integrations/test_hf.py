"""The Hugging Face callback on a real ``Trainer`` with a tiny BERT: what it records (tokens per second, the
pre-clip gradient norm, one measurement for its curve and its quantiles), and the watch it hosts (a PASS that
leaves no trace; real bugs named at the user's parameter or module)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, Subset

transformers = pytest.importorskip("transformers", reason="transformers is not installed: pip install 'firstdiv[hf]'")
from firstdiv.integrations.hf import FirstdivCallback

SEQ = 12


class Text(Dataset):
    """Padded token sequences of random lengths with a label the first token decides."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 100, (n, SEQ), generator=g)
        self.lengths = torch.randint(4, SEQ + 1, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        mask = (torch.arange(SEQ) < self.lengths[i]).long()
        return {"input_ids": self.ids[i] * mask, "attention_mask": mask, "labels": int(self.ids[i, 0] % 2)}


class TrainModeEval(transformers.Trainer):
    """A custom evaluation step that leaves the model in train mode (the bug)."""

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        model.train()
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)


def _model(seed=0, freeze=None):
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    if freeze:
        model.get_parameter(freeze).requires_grad_(False)
    return model


def _train(tmp_path, callbacks=(), *, seed=0, lr=1e-3, eval_set=None, trainer_cls=None, freeze=None, **kw):
    model = _model(seed, freeze)
    settings = {"max_steps": 6, "eval_strategy": "steps", "eval_steps": 3, "logging_steps": 1,
                "per_device_train_batch_size": 8, "optim": "adamw_torch", "disable_tqdm": True, "log_level": "error"}
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True,
                                          save_strategy="no", learning_rate=lr, seed=seed, **{**settings, **kw})
    trainer = (trainer_cls or transformers.Trainer)(model=model, args=args, train_dataset=Text(24, 0),
                                                    eval_dataset=eval_set if eval_set is not None else Text(16, 1),
                                                    callbacks=list(callbacks))
    trainer.train()
    return model, trainer


def _no_hooks(model, optimizer):
    modules = [m for m in model.modules() if m._forward_pre_hooks or m._forward_hooks]
    params = [n for n, p in model.named_parameters() if getattr(p, "_backward_hooks", None)
              or getattr(p, "_post_accumulate_grad_hooks", None)]
    inner = getattr(optimizer, "optimizer", optimizer)
    return not modules and not params and not inner._optimizer_step_pre_hooks and not inner._optimizer_step_post_hooks


def test_it_records_tokens_per_second_the_pre_clip_grad_norm_curves_and_config(tmp_path, monkeypatch):
    report = tmp_path / "report.jsonl"  # as a command sweep runs the script: the same record goes to the sweep
    monkeypatch.setenv("FIRSTDIV_REPORT_FILE", str(report))
    cb = FirstdivCallback()
    _train(tmp_path, [cb], max_grad_norm=0.5)  # clipping on: the norm recorded is the one before it
    rec = cb.record
    swept = _as_the_sweep_records(report)
    assert swept.eval_fingerprint == rec["eval_fingerprint"] and swept.curves == rec["curves"]
    assert swept.throughput["tokens"] == rec["throughput"]["tokens"] and swept.grad_norm == rec["grad_norm"]
    assert swept.extra["reported_config"] == rec["config"]
    norms = rec["curves"]["grad_norm"]  # the pre-clip norm, logged at every step: the quantiles' own numbers
    assert len(norms) == 6 and max(norms) > 0.5
    assert [rec["grad_norm"][k] for k in ("median", "p90", "max")] == np.quantile(norms, [0.5, 0.9, 1.0]).tolist()
    put = rec["throughput"]
    assert put["examples"] == 48  # 6 steps of 8: two epochs of 24
    assert put["tokens"] == 2 * int(Text(24, 0).lengths.sum()) and put["tokens_per_s"] > put["examples_per_s"] > 0
    assert len(rec["curves"]["eval_loss"]) == 2 and len(rec["curves"]["loss"]) == 6
    assert not [k for k in rec["curves"] if k.endswith(("_runtime", "_per_second"))]
    contract = rec["eval_contract"]
    assert contract["mode"] == "eval" and contract["indices"]["count"] == 16 and contract["batch_size"] == 8
    cfg = rec["config"]
    assert cfg["learning_rate"] == 1e-3 and cfg["max_grad_norm"] == 0.5 and cfg["lr_scheduler_type"] == "linear"
    assert cfg["per_device_train_batch_size"] == 8 and cfg["seed"] == 0 and rec["seed"] == 0
    assert cb.report is None


def _as_the_sweep_records(report):
    from firstdiv.lab._command_run import _read, apply_run_lines
    from firstdiv.lab.identity import RunIdentity
    from firstdiv.lab.record import Recorder, build_record

    rows, runs = _read(report)
    rec = Recorder(0, {})
    for row in rows:
        rec.log(row.pop("step", None), **row)
    apply_run_lines(rec, runs)
    ident = RunIdentity(workload="cmd:python train.py --seed {seed}", config={}, config_hash="c", code={},
                        env={}, env_hash="e", identity="i")
    return build_record(rec, workload=ident.workload, identity=ident, wall=1.0)


def test_the_eval_fingerprint_follows_the_eval_order_not_the_seed(tmp_path):
    def fingerprint(seed, eval_set=None):
        cb = FirstdivCallback()
        _train(tmp_path, [cb], seed=seed, eval_set=eval_set, max_steps=3)
        return cb.record["eval_fingerprint"]

    base = fingerprint(0)
    assert fingerprint(1) == base
    assert fingerprint(0, Subset(Text(16, 1), list(range(15, -1, -1)))) != base


def test_a_correct_program_passes_and_leaves_no_trace(tmp_path):
    plain, _ = _train(tmp_path, seed=2)
    cb = FirstdivCallback(watch=True, every=3)
    watched, trainer = _train(tmp_path, [cb], seed=2)
    assert cb.report.status.value == "PASS", str(cb.report)
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert _no_hooks(watched, trainer.optimizer)


def test_a_diverging_learning_rate_is_named_at_its_first_step(tmp_path, capsys):
    cb = FirstdivCallback(watch=True, every=3)
    _train(tmp_path, [cb], lr=1e4, max_steps=3)
    div = cb.report.first_divergence
    assert div.kind == "update.too_large" and div.where.startswith("step 0: bert.")
    assert capsys.readouterr().err.count("WATCH  FAIL") == 1


def test_a_layer_frozen_by_mistake_is_named(tmp_path):
    name = "bert.encoder.layer.0.output.dense.weight"
    cb = FirstdivCallback(watch=True, every=3, frozen=(), show=False)
    _train(tmp_path, [cb], freeze=name, max_steps=3)
    assert cb.report.first_divergence.where == f"step 0: {name}"
    assert cb.report.first_divergence.kind == "ownership.undeclared_frozen"


def test_evaluation_in_train_mode_is_named_at_a_dropout(tmp_path):
    cb = FirstdivCallback(watch=True, every=3, show=False)
    _train(tmp_path, [cb], trainer_cls=TrainModeEval, max_steps=3)
    div = cb.report.first_divergence
    assert div.kind == "mode.train_at_eval" and div.where.endswith("dropout"), div
    assert cb.record["eval_contract"]["mode"] == "train"
