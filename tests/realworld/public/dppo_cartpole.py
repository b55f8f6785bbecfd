# ruff: noqa: PLR0402, UP004, UP008, UP039, PERF102, C417
"""Distributed PPO (clipped surrogate, clipped value loss, GAE(lambda), running observation normalization,
Gaussian policy with a state-independent log-std; workers add gradients to shared buffers, a chief applies them
with Adam) from Pytorch-DPPO.

Source: https://github.com/alexis-jacq/Pytorch-DPPO, commit ec9303419078689d38a0eb89f220f69e3e105897, files
``main.py`` (Params, the shared objects, the Adam optimizer), ``model.py`` (Model, Shared_grad_buffers,
Shared_obs_stats), ``train.py`` (ReplayMemory, ``normal``, the worker loop), ``chief.py`` and ``utils.py``
(TrafficLight, Counter). License: MIT (Copyright (c) 2017 Alexis David Jacq; full text in
LICENSES/alexis-jacq-Pytorch-DPPO.txt).

Kept as written: Params (lr 3e-4, gamma 0.99, gae_param 0.95, clip 0.2, ent_coeff 0, num_epoch 10, num_steps 1000,
max_episode_length 10000; update_treshold = num_processes - 1); ``Model`` (policy 100-100 tanh -> ``mu``, ``log_std``
parameter, value 500-100 tanh -> ``v``, biases zeroed); ``Shared_grad_buffers`` (initialized with ``torch.ones``, as
written: the first update carries +1 on every gradient entry; ``add_gradient``, ``reset``); ``Shared_obs_stats``
(running mean / variance clamped at 1e-2, normalization clipped to [-5, 5]); ``ReplayMemory``; ``normal`` (the
Gaussian density with ``sigma_sq`` as the variance); the worker's exploration loop (observe + normalize the state,
sample ``mu + sqrt(sigma_sq) * eps``, rewards clipped to [-1, 1], bootstrap value, GAE advantages and returns
``A + V``), its update loop (per epoch: load the shared weights, ``zero_grad``, a minibatch, probabilities under
``model_old`` and ``model``, the ratio, clipped surrogate, clipped value loss ``0.5 * mean(max(vf1, vf2))``,
entropy term, ``model_old`` synced before the step, ``backward``, ``add_gradient``, the counter) and the chief
(once the counter passes update_treshold: the buffers become the shared model's gradients, ``optimizer.step()``,
counter and buffers reset, the traffic light switched).

Deviations:
- gym's MuJoCo InvertedPendulum-v1 is replaced by the continuous-force cart-pole written out in
  ``_continuous_control.py`` (a pole balanced by a force in [-1, 1] x 10, reward 1 per step, the gym < 0.26
  interface); the environment is the synthetic data.
- one worker (num_processes 4 -> 1, so update_treshold 0) and no processes: the worker's loop body and the chief's
  step run one after the other in the same process, in the order the traffic light imposes (worker computes and
  adds its gradient, chief steps and resets); TrafficLight / Counter become plain objects; the test process
  (``test.py``: evaluation and printing) is dropped. ``share_memory`` calls are dropped.
- sizes for 2 CPU cores: exploration_size 1000 -> 256, batch_size 1000 -> 256 (the whole memory, as 1000 of 1000 is).
- the rollout's stored tensors are detached: ``R = A + values[i]`` is built on the detached value and the sampled
  actions are stored with ``action.detach()``. The worker reloads its weights in place with ``load_state_dict``
  before each epoch, after which modern autograd refuses to backpropagate through the stored rollout graph;
  PyTorch 0.1 let ``backward(retain_variables=True)`` run through it into the rollout-time forward passes. For
  the same reason ``model_old``'s forward runs under ``torch.no_grad()`` (its weights are overwritten by the
  ``load_state_dict`` just before the backward; its gradients were never read).
  ``retain_variables=True`` is ``retain_graph=True``; ``Variable(...)`` wrappers are left out; ``F.tanh`` is
  ``torch.tanh``; ``map`` in ``ReplayMemory.sample`` is materialized as a list.
- ``random.sample`` comes from a ``random.Random(seed)`` instance; ``torch.manual_seed(params.seed)`` takes the
  build's seed.
- the worker's ``while True`` loop is not run forever. Its exploration phase runs once at build time and the round
  it records is replayed: ``train_step`` runs one epoch of the update loop and the chief's step; when a new round of
  num_epoch epochs starts, the loop's head runs on the recorded rollout (the shared weights reloaded, ``model_old``
  rebuilt from them, the memory refilled with the recorded transitions) instead of exploring anew, so the step can
  be replayed. ``train_step`` returns the epoch's ``total_loss`` (the original only prints it in a comment).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole


class Params():
    def __init__(self):
        self.batch_size = 256  # 1000
        self.lr = 3e-4
        self.gamma = 0.99
        self.gae_param = 0.95
        self.clip = 0.2
        self.ent_coeff = 0.
        self.num_epoch = 10
        self.num_steps = 1000
        self.exploration_size = 256  # 1000
        self.num_processes = 1  # 4
        self.update_treshold = self.num_processes - 1
        self.max_episode_length = 10000
        self.seed = 1


# ---------------------------------------------------------------- model.py

class Model(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(Model, self).__init__()
        h_size_1 = 100
        h_size_2 = 100

        self.p_fc1 = nn.Linear(num_inputs, h_size_1)
        self.p_fc2 = nn.Linear(h_size_1, h_size_2)

        self.v_fc1 = nn.Linear(num_inputs, h_size_1*5)
        self.v_fc2 = nn.Linear(h_size_1*5, h_size_2)

        self.mu = nn.Linear(h_size_2, num_outputs)
        self.log_std = nn.Parameter(torch.zeros(1, num_outputs))
        self.v = nn.Linear(h_size_2,1)

        for name, p in self.named_parameters():
            # init parameters
            if 'bias' in name:
                p.data.fill_(0)
        # mode
        self.train()

    def forward(self, inputs):
        # actor
        x = torch.tanh(self.p_fc1(inputs))
        x = torch.tanh(self.p_fc2(x))
        mu = self.mu(x)
        sigma_sq = torch.exp(self.log_std)
        # critic
        x = torch.tanh(self.v_fc1(inputs))
        x = torch.tanh(self.v_fc2(x))
        v = self.v(x)
        return mu, sigma_sq, v


class Shared_grad_buffers():
    def __init__(self, model):
        self.grads = {}
        for name, p in model.named_parameters():
            self.grads[name+'_grad'] = torch.ones(p.size())

    def add_gradient(self, model):
        for name, p in model.named_parameters():
            self.grads[name+'_grad'] += p.grad.data

    def reset(self):
        for name,grad in self.grads.items():
            self.grads[name].fill_(0)


class Shared_obs_stats():
    def __init__(self, num_inputs):
        self.n = torch.zeros(num_inputs)
        self.mean = torch.zeros(num_inputs)
        self.mean_diff = torch.zeros(num_inputs)
        self.var = torch.zeros(num_inputs)

    def observes(self, obs):
        # observation mean var updates
        x = obs.data.squeeze()
        self.n += 1.
        last_mean = self.mean.clone()
        self.mean += (x-self.mean)/self.n
        self.mean_diff += (x-last_mean)*(x-self.mean)
        self.var = torch.clamp(self.mean_diff/self.n, min=1e-2)

    def normalize(self, inputs):
        obs_mean = self.mean.unsqueeze(0).expand_as(inputs)
        obs_std = torch.sqrt(self.var).unsqueeze(0).expand_as(inputs)
        return torch.clamp((inputs-obs_mean)/obs_std, -5., 5.)


# ---------------------------------------------------------------- utils.py (no processes: plain objects)

class TrafficLight:
    """used by chief to allow workers to run or not"""

    def __init__(self, val=True):
        self.val = False

    def get(self):
        return self.val

    def switch(self):
        self.val = (not self.val)


class Counter:
    """enable the chief to access worker's total number of updates"""

    def __init__(self, val=True):
        self.val = 0

    def get(self):
        return self.val

    def increment(self):
        self.val += 1

    def reset(self):
        self.val = 0


