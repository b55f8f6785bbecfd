# ruff: noqa: C408, PIE808, PLR0402, RUF059, SIM101, UP004
"""SAC+AE from pixels (soft actor-critic with a pixel encoder trained by a reconstruction decoder) on a rendered
pendulum.

Source: https://github.com/denisyarats/pytorch_sac_ae, commit 7fa560e21c026c04bb8dcd72959ecf4e3424476c, files
``sac_ae.py`` (``gaussian_logprob``, ``squash``, ``weight_init``, ``Actor``, ``QFunction``, ``Critic``,
``SacAeAgent``), ``encoder.py`` (``PixelEncoder``, ``tie_weights``), ``decoder.py`` (``PixelDecoder``),
``utils.py`` (``soft_update_params``, ``preprocess_obs``, ``ReplayBuffer``, ``FrameStack``, ``eval_mode``),
``train.py`` (the hyperparameters and the step loop). License: MIT (Copyright (c) 2020 Denis Yarats; full text in
LICENSES/denisyarats-pytorch_sac_ae.txt).

Kept as written: the networks (pixel encoder: a stride-2 3x3 conv then num_layers-1 stride-1 convs, fc,
LayerNorm, tanh; the actor's conv weights tied to the critic's; tanh-squashed Gaussian actor with log_std bounded
in [-10, 2]; twin Q heads; the deconvolutional decoder), the delta-orthogonal/orthogonal ``weight_init``, every
update as written (``update_critic``: clipped double-Q soft target with ``not_done``; ``update_actor_and_alpha``
every ``actor_update_freq`` (2) with the encoder detached, then the temperature loss; the soft target updates of
Q1, Q2 (tau 0.01) and the encoder (tau 0.05) every 2 steps; ``update_decoder``: reconstruction of the
``preprocess_obs`` target (5 bits, dequantized) plus the latent L2 penalty, stepping the critic's encoder and the
decoder), train.py's defaults (lr 1e-3 everywhere but alpha_lr 1e-4, betas 0.9 / alpha_beta 0.5, init_temperature
0.1, discount 0.99, encoder_feature_dim 50, num_layers 4, decoder_latent_lambda 1e-6,
decoder_weight_lambda 1e-7, frame_stack 3, "infinite bootstrap": the time-limit end is not a terminal), random
actions until ``init_steps`` then ``sample_action`` under ``eval_mode``, one ``agent.update`` per environment step.

Deviations:
- the DeepMind Control Suite (cheetah run, rendered 84x84) is replaced by the pendulum of ``_continuous_control.py``
  rendered here in numpy as a 20x20 RGB image (a coloured rod from the centre, its angle the pendulum's), stacked 3
  frames deep as ``FrameStack`` does; the actor's action in [-1, 1] is scaled by the pendulum's maximum torque (the
  dmc2gym wrapper normalizes action spaces). ``OUT_DIM`` (the conv output side, 35 for 84x84 with 4 layers) is
  3 for 20x20, which the decoder's last stride-2 deconvolution maps back to 20.
- sizes for 2 CPU cores: batch_size 128 -> 32, hidden_dim 1024 -> 128, num_filters 32 -> 16, init_steps
  1000 -> 200, replay capacity 1e6 -> 5000; the first update after ``init_steps`` (which train.py repeats
  ``init_steps`` times) is one update.
- the logger ``L`` and the ``log`` methods are left out; ``update_critic`` returns its loss so the step can report it.
- ``np.random`` (the replay buffer's sampling) is a ``numpy.random.RandomState(seed)``; seeds come from ``seed``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

IMAGE_SIZE = 20
FRAME_STACK = 3
BATCH_SIZE = 32
HIDDEN_DIM = 128
INIT_STEPS = 200
CAPACITY = 5000

# ---- encoder.py ---------------------------------------------------------------------------------------------
OUT_DIM = {4: 3}  # 20x20 input: 9 after the stride-2 conv, then 7, 5, 3


def tie_weights(src, trg):
    assert type(src) == type(trg)
    trg.weight = src.weight
    trg.bias = src.bias


class PixelEncoder(nn.Module):
    """Convolutional encoder of pixels observations."""
    def __init__(self, obs_shape, feature_dim, num_layers=2, num_filters=32):
        super().__init__()

        assert len(obs_shape) == 3

        self.feature_dim = feature_dim
        self.num_layers = num_layers

        self.convs = nn.ModuleList(
            [nn.Conv2d(obs_shape[0], num_filters, 3, stride=2)]
        )
        for i in range(num_layers - 1):
            self.convs.append(nn.Conv2d(num_filters, num_filters, 3, stride=1))

        out_dim = OUT_DIM[num_layers]
        self.fc = nn.Linear(num_filters * out_dim * out_dim, self.feature_dim)
        self.ln = nn.LayerNorm(self.feature_dim)

        self.outputs = dict()

    def forward_conv(self, obs):
        obs = obs / 255.
        self.outputs['obs'] = obs

        conv = torch.relu(self.convs[0](obs))
        self.outputs['conv1'] = conv

        for i in range(1, self.num_layers):
            conv = torch.relu(self.convs[i](conv))
            self.outputs['conv%s' % (i + 1)] = conv

        h = conv.view(conv.size(0), -1)
        return h

    def forward(self, obs, detach=False):
        h = self.forward_conv(obs)

        if detach:
            h = h.detach()

        h_fc = self.fc(h)
        self.outputs['fc'] = h_fc

        h_norm = self.ln(h_fc)
        self.outputs['ln'] = h_norm

        out = torch.tanh(h_norm)
        self.outputs['tanh'] = out

        return out

    def copy_conv_weights_from(self, source):
        """Tie convolutional layers"""
        # only tie conv layers
        for i in range(self.num_layers):
            tie_weights(src=source.convs[i], trg=self.convs[i])


# ---- decoder.py ---------------------------------------------------------------------------------------------
class PixelDecoder(nn.Module):
    def __init__(self, obs_shape, feature_dim, num_layers=2, num_filters=32):
        super().__init__()

        self.num_layers = num_layers
        self.num_filters = num_filters
        self.out_dim = OUT_DIM[num_layers]

        self.fc = nn.Linear(
            feature_dim, num_filters * self.out_dim * self.out_dim
        )

        self.deconvs = nn.ModuleList()

        for i in range(self.num_layers - 1):
            self.deconvs.append(
                nn.ConvTranspose2d(num_filters, num_filters, 3, stride=1)
            )
        self.deconvs.append(
            nn.ConvTranspose2d(
                num_filters, obs_shape[0], 3, stride=2, output_padding=1
            )
        )

        self.outputs = dict()

    def forward(self, h):
        h = torch.relu(self.fc(h))
        self.outputs['fc'] = h

        deconv = h.view(-1, self.num_filters, self.out_dim, self.out_dim)
        self.outputs['deconv1'] = deconv

        for i in range(0, self.num_layers - 1):
            deconv = torch.relu(self.deconvs[i](deconv))
            self.outputs['deconv%s' % (i + 1)] = deconv

        obs = self.deconvs[-1](deconv)
        self.outputs['obs'] = obs

        return obs


# ---- utils.py -----------------------------------------------------------------------------------------------
class eval_mode(object):
    def __init__(self, *models):
        self.models = models

    def __enter__(self):
        self.prev_states = []
        for model in self.models:
            self.prev_states.append(model.training)
            model.train(False)

    def __exit__(self, *args):
        for model, state in zip(self.models, self.prev_states):
            model.train(state)
        return False


def soft_update_params(net, target_net, tau):
    for param, target_param in zip(net.parameters(), target_net.parameters()):
        target_param.data.copy_(
            tau * param.data + (1 - tau) * target_param.data
        )


def preprocess_obs(obs, bits=5):
    """Preprocessing image, see https://arxiv.org/abs/1807.03039."""
    bins = 2**bits
    assert obs.dtype == torch.float32
    if bits < 8:
        obs = torch.floor(obs / 2**(8 - bits))
    obs = obs / bins
    obs = obs + torch.rand_like(obs) / bins
    obs = obs - 0.5
    return obs


