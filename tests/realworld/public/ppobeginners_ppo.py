# ruff: noqa: PLR0402, RUF059, UP008
"""PPO for Beginners: PPO-Clip with a fixed-covariance Gaussian actor, a critic regressed on rewards-to-go, and one
Adam optimizer per network.

Source: https://github.com/ericyangyu/PPO-for-Beginners
Commit: 1ae63d0f7b59fc8f34b5e2de9ccd3b019ab642df
Files: ``ppo.py`` (class ``PPO``: ``learn``, ``rollout``, ``compute_rtgs``, ``get_action``, ``evaluate``,
``_init_hyperparameters``), ``network.py`` (``FeedForwardNN``), ``main.py`` (the environment, Pendulum).
License: MIT (Copyright (c) 2022 Eric Yang Yu; full text in LICENSES/ericyangyu-PPO-for-Beginners.txt)
Domain: RL, on-policy policy gradient (PPO-Clip, Monte-Carlo rewards-to-go, normalized advantages)

Kept as written: ``FeedForwardNN`` (in-64-64-out, ReLU), the actor and critic built from it, the two Adam
optimizers, the covariance matrix ``diag(0.5)`` and ``MultivariateNormal`` actions, ``rollout``, ``compute_rtgs``
(episodes walked backwards, ``insert(0, ...)``), ``evaluate`` (``critic(obs).squeeze()``), and the body of ``learn``:
advantages ``A_k = rtgs - V.detach()`` normalized, ``n_updates_per_iteration`` epochs of the clipped surrogate
(``-min(surr1, surr2).mean()``) and ``nn.MSELoss()(V, rtgs)``, actor zero_grad/backward(retain_graph)/step then
critic zero_grad/backward/step. The hyperparameters are ``_init_hyperparameters``' defaults (lr 0.005, gamma 0.95,
5 updates per iteration, clip 0.2).

Deviations from the original:
- gym's Pendulum is replaced by the numpy ``Pendulum`` of ``_continuous_control.py`` (Pendulum-v1's equations and
  constants, seeded from ``seed``); the gym ``Box`` asserts are dropped. The environment is the synthetic data.
- sizes for 2 CPU cores: ``timesteps_per_batch`` 400 (default 4800), ``max_timesteps_per_episode`` 200.
- the class's methods are kept as methods; ``learn``'s while loop is not run: ``train_step`` is one iteration of it
  (a fresh rollout, the advantage, the update epochs) and returns the last critic loss (the original logs the actor
  loss and returns nothing). Logging, rendering, saving and the ``exec``-based hyperparameter override are dropped
  (the values are passed as keyword arguments and set with ``setattr``).
- the rollout stacks the per-step numpy arrays with ``np.array`` before ``torch.tensor`` (same values; avoids the
  slow list-of-arrays path), and seeds come from ``seed`` (``torch.manual_seed``, the environment's rng).
- tabs are written as four spaces.
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
from torch.distributions import MultivariateNormal
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum


class FeedForwardNN(nn.Module):
    """
        A standard in_dim-64-64-out_dim Feed Forward Neural Network.
    """
    def __init__(self, in_dim, out_dim):
        super(FeedForwardNN, self).__init__()

        self.layer1 = nn.Linear(in_dim, 64)
        self.layer2 = nn.Linear(64, 64)
        self.layer3 = nn.Linear(64, out_dim)

    def forward(self, obs):
        # Convert observation to tensor if it's a numpy array
        if isinstance(obs, np.ndarray):
            obs = torch.tensor(obs, dtype=torch.float)

        activation1 = F.relu(self.layer1(obs))
        activation2 = F.relu(self.layer2(activation1))
        output = self.layer3(activation2)

        return output


class PPO:
    def __init__(self, policy_class, env, bug=None, **hyperparameters):
        self.bug = bug
        # Initialize hyperparameters for training with PPO
        self._init_hyperparameters(hyperparameters)

        # Extract environment information
        self.env = env
        self.obs_dim = env.observation_space.shape[0]
        self.act_dim = env.action_space.shape[0]

        # Initialize actor and critic networks
        self.actor = policy_class(self.obs_dim, self.act_dim)                                                   # ALG STEP 1
        self.critic = policy_class(self.obs_dim, 1)

        # Initialize optimizers for actor and critic
        self.actor_optim = Adam(self.actor.parameters(), lr=self.lr)
        self.critic_optim = Adam(self.critic.parameters(), lr=self.lr)

        # Initialize the covariance matrix used to query the actor for actions
        self.cov_var = torch.full(size=(self.act_dim,), fill_value=0.5)
        self.cov_mat = torch.diag(self.cov_var)

    def learn_iteration(self):
        """(port) one iteration of ``learn``'s while loop."""
        batch_obs, batch_acts, batch_log_probs, batch_rtgs, batch_lens = self.rollout()                     # ALG STEP 3

        # Calculate advantage at k-th iteration
        V, _ = self.evaluate(batch_obs, batch_acts)
        A_k = batch_rtgs - V.detach()                                                                       # ALG STEP 5

        A_k = (A_k - A_k.mean()) / (A_k.std() + 1e-10)

        # This is the loop where we update our network for some n epochs
        for _ in range(self.n_updates_per_iteration):                                                       # ALG STEP 6 & 7
            # Calculate V_phi and pi_theta(a_t | s_t)
            V, curr_log_probs = self.evaluate(batch_obs, batch_acts)

            ratios = torch.exp(curr_log_probs - batch_log_probs)

            # Calculate surrogate losses.
            surr1 = ratios * A_k
            surr2 = torch.clamp(ratios, 1 - self.clip, 1 + self.clip) * A_k

            actor_loss = (-torch.min(surr1, surr2)).mean()
            critic_loss = nn.MSELoss()(V, batch_rtgs)

            # Calculate gradients and perform backward propagation for actor network
            self.actor_optim.zero_grad()
            actor_loss.backward(retain_graph=True)
            self.actor_optim.step()

            # Calculate gradients and perform backward propagation for critic network
            if self.bug != "critic_zero_grad_dropped":
                self.critic_optim.zero_grad()
            critic_loss.backward()
            self.critic_optim.step()

        return critic_loss

    def rollout(self):
        # Batch data. For more details, check function header.
        batch_obs = []
        batch_acts = []
        batch_log_probs = []
        batch_rews = []
        batch_rtgs = []
        batch_lens = []

        # Episodic data. Keeps track of rewards per episode, will get cleared
        # upon each new episode
        ep_rews = []

        t = 0 # Keeps track of how many timesteps we've run so far this batch

        # Keep simulating until we've run more than or equal to specified timesteps per batch
        while t < self.timesteps_per_batch:
            ep_rews = [] # rewards collected per episode

            # Reset the environment. sNote that obs is short for observation.
            obs = self.env.reset()
            done = False

            # Run an episode for a maximum of max_timesteps_per_episode timesteps
            for ep_t in range(self.max_timesteps_per_episode):
                t += 1 # Increment timesteps ran this batch so far

                # Track observations in this batch
                batch_obs.append(obs)

                # Calculate action and make a step in the env.
                # Note that rew is short for reward.
                action, log_prob = self.get_action(obs)
                obs, rew, done, _ = self.env.step(action)

                # Track recent reward, action, and action log probability
                ep_rews.append(rew)
                batch_acts.append(action)
                batch_log_probs.append(log_prob)

                # If the environment tells us the episode is terminated, break
                if done:
                    break

            # Track episodic lengths and rewards
            batch_lens.append(ep_t + 1)
            batch_rews.append(ep_rews)

        # Reshape data as tensors in the shape specified in function description, before returning
        batch_obs = torch.tensor(np.array(batch_obs), dtype=torch.float)
        batch_acts = torch.tensor(np.array(batch_acts), dtype=torch.float)
        batch_log_probs = torch.tensor(batch_log_probs, dtype=torch.float)
        batch_rtgs = self.compute_rtgs(batch_rews)                                                              # ALG STEP 4

        return batch_obs, batch_acts, batch_log_probs, batch_rtgs, batch_lens

    def compute_rtgs(self, batch_rews):
        # The rewards-to-go (rtg) per episode per batch to return.
        # The shape will be (num timesteps per episode)
        batch_rtgs = []

        # Iterate through each episode
        for ep_rews in reversed(batch_rews):

            discounted_reward = 0 # The discounted reward so far

            # Iterate through all rewards in the episode. We go backwards for smoother calculation of each
            # discounted return (think about why it would be harder starting from the beginning)
            ep_rtgs = []
            for rew in reversed(ep_rews):
                discounted_reward = rew + discounted_reward * self.gamma
                if self.bug == "rtgs_appended_not_prepended":
                    ep_rtgs.append(discounted_reward)
                else:
                    batch_rtgs.insert(0, discounted_reward)
            if self.bug == "rtgs_appended_not_prepended":
                batch_rtgs = ep_rtgs + batch_rtgs

        # Convert the rewards-to-go into a tensor
        batch_rtgs = torch.tensor(batch_rtgs, dtype=torch.float)

        return batch_rtgs

    def get_action(self, obs):
        # Query the actor network for a mean action
        mean = self.actor(obs)

        dist = MultivariateNormal(mean, self.cov_mat)

        # Sample an action from the distribution
        action = dist.sample()

        # Calculate the log probability for that action
        log_prob = dist.log_prob(action)

        # Return the sampled action and the log probability of that action in our distribution
        return action.detach().numpy(), log_prob.detach()

    def evaluate(self, batch_obs, batch_acts):
        # Query critic network for a value V for each batch_obs. Shape of V should be same as batch_rtgs
        V = self.critic(batch_obs).squeeze()

        # Calculate the log probabilities of batch actions using most recent actor network.
        # This segment of code is similar to that in get_action()
        mean = self.actor(batch_obs)
        dist = MultivariateNormal(mean, self.cov_mat)
        log_probs = dist.log_prob(batch_acts)

        # Return the value vector V of each observation in the batch
        # and log probabilities log_probs of each action in the batch
        return V, log_probs

    def _init_hyperparameters(self, hyperparameters):
        # Initialize default values for hyperparameters
        # Algorithm hyperparameters
        self.timesteps_per_batch = 4800                 # Number of timesteps to run per batch
        self.max_timesteps_per_episode = 1600           # Max number of timesteps per episode
        self.n_updates_per_iteration = 5                # Number of times to update actor/critic per iteration
        self.lr = 0.005                                 # Learning rate of actor optimizer
        self.gamma = 0.95                               # Discount factor to be applied when calculating Rewards-To-Go
        self.clip = 0.2                                 # Recommended 0.2, helps define the threshold to clip the ratio during SGA
        self.seed = None                                # Sets the seed of our program, used for reproducibility of results

        # Change any default values to custom values for specified hyperparameters
        for param, val in hyperparameters.items():
            setattr(self, param, val)

        # Sets the seed if specified
        if self.seed != None:
            # Check if our seed is valid first
            assert(type(self.seed) == int)

            # Set the seed
            torch.manual_seed(self.seed)


