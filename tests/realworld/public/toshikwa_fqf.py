# ruff: noqa: RUF059
"""Fully parameterized Quantile Function (FQF, Yang et al. 2019) from toshikwa/fqf-iqn-qrdqn.pytorch: a fraction
proposal network turns the state embedding into N+1 cumulative fractions ``taus`` (log-softmax, cumsum), a cosine
embedding of the midpoints ``tau_hats`` is multiplied into the state embedding and a quantile network gives the
quantile values at them; the quantile values are trained with the quantile Huber loss against the target network's
quantiles of the greedy next action (Adam), and the fractions with the explicit W1 gradient of Proposition 1 as
the loss ``(gradient_of_taus * taus[:, 1:-1]).sum(1).mean()`` (RMSprop); replay memory, epsilon-greedy with a
linearly annealed epsilon, hard target updates.

Source: https://github.com/toshikwa/fqf-iqn-qrdqn.pytorch
Commit: 11d70bb428e449fe5384654c05e4ab2c3bbdd4cd
Files: ``fqf_iqn_qrdqn/agent/fqf_agent.py`` (``FQFAgent``), ``fqf_iqn_qrdqn/agent/base_agent.py`` (``BaseAgent``),
``fqf_iqn_qrdqn/model/fqf.py`` (``FQF``), ``fqf_iqn_qrdqn/model/base_model.py``, ``fqf_iqn_qrdqn/network.py``
(``FractionProposalNetwork``, ``CosineEmbeddingNetwork``, ``QuantileNetwork``, ``DQNBase``),
``fqf_iqn_qrdqn/utils.py``, ``fqf_iqn_qrdqn/memory/base.py`` (``LazyMemory``), ``config/fqf.yaml``; the network,
model, memory and utils files are copied into ``_toshikwa_fqf_lib.py``
License: MIT (Copyright (c) 2020 Toshiki Watanabe; full text in LICENSES/toshikwa-fqf-iqn-qrdqn.pytorch.txt)
Domain: RL, distributional value-based (FQF: learned quantile fractions, IQN-style cosine embedding, replay)

Kept as written: ``FractionProposalNetwork`` (xavier gain 0.01, taus by cumsum of the softmax, detached
``tau_hats``, entropies), ``CosineEmbeddingNetwork``, ``QuantileNetwork`` (512 hidden units, no dueling or noisy
net as in ``config/fqf.yaml``), ``FQF`` (``calculate_fractions``, ``calculate_quantiles``, ``calculate_q`` with the
target net using the online fraction net), ``utils`` (``update_params``, ``calculate_huber_loss``,
``calculate_quantile_huber_loss``, ``evaluate_quantile_at_action``, ``LinearAnneaer``, ``disable_gradients``),
``FQFAgent`` (the two optimizers: RMSprop lr 2.5e-9, alpha 0.95, eps 1e-5 over the fraction net and Adam eps
1e-2/batch_size over the other three nets; ``update_target`` of the three nets; ``learn``,
``calculate_fraction_loss``, ``calculate_quantile_loss`` as written, the fraction loss's backward with
``retain_graph=True`` first), ``BaseAgent``'s ``is_update``, ``is_random``, ``explore``, ``exploit`` and the body of
``train_episode`` / ``train_step_interval``; config: batch 32, N 32, num_cosines 64, ent_coef 0, kappa 1,
gamma 0.99, multi_step 1, update_interval 4, epsilon_train 0.01, no gradient clipping.

Deviations from the original:
- Atari is not here: the environment is the cart-pole written out in numpy in ``_cartpole.py`` (seeded from
  ``seed``; ``done`` is the pole falling, the 500-step truncation ends the episode without ``done``), so
  ``DQNBase``'s three convolutions over 84x84 frames become two ``Linear`` + ReLU layers over the 4 state numbers
  (``embedding_dim`` 7*7*64 -> 64, He initialization kept), and states are stored as float32 rather than uint8
  frames divided by 255;
- sizes for 2 CPU cores: memory_size 1e6 -> 10000, start_steps 50000 -> 200 (filled at build time),
  target_update_interval 10000 -> 200, epsilon_decay_steps 250000 -> 2000 (quantile_lr 5e-5 kept);
- ``train_episode``'s loop is driven one environment step at a time; one ``train_step`` runs steps until
  ``learn`` has run once and returns ``quantile_loss`` (``learn`` returns it); the tensorboard writer, the printing,
  ``evaluate`` and the model saving are dropped; the multi-step and prioritized memories (unused by
  ``config/fqf.yaml``) are left out;
- ``FQF`` has no ``forward`` (the agent calls its methods): the Program declares ``OnlineQuantiles``, the online
  net's quantile values at its own proposed ``tau_hats`` on a batch of states, with ``calculate_quantile_loss`` as
  ``loss_fn`` on transitions collected at build time;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.optim import Adam, RMSprop

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole
from _toshikwa_fqf_lib import (
    FQF,
    LazyMemory,
    LinearAnneaer,
    calculate_quantile_huber_loss,
    disable_gradients,
    evaluate_quantile_at_action,
    update_params,
)


# fqf_iqn_qrdqn/agent/base_agent.py + fqf_agent.py
class FQFAgent:

    def __init__(self, env, num_steps=5*(10**7), batch_size=32, N=32, num_cosines=64, ent_coef=0,
                 kappa=1.0, quantile_lr=5e-5, fraction_lr=2.5e-9, memory_size=10**6, gamma=0.99,
                 multi_step=1, update_interval=4, target_update_interval=10000, start_steps=50000,
                 epsilon_train=0.01, epsilon_decay_steps=250000, double_q_learning=False,
                 grad_cliping=None, seed=0, bug=None):
        self.env = env
        torch.manual_seed(seed)
        np.random.seed(seed)
        self.device = torch.device("cpu")
        self.memory = LazyMemory(memory_size, (4,), self.device)
        self.steps = 0
        self.learning_steps = 0
        self.num_actions = 2  # (port) self.env.action_space.n
        self.batch_size = batch_size
        self.double_q_learning = double_q_learning
        self.noisy_net = False
        self.use_per = False
        self.gamma_n = gamma ** multi_step
        self.start_steps = start_steps
        self.epsilon_train = LinearAnneaer(1.0, epsilon_train, epsilon_decay_steps)
        self.update_interval = update_interval
        self.target_update_interval = target_update_interval
        self.grad_cliping = grad_cliping
        self.bug = bug

        # Online network.
        self.online_net = FQF(num_channels=4, num_actions=self.num_actions, N=N, num_cosines=num_cosines)
        # Target network.
        self.target_net = FQF(num_channels=4, num_actions=self.num_actions, N=N, num_cosines=num_cosines,
                              target=True)
        # Copy parameters of the learning network to the target network.
        self.update_target()
        # Disable calculations of gradients of the target network.
        disable_gradients(self.target_net)

        self.fraction_optim = RMSprop(
            self.online_net.fraction_net.parameters(),
            lr=fraction_lr, alpha=0.95, eps=0.00001)
        cosine = [] if bug == "cosine_net_left_out_of_optimizer" else list(self.online_net.cosine_net.parameters())
        self.quantile_optim = Adam(
            list(self.online_net.dqn_net.parameters())
            + cosine
            + list(self.online_net.quantile_net.parameters()),
            lr=quantile_lr, eps=1e-2/batch_size)

        self.ent_coef = ent_coef
        self.N = N
        self.num_cosines = num_cosines
        self.kappa = kappa

    def is_update(self):
        return self.steps % self.update_interval == 0\
            and self.steps >= self.start_steps

    def is_random(self, eval=False):
        # Use e-greedy for evaluation.
        if self.steps < self.start_steps:
            return True
        return np.random.rand() < self.epsilon_train.get()

    def explore(self):
        # Act with randomness.
        return np.random.randint(self.num_actions)  # (port) self.env.action_space.sample()

    def exploit(self, state):
        # Act without randomness.
        state = torch.FloatTensor(state).unsqueeze(0).to(self.device)  # (port) uint8 frame / 255.
        with torch.no_grad():
            action = self.online_net.calculate_q(states=state).argmax().item()
        return action

    def update_target(self):
        self.target_net.dqn_net.load_state_dict(
            self.online_net.dqn_net.state_dict())
        self.target_net.quantile_net.load_state_dict(
            self.online_net.quantile_net.state_dict())
        self.target_net.cosine_net.load_state_dict(
            self.online_net.cosine_net.state_dict())

    def env_step(self):
        """(port) One iteration of ``train_episode``'s while loop (the episode reset when the last one ended)."""
        if self.state is None:
            self.state, _ = self.env.reset()
        self.online_net.sample_noise()
        if self.is_random(eval=False):
            action = self.explore()
        else:
            action = self.exploit(self.state)
        next_state, reward, done, truncated, _ = self.env.step(action)
        self.memory.append(self.state, action, reward, next_state, done)
        self.steps += 1
        self.state = None if (done or truncated) else next_state
        self.train_step_interval()

    def train_step_interval(self):
        self.epsilon_train.step()
        if self.steps % self.target_update_interval == 0:
            self.update_target()
        if self.is_update():
            self.last_loss = self.learn()

    def learn(self):
        self.learning_steps += 1
        self.online_net.sample_noise()
        self.target_net.sample_noise()

        states, actions, rewards, next_states, dones =\
            self.memory.sample(self.batch_size)
        weights = None

        # Calculate embeddings of current states.
        state_embeddings = self.online_net.calculate_state_embeddings(states)

        # Calculate fractions of current states and entropies.
        taus, tau_hats, entropies =\
            self.online_net.calculate_fractions(
                state_embeddings=state_embeddings.detach())

        # Calculate quantile values of current states and actions at tau_hats.
        current_sa_quantile_hats = evaluate_quantile_at_action(
            self.online_net.calculate_quantiles(
                tau_hats, state_embeddings=state_embeddings),
            actions)
        assert current_sa_quantile_hats.shape == (
            self.batch_size, self.N, 1)

        # NOTE: Detach state_embeddings not to update convolution layers. Also,
        # detach current_sa_quantile_hats because I calculate gradients of taus
        # explicitly, not by backpropagation.
        fraction_loss = self.calculate_fraction_loss(
            state_embeddings.detach(), current_sa_quantile_hats.detach(),
            taus, actions, weights)

        quantile_loss, mean_q, errors = self.calculate_quantile_loss(
            state_embeddings, tau_hats, current_sa_quantile_hats, actions,
            rewards, next_states, dones, weights)
        assert errors.shape == (self.batch_size, 1)

        entropy_loss = -self.ent_coef * entropies.mean()

        update_params(
            self.fraction_optim, fraction_loss + entropy_loss,
            networks=[self.online_net.fraction_net], retain_graph=True,
            grad_cliping=self.grad_cliping)
        update_params(
            self.quantile_optim, quantile_loss,
            networks=[
                self.online_net.dqn_net, self.online_net.cosine_net,
                self.online_net.quantile_net],
            retain_graph=False, grad_cliping=self.grad_cliping)
        return quantile_loss.detach().item()  # (port) the tensorboard logging is dropped

    def calculate_fraction_loss(self, state_embeddings, sa_quantile_hats, taus,
                                actions, weights):
        assert not state_embeddings.requires_grad
        assert not sa_quantile_hats.requires_grad

        batch_size = state_embeddings.shape[0]

        with torch.no_grad():
            sa_quantiles = evaluate_quantile_at_action(
                self.online_net.calculate_quantiles(
                    taus=taus[:, 1:-1], state_embeddings=state_embeddings),
                actions)
            assert sa_quantiles.shape == (batch_size, self.N-1, 1)

        values_1 = sa_quantiles - sa_quantile_hats[:, :-1]
        signs_1 = sa_quantiles > torch.cat([
            sa_quantile_hats[:, :1], sa_quantiles[:, :-1]], dim=1)

        values_2 = sa_quantiles - sa_quantile_hats[:, 1:]
        signs_2 = sa_quantiles < torch.cat([
            sa_quantiles[:, 1:], sa_quantile_hats[:, -1:]], dim=1)

        gradient_of_taus = (
            torch.where(signs_1, values_1, -values_1)
            + torch.where(signs_2, values_2, -values_2)
        ).view(batch_size, self.N-1)
        assert not gradient_of_taus.requires_grad

        # Gradients of the network parameters and corresponding loss
        # are calculated using chain rule.
        fraction_loss = \
            (gradient_of_taus * taus[:, 1:-1]).sum(dim=1).mean()

        return fraction_loss

    def calculate_quantile_loss(self, state_embeddings, tau_hats,
                                current_sa_quantile_hats, actions, rewards,
                                next_states, dones, weights):
        assert not tau_hats.requires_grad

        with torch.no_grad():
            # Calculate Q values of next states.
            next_state_embeddings =\
                self.target_net.calculate_state_embeddings(next_states)
            next_q = self.target_net.calculate_q(
                state_embeddings=next_state_embeddings,
                fraction_net=self.online_net.fraction_net)

            # Calculate greedy actions.
            next_actions = torch.argmax(next_q, dim=1, keepdim=True)

            # Calculate quantile values of next states and actions at tau_hats.
            next_sa_quantile_hats = evaluate_quantile_at_action(
                self.target_net.calculate_quantiles(
                    taus=tau_hats, state_embeddings=next_state_embeddings),
                next_actions).transpose(1, 2)
            assert next_sa_quantile_hats.shape == (
                self.batch_size, 1, self.N)

            # Calculate target quantile values.
            not_done = 1.0 if self.bug == "dones_dropped" else (1.0 - dones[..., None])
            target_sa_quantile_hats = rewards[..., None] + (
                not_done) * self.gamma_n * next_sa_quantile_hats

        td_errors = target_sa_quantile_hats - current_sa_quantile_hats
        assert td_errors.shape == (self.batch_size, self.N, self.N)

        quantile_huber_loss = calculate_quantile_huber_loss(
            td_errors, tau_hats, weights, self.kappa, bug=self.bug)

        return quantile_huber_loss, next_q.detach().mean().item(), \
            td_errors.detach().abs().sum(dim=1).mean(dim=1, keepdim=True)


