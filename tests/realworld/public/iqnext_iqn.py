# ruff: noqa: PLR0402, UP008, UP039, SIM102
"""Implicit Quantile Network (IQN) DQN agent on CartPole, from BY571/IQN-and-Extensions.

Source: https://github.com/BY571/IQN-and-Extensions, commit c7742d35f415a629a79577066536f4a862de9410,
files ``model.py`` (IQN), ``agent.py`` (IQN_Agent, calculate_huber_loss), ``ReplayBuffers.py`` (ReplayBuffer),
``run.py`` (the frame loop; ``-agent iqn -env CartPole-v0``). License: MIT (Copyright (c) 2020 Sebastian Dittert;
full text in LICENSES/BY571-IQN-and-Extensions.txt).
Domain: RL, value-based (distributional: implicit quantiles with cosine tau embedding, quantile Huber loss,
Double-DQN-style target, soft target update).

Kept as written: ``IQN`` (linear head for vector states, cosine embedding of 64 cosines, ``ff_1``/``ff_2``,
``forward(input, num_tau)`` returning quantiles and taus, ``get_qvalues``); ``IQN_Agent`` for ``network="iqn"``,
``munchausen=0`` (Adam over ``qnetwork_local``, ``step`` adding to the n-step ``ReplayBuffer`` and learning every
``UPDATE_EVERY`` = worker frames once the memory holds more than BATCH_SIZE, ``act`` epsilon-greedy, ``learn``: target
quantiles from ``qnetwork_target`` at its greedy action, ``rewards + GAMMA**n_step * Q_next * (1 - dones)``, the
quantile Huber loss ``|taus - 1{td<0}| * huber`` summed over target quantiles and averaged, ``clip_grad_norm_(..., 1)``,
Adam step, ``soft_update`` with TAU); ``calculate_huber_loss``; ``ReplayBuffer`` (deque, n-step return,
``random.sample``); run.py's defaults (N 8, batch 32, n_step 1, lr 2.5e-4, gamma 0.99, tau 1e-3, eps linear from 1
over eps_frames 1e6 down to 0.01, worker 1) and its frame body.

Deviations from the original:
- gym's CartPole-v0 (through MultiPro.SubprocVecEnv with one worker) is replaced by the cart-pole written out in
  ``_cartpole.py`` (same equations and constants, seeded; cut at CartPole-v0's 200 steps), stepped directly with
  the state kept as a ``(1, 4)`` array as the vector env gives it; the environment is the synthetic data.
- sizes for 2 CPU cores: layer_size 512 -> 128; memory_size 1e5 -> 5000. Device: CPU.
- at build time 200 frames of the loop are played with ``agent.act`` at eps 1 and their transitions added with
  ``agent.memory.add`` (the buffer the first learn samples from); ``train_step`` is one frame of ``run()``
  (``act``, env step, ``agent.step``, which learns once per frame) and returns the ``Q_loss`` that ``agent.step``
  writes to its writer (a small stand-in for the tensorboard ``SummaryWriter`` records it).
- ``print(self.qnetwork_local)``, evaluation, score printing and model saving are dropped; the PER, noisy, dueling,
  Munchausen and image-input branches are left out (this run takes none of them).
- ``learn``'s target and quantile Huber loss lines are moved unchanged into ``quantile_loss`` (so the declared
  ``loss_fn`` runs the same lines), and ``Q_expected`` is computed before the target instead of after it (the
  taus and target quantiles are drawn from the global generator in the other order).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn.utils import clip_grad_norm_

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

MAX_EPISODE_STEPS = 200  # CartPole-v0
WARMUP = 200


class IQN(nn.Module):
    def __init__(self, state_size, action_size, layer_size, n_step, seed, N, dueling=False, noisy=False, device="cuda:0"):
        super(IQN, self).__init__()
        self.seed = torch.manual_seed(seed)
        self.input_shape = state_size
        self.state_dim = len(self.input_shape)
        self.action_size = action_size
        self.N = N
        self.n_cos = 64
        self.layer_size = layer_size
        self.pis = torch.FloatTensor([np.pi*i for i in range(1,self.n_cos+1)]).view(1,1,self.n_cos).to(device) # Starting from 0 as in the paper
        self.dueling = dueling
        self.device = device
        layer = nn.Linear

        # Network Architecture
        self.head = nn.Linear(self.input_shape[0], layer_size)
        self.cos_embedding = nn.Linear(self.n_cos, layer_size)
        self.ff_1 = layer(layer_size, layer_size)
        self.cos_layer_out = layer_size
        self.ff_2 = layer(layer_size, action_size)

    def calc_cos(self, batch_size, n_tau=8):
        """
        Calculating the cosinus values depending on the number of tau samples
        """
        taus = torch.rand(batch_size, n_tau).unsqueeze(-1).to(self.device) #(batch_size, n_tau, 1)  .to(self.device)
        cos = torch.cos(taus*self.pis)

        assert cos.shape == (batch_size,n_tau,self.n_cos), "cos shape is incorrect"
        return cos, taus

    def forward(self, input, num_tau=8):
        """
        Quantile Calculation depending on the number of tau

        Return:
        quantiles [ shape of (batch_size, num_tau, action_size)]
        taus [shape of ((batch_size, num_tau, 1))]

        """
        batch_size = input.shape[0]

        x = torch.relu(self.head(input))
        cos, taus = self.calc_cos(batch_size, num_tau) # cos shape (batch, num_tau, layer_size)
        cos = cos.view(batch_size*num_tau, self.n_cos)
        cos_x = torch.relu(self.cos_embedding(cos)).view(batch_size, num_tau, self.cos_layer_out) # (batch, n_tau, layer)

        # x has shape (batch, layer_size) for multiplication –> reshape to (batch, 1, layer)
        x = (x.unsqueeze(1)*cos_x).view(batch_size*num_tau, self.cos_layer_out)

        x = torch.relu(self.ff_1(x))
        out = self.ff_2(x)

        return out.view(batch_size, num_tau, self.action_size), taus

    def get_qvalues(self, inputs):
        quantiles, _ = self.forward(inputs, self.N)
        actions = quantiles.mean(dim=1)
        return actions


class ReplayBuffer:
    """Fixed-size buffer to store experience tuples."""

    def __init__(self, buffer_size, batch_size, device, seed, gamma, n_step=1, parallel_env=4):
        self.device = device
        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        self.experience = namedtuple("Experience", field_names=["state", "action", "reward", "next_state", "done"])
        self.seed = random.seed(seed)
        self.gamma = gamma
        self.n_step = n_step
        self.parallel_env = parallel_env
        self.n_step_buffer = [deque(maxlen=self.n_step) for i in range(parallel_env)]
        self.iter_ = 0

    def add(self, state, action, reward, next_state, done):
        """Add a new experience to memory."""
        if self.iter_ == self.parallel_env:
            self.iter_ = 0
        self.n_step_buffer[self.iter_].append((state, action, reward, next_state, done))
        if len(self.n_step_buffer[self.iter_]) == self.n_step:
            state, action, reward, next_state, done = self.calc_multistep_return(self.n_step_buffer[self.iter_])
            e = self.experience(state, action, reward, next_state, done)
            self.memory.append(e)
        self.iter_ += 1

    def calc_multistep_return(self, n_step_buffer):
        Return = 0
        for idx in range(self.n_step):
            Return += self.gamma**idx * n_step_buffer[idx][2]

        return n_step_buffer[0][0], n_step_buffer[0][1], Return, n_step_buffer[-1][3], n_step_buffer[-1][4]

    def sample(self):
        """Randomly sample a batch of experiences from memory."""
        experiences = random.sample(self.memory, k=self.batch_size)

        states = torch.from_numpy(np.stack([e.state for e in experiences if e is not None])).float().to(self.device)
        actions = torch.from_numpy(np.vstack([e.action for e in experiences if e is not None])).long().to(self.device)
        rewards = torch.from_numpy(np.vstack([e.reward for e in experiences if e is not None])).float().to(self.device)
        next_states = torch.from_numpy(np.stack([e.next_state for e in experiences if e is not None])).float().to(self.device)
        dones = torch.from_numpy(np.vstack([e.done for e in experiences if e is not None]).astype(np.uint8)).float().to(self.device)

        return (states, actions, rewards, next_states, dones)

    def __len__(self):
        """Return the current size of internal memory."""
        return len(self.memory)


def calculate_huber_loss(td_errors, k=1.0):
    """
    Calculate huber loss element-wisely depending on kappa k.
    """
    loss = torch.where(td_errors.abs() <= k, 0.5 * td_errors.pow(2), k * (td_errors.abs() - 0.5 * k))
    #assert loss.shape == (td_errors.shape[0], 8, 8), "huber loss has wrong shape"
    return loss


def quantile_loss(agent, Q_expected, taus, rewards, next_states, dones, bug=None):
    """``learn``'s target and quantile Huber loss (non-Munchausen branch), as written there."""
    Q_targets_next, _ = agent.qnetwork_target(next_states, agent.N)
    Q_targets_next = Q_targets_next.detach().cpu()
    action_indx = torch.argmax(Q_targets_next.mean(dim=1), dim=1, keepdim=True)
    Q_targets_next = Q_targets_next.gather(2, action_indx.unsqueeze(-1).expand(agent.BATCH_SIZE, agent.N, 1)).transpose(1,2)
    # Compute Q targets for current states
    if bug == "dones_dropped":
        Q_targets = rewards.unsqueeze(-1) + (agent.GAMMA**agent.n_step * Q_targets_next.to(agent.device))
    else:
        Q_targets = rewards.unsqueeze(-1) + (agent.GAMMA**agent.n_step * Q_targets_next.to(agent.device) * (1. - dones.unsqueeze(-1)))

    # Quantile Huber loss
    td_error = Q_targets - Q_expected
    assert td_error.shape == (agent.BATCH_SIZE, agent.N, agent.N), "wrong td error shape"
    huber_l = calculate_huber_loss(td_error, 1.0)
    if bug == "taus_on_target_axis":
        taus = taus.transpose(1, 2)
    quantil_l = abs(taus -(td_error.detach() < 0).float()) * huber_l / 1.0

    loss = quantil_l.sum(dim=1).mean(dim=1) # , keepdim=True if per weights get multipl
    loss = loss.mean()
    return loss


