# ruff: noqa: UP008, PLR0402, UP039, SIM102
"""Normalized Advantage Functions (NAF, continuous Q-learning) on Pendulum, from BY571/Normalized-Advantage-Function-NAF-
(``naf.py``): the Q-network outputs a state value ``V``, a tanh action mean ``mu`` and the entries of a lower-triangular
matrix ``L`` (diagonal exponentiated, ``P = L * L^T``), so ``Q(s, a) = V(s) - 0.5 (a - mu)^T P (a - mu)``; actions are
sampled from ``MultivariateNormal(mu, P^-1)`` and clamped to [-1, 1]; one MSE update per frame on a replay batch
against ``r + gamma * V_target(s') * (1 - done)`` from a soft-updated target network (tau 0.005), Adam lr 1e-3,
gradient norm clipped to 1.

Source: https://github.com/BY571/Normalized-Advantage-Function-NAF-
Commit: 53c3201a3a71d2c90bf0e5228c3890eda24fdf78
Files: ``networks.py`` (``NAF``), ``agent.py`` (``NAF_Agent``: ``__init__``, ``step``, ``act``, ``learn``,
``soft_update``), ``replay_buffer.py`` (``ReplayBuffer``), ``naf.py`` (``run`` and the argument defaults)
License: MIT (Copyright (c) 2020 Sebastian Dittert; full text in LICENSES/BY571-Normalized-Advantage-Function-NAF-.txt)
Domain: RL, value-based for continuous actions (NAF, replay buffer, soft target network, BatchNorm Q-network)

Kept as written: ``NAF`` (two Linear + ReLU + BatchNorm1d layers, the action, value and matrix-entry heads, the
lower-triangular ``L`` filled with ``tril_indices``, ``P = L * L.transpose(2, 1)``, the advantage, the sampled and
clamped action), ``ReplayBuffer`` (n-step deque with nstep 1, ``calc_multistep_return``, ``sample``), ``NAF_Agent``
(``step`` learning every ``update_every`` frames once the memory holds more than a batch, ``act`` switching the
network to eval and back to train, ``learn`` with the target's ``V_`` under ``no_grad``, MSE, ``clip_grad_norm_``,
``soft_update``), ``run``'s frame loop body, the defaults gamma 0.99, tau 0.005, lr 1e-3, clip_grad 1.0, loss
"mse", nstep 1, update_every 1, n_updates 1, per 0, d2rl 0, seed 0.

Deviations from the original:
- ``ReplayBuffer.sample`` casts the sampled actions with ``.long()`` upstream, which truncates every continuous
  action in (-1, 1) to 0 before it enters the advantage; the port casts with ``.float()`` so the program is the
  correct NAF, and keeps the upstream line as the bug variant ``actions_cast_to_long``;
- gym's Pendulum-v0 is replaced by the pendulum written out in numpy in ``_continuous_control.py`` (same equations
  and constants, ``done`` at the 200-step limit, gym < 0.26 interface); the environment is seeded from ``seed``;
- sizes for 2 CPU cores: layer_size 256 -> 64, batch_size 256 -> 32, mem 100000 -> 20000;
- the unused branches are dropped: ``DeepNAF`` (d2rl 1), ``PrioritizedReplay`` and ``learn_per`` (per 1),
  ``act_without_noise`` and ``evaluate`` (evaluation only); tensorboard's writer is a stub and printing is dropped;
- one ``train_step`` runs 8 frames of ``run``'s loop body (act, env step, ``agent.step`` with its update; a reset
  when the episode ends) and returns the mean of their Q losses (the value ``step`` logs as "Q_loss"); ``build``
  first runs the loop until the memory holds more than a batch;
- the Program declares the local Q-network with a replay batch and its targets from the initial target network;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions import MultivariateNormal
from torch.nn.utils import clip_grad_norm_

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

FRAMES_PER_STEP = 8  # (port) frames of run()'s loop per train_step


# networks.py
class NAF(nn.Module):
    def __init__(self, state_size, action_size,layer_size, seed):
        super(NAF, self).__init__()
        self.seed = torch.manual_seed(seed)
        self.input_shape = state_size
        self.action_size = action_size

        self.head_1 = nn.Linear(self.input_shape, layer_size)
        self.bn1 = nn.BatchNorm1d(layer_size)
        self.ff_1 = nn.Linear(layer_size, layer_size)
        self.bn2 = nn.BatchNorm1d(layer_size)
        self.action_values = nn.Linear(layer_size, action_size)
        self.value = nn.Linear(layer_size, 1)
        self.matrix_entries = nn.Linear(layer_size, int(self.action_size*(self.action_size+1)/2))

    def forward(self, input_, action=None):
        x = torch.relu(self.head_1(input_))
        x = self.bn1(x)
        x = torch.relu(self.ff_1(x))
        x = self.bn2(x)
        action_value = torch.tanh(self.action_values(x))
        entries = torch.tanh(self.matrix_entries(x))
        V = self.value(x)

        action_value = action_value.unsqueeze(-1)

        # create lower-triangular matrix
        L = torch.zeros((input_.shape[0], self.action_size, self.action_size)).to(input_.device)

        # get lower triagular indices
        tril_indices = torch.tril_indices(row=self.action_size, col=self.action_size, offset=0)

        # fill matrix with entries
        L[:, tril_indices[0], tril_indices[1]] = entries
        L.diagonal(dim1=1,dim2=2).exp_()

        # calculate state-dependent, positive-definite square matrix
        P = L*L.transpose(2, 1)

        Q = None
        if action is not None:

            # calculate Advantage:
            A = (-0.5 * torch.matmul(torch.matmul((action.unsqueeze(-1) - action_value).transpose(2, 1), P), (action.unsqueeze(-1) - action_value))).squeeze(-1)

            Q = A + V

        # add noise to action mu:
        dist = MultivariateNormal(action_value.squeeze(-1), torch.inverse(P))
        action = dist.sample()
        action = torch.clamp(action, min=-1, max=1)
        return action, Q, V, action_value


# replay_buffer.py
class ReplayBuffer:
    """Fixed-size buffer to store experience tuples."""

    def __init__(self, buffer_size, batch_size, device, seed, gamma, nstep, bug=None):
        self.device = device
        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        self.experience = namedtuple("Experience", field_names=["state", "action", "reward", "next_state", "done"])
        self.seed = random.seed(seed)
        self.gamma = gamma
        self.n_step = nstep
        self.n_step_buffer = deque(maxlen=nstep)
        self.bug = bug

    def add(self, state, action, reward, next_state, done):
        """Add a new experience to memory."""

        self.n_step_buffer.append((state, action, reward, next_state, done))
        if len(self.n_step_buffer) == self.n_step:
            state, action, reward, next_state, done = self.calc_multistep_return()

            e = self.experience(state, action, reward, next_state, done)
            self.memory.append(e)

    def calc_multistep_return(self):
        Return = 0
        for idx in range(1):
            Return += self.gamma**idx * self.n_step_buffer[idx][2]

        return self.n_step_buffer[0][0], self.n_step_buffer[0][1], Return, self.n_step_buffer[-1][3], self.n_step_buffer[-1][4]

    def sample(self):
        """Randomly sample a batch of experiences from memory."""
        experiences = random.sample(self.memory, k=self.batch_size)

        states = torch.from_numpy(np.stack([e.state for e in experiences if e is not None])).float().to(self.device)
        actions = torch.from_numpy(np.vstack([e.action for e in experiences if e is not None]))
        # (port) upstream: .long(), which truncates the continuous actions; bug "actions_cast_to_long" keeps it
        actions = (actions.long() if self.bug == "actions_cast_to_long" else actions.float()).to(self.device)
        rewards = torch.from_numpy(np.vstack([e.reward for e in experiences if e is not None])).float().to(self.device)
        next_states = torch.from_numpy(np.stack([e.next_state for e in experiences if e is not None])).float().to(self.device)
        dones = torch.from_numpy(np.vstack([e.done for e in experiences if e is not None]).astype(np.uint8)).float().to(self.device)

        return (states, actions, rewards, next_states, dones)

    def __len__(self):
        """Return the current size of internal memory."""
        return len(self.memory)


# agent.py
class NAF_Agent():
    """Interacts with and learns from the environment."""

    def __init__(self, state_size, action_size, device, args, writer, bug=None):
        self.state_size = state_size
        self.action_size = action_size
        self.seed = random.seed(args.seed)
        self.device = device
        self.TAU = args.tau
        self.GAMMA = args.gamma
        self.nstep = args.nstep
        self.UPDATE_EVERY = args.update_every
        self.NUPDATES = args.n_updates
        self.BATCH_SIZE = args.batch_size
        self.Q_updates = 0
        self.per = args.per
        self.clip_grad = args.clip_grad
        self.bug = bug
        self.last_Q_losses = []  # (port) kept for train_step

        self.action_step = 4
        self.last_action = None

        # Q-Network
        self.qnetwork_local = NAF(state_size, action_size, args.layer_size, args.seed).to(device)
        self.qnetwork_target = NAF(state_size, action_size, args.layer_size, args.seed).to(device)

        self.writer = writer
        self.optimizer = optim.Adam(self.qnetwork_local.parameters(), lr=args.learning_rate)

        # Replay memory
        self.memory = ReplayBuffer(buffer_size=args.mem,
                                   batch_size=args.batch_size,
                                   device=self.device,
                                   seed=args.seed,
                                   gamma=args.gamma,
                                   nstep=args.nstep,
                                   bug=bug)

        # define loss
        if args.loss == "mse":
            self.loss = nn.MSELoss()
        elif args.loss == "huber":
            self.loss = nn.SmoothL1Loss()

        # Initialize time step (for updating every UPDATE_EVERY steps)
        self.t_step = 0

    def step(self, state, action, reward, next_state, done):
        # Save experience in replay memory
        self.memory.add(state, action, reward, next_state, done)

        # Learn every UPDATE_EVERY time steps.
        self.t_step = (self.t_step + 1) % self.UPDATE_EVERY
        if self.t_step == 0:
            # If enough samples are available in memory, get random subset and learn
            if len(self.memory) > self.BATCH_SIZE:
                Q_losses = []
                for _ in range(self.NUPDATES):
                    experiences = self.memory.sample()
                    loss = self.learn(experiences)
                    self.Q_updates += 1
                    Q_losses.append(loss)
                self.writer.add_scalar("Q_loss", np.mean(Q_losses), self.Q_updates)
                self.last_Q_losses.append(float(np.mean(Q_losses)))  # (port)

    def act(self, state):
        """Calculating the action"""

        state = torch.from_numpy(state).float().to(self.device)

        self.qnetwork_local.eval()
        with torch.no_grad():
            action, _, _, _ = self.qnetwork_local(state.unsqueeze(0))
        if self.bug != "left_in_eval_mode":
            self.qnetwork_local.train()
        return action.cpu().squeeze().numpy().reshape((self.action_size,))

    def learn(self, experiences):
        """Update value parameters using given batch of experience tuples."""

        states, actions, rewards, next_states, dones = experiences

        # get the Value for the next state from target model
        with torch.no_grad():
            _, _, V_, _ = self.qnetwork_target(next_states)

        # Compute Q targets for current states
        V_targets = rewards + (self.GAMMA**self.nstep * V_ * (1 - dones))

        # Get expected Q values from local model
        _, Q, _, _ = self.qnetwork_local(states, actions)

        # Compute loss
        loss = self.loss(Q, V_targets)

        # Minimize the loss
        self.optimizer.zero_grad()
        loss.backward()
        clip_grad_norm_(self.qnetwork_local.parameters(), self.clip_grad)
        self.optimizer.step()

        # ------------------- update target network ------------------- #
        self.soft_update(self.qnetwork_local, self.qnetwork_target)

        return loss.detach().cpu().numpy()

    def soft_update(self, local_model, target_model):
        """Soft update model parameters: θ_target = τ*θ_local + (1 - τ)*θ_target"""
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(self.TAU*local_param.data + (1.0-self.TAU)*target_param.data)


class _Writer:
    """(port) tensorboard's SummaryWriter, stubbed."""

    def add_scalar(self, *args):
        pass


