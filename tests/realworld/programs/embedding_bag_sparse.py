"""Text classification with ``nn.EmbeddingBag(mode="mean", sparse=True)`` over flattened token ids + offsets (the
classic ``(text, offsets)`` collate idiom), a Linear head, cross-entropy, and two optimizers: ``SparseAdam`` for
the sparse embedding and ``Adam`` for the dense head (``optimizer`` is the dense one; train_step steps both).

Synthetic rule: each of 4 topics has its own block of the vocabulary; a document draws 70% of its words from its
topic's block, the rest anywhere. The label is the block most words come from.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

VOCAB = 100
NUM_CLASS = 4
EMBED_DIM = 32
BATCH = 16
BLOCK = VOCAB // NUM_CLASS


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, mode="mean", sparse=True)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(_label)
        text_list.append(_text)
        offsets.append(_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return {"text": text_list, "offsets": offsets, "labels": label_list}


def make_documents(gen, n):
    docs = []
    for _ in range(n):
        label = int(torch.randint(NUM_CLASS, (1,), generator=gen))
        length = int(torch.randint(5, 15, (1,), generator=gen))
        words = label * BLOCK + torch.randint(BLOCK, (length,), generator=gen)
        noise = torch.rand(length, generator=gen) < 0.3
        words[noise] = torch.randint(VOCAB, (int(noise.sum()),), generator=gen)
        docs.append((label, words))
    return docs


def task_probe(inputs):
    text, offsets = inputs["text"], inputs["offsets"]
    ends = torch.cat([offsets[1:], torch.tensor([text.numel()])])
    return torch.stack([torch.bincount(text[s:e] // BLOCK, minlength=NUM_CLASS).argmax() for s, e in zip(offsets, ends)])


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    docs = make_documents(gen, BATCH * 8)
    batches = [collate_batch(docs[k:k + BATCH]) for k in range(0, len(docs), BATCH)]
    model = TextClassificationModel(VOCAB, EMBED_DIM, NUM_CLASS)
    criterion = nn.CrossEntropyLoss()
    sparse_opt = torch.optim.SparseAdam(list(model.embedding.parameters()), lr=1e-2)
    optimizer = torch.optim.Adam(model.fc.parameters(), lr=1e-2)
    state = {"step": 0}

    def train_step():
        model.train()
        batch = batches[state["step"] % len(batches)]
        state["step"] += 1
        sparse_opt.zero_grad()
        optimizer.zero_grad()
        predicted_label = model(batch["text"], batch["offsets"])
        loss = criterion(predicted_label, batch["labels"])
        loss.backward()
        optimizer.step()
        if bug != "sparse_opt_not_stepped":
            sparse_opt.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            acc = (model(batch["text"], batch["offsets"]).argmax(1) == batch["labels"]).float().mean()
        model.train()
        return float(acc)

    return Program(name="embedding_bag_sparse", model=model, batch=batches[0], loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task="classification", task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # sparse_opt.step() forgotten: the EmbeddingBag (nearly all the parameters) never moves.
    Bug("sparse_opt_not_stepped", functools.partial(_build, bug="sparse_opt_not_stepped"), "step_probe",
        ("embedding.weight",)),
]
