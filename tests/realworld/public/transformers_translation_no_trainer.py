"""The Transformers example "run_translation_no_trainer.py": a sequence-to-sequence model (``--model_type bart``,
trained from scratch: ``CONFIG_MAPPING[args.model_type]()`` + ``AutoModelForSeq2SeqLM.from_config``) fine-tuned on
translation pairs with Accelerate: the ``preprocess_function`` (source prefix, ``tokenizer(inputs)``,
``tokenizer(text_target=targets)``), ``DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)``
(dynamic padding; the labels padded with -100 so padding is ignored by the loss, ``decoder_input_ids`` made by the
model's ``prepare_decoder_input_ids_from_labels``), AdamW over two parameter groups (no weight decay on biases and
layer norms), ``get_scheduler("linear")``, ``accelerator.prepare``, and the epoch loop (``model.train()``,
``outputs.loss / gradient_accumulation_steps``, ``accelerator.backward``, step/scheduler/zero_grad when ``step %
gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1``), then ``generate`` under ``model.eval()``
for the evaluation.

Source: https://github.com/huggingface/transformers
Commit: 6566fb3c830ab25c0cde2e0dab093b13036a53c8
Files: examples/pytorch/translation/run_translation_no_trainer.py
License: Apache-2.0 (Copyright The HuggingFace Team and The HuggingFace Inc. team; LICENSES/huggingface-transformers.txt
         is the Apache-2.0 text under the repository's copyright line: the stored LICENSE snapshot was garbled)
Domain: sequence-to-sequence translation (encoder-decoder transformer, Accelerate loop)

Deviations from the original:
- the arguments are those of ``--model_type bart --source_lang en --target_lang ro --seed <seed>`` with the parser's
  defaults (per-device batch 8, weight decay 0, linear schedule, no warmup, gradient_accumulation_steps 1, 3 epochs,
  ignore_pad_token_for_loss True, pad_to_max_length False) except: learning_rate 5e-5 -> 1e-3 (the model starts from
  random weights and the run is short), max_source_length 1024 -> 16 and max_target_length 128 -> 16;
- the Bart config from ``CONFIG_MAPPING["bart"]()`` is shrunk for 2 CPU cores: vocab 50265 -> 72, d_model 32, 2
  encoder and 2 decoder layers, 2 heads, ffn 64, max_position_embeddings 32 (special token ids unchanged: bos 0,
  pad 1, eos 2, decoder_start 2);
- no tokenizer can be downloaded and the script refuses to build one from scratch: a word-level ``tokenizers``
  tokenizer (whitespace split, Bart's "<s> $A </s>" template, bos/pad/eos/unk 0-3) is wrapped in
  ``PreTrainedTokenizerFast`` and stands for ``AutoTokenizer.from_pretrained(--tokenizer_name)``;
- data: the WMT16 en-ro dataset (``load_dataset``; ``datasets`` is not installed) is replaced by 256 training and
  32 validation synthetic pairs made from ``seed`` in the same ``{"translation": {"en": ..., "ro": ...}}`` layout:
  an "en" sentence is 3-8 words of 34 source words, its "ro" translation maps each word through a fixed random
  dictionary of 34 target words, in order; ``preprocess_function`` runs once over the whole column (what
  ``datasets.map(batched=True)`` does) and the rows are kept as a list of dicts;
- ``evaluate.load("sacrebleu")`` is not available: the evaluation on a batch returns the share of target tokens
  the generated sequence gets right (position by position) instead of BLEU; telemetry, hub, tracking, logging setup,
  checkpointing and the progress bar are left out; ``num_beams=None`` (the parser's default) is left out of
  ``gen_kwargs``, which transformers 5's ``generate`` no longer accepts; accelerate's process-wide state is reset before
  ``Accelerator(cpu=True)`` is built (several builds share one process here);
- one ``train_step`` is one optimizer update of the epoch loop (``model.train()`` at the start of each epoch);
  ``eval_fn`` is the evaluation loop's body (``model.eval()``, no_grad, ``generate``) on a given batch.
"""

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import set_seed
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.utils.data import DataLoader
from transformers import (
    CONFIG_MAPPING,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    MBartTokenizer,
    MBartTokenizerFast,
    PreTrainedTokenizerFast,
    SchedulerType,
    default_data_collator,
    get_scheduler,
)
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

