# ruff: noqa: PLR0402, UP008
"""One-step actor-critic (TD(0) advantage, shared fc1 body) from minimalRL.

Source: https://github.com/seungeunrho/minimalRL, commit c8efed8481e3cd40e9739cfde220a55522555b57,
file ``actor_critic.py``. License: MIT (Copyright (c) 2019 seungeunrho; full text in
LICENSES/seungeunrho-minimalRL.txt).

Kept as written: the hyperparameters (learning_rate 0.0002, gamma 0.98, n_rollout 10), the ``ActorCritic`` module
(fc1 4->256, fc_pi, fc_v, the Adam optimizer created inside the module), ``pi``, ``v``, ``put_data``,
``make_batch`` (rewards scaled by 1/100, done masks) and ``train_net`` (TD target, ``delta.detach()`` in the policy
term, smooth L1 on ``td_target.detach()``, ``loss.mean().backward()``).

Deviations:
- gym's CartPole-v1 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and constants,
  seeded); the environment is the synthetic data.
- ``main()``'s endless episode loop is not run. One rollout of ``n_rollout`` transitions is collected at build
  time with the initial policy (``Categorical(prob).sample()`` replaced by ``torch.multinomial`` on a seeded
  generator), and ``train_step`` replays the loop body on it: ``model.put_data`` for each transition, then
  ``model.train_net()``. Replaying a fixed rollout makes the step repeatable.
- ``forward(s, s_prime)`` is added (the original module defines none): it returns ``(pi(s, softmax_dim=1),
  v(s), v(s_prime))`` so that the model can be called on a batch; ``train_net`` still calls ``pi`` and ``v``.
  ``loss_fn`` recomputes ``train_net``'s loss from those outputs.
- ``train_net`` returns ``loss.mean()`` (the original returns nothing) so the step has a loss to report.
- printing and the score bookkeeping are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

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

# Hyperparameters
learning_rate = 0.0002
gamma = 0.98
n_rollout = 10


class ActorCritic(nn.Module):
    def __init__(self, bug=None):
        super(ActorCritic, self).__init__()
        self.data = []
        self.bug = bug

        self.fc1 = nn.Linear(4, 256)
        self.fc_pi = nn.Linear(256, 2)
        self.fc_v = nn.Linear(256, 1)
        self.optimizer = optim.Adam(self.parameters(), lr=learning_rate)

    def pi(self, x, softmax_dim=0):
        x = F.relu(self.fc1(x))
        x = self.fc_pi(x)
        prob = F.softmax(x, dim=softmax_dim)
        return prob

    def v(self, x):
        x = F.relu(self.fc1(x))
        v = self.fc_v(x)
        return v

    def forward(self, s, s_prime):
        if self.bug == "softmax_over_batch":
            return self.pi(s), self.v(s), self.v(s_prime)
        return self.pi(s, softmax_dim=1), self.v(s), self.v(s_prime)

    def put_data(self, transition):
        self.data.append(transition)

    def make_batch(self):
        s_lst, a_lst, r_lst, s_prime_lst, done_lst = [], [], [], [], []
        for transition in self.data:
            s, a, r, s_prime, done = transition
            s_lst.append(s)
            a_lst.append([a])
            r_lst.append([r / 100.0])
            s_prime_lst.append(s_prime)
            done_mask = 0.0 if done else 1.0
            done_lst.append([done_mask])

        s_batch, a_batch, r_batch, s_prime_batch, done_batch = (
            torch.tensor(s_lst, dtype=torch.float), torch.tensor(a_lst),
            torch.tensor(r_lst, dtype=torch.float), torch.tensor(s_prime_lst, dtype=torch.float),
            torch.tensor(done_lst, dtype=torch.float))
        self.data = []
        return s_batch, a_batch, r_batch, s_prime_batch, done_batch

    def train_net(self):
        s, a, r, s_prime, done = self.make_batch()
        td_target = r + gamma * self.v(s_prime) * done
        delta = td_target - self.v(s)

        # bug "softmax_over_batch": pi()'s default softmax_dim=0 (meant for one state) used on the batch
        pi = self.pi(s) if self.bug == "softmax_over_batch" else self.pi(s, softmax_dim=1)
        pi_a = pi.gather(1, a)
        loss = -torch.log(pi_a) * delta.detach() + F.smooth_l1_loss(self.v(s), td_target.detach())

        if self.bug != "no_zero_grad":
            self.optimizer.zero_grad()
        loss.mean().backward()
        self.optimizer.step()
        return loss.mean()


def collect_rollout(model, seed):
    """One pass of main()'s inner loop: up to n_rollout transitions with the current policy."""
    env = CartPole(seed)
    gen = torch.Generator().manual_seed(seed)
    s, _ = env.reset()
    rollout = []
    with torch.no_grad():
        for t in range(n_rollout):
            prob = model.pi(torch.from_numpy(s).float())
            a = torch.multinomial(prob, 1, generator=gen).item()
            s_prime, r, done, _truncated, _info = env.step(a)
            rollout.append((s, a, r, s_prime, done))
            s = s_prime
            if done:
                break
    return rollout


def _build(seed, bug=None):
    torch.manual_seed(seed)
    model = ActorCritic(bug)
    rollout = collect_rollout(model, seed)

    model.data = list(rollout)
    s, a, r, s_prime, done = model.make_batch()
    batch = ({"s": s, "s_prime": s_prime}, (a, r, done))

    def loss_fn(outputs, targets):
        pi, v_s, v_s_prime = outputs
        a, r, done = targets
        td_target = r + gamma * v_s_prime * done
        delta = td_target - v_s
        pi_a = pi.gather(1, a)
        loss = -torch.log(pi_a) * delta.detach() + F.smooth_l1_loss(v_s, td_target.detach())
        return loss.mean()

    def train_step():
        for transition in rollout:
            model.put_data(transition)
        return model.train_net()

    return Program(name="minimalrl_actor_critic", model=model, batch=batch, loss_fn=loss_fn, optimizer=model.optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # pi()'s default softmax_dim=0 normalizes over the rollout's states instead of the two actions (classic).
    Bug("softmax_over_batch", functools.partial(_build, bug="softmax_over_batch"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from train_net: gradients pile up across updates (classic).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("fc1.weight",)),
]
