"""Token classification (NER) with Lightning Transformers: ``TokenClassificationTransformer``, a LightningModule around
``AutoModelForTokenClassification`` whose ``training_step`` returns the model's own loss (cross-entropy over the
labels, -100 ignored), fed by ``TokenClassificationDataModule``: words tokenized with ``is_split_into_words=True``,
padded to ``max_length``, each word's label on its first sub-token and -100 on special tokens, padding and (with
``label_all_tokens=False``) the other sub-tokens, batches collated by ``DataCollatorForTokenClassification``;
``TaskTransformer.configure_optimizers``' default AdamW with a linear warmup over 10% of the training steps, stepped
every step; trained by ``pl.Trainer(max_epochs=1)`` as in the repository's ``examples/token_classification.py``.

Source: https://github.com/Lightning-Universe/lightning-transformers
Commit: e5a3ff7830559b6ef2a09b984bb1087e40eb4a00
Files: examples/token_classification.py, lightning_transformers/task/nlp/token_classification/model.py,
  lightning_transformers/task/nlp/token_classification/data.py, lightning_transformers/core/model.py,
  lightning_transformers/core/data.py
License: Apache-2.0 (full text in LICENSES/Lightning-Universe-lightning-transformers.txt)
Domain: token classification (NER) with a Lightning module over a HF model

Deviations from the original:
- no download: ``bert-base-uncased`` is replaced by a BERT built from a tiny ``BertConfig`` (hidden 32, 2 layers,
  2 heads, intermediate 64, max positions 64) through the module's own ``load_weights=False`` path
  (``downstream_model_type.from_config``; the ``AutoConfig.from_pretrained`` it calls there is that config), and the
  tokenizer by a WordPiece ``tokenizers`` tokenizer over a 40-entry vocabulary with BERT's special tokens and
  ``[CLS] .. [SEP]`` template, wrapped in ``PreTrainedTokenizerFast``;
- the learning rate: the default optimizer's 1e-5 is for fine-tuning pretrained weights; the model here starts from
  random weights, so AdamW runs at 1e-3 (the warmup fraction 0.1 and the linear decay are unchanged);
- sizes: ``max_length`` 128 -> 32, batch size 1 -> 8 (one-example batches make a 30-step check pure noise);
- data: CoNLL-2003 (``datasets.load_dataset``; the ``datasets`` package is not installed) is replaced by 320
  training and 32 validation sentences made from ``seed`` with ``tokens`` and string ``ner_tags`` columns
  (O, B-PER, I-PER, B-LOC, I-LOC: first names optionally followed by a surname, single- and two-word places, filler
  words; some words split into two WordPiece sub-tokens), so ``_prepare_labels`` takes its sorted-string branch.
  ``dataset.map(batched=True)`` / ``set_format(columns=...)`` are written as one call of ``convert_to_features`` on
  each split and a list of per-example dicts of the kept columns; ``process_data``, ``_setup_input_fields``,
  ``_prepare_labels``, ``convert_to_features`` and ``collate_fn`` are as written;
- torchmetrics 1.x needs ``task="multiclass"`` for ``Precision``/``Recall``/``F1Score``/``Accuracy`` (the original
  calls them in the 0.x form); the metrics only serve the validation step;
- ``num_training_steps`` (``trainer.estimated_stepping_batches``) is computed as Lightning computes it for one
  device without accumulation: ``max_epochs * len(train_dataloader)``; ``configure_optimizers``' warning that it
  uses the default optimizer is left out; the datamodule is a plain class holding the pieces of
  ``TransformerDataModule`` it uses (tokenizer, batch size, padding, max_length, the dataloaders; no workers);
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it:
  ``training_step`` inside the optimizer closure, the ``optimizer_zero_grad`` hook, the module's ``backward``, all
  called by the ``optimizer_step`` hook, then the step-interval scheduler; a ``Trainer(barebones=True)`` is attached
  so that ``self.log`` works (barebones makes it a no-op). Validation is ``eval_fn`` (``common_step``'s metrics on a
  given batch: the accuracy); the sanity check, callbacks, checkpointing, loggers and the HF pipeline are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP006, UP007, UP035, UP045, PYI041, PIE790  (the original's code style is kept as written)

from __future__ import annotations

import functools
import logging
import pathlib
import random
import sys
import warnings
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Union

import pytorch_lightning as pl
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.utils.data import DataLoader
from torchmetrics import Accuracy, F1Score, Precision, Recall
from transformers import (
    BertConfig,
    DataCollatorForTokenClassification,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

MAX_LENGTH = 32
BATCH_SIZE = 8
LEARNING_RATE = 1e-3

FIRST_NAMES = ["anna", "boris", "carla", "dmitri"]
SURNAMES = ["smith", "jones", "ivanova"]
PLACES = ["paris", "london", "berlin"]
TWO_WORD_PLACES = [("new", "york"), ("rio", "grande")]
FILLERS = ["the", "went", "to", "and", "saw", "met", "in", "visited", "with", "a", "friend"]
# words split into two sub-tokens by the WordPiece vocabulary below
SPLIT = {"dmitri": ("dm", "##itri"), "ivanova": ("ivan", "##ova"), "london": ("lon", "##don"),
         "visited": ("visit", "##ed"), "grande": ("gran", "##de")}


def make_tokenizer():
    words = FIRST_NAMES + SURNAMES + PLACES + [w for p in TWO_WORD_PLACES for w in p] + FILLERS
    pieces = []
    for w in words:
        pieces.extend(SPLIT.get(w, (w,)))
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(pieces)])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=MAX_LENGTH)


def make_sentences(rng, n):
    """Sentences of filler words, persons (B-PER [I-PER]) and places (B-LOC [I-LOC]), as CoNLL-style columns."""
    tokens, tags = [], []
    for _ in range(n):
        words, labels = [], []
        for _ in range(rng.randint(2, 4)):
            for _ in range(rng.randint(0, 2)):
                words.append(rng.choice(FILLERS))
                labels.append("O")
            kind = rng.random()
            if kind < 0.4:
                words.append(rng.choice(FIRST_NAMES))
                labels.append("B-PER")
                if rng.random() < 0.5:
                    words.append(rng.choice(SURNAMES))
                    labels.append("I-PER")
            elif kind < 0.7:
                words.append(rng.choice(PLACES))
                labels.append("B-LOC")
            else:
                first, second = rng.choice(TWO_WORD_PLACES)
                words += [first, second]
                labels += ["B-LOC", "I-LOC"]
        tokens.append(words)
        tags.append(labels)
    return {"tokens": tokens, "ner_tags": tags}


# ---- lightning_transformers/core/model.py ------------------------------------------------------------------------

class TaskTransformer(pl.LightningModule):
    """Base class for task specific transformers, wrapping pre-trained language models for downstream tasks. The
    API is built on top of AutoModel and AutoConfig, provided by HuggingFace.
    """

    def __init__(
        self,
        downstream_model_type,
        pretrained_model_name_or_path: Optional[str] = None,
        tokenizer: Optional[PreTrainedTokenizerBase] = None,
        pipeline_kwargs: Optional[dict] = None,
        load_weights: bool = True,
        deepspeed_sharding: bool = False,
        **model_data_kwargs,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.load_weights = load_weights
        self.model_data_kwargs = model_data_kwargs
        self.downstream_model_type = downstream_model_type
        self.deepspeed_sharding = deepspeed_sharding
        self.pretrained_model_name_or_path = pretrained_model_name_or_path
        if not self.deepspeed_sharding:
            self.initialize_model(self.pretrained_model_name_or_path)
        self._tokenizer = tokenizer  # necessary for hf_pipeline
        self._hf_pipeline = None
        self._hf_pipeline_kwargs = pipeline_kwargs or {}

    def initialize_model(self, pretrained_model_name_or_path: str):
        """create and initialize the model to use with this task,

        Feel free to overwrite this method if you are initializing the model in a different way
        """
        if self.load_weights:
            self.model = self.downstream_model_type.from_pretrained(
                pretrained_model_name_or_path, **self.model_data_kwargs
            )
        else:
            # AutoConfig.from_pretrained(pretrained_model_name_or_path=self.model_data_kwargs["pretrained_model"],
            #                            **self.model_data_kwargs): the tiny config (no download here)
            kwargs = {k: v for k, v in self.model_data_kwargs.items() if k != "pretrained_model"}
            config = BertConfig(**self.model_data_kwargs["pretrained_model"], **kwargs)
            self.model = self.downstream_model_type.from_config(config)

    def configure_optimizers(self) -> Dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE)
        num_training_steps, num_warmup_steps = self.compute_warmup(
            num_training_steps=-1,
            num_warmup_steps=0.1,
        )
        scheduler = transformers.get_linear_schedule_with_warmup(
            optimizer, num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    @property
    def num_training_steps(self) -> int:
        # self.trainer.estimated_stepping_batches for one device, no accumulation
        return self.trainer.max_epochs * len(self._train_dataloader)

    def compute_warmup(self, num_training_steps: int, num_warmup_steps: Union[int, float]):
        if num_training_steps < 0:
            # less than 0 specifies to infer number of training steps
            num_training_steps = self.num_training_steps
        if isinstance(num_warmup_steps, float):
            # Convert float values to percentage of training steps to use as warmup
            num_warmup_steps *= num_training_steps
        return num_training_steps, num_warmup_steps

    def setup(self, stage: Optional[str] = None) -> None:
        self.configure_metrics(stage)

    def configure_metrics(self, stage: str) -> Optional[Any]:
        """Override to configure metrics for train/validation/test."""
        pass


# ---- lightning_transformers/task/nlp/token_classification/model.py -----------------------------------------------

class TokenClassificationTransformer(TaskTransformer):
    """Defines ``LightningModule`` for the Text Classification Task."""

    def __init__(
        self,
        *args,
        labels: Union[int, List[str]],
        downstream_model_type = transformers.AutoModelForTokenClassification,
        **kwargs,
    ) -> None:
        num_labels = labels if isinstance(labels, int) else len(labels)
        super().__init__(downstream_model_type, *args, num_labels=num_labels, **kwargs)
        self._num_labels = num_labels
        self.metrics = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        outputs = self.model(**batch)
        loss = outputs[0]
        self.log("train_loss", loss)
        return loss

    def common_step(self, prefix: str, batch: Any) -> torch.Tensor:
        outputs = self.model(**batch)
        loss, logits = outputs[:2]
        preds = torch.argmax(logits, dim=2)
        metric_dict = self.compute_metrics(preds, batch["labels"], mode=prefix)
        self.log_dict(metric_dict, prog_bar=True, on_step=False, on_epoch=True)
        self.log(f"{prefix}_loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self.common_step("val", batch)

    def configure_metrics(self, _) -> None:
        self.prec = Precision(task="multiclass", num_classes=self.num_labels)
        self.recall = Recall(task="multiclass", num_classes=self.num_labels)
        self.f1 = F1Score(task="multiclass", num_classes=self.num_labels)
        self.acc = Accuracy(task="multiclass", num_classes=self.num_labels)
        self.metrics = {"precision": self.prec, "recall": self.recall, "accuracy": self.acc, "f1": self.f1}

    @property
    def num_labels(self) -> int:
        return self._num_labels

    def compute_metrics(self, predictions, labels, mode="val") -> Dict[str, torch.Tensor]:
        # Remove ignored index (special tokens)
        predictions = predictions[labels != -100]
        labels = labels[labels != -100]
        # Not required by all models. Only required for classification
        return {f"{mode}_{k}": metric(predictions, labels) for k, metric in self.metrics.items()}


# ---- lightning_transformers/task/nlp/token_classification/data.py ------------------------------------------------

class TokenClassificationDataModule:
    """Defines the ``LightningDataModule`` for Token Classification Datasets (the parts of ``TransformerDataModule``
    it uses are folded in: tokenizer, batch size, padding, max_length, the train/val dataloaders)."""

    def __init__(self, tokenizer, batch_size: int = 32, padding: Union[str, bool] = "max_length",
                 max_length: int = 128, task_name: str = "ner", label_all_tokens: bool = False,
                 bug=None) -> None:
        self.labels = None
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.padding = padding
        self.max_length = max_length
        self.task_name = task_name
        self.label_all_tokens = label_all_tokens
        self.bug = bug

    def setup(self, dataset, stage: Optional[str] = None):
        self.ds = self.process_data(dataset, stage=stage)

    def process_data(self, dataset, stage: Optional[str] = None):
        features, label_column_name, text_column_name = self._setup_input_fields(dataset, stage)

        self._prepare_labels(dataset, features, label_column_name)

        convert_to_features = partial(
            TokenClassificationDataModule.convert_to_features,
            tokenizer=self.tokenizer,
            padding=self.padding,
            label_all_tokens=self.label_all_tokens,
            label_to_id=self.label_to_id,
            text_column_name=text_column_name,
            label_column_name=label_column_name,
            bug=self.bug,
        )
        # dataset.map(convert_to_features, batched=True, ...)
        dataset = {split: convert_to_features(examples) for split, examples in dataset.items()}
        cols_to_keep = [
            x
            for x in ["input_ids", "attention_mask", "token_type_ids", "labels", "idx"]
            if x in dataset["train"]
        ]
        if self.bug == "attention_mask_dropped":
            # the kept columns listed without the attention mask: every padded position is attended to
            cols_to_keep = [x for x in cols_to_keep if x != "attention_mask"]
        # dataset.set_format(columns=cols_to_keep)
        return {split: [{c: columns[c][i] for c in cols_to_keep} for i in range(len(columns["input_ids"]))]
                for split, columns in dataset.items()}

    def _setup_input_fields(self, dataset, stage):
        split = "train" if stage == "fit" else "validation"
        column_names = list(dataset[split])
        features = None
        text_column_name = "tokens" if "tokens" in column_names else column_names[0]
        label_column_name = f"{self.task_name}_tags" if f"{self.task_name}_tags" in column_names else column_names[1]
        return features, label_column_name, text_column_name

    def _prepare_labels(self, dataset, features, label_column_name):
        # the columns hold strings (no ClassLabel feature): the original's second branch
        # Create unique label set from train dataset.
        label_list = sorted({label for column in dataset["train"][label_column_name] for label in column})
        label_to_id = {l: i for i, l in enumerate(label_list)}
        self.labels = label_list
        self.label_to_id = label_to_id

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @staticmethod
    def convert_to_features(
        examples: Any,
        tokenizer: PreTrainedTokenizerBase,
        padding: bool,
        label_all_tokens: bool,
        label_to_id,
        text_column_name,
        label_column_name,
        bug=None,
    ):

        tokenized_inputs = tokenizer(
            examples[text_column_name],
            padding=padding,
            truncation=True,
            # We use this argument because the texts in our dataset are lists of words (with a label for each word).
            is_split_into_words=True,
        )
        labels = []
        for i, label in enumerate(examples[label_column_name]):
            word_ids = tokenized_inputs.word_ids(batch_index=i)
            if bug == "labels_not_aligned_to_tokens":
                # the word labels written straight onto the token positions (word_ids unused), padded with -100:
                # shifted by [CLS] and by every extra sub-token
                label_ids = [label_to_id[l] for l in label][: len(word_ids)]
                labels.append(label_ids + [-100] * (len(word_ids) - len(label_ids)))
                continue
            previous_word_idx = None
            label_ids = []
            for word_idx in word_ids:
                # Special tokens have a word id that is None. We set the label to -100 so they are automatically
                # ignored in the loss function.
                if word_idx is None:
                    if bug == "special_and_pad_labelled_o":
                        # special tokens and padding labelled "O" instead of -100
                        label_ids.append(label_to_id["O"])
                    else:
                        label_ids.append(-100)
                # We set the label for the first token of each word.
                elif word_idx != previous_word_idx:
                    label_ids.append(label_to_id[label[word_idx]])
                # For the other tokens in a word, we set the label to either the current label or -100, depending on
                # the label_all_tokens flag.
                else:
                    label_ids.append(label_to_id[label[word_idx]] if label_all_tokens else -100)
                previous_word_idx = word_idx

            labels.append(label_ids)
        tokenized_inputs["labels"] = labels
        return tokenized_inputs

    @property
    def collate_fn(self) -> Optional[Callable]:
        return DataCollatorForTokenClassification(tokenizer=self.tokenizer)

    def train_dataloader(self, generator=None) -> DataLoader:
        return DataLoader(self.ds["train"], batch_size=self.batch_size, collate_fn=self.collate_fn)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.ds["validation"], batch_size=self.batch_size, collate_fn=self.collate_fn)


# ---- examples/token_classification.py -----------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    tokenizer = make_tokenizer()
    dm = TokenClassificationDataModule(
        batch_size=BATCH_SIZE,
        task_name="ner",
        max_length=MAX_LENGTH,
        label_all_tokens=False,
        tokenizer=tokenizer,
        bug=bug,
    )
    dm.setup({"train": make_sentences(rng, 320), "validation": make_sentences(rng, 32)}, stage="fit")
    tiny = {"vocab_size": tokenizer.vocab_size, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 64, "max_position_embeddings": 64}
    model = TokenClassificationTransformer(pretrained_model_name_or_path="bert-base-uncased", labels=dm.num_classes,
                                           load_weights=False, pretrained_model=tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=1)
    trainer.strategy.connect(model)
    model.trainer = trainer

    train_dataloader = dm.train_dataloader()
    model._train_dataloader = train_dataloader
    model.setup("fit")
    config = model.configure_optimizers()
    optimizer = config["optimizer"]
    scheduler = config["lr_scheduler"]["scheduler"]

    state = {"it": None, "epoch": 0, "batch_idx": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch
                state["epoch"] += 1
            model.train()
            state["it"], state["batch_idx"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        result = {}

        def closure():
            loss = model.training_step(batch, batch_idx)
            model.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            model.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        model.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        scheduler.step()  # interval "step", frequency 1
        return result["loss"]

    def eval_fn(net, batch):
        """The validation step's accuracy on one batch (labels -100 removed)."""
        net.eval()
        with torch.no_grad():
            outputs = net(**batch)
            preds = torch.argmax(outputs[1], dim=2)
            metric_dict = model.compute_metrics(preds, batch["labels"], mode="val")
        net.train()
        return float(metric_dict["val_accuracy"])

    first = next(iter(dm.val_dataloader()))
    return Program(name="lightningtransformers_ner", model=model.model, batch=first,
                   loss_fn=lambda outputs, _labels: outputs[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # classic: the word labels written onto the token positions without word_ids: every label is shifted by the
    # [CLS] token and by each extra sub-token before it.
    Bug("labels_not_aligned_to_tokens", functools.partial(_build, bug="labels_not_aligned_to_tokens"),
        "learning_ledger", ("TASK",)),
    # classic: special tokens and max_length padding labelled "O" instead of -100: most of every sequence's loss is
    # on padding.
    Bug("special_and_pad_labelled_o", functools.partial(_build, bug="special_and_pad_labelled_o"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: attention_mask left out of the kept columns: the model attends to the max_length padding.
    Bug("attention_mask_dropped", functools.partial(_build, bug="attention_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
]
