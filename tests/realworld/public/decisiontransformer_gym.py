# ruff: noqa: C408, F841, PLR0402, RUF059
"""Decision Transformer (the gym/ code of kzl/decision-transformer): offline trajectories cut into windows of K
steps, embedded as interleaved (return-to-go, state, action) tokens with timestep embeddings, a GPT-2 without
positional embeddings, and an action head trained by MSE on the non-padded steps (AdamW, linear warm-up, gradient
clipping at 0.25) -- sequence-model imitation conditioned on returns.

Source: https://github.com/kzl/decision-transformer
Commit: e2d82e68f330c00f763507b3b01d774740bee53f
Files: gym/experiment.py (discount_cumsum, the dataset preparation, get_batch, the model / optimizer / scheduler /
trainer set-up, the argument defaults), gym/decision_transformer/models/decision_transformer.py (DecisionTransformer),
gym/decision_transformer/models/model.py (TrajectoryModel), gym/decision_transformer/models/trajectory_gpt2.py
(Attention, MLP, Block, GPT2Model: HuggingFace's GPT-2 with the positional embeddings removed),
gym/decision_transformer/training/trainer.py (Trainer.train_iteration), gym/decision_transformer/training/
seq_trainer.py (SequenceTrainer.train_step)
License: MIT (Copyright (c) 2021 Decision Transformer Authors; full text in LICENSES/kzl-decision-transformer.txt);
trajectory_gpt2.py carries HuggingFace's Apache-2.0 header (Copyright 2018 The OpenAI Team Authors and HuggingFace
Inc. team; Copyright (c) 2018, NVIDIA CORPORATION), kept above the code copied from it
Domain: imitation learning / offline RL (return-conditioned sequence modelling)

Kept as written: ``DecisionTransformer`` (``transformers.GPT2Config(vocab_size=1, n_embd=hidden_size, **kwargs)``,
the timestep / return / state / action embeddings, ``embed_ln``, the (R, s, a) stacking and the stacked attention
mask, ``predict_action`` = Linear + Tanh read from the state tokens ``x[:, 1]``); trajectory_gpt2.py's forward path
(``Attention`` with the causal ``bias`` buffer, ``masked_bias`` -1e4, scaled scores, the additive padding mask;
``MLP``; pre-LayerNorm ``Block``; ``GPT2Model`` without ``wpe``, embedding dropout, final LayerNorm, the
``_init_weights`` of GPT2PreTrainedModel: normal(0, 0.02), zero biases, unit LayerNorms); experiment.py's defaults
(K 20, batch_size 64, n_head 1, relu, dropout 0.1, learning_rate 1e-4, weight_decay 1e-4, mode normal, pct_traj 1),
its data preparation (state mean / std, sampling trajectories by length, return-to-go by ``discount_cumsum`` with
gamma 1, left padding with zero states, actions -10, done 2, scaled returns, timestep cutoff), ``AdamW``,
``LambdaLR(min((steps + 1) / warmup_steps, 1))``, the loss ``torch.mean((a_hat - a)**2)``; ``SequenceTrainer``'s
``train_step`` (forward on ``rtg[:, :-1]``, predictions and targets masked by ``attention_mask > 0``, zero_grad,
backward, ``clip_grad_norm_(0.25)``, step) and ``train_iteration``'s ``model.train()`` and per-step
``scheduler.step()``.

Deviations from the original:
- data: gym, MuJoCo and D4RL are not installed: the hopper-medium pickle is replaced by 40 trajectories of a 2-D
  point-reaching task written out below in numpy (state: position, velocity, goal; action: a 2-D push in [-1, 1];
  reward: minus the distance to the goal; 60-100 steps), each driven by a proportional controller with its own
  noise level, so the dataset mixes good and poor returns as a "medium" dataset does; max_ep_len 1000 -> 100 and
  the return scale 1000 -> 10 (the values experiment.py uses for its reacher2d task). experiment.py never seeds:
  the build seeds numpy's and ``random``'s global generators (``get_batch`` draws from them) and torch from the seed.
- trajectory_gpt2.py imports transformers 4.5.1 internals that transformers 5 no longer has (``file_utils``,
  ``SequenceSummary``, ``model_parallel_utils``, ``PreTrainedModel`` of that version): only its forward path is
  copied, with ``Conv1D`` and ``ACT2FN`` imported from where transformers 5 keeps them, ``GPT2PreTrainedModel`` reduced
  to its ``_init_weights`` (applied as ``init_weights`` did) and the output returned as
  ``BaseModelOutputWithPastAndCrossAttentions`` without the key/value cache (transformers 5 deprecates the field; the
  model never reads it); ``config.n_ctx`` (gone from GPT2Config) is ``n_positions`` (1024,
  n_ctx's old default). Head pruning, cross-attention, model parallelism, gradient checkpointing and the
  ``output_attentions`` / ``output_hidden_states`` branches (all off) are left out.
- sizes for 2 CPU cores: K 20 -> 10, batch_size 64 -> 16, embed_dim 128 -> 32, n_layer 3 -> 2; warmup_steps 10000
  -> 10 (num_steps_per_iter 10000 -> 10, so the warm-up still spans the first iteration). ``SELF_CHECK_STEPS`` is
  300: each step draws fresh random windows, and the loss's fall shows over a few hundred steps, not 30.
- no GPU (device cpu); wandb logging, printing and the evaluation rollouts (``eval_episodes`` and
  ``DecisionTransformer.get_action``: the gym environment is left out with them) are dropped. ``train_step`` is
  ``Trainer.train_iteration_step``, a port helper holding ``train_iteration``'s loop body (``model.train()``,
  ``SequenceTrainer.train_step``, ``scheduler.step()``) without its timing, evaluation and logs; ``train_step``
  returns the loss as a tensor (the original ``.item()``).
- the Program's batch is one ``get_batch(batch_size)`` drawn at build time; ``loss_fn`` repeats ``train_step``'s
  masking and the MSE on the model's outputs for it.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import transformers
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
from transformers.pytorch_utils import Conv1D

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

#: the action MSE on fresh random windows is noisy step to step; its fall shows over a few hundred steps (~3 s)
SELF_CHECK_STEPS = 300

# experiment.py's defaults, sizes scaled down where the docstring says
VARIANT = dict(env='pointreach', dataset='medium', mode='normal', K=10, pct_traj=1., batch_size=16, model_type='dt',
               embed_dim=32, n_layer=2, n_head=1, activation_function='relu', dropout=0.1, learning_rate=1e-4,
               weight_decay=1e-4, warmup_steps=10, num_eval_episodes=100, max_iters=10, num_steps_per_iter=10,
               device='cpu', log_to_wandb=False)


# ---- gym/decision_transformer/models/trajectory_gpt2.py (forward path) ------------------------------------------
# coding=utf-8
# Copyright 2018 The OpenAI Team Authors and HuggingFace Inc. team.
# Copyright (c) 2018, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

class Attention(nn.Module):
    def __init__(self, nx, n_ctx, config, scale=False, is_cross_attention=False, bug=None):
        super().__init__()

        n_state = nx  # in Attention: n_state=768 (nx=n_embd)
        # [switch nx => n_state from Block to Attention to keep identical to TF implem]
        assert n_state % config.n_head == 0
        self.register_buffer(
            "bias", torch.tril(torch.ones((n_ctx, n_ctx), dtype=torch.uint8)).view(1, 1, n_ctx, n_ctx)
        )
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.n_head = config.n_head
        self.split_size = n_state
        self.scale = scale
        self.is_cross_attention = is_cross_attention
        self.c_attn = Conv1D(3 * n_state, nx)
        self.c_proj = Conv1D(n_state, nx)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.pruned_heads = set()
        self.bug = bug

    def _attn(self, q, k, v, attention_mask=None, head_mask=None, output_attentions=False):
        w = torch.matmul(q, k)
        if self.scale:
            w = w / (float(v.size(-1)) ** 0.5)
        nd, ns = w.size(-2), w.size(-1)

        if not self.is_cross_attention and self.bug != "no_causal_mask":
            # if only "normal" attention layer implements causal mask
            mask = self.bias[:, :, ns - nd: ns, :ns]
            w = torch.where(mask.bool(), w, self.masked_bias.to(w.dtype))

        if attention_mask is not None:
            # Apply the attention mask
            w = w + attention_mask

        w = nn.Softmax(dim=-1)(w)
        w = self.attn_dropout(w)

        # Mask heads if we want to
        if head_mask is not None:
            w = w * head_mask

        outputs = [torch.matmul(w, v)]
        if output_attentions:
            outputs.append(w)
        return outputs

    def merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        new_x_shape = x.size()[:-2] + (x.size(-2) * x.size(-1),)
        return x.view(*new_x_shape)  # in Tensorflow implem: fct merge_states

    def split_heads(self, x, k=False):
        new_x_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
        x = x.view(*new_x_shape)  # in Tensorflow implem: fct split_states
        if k:
            return x.permute(0, 2, 3, 1)  # (batch, head, head_features, seq_length)
        else:
            return x.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def forward(
            self,
            hidden_states,
            layer_past=None,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            use_cache=False,
            output_attentions=False,
    ):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self.split_heads(query)
        key = self.split_heads(key, k=True)
        value = self.split_heads(value)
        if layer_past is not None:
            past_key, past_value = layer_past[0].transpose(-2, -1), layer_past[1]  # transpose back cf below
            key = torch.cat((past_key, key), dim=-1)
            value = torch.cat((past_value, value), dim=-2)

        if use_cache is True:
            present = torch.stack((key.transpose(-2, -1), value))  # transpose to have same shapes for stacking
        else:
            present = (None,)

        attn_outputs = self._attn(query, key, value, attention_mask, head_mask, output_attentions)
        a = attn_outputs[0]

        a = self.merge_heads(a)
        a = self.c_proj(a)
        a = self.resid_dropout(a)

        outputs = [a, present] + attn_outputs[1:]
        return outputs  # a, present, (attentions)


class MLP(nn.Module):
    def __init__(self, n_state, config):  # in MLP: n_state=3072 (4 * n_embd)
        super().__init__()
        nx = config.n_embd
        self.c_fc = Conv1D(n_state, nx)
        self.c_proj = Conv1D(nx, n_state)
        self.act = ACT2FN[config.activation_function]
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x):
        h = self.act(self.c_fc(x))
        h2 = self.c_proj(h)
        return self.dropout(h2)


class Block(nn.Module):
    def __init__(self, n_ctx, config, scale=False, bug=None):
        super().__init__()
        hidden_size = config.n_embd
        inner_dim = config.n_inner if config.n_inner is not None else 4 * hidden_size
        self.ln_1 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.attn = Attention(hidden_size, n_ctx, config, scale, bug=bug)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = MLP(inner_dim, config)

    def forward(
            self,
            hidden_states,
            layer_past=None,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            use_cache=False,
            output_attentions=False,
    ):
        attn_outputs = self.attn(
            self.ln_1(hidden_states),
            layer_past=layer_past,
            attention_mask=attention_mask,
            head_mask=head_mask,
            use_cache=use_cache,
            output_attentions=output_attentions,
        )
        attn_output = attn_outputs[0]  # output_attn: a, present, (attentions)
        outputs = attn_outputs[1:]
        # residual connection
        hidden_states = attn_output + hidden_states

        feed_forward_hidden_states = self.mlp(self.ln_2(hidden_states))
        # residual connection
        hidden_states = hidden_states + feed_forward_hidden_states

        outputs = [hidden_states] + outputs
        return outputs  # hidden_states, present, (attentions, cross_attentions)


class GPT2Model(nn.Module):
    def __init__(self, config, bug=None):
        super().__init__()
        self.config = config

        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        # self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([Block(config.n_positions, config, scale=True, bug=bug) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

        self.apply(self._init_weights)  # (port) PreTrainedModel.init_weights

        # Model parallel
        self.model_parallel = False
        self.device_map = None
        self.use_layers = None

    def _init_weights(self, module):
        """Initialize the weights."""
        if isinstance(module, (nn.Linear, nn.Embedding, Conv1D)):
            # Slightly different from the TF version which uses truncated_normal for initialization
            # cf https://github.com/pytorch/pytorch/pull/5617
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if isinstance(module, (nn.Linear, Conv1D)) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(
            self,
            input_ids=None,
            past_key_values=None,
            attention_mask=None,
            token_type_ids=None,
            position_ids=None,
            head_mask=None,
            inputs_embeds=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            use_cache=None,
            output_attentions=None,
            output_hidden_states=None,
            return_dict=None,
    ):
        use_cache = use_cache if use_cache is not None else self.config.use_cache

        if input_ids is not None and inputs_embeds is not None:
            raise ValueError("You cannot specify both input_ids and inputs_embeds at the same time")
        elif input_ids is not None:
            input_shape = input_ids.size()
            input_ids = input_ids.view(-1, input_shape[-1])
            batch_size = input_ids.shape[0]
        elif inputs_embeds is not None:
            input_shape = inputs_embeds.size()[:-1]
            batch_size = inputs_embeds.shape[0]
        else:
            raise ValueError("You have to specify either input_ids or inputs_embeds")

        if past_key_values is None:
            past_length = 0
            past_key_values = [None] * len(self.h)
        else:
            past_length = past_key_values[0][0].size(-2)

        # Attention mask.
        if attention_mask is not None:
            assert batch_size > 0, "batch_size has to be defined and > 0"
            attention_mask = attention_mask.view(batch_size, -1)
            # We create a 3D attention mask from a 2D tensor mask.
            # Sizes are [batch_size, 1, 1, to_seq_length]
            # So we can broadcast to [batch_size, num_heads, from_seq_length, to_seq_length]
            # this attention mask is more simple than the triangular masking of causal attention
            # used in OpenAI GPT, we just need to prepare the broadcast dimension here.
            attention_mask = attention_mask[:, None, None, :]

            # Since attention_mask is 1.0 for positions we want to attend and 0.0 for
            # masked positions, this operation will create a tensor which is 0.0 for
            # positions we want to attend and -10000.0 for masked positions.
            # Since we are adding it to the raw scores before the softmax, this is
            # effectively the same as removing these entirely.
            attention_mask = attention_mask.to(dtype=self.dtype)  # fp16 compatibility
            attention_mask = (1.0 - attention_mask) * -10000.0

        # Prepare head mask if needed
        head_mask = [None] * self.config.n_layer  # (port) get_head_mask(None, n_layer)

        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        # position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds  # + position_embeds

        if token_type_ids is not None:
            token_type_embeds = self.wte(token_type_ids)
            hidden_states = hidden_states + token_type_embeds

        hidden_states = self.drop(hidden_states)

        output_shape = input_shape + (hidden_states.size(-1),)

        presents = () if use_cache else None
        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):

            if self.use_layers is not None and i >= self.use_layers:
                break

            outputs = block(
                hidden_states,
                layer_past=layer_past,
                attention_mask=attention_mask,
                head_mask=head_mask[i],
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                use_cache=use_cache,
                output_attentions=False,
            )

            hidden_states, present = outputs[:2]
            if use_cache is True:
                presents = presents + (present,)

        hidden_states = self.ln_f(hidden_states)

        hidden_states = hidden_states.view(*output_shape)

        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            hidden_states=None,
            attentions=None,
            cross_attentions=None,
        )


# ---- gym/decision_transformer/models/model.py -------------------------------------------------------------------

class TrajectoryModel(nn.Module):

    def __init__(self, state_dim, act_dim, max_length=None):
        super().__init__()

        self.state_dim = state_dim
        self.act_dim = act_dim
        self.max_length = max_length

    def forward(self, states, actions, rewards, masks=None, attention_mask=None):
        # "masked" tokens or unspecified inputs can be passed in as None
        return None, None, None

    def get_action(self, states, actions, rewards, **kwargs):
        # these will come as tensors on the correct device
        return torch.zeros_like(actions[-1])


# ---- gym/decision_transformer/models/decision_transformer.py ----------------------------------------------------

class DecisionTransformer(TrajectoryModel):

    """
    This model uses GPT to model (Return_1, state_1, action_1, Return_2, state_2, ...)
    """

    def __init__(
            self,
            state_dim,
            act_dim,
            hidden_size,
            max_length=None,
            max_ep_len=4096,
            action_tanh=True,
            bug=None,
            **kwargs
    ):
        super().__init__(state_dim, act_dim, max_length=max_length)

        self.hidden_size = hidden_size
        self.bug = bug
        config = transformers.GPT2Config(
            vocab_size=1,  # doesn't matter -- we don't use the vocab
            n_embd=hidden_size,
            **kwargs
        )

        # note: the only difference between this GPT2Model and the default Huggingface version
        # is that the positional embeddings are removed (since we'll add those ourselves)
        self.transformer = GPT2Model(config, bug=bug)

        self.embed_timestep = nn.Embedding(max_ep_len, hidden_size)
        self.embed_return = torch.nn.Linear(1, hidden_size)
        self.embed_state = torch.nn.Linear(self.state_dim, hidden_size)
        self.embed_action = torch.nn.Linear(self.act_dim, hidden_size)

        self.embed_ln = nn.LayerNorm(hidden_size)

        # note: we don't predict states or returns for the paper
        self.predict_state = torch.nn.Linear(hidden_size, self.state_dim)
        self.predict_action = nn.Sequential(
            *([nn.Linear(hidden_size, self.act_dim)] + ([nn.Tanh()] if action_tanh else []))
        )
        self.predict_return = torch.nn.Linear(hidden_size, 1)

    def forward(self, states, actions, rewards, returns_to_go, timesteps, attention_mask=None):

        batch_size, seq_length = states.shape[0], states.shape[1]

        if attention_mask is None:
            # attention mask for GPT: 1 if can be attended to, 0 if not
            attention_mask = torch.ones((batch_size, seq_length), dtype=torch.long)

        # embed each modality with a different head
        state_embeddings = self.embed_state(states)
        action_embeddings = self.embed_action(actions)
        returns_embeddings = self.embed_return(returns_to_go)
        time_embeddings = self.embed_timestep(timesteps)

        # time embeddings are treated similar to positional embeddings
        state_embeddings = state_embeddings + time_embeddings
        action_embeddings = action_embeddings + time_embeddings
        returns_embeddings = returns_embeddings + time_embeddings

        # this makes the sequence look like (R_1, s_1, a_1, R_2, s_2, a_2, ...)
        # which works nice in an autoregressive sense since states predict actions
        stacked_inputs = torch.stack(
            (returns_embeddings, state_embeddings, action_embeddings), dim=1
        ).permute(0, 2, 1, 3).reshape(batch_size, 3*seq_length, self.hidden_size)
        stacked_inputs = self.embed_ln(stacked_inputs)

        # to make the attention mask fit the stacked inputs, have to stack it as well
        stacked_attention_mask = torch.stack(
            (attention_mask, attention_mask, attention_mask), dim=1
        ).permute(0, 2, 1).reshape(batch_size, 3*seq_length)

        # we feed in the input embeddings (not word indices as in NLP) to the model
        transformer_outputs = self.transformer(
            inputs_embeds=stacked_inputs,
            attention_mask=stacked_attention_mask,
        )
        x = transformer_outputs['last_hidden_state']

        # reshape x so that the second dimension corresponds to the original
        # returns (0), states (1), or actions (2); i.e. x[:,1,t] is the token for s_t
        x = x.reshape(batch_size, seq_length, 3, self.hidden_size).permute(0, 2, 1, 3)

        # get predictions
        return_preds = self.predict_return(x[:,2])  # predict next return given state and action
        state_preds = self.predict_state(x[:,2])    # predict next state given state and action
        if self.bug == "action_from_action_token":
            action_preds = self.predict_action(x[:,2])  # read from the a_t token, which has seen a_t
        else:
            action_preds = self.predict_action(x[:,1])  # predict next action given state

        return state_preds, action_preds, return_preds


# ---- gym/decision_transformer/training/trainer.py, seq_trainer.py -----------------------------------------------

class Trainer:

    def __init__(self, model, optimizer, batch_size, get_batch, loss_fn, scheduler=None, eval_fns=None, bug=None):
        self.model = model
        self.optimizer = optimizer
        self.batch_size = batch_size
        self.get_batch = get_batch
        self.loss_fn = loss_fn
        self.scheduler = scheduler
        self.eval_fns = [] if eval_fns is None else eval_fns
        self.diagnostics = dict()
        self.bug = bug

    def train_iteration_step(self):
        """(port) one iteration of train_iteration's `for _ in range(num_steps)` loop."""
        self.model.train()
        train_loss = self.train_step()
        if self.scheduler is not None:
            self.scheduler.step()
        return train_loss


