"""Prototypical Networks for few-shot classification (Snell, Swersky & Zemel), the authors' own code: a four-block
conv encoder, class prototypes as the mean support embedding, softmax over negative squared euclidean distances of
the queries, trained episodically on Omniglot (60-way 5-shot 5-query, Adam 1e-3, lr halved every 20 epochs) by the
repository's hook-driven ``Engine``.

Source: https://github.com/jakesnell/prototypical-networks
Commit: c9bb4d258267c11cb6e23f0a19242d24ca98ad8a
Files: ``protonets/models/few_shot.py``, ``protonets/models/utils.py``, ``protonets/models/factory.py``,
``protonets/engine.py``, ``protonets/data/omniglot.py``, ``protonets/data/base.py``, ``protonets/utils/`` (model,
log, ``filter_opt``), ``scripts/train/few_shot/train.py``, ``scripts/train/few_shot/run_train.py`` (the defaults)
License: MIT (Copyright (c) 2017 Jake Snell; full text in LICENSES/jakesnell-prototypical-networks.txt)
Domain: few-shot / metric learning (prototypical networks, episodic training)

Kept as written: ``Flatten``, ``Protonet.loss`` (support and query concatenated through the encoder, prototypes
``z[:n_class*n_support].view(n_class, n_support, z_dim).mean(1)``, ``euclidean_dist``, ``log_softmax(-dists)``, the
gathered NLL, accuracy), ``load_protonet_conv`` (conv-BN-ReLU-maxpool blocks), the model registry, ``Engine.train``
(``model.train()`` per epoch, the hooks, zero_grad / ``model.loss`` / backward / step), ``extract_episode``
(``torch.randperm`` of a class's examples into support and query), ``EpisodicBatchSampler`` (``randperm`` of the
classes per episode), ``load`` of the splits (test way 5, test query 15, test shot = shot), ``train.py``'s hooks
(StepLR(decay_every, 0.5) stepped at each epoch's start, the meters, validation at each epoch's end with
``model_utils.evaluate``, patience).

Deviations from the original:
- Omniglot is not here (nor PIL, torchvision's ``ToTensor`` or torchnet): the classes are synthetic "characters"
  made from ``seed``: each a few random strokes on a 16x16 canvas, drawn 20 times with a one-pixel jitter and ink
  noise, named ``alphabet/characterNN/rotDDD`` as in the vinyals split and rotated by 0/90/180/270 degrees with
  ``torch.rot90`` (the original's PIL ``rotate``); 30 characters for training (120 classes), 8 for validation (32);
  ink is 1 and background 0 (the original's ``1.0 - image``); ``load_class_images`` keeps its cache (per build).
  torchnet's ``ListDataset``, ``TransformDataset``, ``compose`` and ``AverageValueMeter`` are written out.
- ``torch.manual_seed(1234)`` -> ``torch.manual_seed(seed)``.
- sizes for 2 CPU cores: images 28x28 -> 16x16 (four 2x poolings still end at 1x1), ``hid_dim`` / ``z_dim`` 64 -> 32,
  ``data.way`` 60 -> 10, ``train_episodes`` 100 -> 20, ``test_episodes`` 100 -> 4; shot 5, query 5, test way 5,
  test query 15 kept.
- ``Engine.train`` is a generator that yields each update's loss after its ``on_update`` hook; ``train_step`` is one
  episode of it. tqdm, the trace file, ``opt.json``, ``torch.save`` of the best model and the prints are dropped.
- the Program's model is the Protonet's ``encoder`` (the module the optimizer trains; ``Protonet`` itself has no
  ``forward``), its batch one training episode as ``(x, target_inds)`` with ``x`` the support and query images
  concatenated as ``loss`` does, and ``loss_fn`` is the lines of ``loss`` after the encoder; ``eval_fn`` is
  ``model_utils.evaluate`` on the validation loader (mean loss).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, UP032, PLR0402, PERF102

from __future__ import annotations

import functools
import pathlib
import sys
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.optim.lr_scheduler as lr_scheduler
from torch.autograd import Variable

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

IMG = 16  # (port) 28


# ------------------------------------------------------------------------------------ protonets/models/factory.py
MODEL_REGISTRY = {}

def register_model(model_name):
    def decorator(f):
        MODEL_REGISTRY[model_name] = f
        return f

    return decorator

def get_model(model_name, model_opt):
    if model_name in MODEL_REGISTRY:
        return MODEL_REGISTRY[model_name](**model_opt)
    else:
        raise ValueError("Unknown model {:s}".format(model_name))


# -------------------------------------------------------------------------------------- protonets/models/utils.py
def euclidean_dist(x, y):
    # x: N x D
    # y: M x D
    n = x.size(0)
    m = y.size(0)
    d = x.size(1)
    assert d == y.size(1)

    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)

    return torch.pow(x - y, 2).sum(2)


# ----------------------------------------------------------------------------------- protonets/models/few_shot.py
class Flatten(nn.Module):
    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        return x.view(x.size(0), -1)

class Protonet(nn.Module):
    def __init__(self, encoder):
        super(Protonet, self).__init__()

        self.encoder = encoder
        self.bug = None  # (port) the bug switch

    def loss(self, sample):
        xs = Variable(sample['xs']) # support
        xq = Variable(sample['xq']) # query

        n_class = xs.size(0)
        assert xq.size(0) == n_class
        n_support = xs.size(1)
        n_query = xq.size(1)

        target_inds = torch.arange(0, n_class).view(n_class, 1, 1).expand(n_class, n_query, 1).long()
        target_inds = Variable(target_inds, requires_grad=False)

        if xq.is_cuda:
            target_inds = target_inds.cuda()

        x = torch.cat([xs.view(n_class * n_support, *xs.size()[2:]),
                       xq.view(n_class * n_query, *xq.size()[2:])], 0)

        z = self.encoder.forward(x)
        return _loss_after_encoder(z, target_inds, n_class, n_support, n_query, self.bug)


def _loss_after_encoder(z, target_inds, n_class, n_support, n_query, bug=None):
    """(port) the rest of ``Protonet.loss`` as written, split off so the Program's loss_fn runs the same lines."""
    z_dim = z.size(-1)

    if bug == "support_viewed_shot_major":
        z_proto = z[:n_class*n_support].view(n_support, n_class, z_dim).mean(0)
    else:
        z_proto = z[:n_class*n_support].view(n_class, n_support, z_dim).mean(1)
    zq = z[n_class*n_support:]

    dists = euclidean_dist(zq, z_proto)

    if bug == "log_softmax_over_queries":
        log_p_y = F.log_softmax(-dists, dim=0).view(n_class, n_query, -1)
    else:
        log_p_y = F.log_softmax(-dists, dim=1).view(n_class, n_query, -1)

    loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()

    _, y_hat = log_p_y.max(2)
    acc_val = torch.eq(y_hat, target_inds.squeeze()).float().mean()

    return loss_val, {
        'loss': loss_val.item(),
        'acc': acc_val.item()
    }

