# ruff: noqa: F841, F821, UP039
"""contrastive-learner (lucidrains): a wrapper that turns any image network into a SimCLR learner. The hidden layer
(``avgpool``) is read by a forward hook, a lazily built projection head (``Linear, LeakyReLU, Linear``, created by a
mock forward at construction) maps both augmented views, and the README's SimCLR setting trains with the
normalized-temperature cross-entropy ``nt_xent_loss`` (dot products of the 2b projections, diagonal removed,
positives at ``i + b - 1`` and ``i``, temperature 0.1, summed and divided by ``2 (b - 1)``), Adam lr 3e-4.

Source: https://github.com/lucidrains/contrastive-learner
Commit: 7deadf7edac4e26eb303f9cc685781b2c7fa739c
Files: ``contrastive_learner/contrastive_learner.py`` (all of it), ``README.md`` (the SimCLR usage: the learner's
arguments and the training loop)
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-contrastive-learner.txt)
Domain: self-supervised contrastive learning (SimCLR-style NT-Xent on two augmented views)

Kept as written: ``contrastive_learner.py`` entirely (the helpers, ``contrastive_loss``, ``nt_xent_loss``,
``RandomApply``, ``EMA`` / ``update_moving_average``, ``OutputHiddenLayer``, ``ContrastiveLearner`` with its
singleton-built projection and its mock forward in ``__init__``; the momentum / bilinear / one-sided branches are
copied but not taken by the README's SimCLR setting), the README's SimCLR arguments (``hidden_layer='avgpool'``,
``project_hidden=True``, ``project_dim=128``, ``use_nt_xent_loss=True``, ``temperature=0.1``,
``augment_both=True``) and its loop (``loss = learner(images)``, zero_grad, backward, step; Adam lr 3e-4 over
``learner.parameters()``).

Deviations from the original:
- torchvision is not here: ``models.resnet50(pretrained=True)`` becomes the written-out ResNet-18 of
  ``_tv_resnet.py`` (same module names, among them ``avgpool``; randomly initialized; channel widths / 8);
- kornia is not here: ``augs.ColorJitter``, ``augs.RandomGrayscale``, ``augs.RandomHorizontalFlip``,
  ``filters.GaussianBlur2d`` and ``augs.RandomResizedCrop`` are written out in plain torch in ``_kornia_augs.py``,
  one random draw per call for the whole batch (kornia draws per image), drawing from the global torch RNG;
  ColorJitter's hue shift is a rotation in YIQ space;
- sizes for 2 CPU cores: image_size 256 -> 64 (32 would leave ResNet's last stage at 1x1, where the mock forward's
  single image cannot be batch-normed), 16 images per step (README: 20);
- ``sample_batch_images()`` (``torch.randn`` in the README) draws 16 of 128 synthetic 64x64 images made from
  ``seed`` (one of 8 coloured shapes, a square, disk, cross or stripes, in one of two colours, at a random place on
  a dim noisy background): the instance to recognise across views;
- ``build(seed)`` seeds torch and Python's ``random`` (``RandomApply`` draws from it);
- in ``forward`` the queries' augmented batch is named (``view = transform_fn(x)``) so that the ``one_view_twice``
  variant can reuse it; the module's imports are regrouped at the top; the copied code reads the variant from a
  ``bug`` attribute on the learner (``nt_xent_loss`` takes it as a keyword);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys
from functools import partial, wraps

import torch
import torch.nn.functional as F
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet
from _api import Bug, Program
from _kornia_augs import augs, filters

N_IMAGES, BATCH, IMAGE_SIZE = 128, 16, 64  # (port) sizes


# ---- contrastive_learner/contrastive_learner.py, as written (kornia's augs and filters above) -------------------
# helper functions

def identity(x): return x

def default(val, def_val):
    return def_val if val is None else val

def flatten(t):
    return t.reshape(t.shape[0], -1)

def safe_concat(arr, el, dim=0):
    if arr is None:
        return el
    return torch.cat((arr, el), dim=dim)

def singleton(cache_key):
    def inner_fn(fn):
        @wraps(fn)
        def wrapper(self, *args, **kwargs):
            instance = getattr(self, cache_key)
            if instance is not None:
                return instance

            instance = fn(self, *args, **kwargs)
            setattr(self, cache_key, instance)
            return instance
        return wrapper
    return inner_fn

# losses

def contrastive_loss(queries, keys, temperature = 0.1):
    b, device = queries.shape[0], queries.device
    logits = queries @ keys.t()
    logits = logits - logits.max(dim=-1, keepdim=True).values
    logits /= temperature
    return F.cross_entropy(logits, torch.arange(b, device=device))

def nt_xent_loss(queries, keys, temperature = 0.1, bug = None):  # (port) bug: the variant
    b, device = queries.shape[0], queries.device

    n = b * 2
    projs = torch.cat((queries, keys))
    logits = projs @ projs.t()

    mask = torch.eye(n, device=device).bool()
    logits = logits[~mask].reshape(n, n - 1)
    logits /= temperature

    labels = torch.cat(((torch.arange(b, device=device) + b - 1), torch.arange(b, device=device)), dim=0)
    if bug == "nt_xent_labels_not_offset":
        labels = torch.cat((torch.arange(b, device=device), torch.arange(b, device=device)), dim=0)
    loss = F.cross_entropy(logits, labels, reduction='sum')
    loss /= 2 * (b - 1)
    return loss

# augmentation utils

class RandomApply(nn.Module):
    def __init__(self, fn, p):
        super().__init__()
        self.fn = fn
        self.p = p
    def forward(self, x):
        if random.random() > self.p:
            return x
        return self.fn(x)

# exponential moving average

class EMA():
    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def update_average(self, old, new):
        if old is None:
            return new
        return old * self.beta + (1 - self.beta) * new

def update_moving_average(ema_updater, ma_model, current_model):
    for current_params, ma_params in zip(current_model.parameters(), ma_model.parameters()):
        old_weight, up_weight = ma_params.data, current_params.data
        ma_params.data = ema_updater.update_average(old_weight, up_weight)

# hidden layer extractor class

class OutputHiddenLayer(nn.Module):
    def __init__(self, net, layer = -2):
        super().__init__()
        self.net = net
        self.layer = layer

        self.hidden = None
        self._register_hook()

    def _find_layer(self):
        if type(self.layer) == str:
            modules = dict([*self.net.named_modules()])
            return modules.get(self.layer, None)
        elif type(self.layer) == int:
            children = [*self.net.children()]
            return children[self.layer]
        return None

    def _register_hook(self):
        def hook(_, __, output):
            self.hidden = output

        layer = self._find_layer()
        assert layer is not None, f'hidden layer ({self.layer}) not found'
        handle = layer.register_forward_hook(hook)

    def forward(self, x):
        if self.layer == -1:
            return self.net(x)

        _ = self.net(x)
        hidden = self.hidden
        self.hidden = None
        assert hidden is not None, f'hidden layer {self.layer} never emitted an output'
        return hidden

# main class

class ContrastiveLearner(nn.Module):
    def __init__(self, net, image_size, hidden_layer = -2, project_hidden = True, project_dim=128, augment_both=True, use_nt_xent_loss=False, augment_fn = None, use_bilinear = False, use_momentum = False, momentum_value = 0.999, key_encoder = None, temperature = 0.1):
        super().__init__()
        self.net = OutputHiddenLayer(net, layer=hidden_layer)

        DEFAULT_AUG = nn.Sequential(
            RandomApply(augs.ColorJitter(0.8, 0.8, 0.8, 0.2), p=0.8),
            augs.RandomGrayscale(p=0.2),
            augs.RandomHorizontalFlip(),
            RandomApply(filters.GaussianBlur2d((3, 3), (1.5, 1.5)), p=0.1),
            augs.RandomResizedCrop((image_size, image_size))
        )

        self.augment = default(augment_fn, DEFAULT_AUG)

        self.augment_both = augment_both

        self.temperature = temperature
        self.use_nt_xent_loss = use_nt_xent_loss

        self.project_hidden = project_hidden
        self.projection = None
        self.project_dim = project_dim

        self.use_bilinear = use_bilinear
        self.bilinear_w = None

        self.use_momentum = use_momentum
        self.ema_updater = EMA(momentum_value)
        self.key_encoder = key_encoder

        # for accumulating queries and keys across calls
        self.queries = None
        self.keys = None

        # send a mock image tensor to instantiate parameters
        self.forward(torch.randn(1, 3, image_size, image_size))

    @singleton('key_encoder')
    def _get_key_encoder(self):
        key_encoder = copy.deepcopy(self.net)
        key_encoder._register_hook()
        return key_encoder

    @singleton('bilinear_w')
    def _get_bilinear(self, hidden):
        _, dim = hidden.shape
        return nn.Parameter(torch.eye(dim, device=device, dtype=dtype)).to(hidden)

    @singleton('projection')
    def _get_projection_fn(self, hidden):
        _, dim = hidden.shape

        return nn.Sequential(
            nn.Linear(dim, dim, bias = False),
            nn.LeakyReLU(inplace=True),
            nn.Linear(dim, self.project_dim, bias = False)
        ).to(hidden)

    def reset_moving_average(self):
        assert self.use_momentum, 'must be using momentum method for key encoder'
        del self.key_encoder
        self.key_encoder = None

    def update_moving_average(self):
        assert self.key_encoder is not None, 'key encoder has not been created yet'
        self.key_encoder = update_moving_average(self.ema_updater, self.key_encoder, self.net)

    def calculate_loss(self):
        assert self.queries is not None and self.keys is not None, 'no queries or keys accumulated'
        loss_fn = nt_xent_loss if self.use_nt_xent_loss else contrastive_loss
        if loss_fn is nt_xent_loss:  # (port) the variant passed on
            loss_fn = partial(nt_xent_loss, bug=getattr(self, 'bug', None))
        loss = loss_fn(self.queries, self.keys, temperature = self.temperature)
        self.queries = self.keys = None
        return loss

    def forward(self, x, accumulate = False):
        b, c, h, w, device = *x.shape, x.device
        transform_fn = self.augment if self.augment_both else noop

        query_encoder = self.net
        view = transform_fn(x)  # (port) named, for the one_view_twice variant
        queries = query_encoder(view)

        key_encoder = self.net if not self.use_momentum else self._get_key_encoder()
        keys = key_encoder(self.augment(x))
        if getattr(self, "bug", None) == "one_view_twice":  # (port) set at build
            keys = key_encoder(view)  # the queries' augmented batch encoded again: both views are one view

        if self.use_momentum:
            keys = keys.detach()

        queries, keys = map(flatten, (queries, keys))

        if self.use_bilinear:
            W = self._get_bilinear(keys)
            keys = (W @ keys.t()).t()

        project_fn = self._get_projection_fn(queries) if self.project_hidden else identity
        queries, keys = map(project_fn, (queries, keys))

        self.queries = safe_concat(self.queries, queries)
        self.keys = safe_concat(self.keys, keys)

        return self.calculate_loss() if not accumulate else None


# ---- (port) the data: synthetic images in place of torch.randn ---------------------------------------------------

def make_images(seed):
    """128 images of 8 kinds (4 shapes x 2 colours) at random places on a dim noisy background, in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(IMAGE_SIZE), torch.arange(IMAGE_SIZE), indexing="ij")
    colours = torch.rand(2, 3, generator=g) * 0.7 + 0.3
    out = torch.rand(N_IMAGES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g) * 0.2
    for i in range(N_IMAGES):
        shape, colour = i % 4, (i // 4) % 2
        cy, cx = torch.randint(14, IMAGE_SIZE - 14, (2,), generator=g).tolist()
        dy, dx = (yy - cy).abs(), (xx - cx).abs()
        mask = [(dy < 10) & (dx < 10), dy ** 2 + dx ** 2 < 100, ((dy < 3) & (dx < 12)) | ((dx < 3) & (dy < 12)),
                (dy < 12) & (dx < 12) & ((yy // 4) % 2 == 0)][shape]
        out[i][:, mask] = colours[colour].view(3, 1)
    return out


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    pool = make_images(seed)
    g = torch.Generator().manual_seed(seed)

    def sample_batch_images():
        return pool[torch.randperm(N_IMAGES, generator=g)[:BATCH]]

    resnet = _tv_resnet.resnet18(pretrained=False, width=8)

    learner = ContrastiveLearner(
        resnet,
        image_size = IMAGE_SIZE,
        hidden_layer = 'avgpool',  # layer name where output is hidden dimension. this can also be an integer specifying the index of the child
        project_hidden = True,     # use projection head
        project_dim = 128,         # projection head dimensions, 128 from paper
        use_nt_xent_loss = True,   # the above mentioned loss, abbreviated
        temperature = 0.1,         # temperature
        augment_both = True        # augment both query and key
    )

    learner.bug = bug  # (port) the variant

    if bug == "optimizer_over_resnet_only":
        opt = torch.optim.Adam(resnet.parameters(), lr=3e-4)  # the wrapped net's parameters, not the learner's
    else:
        opt = torch.optim.Adam(learner.parameters(), lr=3e-4)

    def train_step():
        images = sample_batch_images()
        loss = learner(images)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return Program(name="contrastivelearner_simclr", model=learner, batch=(sample_batch_images(),),
                   loss_fn=lambda loss, _targets: loss, optimizer=opt, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the optimizer built over the wrapped network (the README hands ``resnet`` to the learner, and the
    # projection head only exists inside the learner); the projection head is never updated.
    Bug("optimizer_over_resnet_only", functools.partial(_build, bug="optimizer_over_resnet_only"), "four_structures",
        ("projection",)),
    # classic NT-Xent slip: the positives' labels not offset for the removed diagonal (``arange(b)`` for both halves),
    # so every row is pulled towards a neighbour's view instead of its own (the label layout the repository's
    # https://github.com/lucidrains/contrastive-learner/issues/2 walks through).
    Bug("nt_xent_labels_not_offset", functools.partial(_build, bug="nt_xent_labels_not_offset"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: one augmented view encoded twice instead of two independent views (the slip caught in review in
    # https://github.com/catalyst-team/catalyst/pull/1278: ``emb2 = self.model(batch["aug1"])``); the positives are
    # identical and the task is trivial.
    Bug("one_view_twice", functools.partial(_build, bug="one_view_twice"), "learning_ledger", ("TASK",)),
]
