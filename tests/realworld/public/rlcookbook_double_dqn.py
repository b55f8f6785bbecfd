# ruff: noqa: UP039
"""Double DQN with experience replay on CartPole from the PyTorch 1.x Reinforcement Learning Cookbook (chapter 7):
a two-layer Q-network fitted by MSE to TD targets built sample by sample (the predicted Q-values with the taken
action's entry replaced by ``reward + gamma * max`` of a target network's Q-values at the next state, or by the
reward alone at a terminal step), one replay of ``replay_size`` transitions after every environment step, the target
network copied every ``target_update`` episodes, epsilon-greedy with per-episode decay.

Source: https://github.com/PacktPublishing/PyTorch-1.x-Reinforcement-Learning-Cookbook
Commit: 7ded3e1221cb1fa40bc97c626d0b53df3da80df4
Files: ``Chapter07/chapter7/double_dqn_cartpole.py`` (``DQN``: ``update``, ``predict``, ``target_predict``,
``replay``, ``copy_target``; ``gen_epsilon_greedy_policy``; ``q_learning``; the first setting of the script's grid)
License: MIT (Copyright (c) 2019 Packt; full text in LICENSES/PacktPublishing-PyTorch-1.x-Reinforcement-Learning-Cookbook.txt)
Domain: RL, value-based (double DQN: replay, target network, epsilon-greedy)

Kept as written: ``DQN`` (``Linear(n_state, n_hidden)``, ``ReLU``, ``Linear(n_hidden, n_action)``, ``MSELoss``,
the target network by ``copy.deepcopy``, Adam over ``model``), ``update`` (zero_grad, backward, step), ``replay``
(``random.sample`` of ``replay_size`` transitions once the memory holds that many, the per-sample TD targets),
``copy_target``, ``gen_epsilon_greedy_policy``, and ``q_learning``'s loop body (target copy every
``target_update`` episodes, the transition appended to a ``deque(maxlen=10000)``, no replay on the terminal step,
epsilon decayed by 0.99 per episode with floor 0.01); the first setting of the script's grid: n_hidden 30,
lr 0.001, replay_size 20, target_update 30, gamma 0.9, epsilon 1.

Deviations from the original:
- gym's CartPole-v0 is the cart-pole written out in numpy in ``_cartpole.py`` (the synthetic data, seeded from
  ``seed``), with CartPole-v0's 200-step time limit applied in the loop; its gym >= 0.26 ``reset``/``step``
  signatures are unpacked where the original unpacks gym < 0.26's;
- ``random`` is a ``random.Random(seed)`` instance (``env.seed(1)``, ``random.seed(1)``, ``torch.manual_seed(1)``
  become the build's ``seed``); ``torch.autograd.Variable`` is dropped (a no-op wrapper); the states are stacked
  with ``numpy`` before ``torch.Tensor`` (a list of arrays is slow there);
- the grid search over 16 settings and 600 episodes is not run: one ``train_step`` is one pass of ``q_learning``'s
  inner ``while`` loop (one environment step, then one ``replay``), with the episode's start (target copy, policy,
  ``reset``) and end (epsilon decay) done where the original does them; the build plays the first steps until the
  memory holds ``replay_size`` transitions (where the original's ``replay`` starts doing anything);
- ``update`` and ``replay`` return the loss (the original returns nothing) so the step has a loss to report;
  the reward bookkeeping and printing are dropped;
- the Program declares ``dqn.model``, a replay batch of states and TD targets built at build time with
  ``replay``'s own rule, and the ``MSELoss``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys
from collections import deque

import numpy as np
import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

SELF_CHECK_STEPS = 60  # (port) one environment step and one replay of 20 transitions per step: cheap and noisy
MAX_EPISODE_STEPS = 200  # (port) CartPole-v0's time limit


class DQN():
    def __init__(self, n_state, n_action, n_hidden=50, lr=0.05, bug=None):
        self.criterion = torch.nn.MSELoss()
        self.model = torch.nn.Sequential(
                        torch.nn.Linear(n_state, n_hidden),
                        torch.nn.ReLU(),
                        torch.nn.Linear(n_hidden, n_action)
                )

        self.model_target = copy.deepcopy(self.model)

        self.optimizer = torch.optim.Adam(self.model.parameters(), lr)
        self.bug = bug
        self.random = random.Random(0)

    def update(self, s, y):
        """
        Update the weights of the DQN given a training sample
        @param s: state
        @param y: target value
        """
        y_pred = self.model(torch.Tensor(np.array(s)))
        loss = self.criterion(y_pred, torch.Tensor(y))
        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def predict(self, s):
        """
        Compute the Q values of the state for all actions using the learning model
        @param s: input state
        @return: Q values of the state for all actions
        """
        with torch.no_grad():
            return self.model(torch.Tensor(s))

    def target_predict(self, s):
        """
        Compute the Q values of the state for all actions using the target network
        @param s: input state
        @return: targeted Q values of the state for all actions
        """
        with torch.no_grad():
            return self.model_target(torch.Tensor(s))

    def td_targets(self, replay_data, gamma):
        """(port) ``replay``'s loop over the sampled transitions, shared with the declared batch."""
        states = []
        td_targets = []
        for state, action, next_state, reward, is_done in replay_data:
            states.append(state)
            q_values = self.predict(state).tolist()
            if is_done:
                q_values[action] = reward
            else:
                if self.bug == "next_state_not_used":
                    q_values_next = self.target_predict(state).detach()
                else:
                    q_values_next = self.target_predict(next_state).detach()

                q_values[action] = reward + gamma * torch.max(q_values_next).item()
                if self.bug == "target_written_to_every_action":
                    q_values = [q_values[action]] * len(q_values)

            td_targets.append(q_values)
        return states, td_targets

    def replay(self, memory, replay_size, gamma):
        """
        Experience replay with target network
        @param memory: a list of experience
        @param replay_size: the number of samples we use to update the model each time
        @param gamma: the discount factor
        """
        if len(memory) >= replay_size:
            replay_data = self.random.sample(memory, replay_size)
            states, td_targets = self.td_targets(replay_data, gamma)
            return self.update(states, td_targets)
        return None

    def copy_target(self):
        self.model_target.load_state_dict(self.model.state_dict())


