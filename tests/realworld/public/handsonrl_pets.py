"""PETS's probabilistic ensemble dynamics model (model-based RL), from boyu-ai/Hands-on-RL's chapter 16 ("model
predictive control"): five Swish MLPs held as batched ``FCLayer`` weights, each predicting the mean and the bounded
log-variance of (reward, state change) from (state, action); Gaussian NLL per member, the soft log-variance bounds'
penalty, Adam 1e-3; each member sees its own permutation of the transitions, a 10% holdout checked every epoch.

Source: https://github.com/boyu-ai/Hands-on-RL
Commit: 4a151a4bfeafd3061c0e0ef59bece25ca8fb2bf8
Files: ``第16章-模型预测控制.ipynb`` (chapter 16, model predictive control: ``Swish``, ``init_weights``,
``FCLayer``, ``EnsembleModel``, ``EnsembleDynamicsModel``, ``ReplayBuffer``, ``PETS.explore`` / ``train_model``)
License: Apache-2.0 (full text in LICENSES/boyu-ai-Hands-on-RL.txt)
Domain: RL, model-based (PETS: probabilistic ensemble dynamics model trained on environment transitions)

Kept as written: ``Swish``, ``init_weights`` (the truncated-normal loop, std ``1 / (2 sqrt(in))``, zero biases),
``FCLayer`` (``bmm`` over the ensemble axis), ``EnsembleModel`` (4 hidden layers of 200, outputs ``(state_dim + 1)
* 2``, the non-trainable ``_max_logvar`` 0.5 / ``_min_logvar`` -10 parameters and the two softplus bounds, ``loss``
with and without the variance term, its own Adam at lr 1e-3 and its ``train(loss)`` that adds ``0.01 *
sum(max_logvar) - 0.01 * sum(min_logvar)`` before zero_grad/backward/step -- a method that shadows
``nn.Module.train`` in the original, kept so), ``EnsembleDynamicsModel.train``'s body (the permutation and the 10%
holdout repeated over the ensemble, one ``np.random.permutation`` of the training rows per member each epoch, batches
of 64, the holdout MSE per member after each epoch and ``_save_best`` with threshold 0.1), ``PETS.explore`` (one
episode of random actions into the environment pool) and ``PETS.train_model`` (inputs ``(obs, action)``, labels
``(reward, next_obs - obs)``); the script's ``buffer_size`` 100000.

Deviations from the original:
- gym's Pendulum-v0 is replaced by the numpy ``Pendulum`` of ``_continuous_control.py`` (seeded); the random
  exploration uses its ``action_space.sample()``.
- the data is two random-action ``explore`` episodes (400 transitions) in the environment pool; the original's first
  ``train_model`` sees one (200), the later ones the pool grown by each MPC episode. The CEM planner
  (``CEM``, ``FakeEnv``, ``PETS.mpc``) acts only after model training and is not ported: the port is the model's
  training.
- ``EnsembleDynamicsModel.train`` is ``train_batches`` here: its split made at once, its epoch loop a generator;
  ``train_step`` is one batch of that loop (forward, ``loss``, ``model.train(loss)``);
  when an epoch's batches are used up the holdout losses are computed and ``_save_best`` is called as written, and
  the next epoch draws new per-member permutations; the ``break_condition`` / ``max_iter`` stop is not applied to
  the sequence of steps (the caller decides how many steps run). CPU only.
- ``eval_fn`` is the holdout MSE summed over the members (``loss(..., use_var_loss=False)``'s ``mse_loss``).
- the Program's batch is the first batch of the first epoch; ``loss_fn`` recomputes the loss and the bounds'
  penalty from the model's default output ``(mean, exp(logvar))``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import collections
import functools
import itertools
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
from _continuous_control import Pendulum

device = torch.device("cpu")
buffer_size = 100000


class Swish(nn.Module):
    ''' Swish激活函数 '''
    def __init__(self):
        super(Swish, self).__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


def init_weights(m):
    ''' 初始化模型权重 '''
    def truncated_normal_init(t, mean=0.0, std=0.01):
        torch.nn.init.normal_(t, mean=mean, std=std)
        while True:
            cond = (t < mean - 2 * std) | (t > mean + 2 * std)
            if not torch.sum(cond):
                break
            t = torch.where(
                cond,
                torch.nn.init.normal_(torch.ones(t.shape, device=device),
                                      mean=mean,
                                      std=std), t)
        return t

    if type(m) == nn.Linear or isinstance(m, FCLayer):
        truncated_normal_init(m.weight, std=1 / (2 * np.sqrt(m._input_dim)))
        m.bias.data.fill_(0.0)


class FCLayer(nn.Module):
    ''' 集成之后的全连接层 '''
    def __init__(self, input_dim, output_dim, ensemble_size, activation):
        super(FCLayer, self).__init__()
        self._input_dim, self._output_dim = input_dim, output_dim
        self.weight = nn.Parameter(
            torch.Tensor(ensemble_size, input_dim, output_dim).to(device))
        self._activation = activation
        self.bias = nn.Parameter(
            torch.Tensor(ensemble_size, output_dim).to(device))

    def forward(self, x):
        return self._activation(
            torch.add(torch.bmm(x, self.weight), self.bias[:, None, :]))


class EnsembleModel(nn.Module):
    ''' 环境模型集成 '''
    def __init__(self,
                 state_dim,
                 action_dim,
                 ensemble_size=5,
                 learning_rate=1e-3,
                 bug=None):
        super(EnsembleModel, self).__init__()
        self.bug = bug
        # 输出包括均值和方差,因此是状态与奖励维度之和的两倍
        self._output_dim = (state_dim + 1) * 2
        self._max_logvar = nn.Parameter((torch.ones(
            (1, self._output_dim // 2)).float() / 2).to(device),
                                        requires_grad=False)
        self._min_logvar = nn.Parameter((-torch.ones(
            (1, self._output_dim // 2)).float() * 10).to(device),
                                        requires_grad=False)

        self.layer1 = FCLayer(state_dim + action_dim, 200, ensemble_size,
                              Swish())
        self.layer2 = FCLayer(200, 200, ensemble_size, Swish())
        self.layer3 = FCLayer(200, 200, ensemble_size, Swish())
        self.layer4 = FCLayer(200, 200, ensemble_size, Swish())
        self.layer5 = FCLayer(200, self._output_dim, ensemble_size,
                              nn.Identity())
        self.apply(init_weights)  # 初始化环境模型中的参数
        self.optimizer = torch.optim.Adam(self.parameters(), lr=learning_rate)

    def forward(self, x, return_log_var=False):
        ret = self.layer5(self.layer4(self.layer3(self.layer2(
            self.layer1(x)))))
        mean = ret[:, :, :self._output_dim // 2]
        # 在PETS算法中,将方差控制在最小值和最大值之间
        logvar = self._max_logvar - F.softplus(
            self._max_logvar - ret[:, :, self._output_dim // 2:])
        logvar = self._min_logvar + F.softplus(logvar - self._min_logvar)
        return mean, logvar if return_log_var else torch.exp(logvar)

    def loss(self, mean, logvar, labels, use_var_loss=True):
        if self.bug == "inverse_var_sign_flipped":
            inverse_var = torch.exp(logvar)
        else:
            inverse_var = torch.exp(-logvar)
        if use_var_loss:
            mse_loss = torch.mean(torch.mean(torch.pow(mean - labels, 2) *
                                             inverse_var,
                                             dim=-1),
                                  dim=-1)
            var_loss = torch.mean(torch.mean(logvar, dim=-1), dim=-1)
            total_loss = torch.sum(mse_loss) + torch.sum(var_loss)
        else:
            mse_loss = torch.mean(torch.pow(mean - labels, 2), dim=(1, 2))
            total_loss = torch.sum(mse_loss)
        return total_loss, mse_loss

    def train(self, loss):
        if self.bug != "no_zero_grad":
            self.optimizer.zero_grad()
        loss += 0.01 * torch.sum(self._max_logvar) - 0.01 * torch.sum(
            self._min_logvar)
        loss.backward()
        self.optimizer.step()


class EnsembleDynamicsModel:
    ''' 环境模型集成,加入精细化的训练 '''
    def __init__(self, state_dim, action_dim, num_network=5, bug=None):
        self.bug = bug
        self._num_network = num_network
        self._state_dim, self._action_dim = state_dim, action_dim
        self.model = EnsembleModel(state_dim,
                                   action_dim,
                                   ensemble_size=num_network, bug=bug)
        self._epoch_since_last_update = 0

    def train_batches(self, inputs, labels, batch_size=64, holdout_ratio=0.1, max_iter=20):
        """(port) ``train``'s body: the split made at once, then its epoch loop as a generator, one yield per batch."""
        # 设置训练集与验证集
        permutation = np.random.permutation(inputs.shape[0])
        if self.bug == "labels_permuted_apart":
            inputs, labels = inputs[permutation], labels[np.random.permutation(inputs.shape[0])]
        else:
            inputs, labels = inputs[permutation], labels[permutation]
        num_holdout = int(inputs.shape[0] * holdout_ratio)
        train_inputs, train_labels = inputs[num_holdout:], labels[num_holdout:]
        holdout_inputs, holdout_labels = inputs[:
                                                num_holdout], labels[:
                                                                     num_holdout]
        holdout_inputs = torch.from_numpy(holdout_inputs).float().to(device)
        holdout_labels = torch.from_numpy(holdout_labels).float().to(device)
        holdout_inputs = holdout_inputs[None, :, :].repeat(
            [self._num_network, 1, 1])
        holdout_labels = holdout_labels[None, :, :].repeat(
            [self._num_network, 1, 1])
        self.holdout = (holdout_inputs, holdout_labels)  # (port) for eval_fn

        def _epochs():
            # 保留最好的结果
            self._snapshots = {i: (None, 1e10) for i in range(self._num_network)}

            for epoch in itertools.count():
                # 定义每一个网络的训练数据
                train_index = np.vstack([
                    np.random.permutation(train_inputs.shape[0])
                    for _ in range(self._num_network)
                ])
                # 所有真实数据都用来训练
                for batch_start_pos in range(0, train_inputs.shape[0], batch_size):
                    batch_index = train_index[:, batch_start_pos:batch_start_pos +
                                              batch_size]
                    train_input = torch.from_numpy(
                        train_inputs[batch_index]).float().to(device)
                    train_label = torch.from_numpy(
                        train_labels[batch_index]).float().to(device)

                    mean, logvar = self.model(train_input, return_log_var=True)
                    loss, _ = self.model.loss(mean, logvar, train_label)
                    self.model.train(loss)
                    yield loss.detach()

                with torch.no_grad():
                    mean, logvar = self.model(holdout_inputs, return_log_var=True)
                    _, holdout_losses = self.model.loss(mean,
                                                        logvar,
                                                        holdout_labels,
                                                        use_var_loss=False)
                    holdout_losses = holdout_losses.cpu()
                    break_condition = self._save_best(epoch, holdout_losses)
                    if break_condition or epoch > max_iter:  # 结束训练
                        pass  # (port) the original breaks here; the caller decides how many steps run

        return _epochs()

    def _save_best(self, epoch, losses, threshold=0.1):
        updated = False
        for i in range(len(losses)):
            current = losses[i]
            _, best = self._snapshots[i]
            improvement = (best - current) / best
            if improvement > threshold:
                self._snapshots[i] = (epoch, current)
                updated = True
        self._epoch_since_last_update = 0 if updated else self._epoch_since_last_update + 1
        return self._epoch_since_last_update > 5


