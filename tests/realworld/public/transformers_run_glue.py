"""The Transformers example "run_glue.py" on the user's own sentence-pair files (``--train_file/--validation_file``):
``HfArgumentParser`` over ``ModelArguments``, ``DataTrainingArguments`` and ``TrainingArguments``, the label
handling (regression when the label column is float, else ``label_list = unique(label)`` and ``label_to_id``), the
sentence keys (``sentence1``/``sentence2`` when present, else the first two non-label columns), ``preprocess_function``
(``tokenizer(*args, padding="max_length", max_length, truncation=True)``), ``default_data_collator`` (the default
``pad_to_max_length=True``), an accuracy ``compute_metrics``, and ``Trainer`` training a DistilBERT sequence
classifier (the Trainer's defaults: AdamW, linear schedule, ``max_grad_norm`` 1.0).

Source: https://github.com/huggingface/transformers
Commit: 242e7fc66cfcb271496bf5a6d207db90c9b96817
Files: examples/pytorch/text-classification/run_glue.py
License: Apache-2.0 (Copyright 2020 The HuggingFace Inc. team; LICENSES/huggingface-transformers.txt)
Domain: text classification with the HF Trainer (sentence pairs, DistilBERT from config)

Deviations from the original:
- the command line is ``--model_name_or_path distilbert-base-uncased --train_file train.csv --validation_file
  validation.csv --do_train --do_eval --max_seq_length 32 --learning_rate 1e-3 --seed <seed> --use_cpu --report_to
  none`` (parsed by the script's ``HfArgumentParser``); max_seq_length 128 -> 32 for 2 CPU cores, and lr 1e-3 instead
  of the README's 2e-5 because nothing pre-trained can be downloaded: the model starts from random weights;
- ``AutoConfig.from_pretrained`` / ``AutoModelForSequenceClassification.from_pretrained`` become
  ``AutoConfig.for_model("distilbert", <tiny sizes>, num_labels=..., finetuning_task=...)`` and ``from_config``
  (dim 32, 2 layers, 2 heads, hidden 64, vocab 104, 64 positions);
- the tokenizer (``AutoTokenizer.from_pretrained``) is a word-level ``tokenizers`` tokenizer with BERT's special
  tokens and pair template, wrapped in ``PreTrainedTokenizerFast``;
- data: ``datasets`` is not installed, so the two csv files are replaced by synthetic splits made from ``seed``
  (512 training, 64 validation rows with columns sentence1, sentence2, label) held in a small stand-in for
  ``datasets.Dataset`` (``column_names``, ``features["label"].dtype``, ``unique``, ``map(batched=True)``,
  ``select``); label 0: sentence2 repeats sentence1, 1: sentence2 is sentence1 with one word replaced, 2: sentence2
  is an unrelated sentence from another part of the vocabulary;
- the ``metadata={"help": ...}`` of the argument dataclasses' fields (command-line help text) is left out;
- ``evaluate.load("accuracy")`` is not available: the metric object computes the accuracy by hand;
- ``Trainer(tokenizer=...)`` is ``Trainer(processing_class=...)`` in transformers 5; telemetry, logging set-up,
  checkpoint detection, saving, model card and predict are left out;
- ``trainer.train()`` is driven one optimizer update at a time: ``build`` runs the set-up of
  ``Trainer._inner_training_loop`` (``get_train_dataloader``, ``set_initial_training_values``,
  ``_init_training_state``, ``_prepare_for_training`` which creates the optimizer and scheduler, ``zero_grad``) and
  ``train_step`` is one update of ``Trainer._run_epoch`` (``get_batch_samples``, ``training_step`` per micro-batch,
  ``_clip_grad_norm``, ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad``, ``global_step += 1``), a new
  epoch iterator when one ends; the callbacks and the log/save/evaluate hook are left out. ``eval_fn`` is the
  evaluation on a given batch (``model.eval()`` as ``evaluation_loop`` does, ``trainer.prediction_step`` and
  ``compute_metrics``).
"""
# ruff: noqa: PLE1205, SIM118, UP045  (the original's code style is kept as written)

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import pathlib
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    HfArgumentParser,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

#: a DistilBERT from random weights needs about 70 updates before the pair rule shows in the loss
SELF_CHECK_STEPS = 100

