# ruff: noqa: UP004, UP008, PLR0402, B008
"""TD7 (Fujimoto et al., "For SALE: State-Action Representation Learning for Deep Reinforcement Learning",
NeurIPS 2023): TD3 with SALE embeddings (a state encoder and a state-action encoder trained to predict the next
state's embedding, fixed copies feeding actor and critic, AvgL1Norm), LAP prioritized replay with the LAP Huber
loss, value clipping of the target by the range seen so far, and hard target updates every ``target_update_rate``.

Source: https://github.com/sfujim/TD7, commit c1c280de1513f474488061b4cf39642b75dd84bd, files ``TD7.py``
(Hyperparameters, AvgL1Norm, LAP_huber, Actor, Encoder, Critic, Agent), ``buffer.py`` (LAP) and ``main.py``
(``train_online``, the seeding). License: MIT (Copyright (c) 2023 Scott Fujimoto; full text in
LICENSES/sfujim-TD7.txt).

Kept as written: every module and the hyperparameters (discount 0.99, exploration noise 0.1, target
policy noise 0.2 clipped at 0.5, policy_freq 2, target_update_rate 250, alpha 0.4, min_priority 1, ELU in
encoder and critic, ReLU in the actor, Adam 3e-4 for all three); ``Agent.train`` (encoder MSE to the next state's
embedding under ``no_grad``, the critic's target from the fixed target encoder and target actor with clipped noise,
``min`` over the two heads, clamped to ``[min_target, max_target]``, ``LAP_huber`` of ``|Q - Q_target|``, the
priority write-back, the delayed actor update ``-Q.mean()``, the hard copies every ``target_update_rate`` steps with
``reset_max_priority`` and the new value-clipping range); ``select_action``; the LAP buffer (actions normalized by
max_action, new transitions at ``max_priority``, cumsum + ``searchsorted`` sampling); main.py's seeding and
``train_online``'s loop body (random actions until training is allowed, ``select_action`` after, ``done`` zero at the
time limit, ``replay_buffer.add``, training allowed from the first episode end after ``timesteps_before_training``).

Deviations:
- gym's MuJoCo HalfCheetah-v4 is replaced by the Pendulum written out in numpy in ``_continuous_control.py``
  (Pendulum-v1's equations, the gym < 0.26 interface main.py calls, 200-step limit); the environment is the
  synthetic data.
- main.py runs with ``--no-use_checkpoints`` (one of its two documented modes): ``RL_agent.train()`` after every
  environment step instead of in batches at episode ends by ``maybe_train_and_checkpoint`` (kept, not called).
- sizes for 2 CPU cores: timesteps_before_training 25e3 -> 1000 (the random-action phase runs at build time),
  max_timesteps 5e6 -> unbounded (``train_step`` runs one iteration of the ``for t`` loop once training is allowed),
  batch_size 256 -> 128, zs_dim and the encoder / critic / actor hidden widths 256 -> 128. The buffer's 1e6 rows stay (numpy zeros: untouched rows are not allocated).
- ``Agent.train`` returns ``critic_loss`` (the original returns nothing) so the step has a loss to report.
- no GPU (``device`` is the CPU); ``LAP.load_D4RL`` and the offline path, evaluation, printing and ``np.save`` are
  dropped.
- the Program's model is the critic (with its optimizer), its batch a replay sample with the fixed encoder's
  embeddings, its ``loss_fn`` train()'s critic loss on the critic's outputs (the same lines).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

# ---------------------------------------------------------------- buffer.py

class LAP(object):
    def __init__(
        self,
        state_dim,
        action_dim,
        device,
        max_size=1e6,
        batch_size=256,
        max_action=1,
        normalize_actions=True,
        prioritized=True
    ):
    
        max_size = int(max_size)
        self.max_size = max_size
        self.ptr = 0
        self.size = 0

        self.device = device
        self.batch_size = batch_size

        self.state = np.zeros((max_size, state_dim))
        self.action = np.zeros((max_size, action_dim))
        self.next_state = np.zeros((max_size, state_dim))
        self.reward = np.zeros((max_size, 1))
        self.not_done = np.zeros((max_size, 1))

        self.prioritized = prioritized
        if prioritized:
            self.priority = torch.zeros(max_size, device=device)
            self.max_priority = 1

        self.normalize_actions = max_action if normalize_actions else 1

    
    def add(self, state, action, next_state, reward, done):
        self.state[self.ptr] = state
        self.action[self.ptr] = action/self.normalize_actions
        self.next_state[self.ptr] = next_state
        self.reward[self.ptr] = reward
        self.not_done[self.ptr] = 1. - done
        
        if self.prioritized:
            self.priority[self.ptr] = self.max_priority

        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)


    def sample(self):
        if self.prioritized:
            csum = torch.cumsum(self.priority[:self.size], 0)
            val = torch.rand(size=(self.batch_size,), device=self.device)*csum[-1]
            self.ind = torch.searchsorted(csum, val).cpu().data.numpy()
        else:
            self.ind = np.random.randint(0, self.size, size=self.batch_size)

        return (
            torch.tensor(self.state[self.ind], dtype=torch.float, device=self.device),
            torch.tensor(self.action[self.ind], dtype=torch.float, device=self.device),
            torch.tensor(self.next_state[self.ind], dtype=torch.float, device=self.device),
            torch.tensor(self.reward[self.ind], dtype=torch.float, device=self.device),
            torch.tensor(self.not_done[self.ind], dtype=torch.float, device=self.device)
        )


    def update_priority(self, priority):
        self.priority[self.ind] = priority.reshape(-1).detach()
        self.max_priority = max(float(priority.max()), self.max_priority)


    def reset_max_priority(self):
        self.max_priority = float(self.priority[:self.size].max())


@dataclass
class Hyperparameters:
    # Generic
    batch_size: int = 128  # 256
    buffer_size: int = 1e6
    discount: float = 0.99
    target_update_rate: int = 250
    exploration_noise: float = 0.1
    
    # TD3
    target_policy_noise: float = 0.2
    noise_clip: float = 0.5
    policy_freq: int = 2
    
    # LAP
    alpha: float = 0.4
    min_priority: float = 1
    
    # TD3+BC
    lmbda: float = 0.1
    
    # Checkpointing
    max_eps_when_checkpointing: int = 20
    steps_before_checkpointing: int = 75e4 
    reset_weight: float = 0.9
    
    # Encoder Model
    zs_dim: int = 128  # 256
    enc_hdim: int = 128  # 256
    enc_activ: Callable = F.elu
    encoder_lr: float = 3e-4
    
    # Critic Model
    critic_hdim: int = 128  # 256
    critic_activ: Callable = F.elu
    critic_lr: float = 3e-4
    
    # Actor Model
    actor_hdim: int = 128  # 256
    actor_activ: Callable = F.relu
    actor_lr: float = 3e-4


def AvgL1Norm(x, eps=1e-8):
    return x/x.abs().mean(-1,keepdim=True).clamp(min=eps)


def LAP_huber(x, min_priority=1):
    return torch.where(x < min_priority, 0.5 * x.pow(2), min_priority * x).sum(1).mean()


class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, zs_dim=256, hdim=256, activ=F.relu):
        super(Actor, self).__init__()

        self.activ = activ

        self.l0 = nn.Linear(state_dim, hdim)
        self.l1 = nn.Linear(zs_dim + hdim, hdim)
        self.l2 = nn.Linear(hdim, hdim)
        self.l3 = nn.Linear(hdim, action_dim)
        

    def forward(self, state, zs):
        a = AvgL1Norm(self.l0(state))
        a = torch.cat([a, zs], 1)
        a = self.activ(self.l1(a))
        a = self.activ(self.l2(a))
        return torch.tanh(self.l3(a))


class Encoder(nn.Module):
    def __init__(self, state_dim, action_dim, zs_dim=256, hdim=256, activ=F.elu):
        super(Encoder, self).__init__()

        self.activ = activ

        # state encoder
        self.zs1 = nn.Linear(state_dim, hdim)
        self.zs2 = nn.Linear(hdim, hdim)
        self.zs3 = nn.Linear(hdim, zs_dim)
        
        # state-action encoder
        self.zsa1 = nn.Linear(zs_dim + action_dim, hdim)
        self.zsa2 = nn.Linear(hdim, hdim)
        self.zsa3 = nn.Linear(hdim, zs_dim)
    

    def zs(self, state):
        zs = self.activ(self.zs1(state))
        zs = self.activ(self.zs2(zs))
        zs = AvgL1Norm(self.zs3(zs))
        return zs


    def zsa(self, zs, action):
        zsa = self.activ(self.zsa1(torch.cat([zs, action], 1)))
        zsa = self.activ(self.zsa2(zsa))
        zsa = self.zsa3(zsa)
        return zsa


class Critic(nn.Module):
    def __init__(self, state_dim, action_dim, zs_dim=256, hdim=256, activ=F.elu):
        super(Critic, self).__init__()

        self.activ = activ
        
        self.q01 = nn.Linear(state_dim + action_dim, hdim)
        self.q1 = nn.Linear(2*zs_dim + hdim, hdim)
        self.q2 = nn.Linear(hdim, hdim)
        self.q3 = nn.Linear(hdim, 1)

        self.q02 = nn.Linear(state_dim + action_dim, hdim)
        self.q4 = nn.Linear(2*zs_dim + hdim, hdim)
        self.q5 = nn.Linear(hdim, hdim)
        self.q6 = nn.Linear(hdim, 1)


    def forward(self, state, action, zsa, zs):
        sa = torch.cat([state, action], 1)
        embeddings = torch.cat([zsa, zs], 1)

        q1 = AvgL1Norm(self.q01(sa))
        q1 = torch.cat([q1, embeddings], 1)
        q1 = self.activ(self.q1(q1))
        q1 = self.activ(self.q2(q1))
        q1 = self.q3(q1)

        q2 = AvgL1Norm(self.q02(sa))
        q2 = torch.cat([q2, embeddings], 1)
        q2 = self.activ(self.q4(q2))
        q2 = self.activ(self.q5(q2))
        q2 = self.q6(q2)
        return torch.cat([q1, q2], 1)


class Agent(object):
    def __init__(self, state_dim, action_dim, max_action, offline=False, hp=Hyperparameters(), bug=None):
        # Changing hyperparameters example: hp=Hyperparameters(batch_size=128)

        self.device = torch.device("cpu")
        self.bug = bug
        self.hp = hp

        self.actor = Actor(state_dim, action_dim, hp.zs_dim, hp.actor_hdim, hp.actor_activ).to(self.device)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=hp.actor_lr)
        self.actor_target = copy.deepcopy(self.actor)

        self.critic = Critic(state_dim, action_dim, hp.zs_dim, hp.critic_hdim, hp.critic_activ).to(self.device)
        if bug == "critic_optimizer_over_actor":
            self.critic_optimizer = torch.optim.Adam(self.actor.parameters(), lr=hp.critic_lr)
        else:
            self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=hp.critic_lr)
        self.critic_target = copy.deepcopy(self.critic)

        self.encoder = Encoder(state_dim, action_dim, hp.zs_dim, hp.enc_hdim, hp.enc_activ).to(self.device)
        self.encoder_optimizer = torch.optim.Adam(self.encoder.parameters(), lr=hp.encoder_lr)
        self.fixed_encoder = copy.deepcopy(self.encoder)
        self.fixed_encoder_target = copy.deepcopy(self.encoder)

        self.checkpoint_actor = copy.deepcopy(self.actor)
        self.checkpoint_encoder = copy.deepcopy(self.encoder)

        self.replay_buffer = LAP(state_dim, action_dim, self.device, hp.buffer_size, hp.batch_size, 
            max_action, normalize_actions=True, prioritized=True)

        self.max_action = max_action
        self.offline = offline

        self.training_steps = 0

        # Checkpointing tracked values
        self.eps_since_update = 0
        self.timesteps_since_update = 0
        self.max_eps_before_update = 1
        self.min_return = 1e8
        self.best_min_return = -1e8

        # Value clipping tracked values
        self.max = -1e8
        self.min = 1e8
        self.max_target = 0
        self.min_target = 0


    def select_action(self, state, use_checkpoint=False, use_exploration=True):
        with torch.no_grad():
            state = torch.tensor(state.reshape(1,-1), dtype=torch.float, device=self.device)

            if use_checkpoint: 
                zs = self.checkpoint_encoder.zs(state)
                action = self.checkpoint_actor(state, zs) 
            else: 
                zs = self.fixed_encoder.zs(state)
                action = self.actor(state, zs) 
            
            if use_exploration: 
                action = action + torch.randn_like(action) * self.hp.exploration_noise

            return action.clamp(-1,1).cpu().data.numpy().flatten() * self.max_action


    def train(self):
        self.training_steps += 1

        state, action, next_state, reward, not_done = self.replay_buffer.sample()

        #########################
        # Update Encoder
        #########################
        with torch.no_grad():
            next_zs = self.encoder.zs(next_state)

        zs = self.encoder.zs(state)
        pred_zs = self.encoder.zsa(zs, action)
        encoder_loss = F.mse_loss(pred_zs, next_zs)

        self.encoder_optimizer.zero_grad()
        encoder_loss.backward()
        self.encoder_optimizer.step()

        #########################
        # Update Critic
        #########################
        with torch.no_grad():
            fixed_target_zs = self.fixed_encoder_target.zs(next_state)

            noise = (torch.randn_like(action) * self.hp.target_policy_noise).clamp(-self.hp.noise_clip, self.hp.noise_clip)
            next_action = (self.actor_target(next_state, fixed_target_zs) + noise).clamp(-1,1)
            
            fixed_target_zsa = self.fixed_encoder_target.zsa(fixed_target_zs, next_action)

            if self.bug == "target_min_over_batch":
                Q_target = self.critic_target(next_state, next_action, fixed_target_zsa, fixed_target_zs).min(0,keepdim=True)[0]
            else:
                Q_target = self.critic_target(next_state, next_action, fixed_target_zsa, fixed_target_zs).min(1,keepdim=True)[0]
            Q_target = reward + not_done * self.hp.discount * Q_target.clamp(self.min_target, self.max_target)

            self.max = max(self.max, float(Q_target.max()))
            self.min = min(self.min, float(Q_target.min()))

            fixed_zs = self.fixed_encoder.zs(state)
            fixed_zsa = self.fixed_encoder.zsa(fixed_zs, action)

        Q = self.critic(state, action, fixed_zsa, fixed_zs)
        td_loss = (Q - Q_target).abs()
        critic_loss = LAP_huber(td_loss)

        if self.bug != "critic_zero_grad_dropped":
            self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        
        #########################
        # Update LAP
        #########################
        priority = td_loss.max(1)[0].clamp(min=self.hp.min_priority).pow(self.hp.alpha)
        self.replay_buffer.update_priority(priority)

        #########################
        # Update Actor
        #########################
        if self.training_steps % self.hp.policy_freq == 0:
            actor = self.actor(state, fixed_zs)
            fixed_zsa = self.fixed_encoder.zsa(fixed_zs, actor)
            Q = self.critic(state, actor, fixed_zsa, fixed_zs)

            actor_loss = -Q.mean() 
            if self.offline:
                actor_loss = actor_loss + self.hp.lmbda * Q.abs().mean().detach() * F.mse_loss(actor, action)

            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()

        #########################
        # Update Iteration
        #########################
        if self.training_steps % self.hp.target_update_rate == 0:
            self.actor_target.load_state_dict(self.actor.state_dict())
            self.critic_target.load_state_dict(self.critic.state_dict())
            self.fixed_encoder_target.load_state_dict(self.fixed_encoder.state_dict())
            self.fixed_encoder.load_state_dict(self.encoder.state_dict())
            
            self.replay_buffer.reset_max_priority()

            self.max_target = self.max
            self.min_target = self.min

        return critic_loss


    # If using checkpoints: run when each episode terminates
    def maybe_train_and_checkpoint(self, ep_timesteps, ep_return):
        self.eps_since_update += 1
        self.timesteps_since_update += ep_timesteps

        self.min_return = min(self.min_return, ep_return)

        # End evaluation of current policy early
        if self.min_return < self.best_min_return:
            self.train_and_reset()

        # Update checkpoint
        elif self.eps_since_update == self.max_eps_before_update:
            self.best_min_return = self.min_return
            self.checkpoint_actor.load_state_dict(self.actor.state_dict())
            self.checkpoint_encoder.load_state_dict(self.fixed_encoder.state_dict())
            
            self.train_and_reset()


    # Batch training
    def train_and_reset(self):
        for _ in range(self.timesteps_since_update):
            if self.training_steps == self.hp.steps_before_checkpointing:
                self.best_min_return *= self.hp.reset_weight
                self.max_eps_before_update = self.hp.max_eps_when_checkpointing
            
            self.train()

        self.eps_since_update = 0
        self.timesteps_since_update = 0
        self.min_return = 1e8

# ---------------------------------------------------------------- main.py

def _build(seed, bug=None):
    args = types.SimpleNamespace(seed=seed, use_checkpoints=False, timesteps_before_training=1000)

    env = Pendulum()

    env.seed(args.seed)
    env.action_space.seed(args.seed)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    state_dim = env.observation_space.shape[0]
    action_dim = env.action_space.shape[0]
    max_action = float(env.action_space.high[0])

    RL_agent = Agent(state_dim, action_dim, max_action, False, bug=bug)
    status = {"allow_train": False}

    def train_online():
        allow_train = False

        state, ep_finished = env.reset(), False
        ep_total_reward, ep_timesteps, ep_num = 0, 0, 1

        t = 0
        while True:
            if allow_train:
                action = RL_agent.select_action(np.array(state))
            else:
                action = env.action_space.sample()

            next_state, reward, ep_finished, _ = env.step(action)

            ep_total_reward += reward
            ep_timesteps += 1

            done = float(ep_finished) if ep_timesteps < env._max_episode_steps else 0
            RL_agent.replay_buffer.add(state, action, next_state, reward, done)

            state = next_state

            loss = None
            if allow_train and not args.use_checkpoints:
                loss = RL_agent.train()

            if ep_finished:
                if allow_train and args.use_checkpoints:
                    RL_agent.maybe_train_and_checkpoint(ep_timesteps, ep_total_reward)

                if t >= args.timesteps_before_training:
                    allow_train = True
                    status["allow_train"] = True

                state, done = env.reset(), False
                ep_total_reward, ep_timesteps = 0, 0
                ep_num += 1
            t += 1
            yield loss

    steps = train_online()
    while not status["allow_train"]:
        next(steps)

    buf = RL_agent.replay_buffer
    rs = np.random.RandomState(seed)  # (port) the evidence batch is drawn without touching the loop's generators
    ind = rs.randint(buf.size, size=RL_agent.hp.batch_size)
    state, action, next_state, reward, not_done = (torch.tensor(a[ind], dtype=torch.float) for a in (
        buf.state, buf.action, buf.next_state, buf.reward, buf.not_done))
    with torch.no_grad():
        fixed_zs = RL_agent.fixed_encoder.zs(state)
        fixed_zsa = RL_agent.fixed_encoder.zsa(fixed_zs, action)
    batch = ({"state": state, "action": action, "zsa": fixed_zsa, "zs": fixed_zs}, (next_state, reward, not_done))

    def loss_fn(Q, targets):
        """train()'s critic loss on the critic's outputs for ``batch`` (the same lines)."""
        next_state, reward, not_done = targets
        agent, hp = RL_agent, RL_agent.hp
        with torch.no_grad():
            fixed_target_zs = agent.fixed_encoder_target.zs(next_state)
            noise = (torch.randn_like(action) * hp.target_policy_noise).clamp(-hp.noise_clip, hp.noise_clip)
            next_action = (agent.actor_target(next_state, fixed_target_zs) + noise).clamp(-1,1)
            fixed_target_zsa = agent.fixed_encoder_target.zsa(fixed_target_zs, next_action)
            Q_target = agent.critic_target(next_state, next_action, fixed_target_zsa, fixed_target_zs)
            Q_target = Q_target.min(0 if bug == "target_min_over_batch" else 1, keepdim=True)[0]
            Q_target = reward + not_done * hp.discount * Q_target.clamp(agent.min_target, agent.max_target)
        return LAP_huber((Q - Q_target).abs())

    return Program(name="td7_pendulum", model=RL_agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=RL_agent.critic_optimizer, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic axis slip: the clipped double-Q minimum taken over the batch (dim 0) instead of over the two critic
    # heads (dim 1): every transition's target bootstraps from the smallest value of any next state in the batch.
    Bug("target_min_over_batch", functools.partial(_build, bug="target_min_over_batch"), "learning_ledger",
        ("TASK",)),
    # classic copy-paste slip: the critic's Adam built over the actor's parameters: the critic is never stepped
    # (and the actor gets a second optimizer fed by the critic loss, which gives it no gradient).
    Bug("critic_optimizer_over_actor", functools.partial(_build, bug="critic_optimizer_over_actor"),
        "four_structures", ("q01.weight",)),
    # classic: self.critic_optimizer.zero_grad() left out: the critic's gradients pile up across updates.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
