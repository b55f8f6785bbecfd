"""Appearance-based gaze estimation of hysts/pytorch_mpiigaze: the repository's MPIIGaze ``lenet`` (two 5x5
convolutions each followed by 2x2 max pooling and no activation, ``fc1`` 3600 -> 500 with ReLU, the 2-d head pose
concatenated to the features, ``fc2`` 502 -> 2 predicting the gaze's pitch and yaw; conv weights normal(0, 0.1) and
normal(0, 0.01), Xavier-uniform linear weights, zero biases), trained by ``train.py`` with
``configs/mpiigaze/lenet_train.yaml``: ``MSELoss`` (loss ``L2``), SGD (lr 0.01, momentum 0.9, Nesterov, weight decay
1e-4 in one parameter group since ``no_weight_decay_on_bn`` is off), ``MultiStepLR(milestones=[8, 9], gamma=0.1)``
stepped after every epoch, batch 32 with ``drop_last``, leave-one-person-out (``test_id`` 0) with a 10% validation
split by ``random_split``, ``validate`` (``eval()``, ``no_grad``, MSE and mean angle error) before training and after
every epoch; eye images scaled by 1/255 with a channel axis added (``_create_mpiigaze_transform``).

Source: https://github.com/hysts/pytorch_mpiigaze
Commit: 2a31a6ce82264dd9b34f74cfd5ef54c08e4eed5f
Files: train.py, configs/mpiigaze/lenet_train.yaml, gaze_estimation/models/mpiigaze/lenet.py, gaze_estimation/losses.py,
gaze_estimation/optim.py, gaze_estimation/scheduler.py, gaze_estimation/dataloader.py,
gaze_estimation/datasets/__init__.py, gaze_estimation/datasets/mpiigaze.py, gaze_estimation/transforms.py,
gaze_estimation/utils.py, gaze_estimation/config/defaults.py
License: MIT (Copyright (c) 2017 hysts)
Domain: gaze estimation (regression of a 3-D direction's angles from eye images and head pose)

Deviations from the original:
- sizes: the network and the 36x60 eye images are as written; 15 persons x 3000 images -> 5 persons x 64 images
  (person 0 held out as ``test_id`` 0, so 256 images split 231 / 25 by ``random_split``);
- data: the preprocessed ``MPIIGaze.h5`` (read with h5py) is replaced by synthetic uint8 eye images made from
  ``seed``: a dark iris disc on a bright eye ellipse over skin, the iris placed by the eye's rotation, each person
  with their own skin tone and iris size, plus noise; the head pose (pitch, yaw) is drawn in [-0.3, 0.3] and the gaze
  label is the eye's rotation plus half the head pose, so the pose input carries part of the answer as in the
  normalized MPIIGaze data; torchvision's ``Compose`` / ``Lambda`` are written out as plain functions; DataLoader
  without workers;
- yacs config, logger, fvcore checkpointer, tensorboard writer, ``setup_cudnn`` and ``.to(device)`` are dropped (CPU);
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in ``main()``:
  ``scheduler.step()``, ``validate``, then the next ``train()`` call's ``model.train()``; the validation before
  training (``val_first``) runs in ``build``; ``eval_fn`` is ``validate``'s mean angle error (degrees) on a batch;
  the program's batch is (images, poses) with the gazes as targets, ``task_probe`` a held-out ((images, poses),
  gazes) pair from the held-out person.
"""
# ruff: noqa: F841, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_PERSONS, PER_PERSON, TEST_ID, VAL_RATIO, BATCH_SIZE = 5, 64, 0, 0.1, 32
BASE_LR, MOMENTUM, WEIGHT_DECAY, MILESTONES, LR_DECAY = 0.01, 0.9, 1e-4, [8, 9], 0.1
H, W = 36, 60


# ---- gaze_estimation/models/mpiigaze/lenet.py ----------------------------------------------------------------

