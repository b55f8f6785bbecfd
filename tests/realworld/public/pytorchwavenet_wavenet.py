"""WaveNet on mu-law quantized audio (vincentherrmann/pytorch-wavenet): one-hot samples (256 classes) into a
1x1 start convolution, blocks of gated dilated causal convolutions (kernel 2, dilation doubling per layer,
implemented by ``dilate`` folding time into the batch axis), residual and skip 1x1 convolutions, two end
convolutions, the last ``output_length`` positions as logits; ``WavenetTrainer.train``: cross-entropy against the
next samples, ``zero_grad``, backward, Adam (lr 0.001, the trainer's default as the WaveNet demo notebook uses it),
over a ``WavenetDataset`` of fixed-length items (receptive field + output_length - 1 inputs, the following
output_length samples as targets).

Source: https://github.com/vincentherrmann/pytorch-wavenet
Commit: 26ba28989edcf8688f6216057aafda07601ff07e
Files: wavenet_model.py, wavenet_modules.py, wavenet_training.py, audio_data.py, WaveNet_demo.ipynb (train_script.py
       has the same settings with lr 0.0001)
License: MIT (Copyright (c) 2017 Vincent Herrmann; full text in LICENSES/vincentherrmann-pytorch-wavenet.txt)
Domain: audio (autoregressive waveform model)

Deviations from the original:
- sizes: layers 10 -> 5, blocks 3 -> 2 (receptive field 63 instead of 3070), skip_channels 1024 -> 64,
  end_channels 512 -> 64 (dilation/residual channels 32, classes 256, output_length 16, kernel_size 2, bias True,
  test_stride 500, lr 0.001 and batch_size 16 as the demo notebook sets them);
- data: the Bach chaconne mp3s (loaded with librosa) are replaced by four synthetic 16 kHz "recordings" made
  from ``seed`` (2400 samples each: two or three sinusoids with slowly gliding pitch, an amplitude envelope and a
  little noise, peak 0.9), quantized by the repository's ``quantize_data`` (mu-law, 256 bins) as
  ``create_dataset`` does; the dataset keeps the quantized arrays in memory instead of an ``.npz`` file it
  re-opens with ``np.load(mmap_mode='r')`` in every ``__getitem__`` (the indexing, the item/target split and the
  test-stride split are as written);
- ``ConstantPad1d`` is a legacy autograd ``Function`` (instance ``forward``/``backward``) that current torch
  refuses to run; ``constant_pad_1d`` is written out with ``torch.cat`` (same output, autograd differentiates it);
- ``loss.data[0]`` (torch 0.3) is ``loss.item()``; ``Variable`` wrappers are kept (they are no-ops); the model's
  ``generate``/``generate_fast`` methods and the TensorFlow/TensorBoard logger are left out (its periodic
  validation is ``eval_fn``); no CUDA; the DataLoader has no worker processes (num_workers 8 -> 0) and shuffles
  with a generator seeded from ``seed``;
- one ``train_step`` is one batch of ``WavenetTrainer.train`` (snapshots are not saved); ``eval_fn`` is
  ``validate``'s loss and accuracy on one batch, returned as the accuracy (``model.eval()``, then ``train()``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: E722, F841, PLR0402, PLR1730, RUF046, UP008  (the original's code style is kept as written)

from __future__ import annotations

import bisect
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
from torch.autograd import Variable

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SAMPLING_RATE, N_FILES, FILE_LENGTH = 16000, 4, 2400


# ---- wavenet_modules.py ------------------------------------------------------------------------------------

def dilate(x, dilation, init_dilation=1, pad_start=True, bug=None):
    """
    :param x: Tensor of size (N, C, L), where N is the input dilation, C is the number of channels, and L is the input length
    :param dilation: Target dilation. Will be the size of the first dimension of the output tensor.
    :param pad_start: If the input length is not compatible with the specified dilation, zero padding is used. This parameter determines wether the zeros are added at the start or at the end.
    :return: The dilated tensor of size (dilation, C, L*N / dilation). The output might be zero padded at the start
    """

    [n, c, l] = x.size()
    dilation_factor = dilation / init_dilation
    if dilation_factor == 1:
        return x

    # zero padding for reshaping
    new_l = int(np.ceil(l / dilation_factor) * dilation_factor)
    if new_l != l:
        l = new_l
        x = constant_pad_1d(x, new_l, dimension=2, pad_start=pad_start)

    l_old = int(round(l / dilation_factor))
    n_old = int(round(n * dilation_factor))
    l = math.ceil(l * init_dilation / dilation)
    n = math.ceil(n * dilation / init_dilation)

    # reshape according to dilation
    if bug == "dilate_view_without_permute":
        # the time-to-batch fold done by a bare view (the bug of ibab/tensorflow-wavenet#29): the new batch items
        # are contiguous chunks of memory, not every dilation-th sample
        x = x.contiguous().view(n, c, l)
        return x
    x = x.permute(1, 2, 0).contiguous()  # (n, c, l) -> (c, l, n)
    x = x.view(c, l, n)
    x = x.permute(2, 0, 1).contiguous()  # (c, l, n) -> (n, c, l)

    return x


class DilatedQueue:
    def __init__(self, max_length, data=None, dilation=1, num_deq=1, num_channels=1, dtype=torch.FloatTensor):
        self.in_pos = 0
        self.out_pos = 0
        self.num_deq = num_deq
        self.num_channels = num_channels
        self.dilation = dilation
        self.max_length = max_length
        self.data = data
        self.dtype = dtype
        if data == None:
            self.data = Variable(dtype(num_channels, max_length).zero_())

    def enqueue(self, input):
        self.data[:, self.in_pos] = input
        self.in_pos = (self.in_pos + 1) % self.max_length

    def dequeue(self, num_deq=1, dilation=1):
        #       |
        #  |6|7|8|1|2|3|4|5|
        #         |
        start = self.out_pos - ((num_deq - 1) * dilation)
        if start < 0:
            t1 = self.data[:, start::dilation]
            t2 = self.data[:, self.out_pos % dilation:self.out_pos + 1:dilation]
            t = torch.cat((t1, t2), 1)
        else:
            t = self.data[:, start:self.out_pos + 1:dilation]

        self.out_pos = (self.out_pos + 1) % self.max_length
        return t

    def reset(self):
        self.data = Variable(self.dtype(self.num_channels, self.max_length).zero_())
        self.in_pos = 0
        self.out_pos = 0


def constant_pad_1d(input,
                    target_size,
                    dimension=0,
                    value=0,
                    pad_start=False):
    """ConstantPad1d(target_size, dimension, value, pad_start)(input), written out: ``input`` padded with ``value``
    along ``dimension`` to ``target_size``, at the start or at the end."""
    num_pad = target_size - input.size(dimension)
    assert num_pad >= 0, 'target size has to be greater than input size'
    size = list(input.size())
    size[dimension] = num_pad
    pad = input.new_full(size, value)
    return torch.cat((pad, input) if pad_start else (input, pad), dimension)


# ---- wavenet_model.py (training path) ----------------------------------------------------------------------

class WaveNetModel(nn.Module):
    """
    A Complete Wavenet Model

    Args:
        layers (Int):               Number of layers in each block
        blocks (Int):               Number of wavenet blocks of this model
        dilation_channels (Int):    Number of channels for the dilated convolution
        residual_channels (Int):    Number of channels for the residual connection
        skip_channels (Int):        Number of channels for the skip connections
        classes (Int):              Number of possible values each sample can have
        output_length (Int):        Number of samples that are generated for each input
        kernel_size (Int):          Size of the dilation kernel
        dtype:                      Parameter type of this model

    Shape:
        - Input: :math:`(N, C_{in}, L_{in})`
        - Output: :math:`()`
        L should be the length of the receptive field
    """
    def __init__(self,
                 layers=10,
                 blocks=4,
                 dilation_channels=32,
                 residual_channels=32,
                 skip_channels=256,
                 end_channels=256,
                 classes=256,
                 output_length=32,
                 kernel_size=2,
                 dtype=torch.FloatTensor,
                 bias=False,
                 bug=None):

        super(WaveNetModel, self).__init__()

        self.layers = layers
        self.blocks = blocks
        self.dilation_channels = dilation_channels
        self.residual_channels = residual_channels
        self.skip_channels = skip_channels
        self.classes = classes
        self.kernel_size = kernel_size
        self.dtype = dtype
        self.bug = bug

        # build model
        receptive_field = 1
        init_dilation = 1

        self.dilations = []
        self.dilated_queues = []
        # self.main_convs = nn.ModuleList()
        self.filter_convs = nn.ModuleList()
        self.gate_convs = nn.ModuleList()
        self.residual_convs = nn.ModuleList()
        self.skip_convs = nn.ModuleList()

        # 1x1 convolution to create channels
        self.start_conv = nn.Conv1d(in_channels=self.classes,
                                    out_channels=residual_channels,
                                    kernel_size=1,
                                    bias=bias)

        for b in range(blocks):
            additional_scope = kernel_size - 1
            new_dilation = 1
            for i in range(layers):
                # dilations of this layer
                self.dilations.append((new_dilation, init_dilation))

                # dilated queues for fast generation
                self.dilated_queues.append(DilatedQueue(max_length=(kernel_size - 1) * new_dilation + 1,
                                                        num_channels=residual_channels,
                                                        dilation=new_dilation,
                                                        dtype=dtype))

                # dilated convolutions
                self.filter_convs.append(nn.Conv1d(in_channels=residual_channels,
                                                   out_channels=dilation_channels,
                                                   kernel_size=kernel_size,
                                                   bias=bias))

                self.gate_convs.append(nn.Conv1d(in_channels=residual_channels,
                                                 out_channels=dilation_channels,
                                                 kernel_size=kernel_size,
                                                 bias=bias))

                # 1x1 convolution for residual connection
                self.residual_convs.append(nn.Conv1d(in_channels=dilation_channels,
                                                     out_channels=residual_channels,
                                                     kernel_size=1,
                                                     bias=bias))

                # 1x1 convolution for skip connection
                self.skip_convs.append(nn.Conv1d(in_channels=dilation_channels,
                                                 out_channels=skip_channels,
                                                 kernel_size=1,
                                                 bias=bias))

                receptive_field += additional_scope
                additional_scope *= 2
                init_dilation = new_dilation
                new_dilation *= 2

        self.end_conv_1 = nn.Conv1d(in_channels=skip_channels,
                                  out_channels=end_channels,
                                  kernel_size=1,
                                  bias=True)

        self.end_conv_2 = nn.Conv1d(in_channels=end_channels,
                                    out_channels=classes,
                                    kernel_size=1,
                                    bias=True)

        # self.output_length = 2 ** (layers - 1)
        self.output_length = output_length
        self.receptive_field = receptive_field

    def wavenet(self, input, dilation_func):

        x = self.start_conv(input)
        skip = 0

        # WaveNet layers
        for i in range(self.blocks * self.layers):

            #            |----------------------------------------|     *residual*
            #            |                                        |
            #            |    |-- conv -- tanh --|                |
            # -> dilate -|----|                  * ----|-- 1x1 -- + -->	*input*
            #                 |-- conv -- sigm --|     |
            #                                         1x1
            #                                          |
            # ---------------------------------------> + ------------->	*skip*

            (dilation, init_dilation) = self.dilations[i]

            residual = dilation_func(x, dilation, init_dilation, i)

            # dilated convolution
            filter = self.filter_convs[i](residual)
            filter = F.tanh(filter)
            gate = self.gate_convs[i](residual)
            gate = F.sigmoid(gate)
            x = filter * gate

            # parametrized skip connection
            s = x
            if x.size(2) != 1:
                 s = dilate(x, 1, init_dilation=dilation, bug=self.bug)
            s = self.skip_convs[i](s)
            try:
                skip = skip[:, :, -s.size(2):]
            except:
                skip = 0
            skip = s + skip

            x = self.residual_convs[i](x)
            x = x + residual[:, :, (self.kernel_size - 1):]

        x = F.relu(skip)
        x = F.relu(self.end_conv_1(x))
        x = self.end_conv_2(x)

        return x

    def wavenet_dilate(self, input, dilation, init_dilation, i):
        x = dilate(input, dilation, init_dilation, bug=self.bug)
        return x

    def forward(self, input):
        x = self.wavenet(input,
                         dilation_func=self.wavenet_dilate)

        # reshape output
        [n, c, l] = x.size()
        l = self.output_length
        x = x[:, :, -l:]
        x = x.transpose(1, 2).contiguous()
        x = x.view(n * l, c)
        return x

    def parameter_count(self):
        par = list(self.parameters())
        s = sum([np.prod(list(d.size())) for d in par])
        return s


# ---- audio_data.py -----------------------------------------------------------------------------------------

class WavenetDataset(torch.utils.data.Dataset):
    def __init__(self,
                 dataset_arrays,
                 item_length,
                 target_length,
                 classes=256,
                 train=True,
                 test_stride=100,
                 bug=None):

        #           |----receptive_field----|
        #                                 |--output_length--|
        # example:  | | | | | | | | | | | | | | | | | | | | |
        # target:                           | | | | | | | | | |

        self._item_length = item_length
        self._test_stride = test_stride
        self.target_length = target_length
        self.classes = classes
        self.bug = bug

        # np.savez(self.dataset_file, *processed_files); np.load(self.dataset_file, mmap_mode='r')
        self.data = {'arr_' + str(i): a for i, a in enumerate(dataset_arrays)}
        self.start_samples = [0]
        self._length = 0
        self.calculate_length()
        self.train = train

    def calculate_length(self):
        start_samples = [0]
        for i in range(len(self.data.keys())):
            start_samples.append(start_samples[-1] + len(self.data['arr_' + str(i)]))
        available_length = start_samples[-1] - (self._item_length - (self.target_length - 1)) - 1
        self._length = math.floor(available_length / self.target_length)
        self.start_samples = start_samples

    def __getitem__(self, idx):
        if self._test_stride < 2:
            sample_index = idx * self.target_length
        elif self.train:
            sample_index = idx * self.target_length + math.floor(idx / (self._test_stride-1))
        else:
            sample_index = self._test_stride * (idx+1) - 1

        file_index = bisect.bisect_left(self.start_samples, sample_index) - 1
        if file_index < 0:
            file_index = 0
        if file_index + 1 >= len(self.start_samples):
            print("error: sample index " + str(sample_index) + " is to high. Results in file_index " + str(file_index))
        position_in_file = sample_index - self.start_samples[file_index]
        end_position_in_next_file = sample_index + self._item_length + 1 - self.start_samples[file_index + 1]

        if end_position_in_next_file < 0:
            file_name = 'arr_' + str(file_index)
            this_file = self.data[file_name]
            sample = this_file[position_in_file:position_in_file + self._item_length + 1]
        else:
            # load from two files
            file1 = self.data['arr_' + str(file_index)]
            file2 = self.data['arr_' + str(file_index + 1)]
            sample1 = file1[position_in_file:]
            sample2 = file2[:end_position_in_next_file]
            sample = np.concatenate((sample1, sample2))

        example = torch.from_numpy(sample).type(torch.LongTensor)
        one_hot = torch.FloatTensor(self.classes, self._item_length).zero_()
        one_hot.scatter_(0, example[:self._item_length].unsqueeze(0), 1.)
        if self.bug == "target_not_shifted":
            # the targets aligned with the last output_length *inputs* instead of the samples that follow them
            target = example[-self.target_length - 1:-1].unsqueeze(0)
        else:
            target = example[-self.target_length:].unsqueeze(0)
        return one_hot, target

    def __len__(self):
        test_length = math.floor(self._length / self._test_stride)
        if self.train:
            return self._length - test_length
        else:
            return test_length


def quantize_data(data, classes):
    mu_x = mu_law_encoding(data, classes)
    bins = np.linspace(-1, 1, classes)
    quantized = np.digitize(mu_x, bins) - 1
    return quantized


def mu_law_encoding(data, mu):
    mu_x = np.sign(data) * np.log(1 + mu * np.abs(data)) / np.log(mu + 1)
    return mu_x


def make_recordings(seed):
    """Four synthetic mono recordings in [-1, 1] (librosa.load's output range): gliding sinusoids, an envelope,
    a little noise."""
    rng = np.random.RandomState(seed)
    t = np.arange(FILE_LENGTH) / SAMPLING_RATE
    recordings = []
    for _ in range(N_FILES):
        wave = np.zeros(FILE_LENGTH)
        for _ in range(rng.randint(2, 4)):
            f0, f1 = rng.uniform(150, 900, size=2)
            phase = 2 * np.pi * np.cumsum(np.linspace(f0, f1, FILE_LENGTH)) / SAMPLING_RATE
            wave += rng.uniform(0.3, 1.0) * np.sin(phase + rng.uniform(0, 2 * np.pi))
        envelope = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(2, 6) * t + rng.uniform(0, 2 * np.pi))
        wave = wave * envelope + 0.01 * rng.randn(FILE_LENGTH)
        recordings.append((0.9 * wave / np.abs(wave).max()).astype(np.float32))
    return recordings


def _build(seed, bug=None):
    torch.manual_seed(seed)
    dtype = torch.FloatTensor
    ltype = torch.LongTensor

    model = WaveNetModel(layers=5,
                         blocks=2,
                         dilation_channels=32,
                         residual_channels=32,
                         skip_channels=64,
                         end_channels=64,
                         output_length=16,
                         dtype=dtype,
                         bias=True,
                         bug=bug)

    # WavenetDataset.create_dataset: librosa.load, then quantize_data(...).astype(np.uint8)
    processed_files = [quantize_data(file_data, 256).astype(np.uint8) for file_data in make_recordings(seed)]
    data = WavenetDataset(processed_files,
                          item_length=model.receptive_field + model.output_length - 1,
                          target_length=model.output_length,
                          test_stride=500,
                          bug=bug)

    # WavenetTrainer(model=model, dataset=data, lr=0.001, ...): weight_decay 0, gradient_clipping None by default
    lr, weight_decay, clip = 0.001, 0, None
    optimizer = optim.Adam(params=model.parameters(), lr=lr, weight_decay=weight_decay)

    # WavenetTrainer.train(batch_size=16, epochs=10)
    model.train()
    dataloader = torch.utils.data.DataLoader(data,
                                             batch_size=16,
                                             shuffle=True,
                                             num_workers=0,
                                             pin_memory=False,
                                             generator=torch.Generator().manual_seed(seed))
    state = {"it": iter(dataloader), "step": 0}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(dataloader)
            return next(state["it"])

    def train_step():
        (x, target) = next_batch()
        x = Variable(x.type(dtype))
        target = Variable(target.view(-1).type(ltype))

        output = model(x)
        loss = F.cross_entropy(output.squeeze(), target.squeeze())
        optimizer.zero_grad()
        loss.backward()
        loss_value = loss.item()  # loss = loss.data[0]

        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        state["step"] += 1
        return torch.tensor(loss_value)

    def eval_fn(model, batch):
        """WavenetTrainer.validate on one batch: the accuracy of the most likely next sample."""
        model.eval()
        x, target = batch
        x = Variable(x.type(dtype))
        target = Variable(target.view(-1).type(ltype))

        output = model(x)
        predictions = torch.max(output, 1)[1].view(-1)
        correct_pred = torch.eq(target, predictions)
        accurate_classifications = torch.sum(correct_pred).item()
        model.train()
        return accurate_classifications / target.numel()

    first_x, first_target = next(iter(torch.utils.data.DataLoader(data, batch_size=16)))
    return Program(name="pytorchwavenet_wavenet", model=model, batch=(first_x, first_target.view(-1)),
                   loss_fn=lambda output, target: F.cross_entropy(output.squeeze(), target.squeeze()),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the targets taken one sample early (classic off-by-one): each output position is asked for the sample it was
    # just given, so the model learns to copy its input instead of predicting the next sample.
    Bug("target_not_shifted", functools.partial(_build, bug="target_not_shifted"), "learning_ledger", ("TASK",)),
    # `dilate` folds time into the batch axis by a bare view instead of permute-view-permute (the time-to-batch bug
    # of https://github.com/ibab/tensorflow-wavenet/issues/29): the dilated convolutions mix samples of different
    # items and positions; shapes still agree, so it trains.
    Bug("dilate_view_without_permute", functools.partial(_build, bug="dilate_view_without_permute"), "tensor_trace",
        ("filter_convs.1",)),
]
