# ruff: noqa: RUF059
"""simpleT5 (Shivanandroy/simpleT5): a Lightning wrapper that fine-tunes a T5 ``T5ForConditionalGeneration`` on a
DataFrame of ``source_text`` / ``target_text`` pairs: both sides tokenized to fixed lengths, the target's pad ids
replaced by -100, the model's own cross-entropy over the labels (decoder inputs shifted from them inside T5),
``AdamW(lr=1e-4)`` under Lightning's automatic optimization.

Source: https://github.com/Shivanandroy/simpleT5
Commit: 39a137d494626f449ac46209bff19a9d8f1784d5
Files: simplet5/simplet5.py (PyTorchDataModule, LightningDataModule, LightningModel, SimpleT5.train), README.md
License: MIT (Copyright (c) 2021 Shivanand Roy; full text in LICENSES/Shivanandroy-simpleT5.txt)
Domain: seq2seq (T5 encoder-decoder from config on a word-translation task, Lightning module)

Kept as written: ``PyTorchDataModule.__getitem__`` (``padding="max_length"``, truncation, ``labels == 0`` set to
-100, the four flattened tensors), ``LightningDataModule`` (``setup``, the shuffled training loader, the
validation loader), ``LightningModel`` (``forward`` passing ``labels`` and ``decoder_attention_mask`` to the model
and returning ``(output.loss, output.logits)``, ``training_step``, ``validation_step``, ``configure_optimizers``'
``AdamW(self.parameters(), lr=0.0001)``), ``SimpleT5.train``'s wiring (data module, model, ``max_epochs`` 5,
``batch_size`` 8, precision 32).

Deviations from the original:
- no downloads: ``from_pretrained("t5", "t5-base")`` is replaced by ``T5ForConditionalGeneration(T5Config(...))``
  with random weights (d_model 64, d_kv 16, d_ff 128, 2 encoder and 2 decoder layers, 4 heads; T5's pad 0,
  eos 1, decoder start 0) and the SentencePiece ``T5TokenizerFast`` by a word-level ``PreTrainedTokenizerFast``
  with T5's conventions (``<pad>`` 0, ``</s>`` 1 appended, ``<unk>`` 2);
- data: the README's news-summary DataFrame is replaced by synthetic pairs from ``seed``: ``"translate: "`` and
  4 to 7 source words; the target is the words mapped through a fixed dictionary, in reverse order (1000 training
  and 100 evaluation rows); ``source_max_token_len`` 512 -> 12, ``target_max_token_len`` 128 -> 10;
- ``AdamW``'s lr 1e-4 -> 1e-3 so that the 30 steps of the self-check show the loss falling from random weights;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it
  (``_lightning_loop.automatic_step``: ``training_step`` in the closure, the ``optimizer_zero_grad`` hook,
  ``backward``, from the ``optimizer_step`` hook), with a ``Trainer(barebones=True)`` attached so ``self.log`` is a
  no-op; at an epoch's end the validation loop runs. ``pl.seed_everything(42)`` at import becomes seeding from
  ``seed`` in ``build``; the loaders have no worker processes and the training loader's shuffle has a seeded
  generator; ``training_epoch_end`` / ``validation_epoch_end`` (checkpoint saving and loss averaging; hooks that
  Lightning 2 removed), the progress bar, logger, early stopping and ``gpus`` are left out; ``test_step``,
  ``load_model`` and ``predict`` are not ported;
- the Program's batch is a training batch under ``forward``'s argument names, ``loss_fn`` takes ``forward``'s loss;
  ``eval_fn`` is ``validation_step``'s loss on a batch (``eval()``, ``no_grad``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import warnings

import numpy as np
import pandas as pd
import pytorch_lightning as pl
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.optim import AdamW
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizer, PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _lightning_loop import automatic_step

N_SRC_WORDS = 24


class PyTorchDataModule(Dataset):
    """  PyTorch Dataset class  """

    def __init__(
        self,
        data: pd.DataFrame,
        tokenizer: PreTrainedTokenizer,
        source_max_token_len: int = 512,
        target_max_token_len: int = 512,
        bug=None,
    ):
        self.tokenizer = tokenizer
        self.data = data
        self.source_max_token_len = source_max_token_len
        self.target_max_token_len = target_max_token_len
        self.bug = bug

    def __len__(self):
        """ returns length of data """
        return len(self.data)

    def __getitem__(self, index: int):
        """ returns dictionary of input tensors to feed into T5/MT5 model"""

        data_row = self.data.iloc[index]
        source_text = data_row["source_text"]

        source_text_encoding = self.tokenizer(
            source_text,
            max_length=self.source_max_token_len,
            padding="max_length",
            truncation=True,
            return_attention_mask=True,
            add_special_tokens=True,
            return_tensors="pt",
        )

        target_text_encoding = self.tokenizer(
            source_text if self.bug == "labels_from_source_text" else data_row["target_text"],
            max_length=self.target_max_token_len,
            padding="max_length",
            truncation=True,
            return_attention_mask=True,
            add_special_tokens=True,
            return_tensors="pt",
        )

        labels = target_text_encoding["input_ids"]
        if self.bug != "pad_labels_not_ignored":
            labels[
                labels == 0
            ] = -100  # to make sure we have correct labels for T5 text generation

        return dict(  # noqa: C408
            source_text_input_ids=source_text_encoding["input_ids"].flatten(),
            source_text_attention_mask=source_text_encoding["attention_mask"].flatten(),
            labels=labels.flatten(),
            labels_attention_mask=target_text_encoding["attention_mask"].flatten(),
        )


class LightningDataModule(pl.LightningDataModule):
    """ PyTorch Lightning data class """

    def __init__(
        self,
        train_df: pd.DataFrame,
        test_df: pd.DataFrame,
        tokenizer: PreTrainedTokenizer,
        batch_size: int = 4,
        source_max_token_len: int = 512,
        target_max_token_len: int = 512,
        num_workers: int = 2,
        seed: int = 0,
        bug=None,
    ):
        super().__init__()

        self.train_df = train_df
        self.test_df = test_df
        self.batch_size = batch_size
        self.tokenizer = tokenizer
        self.source_max_token_len = source_max_token_len
        self.target_max_token_len = target_max_token_len
        self.num_workers = num_workers
        self.seed = seed  # (port) the shuffle's generator
        self.bug = bug

    def setup(self, stage=None):
        self.train_dataset = PyTorchDataModule(
            self.train_df,
            self.tokenizer,
            self.source_max_token_len,
            self.target_max_token_len,
            bug=self.bug,
        )
        self.test_dataset = PyTorchDataModule(
            self.test_df,
            self.tokenizer,
            self.source_max_token_len,
            self.target_max_token_len,
            bug=self.bug,
        )

    def train_dataloader(self):
        """ training dataloader """
        return DataLoader(
            self.train_dataset,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def val_dataloader(self):
        """ validation dataloader """
        return DataLoader(
            self.test_dataset,
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.num_workers,
        )


class LightningModel(pl.LightningModule):
    """ PyTorch Lightning Model class"""

    def __init__(
        self,
        tokenizer,
        model,
        outputdir: str = "outputs",
        save_only_last_epoch: bool = False,
        bug=None,
    ):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.outputdir = outputdir
        self.average_training_loss = None
        self.average_validation_loss = None
        self.save_only_last_epoch = save_only_last_epoch
        self.bug = bug

    def forward(self, input_ids, attention_mask, decoder_attention_mask, labels=None):
        """ forward step """
        output = self.model(
            input_ids,
            attention_mask=attention_mask,
            labels=labels,
            decoder_attention_mask=decoder_attention_mask,
        )

        return output.loss, output.logits

    def training_step(self, batch, batch_size):
        """ training step """
        input_ids = batch["source_text_input_ids"]
        attention_mask = batch["source_text_attention_mask"]
        labels = batch["labels"]
        labels_attention_mask = batch["labels_attention_mask"]

        loss, outputs = self(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_attention_mask=labels_attention_mask,
            labels=labels,
        )

        self.log(
            "train_loss", loss, prog_bar=True, logger=True, on_epoch=True, on_step=True
        )
        return loss

    def validation_step(self, batch, batch_size):
        """ validation step """
        input_ids = batch["source_text_input_ids"]
        attention_mask = batch["source_text_attention_mask"]
        labels = batch["labels"]
        labels_attention_mask = batch["labels_attention_mask"]

        loss, outputs = self(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_attention_mask=labels_attention_mask,
            labels=labels,
        )

        self.log(
            "val_loss", loss, prog_bar=True, logger=True, on_epoch=True, on_step=True
        )
        return loss

    def configure_optimizers(self):
        """ configure optimizers """
        if self.bug == "optimizer_over_encoder_only":
            return AdamW(self.model.encoder.parameters(), lr=0.001)
        return AdamW(self.parameters(), lr=0.001)  # (port) lr=0.0001


# ------------------------------------------------------------------------------------ (port) tokenizer and data
def word_tokenizer(words):
    """A word-level fast tokenizer with T5's special ids: <pad> 0, </s> 1 (appended), <unk> 2."""
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "translate:": 3}
    for w in words:
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def synthetic_pairs(rng, n, mapping):
    rows = []
    for _ in range(n):
        src = rng.integers(N_SRC_WORDS, size=rng.integers(4, 8))
        rows.append({"source_text": "translate: " + " ".join("s%d" % i for i in src),  # noqa: UP031
                     "target_text": " ".join("t%d" % mapping[i] for i in src[::-1])})  # noqa: UP031
    return pd.DataFrame(rows)


