"""Wide Residual Networks as trained by the paper's author, szagoruyko/wide-residual-networks ``pytorch/``: the
network is a *function* ``f(input, params, mode)`` over a flat dict of hand-made tensors (``utils.conv_params``
Kaiming-normal convs, ``bnparams`` with ``torch.rand`` BN scales, a linear head), pre-activation blocks with a 1x1
``convdim`` shortcut taken from the activated input where the width changes, functional ``F.batch_norm`` with
running statistics kept in the same dict (``set_requires_grad_except_bn_`` leaves them out of training); trained by
torchnet's ``Engine`` with ``h(sample) = F.cross_entropy(f(inputs, params, sample[2]), targets)``, SGD(lr 0.1,
momentum 0.9, weight decay 5e-4) over ``params`` that require grad, the optimizer re-created with lr x 0.2 at each
of ``--epoch_step`` epochs, and ``engine.test`` (mode False) after each epoch.

Source: https://github.com/szagoruyko/wide-residual-networks
Commit: ae6d0d0561484172790c7a63c8ce6ade5a5a2914
Files: pytorch/main.py, pytorch/resnet.py, pytorch/utils.py (+ torchnet's ``Engine.train``/``Engine.test`` loop)
License: BSD-2-Clause (Copyright (c) 2016, Sergey Zagoruyko; full text in
LICENSES/szagoruyko-wide-residual-networks.txt)
Domain: vision, image classification (functional wide ResNet over a parameter dict, CIFAR-10)

Deviations from the original:
- sizes: ``--depth 16 --width 1`` (the defaults) -> ``--depth 10`` (one block per group; widths 16/32/64 kept),
  batch_size 128 -> 16, 50000 training images -> 256, 10000 test images -> 32, ``--epoch_step`` [60,120,160] ->
  [4,8,12] (epochs of 16 batches); images stay 32x32 (``f``'s ``avg_pool2d(o, 8)`` needs the 8x8 map);
- data: torchvision's CIFAR-10 download is replaced by synthetic RGB images made from ``seed`` (each class has its
  own colour, plus smooth noise; the label is the class whose colour is nearest to the image's mean colour);
  torchvision is not available, so the transforms (``Pad(4, reflect)``, ``RandomHorizontalFlip``, ``RandomCrop(32)``,
  ``ToTensor``, ``Normalize`` with the script's mean/std) are written out in plain torch; DataLoader without workers;
- the parameter dict is kept (same keys, shapes, init, ``requires_grad`` rule) and ``f`` reads it unchanged, but its
  tensors are registered as parameters and buffers of a small ``nn.Module`` (``WRNParams``, submodules along the
  dotted keys, so ``named_parameters()`` gives the dict's keys) whose ``forward(x)`` is ``f(x, params, self.training)``,
  so that a model object exists; ``utils.flatten`` (nested_dict) is written out; ``cast`` is the identity (CPU, float);
  ``data_parallel`` with one device is ``f`` itself;
- torchnet's ``Engine`` is written out: one ``train_step`` is one sample of ``Engine.train`` (the ``on_sample`` hook
  appends ``state['train']``, then ``optimizer.zero_grad()`` and ``optimizer.step(closure)`` with the closure's
  ``h(sample)`` + ``backward``); an exhausted loader ends the epoch (``on_end_epoch``: ``engine.test`` on the test
  set with mode False) and the next starts with ``on_start_epoch`` (the optimizer re-created at the epoch steps);
  ``eval_fn`` is ``engine.test``'s class accuracy on a batch; tqdm, meters, logging, ``torch.save`` and resume are
  dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP031, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
from torch.nn.init import kaiming_normal_
from torch.optim import SGD
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST, NUM_CLASSES = 256, 32, 10


class _Opt:
    model = 'resnet'
    depth = 10  # 16 in the original's default
    width = 1
    dataset = 'CIFAR10'
    dtype = 'float'
    batch_size = 16  # 128
    lr = 0.1
    epochs = 200
    weight_decay = 0.0005
    epoch_step = '[4,8,12]'  # '[60,120,160]'
    lr_decay_ratio = 0.2
    ngpu = 1


# ---- pytorch/utils.py ------------------------------------------------------------------------------------------

def cast(params, dtype='float'):
    if isinstance(params, dict):
        return {k: cast(v, dtype) for k,v in params.items()}
    else:
        return getattr(params, dtype)()  # params.cuda() if torch.cuda.is_available() dropped (CPU)


def conv_params(ni, no, k=1):
    return kaiming_normal_(torch.Tensor(no, ni, k, k))


def linear_params(ni, no):
    return {'weight': kaiming_normal_(torch.Tensor(no, ni)), 'bias': torch.zeros(no)}


def bnparams(n):
    return {'weight': torch.rand(n),
            'bias': torch.zeros(n),
            'running_mean': torch.zeros(n),
            'running_var': torch.ones(n)}


def data_parallel(f, input, params, mode, device_ids, output_device=None):
    assert isinstance(device_ids, list)
    return f(input, params, mode)  # len(device_ids) == 1: the multi-GPU branch is not copied


def flatten(params):
    # nested_dict(params).items_flat() written out: the dotted key of every leaf, None leaves dropped
    out = {}

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, prefix + (k,))
            elif v is not None:
                out['.'.join(prefix + (k,))] = v

    walk(params, ())
    return out


def batch_norm(x, params, base, mode):
    return F.batch_norm(x, weight=params[base + '.weight'],
                        bias=params[base + '.bias'],
                        running_mean=params[base + '.running_mean'],
                        running_var=params[base + '.running_var'],
                        training=mode)


def set_requires_grad_except_bn_(params, bug=None):
    for k, v in params.items():
        if bug == "bn_affine_frozen":
            # the running-statistics test widened to every BN tensor (classic): the BN scales and shifts keep their
            # ``torch.rand``/zero init and drop out of the optimizer's ``requires_grad`` list
            if '.bn' not in k and not k.startswith('bn'):
                v.requires_grad = True
            continue
        if not k.endswith('running_mean') and not k.endswith('running_var'):
            v.requires_grad = True


# ---- pytorch/resnet.py -----------------------------------------------------------------------------------------

def resnet(depth, width, num_classes, bug=None):
    assert (depth - 4) % 6 == 0, 'depth should be 6n+4'
    n = (depth - 4) // 6
    widths = [int(v * width) for v in (16, 32, 64)]

    def gen_block_params(ni, no):
        return {
            'conv0': conv_params(ni, no, 3),
            'conv1': conv_params(no, no, 3),
            'bn0': bnparams(ni),
            'bn1': bnparams(no),
            'convdim': conv_params(ni, no, 1) if ni != no else None,
        }

    def gen_group_params(ni, no, count):
        return {'block%d' % i: gen_block_params(ni if i == 0 else no, no)
                for i in range(count)}

    flat_params = cast(flatten({
        'conv0': conv_params(3, 16, 3),
        'group0': gen_group_params(16, widths[0], n),
        'group1': gen_group_params(widths[0], widths[1], n),
        'group2': gen_group_params(widths[1], widths[2], n),
        'bn': bnparams(widths[2]),
        'fc': linear_params(widths[2], num_classes),
    }))

    set_requires_grad_except_bn_(flat_params, bug=bug)

    def block(x, params, base, mode, stride):
        o1 = F.relu(batch_norm(x, params, base + '.bn0', mode), inplace=True)
        y = F.conv2d(o1, params[base + '.conv0'], stride=stride, padding=1)
        o2 = F.relu(batch_norm(y, params, base + '.bn1', mode), inplace=True)
        z = F.conv2d(o2, params[base + '.conv1'], stride=1, padding=1)
        if base + '.convdim' in params:
            return z + F.conv2d(o1, params[base + '.convdim'], stride=stride)
        else:
            return z + x

    def group(o, params, base, mode, stride):
        for i in range(n):
            o = block(o, params, '%s.block%d' % (base,i), mode, stride if i == 0 else 1)
        return o

    def f(input, params, mode):
        x = F.conv2d(input, params['conv0'], padding=1)
        g0 = group(x, params, 'group0', mode, 1)
        g1 = group(g0, params, 'group1', mode, 2)
        g2 = group(g1, params, 'group2', mode, 2)
        o = F.relu(batch_norm(g2, params, 'bn', mode))
        o = F.avg_pool2d(o, 8, 1, 0)
        o = o.view(o.size(0), -1)
        o = F.linear(o, params['fc.weight'], params['fc.bias'])
        return o

    return f, flat_params


class WRNParams(nn.Module):
    """The flat parameter dict as a module (port only): every tensor registered under its dotted key, the
    running statistics as buffers, the others as parameters with the ``requires_grad`` the rule gave them;
    ``self.params`` maps each key to the registered tensor, which ``f`` reads."""

    def __init__(self, f, flat_params):
        super().__init__()
        self.f = f
        self.params = {}
        for k, v in flat_params.items():
            *path, leaf = k.split('.')
            mod = self
            for p in path:
                if not hasattr(mod, p):
                    mod.add_module(p, nn.Module())
                mod = getattr(mod, p)
            if k.endswith(('running_mean', 'running_var')):
                mod.register_buffer(leaf, v.detach())
            else:
                mod.register_parameter(leaf, nn.Parameter(v.detach(), requires_grad=v.requires_grad))
            self.params[k] = getattr(mod, leaf)

    def forward(self, x):
        return self.f(x, self.params, self.training)


# ---- pytorch/main.py (data) ------------------------------------------------------------------------------------

MEAN = (torch.tensor([125.3, 123.0, 113.9]) / 255.0).view(3, 1, 1)
STD = (torch.tensor([63.0, 62.1, 66.7]) / 255.0).view(3, 1, 1)


class _SyntheticCIFAR(Dataset):
    """CIFAR-10-shaped images in [0, 1] (what ToTensor gives) with ``create_dataset``'s transforms written out."""

    def __init__(self, images, labels, train, seed):
        self.images, self.labels, self.train = images, labels, train
        self.gen = torch.Generator().manual_seed(seed + 17)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        if self.train:
            # T.Pad(4, padding_mode='reflect'), T.RandomHorizontalFlip(), T.RandomCrop(32)
            x = F.pad(x.unsqueeze(0), (4, 4, 4, 4), mode='reflect').squeeze(0)
            if torch.rand((), generator=self.gen) < 0.5:
                x = x.flip(-1)
            top, left = torch.randint(0, 9, (2,), generator=self.gen).tolist()
            x = x[:, top:top + 32, left:left + 32]
        # T.ToTensor(), T.Normalize(mean, std)
        return (x - MEAN) / STD, self.labels[i]