def initialize_weights(module: torch.nn.Module) -> None:
    if isinstance(module, nn.Conv2d):
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
        nn.init.zeros_(module.bias)


class Model(nn.Module):
    def __init__(self, config=None):
        super().__init__()

        self.conv1 = nn.Conv2d(1, 20, kernel_size=5, stride=1, padding=0)
        self.conv2 = nn.Conv2d(20, 50, kernel_size=5, stride=1, padding=0)
        self.fc1 = nn.Linear(3600, 500)
        self.fc2 = nn.Linear(502, 2)

        self._initialize_weight()

    def _initialize_weight(self) -> None:
        nn.init.normal_(self.conv1.weight, mean=0, std=0.1)
        nn.init.normal_(self.conv2.weight, mean=0, std=0.01)
        self.apply(initialize_weights)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.conv1(x), kernel_size=2, stride=2)
        x = F.max_pool2d(self.conv2(x), kernel_size=2, stride=2)
        x = F.relu(self.fc1(x.view(x.size(0), -1)), inplace=True)
        x = torch.cat([x, y], dim=1)
        x = self.fc2(x)
        return x


# ---- gaze_estimation/utils.py --------------------------------------------------------------------------------

def convert_to_unit_vector(angles):
    pitches = angles[:, 0]
    yaws = angles[:, 1]
    x = -torch.cos(pitches) * torch.sin(yaws)
    y = -torch.sin(pitches)
    z = -torch.cos(pitches) * torch.cos(yaws)
    norm = torch.sqrt(x**2 + y**2 + z**2)
    x /= norm
    y /= norm
    z /= norm
    return x, y, z


def compute_angle_error(predictions, labels):
    pred_x, pred_y, pred_z = convert_to_unit_vector(predictions)
    label_x, label_y, label_z = convert_to_unit_vector(labels)
    angles = pred_x * label_x + pred_y * label_y + pred_z * label_z
    return torch.acos(angles) * 180 / np.pi


# ---- synthetic MPIIGaze persons in place of MPIIGaze.h5 ------------------------------------------------------

def make_person(rng):
    """3000 -> PER_PERSON (image uint8 36x60, pose float32 (2,), gaze float32 (2,)) of one person."""
    skin, iris_r = rng.uniform(120, 180), rng.uniform(5.0, 7.0)
    eye = rng.uniform(-0.3, 0.3, (PER_PERSON, 2)).astype(np.float32)
    poses = rng.uniform(-0.3, 0.3, (PER_PERSON, 2)).astype(np.float32)
    gazes = (eye + 0.5 * poses).astype(np.float32)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    white = ((yy - H / 2) / 13.0) ** 2 + ((xx - W / 2) / 26.0) ** 2 <= 1.0
    images = np.empty((PER_PERSON, H, W), np.uint8)
    for i in range(PER_PERSON):
        cy, cx = H / 2 - 30.0 * eye[i, 0], W / 2 - 50.0 * eye[i, 1]
        img = np.where(white, 225.0, skin)
        img = np.where((yy - cy) ** 2 + (xx - cx) ** 2 <= iris_r ** 2, 40.0, img)
        img = img + 8.0 * rng.standard_normal((H, W))
        images[i] = np.clip(img, 0, 255).astype(np.uint8)
    return images, poses, gazes


# ---- gaze_estimation/transforms.py, datasets/mpiigaze.py, datasets/__init__.py -------------------------------

def _create_mpiigaze_transform():
    def scale(x):
        return x.astype(np.float32) / 255

    def transform(x):
        x = scale(x)
        x = torch.from_numpy(x)
        return x[None, :, :]
    return transform


class OnePersonDataset(Dataset):
    def __init__(self, person, transform):
        self.transform = transform
        images, poses, gazes = person
        assert len(images) == PER_PERSON
        assert len(poses) == PER_PERSON
        assert len(gazes) == PER_PERSON
        self.images = images
        self.poses = poses
        self.gazes = gazes

    def __getitem__(self, index: int):
        image = self.transform(self.images[index])
        pose = torch.from_numpy(self.poses[index])
        gaze = torch.from_numpy(self.gazes[index])
        return image, pose, gaze

    def __len__(self) -> int:
        return len(self.images)


