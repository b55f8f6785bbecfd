"""PyTorch-Ignite's Siamese network example: a ResNet-34 feature extractor (its ``fc`` replaced by identity) and a
shared head ``Linear -> ReLU -> Linear(256, 10) -> ReLU`` embed an anchor, a positive (same class) and a negative
(another class) image; ``nn.TripletMarginLoss(p=2, margin=2.8)``; Adadelta lr 1.0 with ``StepLR(step_size=15,
gamma=0.95)`` wrapped in ignite's ``LRScheduler`` on ``Events.ITERATION_STARTED``; the ``Engine(train_step)`` loop;
evaluation by a squared-distance threshold (``test_loss < 3`` means "same class").

Source: https://github.com/pytorch/ignite
Commit: de08e799cfb55a6cf4aa778575d6bad725385453
Files: examples/siamese_network/siamese_network.py, ignite/engine/engine.py (Engine.run's iteration),
  ignite/handlers/param_scheduler.py (LRScheduler)
License: BSD-3-Clause (Copyright (c) 2018-present, PyTorch-Ignite team; full text in LICENSES/pytorch-ignite.txt)
Domain: metric learning (triplet margin loss, Siamese network, ignite Engine)

Deviations from the original:
- ignite is not installed here: ``Engine`` is written out as the part of ``Engine.run`` one iteration executes
  (fire ``ITERATION_STARTED`` handlers, ``state.output = process_function(engine, batch)``, fire
  ``ITERATION_COMPLETED`` handlers); ``LRScheduler.__call__`` is written out (set each group's lr from the wrapped
  scheduler's ``get_lr()``, then ``last_epoch += 1``); ``RunningAverage``, ``Accuracy``, the progress bars and
  ``manual_seed`` are left out (the seed is ``torch.manual_seed``);
- torchvision is not installed: ``torchvision.models.resnet34(weights=None)`` is torchvision's ResNet written out
  in ``_tv_resnet.py`` with ResNet-34's ``BasicBlock`` counts ``[3, 4, 6, 3]`` and widths 8-16-32-64 instead of
  64-128-256-512 (so the head's ``fc_in_features`` is 64, not 512);
- data: CIFAR-10 is replaced by 800 training and 200 test synthetic 3x16x16 images (not 32x32) made from
  ``seed``: each of the 10 classes has its own random pattern, an image is its class pattern plus noise, on the
  0..255 scale CIFAR-10's uint8 pixels have (the example feeds them unnormalized, ``.float()``, as here);
  ``MatcherDataset`` (grouping by class, drawing the positive and the negative with ``torch.randint``) is unchanged
  apart from taking the arrays instead of ``datasets.CIFAR10``;
- sizes: batch size 256 -> 16 (train and test), ``num_workers`` 4 -> 0;
- one ``train_step`` is one iteration of ``trainer.run(train_loader)`` (the loader restarted per epoch); the
  evaluator is the ``eval_fn`` (``test_step`` over the test loader, accuracy of ``y_pred`` against ``y_true``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

# ruff: noqa: PLR0402, PIE808, UP034  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tv_resnet import BasicBlock, ResNet

BATCH_SIZE = 16
TEST_BATCH_SIZE = 16
LR = 1.0
GAMMA = 0.95
IMAGE = 16


# ---- ignite (the parts one iteration runs) --------------------------------------------------------------------

class Events:
    ITERATION_STARTED = "iteration_started"
    ITERATION_COMPLETED = "iteration_completed"


class State:
    def __init__(self):
        self.iteration = 0
        self.epoch = 0
        self.output = None


class Engine:
    def __init__(self, process_function):
        self._process_function = process_function
        self._event_handlers = {Events.ITERATION_STARTED: [], Events.ITERATION_COMPLETED: []}
        self.state = State()

    def add_event_handler(self, event_name, handler, *args, **kwargs):
        self._event_handlers[event_name].append((handler, args, kwargs))

    def _fire_event(self, event_name):
        for func, args, kwargs in self._event_handlers[event_name]:
            func(self, *args, **kwargs)

    def run_iteration(self, batch):
        """One iteration of ``Engine._run_once_on_dataset``."""
        self.state.iteration += 1
        self._fire_event(Events.ITERATION_STARTED)
        self.state.output = self._process_function(self, batch)
        self._fire_event(Events.ITERATION_COMPLETED)
        return self.state.output


class LRScheduler:
    def __init__(self, lr_scheduler):
        self.lr_scheduler = lr_scheduler
        self.optimizer_param_groups = lr_scheduler.optimizer.param_groups
        self.param_name = "lr"
        self.event_index = 0

    def __call__(self, engine, name=None):
        # ParamScheduler.__call__
        value = self.get_param()
        if isinstance(value, list):
            for i, param_group in enumerate(self.optimizer_param_groups):
                param_group[self.param_name] = value[i]
        else:
            for i, param_group in enumerate(self.optimizer_param_groups):
                param_group[self.param_name] = value
        self.event_index += 1
        # LRScheduler.__call__
        self.lr_scheduler.last_epoch += 1

    def get_param(self):
        """Method to get current optimizer's parameter value"""
        # Emulate context manager for pytorch>=1.4
        self.lr_scheduler._get_lr_called_within_step = True
        lr_list = self.lr_scheduler.get_lr()
        self.lr_scheduler._get_lr_called_within_step = False
        if len(lr_list) == 1:
            return lr_list[0]
        else:
            return lr_list


