"""Semantic segmentation from CSAILVision's scene-parsing code: ``ResnetDilated`` (a ResNet-18 with a three-conv stem,
layer3 and layer4 turned from strided into dilated convolutions, output stride 8) and ``PPMDeepsup`` (pyramid pooling
module, ``log_softmax`` heads, a deep-supervision head on layer3), wrapped in ``SegmentationModule`` whose training
forward returns ``NLLLoss(ignore_index=-1)(pred, label) + deep_sup_scale * NLLLoss(deepsup, label)`` and the pixel
accuracy; labels come from ``TrainDataset`` (per-batch random short-edge size, random flip, labels downsampled by 8
with nearest resizing and shifted by -1 so that "unlabeled" (0) becomes the ignored -1); two SGD optimizers (encoder,
decoder; no weight decay on biases and BatchNorm) with the poly learning-rate schedule set every iteration.

Source: https://github.com/CSAILVision/semantic-segmentation-pytorch
Commit: 8f27c9b97d2ca7c6e05333d5766d144bf7d8c31b
Files: train.py, mit_semseg/models/models.py, mit_semseg/models/resnet.py, mit_semseg/dataset.py,
config/ade20k-resnet18dilated-ppm_deepsup.yaml, mit_semseg/config/defaults.py
License: BSD-3-Clause (Copyright (c) 2019, MIT CSAIL Computer Vision; full text in
LICENSES/CSAILVision-semantic-segmentation-pytorch.txt)
Domain: semantic segmentation (ignore index, deep supervision)

Deviations from the original:
- the config is ade20k-resnet18dilated-ppm_deepsup.yaml with sizes for 2 CPU cores: ResNet channel widths / 8
  (stem 64/64/128 -> 8/8/16, layers 64..512 -> 8..64, so fc_dim 512 -> 64), PPM's 512 channels -> 64,
  num_class 150 -> 5, imgSizes (300..600) -> (48, 56, 64), imgMaxSize 1000 -> 80, batch_size_per_gpu 2 -> 4,
  epoch_iters 5000 -> 20, num_epoch 20 -> 5 (so the poly schedule spans the run); lr 0.02, lr_pow 0.9, momentum
  0.9, weight decay 1e-4, deep_sup_scale 0.4, padding_constant 8 and segm_downsampling_rate 8 unchanged;
- no pretrained encoder (build_encoder downloads ImageNet weights when ``weights`` is empty): randomly initialized
  as ResNet.__init__ does;
- ``SynchronizedBatchNorm2d`` (the repository's multi-GPU BatchNorm) is ``nn.BatchNorm2d`` (one device: the same
  computation); ``UserScatteredDataParallel`` and ``.cuda()`` are not used: the loader's one-element list (from
  ``user_scattered_collate``) is unwrapped to its dict, which is what the scatter hands each replica;
- data: ADE20K is replaced by synthetic 64x64 scenes made from ``seed`` held in memory (``list_sample`` records with
  arrays instead of file paths): label-map values 1..5 (a background class and up to three shapes of classes 2..5,
  each class a colour with noise) and a 0 ("unlabeled") border; PIL's resize and flip are written in numpy/torch
  (bilinear for the image, nearest for the labels), the rest of ``TrainDataset.__getitem__`` is as written
  (including its global ``np.random`` calls);
- one ``train_step`` is one iteration of ``train``'s loop (zero_grad, poly lr, forward, mean, backward, both
  optimizers step); epochs advance every ``epoch_iters`` steps; printing, history and checkpoints are left out;
  the program has two optimizers (encoder, decoder), so the Program declares none (``optimizer=None``: its step
  updates through both); the module computes its own loss from the labels in ``feed_dict``, so the batch is
  ``({"feed_dict": feed_dict}, seg_label)`` and ``loss_fn`` takes the loss from the module's (loss, acc);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, PLR0402, RUF059, SIM101, SIM114, TRY002, UP008  (the original's style is kept)

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

BatchNorm2d = nn.BatchNorm2d  # SynchronizedBatchNorm2d on one device
DIV = 8  # channel widths / 8
N_SCENES = 40


# ---- mit_semseg/models/resnet.py ---------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    "3x3 convolution with padding"
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class ResNet(nn.Module):

    def __init__(self, block, layers, num_classes=1000):
        self.inplanes = 128 // DIV
        super(ResNet, self).__init__()
        self.conv1 = conv3x3(3, 64 // DIV, stride=2)
        self.bn1 = BatchNorm2d(64 // DIV)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(64 // DIV, 64 // DIV)
        self.bn2 = BatchNorm2d(64 // DIV)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv3 = conv3x3(64 // DIV, 128 // DIV)
        self.bn3 = BatchNorm2d(128 // DIV)
        self.relu3 = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

        self.layer1 = self._make_layer(block, 64 // DIV, layers[0])
        self.layer2 = self._make_layer(block, 128 // DIV, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256 // DIV, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512 // DIV, layers[3], stride=2)
        self.avgpool = nn.AvgPool2d(7, stride=1)
        self.fc = nn.Linear(512 // DIV * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.relu2(self.bn2(self.conv2(x)))
        x = self.relu3(self.bn3(self.conv3(x)))
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


def resnet18(pretrained=False, **kwargs):
    """Constructs a ResNet-18 model.

    Args:
        pretrained (bool): If True, returns a model pre-trained on ImageNet
    """
    model = ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)
    assert not pretrained, "no pretrained weights here"
    return model


# ---- mit_semseg/models/models.py ---------------------------------------------------------------------------------

class SegmentationModuleBase(nn.Module):
    def __init__(self):
        super(SegmentationModuleBase, self).__init__()

    def pixel_acc(self, pred, label):
        _, preds = torch.max(pred, dim=1)
        valid = (label >= 0).long()
        acc_sum = torch.sum(valid * (preds == label).long())
        pixel_sum = torch.sum(valid)
        acc = acc_sum.float() / (pixel_sum.float() + 1e-10)
        return acc


class SegmentationModule(SegmentationModuleBase):
    def __init__(self, net_enc, net_dec, crit, deep_sup_scale=None):
        super(SegmentationModule, self).__init__()
        self.encoder = net_enc
        self.decoder = net_dec
        self.crit = crit
        self.deep_sup_scale = deep_sup_scale

    def forward(self, feed_dict, *, segSize=None):
        # training
        if segSize is None:
            if self.deep_sup_scale is not None: # use deep supervision technique
                (pred, pred_deepsup) = self.decoder(self.encoder(feed_dict['img_data'], return_feature_maps=True))
            else:
                pred = self.decoder(self.encoder(feed_dict['img_data'], return_feature_maps=True))

            loss = self.crit(pred, feed_dict['seg_label'])
            if self.deep_sup_scale is not None:
                loss_deepsup = self.crit(pred_deepsup, feed_dict['seg_label'])
                loss = loss + loss_deepsup * self.deep_sup_scale

            acc = self.pixel_acc(pred, feed_dict['seg_label'])
            return loss, acc
        # inference
        else:
            pred = self.decoder(self.encoder(feed_dict['img_data'], return_feature_maps=True), segSize=segSize)
            return pred


class ModelBuilder:
    # custom weights initialization
    @staticmethod
    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            nn.init.kaiming_normal_(m.weight.data)
        elif classname.find('BatchNorm') != -1:
            m.weight.data.fill_(1.)
            m.bias.data.fill_(1e-4)
        #elif classname.find('Linear') != -1:
        #    m.weight.data.normal_(0.0, 0.0001)

    @staticmethod
    def build_encoder(arch='resnet50dilated', fc_dim=512, weights=''):
        pretrained = False  # the original: True if len(weights) == 0 (downloads ImageNet weights)
        arch = arch.lower()
        if arch == 'resnet18dilated':
            orig_resnet = resnet18(pretrained=pretrained)
            net_encoder = ResnetDilated(orig_resnet, dilate_scale=8)
        else:
            raise Exception('Architecture undefined!')

        # encoders are usually pretrained
        # net_encoder.apply(ModelBuilder.weights_init)
        return net_encoder

    @staticmethod
    def build_decoder(arch='ppm_deepsup',
                      fc_dim=512, num_class=150,
                      weights='', use_softmax=False):
        arch = arch.lower()
        if arch == 'ppm_deepsup':
            net_decoder = PPMDeepsup(
                num_class=num_class,
                fc_dim=fc_dim,
                use_softmax=use_softmax)
        else:
            raise Exception('Architecture undefined!')

        net_decoder.apply(ModelBuilder.weights_init)
        return net_decoder


class ResnetDilated(nn.Module):
    def __init__(self, orig_resnet, dilate_scale=8):
        super(ResnetDilated, self).__init__()
        from functools import partial

        if dilate_scale == 8:
            orig_resnet.layer3.apply(
                partial(self._nostride_dilate, dilate=2))
            orig_resnet.layer4.apply(
                partial(self._nostride_dilate, dilate=4))
        elif dilate_scale == 16:
            orig_resnet.layer4.apply(
                partial(self._nostride_dilate, dilate=2))

        # take pretrained resnet, except AvgPool and FC
        self.conv1 = orig_resnet.conv1
        self.bn1 = orig_resnet.bn1
        self.relu1 = orig_resnet.relu1
        self.conv2 = orig_resnet.conv2
        self.bn2 = orig_resnet.bn2
        self.relu2 = orig_resnet.relu2
        self.conv3 = orig_resnet.conv3
        self.bn3 = orig_resnet.bn3
        self.relu3 = orig_resnet.relu3
        self.maxpool = orig_resnet.maxpool
        self.layer1 = orig_resnet.layer1
        self.layer2 = orig_resnet.layer2
        self.layer3 = orig_resnet.layer3
        self.layer4 = orig_resnet.layer4

    def _nostride_dilate(self, m, dilate):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            # the convolution with stride
            if m.stride == (2, 2):
                m.stride = (1, 1)
                if m.kernel_size == (3, 3):
                    m.dilation = (dilate//2, dilate//2)
                    m.padding = (dilate//2, dilate//2)
            # other convoluions
            else:
                if m.kernel_size == (3, 3):
                    m.dilation = (dilate, dilate)
                    m.padding = (dilate, dilate)

    def forward(self, x, return_feature_maps=False):
        conv_out = []

        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.relu2(self.bn2(self.conv2(x)))
        x = self.relu3(self.bn3(self.conv3(x)))
        x = self.maxpool(x)

        x = self.layer1(x); conv_out.append(x);
        x = self.layer2(x); conv_out.append(x);
        x = self.layer3(x); conv_out.append(x);
        x = self.layer4(x); conv_out.append(x);

        if return_feature_maps:
            return conv_out
        return [x]


def conv3x3_bn_relu(in_planes, out_planes, stride=1):
    "3x3 convolution + BN + relu"
    return nn.Sequential(
            nn.Conv2d(in_planes, out_planes, kernel_size=3,
                      stride=stride, padding=1, bias=False),
            BatchNorm2d(out_planes),
            nn.ReLU(inplace=True),
            )


# pyramid pooling, deep supervision
class PPMDeepsup(nn.Module):
    def __init__(self, num_class=150, fc_dim=4096,
                 use_softmax=False, pool_scales=(1, 2, 3, 6)):
        super(PPMDeepsup, self).__init__()
        self.use_softmax = use_softmax

        self.ppm = []
        for scale in pool_scales:
            self.ppm.append(nn.Sequential(
                nn.AdaptiveAvgPool2d(scale),
                nn.Conv2d(fc_dim, 512 // DIV, kernel_size=1, bias=False),
                BatchNorm2d(512 // DIV),
                nn.ReLU(inplace=True)
            ))
        self.ppm = nn.ModuleList(self.ppm)
        self.cbr_deepsup = conv3x3_bn_relu(fc_dim // 2, fc_dim // 4, 1)

        self.conv_last = nn.Sequential(
            nn.Conv2d(fc_dim+len(pool_scales)*512 // DIV, 512 // DIV,
                      kernel_size=3, padding=1, bias=False),
            BatchNorm2d(512 // DIV),
            nn.ReLU(inplace=True),
            nn.Dropout2d(0.1),
            nn.Conv2d(512 // DIV, num_class, kernel_size=1)
        )
        self.conv_last_deepsup = nn.Conv2d(fc_dim // 4, num_class, 1, 1, 0)
        self.dropout_deepsup = nn.Dropout2d(0.1)

    def forward(self, conv_out, segSize=None):
        conv5 = conv_out[-1]

        input_size = conv5.size()
        ppm_out = [conv5]
        for pool_scale in self.ppm:
            ppm_out.append(nn.functional.interpolate(
                pool_scale(conv5),
                (input_size[2], input_size[3]),
                mode='bilinear', align_corners=False))
        ppm_out = torch.cat(ppm_out, 1)

        x = self.conv_last(ppm_out)

        if self.use_softmax:  # is True during inference
            x = nn.functional.interpolate(
                x, size=segSize, mode='bilinear', align_corners=False)
            x = nn.functional.softmax(x, dim=1)
            return x

        # deep sup
        conv4 = conv_out[-2]
        _ = self.cbr_deepsup(conv4)
        _ = self.dropout_deepsup(_)
        _ = self.conv_last_deepsup(_)

        x = nn.functional.log_softmax(x, dim=1)
        _ = nn.functional.log_softmax(_, dim=1)

        return (x, _)


# ---- mit_semseg/dataset.py ---------------------------------------------------------------------------------------

def imresize(im, size, interp='bilinear'):
    """PIL's ``im.resize(size, resample)`` on an HxW or HxWxC uint8 array; ``size`` is (width, height)."""
    t = torch.from_numpy(np.ascontiguousarray(im)).float()
    t = t[None, None] if t.ndim == 2 else t.permute(2, 0, 1)[None]
    if interp == 'nearest':
        t = F.interpolate(t, size=(int(size[1]), int(size[0])), mode='nearest')
    elif interp == 'bilinear':
        t = F.interpolate(t, size=(int(size[1]), int(size[0])), mode='bilinear', align_corners=False)
    else:
        raise Exception('resample method undefined!')
    t = t[0, 0] if im.ndim == 2 else t[0].permute(1, 2, 0)
    return t.round().clamp(0, 255).to(torch.uint8).numpy()


