"""N-step learning DQN (chapter 07 of rainbow-is-all-you-need): two replay buffers sharing indices (1-step and 3-step
transitions, the n-step one built from a ``deque`` of the last n transitions by ``_get_n_step_info``), a 128-128 Q
network with a hard-updated target network, epsilon-greedy exploration with linear decay, and the sum of the 1-step
and the n-step smooth-L1 TD losses (``gamma ** n_step`` for the n-step target, no bootstrap past a termination).

Source: https://github.com/Curt-Park/rainbow-is-all-you-need
Commit: e864f0be10d028aebcbfac1d48c219813f3d48f9
Files: 07_n_step_learning.py (ReplayBuffer, Network, DQNAgent, the environment and parameter cells)
License: MIT (Copyright (c) 2019 Jinwoo Park (Curt); full text in LICENSES/Curt-Park-rainbow-is-all-you-need.txt)
Domain: RL, value-based (DQN with n-step returns, replay, target network)

Kept as written: the ReplayBuffer (numpy arrays, ``store`` returning the first transition of the n-step deque,
``sample_batch`` by ``np.random.choice``, ``sample_batch_from_idxs``, ``_get_n_step_info``), the Network, DQNAgent's
``select_action``, ``step`` (``terminated`` stored, ``done`` for the reset), ``update_model``, ``_compute_dqn_loss``,
``_target_hard_update``, the Adam optimizer with its default lr, the parameters cell (memory_size 5000, batch_size 32,
target_update 100, epsilon_decay 1/2000, gamma 0.99, n_step 3) and the loop body of ``train``.

Deviations from the original:
- gymnasium's CartPole-v1 (``max_episode_steps=200``) is replaced by the cart-pole written out in ``_cartpole.py``
  (the same equations and constants), wrapped to give what the agent calls: ``reset(seed=...)`` (reseeding as
  gymnasium does, so every reset with the same seed starts from the same state, as in the original),
  ``action_space.sample()`` / ``.n``, ``observation_space.shape`` and truncation at 200 steps;
- the notebook is a marimo app of cells: the cells' definitions are module-level code here; seeding (``np.random.seed``,
  ``torch.manual_seed``) uses the build's ``seed`` instead of 777; the device is the CPU (``print(self.device)``
  dropped);
- ``train(num_frames)`` is not run as one loop: ``train_step`` is one iteration of its ``for frame_idx`` body (select,
  step, reset at the episode's end, ``update_model`` once the buffer holds a batch, epsilon decay, target update every
  100 updates); at build time frames are played until the buffer holds a batch; ``train_step`` returns the loss of
  the update; plotting, the test episode and video rendering are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, C408, SIM210, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
import types
from collections import deque

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
from _cartpole import CartPole


class CartPoleV1(CartPole):
    """gymnasium.make("CartPole-v1", max_episode_steps=200) as the notebook uses it."""

    def __init__(self, seed, max_episode_steps=200):
        super().__init__(seed)
        self.max_episode_steps = max_episode_steps
        self.observation_space = types.SimpleNamespace(shape=(4,))
        self.action_space = types.SimpleNamespace(n=2, sample=lambda: int(self.action_rng.integers(2)))
        self.action_rng = np.random.default_rng(seed + 1)

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        return super().reset()

    def step(self, action):
        s, r, terminated, truncated, info = super().step(int(action))
        return s, r, terminated, truncated or self.steps >= self.max_episode_steps, info

    def close(self):
        pass


# ---- ReplayBuffer cell -------------------------------------------------------------------------------------------

class ReplayBuffer:
    """A simple numpy replay buffer."""

    def __init__(
        self,
        obs_dim: int,
        size: int,
        batch_size: int = 32,
        n_step: int = 3,
        gamma: float = 0.99,
        bug=None,
    ):
        self.obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.next_obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.acts_buf = np.zeros([size], dtype=np.float32)
        self.rews_buf = np.zeros([size], dtype=np.float32)
        self.terminated_buf = np.zeros(size, dtype=np.float32)
        self.max_size, self.batch_size = size, batch_size
        (
            self.ptr,
            self.size,
        ) = 0, 0

        # for N-step Learning
        self.n_step_buffer = deque(maxlen=n_step)
        self.n_step = n_step
        self.gamma = gamma
        self.bug = bug

    def store(
        self, obs: np.ndarray, act: np.ndarray, rew: float, next_obs: np.ndarray, terminated: bool
    ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, bool]:
        transition = (obs, act, rew, next_obs, terminated)
        self.n_step_buffer.append(transition)

        # single step transition is not ready
        if len(self.n_step_buffer) < self.n_step:
            return ()

        # make a n-step transition
        rew, next_obs, terminated = self._get_n_step_info(self.n_step_buffer, self.gamma)
        obs, act = self.n_step_buffer[0][:2]

        self.obs_buf[self.ptr] = obs
        self.next_obs_buf[self.ptr] = next_obs
        self.acts_buf[self.ptr] = act
        self.rews_buf[self.ptr] = rew
        self.terminated_buf[self.ptr] = terminated
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

        return self.n_step_buffer[0]

    def sample_batch(self) -> dict[str, np.ndarray]:
        indices = np.random.choice(self.size, size=self.batch_size, replace=False)

        return dict(
            obs=self.obs_buf[indices],
            next_obs=self.next_obs_buf[indices],
            acts=self.acts_buf[indices],
            rews=self.rews_buf[indices],
            terminated=self.terminated_buf[indices],
            # for N-step Learning
            indices=indices,
        )

    def sample_batch_from_idxs(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        # for N-step Learning
        return dict(
            obs=self.obs_buf[indices],
            next_obs=self.next_obs_buf[indices],
            acts=self.acts_buf[indices],
            rews=self.rews_buf[indices],
            terminated=self.terminated_buf[indices],
        )

    def _get_n_step_info(
        self, n_step_buffer: deque, gamma: float
    ) -> tuple[np.int64, np.ndarray, bool]:
        """Return n step rew, next_obs, and terminated."""
        # info of the last transition
        rew, next_obs, terminated = n_step_buffer[-1][-3:]

        for transition in reversed(list(n_step_buffer)[:-1]):
            r, n_o, d = transition[-3:]

            if self.bug == "n_step_return_across_episodes":
                rew = r + gamma * rew
            else:
                rew = r + gamma * rew * (1 - d)
            next_obs, terminated = (n_o, d) if d else (next_obs, terminated)

        return rew, next_obs, terminated

    def __len__(self) -> int:
        return self.size


# ---- Network cell ------------------------------------------------------------------------------------------------

class Network(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        """Initialization."""
        super(Network, self).__init__()

        self.layers = nn.Sequential(
            nn.Linear(in_dim, 128),
            nn.ReLU(),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Linear(128, out_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Forward method implementation."""
        return self.layers(x)