class SequenceTrainer(Trainer):

    def train_step(self):
        states, actions, rewards, dones, rtg, timesteps, attention_mask = self.get_batch(self.batch_size)
        action_target = torch.clone(actions)

        state_preds, action_preds, reward_preds = self.model.forward(
            states, actions, rewards, rtg[:,:-1], timesteps, attention_mask=attention_mask,
        )

        act_dim = action_preds.shape[2]
        if self.bug == "padding_in_loss":
            # the padded steps (actions -10) are kept in the loss
            action_preds = action_preds.reshape(-1, act_dim)
            action_target = action_target.reshape(-1, act_dim)
        else:
            action_preds = action_preds.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]
            action_target = action_target.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]

        loss = self.loss_fn(
            None, action_preds, None,
            None, action_target, None,
        )

        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), .25)
        self.optimizer.step()

        with torch.no_grad():
            self.diagnostics['training/action_error'] = torch.mean((action_preds-action_target)**2).detach().cpu().item()

        return loss.detach()


# ---- data: point-reaching trajectories (port: no gym / MuJoCo / D4RL) -------------------------------------------

def make_trajectories(rng, n=40, state_dim=6, act_dim=2):
    """A 2-D point pushed toward a goal by a noisy proportional controller; each trajectory has its own noise level."""
    trajectories = []
    for _ in range(n):
        sigma = rng.uniform(0.05, 1.0)
        pos, vel, goal = rng.uniform(-1, 1, 2), np.zeros(2), rng.uniform(-1, 1, 2)
        length = int(rng.integers(60, 101))
        obs, acts, rews = [], [], []
        for _t in range(length):
            obs.append(np.concatenate([pos, vel, goal]))
            a = np.clip(2.0 * (goal - pos) - vel + sigma * rng.standard_normal(2), -1, 1)
            vel = 0.9 * vel + 0.1 * a
            pos = pos + 0.1 * vel
            acts.append(a)
            rews.append(-np.linalg.norm(pos - goal))
        trajectories.append({
            'observations': np.array(obs, dtype=np.float32), 'actions': np.array(acts, dtype=np.float32),
            'rewards': np.array(rews, dtype=np.float32), 'terminals': np.zeros(length, dtype=bool)})
    return trajectories


