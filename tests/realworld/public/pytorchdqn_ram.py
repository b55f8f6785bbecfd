# ruff: noqa: PLR0402, UP004, UP008, C408, F841
"""DQN on low-dimensional "RAM" observations (Berkeley hw3 loop: frame replay buffer, RMSprop, clipped Bellman
error fed straight to ``backward``), from pytorch-dqn.

Source: https://github.com/transedward/pytorch-dqn (now hungtuchen/pytorch-dqn), commit
1ffda6f3724b3bb37c3195b09b651b1682d4d4fd, files ``ram.py`` (hyperparameters, ``OptimizerSpec``), ``dqn_learn.py``
(``dqn_learing``), ``dqn_model.py`` (``DQN_RAM``), ``utils/replay_buffer.py`` and ``utils/schedule.py``
(``LinearSchedule``); the repository reuses the code of berkeleydeeprlcourse/homework hw3. License: MIT (Copyright
(c) 2017 Chen Hung Tu; full text in LICENSES/transedward-pytorch-dqn.txt).

Kept as written: ``DQN_RAM`` (fc1..fc4, 256-128-64, ReLU); ram.py's BATCH_SIZE 32, GAMMA 0.99, LEARNING_FREQ 4,
FRAME_HISTORY_LEN 1, RMSprop(lr 0.00025, alpha 0.95, eps 0.01) built from the ``OptimizerSpec``, the
``LinearSchedule(., 0.1)`` exploration; ``ReplayBuffer`` (``store_frame`` / ``store_effect`` / ``can_sample`` /
``sample`` / ``_encode_observation`` for low-dimensional frames stored as uint8, ``sample_n_unique``);
``dqn_learing``'s loop body: store the frame, epsilon-greedy action once ``t > learning_starts`` (random before),
env step, reward clipped to [-1, 1], ``store_effect``, reset on done, and every ``learning_freq`` steps one replay
update: observations divided by 255, ``Q(obs).gather``, ``target_Q(next_obs).detach().max(1)[0]`` times
``not_done_mask = 1 - done_mask``, the Bellman error clipped to [-1, 1] and multiplied by -1, ``zero_grad``,
``current_Q_values.backward(d_error.data.unsqueeze(1))``, ``step``, and the target copy every
``target_update_freq`` updates.

Deviations:
- gym's Pong-ram-v0 (128 RAM bytes, 6 actions) is replaced by the cart-pole written out in ``_cartpole.py``
  (seeded): its 4 state variables are written as 4 "RAM" bytes (each clipped to a fixed range and quantized to
  0..255, see ``ram_bytes``), so the uint8 buffer and the /255 scaling run as written; ``DQN_RAM(4, 2)``. The
  environment is the synthetic data.
- sizes for 2 CPU cores: REPLAY_BUFFER_SIZE 1000000 -> 5000, LEARNING_STARTS 50000 -> 600, TARGER_UPDATE_FREQ
  10000 -> 100, the exploration schedule's 1000000 steps -> 5000.
- the code was written for PyTorch 0.1 (no broadcasting): ``target_Q_values - current_Q_values`` subtracted a
  ``[B]`` from a ``[B, 1]`` element by element. Modern broadcasting would make a ``[B, B]`` matrix and the
  ``backward`` fails (https://github.com/hungtuchen/pytorch-dqn/issues/3, issues/5), so the element-wise meaning
  is written out: ``target_Q_values - current_Q_values.squeeze(1)``; the ``backward`` line is unchanged. For the
  same reason the greedy action's ``max(1)`` is given ``keepdim=True`` (PyTorch 0.1's default), so the loop's
  ``[0, 0]`` indexing runs.
- the ``Variable`` subclass and ``dtype`` / ``USE_CUDA`` plumbing are dropped (tensors are used directly; the
  ``volatile=True`` action selection runs under ``torch.no_grad()``); ``np.bool`` (removed from numpy) is ``bool``.
- ``random.random`` / ``random.randrange`` / ``random.randint`` come from a ``random.Random(seed)`` instance.
- the ``for t in count()`` loop is not run to a stopping criterion: at build time it runs until the learning
  starts (the buffer filled with LEARNING_STARTS random-action steps); ``train_step`` runs the loop body for
  ``learning_freq`` env steps, the last of which does one replay update. It returns the update's Huber loss
  (summed: its gradient is the clipped error the loop hands to ``backward``), which the original never computes.
- the Monitor statistics, logging and pickle dump are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
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
from _cartpole import CartPole

# ram.py
BATCH_SIZE = 32
GAMMA = 0.99
REPLAY_BUFFER_SIZE = 5000  # 1000000
LEARNING_STARTS = 600  # 50000
LEARNING_FREQ = 4
FRAME_HISTORY_LEN = 1
TARGER_UPDATE_FREQ = 100  # 10000
LEARNING_RATE = 0.00025
ALPHA = 0.95
EPS = 0.01
SCHEDULE_TIMESTEPS = 5000  # 1000000

OptimizerSpec = namedtuple("OptimizerSpec", ["constructor", "kwargs"])

# the cart-pole's state written as RAM bytes: each variable clipped to [-r, r] and mapped to 0..255
_RANGES = np.array([2.4, 3.0, 0.21, 3.5])


def ram_bytes(state):
    scaled = (np.clip(state, -_RANGES, _RANGES) + _RANGES) / (2 * _RANGES)
    return np.round(scaled * 255).astype(np.uint8)


class DQN_RAM(nn.Module):
    def __init__(self, in_features=4, num_actions=18):
        """
        Initialize a deep Q-learning network for testing algorithm
            in_features: number of features of input.
            num_actions: number of action-value to output, one-to-one correspondence to action in game.
        """
        super(DQN_RAM, self).__init__()
        self.fc1 = nn.Linear(in_features, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 64)
        self.fc4 = nn.Linear(64, num_actions)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        return self.fc4(x)


class LinearSchedule(object):
    def __init__(self, schedule_timesteps, final_p, initial_p=1.0):
        self.schedule_timesteps = schedule_timesteps
        self.final_p            = final_p
        self.initial_p          = initial_p

    def value(self, t):
        """See Schedule.value"""
        fraction  = min(float(t) / self.schedule_timesteps, 1.0)
        return self.initial_p + fraction * (self.final_p - self.initial_p)


def sample_n_unique(sampling_f, n):
    """Helper function. Given a function `sampling_f` that returns
    comparable objects, sample n such unique objects.
    """
    res = []
    while len(res) < n:
        candidate = sampling_f()
        if candidate not in res:
            res.append(candidate)
    return res


class ReplayBuffer(object):
    def __init__(self, size, frame_history_len, rng):
        self.size = size
        self.frame_history_len = frame_history_len

        self.next_idx      = 0
        self.num_in_buffer = 0

        self.obs      = None
        self.action   = None
        self.reward   = None
        self.done     = None
        self.random = rng

    def can_sample(self, batch_size):
        """Returns true if `batch_size` different transitions can be sampled from the buffer."""
        return batch_size + 1 <= self.num_in_buffer

    def _encode_sample(self, idxes):
        obs_batch      = np.concatenate([self._encode_observation(idx)[np.newaxis, :] for idx in idxes], 0)
        act_batch      = self.action[idxes]
        rew_batch      = self.reward[idxes]
        next_obs_batch = np.concatenate([self._encode_observation(idx + 1)[np.newaxis, :] for idx in idxes], 0)
        done_mask      = np.array([1.0 if self.done[idx] else 0.0 for idx in idxes], dtype=np.float32)

        return obs_batch, act_batch, rew_batch, next_obs_batch, done_mask

    def sample(self, batch_size):
        assert self.can_sample(batch_size)
        idxes = sample_n_unique(lambda: self.random.randint(0, self.num_in_buffer - 2), batch_size)
        return self._encode_sample(idxes)

    def encode_recent_observation(self):
        assert self.num_in_buffer > 0
        return self._encode_observation((self.next_idx - 1) % self.size)

    def _encode_observation(self, idx):
        end_idx   = idx + 1 # make noninclusive
        start_idx = end_idx - self.frame_history_len
        # this checks if we are using low-dimensional observations, such as RAM
        # state, in which case we just directly return the latest RAM.
        if len(self.obs.shape) == 2:
            return self.obs[end_idx-1]
        raise NotImplementedError("image frames are not used by the RAM program")  # the image branch: not ported

    def store_frame(self, frame):
        # make sure we are not using low-dimensional observations, such as RAM
        if len(frame.shape) > 1:
            # transpose image frame into (img_c, img_h, img_w)
            frame = frame.transpose(2, 0, 1)

        if self.obs is None:
            self.obs      = np.empty([self.size] + list(frame.shape), dtype=np.uint8)
            self.action   = np.empty([self.size],                     dtype=np.int32)
            self.reward   = np.empty([self.size],                     dtype=np.float32)
            self.done     = np.empty([self.size],                     dtype=bool)

        self.obs[self.next_idx] = frame

        ret = self.next_idx
        self.next_idx = (self.next_idx + 1) % self.size
        self.num_in_buffer = min(self.size, self.num_in_buffer + 1)

        return ret

    def store_effect(self, idx, action, reward, done):
        self.action[idx] = action
        self.reward[idx] = reward
        self.done[idx]   = done


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    env = CartPole(seed)
    optimizer_spec = OptimizerSpec(
        constructor=optim.RMSprop,
        kwargs=dict(lr=LEARNING_RATE, alpha=ALPHA, eps=EPS),
    )
    exploration = LinearSchedule(SCHEDULE_TIMESTEPS, 0.1)
    batch_size, gamma = BATCH_SIZE, GAMMA
    learning_starts, learning_freq = LEARNING_STARTS, LEARNING_FREQ
    target_update_freq = TARGER_UPDATE_FREQ

    input_arg = 4
    num_actions = 2

    # Construct an epilson greedy policy with given exploration schedule
    def select_epilson_greedy_action(model, obs, t):
        sample = rng.random()
        eps_threshold = exploration.value(t)
        if sample > eps_threshold:
            obs = torch.from_numpy(obs).float().unsqueeze(0) / 255.0
            with torch.no_grad():
                return model(obs).data.max(1, keepdim=True)[1].cpu()
        else:
            return torch.IntTensor([[rng.randrange(num_actions)]])

    # Initialize target q function and q function
    Q = DQN_RAM(input_arg, num_actions)
    target_Q = DQN_RAM(input_arg, num_actions)

    # Construct Q network optimizer function
    optimizer = optimizer_spec.constructor(Q.parameters(), **optimizer_spec.kwargs)

    # Construct the replay buffer
    replay_buffer = ReplayBuffer(REPLAY_BUFFER_SIZE, FRAME_HISTORY_LEN, rng)

    state = {"t": 0, "num_param_updates": 0, "last_obs": ram_bytes(env.reset()[0])}

    def replay_update():
        obs_batch, act_batch, rew_batch, next_obs_batch, done_mask = replay_buffer.sample(batch_size)
        # Convert numpy nd_array to torch variables for calculation
        obs_batch = torch.from_numpy(obs_batch).float() / 255.0
        act_batch = torch.from_numpy(act_batch).long()
        rew_batch = torch.from_numpy(rew_batch)
        if bug == "next_obs_not_scaled":
            next_obs_batch = torch.from_numpy(next_obs_batch).float()
        else:
            next_obs_batch = torch.from_numpy(next_obs_batch).float() / 255.0
        if bug == "done_mask_not_inverted":
            not_done_mask = torch.from_numpy(done_mask).float()
        else:
            not_done_mask = torch.from_numpy(1 - done_mask).float()

        # Compute current Q value, q_func takes only state and output value for every state-action pair
        # We choose Q based on action taken.
        current_Q_values = Q(obs_batch).gather(1, act_batch.unsqueeze(1))
        # Compute next Q value based on which action gives max Q values
        # Detach variable from the current graph since we don't want gradients for next Q to propagated
        next_max_q = target_Q(next_obs_batch).detach().max(1)[0]
        next_Q_values = not_done_mask * next_max_q
        # Compute the target of the current Q values
        target_Q_values = rew_batch + (gamma * next_Q_values)
        # Compute Bellman error
        bellman_error = target_Q_values - current_Q_values.squeeze(1)
        # clip the bellman error between [-1 , 1]
        clipped_bellman_error = bellman_error.clamp(-1, 1)
        # Note: clipped_bellman_delta * -1 will be right gradient
        if bug == "d_error_sign_dropped":
            d_error = clipped_bellman_error
        else:
            d_error = clipped_bellman_error * -1.0
        # Clear previous gradients before backward pass
        optimizer.zero_grad()
        # run backward pass
        current_Q_values.backward(d_error.data.unsqueeze(1))

        # Perfom the update
        optimizer.step()
        state["num_param_updates"] += 1

        # Periodically update the target network by Q network to target Q network
        if state["num_param_updates"] % target_update_freq == 0:
            target_Q.load_state_dict(Q.state_dict())
        return F.smooth_l1_loss(current_Q_values.detach().squeeze(1), target_Q_values, reduction="sum")

    def loop_body():
        """One iteration of ``for t in count()``; returns the update's loss when it made one."""
        t = state["t"]
        ### Step the env and store the transition
        last_idx = replay_buffer.store_frame(state["last_obs"])
        recent_observations = replay_buffer.encode_recent_observation()

        # Choose random action if not yet start learning
        if t > learning_starts:
            action = select_epilson_greedy_action(Q, recent_observations, t)[0, 0]
        else:
            action = rng.randrange(num_actions)
        # Advance one step
        obs, reward, done, truncated, _ = env.step(int(action))
        obs = ram_bytes(obs)
        done = done or truncated
        # clip rewards between -1 and 1
        reward = max(-1.0, min(reward, 1.0))
        # Store other info in replay memory
        replay_buffer.store_effect(last_idx, action, reward, done)
        # Resets the environment when reaching an episode boundary.
        if done:
            obs = ram_bytes(env.reset()[0])
        state["last_obs"] = obs

        loss = None
        if (t > learning_starts and
                t % learning_freq == 0 and
                replay_buffer.can_sample(batch_size)):
            loss = replay_update()
        state["t"] = t + 1
        return loss

    # run the loop until the learning starts and the next step is an update step
    while not (state["t"] > learning_starts and state["t"] % learning_freq == 0):
        loop_body()

    obs_b, act_b, rew_b, next_obs_b, done_b = replay_buffer.sample(batch_size)
    batch = (torch.from_numpy(obs_b).float() / 255.0,
             (torch.from_numpy(act_b).long(), torch.from_numpy(rew_b), torch.from_numpy(next_obs_b).float() / 255.0,
              torch.from_numpy(done_b)))

    def loss_fn(q_values, targets):
        act_batch, rew_batch, next_obs_batch, done_mask = targets
        current_Q_values = q_values.gather(1, act_batch.unsqueeze(1))
        if bug == "next_obs_not_scaled":
            next_obs_batch = next_obs_batch * 255.0
        next_max_q = target_Q(next_obs_batch).detach().max(1)[0]
        not_done_mask = done_mask if bug == "done_mask_not_inverted" else 1 - done_mask
        target_Q_values = rew_batch + gamma * not_done_mask * next_max_q
        return F.smooth_l1_loss(current_Q_values.squeeze(1), target_Q_values, reduction="sum")

    def train_step():
        loss = None
        while loss is None:
            loss = loop_body()
        return loss

    return Program(name="pytorchdqn_ram", model=Q, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the replay buffer's done_mask (1 at the end of an episode) used as the not-done mask: the target bootstraps
    # only through terminal transitions and never through the others (classic; the buffer's docstring warns that
    # done_mask[i] is 1 when the episode ended).
    Bug("done_mask_not_inverted", functools.partial(_build, bug="done_mask_not_inverted"), "learning_ledger",
        ("TASK",)),
    # the "* -1" of "clipped_bellman_delta * -1 will be right gradient" left out: the hand-fed gradient climbs the
    # Bellman error instead of descending it (classic sign slip of a manual backward).
    # first contact declared OBJECTIVE; the finding is PARAMETER_UPDATE update.ascends (the update climbs the loss the
    # program reports), this bug's mechanism (reviewed after first contact)
    Bug("d_error_sign_dropped", functools.partial(_build, bug="d_error_sign_dropped"), "learning_ledger",
        ("PARAMETER_UPDATE",)),
    # the next observations converted without the /255 the current ones get: the target network is evaluated on
    # inputs 255 times larger than anything Q is trained on (classic preprocessing mismatch).
    Bug("next_obs_not_scaled", functools.partial(_build, bug="next_obs_not_scaled"), "learning_ledger", ("TASK",)),
]
