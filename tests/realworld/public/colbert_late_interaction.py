"""ColBERT (v1) passage ranking by late interaction: one BERT encodes the query (``[CLS] [Q] ... [SEP]`` padded with
``[MASK]`` to ``query_maxlen``) and the passage (``[CLS] [D] ... [SEP]``), a linear layer projects every token to
``dim``, passage tokens that are padding or punctuation are masked out, the embeddings are L2-normalized, and the score
is the sum over query tokens of the best match among passage tokens (MaxSim; here the README's ``--similarity l2``:
minus the squared distance). Training reads ``<query, positive, negative>`` triples (``EagerBatcher``,
``tensorize_triples``), scores the positives and negatives of a batch in one call, and applies cross-entropy with
label 0 over ``scores.view(2, -1).permute(1, 0)``; AdamW (eps 1e-8), gradient clipping 2.0, ``zero_grad`` after the
step (``MixedPrecisionManager``).

Source: https://github.com/stanford-futuredata/ColBERT
Commit: 706a7265b06c6b8de1e3236294394e5ada92134e
Files: colbert/train.py, colbert/training/training.py, colbert/training/eager_batcher.py,
  colbert/modeling/colbert.py, colbert/modeling/tokenization/query_tokenization.py,
  colbert/modeling/tokenization/doc_tokenization.py, colbert/modeling/tokenization/utils.py, colbert/utils/amp.py,
  colbert/utils/parser.py, README.md (training command) -- the ``colbertv1`` branch
License: MIT (Copyright (c) 2019, 2020 Stanford Future Data Systems; full text in LICENSES/stanford-futuredata-ColBERT.txt)
Domain: information retrieval, neural passage ranking (late-interaction dual encoder)

Deviations from the original:
- sizes: bert-base-uncased (pre-trained) -> a BertModel from a tiny ``BertConfig`` (hidden 32, 2 layers, 2 heads,
  intermediate 64, vocabulary 145) with random weights (``ColBERT(config, ...)`` instead of
  ``ColBERT.from_pretrained('bert-base-uncased', ...)``; ``self.init_weights()`` becomes ``self.post_init()``, which
  calls it in transformers 5 after the set-up it now needs); dim 128 -> 16,
  query_maxlen 32 -> 8, doc_maxlen 180 -> 14, bsize 32 -> 8 (accum 1, similarity l2, mask-punctuation as in the
  README command);
- lr 3e-6 (fine-tuning a pre-trained BERT) -> 3e-4: the tiny BERT starts from random weights and must move within
  the self-check's steps;
- the README command's ``--amp`` (CUDA autocast and GradScaler) is off: ``MixedPrecisionManager``'s non-AMP path runs
  (the same clipping at 2.0, step and zero_grad); DEVICE is the CPU; distributed training, ``Run`` logging,
  ``print_progress`` and checkpointing are left out;
- the tokenizer: ``BertTokenizerFast.from_pretrained('bert-base-uncased')`` (a download) is replaced by a
  ``BertTokenizerFast`` built on a small vocabulary laid out like bert-base-uncased's special ids ([PAD] 0,
  [unused0] 1, [unused1] 2, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, so the original asserts hold) followed by
  ``.``, ``,`` and 40 words; the query/doc tokenizers and ``ColBERT``'s punctuation skiplist use it unchanged;
- data: MS MARCO's ``triples.train.small.tsv`` is replaced by synthetic triples made from ``seed``, read from memory
  (``io.StringIO`` for ``open``): a query is 3-4 words; its positive passage holds every query word among random
  filler words and commas, its negative passage only filler words that are not in the query; ``EagerBatcher``
  starts again at the end of the triples instead of stopping;
- one ``train_step`` is one iteration of ``train``'s batch loop; ``eval_fn`` scores a batch of triples and returns
  the fraction whose positive outscores its negative; the ``bug`` switches select the variants in ``BUGS``; with
  ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, UP039, PLR0402  (the original's style is kept)

from __future__ import annotations

import functools
import io
import pathlib
import random
import string
import sys
from functools import partial

import numpy as np
import torch
import torch.nn as nn
from torch.optim import AdamW
from transformers import BertConfig, BertModel, BertPreTrainedModel, BertTokenizerFast

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

DEVICE = torch.device("cpu")
SELF_CHECK_STEPS = 30

WORDS = [f"w{i}" for i in range(40)]
VOCAB = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS


class _Args:
    """The README training command's arguments (``colbert/utils/parser.py`` defaults otherwise), at the sizes above."""
    similarity = 'l2'
    dim = 16
    query_maxlen = 8
    doc_maxlen = 14
    mask_punctuation = True
    lr = 3e-4
    maxsteps = 400000
    bsize = 8
    accumsteps = 1
    amp = False
    rank = -1
    nranks = 1
    distributed = False
    lazy = False
    checkpoint = None
    resume = False


