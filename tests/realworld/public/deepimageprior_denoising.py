# ruff: noqa: PLR0402, UP008, SIM101
"""Deep Image Prior denoising (Ulyanov, Vedaldi & Lempitsky, "Deep Image Prior"): an encoder-decoder with skip
connections maps a fixed random code to the noisy image under MSE; its early fit is the denoised image.

Source: https://github.com/DmitryUlyanov/deep-image-prior
Commit: 042e0d4c1e93f4b1eb0932781de55b8cff5e0f40
Files: ``denoising.ipynb``, ``models/__init__.py`` (``get_net``), ``models/skip.py``, ``models/common.py``,
``utils/common_utils.py`` (``get_noise``, ``get_params``, ``optimize``, ``np_to_torch``, ``torch_to_np``),
``utils/denoising_utils.py``
License: Apache-2.0 (Copyright Dmitry Ulyanov; full text in LICENSES/DmitryUlyanov-deep-image-prior.txt)
Domain: vision, image denoising (untrained-network prior: skip encoder-decoder with reflection padding, strided
downsampling, BatchNorm, LeakyReLU, bilinear upsampling, sigmoid output; fixed noise code perturbed by
``reg_noise_std`` each iteration, MSE to the noisy image, Adam lr 0.01, exponential output averaging, PSNR
backtracking)

Kept as written: the F16 branch of the notebook (``sigma`` 25, ``INPUT`` 'noise', ``pad`` 'reflection',
``OPT_OVER`` 'net', ``reg_noise_std`` 1/30, ``LR`` 0.01, ``OPTIMIZER`` 'adam', ``exp_weight`` 0.99,
``get_net(input_depth, 'skip', pad, skip_n11=4, upsample_mode='bilinear')``), ``skip``, ``Concat`` (cropping to the
smallest input), ``conv`` / ``bn`` / ``act``, ``get_noise`` (uniform, scaled by 1/10), ``get_noisy_image``, the
closure (input perturbation, output averaging, MSE to the noisy image, backward, the PSNRs, the backtracking to the
last parameters when the noisy PSNR drops by more than 5 dB) and ``optimize``'s Adam loop (zero_grad, closure, step).

Deviations from the original:
- the image: ``data/denoising/F16_GT.png`` (512x512 RGB) is replaced by a synthetic 32x32 RGB image made from
  ``seed`` (a smooth colour gradient with a few flat discs and rectangles), cropped to a multiple of 32 as
  ``crop_image`` does; the noise of ``get_noisy_image`` is drawn with a ``np.random.RandomState(seed)``;
- sizes for 2 CPU cores: ``input_depth`` 32 -> 8, ``skip_n33d`` / ``skip_n33u`` 128 -> 16, ``num_scales`` 5 -> 3
  (32 pixels halve three times); ``num_iter`` 3000 is not run: one ``train_step`` is one iteration of
  ``optimize``'s Adam loop;
- CUDA (``dtype = torch.cuda.FloatTensor``, ``new_param.cuda()``) -> the CPU; the plots and the per-iteration
  print are dropped; ``skimage.measure.compare_psnr`` is written out (``10 log10(1 / mse)``, its data range for a
  non-negative float image being 1); the notebook's globals live in a dict;
- ``models/common.py`` patches ``torch.nn.Module.add = add_module`` for every module in the process; here
  ``add_module(container, module)`` is called as a function instead (same numbering from "1"), so importing the
  port changes nothing in torch; ``act``'s Swish branch, the lanczos ``Downsampler`` and the meshgrid input (not on
  this path) are left out;
- ``eval_fn`` is the PSNR of the averaged output ``out_avg`` to the clean image (the notebook's ``PSNR_gt_sm``);
  the Program's batch is ``(net_input_saved, img_noisy_torch)``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 32  # (port) F16_GT.png is 512x512


# models/common.py
def add_module(self, module):
    self.add_module(str(len(self) + 1), module)


class Concat(nn.Module):
    def __init__(self, dim, *args):
        super(Concat, self).__init__()
        self.dim = dim

        for idx, module in enumerate(args):
            self.add_module(str(idx), module)

    def forward(self, input):
        inputs = []
        for module in self._modules.values():
            inputs.append(module(input))

        inputs_shapes2 = [x.shape[2] for x in inputs]
        inputs_shapes3 = [x.shape[3] for x in inputs]

        if np.all(np.array(inputs_shapes2) == min(inputs_shapes2)) and \
                np.all(np.array(inputs_shapes3) == min(inputs_shapes3)):
            inputs_ = inputs
        else:
            target_shape2 = min(inputs_shapes2)
            target_shape3 = min(inputs_shapes3)

            inputs_ = []
            for inp in inputs:
                diff2 = (inp.size(2) - target_shape2) // 2
                diff3 = (inp.size(3) - target_shape3) // 2
                inputs_.append(inp[:, :, diff2: diff2 + target_shape2, diff3:diff3 + target_shape3])

        return torch.cat(inputs_, dim=self.dim)

    def __len__(self):
        return len(self._modules)


def act(act_fun='LeakyReLU'):
    '''
        Either string defining an activation function or module (e.g. nn.ReLU)
    '''
    if isinstance(act_fun, str):
        if act_fun == 'LeakyReLU':
            return nn.LeakyReLU(0.2, inplace=True)
        elif act_fun == 'ELU':
            return nn.ELU()
        elif act_fun == 'none':
            return nn.Sequential()
        else:
            raise AssertionError
    else:
        return act_fun()


def bn(num_features):
    return nn.BatchNorm2d(num_features)


def conv(in_f, out_f, kernel_size, stride=1, bias=True, pad='zero', downsample_mode='stride'):
    downsampler = None
    if stride != 1 and downsample_mode != 'stride':

        if downsample_mode == 'avg':
            downsampler = nn.AvgPool2d(stride, stride)
        elif downsample_mode == 'max':
            downsampler = nn.MaxPool2d(stride, stride)
        else:
            raise AssertionError  # (port) the lanczos Downsampler is not copied

        stride = 1

    padder = None
    to_pad = int((kernel_size - 1) / 2)
    if pad == 'reflection':
        padder = nn.ReflectionPad2d(to_pad)
        to_pad = 0

    convolver = nn.Conv2d(in_f, out_f, kernel_size, stride, padding=to_pad, bias=bias)

    layers = filter(lambda x: x is not None, [padder, convolver, downsampler])
    return nn.Sequential(*layers)


# models/skip.py
def skip(
        num_input_channels=2, num_output_channels=3,
        num_channels_down=(16, 32, 64, 128, 128), num_channels_up=(16, 32, 64, 128, 128),
        num_channels_skip=(4, 4, 4, 4, 4),
        filter_size_down=3, filter_size_up=3, filter_skip_size=1,
        need_sigmoid=True, need_bias=True,
        pad='zero', upsample_mode='nearest', downsample_mode='stride', act_fun='LeakyReLU',
        need1x1_up=True):
    """Assembles encoder-decoder with skip connections."""
    assert len(num_channels_down) == len(num_channels_up) == len(num_channels_skip)

    n_scales = len(num_channels_down)

    if not (isinstance(upsample_mode, list) or isinstance(upsample_mode, tuple)):
        upsample_mode = [upsample_mode] * n_scales

    if not (isinstance(downsample_mode, list) or isinstance(downsample_mode, tuple)):
        downsample_mode = [downsample_mode] * n_scales

    if not (isinstance(filter_size_down, list) or isinstance(filter_size_down, tuple)):
        filter_size_down = [filter_size_down] * n_scales

    if not (isinstance(filter_size_up, list) or isinstance(filter_size_up, tuple)):
        filter_size_up = [filter_size_up] * n_scales

    last_scale = n_scales - 1

    model = nn.Sequential()
    model_tmp = model

    input_depth = num_input_channels
    for i in range(len(num_channels_down)):

        deeper = nn.Sequential()
        skip = nn.Sequential()

        if num_channels_skip[i] != 0:
            add_module(model_tmp, Concat(1, skip, deeper))
        else:
            add_module(model_tmp, deeper)

        add_module(model_tmp, bn(num_channels_skip[i] + (num_channels_up[i + 1] if i < last_scale
                                                         else num_channels_down[i])))

        if num_channels_skip[i] != 0:
            add_module(skip, conv(input_depth, num_channels_skip[i], filter_skip_size, bias=need_bias, pad=pad))
            add_module(skip, bn(num_channels_skip[i]))
            add_module(skip, act(act_fun))

        add_module(deeper, conv(input_depth, num_channels_down[i], filter_size_down[i], 2, bias=need_bias, pad=pad,
                                downsample_mode=downsample_mode[i]))
        add_module(deeper, bn(num_channels_down[i]))
        add_module(deeper, act(act_fun))

        add_module(deeper, conv(num_channels_down[i], num_channels_down[i], filter_size_down[i], bias=need_bias,
                                pad=pad))
        add_module(deeper, bn(num_channels_down[i]))
        add_module(deeper, act(act_fun))

        deeper_main = nn.Sequential()

        if i == len(num_channels_down) - 1:
            # The deepest
            k = num_channels_down[i]
        else:
            add_module(deeper, deeper_main)
            k = num_channels_up[i + 1]

        add_module(deeper, nn.Upsample(scale_factor=2, mode=upsample_mode[i]))

        add_module(model_tmp, conv(num_channels_skip[i] + k, num_channels_up[i], filter_size_up[i], 1,
                                   bias=need_bias, pad=pad))
        add_module(model_tmp, bn(num_channels_up[i]))
        add_module(model_tmp, act(act_fun))

        if need1x1_up:
            add_module(model_tmp, conv(num_channels_up[i], num_channels_up[i], 1, bias=need_bias, pad=pad))
            add_module(model_tmp, bn(num_channels_up[i]))
            add_module(model_tmp, act(act_fun))

        input_depth = num_channels_down[i]
        model_tmp = deeper_main

    add_module(model, conv(num_channels_up[0], num_output_channels, 1, bias=need_bias, pad=pad))
    if need_sigmoid:
        add_module(model, nn.Sigmoid())

    return model


# models/__init__.py
def get_net(input_depth, NET_TYPE, pad, upsample_mode, n_channels=3, act_fun='LeakyReLU', skip_n33d=128,
            skip_n33u=128, skip_n11=4, num_scales=5, downsample_mode='stride'):
    if NET_TYPE == 'skip':
        net = skip(input_depth, n_channels,
                   num_channels_down=[skip_n33d] * num_scales if isinstance(skip_n33d, int) else skip_n33d,
                   num_channels_up=[skip_n33u] * num_scales if isinstance(skip_n33u, int) else skip_n33u,
                   num_channels_skip=[skip_n11] * num_scales if isinstance(skip_n11, int) else skip_n11,
                   upsample_mode=upsample_mode, downsample_mode=downsample_mode,
                   need_sigmoid=True, need_bias=True, pad=pad, act_fun=act_fun)
    else:
        raise AssertionError  # (port) only the skip network is copied
    return net


# utils/common_utils.py
def get_params(opt_over, net, net_input, downsampler=None):
    opt_over_list = opt_over.split(',')
    params = []

    for opt in opt_over_list:

        if opt == 'net':
            params += [x for x in net.parameters()]
        elif opt == 'down':
            assert downsampler is not None
            params = [x for x in downsampler.parameters()]
        elif opt == 'input':
            net_input.requires_grad = True
            params += [net_input]
        else:
            raise AssertionError('what is it?')

    return params


def fill_noise(x, noise_type):
    """Fills tensor `x` with noise of type `noise_type`."""
    if noise_type == 'u':
        x.uniform_()
    elif noise_type == 'n':
        x.normal_()
    else:
        raise AssertionError


def get_noise(input_depth, method, spatial_size, noise_type='u', var=1. / 10):
    if isinstance(spatial_size, int):
        spatial_size = (spatial_size, spatial_size)
    if method == 'noise':
        shape = [1, input_depth, spatial_size[0], spatial_size[1]]
        net_input = torch.zeros(shape)

        fill_noise(net_input, noise_type)
        net_input *= var
    else:
        raise AssertionError  # (port) the meshgrid input is not used here
    return net_input


def np_to_torch(img_np):
    return torch.from_numpy(img_np)[None, :]


def torch_to_np(img_var):
    return img_var.detach().cpu().numpy()[0]


# utils/denoising_utils.py
def get_noisy_image(img_np, sigma, rng):
    img_noisy_np = np.clip(img_np + rng.normal(scale=sigma, size=img_np.shape), 0, 1).astype(np.float32)
    return None, img_noisy_np  # (port) the PIL copy is not needed


def compare_psnr(im_true, im_test):
    """skimage.measure.compare_psnr for float images in [0, 1] (data range 1)."""
    err = np.mean((im_true.astype(np.float64) - im_test.astype(np.float64)) ** 2)
    return 10 * np.log10(1.0 / err)


def synthetic_image(seed):
    """A 3 x 32 x 32 float image in [0, 1]: a smooth colour gradient with flat discs and rectangles."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:IMG, 0:IMG] / (IMG - 1)
    img = np.stack([0.2 + 0.6 * xx, 0.3 + 0.4 * yy, 0.5 + 0.3 * (xx - yy)])
    for _ in range(3):
        cy, cx = rng.randint(6, IMG - 6, size=2)
        r = rng.randint(3, 7)
        img[:, (yy * (IMG - 1) - cy) ** 2 + (xx * (IMG - 1) - cx) ** 2 < r * r] = rng.uniform(0, 1, size=(3, 1))
    for _ in range(2):
        y0, x0 = rng.randint(0, IMG - 8, size=2)
        h, w = rng.randint(4, 9, size=2)
        img[:, y0:y0 + h, x0:x0 + w] = rng.uniform(0, 1, size=(3, 1, 1))
    return np.clip(img, 0, 1).astype(np.float32)


