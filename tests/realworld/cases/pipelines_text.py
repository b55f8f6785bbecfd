"""stage_trace on text classification pipelines: a Dataset of {"text", "label"} records through a user-written
whitespace (or character) tokenizer, vocabulary lookup, padding + truncation and tensor conversion to
{"input_ids", "attention_mask", "labels"}; train and eval pipelines compared on the same record."""

from __future__ import annotations

import random
from types import SimpleNamespace

import torch
from _cases import Case
from torch.utils.data import Dataset

from firstdiv import stage_trace

TEXT = ("the movie was great fun and the cast sang well but the plot dragged badly in a dull second half "
        "with loud music poor jokes and a bright happy end")
WORDS = TEXT.split(" ")
CLASSES = {"negative": 0, "neutral": 1, "positive": 2}


class Reviews(Dataset):
    def __init__(self, seed, n=6):
        rng = random.Random(seed)
        self.rows = [{"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40))).capitalize() + ".",
                      "label": rng.choice(sorted(CLASSES))} for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return dict(self.rows[i])


class Tokenize:
    def __init__(self, chars=False):
        self.chars = chars

    def __call__(self, row):
        text = row["text"].lower().replace(".", " .")
        return {"tokens": list(text.replace(" ", "")) if self.chars else text.split(), "label": row["label"]}


class Vocab:
    def __init__(self, tokens):
        self.itos = ["<pad>", "<unk>"] + sorted(set(tokens))
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __call__(self, row):
        return {"input_ids": [self.stoi.get(t, 1) for t in row["tokens"]], "label": row["label"]}


class PadTruncate:
    def __init__(self, max_length):
        self.max_length = max_length

    def __call__(self, row):
        ids = row["input_ids"][: self.max_length]
        pad = self.max_length - len(ids)
        return {"input_ids": ids + [0] * pad, "attention_mask": [1] * len(ids) + [0] * pad, "label": row["label"]}


class RandomTokenDrop:
    """Augmentation: replaces a few tokens by <unk>, with its own generator."""

    def __init__(self, p=0.1, seed=0):
        self.p, self.rng = p, random.Random(seed)

    def __call__(self, row):
        return {**row, "input_ids": [1 if self.rng.random() < self.p else t for t in row["input_ids"]]}


class ToTensors:
    def __init__(self, class_to_idx):
        self.class_to_idx = class_to_idx

    def __call__(self, row):
        return {"input_ids": torch.tensor(row["input_ids"]), "attention_mask": torch.tensor(row["attention_mask"]),
                "labels": torch.tensor(self.class_to_idx[row["label"]])}


def pipeline(seed, vocab, *, chars=False, max_length=32, class_to_idx=CLASSES, augment=True):
    stages = [("tokenize", Tokenize(chars)), ("to_ids", vocab)]
    stages += [("token_drop", RandomTokenDrop(seed=seed))] if augment else []
    return stages + [("pad_truncate", PadTruncate(max_length)), ("to_tensors", ToTensors(class_to_idx))]


def program(seed, chars=False, **eval_kw):
    data = Reviews(seed)
    tok = Tokenize(chars)
    vocab = Vocab([t for row in data.rows for t in tok(row)["tokens"]])
    train = pipeline(seed, vocab, chars=chars, max_length=64 if chars else 32)
    evals = pipeline(seed, vocab, chars=chars, augment=False, **{"max_length": 64 if chars else 32, **eval_kw})
    return SimpleNamespace(dataset=data, sample=data[seed % len(data)], stages=train, eval_stages=evals)


def trace(p):
    return stage_trace(p.sample, p.stages, class_to_idx=CLASSES, eval_stages=p.eval_stages, augmentations={"token_drop"})


def label_bug(seed):
    p = program(seed)
    reversed_map = {c: len(CLASSES) - 1 - i for c, i in CLASSES.items()}
    p.sample = next(r for r in p.dataset.rows if r["label"] != "neutral")
    p.stages[-1] = ("to_tensors", ToTensors(reversed_map))
    p.eval_stages = None
    return p


CASES = [
    Case("words_train_vs_eval", "stage_trace", program, trace),
    Case("chars_train_vs_eval", "stage_trace", lambda s: program(s, chars=True), trace),
    Case("words_without_eval", "stage_trace", program, lambda p: stage_trace(p.sample, p.stages, class_to_idx=CLASSES)),
    Case("eval_tokenizer_max_length_differs", "stage_trace", lambda s: program(s, max_length=64), trace,
         bug=True, where=("eval:pad_truncate",), kind="train_eval"),
    Case("eval_tokenizes_characters", "stage_trace", lambda s: program(s, chars=False), lambda p: stage_trace(
        p.sample, p.stages, eval_stages=[("tokenize", Tokenize(chars=True))] + p.eval_stages[1:], augmentations={"token_drop"}),
         bug=True, where=("eval:tokenize",), kind="train_eval"),
    Case("label_map_reversed", "stage_trace", label_bug, lambda p: stage_trace(p.sample, p.stages, class_to_idx=CLASSES),
         bug=True, where=("to_tensors",), kind="label_map"),
]
