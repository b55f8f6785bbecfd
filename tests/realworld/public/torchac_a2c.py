# ruff: noqa: PLR0402
"""A2C from torch-ac, driven as rl-starter-files' ``scripts/train.py`` drives it.

Source: https://github.com/lcswillems/torch-ac
Commit: b6602c8ce843a8bfe9cef1723d0151dd7a3c22c3
Files: ``torch_ac/algos/base.py``, ``torch_ac/algos/a2c.py``, ``torch_ac/model.py``, ``torch_ac/format.py``,
``torch_ac/utils/dictlist.py``, ``torch_ac/utils/penv.py``
License: MIT (Copyright (c) 2019 Lucas Willems; full text in LICENSES/lcswillems-torch-ac.txt)
Also: https://github.com/lcswillems/rl-starter-files, commit 317da04a9a6fb26506bbd7f6c7c7e10fc0de86e0, files
``model.py`` (``ACModel``, ``init_params``), ``scripts/train.py`` (defaults, the loop), ``utils/other.py``
(``seed``); License: MIT (Copyright (c) 2018 Lucas Willems; LICENSES/lcswillems-rl-starter-files.txt).
Domain: RL, on-policy actor-critic (synchronous A2C with GAE)

Kept as written: ``BaseAlgo.collect_experiences`` (parallel environments stepped with ``dist.sample()`` under
no_grad, masks from ``terminated | truncated``, GAE advantages through the next mask, ``returnn = value +
advantage``, the T x P -> P * T flattening), ``A2CAlgo.update_parameters`` (``-(log_prob * advantage).mean()``,
squared value error, ``policy_loss - entropy_coef * entropy + value_loss_coef * value_loss``, zero_grad /
backward / ``clip_grad_norm_`` / step) and its RMSprop optimizer, ``DictList``, ``default_preprocess_obss``,
``ACModel``'s actor and critic heads (Linear 64 - Tanh - Linear, ``Categorical(logits=log_softmax)``, value
squeezed) with ``init_params``, ``train.py``'s defaults for A2C (16 processes, 5 frames per process, discount 0.99,
lr 0.001, GAE lambda 0.95, entropy 0.01, value coefficient 0.5, max grad norm 0.5, RMSprop alpha 0.99 eps 1e-8,
recurrence 1) and its loop (``collect_experiences`` then ``update_parameters``).

Deviations from the original:
- there is no gym/gymnasium/minigrid here: each environment is the cart-pole written out in ``_cartpole.py``
  (gymnasium's ``reset`` / 5-tuple ``step`` interface), seeded ``seed + 10000 * i`` as ``train.py`` seeds its
  environments; ``ParallelEnv`` steps them in this process instead of forked worker processes (the same calls
  and the same reset-on-done).
- ``ACModel`` reads the cart-pole's 4 features: its minigrid ``image_conv`` (and the unused LSTM memory / text
  GRU branches, off in the A2C default of recurrence 1) is dropped, so the embedding is the observation itself
  (``image_embedding_size`` 4); the actor and critic heads, the init and ``forward(obs, memory)`` are as written.
- ``default_preprocess_obss`` stacks the list of numpy observations first (``torch.tensor`` of a list of arrays
  is the same tensor, without the slow-path warning).
- ``update_parameters`` also returns the step's ``update_loss`` in its logs, so a step has a loss to report;
  logging, tensorboard, status saving and the ``frames`` budget are dropped; ``train_step`` is one iteration of
  the loop.
- torch_ac's abstract ``ACModel`` is named ``ACModel_`` here (rl-starter-files' ``ACModel`` takes the name); the
  abstract methods are left out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions.categorical import Categorical

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole


# ----------------------------------------------------------------------------------------------- torch_ac/format.py
def default_preprocess_obss(obss, device=None):
    return torch.tensor(numpy.array(obss), device=device)


# ----------------------------------------------------------------------------------------------- torch_ac/utils
class DictList(dict):
    """A dictionnary of lists of same size. Dictionnary items can be
    accessed using `.` notation and list items using `[]` notation."""

    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__

    def __len__(self):
        return len(next(iter(dict.values(self))))

    def __getitem__(self, index):
        return DictList({key: value[index] for key, value in dict.items(self)})

    def __setitem__(self, index, d):
        for key, value in d.items():
            dict.__getitem__(self, key)[index] = value


class ParallelEnv:
    """A concurrent execution of environments (port: stepped in this process)."""

    def __init__(self, envs):
        assert len(envs) >= 1, "No environment given."
        self.envs = envs

    def reset(self):
        results = [env.reset()[0] for env in self.envs]
        return results

    def step(self, actions):
        out = []
        for env, action in zip(self.envs, actions):
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
            out.append((obs, reward, terminated, truncated, info))
        results = zip(*out)
        return results


# ----------------------------------------------------------------------------------------------- torch_ac/model.py
class ACModel_:
    recurrent = False


class RecurrentACModel(ACModel_):
    recurrent = True


# ----------------------------------------------------------------------------------------------- rl-starter-files model.py
# Function from https://github.com/ikostrikov/pytorch-a2c-ppo-acktr/blob/master/model.py
def init_params(m):
    classname = m.__class__.__name__
    if classname.find("Linear") != -1:
        m.weight.data.normal_(0, 1)
        m.weight.data *= 1 / torch.sqrt(m.weight.data.pow(2).sum(1, keepdim=True))
        if m.bias is not None:
            m.bias.data.fill_(0)


class ACModel(nn.Module, RecurrentACModel):
    def __init__(self, obs_space, action_space, use_memory=False, use_text=False):
        super().__init__()

        # Decide which components are enabled
        self.use_text = use_text
        self.use_memory = use_memory

        # (port) no image: the embedding is the cart-pole's observation
        self.image_embedding_size = obs_space["image"][0]

        # Resize image embedding
        self.embedding_size = self.semi_memory_size

        # Define actor's model
        self.actor = nn.Sequential(
            nn.Linear(self.embedding_size, 64),
            nn.Tanh(),
            nn.Linear(64, action_space.n)
        )

        # Define critic's model
        self.critic = nn.Sequential(
            nn.Linear(self.embedding_size, 64),
            nn.Tanh(),
            nn.Linear(64, 1)
        )

        # Initialize parameters correctly
        self.apply(init_params)

    @property
    def memory_size(self):
        return 2*self.semi_memory_size

    @property
    def semi_memory_size(self):
        return self.image_embedding_size

    def forward(self, obs, memory):
        x = obs
        embedding = x

        x = self.actor(embedding)
        dist = Categorical(logits=F.log_softmax(x, dim=1))

        x = self.critic(embedding)
        value = x.squeeze(1)

        return dist, value, memory


# ----------------------------------------------------------------------------------------------- torch_ac/algos/base.py
class BaseAlgo:
    """The base class for RL algorithms."""

    def __init__(self, envs, acmodel, device, num_frames_per_proc, discount, lr, gae_lambda, entropy_coef,
                 value_loss_coef, max_grad_norm, recurrence, preprocess_obss, reshape_reward, bug=None):
        self.bug = bug

        # Store parameters

        self.env = ParallelEnv(envs)
        self.acmodel = acmodel
        self.device = device
        self.num_frames_per_proc = num_frames_per_proc
        self.discount = discount
        self.lr = lr
        self.gae_lambda = gae_lambda
        self.entropy_coef = entropy_coef
        self.value_loss_coef = value_loss_coef
        self.max_grad_norm = max_grad_norm
        self.recurrence = recurrence
        self.preprocess_obss = preprocess_obss or default_preprocess_obss
        self.reshape_reward = reshape_reward

        # Control parameters

        assert self.acmodel.recurrent or self.recurrence == 1
        assert self.num_frames_per_proc % self.recurrence == 0

        # Configure acmodel

        self.acmodel.to(self.device)
        self.acmodel.train()

        # Store helpers values

        self.num_procs = len(envs)
        self.num_frames = self.num_frames_per_proc * self.num_procs

        # Initialize experience values

        shape = (self.num_frames_per_proc, self.num_procs)

        self.obs = self.env.reset()
        self.obss = [None] * (shape[0])
        if self.acmodel.recurrent:
            self.memory = torch.zeros(shape[1], self.acmodel.memory_size, device=self.device)
            self.memories = torch.zeros(*shape, self.acmodel.memory_size, device=self.device)
        self.mask = torch.ones(shape[1], device=self.device)
        self.masks = torch.zeros(*shape, device=self.device)
        self.actions = torch.zeros(*shape, device=self.device, dtype=torch.int)
        self.values = torch.zeros(*shape, device=self.device)
        self.rewards = torch.zeros(*shape, device=self.device)
        self.advantages = torch.zeros(*shape, device=self.device)
        self.log_probs = torch.zeros(*shape, device=self.device)

        # Initialize log values

        self.log_episode_return = torch.zeros(self.num_procs, device=self.device)
        self.log_episode_reshaped_return = torch.zeros(self.num_procs, device=self.device)
        self.log_episode_num_frames = torch.zeros(self.num_procs, device=self.device)

        self.log_done_counter = 0
        self.log_return = [0] * self.num_procs
        self.log_reshaped_return = [0] * self.num_procs
        self.log_num_frames = [0] * self.num_procs

    def collect_experiences(self):
        """Collects rollouts and computes advantages."""

        for i in range(self.num_frames_per_proc):
            # Do one agent-environment interaction

            preprocessed_obs = self.preprocess_obss(self.obs, device=self.device)
            with torch.no_grad():
                if self.acmodel.recurrent:
                    dist, value, memory = self.acmodel(preprocessed_obs, self.memory * self.mask.unsqueeze(1))
                else:
                    dist, value = self.acmodel(preprocessed_obs)
            action = dist.sample()

            obs, reward, terminated, truncated, _ = self.env.step(action.cpu().numpy())
            done = tuple(a | b for a, b in zip(terminated, truncated))

            # Update experiences values

            self.obss[i] = self.obs
            self.obs = obs
            if self.acmodel.recurrent:
                self.memories[i] = self.memory
                self.memory = memory
            self.masks[i] = self.mask
            self.mask = 1 - torch.tensor(done, device=self.device, dtype=torch.float)
            self.actions[i] = action
            self.values[i] = value
            if self.reshape_reward is not None:
                self.rewards[i] = torch.tensor([
                    self.reshape_reward(obs_, action_, reward_, done_)
                    for obs_, action_, reward_, done_ in zip(obs, action, reward, done)
                ], device=self.device)
            else:
                self.rewards[i] = torch.tensor(reward, device=self.device)
            self.log_probs[i] = dist.log_prob(action)

            # Update log values

            self.log_episode_return += torch.tensor(reward, device=self.device, dtype=torch.float)
            self.log_episode_reshaped_return += self.rewards[i]
            self.log_episode_num_frames += torch.ones(self.num_procs, device=self.device)

            for i, done_ in enumerate(done):
                if done_:
                    self.log_done_counter += 1
                    self.log_return.append(self.log_episode_return[i].item())
                    self.log_reshaped_return.append(self.log_episode_reshaped_return[i].item())
                    self.log_num_frames.append(self.log_episode_num_frames[i].item())

            self.log_episode_return *= self.mask
            self.log_episode_reshaped_return *= self.mask
            self.log_episode_num_frames *= self.mask

        # Add advantage and return to experiences

        preprocessed_obs = self.preprocess_obss(self.obs, device=self.device)
        with torch.no_grad():
            if self.acmodel.recurrent:
                _, next_value, _ = self.acmodel(preprocessed_obs, self.memory * self.mask.unsqueeze(1))
            else:
                _, next_value = self.acmodel(preprocessed_obs)

        for i in reversed(range(self.num_frames_per_proc)):
            next_mask = self.masks[i+1] if i < self.num_frames_per_proc - 1 else self.mask
            next_value = self.values[i+1] if i < self.num_frames_per_proc - 1 else next_value
            next_advantage = self.advantages[i+1] if i < self.num_frames_per_proc - 1 else 0

            if self.bug == "next_mask_dropped":
                delta = self.rewards[i] + self.discount * next_value - self.values[i]
                self.advantages[i] = delta + self.discount * self.gae_lambda * next_advantage
            else:
                delta = self.rewards[i] + self.discount * next_value * next_mask - self.values[i]
                self.advantages[i] = delta + self.discount * self.gae_lambda * next_advantage * next_mask

        # Define experiences:
        #   the whole experience is the concatenation of the experience
        #   of each process.

        exps = DictList()
        exps.obs = [self.obss[i][j]
                    for j in range(self.num_procs)
                    for i in range(self.num_frames_per_proc)]
        if self.acmodel.recurrent:
            # T x P x D -> P x T x D -> (P * T) x D
            exps.memory = self.memories.transpose(0, 1).reshape(-1, *self.memories.shape[2:])
            # T x P -> P x T -> (P * T) x 1
            exps.mask = self.masks.transpose(0, 1).reshape(-1).unsqueeze(1)
        # for all tensors below, T x P -> P x T -> P * T
        if self.bug == "actions_not_transposed":
            exps.action = self.actions.reshape(-1)
        else:
            exps.action = self.actions.transpose(0, 1).reshape(-1)
        exps.value = self.values.transpose(0, 1).reshape(-1)
        exps.reward = self.rewards.transpose(0, 1).reshape(-1)
        exps.advantage = self.advantages.transpose(0, 1).reshape(-1)
        exps.returnn = exps.value + exps.advantage
        exps.log_prob = self.log_probs.transpose(0, 1).reshape(-1)

        # Preprocess experiences

        exps.obs = self.preprocess_obss(exps.obs, device=self.device)

        # Log some values

        keep = max(self.log_done_counter, self.num_procs)

        logs = {
            "return_per_episode": self.log_return[-keep:],
            "reshaped_return_per_episode": self.log_reshaped_return[-keep:],
            "num_frames_per_episode": self.log_num_frames[-keep:],
            "num_frames": self.num_frames
        }

        self.log_done_counter = 0
        self.log_return = self.log_return[-self.num_procs:]
        self.log_reshaped_return = self.log_reshaped_return[-self.num_procs:]
        self.log_num_frames = self.log_num_frames[-self.num_procs:]

        return exps, logs


# ----------------------------------------------------------------------------------------------- torch_ac/algos/a2c.py
class A2CAlgo(BaseAlgo):
    """The Advantage Actor-Critic algorithm."""

    def __init__(self, envs, acmodel, device=None, num_frames_per_proc=None, discount=0.99, lr=0.01, gae_lambda=0.95,
                 entropy_coef=0.01, value_loss_coef=0.5, max_grad_norm=0.5, recurrence=4,
                 rmsprop_alpha=0.99, rmsprop_eps=1e-8, preprocess_obss=None, reshape_reward=None, bug=None):
        num_frames_per_proc = num_frames_per_proc or 8

        super().__init__(envs, acmodel, device, num_frames_per_proc, discount, lr, gae_lambda, entropy_coef,
                         value_loss_coef, max_grad_norm, recurrence, preprocess_obss, reshape_reward, bug)

        self.optimizer = torch.optim.RMSprop(self.acmodel.parameters(), lr,
                                             alpha=rmsprop_alpha, eps=rmsprop_eps)

    def update_parameters(self, exps):
        # Compute starting indexes

        inds = self._get_starting_indexes()

        # Initialize update values

        update_entropy = 0
        update_value = 0
        update_policy_loss = 0
        update_value_loss = 0
        update_loss = 0

        # Initialize memory

        if self.acmodel.recurrent:
            memory = exps.memory[inds]

        for i in range(self.recurrence):
            # Create a sub-batch of experience

            sb = exps[inds + i]

            # Compute loss

            if self.acmodel.recurrent:
                dist, value, memory = self.acmodel(sb.obs, memory * sb.mask)
            else:
                dist, value = self.acmodel(sb.obs)

            entropy = dist.entropy().mean()

            policy_loss = -(dist.log_prob(sb.action) * sb.advantage).mean()

            value_loss = (value - sb.returnn).pow(2).mean()

            loss = policy_loss - self.entropy_coef * entropy + self.value_loss_coef * value_loss

            # Update batch values

            update_entropy += entropy.item()
            update_value += value.mean().item()
            update_policy_loss += policy_loss.item()
            update_value_loss += value_loss.item()
            update_loss += loss

        # Update update values

        update_entropy /= self.recurrence
        update_value /= self.recurrence
        update_policy_loss /= self.recurrence
        update_value_loss /= self.recurrence
        update_loss /= self.recurrence

        # Update actor-critic

        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()
        update_loss.backward()
        update_grad_norm = sum(p.grad.data.norm(2) ** 2 for p in self.acmodel.parameters()) ** 0.5
        torch.nn.utils.clip_grad_norm_(self.acmodel.parameters(), self.max_grad_norm)
        self.optimizer.step()

        # Log some values

        logs = {
            "entropy": update_entropy,
            "value": update_value,
            "policy_loss": update_policy_loss,
            "value_loss": update_value_loss,
            "grad_norm": update_grad_norm,
            "loss": update_loss.item(),  # (port)
        }

        return logs

    def _get_starting_indexes(self):
        starting_indexes = numpy.arange(0, self.num_frames, self.recurrence)
        return starting_indexes


# ----------------------------------------------------------------------------------------------- scripts/train.py
class Discrete:
    def __init__(self, n):
        self.n = n


def seed_all(seed):
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def _build(seed, bug=None):
    procs = 16
    frames_per_proc = 5  # train.py: "default: 5 for A2C"
    discount = 0.99
    lr = 0.001
    gae_lambda = 0.95
    entropy_coef = 0.01
    value_loss_coef = 0.5
    max_grad_norm = 0.5
    optim_eps = 1e-8
    optim_alpha = 0.99
    recurrence = 1
    mem = recurrence > 1

    seed_all(seed)
    device = torch.device("cpu")

    envs = []
    for i in range(procs):
        envs.append(CartPole(seed + 10000 * i))

    obs_space = {"image": (4,)}
    acmodel = ACModel(obs_space, Discrete(2), mem, False)
    acmodel.to(device)

    algo = A2CAlgo(envs, acmodel, device, frames_per_proc, discount, lr, gae_lambda,
                   entropy_coef, value_loss_coef, max_grad_norm, recurrence,
                   optim_alpha, optim_eps, None, bug=bug)

    def train_step():
        exps, _logs1 = algo.collect_experiences()
        logs2 = algo.update_parameters(exps)
        return logs2["loss"]

    # the Program's batch: a first collection of experiences (played before the loop; the loop goes on from there)
    exps, _ = algo.collect_experiences()
    batch = ((exps.obs, exps.memory * exps.mask), (exps.action, exps.advantage, exps.returnn))

    def loss_fn(outputs, targets):
        """update_parameters' loss on the model's outputs for ``batch`` (the same lines)."""
        dist, value, _memory = outputs
        action, advantage, returnn = targets
        entropy = dist.entropy().mean()
        policy_loss = -(dist.log_prob(action) * advantage).mean()
        value_loss = (value - returnn).pow(2).mean()
        return policy_loss - entropy_coef * entropy + value_loss_coef * value_loss

    return Program(name="torchac_a2c", model=acmodel, batch=batch, loss_fn=loss_fn, optimizer=algo.optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the GAE recursion leaves out the next mask: values and advantages bootstrap across episode ends (classic
    # done-mask slip).
    Bug("next_mask_dropped", functools.partial(_build, bug="next_mask_dropped"), "learning_ledger", ("TASK",)),
    # the actions are flattened T x P without the transpose the other experiences get: each observation is paired
    # with another process's or time step's action (classic layout slip in the rollout flattening).
    Bug("actions_not_transposed", functools.partial(_build, bug="actions_not_transposed"), "learning_ledger",
        ("TASK",)),
    # self.optimizer.zero_grad() left out: gradients accumulate over the updates (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
