"""C3D action recognition of jfzhang95/pytorch-video-recognition: the repository's ``C3D`` network (eight 3x3x3
``Conv3d`` layers with ReLU in five stages, ``MaxPool3d`` that keeps the time axis in the first stage and pads the
last, flatten by ``view(-1, 8192)``, two 4096-wide fully connected layers with dropout 0.5, Kaiming-normal init of
the convolutions), trained by ``train.py``'s ``train_model``: ``CrossEntropyLoss``, SGD (momentum 0.9, weight decay
5e-4) over two parameter groups (``get_1x_lr_params`` at lr 1e-3 and ``get_10x_lr_params``, the last layer
``fc8``, at lr 1e-2), ``StepLR(step_size=10, gamma=0.1)`` stepped at the start of every training phase, each epoch a
``train`` phase (``model.train()``, ``zero_grad`` / forward / ``backward`` / ``step`` per batch, inputs wrapped in
``Variable(requires_grad=True)``) then a ``val`` phase (``model.eval()``, forward under ``no_grad``); clips come from
``VideoDataset``: 16 consecutive frames at a random time index, one random spatial crop for the whole clip, the
per-channel means (90, 98, 102) subtracted from raw 0-255 pixels, transposed from (T, H, W, C) to (C, T, H, W).

Source: https://github.com/jfzhang95/pytorch-video-recognition
Commit: ca37de9f69a961f22a821c157e9ccf47a601904d
Files: train.py, network/C3D_model.py, dataloaders/dataset.py
License: MIT (Copyright (c) 2018 Pyjcsx)
Domain: video classification (3D CNN on frame clips)

Deviations from the original:
- sizes: the network's widths divided by 16 (64/128/256/512 -> 4/8/16/32, the fully connected 4096 -> 256), squares of 6 pixels moving half a pixel per frame, so the
  flatten is ``view(-1, 32)`` instead of ``view(-1, 8192)`` (what ``pool5`` leaves: 512 x 1 x 4 x 4 at the
  original's 112 crop, 32 x 1 x 1 x 1 here at a 16 crop); crops 112 -> 16 from 22x22 frames (the original resizes to
  128x171), videos of 20 frames, clips of 16 as written; 101 UCF classes -> 6; batch 20 as written; 200 training and
  40 validation videos; ``pretrained=True`` (a Sports-1M checkpoint) is not loadable here, so the network starts
  from its own init; the test loop every 20 epochs, checkpoints, tensorboard and printing are dropped;
- data: UCF101 frames read with OpenCV are replaced by synthetic videos made from ``seed``: a coloured square moving
  across a noisy background, the class fixing the direction of motion and the square's colour, pixel values in
  0-255; DataLoader without workers; numpy's global random state for the crops is replaced by a seeded generator;
- one ``train_step`` is one batch of the ``train`` phase; when the loader is exhausted the epoch ends as in
  ``train_model``: the ``val`` phase runs (``eval()``, ``no_grad``), then the next epoch's ``scheduler.step()`` and
  ``model.train()``; ``eval_fn`` is the accuracy of ``preds`` under ``eval()`` on a batch; ``task_probe`` is a
  held-out (clips, labels) pair.
"""
# ruff: noqa: F841, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES, N_TRAIN, N_VAL, FRAMES, FRAME_SIZE, SQUARE = 6, 200, 40, 20, 22, 6
CLIP_LEN, CROP_SIZE, BATCH_SIZE, LR = 16, 16, 20, 1e-3
W = (4, 8, 16, 32)  # 64, 128, 256, 512 in the original
FC, FLAT = 256, 32  # 4096 and 8192 in the original


# ---- network/C3D_model.py ------------------------------------------------------------------------------------

class C3D(nn.Module):
    """
    The C3D network.
    """

    def __init__(self, num_classes, pretrained=False):
        super(C3D, self).__init__()

        self.conv1 = nn.Conv3d(3, W[0], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool1 = nn.MaxPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2))

        self.conv2 = nn.Conv3d(W[0], W[1], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool2 = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2))

        self.conv3a = nn.Conv3d(W[1], W[2], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.conv3b = nn.Conv3d(W[2], W[2], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool3 = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2))

        self.conv4a = nn.Conv3d(W[2], W[3], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.conv4b = nn.Conv3d(W[3], W[3], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool4 = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2))

        self.conv5a = nn.Conv3d(W[3], W[3], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.conv5b = nn.Conv3d(W[3], W[3], kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool5 = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 1, 1))

        self.fc6 = nn.Linear(FLAT, FC)
        self.fc7 = nn.Linear(FC, FC)
        self.fc8 = nn.Linear(FC, num_classes)

        self.dropout = nn.Dropout(p=0.5)

        self.relu = nn.ReLU()

        self.__init_weight()

    def forward(self, x):

        x = self.relu(self.conv1(x))
        x = self.pool1(x)

        x = self.relu(self.conv2(x))
        x = self.pool2(x)

        x = self.relu(self.conv3a(x))
        x = self.relu(self.conv3b(x))
        x = self.pool3(x)

        x = self.relu(self.conv4a(x))
        x = self.relu(self.conv4b(x))
        x = self.pool4(x)

        x = self.relu(self.conv5a(x))
        x = self.relu(self.conv5b(x))
        x = self.pool5(x)

        x = x.view(-1, FLAT)
        x = self.relu(self.fc6(x))
        x = self.dropout(x)
        x = self.relu(self.fc7(x))
        x = self.dropout(x)

        logits = self.fc8(x)

        return logits

    def __init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                # n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                # m.weight.data.normal_(0, math.sqrt(2. / n))
                torch.nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm3d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


