# ruff: noqa: UP008, RUF046, RUF059
"""Awni Hannun's ``speech``: attention sequence-to-sequence speech recognition. Encoder: valid 2-D convolutions over
the log spectrogram (ReLU, dropout) and a bidirectional GRU, directions summed; decoder: a ``GRUCell`` fed the
previous label's embedding plus the previous context, scheduled sampling, location-aware MLP attention
(``NNAttention``, ``log_t``), a linear layer over every class but START. ``Seq2Seq.loss``: summed cross-entropy of
``y[:, 1:]`` (labels end-padded) over the batch size; ``train.py``: SGD, gradient norm clipped at 200, batches of
consecutive length-sorted utterances in random order (``BatchRandomSampler``).

Source: https://github.com/awni/speech
Commit: a5909a3e18c072150101aeaf9103e03b69e5b53b
Files: ``train.py``, ``speech/models/model.py``, ``speech/models/seq2seq.py``, ``speech/loader.py`` (in
``_awnispeech_loader.py``), ``examples/timit/seq2seq_config.json``
License: Apache-2.0 (full text in LICENSES/awni-speech.txt)
Domain: speech recognition (attention encoder-decoder on log spectrograms)

Kept as written: ``Model.encode``, ``Seq2Seq`` (``loss``, ``decode``, ``collate``, ``end_pad_concat``),
``NNAttention``, ``LinearND``, ``Preprocessor`` (mean/std from up to 100 shuffled utterances, END and START last),
``AudioDataset``'s buckets, ``BatchRandomSampler``, ``log_specgram`` (scipy, 20 ms Hann windows, 10 ms steps),
``run_epoch``'s loop body, ``eval_dev``'s ``set_eval``/``set_train``, the TIMIT config (SGD momentum 0, batch 8,
dropout 0.3, sample_prob 0.4, log_t).

Deviations from the original:
- TIMIT is not here: synthetic 8 kHz utterances made from ``seed``, 3-6 characters of a 6-letter alphabet, each a
  60-100 ms tone at its own frequency plus noise (a learnable rule); 160 training and 24 dev utterances given in
  memory (dicts with ``audio``, ``text``, ``duration``) instead of json lines naming wave files; the character set
  is sorted (a set's order varies per process);
- sizes for 2 CPU cores: convolutions ``[[4, 5, 8, 2], [4, 5, 8, 1]]`` (81 frequency bins at 8 kHz), GRU 32 x 2
  layers, embedding 32; lr 1e-3 -> 5e-2 (30 steps instead of 200 epochs: at 1e-3 the dev loss barely moves in
  200 steps);
- torch of today: ``clip_grad_norm_``, ``reduction="sum"``, ``loss.item()``; the ``.cuda()`` paths, ``volatile``
  flags (kept as attributes), tensorboard, tqdm, saving, the inference decoders and the CER are dropped;
  ``num_workers=0``; comments and docstrings of the copied code are dropped;
- one ``train_step`` is one batch of ``run_epoch``; ``eval_fn`` is ``eval_dev``'s mean dev loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _awnispeech_loader import SAMPLE_RATE, Preprocessor, make_loader

N_TRAIN, N_DEV, ALPHABET = 160, 24, "abcdef"
CONFIG = {  # examples/timit/seq2seq_config.json, sizes as in the docstring
    "optimizer": {"batch_size": 8, "epochs": 200, "learning_rate": 5e-2, "momentum": 0.0},
    "model": {"class": "Seq2Seq", "dropout": 0.3,
              "encoder": {"conv": [[4, 5, 8, 2], [4, 5, 8, 1]], "rnn": {"dim": 32, "bidirectional": True, "layers": 2}},
              "decoder": {"sample_prob": 0.4, "embedding_dim": 32, "log_t": True, "layers": 1}},
}


# speech/models/model.py
class Model(nn.Module):

    def __init__(self, input_dim, config):
        super().__init__()
        self.input_dim = input_dim
        encoder_cfg = config["encoder"]
        conv_cfg = encoder_cfg["conv"]
        convs = []
        in_c = 1
        for out_c, h, w, s in conv_cfg:
            conv = nn.Conv2d(in_c, out_c, (h, w), stride=(s, s), padding=0)
            convs.extend([conv, nn.ReLU()])
            if config["dropout"] != 0:
                convs.append(nn.Dropout(p=config["dropout"]))
            in_c = out_c
        self.conv = nn.Sequential(*convs)
        conv_out = out_c * self.conv_out_size(input_dim, 1)
        assert conv_out > 0, "Convolutional ouptut frequency dimension is negative."
        rnn_cfg = encoder_cfg["rnn"]
        self.rnn = nn.GRU(input_size=conv_out, hidden_size=rnn_cfg["dim"], num_layers=rnn_cfg["layers"],
                          batch_first=True, dropout=config["dropout"],
                          bidirectional=rnn_cfg["bidirectional"])
        self._encoder_dim = rnn_cfg["dim"]
        self.volatile = False

    def conv_out_size(self, n, dim):
        for c in self.conv.children():
            if type(c) == nn.Conv2d:
                k = c.kernel_size[dim]
                s = c.stride[dim]
                n = (n - k + 1) / s
                n = int(math.ceil(n))
        return n

    def encode(self, x):
        x = x.unsqueeze(1)
        x = self.conv(x)
        x = torch.transpose(x, 1, 2).contiguous()
        b, t, f, c = x.size()
        x = x.view((b, t, f * c))
        x, h = self.rnn(x)
        if self.rnn.bidirectional:
            half = x.size()[-1] // 2
            x = x[:, :, :half] + x[:, :, half:]
        return x

    @property
    def encoder_dim(self):
        return self._encoder_dim


class LinearND(nn.Module):

    def __init__(self, *args):
        super(LinearND, self).__init__()
        self.fc = nn.Linear(*args)

    def forward(self, x):
        size = x.size()
        n = int(np.prod(size[:-1]))
        out = x.contiguous().view(n, size[-1])
        out = self.fc(out)
        size = list(size)
        size[-1] = out.size()[-1]
        return out.view(size)


def zero_pad_concat(inputs):
    max_t = max(inp.shape[0] for inp in inputs)
    shape = (len(inputs), max_t, inputs[0].shape[1])
    input_mat = np.zeros(shape, dtype=np.float32)
    for e, inp in enumerate(inputs):
        input_mat[e, :inp.shape[0], :] = inp
    return input_mat


# speech/models/seq2seq.py (training and eval paths; the inference decoders are left out)
class Seq2Seq(Model):

    def __init__(self, freq_dim, vocab_size, config, bug=None):
        super().__init__(freq_dim, config)
        self.bug = bug
        decoder_cfg = config["decoder"]
        rnn_dim = self.encoder_dim
        embed_dim = decoder_cfg["embedding_dim"]
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.dec_rnn = nn.GRUCell(input_size=embed_dim, hidden_size=rnn_dim)
        self.attend = NNAttention(rnn_dim, log_t=decoder_cfg.get("log_t", False), bug=bug)
        self.sample_prob = decoder_cfg.get("sample_prob", 0)
        self.scheduled_sampling = (self.sample_prob != 0)
        # *NB* we predict vocab_size - 1 classes since we never need to predict the start of sequence token.
        self.fc = LinearND(rnn_dim, vocab_size - 1)

    def set_eval(self):
        self.eval()
        self.volatile = True
        self.scheduled_sampling = False

    def set_train(self):
        self.train()
        self.volatile = False
        self.scheduled_sampling = (self.sample_prob != 0)

    def loss(self, batch):
        x, y = self.collate(*batch)
        out, alis = self.forward_impl(x, y)
        batch_size, _, out_dim = out.size()
        out = out.view((-1, out_dim))
        y = y[:,1:].contiguous().view(-1)
        loss = nn.functional.cross_entropy(out, y, reduction="sum")
        loss = loss / batch_size
        return loss

    def forward_impl(self, x, y):
        x = self.encode(x)
        out, alis = self.decode(x, y)
        return out, alis

    def forward(self, batch):
        x, y = self.collate(*batch)
        return self.forward_impl(x, y)[0]

    def decode(self, x, y):

        if self.bug == "decoder_fed_targets":
            inputs = self.embedding(y[:, 1:])
        else:
            inputs = self.embedding(y[:, :-1])
        out = []; aligns = []
        hx = torch.zeros((x.shape[0], x.shape[2]), requires_grad=False)
        ax = None; sx = None;
        for t in range(y.size()[1] - 1):
            sample = (out and self.scheduled_sampling)
            if sample and random.random() < self.sample_prob:
                ix = torch.max(out[-1], dim=2)[1]
                ix = self.embedding(ix)
            else:
                ix = inputs[:, t:t+1, :]
            if sx is not None:
                ix = ix + sx
            hx = self.dec_rnn(ix.squeeze(dim=1), hx)
            ox = hx.unsqueeze(dim=1)
            sx, ax = self.attend(x, ox, ax)
            aligns.append(ax)
            out.append(self.fc(ox + sx))
        out = torch.cat(out, dim=1)
        aligns = torch.stack(aligns, dim=1)
        return out, aligns

    def collate(self, inputs, labels):
        inputs = zero_pad_concat(inputs)
        labels = end_pad_concat(labels)
        inputs = torch.from_numpy(inputs)
        labels = torch.from_numpy(labels)
        return inputs, labels


def end_pad_concat(labels):
    batch_size = len(labels)
    end_tok = labels[0][-1]
    max_len = max(len(l) for l in labels)
    cat_labels = np.full((batch_size, max_len), fill_value=end_tok, dtype=np.int64)
    for e, l in enumerate(labels):
        cat_labels[e, :len(l)] = l
    return cat_labels


class NNAttention(nn.Module):

    def __init__(self, n_channels, kernel_size=15, log_t=False, bug=None):
        super(NNAttention, self).__init__()
        assert kernel_size % 2 == 1, "Kernel size should be odd for 'same' conv."
        padding = (kernel_size - 1) // 2
        self.conv = nn.Conv1d(1, n_channels, kernel_size, padding=padding)
        self.nn = nn.Sequential(nn.ReLU(), LinearND(n_channels, 1))
        self.log_t = log_t
        self.bug = bug

    def forward(self, eh, dhx, ax=None):
        pax = eh + dhx
        if ax is not None:
            ax = ax.unsqueeze(dim=1)
            ax = self.conv(ax).transpose(1, 2)
            pax = pax + ax
        pax = self.nn(pax)
        pax = pax.squeeze(dim=2)
        if self.log_t:
            log_t = math.log(pax.size()[1])
            pax = log_t * pax
        ax = nn.functional.softmax(pax, dim=0 if self.bug == "attention_softmax_over_batch" else 1)
        sx = ax.unsqueeze(2)
        sx = torch.sum(eh * sx, dim=1, keepdim=True)
        return sx, ax


def _synthetic_utterances(seed, n):
    """(port) 3-6 characters, each a 60-100 ms tone at its own frequency, plus noise, at 8 kHz."""
    rng = np.random.RandomState(seed)
    freqs = {c: 300.0 + 450.0 * i for i, c in enumerate(ALPHABET)}
    data = []
    for _ in range(n):
        text = "".join(rng.choice(list(ALPHABET), size=rng.randint(3, 7)))
        parts = []
        for c in text:
            t = np.arange(int(SAMPLE_RATE * rng.uniform(0.06, 0.1))) / SAMPLE_RATE
            parts.append(np.sin(2 * np.pi * freqs[c] * t + rng.uniform(0, 2 * np.pi)))
        audio = np.concatenate(parts) + 0.05 * rng.randn(sum(len(p) for p in parts))
        data.append({"audio": audio.astype(np.float32), "text": text, "duration": len(audio) / SAMPLE_RATE})
    return data


def eval_dev(model, ldr):
    """train.py's eval_dev, returning the mean dev loss (no CER, no inference)."""
    losses = []
    model.set_eval()
    with torch.no_grad():
        for batch in ldr:
            loss = model.loss(batch)
            losses.append(loss.item())
    model.set_train()
    return sum(losses) / len(losses)


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    opt_cfg, model_cfg = CONFIG["optimizer"], CONFIG["model"]
    data = _synthetic_utterances(seed, N_TRAIN + N_DEV)
    batch_size = opt_cfg["batch_size"]
    preproc = Preprocessor(data[:N_TRAIN], start_and_end=True)
    train_ldr = make_loader(data[:N_TRAIN], preproc, batch_size)
    dev_ldr = make_loader(data[N_TRAIN:], preproc, batch_size)
    model = Seq2Seq(preproc.input_dim, preproc.vocab_size, model_cfg, bug=bug)
    optimizer = torch.optim.SGD(model.parameters(), lr=opt_cfg["learning_rate"], momentum=opt_cfg["momentum"])
    st = {"it": None}

    def train_step():  # one batch of run_epoch
        if st["it"] is None:
            st["it"] = iter(train_ldr)
        try:
            batch = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_ldr)
            batch = next(st["it"])
        optimizer.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 200)
        loss = loss.item()
        optimizer.step()
        return loss

    first = [train_ldr.dataset[i] for i in range(batch_size)]
    x, y = model.collate([f[0] for f in first], [f[1] for f in first])
    batch = ((x, y), y[:, 1:])

    def loss_fn(out, targets):
        return nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), targets.reshape(-1),
                                           reduction="sum") / out.size(0)

    return Program(name="awnispeech_seq2seq", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=lambda m, _b=None: eval_dev(m, dev_ldr), loader=train_ldr)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic teacher-forcing slip: the decoder is fed ``y[:, 1:]`` (the labels it must predict) instead of
    # ``y[:, :-1]``, so each step sees its own target (scheduled sampling hides it only part of the time).
    Bug("decoder_fed_targets", functools.partial(_build, bug="decoder_fed_targets"), "learning_ledger", ("TASK",)),
    # classic wrong axis: NNAttention's softmax over dim 0 (the batch) instead of 1 (encoder time), so each
    # utterance's context mixes in the other utterances of the batch.
    Bug("attention_softmax_over_batch", functools.partial(_build, bug="attention_softmax_over_batch"),
        "learning_ledger", ("DEPENDENCY",)),
]
