"""Dueling double DQN from p-christ's Deep-Reinforcement-Learning-Algorithms-with-PyTorch on the cart-pole: an
``nn_builder`` MLP (4 -> 30 -> 15 -> 3, ReLU) whose last output is the state value and the rest the advantages
(``calculate_duelling_q_values``: V + A - mean(A)), double-DQN targets (the local network picks the next action,
the target network values it, ``(1 - dones)``), ``F.mse_loss``, Adam lr 0.01 eps 1e-4, ``clip_grad_norm_(0.7)``,
a soft target update (tau 0.01) after every learning step, epsilon-greedy exploration with epsilon 1 / (1 + episode).

Source: https://github.com/p-christ/Deep-Reinforcement-Learning-Algorithms-with-PyTorch
Commit: 4835bac8557fdacff1735eca004e35ea5a4b7443
Files: results/Cart_Pole.py (the config), agents/DQN_agents/Dueling_DDQN.py, agents/DQN_agents/DDQN.py,
agents/DQN_agents/DQN_With_Fixed_Q_Targets.py, agents/DQN_agents/DQN.py, agents/Base_Agent.py,
utilities/data_structures/Replay_Buffer.py, exploration_strategies/Epsilon_Greedy_Exploration.py; the network is
``nn_builder.pytorch.NN`` from https://github.com/p-christ/nn_builder (commit
d58182e579c976f722b140218a333d74c4c6979f, MIT, LICENSES/p-christ-nn_builder.txt), the package Base_Agent imports.
License: MIT (Copyright (c) 2021 Petros Christodoulou; full text in
LICENSES/p-christ-Deep-Reinforcement-Learning-Algorithms-with-PyTorch.txt)
Domain: RL, value-based (dueling double DQN, replay, soft target updates)

Kept as written: the "DQN_Agents" hyperparameters of results/Cart_Pole.py (learning_rate 0.01, batch_size 256,
buffer_size 40000, epsilon_decay_rate_denominator 1, discount_rate 0.99, tau 0.01, update_every_n_steps 1,
linear_hidden_units [30, 15], final_layer_activation "None", gradient_clipping_norm 0.7, learning_iterations 1,
clip_rewards False); ``Dueling_DDQN`` (networks with ``action_size + 1`` outputs, ``pick_action``,
``compute_q_values_for_next_states``, ``calculate_duelling_q_values``, ``compute_expected_q_values``); the learning
path of ``DQN`` (``step``'s loop body, ``learn``, ``compute_loss`` with the targets under ``no_grad``,
``compute_q_targets``, ``compute_q_values_for_current_states``) and ``DQN_With_Fixed_Q_Targets.learn`` (the soft
update); ``Base_Agent`` (``reset_game`` reseeding the environment, ``conduct_action``, ``save_experience``,
``take_optimisation_step``, ``soft_update_of_target_network``, ``copy_model_over``, ``update_learning_rate``,
``create_NN``, ``set_random_seeds``); ``Replay_Buffer``; ``Epsilon_Greedy_Exploration``; nn_builder's ``NN`` for
this configuration (hidden ``Linear`` + ReLU layers, one output ``Linear``, PyTorch's default initialisation, the
seed set before the layers are made, so local and target networks start equal).

Deviations from the original:
- gym is not installed: ``gym.make("CartPole-v0")`` is replaced by ``GymCartPole`` below, the cart-pole written out
  in ``_cartpole.py`` with the old gym API the agent calls (``seed``, ``reset`` returning the state, ``step``
  returning four values with ``done`` = terminated or the time limit; the limit is _cartpole's 500 steps, v0 has 200).
- nn_builder is not installed: its ``NN`` is written out below for the options ``create_NN`` passes here (no
  embeddings, batch norm, dropout or y_range; the input checks of ``check_input_data_into_forward_once`` are
  left out).
- ``Trainer`` / ``run_n_episodes`` are not run: at build time the agent plays (``step``'s loop body without
  learning, as the original does while the buffer holds <= batch_size experiences) until the buffer holds more than
  batch_size experiences; ``train_step`` is one iteration of ``step``'s ``while not self.done`` body (pick, act,
  learn, save, advance); when an episode ends it does what ``run_n_episodes`` does between episodes
  (``save_result``, ``episode_number += 1``, ``reset_game``). ``learn`` returns its loss (the original returns
  nothing). Logging, printing, results files and the tensorboard/debug branches are dropped.
- the seed is ``config.seed`` (the repository's ``set_random_seeds`` seeds python, numpy and torch with it).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B020, PIE790, PLC0206, PLR0402, PLR1704, SIM118, UP004
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import os
import pathlib
import random
import sys
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

HYPERPARAMETERS = {
    "learning_rate": 0.01,
    "batch_size": 256,
    "buffer_size": 40000,
    "epsilon": 1.0,
    "epsilon_decay_rate_denominator": 1,
    "discount_rate": 0.99,
    "tau": 0.01,
    "alpha_prioritised_replay": 0.6,
    "beta_prioritised_replay": 0.1,
    "incremental_td_error": 1e-8,
    "update_every_n_steps": 1,
    "linear_hidden_units": [30, 15],
    "final_layer_activation": "None",
    "batch_norm": False,
    "gradient_clipping_norm": 0.7,
    "learning_iterations": 1,
    "clip_rewards": False
}


class GymCartPole:
    """gym.make("CartPole-v0") with the old API (the environment is the synthetic data here)."""

    reward_threshold = 195.0

    def __init__(self, seed):
        self.env = CartPole(seed)

    def seed(self, seed):
        self.env.rng = np.random.default_rng(seed)

    def reset(self):
        return self.env.reset()[0]

    def step(self, action):
        s, r, terminated, truncated, info = self.env.step(action)
        return s, r, terminated or truncated, info


# ---- nn_builder/pytorch/NN.py (the options create_NN passes here) -------------------------------------------------

class NN(nn.Module):
    def __init__(self, input_dim, layers_info, output_activation=None, hidden_activations="relu", random_seed=0):
        nn.Module.__init__(self)
        self.set_all_random_seeds(random_seed)
        self.input_dim = input_dim
        self.layers_info = layers_info
        self.hidden_activations = hidden_activations
        self.output_activation = output_activation
        self.str_to_activations_converter = {"relu": nn.ReLU(), "none": None}
        self.hidden_layers = self.create_hidden_layers()
        self.output_layers = self.create_output_layers()

    def set_all_random_seeds(self, random_seed):
        """Sets all possible random seeds so results can be reproduced"""
        torch.manual_seed(random_seed)
        random.seed(random_seed)
        np.random.seed(random_seed)

    def get_activation(self, activations, ix=None):
        """Gets the activation function"""
        if isinstance(activations, list):
            return self.str_to_activations_converter[str(activations[ix]).lower()]
        return self.str_to_activations_converter[str(activations).lower()]

    def create_hidden_layers(self):
        """Creates the linear layers in the network"""
        linear_layers = nn.ModuleList([])
        input_dim = int(self.input_dim)
        for hidden_unit in self.layers_info[:-1]:
            linear_layers.extend([nn.Linear(input_dim, hidden_unit)])
            input_dim = hidden_unit
        return linear_layers

    def create_output_layers(self):
        """Creates the output layers in the network"""
        output_layers = nn.ModuleList([])
        if len(self.layers_info) >= 2: input_dim = self.layers_info[-2]
        else: input_dim = self.input_dim
        if not isinstance(self.layers_info[-1], list): output_layer = [self.layers_info[-1]]
        else: output_layer = self.layers_info[-1]
        for output_dim in output_layer:
            output_layers.extend([nn.Linear(input_dim, output_dim)])
        return output_layers

    def forward(self, x):
        """Forward pass for the network"""
        x = self.process_hidden_layers(x)
        out = self.process_output_layers(x)
        return out

    def process_hidden_layers(self, x):
        """Puts the data x through all the hidden layers"""
        for layer_ix, linear_layer in enumerate(self.hidden_layers):
            x = self.get_activation(self.hidden_activations, layer_ix)(linear_layer(x))
        return x

    def process_output_layers(self, x):
        """Puts the data x through all the output layers"""
        out = None
        for output_layer_ix, output_layer in enumerate(self.output_layers):
            activation = self.get_activation(self.output_activation, output_layer_ix)
            temp_output = output_layer(x)
            if activation is not None: temp_output = activation(temp_output)
            if out is None: out = temp_output
            else: out = torch.cat((out, temp_output), dim=1)
        return out


# ---- utilities/data_structures/Replay_Buffer.py -------------------------------------------------------------------

class Replay_Buffer(object):
    """Replay buffer to store past experiences that the agent can then use for training data"""

    def __init__(self, buffer_size, batch_size, seed, device=None):

        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        self.experience = namedtuple("Experience", field_names=["state", "action", "reward", "next_state", "done"])
        self.seed = random.seed(seed)
        self.device = torch.device(device)

    def add_experience(self, states, actions, rewards, next_states, dones):
        """Adds experience(s) into the replay buffer"""
        if type(dones) == list:
            assert type(dones[0]) != list, "A done shouldn't be a list"
            experiences = [self.experience(state, action, reward, next_state, done)
                           for state, action, reward, next_state, done in
                           zip(states, actions, rewards, next_states, dones)]
            self.memory.extend(experiences)
        else:
            experience = self.experience(states, actions, rewards, next_states, dones)
            self.memory.append(experience)

    def sample(self, num_experiences=None, separate_out_data_types=True):
        """Draws a random sample of experience from the replay buffer"""
        experiences = self.pick_experiences(num_experiences)
        if separate_out_data_types:
            states, actions, rewards, next_states, dones = self.separate_out_data_types(experiences)
            return states, actions, rewards, next_states, dones
        else:
            return experiences

    def separate_out_data_types(self, experiences):
        """Puts the sampled experience into the correct format for a PyTorch neural network"""
        states = torch.from_numpy(np.vstack([e.state for e in experiences if e is not None])).float().to(self.device)
        actions = torch.from_numpy(np.vstack([e.action for e in experiences if e is not None])).float().to(self.device)
        rewards = torch.from_numpy(np.vstack([e.reward for e in experiences if e is not None])).float().to(self.device)
        next_states = torch.from_numpy(np.vstack([e.next_state for e in experiences if e is not None])).float().to(self.device)
        dones = torch.from_numpy(np.vstack([int(e.done) for e in experiences if e is not None])).float().to(self.device)

        return states, actions, rewards, next_states, dones

    def pick_experiences(self, num_experiences=None):
        if num_experiences is not None: batch_size = num_experiences
        else: batch_size = self.batch_size
        return random.sample(self.memory, k=batch_size)

    def __len__(self):
        return len(self.memory)


# ---- exploration_strategies/Epsilon_Greedy_Exploration.py ---------------------------------------------------------

class Epsilon_Greedy_Exploration:
    """Implements an epsilon greedy exploration strategy"""
    def __init__(self, config):
        self.config = config
        self.exploration_cycle_episodes_length = None
        self.random_episodes_to_run = 0

    def perturb_action_for_exploration_purposes(self, action_info):
        """Perturbs the action of the agent to encourage exploration"""
        action_values = action_info["action_values"]
        turn_off_exploration = action_info["turn_off_exploration"]
        episode_number = action_info["episode_number"]
        epsilon = self.get_updated_epsilon_exploration(action_info)

        if (random.random() > epsilon or turn_off_exploration) and (episode_number >= self.random_episodes_to_run):
            return torch.argmax(action_values).item()
        return  np.random.randint(0, action_values.shape[1])

    def get_updated_epsilon_exploration(self, action_info, epsilon=1.0):
        """Gets the probability that we just pick a random action. This probability decays the more episodes we have seen"""
        episode_number = action_info["episode_number"]
        epsilon_decay_denominator = self.config.hyperparameters["epsilon_decay_rate_denominator"]
        epsilon = epsilon / (1.0 + (episode_number / epsilon_decay_denominator))
        return epsilon

    def reset(self):
        """Resets the noise process"""
        pass


# ---- agents/Base_Agent.py, agents/DQN_agents/ (the learning path of Dueling_DDQN) ------------------------------------

class Dueling_DDQN(object):
    """Base_Agent + DQN + DQN_With_Fixed_Q_Targets + DDQN + Dueling_DDQN, flattened along the method resolution."""
    agent_name = "Dueling DDQN"

    def __init__(self, config, bug=None):
        # Base_Agent.__init__
        self.config = config
        self.bug = bug
        self.set_random_seeds(config.seed)
        self.environment = config.environment
        self.action_size = 2
        self.state_size = 4
        self.hyperparameters = config.hyperparameters
        self.average_score_required_to_win = self.environment.reward_threshold
        self.rolling_score_window = 100
        self.total_episode_score_so_far = 0
        self.game_full_episode_scores = []
        self.rolling_results = []
        self.episode_number = 0
        self.device = "cpu"
        self.global_step_number = 0
        self.turn_off_exploration = False
        # DQN.__init__
        self.memory = Replay_Buffer(self.hyperparameters["buffer_size"], self.hyperparameters["batch_size"], config.seed, self.device)
        self.q_network_local = self.create_NN(input_dim=self.state_size, output_dim=self.action_size)
        self.q_network_optimizer = optim.Adam(self.q_network_local.parameters(),
                                              lr=self.hyperparameters["learning_rate"], eps=1e-4)
        self.exploration_strategy = Epsilon_Greedy_Exploration(config)
        # DQN_With_Fixed_Q_Targets.__init__
        self.q_network_target = self.create_NN(input_dim=self.state_size, output_dim=self.action_size)
        self.copy_model_over(from_model=self.q_network_local, to_model=self.q_network_target)
        # Dueling_DDQN.__init__
        self.q_network_local = self.create_NN(input_dim=self.state_size, output_dim=self.action_size + 1)
        self.q_network_optimizer = optim.Adam(self.q_network_local.parameters(), lr=self.hyperparameters["learning_rate"], eps=1e-4)
        self.q_network_target = self.create_NN(input_dim=self.state_size, output_dim=self.action_size + 1)
        self.copy_model_over(from_model=self.q_network_local, to_model=self.q_network_target)

    # -- Base_Agent --
    def set_random_seeds(self, random_seed):
        """Sets all possible random seeds so results can be reproduced"""
        os.environ['PYTHONHASHSEED'] = str(random_seed)
        torch.manual_seed(random_seed)
        random.seed(random_seed)
        np.random.seed(random_seed)

    def reset_game(self):
        """Resets the game information so we are ready to play a new episode"""
        self.environment.seed(self.config.seed)
        self.state = self.environment.reset()
        self.next_state = None
        self.action = None
        self.reward = None
        self.done = False
        self.total_episode_score_so_far = 0
        if "exploration_strategy" in self.__dict__.keys(): self.exploration_strategy.reset()
        # DQN.reset_game
        self.update_learning_rate(self.hyperparameters["learning_rate"], self.q_network_optimizer)

    def conduct_action(self, action):
        """Conducts an action in the environment"""
        self.next_state, self.reward, self.done, _ = self.environment.step(action)
        self.total_episode_score_so_far += self.reward
        if self.hyperparameters["clip_rewards"]: self.reward =  max(min(self.reward, 1.0), -1.0)

    def save_result(self):
        """Saves the result of an episode of the game"""
        self.game_full_episode_scores.append(self.total_episode_score_so_far)
        self.rolling_results.append(np.mean(self.game_full_episode_scores[-1 * self.rolling_score_window:]))

    def update_learning_rate(self, starting_lr,  optimizer):
        """Lowers the learning rate according to how close we are to the solution"""
        if len(self.rolling_results) > 0:
            last_rolling_score = self.rolling_results[-1]
            if last_rolling_score > 0.75 * self.average_score_required_to_win:
                new_lr = starting_lr / 100.0
            elif last_rolling_score > 0.6 * self.average_score_required_to_win:
                new_lr = starting_lr / 20.0
            elif last_rolling_score > 0.5 * self.average_score_required_to_win:
                new_lr = starting_lr / 10.0
            elif last_rolling_score > 0.25 * self.average_score_required_to_win:
                new_lr = starting_lr / 2.0
            else:
                new_lr = starting_lr
            for g in optimizer.param_groups:
                g['lr'] = new_lr

    def enough_experiences_to_learn_from(self):
        """Boolean indicated whether there are enough experiences in the memory buffer to learn from"""
        return len(self.memory) > self.hyperparameters["batch_size"]

    def save_experience(self, memory=None, experience=None):
        """Saves the recent experience to the memory buffer"""
        if memory is None: memory = self.memory
        if experience is None: experience = self.state, self.action, self.reward, self.next_state, self.done
        memory.add_experience(*experience)

    def take_optimisation_step(self, optimizer, network, loss, clipping_norm=None, retain_graph=False):
        """Takes an optimisation step by calculating gradients given the loss and then updating the parameters"""
        if not isinstance(network, list): network = [network]
        optimizer.zero_grad() #reset gradients to 0
        loss.backward(retain_graph=retain_graph) #this calculates the gradients
        if clipping_norm is not None:
            for net in network:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clipping_norm) #clip gradients to help stabilise training
        optimizer.step() #this applies the gradients

    def soft_update_of_target_network(self, local_model, target_model, tau):
        """Updates the target network in the direction of the local network but by taking a step size
        less than one so the target network's parameter values trail the local networks. This helps stabilise training"""
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(tau*local_param.data + (1.0-tau)*target_param.data)

    def create_NN(self, input_dim, output_dim, key_to_use=None, override_seed=None, hyperparameters=None):
        """Creates a neural network for the agents to use"""
        if hyperparameters is None: hyperparameters = self.hyperparameters
        if key_to_use: hyperparameters = hyperparameters[key_to_use]
        if override_seed: seed = override_seed
        else: seed = self.config.seed

        default_hyperparameter_choices = {"output_activation": None, "hidden_activations": "relu", "dropout": 0.0,
                                          "initialiser": "default", "batch_norm": False,
                                          "columns_of_data_to_be_embedded": [],
                                          "embedding_dimensions": [], "y_range": ()}

        for key in default_hyperparameter_choices:
            if key not in hyperparameters.keys():
                hyperparameters[key] = default_hyperparameter_choices[key]

        return NN(input_dim=input_dim, layers_info=hyperparameters["linear_hidden_units"] + [output_dim],
                  output_activation=hyperparameters["final_layer_activation"],
                  hidden_activations=hyperparameters["hidden_activations"],
                  random_seed=seed).to(self.device)

    @staticmethod
    def copy_model_over(from_model, to_model):
        """Copies model parameters from from_model to to_model"""
        for to_model, from_model in zip(to_model.parameters(), from_model.parameters()):
            to_model.data.copy_(from_model.data.clone())

    # -- DQN --
    def step_once(self):
        """(port) one iteration of DQN.step's ``while not self.done`` loop"""
        self.action = self.pick_action()
        self.conduct_action(self.action)
        loss = None
        if self.time_for_q_network_to_learn():
            for _ in range(self.hyperparameters["learning_iterations"]):
                loss = self.learn()
        self.save_experience()
        self.state = self.next_state #this is to set the state for the next iteration
        self.global_step_number += 1
        return loss

    def learn(self, experiences=None):
        """Runs a learning iteration for the Q network"""
        # DQN.learn
        if experiences is None: states, actions, rewards, next_states, dones = self.sample_experiences() #Sample experiences
        else: states, actions, rewards, next_states, dones = experiences
        loss = self.compute_loss(states, next_states, rewards, actions, dones)
        self.take_optimisation_step(self.q_network_optimizer, self.q_network_local, loss, self.hyperparameters["gradient_clipping_norm"])
        # DQN_With_Fixed_Q_Targets.learn
        if self.bug == "soft_update_args_swapped":
            self.soft_update_of_target_network(self.q_network_target, self.q_network_local,
                                               self.hyperparameters["tau"])
        else:
            self.soft_update_of_target_network(self.q_network_local, self.q_network_target,
                                               self.hyperparameters["tau"])  # Update the target network
        return loss.detach()

    def compute_loss(self, states, next_states, rewards, actions, dones):
        """Computes the loss required to train the Q network"""
        with torch.no_grad():
            Q_targets = self.compute_q_targets(next_states, rewards, dones)
        Q_expected = self.compute_expected_q_values(states, actions)
        loss = F.mse_loss(Q_expected, Q_targets)
        return loss

    def compute_q_targets(self, next_states, rewards, dones):
        """Computes the q_targets we will compare to predicted q values to create the loss to train the Q network"""
        Q_targets_next = self.compute_q_values_for_next_states(next_states)
        Q_targets = self.compute_q_values_for_current_states(rewards, Q_targets_next, dones)
        return Q_targets

    def compute_q_values_for_current_states(self, rewards, Q_targets_next, dones):
        """Computes the q_values for current state we will use to create the loss to train the Q network"""
        if self.bug == "done_mask_dropped":
            return rewards + (self.hyperparameters["discount_rate"] * Q_targets_next)
        Q_targets_current = rewards + (self.hyperparameters["discount_rate"] * Q_targets_next * (1 - dones))
        return Q_targets_current

    def time_for_q_network_to_learn(self):
        """Returns boolean indicating whether enough steps have been taken for learning to begin and there are
        enough experiences in the replay buffer to learn from"""
        return self.right_amount_of_steps_taken() and self.enough_experiences_to_learn_from()

    def right_amount_of_steps_taken(self):
        """Returns boolean indicating whether enough steps have been taken for learning to begin"""
        return self.global_step_number % self.hyperparameters["update_every_n_steps"] == 0

    def sample_experiences(self):
        """Draws a random sample of experience from the memory buffer"""
        experiences = self.memory.sample()
        states, actions, rewards, next_states, dones = experiences
        return states, actions, rewards, next_states, dones

    # -- Dueling_DDQN --
    def pick_action(self, state=None):
        """Uses the local Q network and an epsilon greedy policy to pick an action"""
        # PyTorch only accepts mini-batches and not single observations so we have to use unsqueeze to add
        # a "fake" dimension to make it a mini-batch rather than a single observation
        if state is None: state = self.state
        state = torch.from_numpy(state).float().unsqueeze(0).to(self.device)
        if len(state.shape) < 2: state = state.unsqueeze(0)
        self.q_network_local.eval()
        with torch.no_grad():
            action_values = self.q_network_local(state)
            action_values = action_values[:, :-1] #because we treat the last output element as state-value and rest as advantages
        self.q_network_local.train()
        action = self.exploration_strategy.perturb_action_for_exploration_purposes({"action_values": action_values,
                                                                                    "turn_off_exploration": self.turn_off_exploration,
                                                                                    "episode_number": self.episode_number})
        return action

    def compute_q_values_for_next_states(self, next_states):
        """Computes the q_values for next state we will use to create the loss to train the Q network. Double DQN
        uses the local index to pick the maximum q_value action and then the target network to calculate the q_value.
        The reasoning behind this is that it will help stop the network from overestimating q values"""
        max_action_indexes = self.q_network_local(next_states)[:, :-1].detach().argmax(1)
        duelling_network_output = self.q_network_target(next_states)
        q_values = self.calculate_duelling_q_values(duelling_network_output)
        Q_targets_next = q_values.gather(1, max_action_indexes.unsqueeze(1))
        return Q_targets_next

    def calculate_duelling_q_values(self, duelling_q_network_output):
        """Calculates the q_values using the duelling network architecture. This is equation (9) in the paper
        referenced at the top of the class"""
        state_value = duelling_q_network_output[:, -1]
        if self.bug == "advantage_mean_over_batch":
            avg_advantage = torch.mean(duelling_q_network_output[:, :-1])
            q_values = state_value.unsqueeze(1) + (duelling_q_network_output[:, :-1] - avg_advantage)
            return q_values
        avg_advantage = torch.mean(duelling_q_network_output[:, :-1], dim=1)
        q_values = state_value.unsqueeze(1) + (duelling_q_network_output[:, :-1] - avg_advantage.unsqueeze(1))
        return q_values

    def compute_expected_q_values(self, states, actions):
        """Computes the expected q_values we will use to create the loss to train the Q network"""
        duelling_network_output = self.q_network_local(states)
        q_values = self.calculate_duelling_q_values(duelling_network_output)
        Q_expected = q_values.gather(1, actions.long())
        return Q_expected


