# ruff: noqa: SIM102, RUF059
"""GAIL on CartPole from hcnoh/gail-pytorch: a discriminator over (state, action embedding), one Adam step per
iteration (expert pairs labelled 0, the policy's 1, BCE with logits); the cost ``-log D(s, a)`` into discounted returns
and GAE; a trust-region value step and a TRPO policy step (conjugate gradient, line search) plus causal entropy.

Source: https://github.com/hcnoh/gail-pytorch
Commit: db29ed5b7975881a815dd91244581ab3fd106054
Files: ``train.py``, ``config.json`` (``CartPole-v1``), ``models/gail.py``, ``models/nets.py``, ``utils/funcs.py``
License: MIT (Copyright (c) 2022 Hyungcheol Noh; full text in LICENSES/hcnoh-gail-pytorch.txt)
Domain: imitation learning (GAIL with TRPO, discrete actions)

Kept as written: the networks (tanh layers of 50, ``Categorical`` policy, action ``Embedding``), ``utils/funcs.py``,
``GAIL.act``, the lines of ``GAIL.train`` (expert data; per iteration rollouts, costs, returns, GAE, normalization,
the discriminator, value and TRPO steps) and CartPole-v1's config (lambda 1e-3, gammas 0.99, eps/max_kl 0.01, ...).

Deviations from the original:
- no gym: ``_cartpole.py``'s cart-pole behind gym < 0.26's ``reset``/``step`` (done at the time limit), from ``seed``;
- no binary expert checkpoint: ``Expert.act`` runs a controller ``int(theta + 0.3 theta_dot > 0)`` (500 steps up);
- sizes for 2 CPU cores: num_steps_per_iter 2000 -> 200, horizon null -> 100; the self-check runs 45 iterations
  (the discriminator's loss falls while it learns to tell the expert's pairs, then rises as the policy imitates);
- ``GAIL.train`` is a generator yielding the discriminator loss after each iteration (one ``train_step``), keeps its
  optimizer as ``self.opt_d``, and its body is split, lines as written, into ``_collect_expert``, ``_episode``,
  ``_rollouts``, ``_update_d``, ``_update_v``, ``_update_pi``; only the discrete branches are kept; prints,
  ``render`` and checkpoint saving are dropped; ``FloatTensor`` is ``torch.FloatTensor``;
- the Program: the discriminator, its optimizer, its loss on expert and initial-policy pairs (``forward`` gives
  probabilities: ``2 * binary_cross_entropy``, the two with-logits terms of the same size);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import FloatTensor
from torch.distributions import Categorical
from torch.nn import Embedding, Linear, Module, Sequential, Tanh

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

SELF_CHECK_STEPS = 45
CONFIG = {"num_iters": 200, "num_steps_per_iter": 200, "horizon": 100,  # config.json "CartPole-v1" ((port) 2000, null)
          "lambda": 1e-3, "gae_gamma": 0.99, "gae_lambda": 0.99, "epsilon": 0.01, "max_kl": 0.01, "cg_damping": 0.1,
          "normalize_advantage": True}


class GymCartPole:  # (port) gym < 0.26's interface over ``_cartpole.CartPole``
    def __init__(self, seed):
        self.env = CartPole(seed)
        self.observation_space = type("Box", (), {"high": np.full(4, np.inf, dtype=np.float32)})()
        self.action_space = type("Discrete", (), {"n": 2})()

    def reset(self):
        return self.env.reset()[0]

    def step(self, act):
        ob, rwd, done, truncated, info = self.env.step(int(act))
        return ob, rwd, done or truncated, info


# utils/funcs.py
def get_flat_grads(f, net):
    flat_grads = torch.cat([grad.view(-1) for grad in torch.autograd.grad(f, net.parameters(), create_graph=True)])
    return flat_grads


def get_flat_params(net):
    return torch.cat([param.view(-1) for param in net.parameters()])


def set_params(net, new_flat_params):
    start_idx = 0
    for param in net.parameters():
        end_idx = start_idx + np.prod(list(param.shape))
        param.data = torch.reshape(new_flat_params[start_idx:end_idx], param.shape)
        start_idx = end_idx


def conjugate_gradient(Av_func, b, max_iter=10, residual_tol=1e-10):
    x = torch.zeros_like(b)
    r = b - Av_func(x)
    p = r
    rsold = r.norm() ** 2
    for _ in range(max_iter):
        Ap = Av_func(p)
        alpha = rsold / torch.dot(p, Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rsnew = r.norm() ** 2
        if torch.sqrt(rsnew) < residual_tol:
            break
        p = r + (rsnew / rsold) * p
        rsold = rsnew
    return x


def rescale_and_linesearch(g, s, Hs, max_kl, L, kld, old_params, pi, max_iter=10, success_ratio=0.1):
    set_params(pi, old_params)
    L_old = L().detach()
    beta = torch.sqrt((2 * max_kl) / torch.dot(s, Hs))
    for _ in range(max_iter):
        new_params = old_params + beta * s
        set_params(pi, new_params)
        kld_new = kld().detach()
        L_new = L().detach()
        actual_improv = L_new - L_old
        approx_improv = torch.dot(g, beta * s)
        ratio = actual_improv / approx_improv
        if ratio > success_ratio and actual_improv > 0 and kld_new < max_kl:
            return new_params
        beta *= 0.5
    return old_params  # (port) the print of a failed line search dropped


# models/nets.py
class PolicyNetwork(Module):
    def __init__(self, state_dim, action_dim, discrete) -> None:
        super().__init__()
        self.net = Sequential(Linear(state_dim, 50), Tanh(), Linear(50, 50), Tanh(), Linear(50, 50), Tanh(), Linear(50, action_dim))
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.discrete = discrete

    def forward(self, states):
        probs = torch.softmax(self.net(states), dim=-1)  # (port) the discrete branch (CartPole)
        distb = Categorical(probs)
        return distb


class ValueNetwork(Module):
    def __init__(self, state_dim) -> None:
        super().__init__()
        self.net = Sequential(Linear(state_dim, 50), Tanh(), Linear(50, 50), Tanh(), Linear(50, 50), Tanh(), Linear(50, 1))

    def forward(self, states):
        return self.net(states)


class Discriminator(Module):
    def __init__(self, state_dim, action_dim, discrete) -> None:
        super().__init__()
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.discrete = discrete
        self.act_emb = Embedding(action_dim, state_dim)
        self.net_in_dim = 2 * state_dim
        self.net = Sequential(Linear(self.net_in_dim, 50), Tanh(), Linear(50, 50), Tanh(), Linear(50, 50), Tanh(), Linear(50, 1))

    def forward(self, states, actions):
        return torch.sigmoid(self.get_logits(states, actions))

    def get_logits(self, states, actions):
        if self.discrete:
            actions = self.act_emb(actions.long())
        sa = torch.cat([states, actions], dim=-1)
        return self.net(sa)


class Expert(Module):
    """(port) ``act`` runs a scripted controller instead of the checkpointed policy."""

    def act(self, state):
        return np.array(int(state[2] + 0.3 * state[3] > 0))


# models/gail.py
class GAIL(Module):
    def __init__(self, state_dim, action_dim, discrete, train_config=None, bug=None) -> None:
        super().__init__()
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.discrete = discrete
        self.train_config = train_config
        self.bug = bug
        self.pi = PolicyNetwork(self.state_dim, self.action_dim, self.discrete)
        self.v = ValueNetwork(self.state_dim)
        self.d = Discriminator(self.state_dim, self.action_dim, self.discrete)

    def act(self, state):
        self.pi.eval()
        state = FloatTensor(state)
        distb = self.pi(state)
        action = distb.sample().detach().cpu().numpy()
        return action

    def _collect_expert(self, env, expert, num_steps_per_iter, horizon):
        exp_rwd_iter, exp_obs, exp_acts = [], [], []
        steps = 0
        while steps < num_steps_per_iter:
            ep_obs, ep_rwds = [], []
            t, done = 0, False
            ob = env.reset()
            while not done and steps < num_steps_per_iter:
                act = expert.act(ob)
                ep_obs.append(ob)
                exp_obs.append(ob)
                exp_acts.append(act)
                ob, rwd, done, info = env.step(act)
                if self.bug == "expert_obs_after_step":
                    exp_obs[-1] = ob
                ep_rwds.append(rwd)
                t += 1
                steps += 1
                if horizon is not None:
                    if t >= horizon:
                        done = True
                        break
            if done:
                exp_rwd_iter.append(np.sum(ep_rwds))
            ep_obs = FloatTensor(np.array(ep_obs))
            ep_rwds = FloatTensor(ep_rwds)
        exp_rwd_mean = np.mean(exp_rwd_iter)
        exp_obs = FloatTensor(np.array(exp_obs))
        exp_acts = FloatTensor(np.array(exp_acts))
        return exp_rwd_mean, exp_obs, exp_acts

    def _episode(self, env, obs, acts, steps, num_steps_per_iter, horizon, gae_gamma, gae_lambda):
        ep_obs, ep_acts, ep_rwds, ep_gms, ep_lmbs = [], [], [], [], []
        t, done = 0, False
        ob = env.reset()
        while not done and steps < num_steps_per_iter:
            act = self.act(ob)
            ep_obs.append(ob)
            obs.append(ob)
            ep_acts.append(act)
            acts.append(act)
            ob, rwd, done, info = env.step(act)
            ep_rwds.append(rwd)
            ep_gms.append(gae_gamma ** t)
            ep_lmbs.append(gae_lambda ** t)
            t += 1
            steps += 1
            if horizon is not None:
                if t >= horizon:
                    done = True
                    break
        return ep_obs, ep_acts, ep_rwds, ep_gms, ep_lmbs, t, done, steps

    def _rollouts(self, env, num_steps_per_iter, horizon, gae_gamma, gae_lambda):
        rwd_iter, obs, acts, rets, advs, gms = [], [], [], [], [], []
        steps = 0
        while steps < num_steps_per_iter:
            ep_obs, ep_acts, ep_rwds, ep_gms, ep_lmbs, t, done, steps = self._episode(
                env, obs, acts, steps, num_steps_per_iter, horizon, gae_gamma, gae_lambda)
            if done:
                rwd_iter.append(np.sum(ep_rwds))
            ep_obs = FloatTensor(np.array(ep_obs))
            ep_acts = FloatTensor(np.array(ep_acts))
            ep_rwds = FloatTensor(ep_rwds)
            ep_gms = FloatTensor(ep_gms)
            ep_lmbs = FloatTensor(ep_lmbs)
            ep_costs = (-1) * torch.log(self.d(ep_obs, ep_acts)).squeeze().detach()
            ep_disc_costs = ep_gms * ep_costs
            ep_disc_rets = FloatTensor([sum(ep_disc_costs[i:]) for i in range(t)])
            ep_rets = ep_disc_rets / ep_gms
            rets.append(ep_rets)
            self.v.eval()
            curr_vals = self.v(ep_obs).detach()
            next_vals = torch.cat((self.v(ep_obs)[1:], FloatTensor([[0.]]))).detach()
            ep_deltas = ep_costs.unsqueeze(-1) + gae_gamma * next_vals - curr_vals
            ep_advs = FloatTensor([((ep_gms * ep_lmbs)[:t - j].unsqueeze(-1) * ep_deltas[j:]).sum() for j in range(t)])
            advs.append(ep_advs)
            gms.append(ep_gms)
        obs = FloatTensor(np.array(obs))
        acts = FloatTensor(np.array(acts))
        return rwd_iter, obs, acts, torch.cat(rets), torch.cat(advs), torch.cat(gms)

    def _update_d(self, exp_obs, exp_acts, obs, acts):
        opt_d = self.opt_d
        self.d.train()
        if self.bug == "sigmoid_before_bce_with_logits":
            exp_scores, nov_scores = self.d(exp_obs, exp_acts), self.d(obs, acts)
        else:
            exp_scores = self.d.get_logits(exp_obs, exp_acts)
            nov_scores = self.d.get_logits(obs, acts)
        if self.bug != "d_zero_grad_dropped":
            opt_d.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(exp_scores, torch.zeros_like(exp_scores)) \
            + torch.nn.functional.binary_cross_entropy_with_logits(nov_scores, torch.ones_like(nov_scores))
        loss.backward()
        opt_d.step()
        return loss

    def _update_v(self, obs, rets, eps):
        self.v.train()
        old_params = get_flat_params(self.v).detach()
        old_v = self.v(obs).detach()
        def constraint():
            return ((old_v - self.v(obs)) ** 2).mean()
        grad_diff = get_flat_grads(constraint(), self.v)
        def Hv(v):
            hessian = get_flat_grads(torch.dot(grad_diff, v), self.v).detach()
            return hessian
        g = get_flat_grads(((-1) * (self.v(obs).squeeze() - rets) ** 2).mean(), self.v).detach()
        s = conjugate_gradient(Hv, g).detach()
        Hs = Hv(s).detach()
        alpha = torch.sqrt(2 * eps / torch.dot(s, Hs))
        new_params = old_params + alpha * s
        set_params(self.v, new_params)

    def _update_pi(self, obs, acts, advs, gms, max_kl, cg_damping, lambda_):
        self.pi.train()
        old_params = get_flat_params(self.pi).detach()
        old_distb = self.pi(obs)
        def L():
            distb = self.pi(obs)
            return (advs * torch.exp(distb.log_prob(acts) - old_distb.log_prob(acts).detach())).mean()
        def kld():
            distb = self.pi(obs)
            old_p = old_distb.probs.detach()  # (port) the discrete branch
            p = distb.probs
            return (old_p * (torch.log(old_p) - torch.log(p))).sum(-1).mean()
        grad_kld_old_param = get_flat_grads(kld(), self.pi)
        def Hv(v):
            hessian = get_flat_grads(torch.dot(grad_kld_old_param, v), self.pi).detach()
            return hessian + cg_damping * v
        g = get_flat_grads(L(), self.pi).detach()
        s = conjugate_gradient(Hv, g).detach()
        Hs = Hv(s).detach()
        new_params = rescale_and_linesearch(g, s, Hs, max_kl, L, kld, old_params, self.pi)
        disc_causal_entropy = ((-1) * gms * self.pi(obs).log_prob(acts)).mean()
        grad_disc_causal_entropy = get_flat_grads(disc_causal_entropy, self.pi)
        new_params += lambda_ * grad_disc_causal_entropy
        set_params(self.pi, new_params)

    def train(self, env, expert, render=False):
        c = self.train_config
        num_iters, num_steps_per_iter, horizon = c["num_iters"], c["num_steps_per_iter"], c["horizon"]
        lambda_, gae_gamma, gae_lambda, eps = c["lambda"], c["gae_gamma"], c["gae_lambda"], c["epsilon"]
        max_kl, cg_damping, normalize_advantage = c["max_kl"], c["cg_damping"], c["normalize_advantage"]
        self.opt_d = torch.optim.Adam(self.d.parameters())  # (port) opt_d, kept as self.opt_d for the Program
        exp_rwd_mean, exp_obs, exp_acts = self._collect_expert(env, expert, num_steps_per_iter, horizon)
        self.expert_data = (exp_obs, exp_acts)  # (port) kept for the Program
        yield None  # (port) the build stops here, before the first iteration
        rwd_iter_means = []
        for _i in range(num_iters):
            rwd_iter, obs, acts, rets, advs, gms = self._rollouts(env, num_steps_per_iter, horizon, gae_gamma, gae_lambda)
            rwd_iter_means.append(np.mean(rwd_iter))
            if normalize_advantage:
                advs = (advs - advs.mean()) / advs.std()
            loss = self._update_d(exp_obs, exp_acts, obs, acts)
            self._update_v(obs, rets, eps)
            self._update_pi(obs, acts, advs, gms, max_kl, cg_damping, lambda_)
            yield loss.detach()  # (port) one iteration done
        return exp_rwd_mean, rwd_iter_means


def _build(seed, bug=None):
    env_name = "CartPole-v1"
    torch.manual_seed(seed), np.random.seed(seed)
    config = dict(CONFIG)
    env = GymCartPole(seed)
    env.reset()
    state_dim = len(env.observation_space.high)
    if env_name in ["CartPole-v1"]:
        discrete = True
        action_dim = env.action_space.n
    expert = Expert()
    model = GAIL(state_dim, action_dim, discrete, config, bug=bug)
    steps = model.train(env, expert)
    next(steps)
    exp_obs, exp_acts = model.expert_data
    with torch.no_grad():
        nov_obs = FloatTensor(np.array([env.reset() for _ in range(len(exp_obs))]))
        nov_acts = model.pi(nov_obs).sample().float()
    batch = ({"states": torch.cat([exp_obs, nov_obs]), "actions": torch.cat([exp_acts, nov_acts])},
             torch.cat([torch.zeros(len(exp_obs), 1), torch.ones(len(nov_obs), 1)]))

    def loss_fn(d_out, labels):
        """The discriminator's two with-logits BCE terms, on ``forward``'s probabilities."""
        return 2 * F.binary_cross_entropy(d_out, labels)

    return Program(name="hcnohgail_cartpole", model=model.d, batch=batch, loss_fn=loss_fn, optimizer=model.opt_d,
                   train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic off-by-one in the demonstrations: the expert's observation recorded after ``env.step``, so each
    # expert action is paired with the state it led to, not the state it was taken in.
    Bug("expert_obs_after_step", functools.partial(_build, bug="expert_obs_after_step"), "learning_ledger", ("TASK",)),
    # classic: the discriminator's probabilities ``self.d(...)`` (already through the sigmoid) given to
    # ``binary_cross_entropy_with_logits`` in place of ``get_logits``.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: ``opt_d.zero_grad()`` left out, so the discriminator's gradients accumulate over the iterations;
    # every discriminator parameter alike: declared by its mechanism (README rule 6).
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
