"""torchnlp's named-entity tagger as its README trains it (``from torchnlp.ner import *``;
``train('ner-conll2003', BiLSTMTagger, conll2003)``): ``BiLSTMTagger`` (frozen pretrained word vectors, a
unidirectional character LSTM per word whose last hidden state joins the word embedding, dropout, a bidirectional
LSTM, a tanh projection) under ``CRFOutputLayer`` (a linear projection to the tags and a linear-chain ``CRF`` whose
loss is the batch-mean negative log-likelihood: gold path score minus the forward-algorithm partition function);
``Trainer.train``'s step (``model.train()``, zero_grad, ``model.loss(batch)``, backward, step, per-step noam
``LambdaLR``) with Adam (betas 0.9/0.98) over the parameters that require gradients, the ``hparams_lstm_ner``
settings (lr 0.05, ``noam_step`` decay, dropout 0.5, ``use_crf``).

Source: https://github.com/kolloldas/torchnlp
Commit: d3dad29cf776f6a3b022acd6003f8680b983069c
Files: README.md, torchnlp/ner.py, torchnlp/tasks/sequence_tagging/main.py, torchnlp/tasks/sequence_tagging/tagger.py,
torchnlp/tasks/sequence_tagging/bilstm_tagger.py, torchnlp/modules/outputs.py, torchnlp/modules/crf.py,
torchnlp/common/train.py, torchnlp/common/model.py, torchnlp/common/hparams.py, torchnlp/common/evaluation.py,
torchnlp/data/conll.py
License: Apache-2.0 (the LICENSE file carries no copyright line; the project is Kollol Das's; full text in
LICENSES/kolloldas-torchnlp.txt)
Domain: named-entity recognition (BiLSTM-CRF sequence tagger with character features)

Deviations from the original:
- data: CoNLL 2003 through torchtext (not installed, and the files are not downloadable) is replaced by synthetic
  sentences made from ``seed``: 5-12 words over 60 word types, each with a fixed spelling of 3-6 letters; words 4-13
  are persons and 14-23 locations, in spans of one or two words tagged B-/I- (the rest O); the torchtext fields are
  written out with their layout: ``<bos>``/``<eos>`` around each sentence (words, characters and tags), each word's
  characters between ``<bos>``/``<eos>``, ``<pad>`` (index 1) for padding, specials first in every vocabulary;
  ``BucketIterator``'s length bucketing is left out (random batches); the GloVe/CharNGram vectors are a fixed random
  matrix made from ``seed`` (the word embedding is then frozen, as the tagger does with ``vocab_word.vectors``);
- sizes for 2 CPU cores: embedding_size_word 300 -> 16, embedding_size_char 25 -> 8, embedding_size_char_per_word
  25 -> 8, hidden_size 100 -> 16, batch_size 100 -> 32, learning_rate_warmup_steps 100 -> 10 (so the noam warmup
  ends within the 30 self-check steps);
- ``F.tanh`` is ``torch.tanh``; model directories, checkpoint saving/loading, tqdm, logging, the evaluator's IOB
  metrics and early stopping are left out; one ``train_step`` is one iteration of ``Trainer.train``'s batch loop;
  ``eval_fn`` is the evaluator's mean loss (``model.loss`` under ``no_grad`` in eval mode) on a given batch;
- the tagger's forward decodes (Viterbi under ``no_grad``); its training objective is ``model.loss(batch)``, so the
  declared model is ``TaggerLoss(tagger)``, a module whose forward is ``tagger.loss(batch)[0]``; ``frozen`` names the
  pretrained word vectors and the tagger's ``iterations`` counter (a parameter without gradient).
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import torch
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _torchnlp_ner_crf_lib import CRFOutputLayer, HParams

# ---- torchnlp/common/model.py, torchnlp/tasks/sequence_tagging/tagger.py, bilstm_tagger.py ------------------------

class Model(nn.Module):
    """
    Abstract base class that defines a loss() function
    """
    def __init__(self, hparams=None):
        super(Model, self).__init__()

        if hparams is None:
            raise ValueError('Must provide hparams')

        self.hparams = hparams

        # Track total iterations
        self.iterations = nn.Parameter(torch.LongTensor([0]), requires_grad=False)


class Tagger(Model):
    def __init__(self, hparams=None, vocabs=None, bug=None):
        super(Tagger, self).__init__(hparams)

        if vocabs is None or not isinstance(vocabs, tuple) or len(vocabs) != 3:
            raise ValueError('Must provide vocabs 3-tuple')

        vocab_word, vocab_char, vocab_tags = vocabs
        if vocab_word is None:
            raise ValueError('Must provide vocab_word')
        if vocab_tags is None:
            raise ValueError('Must provide vocab_word')

        self.vocabs = vocabs
        self.vocab_tags = vocab_tags # Needed during eval and prediction
        self.embedding_word = nn.Embedding(len(vocab_word), hparams.embedding_size_word)
        self.embedding_char = None

        if vocab_char is not None and hparams.embedding_size_char > 0:
            self.embedding_char = nn.Embedding(len(vocab_char), hparams.embedding_size_char)

        if vocab_word.vectors is not None:
            if hparams.embedding_size_word != vocab_word.vectors.shape[1]:
                raise ValueError(f'embedding_size should be {vocab_word.vectors.shape[1]} but got {hparams.embedding_size_word}'
                                )
            self.embedding_word.weight.data.copy_(vocab_word.vectors)
            self.embedding_word.weight.requires_grad = False

        self.output_layer = CRFOutputLayer(hparams.hidden_size, len(vocab_tags), bug=bug)

    def _embed_compute(self, batch):
        inputs_word_emb = self.embedding_word(batch.inputs_word)
        inputs_char_emb = None
        if self.embedding_char is not None:
            inputs_char_emb = self.embedding_char(batch.inputs_char.view(-1,
                                                  batch.inputs_char.shape[-1]))

        return self.compute(inputs_word_emb, inputs_char_emb)

    def forward(self, batch):
        with torch.no_grad():
            hidden = self._embed_compute(batch)
            output = self.output_layer(hidden)

        return output

    def loss(self, batch, compute_predictions=False):
        hidden = self._embed_compute(batch)
        predictions = None
        if compute_predictions:
            predictions = self.output_layer(hidden)

        loss_val = self.output_layer.loss(hidden, batch.labels)

        return loss_val, predictions


class BiLSTMTagger(Tagger):
    """
    Sequence tagger using bidirectional LSTM. For character embeddings per word
    uses (unidirectional) LSTM
    """
    def __init__(self, hparams=None, **kwargs):
        super(BiLSTMTagger, self).__init__(hparams=hparams, **kwargs)

        embedding_size = hparams.embedding_size_word
        if hparams.embedding_size_char > 0:
            embedding_size += hparams.embedding_size_char_per_word
            self.lstm_char = nn.LSTM(hparams.embedding_size_char,
                                     hparams.embedding_size_char_per_word,
                                     num_layers=1,
                                     batch_first=True,
                                     bidirectional=False)

        self.lstm = nn.LSTM(embedding_size,
                            hparams.hidden_size,
                            num_layers=hparams.num_hidden_layers,
                            batch_first=True,
                            bidirectional=True
                           )

        self.dropout = nn.Dropout(hparams.dropout)
        self.extra_layer = nn.Linear(2*hparams.hidden_size, hparams.hidden_size)

    def compute(self, inputs_word_emb, inputs_char_emb):

        if inputs_char_emb is not None:
            seq_len = inputs_word_emb.shape[1]

            # Compute per word character embeddings using unidirectional LSTM
            _, (h_n, _) = self.lstm_char(inputs_char_emb)

            inputs_char_emb = h_n.view(-1, seq_len,
                                  self.hparams.embedding_size_char_per_word)

            # Combine embeddings
            inputs_word_emb = torch.cat([inputs_word_emb, inputs_char_emb], -1)

        hidden, _ = self.lstm(self.dropout(inputs_word_emb))
        hidden_extra = torch.tanh(self.extra_layer(hidden))

        return hidden_extra


class TaggerLoss(nn.Module):
    """``tagger.loss(batch)`` as a module (the tagger's forward decodes; see the deviations)."""

    def __init__(self, tagger):
        super().__init__()
        self.tagger = tagger

    def forward(self, inputs_word, inputs_char, labels):
        batch = SimpleNamespace(inputs_word=inputs_word, inputs_char=inputs_char, labels=labels)
        return self.tagger.loss(batch)[0]


# ---- torchnlp/tasks/sequence_tagging/tagger.py, torchnlp/ner.py, torchnlp/common/train.py -------------------------

def hparams_tagging_base():
    return HParams(
        batch_size=100,
        embedding_size_word=300,
        embedding_size_char=0, # No char embeddings
        embedding_size_char_per_word=100,
        embedding_size_tags=100,
        hidden_size=128,
        learning_rate=0.2,
        learning_rate_decay=None,
        max_length=256,
        num_hidden_layers=1,
        dropout=0.2,
        optimizer_adam_beta1=0.9,
        optimizer_adam_beta2=0.98,
        use_crf=False
    )


def hparams_lstm_ner():
    hparams = hparams_tagging_base()

    return hparams.update(
        embedding_size_char=25,
        embedding_size_char_per_word=25,
        hidden_size=100,
        learning_rate=0.05,
        learning_rate_decay='noam_step',
        learning_rate_warmup_steps=100,
        num_hidden_layers=1,
        dropout=0.5,
        use_crf=True
    )


def lr_decay_noam(hparams):
    return lambda t: (
        10.0 * hparams.hidden_size**-0.5 * min(
        (t + 1) * hparams.learning_rate_warmup_steps**-1.5, (t + 1)**-0.5))


# ---- synthetic CoNLL-style data in torchtext's batch layout -------------------------------------------------------

class Vocab:
    def __init__(self, itos, vectors=None):
        self.itos, self.vectors = itos, vectors

    def __len__(self):
        return len(self.itos)


SPECIALS = ['<unk>', '<pad>', '<bos>', '<eos>']
TAGS = SPECIALS + ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC']


def make_corpus(gen, n, spellings):
    """Sentences of 5-12 word ids (4..63) with their tag ids; persons 4-13, locations 14-23, spans of 1-2 words."""
    sents = []
    for _ in range(n):
        words, tags = [], []
        while len(words) < int(torch.randint(5, 13, (1,), generator=gen)):
            r = float(torch.rand(1, generator=gen))
            kind = 'PER' if r < 0.2 else 'LOC' if r < 0.4 else None
            if kind is None:
                words.append(int(torch.randint(24, 64, (1,), generator=gen)))
                tags.append(TAGS.index('O'))
                continue
            lo = 4 if kind == 'PER' else 14
            for j in range(int(torch.randint(1, 3, (1,), generator=gen))):
                words.append(int(torch.randint(lo, lo + 10, (1,), generator=gen)))
                tags.append(TAGS.index(('B-' if j == 0 else 'I-') + kind))
        sents.append((words, tags))
    return sents


def collate(sents, spellings):
    """torchtext's padded batch: <bos>/<eos> around each sentence, characters per word, <pad> = 1."""
    T = max(len(w) for w, _ in sents) + 2
    W = max(len(spellings[w]) for s, _ in sents for w in s) + 2
    inputs_word = torch.full((len(sents), T), 1, dtype=torch.long)
    labels = torch.full((len(sents), T), 1, dtype=torch.long)
    inputs_char = torch.full((len(sents), T, W), 1, dtype=torch.long)
    for b, (words, tags) in enumerate(sents):
        inputs_word[b, :len(words) + 2] = torch.tensor([2] + words + [3])
        labels[b, :len(tags) + 2] = torch.tensor([2] + tags + [3])
        chars = [[2, 2, 3]] + [[2] + spellings[w] + [3] for w in words] + [[2, 3, 3]]
        for t, c in enumerate(chars):
            inputs_char[b, t, :len(c)] = torch.tensor(c)
    return SimpleNamespace(inputs_word=inputs_word, inputs_char=inputs_char, labels=labels)


def _data(gen, bug=None):
    spellings = {w: torch.randint(4, 30, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
                 for w in range(4, 64)}
    train_sents = make_corpus(gen, 640, spellings)
    val_sents = make_corpus(gen, 64, spellings)
    if bug == "labels_shifted":
        # the tags shifted one position against the words: each word is paired with the next word's tag
        train_sents = [(w, t[1:] + [TAGS.index('O')]) for w, t in train_sents]
    return spellings, train_sents, val_sents


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    spellings, train_sents, val_sents = _data(gen, bug)

    hparams = hparams_lstm_ner().update(embedding_size_word=16, embedding_size_char=8, embedding_size_char_per_word=8,
                                        hidden_size=16, batch_size=32, learning_rate_warmup_steps=10)
    vocab_word = Vocab(SPECIALS + [f'w{i}' for i in range(4, 64)], vectors=torch.randn(64, 16, generator=gen))
    vocab_char = Vocab(SPECIALS + [chr(97 + i) for i in range(26)])
    vocab_tags = Vocab(TAGS)
    model = BiLSTMTagger(hparams, vocabs=(vocab_word, vocab_char, vocab_tags), bug=bug)

    # Trainer.__init__
    model_params = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = optim.Adam(model_params, betas=(hparams.optimizer_adam_beta1, hparams.optimizer_adam_beta2),
                           lr=hparams.learning_rate)
    lr_scheduler_step = optim.lr_scheduler.LambdaLR(optimizer, lr_decay_noam(hparams),
                                                    last_epoch=int(model.iterations) or -1)

    state = {'order': torch.randperm(len(train_sents), generator=gen).tolist(), 'pos': 0}

    def next_batch():
        if state['pos'] + hparams.batch_size > len(train_sents):
            state['order'], state['pos'] = torch.randperm(len(train_sents), generator=gen).tolist(), 0
        idx = state['order'][state['pos']:state['pos'] + hparams.batch_size]
        state['pos'] += hparams.batch_size
        return collate([train_sents[i] for i in idx], spellings)

    def train_step():
        batch = next_batch()
        # Train mode
        model.train()

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss, _ = model.loss(batch)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()

        if lr_scheduler_step:
            lr_scheduler_step.step()

        model.iterations += 1
        return loss.detach()

    val_batch = collate(val_sents, spellings)

    def eval_fn(_model, _batch=None):
        model.eval()
        with torch.no_grad():
            loss, _predictions = model.loss(val_batch, compute_predictions=True)
        return float(loss)

    first = collate(train_sents[:hparams.batch_size], spellings)
    inputs = (first.inputs_word, first.inputs_char, first.labels)
    return Program(name="torchnlp_ner_crf", model=TaggerLoss(model), batch=(inputs, first.labels),
                   loss_fn=lambda loss, _labels: loss, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   frozen=("tagger.embedding_word.weight", "tagger.iterations"))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the tags shifted one position against the words (the first tag dropped, an O appended): every word
    # is trained on the next word's tag.
    Bug("labels_shifted", functools.partial(_build, bug="labels_shifted"), "learning_ledger", ("TASK",)),
    # classic CRF slip: the gold path's transition pairs read [to, from] while the partition function sums the
    # matrix as [from, to]: the likelihood is not normalized over the paths it scores.
    Bug("transitions_transposed_in_score", functools.partial(_build, bug="transitions_transposed_in_score"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() after loss.backward(): Adam steps on zeroed gradients.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
