# ruff: noqa: C405, C408, C414, SIM118, UP006, UP007, UP035, UP039, UP045
"""The models, replay memory and environment wrapper of Kaixhin/imitation-learning, for the port
``kaixhinil_gail.py``: ``_create_fcnn``, ``SoftActor`` (tanh-Gaussian policy), ``Critic``/``TwinCritic``, target
network helpers, ``make_gail_input`` and ``GAILDiscriminator`` (models.py), ``ReplayMemory`` (memory.py) and
``D4RLEnv`` with ``get_dataset`` (environments.py).

Source: https://github.com/Kaixhin/imitation-learning
Commit: 28d2f5bb709e1fb0f48750ea9d1b88ff87d06388
Files: models.py, memory.py, environments.py
License: MIT (Copyright (c) 2020 Kai Arulkumaran; full text in LICENSES/Kaixhin-imitation-learning.txt)

Deviations from the original:
- d4rl and MuJoCo are not available: ``D4RLEnv`` wraps the numpy ``ContinuousCartPole`` of ``_continuous_control.py``
  (max 500 steps) as ``ExpertCartPole`` for ``gym.make(f'{env_name}-expert-v2')``; its ``get_dataset()`` (not from
  the repository) returns 8 episodes of a balancing linear controller with action noise 0.1 in D4RL's dict layout
  (terminals for falls, timeouts at the time limit); ``D4RLEnv.get_dataset`` is copied;
- omegaconf's ``DictConfig`` is a ``SimpleNamespace`` with a ``get`` method; only the classes GAIL uses are copied
  (the GMMIL, PWIL, RED, DRIL and AdRIL components and ``SoftActor``'s DRIL uncertainty methods are left out); the
  tqdm bar of ``transfer_transitions`` (unused by GAIL) is left out; ``D4RLEnv`` sets the absorbing bit on the
  observation space's shape instead of building a gym ``Box``; ``get_dataset``'s subsampling lines are moved, unchanged,
  into a method ``_subsample`` it calls (for the 60-line function limit); two-space indentation is four spaces.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from _continuous_control import ContinuousCartPole
from torch import Tensor, nn
from torch.distributions import Distribution, Independent, Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform
from torch.nn.utils import parametrizations
from torch.utils.data import Dataset


class DictConfig(SimpleNamespace):
    """(port) omegaconf's ``DictConfig`` as read here: attributes, and ``get`` with a default."""

    def get(self, key, default=None):
        return getattr(self, key, default)


ACTIVATION_FUNCTIONS = {'relu': nn.ReLU, 'sigmoid': nn.Sigmoid, 'tanh': nn.Tanh}


# ---- models.py  ---------------------------------------------------------------------------------------------------

# Concatenates the state and action
def _join_state_action(state: Tensor, action: Tensor) -> Tensor:
        return torch.cat([state, action], dim=1)


# Creates a sequential fully-connected network
def _create_fcnn(input_size: int, hidden_size: int, depth: int, output_size: int, activation_function: str, input_dropout: float=0, dropout: float=0, final_gain: float=1, spectral_norm: bool=False) -> nn.Module:
    assert activation_function in ACTIVATION_FUNCTIONS.keys()
  
    network_dims, layers = (input_size, *[hidden_size] * depth), []
    if input_dropout > 0:
        layers.append(nn.Dropout(p=input_dropout))
    for l in range(len(network_dims) - 1):
        layer = nn.Linear(network_dims[l], network_dims[l + 1])
        nn.init.orthogonal_(layer.weight, gain=nn.init.calculate_gain(activation_function))
        nn.init.constant_(layer.bias, 0)
        if spectral_norm: layer = parametrizations.spectral_norm(layer)
        layers.append(layer)
        if dropout > 0: layers.append(nn.Dropout(p=dropout))
        layers.append(ACTIVATION_FUNCTIONS[activation_function]())

    final_layer = nn.Linear(network_dims[-1], output_size)
    nn.init.orthogonal_(final_layer.weight, gain=final_gain)
    nn.init.constant_(final_layer.bias, 0)
    if spectral_norm: final_layer = parametrizations.spectral_norm(final_layer)
    layers.append(final_layer)

    return nn.Sequential(*layers)


