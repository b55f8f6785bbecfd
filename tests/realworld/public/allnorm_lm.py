"""All-normalization transformer character language model trained by the repository's enwik8 script:
``TransformerLM`` (token and learned position embeddings, per layer a residual post-LayerNorm attention block whose
softmax is replaced by a (causal) normalization of the attention scores with a learned per-head gain and bias,
shared keys/values, ``only_norm = True`` so there is no feedforward), wrapped in ``AutoregressiveWrapper``
(``cross_entropy`` of the logits on ``x[:, :-1]`` against ``x[:, 1:]``, ``ignore_index`` = the pad value 0), Adam
lr 3e-4, 4 micro-batches accumulated per update (each loss divided by ``GRADIENT_ACCUMULATE_EVERY``),
``clip_grad_norm_(0.5)``, ``step`` then ``zero_grad``.

Source: https://github.com/lucidrains/all-normalization-transformer
Commit: 2412ab8eceb3d777cac918d29c90a9dc81f21126
Files: train_enwik8.py, all_normalization_transformer/all_normalization_transformer.py,
all_normalization_transformer/autoregressive_wrapper.py
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-all-normalization-transformer.txt)
Domain: causal language model (attention without softmax: "Transformers without Tears"-style all-normalization),
character level

Kept as written: ``cum_mean``, ``normalize``, ``causal_normalize`` (in-place centring included), ``Residual``,
``PostNorm``, ``PreNorm``, ``FeedForward``, ``Attention`` (the mask applied to the scores before the normalization
and again to the normalized attention), ``Transformer``, ``TransformerLM``, the wrapper's ``forward``, train_enwik8.py's
``TextSamplerDataset``, ``cycle``, the optimizer and the loop body (train mode, the accumulation loop, clip, step,
zero_grad) and the validation step.

Deviations from the original:
- sizes for 2 CPU cores: dim 512 -> 64, depth 12 -> 2, heads 8 -> 4, SEQ_LEN 512 -> 64 (BATCH_SIZE 4,
  GRADIENT_ACCUMULATE_EVERY 4 and the clipping at 0.5 unchanged); LEARNING_RATE 3e-4 -> 3e-3 so that the 30 steps of
  the self-check show the loss falling (the original runs 1e5 batches);
- einops' ``rearrange`` written out with ``view``/``permute`` (same layouts: ``b n (qkv h d) -> qkv b h n d`` and
  ``b h n d -> b n (h d)``);
- data: enwik8 (``data/enwik8.gz``) is replaced by a synthetic byte stream made from ``seed``: lower-case words of 3-6
  letters from a lexicon of 24, each followed by a space (the next byte is predictable inside a word); 12,000 bytes
  split 10,000 / 2,000 for training and validation as the original splits 90e6 / 5e6; ``__getitem__``'s
  ``torch.randint`` draws from the global RNG seeded by ``build``; ``.cuda()`` calls dropped (CPU);
- one ``train_step`` is one iteration of the training loop; ``eval_fn`` is the validation step on a given batch; the
  tqdm progress bar, printing, and the generation every 500 batches (``generate``, top-k, gumbel sampling) are left
  out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP028, F841

from __future__ import annotations

import functools
import pathlib
import sys
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# constants

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 3e-3  # (port) 3e-4
SEQ_LEN = 64  # (port) 512


# ---- all_normalization_transformer.py ---------------------------------------------------------------------------

# helpers

def cum_mean(t):
    device = t.device
    running_num = torch.arange(t.shape[-1], device=t.device) + 1
    return t.cumsum(dim=-1) / running_num

def normalize(t, eps=1e-8):
    t -= t.mean(dim=-1, keepdim=True)
    s = (t ** 2).mean(dim=-1, keepdim=True)
    return t * torch.rsqrt(s + eps)

def causal_normalize(t, eps=1e-8):
    t -= cum_mean(t).diagonal(dim1=-2, dim2=-1)[..., None]
    s = cum_mean(t ** 2).diagonal(dim1=-2, dim2=-1)[..., None]
    return t * torch.rsqrt(s + eps)

# helper classes

class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs) + x

class PostNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.fn(x)
        return self.norm(x)

class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.norm(x)
        return self.fn(x)

class FeedForward(nn.Module):
    def __init__(self, dim, mult = 4):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * 4),
            nn.GELU(),
            nn.Linear(dim * 4, dim)
        )
    def forward(self, x):
        return self.net(x)

class Attention(nn.Module):
    def __init__(self, dim, heads = 8, causal = False, shared_kv = False, bug = None):
        super().__init__()
        self.causal = causal
        self.heads = heads
        self.scale = dim ** -0.5
        self.shared_kv = shared_kv
        self.num_qkv = 3 if not shared_kv else 2
        self.bug = bug

        self.to_qkv = nn.Linear(dim, dim * self.num_qkv, bias = False)
        self.to_out = nn.Linear(dim, dim)

        self.norm_g = nn.Parameter(torch.ones(1, heads, 1, 1))
        self.norm_b = nn.Parameter(torch.zeros(1, heads, 1, 1))

    def forward(self, x):
        b, n, _, h, device = *x.shape, self.heads, x.device
        qkv = self.to_qkv(x)
        # (port) rearrange(qkv, 'b n (qkv h d) -> qkv b h n d', qkv = self.num_qkv, h = h)
        qkv = qkv.view(b, n, self.num_qkv, h, -1).permute(2, 0, 3, 1, 4)

        if self.shared_kv:
            q, k = qkv
            v = k
        else:
            q, k, v = qkv

        dots = torch.einsum('bhid,bhjd->bhij', q, k) * self.scale

        if self.causal:
            mask = torch.ones(n, n, device = device).triu_(1).bool()
            dots.masked_fill_(mask, 0.)

        normalize_fn = causal_normalize if self.causal else normalize
        normed_attn = normalize_fn(dots)
        attn = normed_attn * self.norm_g + self.norm_b

        if self.causal and self.bug != "second_mask_dropped":
            attn.masked_fill_(mask, 0.)

        out = torch.einsum('bhij,bhjd->bhid', attn, v)
        # (port) rearrange(out, 'b h n d -> b n (h d)')
        out = out.permute(0, 2, 1, 3).reshape(b, n, -1)
        out =  self.to_out(out)
        return out

class Transformer(nn.Module):
    def __init__(self, dim, depth, heads = 8, causal = False, only_norm = False, shared_kv = False, bug = None):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Residual(PostNorm(dim, Attention(dim, heads, causal = causal, shared_kv = shared_kv, bug = bug))),
                Residual(PreNorm(dim, FeedForward(dim))) if not only_norm else nn.Identity(),
            ]))

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x)
            x = ff(x)
        return x

class TransformerLM(nn.Module):
    def __init__(self, *, num_tokens, dim, depth, max_seq_len, heads = 8, causal = False, only_norm = False,
                 shared_kv = False, bug = None):
        super().__init__()
        self.max_seq_len = max_seq_len

        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.transformer = Transformer(dim, depth, heads, causal = causal, only_norm = only_norm,
                                       shared_kv = shared_kv, bug = bug)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x, **kwargs):
        _, n = x.shape
        x = self.token_emb(x)
        x += self.pos_emb(torch.arange(n, device=x.device))
        x = self.transformer(x)
        x = self.to_logits(x)
        return x


# ---- autoregressive_wrapper.py ----------------------------------------------------------------------------------

def default(value, default):
    return value if value is not None else default

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = None, pad_value = 0, bug = None):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = default(ignore_index, pad_value)

        self.net = net
        self.max_seq_len = net.max_seq_len
        self.bug = bug

    def forward(self, x, *args, **kwargs):
        pad = partial(pad_sequence, batch_first = True, padding_value = self.pad_value)
        m = kwargs.pop('input_mask', None)
        if self.bug == "labels_not_shifted":
            xi, xo = x[:, :-1], x[:, :-1]
        else:
            xi, xo = x[:, :-1], x[:, 1:]

        if m is not None:
            assert m.shape == x.shape[0:2], ('input mask must be the same shape as the input of the auto-regressive '
                                             'wrapper to automatically handle')
            kwargs.update(input_mask = m[:, :-1])

        out = self.net(xi, *args, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index = self.ignore_index)
        return loss


# ---- train_enwik8.py --------------------------------------------------------------------------------------------

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
    """(port) Lower-case words (3-6 letters) drawn from a lexicon of 24, each followed by a space."""
    lexicon = [torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(24)]
    out = []
    while len(out) < n:
        out.extend(lexicon[int(torch.randint(len(lexicon), (1,), generator=gen))] + [32])
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    # instantiate model

    model = TransformerLM(
        num_tokens = 256,
        dim = 64,  # (port) 512
        depth = 2,  # (port) 12
        max_seq_len = SEQ_LEN,
        heads = 4,  # (port) 8
        causal = True,
        only_norm = True,
        shared_kv = True,
        bug = bug,
    )

    model = AutoregressiveWrapper(model, bug = bug)

    # prepare enwik8 data (synthetic, see the module docstring)

    data = make_bytes(gen, 12000)
    data_train, data_val = data[:10000], data[10000:]

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader  = cycle(train_data_loader)
    val_loader    = cycle(DataLoader(val_dataset, batch_size = BATCH_SIZE))

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            (loss / GRADIENT_ACCUMULATE_EVERY).backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        if bug != "zero_grad_dropped":
            optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    return Program(name="allnorm_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # the second ``attn.masked_fill_(mask, 0.)`` (after the normalization and the per-head gain/bias) left out
    # (classic: the mask applied to the scores only): the normalized future positions are non-zero, so every byte's
    # representation reads the bytes after it, the one it must predict included.
    Bug("second_mask_dropped", functools.partial(_build, bug="second_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # inputs and labels sliced alike in the wrapper (classic: ``x[:, :-1]`` for ``x[:, 1:]``): the model is taught to
    # copy the byte it reads.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # ``optim.zero_grad()`` after the step left out (classic): every update adds all earlier gradients again.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
