"""Microsoft CodeXGLUE's defect-detection baseline (Code-Code/Defect-detection): CodeBERT
(``RobertaForSequenceClassification`` with ``config.num_labels = 1``) wrapped by the task's ``Model``, which
applies dropout to the single logit, a sigmoid, and the hand-written binary cross-entropy
``-(log(p + 1e-10) * y + log(1 - p + 1e-10) * (1 - y)).mean()``; functions tokenized into ``<s> code </s>`` padded
to ``block_size`` with the pad id (the attention mask is ``input_ids.ne(1)``); AdamW with no decay on biases and
LayerNorm weights, a linear schedule with 10% warmup over ``epoch * len(train_dataloader)`` steps, gradient
clipping at 1.0, and an evaluation (``model.eval()``, ``no_grad``) thresholding the probability at 0.5.

Source: https://github.com/microsoft/CodeXGLUE
Commit: ac74a62802a0dd159b3258c78a2df8ad36cdf2b9
Files: Code-Code/Defect-detection/code/run.py, Code-Code/Defect-detection/code/model.py,
  Code-Code/Defect-detection/README.md (the training command)
License: MIT (Copyright (c) Microsoft Corporation.)
Domain: text (source code) classification, binary (encoder fine-tuning)

Deviations from the original:
- no weights or tokenizer can be downloaded: the encoder is ``RobertaForSequenceClassification`` built from a tiny
  ``RobertaConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64, 40 positions, num_labels 1) with random
  weights; the tokenizer is a stand-in with the attributes ``convert_examples_to_features`` uses (``<s>`` 0,
  ``<pad>`` 1, ``</s>`` 2, whitespace ``tokenize``);
- data: Devign's jsonl files are replaced by 320 training and 64 validation synthetic "functions" made from
  ``seed`` (12-30 tokens of a 60-token vocabulary; target 1 when the function calls ``strcpy``, inserted at a
  random place in half of them); ``TextDataset`` takes the parsed json lines instead of a path (its example logging left out);
- sizes and rates: block_size 400 -> 32, train_batch_size 32 -> 16, learning_rate 2e-5 -> 3e-3 (random weights,
  a short run; the loss leaves its 0.69 plateau after some 30 steps, so the self-check runs 60), epoch 5 kept; ``num_workers=4, pin_memory=True`` -> the main process;
- one ``train_step`` is one iteration of the epoch loop (gradient_accumulation_steps 1: a step every batch);
  tqdm, logging, checkpoints, the evaluation every ``save_steps``, early stopping, fp16 and multi-GPU are left
  out; ``eval_fn`` is ``evaluate()`` on one batch (the accuracy).
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler
from transformers import RobertaConfig, RobertaForSequenceClassification, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 60

WORDS = ["strcpy", "buf", "memcpy", "len", "if", "return", "int", "char", "*", "(", ")", "{", "}", ";", "=", "+",
         "free", "malloc", "NULL", "for", "while", "size", "i", "j", "ptr", "src", "dst", "n", "0", "1", "->", "[",
         "]", "<", ">", "&&", "||", "sizeof", "void", "static", "struct", "p", "q", "x", "y", "goto", "out", "err",
         "ret", "data", "node", "list", "next", "prev", "lock", "unlock", "read", "write", "open", "close"]


class Args:
    block_size = 32
    train_batch_size = 16
    eval_batch_size = 64
    learning_rate = 3e-3
    weight_decay = 0.0
    adam_epsilon = 1e-8
    max_grad_norm = 1.0
    epoch = 5
    gradient_accumulation_steps = 1
    dropout_probability = 0
    device = "cpu"


class CodeTokenizer:
    """Stand-in for RobertaTokenizer (microsoft/codebert-base): what convert_examples_to_features reads."""
    cls_token, sep_token, pad_token_id = "<s>", "</s>", 1

    def __init__(self):
        self.vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}

    def tokenize(self, code):
        return code.split()

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]


# ---- model.py --------------------------------------------------------------------------------------------------------

class Model(nn.Module):
    def __init__(self, encoder, config, tokenizer, args, bug=None):
        super().__init__()
        self.encoder = encoder
        self.config = config
        self.tokenizer = tokenizer
        self.args = args

        # Define dropout layer, dropout_probability is taken from args.
        self.dropout = nn.Dropout(args.dropout_probability)
        self.bug = bug

    def forward(self, input_ids=None, labels=None):
        outputs = self.encoder(input_ids, attention_mask=input_ids.ne(1))[0]

        # Apply dropout
        outputs = self.dropout(outputs)

        logits = outputs
        prob = torch.sigmoid(logits)
        if labels is not None:
            labels = labels.float()
            if self.bug == "negative_term_dropped":
                loss = torch.log(prob[:, 0]+1e-10)*labels  # the log(1 - p) * (1 - y) term left out
            else:
                loss = torch.log(prob[:, 0]+1e-10)*labels+torch.log((1-prob)[:, 0]+1e-10)*(1-labels)
            loss = -loss.mean()
            return loss, prob
        else:
            return prob


# ---- run.py ----------------------------------------------------------------------------------------------------------

class InputFeatures:
    """A single training/test features for a example."""
    def __init__(self, input_tokens, input_ids, idx, label):
        self.input_tokens = input_tokens
        self.input_ids = input_ids
        self.idx = str(idx)
        self.label = label


def convert_examples_to_features(js, tokenizer, args):
    #source
    code = ' '.join(js['func'].split())
    code_tokens = tokenizer.tokenize(code)[:args.block_size-2]
    source_tokens = [tokenizer.cls_token]+code_tokens+[tokenizer.sep_token]
    source_ids = tokenizer.convert_tokens_to_ids(source_tokens)
    padding_length = args.block_size - len(source_ids)
    source_ids += [tokenizer.pad_token_id]*padding_length
    return InputFeatures(source_tokens, source_ids, js['idx'], js['target'])


class TextDataset(Dataset):
    def __init__(self, tokenizer, args, lines, bug=None):
        self.examples = []
        for js in lines:
            self.examples.append(convert_examples_to_features(js, tokenizer, args))
        self.bug = bug

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        if self.bug == "labels_misaligned":  # the label of the neighbouring example
            return torch.tensor(self.examples[i].input_ids), torch.tensor(self.examples[i - 1].label)
        return torch.tensor(self.examples[i].input_ids), torch.tensor(self.examples[i].label)


def make_lines(gen, n):
    """Devign-shaped json lines: a function's tokens and target 1 when it calls ``strcpy``."""
    lines = []
    for idx in range(n):
        toks = [WORDS[int(i)] for i in torch.randint(1, len(WORDS), (int(torch.randint(12, 31, (1,), generator=gen)),),
                                                     generator=gen)]
        if torch.rand(1, generator=gen) < 0.5:
            toks[int(torch.randint(0, len(toks), (1,), generator=gen))] = "strcpy"
        lines.append({"func": " ".join(toks), "target": int("strcpy" in toks), "idx": idx})
    return lines


