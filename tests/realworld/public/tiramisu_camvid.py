"""FC-DenseNet ("One Hundred Layers Tiramisu") on CamVid from bfortuner/pytorch_tiramisu: the repository's
``FCDenseNet`` (first conv, dense blocks of BN-ReLU-conv3x3-Dropout2d layers concatenated along the channels,
transition-down 1x1 conv + max-pool, an upsampling bottleneck that keeps only its new features, transition-up by a
stride-2 transposed conv centre-cropped to the skip and concatenated, a 1x1 classifier and ``LogSoftmax(dim=1)``),
``weights_init`` (Kaiming-uniform convs, zero biases), trained as ``train.ipynb`` does with
``utils/training.py``'s ``train``: ``NLLLoss2d`` weighted by CamVid's ``class_weight`` (the Void class at weight
0), RMSprop(lr 1e-4, weight_decay 1e-4), ``JointRandomHorizontalFlip`` of image and label, per-epoch
``adjust_learning_rate`` (decay 0.995 every epoch), ``test`` (``eval()``, loss and pixel error) after each epoch.

Source: https://github.com/bfortuner/pytorch_tiramisu
Commit: c1cf07967f20ebd1e7d4ca0a61126f9cab11be99
Files: train.ipynb, models/tiramisu.py, models/layers.py, utils/training.py, datasets/camvid.py,
datasets/joint_transforms.py
License: MIT (Copyright (c) 2018 Brendan Fortuner; full text in LICENSES/bfortuner-pytorch_tiramisu.txt)
Domain: vision, semantic segmentation (fully convolutional DenseNet, class-weighted pixel NLL)

Deviations from the original:
- sizes: ``FCDenseNet67`` (down/up blocks of 5 layers, growth 16, first conv 48) is built through the same
  ``FCDenseNet`` class with blocks of 2 layers, growth rate 4, first conv 8 (five levels and the 12 classes kept);
  images 360x480 (224 crops commented out in the notebook) -> 32x32 (five 2x poolings need a multiple of 32);
  367 training frames -> 32, 101 validation frames -> 8; batch size 2 -> 4;
- data: CamVid is replaced by synthetic 32x32 street-like scenes made from ``seed``: random axis-aligned rectangles,
  each painted in one class's ``class_color`` (with noise), the label of a pixel the class whose colour is nearest;
  normalized with camvid's ``mean``/``std``; PIL, torchvision's ``ToTensor``/``Normalize`` and the joint flip are
  written out on tensors (``JointRandomHorizontalFlip`` flips image and label together with probability 0.5); the
  flip's ``random.random()`` comes from a ``random.Random(seed)``;
- ``.cuda()``, ``Variable``, weight saving, printing and the notebook's plotting are dropped (CPU);
  ``loss.data[0]`` (refused by modern torch) is written ``loss.item()``;
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in the
  notebook (``test`` on the validation set, ``adjust_learning_rate``) and the next ``train()``'s ``model.train()``;
  ``eval_fn`` is ``test``'s pixel accuracy (1 - error) on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059, UP004  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import torch
import torch.nn as nn
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, N_VAL = 32, 32, 8


# ---- models/layers.py --------------------------------------------------------------------------------------------

class DenseLayer(nn.Sequential):
    def __init__(self, in_channels, growth_rate):
        super().__init__()
        self.add_module('norm', nn.BatchNorm2d(in_channels))
        self.add_module('relu', nn.ReLU(True))
        self.add_module('conv', nn.Conv2d(in_channels, growth_rate, kernel_size=3,
                                          stride=1, padding=1, bias=True))
        self.add_module('drop', nn.Dropout2d(0.2))

    def forward(self, x):
        return super().forward(x)


class DenseBlock(nn.Module):
    def __init__(self, in_channels, growth_rate, n_layers, upsample=False):
        super().__init__()
        self.upsample = upsample
        self.layers = nn.ModuleList([DenseLayer(
            in_channels + i*growth_rate, growth_rate)
            for i in range(n_layers)])

    def forward(self, x):
        if self.upsample:
            new_features = []
            #we pass all previous activations into each dense layer normally
            #But we only store each dense layer's output in the new_features array
            for layer in self.layers:
                out = layer(x)
                x = torch.cat([x, out], 1)
                new_features.append(out)
            return torch.cat(new_features,1)
        else:
            for layer in self.layers:
                out = layer(x)
                x = torch.cat([x, out], 1) # 1 = channel axis
            return x


class TransitionDown(nn.Sequential):
    def __init__(self, in_channels):
        super().__init__()
        self.add_module('norm', nn.BatchNorm2d(num_features=in_channels))
        self.add_module('relu', nn.ReLU(inplace=True))
        self.add_module('conv', nn.Conv2d(in_channels, in_channels,
                                          kernel_size=1, stride=1,
                                          padding=0, bias=True))
        self.add_module('drop', nn.Dropout2d(0.2))
        self.add_module('maxpool', nn.MaxPool2d(2))

    def forward(self, x):
        return super().forward(x)


class TransitionUp(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.convTrans = nn.ConvTranspose2d(
            in_channels=in_channels, out_channels=out_channels,
            kernel_size=3, stride=2, padding=0, bias=True)

    def forward(self, x, skip):
        out = self.convTrans(x)
        out = center_crop(out, skip.size(2), skip.size(3))
        out = torch.cat([out, skip], 1)
        return out


class Bottleneck(nn.Sequential):
    def __init__(self, in_channels, growth_rate, n_layers):
        super().__init__()
        self.add_module('bottleneck', DenseBlock(
            in_channels, growth_rate, n_layers, upsample=True))

    def forward(self, x):
        return super().forward(x)


def center_crop(layer, max_height, max_width):
    _, _, h, w = layer.size()
    xy1 = (w - max_width) // 2
    xy2 = (h - max_height) // 2
    return layer[:, :, xy2:(xy2 + max_height), xy1:(xy1 + max_width)]


# ---- models/tiramisu.py ------------------------------------------------------------------------------------------

class FCDenseNet(nn.Module):
    def __init__(self, in_channels=3, down_blocks=(5,5,5,5,5),
                 up_blocks=(5,5,5,5,5), bottleneck_layers=5,
                 growth_rate=16, out_chans_first_conv=48, n_classes=12, bug=None):
        super().__init__()
        self.down_blocks = down_blocks
        self.up_blocks = up_blocks
        cur_channels_count = 0
        skip_connection_channel_counts = []

        ## First Convolution ##

        self.add_module('firstconv', nn.Conv2d(in_channels=in_channels,
                  out_channels=out_chans_first_conv, kernel_size=3,
                  stride=1, padding=1, bias=True))
        cur_channels_count = out_chans_first_conv

        #####################
        # Downsampling path #
        #####################

        self.denseBlocksDown = nn.ModuleList([])
        self.transDownBlocks = nn.ModuleList([])
        for i in range(len(down_blocks)):
            self.denseBlocksDown.append(
                DenseBlock(cur_channels_count, growth_rate, down_blocks[i]))
            cur_channels_count += (growth_rate*down_blocks[i])
            skip_connection_channel_counts.insert(0,cur_channels_count)
            self.transDownBlocks.append(TransitionDown(cur_channels_count))

        #####################
        #     Bottleneck    #
        #####################

        self.add_module('bottleneck',Bottleneck(cur_channels_count,
                                     growth_rate, bottleneck_layers))
        prev_block_channels = growth_rate*bottleneck_layers
        cur_channels_count += prev_block_channels

        #######################
        #   Upsampling path   #
        #######################

        self.transUpBlocks = nn.ModuleList([])
        self.denseBlocksUp = nn.ModuleList([])
        for i in range(len(up_blocks)-1):
            self.transUpBlocks.append(TransitionUp(prev_block_channels, prev_block_channels))
            cur_channels_count = prev_block_channels + skip_connection_channel_counts[i]

            self.denseBlocksUp.append(DenseBlock(
                cur_channels_count, growth_rate, up_blocks[i],
                    upsample=True))
            prev_block_channels = growth_rate*up_blocks[i]
            cur_channels_count += prev_block_channels

        ## Final DenseBlock ##

        self.transUpBlocks.append(TransitionUp(
            prev_block_channels, prev_block_channels))
        cur_channels_count = prev_block_channels + skip_connection_channel_counts[-1]

        self.denseBlocksUp.append(DenseBlock(
            cur_channels_count, growth_rate, up_blocks[-1],
                upsample=False))
        cur_channels_count += growth_rate*up_blocks[-1]

        ## Softmax ##

        self.finalConv = nn.Conv2d(in_channels=cur_channels_count,
               out_channels=n_classes, kernel_size=1, stride=1,
                   padding=0, bias=True)
        if bug == "softmax_not_log_softmax":
            self.softmax = nn.Softmax(dim=1)
        else:
            self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, x):
        out = self.firstconv(x)

        skip_connections = []
        for i in range(len(self.down_blocks)):
            out = self.denseBlocksDown[i](out)
            skip_connections.append(out)
            out = self.transDownBlocks[i](out)

        out = self.bottleneck(out)
        for i in range(len(self.up_blocks)):
            skip = skip_connections.pop()
            out = self.transUpBlocks[i](out, skip)
            out = self.denseBlocksUp[i](out)

        out = self.finalConv(out)
        out = self.softmax(out)
        return out


# ---- utils/training.py -------------------------------------------------------------------------------------------

def get_predictions(output_batch):
    bs,c,h,w = output_batch.size()
    tensor = output_batch.data
    values, indices = tensor.cpu().max(1)
    indices = indices.view(bs,h,w)
    return indices

def error(preds, targets):
    assert preds.size() == targets.size()
    bs,h,w = preds.size()
    n_pixels = bs*h*w
    incorrect = preds.ne(targets).cpu().sum()
    err = incorrect/n_pixels
    return round(float(err),5)

def adjust_learning_rate(lr, decay, optimizer, cur_epoch, n_epochs):
    """Sets the learning rate to the initially
        configured `lr` decayed by `decay` every `n_epochs`"""
    new_lr = lr * (decay ** (cur_epoch // n_epochs))
    for param_group in optimizer.param_groups:
        param_group['lr'] = new_lr

def weights_init(m):
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_uniform(m.weight)
        m.bias.data.zero_()


# ---- datasets/camvid.py (constants) and a synthetic CamVid --------------------------------------------------------

class_weight = torch.FloatTensor([
    0.58872014284134, 0.51052379608154, 2.6966278553009,
    0.45021694898605, 1.1785038709641, 0.77028578519821, 2.4782588481903,
    2.5273461341858, 1.0122526884079, 3.2375309467316, 4.1312313079834, 0])

mean = [0.41189489566336, 0.4251328133025, 0.4326707089857]
std = [0.27413549931506, 0.28506257482912, 0.28284674400252]

class_color = [
    (128, 128, 128),
    (128, 0, 0),
    (192, 192, 128),
    (128, 64, 128),
    (0, 0, 192),
    (128, 128, 0),
    (192, 128, 128),
    (64, 64, 128),
    (64, 0, 128),
    (64, 64, 0),
    (0, 128, 192),
    (0, 0, 0),
]

COLOURS = torch.tensor(class_color, dtype=torch.float) / 255.0
MEAN = torch.tensor(mean).view(3, 1, 1)
STD = torch.tensor(std).view(3, 1, 1)


def _label_pixels(raw):
    """The labelling rule: each pixel's class is the class colour nearest to it."""
    flat = raw.permute(0, 2, 3, 1).reshape(-1, 3)
    return torch.cdist(flat, COLOURS).argmin(dim=1).view(raw.size(0), raw.size(2), raw.size(3))


