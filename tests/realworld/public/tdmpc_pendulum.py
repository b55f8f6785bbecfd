# ruff: noqa: PLR0402, UP039
"""TD-MPC (Task-Oriented Latent Dynamics and Model Predictive Control) from nicklashansen/tdmpc: the ``TOLD`` model
(state encoder, latent dynamics, reward head, tanh policy, two LayerNorm Q-functions; orthogonal init with the reward
and Q heads zeroed), learned from prioritized replay of whole episodes by ``TDMPC.update``: a latent rollout over the
horizon with the rho-discounted latent consistency (against the EMA target encoder), reward and TD value losses, the
priority-weighted loss with a ``1 / horizon`` gradient hook, clipped Adam step, then the policy's Q-maximizing update
with Q tracking switched off, and an EMA target every ``update_freq`` steps; actions come from CEM/MPPI planning in
the latent space (``TDMPC.plan``) after uniform seed steps.

Source: https://github.com/nicklashansen/tdmpc
Commit: f4d85eca7419039b71bab2234ffc8aca378dd313
Files: src/algorithm/tdmpc.py, src/train.py (helper.py, env.py's ``ActionRepeatWrapper``, ``set_seed`` and the config
of cfgs/default.yaml with cfgs/tasks/cartpole.yaml in the helper ``_tdmpc_lib.py``)
License: MIT (Copyright (c) 2021 Nicklas Hansen; full text in LICENSES/nicklashansen-tdmpc.txt)
Domain: RL, model-based (latent dynamics model + planning + TD learning)

Kept as written: ``TOLD``, ``TDMPC`` (``estimate_value``, ``plan``, ``update_pi``, ``_td_target``, ``update``), the
helpers (``l1``, ``mse``, ``orthogonal_init``, ``ema``, ``set_requires_grad``, ``TruncatedNormal``, ``enc``,
``mlp``, ``q``, ``RandomShiftsAug`` (a no-op for states), ``Episode``, ``ReplayBuffer``, ``linear_schedule``), the
default config's coefficients (discount 0.99, reward 0.5, value 0.1, consistency 2, rho 0.5, lr 1e-3, per_alpha 0.6,
per_beta 0.4, grad_clip_norm 10, update_freq 2, tau 0.01, min_std 0.05, temperature 0.5, momentum 0.1, the std and
horizon schedules), cartpole's action_repeat 8, and train.py's loop (episodes collected by planning, then
``episode_length`` updates each; ``seed_steps`` updates after the seed episodes).

Deviations from the original:
- dm_control is not available: the task is the numpy ``Pendulum`` of ``_continuous_control.py`` (200 steps, so
  ``episode_length`` 1000/8 -> 200/8 = 25), with ``ActionRepeatWrapper``'s summed rewards (discount 1: the episode
  never ends early); its action is the planner's [-1, 1] times the maximal torque 2, and its reward ``-cost`` is
  mapped to dm_control's [0, 1] range as ``1 + r / 16.3``. The environment is the synthetic data.
- sizes for 2 CPU cores: enc_dim 256 -> 32, mlp_dim 512 -> 32, latent_dim 50 -> 16, batch_size 512 -> 64, horizon
  5 -> 3, iterations 6 -> 2, num_samples 512 -> 32, num_elites 64 -> 8 (mixture_coef 0.05 keeps one policy
  trajectory), seed_steps 5000 -> 50 (two seed episodes), train_steps 500000/8 -> 400, so the buffer holds 16
  episodes;
- the CPU for CUDA (``.cuda()`` calls dropped, ``device`` is cpu); omegaconf's config is a ``SimpleNamespace``;
  the pixel branches (frame stacking, conv encoder) are left out since the task is from states; ``np.random`` is the
  global generator seeded by ``set_seed``; tabs are four spaces;
- ``train_step`` is one ``agent.update(buffer, step)`` of train.py's inner loop, collecting the next episode by
  planning first when the previous episode's updates are done (the self-check runs 80 updates: the losses of the
  first 30 scatter with the prioritized samples' summed rewards before they fall); logging, evaluation, video and
  ``TDMPC``'s save/load methods are left out; ``update`` returns the weighted loss as a tensor beside its metrics;
- the Program's ``model`` is ``TOLDUnroll``, a wrapper around the same ``TOLD`` whose forward is ``update``'s
  prediction lines (its parameters under ``told.``), and its ``loss_fn`` ``update``'s loss lines on a sampled batch
  (``_td_target`` shared);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tdmpc_lib as h
from _api import Bug, Program
from _continuous_control import Pendulum
from _tdmpc_lib import ActionRepeatWrapper, Episode, ReplayBuffer, make_cfg, set_seed

SELF_CHECK_STEPS = 80  # the prioritized samples' reward spread makes the first 30 updates' losses noisy

# ---- src/algorithm/tdmpc.py --------------------------------------------------------------------------------------

class TOLD(nn.Module):
    """Task-Oriented Latent Dynamics (TOLD) model used in TD-MPC."""
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self._encoder = h.enc(cfg)
        self._dynamics = h.mlp(cfg.latent_dim+cfg.action_dim, cfg.mlp_dim, cfg.latent_dim)
        self._reward = h.mlp(cfg.latent_dim+cfg.action_dim, cfg.mlp_dim, 1)
        self._pi = h.mlp(cfg.latent_dim, cfg.mlp_dim, cfg.action_dim)
        self._Q1, self._Q2 = h.q(cfg), h.q(cfg)
        self.apply(h.orthogonal_init)
        for m in [self._reward, self._Q1, self._Q2]:
            m[-1].weight.data.fill_(0)
            m[-1].bias.data.fill_(0)

    def track_q_grad(self, enable=True):
        """Utility function. Enables/disables gradient tracking of Q-networks."""
        for m in [self._Q1, self._Q2]:
            h.set_requires_grad(m, enable)

    def h(self, obs):
        """Encodes an observation into its latent representation (h)."""
        return self._encoder(obs)

    def next(self, z, a):
        """Predicts next latent state (d) and single-step reward (R)."""
        x = torch.cat([z, a], dim=-1)
        return self._dynamics(x), self._reward(x)

    def pi(self, z, std=0):
        """Samples an action from the learned policy (pi)."""
        mu = torch.tanh(self._pi(z))
        if std > 0:
            std = torch.ones_like(mu) * std
            return h.TruncatedNormal(mu, std).sample(clip=0.3)
        return mu

    def Q(self, z, a):
        """Predict state-action value (Q)."""
        x = torch.cat([z, a], dim=-1)
        return self._Q1(x), self._Q2(x)


class TDMPC():
    """Implementation of TD-MPC learning + inference."""
    def __init__(self, cfg, bug=None):
        self.cfg = cfg
        self.device = torch.device('cpu')
        self.std = h.linear_schedule(cfg.std_schedule, 0)
        self.model = TOLD(cfg)
        self.model_target = deepcopy(self.model)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=self.cfg.lr)
        self.pi_optim = torch.optim.Adam(self.model._pi.parameters(), lr=self.cfg.lr)
        self.aug = h.RandomShiftsAug(cfg)
        self.model.eval()
        self.model_target.eval()
        self.bug = bug

    @torch.no_grad()
    def estimate_value(self, z, actions, horizon):
        """Estimate value of a trajectory starting at latent state z and executing given actions."""
        G, discount = 0, 1
        for t in range(horizon):
            z, reward = self.model.next(z, actions[t])
            G += discount * reward
            discount *= self.cfg.discount
        G += discount * torch.min(*self.model.Q(z, self.model.pi(z, self.cfg.min_std)))
        return G

    @torch.no_grad()
    def plan(self, obs, eval_mode=False, step=None, t0=True):
        """Plan next action using TD-MPC inference (CEM/MPPI in the latent space)."""
        # Seed steps
        if step < self.cfg.seed_steps and not eval_mode:
            return torch.empty(self.cfg.action_dim, dtype=torch.float32, device=self.device).uniform_(-1, 1)

        # Sample policy trajectories
        obs = torch.tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0)
        horizon = int(min(self.cfg.horizon, h.linear_schedule(self.cfg.horizon_schedule, step)))
        num_pi_trajs = int(self.cfg.mixture_coef * self.cfg.num_samples)
        if num_pi_trajs > 0:
            pi_actions = torch.empty(horizon, num_pi_trajs, self.cfg.action_dim, device=self.device)
            z = self.model.h(obs).repeat(num_pi_trajs, 1)
            for t in range(horizon):
                pi_actions[t] = self.model.pi(z, self.cfg.min_std)
                z, _ = self.model.next(z, pi_actions[t])

        # Initialize state and parameters
        z = self.model.h(obs).repeat(self.cfg.num_samples+num_pi_trajs, 1)
        mean = torch.zeros(horizon, self.cfg.action_dim, device=self.device)
        std = 2*torch.ones(horizon, self.cfg.action_dim, device=self.device)
        if not t0 and hasattr(self, '_prev_mean'):
            mean[:-1] = self._prev_mean[1:]

        # Iterate CEM
        for _i in range(self.cfg.iterations):
            actions = torch.clamp(mean.unsqueeze(1) + std.unsqueeze(1) * \
                torch.randn(horizon, self.cfg.num_samples, self.cfg.action_dim, device=std.device), -1, 1)
            if num_pi_trajs > 0:
                actions = torch.cat([actions, pi_actions], dim=1)

            # Compute elite actions
            value = self.estimate_value(z, actions, horizon).nan_to_num_(0)
            elite_idxs = torch.topk(value.squeeze(1), self.cfg.num_elites, dim=0).indices
            elite_value, elite_actions = value[elite_idxs], actions[:, elite_idxs]

            # Update parameters
            max_value = elite_value.max(0)[0]
            score = torch.exp(self.cfg.temperature*(elite_value - max_value))
            score /= score.sum(0)
            _mean = torch.sum(score.unsqueeze(0) * elite_actions, dim=1) / (score.sum(0) + 1e-9)
            _std = torch.sqrt(torch.sum(score.unsqueeze(0) * (elite_actions - _mean.unsqueeze(1)) ** 2, dim=1) / (score.sum(0) + 1e-9))
            _std = _std.clamp_(self.std, 2)
            mean, std = self.cfg.momentum * mean + (1 - self.cfg.momentum) * _mean, _std

        # Outputs
        score = score.squeeze(1).cpu().numpy()
        actions = elite_actions[:, np.random.choice(np.arange(score.shape[0]), p=score)]
        self._prev_mean = mean
        mean, std = actions[0], _std[0]
        a = mean
        if not eval_mode:
            a += std * torch.randn(self.cfg.action_dim, device=std.device)
        return a

    def update_pi(self, zs):
        """Update policy using a sequence of latent states."""
        self.pi_optim.zero_grad(set_to_none=True)
        self.model.track_q_grad(False)

        # Loss is a weighted sum of Q-values
        pi_loss = 0
        for t,z in enumerate(zs):
            a = self.model.pi(z, self.cfg.min_std)
            Q = torch.min(*self.model.Q(z, a))
            pi_loss += -Q.mean() * (self.cfg.rho ** t)

        pi_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model._pi.parameters(), self.cfg.grad_clip_norm, error_if_nonfinite=False)
        self.pi_optim.step()
        self.model.track_q_grad(True)
        return pi_loss.item()

    @torch.no_grad()
    def _td_target(self, next_obs, reward):
        """Compute the TD-target from a reward and the observation at the following time step."""
        next_z = self.model.h(next_obs)
        td_target = reward + self.cfg.discount * \
            torch.min(*self.model_target.Q(next_z, self.model.pi(next_z, self.cfg.min_std)))
        return td_target

    def next_obs_at(self, next_obses, t):
        """(port) ``next_obses[t]``, the observation after step t (the index the bug variant shifts)."""
        return next_obses[t + 1] if self.bug == "next_obs_off_by_one" else next_obses[t]

    def update(self, replay_buffer, step):
        """Main update function. Corresponds to one iteration of the TOLD model learning."""
        obs, next_obses, action, reward, idxs, weights = replay_buffer.sample()
        if self.bug != "zero_grad_dropped":
            self.optim.zero_grad(set_to_none=True)
        self.std = h.linear_schedule(self.cfg.std_schedule, step)
        self.model.train()

        # Representation
        z = self.model.h(self.aug(obs))
        zs = [z.detach()]

        consistency_loss, reward_loss, value_loss, priority_loss = 0, 0, 0, 0
        for t in range(self.cfg.horizon):

            # Predictions
            Q1, Q2 = self.model.Q(z, action[t])
            z, reward_pred = self.model.next(z, action[t])
            with torch.no_grad():
                next_obs = self.aug(self.next_obs_at(next_obses, t))
                next_z = self.model_target.h(next_obs)
                td_target = self._td_target(next_obs, reward[t])
            zs.append(z.detach())

            # Losses
            rho = (self.cfg.rho ** t)
            consistency_loss += rho * torch.mean(h.mse(z, next_z), dim=1, keepdim=True)
            reward_loss += rho * h.mse(reward_pred, reward[t])
            value_loss += rho * (h.mse(Q1, td_target) + h.mse(Q2, td_target))
            priority_loss += rho * (h.l1(Q1, td_target) + h.l1(Q2, td_target))

        # Optimize model
        total_loss = self.cfg.consistency_coef * consistency_loss.clamp(max=1e4) + \
                     self.cfg.reward_coef * reward_loss.clamp(max=1e4) + \
                     self.cfg.value_coef * value_loss.clamp(max=1e4)
        weighted_loss = (total_loss.squeeze(1) * weights).mean()
        weighted_loss.register_hook(lambda grad: grad * (1/self.cfg.horizon))
        weighted_loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip_norm, error_if_nonfinite=False)
        self.optim.step()
        replay_buffer.update_priorities(idxs, priority_loss.clamp(max=1e4).detach())

        # Update policy + target network
        pi_loss = self.update_pi(zs)
        if step % self.cfg.update_freq == 0:
            if self.bug == "target_ema_reversed":
                h.ema(self.model_target, self.model, self.cfg.tau)
            else:
                h.ema(self.model, self.model_target, self.cfg.tau)

        self.model.eval()
        return weighted_loss.detach(), {'consistency_loss': float(consistency_loss.mean().item()),
                'reward_loss': float(reward_loss.mean().item()),
                'value_loss': float(value_loss.mean().item()),
                'pi_loss': pi_loss,
                'total_loss': float(total_loss.mean().item()),
                'weighted_loss': float(weighted_loss.mean().item()),
                'grad_norm': float(grad_norm)}


class TOLDUnroll(nn.Module):
    """(port) ``update``'s prediction lines as a module call, for the Program: the same ``TOLD`` (under ``told.``)."""

    def __init__(self, told, horizon):
        super().__init__()
        self.told, self.horizon = told, horizon

    def forward(self, obs, action):
        z = self.told.h(obs)
        preds = []
        for t in range(self.horizon):
            Q1, Q2 = self.told.Q(z, action[t])
            z, reward_pred = self.told.next(z, action[t])
            preds.append((Q1, Q2, z, reward_pred))
        return preds