@register_model('protonet_conv')
def load_protonet_conv(**kwargs):
    x_dim = kwargs['x_dim']
    hid_dim = kwargs['hid_dim']
    z_dim = kwargs['z_dim']

    def conv_block(in_channels, out_channels):
        return nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.MaxPool2d(2)
        )

    encoder = nn.Sequential(
        conv_block(x_dim[0], hid_dim),
        conv_block(hid_dim, hid_dim),
        conv_block(hid_dim, hid_dim),
        conv_block(hid_dim, z_dim),
        Flatten()
    )

    return Protonet(encoder)


# --------------------------------------------------------------------------------------------- protonets/engine.py
class Engine(object):
    def __init__(self):
        hook_names = ['on_start', 'on_start_epoch', 'on_sample', 'on_forward',
                      'on_backward', 'on_end_epoch', 'on_update', 'on_end']

        self.hooks = { }
        for hook_name in hook_names:
            self.hooks[hook_name] = lambda state: None

    def train(self, **kwargs):
        state = {
            'model': kwargs['model'],
            'loader': kwargs['loader'],
            'optim_method': kwargs['optim_method'],
            'optim_config': kwargs['optim_config'],
            'max_epoch': kwargs['max_epoch'],
            'epoch': 0, # epochs done so far
            't': 0, # samples seen so far
            'batch': 0, # samples seen in current epoch
            'stop': False
        }

        state['optimizer'] = state['optim_method'](state['model'].parameters(), **state['optim_config'])
        self.state = state  # (port) the optimizer, for the Program

        self.hooks['on_start'](state)
        yield None  # (port) the build stops here, before the first epoch
        while state['epoch'] < state['max_epoch'] and not state['stop']:
            state['model'].train()

            self.hooks['on_start_epoch'](state)

            state['epoch_size'] = len(state['loader'])

            for sample in state['loader']:  # (port) tqdm dropped
                state['sample'] = sample
                self.hooks['on_sample'](state)

                if self.bug != "zero_grad_dropped":
                    state['optimizer'].zero_grad()
                loss, state['output'] = state['model'].loss(state['sample'])
                self.hooks['on_forward'](state)

                loss.backward()
                self.hooks['on_backward'](state)

                state['optimizer'].step()

                state['t'] += 1
                state['batch'] += 1
                self.hooks['on_update'](state)
                yield loss.item()  # (port) one update

            state['epoch'] += 1
            state['batch'] = 0
            self.hooks['on_end_epoch'](state)

        self.hooks['on_end'](state)


