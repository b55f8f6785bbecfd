"""The NAACL 2019 transfer-learning tutorial's pretraining script (Thomas Wolf, Hugging Face): a GPT-2-style
Transformer written with ``nn.MultiheadAttention`` (sequence-first ``[seq, batch]``, learned positions, a causal
float ``-inf`` mask, pre-layer-norm residual blocks) with a tied language-modelling head that shifts logits and labels
itself (``CrossEntropyLoss(ignore_index=-1)``), the token stream cut into ``num_max_positions`` blocks and shuffled,
Adam, gradient clipping at ``max_norm`` 0.25, ``optimizer.step(); optimizer.zero_grad()`` every
``gradient_accumulation_steps`` iterations of an ignite ``Engine``, and ignite's linear warm-up into a cosine
annealing to zero (``create_lr_scheduler_with_warmup(CosineAnnealingScheduler(...))`` on ``ITERATION_STARTED``).

Source: https://github.com/huggingface/naacl_transfer_learning_tutorial
Commit: dc976775bb11edee24a77e2ce161450089c5e169
Files: pretraining_train.py (``get_data_loaders``, ``train``: ``update``, the schedule), pretraining_model.py
License: MIT (LICENCE; full text in LICENSES/huggingface-naacl_transfer_learning_tutorial.txt)
Domain: causal language model pretraining (sequence-first Transformer, ignite loop, warm-up + cosine)

Deviations from the original:
- data: wikitext-2 (a download, ``get_and_tokenize_dataset``) tokenized with the pretrained ``bert-base-cased``
  tokenizer (a download) is replaced by a synthetic token stream made from ``seed`` over a 40-token vocabulary
  (a token is followed by a fixed successor with probability 0.85, else a random token), split into 'train' and
  'valid' and cut into blocks by ``get_data_loaders`` as written (no distributed samplers); the train DataLoader's
  shuffle is seeded from ``seed``;
- sizes: embed_dim 410 -> 32, hidden_dim 2100 -> 64, num_max_positions 256 -> 32, num_heads 10 -> 2, num_layers
  16 -> 2, train_batch_size 8 kept, dropout 0.1, initializer_range 0.02, max_norm 0.25 kept; lr 2.5e-4 -> 5e-3 and
  n_warmup 1000 -> 5 so that the 30 steps of the self-check show learning; n_epochs 200 -> 20 (only the cosine
  length);
- ignite is not installed here: the ``Engine`` is written out as the part of ``Engine.run`` one iteration executes
  (``state.iteration += 1``, the ``ITERATION_STARTED`` handler, ``process_function(engine, batch)``), and the
  schedule as the lr ignite's ``create_lr_scheduler_with_warmup(cos_scheduler, 0.0, lr, n_warmup)`` sets at each
  event: linear from 0 to ``lr`` over the first ``n_warmup`` events (``PiecewiseLinear`` at 0 and
  ``n_warmup - 1``), then ``CosineAnnealingScheduler(optimizer, 'lr', lr, 0.0, len(train_loader) * n_epochs)``
  counted from its own first event;
- the evaluator, metrics, progress bar, tensorboard, checkpoints, CUDA and distributed training are dropped (the
  evaluator's ``inference`` is the Program's ``eval_fn``: the validation loss on a batch); the ``--mlm`` path
  (off by default) is not copied;
- one ``train_step`` is one Engine iteration; the Program's batch is a training batch already transposed to
  ``[seq length, batch]`` as ``update`` feeds it (``batch_axis=1``), the labels the inputs;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, PLW0127, RUF059  (the original's style is kept as written)

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
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

VOCAB = 40


# pretraining_model.py
def create_sinusoidal_embeddings(embeds):
    position_enc = torch.tensor([
        [pos / np.power(10000, 2 * (j // 2) / embeds.embedding_dim) for j in range(embeds.embedding_dim)]
                                                                    for pos in range(embeds.num_embeddings)])
    embeds.weight[:, 0::2] = torch.sin(position_enc[:, 0::2])
    embeds.weight[:, 1::2] = torch.cos(position_enc[:, 1::2])
    embeds.weight.detach_()
    embeds.weight.requires_grad = False


class Transformer(nn.Module):
    def __init__(self, embed_dim, hidden_dim, num_embeddings, num_max_positions, num_heads, num_layers, dropout,
                 sinusoidal_embeddings, causal=False):
        """ Transformer (GPT-2 architecture) """
        super().__init__()
        self.causal = causal
        self.tokens_embeddings = nn.Embedding(num_embeddings, embed_dim)
        self.position_embeddings = nn.Embedding(num_max_positions, embed_dim)
        if sinusoidal_embeddings:
            create_sinusoidal_embeddings(self.position_embeddings)
        self.dropout = nn.Dropout(dropout)

        self.attentions, self.feed_forwards = nn.ModuleList(), nn.ModuleList()
        self.layer_norms_1, self.layer_norms_2 = nn.ModuleList(), nn.ModuleList()
        for _ in range(num_layers):
            self.attentions.append(nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout))
            self.feed_forwards.append(nn.Sequential(nn.Linear(embed_dim, hidden_dim),
                                                    nn.ReLU(),
                                                    nn.Linear(hidden_dim, embed_dim)))
            self.layer_norms_1.append(nn.LayerNorm(embed_dim, eps=1e-12))
            self.layer_norms_2.append(nn.LayerNorm(embed_dim, eps=1e-12))

    def forward(self, x, padding_mask=None):
        """ Input has shape [seq length, batch] """
        positions = torch.arange(len(x), device=x.device).unsqueeze(-1)
        h = self.tokens_embeddings(x)
        h = h + self.position_embeddings(positions).expand_as(h)
        h = self.dropout(h)

        attn_mask = None
        if self.causal:
            attn_mask = torch.full((len(x), len(x)), -float('Inf'), device=h.device, dtype=h.dtype)
            attn_mask = torch.triu(attn_mask, diagonal=1)
        for layer_norm_1, attention, layer_norm_2, feed_forward in zip(self.layer_norms_1, self.attentions,
                                                                       self.layer_norms_2, self.feed_forwards):
            h = layer_norm_1(h)
            x, _ = attention(h, h, h, attn_mask=attn_mask, need_weights=False, key_padding_mask=padding_mask)
            x = self.dropout(x)
            h = x + h

            h = layer_norm_2(h)
            x = feed_forward(h)
            x = self.dropout(x)
            h = x + h
        return h


class TransformerWithLMHead(nn.Module):
    def __init__(self, config, bug=None):
        """ Transformer with a language modeling head on top (tied weights) """
        super().__init__()
        self.config = config
        causal = not config.mlm
        if bug == "causal_flag_inverted":
            causal = config.mlm  # the flag read the wrong way round: the causal LM attends to the future
        self.transformer = Transformer(config.embed_dim, config.hidden_dim, config.num_embeddings,
                                       config.num_max_positions, config.num_heads, config.num_layers,
                                       config.dropout, config.sinusoidal_embeddings, causal=causal)
        self.lm_head = nn.Linear(config.embed_dim, config.num_embeddings, bias=False)
        self.apply(self.init_weights)
        self.tie_weights()
        self.shift = not config.mlm

    def tie_weights(self):
        self.lm_head.weight = self.transformer.tokens_embeddings.weight

    def init_weights(self, module):
        """ initialize weights - note that nn.MultiheadAttention is already initalized by PyTorch (xavier_uniform) """
        if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
        if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
            module.bias.data.zero_()

    def forward(self, x, labels=None, padding_mask=None):
        """ Input has shape [seq length, batch] """
        hidden_states = self.transformer(x, padding_mask)
        logits = self.lm_head(hidden_states)

        if labels is not None:
            # (the original tests self.transformer.causal; ``shift`` is the same flag, kept apart so that the
            # causal_flag_inverted variant changes the mask only)
            shift_logits = logits[:-1] if self.shift else logits
            shift_labels = labels[1:] if self.shift else labels
            loss_fct = nn.CrossEntropyLoss(ignore_index=-1)
            loss = loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
            return logits, loss

        return logits


class _Args:  # the argparse defaults of pretraining_train.py (sizes reduced, see the docstring)
    embed_dim = 32
    hidden_dim = 64
    num_max_positions = 32
    num_heads = 2
    num_layers = 2
    dropout = 0.1
    initializer_range = 0.02
    sinusoidal_embeddings = False
    mlm = False
    mlm_probability = 0.15
    train_batch_size = 8
    valid_batch_size = 8
    lr = 5e-3
    max_norm = 0.25
    weight_decay = 0.0
    n_epochs = 20
    n_warmup = 5
    gradient_accumulation_steps = 1
    device = "cpu"
    distributed = False


def make_stream(rng, n):
    succ = list(range(VOCAB))
    rng.shuffle(succ)
    c, out = rng.randrange(VOCAB), []
    for _ in range(n):
        out.append(c)
        c = succ[c] if rng.random() < 0.85 else rng.randrange(VOCAB)
    return out


def get_data_loaders(args, datasets, seed):
    """ Prepare the dataloaders for training and evaluation """
    for split_name in ['train', 'valid']:
        tensor = torch.tensor(datasets[split_name], dtype=torch.long)
        num_sequences = (tensor.size(0) // args.num_max_positions) * args.num_max_positions
        datasets[split_name] = tensor.narrow(0, 0, num_sequences).view(-1, args.num_max_positions)
    train_loader = DataLoader(datasets['train'], batch_size=args.train_batch_size, shuffle=(not args.distributed),
                              generator=torch.Generator().manual_seed(seed))
    valid_loader = DataLoader(datasets['valid'], batch_size=args.valid_batch_size, shuffle=False)
    return train_loader, valid_loader


class _State:
    iteration = 0


class Engine:
    """The part of ignite's ``Engine.run`` that one iteration executes."""

    def __init__(self, process_function):
        self._process_function = process_function
        self.state = _State()
        self.iteration_started = []

    def run_once(self, batch):
        self.state.iteration += 1
        for handler in self.iteration_started:
            handler(self)
        self.state.output = self._process_function(self, batch)
        return self.state.output