class OnlineQuantiles(nn.Module):
    """(port) The online net's quantile values at its own proposed fractions, for the Program's batch."""

    def __init__(self, online_net):
        super().__init__()
        self.online_net = online_net

    def forward(self, states):
        state_embeddings = self.online_net.calculate_state_embeddings(states)
        _, tau_hats, _ = self.online_net.calculate_fractions(state_embeddings=state_embeddings.detach())
        return self.online_net.calculate_quantiles(tau_hats, state_embeddings=state_embeddings), tau_hats


def _build(seed, bug=None):
    env = CartPole(seed)  # (port) make_pytorch_env(args.env_id)
    agent = FQFAgent(env, batch_size=32, N=32, num_cosines=64, ent_coef=0, kappa=1.0, quantile_lr=5e-5,
                     fraction_lr=2.5e-9, memory_size=10000, gamma=0.99, multi_step=1, update_interval=4,
                     target_update_interval=200, start_steps=200, epsilon_train=0.01, epsilon_decay_steps=2000,
                     grad_cliping=None, seed=seed, bug=bug)
    agent.state = None
    while agent.steps < agent.start_steps:  # (port) the random warm-up, at build time
        agent.env_step()
    np_state = np.random.get_state()
    states, actions, rewards, next_states, dones = agent.memory.sample(agent.batch_size)
    np.random.set_state(np_state)
    batch = (states, (actions, rewards, next_states, dones))

    def loss_fn(outputs, targets):
        quantiles, tau_hats = outputs
        actions, rewards, next_states, dones = targets
        current = evaluate_quantile_at_action(quantiles, actions)
        return agent.calculate_quantile_loss(None, tau_hats, current, actions, rewards, next_states, dones,
                                             None)[0]

    def train_step():
        done_before = agent.learning_steps
        while agent.learning_steps == done_before:
            agent.env_step()
        return agent.last_loss

    return Program(name="toshikwa_fqf", model=OnlineQuantiles(agent.online_net), batch=batch, loss_fn=loss_fn,
                   optimizer=agent.quantile_optim, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip of the quantile Huber loss: the indicator 1{u < 0} written 1{u > 0}, so every quantile is
    # pushed towards its mirror fraction 1 - tau (the sign question of ufal/npfl139#17 for another QR loss).
    Bug("quantile_indicator_flipped", functools.partial(_build, bug="quantile_indicator_flipped"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: the (1 - dones) factor dropped from the target quantiles, so a pole that fell still bootstraps.
    Bug("dones_dropped", functools.partial(_build, bug="dones_dropped"), "learning_ledger", ("TASK",)),
    # classic: the cosine embedding network's parameters left out of quantile_optim's list of three networks.
    Bug("cosine_net_left_out_of_optimizer", functools.partial(_build, bug="cosine_net_left_out_of_optimizer"),
        "four_structures", ("cosine_net",)),
]