def _build(seed, bug=None):
    torch.manual_seed(seed)  # (port) pl.seed_everything(42) at import
    rng = np.random.default_rng(seed)
    mapping = rng.permutation(N_SRC_WORDS)
    tokenizer = word_tokenizer(["s%d" % i for i in range(N_SRC_WORDS)] + ["t%d" % i for i in range(N_SRC_WORDS)])  # noqa: UP031
    train_df = synthetic_pairs(rng, 1000, mapping)
    eval_df = synthetic_pairs(rng, 100, mapping)

    # SimpleT5.from_pretrained("t5", ...): (port) random weights from a config
    model = T5ForConditionalGeneration(T5Config(
        vocab_size=len(tokenizer), d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
        dropout_rate=0.1, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))

    # SimpleT5.train
    data_module = LightningDataModule(
        train_df,
        eval_df,
        tokenizer,
        batch_size=8,
        source_max_token_len=12,  # (port) 512
        target_max_token_len=10,  # (port) 128
        num_workers=0,  # (port) 2
        seed=seed,
        bug=bug,
    )
    T5Model = LightningModel(
        tokenizer=tokenizer,
        model=model,
        outputdir="outputs",
        save_only_last_epoch=False,
        bug=bug,
    )

    # the pieces of trainer.fit(self.T5Model, self.data_module) that the step-by-step loop needs
    data_module.setup("fit")
    train_dataloader = data_module.train_dataloader()
    val_dataloader = data_module.val_dataloader()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        trainer = pl.Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=5, precision=32)
    trainer.strategy.connect(T5Model)
    T5Model.trainer = trainer
    optimizer = T5Model.configure_optimizers()

    def validation_epoch():
        T5Model.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_dataloader):
                T5Model.validation_step(batch, batch_idx)
        T5Model.train()

    train_step = automatic_step(T5Model, optimizer, train_dataloader, epoch_end=validation_epoch)

    def eval_fn(module, batch):
        module.eval()
        with torch.no_grad():
            loss = module.validation_step(next(iter(val_dataloader)), 0)
        module.train()
        return float(loss)

    first = next(iter(DataLoader(data_module.train_dataset, batch_size=8)))
    batch = {"input_ids": first["source_text_input_ids"], "attention_mask": first["source_text_attention_mask"],
             "decoder_attention_mask": first["labels_attention_mask"], "labels": first["labels"]}
    return Program(name="simplet5_seq2seq", model=T5Model, batch=batch, loss_fn=lambda out, _t: out[0],
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the target's pad ids left in the labels (the `labels == 0` -> -100 line dropped): T5's cross-entropy
    # (ignore_index -100) trains every padded position toward <pad>; the pitfall of
    # https://github.com/allenai/allennlp/issues/5342 ("T5 mask bug when calculate loss").
    Bug("pad_labels_not_ignored", functools.partial(_build, bug="pad_labels_not_ignored"), "learning_ledger",
        ("OBJECTIVE",)),
    # the target encoding made from source_text (classic copy-paste slip in __getitem__): the model learns to copy
    # its input instead of translating.
    Bug("labels_from_source_text", functools.partial(_build, bug="labels_from_source_text"), "learning_ledger",
        ("TASK",)),
    # configure_optimizers over the encoder's parameters only (classic): the decoder's blocks never move.
    Bug("optimizer_over_encoder_only", functools.partial(_build, bug="optimizer_over_encoder_only"),
        "four_structures", ("model.decoder",)),
]
