# ruff: noqa: F841, PLR0402, RUF059, UP004
"""Random Network Distillation with PPO, from jcwleo/random-network-distillation-pytorch: a CNN actor-critic with
extrinsic and intrinsic value heads (``CnnActorCriticNetwork``) and an RND module (a fixed random target network and
a trained predictor over the newest normalized frame); ``train.py``'s loop: observation statistics initialized by
random steps, n-step rollouts of parallel workers, the intrinsic reward as the predictor's squared error normalized by
the running std of its discounted forward filter, GAE for the extrinsic (episodic) and intrinsic (non-episodic)
streams, advantages ``int_coef * int_adv + ext_coef * ext_adv``; ``RNDAgent.train_model``: epochs of shuffled
mini-batches, the predictor's MSE on a random quarter of the batch, PPO's clipped surrogate, both critics' MSE and
the entropy bonus summed, one Adam over the actor-critic and the predictor.

Source: https://github.com/jcwleo/random-network-distillation-pytorch
Commit: e383fb95177c50bfdcd81b43e37c443c8cde1d94
Files: agents.py, train.py, config.conf (the networks of model.py, the utilities and the environment worker in the
helper ``_rndpytorch_lib.py``)
License: MIT (Copyright (c) 2018 Chanwoong joo; full text in LICENSES/jcwleo-random-network-distillation-pytorch.txt)
Domain: RL, policy gradient with intrinsic motivation (PPO + RND)

Kept as written: the networks and their initialization (84x84 frames, 4 stacked for the policy, 1 for RND), the
agent, ``train.py``'s rollout, reward normalization, targets and training call, and config.conf's values (lr 1e-4,
gamma 0.999, int_gamma 0.99, lambda 0.95, entropy 0.001, epoch 4, mini_batch 4, ppo_eps 0.1, ext_coef 2, int_coef 1,
update_proportion 0.25, sticky actions 0.25, UseNoisyNet False, UseGAE True).

Deviations from the original:
- Montezuma's Revenge cannot run here: the workers play ``KeyRoom`` of ``_rndpytorch_lib.py`` (a sparse-reward room
  drawn as 84x84 frames, 5 actions), in process; the game is the synthetic data;
- sizes for 2 CPU cores: NumEnv 128 -> 4, NumStep 128 -> 16 (so batch_size = 16 * 4 / 4 = 16), ObsNormStep 50 -> 2,
  MaxStepPerEpisode 4500 -> 64;
- ``is_load_model`` is False (no checkpoint: the networks train from their initialization); UseGPU False; the
  tensorboard writer, prints, model saving and the sample-episode bookkeeping are left out; the global ``np.random``
  and ``torch`` generators are seeded from ``seed``;
- ``train_model``'s loop body yields after each optimizer step (its loss), so ``train_step`` is one mini-batch update;
  ``main`` yields each rollout's ``train_model`` arguments (a new rollout when the epochs are done); moved, unchanged:
  ``main``'s observation warm-up and Step 1 (rollout, last values, stacking) into ``init_obs_norm`` and ``rollout``,
  ``train_model``'s loss lines into ``RNDAgent.loss`` (``forward_mse`` built there) and its old log-probabilities
  into ``old_log_prob``, so the Program's ``model`` (``RNDPPO``: the actor-critic under ``model.``, the RND module
  under ``rnd.``) and ``loss_fn`` run the same lines on the first rollout's first mini-batch; one line per call;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions.categorical import Categorical

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _rndpytorch_lib import (
    AtariEnvironment,
    CnnActorCriticNetwork,
    KeyRoom,
    RewardForwardFilter,
    RNDModel,
    RunningMeanStd,
    global_grad_norm_,
    make_train_data,
)

# ---- agents.py ---------------------------------------------------------------------------------------------------

class RNDAgent(object):
    def __init__(self, input_size, output_size, num_env, num_step, gamma, lam=0.95, learning_rate=1e-4, ent_coef=0.01,
                 clip_grad_norm=0.5, epoch=3, batch_size=128, ppo_eps=0.1, update_proportion=0.25, use_gae=True,
                 use_cuda=False, use_noisy_net=False, bug=None):
        self.model = CnnActorCriticNetwork(input_size, output_size, use_noisy_net)
        self.num_env = num_env
        self.output_size = output_size
        self.input_size = input_size
        self.num_step = num_step
        self.gamma = gamma
        self.lam = lam
        self.epoch = epoch
        self.batch_size = batch_size
        self.use_gae = use_gae
        self.ent_coef = ent_coef
        self.ppo_eps = ppo_eps
        self.clip_grad_norm = clip_grad_norm
        self.update_proportion = update_proportion
        self.device = torch.device('cuda' if use_cuda else 'cpu')
        self.bug = bug

        self.rnd = RNDModel(input_size, output_size)
        params = list(self.model.parameters())
        if bug != "predictor_left_out_of_optimizer":
            params += list(self.rnd.predictor.parameters())
        self.optimizer = optim.Adam(params, lr=learning_rate)
        self.rnd = self.rnd.to(self.device)

        self.model = self.model.to(self.device)

    def get_action(self, state):
        state = torch.Tensor(state).to(self.device)
        state = state.float()
        policy, value_ext, value_int = self.model(state)
        action_prob = F.softmax(policy, dim=-1).data.cpu().numpy()

        action = self.random_choice_prob_index(action_prob)

        return action, value_ext.data.cpu().numpy().squeeze(), value_int.data.cpu().numpy().squeeze(), policy.detach()

    @staticmethod
    def random_choice_prob_index(p, axis=1):
        r = np.expand_dims(np.random.rand(p.shape[1 - axis]), axis=axis)
        return (p.cumsum(axis=axis) > r).argmax(axis=axis)

    def compute_intrinsic_reward(self, next_obs):
        next_obs = torch.FloatTensor(next_obs).to(self.device)

        target_next_feature = self.rnd.target(next_obs)
        predict_next_feature = self.rnd.predictor(next_obs)
        intrinsic_reward = (target_next_feature - predict_next_feature).pow(2).sum(1) / 2

        return intrinsic_reward.data.cpu().numpy()

    def old_log_prob(self, old_policy, y_batch):
        """(port) ``train_model``'s no-grad lines: the rollout policy's log-probabilities of the actions taken."""
        with torch.no_grad():
            if self.bug == "old_policy_not_permuted":  # [step, env] flattened against the [env, step] batch
                policy_old_list = torch.stack(old_policy).contiguous().view(-1, self.output_size).to(self.device)
            else:
                policy_old_list = torch.stack(old_policy).permute(1, 0, 2).contiguous().view(-1, self.output_size).to(
                    self.device)

            m_old = Categorical(F.softmax(policy_old_list, dim=-1))
            log_prob_old = m_old.log_prob(y_batch)
        return log_prob_old

    def loss(self, predict_next_state_feature, target_next_state_feature, policy, value_ext, value_int,
             y, log_prob_old, adv, target_ext, target_int):
        """(port) ``train_model``'s loss lines for one mini-batch."""
        forward_mse = nn.MSELoss(reduction='none')
        forward_loss = forward_mse(predict_next_state_feature, target_next_state_feature.detach()).mean(-1)
        # Proportion of exp used for predictor update
        mask = torch.rand(len(forward_loss)).to(self.device)
        mask = (mask < self.update_proportion).type(torch.FloatTensor).to(self.device)
        forward_loss = (forward_loss * mask).sum() / torch.max(mask.sum(), torch.Tensor([1]).to(self.device))
        # ---------------------------------------------------------------------------------

        m = Categorical(F.softmax(policy, dim=-1))
        log_prob = m.log_prob(y)

        if self.bug == "ratio_inverted":
            ratio = torch.exp(log_prob_old - log_prob)
        else:
            ratio = torch.exp(log_prob - log_prob_old)

        surr1 = ratio * adv
        surr2 = torch.clamp(
            ratio,
            1.0 - self.ppo_eps,
            1.0 + self.ppo_eps) * adv

        actor_loss = -torch.min(surr1, surr2).mean()
        critic_ext_loss = F.mse_loss(value_ext.sum(1), target_ext)
        critic_int_loss = F.mse_loss(value_int.sum(1), target_int)

        critic_loss = critic_ext_loss + critic_int_loss

        entropy = m.entropy().mean()
        return actor_loss + 0.5 * critic_loss - self.ent_coef * entropy + forward_loss

    def train_model(self, s_batch, target_ext_batch, target_int_batch, y_batch, adv_batch, next_obs_batch, old_policy):
        s_batch = torch.FloatTensor(s_batch).to(self.device)
        target_ext_batch = torch.FloatTensor(target_ext_batch).to(self.device)
        target_int_batch = torch.FloatTensor(target_int_batch).to(self.device)
        y_batch = torch.LongTensor(y_batch).to(self.device)
        adv_batch = torch.FloatTensor(adv_batch).to(self.device)
        next_obs_batch = torch.FloatTensor(next_obs_batch).to(self.device)

        sample_range = np.arange(len(s_batch))

        log_prob_old = self.old_log_prob(old_policy, y_batch)
        # ------------------------------------------------------------

        for _i in range(self.epoch):
            np.random.shuffle(sample_range)
            for j in range(int(len(s_batch) / self.batch_size)):
                sample_idx = sample_range[self.batch_size * j:self.batch_size * (j + 1)]

                # --------------------------------------------------------------------------------
                # for Curiosity-driven(Random Network Distillation)
                predict_next_state_feature, target_next_state_feature = self.rnd(next_obs_batch[sample_idx])

                policy, value_ext, value_int = self.model(s_batch[sample_idx])

                self.optimizer.zero_grad()
                loss = self.loss(predict_next_state_feature, target_next_state_feature, policy, value_ext, value_int,
                                 y_batch[sample_idx], log_prob_old[sample_idx], adv_batch[sample_idx],
                                 target_ext_batch[sample_idx], target_int_batch[sample_idx])
                loss.backward()
                global_grad_norm_(list(self.model.parameters())+list(self.rnd.predictor.parameters()))
                self.optimizer.step()
                yield loss.detach()


