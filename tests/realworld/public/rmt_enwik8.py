"""Recurrent Memory Transformer (Bulatov et al., 2022) from lucidrains/recurrent-memory-transformer-pytorch, trained
as its ``train.py`` does on enwik8: a character LM whose input is split into ``seq_len`` segments; each segment is
read with ``num_memory_tokens`` read memories (the previous segment's write memories plus a learned read-memory
embedding) in front and fresh write memories (``memory_tokens``) behind, under a custom causal mask (memories
non-causal), with Transformer-XL memories (detached keys/values of the previous segment), token shift, a null
key/value, resiDual post-norm blocks with a GEGLU feedforward, and a frac-gradient token embedding.
``RecurrentMemoryTransformerWrapper`` shifts inputs/labels by one and trains with memory replay backpropagation: a
``no_grad`` pass over the segments stores the memories, then the segments are replayed backwards, each loss
backpropagated with ``mrbp_loss_weight`` and the write memories' gradient carried to the segment before. The loop
accumulates 4 micro-batches (``mrbp_loss_weight = 1 / 4``), clips the gradient norm to 0.5, steps Adam, zeroes.

Source: https://github.com/lucidrains/recurrent-memory-transformer-pytorch
Commit: 5027c9e457dc6b098875387b39e7d9e4dc43d7ee
Files: train.py, recurrent_memory_transformer_pytorch/recurrent_memory_transformer.py,
recurrent_memory_transformer_pytorch/attend.py
License: MIT (Copyright (c) 2023 Phil Wang; full text in LICENSES/lucidrains-recurrent-memory-transformer-pytorch.txt)
Domain: causal language model (segment recurrence with memory tokens, memory replay backpropagation)

Deviations from the original:
- commit: the last one before the repository's newest two, which replace the resiDual blocks by the external
  ``hyper-connections`` package (not installed here); train.py is the same at both;
- sizes for 2 CPU cores: dim 512 -> 32, depth 6 -> 2, heads 8 -> 2, dim_head 64 -> 16, seq_len 512 -> 16,
  SEQ_LEN 2048 -> 64 (four segments per draw, as in train.py), num_memory_tokens 128 -> 4, xl_mem_len 256 -> 8;
  LEARNING_RATE 1e-4 -> 2e-3 so the 30 self-check steps show learning (BATCH_SIZE 4, GRADIENT_ACCUMULATE_EVERY 4,
  clipping 0.5 unchanged);
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); ``TextSamplerDataset`` is unchanged but
  for ``.cuda()`` (``model.cuda()`` is dropped too: CPU);
- einops is not installed: ``rearrange``/``repeat``/``pack``/``unpack`` are written out as view/transpose/expand/
  cat/split; the ``flash_attn`` path (``use_flash_attn=True`` in train.py) calls ``F.scaled_dot_product_attention``
  without the ``torch.backends.cuda.sdp_kernel`` context (a CUDA kernel choice); the non-flash branch of ``Attend``,
  the rotary embedding (off in train.py), generation and the sampling helpers are not ported;
- one ``train_step`` is one iteration of the loop (4 micro-batches, clip, step, zero_grad), returning the total
  loss; ``eval_fn`` is the loop's validation loss (``return_loss=True`` under ``no_grad``) on a given draw;
- the Program's model is the ``RecurrentMemoryTransformer`` (the wrapper's ``transformer``), its batch the first
  segment of one draw as inputs and labels, ``loss_fn`` the transformer's own cross-entropy on its logits.
"""
# ruff: noqa: C417, UP028

from __future__ import annotations

import functools
import pathlib
import sys
from contextlib import nullcontext
from itertools import zip_longest

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _rmt_enwik8_lib import RecurrentMemoryTransformer, default, divisible_by, exists

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-3
SEQ_LEN = 64


# ---- recurrent_memory_transformer_pytorch/recurrent_memory_transformer.py: the wrapper ---------------------------

