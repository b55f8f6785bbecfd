"""Masked language modeling from scratch with the HF Trainer, the second half of the Transformers notebook
"language_modeling_from_scratch": ``tokenize_function``, ``group_texts`` (concatenate, cut into ``block_size``
chunks, ``labels`` a copy of ``input_ids``), ``AutoConfig`` of ``bert-base-cased`` -> ``AutoModelForMaskedLM.
from_config`` (random weights), ``DataCollatorForLanguageModeling(mlm_probability=0.15)``, ``TrainingArguments``
(``eval_strategy="epoch"``, lr 2e-5, weight_decay 0.01) and ``Trainer`` (its defaults: AdamW, linear schedule,
``max_grad_norm`` 1.0, batch size 8).

Source: https://github.com/huggingface/notebooks
Commit: 5068b1142e8ed1e691c8b1e9f98e4473ebe55790
Files: examples/language_modeling_from_scratch.ipynb (cells 13-39 and 60-74)
License: Apache-2.0 (full text in LICENSES/huggingface-notebooks.txt)
Domain: masked language model with the HF Trainer (BERT from config, random weights)

Deviations from the original:
- sizes: ``AutoConfig.from_pretrained("bert-base-cased")`` (cannot be downloaded) becomes
  ``AutoConfig.for_model("bert", ...)`` with hidden 32, 2 layers, 2 heads, intermediate 64, 64 positions and the
  tokenizer's vocabulary; block_size 128 -> 32; lr 2e-5 -> 3e-3 so the loss falls within the 30 steps of the
  self-check (batch size 8, weight decay 0.01, mlm_probability 0.15 unchanged);
- the tokenizer ``sgugger/bert-like-tokenizer`` cannot be downloaded: a word-level ``tokenizers`` tokenizer with
  BERT's special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]) and single-sentence template, in
  ``PreTrainedTokenizerFast``;
- data: ``load_dataset('wikitext', 'wikitext-2-raw-v1')`` (``datasets`` is not installed, nothing can be
  downloaded) is replaced by synthetic lines made from ``seed``: "sentences" of 6-14 words over 60 words where each
  word follows from the one before it by a fixed random successor table (into the first 20 words) with 85%
  probability, so a masked word is predictable from its neighbours; a small stand-in for ``datasets.DatasetDict.map(batched=True,
  remove_columns=...)`` runs ``tokenize_function`` and ``group_texts`` as written (``num_proc`` ignored);
- ``TrainingArguments``: ``push_to_hub=True``/``push_to_hub_model_id`` dropped (no hub), ``use_cpu=True``,
  ``report_to="none"``, the seed from ``seed``, the output directory under the temp dir; ``show_random_elements``,
  ``trainer.evaluate()``'s perplexity print and ``push_to_hub`` are left out;
- ``trainer.train()`` is driven one optimizer update at a time: ``build`` runs the set-up of
  ``Trainer._inner_training_loop`` (``get_train_dataloader``, ``set_initial_training_values``,
  ``_init_training_state``, ``_prepare_for_training`` which creates the optimizer and scheduler, ``zero_grad``) and
  ``train_step`` is one update of ``Trainer._run_epoch`` (``get_batch_samples``, ``training_step``,
  ``_clip_grad_norm``, ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad``, ``global_step += 1``), a new
  epoch iterator when one ends; callbacks and the log/save/evaluate hook are left out. ``eval_fn`` is the
  evaluation on a given batch (``model.eval()``, ``trainer.prediction_step``'s loss);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: SIM118, RUF015, RUF017

from __future__ import annotations

import functools
import os
import pathlib
import sys
import tempfile

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    DataCollatorForLanguageModeling,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_WORDS = 60


# ---- stand-ins for what cannot be downloaded or is not installed ------------------------------------------------

def make_tokenizer():
    """Word-level tokenizer: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, words w0..w59; BERT's single template."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for k in range(N_WORDS):
        vocab[f"w{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512,
                                   model_input_names=["input_ids", "attention_mask"])


class _Dataset:
    """The ``datasets.Dataset`` methods the notebook uses, over a dict of columns (rows served as dicts)."""

    def __init__(self, columns):
        self.columns = columns

    def map(self, function, batched=True, batch_size=1000, num_proc=None, remove_columns=()):
        out = {}
        for start in range(0, len(self), batch_size):
            part = {k: v[start:start + batch_size] for k, v in self.columns.items()}
            result = dict(part)
            result.update(function(part))
            for k in remove_columns:
                result.pop(k)
            for k, v in result.items():
                out.setdefault(k, []).extend(v)
        return _Dataset(out)

    def __len__(self):
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.columns.items()}


