"""Masked language model pretraining from scratch with simpletransformers' ``LanguageModelingModel("bert", None,
args=...)``: a ``BertConfig`` built from ``args.config`` (random weights, ``BertForMaskedLM``), the ``SimpleDataset``
(every line ``tokenizer.encode``-d, concatenated, cut into blocks with [CLS]/[SEP] added), ``mask_tokens`` (15% of
the non-special tokens, 80% [MASK] / 10% random / 10% kept, labels -100 elsewhere), AdamW over the no-decay
parameter groups, ``get_linear_schedule_with_warmup`` (warmup 6% of the steps), ``clip_grad_norm_`` 1.0, the loop
body of ``LanguageModelingModel.train``.

Source: https://github.com/ThilinaRajapakse/simpletransformers
Commit: 03a3789f2c65119949f7cd98b524e78c6cc87d27
Files: simpletransformers/language_modeling/language_modeling_model.py (``__init__``, ``train``,
  ``get_optimizer_parameters``), simpletransformers/language_modeling/language_modeling_utils.py (``SimpleDataset``,
  ``encode``, ``mask_tokens``), simpletransformers/config/model_args.py (``ModelArgs``, ``LanguageModelingArgs``)
License: Apache-2.0 (full text in LICENSES/ThilinaRajapakse-simpletransformers.txt)
Domain: masked-LM encoder pretraining from config (BERT, random weights)

Deviations from the original:
- sizes: ``args.config`` gives hidden 32, 2 layers, 2 heads, intermediate 64, 64 positions (a user's small config;
  BERT-base defaults otherwise); block_size 32; learning_rate 4e-5 -> 3e-3 and num_train_epochs 1 -> 3 so the loss
  falls within the 30 steps of the self-check (train_batch_size 8, warmup_ratio 0.06, weight_decay 0.0,
  adam_epsilon 1e-8, max_grad_norm 1.0, mlm_probability 0.15 are the ``ModelArgs`` defaults, unchanged);
- the tokenizer: with ``model_name=None`` simpletransformers trains a ``BertWordPieceTokenizer`` on the train file
  (``train_tokenizer``); here a word-level ``tokenizers`` tokenizer with BERT's special tokens over the synthetic
  vocabulary, in ``PreTrainedTokenizerFast`` (its ``encode`` adds [CLS]/[SEP] per line as BertTokenizer's does;
  BertTokenizer's ``build_inputs_with_special_tokens``, missing from transformers 5's fast tokenizers, is added);
- data: the train text file is replaced by synthetic lines made from ``seed`` (6-14 words over 60 words, each word
  the fixed successor-table word of the one before it with probability 0.85), given to ``SimpleDataset`` as lines
  instead of a file; the feature cache, multiprocessing and ``sliding_window`` paths are off (their defaults);
- CPU only; fp16, n_gpu/DataParallel/DDP, wandb, tensorboard, tqdm, checkpoint saving and evaluation during
  training are left out (all off or side effects of the defaults);
- one ``train_step`` is one iteration of ``train``'s inner loop (gradient_accumulation_steps 1: mask, forward,
  backward, clip, ``optimizer.step()``, ``scheduler.step()``, ``model.zero_grad()``), a new epoch iterator when
  one ends; ``eval_fn`` is ``evaluate``'s loss on a given batch (``model.eval()``, ``no_grad``; then ``model.train()``
  as ``train`` does after evaluating during training), the batch masked once by ``mask_tokens`` at build;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF034

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.nn.utils.rnn import pad_sequence
from torch.optim import AdamW
from torch.utils.data import DataLoader, Dataset, RandomSampler
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_WORDS = 60


def make_args():
    """The ``LanguageModelingArgs`` fields the training path reads (defaults unless noted in the docstring)."""
    return types.SimpleNamespace(
        model_type="bert", adam_epsilon=1e-8, adam_betas=(0.9, 0.999), gradient_accumulation_steps=1,
        learning_rate=3e-3, max_grad_norm=1.0, max_seq_length=128, num_train_epochs=3, optimizer="AdamW",
        scheduler="linear_schedule_with_warmup", train_batch_size=8, warmup_ratio=0.06, warmup_steps=0,
        weight_decay=0.0, train_custom_parameters_only=False, custom_parameter_groups=[],
        custom_layer_parameters=[], block_size=32, max_steps=-1, mlm=True, mlm_probability=0.15, n_gpu=1,
        fp16=False, use_hf_datasets=False, stream_hf_datasets=False, local_rank=-1,
        config={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "max_position_embeddings": 64},
    )


# ---- stand-ins for what cannot be downloaded or is not installed ------------------------------------------------

def make_tokenizer():
    """Word-level tokenizer: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, words w0..w59; BERT's single template."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for k in range(N_WORDS):
        vocab[f"w{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return _BertLikeTokenizer(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                              sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)


class _BertLikeTokenizer(PreTrainedTokenizerFast):
    """transformers 5's fast tokenizers have no ``build_inputs_with_special_tokens``: BertTokenizer's, written out."""

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        if token_ids_1 is None:
            return [self.cls_token_id] + token_ids_0 + [self.sep_token_id]
        return [self.cls_token_id] + token_ids_0 + [self.sep_token_id] + token_ids_1 + [self.sep_token_id]


def make_lines(seed, n):
    rng = np.random.RandomState(seed)
    successor = np.random.RandomState(1234).randint(0, 20, N_WORDS)  # a fixed successor table into w0..w19
    lines = []
    for _ in range(n):
        w = rng.randint(N_WORDS)
        words = [w]
        for _ in range(rng.randint(5, 14)):
            w = successor[w] if rng.rand() < 0.85 else rng.randint(N_WORDS)
            words.append(w)
        lines.append(" ".join(f"w{x}" for x in words))
    return lines


# ---- language_modeling_utils.py ----------------------------------------------------------------------------------

def encode(data):
    tokenizer, line = data
    return tokenizer.encode(line)


class SimpleDataset(Dataset):
    def __init__(self, tokenizer, args, text_lines, mode, block_size=512, special_tokens_count=2):
        block_size = block_size - special_tokens_count
        lines = [
            (tokenizer, line)
            for line in text_lines
            if (len(line) > 0 and not line.isspace())
        ]
        self.examples = [encode(line) for line in lines]

        self.examples = [token for tokens in self.examples for token in tokens]
        if len(self.examples) > block_size:
            self.examples = [
                tokenizer.build_inputs_with_special_tokens(
                    self.examples[i : i + block_size]
                )
                for i in range(0, len(self.examples) - block_size + 1, block_size)
            ]
        else:
            self.examples = [
                tokenizer.build_inputs_with_special_tokens(self.examples)
            ]

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, item):
        return torch.tensor(self.examples[item], dtype=torch.long)


