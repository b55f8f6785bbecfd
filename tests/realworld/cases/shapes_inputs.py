"""shape_ledger on the inputs and models practitioners hand it: channels_last batches, bf16/fp16 models, a sparse
input, nested outputs (dict, tuple, an HF ``ModelOutput``), a ``torch.compile``d model and a compiled backbone,
HF BERT (no conv at all) and HF ViT (a patch-embedding conv) from config. Each is correct: no FAIL, no raise."""

from __future__ import annotations

import torch
from _cases import Case
from _shapes_models import RESNET_DESIGN, Program, ResNet, resnet
from torch import nn

import firstdiv


def _ledger(p: Program):
    return firstdiv.shape_ledger(p.model, p.inputs, designed=p.designed)


def _channels_last(seed: int) -> Program:
    p = resnet(seed)
    p.model = p.model.to(memory_format=torch.channels_last)
    p.inputs = p.inputs.contiguous(memory_format=torch.channels_last)
    return p


def _dtype(dtype: torch.dtype):
    def build(seed: int) -> Program:
        p = resnet(seed)
        p.model, p.inputs = p.model.to(dtype), p.inputs.to(dtype)
        return p
    return build


class BagOfWords(nn.Module):
    """A sparse document-term matrix times an embedding table, then an MLP."""

    def __init__(self, vocab: int = 50, dim: int = 16):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, dim) * 0.1)
        self.mlp = nn.Sequential(nn.Linear(dim, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, docs: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.sparse.mm(docs, self.table))


def _sparse(seed: int) -> Program:
    torch.manual_seed(seed)
    counts = torch.randint(0, 3, (4, 50)).float() * (torch.rand(4, 50) < 0.1)
    return Program(BagOfWords(), counts.to_sparse(), {"mlp": (3,)})


class Detector(nn.Module):
    """A backbone and two heads returning a dict of a tensor, a tuple and a list (a detection-style output)."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.cls_head, self.box_head = nn.Conv2d(8, 4, 1), nn.Conv2d(8, 16, 1)

    def forward(self, x: torch.Tensor) -> dict:
        f = self.backbone(x)
        return {"logits": self.cls_head(f), "boxes": (self.box_head(f), f.mean((2, 3))), "features": [f]}


def _nested(seed: int) -> Program:
    torch.manual_seed(seed)
    return Program(Detector().eval(), torch.randn(2, 3, 16, 16), {"backbone": (8, 8, 8), "box_head": (16, 8, 8)})


def _compiled(seed: int) -> Program:
    p = resnet(seed)
    p.model = torch.compile(p.model)
    return p


class Finetune(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.compile(ResNet().eval())
        self.backbone.fc = nn.Identity()  # features out, a new head
        self.head = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def _compiled_backbone(seed: int) -> Program:
    torch.manual_seed(seed)
    return Program(Finetune().eval(), torch.randn(2, 3, 64, 64), {"backbone.layer4": (64, 2, 2), "head": (3,)})


def _bert(seed: int) -> Program:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     max_position_embeddings=32, num_labels=2)
    ids = torch.randint(0, 64, (2, 9))
    return Program(BertForSequenceClassification(cfg).eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                   {"bert.embeddings": (None, 16), "classifier": (2,)})


def _vit(seed: int) -> Program:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, num_labels=3)
    return Program(ViTForImageClassification(cfg).eval(), torch.randn(2, 3, 32, 32),
                   {"vit.embeddings.patch_embeddings.projection": (16, 4, 4), "vit.embeddings": (17, 16),
                    "classifier": (3,)})


def _undesigned(p: Program):
    return firstdiv.shape_ledger(p.model, p.inputs)


_BUILDS = [("channels_last", _channels_last), ("bf16_model", _dtype(torch.bfloat16)),
           ("fp16_model", _dtype(torch.float16)), ("sparse_input", _sparse), ("nested_dict_output", _nested),
           ("compiled_model", _compiled), ("compiled_backbone", _compiled_backbone), ("hf_bert_no_conv", _bert),
           ("hf_vit_patch_embedding", _vit)]

CASES = ([Case(name, "shape_ledger", build, _ledger) for name, build in _BUILDS]
         + [Case(f"{name}_undesigned", "shape_ledger", build, _undesigned) for name, build in _BUILDS])

assert RESNET_DESIGN["fc"] == (10,)  # the designs above assume the corpus ResNet's 10 classes
