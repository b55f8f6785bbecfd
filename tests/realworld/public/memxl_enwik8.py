"""lucidrains' ``memory-transformer-xl`` trained by its ``examples/enwik8_simple/train.py``: a
``MemoryTransformerXL`` (memory layers, short- and long-term memory, GRU-gated residuals) inside the
``AutoregressiveWrapper``, whose training ``forward`` splits each batch of byte sequences into ``NUM_SEGMENTS``
segments of ``SEQ_LEN`` and into micro-batches of ``MAX_BATCH_SIZE``, carries the memories from segment to segment
and yields one next-token cross-entropy per micro-batch; the loop backpropagates ``loss / grad_accum_every`` with
``retain_graph=True`` (the long-term memory keeps its graph across segments) and, on the last micro-batch of each
segment, clips the gradient norm at 0.5, steps Adam and zeroes the gradients.

Source: https://github.com/lucidrains/memory-transformer-xl
Commit: 8d25bac85975ec46b1ccbd03f5c25ff181146eb0
Files: examples/enwik8_simple/train.py, memory_transformer_xl/autoregressive_wrapper.py,
  memory_transformer_xl/memory_transformer_xl.py (in the helper ``_memxl_lib.py``)
License: MIT (Copyright (c) 2020 Phil Wang)
Domain: causal language model (byte level, memory-augmented Transformer-XL, segment recurrence)

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, heads 8 -> 2, memory_layers [6, 7, 8] -> [2] (the last layer, as the
  original's are its last layers), SEQ_LEN (and mem_len) 512 -> 16, lmem_len SEQ_LEN // 4; BATCH_SIZE 16 -> 8,
  MAX_BATCH_SIZE 4 (two micro-batches per segment); NUM_SEGMENTS 4; LEARNING_RATE 1e-4 -> 2e-3 (a short run);
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times); ``TextSamplerDataset`` is unchanged but for ``.cuda()``; no GPU;
- one ``train_step`` is one iteration of the training loop (one batch: NUM_SEGMENTS optimizer steps); the
  per-micro-batch ``print``, the validation every 100 batches and the sampling every 500 are left out;
  ``eval_fn`` is the validation loss (under ``model.eval()`` and ``no_grad``) of a given batch's segment; the
  ``Program``'s model is ``model.net`` (the wrapper's ``forward`` is a generator: it cannot return logits);
- the ``AutoregressiveWrapper`` is copied here (its ``generate`` left out, sampling only) with the ``bug`` switch
  the port's variants use.
"""
# ruff: noqa: C417, UP028

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import namedtuple
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_API = str(pathlib.Path(__file__).resolve().parents[1])
if _API not in sys.path:
    sys.path.insert(0, _API)
from _api import Bug, Program
from _memxl_lib import MemoryTransformerXL

# constants

BATCH_SIZE = 8
MAX_BATCH_SIZE = 4
LEARNING_RATE = 2e-3
SEQ_LEN = 16
NUM_SEGMENTS = 4


# ---- memory_transformer_xl/autoregressive_wrapper.py ----------------------------------------------------------------

Return = namedtuple('Return', ['loss', 'is_last_batch'])

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = -100, pad_value = 0, bug = None):
        super().__init__()
        self.bug = bug
        self.pad_value = pad_value
        self.ignore_index = ignore_index

        self.net = net
        self.seq_len = net.seq_len

    def forward(self, x, max_batch_size = None, return_loss = False, truncate_every = None, **kwargs):
        pad = partial(pad_sequence, batch_first = True, padding_value = self.pad_value)

        if not return_loss:
            if not isinstance(x, torch.Tensor):
                x = pad(x)
            return self.net(x, **kwargs)

        if isinstance(x, torch.Tensor) and self.bug == "targets_not_shifted":
            xi = x[:, :-1]
            xo = x[:, :-1]  # the targets are the inputs themselves
        elif isinstance(x, torch.Tensor):
            xi = x[:, :-1]
            xo = x[:, 1:]
        else:
            xi = pad(list(map(lambda t: t[:-1], x)))
            xo = pad(list(map(lambda t: t[1:], x)))

        # help auto-solve an area of confusion around input masks in auto-regressive
        # if user supplies a mask that is only off by one from the source sequence, resolve it for them
        mask = kwargs.pop('mask', None)
        if mask is not None and mask.shape[1] == x.shape[1]:
            mask = mask[:, :-1]

        segment_fn = lambda x: x.split(self.seq_len, dim=1)
        (xi, xo) = map(segment_fn, (xi, xo))

        num_segments = len(xi)
        mask = segment_fn(mask) if mask is not None else ((None,) * num_segments)

        max_batch_size = x.shape[0] if max_batch_size is None else max_batch_size
        split_batch_fn = lambda x: x.split(max_batch_size, dim=0)

        grad_accumulate_every = math.ceil(x.shape[0] / max_batch_size)
        mems = [None] * grad_accumulate_every

        for ind, (xi_seg, xo_seg, mask_seg) in enumerate(zip(xi, xo, mask)):
            xi_seg, xo_seg = map(split_batch_fn, (xi_seg, xo_seg))
            mask_seg = split_batch_fn(mask_seg) if mask_seg is not None else ((None,) * grad_accumulate_every)
            truncate = truncate_every is not None and ((ind + 1) % truncate_every) == 0

            new_mems = []
            for ind, (xi_seg_b, xo_seg_b, mask_seg_b, mem) in enumerate(zip(xi_seg, xo_seg, mask_seg, mems)):
                is_last = ind == (grad_accumulate_every - 1)

                logits, new_mem = self.net(xi_seg_b, mask = mask_seg_b, memories = mem, detach_lmem = truncate, **kwargs)
                new_mems.append(new_mem)

                loss = F.cross_entropy(logits.transpose(1, 2), xo_seg_b, ignore_index = self.ignore_index)
                yield Return(loss, is_last)

            mems = new_mems


