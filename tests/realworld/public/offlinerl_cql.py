# ruff: noqa: B006, C408, RUF059
"""Conservative Q-Learning (CQL, continuous actions) from polixir's OfflineRL, on a fixed pendulum dataset.

Source: https://github.com/polixir/OfflineRL, commit a7db458e5f8f44421de5c2e8fd61c6285b571220, files
``offlinerl/algo/modelfree/cql.py`` (``algo_init``, ``AlgoTrainer``: ``forward``, ``_get_tensor_values``,
``_get_policy_actions``, ``_train``, ``train``), ``offlinerl/config/algo/cql_config.py`` (the hyperparameters),
``offlinerl/utils/net/common.py`` (``miniblock``, ``Net``), ``offlinerl/utils/net/continuous.py`` (``Critic``,
``ActorProb.__init__``), ``offlinerl/utils/net/tanhpolicy.py`` (``TanhNormal``, ``TanhGaussianPolicy``),
``offlinerl/algo/base.py`` (``_sync_weight``). License: Apache-2.0 (full text in LICENSES/polixir-OfflineRL.txt).

Kept as written: the networks (``Net`` MLPs with ReLU miniblocks, layer_num 2; the tanh-Gaussian actor with a
state-conditioned, clamped log-std; twin critics on the concatenated state and action, soft-updated copies), the
configuration (actor_lr 1e-4, critic_lr 3e-4, automatic entropy tuning, discount 0.99, soft_target_tau 5e-3,
reward_scale 1, explore 1.0, temp 1.0, min_q_version 3 (importance-sampled logsumexp over random, current-policy
and next-policy actions), min_q_weight 5.0, lagrange_thresh 2.0 (so the Lagrange multiplier alpha_prime is
trained), num_random 10, type_q_backup "min"), and ``_train`` as written: the alpha loss and step, the policy loss
(behaviour cloning by the actor's ``log_prob`` for the first ``policy_bc_steps`` steps, then ``alpha * log_pi -
min Q``), the TD target from the target critics, the CQL penalty, the alpha_prime step (``backward(retain_graph=
True)``), the two critic steps, the soft target updates; ``train``'s sampling of one batch per step.

Deviations:
- the D4RL Hopper-v3 "low" dataset is replaced by a fixed offline dataset made at build time from the pendulum of
  ``_continuous_control.py``: 8 episodes of 200 steps of a noisy damping controller (actions in [-1, 1], scaled by
  the maximum torque in the environment), with ``done`` 0 (the pendulum only has time-limit ends, which D4RL keeps
  out of ``terminals``); the buffer's ``sample`` draws with replacement from a seeded ``numpy`` generator.
- sizes for 2 CPU cores: batch_size 256 -> 64, hidden_layer_size 256 -> 64, policy_bc_steps 40000 -> 10 (so that a
  few dozen steps see both policy losses; the original's 40000 of 300000 steps are behaviour cloning).
- logging (loguru), ``callback_fn`` evaluation and the epoch loop are left out; ``_train`` returns qf1_loss so the
  step can report it; ``setup_seed`` uses ``seed``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.distributions import Distribution, Normal

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

ARGS = dict(
    seed=42, device="cpu", obs_shape=(3,), action_shape=(1,),
    policy_bc_steps=10, batch_size=64, hidden_layer_size=64, layer_num=2,
    actor_lr=1E-4, critic_lr=3E-4, reward_scale=1, use_automatic_entropy_tuning=True, target_entropy=None,
    discount=0.99, soft_target_tau=5e-3,
    explore=1.0, temp=1.0, min_q_version=3, min_q_weight=5.0,
    with_lagrange=False, lagrange_thresh=2.0,
    num_random=10, type_q_backup="min", q_backup_lmbda=0.75, deterministic_backup=False,
    discrete=False,
)
EPISODES = 8


# ---- offlinerl/utils/net ------------------------------------------------------------------------------------
def miniblock(inp, oup, norm_layer, relu=True):
    """Construct a miniblock with given input/output-size and norm layer."""
    ret = [nn.Linear(inp, oup)]
    if norm_layer is not None:
        ret += [norm_layer(oup)]
    if relu:
        ret += [nn.ReLU(inplace=True)]
    else:
        ret += [nn.Tanh()]
    return ret


class Net(nn.Module):
    def __init__(self, layer_num, state_shape, action_shape=0, softmax=False, concat=False,
                 hidden_layer_size=128, output_shape=0, dueling=None, norm_layer=None):
        super().__init__()
        self.dueling = dueling
        self.softmax = softmax
        self.output_shape = output_shape
        input_size = np.prod(state_shape)
        if concat:
            input_size += np.prod(action_shape)

        model = miniblock(int(input_size), hidden_layer_size, norm_layer)

        for i in range(layer_num):
            model += miniblock(
                hidden_layer_size, hidden_layer_size, norm_layer)

        if action_shape and not concat:
            model += [nn.Linear(hidden_layer_size, int(np.prod(action_shape)))]
        if self.output_shape:
            model += [nn.Linear(hidden_layer_size, output_shape)]
        self.model = nn.Sequential(*model)

    def forward(self, s, state=None, info={}):
        """Mapping: s -> flatten -> logits."""
        s = s.reshape(s.size(0), -1)
        logits = self.model(s)
        if self.softmax:
            logits = torch.softmax(logits, dim=-1)
        return logits, state


class Critic(nn.Module):
    def __init__(self, preprocess_net, hidden_layer_size=128):
        super().__init__()
        self.preprocess = preprocess_net
        self.last = nn.Linear(hidden_layer_size, 1)

    def forward(self, s, a=None, info={}):
        """Mapping: (s, a) -> logits -> Q(s, a)."""
        s = s.flatten(1)
        if a is not None:
            if isinstance(a, np.ndarray):
                a = torch.as_tensor(a)
            a = a.to(s)
            a = a.flatten(1)
            s = torch.cat([s, a], dim=1)
        logits, h = self.preprocess(s)
        logits = self.last(logits)
        return logits


class ActorProb(nn.Module):
    def __init__(self, preprocess_net, action_shape, max_action=1.0, unbounded=False, hidden_layer_size=128,
                 conditioned_sigma=False):
        super().__init__()
        self.preprocess = preprocess_net
        self.mu = nn.Linear(hidden_layer_size, int(np.prod(action_shape)))
        self._c_sigma = conditioned_sigma
        if conditioned_sigma:
            self.sigma = nn.Linear(hidden_layer_size, int(np.prod(action_shape)))
        else:
            self.sigma = nn.Parameter(torch.zeros(int(np.prod(action_shape)), 1))
        self._max = max_action
        self._unbounded = unbounded


class TanhNormal(Distribution):
    def __init__(self, normal_mean, normal_std, max_action=1, min_action=-1, epsilon=1e-6):
        self.normal_mean = normal_mean
        self.normal_std = normal_std
        self.normal = Normal(normal_mean, normal_std)
        self.epsilon = epsilon
        self.max_action = max_action
        self.min_action = min_action

    def atanh(self, x):
        one_plus_x = (1 + x).clamp(min=1e-6)
        one_minus_x = (1 - x).clamp(min=1e-6)
        return 0.5 * torch.log(one_plus_x / one_minus_x)

    @property
    def mode(self):
        return torch.tanh(self.normal_mean)

    def log_prob(self, value, pre_tanh_value=None):
        unscaled_value = (2*value - (self.max_action+self.min_action))/(self.max_action - self.min_action)
        if pre_tanh_value is None:
            pre_tanh_value = self.atanh(unscaled_value)  # get the raw Gaussian distribution output
        action_scale = (self.max_action-self.min_action)/2.0
        squashed_action = unscaled_value
        log_prob = self.normal.log_prob(pre_tanh_value) - torch.log(
            action_scale * (1 - squashed_action.pow(2)) + self.epsilon)
        return log_prob

    def sample(self, return_pretanh_value=False):
        z = self.normal.sample().detach()
        if return_pretanh_value:
            return (self.max_action-self.min_action)/2*torch.tanh(z)+(self.max_action+self.min_action)/2, z
        else:
            return (self.max_action-self.min_action)/2*torch.tanh(z)+(self.max_action+self.min_action)/2

    def rsample(self, return_pretanh_value=False):
        z = (
            self.normal_mean +
            self.normal_std *
            Normal(
                torch.zeros(self.normal_mean.size(), device=self.normal_mean.device),
                torch.ones(self.normal_std.size(), device=self.normal_mean.device)
            ).sample()
        )
        z.requires_grad_()
        if return_pretanh_value:
            return (self.max_action-self.min_action)/2*torch.tanh(z)+(self.max_action+self.min_action)/2, z
        else:
            return (self.max_action-self.min_action)/2*torch.tanh(z)+(self.max_action+self.min_action)/2


class TanhGaussianPolicy(ActorProb):
    LOG_SIG_MAX = 2
    LOG_SIG_MIN = -5
    MEAN_MIN = -9.0
    MEAN_MAX = 9.0

    def atanh(self, x):
        one_plus_x = (1 + x).clamp(min=1e-6)
        one_minus_x = (1 - x).clamp(min=1e-6)
        return 0.5*torch.log(one_plus_x / one_minus_x)

    def log_prob(self, obs, actions):
        raw_actions = self.atanh(actions)
        logits, h = self.preprocess(obs)
        mean = self.mu(logits)
        mean = torch.clamp(mean, self.MEAN_MIN, self.MEAN_MAX)
        if self._c_sigma:
            log_std = torch.clamp(
                self.sigma(logits), min=self.LOG_SIG_MIN, max=self.LOG_SIG_MAX
            )
            std = log_std.exp()
        else:
            shape = [1] * len(mean.shape)
            shape[1] = -1
            log_std = (self.sigma.view(shape) + torch.zeros_like(mean))
            std = log_std.exp()
        tanh_normal = TanhNormal(mean, std)
        log_prob = tanh_normal.log_prob(value=actions, pre_tanh_value=raw_actions)
        return log_prob.sum(-1)

    def forward(self, obs, state=None, infor={}, reparameterize=True):
        logits, h = self.preprocess(obs, state)
        mean = self.mu(logits)
        if self._c_sigma:
            log_std = torch.clamp(
                self.sigma(logits), min=self.LOG_SIG_MIN, max=self.LOG_SIG_MAX
            )
            std = log_std.exp()
        else:
            shape = [1] * len(mean.shape)
            shape[1] = -1
            log_std = (self.sigma.view(shape) + torch.zeros_like(mean))
            std = log_std.exp()
        return TanhNormal(mean, std)


# ---- offlinerl/algo/modelfree/cql.py ------------------------------------------------------------------------
def algo_init(args):
    torch.manual_seed(args['seed'])
    obs_shape, action_shape = args["obs_shape"], args["action_shape"]

    net_a = Net(layer_num=args['layer_num'],
                state_shape=obs_shape,
                hidden_layer_size=args['hidden_layer_size'])

    actor = TanhGaussianPolicy(preprocess_net=net_a,
                               action_shape=action_shape,
                               hidden_layer_size=args['hidden_layer_size'],
                               conditioned_sigma=True,
                               ).to(args['device'])

    actor_optim = optim.Adam(actor.parameters(), lr=args['actor_lr'])

    net_c1 = Net(layer_num=args['layer_num'],
                 state_shape=obs_shape,
                 action_shape=action_shape,
                 concat=True,
                 hidden_layer_size=args['hidden_layer_size'])
    critic1 = Critic(preprocess_net=net_c1,
                     hidden_layer_size=args['hidden_layer_size'],
                     ).to(args['device'])
    critic1_optim = optim.Adam(critic1.parameters(), lr=args['critic_lr'])

    net_c2 = Net(layer_num=args['layer_num'],
                 state_shape=obs_shape,
                 action_shape=action_shape,
                 concat=True,
                 hidden_layer_size=args['hidden_layer_size'])
    critic2 = Critic(preprocess_net=net_c2,
                     hidden_layer_size=args['hidden_layer_size'],
                     ).to(args['device'])
    critic2_optim = optim.Adam(critic2.parameters(), lr=args['critic_lr'])

    if args["use_automatic_entropy_tuning"]:
        if args["target_entropy"]:
            target_entropy = args["target_entropy"]
        else:
            target_entropy = -np.prod(args["action_shape"]).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=args['device'])
        alpha_optimizer = optim.Adam(
            [log_alpha],
            lr=args["actor_lr"],
        )

    nets = {
        "actor": {"net": actor, "opt": actor_optim},
        "critic1": {"net": critic1, "opt": critic1_optim},
        "critic2": {"net": critic2, "opt": critic2_optim},
        "log_alpha": {"net": log_alpha, "opt": alpha_optimizer, "target_entropy": target_entropy},
    }

    if args["lagrange_thresh"] >= 0:
        log_alpha_prime = torch.zeros(1, requires_grad=True, device=args['device'])
        alpha_prime_optimizer = optim.Adam(
            [log_alpha_prime],
            lr=args["critic_lr"],
        )

        nets.update({"log_alpha_prime": {"net": log_alpha_prime, "opt": alpha_prime_optimizer}})

    return nets


class AlgoTrainer:
    def __init__(self, algo_init, args, bug=None):
        self.args = args
        self.bug = bug

        self.actor = algo_init["actor"]["net"]
        self.actor_opt = algo_init["actor"]["opt"]

        self.critic1 = algo_init["critic1"]["net"]
        self.critic1_opt = algo_init["critic1"]["opt"]
        self.critic2 = algo_init["critic2"]["net"]
        self.critic2_opt = algo_init["critic2"]["opt"]
        self.critic1_target = copy.deepcopy(self.critic1)
        self.critic2_target = copy.deepcopy(self.critic2)

        if args["use_automatic_entropy_tuning"]:
            self.log_alpha = algo_init["log_alpha"]["net"]
            self.alpha_opt = algo_init["log_alpha"]["opt"]
            self.target_entropy = algo_init["log_alpha"]["target_entropy"]

        if self.args["lagrange_thresh"] >= 0:
            self.log_alpha_prime = algo_init["log_alpha_prime"]["net"]
            self.alpha_prime_opt = algo_init["log_alpha_prime"]["opt"]

        self.critic_criterion = nn.MSELoss()

        self._n_train_steps_total = 0
        self._current_epoch = 0

    def _sync_weight(self, net_target, net, soft_target_tau=5e-3):
        for o, n in zip(net_target.parameters(), net.parameters()):
            o.data.copy_(o.data * (1.0 - soft_target_tau) + n.data * soft_target_tau)

    def _get_tensor_values(self, obs, actions, network):
        action_shape = actions.shape[0]
        obs_shape = obs.shape[0]
        num_repeat = int(action_shape / obs_shape)
        obs_temp = obs.unsqueeze(1).repeat(1, num_repeat, 1).view(obs.shape[0] * num_repeat, obs.shape[1])
        preds = network(obs_temp, actions)
        preds = preds.view(obs.shape[0], num_repeat, 1)
        return preds

    def _get_policy_actions(self, obs, num_actions, network=None):
        obs_temp = obs.unsqueeze(1).repeat(1, num_actions, 1).view(obs.shape[0] * num_actions, obs.shape[1])
        new_obs_actions, new_obs_log_pi = network(
            obs_temp, reparameterize=True, return_log_prob=True,
        )
        if not self.args["discrete"]:
            return new_obs_actions, new_obs_log_pi.view(obs.shape[0], num_actions, 1)
        else:
            return new_obs_actions

    def forward(self, obs, reparameterize=True, return_log_prob=True):
        log_prob = None
        tanh_normal = self.actor(obs, reparameterize=reparameterize,)

        if return_log_prob:
            if reparameterize is True:
                action, pre_tanh_value = tanh_normal.rsample(
                    return_pretanh_value=True
                )
            else:
                action, pre_tanh_value = tanh_normal.sample(
                    return_pretanh_value=True
                )
            log_prob = tanh_normal.log_prob(
                action,
                pre_tanh_value=pre_tanh_value
            )
            log_prob = log_prob.sum(dim=1, keepdim=True)
        else:
            if reparameterize is True:
                action = tanh_normal.rsample()
            else:
                action = tanh_normal.sample()
        return action, log_prob

    def critic_losses(self, q1_pred, q2_pred, obs, actions, rewards, terminals, next_obs, alpha):
        """The QF-loss lines of ``_train`` (moved into a method so that ``loss_fn`` runs the same lines)."""
        if self.bug == "next_obs_is_obs":
            next_obs = obs
        new_next_actions, new_log_pi = self.forward(
            next_obs, reparameterize=True, return_log_prob=True,
        )
        new_curr_actions, new_curr_log_pi = self.forward(
            obs, reparameterize=True, return_log_prob=True,
        )

        if self.args["type_q_backup"] == "min":
            target_q_values = torch.min(
                self.critic1_target(next_obs, new_next_actions),
                self.critic2_target(next_obs, new_next_actions),
            )
            target_q_values = target_q_values - alpha * new_log_pi
        else:
            raise NotImplementedError("only the configured type_q_backup 'min' is ported")

        q_target = self.args["reward_scale"] * rewards + (1. - terminals) * self.args["discount"] * \
            target_q_values.detach()

        qf1_loss = self.critic_criterion(q1_pred, q_target)
        qf2_loss = self.critic_criterion(q2_pred, q_target)

        # add CQL
        random_actions_tensor = torch.FloatTensor(q2_pred.shape[0] * self.args["num_random"],
                                                  actions.shape[-1]).uniform_(-1, 1).to(self.args["device"])
        curr_actions_tensor, curr_log_pis = self._get_policy_actions(obs, num_actions=self.args["num_random"],
                                                                     network=self.forward)
        new_curr_actions_tensor, new_log_pis = self._get_policy_actions(next_obs, num_actions=self.args["num_random"],
                                                                        network=self.forward)
        q1_rand = self._get_tensor_values(obs, random_actions_tensor, network=self.critic1)
        q2_rand = self._get_tensor_values(obs, random_actions_tensor, network=self.critic2)
        q1_curr_actions = self._get_tensor_values(obs, curr_actions_tensor, network=self.critic1)
        q2_curr_actions = self._get_tensor_values(obs, curr_actions_tensor, network=self.critic2)
        q1_next_actions = self._get_tensor_values(obs, new_curr_actions_tensor, network=self.critic1)
        q2_next_actions = self._get_tensor_values(obs, new_curr_actions_tensor, network=self.critic2)

        cat_q1 = torch.cat([q1_rand, q1_pred.unsqueeze(1), q1_next_actions, q1_curr_actions], 1)
        cat_q2 = torch.cat([q2_rand, q2_pred.unsqueeze(1), q2_next_actions, q2_curr_actions], 1)

        if self.args["min_q_version"] == 3:
            # importance sammpled version
            random_density = np.log(0.5 ** curr_actions_tensor.shape[-1])
            cat_q1 = torch.cat(
                [q1_rand - random_density, q1_next_actions - new_log_pis.detach(),
                 q1_curr_actions - curr_log_pis.detach()], 1
            )
            cat_q2 = torch.cat(
                [q2_rand - random_density, q2_next_actions - new_log_pis.detach(),
                 q2_curr_actions - curr_log_pis.detach()], 1
            )

        lse_dim = 0 if self.bug == "logsumexp_over_batch" else 1
        min_qf1_loss = torch.logsumexp(cat_q1 / self.args["temp"], dim=lse_dim,).mean() * \
            self.args["min_q_weight"] * self.args["temp"]
        min_qf2_loss = torch.logsumexp(cat_q2 / self.args["temp"], dim=lse_dim,).mean() * \
            self.args["min_q_weight"] * self.args["temp"]

        """Subtract the log likelihood of data"""
        min_qf1_loss = min_qf1_loss - q1_pred.mean() * self.args["min_q_weight"]
        min_qf2_loss = min_qf2_loss - q2_pred.mean() * self.args["min_q_weight"]
        return qf1_loss, qf2_loss, min_qf1_loss, min_qf2_loss

    def _train(self, batch):
        self._current_epoch += 1
        rewards = batch["rew"]
        terminals = batch["done"]
        obs = batch["obs"]
        actions = batch["act"]
        next_obs = batch["obs_next"]

        """
        Policy and Alpha Loss
        """
        new_obs_actions, log_pi = self.forward(obs)

        if self.args["use_automatic_entropy_tuning"]:
            alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
            self.alpha_opt.zero_grad()
            alpha_loss.backward()
            self.alpha_opt.step()
            alpha = self.log_alpha.exp()
        else:
            alpha_loss = 0
            alpha = 1

        if self._current_epoch < self.args["policy_bc_steps"]:
            """
            For the initial few epochs, try doing behaivoral cloning, if needed
            conventionally, there's not much difference in performance with having 20k
            gradient steps here, or not having it
            """
            policy_log_prob = self.actor.log_prob(obs, actions)
            policy_loss = (alpha * log_pi - policy_log_prob).mean()
        else:
            q_new_actions = torch.min(
                self.critic1(obs, new_obs_actions),
                self.critic2(obs, new_obs_actions),
            )

            policy_loss = (alpha*log_pi - q_new_actions).mean()
        self.actor_opt.zero_grad()
        policy_loss.backward()
        self.actor_opt.step()

        """
        QF Loss
        """
        q1_pred = self.critic1(obs, actions)
        q2_pred = self.critic2(obs, actions)

        qf1_loss, qf2_loss, min_qf1_loss, min_qf2_loss = self.critic_losses(
            q1_pred, q2_pred, obs, actions, rewards, terminals, next_obs, alpha)

        if self.args["lagrange_thresh"] >= 0:
            alpha_prime = torch.clamp(self.log_alpha_prime.exp(), min=0.0, max=1000000.0)
            min_qf1_loss = alpha_prime * (min_qf1_loss - self.args["lagrange_thresh"])
            min_qf2_loss = alpha_prime * (min_qf2_loss - self.args["lagrange_thresh"])

            self.alpha_prime_opt.zero_grad()
            alpha_prime_loss = (-min_qf1_loss - min_qf2_loss)*0.5
            alpha_prime_loss.backward(retain_graph=True)
            self.alpha_prime_opt.step()

        qf1_loss = self.args["explore"]*qf1_loss + (2-self.args["explore"])*min_qf1_loss
        qf2_loss = self.args["explore"]*qf2_loss + (2-self.args["explore"])*min_qf2_loss

        """
        Update critic networks
        """
        self.critic1_opt.zero_grad()
        qf1_loss.backward(retain_graph=True)
        self.critic1_opt.step()

        self.critic2_opt.zero_grad()
        qf2_loss.backward()
        self.critic2_opt.step()

        """
        Soft Updates target network
        """
        self._sync_weight(self.critic1_target, self.critic1, self.args["soft_target_tau"])
        self._sync_weight(self.critic2_target, self.critic2, self.args["soft_target_tau"])

        self._n_train_steps_total += 1
        return qf1_loss


def make_dataset(seed, episodes=EPISODES):
    """The offline dataset: a noisy damping controller on the pendulum (actions in [-1, 1])."""
    env = Pendulum()
    env.seed(seed)
    rng = np.random.default_rng(seed + 1)
    obs_l, act_l, rew_l, next_l, done_l = [], [], [], [], []
    for _ in range(episodes):
        obs = env.reset()
        done = False
        while not done:
            thdot = obs[2]
            push = math.copysign(1.0, thdot) if obs[0] < 0 else -0.5 * thdot  # pump energy below, damp above
            a = np.clip(np.array([push + 0.5 * rng.standard_normal()], dtype=np.float32), -0.999, 0.999)
            next_obs, reward, done, _ = env.step(a * env.MAX_TORQUE)
            obs_l.append(obs)
            act_l.append(a)
            rew_l.append([reward])
            next_l.append(next_obs)
            done_l.append([0.0])  # time-limit ends are not terminals
            obs = next_obs
    def as_t(x):
        return torch.as_tensor(np.array(x, dtype=np.float32))
    return {"obs": as_t(obs_l), "act": as_t(act_l), "rew": as_t(rew_l), "obs_next": as_t(next_l),
            "done": as_t(done_l)}


def _build(seed, bug=None):
    args = dict(ARGS, seed=seed)
    nets = algo_init(args)
    trainer = AlgoTrainer(nets, args, bug=bug)
    data = make_dataset(seed)
    rng = np.random.default_rng(seed)
    n = data["obs"].shape[0]

    def sample(batch_size):
        idx = torch.as_tensor(rng.integers(0, n, size=batch_size))
        return {k: v[idx] for k, v in data.items()}

    first = sample(args["batch_size"])
    batch = ({"s": first["obs"], "a": first["act"]}, (first["rew"], first["done"], first["obs_next"]))

    def loss_fn(q1_pred, targets):
        """``_train``'s qf1_loss on critic1's outputs for ``batch`` (the same lines, alpha' at its current value)."""
        rewards, terminals, next_obs = targets
        obs, actions = first["obs"], first["act"]
        alpha = trainer.log_alpha.exp().detach()
        with torch.no_grad():
            q2_pred = trainer.critic2(obs, actions)
        qf1_loss, _, min_qf1_loss, _ = trainer.critic_losses(q1_pred, q2_pred, obs, actions, rewards, terminals,
                                                             next_obs, alpha)
        alpha_prime = torch.clamp(trainer.log_alpha_prime.exp(), min=0.0, max=1000000.0).detach()
        min_qf1_loss = alpha_prime * (min_qf1_loss - args["lagrange_thresh"])
        return args["explore"] * qf1_loss + (2 - args["explore"]) * min_qf1_loss

    def train_step():
        train_data = sample(args["batch_size"])
        return trainer._train(train_data)

    return Program(name="offlinerl_cql", model=trainer.critic1, batch=batch, loss_fn=loss_fn,
                   optimizer=trainer.critic1_opt, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the CQL penalty's logsumexp taken over dim 0, the batch, instead of dim 1, the sampled actions (classic wrong
    # axis): the soft maximum runs over the states of the batch for each action sample, so it no longer pushes
    # down each state's out-of-distribution actions against its own data action.
    Bug("logsumexp_over_batch", functools.partial(_build, bug="logsumexp_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``obs`` where the QF-loss lines read ``obs_next`` (classic copy-paste slip): the TD target bootstraps from the
    # current state, Q(s, a) is regressed on r + gamma * V(s), and the learned values no longer follow the
    # dataset's transitions (the CQL term's next-policy actions are drawn at ``obs`` as well).
    Bug("next_obs_is_obs", functools.partial(_build, bug="next_obs_is_obs"), "learning_ledger", ("TASK",)),
]
