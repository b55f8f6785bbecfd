# ruff: noqa: C408
"""Fine-tuning ModernBERT as an LLM router (a prompt classifier: small or large LLM) with the HF Trainer, from
Philipp Schmid's "Fine-tune classifier with ModernBERT in 2025" notebook: ``tokenize`` (``padding='max_length'``,
``truncation=True``) mapped over the dataset with ``label`` renamed ``labels`` and ``text`` removed,
``AutoModelForSequenceClassification`` with ``num_labels``, ``label2id`` and ``id2label`` from the dataset's
``ClassLabel`` names, a weighted-F1 ``compute_metrics``, and ``TrainingArguments`` (batch 32, lr 5e-5, 5 epochs,
fused AdamW, evaluation and saving per epoch, best model by F1) handed to ``Trainer`` (its defaults: linear
schedule, ``max_grad_norm`` 1.0, weight decay 0).

Source: https://github.com/philschmid/deep-learning-pytorch-huggingface
Commit: 59b37973074de90004d10e5ff636f98160c9743a
Files: ``training/fine-tune-modern-bert-in-2025.ipynb`` (the tokenizer, model, metric, TrainingArguments/Trainer and
``trainer.train()`` cells)
License: MIT (Copyright (c) 2022 Philipp Schmid; full text in LICENSES/philschmid-deep-learning-pytorch-huggingface.txt)
Domain: HF Trainer fine-tuning, text classification (ModernBERT from config, binary prompt routing)

Kept as written: ``tokenize``, the ``rename_column("label", "labels")`` and ``map(tokenize, batched=True,
remove_columns=["text"])`` calls, the ``label2id``/``id2label`` loop, ``compute_metrics`` (argmax, weighted F1), the
TrainingArguments that apply here (per-device batches 32/16, 5 epochs, ``optim="adamw_torch_fused"``, logging every
100 steps, evaluation and saving per epoch, ``save_total_limit`` 2, ``load_best_model_at_end`` on ``f1``), the
``Trainer`` call.

Deviations from the original:
- ``answerdotai/ModernBERT-base`` cannot be downloaded: ``AutoConfig.for_model("modernbert", ...)`` with hidden size
  32, 2 layers, 2 heads, intermediate size 64, 64 positions, a local attention window of 16, ``from_config`` (random
  weights, a fine-tuning run that starts from scratch), so lr 5e-5 -> 3e-3 for the loss to fall within the 30 steps
  of the self-check; its tokenizer is replaced by a word-level ``tokenizers`` tokenizer with BERT's special tokens,
  ``model_max_length`` 512 -> 32;
- ``DevQuasar/llm_router_dataset-synth`` cannot be downloaded and ``datasets`` is not installed: synthetic prompts
  made from ``seed`` (3 to 8 filler words with two to four cue words of their class, ``small_llm`` or ``large_llm``,
  at random places), 448 train / 96 test rows, in small stand-ins for ``DatasetDict``/``Dataset`` (``map``,
  ``rename_column``, ``features["labels"].names``);
- TrainingArguments: ``bf16`` dropped (CPU), ``report_to="none"``, the hub arguments and ``login`` dropped,
  ``use_cpu=True``, the seed from ``seed``, the output directory under the temp dir; sklearn is not installed, so
  ``compute_metrics`` falls back to the same weighted F1 in numpy; saving the model card, pushing and the pipeline
  are left out;
- ``trainer.train()`` is driven one optimizer update at a time, as in ``nlpwt_emotion_trainer``: ``build`` runs the
  set-up of ``Trainer._inner_training_loop`` and ``train_step`` is one update of ``Trainer._run_epoch``
  (``get_batch_samples``, ``training_step``, ``_clip_grad_norm``, ``optimizer.step()``, ``lr_scheduler.step()``,
  ``zero_grad``), a new epoch iterator when one ends; callbacks and the log/save/evaluate hook are left out.
  ``eval_fn`` is the evaluation on a given batch (``model.eval()``, ``trainer.prediction_step``,
  ``compute_metrics``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import os
import pathlib
import sys
import tempfile
import types

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import EvalPrediction

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_FILLER = 40
N_CUES = 6
LABELS = ["small_llm", "large_llm"]


# ---- stand-ins for what cannot be downloaded or is not installed ------------------------------------------------

def make_tokenizer():
    """Word-level tokenizer: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, filler words f0.., cue words <class>0..."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for k in range(N_FILLER):
        vocab[f"f{k}"] = len(vocab)
    for name in LABELS:
        for k in range(N_CUES):
            vocab[f"{name}{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "attention_mask"])


class _Dataset:
    """The ``datasets.Dataset`` methods the notebook uses, over a dict of columns (rows served as dicts)."""

    def __init__(self, columns, features):
        self.columns, self.features = columns, features

    def map(self, function, batched=True, remove_columns=()):
        result = dict(self.columns)
        result.update({k: (v.tolist() if torch.is_tensor(v) else v) for k, v in function(self.columns).items()})
        return _Dataset({k: v for k, v in result.items() if k not in remove_columns}, self.features)

    def rename_column(self, old, new):
        columns = {(new if k == old else k): v for k, v in self.columns.items()}
        return _Dataset(columns, {(new if k == old else k): v for k, v in self.features.items()})

    def __len__(self):
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.columns.items()}


