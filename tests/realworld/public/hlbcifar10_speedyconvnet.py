# ruff: noqa: SIM118, PLC0206
"""hlb-CIFAR10 (tysam-code's hyperlightspeedbench): a fast CIFAR-10 recipe. A frozen 2x2 whitening convolution
(eigenvectors of the training patches' covariance, +/- pairs), three conv groups (conv, max-pool, BatchNorm with
frozen weights and momentum .4, GELU, conv, BatchNorm, GELU) with dirac-initialized implicit residuals, global max
pooling and a temperature-scaled bias-free linear head; label-smoothed (0.2) cross-entropy summed over the batch
with a loss scale, two Nesterov SGD optimizers (non-bias and bias groups, lr and decay scaled by batch size), each
with a linear OneCycleLR (warmup from ~0 over 23% of the steps), random crops from reflect-padded images, flips,
late CutMix on one-hot targets, an EMA of the network from a late epoch that is also copied back into it
(Lookahead-like), and flip test-time augmentation in eval mode.

Source: https://github.com/tysam-code/hlb-CIFAR10
Commit: 993965202fc4dc05b699a39db33c00f1c7f647fd
Files: ``main.py`` (the whole program: ``hyp``, the network components, ``make_net``, whitening init, the batch
augmentations, ``get_batches``, ``NetworkEMA``, ``init_split_parameter_dictionaries``, ``loss_fn``, ``main``)
License: Apache-2.0 (Copyright tysam-code; full text in LICENSES/tysam-code-hlb-CIFAR10.txt)
Domain: vision, image classification with a modern speed recipe (label smoothing, CutMix, one-cycle warmup, EMA,
whitening, TTA)

Kept as written: every network class (``BatchNorm``, ``Conv``, ``Linear`` with temperature, ``ConvGroup``,
``FastGlobalMaxPooling``, ``SpeedyConvNet`` with its eval-time flip averaging), the whitening helpers
(``get_patches``, ``get_whitening_parameters``, ``init_whitening_conv``, ``set_whitening_conv``), ``make_net``'s
dirac re-initialization, the augmentations (``make_random_square_masks``, ``batch_cutmix``, ``batch_crop``,
``batch_flip_lr``), ``get_batches``, ``NetworkEMA``, ``init_split_parameter_dictionaries``, the label-smoothed
``loss_fn``, and ``main``'s training-loop body (loss scaling and sum, backward, both steps, both OneCycleLR steps,
both ``zero_grad(set_to_none=True)``, the EMA schedule) and its evaluation; every ``hyp`` value except those below.

Deviations from the original:
- CIFAR-10 is not here (no torchvision, no download): ``data`` is 640 training and 160 evaluation synthetic
  3x32x32 images made from ``seed`` (ten smoothed random class templates plus per-image noise, normalized by the
  training set's channel mean and std as the original does), targets one-hot;
- sizes for 2 CPU cores: ``batchsize`` 1024 -> 32 (the lr, decay and loss scalings that depend on it kept as
  formulas), ``base_depth`` 64 -> 8, ``eval_batchsize`` 2500 -> 80;
- CPU: ``hyp['misc']['device']`` 'cuda' -> 'cpu' (also the hard-coded ``device='cuda'`` of two ``randperm``s),
  fp16 dropped (the data and the network stay float32: ``.half()`` removed), the CUDA timing events dropped;
- ``data`` is an argument of ``make_net`` and a local of ``build`` instead of a module global loaded at import;
  the module-level printing of the table head and the per-epoch table are dropped;
- ``main``'s epoch loop is unrolled: one ``train_step`` is one batch of it (``net.train()`` and a new
  ``get_batches`` at the start of an epoch); ``eval_fn`` is the evaluation block (``net.eval()``, no_grad, flip
  TTA) returning the accuracy (the EMA's once it exists); past the run's ``total_train_steps`` (242) the epochs
  start over with both OneCycleLRs no longer stepped (the original's run ends there);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_EVAL = 640, 160  # (port) synthetic CIFAR-10 stand-in

# set global defaults (in this particular file) for convolutions
default_conv_kwargs = {'kernel_size': 3, 'padding': 'same', 'bias': False}

batchsize = 32  # (port) 1024
bias_scaler = 64
hyp = {
    'opt': {'bias_lr': 1.525 * bias_scaler/512, 'non_bias_lr': 1.525 / 512,
            'bias_decay': 6.687e-4 * batchsize/bias_scaler, 'non_bias_decay': 6.687e-4 * batchsize,
            'scaling_factor': 1./9, 'percent_start': .23, 'loss_scale_scaler': 1./32},
    'net': {'whitening': {'kernel_size': 2, 'num_examples': 50000}, 'batch_norm_momentum': .4, 'cutmix_size': 3,
            'cutmix_epochs': 6, 'pad_amount': 2, 'base_depth': 8},  # (port) base_depth 64
    'misc': {'ema': {'epochs': 10, 'decay_base': .95, 'decay_pow': 3., 'every_n_steps': 5}, 'train_epochs': 12.1,
             'device': 'cpu', 'data_location': 'data.pt'},  # (port) device 'cuda'
}

class BatchNorm(nn.BatchNorm2d):
    def __init__(self, num_features, eps=1e-12, momentum=hyp['net']['batch_norm_momentum'], weight=False, bias=True):
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.weight.data.fill_(1.0)
        self.bias.data.fill_(0.0)
        self.weight.requires_grad = weight
        self.bias.requires_grad = bias

class Conv(nn.Conv2d):
    def __init__(self, *args, **kwargs):
        kwargs = {**default_conv_kwargs, **kwargs}
        super().__init__(*args, **kwargs)
        self.kwargs = kwargs

class Linear(nn.Linear):
    def __init__(self, *args, temperature=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.kwargs = kwargs
        self.temperature = temperature

    def forward(self, x):
        if self.temperature is not None:
            weight = self.weight * self.temperature
        else:
            weight = self.weight
        return x @ weight.T

class ConvGroup(nn.Module):
    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.channels_in  = channels_in
        self.channels_out = channels_out
        self.pool1 = nn.MaxPool2d(2)
        self.conv1 = Conv(channels_in,  channels_out)
        self.conv2 = Conv(channels_out, channels_out)
        self.norm1 = BatchNorm(channels_out)
        self.norm2 = BatchNorm(channels_out)
        self.activ = nn.GELU()

    def forward(self, x):
        x = self.conv1(x)
        x = self.pool1(x)
        x = self.norm1(x)
        x = self.activ(x)
        x = self.conv2(x)
        x = self.norm2(x)
        x = self.activ(x)
        return x

class FastGlobalMaxPooling(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=(2,3)) # Global maximum pooling

def get_patches(x, patch_shape=(3, 3), dtype=torch.float32):
    c, (h, w) = x.shape[1], patch_shape
    return x.unfold(2,h,1).unfold(3,w,1).transpose(1,3).reshape(-1,c,h,w).to(dtype)

def get_whitening_parameters(patches):
    n,c,h,w = patches.shape
    est_covariance = torch.cov(patches.view(n, c*h*w).t())
    eigenvalues, eigenvectors = torch.linalg.eigh(est_covariance, UPLO='U')
    return eigenvalues.flip(0).view(-1, 1, 1, 1), eigenvectors.t().reshape(c*h*w,c,h,w).flip(0)

def init_whitening_conv(layer, train_set=None, num_examples=None, previous_block_data=None, pad_amount=None, freeze=True, whiten_splits=None):
    if train_set is not None and previous_block_data is None:
        if pad_amount > 0:
            previous_block_data = train_set[:num_examples,:,pad_amount:-pad_amount,pad_amount:-pad_amount]
        else:
            previous_block_data = train_set[:num_examples,:,:,:]
    if whiten_splits is None:
         previous_block_data_split = [previous_block_data]
    else:
         previous_block_data_split = previous_block_data.split(whiten_splits, dim=0)
    eigenvalue_list, eigenvector_list = [], []
    for data_split in previous_block_data_split:
        eigenvalues, eigenvectors = get_whitening_parameters(get_patches(data_split, patch_shape=layer.weight.data.shape[2:]))
        eigenvalue_list.append(eigenvalues)
        eigenvector_list.append(eigenvectors)
    eigenvalues  = torch.stack(eigenvalue_list,  dim=0).mean(0)
    eigenvectors = torch.stack(eigenvector_list, dim=0).mean(0)
    set_whitening_conv(layer, eigenvalues.to(dtype=layer.weight.dtype), eigenvectors.to(dtype=layer.weight.dtype), freeze=freeze)
    data = layer(previous_block_data.to(dtype=layer.weight.dtype))
    return data

def set_whitening_conv(conv_layer, eigenvalues, eigenvectors, eps=1e-2, freeze=True):
    shape = conv_layer.weight.data.shape
    eigenvectors_sliced = (eigenvectors/torch.sqrt(eigenvalues+eps))[-shape[0]:, :, :, :]
    conv_layer.weight.data = torch.cat((eigenvectors_sliced, -eigenvectors_sliced), dim=0)
    if freeze:
        conv_layer.weight.requires_grad = False

scaler = 2.
depths = {
    'init':   round(scaler**-1*hyp['net']['base_depth']),
    'block1': round(scaler** 0*hyp['net']['base_depth']),
    'block2': round(scaler** 2*hyp['net']['base_depth']),
    'block3': round(scaler** 3*hyp['net']['base_depth']),
    'num_classes': 10
}

class SpeedyConvNet(nn.Module):
    def __init__(self, network_dict, bug=None):
        super().__init__()
        self.net_dict = network_dict # flexible, defined in the make_net function
        self.bug = bug

    def forward(self, x):
        if not self.training:
            x = torch.cat((x, torch.flip(x, (-2,) if self.bug == "tta_flip_vertical" else (-1,))))
        x = self.net_dict['initial_block']['whiten'](x)
        x = self.net_dict['initial_block']['activation'](x)
        x = self.net_dict['conv_group_1'](x)
        x = self.net_dict['conv_group_2'](x)
        x = self.net_dict['conv_group_3'](x)
        x = self.net_dict['pooling'](x)
        x = self.net_dict['linear'](x)
        if not self.training:
            orig, flipped = x.split(x.shape[0]//2, dim=0)
            x = .5 * orig + .5 * flipped
        return x

def make_net(data, bug=None):  # (port) data passed in
    whiten_conv_depth = 3*hyp['net']['whitening']['kernel_size']**2
    network_dict = nn.ModuleDict({
        'initial_block': nn.ModuleDict({
            'whiten': Conv(3, whiten_conv_depth, kernel_size=hyp['net']['whitening']['kernel_size'], padding=0),
            'activation': nn.GELU(),
        }),
        'conv_group_1': ConvGroup(2*whiten_conv_depth, depths['block1']),
        'conv_group_2': ConvGroup(depths['block1'],    depths['block2']),
        'conv_group_3': ConvGroup(depths['block2'],    depths['block3']),
        'pooling': FastGlobalMaxPooling(),
        'linear': Linear(depths['block3'], depths['num_classes'], bias=False, temperature=hyp['opt']['scaling_factor']),
    })
    net = SpeedyConvNet(network_dict, bug=bug)
    net = net.to(hyp['misc']['device'])
    net = net.to(memory_format=torch.channels_last)
    net.train()
    # (port) net.half() dropped: float32 on CPU
    ## Initialize the whitening convolution
    with torch.no_grad():
        init_whitening_conv(net.net_dict['initial_block']['whiten'],
                            data['train']['images'].index_select(0, torch.randperm(data['train']['images'].shape[0], device=data['train']['images'].device)),
                            num_examples=hyp['net']['whitening']['num_examples'],
                            pad_amount=hyp['net']['pad_amount'],
                            whiten_splits=5000)
        for layer_name in net.net_dict.keys():
            if 'conv_group' in layer_name:
                dirac_weights_in = torch.nn.init.dirac_(torch.empty_like(net.net_dict[layer_name].conv1.weight))
                std_pre, mean_pre = torch.std_mean(net.net_dict[layer_name].conv1.weight.data)
                net.net_dict[layer_name].conv1.weight.data = net.net_dict[layer_name].conv1.weight.data + dirac_weights_in
                std_post, mean_post = torch.std_mean(net.net_dict[layer_name].conv1.weight.data)
                net.net_dict[layer_name].conv1.weight.data.sub_(mean_post).div_(std_post).mul_(std_pre).add_(mean_pre)
                torch.nn.init.dirac_(net.net_dict[layer_name].conv2.weight)
    return net

def make_random_square_masks(inputs, mask_size):
    if mask_size == 0:
        return None # no need to cutout or do anything like that since the patch_size is set to 0
    is_even = int(mask_size % 2 == 0)
    in_shape = inputs.shape
    mask_center_y = torch.empty(in_shape[0], dtype=torch.long, device=inputs.device).random_(mask_size//2-is_even, in_shape[-2]-mask_size//2-is_even)
    mask_center_x = torch.empty(in_shape[0], dtype=torch.long, device=inputs.device).random_(mask_size//2-is_even, in_shape[-1]-mask_size//2-is_even)
    to_mask_y_dists = torch.arange(in_shape[-2], device=inputs.device).view(1, 1, in_shape[-2], 1) - mask_center_y.view(-1, 1, 1, 1)
    to_mask_x_dists = torch.arange(in_shape[-1], device=inputs.device).view(1, 1, 1, in_shape[-1]) - mask_center_x.view(-1, 1, 1, 1)
    to_mask_y = (to_mask_y_dists >= (-(mask_size // 2) + is_even)) * (to_mask_y_dists <= mask_size // 2)
    to_mask_x = (to_mask_x_dists >= (-(mask_size // 2) + is_even)) * (to_mask_x_dists <= mask_size // 2)
    final_mask = to_mask_y * to_mask_x
    return final_mask

def batch_cutmix(inputs, targets, patch_size):
    with torch.no_grad():
        batch_permuted = torch.randperm(inputs.shape[0], device=hyp['misc']['device'])  # (port) device='cuda'
        cutmix_batch_mask = make_random_square_masks(inputs, patch_size)
        if cutmix_batch_mask is None:
            return inputs, targets
        cutmix_batch = torch.where(cutmix_batch_mask, torch.index_select(inputs, 0, batch_permuted), inputs)
        cutmix_targets = torch.index_select(targets, 0, batch_permuted)
        portion_mixed = float(patch_size**2)/(inputs.shape[-2]*inputs.shape[-1])
        cutmix_labels = portion_mixed * cutmix_targets + (1. - portion_mixed) * targets
        return cutmix_batch, cutmix_labels

def batch_crop(inputs, crop_size):
    with torch.no_grad():
        crop_mask_batch = make_random_square_masks(inputs, crop_size)
        cropped_batch = torch.masked_select(inputs, crop_mask_batch).view(inputs.shape[0], inputs.shape[1], crop_size, crop_size)
        return cropped_batch

def batch_flip_lr(batch_images, flip_chance=.5):
    with torch.no_grad():
        return torch.where(torch.rand_like(batch_images[:, 0, 0, 0].view(-1, 1, 1, 1)) < flip_chance, torch.flip(batch_images, (-1,)), batch_images)

class NetworkEMA(nn.Module):
    def __init__(self, net):
        super().__init__() # init the parent module so this module is registered properly
        self.net_ema = copy.deepcopy(net).eval().requires_grad_(False) # copy the model

    def update(self, current_net, decay):
        with torch.no_grad():
            for ema_net_parameter, (parameter_name, incoming_net_parameter) in zip(self.net_ema.state_dict().values(), current_net.state_dict().items()):
                if incoming_net_parameter.dtype in (torch.half, torch.float):
                    ema_net_parameter.mul_(decay).add_(incoming_net_parameter.detach().mul(1. - decay))
                    if not ('norm' in parameter_name and 'weight' in parameter_name) and not 'whiten' in parameter_name:
                        incoming_net_parameter.copy_(ema_net_parameter.detach())

    def forward(self, inputs):
        with torch.no_grad():
            return self.net_ema(inputs)

@torch.no_grad()
def get_batches(data_dict, key, batchsize, epoch_fraction=1., cutmix_size=None, bug=None):
    num_epoch_examples = len(data_dict[key]['images'])
    shuffled = torch.randperm(num_epoch_examples, device=hyp['misc']['device'])  # (port) device='cuda'
    if epoch_fraction < 1:
        shuffled = shuffled[:batchsize * round(epoch_fraction * shuffled.shape[0]/batchsize)]
        num_epoch_examples = shuffled.shape[0]
    crop_size = 32
    if key == 'train':
        images = batch_crop(data_dict[key]['images'], crop_size)
        images = batch_flip_lr(images)
        images, targets = batch_cutmix(images, data_dict[key]['targets'], patch_size=cutmix_size)
    else:
        images = data_dict[key]['images']
        targets = data_dict[key]['targets']
    images = images.to(memory_format=torch.channels_last)
    for idx in range(num_epoch_examples // batchsize):
        if not (idx+1)*batchsize > num_epoch_examples:
            target_idx = shuffled[idx*batchsize:(idx+1)*batchsize]
            if bug == "targets_not_shuffled_with_images" and key == 'train':
                target_idx = torch.arange(idx*batchsize, (idx+1)*batchsize)
            yield images.index_select(0, shuffled[idx*batchsize:(idx+1)*batchsize]), \
                  targets.index_select(0, target_idx)

def init_split_parameter_dictionaries(network):
    params_non_bias = {'params': [], 'lr': hyp['opt']['non_bias_lr'], 'momentum': .85, 'nesterov': True, 'weight_decay': hyp['opt']['non_bias_decay'], 'foreach': True}
    params_bias     = {'params': [], 'lr': hyp['opt']['bias_lr'],     'momentum': .85, 'nesterov': True, 'weight_decay': hyp['opt']['bias_decay'], 'foreach': True}
    for name, p in network.named_parameters():
        if p.requires_grad:
            if 'bias' in name:
                params_bias['params'].append(p)
            else:
                params_non_bias['params'].append(p)
    return params_non_bias, params_bias

loss_fn = nn.CrossEntropyLoss(label_smoothing=0.2, reduction='none')

def _synthetic_cifar(seed):
    """(port) Ten smoothed random 3x32x32 templates, one per class, plus noise; normalized and one-hot as main.py."""
    g = torch.Generator().manual_seed(seed)
    templates = F.avg_pool2d(torch.randn(10, 3, 36, 36, generator=g), 5, stride=1)
    templates = templates / templates.std()
    data = {}
    for key, n in (('train', N_TRAIN), ('eval', N_EVAL)):
        y = torch.randint(0, 10, (n,), generator=g)
        data[key] = {'images': templates[y] + 0.8 * torch.randn(n, 3, 32, 32, generator=g), 'targets': y}
    cifar10_std, cifar10_mean = torch.std_mean(data['train']['images'], dim=(0, 2, 3))
    for key in data:
        data[key]['images'] = (data[key]['images'] - cifar10_mean.view(1, -1, 1, 1)) / cifar10_std.view(1, -1, 1, 1)
        data[key]['targets'] = F.one_hot(data[key]['targets']).float()
    if hyp['net']['pad_amount'] > 0:
        data['train']['images'] = F.pad(data['train']['images'], (hyp['net']['pad_amount'],)*4, 'reflect')
    return data

def _train_batch(st, inputs, targets):
    """(port) The body of ``main``'s inner training loop, as written."""
    net, opt, opt_bias, lr_sched, lr_sched_bias = st['net'], st['opt'], st['opt_bias'], st['lr_sched'], st['lr_sched_bias']
    outputs = net(inputs)
    loss_batchsize_scaler = 512/batchsize
    loss = loss_fn(outputs, targets).mul(hyp['opt']['loss_scale_scaler']*loss_batchsize_scaler).sum().div(hyp['opt']['loss_scale_scaler'])
    loss.backward()
    ## Step for each optimizer, in turn.
    opt.step()
    opt_bias.step()
    if st['current_steps'] < st['total_train_steps']:  # (port) no scheduler step past the run's last step
        lr_sched.step()
        lr_sched_bias.step()
    opt.zero_grad(set_to_none=True)
    if st['bug'] != "bias_optimizer_never_zeroed":
        opt_bias.zero_grad(set_to_none=True)
    st['current_steps'] += 1
    if st['epoch'] >= st['ema_epoch_start'] and st['current_steps'] % hyp['misc']['ema']['every_n_steps'] == 0:
        if st['net_ema'] is None:
            st['net_ema'] = NetworkEMA(net)
        else:
            st['net_ema'].update(net, decay=st['projected_ema_decay_val']*(st['current_steps']/st['total_train_steps'])**hyp['misc']['ema']['decay_pow'])
    return loss.detach().cpu().item()/(batchsize*loss_batchsize_scaler)  # (port) main's train_loss