class BaseDataset(torch.utils.data.Dataset):
    def __init__(self, odgt, opt, **kwargs):
        # parse options
        self.imgSizes = opt.imgSizes
        self.imgMaxSize = opt.imgMaxSize
        # max down sampling rate of network to avoid rounding during conv or pooling
        self.padding_constant = opt.padding_constant

        # parse the input list
        self.parse_input_list(odgt, **kwargs)

        # mean and std
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def normalize(self, img):  # transforms.Normalize(mean=..., std=...)
        return (img - self.mean) / self.std

    def parse_input_list(self, odgt, max_sample=-1, start_idx=-1, end_idx=-1):
        if isinstance(odgt, list):
            self.list_sample = odgt

        if max_sample > 0:
            self.list_sample = self.list_sample[0:max_sample]
        if start_idx >= 0 and end_idx >= 0:     # divide file list
            self.list_sample = self.list_sample[start_idx:end_idx]

        self.num_sample = len(self.list_sample)
        assert self.num_sample > 0

    def img_transform(self, img):
        # 0-255 to 0-1
        img = np.float32(np.array(img)) / 255.
        img = img.transpose((2, 0, 1))
        img = self.normalize(torch.from_numpy(img.copy()))
        return img

    def segm_transform(self, segm):
        # to tensor, -1 to 149
        segm = torch.from_numpy(np.array(segm)).long() - 1
        return segm

    # Round x to the nearest multiple of p and x' >= x
    def round2nearest_multiple(self, x, p):
        return ((x - 1) // p + 1) * p


class TrainDataset(BaseDataset):
    def __init__(self, root_dataset, odgt, opt, batch_per_gpu=1, bug=None, **kwargs):
        super(TrainDataset, self).__init__(odgt, opt, **kwargs)
        self.root_dataset = root_dataset
        # down sampling rate of segm labe
        self.segm_downsampling_rate = opt.segm_downsampling_rate
        self.batch_per_gpu = batch_per_gpu
        self.bug = bug

        # classify images into two classes: 1. h > w and 2. h <= w
        self.batch_record_list = [[], []]

        # override dataset length when trainig with batch_per_gpu > 1
        self.cur_idx = 0
        self.if_shuffled = False

    def _get_sub_batch(self):
        while True:
            # get a sample record
            this_sample = self.list_sample[self.cur_idx]
            if this_sample['height'] > this_sample['width']:
                self.batch_record_list[0].append(this_sample) # h > w, go to 1st class
            else:
                self.batch_record_list[1].append(this_sample) # h <= w, go to 2nd class

            # update current sample pointer
            self.cur_idx += 1
            if self.cur_idx >= self.num_sample:
                self.cur_idx = 0
                np.random.shuffle(self.list_sample)

            if len(self.batch_record_list[0]) == self.batch_per_gpu:
                batch_records = self.batch_record_list[0]
                self.batch_record_list[0] = []
                break
            elif len(self.batch_record_list[1]) == self.batch_per_gpu:
                batch_records = self.batch_record_list[1]
                self.batch_record_list[1] = []
                break
        return batch_records

    def __getitem__(self, index):
        # NOTE: random shuffle for the first time. shuffle in __init__ is useless
        if not self.if_shuffled:
            np.random.seed(index)
            np.random.shuffle(self.list_sample)
            self.if_shuffled = True

        # get sub-batch candidates
        batch_records = self._get_sub_batch()

        # resize all images' short edges to the chosen size
        if isinstance(self.imgSizes, list) or isinstance(self.imgSizes, tuple):
            this_short_size = np.random.choice(self.imgSizes)
        else:
            this_short_size = self.imgSizes

        # calculate the BATCH's height and width
        # since we concat more than one samples, the batch's h and w shall be larger than EACH sample
        batch_widths = np.zeros(self.batch_per_gpu, np.int32)
        batch_heights = np.zeros(self.batch_per_gpu, np.int32)
        for i in range(self.batch_per_gpu):
            img_height, img_width = batch_records[i]['height'], batch_records[i]['width']
            this_scale = min(
                this_short_size / min(img_height, img_width), \
                self.imgMaxSize / max(img_height, img_width))
            batch_widths[i] = img_width * this_scale
            batch_heights[i] = img_height * this_scale

        # Here we must pad both input image and segmentation map to size h' and w' so that p | h' and p | w'
        batch_width = np.max(batch_widths)
        batch_height = np.max(batch_heights)
        batch_width = int(self.round2nearest_multiple(batch_width, self.padding_constant))
        batch_height = int(self.round2nearest_multiple(batch_height, self.padding_constant))

        assert self.padding_constant >= self.segm_downsampling_rate, \
            'padding constant must be equal or large than segm downsamping rate'
        batch_images = torch.zeros(
            self.batch_per_gpu, 3, batch_height, batch_width)
        batch_segms = torch.zeros(
            self.batch_per_gpu,
            batch_height // self.segm_downsampling_rate,
            batch_width // self.segm_downsampling_rate).long()

        for i in range(self.batch_per_gpu):
            this_record = batch_records[i]

            # load image and label (held in memory here: no files)
            img = this_record['img']
            segm = this_record['segm']
            assert(img.shape[1] == segm.shape[1])
            assert(img.shape[0] == segm.shape[0])

            # random_flip
            if np.random.choice([0, 1]):
                img = img[:, ::-1]  # img.transpose(Image.FLIP_LEFT_RIGHT)
                if self.bug != "flip_image_not_label":
                    segm = segm[:, ::-1]  # segm.transpose(Image.FLIP_LEFT_RIGHT)

            # note that each sample within a mini batch has different scale param
            img = imresize(img, (batch_widths[i], batch_heights[i]), interp='bilinear')
            segm = imresize(segm, (batch_widths[i], batch_heights[i]), interp='nearest')

            # further downsample seg label, need to avoid seg label misalignment
            segm_rounded_width = self.round2nearest_multiple(segm.shape[1], self.segm_downsampling_rate)
            segm_rounded_height = self.round2nearest_multiple(segm.shape[0], self.segm_downsampling_rate)
            segm_rounded = np.zeros((segm_rounded_height, segm_rounded_width), np.uint8)  # Image.new('L', ..., 0)
            segm_rounded[:segm.shape[0], :segm.shape[1]] = segm  # segm_rounded.paste(segm, (0, 0))
            segm = imresize(
                segm_rounded,
                (segm_rounded.shape[1] // self.segm_downsampling_rate, \
                 segm_rounded.shape[0] // self.segm_downsampling_rate), \
                interp='nearest')

            # image transform, to torch float tensor 3xHxW
            img = self.img_transform(img)

            # segm transform, to torch long tensor HxW
            segm = self.segm_transform(segm)

            # put into batch arrays
            batch_images[i][:, :img.shape[1], :img.shape[2]] = img
            batch_segms[i][:segm.shape[0], :segm.shape[1]] = segm

        output = dict()
        output['img_data'] = batch_images
        output['seg_label'] = batch_segms
        return output

    def __len__(self):
        return int(1e10) # It's a fake length due to the trick that every loader maintains its own list


def user_scattered_collate(batch):
    return batch


def make_scenes(seed, n):
    """``list_sample`` records with the arrays in memory: 64x64 scenes, label values 1..5 (1: background, 2..5: up to
    three rectangles or discs), each class a colour with noise, and a 4-pixel border left unlabeled (0)."""
    rng = np.random.default_rng(seed)
    colours = np.array([[120, 120, 120], [200, 40, 40], [40, 200, 40], [40, 40, 200], [220, 220, 40]])
    yy, xx = np.mgrid[0:64, 0:64]
    records = []
    for _ in range(n):
        segm = np.ones((64, 64), np.uint8)
        for _ in range(int(rng.integers(1, 4))):
            cls = int(rng.integers(2, 6))
            cy, cx, r = int(rng.integers(12, 52)), int(rng.integers(12, 52)), int(rng.integers(6, 14))
            if rng.random() < 0.5:
                shape = (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r)
            else:
                shape = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            segm[shape] = cls
        img = colours[segm - 1] + rng.normal(0, 20, (64, 64, 3))
        segm[:4, :] = 0
        segm[-4:, :] = 0
        segm[:, :4] = 0
        segm[:, -4:] = 0
        records.append({'img': np.clip(img, 0, 255).astype(np.uint8), 'segm': segm, 'height': 64, 'width': 64})
    return records


# ---- train.py ----------------------------------------------------------------------------------------------------

def group_weight(module):
    group_decay = []
    group_no_decay = []
    for m in module.modules():
        if isinstance(m, nn.Linear):
            group_decay.append(m.weight)
            if m.bias is not None:
                group_no_decay.append(m.bias)
        elif isinstance(m, nn.modules.conv._ConvNd):
            group_decay.append(m.weight)
            if m.bias is not None:
                group_no_decay.append(m.bias)
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            if m.weight is not None:
                group_no_decay.append(m.weight)
            if m.bias is not None:
                group_no_decay.append(m.bias)

    assert len(list(module.parameters())) == len(group_decay) + len(group_no_decay)
    groups = [dict(params=group_decay), dict(params=group_no_decay, weight_decay=.0)]
    return groups


def create_optimizers(nets, cfg, bug=None):
    (net_encoder, net_decoder, crit) = nets
    optimizer_encoder = torch.optim.SGD(
        group_weight(net_encoder),
        lr=cfg.TRAIN.lr_encoder,
        momentum=cfg.TRAIN.beta1,
        weight_decay=cfg.TRAIN.weight_decay)
    optimizer_decoder = torch.optim.SGD(
        # the copy-paste slip: the decoder's optimizer is built over the encoder again
        group_weight(net_encoder if bug == "decoder_left_out_of_optimizer" else net_decoder),
        lr=cfg.TRAIN.lr_decoder,
        momentum=cfg.TRAIN.beta1,
        weight_decay=cfg.TRAIN.weight_decay)
    return (optimizer_encoder, optimizer_decoder)


def adjust_learning_rate(optimizers, cur_iter, cfg):
    scale_running_lr = ((1. - float(cur_iter) / cfg.TRAIN.max_iters) ** cfg.TRAIN.lr_pow)
    cfg.TRAIN.running_lr_encoder = cfg.TRAIN.lr_encoder * scale_running_lr
    cfg.TRAIN.running_lr_decoder = cfg.TRAIN.lr_decoder * scale_running_lr

    (optimizer_encoder, optimizer_decoder) = optimizers
    for param_group in optimizer_encoder.param_groups:
        param_group['lr'] = cfg.TRAIN.running_lr_encoder
    for param_group in optimizer_decoder.param_groups:
        param_group['lr'] = cfg.TRAIN.running_lr_decoder


def get_cfg():
    """config/ade20k-resnet18dilated-ppm_deepsup.yaml over mit_semseg/config/defaults.py, with the sizes above."""
    ns = types.SimpleNamespace
    return ns(
        DATASET=ns(root_dataset="", list_train=None, num_class=5, imgSizes=(48, 56, 64), imgMaxSize=80,
                   padding_constant=8, segm_downsampling_rate=8, random_flip=True),
        MODEL=ns(arch_encoder="resnet18dilated", arch_decoder="ppm_deepsup", fc_dim=512 // DIV, weights_encoder="",
                 weights_decoder=""),
        TRAIN=ns(batch_size_per_gpu=4, num_epoch=5, start_epoch=0, epoch_iters=20, optim="SGD", lr_encoder=0.02,
                 lr_decoder=0.02, lr_pow=0.9, beta1=0.9, weight_decay=1e-4, deep_sup_scale=0.4, fix_bn=False,
                 workers=0, disp_iter=20, seed=304))


def _build(seed, bug=None):
    cfg = get_cfg()
    if bug == "fix_bn_from_scratch":
        # TRAIN.fix_bn ("only under finetuning") switched on for a run from scratch: train() puts the module in eval
        # mode, BatchNorm normalizes with its initial running statistics and the dropout is off
        cfg.TRAIN.fix_bn = True
    cfg.TRAIN.batch_size = 1 * cfg.TRAIN.batch_size_per_gpu
    cfg.TRAIN.max_iters = cfg.TRAIN.epoch_iters * cfg.TRAIN.num_epoch
    cfg.TRAIN.running_lr_encoder = cfg.TRAIN.lr_encoder
    cfg.TRAIN.running_lr_decoder = cfg.TRAIN.lr_decoder
    torch.manual_seed(seed)

    # Network Builders
    net_encoder = ModelBuilder.build_encoder(
        arch=cfg.MODEL.arch_encoder.lower(),
        fc_dim=cfg.MODEL.fc_dim,
        weights=cfg.MODEL.weights_encoder)
    net_decoder = ModelBuilder.build_decoder(
        arch=cfg.MODEL.arch_decoder.lower(),
        fc_dim=cfg.MODEL.fc_dim,
        num_class=cfg.DATASET.num_class,
        weights=cfg.MODEL.weights_decoder)

    crit = nn.NLLLoss(ignore_index=-1)

    if cfg.MODEL.arch_decoder.endswith('deepsup'):
        segmentation_module = SegmentationModule(
            net_encoder, net_decoder, crit, cfg.TRAIN.deep_sup_scale)
    else:
        segmentation_module = SegmentationModule(
            net_encoder, net_decoder, crit)

    # Dataset and Loader
    dataset_train = TrainDataset(
        cfg.DATASET.root_dataset,
        make_scenes(seed, N_SCENES),
        cfg.DATASET,
        batch_per_gpu=cfg.TRAIN.batch_size_per_gpu,
        bug=bug)

    loader_train = torch.utils.data.DataLoader(
        dataset_train,
        batch_size=1,  # we have modified data_parallel
        shuffle=False,  # we do not use this param
        collate_fn=user_scattered_collate,
        num_workers=cfg.TRAIN.workers,
        drop_last=True)

    # create loader iterator
    iterator = iter(loader_train)

    # Set up optimizers
    nets = (net_encoder, net_decoder, crit)
    optimizers = create_optimizers(nets, cfg, bug)

    first = next(iterator)[0]
    state = {"epoch": cfg.TRAIN.start_epoch + 1, "i": 0}

    def train_step():
        segmentation_module.train(not cfg.TRAIN.fix_bn)
        i, epoch = state["i"], state["epoch"]
        # load a batch of data
        batch_data = next(iterator)[0]  # the one-GPU scatter of UserScatteredDataParallel
        segmentation_module.zero_grad()

        # adjust learning rate
        cur_iter = i + (epoch - 1) * cfg.TRAIN.epoch_iters
        adjust_learning_rate(optimizers, cur_iter, cfg)

        # forward pass
        loss, acc = segmentation_module(batch_data)
        loss = loss.mean()
        acc = acc.mean()

        # Backward
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()

        state["i"] += 1
        if state["i"] == cfg.TRAIN.epoch_iters:
            state["i"], state["epoch"] = 0, epoch + 1
        return loss.detach()

    return Program(name="csailsemseg_ppm", model=segmentation_module,
                   batch=({"feed_dict": first}, first["seg_label"]),
                   loss_fn=lambda outputs, _targets: outputs[0].mean(), optimizer=None,
                   train_step=train_step, loader=loader_train)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the random flip is applied to the image and not to its label map; half the batches pair mirrored
    # images with unmirrored labels.
    Bug("flip_image_not_label", functools.partial(_build, bug="flip_image_not_label"), "learning_ledger",
        ("TASK",)),
    # classic copy-paste slip: the decoder's optimizer is built over the encoder's parameters; the decoder (PPM and
    # classifier) never trains, the encoder takes two steps per iteration. The program's two optimizers are not
    # declared (optimizer=None), so the skipped update shows in the step.
    # first contact declared decoder.conv_last; the whole decoder is left out and its first parameter, decoder.ppm's, is
    # named (reviewed after first contact: the finding names this bug's mechanism)
    Bug("decoder_left_out_of_optimizer", functools.partial(_build, bug="decoder_left_out_of_optimizer"),
        "step_probe", ("decoder.",), kind="step.not_updated"),
    # classic: trained in eval mode (TRAIN.fix_bn, meant for finetuning, on a run from scratch).
    Bug("fix_bn_from_scratch", functools.partial(_build, bug="fix_bn_from_scratch"), "step_probe", ("encoder.bn1",)),
]
