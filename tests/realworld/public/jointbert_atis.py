# ruff: noqa: PLR0402, UP008
"""Joint intent classification and slot filling with BERT (JointBERT), from monologg/JointBERT.

Source: https://github.com/monologg/JointBERT
Commit: 00324f60dda4a491b2913bc3065ae93966caea3f
Files: ``model/modeling_jointbert.py``, ``model/module.py``, ``trainer.py`` (``Trainer.train``), ``main.py``
(argument defaults), ``data_loader.py`` (``convert_examples_to_features``).
License: Apache-2.0 (full text in LICENSES/monologg-JointBERT.txt).
Domain: NLU, text classification + token classification (NER-style slot filling), BERT.

Kept as written: ``JointBERT`` (``BertModel``, ``IntentClassifier`` on the pooled [CLS] output,
``SlotClassifier`` on the sequence output, intent cross-entropy + ``slot_loss_coef`` * slot cross-entropy with
``ignore_index`` over the positions the attention mask keeps), ``IntentClassifier`` / ``SlotClassifier``
(dropout + linear), the defaults of ``main.py`` (dropout_rate 0.1, weight_decay 0.0, adam_epsilon 1e-8,
max_grad_norm 1.0, warmup_steps 0, gradient_accumulation_steps 1, ignore_index 0 = the "PAD" slot label,
slot_loss_coef 1.0, use_crf off), the optimizer (AdamW with the bias/LayerNorm no-decay groups) and the linear
schedule, and the loop body of ``Trainer.train`` (model.train(), forward with the five inputs, loss / accumulation,
backward, clip_grad_norm_, optimizer.step, scheduler.step, model.zero_grad).

Deviations from the original:
- ``BertModel`` comes from ``BertConfig`` with tiny sizes (hidden 32, 2 layers, 2 heads, intermediate 64) instead
  of ``from_pretrained("bert-base-uncased")``; ``post_init()`` is called at the end of ``JointBERT.__init__`` (what
  ``from_pretrained`` does for new heads in the transformers installed here); the import path is
  ``transformers.models.bert.modeling_bert`` (the old ``transformers.modeling_bert`` is gone).
- ATIS is replaced by synthetic utterances made from ``seed``: words are drawn from a small vocabulary and each
  word is one token (no WordPiece tokenizer: every word's label sits on its only token, as the first-sub-token rule
  gives); the intent is the class of the utterance's first word and each word's slot label a fixed function of the
  word. Features are laid out exactly as ``convert_examples_to_features`` does ([CLS] words [SEP], PAD label 0 on
  [CLS]/[SEP]/padding, attention mask 1 on real tokens, zero padding to max_seq_len 16).
- ``torch.optim.AdamW`` replaces ``transformers.AdamW`` (removed from transformers); learning rate 1e-3 instead of
  5e-5 (a model from scratch, in 30 steps), train_batch_size 16, t_total 300 steps.
- The CRF branch (``use_crf``, torchcrf not installed) and evaluation/saving/logging are left out;
  ``train_step`` is one iteration of the inner loop, the loader cycled.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from transformers import BertConfig, get_linear_schedule_with_warmup
from transformers.models.bert.modeling_bert import BertModel, BertPreTrainedModel

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_WORDS = 40
N_INTENTS = 5
SLOT_LABELS = ["PAD", "UNK", "O", "B-a", "I-a", "B-b", "I-b"]
MAX_SEQ_LEN = 16
N_TRAIN = 256
# the word ids start after the special tokens
PAD_ID, UNK_ID, CLS_ID, SEP_ID = 0, 1, 2, 3
FIRST_WORD = 4


class IntentClassifier(nn.Module):
    def __init__(self, input_dim, num_intent_labels, dropout_rate=0.):
        super(IntentClassifier, self).__init__()
        self.dropout = nn.Dropout(dropout_rate)
        self.linear = nn.Linear(input_dim, num_intent_labels)

    def forward(self, x):
        x = self.dropout(x)
        return self.linear(x)


class SlotClassifier(nn.Module):
    def __init__(self, input_dim, num_slot_labels, dropout_rate=0.):
        super(SlotClassifier, self).__init__()
        self.dropout = nn.Dropout(dropout_rate)
        self.linear = nn.Linear(input_dim, num_slot_labels)

    def forward(self, x):
        x = self.dropout(x)
        return self.linear(x)


class JointBERT(BertPreTrainedModel):
    def __init__(self, config, args, intent_label_lst, slot_label_lst):
        super(JointBERT, self).__init__(config)
        self.args = args
        self.num_intent_labels = len(intent_label_lst)
        self.num_slot_labels = len(slot_label_lst)
        self.bert = BertModel(config=config)  # Load pretrained bert

        self.intent_classifier = IntentClassifier(config.hidden_size, self.num_intent_labels, args.dropout_rate)
        self.slot_classifier = SlotClassifier(config.hidden_size, self.num_slot_labels, args.dropout_rate)
        self.post_init()

    def forward(self, input_ids, attention_mask, token_type_ids, intent_label_ids, slot_labels_ids):
        outputs = self.bert(input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids)  # sequence_output, pooled_output, (hidden_states), (attentions)
        sequence_output = outputs[0]
        pooled_output = outputs[1]  # [CLS]

        intent_logits = self.intent_classifier(pooled_output)
        slot_logits = self.slot_classifier(sequence_output)

        total_loss = 0
        # 1. Intent Softmax
        if intent_label_ids is not None:
            if self.num_intent_labels == 1:
                intent_loss_fct = nn.MSELoss()
                intent_loss = intent_loss_fct(intent_logits.view(-1), intent_label_ids.view(-1))
            else:
                intent_loss_fct = nn.CrossEntropyLoss()
                intent_loss = intent_loss_fct(intent_logits.view(-1, self.num_intent_labels), intent_label_ids.view(-1))
            total_loss += intent_loss

        # 2. Slot Softmax
        if slot_labels_ids is not None:
            if self.args.bug == "pad_labels_not_ignored":
                # the slot loss over every position, padding and [CLS]/[SEP] included
                slot_loss_fct = nn.CrossEntropyLoss()
                slot_loss = slot_loss_fct(slot_logits.view(-1, self.num_slot_labels), slot_labels_ids.view(-1))
            else:
                slot_loss_fct = nn.CrossEntropyLoss(ignore_index=self.args.ignore_index)
                # Only keep active parts of the loss
                if attention_mask is not None:
                    active_loss = attention_mask.view(-1) == 1
                    active_logits = slot_logits.view(-1, self.num_slot_labels)[active_loss]
                    active_labels = slot_labels_ids.view(-1)[active_loss]
                    slot_loss = slot_loss_fct(active_logits, active_labels)
                else:
                    slot_loss = slot_loss_fct(slot_logits.view(-1, self.num_slot_labels), slot_labels_ids.view(-1))
            total_loss += self.args.slot_loss_coef * slot_loss

        outputs = ((intent_logits, slot_logits),) + tuple(outputs[2:])  # add hidden states and attention if they are here

        outputs = (total_loss,) + outputs

        return outputs  # (loss), logits, (hidden_states), (attentions) # Logits is a tuple of intent and slot logits


def _slot_of(word):
    """The synthetic labelling rule: a word's slot label (never PAD)."""
    return 1 + (word * 7) % (len(SLOT_LABELS) - 1)


