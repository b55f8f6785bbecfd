# ruff: noqa: B006, C408, F841, PLR0402, RUF059
"""PPO-Clip from OpenAI Spinning Up (PyTorch): an MLP actor-critic, a GAE-Lambda buffer, a policy trained by the
clipped surrogate with early stopping on the approximate KL, and a value function regressed on rewards-to-go, each
with its own Adam optimizer.

Source: https://github.com/openai/spinningup
Commit: 038665d62d569055401d91856abb287263096178
Files: spinup/algos/pytorch/ppo/ppo.py (PPOBuffer, ppo), spinup/algos/pytorch/ppo/core.py (combined_shape, mlp,
discount_cumsum, Actor, MLPCategoricalActor, MLPGaussianActor, MLPCritic, MLPActorCritic),
spinup/utils/mpi_tools.py (mpi_statistics_scalar), spinup/examples/pytorch/bench_ppo_cartpole.py (the CartPole run)
License: MIT (Copyright (c) 2018 OpenAI; full text in LICENSES/openai-spinningup.txt)
Domain: RL, policy gradient (PPO-Clip, GAE-Lambda, separate policy / value optimizers)

Kept as written: core.py's ``mlp``, ``discount_cumsum`` (scipy's lfilter), the actors (``Categorical(logits=...)``),
``MLPCritic`` (squeezed output), ``MLPActorCritic`` (hidden (64, 64), Tanh; ``step`` under no_grad); ``PPOBuffer``
(``store``, ``finish_path``: GAE-Lambda advantages and rewards-to-go with the ``last_val`` bootstrap, ``get``:
advantage normalization); ``ppo()``'s defaults (gamma 0.99, clip_ratio 0.2, pi_lr 3e-4, vf_lr 1e-3, lam 0.97,
max_ep_len 1000, target_kl 0.01), ``compute_loss_pi`` (ratio, clipped advantage, approx KL, entropy, clip fraction),
``compute_loss_v``, the two Adam optimizers over ``ac.pi`` and ``ac.v``, ``update()`` (policy steps with early stop
at ``kl > 1.5 * target_kl``, then value steps) and the epoch loop body (``ac.step``, ``env.step``, ``buf.store``, the
timeout / terminal / epoch-end handling with the value bootstrap, ``finish_path``, ``update()``).

Deviations from the original:
- gym is not installed: CartPole (the bench_ppo_cartpole example's environment) is the cart-pole written out in
  ``_cartpole.py`` (seeded), wrapped to the old gym interface ``ppo()`` calls (``reset()`` returns the observation,
  ``step()`` four values, ``done`` true at the 500-step limit as gym's TimeLimit set it); ``gym.spaces.Box`` /
  ``Discrete`` are replaced by two small stand-ins with the attributes ``MLPActorCritic`` reads (``shape``, ``n``).
- one process, no MPI: ``setup_pytorch_for_mpi``, ``sync_params`` and ``mpi_avg_grads`` do nothing for one process
  and are dropped; ``mpi_avg`` of one value is the value; ``proc_id()`` is 0 and ``num_procs()`` 1;
  ``mpi_statistics_scalar`` is its one-process arithmetic (mean, and the population std) in numpy.
- sizes for 2 CPU cores: steps_per_epoch 4000 -> 256 (train_pi_iters and train_v_iters stay 80).
- the EpochLogger (config, stores, tabular logs, ``setup_pytorch_saver``, ``save_state``) and the "trajectory cut
  off by epoch" print are dropped; ``count_vars`` (logging only) is left out. ``update()`` returns its last value loss
  (the original logs ``LossV`` and ``DeltaLossV``) so the step has a loss to report.
- ``ppo()`` runs its loop until the first epoch's experience is in the buffer and returns its objects there (the
  buffer, the actor-critic, the optimizers, ``update``) instead of calling ``update()``. ``train_step`` puts that
  epoch's experience back in the buffer (``get()`` normalizes ``adv_buf`` in place of the stored one and resets the
  pointer) and calls ``update()``: one PPO update (up to 80 policy steps, 80 value steps), replayable on the same
  rollout. The Program declares the value function (``ac.v``, ``vf_optimizer``, ``compute_loss_v``'s loss on the
  epoch's observations and rewards-to-go); the policy trains inside the same step as written.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import scipy.signal
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical
from torch.distributions.normal import Normal
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

# ---- stand-ins for gym.spaces and the old gym CartPole interface (port) ----------------------------------------

class Box:
    def __init__(self, shape):
        self.shape = shape


class Discrete:
    def __init__(self, n):
        self.n = n
        self.shape = ()


class OldGymCartPole:
    """gym < 0.26's interface over _cartpole.CartPole: reset() -> obs, step() -> (obs, r, done, info)."""

    observation_space = Box((4,))
    action_space = Discrete(2)

    def __init__(self, seed):
        self.env = CartPole(seed)

    def reset(self):
        return self.env.reset()[0]

    def step(self, a):
        o, r, terminated, truncated, info = self.env.step(int(a))
        return o, r, terminated or truncated, info