def mask_tokens(inputs, tokenizer, args, bug=None):
    """Prepare masked tokens inputs/labels for masked language modeling: 80% MASK, 10% random, 10% original."""

    if tokenizer.mask_token is None:
        raise ValueError(
            "This tokenizer does not have a mask token which is necessary for masked language modeling."
            "Set 'mlm' to False in args if you want to use this tokenizer."
        )

    labels = inputs.clone()
    # We sample a few tokens in each sequence for masked-LM training
    # (with probability args.mlm_probability defaults to 0.15 in Bert/RoBERTa)
    probability_matrix = torch.full(labels.shape, args.mlm_probability)
    special_tokens_mask = [
        tokenizer.get_special_tokens_mask(val, already_has_special_tokens=True)
        for val in labels.tolist()
    ]
    probability_matrix.masked_fill_(
        torch.tensor(special_tokens_mask, dtype=torch.bool), value=0.0
    )
    if tokenizer.pad_token is not None:
        padding_mask = labels.eq(tokenizer.pad_token_id)
        probability_matrix.masked_fill_(padding_mask, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    if bug != "labels_not_restricted_to_masked":
        labels[~masked_indices] = -100  # We only compute loss on masked tokens

    if args.model_type == "electra":
        # For ELECTRA, we replace all masked input tokens with tokenizer.mask_token
        inputs[masked_indices] = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)
    else:
        # 80% of the time, we replace masked input tokens with tokenizer.mask_token ([MASK])
        indices_replaced = (
            torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked_indices
        )
        inputs[indices_replaced] = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)

        # 10% of the time, we replace masked input tokens with random word
        indices_random = (
            torch.bernoulli(torch.full(labels.shape, 0.5)).bool()
            & masked_indices
            & ~indices_replaced
        )
        random_words = torch.randint(len(tokenizer), labels.shape, dtype=torch.long)
        inputs[indices_random] = random_words[indices_random]

        # The rest of the time (10% of the time) we keep the masked input tokens unchanged
    return inputs, labels


# ---- language_modeling_model.py ----------------------------------------------------------------------------------

