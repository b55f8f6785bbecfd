# ruff: noqa: UP004, UP008, UP032, PLR0402, B023, C408, FLY002, SIM101, RUF059, SIM118
"""Model-Agnostic Meta-Learning on Omniglot from katerakelly/pytorch-maml: a 4-block ConvNet (``OmniglotNet``), an
``InnerLoop`` copy of it that takes ``num_inner_updates`` SGD steps on a task's training examples through fast
weights (``create_graph=True``, second-order), the meta-gradient of the validation loss summed over a meta-batch of
tasks, and ``MetaLearner.meta_update`` which pushes those summed gradients into the base net through parameter hooks
on a dummy forward/backward before ``Adam.step()``.

Source: https://github.com/katerakelly/pytorch-maml
Commit: 75907aca148ad053dfaf75fc138319f0d89534a8
Files: ``src/maml.py`` (``MetaLearner``), ``src/inner_loop.py`` (``InnerLoop``), ``src/omniglot_net.py``
(``OmniglotNet``), ``src/layers.py``, ``src/score.py``, ``src/data_loading.py`` (``ClassBalancedSampler``,
``get_data_loader``), ``src/dataset.py`` (``FewShotDataset``, ``Omniglot``), ``src/task.py`` (``OmniglotTask``),
``src/train-omniglot-5way-1shot.sh`` (the configuration)
License: MIT (Copyright 2017 Kate Rakelly; full text in LICENSES/katerakelly-pytorch-maml.txt)
Domain: few-shot / meta-learning (second-order MAML, 5-way 1-shot classification)

Kept as written: ``OmniglotNet`` (three conv3x3-BN(momentum=1)-ReLU-maxpool blocks of 64 channels, ``fc`` 64 ->
num_classes, the functional ``forward(x, weights)`` through ``layers.py``, ``_init_weights`` with its
``torch.manual_seed(1337)``, ``copy_weights``), ``InnerLoop.forward`` (the pre/post ``evaluate`` of the train and
val loaders, the first inner step on ``self.parameters()`` and later ones on the fast weights, ``create_graph=True``,
the val loss divided by ``meta_batch_size``, ``torch.autograd.grad`` of it with respect to the base parameters),
``MetaLearner.meta_update`` (the dummy ``forward_pass`` of ``self.net`` on the last task's val batch, the hooks that
replace each parameter's gradient by the meta-batch sum, ``zero_grad`` / ``backward`` / ``step``, the hooks removed),
``MetaLearner.test`` (10 test tasks, a copy of the net fine-tuned by SGD at the inner step size), the 5-way 1-shot
configuration (num_cls 5, num_inst 1, batch 1, num_inner_updates 5, lr 1e-1, meta_lr 1e-3, Adam, CrossEntropyLoss),
``ClassBalancedSampler``, ``get_data_loader`` (batch of ``batch_size * num_cl``, the val split uncut) and the
Omniglot normalization (mean 0.92206, std 0.08426 on each of the 3 channels).

Deviations from the original:
- the Omniglot image folders are not here: ``OmniglotTask`` samples from a synthetic alphabet made from ``seed``
  (8 "languages" of 10 characters, each character a fixed set of random pen strokes on a 28x28 canvas; its 6
  "drawings" are the strokes shifted by up to one pixel with a few pixels flipped), held in memory as 0/255 images
  under ``language/character/drawing`` ids; ``Omniglot.load_image`` returns the stored 28x28x3 float array (the
  PIL ``convert('RGB')`` and LANCZOS resize have nothing to do). ``split='test'`` draws from 3 further languages.
- torchvision is not here: ``ToTensor`` on a float32 HxWxC array is the transpose to CxHxW (it does not rescale
  float arrays, as in torchvision), ``Normalize`` is written out.
- sizes for 2 CPU cores: meta_batch_size (``m_batch``) 32 -> 3; ``MetaLearner.train``'s per-iteration ``test()``
  and the ``np.save`` / ``torch.save`` bookkeeping are not run by ``train_step`` (``test()`` is the ``eval_fn``,
  on 3 test tasks instead of 10).
- Python 2 and CUDA: prints are dropped, ``.cuda()`` / ``cuda(async=True)`` / ``Variable`` are the CPU tensors,
  ``loader.__iter__().next()`` is ``next(iter(loader))``, ``l.data.cpu().numpy()[0]`` (0-dim in current torch) is
  ``l.item()``, ``F.threshold(..., inplace=True)`` is kept, the DataLoader has no workers.
- random draws: ``random`` and ``np.random`` are seeded with ``seed`` (the original 1337); ``_init_weights`` keeps
  its fixed ``torch.manual_seed(1337)``, so the weights do not depend on ``seed``.
- ``train_step`` is one iteration of ``MetaLearner.train``'s loop (the meta-batch collected, ``meta_update``),
  returning the meta-batch's mean post-update validation loss (the ``val_loss`` the original saves); the Program's
  model is the base net ``self.net``, its batch one task's val batch.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.modules.loss import CrossEntropyLoss
from torch.optim import SGD, Adam
from torch.utils.data import DataLoader
from torch.utils.data.sampler import Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_LANG_TRAIN, N_LANG_TEST, N_CHARS, N_DRAW = 8, 3, 10, 6
META_BATCH = 3  # the original 32
N_TEST_TASKS = 3  # the original 10


# synthetic Omniglot (deviation): characters as random pen strokes, drawings as jittered copies
def _make_alphabet(rng):
    images = {}
    for li in range(N_LANG_TRAIN + N_LANG_TEST):
        split = 'images_background' if li < N_LANG_TRAIN else 'images_evaluation'
        for ci in range(N_CHARS):
            canvas = np.zeros((28, 28), dtype=np.float32)
            for _ in range(3):
                r, c = rng.integers(4, 24, size=2)
                dr, dc = rng.integers(-1, 2, size=2)
                if dr == 0 and dc == 0:
                    dc = 1
                for _k in range(int(rng.integers(6, 14))):
                    canvas[np.clip(r, 2, 25), np.clip(c, 2, 25)] = 1.0
                    canvas[np.clip(r + 1, 2, 25), np.clip(c, 2, 25)] = 1.0
                    r, c = r + dr, c + dc
            for di in range(N_DRAW):
                sh = rng.integers(-1, 2, size=2)
                im = np.roll(canvas, tuple(sh), axis=(0, 1)).copy()
                flip = rng.random((28, 28)) < 0.02
                im[flip] = 1.0 - im[flip]
                # Omniglot: white background (255), black strokes (0)
                im = (1.0 - im) * 255.0
                images[(split, 'lang{}/char{}/{}.png'.format(li, ci, di))] = np.repeat(im[:, :, None], 3, axis=2)
    return images


# torchvision.transforms, written out
class ToTensor(object):
    def __call__(self, pic):
        return torch.from_numpy(np.ascontiguousarray(pic.transpose((2, 0, 1))))


class Normalize(object):
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, t):
        return (t - self.mean) / self.std


class Compose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


# src/task.py
class OmniglotTask(object):
    '''
    Sample a few-shot learning task from the Omniglot dataset
    Sample N-way k-shot train and val sets according to
     - split (dataset/meta level train or test)
     - N-way classification (sample this many chars)
     - k-shot (sample this many examples from each char class)
    Assuming that the validation set is the same size as the train set!
    '''

    def __init__(self, store, num_cls, num_inst, split='train'):
        self.dataset = 'omniglot'
        self.root = 'images_background' if split == 'train' else 'images_evaluation'
        self.store = store
        self.num_cl = num_cls
        self.num_inst = num_inst
        # Sample num_cls characters and num_inst instances of each
        listing = {}
        for (root, path) in store:
            if root == self.root:
                lang, char, _ = path.split('/')
                listing.setdefault(lang, {}).setdefault(char, []).append(path.split('/')[-1])
        languages = sorted(listing)
        chars = []
        for l in languages:
            chars += ['/'.join([l, x]) for x in sorted(listing[l])]
        random.shuffle(chars)
        classes = chars[:num_cls]
        labels = np.array(range(len(classes)))
        labels = dict(zip(classes, labels))
        instances = dict()
        # Now sample from the chosen classes to create class-balanced train and val sets
        self.train_ids = []
        self.val_ids = []
        for c in classes:
            # First get all isntances of that class
            l, ch = c.split('/')
            temp = ['/'.join([c, x]) for x in sorted(listing[l][ch])]
            instances[c] = random.sample(temp, len(temp))
            # Sample num_inst instances randomly each for train and val
            self.train_ids += instances[c][:num_inst]
            self.val_ids += instances[c][num_inst:num_inst*2]
        # Keep instances separated by class for class-balanced mini-batches
        self.train_labels = [labels[self.get_class(x)] for x in self.train_ids]
        self.val_labels = [labels[self.get_class(x)] for x in self.val_ids]

    def get_class(self, instance):
        return '/'.join(instance.split('/')[:-1])


# src/dataset.py
class FewShotDataset(torch.utils.data.Dataset):
    """
    Load image-label pairs from a task to pass to Torch DataLoader
    Tasks consist of data and labels split into train / val splits
    """

    def __init__(self, task, split='train', transform=None, target_transform=None):
        self.transform = transform # Torch operations on the input image
        self.target_transform = target_transform
        self.task = task
        self.root = self.task.root
        self.split = split
        self.img_ids = self.task.train_ids if self.split == 'train' else self.task.val_ids
        self.labels = self.task.train_labels if self.split == 'train' else self.task.val_labels

    def __len__(self):
        return len(self.img_ids)

    def __getitem__(self, idx):
        raise NotImplementedError("This is an abstract class. Subclass this class for your particular dataset.")


class Omniglot(FewShotDataset):

    def __init__(self, *args, **kwargs):
        super(Omniglot, self).__init__(*args, **kwargs)

    def load_image(self, idx):
        ''' Load image '''
        im = self.task.store[(self.root, idx)]  # deviation: the synthetic drawing, already 28x28x3
        im = np.array(im, dtype=np.float32)
        return im

    def __getitem__(self, idx):
        img_id = self.img_ids[idx]
        im = self.load_image(img_id)
        if self.transform is not None:
            im = self.transform(im)
        label = self.labels[idx]
        if self.target_transform is not None:
            label = self.target_transform(label)
        return im, label


# src/data_loading.py
class ClassBalancedSampler(Sampler):
    '''
    Samples class-balanced batches from 'num_cl' pools each
    of size 'num_inst'
    If 'batch_cutoff' is None, indices for iterating over batches
    of the entire dataset will be returned
    Otherwise, indices for the number of batches up to the batch_cutoff
    will be returned
    (This is to allow sampling with replacement across training iterations)
    '''

    def __init__(self, num_cl, num_inst, batch_cutoff=None):
        self.num_cl = num_cl
        self.num_inst = num_inst
        self.batch_cutoff = batch_cutoff

    def __iter__(self):
        '''return a single list of indices, assuming that items will be grouped by class '''
        # First construct batches of 1 instance per class
        batches = [[i+j*self.num_inst for i in torch.randperm(self.num_inst)] for j in range(self.num_cl)]
        batches = [[batches[j][i] for j in range(self.num_cl)] for i in range(self.num_inst)]
        # Shuffle within each batch so that classes don't always appear in same order
        for sublist in batches:
            random.shuffle(sublist)

        if self.batch_cutoff is not None:
            random.shuffle(batches)
            batches = batches[:self.batch_cutoff]

        batches = [int(item) for sublist in batches for item in sublist]

        return iter(batches)

    def __len__(self):
        return 1


def get_data_loader(task, batch_size=1, split='train'):
    # NOTE: batch size here is # instances PER CLASS
    normalize = Normalize(mean=[0.92206, 0.92206, 0.92206], std=[0.08426, 0.08426, 0.08426])
    dset = Omniglot(task, transform=Compose([ToTensor(), normalize]), split=split)
    sampler = ClassBalancedSampler(task.num_cl, task.num_inst, batch_cutoff = (None if split != 'train' else batch_size))
    loader = DataLoader(dset, batch_size=batch_size*task.num_cl, sampler=sampler, num_workers=0)
    return loader


# src/layers.py
def linear(input, weight, bias=None):
    if bias is None:
        return F.linear(input, weight)
    else:
        return F.linear(input, weight, bias)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return F.conv2d(input, weight, bias, stride, padding, dilation, groups)


def relu(input):
    return F.threshold(input, 0, 0, inplace=True)


def maxpool(input, kernel_size, stride=None):
    return F.max_pool2d(input, kernel_size, stride)


def batchnorm(input, weight=None, bias=None, running_mean=None, running_var=None, training=True, eps=1e-5, momentum=0.1):
    ''' momentum = 1 restricts stats to the current mini-batch '''
    # This hack only works when momentum is 1 and avoids needing to track running stats
    # by substuting dummy variables
    running_mean = torch.zeros(np.prod(np.array(input.data.size()[1])))
    running_var = torch.ones(np.prod(np.array(input.data.size()[1])))
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


# src/omniglot_net.py
class OmniglotNet(nn.Module):
    '''
    The base model for few-shot learning on Omniglot
    '''

    def __init__(self, num_classes, loss_fn, num_in_channels=3):
        super(OmniglotNet, self).__init__()
        # Define the network
        self.features = nn.Sequential(OrderedDict([
                ('conv1', nn.Conv2d(num_in_channels, 64, 3)),
                ('bn1', nn.BatchNorm2d(64, momentum=1, affine=True)),
                ('relu1', nn.ReLU(inplace=True)),
                ('pool1', nn.MaxPool2d(2,2)),
                ('conv2', nn.Conv2d(64,64,3)),
                ('bn2', nn.BatchNorm2d(64, momentum=1, affine=True)),
                ('relu2', nn.ReLU(inplace=True)),
                ('pool2', nn.MaxPool2d(2,2)),
                ('conv3', nn.Conv2d(64,64,3)),
                ('bn3', nn.BatchNorm2d(64, momentum=1, affine=True)),
                ('relu3', nn.ReLU(inplace=True)),
                ('pool3', nn.MaxPool2d(2,2))
        ]))
        self.add_module('fc', nn.Linear(64, num_classes))

        # Define loss function
        self.loss_fn = loss_fn

        # Initialize weights
        self._init_weights()

    def forward(self, x, weights=None):
        ''' Define what happens to data in the net '''
        if weights == None:
            x = self.features(x)
            x = x.view(x.size(0), 64)
            x = self.fc(x)
        else:
            x = conv2d(x, weights['features.conv1.weight'], weights['features.conv1.bias'])
            x = batchnorm(x, weight = weights['features.bn1.weight'], bias = weights['features.bn1.bias'], momentum=1)
            x = relu(x)
            x = maxpool(x, kernel_size=2, stride=2)
            x = conv2d(x, weights['features.conv2.weight'], weights['features.conv2.bias'])
            x = batchnorm(x, weight = weights['features.bn2.weight'], bias = weights['features.bn2.bias'], momentum=1)
            x = relu(x)
            x = maxpool(x, kernel_size=2, stride=2)
            x = conv2d(x, weights['features.conv3.weight'], weights['features.conv3.bias'])
            x = batchnorm(x, weight = weights['features.bn3.weight'], bias = weights['features.bn3.bias'], momentum=1)
            x = relu(x)
            x = maxpool(x, kernel_size=2, stride=2)
            x = x.view(x.size(0), 64)
            x = linear(x, weights['fc.weight'], weights['fc.bias'])
        return x

    def net_forward(self, x, weights=None):
        return self.forward(x, weights)

    def _init_weights(self):
        ''' Set weights to Gaussian, biases to zero '''
        torch.manual_seed(1337)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                n = m.weight.size(1)
                m.weight.data.normal_(0, 0.01)
                #m.bias.data.zero_() + 1
                m.bias.data = torch.ones(m.bias.data.size())

    def copy_weights(self, net):
        ''' Set this module's weights to be the same as those of 'net' '''
        # TODO: breaks if nets are not identical
        # TODO: won't copy buffers, e.g. for batch norm
        for m_from, m_to in zip(net.modules(), self.modules()):
            if isinstance(m_to, nn.Linear) or isinstance(m_to, nn.Conv2d) or isinstance(m_to, nn.BatchNorm2d):
                m_to.weight.data = m_from.weight.data.clone()
                if m_to.bias is not None:
                    m_to.bias.data = m_from.bias.data.clone()


# src/score.py
def count_correct(pred, target):
    ''' count number of correct classification predictions in a batch '''
    pairs = [int(x==y) for (x, y) in zip(pred, target)]
    return sum(pairs)


def forward_pass(net, in_, target, weights=None):
    ''' forward in_ through the net, return loss and output '''
    input_var = in_
    target_var = target
    out = net.net_forward(input_var, weights)
    loss = net.loss_fn(out, target_var)
    return loss, out


def evaluate(net, loader, weights=None):
    ''' evaluate the net on the data in the loader '''
    num_correct = 0
    loss = 0
    for i, (in_, target) in enumerate(loader):
        batch_size = in_.numpy().shape[0]
        l, out = forward_pass(net, in_, target, weights)
        loss += l.item()
        num_correct += count_correct(np.argmax(out.data.cpu().numpy(), axis=1), target.numpy())
    return float(loss) / len(loader), float(num_correct) / (len(loader)*batch_size)


# src/inner_loop.py
class InnerLoop(OmniglotNet):
    '''
    This module performs the inner loop of MAML
    The forward method updates weights with gradient steps on training data,
    then computes and returns a meta-gradient w.r.t. validation data
    '''

    def __init__(self, num_classes, loss_fn, num_updates, step_size, batch_size, meta_batch_size, num_in_channels=3,
                 bug=None):
        super(InnerLoop, self).__init__(num_classes, loss_fn, num_in_channels)
        # Number of updates to be taken
        self.num_updates = num_updates

        # Step size for the updates
        self.step_size = step_size

        # PER CLASS Batch size for the updates
        self.batch_size = batch_size

        # for loss normalization
        self.meta_batch_size = meta_batch_size
        self.bug = bug

    def net_forward(self, x, weights=None):
        return super(InnerLoop, self).forward(x, weights)

    def forward_pass(self, in_, target, weights=None):
        ''' Run data through net, return loss and output '''
        input_var = in_
        target_var = target
        # Run the batch through the net, compute loss
        out = self.net_forward(input_var, weights)
        loss = self.loss_fn(out, target_var)
        return loss, out

    def forward(self, task):
        train_loader = get_data_loader(task, self.batch_size)
        val_loader = get_data_loader(task, self.batch_size, split='val')
        ##### Test net before training, should be random accuracy ####
        tr_pre_loss, tr_pre_acc = evaluate(self, train_loader)
        val_pre_loss, val_pre_acc = evaluate(self, val_loader)
        fast_weights = OrderedDict((name, param) for (name, param) in self.named_parameters())
        for i in range(self.num_updates):
            in_, target = next(iter(train_loader))
            if i==0:
                loss, _ = self.forward_pass(in_, target)
                grads = torch.autograd.grad(loss, self.parameters(), create_graph=True)
            else:
                loss, _ = self.forward_pass(in_, target, fast_weights)
                grads = torch.autograd.grad(loss, fast_weights.values(), create_graph=True)
            if self.bug == "inner_step_ascends":
                # bug: the inner update adds the gradient (classic sign slip)
                fast_weights = OrderedDict((name, param + self.step_size*grad) for ((name, param), grad) in zip(fast_weights.items(), grads))
            else:
                fast_weights = OrderedDict((name, param - self.step_size*grad) for ((name, param), grad) in zip(fast_weights.items(), grads))
        ##### Test net after training, should be better than random ####
        tr_post_loss, tr_post_acc = evaluate(self, train_loader, fast_weights)
        val_post_loss, val_post_acc = evaluate(self, val_loader, fast_weights)

        # Compute the meta gradient and return it
        if self.bug == "meta_loss_on_support_set":
            # bug: the meta-gradient taken on the task's training (support) examples, not its val (query) examples
            in_, target = next(iter(train_loader))
        else:
            in_, target = next(iter(val_loader))
        loss,_ = self.forward_pass(in_, target, fast_weights)
        loss = loss / self.meta_batch_size # normalize loss
        grads = torch.autograd.grad(loss, self.parameters())
        meta_grads = {name:g for ((name, _), g) in zip(self.named_parameters(), grads)}
        metrics = (tr_post_loss, tr_post_acc, val_post_loss, val_post_acc)
        return metrics, meta_grads


# src/maml.py
class MetaLearner(object):
    def __init__(self,
                dataset,
                num_classes,
                num_inst,
                meta_batch_size,
                meta_step_size,
                inner_batch_size,
                inner_step_size,
                num_updates,
                num_inner_updates,
                loss_fn,
                store=None,
                bug=None):
        super(self.__class__, self).__init__()
        self.dataset = dataset
        self.num_classes = num_classes
        self.num_inst = num_inst
        self.meta_batch_size = meta_batch_size
        self.meta_step_size = meta_step_size
        self.inner_batch_size = inner_batch_size
        self.inner_step_size = inner_step_size
        self.num_updates = num_updates
        self.num_inner_updates = num_inner_updates
        self.loss_fn = loss_fn
        self.store = store
        self.bug = bug

        # Make the nets
        #TODO: don't actually need two nets
        num_input_channels = 1 if self.dataset == 'mnist' else 3
        self.net = OmniglotNet(num_classes, self.loss_fn, num_input_channels)
        self.fast_net = InnerLoop(num_classes, self.loss_fn, self.num_inner_updates, self.inner_step_size, self.inner_batch_size, self.meta_batch_size, num_input_channels, bug=bug)
        self.opt = Adam(self.net.parameters(), lr=meta_step_size)

    def get_task(self, root, n_cl, n_inst, split='train'):
        return OmniglotTask(self.store, n_cl, n_inst, split)

    def meta_update(self, task, ls):
        loader = get_data_loader(task, self.inner_batch_size, split='val')
        in_, target = next(iter(loader))
        # We use a dummy forward / backward pass to get the correct grads into self.net
        loss, out = forward_pass(self.net, in_, target)
        # Unpack the list of grad dicts
        gradients = {k: sum(d[k] for d in ls) for k in ls[0].keys()}
        # Register a hook on each parameter in the net that replaces the current dummy grad
        # with our grads accumulated across the meta-batch
        hooks = []
        for (k,v) in self.net.named_parameters():
            def get_closure():
                key = k
                def replace_grad(grad):
                    return gradients[key]
                return replace_grad
            hooks.append(v.register_hook(get_closure()))
        # Compute grads for current step, replace with summed gradients as defined by hook
        if self.bug != "meta_zero_grad_dropped":
            self.opt.zero_grad()
        loss.backward()
        # Update the net parameters with the accumulated gradient according to optimizer
        self.opt.step()
        # Remove the hooks before next training phase
        for h in hooks:
            h.remove()

    def test(self):
        num_in_channels = 1 if self.dataset == 'mnist' else 3
        test_net = OmniglotNet(self.num_classes, self.loss_fn, num_in_channels)
        mtr_loss, mtr_acc, mval_loss, mval_acc = 0.0, 0.0, 0.0, 0.0
        # Select ten tasks randomly from the test set to evaluate on
        for _ in range(N_TEST_TASKS):
            # Make a test net with same parameters as our current net
            test_net.copy_weights(self.net)
            test_opt = SGD(test_net.parameters(), lr=self.inner_step_size)
            task = self.get_task('../data/{}'.format(self.dataset), self.num_classes, self.num_inst, split='test')
            # Train on the train examples, using the same number of updates as in training
            train_loader = get_data_loader(task, self.inner_batch_size, split='train')
            for i in range(self.num_inner_updates):
                in_, target = next(iter(train_loader))
                loss, _  = forward_pass(test_net, in_, target)
                test_opt.zero_grad()
                loss.backward()
                test_opt.step()
            # Evaluate the trained model on train and val examples
            tloss, tacc = evaluate(test_net, train_loader)
            val_loader = get_data_loader(task, self.inner_batch_size, split='val')
            vloss, vacc = evaluate(test_net, val_loader)
            mtr_loss += tloss
            mtr_acc += tacc
            mval_loss += vloss
            mval_acc += vacc

        mtr_loss = mtr_loss / N_TEST_TASKS
        mtr_acc = mtr_acc / N_TEST_TASKS
        mval_loss = mval_loss / N_TEST_TASKS
        mval_acc = mval_acc / N_TEST_TASKS
        del test_net
        return mtr_loss, mtr_acc, mval_loss, mval_acc

    def train_iteration(self):
        ''' one iteration of train()'s loop, without the per-iteration test() and the saving (deviation) '''
        # Collect a meta batch update
        grads = []
        tloss, tacc, vloss, vacc = 0.0, 0.0, 0.0, 0.0
        for i in range(self.meta_batch_size):
            task = self.get_task('../data/{}'.format(self.dataset), self.num_classes, self.num_inst)
            self.fast_net.copy_weights(self.net)
            metrics, g = self.fast_net.forward(task)
            (trl, tra, vall, vala) = metrics
            grads.append(g)
            tloss += trl
            tacc += tra
            vloss += vall
            vacc += vala

        # Perform the meta update
        self.meta_update(task, grads)
        return vloss / self.meta_batch_size


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    store = _make_alphabet(np.random.default_rng(seed))
    # train-omniglot-5way-1shot.sh
    dataset, num_cls, num_inst, batch, m_batch, num_updates, num_inner_updates, lr, meta_lr = (
        'omniglot', 5, 1, 1, META_BATCH, 15000, 5, '1e-1', '1e-3')
    loss_fn = CrossEntropyLoss()
    learner = MetaLearner(dataset, num_cls, num_inst, m_batch, float(meta_lr), batch, float(lr), num_updates,
                          num_inner_updates, loss_fn, store=store, bug=bug)
    torch.manual_seed(seed)

    task0 = learner.get_task('../data/omniglot', num_cls, num_inst)
    batch0 = next(iter(get_data_loader(task0, batch, split='val')))

    def eval_fn(model, _batch=None):
        return learner.test()[2]

    return Program(name="pytorchmaml_omniglot", model=learner.net, batch=batch0, loss_fn=loss_fn,
                   optimizer=learner.opt, train_step=learner.train_iteration, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the meta-gradient computed on the support examples the inner loop just trained on instead of the held-out
    # query examples: the meta-objective rewards memorizing the support set, not adapting to new drawings (classic).
    Bug("meta_loss_on_support_set", functools.partial(_build, bug="meta_loss_on_support_set"), "learning_ledger",
        ("TASK",)),
    # the fast weights step up the inner-loop gradient (``param + step_size * grad``): adaptation makes each task's
    # loss worse before the meta-gradient is taken (classic sign slip).
    Bug("inner_step_ascends", functools.partial(_build, bug="inner_step_ascends"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``self.opt.zero_grad()`` dropped from meta_update: the hooked meta-gradients pile up across meta-iterations
    # (classic; whole-model slip, README rule 6).
    Bug("meta_zero_grad_dropped", functools.partial(_build, bug="meta_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
