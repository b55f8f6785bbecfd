# ruff: noqa: UP008, RUF059
"""Hierarchical Actor-Critic (nikhilbarhate99/Hierarchical-Actor-Critic-HAC-PyTorch) on the continuous mountain car:
two levels of goal-conditioned DDPG (tanh actors scaled by bounds plus an offset, UVFA critics ``-H * sigmoid``),
the top level proposing subgoal states to the bottom one for up to ``H`` steps each, subgoal testing with
probability ``lamda`` (a failed test stored with reward ``-H`` and no discount), hindsight action transitions (the
reached state replaces the proposed subgoal) and hindsight goal transitions (the episode's last state relabelled as
the goal), and after every episode ``n_iter`` DDPG updates per level (MSE on ``r + (1 - done) * gamma * Q'``, then
the actor by ``-Q``), each with its own Adam.

Source: https://github.com/nikhilbarhate99/Hierarchical-Actor-Critic-HAC-PyTorch
Commit: 96bac543bf4f37d17e56e822608a4979ecb4b13e
Files: DDPG.py, HAC.py, train.py (utils.py and asset/continuous_mountain_car.py in the helper ``_hacpytorch_lib.py``)
License: MIT (Copyright (c) 2019 Nikhil Barhate; full text in LICENSES/nikhilbarhate99-Hierarchical-Actor-Critic-HAC-PyTorch.txt)
Domain: RL, hierarchical, goal-conditioned actor-critic (HAC: DDPG levels with hindsight relabelling)

Kept as written: ``Actor``, ``Critic``, ``DDPG`` (``select_action``, ``update``), ``HAC`` (``check_goal``,
``run_HAC``, ``update``), ``ReplayBuffer``, train.py's hyperparameters (k_level 2, H 20, lamda 0.3, gamma 0.95,
batch_size 100, lr 0.001, the bounds, offsets, clips, noises, goal state and threshold) and its episode loop body
(reset, ``run_HAC`` from the top level, ``agent.update``).

Deviations:
- gym's registered ``MountainCarContinuous-h-v1`` (the repository's asset/continuous_mountain_car.py) is its
  ``step`` / ``reset`` written out in numpy in the helper (same constants, goal position 0.45, no time limit as registered,
  rendering dropped, seeded); the environment is the synthetic data.
- ``np.random`` (exploration, subgoal tests, buffer sampling) is a ``numpy.random.RandomState(seed)`` instance and
  ``torch.manual_seed(seed)`` is set, so a build is reproducible from ``seed``; the device is the CPU.
- n_iter 100 -> 10 updates per level and episode (2 CPU cores); ``train_step`` is one episode of train.py's loop
  (reset, ``run_HAC``, ``agent.update``) and returns the bottom level's last critic loss (``DDPG.update`` returns
  nothing); ``update``'s critic loss lines are also the Program's ``loss_fn`` (``critic_loss``). Saving, the log file
  and printing are left out.
- ``np.array(..., copy=False)`` in ``ReplayBuffer.sample`` (an error under numpy 2 when a copy is needed) is
  ``np.asarray``.
- ``run_HAC``'s high-level and low-level branches are moved, unchanged, into ``_subgoal_step`` and
  ``_primitive_step`` (the function's length).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _hacpytorch_lib import Continuous_MountainCarEnv, ReplayBuffer

device = torch.device("cpu")


# ---- DDPG.py -----------------------------------------------------------------------------------------------------
class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, action_bounds, offset):
        super(Actor, self).__init__()
        # actor
        self.actor = nn.Sequential(
                        nn.Linear(state_dim + state_dim, 64),
                        nn.ReLU(),
                        nn.Linear(64, 64),
                        nn.ReLU(),
                        nn.Linear(64, action_dim),
                        nn.Tanh()
                        )
        # max value of actions
        self.action_bounds = action_bounds
        self.offset = offset

    def forward(self, state, goal):
        return (self.actor(torch.cat([state, goal], 1)) * self.action_bounds) + self.offset


class Critic(nn.Module):
    def __init__(self, state_dim, action_dim, H):
        super(Critic, self).__init__()
        # UVFA critic
        self.critic = nn.Sequential(
                        nn.Linear(state_dim + action_dim + state_dim, 64),
                        nn.ReLU(),
                        nn.Linear(64, 64),
                        nn.ReLU(),
                        nn.Linear(64, 1),
                        nn.Sigmoid()
                        )
        self.H = H

    def forward(self, state, action, goal):
        # rewards are in range [-H, 0]
        return -self.critic(torch.cat([state, action, goal], 1)) * self.H


def critic_loss(ddpg, q, targets, bug=None):
    """(port) ``DDPG.update``'s target and critic loss; ``q`` is ``self.critic(state, action, goal)``."""
    reward, next_state, goal, gamma, done = targets
    # select next action
    next_action = ddpg.actor(next_state, goal).detach()

    # Compute target Q-value:
    if bug == "target_q_not_detached":
        target_Q = ddpg.critic(next_state, next_action, goal)
    else:
        target_Q = ddpg.critic(next_state, next_action, goal).detach()
    target_Q = reward + ((1-done) * gamma * target_Q)

    # Optimize Critic:
    return ddpg.mseLoss(q, target_Q)


