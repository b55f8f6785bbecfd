# ruff: noqa: UP030, UP032, RUF059
"""ENet (Paszke et al. 2016) real-time semantic segmentation, davidtvs's PyTorch-ENet: an initial block (strided conv
concatenated with max-pooling), downsampling bottlenecks that keep their max-pool indices, regular / dilated /
asymmetric bottlenecks with spatial dropout (PReLU in the encoder, ReLU in the decoder), upsampling bottlenecks that
max-unpool with the saved indices, and a final transposed convolution; pixel-wise ``CrossEntropyLoss`` weighted by the
ENet class weighing ``1 / ln(1.02 + p_class)`` with the ``unlabeled`` class weighted 0, Adam (lr 5e-4, weight decay
2e-4) and StepLR per epoch; mean IoU ignoring ``unlabeled``.

Source: https://github.com/davidtvs/PyTorch-ENet
Commit: e17d404e2f649a3476eabe39f8a05e5eb77c55fd
Files: ``models/enet.py``, ``main.py`` (``load_dataset``, ``train``), ``train.py`` (``Train``), ``test.py``
(``Test``), ``data/utils.py`` (``enet_weighing``), ``metric/iou.py``, ``metric/confusionmatrix.py``, ``args.py``
(defaults), ``data/camvid.py`` (``color_encoding``)
License: MIT (Copyright (c) 2018 davidtvs; full text in LICENSES/davidtvs-PyTorch-ENet.txt)
Domain: vision, semantic segmentation (encoder-decoder with max-unpooling, class-weighted pixel cross-entropy)

Kept as written: every block of ``models/enet.py`` (``InitialBlock``, ``RegularBottleneck``,
``DownsamplingBottleneck`` with its zero-padded main branch, ``UpsamplingBottleneck``, ``ENet``'s stage layout,
dilations, asymmetric kernels, dropout rates and forward), ``enet_weighing``, the class weights' ``unlabeled`` entry
set to 0 (``ignore_unlabeled`` default), ``nn.CrossEntropyLoss(weight=class_weights)``, Adam and StepLR at the
``args.py`` defaults (lr 5e-4, weight decay 2e-4, decay 0.1 every 100 epochs), ``Train.run_epoch``'s loop body
(forward, loss, zero_grad, backward, step, metric), ``Test.run_epoch`` (eval, no_grad), ``IoU.value`` (the ignored
class's row and column zeroed, ``nanmean``).

Deviations from the original:
- CamVid is not here: 48 synthetic scenes made from ``seed`` at 96x128 (sky band, buildings, road, trees and cars
  as coloured textured regions of 5 classes, thin ``unlabeled`` outlines), resized to ``height`` x ``width`` as
  ``load_dataset`` does (image bilinear, label nearest, in plain torch instead of torchvision/PIL); the class
  encoding keeps five CamVid classes plus ``unlabeled`` (last, as in CamVid); 16 more scenes are the validation set;
- sizes for 2 CPU cores: ``height`` x ``width`` 360x480 -> 48x64, ``batch_size`` 10 -> 8, the ENet widths 16 / 64 /
  128 -> 8 / 32 / 64 (``ENet(num_classes, width=...)``, a port argument; the bottleneck ratios are as written);
- CPU only (``device`` cpu, no workers); printing, checkpoints and the batch display are dropped;
- ``IoU``'s ``ConfusionMatrix`` is the same bincount in a few lines (its argument checks dropped);
- one ``train_step`` is one batch of ``Train.run_epoch``; when an epoch ends, ``lr_updater.step()`` runs as in
  ``train``; ``eval_fn`` is ``Test.run_epoch`` on the validation set returning the mean IoU;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.optim import lr_scheduler
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VAL = 48, 16  # (port) synthetic scenes

# models/enet.py
class InitialBlock(nn.Module):
    def __init__(self, in_channels, out_channels, bias=False, relu=True):
        super().__init__()
        if relu:
            activation = nn.ReLU
        else:
            activation = nn.PReLU
        self.main_branch = nn.Conv2d(in_channels, out_channels - 3, kernel_size=3, stride=2, padding=1, bias=bias)
        self.ext_branch = nn.MaxPool2d(3, stride=2, padding=1)
        self.batch_norm = nn.BatchNorm2d(out_channels)
        self.out_activation = activation()

    def forward(self, x):
        main = self.main_branch(x)
        ext = self.ext_branch(x)
        out = torch.cat((main, ext), 1)
        out = self.batch_norm(out)
        return self.out_activation(out)

class RegularBottleneck(nn.Module):
    def __init__(self, channels, internal_ratio=4, kernel_size=3, padding=0, dilation=1, asymmetric=False,
                 dropout_prob=0, bias=False, relu=True):
        super().__init__()
        if internal_ratio <= 1 or internal_ratio > channels:
            raise RuntimeError("Value out of range. Expected value in the "
                               "interval [1, {0}], got internal_scale={1}."
                               .format(channels, internal_ratio))
        internal_channels = channels // internal_ratio
        if relu:
            activation = nn.ReLU
        else:
            activation = nn.PReLU
        self.ext_conv1 = nn.Sequential(
            nn.Conv2d(channels, internal_channels, kernel_size=1, stride=1, bias=bias),
            nn.BatchNorm2d(internal_channels), activation())
        if asymmetric:
            self.ext_conv2 = nn.Sequential(
                nn.Conv2d(internal_channels, internal_channels, kernel_size=(kernel_size, 1), stride=1,
                          padding=(padding, 0), dilation=dilation, bias=bias),
                nn.BatchNorm2d(internal_channels), activation(),
                nn.Conv2d(internal_channels, internal_channels, kernel_size=(1, kernel_size), stride=1,
                          padding=(0, padding), dilation=dilation, bias=bias),
                nn.BatchNorm2d(internal_channels), activation())
        else:
            self.ext_conv2 = nn.Sequential(
                nn.Conv2d(internal_channels, internal_channels, kernel_size=kernel_size, stride=1, padding=padding,
                          dilation=dilation, bias=bias),
                nn.BatchNorm2d(internal_channels), activation())
        self.ext_conv3 = nn.Sequential(
            nn.Conv2d(internal_channels, channels, kernel_size=1, stride=1, bias=bias),
            nn.BatchNorm2d(channels), activation())
        self.ext_regul = nn.Dropout2d(p=dropout_prob)
        self.out_activation = activation()

    def forward(self, x):
        main = x
        ext = self.ext_conv1(x)
        ext = self.ext_conv2(ext)
        ext = self.ext_conv3(ext)
        ext = self.ext_regul(ext)
        out = main + ext
        return self.out_activation(out)

class DownsamplingBottleneck(nn.Module):
    def __init__(self, in_channels, out_channels, internal_ratio=4, return_indices=False, dropout_prob=0,
                 bias=False, relu=True):
        super().__init__()
        self.return_indices = return_indices
        if internal_ratio <= 1 or internal_ratio > in_channels:
            raise RuntimeError("Value out of range. Expected value in the "
                               "interval [1, {0}], got internal_scale={1}. "
                               .format(in_channels, internal_ratio))
        internal_channels = in_channels // internal_ratio
        if relu:
            activation = nn.ReLU
        else:
            activation = nn.PReLU
        self.main_max1 = nn.MaxPool2d(2, stride=2, return_indices=return_indices)
        self.ext_conv1 = nn.Sequential(
            nn.Conv2d(in_channels, internal_channels, kernel_size=2, stride=2, bias=bias),
            nn.BatchNorm2d(internal_channels), activation())
        self.ext_conv2 = nn.Sequential(
            nn.Conv2d(internal_channels, internal_channels, kernel_size=3, stride=1, padding=1, bias=bias),
            nn.BatchNorm2d(internal_channels), activation())
        self.ext_conv3 = nn.Sequential(
            nn.Conv2d(internal_channels, out_channels, kernel_size=1, stride=1, bias=bias),
            nn.BatchNorm2d(out_channels), activation())
        self.ext_regul = nn.Dropout2d(p=dropout_prob)
        self.out_activation = activation()

    def forward(self, x):
        if self.return_indices:
            main, max_indices = self.main_max1(x)
        else:
            main = self.main_max1(x)
        ext = self.ext_conv1(x)
        ext = self.ext_conv2(ext)
        ext = self.ext_conv3(ext)
        ext = self.ext_regul(ext)
        n, ch_ext, h, w = ext.size()
        ch_main = main.size()[1]
        padding = torch.zeros(n, ch_ext - ch_main, h, w)
        if main.is_cuda:
            padding = padding.cuda()
        main = torch.cat((main, padding), 1)
        out = main + ext
        return self.out_activation(out), max_indices

class UpsamplingBottleneck(nn.Module):
    def __init__(self, in_channels, out_channels, internal_ratio=4, dropout_prob=0, bias=False, relu=True):
        super().__init__()
        if internal_ratio <= 1 or internal_ratio > in_channels:
            raise RuntimeError("Value out of range. Expected value in the "
                               "interval [1, {0}], got internal_scale={1}. "
                               .format(in_channels, internal_ratio))
        internal_channels = in_channels // internal_ratio
        if relu:
            activation = nn.ReLU
        else:
            activation = nn.PReLU
        self.main_conv1 = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias),
            nn.BatchNorm2d(out_channels))
        self.main_unpool1 = nn.MaxUnpool2d(kernel_size=2)
        self.ext_conv1 = nn.Sequential(
            nn.Conv2d(in_channels, internal_channels, kernel_size=1, bias=bias),
            nn.BatchNorm2d(internal_channels), activation())
        self.ext_tconv1 = nn.ConvTranspose2d(internal_channels, internal_channels, kernel_size=2, stride=2, bias=bias)
        self.ext_tconv1_bnorm = nn.BatchNorm2d(internal_channels)
        self.ext_tconv1_activation = activation()
        self.ext_conv2 = nn.Sequential(
            nn.Conv2d(internal_channels, out_channels, kernel_size=1, bias=bias),
            nn.BatchNorm2d(out_channels))
        self.ext_regul = nn.Dropout2d(p=dropout_prob)
        self.out_activation = activation()

    def forward(self, x, max_indices, output_size):
        main = self.main_conv1(x)
        main = self.main_unpool1(main, max_indices, output_size=output_size)
        ext = self.ext_conv1(x)
        ext = self.ext_tconv1(ext, output_size=output_size)
        ext = self.ext_tconv1_bnorm(ext)
        ext = self.ext_tconv1_activation(ext)
        ext = self.ext_conv2(ext)
        ext = self.ext_regul(ext)
        out = main + ext
        return self.out_activation(out)

class ENet(nn.Module):
    def __init__(self, num_classes, encoder_relu=False, decoder_relu=True, width=(16, 64, 128)):
        super().__init__()
        c0, c1, c2 = width  # (port) the widths 16 / 64 / 128 as an argument
        enc = {"relu": encoder_relu}
        self.initial_block = InitialBlock(3, c0, relu=encoder_relu)
        self.downsample1_0 = DownsamplingBottleneck(c0, c1, return_indices=True, dropout_prob=0.01, **enc)
        self.regular1_1 = RegularBottleneck(c1, padding=1, dropout_prob=0.01, **enc)
        self.regular1_2 = RegularBottleneck(c1, padding=1, dropout_prob=0.01, **enc)
        self.regular1_3 = RegularBottleneck(c1, padding=1, dropout_prob=0.01, **enc)
        self.regular1_4 = RegularBottleneck(c1, padding=1, dropout_prob=0.01, **enc)
        self.downsample2_0 = DownsamplingBottleneck(c1, c2, return_indices=True, dropout_prob=0.1, **enc)
        self.regular2_1 = RegularBottleneck(c2, padding=1, dropout_prob=0.1, **enc)
        self.dilated2_2 = RegularBottleneck(c2, dilation=2, padding=2, dropout_prob=0.1, **enc)
        self.asymmetric2_3 = RegularBottleneck(c2, kernel_size=5, padding=2, asymmetric=True, dropout_prob=0.1, **enc)
        self.dilated2_4 = RegularBottleneck(c2, dilation=4, padding=4, dropout_prob=0.1, **enc)
        self.regular2_5 = RegularBottleneck(c2, padding=1, dropout_prob=0.1, **enc)
        self.dilated2_6 = RegularBottleneck(c2, dilation=8, padding=8, dropout_prob=0.1, **enc)
        self.asymmetric2_7 = RegularBottleneck(c2, kernel_size=5, asymmetric=True, padding=2, dropout_prob=0.1, **enc)
        self.dilated2_8 = RegularBottleneck(c2, dilation=16, padding=16, dropout_prob=0.1, **enc)
        self.regular3_0 = RegularBottleneck(c2, padding=1, dropout_prob=0.1, **enc)
        self.dilated3_1 = RegularBottleneck(c2, dilation=2, padding=2, dropout_prob=0.1, **enc)
        self.asymmetric3_2 = RegularBottleneck(c2, kernel_size=5, padding=2, asymmetric=True, dropout_prob=0.1, **enc)
        self.dilated3_3 = RegularBottleneck(c2, dilation=4, padding=4, dropout_prob=0.1, **enc)
        self.regular3_4 = RegularBottleneck(c2, padding=1, dropout_prob=0.1, **enc)
        self.dilated3_5 = RegularBottleneck(c2, dilation=8, padding=8, dropout_prob=0.1, **enc)
        self.asymmetric3_6 = RegularBottleneck(c2, kernel_size=5, asymmetric=True, padding=2, dropout_prob=0.1, **enc)
        self.dilated3_7 = RegularBottleneck(c2, dilation=16, padding=16, dropout_prob=0.1, **enc)
        self.upsample4_0 = UpsamplingBottleneck(c2, c1, dropout_prob=0.1, relu=decoder_relu)
        self.regular4_1 = RegularBottleneck(c1, padding=1, dropout_prob=0.1, relu=decoder_relu)
        self.regular4_2 = RegularBottleneck(c1, padding=1, dropout_prob=0.1, relu=decoder_relu)
        self.upsample5_0 = UpsamplingBottleneck(c1, c0, dropout_prob=0.1, relu=decoder_relu)
        self.regular5_1 = RegularBottleneck(c0, padding=1, dropout_prob=0.1, relu=decoder_relu)
        self.transposed_conv = nn.ConvTranspose2d(c0, num_classes, kernel_size=3, stride=2, padding=1, bias=False)

    def forward(self, x):
        input_size = x.size()
        x = self.initial_block(x)
        stage1_input_size = x.size()
        x, max_indices1_0 = self.downsample1_0(x)
        x = self.regular1_1(x)
        x = self.regular1_2(x)
        x = self.regular1_3(x)
        x = self.regular1_4(x)
        stage2_input_size = x.size()
        x, max_indices2_0 = self.downsample2_0(x)
        x = self.regular2_1(x)
        x = self.dilated2_2(x)
        x = self.asymmetric2_3(x)
        x = self.dilated2_4(x)
        x = self.regular2_5(x)
        x = self.dilated2_6(x)
        x = self.asymmetric2_7(x)
        x = self.dilated2_8(x)
        x = self.regular3_0(x)
        x = self.dilated3_1(x)
        x = self.asymmetric3_2(x)
        x = self.dilated3_3(x)
        x = self.regular3_4(x)
        x = self.dilated3_5(x)
        x = self.asymmetric3_6(x)
        x = self.dilated3_7(x)
        x = self.upsample4_0(x, max_indices2_0, output_size=stage2_input_size)
        x = self.regular4_1(x)
        x = self.regular4_2(x)
        x = self.upsample5_0(x, max_indices1_0, output_size=stage1_input_size)
        x = self.regular5_1(x)
        x = self.transposed_conv(x, output_size=input_size)
        return x

# data/camvid.py (the class encoding kept for five classes and unlabeled)
color_encoding = OrderedDict([
    ('sky', (128, 128, 128)),
    ('building', (128, 0, 0)),
    ('road', (128, 64, 128)),
    ('tree', (128, 128, 0)),
    ('car', (64, 0, 128)),
    ('unlabeled', (0, 0, 0))
])

def _synthetic_scenes(seed, n):
    """(port) Street-like 96x128 scenes: sky band, buildings, road, tree blobs, cars, 1-px unlabeled outlines."""
    g = torch.Generator().manual_seed(seed)
    H, W = 96, 128
    yy, xx = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    labels = torch.empty(n, H, W, dtype=torch.long)
    for i in range(n):
        sky, road = int(torch.randint(20, 40, (1,), generator=g)), int(torch.randint(55, 70, (1,), generator=g))
        lab = torch.where(yy < sky, 0, torch.where(yy < road, 1, 2))
        for _ in range(2):  # trees
            cy, cx, r = int(torch.randint(sky, road, (1,), generator=g)), int(torch.randint(0, W, (1,), generator=g)), 10
            lab[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = 3
        for _ in range(2):  # cars
            x0, y0 = int(torch.randint(0, W - 24, (1,), generator=g)), int(torch.randint(road, H - 12, (1,), generator=g))
            lab[y0:y0 + 12, x0:x0 + 24] = 4
        edge = torch.zeros(H, W, dtype=torch.bool)
        edge[1:] |= lab[1:] != lab[:-1]
        edge[:, 1:] |= lab[:, 1:] != lab[:, :-1]
        lab[edge] = 5
        labels[i] = lab
    colours = torch.tensor([c for c in color_encoding.values()], dtype=torch.float32) / 255.0
    stripes = torch.stack([torch.sin(xx * (0.3 + 0.2 * k) + yy * 0.1 * k) for k in range(6)])  # a texture per class
    images = colours[labels].permute(0, 3, 1, 2) + 0.1 * stripes.expand(n, -1, -1, -1).gather(1, labels[:, None])
    images = (images + 0.1 * torch.randn(images.shape, generator=g)).clamp(0, 1)
    return images, labels

def load_dataset(args, seed, bug=None):
    """(port) load_dataset's transforms: Resize((height, width)) bilinear for images, NEAREST for labels."""
    sets = []
    for s, n in ((seed, N_TRAIN), (seed + 1, N_VAL)):
        images, labels = _synthetic_scenes(s, n)
        images = F.interpolate(images, size=(args.height, args.width), mode="bilinear", align_corners=False)
        if bug == "labels_resized_bilinear":
            labels = F.interpolate(labels[:, None].float(), size=(args.height, args.width), mode="bilinear",
                                   align_corners=False)[:, 0].long()
        else:
            labels = F.interpolate(labels[:, None].float(), size=(args.height, args.width), mode="nearest")[:, 0].long()
        sets.append(data.TensorDataset(images, labels))
    train_loader = data.DataLoader(sets[0], batch_size=args.batch_size, shuffle=True)
    val_loader = data.DataLoader(sets[1], batch_size=args.batch_size, shuffle=False)
    class_encoding = color_encoding
    num_classes = len(class_encoding)
    class_weights = enet_weighing(train_loader, num_classes, bug=bug)
    if class_weights is not None:
        class_weights = torch.from_numpy(class_weights).float()
        if args.ignore_unlabeled:
            ignore_index = list(class_encoding).index('unlabeled')
            class_weights[ignore_index] = 0
    return (train_loader, val_loader), class_weights, class_encoding

