# ruff: noqa: C400
"""castorini's Hedwig: the regularized LSTM (``RegLSTM``) for multi-label document classification on Reuters, run
with the README's quick-start command (``--mode static --batch-size 32 --lr 0.01 --bidirectional --num-layers 1
--wdrop 0.1 --embed-droprate 0.2 --dropout 0.5 --beta-ema 0.99``): frozen pretrained word vectors
(``nn.Embedding.from_pretrained(..., freeze=True)``) with embedding dropout, a bidirectional LSTM whose
``weight_hh_l0`` goes through ``WeightDrop``, packed by length, ReLU + max-pool over time, dropout, a linear layer;
``ClassificationTrainer.train_epoch``'s multi-label branch (``binary_cross_entropy_with_logits`` on the multi-hot
labels), Adam over the parameters that require grad, and temporal averaging (``update_ema`` after every step, the
bias-corrected average loaded for the dev evaluation under ``model.eval()`` and swapped back after).

Source: https://github.com/castorini/hedwig
Commit: 277814c401f4d17f5489e3c8c6deefc1af9eeffd
Files: models/reg_lstm/__main__.py, models/reg_lstm/model.py, models/reg_lstm/weight_drop.py,
models/reg_lstm/embed_regularize.py, models/reg_lstm/args.py, models/reg_lstm/README.md, models/args.py,
common/trainers/classification_trainer.py, common/evaluators/classification_evaluator.py, datasets/reuters.py
License: Apache-2.0 (the repository); weight_drop.py and embed_regularize.py carry their BSD-3-Clause header
(from salesforce/awd-lstm-lm)
Domain: NLP classifier (multi-label document classification, regularized BiLSTM)

Deviations from the original:
- sizes: ``hidden_dim`` 512 -> 32, ``words_dim`` 300 -> 32, 90 Reuters classes -> 8, batch 32 -> 16;
- data: the Reuters TSV files and the word2vec GoogleNews vectors cannot be downloaded: 512 synthetic documents made
  from ``seed`` (6-20 filler words, plus for each of the 8 topics its keyword with probability 0.3; the multi-hot
  label marks the topics whose keyword occurs) and word vectors drawn from ``seed``; ``clean_string`` runs on them
  as written; torchtext is not installed: the vocabulary (``<unk>`` 0, ``<pad>`` 1, then by frequency), the
  vectors of words without one (``UnknownWordVecCache.unk``'s uniform(-0.25, 0.25)) and ``BucketIterator``'s
  padded ``(text, lengths)`` batches sorted by decreasing length within the batch (``sort_within_batch=True``) are
  written out in plain torch; a shuffled pass over the training set per epoch;
- one ``train_step`` is one iteration of ``train_epoch``; the dev evaluation, the snapshots, early stopping and the
  progress prints are left out of the step; ``eval_fn`` is ``ClassificationEvaluator.get_scores``'s multi-label
  branch on one batch (EMA parameters loaded and restored as written; accuracy of the rounded sigmoid instead of
  sklearn's metrics, which are not installed); ``F.sigmoid`` is ``torch.sigmoid``; no GPU, the ``print`` in
  ``WeightDrop._setup`` left out.
"""

from __future__ import annotations

import functools
import pathlib
import re
import sys
from copy import deepcopy
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES = 8
FILLER = [f"w{i}" for i in range(50)]
KEYWORDS = ["grain", "crude", "trade", "interest", "money", "ship", "sugar", "coffee"]


# ---- datasets/reuters.py -------------------------------------------------------------------------------------------

def clean_string(string):
    """
    Performs tokenization and string cleaning for the Reuters dataset
    """
    string = re.sub(r"[^A-Za-z0-9(),!?\'`]", " ", string)
    string = re.sub(r"\s{2,}", " ", string)
    return string.lower().strip().split()


# ---- models/reg_lstm/embed_regularize.py (BSD-3-Clause, from salesforce/awd-lstm-lm) -------------------------------

def embedded_dropout(embed, words, dropout=0.1, scale=None):
    if dropout:
        mask = embed.weight.data.new().resize_((embed.weight.size(0), 1)).bernoulli_(1 - dropout).expand_as(embed.weight) / (1 - dropout)
        masked_embed_weight = mask * embed.weight
    else:
        masked_embed_weight = embed.weight
    if scale:
        masked_embed_weight = scale.expand_as(masked_embed_weight) * masked_embed_weight

    padding_idx = embed.padding_idx
    if padding_idx is None:
        padding_idx = -1

    X = torch.nn.functional.embedding(words, masked_embed_weight,
                                      padding_idx, embed.max_norm, embed.norm_type,
                                      embed.scale_grad_by_freq, embed.sparse
                                      )
    return X