def _main_setup(data, bug):
    """(port) ``main`` up to its epoch loop."""
    st = {'net_ema': None, 'current_steps': 0., 'bug': bug, 'epoch': -1, 'batches': None}
    num_steps_per_epoch      = len(data['train']['images']) // batchsize
    st['total_train_steps']  = math.ceil(num_steps_per_epoch * hyp['misc']['train_epochs'])
    st['ema_epoch_start']    = math.floor(hyp['misc']['train_epochs']) - hyp['misc']['ema']['epochs']
    st['projected_ema_decay_val'] = hyp['misc']['ema']['decay_base'] ** hyp['misc']['ema']['every_n_steps']
    pct_start = hyp['opt']['percent_start']
    net = st['net'] = make_net(data, bug=bug)
    non_bias_params, bias_params = init_split_parameter_dictionaries(net)
    opt = st['opt'] = torch.optim.SGD(**non_bias_params)
    opt_bias = st['opt_bias'] = torch.optim.SGD(**bias_params)
    initial_div_factor = 1e16
    final_lr_ratio = .07
    st['lr_sched'] = torch.optim.lr_scheduler.OneCycleLR(opt,  max_lr=non_bias_params['lr'], pct_start=pct_start, div_factor=initial_div_factor, final_div_factor=1./(initial_div_factor*final_lr_ratio), total_steps=st['total_train_steps'], anneal_strategy='linear', cycle_momentum=False)
    st['lr_sched_bias'] = torch.optim.lr_scheduler.OneCycleLR(opt_bias, max_lr=bias_params['lr'], pct_start=pct_start, div_factor=initial_div_factor, final_div_factor=1./(initial_div_factor*final_lr_ratio), total_steps=st['total_train_steps'], anneal_strategy='linear', cycle_momentum=False)
    return st