def create_target_network(network: nn.Module) -> nn.Module:
    target_network = copy.deepcopy(network)
    for param in target_network.parameters():
        param.requires_grad = False
    return target_network


def update_target_network(network: nn.Module, target_network: nn.Module, polyak_factor: float):
    for param, target_param in zip(network.parameters(), target_network.parameters()):
        target_param.data.mul_(polyak_factor).add_((1 - polyak_factor) * param.data)


class SoftActor(nn.Module):
    def __init__(self, state_size: int, action_size: int, model_cfg: DictConfig):
        super().__init__()
        self.log_std_dev_min, self.log_std_dev_max = -20, 2  # Constrain range of standard deviations to prevent very deterministic/stochastic policies
        self.actor = _create_fcnn(state_size, model_cfg.hidden_size, model_cfg.depth, output_size=2 * action_size, activation_function=model_cfg.activation, input_dropout=model_cfg.get('input_dropout', 0), dropout=model_cfg.get('dropout', 0))

    def forward(self, state: Tensor) -> Distribution:
        mean, log_std_dev = self.actor(state).chunk(2, dim=1)
        log_std_dev = torch.clamp(log_std_dev, min=self.log_std_dev_min, max=self.log_std_dev_max)
        policy = TransformedDistribution(Independent(Normal(mean, log_std_dev.exp()), 1), TanhTransform(cache_size=1))  # Restrict action range to (-1, 1)
        return policy

    # Calculates the log probability of an action a with the policy π(·|s) given state s
    def log_prob(self, state: Tensor, action: Tensor) -> Tensor:
        action = action.clamp(-1 + 1e-6, 1 - 1e-6)  # Clamp actions to (-1, 1) to prevent NaNs in log likelihood calculation of TanhGaussian policy; predominantly an issue with DRIL uncertainty calculation
        return self.forward(state).log_prob(action)

    def get_greedy_action(self, state: Tensor) -> Tensor:
        return torch.tanh(self.forward(state).base_dist.mean)


class Critic(nn.Module):
    def __init__(self, state_size: int, action_size: int, model_cfg: DictConfig):
        super().__init__()
        self.critic = _create_fcnn(state_size + action_size, model_cfg.hidden_size, model_cfg.depth, output_size=1, activation_function=model_cfg.activation)

    def forward(self, state: Tensor, action: Tensor) -> Tensor:
        value = self.critic(_join_state_action(state, action)).squeeze(dim=1)
        return value


class TwinCritic(nn.Module):
    def __init__(self, state_size: int, action_size: int, model_cfg: DictConfig):
        super().__init__()
        self.critic_1 = Critic(state_size, action_size, model_cfg)
        self.critic_2 = Critic(state_size, action_size, model_cfg)

    def forward(self, state: Tensor, action: Tensor) -> Tuple[Tensor, Tensor]:
        value_1, value_2 = self.critic_1(state, action), self.critic_2(state, action)
        return value_1, value_2


# Constructs the input for the GAIL discriminator
def make_gail_input(state: Tensor, action: Tensor, next_state: Tensor, terminal: Tensor, actor: SoftActor, reward_shaping: bool, subtract_log_policy: bool) -> Dict[str, Tensor]:
    input = {'state': state, 'action': action}
    if reward_shaping: input.update({'next_state': next_state, 'terminal': terminal})
    if subtract_log_policy: input.update({'log_policy': actor.log_prob(state, action)})
    return input


