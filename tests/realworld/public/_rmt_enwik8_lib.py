"""The model file of lucidrains/recurrent-memory-transformer-pytorch (``RecurrentMemoryTransformer``, its
``Attention``, ``Attend``'s flash path, ``RMSNorm``, ``FeedForward``, token shift, frac gradient), for
``rmt_enwik8.py``; the deviations are listed there (einops written out, no rotary embedding, no sdp_kernel context).

Source: https://github.com/lucidrains/recurrent-memory-transformer-pytorch
Commit: 5027c9e457dc6b098875387b39e7d9e4dc43d7ee
Files: recurrent_memory_transformer_pytorch/recurrent_memory_transformer.py, recurrent_memory_transformer_pytorch/attend.py
License: MIT (Copyright (c) 2023 Phil Wang; full text in LICENSES/lucidrains-recurrent-memory-transformer-pytorch.txt)
"""
# ruff: noqa: C417, F841

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

Linear = partial(nn.Linear, bias = False)


def exists(val):
    return val is not None


def identity(t, *args, **kwargs):
    return t


def default(*vals):
    for val in vals:
        if exists(val):
            return val
    return None


def divisible_by(numer, denom):
    return (numer % denom) == 0


def token_shift_fn(t, ps):
    read_mem, t, write_mem = t.split(ps, dim = 1)
    t, t_shift = t.chunk(2, dim = -1)
    t_shift = F.pad(t_shift, (0, 0, 1, -1), value = 0.)
    t = torch.cat((t, t_shift), dim = -1)
    return torch.cat((read_mem, t, write_mem), dim = -2)


def frac_gradient(t, frac = 1.):
    if frac == 1.:
        return t
    return t * frac + t.detach() * (1. - frac)


# ---- recurrent_memory_transformer_pytorch/attend.py (the flash path) ----------------------------------------------


class Attend(nn.Module):

    def __init__(self, dropout = 0., causal = False, use_flash = False):
        super().__init__()
        self.dropout = dropout
        self.attn_dropout = nn.Dropout(dropout)
        self.causal = causal
        self.use_flash = use_flash

    def flash_attn(self, q, k, v, mask = None):
        _, heads, q_len, _, k_len, is_cuda = *q.shape, k.shape[-2], q.is_cuda
        if exists(mask):
            if mask.ndim != 4:
                mask = mask[:, None, None, :]
            mask = mask.expand(-1, heads, q_len, -1)
        out = F.scaled_dot_product_attention(
            q, k, v,
            attn_mask = mask,
            dropout_p = self.dropout if self.training else 0.,
            is_causal = self.causal
        )
        return out

    def forward(self, q, k, v, mask = None):
        return self.flash_attn(q, k, v, mask = mask)


# ---- recurrent_memory_transformer_pytorch/recurrent_memory_transformer.py ----------------------------------------


class RMSNorm(nn.Module):

    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim = -1) * self.scale * self.gamma


class GEGLU(nn.Module):

    def forward(self, x):
        x, gate = x.chunk(2, dim = -1)
        return x * F.gelu(gate)


def FeedForward(dim, mult = 4, dropout = 0.):
    dim_inner = int(dim * mult * 2 / 3)
    return nn.Sequential(
        Linear(dim, dim_inner * 2, bias = False),
        GEGLU(),
        RMSNorm(dim_inner),
        nn.Dropout(dropout),
        Linear(dim_inner, dim, bias = False)
    )


class Attention(nn.Module):

    def __init__(self, *, dim, causal = False, dim_head = 64, heads = 8, dropout = 0., use_flash_attn = False,
                 use_custom_causal_attn_mask = False):
        super().__init__()
        dim_inner = dim_head * heads
        self.heads = heads
        self.attend = Attend(
            causal = causal and not use_custom_causal_attn_mask,
            dropout = dropout,
            use_flash = use_flash_attn
        )
        self.null_kv = nn.Parameter(torch.randn(2, heads, dim_head))
        self.to_q = Linear(dim, dim_inner)
        self.to_kv = Linear(dim, dim_inner * 2)
        self.to_out = Linear(dim_inner, dim)

    def forward(self, x, rotary_emb = None, mask = None, xl_memories = None):
        h = self.heads
        q = self.to_q(x)
        k, v = self.to_kv(x).chunk(2, dim = -1)
        q, k, v = map(lambda t: t.view(*t.shape[:2], h, -1).transpose(1, 2), (q, k, v))
        # add a null key / value
        # to protect against an entirely masked out sequence
        # as well as giving attention ability to attend to nothing
        nk, nv = map(lambda t: t[None, :, None, :].expand(x.shape[0], -1, -1, -1), self.null_kv)
        k = torch.cat((nk, k), dim = -2)
        v = torch.cat((nv, v), dim = -2)
        if exists(mask):
            mask = F.pad(mask, (1, 0), value = True)
        # manage memories
        next_xl_memories = torch.stack((k, v))
        if exists(xl_memories):
            kx, vx = xl_memories
            k = torch.cat((kx, k), dim = -2)
            v = torch.cat((vx, v), dim = -2)
            if exists(mask):
                mask = F.pad(mask, (xl_memories.shape[-2], 0), value = True)
        out = self.attend(q, k, v, mask = mask)
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
        return self.to_out(out), next_xl_memories


