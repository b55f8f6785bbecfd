# ruff: noqa: PLR0402, UP008, UP032, PERF402, F523
"""DnCNN (Zhang et al., "Beyond a Gaussian Denoiser") trained for blind-free Gaussian denoising at sigma 25 with
KAIR's training framework: residual learning (the network predicts the noise, ``forward`` returns ``x - n``),
Conv-BN-ReLU body, orthogonal init with gain 0.2, ``ModelPlain``'s L1 pixel loss, Adam, MultiStepLR stepped with the
iteration count, random 40x40 patches with one of eight flips/rotations and fresh noise per draw.

Source: https://github.com/cszn/KAIR
Commit: fc1732f4a4514e42ce15e5b3a1e18c828af47a1e
Files: ``main_train_dncnn.py``, ``options/train_dncnn.json``, ``models/model_plain.py``, ``models/model_base.py``,
``models/network_dncnn.py``, ``models/basicblock.py``, ``models/select_network.py``, ``data/dataset_dncnn.py``,
``utils/utils_image.py``, ``utils/utils_option.py``
License: MIT (Copyright (c) 2019 Kai Zhang; full text in LICENSES/cszn-KAIR.txt)
Domain: vision, image denoising (DnCNN, residual learning)

Kept as written: ``DnCNN`` (head ``CR``, ``nb - 2`` body blocks ``CBR``, tail ``C``, ``x - n``), ``basicblock``'s
``conv`` (the modes used: C, B with ``momentum=0.9, eps=1e-4``, R) and ``sequential``, ``init_weights``
(orthogonal, gain 0.2, biases zero; BatchNorm weights uniform in [0.1, 1], biases zero), ``DatasetDnCNN``'s
training branch (random crop of ``H_size``, ``augment_img`` with a random mode of 8, ``uint2tensor3``, ``img_L =
img_H.clone()`` plus ``randn * sigma / 255``) and test branch (noise from ``np.random.seed(0)`` at ``sigma_test``),
``ModelPlain``'s ``feed_data``, ``netG_forward``, ``optimize_parameters`` (zero_grad, forward, ``G_lossfn_weight *
L1``, backward, clip only when configured (it is not), step, the loss logged), ``test`` (eval, no_grad, train),
``define_optimizer`` (parameters with ``requires_grad``, Adam with the option defaults betas (0.9, 0.999),
weight decay 0), ``define_scheduler`` (MultiStepLR, gamma 0.5), ``update_learning_rate`` (``scheduler.step(n)``
with the step count) and ``main_train_dncnn.py``'s loop body (``current_step += 1``, update lr, feed, optimize),
its test (``tensor2uint``, ``calculate_psnr`` with border 0, averaged).

Deviations from the original:
- sizes for 2 CPU cores: ``nb`` 17 -> 6 conv layers, ``nc`` 64 -> 32, ``H_size`` 40 -> 24, batch 64 -> 16; the
  Adam lr 1e-4 -> 1e-3 so that 30 steps show the loss falling (the original runs hundreds of thousands of
  iterations; the milestones are kept, so the lr never decays here);
- data: the 400 training images and BSD68 are not here: each clean image is a synthetic 48x48 grayscale uint8
  "natural" image made from ``seed`` (a smooth random field plus a few constant-intensity rectangles and a
  gradient), 64 for training and 4 for testing; ``imread_uint`` reads from that list; ``random`` and
  ``np.random`` are seeded from ``seed``;
- the option JSON and its parser, logging, checkpoints, image saving, ``merge_bn`` (its start point is never
  reached), the EMA ``netE`` (``E_decay`` 0) and the ``dnpatch`` branch are dropped; CUDA and ``pin_memory`` are
  off, no workers; the DataLoader shuffles with a ``torch.Generator(seed)``;
- one ``train_step`` is one iteration of the ``for i, train_data in enumerate(train_loader)`` body (returning
  ``log_dict['G_loss']``); ``eval_fn`` is the ``checkpoint_test`` block (average PSNR, higher is better);
- MultiStepLR's ``step(epoch)`` form (deprecated) is kept as written;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import warnings
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as data
from torch.nn import init
from torch.optim import Adam, lr_scheduler
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 48

OPT = {
    "n_channels": 1,
    "datasets": {
        "train": {"phase": "train", "dataset_type": "dncnn", "H_size": 24,  # (port) 40
                  "sigma": 25, "sigma_test": 25, "dataloader_shuffle": True, "dataloader_num_workers": 0,
                  "dataloader_batch_size": 16, "n_channels": 1},  # (port) 64
        "test": {"phase": "test", "dataset_type": "dncnn", "sigma": 25, "sigma_test": 25, "n_channels": 1,
                 "H_size": None},
    },
    "netG": {"net_type": "dncnn", "in_nc": 1, "out_nc": 1, "nc": 32, "nb": 6,  # (port) nc 64, nb 17
             "act_mode": "BR", "init_type": "orthogonal", "init_bn_type": "uniform", "init_gain": 0.2},
    "train": {"G_lossfn_type": "l1", "G_lossfn_weight": 1.0, "G_optimizer_type": "adam",
              "G_optimizer_lr": 1e-3,  # (port) 1e-4
              "G_optimizer_clipgrad": None, "G_scheduler_type": "MultiStepLR",
              "G_scheduler_milestones": [200000, 400000, 600000, 800000, 1000000, 2000000],
              "G_scheduler_gamma": 0.5, "G_optimizer_betas": [0.9, 0.999], "G_optimizer_wd": 0, "E_decay": 0},
}


# models/basicblock.py
def sequential(*args):
    """Advanced nn.Sequential.

    Args:
        nn.Sequential, nn.Module

    Returns:
        nn.Sequential
    """
    if len(args) == 1:
        if isinstance(args[0], OrderedDict):
            raise NotImplementedError('sequential does not support OrderedDict input.')
        return args[0]  # No sequential is needed.
    modules = []
    for module in args:
        if isinstance(module, nn.Sequential):
            for submodule in module.children():
                modules.append(submodule)
        elif isinstance(module, nn.Module):
            modules.append(module)
    return nn.Sequential(*modules)


def conv(in_channels=64, out_channels=64, kernel_size=3, stride=1, padding=1, bias=True, mode='CBR', negative_slope=0.2):
    L = []
    for t in mode:
        if t == 'C':
            L.append(nn.Conv2d(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride, padding=padding, bias=bias))
        elif t == 'B':
            L.append(nn.BatchNorm2d(out_channels, momentum=0.9, eps=1e-04, affine=True))
        elif t == 'R':
            L.append(nn.ReLU(inplace=True))
        else:
            raise NotImplementedError('Undefined type: '.format(t))
    return sequential(*L)


# models/network_dncnn.py
class DnCNN(nn.Module):
    def __init__(self, in_nc=1, out_nc=1, nc=64, nb=17, act_mode='BR'):
        super(DnCNN, self).__init__()
        assert 'R' in act_mode or 'L' in act_mode, 'Examples of activation function: R, L, BR, BL, IR, IL'
        bias = True

        m_head = conv(in_nc, nc, mode='C'+act_mode[-1], bias=bias)
        m_body = [conv(nc, nc, mode='C'+act_mode, bias=bias) for _ in range(nb-2)]
        m_tail = conv(nc, out_nc, mode='C', bias=bias)

        self.model = sequential(m_head, *m_body, m_tail)

    def forward(self, x):
        n = self.model(x)
        return x-n


# models/select_network.py
def init_weights(net, init_type='xavier_uniform', init_bn_type='uniform', gain=1):
    def init_fn(m, init_type='xavier_uniform', init_bn_type='uniform', gain=1):
        classname = m.__class__.__name__

        if classname.find('Conv') != -1 or classname.find('Linear') != -1:

            if init_type == 'orthogonal':
                init.orthogonal_(m.weight.data, gain=gain)
            else:
                raise NotImplementedError('Initialization method [{:s}] is not implemented'.format(init_type))

            if m.bias is not None:
                m.bias.data.zero_()

        elif classname.find('BatchNorm2d') != -1:

            if init_bn_type == 'uniform':  # preferred
                if m.affine:
                    init.uniform_(m.weight.data, 0.1, 1.0)
                    init.constant_(m.bias.data, 0.0)
            elif init_bn_type == 'constant':
                if m.affine:
                    init.constant_(m.weight.data, 1.0)
                    init.constant_(m.bias.data, 0.0)
            else:
                raise NotImplementedError('Initialization method [{:s}] is not implemented'.format(init_bn_type))

    if init_type not in ['default', 'none']:
        fn = functools.partial(init_fn, init_type=init_type, init_bn_type=init_bn_type, gain=gain)
        net.apply(fn)


def define_G(opt):
    opt_net = opt['netG']
    netG = DnCNN(in_nc=opt_net['in_nc'],
                 out_nc=opt_net['out_nc'],
                 nc=opt_net['nc'],
                 nb=opt_net['nb'],  # total number of conv layers
                 act_mode=opt_net['act_mode'])
    init_weights(netG,
                 init_type=opt_net['init_type'],
                 init_bn_type=opt_net['init_bn_type'],
                 gain=opt_net['init_gain'])
    return netG


# utils/utils_image.py
def augment_img(img, mode=0):
    if mode == 0:
        return img
    elif mode == 1:
        return np.flipud(np.rot90(img))
    elif mode == 2:
        return np.flipud(img)
    elif mode == 3:
        return np.rot90(img, k=3)
    elif mode == 4:
        return np.flipud(np.rot90(img, k=2))
    elif mode == 5:
        return np.rot90(img)
    elif mode == 6:
        return np.rot90(img, k=2)
    elif mode == 7:
        return np.flipud(np.rot90(img, k=3))


def uint2tensor3(img):
    if img.ndim == 2:
        img = np.expand_dims(img, axis=2)
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().div(255.)


def uint2single(img):
    return np.float32(img/255.)


def single2tensor3(img):
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float()


def tensor2uint(img):
    img = img.data.squeeze().float().clamp_(0, 1).cpu().numpy()
    if img.ndim == 3:
        img = np.transpose(img, (1, 2, 0))
    return np.uint8((img*255.0).round())


def calculate_psnr(img1, img2, border=0):
    # img1 and img2 have range [0, 255]
    if not img1.shape == img2.shape:
        raise ValueError('Input images must have the same dimensions.')
    h, w = img1.shape[:2]
    img1 = img1[border:h-border, border:w-border]
    img2 = img2[border:h-border, border:w-border]

    img1 = img1.astype(np.float64)
    img2 = img2.astype(np.float64)
    mse = np.mean((img1 - img2)**2)
    if mse == 0:
        return float('inf')
    return 20 * math.log10(255.0 / math.sqrt(mse))


# (port) synthetic clean images in place of the training folder / BSD68
def synthetic_images(seed, n):
    rng = np.random.RandomState(seed)
    imgs = []
    yy, xx = np.mgrid[0:IMG, 0:IMG] / IMG
    k = np.ones(5) / 5
    for _ in range(n):
        coarse = rng.rand(6, 6)
        field = np.kron(coarse, np.ones((IMG // 6, IMG // 6)))
        field = np.apply_along_axis(functools.partial(np.convolve, k, mode='same'), 0, field)
        field = np.apply_along_axis(functools.partial(np.convolve, k, mode='same'), 1, field)
        img = 0.5 * field + 0.3 * (rng.rand() * yy + rng.rand() * xx)
        for _ in range(3):
            y0, x0 = rng.randint(0, IMG - 12, size=2)
            h, w = rng.randint(6, 20, size=2)
            img[y0:y0 + h, x0:x0 + w] = rng.rand()
        imgs.append(np.uint8(np.clip(img, 0, 1) * 255)[:, :, None])
    return imgs


# data/dataset_dncnn.py
class DatasetDnCNN(data.Dataset):
    def __init__(self, opt, images, bug=None):
        super(DatasetDnCNN, self).__init__()
        self.bug = bug
        self.opt = opt
        self.n_channels = opt['n_channels'] if opt['n_channels'] else 3
        self.patch_size = opt['H_size'] if opt['H_size'] else 64
        self.sigma = opt['sigma'] if opt['sigma'] else 25
        self.sigma_test = opt['sigma_test'] if opt['sigma_test'] else self.sigma

        self.paths_H = images  # (port) the images themselves

    def __getitem__(self, index):
        H_path = index
        img_H = self.paths_H[index]

        L_path = H_path

        if self.opt['phase'] == 'train':
            H, W, _ = img_H.shape

            # --------------------------------
            # randomly crop the patch
            # --------------------------------
            rnd_h = random.randint(0, max(0, H - self.patch_size))
            rnd_w = random.randint(0, max(0, W - self.patch_size))
            patch_H = img_H[rnd_h:rnd_h + self.patch_size, rnd_w:rnd_w + self.patch_size, :]

            # --------------------------------
            # augmentation - flip, rotate
            # --------------------------------
            mode = random.randint(0, 7)
            patch_H = augment_img(patch_H, mode=mode)

            # --------------------------------
            # HWC to CHW, numpy(uint) to tensor
            # --------------------------------
            img_H = uint2tensor3(patch_H)
            if self.bug == "clone_dropped":
                img_L = img_H
            else:
                img_L = img_H.clone()

            # --------------------------------
            # add noise
            # --------------------------------
            noise = torch.randn(img_L.size()).mul_(self.sigma/255.0)
            img_L.add_(noise)

        else:
            img_H = uint2single(img_H)
            img_L = np.copy(img_H)

            # --------------------------------
            # add noise
            # --------------------------------
            np.random.seed(seed=0)
            img_L += np.random.normal(0, self.sigma_test/255.0, img_L.shape)

            # --------------------------------
            # HWC to CHW, numpy to tensor
            # --------------------------------
            img_L = single2tensor3(img_L)
            img_H = single2tensor3(img_H)

        return {'L': img_L, 'H': img_H, 'H_path': H_path, 'L_path': L_path}

    def __len__(self):
        return len(self.paths_H)


# models/model_plain.py (with model_base.py's scheduler helpers)
class ModelPlain:
    """Train with pixel loss"""
    def __init__(self, opt, bug=None):
        self.bug = bug
        self.opt = opt
        self.device = torch.device('cpu')
        self.schedulers = []
        self.opt_train = self.opt['train']    # training option
        self.netG = define_G(opt)

    def init_train(self):
        self.netG.train()                     # set training mode,for BN
        self.define_loss()                    # define loss
        self.define_optimizer()               # define optimizer
        self.define_scheduler()               # define scheduler
        self.log_dict = OrderedDict()         # log

    def define_loss(self):
        G_lossfn_type = self.opt_train['G_lossfn_type']
        if G_lossfn_type == 'l1':
            self.G_lossfn = nn.L1Loss().to(self.device)
        elif G_lossfn_type == 'l2':
            self.G_lossfn = nn.MSELoss().to(self.device)
        elif G_lossfn_type == 'l2sum':
            self.G_lossfn = nn.MSELoss(reduction='sum').to(self.device)
        else:
            raise NotImplementedError('Loss type [{:s}] is not found.'.format(G_lossfn_type))
        self.G_lossfn_weight = self.opt_train['G_lossfn_weight']

    def define_optimizer(self):
        G_optim_params = []
        for k, v in self.netG.named_parameters():
            if v.requires_grad:
                G_optim_params.append(v)
            else:
                print('Params [{:s}] will not optimize.'.format(k))
        if self.opt_train['G_optimizer_type'] == 'adam':
            self.G_optimizer = Adam(G_optim_params, lr=self.opt_train['G_optimizer_lr'],
                                    betas=self.opt_train['G_optimizer_betas'],
                                    weight_decay=self.opt_train['G_optimizer_wd'])
        else:
            raise NotImplementedError

    def define_scheduler(self):
        if self.opt_train['G_scheduler_type'] == 'MultiStepLR':
            self.schedulers.append(lr_scheduler.MultiStepLR(self.G_optimizer,
                                                            self.opt_train['G_scheduler_milestones'],
                                                            self.opt_train['G_scheduler_gamma']
                                                            ))
        else:
            raise NotImplementedError

    def update_learning_rate(self, n):
        for scheduler in self.schedulers:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (port) the deprecated step(epoch) form, as written
                scheduler.step(n)

    def feed_data(self, data, need_H=True):
        self.L = data['L'].to(self.device)
        if need_H:
            self.H = data['H'].to(self.device)

    def netG_forward(self):
        self.E = self.netG(self.L)

    def optimize_parameters(self, current_step):
        if self.bug != "zero_grad_dropped":
            self.G_optimizer.zero_grad()
        self.netG_forward()
        G_loss = self.G_lossfn_weight * self.G_lossfn(self.E, self.H)
        G_loss.backward()

        # ------------------------------------
        # clip_grad
        # ------------------------------------
        G_optimizer_clipgrad = self.opt_train['G_optimizer_clipgrad'] if self.opt_train['G_optimizer_clipgrad'] else 0
        if G_optimizer_clipgrad > 0:
            torch.nn.utils.clip_grad_norm_(self.netG.parameters(), max_norm=self.opt_train['G_optimizer_clipgrad'], norm_type=2)

        self.G_optimizer.step()

        self.log_dict['G_loss'] = G_loss.item()

    def test(self):
        self.netG.eval()
        with torch.no_grad():
            self.netG_forward()
        self.netG.train()

    def current_visuals(self, need_H=True):
        out_dict = OrderedDict()
        out_dict['L'] = self.L.detach()[0].float().cpu()
        out_dict['E'] = self.E.detach()[0].float().cpu()
        if need_H:
            out_dict['H'] = self.H.detach()[0].float().cpu()
        return out_dict


def _build(seed, bug=None):
    opt = OPT
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    border = 0

    dataset_opt = opt['datasets']['train']
    train_set = DatasetDnCNN(dataset_opt, synthetic_images(seed, 64), bug=bug)
    train_loader = DataLoader(train_set,
                              batch_size=dataset_opt['dataloader_batch_size'],
                              shuffle=dataset_opt['dataloader_shuffle'],
                              num_workers=dataset_opt['dataloader_num_workers'],
                              drop_last=True,
                              pin_memory=False,
                              generator=torch.Generator().manual_seed(seed))
    test_set = DatasetDnCNN(opt['datasets']['test'], synthetic_images(seed + 1000, 4))
    test_loader = DataLoader(test_set, batch_size=1,
                             shuffle=False, num_workers=0,
                             drop_last=False, pin_memory=False)

    model = ModelPlain(opt, bug=bug)
    model.init_train()

    state = {"step": 0, "it": iter(train_loader)}

    def train_step():
        try:
            train_data = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            train_data = next(state["it"])
        state["step"] += 1
        current_step = state["step"]
        model.update_learning_rate(current_step)
        model.feed_data(train_data)
        model.optimize_parameters(current_step)
        return model.log_dict['G_loss']

    def eval_fn(net, batch):
        avg_psnr = 0.0
        idx = 0
        for test_data in test_loader:
            idx += 1
            model.feed_data(test_data)
            model.test()
            visuals = model.current_visuals()
            E_img = tensor2uint(visuals['E'])
            H_img = tensor2uint(visuals['H'])
            current_psnr = calculate_psnr(E_img, H_img, border=border)
            avg_psnr += current_psnr
        avg_psnr = avg_psnr / idx
        return avg_psnr

    # the Program's batch: one draw of the training loader's (L, H) pairs
    first = next(iter(DataLoader(train_set, batch_size=dataset_opt['dataloader_batch_size'], shuffle=False)))
    batch = (first['L'], first['H'])

    def loss_fn(E, H):
        return model.G_lossfn_weight * model.G_lossfn(E, H)

    return Program(name="kair_dncnn", model=model.netG, batch=batch, loss_fn=loss_fn, optimizer=model.G_optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``img_L = img_H`` without ``.clone()``: the in-place noise lands on the target too, so the network is asked to
    # reproduce its noisy input (classic aliasing slip).
    Bug("clone_dropped", functools.partial(_build, bug="clone_dropped"), "learning_ledger", ("TASK",)),
    # G_optimizer.zero_grad() left out of optimize_parameters: gradients accumulate across iterations (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