class IQN_Agent():
    """Interacts with and learns from the environment."""

    def __init__(self, state_size, action_size, network, munchausen, layer_size, n_step, BATCH_SIZE, BUFFER_SIZE,
                 LR, TAU, GAMMA, N, worker, device, seed, bug=None):
        self.state_size = state_size
        self.action_size = action_size
        self.network = network
        self.munchausen = munchausen
        self.seed = random.seed(seed)
        self.seed_t = torch.manual_seed(seed)
        self.device = device
        self.TAU = TAU
        self.N = N
        self.K = 32
        self.entropy_tau = 0.03
        self.lo = -1
        self.alpha = 0.9
        self.GAMMA = GAMMA

        self.BATCH_SIZE = BATCH_SIZE * worker
        self.Q_updates = 0
        self.n_step = n_step
        self.worker = worker
        self.UPDATE_EVERY = worker
        self.last_action = None
        self.bug = bug

        # IQN-Network
        self.qnetwork_local = IQN(state_size, action_size,layer_size, n_step, seed, N, device=device).to(device)
        self.qnetwork_target = IQN(state_size, action_size,layer_size, n_step, seed,N, device=device).to(device)

        self.optimizer = optim.Adam(self.qnetwork_local.parameters(), lr=LR)

        # Replay memory
        self.per = 0
        self.memory = ReplayBuffer(BUFFER_SIZE, self.BATCH_SIZE, self.device, seed, self.GAMMA, n_step, worker)

        # Initialize time step (for updating every UPDATE_EVERY steps)
        self.t_step = 0

    def step(self, state, action, reward, next_state, done, writer):
        # Save experience in replay memory
        self.memory.add(state, action, reward, next_state, done)

        # Learn every UPDATE_EVERY time steps.
        self.t_step = (self.t_step + 1) % self.UPDATE_EVERY
        if self.t_step == 0:
            # If enough samples are available in memory, get random subset and learn
            if len(self.memory) > self.BATCH_SIZE:
                experiences = self.memory.sample()
                loss = self.learn(experiences)
                self.Q_updates += 1
                writer.add_scalar("Q_loss", loss, self.Q_updates)

    def act(self, state, eps=0., eval=False):
        # Epsilon-greedy action selection
        if random.random() > eps: # select greedy action if random number is higher than epsilon or noisy network is used!
            state = np.array(state)
            state = torch.from_numpy(state).float().to(self.device)#.expand(self.K, self.state_size[0])
            self.qnetwork_local.eval()
            with torch.no_grad():
                action_values = self.qnetwork_local.get_qvalues(state)#.mean(0)
            self.qnetwork_local.train()
            action = np.argmax(action_values.cpu().data.numpy(), axis=1)
            return action
        else:
            if eval:
                action = random.choices(np.arange(self.action_size), k=1)
            else:
                action = random.choices(np.arange(self.action_size), k=self.worker)
            return action

    def learn(self, experiences):
        self.optimizer.zero_grad()
        states, actions, rewards, next_states, dones = experiences
        # Get expected Q values from local model
        Q_expected, taus = self.qnetwork_local(states, self.N)
        Q_expected = Q_expected.gather(2, actions.unsqueeze(-1).expand(self.BATCH_SIZE, self.N, 1))
        loss = quantile_loss(self, Q_expected, taus, rewards, next_states, dones, self.bug)

        # Minimize the loss
        loss.backward()
        clip_grad_norm_(self.qnetwork_local.parameters(),1)

        self.optimizer.step()

        # ------------------- update target network ------------------- #
        self.soft_update(self.qnetwork_local, self.qnetwork_target)
        return loss.detach().cpu().numpy()

    def soft_update(self, local_model, target_model):
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(self.TAU*local_param.data + (1.0-self.TAU)*target_param.data)