class RecurrentMemoryTransformer(nn.Module):

    def __init__(
        self, dim, *, num_tokens, depth, num_memory_tokens, seq_len, causal = True, dim_head = 64, heads = 8,
        ff_mult = 4, attn_dropout = 0., ff_dropout = 0., use_flash_attn = False, ignore_index = -1,
        abs_pos_emb = True, token_shift = True, use_xl_memories = True, xl_mem_len = None,
        enhanced_xl_recurrence = False,      # add simple method for enhancing receptive field of xl memories, from ernie-doc paper
        emb_gradient_frac = 0.1,             # trick from cogview paper that leads to a bit more stability
        memory_not_causal = True,            # flash attention behaves a bit more optimally if causal mask is not explicitly passed in - but if the memories perform better without a causal mask, it is necessary to have this turned on
        add_write_to_next_write_mem = False, # add the write memories of previous step to the next write step - thanks to @IcarusWizard for pointing out this discrepancy
        next_write_mem_stop_grad = True,     # whether to stop gradient of previous read memory -> next write memory
        always_have_read_memories = True,    # whether to always have read memories, even on the first step, so to make the model onnx-able
        resi_dual_scale = 1.,                # in the case of overflows in fp16 on the prenorm branch, set this to a value less than 1.
        bug = None
    ):
        super().__init__()
        self.causal = causal
        self.seq_len = seq_len
        self.bug = bug
        self.emb_gradient_frac = emb_gradient_frac
        assert 0 < resi_dual_scale <= 1., 'resiDual scale must be between 0 and 1'
        self.resi_dual_scale = resi_dual_scale
        assert num_memory_tokens > 0
        self.token_emb = nn.Embedding(num_tokens, dim)
        # positions
        self.pos_emb = nn.Embedding(seq_len, dim) if abs_pos_emb else None
        self.maybe_token_shift = token_shift_fn if token_shift else identity
        # memory related
        self.num_memory_tokens = num_memory_tokens
        self.read_memory_emb = nn.Parameter(torch.zeros(num_memory_tokens, dim))
        nn.init.normal_(self.read_memory_emb, std = 0.02)
        self.memory_tokens = nn.Parameter(torch.randn(num_memory_tokens, dim))
        nn.init.normal_(self.memory_tokens, std = 0.02)
        # xl memories
        xl_mem_len = default(xl_mem_len, seq_len)
        assert xl_mem_len <= seq_len
        self.xl_mem_len = xl_mem_len
        self.use_xl_memories = use_xl_memories
        self.enhanced_xl_recurrence = enhanced_xl_recurrence
        # layers
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Attention(dim = dim, dim_head = dim_head, causal = causal, heads = heads, use_flash_attn = use_flash_attn,
                          use_custom_causal_attn_mask = memory_not_causal, dropout = attn_dropout),
                RMSNorm(dim),
                FeedForward(dim = dim, mult = ff_mult, dropout = ff_dropout),
                RMSNorm(dim)
            ]))
        self.norm = RMSNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)
        self.ignore_index = ignore_index
        # whether to use custom attention mask if causal and memory should not be causal
        self.use_custom_causal_attn_mask = causal and memory_not_causal
        # in the paper, they actually also use the previous write memories for the next write memories
        self.add_write_to_next_write_mem = add_write_to_next_write_mem
        self.next_write_mem_stop_grad = next_write_mem_stop_grad
        # allow for attending to raw read memory positional embeddings on first step
        # hack to make it onnx-able and should not hurt
        self.always_have_read_memories = always_have_read_memories

    def init_memory(self, batch):
        return self.memory_tokens[None].expand(batch, -1, -1)

    def _memories(self, x, read_memories, b, mem_length):
        # prepare write memories, as in paper
        write_memories = self.init_memory(b)
        if exists(read_memories) and self.add_write_to_next_write_mem:
            maybe_detach = torch.detach if self.next_write_mem_stop_grad else identity
            write_memories = write_memories + maybe_detach(read_memories)
        # prepare read memories
        if exists(read_memories):
            if read_memories.ndim == 2:
                read_memories = read_memories[None].expand(b, -1, -1)
            read_mem_length = mem_length
            read_memories = read_memories + self.read_memory_emb
        elif self.always_have_read_memories:
            read_mem_length = mem_length
            read_memories = self.read_memory_emb[None].expand(b, -1, -1)
        else:
            read_mem_length = 0
            read_memories = x[:, 0:0]
        return read_memories, write_memories, read_mem_length

    def _mask(self, x, mask, n, device, read_mem_length, mem_length, mask_out_read_memories):
        # take care of mask
        if exists(mask):
            mask = F.pad(mask, (read_mem_length, mem_length), value = True)
        # custom causal mask, if needed
        if self.use_custom_causal_attn_mask:
            causal_mask = torch.ones((n, n), device = device, dtype = torch.bool).tril()
            if self.bug == "causal_mask_dropped":
                # the segment's tril() left out: every token sees the whole segment, its own target included
                causal_mask = torch.ones((n, n), device = device, dtype = torch.bool)
            causal_mask = F.pad(causal_mask, (0, mem_length, read_mem_length, 0), value = False)
            causal_mask = F.pad(causal_mask, (read_mem_length, 0, 0, mem_length), value = True)
            causal_mask = causal_mask[None, None]
            if exists(mask):
                mask = mask[:, None, None, :]
                mask = mask & causal_mask
            else:
                mask = causal_mask
        # masking out read memories, either for passing in 0s for read memories on first step, or if you are doing some regularization game on the memories
        if read_mem_length > 0 and mask_out_read_memories:
            read_mem_mask = torch.arange(x.shape[-2], device = device) < read_mem_length
            if exists(mask):
                mask = mask & ~read_mem_mask
            else:
                mask = read_mem_mask
        return mask

    def forward(self, x, read_memories = None, *, mask = None, labels = None, xl_memories = None,
                mask_out_read_memories = False):
        has_xl_memories = exists(xl_memories) and len(xl_memories) > 0
        b, n, device, mem_length, return_loss = *x.shape, x.device, self.num_memory_tokens, exists(labels)
        assert n <= self.seq_len
        pos = torch.arange(n, device = device)
        x = self.token_emb(x)
        # maybe absolute positional embedding
        if exists(self.pos_emb):
            x = x + self.pos_emb(pos)
        # trick from cogview paper
        x = frac_gradient(x, self.emb_gradient_frac)
        read_memories, write_memories, read_mem_length = self._memories(x, read_memories, b, mem_length)
        # concat to main sequence using einop's pack
        ps = [read_memories.shape[1], x.shape[1], write_memories.shape[1]]
        x = torch.cat([read_memories, x, write_memories], dim = 1)
        mask = self._mask(x, mask, n, device, read_mem_length, mem_length, mask_out_read_memories)
        rotary_emb = None
        # maybe token shift function
        shift_fn = partial(self.maybe_token_shift, ps = ps)
        # prepare xl memories
        xl_memories = default(xl_memories, [])
        xl_memories_iter = iter(xl_memories)
        new_xl_memories = []
        if has_xl_memories and self.enhanced_xl_recurrence and len(xl_memories) > 1:  # simply shift all the xl memories down by one, so lower layer gets access to representations from layer above
            xl_memories = [*xl_memories[1:], xl_memories[0]]
        # attention and feedforward
        residual = x * self.resi_dual_scale
        for attn, attn_post_norm, ff, ff_post_norm in self.layers:
            attn_out, xl_memories = attn(shift_fn(x), mask = mask, xl_memories = next(xl_memories_iter, None), rotary_emb = rotary_emb)
            new_xl_memories.append(xl_memories)
            x = attn_post_norm(x + attn_out)
            residual = residual + attn_out * self.resi_dual_scale
            ff_out = ff(shift_fn(x))
            x = ff_post_norm(x + ff_out)
            residual = residual + ff_out * self.resi_dual_scale
        # whether to return xl memories
        next_xl_memories = None
        if self.use_xl_memories:
            next_xl_memories = list(map(lambda t: torch.detach(t[..., -self.xl_mem_len:, :]), new_xl_memories))
        # add final norm of residual, as in resiDual paper
        x = x + self.norm(residual)
        # split out memories using unpack
        read_memories, x, write_memories = x.split(ps, dim = 1)
        # to logits
        logits = self.to_logits(x)
        if not return_loss:
            return logits, write_memories, next_xl_memories
        loss = F.cross_entropy(
            logits.transpose(1, 2),
            labels,
            ignore_index = self.ignore_index
        )
        return loss, write_memories, next_xl_memories