class DDPG:
    def __init__(self, state_dim, action_dim, action_bounds, offset, lr, H, bug=None):

        self.actor = Actor(state_dim, action_dim, action_bounds, offset).to(device)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=lr)

        self.critic = Critic(state_dim, action_dim, H).to(device)
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=lr)

        self.mseLoss = torch.nn.MSELoss()
        self.bug = bug

    def select_action(self, state, goal):
        state = torch.FloatTensor(state.reshape(1, -1)).to(device)
        goal = torch.FloatTensor(goal.reshape(1, -1)).to(device)
        return self.actor(state, goal).detach().cpu().data.numpy().flatten()

    def tensors(self, buffer, batch_size):
        """(port) ``update``'s first lines: a sampled batch converted into tensors."""
        # Sample a batch of transitions from replay buffer:
        state, action, reward, next_state, goal, gamma, done = buffer.sample(batch_size)

        # convert np arrays into tensors
        state = torch.FloatTensor(state).to(device)
        action = torch.FloatTensor(action).to(device)
        reward = torch.FloatTensor(reward).reshape((batch_size,1)).to(device)
        next_state = torch.FloatTensor(next_state).to(device)
        goal = torch.FloatTensor(goal).to(device)
        gamma = torch.FloatTensor(gamma).reshape((batch_size,1)).to(device)
        done = torch.FloatTensor(done).reshape((batch_size,1)).to(device)
        return (state, action, goal), (reward, next_state, goal, gamma, done)

    def update(self, buffer, n_iter, batch_size):

        for i in range(n_iter):
            (state, action, goal), targets = self.tensors(buffer, batch_size)

            # Optimize Critic:
            loss = critic_loss(self, self.critic(state, action, goal), targets, self.bug)
            if self.bug != "critic_zero_grad_dropped":
                self.critic_optimizer.zero_grad()
            loss.backward()
            self.critic_optimizer.step()

            # Compute actor loss:
            actor_loss = -self.critic(state, self.actor(state, goal), goal).mean()

            # Optimize the actor
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
        return loss


