# ruff: noqa: UP008, PLR0402, PIE808, SIM118, RUF059
"""Wave-U-Net (Stoller, Ewert & Dixon, 2018) in PyTorch: end-to-end music source separation on the raw waveform. A
1-D U-Net of valid convolutions (GroupNorm + ReLU), downsampling by a fixed sinc low-pass ``Resample1d`` with stride
4, upsampling by its transpose, centre-cropped skip connections and a 1x1 output convolution per source; L1 loss
between each source estimate and the centre-cropped target stems, Adam with a cyclic cosine learning rate set every
iteration, random-amplification augmentation of the stems that re-sums the mixture.

Source: https://github.com/f90/Wave-U-Net-Pytorch
Commit: 86c113da51540c94b01a91fbf17227f0e9c3c274
Files (the model classes in ``_waveunet.py``): ``train.py`` (``main`` and its argparse defaults), ``model/waveunet.py`` (``Waveunet``, ``UpsamplingBlock``,
``DownsamplingBlock``), ``model/conv.py`` (``ConvLayer``), ``model/resample.py`` (``Resample1d``,
``build_sinc_filter``), ``model/crop.py`` (``centre_crop``), ``model/utils.py`` (``compute_loss``), ``utils.py``
(``set_cyclic_lr``, ``get_lr``, ``set_lr``), ``data/utils.py`` (``random_amplify``, ``crop_targets``),
``data/dataset.py`` (``SeparationDataset.__getitem__`` and its sampling positions), ``test.py`` (``validate``)
License: MIT (Copyright (c) 2020 Daniel Stoller; full text in LICENSES/f90-Wave-U-Net-Pytorch.txt)
Domain: audio, music source separation on raw waveforms (Wave-U-Net, L1 on cropped stems)

Kept as written: the model classes (valid convolutions, ``conv_type="gn"`` with 8 channels per group, ``res="fixed"``
sinc resampling with a 15-tap filter, ``check_padding``'s search for the input size, the output clamped to [-1, 1]
only when not training), ``compute_loss``'s branch for one network over all sources (the loss summed over sources,
``backward`` inside, the reported loss divided by the number of sources), ``set_cyclic_lr`` (2 cycles per epoch
from lr 1e-3 down to 5e-5), Adam, ``nn.L1Loss`` (``--loss L1``), ``random_amplify`` (gains in [0.7, 1.0], the mix
re-summed and clipped) and ``crop_targets``, ``__getitem__``'s random hops and front/back zero padding,
``main``'s loop body (``set_cyclic_lr``, ``zero_grad``, ``compute_loss(..., compute_grad=True)``, ``step``) and
``validate`` (``model.eval()``, ``no_grad``, the mean of ``compute_loss`` over the validation batches).

Deviations from the original:
- MUSDB18-HQ is not here: the "songs" are synthetic, made from ``seed``: two mono stems, a ``bass`` of two slow
  sinusoids (periods 24-48 samples) and a ``vocals`` of a fast sinusoid (period 3-5 samples) under a slow amplitude
  envelope, the mix their sum; the rule is learnable (separate the two bands). The HDF5 file is replaced by these
  arrays in memory (``inputs``, ``targets``, ``length``, ``target_length`` as the HDF groups hold them);
  ``SortedList`` by ``bisect`` over the cumulative lengths;
- ``--separate 0`` (one of the script's options: one Wave-U-Net for all sources) so that ``model(x)`` returns
  every source; instruments ``bass vocals`` (default four), ``--channels 1`` (default 2), sizes for 2 CPU cores:
  ``--features 8`` (32), ``--levels 4`` (6), ``--output_size`` 256 samples (2 s at 44.1 kHz;
  ``check_padding`` makes it 281 output and 873 input samples); batch size 4 as
  the default;
- the DataLoader runs in the main process (no workers, no ``worker_init_fn``) and ``np.random.seed()`` (a reseed
  from the OS at each epoch) is dropped so that a run is set by ``seed``; tensorboard, tqdm, printing,
  checkpointing, early stopping, the test phase and ``DataParallel``/CUDA are dropped;
- the ``while`` loop over epochs is unrolled: one ``train_step`` is one batch (``model.train()`` and a new loader
  pass when an epoch starts); it returns ``avg_loss``; ``eval_fn`` is ``validate`` on a held-out synthetic song
  (returning minus its loss, higher is better);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import bisect
import functools
import pathlib
import sys
import types
from functools import partial

import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _waveunet import Waveunet

SONG_LEN = 6000  # (port) samples per synthetic song



# utils.py
def get_lr(optim):
    return optim.param_groups[0]["lr"]

def set_lr(optim, lr):
    for g in optim.param_groups:
        g['lr'] = lr

def set_cyclic_lr(optimizer, it, epoch_it, cycles, min_lr, max_lr):
    cycle_length = epoch_it // cycles
    curr_cycle = min(it // cycle_length, cycles-1)
    curr_it = it - cycle_length * curr_cycle

    new_lr = min_lr + 0.5*(max_lr - min_lr)*(1 + np.cos((float(curr_it) / float(cycle_length)) * np.pi))
    set_lr(optimizer, new_lr)


# data/utils.py
def random_amplify(mix, targets, shapes, min, max, bug=None):
    residual = mix  # start with original mix
    for key in targets.keys():
        if key != "mix":
            residual -= targets[key]  # subtract all instruments (output is zero if all instruments add to mix)
    mix = residual * np.random.uniform(min, max)  # also apply gain data augmentation to residual
    for key in targets.keys():
        if key != "mix":
            targets[key] = targets[key] * np.random.uniform(min, max)
            mix += targets[key]  # add instrument with gain data augmentation to mix
    mix = np.clip(mix, -1.0, 1.0)
    return crop_targets(mix, targets, shapes, bug=bug)


def crop_targets(mix, targets, shapes, bug=None):
    for key in targets.keys():
        if key != "mix":
            if bug == "targets_cropped_from_start":
                targets[key] = targets[key][:, :shapes["output_frames"]]
                continue
            targets[key] = targets[key][:, shapes["output_start_frame"]:shapes["output_end_frame"]]
    return mix, targets


def _synthetic_song(rng):
    """(port) One mono song: a slow two-sinusoid bass and a fast enveloped 'vocals' line; the mix is their sum."""
    t = np.arange(SONG_LEN, dtype=np.float64)
    bass = sum(0.25 * np.sin(2 * np.pi * t / rng.uniform(24, 48) + rng.uniform(0, 2 * np.pi)) for _ in range(2))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * t / rng.uniform(300, 600) + rng.uniform(0, 2 * np.pi))
    vocals = 0.35 * env * np.sin(2 * np.pi * t / rng.uniform(3, 5) + rng.uniform(0, 2 * np.pi))
    targets = np.stack([bass, vocals]).astype(np.float32)  # [instruments * channels, T]
    return {"inputs": targets.sum(0, keepdims=True), "targets": targets, "length": SONG_LEN,
            "target_length": SONG_LEN}


# data/dataset.py (SeparationDataset: the HDF5 file replaced by synthetic songs in memory)
class SeparationDataset(torch.utils.data.Dataset):
    def __init__(self, songs, instruments, channels, shapes, random_hops, audio_transform=None):
        super(SeparationDataset, self).__init__()
        self.hdf_dataset = {str(i): s for i, s in enumerate(songs)}
        self.instruments = instruments
        self.channels = channels
        self.shapes = shapes
        self.random_hops = random_hops
        self.audio_transform = audio_transform
        lengths = [s["target_length"] for s in songs]
        lengths = [(l // self.shapes["output_frames"]) + 1 for l in lengths]
        self.start_pos = list(np.cumsum(lengths))
        self.length = self.start_pos[-1]

    def __getitem__(self, index):
        audio_idx = bisect.bisect_right(self.start_pos, index)
        if audio_idx > 0:
            index = index - self.start_pos[audio_idx - 1]
        audio_length = self.hdf_dataset[str(audio_idx)]["length"]
        target_length = self.hdf_dataset[str(audio_idx)]["target_length"]
        if self.random_hops:
            start_target_pos = np.random.randint(0, max(target_length - self.shapes["output_frames"] + 1, 1))
        else:
            start_target_pos = index * self.shapes["output_frames"]
        start_pos = start_target_pos - self.shapes["output_start_frame"]
        if start_pos < 0:
            pad_front = abs(start_pos)
            start_pos = 0
        else:
            pad_front = 0
        end_pos = start_target_pos - self.shapes["output_start_frame"] + self.shapes["input_frames"]
        if end_pos > audio_length:
            pad_back = end_pos - audio_length
            end_pos = audio_length
        else:
            pad_back = 0
        audio = self.hdf_dataset[str(audio_idx)]["inputs"][:, start_pos:end_pos].astype(np.float32)
        if pad_front > 0 or pad_back > 0:
            audio = np.pad(audio, [(0, 0), (pad_front, pad_back)], mode="constant", constant_values=0.0)
        targets = self.hdf_dataset[str(audio_idx)]["targets"][:, start_pos:end_pos].astype(np.float32)
        if pad_front > 0 or pad_back > 0:
            targets = np.pad(targets, [(0, 0), (pad_front, pad_back)], mode="constant", constant_values=0.0)
        targets = {inst : targets[idx*self.channels:(idx+1)*self.channels] for idx, inst in enumerate(self.instruments)}
        if hasattr(self, "audio_transform") and self.audio_transform is not None:
            audio, targets = self.audio_transform(audio, targets)
        return audio, targets

    def __len__(self):
        return self.length


# model/utils.py
def compute_loss(model, inputs, targets, criterion, compute_grad=False):
    all_outputs = {}
    if model.separate:
        avg_loss = 0.0
        num_sources = 0
        for inst in model.instruments:
            output = model(inputs, inst)
            loss = criterion(output[inst], targets[inst])
            if compute_grad:
                loss.backward()
            avg_loss += loss.item()
            num_sources += 1
            all_outputs[inst] = output[inst].detach().clone()
        avg_loss /= float(num_sources)
    else:
        loss = 0
        all_outputs = model(inputs)
        for inst in all_outputs.keys():
            loss += criterion(all_outputs[inst], targets[inst])
        if compute_grad:
            loss.backward()
        avg_loss = loss.item() / float(len(all_outputs))
    return all_outputs, avg_loss


# test.py
def validate(args, model, criterion, test_data):
    dataloader = torch.utils.data.DataLoader(test_data, batch_size=args.batch_size, shuffle=False, num_workers=0)
    model.eval()
    total_loss = 0.
    with torch.no_grad():
        for example_num, (x, targets) in enumerate(dataloader):
            _, avg_loss = compute_loss(model, x, targets, criterion)
            total_loss += (1. / float(example_num + 1)) * (avg_loss - total_loss)
    return total_loss


def _args():
    """train.py's argparse defaults, with the sizes and options listed in the docstring."""
    return types.SimpleNamespace(instruments=["bass", "vocals"], features=8, lr=1e-3, min_lr=5e-5, cycles=2,
                                 batch_size=4, levels=4, depth=1, sr=44100, channels=1, kernel_size=5,
                                 output_size=256 / 44100, strides=4, loss="L1", conv_type="gn", res="fixed",
                                 separate=0, feature_growth="double")


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    args = _args()

    # main(args)
    num_features = [args.features*i for i in range(1, args.levels+1)] if args.feature_growth == "add" else \
                   [args.features*2**i for i in range(0, args.levels)]
    target_outputs = int(args.output_size * args.sr)
    model = Waveunet(args.channels, num_features, args.channels, args.instruments, kernel_size=args.kernel_size,
                     target_output_size=target_outputs, depth=args.depth, strides=args.strides,
                     conv_type=args.conv_type, res=args.res, separate=args.separate)

    crop_func = partial(crop_targets, shapes=model.shapes, bug=bug)
    augment_func = partial(random_amplify, shapes=model.shapes, min=0.7, max=1.0, bug=bug)
    train_data = SeparationDataset([_synthetic_song(rng) for _ in range(4)], args.instruments, args.channels,
                                   model.shapes, True, audio_transform=augment_func)
    val_data = SeparationDataset([_synthetic_song(rng)], args.instruments, args.channels, model.shapes, False,
                                 audio_transform=crop_func)
    dataloader = torch.utils.data.DataLoader(train_data, batch_size=args.batch_size, shuffle=True)

    if args.loss == "L1":
        criterion = nn.L1Loss()
    elif args.loss == "L2":
        criterion = nn.MSELoss()
    optimizer = Adam(params=model.parameters(), lr=args.lr)
    state = {"step": 0, "it": None, "example_num": 0}

    def train_step():
        if state["it"] is None:  # an epoch starts
            model.train()
            state["it"], state["example_num"] = iter(dataloader), 0
        example_num = state["example_num"]
        x, targets = next(state["it"])
        set_cyclic_lr(optimizer, example_num, len(train_data) // args.batch_size, args.cycles, args.min_lr, args.lr)
        if bug != "zero_grad_after_compute_loss":
            optimizer.zero_grad()
        outputs, avg_loss = compute_loss(model, x, targets, criterion, compute_grad=True)
        if bug == "zero_grad_after_compute_loss":
            optimizer.zero_grad()
        optimizer.step()
        state["step"] += 1
        state["example_num"] += 1
        if state["example_num"] >= len(dataloader):
            state["it"] = None
        return avg_loss

    def eval_fn(model, _batch=None):
        was = model.training
        val_loss = validate(args, model, criterion, val_data)
        model.train(was)
        return -val_loss

    x0, t0 = next(iter(torch.utils.data.DataLoader(val_data, batch_size=args.batch_size)))
    loss_fn = lambda outputs, targets: sum(criterion(outputs[inst], targets[inst]) for inst in outputs.keys())
    return Program(name="waveunet_separation", model=model, batch=(x0, t0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic label misalignment: crop_targets slices the first output_frames samples of the input window instead of
    # the centre window the valid convolutions predict, so every target is offset from its estimate by
    # output_start_frame samples.
    Bug("targets_cropped_from_start", functools.partial(_build, bug="targets_cropped_from_start"),
        "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() moved below compute_loss, whose backward runs inside it, so each step applies
    # a zeroed gradient. Every parameter is touched alike: declared by its mechanism (README rule 6). Kind
    # re-declared in review (2026-12-07): gradients cleared between the backward and the step are
    # step.zero_grad_before_step, as the corpus' other such slips are declared.
    Bug("zero_grad_after_compute_loss", functools.partial(_build, bug="zero_grad_after_compute_loss"),
        "step_probe", (), kind="step.zero_grad_before_step"),
]
