"""Noise2Noise of joeylitalien/noise2noise-pytorch: the repository's ``UNet`` (the paper's Appendix Table 2: five
conv + max-pool encoder stages with the shared ``_block2``, transposed-conv decoder stages with U-skip
concatenations, the shared ``_block5``, the input concatenated back before ``_block6`` and a final LeakyReLU(0.1),
He-normal init) trained by ``Noise2Noise.train``: a noisy source image denoised toward an independently noised
target of the same crop (never the clean image), ``nn.MSELoss`` (``--loss l2`` of ``src/examples/train.sh``), Adam
(lr 1e-3, betas 0.9/0.99, eps 1e-8), ``ReduceLROnPlateau(patience=nb_epochs/4, factor=0.5)`` stepped on the
validation loss at each epoch's end, and ``eval``'s validation loss and PSNR.

Source: https://github.com/joeylitalien/noise2noise-pytorch
Commit: 1a284a1a1c9db123e43b32e3f8bce277c5ca7b3b
Files: src/noise2noise.py, src/unet.py, src/datasets.py, src/train.py, src/utils.py, src/examples/train.sh
License: MIT (Copyright (c) 2018 Joey Litalien; full text in LICENSES/joeylitalien-noise2noise-pytorch.txt)
Domain: vision, image denoising (Noise2Noise: Gaussian noise of std drawn up to 50 on both source and target)

Deviations from the original:
- data: the training and validation folders of photographs are replaced by synthetic 48x48 RGB "photographs" made
  from ``seed`` (smooth colour fields with a few soft blobs and edges) held as PIL images, so ``NoisyDataset``'s
  ``_random_crop`` / ``_add_noise`` / ``_corrupt`` / ``__getitem__`` run on PIL images as written (``os.listdir``
  and ``Image.open`` replaced by the in-memory list); torchvision is not available, so ``tvF.crop`` is PIL's
  ``crop``, ``tvF.to_tensor`` is written out and ``tvF.resize`` (never reached: every image is larger than the
  crop) is PIL's ``resize``; the text and Monte Carlo corruptions (fonts, OpenEXR) are not ported;
- sizes for 2 CPU cores: ``--crop-size`` 128 -> 32 (the smallest the five pools allow), ``--train-size`` 500 -> 64,
  ``--valid-size`` 100 -> 16, ``--report-interval`` 25 -> 4; batch 4, epochs 30, the U-Net's widths unchanged;
- ``--cuda``, checkpoint saving, ``--plot-stats``, the progress bar and the prints are dropped (CPU); the
  scheduler's ``verbose=True`` is dropped (removed from recent PyTorch);
- one ``train_step`` is one minibatch of ``Noise2Noise.train``'s loop body; after the loader's last batch the epoch
  ends as in the original (``_on_epoch_end``: ``eval`` on the validation loader, ``scheduler.step(valid_loss)``),
  and, as in the original, ``eval``'s ``model.train(False)`` is not undone (the U-Net has no dropout or
  BatchNorm); ``eval_fn`` is ``eval``'s PSNR;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, UP008, SIM101, PLR0402, RUF012, UP004, UP032, RUF059  (the original code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.optim import Adam, lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG_SIZE = 48


class params:  # (port) train.py's argparse namespace with src/examples/train.sh's flags, sizes shrunk
    train_size = 64  # 500
    valid_size = 16  # 100
    report_interval = 4  # 25
    learning_rate = 0.001
    adam = [0.9, 0.99, 1e-8]
    batch_size = 4
    nb_epochs = 30
    loss = 'l2'
    cuda = False
    plot_stats = False
    noise_type = 'gaussian'
    noise_param = 50.
    seed = None
    crop_size = 32  # 128
    clean_targets = False


# ---- src/unet.py -----------------------------------------------------------------------------------------------

class UNet(nn.Module):
    """Custom U-Net architecture for Noise2Noise (see Appendix, Table 2)."""

    def __init__(self, in_channels=3, out_channels=3):
        """Initializes U-Net."""

        super(UNet, self).__init__()

        # Layers: enc_conv0, enc_conv1, pool1
        self._block1 = nn.Sequential(
            nn.Conv2d(in_channels, 48, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(48, 48, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2))

        # Layers: enc_conv(i), pool(i); i=2..5
        self._block2 = nn.Sequential(
            nn.Conv2d(48, 48, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2))

        # Layers: enc_conv6, upsample5
        self._block3 = nn.Sequential(
            nn.Conv2d(48, 48, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(48, 48, 3, stride=2, padding=1, output_padding=1))
            #nn.Upsample(scale_factor=2, mode='nearest'))

        # Layers: dec_conv5a, dec_conv5b, upsample4
        self._block4 = nn.Sequential(
            nn.Conv2d(96, 96, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(96, 96, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(96, 96, 3, stride=2, padding=1, output_padding=1))
            #nn.Upsample(scale_factor=2, mode='nearest'))

        # Layers: dec_deconv(i)a, dec_deconv(i)b, upsample(i-1); i=4..2
        self._block5 = nn.Sequential(
            nn.Conv2d(144, 96, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(96, 96, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(96, 96, 3, stride=2, padding=1, output_padding=1))
            #nn.Upsample(scale_factor=2, mode='nearest'))

        # Layers: dec_conv1a, dec_conv1b, dec_conv1c,
        self._block6 = nn.Sequential(
            nn.Conv2d(96 + in_channels, 64, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 32, 3, stride=1, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, out_channels, 3, stride=1, padding=1),
            nn.LeakyReLU(0.1))

        # Initialize weights
        self._init_weights()


    def _init_weights(self):
        """Initializes weights using He et al. (2015)."""

        for m in self.modules():
            if isinstance(m, nn.ConvTranspose2d) or isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight.data)
                m.bias.data.zero_()


    def forward(self, x):
        """Through encoder, then decoder by adding U-skip connections. """

        # Encoder
        pool1 = self._block1(x)
        pool2 = self._block2(pool1)
        pool3 = self._block2(pool2)
        pool4 = self._block2(pool3)
        pool5 = self._block2(pool4)

        # Decoder
        upsample5 = self._block3(pool5)
        concat5 = torch.cat((upsample5, pool4), dim=1)
        upsample4 = self._block4(concat5)
        concat4 = torch.cat((upsample4, pool3), dim=1)
        upsample3 = self._block5(concat4)
        concat3 = torch.cat((upsample3, pool2), dim=1)
        upsample2 = self._block5(concat3)
        concat2 = torch.cat((upsample2, pool1), dim=1)
        upsample1 = self._block5(concat2)
        concat1 = torch.cat((upsample1, x), dim=1)

        # Final activation
        return self._block6(concat1)


# ---- src/utils.py ----------------------------------------------------------------------------------------------

class AvgMeter(object):
    """Computes and stores the average and current value.
    Useful for tracking averages such as elapsed times, minibatch losses, etc.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0.
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def psnr(input, target):
    """Computes peak signal-to-noise ratio."""

    return 10 * torch.log10(1 / F.mse_loss(input, target))


