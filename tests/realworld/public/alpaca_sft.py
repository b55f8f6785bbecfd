"""Stanford Alpaca's supervised fine-tuning script: instruction/input/output records formatted with the Alpaca prompt
templates, each example tokenized as prompt + response + EOS with the prompt's tokens set to ``IGNORE_INDEX`` in the
labels (``preprocess``), right padding with a ``[PAD]`` token added by ``smart_tokenizer_and_embedding_resize`` (new
embedding rows set to the mean of the old ones), ``DataCollatorForSupervisedDataset`` (input ids padded with the pad
id, labels with -100, ``attention_mask = input_ids != pad``), and the Hugging Face ``Trainer`` on a causal LM with
the README's arguments (AdamW ``adamw_torch``, cosine schedule with 3% warmup, weight decay 0, gradient accumulation,
3 epochs).

Source: https://github.com/tatsu-lab/stanford_alpaca
Commit: 761dc5bfbdeeffa89b8bff5d038781a4055f796a
Files: train.py, utils.py (jload), README.md (fine-tuning command)
License: Apache-2.0 (Copyright 2023 Rohan Taori, Ishaan Gulrajani, Tianyi Zhang, Yann Dubois, Xuechen Li; full text
  in LICENSES/tatsu-lab-stanford_alpaca.txt)
Domain: HF Trainer program, instruction fine-tuning of a causal LM (LLaMA from config)

Deviations from the original:
- the command line is the README's LLaMA command less what needs GPUs or files (``torchrun``, ``--bf16``, ``--tf32``,
  ``--fsdp``, ``--fsdp_transformer_layer_cls_to_wrap``; in transformers 5 ``--evaluation_strategy`` is
  ``--eval_strategy`` and ``--warmup_ratio 0.03`` is ``--warmup_steps 0.03``, a float below 1 being the ratio), with
  ``--use_cpu --report_to none``; per_device_train_batch_size 4 and num_train_epochs 3 as written,
  gradient_accumulation_steps 8 -> 2, learning_rate 2e-5 -> 1e-3 (the model starts from random weights),
  model_max_length 512 -> 96;
- the model: ``AutoModelForCausalLM.from_pretrained(<llama checkpoint>)`` becomes ``from_config`` of a tiny
  ``LlamaConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64) with the tokenizer's vocabulary;
- the tokenizer: ``AutoTokenizer.from_pretrained`` (LLaMA's sentencepiece tokenizer: ``<s>``, ``</s>``, ``<unk>``, no
  pad token, a BOS prepended) becomes a word-level ``tokenizers`` tokenizer with the same special tokens and BOS
  template, over the words of the prompt templates and the data, wrapped in ``PreTrainedTokenizerFast`` (same
  ``model_max_length`` and ``padding_side="right"``); the script still adds ``[PAD]`` and resizes the embeddings;
- data: ``alpaca_data.json`` is replaced by synthetic records made from ``seed`` and read by ``utils.jload`` from
  memory (``io.StringIO``): the instruction asks to map words, the input is 3-5 words (or, for a third of the
  records, the words are in the instruction and the input is empty), the output maps each word through a fixed
  random table, so the response is learnable from the prompt;
- ``Trainer(tokenizer=...)`` is ``Trainer(processing_class=...)`` in transformers 5; ``save_state`` and
  ``save_model`` are left out; the ``metadata`` help text of the argument fields is kept;
- ``trainer.train()`` is driven one optimizer update at a time: ``build`` runs the set-up of
  ``Trainer._inner_training_loop`` (``get_train_dataloader``, ``set_initial_training_values``,
  ``_init_training_state``, ``_prepare_for_training`` which creates the optimizer and scheduler, ``zero_grad``) and
  ``train_step`` is one update of ``Trainer._run_epoch`` (``get_batch_samples``, ``training_step`` per micro-batch,
  ``_clip_grad_norm``, ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad``), a new epoch iterator when one
  ends; the callbacks and the log/save hook are left out. ``eval_fn`` is the mean token loss of a given batch in
  eval mode (the script evaluates nothing: ``evaluation_strategy "no"``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP006, UP035, UP045, UP008, C408, SIM115, LOG015, RUF059  (the original's style is kept)

from __future__ import annotations

import copy
import functools
import io
import json
import logging
import os
import pathlib
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.utils.data import Dataset
from transformers import Trainer
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

IGNORE_INDEX = -100
DEFAULT_PAD_TOKEN = "[PAD]"
DEFAULT_EOS_TOKEN = "</s>"
DEFAULT_BOS_TOKEN = "<s>"
DEFAULT_UNK_TOKEN = "<unk>"
PROMPT_DICT = {
    "prompt_input": (
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
    ),
    "prompt_no_input": (
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Response:"
    ),
}


@dataclass
class ModelArguments:
    model_name_or_path: Optional[str] = field(default="facebook/opt-125m")


@dataclass
class DataArguments:
    data_path: str = field(default=None, metadata={"help": "Path to the training data."})


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    cache_dir: Optional[str] = field(default=None)
    optim: str = field(default="adamw_torch")
    model_max_length: int = field(
        default=512,
        metadata={"help": "Maximum sequence length. Sequences will be right padded (and possibly truncated)."},
    )


# ---- utils.py --------------------------------------------------------------------------------------------------

def _make_r_io_base(f, mode: str):
    if not isinstance(f, io.IOBase):
        f = open(f, mode=mode)
    return f


def jload(f, mode="r"):
    """Load a .json file into a dictionary."""
    f = _make_r_io_base(f, mode)
    jdict = json.load(f)
    f.close()
    return jdict


# ---- train.py --------------------------------------------------------------------------------------------------

def smart_tokenizer_and_embedding_resize(
    special_tokens_dict: Dict,
    tokenizer: transformers.PreTrainedTokenizer,
    model: transformers.PreTrainedModel,
):
    """Resize tokenizer and embedding.

    Note: This is the unoptimized version that may make your embedding size not be divisible by 64.
    """
    num_new_tokens = tokenizer.add_special_tokens(special_tokens_dict)
    model.resize_token_embeddings(len(tokenizer))

    if num_new_tokens > 0:
        input_embeddings = model.get_input_embeddings().weight.data
        output_embeddings = model.get_output_embeddings().weight.data

        input_embeddings_avg = input_embeddings[:-num_new_tokens].mean(dim=0, keepdim=True)
        output_embeddings_avg = output_embeddings[:-num_new_tokens].mean(dim=0, keepdim=True)

        input_embeddings[-num_new_tokens:] = input_embeddings_avg
        output_embeddings[-num_new_tokens:] = output_embeddings_avg


def _tokenize_fn(strings: Sequence[str], tokenizer: transformers.PreTrainedTokenizer) -> Dict:
    """Tokenize a list of strings."""
    tokenized_list = [
        tokenizer(
            text,
            return_tensors="pt",
            padding="longest",
            max_length=tokenizer.model_max_length,
            truncation=True,
        )
        for text in strings
    ]
    input_ids = labels = [tokenized.input_ids[0] for tokenized in tokenized_list]
    input_ids_lens = labels_lens = [
        tokenized.input_ids.ne(tokenizer.pad_token_id).sum().item() for tokenized in tokenized_list
    ]
    return dict(
        input_ids=input_ids,
        labels=labels,
        input_ids_lens=input_ids_lens,
        labels_lens=labels_lens,
    )


def preprocess(
    sources: Sequence[str],
    targets: Sequence[str],
    tokenizer: transformers.PreTrainedTokenizer,
    bug=None,
) -> Dict:
    """Preprocess the data by tokenizing."""
    examples = [s + t for s, t in zip(sources, targets)]
    examples_tokenized, sources_tokenized = [_tokenize_fn(strings, tokenizer) for strings in (examples, sources)]
    input_ids = examples_tokenized["input_ids"]
    labels = copy.deepcopy(input_ids)
    if bug != "prompt_not_masked":
        for label, source_len in zip(labels, sources_tokenized["input_ids_lens"]):
            label[:source_len] = IGNORE_INDEX
    return dict(input_ids=input_ids, labels=labels)


class SupervisedDataset(Dataset):
    """Dataset for supervised fine-tuning."""

    def __init__(self, data_path: str, tokenizer: transformers.PreTrainedTokenizer, bug=None):
        super(SupervisedDataset, self).__init__()
        logging.warning("Loading data...")
        list_data_dict = jload(data_path)

        logging.warning("Formatting inputs...")
        prompt_input, prompt_no_input = PROMPT_DICT["prompt_input"], PROMPT_DICT["prompt_no_input"]
        sources = [
            prompt_input.format_map(example) if example.get("input", "") != "" else prompt_no_input.format_map(example)
            for example in list_data_dict
        ]
        targets = [f"{example['output']}{tokenizer.eos_token}" for example in list_data_dict]

        logging.warning("Tokenizing inputs... This may take some time...")
        data_dict = preprocess(sources, targets, tokenizer, bug=bug)

        self.input_ids = data_dict["input_ids"]
        self.labels = data_dict["labels"]

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, i) -> Dict[str, torch.Tensor]:
        return dict(input_ids=self.input_ids[i], labels=self.labels[i])


@dataclass
class DataCollatorForSupervisedDataset(object):
    """Collate examples for supervised fine-tuning."""

    tokenizer: transformers.PreTrainedTokenizer
    bug: Optional[str] = None

    def __call__(self, instances: Sequence[Dict]) -> Dict[str, torch.Tensor]:
        input_ids, labels = tuple([instance[key] for instance in instances] for key in ("input_ids", "labels"))
        input_ids = torch.nn.utils.rnn.pad_sequence(
            input_ids, batch_first=True, padding_value=self.tokenizer.pad_token_id
        )
        if self.bug == "labels_padded_with_pad_id":
            labels = torch.nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=self.tokenizer.pad_token_id)
        else:
            labels = torch.nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=IGNORE_INDEX)
        if self.bug == "labels_shifted_by_hand":
            # the labels shifted left in the collator although the causal LM shifts them itself
            labels = torch.cat([labels[:, 1:], labels.new_full((labels.size(0), 1), IGNORE_INDEX)], dim=1)
        return dict(
            input_ids=input_ids,
            labels=labels,
            attention_mask=input_ids.ne(self.tokenizer.pad_token_id),
        )


def make_supervised_data_module(tokenizer: transformers.PreTrainedTokenizer, data_args, bug=None) -> Dict:
    """Make dataset and collator for supervised fine-tuning."""
    train_dataset = SupervisedDataset(tokenizer=tokenizer, data_path=data_args.data_path, bug=bug)
    data_collator = DataCollatorForSupervisedDataset(tokenizer=tokenizer, bug=bug)
    return dict(train_dataset=train_dataset, eval_dataset=None, data_collator=data_collator)


# ---- stand-ins for what cannot be downloaded -------------------------------------------------------------------

N_WORDS = 30


def make_records(rng, n):
    """Alpaca-style records: map each word through a fixed random table."""
    table = rng.permutation(N_WORDS)
    records = []
    for _ in range(n):
        words = [int(w) for w in rng.integers(0, N_WORDS, size=int(rng.integers(3, 6)))]
        src = " ".join(f"w{w}" for w in words)
        out = " ".join(f"v{table[w]}" for w in words)
        if rng.random() < 1 / 3:
            records.append({"instruction": f"Map the words {src} .", "input": "", "output": out})
        else:
            records.append({"instruction": "Map each word of the input.", "input": src, "output": out})
    return records


def make_tokenizer(model_max_length, padding_side):
    """Word-level stand-in for LLaMA's tokenizer: <unk> 0, <s> 1, </s> 2, a BOS prepended, no pad token."""
    pre = pre_tokenizers.Whitespace()
    words = []
    for text in list(PROMPT_DICT.values()) + ["Map the words . Map each word of the input."]:
        words += [w for w, _ in pre.pre_tokenize_str(text) if w not in ("{", "}")]
    words += [f"w{k}" for k in range(N_WORDS)] + [f"v{k}" for k in range(N_WORDS)]
    vocab = {DEFAULT_UNK_TOKEN: 0, DEFAULT_BOS_TOKEN: 1, DEFAULT_EOS_TOKEN: 2}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token=DEFAULT_UNK_TOKEN))
    tok.pre_tokenizer = pre
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token=DEFAULT_UNK_TOKEN, bos_token=DEFAULT_BOS_TOKEN, eos_token=DEFAULT_EOS_TOKEN,
        model_max_length=model_max_length, padding_side=padding_side,
        model_input_names=["input_ids", "attention_mask"])


