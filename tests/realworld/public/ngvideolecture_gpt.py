# ruff: noqa: PLR0402, RUF059, C414
"""The lecture GPT of "Let's build GPT: from scratch, in code, spelled out": a character-level decoder-only
Transformer (token and position embeddings, ``n_layer`` pre-norm blocks of ``n_head`` separate causal attention
heads concatenated and projected, a ReLU feed-forward, dropout; final LayerNorm and ``lm_head``; normal(0, 0.02)
init) trained on random windows of a text (``get_batch``: inputs ``data[i:i+block_size]``, targets shifted by one),
cross-entropy over every position, AdamW lr 3e-4, ``zero_grad(set_to_none=True)`` between the forward and the
backward, ``estimate_loss`` in eval mode every ``eval_interval`` iterations.

Source: https://github.com/karpathy/ng-video-lecture
Commit: 52201428ed7b46804849dea0b3ccf0de9df1a5c3
Files: ``gpt.py``
License: MIT (README.md, section "License"; the repository has no LICENSE file; text in
LICENSES/karpathy-ng-video-lecture.txt)
Domain: causal transformer language model (character level)

Kept as written: ``Head`` (no-bias key/query/value, scores scaled by ``head_size ** -0.5``, the ``tril`` buffer
masked with ``-inf``, softmax, attention dropout), ``MultiHeadAttention``, ``FeedFoward`` (the original's
spelling), ``Block``, ``GPTLanguageModel`` (``_init_weights``, the ``(logits, loss)`` forward with the
``view(B*T, C)`` cross-entropy), ``get_batch``, ``estimate_loss`` and the loop body (evaluate every
``eval_interval``, sample a batch, forward, ``zero_grad(set_to_none=True)``, backward, step); lr 3e-4, dropout 0.2,
the 90/10 train/val split, ``torch.manual_seed(1337)`` replaced by the seed.

Deviations from the original:
- sizes for 2 CPU cores: batch_size 64 -> 16, block_size 256 -> 32, n_embd 384 -> 64, n_head 6 -> 4,
  n_layer 6 -> 2, eval_iters 200 -> 4, eval_interval 500 -> 100 (about 105k parameters);
- data: ``input.txt`` (tiny Shakespeare) is replaced by a synthetic text made from ``seed``: speakers' lines of
  words from a 16-word lexicon of lower-case letters, each word repeated 1-3 times, a speaker's name and ``:`` at
  the start of each paragraph, so a character is predictable from the ones before it; ``torch.randint`` in
  ``get_batch`` draws from a ``torch.Generator`` seeded from ``seed``;
- the script's module-level globals (the hyperparameters, ``vocab_size``, ``train_data``/``val_data``, ``model``)
  are module constants and ``_build`` locals; ``device`` is ``'cpu'``;
- the loop is unrolled: one ``train_step`` is one iteration of ``for iter in range(max_iters)`` and returns
  ``loss.item()``; the evaluation's print and the final generation are dropped (``estimate_loss`` runs, as
  written, every ``eval_interval`` iterations); ``eval_fn`` returns ``estimate_loss()['val']``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import string
import sys

import torch
import torch.nn as nn
from torch.nn import functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# hyperparameters
batch_size = 16 # how many independent sequences will we process in parallel?
block_size = 32 # what is the maximum context length for predictions?
max_iters = 5000
eval_interval = 100
learning_rate = 3e-4
device = 'cpu'
eval_iters = 4
n_embd = 64
n_head = 4
n_layer = 2
dropout = 0.2
# ------------
vocab_size = len(string.ascii_lowercase) + 3  # (port) letters, ' ', ':', '\n' (set again from the text at build)


class Head(nn.Module):
    """ one head of self-attention """

    def __init__(self, head_size, bug=None):
        super().__init__()
        self.bug = bug
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))

        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        # input of size (batch, time-step, channels)
        # output of size (batch, time-step, head size)
        B,T,C = x.shape
        k = self.key(x)   # (B,T,hs)
        q = self.query(x) # (B,T,hs)
        # compute attention scores ("affinities")
        wei = q @ k.transpose(-2,-1) * k.shape[-1]**-0.5 # (B, T, hs) @ (B, hs, T) -> (B, T, T)
        if self.bug != "attention_not_causal":
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf')) # (B, T, T)
        wei = F.softmax(wei, dim=-1) # (B, T, T)
        wei = self.dropout(wei)
        # perform the weighted aggregation of the values
        v = self.value(x) # (B,T,hs)
        out = wei @ v # (B, T, T) @ (B, T, hs) -> (B, T, hs)
        return out

class MultiHeadAttention(nn.Module):
    """ multiple heads of self-attention in parallel """

    def __init__(self, num_heads, head_size, bug=None):
        super().__init__()
        self.heads = nn.ModuleList([Head(head_size, bug=bug) for _ in range(num_heads)])
        self.proj = nn.Linear(head_size * num_heads, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        out = torch.cat([h(x) for h in self.heads], dim=-1)
        out = self.dropout(self.proj(out))
        return out

class FeedFoward(nn.Module):
    """ a simple linear layer followed by a non-linearity """

    def __init__(self, n_embd):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.ReLU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)

class Block(nn.Module):
    """ Transformer block: communication followed by computation """

    def __init__(self, n_embd, n_head, bug=None):
        # n_embd: embedding dimension, n_head: the number of heads we'd like
        super().__init__()
        head_size = n_embd // n_head
        self.sa = MultiHeadAttention(n_head, head_size, bug=bug)
        self.ffwd = FeedFoward(n_embd)
        self.ln1 = nn.LayerNorm(n_embd)
        self.ln2 = nn.LayerNorm(n_embd)

    def forward(self, x):
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln2(x))
        return x

class GPTLanguageModel(nn.Module):

    def __init__(self, bug=None):
        super().__init__()
        # each token directly reads off the logits for the next token from a lookup table
        self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
        self.position_embedding_table = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head=n_head, bug=bug) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd) # final layer norm
        self.lm_head = nn.Linear(n_embd, vocab_size)

        # better init, not covered in the original GPT video, but important, will cover in followup video
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape

        # idx and targets are both (B,T) tensor of integers
        tok_emb = self.token_embedding_table(idx) # (B,T,C)
        pos_emb = self.position_embedding_table(torch.arange(T, device=device)) # (T,C)
        x = tok_emb + pos_emb # (B,T,C)
        x = self.blocks(x) # (B,T,C)
        x = self.ln_f(x) # (B,T,C)
        logits = self.lm_head(x) # (B,T,vocab_size)

        if targets is None:
            loss = None
        else:
            B, T, C = logits.shape
            logits = logits.view(B*T, C)
            targets = targets.view(B*T)
            loss = F.cross_entropy(logits, targets)

        return logits, loss


def make_text(rng, n):
    """(port) Paragraphs of a speaker's name, ':', and words from a 16-word lexicon, each repeated 1-3 times."""
    letters = string.ascii_lowercase
    lexicon = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 5))) for _ in range(16)]
    names = lexicon[:4]
    out = letters + " :\n"  # every character of the alphabet appears once
    while len(out) < n:
        out += rng.choice(names) + ":\n"
        for _ in range(rng.randint(3, 8)):
            out += (rng.choice(lexicon) + " ") * rng.randint(1, 3)
        out += "\n\n"
    return out[:n]


