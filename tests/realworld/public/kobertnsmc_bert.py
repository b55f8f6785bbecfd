"""KoBERT-nsmc: sentiment classification of movie reviews with ``BertForSequenceClassification`` (two labels),
trained by the repository's ``Trainer``: reviews tokenized into ``[CLS] tokens [SEP]`` padded to ``max_seq_len``
with an attention mask of ones on the real tokens, a ``RandomSampler`` loader, AdamW with no decay on biases and
LayerNorm weights, a linear warm-up/decay schedule over ``len(train_dataloader) * num_train_epochs`` steps,
``clip_grad_norm_(max_grad_norm)``, ``model.zero_grad()`` after each step; the evaluation runs under ``eval()`` and
``no_grad`` and reports the argmax accuracy.

Source: https://github.com/monologg/KoBERT-nsmc
Commit: 9c6f417748d82d7064b097e90030b1b68f351d9a
Files: main.py (the arguments and their defaults), trainer.py, data_loader.py, utils.py
License: Apache-2.0
Domain: text classification, binary sentiment (BERT fine-tuning)

Deviations from the original:
- no weights or tokenizer can be downloaded: the model is ``BertForSequenceClassification`` built from a tiny
  ``BertConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64, 32 positions, num_labels 2, the id2label /
  label2id / finetuning_task arguments kept) with random weights; ``KoBertTokenizer`` is replaced by a stand-in
  with the attributes ``convert_examples_to_features`` uses (KoBERT's special ids: ``[UNK]`` 0, ``[PAD]`` 1,
  ``[CLS]`` 2, ``[SEP]`` 3; whitespace ``tokenize``);
- ``transformers.AdamW`` no longer exists in transformers 5: ``torch.optim.AdamW`` with the same groups, lr and eps;
- data: NSMC's ``ratings_train.txt`` / ``ratings_test.txt`` are replaced by 480 training and 64 test synthetic
  reviews made from ``seed`` in the same tab-separated ``id<TAB>document<TAB>label`` lines (with a header line),
  read by ``NsmcProcessor._create_examples``; 6-20 words of a 40-word vocabulary with 5 "positive" and 5
  "negative" words, label 1 when the positive words outnumber the negative ones (ties redrawn); the feature
  cache file is left out;
- sizes and rates: max_seq_len 50 -> 24, train_batch_size 32 -> 16, eval_batch_size 64 kept, learning_rate 5e-5 ->
  2e-3 (random weights, a short run; the loss leaves its 0.69 plateau after some 30 steps, so the self-check runs 60), num_train_epochs 5 kept, warmup_steps 0, weight_decay 0, max_grad_norm 1.0;
- one ``train_step`` is one iteration of the epoch loop (gradient_accumulation_steps 1: a step every batch);
  tqdm, logging, the evaluation every ``logging_steps`` and the checkpoint every ``save_steps`` are left out;
  ``eval_fn`` is ``evaluate("test")`` on one batch (the accuracy).
"""

# ruff: noqa: UP004, UP031, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 60

POSITIVE = ["great", "fun", "moving", "best", "love"]
NEGATIVE = ["boring", "worst", "awful", "waste", "dull"]
NEUTRAL = [f"w{i}" for i in range(30)]


class Args:
    task = "nsmc"
    model_type = "kobert"
    seed = 42
    train_batch_size = 16
    eval_batch_size = 64
    max_seq_len = 24
    learning_rate = 2e-3
    num_train_epochs = 5.0
    weight_decay = 0.0
    gradient_accumulation_steps = 1
    adam_epsilon = 1e-8
    max_grad_norm = 1.0
    max_steps = -1
    warmup_steps = 0
    no_cuda = True


