# ruff: noqa: PLR0402, RUF059, UP004, UP008
"""MADDPG: multi-agent deep deterministic policy gradient with centralized critics (each agent's critic sees every
agent's observation and action; each agent's policy sees only its own observation), target policies and critics with
Polyak updates, critic clipped to norm 0.5, a 1e-3 penalty on the policy's pre-activation output, rewards normalized
by the buffer's statistics, one update per agent on its own sample, on a cooperative-navigation particle world.

Source: https://github.com/shariqiqbal2810/maddpg-pytorch
Commit: 40388d7c18e4662cf23c826d97e209df9003d86c
Files: ``algorithms/maddpg.py`` (``MADDPG``: ``update``, ``update_all_targets``, ``prep_training``,
``prep_rollouts``, ``init_from_env``), ``utils/agents.py`` (``DDPGAgent``), ``utils/networks.py`` (``MLPNetwork``),
``utils/misc.py`` (``soft_update``, ``hard_update``), ``utils/noise.py`` (``OUNoise``), ``utils/buffer.py``
(``ReplayBuffer``), ``main.py`` (``run``'s rollout and update loop, the argument defaults).
License: MIT (Copyright (c) 2018 Shariq Iqbal; full text in LICENSES/shariqiqbal2810-maddpg-pytorch.txt)
Domain: RL, multi-agent actor-critic (MADDPG)

Kept as written: ``MLPNetwork`` (BatchNorm1d on the inputs with weight 1 / bias 0, two ReLU hidden layers of
``hidden_dim`` 64, a tanh output initialized in [-3e-3, 3e-3] for continuous policies, a linear output for the
critics), ``DDPGAgent`` (policy, critic, hard-copied targets, Adam lr 0.01 for both, OU exploration noise),
``MADDPG.update``'s body (the centralized target ``r + gamma * Q'(o', mu'(o')) * (1 - done)`` over all agents'
target policies, MSE on ``target_value.detach()``, ``clip_grad_norm`` 0.5, the policy loss ``-Q(o, a_i = mu_i(o_i),
a_-i = mu_-i(o_-i))`` plus ``1e-3 * mean(mu_i^2)``), ``update_all_targets`` (tau 0.01), ``ReplayBuffer`` (``push``,
``sample`` with ``norm_rews=True``), and main.py's defaults (gamma 0.95, episode_length 25, continuous actions,
init_noise_scale 0.3, MADDPG for every agent) and loop (``prep_rollouts``, ``maddpg.step(torch_obs,
explore=True)``, push; then ``prep_training``, one ``sample`` + ``update`` per agent, ``update_all_targets``).

Deviations from the original:
- the multi-agent particle environments (OpenAI's ``multiagent`` package, the author's fork) are not available: a
  cooperative-navigation world in the shape of their ``simple_spread`` scenario is written out here in numpy (3
  agents, 3 landmarks, positions in [-1, 1], the particle world's velocity damping 0.25, dt 0.1 and action
  sensitivity 5, the 5-number continuous action ``[no-op, +x, -x, +y, -y]`` as the package reads it; each agent
  observes its velocity, its position, the landmarks' and the other agents' relative positions; the shared reward is
  minus the sum over landmarks of the closest agent's distance, minus 1 per colliding pair; episodes are never
  ``done`` before the 25-step limit). It is not the package's code. The environment is the synthetic data.
- the buffer is filled once at build time by main.py's rollout loop (40 episodes of 25 steps, noise scale 0.3 as
  at the start of exploration); ``train_step`` is one update round of the loop (one ``sample`` + ``update`` per
  agent, then ``update_all_targets``) on that buffer, without the 100 environment steps between rounds, and returns
  agent 0's critic loss (``update`` returns ``vf_loss``; the original returns nothing and logs it).
- sizes for 2 CPU cores: batch_size 1024 -> 256, buffer_length 1e6 -> 1000.
- ``np.random`` is a ``numpy.random.default_rng(seed)`` (the buffer's ``choice``, the OU noise), and
  ``torch.manual_seed(seed)``; ``Variable`` and the CUDA branches are dropped; ``clip_grad_norm`` is written
  ``clip_grad_norm_`` (same function); ``F.tanh`` is ``torch.tanh``. tensorboard logging, saving, the vectorized
  env wrappers and distributed ``average_gradients`` are dropped.
- the critic target's lines of ``update`` are moved, unchanged, into a method ``target_value`` that ``update``
  calls, so the Program's ``loss_fn`` applies the same target.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

MSELoss = torch.nn.MSELoss()


# ---- the cooperative-navigation world (stands in for multiagent-particle-envs' simple_spread) -------------------

class Box:
    def __init__(self, low, high, shape):
        self.low, self.high, self.shape = low, high, shape


class SpreadWorld:
    """(port) 3 agents, 3 landmarks; written here, not the particle-env package's code."""
    n_agents, n_landmarks, dt, damping, sensitivity, size = 3, 3, 0.1, 0.25, 5.0, 0.15

    def __init__(self, rng):
        self.rng = rng
        self.agent_types = ['agent'] * self.n_agents
        obs_dim = 4 + 2 * self.n_landmarks + 2 * (self.n_agents - 1)
        self.observation_space = [Box(-np.inf, np.inf, (obs_dim,)) for _ in range(self.n_agents)]
        self.action_space = [Box(0.0, 1.0, (5,)) for _ in range(self.n_agents)]

    def _obs(self):
        out = []
        for i in range(self.n_agents):
            others = [self.pos[j] - self.pos[i] for j in range(self.n_agents) if j != i]
            out.append(np.concatenate([self.vel[i], self.pos[i]] + [lm - self.pos[i] for lm in self.landmarks] + others))
        return np.array(out)

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, (self.n_agents, 2))
        self.vel = np.zeros((self.n_agents, 2))
        self.landmarks = self.rng.uniform(-1, 1, (self.n_landmarks, 2))
        return self._obs()

    def step(self, actions):
        for i, a in enumerate(actions):
            u = np.array([a[1] - a[2], a[3] - a[4]]) * self.sensitivity
            self.vel[i] = self.vel[i] * (1 - self.damping) + u * self.dt
            self.pos[i] = self.pos[i] + self.vel[i] * self.dt
        dists = np.linalg.norm(self.pos[:, None, :] - self.landmarks[None, :, :], axis=-1)
        rew = -dists.min(0).sum()
        pair = np.linalg.norm(self.pos[:, None, :] - self.pos[None, :, :], axis=-1)
        rew -= float(((pair < 2 * self.size).sum() - self.n_agents) / 2)
        return self._obs(), np.full(self.n_agents, rew), np.zeros(self.n_agents, dtype=bool), {}