class RNDPPO(nn.Module):
    """(port) the actor-critic and the RND module on a mini-batch, for the Program (under ``model.``, ``rnd.``)."""

    def __init__(self, model, rnd):
        super().__init__()
        self.model, self.rnd = model, rnd

    def forward(self, s, next_obs):
        return (*self.rnd(next_obs), *self.model(s))


# ---- train.py ----------------------------------------------------------------------------------------------------

def init_obs_norm(works, obs_rms, num_worker, num_step, output_size, pre_obs_norm_step):
    """train.py's observation-normalization warm-up (random actions), lines as written."""
    # normalize obs
    next_obs = []
    for _step in range(num_step * pre_obs_norm_step):
        actions = np.random.randint(0, output_size, size=(num_worker,))

        for work, action in zip(works, actions):
            s, r, d, rd, lr = work.step(action)
            next_obs.append(s[3, :, :].reshape([1, 84, 84]))

        if len(next_obs) % (num_step * num_worker) == 0:
            next_obs = np.stack(next_obs)
            obs_rms.update(next_obs)
            next_obs = []


def rollout(agent, works, states, obs_rms, num_step):
    """train.py's Step 1 (the n-step rollout), the last values and the stacking, lines as written."""
    total_state, total_reward, total_done, total_next_state, total_action, total_int_reward, total_next_obs, total_ext_values, total_int_values, total_policy, total_policy_np = \
        [], [], [], [], [], [], [], [], [], [], []

    # Step 1. n-step rollout
    for _ in range(num_step):
        actions, value_ext, value_int, policy = agent.get_action(np.float32(states) / 255.)

        next_states, rewards, dones, real_dones, log_rewards, next_obs = [], [], [], [], [], []
        for work, action in zip(works, actions):
            s, r, d, rd, lr = work.step(action)
            next_states.append(s)
            rewards.append(r)
            dones.append(d)
            real_dones.append(rd)
            log_rewards.append(lr)
            next_obs.append(s[3, :, :].reshape([1, 84, 84]))

        next_states = np.stack(next_states)
        rewards = np.hstack(rewards)
        dones = np.hstack(dones)
        real_dones = np.hstack(real_dones)
        next_obs = np.stack(next_obs)

        # total reward = int reward + ext Reward
        intrinsic_reward = agent.compute_intrinsic_reward(
            ((next_obs - obs_rms.mean) / np.sqrt(obs_rms.var)).clip(-5, 5))
        intrinsic_reward = np.hstack(intrinsic_reward)

        total_next_obs.append(next_obs)
        total_int_reward.append(intrinsic_reward)
        total_state.append(states)
        total_reward.append(rewards)
        total_done.append(dones)
        total_action.append(actions)
        total_ext_values.append(value_ext)
        total_int_values.append(value_int)
        total_policy.append(policy)
        total_policy_np.append(policy.cpu().numpy())

        states = next_states[:, :, :, :]

    # calculate last next value
    _, value_ext, value_int, _ = agent.get_action(np.float32(states) / 255.)
    total_ext_values.append(value_ext)
    total_int_values.append(value_int)
    # --------------------------------------------------

    total_state = np.stack(total_state).transpose([1, 0, 2, 3, 4]).reshape([-1, 4, 84, 84])
    total_reward = np.stack(total_reward).transpose().clip(-1, 1)
    total_action = np.stack(total_action).transpose().reshape([-1])
    total_done = np.stack(total_done).transpose()
    total_next_obs = np.stack(total_next_obs).transpose([1, 0, 2, 3, 4]).reshape([-1, 1, 84, 84])
    total_ext_values = np.stack(total_ext_values).transpose()
    total_int_values = np.stack(total_int_values).transpose()
    return (states, total_state, total_reward, total_action, total_done, total_next_obs, total_ext_values,
            total_int_values, total_int_reward, total_policy)