def mpi_avg(x):
    return x


def mpi_statistics_scalar(x):
    x = np.array(x, dtype=np.float32)
    mean = np.sum(x) / len(x)
    std = np.sqrt(np.sum((x - mean)**2) / len(x))
    return mean, std


# ---- spinup/algos/pytorch/ppo/core.py ---------------------------------------------------------------------------

def combined_shape(length, shape=None):
    if shape is None:
        return (length,)
    return (length, shape) if np.isscalar(shape) else (length, *shape)


def mlp(sizes, activation, output_activation=nn.Identity):
    layers = []
    for j in range(len(sizes)-1):
        act = activation if j < len(sizes)-2 else output_activation
        layers += [nn.Linear(sizes[j], sizes[j+1]), act()]
    return nn.Sequential(*layers)


def discount_cumsum(x, discount):
    """
    magic from rllab for computing discounted cumulative sums of vectors.

    input:
        vector x,
        [x0,
         x1,
         x2]

    output:
        [x0 + discount * x1 + discount^2 * x2,
         x1 + discount * x2,
         x2]
    """
    return scipy.signal.lfilter([1], [1, float(-discount)], x[::-1], axis=0)[::-1]


class Actor(nn.Module):

    def _distribution(self, obs):
        raise NotImplementedError

    def _log_prob_from_distribution(self, pi, act):
        raise NotImplementedError

    def forward(self, obs, act=None):
        # Produce action distributions for given observations, and
        # optionally compute the log likelihood of given actions under
        # those distributions.
        pi = self._distribution(obs)
        logp_a = None
        if act is not None:
            logp_a = self._log_prob_from_distribution(pi, act)
        return pi, logp_a


class MLPCategoricalActor(Actor):

    def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
        super().__init__()
        self.logits_net = mlp([obs_dim] + list(hidden_sizes) + [act_dim], activation)

    def _distribution(self, obs):
        logits = self.logits_net(obs)
        return Categorical(logits=logits)

    def _log_prob_from_distribution(self, pi, act):
        return pi.log_prob(act)


class MLPGaussianActor(Actor):

    def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
        super().__init__()
        log_std = -0.5 * np.ones(act_dim, dtype=np.float32)
        self.log_std = torch.nn.Parameter(torch.as_tensor(log_std))
        self.mu_net = mlp([obs_dim] + list(hidden_sizes) + [act_dim], activation)

    def _distribution(self, obs):
        mu = self.mu_net(obs)
        std = torch.exp(self.log_std)
        return Normal(mu, std)

    def _log_prob_from_distribution(self, pi, act):
        return pi.log_prob(act).sum(axis=-1)    # Last axis sum needed for Torch Normal distribution


class MLPCritic(nn.Module):

    def __init__(self, obs_dim, hidden_sizes, activation):
        super().__init__()
        self.v_net = mlp([obs_dim] + list(hidden_sizes) + [1], activation)

    def forward(self, obs):
        return torch.squeeze(self.v_net(obs), -1) # Critical to ensure v has right shape.


class MLPActorCritic(nn.Module):


    def __init__(self, observation_space, action_space,
                 hidden_sizes=(64,64), activation=nn.Tanh):
        super().__init__()

        obs_dim = observation_space.shape[0]

        # policy builder depends on action space
        if isinstance(action_space, Box):
            self.pi = MLPGaussianActor(obs_dim, action_space.shape[0], hidden_sizes, activation)
        elif isinstance(action_space, Discrete):
            self.pi = MLPCategoricalActor(obs_dim, action_space.n, hidden_sizes, activation)

        # build value function
        self.v  = MLPCritic(obs_dim, hidden_sizes, activation)

    def step(self, obs):
        with torch.no_grad():
            pi = self.pi._distribution(obs)
            a = pi.sample()
            logp_a = self.pi._log_prob_from_distribution(pi, a)
            v = self.v(obs)
        return a.numpy(), v.numpy(), logp_a.numpy()

    def act(self, obs):
        return self.step(obs)[0]


# ---- spinup/algos/pytorch/ppo/ppo.py ----------------------------------------------------------------------------