class Config(object):
    pass


def _build(seed, bug=None):
    config = Config()
    config.seed = seed
    config.environment = GymCartPole(seed)
    config.hyperparameters = {"DQN_Agents": dict(HYPERPARAMETERS)}["DQN_Agents"]
    agent = Dueling_DDQN(config, bug=bug)

    # (port) run_n_episodes: episodes are played (no learning while the buffer is too small) until learning starts
    agent.reset_game()
    while not agent.enough_experiences_to_learn_from():
        agent.step_once()
        if agent.done:
            agent.save_result()
            agent.episode_number += 1
            agent.reset_game()

    states, actions, rewards, next_states, dones = agent.memory.sample()
    batch = (states, (actions, rewards, next_states, dones))

    def loss_fn(duelling_network_output, targets):
        actions, rewards, next_states, dones = targets
        with torch.no_grad():
            Q_targets = agent.compute_q_targets(next_states, rewards, dones)
        q_values = agent.calculate_duelling_q_values(duelling_network_output)
        return F.mse_loss(q_values.gather(1, actions.long()), Q_targets)

    def train_step():
        loss = agent.step_once()
        if agent.done:
            agent.save_result()
            agent.episode_number += 1
            agent.reset_game()
        return loss

    return Program(name="deeprlpytorch_dueling_ddqn", model=agent.q_network_local, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.q_network_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the advantages' mean taken over the whole batch instead of over the actions (``torch.mean`` without ``dim``):
    # every sample's Q values depend on the other samples of the batch. Reported for another dueling DQN in
    # https://github.com/datawhalechina/easy-rl/issues/140 (classic).
    Bug("advantage_mean_over_batch", functools.partial(_build, bug="advantage_mean_over_batch"), "learning_ledger",
        ("DEPENDENCY",)),
    # ``(1 - dones)`` left out of the target: the value bootstraps through the episode's end (classic).
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # ``soft_update_of_target_network(target, local, tau)``: the local network is pulled back towards the frozen
    # target after every optimizer step (classic argument swap).
    Bug("soft_update_args_swapped", functools.partial(_build, bug="soft_update_args_swapped"), "step_probe",
        ("hidden_layers.0.weight",)),
]
