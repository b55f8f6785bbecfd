"""TRL's ``SFTTrainer`` fine-tuning a causal LM on a prompt-completion dataset, the way ``trl/scripts/sft.py`` runs
it: ``SFTConfig`` (TRL's defaults over ``TrainingArguments``: gradient checkpointing on, ``completion_only_loss``
decided from the dataset's format), ``SFTTrainer.__init__`` choosing the pad token (the tokenizer's, else its EOS)
and building TRL's ``DataCollatorForLanguageModeling`` (labels padded with -100 by length), ``_prepare_dataset``
(EOS appended to each completion, prompt and prompt+completion tokenized, a ``completion_mask`` turned into labels
with the prompt set to -100, truncation to ``max_length``), and ``compute_loss`` (the Trainer's loss plus TRL's
entropy / token-accuracy / token-count metrics), trained by the ``transformers.Trainer`` loop (AdamW, linear schedule,
``max_grad_norm`` 1.0).

Source: https://github.com/huggingface/trl
Commit: f2cd57710ae345ea6428ae95363267fcf38a3dc8
Files: trl/trainer/sft_trainer.py, trl/trainer/sft_config.py, trl/trainer/base_config.py, trl/trainer/utils.py
  (``pad``, ``entropy_from_logits``), trl/data_utils.py (``_tokenize``), trl/scripts/sft.py
License: Apache-2.0 (Copyright 2020-2026 The HuggingFace Team; LICENSES/huggingface-trl.txt)
Domain: supervised fine-tuning with a HF-Trainer-based trainer (prompt-completion, completion-only loss)

Deviations from the original:
- trl is not installed here: the classes and functions above are copied into this file, trimmed to the paths this
  run takes (a text-only, non-conversational prompt-completion dataset; no PEFT, VLM, chat template, packing,
  padding-free, Liger or DeepSpeed branches; no telemetry, model card or tags). ``SFTConfig`` merges TRL's
  ``_BaseConfig`` into it and keeps its fields without their help text; ``SFTTrainer`` subclasses
  ``transformers.Trainer`` directly (``_BaseTrainer`` only adds telemetry);
- ``datasets`` is not installed: a dataset is a list of dicts and ``Dataset.map``/``filter`` are list
  comprehensions over it (same functions, same order);
- the script's command line is ``--loss_type nll --bf16 False --use_cpu --learning_rate 1e-3 --max_length 32
  --report_to none``: the model's own loss (``loss_type="chunked_nll"``, the default, patches the LM head's forward
  and is not copied), float32 on the CPU, and lr 1e-3 instead of 2e-5 because nothing pre-trained can be
  downloaded: the model is a ``GPT2LMHeadModel`` from a tiny ``GPT2Config`` (n_embd 32, 2 layers, 2 heads,
  64 positions) with random weights; the tokenizer is a word-level ``tokenizers`` tokenizer with GPT-2's
  ``<|endoftext|>`` as EOS and no pad token (so TRL pads with EOS, as it does for GPT-2);
- data: 512 training and 64 evaluation prompt-completion pairs made from ``seed``: the prompt is 3-6 symbols
  ``a0..a19`` followed by ``=``, the completion the same symbols translated to ``b0..b19`` in order;
- ``trainer.train()`` is driven one optimizer update at a time: ``build`` runs the set-up of
  ``Trainer._inner_training_loop`` and ``train_step`` is one update of ``Trainer._run_epoch`` (as in this corpus's
  ``transformers_run_glue`` port); callbacks, logging, evaluation and saving are left out. ``eval_fn`` is
  ``model.eval()`` (as ``evaluation_loop`` does) and ``prediction_step`` on a given batch, returning the loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF012, SIM201  (the original's code style is kept as written)

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pathlib
import random
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.data.data_collator import DataCollatorMixin
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()
logger = logging.getLogger(__name__)

N_SYMBOLS = 20


# ---- trl/trainer/utils.py ---------------------------------------------------------------------------------------

def pad(
    tensors: list[torch.Tensor],
    padding_value: int = 0,
    padding_side: str = "right",
    pad_to_multiple_of: int | None = None,
) -> torch.Tensor:
    """
    Pads a list of tensors to the same shape along the first dimension.
    """
    # Determine the maximum shape for each dimension
    output_shape = np.max([t.shape for t in tensors], 0).tolist()

    # Apply pad_to_multiple_of to the first (sequence) dimension
    if pad_to_multiple_of is not None:
        remainder = output_shape[0] % pad_to_multiple_of
        if remainder != 0:
            output_shape[0] += pad_to_multiple_of - remainder

    # Create an output tensor filled with the padding value
    output = torch.full((len(tensors), *output_shape), padding_value, dtype=tensors[0].dtype, device=tensors[0].device)

    for i, t in enumerate(tensors):
        if padding_side == "left":
            seq_start = output_shape[0] - t.shape[0]
        elif padding_side == "right":
            seq_start = 0
        else:
            raise ValueError("padding_side must be 'left' or 'right'")

        # Define the slices
        seq_slice = slice(seq_start, seq_start + t.shape[0])
        slices = (seq_slice,) + tuple(slice(0, s) for s in t.shape[1:])
        output[i][slices] = t

    return output


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 128) -> torch.Tensor:
    """
    Compute the Shannon entropy (in nats) for each row of *logits* in a memory-efficient way.
    """
    original_shape = logits.shape[:-1]  # all dims except num_classes
    num_classes = logits.shape[-1]

    # Flatten all leading dimensions into one
    flat_logits = logits.reshape(-1, num_classes)

    entropies = []
    for chunk in flat_logits.split(chunk_size, dim=0):
        logps = F.log_softmax(chunk, dim=-1)
        chunk_entropy = -(torch.exp(logps) * logps).sum(-1)
        entropies.append(chunk_entropy)

    entropies = torch.cat(entropies, dim=0)
    return entropies.reshape(original_shape)


# ---- trl/data_utils.py ------------------------------------------------------------------------------------------

def _tokenize(
    processing_class: PreTrainedTokenizerBase,
    input: str | list,
    **apply_chat_template_kwargs,
) -> dict[str, list]:
    """
    Tokenize a single example for dataset preprocessing (the non-conversational text path).
    """
    result = processing_class(text=input)
    return result


def get_dataset_column_names(dataset):
    # a list of dicts stands in for a `datasets.Dataset`
    return list(dataset[0].keys())


# ---- trl/trainer/base_config.py + trl/trainer/sft_config.py ---------------------------------------------------

@dataclass
class SFTConfig(TrainingArguments):
    r"""
    Configuration class for the [`SFTTrainer`] (with TRL's `_BaseConfig` overrides of `TrainingArguments`).
    """

    # _BaseConfig: override fields from TrainingArguments to set defaults preferred by all TRL trainers.
    logging_steps: float = field(default=10)
    gradient_checkpointing: bool = field(default=True)
    bf16: bool | None = field(default=None)
    lr_scheduler_kwargs: dict | str | None = field(default=None)
    use_liger_kernel: bool = field(default=False)
    torch_empty_cache_steps: int | None = field(default=None)

    # SFTConfig
    learning_rate: float = field(default=2e-5)
    model_init_kwargs: dict[str, Any] | str | None = field(default=None)
    router_aux_loss_coef: float = field(default=0.001)
    trust_remote_code: bool = field(default=False)
    chat_template_path: str | None = field(default=None)
    dataset_text_field: str = field(default="text")
    dataset_kwargs: dict[str, Any] | None = field(default=None)
    dataset_num_proc: int | None = field(default=None)
    eos_token: str | None = field(default=None)
    max_length: int | None = field(default=1024)
    truncation_mode: str = field(default="keep_start")
    shuffle_dataset: bool = field(default=False)
    packing: bool = field(default=False)
    packing_strategy: str = field(default="bfd")
    padding_free: bool = field(default=False)
    pad_to_multiple_of: int | None = field(default=None)
    eval_packing: bool | None = field(default=None)
    completion_only_loss: bool | None = field(default=None)
    assistant_only_loss: bool = field(default=False)
    loss_type: str | None = field(default=None)
    activation_offloading: bool = field(default=False)
    pad_token: str | None = field(default=None)

    def __post_init__(self):
        # _BaseConfig
        self.bf16 = not (self.fp16) if self.bf16 is None else self.bf16

        # SFTConfig
        if self.packing_strategy == "bfd-requeue":
            self.packing_strategy = "bfd_split"

        # When unset, default to "chunked_nll" unless `use_liger_kernel=True`, in which case default to "nll".
        if self.loss_type is None:
            self.loss_type = "nll" if self.use_liger_kernel else "chunked_nll"

        super().__post_init__()


# ---- trl/trainer/sft_trainer.py ---------------------------------------------------------------------------------

@dataclass
class DataCollatorForLanguageModeling(DataCollatorMixin):
    """
    Data collator used for language modeling data. Inputs are dynamically padded to the maximum length of a batch.
    """

    pad_token_id: int
    padding_free: bool = False
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"
    bug: str | None = None

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        input_ids = [example["input_ids"] for example in examples]
        batch_seq_lengths = [example["seq_lengths"] for example in examples] if "seq_lengths" in examples[0] else None
        labels = [example.get("labels", example["input_ids"]) for example in examples]

        # Convert to tensor
        input_ids = [torch.tensor(ids) for ids in input_ids]
        labels = [torch.tensor(lbl) for lbl in labels]

        # For padding-free, we should NOT create attention_mask as it causes FlashAttention to ignore position_ids and
        # compute wrong cu_seq_lens from the all-1s mask
        if self.padding_free:
            if batch_seq_lengths is not None:
                position_ids = self.get_position_ids_from_packed_seq_lengths(batch_seq_lengths)
            else:
                position_ids = [torch.arange(len(ids)) for ids in input_ids]
        else:
            attention_mask = [torch.ones_like(ids) for ids in input_ids]

        # If padding_free, flatten everything into a single sequence
        output = {}
        if self.padding_free:
            input_ids = [torch.cat(input_ids, dim=0)]
            labels = [torch.cat(labels, dim=0)]
            position_ids = [torch.cat(position_ids, dim=0)]

        # Pad
        output["input_ids"] = pad(
            input_ids,
            padding_value=self.pad_token_id,
            padding_side="right",
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        output["labels"] = pad(
            labels, padding_value=-100, padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of
        )
        if self.bug == "eos_masked_as_padding":
            # the padding found by token id (as transformers' language-modeling collator does): with the pad token
            # being the EOS, every real EOS label is set to -100 too
            output["labels"][output["input_ids"] == self.pad_token_id] = -100
        if self.padding_free:
            output["position_ids"] = pad(
                position_ids, padding_value=0, padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of
            )
            output["labels"][output["position_ids"] == 0] = -100
        else:
            output["attention_mask"] = pad(
                attention_mask, padding_value=0, padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of
            )
        return output

    @staticmethod
    def get_position_ids_from_packed_seq_lengths(batch_seq_lengths: list[list[int]]) -> list[torch.Tensor]:
        """
        Get position IDs for packed sequences.
        """
        # Get lengths per row
        example_lengths = [sum(seq_lengths) for seq_lengths in batch_seq_lengths]
        # Flat list of lengths
        batch_seq_lengths = torch.tensor(
            [seq_length for seq_lengths in batch_seq_lengths for seq_length in seq_lengths]
        )
        position_ids = torch.ones(sum(example_lengths), dtype=batch_seq_lengths.dtype)
        position_ids[0] = 0
        # Reset position ids to 0 at the start of each sequence
        position_ids[batch_seq_lengths[:-1].cumsum(0)] = -(batch_seq_lengths[:-1] - 1)
        position_ids = position_ids.cumsum(0)
        # Split back into one tensor per example
        return list(position_ids.split(example_lengths))


class SFTTrainer(Trainer):
    """
    Trainer for Supervised Fine-Tuning (SFT) method (the text-only, non-PEFT paths of TRL's `SFTTrainer`).
    """

    _tag_names = ["trl", "sft"]
    _name = "SFT"

    def __init__(
        self,
        model,
        args: SFTConfig | None = None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class: PreTrainedTokenizerBase | None = None,
        compute_loss_func: Callable | None = None,
        compute_metrics: Callable | None = None,
        callbacks=None,
        optimizers=(None, None),
        optimizer_cls_and_kwargs=None,
        preprocess_logits_for_metrics=None,
        formatting_func: Callable[[dict], str] | None = None,
        bug: str | None = None,
    ):
        if train_dataset is None:
            raise ValueError("`train_dataset` is required")

        # Processing class
        self._tokenizer = processing_class
        self._is_vlm = False

        if args.eos_token is not None:
            self._tokenizer.eos_token = args.eos_token

        # In Prompt Tuning a small set of trainable virtual tokens (continuous prompt embeddings) is prepended to the
        # input. We store the number of these tokens so we can account for them correctly when calculating accuracy.
        self.num_virtual_tokens = 0

        # Data collator
        # BFD packing requires padding-free mode; otherwise, the collator outputs padded attention masks, causing
        # FlashAttention to ignore position_ids and recompute them incorrectly from the padded attention mask.
        self.padding_free = args.padding_free or (args.packing and args.packing_strategy in {"bfd", "bfd_split"})

        # Decide whether to use completion-only loss: if not specified, then it is set to True if the dataset format
        # is prompt-completion, and False if the dataset format is language modeling.
        dataset_sample = next(iter(train_dataset))
        if args.completion_only_loss is None:
            self.completion_only_loss = "prompt" in dataset_sample and "completion" in dataset_sample
        else:
            self.completion_only_loss = args.completion_only_loss

        self._is_vision_dataset = "image" in dataset_sample or "images" in dataset_sample

        if data_collator is None and not self._is_vision_dataset:
            # Get the pad token: if not provided, use the one from the processing class or the eos token
            # if the processing class does not have a pad token.
            pad_token = args.pad_token or self._tokenizer.pad_token or self._tokenizer.eos_token
            if pad_token not in self._tokenizer.get_vocab():
                raise ValueError(
                    f"The specified `pad_token` ('{pad_token}') is not found in the vocabulary of the given "
                    f"`processing_class` ({processing_class.__class__.__name__}). Ensure that the `pad_token` exists "
                    "in the vocabulary before using it as a padding token."
                )
            self._tokenizer.pad_token = pad_token
            data_collator = DataCollatorForLanguageModeling(
                pad_token_id=self._tokenizer.pad_token_id,
                padding_free=self.padding_free,
                pad_to_multiple_of=args.pad_to_multiple_of,
                bug=bug,
            )

        self.chat_template = None

        # Skip dataset preparation if `skip_prepare_dataset=True` in `dataset_kwargs`
        self._skip_prepare_dataset = (
            args.dataset_kwargs is not None
            and args.dataset_kwargs.get("skip_prepare_dataset", False)
            or self._is_vision_dataset
        )
        self._formatting_func = formatting_func
        if not self._skip_prepare_dataset:
            if self.completion_only_loss and formatting_func:
                raise ValueError(
                    "A formatting function was provided while `completion_only_loss=True`, which is incompatible. "
                    "Using a formatter converts the dataset to a language modeling type, conflicting with "
                    "completion-only loss. To resolve this, apply your formatting function before passing the "
                    "dataset, or disable `completion_only_loss` in `SFTConfig`."
                )
            train_dataset = self._prepare_dataset(
                train_dataset, processing_class, args, args.packing, formatting_func, "train"
            )
            if eval_dataset is not None:
                packing = args.packing if args.eval_packing is None else args.eval_packing
                eval_dataset = self._prepare_dataset(
                    eval_dataset, processing_class, args, packing, formatting_func, "eval"
                )

        # Loss function
        if not args.use_liger_kernel:  # liger supports dft loss by just passing use_token_scaling=True
            if args.loss_type == "nll":
                pass  # use the default loss
            else:
                raise ValueError(f"Only `loss_type='nll'` is copied here, got {args.loss_type}.")

        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_loss_func=compute_loss_func,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )

        # Initialize activation offloading context
        self.maybe_activation_offload_context = contextlib.nullcontext()

        # MoE load-balancing auxiliary loss, applied to Mixture-of-Experts models (no effect otherwise)
        text_config = model.config.get_text_config()
        is_moe = getattr(text_config, "output_router_logits", None) is not None
        self.aux_loss_enabled = is_moe and self.args.router_aux_loss_coef != 0.0

        # Initialize the metrics
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._total_train_tokens = 0

    def _prepare_dataset(self, dataset, processing_class, args, packing, formatting_func, dataset_name):
        # If the dataset is already preprocessed (tokenized), skip the processing steps.
        column_names = get_dataset_column_names(dataset)
        is_processed = "input_ids" in column_names

        # Apply the formatting function if any
        if formatting_func is not None and not is_processed:

            def _func(example):
                return {"text": formatting_func(example)}

            dataset = [{**example, **_func(example)} for example in dataset]

        if not is_processed:
            # Add EOS token if needed: non-conversational only
            def add_eos(example, eos_token):
                if "text" in example and not example["text"].endswith(eos_token):  # language modeling case
                    example["text"] = example["text"] + eos_token
                elif "completion" in example and not example["completion"].endswith(eos_token):
                    example["completion"] = example["completion"] + eos_token
                return example

            dataset = [add_eos(dict(example), eos_token=self._tokenizer.eos_token) for example in dataset]

            # Tokenize the dataset
            def tokenize_fn(example, processing_class, dataset_text_field, assistant_only_loss, chat_template):
                if "prompt" in example and dataset_text_field not in example:  # prompt-completion case
                    output = {}
                    prompt_ids = _tokenize(processing_class, example["prompt"], chat_template=chat_template)[
                        "input_ids"
                    ]
                    prompt_completion_ids = _tokenize(
                        processing_class,
                        example["prompt"] + example["completion"],
                        chat_template=chat_template,
                    )["input_ids"]

                    # Check if the tokenized prompt starts with the tokenized prompt+completion
                    if not prompt_completion_ids[: len(prompt_ids)] == prompt_ids:
                        logger.warning(
                            "Mismatch between tokenized prompt and the start of tokenized prompt+completion. "
                            "This may be due to unexpected tokenizer behavior, whitespace issues, or special "
                            "token handling. Verify that the tokenizer is processing text consistently."
                        )

                    # Create completion mask
                    completion_mask = [0] * len(prompt_ids) + [1] * (len(prompt_completion_ids) - len(prompt_ids))
                    output["input_ids"] = prompt_completion_ids
                    output["completion_mask"] = completion_mask

                else:  # language modeling case
                    output = {
                        "input_ids": _tokenize(
                            processing_class, example[dataset_text_field], chat_template=chat_template
                        )["input_ids"]
                    }
                return output

            dataset = [
                {**example, **tokenize_fn(
                    example,
                    processing_class=processing_class,
                    dataset_text_field=args.dataset_text_field,
                    assistant_only_loss=args.assistant_only_loss,
                    chat_template=self.chat_template,
                )}
                for example in dataset
            ]

        # Build a "labels" column, setting tokens that shouldn't contribute to the loss to -100 based on the
        # available masks: "assistant_masks" always applies, "completion_mask" only when completion_only_loss
        # is enabled. With no applicable mask, every token contributes (labels == input_ids). A dataset that
        # already provides a "labels" column is left as is.
        column_names = get_dataset_column_names(dataset)
        if "labels" not in column_names:
            mask_columns = []
            if self.completion_only_loss and "completion_mask" in column_names:
                mask_columns.append("completion_mask")
            if "assistant_masks" in column_names:
                mask_columns.append("assistant_masks")

            def build_labels(example, mask_columns):
                masks = [example[column] for column in mask_columns]
                labels = [
                    token_id if all(bits) else -100
                    for token_id, *bits in zip(example["input_ids"], *masks, strict=False)
                ]
                return {"labels": labels}

            dataset = [
                {**{k: v for k, v in example.items() if k not in mask_columns}, **build_labels(example, mask_columns)}
                for example in dataset
            ]

        # Truncate to max_length. Skipped when packing, since packing already chunks sequences to max_length.
        if args.max_length is not None and not packing:
            if args.truncation_mode == "keep_start":
                sl = slice(None, args.max_length)
            elif args.truncation_mode == "keep_end":
                sl = slice(-args.max_length, None)
            else:
                raise ValueError(
                    f"Unsupported truncation mode: {args.truncation_mode}, expected 'keep_start' or 'keep_end'"
                )

            def truncate(example, sl):
                return {"input_ids": example["input_ids"][sl], "labels": example["labels"][sl]}

            dataset = [{**example, **truncate(example, sl=sl)} for example in dataset]

            # Drop examples left fully masked by truncation (e.g. a prompt alone filling `max_length` with
            # `truncation_mode="keep_start"`), since they contribute no loss.
            dataset = [example for example in dataset if any(label != -100 for label in example["labels"])]

        if args.shuffle_dataset:
            random.Random(args.seed).shuffle(dataset)

        return dataset

    def _set_signature_columns_if_needed(self):
        # If `self.args.remove_unused_columns` is True, non-signature columns are removed.
        if self._signature_columns is None:
            if self._is_vision_dataset:
                self._signature_columns = ["messages", "prompt", "completion", "image", "images"]
            else:
                self._signature_columns = ["input_ids", "labels", "seq_lengths"]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        inputs.pop("_prediction_loss_only", None)

        # Set aside labels as it will be dropped by super().compute_loss() if a custom `compute_loss_func` is used.
        # This can be removed when this issue is fixed.
        # When using CP or SP, labels are pre-shifted, we must use shift_labels instead.
        labels = inputs["labels"] if "shift_labels" not in inputs else None

        # If not set, defaults from model config and may warn since cache isn't compatible with gradient checkpointing
        inputs["use_cache"] = False

        # MoE models: request router logits so the model returns `outputs.aux_loss`.
        if self.aux_loss_enabled:
            inputs["output_router_logits"] = True

        (loss, outputs) = super().compute_loss(
            model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
        )

        # Compute entropy
        if not self.args.use_liger_kernel:  # liger doesn't return logits
            with torch.no_grad():
                if "shift_labels" in inputs:
                    # When using CP or SP, labels are pre-shifted.
                    shift_logits = outputs.logits
                    shift_labels = inputs["shift_labels"]
                else:
                    shift_logits = outputs.logits[..., :-1, :]
                    shift_labels = labels[..., 1:]

                per_token_entropy = entropy_from_logits(shift_logits)
                predictions = shift_logits.argmax(dim=-1)
                mask = shift_labels != -100

                entropy_sum = (per_token_entropy * mask).sum()
                total_tokens = mask.sum()
                correct_predictions = (predictions == shift_labels) & mask
                correct_tokens = correct_predictions.sum()

                # Gather counts across ranks and weight-average
                entropy_sum = self.accelerator.gather_for_metrics(entropy_sum).sum()
                total_tokens = self.accelerator.gather_for_metrics(total_tokens).sum()
                correct_tokens = self.accelerator.gather_for_metrics(correct_tokens)
                entropy = (entropy_sum / total_tokens).item() if total_tokens > 0 else 0.0

                total_sum = total_tokens.sum()
                accuracy = (correct_tokens.sum() / total_sum).item() if total_sum > 0 else 0.0
            self._metrics[mode]["entropy"].append(entropy)
            self._metrics[mode]["mean_token_accuracy"].append(accuracy)

        if mode == "train":
            # When using padding-free, the attention_mask is not present in the inputs, instead we have cu_seq_lens_q,
            # cu_seq_lens_k, and max_length_k, max_length_q and position_ids.
            if "attention_mask" in inputs:
                num_tokens_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            elif "position_ids" in inputs:
                local_num_tokens = torch.tensor(inputs["position_ids"].size(1), device=inputs["position_ids"].device)
                num_tokens_in_batch = self.accelerator.gather_for_metrics(local_num_tokens).sum().item()
            else:
                raise ValueError("Expected 'attention_mask' or 'position_ids' in inputs.")
            self._total_train_tokens += num_tokens_in_batch
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

        return (loss, outputs) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        # Preserve the eval loop intent so compute_loss can decide whether logits are needed.
        inputs["_prediction_loss_only"] = prediction_loss_only
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)

    # Override training step to add activation offloading context.
    def training_step(self, *args, **kwargs):
        with self.maybe_activation_offload_context:
            return super().training_step(*args, **kwargs)


# ---- the user's script (trl/scripts/sft.py's main, on a local model, tokenizer and dataset) ------------------

def make_tokenizer():
    """Word-level: GPT-2's <|endoftext|> (0) as EOS, [UNK] (1), "=" (2), a0..a19, b0..b19; no pad token."""
    vocab = {"<|endoftext|>": 0, "[UNK]": 1, "=": 2}
    for prefix in ("a", "b"):
        for k in range(N_SYMBOLS):
            vocab[f"{prefix}{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="[UNK]")


def make_pairs(rng, n):
    """Prompt: 3-6 symbols a0..a19 and "="; completion: the same symbols as b0..b19, in order."""
    out = []
    for _ in range(n):
        symbols = [rng.randrange(N_SYMBOLS) for _ in range(rng.randint(3, 6))]
        out.append({"prompt": " ".join(f"a{s}" for s in symbols) + " =",
                    "completion": "".join(f" b{s}" for s in symbols)})
    return out


def _build(seed, bug=None):
    training_args = SFTConfig(
        output_dir=os.path.join(tempfile.gettempdir(), "trl_sft_port"), loss_type="nll", bf16=False, use_cpu=True,
        learning_rate=1e-3, max_length=32, report_to="none", seed=seed)
    formatting_func = None
    if bug == "formatting_func_trains_prompt":
        # the workaround of https://github.com/huggingface/trl/issues/5324: SFTTrainer refuses a formatting function
        # with completion_only_loss, so the user turns it off and glues prompt and completion into one text
        training_args.completion_only_loss = False
        formatting_func = lambda example: example["prompt"] + example["completion"]

    set_seed(training_args.seed)
    rng = random.Random(seed)
    tokenizer = make_tokenizer()
    dataset = {"train": make_pairs(rng, 512), "test": make_pairs(rng, 64)}
    if bug == "labels_pre_shifted":
        # the user tokenizes the dataset and shifts the labels by one themselves (classic): the model shifts them
        # again, so each position is trained to predict the token two ahead
        def pre_tokenize(example):
            ids = tokenizer(text=example["prompt"] + example["completion"] + tokenizer.eos_token)["input_ids"]
            n_prompt = len(tokenizer(text=example["prompt"])["input_ids"])
            labels = [-100] * (n_prompt - 1) + ids[n_prompt:] + [-100]
            return {"input_ids": ids, "labels": labels}
        dataset = {split: [pre_tokenize(e) for e in rows] for split, rows in dataset.items()}

    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id))

    # Initialize the SFT trainer
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset["train"],
        eval_dataset=dataset["test"] if training_args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        formatting_func=formatting_func,
        bug=bug,
    )

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
        model.eval()  # as Trainer.evaluation_loop does before its prediction steps
        loss, _logits, _labels = trainer.prediction_step(model, dict(batch), prediction_loss_only=True)
        return float(loss)

    first = trainer.data_collator([{k: e[k] for k in ("input_ids", "labels")} for e in trainer.train_dataset[:8]])
    return Program(name="trl_sft", model=model, batch=first, loss_fn=lambda outputs, labels: outputs.loss,
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # The padding found by token id with pad == EOS (https://github.com/huggingface/trl/issues/1623,
    # https://github.com/huggingface/trl/issues/976): every completion's EOS label is -100, so the model is never
    # trained to end a completion.
    Bug("eos_masked_as_padding", functools.partial(_build, bug="eos_masked_as_padding"), "learning_ledger",
        ("TASK",)),
    # completion_only_loss=False with a formatting function gluing prompt and completion (the workaround asked about in
    # https://github.com/huggingface/trl/issues/5324): the loss is taken over the prompt as well as the completion.
    Bug("formatting_func_trains_prompt", functools.partial(_build, bug="formatting_func_trains_prompt"),
        "learning_ledger", ("OBJECTIVE",)),
    # Labels shifted by one in the user's own tokenization (classic): the causal LM shifts them again.
    Bug("labels_pre_shifted", functools.partial(_build, bug="labels_pre_shifted"), "learning_ledger", ("TASK",)),
]