class PPOBuffer:
    """
    A buffer for storing trajectories experienced by a PPO agent interacting
    with the environment, and using Generalized Advantage Estimation (GAE-Lambda)
    for calculating the advantages of state-action pairs.
    """

    def __init__(self, obs_dim, act_dim, size, gamma=0.99, lam=0.95):
        self.obs_buf = np.zeros(combined_shape(size, obs_dim), dtype=np.float32)
        self.act_buf = np.zeros(combined_shape(size, act_dim), dtype=np.float32)
        self.adv_buf = np.zeros(size, dtype=np.float32)
        self.rew_buf = np.zeros(size, dtype=np.float32)
        self.ret_buf = np.zeros(size, dtype=np.float32)
        self.val_buf = np.zeros(size, dtype=np.float32)
        self.logp_buf = np.zeros(size, dtype=np.float32)
        self.gamma, self.lam = gamma, lam
        self.ptr, self.path_start_idx, self.max_size = 0, 0, size

    def store(self, obs, act, rew, val, logp):
        """
        Append one timestep of agent-environment interaction to the buffer.
        """
        assert self.ptr < self.max_size     # buffer has to have room so you can store
        self.obs_buf[self.ptr] = obs
        self.act_buf[self.ptr] = act
        self.rew_buf[self.ptr] = rew
        self.val_buf[self.ptr] = val
        self.logp_buf[self.ptr] = logp
        self.ptr += 1

    def finish_path(self, last_val=0):
        """
        Call this at the end of a trajectory, or when one gets cut off
        by an epoch ending. This looks back in the buffer to where the
        trajectory started, and uses rewards and value estimates from
        the whole trajectory to compute advantage estimates with GAE-Lambda,
        as well as compute the rewards-to-go for each state, to use as
        the targets for the value function.

        The "last_val" argument should be 0 if the trajectory ended
        because the agent reached a terminal state (died), and otherwise
        should be V(s_T), the value function estimated for the last state.
        This allows us to bootstrap the reward-to-go calculation to account
        for timesteps beyond the arbitrary episode horizon (or epoch cutoff).
        """

        path_slice = slice(self.path_start_idx, self.ptr)
        rews = np.append(self.rew_buf[path_slice], last_val)
        vals = np.append(self.val_buf[path_slice], last_val)

        # the next two lines implement GAE-Lambda advantage calculation
        deltas = rews[:-1] + self.gamma * vals[1:] - vals[:-1]
        self.adv_buf[path_slice] = discount_cumsum(deltas, self.gamma * self.lam)

        # the next line computes rewards-to-go, to be targets for the value function
        self.ret_buf[path_slice] = discount_cumsum(rews, self.gamma)[:-1]

        self.path_start_idx = self.ptr

    def get(self):
        """
        Call this at the end of an epoch to get all of the data from
        the buffer, with advantages appropriately normalized (shifted to have
        mean zero and std one). Also, resets some pointers in the buffer.
        """
        assert self.ptr == self.max_size    # buffer has to be full before you can get
        self.ptr, self.path_start_idx = 0, 0
        # the next two lines implement the advantage normalization trick
        adv_mean, adv_std = mpi_statistics_scalar(self.adv_buf)
        self.adv_buf = (self.adv_buf - adv_mean) / adv_std
        data = dict(obs=self.obs_buf, act=self.act_buf, ret=self.ret_buf,
                    adv=self.adv_buf, logp=self.logp_buf)
        return {k: torch.as_tensor(v, dtype=torch.float32) for k,v in data.items()}


