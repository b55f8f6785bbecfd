# ruff: noqa: UP004, C408, PIE790, RUF059
"""Soft Actor-Critic as in Denis Yarats' pytorch_sac: a tanh-squashed diagonal Gaussian actor (a
``TransformedDistribution`` with its own ``TanhTransform``), a double-Q critic with a Polyak-averaged target updated
every second step, and a learned temperature (``log_alpha``, its own Adam) driven toward the target entropy ``-|A|``;
trained off-policy from a numpy replay buffer with the time-limit end bootstrapped (``not_done_no_max``).

Source: https://github.com/denisyarats/pytorch_sac
Commit: 81c5b536d3a1c5616b2531e446450df412a064fb
Files: agent/__init__.py (Agent), agent/sac.py (SACAgent), agent/actor.py (TanhTransform, SquashedNormal,
DiagGaussianActor), agent/critic.py (DoubleQCritic), utils.py (soft_update_params, set_seed_everywhere, weight_init,
mlp, to_np, eval_mode), replay_buffer.py (ReplayBuffer), train.py (Workspace.run), config/agent/sac.yaml,
config/train.yaml
License: MIT (Copyright (c) 2019 Denis Yarats; full text in LICENSES/denisyarats-pytorch_sac.txt)
Domain: RL, continuous actor-critic (SAC, double-Q critic, learned temperature)

Kept as written: the actor (trunk ``mlp`` to ``2 * action_dim``, ``tanh``-rescaled log-std in ``log_std_bounds``
[-5, 2], ``SquashedNormal``), the critic (two ``mlp`` Q heads on ``cat([obs, action])``), orthogonal ``weight_init``,
``SACAgent`` with config/agent/sac.yaml's values (discount 0.99, init_temperature 0.1, alpha/actor/critic lr 1e-4 with
betas (0.9, 0.999), actor_update_frequency 1, critic_tau 0.005, critic_target_update_frequency 2,
learnable_temperature true), ``update_critic`` (``min(Q1', Q2') - alpha * log_prob`` on ``rsample``d next actions,
``reward + not_done * discount * target_V``, detached, summed MSE of both heads), ``update_actor_and_alpha`` (actor
loss ``alpha * log_prob - min(Q1, Q2)``, alpha loss ``alpha * (-log_prob - target_entropy)``), ``update``
(``not_done_no_max`` passed to the critic), the ReplayBuffer (``np.random.randint`` sampling), and train.py's loop
body: random actions for ``num_seed_steps``, ``agent.act(obs, sample=True)`` under ``eval_mode`` afterwards, the
update *before* ``env.step``, ``done_no_max = 0 if episode_step + 1 == env._max_episode_steps else done``,
``replay_buffer.add``; ``set_seed_everywhere``.

Deviations from the original:
- the dm_control ``cheetah_run`` task (``dmc2gym``) is replaced by the continuous-force cart-pole written out in
  numpy in ``_continuous_control.py`` (CartPole-v1's equations, force ``10 * a`` for ``a`` in [-1, 1], terminal states
  when the pole falls, 500-step time limit, gym < 0.26 interface); ``make_env`` seeds the environment and its action
  space (dmc2gym's wrapper seeds both).
- sizes for 2 CPU cores: hidden_dim 1024 -> 64 (both networks, hidden_depth 2 kept), batch_size 1024 -> 128,
  num_seed_steps 5000 -> 300 (the random-action phase runs at build time), replay_buffer_capacity 1e6 -> 1e5,
  num_train_steps 1e6 -> unbounded; ``train_step`` runs one iteration of ``run``'s ``while`` loop once updates have
  started (one ``agent.update`` and one environment step) and returns the critic loss that ``update_critic`` logged.
- hydra is not available: ``hydra.utils.instantiate`` is replaced by calling the configured classes with the
  configured values. The Logger (tensorboard, csv) is replaced by a stand-in that keeps the last logged scalars;
  the video recorder, ``evaluate`` every 10000 steps, the timing and printing are dropped; no GPU (device ``cpu``).
- ``update_critic``'s target lines and its loss line are moved, unchanged, into two ``SACAgent`` methods
  (``critic_target_Q``, ``critic_loss``) that ``update_critic`` calls, so the Program's ``loss_fn`` reuses them;
  ``Agent`` is copied from agent/__init__.py; utils.py's dmc2gym/gym imports, ``make_dir``, ``train_mode`` and
  ``MLP`` are left out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import abc
import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import distributions as pyd
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole


# ---------------------------------------------------------------- utils.py
class eval_mode(object):
    def __init__(self, *models):
        self.models = models

    def __enter__(self):
        self.prev_states = []
        for model in self.models:
            self.prev_states.append(model.training)
            model.train(False)

    def __exit__(self, *args):
        for model, state in zip(self.models, self.prev_states):
            model.train(state)
        return False


def soft_update_params(net, target_net, tau):
    for param, target_param in zip(net.parameters(), target_net.parameters()):
        target_param.data.copy_(tau * param.data +
                                (1 - tau) * target_param.data)

def set_seed_everywhere(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    np.random.seed(seed)
    random.seed(seed)


def weight_init(m):
    """Custom weight init for Conv2D and Linear layers."""
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        if hasattr(m.bias, 'data'):
            m.bias.data.fill_(0.0)


def mlp(input_dim, hidden_dim, output_dim, hidden_depth, output_mod=None):
    if hidden_depth == 0:
        mods = [nn.Linear(input_dim, output_dim)]
    else:
        mods = [nn.Linear(input_dim, hidden_dim), nn.ReLU(inplace=True)]
        for i in range(hidden_depth - 1):
            mods += [nn.Linear(hidden_dim, hidden_dim), nn.ReLU(inplace=True)]
        mods.append(nn.Linear(hidden_dim, output_dim))
    if output_mod is not None:
        mods.append(output_mod)
    trunk = nn.Sequential(*mods)
    return trunk

def to_np(t):
    if t is None:
        return None
    elif t.nelement() == 0:
        return np.array([])
    else:
        return t.cpu().detach().numpy()


# ---------------------------------------------------------------- replay_buffer.py
class ReplayBuffer(object):
    """Buffer to store environment transitions."""
    def __init__(self, obs_shape, action_shape, capacity, device):
        self.capacity = capacity
        self.device = device

        # the proprioceptive obs is stored as float32, pixels obs as uint8
        obs_dtype = np.float32 if len(obs_shape) == 1 else np.uint8

        self.obses = np.empty((capacity, *obs_shape), dtype=obs_dtype)
        self.next_obses = np.empty((capacity, *obs_shape), dtype=obs_dtype)
        self.actions = np.empty((capacity, *action_shape), dtype=np.float32)
        self.rewards = np.empty((capacity, 1), dtype=np.float32)
        self.not_dones = np.empty((capacity, 1), dtype=np.float32)
        self.not_dones_no_max = np.empty((capacity, 1), dtype=np.float32)

        self.idx = 0
        self.last_save = 0
        self.full = False

    def __len__(self):
        return self.capacity if self.full else self.idx

    def add(self, obs, action, reward, next_obs, done, done_no_max):
        np.copyto(self.obses[self.idx], obs)
        np.copyto(self.actions[self.idx], action)
        np.copyto(self.rewards[self.idx], reward)
        np.copyto(self.next_obses[self.idx], next_obs)
        np.copyto(self.not_dones[self.idx], not done)
        np.copyto(self.not_dones_no_max[self.idx], not done_no_max)

        self.idx = (self.idx + 1) % self.capacity
        self.full = self.full or self.idx == 0

    def sample(self, batch_size):
        idxs = np.random.randint(0,
                                 self.capacity if self.full else self.idx,
                                 size=batch_size)

        obses = torch.as_tensor(self.obses[idxs], device=self.device).float()
        actions = torch.as_tensor(self.actions[idxs], device=self.device)
        rewards = torch.as_tensor(self.rewards[idxs], device=self.device)
        next_obses = torch.as_tensor(self.next_obses[idxs],
                                     device=self.device).float()
        not_dones = torch.as_tensor(self.not_dones[idxs], device=self.device)
        not_dones_no_max = torch.as_tensor(self.not_dones_no_max[idxs],
                                           device=self.device)

        return obses, actions, rewards, next_obses, not_dones, not_dones_no_max


# ---------------------------------------------------------------- agent/actor.py
class TanhTransform(pyd.transforms.Transform):
    domain = pyd.constraints.real
    codomain = pyd.constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def __init__(self, cache_size=1):
        super().__init__(cache_size=cache_size)

    @staticmethod
    def atanh(x):
        return 0.5 * (x.log1p() - (-x).log1p())

    def __eq__(self, other):
        return isinstance(other, TanhTransform)

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        # We do not clamp to the boundary here as it may degrade the performance of certain algorithms.
        # one should use `cache_size=1` instead
        return self.atanh(y)

    def log_abs_det_jacobian(self, x, y):
        # We use a formula that is more numerically stable, see details in the following link
        # https://github.com/tensorflow/probability/commit/ef6bb176e0ebd1cf6e25c6b5cecdd2428c22963f#diff-e120f70e92e6741bca649f04fcd907b7
        return 2. * (math.log(2.) - x - F.softplus(-2. * x))


class SquashedNormal(pyd.transformed_distribution.TransformedDistribution):
    def __init__(self, loc, scale):
        self.loc = loc
        self.scale = scale

        self.base_dist = pyd.Normal(loc, scale)
        transforms = [TanhTransform()]
        super().__init__(self.base_dist, transforms)

    @property
    def mean(self):
        mu = self.loc
        for tr in self.transforms:
            mu = tr(mu)
        return mu


class DiagGaussianActor(nn.Module):
    """torch.distributions implementation of an diagonal Gaussian policy."""
    def __init__(self, obs_dim, action_dim, hidden_dim, hidden_depth,
                 log_std_bounds):
        super().__init__()

        self.log_std_bounds = log_std_bounds
        self.trunk = mlp(obs_dim, hidden_dim, 2 * action_dim,
                               hidden_depth)

        self.outputs = dict()
        self.apply(weight_init)

    def forward(self, obs):
        mu, log_std = self.trunk(obs).chunk(2, dim=-1)

        # constrain log_std inside [log_std_min, log_std_max]
        log_std = torch.tanh(log_std)
        log_std_min, log_std_max = self.log_std_bounds
        log_std = log_std_min + 0.5 * (log_std_max - log_std_min) * (log_std +
                                                                     1)

        std = log_std.exp()

        self.outputs['mu'] = mu
        self.outputs['std'] = std

        dist = SquashedNormal(mu, std)
        return dist

    def log(self, logger, step):
        for k, v in self.outputs.items():
            logger.log_histogram(f'train_actor/{k}_hist', v, step)

        for i, m in enumerate(self.trunk):
            if type(m) == nn.Linear:
                logger.log_param(f'train_actor/fc{i}', m, step)


# ---------------------------------------------------------------- agent/critic.py
class DoubleQCritic(nn.Module):
    """Critic network, employes double Q-learning."""
    def __init__(self, obs_dim, action_dim, hidden_dim, hidden_depth):
        super().__init__()

        self.Q1 = mlp(obs_dim + action_dim, hidden_dim, 1, hidden_depth)
        self.Q2 = mlp(obs_dim + action_dim, hidden_dim, 1, hidden_depth)

        self.outputs = dict()
        self.apply(weight_init)

    def forward(self, obs, action):
        assert obs.size(0) == action.size(0)

        obs_action = torch.cat([obs, action], dim=-1)
        q1 = self.Q1(obs_action)
        q2 = self.Q2(obs_action)

        self.outputs['q1'] = q1
        self.outputs['q2'] = q2

        return q1, q2

    def log(self, logger, step):
        for k, v in self.outputs.items():
            logger.log_histogram(f'train_critic/{k}_hist', v, step)

        assert len(self.Q1) == len(self.Q2)
        for i, (m1, m2) in enumerate(zip(self.Q1, self.Q2)):
            assert type(m1) == type(m2)
            if type(m1) is nn.Linear:
                logger.log_param(f'train_critic/q1_fc{i}', m1, step)
                logger.log_param(f'train_critic/q2_fc{i}', m2, step)


# ---------------------------------------------------------------- agent/__init__.py
class Agent(object):
    def reset(self):
        """For state-full agents this function performs reseting at the beginning of each episode."""
        pass

    @abc.abstractmethod
    def train(self, training=True):
        """Sets the agent in either training or evaluation mode."""

    @abc.abstractmethod
    def update(self, replay_buffer, logger, step):
        """Main function of the agent that performs learning."""

    @abc.abstractmethod
    def act(self, obs, sample=False):
        """Issues an action given an observation."""


# ---------------------------------------------------------------- agent/sac.py
class SACAgent(Agent):
    """SAC algorithm."""
    def __init__(self, obs_dim, action_dim, action_range, device, critic_cfg,
                 actor_cfg, discount, init_temperature, alpha_lr, alpha_betas,
                 actor_lr, actor_betas, actor_update_frequency, critic_lr,
                 critic_betas, critic_tau, critic_target_update_frequency,
                 batch_size, learnable_temperature, bug=None):
        super().__init__()
        self.bug = bug

        self.action_range = action_range
        self.device = torch.device(device)
        self.discount = discount
        self.critic_tau = critic_tau
        self.actor_update_frequency = actor_update_frequency
        self.critic_target_update_frequency = critic_target_update_frequency
        self.batch_size = batch_size
        self.learnable_temperature = learnable_temperature

        self.critic = DoubleQCritic(**critic_cfg).to(self.device)  # (port) hydra.utils.instantiate(critic_cfg)
        self.critic_target = DoubleQCritic(**critic_cfg).to(
            self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())

        self.actor = DiagGaussianActor(**actor_cfg).to(self.device)  # (port) hydra.utils.instantiate(actor_cfg)

        self.log_alpha = torch.tensor(np.log(init_temperature)).to(self.device)
        self.log_alpha.requires_grad = True
        # set target entropy to -|A|
        self.target_entropy = -action_dim

        # optimizers
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(),
                                                lr=actor_lr,
                                                betas=actor_betas)

        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(),
                                                 lr=critic_lr,
                                                 betas=critic_betas)

        self.log_alpha_optimizer = torch.optim.Adam([self.log_alpha],
                                                    lr=alpha_lr,
                                                    betas=alpha_betas)

        self.train()
        self.critic_target.train()

    def train(self, training=True):
        self.training = training
        self.actor.train(training)
        self.critic.train(training)

    @property
    def alpha(self):
        return self.log_alpha.exp()

    def act(self, obs, sample=False):
        obs = torch.FloatTensor(obs).to(self.device)
        obs = obs.unsqueeze(0)
        dist = self.actor(obs)
        action = dist.sample() if sample else dist.mean
        action = action.clamp(*self.action_range)
        assert action.ndim == 2 and action.shape[0] == 1
        return to_np(action[0])

    def critic_target_Q(self, reward, next_obs, not_done):
        """(port) update_critic's first six lines, shared with the Program's ``loss_fn``."""
        dist = self.actor(next_obs)
        next_action = dist.rsample()
        log_prob = dist.log_prob(next_action).sum(-1, keepdim=True)
        target_Q1, target_Q2 = self.critic_target(next_obs, next_action)
        target_V = torch.min(target_Q1,
                             target_Q2) - self.alpha.detach() * log_prob
        if self.bug == "not_done_dropped":
            # the episode-end mask left out of the soft Bellman target: terminal states bootstrap
            target_Q = reward + (self.discount * target_V)
        else:
            target_Q = reward + (not_done * self.discount * target_V)
        target_Q = target_Q.detach()
        return target_Q

    def critic_loss(self, current_Q1, current_Q2, target_Q):
        """(port) update_critic's loss line, shared with the Program's ``loss_fn``."""
        if self.bug == "q2_loss_on_q1":
            # copy-paste slip: the second head's term repeats the first head's output; Q2 is never fitted
            return F.mse_loss(current_Q1, target_Q) + F.mse_loss(
                current_Q1, target_Q)
        return F.mse_loss(current_Q1, target_Q) + F.mse_loss(
            current_Q2, target_Q)

    def update_critic(self, obs, action, reward, next_obs, not_done, logger,
                      step):
        target_Q = self.critic_target_Q(reward, next_obs, not_done)

        # get current Q estimates
        current_Q1, current_Q2 = self.critic(obs, action)
        critic_loss = self.critic_loss(current_Q1, current_Q2, target_Q)
        logger.log('train_critic/loss', critic_loss, step)

        # Optimize the critic
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        self.critic.log(logger, step)

    def update_actor_and_alpha(self, obs, logger, step):
        dist = self.actor(obs)
        action = dist.rsample()
        log_prob = dist.log_prob(action).sum(-1, keepdim=True)
        actor_Q1, actor_Q2 = self.critic(obs, action)

        actor_Q = torch.min(actor_Q1, actor_Q2)
        actor_loss = (self.alpha.detach() * log_prob - actor_Q).mean()

        logger.log('train_actor/loss', actor_loss, step)
        logger.log('train_actor/target_entropy', self.target_entropy, step)
        logger.log('train_actor/entropy', -log_prob.mean(), step)

        # optimize the actor
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        self.actor.log(logger, step)

        if self.learnable_temperature:
            self.log_alpha_optimizer.zero_grad()
            alpha_loss = (self.alpha *
                          (-log_prob - self.target_entropy).detach()).mean()
            logger.log('train_alpha/loss', alpha_loss, step)
            logger.log('train_alpha/value', self.alpha, step)
            alpha_loss.backward()
            self.log_alpha_optimizer.step()

    def update(self, replay_buffer, logger, step):
        obs, action, reward, next_obs, not_done, not_done_no_max = replay_buffer.sample(
            self.batch_size)

        logger.log('train/batch_reward', reward.mean(), step)

        self.update_critic(obs, action, reward, next_obs, not_done_no_max,
                           logger, step)

        if step % self.actor_update_frequency == 0:
            self.update_actor_and_alpha(obs, logger, step)

        if step % self.critic_target_update_frequency == 0:
            soft_update_params(self.critic, self.critic_target,
                                     self.critic_tau)


# ---------------------------------------------------------------- train.py (Logger stand-in)
class Logger(object):
    """(port) keeps the last value logged under each key; histograms and parameters are not recorded."""
    def __init__(self):
        self.last = {}

    def log(self, key, value, step, n=1):
        self.last[key] = value

    def log_histogram(self, key, histogram, step):
        pass

    def log_param(self, key, param, step):
        pass

    def dump(self, step, save=True):
        pass


# config/train.yaml and config/agent/sac.yaml, sizes cut for 2 CPU cores (see the docstring)
CFG = dict(num_train_steps=None, replay_buffer_capacity=100000, num_seed_steps=300, device="cpu")
AGENT = dict(discount=0.99, init_temperature=0.1, alpha_lr=1e-4, alpha_betas=[0.9, 0.999], actor_lr=1e-4,
             actor_betas=[0.9, 0.999], actor_update_frequency=1, critic_lr=1e-4, critic_betas=[0.9, 0.999],
             critic_tau=0.005, critic_target_update_frequency=2, batch_size=128, learnable_temperature=True)
HIDDEN_DIM, HIDDEN_DEPTH, LOG_STD_BOUNDS = 64, 2, [-5, 2]


def make_env(seed):
    env = ContinuousCartPole()
    env.seed(seed)
    env.action_space.seed(seed)
    assert env.action_space.low.min() >= -1
    assert env.action_space.high.max() <= 1
    return env


def _build(seed, bug=None):
    logger = Logger()
    set_seed_everywhere(seed)
    env = make_env(seed)

    obs_dim = env.observation_space.shape[0]
    action_dim = env.action_space.shape[0]
    action_range = [
        float(env.action_space.low.min()),
        float(env.action_space.high.max())
    ]
    critic_cfg = dict(obs_dim=obs_dim, action_dim=action_dim, hidden_dim=HIDDEN_DIM, hidden_depth=HIDDEN_DEPTH)
    actor_cfg = dict(obs_dim=obs_dim, action_dim=action_dim, hidden_dim=HIDDEN_DIM, hidden_depth=HIDDEN_DEPTH,
                     log_std_bounds=LOG_STD_BOUNDS)
    agent = SACAgent(obs_dim, action_dim, action_range, CFG["device"], critic_cfg, actor_cfg, **AGENT, bug=bug)

    replay_buffer = ReplayBuffer(env.observation_space.shape,
                                 env.action_space.shape,
                                 int(CFG["replay_buffer_capacity"]),
                                 agent.device)

    def run():
        step = 0
        episode, episode_reward, done = 0, 0, True
        while True:
            if done:
                obs = env.reset()
                agent.reset()
                done = False
                episode_reward = 0
                episode_step = 0
                episode += 1

            # sample action for data collection
            if step < CFG["num_seed_steps"]:
                action = env.action_space.sample()
            else:
                with eval_mode(agent):
                    action = agent.act(obs, sample=True)

            # run training update
            updated = False
            if step >= CFG["num_seed_steps"]:
                agent.update(replay_buffer, logger, step)
                updated = True

            next_obs, reward, done, _ = env.step(action)

            # allow infinite bootstrap
            done = float(done)
            done_no_max = 0 if episode_step + 1 == env._max_episode_steps else done
            episode_reward += reward

            replay_buffer.add(obs, action, reward, next_obs, done,
                              done_no_max)

            obs = next_obs
            episode_step += 1
            step += 1

            if updated:
                yield logger.last['train_critic/loss']
            elif step == CFG["num_seed_steps"]:
                yield None  # (port) the build stops here, before the first update

    steps = run()
    while next(steps) is not None:
        pass

    obs, action, reward, next_obs, not_done, not_done_no_max = replay_buffer.sample(agent.batch_size)
    batch = ({"obs": obs, "action": action}, (reward, next_obs, not_done_no_max))

    def loss_fn(outputs, targets):
        """update_critic()'s loss on the critic's outputs for ``batch`` (the same lines)."""
        current_Q1, current_Q2 = outputs
        reward, next_obs, not_done = targets
        target_Q = agent.critic_target_Q(reward, next_obs, not_done)
        return agent.critic_loss(current_Q1, current_Q2, target_Q)

    return Program(name="yaratssac_sac", model=agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic_optimizer, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # the soft Bellman target without ``not_done`` (classic; the same slip reported for other SAC/DDPG ports, e.g.
    # https://github.com/seungeunrho/minimalRL/issues/32): the value after a fallen pole is bootstrapped.
    Bug("not_done_dropped", functools.partial(_build, bug="not_done_dropped"), "learning_ledger", ("TASK",)),
    # classic copy-paste slip in the double-Q loss: ``mse(Q1, target) + mse(Q1, target)``; the Q2 head never
    # receives a gradient while the target's ``min(Q1', Q2')`` still reads its (Polyak-copied) untrained values.
    Bug("q2_loss_on_q1", functools.partial(_build, bug="q2_loss_on_q1"), "reachability", ("Q2",)),
]