# ---- utils/networks.py -------------------------------------------------------------------------------------------

class MLPNetwork(nn.Module):
    """
    MLP network (can be used as value or policy)
    """
    def __init__(self, input_dim, out_dim, hidden_dim=64, nonlin=F.relu,
                 constrain_out=False, norm_in=True, discrete_action=True):
        super(MLPNetwork, self).__init__()

        if norm_in:  # normalize inputs
            self.in_fn = nn.BatchNorm1d(input_dim)
            self.in_fn.weight.data.fill_(1)
            self.in_fn.bias.data.fill_(0)
        else:
            self.in_fn = lambda x: x
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.fc3 = nn.Linear(hidden_dim, out_dim)
        self.nonlin = nonlin
        if constrain_out and not discrete_action:
            # initialize small to prevent saturation
            self.fc3.weight.data.uniform_(-3e-3, 3e-3)
            self.out_fn = torch.tanh
        else:  # logits for discrete action (will softmax later)
            self.out_fn = lambda x: x

    def forward(self, X):
        h1 = self.nonlin(self.fc1(self.in_fn(X)))
        h2 = self.nonlin(self.fc2(h1))
        out = self.out_fn(self.fc3(h2))
        return out


# ---- utils/misc.py, utils/noise.py -------------------------------------------------------------------------------

def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)


def hard_update(target, source):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(param.data)


class OUNoise:
    def __init__(self, action_dimension, scale=0.1, mu=0, theta=0.15, sigma=0.2, rng=None):
        self.action_dimension = action_dimension
        self.scale = scale
        self.mu = mu
        self.theta = theta
        self.sigma = sigma
        self.rng = rng
        self.state = np.ones(self.action_dimension) * self.mu
        self.reset()

    def reset(self):
        self.state = np.ones(self.action_dimension) * self.mu

    def noise(self):
        x = self.state
        dx = self.theta * (self.mu - x) + self.sigma * self.rng.standard_normal(len(x))
        self.state = x + dx
        return self.state * self.scale


# ---- utils/agents.py ---------------------------------------------------------------------------------------------

