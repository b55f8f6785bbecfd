"""DeepSpeech2 from SeanNaren's deepspeech.pytorch as its Lightning module trains it: a masked 2-D convolution front
end (``MaskConv``: two Conv2d + BatchNorm2d + Hardtanh(0, 20), the padding frames zeroed per utterance), bidirectional
LSTM layers over packed sequences (``BatchRNN``, directions summed, sequence-wise BatchNorm), a sequence-wise
BatchNorm + Linear head, and ``CTCLoss(blank=0, reduction='sum', zero_infinity=True)`` on the log-softmax with the
output lengths from ``get_seq_lens`` and the target lengths from the collate function; AdamW (lr 1.5e-4, weight
decay 1e-5) with ExponentialLR(0.99) per epoch, gradient norm clipped at 400 (configs/an4.yaml).

Source: https://github.com/SeanNaren/deepspeech.pytorch
Commit: b88a631ef6b96553e16bbaa5bd6a621435bed278
Files: deepspeech_pytorch/model.py, deepspeech_pytorch/training.py, deepspeech_pytorch/configs/train_config.py,
deepspeech_pytorch/loader/data_loader.py (``_collate_fn``, ``AudioDataLoader``, ``DSRandomSampler``, the
spectrogram normalization), deepspeech_pytorch/decoder.py (``GreedyDecoder``), configs/an4.yaml, labels.json
License: MIT (Copyright (c) 2017 Sean Naren; full text in LICENSES/SeanNaren-deepspeech.pytorch.txt)
Domain: speech recognition (conv + bi-LSTM acoustic model, CTC with input/target lengths)

Kept as written: ``SequenceWise``, ``MaskConv``, ``InferenceBatchSoftmax``, ``BatchRNN``, ``DeepSpeech`` (the
bidirectional configuration: conv stack, ``rnn_input_size`` formula, first RNN without batch norm, ``fc``,
``criterion``, ``forward``, ``training_step``, ``configure_optimizers``' AdamW branch with ExponentialLR,
``get_seq_lens``), ``_collate_fn`` (utterances sorted by length, zero padded, ``input_percentages``,
``target_sizes``, targets concatenated), ``AudioDataLoader`` and ``DSRandomSampler``, the normalize lines of
``compute_spectrogram`` (log1p, mean/std), ``GreedyDecoder`` (argmax, blanks removed, repetitions collapsed),
labels.json, the an4 run's batch size 8 and ``gradient_clip_val: 400``, the AdamConfig defaults.

Deviations from the original:
- sizes: hidden_size 1024 -> 32, hidden_layers 5 -> 2, the convolutions' 32 channels -> 8 (``CONV_CHANNELS``);
  the spectrogram has 41 frequency bins (SpectConfig sample_rate 2000, window_size .04 in the ``rnn_input_size``
  formula, for 161 bins at 16 kHz / 20 ms; fewer bins than the first convolution's 41-tall kernel crash this torch build's CPU convolution backward);
- data: audio files, librosa's STFT and the manifests are replaced by synthetic magnitude spectrograms made from
  ``seed``: each letter A-Z has a fixed random spectral template over the 41 bins, an utterance of 3-5 letters is
  the letters' templates held for 5-8 frames each (plus noise), then ``log1p`` and the per-utterance normalization
  as ``compute_spectrogram`` writes them; its transcript is the letters' label indices (128 training utterances);
- precision 16 (an4.yaml) -> 32 on the CPU; ``strategy: ddp``, ``devices``, checkpointing, hydra and omegaconf
  are dropped (``OmegaConf.get_type(cfg)`` becomes ``type(cfg)``); ``save_hyperparameters`` is kept;
- the Trainer's fit loop is written out as Lightning's automatic optimization runs one batch: ``training_step``,
  ``zero_grad``, ``backward`` (the optimizer closure), gradient-norm clipping at ``gradient_clip_val``, ``step``;
  at the end of an epoch the ExponentialLR steps and the sampler's epoch is set; ``train_step`` is one batch;
- validation: ``validation_step``'s WER/CER torchmetrics objects are not built; ``eval_fn`` decodes a batch with the
  ``GreedyDecoder`` in eval mode and returns the fraction of utterances decoded exactly;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C404, PLR0402, RUF059, SIM210, UP004, UP006, UP007, UP008, UP035
# (the original's code style is kept as written)

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import sys
import warnings
from typing import List, Union

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import CTCLoss
from torch.utils.data import DataLoader, Dataset, Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CONV_CHANNELS = 8  # (port) 32 in the original

LABELS = ["_", "'", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S",
          "T", "U", "V", "W", "X", "Y", "Z", " "]


# ---- deepspeech_pytorch/configs/train_config.py -------------------------------------------------------------------

@dataclasses.dataclass
class SpectConfig:
    sample_rate: int = 2000  # (port) 16000 in the original: 41 frequency bins here
    window_size: float = .04  # (port) .02 in the original
    window_stride: float = .01  # Window stride for spectrogram generation (seconds)


@dataclasses.dataclass
class BiDirectionalConfig:
    rnn_type: type = nn.LSTM  # Type of RNN to use in model
    hidden_size: int = 32  # (port) 1024 in the original
    hidden_layers: int = 2  # (port) 5 in the original


@dataclasses.dataclass
class OptimConfig:
    learning_rate: float = 1.5e-4  # Initial Learning Rate
    learning_anneal: float = 0.99  # Annealing applied to learning rate after each epoch
    weight_decay: float = 1e-5  # Initial Weight Decay


@dataclasses.dataclass
class AdamConfig(OptimConfig):
    eps: float = 1e-8  # Adam eps
    betas: tuple = (0.9, 0.999)  # Adam betas


# ---- deepspeech_pytorch/decoder.py ------------------------------------------------------------------------------

class GreedyDecoder(object):
    def __init__(self, labels, blank_index=0):
        self.labels = labels
        self.int_to_char = dict([(i, c) for (i, c) in enumerate(labels)])
        self.blank_index = blank_index
        space_index = len(labels)  # To prevent errors in decode, we add an out of bounds index for the space
        if ' ' in labels:
            space_index = labels.index(' ')
        self.space_index = space_index

    def convert_to_strings(self, sequences, sizes=None, remove_repetitions=False):
        """Given a list of numeric sequences, returns the corresponding strings"""
        strings = []
        for x in range(len(sequences)):
            seq_len = sizes[x] if sizes is not None else len(sequences[x])
            string = self.process_string(sequences[x], seq_len, remove_repetitions)
            strings.append([string])  # We only return one path
        return strings

    def process_string(self, sequence, size, remove_repetitions=False):
        string = ''
        for i in range(size):
            char = self.int_to_char[sequence[i].item()]
            if char != self.int_to_char[self.blank_index]:
                # if this char is a repetition and remove_repetitions=true, then skip
                if remove_repetitions and i != 0 and char == self.int_to_char[sequence[i - 1].item()]:
                    pass
                elif char == self.labels[self.space_index]:
                    string += ' '
                else:
                    string = string + char
        return string

    def decode(self, probs, sizes=None):
        _, max_probs = torch.max(probs, 2)
        strings = self.convert_to_strings(max_probs.view(max_probs.size(0), max_probs.size(1)), sizes,
                                          remove_repetitions=True)
        return strings


# ---- deepspeech_pytorch/model.py --------------------------------------------------------------------------------

class SequenceWise(nn.Module):
    def __init__(self, module):
        """
        Collapses input of dim T*N*H to (T*N)*H, and applies to a module.
        Allows handling of variable sequence lengths and minibatch sizes.
        :param module: Module to apply input to.
        """
        super(SequenceWise, self).__init__()
        self.module = module

    def forward(self, x):
        t, n = x.size(0), x.size(1)
        x = x.view(t * n, -1)
        x = self.module(x)
        x = x.view(t, n, -1)
        return x


class MaskConv(nn.Module):
    def __init__(self, seq_module):
        """
        Adds padding to the output of the module based on the given lengths. This is to ensure that the
        results of the model do not change when batch sizes change during inference.
        Input needs to be in the shape of (BxCxDxT)
        :param seq_module: The sequential module containing the conv stack.
        """
        super(MaskConv, self).__init__()
        self.seq_module = seq_module

    def forward(self, x, lengths):
        """
        :param x: The input of size BxCxDxT
        :param lengths: The actual length of each sequence in the batch
        :return: Masked output from the module
        """
        for module in self.seq_module:
            x = module(x)
            mask = torch.BoolTensor(x.size()).fill_(0)
            if x.is_cuda:
                mask = mask.cuda()
            for i, length in enumerate(lengths):
                length = length.item()
                if (mask[i].size(2) - length) > 0:
                    mask[i].narrow(2, length, mask[i].size(2) - length).fill_(1)
            x = x.masked_fill(mask, 0)
        return x, lengths


class InferenceBatchSoftmax(nn.Module):
    def forward(self, input_):
        if not self.training:
            return F.softmax(input_, dim=-1)
        else:
            return input_


class BatchRNN(nn.Module):
    def __init__(self, input_size, hidden_size, rnn_type=nn.LSTM, bidirectional=False, batch_norm=True):
        super(BatchRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.batch_norm = SequenceWise(nn.BatchNorm1d(input_size)) if batch_norm else None
        self.rnn = rnn_type(input_size=input_size, hidden_size=hidden_size,
                            bidirectional=bidirectional, bias=True)
        self.num_directions = 2 if bidirectional else 1

    def flatten_parameters(self):
        self.rnn.flatten_parameters()

    def forward(self, x, output_lengths, h=None):
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x = nn.utils.rnn.pack_padded_sequence(x, output_lengths)
        x, h = self.rnn(x, h)
        x, _ = nn.utils.rnn.pad_packed_sequence(x)
        if self.bidirectional:
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2).view(x.size(0), x.size(1), -1)  # (TxNxH*2) -> (TxNxH) by sum
        return x, h


class DeepSpeech(pl.LightningModule):
    def __init__(self,
                 labels: List,
                 model_cfg: Union[BiDirectionalConfig],
                 precision: int,
                 optim_cfg: Union[AdamConfig],
                 spect_cfg: SpectConfig,
                 bug=None
                 ):
        super().__init__()
        self.save_hyperparameters()
        self.model_cfg = model_cfg
        self.precision = precision
        self.optim_cfg = optim_cfg
        self.spect_cfg = spect_cfg
        self.bidirectional = True if type(model_cfg) is BiDirectionalConfig else False
        self.bug = bug

        self.labels = labels
        num_classes = len(self.labels)

        self.conv = MaskConv(nn.Sequential(
            nn.Conv2d(1, CONV_CHANNELS, kernel_size=(41, 11), stride=(2, 2), padding=(20, 5)),
            nn.BatchNorm2d(CONV_CHANNELS),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(CONV_CHANNELS, CONV_CHANNELS, kernel_size=(21, 11), stride=(2, 1), padding=(10, 5)),
            nn.BatchNorm2d(CONV_CHANNELS),
            nn.Hardtanh(0, 20, inplace=True)
        ))
        # Based on above convolutions and spectrogram size using conv formula (W - F + 2P)/ S+1
        rnn_input_size = int(math.floor((self.spect_cfg.sample_rate * self.spect_cfg.window_size) / 2) + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 20 - 41) / 2 + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 10 - 21) / 2 + 1)
        rnn_input_size *= CONV_CHANNELS

        self.rnns = nn.Sequential(
            BatchRNN(
                input_size=rnn_input_size,
                hidden_size=self.model_cfg.hidden_size,
                rnn_type=self.model_cfg.rnn_type,
                bidirectional=self.bidirectional,
                batch_norm=False
            ),
            *(
                BatchRNN(
                    input_size=self.model_cfg.hidden_size,
                    hidden_size=self.model_cfg.hidden_size,
                    rnn_type=self.model_cfg.rnn_type,
                    bidirectional=self.bidirectional
                ) for x in range(self.model_cfg.hidden_layers - 1)
            )
        )

        self.lookahead = None  # (port) the Lookahead layer exists only in the unidirectional configuration

        fully_connected = nn.Sequential(
            nn.BatchNorm1d(self.model_cfg.hidden_size),
            nn.Linear(self.model_cfg.hidden_size, num_classes, bias=False)
        )
        self.fc = nn.Sequential(
            SequenceWise(fully_connected),
        )
        self.inference_softmax = InferenceBatchSoftmax()
        self.criterion = CTCLoss(blank=self.labels.index('_'), reduction='sum', zero_infinity=True)
        self.evaluation_decoder = GreedyDecoder(self.labels)  # Decoder used for validation

    def forward(self, x, lengths, hs=None):
        lengths = lengths.cpu().int()
        output_lengths = self.get_seq_lens(lengths)
        x, _ = self.conv(x, output_lengths)

        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # Collapse feature dimension
        x = x.transpose(1, 2).transpose(0, 1).contiguous()  # TxNxH

        # if hs is None, create a list of None values corresponding to the number of rnn layers
        if hs is None:
            hs = [None] * len(self.rnns)

        new_hs = []
        for i, rnn in enumerate(self.rnns):
            x, h = rnn(x, output_lengths, hs[i])
            new_hs.append(h)

        if not self.bidirectional:  # no need for lookahead layer in bidirectional
            x = self.lookahead(x)

        x = self.fc(x)
        x = x.transpose(0, 1)
        # identity in training mode, softmax in eval mode
        x = self.inference_softmax(x)
        return x, output_lengths, new_hs

    def ctc_loss(self, outputs, targets, target_sizes):
        # (port) training_step's lines after the forward, split out so loss_fn can apply them to the model's output
        out, output_sizes, hs = outputs
        out = out.transpose(0, 1)  # TxNxH
        if self.bug != "ctc_on_raw_logits":
            out = out.log_softmax(-1)
        if self.bug == "output_sizes_all_padded":
            output_sizes = torch.full_like(output_sizes, out.size(0))

        loss = self.criterion(out, targets, output_sizes, target_sizes)
        return loss

    def training_step(self, batch, batch_idx):
        inputs, targets, input_percentages, target_sizes = batch
        input_sizes = input_percentages.mul_(int(inputs.size(3))).int()
        out, output_sizes, hs = self(inputs, input_sizes)
        return self.ctc_loss((out, output_sizes, hs), targets, target_sizes)

    def configure_optimizers(self):
        if type(self.optim_cfg) is AdamConfig:
            optimizer = torch.optim.AdamW(
                params=self.parameters(),
                lr=self.optim_cfg.learning_rate,
                betas=self.optim_cfg.betas,
                eps=self.optim_cfg.eps,
                weight_decay=self.optim_cfg.weight_decay
            )
        else:
            raise ValueError("Optimizer has not been specified correctly.")

        scheduler = torch.optim.lr_scheduler.ExponentialLR(
            optimizer=optimizer,
            gamma=self.optim_cfg.learning_anneal
        )
        return [optimizer], [scheduler]

    def get_seq_lens(self, input_length):
        """
        Given a 1D Tensor or Variable containing integer sequence lengths, return a 1D tensor or variable
        containing the size sequences that will be output by the network.
        :param input_length: 1D Tensor
        :return: 1D Tensor scaled by model
        """
        seq_len = input_length
        for m in self.conv.modules():
            if type(m) == nn.modules.conv.Conv2d:
                seq_len = ((seq_len + 2 * m.padding[1] - m.dilation[1] * (m.kernel_size[1] - 1) - 1) // m.stride[1] + 1)
        return seq_len.int()


# ---- deepspeech_pytorch/loader/data_loader.py -------------------------------------------------------------------

def _collate_fn(batch, bug=None):
    def func(p):
        return p[0].size(1)

    if bug == "collate_sorts_spectrograms_only":
        # the spectrograms sorted by length, the transcripts left in the loader's order
        transcripts = [sample[1] for sample in batch]
        batch = sorted(batch, key=lambda sample: sample[0].size(1), reverse=True)
        batch = [(sample[0], transcript) for sample, transcript in zip(batch, transcripts)]
    else:
        batch = sorted(batch, key=lambda sample: sample[0].size(1), reverse=True)
    longest_sample = max(batch, key=func)[0]
    freq_size = longest_sample.size(0)
    minibatch_size = len(batch)
    max_seqlength = longest_sample.size(1)
    inputs = torch.zeros(minibatch_size, 1, freq_size, max_seqlength)
    input_percentages = torch.FloatTensor(minibatch_size)
    target_sizes = torch.IntTensor(minibatch_size)
    targets = []
    for x in range(minibatch_size):
        sample = batch[x]
        tensor = sample[0]
        target = sample[1]
        seq_length = tensor.size(1)
        inputs[x][0].narrow(1, 0, seq_length).copy_(tensor)
        input_percentages[x] = seq_length / float(max_seqlength)
        target_sizes[x] = len(target)
        targets.extend(target)
    targets = torch.tensor(targets, dtype=torch.long)
    return inputs, targets, input_percentages, target_sizes


class AudioDataLoader(DataLoader):
    def __init__(self, *args, bug=None, **kwargs):
        """
        Creates a data loader for AudioDatasets.
        """
        super(AudioDataLoader, self).__init__(*args, **kwargs)
        self.collate_fn = functools.partial(_collate_fn, bug=bug)


class DSRandomSampler(Sampler):
    """
    Implementation of a Random Sampler for sampling the dataset.
    Added to ensure we reset the start index when an epoch is finished.
    This is essential since we support saving/loading state during an epoch.
    """

    def __init__(self, dataset, batch_size=1):
        super().__init__()  # (port) Sampler.__init__ no longer takes data_source

        self.dataset = dataset
        self.start_index = 0
        self.epoch = 0
        self.batch_size = batch_size
        ids = list(range(len(self.dataset)))
        self.bins = [ids[i:i + self.batch_size] for i in range(0, len(ids), self.batch_size)]

    def __iter__(self):
        # deterministically shuffle based on epoch
        g = torch.Generator()
        g.manual_seed(self.epoch)
        indices = (
            torch.randperm(len(self.bins) - self.start_index, generator=g)
                .add(self.start_index)
                .tolist()
        )
        for x in indices:
            batch_ids = self.bins[x]
            np.random.shuffle(batch_ids)
            yield batch_ids

    def __len__(self):
        return len(self.bins) - self.start_index

    def set_epoch(self, epoch):
        self.epoch = epoch


class SyntheticSpectrogramDataset(Dataset):
    """(port) SpectrogramDataset over synthetic utterances: (spectrogram [freq, time], transcript label indices)."""

    def __init__(self, seed, n, freq=41, normalize=True):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.rand(len(LABELS), freq, generator=gen) ** 2 * 4
        self.items = []
        for _ in range(n):
            letters = torch.randint(2, 28, (int(torch.randint(3, 6, (1,), generator=gen)),), generator=gen).tolist()
            frames = []
            for c in letters:
                hold = int(torch.randint(5, 9, (1,), generator=gen))
                frames.append(templates[c].unsqueeze(1).expand(freq, hold))
            mag = torch.cat(frames, 1) + 0.3 * torch.rand(freq, sum(f.size(1) for f in frames), generator=gen)
            # S = log(S+1)
            spect = np.log1p(mag.numpy())
            spect = torch.FloatTensor(spect)
            if normalize:
                mean = spect.mean()
                std = spect.std()
                spect.add_(-mean)
                spect.div_(std)
            self.items.append((spect, letters))

    def __getitem__(self, index):
        return self.items[index]

    def __len__(self):
        return len(self.items)


# ---- deepspeech_pytorch/training.py (+ the Lightning fit loop, written out) ---------------------------------------

BATCH_SIZE = 8  # configs/an4.yaml
GRADIENT_CLIP_VAL = 400  # configs/an4.yaml: Norm cutoff to prevent explosion of gradients


def _build(seed, bug=None):
    pl.seed_everything(seed, verbose=False)
    labels = LABELS
    train_dataset = SyntheticSpectrogramDataset(seed, 128)
    train_sampler = DSRandomSampler(dataset=train_dataset, batch_size=BATCH_SIZE)
    train_loader = AudioDataLoader(dataset=train_dataset, num_workers=0, batch_sampler=train_sampler, bug=bug)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DeepSpeech(
            labels=labels,
            model_cfg=BiDirectionalConfig(),
            optim_cfg=AdamConfig(),
            precision=32,
            spect_cfg=SpectConfig(),
            bug=bug,
        )
    [optimizer], [scheduler] = model.configure_optimizers()

    state = {"it": iter(train_loader), "epoch": 0, "batch_idx": 0}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the end of an epoch
            scheduler.step()
            state["epoch"] += 1
            train_sampler.set_epoch(state["epoch"])
            state["it"], state["batch_idx"] = iter(train_loader), 0
            return next(state["it"])

    def train_step():
        model.train()
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        loss = model.training_step(batch, batch_idx)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRADIENT_CLIP_VAL)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, (targets, target_sizes) = batch
        model.eval()
        with torch.no_grad():
            out, output_sizes, hs = model(**inputs)
        model.train()
        decoded = model.evaluation_decoder.decode(out, output_sizes)
        expected = model.evaluation_decoder.convert_to_strings(targets.split(target_sizes.tolist()))
        return float(np.mean([d[0] == e[0] for d, e in zip(decoded, expected)]))

    inputs, targets, input_percentages, target_sizes = next(iter(AudioDataLoader(
        dataset=train_dataset, num_workers=0, batch_size=BATCH_SIZE, bug=bug)))
    input_sizes = input_percentages.mul_(int(inputs.size(3))).int()
    batch = ({"x": inputs, "lengths": input_sizes}, (targets, target_sizes))

    def loss_fn(outputs, targets):
        return model.ctc_loss(outputs, *targets)

    return Program(name="deepspeechpytorch_ds2", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # CTCLoss fed the raw scores: the log_softmax line left out. torch's CTCLoss expects log-probabilities (the
    # pitfall listed when the repository moved from warp-ctc to torch.nn.CTCLoss,
    # https://github.com/SeanNaren/deepspeech.pytorch/issues/422).
    Bug("ctc_on_raw_logits", functools.partial(_build, bug="ctc_on_raw_logits"), "learning_ledger", ("OBJECTIVE",)),
    # every utterance's output length set to the padded length: CTC also aligns the padding frames (the output
    # sizes exist "so that the loss calculation can ignore anything outside that length (due to the padding)",
    # https://github.com/SeanNaren/deepspeech.pytorch/issues/90) (classic: padding not ignored).
    Bug("output_sizes_all_padded", functools.partial(_build, bug="output_sizes_all_padded"), "learning_ledger",
        ("OBJECTIVE",)),
    # the collate function sorts the spectrograms by length but not their transcripts: utterances get another
    # utterance's transcript (classic).
    Bug("collate_sorts_spectrograms_only", functools.partial(_build, bug="collate_sorts_spectrograms_only"),
        "learning_ledger", ("TASK",)),
]
