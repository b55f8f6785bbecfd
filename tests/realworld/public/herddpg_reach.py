# ruff: noqa: RUF059
"""DDPG with hindsight experience replay (TianhongDai/hindsight-experience-replay) on a goal-reaching task: actor and
critic of three 256-unit layers on [observation, goal] normalized by running statistics (clipped at 5), target
networks with polyak averaging, episodes stored whole and transitions sampled with the 'future' strategy
(``replay_k`` 4: four in five goals replaced by a later achieved goal, the reward recomputed by the environment's
``compute_reward``), the TD target clipped to ``[-1 / (1 - gamma), 0]``, the actor trained on ``-Q`` plus an action L2
penalty, exploration by Gaussian noise and random actions.

Source: https://github.com/TianhongDai/hindsight-experience-replay
Commit: fff9994cfcca78421136c0634c4df2e6ff9bd791
Files: rl_modules/ddpg_agent.py, arguments.py, train.py (models.py, replay_buffer.py, her.py and normalizer.py in
the helper ``_herddpg_lib.py``)
License: MIT (Copyright (c) 2019 Tianhong Dai; full text in LICENSES/TianhongDai-hindsight-experience-replay.txt)
Domain: RL, goal-conditioned off-policy actor-critic (DDPG + HER)

Kept as written: ``ddpg_agent``'s ``learn`` cycle body (``num_rollouts_per_mpi`` 2 rollouts of ``max_timesteps``,
``store_episode``, ``_update_normalizer``, ``n_batches`` updates, soft updates of both targets), ``_preproc_inputs``,
``_select_actions``, ``_update_normalizer``, ``_preproc_og``, ``_soft_update_target_network``, ``_update_network``;
arguments.py's defaults (replay_k 4, noise_eps 0.2, random_eps 0.3, batch_size 256, gamma 0.98, action_l2 1, both lrs
0.001, polyak 0.95, clip_obs 200, clip_range 5).

Deviations:
- gym's ``FetchReach-v1`` (MuJoCo) is the point reach task ``Reach`` of the helper (same interface, action and
  observation sizes, 50-step episodes, sparse reward within 0.05); the environment is the synthetic data.
- MPI is not used: ``sync_networks`` / ``sync_grads`` are no-ops with one process and are left out, the normalizer's
  average is the identity; ``np.random`` is a ``numpy.random.RandomState(seed)`` shared by the agent, the buffer
  and the sampler, and ``torch.manual_seed(seed)`` is set as train.py does; the device is the CPU.
- sizes for 2 CPU cores: n_batches 40 -> 10, buffer_size 1e6 -> 1e4 transitions.
- ``train_step`` is one cycle of ``learn``'s ``n_cycles`` loop and returns the last ``_update_network``'s critic
  loss (the original returns nothing); ``_update_network``'s lines are split, unchanged, into ``update_tensors``,
  ``critic_loss`` (the Program's ``loss_fn``) and the update. Evaluation, saving and printing are left out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _herddpg_lib import Reach, actor, critic, her_sampler, normalizer, replay_buffer

ARGS = types.SimpleNamespace(n_batches=10, replay_strategy='future', noise_eps=0.2, random_eps=0.3,
                             buffer_size=int(1e4), replay_k=4, clip_obs=200, batch_size=256, gamma=0.98, action_l2=1,
                             lr_actor=0.001, lr_critic=0.001, polyak=0.95, clip_range=5, cuda=False,
                             num_rollouts_per_mpi=2)


class ddpg_agent:
    def __init__(self, args, env, env_params, np_random, bug=None):
        self.args = args
        self.env = env
        self.env_params = env_params
        self.np_random, self.bug = np_random, bug
        # create the network
        self.actor_network = actor(env_params)
        self.critic_network = critic(env_params)
        # build up the target network
        self.actor_target_network = actor(env_params)
        self.critic_target_network = critic(env_params)
        # load the weights into the target networks
        self.actor_target_network.load_state_dict(self.actor_network.state_dict())
        self.critic_target_network.load_state_dict(self.critic_network.state_dict())
        # create the optimizer
        self.actor_optim = torch.optim.Adam(self.actor_network.parameters(), lr=self.args.lr_actor)
        self.critic_optim = torch.optim.Adam(self.critic_network.parameters(), lr=self.args.lr_critic)
        # her sampler
        self.her_module = her_sampler(self.args.replay_strategy, self.args.replay_k, self.env.compute_reward,
                                      np_random, bug)
        # create the replay buffer
        self.buffer = replay_buffer(self.env_params, self.args.buffer_size, self.her_module.sample_her_transitions,
                                    np_random)
        # create the normalizer
        self.o_norm = normalizer(size=env_params['obs'], default_clip_range=self.args.clip_range)
        self.g_norm = normalizer(size=env_params['goal'], default_clip_range=self.args.clip_range)

    def cycle(self):
        """(port) one iteration of ``learn``'s ``for _ in range(self.args.n_cycles)`` loop."""
        mb_obs, mb_ag, mb_g, mb_actions = [], [], [], []
        for _ in range(self.args.num_rollouts_per_mpi):
            # reset the rollouts
            ep_obs, ep_ag, ep_g, ep_actions = [], [], [], []
            # reset the environment
            observation = self.env.reset()
            obs = observation['observation']
            ag = observation['achieved_goal']
            g = observation['desired_goal']
            # start to collect samples
            for t in range(self.env_params['max_timesteps']):
                with torch.no_grad():
                    input_tensor = self._preproc_inputs(obs, g)
                    pi = self.actor_network(input_tensor)
                    action = self._select_actions(pi)
                # feed the actions into the environment
                observation_new, _, _, info = self.env.step(action)
                obs_new = observation_new['observation']
                ag_new = observation_new['achieved_goal']
                # append rollouts
                ep_obs.append(obs.copy())
                ep_ag.append(ag.copy())
                ep_g.append(g.copy())
                ep_actions.append(action.copy())
                # re-assign the observation
                obs = obs_new
                ag = ag_new
            ep_obs.append(obs.copy())
            ep_ag.append(ag.copy())
            mb_obs.append(ep_obs)
            mb_ag.append(ep_ag)
            mb_g.append(ep_g)
            mb_actions.append(ep_actions)
        # convert them into arrays
        mb_obs = np.array(mb_obs)
        mb_ag = np.array(mb_ag)
        mb_g = np.array(mb_g)
        mb_actions = np.array(mb_actions)
        # store the episodes
        self.buffer.store_episode([mb_obs, mb_ag, mb_g, mb_actions])
        self._update_normalizer([mb_obs, mb_ag, mb_g, mb_actions])
        for _ in range(self.args.n_batches):
            # train the network
            loss = self._update_network()
        # soft update
        self._soft_update_target_network(self.actor_target_network, self.actor_network)
        self._soft_update_target_network(self.critic_target_network, self.critic_network)
        return loss

    # pre_process the inputs
    def _preproc_inputs(self, obs, g):
        obs_norm = self.o_norm.normalize(obs)
        g_norm = self.g_norm.normalize(g)
        # concatenate the stuffs
        inputs = np.concatenate([obs_norm, g_norm])
        inputs = torch.tensor(inputs, dtype=torch.float32).unsqueeze(0)
        return inputs

    # this function will choose action for the agent and do the exploration
    def _select_actions(self, pi):
        action = pi.cpu().numpy().squeeze()
        # add the gaussian
        action += self.args.noise_eps * self.env_params['action_max'] * self.np_random.randn(*action.shape)
        action = np.clip(action, -self.env_params['action_max'], self.env_params['action_max'])
        # random actions...
        random_actions = self.np_random.uniform(low=-self.env_params['action_max'], high=self.env_params['action_max'], \
                                            size=self.env_params['action'])
        # choose if use the random actions
        action += self.np_random.binomial(1, self.args.random_eps, 1)[0] * (random_actions - action)
        return action

    # update the normalizer
    def _update_normalizer(self, episode_batch):
        mb_obs, mb_ag, mb_g, mb_actions = episode_batch
        mb_obs_next = mb_obs[:, 1:, :]
        mb_ag_next = mb_ag[:, 1:, :]
        # get the number of normalization transitions
        num_transitions = mb_actions.shape[1]
        # create the new buffer to store them
        buffer_temp = {'obs': mb_obs,
                       'ag': mb_ag,
                       'g': mb_g,
                       'actions': mb_actions,
                       'obs_next': mb_obs_next,
                       'ag_next': mb_ag_next,
                       }
        transitions = self.her_module.sample_her_transitions(buffer_temp, num_transitions)
        obs, g = transitions['obs'], transitions['g']
        # pre process the obs and g
        transitions['obs'], transitions['g'] = self._preproc_og(obs, g)
        # update
        self.o_norm.update(transitions['obs'])
        self.g_norm.update(transitions['g'])
        # recompute the stats
        self.o_norm.recompute_stats()
        self.g_norm.recompute_stats()

    def _preproc_og(self, o, g):
        o = np.clip(o, -self.args.clip_obs, self.args.clip_obs)
        g = np.clip(g, -self.args.clip_obs, self.args.clip_obs)
        return o, g

    # soft update
    def _soft_update_target_network(self, target, source):
        for target_param, param in zip(target.parameters(), source.parameters()):
            if self.bug == "polyak_reversed":
                target_param.data.copy_(self.args.polyak * param.data + (1 - self.args.polyak) * target_param.data)
            else:
                target_param.data.copy_((1 - self.args.polyak) * param.data + self.args.polyak * target_param.data)

    def update_tensors(self, transitions):
        """(port) ``_update_network`` from the sampled transitions to the tensors."""
        # pre-process the observation and goal
        o, o_next, g = transitions['obs'], transitions['obs_next'], transitions['g']
        transitions['obs'], transitions['g'] = self._preproc_og(o, g)
        transitions['obs_next'], transitions['g_next'] = self._preproc_og(o_next, g)
        # start to do the update
        obs_norm = self.o_norm.normalize(transitions['obs'])
        g_norm = self.g_norm.normalize(transitions['g'])
        inputs_norm = np.concatenate([obs_norm, g_norm], axis=1)
        obs_next_norm = self.o_norm.normalize(transitions['obs_next'])
        g_next_norm = self.g_norm.normalize(transitions['g_next'])
        inputs_next_norm = np.concatenate([obs_next_norm, g_next_norm], axis=1)
        # transfer them into the tensor
        inputs_norm_tensor = torch.tensor(inputs_norm, dtype=torch.float32)
        inputs_next_norm_tensor = torch.tensor(inputs_next_norm, dtype=torch.float32)
        actions_tensor = torch.tensor(transitions['actions'], dtype=torch.float32)
        r_tensor = torch.tensor(transitions['r'], dtype=torch.float32)
        return (inputs_norm_tensor, actions_tensor), (r_tensor, inputs_next_norm_tensor)

    def critic_loss(self, real_q_value, targets):
        """(port) ``_update_network``'s target Q value and critic loss; ``real_q_value`` is the critic's output."""
        r_tensor, inputs_next_norm_tensor = targets
        # calculate the target Q value function
        with torch.no_grad():
            # do the normalization
            # concatenate the stuffs
            actions_next = self.actor_target_network(inputs_next_norm_tensor)
            q_next_value = self.critic_target_network(inputs_next_norm_tensor, actions_next)
            q_next_value = q_next_value.detach()
            target_q_value = r_tensor + self.args.gamma * q_next_value
            target_q_value = target_q_value.detach()
            # clip the q value
            clip_return = 1 / (1 - self.args.gamma)
            target_q_value = torch.clamp(target_q_value, -clip_return, 0)
        # the q loss
        critic_loss = (target_q_value - real_q_value).pow(2).mean()
        return critic_loss

    # update the network
    def _update_network(self):
        # sample the episodes
        transitions = self.buffer.sample(self.args.batch_size)
        (inputs_norm_tensor, actions_tensor), targets = self.update_tensors(transitions)
        real_q_value = self.critic_network(inputs_norm_tensor, actions_tensor)
        critic_loss = self.critic_loss(real_q_value, targets)
        # the actor loss
        actions_real = self.actor_network(inputs_norm_tensor)
        actor_loss = -self.critic_network(inputs_norm_tensor, actions_real).mean()
        actor_loss += self.args.action_l2 * (actions_real / self.env_params['action_max']).pow(2).mean()
        # start to update the network
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()
        # update the critic_network
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()
        return critic_loss