def _data(seed, bug=None):
    """The script's data section: the vocabulary, the splits and ``get_batch`` (``vocab_size`` set as a global)."""
    global vocab_size
    text = make_text(random.Random(seed), 30000)
    gen = torch.Generator().manual_seed(seed)

    # here are all the unique characters that occur in this text
    chars = sorted(list(set(text)))
    vocab_size = len(chars)
    # create a mapping from characters to integers
    stoi = { ch:i for i,ch in enumerate(chars) }
    encode = lambda s: [stoi[c] for c in s] # encoder: take a string, output a list of integers

    # Train and test splits
    data = torch.tensor(encode(text), dtype=torch.long)
    n = int(0.9*len(data)) # first 90% will be train, rest val
    train_data = data[:n]
    val_data = data[n:]

    # data loading
    def get_batch(split):
        # generate a small batch of data of inputs x and targets y
        data = train_data if split == 'train' else val_data
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=gen)
        x = torch.stack([data[i:i+block_size] for i in ix])
        if bug == "targets_not_shifted":
            y = torch.stack([data[i:i+block_size] for i in ix])
        else:
            y = torch.stack([data[i+1:i+block_size+1] for i in ix])
        x, y = x.to(device), y.to(device)
        return x, y

    return get_batch


def _build(seed, bug=None):
    torch.manual_seed(seed)
    get_batch = _data(seed, bug)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ['train', 'val']:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    model = GPTLanguageModel(bug=bug)

    # create a PyTorch optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    st = {"iter": 0}

    def train_step():
        iter = st["iter"]
        # every once in a while evaluate the loss on train and val sets
        if iter % eval_interval == 0 or iter == max_iters - 1:
            estimate_loss()

        # sample a batch of data
        xb, yb = get_batch('train')

        # evaluate the loss
        logits, loss = model(xb, yb)
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        optimizer.step()
        st["iter"] = iter + 1
        return loss.item()

    def loss_fn(outputs, targets):
        logits, _loss = outputs
        B, T, C = logits.shape
        return F.cross_entropy(logits.view(B*T, C), targets.view(B*T))

    def eval_fn(model_, _batch=None):
        return float(estimate_loss()['val'])

    batch = get_batch('train')
    return Program(name="ngvideolecture_gpt", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the targets cut from the same characters as the inputs (no shift by one): the model learns to copy the
    # current character (classic).
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # the tril mask's masked_fill left out of Head.forward: every position attends to the characters after it,
    # which the targets are (classic).
    Bug("attention_not_causal", functools.partial(_build, bug="attention_not_causal"), "learning_ledger",
        ("DEPENDENCY",)),
    # zero_grad(set_to_none=True) moved after loss.backward(): every gradient is None when AdamW steps, so no
    # parameter moves (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