# ---- DQNAgent cell (the methods training uses) ------------------------------------------------------------------

class DQNAgent:
    """DQN Agent interacting with environment (see the notebook for the attribute list)."""

    def __init__(
        self,
        env,
        memory_size: int,
        batch_size: int,
        target_update: int,
        epsilon_decay: float,
        seed: int,
        max_epsilon: float = 1.0,
        min_epsilon: float = 0.1,
        gamma: float = 0.99,
        # N-step Learning
        n_step: int = 3,
        bug=None,
    ):
        obs_dim = env.observation_space.shape[0]
        action_dim = env.action_space.n

        self.env = env
        self.batch_size = batch_size
        self.epsilon = max_epsilon
        self.epsilon_decay = epsilon_decay
        self.seed = seed
        self.max_epsilon = max_epsilon
        self.min_epsilon = min_epsilon
        self.target_update = target_update
        self.gamma = gamma
        self.bug = bug

        # memory for 1-step Learning
        self.memory = ReplayBuffer(obs_dim, memory_size, batch_size, n_step=1, gamma=gamma)

        # memory for N-step Learning
        self.use_n_step = True if n_step > 1 else False
        if self.use_n_step:
            self.n_step = n_step
            self.memory_n = ReplayBuffer(
                obs_dim, memory_size, batch_size, n_step=n_step, gamma=gamma, bug=bug
            )

        # device: cpu / gpu
        self.device = torch.device("cpu")

        # networks: dqn, dqn_target
        self.dqn = Network(obs_dim, action_dim).to(self.device)
        self.dqn_target = Network(obs_dim, action_dim).to(self.device)
        self.dqn_target.load_state_dict(self.dqn.state_dict())
        self.dqn_target.eval()

        # optimizer
        self.optimizer = optim.Adam(self.dqn.parameters())

        # transition to store in memory
        self.transition = list()

        # mode: train / test
        self.is_test = False

    def select_action(self, state: np.ndarray) -> np.ndarray:
        """Select an action from the input state."""
        # epsilon greedy policy (disabled during test)
        if not self.is_test and self.epsilon > np.random.random():
            selected_action = self.env.action_space.sample()
        else:
            selected_action = self.dqn(torch.FloatTensor(state).to(self.device)).argmax()
            selected_action = selected_action.detach().cpu().numpy()

        if not self.is_test:
            self.transition = [state, selected_action]

        return selected_action

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.float64, bool]:
        """Take an action and return the response of the env."""
        next_state, reward, terminated, truncated, _ = self.env.step(action)
        done = terminated or truncated

        if not self.is_test:
            self.transition += [reward, next_state, terminated]

            # N-step transition
            if self.use_n_step:
                one_step_transition = self.memory_n.store(*self.transition)
            # 1-step transition
            else:
                one_step_transition = self.transition

            # add a single step transition
            if one_step_transition:
                self.memory.store(*one_step_transition)

        return next_state, reward, done

    def update_model(self) -> torch.Tensor:
        """Update the model by gradient descent."""
        samples = self.memory.sample_batch()
        indices = samples["indices"]
        loss = self._compute_dqn_loss(samples, self.gamma)

        # N-step Learning loss
        # we are gonna combine 1-step loss and n-step loss so as to
        # prevent high-variance.
        if self.use_n_step:
            samples = self.memory_n.sample_batch_from_idxs(indices)
            gamma = self.gamma**self.n_step
            n_loss = self._compute_dqn_loss(samples, gamma)
            loss += n_loss

        if self.bug == "zero_grad_after_backward":
            loss.backward()
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad()
            loss.backward()
        self.optimizer.step()

        return loss.item()

    def _compute_dqn_loss(self, samples: dict[str, np.ndarray], gamma: float) -> torch.Tensor:
        """Return dqn loss."""
        device = self.device  # for shortening the following lines
        state = torch.FloatTensor(samples["obs"]).to(device)
        next_state = torch.FloatTensor(samples["next_obs"]).to(device)
        action = torch.LongTensor(samples["acts"].reshape(-1, 1)).to(device)
        reward = torch.FloatTensor(samples["rews"].reshape(-1, 1)).to(device)
        terminated = torch.FloatTensor(samples["terminated"].reshape(-1, 1)).to(device)

        # G_t   = r + gamma * v(s_{t+1})  if state != Terminal
        #       = r                       otherwise
        curr_q_value = self.dqn(state).gather(1, action)
        next_q_value = self.dqn_target(next_state).max(dim=1, keepdim=True)[0].detach()
        mask = 1 - terminated
        target = (reward + gamma * next_q_value * mask).to(self.device)

        # calculate dqn loss
        loss = F.smooth_l1_loss(curr_q_value, target)

        return loss

    def _target_hard_update(self):
        """Hard update: target <- local."""
        self.dqn_target.load_state_dict(self.dqn.state_dict())


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)

    # environment
    env = CartPoleV1(seed, max_episode_steps=200)

    # parameters
    memory_size = 5000
    batch_size = 32
    target_update = 100
    epsilon_decay = 1 / 2000

    agent = DQNAgent(env, memory_size, batch_size, target_update, epsilon_decay, seed, bug=bug)

    # train(): the loop's state, advanced frame by frame until training is ready
    agent.is_test = False
    loop = {"state": agent.env.reset(seed=agent.seed)[0], "update_cnt": 0, "score": 0, "loss": None}

    def frame():
        action = agent.select_action(loop["state"])
        next_state, reward, done = agent.step(action)

        loop["state"] = next_state
        loop["score"] += reward

        # if episode ends
        if done:
            loop["state"], _ = agent.env.reset(seed=agent.seed)
            loop["score"] = 0

        # if training is ready
        if len(agent.memory) >= agent.batch_size:
            loop["loss"] = agent.update_model()
            loop["update_cnt"] += 1

            # linearly decrease epsilon
            agent.epsilon = max(
                agent.min_epsilon,
                agent.epsilon - (agent.max_epsilon - agent.min_epsilon) * agent.epsilon_decay,
            )

            # if hard update is needed
            if loop["update_cnt"] % agent.target_update == 0:
                agent._target_hard_update()
            return True
        return False

    while len(agent.memory) + 1 < agent.batch_size:
        frame()

    def train_step():
        while not frame():
            pass
        return loop["loss"]

    # the Program's batch: the paired 1-step / n-step transitions stored so far (one short of a batch), taken as
    # update_model takes them, by index, without drawing from the global numpy RNG
    indices = np.arange(len(agent.memory))
    samples = agent.memory.sample_batch_from_idxs(indices)
    samples_n = agent.memory_n.sample_batch_from_idxs(indices)
    state = torch.FloatTensor(samples["obs"])

    def loss_fn(q_values, targets):
        one, n = targets
        loss = None
        for s, gamma in ((one, agent.gamma), (n, agent.gamma**agent.n_step)):
            action = torch.LongTensor(s["acts"].reshape(-1, 1))
            reward = torch.FloatTensor(s["rews"].reshape(-1, 1))
            terminated = torch.FloatTensor(s["terminated"].reshape(-1, 1))
            curr_q_value = q_values.gather(1, action)
            next_q_value = agent.dqn_target(torch.FloatTensor(s["next_obs"])).max(dim=1, keepdim=True)[0].detach()
            target = reward + gamma * next_q_value * (1 - terminated)
            part = F.smooth_l1_loss(curr_q_value, target)
            loss = part if loss is None else loss + part
        return loss

    return Program(name="rainbowiaayn_nstep_dqn", model=agent.dqn, batch=(state, (samples, samples_n)),
                   loss_fn=loss_fn, optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the n-step return keeps summing rewards past a termination (the ``(1 - d)`` factor dropped in
    # ``_get_n_step_info``): the deque spans episode boundaries, so returns near an episode's end take the next
    # episode's rewards (classic n-step slip).
    Bug("n_step_return_across_episodes", functools.partial(_build, bug="n_step_return_across_episodes"),
        "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() moved after loss.backward(): every step applies a zero gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        ("layers.0.weight",)),
]