class ReplayBuffer(object):
    """Buffer to store environment transitions."""
    def __init__(self, obs_shape, action_shape, capacity, batch_size, device, np_random=None, bug=None):
        self.capacity = capacity
        self.batch_size = batch_size
        self.device = device
        self.np_random = np_random

        # the proprioceptive obs is stored as float32, pixels obs as uint8
        obs_dtype = np.float32 if len(obs_shape) == 1 else np.uint8

        self.obses = np.empty((capacity, *obs_shape), dtype=obs_dtype)
        self.next_obses = np.empty((capacity, *obs_shape), dtype=obs_dtype)
        self.actions = np.empty((capacity, *action_shape), dtype=np.float32)
        if bug == "reward_not_reshaped":
            self.rewards = np.empty((capacity,), dtype=np.float32)
        else:
            self.rewards = np.empty((capacity, 1), dtype=np.float32)
        self.not_dones = np.empty((capacity, 1), dtype=np.float32)

        self.idx = 0
        self.last_save = 0
        self.full = False

    def add(self, obs, action, reward, next_obs, done):
        np.copyto(self.obses[self.idx], obs)
        np.copyto(self.actions[self.idx], action)
        if self.rewards.ndim == 1:  # bug "reward_not_reshaped": a flat array takes the reward by assignment
            self.rewards[self.idx] = reward
        else:
            np.copyto(self.rewards[self.idx], reward)
        np.copyto(self.next_obses[self.idx], next_obs)
        np.copyto(self.not_dones[self.idx], not done)

        self.idx = (self.idx + 1) % self.capacity
        self.full = self.full or self.idx == 0

    def sample(self):
        idxs = self.np_random.randint(
            0, self.capacity if self.full else self.idx, size=self.batch_size
        )

        obses = torch.as_tensor(self.obses[idxs], device=self.device).float()
        actions = torch.as_tensor(self.actions[idxs], device=self.device)
        rewards = torch.as_tensor(self.rewards[idxs], device=self.device)
        next_obses = torch.as_tensor(
            self.next_obses[idxs], device=self.device
        ).float()
        not_dones = torch.as_tensor(self.not_dones[idxs], device=self.device)

        return obses, actions, rewards, next_obses, not_dones


