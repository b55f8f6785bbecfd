"""Performance RNN (Simon & Oore, 2017), djosix's PyTorch implementation: MIDI performances as event sequences
(88 note-on, 88 note-off, 32 velocity, 32 time-shift events), per-event controls (pitch-class histogram and
note-density one-hot over a 4-beat window), a 3-layer GRU stepped one event at a time from an initial hidden state
made from a random ``init`` vector (``inithid_fc``, tanh), each step's input the embedded event concatenated with a
"no control" flag and the control (``concat_input_fc``, leaky ReLU), the logits read from all layers' hidden states;
trained with full teacher forcing through ``model.generate(..., output_type='logit')``, ``CrossEntropyLoss`` over
every position, ``clip_grad_norm_(1.0)``, Adam lr 1e-3.

Source: https://github.com/djosix/Performance-RNN-PyTorch
Commit: b47e6d3e5504c88394b0414e7ac175959369d3da
Files: train.py, model.py, config.py, data.py (Dataset.batches), sequence.py (Event, EventSeq, ControlSeq,
  Control), preprocess.py, utils.py (compute_gradient_norm)
License: MIT (Copyright (c) 2018 Yuankui Lee; full text in LICENSES/djosix-Performance-RNN-PyTorch.txt)
Domain: symbolic music, event-based performance language model with conditioning controls

Deviations from the original:
- data: the MIDI collections (pretty_midi, ``preprocess.py``) are replaced by synthetic monophonic melodies made
  from ``seed``: a random key, scale-step walks (up or down one or two scale degrees), note lengths of a quarter or
  an eighth at 120 bpm, one velocity per piece; each melody goes through ``preprocess_midi``'s path as written
  (``adjust_time`` to start at 0, ``EventSeq.from_note_seq``, ``ControlSeq.from_event_seq``,
  ``to_array``/``to_compressed_array``) and ``Dataset`` keeps them as ``torch.load`` would give them
  (``recover_compressed_array``); ``NoteSeq`` and pretty_midi's ``Note`` are reduced to what these functions read;
- sizes for 2 CPU cores (config.py): hidden_dim 512 -> 32, init_dim 32 -> 8 (gru_layers 3, gru_dropout 0.3 and the
  event and control vocabularies kept), batch_size 64 -> 8, window_size 200 -> 20 (stride_size 10 kept);
  learning_rate 1e-3 -> 3e-3 so that the 30 steps of the self-check show the loss falling;
- CPU only (``config.device`` is the CPU); ``Variable``, the progress bars, prints, session saving and
  tensorboard dropped; ``beam_search`` (generation only) left out; ``np.random`` (the batches' permutation and
  ``generate``'s greedy/teacher-forcing draws) and ``torch`` are seeded from ``seed``;
- one ``train_step`` is one iteration of train.py's loop (``control_ratio`` 1.0 and ``teacher_forcing_ratio`` 1.0,
  no transposition, as in config.py); the Program's model is the ``PerformanceRNN`` whose ``forward`` is one event
  step, its batch one such step (the primary event, the first control, the initial hidden state from ``init``;
  event-major ``[1, B]`` tensors, so ``batch_axis=1``) with the window's first event as the target;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP032, PLR0402, B006, SIM102

from __future__ import annotations

import collections
import copy
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch import optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device('cpu')  # config.py (port: CPU)


# ---- sequence.py -------------------------------------------------------------------------------------------------

DEFAULT_VELOCITY = 64
DEFAULT_PITCH_RANGE = range(21, 109)
DEFAULT_VELOCITY_RANGE = range(21, 109)

USE_VELOCITY = True
BEAT_LENGTH = 60 / 120  # 60 / DEFAULT_TEMPO
DEFAULT_TIME_SHIFT_BINS = 1.15 ** np.arange(32) / 65
DEFAULT_VELOCITY_STEPS = 32

DEFAULT_WINDOW_SIZE = BEAT_LENGTH * 4
DEFAULT_NOTE_DENSITY_BINS = np.arange(12) * 3 + 1


class Note:
    """(port) pretty_midi.Note: velocity, pitch, start, end."""

    def __init__(self, velocity, pitch, start, end):
        self.velocity, self.pitch, self.start, self.end = velocity, pitch, start, end


class NoteSeq:
    """(port) the part of NoteSeq that preprocess_midi uses."""

    def __init__(self, notes=[]):
        self.notes = sorted(copy.deepcopy(notes), key=lambda note: note.start)

    def adjust_time(self, offset):
        for note in self.notes:
            note.start += offset
            note.end += offset


class Event:

    def __init__(self, type, time, value):
        self.type = type
        self.time = time
        self.value = value

    def __repr__(self):
        return 'Event(type={}, time={}, value={})'.format(
            self.type, self.time, self.value)


class EventSeq:

    pitch_range = DEFAULT_PITCH_RANGE
    velocity_range = DEFAULT_VELOCITY_RANGE
    velocity_steps = DEFAULT_VELOCITY_STEPS
    time_shift_bins = DEFAULT_TIME_SHIFT_BINS

    @staticmethod
    def from_note_seq(note_seq):
        note_events = []

        if USE_VELOCITY:
            velocity_bins = EventSeq.get_velocity_bins()

        for note in note_seq.notes:
            if note.pitch in EventSeq.pitch_range:
                if USE_VELOCITY:
                    velocity = note.velocity
                    velocity = max(velocity, EventSeq.velocity_range.start)
                    velocity = min(velocity, EventSeq.velocity_range.stop - 1)
                    velocity_index = np.searchsorted(velocity_bins, velocity)
                    note_events.append(Event('velocity', note.start, velocity_index))

                pitch_index = note.pitch - EventSeq.pitch_range.start
                note_events.append(Event('note_on', note.start, pitch_index))
                note_events.append(Event('note_off', note.end, pitch_index))

        note_events.sort(key=lambda event: event.time)  # stable
        events = []

        for i, event in enumerate(note_events):
            events.append(event)

            if event is note_events[-1]:
                break

            interval = note_events[i + 1].time - event.time
            shift = 0

            while interval - shift >= EventSeq.time_shift_bins[0]:
                index = np.searchsorted(EventSeq.time_shift_bins,
                                        interval - shift, side='right') - 1
                events.append(Event('time_shift', event.time + shift, index))
                shift += EventSeq.time_shift_bins[index]

        return EventSeq(events)

    @staticmethod
    def dim():
        return sum(EventSeq.feat_dims().values())

    @staticmethod
    def feat_dims():
        feat_dims = collections.OrderedDict()
        feat_dims['note_on'] = len(EventSeq.pitch_range)
        feat_dims['note_off'] = len(EventSeq.pitch_range)
        if USE_VELOCITY:
            feat_dims['velocity'] = EventSeq.velocity_steps
        feat_dims['time_shift'] = len(EventSeq.time_shift_bins)
        return feat_dims

    @staticmethod
    def feat_ranges():
        offset = 0
        feat_ranges = collections.OrderedDict()
        for feat_name, feat_dim in EventSeq.feat_dims().items():
            feat_ranges[feat_name] = range(offset, offset + feat_dim)
            offset += feat_dim
        return feat_ranges

    @staticmethod
    def get_velocity_bins():
        n = EventSeq.velocity_range.stop - EventSeq.velocity_range.start
        return np.arange(EventSeq.velocity_range.start,
                         EventSeq.velocity_range.stop,
                         n / (EventSeq.velocity_steps - 1))

    def __init__(self, events=[]):
        for event in events:
            assert isinstance(event, Event)

        self.events = copy.deepcopy(events)

        # compute event times again
        time = 0
        for event in self.events:
            event.time = time
            if event.type == 'time_shift':
                time += EventSeq.time_shift_bins[event.value]

    def to_array(self):
        feat_idxs = EventSeq.feat_ranges()
        idxs = [feat_idxs[event.type][event.value] for event in self.events]
        dtype = np.uint8 if EventSeq.dim() <= 256 else np.uint16
        return np.array(idxs, dtype=dtype)


class Control:

    def __init__(self, pitch_histogram, note_density):
        self.pitch_histogram = pitch_histogram  # list
        self.note_density = note_density  # int


class ControlSeq:

    note_density_bins = DEFAULT_NOTE_DENSITY_BINS
    window_size = DEFAULT_WINDOW_SIZE

    @staticmethod
    def from_event_seq(event_seq):
        events = list(event_seq.events)
        start, end = 0, 0

        pitch_count = np.zeros([12])
        note_count = 0

        controls = []

        def _rel_pitch(pitch):
            return (pitch - 24) % 12

        for i, event in enumerate(events):

            while start < i:
                if events[start].type == 'note_on':
                    abs_pitch = events[start].value + EventSeq.pitch_range.start
                    rel_pitch = _rel_pitch(abs_pitch)
                    pitch_count[rel_pitch] -= 1.
                    note_count -= 1.
                start += 1

            while end < len(events):
                if events[end].time - event.time > ControlSeq.window_size:
                    break
                if events[end].type == 'note_on':
                    abs_pitch = events[end].value + EventSeq.pitch_range.start
                    rel_pitch = _rel_pitch(abs_pitch)
                    pitch_count[rel_pitch] += 1.
                    note_count += 1.
                end += 1

            pitch_histogram = (
                pitch_count / note_count
                if note_count
                else np.ones([12]) / 12
            ).tolist()

            note_density = max(np.searchsorted(
                ControlSeq.note_density_bins,
                note_count, side='right') - 1, 0)

            controls.append(Control(pitch_histogram, note_density))

        return ControlSeq(controls)

    @staticmethod
    def dim():
        return sum(ControlSeq.feat_dims().values())

    @staticmethod
    def feat_dims():
        note_density_dim = len(ControlSeq.note_density_bins)
        return collections.OrderedDict([
            ('pitch_histogram', 12),
            ('note_density', note_density_dim)
        ])

    @staticmethod
    def recover_compressed_array(array):
        feat_dims = ControlSeq.feat_dims()
        assert array.shape[1] == 1 + feat_dims['pitch_histogram']
        ndens = np.zeros([array.shape[0], feat_dims['note_density']])
        ndens[np.arange(array.shape[0]), array[:, 0]] = 1.  # [steps, dens_dim]
        phist = array[:, 1:].astype(np.float64) / 255  # [steps, hist_dim]
        return np.concatenate([ndens, phist], 1)  # [steps, dens_dim + hist_dim]

    def __init__(self, controls):
        for control in controls:
            assert isinstance(control, Control)
        self.controls = copy.deepcopy(controls)

    def to_compressed_array(self):
        ndens = [control.note_density for control in self.controls]
        ndens = np.array(ndens, dtype=np.uint8).reshape(-1, 1)
        phist = [control.pitch_histogram for control in self.controls]
        phist = (np.array(phist) * 255).astype(np.uint8)
        return np.concatenate([
            ndens,  # [steps, 1] density index
            phist  # [steps, hist_dim] 0-255
        ], 1)  # [steps, hist_dim + 1]


# ---- model.py ----------------------------------------------------------------------------------------------------

class PerformanceRNN(nn.Module):
    def __init__(self, event_dim, control_dim, init_dim, hidden_dim,
                 gru_layers=3, gru_dropout=0.3):
        super().__init__()

        self.event_dim = event_dim
        self.control_dim = control_dim
        self.init_dim = init_dim
        self.hidden_dim = hidden_dim
        self.gru_layers = gru_layers
        self.concat_dim = event_dim + 1 + control_dim
        self.input_dim = hidden_dim
        self.output_dim = event_dim

        self.primary_event = self.event_dim - 1

        self.inithid_fc = nn.Linear(init_dim, gru_layers * hidden_dim)
        self.inithid_fc_activation = nn.Tanh()

        self.event_embedding = nn.Embedding(event_dim, event_dim)
        self.concat_input_fc = nn.Linear(self.concat_dim, self.input_dim)
        self.concat_input_fc_activation = nn.LeakyReLU(0.1, inplace=True)

        self.gru = nn.GRU(self.input_dim, self.hidden_dim,
                          num_layers=gru_layers, dropout=gru_dropout)
        self.output_fc = nn.Linear(hidden_dim * gru_layers, self.output_dim)
        self.output_fc_activation = nn.Softmax(dim=-1)

        self._initialize_weights()

    def _initialize_weights(self):
        nn.init.xavier_normal_(self.event_embedding.weight)
        nn.init.xavier_normal_(self.inithid_fc.weight)
        self.inithid_fc.bias.data.fill_(0.)
        nn.init.xavier_normal_(self.concat_input_fc.weight)
        nn.init.xavier_normal_(self.output_fc.weight)
        self.output_fc.bias.data.fill_(0.)

    def _sample_event(self, output, greedy=True, temperature=1.0):
        if greedy:
            return output.argmax(-1)
        else:
            output = output / temperature
            probs = self.output_fc_activation(output)
            return torch.distributions.Categorical(probs).sample()

    def forward(self, event, control=None, hidden=None):
        # One step forward

        assert len(event.shape) == 2
        assert event.shape[0] == 1
        batch_size = event.shape[1]
        event = self.event_embedding(event)

        if control is None:
            default = torch.ones(1, batch_size, 1).to(device)
            control = torch.zeros(1, batch_size, self.control_dim).to(device)
        else:
            default = torch.zeros(1, batch_size, 1).to(device)
            assert control.shape == (1, batch_size, self.control_dim)

        concat = torch.cat([event, default, control], -1)
        input = self.concat_input_fc(concat)
        input = self.concat_input_fc_activation(input)

        _, hidden = self.gru(input, hidden)
        output = hidden.permute(1, 0, 2).contiguous()
        output = output.view(batch_size, -1).unsqueeze(0)
        output = self.output_fc(output)
        return output, hidden

    def get_primary_event(self, batch_size):
        return torch.LongTensor([[self.primary_event] * batch_size]).to(device)

    def init_to_hidden(self, init):
        # [batch_size, init_dim]
        batch_size = init.shape[0]
        out = self.inithid_fc(init)
        out = self.inithid_fc_activation(out)
        out = out.view(self.gru_layers, batch_size, self.hidden_dim)
        return out

    def expand_controls(self, controls, steps):
        # [1 or steps, batch_size, control_dim]
        assert len(controls.shape) == 3
        assert controls.shape[2] == self.control_dim
        if controls.shape[0] > 1:
            assert controls.shape[0] >= steps
            return controls[:steps]
        return controls.repeat(steps, 1, 1)

    def generate(self, init, steps, events=None, controls=None, greedy=1.0,
                 temperature=1.0, teacher_forcing_ratio=1.0, output_type='index', verbose=False):
        # init [batch_size, init_dim]
        # events [steps, batch_size] indeces
        # controls [1 or steps, batch_size, control_dim]

        batch_size = init.shape[0]
        assert init.shape[1] == self.init_dim
        assert steps > 0

        use_teacher_forcing = events is not None
        if use_teacher_forcing:
            assert len(events.shape) == 2
            assert events.shape[0] >= steps - 1
            events = events[:steps-1]

        event = self.get_primary_event(batch_size)
        use_control = controls is not None
        if use_control:
            controls = self.expand_controls(controls, steps)
        hidden = self.init_to_hidden(init)

        outputs = []
        step_iter = range(steps)

        for step in step_iter:
            control = controls[step].unsqueeze(0) if use_control else None
            output, hidden = self.forward(event, control, hidden)

            use_greedy = np.random.random() < greedy
            event = self._sample_event(output, greedy=use_greedy,
                                       temperature=temperature)

            if output_type == 'index':
                outputs.append(event)
            elif output_type == 'softmax':
                outputs.append(self.output_fc_activation(output))
            elif output_type == 'logit':
                outputs.append(output)
            else:
                assert False

            if use_teacher_forcing and step < steps - 1: # avoid last one
                if np.random.random() <= teacher_forcing_ratio:
                    event = events[step].unsqueeze(0)

        return torch.cat(outputs, 0)


# ---- utils.py, data.py -------------------------------------------------------------------------------------------

def compute_gradient_norm(parameters, norm_type=2):
    total_norm = 0
    for p in parameters:
        param_norm = p.grad.data.norm(norm_type)
        total_norm += param_norm ** norm_type
    total_norm = total_norm ** (1. / norm_type)
    return total_norm


class Dataset:
    def __init__(self, processed):
        # (port) the (eventseq, compressed controlseq) pairs that preprocess.py saves and torch.load reads back
        self.samples = []
        self.seqlens = []
        for eventseq, controlseq in processed:
            controlseq = ControlSeq.recover_compressed_array(controlseq)
            assert len(eventseq) == len(controlseq)
            self.samples.append((eventseq, controlseq))
            self.seqlens.append(len(eventseq))
        self.avglen = np.mean(self.seqlens)

    def batches(self, batch_size, window_size, stride_size):
        indeces = [(i, range(j, j + window_size))
                   for i, seqlen in enumerate(self.seqlens)
                   for j in range(0, seqlen - window_size, stride_size)]
        while True:
            eventseq_batch = []
            controlseq_batch = []
            n = 0
            for ii in np.random.permutation(len(indeces)):
                i, r = indeces[ii]
                eventseq, controlseq = self.samples[i]
                eventseq = eventseq[r.start:r.stop]
                controlseq = controlseq[r.start:r.stop]
                eventseq_batch.append(eventseq)
                controlseq_batch.append(controlseq)
                n += 1
                if n == batch_size:
                    yield (np.stack(eventseq_batch, axis=1),
                           np.stack(controlseq_batch, axis=1))
                    eventseq_batch.clear()
                    controlseq_batch.clear()
                    n = 0


# ---- (port) synthetic melodies through preprocess.py's path ------------------------------------------------------

MAJOR = (0, 2, 4, 5, 7, 9, 11)


def synthetic_note_seq(rng, n_notes):
    """A monophonic scale-step melody in a random key: each note one or two scale degrees above or below the last,
    a quarter or an eighth note long at 120 bpm, one velocity for the piece."""
    tonic = 48 + int(rng.integers(12))
    degree = int(rng.integers(7, 14))
    velocity = int(rng.integers(50, 100))
    notes, t = [], float(rng.uniform(0.0, 0.5))
    for _ in range(n_notes):
        degree = int(np.clip(degree + rng.choice([-2, -1, 1, 2]), 0, 20))
        pitch = tonic + 12 * (degree // 7) + MAJOR[degree % 7]
        length = BEAT_LENGTH if rng.random() < 0.5 else BEAT_LENGTH / 2
        notes.append(Note(velocity, pitch, t, t + length))
        t += length
    return NoteSeq(notes)


def preprocess_midi(note_seq):
    note_seq.adjust_time(-note_seq.notes[0].start)
    event_seq = EventSeq.from_note_seq(note_seq)
    control_seq = ControlSeq.from_event_seq(event_seq)
    return event_seq.to_array(), control_seq.to_compressed_array()


# ---- train.py ----------------------------------------------------------------------------------------------------

MODEL_CONFIG = {
    'init_dim': 8,  # (port) 32
    'event_dim': EventSeq.dim(),
    'control_dim': ControlSeq.dim(),
    'hidden_dim': 32,  # (port) 512
    'gru_layers': 3,
    'gru_dropout': 0.3,
}
TRAIN_CONFIG = {
    'learning_rate': 0.003,  # (port) 0.001
    'batch_size': 8,  # (port) 64
    'window_size': 20,  # (port) 200
    'stride_size': 10,
    'use_transposition': False,
    'control_ratio': 1.0,
    'teacher_forcing_ratio': 1.0
}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)

    learning_rate = TRAIN_CONFIG['learning_rate']
    batch_size = TRAIN_CONFIG['batch_size']
    window_size = TRAIN_CONFIG['window_size']
    stride_size = TRAIN_CONFIG['stride_size']
    control_ratio = TRAIN_CONFIG['control_ratio']
    teacher_forcing_ratio = TRAIN_CONFIG['teacher_forcing_ratio']
    event_dim = EventSeq.dim()

    model = PerformanceRNN(**MODEL_CONFIG).to(device)
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)

    dataset = Dataset([preprocess_midi(synthetic_note_seq(rng, int(rng.integers(16, 28)))) for _ in range(24)])
    loss_function = nn.CrossEntropyLoss()
    batch_gen = dataset.batches(batch_size, window_size, stride_size)

    def train_step():
        events, controls = next(batch_gen)

        events = torch.LongTensor(events.astype(np.int64)).to(device)
        assert events.shape[0] == window_size

        if np.random.random() < control_ratio:
            controls = torch.FloatTensor(controls).to(device)
            assert controls.shape[0] == window_size
        else:
            controls = None

        init = torch.randn(batch_size, model.init_dim).to(device)
        if bug == "teacher_forcing_not_shifted":
            # (bug) the window fed from its second event: each step is given the event it must predict
            outputs = model.generate(init, window_size, events=events[1:], controls=controls,
                                     teacher_forcing_ratio=teacher_forcing_ratio, output_type='logit')
        elif bug == "loss_on_softmax":
            # (bug) generate's softmax output handed to CrossEntropyLoss, which applies its own log-softmax
            outputs = model.generate(init, window_size, events=events[:-1], controls=controls,
                                     teacher_forcing_ratio=teacher_forcing_ratio, output_type='softmax')
        else:
            outputs = model.generate(init, window_size, events=events[:-1], controls=controls,
                                     teacher_forcing_ratio=teacher_forcing_ratio, output_type='logit')
        assert outputs.shape[:2] == events.shape[:2]

        loss = loss_function(outputs.view(-1, event_dim), events.view(-1))
        if bug != "zero_grad_dropped":
            model.zero_grad()
        loss.backward()

        norm = compute_gradient_norm(model.parameters())  # noqa: F841  (logged to tensorboard in the original)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)

        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, target):
        output, _hidden = outputs
        if bug == "loss_on_softmax":
            output = model.output_fc_activation(output)
        return loss_function(output.view(-1, event_dim), target.view(-1))

    # one event step of the loop: the primary event, the window's first control, the initial hidden state
    ev0, ctl0 = next(dataset.batches(batch_size, window_size, stride_size))
    with torch.no_grad():
        hidden0 = model.init_to_hidden(torch.randn(batch_size, model.init_dim))
    batch = ((model.get_primary_event(batch_size), torch.FloatTensor(ctl0[:1]), hidden0),
             torch.LongTensor(ev0[:1].astype(np.int64)))
    return Program(name="performancernn_events", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # train.py passing events[1:] for events[:-1] (classic off-by-one of teacher forcing): after predicting event t
    # the model is fed event t + 1, the very event it must predict next.
    Bug("teacher_forcing_not_shifted", functools.partial(_build, bug="teacher_forcing_not_shifted"),
        "learning_ledger", ("TASK",)),
    # generate(..., output_type='softmax') into CrossEntropyLoss (classic double softmax): the loss is taken on
    # probabilities, not logits.
    Bug("loss_on_softmax", functools.partial(_build, bug="loss_on_softmax"), "learning_ledger", ("OBJECTIVE",)),
    # model.zero_grad() left out of the loop (classic): the gradients accumulate over the iterations (the clipping
    # to norm 1.0 hides their growth).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
