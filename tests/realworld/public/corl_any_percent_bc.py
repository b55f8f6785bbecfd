# ruff: noqa: UP008, UP006, UP035
"""Behavior cloning on the best 10% of an offline dataset (BC-10%), from CORL.

Source: https://github.com/tinkoff-ai/CORL, commit 6afec90484bbf47dee05fdf525e26a3ebe028e9b,
file ``algorithms/offline/any_percent_bc.py``. License: Apache-2.0 (full text in LICENSES/tinkoff-ai-CORL.txt).
Domain: offline RL / imitation (behavior cloning on filtered trajectories).

Kept as written: ``TrainConfig``'s values that the loop uses (batch_size 256, discount 0.99, frac 0.1,
normalize True), ``compute_mean_std`` / ``normalize_states``, the tensor ``ReplayBuffer`` (``load_d4rl_dataset``,
``sample`` with ``np.random.randint``), ``keep_best_trajectories`` (discounted return per trajectory, the top
``frac`` kept), ``Actor`` (state->256->256->action, Tanh, scaled by ``max_action``), ``BC.train`` (``F.mse_loss``
of the actor's action against the dataset action, zero_grad/backward/step), Adam(lr=3e-4) over the actor, and
``train()``'s order: filter, normalize, load the buffer, seed, build actor and optimizer, then one
``trainer.train(replay_buffer.sample(batch_size))`` per time step.

Deviations from the original:
- d4rl / gym are not available: the dataset is synthetic, in d4rl's ``qlearning_dataset`` format, made from
  ``seed``: 40 episodes of 50 steps of the numpy Pendulum in ``_continuous_control.py``, each played by a behavior
  policy ``clip(g * (-(6 sin th + 1.5 th_dot)) + (1 - g) * noise, -2, 2)`` with a per-episode quality ``g`` drawn in
  [0, 1] (a medium-replay-like mix; the best episodes follow a learnable state->action rule). The last step of
  each episode is written as a terminal so ``keep_best_trajectories`` splits episodes (the original splits on
  terminals or at ``max_episode_steps``).
- the buffer is sized to the dataset (2_000_000 in the config); device is CPU; ``set_seed`` without an env.
- wandb, pyrallis, checkpoints, ``wrap_env`` and the periodic ``eval_actor`` rollouts are dropped (no gym env to
  wrap); ``BC.train`` returns its loss tensor too (the original returns only ``log_dict``) so the step reports it.
- ``train_step`` is one iteration of the ``for t in range(max_timesteps)`` loop.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import os
import pathlib
import random
import sys
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

TensorBatch = List[torch.Tensor]

batch_size = 256
discount = 0.99
frac = 0.1
normalize = True
N_EPISODES, EPISODE_LEN = 40, 50


def compute_mean_std(states: np.ndarray, eps: float) -> Tuple[np.ndarray, np.ndarray]:
    mean = states.mean(0)
    std = states.std(0) + eps
    return mean, std


def normalize_states(states: np.ndarray, mean: np.ndarray, std: np.ndarray):
    return (states - mean) / std


class ReplayBuffer:
    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        buffer_size: int,
        device: str = "cpu",
    ):
        self._buffer_size = buffer_size
        self._pointer = 0
        self._size = 0

        self._states = torch.zeros(
            (buffer_size, state_dim), dtype=torch.float32, device=device
        )
        self._actions = torch.zeros(
            (buffer_size, action_dim), dtype=torch.float32, device=device
        )
        self._rewards = torch.zeros((buffer_size, 1), dtype=torch.float32, device=device)
        self._next_states = torch.zeros(
            (buffer_size, state_dim), dtype=torch.float32, device=device
        )
        self._dones = torch.zeros((buffer_size, 1), dtype=torch.float32, device=device)
        self._device = device

    def _to_tensor(self, data: np.ndarray) -> torch.Tensor:
        return torch.tensor(data, dtype=torch.float32, device=self._device)

    # Loads data in d4rl format, i.e. from Dict[str, np.array].
    def load_d4rl_dataset(self, data: Dict[str, np.ndarray]):
        if self._size != 0:
            raise ValueError("Trying to load data into non-empty replay buffer")
        n_transitions = data["observations"].shape[0]
        if n_transitions > self._buffer_size:
            raise ValueError(
                "Replay buffer is smaller than the dataset you are trying to load!"
            )
        self._states[:n_transitions] = self._to_tensor(data["observations"])
        self._actions[:n_transitions] = self._to_tensor(data["actions"])
        self._rewards[:n_transitions] = self._to_tensor(data["rewards"][..., None])
        self._next_states[:n_transitions] = self._to_tensor(data["next_observations"])
        self._dones[:n_transitions] = self._to_tensor(data["terminals"][..., None])
        self._size += n_transitions
        self._pointer = min(self._size, n_transitions)

    def sample(self, batch_size: int) -> TensorBatch:
        indices = np.random.randint(0, min(self._size, self._pointer), size=batch_size)
        states = self._states[indices]
        actions = self._actions[indices]
        rewards = self._rewards[indices]
        next_states = self._next_states[indices]
        dones = self._dones[indices]
        return [states, actions, rewards, next_states, dones]


def set_seed(seed: int, deterministic_torch: bool = False):
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(deterministic_torch)


def keep_best_trajectories(
    dataset: Dict[str, np.ndarray],
    frac: float,
    discount: float,
    max_episode_steps: int = 1000,
):
    ids_by_trajectories = []
    returns = []
    cur_ids = []
    cur_return = 0
    reward_scale = 1.0
    for i, (reward, done) in enumerate(zip(dataset["rewards"], dataset["terminals"])):
        cur_return += reward_scale * reward
        cur_ids.append(i)
        reward_scale *= discount
        if done == 1.0 or len(cur_ids) == max_episode_steps:
            ids_by_trajectories.append(list(cur_ids))
            returns.append(cur_return)
            cur_ids = []
            cur_return = 0
            reward_scale = 1.0

    sort_ord = np.argsort(returns, axis=0)[::-1].reshape(-1)
    top_trajs = sort_ord[: max(1, int(frac * len(sort_ord)))]

    order = []
    for i in top_trajs:
        order += ids_by_trajectories[i]
    order = np.array(order)
    dataset["observations"] = dataset["observations"][order]
    dataset["actions"] = dataset["actions"][order]
    dataset["next_observations"] = dataset["next_observations"][order]
    dataset["rewards"] = dataset["rewards"][order]
    dataset["terminals"] = dataset["terminals"][order]


class Actor(nn.Module):
    def __init__(self, state_dim: int, action_dim: int, max_action: float):
        super(Actor, self).__init__()

        self.net = nn.Sequential(
            nn.Linear(state_dim, 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, action_dim),
            nn.Tanh(),
        )

        self.max_action = max_action

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.max_action * self.net(state)


class BC:
    def __init__(
        self,
        max_action: np.ndarray,
        actor: nn.Module,
        actor_optimizer: torch.optim.Optimizer,
        discount: float = 0.99,
        device: str = "cpu",
        bug=None,
    ):
        self.actor = actor
        self.actor_optimizer = actor_optimizer
        self.max_action = max_action
        self.discount = discount

        self.total_it = 0
        self.device = device
        self.bug = bug

    def train(self, batch: TensorBatch):
        log_dict = {}
        self.total_it += 1

        if self.bug == "state_from_next_observations":
            _, action, _, state, _ = batch
        else:
            state, action, _, _, _ = batch

        # Compute actor loss
        pi = self.actor(state)
        actor_loss = F.mse_loss(pi, action)
        log_dict["actor_loss"] = actor_loss.item()
        # Optimize the actor
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        return log_dict, actor_loss


def make_dataset(seed: int) -> Dict[str, np.ndarray]:
    """A d4rl ``qlearning_dataset``-shaped dict: Pendulum episodes from behavior policies of mixed quality."""
    env = Pendulum()
    env.seed(seed)
    rng = np.random.default_rng(seed + 1)
    obs, acts, rews, nxt, terms = [], [], [], [], []
    for _ in range(N_EPISODES):
        g = rng.uniform(0.0, 1.0)
        s = env.reset()
        for t in range(EPISODE_LEN):
            th_sin, th_dot = s[1], s[2]
            a = np.clip(g * (-(6.0 * th_sin + 1.5 * th_dot)) + (1 - g) * rng.uniform(-2, 2), -2.0, 2.0)
            a = np.array([a], dtype=np.float32)
            s2, r, _, _ = env.step(a)
            obs.append(s)
            acts.append(a)
            rews.append(r)
            nxt.append(s2)
            terms.append(1.0 if t == EPISODE_LEN - 1 else 0.0)
            s = s2
    return {"observations": np.array(obs, dtype=np.float32), "actions": np.array(acts, dtype=np.float32),
            "rewards": np.array(rews, dtype=np.float32), "next_observations": np.array(nxt, dtype=np.float32),
            "terminals": np.array(terms, dtype=np.float32)}


def _build(seed, bug=None):
    state_dim, action_dim = 3, 1
    dataset = make_dataset(seed)

    if bug == "discount_is_frac":
        keep_best_trajectories(dataset, frac, frac)
    else:
        keep_best_trajectories(dataset, frac, discount)

    if normalize:
        state_mean, state_std = compute_mean_std(dataset["observations"], eps=1e-3)
    else:
        state_mean, state_std = 0, 1

    dataset["observations"] = normalize_states(
        dataset["observations"], state_mean, state_std
    )
    dataset["next_observations"] = normalize_states(
        dataset["next_observations"], state_mean, state_std
    )
    replay_buffer = ReplayBuffer(
        state_dim,
        action_dim,
        dataset["observations"].shape[0],
        "cpu",
    )
    replay_buffer.load_d4rl_dataset(dataset)

    max_action = float(Pendulum().action_space.high[0])

    set_seed(seed)

    actor = Actor(state_dim, action_dim, max_action)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4)

    trainer = BC(max_action=max_action, actor=actor, actor_optimizer=actor_optimizer, discount=discount,
                 device="cpu", bug=bug)

    sample = replay_buffer.sample(batch_size)
    batch = (sample[0], sample[1])

    def loss_fn(pi, action):
        return F.mse_loss(pi, action)

    def train_step():
        batch = replay_buffer.sample(batch_size)
        _log_dict, loss = trainer.train(batch)
        return loss

    return Program(name="corl_any_percent_bc", model=actor, batch=batch, loss_fn=loss_fn,
                   optimizer=actor_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the fraction passed as the discount: ``keep_best_trajectories(dataset, config.frac, config.frac)`` ranks the
    # trajectories by their first few rewards and keeps the wrong 10% (fixed in this repository by commit
    # faf0c5e562f702df02fd89b8c734abe65d1038a6, https://github.com/tinkoff-ai/CORL/pull/5).
    Bug("discount_is_frac", functools.partial(_build, bug="discount_is_frac"), "learning_ledger", ("TASK",)),
    # the actor is fed the next observation of each transition against the action taken in the current one
    # (classic: batch unpacked in the wrong order, inputs misaligned with targets).
    Bug("state_from_next_observations", functools.partial(_build, bug="state_from_next_observations"),
        "learning_ledger", ("TASK",)),
]
