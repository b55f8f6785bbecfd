"""MoCo / BYOL in one Lightning module, from untitled-ai/self_supervised (the code of the "Understanding
self-supervised and contrastive learning with Bootstrap Your Own Latent (BYOL)" blog post): ``MoCoMethod`` with
``train_blog.py``'s ``base`` configuration -- a ResNet-18 encoder without its ``fc``, a lagging (momentum) copy of
the encoder and of the two-layer projection MLP with BatchNorm, a two-layer prediction MLP, both augmentations used
as queries (the second pass flips the view axis), the ``ip`` loss ``mean(1 - <q, k>)`` on normalized vectors with no
negative examples, the momentum update after every step under the cosine momentum schedule (m = 0.996 at the
start), SGD (lr 0.8, momentum 0.9, weight decay 1e-4) over two parameter groups, ``CosineAnnealingLR`` over
``max_epochs`` stepped each epoch.

Source: https://github.com/untitled-ai/self_supervised
Commit: 6d14ca0402ecc13feda9b3a9fdc056fd1ac24473
Files: moco.py, train_blog.py, utils.py
License: MIT (Copyright (c) 2020 Untiled AI; full text in LICENSES/untitled-ai-self_supervised.txt)
Domain: vision, self-supervised representation learning (BYOL-style: online network + predictor against a momentum
target network, two augmented views, PyTorch Lightning module)

Deviations from the original:
- sizes for 2 CPU cores: ``transform_crop_size`` 96 -> 32, ResNet-18 widths 64 -> 8 (``_tv_resnet``: torchvision's
  ResNet-18 written out; ``embedding_dim`` 512 -> 64 accordingly), ``mlp_hidden_dim`` 512 -> 64, ``dim`` 128 -> 32,
  ``batch_size`` 256 -> 32, the ``xent`` configuration's queue ``K`` 65536 -> 256 (unused by ``base``);
- data: STL-10's ``train+unlabeled`` split is replaced by 320 synthetic 40x40 RGB images (10 classes, each an
  oriented stripe texture in its own colour at a random phase, plus noise) made from ``seed``, and its ``test``
  split by 128 more; torchvision is not available, so ``MoCoTransforms.split_transform`` (RandomResizedCrop with
  scale (0.2, 1), ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8, RandomGrayscale p 0.2, RandomHorizontalFlip,
  GaussianBlur sigma in [0.1, 2] with p 0.5, ToTensor, Normalize) and the test transform are written out on
  tensors (the hue jitter as a rotation in YIQ space, the blur as a separable Gaussian convolution);
- Lightning 2 API: ``self.hparams = AttributeDict(...)`` (no longer settable) is ``self.save_hyperparameters``
  of the same dict; ``validation_epoch_end``'s scikit-learn logistic regression (scikit-learn is not here) is a
  nearest-class-mean probe in plain torch with the same half / half split of the validation embeddings;
  ``training_step``'s ``optimizer_idx`` argument is dropped; the tensorboard logger is dropped;
- ``Trainer.fit`` is driven one step at a time as Lightning's automatic optimization runs it (``training_step`` in
  the closure, ``optimizer_zero_grad``, ``backward``, ``optimizer_step``), a ``Trainer(barebones=True)`` attached
  so that ``self.log_dict`` and ``current_epoch`` work; at an epoch's end the validation loop runs, the
  CosineAnnealingLR steps and ``current_epoch`` advances (it drives the momentum schedule);
- the ``Program`` declares the module (whose ``forward`` is the encoder) on a batch of first views, with the
  training step's loss on the rest of the pipeline as its ``loss_fn``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP006, UP007, UP035, UP045, RUF008, RUF059  (the original code style is kept as written)

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys
import warnings
from functools import partial
from typing import List, Optional, Union

import attr
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning import Trainer
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet
from _api import Bug, Program

N_TRAIN, N_VAL, RAW = 320, 128, 40
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


# ---- utils.py: transforms (written out on tensors) -------------------------------------------------------------

def _gray(x):
    return (0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2]).unsqueeze(0)


def _color_jitter(x, b, c, s, h):
    x = (x * random.uniform(1 - b, 1 + b)).clamp(0, 1)
    m = _gray(x).mean()
    x = ((x - m) * random.uniform(1 - c, 1 + c) + m).clamp(0, 1)
    g = _gray(x)
    x = ((x - g) * random.uniform(1 - s, 1 + s) + g).clamp(0, 1)
    theta = 2 * math.pi * random.uniform(-h, h)  # hue: rotate the chroma plane of YIQ
    yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
    rot = torch.tensor([[1, 0, 0], [0, math.cos(theta), -math.sin(theta)], [0, math.sin(theta), math.cos(theta)]])
    mat = torch.linalg.inv(yiq) @ rot @ yiq
    return torch.einsum("ij,jhw->ihw", mat, x).clamp(0, 1)


def _gaussian_blur(x, sigma):
    radius = max(1, math.ceil(2 * sigma))
    t = torch.arange(-radius, radius + 1).float()
    k = torch.exp(-t ** 2 / (2 * sigma ** 2))
    k = k / k.sum()
    x = F.conv2d(F.pad(x[None], (radius, radius, 0, 0), mode="reflect"), k.view(1, 1, 1, -1).repeat(3, 1, 1, 1),
                 groups=3)
    x = F.conv2d(F.pad(x, (0, 0, radius, radius), mode="reflect"), k.view(1, 1, -1, 1).repeat(3, 1, 1, 1), groups=3)
    return x[0]


def _random_resized_crop(x, size, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3)):
    _, h, w = x.shape
    area = h * w
    for _ in range(10):
        target_area = area * random.uniform(*scale)
        aspect = math.exp(random.uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            i, j = random.randint(0, h - ch), random.randint(0, w - cw)
            break
    else:
        ch, cw, i, j = h, w, 0, 0
    crop = x[:, i:i + ch, j:j + cw]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


@attr.s(auto_attribs=True)
class MoCoTransforms:
    s: float = 0.5
    crop_size: int = 224
    apply_blur: bool = True

    def split_transform(self, img) -> torch.Tensor:
        transform = self.single_transform()
        return torch.stack((transform(img), transform(img)))

    def single_transform(self):
        def transform(x):
            x = _random_resized_crop(x, self.crop_size, scale=(0.2, 1.0))
            if random.random() < 0.8:
                x = _color_jitter(x, 0.8 * self.s, 0.8 * self.s, 0.8 * self.s, 0.2 * self.s)
            if random.random() < 0.2:
                x = _gray(x).repeat(3, 1, 1)
            if random.random() < 0.5:
                x = x.flip(-1)
            if self.apply_blur and random.random() < 0.5:
                x = _gaussian_blur(x, random.uniform(0.1, 2.0))
            return (x - MEAN) / STD  # ToTensor, moco_normalize
        return transform

    def get_test_transform(self):
        def transform(x):  # Resize(test_resize), CenterCrop(crop_size): the synthetic images are resized directly
            x = F.interpolate(x[None], size=(self.crop_size, self.crop_size), mode="bilinear", align_corners=False)[0]
            return (x - MEAN) / STD
        return transform


class StripesDataset(torch.utils.data.Dataset):
    """(port) 10 classes of 40x40 images: stripes at a class angle and frequency in a class colour, random phase."""

    def __init__(self, seed, n, transform):
        gen = torch.Generator().manual_seed(seed)
        self.classes = list(range(10))
        self.targets = torch.arange(n) % 10
        angles = torch.arange(10) * math.pi / 10
        freqs = 0.25 + 0.05 * (torch.arange(10) % 3)
        colours = 0.2 + 0.7 * torch.rand(10, 3, generator=torch.Generator().manual_seed(1234))
        yy, xx = torch.meshgrid(torch.arange(RAW).float(), torch.arange(RAW).float(), indexing="ij")
        imgs = []
        for c in self.targets.tolist():
            phase = float(torch.rand((), generator=gen)) * 2 * math.pi
            u = xx * math.cos(angles[c]) + yy * math.sin(angles[c])
            pattern = 0.5 + 0.5 * torch.sin(freqs[c] * u + phase)
            img = colours[c].view(3, 1, 1) * pattern + 0.1 * torch.rand(3, RAW, RAW, generator=gen)
            imgs.append(img.clamp(0, 1))
        self.data = torch.stack(imgs)
        self.transform = transform

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]

    def __len__(self):
        return len(self.targets)


# ---- utils.py: MLP, get_encoder, calculate_accuracy -------------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(
        self, input_dim, output_dim, hidden_dim, num_layers, weight_standardization=False, normalization=None
    ):
        super().__init__()
        assert num_layers >= 0, "negative layers?!?"
        if normalization is not None:
            assert callable(normalization), "normalization must be callable"

        if num_layers == 0:
            self.net = torch.nn.Identity()
            return

        if num_layers == 1:
            self.net = torch.nn.Linear(input_dim, output_dim)
            return

        linear_net = torch.nn.Linear

        layers = []
        prev_dim = input_dim
        for _ in range(num_layers - 1):
            layers.append(linear_net(prev_dim, hidden_dim))
            if normalization is not None:
                layers.append(normalization())
            layers.append(torch.nn.ReLU())
            prev_dim = hidden_dim

        layers.append(torch.nn.Linear(hidden_dim, output_dim))

        self.net = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def get_encoder(name: str, **kwargs) -> torch.nn.Module:
    """
    Gets just the encoder portion of a torchvision model (replaces final layer with identity)
    """
    model = _tv_resnet.resnet18(width=8)  # (port) torchvision.models.resnet18(**kwargs)
    if hasattr(model, "fc"):
        model.fc = torch.nn.Identity()
    return model


def calculate_accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# ---- moco.py ---------------------------------------------------------------------------------------------------

@attr.s(auto_attribs=True)
class MoCoMethodParams:
    # encoder model selection
    encoder_arch: str = "resnet18"
    shuffle_batch_norm: bool = False
    embedding_dim: int = 64  # (port) 512; must match embedding dim of encoder

    # data-related parameters
    dataset_name: str = "stl10"
    batch_size: int = 32  # (port) 256

    # MoCo parameters
    K: int = 256  # (port) 65536; number of examples in queue
    dim: int = 32  # (port) 128
    m: float = 0.996
    T: float = 0.2

    # eqco parameters
    eqco_alpha: int = 65536
    use_eqco_margin: bool = False
    use_negative_examples_from_batch: bool = False

    # optimization parameters
    lr: float = 0.5
    momentum: float = 0.9
    weight_decay: float = 1e-4
    max_epochs: int = 320

    # transform parameters
    transform_s: float = 0.5
    transform_crop_size: int = 32  # (port) 96
    transform_apply_blur: bool = True

    # Change these to make more like BYOL
    use_momentum_schedule: bool = False
    loss_type: str = "ce"
    use_negative_examples_from_queue: bool = True
    use_both_augmentations_as_queries: bool = False
    optimizer_name: str = "sgd"
    exclude_matching_parameters_from_lars: List[str] = []  # set to [".bias", ".bn"] to match paper
    loss_constant_factor: float = 1

    # MLP parameters
    projection_mlp_layers: int = 2
    prediction_mlp_layers: int = 0
    mlp_hidden_dim: int = 64  # (port) 512

    mlp_normalization: Optional[str] = None
    prediction_mlp_normalization: Optional[str] = "same"  # if same will use mlp_normalization
    use_mlp_weight_standardization: bool = False

    # data loader parameters
    num_data_workers: int = 0  # (port) 4
    drop_last_batch: bool = True
    pin_data_memory: bool = False  # (port) True
    gather_keys_for_queue: bool = False


def get_mlp_normalization(hparams: MoCoMethodParams, prediction=False):
    normalization_str = hparams.mlp_normalization
    if prediction and hparams.prediction_mlp_normalization != "same":
        normalization_str = hparams.prediction_mlp_normalization

    if normalization_str is None:
        return None
    elif normalization_str == "bn":
        return partial(torch.nn.BatchNorm1d, num_features=hparams.mlp_hidden_dim)
    elif normalization_str == "ln":
        return partial(torch.nn.LayerNorm, normalized_shape=[hparams.mlp_hidden_dim])
    elif normalization_str == "gn":
        return partial(torch.nn.GroupNorm, num_channels=hparams.mlp_hidden_dim, num_groups=32)
    else:
        raise NotImplementedError(f"mlp normalization {normalization_str} not implemented")


class MoCoMethod(pl.LightningModule):
    model: torch.nn.Module
    embedding_dim: Optional[int]

    def __init__(
        self, hparams: Union[MoCoMethodParams, dict, None] = None, seed=0, bug=None, **kwargs,
    ):
        super().__init__()
        self.bug = bug

        if hparams is None:
            hparams = self.params(**kwargs)
        elif isinstance(hparams, dict):
            hparams = self.params(**hparams, **kwargs)

        self.save_hyperparameters(attr.asdict(hparams))  # (port) self.hparams = AttributeDict(attr.asdict(hparams))

        # Check for configuration issues
        if (
            hparams.gather_keys_for_queue
            and not hparams.shuffle_batch_norm
            and not hparams.encoder_arch.startswith("ws_")
        ):
            warnings.warn(
                "Configuration suspicious: gather_keys_for_queue without shuffle_batch_norm or weight standardization"
            )

        some_negative_examples = hparams.use_negative_examples_from_batch or hparams.use_negative_examples_from_queue
        if hparams.loss_type == "ce" and not some_negative_examples:
            warnings.warn("Configuration suspicious: cross entropy loss without negative examples")

        # Create encoder model
        self.model = get_encoder(hparams.encoder_arch)

        # Create dataset
        transforms = MoCoTransforms(
            s=hparams.transform_s, crop_size=hparams.transform_crop_size, apply_blur=hparams.transform_apply_blur
        )
        # (port) utils.get_moco_dataset(hparams.dataset_name, transforms): the synthetic train and test splits
        self.train_ds = StripesDataset(seed, N_TRAIN, transforms.split_transform)
        self.validation_ds = StripesDataset(seed + 1, N_VAL, transforms.get_test_transform())

        # "key" function (no grad)
        self.lagging_model = copy.deepcopy(self.model)
        for param in self.lagging_model.parameters():
            param.requires_grad = False

        self.projection_model = MLP(
            hparams.embedding_dim,
            hparams.dim,
            hparams.mlp_hidden_dim,
            num_layers=hparams.projection_mlp_layers,
            normalization=get_mlp_normalization(hparams),
            weight_standardization=hparams.use_mlp_weight_standardization,
        )

        self.prediction_model = MLP(
            hparams.dim,
            hparams.dim,
            hparams.mlp_hidden_dim,
            num_layers=hparams.prediction_mlp_layers,
            normalization=get_mlp_normalization(hparams, prediction=True),
            weight_standardization=hparams.use_mlp_weight_standardization,
        )

        #  "key" function (no grad)
        self.lagging_projection_model = copy.deepcopy(self.projection_model)
        for param in self.lagging_projection_model.parameters():
            param.requires_grad = False

        # create the queue
        self.register_buffer("queue", torch.randn(hparams.dim, hparams.K))
        self.queue = torch.nn.functional.normalize(self.queue, dim=0)

        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    def _get_embeddings(self, x):
        """
        Input:
            im_q: a batch of query images
            im_k: a batch of key images
        Output:
            logits, targets
        """
        bsz, nd, nc, nh, nw = x.shape
        assert nd == 2, "second dimension should be the split image -- dims should be N2CHW"
        im_q = x[:, 0].contiguous()
        im_k = x[:, 1].contiguous()

        # compute query features
        emb_q = self.model(im_q)
        return self._embeddings_from(emb_q, im_k)

    def _embeddings_from(self, emb_q, im_k):  # (port) the rest of _get_embeddings, shared with the Program's loss
        q_projection = self.projection_model(emb_q)
        q = self.prediction_model(q_projection)  # queries: NxC
        q = torch.nn.functional.normalize(q, dim=0 if self.bug == "queries_normalized_over_batch" else 1)

        # compute key features
        with torch.no_grad():  # no gradient to keys
            k = self.lagging_projection_model(self.lagging_model(im_k))  # keys: NxC
            k = torch.nn.functional.normalize(k, dim=1)

        return emb_q, q, k

    def _get_contrastive_predictions(self, q, k):
        if self.hparams.use_negative_examples_from_batch:
            logits = torch.mm(q, k.T)
            labels = torch.arange(0, q.shape[0], dtype=torch.long).to(logits.device)
            return logits, labels

        # compute logits
        # Einstein sum is more intuitive
        # positive logits: Nx1
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)

        if self.hparams.use_negative_examples_from_queue:
            # negative logits: NxK
            l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
            logits = torch.cat([l_pos, l_neg], dim=1)
        else:
            logits = l_pos

        # labels: positive key indicators
        labels = torch.zeros(logits.shape[0], dtype=torch.long).to(logits.device)

        return logits, labels

    def _get_pos_neg_ip(self, emb_q, k):
        with torch.no_grad():
            z = self.projection_model(emb_q)
            z = torch.nn.functional.normalize(z, dim=1)
            ip = torch.mm(z, k.T)
            eye = torch.eye(z.shape[0]).to(z.device)
            pos_ip = (ip * eye).sum() / z.shape[0]
            neg_ip = (ip * (1 - eye)).sum() / (z.shape[0] * (z.shape[0] - 1))

        return pos_ip, neg_ip

    def _get_contrastive_loss(self, logits, labels):
        if self.hparams.loss_type == "ce":
            return F.cross_entropy(logits / self.hparams.T, labels)

        new_labels = torch.zeros_like(logits)
        new_labels.scatter_(1, labels.unsqueeze(1), 1)
        if self.hparams.loss_type == "bce":
            return F.binary_cross_entropy_with_logits(logits / self.hparams.T, new_labels) * logits.shape[1]

        if self.hparams.loss_type == "ip":
            # inner product
            # negative sign for label=1 (maximize ip), positive sign for label=0 (minimize ip)
            if self.bug == "ip_sign_flipped":
                inner_product = (new_labels * 2 - 1) * logits
            else:
                inner_product = (1 - new_labels * 2) * logits
            return torch.mean((inner_product + 1).sum(dim=-1))

        raise NotImplementedError(f"Loss function {self.hparams.loss_type} not implemented")

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, class_labels = batch  # batch is a tuple, we just want the image

        emb_q, q, k = self._get_embeddings(x)
        logits, labels = self._get_contrastive_predictions(q, k)
        pos_ip, neg_ip = self._get_pos_neg_ip(emb_q, k)

        contrastive_loss = self._get_contrastive_loss(logits, labels)

        if self.hparams.use_both_augmentations_as_queries:
            x_flip = torch.flip(x, dims=[1])
            emb_q2, q2, k2 = self._get_embeddings(x_flip)
            logits2, labels2 = self._get_contrastive_predictions(q2, k2)

            pos_ip2, neg_ip2 = self._get_pos_neg_ip(emb_q2, k2)
            pos_ip = (pos_ip + pos_ip2) / 2
            neg_ip = (neg_ip + neg_ip2) / 2
            contrastive_loss += self._get_contrastive_loss(logits2, labels2)

        contrastive_loss = contrastive_loss.mean() * self.hparams.loss_constant_factor

        log_data = {"step_train_loss": contrastive_loss, "step_pos_cos": pos_ip, "step_neg_cos": neg_ip}

        with torch.no_grad():
            self._momentum_update_key_encoder()

        some_negative_examples = (
                self.hparams.use_negative_examples_from_batch or self.hparams.use_negative_examples_from_queue
        )
        if some_negative_examples:
            acc1, acc5 = calculate_accuracy(logits, labels, topk=(1, 5))
            log_data.update({"step_train_acc1": acc1, "step_train_acc5": acc5})

        # dequeue and enqueue
        if self.hparams.use_negative_examples_from_queue:
            self._dequeue_and_enqueue(k)

        self.log_dict(log_data)
        return {"loss": contrastive_loss}

    def validation_step(self, batch, batch_idx):
        x, class_labels = batch
        with torch.no_grad():
            emb = self.model(x)

        return {"emb": emb, "labels": class_labels}

    def validation_epoch_end(self, outputs):
        embeddings = torch.cat([x["emb"] for x in outputs]).cpu().detach()
        labels = torch.cat([x["labels"] for x in outputs]).cpu().detach()
        num_split_linear = embeddings.shape[0] // 2
        # (port) a nearest-class-mean probe for sklearn's LogisticRegression
        train_e, train_y = embeddings[:num_split_linear], labels[:num_split_linear]
        means = torch.stack([train_e[train_y == c].mean(0) for c in range(10)])
        valid_pred = torch.cdist(embeddings[num_split_linear:], means).argmin(1)
        valid_accuracy = float((valid_pred == labels[num_split_linear:]).float().mean()) * 100

        log_data = {
            "epoch": self.current_epoch,
            "valid_class_acc": valid_accuracy,
            "T": self._get_temp(),
            "m": self._get_m(),
        }
        self.log_dict(log_data)
        return valid_accuracy

    def configure_optimizers(self):
        # exclude bias and batch norm from LARS and weight decay
        regular_parameters = []
        regular_parameter_names = []
        excluded_parameters = []
        excluded_parameter_names = []
        for name, parameter in self.named_parameters():
            if parameter.requires_grad is False:
                continue
            if any(x in name for x in self.hparams.exclude_matching_parameters_from_lars):
                excluded_parameters.append(parameter)
                excluded_parameter_names.append(name)
            else:
                regular_parameters.append(parameter)
                regular_parameter_names.append(name)

        param_groups = [
            {"params": regular_parameters, "names": regular_parameter_names, "use_lars": True},
            {"params": excluded_parameters, "names": excluded_parameter_names, "use_lars": False, "weight_decay": 0,},
        ]
        optimizer = torch.optim.SGD  # optimizer_name "sgd" (LARS not ported)

        encoding_optimizer = optimizer(
            param_groups, lr=self.hparams.lr, momentum=self.hparams.momentum, weight_decay=self.hparams.weight_decay,
        )
        self.lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            encoding_optimizer, self.hparams.max_epochs, eta_min=0
        )
        return [encoding_optimizer], [self.lr_scheduler]

    def _get_m(self):
        if self.hparams.use_momentum_schedule is False:
            return self.hparams.m
        return 1 - (1 - self.hparams.m) * (math.cos(math.pi * self.current_epoch / self.hparams.max_epochs) + 1) / 2

    def _get_temp(self):
        return self.hparams.T

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        """
        Momentum update of the key encoder
        """
        m = self._get_m()
        if self.bug == "momentum_update_reversed":
            for param_q, param_k in zip(self.model.parameters(), self.lagging_model.parameters()):
                param_q.data = param_q.data * m + param_k.data * (1.0 - m)
            for param_q, param_k in zip(self.projection_model.parameters(),
                                        self.lagging_projection_model.parameters()):
                param_q.data = param_q.data * m + param_k.data * (1.0 - m)
            return
        for param_q, param_k in zip(self.model.parameters(), self.lagging_model.parameters()):
            param_k.data = param_k.data * m + param_q.data * (1.0 - m)
        for param_q, param_k in zip(self.projection_model.parameters(), self.lagging_projection_model.parameters()):
            param_k.data = param_k.data * m + param_q.data * (1.0 - m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]

        ptr = int(self.queue_ptr)
        assert self.hparams.K % batch_size == 0  # for simplicity

        # replace the keys at ptr (dequeue and enqueue)
        self.queue[:, ptr : ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.hparams.K  # move pointer

        self.queue_ptr[0] = ptr

    def train_dataloader(self, seed=0):
        return DataLoader(
            self.train_ds,
            batch_size=self.hparams.batch_size,
            num_workers=self.hparams.num_data_workers,
            pin_memory=self.hparams.pin_data_memory,
            drop_last=self.hparams.drop_last_batch,
            shuffle=True,
            generator=torch.Generator().manual_seed(seed),  # (port) seeded
        )

    def val_dataloader(self):
        return DataLoader(
            self.validation_ds,
            batch_size=self.hparams.batch_size,
            num_workers=self.hparams.num_data_workers,
            pin_memory=self.hparams.pin_data_memory,
            drop_last=self.hparams.drop_last_batch,
        )

    @classmethod
    def params(cls, **kwargs) -> MoCoMethodParams:
        return MoCoMethodParams(**kwargs)


# ---- train_blog.py ---------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)

    base_config = MoCoMethodParams(
        lr=0.8,
        batch_size=32,  # (port) 256
        gather_keys_for_queue=False,
        loss_type="ip",
        use_negative_examples_from_queue=False,
        use_both_augmentations_as_queries=True,
        mlp_normalization="bn",
        prediction_mlp_layers=2,
        projection_mlp_layers=2,
        m=0.996,
        use_momentum_schedule=True,
    )
    method = MoCoMethod(base_config, seed=seed, bug=bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=10)
    trainer.strategy.connect(method)
    method.trainer = trainer
    [optimizer], [lr_scheduler] = method.configure_optimizers()
    train_loader = method.train_dataloader(seed)
    val_loader = method.val_dataloader()

    def validate():
        method.eval()
        with torch.no_grad():
            outputs = [method.validation_step(batch, i) for i, batch in enumerate(val_loader)]
            acc = method.validation_epoch_end(outputs)
        method.train()
        return acc

    state = {"it": None, "batch_idx": 0}

    def train_step():
        try:
            batch = next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch: validation, the scheduler, the epoch count
                validate()
                lr_scheduler.step()
                trainer.fit_loop.epoch_progress.increment_completed()
            method.train()
            state["it"], state["batch_idx"] = iter(train_loader), 0
            batch = next(state["it"])
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        result = {}

        def closure():
            out = method.training_step(batch, batch_idx)
            loss = out["loss"]
            method.optimizer_zero_grad(trainer.current_epoch, batch_idx, optimizer)
            method.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        method.optimizer_step(trainer.current_epoch, batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    def eval_fn(module, batch):
        return validate()

    x0, _ = next(iter(DataLoader(method.train_ds, batch_size=base_config.batch_size)))

    def loss_fn(emb_q, x):
        """training_step's loss: the first views' embeddings through the projection and prediction heads against
        the lagging keys of the second views, plus the second pass with the views swapped."""
        _, q, k = method._embeddings_from(emb_q, x[:, 1].contiguous())
        logits, labels = method._get_contrastive_predictions(q, k)
        loss = method._get_contrastive_loss(logits, labels)
        emb_q2, q2, k2 = method._get_embeddings(torch.flip(x, dims=[1]))
        logits2, labels2 = method._get_contrastive_predictions(q2, k2)
        return (loss + method._get_contrastive_loss(logits2, labels2)).mean()

    return Program(name="untitledaiss_moco_byol", model=method, batch=(x0[:, 0].contiguous(), x0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic sign slip of the inner-product loss: the positive pair pushed apart
    Bug("ip_sign_flipped", functools.partial(_build, bug="ip_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic wrong axis: the queries normalized over the batch instead of over their features
    Bug("queries_normalized_over_batch", functools.partial(_build, bug="queries_normalized_over_batch"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: the momentum update written the wrong way round, the online networks pulled onto the lagging copies
    Bug("momentum_update_reversed", functools.partial(_build, bug="momentum_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]