class GAILDiscriminator(nn.Module):
    def __init__(self, state_size: int, action_size: int, imitation_cfg: DictConfig, discount: float):
        super().__init__()
        model_cfg = imitation_cfg.discriminator
        self.discount, self.state_only, self.reward_shaping, self.subtract_log_policy, self.reward_function = discount, imitation_cfg.state_only, model_cfg.reward_shaping, model_cfg.subtract_log_policy, model_cfg.reward_function
        if self.reward_shaping:
            self.g = nn.Linear(state_size if self.state_only else state_size + action_size, 1)  # Reward function r
            if imitation_cfg.spectral_norm: self.g = parametrizations.spectral_norm(self.g)
            self.h = _create_fcnn(state_size, model_cfg.hidden_size, model_cfg.depth, 1, activation_function=model_cfg.activation, spectral_norm=imitation_cfg.spectral_norm)  # Shaping function Φ
        else:
            self.g = _create_fcnn(state_size if self.state_only else state_size + action_size, model_cfg.hidden_size, model_cfg.depth, 1, activation_function=model_cfg.activation, spectral_norm=imitation_cfg.spectral_norm)

    def _reward(self, state: Tensor, action: Tensor) -> Tensor:
        if self.state_only:
            return self.g(state).squeeze(dim=1)
        else:
            return self.g(_join_state_action(state, action)).squeeze(dim=1)

    def _value(self, state: Tensor) -> Tensor:
        return self.h(state).squeeze(dim=1)

    def forward(self, state: Tensor, action: Tensor, next_state: Optional[Tensor]=None, terminal: Optional[Tensor]=None, log_policy: Optional[Tensor]=None) -> Tensor:
        f = self._reward(state, action) + (1 - terminal) * (self.discount * self._value(next_state) - self._value(state)) if self.reward_shaping else self._reward(state, action)  # Note that vanilla GAIL does not learn a "reward function", but this naming just makes the code simpler to read
        return f - log_policy if self.subtract_log_policy else f  # Note that the former is equivalent to sigmoid^-1(e^f / (e^f + π))
  
    def predict_reward(self, state: Tensor, action: Tensor, next_state: Optional[Tensor]=None, terminal: Optional[Tensor]=None, log_policy: Optional[Tensor]=None) -> Tensor:
        D = torch.sigmoid(self.forward(state, action, next_state=next_state, terminal=terminal, log_policy=log_policy))
        h = -torch.log1p(-D + 1e-6) if self.reward_function == 'GAIL' else torch.log(D + 1e-6) - torch.log1p(-D + 1e-6)  # Add epsilon to improve numerical stability given limited floating point precision
        return torch.exp(h) * -h if self.reward_function == 'FAIRL' else h  # FAIRL reward function is based on AIRL reward function


# ---- memory.py ---------------------------------------------------------------------------------------------------

