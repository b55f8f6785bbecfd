"""Recurrent PPO with truncated BPTT (MarcoMeter/recurrent-ppo-truncated-bptt) on the velocity-masked cart-pole: an
LSTM actor-critic (orthogonal init, decoupled policy and value hidden layers, one categorical branch per action
dimension) sampled by ``n_workers`` environments with the recurrent cell reset at episode ends, GAE with the done
mask, the rollout split into episodes and sequences of 8 (zero-padded, with a loss mask) that start from the stored
cell state, then ``epochs`` passes of ``n_mini_batch`` sequence mini-batches: clipped surrogate on normalized
advantages, clipped value loss, entropy bonus, AdamW with polynomially decayed lr / beta / clip range, gradient
norm clipped at 0.5.

Source: https://github.com/MarcoMeter/recurrent-ppo-truncated-bptt
Commit: a1e87a822fd186b1b96fff8ffbb76fa7ad8abafc
Files: model.py, trainer.py, configs/cartpole.yaml (buffer.py, utils.py and environments/cartpole_env.py in the
helper ``_recurrentppo_lib.py``)
License: MIT (Copyright (c) 2021 Marco Pleines; full text in LICENSES/MarcoMeter-recurrent-ppo-truncated-bptt.txt)
Domain: RL, policy gradient, recurrent (PPO with an LSTM policy under partial observability)

Kept as written: ``ActorCriticModel``, the ``Buffer``, ``PPOTrainer``'s ``_sample_training_data``,
``_train_epochs`` / ``_train_mini_batch`` and the per-update schedules of ``run_training``, and configs/cartpole.yaml
(gamma 0.99, lamda 0.95, epochs 4, n_mini_batch 4, value_loss_coefficient 0.2, hidden_layer_size 128, max_grad_norm
0.5, LSTM with hidden_state_size 64, sequence_length 8, reset_hidden_state, the lr / beta / clip schedules).

Deviations:
- gymnasium's CartPole-v0 is the numpy cart-pole of ``_cartpole.py`` (``_recurrentppo_lib.CartPole``, velocities
  masked, seeded per worker); the environment is the synthetic data.
- the ``Worker`` processes are the environments called in process, in the same order (``step``, then ``reset`` on an
  episode's end); sizes for 2 CPU cores: n_workers 16 -> 4, worker_steps 256 -> 32.
- ``PPOTrainer`` is written as functions over a ``Run`` namespace (``config``, ``model``, ``optimizer``, ``buffer``,
  ``workers``, ``obs``, ``recurrent_cell``) instead of a class; the Tensorboard writer, printing, episode statistics
  and model saving are left out; ``torch.manual_seed(seed)`` is set (the original leaves torch unseeded); the
  device is the CPU.
- ``train_step`` is one ``_train_mini_batch``: the mini-batches of ``_train_epochs`` are taken one per call, and when
  an update's epochs are used up the next update's schedules are computed, data sampled and ``prepare_batch_dict``
  run, as ``run_training``'s loop does. ``_train_mini_batch``'s lines are split, unchanged, into ``forward_inputs``
  (the recurrent cell), ``ppo_loss`` (the Program's ``loss_fn``) and the update.
- the model's docstrings are cut to their first lines; the ``bug`` switches select the variants in ``BUGS``; with
  ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
from torch import nn, optim
from torch.distributions import Categorical
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _recurrentppo_lib import Buffer, CartPole, polynomial_decay

CONFIG = {
    "environment": {"type": "CartPoleMasked"},
    "gamma": 0.99, "lamda": 0.95, "updates": 100, "epochs": 4, "n_workers": 4, "worker_steps": 32,
    "n_mini_batch": 4, "value_loss_coefficient": 0.2, "hidden_layer_size": 128, "max_grad_norm": 0.5,
    "recurrence": {"sequence_length": 8, "hidden_state_size": 64, "layer_type": "lstm", "reset_hidden_state": True},
    "learning_rate_schedule": {"initial": 3.0e-4, "final": 3.0e-6, "power": 1.0, "max_decay_steps": 100},
    "beta_schedule": {"initial": 0.001, "final": 0.0001, "power": 1.0, "max_decay_steps": 100},
    "clip_range_schedule": {"initial": 0.2, "final": 0.2, "power": 1.0, "max_decay_steps": 1000},
}

# ---- model.py ----------------------------------------------------------------------------------------------------
class ActorCriticModel(nn.Module):
    def __init__(self, config, observation_space, action_space_shape):
        """Model setup"""
        super().__init__()
        self.hidden_size = config["hidden_layer_size"]
        self.recurrence = config["recurrence"]
        self.observation_space_shape = observation_space.shape

        # Observation encoder
        if len(self.observation_space_shape) > 1:
            # Case: visual observation is available
            # Visual encoder made of 3 convolutional layers
            self.conv1 = nn.Conv2d(observation_space.shape[0], 32, 8, 4,)
            self.conv2 = nn.Conv2d(32, 64, 4, 2, 0)
            self.conv3 = nn.Conv2d(64, 64, 3, 1, 0)
            nn.init.orthogonal_(self.conv1.weight, np.sqrt(2))
            nn.init.orthogonal_(self.conv2.weight, np.sqrt(2))
            nn.init.orthogonal_(self.conv3.weight, np.sqrt(2))
            # Compute output size of convolutional layers
            self.conv_out_size = self.get_conv_output(observation_space.shape)
            in_features_next_layer = self.conv_out_size
        else:
            # Case: vector observation is available
            in_features_next_layer = observation_space.shape[0]

        # Recurrent layer (GRU or LSTM)
        if self.recurrence["layer_type"] == "gru":
            self.recurrent_layer = nn.GRU(in_features_next_layer, self.recurrence["hidden_state_size"], batch_first=True)
        elif self.recurrence["layer_type"] == "lstm":
            self.recurrent_layer = nn.LSTM(in_features_next_layer, self.recurrence["hidden_state_size"], batch_first=True)
        # Init recurrent layer
        for name, param in self.recurrent_layer.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0)
            elif "weight" in name:
                nn.init.orthogonal_(param, np.sqrt(2))
        
        # Hidden layer
        self.lin_hidden = nn.Linear(self.recurrence["hidden_state_size"], self.hidden_size)
        nn.init.orthogonal_(self.lin_hidden.weight, np.sqrt(2))

        # Decouple policy from value
        # Hidden layer of the policy
        self.lin_policy = nn.Linear(self.hidden_size, self.hidden_size)
        nn.init.orthogonal_(self.lin_policy.weight, np.sqrt(2))

        # Hidden layer of the value function
        self.lin_value = nn.Linear(self.hidden_size, self.hidden_size)
        nn.init.orthogonal_(self.lin_value.weight, np.sqrt(2))

        # Outputs / Model heads
        # Policy (Multi-discrete categorical distribution)
        self.policy_branches = nn.ModuleList()
        for num_actions in action_space_shape:
            actor_branch = nn.Linear(in_features=self.hidden_size, out_features=num_actions)
            nn.init.orthogonal_(actor_branch.weight, np.sqrt(0.01))
            self.policy_branches.append(actor_branch)

        # Value function
        self.value = nn.Linear(self.hidden_size, 1)
        nn.init.orthogonal_(self.value.weight, 1)

    def forward(self, obs:torch.tensor, recurrent_cell:torch.tensor, device:torch.device, sequence_length:int=1):
        """Forward pass of the model"""
        # Set observation as input to the model
        h = obs
        # Forward observation encoder
        if len(self.observation_space_shape) > 1:
            batch_size = h.size()[0]
            # Propagate input through the visual encoder
            h = F.relu(self.conv1(h))
            h = F.relu(self.conv2(h))
            h = F.relu(self.conv3(h))
            # Flatten the output of the convolutional layers
            h = h.reshape((batch_size, -1))

        # Forward reccurent layer (GRU or LSTM)
        if sequence_length == 1:
            # Case: sampling training data or model optimization using sequence length == 1
            h, recurrent_cell = self.recurrent_layer(h.unsqueeze(1), recurrent_cell)
            h = h.squeeze(1) # Remove sequence length dimension
        else:
            # Case: Model optimization given a sequence length > 1
            # Reshape the to be fed data to batch_size, sequence_length, data
            h_shape = tuple(h.size())
            h = h.reshape((h_shape[0] // sequence_length), sequence_length, h_shape[1])

            # Forward recurrent layer
            h, recurrent_cell = self.recurrent_layer(h, recurrent_cell)

            # Reshape to the original tensor size
            h_shape = tuple(h.size())
            h = h.reshape(h_shape[0] * h_shape[1], h_shape[2])

        # The output of the recurrent layer is not activated as it already utilizes its own activations.

        # Feed hidden layer
        h = F.relu(self.lin_hidden(h))

        # Decouple policy from value
        # Feed hidden layer (policy)
        h_policy = F.relu(self.lin_policy(h))
        # Feed hidden layer (value function)
        h_value = F.relu(self.lin_value(h))
        # Head: Value function
        value = self.value(h_value).reshape(-1)
        # Head: Policy
        pi = [Categorical(logits=branch(h_policy)) for branch in self.policy_branches]

        return pi, value, recurrent_cell

    def get_conv_output(self, shape:tuple) -> int:
        """Computes the output size of the convolutional layers by feeding a dummy tensor."""
        o = self.conv1(torch.zeros(1, *shape))
        o = self.conv2(o)
        o = self.conv3(o)
        return int(np.prod(o.size()))
 
    def init_recurrent_cell_states(self, num_sequences:int, device:torch.device) -> tuple:
        """Initializes the recurrent cell states (hxs, cxs) as zeros."""
        hxs = torch.zeros((num_sequences), self.recurrence["hidden_state_size"], dtype=torch.float32, device=device).unsqueeze(0)
        cxs = None
        if self.recurrence["layer_type"] == "lstm":
            cxs = torch.zeros((num_sequences), self.recurrence["hidden_state_size"], dtype=torch.float32, device=device).unsqueeze(0)
        return hxs, cxs

# ---- trainer.py --------------------------------------------------------------------------------------------------

def _sample_training_data(self, bug=None) -> list:
    episode_infos = []
    # Sample actions from the model and collect experiences for training
    for t in range(self.config["worker_steps"]):
        # Gradients can be omitted for sampling training data
        with torch.no_grad():
            # Save the initial observations and recurrentl cell states
            self.buffer.obs[:, t] = torch.tensor(self.obs)
            if self.recurrence["layer_type"] == "gru":
                self.buffer.hxs[:, t] = self.recurrent_cell.squeeze(0)
            elif self.recurrence["layer_type"] == "lstm":
                self.buffer.hxs[:, t] = self.recurrent_cell[0].squeeze(0)
                self.buffer.cxs[:, t] = self.recurrent_cell[1].squeeze(0)

            # Forward the model to retrieve the policy, the states' value and the recurrent cell states
            policy, value, self.recurrent_cell = self.model(torch.tensor(self.obs), self.recurrent_cell, self.device)
            self.buffer.values[:, t] = value

            # Sample actions from each individual policy branch
            actions = []
            log_probs = []
            for action_branch in policy:
                action = action_branch.sample()
                actions.append(action)
                log_probs.append(action_branch.log_prob(action))
            # Write actions, log_probs and values to buffer
            self.buffer.actions[:, t] = torch.stack(actions, dim=1)
            self.buffer.log_probs[:, t] = torch.stack(log_probs, dim=1)

        # Send actions to the environments and retrieve the step results
        for w, worker in enumerate(self.workers):
            obs, self.buffer.rewards[w, t], self.buffer.dones[w, t], info = worker.step(self.buffer.actions[w, t].cpu().numpy())
            if info:
                # Store the information of the completed episode (e.g. total reward, episode length)
                episode_infos.append(info)
                # Reset agent (potential interface for providing reset parameters)
                obs = worker.reset()
                # Reset recurrent cell states
                if self.recurrence["reset_hidden_state"]:
                    hxs, cxs = self.model.init_recurrent_cell_states(1, self.device)
                    if self.recurrence["layer_type"] == "gru":
                        self.recurrent_cell[:, w] = hxs
                    elif self.recurrence["layer_type"] == "lstm":
                        self.recurrent_cell[0][:, w] = hxs
                        self.recurrent_cell[1][:, w] = cxs
            # Store latest observations
            self.obs[w] = obs
    dones = self.buffer.dones.copy()
    if bug == "gae_done_mask_dropped":  # hidden from GAE only; the sequences still split at the episode ends
        self.buffer.dones[:] = False

    # Calculate advantages
    _, last_value, _ = self.model(torch.tensor(self.obs), self.recurrent_cell, self.device)
    self.buffer.calc_advantages(last_value, self.config["gamma"], self.config["lamda"])
    self.buffer.dones[:] = dones

    return episode_infos


def forward_inputs(self, samples):
    """(port) ``_train_mini_batch``'s first lines: the model's inputs for one mini batch."""
    # Retrieve sampled recurrent cell states to feed the model
    if self.recurrence["layer_type"] == "gru":
        recurrent_cell = samples["hxs"].unsqueeze(0)
    elif self.recurrence["layer_type"] == "lstm":
        recurrent_cell = (samples["hxs"].unsqueeze(0), samples["cxs"].unsqueeze(0))
    return samples["obs"], recurrent_cell, self.device, self.buffer.actual_sequence_length


def ppo_loss(self, outputs, samples, clip_range, beta, bug=None):
    """(port) ``_train_mini_batch`` from the forward pass to the complete loss."""
    policy, value, _ = outputs

    # Policy Loss
    # Retrieve and process log_probs from each policy branch
    log_probs, entropies = [], []
    for i, policy_branch in enumerate(policy):
        log_probs.append(policy_branch.log_prob(samples["actions"][:, i]))
        entropies.append(policy_branch.entropy())
    log_probs = torch.stack(log_probs, dim=1)
    entropies = torch.stack(entropies, dim=1).sum(1).reshape(-1)

    # Remove paddings
    if bug == "loss_mask_dropped":
        # the padded steps kept: the first len(unpadded) predictions are matched to the unpadded samples
        n = samples["advantages"].shape[0]
        value, log_probs, entropies = value[:n], log_probs[:n], entropies[:n]
    else:
        value = value[samples["loss_mask"]]
        log_probs = log_probs[samples["loss_mask"]]
        entropies = entropies[samples["loss_mask"]]

    # Compute policy surrogates to establish the policy loss
    normalized_advantage = (samples["advantages"] - samples["advantages"].mean()) / (samples["advantages"].std() + 1e-8)
    normalized_advantage = normalized_advantage.unsqueeze(1).repeat(1, len(self.action_space_shape)) # Repeat is necessary for multi-discrete action spaces
    ratio = torch.exp(log_probs - samples["log_probs"])
    surr1 = ratio * normalized_advantage
    surr2 = torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range) * normalized_advantage
    policy_loss = torch.min(surr1, surr2)
    policy_loss = policy_loss.mean()

    # Value  function loss
    sampled_return = samples["values"] + samples["advantages"]
    clipped_value = samples["values"] + (value - samples["values"]).clamp(min=-clip_range, max=clip_range)
    vf_loss = torch.max((value - sampled_return) ** 2, (clipped_value - sampled_return) ** 2)
    vf_loss = vf_loss.mean()

    # Entropy Bonus
    entropy_bonus = entropies.mean()

    # Complete loss
    loss = -(policy_loss - self.config["value_loss_coefficient"] * vf_loss + beta * entropy_bonus)
    return loss


def _train_mini_batch(self, samples, learning_rate, clip_range, beta, bug=None):
    outputs = self.model(*forward_inputs(self, samples))
    loss = ppo_loss(self, outputs, samples, clip_range, beta, bug)

    # Compute gradients
    for pg in self.optimizer.param_groups:
        pg["lr"] = learning_rate
    if bug != "zero_grad_after_backward":
        self.optimizer.zero_grad()
    loss.backward()
    if bug == "zero_grad_after_backward":
        self.optimizer.zero_grad()
    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=self.config["max_grad_norm"])
    self.optimizer.step()
    return loss


def _next_update(self, bug=None):
    """(port) one iteration of ``run_training`` up to the epochs: schedules, sampling, sequences; then the epochs'
    mini-batch generators chained (``_train_epochs``)."""
    update = self.update
    self.update += 1
    self.learning_rate = polynomial_decay(self.lr_schedule["initial"], self.lr_schedule["final"], self.lr_schedule["max_decay_steps"], self.lr_schedule["power"], update)
    self.beta = polynomial_decay(self.beta_schedule["initial"], self.beta_schedule["final"], self.beta_schedule["max_decay_steps"], self.beta_schedule["power"], update)
    self.clip_range = polynomial_decay(self.cr_schedule["initial"], self.cr_schedule["final"], self.cr_schedule["max_decay_steps"], self.cr_schedule["power"], update)
    _sample_training_data(self, bug)
    self.buffer.prepare_batch_dict()
    self.mini_batches = (mini_batch for _ in range(self.config["epochs"])
                         for mini_batch in self.buffer.recurrent_mini_batch_generator())


def _make_run(seed, config):
    """(port) ``PPOTrainer.__init__`` without the writer: buffer, model, AdamW, workers, first observations."""
    torch.manual_seed(seed)
    self = types.SimpleNamespace(config=config, recurrence=config["recurrence"], device=torch.device("cpu"),
                                 lr_schedule=config["learning_rate_schedule"], beta_schedule=config["beta_schedule"],
                                 cr_schedule=config["clip_range_schedule"], update=0)
    dummy_env = CartPole(mask_velocity=True)
    self.observation_space = dummy_env.observation_space
    self.action_space_shape = (dummy_env.action_space.n,)
    self.buffer = Buffer(self.config, self.observation_space, self.action_space_shape, self.device)
    self.model = ActorCriticModel(self.config, self.observation_space, self.action_space_shape).to(self.device)
    self.model.train()
    self.optimizer = optim.AdamW(self.model.parameters(), lr=self.lr_schedule["initial"])
    self.workers = [CartPole(mask_velocity=True, seed=seed * 1000 + w) for w in range(self.config["n_workers"])]
    self.obs = np.zeros((self.config["n_workers"],) + self.observation_space.shape, dtype=np.float32)
    hxs, cxs = self.model.init_recurrent_cell_states(self.config["n_workers"], self.device)
    if self.recurrence["layer_type"] == "gru":
        self.recurrent_cell = hxs
    elif self.recurrence["layer_type"] == "lstm":
        self.recurrent_cell = (hxs, cxs)
    for w, worker in enumerate(self.workers):
        self.obs[w] = worker.reset()
    return self


def _build(seed, bug=None):
    self = _make_run(seed, CONFIG)
    _next_update(self, bug)

    def train_step():
        mini_batch = next(self.mini_batches, None)
        if mini_batch is None:
            _next_update(self, bug)
            mini_batch = next(self.mini_batches)
        return _train_mini_batch(self, mini_batch, self.learning_rate, self.clip_range, self.beta, bug)

    def loss_fn(outputs, samples):
        return ppo_loss(self, outputs, samples, self.clip_range, self.beta, bug)

    samples = next(self.buffer.recurrent_mini_batch_generator())
    batch = (forward_inputs(self, samples), samples)
    return Program(name="recurrentppo_cartpole", model=self.model, batch=batch, loss_fn=loss_fn,
                   optimizer=self.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the padding mask dropped; the padded outputs are kept and the first ones matched to the unpadded
    # samples, so the losses compare steps of different sequences.
    Bug("loss_mask_dropped", functools.partial(_build, bug="loss_mask_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the done flags lost before GAE, so advantages and returns bootstrap across episode ends.
    Bug("gae_done_mask_dropped", functools.partial(_build, bug="gae_done_mask_dropped"), "learning_ledger",
        ("TASK",)),
    # classic: ``zero_grad`` moved after ``backward``: every step applies zero gradients (AdamW's decay alone).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