# ---------------------------------------------------------------- train.py

class ReplayMemory(object):
    def __init__(self, capacity, rng):
        self.capacity = capacity
        self.memory = []
        self.random = rng

    def push(self, events):
        for event in zip(*events):
            self.memory.append(event)
            if len(self.memory)>self.capacity:
                del self.memory[0]

    def clear(self):
        self.memory = []

    def sample(self, batch_size):
        samples = zip(*self.random.sample(self.memory, batch_size))
        return list(map(lambda x: torch.cat(x, 0), samples))


def normal(x, mu, std):
    a = (-1*(x-mu).pow(2)/(2*std)).exp()
    b = 1/(2*std*np.pi).sqrt()
    return a*b


def chief(params, traffic_light, counter, shared_model, shared_grad_buffers, optimizer, bug=None):
    """chief.py's loop body (without the one-second sleep)."""
    # workers will wait after last loss computation
    if counter.get() > params.update_treshold:
        for n,p in shared_model.named_parameters():
            p._grad = shared_grad_buffers.grads[n+'_grad']
        optimizer.step()
        counter.reset()
        if bug != "grad_buffers_not_reset":
            shared_grad_buffers.reset()
        traffic_light.switch() # workers start new loss computation


def _build(seed, bug=None):
    params = Params()
    params.seed = seed
    torch.manual_seed(params.seed)
    rng = random.Random(seed)
    env = ContinuousCartPole()
    env.seed(seed)
    num_inputs = env.observation_space.shape[0]
    num_outputs = env.action_space.shape[0]
    traffic_light = TrafficLight()
    counter = Counter()

    shared_model = Model(num_inputs, num_outputs)
    shared_grad_buffers = Shared_grad_buffers(shared_model)
    shared_obs_stats = Shared_obs_stats(num_inputs)
    optimizer = optim.Adam(shared_model.parameters(), lr=params.lr)

    # ---- train(rank=0, ...)
    model = Model(num_inputs, num_outputs)
    memory = ReplayMemory(params.exploration_size, rng)
    ws = types.SimpleNamespace(state=torch.Tensor(env.reset()).unsqueeze(0), done=True, episode_length=0, k=0)

    def density(x, mu, sigma_sq):
        if bug == "density_given_std":
            return normal(x, mu, sigma_sq.sqrt())
        return normal(x, mu, sigma_sq)

    def explore():
        """The worker loop's head: reload the shared weights and fill the memory with exploration_size steps."""
        ws.episode_length += 1
        model.load_state_dict(shared_model.state_dict())

        w = -1
        av_reward = 0
        t = -1
        state = ws.state
        while w < params.exploration_size:
            t+=1
            states = []
            actions = []
            rewards = []
            values = []
            returns = []
            advantages = []
            av_reward = 0
            cum_reward = 0
            cum_done = 0

            # Perform K steps
            for step in range(params.num_steps):
                w+=1
                shared_obs_stats.observes(state)
                if bug == "states_stored_unnormalized":
                    states.append(state)
                state = shared_obs_stats.normalize(state)
                if bug != "states_stored_unnormalized":
                    states.append(state)
                mu, sigma_sq, v = model(state)
                eps = torch.randn(mu.size())
                action = (mu + sigma_sq.sqrt()*eps)
                actions.append(action.detach())
                values.append(v)
                env_action = action.data.squeeze(0).numpy()
                state, reward, done, _ = env.step(env_action)
                done = (done or ws.episode_length >= params.max_episode_length)
                cum_reward += reward
                reward = max(min(reward, 1), -1)
                rewards.append(reward)
                if done:
                    cum_done += 1
                    av_reward += cum_reward
                    cum_reward = 0
                    ws.episode_length = 0
                    state = env.reset()
                state = torch.Tensor(state).unsqueeze(0)
                if done:
                    break

            # one last step
            R = torch.zeros(1, 1)
            if not done:
                _,_,v = model(state)
                R = v.data
            # compute returns and GAE(lambda) advantages:
            values.append(R)
            A = torch.zeros(1, 1)
            for i in reversed(range(len(rewards))):
                td = rewards[i] + params.gamma*values[i+1].data[0,0] - values[i].data[0,0]
                A = float(td) + params.gamma*params.gae_param*A
                advantages.insert(0, A)
                R = A + values[i].detach()
                returns.insert(0, R)
            # store usefull info:
            memory.push([states, actions, returns, advantages])
        ws.state = state
        ws.model_old = Model(num_inputs, num_outputs)
        ws.model_old.load_state_dict(model.state_dict())

    def epoch():
        """One pass of the worker's ``for k in range(params.num_epoch)`` body; returns total_loss."""
        model_old = ws.model_old
        # load new model
        model.load_state_dict(shared_model.state_dict())
        model.zero_grad()
        # get initial signal
        signal_init = traffic_light.get()
        # new mini_batch
        batch_states, batch_actions, batch_returns, batch_advantages = memory.sample(params.batch_size)
        # old probas
        with torch.no_grad():
            mu_old, sigma_sq_old, v_pred_old = model_old(batch_states.detach())
            probs_old = density(batch_actions, mu_old, sigma_sq_old)
        # new probas
        mu, sigma_sq, v_pred = model(batch_states)
        probs = density(batch_actions, mu, sigma_sq)
        # ratio
        ratio = probs/(1e-10+probs_old)
        # clip loss
        surr1 = ratio * torch.cat([batch_advantages]*num_outputs,1) # surrogate from conservative policy iteration
        surr2 = ratio.clamp(1-params.clip, 1+params.clip) * torch.cat([batch_advantages]*num_outputs,1)
        loss_clip = -torch.mean(torch.min(surr1, surr2))
        # value loss
        vfloss1 = (v_pred - batch_returns)**2
        v_pred_clipped = v_pred_old + (v_pred - v_pred_old).clamp(-params.clip, params.clip)
        vfloss2 = (v_pred_clipped - batch_returns)**2
        loss_value = 0.5*torch.mean(torch.max(vfloss1, vfloss2))
        # entropy
        loss_ent = -params.ent_coeff*torch.mean(probs*torch.log(probs+1e-5))
        # total
        total_loss = (loss_clip + loss_value + loss_ent)
        # before step, update old_model:
        model_old.load_state_dict(model.state_dict())
        # prepare for step
        total_loss.backward(retain_graph=True)
        shared_grad_buffers.add_gradient(model)

        counter.increment()

        # wait for a new signal to continue
        chief(params, traffic_light, counter, shared_model, shared_grad_buffers, optimizer, bug)
        assert traffic_light.get() != signal_init
        return total_loss

    def replay_round():
        """The loop's head on the recorded round: reload the shared weights, the rollout back into the memory."""
        ws.episode_length += 1
        model.load_state_dict(shared_model.state_dict())
        memory.memory = list(ws.recorded)
        ws.model_old = Model(num_inputs, num_outputs)
        ws.model_old.load_state_dict(model.state_dict())

    def train_step():
        if ws.k == 0 and not ws.fresh:
            replay_round()
        ws.fresh = False
        loss = epoch()
        ws.k += 1
        if ws.k == params.num_epoch:
            memory.clear()
            ws.k = 0
        return loss

    # the first round's exploration runs at build time; the first train_step runs its first epoch
    explore()
    ws.recorded = list(memory.memory)
    ws.fresh = True
    # (port) the evidence batch is drawn with its own generator, leaving the memory's untouched
    batch_states, batch_actions, batch_returns, batch_advantages = (
        torch.cat(x, 0) for x in zip(*random.Random(seed).sample(memory.memory, params.batch_size)))
    with torch.no_grad():
        mu_old, sigma_sq_old, v_pred_old = ws.model_old(batch_states)
        probs_old = density(batch_actions, mu_old, sigma_sq_old)

    batch = (batch_states, (batch_actions, batch_returns, batch_advantages, probs_old, v_pred_old))

    def loss_fn(outputs, targets):
        """the worker's total_loss on the model's outputs for ``batch`` (the same lines)."""
        mu, sigma_sq, v_pred = outputs
        batch_actions, batch_returns, batch_advantages, probs_old, v_pred_old = targets
        probs = density(batch_actions, mu, sigma_sq)
        ratio = probs/(1e-10+probs_old)
        surr1 = ratio * torch.cat([batch_advantages]*num_outputs,1)
        surr2 = ratio.clamp(1-params.clip, 1+params.clip) * torch.cat([batch_advantages]*num_outputs,1)
        loss_clip = -torch.mean(torch.min(surr1, surr2))
        vfloss1 = (v_pred - batch_returns)**2
        v_pred_clipped = v_pred_old + (v_pred - v_pred_old).clamp(-params.clip, params.clip)
        vfloss2 = (v_pred_clipped - batch_returns)**2
        loss_value = 0.5*torch.mean(torch.max(vfloss1, vfloss2))
        loss_ent = -params.ent_coeff*torch.mean(probs*torch.log(probs+1e-5))
        return loss_clip + loss_value + loss_ent

    return Program(name="dppo_cartpole", model=shared_model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the chief's shared_grad_buffers.reset() left out: every worker gradient ever computed stays in the buffers,
    # so each Adam step follows the running sum of all past gradients (classic: the zero_grad of a hand-rolled
    # gradient buffer forgotten).
    Bug("grad_buffers_not_reset", functools.partial(_build, bug="grad_buffers_not_reset"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # normal(x, mu, std) given the standard deviation where its formula takes the variance (sigma_sq): the
    # likelihood ratio is computed from the wrong Gaussian (classic variance / std mix-up).
    Bug("density_given_std", functools.partial(_build, bug="density_given_std"), "learning_ledger", ("OBJECTIVE",)),
    # the state appended to the rollout before Shared_obs_stats.normalize: the update scores the actions under raw
    # observations while they were sampled from normalized ones (classic preprocessing mismatch).
    Bug("states_stored_unnormalized", functools.partial(_build, bug="states_stored_unnormalized"), "learning_ledger",
        ("TASK",)),
]