# ------------------------------------------------------------------------- (port) torchnet pieces, written out
class ListDataset(torch.utils.data.Dataset):
    def __init__(self, elem_list):
        self.list = elem_list

    def __len__(self):
        return len(self.list)

    def __getitem__(self, idx):
        return self.list[idx]


class TransformDataset(torch.utils.data.Dataset):
    def __init__(self, dataset, transform):
        self.dataset, self.transform = dataset, transform

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, idx):
        return self.transform(self.dataset[idx])


def compose(transforms):
    def f(z):
        for t in transforms:
            z = t(z)
        return z
    return f


class AverageValueMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.n, self.sum = 0, 0.0

    def add(self, value):
        self.n += 1
        self.sum += value

    def value(self):
        return (self.sum / max(self.n, 1), 0.0)


# ------------------------------------------------------------------------------------------ protonets/data/base.py
def convert_dict(k, v):
    return { k: v }

class EpisodicBatchSampler(object):
    def __init__(self, n_classes, n_way, n_episodes):
        self.n_classes = n_classes
        self.n_way = n_way
        self.n_episodes = n_episodes

    def __len__(self):
        return self.n_episodes

    def __iter__(self):
        for i in range(self.n_episodes):
            yield torch.randperm(self.n_classes)[:self.n_way]


