# ruff: noqa: PLR0402, UP008, UP039
"""Upside-Down Reinforcement Learning on cart-pole: a behavior function trained by supervised learning on commands.

Source: https://github.com/BY571/Upside-Down-Reinforcement-Learning, commit
f27215bb6bc487d6f587706432373e88f6a07091, notebook ``Upside-Down.ipynb``. License: MIT (Copyright (c) 2020
Sebastian Dittert; full text in LICENSES/BY571-Upside-Down-Reinforcement-Learning.txt).

Kept as written: the hyperparameters (horizon_scale 0.02, return_scale 0.02, replay_size 700, n_warm_up_episodes
50, last_few 50, batch_size 256, hidden size 64, Adam lr 1e-3), the behavior function ``BF`` (sigmoid state and
command embeddings multiplied, three ReLU layers, action logits; ``action`` sampling from the softmax), the
``ReplayBuffer`` of whole episodes sorted by summed reward and cut to ``max_size``, ``select_time_steps``,
``create_training_input``, ``create_training_examples`` (t2 set to T for the episodic task) and
``train_behavior_function`` (commands scaled, ``F.cross_entropy`` on the logits, zero_grad/backward/step),
``sampling_exploration`` and ``generate_episode``.

Deviations:
- gym's CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations, seeded; its
  ``reset``/``step`` return the gym >= 0.26 tuples, unpacked accordingly).
- the warm-up episodes: the notebook plays them with the untrained behavior function, whose sampled actions carry
  no rule a behavior function could learn in a few steps. Here they are played by a seeded noisy balancing rule
  (push towards the pole's lean, ``theta + 0.5 * theta_dot > 0``, with probability 0.85, else a random push) so
  the buffer holds (state, command) -> action pairs with a learnable rule: the synthetic data.
- ``np.random`` calls of the buffer, ``select_time_steps`` and ``sampling_exploration`` come from a
  ``numpy.random.default_rng(seed)`` instance so a build is reproducible; the module-level globals (``buffer``,
  ``bf``, ``optimizer``) live in ``build``'s closure.
- ``run_upside_down``'s iteration is cut to sizes for 2 CPU cores: ``train_step`` is one call of
  ``train_behavior_function(batch_size)`` (the notebook does n_updates_per_iter 100 of them per iteration), and
  every 25th call adds one exploration episode (``sampling_exploration`` + ``generate_episode``, the notebook adds
  n_episodes_per_iter 15), each episode cut at 200 steps (CartPole-v0's limit).
- the loss is returned as the tensor (the notebook returns ``pred_loss.detach().cpu().numpy()``); evaluation,
  plotting and saving are dropped; ``device`` is the CPU.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

action_space = 2
state_space = 4
max_reward = 200

horizon_scale = 0.02
return_scale = 0.02
replay_size = 700
n_warm_up_episodes = 50
n_updates_per_iter = 100
n_episodes_per_iter = 15
last_few = 50
batch_size = 256
EXPLORE_EVERY = 25


class BF(nn.Module):
    def __init__(self, state_space, action_space, hidden_size, seed):
        super(BF, self).__init__()
        torch.manual_seed(seed)
        self.actions = np.arange(action_space)
        self.action_space = action_space
        self.fc1 = nn.Linear(state_space, hidden_size)
        self.commands = nn.Linear(2, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, hidden_size)
        self.fc4 = nn.Linear(hidden_size, hidden_size)
        self.fc5 = nn.Linear(hidden_size, action_space)
        self.sigmoid = nn.Sigmoid()

    def forward(self, state, command):

        out = self.sigmoid(self.fc1(state))
        command_out = self.sigmoid(self.commands(command))
        out = out * command_out
        out = torch.relu(self.fc2(out))
        out = torch.relu(self.fc3(out))
        out = torch.relu(self.fc4(out))
        out = self.fc5(out)

        return out

    def action(self, state, desire, horizon):
        """
        Samples the action based on their probability
        """
        command = torch.cat((desire*return_scale, horizon*horizon_scale), dim=-1)
        action_prob = self.forward(state, command)
        probs = torch.softmax(action_prob, dim=-1)
        m = Categorical(probs)
        action = m.sample()
        return action


class ReplayBuffer():
    def __init__(self, max_size, rng):
        self.max_size = max_size
        self.buffer = []
        self.rng = rng

    def add_sample(self, states, actions, rewards):
        episode = {"states": states, "actions": actions, "rewards": rewards, "summed_rewards": sum(rewards)}
        self.buffer.append(episode)

    def sort(self):
        # sort buffer
        self.buffer = sorted(self.buffer, key=lambda i: i["summed_rewards"], reverse=True)
        # keep the max buffer size
        self.buffer = self.buffer[:self.max_size]

    def get_random_samples(self, batch_size):
        self.sort()
        idxs = self.rng.integers(0, len(self.buffer), batch_size)
        batch = [self.buffer[idx] for idx in idxs]
        return batch

    def get_nbest(self, n):
        self.sort()
        return self.buffer[:n]

    def __len__(self):
        return len(self.buffer)


def _balancing_rule(state, rng):
    """The warm-up episodes' policy (a deviation, see the docstring): push towards the lean, with noise."""
    if rng.random() < 0.85:
        return int(state[2] + 0.5 * state[3] > 0)
    return int(rng.integers(0, 2))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env = CartPole(seed)

    buffer = ReplayBuffer(replay_size, rng)
    bf = BF(state_space, action_space, 64, seed)
    optimizer = optim.Adam(params=bf.parameters(), lr=1e-3)

    for _ in range(n_warm_up_episodes):
        state, _ = env.reset()
        states, actions, rewards = [], [], []
        while True:
            action = torch.tensor(_balancing_rule(state, rng))
            next_state, reward, done, _truncated, _info = env.step(int(action))
            states.append(torch.from_numpy(state).float())
            actions.append(action)
            rewards.append(reward)
            state = next_state
            if done or len(states) >= max_reward:
                break
        buffer.add_sample(states, actions, rewards)

    def sampling_exploration(top_X_eps=last_few):
        top_X = buffer.get_nbest(last_few)
        # The exploratory desired horizon dh0 is set to the mean of the lengths of the selected episodes
        new_desired_horizon = np.mean([len(i["states"]) for i in top_X])
        # save all top_X cumulative returns in a list
        returns = [i["summed_rewards"] for i in top_X]
        # from these returns calc the mean and std
        mean_returns = np.mean(returns)
        std_returns = np.std(returns)
        # sample desired reward from a uniform distribution given the mean and the std
        new_desired_reward = rng.uniform(mean_returns, mean_returns+std_returns)

        return torch.FloatTensor([new_desired_reward]), torch.FloatTensor([new_desired_horizon])

    def select_time_steps(saved_episode):
        # Select times in the episode:
        T = len(saved_episode["states"])  # episode max horizon
        t1 = rng.integers(0, T-1)
        t2 = rng.integers(t1+1, T)

        return t1, t2, T

    def create_training_input(episode, t1, t2):
        state = episode["states"][t1]
        if bug == "desired_reward_whole_episode":
            desired_reward = sum(episode["rewards"])
        else:
            desired_reward = sum(episode["rewards"][t1:t2])
        time_horizont = t2-t1
        action = episode["actions"][t1]
        return state, desired_reward, time_horizont, action

    def create_training_examples(batch_size):
        input_array = []
        output_array = []
        # select randomly episodes from the buffer
        episodes = buffer.get_random_samples(batch_size)
        for ep in episodes:
            # select time stamps
            t1, t2, T = select_time_steps(ep)
            # For episodic tasks they set t2 to T:
            t2 = T
            state, desired_reward, time_horizont, action = create_training_input(ep, t1, t2)
            input_array.append(torch.cat([state, torch.FloatTensor([desired_reward]),
                                          torch.FloatTensor([time_horizont])]))
            if bug == "action_of_next_step":
                action = ep["actions"][min(t1 + 1, T - 1)]
            output_array.append(action)
        return input_array, output_array

    def train_behavior_function(batch_size):
        X, y = create_training_examples(batch_size)

        X = torch.stack(X)
        state = X[:, 0:state_space]
        d = X[:, state_space:state_space+1]
        h = X[:, state_space+1:state_space+2]
        command = torch.cat((d*return_scale, h*horizon_scale), dim=-1)
        y = torch.stack(y).long()
        y_ = bf(state, command).float()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        pred_loss = F.cross_entropy(y_, y)
        pred_loss.backward()
        optimizer.step()
        return pred_loss.detach()

    def generate_episode(desired_return, desired_time_horizon):
        state, _ = env.reset()
        states = []
        actions = []
        rewards = []
        while True:
            state = torch.FloatTensor(state)

            action = bf.action(state, desired_return, desired_time_horizon)
            next_state, reward, done, _truncated, _info = env.step(int(action))
            states.append(state)
            actions.append(action)
            rewards.append(reward)

            state = next_state
            desired_return -= reward
            desired_time_horizon -= 1
            desired_time_horizon = torch.FloatTensor([np.maximum(desired_time_horizon, 1).item()])

            if done or len(states) >= max_reward:
                break
        return [states, actions, rewards]

    X, y = create_training_examples(batch_size)
    X = torch.stack(X)
    batch = ((X[:, 0:state_space],
              torch.cat((X[:, state_space:state_space+1]*return_scale, X[:, state_space+1:]*horizon_scale), dim=-1)),
             torch.stack(y).long())

    def loss_fn(out, target):
        return F.cross_entropy(out.float(), target)

    state = {"calls": 0}

    def train_step():
        loss = train_behavior_function(batch_size)
        state["calls"] += 1
        if state["calls"] % EXPLORE_EVERY == 0:
            with torch.no_grad():
                new_desired_reward, new_desired_horizon = sampling_exploration()
                generated_episode = generate_episode(new_desired_reward, new_desired_horizon)
            buffer.add_sample(generated_episode[0], generated_episode[1], generated_episode[2])
        return loss

    return Program(name="upsidedownrl_behavior", model=bf, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the command's desired reward summed over the whole episode instead of from t1 to t2 (classic slicing slip):
    # every time step of an episode gets the same return command, so the command no longer says what is left.
    Bug("desired_reward_whole_episode", functools.partial(_build, bug="desired_reward_whole_episode"),
        "learning_ledger", ("TASK",)),
    # the target action taken one step after the state it is paired with (classic off-by-one in the example
    # builder): the behavior function is trained on the wrong (state, action) pairs.
    Bug("action_of_next_step", functools.partial(_build, bug="action_of_next_step"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() dropped from train_behavior_function (classic): gradients pile up across updates.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
