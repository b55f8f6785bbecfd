"""A siamese embedding network on pairs: one shared `embedding` MLP applied to both inputs, forward(x1, x2) returning
the two embeddings, CosineEmbeddingLoss(margin=0.5) on 1 (same class) / -1 (different class) targets, Adam lr 1e-3.
The batch is a dict {"x1", "x2", "labels"} as a pair Dataset's collate gives it."""

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

IN_FEATURES, EMB_DIM, N_IDENTITIES = 16, 8, 6


class SiameseNet(nn.Module):
    def __init__(self, second_branch_no_grad: bool = False):
        super().__init__()
        self.embedding = nn.Sequential(nn.Linear(IN_FEATURES, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                       nn.Linear(32, EMB_DIM))
        self.second_branch_no_grad = second_branch_no_grad

    def forward_once(self, x):
        return self.embedding(x)

    def forward(self, x1, x2):
        output1 = self.forward_once(x1)
        if self.second_branch_no_grad:
            with torch.no_grad():
                output2 = self.forward_once(x2)
        else:
            output2 = self.forward_once(x2)
        return output1, output2


def make_pairs(seed: int, n_pairs: int = 32):
    """Identities are prototype vectors; a sample is its prototype plus noise; half the pairs share an identity."""
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(N_IDENTITIES, IN_FEATURES, generator=g)
    id1 = torch.randint(0, N_IDENTITIES, (n_pairs,), generator=g)
    other = (id1 + torch.randint(1, N_IDENTITIES, (n_pairs,), generator=g)) % N_IDENTITIES
    same = torch.arange(n_pairs) % 2 == 0
    id2 = torch.where(same, id1, other)
    x1 = prototypes[id1] + 0.3 * torch.randn(n_pairs, IN_FEATURES, generator=g)
    x2 = prototypes[id2] + 0.3 * torch.randn(n_pairs, IN_FEATURES, generator=g)
    labels = torch.where(same, 1.0, -1.0)

    def same_identity(inputs):
        """The labelling rule: 1 when both samples' nearest prototype is the same identity, else -1."""
        a, b = (torch.cdist(inputs[k], prototypes).argmin(1) for k in ("x1", "x2"))
        return torch.where(a == b, 1.0, -1.0)

    return {"x1": x1, "x2": x2, "labels": labels}, same_identity


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    batch, same_identity = make_pairs(seed)
    model = SiameseNet(second_branch_no_grad=bug == "second_branch_no_grad")
    criterion = nn.CosineEmbeddingLoss(margin=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_fn(outputs, labels):
        output1, output2 = outputs
        return criterion(output1, output2, labels)

    def train_step():
        model.train()
        optimizer.zero_grad()
        output1, output2 = model(batch["x1"], batch["x2"])
        loss = criterion(output1, output2, batch["labels"])
        loss.backward()
        optimizer.step()
        return loss

    return Program(name="siamese_pairs", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, task_probe=same_identity)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("second_branch_no_grad", functools.partial(_build, bug="second_branch_no_grad"), "learning_ledger", ("DEPENDENCY",)),
]
