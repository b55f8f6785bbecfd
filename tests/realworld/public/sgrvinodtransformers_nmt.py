# ruff: noqa: UP008
"""sgrvinod's "a PyTorch Tutorial to Transformers": a pre-norm encoder-decoder Transformer for translation in plain
torch (own pad and causal masks, sinusoidal positions, embeddings tied across encoder, decoder and logits), trained
by ``train.py`` on length-bucketed batches with ``LabelSmoothedCE`` over the packed positions of the shifted targets,
gradients accumulated over ``batches_per_step`` batches, Adam (0.9/0.98, eps 1e-9) and the T2T lr schedule.

Source: https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Transformers
Commit: 3e09136cc1bde6bba73ca5813a3f6c982cd5555a
Files: ``train.py`` (hyperparameters, ``main``, ``train``, ``validate``), ``model.py`` (``MultiHeadAttention``,
``PositionWiseFCNetwork``, ``Encoder``, ``Decoder``, ``Transformer``, ``LabelSmoothedCE``), ``dataloader.py``
(``SequenceLoader``), ``utils.py`` (``get_positional_encoding``, ``get_lr``, ``change_lr``)
License: MIT (Copyright (c) 2020 Sagar Vinodababu; LICENSES/sgrvinod-a-PyTorch-Tutorial-to-Transformers.txt)
Domain: machine translation (encoder-decoder Transformer, label smoothing, gradient accumulation)

Kept as written: every forward of ``model.py`` (the ``torch.equal`` self-attention test, the pad mask from
``key_value_sequence_lengths.repeat_interleave(n_heads)``, the decoder's ``tril`` mask, attention dropout, pre-norm
residuals, scaled embeddings plus positional encoding), ``init_weights`` (xavier, the three tied weights),
``LabelSmoothedCE``, the loop body of ``train()``, ``SequenceLoader``'s bucketing and shuffling, Adam's settings.

Deviations from the original:
- WMT14 en-de and the BPE model are not here: ``SequenceLoader`` gets synthetic id pairs made from ``seed`` (PAD 0,
  BOS 2, EOS 3 as youtokentome numbers them): 4-9 random content tokens, the target the source reversed and mapped
  through a fixed permutation, with BOS and EOS; 600 training and 24 validation pairs (a learnable rule);
- sizes for 2 CPU cores: d_model 32, 2 heads, d_queries = d_values 16, d_inner 64, 2 layers, vocab 40,
  max_length 32, tokens_in_batch 200, batches_per_step 2, warmup_steps 100; no checkpoints, meters or prints;
- docstrings and comments shortened; ``train()`` unrolled: one ``train_step`` is one batch (``create_batches()``
  and ``model.train()`` when an epoch starts); ``eval_fn`` is ``validate()`` returning the average loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from itertools import groupby
from random import shuffle

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")
VOCAB, PAD, BOS, EOS, N_TRAIN, N_VAL = 40, 0, 2, 3, 600, 24

# train.py: model and learning parameters (sizes as in the docstring)
d_model, n_heads, d_queries, d_values, d_inner, n_layers, dropout = 32, 2, 16, 16, 64, 2, 0.1
tokens_in_batch, batches_per_step, warmup_steps = 200, 2, 100
betas, epsilon, label_smoothing = (0.9, 0.98), 1e-9, 0.1


# model.py
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, d_queries, d_values, dropout, in_decoder=False, bug=None):
        super(MultiHeadAttention, self).__init__()
        self.d_model, self.n_heads, self.d_queries, self.d_values = d_model, n_heads, d_queries, d_values
        self.d_keys, self.in_decoder, self.bug = d_queries, in_decoder, bug
        self.cast_queries = nn.Linear(d_model, n_heads * d_queries)
        self.cast_keys_values = nn.Linear(d_model, n_heads * (d_queries + d_values))
        self.cast_output = nn.Linear(n_heads * d_values, d_model)
        self.softmax = nn.Softmax(dim=-1)
        self.layer_norm = nn.LayerNorm(d_model)
        self.apply_dropout = nn.Dropout(dropout)

    def forward(self, query_sequences, key_value_sequences, key_value_sequence_lengths):
        batch_size, query_sequence_pad_length = query_sequences.size(0), query_sequences.size(1)
        key_value_sequence_pad_length = key_value_sequences.size(1)
        self_attention = torch.equal(key_value_sequences, query_sequences)
        input_to_add = query_sequences.clone()
        query_sequences = self.layer_norm(query_sequences)
        if self_attention:
            key_value_sequences = self.layer_norm(key_value_sequences)
        queries = self.cast_queries(query_sequences)
        keys, values = self.cast_keys_values(key_value_sequences).split(split_size=self.n_heads * self.d_keys, dim=-1)
        queries = queries.contiguous().view(batch_size, query_sequence_pad_length, self.n_heads, self.d_queries)
        keys = keys.contiguous().view(batch_size, key_value_sequence_pad_length, self.n_heads, self.d_keys)
        values = values.contiguous().view(batch_size, key_value_sequence_pad_length, self.n_heads, self.d_values)
        queries = queries.permute(0, 2, 1, 3).contiguous().view(-1, query_sequence_pad_length, self.d_queries)
        keys = keys.permute(0, 2, 1, 3).contiguous().view(-1, key_value_sequence_pad_length, self.d_keys)
        values = values.permute(0, 2, 1, 3).contiguous().view(-1, key_value_sequence_pad_length, self.d_values)
        attention_weights = torch.bmm(queries, keys.permute(0, 2, 1))
        attention_weights = (1. / math.sqrt(self.d_keys)) * attention_weights
        # MASK 1: keys that are pads
        not_pad_in_keys = torch.LongTensor(range(key_value_sequence_pad_length)).unsqueeze(0).unsqueeze(0).expand_as(
            attention_weights).to(device)
        not_pad_in_keys = not_pad_in_keys < key_value_sequence_lengths.repeat_interleave(self.n_heads).unsqueeze(
            1).unsqueeze(2).expand_as(attention_weights)
        attention_weights = attention_weights.masked_fill(~not_pad_in_keys, -float('inf'))
        # MASK 2: if this is self-attention in the decoder, keys chronologically ahead of queries
        if self.in_decoder and self_attention and self.bug != "future_mask_dropped":
            not_future_mask = torch.ones_like(attention_weights).tril().bool().to(device)
            attention_weights = attention_weights.masked_fill(~not_future_mask, -float('inf'))
        attention_weights = self.softmax(attention_weights)
        attention_weights = self.apply_dropout(attention_weights)
        sequences = torch.bmm(attention_weights, values)
        sequences = sequences.contiguous().view(batch_size, self.n_heads, query_sequence_pad_length,
                                                self.d_values).permute(0, 2, 1, 3)
        sequences = sequences.contiguous().view(batch_size, query_sequence_pad_length, -1)
        sequences = self.cast_output(sequences)
        sequences = self.apply_dropout(sequences) + input_to_add
        return sequences


class PositionWiseFCNetwork(nn.Module):
    def __init__(self, d_model, d_inner, dropout):
        super(PositionWiseFCNetwork, self).__init__()
        self.d_model, self.d_inner = d_model, d_inner
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_inner)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(d_inner, d_model)
        self.apply_dropout = nn.Dropout(dropout)

    def forward(self, sequences):
        input_to_add = sequences.clone()
        sequences = self.layer_norm(sequences)
        sequences = self.apply_dropout(self.relu(self.fc1(sequences)))
        sequences = self.fc2(sequences)
        sequences = self.apply_dropout(sequences) + input_to_add
        return sequences


class Encoder(nn.Module):
    def __init__(self, vocab_size, positional_encoding, d_model, n_heads, d_queries, d_values, d_inner, n_layers, dropout):
        super(Encoder, self).__init__()
        self.vocab_size, self.positional_encoding, self.d_model, self.n_heads = vocab_size, positional_encoding, d_model, n_heads
        self.d_queries, self.d_values, self.d_inner, self.n_layers = d_queries, d_values, d_inner, n_layers
        self.dropout = dropout
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positional_encoding.requires_grad = False
        self.encoder_layers = nn.ModuleList([self.make_encoder_layer() for i in range(n_layers)])
        self.apply_dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)

    def make_encoder_layer(self):
        encoder_layer = nn.ModuleList([MultiHeadAttention(d_model=self.d_model, n_heads=self.n_heads, d_queries=self.d_queries,
                                                          d_values=self.d_values, dropout=self.dropout, in_decoder=False),
                                       PositionWiseFCNetwork(d_model=self.d_model, d_inner=self.d_inner,
                                                             dropout=self.dropout)])
        return encoder_layer

    def forward(self, encoder_sequences, encoder_sequence_lengths):
        pad_length = encoder_sequences.size(1)
        encoder_sequences = self.embedding(encoder_sequences) * math.sqrt(self.d_model) + self.positional_encoding[:,
                                                                                          :pad_length, :].to(device)
        encoder_sequences = self.apply_dropout(encoder_sequences)
        for encoder_layer in self.encoder_layers:
            encoder_sequences = encoder_layer[0](query_sequences=encoder_sequences, key_value_sequences=encoder_sequences,
                                                 key_value_sequence_lengths=encoder_sequence_lengths)
            encoder_sequences = encoder_layer[1](sequences=encoder_sequences)
        encoder_sequences = self.layer_norm(encoder_sequences)
        return encoder_sequences


class Decoder(nn.Module):
    def __init__(self, vocab_size, positional_encoding, d_model, n_heads, d_queries, d_values, d_inner, n_layers,
                 dropout, bug=None):
        super(Decoder, self).__init__()
        self.vocab_size, self.positional_encoding, self.d_model, self.n_heads = vocab_size, positional_encoding, d_model, n_heads
        self.d_queries, self.d_values, self.d_inner, self.n_layers = d_queries, d_values, d_inner, n_layers
        self.dropout, self.bug = dropout, bug
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positional_encoding.requires_grad = False
        self.decoder_layers = nn.ModuleList([self.make_decoder_layer() for i in range(n_layers)])
        self.apply_dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, vocab_size)

    def make_decoder_layer(self):
        decoder_layer = nn.ModuleList([MultiHeadAttention(d_model=self.d_model, n_heads=self.n_heads, d_queries=self.d_queries,
                                                          d_values=self.d_values, dropout=self.dropout, in_decoder=True, bug=self.bug),
                                       MultiHeadAttention(d_model=self.d_model, n_heads=self.n_heads, d_queries=self.d_queries,
                                                          d_values=self.d_values, dropout=self.dropout, in_decoder=True, bug=self.bug),
                                       PositionWiseFCNetwork(d_model=self.d_model, d_inner=self.d_inner,
                                                             dropout=self.dropout)])
        return decoder_layer

    def forward(self, decoder_sequences, decoder_sequence_lengths, encoder_sequences, encoder_sequence_lengths):
        pad_length = decoder_sequences.size(1)
        decoder_sequences = self.embedding(decoder_sequences) * math.sqrt(self.d_model) + self.positional_encoding[:,
                                                                                          :pad_length, :].to(device)
        decoder_sequences = self.apply_dropout(decoder_sequences)
        for decoder_layer in self.decoder_layers:
            decoder_sequences = decoder_layer[0](query_sequences=decoder_sequences, key_value_sequences=decoder_sequences,
                                                 key_value_sequence_lengths=decoder_sequence_lengths)
            decoder_sequences = decoder_layer[1](query_sequences=decoder_sequences, key_value_sequences=encoder_sequences,
                                                 key_value_sequence_lengths=encoder_sequence_lengths)
            decoder_sequences = decoder_layer[2](sequences=decoder_sequences)
        decoder_sequences = self.layer_norm(decoder_sequences)
        decoder_sequences = self.fc(decoder_sequences)
        return decoder_sequences


class Transformer(nn.Module):
    def __init__(self, vocab_size, positional_encoding, d_model=512, n_heads=8, d_queries=64, d_values=64,
                 d_inner=2048, n_layers=6, dropout=0.1, bug=None):
        super(Transformer, self).__init__()
        self.vocab_size, self.positional_encoding, self.d_model, self.n_heads = vocab_size, positional_encoding, d_model, n_heads
        self.d_queries, self.d_values, self.d_inner, self.n_layers = d_queries, d_values, d_inner, n_layers
        self.dropout = dropout
        self.encoder = Encoder(vocab_size=vocab_size, positional_encoding=positional_encoding, d_model=d_model, n_heads=n_heads,
                               d_queries=d_queries, d_values=d_values, d_inner=d_inner, n_layers=n_layers, dropout=dropout)
        self.decoder = Decoder(vocab_size=vocab_size, positional_encoding=positional_encoding, d_model=d_model, n_heads=n_heads,
                               d_queries=d_queries, d_values=d_values, d_inner=d_inner, n_layers=n_layers, dropout=dropout,
                               bug=bug)
        self.init_weights()

    def init_weights(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p, gain=1.)
        nn.init.normal_(self.encoder.embedding.weight, mean=0., std=math.pow(self.d_model, -0.5))
        self.decoder.embedding.weight = self.encoder.embedding.weight
        self.decoder.fc.weight = self.decoder.embedding.weight

    def forward(self, encoder_sequences, decoder_sequences, encoder_sequence_lengths, decoder_sequence_lengths):
        encoder_sequences = self.encoder(encoder_sequences, encoder_sequence_lengths)
        decoder_sequences = self.decoder(decoder_sequences, decoder_sequence_lengths, encoder_sequences,
                                         encoder_sequence_lengths)
        return decoder_sequences


class LabelSmoothedCE(torch.nn.Module):
    def __init__(self, eps=0.1):
        super(LabelSmoothedCE, self).__init__()
        self.eps = eps

    def forward(self, inputs, targets, lengths):
        inputs, _, _, _ = pack_padded_sequence(input=inputs, lengths=lengths.cpu(), batch_first=True, enforce_sorted=False)
        targets, _, _, _ = pack_padded_sequence(input=targets, lengths=lengths.cpu(), batch_first=True, enforce_sorted=False)
        target_vector = torch.zeros_like(inputs).scatter(dim=1, index=targets.unsqueeze(1), value=1.).to(device)
        target_vector = target_vector * (1. - self.eps) + self.eps / target_vector.size(1)
        loss = (-1 * target_vector * F.log_softmax(inputs, dim=1)).sum(dim=1)
        loss = torch.mean(loss)
        return loss


# utils.py
def get_positional_encoding(d_model, max_length=100):
    positional_encoding = torch.zeros((max_length, d_model))
    for i in range(max_length):
        for j in range(d_model):
            if j % 2 == 0:
                positional_encoding[i, j] = math.sin(i / math.pow(10000, j / d_model))
            else:
                positional_encoding[i, j] = math.cos(i / math.pow(10000, (j - 1) / d_model))
    return positional_encoding.unsqueeze(0)


def get_lr(step, d_model, warmup_steps):
    return 2. * math.pow(d_model, -0.5) * min(math.pow(step, -0.5), step * math.pow(warmup_steps, -1.5))


def change_lr(optimizer, new_lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = new_lr


# dataloader.py (the BPE encoding replaced by pairs already given as ids)
class SequenceLoader:
    def __init__(self, pairs, split, tokens_in_batch):
        self.tokens_in_batch, self.split = tokens_in_batch, split.lower()
        self.for_training = self.split == "train"
        source_data = [s for s, _ in pairs]
        target_data = [[BOS] + t + [EOS] for _, t in pairs]  # bos=True, eos=True
        source_lengths = [len(s) for s in source_data]
        target_lengths = [len(t) for t in target_data]
        self.data = list(zip(source_data, target_data, source_lengths, target_lengths))
        if self.for_training:
            self.data.sort(key=lambda x: x[3])
        self.create_batches()

    def create_batches(self):
        if self.for_training:
            chunks = [list(g) for _, g in groupby(self.data, key=lambda x: x[3])]
            self.all_batches = []
            for chunk in chunks:
                chunk.sort(key=lambda x: x[2])
                seqs_per_batch = self.tokens_in_batch // chunk[0][3]
                self.all_batches.extend([chunk[i: i + seqs_per_batch] for i in range(0, len(chunk), seqs_per_batch)])
            shuffle(self.all_batches)
            self.n_batches = len(self.all_batches)
            self.current_batch = -1
        else:
            self.all_batches = [[d] for d in self.data]
            self.n_batches = len(self.all_batches)
            self.current_batch = -1

    def __iter__(self):
        return self

    def __next__(self):
        self.current_batch += 1
        try:
            source_data, target_data, source_lengths, target_lengths = zip(*self.all_batches[self.current_batch])
        except IndexError:
            raise StopIteration from None
        source_data = pad_sequence(sequences=[torch.LongTensor(s) for s in source_data], batch_first=True, padding_value=PAD)
        target_data = pad_sequence(sequences=[torch.LongTensor(t) for t in target_data], batch_first=True, padding_value=PAD)
        source_lengths, target_lengths = torch.LongTensor(source_lengths), torch.LongTensor(target_lengths)
        return source_data, target_data, source_lengths, target_lengths


def _synthetic_pairs(seed, n):
    """(port) source: 4-9 content tokens; target: the source reversed, mapped through a fixed permutation."""
    rng = random.Random(seed)
    perm = list(range(4, VOCAB))
    rng.shuffle(perm)
    srcs = [[rng.randrange(4, VOCAB) for _ in range(rng.randint(4, 9))] for _ in range(n)]
    return [(src, [perm[t - 4] for t in reversed(src)]) for src in srcs]


def validate(model, _batch=None, val_loader=None, criterion=None):
    """train.py's validate(), returning the average loss instead of printing it."""
    was = model.training
    model.eval()
    val_loader.create_batches()
    losses = [0.0, 0]
    with torch.no_grad():
        for source_sequence, target_sequence, source_sequence_length, target_sequence_length in val_loader:
            predicted_sequence = model(source_sequence, target_sequence, source_sequence_length, target_sequence_length)
            loss = criterion(inputs=predicted_sequence, targets=target_sequence[:, 1:], lengths=target_sequence_length - 1)
            losses[0] += loss.item() * (target_sequence_length - 1).sum().item()
            losses[1] += (target_sequence_length - 1).sum().item()
    model.train(was)
    return losses[0] / losses[1]