class _DatasetDict(dict):
    def map(self, function, **kwargs):
        return _DatasetDict({k: v.map(function, **kwargs) for k, v in self.items()})

    def rename_column(self, old, new):
        return _DatasetDict({k: v.rename_column(old, new) for k, v in self.items()})


def load_dataset(seed, bug=None):
    """Prompts of 3-8 filler words with two to four cue words of the prompt's class inserted at random places."""
    rng = np.random.RandomState(seed)
    features = {"label": types.SimpleNamespace(names=list(LABELS))}

    def split(n):
        texts, labels = [], []
        for _ in range(n):
            label = rng.randint(len(LABELS))
            words = [f"f{w}" for w in rng.randint(N_FILLER, size=rng.randint(3, 9))]
            for _ in range(rng.randint(2, 5)):
                words.insert(rng.randint(len(words) + 1), f"{LABELS[label]}{rng.randint(N_CUES)}")
            texts.append(" ".join(words))
            labels.append(int(label))
        if bug == "texts_sorted_labels_not":
            # a "sort the prompts by length to cut padding" pass applied to the text column alone
            texts = sorted(texts, key=len)
        return _Dataset({"text": texts, "label": labels}, features)

    return _DatasetDict({"train": split(448), "test": split(96)})


def f1_score(y_true, y_pred, labels=None, pos_label=1, average="weighted"):
    """(port) sklearn is not installed: the weighted F1 of sklearn.metrics.f1_score, in numpy."""
    classes, support = np.unique(y_true, return_counts=True)
    scores = []
    for c in classes:
        tp = np.sum((y_pred == c) & (y_true == c))
        denom = np.sum(y_pred == c) + np.sum(y_true == c)
        scores.append(2 * tp / denom if denom else 0.0)
    return float(np.average(scores, weights=support))


# ---- the notebook -------------------------------------------------------------------------------------------------

def _model_and_data(seed, bug=None):
    raw_dataset = load_dataset(seed, bug=bug)
    tokenizer = make_tokenizer()
    tokenizer.model_max_length = 32  # (port) 512

    # Tokenize helper function
    def tokenize(batch):
        return tokenizer(batch['text'], padding='max_length', truncation=True, return_tensors="pt")

    # Tokenize dataset
    raw_dataset = raw_dataset.rename_column("label", "labels")  # to match Trainer
    tokenized_dataset = raw_dataset.map(tokenize, batched=True, remove_columns=["text"])

    # Prepare model labels - useful for inference
    labels = tokenized_dataset["train"].features["labels"].names
    num_labels = len(labels)
    if bug == "num_labels_one":  # the binary task declared with a single output ("one logit for two classes")
        num_labels = 1
    label2id, id2label = dict(), dict()
    for i, label in enumerate(labels):
        label2id[label] = str(i)
        id2label[str(i)] = label

    torch.manual_seed(seed)
    config = AutoConfig.for_model(
        "modernbert", vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, local_attention=16, pad_token_id=0, bos_token_id=2,
        eos_token_id=3, cls_token_id=2, sep_token_id=3,
        num_labels=num_labels, label2id=label2id, id2label=id2label)  # (port) from_pretrained(model_id, ...)
    model = AutoModelForSequenceClassification.from_config(config)
    return model, tokenized_dataset


# Metric helper method
def compute_metrics(eval_pred):
    predictions, labels = eval_pred
    predictions = np.argmax(predictions, axis=1)
    score = f1_score(
            labels, predictions, labels=labels, pos_label=1, average="weighted"
        )
    return {"f1": float(score) if score == 1 else score}


