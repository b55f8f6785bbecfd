# ruff: noqa: UP004, C408, PLR0402, RUF046, RUF059
"""PPO as Khrylx/PyTorch-RL's ``examples/ppo_gym.py`` trains it on a continuous-action task: a Gaussian MLP policy
(tanh 128-128, state-independent log-std) and a separate MLP value net, each with its own Adam (lr 3e-4); samples are
collected with a running ``ZFilter`` on the states until ``min_batch_size`` steps; ``estimate_advantages`` runs GAE
(gamma 0.99, tau 0.95) backwards over the batch with the episode masks, returns are ``values + advantages`` and the
advantages are standardized; then 10 epochs of shuffled 64-sample minibatches of ``ppo_step``: one value step (MSE to
the returns plus ``l2_reg`` 1e-3 times the squared weights) and one clipped-surrogate policy step (clip 0.2,
``clip_grad_norm_`` 40).

Source: https://github.com/Khrylx/PyTorch-RL
Commit: 72069237b4d86bcb9675b899ea94228019a4f003
Files: examples/ppo_gym.py (arguments, models, optimizers, ``update_params``, ``main_loop``), core/ppo.py
(``ppo_step``), core/common.py (``estimate_advantages``), core/agent.py (``collect_samples``, ``Agent``),
models/mlp_policy.py (Policy), models/mlp_critic.py (Value), utils/math.py (``normal_log_density``), utils/torch.py
(``to_device``, ``tensor``, ``LongTensor``), utils/replay_memory.py (Memory), utils/zfilter.py (RunningStat, ZFilter)
License: MIT (Copyright (c) 2020 Ye Yuan; full text in LICENSES/Khrylx-PyTorch-RL.txt)
Domain: RL, policy gradient (PPO-Clip with GAE, separate value network)

Kept as written: Policy, Value, ``normal_log_density``, RunningStat / ZFilter (``clip=5`` on the states), Memory,
``collect_samples``'s episode loop (``policy.select_action``, ``mask = 0 if done else 1``, ``memory.push``),
``estimate_advantages``, ``ppo_step``, ``update_params`` (``no_grad`` values and fixed log-probs, ``optim_epochs``
10, ``optim_batch_size`` 64, ``np.random.shuffle`` permutation), ppo_gym.py's defaults (log_std 0, gamma 0.99, tau
0.95, l2_reg 1e-3, learning_rate 3e-4, clip_epsilon 0.2) and seeding (``np.random.seed``, ``torch.manual_seed``,
``env.seed``), float64 models and tensors.

Deviations from the original:
- gym's MuJoCo Hopper-v2 is replaced by the continuous-force cart-pole written out in numpy in
  ``_continuous_control.py`` (CartPole-v1's equations, force ``10 * clip(a, -1, 1)``, terminal states when the pole
  falls, 500-step limit, gym < 0.26 interface).
- ``torch.set_default_dtype(torch.float64)`` is process-wide; instead the two networks are moved to float64
  (``.to(dtype)``) and ``estimate_advantages``'s ``tensor_type(n, 1)`` (a float64 tensor under that default) is
  ``rewards.new_empty(n, 1)``; the tensors made from numpy are float64 as in the original.
- ``collect_samples`` keeps its episode loop; its ``custom_reward`` and ``render`` branches (unused by ppo_gym.py's
  PPO run), the ``action_*`` log entries and ``merge_log`` are left out; ``Memory.sample(batch_size)``'s random-subset
  branch (unused here) raises; Policy's TRPO helpers (``get_kl``, ``get_fim``) and the DiscretePolicy are not ported.
- one process: num_threads 4 -> 1, so ``collect_samples`` runs in this process only (no ``multiprocessing`` workers or
  queue, no worker reseeding); core/agent.py's import-time ``os.environ["OMP_NUM_THREADS"] = "1"`` is not set.
- sizes for 2 CPU cores: min_batch_size 2048 -> 256, max_iter_num 500 -> unbounded; one ``train_step`` is one
  iteration of ``main_loop``: ``agent.collect_samples`` then ``update_params``. The evaluation rollout with
  ``mean_action=True`` (logging only), printing, model saving and ``torch.cuda.empty_cache`` are dropped.
- ``ppo_step`` returns its value loss and ``update_params`` the mean of those (the original returns nothing) so the
  step has a loss to report. The Program declares the value net (``value_net``, ``optimizer_value``, the value loss
  on a build-time batch of states and returns); the policy trains inside the same step as written.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import time
import types
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

# ---------------------------------------------------------------- utils/torch.py
tensor = torch.tensor
LongTensor = torch.LongTensor


def to_device(device, *args):
    return [x.to(device) for x in args]


# ---------------------------------------------------------------- utils/math.py
def normal_log_density(x, mean, log_std, std):
    var = std.pow(2)
    log_density = -(x - mean).pow(2) / (2 * var) - 0.5 * math.log(2 * math.pi) - log_std
    return log_density.sum(1, keepdim=True)


# ---------------------------------------------------------------- utils/replay_memory.py
Transition = namedtuple('Transition', ('state', 'action', 'mask', 'next_state',
                                       'reward'))


class Memory(object):
    def __init__(self):
        self.memory = []

    def push(self, *args):
        """Saves a transition."""
        self.memory.append(Transition(*args))

    def sample(self, batch_size=None):
        if batch_size is None:
            return Transition(*zip(*self.memory))
        raise NotImplementedError("(port) random minibatches of the memory are not used by ppo_gym.py")

    def append(self, new_memory):
        self.memory += new_memory.memory

    def __len__(self):
        return len(self.memory)


# ---------------------------------------------------------------- utils/zfilter.py
class RunningStat(object):
    def __init__(self, shape):
        self._n = 0
        self._M = np.zeros(shape)
        self._S = np.zeros(shape)

    def push(self, x):
        x = np.asarray(x)
        assert x.shape == self._M.shape
        self._n += 1
        if self._n == 1:
            self._M[...] = x
        else:
            oldM = self._M.copy()
            self._M[...] = oldM + (x - oldM) / self._n
            self._S[...] = self._S + (x - oldM) * (x - self._M)

    @property
    def n(self):
        return self._n

    @property
    def mean(self):
        return self._M

    @property
    def var(self):
        return self._S / (self._n - 1) if self._n > 1 else np.square(self._M)

    @property
    def std(self):
        return np.sqrt(self.var)

    @property
    def shape(self):
        return self._M.shape


class ZFilter:
    """
    y = (x-mean)/std
    using running estimates of mean,std
    """

    def __init__(self, shape, demean=True, destd=True, clip=10.0):
        self.demean = demean
        self.destd = destd
        self.clip = clip

        self.rs = RunningStat(shape)
        self.fix = False

    def __call__(self, x, update=True):
        if update and not self.fix:
            self.rs.push(x)
        if self.demean:
            x = x - self.rs.mean
        if self.destd:
            x = x / (self.rs.std + 1e-8)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x


# ---------------------------------------------------------------- models/mlp_policy.py
class Policy(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_size=(128, 128), activation='tanh', log_std=0):
        super().__init__()
        self.is_disc_action = False
        if activation == 'tanh':
            self.activation = torch.tanh
        elif activation == 'relu':
            self.activation = torch.relu
        elif activation == 'sigmoid':
            self.activation = torch.sigmoid

        self.affine_layers = nn.ModuleList()
        last_dim = state_dim
        for nh in hidden_size:
            self.affine_layers.append(nn.Linear(last_dim, nh))
            last_dim = nh

        self.action_mean = nn.Linear(last_dim, action_dim)
        self.action_mean.weight.data.mul_(0.1)
        self.action_mean.bias.data.mul_(0.0)

        self.action_log_std = nn.Parameter(torch.ones(1, action_dim) * log_std)

    def forward(self, x):
        for affine in self.affine_layers:
            x = self.activation(affine(x))

        action_mean = self.action_mean(x)
        action_log_std = self.action_log_std.expand_as(action_mean)
        action_std = torch.exp(action_log_std)

        return action_mean, action_log_std, action_std

    def select_action(self, x):
        action_mean, _, action_std = self.forward(x)
        action = torch.normal(action_mean, action_std)
        return action

    def get_log_prob(self, x, actions):
        action_mean, action_log_std, action_std = self.forward(x)
        return normal_log_density(actions, action_mean, action_log_std, action_std)


# ---------------------------------------------------------------- models/mlp_critic.py
class Value(nn.Module):
    def __init__(self, state_dim, hidden_size=(128, 128), activation='tanh'):
        super().__init__()
        if activation == 'tanh':
            self.activation = torch.tanh
        elif activation == 'relu':
            self.activation = torch.relu
        elif activation == 'sigmoid':
            self.activation = torch.sigmoid

        self.affine_layers = nn.ModuleList()
        last_dim = state_dim
        for nh in hidden_size:
            self.affine_layers.append(nn.Linear(last_dim, nh))
            last_dim = nh

        self.value_head = nn.Linear(last_dim, 1)
        self.value_head.weight.data.mul_(0.1)
        self.value_head.bias.data.mul_(0.0)

    def forward(self, x):
        for affine in self.affine_layers:
            x = self.activation(affine(x))

        value = self.value_head(x)
        return value


# ---------------------------------------------------------------- core/agent.py
def collect_samples(pid, queue, env, policy, custom_reward,
                    mean_action, render, running_state, min_batch_size):
    log = dict()
    memory = Memory()
    num_steps = 0
    total_reward = 0
    min_reward = 1e6
    max_reward = -1e6
    num_episodes = 0

    while num_steps < min_batch_size:
        state = env.reset()
        if running_state is not None:
            state = running_state(state)
        reward_episode = 0

        for t in range(10000):
            state_var = tensor(state).unsqueeze(0)
            with torch.no_grad():
                if mean_action:
                    action = policy(state_var)[0][0].numpy()
                else:
                    action = policy.select_action(state_var)[0].numpy()
            action = int(action) if policy.is_disc_action else action.astype(np.float64)
            next_state, reward, done, _ = env.step(action)
            reward_episode += reward
            if running_state is not None:
                next_state = running_state(next_state)

            mask = 0 if done else 1

            memory.push(state, action, mask, next_state, reward)

            if done:
                break

            state = next_state

        # log stats
        num_steps += (t + 1)
        num_episodes += 1
        total_reward += reward_episode
        min_reward = min(min_reward, reward_episode)
        max_reward = max(max_reward, reward_episode)

    log['num_steps'] = num_steps
    log['num_episodes'] = num_episodes
    log['total_reward'] = total_reward
    log['avg_reward'] = total_reward / num_episodes
    log['max_reward'] = max_reward
    log['min_reward'] = min_reward
    return memory, log


class Agent:

    def __init__(self, env, policy, device, custom_reward=None, running_state=None, num_threads=1):
        self.env = env
        self.policy = policy
        self.device = device
        self.custom_reward = custom_reward
        self.running_state = running_state
        self.num_threads = num_threads

    def collect_samples(self, min_batch_size, mean_action=False, render=False):
        t_start = time.time()
        to_device(torch.device('cpu'), self.policy)
        thread_batch_size = int(math.floor(min_batch_size / self.num_threads))
        # (port) num_threads is 1: no worker processes, no queue
        memory, log = collect_samples(0, None, self.env, self.policy, self.custom_reward, mean_action,
                                      render, self.running_state, thread_batch_size)
        batch = memory.sample()
        to_device(self.device, self.policy)
        t_end = time.time()
        log['sample_time'] = t_end - t_start
        return batch, log


# ---------------------------------------------------------------- core/common.py
def estimate_advantages(rewards, masks, values, gamma, tau, device, bug=None):
    rewards, masks, values = to_device(torch.device('cpu'), rewards, masks, values)
    deltas = rewards.new_empty(rewards.size(0), 1)  # (port) tensor_type(rewards.size(0), 1)
    advantages = rewards.new_empty(rewards.size(0), 1)

    prev_value = 0
    prev_advantage = 0
    for i in reversed(range(rewards.size(0))):
        if bug == "gae_masks_dropped":
            # the episode masks left out: each episode's return and advantage run on into the next episode's values
            deltas[i] = rewards[i] + gamma * prev_value - values[i]
            advantages[i] = deltas[i] + gamma * tau * prev_advantage
        else:
            deltas[i] = rewards[i] + gamma * prev_value * masks[i] - values[i]
            advantages[i] = deltas[i] + gamma * tau * prev_advantage * masks[i]

        prev_value = values[i, 0]
        prev_advantage = advantages[i, 0]

    if bug == "returns_from_standardized_advantages":
        # the two lines swapped: the value targets are built from the standardized advantages
        advantages = (advantages - advantages.mean()) / advantages.std()
        returns = values + advantages
    else:
        returns = values + advantages
        advantages = (advantages - advantages.mean()) / advantages.std()

    advantages, returns = to_device(device, advantages, returns)
    return advantages, returns


# ---------------------------------------------------------------- core/ppo.py
def ppo_step(policy_net, value_net, optimizer_policy, optimizer_value, optim_value_iternum, states, actions,
             returns, advantages, fixed_log_probs, clip_epsilon, l2_reg):

    """update critic"""
    for _ in range(optim_value_iternum):
        values_pred = value_net(states)
        value_loss = (values_pred - returns).pow(2).mean()
        # weight decay
        for param in value_net.parameters():
            value_loss += param.pow(2).sum() * l2_reg
        optimizer_value.zero_grad()
        value_loss.backward()
        optimizer_value.step()

    """update policy"""
    log_probs = policy_net.get_log_prob(states, actions)
    ratio = torch.exp(log_probs - fixed_log_probs)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon) * advantages
    policy_surr = -torch.min(surr1, surr2).mean()
    optimizer_policy.zero_grad()
    policy_surr.backward()
    torch.nn.utils.clip_grad_norm_(policy_net.parameters(), 40)
    optimizer_policy.step()
    return value_loss.detach()  # (port) for the step's report


# ---------------------------------------------------------------- examples/ppo_gym.py
def _build(seed, bug=None):
    args = types.SimpleNamespace(env_name="ContinuousCartPole", model_path=None, render=False, log_std=-0.0,
                                 gamma=0.99, tau=0.95, l2_reg=1e-3, learning_rate=3e-4, clip_epsilon=0.2,
                                 num_threads=1, seed=seed, min_batch_size=256, eval_batch_size=256,
                                 max_iter_num=None, log_interval=1, save_model_interval=0, gpu_index=0)

    dtype = torch.float64
    device = torch.device('cpu')

    """environment"""
    env = ContinuousCartPole()
    state_dim = env.observation_space.shape[0]
    is_disc_action = len(env.action_space.shape) == 0
    running_state = ZFilter((state_dim,), clip=5)

    """seeding"""
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    env.seed(args.seed)

    """define actor and critic"""
    assert not is_disc_action
    policy_net = Policy(state_dim, env.action_space.shape[0], log_std=args.log_std)
    value_net = Value(state_dim)
    policy_net.to(device).to(dtype)  # (port) float64 as under the original's default dtype
    value_net.to(device).to(dtype)

    optimizer_policy = torch.optim.Adam(policy_net.parameters(), lr=args.learning_rate)
    if bug == "optimizer_value_over_policy":
        # copy-paste slip: the value optimizer built over the policy's parameters; the value net never moves
        optimizer_value = torch.optim.Adam(policy_net.parameters(), lr=args.learning_rate)
    else:
        optimizer_value = torch.optim.Adam(value_net.parameters(), lr=args.learning_rate)

    # optimization epoch number and batch size for PPO
    optim_epochs = 10
    optim_batch_size = 64

    """create agent"""
    agent = Agent(env, policy_net, device, running_state=running_state, num_threads=args.num_threads)

    def batch_tensors(batch):
        states = torch.from_numpy(np.stack(batch.state)).to(dtype).to(device)
        actions = torch.from_numpy(np.stack(batch.action)).to(dtype).to(device)
        rewards = torch.from_numpy(np.stack(batch.reward)).to(dtype).to(device)
        masks = torch.from_numpy(np.stack(batch.mask)).to(dtype).to(device)
        return states, actions, rewards, masks

    def update_params(batch, i_iter):
        states, actions, rewards, masks = batch_tensors(batch)
        with torch.no_grad():
            values = value_net(states)
            fixed_log_probs = policy_net.get_log_prob(states, actions)

        """get advantage estimation from the trajectories"""
        advantages, returns = estimate_advantages(rewards, masks, values, args.gamma, args.tau, device, bug=bug)

        """perform mini-batch PPO update"""
        value_losses = []
        optim_iter_num = int(math.ceil(states.shape[0] / optim_batch_size))
        for _ in range(optim_epochs):
            perm = np.arange(states.shape[0])
            np.random.shuffle(perm)
            perm = LongTensor(perm).to(device)

            states, actions, returns, advantages, fixed_log_probs = \
                states[perm].clone(), actions[perm].clone(), returns[perm].clone(), advantages[perm].clone(), fixed_log_probs[perm].clone()

            for i in range(optim_iter_num):
                ind = slice(i * optim_batch_size, min((i + 1) * optim_batch_size, states.shape[0]))
                states_b, actions_b, advantages_b, returns_b, fixed_log_probs_b = \
                    states[ind], actions[ind], advantages[ind], returns[ind], fixed_log_probs[ind]

                value_losses.append(ppo_step(policy_net, value_net, optimizer_policy, optimizer_value, 1, states_b,
                                             actions_b, returns_b, advantages_b, fixed_log_probs_b,
                                             args.clip_epsilon, args.l2_reg))
        return torch.stack(value_losses).mean()

    def main_loop():
        i_iter = 0
        while True:
            """generate multiple trajectories that reach the minimum batch_size"""
            batch, log = agent.collect_samples(args.min_batch_size, render=args.render)
            loss = update_params(batch, i_iter)
            yield loss
            i_iter += 1

    # (port) the Program's batch: one rollout of the initial policy, its returns as update_params computes them
    first, _ = agent.collect_samples(args.min_batch_size)
    states, _actions, rewards, masks = batch_tensors(first)
    with torch.no_grad():
        values = value_net(states)
    _advantages, returns = estimate_advantages(rewards, masks, values, args.gamma, args.tau, device, bug=bug)

    def loss_fn(values_pred, returns):
        """ppo_step's value loss (MSE plus the l2 weight decay of the value net)."""
        value_loss = (values_pred - returns).pow(2).mean()
        # weight decay
        for param in value_net.parameters():
            value_loss += param.pow(2).sum() * args.l2_reg
        return value_loss

    steps = main_loop()
    return Program(name="khrylxrl_ppo", model=value_net, batch=(states, returns), loss_fn=loss_fn,
                   optimizer=optimizer_value, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: GAE without the episode masks; the returns the value net regresses onto, and the advantages, carry the
    # next episode's values across every episode boundary.
    Bug("gae_masks_dropped", functools.partial(_build, bug="gae_masks_dropped"), "learning_ledger", ("TASK",)),
    # classic ordering slip: ``returns = values + advantages`` after the standardization, so the value targets are
    # the old values plus unit-variance noise.
    Bug("returns_from_standardized_advantages", functools.partial(_build, bug="returns_from_standardized_advantages"),
        "learning_ledger", ("TASK",)),
    # classic copy-paste slip: ``optimizer_value`` over ``policy_net.parameters()``; the value net is never updated.
    Bug("optimizer_value_over_policy", functools.partial(_build, bug="optimizer_value_over_policy"), "four_structures",
        ("value_head",)),
]
