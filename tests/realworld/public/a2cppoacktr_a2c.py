# ruff: noqa: F841, PLR0402, SIM118, UP004, UP008, UP039
"""A2C from ikostrikov's pytorch-a2c-ppo-acktr-gail: an MLP actor-critic (separate actor and critic towers,
orthogonal init), 16 synchronous environments, 5-step rollouts in a ``RolloutStorage`` whose ``masks`` cut the
bootstrapped n-step returns at episode ends, and one RMSprop update per rollout on ``value_loss * 0.5 + action_loss -
entropy * 0.01`` with gradient-norm clipping.

Source: https://github.com/ikostrikov/pytorch-a2c-ppo-acktr-gail
Commit: 41332b78dfb50321c29bade65f9d244387f68a60
Files: main.py (the training loop), a2c_ppo_acktr/algo/a2c_acktr.py (A2C_ACKTR), a2c_ppo_acktr/storage.py
(RolloutStorage), a2c_ppo_acktr/model.py (Policy, NNBase, MLPBase), a2c_ppo_acktr/distributions.py (FixedCategorical,
Categorical), a2c_ppo_acktr/utils.py (init), a2c_ppo_acktr/envs.py (VecPyTorch, TimeLimitMask), a2c_ppo_acktr/
arguments.py (the defaults)
License: MIT (Copyright (c) 2017 Ilya Kostrikov; full text in LICENSES/ikostrikov-pytorch-a2c-ppo-acktr-gail.txt)
Domain: RL, synchronous advantage actor-critic (n-step returns with done masks)

Kept as written: arguments.py's defaults for ``--algo a2c`` (lr 7e-4, RMSprop eps 1e-5 and alpha 0.99, gamma 0.99,
no GAE, entropy_coef 0.01, value_loss_coef 0.5, max_grad_norm 0.5, num_processes 16, num_steps 5, no recurrent
policy, no linear lr decay, no proper time limits); ``Policy`` (``act``, ``get_value``, ``evaluate_actions``),
``NNBase`` (with ``_forward_gru``, unused without ``--recurrent-policy``), ``MLPBase`` (hidden 64, Tanh towers,
``init`` with orthogonal weights, gain sqrt(2)), ``Categorical`` (orthogonal init, gain 0.01) and
``FixedCategorical``; ``RolloutStorage`` (``insert``, ``after_update``, ``compute_returns``); ``A2C_ACKTR.update``
(``evaluate_actions`` on the flattened rollout, ``advantages = returns[:-1] - values``, ``value_loss``,
``action_loss = -(advantages.detach() * action_log_probs).mean()``, zero_grad, backward, ``clip_grad_norm_``, step);
main.py's loop body (``act`` under no_grad, ``envs.step``, ``masks`` / ``bad_masks`` from ``done`` and the infos,
``rollouts.insert``, ``get_value`` of the last observation, ``compute_returns``, ``agent.update``,
``rollouts.after_update``); the seeding by ``torch.manual_seed(args.seed)``.

Deviations from the original:
- gym and stable-baselines3 are not installed: the 16 environments are the cart-pole written out in ``_cartpole.py``
  (CartPole-v1's dynamics, seeds ``seed + rank`` as ``make_env`` gives them), stepped together by ``VecCartPole``
  below, which resets an environment when its episode ends and returns the new episode's first observation (what a
  vectorized env does), marks ``info['bad_transition']`` at the 500-step limit (``TimeLimitMask``) and converts to
  tensors as ``VecPyTorch`` does (its ``reset`` / ``step_async`` / ``step_wait`` lines are kept).
  ``VecNormalize`` (stable-baselines3's observation and return normalization) is left out: observations and
  rewards reach the agent unnormalized. The Monitor's episode statistics are not produced.
- the ACKTR branches of ``A2C_ACKTR`` (KFAC optimizer, Fisher loss) are left out: ``--algo a2c`` never takes them;
  the CNN base, the Bernoulli / Gaussian heads, the PPO and GAIL code and the PPO batch generators of
  ``RolloutStorage`` are not used by this run and are not copied.
- ``Policy.forward`` raises NotImplementedError in the original; here it returns ``evaluate_actions(...)`` so the
  policy can be called on a batch (``loss_fn`` recomputes ``update()``'s loss from those outputs and the returns).
- ``main()`` is not run as a loop over ``num_updates``: ``train_step`` runs one iteration of it (a 5-step rollout
  of the 16 environments, the returns, one update, ``after_update``) and returns the update's total loss (from the
  three numbers ``update()`` returns); logging, evaluation, saving and ``torch.set_num_threads(1)`` are dropped. The batch given to the Program is
  the first rollout, collected at build time with the initial policy, and that rollout is the one the first
  ``train_step`` trains on.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

# arguments.py defaults for --algo a2c
lr = 7e-4
eps = 1e-5
alpha = 0.99
gamma = 0.99
use_gae = False
gae_lambda = 0.95
entropy_coef = 0.01
value_loss_coef = 0.5
max_grad_norm = 0.5
num_processes = 16
num_steps = 5
recurrent_policy = False
use_proper_time_limits = False


# ---- the vectorized environment (port: gym / stable-baselines3 are not installed) -------------------------------

class Discrete:
    def __init__(self, n):
        self.n = n


class VecCartPole:
    """num_processes cart-poles stepped together, reset when done (as a vectorized env does), TimeLimitMask's
    bad_transition at the time limit, and VecPyTorch's conversions."""

    observation_space = type("Box", (), {"shape": (4,)})()
    action_space = Discrete(2)

    def __init__(self, seed, num_processes, device):
        self.envs = [CartPole(seed + rank) for rank in range(num_processes)]
        self.device = device

    # VecPyTorch.reset
    def reset(self):
        obs = np.stack([env.reset()[0] for env in self.envs])
        obs = torch.from_numpy(obs).float().to(self.device)
        return obs

    def step(self, actions):
        # VecPyTorch.step_async
        if isinstance(actions, torch.LongTensor):
            # Squeeze the dimension for discrete actions
            actions = actions.squeeze(1)
        actions = actions.cpu().numpy()
        # the vectorized env's step
        obs, reward, done, info = [], [], [], []
        for env, a in zip(self.envs, actions):
            o, r, terminated, truncated, _ = env.step(int(a))
            d = terminated or truncated
            inf = {}
            if truncated and not terminated:
                inf['bad_transition'] = True
            if d:
                o, _ = env.reset()
            obs.append(o)
            reward.append(r)
            done.append(d)
            info.append(inf)
        obs, reward, done = np.stack(obs), np.array(reward, dtype=np.float32), np.array(done)
        # VecPyTorch.step_wait
        obs = torch.from_numpy(obs).float().to(self.device)
        reward = torch.from_numpy(reward).unsqueeze(dim=1).float()
        return obs, reward, done, info


