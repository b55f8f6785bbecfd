# ruff: noqa: PLR0402, UP008
"""Actor-critic on cart-pole with cherry's helpers (discounted, normalized returns; value baseline).

Source: https://github.com/seba-1511/cherry, commit f4164a53dcc762ac5ce53a761fb54f3f69847f90, files
``examples/actor_critic_cartpole.py`` (the program), ``cherry/td.py`` (``discount``), ``cherry/_torch.py``
(``normalize``), ``cherry/_utils.py`` (``_reshape_helper``), ``cherry/distributions.py`` (``Categorical``,
``ActionDistribution``). License: Apache-2.0 (full text in LICENSES/seba-1511-cherry.txt).

Kept as written: the hyperparameters (GAMMA 0.99, V_WEIGHT 0.5, Adam lr 1e-2), ``ActorCriticNet`` (affine1 4->128,
action_head, value_head, softmax probabilities into cherry's ``ActionDistribution(use_probs=True)``, i.e. its
``Categorical`` whose ``sample`` returns ``[N, 1]``), ``get_action_value`` (the sampled action, its ``log_prob`` and
the ``value`` cached in the transition's info), ``update`` as written (``discount`` over the replay's rewards and
dones, ``normalize``, per-transition ``-log_prob * (reward - value.item())`` and ``F.mse_loss(value, reward.detach())``,
zero_grad, the summed loss ``policy + V_WEIGHT * value``, backward, step), and cherry's ``discount``/``normalize``/
``Categorical`` written out line for line (``discount``'s tensor-bootstrap branch, unused here, left out;
``ActionDistribution`` keeps its discrete branch only).

Deviations:
- gym's CartPole-v0 (through cherry's ``envs.Torch``/``envs.Runner`` wrappers) is replaced by the cart-pole written
  out in ``_cartpole.py`` (same equations, seeded; episodes truncated at 500 steps instead of v0's 200); the
  ``Replay``/``Transition`` below keep only what ``update`` reads (``reward()``, ``done()``, iteration, the info
  fields ``log_prob`` and ``value``).
- the original collects one fresh episode per update (``env.run(get_action, episodes=1)``). Here the replay is
  collected once at build time with the initial policy, by cherry's other Runner mode (``steps=``: 64
  transitions, several episodes, the ``done`` flags marking their ends), and ``train_step`` replays it: it
  recomputes ``get_action_value``'s ``log_prob`` and ``value`` for the stored states and actions with the current
  network (the stored graph can be backpropagated once only) and runs ``update``.
- ``update`` returns the loss (the original returns nothing); the running-reward print and stop test are dropped.
- ``random``/``numpy``/``torch`` seeding uses ``seed`` instead of the fixed SEED 567.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch as th
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

GAMMA = 0.99
V_WEIGHT = 0.5
EPS = 1e-8
STEPS = 64


# ---- cherry/_utils.py, cherry/td.py, cherry/_torch.py -------------------------------------------------------
def _reshape_helper(tensor):
    if len(tensor.size()) == 1:
        return tensor.view(-1, 1)
    return tensor


def discount(gamma, rewards, dones, bootstrap=0.0, bug=None):
    rewards = _reshape_helper(rewards)
    dones = _reshape_helper(dones).reshape_as(rewards)
    msg = 'dones and rewards must have equal length.'
    assert rewards.size(0) == dones.size(0), msg

    R = th.zeros_like(rewards) + bootstrap
    discounted = th.zeros_like(rewards)
    length = discounted.size(0)
    for t in reversed(range(length)):
        if bug != "discount_ignores_dones":
            R = R * (1.0 - dones[t])
        R = rewards[t] + gamma * R
        discounted[t] += R[0]
    return discounted


def normalize(tensor, epsilon=EPS):
    if tensor.numel() <= 1:
        return tensor
    return (tensor - tensor.mean()) / (tensor.std() + epsilon)


# ---- cherry/distributions.py ----------------------------------------------------------------------------------
class Categorical(th.distributions.Categorical):

    def sample(self):
        samples = super(Categorical, self).sample()
        return samples.unsqueeze(-1)

    def log_prob(self, x):
        log_prob = super(Categorical, self).log_prob(x.reshape(-1))
        return log_prob.reshape_as(x)

    def mode(self):
        return self.probs.argmax(dim=-1, keepdim=True)


class ActionDistribution(nn.Module):
    """The discrete branch of cherry's ActionDistribution (cart-pole's action space is Discrete(2))."""

    def __init__(self, env, logstd=None, use_probs=False, reparam=False):
        super(ActionDistribution, self).__init__()
        self.use_probs = use_probs
        self.reparam = reparam
        self.is_discrete = True

    def forward(self, x):
        if self.use_probs:
            return Categorical(probs=x)
        return Categorical(logits=x)


# ---- examples/actor_critic_cartpole.py ----------------------------------------------------------------------
class _EnvSpec:
    state_size = 4
    action_size = 2


class ActorCriticNet(nn.Module):
    def __init__(self, env):
        super(ActorCriticNet, self).__init__()
        self.affine1 = nn.Linear(env.state_size, 128)
        self.action_head = nn.Linear(128, env.action_size)
        self.value_head = nn.Linear(128, 1)
        self.distribution = ActionDistribution(env, use_probs=True)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_scores = self.action_head(x)
        action_mass = self.distribution(F.softmax(action_scores, dim=1))
        value = self.value_head(x)
        return action_mass, value


class Transition:
    def __init__(self, state, action, reward, done, **info):
        self.state, self.action, self.reward, self.done = state, action, reward, done
        for k, v in info.items():
            setattr(self, k, v)


class Replay(list):
    def reward(self):
        return th.stack([th.as_tensor([float(t.reward)]) for t in self])

    def done(self):
        return th.stack([th.as_tensor([float(t.done)]) for t in self])


def update(replay, optimizer, bug=None):
    policy_loss = []
    value_loss = []

    # Discount and normalize rewards
    rewards = discount(GAMMA, replay.reward(), replay.done(), bug=bug)
    rewards = normalize(rewards)

    # Compute losses
    for sars, reward in zip(replay, rewards):
        log_prob = sars.log_prob
        value = sars.value
        if bug == "advantage_not_detached":
            policy_loss.append(-log_prob * (reward - value))
        else:
            policy_loss.append(-log_prob * (reward - value.item()))
        value_loss.append(F.mse_loss(value, reward.detach()))

    # Take optimization step
    optimizer.zero_grad()
    loss = th.stack(policy_loss).sum() + V_WEIGHT * th.stack(value_loss).sum()
    loss.backward()
    optimizer.step()
    return loss


def get_action_value(state, policy):
    mass, value = policy(state)
    action = mass.sample()
    info = {
        'log_prob': mass.log_prob(action),  # Cache log_prob for later
        'value': value
    }
    return action, info


def collect(policy, seed, steps=STEPS):
    """cherry's ``env.run(get_action, steps=...)``: transitions from consecutive episodes, reset after each end."""
    env = CartPole(seed)
    replay = Replay()
    state, _ = env.reset()
    with th.no_grad():
        while len(replay) < steps:
            s = th.from_numpy(state).float().unsqueeze(0)
            action, _info = get_action_value(s, policy)
            next_state, reward, done, truncated, _ = env.step(int(action.item()))
            replay.append(Transition(s, action, reward, done or truncated))
            state = next_state
            if done or truncated:
                state, _ = env.reset()
    return replay