# ---- models/reg_lstm/weight_drop.py (BSD-3-Clause, from salesforce/awd-lstm-lm) ------------------------------------

class WeightDrop(torch.nn.Module):

    def __init__(self, module, weights, dropout=0, variational=False):
        super().__init__()
        self.module = module
        self.weights = weights
        self.dropout = dropout
        self.variational = variational
        self._setup()

    def null_function(*args, **kwargs):
        # We need to replace flatten_parameters with a nothing function
        return

    def _setup(self):
        # Terrible temporary solution to an issue regarding compacting weights re: CUDNN RNN
        if issubclass(type(self.module), torch.nn.RNNBase):
            self.module.flatten_parameters = self.null_function

        for name_w in self.weights:
            w = getattr(self.module, name_w)
            del self.module._parameters[name_w]
            self.module.register_parameter(name_w + '_raw', Parameter(w.data))

    def _setweights(self):
        for name_w in self.weights:
            raw_w = getattr(self.module, name_w + '_raw')
            w = None
            if self.variational:
                mask = torch.ones(raw_w.size(0), 1)
                mask = torch.nn.functional.dropout(mask, p=self.dropout, training=True)
                w = mask.expand_as(raw_w) * raw_w
            else:
                w = torch.nn.functional.dropout(raw_w, p=self.dropout, training=self.training)
            setattr(self.module, name_w, w)

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)


# ---- models/reg_lstm/model.py --------------------------------------------------------------------------------------

