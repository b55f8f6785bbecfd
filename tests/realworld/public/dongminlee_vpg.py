# ruff: noqa: UP004, UP008, B006, C408, PLR0402, RUF059
"""Vanilla Policy Gradient with GAE-Lambda on Pendulum, from dongminlee94/deep_rl (``run_pendulum.py --algo vpg``):
a diagonal-Gaussian policy (tanh MLP for the mean, a state-independent ``log_std`` parameter), a tanh MLP value
function, an on-policy buffer that computes rewards-to-go and GAE-Lambda advantages (normalized) when it is full;
each update fits the value function with 80 Adam steps of MSE to the rewards-to-go, then takes one Adam step on the
policy loss ``-(log_pi * adv).mean()``.

Source: https://github.com/dongminlee94/deep_rl
Commit: d5bcabc541a5f16e166be33876d23352e149f97e
Files: ``agents/vpg.py`` (``Agent``), ``agents/common/networks.py`` (``MLP``, ``GaussianPolicy``),
``agents/common/buffers.py`` (``Buffer``), ``run_pendulum.py`` (``main``)
License: MIT (Copyright (c) 2021 Dongmin Lee; full text in LICENSES/dongminlee94-deep_rl.txt)
Domain: RL, policy gradient with a learned baseline (VPG, GAE-Lambda, continuous actions)

Kept as written: ``MLP`` and ``GaussianPolicy`` (hidden sizes (64, 64), tanh, ``log_std`` initialized to ones, the
sample and the mean scaled by ``output_limit`` after the log-probability is taken), ``Buffer`` (``add``,
``finish_path``'s backward pass with the ``1 - done`` masks, advantage normalization, ``get``), ``Agent`` (gamma
0.99, lam 0.97, policy_lr = vf_lr = 1e-3, train_vf_iters 80; ``train_model`` and ``run``: the value of every visited
state stored with the transition, training when ``steps == sample_size`` inside the episode), ``main``'s training
phase (``agent.run(args.max_step)`` with max_step 200, Pendulum's action limit from ``action_space.high[0]``).

Deviations from the original:
- gym's Pendulum-v0 is replaced by the pendulum written out in numpy in ``_continuous_control.py`` (the same
  equations and constants, ``done`` at the 200-step time limit as gym's TimeLimit sets it, gym < 0.26 interface);
  the environment is the synthetic data, seeded from ``seed``;
- sizes for 2 CPU cores: sample_size 2048 -> 400 (two episodes per update);
- one ``train_step`` runs ``agent.run(200)`` episodes until the buffer has filled once and ``train_model`` has run
  (one update); ``train_model`` returns ``policy_loss + vf_loss`` (its last value-fitting loss) so the step has a
  loss to report (the original appends them to its log lists). The evaluation phase (100 episodes with the mean
  action every 50 iterations), tensorboard, printing, rendering and model saving are dropped;
- the Program declares the value function (``vf``, ``vf_optimizer``, its MSE on a batch of states and
  rewards-to-go collected at build time with the initial policy); the policy trains inside the same step as written;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Normal

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum


def identity(x):
    """Return input without any change."""
    return x


# agents/common/networks.py
class MLP(nn.Module):
    def __init__(self,
                 input_size,
                 output_size,
                 output_limit=1.0,
                 hidden_sizes=(64,64),
                 activation=F.relu,
                 output_activation=identity,
                 use_output_layer=True,
                 use_actor=False,
    ):
        super(MLP, self).__init__()

        self.input_size = input_size
        self.output_size = output_size
        self.output_limit = output_limit
        self.hidden_sizes = hidden_sizes
        self.activation = activation
        self.output_activation = output_activation
        self.use_output_layer = use_output_layer
        self.use_actor = use_actor

        # Set hidden layers
        self.hidden_layers = nn.ModuleList()
        in_size = self.input_size
        for next_size in self.hidden_sizes:
            fc = nn.Linear(in_size, next_size)
            in_size = next_size
            self.hidden_layers.append(fc)

        # Set output layers
        if self.use_output_layer:
            self.output_layer = nn.Linear(in_size, self.output_size)
        else:
            self.output_layer = identity

    def forward(self, x):
        for hidden_layer in self.hidden_layers:
            x = self.activation(hidden_layer(x))
        x = self.output_activation(self.output_layer(x))
        # If the network is used as actor network, make sure output is in correct range
        x = x * self.output_limit if self.use_actor else x
        return x


class GaussianPolicy(MLP):
    def __init__(self,
                 input_size,
                 output_size,
                 output_limit=1.0,
                 hidden_sizes=(64,64),
                 activation=torch.tanh,
    ):
        super(GaussianPolicy, self).__init__(
            input_size=input_size,
            output_size=output_size,
            hidden_sizes=hidden_sizes,
            activation=activation,
        )

        self.output_limit = output_limit
        self.log_std = np.ones(output_size, dtype=np.float32)
        self.log_std = torch.nn.Parameter(torch.Tensor(self.log_std))

    def forward(self, x, pi=None, use_pi=True):
        mu = super(GaussianPolicy, self).forward(x)
        std = torch.exp(self.log_std)

        dist = Normal(mu, std)
        if use_pi:
            pi = dist.sample()
        log_pi = dist.log_prob(pi).sum(dim=-1)

        # Make sure outputs are in correct range
        mu = mu * self.output_limit
        pi = pi * self.output_limit
        return mu, std, pi, log_pi


# agents/common/buffers.py
class Buffer(object):
    """
    A buffer for storing trajectories experienced by a agent interacting
    with the environment.
    """

    def __init__(self, obs_dim, act_dim, size, device, gamma=0.99, lam=0.97, bug=None):
        self.obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.act_buf = np.zeros([size, act_dim], dtype=np.float32)
        self.rew_buf = np.zeros(size, dtype=np.float32)
        self.don_buf = np.zeros(size, dtype=np.float32)
        self.ret_buf = np.zeros(size, dtype=np.float32)
        self.adv_buf = np.zeros(size, dtype=np.float32)
        self.v_buf = np.zeros(size, dtype=np.float32)
        self.gamma, self.lam = gamma, lam
        self.ptr, self.max_size = 0, size
        self.device = device
        self.bug = bug

    def add(self, obs, act, rew, don, v):
        assert self.ptr < self.max_size      # Buffer has to have room so you can store
        self.obs_buf[self.ptr] = obs
        self.act_buf[self.ptr] = act
        self.rew_buf[self.ptr] = rew
        self.don_buf[self.ptr] = don
        self.v_buf[self.ptr] = v
        self.ptr += 1

    def finish_path(self):
        previous_v = 0
        running_ret = 0
        running_adv = 0
        don_buf = np.zeros_like(self.don_buf) if self.bug == "done_mask_dropped" else self.don_buf
        for t in reversed(range(len(self.rew_buf))):
            # The next two line computes rewards-to-go, to be targets for the value function
            running_ret = self.rew_buf[t] + self.gamma*(1-don_buf[t])*running_ret
            self.ret_buf[t] = running_ret

            # The next four lines implement GAE-Lambda advantage calculation
            running_del = self.rew_buf[t] + self.gamma*(1-don_buf[t])*previous_v - self.v_buf[t]
            running_adv = running_del + self.gamma*self.lam*(1-don_buf[t])*running_adv
            previous_v = self.v_buf[t]
            self.adv_buf[t] = running_adv
        # The next line implement the advantage normalization trick
        self.adv_buf = (self.adv_buf - self.adv_buf.mean()) / self.adv_buf.std()

    def get(self):
        assert self.ptr == self.max_size     # Buffer has to be full before you can get
        self.ptr = 0
        return dict(obs=torch.Tensor(self.obs_buf).to(self.device),
                    act=torch.Tensor(self.act_buf).to(self.device),
                    ret=torch.Tensor(self.ret_buf).to(self.device),
                    adv=torch.Tensor(self.adv_buf).to(self.device),
                    v=torch.Tensor(self.v_buf).to(self.device))


# agents/vpg.py
class Agent(object):
   """
   An implementation of the Vanilla Policy Gradient (VPG) agent
   with GAE-Lambda for advantage estimation.
   """

   def __init__(self, env, args, device, obs_dim, act_dim, act_limit, steps=0, gamma=0.99, lam=0.97,
                hidden_sizes=(64,64), sample_size=2048, policy_lr=1e-3, vf_lr=1e-3, train_vf_iters=80,
                eval_mode=False, policy_losses=list(), vf_losses=list(), kls=list(), logger=dict(), bug=None):
      self.env = env
      self.args = args
      self.device = device
      self.obs_dim = obs_dim
      self.act_dim = act_dim
      self.act_limit = act_limit
      self.steps = steps
      self.gamma = gamma
      self.lam = lam
      self.hidden_sizes = hidden_sizes
      self.sample_size = sample_size
      self.policy_lr = policy_lr
      self.vf_lr = vf_lr
      self.train_vf_iters = train_vf_iters
      self.eval_mode = eval_mode
      self.policy_losses = policy_losses
      self.vf_losses = vf_losses
      self.kls = kls
      self.logger = logger
      self.bug = bug
      self.updates = 0  # (port) how many times train_model ran

      # Main network
      self.policy = GaussianPolicy(self.obs_dim, self.act_dim, self.act_limit).to(self.device)
      self.vf = MLP(self.obs_dim, 1, activation=torch.tanh).to(self.device)

      # Create optimizers
      self.policy_optimizer = optim.Adam(self.policy.parameters(), lr=self.policy_lr)
      if bug == "vf_optimizer_over_policy":
         self.vf_optimizer = optim.Adam(self.policy.parameters(), lr=self.vf_lr)
      else:
         self.vf_optimizer = optim.Adam(self.vf.parameters(), lr=self.vf_lr)

      # Experience buffer
      self.buffer = Buffer(self.obs_dim, self.act_dim, self.sample_size, self.device, self.gamma, self.lam, bug=bug)

   def train_model(self):
      batch = self.buffer.get()
      obs = batch['obs']
      act = batch['act'].detach()
      ret = batch['ret']
      adv = batch['adv']

      # Update value network parameter
      for _ in range(self.train_vf_iters):
         # Prediction V(s)
         v = self.vf(obs) if self.bug == "v_not_squeezed" else self.vf(obs).squeeze(1)

         # Value loss
         vf_loss = F.mse_loss(v, ret)

         self.vf_optimizer.zero_grad()
         vf_loss.backward()
         self.vf_optimizer.step()

      # Prediction logπ(s)
      _, _, _, log_pi_old = self.policy(obs, act, use_pi=False)
      log_pi_old = log_pi_old.detach()
      _, _, _, log_pi = self.policy(obs, act, use_pi=False)

      # Policy loss
      policy_loss = -(log_pi*adv).mean()

      # Update policy network parameter
      self.policy_optimizer.zero_grad()
      policy_loss.backward()
      self.policy_optimizer.step()

      # A sample estimate for KL-divergence, easy to compute
      approx_kl = (log_pi_old - log_pi).mean()

      # Save losses
      self.policy_losses.append(policy_loss.item())
      self.vf_losses.append(vf_loss.item())
      self.kls.append(approx_kl.item())
      self.updates += 1
      return policy_loss.item() + vf_loss.item()  # (port) the step's loss

   def run(self, max_step):
      step_number = 0
      total_reward = 0.

      obs = self.env.reset()
      done = False

      # Keep interacting until agent reaches a terminal state.
      while not (done or step_number == max_step):
         if self.eval_mode:
            action, _, _, _ = self.policy(torch.Tensor(obs).to(self.device))
            action = action.detach().cpu().numpy()
            next_obs, reward, done, _ = self.env.step(action)
         else:
            self.steps += 1

            # Collect experience (s, a, r, s') using some policy
            _, _, action, log_pi = self.policy(torch.Tensor(obs).to(self.device))
            action = action.detach().cpu().numpy()
            next_obs, reward, done, _ = self.env.step(action)

            # Add experience to buffer
            v = self.vf(torch.Tensor(obs).to(self.device))
            self.buffer.add(obs, action, reward, done, v)

            # Start training when the number of experience is equal to sample size
            if self.steps == self.sample_size:
               self.buffer.finish_path()
               self.last_loss = self.train_model()  # (port) kept for train_step
               self.steps = 0

         total_reward += reward
         step_number += 1
         obs = next_obs
      return step_number, total_reward


def _states_and_returns(agent, env):
   """(port) A batch for the Program: the states and rewards-to-go of one buffer collected with the initial policy."""
   buf = Buffer(agent.obs_dim, agent.act_dim, agent.sample_size, agent.device, agent.gamma, agent.lam)
   with torch.no_grad():
      while buf.ptr < buf.max_size:
         obs, done = env.reset(), False
         while not done and buf.ptr < buf.max_size:
            _, _, action, _ = agent.policy(torch.Tensor(obs))
            next_obs, reward, done, _ = env.step(action.numpy())
            buf.add(obs, action.numpy(), reward, done, agent.vf(torch.Tensor(obs)))
            obs = next_obs
   buf.finish_path()
   b = buf.get()
   return b['obs'], b['ret']


def _build(seed, bug=None):
   args = types.SimpleNamespace(env='Pendulum-v0', algo='vpg', phase='train', render=False, load=None, seed=seed,
                                iterations=1000, eval_per_train=100, max_step=200, threshold_return=-230)
   device = torch.device('cpu')
   env = Pendulum()
   obs_dim = env.observation_space.shape[0]
   act_dim = env.action_space.shape[0]
   act_limit = env.action_space.high[0]

   # Set a random seed
   env.seed(args.seed)
   np.random.seed(args.seed)
   torch.manual_seed(args.seed)

   agent = Agent(env, args, device, obs_dim, act_dim, act_limit, sample_size=400, policy_losses=[], vf_losses=[],
                 kls=[], logger={}, bug=bug)  # (port) sample_size 2048 -> 400; fresh log lists per build
   probe_env = Pendulum()
   probe_env.seed(seed + 1000)
   batch = _states_and_returns(agent, probe_env)

   def train_step():
      agent.eval_mode = False
      done_before = agent.updates
      while agent.updates == done_before:
         agent.run(args.max_step)
      return agent.last_loss

   def loss_fn(v, ret):
      return F.mse_loss(v.squeeze(1), ret)

   return Program(name="dongminlee_vpg", model=agent.vf, batch=batch, loss_fn=loss_fn,
                  optimizer=agent.vf_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
   # classic: the (1 - done) masks left out of finish_path, so the rewards-to-go and the GAE advantages of one
   # episode run on into the next episode's rewards and values (the value targets are wrong).
   Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
   # classic broadcast slip: the value prediction [N, 1] not squeezed before mse_loss against ret [N], which
   # broadcasts to [N, N]: every state is fitted to the mean return of the batch.
   Bug("v_not_squeezed", functools.partial(_build, bug="v_not_squeezed"), "learning_ledger", ("OBJECTIVE",)),
   # classic copy-paste slip: vf_optimizer built over the policy's parameters, so the value function never moves
   # (and the value loss's zero_grad/step touch the policy instead).
   Bug("vf_optimizer_over_policy", functools.partial(_build, bug="vf_optimizer_over_policy"), "four_structures",
       ("output_layer",)),
]
