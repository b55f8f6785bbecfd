"""Llama 2 causal language model (RMSNorm, rotary embeddings, grouped-query attention through
``scaled_dot_product_attention(is_causal=True)``, SwiGLU feed-forward, tied input/output embedding) trained by the
repository's ``train.py``: AdamW from ``configure_optimizers`` (2-D parameters decayed, weight_decay 0.1, betas
(0.9, 0.95)), cosine learning rate with linear warmup (``get_lr``), ``gradient_accumulation_steps`` micro-batches per
update with the loss divided by the accumulation steps, the next batch prefetched during the micro-step, a disabled
``GradScaler`` (float32), ``clip_grad_norm_(grad_clip=1.0)`` and ``zero_grad(set_to_none=True)``.

Source: https://github.com/karpathy/llama2.c
Commit: 350e04fe35433e6d2941dce5a1f53308f87058eb
Files: train.py, model.py, tinystories.py (PretokDataset, Task.iter_batches)
License: MIT (Copyright (c) 2023 Andrej; full text in LICENSES/karpathy-llama2.c.txt)
Domain: causal language model (Llama 2 architecture, pre-training loop)

Deviations from the original:
- sizes: dim 288 -> 32, n_layers 6 -> 2, n_heads 6 -> 4, n_kv_heads 6 -> 2 (so ``repeat_kv`` runs), multiple_of
  32 -> 16, max_seq_len 256 -> 32, batch_size 128 -> 8, vocab_source "custom" with vocab_size 64 (the script's
  option for a custom tokenizer); gradient_accumulation_steps 4 unchanged;
- the schedule is shortened for a short run: learning_rate 5e-4 -> 3e-3, warmup_iters 1000 -> 5, max_iters (and so
  lr_decay_iters) 100000 -> 200; weight_decay, betas, grad_clip and min_lr unchanged;
- data: the pretokenized TinyStories shards (``.bin`` files read with ``np.memmap``) are replaced by one in-memory
  uint16 token stream per split made from ``seed`` ("words" of 3-6 tokens from 4..63, each repeated 3-6 times and
  separated by token 1, so a token is predictable from the ones before it); ``PretokDataset.__iter__`` is kept
  otherwise (shuffled chunk starts, ``x = chunk[:-1]``, ``y = chunk[1:]``) and ``Task.iter_batches`` wraps it in the
  same DataLoader (``pin_memory`` off: no GPU);
- no GPU, DDP, ``torch.compile``, wandb, checkpointing or ``model_export``: device "cpu", dtype "float32" (so the
  autocast context is ``nullcontext`` and the GradScaler is disabled, as the script does on CPU);
  ``torch.cuda.amp.GradScaler(enabled=False)`` is written ``torch.amp.GradScaler("cuda", enabled=False)`` (the
  deprecated alias warns in this torch);
- ``configure_optimizers``' parameter-count prints, ``estimate_mfu`` and ``generate`` (inference only) are left
  out;
- one ``train_step`` is one iteration of the ``while True`` loop (set the lr, 4 micro-steps, clip, step, zero_grad,
  ``iter_num += 1``) and returns ``lossf`` (the last micro-batch's loss scaled back up, as logged); the periodic
  ``estimate_loss`` is ``eval_fn`` on a given batch (``model.eval()``, no_grad, ``raw_model.last_loss``,
  ``model.train()``).
"""
# ruff: noqa: C408, PIE810, PLR0133, UP006, UP035, UP045  (the original's code style is kept as written)

from __future__ import annotations

import functools
import inspect
import math
import pathlib
import random
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# -----------------------------------------------------------------------------
# train.py's configuration (sizes and schedule shortened, see the docstring)
eval_iters = 100
# data
batch_size = 8  # if gradient_accumulation_steps > 1, this is the micro-batch size
max_seq_len = 32
vocab_source = "custom"  # llama2|custom; use Lllama 2 vocab from Meta, or custom trained
vocab_size = 64  # the Llama 2 tokenizer has 32K tokens
# model
dim = 32
n_layers = 2
n_heads = 4
n_kv_heads = 2
multiple_of = 16
dropout = 0.0
# adamw optimizer
gradient_accumulation_steps = 4  # used to simulate larger batch sizes
learning_rate = 3e-3  # max learning rate
max_iters = 200  # total number of training iterations
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # clip gradients at this value, or disable if == 0.0
# learning rate decay settings
decay_lr = True  # whether to decay the learning rate
warmup_iters = 5  # how many steps to warm up for
# system
device = "cpu"
dtype = "float32"  # float32|bfloat16|float16

# fixing some hyperparams to sensible defaults
lr_decay_iters = max_iters  # should be ~= max_iters per Chinchilla
min_lr = 0.0  # minimum learning rate, should be ~= learning_rate/10 per Chinchilla