def ppo(env_fn, actor_critic=MLPActorCritic, ac_kwargs=dict(), seed=0,
        steps_per_epoch=4000, epochs=50, gamma=0.99, clip_ratio=0.2, pi_lr=3e-4,
        vf_lr=1e-3, train_pi_iters=80, train_v_iters=80, lam=0.97, max_ep_len=1000,
        target_kl=0.01, logger_kwargs=dict(), save_freq=10, bug=None):
    """
    Proximal Policy Optimization (by clipping),

    with early stopping based on approximate KL

    (port: a generator; see the module docstring)
    """

    # Random seed
    torch.manual_seed(seed)
    np.random.seed(seed)

    # Instantiate environment
    env = env_fn()
    obs_dim = env.observation_space.shape
    act_dim = env.action_space.shape

    # Create actor-critic module
    ac = actor_critic(env.observation_space, env.action_space, **ac_kwargs)

    # Set up experience buffer
    local_steps_per_epoch = int(steps_per_epoch / 1)
    buf = PPOBuffer(obs_dim, act_dim, local_steps_per_epoch, gamma, lam)

    # Set up function for computing PPO policy loss
    def compute_loss_pi(data):
        obs, act, adv, logp_old = data['obs'], data['act'], data['adv'], data['logp']

        # Policy loss
        pi, logp = ac.pi(obs, act)
        ratio = torch.exp(logp - logp_old)
        clip_adv = torch.clamp(ratio, 1-clip_ratio, 1+clip_ratio) * adv
        loss_pi = -(torch.min(ratio * adv, clip_adv)).mean()

        # Useful extra info
        approx_kl = (logp_old - logp).mean().item()
        ent = pi.entropy().mean().item()
        clipped = ratio.gt(1+clip_ratio) | ratio.lt(1-clip_ratio)
        clipfrac = torch.as_tensor(clipped, dtype=torch.float32).mean().item()
        pi_info = dict(kl=approx_kl, ent=ent, cf=clipfrac)

        return loss_pi, pi_info

    # Set up function for computing value loss
    def compute_loss_v(data):
        obs, ret = data['obs'], data['ret']
        return ((ac.v(obs) - ret)**2).mean()

    # Set up optimizers for policy and value function
    pi_optimizer = Adam(ac.pi.parameters(), lr=pi_lr)
    vf_optimizer = Adam(ac.v.parameters(), lr=vf_lr)

    def update():
        data = buf.get()

        pi_l_old, pi_info_old = compute_loss_pi(data)
        pi_l_old = pi_l_old.item()
        v_l_old = compute_loss_v(data).item()

        # Train policy with multiple steps of gradient descent
        for i in range(train_pi_iters):
            pi_optimizer.zero_grad()
            loss_pi, pi_info = compute_loss_pi(data)
            kl = mpi_avg(pi_info['kl'])
            if kl > 1.5 * target_kl:
                break
            loss_pi.backward()
            pi_optimizer.step()

        # Value function learning
        if bug == "vf_zero_grad_outside_loop":
            # zero_grad hoisted out of the loop: every value step adds its gradient to all the earlier ones
            vf_optimizer.zero_grad()
        for i in range(train_v_iters):
            if bug != "vf_zero_grad_outside_loop":
                vf_optimizer.zero_grad()
            loss_v = compute_loss_v(data)
            loss_v.backward()
            vf_optimizer.step()

        return loss_v.detach()

    # Prepare for interaction with environment
    o, ep_ret, ep_len = env.reset(), 0, 0

    # Main loop: collect experience in env and update/log each epoch
    for epoch in range(epochs):
        for t in range(local_steps_per_epoch):
            a, v, logp = ac.step(torch.as_tensor(o, dtype=torch.float32))

            next_o, r, d, _ = env.step(a)
            ep_ret += r
            ep_len += 1

            # save and log
            buf.store(o, a, r, v, logp)

            # Update obs (critical!)
            o = next_o

            timeout = ep_len == max_ep_len
            terminal = d or timeout
            epoch_ended = t==local_steps_per_epoch-1

            if terminal or epoch_ended:
                # if trajectory didn't reach terminal state, bootstrap value target
                if timeout or epoch_ended or bug == "bootstrap_at_terminal":
                    _, v, _ = ac.step(torch.as_tensor(o, dtype=torch.float32))
                else:
                    v = 0
                buf.finish_path(v)
                o, ep_ret, ep_len = env.reset(), 0, 0

        # (port) the run stops here, before the first update: its objects are returned instead
        return types.SimpleNamespace(ac=ac, buf=buf, pi_optimizer=pi_optimizer, vf_optimizer=vf_optimizer,
                                     update=update)


def _build(seed, bug=None):
    objects = ppo(lambda: OldGymCartPole(seed), actor_critic=MLPActorCritic, seed=seed, steps_per_epoch=256,
                  bug=bug)
    ac, buf = objects.ac, objects.buf
    saved = {k: getattr(buf, k).copy() for k in ("obs_buf", "act_buf", "adv_buf", "rew_buf", "ret_buf", "val_buf",
                                                 "logp_buf")}

    def train_step():
        # the epoch's experience back in the buffer (get() normalized adv_buf and reset the pointer), then update()
        for k, v in saved.items():
            setattr(buf, k, v.copy())
        buf.ptr, buf.path_start_idx = buf.max_size, buf.max_size
        return objects.update()

    # the epoch's observations and rewards-to-go: what update() regresses ac.v on
    obs = torch.as_tensor(saved["obs_buf"], dtype=torch.float32)
    ret = torch.as_tensor(saved["ret_buf"], dtype=torch.float32)

    def loss_fn(v, ret):
        return ((v - ret)**2).mean()

    return Program(name="spinningup_ppo", model=ac.v, batch=(obs, ret), loss_fn=loss_fn,
                   optimizer=objects.vf_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the value of the state after a terminal step is bootstrapped into the rewards-to-go and the GAE (last_val = V(s')
    # where the pole fell, instead of 0): the value targets run on past the end of each episode (classic done-mask slip).
    Bug("bootstrap_at_terminal", functools.partial(_build, bug="bootstrap_at_terminal"), "learning_ledger", ("TASK",)),
    # vf_optimizer.zero_grad() hoisted out of the train_v_iters loop: each value step applies the sum of all the
    # gradients so far (classic misplaced zero_grad).
    Bug("vf_zero_grad_outside_loop", functools.partial(_build, bug="vf_zero_grad_outside_loop"), "step_probe",
        ("v_net.0.weight",)),
]
