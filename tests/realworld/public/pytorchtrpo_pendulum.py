# ruff: noqa: PLR0402, UP004, UP008, RUF059
"""Trust Region Policy Optimization for continuous control from ikostrikov/pytorch-trpo: a tanh MLP Gaussian policy
with a state-independent log-std, GAE(gamma 0.995, tau 0.97) advantages, a value network fitted by scipy's L-BFGS
(25 iterations, L2 1e-3), and the natural-gradient step: conjugate gradients on the KL's Fisher-vector product
(damping 0.1), the step scaled to max KL 0.01 and a backtracking line search on the surrogate loss.

Source: https://github.com/ikostrikov/pytorch-trpo
Commit: e200eb8a23b3c7941a0091efb9750dafa4b23cbb
Files: ``main.py`` (``select_action``, ``update_params``, the episode loop), ``trpo.py`` (``conjugate_gradients``,
``linesearch``, ``trpo_step``), ``models.py`` (``Policy``, ``Value``), ``utils.py`` (``normal_log_density``,
``get_flat_params_from``, ``set_flat_params_to``, ``get_flat_grad_from``), ``running_state.py`` (``RunningStat``,
``ZFilter``)
License: MIT (Copyright (c) 2017 Ilya Kostrikov; full text in LICENSES/ikostrikov-pytorch-trpo.txt)
Domain: RL, on-policy policy gradient (TRPO: conjugate-gradient natural gradient, KL-constrained line search, GAE)

Kept as written: ``Policy`` and ``Value`` (two tanh layers of 64, the heads' weights scaled by 0.1 and biases
zeroed, ``action_log_std`` zeros), the defaults of main.py (gamma 0.995, tau 0.97, l2-reg 1e-3, max-kl 1e-2,
damping 1e-1), ``select_action`` (``torch.normal``), ``update_params`` (the backward GAE / returns recursion cut by
the masks, ``fmin_l_bfgs_b(get_value_loss, ..., maxiter=25)`` with the L2 term, advantages standardized,
``fixed_log_prob`` from the pre-step policy, the ratio surrogate, the KL to a detached copy of the policy),
``trpo_step`` / ``conjugate_gradients`` (10 iterations) / ``linesearch`` (10 backtracks, accept ratio 0.1),
``ZFilter((num_inputs,), clip=5)`` on the states, mask 0 on done, ``num_steps += (t-1)``.

Deviations from the original:
- gym's MuJoCo Reacher-v1 is replaced by the numpy ``Pendulum`` of ``_continuous_control.py`` (3 states, 1 action,
  200-step episodes, seeded); the environment is the synthetic data.
- sizes for 2 CPU cores: ``--batch-size`` 15000 -> 150 steps per iteration (one 200-step episode).
- ``torch.set_default_tensor_type('torch.DoubleTensor')`` is process-wide: here the networks are made ``.double()``
  and the tensors main.py builds with ``torch.Tensor(...)`` are float64 tensors made explicitly (same values, same
  dtype), so nothing outside this module changes. The ``backcompat`` warning switches are dropped.
- ``replay_memory.py``'s ``Memory`` (a list of ``Transition`` namedtuples zipped field-wise by ``sample``; the file
  says it was taken from another repository) is not copied: a ``Transition`` namedtuple list zipped the same way.
- the endless ``for i_episode in count(1)`` loop is not run as a whole: ``train_step`` is one iteration (a fresh batch
  of episodes and ``update_params``). ``update_params`` returns the value loss of the batch before the L-BFGS fit
  (the first ``get_value_loss`` evaluation), so the step has a loss to report; the prints of ``linesearch``,
  ``trpo_step`` and the loop are dropped. ``env.seed(seed)`` and ``torch.manual_seed(seed)`` replace seed 543.
- the Program's ``loss_fn`` is ``get_loss``'s surrogate written over the policy's output on the batch's states,
  with the batch's actions, advantages and ``fixed_log_prob`` as targets (TRPO has no optimizer: ``optimizer`` is
  None, the step sets the flat parameters).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import namedtuple

import numpy as np
import scipy.optimize
import torch
import torch.nn as nn
from torch.autograd import Variable

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

BATCH_SIZE = 150  # (port) 15000


def _T(x):
    """(port) ``torch.Tensor(x)`` under the original's DoubleTensor default."""
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


class args:  # (port) main.py's argparse defaults
    gamma = 0.995
    tau = 0.97
    l2_reg = 1e-3
    max_kl = 1e-2
    damping = 1e-1
    batch_size = BATCH_SIZE
    render = False