def _build(seed, bug=None):
    th.manual_seed(seed)
    env = _EnvSpec()
    policy = ActorCriticNet(env)
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    stored = collect(policy, seed)

    states = th.cat([t.state for t in stored])
    actions = th.cat([t.action for t in stored])
    rewards, dones = stored.reward(), stored.done()
    batch = (states, (actions, rewards, dones))

    def loss_fn(outputs, targets):
        mass, values = outputs
        actions, rewards, dones = targets
        returns = normalize(discount(GAMMA, rewards, dones, bug=bug))
        log_probs = mass.log_prob(actions)
        if bug == "advantage_not_detached":
            policy_loss = -log_probs * (returns - values)
        else:
            policy_loss = -log_probs * (returns - values.detach())
        value_loss = (values - returns.detach()) ** 2
        return policy_loss.sum() + V_WEIGHT * value_loss.sum()

    def train_step():
        replay = Replay()
        for t in stored:
            mass, value = policy(t.state)
            replay.append(Transition(t.state, t.action, t.reward, t.done,
                                     log_prob=mass.log_prob(t.action), value=value))
        return update(replay, optimizer, bug)

    return Program(name="cherry_actor_critic", model=policy, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the advantage keeps the critic's graph: ``reward - value`` for ``reward - value.item()``, so the policy term
    # also pushes the value head (to raise V where log-probs are high), against its regression (classic).
    Bug("advantage_not_detached", functools.partial(_build, bug="advantage_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``discount`` without ``R = R * (1.0 - dones[t])``: each return runs on into the next episode's rewards, so
    # the critic's targets and the policy's weights are sums across episode boundaries (classic).
    Bug("discount_ignores_dones", functools.partial(_build, bug="discount_ignores_dones"), "learning_ledger",
        ("TASK",)),
]
