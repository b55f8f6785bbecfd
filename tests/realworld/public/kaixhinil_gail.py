# ruff: noqa: F841, UP006, UP035
"""GAIL with a SAC learner, from Kaixhin/imitation-learning (``algorithm=GAIL``): a spectrally normalized
state-action discriminator trained with BCE-with-logits to tell expert transitions (ones) from the agent's (zeros),
plus a gradient penalty on expert/agent interpolates; the agent's replay rewards relabelled by the discriminator's
AIRL reward ``log D - log(1 - D)``; soft actor-critic (tanh-Gaussian actor, twin critics with Polyak targets, learned
temperature) on those rewards; absorbing-state wrapping of terminal transitions on both the expert data and the
agent's replay; one environment step, one discriminator update and one SAC update per step after ``training.start``.

Source: https://github.com/Kaixhin/imitation-learning
Commit: 28d2f5bb709e1fb0f48750ea9d1b88ff87d06388
Files: train.py (the GAIL path), training.py (``sac_update``, ``_mix_vars``, ``adversarial_imitation_update``),
conf/train_config.yaml, conf/algorithm/GAIL.yaml (models, replay memory and environment wrapper in the helper
``_kaixhinil_lib.py``)
License: MIT (Copyright (c) 2020 Kai Arulkumaran; full text in LICENSES/Kaixhin-imitation-learning.txt)
Domain: RL, adversarial imitation learning (GAIL + SAC, off-policy, absorbing states)

Kept as written: ``sac_update``, ``adversarial_imitation_update`` (every loss branch), train.py's GAIL lines (agent
and discriminator construction with their AdamW/Adam optimisers, the step loop: sample from the policy, store with
terminal/timeout flags, absorbing wrapping, sample agent and expert batches, discriminator update between ``train()``
and ``eval()``, reward relabelling under ``inference_mode``, SAC update) and the configuration of train_config.yaml
with GAIL.yaml (discount 0.97, target_temperature -0.5, polyak 0.99, batch 256, lr 3e-4, training start 1000,
discriminator 64 x 1 ReLU with spectral norm, lr 3e-5, weight decay 10, grad_penalty 1, BCE, AIRL reward).

Deviations from the original:
- d4rl/MuJoCo are not available: the environment and its expert dataset are the numpy continuous cart-pole of
  ``_kaixhinil_lib.py`` (``ExpertCartPole``: 8 expert episodes of a balancing controller); the data is synthetic;
- sizes: steps 1000000 -> 20000 (so the replay memory holds 20000 transitions); hydra/omegaconf configuration is a
  ``DictConfig`` of ``SimpleNamespace``s; only the GAIL path of train.py is kept (the BC pretraining, other
  algorithms, evaluation, metrics, the tqdm bar, plots and saving are left out); the global ``np.random`` and ``torch`` generators
  are seeded from ``seed``; two-space indentation is four spaces;
- the loop yields each step's sampled agent and expert batches and the lines training on them are moved, unchanged,
  into ``update``, so ``train_step`` is one training step of the loop (its environment step first); the self-check
  runs 200 of them (the discriminator's loss falls by about 0.001 per 10 steps at its rate of 3e-5);
  ``adversarial_imitation_update`` returns the discriminator's loss;
- the Program's ``model`` is the discriminator and its ``loss_fn`` the BCE branch's loss on the agent batch (zeros)
  followed by the expert batch (ones) of the first training step (the gradient penalty, a separate backward, is not
  in it);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from typing import Dict, Tuple

import numpy as np
import torch
from torch import Tensor, autograd, optim
from torch.distributions import Bernoulli, Beta
from torch.nn import functional as F
from torch.optim import Optimizer

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _kaixhinil_lib import (
    D4RLEnv,
    DictConfig,
    GAILDiscriminator,
    ReplayMemory,
    SoftActor,
    TwinCritic,
    create_target_network,
    make_gail_input,
    update_target_network,
)

SELF_CHECK_STEPS = 200  # the discriminator's rate 3e-5 and weight decay 10 make its loss fall slowly


def make_cfg():
    """conf/train_config.yaml with conf/algorithm/GAIL.yaml merged over it (steps shrunk)."""
    C = DictConfig
    return C(
        algorithm='GAIL', seed=0, steps=20000, env='cartpole',
        bc_pretraining=C(iterations=0, learning_rate=0.00025, weight_decay=0),
        training=C(start=1000, interval=1, batch_size=256, learning_rate=0.0003, weight_decay=0),
        reinforcement=C(actor=C(hidden_size=256, depth=2, activation='relu'),
                        critic=C(hidden_size=256, depth=2, activation='relu'),
                        discount=0.97, target_temperature=-0.5, polyak_factor=0.99),
        memory=C(size=1000000),
        imitation=C(trajectories=0, subsample=1, state_only=False, absorbing=True, mix_expert_data='none',
                    bc_aux_loss=False,
                    discriminator=C(hidden_size=64, depth=1, activation='relu', input_dropout=0.5, dropout=0.75,
                                    reward_shaping=False, subtract_log_policy=False, reward_function='AIRL'),
                    learning_rate=0.00003, weight_decay=10, grad_penalty=1, spectral_norm=True, entropy_bonus=0,
                    loss_function='BCE', mixup_alpha=1, pos_class_prior=0.7, nonnegative_margin=math.inf))


# ---- training.py -------------------------------------------------------------------------------------------------

# Performs one SAC update
def sac_update(actor: SoftActor, critic: TwinCritic, log_alpha: Tensor, target_critic, transitions: Dict[str, Tensor], actor_optimiser: Optimizer, critic_optimiser: Optimizer, temperature_optimiser: Optimizer, discount: float, entropy_target: float, polyak_factor: float) -> Tuple[Tensor, Tensor]:
    states, actions, rewards, next_states, terminals, weights, absorbing = transitions['states'], transitions['actions'], transitions['rewards'], transitions['next_states'], transitions['terminals'], transitions['weights'], transitions['absorbing']
    alpha = log_alpha.exp()
  
    # Compute value function loss
    with torch.no_grad():
        new_next_policies = actor(next_states)
        new_next_actions = new_next_policies.sample()
        new_next_log_probs = new_next_policies.log_prob(new_next_actions)  # Log prob calculated before absorbing state rewrite; these are masked out of target values, but tends to result in NaNs as the policy might be strange over the all-zeros "absorbing action", and NaNs propagate into the target values, so we just avoid it in the first place
        new_next_actions = (1 - absorbing.unsqueeze(dim=1)) * new_next_actions  # If current state is absorbing, manually overwrite with absorbing state action
        target_values = torch.min(*target_critic(next_states, new_next_actions)) - (1 - absorbing) * alpha * new_next_log_probs  # Agent has no control at absorbing state, therefore do not maximise entropy on these
        target_values = rewards + (1 - terminals) * discount * target_values
    values_1, values_2 = critic(states, actions)
    value_loss = (weights * (values_1 - target_values).pow(2)).mean() + (weights * (values_2 - target_values).pow(2)).mean()
    # Update critic
    critic_optimiser.zero_grad(set_to_none=True)
    value_loss.backward()
    critic_optimiser.step()

    # Compute policy loss
    new_policies = actor(states)
    new_actions = new_policies.rsample()
    new_log_probs = new_policies.log_prob(new_actions)
    new_values = torch.min(*critic(states, new_actions))
    policy_loss = (weights * (1 - absorbing) * alpha.detach() * new_log_probs - new_values).mean()  # Do not update actor on absorbing states (no control)
    # Update actor
    actor_optimiser.zero_grad(set_to_none=True)
    policy_loss.backward()
    actor_optimiser.step()

    # Compute temperature loss
    temperature_loss = -(weights * (1 - absorbing) * alpha * (new_log_probs.detach() + entropy_target)).mean()  # Do not update temperature on absorbing states (no control)
    # Update temperature
    temperature_optimiser.zero_grad(set_to_none=True)
    temperature_loss.backward()
    temperature_optimiser.step()

    # Update target critic
    update_target_network(critic, target_critic, polyak_factor)

    return new_log_probs.detach(), torch.min(values_1, values_2).detach()


# Creates a convex combination of 2 variables (e.g. state 1, state 2)
def _mix_vars(x_1: Tensor, x_2: Tensor, eps: Tensor) -> Tensor:
    mix = eps.unsqueeze(dim=1) if x_1.ndim == 2 else eps  # Assumes variables are either 1D or 2D
    return mix * x_1 + (1 - mix) * x_2  # Mix variables with broadcasting weights


# Performs an adversarial imitation learning update
def adversarial_imitation_update(actor: SoftActor, discriminator: GAILDiscriminator, transitions: Dict[str, Tensor], expert_transitions: Dict[str, Tensor], discriminator_optimiser: Optimizer, imitation_cfg: DictConfig, bug=None):
    reward_shaping, subtract_log_policy, loss_function, grad_penalty, mixup_alpha, entropy_bonus, pos_class_prior, nonnegative_margin = imitation_cfg.discriminator.reward_shaping, imitation_cfg.discriminator.subtract_log_policy, imitation_cfg.loss_function, imitation_cfg.grad_penalty, imitation_cfg.mixup_alpha, imitation_cfg.entropy_bonus, imitation_cfg.pos_class_prior, imitation_cfg.nonnegative_margin

    expert_state, expert_action, expert_next_state, expert_terminal, expert_weight = expert_transitions['states'], expert_transitions['actions'], expert_transitions['next_states'], expert_transitions['terminals'], expert_transitions['weights']
    state, action, next_state, terminal, weight = transitions['states'], transitions['actions'], transitions['next_states'], transitions['terminals'], transitions['weights']

    # Discriminator training objective
    if bug != "discriminator_zero_grad_dropped":
        discriminator_optimiser.zero_grad(set_to_none=True)
    if loss_function in ['BCE', 'PUGAIL']:
        with torch.no_grad(): policy_input, expert_input = make_gail_input(state, action, next_state, terminal, actor, reward_shaping, subtract_log_policy), make_gail_input(expert_state, expert_action, expert_next_state, expert_terminal, actor, reward_shaping, subtract_log_policy)
        D_policy, D_expert = discriminator(**policy_input), discriminator(**expert_input)
        if bug == "sigmoid_before_bce_with_logits":
            D_policy, D_expert = torch.sigmoid(D_policy), torch.sigmoid(D_expert)
        real, fake = (torch.zeros_like, torch.ones_like) if bug == "expert_policy_labels_swapped" else (torch.ones_like, torch.zeros_like)

        if loss_function == 'BCE':
            expert_loss = F.binary_cross_entropy_with_logits(D_expert, real(D_expert), weight=expert_weight)  # Loss on "real" (expert) data
            policy_loss = F.binary_cross_entropy_with_logits(D_policy, fake(D_policy), weight=weight)  # Loss on "fake" (policy) data
        else:
            expert_loss = pos_class_prior * F.binary_cross_entropy_with_logits(D_expert, torch.ones_like(D_expert), weight=expert_weight)  # Loss on "real" (expert) data
            policy_loss = torch.clamp(pos_class_prior * F.binary_cross_entropy_with_logits(D_expert, torch.zeros_like(D_expert), weight=expert_weight) - F.binary_cross_entropy_with_logits(D_policy, torch.zeros_like(D_policy), weight=weight), min=-nonnegative_margin)  # Loss on "real" and "unlabelled" (policy) data
        (expert_loss + policy_loss).backward(retain_graph=True)
        entropy_Ds, entropy_weights = [D_expert, D_policy], [expert_weight, weight]
    elif loss_function == 'Mixup':
        batch_size = state.size(0)
        eps = Beta(torch.full((batch_size, ), float(mixup_alpha)), torch.full((batch_size, ), float(mixup_alpha))).sample()  # Sample ε ∼ Beta(α, α)
        mix_state, mix_action, mix_next_state, mix_terminal, mix_weight = _mix_vars(expert_state, state, eps), _mix_vars(expert_action, action, eps), _mix_vars(expert_next_state, next_state, eps), _mix_vars(expert_terminal, terminal, eps), _mix_vars(expert_weight, weight, eps)  # Create convex combination of expert and policy data
        with torch.no_grad(): mix_input = make_gail_input(mix_state, mix_action, mix_next_state, mix_terminal, actor, reward_shaping, subtract_log_policy)
        D_mix = discriminator(**mix_input)

        mix_loss = eps * F.binary_cross_entropy_with_logits(D_mix, torch.ones_like(D_mix), weight=mix_weight, reduction='none') + (1 - eps) * F.binary_cross_entropy_with_logits(D_mix, torch.zeros_like(D_mix), weight=mix_weight, reduction='none') 
        mix_loss.mean(dim=0).backward(retain_graph=True)
        entropy_Ds, entropy_weights = [D_mix], [mix_weight]

    # Gradient penalty
    if grad_penalty > 0:
        eps = torch.rand_like(terminal)  # Sample ε ∼ U(0, 1)
        eps_2d = eps.unsqueeze(dim=1)  # Expand weights for broadcasting
        mix_state, mix_action, mix_next_state, mix_terminal, mix_weight = _mix_vars(expert_state, state, eps), _mix_vars(expert_action, action, eps), _mix_vars(expert_next_state, next_state, eps), _mix_vars(expert_terminal, terminal, eps), _mix_vars(expert_weight, weight, eps)  # Create convex combination of expert and policy data
        mix_state.requires_grad_()
        mix_action.requires_grad_()
        with torch.no_grad(): mix_input = make_gail_input(mix_state, mix_action, mix_next_state, mix_terminal, actor, reward_shaping, subtract_log_policy)
        D_mix = discriminator(**mix_input)
        grads = autograd.grad(D_mix, (mix_state, mix_action), torch.ones_like(D_mix), create_graph=True)  # Calculate gradients wrt inputs (does not accumulate parameter gradients)
        grad_penalty_loss = grad_penalty * mix_weight * sum([grad.norm(2, dim=1) ** 2 for grad in grads])  # Penalise norm of input gradients (assumes 1D inputs)
        grad_penalty_loss.mean(dim=0).backward()

    # Entropy bonus
    if entropy_bonus > 0:
        entropy_bonus_loss = -entropy_bonus * (sum([w * Bernoulli(logits=l).entropy() for l, w in zip(entropy_Ds, entropy_weights)])).mean()  # Maximise entropy
        entropy_bonus_loss.backward()

    discriminator_optimiser.step()
    return (expert_loss + policy_loss).detach() if loss_function in ['BCE', 'PUGAIL'] else mix_loss.mean().detach()


# ---- train.py (the GAIL path) ------------------------------------------------------------------------------------

def train(cfg, env, memory, expert_memory, actor, discriminator):
    """The step loop; yields each training step's agent and expert batches (``update`` trains on them)."""
    # Training
    t, state, terminal, train_return = 0, env.reset(), False, 0
    if cfg.algorithm in ['GAIL', 'RED']: discriminator.eval()  # Set the "discriminator" to evaluation mode (except for DRIL, which explicitly uses dropout)
    for step in range(1, cfg.steps + 1):
        # Collect set of transitions by running policy π in the environment
        with torch.inference_mode():
            action = actor(state).sample()
            next_state, reward, terminal = env.step(action)
            t += 1
            train_return += reward
            memory.append(step, state, action, reward, next_state, terminal and t != env.max_episode_steps, t == env.max_episode_steps)  # True reward stored for SAC, should be overwritten by IL algorithms; if env terminated due to a time limit then do not count as terminal (store as timeout)
            state = next_state

        # Reset environment and track metrics on episode termination
        if terminal:  # If terminal (or timed out)
            if cfg.imitation.absorbing and t != env.max_episode_steps: memory.wrap_for_absorbing_states()  # Wrap for absorbing state if terminated without time limit
            t, state, train_return = 0, env.reset(), 0

        # Train agent and imitation learning component
        if step >= cfg.training.start and step % cfg.training.interval == 0:
            # Sample a batch of transitions
            transitions, expert_transitions = memory.sample(cfg.training.batch_size), expert_memory.sample(cfg.training.batch_size)
            yield transitions, expert_transitions


