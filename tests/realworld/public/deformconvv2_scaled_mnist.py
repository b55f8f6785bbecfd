# ruff: noqa: UP008
"""Modulated deformable convolution (Deformable ConvNets v2) on scaled MNIST from 4uiiurz1/pytorch-deform-conv-v2:
``DeformConv2d`` written in plain torch (a zero-initialised 3x3 ``p_conv`` predicting 2N offsets, a zero-initialised
``m_conv`` predicting N sigmoid modulation scalars, bilinear sampling of the four neighbours by ``gather``, the
sampled patches laid out as a (h*ks, w*ks) map and reduced by a stride-ks ``conv``), in ``ScaledMNISTNet`` (four
conv-BN-ReLU layers of 32..256 channels, deformable from the third on, one max-pool, global average pool, Linear), trained
by ``scaled_mnist_train.py``: ``CrossEntropyLoss``, SGD(lr 1e-2, momentum 0.5, weight_decay 1e-4) on the parameters
that require grad, zero_grad / backward / step per batch, ``validate`` under ``eval()``.

Source: https://github.com/4uiiurz1/pytorch-deform-conv-v2
Commit: 529abbbe9b81e852d272220c855255fd631c43c6
Files: ``deform_conv_v2.py`` (``DeformConv2d``), ``scaled_mnist/archs.py`` (``ScaledMNISTNet``), ``scaled_mnist_train.py``
(``parse_args`` defaults, ``train``, ``validate``, ``main``), ``scaled_mnist/dataset.py`` (``ScaledMNIST``: each digit
zero-padded by 14 and randomly zoomed by a factor in (0.5, 1.5)), ``utils.py`` (``AverageMeter``, ``accuracy``)
License: MIT (Copyright (c) 2018 Takato Kimura; full text in LICENSES/4uiiurz1-pytorch-deform-conv-v2.txt)
Domain: vision, image classification with deformable convolutions (learned sampling offsets, bilinear gather,
modulation masks)

Kept as written: ``DeformConv2d`` entire (including the ``register_backward_hook(self._set_lr)`` hooks, whose
generator expressions leave the gradients unchanged, as upstream), ``ScaledMNISTNet`` with the defaults ``--deform
True --modulation True --min-deform-layer 3``, ``CrossEntropyLoss``, ``--optimizer SGD`` with its settings, the
``train`` loop body, ``Normalize((0.1307,), (0.3081,))`` after ToTensor.

Deviations from the original:
- MNIST is not here: the digits are synthetic, made from ``seed`` (ten smoothed random 10x10 glyphs, one per class,
  drawn with stroke noise), zero-padded by 3 instead of 14 (16x16 canvases instead of 56x56, for 2 CPU cores) and
  zoomed about the centre by a factor drawn from (0.5, 1.5) with nearest fill, by ``F.grid_sample`` instead of
  ``scipy.ndimage.affine_transform``; 1024 training and 256 test images, stored as uint8 as the npz files are.
- ``batch_size`` 32 -> 12; ``.cuda()`` calls dropped; tqdm, pandas logs and checkpoints dropped; ``num_workers`` 0
  with a seeded generator; ``train_step`` is one iteration of ``train``'s loop, returning the loss; ``eval_fn`` is
  ``validate``'s accuracy on the test images.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST, GLYPH, PAD, BATCH_SIZE = 1024, 256, 10, 3, 12


class args:  # (port) parse_args() defaults
    arch = 'ScaledMNISTNet'
    deform = True
    modulation = True
    min_deform_layer = 3
    optimizer = 'SGD'
    lr = 1e-2
    momentum = 0.5
    weight_decay = 1e-4
    nesterov = False


# ---- deform_conv_v2.py -----------------------------------------------------------------------------------------

class DeformConv2d(nn.Module):
    def __init__(self, inc, outc, kernel_size=3, padding=1, stride=1, bias=None, modulation=False, bug=None):
        """
        Args:
            modulation (bool, optional): If True, Modulated Defomable Convolution (Deformable ConvNets v2).
        """
        super(DeformConv2d, self).__init__()
        self.bug = bug
        self.kernel_size = kernel_size
        self.padding = padding
        self.stride = stride
        self.zero_padding = nn.ZeroPad2d(padding)
        self.conv = nn.Conv2d(inc, outc, kernel_size=kernel_size, stride=kernel_size, bias=bias)

        self.p_conv = nn.Conv2d(inc, 2*kernel_size*kernel_size, kernel_size=3, padding=1, stride=stride)
        nn.init.constant_(self.p_conv.weight, 0)
        self.p_conv.register_backward_hook(self._set_lr)

        self.modulation = modulation
        if modulation:
            self.m_conv = nn.Conv2d(inc, kernel_size*kernel_size, kernel_size=3, padding=1, stride=stride)
            nn.init.constant_(self.m_conv.weight, 0)
            self.m_conv.register_backward_hook(self._set_lr)

    @staticmethod
    def _set_lr(module, grad_input, grad_output):
        grad_input = (grad_input[i] * 0.1 for i in range(len(grad_input)))
        grad_output = (grad_output[i] * 0.1 for i in range(len(grad_output)))

    def forward(self, x):
        offset = self.p_conv(x)
        if self.bug == "offsets_detached":
            offset = offset.detach()  # (bug) the sampling positions cut from the graph
        if self.modulation:
            m = torch.sigmoid(self.m_conv(x))

        dtype = offset.data.type()
        ks = self.kernel_size
        N = offset.size(1) // 2

        if self.padding:
            x = self.zero_padding(x)

        # (b, 2N, h, w)
        p = self._get_p(offset, dtype)

        # (b, h, w, 2N)
        p = p.contiguous().permute(0, 2, 3, 1)
        q_lt = p.detach().floor()
        q_rb = q_lt + 1

        q_lt = torch.cat([torch.clamp(q_lt[..., :N], 0, x.size(2)-1), torch.clamp(q_lt[..., N:], 0, x.size(3)-1)], dim=-1).long()
        q_rb = torch.cat([torch.clamp(q_rb[..., :N], 0, x.size(2)-1), torch.clamp(q_rb[..., N:], 0, x.size(3)-1)], dim=-1).long()
        q_lb = torch.cat([q_lt[..., :N], q_rb[..., N:]], dim=-1)
        q_rt = torch.cat([q_rb[..., :N], q_lt[..., N:]], dim=-1)

        # clip p
        p = torch.cat([torch.clamp(p[..., :N], 0, x.size(2)-1), torch.clamp(p[..., N:], 0, x.size(3)-1)], dim=-1)

        # bilinear kernel (b, h, w, N)
        g_lt = (1 + (q_lt[..., :N].type_as(p) - p[..., :N])) * (1 + (q_lt[..., N:].type_as(p) - p[..., N:]))
        g_rb = (1 - (q_rb[..., :N].type_as(p) - p[..., :N])) * (1 - (q_rb[..., N:].type_as(p) - p[..., N:]))
        g_lb = (1 + (q_lb[..., :N].type_as(p) - p[..., :N])) * (1 - (q_lb[..., N:].type_as(p) - p[..., N:]))
        g_rt = (1 - (q_rt[..., :N].type_as(p) - p[..., :N])) * (1 + (q_rt[..., N:].type_as(p) - p[..., N:]))

        # (b, c, h, w, N)
        x_q_lt = self._get_x_q(x, q_lt, N)
        x_q_rb = self._get_x_q(x, q_rb, N)
        x_q_lb = self._get_x_q(x, q_lb, N)
        x_q_rt = self._get_x_q(x, q_rt, N)

        # (b, c, h, w, N)
        x_offset = g_lt.unsqueeze(dim=1) * x_q_lt + \
                   g_rb.unsqueeze(dim=1) * x_q_rb + \
                   g_lb.unsqueeze(dim=1) * x_q_lb + \
                   g_rt.unsqueeze(dim=1) * x_q_rt

        # modulation
        if self.modulation:
            m = m.contiguous().permute(0, 2, 3, 1)
            m = m.unsqueeze(dim=1)
            m = torch.cat([m for _ in range(x_offset.size(1))], dim=1)
            x_offset *= m

        x_offset = self._reshape_x_offset(x_offset, ks)
        out = self.conv(x_offset)

        return out

    def _get_p_n(self, N, dtype):
        p_n_x, p_n_y = torch.meshgrid(
            torch.arange(-(self.kernel_size-1)//2, (self.kernel_size-1)//2+1),
            torch.arange(-(self.kernel_size-1)//2, (self.kernel_size-1)//2+1))
        # (2N, 1)
        p_n = torch.cat([torch.flatten(p_n_x), torch.flatten(p_n_y)], 0)
        p_n = p_n.view(1, 2*N, 1, 1).type(dtype)

        return p_n

    def _get_p_0(self, h, w, N, dtype):
        p_0_x, p_0_y = torch.meshgrid(
            torch.arange(1, h*self.stride+1, self.stride),
            torch.arange(1, w*self.stride+1, self.stride))
        p_0_x = torch.flatten(p_0_x).view(1, 1, h, w).repeat(1, N, 1, 1)
        p_0_y = torch.flatten(p_0_y).view(1, 1, h, w).repeat(1, N, 1, 1)
        p_0 = torch.cat([p_0_x, p_0_y], 1).type(dtype)

        return p_0

    def _get_p(self, offset, dtype):
        N, h, w = offset.size(1)//2, offset.size(2), offset.size(3)

        # (1, 2N, 1, 1)
        p_n = self._get_p_n(N, dtype)
        # (1, 2N, h, w)
        p_0 = self._get_p_0(h, w, N, dtype)
        p = p_0 + p_n + offset
        return p

    def _get_x_q(self, x, q, N):
        b, h, w, _ = q.size()
        padded_w = x.size(3)
        c = x.size(1)
        # (b, c, h*w)
        x = x.contiguous().view(b, c, -1)

        # (b, h, w, N)
        index = q[..., :N]*padded_w + q[..., N:]  # offset_x*w + offset_y
        # (b, c, h*w*N)
        index = index.contiguous().unsqueeze(dim=1).expand(-1, c, -1, -1, -1).contiguous().view(b, c, -1)

        x_offset = x.gather(dim=-1, index=index).contiguous().view(b, c, h, w, N)

        return x_offset

    @staticmethod
    def _reshape_x_offset(x_offset, ks):
        b, c, h, w, N = x_offset.size()
        x_offset = torch.cat([x_offset[..., s:s+ks].contiguous().view(b, c, h, w*ks) for s in range(0, N, ks)], dim=-1)
        x_offset = x_offset.contiguous().view(b, c, h*ks, w*ks)

        return x_offset


# ---- scaled_mnist/archs.py -------------------------------------------------------------------------------------

class ScaledMNISTNet(nn.Module):
    def __init__(self, args, num_classes, bug=None):
        super().__init__()

        self.relu = nn.ReLU(inplace=True)
        self.sigmoid = nn.Sigmoid()
        self.pool = nn.MaxPool2d((2, 2))
        self.avg_pool = nn.AdaptiveAvgPool2d(1)

        features = []
        inplanes = 1
        outplanes = 32
        for i in range(4):
            if args.deform and args.min_deform_layer <= i+1:
                features.append(DeformConv2d(inplanes, outplanes, 3, padding=1, bias=False, modulation=args.modulation, bug=bug))
            else:
                features.append(nn.Conv2d(inplanes, outplanes, 3, padding=1, bias=False))
            features.append(nn.BatchNorm2d(outplanes))
            features.append(self.relu)
            if i == 1:
                features.append(self.pool)
            inplanes = outplanes
            outplanes *= 2
        self.features = nn.Sequential(*features)

        self.fc = nn.Linear(256, 10)

    def forward(self, input):
        x = self.features(input)
        x = self.avg_pool(x)
        x = x.view(x.shape[0], -1)
        output = self.fc(x)

        return output


# ---- utils.py --------------------------------------------------------------------------------------------------

class AverageMeter:
    """Computes and stores the average and current value"""
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].view(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# ---- (port) scaled_mnist/dataset.py with synthetic glyphs --------------------------------------------------------

def _scaled_glyphs(gen, n, glyphs):
    labels = torch.randint(0, 10, (n,), generator=gen)
    imgs = glyphs[labels] * (0.7 + 0.3 * torch.rand(n, GLYPH, GLYPH, generator=gen))
    imgs = F.pad(imgs, (PAD, PAD, PAD, PAD))[:, None]  # np.pad(img, 14, 'constant')
    zoom = 0.5 + torch.rand(n, generator=gen)  # random_zoom(img, (0.5, 1.5)), one factor for both axes
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = zoom
    theta[:, 1, 1] = zoom
    grid = F.affine_grid(theta, list(imgs.shape), align_corners=False)
    imgs = F.grid_sample(imgs, grid, mode="bilinear", padding_mode="border", align_corners=False)[:, 0]
    return (imgs.clamp(0, 1) * 255).round().to(torch.uint8), labels


class ScaledMNIST(Dataset):
    def __init__(self, images, labels):
        self.data, self.labels = images, labels

    def __getitem__(self, index):
        img, target = self.data[index], self.labels[index]
        img = (img.float()[None] / 255 - 0.1307) / 0.3081  # ToTensor + Normalize((0.1307,), (0.3081,))
        return img, target

    def __len__(self):
        return len(self.data)


# ---- scaled_mnist_train.py -------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    glyphs = (F.avg_pool2d(torch.rand(10, 1, GLYPH + 2, GLYPH + 2, generator=gen), 3, 1)[:, 0] > 0.5).float()
    train_set = ScaledMNIST(*_scaled_glyphs(gen, N_TRAIN, glyphs))
    test_set = ScaledMNIST(*_scaled_glyphs(gen, N_TEST, glyphs))

    criterion = nn.CrossEntropyLoss()
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=BATCH_SIZE,
        shuffle=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed))
    test_loader = torch.utils.data.DataLoader(
        test_set,
        batch_size=32,
        shuffle=False,
        num_workers=0)

    num_classes = 10

    # create model
    model = ScaledMNISTNet(args, num_classes, bug=bug)

    if args.optimizer == 'Adam':
        optimizer = optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr)
    elif args.optimizer == 'SGD':
        optimizer = optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr,
            momentum=args.momentum, weight_decay=args.weight_decay, nesterov=args.nesterov)

    st = {"it": None}
    losses = AverageMeter()
    scores = AverageMeter()

    def train_step():
        model.train()
        try:
            input, target = next(st["it"])
        except (StopIteration, TypeError):
            st["it"] = iter(train_loader)
            input, target = next(st["it"])

        output = model(input)
        loss = criterion(output, target)

        acc = accuracy(output, target)[0]

        losses.update(loss.item(), input.size(0))
        scores.update(acc.item(), input.size(0))

        # compute gradient and do optimizing step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        sc = AverageMeter()
        with torch.no_grad():
            for input, target in test_loader:
                output = model(input)
                acc = accuracy(output, target)[0]
                sc.update(acc.item(), input.size(0))
        model.train(was)
        return sc.avg

    batch = next(iter(DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="deformconvv2_scaled_mnist", model=model, batch=batch, loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the predicted offsets detached before sampling: p_conv gets no gradient and the sampling grid never deforms
    # (classic: a .detach() meant for the integer corners q_lt applied to p).
    Bug("offsets_detached", functools.partial(_build, bug="offsets_detached"), "reachability",
        ("features.7.p_conv",)),
    # zero_grad between backward and step: every step applies only the weight decay (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
