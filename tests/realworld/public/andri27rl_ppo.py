# ruff: noqa: UP008, PLR0402, RUF012
"""Clipped PPO for continuous actions, from andri27-ts/Reinforcement-Learning (``Week5/PPO.py``): a tanh-mean policy
MLP (32, 32) with a state-independent ``logstd`` parameter and a separate value MLP; ``Env.steps`` collects a
trajectory (Gaussian exploration around the mean, actions clipped to [-1, 1], the reward zeroed at ``done``) and
``generalized_advantage_estimation`` turns it into GAE advantages and returns (the last memory dropped); each
iteration normalizes the advantages and runs ``PPO_EPOCHS`` epochs over mini-batches, each with one Adam step on the
clipped surrogate (policy lr 4e-4) and one on the value MSE (value lr 1e-3).

Source: https://github.com/andri27-ts/Reinforcement-Learning
Commit: c57064f747f51d1c495639c7413f5a2be01acd5f
Files: ``Week5/PPO.py`` (``A2C_policy``, ``A2C_value``, ``Env``, ``log_policy_prob``, ``compute_log_policy_prob``,
``clipped_PPO_loss``, the hyperparameters and the ``__main__`` training loop)
License: MIT (Copyright (c) 2018 Andrea Lonza; full text in LICENSES/andri27-ts-Reinforcement-Learning.txt)
Domain: RL, policy gradient (clipped PPO, GAE, separate policy and value networks, continuous actions)

Kept as written: ``A2C_policy`` (the 0.1-scaled mean and unused ``var_l`` heads, ``logstd`` zeros, tanh mean),
``A2C_value``, ``Env.steps`` (the exploration noise ``exp(logstd) * N(0, 1)``, the value stored per step, reward 0
at ``done``) and ``generalized_advantage_estimation`` line by line, ``log_policy_prob`` (which treats ``logstd`` as a
log-variance, as written), ``compute_log_policy_prob`` (reading the global ``agent_policy.logstd``, in double),
``clipped_PPO_loss``, the loop body of one iteration (old log-probabilities, normalized advantages, epochs over
mini-batches, the policy then the value update), and PPO_EPOCHS 7, CLIP_EPS 0.2, GAE_LAMBDA 0.95, GAMMA 0.99,
POLICY_LR 4e-4, VALUE_LR 1e-3.

Deviations from the original:
- gym's BipedalWalker-v2 is replaced by the pendulum written out in numpy in ``_continuous_control.py`` (same
  equations and constants as gym's Pendulum, ``done`` at the 200-step limit, gym < 0.26 interface), seeded from
  ``seed``; its observation (3) and action (1) sizes size the networks;
- sizes for 2 CPU cores: TRAJECTORY_SIZE 2049 -> 129 (128 memories per iteration), BATCH_SIZE 64 -> 32;
- ``namedtuple(..., verbose=False)`` (removed from Python) drops ``verbose``; the ``print`` on every finished game,
  tensorboardX, the test games, video and checkpoints are dropped;
- ``agent_policy`` is a module global as in the script (``compute_log_policy_prob`` reads it), set by ``build``;
- one ``train_step`` is one iteration of the ``while n_iter < MAX_ITER`` loop and returns
  ``mean(pol_loss_acc) + mean(val_loss_acc)`` (what the script writes to tensorboard as pg_loss and vl_loss);
- the Program declares the value network with its MSE on one trajectory's states and returns, collected at build
  time with the initial policy; the policy trains inside the same step as written;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

BUG = None  # (port) the variant in force for the module-level functions, set by build


class A2C_policy(nn.Module):
    '''
    Policy neural network
    '''
    def __init__(self, input_shape, n_actions):
        super(A2C_policy, self).__init__()

        self.lp = nn.Sequential(
            nn.Linear(input_shape[0], 32),
            nn.ReLU(),
            nn.Linear(32, 32),
            nn.ReLU())

        self.mean_l = nn.Linear(32, n_actions[0])
        self.mean_l.weight.data.mul_(0.1)

        self.var_l = nn.Linear(32, n_actions[0])
        self.var_l.weight.data.mul_(0.1)

        self.logstd = nn.Parameter(torch.zeros(n_actions[0]))

    def forward(self, x):
        ot_n = self.lp(x.float())
        return F.tanh(self.mean_l(ot_n))


class A2C_value(nn.Module):
    '''
    Actor neural network
    '''
    def __init__(self, input_shape):
        super(A2C_value, self).__init__()

        self.lp = nn.Sequential(
            nn.Linear(input_shape[0], 32),
            nn.ReLU(),
            nn.Linear(32, 32),
            nn.ReLU(),
            nn.Linear(32, 1))

    def forward(self, x):
        return self.lp(x.float())


class Env:
    '''
    Environment class
    '''
    game_rew = 0
    last_game_rew = 0
    game_n = 0
    last_games_rews = [-200]
    n_iter = 0

    def __init__(self, env, n_steps, gamma, gae_lambda, save_video=False):
        super(Env, self).__init__()

        # create the new environment
        self.env = env  # (port) gym.make(env_name) upstream
        self.obs = self.env.reset()

        self.n_steps = n_steps
        self.action_n = self.env.action_space.shape
        self.observation_n = self.env.observation_space.shape[0]
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.last_games_rews = [-200]  # (port) per instance

    def steps(self, agent_policy, agent_value):
        '''
        Execute the agent n_steps in the environment
        '''
        memories = []
        for s in range(self.n_steps):
            self.n_iter += 1

            # get the agent policy
            ag_mean = agent_policy(torch.tensor(self.obs))

            # get an action following the policy distribution
            logstd = agent_policy.logstd.data.cpu().numpy()
            action = ag_mean.data.cpu().numpy() + np.exp(logstd) * np.random.normal(size=logstd.shape)
            action = np.clip(action, -1, 1)

            state_value = float(agent_value(torch.tensor(self.obs)))

            # Perform a step in the environment
            new_obs, reward, done, _ = self.env.step(action)

            # Update the memories with the last interaction
            if done:
                # change the reward to 0 in case the episode is end
                memories.append(Memory(obs=self.obs, action=action, new_obs=new_obs, reward=0, done=done, value=state_value, adv=0))
            else:
                memories.append(Memory(obs=self.obs, action=action, new_obs=new_obs, reward=reward, done=done, value=state_value, adv=0))

            self.game_rew += reward
            self.obs = new_obs

            if done:
                # reset the environment
                self.obs = self.env.reset()
                self.last_game_rew = self.game_rew
                self.game_rew = 0
                self.game_n += 1
                self.n_iter = 0
                self.last_games_rews.append(self.last_game_rew)

        # compute the discount reward of the memories and return it
        return self.generalized_advantage_estimation(memories)

    def generalized_advantage_estimation(self, memories):
        '''
        Calculate the advantage diuscounted reward as in the paper
        '''
        upd_memories = []
        run_add = 0

        for t in reversed(range(len(memories)-1)):
            if memories[t].done and BUG != "gae_done_reset_dropped":
                run_add = memories[t].reward
            else:
                sigma = memories[t].reward + self.gamma * memories[t+1].value - memories[t].value
                run_add = sigma + run_add * self.gamma * self.gae_lambda

            ## NB: the last memoy is missing
            # Update the memories with the discounted reward
            upd_memories.append(Memory(obs=memories[t].obs, action=memories[t].action, new_obs=memories[t].new_obs, reward=run_add + memories[t].value, done=memories[t].done, value=memories[t].value, adv=run_add))

        return upd_memories[::-1]


def log_policy_prob(mean, std, actions):
    # policy log probability
    act_log_softmax = -((mean-actions)**2)/(2*torch.exp(std).clamp(min=1e-4)) - torch.log(torch.sqrt(2*math.pi*torch.exp(std)))
    return act_log_softmax


def compute_log_policy_prob(memories, nn_policy, device):
    '''
    Run the policy on the observation in the memory and compute the policy log probability
    '''
    n_mean = nn_policy(torch.tensor(np.array([m.obs for m in memories], dtype=np.float32)).to(device))
    n_mean = n_mean.type(torch.DoubleTensor)
    logstd = agent_policy.logstd.type(torch.DoubleTensor)

    actions = torch.DoubleTensor(np.array([m.action for m in memories])).to(device)

    return log_policy_prob(n_mean, logstd, actions)


def clipped_PPO_loss(memories, nn_policy, nn_value, old_log_policy, adv, epsilon, writer, device):
    '''
    Clipped PPO loss as in the paperself.
    It return the clipped policy loss and the value loss
    '''

    # state value
    rewards = torch.tensor(np.array([m.reward for m in memories], dtype=np.float32)).to(device)
    value = nn_value(torch.tensor(np.array([m.obs for m in memories], dtype=np.float32)).to(device))
    # Value loss
    vl_loss = F.mse_loss(value.squeeze(-1), rewards)

    new_log_policy = compute_log_policy_prob(memories, nn_policy, device)
    rt_theta = torch.exp(new_log_policy - old_log_policy.detach())

    if BUG != "adv_not_unsqueezed":
        adv = adv.unsqueeze(-1) # add a dimension because rt_theta has shape: [batch_size, n_actions]
    pg_loss = -torch.mean(torch.min(rt_theta*adv, torch.clamp(rt_theta, 1-epsilon, 1+epsilon)*adv))

    return pg_loss, vl_loss


Memory = namedtuple('Memory', ['obs', 'action', 'new_obs', 'reward', 'done', 'value', 'adv'], rename=False)

# Hyperparameters
BATCH_SIZE = 32  # (port) 64
PPO_EPOCHS = 7
device = 'cpu'
CLIP_GRADIENT = 0.2
CLIP_EPS = 0.2

TRAJECTORY_SIZE = 129  # (port) 2049
GAE_LAMBDA = 0.95
GAMMA = 0.99

POLICY_LR = 0.0004
VALUE_LR = 0.001

agent_policy = None  # (port) created by build, read by compute_log_policy_prob as in the script


def _iteration(env, policy, agent_value, optimizer_policy, optimizer_value):
    """(port) One iteration of the ``while n_iter < MAX_ITER`` loop, as written."""
    batch = env.steps(policy, agent_value)

    # Compute the policy probability with the old policy network
    old_log_policy = compute_log_policy_prob(batch, policy, device)

    # Gather the advantage from the memory..
    batch_adv = np.array([m.adv for m in batch])
    # .. and normalize it to stabilize network
    batch_adv = (batch_adv - np.mean(batch_adv)) / (np.std(batch_adv) + 1e-7)
    batch_adv = torch.tensor(batch_adv).to(device)

    # variables to accumulate losses
    pol_loss_acc = []
    val_loss_acc = []

    # execute PPO_EPOCHS epochs
    for s in range(PPO_EPOCHS):
        # compute the loss and optimize over mini batches of size BATCH_SIZE
        for mb in range(0, len(batch), BATCH_SIZE):
            mini_batch = batch[mb:mb+BATCH_SIZE]
            minib_old_log_policy = old_log_policy[mb:mb+BATCH_SIZE]
            minib_adv = batch_adv[mb:mb+BATCH_SIZE]

            # Compute the PPO clipped loss and the value loss
            pol_loss, val_loss = clipped_PPO_loss(mini_batch, policy, agent_value, minib_old_log_policy, minib_adv, CLIP_EPS, None, device)

            # optimize the policy network
            optimizer_policy.zero_grad()
            pol_loss.backward()
            optimizer_policy.step()

            # optimize the value network
            optimizer_value.zero_grad()
            val_loss.backward()
            optimizer_value.step()

            pol_loss_acc.append(float(pol_loss))
            val_loss_acc.append(float(val_loss))
    return np.mean(pol_loss_acc) + np.mean(val_loss_acc)


def _build(seed, bug=None):
    global agent_policy, BUG
    np.random.seed(seed)
    torch.manual_seed(seed)
    pendulum = Pendulum()
    pendulum.seed(seed)
    env = Env(pendulum, TRAJECTORY_SIZE, GAMMA, GAE_LAMBDA)
    obs_shape, act_shape = pendulum.observation_space.shape, pendulum.action_space.shape

    # initialize the actor-critic NN
    policy = A2C_policy(obs_shape, act_shape).to(device)
    agent_value = A2C_value(obs_shape).to(device)

    # initialize policy and value optimizer
    optimizer_policy = optim.Adam(policy.parameters(), lr=POLICY_LR)
    optimizer_value = optim.Adam(agent_value.parameters(), lr=VALUE_LR)

    probe_pendulum = Pendulum()
    probe_pendulum.seed(seed + 1000)
    agent_policy, BUG = policy, bug
    with torch.no_grad():
        probe = Env(probe_pendulum, TRAJECTORY_SIZE, GAMMA, GAE_LAMBDA).steps(policy, agent_value)
    batch = (torch.tensor(np.array([m.obs for m in probe], dtype=np.float32)),
             torch.tensor(np.array([m.reward for m in probe], dtype=np.float32)))

    def train_step():
        global agent_policy, BUG
        agent_policy, BUG = policy, bug  # (port) this program's policy and variant for the module-level functions
        return _iteration(env, policy, agent_value, optimizer_policy, optimizer_value)

    def loss_fn(value, rewards):
        return F.mse_loss(value.squeeze(-1), rewards)

    return Program(name="andri27rl_ppo", model=agent_value, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer_value, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the done branch of generalized_advantage_estimation left out, so the GAE recursion runs on across the
    # end of a game into the next game's values and rewards (the advantages and value targets are wrong).
    Bug("gae_done_reset_dropped", functools.partial(_build, bug="gae_done_reset_dropped"), "learning_ledger",
        ("TASK",)),
    # classic broadcast slip: the advantages not unsqueezed before multiplying the [B, 1] ratios, so the surrogate is
    # a [B, B] product of every ratio with every advantage.
    Bug("adv_not_unsqueezed", functools.partial(_build, bug="adv_not_unsqueezed"), "learning_ledger",
        ("OBJECTIVE",)),
]
