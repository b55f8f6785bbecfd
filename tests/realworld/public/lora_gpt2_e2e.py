"""LoRA fine-tuning of GPT-2 on a data-to-text task (the repository's NLG example, E2E recipe): ``GPT2LMModel``
whose attention ``c_attn`` is a ``lora.MergedLinear`` (rank 4, alpha 32, dropout 0.1, LoRA on q and v only,
``fan_in_fan_out=True``), the base weights frozen by ``lora.mark_only_lora_as_trainable``, ``FT_Dataset``
(context + completion, targets shifted by one, a mask that keeps only the completion in the loss), the model's
label-smoothed masked loss, the example's ``AdamW`` (``correct_bias``, beta2 0.999, weight decay 0.01), the linear
warm-up schedule, and ``train_validate``'s loop body (``optimizer_step``: backward, step, zero_grad, schedule).

Source: https://github.com/microsoft/LoRA
Commit: c4593f060e6a368d7bb5af5273b8e42810cdef90
Files: loralib/layers.py, loralib/utils.py, examples/NLG/src/gpt2_ft.py, examples/NLG/src/model.py,
  examples/NLG/src/optimizer.py, examples/NLG/src/data_utils.py, examples/NLG/README.md (the E2E command line)
License: MIT (Copyright (c) Microsoft Corporation; LICENSES/microsoft-LoRA.txt)
Domain: parameter-efficient fine-tuning (LoRA adapters on a frozen GPT-2)

Deviations from the original:
- sizes: ``gpt2.md`` (n_embd 1024, 24 layers, 16 heads, vocab 50257, n_ctx 1024) -> n_embd 32, 2 layers, 2 heads,
  vocab 64, n_positions/n_ctx 32; seq_len 512 -> 24; train_batch_size 8 and valid_batch_size 4 kept; warmup_step
  500 -> 10 and max_epoch 5 (max_step = max_epoch * num_batches, as the script computes it);
- no checkpoint can be downloaded (``--init_checkpoint``): ``pretrained_checkpoint(seed)`` makes one here, the
  transformer weights of a GPT-2 of the same configuration without adapters trained for 60 Adam steps on sequences
  of the fine-tuning's form whose completion is a chain of consecutive words (each word the one after the previous);
  the script's ``lm_net.load_weight`` loads it (into a fresh dict, as ``torch.load`` gives one), before
  ``mark_only_lora_as_trainable``, as in ``gpt2_ft.py``;
- lr 0.0002 -> 0.002 (with warmup_step 10: the README's lr does not move the adapters within a run of a few dozen
  steps);
- data: the E2E jsonl files are replaced by 512 training and 64 validation (context, completion) pairs made from
  ``seed``: the context is 3-6 "slot" tokens (ids 10..29) and a separator (2); the completion starts with the first
  slot's "word" (id + 20) and each next word is three after the previous one (ids 30..49, cyclic), one word per slot,
  then an end token (1): the adapters have to turn the base's +1 chain into a +3 chain. ``read_ft_file`` takes these
  pairs instead of a file name; the rest of ``FT_Dataset`` (``padding_tokens``, shifted targets, the completion
  mask) is copied as written;
- loralib and the example's modules are one file here: ``lora.MergedLinear`` is ``MergedLinear``; only what the
  example runs is copied (``LoRALayer``, ``MergedLinear``, ``mark_only_lora_as_trainable``; from model.py ``gelu``
  and the GPT-2 classes; from optimizer.py ``AdamW`` without its unused ``reset_state``,
  ``get_linear_schedule_with_warmup``, ``create_grouped_parameters``, ``create_adam_optimizer_from_args`` and the
  ``linear`` branch of ``create_optimizer_scheduler``); the docstring line of ``AverageMeter`` saying where it was
  copied from is left out;
- no GPU, no apex/fp16, no distributed launch: ``.cuda()`` is dropped, ``args.device`` is the CPU, the samplers are
  ``DistributedSampler(..., num_replicas=1, rank=0)`` (the script's single-process world), ``distributed_opt`` and
  ``distributed_sync`` are no-ops for one process and are left out, and ``optimizer_step`` keeps its non-fp16 path;
- ``args`` is an ``argparse.Namespace`` with the parser defaults and the README's E2E values (resized as above)
  instead of the command line; logging, checkpoint saving and the periodic evaluation are left out;
- one ``train_step`` is one iteration of ``train_validate``'s loop (``grad_acc`` 1: every iteration updates), a new
  epoch (``sampler.set_epoch``) when one ends. The declared batch is the model call's keywords (``input_ids``,
  ``lm_labels``, ``lm_mask``) and ``eval_fn`` is ``evaluate`` on that one batch (no label smoothing, as there);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, UP006, UP032, UP035, UP039, C408, B006, PLR0402, SIM102, SIM210, PIE808, RUF019, F841  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import copy
import functools
import math
import pathlib
import random
import sys
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parameter import Parameter
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

VOCAB, N_POSITIONS = 64, 32
EOS, SEP = 1, 2


# ---- loralib/layers.py (LoRALayer, MergedLinear) ---------------------------------------------------------------

class LoRALayer():
    def __init__(
        self, 
        r: int, 
        lora_alpha: int, 
        lora_dropout: float,
        merge_weights: bool,
    ):
        self.r = r
        self.lora_alpha = lora_alpha
        # Optional dropout
        if lora_dropout > 0.:
            self.lora_dropout = nn.Dropout(p=lora_dropout)
        else:
            self.lora_dropout = lambda x: x
        # Mark the weight as unmerged
        self.merged = False
        self.merge_weights = merge_weights


class MergedLinear(nn.Linear, LoRALayer):
    # LoRA implemented in a dense layer
    def __init__(
        self, 
        in_features: int, 
        out_features: int, 
        r: int = 0, 
        lora_alpha: int = 1, 
        lora_dropout: float = 0.,
        enable_lora: List[bool] = [False],
        fan_in_fan_out: bool = False,
        merge_weights: bool = True,
        bug=None,
        **kwargs
    ):
        self.bug = bug
        nn.Linear.__init__(self, in_features, out_features, **kwargs)
        LoRALayer.__init__(self, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                           merge_weights=merge_weights)
        assert out_features % len(enable_lora) == 0, \
            'The length of enable_lora must divide out_features'
        self.enable_lora = enable_lora
        self.fan_in_fan_out = fan_in_fan_out
        # Actual trainable parameters
        if r > 0 and any(enable_lora):
            self.lora_A = nn.Parameter(
                self.weight.new_zeros((r * sum(enable_lora), in_features)))
            self.lora_B = nn.Parameter(
                self.weight.new_zeros((out_features // len(enable_lora) * sum(enable_lora), r))
            ) # weights for Conv1D with groups=sum(enable_lora)
            self.scaling = self.lora_alpha / self.r
            # Freezing the pre-trained weight matrix
            self.weight.requires_grad = False
            # Compute the indices
            self.lora_ind = self.weight.new_zeros(
                (out_features, ), dtype=torch.bool
            ).view(len(enable_lora), -1)
            self.lora_ind[enable_lora, :] = True
            self.lora_ind = self.lora_ind.view(-1)
        self.reset_parameters()
        if fan_in_fan_out:
            self.weight.data = self.weight.data.transpose(0, 1)

    def reset_parameters(self):
        nn.Linear.reset_parameters(self)
        if hasattr(self, 'lora_A'):
            # initialize A the same way as the default for nn.Linear and B to zero
            if self.bug == "lora_factors_both_zero":
                nn.init.zeros_(self.lora_A)
            else:
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B)

    def zero_pad(self, x):
        result = x.new_zeros((len(self.lora_ind), *x.shape[1:]))
        result[self.lora_ind] = x
        return result

    def merge_AB(self):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        delta_w = F.conv1d(
            self.lora_A.unsqueeze(0), 
            self.lora_B.unsqueeze(-1), 
            groups=sum(self.enable_lora)
        ).squeeze(0)
        return T(self.zero_pad(delta_w))

    def train(self, mode: bool = True):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        nn.Linear.train(self, mode)
        if mode:
            if self.merge_weights and self.merged:
                # Make sure that the weights are not merged
                if self.r > 0 and any(self.enable_lora):
                    self.weight.data -= self.merge_AB() * self.scaling
                self.merged = False
        else:
            if self.merge_weights and not self.merged:
                # Merge the weights and mark it
                if self.r > 0 and any(self.enable_lora):
                    self.weight.data += self.merge_AB() * self.scaling
                self.merged = True        

    def forward(self, x: torch.Tensor):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        if self.merged:
            return F.linear(x, T(self.weight), bias=self.bias)
        else:
            result = F.linear(x, T(self.weight), bias=self.bias)
            if self.r > 0:
                result += self.lora_dropout(x) @ T(self.merge_AB().T) * self.scaling
            return result


# ---- loralib/utils.py ---------------------------------------------------------------------------------------

def mark_only_lora_as_trainable(model: nn.Module, bias: str = 'none') -> None:
    for n, p in model.named_parameters():
        if 'lora_' not in n:
            p.requires_grad = False
    if bias == 'none':
        return
    elif bias == 'all':
        for n, p in model.named_parameters():
            if 'bias' in n:
                p.requires_grad = True
    elif bias == 'lora_only':
        for m in model.modules():
            if isinstance(m, LoRALayer) and \
                hasattr(m, 'bias') and \
                m.bias is not None:
                    m.bias.requires_grad = True
    else:
        raise NotImplementedError



# ---- examples/NLG/src/model.py ---------------------------------------------------------------------------------

def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-12):
        """Construct a layernorm module in the TF style (epsilon inside the square root)."""
        super(LayerNorm, self).__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.weight * x + self.bias


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super(Conv1D, self).__init__()
        self.nf = nf
        w = torch.empty(nx, nf)
        nn.init.normal_(w, std=0.02)
        self.weight = Parameter(w)
        self.bias = Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(*size_out)
        return x


class Attention(nn.Module):
    def __init__(self, nx, n_ctx, config, scale=False):
        super(Attention, self).__init__()
        n_state = nx  # in Attention: n_state=768 (nx=n_embd)
        # [switch nx => n_state from Block to Attention to keep identical to TF implem]
        
        assert n_state % config.n_head == 0
        self.register_buffer("bias", torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))
        self.n_head = config.n_head
        self.split_size = n_state
        self.scale = scale
        self.c_attn = MergedLinear(
            nx, n_state * 3, 
            r=config.lora_attn_dim, 
            lora_alpha=config.lora_attn_alpha, 
            lora_dropout=config.lora_dropout, 
            enable_lora=[True, False, True], 
            fan_in_fan_out=True,
            merge_weights=False,
            bug=config.bug,
        )
        self.c_proj = Conv1D(n_state, nx)

        self.config = config
    
    def _attn(self, q, k, v, len_kv=None):
        w = torch.matmul(q, k)
        if self.scale:
            w = w / math.sqrt(v.size(-1))
        nd, ns = w.size(-2), w.size(-1)
        b = self.bias[:, :, ns-nd:ns, :ns]
        w = w * b - 1e10 * (1 - b)

        # q : (batch, head, q_seq_length, head_features)
        # k : (batch, head, head_features, kv_seq_length)
        # w : (batch, head, q_seq_length, kv_seq_length)
        # v : (batch, head, kv_seq_length, head_features)
        if len_kv is not None:
            _len = torch.arange(k.size(-1), device=k.device)
            _input_msk =  _len[None, :] >= (len_kv)[:, None]
            w = w.masked_fill(_input_msk.unsqueeze(1).unsqueeze(2), -1.0e10) 

        w = nn.Softmax(dim=-1)(w)
        return torch.matmul(w, v)

    def merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        new_x_shape = x.size()[:-2] + (x.size(-2) * x.size(-1),)
        return x.view(*new_x_shape)  # in Tensorflow implem: fct merge_states

    def split_heads(self, x, k=False):
        new_x_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
        x = x.view(*new_x_shape)  # in Tensorflow implem: fct split_states
        if k:
            return x.permute(0, 2, 3, 1).contiguous()  # (batch, head, head_features, seq_length)
        else:
            return x.permute(0, 2, 1, 3).contiguous()  # (batch, head, seq_length, head_features)

    def forward(self, x, history=None, layer_past=None, len_past=None):
        hidden_states = x

        x = self.c_attn(x)
        query, key, value = x.split(self.split_size, dim=2)

        query = self.split_heads(query)
        key = self.split_heads(key, k=True)
        value = self.split_heads(value)

        #_input_msk = None

        len_kv = None

        if layer_past is not None:
            # key : (batch, head, head_features, seq_length)
            # value : (batch, head, seq_length, head_features)
            # layer_past, key : (batch, head, seq_length, head_features)
            if len_past is None:
                past_key, past_value = layer_past[0].transpose(-2, -1), layer_past[1]  # transpose back cf below
                key = torch.cat((past_key, key), dim=-1)
                value = torch.cat((past_value, value), dim=-2)
            else:
                key_seq = key.shape[-1]
                assert key_seq == 1

                _batch = torch.arange(0, key.shape[0], dtype=torch.long, device=key.device)

                past_key, past_value = layer_past[0], layer_past[1]

                past_key[_batch,:,len_past,:] = key.squeeze(-1)
                past_value[_batch,:,len_past,:] = value.squeeze(-2)

                key = past_key.transpose(-2, -1)
                value = past_value

                len_kv = len_past + 1

        present = torch.stack((key.transpose(-2, -1), value))  # transpose to have same shapes for stacking
        a = self._attn(query, key, value, len_kv = len_kv)
        a = self.merge_heads(a)
        a = self.c_proj(a)
        return a, present


class MLP(nn.Module):
    def __init__(self, n_state, config):  # in MLP: n_state=3072 (4 * n_embd)
        super(MLP, self).__init__()
        nx = config.n_embd
        self.c_fc = Conv1D(n_state, nx)
        self.c_proj = Conv1D(nx, n_state)
        self.act = gelu

    def forward(self, x):
        h = self.act(self.c_fc(x))
        h2 = self.c_proj(h)
        return h2


class Block(nn.Module):
    def __init__(self, n_ctx, config, scale=False):
        super(Block, self).__init__()
        nx = config.n_embd
        self.ln_1 = LayerNorm(nx, eps=config.layer_norm_epsilon)
        self.attn = Attention(nx, n_ctx, config, scale)
        self.ln_2 = LayerNorm(nx, eps=config.layer_norm_epsilon)
        self.mlp = MLP(4 * nx, config)

    def forward(self, x, layer_past=None, len_past=None):
        a, present = self.attn(self.ln_1(x), layer_past=layer_past, len_past=len_past)
        x = x + a
        m = self.mlp(self.ln_2(x))
        x = x + m
        return x, present


class GPT2Model(nn.Module):
    def __init__(self, config):
        super(GPT2Model, self).__init__()
        self.n_layer = config.n_layer
        self.n_embd = config.n_embd
        self.n_vocab = config.vocab_size

        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        block = Block(config.n_ctx, config, scale=True)
        self.h = nn.ModuleList([copy.deepcopy(block) for _ in range(config.n_layer)])
        self.ln_f = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

        self.config = config


    def forward(
        self, 
        input_ids, 
        position_ids=None, 
        token_type_ids=None, 
        past=None, 
        len_past=None
    ):
        if past is None:
            past_length = 0
            past = [None] * len(self.h)
        elif len_past is None:
            # equal size for past. []
            past_length = past[0][0].size(-2)

        if position_ids is None and len_past is None:
            position_ids = torch.arange(
                past_length, input_ids.size(-1) + past_length, 
                dtype=torch.long, device=input_ids.device
            )
            position_ids = position_ids.unsqueeze(0).expand_as(input_ids)
        elif len_past is not None:
            position_ids = (len_past).unsqueeze(1) #.long()

        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_ids.size(-1))
        position_ids = position_ids.view(-1, position_ids.size(-1))

        inputs_embeds = self.wte(input_ids)     

        position_embeds = self.wpe(position_ids)

        if token_type_ids is not None:
            token_type_ids = token_type_ids.view(-1, token_type_ids.size(-1))
            token_type_embeds = self.wte(token_type_ids)
        else:
            token_type_embeds = 0
        hidden_states = inputs_embeds + position_embeds + token_type_embeds
        presents = []
        for block, layer_past in zip(self.h, past):
            hidden_states, present = block(hidden_states, layer_past = layer_past, len_past=len_past)
            presents.append(present)
        hidden_states = self.ln_f(hidden_states)
        output_shape = input_shape + (hidden_states.size(-1),)
        return hidden_states.view(*output_shape), presents


class GPT2LMHead(nn.Module):
    def __init__(self, model_embeddings_weights, config):
        super(GPT2LMHead, self).__init__()
        self.n_embd = config.n_embd
        self.set_embeddings_weights(model_embeddings_weights)

    def set_embeddings_weights(self, model_embeddings_weights):
        embed_shape = model_embeddings_weights.shape
        self.decoder = nn.Linear(embed_shape[1], embed_shape[0], bias=False)
        self.decoder.weight = model_embeddings_weights  # Tied weights

    def forward(self, hidden_state):
        # Truncated Language modeling logits (we remove the last token)
        # h_trunc = h[:, :-1].contiguous().view(-1, self.n_embd)
        lm_logits = self.decoder(hidden_state)
        return lm_logits


class GPT2Config(object):
    def __init__(
        self,
        vocab_size_or_config_json_file=50257,
        n_positions=1024,
        n_ctx=1024,
        n_embd=768,
        n_layer=12,
        n_head=12,
        layer_norm_epsilon=1e-5,
        initializer_range=0.02,
        lora_attn_dim=0,
        lora_attn_alpha=128,
        lora_dropout=0.0,
        lora_r_dropout=0.0,
        fix_dropout=0.0,
        bug=None,
    ):
        self.vocab_size = vocab_size_or_config_json_file
        self.n_ctx = n_ctx
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.lora_attn_dim = lora_attn_dim
        self.lora_attn_alpha = lora_attn_alpha
        self.lora_dropout = lora_dropout
        self.lora_r_dropout = lora_r_dropout

        self.fix_dropout = fix_dropout
        self.bug = bug


class GPT2LMModel(nn.Module):
    def __init__(self, config):
        super(GPT2LMModel, self).__init__()
        self.transformer = GPT2Model(config)
        self.lm_head = GPT2LMHead(self.transformer.wte.weight, config)
        self.apply(self._init_weights)

    def set_tied(self):
        """ Make sure we are sharing the embeddings"""
        self.lm_head.set_embeddings_weights(self.transformer.wte.weight)

    def forward(
        self, 
        input_ids, 
        lm_labels=None, 
        lm_mask=None, 
        past=None, 
        len_past=None, 
        label_smooth=0.0,
        is_report_accuracy=False
    ):
        _batch, _len = input_ids.shape
        hidden_states, presents = self.transformer(input_ids, past=past, len_past=len_past)

        # batch, seq, vocab
        lm_logits = self.lm_head(hidden_states)

        if lm_labels is not None:

            if is_report_accuracy:
                _pred_token = torch.argmax(lm_logits, dim=-1)
                _hit = (_pred_token == lm_labels) * lm_mask

                _t1_acc = torch.zeros(_batch, dtype=torch.float, device=input_ids.device)
                _all_acc = torch.zeros(_batch, dtype=torch.float, device=input_ids.device)
                
                for _b in range(0, _batch):
                    for _i in range(0, _len):
                        if lm_mask[_b, _i] >= 1.0:
                            if _hit[_b, _i] > 0:
                                _t1_acc[_b] = 1.0
                            break  

                    _is_succ = True
                    for _i in range(0, _len):
                        if lm_mask[_b, _i] >= 1.0:
                            if _hit[_b, _i] <= 0:
                                _is_succ = False
                                break

                    if _is_succ:
                        _all_acc[_b] = 1.0

                #_t1_acc = _t1_acc * 1.0 / _batch
                #_all_acc = _all_acc * 1.0 / _batch

            if label_smooth > 0.0001:
                logprobs = torch.nn.functional.log_softmax(lm_logits.view(-1, lm_logits.size(-1)), dim=-1)
                nll_loss = -logprobs.gather(dim=-1, index=lm_labels.view(-1).unsqueeze(1))
                nll_loss = nll_loss.squeeze(1)
                smooth_loss = -logprobs.mean(dim=-1)
                loss = (1.0 - label_smooth) * nll_loss + label_smooth * smooth_loss
                loss = loss.view(_batch, _len)
            else:
                loss_fct = nn.CrossEntropyLoss(ignore_index=-1, reduce=False)
                loss = loss_fct(lm_logits.view(-1, lm_logits.size(-1)), lm_labels.view(-1)).view(_batch, _len)

            if lm_mask is None:
                lm_mask = torch.ones(loss.shape, dtype=loss.dtype, device=loss.device)
            loss = loss * lm_mask 

            loss = loss.sum() / (lm_mask.sum() + 0.0001)

            if is_report_accuracy:
                return lm_logits, loss, _t1_acc, _all_acc
            else:
                return lm_logits, loss
        return lm_logits, presents
           
    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def load_weight(self, state_dict):
        if 'model_state_dict' in state_dict:
            state_dict = state_dict['model_state_dict']
    
        state_dict_tmp = copy.deepcopy(state_dict)
        old_keys = []
        new_keys = []
        for key in state_dict_tmp:
            new_key = None
            if key.endswith(".g"):
                new_key = key[:-2] + ".weight"
            elif key.endswith(".b"):
                new_key = key[:-2] + ".bias"
            elif key.endswith(".w"):
                new_key = key[:-2] + ".weight"
            
            if key.startswith("module.transformer."):
                new_key = key[len("module.transformer."):]

            if new_key:
                old_keys.append(key)
                new_keys.append(new_key)

        for old_key, new_key in zip(old_keys, new_keys):
            state_dict[new_key] = state_dict.pop(old_key)
        
        for n, p in self.transformer.named_parameters():
            if n not in state_dict:
                state_dict[n] = p

        self.transformer.load_state_dict(state_dict, strict=False)
        self.set_tied()


# ---- examples/NLG/src/optimizer.py -----------------------------------------------------------------------------

class AdamW(Optimizer):
    """ Implements Adam algorithm with weight decay fix.
    Parameters:
        lr (float): learning rate. Default 1e-3.
        betas (tuple of 2 floats): Adams beta parameters (b1, b2). Default: (0.9, 0.98)
        eps (float): Adams epsilon. Default: 1e-6
        weight_decay (float): Weight decay. Default: 0.0
        correct_bias (bool): can be set to False to avoid correcting bias in Adam (e.g. like in Bert TF repository). Default True.
    """
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0, correct_bias=True):
        if lr < 0.0:
            raise ValueError("Invalid learning rate: {} - should be >= 0.0".format(lr))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter: {} - should be in [0.0, 1.0[".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter: {} - should be in [0.0, 1.0[".format(betas[1]))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {} - should be >= 0.0".format(eps))
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, correct_bias=correct_bias)
        super().__init__(params, defaults)


    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()
        
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam instead")

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state["step"] = 0
                    # Exponential moving average of gradient values
                    state["exp_avg"] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state["exp_avg_sq"] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]

                state["step"] += 1

                # Decay the first and second moment running average coefficient
                # In-place operations to update the averages at the same time
                exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])

                step_size = group["lr"]
                if 'correct_bias' in group and group["correct_bias"]:  # No bias correction for Bert
                    bias_correction1 = 1.0 - beta1 ** state["step"]
                    bias_correction2 = 1.0 - beta2 ** state["step"]
                    step_size = step_size * math.sqrt(bias_correction2) / bias_correction1

                p.data.addcdiv_(-step_size, exp_avg, denom)

                # Just adding the square of the weights to the loss function is *not*
                # the correct way of using L2 regularization/weight decay with Adam,
                # since that will interact with the m and v parameters in strange ways.
                #
                # Instead we want to decay the weights in a manner that doesn't interact
                # with the m/v parameters. This is equivalent to adding the square
                # of the weights to the loss with plain (non-momentum) SGD.
                # Add weight decay at the end (fixed version)
                if group["weight_decay"] > 0.0:
                    p.data.add_(p.data, alpha=-group["lr"] * group["weight_decay"])

        return loss


def get_linear_schedule_with_warmup(
    optimizer, 
    num_warmup_steps, 
    num_training_steps, 
    last_epoch=-1
):
    """ Create a schedule with a learning rate that decreases linearly after
    linearly increasing during a warmup period.
    """
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
    return LambdaLR(optimizer, lr_lambda, last_epoch)


def create_grouped_parameters(model, no_decay_bias): # args):
    if not no_decay_bias:
        optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters()], # if not any(nd in n for nd in no_decay)],
        }]
    else:
        no_decay = ["bias", "layer_norm.weight"]

        optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], 
            "weight_decay": 0.0,
        }]
    return optimizer_grouped_parameters


def create_adam_optimizer_from_args(model, args, grouped_parameters=None):
    if grouped_parameters is None:
        grouped_parameters = create_grouped_parameters(model, args.no_decay_bias)

    optimizer = AdamW(
        grouped_parameters, 
        lr=args.lr, 
        betas=(args.adam_beta1, args.adam_beta2), 
        eps=args.adam_epislon, 
        weight_decay=args.weight_decay, 
        correct_bias=args.correct_bias
    )
    return optimizer


def create_optimizer_scheduler(optimizer, args):
    if args.scheduler == 'linear':
        scheduler = get_linear_schedule_with_warmup(
            optimizer, args.warmup_step, args.max_step, last_epoch=-1
        )
    else:
        # constant leanring rate.
        scheduler = None
    return scheduler


# ---- examples/NLG/src/data_utils.py ----------------------------------------------------------------------------

def padding_tokens(tokens, max_seq_length, pad_token, direct, max_context_length=0):

    if max_context_length == 0:
        max_context_length = max_seq_length

    if len(tokens) > max_context_length:
        if direct > 0:
            pad_tokens = tokens[:max_context_length]
        else:
            pad_tokens = tokens[-max_context_length:]
    else:
        pad_tokens = tokens
    token_len = len(pad_tokens)
    pad_tokens = pad_tokens + [pad_token for _ in range(max_seq_length - token_len)]
    return pad_tokens, token_len


class FT_Dataset(Dataset):
    def __init__(self, ft_file, batch_size, max_seq_length, 
                 max_eval_length=0, joint_lm=False, prefix_len=0, infix_len=0, 
                 prefix_cursor=1000000, infix_cursor=2000000):
        self.ft_file = ft_file
        self.ft_samples = self.read_ft_file(ft_file)
        self.batch_size = batch_size
        self.num_examples = len(self.ft_samples)
        self.max_seq_length = max_seq_length
        self.max_eval_length = max_eval_length
        self.rng = random.Random(911)
        self.joint_lm = joint_lm

        self.num_batches = int((self.num_examples + self.batch_size - 1) / self.batch_size) 

        self.prefix_len = prefix_len
        self.infix_len = infix_len
        self.prefix_cursor = prefix_cursor
        self.infix_cursor = infix_cursor

    def __len__(self):
        return self.num_batches * self.batch_size
        
    def __getitem__(self, item):
        if(item >= self.num_examples):
            item = self.rng.randint(0, self.num_examples - 1)

        example = self.ft_samples[item]
        context = example[0]
        completion = example[1]

        pretokens = [i + self.prefix_cursor for i in range(0, self.prefix_len)] 
        intokens = [i + self.infix_cursor for i in range(0, self.infix_len)] 

        conditions = pretokens + context + intokens 
        _input, _input_len = padding_tokens(conditions + completion, self.max_seq_length, 0, 1)

        pad_targets = [0 for i in range(0, self.prefix_len)] + context + [0 for i in range(0, self.infix_len)] + completion
        _target, _ = padding_tokens(pad_targets[1:], self.max_seq_length, 0, 1)

        if not self.joint_lm:
            _msk = [0.0] * (len(conditions) - 1) + [1.0] * (_input_len - len(conditions))
        else:
            _msk = [1.0] * (_input_len - 1)

        _msk, _ = padding_tokens(_msk, self.max_seq_length, 0.0, 1)
        
        output = {}
        output["id"] = torch.tensor(item, dtype=torch.long)
        
        _query, _query_len = padding_tokens(
            conditions, self.max_seq_length, 0, -1, 
            max_context_length = self.max_seq_length - self.max_eval_length
        )
        output["query"] = torch.tensor(_query, dtype=torch.long)
        output["query_len"] = torch.tensor(_query_len, dtype=torch.long)

        output["input"] = torch.tensor(_input, dtype=torch.long) 
        output["target"] = torch.tensor(_target, dtype=torch.long) 

        output["mask"] = torch.tensor(_msk, dtype=torch.float)
        return output

    def read_ft_file(self, ft_file):
        # the (context, completion) pairs of the synthetic task, given directly (see make_samples)
        return [[context, completion] for context, completion in ft_file]

# ---- examples/NLG/src/gpt2_ft.py -------------------------------------------------------------------------------

class AverageMeter(object):
    """Computes and stores the average and current value
    """
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def optimizer_step(_loss, _optimizer, _model, _schedule, args, is_update=True):
    _loss.backward()

    if is_update:
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(_model.parameters(), args.clip)

        _optimizer.step()        
        _optimizer.zero_grad()

    if _schedule is not None:
        _schedule.step()


def evaluate(model, valid_loader, args):
    model.eval()
    total_loss = 0.

    avg_lm_loss = AverageMeter()

    with torch.no_grad():
        for idx, data in enumerate(valid_loader):
            data = {key: value for key, value in data.items()}

            _input = data['input'].to(args.device)
            _target = data['target'].to(args.device)
            _msk = data['mask'].to(args.device)

            _lm_logits, _loss = model(_input, lm_labels=_target, lm_mask=_msk) 
            loss = _loss.mean() 
            
            avg_lm_loss.update(loss.item())

    return avg_lm_loss.avg, math.exp(avg_lm_loss.avg)




def make_samples(rng, n):
    """(context, completion) pairs: 3-6 slot tokens (10..29) and a separator; the completion starts with the first
    slot's word (id + 20), each next word is three after the previous one (ids 30..49, cyclic), as many words as
    slots, then the end token."""
    samples = []
    for _ in range(n):
        slots = [rng.randint(10, 29) for _ in range(rng.randint(3, 6))]
        words = [30 + (slots[0] - 10 + 3 * j) % 20 for j in range(len(slots))]
        samples.append((slots + [SEP], words + [EOS]))
    return samples


@functools.lru_cache(maxsize=4)
def pretrained_checkpoint(seed, steps=60):
    """Stand-in for ``--init_checkpoint`` (nothing can be downloaded): the transformer weights of a GPT-2 of the same
    configuration without adapters, trained here with Adam on sequences of the same form whose completion is a chain
    of consecutive words (it learns the format and a +1 chain; the fine-tuning asks for a +3 chain)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    base = GPT2LMModel(GPT2Config(vocab_size_or_config_json_file=VOCAB, n_positions=N_POSITIONS, n_ctx=N_POSITIONS,
                                  n_embd=32, n_layer=2, n_head=2))
    opt = torch.optim.Adam(base.parameters(), lr=1e-2)
    for _ in range(steps):
        rows = []
        for _ in range(16):
            n = int(torch.randint(3, 7, (1,), generator=gen))
            slots = torch.randint(10, 30, (n,), generator=gen).tolist()
            first = int(torch.randint(20, (1,), generator=gen))
            words = [30 + (first + j) % 20 for j in range(n)]
            rows.append((slots + [SEP] + words + [EOS] + [0] * 24)[:25])
        x = torch.tensor(rows)
        inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
        _logits, loss = base(inp, lm_labels=tgt, lm_mask=(tgt != 0).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in base.transformer.state_dict().items()}


