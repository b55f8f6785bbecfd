"""Soft Actor-Critic (clipped double-Q critics with soft target updates, a tanh-squashed Gaussian actor, learned
entropy temperature) on the pendulum, from BY571/Soft-Actor-Critic-and-Extensions' single-file ``SAC.py``.

Source: https://github.com/BY571/Soft-Actor-Critic-and-Extensions
Commit: 038fb53ecb4ab8ea44e7a63ad59a9950aa6ddd97
Files: ``SAC.py`` (the plain SAC script: ``Actor``, ``Critic``, ``Agent``, ``ReplayBuffer``, ``SAC()``, argparse
defaults)
License: MIT (Copyright (c) 2020 Sebastian Dittert; full text in LICENSES/BY571-Soft-Actor-Critic-and-Extensions.txt)
Domain: RL, continuous actor-critic (SAC: two critics with their own Adam, min of the target critics minus
``alpha * log_pi``, terminal mask, 0.5 * MSE; actor loss ``alpha * log_pi - Q1``; ``log_alpha`` tuned toward
``-dim(A)``; soft updates with tau 1e-2; uniform replay)

Kept as written: ``hidden_init``, ``Actor`` (``evaluate`` draws one ``Normal(0, 1)`` sample shared by the batch, as
written; ``reset_parameters`` is never called, as in the original), ``Critic`` (with its ``reset_parameters``),
``Agent`` (``step``, ``act``, ``learn`` with ``FIXED_ALPHA`` None, the uniform action prior, ``d=1``,
``soft_update``), ``ReplayBuffer`` (``random.sample`` of ``np.vstack``-ed fields), the loop body of ``SAC()``
(act, ``np.clip(action_v * action_high, ...)``, ``env.step``, ``agent.step(..., t)``), and the argparse defaults
(gamma 0.99, tau 1e-2, lr 5e-4 for actor, critics and alpha, ``max_t=500``).

Deviations from the original:
- gym's ``Pendulum-v0`` is not here: the pendulum of ``_continuous_control.py`` (Pendulum-v1's equations, the gym
  < 0.26 interface, ``done`` at the 200-step time limit) stands in; seeded with ``seed``.
- sizes for 2 CPU cores: ``layer_size`` 256 -> 64, ``batch_size`` 256 -> 64, ``replay_memory`` 1e6 -> 1e5.
- ``device`` is the CPU; tensorboard's ``SummaryWriter``, the prints, ``torch.save`` and ``play()`` are dropped, as is
  the argparse parsing (its defaults are the module's constants).
- ``SAC()`` is a generator: it yields after each ``agent.step`` that learned (the two critic losses, summed, which
  ``learn`` now keeps in ``agent.last_critic_losses``); ``build`` runs it until the buffer holds ``BATCH_SIZE``
  transitions, before the first update, and ``train_step`` is one environment step with its update.
- the Program's model is ``critic1`` with ``critic1_optimizer``; its batch is one ``memory.sample()`` taken at build
  (``(states, actions)`` in, ``(rewards, next_states, dones)`` for the loss), and ``loss_fn`` is ``learn``'s
  ``critic1_loss`` lines on it.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF059, F821, UP039

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import MultivariateNormal, Normal

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

# the argparse defaults (port: sizes shrunk)
GAMMA = 0.99
TAU = 1e-2
HIDDEN_SIZE = 64  # (port) 256
BUFFER_SIZE = int(1e5)  # (port) 1e6
BATCH_SIZE = 64  # (port) 256
LR_ACTOR = 5e-4
LR_CRITIC = 5e-4
FIXED_ALPHA = None

device = torch.device("cpu")  # (port) CPU only

def hidden_init(layer):
    fan_in = layer.weight.data.size()[0]
    lim = 1. / np.sqrt(fan_in)
    return (-lim, lim)

class Actor(nn.Module):
    """Actor (Policy) Model."""

    def __init__(self, state_size, action_size, seed, hidden_size=32, init_w=3e-3, log_std_min=-20, log_std_max=2):
        """Initialize parameters and build model.
        Params
        ======
            state_size (int): Dimension of each state
            action_size (int): Dimension of each action
            seed (int): Random seed
            fc1_units (int): Number of nodes in first hidden layer
            fc2_units (int): Number of nodes in second hidden layer
        """
        super(Actor, self).__init__()
        self.seed = torch.manual_seed(seed)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        
        self.fc1 = nn.Linear(state_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        
        self.mu = nn.Linear(hidden_size, action_size)
        self.log_std_linear = nn.Linear(hidden_size, action_size)


    def reset_parameters(self):
        self.fc1.weight.data.uniform_(*hidden_init(self.fc1))
        self.fc2.weight.data.uniform_(*hidden_init(self.fc2))
        self.mu.weight.data.uniform_(-init_w, init_w)
        self.log_std_linear.weight.data.uniform_(-init_w, init_w)

    def forward(self, state):

        x = F.relu(self.fc1(state), inplace=True)
        x = F.relu(self.fc2(x), inplace=True)
        mu = self.mu(x)

        log_std = self.log_std_linear(x)
        log_std = torch.clamp(log_std, self.log_std_min, self.log_std_max)
        return mu, log_std
    
    def evaluate(self, state, epsilon=1e-6):
        mu, log_std = self.forward(state)
        std = log_std.exp()
        dist = Normal(0, 1)
        e = dist.sample().to(device)
        action = torch.tanh(mu + e * std)
        log_prob = Normal(mu, std).log_prob(mu + e * std) - torch.log(1 - action.pow(2) + epsilon)

        return action, log_prob
        
    
    def get_action(self, state):
        """
        returns the action based on a squashed gaussian policy. That means the samples are obtained according to:
        a(s,e)= tanh(mu(s)+sigma(s)+e)
        """
        #state = torch.FloatTensor(state).to(device) #.unsqzeeze(0)
        mu, log_std = self.forward(state)
        std = log_std.exp()
        dist = Normal(0, 1)
        e      = dist.sample().to(device)
        action = torch.tanh(mu + e * std).cpu()
        #action = torch.clamp(action*action_high, action_low, action_high)
        return action[0]


class Critic(nn.Module):
    """Critic (Value) Model."""

    def __init__(self, state_size, action_size, seed, hidden_size=32):
        """Initialize parameters and build model.
        Params
        ======
            state_size (int): Dimension of each state
            action_size (int): Dimension of each action
            seed (int): Random seed
            hidden_size (int): Number of nodes in the network layers

        """
        super(Critic, self).__init__()
        self.seed = torch.manual_seed(seed)
        self.fc1 = nn.Linear(state_size+action_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, 1)
        self.reset_parameters()

    def reset_parameters(self):
        self.fc1.weight.data.uniform_(*hidden_init(self.fc1))
        self.fc2.weight.data.uniform_(*hidden_init(self.fc2))
        self.fc3.weight.data.uniform_(-3e-3, 3e-3)

    def forward(self, state, action):
        """Build a critic (value) network that maps (state, action) pairs -> Q-values."""
        x = torch.cat((state, action), dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)

class Agent():
    """Interacts with and learns from the environment."""
    
    def __init__(self, state_size, action_size, random_seed, hidden_size, action_prior="uniform", bug=None):
        """Initialize an Agent object.
        
        Params
        ======
            state_size (int): dimension of each state
            action_size (int): dimension of each action
            random_seed (int): random seed
        """
        self.state_size = state_size
        self.action_size = action_size
        self.seed = random.seed(random_seed)
        
        self.target_entropy = -action_size  # -dim(A)
        self.alpha = 1
        self.log_alpha = torch.tensor([0.0], requires_grad=True)
        self.alpha_optimizer = optim.Adam(params=[self.log_alpha], lr=LR_ACTOR) 
        self._action_prior = action_prior
        self.bug = bug  # (port) the bug switch
        
        # print("Using: ", device)  (port) the print dropped
        
        # Actor Network 
        self.actor_local = Actor(state_size, action_size, random_seed, hidden_size).to(device)
        self.actor_optimizer = optim.Adam(self.actor_local.parameters(), lr=LR_ACTOR)     
        
        # Critic Network (w/ Target Network)
        self.critic1 = Critic(state_size, action_size, random_seed, hidden_size).to(device)
        self.critic2 = Critic(state_size, action_size, random_seed, hidden_size).to(device)
        
        self.critic1_target = Critic(state_size, action_size, random_seed,hidden_size).to(device)
        self.critic1_target.load_state_dict(self.critic1.state_dict())

        self.critic2_target = Critic(state_size, action_size, random_seed,hidden_size).to(device)
        self.critic2_target.load_state_dict(self.critic2.state_dict())

        self.critic1_optimizer = optim.Adam(self.critic1.parameters(), lr=LR_CRITIC, weight_decay=0)
        self.critic2_optimizer = optim.Adam(self.critic2.parameters(), lr=LR_CRITIC, weight_decay=0) 

        # Replay memory
        self.memory = ReplayBuffer(action_size, BUFFER_SIZE, BATCH_SIZE, random_seed, bug=bug)
        

    def step(self, state, action, reward, next_state, done, step):
        """Save experience in replay memory, and use random sample from buffer to learn."""
        # Save experience / reward
        self.memory.add(state, action, reward, next_state, done)

        # Learn, if enough samples are available in memory
        if len(self.memory) > BATCH_SIZE:
            experiences = self.memory.sample()
            self.learn(step, experiences, GAMMA)
            
    
    def act(self, state):
        """Returns actions for given state as per current policy."""
        state = torch.from_numpy(state).float().to(device)
        action = self.actor_local.get_action(state).detach()
        return action

    def learn(self, step, experiences, gamma, d=1):
        """Updates actor, critics and entropy_alpha parameters using given batch of experience tuples.
        Q_targets = r + γ * (min_critic_target(next_state, actor_target(next_state)) - α *log_pi(next_action|next_state))
        Critic_loss = MSE(Q, Q_target)
        Actor_loss = α * log_pi(a|s) - Q(s,a)
        where:
            actor_target(state) -> action
            critic_target(state, action) -> Q-value
        Params
        ======
            experiences (Tuple[torch.Tensor]): tuple of (s, a, r, s', done) tuples 
            gamma (float): discount factor
        """
        states, actions, rewards, next_states, dones = experiences
        

        # ---------------------------- update critic ---------------------------- #
        # Get predicted next-state actions and Q values from target models
        if self.bug == "next_action_from_states":
            next_action, log_pis_next = self.actor_local.evaluate(states)
        else:
            next_action, log_pis_next = self.actor_local.evaluate(next_states)

        Q_target1_next = self.critic1_target(next_states.to(device), next_action.squeeze(0).to(device))
        Q_target2_next = self.critic2_target(next_states.to(device), next_action.squeeze(0).to(device))

        # take the mean of both critics for updating
        Q_target_next = torch.min(Q_target1_next, Q_target2_next)
        
        if FIXED_ALPHA == None:
            # Compute Q targets for current states (y_i)
            Q_targets = rewards.cpu() + (gamma * (1 - dones.cpu()) * (Q_target_next.cpu() - self.alpha * log_pis_next.squeeze(0).cpu()))
        else:
            Q_targets = rewards.cpu() + (gamma * (1 - dones.cpu()) * (Q_target_next.cpu() - FIXED_ALPHA * log_pis_next.squeeze(0).cpu()))
        # Compute critic loss
        Q_1 = self.critic1(states, actions).cpu()
        Q_2 = self.critic2(states, actions).cpu()
        critic1_loss = 0.5*F.mse_loss(Q_1, Q_targets.detach())
        critic2_loss = 0.5*F.mse_loss(Q_2, Q_targets.detach())
        # Update critics
        # critic 1
        self.critic1_optimizer.zero_grad()
        critic1_loss.backward()
        self.critic1_optimizer.step()
        # critic 2
        self.critic2_optimizer.zero_grad()
        critic2_loss.backward()
        self.critic2_optimizer.step()
        if step % d == 0:
        # ---------------------------- update actor ---------------------------- #
            if FIXED_ALPHA == None:
                alpha = torch.exp(self.log_alpha)
                # Compute alpha loss
                actions_pred, log_pis = self.actor_local.evaluate(states)
                alpha_loss = - (self.log_alpha.cpu() * (log_pis.cpu() + self.target_entropy).detach().cpu()).mean()
                self.alpha_optimizer.zero_grad()
                alpha_loss.backward()
                self.alpha_optimizer.step()
                
                self.alpha = alpha
                # Compute actor loss
                if self._action_prior == "normal":
                    policy_prior = MultivariateNormal(loc=torch.zeros(self.action_size), scale_tril=torch.ones(self.action_size).unsqueeze(0))
                    policy_prior_log_probs = policy_prior.log_prob(actions_pred)
                elif self._action_prior == "uniform":
                    policy_prior_log_probs = 0.0
    
                actor_loss = (alpha * log_pis.squeeze(0).cpu() - self.critic1(states, actions_pred.squeeze(0)).cpu() - policy_prior_log_probs ).mean()
            else:
                
                actions_pred, log_pis = self.actor_local.evaluate(states)
                if self._action_prior == "normal":
                    policy_prior = MultivariateNormal(loc=torch.zeros(self.action_size), scale_tril=torch.ones(self.action_size).unsqueeze(0))
                    policy_prior_log_probs = policy_prior.log_prob(actions_pred)
                elif self._action_prior == "uniform":
                    policy_prior_log_probs = 0.0
    
                actor_loss = (FIXED_ALPHA * log_pis.squeeze(0).cpu() - self.critic1(states, actions_pred.squeeze(0)).cpu()- policy_prior_log_probs ).mean()
            # Minimize the loss
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()

            # ----------------------- update target networks ----------------------- #
            if self.bug == "soft_update_args_swapped":
                self.soft_update(self.critic1_target, self.critic1, TAU)
                self.soft_update(self.critic2_target, self.critic2, TAU)
            else:
                self.soft_update(self.critic1, self.critic1_target, TAU)
                self.soft_update(self.critic2, self.critic2_target, TAU)
        self.last_critic_losses = (critic1_loss.item(), critic2_loss.item())  # (port) for train_step's return
                     

    
    def soft_update(self, local_model, target_model, tau):
        """Soft update model parameters.
        θ_target = τ*θ_local + (1 - τ)*θ_target
        Params
        ======
            local_model: PyTorch model (weights will be copied from)
            target_model: PyTorch model (weights will be copied to)
            tau (float): interpolation parameter 
        """
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(tau*local_param.data + (1.0-tau)*target_param.data)

class ReplayBuffer:
    """Fixed-size buffer to store experience tuples."""

    def __init__(self, action_size, buffer_size, batch_size, seed, bug=None):
        """Initialize a ReplayBuffer object.
        Params
        ======
            buffer_size (int): maximum size of buffer
            batch_size (int): size of each training batch
        """
        self.action_size = action_size
        self.memory = deque(maxlen=buffer_size)  # internal memory (deque)
        self.batch_size = batch_size
        self.experience = namedtuple("Experience", field_names=["state", "action", "reward", "next_state", "done"])
        self.seed = random.seed(seed)
        self.bug = bug  # (port) the bug switch

    def add(self, state, action, reward, next_state, done):
        """Add a new experience to memory."""
        e = self.experience(state, action, reward, next_state, done)
        self.memory.append(e)
    
    def sample(self):
        """Randomly sample a batch of experiences from memory."""
        experiences = random.sample(self.memory, k=self.batch_size)
        
        states = torch.from_numpy(np.vstack([e.state for e in experiences if e is not None])).float().to(device)
        actions = torch.from_numpy(np.vstack([e.action for e in experiences if e is not None])).float().to(device)
        if self.bug == "rewards_hstacked":
            rewards = torch.from_numpy(np.hstack([e.reward for e in experiences if e is not None])).float().to(device)
        else:
            rewards = torch.from_numpy(np.vstack([e.reward for e in experiences if e is not None])).float().to(device)
        next_states = torch.from_numpy(np.vstack([e.next_state for e in experiences if e is not None])).float().to(device)
        dones = torch.from_numpy(np.vstack([e.done for e in experiences if e is not None]).astype(np.uint8)).float().to(device)

        return (states, actions, rewards, next_states, dones)

    def __len__(self):
        """Return the current size of internal memory."""
        return len(self.memory)


def _build(seed, bug=None):
    env = Pendulum()
    action_high = env.action_space.high[0]
    action_low = env.action_space.low[0]
    torch.manual_seed(seed)
    env.seed(seed)
    np.random.seed(seed)
    state_size = env.observation_space.shape[0]
    action_size = env.action_space.shape[0]
    agent = Agent(state_size=state_size, action_size=action_size, random_seed=seed, hidden_size=HIDDEN_SIZE,
                  action_prior="uniform", bug=bug)  # "normal"

    def SAC(n_episodes=200, max_t=500, print_every=10):
        scores_deque = deque(maxlen=100)
        average_100_scores = []

        for i_episode in range(1, n_episodes+1):

            state = env.reset()
            state = state.reshape((1,state_size))
            score = 0
            for t in range(max_t):
                if len(agent.memory) == BATCH_SIZE:
                    yield None  # (port) the build stops here, before the first update

                action = agent.act(state)
                action_v = action.numpy()
                action_v = np.clip(action_v*action_high, action_low, action_high)
                next_state, reward, done, info = env.step(action_v)
                next_state = next_state.reshape((1,state_size))
                agent.step(state, action, reward, next_state, done, t)
                state = next_state
                score += reward
                if len(agent.memory) > BATCH_SIZE:
                    yield sum(agent.last_critic_losses)  # (port) one update done

                if done:
                    break 

            scores_deque.append(score)
            average_100_scores.append(np.mean(scores_deque))

    steps = SAC(n_episodes=100, max_t=500)
    while next(steps) is not None:
        pass

    states, actions, rewards, next_states, dones = agent.memory.sample()
    batch = ({"state": states, "action": actions}, (rewards, next_states, dones))

    def loss_fn(Q_1, targets):
        """learn()'s critic1_loss on critic1's output for ``batch`` (the same lines)."""
        rewards, next_states, dones = targets
        with torch.no_grad():
            next_action, log_pis_next = agent.actor_local.evaluate(next_states)
            Q_target1_next = agent.critic1_target(next_states.to(device), next_action.squeeze(0).to(device))
            Q_target2_next = agent.critic2_target(next_states.to(device), next_action.squeeze(0).to(device))
            Q_target_next = torch.min(Q_target1_next, Q_target2_next)
            Q_targets = rewards.cpu() + (GAMMA * (1 - dones.cpu()) * (Q_target_next.cpu() - agent.alpha * log_pis_next.squeeze(0).cpu()))
        return 0.5*F.mse_loss(Q_1, Q_targets.detach())

    return Program(name="sacext_pendulum", model=agent.critic1, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic1_optimizer, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # the rewards stacked with np.hstack into [B] instead of np.vstack's [B, 1] (classic): the Bellman target
    # broadcasts to [B, B] against the critics' [B, 1] and every Q regresses on every transition's reward.
    Bug("rewards_hstacked", functools.partial(_build, bug="rewards_hstacked"), "learning_ledger", ("OBJECTIVE",)),
    # the target's next action drawn at the current states instead of next_states (classic copy slip): the
    # target critics score (s', a(s)), an action the policy never takes at s'.
    Bug("next_action_from_states", functools.partial(_build, bug="next_action_from_states"), "learning_ledger",
        ("TASK",)),
    # soft_update's local and target models swapped (classic argument-order slip): after each critic step the
    # critic is dragged back toward a target network that never moves.
    Bug("soft_update_args_swapped", functools.partial(_build, bug="soft_update_args_swapped"), "step_probe",
        ("fc1.weight",)),
]
