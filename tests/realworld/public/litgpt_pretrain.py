"""LitGPT's pretraining script (``litgpt/pretrain.py``) on a tiny GPT-NeoX-style ``GPT`` (the ``pythia-14m``
config of ``config_hub/pretrain/debug.yaml``, shrunk): parallel residual blocks with LayerNorm, fused QKV
attention with partial rotary embeddings (``rotary_percentage`` 0.25) through ``scaled_dot_product_attention``
(``is_causal``), ``GptNeoxMLP`` (GELU); GPT-NeoX initialization (``initialize_weights``); the ``fit`` loop under
Lightning Fabric: per iteration the cosine-with-warmup ``get_lr``, inputs ``train_data[:, 0:T]`` and targets
``train_data[:, 1:T+1]``, ``chunked_cross_entropy``, ``fabric.backward(loss / gradient_accumulation_iters)``, and on
the last micro-batch ``fabric.clip_gradients(max_norm=1.0)``, ``optimizer.step()``, ``optimizer.zero_grad()``;
AdamW(lr 6e-4, weight decay 0.1, betas (0.9, 0.95)).

Source: https://github.com/Lightning-AI/litgpt
Commit: 26857050fe3ff627cd714fe92f5838f51a3d5efa
Files: litgpt/pretrain.py (main, fit, validate, get_lr, initialize_weights), litgpt/model.py (GPT, Block,
  CausalSelfAttention, GptNeoxMLP, build_rope_cache, apply_rope), litgpt/config.py (Config, pythia-14m),
  litgpt/utils.py (chunked_cross_entropy, reset_parameters, CycleIterator, find_multiple), litgpt/args.py
  (TrainArgs.gradient_accumulation_iters, warmup_iters), config_hub/pretrain/debug.yaml
License: Apache-2.0 (full text in LICENSES/Lightning-AI-litgpt.txt)
Domain: causal LM pretraining (Lightning Fabric loop, gradient accumulation, cosine lr with warmup)

Deviations from the original:
- ``lightning`` is not importable here; the same Fabric ships as ``lightning_fabric`` (a dependency of the
  installed pytorch_lightning) and is used instead: ``Fabric(accelerator="cpu", devices=1,
  precision="32-true")`` (debug.yaml: bf16-mixed on GPUs); ``torch.compile``, FSDP, ``fabric.launch``, the
  throughput monitor / FLOP measurement, ``RunningMean``, logging, checkpointing and resuming are left out;
- ``Config`` keeps only the fields this model reads (the others at their defaults: LayerNorm, parallel residual,
  no qk-norm, no sliding window, no softcapping, standard RoPE); ``GPT``'s forward keeps the training path
  (``input_pos`` None: no KV cache, the causal mask left to SDPA's ``is_causal``), the KV cache, MoE and latent
  attention code is not ported;
- sizes: pythia-14m's ``n_layer`` 6 -> 2, ``n_embd`` 128 -> 32 (``n_head`` 4 kept), ``block_size`` 512 -> 32,
  vocabulary 50254 (padded to 50304) -> 64 (``padding_multiple`` 64); debug.yaml's ``global_batch_size`` 125 /
  ``micro_batch_size`` 5 -> 8 / 4 (2 accumulation iterations), ``lr_warmup_steps`` 100 -> 10,
  ``max_tokens`` 1e8 -> 256000 (2000 iterations), ``min_lr`` 6e-5, ``max_norm`` 1.0 and the optimizer as written;
- data: TinyStories (a streaming dataset of tokenized stories) is replaced by a synthetic token stream made from
  ``seed`` (token "words" of 3-6 ids, each repeated 3-6 times, so a token is predictable from the ones before),
  sampled as random windows of ``max_seq_length + 1`` tokens in a shuffled DataLoader, as litgpt's data modules
  yield them;
- one ``train_step`` is one optimizer step of ``fit``: ``gradient_accumulation_iters`` loop iterations (lr set,
  ``iter_num`` incremented, forward, backward under ``no_backward_sync``; clip, step, zero_grad on the last);
  the ``eval_fn`` is ``validate`` over held-out windows;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, PLR0402, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import logging
import math
import pathlib
import sys
import warnings
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

logging.getLogger("lightning_fabric").setLevel(logging.ERROR)

GLOBAL_BATCH_SIZE, MICRO_BATCH_SIZE = 8, 4
LR, WEIGHT_DECAY, BETAS = 6e-4, 0.1, (0.9, 0.95)
LR_WARMUP_STEPS, MAX_TOKENS, MAX_NORM, MIN_LR = 10, 256000, 1.0, 6e-5


# ---- litgpt/utils.py -------------------------------------------------------------------------------------------

def find_multiple(n: int, k: int) -> int:
    assert k > 0
    if n % k == 0:
        return n
    return n + k - (n % k)


def reset_parameters(module: nn.Module) -> None:
    """Calls `reset_parameters` on the module and all its submodules."""
    for mod in module.modules():
        if callable(getattr(mod, "reset_parameters", None)):
            mod.reset_parameters()


def chunked_cross_entropy(
    logits: torch.Tensor | list[torch.Tensor],
    targets: torch.Tensor,
    chunk_size: int = 128,
    ignore_index: int = -100,
) -> torch.Tensor:
    # with large max_sequence_lengths, the beginning of `backward` allocates a large memory chunk which can dominate
    # the memory usage in fine-tuning settings with low number of parameters.
    # as a workaround hack, the cross entropy computation is chunked to force it to deallocate on the go, reducing
    # the memory spike's magnitude

    # lm_head was chunked (we are fine-tuning)
    if isinstance(logits, list):
        # don't want to chunk cross entropy
        if chunk_size == 0:
            logits = torch.cat(logits, dim=1)
            logits = logits.reshape(-1, logits.size(-1))
            targets = targets.reshape(-1)
            return torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index)

        # chunk cross entropy
        logit_chunks = [logit_chunk.reshape(-1, logit_chunk.size(-1)) for logit_chunk in logits]
        target_chunks = [target_chunk.reshape(-1) for target_chunk in targets.split(logits[0].size(1), dim=1)]
        loss_chunks = [
            torch.nn.functional.cross_entropy(logit_chunk, target_chunk, ignore_index=ignore_index, reduction="none")
            for logit_chunk, target_chunk in zip(logit_chunks, target_chunks)
        ]
        non_masked_elems = (targets != ignore_index).sum()
        # See [non_masked_elems div note]
        return torch.cat(loss_chunks).sum() / non_masked_elems.maximum(torch.ones_like(non_masked_elems))

    # no chunking at all
    logits = logits.reshape(-1, logits.size(-1))
    targets = targets.reshape(-1)
    if chunk_size == 0:
        return torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index)

    # lm_head wasn't chunked, chunk cross entropy
    logit_chunks = logits.split(chunk_size)
    target_chunks = targets.split(chunk_size)
    loss_chunks = [
        torch.nn.functional.cross_entropy(logit_chunk, target_chunk, ignore_index=ignore_index, reduction="none")
        for logit_chunk, target_chunk in zip(logit_chunks, target_chunks)
    ]
    non_masked_elems = (targets != ignore_index).sum()
    # [non_masked_elems div note]:
    #   max(1, non_masked_elems) would be more ergonomic to avoid a division by zero. However that
    #   results in a python int which is then passed back to torch division. By using the
    #   `x.maximum(torch.ones_like(x))` pattern we avoid a cudaStreamSynchronize.
    return torch.cat(loss_chunks).sum() / non_masked_elems.maximum(torch.ones_like(non_masked_elems))


class CycleIterator:
    """An iterator that cycles through an iterable indefinitely."""

    def __init__(self, iterable) -> None:
        self.iterable = iterable
        self.epoch = 0
        self._iterator = None

    def __next__(self):
        if self._iterator is None:
            self._iterator = iter(self.iterable)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = iter(self.iterable)
            self.epoch += 1
            return next(self._iterator)

    def __iter__(self):
        return self


# ---- litgpt/config.py ------------------------------------------------------------------------------------------

@dataclass
class Config:
    name: str = ""
    block_size: int = 4096
    n_layer: int = 16
    n_embd: int = 4096
    vocab_size: int = 50254
    padding_multiple: int = 512
    padded_vocab_size: int | None = None
    norm_eps: float = 1e-5
    parallel_residual: bool = True
    shared_attention_norm: bool = False
    n_head: int = 32
    head_size: int | None = None
    n_query_groups: int | None = None
    attn_bias: bool = False
    attention_scores_scalar: int | None = None
    rope_base: int = 10000
    rotary_percentage: float = 0.25
    rope_condense_ratio: int = 1
    intermediate_size: int | None = None
    bias: bool = True
    gelu_approximate: str = "none"
    scale_embeddings: bool = False
    lm_head_bias: bool = False

    def __post_init__(self):
        if self.head_size is None:
            assert self.n_embd % self.n_head == 0
            self.head_size = self.n_embd // self.n_head

        # vocab size should be a power of 2 to be optimal on hardware. compute the closest value
        if self.padded_vocab_size is None:
            self.padded_vocab_size = find_multiple(self.vocab_size, self.padding_multiple)
        else:
            # vocab size shouldn't be larger than padded vocab size
            self.vocab_size = min(self.vocab_size, self.padded_vocab_size)

        # compute the number of query groups
        if self.n_query_groups is not None:
            assert self.n_head % self.n_query_groups == 0
        else:
            self.n_query_groups = self.n_head

        # compute the intermediate size for MLP if not set
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.n_embd

        self.rope_n_elem = int(self.rotary_percentage * self.head_size)

    @property
    def norm_class(self):
        return partial(torch.nn.LayerNorm, elementwise_affine=True)

    @property
    def mlp_class(self):
        return GptNeoxMLP


# ---- litgpt/model.py (the training path) -----------------------------------------------------------------------

class GPT(nn.Module):
    def __init__(self, config: Config, bug=None) -> None:
        super().__init__()
        assert config.padded_vocab_size is not None
        self.config = config

        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=config.lm_head_bias)
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.padded_vocab_size, config.n_embd),
                h=nn.ModuleList(Block(config, block_idx, bug=bug) for block_idx in range(config.n_layer)),
                ln_f=config.norm_class(config.n_embd, eps=config.norm_eps),
            )
        )
        self.mask_cache: torch.Tensor | None = None
        self.max_seq_length = self.config.block_size

    @property
    def max_seq_length(self) -> int:
        return self._max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        if value > self.config.block_size:
            raise ValueError(
                f"Cannot attend to {value}, block size is only {self.config.block_size}."
                " This is likely because the input text exceeds the supported context length of this model."
            )
        self._max_seq_length = value
        if not hasattr(self, "cos"):
            # first call
            cos, sin = self.rope_cache()
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        # override
        elif value != self.cos.size(0):
            self.cos, self.sin = self.rope_cache(device=self.cos.device)

    def reset_parameters(self) -> None:
        # Trigger resetting the rope-cache
        self.cos, self.sin = self.rope_cache(device=self.cos.device)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        if self.max_seq_length < T:
            raise ValueError(f"Cannot forward sequence of length {T}, max seq length is only {self.max_seq_length}.")

        # unsqueeze to have a batch dimension
        cos = self.cos[:T].unsqueeze(0)
        sin = self.sin[:T].unsqueeze(0)
        # `cos`, `sin` have shape (1, T, config.rope_n_elem)
        mask = None  # defaults to causal mask

        x = self.transformer.wte(idx)  # token embeddings of shape (B, T, n_embd)
        if self.config.scale_embeddings:
            x = x * torch.tensor(self.config.n_embd**0.5, dtype=x.dtype)

        for block in self.transformer.h:
            x = block(x, cos, sin, mask)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)  # (B, T, padded_vocab_size)

    def rope_cache(self, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return build_rope_cache(
            seq_len=self.max_seq_length,
            n_elem=self.config.rope_n_elem,
            device=device,
            condense_ratio=self.config.rope_condense_ratio,
            base=self.config.rope_base,
        )


class Block(nn.Module):
    def __init__(self, config: Config, block_idx: int, bug=None) -> None:
        super().__init__()
        self.norm_1 = config.norm_class(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config, block_idx, bug=bug)
        self.post_attention_norm = nn.Identity()
        self.norm_2 = None if config.shared_attention_norm else config.norm_class(config.n_embd, eps=config.norm_eps)
        self.mlp = config.mlp_class(config)
        self.post_mlp_norm = nn.Identity()

        self.config = config

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x_normed = self.norm_1(x)
        attention_output = self.attn(x_normed, cos, sin, mask)
        attention_output = self.post_attention_norm(attention_output)

        if self.config.parallel_residual:
            if not self.config.shared_attention_norm:
                x_normed = self.norm_2(x)
            x = attention_output + x
        else:
            x = attention_output + x
            x_normed = self.norm_2(x)

        return self.post_mlp_norm(self.mlp(x_normed)) + x


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config, block_idx: int, bug=None) -> None:
        super().__init__()
        # key, query and value projections for all heads, but in a batch
        self.qkv = nn.Linear(
            config.n_embd,
            (config.n_head + 2 * config.n_query_groups) * config.head_size,  # support for grouped/multi queries
            bias=config.bias or config.attn_bias,
        )
        # output projection
        self.proj = nn.Linear(config.head_size * config.n_head, config.n_embd, bias=config.bias)
        self.mscale = 1.0

        self.config = config
        self.block_idx = block_idx
        self.bug = bug

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        head_size = self.config.head_size
        n_head = self.config.n_head
        n_query_groups = self.config.n_query_groups
        rope_n_elem = self.config.rope_n_elem
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)

        # Perform a single multiplication operation using a combined QKV matrix to calculate `query`, `key`, and `value`
        # instead of individually multiplying the input `x` with the respective weight matrices.
        qkv = self.qkv(x)  # (B, T, 3xC*)

        # Define query, key and value sizes.
        # If grouped/multi query is enabled, these sizes are not equal (see the diagram above).
        query_size = n_head * head_size
        key_size = value_size = n_query_groups * head_size
        # Split qkv into query, key and value matrices.
        q, k, v = qkv.split((query_size, key_size, value_size), dim=-1)  # 3x(B, T, C*)

        q = q.view(B, T, n_head, head_size)  # (B, T, nh_q, hs)
        k = k.view(B, T, n_query_groups, head_size)  # (B, T, n_query_groups, hs)
        v = v.view(B, T, n_query_groups, head_size)  # (B, T, n_query_groups, hs)

        q = q.transpose(1, 2)  # (B, nh_q, T, hs)
        k = k.transpose(1, 2)  # (B, nh_k, T, hs)
        v = v.transpose(1, 2)  # (B, nh_v, T, hs)

        # Unlike standard positional embeddings rotary embeddings must be applied at every layer.
        q_roped = apply_rope(q[..., :rope_n_elem], cos, sin)
        k_roped = apply_rope(k[..., :rope_n_elem], cos, sin)
        q = torch.cat((q_roped, q[..., rope_n_elem:]), dim=-1)  # (B, nh_q, T, hs)
        k = torch.cat((k_roped, k[..., rope_n_elem:]), dim=-1)  # (B, nh_k, T, hs)

        # Grouped queries: balance the number of heads across all three matrices.
        if n_query_groups != n_head:
            q_per_kv = n_head // n_query_groups
            k = k.repeat_interleave(q_per_kv, dim=1)  # (B, nh_q, T, hs)
            v = v.repeat_interleave(q_per_kv, dim=1)  # (B, nh_q, T, hs)

        y = self.scaled_dot_product_attention(q, k, v, mask)

        # Re-assemble all head outputs side by side.
        y = y.reshape(B, T, head_size * n_head)

        # Output projection.
        return self.proj(y)  # (B, T, C)

    def scaled_dot_product_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        scale = 1.0 / math.sqrt(self.config.attention_scores_scalar or self.config.head_size)
        scale = scale * self.mscale * self.mscale

        if self.bug == "attention_not_causal":
            # is_causal left out (classic): with no mask every position attends to the whole sequence
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=mask is None
            )
        return y.transpose(1, 2)


class GptNeoxMLP(nn.Module):
    def __init__(self, config: Config, intermediate_size: int | None = None) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size or config.intermediate_size
        self.fc = nn.Linear(config.n_embd, self.intermediate_size, bias=config.bias)
        self.proj = nn.Linear(self.intermediate_size, config.n_embd, bias=config.bias)
        self.config = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        x = F.gelu(x, approximate=self.config.gelu_approximate)
        return self.proj(x)


class LLaMAMLP(nn.Module):
    """Named by ``initialize_weights``; not used by this config."""


def build_rope_cache(
    seq_len: int,
    n_elem: int,
    device: torch.device | None = None,
    base: int = 10000,
    condense_ratio: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Compute the inverse frequencies theta
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device).float() / n_elem))

    # Initialize attention scaling factor (modified for YaRN)
    attention_scaling = 1.0

    # Create position indices `[0, 1, ..., seq_len - 1]`
    seq_idx = torch.arange(seq_len, device=device).float() / condense_ratio

    # Calculate the product of position index and $\theta_i$
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    # If `n_elem` is odd, the final dimension of `idx_theta` has size
    # `n_elem + 1`, so need to cut something off.
    if idx_theta.shape[-1] > n_elem > 1:
        idx_theta = idx_theta[..., :n_elem]

    cos = torch.cos(idx_theta) * attention_scaling
    sin = torch.sin(idx_theta) * attention_scaling
    return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if cos.dim() != 3:
        raise ValueError(f"cos must be three-dimensional, but shape is {cos.shape}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos, sin must have same shape, but cos.shape={cos.shape}, sin.shape={sin.shape}")
    head_size_half = x.size(-1) // 2
    x1 = x[..., :head_size_half]  # (B, ..., T, head_size/2)
    x2 = x[..., head_size_half:]  # (B, ..., T, head_size/2)
    rotated = torch.cat((-x2, x1), dim=-1)  # (B, ..., T, head_size)
    dims_diff = x.dim() - cos.dim()
    if dims_diff > 0:
        # Ensure that shapes of `x`, `cos`, `sin` align
        new_shape = cos.shape[0:1] + (1,) * dims_diff + cos.shape[1:]
        cos = cos.view(*new_shape)
        sin = sin.view(*new_shape)

    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


# ---- litgpt/pretrain.py ----------------------------------------------------------------------------------------

# learning rate decay scheduler (cosine with linear warmup)
def get_lr(learning_rate: float, it: int, warmup_iters: int, max_iters: int, min_lr: float) -> float:
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    # 2) if it > max_iters, return min learning rate
    if it > max_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)


def initialize_weights(fabric, model: GPT, n_layer: int, n_embd: int) -> None:
    """GPT-NeoX weight initialization (https://arxiv.org/abs/2204.06745)."""
    # Adapted from https://github.com/jzhang38/TinyLlama

    def init_weights(module, std):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)

    for mod in model.modules():
        if isinstance(mod, (nn.Embedding, nn.Linear)):
            mod.reset_parameters = partial(init_weights, mod, std=math.sqrt(2.0 / 5 / n_embd))

    # need a separate loop because `mod.proj` below is a `nn.Linear` too
    for mod in model.modules():
        if isinstance(mod, (LLaMAMLP, CausalSelfAttention)):
            mod.proj.reset_parameters = partial(init_weights, mod.proj, std=(1 / math.sqrt(n_embd) / n_layer))

    reset_parameters(model)


