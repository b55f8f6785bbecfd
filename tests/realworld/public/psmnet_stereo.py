# ruff: noqa: PLR0402, UP008, SIM114
"""PSMNet (Pyramid Stereo Matching Network) trained for disparity on SceneFlow-style stereo pairs, from
JiaRenChang/PSMNet: a shared feature extractor (residual CNN + spatial pyramid pooling), a concatenation cost volume
over disparities, 3D convolutions, soft-argmin disparity regression, smooth-L1 on the pixels whose true disparity is
below ``maxdisp``, Adam lr 1e-3.

Source: https://github.com/JiaRenChang/PSMNet
Commit: 87ac9093afbf6545c093bd9d26c5ffd66e49a7b8
Files: ``main.py``, ``models/basic.py``, ``models/submodule.py``, ``dataloader/SecenFlowLoader.py``,
``dataloader/preprocess.py``
License: MIT (Copyright (c) 2018 Jia-Ren Chang; full text in LICENSES/JiaRenChang-PSMNet.txt)
Domain: vision, stereo depth (disparity regression from a rectified image pair)

Kept as written: ``submodule.py``'s ``convbn``, ``convbn_3d``, ``BasicBlock``, ``disparityregression`` and
``feature_extraction`` (first convolutions, four residual stages, four average-pool branches upsampled bilinearly,
concatenated with the raw and skip features, ``lastconv``); ``basic.py``'s ``PSMNet`` (the cost volume filled
disparity by disparity, ``dres0``-``dres4`` with residual adds, ``classify``, trilinear upsampling to ``maxdisp``,
softmax over disparities, regression) and its initialization; ``main.py``'s ``train`` (``mask = disp_true <
args.maxdisp``, zero_grad, the ``basic`` branch's ``smooth_l1_loss(output[mask], disp_true[mask])``, backward, step),
``test`` (padding to a multiple of 16, L1 end-point error under ``mask = disp_true < 192``) and ``Adam(lr=0.001,
betas=(0.9, 0.999))`` with ``adjust_learning_rate``'s constant 0.001.

Deviations from the original:
- ``--model basic`` (one of main.py's two models) instead of the default ``stackhourglass``;
- sizes for 2 CPU cores: crops 256x512 -> 32x64; ``maxdisp`` 192 -> 16 (the test's mask keeps its 192);
  every channel width halved (feature extractor 32/64/128/128 -> 16/32/64/64, SPP branches 32 -> 16, ``lastconv``
  320 -> 128 -> 32 as 160 -> 64 -> 16, the 3D convolutions 64/32 -> 32/16); residual stages of 3/16/3/3 blocks ->
  1/2/1/1; the SPP branches' pools 64/32/16/8 -> 8/4/2/1 (the same fractions
  of the quarter-resolution feature map); batch 12 -> 4, test batch 8 -> 4;
- data: SceneFlow's PFM files are not here: each pair is synthetic, made from ``seed``: a smooth random texture is
  the right image and the left image samples it at ``x - d(x)``, with ``d`` a background plane plus a
  fronto-parallel rectangle (integer disparities 0-12); ``get_transform``'s ImageNet normalization is applied as
  written; the random crop is the whole (already small) image;
- CUDA/DataParallel, checkpoints and prints are dropped; ``Variable(..., volatile=...).cuda()`` is a plain zero
  tensor, ``self.maxdisp/4`` an integer division, ``F.upsample`` is ``F.interpolate``, the implicit-dim
  ``F.softmax`` is written with the dim it picks (1), ``size_average=True`` is the default mean;
- one ``train_step`` is one batch of main()'s loop (``train(imgL, imgR, disp_L)``); ``eval_fn`` is ``test`` over
  the test loader;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
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
from _api import Bug, Program

H, W = 32, 64
MAXDISP = 16  # (port) 192
BATCH = 4  # (port) 12


# models/submodule.py
def convbn(in_planes, out_planes, kernel_size, stride, pad, dilation):

    return nn.Sequential(nn.Conv2d(in_planes, out_planes, kernel_size=kernel_size, stride=stride, padding=dilation if dilation > 1 else pad, dilation = dilation, bias=False),
                         nn.BatchNorm2d(out_planes))


def convbn_3d(in_planes, out_planes, kernel_size, stride, pad):

    return nn.Sequential(nn.Conv3d(in_planes, out_planes, kernel_size=kernel_size, padding=pad, stride=stride,bias=False),
                         nn.BatchNorm3d(out_planes))


class BasicBlock(nn.Module):
    expansion = 1
    def __init__(self, inplanes, planes, stride, downsample, pad, dilation):
        super(BasicBlock, self).__init__()

        self.conv1 = nn.Sequential(convbn(inplanes, planes, 3, stride, pad, dilation),
                                   nn.ReLU(inplace=True))

        self.conv2 = convbn(planes, planes, 3, 1, pad, dilation)

        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)

        if self.downsample is not None:
            x = self.downsample(x)

        out += x

        return out


class disparityregression(nn.Module):
    def __init__(self, maxdisp):
        super(disparityregression, self).__init__()
        self.disp = torch.Tensor(np.reshape(np.array(range(maxdisp)),[1, maxdisp,1,1]))

    def forward(self, x):
        out = torch.sum(x*self.disp.data,1, keepdim=True)
        return out


class feature_extraction(nn.Module):
    def __init__(self):
        super(feature_extraction, self).__init__()
        self.inplanes = 16  # (port) 32
        self.firstconv = nn.Sequential(convbn(3, 16, 3, 2, 1, 1),  # (port) widths halved
                                       nn.ReLU(inplace=True),
                                       convbn(16, 16, 3, 1, 1, 1),
                                       nn.ReLU(inplace=True),
                                       convbn(16, 16, 3, 1, 1, 1),
                                       nn.ReLU(inplace=True))

        self.layer1 = self._make_layer(BasicBlock, 16, 1, 1,1,1)  # (port) 3 blocks
        self.layer2 = self._make_layer(BasicBlock, 32, 2, 2,1,1)  # (port) 16 blocks
        self.layer3 = self._make_layer(BasicBlock, 64, 1, 1,1,1)  # (port) 3 blocks
        self.layer4 = self._make_layer(BasicBlock, 64, 1, 1,1,2)  # (port) 3 blocks

        self.branch1 = nn.Sequential(nn.AvgPool2d((8, 8), stride=(8,8)),  # (port) 64
                                     convbn(64, 16, 1, 1, 0, 1),
                                     nn.ReLU(inplace=True))

        self.branch2 = nn.Sequential(nn.AvgPool2d((4, 4), stride=(4,4)),  # (port) 32
                                     convbn(64, 16, 1, 1, 0, 1),
                                     nn.ReLU(inplace=True))

        self.branch3 = nn.Sequential(nn.AvgPool2d((2, 2), stride=(2,2)),  # (port) 16
                                     convbn(64, 16, 1, 1, 0, 1),
                                     nn.ReLU(inplace=True))

        self.branch4 = nn.Sequential(nn.AvgPool2d((1, 1), stride=(1,1)),  # (port) 8
                                     convbn(64, 16, 1, 1, 0, 1),
                                     nn.ReLU(inplace=True))

        self.lastconv = nn.Sequential(convbn(160, 64, 3, 1, 1, 1),
                                      nn.ReLU(inplace=True),
                                      nn.Conv2d(64, 16, kernel_size=1, padding=0, stride = 1, bias=False))

    def _make_layer(self, block, planes, blocks, stride, pad, dilation):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
           downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),)

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample, pad, dilation))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes,1,None,pad,dilation))

        return nn.Sequential(*layers)

    def forward(self, x):
        output      = self.firstconv(x)
        output      = self.layer1(output)
        output_raw  = self.layer2(output)
        output      = self.layer3(output_raw)
        output_skip = self.layer4(output)


        output_branch1 = self.branch1(output_skip)
        output_branch1 = F.interpolate(output_branch1, (output_skip.size()[2],output_skip.size()[3]),mode='bilinear')

        output_branch2 = self.branch2(output_skip)
        output_branch2 = F.interpolate(output_branch2, (output_skip.size()[2],output_skip.size()[3]),mode='bilinear')

        output_branch3 = self.branch3(output_skip)
        output_branch3 = F.interpolate(output_branch3, (output_skip.size()[2],output_skip.size()[3]),mode='bilinear')

        output_branch4 = self.branch4(output_skip)
        output_branch4 = F.interpolate(output_branch4, (output_skip.size()[2],output_skip.size()[3]),mode='bilinear')

        output_feature = torch.cat((output_raw, output_skip, output_branch4, output_branch3, output_branch2, output_branch1), 1)
        output_feature = self.lastconv(output_feature)

        return output_feature


# models/basic.py
class PSMNet(nn.Module):
    def __init__(self, maxdisp, bug=None):
        super(PSMNet, self).__init__()
        self.bug = bug
        self.maxdisp = maxdisp
        self.feature_extraction = feature_extraction()

########
        self.dres0 = nn.Sequential(convbn_3d(32, 16, 3, 1, 1),
                                     nn.ReLU(inplace=True),
                                     convbn_3d(16, 16, 3, 1, 1),
                                     nn.ReLU(inplace=True))

        self.dres1 = nn.Sequential(convbn_3d(16, 16, 3, 1, 1),
                                   nn.ReLU(inplace=True),
                                   convbn_3d(16, 16, 3, 1, 1))

        self.dres2 = nn.Sequential(convbn_3d(16, 16, 3, 1, 1),
                                   nn.ReLU(inplace=True),
                                   convbn_3d(16, 16, 3, 1, 1))

        self.dres3 = nn.Sequential(convbn_3d(16, 16, 3, 1, 1),
                                   nn.ReLU(inplace=True),
                                   convbn_3d(16, 16, 3, 1, 1))

        self.dres4 = nn.Sequential(convbn_3d(16, 16, 3, 1, 1),
                                   nn.ReLU(inplace=True),
                                   convbn_3d(16, 16, 3, 1, 1))

        self.classify = nn.Sequential(convbn_3d(16, 16, 3, 1, 1),
                                      nn.ReLU(inplace=True),
                                      nn.Conv3d(16, 1, kernel_size=3, padding=1, stride=1,bias=False))


        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.Conv3d):
                n = m.kernel_size[0] * m.kernel_size[1]*m.kernel_size[2] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm3d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()


    def forward(self, left, right):

        refimg_fea     = self.feature_extraction(left)
        targetimg_fea  = self.feature_extraction(right)

        #matching
        cost = torch.FloatTensor(refimg_fea.size()[0], refimg_fea.size()[1]*2, self.maxdisp//4,  refimg_fea.size()[2],  refimg_fea.size()[3]).zero_()

        for i in range(self.maxdisp//4):
            if i > 0 :
             cost[:, :refimg_fea.size()[1], i, :,i:]   = refimg_fea[:,:,:,i:]
             if self.bug == "cost_volume_shift_reversed":
                 cost[:, refimg_fea.size()[1]:, i, :,i:] = targetimg_fea[:,:,:,i:]
             else:
                 cost[:, refimg_fea.size()[1]:, i, :,i:] = targetimg_fea[:,:,:,:-i]
            else:
             cost[:, :refimg_fea.size()[1], i, :,:]   = refimg_fea
             cost[:, refimg_fea.size()[1]:, i, :,:]   = targetimg_fea
        cost = cost.contiguous()

        cost0 = self.dres0(cost)
        cost0 = self.dres1(cost0) + cost0
        cost0 = self.dres2(cost0) + cost0
        cost0 = self.dres3(cost0) + cost0
        cost0 = self.dres4(cost0) + cost0

        cost = self.classify(cost0)
        cost = F.interpolate(cost, [self.maxdisp,left.size()[2],left.size()[3]], mode='trilinear')
        cost = torch.squeeze(cost,1)
        pred = F.softmax(cost, dim=1)
        pred = disparityregression(self.maxdisp)(pred)

        return pred


# (port) synthetic SceneFlow-style pairs
IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class SyntheticStereo(torch.utils.data.Dataset):
    """Right image: a smooth random colour texture; left image: the right one sampled at ``x - d(x)``; ``d``: a
    background disparity plus a rectangle at a larger disparity (integers 0-12)."""

    def __init__(self, seed, n):
        gen = torch.Generator().manual_seed(seed)
        lefts, rights, disps = [], [], []
        xs = torch.arange(W)
        for _ in range(n):
            coarse = torch.rand(1, 3, H // 4, (W + 16) // 4, generator=gen)
            fine = torch.rand(1, 3, H, W + 16, generator=gen)
            tex = (0.7 * F.interpolate(coarse, size=(H, W + 16), mode='bilinear', align_corners=False)
                   + 0.3 * fine)[0]
            d = torch.full((H, W), float(torch.randint(0, 5, (), generator=gen)))
            y0 = int(torch.randint(0, H // 2, (), generator=gen))
            x0 = int(torch.randint(0, W // 2, (), generator=gen))
            d[y0:y0 + H // 2, x0:x0 + W // 2] = float(torch.randint(6, 13, (), generator=gen))
            right = tex[:, :, 16:]
            idx = (xs.view(1, W) - d.long() + 16).clamp(0, W + 15)  # left(x) = right(x - d)
            left = torch.gather(tex, 2, idx.unsqueeze(0).expand(3, H, W))
            lefts.append((left - IMAGENET_MEAN) / IMAGENET_STD)
            rights.append((right - IMAGENET_MEAN) / IMAGENET_STD)
            disps.append(d)
        self.left, self.right, self.disp_L = torch.stack(lefts), torch.stack(rights), torch.stack(disps)

    def __getitem__(self, index):
        return self.left[index], self.right[index], self.disp_L[index]

    def __len__(self):
        return len(self.left)


def _build(seed, bug=None):
    torch.manual_seed(seed)

    maxdisp = MAXDISP
    TrainImgLoader = torch.utils.data.DataLoader(
        SyntheticStereo(seed, 64),
        batch_size=BATCH, shuffle=True, num_workers=0, drop_last=False,
        generator=torch.Generator().manual_seed(seed))

    TestImgLoader = torch.utils.data.DataLoader(
        SyntheticStereo(seed + 1000, 8),
        batch_size=4, shuffle=False, num_workers=0, drop_last=False)

    model = PSMNet(maxdisp, bug=bug)

    optimizer = torch.optim.Adam(model.parameters(), lr=0.001, betas=(0.9, 0.999))

    def train(imgL, imgR, disp_L):
        model.train()

        disp_true = disp_L

        #---------
        mask = disp_true < maxdisp
        mask.detach_()
        #----
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        if bug == "images_swapped":
            output = model(imgR, imgL)
        else:
            output = model(imgL,imgR)
        output = torch.squeeze(output,1)
        loss = F.smooth_l1_loss(output[mask], disp_true[mask])

        loss.backward()
        optimizer.step()

        return loss.data

    def test(imgL, imgR, disp_true):

        model.eval()

        #---------
        mask = disp_true < 192
        #----

        if imgL.shape[2] % 16 != 0:
            times = imgL.shape[2]//16
            top_pad = (times+1)*16 -imgL.shape[2]
        else:
            top_pad = 0

        if imgL.shape[3] % 16 != 0:
            times = imgL.shape[3]//16
            right_pad = (times+1)*16-imgL.shape[3]
        else:
            right_pad = 0

        imgL = F.pad(imgL,(0,right_pad, top_pad,0))
        imgR = F.pad(imgR,(0,right_pad, top_pad,0))

        with torch.no_grad():
            output3 = model(imgL,imgR)
            output3 = torch.squeeze(output3)

        if top_pad !=0:
            img = output3[:,top_pad:,:]
        else:
            img = output3

        if len(disp_true[mask])==0:
           loss = 0
        else:
           loss = F.l1_loss(img[mask],disp_true[mask]) #torch.mean(torch.abs(img[mask]-disp_true[mask]))  # end-point-error

        return loss.data.cpu()

    state = {"it": iter(TrainImgLoader)}

    def train_step():
        try:
            imgL_crop, imgR_crop, disp_crop_L = next(state["it"])
        except StopIteration:
            state["it"] = iter(TrainImgLoader)
            imgL_crop, imgR_crop, disp_crop_L = next(state["it"])
        return train(imgL_crop, imgR_crop, disp_crop_L)

    def eval_fn(m, batch):
        total_test_loss = 0
        for imgL, imgR, disp_L in TestImgLoader:
            total_test_loss += test(imgL, imgR, disp_L)
        model.train()
        return float(total_test_loss / len(TestImgLoader))

    def loss_fn(output, disp_true):
        output = torch.squeeze(output, 1)
        mask = disp_true < maxdisp
        return F.smooth_l1_loss(output[mask], disp_true[mask])

    ds = TrainImgLoader.dataset
    batch = ((ds.left[:BATCH], ds.right[:BATCH]), ds.disp_L[:BATCH])
    return Program(name="psmnet_stereo", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=TrainImgLoader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the pair fed as (right, left): the cost volume matches the wrong way and the disparity cannot be read off
    # (classic stereo slip).
    Bug("images_swapped", functools.partial(_build, bug="images_swapped"), "learning_ledger", ("TASK",)),
    # the target features taken at x instead of x - i in the cost volume: every disparity plane compares the same
    # columns (classic indexing slip).
    Bug("cost_volume_shift_reversed", functools.partial(_build, bug="cost_volume_shift_reversed"),
        "learning_ledger", ("DEPENDENCY",)),
    # optimizer.zero_grad() left out of train(): gradients accumulate across batches (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
