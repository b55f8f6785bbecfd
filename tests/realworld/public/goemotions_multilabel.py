# ruff: noqa: UP004, UP031, RUF059, PLR0402
"""GoEmotions-pytorch: multi-label emotion classification of short texts with BERT (``run_goemotions.py
--taxonomy ekman``). ``BertForMultiLabelClassification`` (BertModel, the pooled [CLS] output, dropout, a linear
classifier, ``BCEWithLogitsLoss`` on multi-hot labels); the examples are tokenized to ``max_seq_len`` with the
labels made one-hot by ``convert_to_one_hot_label``; ``train`` runs a RandomSampler DataLoader, AdamW with
no-decay groups, ``get_linear_schedule_with_warmup`` (10% warmup), ``clip_grad_norm_`` 1.0, gradient accumulation,
``model.zero_grad()`` after each step; ``evaluate`` applies a sigmoid and the 0.3 threshold.

Source: https://github.com/monologg/GoEmotions-pytorch
Commit: b75f9d3a8b76bc1060687925b04ca98a1b8ea66b
Files: ``run_goemotions.py`` (``train``, ``evaluate``, ``main``), ``model.py`` (``BertForMultiLabelClassification``),
``data_loader.py`` (``InputExample``, ``InputFeatures``, ``convert_examples_to_features``,
``GoEmotionsProcessor``, ``load_and_cache_examples``), ``utils.py`` (``set_seed``), ``config/ekman.json``
License: Apache-2.0 (full text in LICENSES/monologg-GoEmotions-pytorch.txt)
Domain: text classifier (multi-label, BERT fine-tuning loop written by hand)

Kept as written: ``BertForMultiLabelClassification``; the one-hot labels, the tokenization to ``max_seq_len`` with
padding to the maximum length, the ``TensorDataset`` of ids, mask, token types and float labels; ``train``'s
optimizer groups (``bias`` and ``LayerNorm.weight`` without decay), ``t_total`` and the warmup schedule, the loop
body (``model.train()``, forward with the four inputs, loss divided by the accumulation steps, backward, clip,
``optimizer.step()``, ``scheduler.step()``, ``model.zero_grad()``); ``evaluate``'s sigmoid, threshold and micro F1;
``config/ekman.json``'s values (7 labels, threshold 0.3, warmup 0.1, clip 1.0, batch 16, 10 epochs, eps 1e-8,
weight decay 0.0, gradient accumulation 1).

Deviations from the original:
- the pretrained ``bert-base-cased`` and the GoEmotions files are not here: the model is
  ``BertForMultiLabelClassification(config)`` from a small ``BertConfig`` (hidden 64, 2 layers, 2 heads,
  intermediate 128, 64 positions; about 80k parameters), so the learning rate is 5e-5 -> 1e-3 (a model from
  scratch); the tokenizer is a ``BertTokenizer`` over a vocabulary file written at build (the special tokens and
  the synthetic words);
- data: synthetic texts made from ``seed``: 6-11 words drawn from 40 filler words, with the 3 cue words of each of
  the example's 1-2 emotions (one of the 7 Ekman labels) inserted at random places; 512 training and 128 dev
  examples; max_seq_len 50 -> 16;
- ``transformers.AdamW`` (removed from transformers) is ``torch.optim.AdamW`` with the same groups, lr and eps;
  ``batch_encode_plus(..., pad_to_max_length=True)`` (removed) is ``tokenizer(..., padding="max_length",
  truncation=True)``; ``self.init_weights()`` is ``self.post_init()`` (transformers v5 needs it to set up the
  model); ``AttrDict`` is ``types.SimpleNamespace``; the feature cache, the logging and the
  checkpoint saving are dropped; ``compute_metrics`` keeps only the micro F1 (written in numpy, no sklearn);
- ``train``'s loops are unrolled: one ``train_step`` is one batch of the inner loop (a new RandomSampler epoch when
  the loader is exhausted) and returns ``loss.item()``; ``eval_fn`` is ``evaluate`` on the dev set, returning the
  micro F1;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import os
import pathlib
import random
import sys
import tempfile
import types

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset
from transformers import BertConfig, BertModel, BertPreTrainedModel, BertTokenizer, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

EKMAN = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]  # data/ekman/labels.txt
CONFIG = {  # config/ekman.json (sizes and lr as in the docstring)
    "task": "goemotions", "max_seq_len": 16, "num_train_epochs": 10, "weight_decay": 0.0,
    "gradient_accumulation_steps": 1, "adam_epsilon": 1e-8, "warmup_proportion": 0.1, "max_steps": -1,
    "max_grad_norm": 1.0, "no_cuda": True, "seed": 42, "train_batch_size": 16, "eval_batch_size": 32,
    "learning_rate": 1e-3, "threshold": 0.3,
}


# model.py
class BertForMultiLabelClassification(BertPreTrainedModel):
    def __init__(self, config, bug=None):
        super().__init__(config)
        self.num_labels = config.num_labels

        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, self.config.num_labels)
        self.loss_fct = nn.BCEWithLogitsLoss()
        if bug == "cross_entropy_on_multi_hot":
            self.loss_fct = nn.CrossEntropyLoss()

        self.post_init()  # (port) init_weights() before transformers v5

    def forward(
            self,
            input_ids=None,
            attention_mask=None,
            token_type_ids=None,
            position_ids=None,
            head_mask=None,
            inputs_embeds=None,
            labels=None,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            head_mask=head_mask,
            inputs_embeds=inputs_embeds,
        )
        pooled_output = outputs[1]

        pooled_output = self.dropout(pooled_output)
        logits = self.classifier(pooled_output)

        outputs = (logits,) + outputs[2:]  # add hidden states and attention if they are here

        if labels is not None:
            loss = self.loss_fct(logits, labels)
            outputs = (loss,) + outputs

        return outputs  # (loss), logits, (hidden_states), (attentions)


# data_loader.py (the .tsv reads replaced by synthetic examples)
class InputExample(object):
    """ A single training/test example for simple sequence classification. """

    def __init__(self, guid, text_a, text_b, label):
        self.guid = guid
        self.text_a = text_a
        self.text_b = text_b
        self.label = label


class InputFeatures(object):
    """A single set of features of data."""

    def __init__(self, input_ids, attention_mask, token_type_ids, label):
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.token_type_ids = token_type_ids
        self.label = label


def convert_examples_to_features(args, examples, tokenizer, max_length, bug=None):
    label_list_len = len(EKMAN)  # GoEmotionsProcessor(args).get_labels()

    def convert_to_one_hot_label(label):
        one_hot_label = [0] * label_list_len
        for l in label:
            one_hot_label[l] = 1
        return one_hot_label

    labels = [convert_to_one_hot_label(example.label) for example in examples]
    if bug == "labels_misaligned":
        labels = labels[1:] + labels[:1]

    batch_encoding = tokenizer(
        [example.text_a for example in examples], max_length=max_length, padding="max_length", truncation=True
    )

    features = []
    for i in range(len(examples)):
        inputs = {k: batch_encoding[k][i] for k in batch_encoding}

        feature = InputFeatures(**inputs, label=labels[i])
        features.append(feature)
    return features


def make_examples(rng, n, set_type, fillers, cues):
    """(port) 6-11 filler words with the 3 cue words of each of the example's 1-2 emotions inserted."""
    examples = []
    for i in range(n):
        label = sorted(rng.sample(range(len(EKMAN)), rng.choice([1, 1, 2])))
        words = [rng.choice(fillers) for _ in range(rng.randint(6, 11))]
        for l in label:
            for w in cues[l]:
                words.insert(rng.randint(0, len(words)), w)
        examples.append(InputExample(guid="%s-%s" % (set_type, i), text_a=" ".join(words), text_b=None,
                                     label=label))
    return examples