def gen_epsilon_greedy_policy(estimator, epsilon, n_action, rng):
    def policy_function(state):
        if rng.random() < epsilon:
            return rng.randint(0, n_action - 1)
        else:
            q_values = estimator.predict(state)
            return torch.argmax(q_values).item()
    return policy_function


def _build(seed, bug=None):
    n_state, n_action = 4, 2
    n_hidden, lr, replay_size, target_update = 30, 0.001, 20, 30
    gamma, epsilon_decay = .9, .99

    env = CartPole(seed)  # (port) gym.envs.make("CartPole-v0"); env.seed(1)
    rng = random.Random(seed)  # (port) random.seed(1)
    torch.manual_seed(seed)

    dqn = DQN(n_state, n_action, n_hidden, lr, bug=bug)
    dqn.random = rng
    memory = deque(maxlen=10000)
    st = {"episode": 0, "epsilon": 1.0, "state": None, "policy": None}

    def start_episode():
        if st["episode"] % target_update == 0:
            dqn.copy_target()
        st["policy"] = gen_epsilon_greedy_policy(dqn, st["epsilon"], n_action, rng)
        st["state"], _ = env.reset()

    def env_step():
        """One pass of the inner ``while not is_done`` loop up to the replay; True when the episode ended."""
        state = st["state"]
        action = st["policy"](state)
        next_state, reward, is_done, _truncated, _ = env.step(action)
        is_done = is_done or env.steps >= MAX_EPISODE_STEPS  # (port) CartPole-v0's time limit
        memory.append((state, action, next_state, reward, is_done))
        if is_done:
            st["epsilon"] = max(st["epsilon"] * epsilon_decay, 0.01)
            st["episode"] += 1
            start_episode()
            return True
        st["state"] = next_state
        return False

    start_episode()
    while len(memory) < replay_size:  # (port) the first steps, before replay does anything
        env_step()

    def train_step():
        loss = None
        while loss is None:
            if env_step():
                continue  # the terminal step has no replay
            loss = dqn.replay(memory, replay_size, gamma)
        return loss

    states, td_targets = dqn.td_targets(random.Random(seed + 1).sample(memory, replay_size), gamma)
    batch = (torch.Tensor(np.array(states)), torch.Tensor(td_targets))

    return Program(name="rlcookbook_double_dqn", model=dqn.model, batch=batch, loss_fn=dqn.criterion,
                   optimizer=dqn.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the bootstrap term is read at the transition's own state instead of the next state, so the target is
    # no longer the Bellman backup of the environment's dynamics.
    Bug("next_state_not_used", functools.partial(_build, bug="next_state_not_used"), "learning_ledger", ("TASK",)),
    # classic: the TD target written to every action's entry instead of the taken action's only, so every action is
    # pulled to the taken action's return and the Q-values cannot separate the actions.
    Bug("target_written_to_every_action", functools.partial(_build, bug="target_written_to_every_action"),
        "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() left out of update, every replay adds all earlier replays' gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
