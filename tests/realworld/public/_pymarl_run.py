# ruff: noqa: PLR0402, TRY002, UP008, UP039
"""PyMARL's agent, mixer, action selection, epsilon schedule, multi-agent controller and episode runner
(oxwhirl/pymarl), for the port ``pymarl_qmix.py``, and the small cooperative multi-agent environment that stands in
for SMAC.

Source: https://github.com/oxwhirl/pymarl
Commit: c971afdceb34635d31b778021b0ef90d7af51e86
Files: src/modules/agents/rnn_agent.py (``RNNAgent``), src/modules/mixers/qmix.py (``QMixer``),
src/components/action_selectors.py (``EpsilonGreedyActionSelector``), src/components/epsilon_schedules.py
(``DecayThenFlatSchedule``), src/controllers/basic_controller.py (``BasicMAC``), src/runners/episode_runner.py
(``EpisodeRunner``), src/envs/multiagentenv.py (the interface ``LineMeet`` follows)
License: Apache-2.0 (full text in LICENSES/oxwhirl-pymarl.txt)

Deviations from the original: the registries hold only the classes QMIX uses (``agent_REGISTRY["rnn"]`` is
``RNNAgent``, as ``modules/agents/__init__.py`` has it); ``BasicMAC.forward`` leaves out the ``"pi_logits"`` branch, which QMIX's ``agent_output_type`` "q" never takes, and the save/load/cuda methods; the
runner takes its environment as an argument and leaves out the sacred logging (``_log``, return and statistics
lists); the multinomial selector is left out. ``LineMeet`` is not from the repository: StarCraft II and SMAC cannot
run here, so a cooperative game on a line written for the port implements ``MultiAgentEnv``'s interface (see its
docstring).
"""

from functools import partial

import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
from _pymarl_lib import EpisodeBatch
from torch.distributions import Categorical

agent_REGISTRY = {}
action_REGISTRY = {}


# ---- src/modules/agents/rnn_agent.py -------------------------------------------------------------------------------

class RNNAgent(nn.Module):
    def __init__(self, input_shape, args):
        super(RNNAgent, self).__init__()
        self.args = args

        self.fc1 = nn.Linear(input_shape, args.rnn_hidden_dim)
        self.rnn = nn.GRUCell(args.rnn_hidden_dim, args.rnn_hidden_dim)
        self.fc2 = nn.Linear(args.rnn_hidden_dim, args.n_actions)

    def init_hidden(self):
        # make hidden states on same device as model
        return self.fc1.weight.new(1, self.args.rnn_hidden_dim).zero_()

    def forward(self, inputs, hidden_state):
        x = F.relu(self.fc1(inputs))
        h_in = hidden_state.reshape(-1, self.args.rnn_hidden_dim)
        h = self.rnn(x, h_in)
        q = self.fc2(h)
        return q, h


# ---- src/modules/mixers/qmix.py ------------------------------------------------------------------------------------

