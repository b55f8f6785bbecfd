# ruff: noqa: UP004, UP008, SIM101, B008, PLR1730, RUF059
"""The deep Q-learner of "Hands-On Intelligent Agents with OpenAI Gym" (Packt), chapter 6, on its single-layer
perceptron branch (one-dimensional observations): a 40-unit ReLU ``SLP`` with Xavier-normal weights, epsilon-greedy
with a linear decay schedule, a ring-buffer experience memory, and one replay per finished episode once the memory
holds twice ``replay_start_size``: sign-clipped rewards, a TD target from a target network copied every
``target_network_update_freq`` agent steps with ``~done`` masking the bootstrap, ``mse_loss`` on the gathered
Q-values, Adam.

Source: https://github.com/PacktPublishing/Hands-On-Intelligent-Agents-with-OpenAI-Gym
Commit: bc450752aeb5172237fca1fdc25d9fd0efa3416b
Files: ``ch6/deep_Q_learner.py`` (``Deep_Q_Learner``: ``get_action``, ``epsilon_greedy_Q``,
``learn_from_batch_experience``, ``replay_experience``; the ``__main__`` loop), ``ch6/function_approximator/
perceptron.py`` (``SLP``), ``ch6/utils/decay_schedule.py`` (``LinearDecaySchedule``), ``ch6/utils/
experience_memory.py`` (``Experience``, ``ExperienceMemory``), ``ch6/utils/weights_initializer.py`` (``xavier``),
``ch6/parameters.json`` (the agent parameters)
License: MIT (Copyright (c) 2018- Praveen Palanisamy and Packt; full text in
LICENSES/PacktPublishing-Hands-On-Intelligent-Agents-with-OpenAI-Gym.txt)
Domain: RL, value-based (DQN with experience replay and a target network, one replay per episode)

Kept as written: ``SLP`` (``from_numpy`` in ``forward``, hidden 40), ``xavier`` applied to ``Q`` only, the target
network built without it, ``LinearDecaySchedule``, ``ExperienceMemory``, ``get_action`` (observations divided by
255.0 as the script does for every environment, also for these low-dimensional ones), ``epsilon_greedy_Q``
(``step_num`` counted per action), ``learn_from_batch_experience`` (``np.sign`` reward clipping, the target copy when
``step_num % target_network_update_freq == 0``, ``reward + ~done * gamma * max Q_target(next)``, ``mse_loss``,
zero_grad, ``mean().backward()``, step), ``replay_experience``, and the loop body of ``__main__`` (store every
transition, replay once at each episode's end when the memory holds ``2 * replay_start_size``); the parameters of
``parameters.json``: lr 0.00025, gamma 0.99, replay batch 32, epsilon 1.0 -> 0.1 over 1e6 steps, clip_rewards true,
use_target_network true, target_network_update_freq 10000.

Deviations from the original:
- the Atari environments are not here: the agent runs on the cart-pole written out in numpy in ``_cartpole.py``
  (the synthetic data, seeded from ``seed``; 4 observations, so ``Deep_Q_Learner`` takes its ``SLP`` branch),
  with gym < 0.26's ``done`` taken as ``done or truncated``;
- ``replay_start_size`` is 100 instead of 50000 and the memory capacity 10000 instead of 1e5 (sized for 2 CPU
  cores); ``seed`` 555 is the build's seed, the global ``random`` is a ``random.Random(seed)`` instance (memory
  sampling and exploration); the ``SummaryWriter`` lines, saving, loading, rendering, recording, the printing and
  the best-reward bookkeeping are dropped; the device is the CPU;
- one ``train_step`` is one episode of the ``__main__`` loop and its replay (the build plays the episodes before the
  memory holds ``2 * replay_start_size``); ``learn_from_batch_experience`` returns the TD loss (the original returns
  nothing) so the step has a loss to report; the self-check runs 150 episodes (``SELF_CHECK_STEPS``) since one
  replay of 32 transitions at lr 0.00025 moves the loss little;
- the Program declares ``Q`` (the ``SLP``), a replay batch of scaled observations with the taken actions and TD
  targets (the method's own rule, at build time), the gathered ``mse_loss`` and ``Q_optimizer``;
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

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

SELF_CHECK_STEPS = 150  # (port) one replay of 32 transitions per episode at lr 0.00025
device = torch.device("cpu")

PARAMS = {
    "max_training_steps": 10e6,
    "epsilon_decay_final_step": 1000000,
    "experience_memory_capacity": 1e4,  # (port) 1e5
    "replay_start_size": 100,  # (port) 50000
    "replay_batch_size": 32,
    "use_target_network": True,
    "target_network_update_freq": 10000,
    "lr": 0.00025,
    "gamma": 0.99,
    "epsilon_max": 1.0,
    "epsilon_min": 0.1,
    "clip_rewards": True,
    "test": False,
}


class SLP(torch.nn.Module):
    """
    A Single Layer Perceptron (SLP) class to approximate functions
    """
    def __init__(self, input_shape, output_shape, device=torch.device("cpu")):
        super(SLP, self).__init__()
        self.device = device
        self.input_shape = input_shape[0]
        self.hidden_shape = 40
        self.linear1 = torch.nn.Linear(self.input_shape, self.hidden_shape)
        self.out = torch.nn.Linear(self.hidden_shape, output_shape)

    def forward(self, x):
        x = torch.from_numpy(x).float().to(self.device)
        x = torch.nn.functional.relu(self.linear1(x))
        x = self.out(x)
        return x


def xavier(m):
    if isinstance(m, torch.nn.Conv2d) or isinstance(m, torch.nn.Linear):
        torch.nn.init.xavier_normal_(m.weight)


class LinearDecaySchedule(object):
    def __init__(self, initial_value, final_value, max_steps):
        assert initial_value > final_value, "initial_value should be > final_value"
        self.initial_value = initial_value
        self.final_value = final_value
        self.decay_factor = (initial_value - final_value) / max_steps

    def __call__(self, step_num):
        current_value = self.initial_value - self.decay_factor * step_num
        if current_value < self.final_value:
            current_value = self.final_value
        return current_value


Experience = namedtuple("Experience", ['obs', 'action', 'reward', 'next_obs',
                                       'done'])


class ExperienceMemory(object):
    """
    A cyclic/ring buffer based Experience Memory implementation
    """
    def __init__(self, capacity=int(1e6), rng=random):
        self.capacity = capacity
        self.mem_idx = 0  # Index of the current experience
        self.memory = []
        self.random = rng

    def store(self, experience):
        if self.mem_idx < self.capacity:
            # Extend the memory and create space
            self.memory.append(None)
        self.memory[self.mem_idx % self.capacity] = experience
        self.mem_idx += 1

    def sample(self, batch_size):
        assert batch_size <= len(self.memory), "Sample batch_size is more than available exp in mem"
        return self.random.sample(self.memory, batch_size)

    def get_size(self):
        return len(self.memory)


class Deep_Q_Learner(object):
    def __init__(self, state_shape, action_shape, params, rng, bug=None):
        self.state_shape = state_shape
        self.action_shape = action_shape
        self.params = params
        self.gamma = self.params['gamma']  # Agent's discount factor
        self.learning_rate = self.params['lr']  # Agent's Q-learning rate
        self.training_steps_completed = 0  # Number of training batch steps completed so far
        self.random = rng
        self.bug = bug

        self.DQN = SLP  # Single dimensional observation/state space

        self.Q = self.DQN(state_shape, action_shape, device).to(device)
        self.Q.apply(xavier)

        self.Q_optimizer = torch.optim.Adam(self.Q.parameters(), lr=self.learning_rate)
        if self.params['use_target_network']:
            self.Q_target = self.DQN(state_shape, action_shape, device).to(device)
        self.policy = self.epsilon_greedy_Q
        self.epsilon_max = params["epsilon_max"]
        self.epsilon_min = params["epsilon_min"]
        self.epsilon_decay = LinearDecaySchedule(initial_value=self.epsilon_max,
                                    final_value=self.epsilon_min,
                                    max_steps= self.params['epsilon_decay_final_step'])
        self.step_num = 0

        self.memory = ExperienceMemory(capacity=int(self.params['experience_memory_capacity']), rng=rng)

    def get_action(self, observation):
        observation = np.array(observation)  # Observations could be lazy frames. So force fetch before moving forward
        observation = observation / 255.0  # Scale/Divide by max limit of obs' dtype. 255 for uint8
        return self.policy(observation)

    def epsilon_greedy_Q(self, observation):
        self.step_num +=1
        if self.random.random() < self.epsilon_decay(self.step_num) and not self.params["test"]:
            action = self.random.choice([i for i in range(self.action_shape)])
        else:
            with torch.no_grad():  # (port) the original builds a graph it never uses
                action = np.argmax(self.Q(observation).data.to(torch.device('cpu')).numpy())
        return action

    def batch_targets(self, experiences):
        """(port) ``learn_from_batch_experience`` up to the TD target, shared with the declared batch."""
        batch_xp = Experience(*zip(*experiences))
        obs_batch = np.array(batch_xp.obs) / 255.0  # Scale/Divide by max limit of obs's dtype. 255 for uint8
        action_batch = np.array(batch_xp.action)
        reward_batch = np.array(batch_xp.reward)
        # Clip the rewards
        if self.params["clip_rewards"]:
            reward_batch = np.sign(reward_batch)
        next_obs_batch = np.array(batch_xp.next_obs) / 255.0  # Scale/Divide by max limit of obs' dtype. 255 for uint8
        done_batch = np.array(batch_xp.done)

        if self.params['use_target_network']:
            if self.step_num % self.params['target_network_update_freq'] == 0:
                self.Q_target.load_state_dict(self.Q.state_dict())
            td_target = reward_batch + ~done_batch * \
                np.tile(self.gamma, len(next_obs_batch)) * \
                self.Q_target(next_obs_batch).max(1)[0].data.cpu().numpy()
        else:
            td_target = reward_batch + ~done_batch * \
                np.tile(self.gamma, len(next_obs_batch)) * \
                self.Q(next_obs_batch).detach().max(1)[0].data.cpu().numpy()

        td_target = torch.from_numpy(td_target).to(device)
        action_idx = torch.from_numpy(action_batch).to(device)
        return obs_batch, action_idx, td_target

    def learn_from_batch_experience(self, experiences):
        obs_batch, action_idx, td_target = self.batch_targets(experiences)
        td_error = torch.nn.functional.mse_loss( self.Q(obs_batch).gather(1, action_idx.view(-1, 1)),
                                                       td_target.float().unsqueeze(1))

        if self.bug != "zero_grad_dropped":
            self.Q_optimizer.zero_grad()
        td_error.mean().backward()
        self.Q_optimizer.step()
        return td_error.item()

    def replay_experience(self, batch_size = None):
        batch_size = batch_size if batch_size is not None else self.params['replay_batch_size']
        experience_batch = self.memory.sample(batch_size)
        loss = self.learn_from_batch_experience(experience_batch)
        self.training_steps_completed += 1  # Increment the number of training batch steps complemented
        return loss


def _episode(env, agent, bug):
    """One episode of ``__main__``'s loop; the replay at its end once the memory is large enough."""
    obs, _ = env.reset()
    done = False
    while not done:
        action = agent.get_action(obs)
        next_obs, reward, done, truncated, info = env.step(action)
        done = done or truncated  # (port) gym < 0.26's single flag
        if bug == "done_stored_as_int":
            agent.memory.store(Experience(obs, action, reward, next_obs, int(done)))
        else:
            agent.memory.store(Experience(obs, action, reward, next_obs, done))
        obs = next_obs
        if done is True:
            if agent.memory.get_size() >= 2 * agent.params['replay_start_size'] and not agent.params["test"]:
                return agent.replay_experience()
            break
    return None


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = random.Random(seed)
    env = CartPole(seed)
    agent = Deep_Q_Learner((4,), 2, dict(PARAMS), rng, bug=bug)

    while agent.memory.get_size() < 2 * agent.params['replay_start_size']:
        _episode(env, agent, bug)

    obs_b, act_b, td_b = agent.batch_targets(random.Random(seed + 1).sample(agent.memory.memory, 32))
    batch = (obs_b, (act_b, td_b))

    def loss_fn(q_out, targets):
        action_idx, td_target = targets
        return torch.nn.functional.mse_loss(q_out.gather(1, action_idx.view(-1, 1)), td_target.float().unsqueeze(1))

    def train_step():
        return _episode(env, agent, bug)

    return Program(name="intelligentagents_dqn", model=agent.Q, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.Q_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the done flag stored as an int (``int(done)``); ``~`` on an integer array is the bitwise not (~0 = -1,
    # ~1 = -2), so every bootstrap term is subtracted instead of masked: the TD target is r - gamma * max Q'.
    Bug("done_stored_as_int", functools.partial(_build, bug="done_stored_as_int"), "learning_ledger", ("TASK",)),
    # classic: Q_optimizer.zero_grad() left out, every replay adds all earlier replays' gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
