# ruff: noqa: PLR0402, UP008
"""A conditional convolutional VAE on MNIST-style digits, from explainingai-code's VAE-Pytorch (the
``vae_kl_latent4_enc_channel_dec_fc_condition`` configuration): one-hot label planes stacked onto the image, three
Conv-BN-LeakyReLU blocks, separate fc stacks for the mean and the log-variance, the one-hot label concatenated to
``z`` before the decoder's fc stack and three ConvTranspose-BN-Tanh blocks; MSE reconstruction plus a 1e-5 weighted
KL term, Adam lr 0.005, ReduceLROnPlateau on the epoch's mean loss.

Source: https://github.com/explainingai-code/VAE-Pytorch
Commit: 31aabf6c098c834f08ba244da2fb388730f65ab0
Files: ``tools/train_vae.py``, ``model/vae.py``, ``dataset/mnist_loader.py``, ``tools/inference.py``
(``visualize_latent_space``), ``config/vae_kl_latent4_enc_channel_dec_fc_condition.yaml``
License: MIT (Copyright (c) 2023 Tushar Kumar; full text in LICENSES/explainingai-code-VAE-Pytorch.txt)
Domain: vision, generative model (conditional VAE, log-variance parameterization, reparameterization trick)

Kept as written: ``VAE`` (every layer, the label planes and the one-hot decoder condition, ``reparameterize``,
``generate``'s reshape from the fc width), the configuration (latent 4, channels [1, 16, 32, 64] with 2x2 stride-2
convolutions, fc [576, 128, 4], transposed kernels [3, 2, 2], ``log_variance`` True, ``kl_weight`` 1e-5, lr 0.005,
``crit`` l2), ``train_for_one_epoch``'s loop body (zero_grad, forward with the label, the log-variance KL
``mean(0.5 * sum(exp(logvar) + mu ** 2 - 1 - logvar, -1))``, ``recon_loss + kl_weight * kl_loss``, backward, step),
``train``'s Adam and ``ReduceLROnPlateau(factor=0.5, patience=1)`` stepped with the epoch's mean loss, and
``MnistDataset``'s scaling ``2 * (im / 255) - 1``.

Deviations from the original:
- data: the MNIST pngs read with cv2 from ``data/train/images/<digit>/`` are replaced by synthetic 28x28 "digits"
  made from ``seed`` (ten classes of stroke templates, shifted by up to two pixels, with pixel noise, as uint8
  0..255 then scaled by ``MnistDataset``'s rule); 640 training and 64 test images; ``batch_size`` 64 -> 32; the
  DataLoader shuffles with a ``torch.Generator(seed)``, no workers; the device is the CPU;
- ``train_step`` is one iteration of ``train_for_one_epoch``'s loop; at the end of each pass over the loader the
  epoch's mean loss steps the ``ReduceLROnPlateau`` as ``train`` does (its ``verbose`` argument, removed from torch,
  is dropped); the checkpointing, the cv2 image dumps (``save_training_image``), the prints, ``tqdm`` and the
  latent-space plot are dropped;
- ``eval_fn`` is the test-set pass of ``visualize_latent_space`` (``model.eval()``, ``no_grad``, forward with the
  label) returning the reconstruction MSE instead of plotting the means;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data.dataloader import DataLoader
from torch.utils.data.dataset import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device('cpu')

# config/vae_kl_latent4_enc_channel_dec_fc_condition.yaml
CONFIG = {
    'model_params': {
        'in_channels': 1,
        'convbn_blocks': 3,
        'conv_kernel_size': [2, 2, 2],
        'conv_kernel_strides': [2, 2, 2],
        'convbn_channels': [1, 16, 32, 64],
        'enc_fc_layers': [576, 128, 4],
        'enc_fc_mu_activation': None,
        'enc_fc_var_activation': None,
        'conv_activation_fn': 'leaky',
        'enc_fc_activation_fn': 'leaky',
        'dec_fc_layers': [4, 128, 576],
        'dec_fc_activation_fn': 'leaky',
        'transpose_bn_blocks': 3,
        'transposebn_channels': [64, 32, 16, 1],
        'transpose_kernel_size': [3, 2, 2],
        'transpose_kernel_strides': [2, 2, 2],
        'transpose_activation_fn': 'tanh',
        'log_variance': True,
        'latent_dim': 4,
        'concat_channel': True,
        'decoder_fc_condition': True,
        'num_classes': 10,
        'conditional': True,
    },
    'train_params': {
        'task_name': 'vae_kl_latent4_enc_channel_dec_fc_condition',
        'batch_size': 32,  # (port) 64
        'epochs': 10,
        'kl_weight': 0.00001,
        'lr': 0.005,
        'crit': 'l2',
        'seed': 111,
        'save_training_image': False,  # (port) True: cv2 dumps dropped
        'save_latent_plot': True,
    },
}


# model/vae.py
class VAE(nn.Module):
    def __init__(self,
                 config,
                 bug=None,
                 ):
        super(VAE, self).__init__()
        self.bug = bug
        activation_map = {
            'relu': nn.ReLU(),
            'leaky': nn.LeakyReLU(),
            'tanh': nn.Tanh(),
            'gelu': nn.GELU(),
            'silu': nn.SiLU()
        }

        self.config = config
        assert config['transpose_activation_fn'] is None or config['transpose_activation_fn'] in activation_map
        assert config['dec_fc_activation_fn'] is None or config['dec_fc_activation_fn'] in activation_map
        assert config['conv_activation_fn'] is None or config['conv_activation_fn'] in activation_map
        assert config['enc_fc_activation_fn'] is None or config['enc_fc_activation_fn'] in activation_map
        assert config['enc_fc_layers'][-1] == config['dec_fc_layers'][0] == config['latent_dim'], \
            "Latent dimension must be same as fc layers number"

        self.num_classes = config['num_classes']
        self.transposebn_channels = config['transposebn_channels']
        self.latent_dim = config['latent_dim']
        self.device = torch.device('cpu')

        # Number of input channels will change if its a conditional model
        if config['concat_channel'] and config['conditional']:
            config['convbn_channels'][0] += self.num_classes

        # Encoder is just Conv bn blocks followed by fc for mean and variance
        self.encoder_layers = nn.ModuleList([
            nn.Sequential(
                nn.Conv2d(config['convbn_channels'][i], config['convbn_channels'][i + 1],
                          kernel_size=config['conv_kernel_size'][i], stride=config['conv_kernel_strides'][i]),
                nn.BatchNorm2d(config['convbn_channels'][i + 1]),
                activation_map[config['conv_activation_fn']]
            )
            for i in range(config['convbn_blocks'])
        ])

        encoder_mu_activation = nn.Identity() if config['enc_fc_mu_activation'] is None else activation_map[
            config['enc_fc_mu_activation']]
        self.encoder_mu_fc = nn.ModuleList([
            nn.Sequential(
                nn.Linear(config['enc_fc_layers'][i], config['enc_fc_layers'][i + 1]),
                encoder_mu_activation
            )
            for i in range(len(config['enc_fc_layers']) - 1)
        ])
        encoder_var_activation = nn.Identity() if config['enc_fc_var_activation'] is None else activation_map[
            config['enc_fc_var_activation']]
        self.encoder_var_fc = nn.ModuleList([
            nn.Sequential(
                nn.Linear(config['enc_fc_layers'][i], config['enc_fc_layers'][i + 1]),
                encoder_var_activation
            )
            for i in range(len(config['enc_fc_layers']) - 1)
        ])

        # Number of features will change if it's a conditional model
        if config['decoder_fc_condition'] and config['conditional']:
            config['dec_fc_layers'][0] += self.num_classes

        self.decoder_layers = nn.ModuleList([
            nn.Sequential(
                nn.ConvTranspose2d(config['transposebn_channels'][i], config['transposebn_channels'][i + 1],
                                   kernel_size=config['transpose_kernel_size'][i],
                                   stride=config['transpose_kernel_strides'][i]),
                nn.BatchNorm2d(config['transposebn_channels'][i + 1]),
                activation_map[config['transpose_activation_fn']]
            )
            for i in range(config['transpose_bn_blocks'])
        ])

        self.decoder_fc = nn.ModuleList([
            nn.Sequential(
                nn.Linear(config['dec_fc_layers'][i], config['dec_fc_layers'][i + 1]),
                activation_map[config['dec_fc_activation_fn']]
            )
            for i in range(len(config['dec_fc_layers']) - 1)

        ])

    def forward(self, x, label=None):
        out = x
        if self.config['concat_channel'] and self.config['conditional']:
            # Stack the label feature maps onto the input if its a conditional model
            # And config asks to do so
            label_ch_map = torch.zeros((x.size(0), self.num_classes, *x.shape[2:])).to(self.device)
            batch_idx, label_idx = (torch.arange(0, x.size(0), device=self.device),
                                    label[torch.arange(0, x.size(0), device=self.device)])
            label_ch_map[batch_idx, label_idx, :, :] = 1
            out = torch.cat([x, label_ch_map], dim=1)

        for layer in self.encoder_layers:
            out = layer(out)
        out = out.reshape((x.size(0), -1))
        mu = out
        for layer in self.encoder_mu_fc:
            mu = layer(mu)
        std = out
        for layer in self.encoder_var_fc:
            std = layer(std)

        z = self.reparameterize(mu, std)
        generated_out = self.generate(z, label)
        if self.config['log_variance']:
            return {
                'mean': mu,
                'log_variance': std,
                'image': generated_out,
            }
        else:
            return {
                'mean': mu,
                'std': std,
                'image': generated_out,
            }

    def generate(self, z, label=None):
        out = z
        if self.config['decoder_fc_condition'] and self.config['conditional']:
            assert label is not None, "Label cannot be none for conditional generation"
            # Concat the num_classes dimensional one hot feature vector onto z
            label_fc_input = torch.zeros((z.size(0), self.num_classes)).to(self.device)
            batch_idx, label_idx = (torch.arange(0, z.size(0), device=self.device),
                                    label[torch.arange(0, z.size(0), device=self.device)])
            label_fc_input[batch_idx, label_idx] = 1
            out = torch.cat([out, label_fc_input], dim=-1)
        for layer in self.decoder_fc:
            out = layer(out)
        # Figure out how to reshape based on desired number of channels in transpose convolution
        hw = torch.as_tensor(out.size(-1) / self.transposebn_channels[0]).to(self.device)
        spatial = int(torch.sqrt(hw))
        assert spatial * spatial == hw
        out = out.reshape((z.size(0), -1, spatial, spatial))
        for layer in self.decoder_layers:
            out = layer(out)
        return out

    def reparameterize(self, mu, std_or_logvariance):
        if self.config['log_variance'] and self.bug != "logvar_used_as_std":
            std = torch.exp(0.5 * std_or_logvariance)
        else:
            std = std_or_logvariance
        z = torch.randn_like(std)
        return z * std + mu


def get_model(config, bug=None):
    model = VAE(
        config=config['model_params'], bug=bug,
    )
    return model


# dataset/mnist_loader.py, on synthetic digits instead of the png folders
def synthetic_digits(seed, n):
    """uint8 28x28 stroke digits: ten class templates of 2-3 thick strokes, shifted by up to two pixels, noisy."""
    rng = np.random.RandomState(seed)
    tmpl_rng = np.random.RandomState(12345)  # the ten templates are shared by every split
    templates = np.zeros((10, 28, 28), dtype=np.float64)
    for c in range(10):
        for _ in range(2 + c % 2):
            k = tmpl_rng.randint(6, 22)
            lo, hi = sorted(tmpl_rng.randint(5, 23, size=2))
            hi = max(hi, lo + 8)
            if tmpl_rng.rand() < 0.5:
                templates[c, k - 2:k + 1, lo:hi] = 1.0
            else:
                templates[c, lo:hi, k - 2:k + 1] = 1.0
    labels = np.arange(n) % 10
    rng.shuffle(labels)
    ims = []
    for c in labels:
        dy, dx = rng.randint(-2, 3, size=2)
        im = np.roll(templates[c], (dy, dx), axis=(0, 1)) + 0.1 * rng.rand(28, 28)
        ims.append(np.clip(255 * im, 0, 255).astype(np.uint8))
    return ims, [int(c) for c in labels]


class MnistDataset(Dataset):
    def __init__(self, split, seed, n):
        self.split = split
        self.images, self.labels = synthetic_digits(seed, n)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        im = self.images[index]
        label = self.labels[index]
        # Convert to 0 to 255 into -1 to 1
        im = 2 * (im / 255) - 1
        # Convert H,W,C into 1,C,H,W
        im_tensor = torch.from_numpy(im)[None, :]
        return im_tensor, torch.as_tensor(label)


def _build(seed, bug=None):
    config = copy.deepcopy(CONFIG)
    torch.manual_seed(seed)
    np.random.seed(seed)

    model = get_model(config, bug=bug).to(device)
    mnist = MnistDataset('train', seed, 640)
    mnist_test = MnistDataset('test', seed + 1000, 64)
    mnist_loader = DataLoader(mnist, batch_size=config['train_params']['batch_size'], shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    mnist_test_loader = DataLoader(mnist_test, batch_size=config['train_params']['batch_size'], shuffle=False,
                                   num_workers=0)
    optimizer = Adam(model.parameters(), lr=config['train_params']['lr'])
    scheduler = ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
    criterion = {
        'l1': torch.nn.L1Loss(),
        'l2': torch.nn.MSELoss()
    }.get(config['train_params']['crit'])

    state = {"it": iter(mnist_loader), "losses": []}

    def train_step():
        try:
            im, label = next(state["it"])
        except StopIteration:
            scheduler.step(np.mean(state["losses"]))  # train(): scheduler.step(mean_loss) after the epoch
            state["losses"] = []
            state["it"] = iter(mnist_loader)
            im, label = next(state["it"])
        im = im.float().to(device)
        label = label.long().to(device)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        output = model(im, label)
        mean = output['mean']
        std, log_variance = None, None
        if config['model_params']['log_variance']:
            log_variance = output['log_variance']
        else:
            std = output['std']
        generated_im = output['image']

        if config['model_params']['log_variance']:
            kl_loss = torch.mean(0.5 * torch.sum(torch.exp(log_variance) + mean ** 2 - 1 - log_variance, dim=-1))
        else:
            kl_loss = torch.mean(0.5 * torch.sum(std ** 2 + mean ** 2 - 1 - torch.log(std ** 2), dim=-1))
        recon_loss = criterion(generated_im, im)
        loss = recon_loss + config['train_params']['kl_weight'] * kl_loss
        state["losses"].append(loss.item())
        loss.backward()
        optimizer.step()
        return loss.detach()

    def loss_fn(output, im):
        mean, log_variance = output['mean'], output['log_variance']
        kl_loss = torch.mean(0.5 * torch.sum(torch.exp(log_variance) + mean ** 2 - 1 - log_variance, dim=-1))
        return criterion(output['image'], im) + config['train_params']['kl_weight'] * kl_loss

    def eval_fn(m, batch):
        # visualize_latent_space's pass over the test loader (train(): model.eval(), no_grad), the means' plot
        # replaced by the reconstruction error
        if bug != "eval_in_train_mode":
            m.eval()
        errs = []
        with torch.no_grad():
            for im, label in mnist_test_loader:
                im = im.float().to(device)
                label = label.long().to(device)
                output = m(im, label)
                errs.append(float(criterion(output['image'], im)))
        m.train()
        return float(np.mean(errs))

    ims = torch.stack([mnist[i][0] for i in range(config['train_params']['batch_size'])]).float()
    labels = torch.stack([mnist[i][1] for i in range(config['train_params']['batch_size'])]).long()
    return Program(name="explainingaivae_cvae", model=model, batch=((ims, labels), ims), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=mnist_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``reparameterize`` takes the encoder's log-variance head as the standard deviation while the KL term reads it
    # as a log-variance (classic: ``log_variance`` honoured in the loss but not in the model).
    Bug("logvar_used_as_std", functools.partial(_build, bug="logvar_used_as_std"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``model.eval()`` left out before the test pass: BatchNorm normalizes the test batch with its own statistics
    # and updates the running ones (classic).
    Bug("eval_in_train_mode", functools.partial(_build, bug="eval_in_train_mode"), "six_claims", ("EVALUATION",)),
    # ``optimizer.zero_grad()`` dropped from ``train_for_one_epoch`` (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
