# ruff: noqa: C408, PLR0402, RUF059
"""QMIX from PyMARL (oxwhirl/pymarl): parameter-shared GRU agents (``RNNAgent``) fed their observation, last action
and one-hot agent id through ``BasicMAC``; epsilon-greedy selection over the available actions; whole episodes stored
in an ``EpisodeBatch`` replay buffer; ``QLearner.train`` on 32 sampled episodes truncated to their longest: the
chosen agents' Q-values mixed by ``QMixer`` (hypernetworks of the state giving non-negative mixing weights, a state
value for the last bias), double-Q targets from the target agents and target mixer with unavailable actions masked,
``rewards + gamma * (1 - terminated) * target``, the TD error zeroed on padded steps and after termination, mean
squared over the filled steps, RMSprop with gradient clipping, hard target copies every 200 episodes.

Source: https://github.com/oxwhirl/pymarl
Commit: c971afdceb34635d31b778021b0ef90d7af51e86
Files: src/learners/q_learner.py, src/modules/mixers/qmix.py, src/modules/agents/rnn_agent.py,
src/controllers/basic_controller.py, src/runners/episode_runner.py, src/run.py (``run_sequential``),
src/config/default.yaml, src/config/algs/qmix.yaml (episode storage in the helper ``_pymarl_lib.py``; agent, mixer,
controller, runner, action selection and schedule in the helper ``_pymarl_run.py``)
License: Apache-2.0 (full text in LICENSES/oxwhirl-pymarl.txt)
Domain: RL, multi-agent value-based (QMIX, centralized training with decentralized execution)

Kept as written: the agent, the mixer, the controller, the learner's lines, the runner's episode loop and
``run_sequential``'s loop (run an episode, insert it, sample ``batch_size`` episodes once the buffer holds them,
truncate to ``max_t_filled``, train), and every value of ``default.yaml`` and ``qmix.yaml`` (gamma 0.99, batch_size
32, buffer_size 5000, lr 5e-4, RMSprop alpha 0.99 eps 1e-5, grad_norm_clip 10, rnn_hidden_dim 64, obs_agent_id and
obs_last_action, epsilon 1.0 -> 0.05 over 50000 steps, target_update_interval 200, double_q, mixing_embed_dim 32,
hypernet_layers 2, hypernet_embed 64).

Deviations from the original:
- StarCraft II (SMAC) cannot run here: the environment is ``LineMeet`` of ``_pymarl_lib.py``, a cooperative game on
  a line of 5 cells for 2 agents, episode_limit 8, with SMAC's interface (state, per-agent observations, available
  actions, ``info["episode_limit"]`` at the time limit, which the runner does not count as termination). The
  environment is the synthetic data.
- the registries are replaced by the classes they name (the learner's mixer choice keeps its "qmix" branch); the
  sacred logger by a stub whose calls do nothing (the runner's ``_log`` and statistics, the learner's statistics
  other than loss and grad_norm, and its cuda/save/load methods are left out); ``use_cuda`` is False; the global ``np.random`` and ``torch``
  generators and the environment are seeded from ``seed``; the target-update console message is dropped.
- the lines of ``QLearner.train`` are moved, unchanged, into two methods it calls: ``q_taken`` (the agents' Q-values
  over the episode and the mixed chosen ones) and ``td_loss`` (targets, masked TD error, loss), so the Program's
  ``model`` (``QMIXQTaken``, the same agent and mixer under ``agent.`` and ``mixer.``) and ``loss_fn`` run the same
  lines on the tensors of a sampled episode batch; ``train`` returns the loss.
- ``train_step`` is one iteration of ``run_sequential``'s loop that trains (the episodes run before it, while the
  buffer cannot sample, are part of it); test runs and model saving are left out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch as th
import torch.nn as nn
from torch.optim import RMSprop

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _pymarl_lib import EpisodeBatch, OneHot, ReplayBuffer
from _pymarl_run import BasicMAC, EpisodeRunner, LineMeet, QMixer

# ---- src/config/default.yaml, src/config/algs/qmix.yaml ------------------------------------------------------------

ARGS = dict(
    runner="episode", mac="basic_mac", batch_size_run=1, t_max=10000, use_cuda=False, buffer_cpu_only=True,
    learner_log_interval=2000, runner_log_interval=2000,
    gamma=0.99, batch_size=32, buffer_size=5000, lr=0.0005, critic_lr=0.0005, optim_alpha=0.99, optim_eps=0.00001,
    grad_norm_clip=10, agent="rnn", rnn_hidden_dim=64, obs_agent_id=True, obs_last_action=True,
    action_selector="epsilon_greedy", epsilon_start=1.0, epsilon_finish=0.05, epsilon_anneal_time=50000,
    target_update_interval=200, agent_output_type="q", learner="q_learner", double_q=True, mixer="qmix",
    mixing_embed_dim=32, hypernet_layers=2, hypernet_embed=64, name="qmix", device="cpu")


# ---- src/learners/q_learner.py -------------------------------------------------------------------------------------

class QLearner:
    def __init__(self, mac, scheme, logger, args, bug=None):
        self.args = args
        self.mac = mac
        self.logger = logger
        self.bug = bug

        self.params = list(mac.parameters())

        self.last_target_update_episode = 0

        if bug == "mixer_left_out_of_optimizer":  # the optimiser built before the mixer's parameters are added
            self.optimiser = RMSprop(params=self.params, lr=args.lr, alpha=args.optim_alpha, eps=args.optim_eps)
        self.mixer = None
        if args.mixer is not None:
            self.mixer = QMixer(args)
            self.params += list(self.mixer.parameters())
            self.target_mixer = copy.deepcopy(self.mixer)

        if bug != "mixer_left_out_of_optimizer":
            self.optimiser = RMSprop(params=self.params, lr=args.lr, alpha=args.optim_alpha, eps=args.optim_eps)

        # a little wasteful to deepcopy (e.g. duplicates action selector), but should work for any MAC
        self.target_mac = copy.deepcopy(mac)

        self.log_stats_t = -self.args.learner_log_interval - 1

    def q_taken(self, batch):
        """(port) ``train``'s lines computing the Q-values and the mixed Q-values of the actions taken."""
        actions = batch["actions"][:, :-1]

        # Calculate estimated Q-Values
        mac_out = []
        self.mac.init_hidden(batch.batch_size)
        for t in range(batch.max_seq_length):
            agent_outs = self.mac.forward(batch, t=t)
            mac_out.append(agent_outs)
        mac_out = th.stack(mac_out, dim=1)  # Concat over time

        # Pick the Q-Values for the actions taken by each agent
        chosen_action_qvals = th.gather(mac_out[:, :-1], dim=3, index=actions).squeeze(3)  # Remove the last dim

        # Mix
        if self.mixer is not None:
            chosen_action_qvals = self.mixer(chosen_action_qvals, batch["state"][:, :-1])
        return mac_out, chosen_action_qvals

    def td_loss(self, batch, mac_out, chosen_action_qvals):
        """(port) ``train``'s lines computing the targets, the masked TD error and the loss."""
        # Get the relevant quantities
        rewards = batch["reward"][:, :-1]
        terminated = batch["terminated"][:, :-1].float()
        mask = batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])
        avail_actions = batch["avail_actions"]

        # Calculate the Q-Values necessary for the target
        target_mac_out = []
        self.target_mac.init_hidden(batch.batch_size)
        for t in range(batch.max_seq_length):
            target_agent_outs = self.target_mac.forward(batch, t=t)
            target_mac_out.append(target_agent_outs)

        # We don't need the first timesteps Q-Value estimate for calculating targets
        target_mac_out = th.stack(target_mac_out[1:], dim=1)  # Concat across time

        # Mask out unavailable actions
        target_mac_out[avail_actions[:, 1:] == 0] = -9999999

        # Max over target Q-Values
        if self.args.double_q:
            # Get actions that maximise live Q (for double q-learning)
            mac_out_detach = mac_out.clone().detach()
            mac_out_detach[avail_actions == 0] = -9999999
            cur_max_actions = mac_out_detach[:, 1:].max(dim=3, keepdim=True)[1]
            target_max_qvals = th.gather(target_mac_out, 3, cur_max_actions).squeeze(3)
        else:
            target_max_qvals = target_mac_out.max(dim=3)[0]

        # Mix
        if self.mixer is not None:
            target_max_qvals = self.target_mixer(target_max_qvals, batch["state"][:, 1:])

        # Calculate 1-step Q-Learning targets
        if self.bug == "terminated_mask_dropped":
            targets = rewards + self.args.gamma * target_max_qvals
        else:
            targets = rewards + self.args.gamma * (1 - terminated) * target_max_qvals

        # Td-error
        td_error = (chosen_action_qvals - targets.detach())

        mask = mask.expand_as(td_error)

        # 0-out the targets that came from padded data
        masked_td_error = td_error if self.bug == "padding_mask_dropped" else td_error * mask

        # Normal L2 loss, take mean over actual data
        loss = (masked_td_error ** 2).sum() / mask.sum()
        return loss, masked_td_error, mask, targets

    def train(self, batch: EpisodeBatch, t_env: int, episode_num: int):
        mac_out, chosen_action_qvals = self.q_taken(batch)
        loss, masked_td_error, mask, targets = self.td_loss(batch, mac_out, chosen_action_qvals)

        # Optimise
        self.optimiser.zero_grad()
        loss.backward()
        grad_norm = th.nn.utils.clip_grad_norm_(self.params, self.args.grad_norm_clip)
        self.optimiser.step()

        if (episode_num - self.last_target_update_episode) / self.args.target_update_interval >= 1.0:
            self._update_targets()
            self.last_target_update_episode = episode_num

        if t_env - self.log_stats_t >= self.args.learner_log_interval:
            self.logger.log_stat("loss", loss.item(), t_env)
            self.logger.log_stat("grad_norm", grad_norm, t_env)
            self.log_stats_t = t_env
        return loss.detach()

    def _update_targets(self):
        self.target_mac.load_state(self.mac)
        if self.mixer is not None:
            self.target_mixer.load_state_dict(self.mixer.state_dict())