# ---- examples/siamese_network/siamese_network.py ---------------------------------------------------------------

class SiameseNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        # get resnet model
        self.resnet = ResNet(BasicBlock, [3, 4, 6, 3], width=8)  # torchvision.models.resnet34(weights=None)
        fc_in_features = self.resnet.fc.in_features

        # changing the FC layer of resnet model to a linear layer
        self.resnet.fc = nn.Identity()

        # add linear layers to compare between the features of the two images
        self.fc = nn.Sequential(
            nn.Linear(fc_in_features, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, 10),
            nn.ReLU(inplace=True),
        )

        # initialise relu activation
        self.relu = nn.ReLU()

        # initialize the weights
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        output = output.view(output.size()[0], -1)
        return output

    def forward(self, input1, input2, input3):
        # pass the input through resnet
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output3 = self.forward_once(input3)

        # pass the output of resnet to sigmoid layer
        output1 = self.fc(output1)
        output2 = self.fc(output2)
        output3 = self.fc(output3)

        return output1, output2, output3


class MatcherDataset(Dataset):
    # following class implements data downloading and handles preprocessing
    def __init__(self, data, targets, bug=None):
        super().__init__()
        self.bug = bug

        # the CIFAR10 arrays (N, H, W, C) and targets, here synthetic
        self.data = torch.from_numpy(data)

        # shift the dimensions of dataset to match the initial input layer dimensions
        self.data = torch.movedim(self.data, (0, 1, 2, 3), (0, 2, 3, 1))

        # convert targets list to torch Tensor
        self.targets = torch.tensor(targets)

        self.group_examples()

    def group_examples(self):
        # get the targets
        np_arr = np.array(self.targets)

        # group examples based on class
        self.grouped_examples = {}
        for i in range(0, 10):
            self.grouped_examples[i] = np.where((np_arr == i))[0]

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        # obtain the anchor image
        anchor_image = self.data[index].float()

        # obtain the class label of the anchor image
        anchor_label = self.targets[index]
        anchor_label = int(anchor_label.item())

        # find a label which is different from anchor_label
        labels = list(range(0, 10))
        if self.bug != "negative_class_not_excluded":
            labels.remove(anchor_label)
        neg_index = torch.randint(0, 9, (1,)).item()
        neg_label = labels[neg_index]

        # get a random index from the range range of indices
        random_index = torch.randint(0, len(self.grouped_examples[anchor_label]), (1,)).item()

        # get the index of image in actual data using the anchor label and random index
        positive_index = self.grouped_examples[anchor_label][random_index]

        # choosing a random image using positive_index
        positive_image = self.data[positive_index].float()

        # get a random index from the range range of indices
        random_index = torch.randint(0, len(self.grouped_examples[neg_label]), (1,)).item()

        # get the index of image in actual data using the negative label and random index
        negative_index = self.grouped_examples[neg_label][random_index]

        # choosing a random image using negative_index
        negative_image = self.data[negative_index].float()

        return anchor_image, positive_image, negative_image, anchor_label


def pairwise_distance(input1, input2):
    dist = input1 - input2
    dist = torch.pow(dist, 2)
    return dist


def calculate_loss(input1, input2):
    output = pairwise_distance(input1, input2)
    loss = torch.sum(output, 1)
    loss = torch.sqrt(loss)
    return loss