class DDPGAgent(object):
    def __init__(self, num_in_pol, num_out_pol, num_in_critic, hidden_dim=64,
                 lr=0.01, discrete_action=True, rng=None):
        self.policy = MLPNetwork(num_in_pol, num_out_pol,
                                 hidden_dim=hidden_dim,
                                 constrain_out=True,
                                 discrete_action=discrete_action)
        self.critic = MLPNetwork(num_in_critic, 1,
                                 hidden_dim=hidden_dim,
                                 constrain_out=False)
        self.target_policy = MLPNetwork(num_in_pol, num_out_pol,
                                        hidden_dim=hidden_dim,
                                        constrain_out=True,
                                        discrete_action=discrete_action)
        self.target_critic = MLPNetwork(num_in_critic, 1,
                                        hidden_dim=hidden_dim,
                                        constrain_out=False)
        hard_update(self.target_policy, self.policy)
        hard_update(self.target_critic, self.critic)
        self.policy_optimizer = Adam(self.policy.parameters(), lr=lr)
        self.critic_optimizer = Adam(self.critic.parameters(), lr=lr)
        self.exploration = OUNoise(num_out_pol, rng=rng)
        self.discrete_action = discrete_action

    def reset_noise(self):
        if not self.discrete_action:
            self.exploration.reset()

    def scale_noise(self, scale):
        if self.discrete_action:
            self.exploration = scale
        else:
            self.exploration.scale = scale

    def step(self, obs, explore=False):
        action = self.policy(obs)
        if explore:
            action += torch.Tensor(self.exploration.noise())
        action = action.clamp(-1, 1)
        return action


# ---- algorithms/maddpg.py ----------------------------------------------------------------------------------------

class MADDPG(object):
    def __init__(self, agent_init_params, alg_types,
                 gamma=0.95, tau=0.01, lr=0.01, hidden_dim=64,
                 discrete_action=False, rng=None, bug=None):
        self.nagents = len(alg_types)
        self.alg_types = alg_types
        self.agents = [DDPGAgent(lr=lr, discrete_action=discrete_action,
                                 hidden_dim=hidden_dim, rng=rng,
                                 **params)
                       for params in agent_init_params]
        self.agent_init_params = agent_init_params
        self.gamma = gamma
        self.tau = tau
        self.lr = lr
        self.discrete_action = discrete_action
        self.niter = 0
        self.bug = bug

    @property
    def policies(self):
        return [a.policy for a in self.agents]

    @property
    def target_policies(self):
        return [a.target_policy for a in self.agents]

    def scale_noise(self, scale):
        for a in self.agents:
            a.scale_noise(scale)

    def reset_noise(self):
        for a in self.agents:
            a.reset_noise()

    def step(self, observations, explore=False):
        return [a.step(obs, explore=explore) for a, obs in zip(self.agents,
                                                                 observations)]

    def target_value(self, rews, next_obs, dones, agent_i):
        """(port) the critic target of ``update``, lines as written (shared with the Program's loss_fn)."""
        curr_agent = self.agents[agent_i]
        all_trgt_acs = [pi(nobs) for pi, nobs in zip(self.target_policies,
                                                     next_obs)]
        trgt_vf_in = torch.cat((*next_obs, *all_trgt_acs), dim=1)
        target_value = (rews[agent_i].view(-1, 1) + self.gamma *
                        curr_agent.target_critic(trgt_vf_in) *
                        (1 - dones[agent_i].view(-1, 1)))
        return target_value

    def update(self, sample, agent_i, parallel=False, logger=None):
        obs, acs, rews, next_obs, dones = sample
        curr_agent = self.agents[agent_i]

        curr_agent.critic_optimizer.zero_grad()
        if self.bug == "target_from_current_obs":
            target_value = self.target_value(rews, obs, dones, agent_i)
        else:
            target_value = self.target_value(rews, next_obs, dones, agent_i)

        vf_in = torch.cat((*obs, *acs), dim=1)
        actual_value = curr_agent.critic(vf_in)
        vf_loss = MSELoss(actual_value, target_value.detach())
        vf_loss.backward()
        if self.bug == "clip_after_step":
            curr_agent.critic_optimizer.step()
            torch.nn.utils.clip_grad_norm_(curr_agent.critic.parameters(), 0.5)
        else:
            torch.nn.utils.clip_grad_norm_(curr_agent.critic.parameters(), 0.5)
            curr_agent.critic_optimizer.step()

        curr_agent.policy_optimizer.zero_grad()

        curr_pol_out = curr_agent.policy(obs[agent_i])
        curr_pol_vf_in = curr_pol_out
        all_pol_acs = []
        for i, pi, ob in zip(range(self.nagents), self.policies, obs):
            if i == agent_i:
                all_pol_acs.append(curr_pol_vf_in)
            else:
                all_pol_acs.append(pi(ob))
        vf_in = torch.cat((*obs, *all_pol_acs), dim=1)
        pol_loss = -curr_agent.critic(vf_in).mean()
        pol_loss += (curr_pol_out**2).mean() * 1e-3
        pol_loss.backward()
        torch.nn.utils.clip_grad_norm_(curr_agent.policy.parameters(), 0.5)
        curr_agent.policy_optimizer.step()
        return vf_loss.detach()

    def update_all_targets(self):
        for a in self.agents:
            soft_update(a.target_critic, a.critic, self.tau)
            soft_update(a.target_policy, a.policy, self.tau)
        self.niter += 1

    def prep_training(self, device='cpu'):
        for a in self.agents:
            a.policy.train()
            a.critic.train()
            a.target_policy.train()
            a.target_critic.train()

    def prep_rollouts(self, device='cpu'):
        for a in self.agents:
            a.policy.eval()

    @classmethod
    def init_from_env(cls, env, agent_alg="MADDPG", adversary_alg="MADDPG",
                      gamma=0.95, tau=0.01, lr=0.01, hidden_dim=64, rng=None, bug=None):
        agent_init_params = []
        alg_types = [adversary_alg if atype == 'adversary' else agent_alg for
                     atype in env.agent_types]
        for acsp, obsp, algtype in zip(env.action_space, env.observation_space,
                                       alg_types):
            num_in_pol = obsp.shape[0]
            discrete_action = False
            get_shape = lambda x: x.shape[0]
            num_out_pol = get_shape(acsp)
            num_in_critic = 0
            for oobsp in env.observation_space:
                num_in_critic += oobsp.shape[0]
            for oacsp in env.action_space:
                num_in_critic += get_shape(oacsp)
            agent_init_params.append({'num_in_pol': num_in_pol,
                                      'num_out_pol': num_out_pol,
                                      'num_in_critic': num_in_critic})
        init_dict = {'gamma': gamma, 'tau': tau, 'lr': lr,
                     'hidden_dim': hidden_dim,
                     'alg_types': alg_types,
                     'agent_init_params': agent_init_params,
                     'discrete_action': discrete_action}
        instance = cls(**init_dict, rng=rng, bug=bug)
        instance.init_dict = init_dict
        return instance