class RecurrentMemoryTransformerWrapper(nn.Module):
    def __init__(
        self,
        transformer: RecurrentMemoryTransformer,
        truncate_at_step = None,  # number of steps before detaching memories (truncated bptt). with memory replay checkpointing, there should be no memory issues, but in case of instability, as reported in initial paper
        bug = None
    ):
        super().__init__()
        self.transformer = transformer
        self.seq_len = transformer.seq_len
        self.truncate_at_step = truncate_at_step
        self.bug = bug

    def forward(self, x, memories = None, *, mask = None, xl_memories = None, return_loss = False, labels = None,
                truncate_at_step = None, memory_replay_backprop = False, mrbp_loss_weight = 1.):
        seq_len, truncate_at_step = self.seq_len, default(truncate_at_step, self.truncate_at_step)

        labels = None
        if (return_loss or memory_replay_backprop) and not exists(labels):
            if self.bug == "labels_not_shifted":
                x, labels = x[:, :-1], x[:, :-1]
            else:
                x, labels = x[:, :-1], x[:, 1:]
        # segment input
        segments = x.split(seq_len, dim = -1)
        total_length = x.shape[-1]
        num_segments = len(segments)
        segment_length_frac = tuple(map(lambda t: t.shape[-1] / total_length, segments))
        # default values
        label_segments = mask_segments = (None,)
        # take care of labels
        if exists(labels):
            label_segments = labels.split(seq_len, dim = -1)
        # take care of the mask
        if exists(mask):
            mask_segments = mask.split(seq_len, dim = -1)
        # keep replay buffer
        replay_buffer = [memories]
        # replay buffer for xl memories
        xl_segments = [xl_memories]
        # decide context of forward depending on whether doing memory-replay-backprop
        forward_context = nullcontext if not memory_replay_backprop else torch.no_grad
        # forward and get all outputs (can be either loss or logits)
        logits = []
        losses = []

        for step, (segment, mask_segment, label_segment, loss_weight) in enumerate(zip_longest(segments, mask_segments, label_segments, segment_length_frac)):

            with forward_context():
                output, memories, xl_memories = self.transformer(segment, memories, mask = mask_segment, labels = label_segment)

            if exists(truncate_at_step) and divisible_by(step + 1, truncate_at_step):
                memories = memories.detach()

            replay_buffer.append(memories)

            xl_segments.append(xl_memories)

            if return_loss:
                losses.append(output * loss_weight)
            else:
                logits.append(output)

        if memory_replay_backprop:
            return self._replay(num_segments, segments, replay_buffer, xl_segments, mask_segments, label_segments,
                                segment_length_frac, truncate_at_step, mrbp_loss_weight)
        # return logits if needed
        if not return_loss:
            logits = torch.cat(logits, dim = -2)
            return logits, memories
        # otherwise return losses
        return sum(losses), memories

    def _replay(self, num_segments, segments, replay_buffer, xl_segments, mask_segments, label_segments,
                segment_length_frac, truncate_at_step, mrbp_loss_weight):
        # whether to do memory replay backpropagation

        # https://arxiv.org/abs/2010.06891
        # algorithm 1

        memories_grad = torch.zeros_like(replay_buffer[-1])

        reversed_inputs = zip_longest(*map(reversed, [
            range(num_segments),
            segments,
            replay_buffer[:-1],
            xl_segments[:-1],
            mask_segments,
            label_segments,
            segment_length_frac,
        ]))

        total_loss = 0.

        for step, segment, segment_memories, segment_xl_memories, mask_segment, label_segment, loss_weight in reversed_inputs:
            is_first = step == 0

            if exists(segment_memories):
                segment_memories.requires_grad_()

            loss, next_segment_memories, _ = self.transformer(segment, segment_memories, mask = mask_segment, xl_memories = segment_xl_memories, labels = label_segment)

            weighted_loss = loss * loss_weight * mrbp_loss_weight

            weighted_loss.backward(retain_graph = True)

            next_segment_memories.backward(memories_grad)

            total_loss += weighted_loss

            if is_first:
                continue

            if exists(truncate_at_step) and divisible_by(step, truncate_at_step):
                memories_grad.zero_()
            elif self.bug == "memory_grad_not_carried":
                # the read memories' gradient never copied back: the write memories get a zero gradient
                pass
            else:
                memories_grad.copy_(segment_memories.grad.data)

        return total_loss


# ---- train.py -----------------------------------------------------------------------------------------------------

def cycle(loader):
    while True:
        for data in loader:
            yield data

class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


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
    data_train = make_bytes(gen, 10000)

    model = RecurrentMemoryTransformer(
        num_tokens = 256, dim = 32, depth = 2, dim_head = 16, heads = 2, seq_len = 16, use_flash_attn = True,
        num_memory_tokens = 4, use_xl_memories = True, xl_mem_len = 8, bug = bug
    )

    model = RecurrentMemoryTransformerWrapper(model, bug = bug)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader = cycle(train_data_loader)

    optim = torch.optim.Adam(model.parameters(), lr = LEARNING_RATE)

    def train_step():
        model.train()

        total_loss = 0.
        for _ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(
                next(train_loader),
                memory_replay_backprop = True,
                mrbp_loss_weight = 1. / GRADIENT_ACCUMULATE_EVERY
            )

            total_loss += loss

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)

        optim.step()
        optim.zero_grad()
        return total_loss.detach()

    def eval_fn(_model, batch):
        model.eval()
        with torch.no_grad():
            loss, _ = model(batch[0], return_loss = True)
        return float(loss)

    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])
    xi, xo = first[:, :-1][:, :16], first[:, 1:][:, :16]
    if bug == "labels_not_shifted":
        xo = first[:, :-1][:, :16]
    net = model.transformer

    def loss_fn(out, target):
        logits = out[0]
        return F.cross_entropy(logits.transpose(1, 2), target, ignore_index = net.ignore_index)

    return Program(name="rmt_enwik8", model=net, batch=(xi, xo), loss_fn=loss_fn, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: labels taken from the same positions as the inputs (x[:, :-1] for x[:, 1:] in the wrapper): every
    # position is scored on its own input byte.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: the segment's causal mask built without tril(): each token reads the bytes after it in its segment.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic (a gradient dropped in a hand-written backward): memory replay backprop never copies the read memories'
    # gradient into ``memories_grad``, so the write memories, and ``memory_tokens`` that start them, get a zero
    # gradient and are never updated.
    Bug("memory_grad_not_carried", functools.partial(_build, bug="memory_grad_not_carried"), "step_probe",
        ("memory_tokens",)),
]