# models.py
class Policy(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(num_inputs, 64)
        self.affine2 = nn.Linear(64, 64)

        self.action_mean = nn.Linear(64, num_outputs)
        self.action_mean.weight.data.mul_(0.1)
        self.action_mean.bias.data.mul_(0.0)

        self.action_log_std = nn.Parameter(torch.zeros(1, num_outputs))

        self.saved_actions = []
        self.rewards = []
        self.final_value = 0

    def forward(self, x):
        x = torch.tanh(self.affine1(x))
        x = torch.tanh(self.affine2(x))

        action_mean = self.action_mean(x)
        action_log_std = self.action_log_std.expand_as(action_mean)
        action_std = torch.exp(action_log_std)

        return action_mean, action_log_std, action_std


class Value(nn.Module):
    def __init__(self, num_inputs):
        super(Value, self).__init__()
        self.affine1 = nn.Linear(num_inputs, 64)
        self.affine2 = nn.Linear(64, 64)
        self.value_head = nn.Linear(64, 1)
        self.value_head.weight.data.mul_(0.1)
        self.value_head.bias.data.mul_(0.0)

    def forward(self, x):
        x = torch.tanh(self.affine1(x))
        x = torch.tanh(self.affine2(x))

        state_values = self.value_head(x)
        return state_values


# utils.py
def normal_log_density(x, mean, log_std, std):
    var = std.pow(2)
    log_density = -(x - mean).pow(2) / (
        2 * var) - 0.5 * math.log(2 * math.pi) - log_std
    return log_density.sum(1, keepdim=True)


def _params(model, bug=None):
    # (port) trpo_step's model.parameters(); the bug leaves the log-std out, as baselines' var_list did
    if bug == "log_std_left_out":
        return [p for n, p in model.named_parameters() if n != "action_log_std"]
    return list(model.parameters())


def get_flat_params_from(model, bug=None):
    params = []
    for param in _params(model, bug):
        params.append(param.data.view(-1))

    flat_params = torch.cat(params)
    return flat_params


def set_flat_params_to(model, flat_params, bug=None):
    prev_ind = 0
    for param in _params(model, bug):
        flat_size = int(np.prod(list(param.size())))
        param.data.copy_(
            flat_params[prev_ind:prev_ind + flat_size].view(param.size()))
        prev_ind += flat_size


def get_flat_grad_from(net, grad_grad=False):
    grads = []
    for param in net.parameters():
        if grad_grad:
            grads.append(param.grad.grad.view(-1))
        else:
            grads.append(param.grad.view(-1))

    flat_grad = torch.cat(grads)
    return flat_grad


# trpo.py
def conjugate_gradients(Avp, b, nsteps, residual_tol=1e-10):
    x = torch.zeros(b.size(), dtype=torch.float64)
    r = b.clone()
    p = b.clone()
    rdotr = torch.dot(r, r)
    for i in range(nsteps):
        _Avp = Avp(p)
        alpha = rdotr / torch.dot(p, _Avp)
        x += alpha * p
        r -= alpha * _Avp
        new_rdotr = torch.dot(r, r)
        betta = new_rdotr / rdotr
        p = r + betta * p
        rdotr = new_rdotr
        if rdotr < residual_tol:
            break
    return x


def linesearch(model,
               f,
               x,
               fullstep,
               expected_improve_rate,
               max_backtracks=10,
               accept_ratio=.1,
               bug=None):
    fval = f(True).data
    for (_n_backtracks, stepfrac) in enumerate(.5**np.arange(max_backtracks)):
        xnew = x + stepfrac * fullstep
        set_flat_params_to(model, xnew, bug)
        newfval = f(True).data
        actual_improve = fval - newfval
        expected_improve = expected_improve_rate * stepfrac
        ratio = actual_improve / expected_improve

        if ratio.item() > accept_ratio and actual_improve.item() > 0:
            return True, xnew
    return False, x


def trpo_step(model, get_loss, get_kl, max_kl, damping, bug=None):
    loss = get_loss()
    grads = torch.autograd.grad(loss, _params(model, bug))
    loss_grad = torch.cat([grad.view(-1) for grad in grads]).data

    def Fvp(v):
        kl = get_kl()
        kl = kl.mean()

        grads = torch.autograd.grad(kl, _params(model, bug), create_graph=True)
        flat_grad_kl = torch.cat([grad.view(-1) for grad in grads])

        kl_v = (flat_grad_kl * Variable(v)).sum()
        grads = torch.autograd.grad(kl_v, _params(model, bug))
        flat_grad_grad_kl = torch.cat([grad.contiguous().view(-1) for grad in grads]).data

        return flat_grad_grad_kl + v * damping

    stepdir = conjugate_gradients(Fvp, -loss_grad, 10)

    shs = 0.5 * (stepdir * Fvp(stepdir)).sum(0, keepdim=True)

    lm = torch.sqrt(shs / max_kl)
    fullstep = stepdir / lm[0]

    neggdotstepdir = (-loss_grad * stepdir).sum(0, keepdim=True)

    prev_params = get_flat_params_from(model, bug)
    success, new_params = linesearch(model, get_loss, prev_params, fullstep,
                                     neggdotstepdir / lm[0], bug=bug)
    set_flat_params_to(model, new_params, bug)

    return loss


# running_state.py
class RunningStat(object):
    def __init__(self, shape):
        self._n = 0
        self._M = np.zeros(shape)
        self._S = np.zeros(shape)

    def push(self, x):
        x = np.asarray(x)
        assert x.shape == self._M.shape
        self._n += 1
        if self._n == 1:
            self._M[...] = x
        else:
            oldM = self._M.copy()
            self._M[...] = oldM + (x - oldM) / self._n
            self._S[...] = self._S + (x - oldM) * (x - self._M)

    @property
    def mean(self):
        return self._M

    @property
    def var(self):
        return self._S / (self._n - 1) if self._n > 1 else np.square(self._M)

    @property
    def std(self):
        return np.sqrt(self.var)


class ZFilter:
    """
    y = (x-mean)/std
    using running estimates of mean,std
    """

    def __init__(self, shape, demean=True, destd=True, clip=10.0):
        self.demean = demean
        self.destd = destd
        self.clip = clip

        self.rs = RunningStat(shape)

    def __call__(self, x, update=True):
        if update: self.rs.push(x)
        if self.demean:
            x = x - self.rs.mean
        if self.destd:
            x = x / (self.rs.std + 1e-8)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x


# (port) replay_memory.py's shape: transitions zipped field-wise
Transition = namedtuple('Transition', ('state', 'action', 'mask', 'next_state', 'reward'))


def surrogate(output, target):
    """(port) get_loss's surrogate on the policy's output: -A * exp(log pi(a|s) - log pi_old(a|s)), mean."""
    action_means, action_log_stds, action_stds = output
    actions, advantages, fixed_log_prob = target
    log_prob = normal_log_density(Variable(actions), action_means, action_log_stds, action_stds)
    action_loss = -Variable(advantages) * torch.exp(log_prob - Variable(fixed_log_prob))
    return action_loss.mean()


def _build(seed, bug=None):
    env = Pendulum()

    num_inputs = env.observation_space.shape[0]
    num_actions = env.action_space.shape[0]

    env.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)

    policy_net = Policy(num_inputs, num_actions).double()
    value_net = Value(num_inputs).double()
    last = {}

    def select_action(state):
        state = torch.from_numpy(state).unsqueeze(0)
        action_mean, _, action_std = policy_net(Variable(state))
        action = torch.normal(action_mean, action_std)
        return action

    def update_params(batch):
        rewards = _T(batch.reward)
        masks = _T(batch.mask)
        actions = _T(np.concatenate(batch.action, 0))
        states = _T(batch.state)
        values = value_net(Variable(states))

        returns = torch.empty(actions.size(0), 1, dtype=torch.float64)
        deltas = torch.empty(actions.size(0), 1, dtype=torch.float64)
        advantages = torch.empty(actions.size(0), 1, dtype=torch.float64)

        prev_return = 0
        prev_value = 0
        prev_advantage = 0
        for i in reversed(range(rewards.size(0))):
            if bug == "masks_dropped":
                returns[i] = rewards[i] + args.gamma * prev_return
                deltas[i] = rewards[i] + args.gamma * prev_value - values.data[i]
                advantages[i] = deltas[i] + args.gamma * args.tau * prev_advantage
            else:
                returns[i] = rewards[i] + args.gamma * prev_return * masks[i]
                deltas[i] = rewards[i] + args.gamma * prev_value * masks[i] - values.data[i]
                advantages[i] = deltas[i] + args.gamma * args.tau * prev_advantage * masks[i]

            prev_return = returns[i, 0]
            prev_value = values.data[i, 0]
            prev_advantage = advantages[i, 0]

        targets = Variable(returns)
        value_losses = []

        # Original code uses the same LBFGS to optimize the value loss
        def get_value_loss(flat_params):
            set_flat_params_to(value_net, _T(flat_params))
            for param in value_net.parameters():
                if param.grad is not None:
                    param.grad.data.fill_(0)

            values_ = value_net(Variable(states))

            value_loss = (values_ - targets).pow(2).mean()
            value_losses.append(float(value_loss.detach()))  # (port) the loss before the fit is the step's report

            # weight decay
            for param in value_net.parameters():
                value_loss += param.pow(2).sum() * args.l2_reg
            value_loss.backward()
            return (value_loss.data.double().numpy(), get_flat_grad_from(value_net).data.double().numpy())

        flat_params, _, opt_info = scipy.optimize.fmin_l_bfgs_b(
            get_value_loss, get_flat_params_from(value_net).double().numpy(), maxiter=25)
        set_flat_params_to(value_net, _T(flat_params))

        advantages = (advantages - advantages.mean()) / advantages.std()

        action_means, action_log_stds, action_stds = policy_net(Variable(states))
        fixed_log_prob = normal_log_density(Variable(actions), action_means, action_log_stds, action_stds).data.clone()

        def get_loss(volatile=False):
            if volatile:
                with torch.no_grad():
                    action_means, action_log_stds, action_stds = policy_net(Variable(states))
            else:
                action_means, action_log_stds, action_stds = policy_net(Variable(states))

            log_prob = normal_log_density(Variable(actions), action_means, action_log_stds, action_stds)
            if bug == "surrogate_sign_flipped":
                action_loss = Variable(advantages) * torch.exp(log_prob - Variable(fixed_log_prob))
            else:
                action_loss = -Variable(advantages) * torch.exp(log_prob - Variable(fixed_log_prob))
            return action_loss.mean()

        def get_kl():
            mean1, log_std1, std1 = policy_net(Variable(states))

            mean0 = Variable(mean1.data)
            log_std0 = Variable(log_std1.data)
            std0 = Variable(std1.data)
            kl = log_std1 - log_std0 + (std0.pow(2) + (mean0 - mean1).pow(2)) / (2.0 * std1.pow(2)) - 0.5
            return kl.sum(1, keepdim=True)

        last["batch"] = (states, (actions, advantages, fixed_log_prob))
        trpo_step(policy_net, get_loss, get_kl, args.max_kl, args.damping, bug=bug)
        return value_losses[0]

    running_state = ZFilter((num_inputs,), clip=5)

    def train_step():
        # one pass of `for i_episode in count(1)`
        memory = []

        num_steps = 0
        reward_batch = 0
        num_episodes = 0
        while num_steps < args.batch_size:
            state = env.reset()
            state = running_state(state)

            reward_sum = 0
            for t in range(10000):  # Don't infinite loop while learning
                action = select_action(state)
                action = action.data[0].numpy()
                next_state, reward, done, _ = env.step(action)
                reward_sum += reward

                next_state = running_state(next_state)

                mask = 1
                if done:
                    mask = 0

                memory.append(Transition(state, np.array([action]), mask, next_state, reward))

                if done:
                    break

                state = next_state
            num_steps += (t - 1)
            num_episodes += 1
            reward_batch += reward_sum

        reward_batch /= num_episodes
        batch = Transition(*zip(*memory))
        return update_params(batch)

    # the Program's batch: one rollout of the initial policy with its advantages, gathered on a copy of the state
    import copy
    saved = (copy.deepcopy(env.rng), copy.deepcopy(running_state.rs), torch.get_rng_state(),
             [p.detach().clone() for p in policy_net.parameters()], [p.detach().clone() for p in value_net.parameters()])
    train_step()
    batch = last["batch"]
    env.rng, running_state.rs = saved[0], saved[1]
    torch.set_rng_state(saved[2])
    with torch.no_grad():
        for p, q in zip(policy_net.parameters(), saved[3]):
            p.copy_(q)
        for p, q in zip(value_net.parameters(), saved[4]):
            p.copy_(q)

    def eval_fn(model, b):
        with torch.no_grad():
            return float(surrogate(model(b[0]), b[1]))

    return Program(name="pytorchtrpo_pendulum", model=policy_net, batch=batch, loss_fn=surrogate, optimizer=None,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the done masks left out of the returns / GAE recursion: returns and advantages run across episode boundaries,
    # each episode's last steps credited with the next episode's rewards (classic).
    Bug("masks_dropped", functools.partial(_build, bug="masks_dropped"), "learning_ledger", ("TASK",)),
    # get_loss without the minus: the natural-gradient step and its line search minimize the advantage-weighted
    # ratio, i.e. make the better actions less likely (classic sign slip).
    Bug("surrogate_sign_flipped", functools.partial(_build, bug="surrogate_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # trpo_step's parameter list without the log-std: the policy's exploration noise is never updated, as in
    # baselines' TRPO (https://github.com/openai/baselines/issues/262, logstd not in var_list).
    Bug("log_std_left_out", functools.partial(_build, bug="log_std_left_out"), "four_structures",
        ("action_log_std",)),
]