def load_and_cache_examples(args, tokenizer, examples, bug=None):
    features = convert_examples_to_features(args, examples, tokenizer, max_length=args.max_seq_len, bug=bug)

    # Convert to Tensors and build dataset
    all_input_ids = torch.tensor([f.input_ids for f in features], dtype=torch.long)
    all_attention_mask = torch.tensor([f.attention_mask for f in features], dtype=torch.long)
    all_token_type_ids = torch.tensor([f.token_type_ids for f in features], dtype=torch.long)
    all_labels = torch.tensor([f.label for f in features], dtype=torch.float)

    dataset = TensorDataset(all_input_ids, all_attention_mask, all_token_type_ids, all_labels)
    return dataset


def evaluate(args, model, eval_dataset):
    eval_sampler = SequentialSampler(eval_dataset)
    eval_dataloader = DataLoader(eval_dataset, sampler=eval_sampler, batch_size=args.eval_batch_size)
    preds = None
    out_label_ids = None

    for batch in eval_dataloader:
        model.eval()
        batch = tuple(t.to(args.device) for t in batch)

        with torch.no_grad():
            inputs = {
                "input_ids": batch[0],
                "attention_mask": batch[1],
                "token_type_ids": batch[2],
                "labels": batch[3]
            }
            outputs = model(**inputs)
            tmp_eval_loss, logits = outputs[:2]
        if preds is None:
            preds = 1 / (1 + np.exp(-logits.detach().cpu().numpy()))  # Sigmoid
            out_label_ids = inputs["labels"].detach().cpu().numpy()
        else:
            preds = np.append(preds, 1 / (1 + np.exp(-logits.detach().cpu().numpy())), axis=0)  # Sigmoid
            out_label_ids = np.append(out_label_ids, inputs["labels"].detach().cpu().numpy(), axis=0)

    preds[preds > args.threshold] = 1
    preds[preds <= args.threshold] = 0
    tp = float((preds * out_label_ids).sum())  # (port) compute_metrics' micro F1 without sklearn
    return 2 * tp / max(float(preds.sum() + out_label_ids.sum()), 1.0)


