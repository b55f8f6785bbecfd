# ruff: noqa: PLR0402, UP004, UP008, PIE808
"""DQN agent (keras-rl style sequential replay memory, MLP Q-network, Huber TD error, element-wise gradient clamp,
hard target updates) from jingweiz/pytorch-rl, config 1: ``dqn`` on gym ``CartPole-v0`` with ``dqn-mlp``.

Source: https://github.com/jingweiz/pytorch-rl, commit 20b3b738ca400b1916197f27a91367878b09803c, files
``main.py``, ``utils/options.py`` (CONFIGS[1] and the dqn/gym parameters), ``core/agent.py``, ``core/agents/dqn.py``
(``DQNAgent``), ``core/model.py`` + ``core/models/dqn_mlp.py`` (``DQNMlpModel``), ``core/memory.py`` +
``core/memories/sequential.py`` (``RingBuffer``, ``Memory``, ``SequentialMemory``), ``core/env.py`` +
``core/envs/gym.py`` (the ``Experience`` the env returns), ``utils/helpers.py`` (``Experience``).
License: MIT (Copyright (c) 2017 Jingwei Zhang; full text in LICENSES/jingweiz-pytorch-rl.txt).

Kept as written: the dqn/gym parameters (hist_len 1, hidden_dim 16, enable_double_dqn and enable_dueling False,
memory_size 50000, ``F.smooth_l1_loss``, ``optim.Adam`` lr 0.0001 weight_decay 0, gamma 0.99, clip_grad 1,
learn_start 500, batch_size 32, eps 1 -> 0.3 over 50000 steps, target_model_update 1000, action_repetition 1,
memory_interval 1, train_interval 1, eval_freq 2500); ``DQNMlpModel`` (fc1-fc3 16 wide with ReLU, fc4, the dueling
branch kept but off); the memory classes; ``DQNAgent._get_q_update`` (the double-DQN branch kept but off; the
``# 0.2.0`` lines), ``_epsilon_greedy``, ``_forward``, ``_backward`` (append to memory, train on one sampled batch
every ``train_interval`` steps after ``learn_start``: ``zero_grad``, ``backward``, every gradient clamped to
[-clip_grad, clip_grad], ``step``; the hard target copy every ``target_model_update`` steps) and ``fit_model``'s loop
body (reset, ``_forward``, env step, ``_backward`` with the terminal flag, the extra forward/backward at an episode's
end, a new episode forced every ``eval_freq`` steps).

Deviations:
- gym's CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (seeded; CartPole-v1's 500-step
  limit instead of v0's 200); ``GymEnv`` is reduced to the ``reset`` / ``step`` that return the ``Experience``
  tuples the agent reads. The environment is the synthetic data.
- the ``Options`` / ``Params`` machinery, the logger, visdom, model saving/loading and the evaluation phase
  (``_eval_model``, run every eval_freq steps) are dropped; the parameters are set directly on the agent. No GPU
  (``dtype`` FloatTensor). ``Variable(...)`` wrappers are left out (tensors are used directly; ``volatile=True``
  becomes ``torch.no_grad()``); ``torch.from_numpy(...).type(self.dtype)`` is ``.float()``.
- ``random`` / ``np.random`` draws come from a ``random.Random(seed)`` and a ``np.random.RandomState(seed)``
  (the memory's ``sample_batch_indexes`` and the agent's epsilon-greedy) so a build is reproducible.
- ``fit_model``'s ``while self.step < self.steps`` loop is not run to its end: at build time it runs until the
  learning starts; ``train_step`` runs the loop body until the next training update (one env step once learning
  has started) and returns that update's TD error, which ``_backward`` computes and the original does not return.
  The self-check runs 150 steps (``SELF_CHECK_STEPS``): at lr 0.0001 thirty updates barely move the TD error.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import warnings
from collections import deque, namedtuple

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

# the Adam lr of 0.0001 moves the 16-wide Q-network slowly: the self-check runs 150 steps (about a second)
SELF_CHECK_STEPS = 150

Experience = namedtuple('Experience', 'state0, action, reward, state1, terminal1')


# ---------------------------------------------------------------- core/memory.py, core/memories/sequential.py

def sample_batch_indexes(low, high, size, rng, np_rng):
    if high - low >= size:
        r = range(low, high)
        batch_idxs = rng.sample(r, size)
    else:
        warnings.warn('Not enough entries to sample without replacement. Consider increasing your warm-up phase to avoid oversampling!')
        batch_idxs = np_rng.randint(low, high, size=size)
    assert len(batch_idxs) == size
    return batch_idxs


def zeroed_observation(observation):
    if hasattr(observation, 'shape'):
        return np.zeros(observation.shape)
    elif hasattr(observation, '__iter__'):
        out = []
        for x in observation:
            out.append(zeroed_observation(x))
        return out
    else:
        return 0.


class RingBuffer(object):
    def __init__(self, maxlen):
        self.maxlen = maxlen
        self.start = 0
        self.length = 0
        self.data = [None for _ in range(maxlen)]

    def __len__(self):
        return self.length

    def __getitem__(self, idx):
        if idx < 0 or idx >= self.length:
            raise KeyError()
        return self.data[(self.start + idx) % self.maxlen]

    def append(self, v):
        if self.length < self.maxlen:
            # We have space, simply increase the length.
            self.length += 1
        elif self.length == self.maxlen:
            # No space, "remove" the first item.
            self.start = (self.start + 1) % self.maxlen
        else:
            # This should never happen.
            raise RuntimeError()
        self.data[(self.start + self.length - 1) % self.maxlen] = v


class Memory(object):
    def __init__(self, window_length, ignore_episode_boundaries=False):
        self.window_length = window_length
        self.ignore_episode_boundaries = ignore_episode_boundaries

        self.recent_observations = deque(maxlen=window_length)
        self.recent_terminals = deque(maxlen=window_length)

    def append(self, observation, action, reward, terminal, training=True):
        self.recent_observations.append(observation)
        self.recent_terminals.append(terminal)

    def get_recent_state(self, current_observation):
        state = [current_observation]
        idx = len(self.recent_observations) - 1
        for offset in range(0, self.window_length - 1):
            current_idx = idx - offset
            current_terminal = self.recent_terminals[current_idx - 1] if current_idx - 1 >= 0 else False
            if current_idx < 0 or (not self.ignore_episode_boundaries and current_terminal):
                break
            state.insert(0, self.recent_observations[current_idx])
        while len(state) < self.window_length:
            state.insert(0, zeroed_observation(state[0]))
        return state


class SequentialMemory(Memory):
    def __init__(self, limit, rng, np_rng, **kwargs):
        super(SequentialMemory, self).__init__(**kwargs)

        self.limit = limit
        self.rng, self.np_rng = rng, np_rng

        self.actions = RingBuffer(limit)
        self.rewards = RingBuffer(limit)
        self.terminals = RingBuffer(limit)
        self.observations = RingBuffer(limit)

    def sample(self, batch_size, batch_idxs=None):
        if batch_idxs is None:
            # Draw random indexes such that we have at least a single entry before each
            # index.
            batch_idxs = sample_batch_indexes(0, self.nb_entries - 1, batch_size, self.rng, self.np_rng)
        batch_idxs = np.array(batch_idxs) + 1
        assert np.min(batch_idxs) >= 1
        assert np.max(batch_idxs) < self.nb_entries
        assert len(batch_idxs) == batch_size

        # Create experiences
        experiences = []
        for idx in batch_idxs:
            terminal0 = self.terminals[idx - 2] if idx >= 2 else False
            while terminal0:
                # Skip this transition because the environment was reset here. Select a new, random
                # transition and use this instead. This may cause the batch to contain the same
                # transition twice.
                idx = sample_batch_indexes(1, self.nb_entries, 1, self.rng, self.np_rng)[0]
                terminal0 = self.terminals[idx - 2] if idx >= 2 else False
            assert 1 <= idx < self.nb_entries

            state0 = [self.observations[idx - 1]]
            for offset in range(0, self.window_length - 1):
                current_idx = idx - 2 - offset
                current_terminal = self.terminals[current_idx - 1] if current_idx - 1 > 0 else False
                if current_idx < 0 or (not self.ignore_episode_boundaries and current_terminal):
                    break
                state0.insert(0, self.observations[current_idx])
            while len(state0) < self.window_length:
                state0.insert(0, zeroed_observation(state0[0]))
            action = self.actions[idx - 1]
            reward = self.rewards[idx - 1]
            terminal1 = self.terminals[idx - 1]

            state1 = [np.copy(x) for x in state0[1:]]
            state1.append(self.observations[idx])

            assert len(state0) == self.window_length
            assert len(state1) == len(state0)
            experiences.append(Experience(state0=state0, action=action, reward=reward,
                                          state1=state1, terminal1=terminal1))
        assert len(experiences) == batch_size
        return experiences

    def append(self, observation, action, reward, terminal, training=True):
        super(SequentialMemory, self).append(observation, action, reward, terminal, training=training)

        # This needs to be understood as follows: in `observation`, take `action`, obtain `reward`
        # and weather the next state is `terminal` or not.
        if training:
            self.observations.append(observation)
            self.actions.append(action)
            self.rewards.append(reward)
            self.terminals.append(terminal)

    @property
    def nb_entries(self):
        return len(self.observations)


# ---------------------------------------------------------------- core/model.py, core/models/dqn_mlp.py

class DQNMlpModel(nn.Module):
    def __init__(self, args):
        super(DQNMlpModel, self).__init__()
        # params (core/model.py)
        self.hidden_dim = args.hidden_dim
        self.enable_dueling = args.enable_dueling
        self.dueling_type   = args.dueling_type
        self.input_dims     = {}
        self.input_dims[0]  = args.hist_len # from params
        self.input_dims[1]  = args.state_shape
        self.output_dims    = args.action_dim
        # build model
        self.fc1 = nn.Linear(self.input_dims[0] * self.input_dims[1], self.hidden_dim)
        self.rl1 = nn.ReLU()
        self.fc2 = nn.Linear(self.hidden_dim, self.hidden_dim)
        self.rl2 = nn.ReLU()
        self.fc3 = nn.Linear(self.hidden_dim, self.hidden_dim)
        self.rl3 = nn.ReLU()
        if self.enable_dueling: # [0]: V(s); [1,:]: A(s, a)
            self.fc4 = nn.Linear(self.hidden_dim, self.output_dims + 1)
            self.v_ind = torch.LongTensor(self.output_dims).fill_(0).unsqueeze(0)
            self.a_ind = torch.LongTensor(np.arange(1, self.output_dims + 1)).unsqueeze(0)
        else: # one q value output for each action
            self.fc4 = nn.Linear(self.hidden_dim, self.output_dims)

    def forward(self, x):
        x = x.view(x.size(0), self.input_dims[0] * self.input_dims[1])
        x = self.rl1(self.fc1(x))
        x = self.rl2(self.fc2(x))
        x = self.rl3(self.fc3(x))
        if self.enable_dueling:
            x = self.fc4(x.view(x.size(0), -1))
            v = x.gather(1, self.v_ind.expand(x.size(0), self.output_dims))
            a = x.gather(1, self.a_ind.expand(x.size(0), self.output_dims))
            # now calculate Q(s, a)
            if self.dueling_type == "avg":      # Q(s,a)=V(s)+(A(s,a)-avg_a(A(s,a)))
                x = v + (a - a.mean(1, keepdim=True))                           # 0.2.0
            elif self.dueling_type == "max":    # Q(s,a)=V(s)+(A(s,a)-max_a(A(s,a)))
                x = v + (a - a.max(1, keepdim=True)[0])                         # 0.2.0
            elif self.dueling_type == "naive":  # Q(s,a)=V(s)+ A(s,a)
                x = v + a
            else:
                assert False, "dueling_type must be one of {'avg', 'max', 'naive'}"
            return x
        else:
            return self.fc4(x.view(x.size(0), -1))


# ---------------------------------------------------------------- core/envs/gym.py (reduced)

class GymEnv(object):
    def __init__(self, seed):
        self.env = CartPole(seed)
        self.state_shape = 4
        self.action_dim = 2
        self.actions = range(self.action_dim)

    def _get_experience(self):
        return Experience(state0=None, action=self.exp_action, reward=self.exp_reward, state1=self.exp_state1,
                          terminal1=self.exp_terminal1)

    def reset(self):
        self.exp_action = self.exp_reward = self.exp_terminal1 = None
        self.exp_state1, _ = self.env.reset()
        return self._get_experience()

    def step(self, action_index):
        self.exp_action = action_index
        self.exp_state1, self.exp_reward, done, truncated, _ = self.env.step(self.actions[self.exp_action])
        self.exp_terminal1 = done or truncated
        return self._get_experience()


# ---------------------------------------------------------------- core/agents/dqn.py

class DQNAgent(object):
    def __init__(self, seed, bug=None):
        # utils/options.py, CONFIGS[1]: dqn | gym | CartPole-v0 | dqn-mlp | sequential
        self.enable_double_dqn  = False
        self.enable_dueling     = False
        self.dueling_type       = 'avg' # avg | max | naive
        self.hist_len           = 1
        self.hidden_dim         = 16
        self.memory_size        = 50000
        self.value_criteria     = F.smooth_l1_loss
        self.optim              = optim.Adam
        self.steps               = 100000   # max #iterations
        self.early_stop          = None     # max #steps per episode
        self.gamma               = 0.99
        self.clip_grad           = 1.#np.inf
        self.lr                  = 0.0001
        self.lr_decay            = False
        self.weight_decay        = 0.
        self.eval_freq           = 2500     # NOTE: here means every this many steps
        self.learn_start         = 500      # start update params after this many steps
        self.batch_size          = 32
        self.valid_size          = 250
        self.eps_start           = 1
        self.eps_end             = 0.3
        self.eps_eval            = 0.#0.05
        self.eps_decay           = 50000
        self.target_model_update = 1000#0.0001
        self.action_repetition   = 1
        self.memory_interval     = 1
        self.train_interval      = 1
        self.bug = bug
        self.random = random.Random(seed)
        self.np_random = np.random.RandomState(seed)

        # env
        self.env = GymEnv(seed)
        self.state_shape = self.env.state_shape
        self.action_dim  = self.env.action_dim

        # model
        self.model_params = self
        self.model = DQNMlpModel(self.model_params)
        # target_model
        self.target_model = DQNMlpModel(self.model_params)
        self._update_target_model_hard()

        self._reset_states()

    def _reset_states(self):
        self.experience = None
        self.recent_action = None
        self.recent_observation = None

    # Hard update every `target_model_update` steps.
    def _update_target_model_hard(self):
        self.target_model.load_state_dict(self.model.state_dict())

    def _sample_validation_data(self):
        self.valid_data = self.memory.sample(self.valid_size)

    def _get_q_update(self, experiences): # compute temporal difference error for a batch
        # Start by extracting the necessary parameters (we use a vectorized implementation).
        state0_batch_vb    = torch.from_numpy(np.array(tuple(experiences[i].state0 for i in range(len(experiences))))).float()
        action_batch_vb    = torch.from_numpy(np.array(tuple(experiences[i].action for i in range(len(experiences))))).long()
        reward_batch_vb    = torch.from_numpy(np.array(tuple(experiences[i].reward for i in range(len(experiences))))).float()
        state1_batch_vb    = torch.from_numpy(np.array(tuple(experiences[i].state1 for i in range(len(experiences))))).float()
        if self.bug == "terminal_mask_not_inverted":
            terminal1_batch_vb = torch.from_numpy(np.array(tuple(1. if experiences[i].terminal1 else 0. for i in range(len(experiences))))).float()
        else:
            terminal1_batch_vb = torch.from_numpy(np.array(tuple(0. if experiences[i].terminal1 else 1. for i in range(len(experiences))))).float()
        return self._td_error(state0_batch_vb, action_batch_vb, reward_batch_vb, state1_batch_vb, terminal1_batch_vb)

    def _td_error(self, state0_batch_vb, action_batch_vb, reward_batch_vb, state1_batch_vb, terminal1_batch_vb,
                  q_values0=None):
        # (port) the second half of _get_q_update, unchanged; ``q_values0`` lets loss_fn pass the model's output
        # Compute target Q values for mini-batch update.
        if self.enable_double_dqn:
            q_values_vb = self.model(state1_batch_vb)
            # Detach this variable from the current graph since we don't want gradients to propagate
            q_values_vb = q_values_vb.detach()
            _, q_max_actions_vb = q_values_vb.max(dim=1, keepdim=True)  # 0.2.0
            next_max_q_values_vb = self.target_model(state1_batch_vb)
            next_max_q_values_vb = next_max_q_values_vb.detach()
            next_max_q_values_vb = next_max_q_values_vb.gather(1, q_max_actions_vb)
        else:
            # Compute the q_values given state1, and extract the maximum for each sample in the batch.
            # We perform this prediction on the target_model instead of the model for reasons
            # outlined in Mnih (2015). In short: it makes the algorithm more stable.
            next_max_q_values_vb = self.target_model(state1_batch_vb)
            # Detach this variable from the current graph since we don't want gradients to propagate
            next_max_q_values_vb = next_max_q_values_vb.detach()
            next_max_q_values_vb, _ = next_max_q_values_vb.max(dim = 1, keepdim=True)   # 0.2.0

        # Compute r_t + gamma * max_a Q(s_t+1, a) and update the targets accordingly
        # but only for the affected output units (as given by action_batch).
        if q_values0 is None:
            q_values0 = self.model(state0_batch_vb)
        current_q_values_vb = q_values0.gather(1, action_batch_vb.unsqueeze(1)).squeeze()
        # Set discounted reward to zero for all states that were terminal.
        next_max_q_values_vb = next_max_q_values_vb * terminal1_batch_vb.unsqueeze(1)
        if self.bug == "next_q_not_squeezed":
            expected_q_values_vb = reward_batch_vb + self.gamma * next_max_q_values_vb            # 0.1.12
        else:
            expected_q_values_vb = reward_batch_vb + self.gamma * next_max_q_values_vb.squeeze()    # 0.2.0
        # Compute temporal difference error, use huber loss to mitigate outlier impact
        td_error_vb = self.value_criteria(current_q_values_vb, expected_q_values_vb)
        return next_max_q_values_vb.data.clone().mean(), td_error_vb

    def _epsilon_greedy(self, q_values_ts):
        # calculate epsilon
        if self.training:   # linearly anneal epsilon
            self.eps = self.eps_end + max(0, (self.eps_start - self.eps_end) * (self.eps_decay - max(0, self.step - self.learn_start)) / self.eps_decay)
        else:
            self.eps = self.eps_eval
        # choose action
        if self.np_random.uniform() < self.eps:  # then we choose a random action
            action = self.random.randrange(self.action_dim)
        else:                               # then we choose the greedy action
            action = np.argmax(q_values_ts.numpy())
        return action

    def _forward(self, observation):
        # Select an action.
        state = self.memory.get_recent_state(observation)
        state_ts = torch.from_numpy(np.array(state)).unsqueeze(0).float()
        with torch.no_grad():
            q_values_ts = self.model(state_ts).data # NOTE: only doing inference here, so volatile=True
        if self.training and self.step < self.learn_start:  # then we don't do any learning, just accumulate experiences into replay memory
            action = self.random.randrange(self.action_dim)      # thus we only randomly sample actions here, since the model hasn't been updated at all till now
        else:
            action = self._epsilon_greedy(q_values_ts)

        # Book keeping
        self.recent_observation = observation
        self.recent_action = action

        return action

    def _backward(self, reward, terminal):
        # Store most recent experience in memory.
        if self.step % self.memory_interval == 0:
            self.memory.append(self.recent_observation, self.recent_action, reward, terminal,
                               training = self.training)

        if not self.training:
            return

        # sample validation data right before training started
        if self.step == self.learn_start + 1:
            self._sample_validation_data()

        # Train the network on a single stochastic batch.
        td_error_vb = None
        if self.step > self.learn_start and self.step % self.train_interval == 0:
            experiences = self.memory.sample(self.batch_size)
            # Compute temporal difference error
            _, td_error_vb = self._get_q_update(experiences)
            # Construct optimizer and clear old gradients
            if self.bug != "zero_grad_dropped":
                self.optimizer.zero_grad()
            # run backward pass and clip gradient
            td_error_vb.backward()
            for param in self.model.parameters():
                param.grad.data.clamp_(-self.clip_grad, self.clip_grad)
            # Perform the update
            self.optimizer.step()

        if self.target_model_update >= 1 and self.step % self.target_model_update == 0:
            self._update_target_model_hard()    # Hard update every `target_model_update` steps.

        return td_error_vb

    def fit_model_start(self):
        # memory
        self.memory = SequentialMemory(limit = self.memory_size, rng=self.random, np_rng=self.np_random,
                                       window_length = self.hist_len)
        self.eps = self.eps_start
        self.optimizer = self.optim(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay)    # Adam
        self.lr_adjusted = self.lr

        self.training = True
        self.step = 0
        self.should_start_new = True

    def fit_model_iteration(self):
        """One pass of fit_model's ``while self.step < self.steps`` body; returns the TD error if it trained."""
        if self.should_start_new:    # start of a new episode
            self.episode_steps = 0
            self.episode_reward = 0.
            # Obtain the initial observation by resetting the environment
            self._reset_states()
            self.experience = self.env.reset()
            assert self.experience.state1 is not None
            # reset flag
            self.should_start_new = False
        # Run a single step
        action = self._forward(self.experience.state1)
        reward = 0.
        for _ in range(self.action_repetition):
            self.experience = self.env.step(action)
            reward += self.experience.reward
            if self.experience.terminal1:
                self.should_start_new = True
                break
        if self.early_stop and (self.episode_steps + 1) >= self.early_stop or (self.step + 1) % self.eval_freq == 0:
            # to make sure the historic observations for the first hist_len-1 steps in (the next episode / eval) would be clean
            self.should_start_new = True
        if self.should_start_new:
            td_error_vb = self._backward(reward, True)
        else:
            td_error_vb = self._backward(reward, self.experience.terminal1)

        self.episode_steps += 1
        self.episode_reward += reward
        self.step += 1

        if self.should_start_new:
            self._forward(self.experience.state1)   # recent_observation & recent_action get updated
            self._backward(0., False)               # recent experience gets pushed into memory
            self._reset_states()
        return td_error_vb