def _build(seed, bug=None):
    torch.manual_seed(seed)
    data = _synthetic_cifar(seed)
    st = _main_setup(data, bug)
    net = st['net']

    def next_batch():
        batch = next(st['batches'], None) if st['batches'] is not None else None
        if batch is None:  # a new epoch of main's loop
            st['epoch'] += 1
            epoch = st['epoch'] % math.ceil(hyp['misc']['train_epochs'])  # (port) past the run: the epochs again
            net.train()
            cutmix_size = hyp['net']['cutmix_size'] if epoch >= hyp['misc']['train_epochs'] - hyp['net']['cutmix_epochs'] else 0
            epoch_fraction = 1 if epoch + 1 < hyp['misc']['train_epochs'] else hyp['misc']['train_epochs'] % 1
            st['batches'] = get_batches(data, key='train', batchsize=batchsize, epoch_fraction=epoch_fraction, cutmix_size=cutmix_size, bug=bug)
            batch = next(st['batches'])
        return batch

    def train_step():
        inputs, targets = next_batch()
        return _train_batch(st, inputs, targets)

    def eval_fn(model, _batch=None):
        net.eval()
        eval_batchsize = 80  # (port) 2500
        acc_list, acc_list_ema = [], []
        with torch.no_grad():
            for inputs, targets in get_batches(data, key='eval', batchsize=eval_batchsize):
                if st['net_ema'] is not None:
                    outputs = st['net_ema'](inputs)
                    acc_list_ema.append((outputs.argmax(-1) == targets.argmax(-1)).float().mean())
                outputs = net(inputs)
                acc_list.append((outputs.argmax(-1) == targets.argmax(-1)).float().mean())
        net.train()
        return torch.stack(acc_list_ema or acc_list).mean().item()
    gen = torch.Generator().manual_seed(seed + 1)
    idx = torch.randperm(N_TRAIN, generator=gen)[:batchsize]
    pad = hyp['net']['pad_amount']
    batch = (data['train']['images'][idx, :, pad:-pad, pad:-pad].contiguous(), data['train']['targets'][idx])
    return Program(name="hlbcifar10_speedyconvnet", model=net, batch=batch,
                   loss_fn=lambda outputs, targets: loss_fn(outputs, targets).mul(hyp['opt']['loss_scale_scaler']*512/batchsize).sum().div(hyp['opt']['loss_scale_scaler']),
                   optimizer=st['opt'], train_step=train_step, eval_fn=eval_fn)

build = functools.partial(_build, bug=None)

BUGS = [
    Bug("targets_not_shuffled_with_images", functools.partial(_build, bug="targets_not_shuffled_with_images"),
        "learning_ledger", ("TASK",)),
    Bug("bias_optimizer_never_zeroed", functools.partial(_build, bug="bias_optimizer_never_zeroed"), "step_probe",
        ("bias",)),
    Bug("tta_flip_vertical", functools.partial(_build, bug="tta_flip_vertical"), "six_claims", ("EVALUATION",)),
]
