# ruff: noqa: RUF059
"""A minimal Decision Transformer (nikhilbarhate99/min-decision-transformer) trained offline on fixed trajectories:
returns-to-go, states and actions embedded with a learned timestep embedding, interleaved as (R_0, s_0, a_0, R_1, ...),
post-norm GPT blocks with a hand-written causal mask, the action predicted from each state token's output (tanh
head); ``D4RLTrajectoryDataset`` samples a random ``context_len`` window per trajectory (zero-padded with a mask when
the trajectory is shorter), returns-to-go are undiscounted and scaled by ``rtg_scale``, states normalized by the
dataset's statistics; MSE on the unpadded actions, AdamW with a linear warm-up ``LambdaLR`` stepped per update,
gradient clipping at 0.25.

Source: https://github.com/nikhilbarhate99/min-decision-transformer
Commit: d6694248b48c57c84fc7487e6e8017dcca861b02
Files: decision_transformer/model.py, scripts/train.py (``discount_cumsum`` and ``D4RLTrajectoryDataset`` of
decision_transformer/utils.py, and the synthetic trajectories, in the helper ``_mindt_lib.py``)
License: MIT (Copyright (c) 2022 Nikhil Barhate; full text in LICENSES/nikhilbarhate99-min-decision-transformer.txt)
Domain: RL, offline (return-conditioned sequence modelling)

Kept as written: the model, the dataset's windowing, padding, return-to-go and normalization, and train.py's update
(forward, padded positions dropped, MSE, ``zero_grad``, backward, clip 0.25, AdamW step, scheduler step) with its
defaults (rtg_scale 1000, context_len 20, n_heads 1, dropout 0.1, batch_size 64, lr 1e-4, wt_decay 1e-4).

Deviations from the original:
- D4RL's pickled trajectories (``data/download_d4rl_datasets.py``) and MuJoCo are not available: the dataset is 192
  trajectories of the numpy ``ContinuousCartPole`` of ``_continuous_control.py`` under three behaviour policies, a
  third each (like D4RL's mixed datasets): a balancing linear controller with Gaussian action noise 0.3 or 1.0, and
  the same controller with its sign flipped (noise 0.3), whose trajectories fall within about 10 steps and are
  padded; cut at 100 steps; ``D4RLTrajectoryDataset`` takes this list instead of a file path. The trajectories are the
  synthetic data.
- sizes for 2 CPU cores: n_blocks 3 -> 2, embed_dim 128 -> 32, max_timestep 4096 -> 128; warmup_steps 10000 -> 10
  (so the warm-up ends within the self-check's 30 updates instead of after half of the 20000);
- ``pin_memory`` is False and the device is the CPU; python's ``random`` and ``torch`` are seeded from ``seed``;
- ``train_step`` is one update of the inner loop (``num_updates_per_iter``), its lines moved, unchanged, into
  ``prepare`` (batch to device, action target), ``action_loss`` (the Program's ``loss_fn``) and ``make_train_step``; ``evaluate_on_env`` (evaluation episodes
  in the environment), the CSV log and checkpoints are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _mindt_lib import D4RLTrajectoryDataset, make_trajectories

# ---- decision_transformer/model.py -------------------------------------------------------------------------------

class MaskedCausalAttention(nn.Module):
    def __init__(self, h_dim, max_T, n_heads, drop_p, bug=None):
        super().__init__()

        self.n_heads = n_heads
        self.max_T = max_T
        self.bug = bug

        self.q_net = nn.Linear(h_dim, h_dim)
        self.k_net = nn.Linear(h_dim, h_dim)
        self.v_net = nn.Linear(h_dim, h_dim)

        self.proj_net = nn.Linear(h_dim, h_dim)

        self.att_drop = nn.Dropout(drop_p)
        self.proj_drop = nn.Dropout(drop_p)

        ones = torch.ones((max_T, max_T))
        mask = torch.tril(ones).view(1, 1, max_T, max_T)

        # register buffer makes sure mask does not get updated
        # during backpropagation
        self.register_buffer('mask',mask)

    def forward(self, x):
        B, T, C = x.shape # batch size, seq length, h_dim * n_heads

        N, D = self.n_heads, C // self.n_heads # N = num heads, D = attention dim

        # rearrange q, k, v as (B, N, T, D)
        q = self.q_net(x).view(B, T, N, D).transpose(1,2)
        k = self.k_net(x).view(B, T, N, D).transpose(1,2)
        v = self.v_net(x).view(B, T, N, D).transpose(1,2)

        # weights (B, N, T, T)
        weights = q @ k.transpose(2,3) / math.sqrt(D)
        # causal mask applied to weights
        if self.bug == "masked_fill_not_assigned":
            weights.masked_fill(self.mask[...,:T,:T] == 0, float('-inf'))  # out of place, result dropped
        else:
            weights = weights.masked_fill(self.mask[...,:T,:T] == 0, float('-inf'))
        # normalize weights, all -inf -> 0 after softmax
        normalized_weights = F.softmax(weights, dim=-1)

        # attention (B, N, T, D)
        attention = self.att_drop(normalized_weights @ v)

        # gather heads and project (B, N, T, D) -> (B, T, N*D)
        attention = attention.transpose(1, 2).contiguous().view(B,T,N*D)

        out = self.proj_drop(self.proj_net(attention))
        return out


class Block(nn.Module):
    def __init__(self, h_dim, max_T, n_heads, drop_p, bug=None):
        super().__init__()
        self.attention = MaskedCausalAttention(h_dim, max_T, n_heads, drop_p, bug=bug)
        self.mlp = nn.Sequential(
                nn.Linear(h_dim, 4*h_dim),
                nn.GELU(),
                nn.Linear(4*h_dim, h_dim),
                nn.Dropout(drop_p),
            )
        self.ln1 = nn.LayerNorm(h_dim)
        self.ln2 = nn.LayerNorm(h_dim)

    def forward(self, x):
        # Attention -> LayerNorm -> MLP -> LayerNorm
        x = x + self.attention(x) # residual
        x = self.ln1(x)
        x = x + self.mlp(x) # residual
        x = self.ln2(x)
        return x


class DecisionTransformer(nn.Module):
    def __init__(self, state_dim, act_dim, n_blocks, h_dim, context_len,
                 n_heads, drop_p, max_timestep=4096, bug=None):
        super().__init__()

        self.state_dim = state_dim
        self.act_dim = act_dim
        self.h_dim = h_dim

        ### transformer blocks
        input_seq_len = 3 * context_len
        blocks = [Block(h_dim, input_seq_len, n_heads, drop_p, bug=bug) for _ in range(n_blocks)]
        self.transformer = nn.Sequential(*blocks)

        ### projection heads (project to embedding)
        self.embed_ln = nn.LayerNorm(h_dim)
        self.embed_timestep = nn.Embedding(max_timestep, h_dim)
        self.embed_rtg = torch.nn.Linear(1, h_dim)
        self.embed_state = torch.nn.Linear(state_dim, h_dim)

        # continuous actions
        self.embed_action = torch.nn.Linear(act_dim, h_dim)
        use_action_tanh = True # True for continuous actions

        ### prediction heads
        self.predict_rtg = torch.nn.Linear(h_dim, 1)
        self.predict_state = torch.nn.Linear(h_dim, state_dim)
        self.predict_action = nn.Sequential(
            *([nn.Linear(h_dim, act_dim)] + ([nn.Tanh()] if use_action_tanh else []))
        )


    def forward(self, timesteps, states, actions, returns_to_go):

        B, T, _ = states.shape

        time_embeddings = self.embed_timestep(timesteps)

        # time embeddings are treated similar to positional embeddings
        state_embeddings = self.embed_state(states) + time_embeddings
        action_embeddings = self.embed_action(actions) + time_embeddings
        returns_embeddings = self.embed_rtg(returns_to_go) + time_embeddings

        # stack rtg, states and actions and reshape sequence as
        # (r_0, s_0, a_0, r_1, s_1, a_1, r_2, s_2, a_2 ...)
        h = torch.stack(
            (returns_embeddings, state_embeddings, action_embeddings), dim=1
        ).permute(0, 2, 1, 3).reshape(B, 3 * T, self.h_dim)

        h = self.embed_ln(h)

        # transformer and prediction
        h = self.transformer(h)

        # get h reshaped such that its size = (B x 3 x T x h_dim) and
        # h[:, 0, t] is conditioned on the input sequence r_0, s_0, a_0 ... r_t
        # h[:, 1, t] is conditioned on the input sequence r_0, s_0, a_0 ... r_t, s_t
        # h[:, 2, t] is conditioned on the input sequence r_0, s_0, a_0 ... r_t, s_t, a_t
        # that is, for each timestep (t) we have 3 output embeddings from the transformer,
        # each conditioned on all previous timesteps plus
        # the 3 input variables at that timestep (r_t, s_t, a_t) in sequence.
        h = h.reshape(B, T, 3, self.h_dim).permute(0, 2, 1, 3)

        # get predictions
        return_preds = self.predict_rtg(h[:,2])     # predict next rtg given r, s, a
        state_preds = self.predict_state(h[:,2])    # predict next state given r, s, a
        action_preds = self.predict_action(h[:,1])  # predict action given r, s

        return state_preds, action_preds, return_preds


# ---- scripts/train.py --------------------------------------------------------------------------------------------

def prepare(timesteps, states, actions, returns_to_go, traj_mask, device, bug=None):
    """(port) the loop's lines moving a batch to the device and cloning the action target."""
    timesteps = timesteps.to(device)    # B x T
    states = states.to(device)          # B x T x state_dim
    actions = actions.to(device)        # B x T x act_dim
    returns_to_go = returns_to_go.to(device).unsqueeze(dim=-1) # B x T x 1
    traj_mask = traj_mask.to(device)    # B x T
    if bug == "action_target_shifted":  # the next step's action taken as the target
        action_target = torch.roll(actions, -1, dims=1).detach().to(device)
    else:
        action_target = torch.clone(actions).detach().to(device)
    return (timesteps, states, actions, returns_to_go), (action_target, traj_mask)