N_WORDS = 34


def parse_args(seed):
    """The parser's defaults for ``--model_type bart --source_lang en --target_lang ro --seed <seed>`` (sizes and lr
    changed, see the module docstring)."""
    return argparse.Namespace(
        dataset_name=None, predict_with_generate=True, dataset_config_name=None, train_file=None, num_beams=None,
        max_source_length=16, max_target_length=16, val_max_target_length=None, pad_to_max_length=False,
        validation_file=None, ignore_pad_token_for_loss=True, source_lang="en", target_lang="ro", source_prefix=None,
        preprocessing_num_workers=None, overwrite_cache=False, max_length=128, model_name_or_path=None,
        config_name=None, tokenizer_name=None, use_slow_tokenizer=False, per_device_train_batch_size=8,
        per_device_eval_batch_size=8, learning_rate=1e-3, weight_decay=0.0, num_train_epochs=3, max_train_steps=None,
        gradient_accumulation_steps=1, lr_scheduler_type=SchedulerType("linear"), num_warmup_steps=0,
        output_dir=None, seed=seed, model_type="bart", push_to_hub=False, hub_model_id=None, hub_token=None,
        trust_remote_code=False, checkpointing_steps=None, resume_from_checkpoint=None, with_tracking=False,
        report_to="all")