def _build(seed, bug=None):
    env = Pendulum()
    env.seed(seed)
    env.action_space.seed(seed)
    hyperparameters = {'timesteps_per_batch': 400, 'max_timesteps_per_episode': 200, 'seed': seed}
    model = PPO(policy_class=FeedForwardNN, env=env, bug=bug, **hyperparameters)

    # (port) the Program's batch: one rollout of the initial policy, as learn() collects it
    batch_obs, _acts, _log_probs, batch_rtgs, _lens = model.rollout()

    def loss_fn(outputs, batch_rtgs):
        V = outputs.squeeze()
        return nn.MSELoss()(V, batch_rtgs)

    return Program(name="ppobeginners_ppo", model=model.critic, batch=(batch_obs, batch_rtgs), loss_fn=loss_fn,
                   optimizer=model.critic_optim, train_step=model.learn_iteration)


build = functools.partial(_build, bug=None)

BUGS = [
    # compute_rtgs appends each episode's returns as it walks the rewards backwards instead of inserting them at the
    # front: within every episode the rewards-to-go come out reversed in time (classic), so the critic regresses each
    # state on another step's return and the advantages are misassigned.
    Bug("rtgs_appended_not_prepended", functools.partial(_build, bug="rtgs_appended_not_prepended"),
        "learning_ledger", ("TASK",)),
    # the critic's zero_grad is left out of the update epochs (classic): its gradients pile up across epochs and
    # iterations; the critic is the declared model, so every parameter of it is touched alike.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