def action_loss(outputs, targets, act_dim, bug=None):
    """(port) the loop's loss lines: the MSE on the unpadded positions' actions."""
    state_preds, action_preds, return_preds = outputs
    action_target, traj_mask = targets
    # only consider non padded elements
    if bug == "padding_mask_dropped":
        action_preds = action_preds.view(-1, act_dim)
        action_target = action_target.view(-1, act_dim)
    else:
        action_preds = action_preds.view(-1, act_dim)[traj_mask.view(-1,) > 0]
        action_target = action_target.view(-1, act_dim)[traj_mask.view(-1,) > 0]

    return F.mse_loss(action_preds, action_target, reduction='mean')


def make_train_step(model, optimizer, scheduler, traj_data_loader, inputs_and_targets, loss_fn):
    """(port) one update of train.py's inner loop, as a closure over the user's objects."""
    state = {"data_iter": iter(traj_data_loader)}

    def train_step():
        """One update of the inner loop (``for _ in range(num_updates_per_iter)``)."""
        model.train()
        try:
            batch = next(state["data_iter"])
        except StopIteration:
            state["data_iter"] = iter(traj_data_loader)
            batch = next(state["data_iter"])

        (timesteps, states, actions, returns_to_go), targets = inputs_and_targets(*batch)

        outputs = model.forward(
                            timesteps=timesteps,
                            states=states,
                            actions=actions,
                            returns_to_go=returns_to_go
                        )
        action_loss = loss_fn(outputs, targets)

        optimizer.zero_grad()
        action_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        scheduler.step()
        return action_loss.detach()

    return train_step


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    rtg_scale, context_len, n_blocks, embed_dim, n_heads, dropout_p = 1000, 20, 2, 32, 1, 0.1
    batch_size, lr, wt_decay, warmup_steps = 64, 1e-4, 1e-4, 10
    device = torch.device('cpu')

    traj_dataset = D4RLTrajectoryDataset(make_trajectories(seed), context_len, rtg_scale)

    traj_data_loader = DataLoader(
                            traj_dataset,
                            batch_size=batch_size,
                            shuffle=True,
                            pin_memory=False,
                            drop_last=True
                        )

    state_dim, act_dim = 4, 1  # env.observation_space.shape[0], env.action_space.shape[0]

    model = DecisionTransformer(
                state_dim=state_dim,
                act_dim=act_dim,
                n_blocks=n_blocks,
                h_dim=embed_dim,
                context_len=context_len,
                n_heads=n_heads,
                drop_p=dropout_p,
                max_timestep=128,
                bug=bug,
            ).to(device)

    optimizer = torch.optim.AdamW(
                        model.parameters(),
                        lr=lr,
                        weight_decay=wt_decay
                    )

    scheduler = torch.optim.lr_scheduler.LambdaLR(
                            optimizer,
                            lambda steps: min((steps+1)/warmup_steps, 1)
                        )

    inputs_and_targets = functools.partial(prepare, device=device, bug=bug)

    def loss_fn(outputs, targets):
        return action_loss(outputs, targets, act_dim, bug)

    train_step = make_train_step(model, optimizer, scheduler, traj_data_loader, inputs_and_targets, loss_fn)

    batch = inputs_and_targets(*next(iter(DataLoader(traj_dataset, batch_size=batch_size))))
    return Program(name="mindt_offline", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=traj_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the bug the upstream model.py's header names in the notebook it fixes: ``masked_fill`` is out of place, and
    # called without keeping its result the causal mask is never applied, so each action token attends to the future.
    Bug("masked_fill_not_assigned", functools.partial(_build, bug="masked_fill_not_assigned"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the padded positions kept in the action MSE (the ``traj_mask`` selection dropped), so the model is
    # also fit to the zero actions padding short trajectories. (Declared OBJECTIVE at first contact; reviewed after
    # public-31's: the batch's trajectory mask never reaching the loss is what task.mask_unread names.)
    Bug("padding_mask_dropped", functools.partial(_build, bug="padding_mask_dropped"), "learning_ledger",
        ("TASK",), kind="task.mask_unread"),
    # classic off-by-one: the action target rolled one step, so each state token is asked for the next action.
    Bug("action_target_shifted", functools.partial(_build, bug="action_target_shifted"), "learning_ledger",
        ("TASK",)),
]