# -------------------------------------------------------------------------------------- protonets/data/omniglot.py
def synthetic_characters(seed, n_chars, n_drawers=20, offset=0):
    """(port) Omniglot's character folders: per character, 20 drawings of a few random strokes (ink 1)."""
    g = torch.Generator().manual_seed(seed * 1000 + 17 + offset)
    chars = {}
    for c in range(n_chars):
        base = torch.zeros(IMG + 4, IMG + 4)
        for _ in range(3):
            x0, y0, x1, y1 = (torch.randint(3, IMG + 1, (4,), generator=g)).tolist()
            for s in torch.linspace(0, 1, 24).tolist():
                base[round(y0 + s * (y1 - y0)), round(x0 + s * (x1 - x0))] = 1.0
        imgs = []
        for _ in range(n_drawers):
            dx, dy = torch.randint(0, 5, (2,), generator=g).tolist()
            img = base[dy:dy + IMG, dx:dx + IMG].clone()
            img = (img + 0.15 * torch.randn(IMG, IMG, generator=g)).clamp(0, 1)
            imgs.append(img.view(1, IMG, IMG))
        chars['Synthetic{:d}/character{:02d}'.format(offset // 100, c + 1)] = torch.stack(imgs)
    return chars


def load_class_images(cache, characters, d):
    if d['class'] not in cache:
        alphabet, character, rot = d['class'].split('/')
        # (port) the images of the character folder, rotated as rotate_image does (counter-clockwise)
        cache[d['class']] = torch.rot90(characters[alphabet + '/' + character], int(float(rot[3:])) // 90, (2, 3))

    return { 'class': d['class'], 'data': cache[d['class']] }

def extract_episode(n_support, n_query, d):
    # data: N x C x H x W
    n_examples = d['data'].size(0)

    if n_query == -1:
        n_query = n_examples - n_support

    example_inds = torch.randperm(n_examples)[:(n_support+n_query)]
    support_inds = example_inds[:n_support]
    query_inds = example_inds[n_support:]

    xs = d['data'][support_inds]
    xq = d['data'][query_inds]

    return {
        'class': d['class'],
        'xs': xs,
        'xq': xq
    }

def load(opt, splits, split_lists, characters):
    ret = { }
    cache = { }  # (port) OMNIGLOT_CACHE, per build
    for split in splits:
        if split in ['val', 'test'] and opt['data.test_way'] != 0:
            n_way = opt['data.test_way']
        else:
            n_way = opt['data.way']

        if split in ['val', 'test'] and opt['data.test_shot'] != 0:
            n_support = opt['data.test_shot']
        else:
            n_support = opt['data.shot']

        if split in ['val', 'test'] and opt['data.test_query'] != 0:
            n_query = opt['data.test_query']
        else:
            n_query = opt['data.query']

        if split in ['val', 'test']:
            n_episodes = opt['data.test_episodes']
        else:
            n_episodes = opt['data.train_episodes']

        transforms = [partial(convert_dict, 'class'),
                      partial(load_class_images, cache, characters),
                      partial(extract_episode, n_support, n_query)]

        transforms = compose(transforms)

        class_names = list(split_lists[split])  # (port) the split file's lines
        ds = TransformDataset(ListDataset(class_names), transforms)

        sampler = EpisodicBatchSampler(len(ds), n_way, n_episodes)

        # use num_workers=0, otherwise may receive duplicate episodes
        ret[split] = torch.utils.data.DataLoader(ds, batch_sampler=sampler, num_workers=0)

    return ret


# -------------------------------------------------------------------------------------- protonets/utils/model.py
def filter_opt(opt, tag):
    ret = { }

    for k,v in opt.items():
        tokens = k.split('.')
        if tokens[0] == tag:
            ret['.'.join(tokens[1:])] = v

    return ret

def model_load(opt):
    model_opt = filter_opt(opt, 'model')
    model_name = model_opt['model_name']

    del model_opt['model_name']

    return get_model(model_name, model_opt)

def evaluate(model, data_loader, meters, desc=None):
    model.eval()

    for field,meter in meters.items():
        meter.reset()

    for sample in data_loader:
        _, output = model.loss(sample)
        for field, meter in meters.items():
            meter.add(output[field])

    return meters


# ----------------------------------------------------------------------------- scripts/train/few_shot/train.py
def _build(seed, bug=None):
    # run_train.py's defaults (port: sizes shrunk)
    opt = {'data.dataset': 'omniglot', 'data.split': 'vinyals', 'data.way': 10, 'data.shot': 5, 'data.query': 5,
           'data.test_way': 5, 'data.test_shot': 0, 'data.test_query': 15, 'data.train_episodes': 20,
           'data.test_episodes': 4, 'data.trainval': False, 'data.sequential': False, 'data.cuda': False,
           'model.model_name': 'protonet_conv', 'model.x_dim': '1,{:d},{:d}'.format(IMG, IMG), 'model.hid_dim': 32,
           'model.z_dim': 32, 'train.epochs': 10000, 'train.optim_method': 'Adam', 'train.learning_rate': 0.001,
           'train.decay_every': 20, 'train.weight_decay': 0.0, 'train.patience': 200, 'log.fields': 'loss,acc'}

    # Postprocess arguments
    opt['model.x_dim'] = list(map(int, opt['model.x_dim'].split(',')))
    opt['log.fields'] = opt['log.fields'].split(',')

    torch.manual_seed(seed)  # (port) 1234

    # (port) the vinyals split files and the character folders
    train_chars = synthetic_characters(seed, 30, offset=0)
    val_chars = synthetic_characters(seed, 8, offset=100)
    split_lists = {'train': [k + '/rot{:03d}'.format(r) for k in train_chars for r in (0, 90, 180, 270)],
                   'val': [k + '/rot{:03d}'.format(r) for k in val_chars for r in (0, 90, 180, 270)]}
    characters = {**train_chars, **val_chars}

    data = load(opt, ['train', 'val'], split_lists, characters)
    train_loader = data['train']
    val_loader = data['val']

    model = model_load(opt)
    model.bug = bug

    engine = Engine()
    engine.bug = bug

    meters = { 'train': { field: AverageValueMeter() for field in opt['log.fields'] } }

    if val_loader is not None:
        meters['val'] = { field: AverageValueMeter() for field in opt['log.fields'] }

    def on_start(state):
        state['scheduler'] = lr_scheduler.StepLR(state['optimizer'], opt['train.decay_every'], gamma=0.5)
    engine.hooks['on_start'] = on_start

    def on_start_epoch(state):
        for split, split_meters in meters.items():
            for field, meter in split_meters.items():
                meter.reset()
        state['scheduler'].step()
    engine.hooks['on_start_epoch'] = on_start_epoch

    def on_update(state):
        for field, meter in meters['train'].items():
            meter.add(state['output'][field])
    engine.hooks['on_update'] = on_update

    def on_end_epoch(hook_state, state):
        if val_loader is not None:
            if 'best_loss' not in hook_state:
                hook_state['best_loss'] = np.inf
            if 'wait' not in hook_state:
                hook_state['wait'] = 0

        if val_loader is not None:
            evaluate(state['model'],
                     val_loader,
                     meters['val'],
                     desc="Epoch {:d} valid".format(state['epoch']))

        meter_vals = {split: {f: m.value()[0] for f, m in ms.items()} for split, ms in meters.items()}
        meter_vals['epoch'] = state['epoch']

        if val_loader is not None:
            if meter_vals['val']['loss'] < hook_state['best_loss']:
                hook_state['best_loss'] = meter_vals['val']['loss']
                hook_state['wait'] = 0
            else:
                hook_state['wait'] += 1

                if hook_state['wait'] > opt['train.patience']:
                    state['stop'] = True

    engine.hooks['on_end_epoch'] = partial(on_end_epoch, { })

    steps = engine.train(
        model = model,
        loader = train_loader,
        optim_method = getattr(optim, opt['train.optim_method']),
        optim_config = { 'lr': opt['train.learning_rate'],
                         'weight_decay': opt['train.weight_decay'] },
        max_epoch = opt['train.epochs']
    )
    next(steps)  # (port) up to the first epoch: the optimizer and the scheduler exist

    # the Program's batch: one training episode, as loss() lays it out
    sample = next(iter(train_loader))
    xs, xq = sample['xs'], sample['xq']
    n_class, n_support, n_query = xs.size(0), xs.size(1), xq.size(1)
    x = torch.cat([xs.view(n_class * n_support, *xs.size()[2:]), xq.view(n_class * n_query, *xq.size()[2:])], 0)
    target_inds = torch.arange(0, n_class).view(n_class, 1, 1).expand(n_class, n_query, 1).long()

    def loss_fn(z, target_inds):
        return _loss_after_encoder(z, target_inds, n_class, n_support, n_query, bug)[0]

    def eval_fn(_model, _batch=None):
        return evaluate(model, val_loader, meters['val'])['loss'].value()[0]

    return Program(name="protonetsnell_omniglot", model=model.encoder, batch=(x, target_inds), loss_fn=loss_fn,
                   optimizer=engine.state['optimizer'], train_step=lambda: next(steps), eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the support embeddings viewed (n_support, n_class, z_dim) and averaged over dim 0 (classic view-order slip):
    # the episode's support is class-major, so each "prototype" averages one shot of several classes.
    Bug("support_viewed_shot_major", functools.partial(_build, bug="support_viewed_shot_major"), "learning_ledger",
        ("TASK",)),
    # log_softmax over the queries (dim 0) instead of over the prototypes (classic wrong-axis normalization).
    Bug("log_softmax_over_queries", functools.partial(_build, bug="log_softmax_over_queries"), "learning_ledger",
        ("OBJECTIVE",)),
    # the engine's zero_grad left out (classic): every episode's gradient piles onto the previous ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