def bert_base_uncased_tokenizer():
    """Stands in for ``BertTokenizerFast.from_pretrained('bert-base-uncased')`` (see the module docstring)."""
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)})


class NullContextManager(object):
    def __init__(self, dummy_resource=None):
        self.dummy_resource = dummy_resource
    def __enter__(self):
        return self.dummy_resource
    def __exit__(self, *args):
        pass


# ---- colbert/modeling/colbert.py -------------------------------------------------------------------------------

class ColBERT(BertPreTrainedModel):
    def __init__(self, config, query_maxlen, doc_maxlen, mask_punctuation, dim=128, similarity_metric='cosine',
                 bug=None):

        super(ColBERT, self).__init__(config)

        self.query_maxlen = query_maxlen
        self.doc_maxlen = doc_maxlen
        self.similarity_metric = similarity_metric
        self.dim = dim
        self.bug = bug

        self.mask_punctuation = mask_punctuation
        self.skiplist = {}

        if self.mask_punctuation:
            self.tokenizer = bert_base_uncased_tokenizer()
            self.skiplist = {w: True
                             for symbol in string.punctuation
                             for w in [symbol, self.tokenizer.encode(symbol, add_special_tokens=False)[0]]}

        self.bert = BertModel(config)
        self.linear = nn.Linear(config.hidden_size, dim, bias=False)

        self.post_init()  # transformers 5: init_weights() needs the set-up post_init() does (it calls init_weights)

    def forward(self, Q, D):
        return self.score(self.query(*Q), self.doc(*D))

    def query(self, input_ids, attention_mask):
        input_ids, attention_mask = input_ids.to(DEVICE), attention_mask.to(DEVICE)
        Q = self.bert(input_ids, attention_mask=attention_mask)[0]
        Q = self.linear(Q)

        return torch.nn.functional.normalize(Q, p=2, dim=2)

    def doc(self, input_ids, attention_mask, keep_dims=True):
        input_ids, attention_mask = input_ids.to(DEVICE), attention_mask.to(DEVICE)
        D = self.bert(input_ids, attention_mask=attention_mask)[0]
        D = self.linear(D)

        mask = torch.tensor(self.mask(input_ids), device=DEVICE).unsqueeze(2).float()
        if self.bug != "doc_mask_dropped":
            D = D * mask

        D = torch.nn.functional.normalize(D, p=2, dim=2)

        if not keep_dims:
            D, mask = D.cpu().to(dtype=torch.float16), mask.cpu().bool().squeeze(-1)
            D = [d[mask[idx]] for idx, d in enumerate(D)]

        return D

    def score(self, Q, D):
        if self.similarity_metric == 'cosine':
            return (Q @ D.permute(0, 2, 1)).max(2).values.sum(1)

        assert self.similarity_metric == 'l2'
        return (-1.0 * ((Q.unsqueeze(2) - D.unsqueeze(1))**2).sum(-1)).max(-1).values.sum(-1)

    def mask(self, input_ids):
        mask = [[(x not in self.skiplist) and (x != 0) for x in d] for d in input_ids.cpu().tolist()]
        return mask


# ---- colbert/modeling/tokenization/ ----------------------------------------------------------------------------

class QueryTokenizer():
    def __init__(self, query_maxlen):
        self.tok = bert_base_uncased_tokenizer()
        self.query_maxlen = query_maxlen

        self.Q_marker_token, self.Q_marker_token_id = '[Q]', self.tok.convert_tokens_to_ids('[unused0]')
        self.cls_token, self.cls_token_id = self.tok.cls_token, self.tok.cls_token_id
        self.sep_token, self.sep_token_id = self.tok.sep_token, self.tok.sep_token_id
        self.mask_token, self.mask_token_id = self.tok.mask_token, self.tok.mask_token_id

        assert self.Q_marker_token_id == 1 and self.mask_token_id == 103

    def tensorize(self, batch_text, bsize=None):
        assert type(batch_text) in [list, tuple], (type(batch_text))

        # add placehold for the [Q] marker
        batch_text = ['. ' + x for x in batch_text]

        obj = self.tok(batch_text, padding='max_length', truncation=True,
                       return_tensors='pt', max_length=self.query_maxlen)

        ids, mask = obj['input_ids'], obj['attention_mask']

        # postprocess for the [Q] marker and the [MASK] augmentation
        ids[:, 1] = self.Q_marker_token_id
        ids[ids == 0] = self.mask_token_id

        if bsize:
            batches = _split_into_batches(ids, mask, bsize)
            return batches

        return ids, mask


