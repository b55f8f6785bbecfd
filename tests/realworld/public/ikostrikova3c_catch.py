# ruff: noqa: UP008, PLR0402
"""A3C from ikostrikov/pytorch-a3c on a pixel game: a conv + LSTMCell actor-critic on 42x42 normalized frames, a
worker that syncs a local copy from the shared model, rolls out ``num_steps`` steps, computes n-step returns for
the critic and GAE for the actor with an entropy bonus, clips the gradient norm, hands its gradients to the shared
model (``ensure_shared_grads``) and steps ``SharedAdam`` over the shared parameters.

Source: https://github.com/ikostrikov/pytorch-a3c
Commit: 48d95844755e2c3e2c7e48bbd1a7141f7212b63f
Files: ``train.py`` (``ensure_shared_grads``, ``train``), ``model.py`` (``ActorCritic``, initializers),
``my_optim.py`` (``SharedAdam``), ``envs.py`` (``NormalizedEnv``), ``main.py`` (arguments, set-up); ``envs.py``,
``my_optim.py`` and the game are in ``_ikostrikova3c_lib.py``
License: MIT (Copyright (c) 2017 Ilya Kostrikov; full text in LICENSES/ikostrikov-pytorch-a3c.txt)
Domain: RL, actor-critic (A3C: asynchronous workers on a shared model, n-step returns, GAE, entropy bonus)

Kept as written: ``ActorCritic`` (four stride-2 3x3 convs with ELU, an ``LSTMCell``, the normalized-column
initialization of both heads), ``weights_init``, ``SharedAdam`` (its own Adam step over shared state, with the old
``add_(alpha, tensor)`` overloads), ``ensure_shared_grads``, ``NormalizedEnv``'s running mean/std, and the body of
``train``'s ``while True`` loop (load the shared state, reset or detach ``hx``/``cx``, the rollout with
``multinomial`` actions, reward clipping, the bootstrap value, the backward pass over returns and GAE, the loss
``policy_loss + value_loss_coef * value_loss``, ``clip_grad_norm_`` 50); ``main.py``'s defaults (lr 1e-4, gamma
0.99, gae_lambda 1.0, entropy_coef 0.01, value_loss_coef 0.5, num_steps 20, SharedAdam).

Deviations from the original:
- Atari Pong through gym and ``cv2`` (``create_atari_env``: crop, resize to 42x42, grey) is replaced by ``Catch``,
  a game drawn directly as 1x42x42 frames in numpy (a ball falls 4 pixels a step from a random column, a 6-pixel
  paddle at the bottom moves with actions noop/left/right, +1 for a catch, -1 for a miss, 5 balls an episode),
  still wrapped by ``NormalizedEnv``; seeded from ``seed``; the environment is the synthetic data;
- sizes for 2 CPU cores: the LSTM's 256 units -> 64 (``torch.zeros(1, 256)`` -> ``(1, 64)``);
- one worker (``num_processes`` 4 -> 1) runs in the calling process: no ``mp.Process``, no test process; the
  shared model and ``SharedAdam`` are built as in ``main.py``; ``train_step`` is one pass of ``train``'s
  ``while True`` body and returns the loss it backpropagates;
- ``optimizer.zero_grad()`` -> ``optimizer.zero_grad(set_to_none=False)``: the code relies on the zeroing of the
  shared gradient, which ``ensure_shared_grads`` made the worker's own gradient tensor, in place (PyTorch's
  default before 2.0); with the current default the worker's gradients are never cleared (bug
  ``zero_grad_set_to_none``);
- the Program declares the shared model with the critic's half of the loss on a batch of 20 frames and their
  discounted returns collected at build time with the initial policy (``hx``/``cx`` zero);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _ikostrikova3c_lib import SharedAdam, create_atari_env

HIDDEN = 64  # (port) 256


# model.py
def normalized_columns_initializer(weights, std=1.0):
    out = torch.randn(weights.size())
    out *= std / torch.sqrt(out.pow(2).sum(1, keepdim=True))
    return out


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        weight_shape = list(m.weight.data.size())
        fan_in = np.prod(weight_shape[1:4])
        fan_out = np.prod(weight_shape[2:4]) * weight_shape[0]
        w_bound = np.sqrt(6. / (fan_in + fan_out))
        m.weight.data.uniform_(-w_bound, w_bound)
        m.bias.data.fill_(0)
    elif classname.find('Linear') != -1:
        weight_shape = list(m.weight.data.size())
        fan_in = weight_shape[1]
        fan_out = weight_shape[0]
        w_bound = np.sqrt(6. / (fan_in + fan_out))
        m.weight.data.uniform_(-w_bound, w_bound)
        m.bias.data.fill_(0)


class ActorCritic(torch.nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(ActorCritic, self).__init__()
        self.conv1 = nn.Conv2d(num_inputs, 32, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.conv4 = nn.Conv2d(32, 32, 3, stride=2, padding=1)

        self.lstm = nn.LSTMCell(32 * 3 * 3, HIDDEN)

        self.critic_linear = nn.Linear(HIDDEN, 1)
        self.actor_linear = nn.Linear(HIDDEN, num_outputs)

        self.apply(weights_init)
        self.actor_linear.weight.data = normalized_columns_initializer(
            self.actor_linear.weight.data, 0.01)
        self.actor_linear.bias.data.fill_(0)
        self.critic_linear.weight.data = normalized_columns_initializer(
            self.critic_linear.weight.data, 1.0)
        self.critic_linear.bias.data.fill_(0)

        self.lstm.bias_ih.data.fill_(0)
        self.lstm.bias_hh.data.fill_(0)

        self.train()

    def forward(self, inputs):
        inputs, (hx, cx) = inputs
        x = F.elu(self.conv1(inputs))
        x = F.elu(self.conv2(x))
        x = F.elu(self.conv3(x))
        x = F.elu(self.conv4(x))

        x = x.view(-1, 32 * 3 * 3)
        hx, cx = self.lstm(x, (hx, cx))
        x = hx

        return self.critic_linear(x), self.actor_linear(x), (hx, cx)


# train.py
def ensure_shared_grads(model, shared_model):
    for param, shared_param in zip(model.parameters(),
                                   shared_model.parameters()):
        if shared_param.grad is not None:
            return
        shared_param._grad = param.grad


class Worker:
    """(port) ``train(rank, args, shared_model, counter, lock, optimizer)`` with its ``while True`` body as
    ``step``: the set-up lines run in ``__init__``."""

    def __init__(self, rank, args, shared_model, counter, lock, optimizer=None, bug=None):
        torch.manual_seed(args.seed + rank)

        env = create_atari_env(args.seed + rank)  # (port) create_atari_env(args.env_name); env.seed(...)

        model = ActorCritic(1, 3)  # (port) env.observation_space.shape[0], env.action_space

        if optimizer is None:
            optimizer = optim.Adam(shared_model.parameters(), lr=args.lr)

        model.train()

        state = env.reset()
        state = torch.from_numpy(state)
        done = True

        self.args, self.shared_model, self.counter, self.lock = args, shared_model, counter, lock
        self.env, self.model, self.optimizer, self.bug = env, model, optimizer, bug
        self.state, self.done, self.episode_length = state, done, 0

    def rollout(self):
        args, model, env = self.args, self.model, self.env
        # Sync with the shared model
        model.load_state_dict(self.shared_model.state_dict())
        if self.done:
            self.cx = torch.zeros(1, HIDDEN)
            self.hx = torch.zeros(1, HIDDEN)
        else:
            self.cx = self.cx.detach()
            self.hx = self.hx.detach()
        hx, cx, state = self.hx, self.cx, self.state

        values = []
        log_probs = []
        rewards = []
        entropies = []

        for step in range(args.num_steps):
            self.episode_length += 1
            value, logit, (hx, cx) = model((state.unsqueeze(0),
                                            (hx, cx)))
            prob = F.softmax(logit, dim=-1)
            log_prob = F.log_softmax(logit, dim=-1)
            entropy = -(log_prob * prob).sum(1, keepdim=True)
            entropies.append(entropy)

            action = prob.multinomial(num_samples=1).detach()
            log_prob = log_prob.gather(1, action)

            state, reward, done, _ = env.step(action.numpy())
            done = done or self.episode_length >= args.max_episode_length
            reward = max(min(reward, 1), -1)

            with self.lock:
                self.counter.value += 1

            if done:
                self.episode_length = 0
                state = env.reset()

            state = torch.from_numpy(state)
            values.append(value)
            log_probs.append(log_prob)
            rewards.append(reward)

            if done:
                break
        self.hx, self.cx, self.state, self.done = hx, cx, state, done
        return values, log_probs, rewards, entropies

    def step(self):
        args, model, optimizer = self.args, self.model, self.optimizer
        values, log_probs, rewards, entropies = self.rollout()

        R = torch.zeros(1, 1)
        if not self.done:
            value, _, _ = model((self.state.unsqueeze(0), (self.hx, self.cx)))
            R = value.detach()

        values.append(R)
        policy_loss = 0
        value_loss = 0
        gae = torch.zeros(1, 1)
        for i in reversed(range(len(rewards))):
            R = args.gamma * R + rewards[i]
            advantage = R - values[i]
            value_loss = value_loss + 0.5 * advantage.pow(2)

            # Generalized Advantage Estimation
            delta_t = rewards[i] + args.gamma * \
                values[i + 1] - values[i]
            gae = gae * args.gamma * args.gae_lambda + delta_t

            if self.bug == "advantage_not_detached":
                policy_loss = policy_loss - log_probs[i] * gae - args.entropy_coef * entropies[i]
            elif self.bug == "entropy_sign_flipped":
                policy_loss = policy_loss - log_probs[i] * gae.detach() + args.entropy_coef * entropies[i]
            else:
                policy_loss = policy_loss - \
                    log_probs[i] * gae.detach() - args.entropy_coef * entropies[i]

        if self.bug == "zero_grad_set_to_none":
            optimizer.zero_grad()  # the line as written, under PyTorch >= 2.0's default set_to_none=True
        else:
            optimizer.zero_grad(set_to_none=False)  # (port) PyTorch < 2.0's default, which the code relies on

        loss = policy_loss + args.value_loss_coef * value_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

        ensure_shared_grads(model, self.shared_model)
        optimizer.step()
        return (value_loss / len(rewards)).detach().squeeze()  # (port) the critic's loss per step, reported


def _returns_batch(model, seed, gamma, n=20):
    """(port) Frames and discounted returns of one stretch of play with the initial policy, for the Program."""
    env = create_atari_env(seed + 1000)
    state, frames, rewards = env.reset(), [], []
    with torch.no_grad():
        hx = cx = torch.zeros(1, HIDDEN)
        for _ in range(n):
            frames.append(torch.from_numpy(state))
            _, logit, (hx, cx) = model((frames[-1].unsqueeze(0), (hx, cx)))
            state, reward, _, _ = env.step(F.softmax(logit, dim=-1).multinomial(num_samples=1).numpy())
            rewards.append(reward)
    R, returns = 0.0, []
    for r in reversed(rewards):
        R = gamma * R + r
        returns.insert(0, [R])
    return torch.stack(frames), torch.tensor(returns)


def _build(seed, bug=None):
    args = types.SimpleNamespace(lr=0.0001, gamma=0.99, gae_lambda=1.00, entropy_coef=0.01, value_loss_coef=0.5,
                                 max_grad_norm=50, seed=seed, num_processes=1, num_steps=20,
                                 max_episode_length=1000000, env_name='Catch', no_shared=False)
    torch.manual_seed(args.seed)
    shared_model = ActorCritic(1, 3)
    shared_model.share_memory()

    optimizer = SharedAdam(shared_model.parameters(), lr=args.lr)
    optimizer.share_memory()

    counter = mp.Value('i', 0)
    lock = mp.Lock()
    worker = Worker(0, args, shared_model, counter, lock, optimizer, bug=bug)

    frames, returns = _returns_batch(shared_model, seed, args.gamma)
    hidden = (torch.zeros(len(frames), HIDDEN), torch.zeros(len(frames), HIDDEN))

    def loss_fn(out, returns):
        value = out[0]
        return (0.5 * (returns - value).pow(2)).mean()

    return Program(name="ikostrikova3c_catch", model=shared_model, batch=((frames, hidden), returns),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=worker.step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the line as written run under PyTorch >= 2.0: optimizer.zero_grad() sets the shared gradients to None instead
    # of zeroing them in place, ensure_shared_grads hands the worker's own .grad over again, and that tensor is never
    # cleared: every update applies the sum of all gradients so far (the symptom asked about in
    # https://github.com/MorvanZhou/pytorch-A3C/issues/21 and https://github.com/mimoralea/gdrl/issues/25).
    Bug("zero_grad_set_to_none", functools.partial(_build, bug="zero_grad_set_to_none"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # classic: gae.detach() left out of the policy loss, so the actor's term also trains the critic (and through
    # the shared trunk, the features) to move the values that make up the advantage.
    Bug("advantage_not_detached", functools.partial(_build, bug="advantage_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic sign slip: the entropy bonus added with the wrong sign, so the policy is pushed to collapse.
    Bug("entropy_sign_flipped", functools.partial(_build, bug="entropy_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
]
