# ruff: noqa: UP008, UP004, PLR0402, RUF059
"""Dueling Double DQN on CartPole, from XinJingHao's DRL-Pytorch.

Source: https://github.com/XinJingHao/DRL-Pytorch, commit 83486646f12d44e4e94a834e495b81a8f2710055,
files ``2.1_Duel-Double-DQN/DQN.py``, ``2.1_Duel-Double-DQN/main.py``.
License: MIT (Copyright (c) 2021 XinJingHao; ``2.1_Duel-Double-DQN/LICENSE``, full text in
LICENSES/XinJingHao-DRL-Pytorch.txt).
Domain: RL, value-based (Dueling + Double DQN, replay buffer of tensors, dead/win mask, Polyak target update).

Kept as written: ``build_net``, ``Duel_Q_Net`` (hidden MLP, V and A heads, ``Q = V + (A - mean(A))``),
``DQN_agent`` (Adam over ``q_net``, ``q_target`` a frozen deep copy, ``select_action`` epsilon-greedy,
``train``: Double-DQN target ``r + (~dw) * gamma * Q_target(s', argmax_a Q(s', a))`` under ``no_grad``,
``mse_loss``, zero_grad/backward/step, Polyak update with tau 0.005), ``ReplayBuffer`` (preallocated tensors,
``torch.randint`` sampling), ``main``'s interaction loop (random actions for ``random_steps``, store
``dw`` (terminated) not ``done``, ``update_every`` updates every ``update_every`` steps, noise decay every 1000
steps), the defaults gamma 0.99, lr 1e-4, exp_noise 0.2, noise_decay 0.99, Double and Duel on.

Deviations from the original:
- gymnasium's CartPole-v1 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and
  constants, seeded); the environment is the synthetic data. ``env.action_space.sample()`` and ``np.random`` in
  ``select_action`` come from a ``numpy.random.default_rng(seed)`` held by the agent, so a build is reproducible.
- sizes: net_width 64 (200), batch_size 64 (256), random_steps 300 (3000), update_every 10 (50), replay
  max_size 10000 (1e6); the buffer is prefilled by ``main``'s loop until ``random_steps`` transitions, at build.
- ``train_step`` is one ``update_every`` period of ``main``'s loop: ``update_every`` environment steps, then
  ``update_every`` calls of ``agent.train()``; ``train`` returns its ``q_loss`` (the original returns nothing).
- ``Q_Net`` and the agent's ``if self.Duel`` switch are dropped (Duel on, the default); tabs re-indented as spaces; device fixed to cpu; evaluation, tensorboard, saving and printing dropped.
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
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole


def build_net(layer_shape, activation, output_activation):
    '''Build networks with For loop'''
    layers = []
    for j in range(len(layer_shape)-1):
        act = activation if j < len(layer_shape)-2 else output_activation
        layers += [nn.Linear(layer_shape[j], layer_shape[j+1]), act()]
    return nn.Sequential(*layers)


class Duel_Q_Net(nn.Module):
    def __init__(self, state_dim, action_dim, hid_shape, bug=None):
        super(Duel_Q_Net, self).__init__()
        layers = [state_dim] + list(hid_shape)
        self.hidden = build_net(layers, nn.ReLU, nn.ReLU)
        self.V = nn.Linear(hid_shape[-1], 1)
        self.A = nn.Linear(hid_shape[-1], action_dim)
        self.bug = bug

    def forward(self, s):
        s = self.hidden(s)
        Adv = self.A(s)
        V = self.V(s)
        if self.bug == "advantage_mean_over_batch":  # classic wrong axis: the mean taken over the batch
            return V + (Adv - torch.mean(Adv, dim=0, keepdim=True))
        Q = V + (Adv - torch.mean(Adv, dim=-1, keepdim=True))  # Q(s,a)=V(s)+A(s,a)-mean(A(s,a))
        return Q


class DQN_agent(object):
    def __init__(self, **kwargs):
        # Init hyperparameters for agent, just like "self.gamma = opt.gamma, self.lambd = opt.lambd, ..."
        self.__dict__.update(kwargs)
        self.tau = 0.005
        self.replay_buffer = ReplayBuffer(self.state_dim, self.dvc, max_size=int(1e4))
        self.q_net = Duel_Q_Net(self.state_dim, self.action_dim, (self.net_width,self.net_width),
                                bug=self.bug).to(self.dvc)
        self.q_net_optimizer = torch.optim.Adam(self.q_net.parameters(), lr=self.lr)
        self.q_target = copy.deepcopy(self.q_net)
        # Freeze target networks with respect to optimizers (only update via polyak averaging)
        for p in self.q_target.parameters(): p.requires_grad = False


    def select_action(self, state, deterministic):#only used when interact with the env
        with torch.no_grad():
            state = torch.FloatTensor(state.reshape(1, -1)).to(self.dvc)
            if deterministic:
                a = self.q_net(state).argmax().item()
            else:
                if self.np_random.random() < self.exp_noise:
                    a = int(self.np_random.integers(0,self.action_dim))
                else:
                    a = self.q_net(state).argmax().item()
        return a


    def train(self):
        s, a, r, s_next, dw = self.replay_buffer.sample(self.batch_size)

        '''Compute the target Q value'''
        with torch.no_grad():
            if self.Double:
                argmax_a = self.q_net(s_next).argmax(dim=1).unsqueeze(-1)
                max_q_next = self.q_target(s_next).gather(1,argmax_a)
            else:
                max_q_next = self.q_target(s_next).max(1)[0].unsqueeze(1)
            if self.bug == "dw_mask_dropped":  # classic: bootstraps through terminal transitions
                target_Q = r + self.gamma * max_q_next
            else:
                target_Q = r + (~dw) * self.gamma * max_q_next #dw: die or win

        # Get current Q estimates
        current_q = self.q_net(s)
        current_q_a = current_q.gather(1,a)

        q_loss = F.mse_loss(current_q_a, target_Q)
        self.q_net_optimizer.zero_grad()
        q_loss.backward()
        self.q_net_optimizer.step()

        # Update the frozen target models
        for param, target_param in zip(self.q_net.parameters(), self.q_target.parameters()):
            target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)
        return q_loss.detach()


class ReplayBuffer(object):
    def __init__(self, state_dim, dvc, max_size=int(1e6)):
        self.max_size = max_size
        self.dvc = dvc
        self.ptr = 0
        self.size = 0

        self.s = torch.zeros((max_size, state_dim),dtype=torch.float,device=self.dvc)
        self.a = torch.zeros((max_size, 1),dtype=torch.long,device=self.dvc)
        self.r = torch.zeros((max_size, 1),dtype=torch.float,device=self.dvc)
        self.s_next = torch.zeros((max_size, state_dim),dtype=torch.float,device=self.dvc)
        self.dw = torch.zeros((max_size, 1),dtype=torch.bool,device=self.dvc)

    def add(self, s, a, r, s_next, dw):
        self.s[self.ptr] = torch.from_numpy(s).to(self.dvc)
        self.a[self.ptr] = a
        self.r[self.ptr] = r
        self.s_next[self.ptr] = torch.from_numpy(s_next).to(self.dvc)
        self.dw[self.ptr] = dw

        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample(self, batch_size):
        ind = torch.randint(0, self.size, device=self.dvc, size=(batch_size,))
        return self.s[ind], self.a[ind], self.r[ind], self.s_next[ind], self.dw[ind]


class Opt:
    dvc = torch.device('cpu')
    gamma = 0.99
    net_width = 64
    lr = 1e-4
    batch_size = 64
    exp_noise = 0.2
    noise_decay = 0.99
    Double = True
    Duel = True
    random_steps = 300
    update_every = 10
    state_dim = 4
    action_dim = 2


def _build(seed, bug=None):
    opt = Opt()
    torch.manual_seed(seed)
    np_random = np.random.default_rng(seed)
    env = CartPole(seed)
    kwargs = {k: getattr(opt, k) for k in dir(opt) if not k.startswith('_')}
    agent = DQN_agent(np_random=np_random, bug=bug, **kwargs)
    state = {"total_steps": 0, "s": None, "done": True}

    def interact():
        '''main()'s loop body for one environment step (without the update).'''
        if state["done"]:
            state["s"], info = env.reset()
            state["done"] = False
        s = state["s"]
        total_steps = state["total_steps"]
        #e-greedy exploration
        if total_steps < opt.random_steps: a = int(np_random.integers(0, opt.action_dim))
        else: a = agent.select_action(s, deterministic=False)
        s_next, r, dw, tr, info = env.step(a) # dw: dead&win; tr: truncated
        state["done"] = (dw or tr)

        agent.replay_buffer.add(s, a, r, s_next, dw)
        state["s"] = s_next
        if total_steps % 1000 == 0: agent.exp_noise *= opt.noise_decay
        state["total_steps"] += 1

    while state["total_steps"] < opt.random_steps:
        interact()

    def train_step():
        for _ in range(opt.update_every):
            interact()
        for j in range(opt.update_every): loss = agent.train()
        return loss

    s, a, r, s_next, dw = agent.replay_buffer.sample(opt.batch_size)
    batch = (s, (a, r, s_next, dw))

    def loss_fn(current_q, targets):
        a, r, s_next, dw = targets
        with torch.no_grad():
            argmax_a = agent.q_net(s_next).argmax(dim=1).unsqueeze(-1)
            max_q_next = agent.q_target(s_next).gather(1,argmax_a)
            if bug == "dw_mask_dropped":
                target_Q = r + opt.gamma * max_q_next
            else:
                target_Q = r + (~dw) * opt.gamma * max_q_next
        return F.mse_loss(current_q.gather(1,a), target_Q)

    return Program(name="drlpytorch_duel_ddqn", model=agent.q_net, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.q_net_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the dead/win mask left out of the TD target, terminal transitions bootstrap from s_next.
    Bug("dw_mask_dropped", functools.partial(_build, bug="dw_mask_dropped"), "learning_ledger", ("TASK",)),
    # classic wrong axis: the dueling head subtracts the advantage's mean over the batch (dim=0) instead of over
    # the actions, so each Q value depends on the other states of the batch.
    Bug("advantage_mean_over_batch", functools.partial(_build, bug="advantage_mean_over_batch"), "learning_ledger",
        ("DEPENDENCY",)),
]