# ---- HAC.py ------------------------------------------------------------------------------------------------------
class HAC:
    def __init__(self, k_level, H, state_dim, action_dim, render, threshold,
                 action_bounds, action_offset, state_bounds, state_offset, lr, np_random, bug=None):

        # adding lowest level
        self.HAC = [DDPG(state_dim, action_dim, action_bounds, action_offset, lr, H, bug)]
        self.replay_buffer = [ReplayBuffer(np_random)]

        # adding remaining levels
        for _ in range(k_level-1):
            self.HAC.append(DDPG(state_dim, state_dim, state_bounds, state_offset, lr, H, bug))
            self.replay_buffer.append(ReplayBuffer(np_random))

        # set some parameters
        self.k_level = k_level
        self.H = H
        self.action_dim = action_dim
        self.state_dim = state_dim
        self.threshold = threshold
        self.render = render
        self.np_random, self.bug = np_random, bug

        # logging parameters
        self.goals = [None]*self.k_level
        self.reward = 0
        self.timestep = 0

    def set_parameters(self, lamda, gamma, action_clip_low, action_clip_high,
                       state_clip_low, state_clip_high, exploration_action_noise, exploration_state_noise):

        self.lamda = lamda
        self.gamma = gamma
        self.action_clip_low = action_clip_low
        self.action_clip_high = action_clip_high
        self.state_clip_low = state_clip_low
        self.state_clip_high = state_clip_high
        self.exploration_action_noise = exploration_action_noise
        self.exploration_state_noise = exploration_state_noise

    def check_goal(self, state, goal, threshold):
        for i in range(self.state_dim):
            if abs(state[i]-goal[i]) > threshold[i]:
                return False
        return True

    def run_HAC(self, env, i_level, state, goal, is_subgoal_test):
        next_state = None
        done = None
        goal_transitions = []

        # logging updates
        self.goals[i_level] = goal

        # H attempts
        for _ in range(self.H):
            # if this is a subgoal test, then next/lower level goal has to be a subgoal test
            is_next_subgoal_test = is_subgoal_test

            action = self.HAC[i_level].select_action(state, goal)

            #   <================ high level policy ================>
            if i_level > 0:
                action, next_state, done = self._subgoal_step(env, i_level, state, goal, action,
                                                              is_subgoal_test, is_next_subgoal_test)

            #   <================ low level policy ================>
            else:
                action, next_state, done = self._primitive_step(env, action, is_subgoal_test)

            #   <================ finish one step/transition ================>

            # check if goal is achieved
            goal_achieved = self.check_goal(next_state, goal, self.threshold)

            # hindsight action transition
            if goal_achieved:
                self.replay_buffer[i_level].add((state, action, 0.0, next_state, goal, 0.0, float(done)))
            else:
                self.replay_buffer[i_level].add((state, action, -1.0, next_state, goal, self.gamma, float(done)))

            # copy for goal transition
            goal_transitions.append([state, action, -1.0, next_state, None, self.gamma, float(done)])

            state = next_state

            if done or goal_achieved:
                break

        #   <================ finish H attempts ================>

        # hindsight goal transition
        # last transition reward and discount is 0
        goal_transitions[-1][2] = 0.0
        goal_transitions[-1][5] = 0.0
        for transition in goal_transitions:
            # last state is goal for all transitions
            transition[4] = goal if self.bug == "hindsight_goal_not_relabelled" else next_state
            self.replay_buffer[i_level].add(tuple(transition))

        return next_state, done

    def _subgoal_step(self, env, i_level, state, goal, action, is_subgoal_test, is_next_subgoal_test):
        """(port) ``run_HAC``'s high-level branch, unchanged."""
        # add noise or take random action if not subgoal testing
        if not is_subgoal_test:
            if self.np_random.random_sample() > 0.2:
                action = action + self.np_random.normal(0, self.exploration_state_noise)
                action = action.clip(self.state_clip_low, self.state_clip_high)
            else:
                action = self.np_random.uniform(self.state_clip_low, self.state_clip_high)

        # Determine whether to test subgoal (action)
        if self.np_random.random_sample() < self.lamda:
            is_next_subgoal_test = True

        # Pass subgoal to lower level
        next_state, done = self.run_HAC(env, i_level-1, state, action, is_next_subgoal_test)

        # if subgoal was tested but not achieved, add subgoal testing transition
        if is_next_subgoal_test and not self.check_goal(action, next_state, self.threshold):
            self.replay_buffer[i_level].add((state, action, -self.H, next_state, goal, 0.0, float(done)))

        # for hindsight action transition
        action = next_state
        return action, next_state, done

    def _primitive_step(self, env, action, is_subgoal_test):
        """(port) ``run_HAC``'s low-level branch, unchanged (rendering dropped)."""
        # add noise or take random action if not subgoal testing
        if not is_subgoal_test:
            if self.np_random.random_sample() > 0.2:
                action = action + self.np_random.normal(0, self.exploration_action_noise)
                action = action.clip(self.action_clip_low, self.action_clip_high)
            else:
                action = self.np_random.uniform(self.action_clip_low, self.action_clip_high)

        # take primitive action
        next_state, rew, done, _ = env.step(action)

        # this is for logging
        self.reward += rew
        self.timestep +=1
        return action, next_state, done

    def update(self, n_iter, batch_size):
        losses = []
        for i in range(self.k_level):
            losses.append(self.HAC[i].update(self.replay_buffer[i], n_iter, batch_size))
        return losses


