"""Abhishek Thakur's ``bert-sentiment``: IMDB reviews (``sentiment`` mapped to 1 for "positive", else 0) split
90/10 stratified, each review whitespace-normalized and tokenized with ``encode_plus`` (special tokens, padded to
``MAX_LEN``), a ``BERTBaseUncased`` head (BERT's pooled output, ``Dropout(0.3)``, ``Linear(768, 1)``), the loss
``BCEWithLogitsLoss()(outputs, targets.view(-1, 1))``, AdamW with weight decay 0.001 except on biases and LayerNorm
weights, and ``get_linear_schedule_with_warmup`` (no warmup) stepped every batch; the loop body
``zero_grad; forward; loss; backward; optimizer.step(); scheduler.step()``; evaluation under ``model.eval()`` and
``no_grad``, accuracy of ``sigmoid(outputs) >= 0.5``.

Source: https://github.com/abhishekkrthakur/bert-sentiment
Commit: 4283d293253ea4a3c868bcae0ae210b4033d2e1b
Files: train.py, engine.py, model.py, dataset.py, config.py
License: MIT (Copyright (c) 2020 abhishek thakur)
Domain: text classification (binary sentiment, BERT + BCE-with-logits, linear schedule)

Deviations from the original:
- model: ``BertModel.from_pretrained("bert-base-uncased")`` cannot download here; a ``BertModel`` is built from a
  small ``BertConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64) with random weights, so the head is
  ``Linear(32, 1)`` instead of ``Linear(768, 1)``; the call passes ``return_dict=False`` so that
  ``_, o2 = self.bert(...)`` unpacks the (sequence, pooled) tuple as it did under the transformers of 2020 (the
  ``ModelOutput`` of transformers 5 would unpack its keys); lr 3e-5 -> 1e-3 (training from scratch);
- tokenizer: bert-base-uncased's WordPiece tokenizer is replaced by a word-level ``tokenizers`` tokenizer built in
  memory (whitespace pre-tokenizer, ``[CLS] A [SEP]`` template, token type ids) wrapped in
  ``PreTrainedTokenizerFast``; ``encode_plus(..., pad_to_max_length=True)`` is called as
  ``tokenizer(review, None, add_special_tokens=True, max_length=MAX_LEN, padding="max_length", truncation=True)``
  (``encode_plus`` and ``pad_to_max_length`` are gone from transformers 5); MAX_LEN 64 -> 24;
- data: the IMDB CSV is replaced by 480 synthetic reviews made from ``seed``: 4-12 words from a neutral vocabulary
  with 1-3 words from a positive or a negative list, labelled "positive"/"negative" accordingly; sklearn is not
  installed: ``train_test_split(dfx, test_size=0.1, random_state=42, stratify=...)`` is written out as a stratified
  shuffle split in numpy (the same proportions, not sklearn's indices); pandas frames are replaced by numpy arrays;
- ``transformers.AdamW`` is gone from transformers 5: ``torch.optim.AdamW`` with the same groups and lr; the
  DataLoader keeps batch 8 without shuffling (as written) but no worker processes; one ``train_step`` is one batch
  of ``train_fn`` (``model.train()`` at the start of each epoch as written); ``eval_fn`` is ``eval_fn``'s accuracy
  on one batch; tqdm, the checkpointing and the GPU are left out.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing
from torch import nn
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

SELF_CHECK_STEPS = 80
MAX_LEN = 24
TRAIN_BATCH_SIZE = 8
VALID_BATCH_SIZE = 4
EPOCHS = 10
HIDDEN = 32

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
NEUTRAL = [f"w{i}" for i in range(40)]
POSITIVE = ["great", "love", "wonderful", "superb", "enjoyable", "brilliant"]
NEGATIVE = ["awful", "boring", "terrible", "waste", "dull", "worst"]


def make_tokenizer():
    vocab = {w: i for i, w in enumerate(SPECIALS + NEUTRAL + POSITIVE + NEGATIVE)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def make_reviews(rng, n):
    reviews, sentiments = [], []
    for _ in range(n):
        positive = rng.random() < 0.5
        words = list(rng.choice(NEUTRAL, size=rng.integers(4, 13)))
        for _ in range(rng.integers(1, 4)):
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(POSITIVE if positive else NEGATIVE)))
        reviews.append("  ".join(words))
        sentiments.append("positive" if positive else "negative")
    return np.array(reviews, dtype=object), np.array(sentiments, dtype=object)


def stratified_split(labels, test_size, random_state):
    rng = np.random.default_rng(random_state)
    train_idx, valid_idx = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_valid = round(len(idx) * test_size)
        valid_idx += list(idx[:n_valid])
        train_idx += list(idx[n_valid:])
    return rng.permutation(train_idx), rng.permutation(valid_idx)


# ---- dataset.py ----------------------------------------------------------------------------------------------------

class BERTDataset:
    def __init__(self, review, target, tokenizer):
        self.review = review
        self.target = target
        self.tokenizer = tokenizer
        self.max_len = MAX_LEN

    def __len__(self):
        return len(self.review)

    def __getitem__(self, item):
        review = str(self.review[item])
        review = " ".join(review.split())

        inputs = self.tokenizer(
            review,
            None,
            add_special_tokens=True,
            max_length=self.max_len,
            padding="max_length",
            truncation=True,
        )

        ids = inputs["input_ids"]
        mask = inputs["attention_mask"]
        token_type_ids = inputs["token_type_ids"]

        return {
            "ids": torch.tensor(ids, dtype=torch.long),
            "mask": torch.tensor(mask, dtype=torch.long),
            "token_type_ids": torch.tensor(token_type_ids, dtype=torch.long),
            "targets": torch.tensor(self.target[item], dtype=torch.float),
        }


# ---- model.py ------------------------------------------------------------------------------------------------------

class BERTBaseUncased(nn.Module):
    def __init__(self, vocab_size, bug=None):
        super().__init__()
        self.bug = bug
        self.bert = BertModel(BertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
        self.bert_drop = nn.Dropout(0.3)
        self.out = nn.Linear(HIDDEN, 1)

    def forward(self, ids, mask, token_type_ids):
        if self.bug == "bert_under_no_grad":
            # the encoder run under no_grad "to save memory": only the head ever learns
            with torch.no_grad():
                _, o2 = self.bert(ids, attention_mask=mask, token_type_ids=token_type_ids, return_dict=False)
        else:
            _, o2 = self.bert(ids, attention_mask=mask, token_type_ids=token_type_ids, return_dict=False)
        bo = self.bert_drop(o2)
        output = self.out(bo)
        return output


# ---- engine.py -----------------------------------------------------------------------------------------------------

def loss_fn(outputs, targets):
    return nn.BCEWithLogitsLoss()(outputs, targets.view(-1, 1))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    review, sentiment = make_reviews(rng, 480)
    sentiment = np.array([1 if x == "positive" else 0 for x in sentiment])

    train_idx, valid_idx = stratified_split(sentiment, test_size=0.1, random_state=42)
    tokenizer = make_tokenizer()

    if bug == "targets_from_unsplit_frame":
        # target=dfx.sentiment.values: the reviews come from the split frame, the labels from the whole one
        train_dataset = BERTDataset(review=review[train_idx], target=sentiment, tokenizer=tokenizer)
    else:
        train_dataset = BERTDataset(review=review[train_idx], target=sentiment[train_idx], tokenizer=tokenizer)
    train_data_loader = torch.utils.data.DataLoader(train_dataset, batch_size=TRAIN_BATCH_SIZE)
    valid_dataset = BERTDataset(review=review[valid_idx], target=sentiment[valid_idx], tokenizer=tokenizer)
    valid_data_loader = torch.utils.data.DataLoader(valid_dataset, batch_size=VALID_BATCH_SIZE)  # noqa: F841

    model = BERTBaseUncased(tokenizer.vocab_size, bug=bug)

    param_optimizer = list(model.named_parameters())
    no_decay = ["bias", "LayerNorm.bias", "LayerNorm.weight"]
    optimizer_parameters = [
        {
            "params": [
                p for n, p in param_optimizer if not any(nd in n for nd in no_decay)
            ],
            "weight_decay": 0.001,
        },
        {
            "params": [
                p for n, p in param_optimizer if any(nd in n for nd in no_decay)
            ],
            "weight_decay": 0.0,
        },
    ]

    num_train_steps = int(len(train_idx) / TRAIN_BATCH_SIZE * EPOCHS)
    optimizer = torch.optim.AdamW(optimizer_parameters, lr=1e-3)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, num_warmup_steps=0, num_training_steps=num_train_steps
    )

    state = {"it": None}

    def train_step():
        try:
            d = next(state["it"])
        except (StopIteration, TypeError):  # for epoch in range(EPOCHS): engine.train_fn(...)
            model.train()
            state["it"] = iter(train_data_loader)
            d = next(state["it"])
        ids = d["ids"]
        token_type_ids = d["token_type_ids"]
        mask = d["mask"]
        targets = d["targets"]

        ids = ids.to(dtype=torch.long)
        token_type_ids = token_type_ids.to(dtype=torch.long)
        mask = mask.to(dtype=torch.long)
        targets = targets.to(dtype=torch.float)

        optimizer.zero_grad()
        outputs = model(ids=ids, mask=mask, token_type_ids=token_type_ids)

        if bug == "sigmoid_before_bce_with_logits":
            outputs = torch.sigmoid(outputs)
        loss = loss_fn(outputs, targets)
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss.detach()

    def eval_fn(model, d):
        model.eval()
        with torch.no_grad():
            outputs = model(ids=d["ids"], mask=d["mask"], token_type_ids=d["token_type_ids"])
            outputs = torch.sigmoid(outputs).view(-1) >= 0.5
        model.train()
        return float((outputs.float() == d["targets"]).float().mean())

    first = next(iter(train_data_loader))
    return Program(name="bertsentiment_imdb", model=model, batch=first,
                   loss_fn=lambda out, d: loss_fn(out, d["targets"]), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # classic: the dataset built with target=dfx.sentiment.values (the unsplit frame) next to df_train's reviews:
    # after the stratified split the labels no longer belong to the reviews they are paired with.
    Bug("targets_from_unsplit_frame", functools.partial(_build, bug="targets_from_unsplit_frame"), "learning_ledger",
        ("TASK",)),
    # classic: the BERT forward wrapped in torch.no_grad() (a memory saving copied from the evaluation code): no
    # gradient reaches the encoder, only the linear head trains.
    Bug("bert_under_no_grad", functools.partial(_build, bug="bert_under_no_grad"), "reachability", ("bert",)),
    # classic: torch.sigmoid applied to the outputs before BCEWithLogitsLoss, which applies its own sigmoid.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
]
