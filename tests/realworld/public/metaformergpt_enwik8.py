# ruff: noqa: F841, RUF046, UP018, UP028
"""lucidrains' metaformer-gpt: a GPT-like character model with no attention (``MetaformerGPT``): token and learned
position embeddings, then per layer a multi-head exponential time decay (``MultiheadExponentialTimeDecay``: a causal
convolution of the projected heads with per-head ``alpha * (1 - alpha) ** k`` weights, done by FFT in
``conv1d_fft``), a ``MeanCenteringPool`` (the running mean of the normalized tokens minus each token) and a
feed-forward block, each residual; ``AutoregressiveWrapper`` cuts ``x[:, :-1]`` / ``x[:, 1:]`` and scores the logits
with cross-entropy. ``train.py``: random windows of enwik8 bytes, Adam, ``GRADIENT_ACCUMULATE_EVERY`` backward passes
per update (losses summed, as written), ``clip_grad_norm_(0.5)``, ``step``, ``zero_grad``, a validation loss every
``VALIDATE_EVERY`` updates.

Source: https://github.com/lucidrains/metaformer-gpt
Commit: 9853266c8dc8daf985b0f346c6fbf2b63991c7f3
Files: metaformer_gpt/metaformer_gpt.py, metaformer_gpt/autoregressive_wrapper.py, train.py
License: MIT (Copyright (c) 2022 Phil Wang), LICENSES/lucidrains-metaformer-gpt.txt
Domain: causal language model (character level, attention-free token mixing)

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, heads 16 -> 4, dim_head 32 -> 8, SEQ_LEN 1024 -> 48, BATCH_SIZE 4 and
  GRADIENT_ACCUMULATE_EVERY 4 kept, LEARNING_RATE 2e-4 -> 2e-3 (a short run from scratch), VALIDATE_EVERY 100 -> 10;
  the 256-byte vocabulary kept;
- data: ``./data/enwik8.gz`` is replaced by a synthetic byte stream from ``seed`` (words of 3-7 lower-case letters
  drawn from a fixed 24-word lexicon, separated by spaces, with a fixed word-to-next-word rule half of the time), split
  90/10 into train/validation as written; ``TextSamplerDataset`` and ``cycle`` kept (``.cuda()`` dropped);
- einops: ``rearrange`` written out (``view`` / ``permute`` / ``reshape``); no GPU; tqdm, the prints and the
  ``GENERATE_EVERY`` sampling left out; one ``train_step`` is one pass of the training loop (the accumulated
  micro-batches, the clip, the step and the validation loss when due), returning the last micro-batch's loss;
  ``eval_fn`` is the validation loss on one batch.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from scipy.fftpack import next_fast_len
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 40


# ---- metaformer_gpt/metaformer_gpt.py ------------------------------------------------------------------------------

# helper functions

def cummean(x, *, dim):
    numer = x.cumsum(dim = dim)
    denom = torch.arange(x.shape[1], device = x.device) + 1
    return numer / denom.view(-1, 1)  # rearrange(denom, '... -> ... 1')

def conv1d_fft(x, weights, dim = -2, weight_dim = -1):
    # O(N log(N)) 1d convolution using some fourier trick

    N = x.shape[dim]
    M = weights.shape[weight_dim]

    fast_len = next_fast_len(N + M - 1)

    f_x = torch.fft.rfft(x, n = fast_len, dim = dim)
    f_weight = torch.fft.rfft(weights, n = fast_len, dim = weight_dim)

    f_v_weight = f_x * f_weight.conj().unsqueeze(-1)  # rearrange(f_weight.conj(), '... -> ... 1')
    out = torch.fft.irfft(f_v_weight, fast_len, dim = dim)
    out = out.roll(-1, dims = (dim,))

    indices = torch.arange(start = fast_len - N, end = fast_len, dtype = torch.long, device = x.device)
    out = out.index_select(dim, indices)
    return out

# classes

class MeanCenteringPool(nn.Module):
    def __init__(
        self,
        dim,
        bug = None
    ):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim, bias = False)
        self.bug = bug

    def forward(self, x):
        x = self.norm(x)
        if self.bug == "pool_mean_over_whole_sequence":
            # the mean over the whole window in place of the running mean: every token sees the ones after it
            x = x.mean(dim = 1, keepdim = True) - x
        else:
            x = cummean(x, dim = 1) - x
        return self.proj(x)

class MultiheadExponentialTimeDecay(nn.Module):
    def __init__(
        self,
        dim,
        *,
        heads = 8,
        dim_head = 64
    ):
        super().__init__()
        self.heads = heads
        inner_dim = heads * dim_head

        self.norm = nn.LayerNorm(dim)
        self.alpha = nn.Parameter(torch.randn(heads))

        self.project_in = nn.Linear(dim, inner_dim, bias = False)
        self.project_out = nn.Linear(inner_dim, dim, bias = False)

    def forward(self, x):
        b, n, d, h, device = *x.shape, self.heads, x.device

        x = self.norm(x)

        # linear project in

        x = self.project_in(x)

        # split out heads

        x = x.view(b, n, h, -1).permute(0, 2, 1, 3)  # rearrange(x, 'b n (h d) -> b h n d', h = h)

        # prepare exponential alpha

        alpha = self.alpha.sigmoid()
        alpha = alpha.view(h, 1)  # rearrange(alpha, 'h -> h 1')

        # arange == powers

        arange = torch.arange(n, device = device)
        weights = alpha * (1 - alpha) ** torch.flip(arange, dims = (0,))
        output = conv1d_fft(x, weights)

        # merge heads

        output = output.permute(0, 2, 1, 3).reshape(b, n, -1)  # rearrange(output, 'b h n d -> b n (h d)')
        return self.project_out(output)

def FeedForward(dim, mult = 4):
    hidden_dim = int(dim * mult)
    return nn.Sequential(
        nn.LayerNorm(dim),
        nn.Linear(dim, hidden_dim, bias = False),
        nn.GELU(),
        nn.Linear(hidden_dim, dim, bias = False)
    )

class MetaformerGPT(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        depth,
        heads = 16,
        dim_head = 32,
        max_seq_len = 2048,
        ff_mult = 4,
        bug = None
    ):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                MultiheadExponentialTimeDecay(dim, heads = heads, dim_head = dim_head),
                MeanCenteringPool(dim, bug = bug),
                FeedForward(dim, mult = ff_mult)
            ]))

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens, bias = False)
        )

    def forward(self, x):
        n, device = x.shape[1], x.device

        x = self.token_emb(x)
        x = x + self.pos_emb(torch.arange(n, device = device))

        for mh_esa, pool, ff in self.layers:
            x = mh_esa(x) + x
            x = pool(x) + x
            x = ff(x) + x

        return self.to_logits(x)


# ---- metaformer_gpt/autoregressive_wrapper.py (training part) ------------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, max_seq_len=2048, pad_value=0, bug=None):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.pad_value = pad_value
        self.net = net
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            # the labels cut like the inputs: each position is scored on the byte it was given
            x_inp, x_labels = x[:, :-1], x[:, :-1]
        else:
            x_inp, x_labels = x[:, :-1], x[:, 1:]
        logits = self.net(x_inp, **kwargs)
        return F.cross_entropy(logits.permute(0, 2, 1), x_labels)  # rearrange(logits, "b c n -> b n c")


# ---- train.py ------------------------------------------------------------------------------------------------------

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-3
VALIDATE_EVERY = 10
SEQ_LEN = 48


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
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def make_stream(rng, n_bytes):
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    lexicon = [bytes(rng.choice(letters, size=int(rng.integers(3, 8)))) for _ in range(24)]
    follow = rng.permutation(len(lexicon))
    out, w, total = [], int(rng.integers(len(lexicon))), 0
    while total < n_bytes:
        out.append(lexicon[w])
        total += len(lexicon[w]) + 1
        w = int(follow[w]) if rng.random() < 0.5 else int(rng.integers(len(lexicon)))
    return np.frombuffer(b" ".join(out)[:n_bytes], dtype=np.uint8).copy()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    # instantiate GPT-like decoder model

    model = MetaformerGPT(
        num_tokens = 256,
        dim = 32,
        depth = 2,
        heads = 4,
        dim_head = 8,
        bug = bug
    )

    model = AutoregressiveWrapper(model, max_seq_len=SEQ_LEN, bug=bug)

    # prepare enwik8 data

    X = make_stream(rng, 20000)
    trX, vaX = np.split(X, [int(18000)])
    data_train, data_val = torch.from_numpy(trX), torch.from_numpy(vaX)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_loader = cycle(DataLoader(train_dataset, batch_size=BATCH_SIZE))
    val_loader = cycle(DataLoader(val_dataset, batch_size=BATCH_SIZE))

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    state = {"i": 0, "val": None}

    def train_step():
        i = state["i"]
        state["i"] += 1
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        if bug == "clip_after_step":
            optim.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optim.step()
        optim.zero_grad()

        if i % VALIDATE_EVERY == 0:
            model.eval()
            with torch.no_grad():
                state["val"] = model(next(val_loader)).item()
        return loss.detach()

    def eval_fn(model, batch):
        was_training = model.training
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        model.train(was_training)
        return float(loss)

    g = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, data_train.size(0) - SEQ_LEN, (BATCH_SIZE,), generator=g)
    first = torch.stack([data_train[s : s + SEQ_LEN + 1].long() for s in starts.tolist()])
    return Program(name="metaformergpt_enwik8", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # classic: the running mean of MeanCenteringPool (cummean) replaced by the window's mean: each position's
    # features include the bytes after it, which the causal LM must predict.
    Bug("pool_mean_over_whole_sequence", functools.partial(_build, bug="pool_mean_over_whole_sequence"),
        "learning_ledger", ("DEPENDENCY",)),
    # classic: AutoregressiveWrapper's labels cut like its inputs (x[:, :-1]): the model is trained to copy its input.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: clip_grad_norm_ after optim.step(): the update uses the unclipped accumulated gradients.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
