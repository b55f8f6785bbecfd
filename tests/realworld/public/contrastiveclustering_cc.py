"""Contrastive Clustering (Li et al., AAAI 2021), Yunfan-Li's Contrastive-Clustering: a ResNet backbone shared by two
augmented views, an instance projector (MLP, L2-normalized features) trained with the NT-Xent instance loss
(temperature 0.5) and a cluster projector (MLP ending in a softmax over clusters) trained with the cluster-level
contrastive loss on the columns of the two views' assignment matrices (cosine similarity, temperature 1.0) plus the
entropy term ``log K + sum p log p`` of each view's cluster marginal; Adam (lr 3e-4), no schedule; evaluation by the
NMI of the argmax cluster against the classes.

Source: https://github.com/Yunfan-Li/Contrastive-Clustering
Commit: 61daba8b5fdb41eb1be7c93128cd1ed02a8e04a8
Files: train.py, config/config.yaml, modules/network.py, modules/contrastive_loss.py, modules/resnet.py,
modules/transform.py, cluster.py, evaluation/evaluation.py
License: MIT (Copyright (c) 2020 Yunfan Li; full text in LICENSES/Yunfan-Li-Contrastive-Clustering.txt)
Domain: vision, self-supervised clustering (instance- and cluster-level contrastive heads on two views)

Kept as written: ``Network`` (``instance_projector``, ``cluster_projector`` with ``nn.Softmax(dim=1)``, ``forward``,
``forward_cluster``), ``InstanceLoss`` and ``ClusterLoss`` (masks, summed cross-entropy over ``2N`` / ``2K`` rows
divided by ``N``, the entropy term), ``modules/resnet.py``'s ``ResNet`` (``_make_layer``, ``_forward_impl`` ending at
the flattened average pool, ``rep_dim``, the init), ``Transforms.__call__`` (two independent draws of the train
transform), ``train()``'s loop body (zero_grad, the two views, ``loss_instance + loss_cluster``, backward, step), the
Adam optimizer from ``config.yaml`` (lr 3e-4, weight decay 0, temperatures 0.5 and 1.0) and the ``DataLoader``'s
``shuffle=True, drop_last=True`` (the losses' masks are built for a full batch).

Deviations from the original:
- sizes for 2 CPU cores: ``resnet`` ResNet34 -> the file's ResNet18 layout ``[2, 2, 2, 2]`` with its widths
  64/128/256/512 divided by 4 (``rep_dim`` 128); ``image_size`` 224 -> 32; ``batch_size`` 256 -> 32;
  ``feature_dim`` 128 -> 32; ``get_resnet`` builds only the network it returns (the original builds all three);
- torchvision is not here: ``BasicBlock``/``conv3x3``/``conv1x1`` (imported from ``torchvision.models.resnet``)
  are written out as torchvision has them; the train transform's ``RandomResizedCrop`` (torchvision's sampling of
  area and log-ratio, 10 tries, center-crop fallback, bilinear resize), ``RandomHorizontalFlip``, ``RandomApply(
  ColorJitter(0.4, 0.4, 0.4, 0.1), p=0.8)`` (brightness, contrast, saturation as torchvision blends them, in a
  random order; hue as a rotation of the chroma plane in YIQ space instead of an HSV hue shift), ``RandomGrayscale
  (p=0.2)`` and ``ToTensor`` are written out in plain torch on CHW tensors in [0, 1], their randomness from a
  ``torch.Generator(seed)``;
- data: CIFAR-10 train + test (``ConcatDataset``, a download) is replaced by 640 synthetic 32x32 RGB images made
  from ``seed``: 10 classes, each a colour pair and a shape (disc, square, bar, cross, ring) drawn at a random
  position and size on a noisy background; the labels are used only by the evaluation, as in ``cluster.py``;
- CUDA is replaced by the CPU (``.to('cuda')`` and the loss device); checkpoints and printing are dropped; the
  DataLoader has no workers and shuffles with a ``torch.Generator(seed)``;
- one ``train_step`` is one iteration of ``train()``'s loop (returning the loss); ``eval_fn`` is ``cluster.py``'s
  inference (``model.eval()``, ``forward_cluster`` on the test transform, i.e. the images as tensors) and NMI,
  written out in numpy (sklearn's ``normalized_mutual_info_score`` with its arithmetic normalization; sklearn is not
  here); like the original's ``train()`` the loop never calls ``model.train()`` again after an evaluation, so
  ``eval_fn`` restores the mode it found (``cluster.py`` is a separate script);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, UP032, SIM118

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn.functional import normalize
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WIDTH_DIV = 4  # (port) the ResNet's widths divided by 4


class args:  # config/config.yaml
    seed = 42
    batch_size = 32  # 256
    image_size = 32  # 224
    resnet = "ResNet18"  # "ResNet34"
    feature_dim = 32  # 128
    learning_rate = 0.0003
    weight_decay = 0.
    instance_temperature = 0.5
    cluster_temperature = 1.0


# ------------------------------------------------------------------- torchvision.models.resnet (written out)
def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


# ------------------------------------------------------------------------------------------ modules/resnet.py
class ResNet(nn.Module):

    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False,
                 groups=1, width_per_group=64, replace_stride_with_dilation=None,
                 norm_layer=None):
        super(ResNet, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer

        self.inplanes = 64 // WIDTH_DIV
        self.dilation = 1
        if replace_stride_with_dilation is None:
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError("replace_stride_with_dilation should be None "
                             "or a 3-element tuple, got {}".format(replace_stride_with_dilation))
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64 // WIDTH_DIV, layers[0])
        self.layer2 = self._make_layer(block, 128 // WIDTH_DIV, layers[1], stride=2,
                                       dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 256 // WIDTH_DIV, layers[2], stride=2,
                                       dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 512 // WIDTH_DIV, layers[3], stride=2,
                                       dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.rep_dim = 512 // WIDTH_DIV * block.expansion

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
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
        layers.append(block(self.inplanes, planes, stride, downsample, self.groups,
                            self.base_width, previous_dilation, norm_layer))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups,
                                base_width=self.base_width, dilation=self.dilation,
                                norm_layer=norm_layer))

        return nn.Sequential(*layers)

    def _forward_impl(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)

        return x

    def forward(self, x):
        return self._forward_impl(x)


def get_resnet(name):
    resnets = {  # (port) only the one returned is built
        "ResNet18": lambda: ResNet(block=BasicBlock, layers=[2, 2, 2, 2]),
        "ResNet34": lambda: ResNet(block=BasicBlock, layers=[3, 4, 6, 3]),
    }
    if name not in resnets.keys():
        raise KeyError(f"{name} is not a valid ResNet version")
    return resnets[name]()


# ----------------------------------------------------------------------------------------- modules/network.py
class Network(nn.Module):
    def __init__(self, resnet, feature_dim, class_num, bug=None):
        super(Network, self).__init__()
        self.resnet = resnet
        self.feature_dim = feature_dim
        self.cluster_num = class_num
        self.instance_projector = nn.Sequential(
            nn.Linear(self.resnet.rep_dim, self.resnet.rep_dim),
            nn.ReLU(),
            nn.Linear(self.resnet.rep_dim, self.feature_dim),
        )
        self.cluster_projector = nn.Sequential(
            nn.Linear(self.resnet.rep_dim, self.resnet.rep_dim),
            nn.ReLU(),
            nn.Linear(self.resnet.rep_dim, self.cluster_num),
            nn.Softmax(dim=0 if bug == "cluster_softmax_over_batch" else 1)
        )

    def forward(self, x_i, x_j):
        h_i = self.resnet(x_i)
        h_j = self.resnet(x_j)

        z_i = normalize(self.instance_projector(h_i), dim=1)
        z_j = normalize(self.instance_projector(h_j), dim=1)

        c_i = self.cluster_projector(h_i)
        c_j = self.cluster_projector(h_j)

        return z_i, z_j, c_i, c_j

    def forward_cluster(self, x):
        h = self.resnet(x)
        c = self.cluster_projector(h)
        c = torch.argmax(c, dim=1)
        return c


# -------------------------------------------------------------------------------- modules/contrastive_loss.py
class InstanceLoss(nn.Module):
    def __init__(self, batch_size, temperature, device):
        super(InstanceLoss, self).__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        self.device = device

        self.mask = self.mask_correlated_samples(batch_size)
        self.criterion = nn.CrossEntropyLoss(reduction="sum")

    def mask_correlated_samples(self, batch_size):
        N = 2 * batch_size
        mask = torch.ones((N, N))
        mask = mask.fill_diagonal_(0)
        for i in range(batch_size):
            mask[i, batch_size + i] = 0
            mask[batch_size + i, i] = 0
        mask = mask.bool()
        return mask

    def forward(self, z_i, z_j):
        N = 2 * self.batch_size
        z = torch.cat((z_i, z_j), dim=0)

        sim = torch.matmul(z, z.T) / self.temperature
        sim_i_j = torch.diag(sim, self.batch_size)
        sim_j_i = torch.diag(sim, -self.batch_size)

        positive_samples = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(N, 1)
        negative_samples = sim[self.mask].reshape(N, -1)

        labels = torch.zeros(N).to(positive_samples.device).long()
        logits = torch.cat((positive_samples, negative_samples), dim=1)
        loss = self.criterion(logits, labels)
        loss /= N

        return loss


class ClusterLoss(nn.Module):
    def __init__(self, class_num, temperature, device):
        super(ClusterLoss, self).__init__()
        self.class_num = class_num
        self.temperature = temperature
        self.device = device

        self.mask = self.mask_correlated_clusters(class_num)
        self.criterion = nn.CrossEntropyLoss(reduction="sum")
        self.similarity_f = nn.CosineSimilarity(dim=2)

    def mask_correlated_clusters(self, class_num):
        N = 2 * class_num
        mask = torch.ones((N, N))
        mask = mask.fill_diagonal_(0)
        for i in range(class_num):
            mask[i, class_num + i] = 0
            mask[class_num + i, i] = 0
        mask = mask.bool()
        return mask

    def forward(self, c_i, c_j):
        p_i = c_i.sum(0).view(-1)
        p_i /= p_i.sum()
        ne_i = math.log(p_i.size(0)) + (p_i * torch.log(p_i)).sum()
        p_j = c_j.sum(0).view(-1)
        p_j /= p_j.sum()
        ne_j = math.log(p_j.size(0)) + (p_j * torch.log(p_j)).sum()
        ne_loss = ne_i + ne_j

        c_i = c_i.t()
        c_j = c_j.t()
        N = 2 * self.class_num
        c = torch.cat((c_i, c_j), dim=0)

        sim = self.similarity_f(c.unsqueeze(1), c.unsqueeze(0)) / self.temperature
        sim_i_j = torch.diag(sim, self.class_num)
        sim_j_i = torch.diag(sim, -self.class_num)

        positive_clusters = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(N, 1)
        negative_clusters = sim[self.mask].reshape(N, -1)

        labels = torch.zeros(N).to(positive_clusters.device).long()
        logits = torch.cat((positive_clusters, negative_clusters), dim=1)
        loss = self.criterion(logits, labels)
        loss /= N

        return loss + ne_loss


# --------------------------------------------------------- modules/transform.py (torchvision written out)
_GRAY = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)


def _gray(img):
    return (img * _GRAY).sum(0, keepdim=True)


def _uniform(g, lo, hi):
    return lo + (hi - lo) * torch.rand(1, generator=g).item()


def random_resized_crop(img, size, g, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
    _, height, width = img.shape
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * _uniform(g, scale[0], scale[1])
        aspect_ratio = math.exp(_uniform(g, log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, (1,), generator=g))
            j = int(torch.randint(0, width - w + 1, (1,), generator=g))
            break
    else:
        h, w, i, j = height, width, 0, 0
    crop = img[:, i:i + h, j:j + w]
    return nn.functional.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def color_jitter(img, g, brightness, contrast, saturation, hue):
    for k in torch.randperm(4, generator=g).tolist():
        if k == 0:
            img = (img * _uniform(g, 1 - brightness, 1 + brightness)).clamp(0, 1)
        elif k == 1:
            m = _gray(img).mean()
            f = _uniform(g, 1 - contrast, 1 + contrast)
            img = (f * img + (1 - f) * m).clamp(0, 1)
        elif k == 2:
            f = _uniform(g, 1 - saturation, 1 + saturation)
            img = (f * img + (1 - f) * _gray(img)).clamp(0, 1)
        else:
            theta = _uniform(g, -hue, hue) * 2 * math.pi
            yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
            rot = torch.tensor([[1, 0, 0], [0, math.cos(theta), -math.sin(theta)],
                                [0, math.sin(theta), math.cos(theta)]])
            m = torch.linalg.inv(yiq) @ rot @ yiq
            img = torch.einsum("ij,jhw->ihw", m, img).clamp(0, 1)
    return img


class Transforms:
    def __init__(self, size, s=1.0, gen=None, bug=None):
        self.size, self.s, self.g, self.bug = size, s, gen, bug

    def train_transform(self, x):
        g, s = self.g, self.s
        x = random_resized_crop(x, self.size, g)  # RandomResizedCrop(size=size)
        if torch.rand(1, generator=g).item() < 0.5:  # RandomHorizontalFlip()
            x = x.flip(-1)
        if torch.rand(1, generator=g).item() < 0.8:  # RandomApply([ColorJitter(.8s, .8s, .8s, .2s)], p=0.8)
            x = color_jitter(x, g, 0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)
        if torch.rand(1, generator=g).item() < 0.2:  # RandomGrayscale(p=0.2)
            x = _gray(x).expand(3, -1, -1).clone()
        return x  # ToTensor(): already a CHW float tensor in [0, 1]

    def __call__(self, x):
        if self.bug == "same_view_twice":
            v = self.train_transform(x)
            return v, v
        return self.train_transform(x), self.train_transform(x)


# ---------------------------------------------------------------------------------------------- (port) data
def synthetic_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    palette = torch.rand(10, 2, 3, generator=g)
    ys, xs = torch.meshgrid(torch.arange(32.), torch.arange(32.), indexing="ij")
    imgs = []
    for c in labels.tolist():
        cy, cx = 10 + 12 * torch.rand(2, generator=g)
        r = 5 + 4 * torch.rand(1, generator=g).item()
        d2 = (ys - cy) ** 2 + (xs - cx) ** 2
        shape = c % 5
        if shape == 0:
            m = d2 < r * r
        elif shape == 1:
            m = ((ys - cy).abs() < r * 0.8) & ((xs - cx).abs() < r * 0.8)
        elif shape == 2:
            m = ((ys - cy).abs() < r) & ((xs - cx).abs() < 2)
        elif shape == 3:
            m = (((ys - cy).abs() < r) & ((xs - cx).abs() < 1.5)) | (((xs - cx).abs() < r) & ((ys - cy).abs() < 1.5))
        else:
            m = (d2 < r * r) & (d2 > (r - 2.5) ** 2)
        m = m.float()[None]
        fg, bg = palette[c, 0].view(3, 1, 1), palette[c, 1].view(3, 1, 1)
        img = bg * (1 - m) + fg * m + 0.05 * torch.randn(3, 32, 32, generator=g)
        imgs.append(img.clamp(0, 1))
    return torch.stack(imgs), labels


class ImageSet(data.Dataset):
    def __init__(self, images, labels, transform=None):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i]
        return (self.transform(x) if self.transform is not None else x), int(self.labels[i])


def nmi(label, pred):
    """sklearn.metrics.normalized_mutual_info_score (arithmetic normalization), written out."""
    label, pred = np.asarray(label), np.asarray(pred)
    _, li = np.unique(label, return_inverse=True)
    _, pi = np.unique(pred, return_inverse=True)
    cont = np.zeros((li.max() + 1, pi.max() + 1))
    np.add.at(cont, (li, pi), 1)
    n = cont.sum()
    pij = cont / n
    pi_, pj_ = pij.sum(1, keepdims=True), pij.sum(0, keepdims=True)
    nz = pij > 0
    mi = float((pij[nz] * np.log(pij[nz] / (pi_ @ pj_)[nz])).sum())
    h1 = float(-(pi_[pi_ > 0] * np.log(pi_[pi_ > 0])).sum())
    h2 = float(-(pj_[pj_ > 0] * np.log(pj_[pj_ > 0])).sum())
    if h1 == 0 or h2 == 0:
        return 1.0 if h1 == h2 else 0.0
    return mi / max((h1 + h2) / 2, 1e-12)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    images, labels = synthetic_images(640, seed)
    transform = Transforms(size=args.image_size, s=0.5, gen=torch.Generator().manual_seed(seed + 1), bug=bug)
    dataset = ImageSet(images, labels, transform=transform)
    class_num = 10
    data_loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed),
    )
    # initialize model
    res = get_resnet(args.resnet)
    model = Network(res, args.feature_dim, class_num, bug=bug)
    # optimizer / loss
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    loss_device = torch.device("cpu")
    criterion_instance = InstanceLoss(args.batch_size, args.instance_temperature, loss_device).to(
        loss_device)
    criterion_cluster = ClusterLoss(class_num, args.cluster_temperature, loss_device).to(loss_device)
    st = {"it": None}

    def train_step():
        try:
            (x_i, x_j), _ = next(st["it"])
        except (StopIteration, TypeError):
            st["it"] = iter(data_loader)
            (x_i, x_j), _ = next(st["it"])
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        z_i, z_j, c_i, c_j = model(x_i, x_j)
        loss_instance = criterion_instance(z_i, z_j)
        loss_cluster = criterion_cluster(c_i, c_j)
        loss = loss_instance + loss_cluster
        loss.backward()
        optimizer.step()
        return loss.item()

    test_set = ImageSet(images, labels)  # cluster.py: the same images under the test transform
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=128, shuffle=False)

    def evaluate(model, _batch=None):
        was_training = model.training
        model.eval()
        feature_vector, labels_vector = [], []
        for x, y in test_loader:
            with torch.no_grad():
                c = model.forward_cluster(x)
            feature_vector.extend(c.numpy())
            labels_vector.extend(y.numpy())
        model.train(was_training)
        return nmi(np.array(labels_vector), np.array(feature_vector))

    def loss_fn(outputs, _target=None):
        z_i, z_j, c_i, c_j = outputs
        return criterion_instance(z_i, z_j) + criterion_cluster(c_i, c_j)

    def loader():
        for (x_i, x_j), _ in data_loader:
            yield (x_i, x_j), None

    (b_i, b_j), _ = next(iter(torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=False)))
    return Program(name="contrastiveclustering_cc", model=model, batch=((b_i, b_j), None), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=evaluate, loader=loader())


build = functools.partial(_build, bug=None)

BUGS = [
    # the cluster projector's softmax over dim 0, the batch, instead of dim 1, the clusters (classic axis slip): each
    # column becomes a distribution over the batch, not each row one over the clusters.
    Bug("cluster_softmax_over_batch", functools.partial(_build, bug="cluster_softmax_over_batch"),
        "learning_ledger", ("OBJECTIVE",)),
    # Transforms.__call__ returns one augmented view twice instead of two independent draws (classic): the positive
    # pair is a copy and the contrastive losses no longer ask for invariance to the augmentations.
    Bug("same_view_twice", functools.partial(_build, bug="same_view_twice"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from train()'s loop (classic): gradients accumulate over the steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