# ---- model.py -----------------------------------------------------------------------------------------------------

@dataclass
class ModelArgs:
    # default hyperparameters for the Llama 7B model
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: Optional[int] = None
    vocab_size: int = 32000
    hidden_dim: Optional[int] = None
    multiple_of: int = 256  # MLP hidden layer size will be multiple of
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    dropout: float = 0.0
    bug: Optional[str] = None  # the port's bug switch (not in the original)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)  # type: ignore
    freqs = torch.outer(t, freqs).float()  # type: ignore
    freqs_cos = torch.cos(freqs)  # real part
    freqs_sin = torch.sin(freqs)  # imaginary part
    return freqs_cos, freqs_sin

def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(shape)

def apply_rotary_emb(
    xq: torch.Tensor,
    xk: torch.Tensor,
    freqs_cos: torch.Tensor,
    freqs_sin: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:

    # reshape xq and xk to match the complex representation
    xq_r, xq_i = xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)
    xk_r, xk_i = xk.float().reshape(xk.shape[:-1] + (-1, 2)).unbind(-1)

    # reshape freqs_cos and freqs_sin for broadcasting
    freqs_cos = reshape_for_broadcast(freqs_cos, xq_r)
    freqs_sin = reshape_for_broadcast(freqs_sin, xq_r)

    # apply rotation using real numbers
    xq_out_r = xq_r * freqs_cos - xq_i * freqs_sin
    xq_out_i = xq_r * freqs_sin + xq_i * freqs_cos
    xk_out_r = xk_r * freqs_cos - xk_i * freqs_sin
    xk_out_i = xk_r * freqs_sin + xk_i * freqs_cos

    # flatten last two dimensions
    xq_out = torch.stack([xq_out_r, xq_out_i], dim=-1).flatten(3)
    xk_out = torch.stack([xk_out_r, xk_out_i], dim=-1).flatten(3)

    return xq_out.type_as(xq), xk_out.type_as(xk)

def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )

class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        assert args.n_heads % self.n_kv_heads == 0
        model_parallel_size = 1
        self.n_local_heads = args.n_heads // model_parallel_size
        self.n_local_kv_heads = self.n_kv_heads // model_parallel_size
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.attn_dropout = nn.Dropout(args.dropout)
        self.resid_dropout = nn.Dropout(args.dropout)
        self.dropout = args.dropout
        self.bug = args.bug

        # use flash attention or a manual implementation?
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
            mask = torch.full((1, 1, args.max_seq_len, args.max_seq_len), float("-inf"))
            mask = torch.triu(mask, diagonal=1)
            self.register_buffer("mask", mask)

    def forward(
        self,
        x: torch.Tensor,
        freqs_cos: torch.Tensor,
        freqs_sin: torch.Tensor,
    ):
        bsz, seqlen, _ = x.shape

        # QKV
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

        # RoPE relative positional embeddings
        xq, xk = apply_rotary_emb(xq, xk, freqs_cos, freqs_sin)

        # grouped multiquery attention: expand out keys and values
        xk = repeat_kv(xk, self.n_rep)  # (bs, seqlen, n_local_heads, head_dim)
        xv = repeat_kv(xv, self.n_rep)  # (bs, seqlen, n_local_heads, head_dim)

        # make heads into a batch dimension
        xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        xk = xk.transpose(1, 2)
        xv = xv.transpose(1, 2)

        # flash implementation
        if self.flash:
            if self.bug == "attention_not_causal":
                # is_causal left at its default (False): every position attends to the tokens it must predict
                output = torch.nn.functional.scaled_dot_product_attention(xq, xk, xv, attn_mask=None, dropout_p=self.dropout if self.training else 0.0)
            else:
                output = torch.nn.functional.scaled_dot_product_attention(xq, xk, xv, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        else:
            # manual implementation
            scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
            assert hasattr(self, 'mask')
            scores = scores + self.mask[:, :, :seqlen, :seqlen]   # (bs, n_local_heads, seqlen, cache_len + seqlen)
            scores = F.softmax(scores.float(), dim=-1).type_as(xq)
            scores = self.attn_dropout(scores)
            output = torch.matmul(scores, xv)  # (bs, n_local_heads, seqlen, head_dim)

        # restore time as batch dimension and concat heads
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)

        # final projection into the residual stream
        output = self.wo(output)
        output = self.resid_dropout(output)
        return output


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int, dropout: float):
        super().__init__()
        if hidden_dim is None:
            hidden_dim = 4 * dim
            hidden_dim = int(2 * hidden_dim / 3)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.dim = args.dim
        self.head_dim = args.dim // args.n_heads
        self.attention = Attention(args)
        self.feed_forward = FeedForward(
            dim=args.dim,
            hidden_dim=args.hidden_dim,
            multiple_of=args.multiple_of,
            dropout=args.dropout,
        )
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cos, freqs_sin):
        h = x + self.attention.forward(self.attention_norm(x), freqs_cos, freqs_sin)
        out = h + self.feed_forward.forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    last_loss: Optional[torch.Tensor]

    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers

        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.dropout = nn.Dropout(params.dropout)
        self.layers = torch.nn.ModuleList()
        for layer_id in range(params.n_layers):
            self.layers.append(TransformerBlock(layer_id, params))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)

        # share the unembedding parameters with the embedding parameters
        self.tok_embeddings.weight = self.output.weight # https://paperswithcode.com/method/weight-tying

        # some useful precompute for the RoPE relative positional embeddings
        freqs_cos, freqs_sin = precompute_freqs_cis(self.params.dim // self.params.n_heads, self.params.max_seq_len)
        self.register_buffer("freqs_cos", freqs_cos, persistent=False)
        self.register_buffer("freqs_sin", freqs_sin, persistent=False)

        # init all weights
        self.apply(self._init_weights)
        # apply special scaled init to the residual projections, per GPT-2 paper
        for pn, p in self.named_parameters():
            if pn.endswith('w3.weight') or pn.endswith('wo.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * params.n_layers))

        # Initialize attribute for the loss of the last forward call. This will be set if the forward is called with a targets tensor.
        self.last_loss = None

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, tokens: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        h = self.dropout(h)
        freqs_cos = self.freqs_cos[:seqlen]
        freqs_sin = self.freqs_sin[:seqlen]

        for layer in self.layers:
            h = layer(h, freqs_cos, freqs_sin)
        h = self.norm(h)

        if targets is not None:
            # if we are given some desired targets also calculate the loss
            logits = self.output(h)
            self.last_loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference-time mini-optimization: only forward the output on the very last position
            logits = self.output(h[:, [-1], :]) # note: using list [-1] to preserve the time dim
            self.last_loss = None

        return logits

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # start with all of the candidate parameters
        param_dict = {pn: p for pn, p in self.named_parameters()}
        # filter out those that do not require grad
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        # create optim groups. Any parameters that is 2D will be weight decayed, otherwise no.
        # i.e. all weight tensors in matmuls + embeddings decay, all biases and layernorms don't.
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0}
        ]
        # Create AdamW optimizer and use the fused version if it is available
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

        return optimizer