# ---- (port) torchvision.transforms.functional written out --------------------------------------------------------

def _tvF_crop(img, i, j, h, w):
    return img.crop((j, i, j + w, i + h))


def _tvF_resize(img, size):
    return img.resize((size[1], size[0]), Image.BILINEAR)


def _tvF_to_tensor(pic):
    arr = np.array(pic, dtype=np.uint8)
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous().float().div(255)


# ---- src/datasets.py -------------------------------------------------------------------------------------------

def load_dataset(root_dir, redux, params, shuffled=False, single=False, bug=None):
    """Loads dataset and returns corresponding data loader."""

    # Create Torch dataset
    noise = (params.noise_type, params.noise_param)

    # Instantiate appropriate dataset class
    dataset = NoisyDataset(root_dir, redux, params.crop_size,
        clean_targets=params.clean_targets, noise_dist=noise, seed=params.seed, bug=bug)

    # Use batch size of 1, if requested (e.g. test set)
    if single:
        return DataLoader(dataset, batch_size=1, shuffle=shuffled)
    else:
        return DataLoader(dataset, batch_size=params.batch_size, shuffle=shuffled)


class AbstractDataset(Dataset):
    """Abstract dataset class for Noise2Noise."""

    def __init__(self, root_dir, redux=0, crop_size=128, clean_targets=False):
        """Initializes abstract dataset."""

        super(AbstractDataset, self).__init__()

        self.imgs = []
        self.root_dir = root_dir
        self.redux = redux
        self.crop_size = crop_size
        self.clean_targets = clean_targets

    def _random_crop(self, img_list):
        """Performs random square crop of fixed size.
        Works with list so that all items get the same cropped window (e.g. for buffers).
        """

        w, h = img_list[0].size
        assert w >= self.crop_size and h >= self.crop_size, \
            f'Error: Crop size: {self.crop_size}, Image size: ({w}, {h})'
        cropped_imgs = []
        i = np.random.randint(0, h - self.crop_size + 1)
        j = np.random.randint(0, w - self.crop_size + 1)

        for img in img_list:
            # Resize if dimensions are too small
            if min(w, h) < self.crop_size:
                img = _tvF_resize(img, (self.crop_size, self.crop_size))

            # Random crop
            cropped_imgs.append(_tvF_crop(img, i, j, self.crop_size, self.crop_size))

        return cropped_imgs

    def __len__(self):
        """Returns length of dataset."""

        return len(self.imgs)