class QMIXQTaken(nn.Module):
    """(port) ``QLearner.q_taken`` as a module call on an episode batch's tensors, for the Program: the same agent and
    mixer (under ``agent.`` and ``mixer.``)."""

    def __init__(self, learner):
        super().__init__()
        self.agent, self.mixer = learner.mac.agent, learner.mixer
        self._learner = (learner,)

    def forward(self, obs, actions_onehot, avail_actions, actions, state):
        return self._learner[0].q_taken(Fields(obs=obs, actions_onehot=actions_onehot, avail_actions=avail_actions,
                                               actions=actions, state=state))


class Fields(dict):
    """(port) an episode batch's fields by name, with the ``batch_size``, ``max_seq_length`` and ``device`` the
    controller and the learner read."""

    def __init__(self, **fields):
        super().__init__(**fields)
        self.batch_size, self.max_seq_length = fields["obs"].shape[:2]
        self.device = fields["obs"].device


class _Logger:
    """(port) the sacred logger's calls, doing nothing."""

    def log_stat(self, *args):
        pass


# ---- src/run.py (run_sequential) -----------------------------------------------------------------------------------

def run_sequential(args, runner, buffer, learner):
    """The training loop; yields each ``learner.train`` call's arguments (the call is the Program's step)."""
    episode = 0
    while runner.t_env <= args.t_max:

        # Run for a whole episode at a time
        episode_batch = runner.run(test_mode=False)
        buffer.insert_episode_batch(episode_batch)

        if buffer.can_sample(args.batch_size):
            episode_sample = buffer.sample(args.batch_size)

            # Truncate batch to only filled timesteps
            max_ep_t = episode_sample.max_t_filled()
            episode_sample = episode_sample[:, :max_ep_t]

            yield episode_sample, runner.t_env, episode

        episode += args.batch_size_run