# ---- a2c_ppo_acktr/utils.py -------------------------------------------------------------------------------------

def init(module, weight_init, bias_init, gain=1):
    weight_init(module.weight.data, gain=gain)
    bias_init(module.bias.data)
    return module


# ---- a2c_ppo_acktr/distributions.py -----------------------------------------------------------------------------

# Categorical
class FixedCategorical(torch.distributions.Categorical):
    def sample(self):
        return super().sample().unsqueeze(-1)

    def log_probs(self, actions):
        return (
            super()
            .log_prob(actions.squeeze(-1))
            .view(actions.size(0), -1)
            .sum(-1)
            .unsqueeze(-1)
        )

    def mode(self):
        return self.probs.argmax(dim=-1, keepdim=True)


class Categorical(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(Categorical, self).__init__()

        init_ = lambda m: init(
            m,
            nn.init.orthogonal_,
            lambda x: nn.init.constant_(x, 0),
            gain=0.01)

        self.linear = init_(nn.Linear(num_inputs, num_outputs))

    def forward(self, x):
        x = self.linear(x)
        return FixedCategorical(logits=x)


# ---- a2c_ppo_acktr/model.py -------------------------------------------------------------------------------------

class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


class Policy(nn.Module):
    def __init__(self, obs_shape, action_space, base=None, base_kwargs=None):
        super(Policy, self).__init__()
        if base_kwargs is None:
            base_kwargs = {}
        if base is None:
            if len(obs_shape) == 1:
                base = MLPBase
            else:
                raise NotImplementedError

        self.base = base(obs_shape[0], **base_kwargs)

        if action_space.__class__.__name__ == "Discrete":
            num_outputs = action_space.n
            self.dist = Categorical(self.base.output_size, num_outputs)
        else:
            raise NotImplementedError

    @property
    def is_recurrent(self):
        return self.base.is_recurrent

    @property
    def recurrent_hidden_state_size(self):
        """Size of rnn_hx."""
        return self.base.recurrent_hidden_state_size

    def forward(self, inputs, rnn_hxs, masks, action):
        # (port) the original raises NotImplementedError; the policy called on a batch evaluates the actions
        return self.evaluate_actions(inputs, rnn_hxs, masks, action)

    def act(self, inputs, rnn_hxs, masks, deterministic=False):
        value, actor_features, rnn_hxs = self.base(inputs, rnn_hxs, masks)
        dist = self.dist(actor_features)

        if deterministic:
            action = dist.mode()
        else:
            action = dist.sample()

        action_log_probs = dist.log_probs(action)
        dist_entropy = dist.entropy().mean()

        return value, action, action_log_probs, rnn_hxs

    def get_value(self, inputs, rnn_hxs, masks):
        value, _, _ = self.base(inputs, rnn_hxs, masks)
        return value

    def evaluate_actions(self, inputs, rnn_hxs, masks, action):
        value, actor_features, rnn_hxs = self.base(inputs, rnn_hxs, masks)
        dist = self.dist(actor_features)

        action_log_probs = dist.log_probs(action)
        dist_entropy = dist.entropy().mean()

        return value, action_log_probs, dist_entropy, rnn_hxs


class NNBase(nn.Module):
    def __init__(self, recurrent, recurrent_input_size, hidden_size):
        super(NNBase, self).__init__()

        self._hidden_size = hidden_size
        self._recurrent = recurrent

        if recurrent:
            self.gru = nn.GRU(recurrent_input_size, hidden_size)
            for name, param in self.gru.named_parameters():
                if 'bias' in name:
                    nn.init.constant_(param, 0)
                elif 'weight' in name:
                    nn.init.orthogonal_(param)

    @property
    def is_recurrent(self):
        return self._recurrent

    @property
    def recurrent_hidden_state_size(self):
        if self._recurrent:
            return self._hidden_size
        return 1

    @property
    def output_size(self):
        return self._hidden_size

    def _forward_gru(self, x, hxs, masks):
        if x.size(0) == hxs.size(0):
            x, hxs = self.gru(x.unsqueeze(0), (hxs * masks).unsqueeze(0))
            x = x.squeeze(0)
            hxs = hxs.squeeze(0)
        else:
            # x is a (T, N, -1) tensor that has been flatten to (T * N, -1)
            N = hxs.size(0)
            T = int(x.size(0) / N)

            # unflatten
            x = x.view(T, N, x.size(1))

            # Same deal with masks
            masks = masks.view(T, N)

            # Let's figure out which steps in the sequence have a zero for any agent
            # We will always assume t=0 has a zero in it as that makes the logic cleaner
            has_zeros = ((masks[1:] == 0.0) \
                            .any(dim=-1)
                            .nonzero()
                            .squeeze()
                            .cpu())

            # +1 to correct the masks[1:]
            if has_zeros.dim() == 0:
                # Deal with scalar
                has_zeros = [has_zeros.item() + 1]
            else:
                has_zeros = (has_zeros + 1).numpy().tolist()

            # add t=0 and t=T to the list
            has_zeros = [0] + has_zeros + [T]

            hxs = hxs.unsqueeze(0)
            outputs = []
            for i in range(len(has_zeros) - 1):
                # We can now process steps that don't have any zeros in masks together!
                # This is much faster
                start_idx = has_zeros[i]
                end_idx = has_zeros[i + 1]

                rnn_scores, hxs = self.gru(
                    x[start_idx:end_idx],
                    hxs * masks[start_idx].view(1, -1, 1))

                outputs.append(rnn_scores)

            # assert len(outputs) == T
            # x is a (T, N, -1) tensor
            x = torch.cat(outputs, dim=0)
            # flatten
            x = x.view(T * N, -1)
            hxs = hxs.squeeze(0)

        return x, hxs


class MLPBase(NNBase):
    def __init__(self, num_inputs, recurrent=False, hidden_size=64):
        super(MLPBase, self).__init__(recurrent, num_inputs, hidden_size)

        if recurrent:
            num_inputs = hidden_size

        init_ = lambda m: init(m, nn.init.orthogonal_, lambda x: nn.init.
                               constant_(x, 0), np.sqrt(2))

        self.actor = nn.Sequential(
            init_(nn.Linear(num_inputs, hidden_size)), nn.Tanh(),
            init_(nn.Linear(hidden_size, hidden_size)), nn.Tanh())

        self.critic = nn.Sequential(
            init_(nn.Linear(num_inputs, hidden_size)), nn.Tanh(),
            init_(nn.Linear(hidden_size, hidden_size)), nn.Tanh())

        self.critic_linear = init_(nn.Linear(hidden_size, 1))

        self.train()

    def forward(self, inputs, rnn_hxs, masks):
        x = inputs

        if self.is_recurrent:
            x, rnn_hxs = self._forward_gru(x, rnn_hxs, masks)

        hidden_critic = self.critic(x)
        hidden_actor = self.actor(x)

        return self.critic_linear(hidden_critic), hidden_actor, rnn_hxs


# ---- a2c_ppo_acktr/storage.py -----------------------------------------------------------------------------------

class RolloutStorage(object):
    def __init__(self, num_steps, num_processes, obs_shape, action_space,
                 recurrent_hidden_state_size, bug=None):
        self.obs = torch.zeros(num_steps + 1, num_processes, *obs_shape)
        self.recurrent_hidden_states = torch.zeros(
            num_steps + 1, num_processes, recurrent_hidden_state_size)
        self.rewards = torch.zeros(num_steps, num_processes, 1)
        self.value_preds = torch.zeros(num_steps + 1, num_processes, 1)
        self.returns = torch.zeros(num_steps + 1, num_processes, 1)
        self.action_log_probs = torch.zeros(num_steps, num_processes, 1)
        if action_space.__class__.__name__ == 'Discrete':
            action_shape = 1
        else:
            action_shape = action_space.shape[0]
        self.actions = torch.zeros(num_steps, num_processes, action_shape)
        if action_space.__class__.__name__ == 'Discrete':
            self.actions = self.actions.long()
        self.masks = torch.ones(num_steps + 1, num_processes, 1)

        # Masks that indicate whether it's a true terminal state
        # or time limit end state
        self.bad_masks = torch.ones(num_steps + 1, num_processes, 1)

        self.num_steps = num_steps
        self.step = 0
        self.bug = bug

    def to(self, device):
        self.obs = self.obs.to(device)
        self.recurrent_hidden_states = self.recurrent_hidden_states.to(device)
        self.rewards = self.rewards.to(device)
        self.value_preds = self.value_preds.to(device)
        self.returns = self.returns.to(device)
        self.action_log_probs = self.action_log_probs.to(device)
        self.actions = self.actions.to(device)
        self.masks = self.masks.to(device)
        self.bad_masks = self.bad_masks.to(device)

    def insert(self, obs, recurrent_hidden_states, actions, action_log_probs,
               value_preds, rewards, masks, bad_masks):
        self.obs[self.step + 1].copy_(obs)
        self.recurrent_hidden_states[self.step +
                                     1].copy_(recurrent_hidden_states)
        self.actions[self.step].copy_(actions)
        self.action_log_probs[self.step].copy_(action_log_probs)
        self.value_preds[self.step].copy_(value_preds)
        self.rewards[self.step].copy_(rewards)
        self.masks[self.step + 1].copy_(masks)
        self.bad_masks[self.step + 1].copy_(bad_masks)

        self.step = (self.step + 1) % self.num_steps

    def after_update(self):
        self.obs[0].copy_(self.obs[-1])
        self.recurrent_hidden_states[0].copy_(self.recurrent_hidden_states[-1])
        self.masks[0].copy_(self.masks[-1])
        self.bad_masks[0].copy_(self.bad_masks[-1])

    def compute_returns(self,
                        next_value,
                        use_gae,
                        gamma,
                        gae_lambda,
                        use_proper_time_limits=True):
        if use_proper_time_limits:
            if use_gae:
                self.value_preds[-1] = next_value
                gae = 0
                for step in reversed(range(self.rewards.size(0))):
                    delta = self.rewards[step] + gamma * self.value_preds[
                        step + 1] * self.masks[step +
                                               1] - self.value_preds[step]
                    gae = delta + gamma * gae_lambda * self.masks[step +
                                                                  1] * gae
                    gae = gae * self.bad_masks[step + 1]
                    self.returns[step] = gae + self.value_preds[step]
            else:
                self.returns[-1] = next_value
                for step in reversed(range(self.rewards.size(0))):
                    self.returns[step] = (self.returns[step + 1] * \
                        gamma * self.masks[step + 1] + self.rewards[step]) * self.bad_masks[step + 1] \
                        + (1 - self.bad_masks[step + 1]) * self.value_preds[step]
        else:
            if use_gae:
                self.value_preds[-1] = next_value
                gae = 0
                for step in reversed(range(self.rewards.size(0))):
                    delta = self.rewards[step] + gamma * self.value_preds[
                        step + 1] * self.masks[step +
                                               1] - self.value_preds[step]
                    gae = delta + gamma * gae_lambda * self.masks[step +
                                                                  1] * gae
                    self.returns[step] = gae + self.value_preds[step]
            else:
                self.returns[-1] = next_value
                for step in reversed(range(self.rewards.size(0))):
                    if self.bug == "masks_dropped_from_returns":
                        # the return bootstraps across episode ends: the done mask is left out
                        self.returns[step] = self.returns[step + 1] * \
                            gamma + self.rewards[step]
                    else:
                        self.returns[step] = self.returns[step + 1] * \
                            gamma * self.masks[step + 1] + self.rewards[step]


# ---- a2c_ppo_acktr/algo/a2c_acktr.py ----------------------------------------------------------------------------

class A2C_ACKTR():
    def __init__(self,
                 actor_critic,
                 value_loss_coef,
                 entropy_coef,
                 lr=None,
                 eps=None,
                 alpha=None,
                 max_grad_norm=None,
                 acktr=False,
                 bug=None):

        self.actor_critic = actor_critic
        self.acktr = acktr
        self.bug = bug

        self.value_loss_coef = value_loss_coef
        self.entropy_coef = entropy_coef

        self.max_grad_norm = max_grad_norm

        self.optimizer = optim.RMSprop(
            actor_critic.parameters(), lr, eps=eps, alpha=alpha)

    def update(self, rollouts):
        obs_shape = rollouts.obs.size()[2:]
        action_shape = rollouts.actions.size()[-1]
        num_steps, num_processes, _ = rollouts.rewards.size()

        values, action_log_probs, dist_entropy, _ = self.actor_critic.evaluate_actions(
            rollouts.obs[:-1].view(-1, *obs_shape),
            rollouts.recurrent_hidden_states[0].view(
                -1, self.actor_critic.recurrent_hidden_state_size),
            rollouts.masks[:-1].view(-1, 1),
            rollouts.actions.view(-1, action_shape))

        values = values.view(num_steps, num_processes, 1)
        action_log_probs = action_log_probs.view(num_steps, num_processes, 1)

        advantages = rollouts.returns[:-1] - values
        value_loss = advantages.pow(2).mean()

        if self.bug == "advantages_not_detached":
            action_loss = -(advantages * action_log_probs).mean()
        else:
            action_loss = -(advantages.detach() * action_log_probs).mean()

        self.optimizer.zero_grad()
        (value_loss * self.value_loss_coef + action_loss -
         dist_entropy * self.entropy_coef).backward()

        if self.acktr == False:
            nn.utils.clip_grad_norm_(self.actor_critic.parameters(),
                                     self.max_grad_norm)

        self.optimizer.step()

        return value_loss.item(), action_loss.item(), dist_entropy.item()


# ---- main.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")

    envs = VecCartPole(seed, num_processes, device)

    actor_critic = Policy(
        envs.observation_space.shape,
        envs.action_space,
        base_kwargs={'recurrent': recurrent_policy})
    actor_critic.to(device)

    agent = A2C_ACKTR(
        actor_critic,
        value_loss_coef,
        entropy_coef,
        lr=lr,
        eps=eps,
        alpha=alpha,
        max_grad_norm=max_grad_norm,
        bug=bug)

    rollouts = RolloutStorage(num_steps, num_processes,
                              envs.observation_space.shape, envs.action_space,
                              actor_critic.recurrent_hidden_state_size, bug=bug)

    obs = envs.reset()
    rollouts.obs[0].copy_(obs)
    rollouts.to(device)

    def collect():
        for step in range(num_steps):
            # Sample actions
            with torch.no_grad():
                value, action, action_log_prob, recurrent_hidden_states = actor_critic.act(
                    rollouts.obs[step], rollouts.recurrent_hidden_states[step],
                    rollouts.masks[step])

            # Obser reward and next obs
            obs, reward, done, infos = envs.step(action)

            # If done then clean the history of observations.
            masks = torch.FloatTensor(
                [[0.0] if done_ else [1.0] for done_ in done])
            bad_masks = torch.FloatTensor(
                [[0.0] if 'bad_transition' in info.keys() else [1.0]
                 for info in infos])
            rollouts.insert(obs, recurrent_hidden_states, action,
                            action_log_prob, value, reward, masks, bad_masks)

        with torch.no_grad():
            next_value = actor_critic.get_value(
                rollouts.obs[-1], rollouts.recurrent_hidden_states[-1],
                rollouts.masks[-1]).detach()

        rollouts.compute_returns(next_value, use_gae, gamma,
                                 gae_lambda, use_proper_time_limits)

    # (port) the first rollout is collected at build time: it is the Program's batch and the first update's data
    collect()
    state = {"collected": True}
    obs_shape = rollouts.obs.size()[2:]
    batch = ({"inputs": rollouts.obs[:-1].view(-1, *obs_shape).clone(),
              "rnn_hxs": rollouts.recurrent_hidden_states[0].view(-1, actor_critic.recurrent_hidden_state_size).clone(),
              "masks": rollouts.masks[:-1].view(-1, 1).clone(),
              "action": rollouts.actions.view(-1, 1).clone()},
             rollouts.returns[:-1].view(-1, 1).clone())

    def loss_fn(outputs, returns):
        """update()'s loss on the policy's outputs for the flattened rollout (the same lines, flat shapes)."""
        values, action_log_probs, dist_entropy, _ = outputs
        advantages = returns - values
        value_loss = advantages.pow(2).mean()
        if bug == "advantages_not_detached":
            action_loss = -(advantages * action_log_probs).mean()
        else:
            action_loss = -(advantages.detach() * action_log_probs).mean()
        return value_loss * value_loss_coef + action_loss - dist_entropy * entropy_coef

    def train_step():
        # one iteration of main()'s `for j in range(num_updates)` (without logging, evaluation, saving)
        if not state["collected"]:
            collect()
        state["collected"] = False

        value_loss, action_loss, dist_entropy = agent.update(rollouts)

        rollouts.after_update()
        return value_loss * value_loss_coef + action_loss - dist_entropy * entropy_coef

    return Program(name="a2cppoacktr_a2c", model=actor_critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the done masks are left out of the n-step returns: a return runs on into the next episode's rewards and value
    # (classic done-mask slip in compute_returns).
    Bug("masks_dropped_from_returns", functools.partial(_build, bug="masks_dropped_from_returns"), "learning_ledger",
        ("TASK",)),
    # the advantage is not detached in the policy-gradient term, so the actor loss also trains the critic (upward,
    # where the log-probabilities are negative); the update() lines this repository was asked about in
    # https://github.com/ikostrikov/pytorch-a2c-ppo-acktr-gail/issues/146.
    Bug("advantages_not_detached", functools.partial(_build, bug="advantages_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
]