# Replay memory returns transition tuples of the form (s, a, r, s', terminal, timeout, w)
class ReplayMemory(Dataset):
    def __init__(self, size: int, state_size: int, action_size: int, absorbing: bool, transitions: Optional[Dict[str, Union[Tensor, int]]]=None):
        super().__init__()
        self.size, self.num_trajectories, self.idx, self.full = size, 0, 0, False
        self.absorbing = absorbing
        self.step, self.states, self.actions, self.rewards, self.next_states, self.terminals, self.timeouts, self.weights = torch.empty(size), torch.empty(size, state_size), torch.empty(size, action_size), torch.empty(size), torch.empty(size, state_size), torch.empty(size), torch.empty(size), torch.empty(size)
        if transitions is not None:
            trans_size = min(transitions['states'].size(0), size)  # Take data up to size of replay
            self.step[:trans_size], self.states[:trans_size], self.actions[:trans_size], self.rewards[:trans_size], self.next_states[:trans_size], self.terminals[:trans_size], self.timeouts[:trans_size], self.weights[:trans_size] = torch.arange(1, size + 1, dtype=torch.float32), transitions['states'], transitions['actions'], transitions['rewards'], transitions['next_states'], transitions['terminals'], transitions['timeouts'], transitions['weights']
            self.num_trajectories = transitions['num_trajectories']  # Note that this assumes all trajectories fit into this memory!
            self.idx = trans_size % self.size
            self.full = self.idx == 0 and trans_size > 0  # Replay is full if index has wrapped around (but not if there was no data)

    # Allows string-based access for entire data of one type, or int-based access for single transition
    def __getitem__(self, idx: Union[int, str]) -> Union[Dict[str, Tensor], Tensor]:
        if isinstance(idx, str):
            if idx == 'states':
                return self.states
            elif idx == 'actions':
                return self.actions
            elif idx == 'terminals':
                return self.terminals
        else:
            return dict(step=self.step[idx], states=self.states[idx], actions=self.actions[idx], rewards=self.rewards[idx], next_states=self.next_states[idx], terminals=self.terminals[idx], timeouts=self.timeouts[idx], weights=self.weights[idx])

    def __len__(self) -> int:
        return self.terminals.size(0)

    def append(self, step: int, state: Tensor, action: Tensor, reward: float, next_state: Tensor, terminal: bool, timeout: bool):
        self.step[self.idx], self.states[self.idx], self.actions[self.idx], self.rewards[self.idx], self.next_states[self.idx], self.terminals[self.idx], self.timeouts[self.idx], self.weights[self.idx] = step, state, action, reward, next_state, terminal, timeout, 1
        self.idx = (self.idx + 1) % self.size
        self.full = self.full or self.idx == 0
        if terminal or timeout: self.num_trajectories += 1

    def transfer_transitions(self, memory: ReplayMemory):
        for transition in memory:
            self.append(*[val for key, val in transition.items() if key != 'weights'])

    # Returns a uniformly sampled valid transition index
    def _sample_idx(self) -> int:
        valid_idx = False
        while not valid_idx:
            idx = np.random.randint(0, self.size if self.full else self.idx - 1)
            valid_idx = idx != (self.idx - 1) % self.size  # Make sure data does not cross the memory index
        return idx

    def sample(self, n: int) -> Dict[str, Tensor]:
        idxs = [self._sample_idx() for _ in range(n)]
        transitions = [self[idx] for idx in idxs]
        transitions = {key: torch.stack([t[key] for t in transitions]) for key in transitions[0].keys()}  # Note that stack creates new memory so mix_policy_expert_transitions does not overwrite original data
        transitions['absorbing'] = transitions['states'][:, -1] if self.absorbing else torch.zeros_like(transitions['terminals'])  # Indicate absorbing states if absorbing env
        return transitions

    def wrap_for_absorbing_states(self):
        absorbing_state = torch.cat([torch.zeros(self.states.size(1) - 1), torch.ones(1)], dim=0)
        self.next_states[(self.idx - 1) % self.size], self.terminals[(self.idx - 1) % self.size] = absorbing_state, False  # Replace terminal state with absorbing state and remove terminal
        self.append(self.step[(self.idx - 1) % self.size], absorbing_state, torch.zeros(self.actions.size(1)), 0, absorbing_state, False, False)  # Add absorbing state pair as next transition


# ---- environments.py ---------------------------------------------------------------------------------------------