# ---- src/train.py ----------------------------------------------------------------------------------------------

def train(cfg, env, agent, buffer):
    """train.py's loop; yields the step of each ``agent.update`` to come (the update is the Program's step)."""
    for step in range(0, cfg.train_steps+cfg.episode_length, cfg.episode_length):

        # Collect trajectory
        obs = env.reset()
        episode = Episode(cfg, obs)
        while not episode.done:
            action = agent.plan(obs, step=step, t0=episode.first)
            obs, reward, done, _ = env.step(action.cpu().numpy())
            episode += (obs, action, reward, done)
        assert len(episode) == cfg.episode_length
        buffer += episode

        # Update model
        if step >= cfg.seed_steps:
            num_updates = cfg.seed_steps if step == cfg.seed_steps else cfg.episode_length
            for i in range(num_updates):
                yield step+i


def _build(seed, bug=None):
    cfg = make_cfg()
    cfg.seed = seed
    set_seed(cfg.seed)
    base = Pendulum()
    base.seed(seed)
    env = ActionRepeatWrapper(base, cfg.action_repeat)
    cfg.obs_shape, cfg.action_dim = tuple(base.observation_space.shape), base.action_space.shape[0]
    agent, buffer = TDMPC(cfg, bug=bug), ReplayBuffer(cfg)
    loop = train(cfg, env, agent, buffer)
    state = {"step": next(loop)}  # the seed episodes and the first planned one are collected

    def train_step():
        loss, _ = agent.update(buffer, state["step"])
        state["step"] = next(loop)
        return loss

    obs, next_obses, action, reward, _, weights = buffer.sample()
    batch = ((obs, action), (next_obses, reward, weights))

    def loss_fn(preds, targets):
        """``update``'s loss lines on ``TOLDUnroll``'s predictions for ``batch`` (the gradient hook left out)."""
        next_obses, reward, weights = targets
        consistency_loss, reward_loss, value_loss = 0, 0, 0
        for t, (Q1, Q2, z, reward_pred) in enumerate(preds):
            with torch.no_grad():
                next_obs = agent.aug(agent.next_obs_at(next_obses, t))
                next_z = agent.model_target.h(next_obs)
                td_target = agent._td_target(next_obs, reward[t])
            rho = (cfg.rho ** t)
            consistency_loss += rho * torch.mean(h.mse(z, next_z), dim=1, keepdim=True)
            reward_loss += rho * h.mse(reward_pred, reward[t])
            value_loss += rho * (h.mse(Q1, td_target) + h.mse(Q2, td_target))
        total_loss = cfg.consistency_coef * consistency_loss.clamp(max=1e4) + \
            cfg.reward_coef * reward_loss.clamp(max=1e4) + cfg.value_coef * value_loss.clamp(max=1e4)
        return (total_loss.squeeze(1) * weights).mean()

    return Program(name="tdmpc_pendulum", model=TOLDUnroll(agent.model, cfg.horizon), batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optim, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic off-by-one: the observation after step t + 1 read as the one after step t, so the latent consistency and
    # TD targets belong to the wrong transition.
    Bug("next_obs_off_by_one", functools.partial(_build, bug="next_obs_off_by_one"), "learning_ledger", ("TASK",)),
    # classic: ``ema``'s online and target arguments swapped, so the trained TOLD is pulled back toward a target that
    # never moves. Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("target_ema_reversed", functools.partial(_build, bug="target_ema_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # classic: ``self.optim.zero_grad`` left out of ``update``, so each step applies the sum of all past gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