# data/utils.py
def enet_weighing(dataloader, num_classes, c=1.02, bug=None):
    class_count = 0
    total = 0
    for _, label in dataloader:
        label = label.cpu().numpy()
        flat_label = label.flatten()
        class_count += np.bincount(flat_label, minlength=num_classes)
        total += flat_label.size
    propensity_score = class_count / total
    if bug == "class_weights_inverted":
        return np.log(c + propensity_score)
    class_weights = 1 / (np.log(c + propensity_score))
    return class_weights

# metric/iou.py (ConfusionMatrix's bincount inlined)
class IoU:
    def __init__(self, num_classes, ignore_index=None):
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.reset()

    def reset(self):
        self.conf = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)

    def add(self, predicted, target):
        _, predicted = predicted.max(1)
        x = predicted.view(-1).cpu().numpy() + self.num_classes * target.view(-1).cpu().numpy()
        self.conf += np.bincount(x.astype(np.int64), minlength=self.num_classes**2).reshape(
            (self.num_classes, self.num_classes))

    def value(self):
        conf_matrix = self.conf.copy()
        if self.ignore_index is not None:
            conf_matrix[:, self.ignore_index] = 0
            conf_matrix[self.ignore_index, :] = 0
        true_positive = np.diag(conf_matrix)
        false_positive = np.sum(conf_matrix, 0) - true_positive
        false_negative = np.sum(conf_matrix, 1) - true_positive
        with np.errstate(divide='ignore', invalid='ignore'):
            iou = true_positive / (true_positive + false_positive + false_negative)
        return iou, np.nanmean(iou)