class KoBertTokenizerStandIn:
    """What convert_examples_to_features reads from KoBertTokenizer (monologg/kobert's special ids)."""
    unk_token, pad_token, cls_token, sep_token = "[UNK]", "[PAD]", "[CLS]", "[SEP]"

    def __init__(self):
        words = POSITIVE + NEGATIVE + NEUTRAL
        self.vocab = {"[UNK]": 0, "[PAD]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}
        self.pad_token_id = self.vocab[self.pad_token]

    def tokenize(self, text):
        return text.split()

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.get(t, 0) for t in tokens]


# ---- utils.py -------------------------------------------------------------------------------------------------------

def get_label(args):
    return [0, 1]


def set_seed(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)


def simple_accuracy(preds, labels):
    return (preds == labels).mean()


# ---- data_loader.py -------------------------------------------------------------------------------------------------

class InputExample(object):
    def __init__(self, guid, text_a, label):
        self.guid = guid
        self.text_a = text_a
        self.label = label


class InputFeatures(object):
    def __init__(self, input_ids, attention_mask, token_type_ids, label_id):
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.token_type_ids = token_type_ids
        self.label_id = label_id


def _create_examples(lines, set_type):
    """Creates examples for the training and dev sets."""
    examples = []
    for (i, line) in enumerate(lines[1:]):
        line = line.split('\t')
        guid = "%s-%s" % (set_type, i)
        text_a = line[1]
        label = int(line[2])
        examples.append(InputExample(guid=guid, text_a=text_a, label=label))
    return examples


def convert_examples_to_features(examples, max_seq_len, tokenizer,
                                 cls_token_segment_id=0,
                                 pad_token_segment_id=0,
                                 sequence_a_segment_id=0,
                                 mask_padding_with_zero=True):
    # Setting based on the current model type
    cls_token = tokenizer.cls_token
    sep_token = tokenizer.sep_token
    pad_token_id = tokenizer.pad_token_id

    features = []
    for (ex_index, example) in enumerate(examples):
        tokens = tokenizer.tokenize(example.text_a)

        # Account for [CLS] and [SEP]
        special_tokens_count = 2
        if len(tokens) > max_seq_len - special_tokens_count:
            tokens = tokens[:(max_seq_len - special_tokens_count)]

        # Add [SEP] token
        tokens += [sep_token]
        token_type_ids = [sequence_a_segment_id] * len(tokens)

        # Add [CLS] token
        tokens = [cls_token] + tokens
        token_type_ids = [cls_token_segment_id] + token_type_ids

        input_ids = tokenizer.convert_tokens_to_ids(tokens)

        # The mask has 1 for real tokens and 0 for padding tokens. Only real
        # tokens are attended to.
        attention_mask = [1 if mask_padding_with_zero else 0] * len(input_ids)

        # Zero-pad up to the sequence length.
        padding_length = max_seq_len - len(input_ids)
        input_ids = input_ids + ([pad_token_id] * padding_length)
        attention_mask = attention_mask + ([0 if mask_padding_with_zero else 1] * padding_length)
        token_type_ids = token_type_ids + ([pad_token_segment_id] * padding_length)

        label_id = example.label

        features.append(
            InputFeatures(input_ids=input_ids,
                          attention_mask=attention_mask,
                          token_type_ids=token_type_ids,
                          label_id=label_id
                          ))

    return features


def load_and_cache_examples(args, tokenizer, lines, mode, bug=None):
    examples = _create_examples(lines, mode)
    if bug == "attention_mask_inverted":
        # the flag read the other way round: ones on the padding, zeros on the review's tokens
        features = convert_examples_to_features(examples, args.max_seq_len, tokenizer, mask_padding_with_zero=False)
    else:
        features = convert_examples_to_features(examples, args.max_seq_len, tokenizer)

    # Convert to Tensors and build dataset
    all_input_ids = torch.tensor([f.input_ids for f in features], dtype=torch.long)
    all_attention_mask = torch.tensor([f.attention_mask for f in features], dtype=torch.long)
    all_token_type_ids = torch.tensor([f.token_type_ids for f in features], dtype=torch.long)
    all_label_ids = torch.tensor([f.label_id for f in features], dtype=torch.long)
    if bug == "labels_misaligned":  # each review paired with the next review's label
        all_label_ids = all_label_ids.roll(-1)

    dataset = TensorDataset(all_input_ids, all_attention_mask,
                            all_token_type_ids, all_label_ids)
    return dataset


