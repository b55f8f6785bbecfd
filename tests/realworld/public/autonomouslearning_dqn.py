# ruff: noqa: PLR0402, RUF059, SIM118
"""DQN on cart-pole with the Autonomous Learning Library's classic-control preset (State masks, fixed target).

Source: https://github.com/cpnota/autonomous-learning-library, commit f8073e51eb2462b8425dcb740f06e97ff10e2b1b,
files ``all/presets/classic_control/dqn.py`` (the preset and its hyperparameters),
``all/presets/classic_control/models/__init__.py`` (``fc_relu_q``), ``all/agents/dqn.py`` (``DQN``),
``all/approximation/approximation.py`` (``Approximation``: ``reinforce``/``step``), ``all/approximation/q_network.py``
(``QNetwork``, ``QModule``), ``all/approximation/target/fixed.py`` (``FixedTarget``), ``all/nn/__init__.py``
(``RLNetwork``), ``all/core/state.py`` (``State``, ``StateArray``: ``apply``, ``as_input``, ``as_output``,
``apply_mask``, ``array``, ``from_gym``), ``all/memory/replay_buffer.py`` (``ExperienceReplayBuffer``),
``all/policies/greedy.py`` (``GreedyPolicy``), ``all/optim/scheduler.py`` (``LinearScheduler``),
``all/experiments/single_env_experiment.py`` (the act loop). License: MIT (Copyright (c) 2019 Chris Nota; full
text in LICENSES/cpnota-autonomous-learning-library.txt).

Kept as written: the preset's hyperparameters (discount 0.99, Adam lr 1e-3, minibatch 64, update_frequency 1,
target_update_frequency 100, replay_buffer_size 10000, exploration 1.0 -> 0.0 linearly from replay_start_size to
final_exploration_step), ``fc_relu_q`` (Flatten, Linear(4, 64), ReLU, Linear(64, 2)), ``DQN.act``/``_train``
(store, train, epsilon-greedy action; ``values = q(states, actions)``, ``targets = rewards + discount *
max(q.target(next_states))``, ``mse_loss``, ``q.reinforce(loss)``), ``Approximation.reinforce``/``step``
(backward, ``optimizer.step()``, ``optimizer.zero_grad()``, target update), ``FixedTarget`` (a deep copy
reloaded every 100 updates, evaluated under no_grad), ``QModule``/``RLNetwork`` (``state.apply(model,
'observation')``: the batch dimension, the output reshaped and multiplied by the state's ``mask``, which is 0 at
a terminal state: this is how the library stops bootstrapping), ``ExperienceReplayBuffer`` (no transition stored
out of a done state; sampling with replacement), ``State.from_gym`` (``done = terminated or truncated``,
``mask = 1 - terminated``), the single-environment loop (reset, act, then step/act until done).

Deviations:
- gym's CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations, seeded); only
  the parts of ``State``/``StateArray`` that this program reaches are written out (no devices, no info keys).
- replay_start_size 1000 and final_exploration_step 10000 are shrunk to 300 and 3000 (2 CPU cores); at build time
  the experiment loop runs until the buffer is about to start training (epsilon is 1.0 there, as the schedule
  says); ``train_step`` is one more iteration of the loop: ``env.step`` (reset after a done state) and
  ``agent.act``, which stores the transition and makes one update.
- ``np.random`` (the buffer's and the policy's) is a ``numpy.random.RandomState(seed)``; ``_train`` keeps its loss
  so the step can return it; logging and checkpointing (Dummy objects in the preset) are left out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn.functional import mse_loss
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

default_hyperparameters = {
    # Common settings
    "discount_factor": 0.99,
    # Adam optimizer settings
    "lr": 1e-3,
    # Training settings
    "minibatch_size": 64,
    "update_frequency": 1,
    "target_update_frequency": 100,
    # Replay buffer settings
    "replay_start_size": 300,
    "replay_buffer_size": 10000,
    # Explicit exploration
    "initial_exploration": 1.0,
    "final_exploration": 0.0,
    "final_exploration_step": 3000,
    "test_exploration": 0.001,
}


# ---- all/core/state.py --------------------------------------------------------------------------------------
class State(dict):
    def __init__(self, x, bug=None):
        super().__init__(x)
        self._shape = ()
        self.bug = bug

    @classmethod
    def array(cls, list_of_states):
        shape = (len(list_of_states), *list_of_states[0].shape)
        x = {}
        for key in list_of_states[0].keys():
            v = list_of_states[0][key]
            if torch.is_tensor(v):
                x[key] = torch.stack([state[key] for state in list_of_states])
            else:
                x[key] = torch.tensor([state[key] for state in list_of_states])
        return StateArray(x, shape, bug=list_of_states[0].bug)

    def apply(self, model, *keys):
        if self.bug == "terminal_mask_not_applied":
            return self.as_output(model(*[self.as_input(key) for key in keys]))
        return self.apply_mask(
            self.as_output(model(*[self.as_input(key) for key in keys]))
        )

    def as_input(self, key):
        return self[key].unsqueeze(0)

    def as_output(self, tensor):
        return tensor.squeeze(0)

    def apply_mask(self, tensor):
        return tensor * self.mask

    @classmethod
    def from_gym(cls, gym_output, dtype=np.float32, bug=None):
        if isinstance(gym_output, tuple) and len(gym_output) == 5:
            observation, reward, terminated, truncated, info = gym_output
        else:
            observation, info = gym_output
            reward = 0.0
            terminated = False
            truncated = False
        x = {
            "observation": torch.from_numpy(np.array(observation, dtype=dtype)),
            "reward": float(reward),
            "done": terminated or truncated,
            "mask": 1.0 - terminated,
        }
        return State(x, bug=bug)

    @property
    def observation(self):
        return self["observation"]

    @property
    def reward(self):
        return self["reward"]

    @property
    def done(self):
        return self["done"]

    @property
    def mask(self):
        return self["mask"]

    @property
    def shape(self):
        return self._shape


class StateArray(State):
    def __init__(self, x, shape, bug=None):
        super().__init__(x, bug=bug)
        self._shape = shape

    def as_input(self, key):
        value = self[key]
        return value.view((np.prod(self.shape), *value.shape[len(self.shape):]))

    def as_output(self, tensor):
        return tensor.view((*self.shape, *tensor.shape[1:]))

    def apply_mask(self, tensor):
        return tensor * self.mask.unsqueeze(-1)


# ---- all/presets/classic_control/models, all/nn, all/approximation ---------------------------------------------
def fc_relu_q(env, hidden=64):
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(env.state_space.shape[0], hidden),
        nn.ReLU(),
        nn.Linear(hidden, env.action_space.n),
    )


class RLNetwork(nn.Module):
    def __init__(self, model, _=None):
        super().__init__()
        self.model = model
        self.device = next(model.parameters()).device

    def forward(self, state):
        return state.apply(self.model, "observation")


class QModule(RLNetwork):
    def __init__(self, model, bug=None):
        super().__init__(model)
        self.bug = bug

    def forward(self, states, actions=None):
        values = super().forward(states)
        if actions is None:
            return values
        if isinstance(actions, list):
            actions = torch.tensor(actions, device=self.device)
        if self.bug == "gather_over_batch":
            return values.gather(0, actions.view(-1, 1)).squeeze(1)
        return values.gather(1, actions.view(-1, 1)).squeeze(1)


class FixedTarget:
    def __init__(self, update_frequency):
        self._source = None
        self._target = None
        self._updates = 0
        self._update_frequency = update_frequency

    def __call__(self, *inputs):
        with torch.no_grad():
            return self._target(*inputs)

    def init(self, model):
        self._source = model
        self._target = copy.deepcopy(model)

    def update(self):
        self._updates += 1
        if self._should_update():
            self._target.load_state_dict(self._source.state_dict())

    def _should_update(self):
        return self._updates % self._update_frequency == 0


class Approximation:
    def __init__(self, model, optimizer=None, clip_grad=0, loss_scaling=1, name="approximation", target=None,
                 bug=None):
        self.model = model
        self._target = target
        self._target.init(model)
        self._updates = 0
        self._optimizer = optimizer
        self._loss_scaling = loss_scaling
        self._clip_grad = clip_grad
        self._name = name
        self.bug = bug

    def __call__(self, *inputs):
        return self.model(*inputs)

    def no_grad(self, *inputs):
        with torch.no_grad():
            return self.model(*inputs)

    def target(self, *inputs):
        return self._target(*inputs)

    def reinforce(self, loss):
        loss = self._loss_scaling * loss
        loss.backward()
        self.step(loss=loss)
        return self

    def step(self, loss=None):
        self._clip_grad_norm()
        if self.bug == "zero_grad_before_step":
            self._optimizer.zero_grad()
            self._optimizer.step()
        else:
            self._optimizer.step()
            self._optimizer.zero_grad()
        self._target.update()
        return self

    def _clip_grad_norm(self):
        if self._clip_grad != 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self._clip_grad, error_if_nonfinite=True)


class QNetwork(Approximation):
    def __init__(self, model, optimizer=None, name="q", bug=None, **kwargs):
        model = QModule(model, bug=bug)
        super().__init__(model, optimizer, name=name, bug=bug, **kwargs)


# ---- all/optim/scheduler.py, all/policies/greedy.py, all/memory/replay_buffer.py ------------------------------
class LinearScheduler:
    def __init__(self, initial_value, final_value, decay_start, decay_end, name="variable"):
        self._initial_value = initial_value
        self._final_value = final_value
        self._decay_start = decay_start
        self._decay_end = decay_end
        self._i = -1
        self._name = name

    def _get_value(self):
        self._i += 1
        if self._i < self._decay_start:
            return self._initial_value
        if self._i >= self._decay_end:
            return self._final_value
        alpha = (self._i - self._decay_start) / (self._decay_end - self._decay_start)
        return alpha * self._final_value + (1 - alpha) * self._initial_value


class GreedyPolicy:
    def __init__(self, q, num_actions, epsilon=0.0, np_random=None):
        self.q = q
        self.num_actions = num_actions
        self._epsilon = epsilon
        self.np_random = np_random

    @property
    def epsilon(self):  # Schedulable: reading the attribute advances the scheduler
        return self._epsilon._get_value() if isinstance(self._epsilon, LinearScheduler) else self._epsilon

    def no_grad(self, state):
        if self.np_random.rand() < self.epsilon:
            return self.np_random.randint(0, self.num_actions)
        return torch.argmax(self.q.no_grad(state)).item()


class ExperienceReplayBuffer:
    def __init__(self, size, np_random=None):
        self.buffer = []
        self.capacity = int(size)
        self.pos = 0
        self.np_random = np_random

    def store(self, state, action, next_state):
        if state is not None and not state.done:
            self._add((state, action, next_state))

    def sample(self, batch_size):
        keys = self.np_random.choice(len(self.buffer), batch_size, replace=True)
        minibatch = [self.buffer[key] for key in keys]
        return self._reshape(minibatch, torch.ones(batch_size))

    def _add(self, sample):
        if len(self.buffer) < self.capacity:
            self.buffer.append(sample)
        else:
            self.buffer[self.pos] = sample
        self.pos = (self.pos + 1) % self.capacity

    def _reshape(self, minibatch, weights):
        states = State.array([sample[0] for sample in minibatch])
        if torch.is_tensor(minibatch[0][1]):
            actions = torch.stack([sample[1] for sample in minibatch])
        else:
            actions = torch.tensor([sample[1] for sample in minibatch])
        next_states = State.array([sample[2] for sample in minibatch])
        return (states, actions, next_states.reward, next_states, weights)

    def __len__(self):
        return len(self.buffer)


# ---- all/agents/dqn.py --------------------------------------------------------------------------------------
class DQN:
    def __init__(self, q, policy, replay_buffer, discount_factor=0.99, loss=mse_loss, minibatch_size=32,
                 replay_start_size=5000, update_frequency=1):
        # objects
        self.q = q
        self.policy = policy
        self.replay_buffer = replay_buffer
        self.loss = loss
        # hyperparameters
        self.discount_factor = discount_factor
        self.minibatch_size = minibatch_size
        self.replay_start_size = replay_start_size
        self.update_frequency = update_frequency
        # private
        self._state = None
        self._action = None
        self._frames_seen = 0
        self.last_loss = None

    def act(self, state):
        self.replay_buffer.store(self._state, self._action, state)
        self._train()
        self._state = state
        self._action = self.policy.no_grad(state)
        return self._action

    def _train(self):
        if self._should_train():
            # sample transitions from buffer
            (states, actions, rewards, next_states, _) = self.replay_buffer.sample(
                self.minibatch_size
            )
            # forward pass
            values = self.q(states, actions)
            # compute targets
            targets = (
                rewards
                + self.discount_factor * torch.max(self.q.target(next_states), dim=1)[0]
            )
            # compute loss
            loss = self.loss(values, targets)
            # backward pass
            self.q.reinforce(loss)
            self.last_loss = loss.detach()

    def _should_train(self):
        self._frames_seen += 1
        return (
            self._frames_seen > self.replay_start_size
            and self._frames_seen % self.update_frequency == 0
        )


class _Space:
    def __init__(self, shape=None, n=None):
        self.shape, self.n = shape, n


class _EnvSpec:
    state_space = _Space(shape=(4,))
    action_space = _Space(n=2)


class Environment:
    """all/environments/gym.py's GymEnvironment around the written-out cart-pole."""

    def __init__(self, seed, bug=None):
        self._env = CartPole(seed)
        self.bug = bug
        self._state = None

    def reset(self):
        self._state = State.from_gym(self._env.reset(), bug=self.bug)
        return self._state

    def step(self, action):
        self._state = State.from_gym(self._env.step(action), bug=self.bug)
        return self._state


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np_random = np.random.RandomState(seed)
    hp = default_hyperparameters
    env = Environment(seed, bug)
    model = fc_relu_q(_EnvSpec())
    optimizer = Adam(model.parameters(), lr=hp["lr"])
    q = QNetwork(model, optimizer, target=FixedTarget(hp["target_update_frequency"]), bug=bug)
    policy = GreedyPolicy(
        q,
        2,
        epsilon=LinearScheduler(
            hp["initial_exploration"],
            hp["final_exploration"],
            hp["replay_start_size"],
            hp["final_exploration_step"] - hp["replay_start_size"],
            name="exploration",
        ),
        np_random=np_random,
    )
    replay_buffer = ExperienceReplayBuffer(hp["replay_buffer_size"], np_random=np_random)
    agent = DQN(q, policy, replay_buffer, discount_factor=hp["discount_factor"],
                minibatch_size=hp["minibatch_size"], replay_start_size=hp["replay_start_size"],
                update_frequency=hp["update_frequency"])

    # the experiment loop up to the first update
    loop = {"state": env.reset()}
    loop["action"] = agent.act(loop["state"])
    while agent._frames_seen < hp["replay_start_size"]:
        state = env.reset() if loop["state"].done else env.step(loop["action"])
        loop["state"], loop["action"] = state, agent.act(state)

    states, actions, rewards, next_states, _ = replay_buffer.sample(hp["minibatch_size"])
    batch = (states.observation, (actions, rewards, next_states))

    def loss_fn(q_values, targets):
        actions, rewards, next_states = targets
        if bug == "gather_over_batch":
            values = q_values.gather(0, actions.view(-1, 1)).squeeze(1)
        else:
            values = q_values.gather(1, actions.view(-1, 1)).squeeze(1)
        targets = rewards + hp["discount_factor"] * torch.max(q.target(next_states), dim=1)[0]
        return mse_loss(values, targets)

    def train_step():
        state = env.reset() if loop["state"].done else env.step(loop["action"])
        loop["state"], loop["action"] = state, agent.act(state)
        return agent.last_loss

    return Program(name="autonomouslearning_dqn", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``State.apply`` without ``apply_mask``: the target network's values at terminal next states are not zeroed,
    # so the TD target bootstraps past the end of the episode (classic: the done mask lost; the library keeps it
    # inside the state, so it goes missing when a custom network or state wrapper skips ``apply``).
    Bug("terminal_mask_not_applied", functools.partial(_build, bug="terminal_mask_not_applied"), "learning_ledger",
        ("TASK",)),
    # ``values.gather(0, ...)`` for ``gather(1, ...)`` in ``QModule.forward`` (classic wrong axis): the "Q-value of
    # the taken action" is read from row 0 or 1 of the minibatch, not from the example's own row.
    Bug("gather_over_batch", functools.partial(_build, bug="gather_over_batch"), "learning_ledger",
        ("DEPENDENCY",)),
    # ``Approximation.step`` clearing the gradients before ``optimizer.step()`` (classic order slip): Adam steps on
    # zero gradients and the network never moves.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
