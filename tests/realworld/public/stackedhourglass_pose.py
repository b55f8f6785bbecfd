# ruff: noqa: UP008, UP032, UP039, PLC0206, C410
"""Stacked hourglass network for human pose estimation (heatmap regression), from princeton-vl.

Source: https://github.com/princeton-vl/pytorch_stacked_hourglass
Commit: ceedc14b9b8814ba641f4a00baa5d0af153588a9
Files: ``models/posenet.py``, ``models/layers.py``, ``task/loss.py``, ``task/pose.py`` (``__config__``, ``Trainer``,
``make_network``'s ``make_train``), ``data/MPII/dp.py`` (``GenerateHeatmap``), ``train.py``.
License: BSD-3-Clause (Copyright (c) 2019, princeton-vl; full text in
LICENSES/princeton-vl-pytorch_stacked_hourglass.txt).
Domain: pose estimation (stacked hourglasses with intermediate supervision: the per-stack heatmap MSE
``HeatmapLoss`` summed over the stacks, ``Trainer`` wrapper returning predictions + loss, Adam 1e-3).

Kept as written: ``Conv``, ``Residual``, ``Hourglass``, ``PoseNet`` (``pre`` stem with its 64/128
channels, NHWC input permuted to NCHW, ``merge_preds`` / ``merge_features`` between stacks, ``calc_loss``),
``HeatmapLoss``, ``Trainer`` (the inputs split into inference keys and labels, loss computed inside in training
mode), ``DataParallel`` around the network (on the CPU it calls the module), Adam over the ``requires_grad``
parameters at lr 1e-3, and the ``phase == 'train'`` path of ``make_train`` (``torch.mean`` of the weighted
``combined_hm_loss``, zero_grad, backward, step; the lr decay at ``decay_iters``).

Deviations from the original:
- MPII (h5 annotations, JPEGs, cv2 crops and augmentation) is replaced by synthetic NHWC images made from
  ``seed``: ``num_parts`` colored 3x3 blobs on a noisy background, the keypoints their centers; the heatmaps are made
  by ``GenerateHeatmap`` (copied) at ``output_res`` = ``input_res`` / 4 as in the original.
- sizes for 2 CPU cores: ``nstack`` 2, ``inp_dim`` 16, ``oup_dim`` = ``num_parts`` 4 (config: 8, 256, 16),
  ``input_res`` 32 / ``output_res`` 8 (256 / 64), batch size 4 (16), and the hourglass depth 3 instead of 4
  (``Hourglass(4, ...)`` in ``PoseNet``: four halvings do not fit 8x8 features). ``sigma`` stays
  ``output_res / 64``.
- ``.cuda()`` / ``make_input``'s ``Variable`` are dropped (no GPU); the log file and printing are dropped.
- ``train_step`` is one ``make_train(batch_id, config, 'train', ...)`` call on the next synthetic batch; the
  ``valid`` phase (forward only, no update) and checkpointing are not run.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import DataParallel

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

BATCH = 4
HG_DEPTH = 3  # the original's 4, one level less for the 8x8 features of a 32x32 input


# models/layers.py
Pool = nn.MaxPool2d

def batchnorm(x):
    return nn.BatchNorm2d(x.size()[1])(x)

class Conv(nn.Module):
    def __init__(self, inp_dim, out_dim, kernel_size=3, stride = 1, bn = False, relu = True):
        super(Conv, self).__init__()
        self.inp_dim = inp_dim
        self.conv = nn.Conv2d(inp_dim, out_dim, kernel_size, stride, padding=(kernel_size-1)//2, bias=True)
        self.relu = None
        self.bn = None
        if relu:
            self.relu = nn.ReLU()
        if bn:
            self.bn = nn.BatchNorm2d(out_dim)

    def forward(self, x):
        assert x.size()[1] == self.inp_dim, "{} {}".format(x.size()[1], self.inp_dim)
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        if self.relu is not None:
            x = self.relu(x)
        return x

class Residual(nn.Module):
    def __init__(self, inp_dim, out_dim):
        super(Residual, self).__init__()
        self.relu = nn.ReLU()
        self.bn1 = nn.BatchNorm2d(inp_dim)
        self.conv1 = Conv(inp_dim, int(out_dim/2), 1, relu=False)
        self.bn2 = nn.BatchNorm2d(int(out_dim/2))
        self.conv2 = Conv(int(out_dim/2), int(out_dim/2), 3, relu=False)
        self.bn3 = nn.BatchNorm2d(int(out_dim/2))
        self.conv3 = Conv(int(out_dim/2), out_dim, 1, relu=False)
        self.skip_layer = Conv(inp_dim, out_dim, 1, relu=False)
        if inp_dim == out_dim:
            self.need_skip = False
        else:
            self.need_skip = True

    def forward(self, x):
        if self.need_skip:
            residual = self.skip_layer(x)
        else:
            residual = x
        out = self.bn1(x)
        out = self.relu(out)
        out = self.conv1(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn3(out)
        out = self.relu(out)
        out = self.conv3(out)
        out += residual
        return out

class Hourglass(nn.Module):
    def __init__(self, n, f, bn=None, increase=0):
        super(Hourglass, self).__init__()
        nf = f + increase
        self.up1 = Residual(f, f)
        # Lower branch
        self.pool1 = Pool(2, 2)
        self.low1 = Residual(f, nf)
        self.n = n
        # Recursive hourglass
        if self.n > 1:
            self.low2 = Hourglass(n-1, nf, bn=bn)
        else:
            self.low2 = Residual(nf, nf)
        self.low3 = Residual(nf, f)
        self.up2 = nn.Upsample(scale_factor=2, mode='nearest')

    def forward(self, x):
        up1  = self.up1(x)
        pool1 = self.pool1(x)
        low1 = self.low1(pool1)
        low2 = self.low2(low1)
        low3 = self.low3(low2)
        up2  = self.up2(low3)
        return up1 + up2


# task/loss.py
class HeatmapLoss(torch.nn.Module):
    """
    loss for detection heatmap
    """
    def __init__(self):
        super(HeatmapLoss, self).__init__()

    def forward(self, pred, gt):
        l = ((pred - gt)**2)
        l = l.mean(dim=3).mean(dim=2).mean(dim=1)
        return l ## l of dim bsize


# models/posenet.py
class Merge(nn.Module):
    def __init__(self, x_dim, y_dim):
        super(Merge, self).__init__()
        self.conv = Conv(x_dim, y_dim, 1, relu=False, bn=False)

    def forward(self, x):
        return self.conv(x)

class PoseNet(nn.Module):
    def __init__(self, nstack, inp_dim, oup_dim, bn=False, increase=0, bug=None, **kwargs):
        super(PoseNet, self).__init__()

        self.nstack = nstack
        self.pre = nn.Sequential(
            Conv(3, 64, 7, 2, bn=True, relu=True),
            Residual(64, 128),
            Pool(2, 2),
            Residual(128, 128),
            Residual(128, inp_dim)
        )

        self.hgs = nn.ModuleList( [
        nn.Sequential(
            Hourglass(HG_DEPTH, inp_dim, bn, increase),
        ) for i in range(nstack)] )

        self.features = nn.ModuleList( [
        nn.Sequential(
            Residual(inp_dim, inp_dim),
            Conv(inp_dim, inp_dim, 1, bn=True, relu=True)
        ) for i in range(nstack)] )

        self.outs = nn.ModuleList( [Conv(inp_dim, oup_dim, 1, relu=False, bn=False) for i in range(nstack)] )
        self.merge_features = nn.ModuleList( [Merge(inp_dim, inp_dim) for i in range(nstack-1)] )
        self.merge_preds = nn.ModuleList( [Merge(oup_dim, inp_dim) for i in range(nstack-1)] )
        self.nstack = nstack
        self.heatmapLoss = HeatmapLoss()
        self.bug = bug

    def forward(self, imgs):
        ## our posenet
        x = imgs.permute(0, 3, 1, 2) #x of size 1,3,inpdim,inpdim
        x = self.pre(x)
        combined_hm_preds = []
        for i in range(self.nstack):
            hg = self.hgs[i](x)
            feature = self.features[i](hg)
            preds = self.outs[i](feature)
            combined_hm_preds.append(preds)
            if i < self.nstack - 1:
                x = x + self.merge_preds[i](preds) + self.merge_features[i](feature)
        return torch.stack(combined_hm_preds, 1)

    def calc_loss(self, combined_hm_preds, heatmaps):
        combined_loss = []
        for i in range(self.nstack):
            if self.bug == "loss_on_first_stack_only":
                # classic indexing slip: the stack index fixed at 0, the later stacks get no supervision
                combined_loss.append(self.heatmapLoss(combined_hm_preds[0][:,0], heatmaps))
            else:
                combined_loss.append(self.heatmapLoss(combined_hm_preds[0][:,i], heatmaps))
        combined_loss = torch.stack(combined_loss, dim=1)
        return combined_loss


# data/MPII/dp.py
class GenerateHeatmap():
    def __init__(self, output_res, num_parts):
        self.output_res = output_res
        self.num_parts = num_parts
        sigma = self.output_res/64
        self.sigma = sigma
        size = 6*sigma + 3
        x = np.arange(0, size, 1, float)
        y = x[:, np.newaxis]
        x0, y0 = 3*sigma + 1, 3*sigma + 1
        self.g = np.exp(- ((x - x0) ** 2 + (y - y0) ** 2) / (2 * sigma ** 2))

    def __call__(self, keypoints):
        hms = np.zeros(shape = (self.num_parts, self.output_res, self.output_res), dtype = np.float32)
        sigma = self.sigma
        for p in keypoints:
            for idx, pt in enumerate(p):
                if pt[0] > 0:
                    x, y = int(pt[0]), int(pt[1])
                    if x<0 or y<0 or x>=self.output_res or y>=self.output_res:
                        continue
                    ul = int(x - 3*sigma - 1), int(y - 3*sigma - 1)
                    br = int(x + 3*sigma + 2), int(y + 3*sigma + 2)

                    c,d = max(0, -ul[0]), min(br[0], self.output_res) - ul[0]
                    a,b = max(0, -ul[1]), min(br[1], self.output_res) - ul[1]

                    cc,dd = max(0, ul[0]), min(br[0], self.output_res)
                    aa,bb = max(0, ul[1]), min(br[1], self.output_res)
                    hms[idx, aa:bb,cc:dd] = np.maximum(hms[idx, aa:bb,cc:dd], self.g[a:b,c:d])
        return hms


# task/pose.py
class Trainer(nn.Module):
    """
    The wrapper module that will behave differetly for training or testing
    inference_keys specify the inputs for inference
    """
    def __init__(self, model, inference_keys, calc_loss=None):
        super(Trainer, self).__init__()
        self.model = model
        self.keys = inference_keys
        self.calc_loss = calc_loss

    def forward(self, imgs, **inputs):
        inps = {}
        labels = {}

        for i in inputs:
            if i in self.keys:
                inps[i] = inputs[i]
            else:
                labels[i] = inputs[i]

        if not self.training:
            return self.model(imgs, **inps)
        else:
            combined_hm_preds = self.model(imgs, **inps)
            if type(combined_hm_preds)!=list and type(combined_hm_preds)!=tuple:
                combined_hm_preds = [combined_hm_preds]
            loss = self.calc_loss(**labels, combined_hm_preds=combined_hm_preds)
            return list(combined_hm_preds) + list([loss])


COLORS = np.array([[1., 0., 0.], [0., 1., 0.], [0., 0., 1.], [1., 1., 0.]], dtype=np.float32)


class SyntheticPoses:
    """NHWC images with ``num_parts`` colored blobs; keypoints in output-resolution pixels, as dp.py scales them."""

    def __init__(self, config, seed, bug=None):
        self.input_res = config['train']['input_res']
        self.output_res = config['train']['output_res']
        self.num_parts = config['inference']['num_parts']
        self.generateHeatmap = GenerateHeatmap(self.output_res, self.num_parts)
        self.rng = np.random.RandomState(seed)
        self.bug = bug

    def batch(self, n):
        r = self.input_res // self.output_res
        imgs = self.rng.uniform(0., 0.2, size=(n, self.input_res, self.input_res, 3)).astype(np.float32)
        hms = []
        for k in range(n):
            pts = self.rng.randint(1, self.output_res - 1, size=(self.num_parts, 2))
            for j, (x, y) in enumerate(pts):
                cy, cx = y * r + r // 2, x * r + r // 2
                imgs[k, cy - 2:cy + 2, cx - 2:cx + 2] = COLORS[j]
            kps = pts[:, ::-1] if self.bug == "keypoints_xy_swapped" else pts
            # classic: (row, col) handed to GenerateHeatmap, which reads (x, y): the heatmaps are transposed
            hms.append(self.generateHeatmap(kps.astype(np.float32)[None] + 0.5))
        return {'imgs': torch.from_numpy(imgs), 'heatmaps': torch.from_numpy(np.stack(hms))}


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    configs = {
        'inference': {'nstack': 2, 'inp_dim': 16, 'oup_dim': 4, 'num_parts': 4, 'increase': 0, 'keys': ['imgs']},
        'train': {'batchsize': BATCH, 'input_res': 32, 'output_res': 8, 'learning_rate': 1e-3,
                  'loss': [['combined_hm_loss', 1]], 'decay_iters': 100000, 'decay_lr': 2e-4},
    }
    train_cfg = configs['train']
    config = configs['inference']

    def calc_loss(*args, **kwargs):
        return poseNet.calc_loss(*args, **kwargs)

    ## creating new posenet
    poseNet = PoseNet(**config, bug=bug)
    forward_net = DataParallel(poseNet)
    config['net'] = Trainer(forward_net, configs['inference']['keys'], calc_loss)

    ## optimizer, experiment setup
    train_cfg['optimizer'] = torch.optim.Adam(filter(lambda p: p.requires_grad,config['net'].parameters()), train_cfg['learning_rate'])

    def make_train(batch_id, config, phase, **inputs):
        net = config['inference']['net']
        config['batch_id'] = batch_id

        net = net.train()

        result = net(inputs['imgs'], **{i:inputs[i] for i in inputs if i!='imgs'})
        num_loss = len(config['train']['loss'])

        losses = {i[0]: result[-num_loss + idx]*i[1] for idx, i in enumerate(config['train']['loss'])}

        loss = 0
        for i in losses:
            loss = loss + torch.mean(losses[i])

        if phase == 'train':
            optimizer = train_cfg['optimizer']
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        if batch_id == config['train']['decay_iters']:
            ## decrease the learning rate after decay # iterations
            for param_group in optimizer.param_groups:
                param_group['lr'] = config['train']['decay_lr']

        return loss.detach()

    data = SyntheticPoses(configs, seed, bug=bug)
    batch = data.batch(BATCH)
    state = {"batch_id": 0}

    def train_step():
        datas = data.batch(BATCH)
        out = make_train(state["batch_id"], configs, 'train', **datas)
        state["batch_id"] += 1
        return out

    return Program(name="stackedhourglass_pose", model=config['net'], batch=(batch,),
                   loss_fn=lambda result, _t: torch.mean(result[-1]), optimizer=train_cfg['optimizer'],
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic indexing slip in calc_loss: every term takes stack 0, the last stack's head never gets a gradient.
    Bug("loss_on_first_stack_only", functools.partial(_build, bug="loss_on_first_stack_only"), "reachability",
        ("outs.1",)),
    # classic: keypoints handed to the heatmap generator as (row, col) where it reads (x, y): transposed targets.
    Bug("keypoints_xy_swapped", functools.partial(_build, bug="keypoints_xy_swapped"), "learning_ledger",
        ("TASK",)),
]