def _build(seed, bug=None):
    np.random.seed(seed)
    th.manual_seed(seed)
    args = SimpleNamespace(**ARGS)
    logger = _Logger()
    runner = EpisodeRunner(args=args, logger=logger, env=LineMeet(seed=seed))

    # Set up schemes and groups here
    env_info = runner.get_env_info()
    args.n_agents = env_info["n_agents"]
    args.n_actions = env_info["n_actions"]
    args.state_shape = env_info["state_shape"]

    # Default/Base scheme
    scheme = {
        "state": {"vshape": env_info["state_shape"]},
        "obs": {"vshape": env_info["obs_shape"], "group": "agents"},
        "actions": {"vshape": (1,), "group": "agents", "dtype": th.long},
        "avail_actions": {"vshape": (env_info["n_actions"],), "group": "agents", "dtype": th.int},
        "reward": {"vshape": (1,)},
        "terminated": {"vshape": (1,), "dtype": th.uint8},
    }
    groups = {
        "agents": args.n_agents
    }
    preprocess = {
        "actions": ("actions_onehot", [OneHot(out_dim=args.n_actions)])
    }

    buffer = ReplayBuffer(scheme, groups, args.buffer_size, env_info["episode_limit"] + 1,
                          preprocess=preprocess,
                          device="cpu" if args.buffer_cpu_only else args.device)

    # Setup multiagent controller here
    mac = BasicMAC(buffer.scheme, groups, args)

    # Give runner the scheme
    runner.setup(scheme=scheme, groups=groups, preprocess=preprocess, mac=mac)

    # Learner
    learner = QLearner(mac, buffer.scheme, logger, args, bug=bug)

    loop = run_sequential(args, runner, buffer, learner)
    state = {"pending": next(loop)}  # the episodes before the buffer can sample, and the first sample

    def train_step():
        loss = learner.train(*state["pending"])
        state["pending"] = next(loop)
        return loss

    return _program(learner, state["pending"][0], train_step)


