"""gMLP causal language model (pre-norm residual gMLP blocks: channel projection, GELU, spatial gating unit with a
causally masked learned sequence-mixing matrix; no attention) trained by the repository's enwik8 ``train.py``:
``AutoregressiveWrapper`` (inputs ``x[:, :-1]``, labels ``x[:, 1:]``, cross-entropy), Adam lr 2e-4 over
``model.parameters()``, 4 micro-batches accumulated per update (losses summed by ``backward``, not divided, as
written), ``clip_grad_norm_(0.5)``, step, zero_grad.

Source: https://github.com/lucidrains/g-mlp-pytorch
Commit: 970966c10c10770b2098b8f88c7d1f86efbf611b
Files: train.py, g_mlp_pytorch/g_mlp_pytorch.py, g_mlp_pytorch/autoregressive_wrapper.py
License: MIT (Copyright (c) 2021 Phil Wang; full text in LICENSES/lucidrains-g-mlp-pytorch.txt)
Domain: causal language model (gMLP)

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, SEQ_LEN 768 -> 32 (num_tokens 256, ff_mult 4, heads 1, BATCH_SIZE 4,
  GRADIENT_ACCUMULATE_EVERY 4, lr, clipping unchanged);
- einops is not available: the ``rearrange`` calls of ``SpatialGatingUnit`` (and the circulant branch's
  ``repeat``, kept though unused by the script) are written out as view/permute/unsqueeze in plain torch; the
  attention branch (``attn_dim``), token shifting and layer dropout exist as in the source but the script's config
  (attn_dim None, shift_tokens 0, prob_survival 1) leaves them off, as here; ``gMLPVision`` is left out;
- ``.cuda()`` calls are dropped;
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); the dataset class is unchanged;
- one ``train_step`` is one iteration of the outer loop (4 micro-batches, clip, step, zero_grad); the validation
  (``eval_fn``) is the loop's validation on a given batch; generation and printing are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C417, B008, UP028

from __future__ import annotations

import functools
import pathlib
import sys
from random import randrange

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-4
SEQ_LEN = 32


# ---- g_mlp_pytorch/g_mlp_pytorch.py -----------------------------------------------------------------------------

def exists(val):
    return val is not None


def dropout_layers(layers, prob_survival):
    if prob_survival == 1:
        return layers

    num_layers = len(layers)
    to_drop = torch.zeros(num_layers).uniform_(0., 1.) > prob_survival

    # make sure at least one layer makes it
    if all(to_drop):
        rand_index = randrange(num_layers)
        to_drop[rand_index] = False

    layers = [layer for (layer, drop) in zip(layers, to_drop) if not drop]
    return layers


def shift(t, amount, mask = None):
    if amount == 0:
        return t
    return F.pad(t, (0, 0, amount, -amount), value = 0.)


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class PreShiftTokens(nn.Module):
    def __init__(self, shifts, fn):
        super().__init__()
        self.fn = fn
        self.shifts = tuple(shifts)

    def forward(self, x, **kwargs):
        if self.shifts == (0,):
            return self.fn(x, **kwargs)

        shifts = self.shifts
        segments = len(shifts)
        feats_per_shift = x.shape[-1] // segments
        splitted = x.split(feats_per_shift, dim = -1)
        segments_to_shift, rest = splitted[:segments], splitted[segments:]
        segments_to_shift = list(map(lambda args: shift(*args), zip(segments_to_shift, shifts)))
        x = torch.cat((*segments_to_shift, *rest), dim = -1)
        return self.fn(x, **kwargs)


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, **kwargs):
        x = self.norm(x)
        return self.fn(x, **kwargs)


class SpatialGatingUnit(nn.Module):
    def __init__(
        self,
        dim,
        dim_seq,
        causal = False,
        act = nn.Identity(),
        heads = 1,
        init_eps = 1e-3,
        circulant_matrix = False,
        bug = None
    ):
        super().__init__()
        dim_out = dim // 2
        self.heads = heads
        self.causal = causal
        self.norm = nn.LayerNorm(dim_out)
        self.bug = bug

        self.act = act

        # parameters

        if circulant_matrix:
            self.circulant_pos_x = nn.Parameter(torch.ones(heads, dim_seq))
            self.circulant_pos_y = nn.Parameter(torch.ones(heads, dim_seq))

        self.circulant_matrix = circulant_matrix
        shape = (heads, dim_seq,) if circulant_matrix else (heads, dim_seq, dim_seq)
        weight = torch.zeros(shape)

        self.weight = nn.Parameter(weight)
        init_eps /= dim_seq
        nn.init.uniform_(self.weight, -init_eps, init_eps)

        self.bias = nn.Parameter(torch.ones(heads, dim_seq))

    def forward(self, x, gate_res = None):
        device, n, h = x.device, x.shape[1], self.heads

        res, gate = x.chunk(2, dim = -1)
        gate = self.norm(gate)

        weight, bias = self.weight, self.bias

        if self.circulant_matrix:
            # build the circulant matrix

            dim_seq = weight.shape[-1]
            weight = F.pad(weight, (0, dim_seq), value = 0)
            weight = weight.repeat(*([1] * (weight.dim() - 1)), dim_seq)  # repeat(weight, '... n -> ... (r n)', r = dim_seq)
            weight = weight[:, :-dim_seq].reshape(h, dim_seq, 2 * dim_seq - 1)
            weight = weight[:, :, (dim_seq - 1):]

            # give circulant matrix absolute position awareness

            pos_x, pos_y = self.circulant_pos_x, self.circulant_pos_y
            weight = weight * pos_x[:, :, None] * pos_y[:, None, :]

        if self.causal:
            weight, bias = weight[:, :n, :n], bias[:, :n]
            if self.bug != "sgu_causal_mask_dropped":
                mask = torch.ones(weight.shape[-2:], device = device).triu_(1).bool()
                mask = mask[None]  # rearrange(mask, 'i j -> () i j')
                weight = weight.masked_fill(mask, 0.)

        b = gate.shape[0]
        gate = gate.view(b, n, h, -1).permute(0, 2, 1, 3)  # rearrange(gate, 'b n (h d) -> b h n d', h = h)

        gate = einsum('b h n d, h m n -> b h m d', gate, weight)
        gate = gate + bias[None, :, :, None]  # rearrange(bias, 'h n -> () h n ()')

        gate = gate.permute(0, 2, 1, 3).reshape(b, n, -1)  # rearrange(gate, 'b h n d -> b n (h d)')

        if exists(gate_res):
            gate = gate + gate_res

        return self.act(gate) * res


class gMLPBlock(nn.Module):
    def __init__(
        self,
        *,
        dim,
        dim_ff,
        seq_len,
        heads = 1,
        attn_dim = None,
        causal = False,
        act = nn.Identity(),
        circulant_matrix = False,
        bug = None
    ):
        super().__init__()
        self.proj_in = nn.Sequential(
            nn.Linear(dim, dim_ff),
            nn.GELU()
        )

        self.attn = None  # Attention(dim, dim_ff // 2, attn_dim, causal) if exists(attn_dim): attn_dim is None here

        self.sgu = SpatialGatingUnit(dim_ff, seq_len, causal, act, heads, circulant_matrix = circulant_matrix, bug = bug)
        self.proj_out = nn.Linear(dim_ff // 2, dim)

    def forward(self, x):
        gate_res = self.attn(x) if exists(self.attn) else None
        x = self.proj_in(x)
        x = self.sgu(x, gate_res = gate_res)
        x = self.proj_out(x)
        return x


class gMLP(nn.Module):
    def __init__(
        self,
        *,
        num_tokens = None,
        dim,
        depth,
        seq_len,
        heads = 1,
        ff_mult = 4,
        attn_dim = None,
        prob_survival = 1.,
        causal = False,
        circulant_matrix = False,
        shift_tokens = 0,
        act = nn.Identity(),
        bug = None
    ):
        super().__init__()
        assert (dim % heads) == 0, 'dimension must be divisible by number of heads'

        dim_ff = dim * ff_mult
        self.seq_len = seq_len
        self.prob_survival = prob_survival

        self.to_embed = nn.Embedding(num_tokens, dim) if exists(num_tokens) else nn.Identity()

        token_shifts = tuple(range(0 if causal else -shift_tokens, shift_tokens + 1))
        self.layers = nn.ModuleList([Residual(PreNorm(dim, PreShiftTokens(token_shifts, gMLPBlock(dim = dim, heads = heads, dim_ff = dim_ff, seq_len = seq_len, attn_dim = attn_dim, causal = causal, act = act, circulant_matrix = circulant_matrix, bug = bug)))) for i in range(depth)])

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens)
        ) if exists(num_tokens) else nn.Identity()

    def forward(self, x):
        x = self.to_embed(x)
        layers = self.layers if not self.training else dropout_layers(self.layers, self.prob_survival)
        out = nn.Sequential(*layers)(x)
        return self.to_logits(out)


# ---- g_mlp_pytorch/autoregressive_wrapper.py (training path) ---------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = -100, pad_value = 0):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = ignore_index
        self.net = net
        self.max_seq_len = net.seq_len

    def forward(self, x, **kwargs):
        xi, xo = x[:, :-1], x[:, 1:]
        out = self.net(xi, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index = self.ignore_index)
        return loss


# ---- train.py ------------------------------------------------------------------------------------------------

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
    data_train = make_bytes(gen, 10000)

    # the sequence-mixing matrix is sized for the wrapper's inputs, which are SEQ_LEN long (x[:, :-1])
    model = gMLP(
        num_tokens = 256,
        dim = 32,
        seq_len = SEQ_LEN,
        depth = 2,
        causal = True,
        bug = bug
    )

    model = AutoregressiveWrapper(model)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader = cycle(train_data_loader)

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        if bug == "zero_grad_before_step":
            optim.zero_grad()
            optim.step()
        else:
            optim.step()
            optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    return Program(name="gmlp_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # the spatial gating unit's causal mask left off: each position's gate mixes in the tokens it must predict.
    Bug("sgu_causal_mask_dropped", functools.partial(_build, bug="sgu_causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # `optim.zero_grad()` moved above `optim.step()`: the gradients are cleared before the update reads them.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