class FrameStack:
    def __init__(self, env, k):
        self._env = env
        self._k = k
        self._frames = collections.deque([], maxlen=k)
        self._max_episode_steps = env._max_episode_steps

    def reset(self):
        obs = self._env.reset()
        for _ in range(self._k):
            self._frames.append(obs)
        return self._get_obs()

    def step(self, action):
        obs, reward, done, info = self._env.step(action)
        self._frames.append(obs)
        return self._get_obs(), reward, done, info

    def _get_obs(self):
        assert len(self._frames) == self._k
        return np.concatenate(list(self._frames), axis=0)


class PixelPendulum:
    """The pendulum rendered as a 3x20x20 uint8 image, actions in [-1, 1] scaled to the torque range."""

    def __init__(self, seed):
        self._env = Pendulum()
        self._env.seed(seed)
        self._max_episode_steps = self._env._max_episode_steps
        yy, xx = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE]
        self._yy, self._xx = yy - IMAGE_SIZE / 2 + 0.5, xx - IMAGE_SIZE / 2 + 0.5

    def _render(self):
        th = self._env.state[0]
        ux, uy = math.sin(th), -math.cos(th)  # upright (th = 0) points up the image
        along = self._xx * ux + self._yy * uy
        across = np.abs(self._xx * uy - self._yy * ux)
        rod = (along > 0) & (along < IMAGE_SIZE * 0.45) & (across < 1.2)
        img = np.zeros((3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
        img[0][rod] = 220
        img[1][rod] = 120
        img[2][(self._xx ** 2 + self._yy ** 2) < 2.5] = 255
        return img

    def reset(self):
        self._env.reset()
        return self._render()

    def step(self, action):
        _, reward, done, info = self._env.step(np.asarray(action, dtype=np.float32) * self._env.MAX_TORQUE)
        return self._render(), reward, done, info


# ---- sac_ae.py ----------------------------------------------------------------------------------------------
def gaussian_logprob(noise, log_std):
    """Compute Gaussian log probability."""
    residual = (-0.5 * noise.pow(2) - log_std).sum(-1, keepdim=True)
    return residual - 0.5 * np.log(2 * np.pi) * noise.size(-1)


def squash(mu, pi, log_pi):
    """Apply squashing function.
    See appendix C from https://arxiv.org/pdf/1812.05905.pdf.
    """
    mu = torch.tanh(mu)
    if pi is not None:
        pi = torch.tanh(pi)
    if log_pi is not None:
        log_pi -= torch.log(F.relu(1 - pi.pow(2)) + 1e-6).sum(-1, keepdim=True)
    return mu, pi, log_pi


def weight_init(m):
    """Custom weight init for Conv2D and Linear layers."""
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        m.bias.data.fill_(0.0)
    elif isinstance(m, nn.Conv2d) or isinstance(m, nn.ConvTranspose2d):
        # delta-orthogonal init from https://arxiv.org/pdf/1806.05393.pdf
        assert m.weight.size(2) == m.weight.size(3)
        m.weight.data.fill_(0.0)
        m.bias.data.fill_(0.0)
        mid = m.weight.size(2) // 2
        gain = nn.init.calculate_gain('relu')
        nn.init.orthogonal_(m.weight.data[:, :, mid, mid], gain)


class Actor(nn.Module):
    """MLP actor network."""
    def __init__(
        self, obs_shape, action_shape, hidden_dim, encoder_type,
        encoder_feature_dim, log_std_min, log_std_max, num_layers, num_filters
    ):
        super().__init__()

        self.encoder = PixelEncoder(obs_shape, encoder_feature_dim, num_layers, num_filters)

        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

        self.trunk = nn.Sequential(
            nn.Linear(self.encoder.feature_dim, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, 2 * action_shape[0])
        )

        self.outputs = dict()
        self.apply(weight_init)

    def forward(
        self, obs, compute_pi=True, compute_log_pi=True, detach_encoder=False
    ):
        obs = self.encoder(obs, detach=detach_encoder)

        mu, log_std = self.trunk(obs).chunk(2, dim=-1)

        # constrain log_std inside [log_std_min, log_std_max]
        log_std = torch.tanh(log_std)
        log_std = self.log_std_min + 0.5 * (
            self.log_std_max - self.log_std_min
        ) * (log_std + 1)

        self.outputs['mu'] = mu
        self.outputs['std'] = log_std.exp()

        if compute_pi:
            std = log_std.exp()
            noise = torch.randn_like(mu)
            pi = mu + noise * std
        else:
            pi = None

        if compute_log_pi:
            log_pi = gaussian_logprob(noise, log_std)
        else:
            log_pi = None

        mu, pi, log_pi = squash(mu, pi, log_pi)

        return mu, pi, log_pi, log_std


class QFunction(nn.Module):
    """MLP for q-function."""
    def __init__(self, obs_dim, action_dim, hidden_dim):
        super().__init__()

        self.trunk = nn.Sequential(
            nn.Linear(obs_dim + action_dim, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, 1)
        )

    def forward(self, obs, action):
        assert obs.size(0) == action.size(0)

        obs_action = torch.cat([obs, action], dim=1)
        return self.trunk(obs_action)


class Critic(nn.Module):
    """Critic network, employes two q-functions."""
    def __init__(
        self, obs_shape, action_shape, hidden_dim, encoder_type,
        encoder_feature_dim, num_layers, num_filters
    ):
        super().__init__()

        self.encoder = PixelEncoder(obs_shape, encoder_feature_dim, num_layers, num_filters)

        self.Q1 = QFunction(
            self.encoder.feature_dim, action_shape[0], hidden_dim
        )
        self.Q2 = QFunction(
            self.encoder.feature_dim, action_shape[0], hidden_dim
        )

        self.outputs = dict()
        self.apply(weight_init)

    def forward(self, obs, action, detach_encoder=False):
        # detach_encoder allows to stop gradient propogation to encoder
        obs = self.encoder(obs, detach=detach_encoder)

        q1 = self.Q1(obs, action)
        q2 = self.Q2(obs, action)

        self.outputs['q1'] = q1
        self.outputs['q2'] = q2

        return q1, q2


class SacAeAgent(object):
    """SAC+AE algorithm."""
    def __init__(
        self,
        obs_shape,
        action_shape,
        device,
        hidden_dim=256,
        discount=0.99,
        init_temperature=0.01,
        alpha_lr=1e-3,
        alpha_beta=0.9,
        actor_lr=1e-3,
        actor_beta=0.9,
        actor_log_std_min=-10,
        actor_log_std_max=2,
        actor_update_freq=2,
        critic_lr=1e-3,
        critic_beta=0.9,
        critic_tau=0.005,
        critic_target_update_freq=2,
        encoder_type='pixel',
        encoder_feature_dim=50,
        encoder_lr=1e-3,
        encoder_tau=0.005,
        decoder_type='pixel',
        decoder_lr=1e-3,
        decoder_update_freq=1,
        decoder_latent_lambda=0.0,
        decoder_weight_lambda=0.0,
        num_layers=4,
        num_filters=32,
        bug=None,
    ):
        self.device = device
        self.discount = discount
        self.critic_tau = critic_tau
        self.encoder_tau = encoder_tau
        self.actor_update_freq = actor_update_freq
        self.critic_target_update_freq = critic_target_update_freq
        self.decoder_update_freq = decoder_update_freq
        self.decoder_latent_lambda = decoder_latent_lambda
        self.bug = bug

        self.actor = Actor(
            obs_shape, action_shape, hidden_dim, encoder_type,
            encoder_feature_dim, actor_log_std_min, actor_log_std_max,
            num_layers, num_filters
        ).to(device)

        self.critic = Critic(
            obs_shape, action_shape, hidden_dim, encoder_type,
            encoder_feature_dim, num_layers, num_filters
        ).to(device)

        self.critic_target = Critic(
            obs_shape, action_shape, hidden_dim, encoder_type,
            encoder_feature_dim, num_layers, num_filters
        ).to(device)

        self.critic_target.load_state_dict(self.critic.state_dict())

        # tie encoders between actor and critic
        self.actor.encoder.copy_conv_weights_from(self.critic.encoder)

        self.log_alpha = torch.tensor(np.log(init_temperature)).to(device)
        self.log_alpha.requires_grad = True
        # set target entropy to -|A|
        self.target_entropy = -np.prod(action_shape)

        self.decoder = None
        if decoder_type != 'identity':
            # create decoder
            self.decoder = PixelDecoder(obs_shape, encoder_feature_dim, num_layers, num_filters).to(device)
            self.decoder.apply(weight_init)

            # optimizer for critic encoder for reconstruction loss
            self.encoder_optimizer = torch.optim.Adam(
                self.critic.encoder.parameters(), lr=encoder_lr
            )

            # optimizer for decoder
            self.decoder_optimizer = torch.optim.Adam(
                self.decoder.parameters(),
                lr=decoder_lr,
                weight_decay=decoder_weight_lambda
            )

        # optimizers
        self.actor_optimizer = torch.optim.Adam(
            self.actor.parameters(), lr=actor_lr, betas=(actor_beta, 0.999)
        )

        self.critic_optimizer = torch.optim.Adam(
            self.critic.parameters(), lr=critic_lr, betas=(critic_beta, 0.999)
        )

        self.log_alpha_optimizer = torch.optim.Adam(
            [self.log_alpha], lr=alpha_lr, betas=(alpha_beta, 0.999)
        )

        self.train()
        self.critic_target.train()

    def train(self, training=True):
        self.training = training
        self.actor.train(training)
        self.critic.train(training)
        if self.decoder is not None:
            self.decoder.train(training)

    @property
    def alpha(self):
        return self.log_alpha.exp()

    def sample_action(self, obs):
        with torch.no_grad():
            obs = torch.FloatTensor(obs).to(self.device)
            obs = obs.unsqueeze(0)
            mu, pi, _, _ = self.actor(obs, compute_log_pi=False)
            return pi.cpu().data.numpy().flatten()

    def update_critic(self, obs, action, reward, next_obs, not_done, L, step):
        with torch.no_grad():
            _, policy_action, log_pi, _ = self.actor(next_obs)
            target_Q1, target_Q2 = self.critic_target(next_obs, policy_action)
            target_V = torch.min(target_Q1,
                                 target_Q2) - self.alpha.detach() * log_pi
            target_Q = reward + (not_done * self.discount * target_V)

        # get current Q estimates
        current_Q1, current_Q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(current_Q1,
                                 target_Q) + F.mse_loss(current_Q2, target_Q)

        # Optimize the critic
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        return critic_loss

    def update_actor_and_alpha(self, obs, L, step):
        # detach encoder, so we don't update it with the actor loss
        _, pi, log_pi, log_std = self.actor(obs, detach_encoder=True)
        actor_Q1, actor_Q2 = self.critic(obs, pi, detach_encoder=True)

        actor_Q = torch.min(actor_Q1, actor_Q2)
        actor_loss = (self.alpha.detach() * log_pi - actor_Q).mean()

        # optimize the actor
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        self.log_alpha_optimizer.zero_grad()
        alpha_loss = (self.alpha *
                      (-log_pi - self.target_entropy).detach()).mean()
        alpha_loss.backward()
        self.log_alpha_optimizer.step()

    def update_decoder(self, obs, target_obs, L, step):
        h = self.critic.encoder(obs)

        if target_obs.dim() == 4:
            # preprocess images to be in [-0.5, 0.5] range
            target_obs = preprocess_obs(target_obs)
        rec_obs = self.decoder(h)
        rec_loss = F.mse_loss(target_obs, rec_obs)

        # add L2 penalty on latent representation
        # see https://arxiv.org/pdf/1903.12436.pdf
        latent_loss = (0.5 * h.pow(2).sum(1)).mean()

        loss = rec_loss + self.decoder_latent_lambda * latent_loss
        self.encoder_optimizer.zero_grad()
        self.decoder_optimizer.zero_grad()
        loss.backward()

        self.encoder_optimizer.step()
        self.decoder_optimizer.step()

    def update(self, replay_buffer, L, step):
        obs, action, reward, next_obs, not_done = replay_buffer.sample()

        critic_loss = self.update_critic(obs, action, reward, next_obs, not_done, L, step)

        if step % self.actor_update_freq == 0:
            self.update_actor_and_alpha(obs, L, step)

        if step % self.critic_target_update_freq == 0:
            if self.bug == "soft_update_reversed":
                soft_update_params(self.critic_target.Q1, self.critic.Q1, self.critic_tau)
                soft_update_params(self.critic_target.Q2, self.critic.Q2, self.critic_tau)
                soft_update_params(self.critic_target.encoder, self.critic.encoder, self.encoder_tau)
            else:
                soft_update_params(
                    self.critic.Q1, self.critic_target.Q1, self.critic_tau
                )
                soft_update_params(
                    self.critic.Q2, self.critic_target.Q2, self.critic_tau
                )
                soft_update_params(
                    self.critic.encoder, self.critic_target.encoder,
                    self.encoder_tau
                )

        if self.decoder is not None and step % self.decoder_update_freq == 0:
            self.update_decoder(obs, obs, L, step)
        return critic_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np_random = np.random.RandomState(seed)
    env = FrameStack(PixelPendulum(seed), k=FRAME_STACK)
    action_space = env._env._env.action_space
    action_space.seed(seed)
    obs_shape = (3 * FRAME_STACK, IMAGE_SIZE, IMAGE_SIZE)
    action_shape = (1,)

    replay_buffer = ReplayBuffer(obs_shape, action_shape, CAPACITY, BATCH_SIZE, "cpu", np_random=np_random, bug=bug)
    agent = SacAeAgent(
        obs_shape=obs_shape, action_shape=action_shape, device="cpu", hidden_dim=HIDDEN_DIM, discount=0.99,
        init_temperature=0.1, alpha_lr=1e-4, alpha_beta=0.5, actor_lr=1e-3, actor_beta=0.9,
        actor_log_std_min=-10, actor_log_std_max=2, actor_update_freq=2, critic_lr=1e-3, critic_beta=0.9,
        critic_tau=0.01, critic_target_update_freq=2, encoder_type='pixel', encoder_feature_dim=50,
        encoder_lr=1e-3, encoder_tau=0.05, decoder_type='pixel', decoder_lr=1e-3, decoder_update_freq=1,
        decoder_latent_lambda=1e-6, decoder_weight_lambda=1e-7, num_layers=4, num_filters=16, bug=bug,
    )

    loop = {"step": 0, "done": True, "obs": None, "episode_step": 0}

    def env_step():
        """One iteration of train.py's loop (the logging and evaluation left out)."""
        step = loop["step"]
        if loop["done"]:
            loop["obs"] = env.reset()
            loop["done"] = False
            loop["episode_step"] = 0

        # sample action for data collection
        if step < INIT_STEPS:
            action = action_space.sample() / action_space.high  # the normalized [-1, 1] action space
        else:
            with eval_mode(agent):
                action = agent.sample_action(loop["obs"])

        # run training update
        loss = None
        if step >= INIT_STEPS:
            loss = agent.update(replay_buffer, None, step)

        next_obs, reward, done, _ = env.step(action)

        # allow infinit bootstrap
        done_bool = 0 if loop["episode_step"] + 1 == env._max_episode_steps else float(
            done
        )
        replay_buffer.add(loop["obs"], action, reward, next_obs, done_bool)

        loop["obs"] = next_obs
        loop["done"] = done
        loop["episode_step"] += 1
        loop["step"] += 1
        return loss

    while loop["step"] < INIT_STEPS:
        env_step()

    obs, action, reward, next_obs, not_done = replay_buffer.sample()
    batch = ({"obs": obs, "action": action}, (reward, next_obs, not_done))

    def loss_fn(qs, targets):
        """update_critic's loss on the critic's outputs for ``batch`` (the same lines)."""
        current_Q1, current_Q2 = qs
        reward, next_obs, not_done = targets
        with torch.no_grad():
            _, policy_action, log_pi, _ = agent.actor(next_obs)
            target_Q1, target_Q2 = agent.critic_target(next_obs, policy_action)
            target_V = torch.min(target_Q1, target_Q2) - agent.alpha.detach() * log_pi
            target_Q = reward + (not_done * agent.discount * target_V)
        return F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

    return Program(name="pytorchsacae_pixel_pendulum", model=agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic_optimizer, train_step=env_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the replay buffer keeps rewards as a flat ``[capacity]`` array instead of ``[capacity, 1]`` (classic): the
    # sampled ``[B]`` rewards broadcast against the ``[B, 1]`` bootstrapped values into a ``[B, B]`` target, so
    # every Q(s, a) is regressed towards the mean of all the batch's rewards.
    Bug("reward_not_reshaped", functools.partial(_build, bug="reward_not_reshaped"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``soft_update_params`` with the networks swapped for Q1, Q2 and the encoder (classic argument-order slip):
    # after every second step the online critic is pulled back toward the target copy, which never moves.
    # Every critic parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("soft_update_reversed", functools.partial(_build, bug="soft_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]