def _tokenizer(rng):
    """(port) A BertTokenizer over the synthetic words (written to a temporary vocab file)."""
    words = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5)) for _ in range(61)})[:61]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    path = os.path.join(tempfile.mkdtemp(prefix="goemotions_"), "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    tokenizer = BertTokenizer(path, do_lower_case=False)
    return tokenizer, words[:40], [words[40 + 3 * k: 43 + 3 * k] for k in range(len(EKMAN))]


def _build(seed, bug=None):
    args = types.SimpleNamespace(**CONFIG)
    args.seed = seed
    random.seed(args.seed)  # set_seed(args)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(seed)
    tokenizer, fillers, cues = _tokenizer(rng)
    label_list = EKMAN
    config = BertConfig(
        vocab_size=len(tokenizer.vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
        num_labels=len(label_list),
        finetuning_task=args.task,
        id2label={str(i): label for i, label in enumerate(label_list)},
        label2id={label: i for i, label in enumerate(label_list)}
    )
    model = BertForMultiLabelClassification(config, bug=bug)
    args.device = "cpu"
    train_dataset = load_and_cache_examples(args, tokenizer, make_examples(rng, 512, "train", fillers, cues), bug)
    dev_dataset = load_and_cache_examples(args, tokenizer, make_examples(rng, 128, "dev", fillers, cues))
    optimizer, train_step = _train(args, model, train_dataset, bug)
    b = train_dataset[:args.train_batch_size]
    batch = ({"input_ids": b[0], "attention_mask": b[1], "token_type_ids": b[2]}, b[3])
    return Program(name="goemotions_multilabel", model=model, batch=batch,
                   loss_fn=lambda outputs, labels: model.loss_fct(outputs[0], labels), optimizer=optimizer,
                   train_step=train_step, eval_fn=lambda m, _batch=None: evaluate(args, m, dev_dataset))


def _train(args, model, train_dataset, bug):
    train_sampler = RandomSampler(train_dataset)
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=args.train_batch_size)
    t_total = len(train_dataloader) // args.gradient_accumulation_steps * args.num_train_epochs

    # Prepare optimizer and schedule (linear warmup and decay)
    no_decay = ['bias', 'LayerNorm.weight']
    optimizer_grouped_parameters = [
        {'params': [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         'weight_decay': args.weight_decay},
        {'params': [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=int(t_total * args.warmup_proportion),
        num_training_steps=t_total
    )
    st = {"it": iter(enumerate(train_dataloader)), "global_step": 0}
    model.zero_grad()

    def train_step():
        try:
            step, batch = next(st["it"])
        except StopIteration:  # the next epoch
            st["it"] = iter(enumerate(train_dataloader))
            step, batch = next(st["it"])
        model.train()
        batch = tuple(t.to(args.device) for t in batch)
        inputs = {
            "input_ids": batch[0],
            "attention_mask": batch[1],
            "token_type_ids": batch[2],
            "labels": batch[3]
        }
        outputs = model(**inputs)

        loss = outputs[0]

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps

        loss.backward()
        if (step + 1) % args.gradient_accumulation_steps == 0 or (
                len(train_dataloader) <= args.gradient_accumulation_steps
                and (step + 1) == len(train_dataloader)
        ):
            if bug != "clip_after_step":
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

            optimizer.step()
            if bug == "clip_after_step":
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            scheduler.step()
            model.zero_grad()
            st["global_step"] += 1
        return loss.item()

    return optimizer, train_step


build = functools.partial(_build, bug=None)

BUGS = [
    # the single-label loss on multi-hot labels: CrossEntropyLoss (softmax over the 7 emotions) where the head
    # needs one sigmoid per label, so two emotions of one text compete for the same probability mass (classic).
    Bug("cross_entropy_on_multi_hot", functools.partial(_build, bug="cross_entropy_on_multi_hot"),
        "learning_ledger", ("OBJECTIVE",)),
    # the one-hot labels shifted by one example against the tokenized texts in convert_examples_to_features
    # (classic labels/inputs misalignment).
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # clip_grad_norm_ moved after optimizer.step(): the clipping never bounds the update (classic).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