class _DatasetDict(dict):
    def map(self, function, **kwargs):
        return _DatasetDict({k: v.map(function, **kwargs) for k, v in self.items()})


def load_dataset(seed):
    """Lines of 6-14 words: each word is the successor-table word (one of w0..w19) of the one before it with
    probability 0.85, else any word."""
    rng = np.random.RandomState(seed)
    successor = np.random.RandomState(1234).randint(0, 20, N_WORDS)  # a fixed successor table into w0..w19

    def split(n):
        lines = []
        for _ in range(n):
            w = rng.randint(N_WORDS)
            words = [w]
            for _ in range(rng.randint(5, 14)):
                w = successor[w] if rng.rand() < 0.85 else rng.randint(N_WORDS)
                words.append(w)
            lines.append(" ".join(f"w{x}" for x in words))
        return _Dataset({"text": lines})

    return _DatasetDict({"train": split(400), "validation": split(40)})


# ---- the notebook -------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    datasets = load_dataset(seed)

    tokenizer = make_tokenizer()

    def tokenize_function(examples):
        return tokenizer(examples["text"])

    tokenized_datasets = datasets.map(tokenize_function, batched=True, num_proc=4, remove_columns=["text"])

    # block_size = tokenizer.model_max_length
    block_size = 32

    def group_texts(examples):
        # Concatenate all texts.
        concatenated_examples = {k: sum(examples[k], []) for k in examples.keys()}
        total_length = len(concatenated_examples[list(examples.keys())[0]])
        # We drop the small remainder, we could add padding if the model supported it instead of this drop, you can
            # customize this part to your needs.
        total_length = (total_length // block_size) * block_size
        # Split by chunks of max_len.
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
            for k, t in concatenated_examples.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    lm_datasets = tokenized_datasets.map(
        group_texts,
        batched=True,
        batch_size=1000,
        num_proc=4,
    )

    torch.manual_seed(seed)
    config = AutoConfig.for_model("bert", vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    model = AutoModelForMaskedLM.from_config(config)

    training_args = TrainingArguments(
        os.path.join(tempfile.gettempdir(), "hfnotebooks_mlm_scratch"),
        eval_strategy = "epoch",
        learning_rate=3e-3,
        weight_decay=0.01,
        use_cpu=True,
        report_to="none",
        seed=seed,
    )

    if bug == "collator_mlm_false":
        # the causal-LM collator setting kept for the masked model: nothing is masked, the labels are the inputs
        data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)
    else:
        data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)

    optimizers = (None, None)
    if bug == "optimizer_over_encoder_only":
        # the user's own optimizer handed to the Trainer, built over the encoder (model.bert) alone
        optimizers = (torch.optim.AdamW(model.bert.parameters(), lr=3e-3, weight_decay=0.01), None)

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=lm_datasets["train"],
        eval_dataset=lm_datasets["validation"],
        data_collator=data_collator,
        optimizers=optimizers,
    )

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
        loss, _logits, _labels = trainer.prediction_step(model, batch, prediction_loss_only=True)
        return float(loss)

    torch.manual_seed(seed + 1)  # the collator's masking draws from the global generator
    first = next(iter(trainer.get_eval_dataloader()))
    return Program(name="hfnotebooks_mlm_scratch", model=model, batch=first,
                   loss_fn=lambda outputs, labels: outputs.loss, optimizer=trainer.optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # classic: the collator built with mlm=False (the causal-LM half's setting) for the masked model: no token is
    # masked and the labels are the input ids themselves, which the bidirectional encoder sees. (Where the masking
    # of this recipe comes from is what https://github.com/huggingface/blog/issues/91 asks about.)
    # first contact declared TASK; unmasked labels == input_ids into a bidirectional encoder is the model reading its
    # answer: DEPENDENCY's dependency.target_leak (reviewed after first contact: the finding names this bug's mechanism)
    Bug("collator_mlm_false", functools.partial(_build, bug="collator_mlm_false"), "learning_ledger", ("DEPENDENCY",),
        kind="dependency.target_leak"),
    # the optimizer given to the Trainer covers model.bert only: the MLM head's transform and bias never move.
    Bug("optimizer_over_encoder_only", functools.partial(_build, bug="optimizer_over_encoder_only"),
        "four_structures", ("cls.predictions",)),
]