@torch.no_grad()
def validate(fabric, model: nn.Module, val_dataloader: DataLoader, max_iters: int, bug=None) -> torch.Tensor:
    model.eval()

    losses = []
    for k, batch in enumerate(val_dataloader):
        if k >= max_iters:
            break
        input_ids = batch[:, 0 : model.max_seq_length].contiguous().long()
        targets = batch[:, 1 : (model.max_seq_length + 1)].contiguous().long()
        logits = model(input_ids)
        loss = chunked_cross_entropy(logits, targets)
        losses.append(loss)

    val_loss = torch.stack(losses).mean()
    model.train()
    return val_loss


# ---- data --------------------------------------------------------------------------------------------------------

def make_tokens(gen, n, vocab_size):
    """Token "words" of 3-6 ids, each repeated 3-6 times (0 separates repetitions)."""
    out = []
    while len(out) < n:
        word = torch.randint(1, vocab_size, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [0]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.long)


class TokenWindows(Dataset):
    """Windows of ``max_seq_length + 1`` tokens, as litgpt's pretraining data modules yield them."""

    def __init__(self, data, seq_len, n, gen):
        self.data = data
        self.starts = torch.randint(0, data.size(0) - seq_len - 1, (n,), generator=gen)
        self.seq_len = seq_len

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        return self.data[s : s + self.seq_len + 1]