# ---- tinystories.py (PretokDataset over an in-memory synthetic token stream) -----------------------------------

def make_tokens(gen, n):
    """A uint16 token stream: "words" of 3-6 tokens from 4..63, each repeated 3-6 times, separated by token 1."""
    out = []
    while len(out) < n:
        word = torch.randint(4, vocab_size, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [1]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return np.array(out[:n], dtype=np.uint16)


class PretokDataset(torch.utils.data.IterableDataset):
    """Loads pretokenized examples (here: a synthetic in-memory shard) and yields them as PyTorch tensors."""

    def __init__(self, split, max_seq_len, vocab_size, vocab_source, shards=None):
        super().__init__()
        self.split = split
        self.max_seq_len = max_seq_len
        self.vocab_size = vocab_size
        self.vocab_source = vocab_source
        self.shards = shards

    def __iter__(self):
        # get worker info within a DataLoader
        worker_info = torch.utils.data.get_worker_info()
        worker_id = worker_info.id if worker_info else 0
        rank = 0
        # combine the worker_id and worker_rank to create a unique seed for rng
        seed = 42 + worker_id + 1337 * rank
        rng = random.Random(seed)
        shard_filenames = list(self.shards[self.split])
        assert len(shard_filenames)>0, "No shards"
        while True:
            rng.shuffle(shard_filenames)
            for shard in shard_filenames:
                m = shard
                num_batches = len(m) // self.max_seq_len
                num_batches -= 1  # drop the last partial batch
                assert num_batches > 0, "this shard is way too small? investigate."
                ixs = list(range(num_batches))
                rng.shuffle(ixs)
                for ix in ixs:
                    start = ix * self.max_seq_len
                    end = start + self.max_seq_len + 1
                    # calling .astype will copy the data into a new numpy array, now in RAM
                    chunk = torch.from_numpy((m[start:end]).astype(np.int64))
                    x = chunk[:-1]
                    y = chunk[1:]
                    yield x, y


class Task:

    @staticmethod
    def dataloader(batch_size, num_workers=0, **dataset_kwargs):
        ds = PretokDataset(**dataset_kwargs)
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, pin_memory=False, num_workers=num_workers)

    @staticmethod
    def iter_batches(batch_size, device, num_workers=0, **dataset_kwargs):
        dl = Task.dataloader(batch_size, num_workers, **dataset_kwargs)
        for x, y in dl:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            yield x, y


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(1337 + seed)
    gen = torch.Generator().manual_seed(seed)
    shards = {"train": [make_tokens(gen, 20000)], "val": [make_tokens(gen, 4000)]}
    device_type = "cuda" if "cuda" in device else "cpu"  # for later use in torch.autocast
    # note: float16 data type will automatically use a GradScaler
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = (
        nullcontext()
        if device_type == "cpu"
        else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
    )

    # task-specific setup
    iter_batches = partial(
        Task.iter_batches,
        batch_size=batch_size,
        max_seq_len=max_seq_len,
        vocab_size=vocab_size,
        vocab_source=vocab_source,
        device=device,
        num_workers=0,
        shards=shards,
    )

    # model init
    model_args = dict(
        dim=dim,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        vocab_size=vocab_size,
        multiple_of=multiple_of,
        max_seq_len=max_seq_len,
        dropout=dropout,
    )  # start with model_args from command line
    gptconf = ModelArgs(**model_args, bug=bug)
    model = Transformer(gptconf)
    model.to(device)

    # initialize a GradScaler. If enabled=False scaler is a no-op
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))

    # optimizer
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)

    raw_model = model  # unwrap DDP container if needed

    # learning rate decay scheduler (cosine with warmup)
    def get_lr(it):
        # 1) linear warmup for warmup_iters steps
        if it < warmup_iters:
            return learning_rate * it / warmup_iters
        # 2) if it > lr_decay_iters, return min learning rate
        if it > lr_decay_iters:
            return min_lr
        # 3) in between, use cosine decay down to min learning rate
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        assert 0 <= decay_ratio <= 1
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
        return min_lr + coeff * (learning_rate - min_lr)

    # training loop
    train_batch_iter = iter_batches(split="train")
    X, Y = next(train_batch_iter)  # fetch the very first batch
    state = {"X": X, "Y": Y, "iter_num": 0}
    first = ({"tokens": X, "targets": Y}, Y)

    def train_step():
        iter_num = state["iter_num"]
        X, Y = state["X"], state["Y"]
        # determine and set the learning rate for this iteration
        lr = get_lr(iter_num) if decay_lr else learning_rate
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        # forward backward update, with optional gradient accumulation to simulate larger batch size
        # and using the GradScaler if data type is float16
        for micro_step in range(gradient_accumulation_steps):
            if bug == "zero_grad_every_micro_step":
                # the gradients flushed inside the accumulation loop: each update sees only the last micro-batch
                optimizer.zero_grad(set_to_none=True)
            with ctx:
                logits = model(X, Y)
                loss = raw_model.last_loss
                loss = loss / gradient_accumulation_steps
            # immediately async prefetch next batch while model is doing the forward pass on the GPU
            X, Y = next(train_batch_iter)
            # backward pass, with gradient scaling if training in fp16
            scaler.scale(loss).backward()
        # clip the gradient
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        # step the optimizer and scaler if training in fp16
        scaler.step(optimizer)
        scaler.update()
        # flush the gradients as soon as we can, no need for this memory anymore
        optimizer.zero_grad(set_to_none=True)

        # get loss as float, scale up due to the divide above. note: this is a CPU-GPU sync point
        lossf = loss.item() * gradient_accumulation_steps
        state["X"], state["Y"], state["iter_num"] = X, Y, iter_num + 1
        del logits
        return lossf

    # helps estimate an arbitrarily accurate loss (here: on the given batch)
    @torch.no_grad()
    def eval_fn(model, batch):
        model.eval()
        X, Y = batch[0]["tokens"], batch[0]["targets"]
        with ctx:
            logits = model(X, Y)
            loss = raw_model.last_loss
        del logits
        model.train()
        return loss.item()

    loader = Task.dataloader(batch_size, split="train", max_seq_len=max_seq_len, vocab_size=vocab_size,
                             vocab_source=vocab_source, shards=shards)
    return Program(name="llama2c_lm", model=model, batch=first, loss_fn=lambda logits, _targets: raw_model.last_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=loader)


build = functools.partial(_build)

BUGS = [
    # optimizer.zero_grad() moved into the micro-step loop (the gradient-accumulation slip): every update sees only
    # the last of the 4 micro-batches, at a quarter of its scale.
    Bug("zero_grad_every_micro_step", functools.partial(_build, bug="zero_grad_every_micro_step"), "step_probe",
        ("tok_embeddings.weight",)),
    # scaled_dot_product_attention called without is_causal=True: the model sees the very tokens it must predict.
    Bug("attention_not_causal", functools.partial(_build, bug="attention_not_causal"), "learning_ledger",
        ("DEPENDENCY",)),
]