class QMixer(nn.Module):
    def __init__(self, args):
        super(QMixer, self).__init__()

        self.args = args
        self.n_agents = args.n_agents
        self.state_dim = int(np.prod(args.state_shape))

        self.embed_dim = args.mixing_embed_dim

        if getattr(args, "hypernet_layers", 1) == 1:
            self.hyper_w_1 = nn.Linear(self.state_dim, self.embed_dim * self.n_agents)
            self.hyper_w_final = nn.Linear(self.state_dim, self.embed_dim)
        elif getattr(args, "hypernet_layers", 1) == 2:
            hypernet_embed = self.args.hypernet_embed
            self.hyper_w_1 = nn.Sequential(nn.Linear(self.state_dim, hypernet_embed),
                                           nn.ReLU(),
                                           nn.Linear(hypernet_embed, self.embed_dim * self.n_agents))
            self.hyper_w_final = nn.Sequential(nn.Linear(self.state_dim, hypernet_embed),
                                           nn.ReLU(),
                                           nn.Linear(hypernet_embed, self.embed_dim))
        elif getattr(args, "hypernet_layers", 1) > 2:
            raise Exception("Sorry >2 hypernet layers is not implemented!")
        else:
            raise Exception("Error setting number of hypernet layers.")

        # State dependent bias for hidden layer
        self.hyper_b_1 = nn.Linear(self.state_dim, self.embed_dim)

        # V(s) instead of a bias for the last layers
        self.V = nn.Sequential(nn.Linear(self.state_dim, self.embed_dim),
                               nn.ReLU(),
                               nn.Linear(self.embed_dim, 1))

    def forward(self, agent_qs, states):
        bs = agent_qs.size(0)
        states = states.reshape(-1, self.state_dim)
        agent_qs = agent_qs.view(-1, 1, self.n_agents)
        # First layer
        w1 = th.abs(self.hyper_w_1(states))
        b1 = self.hyper_b_1(states)
        w1 = w1.view(-1, self.n_agents, self.embed_dim)
        b1 = b1.view(-1, 1, self.embed_dim)
        hidden = F.elu(th.bmm(agent_qs, w1) + b1)
        # Second layer
        w_final = th.abs(self.hyper_w_final(states))
        w_final = w_final.view(-1, self.embed_dim, 1)
        # State-dependent bias
        v = self.V(states).view(-1, 1, 1)
        # Compute final output
        y = th.bmm(hidden, w_final) + v
        # Reshape and return
        q_tot = y.view(bs, -1, 1)
        return q_tot


# ---- src/components/epsilon_schedules.py, src/components/action_selectors.py -------------------------------------

class DecayThenFlatSchedule():

    def __init__(self,
                 start,
                 finish,
                 time_length,
                 decay="exp"):

        self.start = start
        self.finish = finish
        self.time_length = time_length
        self.delta = (self.start - self.finish) / self.time_length
        self.decay = decay

        if self.decay in ["exp"]:
            self.exp_scaling = (-1) * self.time_length / np.log(self.finish) if self.finish > 0 else 1

    def eval(self, T):
        if self.decay in ["linear"]:
            return max(self.finish, self.start - self.delta * T)
        elif self.decay in ["exp"]:
            return min(self.start, max(self.finish, np.exp(- T / self.exp_scaling)))

class EpsilonGreedyActionSelector():

    def __init__(self, args):
        self.args = args

        self.schedule = DecayThenFlatSchedule(args.epsilon_start, args.epsilon_finish, args.epsilon_anneal_time,
                                              decay="linear")
        self.epsilon = self.schedule.eval(0)

    def select_action(self, agent_inputs, avail_actions, t_env, test_mode=False):

        # Assuming agent_inputs is a batch of Q-Values for each agent bav
        self.epsilon = self.schedule.eval(t_env)

        if test_mode:
            # Greedy action selection only
            self.epsilon = 0.0

        # mask actions that are excluded from selection
        masked_q_values = agent_inputs.clone()
        masked_q_values[avail_actions == 0.0] = -float("inf")  # should never be selected!

        random_numbers = th.rand_like(agent_inputs[:, :, 0])
        pick_random = (random_numbers < self.epsilon).long()
        random_actions = Categorical(avail_actions.float()).sample().long()

        picked_actions = pick_random * random_actions + (1 - pick_random) * masked_q_values.max(dim=2)[1]
        return picked_actions


action_REGISTRY["epsilon_greedy"] = EpsilonGreedyActionSelector
agent_REGISTRY["rnn"] = RNNAgent


# ---- src/controllers/basic_controller.py ---------------------------------------------------------------------------