# test.py
class Test:
    def __init__(self, model, data_loader, criterion, metric, device):
        self.model = model
        self.data_loader = data_loader
        self.criterion = criterion
        self.metric = metric
        self.device = device

    def run_epoch(self, iteration_loss=False):
        self.model.eval()
        epoch_loss = 0.0
        self.metric.reset()
        for step, batch_data in enumerate(self.data_loader):
            inputs = batch_data[0].to(self.device)
            labels = batch_data[1].to(self.device)
            with torch.no_grad():
                outputs = self.model(inputs)
                loss = self.criterion(outputs, labels)
            epoch_loss += loss.item()
            self.metric.add(outputs.detach(), labels.detach())
        return epoch_loss / len(self.data_loader), self.metric.value()

def _train_one_batch(self, batch_data):
    """(port) The loop body of ``Train.run_epoch`` (train.py), ``self`` the ``Train`` state."""
    inputs = batch_data[0].to(self.device)
    labels = batch_data[1].to(self.device)
    outputs = self.model(inputs)
    loss = self.criterion(outputs, labels)
    self.optim.zero_grad()
    loss.backward()
    self.optim.step()
    self.metric.add(outputs.detach(), labels.detach())
    return loss.item()

def _build(seed, bug=None):
    import types
    torch.manual_seed(seed)
    args = types.SimpleNamespace(batch_size=8, epochs=300, learning_rate=5e-4, lr_decay=0.1, lr_decay_epochs=100,
                                 weight_decay=2e-4, height=48, width=64, weighing='ENet', ignore_unlabeled=True,
                                 device='cpu')  # args.py defaults, sizes as listed in the docstring
    device = torch.device(args.device)
    (train_loader, val_loader), class_weights, class_encoding = load_dataset(args, seed, bug=bug)
    num_classes = len(class_encoding)
    model = ENet(num_classes, width=(8, 32, 64)).to(device)
    criterion = nn.CrossEntropyLoss(weight=class_weights)
    optimizer = optim.Adam(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    lr_updater = lr_scheduler.StepLR(optimizer, args.lr_decay_epochs, args.lr_decay)
    if args.ignore_unlabeled:
        ignore_index = list(class_encoding).index('unlabeled')
    else:
        ignore_index = None
    metric = IoU(num_classes, ignore_index=ignore_index)
    train = types.SimpleNamespace(model=model, data_loader=train_loader, optim=optimizer, criterion=criterion,
                                  metric=metric, device=device)
    val = Test(model, val_loader, criterion, metric, device)
    st = {"it": None}

    def train_step():
        batch_data = next(st["it"], None) if st["it"] is not None else None
        if batch_data is None:  # an epoch ends (lr_updater.step()) and the next one starts (Train.run_epoch)
            if st["it"] is not None:
                lr_updater.step()
            model.train()
            train.metric.reset()
            st["it"] = iter(train_loader)
            batch_data = next(st["it"])
        return _train_one_batch(train, batch_data)

    def eval_fn(model, _batch=None):
        was = model.training
        loss, (iou, miou) = val.run_epoch()
        model.train(was)
        return float(miou)
    batch = next(iter(train_loader))
    return Program(name="pytorchenet_camvid", model=model, batch=(batch[0], batch[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)

build = functools.partial(_build, bug=None)

BUGS = [
    Bug("labels_resized_bilinear", functools.partial(_build, bug="labels_resized_bilinear"), "learning_ledger",
        ("TASK",)),
    Bug("class_weights_inverted", functools.partial(_build, bug="class_weights_inverted"), "learning_ledger",
        ("OBJECTIVE",)),
]
