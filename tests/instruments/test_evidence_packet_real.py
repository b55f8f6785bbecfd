"""evidence_packet on the inputs real programs give it: bare-tensor loaders, dict batches, sparse graph inputs,
manual updates without torch.optim, Hugging Face ModelOutputs, legacy reparametrizations."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import firstdiv
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Status


def packet(**ev):
    watched = [ev.get("model"), ev.get("optimizer")]
    before = Snapshot.take(*watched)
    report = firstdiv.evidence_packet(**ev)
    assert before.diff(Snapshot.take(*watched)) == []
    assert report.status is Status.PASS, str(report)
    assert not any(f.status in (Status.WARN, Status.FAIL) for f in report.findings)
    return report


def _autoencoder():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 2), nn.ReLU(), nn.Linear(2, 5))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def _x():
    return torch.randn(8, 5, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("loader", ["tensor_dataset", "plain_tensor"])
def test_bare_tensor_loaders(loader):
    model, opt = _autoencoder()
    x = _x()
    data = DataLoader(TensorDataset(x) if loader == "tensor_dataset" else x, batch_size=4)
    report = packet(model=model, optimizer=opt, loader=data, loss_fn=lambda out, _t: F.mse_loss(out, torch.zeros_like(out)))
    b = report.details["packet"]["batch"]
    assert b["inputs"]["shape"] == [4, 5] and b["targets"] is None
    assert report.details["packet"]["step"]["moved"] == 4


class TwoTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(5, 3), nn.Linear(5, 3)

    def forward(self, x1, x2):
        return self.a(x1) + self.b(x2)


def test_dict_batch_with_a_label_key():
    model = TwoTower()
    x, y = _x(), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    report = packet(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), task_probe=(x, y),
                    batch={"x1": x, "x2": x, "label": y}, loss_fn=F.cross_entropy)
    b = report.details["packet"]["batch"]
    assert set(b["inputs"]) == {"x1", "x2"} and b["targets"]["task"] == "classification"


class GCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(5, 3)

    def forward(self, inputs):
        features, adj = inputs
        return torch.sparse.mm(adj, self.lin(features))


def test_sparse_graph_batch_is_described_by_layout_with_a_note():
    model = GCN()
    ring = torch.tensor([list(range(8)), [(i + 1) % 8 for i in range(8)]])
    adj = torch.sparse_coo_tensor(ring, torch.ones(8), (8, 8))
    report = packet(model=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-2),
                    batch=((_x(), adj), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])), loss_fn=F.cross_entropy)
    desc = report.details["packet"]["batch"]["inputs"][1]
    assert (desc["layout"], desc["shape"], desc["nnz"]) == ("sparse_coo", [8, 8], 8) and "min" not in desc
    assert any("sparse_coo tensor [8, 8] with 8 stored elements" in n for n in report.details["notes"])
    assert all(n.startswith("note: ") for n in report.details["notes"])


def test_manual_updates_without_an_optimizer_get_a_note_not_skipped():
    model = nn.Linear(5, 3)

    def train_step():
        loss = F.cross_entropy(model(_x()), torch.zeros(8, dtype=torch.long))
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad

    report = packet(model=model, train_step=train_step, batch=(_x(), torch.zeros(8, dtype=torch.long)), loss_fn=F.cross_entropy)
    assert report.details["missing"] == {}
    opt = next(f for f in report.findings if f.where == "optimizer")
    assert opt.message.startswith("note: no optimizer: train_step updates by hand") and opt.message in report.details["notes"]
    assert report.details["packet"]["parameters"]["weight"]["grad_after_backward"]["state"] == "nonzero"


def test_hugging_face_model_output():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg)
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1])}
    report = packet(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4), batch=batch,
                    loss_fn=lambda out, _labels: out.loss)
    assert report.details["packet"]["loss"]["outputs"]["logits"]["shape"] == [2, 2]


@pytest.mark.parametrize("reparam", ["weight_norm", "spectral_norm"])
def test_legacy_reparametrization_untouched_and_copyable(reparam):
    torch.manual_seed(0)
    model = nn.Sequential(getattr(nn.utils, reparam)(nn.Linear(5, 4)), nn.ReLU(), nn.Linear(4, 3))
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    with torch.no_grad():
        model(_x())
    weight = model[0].weight
    packet(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), batch=(_x(), y), loss_fn=F.cross_entropy)
    assert model[0].weight is weight and weight.is_leaf
    assert torch.equal(copy.deepcopy(model)[0].weight, weight)