# ---- utils/buffer.py ---------------------------------------------------------------------------------------------

class ReplayBuffer(object):
    def __init__(self, max_steps, num_agents, obs_dims, ac_dims, rng=None):
        self.max_steps = max_steps
        self.num_agents = num_agents
        self.obs_buffs = []
        self.ac_buffs = []
        self.rew_buffs = []
        self.next_obs_buffs = []
        self.done_buffs = []
        for odim, adim in zip(obs_dims, ac_dims):
            self.obs_buffs.append(np.zeros((max_steps, odim)))
            self.ac_buffs.append(np.zeros((max_steps, adim)))
            self.rew_buffs.append(np.zeros(max_steps))
            self.next_obs_buffs.append(np.zeros((max_steps, odim)))
            self.done_buffs.append(np.zeros(max_steps))

        self.filled_i = 0  # index of first empty location in buffer (last index when full)
        self.curr_i = 0  # current index to write to (ovewrite oldest data)
        self.rng = rng

    def __len__(self):
        return self.filled_i

    def push(self, observations, actions, rewards, next_observations, dones):
        nentries = observations.shape[0]  # handle multiple parallel environments
        if self.curr_i + nentries > self.max_steps:
            rollover = self.max_steps - self.curr_i # num of indices to roll over
            for agent_i in range(self.num_agents):
                self.obs_buffs[agent_i] = np.roll(self.obs_buffs[agent_i],
                                                  rollover, axis=0)
                self.ac_buffs[agent_i] = np.roll(self.ac_buffs[agent_i],
                                                 rollover, axis=0)
                self.rew_buffs[agent_i] = np.roll(self.rew_buffs[agent_i],
                                                  rollover)
                self.next_obs_buffs[agent_i] = np.roll(
                    self.next_obs_buffs[agent_i], rollover, axis=0)
                self.done_buffs[agent_i] = np.roll(self.done_buffs[agent_i],
                                                   rollover)
            self.curr_i = 0
            self.filled_i = self.max_steps
        for agent_i in range(self.num_agents):
            self.obs_buffs[agent_i][self.curr_i:self.curr_i + nentries] = np.vstack(
                observations[:, agent_i])
            # actions are already batched by agent, so they are indexed differently
            self.ac_buffs[agent_i][self.curr_i:self.curr_i + nentries] = actions[agent_i]
            self.rew_buffs[agent_i][self.curr_i:self.curr_i + nentries] = rewards[:, agent_i]
            self.next_obs_buffs[agent_i][self.curr_i:self.curr_i + nentries] = np.vstack(
                next_observations[:, agent_i])
            self.done_buffs[agent_i][self.curr_i:self.curr_i + nentries] = dones[:, agent_i]
        self.curr_i += nentries
        if self.filled_i < self.max_steps:
            self.filled_i += nentries
        if self.curr_i == self.max_steps:
            self.curr_i = 0

    def sample(self, N, to_gpu=False, norm_rews=True):
        inds = self.rng.choice(np.arange(self.filled_i), size=N,
                               replace=False)
        cast = lambda x: torch.Tensor(x)
        if norm_rews:
            ret_rews = [cast((self.rew_buffs[i][inds] -
                              self.rew_buffs[i][:self.filled_i].mean()) /
                             self.rew_buffs[i][:self.filled_i].std())
                        for i in range(self.num_agents)]
        else:
            ret_rews = [cast(self.rew_buffs[i][inds]) for i in range(self.num_agents)]
        return ([cast(self.obs_buffs[i][inds]) for i in range(self.num_agents)],
                [cast(self.ac_buffs[i][inds]) for i in range(self.num_agents)],
                ret_rews,
                [cast(self.next_obs_buffs[i][inds]) for i in range(self.num_agents)],
                [cast(self.done_buffs[i][inds]) for i in range(self.num_agents)])