def _args(seed):
    """The parser's defaults with examples/NLG/README.md's E2E command line (resized, see the module docstring)."""
    return argparse.Namespace(
        platform='local', local_rank=0, rank=0, device=torch.device('cpu'), world_size=1, random_seed=seed,
        lr=0.002, weight_decay=0.01, correct_bias=True, adam_epislon=1e-6, no_decay_bias=False, adam_beta1=0.9,
        adam_beta2=0.999, scheduler='linear', max_step=None, max_epoch=5, warmup_step=10, i_steps='0',
        i_lrs='0.00025', train_batch_size=8, valid_batch_size=4, grad_acc=1, clip=0.0, seq_len=24,
        model_card='gpt2.md', init_checkpoint='pretrained_checkpoints/gpt2-medium-pytorch_model.bin', fp16=False, log_interval=100, eval_interval=2000,
        save_interval=1000, lora_dim=4, lora_alpha=32, obj='clm', lora_dropout=0.1, label_smooth=0.1,
        roll_interval=-1, roll_lr=0.00001, roll_step=100, eval_epoch=1)


def _build(seed, bug=None):
    args = _args(seed)

    torch.manual_seed(args.random_seed)
    random.seed(args.random_seed)

    rng = random.Random(seed)
    train_data = FT_Dataset(
        make_samples(rng, 512), args.train_batch_size, args.seq_len,
        joint_lm=args.obj=='jlm'
    )

    valid_data = FT_Dataset(
        make_samples(rng, 64), args.valid_batch_size, args.seq_len,
    )

    train_loader = DataLoader(
        train_data, batch_size=args.train_batch_size, num_workers=0,
        shuffle=False, pin_memory=False, drop_last=True,
        sampler=torch.utils.data.distributed.DistributedSampler(train_data, num_replicas=1, rank=0, seed=args.random_seed)
    )

    valid_loader = DataLoader(
        valid_data, batch_size=args.valid_batch_size, num_workers=0,
        shuffle=False, pin_memory=False, drop_last=False,
        sampler=torch.utils.data.distributed.DistributedSampler(valid_data, num_replicas=1, rank=0, seed=args.random_seed)
    )

    config = GPT2Config(
        vocab_size_or_config_json_file=VOCAB, n_positions=N_POSITIONS, n_ctx=N_POSITIONS,
        n_embd=32, n_layer=2, n_head=2,
        lora_attn_dim=args.lora_dim,
        lora_attn_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        bug=bug,
    )

    lm_net = GPT2LMModel(config)
    if args.init_checkpoint is not None:
        lm_net.load_weight(dict(pretrained_checkpoint(seed)))  # torch.load(args.init_checkpoint): a fresh dict

    if args.lora_dim > 0 and bug != "lora_not_marked_trainable":
        # (bug: the call left out: only MergedLinear's own weight is frozen, every other base weight trains)
        mark_only_lora_as_trainable(lm_net)
    optimizer = create_adam_optimizer_from_args(lm_net, args)

    if args.max_step is None:
        args.max_step = (args.max_epoch * train_data.num_batches + args.world_size - 1) // args.world_size

    scheduler = create_optimizer_scheduler(optimizer, args)

    state = {"train_step": 0, "epoch": 0, "it": None}

    def next_batch():
        while True:
            if state["it"] is None:  # for epoch in itertools.count(start=1): train_validate(...)
                state["epoch"] += 1
                lm_net.train()
                train_loader.sampler.set_epoch(state["epoch"])
                state["it"] = iter(train_loader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        data = next_batch()
        data = {key: value for key, value in data.items()}

        _input = data['input'].to(args.device)
        _target = data['target'].to(args.device)
        _msk = data['mask'].to(args.device)

        if bug == "lm_mask_not_passed":
            # the mask dropped from the call: the loss also counts the context and every padding position
            _lm_logits, _lm_loss = lm_net(
                _input, lm_labels=_target, label_smooth=args.label_smooth
            )
        else:
            _lm_logits, _lm_loss = lm_net(
                _input, lm_labels=_target, lm_mask=_msk, label_smooth=args.label_smooth
            )

        _lm_loss = _lm_loss.mean()

        state["train_step"] += 1
        is_update = True if state["train_step"] % args.grad_acc == 0 else False
        optimizer_step(
            _lm_loss/(args.grad_acc), optimizer, lm_net, scheduler, args, is_update=is_update
        )
        return _lm_loss.detach()

    def eval_fn(model, batch):
        loss, _ppl = evaluate(model, [{"input": batch["input_ids"], "target": batch["lm_labels"],
                                       "mask": batch["lm_mask"]}], args)
        model.train()
        return loss

    class Batches:
        """One epoch of train_loader, each batch as the keywords of the model call."""

        def __iter__(self):
            for data in DataLoader(train_data, batch_size=args.train_batch_size, drop_last=True):
                batch = {"input_ids": data["input"], "lm_labels": data["target"], "lm_mask": data["mask"]}
                if bug == "lm_mask_not_passed":
                    del batch["lm_mask"]
                yield batch

        def __len__(self):
            return len(train_loader)

    first = next(iter(Batches()))
    frozen = tuple(n for n, _p in lm_net.named_parameters() if 'lora_' not in n)
    return Program(name="lora_gpt2_e2e", model=lm_net, batch=first, loss_fn=lambda outputs, _targets: outputs[1],
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=Batches(), frozen=frozen)


build = functools.partial(_build, bug=None)

BUGS = [
    # mark_only_lora_as_trainable never called (classic): loralib freezes only the adapted layer's own weight, so the
    # embeddings, layer norms, MLPs and output projections of the "frozen" base all train with the adapters.
    Bug("lora_not_marked_trainable", functools.partial(_build, bug="lora_not_marked_trainable"), "step_probe",
        ("transformer.wte.weight",)),
    # both LoRA factors initialized to zero (A as B, classic): the product's gradient is zero for each factor, so the
    # adapters never move and the frozen base is all that is trained.
    Bug("lora_factors_both_zero", functools.partial(_build, bug="lora_factors_both_zero"), "learning_ledger",
        ("GRADIENT",)),
    # lm_mask not passed to the model (classic: the mask not reaching the loss): the context tokens and the padding
    # are trained on, and the loss is no longer the completion's.
    Bug("lm_mask_not_passed", functools.partial(_build, bug="lm_mask_not_passed"), "learning_ledger", ("OBJECTIVE",)),
]