def make_tokenizer():
    """A word-level tokenizer over the synthetic vocabulary, with Bart's special tokens and template."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for k in range(N_WORDS):
        vocab[f"en{k}"] = len(vocab)
    for k in range(N_WORDS):
        vocab[f"ro{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def make_raw_datasets(seed):
    """{"train": {"translation": [...]}, "validation": {...}}: each "ro" word is the dictionary image of the "en"
    word at the same position."""
    rng = np.random.RandomState(seed)
    dictionary = rng.permutation(N_WORDS)

    def pairs(n):
        rows = []
        for _ in range(n):
            words = rng.randint(0, N_WORDS, size=rng.randint(3, 9))
            rows.append({"en": " ".join(f"en{w}" for w in words), "ro": " ".join(f"ro{dictionary[w]}" for w in words)})
        return {"translation": rows}

    return {"train": pairs(256), "validation": pairs(32)}


def _build(seed, bug=None):
    args = parse_args(seed)

    # Initialize the accelerator. (A fresh process state first: several builds share one test process.)
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=True)

    # If passed along, set the training seed now.
    if args.seed is not None:
        set_seed(args.seed)

    raw_datasets = make_raw_datasets(args.seed)

    config = CONFIG_MAPPING[args.model_type](
        vocab_size=4 + 2 * N_WORDS, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32)
    tokenizer = make_tokenizer()
    model = AutoModelForSeq2SeqLM.from_config(config, trust_remote_code=args.trust_remote_code)

    # We resize the embeddings only when necessary to avoid index errors. If you are creating a model from scratch
    # on a small vocab and want a smaller embedding size, remove this test.
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embedding_size:
        model.resize_token_embeddings(len(tokenizer))

    # Set decoder_start_token_id
    if model.config.decoder_start_token_id is None and isinstance(tokenizer, (MBartTokenizer, MBartTokenizerFast)):
        assert (
            args.target_lang is not None and args.source_lang is not None
        ), "mBart requires --target_lang and --source_lang"
        if isinstance(tokenizer, MBartTokenizer):
            model.config.decoder_start_token_id = tokenizer.lang_code_to_id[args.target_lang]
        else:
            model.config.decoder_start_token_id = tokenizer.convert_tokens_to_ids(args.target_lang)

    if model.config.decoder_start_token_id is None:
        raise ValueError("Make sure that `config.decoder_start_token_id` is correctly defined")

    prefix = args.source_prefix if args.source_prefix is not None else ""

    # Preprocessing the datasets.
    # First we tokenize all the texts.
    column_names = list(raw_datasets["train"].keys())

    # Get the language codes for input/target.
    source_lang = args.source_lang.split("_")[0]
    target_lang = args.target_lang.split("_")[0]

    padding = "max_length" if args.pad_to_max_length else False

    # Temporarily set max_target_length for training.
    max_target_length = args.max_target_length
    padding = "max_length" if args.pad_to_max_length else False

    def preprocess_function(examples):
        inputs = [ex[source_lang] for ex in examples["translation"]]
        if bug == "targets_from_source_lang":
            # the targets read from the source-language column (copy-paste slip): the model learns to copy its input
            targets = [ex[source_lang] for ex in examples["translation"]]
        else:
            targets = [ex[target_lang] for ex in examples["translation"]]
        inputs = [prefix + inp for inp in inputs]
        model_inputs = tokenizer(inputs, max_length=args.max_source_length, padding=padding, truncation=True)

        # Tokenize targets with the `text_target` keyword argument
        labels = tokenizer(text_target=targets, max_length=max_target_length, padding=padding, truncation=True)

        # If we are padding here, replace all tokenizer.pad_token_id in the labels by -100 when we want to ignore
        # padding in the loss.
        if padding == "max_length" and args.ignore_pad_token_for_loss:
            labels["input_ids"] = [
                [(l if l != tokenizer.pad_token_id else -100) for l in label] for label in labels["input_ids"]
            ]

        model_inputs["labels"] = labels["input_ids"]
        return model_inputs

    def dataset_map(split):
        """``raw_datasets[split].map(preprocess_function, batched=True, remove_columns=column_names)``."""
        columns = preprocess_function(raw_datasets[split])
        rows = [dict(zip(columns.keys(), values)) for values in zip(*columns.values())]
        return [{k: v for k, v in row.items() if k not in column_names} for row in rows]

    processed_datasets = {"train": dataset_map("train"), "validation": dataset_map("validation")}

    train_dataset = processed_datasets["train"]
    eval_dataset = processed_datasets["validation"]

    # DataLoaders creation:
    label_pad_token_id = -100 if args.ignore_pad_token_for_loss else tokenizer.pad_token_id
    if bug == "label_pad_token_is_pad":
        # the labels padded with the tokenizer's pad id instead of -100 (the workaround suggested in
        # https://github.com/huggingface/transformers/issues/22634): padding positions count in the loss
        label_pad_token_id = tokenizer.pad_token_id
    if args.pad_to_max_length:
        # If padding was already done ot max length, we use the default data collator that will just convert everything
        # to tensors.
        data_collator = default_data_collator
    else:
        # Otherwise, `DataCollatorWithPadding` will apply dynamic padding for us (by padding to the maximum length of
        # the samples passed). When using mixed precision, we add `pad_to_multiple_of=8` to pad all tensors to multiple
        # of 8s, which will enable the use of Tensor Cores on NVIDIA hardware with compute capability >= 7.5 (Volta).
        # For fp8, we pad to multiple of 16.
        if accelerator.mixed_precision == "fp8":
            pad_to_multiple_of = 16
        elif accelerator.mixed_precision != "no":
            pad_to_multiple_of = 8
        else:
            pad_to_multiple_of = None
        data_collator = DataCollatorForSeq2Seq(
            tokenizer,
            model=model,
            label_pad_token_id=label_pad_token_id,
            pad_to_multiple_of=pad_to_multiple_of,
        )

    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=data_collator, batch_size=args.per_device_train_batch_size
    )
    eval_dataloader = DataLoader(eval_dataset, collate_fn=data_collator, batch_size=args.per_device_eval_batch_size)

    # Optimizer
    # Split weights in two groups, one with weight decay and the other not.
    no_decay = ["bias", "LayerNorm.weight", "layer_norm.weight"]
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
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate)

    # Scheduler and math around the number of training steps.
    overrode_max_train_steps = False
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if args.max_train_steps is None:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
        overrode_max_train_steps = True

    lr_scheduler = get_scheduler(
        name=args.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=args.num_warmup_steps,
        num_training_steps=args.max_train_steps,
    )

    # Prepare everything with our `accelerator`.
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )

    # We need to recalculate our total training steps as the size of the training dataloader may have changed.
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if overrode_max_train_steps:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
    # Afterwards we recalculate our number of training epochs
    args.num_train_epochs = math.ceil(args.max_train_steps / num_update_steps_per_epoch)

    state = {"it": None, "step": 0, "completed_steps": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # `for epoch in range(...): model.train(); for step, batch in ...`
            model.train()
            state["it"], state["step"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        micro_losses = []
        while True:
            batch = next_batch()
            step = state["step"]
            state["step"] += 1
            outputs = model(**batch)
            loss = outputs.loss
            micro_losses.append(loss.item())
            loss = loss / args.gradient_accumulation_steps
            accelerator.backward(loss)
            if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                state["completed_steps"] += 1
                return torch.tensor(sum(micro_losses) / len(micro_losses))

    def eval_fn(model, batch):
        model.eval()

        if args.val_max_target_length is None:
            args.val_max_target_length = args.max_target_length

        gen_kwargs = {
            "max_length": args.val_max_target_length if args is not None else config.max_length,
            "num_beams": args.num_beams,
        }
        if gen_kwargs["num_beams"] is None:  # transformers 5 no longer accepts num_beams=None (the parser's default)
            del gen_kwargs["num_beams"]
        with torch.no_grad():
            generated_tokens = accelerator.unwrap_model(model).generate(
                batch["input_ids"],
                attention_mask=batch["attention_mask"],
                **gen_kwargs,
            )

            generated_tokens = accelerator.pad_across_processes(
                generated_tokens, dim=1, pad_index=tokenizer.pad_token_id
            )
            labels = batch["labels"]
            if not args.pad_to_max_length:
                # If we did not pad to max length, we need to pad the labels too
                labels = accelerator.pad_across_processes(batch["labels"], dim=1, pad_index=tokenizer.pad_token_id)

            generated_tokens = accelerator.gather(generated_tokens).cpu().numpy()
            labels = accelerator.gather(labels).cpu().numpy()

            if args.ignore_pad_token_for_loss:
                # Replace -100 in the labels as we can't decode them.
                labels = np.where(labels != -100, labels, tokenizer.pad_token_id)

        # the metric (sacrebleu in the original): the share of target tokens generated right, position by position
        # (the generated sequence starts with decoder_start_token_id, so it is compared from its second token)
        generated = generated_tokens[:, 1:1 + labels.shape[1]]
        width = min(generated.shape[1], labels.shape[1])
        real = labels[:, :width] != tokenizer.pad_token_id
        right = (generated[:, :width] == labels[:, :width]) & real
        return float(right.sum() / max(real.sum(), 1))

    first = next(iter(DataLoader(train_dataset, collate_fn=data_collator, batch_size=args.per_device_train_batch_size)))
    return Program(name="transformers_translation_no_trainer", model=model, batch=first,
                   loss_fn=lambda outputs, labels: outputs.loss, optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # DataCollatorForSeq2Seq given label_pad_token_id=tokenizer.pad_token_id (the workaround suggested in
    # https://github.com/huggingface/transformers/issues/22634): the label padding is no longer -100, so the loss
    # averages over padding positions too and the model is trained to emit <pad> after every short sentence.
    Bug("label_pad_token_is_pad", functools.partial(_build, bug="label_pad_token_is_pad"), "learning_ledger",
        ("OBJECTIVE",)),
    # targets read from the source-language column (classic copy-paste slip): the model learns to copy its input.
    Bug("targets_from_source_lang", functools.partial(_build, bug="targets_from_source_lang"), "learning_ledger",
        ("TASK",)),
]