def make_dataset(seed, n=N_TRAIN):
    """Utterances laid out as ``convert_examples_to_features`` lays them out (one token per word)."""
    g = torch.Generator().manual_seed(seed)
    pad_token_label_id = 0
    rows = {"input_ids": [], "attention_mask": [], "token_type_ids": [], "intent": [], "slots": []}
    for _ in range(n):
        length = int(torch.randint(3, MAX_SEQ_LEN - 2 + 1, (1,), generator=g))
        words = (torch.randint(0, N_WORDS, (length,), generator=g) + FIRST_WORD).tolist()
        slot_labels_ids = [_slot_of(w) for w in words]
        tokens = [CLS_ID] + words + [SEP_ID]
        slot_labels_ids = [pad_token_label_id] + slot_labels_ids + [pad_token_label_id]
        attention_mask = [1] * len(tokens)
        padding_length = MAX_SEQ_LEN - len(tokens)
        rows["input_ids"].append(tokens + [PAD_ID] * padding_length)
        rows["attention_mask"].append(attention_mask + [0] * padding_length)
        rows["token_type_ids"].append([0] * MAX_SEQ_LEN)
        rows["slots"].append(slot_labels_ids + [pad_token_label_id] * padding_length)
        rows["intent"].append((words[0] - FIRST_WORD) % N_INTENTS)
    return TensorDataset(torch.tensor(rows["input_ids"]), torch.tensor(rows["attention_mask"]),
                         torch.tensor(rows["token_type_ids"]), torch.tensor(rows["intent"]),
                         torch.tensor(rows["slots"]))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(
        train_batch_size=16, learning_rate=1e-3, weight_decay=0.0, gradient_accumulation_steps=1,
        adam_epsilon=1e-8, max_grad_norm=1.0, max_steps=300, warmup_steps=0, dropout_rate=0.1, ignore_index=0,
        slot_loss_coef=1.0, use_crf=False, model_type="bert", bug=bug)
    intent_label_lst = [f"intent{i}" for i in range(N_INTENTS)]
    config = BertConfig(vocab_size=FIRST_WORD + N_WORDS, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=MAX_SEQ_LEN, pad_token_id=PAD_ID)
    model = JointBERT(config, args, intent_label_lst, SLOT_LABELS)
    train_dataset = make_dataset(seed)

    train_sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(seed))
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=args.train_batch_size)
    t_total = args.max_steps

    # Prepare optimizer and schedule (linear warmup and decay)
    no_decay = ['bias', 'LayerNorm.weight']
    optimizer_grouped_parameters = [
        {'params': [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         'weight_decay': args.weight_decay},
        {'params': [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=t_total)

    model.zero_grad()
    state = {"it": iter(train_dataloader), "step": 0}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"], state["step"] = iter(train_dataloader), 0
            return next(state["it"])

    def to_inputs(batch):
        inputs = {'input_ids': batch[0],
                  'attention_mask': batch[1],
                  'intent_label_ids': batch[3],
                  'slot_labels_ids': batch[4]}
        if args.model_type != 'distilbert':
            inputs['token_type_ids'] = batch[2]
        return inputs

    def train_step():
        batch = next_batch()
        step = state["step"]
        state["step"] += 1
        model.train()
        batch = tuple(t for t in batch)  # GPU or CPU

        outputs = model(**to_inputs(batch))
        loss = outputs[0]

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps

        loss.backward()

        if (step + 1) % args.gradient_accumulation_steps == 0:
            if bug != "clip_after_step":
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

            optimizer.step()
            if bug == "clip_after_step":
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            scheduler.step()  # Update learning rate schedule
            model.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            outputs = model(**to_inputs(batch))
        intent_logits, _slot_logits = outputs[1]
        intent_acc = (intent_logits.argmax(-1) == batch[3]).float().mean()
        return float(intent_acc)

    first = next(iter(DataLoader(train_dataset, batch_size=args.train_batch_size)))
    return Program(name="jointbert_atis", model=model, batch=first, loss_fn=lambda outputs, _t: outputs[0],
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the slot cross-entropy over every position with no ignore_index and no attention-mask selection (classic:
    # padding not ignored): [CLS]/[SEP] and the zero padding count as "PAD" labels in the slot objective.
    Bug("pad_labels_not_ignored", functools.partial(_build, bug="pad_labels_not_ignored"), "learning_ledger",
        ("OBJECTIVE",)),
    # clip_grad_norm_ moved after optimizer.step (classic): the update is never clipped, the clip only rescales the
    # gradient that zero_grad then erases; a slip of the whole model's step.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