def _build(seed, bug=None):
    torch.manual_seed(seed)
    agent = DQNAgent(seed, bug)
    agent.fit_model_start()
    while agent.step <= agent.learn_start:
        agent.fit_model_iteration()

    experiences = agent.memory.sample(agent.batch_size)
    state0 = torch.from_numpy(np.array([e.state0 for e in experiences])).float()
    action = torch.from_numpy(np.array([e.action for e in experiences])).long()
    reward = torch.from_numpy(np.array([e.reward for e in experiences])).float()
    state1 = torch.from_numpy(np.array([e.state1 for e in experiences])).float()
    not_terminal = torch.tensor([1. if e.terminal1 else 0. for e in experiences]) if bug == "terminal_mask_not_inverted" \
        else torch.tensor([0. if e.terminal1 else 1. for e in experiences])
    batch = (state0, (action, reward, state1, not_terminal))

    def loss_fn(q_values, targets):
        """_get_q_update's TD error on the model's output for ``batch`` (the same lines)."""
        action, reward, state1, not_terminal = targets
        return agent._td_error(None, action, reward, state1, not_terminal, q_values0=q_values)[1]

    def train_step():
        td_error = None
        while td_error is None:
            td_error = agent.fit_model_iteration()
        return td_error

    return Program(name="jingweizrl_dqn", model=agent.model, batch=batch, loss_fn=loss_fn, optimizer=agent.optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the repository's own PyTorch 0.1.12 line (kept commented next to the "# 0.2.0" one): without .squeeze() the
    # [B, 1] bootstrap broadcasts against the [B] rewards, so the TD target is a [B, B] matrix and smooth_l1_loss
    # regresses every Q-value toward every transition's target (classic broadcasting slip).
    Bug("next_q_not_squeezed", functools.partial(_build, bug="next_q_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
    # the not-terminal mask written the wrong way round (1. if terminal1 else 0.): the target bootstraps only
    # through the terminal transitions (classic).
    Bug("terminal_mask_not_inverted", functools.partial(_build, bug="terminal_mask_not_inverted"), "learning_ledger",
        ("TASK",)),
    # classic: self.optimizer.zero_grad() left out of _backward: gradients pile up across updates (the element-wise
    # clamp then saturates them).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