# ---- examples/enwik8_simple/train.py ----------------------------------------------------------------------------------

def cycle(loader):
    while True:
        for data in loader:
            yield data


class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len, segments):
        super().__init__()
        self.data = data
        self.seq_len = seq_len
        self.segments = segments
        self.total_len = seq_len * segments

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.total_len - 1, (1,))
        full_seq = self.data[rand_start: rand_start + self.total_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.total_len


def make_bytes(gen, n):
    """Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    # instantiate model
    model = MemoryTransformerXL(
        num_tokens = 256,
        dim = 32,
        depth = 2,
        seq_len = SEQ_LEN,
        mem_len = SEQ_LEN,
        lmem_len = SEQ_LEN // 4,
        heads = 2,
        memory_layers = [2],
        bug = bug
    )
    model = AutoregressiveWrapper(model, bug=bug)

    data_train = make_bytes(gen, 20000)
    train_dataset = TextSamplerDataset(data_train, SEQ_LEN, NUM_SEGMENTS)
    train_loader = cycle(DataLoader(train_dataset, batch_size = BATCH_SIZE))

    # optimizer
    params = model.parameters()
    if bug == "memory_network_left_out":
        memory_ids = {id(p) for p in model.net.memory_network.parameters()}
        params = [p for p in model.parameters() if id(p) not in memory_ids]
    optim = torch.optim.Adam(params, lr=LEARNING_RATE)

    def train_step():
        model.train()
        grad_accum_every = BATCH_SIZE / MAX_BATCH_SIZE
        losses = []
        for loss, is_last in model(next(train_loader), max_batch_size = MAX_BATCH_SIZE, return_loss = True):
            (loss / grad_accum_every).backward(retain_graph = True)
            losses.append(loss.item())
            if is_last:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                optim.step()
                optim.zero_grad()
        return torch.tensor(sum(losses) / len(losses))

    def loss_fn(output, target):
        logits, _ = output
        return F.cross_entropy(logits.transpose(1, 2), target, ignore_index = model.ignore_index)

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = loss_fn(model(batch[0]), batch[1])
        model.train()
        return float(loss)

    x = next(iter(DataLoader(train_dataset, batch_size = BATCH_SIZE)))
    first = (x[:, :-1][:, :SEQ_LEN], x[:, 1:][:, :SEQ_LEN])
    # the wrapper's forward is a generator (it yields the losses): the network that maps a segment to its logits and
    # memories is model.net, which holds every parameter
    return Program(name="memxl_enwik8", model=model.net, batch=first, loss_fn=loss_fn, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the targets taken from the same positions as the inputs (``xo = x[:, :-1]``): the model learns to copy.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # the causal mask's diagonal one too far (``triu_(diagonal = 2 + total_mem_len)``): every position attends to
    # the byte it must predict.
    Bug("causal_mask_off_by_one", functools.partial(_build, bug="causal_mask_off_by_one"), "learning_ledger",
        ("DEPENDENCY",)),
    # Adam built without the memory network's parameters (classic): the long-term memory writer never trains.
    Bug("memory_network_left_out", functools.partial(_build, bug="memory_network_left_out"), "four_structures",
        ("memory_network",)),
]