def _scenes(gen, n):
    raw = torch.empty(n, 3, IMG, IMG)
    for k in range(n):
        img = COLOURS[torch.randint(0, 11, (), generator=gen)].view(3, 1, 1).expand(3, IMG, IMG).clone()
        for _ in range(6):
            c = COLOURS[torch.randint(0, 12, (), generator=gen)]
            y0, x0 = torch.randint(0, IMG - 6, (2,), generator=gen).tolist()
            h, w = torch.randint(4, 16, (2,), generator=gen).tolist()
            img[:, y0:y0 + h, x0:x0 + w] = c.view(3, 1, 1)
        raw[k] = img
    raw = (raw + 0.04 * torch.randn(raw.shape, generator=gen)).clamp(0, 1)
    return raw, _label_pixels(raw)


class _SyntheticCamVid(Dataset):
    """CamVid-shaped (image, label) pairs; ``joint_transform`` sees [img, target] as in ``CamVid.__getitem__``."""

    def __init__(self, raw, labels, joint_transform=None):
        self.raw, self.labels, self.joint_transform = raw, labels, joint_transform

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, index):
        img, target = self.raw[index], self.labels[index]
        if self.joint_transform is not None:
            img, target = self.joint_transform([img, target])
        img = (img - MEAN) / STD  # transforms.ToTensor(), normalize
        return img, target


