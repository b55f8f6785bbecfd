"""Video classification of okankop/Efficient-3DCNNs: the repository's 3D ``ShuffleNetV2`` (3D conv stem, max-pool,
stride-2 and split/concat stride-1 inverted residual units with depthwise 3D convolutions and channel shuffle, 1x1x1
conv to 1024, global average pool, dropout 0.2 + linear) trained by ``main.py`` / ``train.py`` as the Jester script
runs it: clips of ``sample_duration`` frames taken every ``downsample`` frames by ``TemporalRandomCrop``, the clip's
``RandomHorizontalFlip`` drawn once per clip, ``ToTensor(norm_value=1)`` (pixels in 0..255) and mean subtraction
with the ActivityNet mean, cross-entropy, SGD (the script's lr 0.1, see below) with momentum 0.9, dampening 0.9, weight decay 1e-3, the lr
divided by 10 at the ``lr_steps`` epochs (``adjust_learning_rate`` at each epoch), ``val_epoch`` after each epoch.

Source: https://github.com/okankop/Efficient-3DCNNs
Commit: 9db09f629d8acad06b316e40c351fa96d01c2268
Files: ``main.py``, ``train.py`` (``train_epoch``), ``validation.py`` (``val_epoch``), ``models/shufflenetv2.py``,
``model.py`` (``generate_model``, the CPU path), ``opts.py``, ``run-jester.sh``, ``utils.py``
(``calculate_accuracy``, ``adjust_learning_rate``), ``temporal_transforms.py`` (``TemporalRandomCrop``),
``spatial_transforms.py`` (``RandomHorizontalFlip``, ``Normalize``), ``mean.py``, ``datasets/jester.py``
(``__getitem__``), ``target_transforms.py`` (``ClassLabel``)
License: MIT (Copyright (c) 2019, Okan Kopuklu; full text in LICENSES/okankop-Efficient-3DCNNs.txt)
Domain: vision, video action recognition (3D CNN on clips)

Deviations from the original:
- Jester is not here: 48 training and 16 validation videos of 20 frames are made from ``seed``: a coloured square on
  a noisy background that moves up, moves down, stays, or grows (4 classes, ``n_classes`` 27 -> 4; every class is
  left-right symmetric, as the script's horizontal flip requires); the jpg ``video_loader`` is an index into the
  frames; the ``MultiScaleRandomCrop`` (PIL crop and resize) is left out (frames are drawn at ``sample_size``);
  PIL flips are tensor flips; ``TemporalRandomCrop`` and the flip draw from a ``random.Random(seed)`` instance;
  the validation clips' ``TemporalCenterCrop`` is a fixed slice of the 20 frames;
- sizes for 2 CPU cores: ``sample_size`` 112 -> 32, ``sample_duration`` 16 -> 8 (``downsample`` 2 as in
  ``run-jester.sh``), ``width_mult`` 0.25 (one of the model's widths; the Jester script's model is ``mobilenet``
  0.5x), batch 16 -> 8, validation batch 16 -> 8, learning rate 0.1 -> 0.01 (from scratch on 48 clips in batches
  of 8, the script's 0.1 and ``opts.py``'s default 0.04 make the loss climb over the first steps), ``lr_steps`` [40, 55, 65, 70, 200, 250] kept (epochs);
- no GPU: the ``no_cuda`` path of ``generate_model`` (no ``DataParallel``); loggers, printing and checkpoints are
  dropped; ``Variable`` is dropped;
- ``main``'s epoch loop is unrolled: one ``train_step`` is one batch of ``train_epoch`` (``adjust_learning_rate``
  and ``model.train()`` when an epoch starts, ``val_epoch`` when it ends); ``eval_fn`` is ``calculate_accuracy``'s
  top-1 on a batch in ``model.eval()``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, UP032, UP004  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VAL, N_FRAMES, N_CLASSES = 48, 16, 20, 4


# ---- models/shufflenetv2.py ----------------------------------------------------------------------------------

def conv_bn(inp, oup, stride):
    return nn.Sequential(
        nn.Conv3d(inp, oup, kernel_size=3, stride=stride, padding=(1,1,1), bias=False),
        nn.BatchNorm3d(oup),
        nn.ReLU(inplace=True)
    )

def conv_1x1x1_bn(inp, oup):
    return nn.Sequential(
        nn.Conv3d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm3d(oup),
        nn.ReLU(inplace=True)
    )

def channel_shuffle(x, groups):
    '''Channel shuffle: [N,C,H,W] -> [N,g,C/g,H,W] -> [N,C/g,g,H,w] -> [N,C,H,W]'''
    batchsize, num_channels, depth, height, width = x.data.size()
    channels_per_group = num_channels // groups
    # reshape
    x = x.view(batchsize, groups,
        channels_per_group, depth, height, width)
    #permute
    x = x.permute(0,2,1,3,4,5).contiguous()
    # flatten
    x = x.view(batchsize, num_channels, depth, height, width)
    return x

class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride):
        super(InvertedResidual, self).__init__()
        self.stride = stride
        assert stride in [1, 2]

        oup_inc = oup//2

        if self.stride == 1:
            #assert inp == oup_inc
            self.banch2 = nn.Sequential(
                # pw
                nn.Conv3d(oup_inc, oup_inc, 1, 1, 0, bias=False),
                nn.BatchNorm3d(oup_inc),
                nn.ReLU(inplace=True),
                # dw
                nn.Conv3d(oup_inc, oup_inc, 3, stride, 1, groups=oup_inc, bias=False),
                nn.BatchNorm3d(oup_inc),
                # pw-linear
                nn.Conv3d(oup_inc, oup_inc, 1, 1, 0, bias=False),
                nn.BatchNorm3d(oup_inc),
                nn.ReLU(inplace=True),
            )
        else:
            self.banch1 = nn.Sequential(
                # dw
                nn.Conv3d(inp, inp, 3, stride, 1, groups=inp, bias=False),
                nn.BatchNorm3d(inp),
                # pw-linear
                nn.Conv3d(inp, oup_inc, 1, 1, 0, bias=False),
                nn.BatchNorm3d(oup_inc),
                nn.ReLU(inplace=True),
            )

            self.banch2 = nn.Sequential(
                # pw
                nn.Conv3d(inp, oup_inc, 1, 1, 0, bias=False),
                nn.BatchNorm3d(oup_inc),
                nn.ReLU(inplace=True),
                # dw
                nn.Conv3d(oup_inc, oup_inc, 3, stride, 1, groups=oup_inc, bias=False),
                nn.BatchNorm3d(oup_inc),
                # pw-linear
                nn.Conv3d(oup_inc, oup_inc, 1, 1, 0, bias=False),
                nn.BatchNorm3d(oup_inc),
                nn.ReLU(inplace=True),
            )

    @staticmethod
    def _concat(x, out):
        # concatenate along channel axis
        return torch.cat((x, out), 1)

    def forward(self, x):
        if self.stride == 1:
            x1 = x[:, :(x.shape[1]//2), :, :, :]
            x2 = x[:, (x.shape[1]//2):, :, :, :]
            out = self._concat(x1, self.banch2(x2))
        elif self.stride == 2:
            out = self._concat(self.banch1(x), self.banch2(x))

        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, num_classes=600, sample_size=112, width_mult=1.):
        super(ShuffleNetV2, self).__init__()
        assert sample_size % 16 == 0

        self.stage_repeats = [4, 8, 4]
        # index 0 is invalid and should never be called.
        # only used for indexing convenience.
        if width_mult == 0.25:
            self.stage_out_channels = [-1, 24,  32,  64, 128, 1024]
        elif width_mult == 0.5:
            self.stage_out_channels = [-1, 24,  48,  96, 192, 1024]
        elif width_mult == 1.0:
            self.stage_out_channels = [-1, 24, 116, 232, 464, 1024]
        elif width_mult == 1.5:
            self.stage_out_channels = [-1, 24, 176, 352, 704, 1024]
        elif width_mult == 2.0:
            self.stage_out_channels = [-1, 24, 224, 488, 976, 2048]
        else:
            raise ValueError(
                """{} groups is not supported for
                       1x1 Grouped Convolutions""".format(width_mult))

        # building first layer
        input_channel = self.stage_out_channels[1]
        self.conv1 = conv_bn(3, input_channel, stride=(1,2,2))
        self.maxpool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)

        self.features = []
        # building inverted residual blocks
        for idxstage in range(len(self.stage_repeats)):
            numrepeat = self.stage_repeats[idxstage]
            output_channel = self.stage_out_channels[idxstage+2]
            for i in range(numrepeat):
                stride = 2 if i == 0 else 1
                self.features.append(InvertedResidual(input_channel, output_channel, stride))
                input_channel = output_channel

        # make it nn.Sequential
        self.features = nn.Sequential(*self.features)

        # building last several layers
        self.conv_last      = conv_1x1x1_bn(input_channel, self.stage_out_channels[-1])

        # building classifier
        self.classifier = nn.Sequential(
                            nn.Dropout(0.2),
                            nn.Linear(self.stage_out_channels[-1], num_classes)
                            )

    def forward(self, x):
        out = self.conv1(x)
        out = self.maxpool(out)
        out = self.features(out)
        out = self.conv_last(out)
        out = F.avg_pool3d(out, out.data.size()[-3:])
        out = out.view(out.size(0), -1)
        out = self.classifier(out)
        return out


def get_model(**kwargs):
    """
    Returns the model.
    """
    model = ShuffleNetV2(**kwargs)
    return model


# ---- temporal_transforms.py, spatial_transforms.py, mean.py, target_transforms.py ----------------------------

class TemporalRandomCrop(object):
    def __init__(self, size, downsample, rng):
        self.size = size
        self.downsample = downsample
        self.random = rng  # (port) a seeded instance for the module's ``random``

    def __call__(self, frame_indices):
        vid_duration  = len(frame_indices)
        clip_duration = self.size * self.downsample

        rand_end = max(0, vid_duration - clip_duration - 1)
        begin_index = self.random.randint(0, rand_end)
        end_index = min(begin_index + clip_duration, vid_duration)

        out = frame_indices[begin_index:end_index]

        for index in out:
            if len(out) >= clip_duration:
                break
            out.append(index)

        selected_frames = [out[i] for i in range(0, clip_duration, self.downsample)]

        return selected_frames


class RandomHorizontalFlip(object):
    """Horizontally flip the given image randomly with a probability of 0.5 (a CHW tensor here, not a PIL.Image)."""

    def __init__(self, rng):
        self.random = rng

    def __call__(self, img):
        if self.p < 0.5:
            return img.flip(-1)
        return img

    def randomize_parameters(self):
        self.p = self.random.random()


class Normalize(object):
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def __call__(self, tensor):
        # TODO: make efficient
        for t, m, s in zip(tensor, self.mean, self.std):
            t.sub_(m).div_(s)
        return tensor

    def randomize_parameters(self):
        pass


class Compose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def randomize_parameters(self):
        for t in self.transforms:
            if hasattr(t, 'randomize_parameters'):
                t.randomize_parameters()


def get_mean(norm_value=255, dataset='activitynet'):
    assert dataset in ['activitynet', 'kinetics']

    if dataset == 'activitynet':
        return [
            114.7748 / norm_value, 107.7354 / norm_value, 99.4750 / norm_value
        ]
    elif dataset == 'kinetics':
        # Kinetics (10 videos for each class)
        return [
            110.63666788 / norm_value, 103.16065604 / norm_value,
            96.29023126 / norm_value
        ]


class ClassLabel(object):

    def __call__(self, target):
        return target['label']


# ---- utils.py ------------------------------------------------------------------------------------------------

def calculate_accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


def adjust_learning_rate(optimizer, epoch, opt):
    """Sets the learning rate to the initial LR decayed by 10 every 30 epochs"""
    lr_new = opt.learning_rate * (0.1 ** (sum(epoch >= np.array(opt.lr_steps))))
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr_new
        #param_group['lr'] = opt.learning_rate


# ---- the data: synthetic Jester-like videos, datasets/jester.py's __getitem__ ----------------------------------

def _videos(gen, n, size):
    """``n`` videos of N_FRAMES frames (T, 3, size, size) in 0..255: a square that moves up (0), moves down (1), stays
    (2) or grows (3) on a noisy background; every class is left-right symmetric."""
    labels = torch.randint(0, N_CLASSES, (n,), generator=gen)
    videos = 100 + 8 * torch.randn(n, N_FRAMES, 3, size, size, generator=gen)
    for v in range(n):
        colour = 150 + 100 * torch.rand(3, generator=gen)
        x = int(torch.randint(4, size - 12, (1,), generator=gen))
        lab = int(labels[v])
        y0 = int(torch.randint(10, size - 16, (1,), generator=gen)) if lab != 0 else size - 8
        y0 = 2 if lab == 1 else y0
        for t in range(N_FRAMES):
            s = 6 if lab != 3 else 3 + t // 2
            y = {0: y0 - int(t * (size - 12) / N_FRAMES), 1: y0 + int(t * (size - 12) / N_FRAMES)}.get(lab, y0)
            y = max(0, min(size - s, y - (s - 6) // 2 if lab == 3 else y))
            xx = max(0, min(size - s, x - (s - 6) // 2))
            videos[v, t, :, y:y + s, xx:xx + s] = colour[:, None, None]
    return videos.clamp(0, 255), labels


class Jester(torch.utils.data.Dataset):
    def __init__(self, videos, labels, spatial_transform, temporal_transform, target_transform, sample_duration,
                 bug=None):
        self.videos, self.bug = videos, bug
        self.data = [{'video': i, 'frame_indices': list(range(1, N_FRAMES + 1)), 'label': int(labels[i])}
                     for i in range(len(labels))]
        self.spatial_transform = spatial_transform
        self.temporal_transform = temporal_transform
        self.target_transform = target_transform
        self.sample_duration = sample_duration

    def loader(self, path, frame_indices, sample_duration):
        """(port) ``video_loader`` reading ``image_{:05d}.jpg`` for each index, here an index into the frames."""
        if self.bug == "first_frame_repeated":
            return [self.videos[path][frame_indices[0] - 1].clone() for i in frame_indices]
        return [self.videos[path][i - 1].clone() for i in frame_indices]

    def __getitem__(self, index):
        path = self.data[index]['video']
        frame_indices = self.data[index]['frame_indices']
        if self.temporal_transform is not None:
            frame_indices = self.temporal_transform(frame_indices)
        clip = self.loader(path, frame_indices, self.sample_duration)
        if self.spatial_transform is not None:
            self.spatial_transform.randomize_parameters()
            clip = [self.spatial_transform(img) for img in clip]
        clip = torch.stack(clip, 0).permute(1, 0, 2, 3)

        target = self.data[index]
        if self.target_transform is not None:
            target = self.target_transform(target)

        return clip, target

    def __len__(self):
        return len(self.data)


# ---- main.py / train.py / validation.py ----------------------------------------------------------------------

def _build(seed, bug=None):
    opt = SimpleNamespace(n_classes=N_CLASSES, sample_size=32, sample_duration=8, downsample=2, width_mult=0.25,
                          learning_rate=0.01, lr_steps=[40, 55, 65, 70, 200, 250], momentum=0.9, dampening=0.9,
                          weight_decay=1e-3, nesterov=False, batch_size=8, norm_value=1, mean_dataset='activitynet',
                          no_mean_norm=False, std_norm=False, begin_epoch=1, manual_seed=seed, no_cuda=True)
    torch.manual_seed(opt.manual_seed)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    opt.mean = get_mean(opt.norm_value, dataset=opt.mean_dataset)

    model = get_model(num_classes=opt.n_classes, sample_size=opt.sample_size, width_mult=opt.width_mult)
    parameters = model.parameters()

    criterion = nn.CrossEntropyLoss()
    norm_method = Normalize(opt.mean, [1, 1, 1])

    spatial_transform = Compose([RandomHorizontalFlip(rng), norm_method])  # (port) crop left out; ToTensor: tensors
    temporal_transform = TemporalRandomCrop(opt.sample_duration, opt.downsample, rng)
    train_videos, train_labels = _videos(gen, N_TRAIN, opt.sample_size)
    training_data = Jester(train_videos, train_labels, spatial_transform, temporal_transform, ClassLabel(),
                           opt.sample_duration, bug=bug)
    train_loader = torch.utils.data.DataLoader(training_data, batch_size=opt.batch_size, shuffle=True,
                                               num_workers=0, generator=torch.Generator().manual_seed(seed))

    if opt.nesterov:
        dampening = 0
    else:
        dampening = opt.dampening
    optimizer = optim.SGD(
        parameters,
        lr=opt.learning_rate,
        momentum=opt.momentum,
        dampening=dampening,
        weight_decay=opt.weight_decay,
        nesterov=opt.nesterov)

    val_videos, val_labels = _videos(gen, N_VAL, opt.sample_size)
    validation_data = Jester(val_videos, val_labels, Compose([norm_method]),
                             lambda f: f[2:2 + opt.sample_duration * opt.downsample:opt.downsample], ClassLabel(),
                             opt.sample_duration)
    val_loader = torch.utils.data.DataLoader(validation_data, batch_size=8, shuffle=False, num_workers=0)

    def val_epoch(epoch, data_loader, model, criterion, opt):
        model.eval()
        for i, (inputs, targets) in enumerate(data_loader):
            with torch.no_grad():
                outputs = model(inputs)
                loss = criterion(outputs, targets)
            calculate_accuracy(outputs.data, targets.data, topk=(1,))
        return float(loss)

    state = {"it": None, "epoch": opt.begin_epoch - 1}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                val_epoch(state["epoch"], val_loader, model, criterion, opt)
            state["epoch"] += 1
            adjust_learning_rate(optimizer, state["epoch"], opt)
            if bug != "train_mode_not_restored":
                model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        inputs, targets = next_batch()
        outputs = model(inputs)
        loss = criterion(outputs, targets)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, batch):
        inputs, targets = batch
        model.eval()
        with torch.no_grad():
            prec1, = calculate_accuracy(model(inputs), targets, topk=(1,))
        model.train()
        return float(prec1)

    batch = next(iter(torch.utils.data.DataLoader(validation_data, batch_size=8)))
    return Program(name="efficient3dcnns_shufflenetv2", model=model, batch=(batch[0], batch[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)
SELF_CHECK_STEPS = 40

BUGS = [
    # The loader reads the clip's first frame for every selected index (the frame index left out of the path):
    # a clip is one still frame repeated, and the motion that makes the class is gone.
    Bug("first_frame_repeated", functools.partial(_build, bug="first_frame_repeated"), "learning_ledger",
        ("TASK",)),
    # ``model.train()`` dropped from ``train_epoch``: after the first ``val_epoch`` (which calls ``model.eval()``)
    # every later epoch trains with BatchNorm on its running statistics and dropout off.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe",
        ("conv1.1",)),
]