def set_seed(seed=42):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _optimizer(args, model, train_dataloader):
    args.max_steps = args.epoch*len(train_dataloader)
    # Prepare optimizer and schedule (linear warmup and decay)
    no_decay = ['bias', 'LayerNorm.weight']
    optimizer_grouped_parameters = [
        {'params': [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         'weight_decay': args.weight_decay},
        {'params': [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.max_steps*0.1,
                                                num_training_steps=args.max_steps)
    return optimizer, scheduler


def _build(seed, bug=None):
    args = Args()
    set_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    tokenizer = CodeTokenizer()
    config = RobertaConfig(vocab_size=len(tokenizer.vocab), hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=40, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2)
    config.num_labels = 1
    model = RobertaForSequenceClassification(config)
    model = Model(model, config, tokenizer, args, bug=bug)

    train_dataset = TextDataset(tokenizer, args, make_lines(gen, 320), bug=bug)
    train_sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(seed))
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=args.train_batch_size)
    optimizer, scheduler = _optimizer(args, model, train_dataloader)
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
        inputs = batch[0].to(args.device)
        labels = batch[1].to(args.device)
        model.train()
        loss, _logits = model(inputs, labels)
        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        if (step + 1) % args.gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        if bug != "eval_without_model_eval":
            model.eval()
        with torch.no_grad():
            _lm_loss, logit = model(batch["input_ids"], batch["labels"])
        preds = logit[:, 0] > 0.5
        model.train()
        return float((batch["labels"] == preds).float().mean())

    first = next(iter(DataLoader(TextDataset(tokenizer, args, make_lines(gen, 64)), batch_size=args.eval_batch_size)))
    return Program(name="codexglue_defect", model=model, batch={"input_ids": first[0], "labels": first[1]},
                   loss_fn=lambda output, labels: output[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # the (1 - y) * log(1 - p) term of the hand-written binary cross-entropy left out: the loss is minimized by
    # p -> 1 on every function, defective or not.
    Bug("negative_term_dropped", functools.partial(_build, bug="negative_term_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # __getitem__ pairs each function with its neighbour's target: labels no longer follow from the inputs.
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # evaluate() without model.eval(): RoBERTa's dropout stays on while the accuracy is measured.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
]
