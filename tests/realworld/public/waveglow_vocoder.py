"""WaveGlow (a flow-based vocoder: mel spectrogram -> waveform) from NVIDIA's waveglow: the mel upsampled by a
transposed convolution to the audio rate and grouped with the audio into 8-sample groups; 12 flows of an
invertible 1x1 convolution (log-determinant ``B * T * logdet(W)``) and an affine coupling whose ``log_s, b`` come
from a WaveNet-like ``WN`` on the first half and the mel (gated tanh/sigmoid units, dilations doubling, the last
layer zero-initialized), two channels output early every 4 flows; ``WaveGlowLoss``: ``sum(z^2) / (2 sigma^2) -
sum(log_s) - sum(log_det_W)`` divided by the number of elements of ``z``; Adam lr 1e-4.

Source: https://github.com/NVIDIA/waveglow
Commit: 8afb643df59265016af6bd255c7516309d675168
Files: glow.py (WaveGlowLoss, Invertible1x1Conv, WN, WaveGlow), train.py, mel2samp.py (Mel2Samp), config.json;
  the mel of the ``tacotron2`` submodule (NVIDIA/tacotron2 185cd24: ``layers.TacotronSTFT``, ``stft.STFT``,
  ``audio_processing.dynamic_range_compression``)
License: BSD-3-Clause (Copyright (c) 2018, NVIDIA Corporation; full text in LICENSES/NVIDIA-waveglow.txt)
Domain: audio, neural vocoder (normalizing flow, maximum likelihood on waveforms conditioned on mel spectrograms)

Deviations from the original:
- sizes (config.json): n_mel_channels 80 -> 8, n_flows 12 -> 4, n_early_every 4 -> 2 (n_early_size 2 and n_group
  8 kept), WN n_layers 8 -> 2, n_channels 256 -> 16 (kernel_size 3 kept), segment_length 16000 -> 512 samples,
  batch_size 12 -> 4; the STFT's filter/hop/window lengths 1024/256/1024 -> 256/64/256, and with them the
  upsampler's kernel 1024 / stride 256 (written in glow.py to match them) -> 256 / 64; learning_rate 1e-4 -> 1e-3
  so that the 30 steps of the self-check show the loss falling (the original trains for days);
- data: LJSpeech wav files are replaced by synthetic clips made from ``seed`` (22050 Hz, int16 scale): a harmonic
  tone (f0 from eight pitches, three partials, a random phase) under a rising or falling amplitude envelope plus a
  little noise; ``Mel2Samp.__getitem__`` as written (random segment of ``segment_length``, mel of the segment,
  audio divided by ``MAX_WAV_VALUE``), with ``random`` seeded from ``seed``;
- ``TacotronSTFT.mel_spectrogram`` written out in plain torch (no librosa here): ``torch.stft`` with a periodic
  Hann window and reflect padding of ``filter_length / 2`` (what ``stft.STFT``'s Fourier-basis convolution
  computes), the magnitude, ``librosa.filters.mel``'s Slaney mel basis (written out in numpy), then
  ``log(clamp(x, min=1e-5))``;
- CPU and fp32 only: ``.cuda()``, apex fp16 (``fp16_run`` true in config.json), distributed, tensorboard and
  checkpointing dropped; ``torch.qr`` -> ``torch.linalg.qr`` (the same Q); ``Variable`` is
  the tensor itself; ``infer`` and ``remove_weightnorm`` (inference only) left out; the TorchScript
  decorator on ``fused_add_tanh_sigmoid_multiply`` is dropped (the same arithmetic, eager);
  ``torch.nn.utils.weight_norm`` as written (deprecated alias of the parametrization in new torch);
- one ``train_step`` is one iteration of ``train``'s loop (``model.zero_grad()``, forward on ``(mel, audio)``,
  ``criterion(outputs)``, backward, step); the DataLoader (``shuffle=False``, ``drop_last=True``) restarts each
  epoch; ``eval_fn`` is the loss on a given batch without gradients (there is no validation in train.py);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, RUF059

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F  # noqa: F401  (glow.py's import)
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

MAX_WAV_VALUE = 32768.0
WAVEGLOW_CONFIG = {
    "n_mel_channels": 8,  # (port) 80
    "n_flows": 4,  # (port) 12
    "n_group": 8,
    "n_early_every": 2,  # (port) 4
    "n_early_size": 2,
    "WN_config": {"n_layers": 2, "n_channels": 16, "kernel_size": 3},  # (port) 8, 256, 3
}
DATA_CONFIG = {
    "segment_length": 512,  # (port) 16000
    "sampling_rate": 22050,
    "filter_length": 256,  # (port) 1024
    "hop_length": 64,  # (port) 256
    "win_length": 256,  # (port) 1024
    "mel_fmin": 0.0,
    "mel_fmax": 8000.0,
}
TRAIN_CONFIG = {"learning_rate": 1e-3, "sigma": 1.0, "batch_size": 4, "seed": 1234}  # (port) lr 1e-4, batch 12


# ---- glow.py -----------------------------------------------------------------------------------------------------

def fused_add_tanh_sigmoid_multiply(input_a, input_b, n_channels):
    n_channels_int = n_channels[0]
    in_act = input_a+input_b
    t_act = torch.tanh(in_act[:, :n_channels_int, :])
    s_act = torch.sigmoid(in_act[:, n_channels_int:, :])
    acts = t_act * s_act
    return acts


class WaveGlowLoss(torch.nn.Module):
    def __init__(self, sigma=1.0, bug=None):
        super(WaveGlowLoss, self).__init__()
        self.sigma = sigma
        self.bug = bug

    def forward(self, model_output):
        z, log_s_list, log_det_W_list = model_output
        for i, log_s in enumerate(log_s_list):
            if self.bug == "log_det_of_exp_s":
                log_s = torch.exp(log_s)  # the coupling's scale exp(log_s) summed as its log-determinant
            if i == 0:
                log_s_total = torch.sum(log_s)
                log_det_W_total = log_det_W_list[i]
            else:
                log_s_total = log_s_total + torch.sum(log_s)
                log_det_W_total += log_det_W_list[i]

        loss = torch.sum(z*z)/(2*self.sigma*self.sigma) - log_s_total - log_det_W_total
        return loss/(z.size(0)*z.size(1)*z.size(2))


class Invertible1x1Conv(torch.nn.Module):
    """
    The layer outputs both the convolution, and the log determinant
    of its weight matrix.  If reverse=True it does convolution with
    inverse
    """
    def __init__(self, c):
        super(Invertible1x1Conv, self).__init__()
        self.conv = torch.nn.Conv1d(c, c, kernel_size=1, stride=1, padding=0,
                                    bias=False)

        # Sample a random orthonormal matrix to initialize weights
        W = torch.linalg.qr(torch.FloatTensor(c, c).normal_())[0]  # (port) torch.qr

        # Ensure determinant is 1.0 not -1.0
        if torch.det(W) < 0:
            W[:,0] = -1*W[:,0]
        W = W.view(c, c, 1)
        self.conv.weight.data = W

    def forward(self, z, reverse=False):
        # shape
        batch_size, group_size, n_of_groups = z.size()

        W = self.conv.weight.squeeze()

        # (port) the reverse branch (inference only) is left out
        # Forward computation
        log_det_W = batch_size * n_of_groups * torch.logdet(W)
        z = self.conv(z)
        return z, log_det_W


class WN(torch.nn.Module):
    """
    This is the WaveNet like layer for the affine coupling.  The primary difference
    from WaveNet is the convolutions need not be causal.  There is also no dilation
    size reset.  The dilation only doubles on each layer
    """
    def __init__(self, n_in_channels, n_mel_channels, n_layers, n_channels,
                 kernel_size):
        super(WN, self).__init__()
        assert(kernel_size % 2 == 1)
        assert(n_channels % 2 == 0)
        self.n_layers = n_layers
        self.n_channels = n_channels
        self.in_layers = torch.nn.ModuleList()
        self.res_skip_layers = torch.nn.ModuleList()

        start = torch.nn.Conv1d(n_in_channels, n_channels, 1)
        start = torch.nn.utils.weight_norm(start, name='weight')
        self.start = start

        # Initializing last layer to 0 makes the affine coupling layers
        # do nothing at first.  This helps with training stability
        end = torch.nn.Conv1d(n_channels, 2*n_in_channels, 1)
        end.weight.data.zero_()
        end.bias.data.zero_()
        self.end = end

        cond_layer = torch.nn.Conv1d(n_mel_channels, 2*n_channels*n_layers, 1)
        self.cond_layer = torch.nn.utils.weight_norm(cond_layer, name='weight')

        for i in range(n_layers):
            dilation = 2 ** i
            padding = int((kernel_size*dilation - dilation)/2)
            in_layer = torch.nn.Conv1d(n_channels, 2*n_channels, kernel_size,
                                       dilation=dilation, padding=padding)
            in_layer = torch.nn.utils.weight_norm(in_layer, name='weight')
            self.in_layers.append(in_layer)


            # last one is not necessary
            if i < n_layers - 1:
                res_skip_channels = 2*n_channels
            else:
                res_skip_channels = n_channels
            res_skip_layer = torch.nn.Conv1d(n_channels, res_skip_channels, 1)
            res_skip_layer = torch.nn.utils.weight_norm(res_skip_layer, name='weight')
            self.res_skip_layers.append(res_skip_layer)

    def forward(self, forward_input):
        audio, spect = forward_input
        audio = self.start(audio)
        output = torch.zeros_like(audio)
        n_channels_tensor = torch.IntTensor([self.n_channels])

        spect = self.cond_layer(spect)

        for i in range(self.n_layers):
            spect_offset = i*2*self.n_channels
            acts = fused_add_tanh_sigmoid_multiply(
                self.in_layers[i](audio),
                spect[:,spect_offset:spect_offset+2*self.n_channels,:],
                n_channels_tensor)

            res_skip_acts = self.res_skip_layers[i](acts)
            if i < self.n_layers - 1:
                audio = audio + res_skip_acts[:,:self.n_channels,:]
                output = output + res_skip_acts[:,self.n_channels:,:]
            else:
                output = output + res_skip_acts

        return self.end(output)


class WaveGlow(torch.nn.Module):
    def __init__(self, n_mel_channels, n_flows, n_group, n_early_every,
                 n_early_size, WN_config, bug=None):
        super(WaveGlow, self).__init__()

        self.upsample = torch.nn.ConvTranspose1d(n_mel_channels,
                                                 n_mel_channels,
                                                 256, stride=64)  # (port) 1024, stride=256
        assert(n_group % 2 == 0)
        self.n_flows = n_flows
        self.n_group = n_group
        self.n_early_every = n_early_every
        self.n_early_size = n_early_size
        self.WN = torch.nn.ModuleList()
        self.convinv = torch.nn.ModuleList()
        self.bug = bug

        n_half = int(n_group/2)

        # Set up layers with the right sizes based on how many dimensions
        # have been output already
        n_remaining_channels = n_group
        for k in range(n_flows):
            if k % self.n_early_every == 0 and k > 0:
                n_half = n_half - int(self.n_early_size/2)
                n_remaining_channels = n_remaining_channels - self.n_early_size
            self.convinv.append(Invertible1x1Conv(n_remaining_channels))
            self.WN.append(WN(n_half, n_mel_channels*n_group, **WN_config))
        self.n_remaining_channels = n_remaining_channels  # Useful during inference

    def forward(self, forward_input):
        """
        forward_input[0] = mel_spectrogram:  batch x n_mel_channels x frames
        forward_input[1] = audio: batch x time
        """
        spect, audio = forward_input

        #  Upsample spectrogram to size of audio
        spect = self.upsample(spect)
        assert(spect.size(2) >= audio.size(1))
        if spect.size(2) > audio.size(1):
            spect = spect[:, :, :audio.size(1)]

        spect = spect.unfold(2, self.n_group, self.n_group).permute(0, 2, 1, 3)
        spect = spect.contiguous().view(spect.size(0), spect.size(1), -1).permute(0, 2, 1)

        audio = audio.unfold(1, self.n_group, self.n_group).permute(0, 2, 1)
        output_audio = []
        log_s_list = []
        log_det_W_list = []

        for k in range(self.n_flows):
            if k % self.n_early_every == 0 and k > 0:
                output_audio.append(audio[:,:self.n_early_size,:])
                audio = audio[:,self.n_early_size:,:]

            audio, log_det_W = self.convinv[k](audio)
            log_det_W_list.append(log_det_W)

            n_half = int(audio.size(1)/2)
            audio_0 = audio[:,:n_half,:]
            audio_1 = audio[:,n_half:,:]

            if self.bug == "coupling_sees_transformed_half":
                output = self.WN[k]((audio_1, spect))  # the half being transformed conditions its own scale/shift
            else:
                output = self.WN[k]((audio_0, spect))
            log_s = output[:, n_half:, :]
            b = output[:, :n_half, :]
            audio_1 = torch.exp(log_s)*audio_1 + b
            log_s_list.append(log_s)

            audio = torch.cat([audio_0, audio_1],1)

        output_audio.append(audio)
        return torch.cat(output_audio,1), log_s_list, log_det_W_list


# ---- tacotron2 submodule: TacotronSTFT.mel_spectrogram, written out (port) ---------------------------------------

def _hz_to_mel(freqs):
    """librosa.hz_to_mel (Slaney: linear below 1 kHz, logarithmic above)."""
    freqs = np.asanyarray(freqs, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = freqs / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(freqs >= min_log_hz, min_log_mel + np.log(np.maximum(freqs, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(mels):
    mels = np.asanyarray(mels, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), freqs)


def librosa_mel_fn(sr, n_fft, n_mels, fmin, fmax):
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) with its defaults (htk=False, norm='slaney')."""
    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    weights = np.zeros((n_mels, 1 + n_fft // 2))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    return weights * enorm[:, None]


class TacotronSTFT(torch.nn.Module):
    def __init__(self, filter_length=1024, hop_length=256, win_length=1024,
                 n_mel_channels=80, sampling_rate=22050, mel_fmin=0.0,
                 mel_fmax=8000.0):
        super(TacotronSTFT, self).__init__()
        self.n_mel_channels = n_mel_channels
        self.sampling_rate = sampling_rate
        self.filter_length, self.hop_length, self.win_length = filter_length, hop_length, win_length
        mel_basis = librosa_mel_fn(
            sampling_rate, filter_length, n_mel_channels, mel_fmin, mel_fmax)
        mel_basis = torch.from_numpy(mel_basis).float()
        self.register_buffer('mel_basis', mel_basis)

    def spectral_normalize(self, magnitudes):
        return torch.log(torch.clamp(magnitudes, min=1e-5) * 1)  # dynamic_range_compression, C=1

    def mel_spectrogram(self, y):
        """Computes mel-spectrograms from a batch of waves
        PARAMS
        ------
        y: Variable(torch.FloatTensor) with shape (B, T) in range [-1, 1]

        RETURNS
        -------
        mel_output: torch.FloatTensor of shape (B, n_mel_channels, T)
        """
        assert(torch.min(y.data) >= -1)
        assert(torch.max(y.data) <= 1)

        # (port) stft.STFT.transform: a Fourier-basis conv1d over the reflect-padded signal, Hann-windowed
        spec = torch.stft(y, self.filter_length, hop_length=self.hop_length, win_length=self.win_length,
                          window=torch.hann_window(self.win_length), center=True, pad_mode="reflect",
                          return_complex=True)
        magnitudes = spec.abs()
        mel_output = torch.matmul(self.mel_basis, magnitudes)
        mel_output = self.spectral_normalize(mel_output)
        return mel_output


# ---- mel2samp.py -------------------------------------------------------------------------------------------------

PITCHES = (110.0, 147.0, 196.0, 262.0, 330.0, 392.0, 494.0, 587.0)


def synthetic_wav(rng, n_samples, sampling_rate):
    """(port) a wav file's int16 samples: a three-partial tone of one of eight pitches under a rising or falling
    envelope, plus a little noise."""
    t = np.arange(n_samples) / sampling_rate
    f0 = PITCHES[int(rng.integers(len(PITCHES)))]
    phase = rng.uniform(0, 2 * np.pi)
    tone = sum(a * np.sin(2 * np.pi * f0 * h * t + phase * h) for h, a in ((1, 1.0), (2, 0.5), (3, 0.25)))
    env = np.linspace(0.2, 1.0, n_samples) if rng.random() < 0.5 else np.linspace(1.0, 0.2, n_samples)
    x = 0.3 * env * tone / 1.75 + 0.005 * rng.standard_normal(n_samples)
    return np.clip(np.round(x * MAX_WAV_VALUE), -32768, 32767).astype(np.int16)


class Mel2Samp(torch.utils.data.Dataset):
    """
    This is the main class that calculates the spectrogram and returns the
    spectrogram, audio pair.
    """
    def __init__(self, wavs, segment_length, filter_length,
                 hop_length, win_length, sampling_rate, mel_fmin, mel_fmax, n_mel_channels):
        self.audio_files = wavs  # (port) in-memory (data, sampling_rate) pairs for the file list
        self.stft = TacotronSTFT(filter_length=filter_length,
                                 hop_length=hop_length,
                                 win_length=win_length,
                                 n_mel_channels=n_mel_channels,  # (port) TacotronSTFT's default 80
                                 sampling_rate=sampling_rate,
                                 mel_fmin=mel_fmin, mel_fmax=mel_fmax)
        self.segment_length = segment_length
        self.sampling_rate = sampling_rate

    def get_mel(self, audio):
        audio_norm = audio / MAX_WAV_VALUE
        audio_norm = audio_norm.unsqueeze(0)
        melspec = self.stft.mel_spectrogram(audio_norm)
        melspec = torch.squeeze(melspec, 0)
        return melspec

    def __getitem__(self, index):
        # Read audio
        data, sampling_rate = self.audio_files[index]
        audio = torch.from_numpy(data).float()
        if sampling_rate != self.sampling_rate:
            raise ValueError("{} SR doesn't match target {} SR".format(
                sampling_rate, self.sampling_rate))

        # Take segment
        if audio.size(0) >= self.segment_length:
            max_audio_start = audio.size(0) - self.segment_length
            audio_start = random.randint(0, max_audio_start)
            audio = audio[audio_start:audio_start+self.segment_length]
        else:
            audio = torch.nn.functional.pad(audio, (0, self.segment_length - audio.size(0)), 'constant').data

        mel = self.get_mel(audio)
        audio = audio / MAX_WAV_VALUE

        return (mel, audio)

    def __len__(self):
        return len(self.audio_files)


# ---- train.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)  # (port) Mel2Samp's random.seed(1234) / random segment start, from seed
    rng = np.random.default_rng(seed)
    sr = DATA_CONFIG["sampling_rate"]
    wavs = [(synthetic_wav(rng, int(rng.integers(600, 1000)), sr), sr) for _ in range(48)]

    criterion = WaveGlowLoss(TRAIN_CONFIG["sigma"], bug=bug)
    model = WaveGlow(**WAVEGLOW_CONFIG, bug=bug)
    optimizer = torch.optim.Adam(model.parameters(), lr=TRAIN_CONFIG["learning_rate"])

    data_config = dict(DATA_CONFIG, n_mel_channels=WAVEGLOW_CONFIG["n_mel_channels"])
    trainset = Mel2Samp(wavs, **data_config)
    train_loader = DataLoader(trainset, num_workers=0, shuffle=False,
                              sampler=None,
                              batch_size=TRAIN_CONFIG["batch_size"],
                              pin_memory=False,
                              drop_last=True)
    model.train()
    state = {"it": iter(train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the next epoch
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        if bug != "zero_grad_dropped":
            model.zero_grad()

        mel, audio = batch
        outputs = model((mel, audio))

        loss = criterion(outputs)
        reduced_loss = loss.item()

        loss.backward()

        optimizer.step()
        return reduced_loss

    def loss_fn(outputs, _targets=None):
        return criterion(outputs)

    def eval_fn(model, batch):
        """(port) the loss on a given batch, without gradients (train.py has no validation)."""
        mel, audio = batch[0]
        with torch.no_grad():
            return float(criterion(model((mel, audio))))

    first = next(iter(DataLoader(trainset, batch_size=TRAIN_CONFIG["batch_size"], shuffle=False)))
    batch = ((first[0], first[1]),)
    return Program(name="waveglow_vocoder", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the affine coupling's scale exp(log_s) summed into the loss as its log-determinant, the change asked about in
    # https://github.com/NVIDIA/waveglow/issues/231 ("Is there some reasons not adding exp(log_s) to log_s_list?").
    Bug("log_det_of_exp_s", functools.partial(_build, bug="log_det_of_exp_s"), "learning_ledger", ("OBJECTIVE",)),
    # the coupling network fed the half it transforms instead of the half it passes through (classic): the flow is
    # no longer invertible and log_s is no longer its log-determinant.
    Bug("coupling_sees_transformed_half", functools.partial(_build, bug="coupling_sees_transformed_half"),
        "learning_ledger", ("DEPENDENCY",)),
    # model.zero_grad() left out of the loop: gradients accumulate over the iterations (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