def _build(seed, bug=None):
    cfg = make_cfg()
    cfg.seed = seed
    cfg.memory.size = min(cfg.steps, cfg.memory.size)  # Set max replay memory size to min of environment steps and replay memory size

    # General setup
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    # Set up environment
    env = D4RLEnv(cfg.env, cfg.imitation.absorbing, load_data=True)
    env.seed(cfg.seed)

    expert_memory = env.get_dataset(trajectories=cfg.imitation.trajectories, subsample=cfg.imitation.subsample)  # Load expert trajectories dataset
    state_size, action_size = env.observation_space.shape[0], env.action_space.shape[0]

    # Set up agent
    actor, critic, log_alpha = SoftActor(state_size, action_size, cfg.reinforcement.actor), TwinCritic(state_size, action_size, cfg.reinforcement.critic), torch.zeros(1, requires_grad=True)
    target_critic, entropy_target = create_target_network(critic), cfg.reinforcement.target_temperature * action_size  # Entropy target heuristic from SAC paper for continuous action domains
    actor_optimiser, critic_optimiser, temperature_optimiser = optim.AdamW(actor.parameters(), lr=cfg.training.learning_rate, weight_decay=cfg.training.weight_decay), optim.AdamW(critic.parameters(), lr=cfg.training.learning_rate, weight_decay=cfg.training.weight_decay), optim.Adam([log_alpha], lr=cfg.training.learning_rate)
    memory = ReplayMemory(cfg.memory.size, state_size, action_size, cfg.imitation.absorbing)

    # Set up imitation learning components
    discriminator = GAILDiscriminator(state_size, action_size, cfg.imitation, cfg.reinforcement.discount)
    discriminator_optimiser = optim.AdamW(discriminator.parameters(), lr=cfg.imitation.learning_rate, weight_decay=cfg.imitation.weight_decay)

    def update(transitions, expert_transitions):
        """(port) the loop's lines after sampling, for GAIL; returns the discriminator's loss."""
        # Train discriminator
        discriminator.train()
        loss = adversarial_imitation_update(actor, discriminator, transitions, expert_transitions, discriminator_optimiser, cfg.imitation, bug=bug)
        discriminator.eval()

        # Predict rewards
        states, actions, next_states, terminals = transitions['states'], transitions['actions'], transitions['next_states'], transitions['terminals']
        with torch.inference_mode():
            transitions['rewards'] = discriminator.predict_reward(**make_gail_input(states, actions, next_states, terminals, actor, cfg.imitation.discriminator.reward_shaping, cfg.imitation.discriminator.subtract_log_policy))

        # Perform a SAC update
        sac_update(actor, critic, log_alpha, target_critic, transitions, actor_optimiser, critic_optimiser, temperature_optimiser, cfg.reinforcement.discount, entropy_target, cfg.reinforcement.polyak_factor)
        return loss

    loop = train(cfg, env, memory, expert_memory, actor, discriminator)
    pending = {"batches": next(loop)}  # the steps before training.start, and the first step's batches

    def train_step():
        loss = update(*pending["batches"])
        pending["batches"] = next(loop)
        return loss

    return _program(pending["batches"], cfg.training.batch_size, discriminator, discriminator_optimiser, train_step, bug)