def _program(learner, s, train_step):
    """The Program: the agents and mixer on the first sampled episodes' tensors, ``td_loss`` as the loss."""
    batch = ((s["obs"], s["actions_onehot"], s["avail_actions"], s["actions"], s["state"]),
             (s["reward"], s["terminated"], s["filled"], s["obs"], s["actions_onehot"], s["avail_actions"], s["state"]))

    def loss_fn(outputs, targets):
        """``td_loss`` (``train``'s lines) on the model's outputs for the sampled episodes."""
        names = ("reward", "terminated", "filled", "obs", "actions_onehot", "avail_actions", "state")
        return learner.td_loss(Fields(**dict(zip(names, targets))), *outputs)[0]

    return Program(name="pymarl_qmix", model=QMIXQTaken(learner), batch=batch, loss_fn=loss_fn,
                   optimizer=learner.optimiser, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: ``(1 - terminated)`` left out of the target, so the value bootstraps past the end of an episode won.
    Bug("terminated_mask_dropped", functools.partial(_build, bug="terminated_mask_dropped"), "learning_ledger",
        ("TASK",)),
    # classic: the RMSprop optimiser built over ``mac.parameters()`` before the mixer's parameters are appended to
    # ``self.params``, so the hypernetworks receive gradients and never move.
    Bug("mixer_left_out_of_optimizer", functools.partial(_build, bug="mixer_left_out_of_optimizer"),
        "four_structures", ("mixer",)),
    # classic: the TD error not multiplied by the mask, so the padded steps after an episode ends (zero observations,
    # zero rewards) and the steps after termination enter the squared error.
    Bug("padding_mask_dropped", functools.partial(_build, bug="padding_mask_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
]