task_to_keys = {
    "cola": ("sentence", None),
    "mnli": ("premise", "hypothesis"),
    "mrpc": ("sentence1", "sentence2"),
    "qnli": ("question", "sentence"),
    "qqp": ("question1", "question2"),
    "rte": ("sentence1", "sentence2"),
    "sst2": ("sentence", None),
    "stsb": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    """
    Arguments pertaining to what data we are going to input our model for training and eval.
    """

    task_name: Optional[str] = field(default=None)
    dataset_name: Optional[str] = field(default=None)
    dataset_config_name: Optional[str] = field(default=None)
    max_seq_length: int = field(default=128)
    overwrite_cache: bool = field(default=False)
    pad_to_max_length: bool = field(default=True)
    max_train_samples: Optional[int] = field(default=None)
    max_eval_samples: Optional[int] = field(default=None)
    max_predict_samples: Optional[int] = field(default=None)
    train_file: Optional[str] = field(default=None)
    validation_file: Optional[str] = field(default=None)
    test_file: Optional[str] = field(default=None)

    def __post_init__(self):
        if self.task_name is not None:
            self.task_name = self.task_name.lower()
            if self.task_name not in task_to_keys.keys():
                raise ValueError("Unknown task, you should pick one in " + ",".join(task_to_keys.keys()))
        elif self.dataset_name is not None:
            pass
        elif self.train_file is None or self.validation_file is None:
            raise ValueError("Need either a GLUE task, a training/validation file or a dataset name.")
        else:
            train_extension = self.train_file.split(".")[-1]
            assert train_extension in ["csv", "json"], "`train_file` should be a csv or a json file."
            validation_extension = self.validation_file.split(".")[-1]
            assert (
                validation_extension == train_extension
            ), "`validation_file` should have the same extension (csv or json) as `train_file`."


@dataclass
class ModelArguments:
    """
    Arguments pertaining to which model/config/tokenizer we are going to fine-tune from.
    """

    model_name_or_path: str = field()
    config_name: Optional[str] = field(default=None)
    tokenizer_name: Optional[str] = field(default=None)
    cache_dir: Optional[str] = field(default=None)
    use_fast_tokenizer: bool = field(default=True)
    model_revision: str = field(default="main")
    token: str = field(default=None)
    use_auth_token: bool = field(default=None)
    trust_remote_code: bool = field(default=False)
    ignore_mismatched_sizes: bool = field(default=False)


# ---- stand-ins for what cannot be downloaded or is not installed ------------------------------------------------

VOCAB_WORDS = 100


def make_tokenizer():
    """Word-level tokenizer: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, words w0..w99; BERT's single and pair templates."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for k in range(VOCAB_WORDS):
        vocab[f"w{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_max_length=512,
                                   model_input_names=["input_ids", "attention_mask"])


@dataclasses.dataclass
class _Feature:
    dtype: str


class _Dataset:
    """The few ``datasets.Dataset`` methods the script uses, over a dict of columns."""

    def __init__(self, columns, dtypes=None):
        self.columns = columns
        self.features = {k: _Feature(v) for k, v in (dtypes or {}).items()}

    @property
    def column_names(self):
        return list(self.columns)

    def unique(self, name):
        return list(dict.fromkeys(self.columns[name]))

    def map(self, function, batched=True, **_kwargs):
        out = dict(self.columns)
        out.update({k: list(v) for k, v in function(self.columns).items()})
        return _Dataset(out, {k: v.dtype for k, v in self.features.items()})

    def select(self, indices):
        return _Dataset({k: [v[i] for i in indices] for k, v in self.columns.items()},
                        {k: v.dtype for k, v in self.features.items()})

    def __len__(self):
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.columns.items()}


def make_raw_datasets(seed, bug=None):
    """Sentence pairs over words w0..w99 (sentence1 from w0..w59): label 0 when sentence2 repeats sentence1, 1 when
    one of its words is replaced, 2 when sentence2 is unrelated (words w60..w99)."""
    rng = np.random.RandomState(seed)

    def split(n):
        cols = {"sentence1": [], "sentence2": [], "label": []}
        for _ in range(n):
            s1 = rng.randint(0, 60, size=rng.randint(4, 9))
            label = int(rng.randint(3))
            if label == 0:
                s2 = s1.copy()
            elif label == 1:
                s2 = s1.copy()
                s2[rng.randint(len(s2))] = (s2[rng.randint(len(s2))] + 1 + rng.randint(59)) % 60
            else:
                s2 = rng.randint(60, VOCAB_WORDS, size=rng.randint(4, 9))
            cols["sentence1"].append(" ".join(f"w{w}" for w in s1))
            cols["sentence2"].append(" ".join(f"w{w}" for w in s2))
            cols["label"].append(label)
        if bug == "labels_written_as_floats":
            # the label column written as 0.0/1.0/2.0 (as a pandas export of a float column does): the script's
            # dtype rule reads it as a regression target
            cols["label"] = [float(v) for v in cols["label"]]
            return _Dataset(cols, {"label": "float64"})
        if bug == "id_column_first":
            # the user's file has a leading string id column and names the pair "premise"/"hypothesis": the script
            # falls back to the first two non-label columns, (id, premise), and the hypothesis is never tokenized
            ids = [f"ex{rng.randint(10**6)}" for _ in range(n)]
            cols = {"id": ids, "premise": cols["sentence1"], "hypothesis": cols["sentence2"], "label": cols["label"]}
        return _Dataset(cols, {"label": "int64"})

    return {"train": split(512), "validation": split(64)}


class _Accuracy:
    """``evaluate.load("accuracy")``."""

    def compute(self, predictions, references):
        return {"accuracy": float((np.asarray(predictions) == np.asarray(references)).mean())}


# ---- run_glue.py main() -----------------------------------------------------------------------------------------

def _build(seed, bug=None):
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=[
        "--model_name_or_path", "distilbert-base-uncased", "--train_file", "train.csv", "--validation_file",
        "validation.csv", "--do_train", "--do_eval", "--max_seq_length", "32", "--learning_rate", "1e-3",
        "--seed", str(seed), "--use_cpu", "--report_to", "none",
        "--output_dir", os.path.join(tempfile.gettempdir(), "run_glue_port")])

    # Set seed before initializing model.
    set_seed(training_args.seed)

    raw_datasets = make_raw_datasets(seed, bug)

    # Labels
    if data_args.task_name is not None:
        is_regression = data_args.task_name == "stsb"
        if not is_regression:
            label_list = raw_datasets["train"].features["label"].names
            num_labels = len(label_list)
        else:
            num_labels = 1
    else:
        # Trying to have good defaults here, don't hesitate to tweak to your needs.
        is_regression = raw_datasets["train"].features["label"].dtype in ["float32", "float64"]
        if is_regression:
            num_labels = 1
        else:
            # A useful fast method:
            # https://huggingface.co/docs/datasets/package_reference/main_classes.html#datasets.Dataset.unique
            label_list = raw_datasets["train"].unique("label")
            label_list.sort()  # Let's sort it for determinism
            num_labels = len(label_list)

    # Load pretrained model and tokenizer (here: from a tiny config, see the module docstring)
    config = AutoConfig.for_model(
        "distilbert", vocab_size=4 + VOCAB_WORDS, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
        max_position_embeddings=64,
        num_labels=num_labels,
        finetuning_task=data_args.task_name,
    )
    tokenizer = make_tokenizer()
    model = AutoModelForSequenceClassification.from_config(config, trust_remote_code=model_args.trust_remote_code)

    # Preprocessing the raw_datasets
    if data_args.task_name is not None:
        sentence1_key, sentence2_key = task_to_keys[data_args.task_name]
    else:
        # Again, we try to have some nice defaults but don't hesitate to tweak to your use case.
        non_label_column_names = [name for name in raw_datasets["train"].column_names if name != "label"]
        if "sentence1" in non_label_column_names and "sentence2" in non_label_column_names:
            sentence1_key, sentence2_key = "sentence1", "sentence2"
        else:
            if len(non_label_column_names) >= 2:
                sentence1_key, sentence2_key = non_label_column_names[:2]
            else:
                sentence1_key, sentence2_key = non_label_column_names[0], None

    # Padding strategy
    if data_args.pad_to_max_length:
        padding = "max_length"
    else:
        # We will pad later, dynamically at batch creation, to the max sequence length in each batch
        padding = False

    # Some models have set the order of the labels to use, so let's make sure we do use it.
    label_to_id = None
    if (
        model.config.label2id != PretrainedConfig(num_labels=num_labels).label2id
        and data_args.task_name is not None
        and not is_regression
    ):
        # Some have all caps in their config, some don't.
        label_name_to_id = {k.lower(): v for k, v in model.config.label2id.items()}
        if sorted(label_name_to_id.keys()) == sorted(label_list):
            label_to_id = {i: int(label_name_to_id[label_list[i]]) for i in range(num_labels)}
        else:
            logger.warning(
                "Your model seems to have been trained with labels, but they don't match the dataset: ",
                f"model labels: {sorted(label_name_to_id.keys())}, dataset labels: {sorted(label_list)}."
                "\nIgnoring the model labels as a result.",
            )
    elif data_args.task_name is None and not is_regression:
        label_to_id = {v: i for i, v in enumerate(label_list)}

    if label_to_id is not None:
        model.config.label2id = label_to_id
        model.config.id2label = {id: label for label, id in config.label2id.items()}
    elif data_args.task_name is not None and not is_regression:
        model.config.label2id = {l: i for i, l in enumerate(label_list)}
        model.config.id2label = {id: label for label, id in config.label2id.items()}

    if data_args.max_seq_length > tokenizer.model_max_length:
        logger.warning(
            f"The max_seq_length passed ({data_args.max_seq_length}) is larger than the maximum length for the"
            f"model ({tokenizer.model_max_length}). Using max_seq_length={tokenizer.model_max_length}."
        )
    max_seq_length = min(data_args.max_seq_length, tokenizer.model_max_length)

    def preprocess_function(examples):
        # Tokenize the texts
        args = (
            (examples[sentence1_key],) if sentence2_key is None else (examples[sentence1_key], examples[sentence2_key])
        )
        result = tokenizer(*args, padding=padding, max_length=max_seq_length, truncation=True)

        # Map labels to IDs (not necessary for GLUE tasks)
        if label_to_id is not None and "label" in examples:
            result["label"] = [(label_to_id[l] if l != -1 else -1) for l in examples["label"]]
        return result

    with training_args.main_process_first(desc="dataset map pre-processing"):
        raw_datasets = {split: ds.map(
            preprocess_function,
            batched=True,
            load_from_cache_file=not data_args.overwrite_cache,
            desc="Running tokenizer on dataset",
        ) for split, ds in raw_datasets.items()}
    if training_args.do_train:
        if "train" not in raw_datasets:
            raise ValueError("--do_train requires a train dataset")
        train_dataset = raw_datasets["train"]
        if data_args.max_train_samples is not None:
            max_train_samples = min(len(train_dataset), data_args.max_train_samples)
            train_dataset = train_dataset.select(range(max_train_samples))

    if training_args.do_eval:
        if "validation" not in raw_datasets and "validation_matched" not in raw_datasets:
            raise ValueError("--do_eval requires a validation dataset")
        eval_dataset = raw_datasets["validation_matched" if data_args.task_name == "mnli" else "validation"]
        if data_args.max_eval_samples is not None:
            max_eval_samples = min(len(eval_dataset), data_args.max_eval_samples)
            eval_dataset = eval_dataset.select(range(max_eval_samples))

    # Get the metric function
    metric = _Accuracy()

    # You can define your custom compute_metrics function. It takes an `EvalPrediction` object (a namedtuple with a
    # predictions and label_ids field) and has to return a dictionary string to float.
    def compute_metrics(p: EvalPrediction):
        preds = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds = np.squeeze(preds) if is_regression else np.argmax(preds, axis=1)
        result = metric.compute(predictions=preds, references=p.label_ids)
        if len(result) > 1:
            result["combined_score"] = np.mean(list(result.values())).item()
        return result

    # Data collator will default to DataCollatorWithPadding when the tokenizer is passed to Trainer, so we change it if
    # we already did the padding.
    if data_args.pad_to_max_length:
        data_collator = default_data_collator
    elif training_args.fp16:
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)
    else:
        data_collator = None

    # Initialize our Trainer
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        compute_metrics=compute_metrics,
        processing_class=tokenizer,
        data_collator=data_collator,
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
        _loss, logits, labels = trainer.prediction_step(model, batch, prediction_loss_only=False)
        return compute_metrics(EvalPrediction(predictions=logits.cpu().numpy(), label_ids=labels.cpu().numpy()))

    first = next(iter(trainer.get_eval_dataloader(train_dataset)))
    return Program(name="transformers_run_glue", model=model, batch=first, loss_fn=lambda outputs, labels: outputs.loss,
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # The user's label column written as floats (0.0/1.0/2.0): the script's dtype rule (`is_regression = dtype in
    # ["float32", "float64"]`) makes it a 1-output regression trained with MSE on the class ids. The same rule's
    # pitfall, in the other direction, was reported against this script in https://github.com/yahoojapan/JGLUE/issues/3.
    Bug("labels_written_as_floats", functools.partial(_build, bug="labels_written_as_floats"), "learning_ledger",
        ("OBJECTIVE",)),
    # A leading string id column and a pair named premise/hypothesis (classic): the script's fallback takes the first
    # two non-label columns, (id, premise), so the model never sees the sentence the label depends on.
    Bug("id_column_first", functools.partial(_build, bug="id_column_first"), "learning_ledger", ("TASK",)),
]