def get_env_params(env):
    obs = env.reset()
    # close the environment
    params = {'obs': obs['observation'].shape[0],
            'goal': obs['desired_goal'].shape[0],
            'action': env.action_high.shape[0],
            'action_max': env.action_high[0],
            }
    params['max_timesteps'] = env._max_episode_steps
    return params


def _build(seed, bug=None):
    env = Reach(seed)
    torch.manual_seed(seed)
    env_params = get_env_params(env)
    agent = ddpg_agent(ARGS, env, env_params, np.random.RandomState(seed), bug)

    def train_step():
        return agent.cycle()

    # one cycle's episodes stored before the Program is handed over, so the buffer can be sampled
    agent.cycle()
    batch = agent.update_tensors(agent.buffer.sample(ARGS.batch_size))
    return Program(name="herddpg_reach", model=agent.critic_network, batch=batch, loss_fn=agent.critic_loss,
                   optimizer=agent.critic_optim, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic off-by-one: the relabelled reward computed from the achieved goal before the step (``ag``) instead of
    # after it (``ag_next``), so a transition is rewarded for where it started.
    Bug("her_reward_from_current_ag", functools.partial(_build, bug="her_reward_from_current_ag"), "learning_ledger",
        ("TASK",)),
    # classic: the polyak weights swapped, so the targets take 95% of the online networks each cycle.
    Bug("polyak_reversed", functools.partial(_build, bug="polyak_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]