class NoisyDataset(AbstractDataset):
    """Class for injecting random noise into dataset."""

    def __init__(self, root_dir, redux, crop_size, clean_targets=False,
        noise_dist=('gaussian', 50.), seed=None, bug=None):
        """Initializes noisy image dataset."""

        super(NoisyDataset, self).__init__(root_dir, redux, crop_size, clean_targets)
        self.bug = bug

        self.imgs = list(root_dir)  # (port) os.listdir(root_dir): the in-memory images
        if redux:
            self.imgs = self.imgs[:redux]

        # Noise parameters (max std for Gaussian, lambda for Poisson, nb of artifacts for text)
        self.noise_type = noise_dist[0]
        self.noise_param = noise_dist[1]
        self.seed = seed
        if self.seed:
            np.random.seed(self.seed)


    def _add_noise(self, img):
        """Adds Gaussian or Poisson noise to image."""

        w, h = img.size
        c = len(img.getbands())

        # Poisson distribution
        # It is unclear how the paper handles this. Poisson noise is not additive,
        # it is data dependent, meaning that adding sampled valued from a Poisson
        # will change the image intensity...
        if self.noise_type == 'poisson':
            noise = np.random.poisson(img)
            noise_img = img + noise
            noise_img = 255 * (noise_img / np.amax(noise_img))

        # Normal distribution (default)
        else:
            if self.seed:
                std = self.noise_param
            else:
                std = np.random.uniform(0, self.noise_param)
            noise = np.random.normal(0, std, (h, w, c))

            # Add noise and clip
            noise_img = np.array(img) + noise

        noise_img = np.clip(noise_img, 0, 255).astype(np.uint8)
        return Image.fromarray(noise_img)


    def _corrupt(self, img):
        """Corrupts images (Gaussian, Poisson, or text overlay)."""

        if self.noise_type in ['gaussian', 'poisson']:
            return self._add_noise(img)
        else:
            raise ValueError('Invalid noise type: {}'.format(self.noise_type))


    def __getitem__(self, index):
        """Retrieves image from folder and corrupts it."""

        # Load PIL image
        img = self.imgs[index]  # (port) Image.open(img_path).convert('RGB')

        # Random square crop
        if self.bug == "crops_drawn_apart":
            full = img
        if self.crop_size != 0:
            img = self._random_crop([img])[0]

        # Corrupt source image
        tmp = self._corrupt(img)
        source = _tvF_to_tensor(self._corrupt(img))

        # Corrupt target image, but not when clean targets are requested
        if self.clean_targets:
            target = _tvF_to_tensor(img)
        elif self.bug == "crops_drawn_apart":
            target = _tvF_to_tensor(self._corrupt(self._random_crop([full])[0]))
        elif self.bug == "target_is_source":
            target = source
        else:
            target = _tvF_to_tensor(self._corrupt(img))

        return source, target


def synthetic_photos(rng, n):
    """(port) Smooth RGB 'photographs': a colour gradient, a few soft blobs and one hard edge each, as PIL images."""
    yy, xx = np.mgrid[0:IMG_SIZE, 0:IMG_SIZE] / IMG_SIZE
    out = []
    for _ in range(n):
        img = rng.uniform(40, 200, 3) + rng.uniform(-60, 60, 3) * xx[..., None] + rng.uniform(-60, 60, 3) * yy[..., None]
        for _ in range(3):
            cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.08, 0.25)
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            img = img + blob[..., None] * rng.uniform(-90, 90, 3)
        a, b = rng.normal(size=2)
        img = img + ((a * (xx - 0.5) + b * (yy - 0.5)) > 0)[..., None] * rng.uniform(-50, 50, 3)
        out.append(Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)))
    return out


