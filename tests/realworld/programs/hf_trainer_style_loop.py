"""A Trainer-shaped loop written by hand: a ``DataLoader`` over a list of dict examples with a padding collate
function (dict batches ``input_ids`` / ``attention_mask`` / ``labels``), a small custom ``nn.Module`` text
classifier that returns ``SequenceClassifierOutput(loss=..., logits=...)`` when ``labels`` is given, gradient
accumulation 2, clipping, a linear warmup schedule, ``model.train()`` each epoch.

Synthetic rule: the label says whether the sentence contains the "negation" token (id 3).
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from transformers import get_linear_schedule_with_warmup
from transformers.modeling_outputs import SequenceClassifierOutput

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

PAD_ID, NEG_ID = 0, 3
VOCAB = 80
PER_DEVICE_BATCH = 8
GRADIENT_ACCUMULATION_STEPS = 2
MAX_GRAD_NORM = 1.0


class BagOfWordsClassifier(nn.Module):
    def __init__(self, vocab_size, hidden_size=32, num_labels=2):
        super().__init__()
        self.num_labels = num_labels
        self.embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=PAD_ID)
        self.pre_classifier = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, input_ids, attention_mask=None, labels=None):
        hidden = self.embeddings(input_ids)
        if attention_mask is None:
            attention_mask = (input_ids != PAD_ID).long()
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        pooled = self.dropout(torch.relu(self.pre_classifier(pooled)))
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)


def make_examples(gen, n):
    examples = []
    for _ in range(n):
        length = int(torch.randint(4, 13, (1,), generator=gen))
        ids = torch.randint(4, VOCAB, (length,), generator=gen)
        label = int(torch.rand(1, generator=gen) < 0.5)
        if label:
            ids[int(torch.randint(length, (1,), generator=gen))] = NEG_ID
        examples.append({"input_ids": ids.tolist(), "label": label})
    return examples


def collate_fn(features):
    max_len = max(len(f["input_ids"]) for f in features)
    input_ids = torch.full((len(features), max_len), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(features), max_len), dtype=torch.long)
    for i, f in enumerate(features):
        input_ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        attention_mask[i, :len(f["input_ids"])] = 1
    labels = torch.tensor([f["label"] for f in features], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def task_probe(inputs):
    return (inputs["input_ids"] == NEG_ID).any(1).long()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_dataset = make_examples(gen, 128)
    train_dataloader = DataLoader(train_dataset, batch_size=PER_DEVICE_BATCH, shuffle=True, collate_fn=collate_fn,
                                  generator=torch.Generator().manual_seed(seed))
    model = BagOfWordsClassifier(VOCAB)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)
    num_update_steps = 3 * len(train_dataloader) // GRADIENT_ACCUMULATION_STEPS
    lr_scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=4, num_training_steps=num_update_steps)
    state = {"it": None}

    def next_inputs():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            model.train()  # start of an epoch
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        """One optimizer update = GRADIENT_ACCUMULATION_STEPS micro-batches, as Trainer's inner loop does."""
        total = 0.0
        for step in range(GRADIENT_ACCUMULATION_STEPS):
            inputs = next_inputs()
            outputs = model(**inputs)
            loss = outputs.loss / GRADIENT_ACCUMULATION_STEPS
            loss.backward()
            total += loss.detach()
            if (step + 1) % GRADIENT_ACCUMULATION_STEPS == 0:
                if bug == "zero_grad_before_step":
                    optimizer.zero_grad()
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
        return total

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        model.train()
        return float((logits.argmax(-1) == batch["labels"]).float().mean())

    first = collate_fn(train_dataset[:PER_DEVICE_BATCH])
    return Program(name="hf_trainer_style_loop", model=model, batch=first, loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   task_probe=task_probe, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # optimizer.zero_grad() moved between backward and step: the accumulated gradients are wiped before the update.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe",
        ("embeddings.weight",)),
]