def get_1x_lr_params(model):
    """
    This generator returns all the parameters for conv and two fc layers of the net.
    """
    b = [model.conv1, model.conv2, model.conv3a, model.conv3b, model.conv4a, model.conv4b,
         model.conv5a, model.conv5b, model.fc6, model.fc7]
    for i in range(len(b)):
        for k in b[i].parameters():
            if k.requires_grad:
                yield k


def get_10x_lr_params(model):
    """
    This generator returns all the parameters for the last fc layer of the net.
    """
    b = [model.fc8]
    for j in range(len(b)):
        for k in b[j].parameters():
            if k.requires_grad:
                yield k


# ---- synthetic videos in place of UCF101's extracted frames --------------------------------------------------

DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1))


def make_videos(rng, n, colours):
    """(frames, H, W, 3) float32 videos with 0-255 values: a 10x10 square of the class colour moving one pixel per
    frame in the class direction over a noisy grey background."""
    labels = rng.integers(0, NUM_CLASSES, n)
    videos = np.empty((n, FRAMES, FRAME_SIZE, FRAME_SIZE, 3), np.float32)
    for v in range(n):
        dy, dx = DIRECTIONS[labels[v]]
        y0, x0 = rng.integers(6, FRAME_SIZE - 12, 2)
        buf = 100.0 + 10.0 * rng.standard_normal((FRAMES, FRAME_SIZE, FRAME_SIZE, 3))
        for t in range(FRAMES):
            y = int(np.clip(y0 + (dy * (t - FRAMES // 2)) // 2, 0, FRAME_SIZE - SQUARE))
            x = int(np.clip(x0 + (dx * (t - FRAMES // 2)) // 2, 0, FRAME_SIZE - SQUARE))
            buf[t, y:y + SQUARE, x:x + SQUARE] = colours[labels[v]]
        videos[v] = np.clip(buf, 0, 255)
    return videos, labels


# ---- dataloaders/dataset.py ----------------------------------------------------------------------------------

class VideoDataset(Dataset):
    r"""A Dataset for a folder of videos. The videos are the synthetic arrays above (the original lists the frame
    folders of each class directory and reads them with OpenCV)."""

    def __init__(self, videos, labels, rng, split='train', clip_len=16, bug=None):
        self.clip_len = clip_len
        self.split = split
        self.crop_size = CROP_SIZE
        self.rng = rng
        self.videos = videos

        # the label name of every video, as the original reads it from the class folder
        names = [f"class_{int(i):03d}" for i in labels]
        if bug == "labels_listed_separately":
            # the labels taken from a second listing of the class folders, whose order differs from the one the
            # file names were collected in (os.listdir's order is arbitrary)
            names = [names[i] for i in rng.permutation(len(names))]

        # Prepare a mapping between the label names (strings) and indices (ints)
        self.label2index = {label: index for index, label in enumerate(sorted(set(names)))}
        # Convert the list of label names into an array of label indices
        self.label_array = np.array([self.label2index[label] for label in names], dtype=int)

    def __len__(self):
        return len(self.videos)

    def __getitem__(self, index):
        # Loading and preprocessing.
        buffer = self.videos[index].copy()
        buffer = self.crop(buffer, self.clip_len, self.crop_size)
        labels = np.array(self.label_array[index])

        if self.split == 'test':
            # Perform data augmentation
            buffer = self.randomflip(buffer)
        buffer = self.normalize(buffer)
        buffer = self.to_tensor(buffer)
        return torch.from_numpy(buffer), torch.from_numpy(labels)

    def randomflip(self, buffer):
        """Horizontally flip the given image and ground truth randomly with a probability of 0.5."""
        if self.rng.random() < 0.5:
            buffer = buffer[:, :, ::-1].copy()  # cv2.flip twice in the original: a no-op
            buffer = buffer[:, :, ::-1].copy()
        return buffer

    def normalize(self, buffer):
        for i, frame in enumerate(buffer):
            frame -= np.array([[[90.0, 98.0, 102.0]]], dtype=np.float32)
            buffer[i] = frame

        return buffer

    def to_tensor(self, buffer):
        return np.ascontiguousarray(buffer.transpose((3, 0, 1, 2)))

    def crop(self, buffer, clip_len, crop_size):
        # randomly select time index for temporal jittering
        time_index = self.rng.integers(buffer.shape[0] - clip_len)

        # Randomly select start indices in order to crop the video
        height_index = self.rng.integers(buffer.shape[1] - crop_size)
        width_index = self.rng.integers(buffer.shape[2] - crop_size)

        # Crop and jitter the video using indexing. The spatial crop is performed on
        # the entire array, so each frame is cropped in the same location. The temporal
        # jitter takes place via the selection of consecutive frames
        buffer = buffer[time_index:time_index + clip_len,
                 height_index:height_index + crop_size,
                 width_index:width_index + crop_size, :]

        return buffer


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    colours = rng.uniform(0, 255, (NUM_CLASSES, 3)).astype(np.float32)
    train_videos, train_labels = make_videos(rng, N_TRAIN, colours)
    val_videos, val_labels = make_videos(rng, N_VAL, colours)
    probe_videos, probe_labels = make_videos(rng, 2 * BATCH_SIZE, colours)

    num_classes, lr = NUM_CLASSES, LR
    model = C3D(num_classes=num_classes, pretrained=True)
    if bug == "fc8_left_out_of_optimizer":
        # the 10x group dropped when the parameter groups were edited: fc8 is never updated
        train_params = [{'params': get_1x_lr_params(model), 'lr': lr}]
    else:
        train_params = [{'params': get_1x_lr_params(model), 'lr': lr},
                        {'params': get_10x_lr_params(model), 'lr': lr * 10}]
    criterion = nn.CrossEntropyLoss()  # standard crossentropy loss for classification
    optimizer = optim.SGD(train_params, lr=lr, momentum=0.9, weight_decay=5e-4)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=10,
                                          gamma=0.1)  # the scheduler divides the lr by 10 every 10 epochs

    train_set = VideoDataset(train_videos, train_labels, np.random.default_rng(seed + 1), split='train',
                             clip_len=CLIP_LEN, bug=bug)
    val_set = VideoDataset(val_videos, val_labels, np.random.default_rng(seed + 2), split='val', clip_len=CLIP_LEN)
    train_dataloader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                                  generator=torch.Generator().manual_seed(seed))
    val_dataloader = DataLoader(val_set, batch_size=BATCH_SIZE, num_workers=0)

    def val_phase():
        model.eval()
        for inputs, labels in val_dataloader:
            inputs = Variable(inputs, requires_grad=True)
            labels = Variable(labels)
            optimizer.zero_grad()
            with torch.no_grad():
                outputs = model(inputs)
            probs = nn.Softmax(dim=1)(outputs)
            preds = torch.max(probs, 1)[1]
            loss = criterion(outputs, labels)

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of the train phase: the val phase, then the next epoch
                val_phase()
            # scheduler.step() is to be called once every epoch during training
            scheduler.step()
            model.train()
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        inputs, labels = next_batch()
        # move inputs and labels to the device the training is taking place on
        inputs = Variable(inputs, requires_grad=True)
        labels = Variable(labels)
        optimizer.zero_grad()

        outputs = model(inputs)

        probs = nn.Softmax(dim=1)(outputs)
        preds = torch.max(probs, 1)[1]
        loss = criterion(outputs, labels)

        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, labels = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            preds = torch.max(nn.Softmax(dim=1)(model(inputs)), 1)[1]
        model.train(was_training)
        return float((preds == labels).float().mean())

    probe_set = VideoDataset(probe_videos, probe_labels, np.random.default_rng(seed + 3), split='val',
                             clip_len=CLIP_LEN)
    probe = next(iter(DataLoader(probe_set, batch_size=len(probe_set))))
    first = next(iter(DataLoader(VideoDataset(train_videos, train_labels, np.random.default_rng(seed + 4),
                                              split='val', clip_len=CLIP_LEN), batch_size=BATCH_SIZE)))
    return Program(name="videorecog_c3d", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=(probe[0], probe[1]),
                   task="classification", loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # The 10x parameter group (get_10x_lr_params: fc8) left out of the SGD groups: the classifier stays at its init.
    Bug("fc8_left_out_of_optimizer", functools.partial(_build, bug="fc8_left_out_of_optimizer"), "four_structures",
        ("fc8",)),
    # Labels from a second listing of the class folders, in another order than the file names: each clip is paired
    # with another video's class.
    Bug("labels_listed_separately", functools.partial(_build, bug="labels_listed_separately"), "learning_ledger",
        ("TASK",)),
]
