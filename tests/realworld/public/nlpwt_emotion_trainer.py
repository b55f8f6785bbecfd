"""Fine-tuning a DistilBERT classifier on tweet emotions with the HF Trainer, from the book "Natural Language
Processing with Transformers", chapter 2 ("Text Classification"): ``tokenize`` (``padding=True, truncation=True``)
mapped over the whole split (``batch_size=None``), ``AutoModelForSequenceClassification`` with ``num_labels = 6``,
``compute_metrics`` (accuracy and weighted F1), ``TrainingArguments`` (2 epochs, lr 2e-5, weight decay 0.01,
evaluation every epoch) and ``Trainer(..., tokenizer=tokenizer)`` (its defaults: AdamW, linear schedule,
``max_grad_norm`` 1.0).

Source: https://github.com/nlp-with-transformers/notebooks
Commit: 0cb211095b4622fa922f80fbdc9d83cc5d9e0c34
Files: 02_classification.ipynb (cells 91, 110, 117, 154, 185-198)
License: Apache-2.0 (full text in LICENSES/nlp-with-transformers-notebooks.txt)
Domain: HF Trainer fine-tuning, text classification (DistilBERT from config, 6 emotion classes)

Deviations from the original:
- sizes: ``distilbert-base-uncased`` cannot be downloaded: ``AutoConfig.for_model("distilbert", ...)`` with dim 32,
  2 layers, 2 heads, hidden_dim 64, 64 positions, ``num_labels=6``, ``from_config`` (random weights: a fine-tuning
  run that starts from scratch); batch_size 64 -> 16, lr 2e-5 -> 5e-3 so the loss falls within the 30 steps of the
  self-check (2 epochs, weight decay 0.01, evaluation per epoch unchanged);
- the tokenizer of ``distilbert-base-uncased`` cannot be downloaded: a word-level ``tokenizers`` tokenizer with
  BERT's special tokens and single-sentence template, in ``PreTrainedTokenizerFast`` (``model_max_length`` 64);
- data: ``load_dataset("emotion")`` (``datasets`` is not installed, nothing can be downloaded) is replaced by
  synthetic tweets made from ``seed``: 2-6 filler words with three to five cue words of the tweet's emotion among
  them (6 emotions, 5 cue words each), 480 train / 96 validation; a small stand-in for ``DatasetDict.map`` runs
  ``tokenize`` as written (``batch_size=None``: the whole split in one batch, padded to its longest tweet);
  ``set_format("torch", ...)`` is not applied (the Trainer's collator tensorizes the rows);
- ``TrainingArguments``: ``evaluation_strategy`` is spelled ``eval_strategy`` (transformers 5), ``push_to_hub``
  and ``disable_tqdm`` dropped (no hub), ``use_cpu=True``, ``report_to="none"``, the seed from ``seed``, the output
  directory under the temp dir; ``Trainer(tokenizer=...)`` is spelled ``processing_class=`` (transformers 5);
  ``notebook_login``, the hidden-state/logistic-regression half, ``trainer.predict`` and the plots are left out;
- ``trainer.train()`` is driven one optimizer update at a time: ``build`` runs the set-up of
  ``Trainer._inner_training_loop`` (``get_train_dataloader``, ``set_initial_training_values``,
  ``_init_training_state``, ``_prepare_for_training`` which creates the optimizer and scheduler, ``zero_grad``) and
  ``train_step`` is one update of ``Trainer._run_epoch`` (``get_batch_samples``, ``training_step``,
  ``_clip_grad_norm``, ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad``, ``global_step += 1``), a new
  epoch iterator when one ends; callbacks and the log/save/evaluate hook are left out. ``eval_fn`` is the
  evaluation on a given batch (``model.eval()``, ``trainer.prediction_step``, ``compute_metrics``);
- sklearn is not installed here: ``compute_metrics`` falls back to the accuracy alone when it cannot import it;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import os
import pathlib
import sys
import tempfile

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import EvalPrediction

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_FILLER = 40
N_CUES = 5
LABELS = ["sadness", "joy", "love", "anger", "fear", "surprise"]


# ---- stand-ins for what cannot be downloaded or is not installed ------------------------------------------------

def make_tokenizer():
    """Word-level tokenizer: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, filler words f0.., cue words <emotion>0..."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for k in range(N_FILLER):
        vocab[f"f{k}"] = len(vocab)
    for name in LABELS:
        for k in range(N_CUES):
            vocab[f"{name}{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
                                   model_input_names=["input_ids", "attention_mask"])


class _Dataset:
    """The ``datasets.Dataset`` methods the notebook uses, over a dict of columns (rows served as dicts)."""

    def __init__(self, columns):
        self.columns = columns

    def map(self, function, batched=True, batch_size=1000):
        batch_size = batch_size or len(self)
        out = {}
        for start in range(0, len(self), batch_size):
            part = {k: v[start:start + batch_size] for k, v in self.columns.items()}
            result = dict(part)
            result.update(function(part))
            for k, v in result.items():
                out.setdefault(k, []).extend(v)
        return _Dataset(out)

    def __len__(self):
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.columns.items()}