class D4RLEnv():
    def __init__(self, env_name: str, absorbing: bool, load_data: bool=False):
        self.env = ExpertCartPole()  # (port) gym.make(f'{env_name}-expert-v2')
        if load_data: self.dataset = self.env.get_dataset()  # Load dataset before (potentially) adjusting observation_space (fails assertion check otherwise)
        self.env.action_space.high, self.env.action_space.low = torch.as_tensor(self.env.action_space.high), torch.as_tensor(self.env.action_space.low)  # Convert action space for action clipping

        self.absorbing = absorbing
        if absorbing: self.env.observation_space.shape = (self.env.observation_space.shape[0] + 1, )  # (port) Box(...) with the indicator bit  # Append absorbing indicator bit to state dimension (assumes 1D state space)

    def reset(self) -> Tensor:
        state = self.env.reset()
        state = torch.tensor(state, dtype=torch.float32).unsqueeze(dim=0)  # Add batch dimension to state
        if self.absorbing: state = torch.cat([state, torch.zeros(state.size(0), 1)], dim=1)  # Add absorbing indicator (zero) to state
        return state 

    def step(self, action: Tensor) -> Tuple[Tensor, float, bool]:
        action = action.clamp(min=self.env.action_space.low, max=self.env.action_space.high)  # Clip actions
        state, reward, terminal, _ = self.env.step(action[0].detach().numpy())  # Remove batch dimension from action
        state = torch.tensor(state, dtype=torch.float32).unsqueeze(dim=0)  # Add batch dimension to state
        if self.absorbing: state = torch.cat([state, torch.zeros(state.size(0), 1)], dim=1)  # Add absorbing indicator (zero) to state (absorbing state rewriting done in replay memory)
        return state, reward, terminal

    def seed(self, seed: int) -> List[int]:
        return self.env.seed(seed)

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()

    @property
    def observation_space(self) -> object:
        return self.env.observation_space

    @property
    def action_space(self) -> object:
        return self.env.action_space

    @property
    def max_episode_steps(self) -> int:
        return self.env._max_episode_steps

    def get_dataset(self, trajectories: int=0, subsample: int=1) -> ReplayMemory:
        # Extract data
        states = torch.as_tensor(self.dataset['observations'], dtype=torch.float32)
        actions = torch.as_tensor(self.dataset['actions'], dtype=torch.float32)
        next_states = torch.as_tensor(self.dataset['next_observations'], dtype=torch.float32)
        terminals = torch.as_tensor(self.dataset['terminals'], dtype=torch.float32)
        timeouts = torch.as_tensor(self.dataset['timeouts'], dtype=torch.float32)
        state_size, action_size = states.size(1), actions.size(1)
        # Split into separate trajectories
        states_list, actions_list, next_states_list, terminals_list, weights_list, timeouts_list = [], [], [], [], [], []
        terminal_idxs, timeout_idxs = terminals.nonzero().flatten(), timeouts.nonzero().flatten()
        ep_end_idxs = torch.sort(torch.cat([torch.tensor([-1]), terminal_idxs, timeout_idxs], dim=0))[0]
        for i in range(len(ep_end_idxs) - 1):
            states_list.append(states[ep_end_idxs[i] + 1:ep_end_idxs[i + 1] + 1])
            actions_list.append(actions[ep_end_idxs[i] + 1:ep_end_idxs[i + 1] + 1])
            next_states_list.append(next_states[ep_end_idxs[i] + 1:ep_end_idxs[i + 1] + 1])
            terminals_list.append(terminals[ep_end_idxs[i] + 1:ep_end_idxs[i + 1] + 1])  # Only store true terminations; timeouts should not be treated as such
            timeouts_list.append(timeouts[ep_end_idxs[i] + 1:ep_end_idxs[i + 1] + 1])  # Store if episode terminated due to timeout
            weights_list.append(torch.ones_like(terminals_list[-1]))  # Add an importance weight of 1 to every transition
        # Pick number of trajectories
        if trajectories > 0:
            states_list = states_list[:trajectories]
            actions_list = actions_list[:trajectories]
            next_states_list = next_states_list[:trajectories]
            terminals_list = terminals_list[:trajectories]
            timeouts_list = timeouts_list[:trajectories]
            weights_list = weights_list[:trajectories]
        num_trajectories = len(states_list)
        # Wrap for absorbing states
        if self.absorbing:
            absorbing_state, absorbing_action = torch.cat([torch.zeros(1, state_size), torch.ones(1, 1)], dim=1), torch.zeros(1, action_size)  # Create absorbing state and absorbing action
            for i in range(len(states_list)):
                # Append absorbing indicator (zero)
                states_list[i] = torch.cat([states_list[i], torch.zeros(states_list[i].size(0), 1)], dim=1)
                next_states_list[i] = torch.cat([next_states_list[i], torch.zeros(next_states_list[i].size(0), 1)], dim=1)
                if not timeouts_list[i][-1]:  # Apply for episodes that did not terminate due to time limits
                    # Replace the final next state with the absorbing state and overwrite terminal status
                    next_states_list[i][-1] = absorbing_state
                    terminals_list[i][-1] = 0
                    weights_list[i][-1] = 1 / subsample  # Importance weight absorbing state as kept during subsampling
                    # Add absorbing state to absorbing state transition
                    states_list[i] = torch.cat([states_list[i], absorbing_state], dim=0)
                    actions_list[i] = torch.cat([actions_list[i], absorbing_action], dim=0)
                    next_states_list[i] = torch.cat([next_states_list[i], absorbing_state], dim=0)
                    terminals_list[i] = torch.cat([terminals_list[i], torch.zeros(1)], dim=0)
                    timeouts_list[i] = torch.cat([timeouts_list[i], torch.zeros(1)], dim=0)
                    weights_list[i] = torch.cat([weights_list[i], torch.full((1, ), 1 / subsample)], dim=0)  # Importance weight absorbing state as kept during subsampling
        # Subsample within trajectories
        if subsample > 1:
            self._subsample(subsample, states_list, actions_list, next_states_list, terminals_list, timeouts_list, weights_list)

        transitions = {'states': torch.cat(states_list, dim=0), 'actions': torch.cat(actions_list, dim=0), 'next_states': torch.cat(next_states_list, dim=0), 'terminals': torch.cat(terminals_list, dim=0), 'timeouts': torch.cat(timeouts_list, dim=0), 'weights': torch.cat(weights_list, dim=0), 'num_trajectories': num_trajectories}
        transitions['rewards'] = torch.zeros_like(transitions['terminals'])  # Pass 0 rewards to replay memory for interoperability/make sure reward information is not leaked to IL algorithm when data comes from an offline RL dataset
        return ReplayMemory(transitions['states'].size(0), state_size + (1 if self.absorbing else 0), action_size, self.absorbing, transitions=transitions)


    def _subsample(self, subsample, states_list, actions_list, next_states_list, terminals_list, timeouts_list, weights_list):
        """(port) ``get_dataset``'s subsampling lines, moved unchanged (in-place on the lists)."""
        for i in range(len(states_list)):
            rand_start_idx, T = np.random.choice(subsample), len(states_list[i])  # Subsample from random index in 0 to N-1 (procedure from original GAIL implementation)
            idxs = range(rand_start_idx, T, subsample)
            if self.absorbing: idxs = sorted(list(set(idxs) | set([T - 2, T - 1])))  # Subsample but keep absorbing state transitions
            states_list[i] = states_list[i][idxs]
            actions_list[i] = actions_list[i][idxs]
            next_states_list[i] = next_states_list[i][idxs]
            terminals_list[i] = terminals_list[i][idxs]
            timeouts_list[i] = timeouts_list[i][idxs]
            weights_list[i] = weights_list[i][idxs]