class JointRandomHorizontalFlip(object):
    """Randomly horizontally flips the given list of images with a probability of 0.5 (tensors here)."""

    def __init__(self, rng, bug=None):
        self.random = rng
        self.bug = bug

    def __call__(self, imgs):
        if self.random.random() < 0.5:
            if self.bug == "flip_image_only":
                return [imgs[0].flip(-1)] + list(imgs[1:])
            return [img.flip(-1) for img in imgs]
        return imgs


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batch_size = 4
    train_raw, train_lab = _scenes(gen, N_TRAIN)
    val_raw, val_lab = _scenes(gen, N_VAL)

    train_joint_transformer = JointRandomHorizontalFlip(random.Random(seed), bug=bug)
    train_dset = _SyntheticCamVid(train_raw, train_lab, joint_transform=train_joint_transformer)
    train_loader = torch.utils.data.DataLoader(
        train_dset, batch_size=batch_size, shuffle=True, generator=gen)
    val_dset = _SyntheticCamVid(val_raw, val_lab, joint_transform=None)
    val_loader = torch.utils.data.DataLoader(
        val_dset, batch_size=batch_size, shuffle=False)

    LR = 1e-4
    LR_DECAY = 0.995
    DECAY_EVERY_N_EPOCHS = 1

    model = FCDenseNet(in_channels=3, down_blocks=(2, 2, 2, 2, 2), up_blocks=(2, 2, 2, 2, 2), bottleneck_layers=2,
                       growth_rate=4, out_chans_first_conv=8, n_classes=12, bug=bug)
    model.apply(weights_init)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=LR, weight_decay=1e-4)
    criterion = nn.NLLLoss2d(weight=class_weight)

    def test(model, test_loader, criterion, epoch=1):
        model.eval()
        test_loss = 0
        test_error = 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += criterion(output, target).item()
                pred = get_predictions(output)
                test_error += error(pred, target.data.cpu())
        test_loss /= len(test_loader)
        test_error /= len(test_loader)
        return test_loss, test_error

    state = {"it": None, "epoch": 1}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in the notebook's loop
                val_loss, val_err = test(model, val_loader, criterion, state["epoch"])
                adjust_learning_rate(LR, LR_DECAY, optimizer, state["epoch"], DECAY_EVERY_N_EPOCHS)
                state["epoch"] += 1
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data = next_batch()
        inputs = data[0]
        targets = data[1]

        optimizer.zero_grad()
        output = model(inputs)
        loss = criterion(output, targets)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, targets = batch
        model.eval()
        with torch.no_grad():
            err = error(get_predictions(model(inputs)), targets)
        model.train()
        return 1 - err

    def task_probe(x):
        """The labelling rule: each pixel's class is the class colour nearest to its (de-normalized) colour."""
        return _label_pixels(x * STD + MEAN)

    first = next(iter(torch.utils.data.DataLoader(_SyntheticCamVid(train_raw, train_lab), batch_size=batch_size)))
    return Program(name="tiramisu_camvid", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=task_probe,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # nn.Softmax in place of the final nn.LogSoftmax: NLLLoss2d then takes probabilities for log-probabilities and
    # its minimum is a probability of 1 pushed without the log's normalization (classic).
    Bug("softmax_not_log_softmax", functools.partial(_build, bug="softmax_not_log_softmax"), "learning_ledger",
        ("OBJECTIVE",)),
    # the joint flip applied to the image only: half of the training pairs have their label map mirrored against
    # the image (classic joint-transform slip).
    Bug("flip_image_only", functools.partial(_build, bug="flip_image_only"), "learning_ledger", ("TASK",)),
]
