"""The DAWNBench CIFAR-10 script of davidcpage/cifar10-fast (``new_dawn.py``): the residual network of ``dawn_utils.net``
(prep block, three conv-pool-BN layers, residual blocks on layers 1 and 3, max-pool, linear head scaled by 1/16) with
the script's fixed whitening prep block (3x3 PCA filters from the training patches), ghost batch norm (16 splits,
frozen weights) and CELU(0.3), built as a ``Network`` graph of named nodes that returns a dict of every node's output;
the label-smoothing loss (0.8 * cross-entropy + 0.2 * KL to uniform, per example, summed in ``backward``); two hand-
written Nesterov SGD optimisers (weights / biases) whose lr follows a piecewise-linear schedule divided by the batch
size and whose weight decay is multiplied by it (5e-4 * batch_size; biases lr * 64 / batch_size, decay / 64); an EMA
copy of the model (momentum 0.99 every 5 steps) evaluated with flip test-time augmentation.

Source: https://github.com/davidcpage/cifar10-fast
Commit: f79e8b89bb2994b5caaaf7289c68903d15a37c2e
Files: new_dawn.py, dawn_utils.py (net), core.py, torch_backend.py
License: MIT (Copyright (c) 2018 davidcpage)
Domain: image classification (fast CIFAR-10 training: label smoothing, piecewise-linear lr, manual Nesterov SGD)

Deviations from the original:
- sizes: channels prep/layer1/layer2/layer3 64/128/256/512 -> 8/16/32/64, batch 512 -> 64 (ghost batch norm keeps
  its 16 splits, 4 images each), 50000 training images -> 512, 10000 validation images -> 128, epochs 10 -> 10 on
  the small set (``PiecewiseLinear([0, epochs/5, epochs-ema_epochs], [0, 1.0, 0.1])`` unchanged), whitening
  patches from the first 10000 -> all 512 training images; images stay 32x32;
- CPU: the ``.half()`` conversions and ``float16`` data become float32, ``.cuda()``/``torch.cuda.synchronize`` and
  the cudnn warm-up on random batches are dropped, ``device`` is the CPU;
- ``torch.symeig`` (removed from PyTorch) is replaced by ``torch.linalg.eigh`` (the same ascending eigenvalues and
  eigenvectors, flipped as written);
- only the torch branches of the ``singledispatch`` helpers (normalise, pad, transpose, flip_lr) are kept, as plain
  functions; ``np.float`` (removed from numpy) in ``log_activations`` is ``np.float64``; the logging ``Table``,
  ``Timer`` and tsv output are left out;
- data: CIFAR-10 (torchvision / keras download) is replaced by synthetic 32x32 RGB uint8 images made from ``seed``
  (each class has its own colour, plus smooth noise), in the same ``{'data': NHWC, 'targets': N}`` layout, so the
  script's preprocessing (normalise with the CIFAR mean/std, NHWC->NCHW, reflect-pad 4) and ``GPUBatches`` with
  ``Crop(32, 32)`` and ``FlipLR()`` (``max_options=200``) run unchanged; ``GPUBatches`` shuffles with
  ``torch.randperm`` and the crop choices with ``np.random`` (seeded at build);
- one ``train_step`` is one batch of ``reduce(train_batches, state, train_steps)``: the script's train steps
  (``forward(training_mode=True)``, ``log_activations``, ``backward()``, ``opt_steps``, ``update_ema(0.99, 5)``);
  when the batches are exhausted the epoch ends as ``train_epoch`` does (the extra ``None`` batch, then the validation
  epoch on the EMA model with flip TTA); ``train_step`` returns the summed loss that ``backward`` differentiates;
  ``eval_fn`` is the script's validation step (``forward_tta`` on the EMA copy, as written) and returns its accuracy.
"""
# ruff: noqa: B008, RUF007, RUF059, UP039  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import sys
from collections import defaultdict, namedtuple
from functools import partial
from itertools import chain, count

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")
CHANNELS = {'prep': 8, 'layer1': 16, 'layer2': 32, 'layer3': 64}
N_TRAIN, N_VALID, NUM_CLASSES = 512, 128, 10