# ---- train.py ----------------------------------------------------------------------------------------------------
def make_agent(seed, bug=None):
    """(port) train.py's hyperparameters, environment and agent."""
    env = Continuous_MountainCarEnv(seed)
    state_dim, action_dim = 2, 1
    action_bounds = 1.0  # env.action_space.high[0]
    action_offset = np.array([0.0])
    action_offset = torch.FloatTensor(action_offset.reshape(1, -1)).to(device)
    action_clip_low = np.array([-1.0 * action_bounds])
    action_clip_high = np.array([action_bounds])

    # state bounds and offset
    state_bounds_np = np.array([0.9, 0.07])
    state_bounds = torch.FloatTensor(state_bounds_np.reshape(1, -1)).to(device)
    state_offset =  np.array([-0.3, 0.0])
    state_offset = torch.FloatTensor(state_offset.reshape(1, -1)).to(device)
    state_clip_low = np.array([-1.2, -0.07])
    state_clip_high = np.array([0.6, 0.07])

    # exploration noise std for primitive action and subgoals
    exploration_action_noise = np.array([0.1])
    exploration_state_noise = np.array([0.02, 0.01])

    goal_state = np.array([0.48, 0.04])        # final goal state to be achived
    threshold = np.array([0.01, 0.02])         # threshold value to check if goal state is achieved

    k_level, H, lamda, gamma, lr = 2, 20, 0.3, 0.95, 0.001
    torch.manual_seed(seed)
    agent = HAC(k_level, H, state_dim, action_dim, False, threshold,
                action_bounds, action_offset, state_bounds, state_offset, lr, np.random.RandomState(seed), bug)
    agent.set_parameters(lamda, gamma, action_clip_low, action_clip_high,
                         state_clip_low, state_clip_high, exploration_action_noise, exploration_state_noise)
    return env, agent, goal_state, k_level


N_ITER, BATCH_SIZE = 10, 100


def _build(seed, bug=None):
    env, agent, goal_state, k_level = make_agent(seed, bug)

    def train_step():
        agent.reward = 0
        agent.timestep = 0

        state = env.reset()
        # collecting experience in environment
        last_state, done = agent.run_HAC(env, k_level-1, state, goal_state, False)

        # update all levels
        return agent.update(N_ITER, BATCH_SIZE)[0]

    # one episode collected before the Program is handed over, so the buffers can be sampled
    agent.run_HAC(env, k_level - 1, env.reset(), goal_state, False)
    bottom = agent.HAC[0]

    def loss_fn(q, targets):
        return critic_loss(bottom, q, targets, bug)

    batch = bottom.tensors(agent.replay_buffer[0], BATCH_SIZE)
    return Program(name="hacpytorch_mountaincar", model=bottom.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=bottom.critic_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the hindsight goal transitions keep the episode's original goal instead of the state reached last,
    # so the relabelled rewards (0 at the last step) are attached to a goal that was not reached.
    Bug("hindsight_goal_not_relabelled", functools.partial(_build, bug="hindsight_goal_not_relabelled"),
        "learning_ledger", ("TASK",)),
    # classic: the ``.detach()`` left off the bootstrapped target, so the critic loss also moves Q(s', a') toward Q(s, a).
    Bug("target_q_not_detached", functools.partial(_build, bug="target_q_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``critic_optimizer.zero_grad()`` left out, so each critic step adds the past critic gradients and the
    # actor loss's gradients on the critic.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