class DocTokenizer():
    def __init__(self, doc_maxlen):
        self.tok = bert_base_uncased_tokenizer()
        self.doc_maxlen = doc_maxlen

        self.D_marker_token, self.D_marker_token_id = '[D]', self.tok.convert_tokens_to_ids('[unused1]')
        self.cls_token, self.cls_token_id = self.tok.cls_token, self.tok.cls_token_id
        self.sep_token, self.sep_token_id = self.tok.sep_token, self.tok.sep_token_id

        assert self.D_marker_token_id == 2

    def tensorize(self, batch_text, bsize=None):
        assert type(batch_text) in [list, tuple], (type(batch_text))

        # add placehold for the [D] marker
        batch_text = ['. ' + x for x in batch_text]

        obj = self.tok(batch_text, padding='longest', truncation='longest_first',
                       return_tensors='pt', max_length=self.doc_maxlen)

        ids, mask = obj['input_ids'], obj['attention_mask']

        # postprocess for the [D] marker
        ids[:, 1] = self.D_marker_token_id

        if bsize:
            ids, mask, reverse_indices = _sort_by_length(ids, mask, bsize)
            batches = _split_into_batches(ids, mask, bsize)
            return batches, reverse_indices

        return ids, mask


def tensorize_triples(query_tokenizer, doc_tokenizer, queries, positives, negatives, bsize):
    assert len(queries) == len(positives) == len(negatives)
    assert bsize is None or len(queries) % bsize == 0

    N = len(queries)
    Q_ids, Q_mask = query_tokenizer.tensorize(queries)
    D_ids, D_mask = doc_tokenizer.tensorize(positives + negatives)
    D_ids, D_mask = D_ids.view(2, N, -1), D_mask.view(2, N, -1)

    # Compute max among {length of i^th positive, length of i^th negative} for i \in N
    maxlens = D_mask.sum(-1).max(0).values

    # Sort by maxlens
    indices = maxlens.sort().indices
    Q_ids, Q_mask = Q_ids[indices], Q_mask[indices]
    D_ids, D_mask = D_ids[:, indices], D_mask[:, indices]

    (positive_ids, negative_ids), (positive_mask, negative_mask) = D_ids, D_mask

    query_batches = _split_into_batches(Q_ids, Q_mask, bsize)
    positive_batches = _split_into_batches(positive_ids, positive_mask, bsize)
    negative_batches = _split_into_batches(negative_ids, negative_mask, bsize)

    batches = []
    for (q_ids, q_mask), (p_ids, p_mask), (n_ids, n_mask) in zip(query_batches, positive_batches, negative_batches):
        Q = (torch.cat((q_ids, q_ids)), torch.cat((q_mask, q_mask)))
        D = (torch.cat((p_ids, n_ids)), torch.cat((p_mask, n_mask)))
        batches.append((Q, D))

    return batches


def _sort_by_length(ids, mask, bsize):
    if ids.size(0) <= bsize:
        return ids, mask, torch.arange(ids.size(0))

    indices = mask.sum(-1).sort().indices
    reverse_indices = indices.sort().indices

    return ids[indices], mask[indices], reverse_indices


def _split_into_batches(ids, mask, bsize):
    batches = []
    for offset in range(0, ids.size(0), bsize):
        batches.append((ids[offset:offset+bsize], mask[offset:offset+bsize]))

    return batches


# ---- colbert/training/eager_batcher.py -------------------------------------------------------------------------