def _build(seed, bug=None):
    torch.manual_seed(seed)

    sigma = 25
    sigma_ = sigma / 255.

    img_np = synthetic_image(seed)
    _, img_noisy_np = get_noisy_image(img_np, sigma_, np.random.RandomState(seed + 1))

    INPUT = 'noise'
    pad = 'reflection'
    OPT_OVER = 'net'

    reg_noise_std = 1. / 30.
    LR = 0.01

    exp_weight = 0.99

    input_depth = 8  # (port) 32

    net = get_net(input_depth, 'skip', pad,
                  skip_n33d=16,  # (port) 128
                  skip_n33u=16,  # (port) 128
                  skip_n11=4,
                  num_scales=3,  # (port) 5
                  upsample_mode='bilinear')

    net_input = get_noise(input_depth, INPUT, (IMG, IMG)).detach()

    # Loss
    mse = torch.nn.MSELoss()

    img_noisy_torch = np_to_torch(img_noisy_np)

    net_input_saved = net_input.detach().clone()
    if bug == "noise_buffer_aliases_input":
        noise = net_input_saved
    else:
        noise = net_input.detach().clone()
    g = {"i": 0, "out_avg": None, "last_net": None, "psrn_noisy_last": 0, "net_input": net_input}
    show_every = 100

    def closure():
        if reg_noise_std > 0:
            g["net_input"] = net_input_saved + (noise.normal_() * reg_noise_std)

        out = net(g["net_input"])

        # Smoothing
        if g["out_avg"] is None:
            g["out_avg"] = out.detach()
        else:
            g["out_avg"] = g["out_avg"] * exp_weight + out.detach() * (1 - exp_weight)

        total_loss = mse(out, img_noisy_torch)
        total_loss.backward()

        psrn_noisy = compare_psnr(img_noisy_np, out.detach().cpu().numpy()[0])

        # Backtracking
        if g["i"] % show_every:
            if psrn_noisy - g["psrn_noisy_last"] < -5:
                for new_param, net_param in zip(g["last_net"], net.parameters()):
                    net_param.data.copy_(new_param)

                return total_loss * 0
            else:
                g["last_net"] = [x.detach().cpu() for x in net.parameters()]
                g["psrn_noisy_last"] = psrn_noisy

        g["i"] += 1

        return total_loss

    p = get_params(OPT_OVER, net, net_input)
    # optimize('adam', p, closure, LR, num_iter): the Adam branch, one iteration per train_step
    optimizer = torch.optim.Adam(p, lr=LR)

    def train_step():
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss = closure()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        if g["out_avg"] is None:
            with torch.no_grad():
                return float(compare_psnr(img_np, torch_to_np(model(net_input_saved))))
        return float(compare_psnr(img_np, torch_to_np(g["out_avg"])))

    return Program(name="deepimageprior_denoising", model=net, batch=(net_input_saved, img_noisy_torch),
                   loss_fn=mse, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``noise = net_input_saved`` without ``.detach().clone()`` (classic aliasing): ``noise.normal_()`` overwrites the
    # saved code, so the network sees a fresh random input every iteration and the fixed code it should map to the
    # image is gone.
    Bug("noise_buffer_aliases_input", functools.partial(_build, bug="noise_buffer_aliases_input"),
        "learning_ledger", ("TASK",)),
    # ``optimizer.zero_grad()`` dropped from ``optimize``'s loop (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