def _program(batches, n, discriminator, discriminator_optimiser, train_step, bug):
    """The Program: the discriminator, the first training step's agent and expert batches, the BCE loss."""
    transitions, expert_transitions = batches
    labels = torch.cat([torch.zeros(n), torch.ones(n)])  # policy ("fake") then expert ("real")
    if bug == "expert_policy_labels_swapped":
        labels = 1 - labels
    batch = ((torch.cat([transitions['states'], expert_transitions['states']]),
              torch.cat([transitions['actions'], expert_transitions['actions']])),
             (labels, torch.cat([transitions['weights'], expert_transitions['weights']])))

    def loss_fn(D, targets):
        """``adversarial_imitation_update``'s BCE loss on the discriminator's logits for the two batches."""
        labels, weights = targets
        D_policy, D_expert = D[:n], D[n:]
        if bug == "sigmoid_before_bce_with_logits":
            D_policy, D_expert = torch.sigmoid(D_policy), torch.sigmoid(D_expert)
        expert_loss = F.binary_cross_entropy_with_logits(D_expert, labels[n:], weight=weights[n:])
        policy_loss = F.binary_cross_entropy_with_logits(D_policy, labels[:n], weight=weights[:n])
        return expert_loss + policy_loss

    return Program(name="kaixhinil_gail", model=discriminator, batch=batch, loss_fn=loss_fn,
                   optimizer=discriminator_optimiser, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the expert batch labelled 0 and the agent's 1, so the discriminator learns to call the expert fake
    # and the relabelled rewards pay the agent for moving away from the expert's state-actions.
    Bug("expert_policy_labels_swapped", functools.partial(_build, bug="expert_policy_labels_swapped"),
        "learning_ledger", ("TASK",)),
    # classic: the discriminator's logits passed through a sigmoid before ``binary_cross_entropy_with_logits``.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: ``discriminator_optimiser.zero_grad`` left out, so each update applies every past step's gradients.
    # Every discriminator parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("discriminator_zero_grad_dropped", functools.partial(_build, bug="discriminator_zero_grad_dropped"),
        "step_probe", (), kind="step.grad_accumulation"),
]
