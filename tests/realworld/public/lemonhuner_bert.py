"""lemonhu's ``NER-BERT-pytorch``: BERT fine-tuned for Chinese named-entity recognition (MSRA, BIO tags) with
``pytorch_pretrained_bert``'s ``BertForTokenClassification`` (BERT, dropout, a linear tagger; cross-entropy over the
positions the attention mask keeps), the repository's own batch iterator (sentences padded with 0, tags padded with
``'O'``, the mask ``batch_data.gt(0)``), full fine-tuning with Adam, ``model.zero_grad()`` before the backward,
gradient clipping at ``clip_grad`` and a ``LambdaLR`` of ``1 / (1 + 0.05 * epoch)`` stepped at the start of every
epoch.

Source: https://github.com/lemonhu/NER-BERT-pytorch
Commit: 5f7577b78020dc5867cc3a4dbb7a2db44bae1fc8
Files: train.py, data_loader.py, evaluate.py, experiments/base_model/params.json, data/msra/tags.txt
License: MIT (Copyright (c) 2019)
Domain: named-entity recognition (BERT token classification)

Deviations from the original:
- ``pytorch_pretrained_bert`` is not installed and no checkpoint can be downloaded: its ``BertForTokenClassification``
  (forward and loss) is written out over ``transformers``' ``BertModel`` (no pooler) built from a tiny ``BertConfig``
  (hidden 32, 2 layers, 2 heads, intermediate 64, vocab 100) with random weights; the tagger is initialized as
  ``init_bert_weights`` does (normal 0.02, zero bias);
- data: the MSRA files and the BERT tokenizer are replaced by 480 training and 64 validation synthetic sentences
  made from ``seed`` (token ids; entity spans of 1-3 tokens drawn from per-type id ranges, tagged B-/I- with the
  repository's seven tags, everything else 'O'); ``DataLoader.data_iterator`` is unchanged;
- sizes and rates: max_len 180 -> 32, batch_size 30 -> 16, learning_rate 3e-5 -> 1e-3 (random weights, a short run);
- one ``train_step`` is one iteration of ``train()``'s loop; the epoch loop's ``model.train()``,
  ``scheduler.step()`` and new shuffled iterator run when an epoch's ``train_steps`` are used up; tqdm, logging,
  checkpoints, early stopping, fp16 and multi-GPU are left out; the optimizer groups keep the script's
  ``'weight_decay_rate'`` key (which ``torch.optim.Adam`` does not read, as written);
- ``eval_fn`` is ``evaluate()`` on one batch, returning the token accuracy (``metrics.py``'s entity F1 is not copied).
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from torch.optim import Adam
from torch.optim.lr_scheduler import LambdaLR
from transformers import BertConfig, BertModel

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

TAGS = ["O", "B-ORG", "I-PER", "B-PER", "I-LOC", "I-ORG", "B-LOC"]
VOCAB, TRAIN_SIZE, VAL_SIZE = 100, 480, 64
ENTITY_IDS = {"PER": (10, 30), "ORG": (30, 50), "LOC": (50, 70)}


class Params:
    full_finetuning = True
    max_len = 32
    learning_rate = 1e-3
    weight_decay = 0.01
    clip_grad = 2
    batch_size = 16
    epoch_num = 20
    seed = 2019
    device = "cpu"


# ---- pytorch_pretrained_bert (0.6.x) BertForTokenClassification ------------------------------------------------

class BertForTokenClassification(nn.Module):
    def __init__(self, config, num_labels, bug=None):
        super().__init__()
        self.num_labels = num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.classifier.weight.data.normal_(mean=0.0, std=config.initializer_range)
        self.classifier.bias.data.zero_()
        self.bug = bug

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        sequence_output = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        sequence_output = self.dropout(sequence_output)
        logits = self.classifier(sequence_output)

        if labels is not None:
            loss_fct = CrossEntropyLoss()
            # Only keep active parts of the loss
            if attention_mask is not None and self.bug != "padding_in_loss":
                active_loss = attention_mask.view(-1) == 1
                active_logits = logits.view(-1, self.num_labels)[active_loss]
                active_labels = labels.view(-1)[active_loss]
                loss = loss_fct(active_logits, active_labels)
            else:
                # transformers' BertForTokenClassification (since it stopped masking by attention_mask): every
                # position, the padding tagged 'O' included
                loss = loss_fct(logits.view(-1, self.num_labels), labels.view(-1))
            return loss
        else:
            return logits


# ---- data_loader.py ------------------------------------------------------------------------------------------------

class DataLoader:
    def __init__(self, params, token_pad_idx=0, bug=None):
        self.batch_size = params.batch_size
        self.max_len = params.max_len
        self.device = params.device
        self.seed = params.seed
        self.token_pad_idx = 0

        tags = TAGS
        self.tag2idx = {tag: idx for idx, tag in enumerate(tags)}
        self.idx2tag = {idx: tag for idx, tag in enumerate(tags)}
        params.tag2idx = self.tag2idx
        params.idx2tag = self.idx2tag
        self.tag_pad_idx = self.tag2idx['O']
        self.bug = bug

    def load_data(self, size, gen):
        """Synthetic sentences and tags in place of the MSRA files (stored in the same dict)."""
        sentences, tags = [], []
        for _ in range(size):
            sent, tag = [], []
            while len(sent) < int(torch.randint(8, 28, (1,), generator=gen)):
                if torch.rand(1, generator=gen) < 0.3:
                    kind = ["PER", "ORG", "LOC"][int(torch.randint(0, 3, (1,), generator=gen))]
                    n = int(torch.randint(1, 4, (1,), generator=gen))
                    sent += torch.randint(*ENTITY_IDS[kind], (n,), generator=gen).tolist()
                    tag += [self.tag2idx["B-" + kind]] + [self.tag2idx["I-" + kind]] * (n - 1)
                else:
                    sent.append(int(torch.randint(70, VOCAB, (1,), generator=gen)))
                    tag.append(self.tag2idx["O"])
            if self.bug == "tags_shifted_by_one":
                tag = [self.tag2idx["O"]] + tag[:-1]  # as if the tags were written for a [CLS]-prefixed sentence
            sentences.append(sent)
            tags.append(tag)
        return {'data': sentences, 'tags': tags, 'size': len(sentences)}

    def data_iterator(self, data, shuffle=False):
        """Returns a generator that yields batches data with tags."""

        # make a list that decides the order in which we go over the data- this avoids explicit shuffling of data
        order = list(range(data['size']))
        if shuffle:
            random.seed(self.seed)
            random.shuffle(order)

        # one pass over data
        for i in range(data['size']//self.batch_size):
            # fetch sentences and tags
            sentences = [data['data'][idx] for idx in order[i*self.batch_size:(i+1)*self.batch_size]]
            tags = [data['tags'][idx] for idx in order[i*self.batch_size:(i+1)*self.batch_size]]

            # batch length
            batch_len = len(sentences)

            # compute length of longest sentence in batch
            batch_max_len = max([len(s) for s in sentences])
            max_len = min(batch_max_len, self.max_len)

            # prepare a numpy array with the data, initialising the data with pad_idx
            batch_data = self.token_pad_idx * np.ones((batch_len, max_len))
            batch_tags = self.tag_pad_idx * np.ones((batch_len, max_len))

            # copy the data to the numpy array
            for j in range(batch_len):
                cur_len = len(sentences[j])
                if cur_len <= max_len:
                    batch_data[j][:cur_len] = sentences[j]
                    batch_tags[j][:cur_len] = tags[j]
                else:
                    batch_data[j] = sentences[j][:max_len]
                    batch_tags[j] = tags[j][:max_len]

            # since all data are indices, we convert them to torch LongTensors
            batch_data = torch.tensor(batch_data, dtype=torch.long)
            batch_tags = torch.tensor(batch_tags, dtype=torch.long)

            # shift tensors to GPU if available
            batch_data, batch_tags = batch_data.to(self.device), batch_tags.to(self.device)

            yield batch_data, batch_tags


# ---- train.py --------------------------------------------------------------------------------------------------------

def _optimizer(model, params):
    if params.full_finetuning:
        param_optimizer = list(model.named_parameters())
        no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight']
        optimizer_grouped_parameters = [
            {'params': [p for n, p in param_optimizer if not any(nd in n for nd in no_decay)],
             'weight_decay_rate': 0.01},
            {'params': [p for n, p in param_optimizer if any(nd in n for nd in no_decay)],
             'weight_decay_rate': 0.0}
        ]
    else:
        param_optimizer = list(model.classifier.named_parameters())
        optimizer_grouped_parameters = [{'params': [p for n, p in param_optimizer]}]
    optimizer = Adam(optimizer_grouped_parameters, lr=params.learning_rate)
    scheduler = LambdaLR(optimizer, lr_lambda=lambda epoch: 1/(1 + 0.05*epoch))
    return optimizer, scheduler


def _build(seed, bug=None):
    params = Params()
    params.seed = seed
    random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    data_loader = DataLoader(params, token_pad_idx=0, bug=bug)
    train_data = data_loader.load_data(TRAIN_SIZE, gen)
    val_data = data_loader.load_data(VAL_SIZE, gen)
    params.train_size, params.val_size = train_data['size'], val_data['size']
    params.train_steps = params.train_size // params.batch_size

    model = BertForTokenClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, pad_token_id=0), num_labels=len(params.tag2idx), bug=bug)
    optimizer, scheduler = _optimizer(model, params)
    state = {"i": params.train_steps, "it": None}

    def train_step():
        if state["i"] == params.train_steps:  # a new epoch: train(model, data_iterator, optimizer, scheduler, params)
            state["it"], state["i"] = data_loader.data_iterator(train_data, shuffle=True), 0
            model.train()
            scheduler.step()
        state["i"] += 1
        # fetch the next training batch
        batch_data, batch_tags = next(state["it"])
        batch_masks = batch_data.gt(0)

        # compute model output and loss
        loss = model(batch_data, token_type_ids=None, attention_mask=batch_masks, labels=batch_tags)

        # clear previous gradients, compute gradients of all variables wrt loss
        if bug != "zero_grad_after_backward":
            model.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            model.zero_grad()

        # gradient clipping
        nn.utils.clip_grad_norm_(parameters=model.parameters(), max_norm=params.clip_grad)

        # performs updates using calculated gradients
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        batch_data, batch_tags = batch["input_ids"], batch["labels"]
        batch_masks = batch_data.gt(0)
        batch_output = model(batch_data, token_type_ids=None, attention_mask=batch_masks)
        model.train()
        pred = batch_output.argmax(dim=2)
        return float((pred == batch_tags)[batch_masks].float().mean())

    first_data, first_tags = next(data_loader.data_iterator(train_data, shuffle=False))
    first = {"input_ids": first_data, "attention_mask": first_data.gt(0), "labels": first_tags}
    return Program(name="lemonhuner_bert", model=model, batch=first,
                   loss_fn=lambda loss, labels: loss, optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the loss over every position, the padding tagged 'O' included (what the script computes once moved to
    # transformers' BertForTokenClassification, whose loss no longer reads attention_mask; the move is the open
    # https://github.com/lemonhu/NER-BERT-pytorch/pull/32).
    Bug("padding_in_loss", functools.partial(_build, bug="padding_in_loss"), "learning_ledger", ("OBJECTIVE",)),
    # every tag one position late (the tags written for a [CLS]-prefixed sentence, the sentence fed without it):
    # each token is trained on its left neighbour's tag.
    Bug("tags_shifted_by_one", functools.partial(_build, bug="tags_shifted_by_one"), "learning_ledger", ("TASK",)),
    # model.zero_grad() after loss.backward(): optimizer.step() sees zero gradients (Adam moves nothing).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        (), kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
