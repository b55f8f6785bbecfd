# ruff: noqa: PLR0402, RUF059
"""GPT pretraining from "Build a Large Language Model From Scratch" (chapter 5, ``gpt_train.py``): the chapter-4
``GPTModel`` (token + learned position embeddings, pre-LayerNorm blocks of a hand-written causal
``MultiHeadAttention`` with a registered ``triu`` mask and a tanh-GELU feed-forward, a bias-free output head), next
token cross-entropy on ``logits.flatten(0, 1)``, AdamW with weight decay, and ``train_model_simple``'s plain loop
(zero_grad, loss, backward, step; ``evaluate_model`` on one train and one validation batch every ``eval_freq`` steps).

Source: https://github.com/rasbt/LLMs-from-scratch
Commit: 28c65cdfbc3338e2e040016eea4b7fdf556e4d57
Files: ``ch05/01_main-chapter-code/gpt_train.py`` (``calc_loss_batch``, ``calc_loss_loader``, ``evaluate_model``,
``train_model_simple``, ``main``, ``GPT_CONFIG_124M``, ``OTHER_SETTINGS``), ``ch05/01_main-chapter-code/previous_chapters.py``
(``GPTDatasetV1``, ``create_dataloader_v1``, ``MultiHeadAttention``, ``LayerNorm``, ``GELU``, ``FeedForward``,
``TransformerBlock``, ``GPTModel``)
License: Apache-2.0 (Copyright 2023-2026 Sebastian Raschka; full text in LICENSES/rasbt-LLMs-from-scratch.txt)
Domain: causal transformer LM (GPT-2 style, plain loop)

Kept as written: the model classes, ``GPTDatasetV1``'s sliding window (``target_chunk = token_ids[i + 1: i +
max_length + 1]``), ``create_dataloader_v1``'s ``DataLoader`` arguments, ``calc_loss_batch``,
``calc_loss_loader``, ``evaluate_model``, the loop body of ``train_model_simple``, ``main``'s AdamW (lr 5e-4,
weight decay 0.1), its 90/10 train/validation split, stride = context length, ``drop_last``/``shuffle`` choices,
eval_freq 5 and eval_iter 1, ``torch.manual_seed(123)`` replaced by the seed.

Deviations from the original:
- "the-verdict.txt" (a download) and the tiktoken GPT-2 tokenizer are not here: the text is a synthetic token
  stream made from ``seed`` (vocabulary 64; each token is followed by ``succ[token]`` of a seeded permutation 90% of
  the time, by a random token otherwise), so ``GPTDatasetV1`` and ``create_dataloader_v1`` take token ids instead of
  text (the ``tokenizer.encode`` call is dropped);
- sizes for 2 CPU cores: vocab_size 50257 -> 64, context_length 256 -> 32, emb_dim 768 -> 64, n_heads 12 -> 4,
  n_layers 12 -> 2, batch_size 2 -> 8; the device is the CPU;
- ``train_model_simple``'s epoch loop is unrolled: one ``train_step`` is one batch of it (``model.train()`` and a
  fresh shuffled iterator at the start of an epoch); the per-epoch ``generate_and_print_sample``, the prints, the
  plot and the checkpoint are dropped; ``eval_fn`` is ``evaluate_model``'s validation loss on the whole
  validation loader;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

VOCAB = 64  # (port) synthetic vocabulary


# previous_chapters.py -- Chapter 2
class GPTDatasetV1(Dataset):
    def __init__(self, token_ids, max_length, stride, bug=None):
        self.input_ids = []
        self.target_ids = []

        # (port) the text arrives tokenized: token_ids = tokenizer.encode(txt, ...) is dropped

        # Use a sliding window to chunk the book into overlapping sequences of max_length
        for i in range(0, len(token_ids) - max_length, stride):
            input_chunk = token_ids[i:i + max_length]
            if bug == "targets_not_shifted":
                target_chunk = token_ids[i:i + max_length]
            else:
                target_chunk = token_ids[i + 1: i + max_length + 1]
            self.input_ids.append(torch.tensor(input_chunk))
            self.target_ids.append(torch.tensor(target_chunk))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def create_dataloader_v1(token_ids, batch_size=4, max_length=256,
                         stride=128, shuffle=True, drop_last=True, num_workers=0, bug=None, generator=None):
    # Create dataset
    dataset = GPTDatasetV1(token_ids, max_length, stride, bug=bug)

    # Create dataloader
    dataloader = DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers,
        generator=generator)

    return dataloader


# previous_chapters.py -- Chapter 3
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, bug=None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by n_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads  # Reduce the projection dim to match desired output dim

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # Linear layer to combine head outputs
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.bug = bug

    def forward(self, x):
        b, num_tokens, d_in = x.shape

        keys = self.W_key(x)  # Shape: (b, num_tokens, d_out)
        queries = self.W_query(x)
        values = self.W_value(x)

        # Unroll last dim: (b, num_tokens, d_out) -> (b, num_tokens, num_heads, head_dim)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

        # Transpose: (b, num_tokens, num_heads, head_dim) -> (b, num_heads, num_tokens, head_dim)
        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)

        # Compute scaled dot-product attention (aka self-attention) with a causal mask
        attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

        # Original mask truncated to the number of tokens and converted to boolean
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]

        # Use the mask to fill attention scores
        if self.bug == "mask_fill_not_in_place":
            attn_scores.masked_fill(mask_bool, -torch.inf)
        else:
            attn_scores.masked_fill_(mask_bool, -torch.inf)

        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)

        # Shape: (b, num_tokens, num_heads, head_dim)
        if self.bug == "heads_merged_without_transpose":
            context_vec = attn_weights @ values
        else:
            context_vec = (attn_weights @ values).transpose(1, 2)

        # Combine heads, where self.d_out = self.num_heads * self.head_dim
        context_vec = context_vec.reshape(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)  # optional projection

        return context_vec


# previous_chapters.py -- Chapter 4
class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)
        return self.scale * norm_x + self.shift


class GELU(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(
            torch.sqrt(torch.tensor(2.0 / torch.pi)) *
            (x + 0.044715 * torch.pow(x, 3))
        ))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]),
            GELU(),
            nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]),
        )

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(
            d_in=cfg["emb_dim"],
            d_out=cfg["emb_dim"],
            context_length=cfg["context_length"],
            num_heads=cfg["n_heads"],
            dropout=cfg["drop_rate"],
            qkv_bias=cfg["qkv_bias"],
            bug=cfg.get("bug"))  # (port) bug switch
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        # Shortcut connection for attention block
        shortcut = x
        x = self.norm1(x)
        x = self.att(x)   # Shape [batch_size, num_tokens, emb_size]
        x = self.drop_shortcut(x)
        x = x + shortcut  # Add the original input back

        # Shortcut connection for feed-forward block
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.drop_shortcut(x)
        x = x + shortcut  # Add the original input back

        return x


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])

        self.trf_blocks = nn.Sequential(
            *[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])

        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        tok_embeds = self.tok_emb(in_idx)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = tok_embeds + pos_embeds  # Shape [batch_size, num_tokens, emb_size]
        x = self.drop_emb(x)
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        logits = self.out_head(x)
        return logits


# gpt_train.py
def calc_loss_batch(input_batch, target_batch, model, device):
    input_batch, target_batch = input_batch.to(device), target_batch.to(device)
    logits = model(input_batch)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_batch.flatten())
    return loss


def calc_loss_loader(data_loader, model, device, num_batches=None):
    total_loss = 0.
    if len(data_loader) == 0:
        return float("nan")
    elif num_batches is None:
        num_batches = len(data_loader)
    else:
        num_batches = min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            loss = calc_loss_batch(input_batch, target_batch, model, device)
            total_loss += loss.item()
        else:
            break
    return total_loss / num_batches


def evaluate_model(model, train_loader, val_loader, device, eval_iter):
    model.eval()
    with torch.no_grad():
        train_loss = calc_loss_loader(train_loader, model, device, num_batches=eval_iter)
        val_loss = calc_loss_loader(val_loader, model, device, num_batches=eval_iter)
    model.train()
    return train_loss, val_loss


def _token_stream(seed, n_tokens=5800):
    """(port) The synthetic "text": a seeded successor permutation followed 90% of the time."""
    g = torch.Generator().manual_seed(seed)
    succ = torch.randperm(VOCAB, generator=g)
    jumps = torch.rand(n_tokens, generator=g) < 0.1
    noise = torch.randint(0, VOCAB, (n_tokens,), generator=g)
    ids = [int(noise[0])]
    for t in range(1, n_tokens):
        ids.append(int(noise[t]) if jumps[t] else int(succ[ids[-1]]))
    return ids


def _build(seed, bug=None):
    gpt_config = {"vocab_size": VOCAB, "context_length": 32, "emb_dim": 64, "n_heads": 4, "n_layers": 2,
                  "drop_rate": 0.1, "qkv_bias": False, "bug": bug}  # (port) sizes; bug switch
    settings = {"learning_rate": 5e-4, "num_epochs": 10, "batch_size": 8, "weight_decay": 0.1}

    torch.manual_seed(seed)
    device = torch.device("cpu")
    text_data = _token_stream(seed)

    model = GPTModel(gpt_config)
    model.to(device)  # no assignment model = model.to(device) necessary for nn.Module classes
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings["learning_rate"], weight_decay=settings["weight_decay"]
    )

    # Train/validation ratio
    train_ratio = 0.90
    split_idx = int(train_ratio * len(text_data))

    train_loader = create_dataloader_v1(
        text_data[:split_idx], batch_size=settings["batch_size"], max_length=gpt_config["context_length"],
        stride=gpt_config["context_length"], drop_last=True, shuffle=True, num_workers=0, bug=bug,
        generator=torch.Generator().manual_seed(seed))
    val_loader = create_dataloader_v1(
        text_data[split_idx:], batch_size=settings["batch_size"], max_length=gpt_config["context_length"],
        stride=gpt_config["context_length"], drop_last=False, shuffle=False, num_workers=0, bug=bug)

    eval_freq, eval_iter = 5, 1
    state = {"it": None, "global_step": -1, "tokens_seen": 0, "train_losses": [], "val_losses": []}

    def train_step():
        # train_model_simple's loop body, one batch per call
        batch = next(state["it"], None) if state["it"] is not None else None
        if batch is None:
            model.train()  # Set model to training mode
            state["it"] = iter(train_loader)
            batch = next(state["it"])
        input_batch, target_batch = batch
        optimizer.zero_grad()  # Reset loss gradients from previous batch iteration
        loss = calc_loss_batch(input_batch, target_batch, model, device)
        loss.backward()  # Calculate loss gradients
        optimizer.step()  # Update model weights using loss gradients
        state["tokens_seen"] += input_batch.numel()
        state["global_step"] += 1

        # Optional evaluation step
        if state["global_step"] % eval_freq == 0:
            train_loss, val_loss = evaluate_model(model, train_loader, val_loader, device, eval_iter)
            state["train_losses"].append(train_loss)
            state["val_losses"].append(val_loss)
        return loss

    def eval_fn(model, _batch):
        model.eval()
        with torch.no_grad():
            val_loss = calc_loss_loader(val_loader, model, device)
        model.train()
        return val_loss

    first = next(iter(train_loader))
    return Program(name="llmsfromscratch_gpt_train", model=model, batch=first,
                   loss_fn=lambda logits, targets: torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                                                     targets.flatten()),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the out-of-place masked_fill, whose result is thrown away, instead of masked_fill_: the causal mask
    # is never applied and every position attends to the tokens it must predict.
    Bug("mask_fill_not_in_place", functools.partial(_build, bug="mask_fill_not_in_place"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the dataset's targets are the input window itself, not the window shifted by one token.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: the heads merged by reshaping (b, heads, tokens, head_dim) without the transpose back, which mixes
    # tokens and heads in every position's context vector.
    Bug("heads_merged_without_transpose", functools.partial(_build, bug="heads_merged_without_transpose"),
        "tensor_trace", ("trf_blocks.0.att",)),
]