# ---- gym/experiment.py ------------------------------------------------------------------------------------------

def discount_cumsum(x, gamma):
    discount_cumsum = np.zeros_like(x)
    discount_cumsum[-1] = x[-1]
    for t in reversed(range(x.shape[0]-1)):
        discount_cumsum[t] = x[t] + gamma * discount_cumsum[t+1]
    return discount_cumsum


def _build(seed, bug=None):
    variant = dict(VARIANT)
    np.random.seed(seed)
    random.seed(seed)
    torch.manual_seed(seed)

    device = variant.get('device', 'cuda')

    env_name, dataset = variant['env'], variant['dataset']
    model_type = variant['model_type']

    max_ep_len = 100
    env_targets = [0, -10]  # evaluation conditioning targets (unused: no evaluation rollouts)
    scale = 10.  # normalization for rewards/returns

    state_dim = 6
    act_dim = 2

    # load dataset
    trajectories = make_trajectories(np.random.default_rng(seed), state_dim=state_dim, act_dim=act_dim)

    # save all path information into separate lists
    mode = variant.get('mode', 'normal')
    states, traj_lens, returns = [], [], []
    for path in trajectories:
        if mode == 'delayed':  # delayed: all rewards moved to end of trajectory
            path['rewards'][-1] = path['rewards'].sum()
            path['rewards'][:-1] = 0.
        states.append(path['observations'])
        traj_lens.append(len(path['observations']))
        returns.append(path['rewards'].sum())
    traj_lens, returns = np.array(traj_lens), np.array(returns)

    # used for input normalization
    states = np.concatenate(states, axis=0)
    state_mean, state_std = np.mean(states, axis=0), np.std(states, axis=0) + 1e-6

    num_timesteps = sum(traj_lens)

    K = variant['K']
    batch_size = variant['batch_size']
    num_eval_episodes = variant['num_eval_episodes']
    pct_traj = variant.get('pct_traj', 1.)

    # only train on top pct_traj trajectories (for %BC experiment)
    num_timesteps = max(int(pct_traj*num_timesteps), 1)
    sorted_inds = np.argsort(returns)  # lowest to highest
    num_trajectories = 1
    timesteps = traj_lens[sorted_inds[-1]]
    ind = len(trajectories) - 2
    while ind >= 0 and timesteps + traj_lens[sorted_inds[ind]] <= num_timesteps:
        timesteps += traj_lens[sorted_inds[ind]]
        num_trajectories += 1
        ind -= 1
    sorted_inds = sorted_inds[-num_trajectories:]

    # used to reweight sampling so we sample according to timesteps instead of trajectories
    p_sample = traj_lens[sorted_inds] / sum(traj_lens[sorted_inds])

    def get_batch(batch_size=256, max_len=K):
        batch_inds = np.random.choice(
            np.arange(num_trajectories),
            size=batch_size,
            replace=True,
            p=p_sample,  # reweights so we sample according to timesteps
        )

        s, a, r, d, rtg, timesteps, mask = [], [], [], [], [], [], []
        for i in range(batch_size):
            traj = trajectories[int(sorted_inds[batch_inds[i]])]
            si = random.randint(0, traj['rewards'].shape[0] - 1)

            # get sequences from dataset
            s.append(traj['observations'][si:si + max_len].reshape(1, -1, state_dim))
            a.append(traj['actions'][si:si + max_len].reshape(1, -1, act_dim))
            r.append(traj['rewards'][si:si + max_len].reshape(1, -1, 1))
            if 'terminals' in traj:
                d.append(traj['terminals'][si:si + max_len].reshape(1, -1))
            else:
                d.append(traj['dones'][si:si + max_len].reshape(1, -1))
            timesteps.append(np.arange(si, si + s[-1].shape[1]).reshape(1, -1))
            timesteps[-1][timesteps[-1] >= max_ep_len] = max_ep_len-1  # padding cutoff
            rtg.append(discount_cumsum(traj['rewards'][si:], gamma=1.)[:s[-1].shape[1] + 1].reshape(1, -1, 1))
            if rtg[-1].shape[1] <= s[-1].shape[1]:
                rtg[-1] = np.concatenate([rtg[-1], np.zeros((1, 1, 1))], axis=1)

            # padding and state + reward normalization
            tlen = s[-1].shape[1]
            s[-1] = np.concatenate([np.zeros((1, max_len - tlen, state_dim)), s[-1]], axis=1)
            s[-1] = (s[-1] - state_mean) / state_std
            a[-1] = np.concatenate([np.ones((1, max_len - tlen, act_dim)) * -10., a[-1]], axis=1)
            r[-1] = np.concatenate([np.zeros((1, max_len - tlen, 1)), r[-1]], axis=1)
            d[-1] = np.concatenate([np.ones((1, max_len - tlen)) * 2, d[-1]], axis=1)
            rtg[-1] = np.concatenate([np.zeros((1, max_len - tlen, 1)), rtg[-1]], axis=1) / scale
            timesteps[-1] = np.concatenate([np.zeros((1, max_len - tlen)), timesteps[-1]], axis=1)
            mask.append(np.concatenate([np.zeros((1, max_len - tlen)), np.ones((1, tlen))], axis=1))

        s = torch.from_numpy(np.concatenate(s, axis=0)).to(dtype=torch.float32, device=device)
        a = torch.from_numpy(np.concatenate(a, axis=0)).to(dtype=torch.float32, device=device)
        r = torch.from_numpy(np.concatenate(r, axis=0)).to(dtype=torch.float32, device=device)
        d = torch.from_numpy(np.concatenate(d, axis=0)).to(dtype=torch.long, device=device)
        rtg = torch.from_numpy(np.concatenate(rtg, axis=0)).to(dtype=torch.float32, device=device)
        timesteps = torch.from_numpy(np.concatenate(timesteps, axis=0)).to(dtype=torch.long, device=device)
        mask = torch.from_numpy(np.concatenate(mask, axis=0)).to(device=device)

        return s, a, r, d, rtg, timesteps, mask

    model = DecisionTransformer(
        state_dim=state_dim,
        act_dim=act_dim,
        max_length=K,
        max_ep_len=max_ep_len,
        hidden_size=variant['embed_dim'],
        n_layer=variant['n_layer'],
        n_head=variant['n_head'],
        n_inner=4*variant['embed_dim'],
        activation_function=variant['activation_function'],
        n_positions=1024,
        resid_pdrop=variant['dropout'],
        attn_pdrop=variant['dropout'],
        bug=bug,
    )

    model = model.to(device=device)

    warmup_steps = variant['warmup_steps']
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=variant['learning_rate'],
        weight_decay=variant['weight_decay'],
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda steps: min((steps+1)/warmup_steps, 1)
    )

    trainer = SequenceTrainer(
        model=model,
        optimizer=optimizer,
        batch_size=batch_size,
        get_batch=get_batch,
        scheduler=scheduler,
        loss_fn=lambda s_hat, a_hat, r_hat, s, a, r: torch.mean((a_hat - a)**2),
        bug=bug,
    )

    # the Program's batch: one get_batch draw, and train_step's masked MSE on the model's outputs for it
    states, actions, rewards, dones, rtg, timesteps, attention_mask = get_batch(batch_size)
    batch = ({"states": states, "actions": actions, "rewards": rewards, "returns_to_go": rtg[:, :-1],
              "timesteps": timesteps, "attention_mask": attention_mask}, (torch.clone(actions), attention_mask))

    def loss_fn(outputs, targets):
        state_preds, action_preds, reward_preds = outputs
        action_target, attention_mask = targets
        act_dim = action_preds.shape[2]
        if bug == "padding_in_loss":
            action_preds = action_preds.reshape(-1, act_dim)
            action_target = action_target.reshape(-1, act_dim)
        else:
            action_preds = action_preds.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]
            action_target = action_target.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]
        return torch.mean((action_preds - action_target)**2)

    return Program(name="decisiontransformer_gym", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=trainer.train_iteration_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the action read from the action tokens x[:, 2] instead of the state tokens x[:, 1]: the change proposed in
    # https://github.com/kzl/decision-transformer/issues/5 (the maintainer: x[:, 1] is right, since the a_t token
    # has already seen a_t). Each prediction sees the action it must predict.
    Bug("action_from_action_token", functools.partial(_build, bug="action_from_action_token"), "learning_ledger",
        ("DEPENDENCY",)),
    # the causal mask dropped from the attention, leaving only the padding mask, which does not stop a token from
    # attending to later ones -- the confusion of https://github.com/kzl/decision-transformer/issues/30.
    Bug("no_causal_mask", functools.partial(_build, bug="no_causal_mask"), "learning_ledger", ("DEPENDENCY",)),
    # the attention-mask filter left out of the loss: the left-padded steps (actions -10) are regressed too
    # (classic: padding not ignored).
    Bug("padding_in_loss", functools.partial(_build, bug="padding_in_loss"), "learning_ledger", ("OBJECTIVE",)),
]