# This multi-agent controller shares parameters between agents
class BasicMAC:
    def __init__(self, scheme, groups, args):
        self.n_agents = args.n_agents
        self.args = args
        input_shape = self._get_input_shape(scheme)
        self._build_agents(input_shape)
        self.agent_output_type = args.agent_output_type

        self.action_selector = action_REGISTRY[args.action_selector](args)

        self.hidden_states = None

    def select_actions(self, ep_batch, t_ep, t_env, bs=slice(None), test_mode=False):
        # Only select actions for the selected batch elements in bs
        avail_actions = ep_batch["avail_actions"][:, t_ep]
        agent_outputs = self.forward(ep_batch, t_ep, test_mode=test_mode)
        chosen_actions = self.action_selector.select_action(agent_outputs[bs], avail_actions[bs], t_env, test_mode=test_mode)
        return chosen_actions

    def forward(self, ep_batch, t, test_mode=False):
        agent_inputs = self._build_inputs(ep_batch, t)
        agent_outs, self.hidden_states = self.agent(agent_inputs, self.hidden_states)
        # (the "pi_logits" branch, not taken by QMIX's agent_output_type "q", is left out)
        return agent_outs.view(ep_batch.batch_size, self.n_agents, -1)

    def init_hidden(self, batch_size):
        self.hidden_states = self.agent.init_hidden().unsqueeze(0).expand(batch_size, self.n_agents, -1)  # bav

    def parameters(self):
        return self.agent.parameters()

    def load_state(self, other_mac):
        self.agent.load_state_dict(other_mac.agent.state_dict())

    def _build_agents(self, input_shape):
        self.agent = agent_REGISTRY[self.args.agent](input_shape, self.args)

    def _build_inputs(self, batch, t):
        # Assumes homogenous agents with flat observations.
        # Other MACs might want to e.g. delegate building inputs to each agent
        bs = batch.batch_size
        inputs = []
        inputs.append(batch["obs"][:, t])  # b1av
        if self.args.obs_last_action:
            if t == 0:
                inputs.append(th.zeros_like(batch["actions_onehot"][:, t]))
            else:
                inputs.append(batch["actions_onehot"][:, t-1])
        if self.args.obs_agent_id:
            inputs.append(th.eye(self.n_agents, device=batch.device).unsqueeze(0).expand(bs, -1, -1))

        inputs = th.cat([x.reshape(bs*self.n_agents, -1) for x in inputs], dim=1)
        return inputs

    def _get_input_shape(self, scheme):
        input_shape = scheme["obs"]["vshape"]
        if self.args.obs_last_action:
            input_shape += scheme["actions_onehot"]["vshape"][0]
        if self.args.obs_agent_id:
            input_shape += self.n_agents

        return input_shape


# ---- src/runners/episode_runner.py ---------------------------------------------------------------------------------

class EpisodeRunner:

    def __init__(self, args, logger, env):
        self.args = args
        self.logger = logger
        self.batch_size = self.args.batch_size_run
        assert self.batch_size == 1

        self.env = env
        self.episode_limit = self.env.episode_limit
        self.t = 0

        self.t_env = 0

    def setup(self, scheme, groups, preprocess, mac):
        self.new_batch = partial(EpisodeBatch, scheme, groups, self.batch_size, self.episode_limit + 1,
                                 preprocess=preprocess, device=self.args.device)
        self.mac = mac

    def get_env_info(self):
        return self.env.get_env_info()

    def reset(self):
        self.batch = self.new_batch()
        self.env.reset()
        self.t = 0

    def run(self, test_mode=False):
        self.reset()

        terminated = False
        self.mac.init_hidden(batch_size=self.batch_size)

        while not terminated:

            pre_transition_data = {
                "state": [self.env.get_state()],
                "avail_actions": [self.env.get_avail_actions()],
                "obs": [self.env.get_obs()]
            }

            self.batch.update(pre_transition_data, ts=self.t)

            # Pass the entire batch of experiences up till now to the agents
            # Receive the actions for each agent at this timestep in a batch of size 1
            actions = self.mac.select_actions(self.batch, t_ep=self.t, t_env=self.t_env, test_mode=test_mode)

            reward, terminated, env_info = self.env.step(actions[0])

            post_transition_data = {
                "actions": actions,
                "reward": [(reward,)],
                "terminated": [(terminated != env_info.get("episode_limit", False),)],
            }

            self.batch.update(post_transition_data, ts=self.t)

            self.t += 1

        last_data = {
            "state": [self.env.get_state()],
            "avail_actions": [self.env.get_avail_actions()],
            "obs": [self.env.get_obs()]
        }
        self.batch.update(last_data, ts=self.t)

        # Select actions in the last stored state
        actions = self.mac.select_actions(self.batch, t_ep=self.t, t_env=self.t_env, test_mode=test_mode)
        self.batch.update({"actions": actions}, ts=self.t)

        if not test_mode:
            self.t_env += self.t
        return self.batch