def _build(seed, bug=None):
    random.seed(seed)  # SequenceLoader's shuffle
    torch.manual_seed(seed)
    pairs = _synthetic_pairs(seed, N_TRAIN + N_VAL)
    train_loader = SequenceLoader(pairs[:N_TRAIN], split="train", tokens_in_batch=tokens_in_batch)
    val_loader = SequenceLoader(pairs[N_TRAIN:], split="val", tokens_in_batch=tokens_in_batch)
    positional_encoding = get_positional_encoding(d_model=d_model, max_length=32)
    step = 1
    lr = get_lr(step=step, d_model=d_model, warmup_steps=warmup_steps)
    model = Transformer(vocab_size=VOCAB, positional_encoding=positional_encoding, d_model=d_model, n_heads=n_heads,
                        d_queries=d_queries, d_values=d_values, d_inner=d_inner, n_layers=n_layers, dropout=dropout, bug=bug)
    optimizer = torch.optim.Adam(params=[p for p in model.parameters() if p.requires_grad], lr=lr, betas=betas, eps=epsilon)
    criterion = LabelSmoothedCE(eps=label_smoothing)
    st = {"i": None, "step": step}

    def train_step():  # one batch of train()
        if st["i"] is None:  # an epoch starts: train_loader.create_batches(); train(...)
            train_loader.create_batches()
            model.train()
            st["i"] = 0
        i = st["i"]
        source_sequences, target_sequences, source_sequence_lengths, target_sequence_lengths = next(train_loader)
        predicted_sequences = model(source_sequences, target_sequences, source_sequence_lengths, target_sequence_lengths)
        if bug == "targets_not_shifted":
            loss = criterion(inputs=predicted_sequences[:, :-1], targets=target_sequences[:, :-1],
                             lengths=target_sequence_lengths - 1)
        else:
            loss = criterion(inputs=predicted_sequences, targets=target_sequences[:, 1:],
                             lengths=target_sequence_lengths - 1)
        (loss / batches_per_step).backward()
        if (i + 1) % batches_per_step == 0:
            optimizer.step()
            optimizer.zero_grad()
            st["step"] += 1
            change_lr(optimizer, new_lr=get_lr(step=st["step"], d_model=d_model, warmup_steps=warmup_steps))
        st["i"] = i + 1
        if st["i"] == train_loader.n_batches:  # the epoch ends
            st["i"] = None
        return loss.item()

    eval_fn = functools.partial(validate, val_loader=val_loader, criterion=criterion)

    first = train_loader.all_batches[0]
    src = pad_sequence([torch.LongTensor(d[0]) for d in first], batch_first=True, padding_value=PAD)
    trg = pad_sequence([torch.LongTensor(d[1]) for d in first], batch_first=True, padding_value=PAD)
    batch = ((src, trg, torch.LongTensor([d[2] for d in first]), torch.LongTensor([d[3] for d in first])), trg[:, 1:])

    def loss_fn(outputs, targets):
        return criterion(inputs=outputs, targets=targets, lengths=batch[0][3] - 1)

    return Program(name="sgrvinodtransformers_nmt", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the targets are not shifted (``target_sequences[:, :-1]`` against the predictions at the same
    # positions), so each position is trained to output the token it was fed.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: MASK 2 (the ``tril`` mask of the decoder's self-attention) left out, so every target position
    # attends to the tokens after it, the very tokens it is trained to predict.
    Bug("future_mask_dropped", functools.partial(_build, bug="future_mask_dropped"), "learning_ledger", ("DEPENDENCY",)),
]