# ---- main.py -----------------------------------------------------------------------------------------------------

BATCH_SIZE = 256
BUFFER_LENGTH = 1000
EPISODE_LENGTH = 25
FILL_EPISODES = 40


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env = SpreadWorld(rng)
    maddpg = MADDPG.init_from_env(env, agent_alg="MADDPG", adversary_alg="MADDPG",
                                  tau=0.01, lr=0.01, hidden_dim=64, rng=rng, bug=bug)
    replay_buffer = ReplayBuffer(BUFFER_LENGTH, maddpg.nagents,
                                 [obsp.shape[0] for obsp in env.observation_space],
                                 [acsp.shape[0] for acsp in env.action_space], rng=rng)

    # main.py's rollout loop (one rollout thread), the updates left to train_step
    for ep_i in range(FILL_EPISODES):
        obs = env.reset()[None]
        maddpg.prep_rollouts(device='cpu')
        maddpg.scale_noise(0.3)
        maddpg.reset_noise()
        for et_i in range(EPISODE_LENGTH):
            torch_obs = [torch.Tensor(np.vstack(obs[:, i])) for i in range(maddpg.nagents)]
            with torch.no_grad():
                torch_agent_actions = maddpg.step(torch_obs, explore=True)
            agent_actions = [ac.data.numpy() for ac in torch_agent_actions]
            actions = [[ac[i] for ac in agent_actions] for i in range(1)]
            next_obs, rewards, dones, infos = env.step(actions[0])
            next_obs, rewards, dones = next_obs[None], rewards[None], dones[None]
            replay_buffer.push(obs, agent_actions, rewards, next_obs, dones)
            obs = next_obs

    obs, acs, rews, next_obs, dones = replay_buffer.sample(BATCH_SIZE)
    batch = (torch.cat((*obs, *acs), dim=1), (rews, next_obs, dones))

    def loss_fn(actual_value, targets):
        """update()'s critic loss for agent 0 on its critic's output for ``batch`` (the same lines)."""
        rews, next_obs, dones = targets
        target_value = maddpg.target_value(rews, next_obs, dones, 0)
        return MSELoss(actual_value, target_value.detach())

    def train_step():
        maddpg.prep_training(device='cpu')
        losses = []
        for a_i in range(maddpg.nagents):
            sample = replay_buffer.sample(BATCH_SIZE, to_gpu=False)
            losses.append(maddpg.update(sample, a_i))
        maddpg.update_all_targets()
        maddpg.prep_rollouts(device='cpu')
        return losses[0]

    maddpg.prep_training(device='cpu')
    return Program(name="maddpg_spread", model=maddpg.agents[0].critic, batch=batch, loss_fn=loss_fn,
                   optimizer=maddpg.agents[0].critic_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the critic target built from the observations instead of the next observations (classic copy-paste slip in
    # ``update``): every agent's critic regresses on its own value of the same state.
    Bug("target_from_current_obs", functools.partial(_build, bug="target_from_current_obs"), "learning_ledger",
        ("TASK",)),
    # the critic's gradient clipped after ``critic_optimizer.step()`` (classic): the clip acts on a gradient already
    # applied. Every critic parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
