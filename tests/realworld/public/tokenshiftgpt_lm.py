"""Token Shift GPT: a causal byte-level language model with no attention, each block a gated feedforward whose gate
mixes the past through token shifts (the gate's chunks replaced by normalized windowed sums of the cumulative sum,
shifted by 1, 2, 4, ... positions), token and learned absolute position embeddings, trained by the repository's
enwik8 script: ``AutoregressiveWrapper`` (inputs ``x[:, :-1]``, labels ``x[:, 1:]``, cross-entropy with
``ignore_index=-100``), Adam lr 2e-4, 4 micro-batches accumulated per update (the losses summed, not divided, as
written), ``clip_grad_norm_(0.5)``.

Source: https://github.com/lucidrains/token-shift-gpt
Commit: 45c86b00eeca1b55a9a9f2a12e924494db243781
Files: train.py, token_shift_gpt/token_shift_gpt.py, token_shift_gpt/autoregressive_wrapper.py
License: MIT (Copyright (c) 2021 Phil Wang; full text in LICENSES/lucidrains-token-shift-gpt.txt)
Domain: causal language model (token-shift gated MLP)

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, SEQ_LEN 768 -> 32 (so num_shifts 9 -> 4); ff_mult 8, BATCH_SIZE 4,
  GRADIENT_ACCUMULATE_EVERY 4, the learning rate and the clipping unchanged;
- ``.cuda()`` calls (the model's and the dataset's) are dropped;
- einops is not available: the two ``rearrange`` calls of the training path are written as indexing
  (``'n -> () n ()'`` as ``[None, :, None]``, ``'n d -> () n d'`` as ``[None]``); the ``use_discounted_cumsum``
  path (off by default and in train.py; it needs the torch-discounted-cumsum package) is left out;
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); the dataset class is unchanged;
- one ``train_step`` is one iteration of the outer training loop (4 micro-batches, clip, step, zero_grad) and
  returns the last micro-batch's loss (the loss the script prints); ``eval_fn`` is the script's validation step on
  a given batch; tqdm, printing and generation are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR1704, UP028  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from math import ceil, log2

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# constants

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-4
SEQ_LEN = 32


# ---- token_shift_gpt/token_shift_gpt.py ------------------------------------------------------------------------

# helper functions

def exists(val):
    return val is not None


def shift(x, amt, dim = -1):
    return F.pad(x, (*((0, 0) * (-dim - 1)), amt, -amt), value = 0.)


def shift_tokens(x, amt, eps = 1e-5, bug = None):
    n, device = x.shape[1], x.device

    cumsum = x.cumsum(dim = 1)
    *x, x_pass = x.chunk(amt + 1, dim = -1)
    *x_cumsum, _ = cumsum.chunk(amt + 1, dim = -1)

    amts = 2 ** torch.arange(amt)
    amts = amts.tolist()

    shifts = []
    denom = torch.arange(n, device = device)

    for x_chunk, x_cumsum_chunk, amt in zip(x, x_cumsum, amts):
        if bug == "token_shift_reversed":
            # the shift written with the wrong sign: the window of cumulative sums comes from the future
            shifted_chunk = shift(x_cumsum_chunk, -amt, dim = -2) - shift(x_cumsum_chunk, -2 * amt, dim = -2)
        else:
            shifted_chunk = shift(x_cumsum_chunk, amt, dim = -2) - shift(x_cumsum_chunk, 2 * amt, dim = -2)
        shifted_denom = shift(denom, amt, dim = -1) - shift(denom, 2 * amt, dim = -1)
        shifted_denom = shifted_denom[None, :, None]  # rearrange(shifted_denom, 'n -> () n ()')
        normed_shifted_x = shifted_chunk /  (shifted_denom + eps)
        shifts.append(normed_shifted_x)

    return torch.cat((*shifts, x_pass), dim = -1)


# helper classes

class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class FeedForward(nn.Module):
    def __init__(
        self,
        *,
        dim,
        max_seq_len,
        num_shifts,
        mult = 4,
        eps = 1e-3,
        bug = None
    ):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

        self.project_in = nn.Sequential(
            nn.Linear(dim, dim * mult),
            nn.GELU()
        )

        self.num_shifts = num_shifts
        hidden_dim = dim * mult // 2

        self.gate_norm = nn.LayerNorm(hidden_dim)
        self.to_gate = nn.Linear(hidden_dim, hidden_dim)

        nn.init.constant_(self.to_gate.weight, eps)
        nn.init.constant_(self.to_gate.bias, 1.)

        self.project_out = nn.Linear(hidden_dim, dim)
        self.bug = bug

    def forward(self, x):
        x = self.norm(x)

        x = self.project_in(x)

        x, gate = x.chunk(2, dim = -1)

        gate = self.gate_norm(gate)

        gate = shift_tokens(gate, self.num_shifts, bug = self.bug)

        x = x * self.to_gate(gate)
        return self.project_out(x)


# classes

class TokenShiftGPT(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        max_seq_len,
        depth,
        ff_mult = 4,
        bug = None
    ):
        super().__init__()
        self.seq_len = max_seq_len
        num_shifts = ceil(log2(max_seq_len)) - 1

        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.net = nn.Sequential(
            *[Residual(FeedForward(dim = dim, num_shifts = num_shifts, mult = ff_mult, max_seq_len = max_seq_len, bug = bug)) for _ in range(depth)],
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens)
        )

    def forward(self, x):
        x = self.token_emb(x)
        pos_emb = self.pos_emb(torch.arange(x.shape[1], device = x.device))
        x = x + pos_emb[None]  # rearrange(pos_emb, 'n d -> () n d')
        return self.net(x)


# ---- token_shift_gpt/autoregressive_wrapper.py (training path) -------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = -100, pad_value = 0, bug = None):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = ignore_index

        self.net = net
        self.max_seq_len = net.seq_len
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            xi, xo = x[:, :-1], x[:, :-1]
        else:
            xi, xo = x[:, :-1], x[:, 1:]
        out = self.net(xi, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index = self.ignore_index)
        return loss


# ---- train.py --------------------------------------------------------------------------------------------------

def cycle(loader):
    while True:
        for data in loader:
            yield data


class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len - 1, (1,))
        full_seq = self.data[rand_start: rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def make_bytes(gen, n):
    """Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data_train, data_val = make_bytes(gen, 10000), make_bytes(gen, 2000)

    # instantiate GPT-like decoder model

    model = TokenShiftGPT(
        num_tokens = 256,
        max_seq_len = SEQ_LEN,
        dim = 32,
        depth = 2,
        ff_mult = 8,
        bug = bug
    )

    model = AutoregressiveWrapper(model, bug = bug)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader  = cycle(train_data_loader)

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            if bug == "zero_grad_every_micro_batch":
                optim.zero_grad()
            loss = model(next(train_loader))
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    first = torch.stack([val_dataset[i] for i in range(BATCH_SIZE)])
    return Program(name="tokenshiftgpt_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # classic: the token shift written with the wrong sign: each gate chunk is a window of the FUTURE tokens'
    # features, so the next byte is visible to the position that must predict it.
    Bug("token_shift_reversed", functools.partial(_build, bug="token_shift_reversed"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: labels taken from the same positions as the inputs (the shift dropped): the model learns to copy.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: optim.zero_grad() inside the accumulation loop: only the last micro-batch's gradient is applied.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),
]