# ---- the environment (not from the repository) -------------------------------------------------------------------

class LineMeet:
    """A cooperative game written for the port, with ``MultiAgentEnv``'s interface: ``n_agents`` agents on a line of
    ``size`` cells, each with its own goal cell (drawn per episode); actions 0 stay, 1 left, 2 right (a move off the
    line is unavailable); the team reward is ``0.1`` per agent on its goal each step, plus 1 and the end of the
    episode when all are on their goals at once; ``episode_limit`` steps otherwise (``info["episode_limit"]``). An
    agent observes its position, its goal and the others' positions (one-hot); the state is every position and
    goal."""

    def __init__(self, n_agents=2, size=5, episode_limit=8, seed=0):
        self.n_agents, self.size, self.episode_limit = n_agents, size, episode_limit
        self.rng = np.random.default_rng(seed)
        self.pos = self.goal = None
        self._t = 0

    def _onehot(self, i):
        v = np.zeros(self.size, dtype=np.float32)
        v[i] = 1.0
        return v

    def reset(self):
        self.pos = self.rng.integers(0, self.size, self.n_agents)
        self.goal = self.rng.integers(0, self.size, self.n_agents)
        self._t = 0
        return self.get_obs(), self.get_state()

    def step(self, actions):
        moves = np.array([0, -1, 1])[np.asarray(actions, dtype=np.int64)]
        self.pos = np.clip(self.pos + moves, 0, self.size - 1)
        self._t += 1
        at_goal = self.pos == self.goal
        reward = 0.1 * float(at_goal.sum())
        info = {}
        terminated = False
        if at_goal.all():
            reward += 1.0
            terminated = True
        elif self._t >= self.episode_limit:
            terminated = True
            info["episode_limit"] = True
        return reward, terminated, info

    def get_obs_agent(self, agent_id):
        others = [self._onehot(p) for j, p in enumerate(self.pos) if j != agent_id]
        return np.concatenate([self._onehot(self.pos[agent_id]), self._onehot(self.goal[agent_id])] + others)

    def get_obs(self):
        return [self.get_obs_agent(i) for i in range(self.n_agents)]

    def get_obs_size(self):
        return self.size * (self.n_agents + 1)

    def get_state(self):
        return np.concatenate([self._onehot(p) for p in self.pos] + [self._onehot(g) for g in self.goal])

    def get_state_size(self):
        return 2 * self.size * self.n_agents

    def get_avail_agent_actions(self, agent_id):
        return [1, int(self.pos[agent_id] > 0), int(self.pos[agent_id] < self.size - 1)]

    def get_avail_actions(self):
        return [self.get_avail_agent_actions(i) for i in range(self.n_agents)]

    def get_total_actions(self):
        return 3

    def get_env_info(self):
        env_info = {"state_shape": self.get_state_size(),
                    "obs_shape": self.get_obs_size(),
                    "n_actions": self.get_total_actions(),
                    "n_agents": self.n_agents,
                    "episode_limit": self.episode_limit}
        return env_info
