# ruff: noqa: UP008, UP031, UP004, UP032, PLR0402
"""R-BERT relation classification (Wu & He, "Enriching Pre-trained Language Model with Entity Information for
Relation Classification"), monologg/R-BERT: a BERT encoder, the [CLS] vector and the averaged hidden states of the
two marked entities each through dropout - tanh - linear (one layer shared by both entities), concatenated into a
linear classifier, cross-entropy; AdamW with no-decay groups, linear warmup schedule, gradient clipping.

Source: https://github.com/monologg/R-BERT
Commit: 254aa5090c94542635b2df46ed16d596facb6556
Files: model.py, trainer.py, data_loader.py, main.py, utils.py
License: Apache-2.0 (full text in LICENSES/monologg-R-BERT.txt)
Domain: text classification, relation classification (SemEval-2010 Task 8 shaped sentences with entity markers)

Kept as written: ``FCLayer`` and ``RBERT`` (``entity_average`` by ``bmm`` of the entity mask, the shared
``entity_fc_layer``, ``CrossEntropyLoss`` inside ``forward``), ``convert_examples_to_features`` (the ``<e1>``
``</e1>`` ``<e2>`` ``</e2>`` markers replaced by ``$`` and ``#``, the +1 for [CLS], the entity masks spanning the
markers, zero padding, no [SEP] by default), ``load_and_cache_examples``' TensorDataset, and ``Trainer.train``'s
loop body (``model.train()``, the inputs dict, ``outputs[0]``, the accumulation division, backward, clip, step,
schedule step, ``model.zero_grad()``); ``Trainer.evaluate``'s loss and accuracy.

Deviations from the original:
- no pretrained weights, no downloads: ``RBERT(config, args)`` on a ``BertConfig`` built here (hidden 48, 2 layers,
  2 heads, intermediate 96) instead of ``from_pretrained("bert-base-uncased")`` (so the three ``FCLayer``s keep
  PyTorch's default initialization, where ``from_pretrained`` would give these new layers BERT's normal(0, 0.02)); the ``BertTokenizer`` is replaced
  by a word-level tokenizer over the synthetic vocabulary (the four marker tokens kept as single tokens, as
  ``add_special_tokens`` makes them);
- data: SemEval's ``train.tsv`` / ``label.txt`` are replaced by synthetic sentences from ``seed``: filler words with
  two marked entity words; the relation (6 labels) is a fixed table of the two entities' word classes;
  ``_read_tsv`` reads a list of ``(label, sentence)`` lines;
- sizes for 2 CPU cores: ``max_seq_len`` 384 -> 20, ``train_batch_size`` 16 kept, ``eval_batch_size`` 32 kept;
  ``learning_rate`` 2e-5 -> 1e-3 (from scratch, 30 steps must show the loss falling), ``max_steps`` 300;
- ``train_step`` is one iteration of ``train``'s inner loop (the next epoch starts when the loader runs out);
  logging, checkpointing and ``write_prediction`` are dropped; ``eval_fn`` is ``evaluate``'s accuracy on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset
from transformers import BertConfig, BertModel, BertPreTrainedModel, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

ADDITIONAL_SPECIAL_TOKENS = ["<e1>", "</e1>", "<e2>", "</e2>"]
MAX_SEQ_LEN = 20
N_CLASSES, PER_CLASS, N_FILLER, N_LABELS = 4, 4, 24, 6


# model.py
class FCLayer(nn.Module):
    def __init__(self, input_dim, output_dim, dropout_rate=0.0, use_activation=True):
        super(FCLayer, self).__init__()
        self.use_activation = use_activation
        self.dropout = nn.Dropout(dropout_rate)
        self.linear = nn.Linear(input_dim, output_dim)
        self.tanh = nn.Tanh()

    def forward(self, x):
        x = self.dropout(x)
        if self.use_activation:
            x = self.tanh(x)
        return self.linear(x)


class RBERT(BertPreTrainedModel):
    def __init__(self, config, args):
        super(RBERT, self).__init__(config)
        self.bert = BertModel(config=config)  # Load pretrained bert

        self.num_labels = config.num_labels

        self.cls_fc_layer = FCLayer(config.hidden_size, config.hidden_size, args.dropout_rate)
        self.entity_fc_layer = FCLayer(config.hidden_size, config.hidden_size, args.dropout_rate)
        self.label_classifier = FCLayer(
            config.hidden_size * 3,
            config.num_labels,
            args.dropout_rate,
            use_activation=False,
        )
        self.bug = args.bug

    @staticmethod
    def entity_average(hidden_output, e_mask):
        """
        Average the entity hidden state vectors (H_i ~ H_j)
        :param hidden_output: [batch_size, j-i+1, dim]
        :param e_mask: [batch_size, max_seq_len]
                e.g. e_mask[0] == [0, 0, 0, 1, 1, 1, 0, 0, ... 0]
        :return: [batch_size, dim]
        """
        e_mask_unsqueeze = e_mask.unsqueeze(1)  # [b, 1, j-i+1]
        length_tensor = (e_mask != 0).sum(dim=1).unsqueeze(1)  # [batch_size, 1]

        # [b, 1, j-i+1] * [b, j-i+1, dim] = [b, 1, dim] -> [b, dim]
        sum_vector = torch.bmm(e_mask_unsqueeze.float(), hidden_output).squeeze(1)
        avg_vector = sum_vector.float() / length_tensor.float()  # broadcasting
        return avg_vector

    def forward(self, input_ids, attention_mask, token_type_ids, labels, e1_mask, e2_mask):
        outputs = self.bert(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )  # sequence_output, pooled_output, (hidden_states), (attentions)
        sequence_output = outputs[0]
        pooled_output = outputs[1]  # [CLS]

        # Average
        e1_h = self.entity_average(sequence_output, e1_mask)
        e2_h = self.entity_average(sequence_output, e2_mask)

        # Dropout -> tanh -> fc_layer (Share FC layer for e1 and e2)
        pooled_output = self.cls_fc_layer(pooled_output)
        e1_h = self.entity_fc_layer(e1_h)
        e2_h = self.entity_fc_layer(e2_h)

        # Concat -> fc_layer
        concat_h = torch.cat([pooled_output, e1_h, e2_h], dim=-1)
        logits = self.label_classifier(concat_h)

        outputs = (logits,) + outputs[2:]  # add hidden states and attention if they are here

        # Softmax
        if labels is not None:
            if self.num_labels == 1:
                loss_fct = nn.MSELoss()
                loss = loss_fct(logits.view(-1), labels.view(-1))
            else:
                loss_fct = nn.CrossEntropyLoss()
                if self.bug == "softmax_before_cross_entropy":
                    loss = loss_fct(torch.softmax(logits.view(-1, self.num_labels), dim=-1), labels.view(-1))
                else:
                    loss = loss_fct(logits.view(-1, self.num_labels), labels.view(-1))

            outputs = (loss,) + outputs

        return outputs  # (loss), logits, (hidden_states), (attentions)


# ------------------------------------------------------------------------------------ (port) tokenizer and data
class WordTokenizer:
    """(port) stands in for BertTokenizer + add_special_tokens: whitespace words, markers kept whole."""

    def __init__(self, words):
        self.vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "$", "#"]
                                                 + ADDITIONAL_SPECIAL_TOKENS + words)}

    def tokenize(self, text):
        return text.lower().split()

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.get(t, 1) for t in tokens]


def synthetic_lines(rng, n, table):
    """(label, sentence) lines: filler words around ``<e1> w1 </e1>`` ... ``<e2> w2 </e2>``; the relation is
    ``table[class(w1), class(w2)]``."""
    lines = []
    for _ in range(n):
        c1, c2 = rng.integers(N_CLASSES, size=2)
        w1 = "ent%d_%d" % (c1, rng.integers(PER_CLASS))
        w2 = "ent%d_%d" % (c2, rng.integers(PER_CLASS))
        filler = ["w%d" % i for i in rng.integers(N_FILLER, size=rng.integers(5, 10))]
        i, j = sorted(rng.choice(len(filler) + 1, size=2, replace=False))
        words = filler[:i] + ["<e1>", w1, "</e1>"] + filler[i:j] + ["<e2>", w2, "</e2>"] + filler[j:]
        lines.append(["rel%d" % table[c1, c2], " ".join(words)])
    return lines


# data_loader.py
class InputExample(object):
    def __init__(self, guid, text_a, label):
        self.guid = guid
        self.text_a = text_a
        self.label = label


class InputFeatures(object):
    def __init__(self, input_ids, attention_mask, token_type_ids, label_id, e1_mask, e2_mask):
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.token_type_ids = token_type_ids
        self.label_id = label_id
        self.e1_mask = e1_mask
        self.e2_mask = e2_mask


class SemEvalProcessor(object):
    """Processor for the Semeval data set """

    def __init__(self, relation_labels):
        self.relation_labels = relation_labels

    def _create_examples(self, lines, set_type):
        """Creates examples for the training and dev sets."""
        examples = []
        for (i, line) in enumerate(lines):
            guid = "%s-%s" % (set_type, i)
            text_a = line[1]
            label = self.relation_labels.index(line[0])
            examples.append(InputExample(guid=guid, text_a=text_a, label=label))
        return examples


def convert_examples_to_features(
    examples,
    max_seq_len,
    tokenizer,
    cls_token="[CLS]",
    cls_token_segment_id=0,
    sep_token="[SEP]",
    pad_token=0,
    pad_token_segment_id=0,
    sequence_a_segment_id=0,
    add_sep_token=False,
    mask_padding_with_zero=True,
):
    features = []
    for (ex_index, example) in enumerate(examples):
        tokens_a = tokenizer.tokenize(example.text_a)

        e11_p = tokens_a.index("<e1>")  # the start position of entity1
        e12_p = tokens_a.index("</e1>")  # the end position of entity1
        e21_p = tokens_a.index("<e2>")  # the start position of entity2
        e22_p = tokens_a.index("</e2>")  # the end position of entity2

        # Replace the token
        tokens_a[e11_p] = "$"
        tokens_a[e12_p] = "$"
        tokens_a[e21_p] = "#"
        tokens_a[e22_p] = "#"

        # Add 1 because of the [CLS] token
        e11_p += 1
        e12_p += 1
        e21_p += 1
        e22_p += 1

        # Account for [CLS] and [SEP] with "- 2" and with "- 3" for RoBERTa.
        if add_sep_token:
            special_tokens_count = 2
        else:
            special_tokens_count = 1
        if len(tokens_a) > max_seq_len - special_tokens_count:
            tokens_a = tokens_a[: (max_seq_len - special_tokens_count)]

        tokens = tokens_a
        if add_sep_token:
            tokens += [sep_token]

        token_type_ids = [sequence_a_segment_id] * len(tokens)

        tokens = [cls_token] + tokens
        token_type_ids = [cls_token_segment_id] + token_type_ids

        input_ids = tokenizer.convert_tokens_to_ids(tokens)

        # The mask has 1 for real tokens and 0 for padding tokens. Only real tokens are attended to.
        attention_mask = [1 if mask_padding_with_zero else 0] * len(input_ids)

        # Zero-pad up to the sequence length.
        padding_length = max_seq_len - len(input_ids)
        input_ids = input_ids + ([pad_token] * padding_length)
        attention_mask = attention_mask + ([0 if mask_padding_with_zero else 1] * padding_length)
        token_type_ids = token_type_ids + ([pad_token_segment_id] * padding_length)

        # e1 mask, e2 mask
        e1_mask = [0] * len(attention_mask)
        e2_mask = [0] * len(attention_mask)

        for i in range(e11_p, e12_p + 1):
            e1_mask[i] = 1
        for i in range(e21_p, e22_p + 1):
            e2_mask[i] = 1

        assert len(input_ids) == max_seq_len, "Error with input length {} vs {}".format(len(input_ids), max_seq_len)

        label_id = int(example.label)

        features.append(
            InputFeatures(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                label_id=label_id,
                e1_mask=e1_mask,
                e2_mask=e2_mask,
            )
        )

    return features


def load_and_cache_examples(lines, relation_labels, tokenizer, mode, args):
    processor = SemEvalProcessor(relation_labels)
    examples = processor._create_examples(lines, mode)
    features = convert_examples_to_features(
        examples, args.max_seq_len, tokenizer, add_sep_token=args.add_sep_token
    )

    # Convert to Tensors and build dataset
    all_input_ids = torch.tensor([f.input_ids for f in features], dtype=torch.long)
    all_attention_mask = torch.tensor([f.attention_mask for f in features], dtype=torch.long)
    all_token_type_ids = torch.tensor([f.token_type_ids for f in features], dtype=torch.long)
    all_e1_mask = torch.tensor([f.e1_mask for f in features], dtype=torch.long)  # add e1 mask
    all_e2_mask = torch.tensor([f.e2_mask for f in features], dtype=torch.long)  # add e2 mask

    if args.bug == "labels_misaligned" and mode == "train":
        # (bug) the label list built from the examples read one line later than the features
        all_label_ids = torch.tensor([f.label_id for f in features[1:] + features[:1]], dtype=torch.long)
    else:
        all_label_ids = torch.tensor([f.label_id for f in features], dtype=torch.long)

    dataset = TensorDataset(
        all_input_ids,
        all_attention_mask,
        all_token_type_ids,
        all_label_ids,
        all_e1_mask,
        all_e2_mask,
    )
    return dataset


# ----------------------------------------------------------------------------------------------- build
def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = types.SimpleNamespace(
        max_seq_len=MAX_SEQ_LEN, train_batch_size=16, eval_batch_size=32, learning_rate=1e-3,
        num_train_epochs=10.0, weight_decay=0.0, gradient_accumulation_steps=1, adam_epsilon=1e-8,
        max_grad_norm=1.0, max_steps=300, warmup_steps=0, dropout_rate=0.1, add_sep_token=False, bug=bug)
    table = rng.integers(N_LABELS, size=(N_CLASSES, N_CLASSES))
    words = ["ent%d_%d" % (c, k) for c in range(N_CLASSES) for k in range(PER_CLASS)]
    words += ["w%d" % i for i in range(N_FILLER)]
    tokenizer = WordTokenizer(words)
    label_lst = ["rel%d" % i for i in range(N_LABELS)]
    train_dataset = load_and_cache_examples(synthetic_lines(rng, 800, table), label_lst, tokenizer, "train", args)

    # Trainer.__init__
    config = BertConfig(
        vocab_size=len(tokenizer.vocab), hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=96, max_position_embeddings=MAX_SEQ_LEN,
        num_labels=len(label_lst),
        finetuning_task="semeval",
        id2label={str(i): label for i, label in enumerate(label_lst)},
        label2id={label: i for i, label in enumerate(label_lst)},
    )
    model = RBERT(config, args)

    # Trainer.train
    train_sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(seed))
    train_dataloader = DataLoader(
        train_dataset,
        sampler=train_sampler,
        batch_size=args.train_batch_size,
    )
    t_total = args.max_steps

    # Prepare optimizer and schedule (linear warmup and decay)
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(  # (port) transformers.AdamW is gone from transformers 5
        optimizer_grouped_parameters,
        lr=args.learning_rate,
        eps=args.adam_epsilon,
    )
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=args.warmup_steps,
        num_training_steps=t_total,
    )
    model.zero_grad()
    state = {"it": iter(train_dataloader), "step": 0}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"], state["step"] = iter(train_dataloader), 0
            return next(state["it"])

    def to_inputs(batch):
        return {
            "input_ids": batch[0],
            "attention_mask": batch[1],
            "token_type_ids": batch[2],
            "labels": batch[3],
            "e1_mask": batch[4],
            "e2_mask": batch[5],
        }

    def train_step():
        batch = next_batch()
        step = state["step"]
        state["step"] += 1
        model.train()
        batch = tuple(t for t in batch)  # GPU or CPU
        inputs = to_inputs(batch)
        outputs = model(**inputs)
        loss = outputs[0]

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps

        loss.backward()

        if (step + 1) % args.gradient_accumulation_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

            optimizer.step()
            scheduler.step()  # Update learning rate schedule
            if bug != "zero_grad_dropped":
                model.zero_grad()
        return loss.item()

    def eval_fn(model, batch):
        # Trainer.evaluate on one batch: the accuracy of the argmax
        model.eval()
        batch = tuple(t for t in batch)
        with torch.no_grad():
            outputs = model(**to_inputs(batch))
            _tmp_eval_loss, logits = outputs[:2]
        preds = np.argmax(logits.detach().cpu().numpy(), axis=1)
        return float((preds == batch[3].numpy()).mean())

    first = next(iter(DataLoader(train_dataset, sampler=SequentialSampler(train_dataset),
                                 batch_size=args.train_batch_size)))
    return Program(name="rbert_semeval", model=model, batch=first, loss_fn=lambda outputs, _t: outputs[0],
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the label tensor built one example off from the features (classic misalignment): every sentence is trained
    # toward its neighbour's relation.
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # a softmax on the logits before nn.CrossEntropyLoss, which applies its own log-softmax (classic).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # model.zero_grad() left out after the step (classic): gradients pile up over every step; a slip of the
    # whole model's step.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
