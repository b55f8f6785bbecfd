"""DeepLabV3 on Cityscapes as trained by fregu856/deeplabv3: a ResNet-18 cut after ``layer2`` (output stride 8)
followed by two dilated ``BasicBlock`` layers (dilation 2 and 4), ASPP (1x1, three dilated 3x3 branches at 6/12/18
and an image-pooling branch, each conv + BN + ReLU, concatenated, 1x1 fusion, 1x1 classifier), bilinear upsampling
to the input size; ``train.py``: random horizontal flip, random scale 0.7-2.0 (nearest) and a random square crop of
image and label together, ImageNet normalization, ``CrossEntropyLoss`` weighted by the ENet class weights
``1 / ln(1.02 + p_class)`` over the 20 train ids, Adam lr 1e-4 over ``add_weight_decay`` groups (L2 1e-4 on
weights, none on biases and BN), ``network.train()`` for the epoch and ``network.eval()`` + ``no_grad`` for the
validation loss.

Source: https://github.com/fregu856/deeplabv3
Commit: 415d983ec8a3e4ab6977b316d8f553371a415739
Files: train.py, model/deeplabv3.py, model/resnet.py (``ResNet18_OS8``, ``BasicBlock``, ``make_layer``),
model/aspp.py (``ASPP``), datasets.py (``DatasetTrain``, ``DatasetVal``), utils/utils.py (``add_weight_decay``),
utils/preprocess_data.py (the class weights)
License: MIT (Copyright (c) 2018 Fredrik Gustafsson; full text in LICENSES/fregu856-deeplabv3.txt)
Domain: vision, semantic segmentation (DeepLabV3 with ASPP, weighted pixel-wise cross-entropy)

Deviations from the original:
- sizes: every channel width divided by 8 (the ResNet-18 stem and layers 8/8/16 instead of 64/64/128, ``layer4``
  128 -> 16 in and 256 -> 32 out, ``layer5`` 256 -> 32 in and 512 -> 64 out, ASPP 512 -> 64 in and 256 -> 32 per
  branch, fusion 1280 -> 160); images resized 1024x2048 -> 512x1024 become 64x128 scenes cut into 32x32 crops (256
  of 512 in the original), so the feature map is 4x4; batch_size 3 kept; lr 1e-4 -> 1e-3 so that the 30 steps of
  the self-check show the loss falling (the original runs 1000 epochs); 20 classes kept;
- no pretrained ImageNet weights (the original loads resnet18-5c106cde.pth): the backbone starts from torchvision's
  initialization; torchvision is not available, so ``models.resnet18()`` is ``_tv_resnet.resnet18`` (same module
  names and init, ``width=8``) and its first six children are kept as in ``ResNet_BasicBlock_OS8``;
  ``F.upsample(..., mode="bilinear")`` is written ``F.interpolate`` (the same call; ``upsample`` was removed);
- data: Cityscapes and its label images are replaced by synthetic "street scenes" made from ``seed``: sky, building
  and road bands and random rectangles of the other classes, each class with its own colour, plus pixel noise; the label
  image holds the class of each pixel; cv2's nearest resizes are written in numpy, ``np.random`` is a
  ``RandomState(seed)``; the class weights are computed from the training label images with the script's ENet
  formula (the original reads them from ``class_weights.pkl``); DataLoader without workers, shuffled with a
  ``torch.Generator(seed)``;
- CUDA, ``Variable``, the model directories, pickled loss logs, matplotlib plots and checkpoints are dropped;
- one ``train_step`` is one batch of the epoch loop; when the loader is exhausted the validation pass runs (eval,
  no_grad) and the next epoch starts with ``network.train()``; ``eval_fn`` is the validation loss on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, PLR1704, TRY002

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _tv_resnet as models
from _api import Bug, Program

S = 8  # channel divisor (the original's widths / 8)
NUM_CLASSES = 20
NEW_H, NEW_W, CROP = 64, 128, 32  # 512, 1024, 256 in the original

num_epochs = 1000
batch_size = 3
learning_rate = 0.001  # 0.0001 in the original


# ---- model/resnet.py -------------------------------------------------------------------------------------------

def make_layer(block, in_channels, channels, num_blocks, stride=1, dilation=1):
    strides = [stride] + [1]*(num_blocks - 1) # (stride == 2, num_blocks == 4 --> strides == [2, 1, 1, 1])

    blocks = []
    for stride in strides:
        blocks.append(block(in_channels=in_channels, channels=channels, stride=stride, dilation=dilation))
        in_channels = block.expansion*channels

    layer = nn.Sequential(*blocks) # (*blocks: call with unpacked list entires as arguments)

    return layer

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_channels, channels, stride=1, dilation=1):
        super(BasicBlock, self).__init__()

        out_channels = self.expansion*channels

        self.conv1 = nn.Conv2d(in_channels, channels, kernel_size=3, stride=stride, padding=dilation, dilation=dilation, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)

        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=dilation, dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

        if (stride != 1) or (in_channels != out_channels):
            conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False)
            bn = nn.BatchNorm2d(out_channels)
            self.downsample = nn.Sequential(conv, bn)
        else:
            self.downsample = nn.Sequential()

    def forward(self, x):
        # (x has shape: (batch_size, in_channels, h, w))

        out = F.relu(self.bn1(self.conv1(x))) # (shape: (batch_size, channels, h, w) if stride == 1, (batch_size, channels, h/2, w/2) if stride == 2)
        out = self.bn2(self.conv2(out)) # (shape: (batch_size, channels, h, w) if stride == 1, (batch_size, channels, h/2, w/2) if stride == 2)

        out = out + self.downsample(x) # (shape: (batch_size, channels, h, w) if stride == 1, (batch_size, channels, h/2, w/2) if stride == 2)

        out = F.relu(out) # (shape: (batch_size, channels, h, w) if stride == 1, (batch_size, channels, h/2, w/2) if stride == 2)

        return out

class ResNet_BasicBlock_OS8(nn.Module):
    def __init__(self, num_layers):
        super(ResNet_BasicBlock_OS8, self).__init__()

        if num_layers == 18:
            resnet = models.resnet18(width=64 // S)
            # (no pretrained weights here)
            # remove fully connected layer, avg pool, layer4 and layer5:
            self.resnet = nn.Sequential(*list(resnet.children())[:-4])

            num_blocks_layer_4 = 2
            num_blocks_layer_5 = 2
        else:
            raise Exception("num_layers must be in {18, 34}!")

        self.layer4 = make_layer(BasicBlock, in_channels=128 // S, channels=256 // S, num_blocks=num_blocks_layer_4, stride=1, dilation=2)

        self.layer5 = make_layer(BasicBlock, in_channels=256 // S, channels=512 // S, num_blocks=num_blocks_layer_5, stride=1, dilation=4)

    def forward(self, x):
        # (x has shape (batch_size, 3, h, w))

        # pass x through (parts of) the pretrained ResNet:
        c3 = self.resnet(x) # (shape: (batch_size, 128, h/8, w/8)) (it's called c3 since 8 == 2^3)

        output = self.layer4(c3) # (shape: (batch_size, 256, h/8, w/8))
        output = self.layer5(output) # (shape: (batch_size, 512, h/8, w/8))

        return output

def ResNet18_OS8():
    return ResNet_BasicBlock_OS8(num_layers=18)


# ---- model/aspp.py ---------------------------------------------------------------------------------------------

class ASPP(nn.Module):
    def __init__(self, num_classes):
        super(ASPP, self).__init__()

        self.conv_1x1_1 = nn.Conv2d(512 // S, 256 // S, kernel_size=1)
        self.bn_conv_1x1_1 = nn.BatchNorm2d(256 // S)

        self.conv_3x3_1 = nn.Conv2d(512 // S, 256 // S, kernel_size=3, stride=1, padding=6, dilation=6)
        self.bn_conv_3x3_1 = nn.BatchNorm2d(256 // S)

        self.conv_3x3_2 = nn.Conv2d(512 // S, 256 // S, kernel_size=3, stride=1, padding=12, dilation=12)
        self.bn_conv_3x3_2 = nn.BatchNorm2d(256 // S)

        self.conv_3x3_3 = nn.Conv2d(512 // S, 256 // S, kernel_size=3, stride=1, padding=18, dilation=18)
        self.bn_conv_3x3_3 = nn.BatchNorm2d(256 // S)

        self.avg_pool = nn.AdaptiveAvgPool2d(1)

        self.conv_1x1_2 = nn.Conv2d(512 // S, 256 // S, kernel_size=1)
        self.bn_conv_1x1_2 = nn.BatchNorm2d(256 // S)

        self.conv_1x1_3 = nn.Conv2d(1280 // S, 256 // S, kernel_size=1) # (1280 = 5*256)
        self.bn_conv_1x1_3 = nn.BatchNorm2d(256 // S)

        self.conv_1x1_4 = nn.Conv2d(256 // S, num_classes, kernel_size=1)

    def forward(self, feature_map):
        # (feature_map has shape (batch_size, 512, h/16, w/16)) (assuming self.resnet is ResNet18_OS16 or ResNet34_OS16. If self.resnet instead is ResNet18_OS8 or ResNet34_OS8, it will be (batch_size, 512, h/8, w/8))

        feature_map_h = feature_map.size()[2] # (== h/16)
        feature_map_w = feature_map.size()[3] # (== w/16)

        out_1x1 = F.relu(self.bn_conv_1x1_1(self.conv_1x1_1(feature_map))) # (shape: (batch_size, 256, h/16, w/16))
        out_3x3_1 = F.relu(self.bn_conv_3x3_1(self.conv_3x3_1(feature_map))) # (shape: (batch_size, 256, h/16, w/16))
        out_3x3_2 = F.relu(self.bn_conv_3x3_2(self.conv_3x3_2(feature_map))) # (shape: (batch_size, 256, h/16, w/16))
        out_3x3_3 = F.relu(self.bn_conv_3x3_3(self.conv_3x3_3(feature_map))) # (shape: (batch_size, 256, h/16, w/16))

        out_img = self.avg_pool(feature_map) # (shape: (batch_size, 512, 1, 1))
        out_img = F.relu(self.bn_conv_1x1_2(self.conv_1x1_2(out_img))) # (shape: (batch_size, 256, 1, 1))
        out_img = F.interpolate(out_img, size=(feature_map_h, feature_map_w), mode="bilinear") # (shape: (batch_size, 256, h/16, w/16))

        out = torch.cat([out_1x1, out_3x3_1, out_3x3_2, out_3x3_3, out_img], 1) # (shape: (batch_size, 1280, h/16, w/16))
        out = F.relu(self.bn_conv_1x1_3(self.conv_1x1_3(out))) # (shape: (batch_size, 256, h/16, w/16))
        out = self.conv_1x1_4(out) # (shape: (batch_size, num_classes, h/16, w/16))

        return out


# ---- model/deeplabv3.py ----------------------------------------------------------------------------------------

class DeepLabV3(nn.Module):
    def __init__(self, model_id, project_dir, bug=None):
        super(DeepLabV3, self).__init__()

        self.num_classes = 20

        self.model_id = model_id
        self.project_dir = project_dir
        self.bug = bug

        self.resnet = ResNet18_OS8() # NOTE! specify the type of ResNet here
        self.aspp = ASPP(num_classes=self.num_classes) # NOTE! if you use ResNet50-152, set self.aspp = ASPP_Bottleneck(num_classes=self.num_classes) instead

    def forward(self, x):
        # (x has shape (batch_size, 3, h, w))

        h = x.size()[2]
        w = x.size()[3]

        feature_map = self.resnet(x) # (shape: (batch_size, 512, h/16, w/16)) (assuming self.resnet is ResNet18_OS16 or ResNet34_OS16. If self.resnet is ResNet18_OS8 or ResNet34_OS8, it will be (batch_size, 512, h/8, w/8))

        output = self.aspp(feature_map) # (shape: (batch_size, num_classes, h/16, w/16))

        output = F.interpolate(output, size=(h, w), mode="bilinear") # (shape: (batch_size, num_classes, h, w))

        if self.bug == "softmax_before_cross_entropy":
            # the network returns class probabilities (classic): CrossEntropyLoss applies log_softmax on top
            output = F.softmax(output, dim=1)

        return output


# ---- utils/utils.py --------------------------------------------------------------------------------------------

def add_weight_decay(net, l2_value, skip_list=()):
    # https://raberrytv.wordpress.com/2017/10/29/pytorch-weight-decay-made-easy/

    decay, no_decay = [], []
    for name, param in net.named_parameters():
        if not param.requires_grad:
            continue # frozen weights
        if len(param.shape) == 1 or name.endswith(".bias") or name in skip_list:
            no_decay.append(param)
        else:
            decay.append(param)

    return [{'params': no_decay, 'weight_decay': 0.0}, {'params': decay, 'weight_decay': l2_value}]


# ---- datasets.py (Cityscapes replaced by synthetic scenes) --------------------------------------------------------

def _colours(seed):
    return np.random.RandomState(seed + 100).randint(0, 256, size=(NUM_CLASSES, 3)).astype(np.float64)


def make_scenes(seed, n):
    """Street-like scenes (H x W x 3, uint8-valued floats) and their train-id label images (H x W)."""
    rng = np.random.RandomState(seed)
    colours = _colours(seed)
    imgs, labels = [], []
    for _ in range(n):
        label = np.zeros((NEW_H, NEW_W), dtype=np.int64)
        sky = rng.randint(8, 16)
        road = rng.randint(30, 40)
        label[:sky] = 10  # sky
        label[sky:road] = 2  # building
        label[road:] = 0  # road
        for _ in range(rng.randint(4, 9)):
            c = rng.randint(0, NUM_CLASSES)
            h, w = rng.randint(6, 20), rng.randint(6, 30)
            y, x = rng.randint(0, NEW_H - h), rng.randint(0, NEW_W - w)
            label[y:y + h, x:x + w] = c
        img = colours[label] + rng.normal(0, 12, size=(NEW_H, NEW_W, 3))
        imgs.append(np.clip(img, 0, 255))
        labels.append(label)
    return imgs, labels


def _resize_nearest(img, w, h):
    """cv2.resize(img, (w, h), interpolation=cv2.INTER_NEAREST)."""
    ys = np.minimum((np.arange(h) * img.shape[0] / h).astype(np.int64), img.shape[0] - 1)
    xs = np.minimum((np.arange(w) * img.shape[1] / w).astype(np.int64), img.shape[1] - 1)
    return img[ys][:, xs]


class DatasetTrain(torch.utils.data.Dataset):
    def __init__(self, seed, bug=None):
        self.new_img_h = NEW_H
        self.new_img_w = NEW_W
        self.imgs, self.labels = make_scenes(seed, 48)
        self.rng = np.random.RandomState(seed + 1)  # np.random
        self.bug = bug
        self.num_examples = len(self.imgs)

    def __getitem__(self, index):
        np_random = self.rng
        img = self.imgs[index]
        label_img = self.labels[index]

        # flip the img and the label with 0.5 probability:
        flip = np_random.randint(low=0, high=2)
        if flip == 1:
            img = img[:, ::-1]  # cv2.flip(img, 1)
            if self.bug != "label_not_flipped":
                # ^ (bug) the flip applied to the image only (classic augmentation slip)
                label_img = label_img[:, ::-1]  # cv2.flip(label_img, 1)

        ########################################################################
        # randomly scale the img and the label:
        ########################################################################
        scale = np_random.uniform(low=0.7, high=2.0)
        new_img_h = int(scale*self.new_img_h)
        new_img_w = int(scale*self.new_img_w)

        # resize img without interpolation (want the image to still match
        # label_img, which we resize below):
        img = _resize_nearest(img, new_img_w, new_img_h) # (shape: (new_img_h, new_img_w, 3))

        # resize label_img without interpolation (want the resulting image to
        # still only contain pixel values corresponding to an object class):
        label_img = _resize_nearest(label_img, new_img_w, new_img_h) # (shape: (new_img_h, new_img_w))

        ########################################################################
        # select a 256x256 random crop from the img and label:
        ########################################################################
        start_x = np_random.randint(low=0, high=(new_img_w - CROP))
        end_x = start_x + CROP
        start_y = np_random.randint(low=0, high=(new_img_h - CROP))
        end_y = start_y + CROP

        img = img[start_y:end_y, start_x:end_x] # (shape: (256, 256, 3))
        label_img = label_img[start_y:end_y, start_x:end_x] # (shape: (256, 256))

        # normalize the img (with the mean and std for the pretrained ResNet):
        img = img/255.0
        img = img - np.array([0.485, 0.456, 0.406])
        img = img/np.array([0.229, 0.224, 0.225]) # (shape: (256, 256, 3))
        img = np.transpose(img, (2, 0, 1)) # (shape: (3, 256, 256))
        img = img.astype(np.float32)

        # convert numpy -> torch:
        img = torch.from_numpy(np.ascontiguousarray(img)) # (shape: (3, 256, 256))
        label_img = torch.from_numpy(np.ascontiguousarray(label_img)) # (shape: (256, 256))

        return (img, label_img)

    def __len__(self):
        return self.num_examples


class DatasetVal(torch.utils.data.Dataset):
    """Validation crops (no flip or scale): the scene resized and its top-left CROP x CROP window, with its id."""

    def __init__(self, seed):
        self.imgs, self.labels = make_scenes(seed + 1000, 6)

    def __getitem__(self, index):
        img = self.imgs[index][:CROP, :CROP]
        label_img = self.labels[index][:CROP, :CROP]
        img = img/255.0
        img = img - np.array([0.485, 0.456, 0.406])
        img = img/np.array([0.229, 0.224, 0.225])
        img = np.transpose(img, (2, 0, 1)).astype(np.float32)
        return (torch.from_numpy(np.ascontiguousarray(img)), torch.from_numpy(np.ascontiguousarray(label_img)),
                str(index))

    def __len__(self):
        return len(self.imgs)


def _class_weights(train_dataset):
    """utils/preprocess_data.py: the ENet class weights over the training label images."""
    num_classes = 20
    trainId_to_count = {}
    for trainId in range(num_classes):
        trainId_to_count[trainId] = 0
    for label_img in train_dataset.labels:
        for trainId in range(num_classes):
            # count how many pixels in label_img which are of object class trainId:
            trainId_mask = np.equal(label_img, trainId)
            trainId_count = np.sum(trainId_mask)
            trainId_to_count[trainId] += trainId_count
    # compute the class weights according to the ENet paper:
    class_weights = []
    total_count = sum(trainId_to_count.values())
    for trainId, count in trainId_to_count.items():
        trainId_prob = float(count)/float(total_count)
        trainId_weight = 1/np.log(1.02 + trainId_prob)
        class_weights.append(trainId_weight)
    return class_weights


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    model_id = "1"

    network = DeepLabV3(model_id, project_dir="/root/deeplabv3", bug=bug)

    train_dataset = DatasetTrain(seed, bug=bug)
    val_dataset = DatasetVal(seed)

    train_loader = torch.utils.data.DataLoader(dataset=train_dataset,
                                               batch_size=batch_size, shuffle=True,
                                               num_workers=0, generator=torch.Generator().manual_seed(seed))
    val_loader = torch.utils.data.DataLoader(dataset=val_dataset,
                                             batch_size=batch_size, shuffle=False,
                                             num_workers=0)

    params = add_weight_decay(network, l2_value=0.0001)
    optimizer = torch.optim.Adam(params, lr=learning_rate)

    class_weights = np.array(_class_weights(train_dataset))
    class_weights = torch.from_numpy(class_weights)
    class_weights = class_weights.type(torch.FloatTensor)

    # loss function
    loss_fn = nn.CrossEntropyLoss(weight=class_weights)

    def validate():
        if bug != "val_in_train_mode":
            network.eval() # (set in evaluation mode, this affects BatchNorm and dropout)
        # ^ (bug) network.eval() left out (classic): BN normalizes each validation batch by its own statistics and
        #   updates the running averages from the validation set
        batch_losses = []
        for step, (imgs, label_imgs, img_ids) in enumerate(val_loader):
            with torch.no_grad(): # (corresponds to setting volatile=True in all variables, this is done during inference to reduce memory consumption)
                label_imgs = label_imgs.type(torch.LongTensor) # (shape: (batch_size, img_h, img_w))

                outputs = network(imgs) # (shape: (batch_size, num_classes, img_h, img_w))

                # compute the loss:
                loss = loss_fn(outputs, label_imgs)
                loss_value = loss.data.cpu().numpy()
                batch_losses.append(loss_value)
        return np.mean(batch_losses)

    state = {"it": None}

    def next_batch():
        if state["it"] is not None:
            try:
                return next(state["it"])
            except StopIteration:
                validate()
        network.train() # (set in training mode, this affects BatchNorm and dropout)
        state["it"] = iter(train_loader)
        return next(state["it"])

    def train_step():
        imgs, label_imgs = next_batch()
        label_imgs = label_imgs.type(torch.LongTensor) # (shape: (batch_size, img_h, img_w))

        outputs = network(imgs) # (shape: (batch_size, num_classes, img_h, img_w))

        # compute the loss:
        loss = loss_fn(outputs, label_imgs)

        # optimization step:
        optimizer.zero_grad() # (reset gradients)
        loss.backward() # (compute gradients)
        optimizer.step() # (perform optimization step)
        return loss.detach()

    def eval_fn(model, batch):
        imgs, label_imgs = batch
        if bug != "val_in_train_mode":
            model.eval()
        with torch.no_grad():
            loss = loss_fn(model(imgs), label_imgs.type(torch.LongTensor))
        model.train()
        return float(loss)

    val_first = next(iter(val_loader))
    return Program(name="fregudeeplabv3_cityscapes", model=network, batch=(val_first[0], val_first[1].long()),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the horizontal flip applied to the image but not to its label image (classic augmentation slip): for half of
    # the crops the labels no longer follow from the pixels.
    Bug("label_not_flipped", functools.partial(_build, bug="label_not_flipped"), "learning_ledger", ("TASK",)),
    # the network ends in a softmax and CrossEntropyLoss takes the probabilities as logits (classic): the loss
    # saturates and the gradients shrink.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # ``network.eval()`` left out of the validation pass (classic): validation runs BN on batch statistics.
    Bug("val_in_train_mode", functools.partial(_build, bug="val_in_train_mode"), "six_claims", ("EVALUATION",)),
]