def _build(seed, bug=None):
    from lightning_fabric import Fabric

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fabric = Fabric(accelerator="cpu", devices=1, precision="32-true")
    torch.manual_seed(seed)  # fabric.seed_everything(seed), without its log line

    config = Config(name="pythia-14m", block_size=32, n_layer=2, n_embd=32, n_head=4, vocab_size=64,
                    padding_multiple=64)
    with fabric.init_module(empty_init=True):
        model = GPT(config, bug=bug)

    initialize_weights(fabric, model, n_layer=config.n_layer, n_embd=config.n_embd)

    gpt = model
    model = fabric.setup(model)

    extra_kwargs = {"fused": fabric.device.type == "cuda"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, **extra_kwargs)
    optimizer = fabric.setup_optimizers(optimizer)

    gen = torch.Generator().manual_seed(seed)
    stream = make_tokens(gen, 20000, config.vocab_size)
    train_data, val_data = stream[:16000], stream[16000:]
    train_dataloader = DataLoader(TokenWindows(train_data, gpt.max_seq_length, 1024, gen), batch_size=MICRO_BATCH_SIZE,
                                  shuffle=True)
    val_dataloader = DataLoader(TokenWindows(val_data, gpt.max_seq_length, 32, gen), batch_size=MICRO_BATCH_SIZE)
    train_dataloader, val_dataloader = fabric.setup_dataloaders(train_dataloader, val_dataloader)

    state = {"model": model, "optimizer": optimizer, "iter_num": 0, "step_count": 0}

    gradient_accumulation_iters = GLOBAL_BATCH_SIZE // MICRO_BATCH_SIZE  # train.gradient_accumulation_iters(1)
    max_tokens_per_device = MAX_TOKENS // fabric.world_size
    tokens_per_iter = MICRO_BATCH_SIZE * model.max_seq_length
    max_iters = max_tokens_per_device // tokens_per_iter
    train_iterator = CycleIterator(train_dataloader)
    warmup_iters = min(max_iters, LR_WARMUP_STEPS * gradient_accumulation_iters)  # train.warmup_iters(...)

    def fit_iteration(train_data):
        # determine and set the learning rate for this iteration
        lr = get_lr(optimizer.defaults["lr"], state["iter_num"], warmup_iters, max_iters, MIN_LR)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        state["iter_num"] += 1

        if bug == "targets_not_shifted":
            input_ids = train_data[:, 0 : model.max_seq_length].contiguous().long()
            targets = train_data[:, 0 : model.max_seq_length].contiguous().long()
        else:
            input_ids = train_data[:, 0 : model.max_seq_length].contiguous().long()
            targets = train_data[:, 1 : (model.max_seq_length + 1)].contiguous().long()

        is_accumulating = state["iter_num"] % gradient_accumulation_iters != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            logits = model(input_ids)
            loss = chunked_cross_entropy(logits, targets)
            fabric.backward(loss / gradient_accumulation_iters)

        if bug == "zero_grad_every_iteration":
            # zero_grad moved out of the update block (classic): each micro-batch wipes the one before
            if not is_accumulating:
                fabric.clip_gradients(model, optimizer, max_norm=MAX_NORM)
                optimizer.step()
                state["step_count"] += 1
            optimizer.zero_grad()
        elif not is_accumulating:
            fabric.clip_gradients(model, optimizer, max_norm=MAX_NORM)
            optimizer.step()
            optimizer.zero_grad()
            state["step_count"] += 1
        return loss.detach()

    def train_step():
        losses = [fit_iteration(next(train_iterator)) for _ in range(gradient_accumulation_iters)]
        return torch.stack(losses).mean()

    def eval_fn(_model, _batch):
        return float(validate(fabric, model, val_dataloader, max_iters=100, bug=bug))

    first = next(iter(DataLoader(train_dataloader.dataset, batch_size=MICRO_BATCH_SIZE)))
    input_ids = first[:, 0 : gpt.max_seq_length].contiguous().long()
    if bug == "targets_not_shifted":
        targets = first[:, 0 : gpt.max_seq_length].contiguous().long()
    else:
        targets = first[:, 1 : (gpt.max_seq_length + 1)].contiguous().long()

    return Program(name="litgpt_pretrain", model=gpt, batch=(input_ids, targets),
                   loss_fn=lambda logits, targets: chunked_cross_entropy(logits, targets),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = partial(_build, bug=None)

BUGS = [
    # targets sliced like the inputs (the one-token shift dropped, classic): the model learns to copy its input.
    Bug("targets_not_shifted", partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # SDPA called without is_causal while the mask is None (classic): every position sees the tokens it predicts.
    Bug("attention_not_causal", partial(_build, bug="attention_not_causal"), "learning_ledger", ("DEPENDENCY",)),
    # optimizer.zero_grad() outside the `if not is_accumulating` block (classic): only the last micro-batch's
    # gradient reaches the update.
    Bug("zero_grad_every_iteration", partial(_build, bug="zero_grad_every_iteration"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
