# ruff: noqa: UP008, PLR0402, UP031
"""A3C on CartPole (discrete actions) from MorvanZhou/pytorch-A3C: one global actor-critic network trained with a
shared Adam from the gradients of a worker's local network (push), which then copies the global weights (pull).

Source: https://github.com/MorvanZhou/pytorch-A3C
Commit: 5ab27abee2c3ac3ca921ac393bfcbda4e0a91745
Files: ``discrete_A3C.py``, ``utils.py``, ``shared_adam.py``
License: MIT (Copyright (c) 2017; full text in LICENSES/MorvanZhou-pytorch-A3C.txt)
Domain: RL, actor-critic (A3C: n-step returns bootstrapped from the local critic, ``td = v_t - values``, critic loss
``td ** 2``, actor loss ``-log_prob * td.detach()``, local gradients pushed onto the global network).

Kept as written: ``Net`` (separate 4-128-2 policy and 4-128-1 value branches with tanh, ``set_init`` normal(0, 0.1)
weights and zero biases, ``choose_action`` in eval mode, ``loss_func`` in train mode), ``v_wrap``, ``push_and_pull``
(the reversed discounted targets, terminal value 0, ``opt.zero_grad()``, ``loss.backward()``, ``gp._grad =
lp.grad``, ``opt.step()``, ``lnet.load_state_dict(gnet.state_dict())``), ``SharedAdam`` (betas (0.92, 0.999)),
``Worker.run``'s loop body (``r = -1`` on done, an update every ``UPDATE_GLOBAL_ITER`` = 5 steps or at the end of
an episode), GAMMA 0.9.

Deviations from the original:
- gym's ``CartPole-v0`` (``.unwrapped``: no time limit) is replaced by the cart-pole written out in
  ``_cartpole.py`` (same equations and constants, seeded); its 500-step truncation flag is ignored. Its
  ``reset`` returns ``(state, info)`` and its ``step`` five values, so the copied calls take the first element and
  drop ``truncated``. Rendering and the episode-reward ``record`` (a print and a queue) are dropped.
- multiprocessing is dropped: one worker runs in the main process (``mp.cpu_count()`` workers in the original);
  ``share_memory`` calls stay (they are no-ops without other processes). ``SharedAdam``'s initial
  ``state['step']`` is ``torch.zeros(())`` instead of the int ``0``: recent torch's Adam requires a tensor step.
- lr 1e-4 -> 1e-3 so that the 30 updates of the self-check show the critic's loss falling (the original runs
  3000 episodes).
- ``train_step`` is one update (the worker's steps up to the next ``push_and_pull``) and returns that update's
  loss (the original returns nothing); ``Categorical.sample`` draws from torch's global generator seeded with
  ``torch.manual_seed(seed)``.
- the declared model is the global network (the one the optimizer holds); the declared ``batch`` is one 5-step
  buffer played at build time by the untrained network (states; actions and discounted targets).
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

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

UPDATE_GLOBAL_ITER = 5
GAMMA = 0.9
MAX_EP = 3000
LR = 1e-3  # (port) 1e-4

N_S = 4
N_A = 2


# utils.py
def v_wrap(np_array, dtype=np.float32):
    if np_array.dtype != dtype:
        np_array = np_array.astype(dtype)
    return torch.from_numpy(np_array)


def set_init(layers):
    for layer in layers:
        nn.init.normal_(layer.weight, mean=0., std=0.1)
        nn.init.constant_(layer.bias, 0.)


def push_and_pull(opt, lnet, gnet, done, s_, bs, ba, br, gamma, bug=None):
    if done and bug != "terminal_bootstrapped":
        v_s_ = 0.               # terminal
    else:
        v_s_ = lnet.forward(v_wrap(s_[None, :]))[-1].data.numpy()[0, 0]

    buffer_v_target = []
    for r in br[::-1]:    # reverse buffer r
        v_s_ = r + gamma * v_s_
        buffer_v_target.append(v_s_)
    if bug != "targets_not_reversed":
        buffer_v_target.reverse()

    loss = lnet.loss_func(
        v_wrap(np.vstack(bs)),
        v_wrap(np.array(ba), dtype=np.int64) if ba[0].dtype == np.int64 else v_wrap(np.vstack(ba)),
        v_wrap(np.array(buffer_v_target)[:, None]), bug=bug)

    # calculate local gradients and push local parameters to global
    opt.zero_grad()
    loss.backward()
    for lp, gp in zip(lnet.parameters(), gnet.parameters()):
        gp._grad = lp.grad
    opt.step()

    # pull global parameters
    lnet.load_state_dict(gnet.state_dict())
    return loss  # (port)


# shared_adam.py
class SharedAdam(torch.optim.Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.99), eps=1e-8,
                 weight_decay=0):
        super(SharedAdam, self).__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        # State initialization
        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'] = torch.zeros(())  # (port) 0
                state['exp_avg'] = torch.zeros_like(p.data)
                state['exp_avg_sq'] = torch.zeros_like(p.data)

                # share in memory
                state['exp_avg'].share_memory_()
                state['exp_avg_sq'].share_memory_()


# discrete_A3C.py
class Net(nn.Module):
    def __init__(self, s_dim, a_dim):
        super(Net, self).__init__()
        self.s_dim = s_dim
        self.a_dim = a_dim
        self.pi1 = nn.Linear(s_dim, 128)
        self.pi2 = nn.Linear(128, a_dim)
        self.v1 = nn.Linear(s_dim, 128)
        self.v2 = nn.Linear(128, 1)
        set_init([self.pi1, self.pi2, self.v1, self.v2])
        self.distribution = torch.distributions.Categorical

    def forward(self, x):
        pi1 = torch.tanh(self.pi1(x))
        logits = self.pi2(pi1)
        v1 = torch.tanh(self.v1(x))
        values = self.v2(v1)
        return logits, values

    def choose_action(self, s):
        self.eval()
        logits, _ = self.forward(s)
        prob = F.softmax(logits, dim=1).data
        m = self.distribution(prob)
        return m.sample().numpy()[0]

    def loss_func(self, s, a, v_t, bug=None):
        self.train()
        logits, values = self.forward(s)
        return a3c_loss((logits, values), (a, v_t), self.distribution, bug)


def a3c_loss(out, targets, distribution=torch.distributions.Categorical, bug=None):
    """``Net.loss_func`` after its forward (split out so the Program's loss_fn is the same lines)."""
    logits, values = out
    a, v_t = targets
    td = v_t - values
    c_loss = td.pow(2)

    probs = F.softmax(logits, dim=1)
    m = distribution(probs)
    if bug == "advantage_not_detached":
        exp_v = m.log_prob(a) * td.squeeze()
    else:
        exp_v = m.log_prob(a) * td.detach().squeeze()
    a_loss = -exp_v
    total_loss = (c_loss + a_loss).mean()
    return total_loss


class Worker:
    """``Worker(mp.Process)``'s state and ``run`` loop, one update per ``update()`` call (no process)."""

    def __init__(self, gnet, opt, name, env, bug=None):
        self.name = 'w%02i' % name
        self.gnet, self.opt = gnet, opt
        self.lnet = Net(N_S, N_A)           # local network
        self.env = env
        self.bug = bug
        self.total_step = 1
        self.s = None

    def update(self):
        while True:
            if self.s is None:
                self.s = self.env.reset()[0]
                self.buffer_s, self.buffer_a, self.buffer_r = [], [], []
                self.ep_r = 0.
            s = self.s
            a = self.lnet.choose_action(v_wrap(s[None, :]))
            s_, r, done, _, _ = self.env.step(a)
            if done: r = -1
            self.ep_r += r
            self.buffer_a.append(a)
            self.buffer_s.append(s)
            self.buffer_r.append(r)

            loss = None
            if self.total_step % UPDATE_GLOBAL_ITER == 0 or done:  # update global and assign to local net
                # sync
                loss = push_and_pull(self.opt, self.lnet, self.gnet, done, s_, self.buffer_s, self.buffer_a,
                                     self.buffer_r, GAMMA, bug=self.bug)
                self.buffer_s, self.buffer_a, self.buffer_r = [], [], []
            self.s = None if done else s_
            self.total_step += 1
            if loss is not None:
                return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gnet = Net(N_S, N_A)        # global network
    gnet.share_memory()         # share the global parameters in multiprocessing
    opt = SharedAdam(gnet.parameters(), lr=LR, betas=(0.92, 0.999))      # global optimizer
    worker = Worker(gnet, opt, 0, CartPole(seed), bug=bug)

    # the declared batch: one 5-step buffer played by the untrained network
    env = CartPole(seed + 1000)
    s, bs, ba, br = env.reset()[0], [], [], []
    done = False
    with torch.no_grad():
        for _ in range(UPDATE_GLOBAL_ITER):
            a = gnet.choose_action(v_wrap(s[None, :]))
            s_, r, done, _, _ = env.step(a)
            if done: r = -1
            bs.append(s)
            ba.append(a)
            br.append(r)
            if done:
                break
            s = s_
        v_s_ = 0. if done else gnet(v_wrap(s_[None, :]))[-1].numpy()[0, 0]
    targets = []
    for r in br[::-1]:
        v_s_ = r + GAMMA * v_s_
        targets.append(v_s_)
    targets.reverse()
    batch = (v_wrap(np.vstack(bs)), (v_wrap(np.array(ba), dtype=np.int64), v_wrap(np.array(targets)[:, None])))

    def loss_fn(out, tgt):
        return a3c_loss(out, tgt, bug=bug)

    def train_step():
        return worker.update()

    return Program(name="morvana3c_discrete", model=gnet, batch=batch, loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the terminal state bootstraps from the local critic (the `if done: v_s_ = 0.` branch lost), so the
    # fall's target carries the value of the state after it.
    Bug("terminal_bootstrapped", functools.partial(_build, bug="terminal_bootstrapped"), "learning_ledger",
        ("TASK",)),
    # classic: the reversed discounted targets are not put back in time order: each state is paired with the
    # target of the mirrored step of the buffer.
    Bug("targets_not_reversed", functools.partial(_build, bug="targets_not_reversed"), "learning_ledger",
        ("TASK",)),
    # classic: the actor term uses td without .detach(): the policy-gradient term also drives the critic.
    Bug("advantage_not_detached", functools.partial(_build, bug="advantage_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
]