def main(agent, works, num_worker, num_step, output_size, gamma, int_gamma, ext_coef, int_coef, pre_obs_norm_step):
    """train.py's ``main`` after the agent and workers are built; yields each rollout's ``train_model`` arguments."""
    reward_rms = RunningMeanStd()
    obs_rms = RunningMeanStd(shape=(1, 1, 84, 84))
    discounted_reward = RewardForwardFilter(int_gamma)

    states = np.zeros([num_worker, 4, 84, 84])

    init_obs_norm(works, obs_rms, num_worker, num_step, output_size, pre_obs_norm_step)

    while True:
        (states, total_state, total_reward, total_action, total_done, total_next_obs, total_ext_values,
         total_int_values, total_int_reward, total_policy) = rollout(agent, works, states, obs_rms, num_step)

        # Step 2. calculate intrinsic reward
        # running mean intrinsic reward
        total_int_reward = np.stack(total_int_reward).transpose()
        total_reward_per_env = np.array([discounted_reward.update(reward_per_step) for reward_per_step in
                                         total_int_reward.T])
        mean, std, count = np.mean(total_reward_per_env), np.std(total_reward_per_env), len(total_reward_per_env)
        reward_rms.update_from_moments(mean, std ** 2, count)

        # normalize intrinsic reward
        total_int_reward /= np.sqrt(reward_rms.var)

        # Step 3. make target and advantage
        # extrinsic reward calculate
        ext_target, ext_adv = make_train_data(total_reward, total_done, total_ext_values, gamma, num_step, num_worker)

        # intrinsic reward calculate
        # None Episodic
        int_target, int_adv = make_train_data(total_int_reward, np.zeros_like(total_int_reward), total_int_values,
                                              int_gamma, num_step, num_worker)

        # add ext adv and int adv
        total_adv = int_adv * int_coef + ext_adv * ext_coef
        # -----------------------------------------------

        # Step 4. update obs normalize param
        obs_rms.update(total_next_obs)
        # -----------------------------------------------

        # Step 5. Training!
        yield (np.float32(total_state) / 255., ext_target, int_target, total_action,
               total_adv, ((total_next_obs - obs_rms.mean) / np.sqrt(obs_rms.var)).clip(-5, 5), total_policy)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    output_size = KeyRoom.n_actions
    input_size, num_worker, num_step, mini_batch = (84, 84, 1), 4, 16, 4  # input_size is unused by the networks
    batch_size = int(num_step * num_worker / mini_batch)

    agent = RNDAgent(
        input_size, output_size, num_worker, num_step, 0.999, lam=0.95, learning_rate=1e-4, ent_coef=0.001,
        clip_grad_norm=0.5, epoch=4, batch_size=batch_size, ppo_eps=0.1, use_cuda=False, use_gae=True,
        use_noisy_net=False, bug=bug)
    works = [AtariEnvironment(idx, sticky_action=True, p=0.25, rng=rng) for idx in range(num_worker)]
    rollouts = main(agent, works, num_worker, num_step, output_size, gamma=0.999, int_gamma=0.99, ext_coef=2.,
                    int_coef=1., pre_obs_norm_step=2)
    first = next(rollouts)  # the observation statistics and the first rollout; no update yet
    state = {"updates": agent.train_model(*first)}

    def train_step():
        """One mini-batch update of ``train_model``; the next rollout when its epochs are done."""
        while True:
            try:
                return next(state["updates"])
            except StopIteration:
                state["updates"] = agent.train_model(*next(rollouts))

    s, target_ext, target_int, y, adv, next_obs, old_policy = first
    y = torch.LongTensor(y)
    log_prob_old = agent.old_log_prob(old_policy, y)
    idx = slice(0, batch_size)
    batch = ((torch.FloatTensor(s[idx]), torch.FloatTensor(next_obs[idx])),
             (y[idx], log_prob_old[idx], torch.FloatTensor(adv[idx]), torch.FloatTensor(target_ext[idx]),
              torch.FloatTensor(target_int[idx])))

    def loss_fn(outputs, targets):
        """``train_model``'s loss lines (``RNDAgent.loss``) on ``RNDPPO``'s outputs."""
        return agent.loss(*outputs, *targets)

    return Program(name="rndpytorch_ppo", model=RNDPPO(agent.model, agent.rnd), batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the Adam optimizer built over the actor-critic alone, so the predictor never learns the target's
    # features and the intrinsic reward never decays with familiarity.
    Bug("predictor_left_out_of_optimizer", functools.partial(_build, bug="predictor_left_out_of_optimizer"),
        "four_structures", ("rnd.predictor",)),
    # classic layout slip: the rollout's policies stacked [step, env] and flattened without the permute the batch's
    # [env, step] order needs, so each sample's old log-probability belongs to another sample.
    Bug("old_policy_not_permuted", functools.partial(_build, bug="old_policy_not_permuted"), "learning_ledger",
        ("TASK",)),
    # classic: the probability ratio written old over new, so the clipped surrogate pushes the policy away from the
    # actions with positive advantages.
    Bug("ratio_inverted", functools.partial(_build, bug="ratio_inverted"), "learning_ledger", ("OBJECTIVE",)),
]
