"""Gated axial-attention UNet of jeya-maria-jose/Medical-Transformer (MedT): ``lib/models/axialnet.py``'s ``gated``
(``ResAxialAttentionUNet`` with ``AxialBlock_dynamic``: a conv stem, four stages of axial-attention blocks that attend
along the height then the width with relative position embeddings for query, key and value, their gates ``f_qr``,
``f_kr``, ``f_sve``, ``f_sv`` fixed by ``requires_grad=False`` as written, BatchNorm on qkv, similarity and output;
a conv decoder with bilinear upsampling and additive skips, a 1x1 head to two classes), trained by ``train.py`` as the
README's command (``--modelname gatedaxialunet --batch_size 4 --learning_rate 0.001 --gray no``, batch 2 here):
``LogNLLLoss``
(``metrics.py``: ``cross_entropy`` on the logits against the label-encoded mask), Adam(lr 1e-3, weight_decay 1e-5),
``zero_grad`` / ``backward`` / ``step`` per batch; every ``save_freq`` epochs a pass over the validation set that, as
written, neither calls ``model.eval()`` nor disables gradients. ``utils.py``'s ``ImageToImage2D`` thresholds the mask
at 127 to {0, 1}; ``JointTransform2D`` (crop None, ``p_flip`` 0.5, no colour jitter, ``long_mask``) flips image and
mask together and returns the image as a [0, 1] tensor and the mask as a long tensor.

Source: https://github.com/jeya-maria-jose/Medical-Transformer
Commit: 62f40a530c912d6b1cf297a52af7d22834ad6640
Files: train.py, lib/models/axialnet.py, lib/models/utils.py, metrics.py, utils.py, README.md
License: MIT (LICENSES/jeya-maria-jose-Medical-Transformer.txt)
Domain: medical image segmentation (axial-attention transformer UNet, two-class pixel cross-entropy)

Deviations from the original:
- sizes: ``--imgsize`` 128 -> 32 (the attention kernel sizes follow: 16, 16, 8, 4; the decoder needs 32 at least);
  the model's own width factor ``s = 0.125`` is kept, the blocks per stage [1, 2, 4, 1] -> [1, 1, 1, 1];
  batch size 4 -> 2; 64 training images and 8 validation images; ``save_freq`` 10 kept;
- data: the ultrasound / GlaS / MoNuSeg folders are replaced by synthetic "glands" made from ``seed``: textured
  ellipses brighter than a noisy background, the mask 255 inside (thresholded at 127 as written); cv2, PIL and
  torchvision are not available, so ``cv2.imread``, ``to_pil_image``, ``hflip`` and ``to_tensor`` are written out
  in plain torch/numpy; ``np.random`` (the flip) is a ``np.random.RandomState(seed)``;
- ``.cuda()``/``Variable``, the prints, ``cv2.imwrite`` of the predictions and ``torch.save`` are dropped; the
  thresholded numpy copies of the outputs (``yHaT``/``yval``, unused by the loss) are kept;
- one ``train_step`` is one batch of the epoch loop; when the loader is exhausted the epoch ends as in ``train.py``
  (the ``epoch == 10`` re-enabling of ``requires_grad`` on every parameter, the validation pass every ``save_freq``
  epochs); ``eval_fn`` is the pixel accuracy of the argmax on a batch.
"""
# ruff: noqa: UP008, UP031, UP032, F841, PLR0402, RUF012, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.loss import _WeightedLoss
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

LAYERS = [1, 1, 1, 1]
IMGSIZE, BATCH_SIZE, LEARNING_RATE, SAVE_FREQ, N_TRAIN, N_VAL = 32, 2, 1e-3, 10, 64, 8


# ---- lib/models/utils.py + lib/models/axialnet.py ------------------------------------------------------------