class EagerBatcher():
    def __init__(self, args, triples_text, rank=0, nranks=1):
        self.rank, self.nranks = rank, nranks
        self.bsize, self.accumsteps = args.bsize, args.accumsteps

        self.query_tokenizer = QueryTokenizer(args.query_maxlen)
        self.doc_tokenizer = DocTokenizer(args.doc_maxlen)
        self.tensorize_triples = partial(tensorize_triples, self.query_tokenizer, self.doc_tokenizer)

        self.triples_text = triples_text
        self._reset_triples()

    def _reset_triples(self):
        self.reader = io.StringIO(self.triples_text)
        self.position = 0

    def __iter__(self):
        return self

    def __next__(self):
        queries, positives, negatives = [], [], []

        for line_idx, line in zip(range(self.bsize * self.nranks), self.reader):
            if (self.position + line_idx) % self.nranks != self.rank:
                continue

            query, pos, neg = line.strip().split('\t')

            queries.append(query)
            positives.append(pos)
            negatives.append(neg)

        self.position += line_idx + 1

        if len(queries) < self.bsize:
            raise StopIteration

        return self.collate(queries, positives, negatives)

    def collate(self, queries, positives, negatives):
        assert len(queries) == len(positives) == len(negatives) == self.bsize

        return self.tensorize_triples(queries, positives, negatives, self.bsize // self.accumsteps)


# ---- colbert/utils/amp.py --------------------------------------------------------------------------------------

class MixedPrecisionManager():
    def __init__(self, activated):
        self.activated = activated

        if self.activated:
            self.scaler = torch.cuda.amp.GradScaler()

    def context(self):
        return torch.cuda.amp.autocast() if self.activated else NullContextManager()

    def backward(self, loss):
        if self.activated:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def step(self, colbert, optimizer):
        if self.activated:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(colbert.parameters(), 2.0)

            self.scaler.step(optimizer)
            self.scaler.update()
            optimizer.zero_grad()
        else:
            torch.nn.utils.clip_grad_norm_(colbert.parameters(), 2.0)
            optimizer.step()
            optimizer.zero_grad()


# ---- synthetic MS MARCO triples --------------------------------------------------------------------------------

def make_triples(rng, n):
    lines = []
    for _ in range(n):
        qwords = list(rng.choice(WORDS, size=int(rng.integers(3, 5)), replace=False))
        filler = [w for w in WORDS if w not in qwords]
        pos = qwords + list(rng.choice(filler, size=int(rng.integers(3, 7))))
        neg = list(rng.choice(filler, size=len(pos)))
        rng.shuffle(pos)
        for words in (pos, neg):
            if rng.random() < 0.5:
                words.insert(int(rng.integers(1, len(words))), ',')
        lines.append(' '.join(qwords) + '\t' + ' '.join(pos) + '\t' + ' '.join(neg))
    return '\n'.join(lines) + '\n'


# ---- colbert/training/training.py ------------------------------------------------------------------------------

def _build(seed, bug=None):
    args = _Args()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    reader = EagerBatcher(args, make_triples(rng, 256), (0 if args.rank == -1 else args.rank), args.nranks)

    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    colbert = ColBERT(config,
                      query_maxlen=args.query_maxlen,
                      doc_maxlen=args.doc_maxlen,
                      dim=args.dim,
                      similarity_metric=args.similarity,
                      mask_punctuation=args.mask_punctuation, bug=bug)

    colbert = colbert.to(DEVICE)
    colbert.train()

    if bug == "linear_left_out_of_optimizer":
        optimizer = AdamW(filter(lambda p: p.requires_grad, colbert.bert.parameters()), lr=args.lr, eps=1e-8)
    else:
        optimizer = AdamW(filter(lambda p: p.requires_grad, colbert.parameters()), lr=args.lr, eps=1e-8)
    optimizer.zero_grad()

    amp = MixedPrecisionManager(args.amp)
    criterion = nn.CrossEntropyLoss()
    labels = torch.zeros(args.bsize, dtype=torch.long, device=DEVICE)

    def next_steps():
        try:
            return next(reader)
        except StopIteration:
            reader._reset_triples()
            return next(reader)

    def train_step():
        BatchSteps = next_steps()
        this_batch_loss = 0.0

        for queries, passages in BatchSteps:
            with amp.context():
                if bug == "scores_viewed_not_permuted":
                    scores = colbert(queries, passages).view(-1, 2)
                else:
                    scores = colbert(queries, passages).view(2, -1).permute(1, 0)
                loss = criterion(scores, labels[:scores.size(0)])
                loss = loss / args.accumsteps

            amp.backward(loss)

            this_batch_loss += loss.item()

        amp.step(colbert, optimizer)
        return this_batch_loss

    def loss_fn(scores, labels):
        scores = scores.view(2, -1).permute(1, 0)
        return criterion(scores, labels[:scores.size(0)])

    def eval_fn(model, batch):
        """The fraction of triples whose positive passage outscores its negative."""
        (queries, passages), _labels = batch
        model.eval()
        with torch.no_grad():
            scores = model(queries, passages).view(2, -1).permute(1, 0)
        model.train()
        return float((scores[:, 0] > scores[:, 1]).float().mean())

    eval_reader = EagerBatcher(args, make_triples(rng, args.bsize))
    (Q0, D0), = next(eval_reader)
    return Program(name="colbert_late_interaction", model=colbert, batch=((Q0, D0), labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # classic layout slip: the [positives; negatives] scores reshaped with view(-1, 2) instead of view(2, -1).permute:
    # each row pairs two neighbouring passages of the same half, and label 0 no longer marks the positive.
    Bug("scores_viewed_not_permuted", functools.partial(_build, bug="scores_viewed_not_permuted"), "learning_ledger",
        ("TASK",)),
    # classic: the passage mask (padding and punctuation) computed but never applied: padding and punctuation
    # embeddings take part in every query token's MaxSim.
    Bug("doc_mask_dropped", functools.partial(_build, bug="doc_mask_dropped"), "learning_ledger", ("DEPENDENCY",)),
    # classic: AdamW built over colbert.bert.parameters(): the projection to the late-interaction space never trains.
    Bug("linear_left_out_of_optimizer", functools.partial(_build, bug="linear_left_out_of_optimizer"),
        "four_structures", ("linear",)),
]
