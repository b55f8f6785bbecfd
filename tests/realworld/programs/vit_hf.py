"""Vision Transformer image classification in the Hugging Face idiom: ``ViTForImageClassification`` from a tiny
``ViTConfig`` (16x16 RGB, 4x4 patches, dropout 0.1, random weights), batches ``{"pixel_values", "labels"}``, the
model's own ``out.loss``, AdamW with weight decay, clip 1.0, and an accuracy evaluation.

Synthetic images: noise with one bright quadrant; the label is the quadrant.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from transformers import ViTConfig, ViTForImageClassification
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

IMAGE = 16
NUM_LABELS = 4
BATCH = 8


def make_batch(gen):
    labels = torch.randint(NUM_LABELS, (BATCH,), generator=gen)
    pixel_values = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen) * 0.5
    h = IMAGE // 2
    for b, q in enumerate(labels.tolist()):
        r, c = divmod(q, 2)
        pixel_values[b, :, r * h:(r + 1) * h, c * h:(c + 1) * h] += 1.0
    return {"pixel_values": pixel_values, "labels": labels}


def task_probe(inputs):
    x = inputs["pixel_values"].mean(1)
    h = IMAGE // 2
    quads = torch.stack([x[:, r * h:(r + 1) * h, c * h:(c + 1) * h].mean((1, 2)) for r in range(2) for c in range(2)], 1)
    return quads.argmax(1)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = ViTConfig(image_size=IMAGE, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, num_labels=NUM_LABELS,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = ViTForImageClassification(config)
    batches = [make_batch(gen) for _ in range(6)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    state = {"step": 0}

    def train_step():
        model.train()
        batch = batches[state["step"] % len(batches)]
        state["step"] += 1
        optimizer.zero_grad()
        outputs = model(**batch)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        if bug != "eval_without_eval_mode":
            model.eval()
        with torch.no_grad():
            logits = model(pixel_values=batch["pixel_values"]).logits
        model.train()
        return float((logits.argmax(-1) == batch["labels"]).float().mean())

    return Program(name="vit_hf", model=model, batch=batches[0], loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # evaluation forgets model.eval(): dropout stays on, the accuracy is noisy and biased low.
    Bug("eval_without_eval_mode", functools.partial(_build, bug="eval_without_eval_mode"), "six_claims",
        ("EVALUATION",)),
]