# ---- train.py train() ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    parser = transformers.HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=[
        "--model_name_or_path", "llama-7b-hf", "--data_path", "./alpaca_data.json",
        "--output_dir", os.path.join(tempfile.gettempdir(), "alpaca_port"),
        "--num_train_epochs", "3", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
        "--gradient_accumulation_steps", "2", "--eval_strategy", "no", "--save_strategy", "steps",
        "--save_steps", "2000", "--save_total_limit", "1", "--learning_rate", "1e-3", "--weight_decay", "0.",
        "--warmup_steps", "0.03", "--lr_scheduler_type", "cosine", "--logging_steps", "1",
        "--model_max_length", "96", "--seed", str(seed), "--use_cpu", "--report_to", "none"])
    transformers.set_seed(training_args.seed)
    rng = np.random.default_rng(seed)
    data_args.data_path = io.StringIO(json.dumps(make_records(rng, 128)))

    tokenizer = make_tokenizer(model_max_length=training_args.model_max_length, padding_side="right")
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                      max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    model = transformers.AutoModelForCausalLM.from_config(config)

    special_tokens_dict = dict()
    if tokenizer.pad_token is None:
        special_tokens_dict["pad_token"] = DEFAULT_PAD_TOKEN
    if tokenizer.eos_token is None:
        special_tokens_dict["eos_token"] = DEFAULT_EOS_TOKEN
    if tokenizer.bos_token is None:
        special_tokens_dict["bos_token"] = DEFAULT_BOS_TOKEN
    if tokenizer.unk_token is None:
        special_tokens_dict["unk_token"] = DEFAULT_UNK_TOKEN

    smart_tokenizer_and_embedding_resize(
        special_tokens_dict=special_tokens_dict,
        tokenizer=tokenizer,
        model=model,
    )

    data_module = make_supervised_data_module(tokenizer=tokenizer, data_args=data_args, bug=bug)
    trainer = Trainer(model=model, processing_class=tokenizer, args=training_args, **data_module)

    # trainer.train(): the set-up of Trainer._inner_training_loop
    args = trainer.args
    trainer.is_in_train = True
    train_dataloader = trainer.get_train_dataloader()
    (num_train_epochs, num_update_steps_per_epoch, _num_examples, _num_train_samples, _total_train_batch_size,
     steps_in_epoch, max_steps) = trainer.set_initial_training_values(args, train_dataloader)
    trainer._init_training_state(max_steps, num_update_steps_per_epoch, num_train_epochs, None, None)
    wrapped, train_dataloader = trainer._prepare_for_training(max_steps, train_dataloader, None)
    trainer._tr_loss = torch.tensor(0.0, device=args.device)
    wrapped.zero_grad()

    loop = {"epoch": -1, "iterator": None, "update_step": num_update_steps_per_epoch, "step": -1}

    def train_step():
        """One optimizer update of Trainer._run_epoch."""
        if loop["update_step"] >= num_update_steps_per_epoch:  # the next epoch of _inner_training_loop
            loop["epoch"] += 1
            if hasattr(train_dataloader, "set_epoch"):
                train_dataloader.set_epoch(loop["epoch"])
            loop["iterator"], loop["update_step"], loop["step"] = iter(train_dataloader), 0, -1
        remainder = steps_in_epoch % args.gradient_accumulation_steps
        if remainder == 0:
            remainder = args.gradient_accumulation_steps
        num_batches = (
            args.gradient_accumulation_steps if loop["update_step"] != (num_update_steps_per_epoch - 1) else remainder
        )
        batch_samples, num_items_in_batch = trainer.get_batch_samples(loop["iterator"], num_batches, args.device)
        trainer.current_gradient_accumulation_steps = len(batch_samples)
        losses = []
        for inputs in batch_samples:
            loop["step"] += 1
            step = loop["step"]
            do_sync_step = (step + 1) % args.gradient_accumulation_steps == 0 or (step + 1) == steps_in_epoch
            trainer.accelerator.gradient_state._set_sync_gradients(do_sync_step)
            tr_loss_step = trainer.training_step(wrapped, inputs, num_items_in_batch)
            trainer._tr_loss += tr_loss_step
            losses.append(tr_loss_step)
            if do_sync_step:
                if args.max_grad_norm > 0:
                    trainer._clip_grad_norm(wrapped)
                trainer.optimizer.step()
                if not trainer.accelerator.optimizer_step_was_skipped:
                    trainer.lr_scheduler.step()
                wrapped.zero_grad()
                trainer.state.global_step += 1
                trainer.state.epoch = loop["epoch"] + (step + 1) / steps_in_epoch
        loop["update_step"] += 1
        return torch.stack(losses).sum()

    def eval_fn(model, batch):
        """The mean token loss of a batch in eval mode."""
        model.eval()
        with torch.no_grad():
            loss = model(**batch).loss
        model.train()
        return float(loss)

    first = data_module["data_collator"]([data_module["train_dataset"][i] for i in range(4)])
    return Program(name="alpaca_sft", model=model, batch=first, loss_fn=lambda outputs, labels: outputs.loss,
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # the prompt tokens not set to IGNORE_INDEX in the labels (the masking loop of preprocess without effect, what
    # https://github.com/tatsu-lab/stanford_alpaca/issues/101 reported): the loss trains the model to produce the
    # instruction and input, not only the response.
    Bug("prompt_not_masked", functools.partial(_build, bug="prompt_not_masked"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the labels padded with the pad token id instead of IGNORE_INDEX: the padding is scored as tokens to
    # predict after every response.
    Bug("labels_padded_with_pad_id", functools.partial(_build, bug="labels_padded_with_pad_id"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the labels shifted by hand in the collator while the causal LM shifts them again: every position is
    # trained to predict the token two ahead.
    Bug("labels_shifted_by_hand", functools.partial(_build, bug="labels_shifted_by_hand"), "learning_ledger",
        ("TASK",)),
]
