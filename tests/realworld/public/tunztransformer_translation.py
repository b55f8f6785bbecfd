# ruff: noqa: PLR0402, UP032
"""tunz/transformer-pytorch: a tensor2tensor-style Transformer for translation (``train.py --problem wmt32k``):
pre-norm encoder and decoder layers (LayerNorm eps 1e-6, 8-head attention with in-place query scaling, ReLU
feed-forward, dropout after each sublayer, a final LayerNorm), xavier init, embeddings scaled by ``sqrt(hidden)``
with padded positions zeroed, sinusoidal timing signals, the target embedding shifted right inside ``decode`` and
reused as the output projection; ``utils.get_loss`` (label-smoothed cross-entropy minus its constant
``normalizing``, padding masked out), ``LRScheduler`` (Adam betas (0.9, 0.997), eps 1e-9, the t2t ``2 / sqrt(hidden)``
warmup and rsqrt decay applied before every step) and ``train``'s loop (forward, loss, zero_grad, backward, step).

Source: https://github.com/tunz/transformer-pytorch
Commit: e7266679f0b32fd99135ea617213f986ceede056
Files: ``train.py`` (``train``, ``validation``, ``main``), ``model/transformer.py`` and ``utils/utils.py``'s
``create_pad_mask``, ``create_trg_self_mask`` (in the helper ``_tunz_transformer.py``), ``utils/utils.py``
(``get_loss``), ``utils/optimizer.py`` (``LRScheduler``),
``dataset/problem.py``, ``dataset/translation.py`` (the fields: ``<unk>``, ``<pad>``, ``<eos>``, lower-cased)
License: MIT (Copyright (c) 2019 Choongwoo Han; full text in LICENSES/tunz-transformer-pytorch.txt)
Domain: seq2seq translation with attention (Transformer encoder-decoder, label smoothing, warmup schedule)

Kept as written: everything in ``model/transformer.py`` (``share_target_embedding`` False and ``has_inputs`` True as
``problem.prepare`` sets them for wmt32k), ``get_loss``, the pad and self masks, ``LRScheduler``, ``train``'s loop
body and ``validation`` (label smoothing 0 there); dropout 0.1, label smoothing 0.1.

Deviations from the original:
- sizes for 2 CPU cores: n_layers 6 -> 2, hidden_size 512 -> 32 (8 heads of 4), filter_size 2048 -> 64, warmup
  16000 -> 100 steps (about 45k parameters);
- data: WMT de-en (downloaded, tokenized by spaCy, torchtext fields, ``BucketByLengthIterator`` with 4096-token
  batches) is replaced by synthetic sentence pairs made from ``seed``: source sentences of 4-9 words from 40
  "German" words; the target translates each word through a fixed dictionary and swaps each adjacent pair of
  words; both sides get ``<eos>`` and are padded per batch of 16 pairs with ``<pad>`` (``batch_first``), as the
  torchtext fields do; the vocabularies put the specials first (``<unk>`` 0, ``<pad>`` 1, ``<eos>`` 2);
- ``create_trg_self_mask`` builds its ``triu`` mask as ``torch.bool`` instead of ``torch.uint8``: ``masked_fill_``
  no longer accepts byte masks; no GPU, no ``DataParallel``; tensorboard summaries, tqdm and checkpoints dropped;
- one ``train_step`` is one batch of ``train``'s loop (a reshuffled epoch of the training pairs when they run out)
  and returns ``loss.item()``; ``eval_fn`` is ``validation`` on 64 held-out pairs, returning the loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import random
import sys

import torch
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tunz_transformer import Transformer

# ---- utils/utils.py ----------------------------------------------------------------------------------------------

def get_loss(pred, ans, vocab_size, label_smoothing, pad, bug=None):
    # took this "normalizing" from tensor2tensor. We subtract it for
    # readability. This makes no difference on learning.
    confidence = 1.0 - label_smoothing
    low_confidence = (1.0 - confidence) / float(vocab_size - 1)
    normalizing = -(
        confidence * math.log(confidence) + float(vocab_size - 1) *
        low_confidence * math.log(low_confidence + 1e-20))

    one_hot = torch.zeros_like(pred).scatter_(1, ans.unsqueeze(1), 1)
    one_hot = one_hot * confidence + (1 - one_hot) * low_confidence
    log_prob = F.log_softmax(pred, dim=1)

    xent = -(one_hot * log_prob).sum(dim=1)
    if bug != "padding_in_loss":
        xent = xent.masked_select(ans != pad)
    loss = (xent - normalizing).mean()
    return loss


# ---- utils/optimizer.py ------------------------------------------------------------------------------------------

class LRScheduler:
    def __init__(self, parameters, hidden_size, warmup, step=0):
        self.constant = 2.0 * (hidden_size ** -0.5)
        self.cur_step = step
        self.warmup = warmup
        self.optimizer = optim.Adam(parameters, lr=self.learning_rate(),
                                    betas=(0.9, 0.997), eps=1e-09)

    def step(self):
        self.cur_step += 1
        rate = self.learning_rate()
        for p in self.optimizer.param_groups:
            p['lr'] = rate
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def learning_rate(self):
        lr = self.constant
        lr *= min(1.0, self.cur_step / self.warmup)
        lr *= max(self.cur_step, self.warmup) ** -0.5
        return lr



# ---- the data (port): synthetic pairs through the fields' vocabularies and padding ------------------------------

SPECIALS = ['<unk>', '<pad>', '<eos>']


def make_pairs(rng, n, dictionary):
    """Source: 4-9 of 40 words; target: each word translated, each adjacent pair of words swapped."""
    pairs = []
    for _ in range(n):
        src = ['de{}'.format(rng.randrange(40)) for _ in range(rng.randint(4, 9))]
        trg = [dictionary[w] for w in src]
        for k in range(0, len(trg) - 1, 2):
            trg[k], trg[k + 1] = trg[k + 1], trg[k]
        pairs.append((src, trg))
    return pairs


def numericalize(sents, stoi):
    """torchtext ``Field.process`` with ``batch_first=True``, ``eos_token='<eos>'``, ``pad_token='<pad>'``."""
    sents = [s + ['<eos>'] for s in sents]
    max_len = max(len(s) for s in sents)
    return torch.tensor([[stoi[w] for w in s] + [stoi['<pad>']] * (max_len - len(s)) for s in sents])


class Batch:
    def __init__(self, pairs, src_stoi, trg_stoi):
        self.src = numericalize([p[0] for p in pairs], src_stoi)
        self.trg = numericalize([p[1] for p in pairs], trg_stoi)

    def __len__(self):
        return self.src.size(0)


# ---- train.py ----------------------------------------------------------------------------------------------------

def validation(validation_data, model, global_step, t_vocab_size, opt):
    model.eval()
    total_loss = 0.0
    total_cnt = 0
    for batch in validation_data:
        inputs = None
        if opt.has_inputs:
            inputs = batch.src
        targets = batch.trg

        with torch.no_grad():
            pred = model(inputs, targets)

            pred = pred.view(-1, pred.size(-1))
            ans = targets.view(-1)
            loss = get_loss(pred, ans, t_vocab_size, 0,
                            opt.trg_pad_idx)
        total_loss += loss.item() * len(batch)
        total_cnt += len(batch)

    val_loss = total_loss / total_cnt
    return val_loss


def _vocab_and_pairs(rng):
    """(port) The dictionary, the pairs and the two vocabularies (specials first)."""
    en = ['en{}'.format(k) for k in range(40)]
    rng.shuffle(en)
    dictionary = {'de{}'.format(k): en[k] for k in range(40)}
    train_pairs, val_pairs = make_pairs(rng, 512, dictionary), make_pairs(rng, 64, dictionary)
    src_stoi = {w: i for i, w in enumerate(SPECIALS + sorted(dictionary))}
    trg_stoi = {w: i for i, w in enumerate(SPECIALS + sorted(en))}
    return train_pairs, val_pairs, src_stoi, trg_stoi


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    train_pairs, val_pairs, src_stoi, trg_stoi = _vocab_and_pairs(rng)
    opt = argparse.Namespace(batch_size=16, n_layers=2, hidden_size=32, filter_size=64, warmup=100, dropout=0.1,
                             label_smoothing=0.1, share_target_embedding=False, has_inputs=True,
                             src_pad_idx=src_stoi['<pad>'], trg_pad_idx=trg_stoi['<pad>'])
    i_vocab_size, t_vocab_size = len(src_stoi), len(trg_stoi)
    validation_data = [Batch(val_pairs[k:k + 32], src_stoi, trg_stoi) for k in range(0, len(val_pairs), 32)]

    model = Transformer(i_vocab_size, t_vocab_size,
                        n_layers=opt.n_layers,
                        hidden_size=opt.hidden_size,
                        filter_size=opt.filter_size,
                        dropout_rate=opt.dropout,
                        share_target_embedding=opt.share_target_embedding,
                        has_inputs=opt.has_inputs,
                        src_pad_idx=opt.src_pad_idx,
                        trg_pad_idx=opt.trg_pad_idx,
                        bug=bug)
    global_step = 0
    optimizer = LRScheduler(
        filter(lambda x: x.requires_grad, model.parameters()),
        opt.hidden_size, opt.warmup, step=global_step)
    st = {"batches": []}

    def train_step():
        if not st["batches"]:  # a new epoch of `train`
            rng.shuffle(train_pairs)
            st["batches"] = [Batch(train_pairs[k:k + opt.batch_size], src_stoi, trg_stoi)
                             for k in range(0, len(train_pairs), opt.batch_size)]
        batch = st["batches"].pop(0)
        model.train()
        inputs = None
        if opt.has_inputs:
            inputs = batch.src

        targets = batch.trg
        pred = model(inputs, targets)

        pred = pred.view(-1, pred.size(-1))
        ans = targets.view(-1)

        loss = get_loss(pred, ans, t_vocab_size,
                        opt.label_smoothing, opt.trg_pad_idx, bug=bug)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    first = Batch(train_pairs[:opt.batch_size], src_stoi, trg_stoi)
    loss_fn = lambda pred, targets: get_loss(pred.view(-1, pred.size(-1)), targets.view(-1), t_vocab_size,
                                             opt.label_smoothing, opt.trg_pad_idx, bug=bug)
    return Program(name="tunztransformer_translation", model=model,
                   batch=({"inputs": first.src, "targets": first.trg}, first.trg), loss_fn=loss_fn,
                   optimizer=optimizer.optimizer, train_step=train_step,
                   eval_fn=lambda m, _batch=None: validation(validation_data, m, 0, t_vocab_size, opt))


build = functools.partial(_build, bug=None)

BUGS = [
    # the right shift of the target embedding left out of decode ("# Shifting"): position t of the decoder reads
    # target token t, the token it must predict (classic teacher-forcing slip).
    Bug("decoder_input_not_shifted", functools.partial(_build, bug="decoder_input_not_shifted"), "learning_ledger",
        ("TASK",)),
    # the causal (triu) self-attention mask of the decoder replaced by an empty one: each position attends to the
    # target tokens after it (classic).
    Bug("self_mask_dropped", functools.partial(_build, bug="self_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # xent.masked_select(ans != pad) left out of get_loss: the padding positions are trained as targets (classic).
    Bug("padding_in_loss", functools.partial(_build, bug="padding_in_loss"), "learning_ledger", ("OBJECTIVE",)),
]