# ---- src/noise2noise.py + src/train.py ---------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    train_dir = synthetic_photos(rng, params.train_size)
    valid_dir = synthetic_photos(rng, params.valid_size)

    # Train/valid datasets
    train_loader = load_dataset(train_dir, params.train_size, params, shuffled=True, bug=bug)
    valid_loader = load_dataset(valid_dir, params.valid_size, params, shuffled=False, bug=bug)

    # Noise2Noise._compile
    model = UNet(in_channels=3)
    optim = Adam(model.parameters(),
                 lr=params.learning_rate,
                 betas=params.adam[:2],
                 eps=params.adam[2])

    # Learning rate adjustment
    scheduler = lr_scheduler.ReduceLROnPlateau(optim,
        patience=params.nb_epochs/4, factor=0.5)

    # Loss function
    loss_fn = nn.MSELoss() if params.loss == 'l2' else nn.L1Loss()

    def evaluate(valid_loader):
        """Evaluates denoiser on validation set."""

        model.train(False)

        loss_meter = AvgMeter()
        psnr_meter = AvgMeter()

        for batch_idx, (source, target) in enumerate(valid_loader):
            # Denoise
            with torch.no_grad():  # (port) the original builds a graph it never uses
                source_denoised = model(source)

            # Update loss
            loss = loss_fn(source_denoised, target)
            loss_meter.update(loss.item())

            # Compute PSRN
            for i in range(params.batch_size):
                source_denoised = source_denoised.cpu()
                target = target.cpu()
                psnr_meter.update(psnr(source_denoised[i], target[i]).item())

        valid_loss = loss_meter.avg
        psnr_avg = psnr_meter.avg

        return valid_loss, 0.0, psnr_avg

    num_batches = len(train_loader)
    assert num_batches % params.report_interval == 0, 'Report interval must divide total number of batches'
    stats = {'noise_type': params.noise_type, 'noise_param': params.noise_param,
             'train_loss': [], 'valid_loss': [], 'valid_psnr': []}
    st = {"it": None}
    model.train(True)

    def train_step():
        if st["it"] is None:
            st["it"] = enumerate(train_loader)
            st["train_loss_meter"], st["loss_meter"] = AvgMeter(), AvgMeter()
        train_loss_meter, loss_meter = st["train_loss_meter"], st["loss_meter"]
        batch_idx, (source, target) = next(st["it"])

        # Denoise image
        source_denoised = model(source)

        loss = loss_fn(source_denoised, target)
        loss_meter.update(loss.item())

        # Zero gradients, perform a backward pass, and update the weights
        if bug != "zero_grad_dropped":
            optim.zero_grad()
        loss.backward()
        optim.step()

        # Report/update statistics
        if (batch_idx + 1) % params.report_interval == 0 and batch_idx:
            train_loss_meter.update(loss_meter.avg)
            loss_meter.reset()

        if batch_idx == num_batches - 1:
            # Epoch end: _on_epoch_end (evaluate, decrease learning rate if plateau, track stats)
            valid_loss, valid_time, valid_psnr = evaluate(valid_loader)
            scheduler.step(valid_loss)
            stats['train_loss'].append(train_loss_meter.avg)
            stats['valid_loss'].append(valid_loss)
            stats['valid_psnr'].append(valid_psnr)
            st["it"] = None
        return loss.detach()

    def eval_fn(m, batch):
        return evaluate(valid_loader)[2]

    first = next(iter(DataLoader(train_loader.dataset, batch_size=params.batch_size, shuffle=False)))
    return Program(name="noise2noise_gaussian", model=model, batch=(first[0], first[1]), loss_fn=loss_fn,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic Noise2Noise slip: one noisy draw used as both source and target (the identity is optimal)
    Bug("target_is_source", functools.partial(_build, bug="target_is_source"), "learning_ledger", ("TASK",)),
    # classic: the target's crop window drawn apart from the source's (what _random_crop's list argument prevents)
    Bug("crops_drawn_apart", functools.partial(_build, bug="crops_drawn_apart"), "learning_ledger", ("TASK",)),
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