# ---- core.py -------------------------------------------------------------------------------------------------

def preprocess(dataset, transforms):
    dataset = copy.copy(dataset) #shallow copy
    for transform in transforms:
        dataset['data'] = transform(dataset['data'])
    return dataset

def normalise(x, mean, std):
    return (x - mean) / std

def pad(x, border):
    return nn.ReflectionPad2d(border)(x)

def transpose(x, source, target):
    return x.permute([source.index(d) for d in target])

class Crop(namedtuple('Crop', ('h', 'w'))):
    def __call__(self, x, x0, y0):
        return x[..., y0:y0+self.h, x0:x0+self.w]

    def options(self, shape):
        *_, H, W = shape
        return [{'x0': x0, 'y0': y0} for x0 in range(W+1-self.w) for y0 in range(H+1-self.h)]

    def output_shape(self, shape):
        *_, H, W = shape
        return (*_, self.h, self.w)

def flip_lr(x):
    return torch.flip(x, [-1])

class FlipLR(namedtuple('FlipLR', ())):
    def __call__(self, x, choice):
        return flip_lr(x) if choice else x

    def options(self, shape):
        return [{'choice': b} for b in [True, False]]

union = lambda *dicts: {k: v for d in dicts for (k, v) in d.items()}

def path_iter(nested_dict, pfx=()):
    for name, val in nested_dict.items():
        if isinstance(val, dict): yield from path_iter(val, (*pfx, name))
        else: yield ((*pfx, name), val)

def map_nested(func, nested_dict):
    return {k: map_nested(func, v) if isinstance(v, dict) else func(v) for k,v in nested_dict.items()}

def group_by_key(items):
    res = defaultdict(list)
    for k, v in items:
        res[k].append(v)
    return res

sep = '/'

def normpath(path):
    #simplified os.path.normpath
    parts = []
    for p in path.split(sep):
        if p == '..': parts.pop()
        elif p.startswith(sep): parts = [p]
        else: parts.append(p)
    return sep.join(parts)

has_inputs = lambda node: type(node) is tuple

def pipeline(net):
    return [(sep.join(path), (node if has_inputs(node) else (node, [-1]))) for (path, node) in path_iter(net)]

def build_graph(net):
    flattened = pipeline(net)
    resolve_input = lambda rel_path, path, idx: normpath(sep.join((path, '..', rel_path))) if isinstance(rel_path, str) else flattened[idx+rel_path][0]
    return {path: (node[0], [resolve_input(rel_path, path, idx) for rel_path in node[1]]) for idx, (path, node) in enumerate(flattened)}

class PiecewiseLinear(namedtuple('PiecewiseLinear', ('knots', 'vals'))):
    def __call__(self, t):
        return np.interp([t], self.knots, self.vals)[0]

class Const(namedtuple('Const', ['val'])):
    def __call__(self, x):
        return self.val


# ---- torch_backend.py ----------------------------------------------------------------------------------------

def to(*args, **kwargs):
    return lambda x: x.to(*args, **kwargs)

cifar10_mean, cifar10_std = [
    (125.31, 122.95, 113.87), # equals np.mean(cifar10()['train']['data'], axis=(0,1,2))
    (62.99, 62.09, 66.70), # equals np.std(cifar10()['train']['data'], axis=(0,1,2))
]

#GPU dataloading
chunks = lambda data, splits: (data[start:end] for (start, end) in zip(splits, splits[1:]))