class _Writer:
    """Stands in for the tensorboard SummaryWriter: keeps the last value written."""

    def __init__(self):
        self.last = {}

    def add_scalar(self, tag, value, step):
        self.last[tag] = value


class _VecCartPole:
    """One cart-pole seen as a one-worker vector env: states ``(1, 4)``, auto-reset at the end of an episode."""

    def __init__(self, seed):
        self.env = CartPole(seed)
        self.t = 0

    def reset(self):
        self.t = 0
        s, _ = self.env.reset()
        return s[None]

    def step(self, action):
        s, r, done, _trunc, _ = self.env.step(int(action[0]))
        self.t += 1
        done = done or self.t >= MAX_EPISODE_STEPS
        return s[None], np.array([r]), np.array([done]), {}


def _build(seed, bug=None):
    np.random.seed(seed)
    random.seed(seed)
    torch.manual_seed(seed)
    envs = _VecCartPole(seed)
    agent = IQN_Agent(state_size=(4,), action_size=2, network="iqn", munchausen=0, layer_size=128, n_step=1,
                      BATCH_SIZE=32, BUFFER_SIZE=5000, LR=0.00025, TAU=1e-3, GAMMA=0.99, N=8, worker=1,
                      device="cpu", seed=seed, bug=bug)
    writer = _Writer()
    eps_start, min_eps, eps_frames = 1, 0.01, 1e6
    d_eps = eps_start - min_eps
    st = {"state": envs.reset(), "frame": 0, "eps": 1}

    for _ in range(WARMUP):
        action = agent.act(st["state"], 1.0)
        next_state, reward, done, _ = envs.step(action)
        for s, a, r, ns, d in zip(st["state"], action, reward, next_state, done):
            agent.memory.add(s, a, r, ns, d)
        st["state"] = envs.reset() if done.any() else next_state

    def train_step():
        st["frame"] += 1
        frame = st["frame"]
        state = st["state"]
        action = agent.act(state, st["eps"])
        next_state, reward, done, _ = envs.step(action) #returns np.stack(obs), np.stack(action) ...
        for s, a, r, ns, d in zip(state, action, reward, next_state, done):
            agent.step(s, a, r, ns, d, writer)
        state = next_state
        st["eps"] = max(eps_start - ((frame*d_eps)/eps_frames), min_eps)
        if done.any():
            state = envs.reset()
        st["state"] = state
        return float(writer.last["Q_loss"])

    states, actions, rewards, next_states, dones = agent.memory.sample()
    batch = (states, (actions, rewards, next_states, dones))

    def loss_fn(outputs, targets):
        actions, rewards, next_states, dones = targets
        Q_expected, taus = outputs
        Q_expected = Q_expected.gather(2, actions.unsqueeze(-1).expand(agent.BATCH_SIZE, agent.N, 1))
        return quantile_loss(agent, Q_expected, taus, rewards, next_states, dones, bug)

    return Program(name="iqnext_iqn", model=agent.qnetwork_local, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the terminal mask left out of the target: ``(1. - dones)`` dropped, the quantiles bootstrap through the end
    # of every episode (classic DQN slip).
    Bug("dones_dropped", functools.partial(_build, bug="dones_dropped"), "learning_ledger", ("TASK",)),
    # the quantile weights ``|tau - 1{td<0}|`` taken along the target-quantile axis instead of the predicted one
    # (classic; which axis of the (batch, N, N) TD error the taus belong to is asked in
    # https://github.com/BY571/IQN-and-Extensions/issues/5).
    Bug("taus_on_target_axis", functools.partial(_build, bug="taus_on_target_axis"), "learning_ledger",
        ("OBJECTIVE",)),
]
