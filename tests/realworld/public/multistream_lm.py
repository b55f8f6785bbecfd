"""Multistream transformer character language model trained by the repository's enwik8 script:
``MultistreamTransformer`` (token and learned position embeddings, channels-first blocks built of 1x1 ``Conv1d``
projections with a grouped pre-LayerNorm, a shared pre-block, ``depth`` grouped blocks running ``num_streams`` = 2
parallel streams, every layer's output pooled per position by a learned query attending over the layers and
streams, a post-block and a LayerNorm + linear head), wrapped in ``AutoregressiveWrapper`` (``cross_entropy`` of the
logits on ``x[:, :-1]`` against ``x[:, 1:]``), Adam lr 2e-4, 4 micro-batches whose losses are back-propagated
(not divided) before ``clip_grad_norm_(0.25)``, ``step`` and ``zero_grad``.

Source: https://github.com/lucidrains/multistream-transformers
Commit: e36a6c472eb032daa89fa8b87a7fd8bf7d5fecfe
Files: train.py, multistream_transformers/multistream_transformers.py,
multistream_transformers/autoregressive_wrapper.py
License: MIT (Copyright (c) 2021 Phil Wang; full text in LICENSES/lucidrains-multistream-transformers.txt)
Domain: causal language model (multi-stream transformer, Burtsev & Rumshisky 2021), character level

Kept as written: ``GroupLayerNorm``, ``PreNorm``, ``FeedForward``, ``Attention`` (grouped 1x1 convolutions, key
padding mask branch, causal mask filled with the dtype's most negative value), ``TransformerBlock``,
``MultistreamTransformer`` (the stream repeat, the per-position attention pooling over all layers' outputs), the
wrapper's ``forward``, train.py's ``TextSamplerDataset``, ``cycle``, the optimizer, the loop body (train mode, the
accumulation loop without division, clip, step, zero_grad) and the validation step.

Deviations from the original:
- sizes for 2 CPU cores: dim 512 -> 32, depth 4 -> 2, heads 8 -> 4, dim_head 64 -> 8, SEQ_LEN 512 -> 32
  (num_streams 2, BATCH_SIZE 4, GRADIENT_ACCUMULATE_EVERY 4 and the clipping at 0.25 unchanged); LEARNING_RATE
  2e-4 -> 2e-3 so that the 30 steps of the self-check show the loss falling (the original runs 1e5 batches);
- einops' ``rearrange``/``repeat`` and the ``Rearrange`` layer written out with ``view``/``permute``/``expand``
  (the same layouts, each einops pattern kept as a comment);
- data: enwik8 (``data/enwik8.gz``) is replaced by a synthetic byte stream made from ``seed``: lower-case words of 3-6
  letters from a lexicon of 24, each followed by a space; 12,000 bytes split 10,000 / 2,000 for training and
  validation as the original splits 90e6 / 5e6; ``__getitem__``'s ``torch.randint`` draws from the global RNG seeded
  by ``build``; ``.cuda()`` calls dropped (CPU);
- one ``train_step`` is one iteration of the training loop; ``eval_fn`` is the validation step on a given batch; the
  tqdm progress bar, printing and the generation every 500 batches are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP028, C417

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# constants

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-3  # (port) 2e-4
SEQ_LEN = 32  # (port) 512


# ---- multistream_transformers.py --------------------------------------------------------------------------------

# helper functions

def exists(val):
    return val is not None

def default(val, d):
    return val if exists(val) else d

def max_neg_value(t):
    return -torch.finfo(t.dtype).max

# feedforward

class GroupLayerNorm(nn.Module):
    def __init__(self, dim, groups = 1, eps = 1e-5, bug = None):
        super().__init__()
        self.eps = eps
        self.groups = groups
        self.g = nn.Parameter(torch.ones(1, groups, dim, 1))
        self.b = nn.Parameter(torch.zeros(1, groups, dim, 1))
        self.bug = bug

    def forward(self, x):
        # (port) rearrange(x, 'b (g d) n -> b g d n', g = self.groups)
        x = x.view(x.shape[0], self.groups, -1, x.shape[-1])
        axis = 3 if self.bug == "norm_over_sequence" else 2
        std = torch.var(x, dim = axis, unbiased = False, keepdim = True).sqrt()
        mean = torch.mean(x, dim = axis, keepdim = True)
        out = (x - mean) / (std + self.eps) * self.g + self.b
        # (port) rearrange(out, 'b g d n -> b (g d) n')
        return out.reshape(out.shape[0], -1, out.shape[-1])

class PreNorm(nn.Module):
    def __init__(
        self,
        dim,
        fn,
        groups = 1,
        bug = None
    ):
        super().__init__()
        self.norm = GroupLayerNorm(dim, groups = groups, bug = bug)
        self.fn = fn

    def forward(self, x, **kwargs):
        x = self.norm(x)
        return self.fn(x, **kwargs)

class FeedForward(nn.Module):
    def __init__(
        self,
        *,
        dim,
        mult = 4,
        groups = 1
    ):
        super().__init__()
        input_dim = dim * groups
        hidden_dim = dim * mult * groups

        self.net = nn.Sequential(
            nn.Conv1d(input_dim, hidden_dim, 1, groups = groups),
            nn.GELU(),
            nn.Conv1d(hidden_dim, input_dim, 1, groups = groups)
        )

    def forward(self, x):
        return self.net(x)

class Attention(nn.Module):
    def __init__(
        self,
        *,
        dim,
        dim_head = 64,
        heads = 8,
        causal = False,
        groups = 1
    ):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.groups = groups
        self.heads = heads
        self.causal = causal
        input_dim = dim * groups
        inner_dim = dim_head * heads * groups

        self.to_q = nn.Conv1d(input_dim, inner_dim, 1, bias = False)
        self.to_kv = nn.Conv1d(input_dim, inner_dim * 2, 1, bias = False)
        self.to_out = nn.Conv1d(inner_dim, input_dim, 1)

    def forward(self, x, mask = None, context = None):
        n, device, h, g, causal = x.shape[2], x.device, self.heads, self.groups, self.causal
        context = default(context, x)

        q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2, dim = 1))
        # (port) rearrange_all((q, k, v), 'b (g h d) n -> (b g h) n d', g = g, h = h)
        q, k, v = map(lambda t: t.reshape(t.shape[0] * g * h, -1, t.shape[-1]).transpose(1, 2), (q, k, v))

        q = q * self.scale

        sim = einsum('b i d, b j d -> b i j', q, k)

        if exists(mask):
            # (port) repeat(mask, 'b n -> (b g h) n', h = h, g = g)
            mask = mask.repeat_interleave(g * h, dim = 0)
            # (port) rearrange(mask, 'b n -> b n ()') * rearrange(mask, 'b n -> b () n')
            mask = mask[:, :, None] * mask[:, None, :]
            mask_value = max_neg_value(sim)
            sim = sim.masked_fill(~mask, mask_value)

        if causal:
            causal_mask = torch.ones((n, n), device = device).triu(1).bool()
            mask_value = max_neg_value(sim)
            sim = sim.masked_fill(causal_mask, mask_value)

        attn = sim.softmax(dim = -1)
        out = einsum('b i j, b j d -> b i d', attn, v)
        # (port) rearrange(out, '(b g h) n d -> b (g h d) n', h = h, g = g)
        out = out.reshape(-1, g * h, out.shape[1], out.shape[2]).permute(0, 1, 3, 2).reshape(-1, g * h * out.shape[2],
                                                                                            out.shape[1])
        return self.to_out(out)

class TransformerBlock(nn.Module):
    def __init__(
        self,
        *,
        dim,
        causal = False,
        dim_head = 64,
        heads = 8,
        ff_mult = 4,
        groups = 1,
        bug = None
    ):
        super().__init__()
        self.attn = PreNorm(dim, Attention(dim = dim, dim_head = dim_head, heads = heads, causal = causal,
                                           groups = groups), groups = groups, bug = bug)
        self.ff = PreNorm(dim, FeedForward(dim = dim, mult = ff_mult, groups = groups), groups = groups, bug = bug)

    def forward(self, x, mask = None):
        x = self.attn(x, mask = mask) + x
        x = self.ff(x) + x
        return x

# main class

class MultistreamTransformer(nn.Module):
    def __init__(
        self,
        *,
        dim,
        depth,
        num_tokens,
        max_seq_len,
        causal = False,
        dim_head = 64,
        heads = 8,
        ff_mult = 4,
        num_streams = 1,
        bug = None
    ):
        super().__init__()
        self.dim = dim
        self.max_seq_len = max_seq_len
        self.num_streams = num_streams
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.bug = bug

        self.layers = nn.ModuleList([])
        self.pre_transformer_block = TransformerBlock(dim = dim, causal = causal, dim_head = dim_head, heads = heads,
                                                      bug = bug)

        for _ in range(depth):
            self.layers.append(TransformerBlock(dim = dim, causal = causal, dim_head = dim_head, heads = heads,
                                                groups = num_streams, bug = bug))

        if num_streams > 1:
            self.query = nn.Parameter(torch.randn(dim))
            self.attn_pool = Attention(dim = dim, dim_head = dim_head, heads = heads)

        self.post_transformer_block = TransformerBlock(dim = dim, causal = causal, dim_head = dim_head, heads = heads,
                                                       bug = bug)

        self.to_logits = nn.Sequential(
            # (port) Rearrange('b d n -> b n d'): applied in forward
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens)
        )

    def forward(self, x, mask = None):
        b, n, d, device, is_multistream = *x.shape, self.dim, x.device, (self.num_streams > 1)
        x = self.token_emb(x)

        pos_emb = self.pos_emb(torch.arange(n, device = device))
        pos_emb = pos_emb[None]  # (port) rearrange(pos_emb, 'n d -> () n d')

        x = x + pos_emb
        x = x.transpose(1, 2)  # (port) rearrange(x, 'b n d -> b d n')

        x = self.pre_transformer_block(x, mask = mask)
        layers = [x]

        if is_multistream:
            x = x.repeat(1, self.num_streams, 1)  # (port) repeat(x, 'b d n -> b (s d) n', s = self.num_streams)

        for block in self.layers:
            x = block(x, mask = mask)
            layers.append(x)

        if is_multistream:
            if self.bug == "layer_tokens_viewed_not_permuted":
                layers = list(map(lambda t: t.reshape(b * n, d, -1), layers))
            else:
                # (port) rearrange(t, 'b (s d) n -> (b n) d s', d = d)
                layers = list(map(lambda t: t.reshape(b, -1, d, n).permute(0, 3, 2, 1).reshape(b * n, d, -1), layers))
            layer_tokens = torch.cat(layers, dim = -1)

            # (port) repeat(self.query, 'd -> b d ()', b = layer_tokens.shape[0])
            query = self.query[None, :, None].expand(layer_tokens.shape[0], -1, 1)
            x = self.attn_pool(query, context = layer_tokens)
            x = x.reshape(b, n, d).transpose(1, 2)  # (port) rearrange(x, '(b n) d () -> b d n', n = n)

        x = self.post_transformer_block(x, mask = mask)
        return self.to_logits(x.transpose(1, 2))  # (port) the head's Rearrange('b d n -> b n d')


# ---- autoregressive_wrapper.py ----------------------------------------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = -100, pad_value = 0):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = ignore_index

        self.net = net
        self.max_seq_len = net.max_seq_len

    def forward(self, x, **kwargs):
        xi, xo = x[:, :-1], x[:, 1:]
        out = self.net(xi, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index = self.ignore_index)
        return loss


# ---- train.py ---------------------------------------------------------------------------------------------------

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

    # instantiate GPT-like decoder model

    model = MultistreamTransformer(
        num_tokens = 256,
        dim = 32,  # (port) 512
        max_seq_len = SEQ_LEN,
        depth = 2,  # (port) 4
        heads = 4,  # (port) 8
        dim_head = 8,  # (port) default 64
        causal = True,
        num_streams = 2,
        bug = bug,
    )

    model = AutoregressiveWrapper(model)

    # prepare enwik8 data (synthetic, see the module docstring)

    data = make_bytes(gen, 12000)
    data_train, data_val = data[:10000], data[10000:]

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader  = cycle(train_data_loader)
    val_loader    = cycle(DataLoader(val_dataset, batch_size = BATCH_SIZE))  # noqa: F841

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optim.step()
        optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    return Program(name="multistream_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # ``GroupLayerNorm``'s mean and variance taken over the sequence axis (dim 3 of ``b g d n``) instead of the
    # channel axis (classic axis slip of a channels-first LayerNorm): every position is normalized with statistics of
    # the whole sequence, the bytes after it included, so the causal model reads the future through the norm.
    Bug("norm_over_sequence", functools.partial(_build, bug="norm_over_sequence"), "learning_ledger",
        ("DEPENDENCY",)),
    # the layers' outputs reshaped straight to ``(b n) d s`` without the permute of ``'b (s d) n -> (b n) d s'``
    # (classic view-for-rearrange slip): the pooling query attends over channel slices of other positions, the
    # later ones included, instead of the position's own layers and streams.
    Bug("layer_tokens_viewed_not_permuted", functools.partial(_build, bug="layer_tokens_viewed_not_permuted"),
        "tensor_trace", ("attn_pool",)),
]
