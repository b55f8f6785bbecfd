# ruff: noqa: PLR0402, UP008, RUF059, RUF012
"""Music Transformer (relative global attention with the skewing trick) on MIDI performance events, from
jason9693's MusicTransformer-pytorch.

Source: https://github.com/jason9693/MusicTransformer-pytorch
Commit: fe296678c99030adb073768112b54ee6cebef907
Files: ``train.py``, ``model.py``, ``custom/layers.py``, ``custom/criterion.py``, ``custom/metrics.py``,
``custom/config.py``, ``data.py``, ``utils.py``, ``config/base.yml``, ``config/train.yml``
License: MIT (Copyright (c) 2019 Kichang-Yang; full text in LICENSES/jason9693-MusicTransformer-pytorch.txt)
Domain: music generation, symbolic (a decoder-only transformer over 388 MIDI performance events + pad/sos/eos)

Kept as written: ``MusicTransformer`` (``Encoder``: embedding scaled by ``sqrt(d_model)``, the sinusoid
``DynamicPositionEmbedding``, dropout, ``EncoderLayer``s of ``RelativeGlobalAttention`` (``h = d_model // 64``
heads, the relative embedding ``E`` a plain ``torch.randn`` tensor as written, ``_qe_masking`` and ``_skewing``,
the mask added as ``-1e9``) with post-LayerNorm residuals and a ``d_model // 2`` ReLU feed-forward; a linear layer
to the vocabulary; in training mode it returns the logits), ``utils.get_masked_with_pad_tensor`` (look-ahead mask
or-ed with the pad positions), ``SmoothCrossEntropyLoss`` (label smoothing 0.1, pad ignored) as the metric set's
``loss``, ``Adam(lr=0, betas=(0.9, 0.98), eps=1e-9)`` driven by ``CustomSchedule`` (the Noam rate set on every
step before ``optimizer.step()``), ``train.py``'s loop body (``scheduler.optimizer.zero_grad()``, a
``slide_seq2seq_batch`` (``x = data[:, :-1]``, ``y = data[:, 1:]`` of random crops of ``max_seq + 1`` events from
random files), ``mt.train()``, forward, loss, backward, ``scheduler.step()``) and its evaluation (``eval()``, a
batch of 2 from the eval files, the loss of the metric set); ``config``'s vocabulary (pad = 388, vocab 391);
``Data``'s 0.8 / 0.1 / 0.1 file split.

Deviations from the original:
- the preprocessed MAESTRO pickles are not here: the "files" are event sequences made from ``seed`` in the
  performance encoding's layout (note-on 0-127, note-off 128-255, time-shift 256-355, velocity 356-387): short
  melodic phrases on a per-file scale and tempo, each note a velocity, note-on, time-shift, note-off; 40 files of
  about 400 events; Python's ``random`` is seeded with ``seed``. Files are lists in memory (``_get_seq`` slices
  them instead of unpickling).
- sizes for 2 CPU cores: ``max_seq`` 2048 -> 32, ``embedding_dim`` 256 -> 64 (so one head), ``num_layers``
  6 -> 2; ``batch_size`` 8 kept; dropout 0.1 kept.
- ``CustomSchedule``'s ``warmup_steps`` 4000 -> 100: at 4000 the rate after 30 steps is ~1e-5 and the self-check
  could not show learning; the schedule's formula is unchanged.
- one ``train_step`` is one iteration of the inner loop; the tensorboard writer, prints, checkpoints, attention
  images, multi-GPU switches and ``torch.cuda.empty_cache()`` are dropped; ``eval_fn`` is the evaluation's loss on
  a fixed eval batch; ``generate`` is not ported.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import math as m
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.modules.loss import _Loss

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# config/base.yml, config/train.yml, custom/config.py (sizes: see the docstring)
EVENT_DIM = 388
PAD_TOKEN = EVENT_DIM
VOCAB_SIZE = EVENT_DIM + 3
MAX_SEQ = 32  # (port) 2048
EMBEDDING_DIM = 64  # (port) 256
NUM_LAYERS = 2  # (port) 6
BATCH_SIZE = 8
DROPOUT = 0.1
LABEL_SMOOTH = 0.1
WARMUP_STEPS = 100  # (port) CustomSchedule's default 4000


# utils.py
def sequence_mask(length, max_length=None):
    """Tensorflow의 sequence_mask를 구현"""
    if max_length is None:
        max_length = length.max()
    x = torch.arange(max_length, dtype=length.dtype, device=length.device)
    return x.unsqueeze(0) < length.unsqueeze(1)


def get_masked_with_pad_tensor(size, src, trg, pad_token):
    src = src[:, None, None, :]
    trg = trg[:, None, None, :]
    src_pad_tensor = torch.ones_like(src).to(src.device.type) * pad_token
    src_mask = torch.equal(src, src_pad_tensor)
    trg_mask = torch.equal(src, src_pad_tensor)
    if trg is not None:
        trg_pad_tensor = torch.ones_like(trg).to(trg.device.type) * pad_token
        dec_trg_mask = trg == trg_pad_tensor
        # boolean reversing i.e) True * -1 + 1 = False
        seq_mask = ~sequence_mask(torch.arange(1, size+1).to(trg.device), size)
        # look_ahead_mask = torch.max(dec_trg_mask, seq_mask)
        look_ahead_mask = dec_trg_mask | seq_mask

    else:
        trg_mask = None
        look_ahead_mask = None

    return src_mask, trg_mask, look_ahead_mask


# custom/layers.py
class DynamicPositionEmbedding(torch.nn.Module):
    def __init__(self, embedding_dim, max_seq=2048):
        super().__init__()
        embed_sinusoid_list = np.array([[
            [
                m.sin(
                    pos * m.exp(-m.log(10000) * i/embedding_dim) *
                    m.exp(m.log(10000)/embedding_dim * (i % 2)) + 0.5 * m.pi * (i % 2)
                )
                for i in range(embedding_dim)
            ]
            for pos in range(max_seq)
        ]])
        self.positional_embedding = embed_sinusoid_list

    def forward(self, x):
        x = x + torch.from_numpy(self.positional_embedding[:, :x.size(1), :]).to(x.device, dtype=x.dtype)
        return x


class RelativeGlobalAttention(torch.nn.Module):
    """
    from Music Transformer ( Huang et al, 2018 )
    [paper link](https://arxiv.org/pdf/1809.04281.pdf)
    """
    def __init__(self, h=4, d=256, add_emb=False, max_seq=2048, **kwargs):
        super().__init__()
        self.len_k = None
        self.max_seq = max_seq
        self.E = None
        self.h = h
        self.d = d
        self.dh = d // h
        self.Wq = torch.nn.Linear(self.d, self.d)
        self.Wk = torch.nn.Linear(self.d, self.d)
        self.Wv = torch.nn.Linear(self.d, self.d)
        self.fc = torch.nn.Linear(d, d)
        self.additional = add_emb
        self.E = torch.randn([self.max_seq, int(self.dh)], requires_grad=False)
        if self.additional:
            self.Radd = None

    def forward(self, inputs, mask=None, **kwargs):
        q = inputs[0]
        q = self.Wq(q)
        q = torch.reshape(q, (q.size(0), q.size(1), self.h, -1))
        q = q.permute(0, 2, 1, 3)  # batch, h, seq, dh

        k = inputs[1]
        k = self.Wk(k)
        k = torch.reshape(k, (k.size(0), k.size(1), self.h, -1))
        k = k.permute(0, 2, 1, 3)

        v = inputs[2]
        v = self.Wv(v)
        v = torch.reshape(v, (v.size(0), v.size(1), self.h, -1))
        v = v.permute(0, 2, 1, 3)

        self.len_k = k.size(2)
        self.len_q = q.size(2)

        E = self._get_left_embedding(self.len_q, self.len_k).to(q.device)
        QE = torch.einsum('bhld,md->bhlm', [q, E])
        QE = self._qe_masking(QE)
        Srel = self._skewing(QE)

        Kt = k.permute(0, 1, 3, 2)
        QKt = torch.matmul(q, Kt)
        logits = QKt + Srel
        logits = logits / math.sqrt(self.dh)

        if mask is not None:
            logits += (mask.to(torch.int64) * -1e9).to(logits.dtype)

        attention_weights = F.softmax(logits, -1)
        attention = torch.matmul(attention_weights, v)

        out = attention.permute(0, 2, 1, 3)
        out = torch.reshape(out, (out.size(0), -1, self.d))

        out = self.fc(out)
        return out, attention_weights

    def _get_left_embedding(self, len_q, len_k):
        starting_point = max(0,self.max_seq-len_q)
        e = self.E[starting_point:,:]
        return e

    def _skewing(self, tensor: torch.Tensor):
        padded = F.pad(tensor, [1, 0, 0, 0, 0, 0, 0, 0])
        reshaped = torch.reshape(padded, shape=[padded.size(0), padded.size(1), padded.size(-1), padded.size(-2)])
        Srel = reshaped[:, :, 1:, :]
        if self.len_k > self.len_q:
            Srel = F.pad(Srel, [0, 0, 0, 0, 0, 0, 0, self.len_k-self.len_q])
        elif self.len_k < self.len_q:
            Srel = Srel[:, :, :, :self.len_k]

        return Srel

    @staticmethod
    def _qe_masking(qe):
        mask = sequence_mask(
            torch.arange(qe.size()[-1] - 1, qe.size()[-1] - qe.size()[-2] - 1, -1).to(qe.device),
            qe.size()[-1])
        mask = ~mask.to(mask.device)
        return mask.to(qe.dtype) * qe


class EncoderLayer(torch.nn.Module):
    def __init__(self, d_model, rate=0.1, h=16, additional=False, max_seq=2048):
        super(EncoderLayer, self).__init__()

        self.d_model = d_model
        self.rga = RelativeGlobalAttention(h=h, d=d_model, max_seq=max_seq, add_emb=additional)

        self.FFN_pre = torch.nn.Linear(self.d_model, self.d_model//2)
        self.FFN_suf = torch.nn.Linear(self.d_model//2, self.d_model)

        self.layernorm1 = torch.nn.LayerNorm(self.d_model, eps=1e-6)
        self.layernorm2 = torch.nn.LayerNorm(self.d_model, eps=1e-6)

        self.dropout1 = torch.nn.Dropout(rate)
        self.dropout2 = torch.nn.Dropout(rate)

    def forward(self, x, mask=None, **kwargs):
        attn_out, w = self.rga([x,x,x], mask)
        attn_out = self.dropout1(attn_out)
        out1 = self.layernorm1(attn_out+x)

        ffn_out = F.relu(self.FFN_pre(out1))
        ffn_out = self.FFN_suf(ffn_out)
        ffn_out = self.dropout2(ffn_out)
        out2 = self.layernorm2(out1+ffn_out)
        return out2, w


class Encoder(torch.nn.Module):
    def __init__(self, num_layers, d_model, input_vocab_size, rate=0.1, max_len=None):
        super(Encoder, self).__init__()

        self.d_model = d_model
        self.num_layers = num_layers

        self.embedding = torch.nn.Embedding(num_embeddings=input_vocab_size, embedding_dim=d_model)
        if True:
            self.pos_encoding = DynamicPositionEmbedding(self.d_model, max_seq=max_len)

        self.enc_layers = torch.nn.ModuleList(
            [EncoderLayer(d_model, rate, h=self.d_model // 64, additional=False, max_seq=max_len)
             for _ in range(num_layers)])
        self.dropout = torch.nn.Dropout(rate)

    def forward(self, x, mask=None):
        weights = []
        # adding embedding and position encoding.
        x = self.embedding(x.to(torch.long))  # (batch_size, input_seq_len, d_model)
        x *= math.sqrt(self.d_model)
        x = self.pos_encoding(x)
        x = self.dropout(x)
        for i in range(self.num_layers):
            x, w = self.enc_layers[i](x, mask)
            weights.append(w)
        return x, weights # (batch_size, input_seq_len, d_model)


# model.py
class MusicTransformer(torch.nn.Module):
    def __init__(self, embedding_dim=256, vocab_size=388+2, num_layer=6,
                 max_seq=2048, dropout=0.2, debug=False, loader_path=None, dist=False, writer=None, bug=None):
        super().__init__()
        self.infer = False
        self.bug = bug
        if loader_path is not None:
            self.load_config_file(loader_path)
        else:
            self._debug = debug
            self.max_seq = max_seq
            self.num_layer = num_layer
            self.embedding_dim = embedding_dim
            self.vocab_size = vocab_size
            self.dist = dist

        self.writer = writer
        self.Decoder = Encoder(
            num_layers=self.num_layer, d_model=self.embedding_dim,
            input_vocab_size=self.vocab_size, rate=dropout, max_len=max_seq)
        self.fc = torch.nn.Linear(self.embedding_dim, self.vocab_size)

    def forward(self, x, length=None, writer=None):
        if self.training or not self.infer:
            _, _, look_ahead_mask = get_masked_with_pad_tensor(self.max_seq, x, x, PAD_TOKEN)
            if self.bug == "look_ahead_mask_dropped":
                look_ahead_mask = None
            decoder, w = self.Decoder(x, mask=look_ahead_mask)
            fc = self.fc(decoder)
            return fc.contiguous() if self.training else (fc.contiguous(), [weight.contiguous() for weight in w])
        raise NotImplementedError("(port) generate() is not ported")


# custom/criterion.py
class SmoothCrossEntropyLoss(_Loss):
    """
    https://arxiv.org/abs/1512.00567
    """
    __constants__ = ['label_smoothing', 'vocab_size', 'ignore_index', 'reduction']

    def __init__(self, label_smoothing, vocab_size, ignore_index=-100, reduction='mean', is_logits=True):
        assert 0.0 <= label_smoothing <= 1.0
        super().__init__(reduction=reduction)

        self.label_smoothing = label_smoothing
        self.vocab_size = vocab_size
        self.ignore_index = ignore_index
        self.input_is_logits = is_logits

    def forward(self, input, target):
        mask = (target == self.ignore_index).unsqueeze(-1)
        q = F.one_hot(target.long(), self.vocab_size).type(torch.float32)
        u = 1.0 / self.vocab_size
        q_prime = (1.0 - self.label_smoothing) * q + self.label_smoothing * u
        q_prime = q_prime.masked_fill(mask, 0)

        ce = self.cross_entropy_with_logits(q_prime, input)
        if self.reduction == 'mean':
            lengths = torch.sum(target != self.ignore_index)
            return ce.sum() / lengths
        elif self.reduction == 'sum':
            return ce.sum()
        else:
            raise NotImplementedError

    def cross_entropy_with_logits(self, p, q):
        return -torch.sum(p * (q - q.logsumexp(dim=-1, keepdim=True)), dim=-1)


class CustomSchedule:
    def __init__(self, d_model, warmup_steps=4000, optimizer=None):
        super(CustomSchedule, self).__init__()

        self.d_model = d_model
        self.optimizer = optimizer
        self.warmup_steps = warmup_steps

        self._step = 0
        self._rate = 0

    def step(self):
        "Update parameters and rate"
        self._step += 1
        rate = self.rate()
        for p in self.optimizer.param_groups:
            p['lr'] = rate
        self._rate = rate
        self.optimizer.step()

    def rate(self, step=None):
        if step is None:
            step = self._step
        arg1 = step ** (-0.5)
        arg2 = step * (self.warmup_steps ** -1.5)

        return self.d_model ** (-0.5) * min(arg1, arg2)


# data.py
class Data:
    def __init__(self, files, bug=None):
        self.files = files  # (port) in-memory event lists instead of .pickle paths
        self.file_dict = {
            'train': self.files[:int(len(self.files) * 0.8)],
            'eval': self.files[int(len(self.files) * 0.8): int(len(self.files) * 0.9)],
            'test': self.files[int(len(self.files) * 0.9):],
        }
        self.bug = bug

    def batch(self, batch_size, length, mode='train'):

        batch_files = random.sample(self.file_dict[mode], k=batch_size)

        batch_data = [
            self._get_seq(file, length)
            for file in batch_files
        ]
        return np.array(batch_data)  # batch_size, seq_len

    def slide_seq2seq_batch(self, batch_size, length, mode='train'):
        data = self.batch(batch_size, length+1, mode)
        x = data[:, :-1]
        y = data[:, 1:]
        if self.bug == "targets_not_shifted":
            y = data[:, :-1]
        return x, y

    def _get_seq(self, fname, max_length=None):
        data = fname  # (port) the file's events
        if max_length is not None:
            if max_length <= len(data):
                start = random.randrange(0,len(data) - max_length)
                data = data[start:start + max_length]
            else:
                raise IndexError
        return data


# ----------------------------------------------------------------------------------------------- (port) data
def synthetic_performance(rng, n_notes):
    """Performance events: velocity (356-387), note-on (0-127), time-shift (256-355), note-off (128-255)."""
    root = rng.randint(48, 60)
    scale = [root + s for s in (0, 2, 4, 5, 7, 9, 11, 12)]
    tempo = rng.choice([8, 12, 16, 24])
    velocity = 356 + rng.randint(10, 25)
    events, degree = [], rng.randint(0, 7)
    for _ in range(n_notes):
        degree = min(7, max(0, degree + rng.choice([-2, -1, 1, 1, 2])))
        pitch = scale[degree]
        events += [velocity, pitch, 256 + tempo - 1, 128 + pitch]
    return events


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    rng = random.Random(seed)
    files = [synthetic_performance(rng, 100) for _ in range(40)]
    dataset = Data(files, bug=bug)

    mt = MusicTransformer(
        embedding_dim=EMBEDDING_DIM,
        vocab_size=VOCAB_SIZE,
        num_layer=NUM_LAYERS,
        max_seq=MAX_SEQ,
        dropout=DROPOUT,
        debug=False, loader_path=None,
        bug=bug,
    )
    opt = optim.Adam(mt.parameters(), lr=0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = CustomSchedule(EMBEDDING_DIM, optimizer=opt, warmup_steps=WARMUP_STEPS)
    loss_metric = SmoothCrossEntropyLoss(LABEL_SMOOTH, VOCAB_SIZE, PAD_TOKEN)

    def train_step():
        if bug != "zero_grad_dropped":
            scheduler.optimizer.zero_grad()
        batch_x, batch_y = dataset.slide_seq2seq_batch(BATCH_SIZE, MAX_SEQ)
        batch_x = torch.from_numpy(batch_x).contiguous().to(dtype=torch.int)
        batch_y = torch.from_numpy(batch_y).contiguous().to(dtype=torch.int)

        mt.train()
        sample = mt.forward(batch_x)
        loss = loss_metric(sample, batch_y)  # metric_set(sample, batch_y)['loss']
        loss.backward()
        scheduler.step()
        return loss.item()

    state = random.getstate()
    eval_x, eval_y = dataset.slide_seq2seq_batch(2, MAX_SEQ, 'eval')
    random.setstate(state)
    eval_x = torch.from_numpy(eval_x).contiguous().to(dtype=torch.int)
    eval_y = torch.from_numpy(eval_y).contiguous().to(dtype=torch.int)

    def evaluate(model, _batch=None):
        model.eval()
        with torch.no_grad():
            eval_preiction, weights = model.forward(eval_x)
            eval_loss = loss_metric(eval_preiction, eval_y)
        model.train()
        return float(eval_loss)

    state = random.getstate()
    bx, by = dataset.slide_seq2seq_batch(BATCH_SIZE, MAX_SEQ)
    random.setstate(state)
    batch = (torch.from_numpy(bx).contiguous().to(dtype=torch.int),
             torch.from_numpy(by).contiguous().to(dtype=torch.int))

    def loss_fn(sample, target):
        if isinstance(sample, tuple):
            sample = sample[0]
        return loss_metric(sample, target)

    return Program(name="musictransformer_midi", model=mt, batch=batch, loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, eval_fn=evaluate)


build = functools.partial(_build, bug=None)

BUGS = [
    # the look-ahead mask left out of the decoder's attention (classic causal leak): every position sees the
    # event it must predict.
    Bug("look_ahead_mask_dropped", functools.partial(_build, bug="look_ahead_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # slide_seq2seq_batch's y taken as data[:, :-1], the input itself (classic: the shift lost).
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger",
        ("TASK",)),
    # scheduler.optimizer.zero_grad() left out: gradients accumulate over the steps (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