def warmup_cosine(optimizer, lr, n_warmup, cycle_size):
    """ignite's create_lr_scheduler_with_warmup(CosineAnnealingScheduler(optimizer, 'lr', lr, 0.0, cycle_size),
    0.0, lr, n_warmup) as the lr it sets at each ITERATION_STARTED event."""
    counter = {"event": 0}

    def handler(engine):
        e = counter["event"]
        if e < n_warmup:  # PiecewiseLinear [(0, 0.0), (n_warmup - 1, lr)]
            value = 0.0 + (lr - 0.0) * e / (n_warmup - 1)
        else:  # CosineAnnealingScheduler, from its own event 0
            progress = (e - n_warmup) / cycle_size
            value = lr + (0.0 - lr) / 2 * (1 - math.cos(math.pi * progress))
        for group in optimizer.param_groups:
            group['lr'] = value
        counter["event"] += 1

    return handler


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    args = _Args()
    args.num_embeddings = VOCAB
    model = TransformerWithLMHead(args, bug=bug)
    optimizer = Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    datasets = {'train': make_stream(rng, 64 * args.num_max_positions), 'valid': make_stream(rng, 16 * 32)}
    train_loader, val_loader = get_data_loaders(args, datasets, seed)

    # Training function and trainer
    def update(engine, batch):
        model.train()
        if bug == "batch_not_transposed":
            inputs = batch.contiguous().to(args.device)  # left [batch, seq length] for a sequence-first model
        else:
            inputs = batch.transpose(0, 1).contiguous().to(args.device)  # to shape [seq length, batch]
        inputs, labels = (inputs, inputs)
        logits, loss = model(inputs, labels=labels)
        loss = loss / args.gradient_accumulation_steps
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        if engine.state.iteration % args.gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        return loss.item()
    trainer = Engine(update)

    # Learning rate schedule: linearly warm-up to lr and then decrease the learning rate to zero with cosine schedule
    trainer.iteration_started.append(warmup_cosine(optimizer, args.lr, args.n_warmup,
                                                   len(train_loader) * args.n_epochs))

    state = {"it": iter(train_loader)}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            batch = next(state["it"])
        return trainer.run_once(batch)

    def eval_fn(model, batch):
        inputs, labels = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            logits = model(inputs)
            shift_logits = logits[:-1] if not args.mlm else logits
            shift_labels = labels[1:] if not args.mlm else labels
            loss = nn.functional.cross_entropy(shift_logits.reshape(-1, logits.size(-1)), shift_labels.reshape(-1),
                                               ignore_index=-1)
        model.train(was_training)
        return float(loss)

    first = next(iter(DataLoader(datasets['train'], batch_size=args.train_batch_size)))
    if bug == "batch_not_transposed":
        inputs = first.contiguous()
    else:
        inputs = first.transpose(0, 1).contiguous()

    def loss_fn(logits, labels):
        shift_logits, shift_labels = logits[:-1], labels[1:]
        return nn.CrossEntropyLoss(ignore_index=-1)(shift_logits.reshape(-1, shift_logits.size(-1)),
                                                    shift_labels.reshape(-1))

    return Program(name="naacltl_pretrain_lm", model=model, batch=(inputs, inputs), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, batch_axis=1,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the causal flag read the wrong way round (classic): the language model attends to the token it must predict.
    Bug("causal_flag_inverted", functools.partial(_build, bug="causal_flag_inverted"), "learning_ledger",
        ("DEPENDENCY",)),
    # the DataLoader's [batch, seq] block fed to the sequence-first model without the transpose (classic): the
    # positions run over the examples and each token is asked to predict the next example's token at its place.
    Bug("batch_not_transposed", functools.partial(_build, bug="batch_not_transposed"), "learning_ledger", ("TASK",)),
]
