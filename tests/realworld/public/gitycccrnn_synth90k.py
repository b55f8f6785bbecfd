"""GitYCC's CRNN for scene-text recognition on Synth90k: a VGG-style conv stack (``_cnn_backbone``: seven conv/ReLU
layers, BatchNorm on the fifth and sixth, max-pools that halve the height four times and the width twice) whose
feature map is flattened over channels and height and read along the width as a sequence (``map_to_seq`` linear),
two stacked bidirectional LSTMs and a dense layer per step; ``train_batch`` takes ``log_softmax`` over the classes
and a ``CTCLoss(reduction='sum', zero_infinity=True)`` against the 1-based character labels (0 the blank), every
input length the full sequence, clips gradients at 5 and steps RMSprop; ``evaluate`` decodes greedily
(``ctc_decode``) and counts exact matches.

Source: https://github.com/GitYCC/crnn-pytorch
Commit: f145a61e20e57a36b8f2d642f93c9ba2890cd042
Files: src/train.py, src/model.py, src/config.py (src/dataset.py, src/evaluate.py, src/ctc_decoder.py in the helper
_gitycccrnn_lib.py)
License: MIT (Copyright (c) 2017 Jieru Mei, as found in the repository's LICENSE.md; full text in
LICENSES/GitYCC-crnn-pytorch.txt)
Domain: vision, OCR / text recognition (CNN + bi-LSTM, CTC loss, greedy decoding)

Kept as written: ``CRNN`` (``_cnn_backbone``, the view / permute to ``(width, batch, feature)``, ``map_to_seq``,
``rnn1``, ``rnn2``, ``dense``), ``train_batch`` (``crnn.train()``, log-softmax over dim 2, ``input_lengths`` of the
full width for every image, flattened ``target_lengths``, zero_grad / backward / ``clip_grad_norm_(5)`` / step),
``Synth90kDataset`` (``_load_from_raw_files``: the lexicon read into a dict, annotation lines ``path index``;
``__getitem__``: grey image resized to ``img_width x img_height``, ``/ 127.5 - 1``, ``CHAR2LABEL`` 1-based),
``synth90k_collate_fn``, RMSprop with ``lr``, the summed ``CTCLoss``, ``evaluate``'s loss and exact-match accuracy
and the greedy decoder.

Deviations from the original:
- data: the Synth90k files are replaced by an in-memory lexicon, annotation list and image store made from
  ``seed``: words of 3 to 6 characters of ``CHARS`` drawn in Pillow's default font (size 16-20) at a random
  offset, grey levels and noise, 512 training and 64 validation images; ``_load_from_raw_files`` reads the same
  ``lexicon.txt`` / ``annotation_*.txt`` lines from that store instead of the disk, ``Image.open`` reads from it;
- sizes for 2 CPU cores: conv widths / 8 (64 .. 512 -> 8 .. 64), ``map_to_seq_hidden`` 64 -> 32, ``rnn_hidden``
  256 -> 48, ``train_batch_size`` 32 -> 16, ``eval_batch_size`` 512 -> 64; ``img_width`` 100 and ``img_height`` 32
  kept; ``lr`` 5e-4 -> 2e-3 (30 steps instead of millions);
- ``evaluate``: only the greedy decoder (``decode_method`` 'greedy' of ``train_config``) is ported, tqdm and the
  wrong-case list dropped; ``cv2`` / ``scipy`` imports (unused by training) dropped; ``num_workers`` 0; no
  checkpoint reloading or saving, no prints; ``device`` is the CPU;
- one ``train_step`` is one ``train_batch`` on the next batch of ``train_loader`` (a new epoch when it ends);
  ``eval_fn`` is ``evaluate`` on the validation loader (exact-match accuracy); the validation every
  ``valid_interval`` (500) batches falls outside the short runs and is left to ``eval_fn``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import CTCLoss
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _gitycccrnn_lib import Synth90kDataset, _write_synthetic_synth90k, evaluate, synth90k_collate_fn

# ---- src/config.py (sizes for 2 CPU cores) -----------------------------------------------------------------------

common_config = {
    'data_dir': 'data/mnt/ramdisk/max/90kDICT32px/',
    'img_width': 100,
    'img_height': 32,
    'map_to_seq_hidden': 32,
    'rnn_hidden': 48,
    'leaky_relu': False,
}

train_config = {
    'epochs': 10000,
    'train_batch_size': 16,
    'eval_batch_size': 64,
    'lr': 0.002,
    'valid_interval': 500,
    'cpu_workers': 0,
    'decode_method': 'greedy',
    'beam_size': 10,
}
train_config.update(common_config)
config = train_config

# (port) the conv widths of ``_cnn_backbone`` divided by 8
CHANNELS = [64, 128, 256, 256, 512, 512, 512]
CHANNELS = [c // 8 for c in CHANNELS]


# ---- src/model.py ---------------------------------------------------------------------------------------------------

class CRNN(nn.Module):

    def __init__(self, img_channel, img_height, img_width, num_class,
                 map_to_seq_hidden=64, rnn_hidden=256, leaky_relu=False, bug=None):
        super(CRNN, self).__init__()
        self.bug = bug  # (port) the variant being built

        self.cnn, (output_channel, output_height, output_width) = \
            self._cnn_backbone(img_channel, img_height, img_width, leaky_relu)

        self.map_to_seq = nn.Linear(output_channel * output_height, map_to_seq_hidden)

        self.rnn1 = nn.LSTM(map_to_seq_hidden, rnn_hidden, bidirectional=True)
        self.rnn2 = nn.LSTM(2 * rnn_hidden, rnn_hidden, bidirectional=True)

        self.dense = nn.Linear(2 * rnn_hidden, num_class)

    def _cnn_backbone(self, img_channel, img_height, img_width, leaky_relu):
        assert img_height % 16 == 0
        assert img_width % 4 == 0

        channels = [img_channel] + CHANNELS
        kernel_sizes = [3, 3, 3, 3, 3, 3, 2]
        strides = [1, 1, 1, 1, 1, 1, 1]
        paddings = [1, 1, 1, 1, 1, 1, 0]

        cnn = nn.Sequential()

        def conv_relu(i, batch_norm=False):
            # shape of input: (batch, input_channel, height, width)
            input_channel = channels[i]
            output_channel = channels[i+1]

            cnn.add_module(
                f'conv{i}',
                nn.Conv2d(input_channel, output_channel, kernel_sizes[i], strides[i], paddings[i])
            )

            if batch_norm:
                cnn.add_module(f'batchnorm{i}', nn.BatchNorm2d(output_channel))

            relu = nn.LeakyReLU(0.2, inplace=True) if leaky_relu else nn.ReLU(inplace=True)
            cnn.add_module(f'relu{i}', relu)

        # size of image: (channel, height, width) = (img_channel, img_height, img_width)
        conv_relu(0)
        cnn.add_module('pooling0', nn.MaxPool2d(kernel_size=2, stride=2))
        # (64, img_height // 2, img_width // 2)

        conv_relu(1)
        cnn.add_module('pooling1', nn.MaxPool2d(kernel_size=2, stride=2))
        # (128, img_height // 4, img_width // 4)

        conv_relu(2)
        conv_relu(3)
        cnn.add_module(
            'pooling2',
            nn.MaxPool2d(kernel_size=(2, 1))
        )  # (256, img_height // 8, img_width // 4)

        conv_relu(4, batch_norm=True)
        conv_relu(5, batch_norm=True)
        cnn.add_module(
            'pooling3',
            nn.MaxPool2d(kernel_size=(2, 1))
        )  # (512, img_height // 16, img_width // 4)

        conv_relu(6)  # (512, img_height // 16 - 1, img_width // 4 - 1)

        output_channel, output_height, output_width = \
            channels[-1], img_height // 16 - 1, img_width // 4 - 1
        return cnn, (output_channel, output_height, output_width)

    def forward(self, images):
        # shape of images: (batch, channel, height, width)

        conv = self.cnn(images)
        batch, channel, height, width = conv.size()

        if self.bug == "features_viewed_width_first":
            conv = conv.view(width, batch, channel * height)  # a view where a permute was needed
        else:
            conv = conv.view(batch, channel * height, width)
            conv = conv.permute(2, 0, 1)  # (width, batch, feature)
        seq = self.map_to_seq(conv)

        recurrent, _ = self.rnn1(seq)
        recurrent, _ = self.rnn2(recurrent)

        output = self.dense(recurrent)
        return output  # shape: (seq_len, batch, num_class)


# ---- src/train.py ------------------------------------------------------------------------------------------------

def train_batch(crnn, data, optimizer, criterion, device, bug=None):
    crnn.train()
    images, targets, target_lengths = [d.to(device) for d in data]

    logits = crnn(images)
    # the variant normalizes over the time steps instead of the classes
    log_probs = torch.nn.functional.log_softmax(logits, dim=0 if bug == "log_softmax_over_time" else 2)

    batch_size = images.size(0)
    input_lengths = torch.LongTensor([logits.size(0)] * batch_size)
    target_lengths = torch.flatten(target_lengths)

    loss = criterion(log_probs, targets, input_lengths, target_lengths)

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(crnn.parameters(), 5) # gradient clipping with 5
    optimizer.step()
    return loss.item()


def _loaders(seed, bug):
    """``main()``'s datasets and loaders."""
    data_dir = config['data_dir']
    _write_synthetic_synth90k(seed, data_dir)
    img_width, img_height = config['img_width'], config['img_height']

    train_dataset = Synth90kDataset(root_dir=data_dir, mode='train',
                                    img_height=img_height, img_width=img_width, bug=bug)
    valid_dataset = Synth90kDataset(root_dir=data_dir, mode='dev',
                                    img_height=img_height, img_width=img_width, bug=bug)

    train_loader = DataLoader(
        dataset=train_dataset,
        batch_size=config['train_batch_size'],
        shuffle=True,
        num_workers=config['cpu_workers'],
        collate_fn=synth90k_collate_fn)
    valid_loader = DataLoader(
        dataset=valid_dataset,
        batch_size=config['eval_batch_size'],
        shuffle=True,
        num_workers=config['cpu_workers'],
        collate_fn=synth90k_collate_fn)
    return train_dataset, train_loader, valid_loader


