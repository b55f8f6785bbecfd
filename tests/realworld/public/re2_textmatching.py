"""RE2 ("Simple and Effective Text Matching with Richer Alignment Features", Yang et al., ACL 2019) from
alibaba-edu/simple-effective-text-matching-pytorch, trained on a sentence-pair classification task as its
``train.py`` / ``src/trainer.py`` do with the SNLI benchmark configuration: shared word embeddings (dropout), three
blocks of CNN encoder (weight-normed convolutions with GeLU, padding zeroed before each layer), projected
dot-product alignment with a learned temperature and masked two-way softmax, full fusion (``[x, a]``, ``[x, x - a]``,
``[x, x * a]``), augmented residual connections between blocks, masked max pooling and the full prediction layer
(``[a, b, a - b, a * b]``); cross-entropy, Adam, gradient clipping at 5, and the repository's own learning-rate
schedule (linear warmup from ``min_lr``, then exponential step decay, written into the optimizer after each update).

Source: https://github.com/alibaba-edu/simple-effective-text-matching-pytorch
Commit: 05d572e30801b235e989c78c95dd24d5f5d35f74
Files: ``train.py``, ``src/trainer.py`` (``Trainer.train``), ``src/model.py`` (``Model.__init__``, ``update``,
``_update_schedule``, ``process_data``, ``get_loss``), ``src/network.py``, ``src/modules/`` (``__init__``,
``embedding``, ``encoder``, ``alignment``, ``fusion``, ``connection``, ``pooling``, ``prediction``),
``src/interface.py`` (``process_sample``, ``shuffle_batch``, ``make_batch``, ``padding``), ``src/utils/registry.py``,
``src/utils/params.py`` (``samples2steps``), ``configs/default.json5``, ``configs/data/snli.json5``
License: Apache-2.0 (Copyright (C) 2019 Alibaba Group Holding Limited; full text in
LICENSES/alibaba-edu-simple-effective-text-matching-pytorch.txt)
Domain: NLP, sentence-pair classification (natural language inference with an alignment network)

Kept as written: the modules and the ``Network`` above (the registries, ``Module.add_summary``/``get_summary``,
``Linear`` and ``Conv1d`` with weight norm and their initializations), ``Model.update`` (train mode, ``zero_grad``,
``process_data`` with the padding masks, forward, ``get_summary``, ``f.cross_entropy``, backward,
``clip_grad_norm_`` at ``grad_clipping``, step, ``_update_schedule``), ``Interface.shuffle_batch`` (``random.sample``
of the processed samples, then batches padded by ``make_batch``/``padding``), the default + snli configuration
(``blocks`` 3, ``enc_layers`` 2, ``kernel_sizes`` [3], alignment ``linear``, fusion ``full``, connection ``aug``,
prediction ``full``, dropout 0.2, lr 2e-3, min_lr 1e-4, lr_decay_rate 0.94, betas (0.9, 0.999), weight_decay 0).

Deviations from the original:
- SNLI and GloVe are not here: the sentence pairs are synthetic, made from ``seed``, already tokenized over a
  vocabulary of 60 words (+ padding and unknown): a premise of 5 to 9 content words; an entailed hypothesis is a
  subset of them, a contradiction the same with the negation word "not" put in, a neutral one words not in the
  premise (3 classes, balanced); ``pretrained_embeddings`` is empty, so ``fix_embeddings`` is False as
  ``params.py`` sets it and the embeddings train from random (``set_embeddings`` is never called);
- sizes for 2 CPU cores: embedding_dim 300 -> 32, hidden_size 150 -> 32, batch_size 512 -> 32; the schedule's
  sample counts scaled to the 30 steps of the self-check (lr_warmup_samples 2048000 -> 640, i.e. 20 updates of
  32; lr_decay_samples 256000 -> 3200);
- CPU only; the vocabulary building, the logging, tensorboard summaries, evaluation every ``eval_per_samples``,
  checkpoints and early stopping are dropped; ``Model.evaluate``'s metrics are not ported: ``eval_fn`` is the
  accuracy on a held-out set of pairs under ``eval()``;
- one ``train_step`` is one ``model.update(batch)`` of the trainer's loop over ``shuffle_batch``'s batches (a new
  shuffled epoch when one ends), returning the loss; the Program's model is ``Model.network``, its optimizer
  ``Model.opt``, its batch the first training batch as ``process_data`` makes it (the inputs dict, the targets), its
  ``loss_fn`` ``Model.get_loss``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF012, SIM118, RUF046  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from collections.abc import Collection
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as f

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# src/utils/registry.py
def _register(name=None, registry=None):
    def decorator(fn, registration_name=None):
        module_name = registration_name or _default_name(fn)
        if module_name in registry:
            raise LookupError(f"module {module_name} already registered.")
        registry[module_name] = fn
        return fn
    return lambda fn: decorator(fn, name)


def _default_name(obj_class):
    return obj_class.__name__


# src/modules/__init__.py
class Module(nn.Module):
    def __init__(self):
        super().__init__()
        self.summary = {}

    def add_summary(self, name, val):
        if self.training:
            self.summary[name] = val.clone().detach().cpu().numpy()

    def get_summary(self, base_name=''):
        summary = {}
        if base_name:
            base_name += '/'
        if self.summary:
            summary.update({base_name + name: val for name, val in self.summary.items()})
        for name, child in self.named_children():
            if hasattr(child, 'get_summary'):
                name = base_name + name
                summary.update(child.get_summary(name))
        return summary


class ModuleList(nn.ModuleList):
    def get_summary(self, base_name=''):
        summary = {}
        if base_name:
            base_name += '/'
        for i, module in enumerate(self):
            if hasattr(module, 'get_summary'):
                name = base_name + str(i)
                summary.update(module.get_summary(name))
        return summary


class ModuleDict(nn.ModuleDict):
    def get_summary(self, base_name=''):
        summary = {}
        if base_name:
            base_name += '/'
        for key, module in self.items():
            if hasattr(module, 'get_summary'):
                name = base_name + key
                summary.update(module.get_summary(name))
        return summary


class GeLU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1. + torch.tanh(x * 0.7978845608 * (1. + 0.044715 * x * x)))


class Linear(nn.Module):
    def __init__(self, in_features, out_features, activations=False):
        super().__init__()
        linear = nn.Linear(in_features, out_features)
        nn.init.normal_(linear.weight, std=math.sqrt((2. if activations else 1.) / in_features))
        nn.init.zeros_(linear.bias)
        modules = [nn.utils.weight_norm(linear)]
        if activations:
            modules.append(GeLU())
        self.model = nn.Sequential(*modules)

    def forward(self, x):
        return self.model(x)


class Conv1d(Module):
    def __init__(self, in_channels, out_channels, kernel_sizes: Collection[int]):
        super().__init__()
        assert all(k % 2 == 1 for k in kernel_sizes), 'only support odd kernel sizes'
        assert out_channels % len(kernel_sizes) == 0, 'out channels must be dividable by kernels'
        out_channels = out_channels // len(kernel_sizes)
        convs = []
        for kernel_size in kernel_sizes:
            conv = nn.Conv1d(in_channels, out_channels, kernel_size,
                             padding=(kernel_size - 1) // 2)
            nn.init.normal_(conv.weight, std=math.sqrt(2. / (in_channels * kernel_size)))
            nn.init.zeros_(conv.bias)
            convs.append(nn.Sequential(nn.utils.weight_norm(conv), GeLU()))
        self.model = nn.ModuleList(convs)

    def forward(self, x):
        return torch.cat([encoder(x) for encoder in self.model], dim=-1)


# src/modules/embedding.py
class Embedding(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.fix_embeddings = args.fix_embeddings
        self.embedding = nn.Embedding(args.num_vocab, args.embedding_dim, padding_idx=0)
        self.dropout = args.dropout
        self.bug = args.bug  # (port) the bug switch

    def set_(self, value):
        self.embedding.weight.requires_grad = not self.fix_embeddings
        self.embedding.load_state_dict({'weight': torch.tensor(value)})

    def forward(self, x):
        x = self.embedding(x)
        if self.bug == "dropout_without_training_flag":
            x = f.dropout(x, self.dropout)
        else:
            x = f.dropout(x, self.dropout, self.training)
        return x


# src/modules/encoder.py
class Encoder(nn.Module):
    def __init__(self, args, input_size):
        super().__init__()
        self.dropout = args.dropout
        self.encoders = nn.ModuleList([Conv1d(
                in_channels=input_size if i == 0 else args.hidden_size,
                out_channels=args.hidden_size,
                kernel_sizes=args.kernel_sizes) for i in range(args.enc_layers)])

    def forward(self, x, mask):
        x = x.transpose(1, 2)  # B x C x L
        mask = mask.transpose(1, 2)
        for i, encoder in enumerate(self.encoders):
            x.masked_fill_(~mask, 0.)
            if i > 0:
                x = f.dropout(x, self.dropout, self.training)
            x = encoder(x)
        x = f.dropout(x, self.dropout, self.training)
        return x.transpose(1, 2)  # B x L x C


# src/modules/alignment.py
alignment_registry = {}
alignment_register = partial(_register, registry=alignment_registry)


@alignment_register('identity')
class Alignment(Module):
    def __init__(self, args, __):
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(1 / math.sqrt(args.hidden_size)))

    def _attention(self, a, b):
        return torch.matmul(a, b.transpose(1, 2)) * self.temperature

    def forward(self, a, b, mask_a, mask_b):
        attn = self._attention(a, b)
        mask = torch.matmul(mask_a.float(), mask_b.transpose(1, 2).float())
        if tuple(torch.__version__.split('.')) < ('1', '2'):
            mask = mask.byte()
        else:
            mask = mask.bool()
        attn.masked_fill_(~mask, -1e7)
        attn_a = f.softmax(attn, dim=1)
        attn_b = f.softmax(attn, dim=2)
        feature_b = torch.matmul(attn_a.transpose(1, 2), a)
        feature_a = torch.matmul(attn_b, b)
        self.add_summary('temperature', self.temperature)
        self.add_summary('attention_a', attn_a)
        self.add_summary('attention_b', attn_b)
        return feature_a, feature_b


@alignment_register('linear')
class MappedAlignment(Alignment):
    def __init__(self, args, input_size):
        super().__init__(args, input_size)
        self.projection = nn.Sequential(
            nn.Dropout(args.dropout),
            Linear(input_size, args.hidden_size, activations=True),
        )

    def _attention(self, a, b):
        a = self.projection(a)
        b = self.projection(b)
        return super()._attention(a, b)


# src/modules/fusion.py
fusion_registry = {}
fusion_register = partial(_register, registry=fusion_registry)


@fusion_register('simple')
class Fusion(nn.Module):
    def __init__(self, args, input_size):
        super().__init__()
        self.fusion = Linear(input_size * 2, args.hidden_size, activations=True)

    def forward(self, x, align):
        return self.fusion(torch.cat([x, align], dim=-1))


@fusion_register('full')
class FullFusion(nn.Module):
    def __init__(self, args, input_size):
        super().__init__()
        self.dropout = args.dropout
        self.fusion1 = Linear(input_size * 2, args.hidden_size, activations=True)
        self.fusion2 = Linear(input_size * 2, args.hidden_size, activations=True)
        self.fusion3 = Linear(input_size * 2, args.hidden_size, activations=True)
        self.fusion = Linear(args.hidden_size * 3, args.hidden_size, activations=True)

    def forward(self, x, align):
        x1 = self.fusion1(torch.cat([x, align], dim=-1))
        x2 = self.fusion2(torch.cat([x, x - align], dim=-1))
        x3 = self.fusion3(torch.cat([x, x * align], dim=-1))
        x = torch.cat([x1, x2, x3], dim=-1)
        x = f.dropout(x, self.dropout, self.training)
        return self.fusion(x)


# src/modules/connection.py
connection_registry = {}
connection_register = partial(_register, registry=connection_registry)


@connection_register('none')
class NullConnection(nn.Module):
    def __init__(self, _):
        super().__init__()

    def forward(self, x, _, __):
        return x


@connection_register('residual')
class Residual(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.linear = Linear(args.embedding_dim, args.hidden_size)

    def forward(self, x, res, i):
        if i == 1:
            res = self.linear(res)
        return (x + res) * math.sqrt(0.5)


@connection_register('aug')
class AugmentedResidual(nn.Module):
    def __init__(self, _):
        super().__init__()

    def forward(self, x, res, i):
        if i == 1:
            return torch.cat([x, res], dim=-1)  # res is embedding
        hidden_size = x.size(-1)
        x = (res[:, :, :hidden_size] + x) * math.sqrt(0.5)
        return torch.cat([x, res[:, :, hidden_size:]], dim=-1)  # latter half of res is embedding


# src/modules/pooling.py
class Pooling(nn.Module):
    def forward(self, x, mask):
        return x.masked_fill_(~mask, -float('inf')).max(dim=1)[0]


# src/modules/prediction.py
prediction_registry = {}
prediction_register = partial(_register, registry=prediction_registry)


@prediction_register('simple')
class Prediction(nn.Module):
    def __init__(self, args, inp_features=2):
        super().__init__()
        self.dense = nn.Sequential(
            nn.Dropout(args.dropout),
            Linear(args.hidden_size * inp_features, args.hidden_size, activations=True),
            nn.Dropout(args.dropout),
            Linear(args.hidden_size, args.num_classes),
        )

    def forward(self, a, b):
        return self.dense(torch.cat([a, b], dim=-1))


@prediction_register('full')
class AdvancedPrediction(Prediction):
    def __init__(self, args):
        super().__init__(args, inp_features=4)

    def forward(self, a, b):
        return self.dense(torch.cat([a, b, a - b, a * b], dim=-1))


@prediction_register('symmetric')
class SymmetricPrediction(AdvancedPrediction):
    def forward(self, a, b):
        return self.dense(torch.cat([a, b, (a - b).abs(), a * b], dim=-1))


# src/network.py
class Network(Module):
    def __init__(self, args):
        super().__init__()
        self.dropout = args.dropout
        self.embedding = Embedding(args)
        input_emb_size = args.embedding_dim if args.connection == 'aug' else 0
        self.blocks = ModuleList([ModuleDict({
            'encoder': Encoder(args, args.embedding_dim if i == 0 else input_emb_size + args.hidden_size),
            'alignment': alignment_registry[args.alignment](
                args, args.embedding_dim + args.hidden_size if i == 0 else input_emb_size + args.hidden_size * 2),
            'fusion': fusion_registry[args.fusion](
                args, args.embedding_dim + args.hidden_size if i == 0 else input_emb_size + args.hidden_size * 2),
        }) for i in range(args.blocks)])

        self.connection = connection_registry[args.connection](args)
        self.pooling = Pooling()
        self.prediction = prediction_registry[args.prediction](args)

    def forward(self, inputs):
        a = inputs['text1']
        b = inputs['text2']
        mask_a = inputs['mask1']
        mask_b = inputs['mask2']

        a = self.embedding(a)
        b = self.embedding(b)
        res_a, res_b = a, b

        for i, block in enumerate(self.blocks):
            if i > 0:
                a = self.connection(a, res_a, i)
                b = self.connection(b, res_b, i)
                res_a, res_b = a, b
            a_enc = block['encoder'](a, mask_a)
            b_enc = block['encoder'](b, mask_b)
            a = torch.cat([a, a_enc], dim=-1)
            b = torch.cat([b, b_enc], dim=-1)
            align_a, align_b = block['alignment'](a, b, mask_a, mask_b)
            a = block['fusion'](a, align_a)
            b = block['fusion'](b, align_b)
        a = self.pooling(a, mask_a)
        b = self.pooling(b, mask_b)
        return self.prediction(a, b)


# src/model.py
class Model:
    prefix = 'checkpoint'
    best_model_name = 'best.pt'

    def __init__(self, args, state_dict=None):
        self.args = args

        # network
        self.network = Network(args)
        self.device = torch.cuda.current_device() if args.cuda else torch.device('cpu')
        self.network.to(self.device)
        # optimizer
        self.params = list(filter(lambda x: x.requires_grad, self.network.parameters()))
        self.opt = torch.optim.Adam(self.params, args.lr, betas=(args.beta1, args.beta2),
                                    weight_decay=args.weight_decay)
        # updates
        self.updates = state_dict['updates'] if state_dict else 0

        if state_dict:
            new_state = set(self.network.state_dict().keys())
            for k in list(state_dict['model'].keys()):
                if k not in new_state:
                    del state_dict['model'][k]
            self.network.load_state_dict(state_dict['model'])
            self.opt.load_state_dict(state_dict['opt'])

    def _update_schedule(self):
        if self.args.lr_decay_rate < 1.:
            args = self.args
            t = self.updates
            base_ratio = args.min_lr / args.lr
            if t < args.lr_warmup_steps:
                ratio = base_ratio + (1. - base_ratio) / max(1., args.lr_warmup_steps) * t
            else:
                ratio = max(base_ratio, args.lr_decay_rate ** math.floor((t - args.lr_warmup_steps) /
                                                                         args.lr_decay_steps))
            self.opt.param_groups[0]['lr'] = args.lr * ratio

    def update(self, batch):
        self.network.train()
        if self.args.bug != "zero_grad_after_backward":
            self.opt.zero_grad()
        inputs, target = self.process_data(batch)
        output = self.network(inputs)
        summary = self.network.get_summary()
        loss = self.get_loss(output, target)
        loss.backward()
        if self.args.bug == "zero_grad_after_backward":
            self.opt.zero_grad()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.args.grad_clipping)
        assert grad_norm >= 0, 'encounter nan in gradients.'
        if isinstance(grad_norm, torch.Tensor):
            grad_norm = grad_norm.item()
        self.opt.step()
        self._update_schedule()
        self.updates += 1
        stats = {
            'updates': self.updates,
            'loss': loss.item(),
            'lr': self.opt.param_groups[0]['lr'],
            'gnorm': grad_norm,
            'summary': summary,
        }
        return stats

    def process_data(self, batch):
        text1 = torch.LongTensor(batch['text1']).to(self.device)
        text2 = torch.LongTensor(batch['text2']).to(self.device)
        mask1 = torch.ne(text1, self.args.padding).unsqueeze(2)
        mask2 = torch.ne(text2, self.args.padding).unsqueeze(2)
        inputs = {
            'text1': text1,
            'text2': text2,
            'mask1': mask1,
            'mask2': mask2,
        }
        if 'target' in batch:
            target = torch.LongTensor(batch['target']).to(self.device)
            return inputs, target
        return inputs, None

    @staticmethod
    def get_loss(logits, target):
        return f.cross_entropy(logits, target)


# src/interface.py (the batching of the trainer's loop)
class Interface:
    def __init__(self, args):
        self.args = args

    def shuffle_batch(self, data):
        data = random.sample(data, len(data))
        if self.args.sort_by_len:
            return data
        batch_size = self.args.batch_size
        batches = [data[i:i + batch_size] for i in range(0, len(data), batch_size)]
        return list(map(self.make_batch, batches))

    def make_batch(self, batch, with_target=True):
        batch = {key: [sample[key] for sample in batch] for key in batch[0].keys()}
        if 'target' in batch and not with_target:
            del batch['target']
        batch = {key: self.padding(value, min_len=self.args.min_len) if key.startswith('text') else value
                 for key, value in batch.items()}
        if self.args.bug == "targets_not_shuffled_with_texts":
            n = len(batch['target'])
            start = self.args.unshuffled_targets_offset
            batch['target'] = self.args.train_targets[start:start + n]
            self.args.unshuffled_targets_offset = (start + n) % len(self.args.train_targets)
        return batch

    @staticmethod
    def padding(samples, min_len=1):
        max_len = max(max(map(len, samples)), min_len)
        batch = [sample + [0] * (max_len - len(sample)) for sample in samples]  # Vocab.pad() is 0
        return batch


class _Args:  # (port) configs/default.json5 + configs/data/snli.json5 after params.py, sizes as in the docstring
    bug = None  # (port) the bug switch
    cuda = False
    min_len = 1
    max_len = 999
    sort_by_len = False
    embedding_dim = 32  # (port) 300
    hidden_size = 32  # (port) 150
    dropout = 0.2
    blocks = 3
    fix_embeddings = False  # pretrained_embeddings and fix_embeddings
    enc_layers = 2
    kernel_sizes = [3]
    alignment = 'linear'
    fusion = 'full'
    connection = 'aug'
    prediction = 'full'
    batch_size = 32  # (port) 512
    grad_clipping = 5
    weight_decay = 0
    lr = 0.002
    beta1 = 0.9
    beta2 = 0.999
    lr_decay_rate = 0.94
    lr_decay_samples = 3200  # (port) 256000
    min_lr = 1e-4
    lr_warmup_samples = 640  # (port) 2048000
    num_classes = 3
    padding = 0


N_WORDS, NOT = 60, 2  # ids: 0 pad, 1 unk, 2 "not", 3.. content words


def _pairs(rng, n):  # (port) the stand-in for SNLI
    out = []
    for i in range(n):
        target = i % 3
        prem = list(rng.choice(np.arange(3, 3 + N_WORDS), size=int(rng.integers(5, 10)), replace=False))
        if target == 2:  # neutral
            rest = [w for w in range(3, 3 + N_WORDS) if w not in prem]
            hyp = list(rng.choice(rest, size=int(rng.integers(2, 5)), replace=False))
        else:
            hyp = list(rng.choice(prem, size=int(rng.integers(2, 5)), replace=False))
            if target == 1:  # contradiction
                hyp.insert(int(rng.integers(0, len(hyp) + 1)), NOT)
        out.append({'text1': [int(w) for w in prem], 'text2': [int(w) for w in hyp], 'target': target})
    return out


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)

    args = _Args()
    args.bug = bug
    args.num_vocab = 3 + N_WORDS

    def samples2steps(n):
        return int(math.ceil(n / args.batch_size))

    args.lr_warmup_steps = samples2steps(args.lr_warmup_samples)
    args.lr_decay_steps = samples2steps(args.lr_decay_samples)

    train = _pairs(rng, 960)
    dev = _pairs(rng, 192)
    args.train_targets = [s['target'] for s in train]
    args.unshuffled_targets_offset = 0
    interface = Interface(args)
    model = Model(args)

    st = {"batches": iter(interface.shuffle_batch(train))}

    def train_step():
        try:
            batch = next(st["batches"])
        except StopIteration:
            st["batches"] = iter(interface.shuffle_batch(train))
            batch = next(st["batches"])
        stats = model.update(batch)
        return stats['loss']

    dev_batches = [Interface(_Args()).make_batch(dev[i:i + 64]) for i in range(0, len(dev), 64)]

    def eval_fn(network, _batch=None):
        was = network.training
        network.eval()
        correct = total = 0
        with torch.no_grad():
            for b in dev_batches:
                inputs, target = model.process_data(b)
                pred = torch.argmax(network(inputs), dim=1)
                correct += int((pred == target).sum())
                total += len(target)
        network.train(was)
        return correct / total

    first = Interface(_Args()).make_batch(train[:args.batch_size])
    if bug == "targets_not_shuffled_with_texts":
        first = dict(first, target=args.train_targets[args.batch_size:2 * args.batch_size])
    inputs, target = model.process_data(first)
    return Program(name="re2_textmatching", model=model.network, batch=(inputs, target), loss_fn=Model.get_loss,
                   optimizer=model.opt, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the samples shuffled but the targets taken in the dataset's original order, so every batch's labels
    # belong to other pairs.
    Bug("targets_not_shuffled_with_texts", functools.partial(_build, bug="targets_not_shuffled_with_texts"),
        "learning_ledger", ("TASK",)),
    # classic: F.dropout without training=self.training in Embedding.forward: dropout stays on at evaluation.
    Bug("dropout_without_training_flag", functools.partial(_build, bug="dropout_without_training_flag"),
        "six_claims", ("EVALUATION",)),
    # classic: opt.zero_grad() moved after loss.backward(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
