"""The Accelerate "nlp_example": ``AutoModelForSequenceClassification`` (BERT) fine-tuned on a sentence-pair task
(GLUE MRPC) with ``Accelerator``: ``set_seed``, AdamW, ``get_linear_schedule_with_warmup(num_warmup_steps=100)``,
``accelerator.prepare(model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)``, gradient accumulation
when the batch size exceeds ``MAX_GPU_BATCH_SIZE`` (the loss divided by the accumulation steps, ``step %
gradient_accumulation_steps == 0`` to step, as written), ``accelerator.backward``, and an evaluation under
``model.eval()`` + ``no_grad`` with ``accelerator.gather_for_metrics``.

Source: https://github.com/huggingface/accelerate
Commit: 16cb6eb80dd9aa8b4df1a63ef57863e455d53b83
Files: examples/nlp_example.py
License: Apache-2.0 (Copyright 2021 The HuggingFace Inc. team)
Domain: Accelerate script (sentence-pair classification with BERT)

Deviations from the original:
- accelerate's process-wide state is reset before ``Accelerator(...)`` is built (the script runs once per process;
  here several builds share one test process with other tests that used accelerate).
- no weights or tokenizer can be downloaded: the model is ``BertForSequenceClassification`` built from a tiny
  ``BertConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64, vocab 100, 2 labels) with random weights, and the
  tokenizer's output (``input_ids``, ``token_type_ids``, ``attention_mask``, padded to the longest by the collate
  function, as ``tokenizer.pad(padding="longest")`` does) is built directly from synthetic token ids;
- because the model starts from random weights instead of a pre-trained checkpoint, lr 2e-5 -> 3e-3 (a fine-tuning
  lr does not move a randomly initialized model in a short run); num_warmup_steps 100 -> 4;
- sizes: MAX_GPU_BATCH_SIZE 16 -> 8 with batch_size 16, so the script's gradient accumulation (2 steps) is exercised;
  EVAL_BATCH_SIZE 32 -> 16;
- data: GLUE MRPC (``datasets.load_dataset``) is replaced by 1024 training and 64 validation synthetic sentence pairs
  made from ``seed``: label 1 (paraphrase) when the second sentence is the first with one word replaced, label 0
  when it is an unrelated sentence drawn from another part of the vocabulary;
- ``evaluate.load("glue", "mrpc")`` is not available: the metric is the accuracy computed by hand; the debug
  ``print(f"=====  {predictions}")`` of the evaluation loop is left out; ``Accelerator(cpu=True)``, no mixed precision;
- one ``train_step`` is one optimizer update of the epoch loop (micro-batches until ``step %
  gradient_accumulation_steps == 0``; ``model.train()`` at the start of each epoch); ``eval_fn`` is the evaluation
  loop on one batch.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from accelerate import Accelerator, DistributedType
from accelerate.state import AcceleratorState
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import BatchEncoding, BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup, set_seed
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

MAX_GPU_BATCH_SIZE = 8
EVAL_BATCH_SIZE = 16
VOCAB, PAD, CLS, SEP = 100, 0, 1, 2


def make_pairs(gen, n):
    """Tokenized pairs: [CLS] s1 [SEP] s2 [SEP] with token_type_ids. s1 uses the words 5..52; label 1 (paraphrase):
    s2 is s1 with one word replaced by another of those words; label 0: s2 is an unrelated sentence of words 53..99."""
    examples = []
    for _ in range(n):
        s1 = torch.randint(5, 53, (int(torch.randint(5, 11, (1,), generator=gen)),), generator=gen)
        label = int(torch.rand(1, generator=gen) < 0.5)
        if label:
            s2 = s1.clone()
            s2[int(torch.randint(len(s2), (1,), generator=gen))] = int(torch.randint(5, 53, (1,), generator=gen))
        else:
            s2 = torch.randint(53, VOCAB, (int(torch.randint(5, 11, (1,), generator=gen)),), generator=gen)
        ids = [CLS, *s1.tolist(), SEP, *s2.tolist(), SEP]
        types = [0] * (len(s1) + 2) + [1] * (len(s2) + 1)
        examples.append({"input_ids": ids, "token_type_ids": types, "attention_mask": [1] * len(ids), "labels": label})
    return examples


def get_dataloaders(accelerator: Accelerator, batch_size: int = 16, seed: int = 0):
    """
    Creates a set of `DataLoader`s for the (synthetic) sentence-pair dataset.
    """
    gen = torch.Generator().manual_seed(seed)
    tokenized_datasets = {"train": make_pairs(gen, 1024), "validation": make_pairs(gen, 64)}

    def collate_fn(examples):
        # For Torchxla, it's best to pad everything to the same length or training will be very slow.
        max_length = 128 if accelerator.distributed_type == DistributedType.XLA else None
        longest = max(len(e["input_ids"]) for e in examples) if max_length is None else max_length
        batch = {key: torch.full((len(examples), longest), 0, dtype=torch.long)
                 for key in ("input_ids", "token_type_ids", "attention_mask")}
        for row, e in enumerate(examples):
            for key, values in batch.items():
                values[row, :len(e[key])] = torch.tensor(e[key])
        batch["labels"] = torch.tensor([e["labels"] for e in examples])
        return BatchEncoding(batch)

    # Instantiate dataloaders.
    train_dataloader = DataLoader(
        tokenized_datasets["train"], shuffle=True, collate_fn=collate_fn, batch_size=batch_size, drop_last=True
    )
    eval_dataloader = DataLoader(
        tokenized_datasets["validation"],
        shuffle=False,
        collate_fn=collate_fn,
        batch_size=EVAL_BATCH_SIZE,
        drop_last=(accelerator.mixed_precision == "fp8"),
    )

    return train_dataloader, eval_dataloader


def _build(seed, bug=None):
    config = {"lr": 3e-3, "num_epochs": 3, "seed": seed, "batch_size": 16}
    # Initialize accelerator (a fresh process state first: in one test process another test's Accelerator may have
    # set mixed precision already, which accelerate refuses to change; each run of the script is its own process)
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=True, mixed_precision="no")
    # Sample hyper-parameters for learning rate, batch size, seed and a few other HPs
    lr = config["lr"]
    num_epochs = int(config["num_epochs"])
    seed = int(config["seed"])
    batch_size = int(config["batch_size"])

    # If the batch size is too big we use gradient accumulation
    gradient_accumulation_steps = 1
    if batch_size > MAX_GPU_BATCH_SIZE and accelerator.distributed_type != DistributedType.XLA:
        gradient_accumulation_steps = batch_size // MAX_GPU_BATCH_SIZE
        batch_size = MAX_GPU_BATCH_SIZE

    set_seed(seed)
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size, seed)
    # Instantiate the model (we build the model here so that the seed also control new weights initialization)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_labels=2, pad_token_id=PAD))

    model = model.to(accelerator.device)
    # Instantiate optimizer
    params = model.bert.parameters() if bug == "optimizer_over_bert_only" else model.parameters()
    optimizer = AdamW(params=params, lr=lr)

    # Instantiate scheduler
    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer,
        num_warmup_steps=4,
        num_training_steps=(len(train_dataloader) * num_epochs) // gradient_accumulation_steps,
    )

    # Prepare everything
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )

    state = {"it": None, "step": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # `for epoch in range(num_epochs): model.train(); for step, batch in ...`
            model.train()
            state["it"], state["step"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        micro_losses = []
        while True:
            batch = next_batch()
            step = state["step"]
            state["step"] += 1
            if bug == "zero_grad_every_micro_batch":
                optimizer.zero_grad()
            # We could avoid this line since we set the accelerator with `device_placement=True`.
            batch.to(accelerator.device)
            outputs = model(**batch)
            loss = outputs.loss
            loss = loss / gradient_accumulation_steps
            accelerator.backward(loss)
            micro_losses.append(outputs.loss.item())
            if step % gradient_accumulation_steps == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                return torch.tensor(sum(micro_losses) / len(micro_losses))

    def eval_fn(model, batch):
        model.eval()
        batch.to(accelerator.device)
        with torch.no_grad():
            outputs = model(**batch)
        predictions = outputs.logits.argmax(dim=-1)
        predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
        return float((predictions == references).float().mean())

    first = next(iter(DataLoader(train_dataloader.dataset, batch_size=batch_size,
                                 collate_fn=train_dataloader.collate_fn)))
    return Program(name="accelerate_nlp_example", model=model, batch=first, loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # AdamW over model.bert only: the classifier head (new, randomly initialized in any fine-tuning) never trains.
    Bug("optimizer_over_bert_only", functools.partial(_build, bug="optimizer_over_bert_only"), "four_structures",
        ("classifier",)),
    # optimizer.zero_grad() at the top of every micro-batch (the order of Accelerate's gradient-accumulation docs,
    # https://github.com/huggingface/accelerate/issues/616 and #1422): the accumulated gradient of the previous
    # micro-batch is wiped, so each update sees only its last micro-batch.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        ("bert.embeddings.word_embeddings.weight",)),
]