def _build(seed, bug=None):
    torch.manual_seed(seed)
    img_width, img_height = config['img_width'], config['img_height']
    device = torch.device('cpu')
    train_dataset, train_loader, valid_loader = _loaders(seed, bug)

    num_class = len(Synth90kDataset.LABEL2CHAR) + 1
    crnn = CRNN(1, img_height, img_width, num_class,
                map_to_seq_hidden=config['map_to_seq_hidden'],
                rnn_hidden=config['rnn_hidden'],
                leaky_relu=config['leaky_relu'], bug=bug)
    crnn.to(device)

    optimizer = optim.RMSprop(crnn.parameters(), lr=config['lr'])
    criterion = CTCLoss(reduction='sum', zero_infinity=True)
    criterion.to(device)

    state = {"it": iter(train_loader)}

    def train_step():
        try:
            train_data = next(state["it"])
        except StopIteration:  # the next epoch
            state["it"] = iter(train_loader)
            train_data = next(state["it"])
        return train_batch(crnn, train_data, optimizer, criterion, device, bug=bug)

    def eval_fn(model, _batch=None):
        return evaluate(model, valid_loader, criterion, decode_method=config['decode_method'],
                        beam_size=config['beam_size'])['acc']

    def loss_fn(logits, targets):
        """``train_batch``'s loss on the model's output and ``(targets, target_lengths)``."""
        targets_, target_lengths = targets
        log_probs = torch.nn.functional.log_softmax(logits, dim=2)
        input_lengths = torch.LongTensor([logits.size(0)] * logits.size(1))
        return criterion(log_probs, targets_, input_lengths, torch.flatten(target_lengths))

    images0, targets0, lengths0 = next(iter(DataLoader(train_dataset, batch_size=config['train_batch_size'],
                                                       collate_fn=synth90k_collate_fn)))
    return Program(name="gitycccrnn_synth90k", model=crnn, batch=(images0, (targets0, lengths0)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: log_softmax over the time axis (dim 0) instead of the classes: CTC reads per-step "log-probabilities"
    # that do not normalize over the alphabet.
    Bug("log_softmax_over_time", functools.partial(_build, bug="log_softmax_over_time"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the lexicon enumerated from 1 while the annotation indexes count from 0, so every image is labelled
    # with the next word of the lexicon.
    Bug("lexicon_counted_from_one", functools.partial(_build, bug="lexicon_counted_from_one"), "learning_ledger",
        ("TASK",)),
    # classic: the (batch, feature, width) map viewed as (width, batch, feature) instead of permuted, so each
    # "time step" mixes images and columns before map_to_seq and the LSTMs.
    Bug("features_viewed_width_first", functools.partial(_build, bug="features_viewed_width_first"),
        "tensor_trace", ("map_to_seq",)),
]