class _DatasetDict(dict):
    def map(self, function, **kwargs):
        return _DatasetDict({k: v.map(function, **kwargs) for k, v in self.items()})


def load_dataset(seed):
    """Tweets of 2-6 filler words with three to five cue words of the tweet's emotion inserted at random places."""
    rng = np.random.RandomState(seed)

    def split(n):
        texts, labels = [], []
        for _ in range(n):
            label = rng.randint(len(LABELS))
            words = [f"f{w}" for w in rng.randint(N_FILLER, size=rng.randint(2, 7))]
            for _ in range(rng.randint(3, 6)):
                words.insert(rng.randint(len(words) + 1), f"{LABELS[label]}{rng.randint(N_CUES)}")
            texts.append(" ".join(words))
            labels.append(int(label))
        return _Dataset({"text": texts, "label": labels})

    return _DatasetDict({"train": split(480), "validation": split(96)})


# ---- the notebook -------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    emotions = load_dataset(seed)

    tokenizer = make_tokenizer()

    def tokenize(batch):
        return tokenizer(batch["text"], padding=True, truncation=True)

    emotions_encoded = emotions.map(tokenize, batched=True, batch_size=None)

    if bug == "labels_shifted_by_one":
        # a relabelling pass that pairs each tweet with the label of the tweet before it (classic misalignment)
        def relabel(batch):
            return {"label": batch["label"][-1:] + batch["label"][:-1]}
        emotions_encoded = emotions_encoded.map(relabel, batched=True, batch_size=None)

    torch.manual_seed(seed)
    num_labels = 6
    config = AutoConfig.for_model("distilbert", vocab_size=len(tokenizer), dim=32, n_layers=2, n_heads=2,
                                  hidden_dim=64, max_position_embeddings=64, num_labels=num_labels)
    model = AutoModelForSequenceClassification.from_config(config)

    def compute_metrics(pred):
        labels = pred.label_ids
        preds = pred.predictions.argmax(-1)
        try:
            from sklearn.metrics import accuracy_score, f1_score
        except ImportError:  # sklearn is not installed here: accuracy only
            return {"accuracy": float((preds == labels).mean())}
        f1 = f1_score(labels, preds, average="weighted")
        acc = accuracy_score(labels, preds)
        return {"accuracy": acc, "f1": f1}

    batch_size = 16
    logging_steps = len(emotions_encoded["train"]) // batch_size
    model_name = os.path.join(tempfile.gettempdir(), "distilbert-base-uncased-finetuned-emotion")
    training_args = TrainingArguments(output_dir=model_name,
                                      num_train_epochs=2,
                                      learning_rate=5e-3,
                                      per_device_train_batch_size=batch_size,
                                      per_device_eval_batch_size=batch_size,
                                      weight_decay=0.01,
                                      eval_strategy="epoch",
                                      logging_steps=logging_steps,
                                      log_level="error",
                                      use_cpu=True,
                                      report_to="none",
                                      seed=seed)

    optimizers = (None, None)
    if bug == "optimizer_over_body_only":
        # the user's own optimizer handed to the Trainer, built over the DistilBERT body alone: the classification
        # head (pre_classifier, classifier) stays at its random initialization
        optimizers = (torch.optim.AdamW(model.distilbert.parameters(), lr=5e-3, weight_decay=0.01), None)

    trainer = Trainer(model=model, args=training_args,
                      compute_metrics=compute_metrics,
                      train_dataset=emotions_encoded["train"],
                      eval_dataset=emotions_encoded["validation"],
                      processing_class=tokenizer,
                      optimizers=optimizers)

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
        loss, logits, labels = trainer.prediction_step(model, batch, prediction_loss_only=False)
        metrics = compute_metrics(EvalPrediction(predictions=logits.numpy(), label_ids=labels.numpy()))
        return {"loss": float(loss), **metrics}

    first = next(iter(trainer.get_eval_dataloader()))
    return Program(name="nlpwt_emotion_trainer", model=model, batch=first,
                   loss_fn=lambda outputs, labels: outputs.loss, optimizer=trainer.optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # classic label misalignment: every training tweet carries the previous tweet's emotion.
    Bug("labels_shifted_by_one", functools.partial(_build, bug="labels_shifted_by_one"), "learning_ledger",
        ("TASK",)),
    # the optimizer given to the Trainer covers model.distilbert only: the classification head never moves.
    Bug("optimizer_over_body_only", functools.partial(_build, bug="optimizer_over_body_only"), "four_structures",
        ("classifier",)),
]
