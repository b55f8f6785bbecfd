"""The Hugging Face course, chapter 3 "A full training" (``chapters/en/chapter3/4.mdx``): MRPC sentence pairs tokenized
with ``tokenizer(sentence1, sentence2, truncation=True)``, the columns the model does not expect removed and ``label``
renamed ``labels``, ``DataCollatorWithPadding`` (dynamic padding) in a shuffled ``DataLoader`` of batch 8,
``AutoModelForSequenceClassification`` (num_labels=2), ``AdamW(lr=3e-5)``, ``accelerator.prepare``, the linear
``get_scheduler`` without warmup over 3 epochs, and the loop ``outputs = model(**batch); loss = outputs.loss;
accelerator.backward(loss); optimizer.step(); lr_scheduler.step(); optimizer.zero_grad()``; evaluation by argmax
under ``model.eval()`` + ``no_grad``.

Source: https://github.com/huggingface/course
Commit: 16af5667532d6966f0fe83f44cc848dd7698a215
Files: chapters/en/chapter3/4.mdx (the complete Accelerate training loop and the data preparation it starts from)
License: Apache-2.0
Domain: text classification (sentence pairs) with Accelerate, BERT built from config

Deviations from the original:
- model: ``from_pretrained("bert-base-uncased")`` cannot download here; a ``BertForSequenceClassification`` is built
  from a small ``BertConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64) with random weights; lr 3e-5 -> 3e-3
  (training from scratch; the self-check runs 40 steps);
- tokenizer: the bert-base-uncased WordPiece tokenizer is replaced by a word-level ``tokenizers`` tokenizer built in
  memory (whitespace pre-tokenizer, ``[CLS] A [SEP] B [SEP]`` template with token type ids) wrapped in
  ``PreTrainedTokenizerFast``; it is called exactly as the course calls its tokenizer and ``DataCollatorWithPadding``
  pads with it;
- data: GLUE MRPC (``load_dataset``; the ``datasets`` package is not installed here) is replaced by synthetic pairs
  made from ``seed`` with the same columns (``sentence1``, ``sentence2``, ``label``, ``idx``): label 1 when
  ``sentence2`` is ``sentence1``'s words reordered, label 0 when it is an unrelated sentence from other words;
  ``map(batched=True)``, ``remove_columns``, ``rename_column`` and ``set_format("torch")`` are written as the same
  operations on lists of dicts (the collator returns tensors);
- accelerate's process-wide state is reset before ``Accelerator(cpu=True)`` is built (one test process builds many);
  the tqdm progress bar and ``evaluate.load`` metric are left out; one ``train_step`` is one batch of the loop;
  ``eval_fn`` is the evaluation loop's accuracy on a given batch.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    get_scheduler,
)
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

SELF_CHECK_STEPS = 40

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS_A = [f"a{i}" for i in range(40)]
WORDS_B = [f"b{i}" for i in range(40)]


def make_tokenizer():
    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS_A + WORDS_B)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def make_split(rng, n):
    """MRPC-shaped rows: label 1 when sentence2 reorders sentence1's words, 0 when it is an unrelated sentence."""
    rows = []
    for idx in range(n):
        s1 = [rng.choice(WORDS_A) for _ in range(rng.randint(5, 10))]
        label = int(rng.random() < 0.5)
        s2 = rng.sample(s1, len(s1)) if label else [rng.choice(WORDS_B) for _ in range(rng.randint(5, 10))]
        rows.append({"sentence1": " ".join(s1), "sentence2": " ".join(s2), "label": label, "idx": idx})
    return rows


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    raw_datasets = {"train": make_split(rng, 400), "validation": make_split(rng, 64)}
    tokenizer = make_tokenizer()

    def tokenize_function(example):
        return tokenizer(example["sentence1"], example["sentence2"], truncation=True)

    def map_batched(rows, fn):  # raw_datasets.map(tokenize_function, batched=True)
        columns = {k: [r[k] for r in rows] for k in rows[0]}
        out = fn(columns)
        return [dict(r, **{k: out[k][i] for k in out}) for i, r in enumerate(rows)]

    tokenized_datasets = {k: map_batched(v, tokenize_function) for k, v in raw_datasets.items()}
    data_collator = DataCollatorWithPadding(tokenizer=tokenizer)

    if bug == "attention_mask_removed":
        # every column but input_ids and label removed: the collator pads, but the model never sees which
        # positions are padding (nor which sentence a token belongs to)
        removed = ["sentence1", "sentence2", "idx", "attention_mask", "token_type_ids"]
    else:
        removed = ["sentence1", "sentence2", "idx"]
    # tokenized_datasets.remove_columns(removed); .rename_column("label", "labels"); .set_format("torch")
    tokenized_datasets = {
        split: [{("labels" if k == "label" else k): v for k, v in row.items() if k not in removed} for row in rows]
        for split, rows in tokenized_datasets.items()}

    train_dataloader = DataLoader(
        tokenized_datasets["train"], shuffle=True, batch_size=8, collate_fn=data_collator
    )
    eval_dataloader = DataLoader(
        tokenized_datasets["validation"], batch_size=8, collate_fn=data_collator
    )

    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=True)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=2)
    model = BertForSequenceClassification(config)
    optimizer = AdamW(model.parameters(), lr=3e-3)
    train_dl, eval_dl, model, optimizer = accelerator.prepare(  # noqa: RUF059
        train_dataloader, eval_dataloader, model, optimizer
    )

    num_epochs = 3
    num_training_steps = num_epochs * len(train_dl)
    lr_scheduler = get_scheduler(
        "linear",
        optimizer=optimizer,
        num_warmup_steps=0,
        num_training_steps=num_training_steps,
    )

    model.train()
    state = {"it": None}

    def train_step():
        try:
            batch = next(state["it"])
        except (StopIteration, TypeError):  # for epoch in range(num_epochs): for batch in train_dl:
            state["it"] = iter(train_dl)
            batch = next(state["it"])
        outputs = model(**batch)
        loss = outputs.loss
        accelerator.backward(loss)
        optimizer.step()
        lr_scheduler.step()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            outputs = model(**batch)
        logits = outputs.logits
        predictions = torch.argmax(logits, dim=-1)
        model.train()
        return float((predictions == batch["labels"]).float().mean())

    first = next(iter(DataLoader(tokenized_datasets["train"], batch_size=8, collate_fn=data_collator)))
    return Program(name="hfcourse_accelerate_mrpc", model=model, batch=first, loss_fn=lambda out, _labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dl)


build = functools.partial(_build)

BUGS = [
    # only input_ids and the label kept by remove_columns: the padded batch carries no attention_mask, so the model
    # attends to the [PAD] positions of every shorter pair (classic).
    Bug("attention_mask_removed", functools.partial(_build, bug="attention_mask_removed"), "learning_ledger",
        ("DEPENDENCY",)),
    # optimizer.zero_grad() left out of the loop: every step applies the sum of all gradients so far (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
