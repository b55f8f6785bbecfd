"""Person re-identification baseline of layumi/Person_reID_baseline_pytorch: the repository's ``ft_net`` (a ResNet
backbone with ``AdaptiveAvgPool2d((1, 1))``, its own ``fc`` left unused, and a ``ClassBlock``: Linear to 512,
``BatchNorm1d``, Dropout 0.5, Kaiming init, then a Linear classifier over the identities initialized with std 1e-4),
trained by ``train.py`` with its defaults (``python train.py``: no extra losses, no fp16, no warm-up): identity
classification with ``CrossEntropyLoss``, SGD (Nesterov, momentum 0.9, weight decay 5e-4) over two groups (the
backbone at 0.1 x lr and the ``classifier`` at lr 0.05), ``StepLR(step_size=total_epoch*2//3, gamma=0.1)`` stepped
after each training phase, batches smaller than ``batchsize`` skipped, each epoch a ``train`` phase
(``model.train(True)``, ``zero_grad`` / forward / ``backward`` / ``step``) and a ``val`` phase (``model.train(False)``,
forward under ``no_grad``); images resized, padded by 10, randomly cropped back, flipped and normalized.

Source: https://github.com/layumi/Person_reID_baseline_pytorch
Commit: 82ff40fb11b7353400dc8670dcec620d97285096
Files: train.py, model.py
License: MIT (Copyright (c) 2018 Zhedong Zheng)
Domain: person re-identification (identity-classification training of an embedding network)

Deviations from the original:
- backbone: ``torchvision.models.resnet50(pretrained=True)`` is not available (no torchvision, no download), so
  torchvision's ResNet-18 as written out in ``_tv_resnet.py`` is used at width 8 from its own init; the ClassBlock's
  input is then 64 instead of 2048 (``ClassBlock(64, ...)``), everything else in ``ft_net`` and ``ClassBlock`` as
  written;
- sizes: 256x128 images -> 48x24, ``Pad(10)`` -> ``Pad(2)``; 751 Market-1501 identities -> 8; batch 32 as written;
  160 training and 32 validation images; ``total_epoch`` 60 as written (so the lr steps down after 40 epochs of
  5 batches);
- data: Market-1501's ``ImageFolder`` is replaced by synthetic pedestrians made from ``seed``: each identity has a
  shirt colour and a trouser colour, drawn as a body on a noisy background at a random horizontal offset; the
  torchvision transforms (Resize (a no-op here: images are made at the target size), Pad, RandomCrop,
  RandomHorizontalFlip, ToTensor, Normalize) are written out in plain torch; DataLoader without workers, pinning or
  persistent workers;
- tqdm progress bars, curve drawing, checkpoint saving, ``.cuda()``, ``cudnn.benchmark`` and the unused
  GradScaler are dropped;
- one ``train_step`` is one batch of the ``train`` phase; when the loader is exhausted the epoch ends as in
  ``train_model``: ``scheduler.step()``, the ``val`` phase, then the next epoch's ``model.train(True)``; ``eval_fn``
  is the identity accuracy under ``train(False)`` on a batch; ``task_probe`` a held-out (images, identities) pair.
"""
# ruff: noqa: F841, PLR0402, RUF059, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data
from torch.nn import init
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _tv_resnet import resnet18

N_IDS, N_TRAIN, N_VAL, H, W, PAD, WIDTH = 8, 160, 32, 48, 24, 2, 8
BATCHSIZE, LR, WEIGHT_DECAY, TOTAL_EPOCH, DROPRATE, LINEAR_NUM, STRIDE = 32, 0.05, 5e-4, 60, 0.5, 512, 2


# ---- model.py ------------------------------------------------------------------------------------------------

def weights_init_kaiming(m):
    classname = m.__class__.__name__
    # print(classname)
    if classname.find('Conv') != -1:
        init.kaiming_normal_(m.weight.data, a=0, mode='fan_in') # For old pytorch, you may use kaiming_normal.
    elif classname.find('Linear') != -1:
        init.kaiming_normal_(m.weight.data, a=0, mode='fan_out')
    elif classname.find('BatchNorm1d') != -1:
        init.normal_(m.weight.data, 1.0, 0.02)
    if hasattr(m, 'bias') and m.bias is not None:
        init.constant_(m.bias.data, 0.0)