# ---- the expert data (not from the repository) -------------------------------------------------------------------

class ExpertCartPole(ContinuousCartPole):
    """(port) stands in for d4rl's ``{env}-expert-v2``: the numpy continuous cart-pole, whose ``get_dataset()`` holds
    8 episodes of a balancing linear controller (action noise 0.1) in D4RL's layout."""

    ref_max_score, ref_min_score = 500.0, 0.0

    def get_dataset(self):
        rng = np.random.default_rng(1234)
        env = ContinuousCartPole()
        env.seed(1234)
        data = {k: [] for k in ('observations', 'actions', 'next_observations', 'terminals', 'timeouts', 'rewards')}
        for _ in range(8):
            state, t, done = env.reset(), 0, False
            while not done:
                x_dot, theta, theta_dot = state[1], state[2], state[3]
                action = np.clip([theta * 10 + theta_dot * 2 + x_dot * 0.5 + rng.normal(0, 0.1)], -1, 1)
                next_state, reward, done, _ = env.step(action)
                t += 1
                for k, v in (('observations', state), ('actions', action), ('next_observations', next_state),
                             ('terminals', done and t < env._max_episode_steps),
                             ('timeouts', t >= env._max_episode_steps), ('rewards', reward)):
                    data[k].append(v)
                state = next_state
        return {k: np.asarray(v, dtype=np.float32) for k, v in data.items()}
