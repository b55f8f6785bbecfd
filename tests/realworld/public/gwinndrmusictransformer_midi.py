"""Music Transformer (Huang et al.), Damon Gwinn's reproduction on the Maestro e-piano performance events: a
decoder-only Transformer made of ``nn.Transformer``'s encoder stack under a causal ``src_mask`` and a ``DummyDecoder``
that returns the encoder output; token embedding, sinusoidal positional encoding with dropout, a linear head over
the 390-token performance vocabulary (note-on / note-off / time-shift / velocity, END, PAD); next-event
cross-entropy ignoring PAD, Adam (0.9, 0.98, eps 1e-8) under the inverse-square-root warm-up schedule of "Attention
Is All You Need" through ``LambdaLR``, stepped every batch.

Source: https://github.com/gwinndr/MusicTransformer-Pytorch
Commit: 7161590fe306578ad02d851e74e1141bd39004af
Files: train.py, model/music_transformer.py, model/positional_encoding.py, utilities/run_model.py
(``train_epoch``, ``eval_model``), utilities/lr_scheduling.py (``LrStepTracker``), utilities/constants.py,
utilities/argument_funcs.py, dataset/e_piano.py (``EPianoDataset``, ``process_midi``, ``compute_epiano_accuracy``)
License: MIT (Copyright (c) 2020 Damon Gwinn, Ben Myrick, Ryan Marshall; full text in
LICENSES/gwinndr-MusicTransformer-Pytorch.txt)
Domain: symbolic music, performance-event language modelling (MIDI event tokens, next-event prediction)

Kept as written: ``MusicTransformer`` (the non-RPR branch, train.py's default: ``--rpr`` is off), ``DummyDecoder``,
``PositionalEncoding``, ``LrStepTracker`` and ``get_lr``, the constants (``ADAM_BETA_1/2``, ``ADAM_EPSILON`` 10e-9,
``LR_DEFAULT_START`` 1.0, ``TOKEN_END`` / ``TOKEN_PAD`` / ``VOCAB_SIZE`` from midi-neural-processor's ranges 128 + 128
+ 32 + 100), ``process_midi`` (a random window of ``max_seq + 1`` events, ``x = data[:max_seq]``, ``tgt =
data[1:full_seq]``, PAD / END for short pieces), ``EPianoDataset.__getitem__``, train.py's setup (``CrossEntropyLoss
(ignore_index=TOKEN_PAD)`` since ``ce_smoothing`` is None by default, ``Adam(lr=LR_DEFAULT_START, betas, eps)``,
``LambdaLR(opt, lr_stepper.step)``), ``train_epoch``'s loop body (zero_grad, ``model(x)``, reshape to ``(B * T, V)``,
flatten the targets, loss, backward, step, scheduler step), ``eval_model`` and ``compute_epiano_accuracy``.

Deviations from the original:
- the Maestro MIDI files and their preprocessing (``preprocess_midi.py`` through the midi-neural-processor
  submodule) are not here: the "pickled" event lists are synthetic piano performances made from ``seed`` (each piece
  a key and an arpeggio pattern of intervals, every note a velocity event, a note-on, a time shift and its note-off,
  with occasional chords), held in memory instead of read with ``pickle`` from files; 48 training and 12 test pieces.
- sizes for 2 CPU cores: ``max_sequence`` 2048 -> 64, ``n_layers`` 6 -> 2, ``num_heads`` 8 -> 4, ``d_model`` 512 ->
  64, ``dim_feedforward`` 1024 -> 128, ``batch_size`` 2 -> 8, ``SCHEDULER_WARMUP_STEPS`` 4000 -> 100 (so that the
  30 steps of the self-check reach a learning rate that moves the model); no DataLoader workers, shuffling with a
  ``torch.Generator(seed)`` and the window picked by ``random`` seeded from ``seed``.
- ``DummyDecoder.forward`` takes ``**kwargs``: today's ``nn.Transformer.forward`` also passes ``tgt_is_causal`` and
  ``memory_is_causal`` to its decoder (the original's signature predates them); ``get_device()`` is the CPU.
- ``train_epoch`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the loader restarts when it
  runs out), returning the loss; the prints, tensorboard, the CSV of results and the weight files are dropped.
  ``eval_fn`` is ``eval_model``'s accuracy on the test loader.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, F841

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- utilities/constants.py (the ranges of third_party/midi_processor/processor.py) ------------------------------
RANGE_NOTE_ON = 128
RANGE_NOTE_OFF = 128
RANGE_VEL = 32
RANGE_TIME_SHIFT = 100

ADAM_BETA_1             = 0.9
ADAM_BETA_2             = 0.98
ADAM_EPSILON            = 10e-9
LR_DEFAULT_START        = 1.0
SCHEDULER_WARMUP_STEPS  = 100  # (port) 4000

TOKEN_END               = RANGE_NOTE_ON + RANGE_NOTE_OFF + RANGE_VEL + RANGE_TIME_SHIFT
TOKEN_PAD               = TOKEN_END + 1
VOCAB_SIZE              = TOKEN_PAD + 1
TORCH_FLOAT             = torch.float32
TORCH_LABEL_TYPE        = torch.long
SEQUENCE_START = 0

MAX_SEQUENCE = 64  # (port) 2048
BATCH_SIZE = 8  # (port) 2


def get_device():
    return torch.device("cpu")


# ---- model/positional_encoding.py --------------------------------------------------------------------------------
class PositionalEncoding(nn.Module):

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


# ---- model/music_transformer.py ----------------------------------------------------------------------------------
class MusicTransformer(nn.Module):
    def __init__(self, n_layers=6, num_heads=8, d_model=512, dim_feedforward=1024,
                 dropout=0.1, max_sequence=2048, rpr=False):
        super(MusicTransformer, self).__init__()

        self.dummy      = DummyDecoder()

        self.nlayers    = n_layers
        self.nhead      = num_heads
        self.d_model    = d_model
        self.d_ff       = dim_feedforward
        self.dropout    = dropout
        self.max_seq    = max_sequence
        self.rpr        = rpr

        # Input embedding
        self.embedding = nn.Embedding(VOCAB_SIZE, self.d_model)

        # Positional encoding
        self.positional_encoding = PositionalEncoding(self.d_model, self.dropout, self.max_seq)

        # Base transformer
        assert not self.rpr  # (port) the RPR branch (model/rpr.py) is not copied: train.py's default is rpr=False
        # To make a decoder-only transformer we need to use masked encoder layers
        # Dummy decoder to essentially just return the encoder output
        self.transformer = nn.Transformer(
            d_model=self.d_model, nhead=self.nhead, num_encoder_layers=self.nlayers,
            num_decoder_layers=0, dropout=self.dropout, # activation=self.ff_activ,
            dim_feedforward=self.d_ff, custom_decoder=self.dummy
        )

        # Final output is a softmaxed linear layer
        self.Wout       = nn.Linear(self.d_model, VOCAB_SIZE)
        self.softmax    = nn.Softmax(dim=-1)

    # forward
    def forward(self, x, mask=True):
        if(mask is True):
            mask = self.transformer.generate_square_subsequent_mask(x.shape[1]).to(get_device())
        else:
            mask = None

        x = self.embedding(x)

        # Input shape is (max_seq, batch_size, d_model)
        x = x.permute(1,0,2)

        x = self.positional_encoding(x)

        # Since there are no true decoder layers, the tgt is unused
        # Pytorch wants src and tgt to have some equal dims however
        x_out = self.transformer(src=x, tgt=x, src_mask=mask)

        # Back to (batch_size, max_seq, d_model)
        x_out = x_out.permute(1,0,2)

        y = self.Wout(x_out)
        # y = self.softmax(y)

        del mask

        # They are trained to predict the next note in sequence (we don't need the last one)
        return y


class DummyDecoder(nn.Module):
    def __init__(self):
        super(DummyDecoder, self).__init__()

    def forward(self, tgt, memory, tgt_mask, memory_mask,tgt_key_padding_mask,memory_key_padding_mask, **kwargs):
        return memory


# ---- utilities/lr_scheduling.py ----------------------------------------------------------------------------------
class LrStepTracker:

    def __init__(self, model_dim=512, warmup_steps=4000, init_steps=0):
        # Store Values
        self.warmup_steps = warmup_steps
        self.model_dim = model_dim
        self.init_steps = init_steps

        # Begin Calculations
        self.invsqrt_dim = (1 / math.sqrt(model_dim))
        self.invsqrt_warmup = (1 / (warmup_steps * math.sqrt(warmup_steps)))

    # step
    def step(self, step):
        step += self.init_steps
        if(step <= self.warmup_steps):
            return self.invsqrt_dim * self.invsqrt_warmup * step
        else:
            invsqrt_step = (1 / math.sqrt(step))
            return self.invsqrt_dim * invsqrt_step


def get_lr(optimizer):
    for param_group in optimizer.param_groups:
        return param_group['lr']


# ---- dataset/e_piano.py ------------------------------------------------------------------------------------------
class EPianoDataset(Dataset):
    def __init__(self, pieces, max_seq=2048, random_seq=True, bug=None):
        self.pieces         = pieces  # (port) the pickled event lists, in memory
        self.max_seq        = max_seq
        self.random_seq     = random_seq
        self.bug            = bug

    def __len__(self):
        return len(self.pieces)

    def __getitem__(self, idx):
        raw_mid     = torch.tensor(self.pieces[idx], dtype=TORCH_LABEL_TYPE, device=torch.device("cpu"))

        x, tgt = process_midi(raw_mid, self.max_seq, self.random_seq, bug=self.bug)

        return x, tgt


def process_midi(raw_mid, max_seq, random_seq, bug=None):
    x   = torch.full((max_seq, ), TOKEN_PAD, dtype=TORCH_LABEL_TYPE, device=torch.device("cpu"))
    tgt = torch.full((max_seq, ), TOKEN_PAD, dtype=TORCH_LABEL_TYPE, device=torch.device("cpu"))

    raw_len     = len(raw_mid)
    full_seq    = max_seq + 1 # Performing seq2seq

    if(raw_len == 0):
        return x, tgt

    if(raw_len < full_seq):
        x[:raw_len]         = raw_mid
        tgt[:raw_len-1]     = raw_mid[1:]
        tgt[raw_len-1]      = TOKEN_END
    else:
        # Randomly selecting a range
        if(random_seq):
            end_range = raw_len - full_seq
            start = random.randint(SEQUENCE_START, end_range)

        # Always taking from the start to as far as we can
        else:
            start = SEQUENCE_START

        end = start + full_seq

        data = raw_mid[start:end]

        x = data[:max_seq]
        if bug == "targets_not_shifted":
            tgt = data[:max_seq]
        else:
            tgt = data[1:full_seq]

    return x, tgt


def compute_epiano_accuracy(out, tgt):
    softmax = nn.Softmax(dim=-1)
    out = torch.argmax(softmax(out), dim=-1)

    out = out.flatten()
    tgt = tgt.flatten()

    mask = (tgt != TOKEN_PAD)

    out = out[mask]
    tgt = tgt[mask]

    # Empty
    if(len(tgt) == 0):
        return 1.0

    num_right = (out == tgt)
    num_right = torch.sum(num_right).type(TORCH_FLOAT)

    acc = num_right / len(tgt)

    return acc


# ---- (port) synthetic performances ---------------------------------------------------------------------------------
def synthetic_piece(rng, n_notes):
    """Event ids as midi-neural-processor writes them: note_on 0-127, note_off 128-255, time_shift 256-355,
    velocity 356-387."""
    root = int(rng.integers(48, 60))
    pattern = [int(v) for v in rng.choice([2, 3, 4, 5, 7], size=int(rng.integers(2, 5)))]
    vel = int(rng.integers(12, 28))
    shift = int(rng.integers(8, 40))
    events, pitch = [], root
    for k in range(n_notes):
        pitch = root + (pitch - root + pattern[k % len(pattern)]) % 24
        chord = [pitch, pitch + 7] if rng.random() < 0.15 else [pitch]
        events.append(RANGE_NOTE_ON + RANGE_NOTE_OFF + RANGE_TIME_SHIFT + vel)
        events += [p for p in chord]
        events.append(RANGE_NOTE_ON + RANGE_NOTE_OFF + shift - 1)
        events += [RANGE_NOTE_ON + p for p in chord]
    return events


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    train_dataset = EPianoDataset([synthetic_piece(rng, 40) for _ in range(48)], MAX_SEQUENCE, True, bug=bug)
    test_dataset = EPianoDataset([synthetic_piece(rng, 40) for _ in range(12)], MAX_SEQUENCE, True)
    train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE, num_workers=0, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(test_dataset, batch_size=BATCH_SIZE, num_workers=0)

    model = MusicTransformer(n_layers=2, num_heads=4,
                             d_model=64, dim_feedforward=128, dropout=0.1,
                             max_sequence=MAX_SEQUENCE, rpr=False).to(get_device())  # (port) 6, 8, 512, 1024

    ##### Lr Scheduler vs static lr #####
    init_step = 0
    lr = LR_DEFAULT_START
    lr_stepper = LrStepTracker(64, SCHEDULER_WARMUP_STEPS, init_step)

    ##### Not smoothing evaluation loss #####
    eval_loss_func = nn.CrossEntropyLoss(ignore_index=TOKEN_PAD)
    train_loss_func = eval_loss_func

    ##### Optimizer #####
    opt = Adam(model.parameters(), lr=lr, betas=(ADAM_BETA_1, ADAM_BETA_2), eps=ADAM_EPSILON)
    lr_scheduler = LambdaLR(opt, lr_stepper.step)

    st = {"it": None}

    def next_batch():
        batch = next(st["it"], None) if st["it"] is not None else None
        if batch is None:
            model.train()
            st["it"] = iter(train_loader)
            batch = next(st["it"])
        return batch

    def train_step():
        batch = next_batch()
        loss = train_loss_func
        if bug != "zero_grad_dropped":
            opt.zero_grad()

        x   = batch[0].to(get_device())
        tgt = batch[1].to(get_device())

        if bug == "causal_mask_dropped":
            y = model(x, mask=False)
        else:
            y = model(x)

        y   = y.reshape(y.shape[0] * y.shape[1], -1)
        tgt = tgt.flatten()

        out = loss.forward(y, tgt)

        out.backward()
        opt.step()

        if(lr_scheduler is not None):
            lr_scheduler.step()
        return float(out)

    def eval_model(model, _batch=None):
        was_training = model.training
        model.eval()
        loss = eval_loss_func
        with torch.set_grad_enabled(False):
            n_test      = len(test_loader)
            sum_loss   = 0.0
            sum_acc    = 0.0
            for batch in test_loader:
                x   = batch[0].to(get_device())
                tgt = batch[1].to(get_device())

                y = model(x)

                sum_acc += float(compute_epiano_accuracy(y, tgt))

                y   = y.reshape(y.shape[0] * y.shape[1], -1)
                tgt = tgt.flatten()

                out = loss.forward(y, tgt)

                sum_loss += float(out)

            avg_loss    = sum_loss / n_test
            avg_acc     = sum_acc / n_test
        model.train(was_training)
        return avg_acc

    def loss_fn(y, tgt):
        return train_loss_func(y.reshape(y.shape[0] * y.shape[1], -1), tgt.flatten())

    batch = next(iter(DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="gwinndrmusictransformer_midi", model=model, batch=(batch[0], batch[1]), loss_fn=loss_fn,
                   optimizer=opt, train_step=train_step, eval_fn=eval_model, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # model(x, mask=False) in the training loop (classic: the causal src_mask left off a decoder-only stack): each
    # position attends to the events it must predict.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # process_midi's target the same window as the input (classic: tgt = data[:max_seq] for data[1:full_seq]): the
    # model learns to copy the current event.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # opt.zero_grad() left out of train_epoch (classic): the gradients of every batch pile up.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
