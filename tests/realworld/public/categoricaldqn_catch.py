# ruff: noqa: UP004, UP008, PLR0402
"""Categorical DQN (C51) on Catch, from floringogianu/categorical-dqn (``configs/catch_categorical.yaml``): a small
conv net whose head is split into one 51-atom softmax per action over the support [-3, 3]; the target distribution
of the greedy next action under the target network is shifted by the Bellman operator, clamped and projected onto
the support (with the fix for the mass that vanishes when ``l == b == u``), and the loss is the cross-entropy
``-sum(target * log(p(s, a)))`` over the batch; Adam (lr 6.35e-4, eps 1.5e-4), an update every 2 steps once the
replay holds ``start_learning_after`` frames, a hard target copy every 24 steps, linear epsilon decay.

Source: https://github.com/floringogianu/categorical-dqn
Commit: eb939785e0e2eea60bbd67abeaedf4a9990fb5ce
Files: ``estimators/catch_net.py`` (``CatchNet``), ``policy_improvement/categorical_update.py``
(``CategoricalPolicyImprovement``), ``policy_evaluation/categorical.py`` (``CategoricalPolicyEvaluation``),
``policy_evaluation/exploration_schedules.py`` (``linear_schedule``), ``policy_improvement/optim_utils.py``
(``optim_factory``), ``data_structures/ntuple_experience_replay.py`` (``CircularBuffer``, ``nTupleExperienceReplay``)
(these three in the helper ``_categoricaldqn_lib.py``), ``agents/dqn_agent.py`` and ``agents/categorical_dqn_agent.py`` (the agent), ``utils/wrappers.py``
(``PreprocessFrames``' frame history), ``main.py`` (``train_agent``'s loop), ``configs/catch_categorical.yaml``
License: MIT (Copyright (c) 2017 Florin Gogianu; full text in LICENSES/floringogianu-categorical-dqn.txt)
Domain: RL, distributional value-based (C51: categorical projection, cross-entropy, replay of frame histories,
hard target copies)

Kept as written: ``CatchNet`` (the two convolutions, lin1 from 512, the head split per action with a softmax over
the atoms), ``CategoricalPolicyImprovement`` (``accumulate_gradient``, ``_get_categorical`` with the
``l``/``u`` fix and the index_add_ projection, ``update_model``, ``update_target_net``), ``get_action``, the replay
(frames stored as bytes, histories rebuilt at sampling, ``mask = 1 - done``), ``improve_policy``,
``evaluate_policy``, the frame history of ``PreprocessFrames`` and the body of ``train_agent``'s loop; the catch
config (hist_len 2, hidden_size 128, 51 atoms in [-3, 3], gamma 0.99, Adam lr 0.000635 eps 0.00015, update_freq 2,
target_update_freq 24, epsilon 1 -> 0.05 over 100000 steps).

Deviations from the original:
- gym_fast_envs' Catcher-Level0-v0 is replaced by a catch game written here (``Catcher``): 24x24 grayscale frames
  (the port skips the RGB-to-luma step), a 2x2 ball falling 2 pixels a step from a random column, a 6-pixel paddle
  on the bottom moved left, kept or moved right, reward +1 for a catch and -1 for a miss, which ends the episode;
  seeded from ``seed``;
- sizes for 2 CPU cores: batch_size 64 -> 32, replay_mem_size 100000 -> 10000, start_learning_after 1000 -> 100;
- the 2018 API is written in current torch: ``Variable``/``volatile`` become plain tensors and ``torch.no_grad``,
  the byte ``done`` is uint8, ``q_val[0]`` is ``.item()``, ``F.softmax(s)`` takes its implicit ``dim=1``;
- ``DQNAgent.__init__`` and ``evaluate_policy`` are merged into ``CategoricalDQNAgent`` (without the DQN estimator
  and update that the subclass replaces); statistics, reports, evaluation and CUDA are dropped;
- one ``train_step`` runs 8 steps of the loop (4 updates) and returns the mean of their losses
  (``accumulate_gradient`` returns its loss, which the original discards);
- the Program declares the online network with a replay batch and its projected targets from the initial target
  network;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _categoricaldqn_lib import linear_schedule, nTupleExperienceReplay, optim_factory

STEPS_PER_TRAIN_STEP = 8  # (port)


class Catcher:
    """(port) The environment: 24x24 frames, a ball falling 2 pixels a step, a paddle on the bottom row."""

    SIZE, PADDLE = 24, 6

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.action_no = 3

    def _frame(self):
        f = torch.zeros(self.SIZE, self.SIZE)
        f[self.ball_y:self.ball_y + 2, self.ball_x:self.ball_x + 2] = 1.0
        f[self.SIZE - 2:, self.paddle:self.paddle + self.PADDLE] = 1.0
        return f

    def reset(self):
        self.ball_y, self.ball_x = 0, int(self.rng.integers(0, self.SIZE - 1))
        self.paddle = int(self.rng.integers(0, self.SIZE - self.PADDLE + 1))
        return self._frame()

    def step(self, a):
        self.paddle = int(np.clip(self.paddle + 2 * (int(a) - 1), 0, self.SIZE - self.PADDLE))
        self.ball_y += 2
        done = self.ball_y >= self.SIZE - 2
        caught = self.paddle - 1 <= self.ball_x <= self.paddle + self.PADDLE - 1
        r = (1.0 if caught else -1.0) if done else 0.0
        return self._frame(), r, done, {}


class PreprocessFrames:
    """utils/wrappers.py: the frame history (hist_len frames concatenated on dim 1)."""

    def __init__(self, env, hist_len, state_dims):
        self.env, self.hist_len, self.state_dims = env, hist_len, state_dims
        self.d = collections.OrderedDict({i: torch.FloatTensor(1, 1, *state_dims).fill_(0) for i in range(hist_len)})

    def reset(self):
        self.d = collections.OrderedDict(
            {i: torch.FloatTensor(1, 1, *self.state_dims).fill_(0)
                for i in range(self.hist_len)})
        return self._get_concatenated_state(self.env.reset())

    def step(self, a):
        o, r, done, info = self.env.step(a)
        return self._get_concatenated_state(o), r, done, info

    def _get_concatenated_state(self, o):
        hist_len = self.hist_len
        for i in range(hist_len - 1):
            self.d[i] = self.d[i + 1]
        self.d[hist_len - 1] = o.unsqueeze(0).unsqueeze(0)
        return torch.cat(list(self.d.values()), 1)


# estimators/catch_net.py
class CatchNet(nn.Module):
    def __init__(self, input_channels, hist_len, out_size, hidden_size=32, bug=None):
        super(CatchNet, self).__init__()
        self.input_channels = input_channels
        self.hist_len = hist_len
        self.input_depth = hist_len * input_channels
        if type(out_size) is tuple:
            self.is_categorical = True
            self.action_no, self.atoms_no = out_size
            self.out_size = self.action_no * self.atoms_no
        else:
            self.is_categorical = False
            self.out_size = out_size
        self.hidden_size = hidden_size
        self.bug = bug

        self.conv1 = nn.Conv2d(self.input_depth, 32, kernel_size=5,
                               stride=2, padding=1)
        self.conv2 = nn.Conv2d(32, 32, kernel_size=5, stride=2)
        self.lin1 = nn.Linear(512, self.hidden_size)
        self.head = nn.Linear(self.hidden_size, self.out_size)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.lin1(x.view(x.size(0), -1)))
        out = self.head(x.view(x.size(0), -1))
        if self.is_categorical:
            splits = out.chunk(self.action_no, 1)
            if self.bug == "softmax_over_actions":
                return F.softmax(torch.stack(splits, 1), dim=1)
            return torch.stack(list(map(lambda s: F.softmax(s, dim=1), splits)), 1)  # noqa: C417
        else:
            return out


# policy_improvement/categorical_update.py
class CategoricalPolicyImprovement(object):
    """ Deep Q-Learning training method. """

    def __init__(self, policy, target_policy, cmdl):
        self.name = "Categorical-PI"
        self.cmdl = cmdl
        self.policy = policy
        self.target_policy = target_policy
        self.lr = cmdl.lr
        self.gamma = cmdl.gamma

        self.optimizer = optim_factory(self.policy.parameters(), cmdl)
        self.optimizer.zero_grad()

        self.v_min, self.v_max = v_min, v_max = cmdl.v_min, cmdl.v_max
        self.atoms_no = atoms_no = cmdl.atoms_no
        self.support = torch.linspace(v_min, v_max, atoms_no)
        self.delta_z = (cmdl.v_max - cmdl.v_min) / (cmdl.atoms_no - 1)
        self.m = torch.zeros(cmdl.batch_size, self.atoms_no)

    def accumulate_gradient(self, batch_sz, states, actions, rewards,
                            next_states, mask):
        # Compute probabilities of Q(s,a*)
        q_probs = self.policy(states)
        actions = actions.view(batch_sz, 1, 1)
        action_mask = actions.expand(batch_sz, 1, self.atoms_no)
        qa_probs = q_probs.gather(1, action_mask).squeeze()

        # Compute distribution of Q(s_,a)
        with torch.no_grad():
            target_qa_probs = self._get_categorical(next_states, rewards, mask)

        # Compute the cross-entropy of phi(TZ(x_,a)) || Z(x,a)
        qa_probs = qa_probs.clamp(min=1e-3)  # Tudor's trick for avoiding nans
        loss = - torch.sum(target_qa_probs * torch.log(qa_probs))

        # Accumulate gradients
        loss.backward()
        return loss.item()  # (port)

    def update_model(self):
        self.optimizer.step()
        self.optimizer.zero_grad()

    def _get_categorical(self, next_states, rewards, mask):
        batch_sz = next_states.size(0)
        gamma = self.gamma

        # Compute probabilities p(x, a)
        probs = self.target_policy(next_states).data
        qs = torch.mul(probs, self.support.expand_as(probs))
        argmax_a = qs.sum(2).max(1)[1].unsqueeze(1).unsqueeze(1)
        action_mask = argmax_a.expand(batch_sz, 1, self.atoms_no)
        qa_probs = probs.gather(1, action_mask).squeeze()

        # Mask gamma and reshape it torgether with rewards to fit p(x,a).
        rewards = rewards.expand_as(qa_probs)
        if self.cmdl.bug == "gamma_not_masked_at_done":
            gamma = (torch.ones_like(mask).float() * gamma).expand_as(qa_probs)
        else:
            gamma = (mask.float() * gamma).expand_as(qa_probs)

        # Compute projection of the application of the Bellman operator.
        bellman_op = rewards + gamma * self.support.unsqueeze(0).expand_as(rewards)
        bellman_op = torch.clamp(bellman_op, self.v_min, self.v_max)

        # Compute categorical indices for distributing the probability
        m = self.m.fill_(0)
        b = (bellman_op - self.v_min) / self.delta_z
        l = b.floor().long()
        u = b.ceil().long()
        if self.cmdl.bug != "vanishing_mass_fix_dropped":
            # Fix disappearing probability mass when l = b = u (b is int)
            l[(u > 0) * (l == u)] -= 1
            u[(l < (self.atoms_no - 1)) * (l == u)] += 1

        # Optimized by https://github.com/tudor-berariu
        offset = torch.linspace(0, ((batch_sz - 1) * self.atoms_no), batch_sz)\
            .type(torch.LongTensor)\
            .unsqueeze(1).expand(batch_sz, self.atoms_no)

        m.view(-1).index_add_(0, (l + offset).view(-1),
                              (qa_probs * (u.float() - b)).view(-1))
        m.view(-1).index_add_(0, (u + offset).view(-1),
                              (qa_probs * (b - l.float())).view(-1))
        return m.clone()  # (port) Variable(m) upstream

    def update_target_net(self):
        """ Update the target net with the parameters in the online model."""
        self.target_policy.load_state_dict(self.policy.state_dict())


# policy_evaluation/categorical.py
class CategoricalPolicyEvaluation(object):
    def __init__(self, policy, cmdl):
        self.policy = policy
        self.support = torch.linspace(cmdl.v_min, cmdl.v_max, cmdl.atoms_no)

    def get_action(self, state):
        """ Takes best action based on estimated state-action values."""
        with torch.no_grad():
            probs = self.policy(state).data
        support = self.support.expand_as(probs)
        q_val, argmax_a = torch.mul(probs, support).squeeze().sum(1).max(0)
        return (q_val.item(), argmax_a.item())


# agents/dqn_agent.py + agents/categorical_dqn_agent.py
class CategoricalDQNAgent(object):
    def __init__(self, action_no, cmdl):
        self.name = "Categorical_agent"
        self.cmdl = cmdl
        self.action_no = action_no
        self.step_cnt = 0
        self.exploration = linear_schedule(cmdl.epsilon, 0.05, cmdl.epsilon_steps)
        self.replay_memory = nTupleExperienceReplay(cmdl.replay_mem_size, cmdl.batch_size, cmdl.hist_len, False)
        self.max_q = -1000

        hist_len = cmdl.hist_len
        self.policy = policy = CatchNet(1, hist_len, (action_no, cmdl.atoms_no), hidden_size=cmdl.hidden_size,
                                        bug=cmdl.bug)
        self.target = target = CatchNet(1, hist_len, (action_no, cmdl.atoms_no), hidden_size=cmdl.hidden_size,
                                        bug=cmdl.bug)
        self.policy_evaluation = CategoricalPolicyEvaluation(policy, cmdl)
        self.policy_improvement = CategoricalPolicyImprovement(policy, target, cmdl)
        self.losses = []  # (port)

    def evaluate_policy(self, state):
        self.epsilon = next(self.exploration)
        if self.epsilon < np.random.uniform():
            qval, action = self.policy_evaluation.get_action(state)
            self.max_q = max(qval, self.max_q)
            return action
        else:
            return int(np.random.randint(self.action_no))

    def improve_policy(self, _s, _a, r, s, done):
        h = self.cmdl.hist_len - 1
        self.replay_memory.push(_s[0, h], _a, r, done)

        if len(self.replay_memory) < self.cmdl.start_learning_after:
            return

        if (self.step_cnt % self.cmdl.update_freq == 0) and (
                len(self.replay_memory) > self.cmdl.batch_size):

            # get batch of transitions
            batch = self.replay_memory.sample()

            # compute gradients
            self.losses.append(self.policy_improvement.accumulate_gradient(*batch))
            self.policy_improvement.update_model()

        if self.step_cnt % self.cmdl.target_update_freq == 0:
            self.policy_improvement.update_target_net()


def _build(seed, bug=None):
    cmdl = collections.namedtuple("Config", "seed batch_size hidden_size hist_len epsilon epsilon_steps "
                                  "replay_mem_size start_learning_after update_freq target_update_freq gamma "
                                  "optim lr alpha eps atoms_no v_min v_max bug")(
        seed, 32, 128, 2, 1, 100000, 10000, 100, 2, 24, 0.99, "Adam", .000635, 0.95, 0.00015, 51, -3, 3, bug)
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = PreprocessFrames(Catcher(seed), cmdl.hist_len, (24, 24))
    agent = CategoricalDQNAgent(env.env.action_no, cmdl)
    loop = {"s": env.reset()}

    def loop_step():
        # main.py train_agent: one pass of the loop body
        s = loop["s"]
        a = agent.evaluate_policy(s)
        _s, _a = s.clone(), a
        s, r, done, _ = env.step(a)
        agent.improve_policy(_s, _a, r, s, done)
        agent.step_cnt += 1  # agent.gather_stats(r, done)
        loop["s"] = env.reset() if done else s

    while len(agent.replay_memory) < cmdl.start_learning_after:
        loop_step()
    _, states, actions, rewards, next_states, mask = agent.replay_memory.sample()
    with torch.no_grad():
        targets = agent.policy_improvement._get_categorical(next_states, rewards, mask)
    batch = (states, (actions, targets))

    def train_step():
        agent.losses = []
        for _ in range(STEPS_PER_TRAIN_STEP):
            loop_step()
        return float(np.mean(agent.losses))

    def loss_fn(q_probs, targets):
        actions, target_qa_probs = targets
        n = actions.shape[0]
        qa_probs = q_probs.gather(1, actions.view(n, 1, 1).expand(n, 1, cmdl.atoms_no)).squeeze()
        return - torch.sum(target_qa_probs * torch.log(qa_probs.clamp(min=1e-3)))

    return Program(name="categoricaldqn_catch", model=agent.policy, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.policy_improvement.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the l/u fix left out (the slip the upstream's own comment guards against): when b = (Tz - v_min) / delta_z is an
    # integer, l == u and both index_add_ weights are 0, so that atom's probability vanishes from the target (here the
    # zero atom of every non-terminal step with reward 0): the targets are no longer distributions.
    Bug("vanishing_mass_fix_dropped", functools.partial(_build, bug="vanishing_mass_fix_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: gamma not multiplied by the done mask, so a caught or missed ball bootstraps from the next game's
    # first frames as if the episode went on.
    Bug("gamma_not_masked_at_done", functools.partial(_build, bug="gamma_not_masked_at_done"), "learning_ledger",
        ("TASK",)),
    # classic wrong axis: one softmax over the actions for each atom instead of one over the atoms for each action,
    # so p(s, a) is not a distribution over the support.
    Bug("softmax_over_actions", functools.partial(_build, bug="softmax_over_actions"), "learning_ledger",
        ("OBJECTIVE",)),
]