def get_optimizer_parameters(model, args):
    no_decay = ["bias", "LayerNorm.weight"]

    optimizer_grouped_parameters = []
    custom_parameter_names = set()

    if not args.train_custom_parameters_only:
        optimizer_grouped_parameters.extend(
            [
                {
                    "params": [
                        p
                        for n, p in model.named_parameters()
                        if n not in custom_parameter_names
                        and not any(nd in n for nd in no_decay)
                    ],
                    "weight_decay": args.weight_decay,
                },
                {
                    "params": [
                        p
                        for n, p in model.named_parameters()
                        if n not in custom_parameter_names
                        and any(nd in n for nd in no_decay)
                    ],
                    "weight_decay": 0.0,
                },
            ]
        )
    return optimizer_grouped_parameters


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = make_args()
    tokenizer = make_tokenizer()

    # LanguageModelingModel.__init__ with model_name=None: config from args.config, random weights
    config = BertConfig(**args.config)
    config.vocab_size = len(tokenizer)
    args.block_size = min(args.block_size, tokenizer.model_max_length, args.max_seq_length)
    model = BertForMaskedLM(config=config)
    model.resize_token_embeddings(len(tokenizer))

    train_dataset = SimpleDataset(tokenizer, args, make_lines(seed, 400), "train", args.block_size)

    # LanguageModelingModel.train
    def collate(examples):
        if tokenizer.pad_token is None:
            return pad_sequence(examples, batch_first=True)
        return pad_sequence(
            examples, batch_first=True, padding_value=tokenizer.pad_token_id
        )

    train_sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(seed))
    train_dataloader = DataLoader(
        train_dataset,
        batch_size=args.train_batch_size,
        sampler=train_sampler,
        collate_fn=collate,
    )

    t_total = (
        len(train_dataloader)
        // args.gradient_accumulation_steps
        * args.num_train_epochs
    )

    optimizer_grouped_parameters = get_optimizer_parameters(model, args)

    warmup_steps = math.ceil(t_total * args.warmup_ratio)
    args.warmup_steps = (
        warmup_steps if args.warmup_steps == 0 else args.warmup_steps
    )

    optimizer = AdamW(
        optimizer_grouped_parameters,
        lr=args.learning_rate,
        eps=args.adam_epsilon,
        betas=args.adam_betas,
    )
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=args.warmup_steps,
        num_training_steps=t_total,
    )

    device = torch.device("cpu")
    model.zero_grad()
    state = {"it": None, "step": 0}

    def next_batch():
        if state["it"] is not None:
            try:
                return next(state["it"])
            except StopIteration:
                pass
        model.train()  # the top of each epoch
        state["it"], state["step"] = iter(train_dataloader), 0
        return next(state["it"])

    def train_step():
        batch = next_batch()
        step = state["step"]
        input_ids = batch

        if bug == "model_fed_unmasked_ids":
            # masking applied to a copy while the model is fed the original ids (classic leak of the targets)
            inputs, labels = mask_tokens(input_ids.clone(), tokenizer, args, bug)
            inputs = input_ids
        else:
            inputs, labels = (
                mask_tokens(input_ids, tokenizer, args, bug)
                if args.mlm
                else (input_ids, input_ids)
            )
        inputs = inputs.to(device)
        attention_mask = None
        labels = labels.to(device)

        inputs_dict = {
            "input_ids": inputs,
            "attention_mask": attention_mask,
        }

        outputs = (
            model(**inputs_dict, labels=labels)
            if args.mlm
            else model(**inputs_dict, labels=labels)
        )
        # model outputs are always tuple in pytorch-transformers (see doc)
        loss = outputs[0]

        current_loss = loss.item()

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps

        loss.backward()

        if (step + 1) % args.gradient_accumulation_steps == 0:
            if args.optimizer == "AdamW":
                torch.nn.utils.clip_grad_norm_(
                    model.parameters(), args.max_grad_norm
                )
            optimizer.step()
            scheduler.step()  # Update learning rate schedule
            model.zero_grad()
        state["step"] += 1
        return current_loss

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            outputs = model(batch["input_ids"], labels=batch["labels"])
        model.train()  # as train() does after its evaluation during training
        return float(outputs[0])

    first_inputs, first_labels = mask_tokens(collate([train_dataset[i] for i in range(args.train_batch_size)]),
                                             tokenizer, args)
    batch = {"input_ids": first_inputs, "labels": first_labels}
    return Program(name="simpletransformers_mlm", model=model, batch=batch,
                   loss_fn=lambda outputs, _labels: outputs[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # `labels[~masked_indices] = -100` left out: the loss covers every token, most of them visible in the input,
    # so the model is mostly trained to copy (the pitfall of https://github.com/huggingface/transformers/issues/20797).
    Bug("labels_not_restricted_to_masked", functools.partial(_build, bug="labels_not_restricted_to_masked"),
        "learning_ledger", ("OBJECTIVE",)),
    # the masking done on a copy while the model receives the original ids: every masked target is in the input.
    Bug("model_fed_unmasked_ids", functools.partial(_build, bug="model_fed_unmasked_ids"), "learning_ledger",
        ("TASK",)),
]