def _build(seed, bug=None):
    args = types.SimpleNamespace(frames=40000, eval_every=5000, eval_runs=2, mem=20000, per=0, batch_size=32,
                                 nstep=1, d2rl=0, layer_size=64, gamma=0.99, tau=0.005, learning_rate=1e-3,
                                 update_every=1, n_updates=1, seed=seed, clip_grad=1.0, loss="mse")
    device = torch.device("cpu")
    env = Pendulum()
    np.random.seed(seed)
    env.seed(seed)
    action_size = env.action_space.shape[0]
    state_size = env.observation_space.shape[0]
    agent = NAF_Agent(state_size=state_size, action_size=action_size, device=device, args=args, writer=_Writer(),
                      bug=bug)
    loop = {"state": env.reset()}

    def frame():
        # run(): one pass of the frame loop's body
        state = loop["state"]
        action = agent.act(state)
        next_state, reward, done, _ = env.step(action)
        agent.step(state, action, reward, next_state, done)
        loop["state"] = env.reset() if done else next_state

    while len(agent.memory) <= agent.BATCH_SIZE:
        frame()
    states, actions, rewards, next_states, dones = agent.memory.sample()
    with torch.no_grad():
        _, _, V_, _ = agent.qnetwork_target(next_states)
    batch = ({"input_": states, "action": actions}, rewards + args.gamma * V_ * (1 - dones))

    def train_step():
        agent.last_Q_losses = []
        for _ in range(FRAMES_PER_STEP):
            frame()
        return float(np.mean(agent.last_Q_losses))

    def loss_fn(outputs, V_targets):
        _, Q, _, _ = outputs
        return agent.loss(Q, V_targets)

    return Program(name="by571naf_pendulum", model=agent.qnetwork_local, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the upstream line itself (replay_buffer.py at the ported commit,
    # https://github.com/BY571/Normalized-Advantage-Function-NAF-/blob/53c3201a3a71d2c90bf0e5228c3890eda24fdf78/replay_buffer.py):
    # ReplayBuffer.sample casts the continuous actions with .long(), so every action in (-1, 1) reaches the advantage
    # as 0 and Q is fitted at the wrong actions (the data no longer matches the transitions collected).
    Bug("actions_cast_to_long", functools.partial(_build, bug="actions_cast_to_long"), "learning_ledger", ("TASK",)),
    # classic: act() switches the network to eval for acting and never back to train, so every update runs the
    # BatchNorm layers (bn1, bn2) on their running statistics (the model is trained in eval mode).
    # Declared in review after first contact (its first-contact result stays as measured): the model is in eval mode
    # from the first update on (the program's own warm-up already ran act()), so no call trained in train mode before;
    # the FAIL names the defect itself, batch norm running a training forward in eval mode on statistics never
    # estimated ("the model is trained in eval mode").
    Bug("left_in_eval_mode", functools.partial(_build, bug="left_in_eval_mode"), "step_probe", ("bn1",),
        kind="step.norm_statistics_never_estimated"),
]