even_splits = lambda N, num_chunks: np.cumsum([0] + [(N//num_chunks)+1]*(N % num_chunks)  + [N//num_chunks]*(num_chunks - (N % num_chunks)))

def shuffled(xs, inplace=False):
    xs = xs if inplace else copy.copy(xs)
    np.random.shuffle(xs)
    return xs

def transformed(data, targets, transform, max_options=None, unshuffle=False):
    i = torch.randperm(len(data), device=device)
    data = data[i]
    options = shuffled(transform.options(data.shape), inplace=True)[:max_options]
    data = torch.cat([transform(x, **choice) for choice, x in zip(options, chunks(data, even_splits(len(data), len(options))))])
    return (data[torch.argsort(i)], targets) if unshuffle else (data, targets[i])

class GPUBatches():
    def __init__(self, batch_size, transforms=(), dataset=None, shuffle=True, drop_last=False, max_options=None):
        self.dataset, self.transforms, self.shuffle, self.max_options = dataset, transforms, shuffle, max_options
        N = len(dataset['data'])
        self.splits = list(range(0, N+1, batch_size))
        if not drop_last and self.splits[-1] != N:
            self.splits.append(N)

    def __iter__(self):
        data, targets = self.dataset['data'], self.dataset['targets']
        for transform in self.transforms:
            data, targets = transformed(data, targets, transform, max_options=self.max_options, unshuffle=not self.shuffle)
        if self.shuffle:
            i = torch.randperm(len(data), device=device)
            data, targets = data[i], targets[i]
        return ({'input': x.clone(), 'target': y} for (x, y) in zip(chunks(data, self.splits), chunks(targets, self.splits)))

    def __len__(self):
        return len(self.splits) - 1

#Network
class Network(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.graph = build_graph(net)
        for path, (val, _) in self.graph.items():
            setattr(self, path.replace('/', '_'), val)

    def nodes(self):
        return (node for node, _ in self.graph.values())

    def forward(self, inputs):
        outputs = dict(inputs)
        for k, (node, ins) in self.graph.items():
            #only compute nodes that are not supplied as inputs.
            if k not in outputs:
                outputs[k] = node(*[outputs[x] for x in ins])
        return outputs

class Identity(namedtuple('Identity', [])):
    def __call__(self, x): return x

class Add(namedtuple('Add', [])):
    def __call__(self, x, y): return x + y

class AddWeighted(namedtuple('AddWeighted', ['wx', 'wy'])):
    def __call__(self, x, y): return self.wx*x + self.wy*y

class Mul(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight
    def __call__(self, x):
        return x*self.weight

class Flatten(nn.Module):
    def forward(self, x): return x.view(x.size(0), x.size(1))

class BatchNorm(nn.BatchNorm2d):
    def __init__(self, num_features, eps=1e-05, momentum=0.1, weight_freeze=False, bias_freeze=False, weight_init=1.0, bias_init=0.0):
        super().__init__(num_features, eps=eps, momentum=momentum)
        if weight_init is not None: self.weight.data.fill_(weight_init)
        if bias_init is not None: self.bias.data.fill_(bias_init)
        self.weight.requires_grad = not weight_freeze
        self.bias.requires_grad = not bias_freeze

class GhostBatchNorm(BatchNorm):
    def __init__(self, num_features, num_splits, **kw):
        super().__init__(num_features, **kw)
        self.num_splits = num_splits
        self.register_buffer('running_mean', torch.zeros(num_features*self.num_splits))
        self.register_buffer('running_var', torch.ones(num_features*self.num_splits))

    def train(self, mode=True):
        if (self.training is True) and (mode is False): #lazily collate stats when we are going to use them
            self.running_mean = torch.mean(self.running_mean.view(self.num_splits, self.num_features), dim=0).repeat(self.num_splits)
            self.running_var = torch.mean(self.running_var.view(self.num_splits, self.num_features), dim=0).repeat(self.num_splits)
        return super().train(mode)

    def forward(self, input):
        N, C, H, W = input.shape
        if self.training or not self.track_running_stats:
            return nn.functional.batch_norm(
                input.view(-1, C*self.num_splits, H, W), self.running_mean, self.running_var,
                self.weight.repeat(self.num_splits), self.bias.repeat(self.num_splits),
                True, self.momentum, self.eps).view(N, C, H, W)
        else:
            return nn.functional.batch_norm(
                input, self.running_mean[:self.num_features], self.running_var[:self.num_features],
                self.weight, self.bias, False, self.momentum, self.eps)

# Losses
class CrossEntropyLoss(namedtuple('CrossEntropyLoss', [])):
    def __call__(self, log_probs, target):
        return torch.nn.functional.nll_loss(log_probs, target, reduction='none')

class KLLoss(namedtuple('KLLoss', [])):
    def __call__(self, log_probs):
        return -log_probs.mean(dim=1)

class Correct(namedtuple('Correct', [])):
    def __call__(self, classifier, target):
        return classifier.max(dim = 1)[1] == target

class LogSoftmax(namedtuple('LogSoftmax', ['dim'])):
    def __call__(self, x):
        return torch.nn.functional.log_softmax(x, self.dim, _stacklevel=5)

label_smoothing_loss = lambda alpha: Network({
        'logprobs': (LogSoftmax(dim=1), ['logits']),
        'KL':  (KLLoss(), ['logprobs']),
        'xent':  (CrossEntropyLoss(), ['logprobs', 'target']),
        'loss': (AddWeighted(wx=1-alpha, wy=alpha), ['xent', 'KL']),
        'acc': (Correct(), ['logits', 'target']),
    })

trainable_params = lambda model: {k:p for k,p in model.named_parameters() if p.requires_grad}

def nesterov_update(w, dw, v, lr, weight_decay, momentum):
    dw.add_(weight_decay, w).mul_(-lr)
    v.mul_(momentum).add_(dw)
    w.add_(dw.add_(momentum, v))

def zeros_like(weights):
    return [torch.zeros_like(w) for w in weights]

def optimiser(weights, param_schedule, update, state_init):
    weights = list(weights)
    return {'update': update, 'param_schedule': param_schedule, 'step_number': 0, 'weights': weights,  'opt_state': state_init(weights)}

def opt_step(update, param_schedule, step_number, weights, opt_state):
    step_number += 1
    param_values = {k: f(step_number) for k, f in param_schedule.items()}
    for w, v in zip(weights, opt_state):
        if w.requires_grad:
            update(w.data, w.grad.data, v, **param_values)
    return {'update': update, 'param_schedule': param_schedule, 'step_number': step_number, 'weights': weights,  'opt_state': opt_state}

SGD = partial(optimiser, update=nesterov_update, state_init=zeros_like)

def reduce(batches, state, steps):
    #state: is a dictionary
    #steps: are functions that take (batch, state)
    #and return a dictionary of updates to the state (or None)

    for batch in chain(batches, [None]):
    #we send an extra batch=None at the end for steps that
    #need to do some tidying-up (e.g. log_activations)
        for step in steps:
            updates = step(batch, state)
            if updates:
                for k,v in updates.items():
                    state[k] = v
    return state

#define keys in the state dict as constants
MODEL = 'model'
LOSS = 'loss'
VALID_MODEL = 'valid_model'
OUTPUT = 'output'
OPTS = 'optimisers'
ACT_LOG = 'activation_log'

#step definitions
def forward(training_mode):
    def step(batch, state):
        if not batch: return
        model = state[MODEL] if training_mode or (VALID_MODEL not in state) else state[VALID_MODEL]
        if model.training != training_mode: #without the guard it's slow!
            model.train(training_mode)
        return {OUTPUT: state[LOSS](model(batch))}
    return step

def forward_tta(tta_transforms):
    def step(batch, state):
        if not batch: return
        model = state[MODEL] if (VALID_MODEL not in state) else state[VALID_MODEL]
        if model.training:
            model.train(False)
        logits = torch.mean(torch.stack([model({'input': transform(batch['input'].clone())})['logits'].detach() for transform in tta_transforms], dim=0), dim=0)
        return {OUTPUT: state[LOSS](dict(batch, logits=logits))}
    return step

def backward(dtype=None, bug=None):
    def step(batch, state):
        state[MODEL].zero_grad()
        if not batch: return
        loss = state[OUTPUT][LOSS]
        if dtype is not None:
            loss = loss.to(dtype)
        if bug == "loss_mean_not_sum":
            loss.mean().backward()  # "average over the batch" while the lr is still divided by the batch size
        else:
            loss.sum().backward()
    return step

def opt_steps(batch, state):
    if not batch: return
    return {OPTS: [opt_step(**opt) for opt in state[OPTS]]}

def log_activations(node_names=('loss', 'acc')):
    def step(batch, state):
        if '_tmp_logs_' not in state:
            state['_tmp_logs_'] = []
        if batch:
            state['_tmp_logs_'].extend((k, state[OUTPUT][k].detach()) for k in node_names)
        else:
            res = {k: torch.cat(xs).detach().cpu().numpy().astype(np.float64) for k, xs in group_by_key(state['_tmp_logs_']).items()}
            del state['_tmp_logs_']
            return {ACT_LOG: res}
    return step

epoch_stats = lambda state: {k: np.mean(v) for k, v in state[ACT_LOG].items()}

def update_ema(momentum, update_freq=1):
    n = iter(count())
    rho = momentum**update_freq
    def step(batch, state):
        if not batch: return
        if (next(n) % update_freq) != 0: return
        for v, ema_v in zip(state[MODEL].state_dict().values(), state[VALID_MODEL].state_dict().values()):
            if not v.dtype.is_floating_point: continue #skip things like num_batches_tracked.
            ema_v *= rho
            ema_v += (1-rho)*v
    return step

default_train_steps = lambda bug=None: (forward(training_mode=True), log_activations(('loss', 'acc')), backward(bug=bug), opt_steps)

#input whitening
def cov(X):
    X = X/np.sqrt(X.size(0) - 1)
    return X.t() @ X

def patches(data, patch_size=(3, 3), dtype=torch.float32):
    h, w = patch_size
    c = data.size(1)
    return data.unfold(2,h,1).unfold(3,w,1).transpose(1,3).reshape(-1, c, h, w).to(dtype)

def eigens(patches):
    n,c,h,w = patches.shape
    Σ = cov(patches.reshape(n, c*h*w))
    Λ, V = torch.linalg.eigh(Σ)  # torch.symeig(Σ, eigenvectors=True)
    return Λ.flip(0), V.t().reshape(c*h*w, c, h, w).flip(0)

def whitening_filter(Λ, V, eps=1e-2):
    filt = nn.Conv2d(3, 27, kernel_size=(3,3), padding=(1,1), bias=False)
    filt.weight.data = (V/torch.sqrt(Λ+eps)[:,None,None,None])
    filt.weight.requires_grad = False
    return filt


# ---- dawn_utils.py -------------------------------------------------------------------------------------------

def conv_bn_default(c_in, c_out, pool=None):
    block = {
        'conv': nn.Conv2d(c_in, c_out, kernel_size=3, stride=1, padding=1, bias=False),
        'bn': BatchNorm(c_out),
        'relu': nn.ReLU(True)
    }
    if pool: block['pool'] = pool
    return block

def residual(c, conv_bn, **kw):
    return {
        'in': Identity(),
        'res1': conv_bn(c, c, **kw),
        'res2': conv_bn(c, c, **kw),
        'add': (Add(), ['in', 'res2/relu']),
    }

def net(channels=None, weight=0.125, pool=nn.MaxPool2d(2), extra_layers=(), res_layers=('layer1', 'layer3'), conv_bn=conv_bn_default, prep=conv_bn_default):
    channels = channels or {'prep': 64, 'layer1': 128, 'layer2': 256, 'layer3': 512}
    n = {
        'input': (None, []),
        'prep': prep(3, channels['prep']),
        'layer1': conv_bn(channels['prep'], channels['layer1'], pool=pool),
        'layer2': conv_bn(channels['layer1'], channels['layer2'], pool=pool),
        'layer3': conv_bn(channels['layer2'], channels['layer3'], pool=pool),
        'pool': nn.MaxPool2d(4),
        'flatten': Flatten(),
        'linear': nn.Linear(channels['layer3'], 10, bias=False),
        'logits': Mul(weight),
    }
    for layer in res_layers:
        n[layer]['residual'] = residual(channels[layer], conv_bn)
    for layer in extra_layers:
        n[layer]['extra'] = conv_bn(channels[layer], channels[layer])
    return n


# ---- new_dawn.py ---------------------------------------------------------------------------------------------

batch_norm = partial(GhostBatchNorm, num_splits=16, weight_freeze=True)
relu = partial(nn.CELU, alpha=0.3)

def conv_bn(c_in, c_out, pool=None):
    block = {
        'conv': nn.Conv2d(c_in, c_out, kernel_size=3, stride=1, padding=1, bias=False),
        'bn': batch_norm(c_out),
        'relu': relu(),
    }
    if pool: block = {'conv': block['conv'], 'pool': pool, 'bn': block['bn'], 'relu': block['relu']}
    return block

def whitening_block(c_in, c_out, Λ=None, V=None, eps=1e-2):
    return {
        'whiten': whitening_filter(Λ, V, eps),
        'conv': nn.Conv2d(27, c_out, kernel_size=(1, 1), bias=False),
        'norm': batch_norm(c_out),
        'act':  relu(),
    }


def cifar10(seed):
    """The CIFAR-10 stand-in, in cifar10()'s layout: uint8 NHWC images and integer targets per split. Each class has
    its own colour; smooth noise on top."""
    gen = torch.Generator().manual_seed(seed)
    colours = []
    while len(colours) < NUM_CLASSES:  # ten colours at least 0.25 apart
        c = torch.rand(3, generator=gen) * 0.8 + 0.1
        if all(float((c - d).norm()) > 0.25 for d in colours):
            colours.append(c)
    colours = torch.stack(colours)

    def split(n):
        targets = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(0.3 * torch.randn(n, 3, 8, 8, generator=gen), size=(32, 32), mode="bilinear",
                              align_corners=False)
        images = (colours[targets][:, :, None, None] + noise).clamp(0, 1).mul(255).round().to(torch.uint8)
        return {'data': images.permute(0, 2, 3, 1).numpy(), 'targets': targets.numpy()}

    return {'train': split(N_TRAIN), 'valid': split(N_VALID)}, colours


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    raw, colours = cifar10(seed)
    dataset = map_nested(torch.tensor, raw)

    epochs, ema_epochs = 10, 2
    lr_schedule = PiecewiseLinear([0, epochs/5, epochs-ema_epochs], [0, 1.0, 0.1])
    batch_size = 64
    train_transforms = [Crop(32, 32), FlipLR()]

    loss = label_smoothing_loss(0.2)

    dataset = map_nested(to(device), dataset)
    T = lambda x: torch.tensor(x, dtype=torch.float32, device=device)
    transforms = [
        to(dtype=torch.float32),
        partial(normalise, mean=T(cifar10_mean), std=T(cifar10_std)),
        partial(transpose, source='NHWC', target='NCHW'),
    ]
    train_set = preprocess(dataset['train'], transforms + [partial(pad, border=4)])
    valid_set = preprocess(dataset['valid'], transforms)

    Λ, V = eigens(patches(train_set['data'][:10000,:,4:-4,4:-4])) #center crop to remove padding
    model = Network(net(channels=CHANNELS, weight=1/16, conv_bn=conv_bn, prep=partial(whitening_block, Λ=Λ, V=V))).to(device)

    train_batches = GPUBatches(batch_size=batch_size, transforms=train_transforms, dataset=train_set, shuffle=True,  drop_last=True, max_options=200)
    valid_batches = GPUBatches(batch_size=batch_size, dataset=valid_set, shuffle=False, drop_last=False)
    is_bias = group_by_key(('bias' in k, v) for k, v in trainable_params(model).items())
    opts = [
        SGD(is_bias[False], {'lr': (lambda step: lr_schedule(step/len(train_batches))/batch_size), 'weight_decay': Const(5e-4*batch_size), 'momentum': Const(0.9)}),
        SGD(is_bias[True], {'lr': (lambda step: lr_schedule(step/len(train_batches))*(64/batch_size)), 'weight_decay': Const(5e-4*batch_size/64), 'momentum': Const(0.9)})
    ]
    if bug == "bias_optimiser_dropped":
        opts = opts[:1]  # only the weights' optimiser: the biases (the only trainable BN parameters) never move
    state = {MODEL: model, VALID_MODEL: copy.deepcopy(model), LOSS: loss, OPTS: opts}

    train_steps = (*default_train_steps(bug), update_ema(momentum=0.99, update_freq=5))
    valid_steps = (forward_tta([(lambda x: x), flip_lr]), log_activations(('loss', 'acc')))

    epoch = {"it": None}

    def next_batch():
        try:
            return next(epoch["it"])
        except (StopIteration, TypeError):
            if epoch["it"] is not None:  # the end of train_epoch: the extra None batch, then the validation epoch
                for step in train_steps:
                    updates = step(None, state)
                    if updates:
                        state.update(updates)
                epoch_stats(reduce(valid_batches, state, valid_steps))
            epoch["it"] = iter(train_batches)
            return next(epoch["it"])

    def train_step():
        batch = next_batch()
        for step in train_steps:
            updates = step(batch, state)
            if updates:
                for k,v in updates.items():
                    state[k] = v
        return state[OUTPUT][LOSS].sum().detach()

    def loss_fn(outputs, target):
        """the label-smoothing loss network on the model's outputs, summed over the batch as ``backward`` does"""
        out = state[LOSS](dict(outputs, target=target))[LOSS]
        return out.mean() if bug == "loss_mean_not_sum" else out.sum()

    def eval_fn(model, batch):
        """the script's validation step: flip-TTA forward of the EMA copy (state[VALID_MODEL]), as written"""
        out = valid_steps[0](batch, {MODEL: model, VALID_MODEL: state[VALID_MODEL], LOSS: loss})
        return float(out[OUTPUT]['acc'].float().mean())

    def true_labels(x):
        """The labelling rule: the class whose colour is nearest to the image's mean colour (undoing normalise)."""
        raw = x * T(cifar10_std)[:, None, None] + T(cifar10_mean)[:, None, None]
        return torch.cdist(raw.mean(dim=(2, 3)) / 255, colours).argmin(dim=1)

    first = next(iter(GPUBatches(batch_size=batch_size, transforms=train_transforms, dataset=train_set,
                                 shuffle=False, drop_last=True, max_options=200)))
    return Program(name="cifar10fast_resnet", model=model, batch=first, loss_fn=loss_fn, optimizer=None,
                   train_step=train_step, eval_fn=eval_fn, task_probe=true_labels, task="classification",
                   frozen=("prep_whiten.weight", "*_norm.weight", "*_bn.weight"), loader=train_batches)


build = functools.partial(_build)

BUGS = [
    # the per-example losses averaged instead of summed before backward, while the lr schedule is still divided by
    # the batch size (and the weight decay multiplied by it): every gradient step is batch_size times too small next
    # to the decay. Issue https://github.com/davidcpage/cifar10-fast/issues/9 shows the coupling is easy to misread
    # ("multiply 5e-4 by batch_size is redundant").
    Bug("loss_mean_not_sum", functools.partial(_build, bug="loss_mean_not_sum"), "learning_ledger", ("OBJECTIVE",)),
    # the biases' optimiser left out of `opts`: with the batch-norm weights frozen, the biases are the only trainable
    # normalisation parameters, and nothing ever updates them.
    Bug("bias_optimiser_dropped", functools.partial(_build, bug="bias_optimiser_dropped"), "four_structures",
        ("layer1_bn.bias",)),
]
