# ruff: noqa: UP004, UP031, SIM201, RUF059
"""Actor-Attention-Critic (shariqiqbal2810/MAAC) for cooperative multi-agent control: one centralized attention critic
for all agents (per-agent state-action encoders, multi-head attention of each agent's state encoding over the other
agents' encodings, per-agent Q heads over all discrete actions, shared-parameter gradients scaled by ``1/nagents``,
attention-logit regularization), soft actor-critic targets with target critic and target policies, per-agent
discrete policies updated on the counterfactual advantage ``Q - sum_a pi(a) Q(a)`` with an entropy term, the critic's
gradients disabled during the policy backward, Adam (critic with weight decay 1e-3), soft target updates with
``tau``; rewards normalized by the buffer's statistics when sampled.

Source: https://github.com/shariqiqbal2810/MAAC
Commit: 6174a01251251e6778c4ada26bc8d9cd930e3856
Files: algorithms/attention_sac.py, main.py (critics, policies, agents and misc in the helper ``_maac_lib.py``,
utils/buffer.py and the environment in the helper ``_maac_run.py``)
License: MIT (Copyright (c) 2018 Shariq Iqbal; full text in LICENSES/shariqiqbal2810-MAAC.txt)
Domain: RL, multi-agent actor-critic (MAAC: centralized attention critic, decentralized soft policies)

Kept as written: ``AttentionSAC`` (``step``, ``update_critic``, ``update_policies``, ``update_all_targets``,
``prep_training``, ``prep_rollouts``, ``init_from_env``), ``ReplayBuffer`` (push, sample with reward
normalization), main.py's loop body (per-agent observation tensors, exploring actions, push, an update cycle of
``num_updates`` critic / policy / target updates every ``steps_per_update`` steps once the buffer holds a batch) and
its defaults (episode_length 25, steps_per_update 100, num_updates 4, pol/critic hidden 128, attend_heads 4, pi_lr and
q_lr 0.001, tau 0.001, gamma 0.99, reward_scale 100).

Deviations:
- the multi-agent particle environments (``make_env``, MAAC's ``fullobs_collect_treasure`` / ``multi_speaker_listener``)
  are replaced by ``Spread``, a small particle task written here (not from the repository): 3 agents with MPE's
  discrete moves (5 one-hot actions, damping 0.25, sensitivity 5, dt 0.1), each agent rewarded by minus its distance
  to its own landmark and -1 per collision; observations are own velocity and position and the relative positions of
  the landmarks and the other agents; no terminal state. It is wrapped as a one-thread ``DummyVecEnv`` (arrays with a
  leading thread axis). The environment is the synthetic data.
- sizes for 2 CPU cores: n_rollout_threads 12 -> 1, batch_size 1024 -> 128, buffer_length 1e6 -> 1e5.
- ``np.random`` (the buffer's sampling, the environment) is a ``numpy.random.RandomState(seed)``; ``torch`` and the
  environment are seeded from ``seed`` instead of the run number; the tensorboard logger is a no-op object (the
  original always passes one; ``update_policies`` calls it unconditionally); saving and printing are left out.
- ``train_step`` is main.py's inner loop run until the next update cycle and then that cycle; it returns the cycle's
  last critic loss (``update_critic`` returns nothing); ``update_critic``'s loss lines are the Program's ``loss_fn``
  (``q_loss_from``); the Program's model is the critic called on a sample (``CriticOnSample``).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
from torch import nn
from torch.autograd import Variable
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _maac_lib import AttentionAgent, AttentionCritic, disable_gradients, enable_gradients, hard_update, soft_update
from _maac_run import ReplayBuffer, Spread, _NullLogger

MSELoss = torch.nn.MSELoss()
CONFIG = types.SimpleNamespace(n_rollout_threads=1, buffer_length=int(1e5), episode_length=25, steps_per_update=100,
                               num_updates=4, batch_size=128, pol_hidden_dim=128, critic_hidden_dim=128,
                               attend_heads=4, pi_lr=0.001, q_lr=0.001, tau=0.001, gamma=0.99, reward_scale=100.,
                               use_gpu=False)


# ---- algorithms/attention_sac.py ---------------------------------------------------------------------------------
def q_loss_from(self, critic_rets, targets, soft=True):
    """(port) ``update_critic``'s lines from the critic's returns to ``q_loss``; ``targets`` are the sample's
    rewards, next observations and dones."""
    rews, next_obs, dones = targets
    # Q loss
    next_acs = []
    next_log_pis = []
    for pi, ob in zip(self.target_policies, next_obs):
        curr_next_ac, curr_next_log_pi = pi(ob, return_log_pi=True)
        next_acs.append(curr_next_ac)
        next_log_pis.append(curr_next_log_pi)
    trgt_critic_in = list(zip(next_obs, next_acs))
    next_qs = self.target_critic(trgt_critic_in)
    q_loss = 0
    for a_i, nq, log_pi, (pq, regs) in zip(range(self.nagents), next_qs,
                                           next_log_pis, critic_rets):
        r_i = 0 if self.bug == "rewards_of_agent_0_for_all" else a_i
        target_q = (rews[r_i].view(-1, 1) +
                    self.gamma * nq *
                    (1 - dones[a_i].view(-1, 1)))
        if soft:
            target_q -= log_pi / self.reward_scale
        q_loss += MSELoss(pq, target_q.detach())
        for reg in regs:
            q_loss += reg  # regularizing attention
    return q_loss


class AttentionSAC(object):
    """Wrapper class for SAC agents with central attention critic in multi-agent task"""
    def __init__(self, agent_init_params, sa_size,
                 gamma=0.95, tau=0.01, pi_lr=0.01, q_lr=0.01,
                 reward_scale=10.,
                 pol_hidden_dim=128,
                 critic_hidden_dim=128, attend_heads=4, bug=None,
                 **kwargs):
        self.nagents = len(sa_size)

        self.agents = [AttentionAgent(lr=pi_lr,
                                      hidden_dim=pol_hidden_dim,
                                      **params)
                         for params in agent_init_params]
        self.critic = AttentionCritic(sa_size, hidden_dim=critic_hidden_dim,
                                      attend_heads=attend_heads, bug=bug)
        self.target_critic = AttentionCritic(sa_size, hidden_dim=critic_hidden_dim,
                                             attend_heads=attend_heads, bug=bug)
        hard_update(self.target_critic, self.critic)
        self.critic_optimizer = Adam(self.critic.parameters(), lr=q_lr,
                                     weight_decay=1e-3)
        self.agent_init_params = agent_init_params
        self.gamma = gamma
        self.tau = tau
        self.pi_lr = pi_lr
        self.q_lr = q_lr
        self.reward_scale = reward_scale
        self.pol_dev = 'cpu'  # device for policies
        self.critic_dev = 'cpu'  # device for critics
        self.trgt_pol_dev = 'cpu'  # device for target policies
        self.trgt_critic_dev = 'cpu'  # device for target critics
        self.niter = 0
        self.bug = bug

    @property
    def policies(self):
        return [a.policy for a in self.agents]

    @property
    def target_policies(self):
        return [a.target_policy for a in self.agents]

    def step(self, observations, explore=False):
        """Take a step forward in environment with all agents"""
        return [a.step(obs, explore=explore) for a, obs in zip(self.agents,
                                                               observations)]

    def update_critic(self, sample, soft=True, logger=None, **kwargs):
        """Update central critic for all agents"""
        obs, acs, rews, next_obs, dones = sample
        critic_in = list(zip(obs, acs))
        critic_rets = self.critic(critic_in, regularize=True,
                                  logger=logger, niter=self.niter)
        q_loss = q_loss_from(self, critic_rets, (rews, next_obs, dones), soft)
        q_loss.backward()
        self.critic.scale_shared_grads()
        grad_norm = torch.nn.utils.clip_grad_norm(
            self.critic.parameters(), 10 * self.nagents)
        self.critic_optimizer.step()
        if self.bug != "critic_zero_grad_dropped":
            self.critic_optimizer.zero_grad()

        if logger is not None:
            logger.add_scalar('losses/q_loss', q_loss, self.niter)
            logger.add_scalar('grad_norms/q', grad_norm, self.niter)
        self.niter += 1
        return q_loss

    def update_policies(self, sample, soft=True, logger=None, **kwargs):
        obs, acs, rews, next_obs, dones = sample
        samp_acs = []
        all_probs = []
        all_log_pis = []
        all_pol_regs = []

        for a_i, pi, ob in zip(range(self.nagents), self.policies, obs):
            curr_ac, probs, log_pi, pol_regs, ent = pi(
                ob, return_all_probs=True, return_log_pi=True,
                regularize=True, return_entropy=True)
            logger.add_scalar('agent%i/policy_entropy' % a_i, ent,
                              self.niter)
            samp_acs.append(curr_ac)
            all_probs.append(probs)
            all_log_pis.append(log_pi)
            all_pol_regs.append(pol_regs)

        critic_in = list(zip(obs, samp_acs))
        critic_rets = self.critic(critic_in, return_all_q=True)
        for a_i, probs, log_pi, pol_regs, (q, all_q) in zip(range(self.nagents), all_probs,
                                                            all_log_pis, all_pol_regs,
                                                            critic_rets):
            curr_agent = self.agents[a_i]
            v = (all_q * probs).sum(dim=1, keepdim=True)
            pol_target = q - v
            if soft:
                pol_loss = (log_pi * (log_pi / self.reward_scale - pol_target).detach()).mean()
            else:
                pol_loss = (log_pi * (-pol_target).detach()).mean()
            for reg in pol_regs:
                pol_loss += 1e-3 * reg  # policy regularization
            # don't want critic to accumulate gradients from policy loss
            disable_gradients(self.critic)
            pol_loss.backward()
            enable_gradients(self.critic)

            grad_norm = torch.nn.utils.clip_grad_norm(
                curr_agent.policy.parameters(), 0.5)
            curr_agent.policy_optimizer.step()
            curr_agent.policy_optimizer.zero_grad()

            if logger is not None:
                logger.add_scalar('agent%i/losses/pol_loss' % a_i,
                                  pol_loss, self.niter)
                logger.add_scalar('agent%i/grad_norms/pi' % a_i,
                                  grad_norm, self.niter)

    def update_all_targets(self):
        """Update all target networks (called after normal updates have been"""
        soft_update(self.target_critic, self.critic, self.tau)
        for a in self.agents:
            soft_update(a.target_policy, a.policy, self.tau)

    def prep_training(self, device='gpu'):
        self.critic.train()
        self.target_critic.train()
        for a in self.agents:
            a.policy.train()
            a.target_policy.train()
        if device == 'gpu':
            fn = lambda x: x.cuda()
        else:
            fn = lambda x: x.cpu()
        if not self.pol_dev == device:
            for a in self.agents:
                a.policy = fn(a.policy)
            self.pol_dev = device
        if not self.critic_dev == device:
            self.critic = fn(self.critic)
            self.critic_dev = device
        if not self.trgt_pol_dev == device:
            for a in self.agents:
                a.target_policy = fn(a.target_policy)
            self.trgt_pol_dev = device
        if not self.trgt_critic_dev == device:
            self.target_critic = fn(self.target_critic)
            self.trgt_critic_dev = device

    def prep_rollouts(self, device='cpu'):
        for a in self.agents:
            a.policy.eval()
        if device == 'gpu':
            fn = lambda x: x.cuda()
        else:
            fn = lambda x: x.cpu()
        # only need main policy for rollouts
        if not self.pol_dev == device:
            for a in self.agents:
                a.policy = fn(a.policy)
            self.pol_dev = device

    @classmethod
    def init_from_env(cls, env, gamma=0.95, tau=0.01,
                      pi_lr=0.01, q_lr=0.01,
                      reward_scale=10.,
                      pol_hidden_dim=128, critic_hidden_dim=128, attend_heads=4, bug=None,
                      **kwargs):
        """Instantiate instance of this class from multi-agent environment"""
        agent_init_params = []
        sa_size = []
        for acsp, obsp in zip(env.action_space,
                              env.observation_space):
            agent_init_params.append({'num_in_pol': obsp.shape[0],
                                      'num_out_pol': acsp.n})
            sa_size.append((obsp.shape[0], acsp.n))

        init_dict = {'gamma': gamma, 'tau': tau,
                     'pi_lr': pi_lr, 'q_lr': q_lr,
                     'reward_scale': reward_scale,
                     'pol_hidden_dim': pol_hidden_dim,
                     'critic_hidden_dim': critic_hidden_dim,
                     'attend_heads': attend_heads,
                     'agent_init_params': agent_init_params,
                     'sa_size': sa_size}
        instance = cls(bug=bug, **init_dict)
        instance.init_dict = init_dict
        return instance


class CriticOnSample(nn.Module):
    """(port) ``update_critic``'s critic call on a sample's observations and actions, for the Program (under
    ``critic.``)."""

    def __init__(self, critic):
        super().__init__()
        self.critic = critic

    def forward(self, obs, acs):
        return self.critic(list(zip(obs, acs)), regularize=True)


# ---- main.py -----------------------------------------------------------------------------------------------------
def env_step(run, model, replay_buffer, env, config):
    """(port) one iteration of ``run``'s ``for et_i in range(config.episode_length)`` loop up to the update test,
    with the episode's reset and ``prep_rollouts`` at its start."""
    if run.et_i == 0:
        run.obs = env.reset()
        model.prep_rollouts(device='cpu')
    obs = run.obs
    # rearrange observations to be per agent, and convert to torch Variable
    torch_obs = [Variable(torch.Tensor(np.vstack(obs[:, i])),
                          requires_grad=False)
                 for i in range(model.nagents)]
    # get actions as torch Variables
    torch_agent_actions = model.step(torch_obs, explore=True)
    # convert actions to numpy arrays
    agent_actions = [ac.data.numpy() for ac in torch_agent_actions]
    # rearrange actions to be per environment
    actions = [[ac[i] for ac in agent_actions] for i in range(config.n_rollout_threads)]
    next_obs, rewards, dones, infos = env.step(actions)
    replay_buffer.push(obs, agent_actions, rewards, next_obs, dones)
    run.obs = next_obs
    run.t += config.n_rollout_threads
    run.et_i = (run.et_i + 1) % config.episode_length


def update_cycle(model, replay_buffer, config, logger):
    """(port) the update block of ``run``'s loop; returns the last critic loss."""
    if config.use_gpu:
        model.prep_training(device='gpu')
    else:
        model.prep_training(device='cpu')
    for u_i in range(config.num_updates):
        sample = replay_buffer.sample(config.batch_size,
                                      to_gpu=config.use_gpu)
        q_loss = model.update_critic(sample, logger=logger)
        model.update_policies(sample, logger=logger)
        model.update_all_targets()
    model.prep_rollouts(device='cpu')
    return q_loss


def _build(seed, bug=None):
    config = CONFIG
    torch.manual_seed(seed)
    np_random = np.random.RandomState(seed)
    env = Spread(seed)
    model = AttentionSAC.init_from_env(env,
                                       tau=config.tau,
                                       pi_lr=config.pi_lr,
                                       q_lr=config.q_lr,
                                       gamma=config.gamma,
                                       pol_hidden_dim=config.pol_hidden_dim,
                                       critic_hidden_dim=config.critic_hidden_dim,
                                       attend_heads=config.attend_heads,
                                       reward_scale=config.reward_scale, bug=bug)
    replay_buffer = ReplayBuffer(config.buffer_length, model.nagents,
                                 [obsp.shape[0] for obsp in env.observation_space],
                                 [acsp.n for acsp in env.action_space], np_random)
    run, logger = types.SimpleNamespace(t=0, et_i=0, obs=None), _NullLogger()
    while len(replay_buffer) < config.batch_size:  # the steps before the first update can happen
        env_step(run, model, replay_buffer, env, config)

    def train_step():
        while True:
            env_step(run, model, replay_buffer, env, config)
            if (len(replay_buffer) >= config.batch_size and
                    (run.t % config.steps_per_update) < config.n_rollout_threads):
                return update_cycle(model, replay_buffer, config, logger)

    def loss_fn(critic_rets, targets):
        return q_loss_from(model, critic_rets, targets)

    obs, acs, rews, next_obs, dones = replay_buffer.sample(config.batch_size)
    return Program(name="maac_attention_sac", model=CriticOnSample(model.critic),
                   batch=((obs, acs), (rews, next_obs, dones)), loss_fn=loss_fn, optimizer=model.critic_optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic indexing slip: every agent's TD target uses agent 0's reward (``rews[0]`` for ``rews[a_i]``).
    Bug("rewards_of_agent_0_for_all", functools.partial(_build, bug="rewards_of_agent_0_for_all"), "learning_ledger",
        ("TASK",)),
    # classic ``max`` slip: the taken action's index read from the one-hot's maximum value (``[0]``) instead of its
    # position (``[1]``), so every agent's Q is gathered at action 1 whatever was taken.
    Bug("int_acs_from_max_values", functools.partial(_build, bug="int_acs_from_max_values"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the critic optimizer's ``zero_grad()`` (after its step) left out, so each critic step adds all past
    # critic gradients.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