class RegLSTM(nn.Module):

    def __init__(self, config):
        super().__init__()
        dataset = config.dataset
        target_class = config.target_class
        self.is_bidirectional = config.bidirectional
        self.has_bottleneck_layer = config.bottleneck_layer
        self.mode = config.mode
        self.tar = config.tar
        self.ar = config.ar
        self.beta_ema = config.beta_ema  # Temporal averaging
        self.wdrop = config.wdrop  # Weight dropping
        self.embed_droprate = config.embed_droprate  # Embedding dropout
        self.bug = config.bug

        if config.mode == 'rand':
            rand_embed_init = torch.Tensor(config.words_num, config.words_dim).uniform_(-0.25, 0.25)
            self.embed = nn.Embedding.from_pretrained(rand_embed_init, freeze=False)
        elif config.mode == 'static':
            self.static_embed = nn.Embedding.from_pretrained(dataset.TEXT_FIELD.vocab.vectors, freeze=True)
        elif config.mode == 'non-static':
            self.non_static_embed = nn.Embedding.from_pretrained(dataset.TEXT_FIELD.vocab.vectors, freeze=False)
        else:
            raise ValueError("Unsupported Mode")

        self.lstm = nn.LSTM(config.words_dim, config.hidden_dim, dropout=config.dropout, num_layers=config.num_layers,
                            bidirectional=self.is_bidirectional, batch_first=True)

        if self.wdrop:
            self.lstm = WeightDrop(self.lstm, ['weight_hh_l0'], dropout=self.wdrop)
        self.dropout = nn.Dropout(config.dropout)

        if self.has_bottleneck_layer:
            if self.is_bidirectional:
                self.fc1 = nn.Linear(2 * config.hidden_dim, config.hidden_dim)  # Hidden Bottleneck Layer
                self.fc2 = nn.Linear(config.hidden_dim, target_class)
            else:
                self.fc1 = nn.Linear(config.hidden_dim, config.hidden_dim//2)   # Hidden Bottleneck Layer
                self.fc2 = nn.Linear(config.hidden_dim//2, target_class)
        else:
            if self.is_bidirectional:
                self.fc1 = nn.Linear(2 * config.hidden_dim, target_class)
            else:
                self.fc1 = nn.Linear(config.hidden_dim, target_class)

        if self.beta_ema > 0:
            self.avg_param = deepcopy(list(p.data for p in self.parameters()))
            self.steps_ema = 0.

    def forward(self, x, lengths=None):
        if self.bug == "embed_dropout_at_eval":
            # the `if self.training else 0` guard left out: the embedding rows are dropped at evaluation too
            x = embedded_dropout(self.static_embed, x, dropout=self.embed_droprate) if self.embed_droprate else self.static_embed(x)
        elif self.mode == 'rand':
            x = embedded_dropout(self.embed, x, dropout=self.embed_droprate if self.training else 0) if self.embed_droprate else self.embed(x)
        elif self.mode == 'static':
            x = embedded_dropout(self.static_embed, x, dropout=self.embed_droprate if self.training else 0) if self.embed_droprate else self.static_embed(x)
        elif self.mode == 'non-static':
            x = embedded_dropout(self.non_static_embed, x, dropout=self.embed_droprate if self.training else 0) if self.embed_droprate else self.non_static_embed(x)
        else:
            raise ValueError("Unsupported Mode")
        if lengths is not None:
            x = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        rnn_outs, _ = self.lstm(x)
        rnn_outs_temp = rnn_outs

        if lengths is not None:
            rnn_outs, _ = torch.nn.utils.rnn.pad_packed_sequence(rnn_outs, batch_first=True)
            rnn_outs_temp, _ = torch.nn.utils.rnn.pad_packed_sequence(rnn_outs_temp, batch_first=True)

        x = F.relu(torch.transpose(rnn_outs_temp, 1, 2))
        x = F.max_pool1d(x, x.size(2)).squeeze(2)
        x = self.dropout(x)
        if self.has_bottleneck_layer:
            x = F.relu(self.fc1(x))
            # x = self.dropout(x)
            if self.tar or self.ar:
                return self.fc2(x), rnn_outs.permute(1, 0, 2)
            return self.fc2(x)
        else:
            if self.tar or self.ar:
                return self.fc1(x), rnn_outs.permute(1, 0, 2)
            return self.fc1(x)

    def update_ema(self):
        self.steps_ema += 1
        for p, avg_p in zip(self.parameters(), self.avg_param):
            avg_p.mul_(self.beta_ema).add_((1-self.beta_ema)*p.data)

    def load_ema_params(self):
        for p, avg_p in zip(self.parameters(), self.avg_param):
            p.data.copy_(avg_p/(1-self.beta_ema**self.steps_ema))

    def load_params(self, params):
        for p, avg_p in zip(self.parameters(), params):
            p.data.copy_(avg_p)

    def get_params(self):
        params = deepcopy(list(p.data for p in self.parameters()))
        return params


# ---- torchtext Field / BucketIterator, written out -----------------------------------------------------------------

def make_documents(rng, n):
    docs, labels = [], []
    for _ in range(n):
        words = [str(w) for w in rng.choice(FILLER, size=rng.integers(6, 21))]
        label = [0.0] * NUM_CLASSES
        for c, kw in enumerate(KEYWORDS):
            if rng.random() < 0.3:
                words.insert(int(rng.integers(0, len(words) + 1)), kw.upper() + ".")
                label[c] = 1.0
        docs.append(" ".join(words))
        labels.append(label)
    return docs, labels


def batches(examples, batch_size, rng):
    order = rng.permutation(len(examples))
    for i in range(0, len(order), batch_size):
        chunk = sorted((examples[j] for j in order[i:i + batch_size]), key=lambda ex: -len(ex[0]))
        lengths = torch.tensor([len(ex[0]) for ex in chunk])
        text = torch.ones(len(chunk), int(lengths.max()), dtype=torch.long)  # <pad> = 1
        for r, ex in enumerate(chunk):
            text[r, :len(ex[0])] = torch.tensor(ex[0])
        label = torch.tensor([ex[1] for ex in chunk])
        yield SimpleNamespace(text=(text, lengths), label=label, batch_size=len(chunk))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    docs, labels = make_documents(rng, 512)
    tokens = [clean_string(d) for d in docs]
    counts = {}
    for t in tokens:
        for w in t:
            counts[w] = counts.get(w, 0) + 1
    itos = ["<unk>", "<pad>"] + sorted(counts, key=lambda w: (-counts[w], w))
    stoi = {w: i for i, w in enumerate(itos)}
    words_dim = 32
    pretrained = {w: torch.tensor(rng.normal(size=words_dim), dtype=torch.float32) for w in FILLER[:40] + [k for k in KEYWORDS]}
    vectors = torch.Tensor(len(itos), words_dim).uniform_(-0.25, 0.25)  # UnknownWordVecCache.unk
    for w, i in stoi.items():
        if w in pretrained:
            vectors[i] = pretrained[w]
    examples = [([stoi[w] for w in t], lab) for t, lab in zip(tokens, labels)]

    args = SimpleNamespace(bidirectional=True, bottleneck_layer=False, num_layers=1, hidden_dim=32, mode='static',
                           words_dim=words_dim, dropout=0.5, wdrop=0.1, beta_ema=0.99, embed_droprate=0.2, tar=0.0,
                           ar=0.0, lr=0.01, weight_decay=0, batch_size=16, bug=bug)
    config = deepcopy(args)
    config.dataset = SimpleNamespace(TEXT_FIELD=SimpleNamespace(vocab=SimpleNamespace(vectors=vectors)))
    config.target_class = NUM_CLASSES
    config.words_num = len(itos)
    model = RegLSTM(config)

    parameter = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = torch.optim.Adam(parameter, lr=args.lr, weight_decay=args.weight_decay)
    trainer_config = {'optimizer': optimizer, 'batch_size': args.batch_size, 'is_multilabel': True}
    if bug == "multilabel_flag_missing":
        # 'is_multilabel': dataset_class.IS_MULTILABEL left out of the trainer config: the single-label branch runs
        del trainer_config['is_multilabel']
    loader_rng = np.random.default_rng(seed + 1)
    state = {"it": None}

    def train_step():
        try:
            batch = next(state["it"])
        except (StopIteration, TypeError):  # for epoch in range(1, epochs + 1): self.train_epoch(epoch)
            state["it"] = batches(examples, args.batch_size, loader_rng)
            batch = next(state["it"])
        model.train()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        if hasattr(model, 'tar') and model.tar:
            scores, rnn_outs = model(batch.text[0], lengths=batch.text[1])
        else:
            scores = model(batch.text[0], lengths=batch.text[1])

        if trainer_config.get('is_multilabel'):
            loss = F.binary_cross_entropy_with_logits(scores, batch.label.float())
        else:
            loss = F.cross_entropy(scores, torch.argmax(batch.label.data, dim=1))

        if hasattr(model, 'tar') and model.tar:
            loss = loss + model.tar * (rnn_outs[1:] - rnn_outs[:-1]).pow(2).mean()
        if hasattr(model, 'ar') and model.ar:
            loss = loss + model.ar * (rnn_outs[:]).pow(2).mean()

        loss.backward()
        optimizer.step()

        if hasattr(model, 'beta_ema') and model.beta_ema > 0:
            # Temporal averaging
            model.update_ema()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        if hasattr(model, 'beta_ema') and model.beta_ema > 0 and model.steps_ema > 0:
            old_params = model.get_params()
            model.load_ema_params()
        with torch.no_grad():
            scores = model(batch.text[0], lengths=batch.text[1])
            scores_rounded = torch.sigmoid(scores).round().long()
        if hasattr(model, 'beta_ema') and model.beta_ema > 0 and model.steps_ema > 0:
            model.load_params(old_params)
        model.train()
        return float((scores_rounded == batch.label.long()).all(dim=1).float().mean())

    first = next(batches(examples, args.batch_size, np.random.default_rng(seed + 2)))
    return Program(name="hedwig_reglstm_reuters", model=model, batch=first,
                   loss_fn=lambda scores, b: F.binary_cross_entropy_with_logits(scores, b.label.float()),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, frozen=("static_embed.weight",))


build = functools.partial(_build)

BUGS = [
    # classic: 'is_multilabel' missing from trainer_config (the evaluators get it set, the trainer does not): the
    # multi-hot Reuters labels go through the single-label branch, cross-entropy against argmax(label), i.e. only
    # the first topic of each document (and topic 0 for documents without one).
    Bug("multilabel_flag_missing", functools.partial(_build, bug="multilabel_flag_missing"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: embedded_dropout called without the `if self.training else 0` guard: a fifth of the vocabulary's
    # embedding rows are zeroed at every evaluation too.
    Bug("embed_dropout_at_eval", functools.partial(_build, bug="embed_dropout_at_eval"), "six_claims",
        ("EVALUATION",)),
    # classic: self.optimizer.zero_grad() left out of train_epoch: the gradients accumulate over iterations.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
