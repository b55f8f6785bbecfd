# ruff: noqa: UP008, UP031, PLR0402  (the original's style is kept as written)
"""AUTOVC (Qian et al., "AutoVC: Zero-Shot Voice Style Transfer with Only Autoencoder Loss", ICML 2019) from
auspicious3000/autovc, trained as ``main.py`` / ``solver_encoder.py`` do: a mel-spectrogram crop and its speaker's
embedding go through the content encoder (three conv + BatchNorm layers, a two-layer bidirectional LSTM whose
forward and backward outputs are down-sampled every ``freq`` frames into the bottleneck codes), the codes are
up-sampled, joined with the target speaker's embedding and decoded (LSTM, three convs, a two-layer LSTM, a linear
projection to 80 mel bins), a five-conv postnet adds a residual; the loss is the self-reconstruction MSE before and
after the postnet plus ``lambda_cd`` times the L1 distance between the codes of the input and the codes of its
reconstruction; Adam at 1e-4.

Source: https://github.com/auspicious3000/autovc
Commit: c1827a60e83e6d26030b8953843b2f7cf2bd36db
Files: ``model_vc.py`` (``LinearNorm``, ``ConvNorm``, ``Encoder``, ``Decoder``, ``Postnet``, ``Generator``),
``solver_encoder.py`` (``Solver.build_model``, ``reset_grad``, ``train``), ``main.py`` (defaults),
``data_loader.py`` (``Utterances``, ``get_loader``), ``make_metadata.py``, README (one-hot speaker embeddings)
License: MIT (Copyright (c) 2019; full text in LICENSES/auspicious3000-autovc.txt)
Domain: speech, voice conversion (autoencoder with an information bottleneck, speaker-conditioned decoder)

Kept as written: ``model_vc.py`` (the layers, the xavier gains, the code down-sampling at ``i + freq - 1`` forward
and ``i`` backward, the up-sampling by ``expand``, the postnet residual, the outputs unsqueezed at dim 1), the
solver's loop body (batch fetched from the restarted iterator, ``G.train()``, identity mapping losses, the code
semantic loss from ``G(x_identic_psnt, emb_org, None)``, ``g_loss = g_loss_id + g_loss_id_psnt + lambda_cd *
g_loss_cd``, ``reset_grad``, backward, step), ``Adam(G.parameters(), 0.0001)``, ``Utterances.__getitem__``
(one random utterance of the speaker, padded or randomly cropped to ``len_crop`` with ``np.random``), the loader
(shuffled, ``drop_last``), lambda_cd 1, batch_size 2.

Deviations from the original:
- the loss lines compare ``x_real`` with the outputs squeezed at dim 1, the fix of the open pull request
  https://github.com/auspicious3000/autovc/pull/94 ("fix shape mismatch in loss calculation ... pytorch shows only
  warning but seriously hurts learning"): as written, ``F.mse_loss`` of the ``[B, T, 80]`` crops against the
  ``[B, 1, T, 80]`` outputs broadcasts to ``[B, B, T, 80]``; that line is the ``loss_broadcast_over_batch`` variant;
- VCTK, the spectrogram extraction and the GE2E speaker encoder are not here: 8 synthetic speakers made from
  ``seed``, each a spectral envelope (three Gaussian formants over the 80 bins), 6 utterances each of 70 to 140
  frames, each frame the envelope times the pattern of one of 12 "phones" held for 3 to 9 frames, plus noise,
  clipped to [0, 1] like ``make_spect.py``'s normalized log-mels; the speaker embeddings are one-hot, which the
  README asks for when not doing zero-shot conversion; the metadata is built in memory instead of ``train.pkl``
  and the dataset is loaded without the multiprocessing ``Manager``;
- sizes for 2 CPU cores: dim_emb 256 -> 8 (the one-hot width), dim_neck 16 -> 8, dim_pre 512 -> 64, freq 16 -> 8,
  len_crop 128 -> 64, the hardcoded widths 512 (encoder and postnet convs) -> 64 and 1024 (decoder LSTM) -> 128;
- CPU only (``flatten_parameters`` kept); the logging and tensorboard are dropped; there is no evaluation upstream;
- one ``train_step`` is one iteration of ``Solver.train``'s loop, returning ``g_loss``; the Program's batch is
  ``((x_real, emb_org, emb_org), x_real)`` for the first loader batch, its ``loss_fn`` the three loss terms;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

W_ENC = 64  # (port) the hardcoded 512 of Encoder and Postnet
W_LSTM2 = 128  # (port) the hardcoded 1024 of Decoder.lstm2


# model_vc.py
class LinearNorm(torch.nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, w_init_gain='linear'):
        super(LinearNorm, self).__init__()
        self.linear_layer = torch.nn.Linear(in_dim, out_dim, bias=bias)
        torch.nn.init.xavier_uniform_(
            self.linear_layer.weight,
            gain=torch.nn.init.calculate_gain(w_init_gain))

    def forward(self, x):
        return self.linear_layer(x)


class ConvNorm(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=1, stride=1,
                 padding=None, dilation=1, bias=True, w_init_gain='linear'):
        super(ConvNorm, self).__init__()
        if padding is None:
            assert(kernel_size % 2 == 1)
            padding = int(dilation * (kernel_size - 1) / 2)
        self.conv = torch.nn.Conv1d(in_channels, out_channels,
                                    kernel_size=kernel_size, stride=stride,
                                    padding=padding, dilation=dilation,
                                    bias=bias)
        torch.nn.init.xavier_uniform_(
            self.conv.weight, gain=torch.nn.init.calculate_gain(w_init_gain))

    def forward(self, signal):
        conv_signal = self.conv(signal)
        return conv_signal


class Encoder(nn.Module):
    """Encoder module:
    """
    def __init__(self, dim_neck, dim_emb, freq):
        super(Encoder, self).__init__()
        self.dim_neck = dim_neck
        self.freq = freq
        convolutions = []
        for i in range(3):
            conv_layer = nn.Sequential(
                ConvNorm(80+dim_emb if i==0 else W_ENC,
                         W_ENC,
                         kernel_size=5, stride=1,
                         padding=2,
                         dilation=1, w_init_gain='relu'),
                nn.BatchNorm1d(W_ENC))
            convolutions.append(conv_layer)
        self.convolutions = nn.ModuleList(convolutions)
        self.lstm = nn.LSTM(W_ENC, dim_neck, 2, batch_first=True, bidirectional=True)

    def forward(self, x, c_org):
        x = x.squeeze(1).transpose(2,1)
        c_org = c_org.unsqueeze(-1).expand(-1, -1, x.size(-1))
        x = torch.cat((x, c_org), dim=1)
        for conv in self.convolutions:
            x = F.relu(conv(x))
        x = x.transpose(1, 2)
        self.lstm.flatten_parameters()
        outputs, _ = self.lstm(x)
        out_forward = outputs[:, :, :self.dim_neck]
        out_backward = outputs[:, :, self.dim_neck:]
        codes = []
        for i in range(0, outputs.size(1), self.freq):
            codes.append(torch.cat((out_forward[:,i+self.freq-1,:],out_backward[:,i,:]), dim=-1))
        return codes


class Decoder(nn.Module):
    """Decoder module:
    """
    def __init__(self, dim_neck, dim_emb, dim_pre):
        super(Decoder, self).__init__()
        self.lstm1 = nn.LSTM(dim_neck*2+dim_emb, dim_pre, 1, batch_first=True)
        convolutions = []
        for i in range(3):
            conv_layer = nn.Sequential(
                ConvNorm(dim_pre,
                         dim_pre,
                         kernel_size=5, stride=1,
                         padding=2,
                         dilation=1, w_init_gain='relu'),
                nn.BatchNorm1d(dim_pre))
            convolutions.append(conv_layer)
        self.convolutions = nn.ModuleList(convolutions)
        self.lstm2 = nn.LSTM(dim_pre, W_LSTM2, 2, batch_first=True)
        self.linear_projection = LinearNorm(W_LSTM2, 80)

    def forward(self, x):

        #self.lstm1.flatten_parameters()
        x, _ = self.lstm1(x)
        x = x.transpose(1, 2)
        for conv in self.convolutions:
            x = F.relu(conv(x))
        x = x.transpose(1, 2)
        outputs, _ = self.lstm2(x)
        decoder_output = self.linear_projection(outputs)
        return decoder_output


class Postnet(nn.Module):
    """Postnet
        - Five 1-d convolution with 512 channels and kernel size 5
    """

    def __init__(self):
        super(Postnet, self).__init__()
        self.convolutions = nn.ModuleList()
        self.convolutions.append(
            nn.Sequential(
                ConvNorm(80, W_ENC,
                         kernel_size=5, stride=1,
                         padding=2,
                         dilation=1, w_init_gain='tanh'),
                nn.BatchNorm1d(W_ENC))
        )
        for i in range(1, 5 - 1):
            self.convolutions.append(
                nn.Sequential(
                    ConvNorm(W_ENC,
                             W_ENC,
                             kernel_size=5, stride=1,
                             padding=2,
                             dilation=1, w_init_gain='tanh'),
                    nn.BatchNorm1d(W_ENC))
            )
        self.convolutions.append(
            nn.Sequential(
                ConvNorm(W_ENC, 80,
                         kernel_size=5, stride=1,
                         padding=2,
                         dilation=1, w_init_gain='linear'),
                nn.BatchNorm1d(80))
            )

    def forward(self, x):
        for i in range(len(self.convolutions) - 1):
            x = torch.tanh(self.convolutions[i](x))
        x = self.convolutions[-1](x)
        return x


class Generator(nn.Module):
    """Generator network."""
    def __init__(self, dim_neck, dim_emb, dim_pre, freq):
        super(Generator, self).__init__()
        self.encoder = Encoder(dim_neck, dim_emb, freq)
        self.decoder = Decoder(dim_neck, dim_emb, dim_pre)
        self.postnet = Postnet()

    def forward(self, x, c_org, c_trg):

        codes = self.encoder(x, c_org)
        if c_trg is None:
            return torch.cat(codes, dim=-1)
        tmp = []
        for code in codes:
            tmp.append(code.unsqueeze(1).expand(-1,int(x.size(1)/len(codes)),-1))
        code_exp = torch.cat(tmp, dim=1)
        encoder_outputs = torch.cat((code_exp, c_trg.unsqueeze(1).expand(-1,x.size(1),-1)), dim=-1)
        mel_outputs = self.decoder(encoder_outputs)
        mel_outputs_postnet = self.postnet(mel_outputs.transpose(2,1))
        mel_outputs_postnet = mel_outputs + mel_outputs_postnet.transpose(2,1)
        mel_outputs = mel_outputs.unsqueeze(1)
        mel_outputs_postnet = mel_outputs_postnet.unsqueeze(1)
        return mel_outputs, mel_outputs_postnet, torch.cat(codes, dim=-1)


# data_loader.py
class Utterances(data.Dataset):
    """Dataset class for the Utterances dataset."""

    def __init__(self, meta, len_crop):  # (port) the metadata in memory, loaded without the Manager processes
        """Initialize and preprocess the Utterances dataset."""
        self.len_crop = len_crop
        self.train_dataset = list(meta)
        self.num_tokens = len(self.train_dataset)

    def __getitem__(self, index):
        # pick a random speaker
        dataset = self.train_dataset
        list_uttrs = dataset[index]
        emb_org = list_uttrs[1]

        # pick random uttr with random crop
        a = np.random.randint(2, len(list_uttrs))
        tmp = list_uttrs[a]
        if tmp.shape[0] < self.len_crop:
            len_pad = self.len_crop - tmp.shape[0]
            uttr = np.pad(tmp, ((0,len_pad),(0,0)), 'constant')
        elif tmp.shape[0] > self.len_crop:
            left = np.random.randint(tmp.shape[0]-self.len_crop)
            uttr = tmp[left:left+self.len_crop, :]
        else:
            uttr = tmp

        return uttr, emb_org

    def __len__(self):
        """Return the number of spkrs."""
        return self.num_tokens


def get_loader(meta, batch_size=16, len_crop=128, num_workers=0, generator=None):
    """Build and return a data loader."""

    dataset = Utterances(meta, len_crop)

    worker_init_fn = lambda x: np.random.seed((torch.initial_seed()) % (2**32))
    data_loader = data.DataLoader(dataset=dataset,
                                  batch_size=batch_size,
                                  shuffle=True,
                                  num_workers=num_workers,
                                  drop_last=True,
                                  worker_init_fn=worker_init_fn,
                                  generator=generator)
    return data_loader


def _metadata(rng, n_spk=8, n_uttr=6, n_phones=12):  # (port) the stand-in for make_spect.py + make_metadata.py
    bins = np.arange(80)[None, :]
    phones = rng.uniform(0.2, 1.0, size=(n_phones, 80))
    phones = np.stack([np.convolve(p, np.ones(7) / 7, mode='same') for p in phones])
    speakers = []
    for s in range(n_spk):
        centers = np.sort(rng.uniform(5, 75, size=3))[:, None]
        envelope = np.exp(-0.5 * ((bins - centers) / rng.uniform(4, 9, size=(3, 1))) ** 2).sum(0)
        envelope = 0.3 + 0.7 * envelope / envelope.max()
        utterances = ['p%03d' % (225 + s), np.eye(n_spk, dtype=np.float32)[s]]  # one-hot embedding (README)
        for _ in range(n_uttr):
            frames = []
            while len(frames) < rng.integers(70, 141):
                frames += [phones[rng.integers(n_phones)]] * int(rng.integers(3, 10))
            mel = envelope * np.stack(frames) + 0.03 * rng.standard_normal((len(frames), 80))
            utterances.append(np.clip(mel, 0, 1).astype(np.float32))
        speakers.append(utterances)
    return speakers


config = types.SimpleNamespace(  # (port) main.py's defaults, sizes as in the docstring
    lambda_cd=1, dim_neck=8, dim_emb=8, dim_pre=64, freq=8, batch_size=2, num_iters=1000000, len_crop=64,
    log_step=10)  # (port) dim_neck 16, dim_emb 256, dim_pre 512, freq 16, len_crop 128


def _g_loss(G, outputs, x_real, emb_org, bug=None):  # solver_encoder.py's identity mapping and code losses
    x_identic, x_identic_psnt, code_real = outputs
    if bug == "loss_broadcast_over_batch":  # as written upstream (PR #94)
        g_loss_id = F.mse_loss(x_real, x_identic)
        g_loss_id_psnt = F.mse_loss(x_real, x_identic_psnt)
    else:
        g_loss_id = F.mse_loss(x_real, x_identic.squeeze(1))
        g_loss_id_psnt = F.mse_loss(x_real, x_identic_psnt.squeeze(1))

    # Code semantic loss.
    code_reconst = G(x_identic_psnt, emb_org, None)
    g_loss_cd = F.l1_loss(code_real, code_reconst)
    return g_loss_id + g_loss_id_psnt + config.lambda_cd * g_loss_cd


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    meta = _metadata(np.random.default_rng(seed), n_spk=config.dim_emb)
    vcc_loader = get_loader(meta, config.batch_size, config.len_crop, generator=torch.Generator().manual_seed(seed))
    device = torch.device('cpu')

    G = Generator(config.dim_neck, config.dim_emb, config.dim_pre, config.freq)
    g_optimizer = torch.optim.Adam(G.parameters(), 0.0001)
    G.to(device)
    st = {"data_iter": iter(vcc_loader)}

    def train_step():
        # Fetch data.
        try:
            x_real, emb_org = next(st["data_iter"])
        except StopIteration:  # (port) the bare except of the original
            st["data_iter"] = iter(vcc_loader)
            x_real, emb_org = next(st["data_iter"])
        x_real = x_real.to(device)
        emb_org = emb_org.to(device)
        if bug == "embedding_of_another_speaker":
            emb_org = emb_org.roll(1, dims=0)

        G.train()
        # Identity mapping loss
        x_identic, x_identic_psnt, code_real = G(x_real, emb_org, emb_org)
        g_loss = _g_loss(G, (x_identic, x_identic_psnt, code_real), x_real, emb_org, bug)

        # Backward and optimize.
        if bug != "reset_grad_after_backward":
            g_optimizer.zero_grad()
        g_loss.backward()
        if bug == "reset_grad_after_backward":
            g_optimizer.zero_grad()
        g_optimizer.step()
        return g_loss.item()

    x0, e0 = next(iter(get_loader(meta, config.batch_size, config.len_crop,
                                  generator=torch.Generator().manual_seed(seed + 1))))
    if bug == "embedding_of_another_speaker":
        e0 = e0.roll(1, dims=0)

    def loss_fn(outputs, x_real):
        return _g_loss(G, outputs, x_real, e0, bug)

    return Program(name="autovc_voice_conversion", model=G, batch=((x0, e0, e0), x0), loss_fn=loss_fn,
                   optimizer=g_optimizer, train_step=train_step, loader=vcc_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the loss lines as written upstream (https://github.com/auspicious3000/autovc/pull/94): the [B, T, 80] crops
    # against the [B, 1, T, 80] outputs broadcast to [B, B, T, 80], every output pulled toward every crop of the
    # batch (torch only warns).
    Bug("loss_broadcast_over_batch", functools.partial(_build, bug="loss_broadcast_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the speaker embeddings misaligned with the crops of the batch (rolled by one), so the decoder is told
    # another speaker's identity than the one it must reconstruct.
    Bug("embedding_of_another_speaker", functools.partial(_build, bug="embedding_of_another_speaker"),
        "learning_ledger", ("TASK",)),
    # classic: reset_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("reset_grad_after_backward", functools.partial(_build, bug="reset_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