def make_images(seed, n):
    """10 classes, each a fixed random 16x16x3 pattern; an image is its class pattern plus noise, 0..255."""
    g = np.random.default_rng(seed)
    patterns = np.random.default_rng(1000 + seed // 1000).standard_normal((10, IMAGE, IMAGE, 3))
    targets = g.integers(0, 10, n)
    images = 128 + 50 * patterns[targets] + 25 * g.standard_normal((n, IMAGE, IMAGE, 3))
    return np.clip(images, 0, 255).astype(np.uint8), targets.tolist()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")

    # data loading
    train_dataset = MatcherDataset(*make_images(seed, 800), bug=bug)
    test_dataset = MatcherDataset(*make_images(seed + 1, 200), bug=bug)
    train_loader = DataLoader(train_dataset, shuffle=True, batch_size=BATCH_SIZE, num_workers=0)
    test_loader = DataLoader(test_dataset, batch_size=TEST_BATCH_SIZE, num_workers=0)

    # set model parameters
    model = SiameseNetwork().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=LR)
    scheduler = StepLR(optimizer, step_size=15, gamma=GAMMA)
    lr_scheduler = LRScheduler(scheduler)

    # using Triplet Margin Loss
    criterion = nn.TripletMarginLoss(p=2, margin=2.8)

    def loss_of(anchor_out, positive_out, negative_out):
        if bug == "positive_negative_swapped":
            # the embeddings handed to the criterion in the wrong order: same-class images are pushed apart
            return criterion(anchor_out, negative_out, positive_out)
        return criterion(anchor_out, positive_out, negative_out)

    # define model training step
    def train_step(engine, batch):
        if bug == "trained_in_eval_mode":
            model.eval()  # test_step's first line copied into the training step
        else:
            model.train()
        anchor_image, positive_image, negative_image, anchor_label = batch
        anchor_image = anchor_image.to(device)
        positive_image, negative_image = positive_image.to(device), negative_image.to(device)
        anchor_label = anchor_label.to(device)
        optimizer.zero_grad()
        anchor_out, positive_out, negative_out = model(anchor_image, positive_image, negative_image)
        loss = loss_of(anchor_out, positive_out, negative_out)
        loss.backward()
        optimizer.step()
        return loss

    # define model testing step
    def test_step(engine, batch):
        model.eval()
        with torch.no_grad():
            anchor_image, _, _, anchor_label = batch
            anchor_image = anchor_image.to(device)
            anchor_label = anchor_label.to(device)
            other_image = []
            other_label = []
            y_true = []
            for i in range(anchor_image.shape[0]):
                index = torch.randint(0, anchor_image.shape[0], (1,)).item()
                img = anchor_image[index]
                label = anchor_label[index]
                other_image.append(img)
                other_label.append(label)
                if anchor_label[i] == other_label[i]:
                    y_true.append(1)
                else:
                    y_true.append(0)
            other = torch.stack(other_image)
            other_label = torch.tensor(other_label)
            other, other_label = other.to(device), other_label.to(device)
            anchor_out, other_out, _ = model(anchor_image, other, other)
            test_loss = calculate_loss(anchor_out, other_out)
            y_pred = torch.where(test_loss < 3, 1, 0)
            y_true = torch.tensor(y_true)
            return [y_pred, y_true]

    # create engines for trainer and evaluator
    trainer = Engine(train_step)
    evaluator = Engine(test_step)

    # attach LR Scheduler to trainer engine
    trainer.add_event_handler(Events.ITERATION_STARTED, lr_scheduler)

    def batches():
        while True:  # trainer.run(train_loader, max_epochs=...): one pass per epoch
            yield from train_loader

    stream = batches()

    def step():
        return trainer.run_iteration(next(stream)).detach()

    def eval_fn(model, batch):
        correct = total = 0
        for b in test_loader:
            y_pred, y_true = evaluator.run_iteration(b)
            correct += int((y_pred == y_true).sum())
            total += len(y_true)
        return correct / total

    anchor, positive, negative, label = next(iter(DataLoader(train_dataset, batch_size=BATCH_SIZE)))
    batch = ({"input1": anchor, "input2": positive, "input3": negative}, label)

    return Program(name="ignite_siamese", model=model, batch=batch,
                   loss_fn=lambda outputs, _label: loss_of(*outputs), optimizer=optimizer, train_step=step,
                   eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the anchor's class is not taken out of the negatives' candidates (classic): some "negatives" are positives,
    # and the loss pushes same-class images apart on them.
    Bug("negative_class_not_excluded", functools.partial(_build, bug="negative_class_not_excluded"),
        "learning_ledger", ("TASK",)),
    # positive and negative embeddings passed to TripletMarginLoss in the wrong order (classic).
    Bug("positive_negative_swapped", functools.partial(_build, bug="positive_negative_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # model.eval() (test_step's first line) in the training step (classic): BatchNorm trains on running statistics.
    Bug("trained_in_eval_mode", functools.partial(_build, bug="trained_in_eval_mode"), "step_probe",
        ("resnet.bn1",)),
]