def _trainer(seed, bug=None):
    model, tokenized_dataset = _model_and_data(seed, bug=bug)
    # Define training args
    training_args = TrainingArguments(
        output_dir=os.path.join(tempfile.gettempdir(), "modernbert-llm-router"),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=16,
        learning_rate=3e-3,  # (port) 5e-5, for a model trained from scratch
        num_train_epochs=5,
        optim="adamw_torch_fused",  # improved optimizer
        # logging & evaluation strategies
        logging_strategy="steps",
        logging_steps=100,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model="f1",
        report_to="none",  # (port) tensorboard; the push_to_hub arguments dropped
        log_level="error", use_cpu=True, seed=seed,  # (port)
    )

    # Create a Trainer instance
    return Trainer(
        model=model,
        args=training_args,
        train_dataset=tokenized_dataset["train"],
        eval_dataset=tokenized_dataset["test"],
        compute_metrics=compute_metrics,
    )


def _build(seed, bug=None):
    trainer = _trainer(seed, bug=bug)
    model = trainer.model

    # trainer.train(): the set-up of Trainer._inner_training_loop
    args = trainer.args
    trainer.is_in_train = True
    train_dataloader = trainer.get_train_dataloader()
    (num_train_epochs, num_update_steps_per_epoch, _num_examples, _num_train_samples, _total_train_batch_size,
     steps_in_epoch, max_steps) = trainer.set_initial_training_values(args, train_dataloader)
    trainer._init_training_state(max_steps, num_update_steps_per_epoch, num_train_epochs, None, None)
    wrapped, train_dataloader = trainer._prepare_for_training(max_steps, train_dataloader, None)
    trainer._tr_loss = torch.tensor(0.0, device=args.device)
    wrapped.zero_grad()

    loop = {"epoch": -1, "iterator": None, "update_step": num_update_steps_per_epoch, "step": -1}

    def train_step():
        """One optimizer update of Trainer._run_epoch."""
        if loop["update_step"] >= num_update_steps_per_epoch:  # the next epoch of _inner_training_loop
            loop["epoch"] += 1
            if hasattr(train_dataloader, "set_epoch"):
                train_dataloader.set_epoch(loop["epoch"])
            loop["iterator"], loop["update_step"], loop["step"] = iter(train_dataloader), 0, -1
        remainder = steps_in_epoch % args.gradient_accumulation_steps
        if remainder == 0:
            remainder = args.gradient_accumulation_steps
        num_batches = (
            args.gradient_accumulation_steps if loop["update_step"] != (num_update_steps_per_epoch - 1) else remainder
        )
        batch_samples, num_items_in_batch = trainer.get_batch_samples(loop["iterator"], num_batches, args.device)
        trainer.current_gradient_accumulation_steps = len(batch_samples)
        losses = []
        for inputs in batch_samples:
            loop["step"] += 1
            step = loop["step"]
            do_sync_step = (step + 1) % args.gradient_accumulation_steps == 0 or (step + 1) == steps_in_epoch
            trainer.accelerator.gradient_state._set_sync_gradients(do_sync_step)
            tr_loss_step = trainer.training_step(wrapped, inputs, num_items_in_batch)
            trainer._tr_loss += tr_loss_step
            losses.append(tr_loss_step)
            if do_sync_step:
                if args.max_grad_norm > 0:
                    trainer._clip_grad_norm(wrapped)
                trainer.optimizer.step()
                if not trainer.accelerator.optimizer_step_was_skipped:
                    trainer.lr_scheduler.step()
                wrapped.zero_grad()
                trainer.state.global_step += 1
                trainer.state.epoch = loop["epoch"] + (step + 1) / steps_in_epoch
        loop["update_step"] += 1
        return torch.stack(losses).sum()

    def eval_fn(model, batch):
        model.eval()  # as Trainer.evaluation_loop does before its prediction steps
        loss, logits, labels = trainer.prediction_step(model, batch, prediction_loss_only=False)
        metrics = compute_metrics(EvalPrediction(predictions=logits.numpy(), label_ids=labels.numpy()))
        return {"loss": float(loss), **metrics}

    first = next(iter(trainer.get_eval_dataloader()))
    return Program(name="philschmid_modernbert_router", model=model, batch=first,
                   loss_fn=lambda outputs, labels: outputs.loss, optimizer=trainer.optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # classic: the binary task declared with num_labels=1; ModernBertForSequenceClassification then takes it for
    # regression (problem_type "regression") and fits one logit to the 0/1 labels with MSELoss.
    Bug("num_labels_one", functools.partial(_build, bug="num_labels_one"), "learning_ledger", ("OBJECTIVE",)),
    # classic misalignment: the prompts sorted by length to cut padding while the label column keeps the original
    # order, so each prompt carries another prompt's label.
    Bug("texts_sorted_labels_not", functools.partial(_build, bug="texts_sorted_labels_not"), "learning_ledger",
        ("TASK",)),
]