# ---- synthetic NSMC files -------------------------------------------------------------------------------------------

def make_lines(gen, n):
    """``id<TAB>document<TAB>label`` lines after a header: label 1 when positive words outnumber negative ones."""
    lines = ["id\tdocument\tlabel"]
    while len(lines) <= n:
        k = int(torch.randint(6, 21, (1,), generator=gen))
        pool = POSITIVE + NEGATIVE + NEUTRAL
        words = [pool[int(i)] for i in torch.randint(0, len(pool), (k,), generator=gen)]
        pos = sum(w in POSITIVE for w in words)
        neg = sum(w in NEGATIVE for w in words)
        if pos == neg:
            continue
        lines.append(f"{len(lines)}\t{' '.join(words)}\t{int(pos > neg)}")
    return lines


# ---- trainer.py -----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    args = Args()
    args.seed = seed
    set_seed(args)
    gen = torch.Generator().manual_seed(seed)
    tokenizer = KoBertTokenizerStandIn()
    train_dataset = load_and_cache_examples(args, tokenizer, make_lines(gen, 480), "train", bug=bug)
    test_dataset = load_and_cache_examples(args, tokenizer, make_lines(gen, 64), "test", bug=bug)

    label_lst = get_label(args)
    num_labels = len(label_lst)
    config = BertConfig(vocab_size=len(tokenizer.vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, pad_token_id=1,
                        num_labels=num_labels,
                        finetuning_task=args.task,
                        id2label={str(i): label for i, label in enumerate(label_lst)},
                        label2id={label: i for i, label in enumerate(label_lst)})
    model = BertForSequenceClassification(config)
    device = "cpu"
    model.to(device)

    train_sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(seed))
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
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_steps,
                                                num_training_steps=t_total)

    model.zero_grad()
    state = {"it": iter(train_dataloader), "step": 0}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:  # the next epoch
            state["it"], state["step"] = iter(train_dataloader), 0
            batch = next(state["it"])
        step = state["step"]
        state["step"] += 1
        model.train()
        batch = tuple(t.to(device) for t in batch)  # GPU or CPU
        inputs = {'input_ids': batch[0],
                  'attention_mask': batch[1],
                  'labels': batch[3]}
        if args.model_type != 'distilkobert':
            inputs['token_type_ids'] = batch[2]
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
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            inputs = {'input_ids': batch[0],
                      'attention_mask': batch[1],
                      'labels': batch[3]}
            if args.model_type != 'distilkobert':
                inputs['token_type_ids'] = batch[2]
            outputs = model(**inputs)
            tmp_eval_loss, logits = outputs[:2]
        preds = np.argmax(logits.detach().cpu().numpy(), axis=1)
        model.train()
        return float(simple_accuracy(preds, inputs['labels'].detach().cpu().numpy()))

    first = next(iter(DataLoader(test_dataset, batch_size=args.eval_batch_size)))
    return Program(name="kobertnsmc_bert", model=model, batch=tuple(first),
                   loss_fn=lambda outputs, _labels: outputs[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # the label tensor built one example out of step with the features (each review gets the next review's label):
    # the targets no longer follow from the words.
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # mask_padding_with_zero=False: the attention mask keeps the padding and hides the review's tokens, so what the
    # classifier reads no longer depends on the words.
    Bug("attention_mask_inverted", functools.partial(_build, bug="attention_mask_inverted"), "learning_ledger",
        ("DEPENDENCY",)),
    # model.zero_grad() dropped after the step: gradients accumulate across updates.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