class ReplayBuffer:
    def __init__(self, capacity):
        self.buffer = collections.deque(maxlen=capacity)

    def add(self, state, action, reward, next_state, done):
        self.buffer.append((state, action, reward, next_state, done))

    def size(self):
        return len(self.buffer)

    def return_all_samples(self):
        all_transitions = list(self.buffer)
        state, action, reward, next_state, done = zip(*all_transitions)
        return np.array(state), action, reward, np.array(next_state), done


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = Pendulum()
    env.seed(seed)
    env.action_space.seed(seed)
    _env_pool = ReplayBuffer(buffer_size)
    obs_dim = env.observation_space.shape[0]
    _action_dim = env.action_space.shape[0]
    _model = EnsembleDynamicsModel(obs_dim, _action_dim, bug=bug)

    def explore():
        obs, done, episode_return = env.reset(), False, 0
        while not done:
            action = env.action_space.sample()
            next_obs, reward, done, _ = env.step(action)
            _env_pool.add(obs, action, reward, next_obs, done)
            obs = next_obs
            episode_return += reward
        return episode_return

    explore()
    explore()  # (port) a second episode: 400 transitions

    # PETS.train_model
    env_samples = _env_pool.return_all_samples()
    obs = env_samples[0]
    actions = np.array(env_samples[1])
    rewards = np.array(env_samples[2]).reshape(-1, 1)
    next_obs = env_samples[3]
    inputs = np.concatenate((obs, actions), axis=-1)
    labels = np.concatenate((rewards, next_obs - obs), axis=-1)
    batches = _model.train_batches(inputs, labels)

    def train_step():
        return next(batches)

    model = _model.model

    def loss_fn(output, target):
        mean, var = output
        loss, _ = model.loss(mean, torch.log(var), target)
        return loss + 0.01 * torch.sum(model._max_logvar) - 0.01 * torch.sum(model._min_logvar)

    def eval_fn(m, batch=None):
        holdout_inputs, holdout_labels = _model.holdout
        with torch.no_grad():
            mean, logvar = m(holdout_inputs, return_log_var=True)
            _, holdout_losses = m.loss(mean, logvar, holdout_labels, use_var_loss=False)
        return float(holdout_losses.sum())

    # the Program's batch: the first batch of a first epoch, drawn the same way (without touching the generator)
    rng = np.random.default_rng(seed)
    idx = np.vstack([rng.permutation(inputs.shape[0]) for _ in range(5)])[:, :64]
    batch = (torch.from_numpy(inputs[idx]).float(), torch.from_numpy(labels[idx]).float())

    return Program(name="handsonrl_pets", model=model, batch=batch, loss_fn=loss_fn, optimizer=model.optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels permuted with a second, independent permutation (classic: inputs and labels shuffled apart).
    Bug("labels_permuted_apart", functools.partial(_build, bug="labels_permuted_apart"), "learning_ledger",
        ("TASK",)),
    # exp(logvar) for exp(-logvar) in the Gaussian NLL (classic sign slip): the squared error is weighted by the
    # variance, so the model is paid to shrink the variance where it errs.
    Bug("inverse_var_sign_flipped", functools.partial(_build, bug="inverse_var_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # EnsembleModel.train without optimizer.zero_grad() (classic): gradients accumulate across batches.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