def create_dataset(persons, transform):
    person_ids = [f'p{index:02}' for index in range(N_PERSONS)]
    test_person_id = person_ids[TEST_ID]
    train_dataset = torch.utils.data.ConcatDataset([
        OnePersonDataset(persons[i], transform)
        for i, person_id in enumerate(person_ids) if person_id != test_person_id
    ])
    val_ratio = VAL_RATIO
    assert val_ratio < 1
    val_num = int(len(train_dataset) * val_ratio)
    train_num = len(train_dataset) - val_num
    lengths = [train_num, val_num]
    return torch.utils.data.dataset.random_split(train_dataset, lengths)


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)  # set_seeds(config.train.seed)
    rng = np.random.default_rng(seed)
    persons = [make_person(rng) for _ in range(N_PERSONS)]
    transform = _create_mpiigaze_transform()

    train_dataset, val_dataset = create_dataset(persons, transform)
    train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(val_dataset, batch_size=BATCH_SIZE, shuffle=False, num_workers=0, drop_last=False)
    model = Model()
    loss_function = nn.MSELoss(reduction='mean')
    params = [{'params': list(model.parameters()), 'weight_decay': WEIGHT_DECAY}]
    optimizer = torch.optim.SGD(params, lr=BASE_LR, momentum=MOMENTUM, nesterov=True)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=MILESTONES, gamma=LR_DECAY)

    def validate():
        model.eval()
        with torch.no_grad():
            for step, (images, poses, gazes) in enumerate(val_loader):
                outputs = model(images, poses)
                loss = loss_function(outputs, gazes)
                angle_error = compute_angle_error(outputs, gazes).mean()

    validate()  # config.train.val_first

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main()
                scheduler.step()
                validate()
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        images, poses, gazes = next_batch()

        optimizer.zero_grad()

        if bug == "poses_for_images_of_another_batch":
            outputs = model(images, state.setdefault("last_poses", poses))
            state["last_poses"] = poses
        else:
            outputs = model(images, poses)
        if bug == "target_is_head_pose":
            loss = loss_function(outputs, poses)
        else:
            loss = loss_function(outputs, gazes)
        loss.backward()

        optimizer.step()

        angle_error = compute_angle_error(outputs, gazes).mean()
        return loss.detach()

    def eval_fn(model, batch):
        (images, poses), gazes = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            err = compute_angle_error(model(images, poses), gazes).mean()
        model.train(was_training)
        return float(err)

    def model_loss(outputs, gazes):
        return loss_function(outputs, gazes)

    test_set = OnePersonDataset(persons[TEST_ID], transform)
    test_images, test_poses, test_gazes = next(iter(DataLoader(test_set, batch_size=len(test_set))))
    first = next(iter(DataLoader(train_dataset, batch_size=BATCH_SIZE)))
    return Program(name="mpiigaze_lenet", model=model, batch=((first[0], first[1]), first[2]), loss_fn=model_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   task_probe=((test_images, test_poses), test_gazes), task="regression", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # Copy-paste slip between the two 2-d (pitch, yaw) tensors of a batch: the head pose is regressed instead of the
    # gaze; the loss falls (the pose is even an input), the gaze is never learned.
    Bug("target_is_head_pose", functools.partial(_build, bug="target_is_head_pose"), "learning_ledger", ("TASK",)),
    # The head-pose input taken from the previous batch (a cached tensor not refreshed): the images are paired with
    # poses of other samples, so the part of the gaze the pose explains cannot be learned.
    Bug("poses_for_images_of_another_batch", functools.partial(_build, bug="poses_for_images_of_another_batch"),
        "learning_ledger", ("TASK",)),
]
