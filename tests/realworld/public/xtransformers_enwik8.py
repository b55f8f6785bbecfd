"""x-transformers' GPT-like decoder trained by the repository's enwik8 example: ``TransformerWrapper`` (token
embedding, absolute positional embedding, ``AttentionLayers`` with pre-norm ``Attention``/``FeedForward`` blocks,
final LayerNorm, logits tied to the token embedding) over ``Decoder`` (causal attention) with the GLU feedforward
(``ff_glu = True``), wrapped in ``AutoregressiveWrapper`` (inputs ``x[:, :-1]``, targets ``x[:, 1:]``,
cross-entropy), Adam lr 1e-4, 4 micro-batches accumulated per update (summed, as written), ``clip_grad_norm_(0.5)``.

Source: https://github.com/lucidrains/x-transformers
Commit: 9cf70013fd57093e598e4cb8e470b09c5c505e30
Files: examples/enwik8_simple/train.py, x_transformers/x_transformers.py, x_transformers/autoregressive_wrapper.py,
  README.md (the ``ff_glu = True`` option)
License: MIT (Copyright (c) 2020 Phil Wang; LICENSES/lucidrains-x-transformers.txt)
Domain: causal language model (autoregressive wrapper over a configurable transformer)

Deviations from the original:
- ported from the commit that fixed the GEGLU gate (9cf7001, "fix bugs ... with feedforward glu", from
  https://github.com/lucidrains/x-transformers/pull/9); the file at today's head is about 4,500 lines of options,
  this version's code paths are the same ones the example runs;
- the example's ``Decoder(dim = 512, depth = 6, heads = 8)`` gets ``ff_glu = True``, the README's "you should always
  turn this on" GLU feedforward, so that the GEGLU code runs; sizes: dim 512 -> 32, depth 6 -> 2, heads 8 -> 2,
  dim_head 64 -> 16 (``attn_dim_head``), SEQ_LEN 1024 -> 32 (BATCH_SIZE 4, GRADIENT_ACCUMULATE_EVERY 4,
  LEARNING_RATE 1e-4, clipping 0.5 unchanged);
- einops (``rearrange``/``repeat``) is not available: each call is written out with view/transpose/expand;
  entmax is not installed and its branch (``use_entmax15``, off by default) is not copied; only the classes the
  example builds are copied (no relative/positional-infused/fixed position embeddings, Rezero, ScaleNorm, ViT or
  XTransformer wrappers), with every branch of the copied classes kept; ``generate``/top-k sampling is left out;
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case words of 3-6 letters from a
  lexicon of 24, each followed by a space), read by the example's ``TextSamplerDataset`` (``.cuda()`` dropped);
  ``torch.randint`` in ``__getitem__`` draws from the global RNG seeded by ``build``;
- one ``train_step`` is one iteration of the training loop (4 micro-batches, clip, step, zero_grad); ``eval_fn`` is
  the validation step on a given batch; printing and generation are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, C417, UP028, F841, SIM118, TRY002  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from collections import namedtuple
from functools import partial
from inspect import isfunction

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 1e-4
SEQ_LEN = 32


# ---- x_transformers/autoregressive_wrapper.py (training path) ------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = -100, pad_value = 0):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = ignore_index

        self.net = net
        self.max_seq_len = net.max_seq_len

    def forward(self, x, **kwargs):
        pad = partial(pad_sequence, batch_first = True, padding_value = self.pad_value)

        xi = x[:, :-1]
        xo = x[:, 1:]

        # help auto-solve a frequent area of confusion around input masks in auto-regressive
        # if user supplies a mask that is only off by one from the source sequence, resolve it for them
        mask = kwargs.pop('mask', None)
        if mask is not None and mask.shape[1] == x.shape[1]:
            mask = mask[:, :-1]
            kwargs.update(mask = mask)

        out = self.net(xi, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index = self.ignore_index)
        return loss


# ---- x_transformers/x_transformers.py ---------------------------------------------------------------------------

# constants

Intermediates = namedtuple('Intermediates', [
    'pre_softmax_attn',
    'post_softmax_attn'
])

LayerIntermediates = namedtuple('Intermediates', [
    'hiddens',
    'attn_intermediates'
])

# helpers

def exists(val):
    return val is not None

def default(val, d):
    if exists(val):
        return val
    return d() if isfunction(d) else d

def always(val):
    def inner(*args, **kwargs):
        return val
    return inner

def max_neg_value(tensor):
    return -torch.finfo(tensor.dtype).max

# keyword argument helpers

def pick_and_pop(keys, d):
    values = list(map(lambda key: d.pop(key), keys))
    return dict(zip(keys, values))

def group_dict_by_key(cond, d):
    return_val = [dict(),dict()]
    for key in d.keys():
        match = bool(cond(key))
        ind = int(not match)
        return_val[ind][key] = d[key]
    return (*return_val,)

def string_begins_with(prefix, str):
    return str.startswith(prefix)

def group_by_key_prefix(prefix, d):
    return group_dict_by_key(partial(string_begins_with, prefix), d)

def groupby_prefix_and_trim(prefix, d):
    kwargs_with_prefix, kwargs = group_dict_by_key(partial(string_begins_with, prefix), d)
    kwargs_without_prefix = dict(map(lambda x: (x[0][len(prefix):], x[1]), tuple(kwargs_with_prefix.items())))
    return kwargs_without_prefix, kwargs

# positional embeddings

class AbsolutePositionalEmbedding(nn.Module):
    def __init__(self, dim, max_seq_len):
        super().__init__()
        self.emb = nn.Embedding(max_seq_len, dim)
        self.init_()

    def init_(self):
        nn.init.normal_(self.emb.weight, std = 0.02)

    def forward(self, x):
        n = torch.arange(x.shape[1], device = x.device)
        return self.emb(n)[None, :, :]

# classes

class Scale(nn.Module):
    def __init__(self, value, fn):
        super().__init__()
        self.value = value
        self.fn = fn

    def forward(self, x, **kwargs):
        x, *rest = self.fn(x, **kwargs)
        return (x * self.value, *rest)

class GEGLU(nn.Module):
    def __init__(self, dim_in, dim_out, bug = None):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)
        self.bug = bug

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim = -1)
        if self.bug == "geglu_gate_unused":
            # the line before the fix: the gate half of the projection is computed and never used
            return x * F.gelu(x)
        return x * F.gelu(gate)

class FeedForward(nn.Module):
    def __init__(self, dim, dim_out = None, mult = 4, glu = False, dropout = 0., bug = None):
        super().__init__()
        dim_out = default(dim_out, dim)
        project_in = nn.Sequential(
            nn.Linear(dim, dim * mult),
            nn.GELU()
        ) if not glu else GEGLU(dim, dim * mult, bug = bug)

        self.net = nn.Sequential(
            project_in,
            nn.Dropout(dropout),
            nn.Linear(dim * mult, dim_out)
        )

    def forward(self, x):
        return self.net(x)

class Attention(nn.Module):
    def __init__(
        self,
        dim,
        dim_head = 64,
        heads = 8,
        causal = False,
        mask = None,
        talking_heads = False,
        sparse_topk = None,
        num_mem_kv = 0,
        dropout = 0.,
        on_attn = False
    ):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.causal = causal
        self.mask = mask

        inner_dim = dim_head * heads
        self.to_q = nn.Linear(dim, inner_dim, bias = False)
        self.to_k = nn.Linear(dim, inner_dim, bias = False)
        self.to_v = nn.Linear(dim, inner_dim, bias = False)
        self.dropout = nn.Dropout(dropout)

        # talking heads
        self.talking_heads = talking_heads
        if talking_heads:
            self.pre_softmax_proj = nn.Parameter(torch.randn(heads, heads))
            self.post_softmax_proj = nn.Parameter(torch.randn(heads, heads))

        # explicit topk sparse attention
        self.sparse_topk = sparse_topk

        # entmax (not installed here: the softmax, the default)
        self.attn_fn = F.softmax

        # add memory key / values
        self.num_mem_kv = num_mem_kv
        if num_mem_kv > 0:
            self.mem_k = nn.Parameter(torch.randn(heads, num_mem_kv, dim_head))
            self.mem_v = nn.Parameter(torch.randn(heads, num_mem_kv, dim_head))

        # attention on attention
        self.attn_on_attn = on_attn
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim * 2), nn.GLU()) if on_attn else nn.Linear(inner_dim, dim)

    def forward(
        self,
        x,
        context = None,
        mask = None,
        context_mask = None,
        rel_pos = None,
        sinusoidal_emb = None,
        prev_attn = None,
        mem = None
    ):
        b, n, _, h, talking_heads, device = *x.shape, self.heads, self.talking_heads, x.device
        kv_input = default(context, x)

        q_input = x
        k_input = kv_input
        v_input = kv_input

        if exists(mem):
            k_input = torch.cat((mem, k_input), dim = -2)
            v_input = torch.cat((mem, v_input), dim = -2)

        if exists(sinusoidal_emb):
            # in shortformer, the query would start at a position offset depending on the past cached memory
            offset = k_input.shape[-2] - q_input.shape[-2]
            q_input = q_input + sinusoidal_emb(q_input, offset = offset)
            k_input = k_input + sinusoidal_emb(k_input)

        q = self.to_q(q_input)
        k = self.to_k(k_input)
        v = self.to_v(v_input)

        # rearrange(t, 'b n (h d) -> b h n d', h = h)
        q, k, v = map(lambda t: t.view(t.shape[0], t.shape[1], h, -1).transpose(1, 2), (q, k, v))

        input_mask = None
        if any(map(exists, (mask, context_mask))):
            q_mask = default(mask, lambda: torch.ones((b, n), device = device).bool())
            k_mask = q_mask if not exists(context) else context_mask
            k_mask = default(k_mask, lambda: torch.ones((b, k.shape[-2]), device = device).bool())
            q_mask = q_mask[:, None, :, None]  # rearrange(q_mask, 'b i -> b () i ()')
            k_mask = k_mask[:, None, None, :]  # rearrange(k_mask, 'b j -> b () () j')
            input_mask = q_mask * k_mask

        if self.num_mem_kv > 0:
            # repeat(t, 'h n d -> b h n d', b = b)
            mem_k, mem_v = map(lambda t: t[None].expand(b, *t.shape), (self.mem_k, self.mem_v))
            k = torch.cat((mem_k, k), dim = -2)
            v = torch.cat((mem_v, v), dim = -2)
            if exists(input_mask):
                input_mask = F.pad(input_mask, (self.num_mem_kv, 0), value = True)

        dots = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        mask_value = max_neg_value(dots)

        if exists(prev_attn):
            dots = dots + prev_attn

        pre_softmax_attn = dots

        if talking_heads:
            dots = einsum('b h i j, h k -> b k i j', dots, self.pre_softmax_proj).contiguous()

        if exists(rel_pos):
            dots = rel_pos(dots)

        if exists(input_mask):
            dots.masked_fill_(~input_mask, mask_value)
            del input_mask

        if self.causal:
            i, j = dots.shape[-2:]
            mask = torch.ones((i, j), device = device).triu_(j - i + 1).bool()
            dots.masked_fill_(mask, mask_value)
            del mask

        if exists(self.sparse_topk) and self.sparse_topk < dots.shape[-1]:
            top, _ = dots.topk(self.sparse_topk, dim = -1)
            vk = top[..., -1].unsqueeze(-1).expand_as(dots)
            mask = dots < vk
            dots.masked_fill_(mask, mask_value)
            del mask

        attn = self.attn_fn(dots, dim = -1)
        post_softmax_attn = attn

        attn = self.dropout(attn)

        if talking_heads:
            attn = einsum('b h i j, h k -> b k i j', attn, self.post_softmax_proj).contiguous()

        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)  # rearrange(out, 'b h n d -> b n (h d)')

        intermediates = Intermediates(
            pre_softmax_attn = pre_softmax_attn,
            post_softmax_attn = post_softmax_attn
        )

        return self.to_out(out), intermediates

class AttentionLayers(nn.Module):
    def __init__(
        self,
        dim,
        depth,
        heads = 8,
        causal = False,
        cross_attend = False,
        only_cross = False,
        use_scalenorm = False,
        use_rezero = False,
        rel_pos_bias = False,
        position_infused_attn = False,
        custom_layers = None,
        sandwich_coef = None,
        residual_attn = False,
        cross_residual_attn = False,
        macaron = False,
        pre_norm = True,
        bug = None,
        **kwargs
    ):
        super().__init__()
        assert not (use_scalenorm or use_rezero or rel_pos_bias or position_infused_attn), \
            'ScaleNorm, Rezero and the relative / position-infused embeddings are not copied in this port'
        self.dim = dim
        self.depth = depth
        self.layers = nn.ModuleList([])

        self.has_pos_emb = position_infused_attn or rel_pos_bias
        self.pia_pos_emb = None
        self.rel_pos = None

        self.pre_norm = pre_norm and not residual_attn

        self.residual_attn = residual_attn
        self.cross_residual_attn = cross_residual_attn

        norm_class = nn.LayerNorm
        norm_fn = partial(norm_class, dim)

        branch_fn = None

        ff_kwargs, kwargs = groupby_prefix_and_trim('ff_', kwargs)
        attn_kwargs, _ = groupby_prefix_and_trim('attn_', kwargs)

        if cross_attend and not only_cross:
            default_block = ('a', 'c', 'f')
        elif cross_attend and only_cross:
            default_block = ('c', 'f')
        else:
            default_block = ('a', 'f')

        if macaron:
            default_block = ('f',) + default_block

        if exists(custom_layers):
            layer_types = custom_layers
        elif exists(sandwich_coef):
            assert sandwich_coef > 0 and sandwich_coef <= depth, 'sandwich coefficient should be less than the depth'
            layer_types = ('a',) * sandwich_coef + default_block * (depth - sandwich_coef) + ('f',) * sandwich_coef
        else:
            layer_types = default_block * depth

        self.layer_types = layer_types

        for layer_type in self.layer_types:
            if layer_type == 'a':
                layer = Attention(dim, heads = heads, causal = causal, **attn_kwargs)
            elif layer_type == 'c':
                layer = Attention(dim, heads = heads, **attn_kwargs)
            elif layer_type == 'f':
                layer = FeedForward(dim, bug = bug, **ff_kwargs)
                layer = layer if not macaron else Scale(0.5, layer)
            else:
                raise Exception(f'invalid layer type {layer_type}')

            if isinstance(layer, Attention) and exists(branch_fn):
                layer = branch_fn(layer)

            self.layers.append(nn.ModuleList([
                norm_fn(),
                layer
            ]))

    def forward(
        self,
        x,
        context = None,
        mask = None,
        context_mask = None,
        mems = None,
        return_hiddens = False
    ):
        hiddens = []
        intermediates = []
        prev_attn = None
        prev_cross_attn = None

        mems = mems.copy() if exists(mems) else ([None] * self.depth)

        for ind, (layer_type, (norm, block)) in enumerate(zip(self.layer_types, self.layers)):
            is_last = ind == (len(self.layers) - 1)

            if layer_type == 'a':
                hiddens.append(x)
                layer_mem = mems.pop(0)

            if self.pre_norm:
                x = norm(x)

            if layer_type == 'a':
                out, inter = block(x, mask = mask, sinusoidal_emb = self.pia_pos_emb, rel_pos = self.rel_pos, prev_attn = prev_attn, mem = layer_mem)
            elif layer_type == 'c':
                out, inter = block(x, context = context, mask = mask, context_mask = context_mask, prev_attn = prev_cross_attn)
            elif layer_type == 'f':
                out = block(x)

            x = x + out

            if layer_type in ('a', 'c'):
                intermediates.append(inter)

            if layer_type == 'a' and self.residual_attn:
                prev_attn = inter.pre_softmax_attn
            elif layer_type == 'c' and self.cross_residual_attn:
                prev_cross_attn = inter.pre_softmax_attn

            if not self.pre_norm and not is_last:
                x = norm(x)

        if return_hiddens:
            intermediates = LayerIntermediates(
                hiddens = hiddens,
                attn_intermediates = intermediates
            )

            return x, intermediates

        return x

class Encoder(AttentionLayers):
    def __init__(self, **kwargs):
        assert 'causal' not in kwargs, 'cannot set causality on encoder'
        super().__init__(causal = False, **kwargs)

class Decoder(AttentionLayers):
    def __init__(self, **kwargs):
        assert 'causal' not in kwargs, 'cannot set causality on decoder'
        super().__init__(causal = True, **kwargs)

class TransformerWrapper(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        max_seq_len,
        attn_layers,
        max_mem_len = 0.,
        emb_dropout = 0.,
        num_memory_tokens = None,
        tie_embedding = True,
        use_pos_emb = True
    ):
        super().__init__()
        assert isinstance(attn_layers, AttentionLayers), 'attention layers must be one of Encoder or Decoder'

        dim = attn_layers.dim
        self.max_seq_len = max_seq_len
        self.max_mem_len = max_mem_len

        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = AbsolutePositionalEmbedding(dim, max_seq_len) if (use_pos_emb and not attn_layers.has_pos_emb) else always(0)
        self.emb_dropout = nn.Dropout(emb_dropout)

        self.attn_layers = attn_layers
        self.norm = nn.LayerNorm(dim)

        self.init_()

        self.to_logits = nn.Linear(dim, num_tokens) if not tie_embedding else lambda t: t @ self.token_emb.weight.t()

        # memory tokens (like [cls]) from Memory Transformers paper
        num_memory_tokens = default(num_memory_tokens, 0)
        self.num_memory_tokens = num_memory_tokens
        if num_memory_tokens > 0:
            self.memory_tokens = nn.Parameter(torch.randn(num_memory_tokens, dim))

            # let funnel encoder know number of memory tokens, if specified
            # TODO: think of a cleaner solution
            if hasattr(attn_layers, 'num_memory_tokens'):
                attn_layers.num_memory_tokens = num_memory_tokens

    def init_(self):
        nn.init.normal_(self.token_emb.weight, std = 0.02)

    def forward(
        self,
        x,
        return_embeddings = False,
        mask = None,
        return_mems = False,
        return_attn = False,
        mems = None,
        **kwargs
    ):
        b, n, device, num_mem = *x.shape, x.device, self.num_memory_tokens
        x = self.token_emb(x)
        x += self.pos_emb(x)
        x = self.emb_dropout(x)

        if num_mem > 0:
            mem = self.memory_tokens[None].expand(b, *self.memory_tokens.shape)  # repeat(..., 'n d -> b n d', b = b)
            x = torch.cat((mem, x), dim = 1)

            # auto-handle masking after appending memory tokens
            if exists(mask):
                mask = F.pad(mask, (num_mem, 0), value = True)

        x, intermediates = self.attn_layers(x, mask = mask, mems = mems, return_hiddens = True, **kwargs)
        x = self.norm(x)

        mem, x = x[:, :num_mem], x[:, num_mem:]

        out = self.to_logits(x) if not return_embeddings else x

        if return_mems:
            hiddens = intermediates.hiddens
            new_mems = list(map(lambda pair: torch.cat(pair, dim = -2), zip(mems, hiddens))) if exists(mems) else hiddens
            new_mems = list(map(lambda t: t[..., -self.max_mem_len:, :].detach(), new_mems))
            return out, new_mems

        if return_attn:
            attn_maps = list(map(lambda t: t.post_softmax_attn, intermediates.attn_intermediates))
            return out, attn_maps

        return out


# ---- examples/enwik8_simple/train.py ----------------------------------------------------------------------------

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
    """Lower-case words (3-6 letters) drawn from a lexicon of 24, each followed by a space."""
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

    layers = Encoder if bug == "encoder_instead_of_decoder" else Decoder
    model = TransformerWrapper(
        num_tokens = 256,
        max_seq_len = SEQ_LEN,
        attn_layers = layers(dim = 32, depth = 2, heads = 2, attn_dim_head = 16, ff_glu = True, bug = bug)
    )

    model = AutoregressiveWrapper(model)

    # prepare enwik8 data (synthetic, see the module docstring)

    X = make_bytes(gen, 12000)
    trX, vaX = X[:10000], X[10000:]
    data_train, data_val = trX, vaX

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader  = cycle(train_data_loader)

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
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

    assert len(val_dataset) > 0
    return Program(name="xtransformers_enwik8", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # GEGLU multiplying the value half by gelu of itself (the code before 9cf7001, reported in
    # https://github.com/lucidrains/x-transformers/pull/9): the gate half of each feedforward projection is computed
    # and never used, so it gets no gradient.
    Bug("geglu_gate_unused", functools.partial(_build, bug="geglu_gate_unused"), "learning_ledger", ("GRADIENT",)),
    # Encoder where the enwik8 example builds a Decoder (the confusion of
    # https://github.com/lucidrains/x-transformers/pull/74 and https://github.com/lucidrains/x-transformers/issues/98):
    # the attention is not causal, so each position sees the byte it is asked to predict.
    Bug("encoder_instead_of_decoder", functools.partial(_build, bug="encoder_instead_of_decoder"), "learning_ledger",
        ("DEPENDENCY",)),
]