class qkv_transform(nn.Conv1d):
    """Conv1d for qkv_transform"""


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class AxialAttention_dynamic(nn.Module):
    def __init__(self, in_planes, out_planes, groups=8, kernel_size=56,
                 stride=1, bias=False, width=False):
        assert (in_planes % groups == 0) and (out_planes % groups == 0)
        super(AxialAttention_dynamic, self).__init__()
        self.in_planes = in_planes
        self.out_planes = out_planes
        self.groups = groups
        self.group_planes = out_planes // groups
        self.kernel_size = kernel_size
        self.stride = stride
        self.bias = bias
        self.width = width

        # Multi-head self attention
        self.qkv_transform = qkv_transform(in_planes, out_planes * 2, kernel_size=1, stride=1,
                                           padding=0, bias=False)
        self.bn_qkv = nn.BatchNorm1d(out_planes * 2)
        self.bn_similarity = nn.BatchNorm2d(groups * 3)
        self.bn_output = nn.BatchNorm1d(out_planes * 2)

        # Priority on encoding

        ## Initial values

        self.f_qr = nn.Parameter(torch.tensor(0.1),  requires_grad=False)
        self.f_kr = nn.Parameter(torch.tensor(0.1),  requires_grad=False)
        self.f_sve = nn.Parameter(torch.tensor(0.1),  requires_grad=False)
        self.f_sv = nn.Parameter(torch.tensor(1.0),  requires_grad=False)


        # Position embedding
        self.relative = nn.Parameter(torch.randn(self.group_planes * 2, kernel_size * 2 - 1), requires_grad=True)
        query_index = torch.arange(kernel_size).unsqueeze(0)
        key_index = torch.arange(kernel_size).unsqueeze(1)
        relative_index = key_index - query_index + kernel_size - 1
        self.register_buffer('flatten_index', relative_index.view(-1))
        if stride > 1:
            self.pooling = nn.AvgPool2d(stride, stride=stride)

        self.reset_parameters()

    def forward(self, x):
        if self.width:
            x = x.permute(0, 2, 1, 3)
        else:
            x = x.permute(0, 3, 1, 2)  # N, W, C, H
        N, W, C, H = x.shape
        x = x.contiguous().view(N * W, C, H)

        # Transformations
        qkv = self.bn_qkv(self.qkv_transform(x))
        q, k, v = torch.split(qkv.reshape(N * W, self.groups, self.group_planes * 2, H), [self.group_planes // 2, self.group_planes // 2, self.group_planes], dim=2)

        # Calculate position embedding
        all_embeddings = torch.index_select(self.relative, 1, self.flatten_index).view(self.group_planes * 2, self.kernel_size, self.kernel_size)
        q_embedding, k_embedding, v_embedding = torch.split(all_embeddings, [self.group_planes // 2, self.group_planes // 2, self.group_planes], dim=0)
        qr = torch.einsum('bgci,cij->bgij', q, q_embedding)
        kr = torch.einsum('bgci,cij->bgij', k, k_embedding).transpose(2, 3)
        qk = torch.einsum('bgci, bgcj->bgij', q, k)


        # multiply by factors
        qr = torch.mul(qr, self.f_qr)
        kr = torch.mul(kr, self.f_kr)

        stacked_similarity = torch.cat([qk, qr, kr], dim=1)
        stacked_similarity = self.bn_similarity(stacked_similarity).view(N * W, 3, self.groups, H, H).sum(dim=1)
        #stacked_similarity = self.bn_qr(qr) + self.bn_kr(kr) + self.bn_qk(qk)
        # (N, groups, H, H, W)
        similarity = F.softmax(stacked_similarity, dim=3)
        sv = torch.einsum('bgij,bgcj->bgci', similarity, v)
        sve = torch.einsum('bgij,cij->bgci', similarity, v_embedding)

        # multiply by factors
        sv = torch.mul(sv, self.f_sv)
        sve = torch.mul(sve, self.f_sve)

        stacked_output = torch.cat([sv, sve], dim=-1).view(N * W, self.out_planes * 2, H)
        output = self.bn_output(stacked_output).view(N, W, self.out_planes, 2, H).sum(dim=-2)

        if self.width:
            output = output.permute(0, 2, 1, 3)
        else:
            output = output.permute(0, 2, 3, 1)

        if self.stride > 1:
            output = self.pooling(output)

        return output
    def reset_parameters(self):
        self.qkv_transform.weight.data.normal_(0, math.sqrt(1. / self.in_planes))
        #nn.init.uniform_(self.relative, -0.1, 0.1)
        nn.init.normal_(self.relative, 0., math.sqrt(1. / self.group_planes))

class AxialBlock_dynamic(nn.Module):
    expansion = 2

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1,
                 base_width=64, dilation=1, norm_layer=None, kernel_size=56):
        super(AxialBlock_dynamic, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        width = int(planes * (base_width / 64.))
        # Both self.conv2 and self.downsample layers downsample the input when stride != 1
        self.conv_down = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.hight_block = AxialAttention_dynamic(width, width, groups=groups, kernel_size=kernel_size)
        self.width_block = AxialAttention_dynamic(width, width, groups=groups, kernel_size=kernel_size, stride=stride, width=True)
        self.conv_up = conv1x1(width, planes * self.expansion)
        self.bn2 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x

        out = self.conv_down(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.hight_block(out)
        out = self.width_block(out)
        out = self.relu(out)

        out = self.conv_up(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out

class ResAxialAttentionUNet(nn.Module):

    def __init__(self, block, layers, num_classes=2, zero_init_residual=True,
                 groups=8, width_per_group=64, replace_stride_with_dilation=None,
                 norm_layer=None, s=0.125, img_size = 128,imgchan = 3, bug=None):
        super(ResAxialAttentionUNet, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer
        self.bug = bug

        self.inplanes = int(64 * s)
        self.dilation = 1
        if replace_stride_with_dilation is None:
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError("replace_stride_with_dilation should be None "
                             "or a 3-element tuple, got {}".format(replace_stride_with_dilation))
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(imgchan, self.inplanes, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.conv2 = nn.Conv2d(self.inplanes, 128, kernel_size=3, stride=1, padding=1, bias=False)
        self.conv3 = nn.Conv2d(128, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = norm_layer(self.inplanes)
        self.bn2 = norm_layer(128)
        self.bn3 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        # self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, int(128 * s), layers[0], kernel_size= (img_size//2))
        self.layer2 = self._make_layer(block, int(256 * s), layers[1], stride=2, kernel_size=(img_size//2),
                                       dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, int(512 * s), layers[2], stride=2, kernel_size=(img_size//4),
                                       dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, int(1024 * s), layers[3], stride=2, kernel_size=(img_size//8),
                                       dilate=replace_stride_with_dilation[2])

        # Decoder
        self.decoder1 = nn.Conv2d(int(1024 *2*s)      ,        int(1024*2*s), kernel_size=3, stride=2, padding=1)
        self.decoder2 = nn.Conv2d(int(1024  *2*s)     , int(1024*s), kernel_size=3, stride=1, padding=1)
        self.decoder3 = nn.Conv2d(int(1024*s),  int(512*s), kernel_size=3, stride=1, padding=1)
        self.decoder4 = nn.Conv2d(int(512*s) ,  int(256*s), kernel_size=3, stride=1, padding=1)
        self.decoder5 = nn.Conv2d(int(256*s) , int(128*s) , kernel_size=3, stride=1, padding=1)
        self.adjust   = nn.Conv2d(int(128*s) , num_classes, kernel_size=1, stride=1, padding=0)
        self.soft     = nn.Softmax(dim=1)


    def _make_layer(self, block, planes, blocks, kernel_size=56, stride=1, dilate=False):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample, groups=self.groups,
                            base_width=self.base_width, dilation=previous_dilation,
                            norm_layer=norm_layer, kernel_size=kernel_size))
        self.inplanes = planes * block.expansion
        if stride != 1:
            kernel_size = kernel_size // 2

        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups,
                                base_width=self.base_width, dilation=self.dilation,
                                norm_layer=norm_layer, kernel_size=kernel_size))

        return nn.Sequential(*layers)

    def _forward_impl(self, x):

        # AxialAttention Encoder
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.conv2(x)
        x = self.bn2(x)
        x = self.relu(x)
        x = self.conv3(x)
        x = self.bn3(x)
        x = self.relu(x)

        x1 = self.layer1(x)

        x2 = self.layer2(x1)
        x3 = self.layer3(x2)
        x4 = self.layer4(x3)

        x = F.relu(F.interpolate(self.decoder1(x4), scale_factor=(2,2), mode ='bilinear'))
        x = torch.add(x, x4)
        x = F.relu(F.interpolate(self.decoder2(x) , scale_factor=(2,2), mode ='bilinear'))
        x = torch.add(x, x3)
        x = F.relu(F.interpolate(self.decoder3(x) , scale_factor=(2,2), mode ='bilinear'))
        x = torch.add(x, x2)
        x = F.relu(F.interpolate(self.decoder4(x) , scale_factor=(2,2), mode ='bilinear'))
        x = torch.add(x, x1)
        x = F.relu(F.interpolate(self.decoder5(x) , scale_factor=(2,2), mode ='bilinear'))
        x = self.adjust(F.relu(x))
        if self.bug == "softmax_output_into_cross_entropy":
            x = self.soft(x)  # the unused self.soft applied: cross_entropy then normalizes probabilities
        return x

    def forward(self, x):
        return self._forward_impl(x)

def gated(pretrained=False, **kwargs):
    model = ResAxialAttentionUNet(AxialBlock_dynamic, LAYERS, s= 0.125, **kwargs)  # [1, 2, 4, 1] in axialnet.py
    return model


# ---- metrics.py ----------------------------------------------------------------------------------------------

class LogNLLLoss(_WeightedLoss):
    __constants__ = ['weight', 'reduction', 'ignore_index']

    def __init__(self, weight=None, size_average=None, reduce=None, reduction=None,
                 ignore_index=-100):
        super(LogNLLLoss, self).__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, y_input, y_target):
        # y_input = torch.log(y_input + EPSILON)
        return F.cross_entropy(y_input, y_target, weight=self.weight,
                               ignore_index=self.ignore_index)


# ---- utils.py: synthetic glands, JointTransform2D and ImageToImage2D in plain torch --------------------------

def synthetic_glands(rng, n):
    """uint8 HWC BGR images and uint8 HW masks (0 / 255), as ``cv2.imread`` gives them."""
    yy, xx = np.mgrid[0:IMGSIZE, 0:IMGSIZE].astype(np.float32)
    images, masks = [], []
    for _ in range(n):
        inside = np.zeros((IMGSIZE, IMGSIZE), bool)
        for _ in range(rng.randint(1, 4)):
            cy, cx = rng.uniform(4, IMGSIZE - 4, 2)
            ry, rx = rng.uniform(3, 8, 2)
            inside |= ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        texture = 20 * np.sin(0.9 * xx + rng.uniform(0, 6)) * np.sin(0.7 * yy)
        base = np.where(inside, 170 + texture, 80) + rng.normal(0, 18, (IMGSIZE, IMGSIZE))
        img = np.stack([base * 0.9, base * 0.7, base], axis=2)
        images.append(np.clip(img, 0, 255).astype(np.uint8))
        masks.append(np.where(inside, 255, 0).astype(np.uint8))
    return images, masks


def to_long_tensor(pic):
    # handle numpy array
    img = torch.from_numpy(np.array(pic, np.uint8))
    # backward compatibility
    return img.long()


class JointTransform2D:
    def __init__(self, rng, crop=(32, 32), p_flip=0.5, color_jitter_params=None, long_mask=False, bug=None):
        self.rng = rng
        self.crop = crop
        self.p_flip = p_flip
        self.long_mask = long_mask
        self.bug = bug

    def __call__(self, image, mask):
        # transforming to PIL image: HWC uint8 and HW uint8 stand in for the PIL images
        mask = mask[:, :, 0]

        if self.rng.rand() < self.p_flip:
            if self.bug == "mask_not_flipped":
                image = image[:, ::-1]
            else:
                image, mask = image[:, ::-1], mask[:, ::-1]

        # transforming to tensor
        image = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float() / 255.0  # F.to_tensor
        if not self.long_mask:
            mask = torch.from_numpy(np.ascontiguousarray(mask))[None].float() / 255.0
        else:
            mask = to_long_tensor(np.ascontiguousarray(mask))

        return image, mask


class ImageToImage2D(Dataset):
    def __init__(self, images, masks, joint_transform=None):
        self.images, self.masks = images, masks  # the img/ and labelcol/ folders
        self.joint_transform = joint_transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        image_filename = '%s.png' % str(idx + 1).zfill(3)
        image = self.images[idx].copy()
        mask = self.masks[idx].copy()

        mask[mask<=127] = 0
        mask[mask>127] = 1
        # correct dimensions if needed
        mask = mask[:, :, None]  # correct_dims(image, mask)

        if self.joint_transform:
            image, mask = self.joint_transform(image, mask)

        return image, mask, image_filename


class ImagesMasks:
    """The loop's ``X_batch, y_batch, *rest`` over the train loader."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for X_batch, y_batch, *rest in self.loader:
            yield X_batch, y_batch


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    rng = np.random.RandomState(seed)
    train_images, train_masks = synthetic_glands(rng, N_TRAIN)
    val_images, val_masks = synthetic_glands(rng, N_VAL)
    tf_train = JointTransform2D(rng, crop=None, p_flip=0.5, color_jitter_params=None, long_mask=True, bug=bug)
    tf_val = JointTransform2D(rng, crop=None, p_flip=0, color_jitter_params=None, long_mask=True)
    train_dataset = ImageToImage2D(train_images, train_masks, tf_train)
    val_dataset = ImageToImage2D(val_images, val_masks, tf_val)
    dataloader = DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=True,
                            generator=torch.Generator().manual_seed(seed))
    valloader = DataLoader(val_dataset, 1, shuffle=True, generator=torch.Generator().manual_seed(seed + 1))

    torch.manual_seed(seed)
    model = gated(img_size = IMGSIZE, imgchan = 3, bug=bug)

    criterion = LogNLLLoss()
    optimizer = torch.optim.Adam(list(model.parameters()), lr=LEARNING_RATE,
                                 weight_decay=1e-5)

    state = {"it": None, "epoch": 0}

    def end_of_epoch(epoch):
        if epoch == 10:
            for param in model.parameters():
                param.requires_grad =True
        if (epoch % SAVE_FREQ) ==0:
            for batch_idx, (X_batch, y_batch, *rest) in enumerate(valloader):
                y_out = model(X_batch)
                tmp2 = y_batch.detach().cpu().numpy()
                tmp = y_out.detach().cpu().numpy()
                tmp[tmp>=0.5] = 1
                tmp[tmp<0.5] = 0

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                end_of_epoch(state["epoch"])
                state["epoch"] += 1
            state["it"] = iter(dataloader)
            return next(state["it"])

    def train_step():
        X_batch, y_batch, *rest = next_batch()
        # ===================forward=====================
        output = model(X_batch)
        tmp2 = y_batch.detach().cpu().numpy()
        tmp = output.detach().cpu().numpy()
        tmp[tmp>=0.5] = 1
        tmp[tmp<0.5] = 0
        tmp2[tmp2>0] = 1
        tmp2[tmp2<=0] = 0
        loss = criterion(output, y_batch)
        # ===================backward====================
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        X_batch, y_batch = batch
        with torch.no_grad():
            pred = model(X_batch).argmax(1)
        return float((pred == y_batch).float().mean())

    first = next(iter(DataLoader(train_dataset, batch_size=BATCH_SIZE)))
    return Program(name="medt_gatedaxial", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, frozen=("*.f_qr", "*.f_kr",
                   "*.f_sve", "*.f_sv"), loader=ImagesMasks(dataloader))


build = functools.partial(_build)

BUGS = [
    # the joint transform flips the image but not its mask: half the masks are mirrored relative to their image.
    Bug("mask_not_flipped", functools.partial(_build, bug="mask_not_flipped"), "learning_ledger", ("TASK",)),
    # the model's unused ``self.soft`` applied to the output: LogNLLLoss's cross_entropy normalizes probabilities.
    Bug("softmax_output_into_cross_entropy", functools.partial(_build, bug="softmax_output_into_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # zero_grad moved between backward and step: Adam steps on weight decay alone.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
