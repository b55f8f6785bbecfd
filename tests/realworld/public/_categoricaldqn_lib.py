# ruff: noqa: UP004, PLR0402
"""The replay memory, the linear epsilon schedule and the optimizer factory of floringogianu/categorical-dqn, moved
out of ``categoricaldqn_catch.py`` to keep it readable.

Source: https://github.com/floringogianu/categorical-dqn
Commit: eb939785e0e2eea60bbd67abeaedf4a9990fb5ce
Files: ``policy_evaluation/exploration_schedules.py`` (``float_range``, ``linear_schedule``),
``policy_improvement/optim_utils.py`` (``optim_factory``), ``data_structures/ntuple_experience_replay.py``
(``Transition``, ``BatchTransition``, ``CircularBuffer``, ``nTupleExperienceReplay``)
License: MIT (Copyright (c) 2017 Florin Gogianu; full text in LICENSES/floringogianu-categorical-dqn.txt)

Deviations: ``nTupleExperienceReplay.sample`` inlines ``_sample`` and ``_batch2torch`` (CPU tensor types; the byte
``done`` is a uint8 tensor so that ``1 - done`` works in current torch); the unused ``get_batch``, ``reset`` and
the other schedules are left out.
"""

from __future__ import annotations

import itertools
from collections import namedtuple

import torch
import torch.optim as optim


# policy_evaluation/exploration_schedules.py, policy_improvement/optim_utils.py
def float_range(start, end, step):
    x = start
    if step > 0:
        while x < end:
            yield x
            x += step
    else:
        while x > end:
            yield x
            x += step


def linear_schedule(start, end, steps_no):
    start, end, steps_no = float(start), float(end), float(steps_no)
    step = (end - start) / (steps_no - 1.)
    schedules = [float_range(start, end, step), itertools.repeat(end)]
    return itertools.chain(*schedules)


def optim_factory(weights, cmdl):
    if cmdl.optim == "Adam":
        return optim.Adam(weights, lr=cmdl.lr, eps=cmdl.eps)
    elif cmdl.optim == "RMSprop":
        return optim.RMSprop(weights, lr=cmdl.lr, eps=cmdl.eps,
                             alpha=cmdl.alpha)


# data_structures/ntuple_experience_replay.py
Transition = namedtuple('Transition',
                        ('state', 'action', 'reward', 'done'))
BatchTransition = namedtuple('BatchTransition',
                             ('state', 'action', 'reward', 'state_', 'done'))


class CircularBuffer(object):
    def __init__(self, capacity=100000):
        self.capacity = capacity
        self.memory = []
        self.position = 0
        self.fill_idx = -1

    def push(self, s, a, r, d):
        s = s.unsqueeze(0).unsqueeze(0)  # [24 24] --> [1, 1, 24, 24]
        if len(self.memory) < self.capacity:
            self.memory.append(Transition((s * 255).byte(), a, r, d))
            self.fill_idx += 1
        else:
            self.memory[self.position] = Transition((s * 255).byte(), a, r, d)
        self.position = (self.position + 1) % self.capacity

    def __len__(self):
        return len(self.memory)


class nTupleExperienceReplay(CircularBuffer):
    def __init__(self, capacity, batch_size, hist_len, cuda):
        CircularBuffer.__init__(self, capacity)
        self.batch_size = batch_size
        self.hist_len = hist_len

    def sample(self, batch_size=None):
        batch_size = self.batch_size if batch_size is None else batch_size
        fidx = self.fill_idx - 1  # we can only index up to capacity - 2
        hist_len = self.hist_len
        mem = self.memory
        # sample batch_size indices
        idxs = torch.LongTensor(batch_size).random_(hist_len, fidx)
        # retrieve a list of ((hist_len + 1 transitions) * batch_size)
        samples = [mem[idxs[i]-hist_len:idxs[i]+1] for i in range(batch_size)]
        # concatenate frames for s and s_
        # and create a new list of transitions (s, a, r_, s_, d_)
        transitions = [BatchTransition(
            torch.cat([samples[j][i].state for i in range(hist_len)], 1),
            samples[j][hist_len-1].action,  # after idx of s
            samples[j][hist_len-1].reward,  # after idx of s
            torch.cat([samples[j][i].state for i in range(1, hist_len+1)], 1),
            samples[j][hist_len-1].done) for j in range(batch_size)]
        batch = BatchTransition(*zip(*transitions))
        state_batch = torch.cat(batch.state, 0).type(torch.FloatTensor) / 255
        action_batch = torch.LongTensor(batch.action).unsqueeze(1)
        reward_batch = torch.FloatTensor(batch.reward).unsqueeze(1)
        next_state_batch = torch.cat(batch.state_, 0).type(torch.FloatTensor) / 255
        # [False, False, True, False] -> [1, 1, 0, 1]::ByteTensor
        mask = 1 - torch.tensor(batch.done, dtype=torch.uint8).unsqueeze(1)
        return [batch_size, state_batch, action_batch, reward_batch,
                next_state_batch, mask]
