# ruff: noqa: UP004, UP008, UP031, PLR0402, RUF059, F841  (the original's style is kept as written)
"""Contrastive Predictive Coding on raw audio (van den Oord et al., 2018), the ``CDCK2`` model of
jefflai108/Contrastive-Predictive-Coding-PyTorch trained as ``main.py`` does: a strided conv encoder (five
Conv1d + BatchNorm + ReLU, down-sampling 160) turns each raw waveform window into frames ``z``, a GRU summarizes
the frames up to a random time ``t`` into a context ``c_t``, one linear map per future step ``k`` predicts
``z_{t+k}`` from ``c_t``, and the InfoNCE loss takes the log-softmax of the batch-by-batch score matrix of every step
(the other windows of the batch are the negatives) and averages its diagonal; Adam (amsgrad, weight decay) under
the ``ScheduledOptim`` warm-up / inverse-square-root learning rate updated after every step.

Source: https://github.com/jefflai108/Contrastive-Predictive-Coding-PyTorch
Commit: a9dab4e759aaa68dce1b1ada46a8035076ba3296
Files: ``main.py`` (``ScheduledOptim``, ``main``), ``src/model/model.py`` (``CDCK2``), ``src/training_v1.py``
(``train``), ``src/validation_v1.py`` (``validation``), ``src/data_reader/dataset.py`` (``RawDataset``), ``run.sh``
License: MIT (Copyright (c) 2019 Jeff Lai; full text in LICENSES/jefflai108-Contrastive-Predictive-Coding-PyTorch.txt)
Domain: speech, self-supervised representation learning (CPC / InfoNCE on raw waveforms)

Kept as written: ``CDCK2`` (the encoder's kernels, strides and paddings, the kaiming ``fan_out`` inits of the
linear, conv and GRU weights, the one random ``t_samples`` per batch, ``encode_samples`` and ``pred`` filled into
``torch.empty`` buffers, ``nn.Softmax()`` / ``nn.LogSoftmax()`` with their implicit dim, the accuracy of the last
step, ``nce /= -1.*batch*self.timestep``), ``ScheduledOptim`` (d_model 128, ``update_learning_rate`` after each
step, ``increase_delta``), the Adam settings (betas 0.9/0.98, eps 1e-9, weight decay 1e-4, amsgrad, default lr for
the first step), ``train``'s loop body (``model.train()``, the channel dimension added, ``zero_grad``, a fresh hidden
state per batch, backward, step, lr update), ``validation`` (eval mode, no_grad, accuracy and loss weighted by batch
length), ``RawDataset.__getitem__`` (a random ``audio_window`` from each utterance with ``np.random``), the loaders
(train shuffled, validation not), main.py's ``n_warmup_steps`` default 50 (run.sh passes 1000).

Deviations from the original:
- LibriSpeech's HDF5 files are not here (no h5py): 96 training and 32 validation synthetic utterances made from
  ``seed``, 4800 samples each: a sum of three sinusoids whose frequencies drift slowly, amplitude-modulated, plus
  noise, so that the future frames of a window are predictable from its past and tell windows apart; they are held
  in a dict by id instead of an ``h5py.File``, with the same length sanity check;
- sizes for 2 CPU cores: audio_window 20480 -> 3200 (20 frames after the encoder), timestep 12 -> 6, the encoder's
  512 channels -> 64, the GRU's 256 units -> 32 (the ``512`` / ``256`` written in ``forward`` and
  ``init_hidden`` follow), batch_size 64 -> 16;
- CPU only: ``init_hidden`` is called with ``use_gpu=False``; ``torch.randint`` gets ``int(self.seq_len/160 -
  self.timestep)`` (current torch refuses the float bound);
- logging, snapshots and the epoch loop's model selection are dropped; one ``train_step`` is one iteration of
  ``train``'s loop (a new shuffled epoch when it runs out), returning the loss; ``eval_fn`` is ``validation``'s
  accuracy on the validation utterances; the Program's batch is the first training batch with ``loss_fn`` taking
  the NCE the model returns, its optimizer the Adam inside ``ScheduledOptim``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

C_ENC = 64  # (port) 512
H_GRU = 32  # (port) 256


# main.py
class ScheduledOptim(object):
    """A simple wrapper class for learning rate scheduling"""

    def __init__(self, optimizer, n_warmup_steps):
        self.optimizer = optimizer
        self.d_model = 128
        self.n_warmup_steps = n_warmup_steps
        self.n_current_steps = 0
        self.delta = 1

    def state_dict(self):
        self.optimizer.state_dict()

    def step(self):
        """Step by the inner optimizer"""
        self.optimizer.step()

    def zero_grad(self):
        """Zero out the gradients by the inner optimizer"""
        self.optimizer.zero_grad()

    def increase_delta(self):
        self.delta *= 2

    def update_learning_rate(self):
        """Learning rate scheduling per step"""

        self.n_current_steps += self.delta
        new_lr = np.power(self.d_model, -0.5) * np.min([
            np.power(self.n_current_steps, -0.5),
            np.power(self.n_warmup_steps, -1.5) * self.n_current_steps])

        for param_group in self.optimizer.param_groups:
            param_group['lr'] = new_lr
        return new_lr


# src/model/model.py
class CDCK2(nn.Module):
    def __init__(self, timestep, batch_size, seq_len):

        super(CDCK2, self).__init__()

        self.batch_size = batch_size
        self.seq_len = seq_len
        self.timestep = timestep
        self.encoder = nn.Sequential( # downsampling factor = 160
            nn.Conv1d(1, C_ENC, kernel_size=10, stride=5, padding=3, bias=False),
            nn.BatchNorm1d(C_ENC),
            nn.ReLU(inplace=True),
            nn.Conv1d(C_ENC, C_ENC, kernel_size=8, stride=4, padding=2, bias=False),
            nn.BatchNorm1d(C_ENC),
            nn.ReLU(inplace=True),
            nn.Conv1d(C_ENC, C_ENC, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm1d(C_ENC),
            nn.ReLU(inplace=True),
            nn.Conv1d(C_ENC, C_ENC, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm1d(C_ENC),
            nn.ReLU(inplace=True),
            nn.Conv1d(C_ENC, C_ENC, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm1d(C_ENC),
            nn.ReLU(inplace=True)
        )
        self.gru = nn.GRU(C_ENC, H_GRU, num_layers=1, bidirectional=False, batch_first=True)
        self.Wk  = nn.ModuleList([nn.Linear(H_GRU, C_ENC) for i in range(timestep)])
        self.softmax  = nn.Softmax()
        self.lsoftmax = nn.LogSoftmax()

        def _weights_init(m):
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm1d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # initialize gru
        for layer_p in self.gru._all_weights:
            for p in layer_p:
                if 'weight' in p:
                    nn.init.kaiming_normal_(self.gru.__getattr__(p), mode='fan_out', nonlinearity='relu')

        self.apply(_weights_init)

    def init_hidden(self, batch_size, use_gpu=True):
        if use_gpu: return torch.zeros(1, batch_size, H_GRU).cuda()
        else: return torch.zeros(1, batch_size, H_GRU)

    def forward(self, x, hidden):
        batch = x.size()[0]
        t_samples = torch.randint(int(self.seq_len/160-self.timestep), size=(1,)).long() # randomly pick time stamps
        # input sequence is N*C*L, e.g. 8*1*20480
        z = self.encoder(x)
        # encoded sequence is N*C*L, e.g. 8*512*128
        # reshape to N*L*C for GRU, e.g. 8*128*512
        z = z.transpose(1,2)
        nce = 0 # average over timestep and batch
        encode_samples = torch.empty((self.timestep,batch,C_ENC)).float() # e.g. size 12*8*512
        for i in np.arange(1, self.timestep+1):
            encode_samples[i-1] = z[:,t_samples+i,:].view(batch,C_ENC) # z_tk e.g. size 8*512
        if getattr(self, "bug", None) == "context_sees_future":
            forward_seq = z[:,:t_samples+self.timestep+1,:]
        else:
            forward_seq = z[:,:t_samples+1,:] # e.g. size 8*100*512
        output, hidden = self.gru(forward_seq, hidden) # output size e.g. 8*100*256
        if getattr(self, "bug", None) == "context_sees_future":
            c_t = output[:,-1,:].view(batch, H_GRU)
        else:
            c_t = output[:,t_samples,:].view(batch, H_GRU) # c_t e.g. size 8*256
        pred = torch.empty((self.timestep,batch,C_ENC)).float() # e.g. size 12*8*512
        for i in np.arange(0, self.timestep):
            linear = self.Wk[i]
            pred[i] = linear(c_t) # Wk*c_t e.g. size 8*512
        for i in np.arange(0, self.timestep):
            total = torch.mm(encode_samples[i], torch.transpose(pred[i],0,1)) # e.g. size 8*8
            correct = torch.sum(torch.eq(torch.argmax(self.softmax(total), dim=0), torch.arange(0, batch))) # correct is a tensor
            nce += torch.sum(torch.diag(self.lsoftmax(total))) # nce is a tensor
        if getattr(self, "bug", None) == "nce_sign_flipped":
            nce /= 1.*batch*self.timestep
        else:
            nce /= -1.*batch*self.timestep
        accuracy = 1.*correct.item()/batch

        return accuracy, nce, hidden


# src/data_reader/dataset.py
class RawDataset(data.Dataset):
    def __init__(self, raw, list_file, audio_window):  # (port) a dict of arrays and a list of ids, no h5py
        """ raw_file: train-clean-100.h5
            list_file: list/training.txt
            audio_window: 20480
        """
        self.audio_window = audio_window
        self.utts = []

        temp = [x.strip() for x in list_file]

        self.h5f = raw
        for i in temp: # sanity check
            utt_len = self.h5f[i].shape[0]
            if utt_len > audio_window:  # (port) 20480, the window of the original
                self.utts.append(i)

    def __len__(self):
        """Denotes the total number of utterances
        """
        return len(self.utts)

    def __getitem__(self, index):
        utt_id = self.utts[index] # get the utterance id
        utt_len = self.h5f[utt_id].shape[0] # get the number of data points in the utterance
        index = np.random.randint(utt_len - self.audio_window + 1) # get the index to read part of the utterance into memory

        return self.h5f[utt_id][index:index+self.audio_window]


def _utterances(rng, n, prefix, length=4800):  # (port) the stand-in for the LibriSpeech HDF5 files
    raw = {}
    t = np.arange(length) / 16000.0
    for k in range(n):
        wave = np.zeros(length)
        for _ in range(3):
            f0, drift = rng.uniform(60, 2000), rng.uniform(-200, 200)
            phase = 2 * np.pi * (f0 * t + 0.5 * drift * t ** 2) + rng.uniform(0, 2 * np.pi)
            wave += rng.uniform(0.2, 1.0) * np.sin(phase)
        wave *= 1 + 0.5 * np.sin(2 * np.pi * rng.uniform(1, 4) * t)
        raw['%s-%03d' % (prefix, k)] = (0.3 * wave + 0.05 * rng.standard_normal(length)).astype(np.float32)
    return raw


class args:  # (port) main.py's defaults and run.sh, sizes as in the docstring
    epochs = 60
    n_warmup_steps = 50
    batch_size = 16  # (port) 64
    audio_window = 3200  # (port) 20480
    timestep = 6  # (port) 12
    log_interval = 10


def validation(args, model, device, data_loader, batch_size):  # src/validation_v1.py
    model.eval()
    total_loss = 0
    total_acc  = 0

    with torch.no_grad():
        for data in data_loader:
            data = data.float().unsqueeze(1).to(device) # add channel dimension
            hidden = model.init_hidden(len(data), use_gpu=False)  # (port) use_gpu=True
            acc, loss, hidden = model(data, hidden)
            total_loss += len(data) * loss
            total_acc  += len(data) * acc

    total_loss /= len(data_loader.dataset) # average loss
    total_acc  /= len(data_loader.dataset) # average acc

    return total_acc, total_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    train_raw, val_raw = _utterances(rng, 96, 'train'), _utterances(rng, 32, 'val')
    device = torch.device("cpu")
    model = CDCK2(args.timestep, args.batch_size, args.audio_window).to(device)
    model.bug = bug
    training_set   = RawDataset(train_raw, list(train_raw), args.audio_window)
    validation_set = RawDataset(val_raw, list(val_raw), args.audio_window)
    train_loader = data.DataLoader(training_set, batch_size=args.batch_size, shuffle=True,
                                   generator=torch.Generator().manual_seed(seed)) # set shuffle to True
    validation_loader = data.DataLoader(validation_set, batch_size=args.batch_size, shuffle=False) # set shuffle to False
    # nanxin optimizer
    optimizer = ScheduledOptim(
        optim.Adam(
            filter(lambda p: p.requires_grad, model.parameters()),
            betas=(0.9, 0.98), eps=1e-09, weight_decay=1e-4, amsgrad=True),
        args.n_warmup_steps)
    st = {"it": iter(train_loader)}

    def train_step():  # src/training_v1.py: train's loop body
        model.train()
        try:
            data = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            data = next(st["it"])
        data = data.float().unsqueeze(1).to(device) # add channel dimension
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        hidden = model.init_hidden(len(data), use_gpu=False)  # (port) use_gpu=True
        acc, loss, hidden = model(data, hidden)

        loss.backward()
        optimizer.step()
        lr = optimizer.update_learning_rate()
        return loss.item()

    def eval_fn(m, _batch=None):
        was = m.training
        acc, _loss = validation(args, m, device, validation_loader, args.batch_size)
        m.train(was)
        return float(acc)

    first = torch.from_numpy(np.stack([training_set[i] for i in range(args.batch_size)])).float().unsqueeze(1)
    return Program(name="cpcaudio_cdck2", model=model,
                   batch=((first, model.init_hidden(args.batch_size, use_gpu=False)), None),
                   loss_fn=lambda outputs, _targets: outputs[1], optimizer=optimizer.optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the normalization's sign flipped (nce /= +batch * timestep), so the step ascends the InfoNCE loss
    # and pushes every prediction away from its own future frame.
    Bug("nce_sign_flipped", functools.partial(_build, bug="nce_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the GRU run over the frames up to t + timestep and c_t read at its last output, so the context has
    # already seen the future frames it is asked to predict.
    Bug("context_sees_future", functools.partial(_build, bug="context_sees_future"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: optimizer.zero_grad() left out of the loop: gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