def _data(seed):
    gen = torch.Generator().manual_seed(seed)
    colours = torch.rand(NUM_CLASSES, 3, generator=gen)

    def make(n):
        cls = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(torch.randn(n, 3, 8, 8, generator=gen), size=(32, 32), mode="bilinear",
                              align_corners=False)
        x = (colours[cls].view(n, 3, 1, 1) + 0.12 * noise).clamp(0, 1)
        labels = torch.cdist(x.mean(dim=(2, 3)), colours).argmin(dim=1)
        return x, labels

    return colours, make(N_TRAIN), make(N_TEST)


def _build(seed, bug=None):
    opt = _Opt()
    epoch_step = __import__('json').loads(opt.epoch_step)
    num_classes = 10 if opt.dataset == 'CIFAR10' else 100

    torch.manual_seed(seed)
    colours, (train_x, train_y), (test_x, test_y) = _data(seed)

    def create_iterator(mode):
        data = _SyntheticCIFAR(train_x, train_y, True, seed) if mode else _SyntheticCIFAR(test_x, test_y, False, seed)
        return DataLoader(data, opt.batch_size, shuffle=mode, num_workers=0,
                          generator=torch.Generator().manual_seed(seed + 1))

    train_loader = create_iterator(True)
    test_loader = create_iterator(False)

    f, params = resnet(opt.depth, opt.width, num_classes, bug=bug)
    model = WRNParams(f, params)
    params = model.params

    def create_optimizer(opt, lr):
        return SGD([v for v in params.values() if v.requires_grad], lr, momentum=0.9, weight_decay=opt.weight_decay)

    optimizer = create_optimizer(opt, opt.lr)

    def h(sample):
        inputs = cast(sample[0], opt.dtype)
        targets = cast(sample[1], 'long')
        mode = True if bug == "test_in_train_mode" else sample[2]
        # ^ the mode argument hard-coded to True (classic): engine.test then normalizes each test batch by its own
        #   statistics and overwrites the running averages with the test set's
        y = data_parallel(f, inputs, params, mode, list(range(opt.ngpu))).float()
        return F.cross_entropy(y, targets), y

    # torchnet Engine state and hooks
    state = {'network': h, 'iterator': None, 'maxepoch': opt.epochs, 'optimizer': optimizer, 'epoch': 0, 't': 0,
             'train': True}

    def on_sample(state):
        state['sample'].append(state['train'])

    def on_start_epoch(state):
        state['iterator'] = iter(train_loader)

        epoch = state['epoch'] + 1
        if epoch in epoch_step:
            lr = state['optimizer'].param_groups[0]['lr']
            state['optimizer'] = create_optimizer(opt, lr * opt.lr_decay_ratio)

    def engine_test(h, iterator):
        correct, total = 0, 0
        for sample in iterator:
            sample = list(sample)
            sample.append(False)  # on_sample with state['train'] False
            _loss, output = h(sample)
            correct += int((output.argmax(1) == sample[1]).sum())
            total += len(sample[1])
        return 100.0 * correct / total

    def on_end_epoch(state):
        with torch.no_grad():
            engine_test(h, test_loader)

    def next_sample():
        if state['iterator'] is None:
            on_start_epoch(state)
        try:
            return list(next(state['iterator']))
        except StopIteration:
            state['epoch'] += 1
            on_end_epoch(state)
            on_start_epoch(state)
            return list(next(state['iterator']))

    def train_step():
        state['sample'] = next_sample()
        state['train'] = True
        on_sample(state)

        def closure():
            loss, output = state['network'](state['sample'])
            state['output'] = output
            state['loss'] = loss
            loss.backward()
            # to free memory in save_for_backward
            state['output'] = None
            state['loss'] = None
            return loss

        if bug != "zero_grad_dropped":
            state['optimizer'].zero_grad()
        loss = state['optimizer'].step(closure)
        state['t'] += 1
        return loss.detach()

    def eval_fn(model, batch):
        inputs, targets = batch
        with torch.no_grad():
            return engine_test(h, [(inputs, targets)])

    def true_labels(x):
        """The labelling rule: the class whose colour is nearest to the image's mean colour."""
        raw = x * STD + MEAN
        return torch.cdist(raw.mean(dim=(2, 3)), colours).argmin(dim=1)

    first = next(iter(DataLoader(_SyntheticCIFAR(train_x, train_y, False, seed), batch_size=opt.batch_size)))

    def loss_fn(y, targets):
        return F.cross_entropy(y, targets)

    return Program(name="wrnszagoruyko_cifar", model=model, batch=(first[0], first[1]), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=true_labels,
                   task="classification", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``h``'s mode hard-coded to True (classic): the per-epoch ``engine.test`` runs BN on batch statistics and
    # rewrites the running averages from the test set; training itself is unchanged.
    Bug("test_in_train_mode", functools.partial(_build, bug="test_in_train_mode"), "six_claims", ("EVALUATION",)),
    # ``set_requires_grad_except_bn_`` widened to all BN tensors (classic): the BN scales and shifts never train and
    # are missing from the optimizer, silently.
    Bug("bn_affine_frozen", functools.partial(_build, bug="bn_affine_frozen"), "four_structures",
        ("group0.block0.bn0",)),
    # the Engine's ``optimizer.zero_grad()`` dropped (classic): gradients accumulate over every step. Every
    # parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