def weights_init_classifier(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        init.normal_(m.weight.data, std=0.0001)
        init.constant_(m.bias.data, 0.0)


class ClassBlock(nn.Module):
    def __init__(self, input_dim, class_num, droprate, relu=False, bnorm=True, linear=512, return_f = False):
        super(ClassBlock, self).__init__()
        self.return_f = return_f
        add_block = []
        if linear>0:
            add_block += [nn.Linear(input_dim, linear)]
        else:
            linear = input_dim
        if bnorm:
            add_block += [nn.BatchNorm1d(linear)]
        if relu:
            add_block += [nn.LeakyReLU(0.1)]
        if droprate>0:
            add_block += [nn.Dropout(p=droprate)]
        add_block = nn.Sequential(*add_block)
        add_block.apply(weights_init_kaiming)

        classifier = []
        classifier += [nn.Linear(linear, class_num)]
        classifier = nn.Sequential(*classifier)
        classifier.apply(weights_init_classifier)

        self.linear_num = linear
        self.add_block = add_block
        self.classifier = classifier

    def forward(self, x):
        x = self.add_block(x)
        if self.return_f:
            f = x
            x = self.classifier(x)
            return [x,f]
        else:
            x = self.classifier(x)
            return x


class ft_net(nn.Module):

    def __init__(self, class_num=751, droprate=0.5, stride=2, circle=False, ibn=False, linear_num=512, usam=False):
        super(ft_net, self).__init__()
        model_ft = resnet18(pretrained=False, width=WIDTH)  # models.resnet50(pretrained=True) in the original
        if stride == 1:
            model_ft.layer4[0].downsample[0].stride = (1,1)
            model_ft.layer4[0].conv2.stride = (1,1)
        model_ft.avgpool = nn.AdaptiveAvgPool2d((1,1))
        self.model = model_ft
        self.circle = circle
        self.classifier = ClassBlock(8 * WIDTH, class_num, droprate, linear=linear_num, return_f = circle)
        self.usam = usam

    def forward(self, x):
        x = self.model.conv1(x)
        x = self.model.bn1(x)
        x = self.model.relu(x)
        x = self.model.maxpool(x)
        x = self.model.layer1(x)
        x = self.model.layer2(x)
        x = self.model.layer3(x)
        x = self.model.layer4(x)
        x = self.model.avgpool(x)
        x = x.view(x.size(0), x.size(1))
        x = self.classifier(x)
        return x


# ---- synthetic pedestrians and the torchvision transforms in plain torch --------------------------------------

MEAN = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
STD = torch.tensor([0.229, 0.224, 0.225])[:, None, None]


def make_people(gen, n, shirts, trousers):
    """ToTensor output ([0, 1], CHW): a head, a shirt-coloured torso and trouser-coloured legs over noise."""
    ids = torch.randint(0, N_IDS, (n,), generator=gen)
    images = 0.5 + 0.15 * torch.randn(n, 3, H, W, generator=gen)
    offsets = torch.randint(-3, 4, (n,), generator=gen)
    for i in range(n):
        c0 = W // 2 - 5 + int(offsets[i])
        images[i, :, 4:11, c0 + 2:c0 + 8] = 0.8  # head
        images[i, :, 11:28, c0:c0 + 10] = shirts[ids[i]][:, None, None]
        images[i, :, 28:45, c0 + 1:c0 + 9] = trousers[ids[i]][:, None, None]
    return images.clamp(0, 1), ids


class People(Dataset):
    def __init__(self, images, ids, train, gen):
        self.images, self.ids, self.train, self.gen = images, ids, train, gen

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD))  # transforms.Pad(10)
            i = int(torch.randint(0, 2 * PAD + 1, (1,), generator=self.gen))  # transforms.RandomCrop((h, w))
            j = int(torch.randint(0, 2 * PAD + 1, (1,), generator=self.gen))
            x = x[:, i:i + H, j:j + W]
            if float(torch.rand(1, generator=self.gen)) < 0.5:  # transforms.RandomHorizontalFlip()
                x = x.flip(-1)
        return (x - MEAN) / STD, self.ids[idx]  # transforms.Normalize


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    shirts, trousers = torch.rand(N_IDS, 3, generator=gen), torch.rand(N_IDS, 3, generator=gen)
    train_images, train_ids = make_people(gen, N_TRAIN, shirts, trousers)
    val_images, val_ids = make_people(gen, N_VAL, shirts, trousers)
    probe_images, probe_ids = make_people(gen, 64, shirts, trousers)
    image_datasets = {'train': People(train_images, train_ids, True, torch.Generator().manual_seed(seed + 1)),
                      'val': People(val_images, val_ids, False, None)}
    dataloaders = {x: torch.utils.data.DataLoader(image_datasets[x], batch_size=BATCHSIZE, shuffle=True,
                                                  num_workers=0, drop_last=True,
                                                  generator=torch.Generator().manual_seed(seed + 2))
                   for x in ['train', 'val']}

    model = ft_net(N_IDS, DROPRATE, STRIDE, circle=False, ibn=False, linear_num=LINEAR_NUM, usam=False)
    optim_name = optim.SGD
    ignored_params = list(map(id, model.classifier.parameters() ))
    base_params = filter(lambda p: id(p) not in ignored_params, model.parameters())
    if bug == "base_params_filter_consumed":
        # the backbone's parameters counted for a log line before the optimizer is built: ``filter`` is a one-shot
        # iterator, so the backbone group reaches SGD empty and the backbone is never updated
        print_count = sum(p.numel() for p in base_params)
    classifier_params = model.classifier.parameters()
    optimizer_ft = optim_name([
             {'params': base_params, 'lr': 0.1*LR},
             {'params': classifier_params, 'lr': LR}
         ], weight_decay=WEIGHT_DECAY, momentum=0.9, nesterov=True)
    exp_lr_scheduler = optim.lr_scheduler.StepLR(optimizer_ft, step_size=TOTAL_EPOCH*2//3, gamma=0.1)
    criterion = nn.CrossEntropyLoss()
    optimizer, scheduler = optimizer_ft, exp_lr_scheduler

    def val_phase():
        model.train(False)  # Set model to evaluate mode
        for iter, data in enumerate(dataloaders['val']):
            inputs, labels = data
            now_batch_size,c,h,w = inputs.shape
            if now_batch_size<BATCHSIZE: # skip the last batch
                continue
            optimizer.zero_grad()
            with torch.no_grad():
                outputs = model(inputs)
            _, preds = torch.max(outputs.data, 1)
            loss = criterion(outputs, labels)

    state = {"it": None}

    def next_batch():
        while True:
            try:
                data = next(state["it"])
            except (StopIteration, TypeError):
                if state["it"] is not None:  # the end of the train phase
                    scheduler.step()
                    val_phase()
                model.train(True)  # Set model to training mode
                state["it"] = iter(dataloaders['train'])
                continue
            if data[0].shape[0] < BATCHSIZE:  # skip the last batch
                continue
            return data

    def train_step():
        inputs, labels = next_batch()
        now_batch_size,c,h,w = inputs.shape

        # zero the parameter gradients
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        # forward
        outputs = model(inputs)

        sm = nn.Softmax(dim=1)
        log_sm = nn.LogSoftmax(dim=1)
        _, preds = torch.max(outputs.data, 1)
        if bug == "softmax_before_cross_entropy":
            loss = criterion(sm(outputs), labels)
        else:
            loss = criterion(outputs, labels)

        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, labels = batch
        was_training = model.training
        model.train(False)
        with torch.no_grad():
            _, preds = torch.max(model(inputs).data, 1)
        model.train(was_training)
        return float((preds == labels).float().mean())

    first = next(iter(torch.utils.data.DataLoader(People(train_images, train_ids, False, None),
                                                  batch_size=BATCHSIZE)))
    probe = ((probe_images - MEAN) / STD, probe_ids)
    return Program(name="layumireid_ftnet", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=dataloaders['train'])


build = functools.partial(_build)

BUGS = [
    # nn.Softmax (``sm``, defined in the loop for the PCB and DG branches) applied before CrossEntropyLoss: the loss
    # takes a log-softmax of probabilities, its gradients vanish as the outputs saturate.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # ``base_params`` is a ``filter`` object: consumed once before SGD is built (a parameter count), the backbone's
    # group is silently empty and only the ClassBlock trains.
    Bug("base_params_filter_consumed", functools.partial(_build, bug="base_params_filter_consumed"),
        "four_structures", ("model.conv1",)),
    # optimizer.zero_grad() dropped from the loop: the gradients of every batch accumulate.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
